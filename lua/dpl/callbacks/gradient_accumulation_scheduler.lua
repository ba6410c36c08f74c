-- dpl.callbacks.gradient_accumulation_scheduler: GradientAccumulationScheduler
-- (Lightning 1.9's): the accumulation factor by epoch. It is the one mechanism
-- behind Trainer{accumulate_grad_batches = k | {[epoch] = k, ...}} too: the Trainer
-- turns those into one of these (trainer.accumulation_scheduler), as Lightning's
-- callback connector does. Epochs are 0-based (Lightning's); at each train epoch
-- start trainer.accumulate_grad_batches becomes the factor of the latest scheduled
-- epoch <= current_epoch.
local errors = require 'dpl.errors'
local Callback = require 'dpl.callbacks.callback'

local GradientAccumulationScheduler = Callback:extend('GradientAccumulationScheduler')

local function is_int(v) return type(v) == 'number' and v == v and v == math.floor(v) and v > -math.huge and v < math.huge end

-- a value as Python prints it in a list
local function py(v)
  if type(v) == 'string' then return "'" .. v .. "'" end
  if v == true then return 'True' elseif v == false then return 'False' end
  if type(v) == 'number' and is_int(v) then return ('%d'):format(v) end
  return tostring(v)
end

-- the keys in a stable order: numbers ascending, then the others by their text
local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks, function(a, b)
    local na, nb = type(a) == 'number', type(b) == 'number'
    if na and nb then return a < b end
    if na ~= nb then return na end
    return tostring(a) < tostring(b)
  end)
  return ks
end

--- Checks a {[epoch] = factor} table as Lightning 1.9.5 does; returns a copy with [0] = 1
--- added when epoch 0 is not scheduled, and its sorted epochs.
function GradientAccumulationScheduler.check_scheduling(scheduling, level)
  level = (level or 1) + 1
  if type(scheduling) ~= 'table' then
    errors.TypeError:raise(('GradientAccumulationScheduler: scheduling must be a table {[epoch] = factor}, got %s')
      :format(type(scheduling)), level)
  end
  if next(scheduling) == nil then errors.TypeError:raise('Empty dict cannot be interpreted correct', level) end
  local ks = sorted_keys(scheduling)
  local kl, vl = {}, {}
  for i, k in ipairs(ks) do kl[i], vl[i] = py(k), py(scheduling[k]) end
  for _, k in ipairs(ks) do
    if not is_int(k) or k < 0 then
      errors.MisconfigurationException:raise(('Epoch should be an int greater than or equal to 0. Got [%s].')
        :format(table.concat(kl, ', ')), level)
    end
  end
  for _, k in ipairs(ks) do
    local v = scheduling[k]
    if not is_int(v) or v < 1 then
      errors.MisconfigurationException:raise(('Accumulation factor should be an int greater than 0. Got [%s].')
        :format(table.concat(vl, ', ')), level)
    end
  end
  local copy, epochs = {}, {}
  for _, k in ipairs(ks) do copy[k] = scheduling[k] end
  if copy[0] == nil then copy[0] = 1 end
  for k in pairs(copy) do epochs[#epochs + 1] = k end
  table.sort(epochs)
  return copy, epochs
end

--- GradientAccumulationScheduler{scheduling = {[0] = 8, [4] = 4}} (or the table itself).
function GradientAccumulationScheduler:__init(o)
  Callback.__init(self)
  local sched = o
  if type(o) == 'table' and type(o.scheduling) == 'table' then
    for k in pairs(o) do
      if k ~= 'scheduling' then
        errors.TypeError:raise(('GradientAccumulationScheduler got an unknown argument: %s'):format(tostring(k)), 2)
      end
    end
    sched = o.scheduling
  elseif type(o) == 'table' and o.scheduling ~= nil then
    errors.TypeError:raise(('GradientAccumulationScheduler: scheduling must be a table {[epoch] = factor}, got %s')
      :format(type(o.scheduling)), 2)
  end
  self.scheduling, self.epochs = GradientAccumulationScheduler.check_scheduling(sched, 2)
end

--- True when some scheduled factor is above 1.
function GradientAccumulationScheduler:going_to_accumulate_grad_batches()
  for _, v in pairs(self.scheduling) do if v > 1 then return true end end
  return false
end

--- The factor of epoch (0-based): that of the latest scheduled epoch <= epoch.
function GradientAccumulationScheduler:get_accumulate_grad_batches(epoch)
  local k = 1
  for i = #self.epochs, 1, -1 do
    local e = self.epochs[i]
    if epoch >= e then k = self.scheduling[e] break end
  end
  return k
end

function GradientAccumulationScheduler:on_train_epoch_start(trainer)
  trainer.accumulate_grad_batches = self:get_accumulate_grad_batches(trainer.current_epoch)
end

Callback._mark_lazy_metrics_ok(GradientAccumulationScheduler)

return GradientAccumulationScheduler
