-- trainer_lazy_metrics_script.lua: one fit + validate of a small classifier on
-- synthetic data, on the device of arg[1] ('cpu' or 'gpu': DPL_VIRTUAL_GPUS), logging
-- step, epoch (mean, max) and validation values; arg[2] == 'watch' adds a user callback
-- that reads callback_metrics at every batch end. Prints the metric dicts, the CSV
-- logger's file and what the callback saw (trainer_lazy_metrics_spec.lua compares).
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local accel, watch, dir = arg[1], arg[2] == 'watch', arg[3]
local ds = dpl.datasets.SyntheticClassification { n = 96, features = 6, classes = 3, seed = 3 }
local train = dpl.data.DataLoader(ds, { batch_size = 16 })
local val = dpl.data.DataLoader(ds, { batch_size = 32 })
local M = dpl.LightningModule:extend('LazyNet')
local step_loss, queued = {}, {}
function M:__init()
  dpl.LightningModule.__init(self)
  dpl.manual_seed(0)
  self.net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
end
function M:forward(x) return self.net(x) end
function M:training_step(b, i)
  -- device values logged at the previous step still wait here unless a hook needed them
  queued[#queued + 1] = #self.trainer._results_connector.lazy
  local logits = self(b[1])
  local loss = F.cross_entropy(logits, b[2])
  local acc = logits:argmax(2):eq(b[2]):float():mean()
  self:log('loss', loss, { prog_bar = true })
  self:log('acc', acc, { on_step = true, on_epoch = true })
  self:log('top', loss, { on_step = false, on_epoch = true, reduce_fx = 'max' })
  -- a tensor changed in place after it was logged: the logged value is the one it had
  local buf = loss:detach():clone()
  self:log('buf', buf, { on_step = true, on_epoch = true })
  buf:add_(100)
  step_loss[#step_loss + 1] = loss:item()
  return loss
end
function M:validation_step(b)
  self:log('val_loss', F.cross_entropy(self(b[1]), b[2]), { prog_bar = true })
end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
local seen = {}
local Watch = dpl.callbacks.Callback:extend('Watch')
function Watch:on_train_batch_end(trainer) seen[#seen + 1] = trainer.callback_metrics.loss end
local t = dpl.Trainer { accelerator = accel, devices = 1, max_epochs = 2, default_root_dir = dir,
  logger = dpl.loggers.CSVLogger(dir, { name = 'lz' }), log_every_n_steps = 2,
  enable_checkpointing = false, enable_progress_bar = false, enable_model_summary = false,
  callbacks = watch and { Watch() } or nil }
t:fit(M(), train, val)
local function dump(name, d)
  local keys = {}
  for k in pairs(d) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local v = d[k]
    print(('%s %s %s'):format(name, k, type(v) == 'number' and ('%.9g'):format(v) or type(v)))
  end
end
dump('cbm', t.callback_metrics)
dump('pbm', t.progress_bar_metrics)
dump('logged', t.logged_metrics)
local f = assert(io.open(t.logger.log_dir .. '/metrics.csv'))
for line in f:lines() do print('csv ' .. line) end
f:close()
local max_queued = 0
for _, n in ipairs(queued) do if n > max_queued then max_queued = n end end
print('max_queued ' .. max_queued)
if watch then
  local bad = 0
  for i, v in ipairs(seen) do
    if type(v) ~= 'number' or math.abs(v - step_loss[i]) > 1e-6 then bad = bad + 1 end
  end
  print(('watch %d of %d batch ends saw the step loss'):format(#seen - bad, #seen))
end
