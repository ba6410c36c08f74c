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
