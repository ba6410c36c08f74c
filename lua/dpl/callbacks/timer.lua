-- dpl.callbacks.timer: Timer. Tracks the time spent in train/validate/test/
-- predict and stops fitting when `duration` (seconds) has passed (checked after
-- each training batch, or each epoch with interval="epoch").
local errors = require 'dpl.errors'
local Callback = require 'dpl.callbacks.callback'

local Timer = Callback:extend('Timer')

local function clock() return require('dpl.capi').C.dpl_clock() end

--- Timer{duration=seconds (or {days=,hours=,minutes=,seconds=}), interval="step"|"epoch"}
function Timer:__init(o)
  Callback.__init(self)
  o = o or {}
  local d = o.duration
  if type(d) == 'table' then
    d = (d.days or 0) * 86400 + (d.hours or 0) * 3600 + (d.minutes or 0) * 60 + (d.seconds or 0)
  end
  if d ~= nil and (type(d) ~= 'number' or d <= 0) then
    errors.MisconfigurationException:raise('Timer: `duration` must be a number of seconds > 0 or a table {days=, hours=, minutes=, seconds=}', 2)
  end
  local interval = o.interval or 'step'
  if interval ~= 'step' and interval ~= 'epoch' then
    errors.MisconfigurationException:raise(('Unsupported parameter value `Timer(interval=%s)`. Possible choices are: epoch, step'):format(tostring(interval)), 2)
  end
  self._duration, self._interval = d, interval
  self._start, self._end, self._offset = {}, {}, 0
end

function Timer:start_time(stage) return self._start[stage or 'train'] end
function Timer:end_time(stage) return self._end[stage or 'train'] end

--- Seconds spent in a stage ('train' (default), 'validate', 'test', 'predict').
function Timer:time_elapsed(stage)
  stage = stage or 'train'
  local s = self._start[stage]
  if s == nil then return 0 end
  local e = self._end[stage] or clock()
  return e - s + (stage == 'train' and self._offset or 0)
end

function Timer:time_remaining(stage)
  if self._duration == nil then return nil end
  return self._duration - self:time_elapsed(stage)
end

for _, pair in ipairs({ { 'train', 'on_train_start', 'on_train_end' }, { 'validate', 'on_validation_start', 'on_validation_end' },
                        { 'test', 'on_test_start', 'on_test_end' }, { 'predict', 'on_predict_start', 'on_predict_end' } }) do
  local stage = pair[1]
  Timer[pair[2]] = function(self) self._start[stage] = clock(); self._end[stage] = nil end
  Timer[pair[3]] = function(self) self._end[stage] = clock() end
end

function Timer:_check(trainer)
  if self._duration == nil then return end
  local stop = self:time_elapsed('train') >= self._duration
  stop = trainer.strategy:broadcast(stop)
  if stop then trainer.should_stop = true end
end

function Timer:on_train_batch_end(trainer)
  if self._interval == 'step' then self:_check(trainer) end
end

function Timer:on_train_epoch_end(trainer)
  if self._interval == 'epoch' then self:_check(trainer) end
end

function Timer:state_dict() return { time_elapsed = { train = self:time_elapsed('train') } } end
function Timer:load_state_dict(s) self._offset = s.time_elapsed and s.time_elapsed.train or 0 end

Callback._mark_lazy_metrics_ok(Timer)
return Timer
