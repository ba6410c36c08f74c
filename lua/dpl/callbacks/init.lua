-- dpl.callbacks: Callback and the built-in callbacks (Lightning's names).
local class = require 'dpl.class'

local M = {}

local lazy = {
  Callback = 'dpl.callbacks.callback',
  ModelCheckpoint = 'dpl.callbacks.model_checkpoint',
  EarlyStopping = 'dpl.callbacks.early_stopping',
  LearningRateMonitor = 'dpl.callbacks.lr_monitor',
  ProgressBar = 'dpl.callbacks.progress',
  ModelSummary = 'dpl.callbacks.model_summary',
  Timer = 'dpl.callbacks.timer',
}
M.TQDMProgressBar = nil -- alias, below

setmetatable(M, { __index = function(t, k)
  if k == 'TQDMProgressBar' or k == 'ProgressBarBase' then
    local v = require('dpl.callbacks.progress'); rawset(t, k, v); return v
  end
  local mod = lazy[k]
  if mod then local v = require(mod); rawset(t, k, v); return v end
end })

--- True when x is a Callback instance.
function M.is_callback(x)
  return class.is_instance(x, require('dpl.callbacks.callback'))
end

return M
