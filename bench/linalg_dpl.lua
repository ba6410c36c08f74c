-- linalg_dpl.lua: dplhost's side of bench/linalg.sh: dpl.linalg on the shapes of
-- bench/linalg_torch.py (float32 unless named f64). Prints "name value" lines (us per call:
-- median of REPS timed loops after a warm-up). Threads: DPL_NUM_THREADS.
--   dplhost bench/linalg_dpl.lua [case ...]
local dpl = require 'dpl'
local la = dpl.linalg
local clock = dpl.C.dpl_clock

local function median(t) table.sort(t) return t[math.ceil(#t / 2)] end
local function time_us(step, reps)
  local t0 = clock()
  repeat step() until clock() - t0 > 0.2
  local r = {}
  for k = 1, reps do
    local n, t1 = 0, clock()
    repeat step(); n = n + 1 until clock() - t1 > 0.05
    r[k] = (clock() - t1) / n * 1e6
  end
  return median(r)
end
local function spd(n, b, o)
  local x = b and dpl.randn(b, n, n, o) or dpl.randn(n, n, o)
  return x:matmul(x:transpose(-2, -1)) + dpl.eye(n, o) * n
end

dpl.manual_seed(0)
local f64 = { dtype = 'float64' }
local A256, B256 = spd(256), dpl.randn(256, 16)
local A64 = spd(64, nil, f64)
local S512 = spd(512)
local R128 = dpl.randn(128, 128)
local T200 = dpl.randn(200, 50)
local batch = spd(4, 1000)
local cases = {
  inv_256 = function() return la.inv(A256) end,
  solve_256x16 = function() return la.solve(A256, B256) end,
  det_256 = function() return la.det(A256) end,
  cholesky_512 = function() return la.cholesky(S512) end,
  eigh_128 = function() return la.eigh(R128 + R128:t()) end,
  svd_128 = function() return la.svd(R128) end,
  qr_200x50 = function() return la.qr(T200) end,
  inv_batch_1000x4x4 = function() return la.inv(batch) end,
  inv_64_f64 = function() return la.inv(A64) end,
}
local order = { 'inv_256', 'solve_256x16', 'det_256', 'cholesky_512', 'eigh_128', 'svd_128', 'qr_200x50',
  'inv_batch_1000x4x4', 'inv_64_f64' }
local want = {}
for i = 1, #arg do want[arg[i]] = true end
for _, k in ipairs(order) do
  if next(want) == nil or want[k] then print(('%s_us %.3f'):format(k, time_us(cases[k], tonumber(os.getenv('REPS') or 5)))) end
end
