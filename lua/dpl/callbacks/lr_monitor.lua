-- dpl.callbacks.lr_monitor: LearningRateMonitor. Logs each optimizer's learning
-- rate (lr-<OptimizerName>, /pgN per param group) to the loggers, every
-- logging step (logging_interval="step") or epoch ("epoch"), or both (nil).
local errors = require 'dpl.errors'
local Callback = require 'dpl.callbacks.callback'

local LearningRateMonitor = Callback:extend('LearningRateMonitor')

function LearningRateMonitor:__init(o)
  Callback.__init(self)
  o = o or {}
  local li = o.logging_interval
  if li ~= nil and li ~= 'step' and li ~= 'epoch' then
    errors.MisconfigurationException:raise('logging_interval should be `step` or `epoch` or `None`.', 2)
  end
  self.logging_interval = li
  self.log_momentum = o.log_momentum == true
  self.lrs = {}
end

function LearningRateMonitor:on_train_start(trainer)
  if #trainer.loggers == 0 then
    errors.MisconfigurationException:raise('Cannot use `LearningRateMonitor` callback with `Trainer` that has no logger.', 0)
  end
end

local function opt_name(opt)
  local mt = getmetatable(opt)
  return mt and mt.__name or 'Optimizer'
end

--- {name = lr} for every optimizer / param group.
function LearningRateMonitor:_extract(trainer)
  local out = {}
  local seen = {}
  for i, opt in ipairs(trainer.optimizers or {}) do
    local base = 'lr-' .. opt_name(opt)
    if seen[base] then base = base .. '-' .. (i - 1) end
    seen[base] = true
    local groups = opt.param_groups or {}
    for g, pg in ipairs(groups) do
      local name = #groups > 1 and (base .. '/pg' .. g) or base
      if pg.lr ~= nil then
        out[name] = pg.lr
        self.lrs[name] = self.lrs[name] or {}
        table.insert(self.lrs[name], pg.lr)
      end
      if self.log_momentum then out[name .. '-momentum'] = pg.momentum or (pg.betas and pg.betas[1]) or 0 end
    end
  end
  return out
end

function LearningRateMonitor:on_train_batch_end(trainer)
  if self.logging_interval == 'epoch' then return end
  local n = trainer.fit_loop.batches_that_stepped + 1
  if n % trainer.log_every_n_steps ~= 0 and not trainer.should_stop then return end
  local stats = self:_extract(trainer)
  if next(stats) then trainer._results_connector:log_metrics(stats, trainer.fit_loop.batches_that_stepped) end
end

function LearningRateMonitor:on_train_epoch_start(trainer)
  if self.logging_interval == 'step' then return end
  local stats = self:_extract(trainer)
  if next(stats) then trainer._results_connector:log_metrics(stats, trainer.fit_loop.batches_that_stepped) end
end

Callback._mark_lazy_metrics_ok(LearningRateMonitor)
return LearningRateMonitor
