-- train_step_dpl.lua: dplhost's side of bench/train_step.sh. One training step (zero_grad,
-- forward, cross_entropy, backward, SGD momentum step) of two small models, random data, the
-- shapes of bench/train_step_torch.py. Prints "name value" lines (ms per step: median of REPS
-- timed loops of STEPS steps after a warm-up). Threads: DPL_NUM_THREADS.
--   dplhost bench/train_step_dpl.lua [transformer|cnn ...]
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local clock = dpl.C.dpl_clock

local function median(t) table.sort(t) return t[math.ceil(#t / 2)] end
local function time_ms(step, n, reps)
  local t0 = clock()
  repeat step() until clock() - t0 > 0.3 -- warm-up (JIT, allocator, GC pacing)
  local r = {}
  for k = 1, reps do
    local t1 = clock()
    for _ = 1, n do step() end
    r[k] = (clock() - t1) / n * 1e3
  end
  return median(r)
end

local models = {}
-- (a) TransformerEncoder of 2 layers, d_model 128, 4 heads, ff 256, dropout 0.1, batch_first,
-- [32, 64, 128] input, mean over the sequence, Linear(128, 10), cross_entropy
function models.transformer()
  local Head = nn.Module:extend('Head')
  function Head:__init()
    nn.Module.__init(self)
    self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(128, 4,
      { dim_feedforward = 256, dropout = 0.1, batch_first = true }), 2)
    self.fc = nn.Linear(128, 10)
  end
  function Head:forward(x) return self.fc(self.encoder(x):mean(2)) end
  return Head(), dpl.randn(32, 64, 128), dpl.randint(1, 11, { 32 })
end
-- (b) (Conv2d 3x3 pad 1 + BatchNorm2d + ReLU + MaxPool2d 2) x 2, 32 and 64 channels, [64, 1, 28, 28]
-- input, Flatten, Linear(64*7*7, 10), cross_entropy
function models.cnn()
  local m = nn.Sequential(
    nn.Conv2d(1, 32, 3, { padding = 1 }), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(32, 64, 3, { padding = 1 }), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(64 * 7 * 7, 10))
  return m, dpl.randn(64, 1, 28, 28), dpl.randint(1, 11, { 64 })
end

local which = { ... }
if #which == 0 then which = { 'transformer', 'cnn' } end
local reps = tonumber(os.getenv('REPS') or '') or 5
for _, name in ipairs(which) do
  dpl.manual_seed(0)
  local model, x, y = models[name]()
  model:train()
  local opt = dpl.optim.SGD(model:parameters(), { lr = 0.01, momentum = 0.9 })
  local function step()
    opt:zero_grad()
    local loss = F.cross_entropy(model(x), y)
    loss:backward()
    opt:step()
    return loss
  end
  local steps = name == 'cnn' and 20 or 10
  print(('%s_step_ms %.3f'):format(name, time_ms(step, steps, reps)))
end
