-- fabric_overhead_dpl.lua: dpl.Fabric's per-step cost over the same hand-written loop (one
-- process, precision 32): a tiny model (nn.Linear(4, 3), batch 8, MSE, SGD), forward through
-- the FabricModule, fabric:backward, the FabricOptimizer's zero_grad/step. Runs alternate;
-- prints the medians of 7 runs of N steps (arg[1], default 20000) in us per step.
--   dplhost bench/fabric_overhead_dpl.lua [N]
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local clock = require('dpl.capi').C.dpl_clock
local N = tonumber(arg[1]) or 20000
dpl.set_num_threads(1)

dpl.manual_seed(0)
local x, y = dpl.randn({ 8, 4 }), dpl.randn({ 8, 3 })

local function plain()
  dpl.manual_seed(0)
  local model = nn.Linear(4, 3)
  local opt = dpl.optim.SGD(model:parameters(), { lr = 0.01 })
  local t0 = clock()
  for _ = 1, N do
    local loss = F.mse_loss(model(x), y)
    opt:zero_grad()
    loss:backward()
    opt:step()
  end
  return (clock() - t0) / N * 1e6
end

local fabric = dpl.Fabric()
fabric:launch()
local function with_fabric()
  dpl.manual_seed(0)
  local m = nn.Linear(4, 3)
  local model, opt = fabric:setup(m, dpl.optim.SGD(m:parameters(), { lr = 0.01 }))
  local t0 = clock()
  for _ = 1, N do
    local loss = F.mse_loss(model(x), y)
    opt:zero_grad()
    fabric:backward(loss)
    opt:step()
  end
  return (clock() - t0) / N * 1e6
end

local function median(t) table.sort(t) return t[math.ceil(#t / 2)] end
plain(); with_fabric() -- warm-up (JIT)
local a, b, d = {}, {}, {}
for i = 1, 7 do
  a[i] = plain(); b[i] = with_fabric(); d[i] = b[i] - a[i]
  collectgarbage()
end
print(('  %-36s %9.2f us/step'):format('hand-written loop, nn.Linear(4, 3)', median(a)))
print(('  %-36s %9.2f us/step'):format('the same loop through dpl.Fabric', median(b)))
print(('  %-36s %9.2f us/step'):format("Fabric's overhead (median of diffs)", median(d)))
