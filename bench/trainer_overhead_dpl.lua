-- trainer_overhead_dpl.lua: the Trainer's per-step overhead over a hand-written
-- loop doing the same work (a stand-in loss and optimizer, so that only the
-- loop itself is measured), with self:log(prog_bar=true), the progress bar
-- (plain-line mode, to /dev/null) and a CSV logger on. Prints medians of 5 runs.
local dpl = require 'dpl'
local data = require 'dpl.data'
local clock = require('dpl.capi').C.dpl_clock
local N = tonumber(arg[1]) or 50000

local Loss = {}; Loss.__index = Loss
function Loss:backward() end
local loss = setmetatable({ value = 1 }, Loss)
local Opt = {}; Opt.__index = Opt
function Opt:step() self.n = self.n + 1 end
function Opt:zero_grad() end
local DS = data.Dataset:extend('DS')
function DS:__len() return N end
function DS:get(i) return i end
local function loader() return data.DataLoader(DS(), { batch_size = 1, collate_fn = function(it) return it end }) end

local M = dpl.LightningModule:extend('Bench')
local log_opts = { prog_bar = true }
function M:training_step() self:log('loss', 1, log_opts); return loss end
function M:configure_optimizers() return setmetatable({ n = 0 }, Opt) end

local dir = os.tmpname(); os.remove(dir); os.execute('mkdir -p ' .. dir)
local function hand()
  local opt = setmetatable({ n = 0 }, Opt)
  local t0 = clock()
  for _ in loader():iter() do opt:zero_grad(); loss:backward(); opt:step() end
  return (clock() - t0) / N
end
local function trainer()
  local pb = dpl.callbacks.ProgressBar{ stream = io.open('/dev/null', 'w'), tty = false }
  local t = dpl.Trainer{ max_epochs = 1, default_root_dir = dir, callbacks = { pb }, enable_model_summary = false,
    logger = dpl.loggers.CSVLogger(dir), enable_checkpointing = false }
  local t0 = clock()
  t:fit(M(), loader())
  return (clock() - t0) / N
end
local hs, ts = {}, {}
for i = 1, 5 do hs[i] = hand(); ts[i] = trainer() end
table.sort(hs); table.sort(ts)
local h, t = hs[3], ts[3]
print(('trainer step overhead (median of 5 runs of %d steps)'):format(N))
print(('  %-36s %9.2f us/step'):format('hand-written loop', h * 1e6))
print(('  %-36s %9.2f us/step'):format('dpl.Trainer fit', t * 1e6))
print(('  %-36s %9.2f us/step   (target <= 20 us) %s'):format('overhead', (t - h) * 1e6, (t - h) * 1e6 <= 20 and 'OK' or 'MISSED'))
os.execute('rm -rf ' .. dir)

-- the same with a tiny real model (nn.Linear(4, 2), batch 8, cross-entropy, SGD): the
-- hand-written loop does forward, zero_grad, backward, step and loss:item()
local ok_nn = pcall(function() return dpl.nn.Linear and dpl.optim.SGD end)
if not ok_nn then return end
local nn, F = dpl.nn, dpl.nn.functional
local R = math.floor(N / 2)
dpl.manual_seed(0)
local rds = dpl.data.TensorDataset(dpl.randn({ R * 8, 4 }), dpl.randint(1, 3, { R * 8 }))
local function rloader() return dpl.data.DataLoader(rds, { batch_size = 8 }) end
local function rhand()
  dpl.manual_seed(0)
  local net = nn.Linear(4, 2)
  local opt = dpl.optim.SGD(net:parameters(), { lr = 0.01 })
  local t0 = clock()
  for b in rloader():iter() do
    local l = F.cross_entropy(net(b[1]), b[2])
    opt:zero_grad(); l:backward(); opt:step()
    local _ = l:item()
  end
  return (clock() - t0) / R
end
local Tiny = dpl.LightningModule:extend('Tiny')
function Tiny:__init() dpl.LightningModule.__init(self); dpl.manual_seed(0); self.net = nn.Linear(4, 2) end
function Tiny:training_step(b)
  local l = F.cross_entropy(self.net(b[1]), b[2])
  self:log('loss', l, log_opts)
  return l
end
function Tiny:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.01 }) end
local function rtrainer()
  local pb = dpl.callbacks.ProgressBar{ stream = io.open('/dev/null', 'w'), tty = false }
  local t = dpl.Trainer{ max_epochs = 1, default_root_dir = dir, callbacks = { pb }, enable_model_summary = false,
    logger = dpl.loggers.CSVLogger(dir), enable_checkpointing = false }
  local t0 = clock()
  t:fit(Tiny(), rloader())
  return (clock() - t0) / R
end
hs, ts = {}, {}
for i = 1, 5 do hs[i] = rhand(); ts[i] = rtrainer() end
table.sort(hs); table.sort(ts)
h, t = hs[3], ts[3]
print(('  %-36s %9.2f us/step'):format('hand-written loop, tiny nn.Linear', h * 1e6))
print(('  %-36s %9.2f us/step'):format('dpl.Trainer fit, tiny nn.Linear', t * 1e6))
print(('  %-36s %9.2f us/step   (target <= 20 us) %s'):format('overhead', (t - h) * 1e6, (t - h) * 1e6 <= 20 and 'OK' or 'MISSED'))
os.execute('rm -rf ' .. dir)
