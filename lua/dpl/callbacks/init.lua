-- dpl.callbacks: Callback and the built-in callbacks (Lightning's names), loaded on
-- first use. A Lightning 1.9 callback that dplhost does not have raises
-- NotImplementedError naming it; any other unknown name raises an error that lists
-- the available callbacks (instead of returning nil).
local class = require 'dpl.class'
local errors = require 'dpl.errors'

local M = {}

local lazy = {
  Callback = 'dpl.callbacks.callback',
  ModelCheckpoint = 'dpl.callbacks.model_checkpoint',
  EarlyStopping = 'dpl.callbacks.early_stopping',
  LearningRateMonitor = 'dpl.callbacks.lr_monitor',
  ProgressBar = 'dpl.callbacks.progress',
  TQDMProgressBar = 'dpl.callbacks.progress', -- (aliases of ProgressBar)
  ProgressBarBase = 'dpl.callbacks.progress',
  ModelSummary = 'dpl.callbacks.model_summary',
  Timer = 'dpl.callbacks.timer',
  LambdaCallback = 'dpl.callbacks.lambda_function',
  GradientAccumulationScheduler = 'dpl.callbacks.gradient_accumulation_scheduler',
  StochasticWeightAveraging = 'dpl.callbacks.stochastic_weight_avg',
  BasePredictionWriter = 'dpl.callbacks.prediction_writer',
  BaseFinetuning = 'dpl.callbacks.finetuning',
  BackboneFinetuning = 'dpl.callbacks.finetuning',
}

-- pytorch_lightning.callbacks.__all__ (1.9.5) that dplhost lacks, and what to use instead
local missing = {
  BatchSizeFinder = 'scale the batch size by hand (dpl.tuner has the learning-rate finder only)',
  Checkpoint = 'subclass ModelCheckpoint, or Callback with on_save_checkpoint',
  DeviceStatsMonitor = 'log device memory yourself from a LambdaCallback',
  LearningRateFinder = 'use dpl.tuner (trainer.tuner:lr_find / Tuner(trainer):lr_find)',
  ModelPruning = 'prune the weights yourself in a callback',
  QuantizationAwareTraining = 'there is no quantization in dplhost',
  RichModelSummary = 'use ModelSummary (plain text)',
  RichProgressBar = 'use ProgressBar (TQDMProgressBar)',
}

--- The names of the available callbacks, sorted.
function M.available()
  local r = {}
  for k in pairs(lazy) do r[#r + 1] = k end
  table.sort(r)
  return r
end

setmetatable(M, { __dir = M.available, __index = function(t, k)
  -- (internal and metamethod-like names, which generic code may probe for, are simply absent)
  if type(k) ~= 'string' or k:sub(1, 1) == '_' then return nil end
  local mod = lazy[k]
  if mod then
    local v = require(mod)
    if k == 'BaseFinetuning' or k == 'BackboneFinetuning' then v = v[k] end
    rawset(t, k, v)
    return v
  end
  if missing[k] then
    errors.NotImplementedError:raise(("dpl.callbacks.%s: Lightning 1.9's `%s` callback is not available in dplhost (%s)")
      :format(k, k, missing[k]), 2)
  end
  errors.MisconfigurationException:raise(('dpl.callbacks has no callback named %s. Available: %s')
    :format(tostring(k), table.concat(M.available(), ', ')), 2)
end })

--- True when x is a Callback instance.
function M.is_callback(x)
  return class.is_instance(x, require('dpl.callbacks.callback'))
end

return M
