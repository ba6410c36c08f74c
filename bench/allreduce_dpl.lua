-- allreduce_dpl.lua: dpl.dist all_reduce (float32 sum) timing, one rank of the
-- job (run by bench/allreduce.sh under `dplhost --nproc N`). Prints, from rank
-- 0, one line per size: "dpl <bytes> <seconds per call>" (median of 3 runs,
-- slowest rank). Calls the C API directly so the figure is the backend's.
local ffi = require 'ffi'
local dist = require('dpl').dist
dist.init_process_group{ backend = arg[1] or 'shm' }
local C = require('dpl').C
local comm = dist._comm()
local sizes = { 8, 4096, 1048576, 16777216, 67108864 }
local iters = { [8] = 20000, [4096] = 5000, [1048576] = 200, [16777216] = 20, [67108864] = 6 }
local maxb = 67108864
local buf = ffi.new('float[?]', maxb / 4)
local t = ffi.new('double[1]')
for _, bytes in ipairs(sizes) do
  local n = bytes / 4
  local it = tonumber(os.getenv('BENCH_ITERS_SCALE') or '1') * iters[bytes]
  it = math.max(2, math.floor(it))
  for _ = 1, math.max(2, it / 10) do assert(C.dpl_comm_all_reduce(comm, buf, n, 0, 0) == 0) end
  local runs = {}
  for rep = 1, 3 do
    assert(C.dpl_comm_barrier(comm) == 0)
    local t0 = C.dpl_clock()
    for _ = 1, it do
      if C.dpl_comm_all_reduce(comm, buf, n, 0, 0) ~= 0 then error(ffi.string(C.dpl_last_error())) end
    end
    t[0] = (C.dpl_clock() - t0) / it
    assert(C.dpl_comm_all_reduce(comm, t, 1, 1, 2) == 0) -- slowest rank
    runs[rep] = t[0]
  end
  table.sort(runs)
  if dist.get_rank() == 0 then print(('dpl %d %.9g'):format(bytes, runs[2])) end
end
-- DPL_COMM_CHECK=1 against the default at 1 MiB, interleaved in this process:
-- 60 pairs of adjacent blocks (20 calls each); the median of the per-pair ratios
-- cancels the machine's drift
if os.getenv('BENCH_CHECK') == '1' then
  local n = 1048576 / 4
  local ratios, best = {}, { [0] = math.huge, [1] = math.huge }
  local tb = {}
  for rep = 1, 60 do
    for chk = 0, 1 do
      C.dpl_comm_set_check(comm, chk)
      assert(C.dpl_comm_barrier(comm) == 0)
      local t0 = C.dpl_clock()
      for _ = 1, 20 do assert(C.dpl_comm_all_reduce(comm, buf, n, 0, 0) == 0) end
      t[0] = (C.dpl_clock() - t0) / 20
      assert(C.dpl_comm_all_reduce(comm, t, 1, 1, 2) == 0)
      tb[chk] = t[0]
      if t[0] < best[chk] then best[chk] = t[0] end
    end
    ratios[rep] = tb[1] / tb[0]
  end
  C.dpl_comm_set_check(comm, 0)
  table.sort(ratios)
  if dist.get_rank() == 0 then
    print(('plain 1048576 %.9g'):format(best[0]))
    print(('check 1048576 %.9g'):format(best[1]))
    print(('checkratio 1048576 %.6f'):format(ratios[30]))
  end
end
dist.destroy_process_group()
