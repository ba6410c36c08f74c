-- dpl.callbacks.timer: Timer (Lightning 1.9.5's). Tracks the time spent in
-- train/validate/test/predict and stops fitting when `duration` has passed
-- (checked at fit start, then after each training batch, or each epoch with
-- interval="epoch"). `duration` is what Lightning takes: a "DD:HH:MM:SS" string,
-- a table of timedelta's keywords ({days=, hours=, minutes=, seconds=, weeks=,
-- milliseconds=, microseconds=}), or (dplhost) a number of seconds.
local errors = require 'dpl.errors'
local log = require 'dpl.log'
local Callback = require 'dpl.callbacks.callback'

local Timer = Callback:extend('Timer')

local function clock() return require('dpl.capi').C.dpl_clock() end

-- timedelta's keywords, in seconds
local units = { weeks = 604800, days = 86400, hours = 3600, minutes = 60, seconds = 1, milliseconds = 1e-3,
  microseconds = 1e-6 }

local function repr(v)
  if type(v) == 'string' then return "'" .. v .. "'" end
  if type(v) ~= 'table' or getmetatable(v) ~= nil then return tostring(v) end
  local parts, n = {}, #v
  for i = 1, n do parts[i] = repr(v[i]) end
  local keys = {}
  for k in pairs(v) do
    if not (type(k) == 'number' and k >= 1 and k <= n and k == math.floor(k)) then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do parts[#parts + 1] = tostring(k) .. '=' .. repr(v[k]) end
  return '{' .. table.concat(parts, ', ') .. '}'
end

local FORMS = 'a "DD:HH:MM:SS" string, a table {days=, hours=, minutes=, seconds=} or a number of seconds'

--- A duration as Lightning's Timer reads it -> seconds (nil stays nil). `what`
--- names the argument in errors (default "Timer: `duration`").
function Timer.parse_duration(d, what)
  what = what or 'Timer: `duration`'
  local secs
  if d == nil then return nil
  elseif type(d) == 'number' then
    secs = d
  elseif type(d) == 'string' then
    -- Lightning: duration.strip().split(":"), int() of each, timedelta(days, hours, minutes, seconds)
    local parts = {}
    for p in (d .. ':'):gmatch('([^:]*):') do parts[#parts + 1] = p end
    local ok = #parts == 4
    local v = { 0, 0, 0, 0 }
    for i = 1, #parts do
      local digits = parts[i]:match('^%s*([+-]?%d+)%s*$')
      if not digits then ok = false else v[i] = tonumber(digits) end
    end
    if not ok then
      errors.MisconfigurationException:raise(('%s as a string must be "DD:HH:MM:SS" (days, hours, minutes, seconds;'
        .. ' e.g. "00:12:00:00"), got %s'):format(what, repr(d)), 0)
    end
    secs = v[1] * 86400 + v[2] * 3600 + v[3] * 60 + v[4]
  elseif type(d) == 'table' and getmetatable(d) == nil then
    secs = 0
    local keys = {}
    for k in pairs(d) do keys[#keys + 1] = tostring(k) end
    table.sort(keys)
    for _, k in ipairs(keys) do
      local x = d[k]
      if units[k] == nil then
        errors.MisconfigurationException:raise(('%s as a table takes the keys weeks, days, hours, minutes, seconds,'
          .. ' milliseconds, microseconds (as timedelta); got the key %s in %s'):format(what, repr(k), repr(d)), 0)
      end
      if type(x) ~= 'number' or x ~= x or x == math.huge or x == -math.huge then
        errors.MisconfigurationException:raise(('%s: %s must be a number, got %s'):format(what, k, repr(x)), 0)
      end
      secs = secs + x * units[k]
    end
  else
    errors.MisconfigurationException:raise(('%s must be %s, got %s'):format(what, FORMS, repr(d)), 0)
  end
  if secs ~= secs or secs < 0 or secs == math.huge then
    errors.MisconfigurationException:raise(('%s must be a duration >= 0 (%s), got %s'):format(what, FORMS, repr(d)), 0)
  end
  return secs
end

local known = { duration = true, interval = true, verbose = true }

--- Timer{duration=, interval="step"|"epoch", verbose=true}
function Timer:__init(o)
  Callback.__init(self)
  o = o or {}
  for k in pairs(o) do
    if not known[k] then
      errors.MisconfigurationException:raise(('Timer got an unknown argument: %s'):format(tostring(k)), 2)
    end
  end
  local ok, d = pcall(Timer.parse_duration, o.duration)
  if not ok then error(d, 2) end
  local interval = o.interval or 'step'
  if interval ~= 'step' and interval ~= 'epoch' then
    errors.MisconfigurationException:raise(('Unsupported parameter value `Timer(interval=%s)`. Possible choices are: epoch, step'):format(tostring(interval)), 2)
  end
  self._duration, self._interval = d, interval
  self._verbose = o.verbose ~= false
  self._start, self._end, self._offset = {}, {}, 0
end

function Timer:start_time(stage) return self._start[stage or 'train'] end
function Timer:end_time(stage) return self._end[stage or 'train'] end

--- Seconds spent in a stage ('train' (default), 'validate', 'test', 'predict').
function Timer:time_elapsed(stage)
  stage = stage or 'train'
  local offset = stage == 'train' and self._offset or 0
  local s = self._start[stage]
  if s == nil then return offset end
  local e = self._end[stage] or clock()
  return e - s + offset
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

-- Python's str(timedelta(seconds=n)): "H:MM:SS", "1 day, H:MM:SS"
local function hms(n)
  local days = math.floor(n / 86400)
  n = n - days * 86400
  local t = ('%d:%02d:%02d'):format(math.floor(n / 3600), math.floor(n % 3600 / 60), n % 60)
  if days == 0 then return t end
  return ('%d day%s, %s'):format(days, days == 1 and '' or 's', t)
end

function Timer:_check(trainer)
  if self._duration == nil then return end
  local stop = self:time_elapsed('train') >= self._duration
  stop = trainer.strategy:broadcast(stop)
  trainer.should_stop = trainer.should_stop or stop
  if stop and self._verbose and trainer.is_global_zero then
    log.info('Time limit reached. Elapsed time is %s. Signaling Trainer to stop.',
             hms(math.floor(self:time_elapsed('train'))))
  end
end

-- after a checkpoint's state is restored, whatever the interval (a depleted timer stops at once)
function Timer:on_fit_start(trainer) self:_check(trainer) end

function Timer:on_train_batch_end(trainer)
  if self._interval == 'step' then self:_check(trainer) end
end

function Timer:on_train_epoch_end(trainer)
  if self._interval == 'epoch' then self:_check(trainer) end
end

function Timer:state_dict()
  -- Lightning 1.9.5: every RunningStage but tune (sanity_check is never timed: 0)
  return { time_elapsed = { train = self:time_elapsed('train'), sanity_check = self:time_elapsed('sanity_check'),
    validate = self:time_elapsed('validate'), test = self:time_elapsed('test'), predict = self:time_elapsed('predict') } }
end
function Timer:load_state_dict(s) self._offset = s.time_elapsed and s.time_elapsed.train or 0 end

Callback._mark_lazy_metrics_ok(Timer)
return Timer
