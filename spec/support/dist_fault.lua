-- dist_fault.lua: one rank of a fault-injection run (spec/dist_faults_spec.lua).
-- Usage: dplhost dist_fault.lua <mode> <point> <faulty rank> [backend]
--   mode:  error (raise), exit (os.exit(3)), kill (SIGKILL itself), hang (stay
--          alive but never call the collective), mismatch (different count),
--          dtype (different dtype), kind (barrier against all_reduce)
--   point: init (before init_process_group), inside (while the others wait in
--          a collective), between (after a collective, before the next)
-- Healthy ranks loop on all_reduce until something fails; they print
-- "DIST-ERR <message>" and exit 1 when it does.
local ffi = require 'ffi'
local dist = require('dpl').dist
local mode, point, faulty, backend = arg[1], arg[2], tonumber(arg[3]), arg[4] or 'shm'
local rank = tonumber(os.getenv('RANK') or os.getenv('OMPI_COMM_WORLD_RANK') or '0')
local me_faulty = rank == faulty
ffi.cdef [[ int getpid(void); int kill(int pid, int sig); ]]

local function fault()
  if point == 'init' then require('dpl').C.dpl_sleep(0.3) end -- the others are in init meanwhile
  io.stderr:write(('rank %d injects %s at %s\n'):format(rank, mode, point))
  io.stderr:flush()
  if mode == 'error' then error('injected failure on rank ' .. rank)
  elseif mode == 'exit' then os.exit(3)
  elseif mode == 'kill' then ffi.C.kill(ffi.C.getpid(), 9)
  elseif mode == 'hang' then require('dpl').C.dpl_sleep(tonumber(os.getenv('FAULT_HANG') or '30')) end
end

local ok, err = pcall(function()
  if me_faulty and point == 'init' then fault() end
  dist.init_process_group{ backend = backend, timeout = tonumber(os.getenv('FAULT_TIMEOUT') or '') }
  local n = 262144
  local buf = ffi.new('float[?]', n)
  local count, dtype = n, 'float32'
  if me_faulty and mode == 'mismatch' then count = n - 1000 end
  if me_faulty and mode == 'dtype' then dtype = 'int32' end
  dist.all_reduce(buf, 'sum', { count = count, dtype = dtype })
  if me_faulty and mode == 'kind' then dist.barrier() end
  if me_faulty and point == 'between' then fault() end
  if me_faulty and point == 'inside' and mode == 'kill' then
    -- killed from outside while it runs collectives with the others
    os.execute(('(sleep 0.3; kill -9 %d) &'):format(ffi.C.getpid()))
  elseif me_faulty and point == 'inside' then
    require('dpl').C.dpl_sleep(0.3) -- the others are waiting inside all_reduce meanwhile
    fault()
  end
  for _ = 1, 1e9 do dist.all_reduce(buf, 'sum', { count = count, dtype = dtype }) end
end)
if not ok then
  print('DIST-ERR ' .. tostring(err):gsub('\n', ' '))
  io.stdout:flush()
  if me_faulty and mode == 'error' then error(err, 0) end
  os.exit(1)
end
