-- mlp_steps.lua: N training steps of the MLP 784-256-128-10 (SGD with momentum,
-- batch 64, random data uploaded each step, loss read each step) on cuda:0, for
-- counting launches per step under the emulator (docs/cuda.md):
--   DPL_CUDA_EMU_STATS=1 scripts/cuda-emu/run-ops.sh scripts/cuda-emu/mlp_steps.lua 10
-- The difference between the counts of two step numbers is what the steps launch.
local dpl = require 'dpl'
local nn, optim, F = dpl.nn, dpl.optim, dpl.nn.functional
local steps, batch = tonumber((...)) or 10, 64
dpl.manual_seed(0)
local X, Y = dpl.rand(batch * 4, 1, 28, 28), dpl.randint(1, 11, { batch * 4 })
local model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
  nn.Linear(128, 10)):to('cuda:0')
local opt = optim.SGD(model:parameters(), { lr = 0.01, momentum = 0.9 })
local first, last
for s = 1, steps do
  local at = ((s - 1) % 4) * batch + 1
  local x, y = X:narrow(1, at, batch):to('cuda:0'), Y:narrow(1, at, batch):to('cuda:0')
  local loss = F.cross_entropy(model(x), y)
  opt:zero_grad()
  loss:backward()
  opt:step()
  last = loss:item()
  first = first or last
end
print(('mlp_steps: %d steps, loss %.4f -> %.4f'):format(steps, first, last))
