-- dpl.callbacks.prediction_writer: BasePredictionWriter (Lightning 1.9's). Subclass it and
-- define write_on_batch_end and/or write_on_epoch_end; during trainer:predict it calls them
-- from on_predict_batch_end / on_predict_epoch_end according to write_interval
-- ('batch', 'epoch' or 'batch_and_epoch'). batch_indices are the dataset positions of the
-- batch (1-based, as dplhost's dataset indices), from the DataLoader; {} for a loader that
-- does not tell them.
local errors = require 'dpl.errors'
local Callback = require 'dpl.callbacks.callback'

local BasePredictionWriter = Callback:extend('BasePredictionWriter')

local INTERVALS = {
  batch = { value = 'batch', on_batch = true, on_epoch = false },
  epoch = { value = 'epoch', on_batch = false, on_epoch = true },
  batch_and_epoch = { value = 'batch_and_epoch', on_batch = true, on_epoch = true },
}

--- BasePredictionWriter{write_interval = 'batch'} (or the interval string itself, as
--- Lightning's positional argument).
function BasePredictionWriter:__init(o)
  Callback.__init(self)
  local wi = o
  if type(o) == 'table' then
    for k in pairs(o) do
      if k ~= 'write_interval' then
        errors.MisconfigurationException:raise(('BasePredictionWriter got an unknown argument: %s'):format(tostring(k)), 2)
      end
    end
    wi = o.write_interval
  end
  if wi == nil then wi = 'batch' end
  local iv = INTERVALS[wi]
  if iv == nil then
    errors.MisconfigurationException:raise("`write_interval` should be one of ['batch', 'epoch', 'batch_and_epoch'].", 2)
  end
  self.interval = iv
end

--- write_on_batch_end(trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx)
function BasePredictionWriter:write_on_batch_end()
  errors.NotImplementedError:raise(('%s: write_interval %q needs write_on_batch_end(trainer, pl_module, prediction,'
    .. ' batch_indices, batch, batch_idx, dataloader_idx)'):format(getmetatable(self).__name, self.interval.value), 2)
end

--- write_on_epoch_end(trainer, pl_module, predictions, batch_indices): predictions and
--- batch_indices hold one list per predict dataloader.
function BasePredictionWriter:write_on_epoch_end()
  errors.NotImplementedError:raise(('%s: write_interval %q needs write_on_epoch_end(trainer, pl_module, predictions,'
    .. ' batch_indices)'):format(getmetatable(self).__name, self.interval.value), 2)
end

function BasePredictionWriter:on_predict_batch_end(trainer, pl_module, outputs, batch, batch_idx, dataloader_idx)
  if not self.interval.on_batch then return end
  local bi = trainer.predict_loop and trainer.predict_loop.epoch_loop.current_batch_indices or {}
  self:write_on_batch_end(trainer, pl_module, outputs, bi, batch, batch_idx, dataloader_idx)
end

function BasePredictionWriter:on_predict_epoch_end(trainer, pl_module)
  if not self.interval.on_epoch then return end
  local pl = trainer.predict_loop
  self:write_on_epoch_end(trainer, pl_module, pl.predictions, pl.epoch_batch_indices)
end

return BasePredictionWriter
