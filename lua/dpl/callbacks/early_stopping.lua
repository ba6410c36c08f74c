-- dpl.callbacks.early_stopping: EarlyStopping (Lightning 1.9): stops fitting when
-- a monitored metric has stopped improving for `patience` checks. A stop
-- decided on any rank stops all ranks.
local errors = require 'dpl.errors'
local log = require 'dpl.log'
local Callback = require 'dpl.callbacks.callback'

local Misconfiguration = errors.MisconfigurationException
local function pyfloat(v) return require('dpl.trainer.loops')._py_float(v) end

local EarlyStopping = Callback:extend('EarlyStopping')

local known = { monitor = 1, min_delta = 1, patience = 1, verbose = 1, mode = 1, strict = 1, check_finite = 1,
  stopping_threshold = 1, divergence_threshold = 1, check_on_train_epoch_end = 1, log_rank_zero_only = 1 }

function EarlyStopping:__init(o)
  Callback.__init(self)
  o = o or {}
  for k in pairs(o) do
    if not known[k] then error(Misconfiguration('EarlyStopping got an unknown argument: ' .. tostring(k)), 2) end
  end
  if type(o.monitor) ~= 'string' then
    error(Misconfiguration('EarlyStopping needs `monitor`, the name of a logged metric'), 2)
  end
  self.monitor = o.monitor
  self.min_delta = o.min_delta or 0
  self.patience = o.patience or 3
  self.verbose = o.verbose == true
  self.mode = o.mode or 'min'
  self.strict = o.strict ~= false
  self.check_finite = o.check_finite ~= false
  self.stopping_threshold = o.stopping_threshold
  self.divergence_threshold = o.divergence_threshold
  self._check_on_train_epoch_end = o.check_on_train_epoch_end
  if self.mode ~= 'min' and self.mode ~= 'max' then
    error(Misconfiguration(('`mode` can be min, max, got %s'):format(tostring(self.mode))), 2)
  end
  self.min_delta = self.mode == 'min' and -math.abs(self.min_delta) or math.abs(self.min_delta)
  self.wait_count = 0
  self.stopped_epoch = 0
  self.best_score = self.mode == 'min' and math.huge or -math.huge
end

function EarlyStopping:state_key()
  return ("EarlyStopping{'monitor': '%s', 'mode': '%s'}"):format(self.monitor, self.mode)
end

function EarlyStopping:setup(trainer)
  if self._check_on_train_epoch_end == nil then
    local vc = trainer._args._val_check
    self._check_on_train_epoch_end = vc.kind == 'fraction' and vc.value == 1 and trainer.check_val_every_n_epoch == 1
  end
end

local function skip(trainer)
  return trainer.state.fn ~= 'fit' or trainer.sanity_checking or trainer.fast_dev_run
end

function EarlyStopping:on_train_epoch_end(trainer)
  if not self._check_on_train_epoch_end or skip(trainer) then return end
  self:_run_early_stopping_check(trainer)
end

function EarlyStopping:on_validation_end(trainer)
  if self._check_on_train_epoch_end or skip(trainer) then return end
  self:_run_early_stopping_check(trainer)
end

function EarlyStopping:_validate_condition_metric(logs)
  if logs[self.monitor] ~= nil then return true end
  local keys = {}
  for k in pairs(logs) do keys[#keys + 1] = '`' .. k .. '`' end
  table.sort(keys)
  local msg = ('Early stopping conditioned on metric `%s` which is not available. Pass in or modify your `EarlyStopping` callback to use any of the following: %s')
    :format(self.monitor, table.concat(keys, ', '))
  if self.strict then errors.RuntimeError:raise(msg, 0) end
  if self.verbose then log.warn('%s', msg) end
  return false
end

function EarlyStopping:_evaluate_stopping_criteria(current)
  local better = function(a, b) if self.mode == 'min' then return a < b end return a > b end
  if self.check_finite and (current ~= current or current == math.huge or current == -math.huge) then
    return true, ('Monitored metric %s = %s is not finite. Previous best value was %.3f. Signaling Trainer to stop.')
      :format(self.monitor, pyfloat(current), self.best_score)
  end
  if self.stopping_threshold ~= nil and better(current, self.stopping_threshold) then
    return true, ('Stopping threshold reached: %s = %s %s %s. Signaling Trainer to stop.'):format(self.monitor,
      pyfloat(current), self.mode == 'min' and '<' or '>', pyfloat(self.stopping_threshold))
  end
  if self.divergence_threshold ~= nil and better(-current, -self.divergence_threshold) then
    -- (the right way round: Lightning 1.9.5 prints the stopping threshold's sign here, `v = 6.0 < 5.0`)
    return true, ('Divergence threshold reached: %s = %s %s %s. Signaling Trainer to stop.'):format(self.monitor,
      pyfloat(current), self.mode == 'min' and '>' or '<', pyfloat(self.divergence_threshold))
  end
  if better(current - self.min_delta, self.best_score) then
    local prev = self.best_score
    self.best_score = current
    self.wait_count = 0
    if prev == prev and prev ~= math.huge and prev ~= -math.huge then -- (Lightning's _improvement_message)
      return false, ('Metric %s improved by %.3f >= min_delta = %s. New best score: %.3f'):format(self.monitor,
        math.abs(prev - current), pyfloat(math.abs(self.min_delta)), current)
    end
    return false, ('Metric %s improved. New best score: %.3f'):format(self.monitor, current)
  end
  self.wait_count = self.wait_count + 1
  if self.wait_count >= self.patience then
    return true, ('Monitored metric %s did not improve in the last %d records. Best score: %.3f. Signaling Trainer to stop.')
      :format(self.monitor, self.wait_count, self.best_score)
  end
  return false, nil
end

function EarlyStopping:_run_early_stopping_check(trainer)
  trainer._results_connector:flush()
  local logs = trainer.callback_metrics
  if not self:_validate_condition_metric(logs) then return end
  local current = require('dpl.trainer.results').to_number(logs[self.monitor])
  local should_stop, reason = self:_evaluate_stopping_criteria(current)
  should_stop = trainer.strategy:reduce_boolean_decision(should_stop, false)
  trainer.should_stop = trainer.should_stop or should_stop
  if should_stop then self.stopped_epoch = trainer.current_epoch end
  if reason and self.verbose then log.info('%s', reason) end
end

function EarlyStopping:state_dict()
  return { wait_count = self.wait_count, stopped_epoch = self.stopped_epoch, best_score = self.best_score,
    patience = self.patience }
end

function EarlyStopping:load_state_dict(s)
  self.wait_count, self.stopped_epoch = s.wait_count, s.stopped_epoch
  self.best_score, self.patience = s.best_score, s.patience
end

Callback._mark_lazy_metrics_ok(EarlyStopping)
return EarlyStopping
