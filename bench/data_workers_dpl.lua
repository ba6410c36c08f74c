-- bench/data_workers_dpl.lua: DataLoader num_workers 0 vs N on a dataset whose get costs
-- about 200 us (a few tensor ops per item), and the transport cost of a batch per MB
-- (bench/data_workers.sh runs it beside bench/data_workers_torch.py).
-- usage: dplhost bench/data_workers_dpl.lua [items=1024] [batch=32]
local dpl = require 'dpl'
local T = require 'dpl.tensor'
local data = dpl.data
local C = dpl.C
local items, bs = tonumber(arg and arg[1]) or 1024, tonumber(arg and arg[2]) or 32
T.set_num_threads(1) -- as the workers (and torch's): the comparison is of processes, not threads

local Work = data.Dataset:extend('Work')
function Work:__init(n, reps) self.n, self.reps = n, reps end
function Work:__len() return self.n end
function Work:get(i)
  local x = T.rand({ 40, 40 })
  for _ = 1, self.reps do x = x:matmul(x):tanh():mul(0.5):add(0.1) end
  return { x:view(-1):narrow(1, 1, 256):clone(), i % 10 }
end

local function epoch_time(loader)
  local t0 = C.dpl_clock()
  local n = 0
  for _ in loader:iter() do n = n + 1 end
  return C.dpl_clock() - t0, n
end

local function best(f, k)
  local b = math.huge
  for _ = 1, k or 3 do b = math.min(b, f()) end
  return b
end

-- calibrate reps: about 200 us an item in this process
local reps, per = 1, 0
local ds1 = Work(200, 1)
while true do
  ds1.reps = reps
  per = best(function() local t0 = C.dpl_clock() for i = 1, 200 do ds1:get(i) end return (C.dpl_clock() - t0) / 200 end)
  if per >= 180e-6 or reps >= 64 then break end
  reps = reps + 1
end
print(('item cost %.0f us (reps %d), %d items, batch %d'):format(per * 1e6, reps, items, bs))
local ds = Work(items, reps)
local t0 = best(function() return (epoch_time(data.DataLoader(ds, { batch_size = bs }))) end)
print(('workers 0: %.3f s / epoch'):format(t0))
for _, nw in ipairs({ 1, 2 }) do
  local l = data.DataLoader(ds, { batch_size = bs, num_workers = nw, persistent_workers = true })
  epoch_time(l) -- (the workers' start)
  local t = best(function() return (epoch_time(l)) end)
  l:shutdown_workers()
  local tn = best(function() return (epoch_time(data.DataLoader(ds, { batch_size = bs, num_workers = nw }))) end)
  print(('workers %d: %.3f s / epoch (persistent), %.3f s with the workers started each epoch; speedup %.2fx'):format(
    nw, t, tn, t0 / t))
end

-- transport: batches of a ready tensor (no work), num_workers 1 against 0
local Big = data.Dataset:extend('Big')
function Big:__init(mb) self.t = T.rand({ mb * 262144 }) end
function Big:__len() return 64 end
function Big:get_batch() return self.t end
for _, mb in ipairs({ 1, 16 }) do
  local ds2 = Big(mb)
  local a = best(function() return (epoch_time(data.DataLoader(ds2, { batch_size = 1 }))) end)
  local l = data.DataLoader(ds2, { batch_size = 1, num_workers = 1, persistent_workers = true })
  epoch_time(l)
  local b = best(function() return (epoch_time(l)) end)
  l:shutdown_workers()
  print(('transport %d MB batches: %.3f ms / MB (%.2f GB/s)'):format(mb, (b - a) / 64 / mb * 1e3, 64 * mb / 1024 / (b - a)))
end
