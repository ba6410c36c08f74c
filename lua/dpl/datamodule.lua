-- dpl.datamodule: the LightningDataModule (dpl.LightningDataModule), Lightning 1.9's
-- data container: prepare_data / setup(stage) / teardown(stage), the four *_dataloader
-- hooks, the batch-transfer hooks, state_dict / load_state_dict (kept in checkpoints),
-- save_hyperparameters (logged and checkpointed with the module's), load_from_checkpoint
-- and from_datasets. The Trainer takes it as `trainer:fit(model, dm)` or
-- `{datamodule = dm}` (see dpl.trainer); docs/trainer.md "LightningDataModule".
local class = require 'dpl.class'
local errors = require 'dpl.errors'
local LightningModule = require 'dpl.lightning'

local Misconfiguration = errors.MisconfigurationException

local DataModule = class.Object:extend('LightningDataModule')

function DataModule:__init()
  self.trainer = nil
  self.hparams = {}
  -- prepare_data on each node's local rank 0 (true) or on global rank 0 only (false)
  self.prepare_data_per_node = true
end

-- hooks with Lightning's defaults (DataHooks): nothing to prepare, set up or tear down
function DataModule:prepare_data() end
function DataModule:setup() end
function DataModule:teardown() end

-- a *_dataloader hook that is not defined: Lightning raises when one is called; the Trainer
-- calls only those a datamodule overrides
for _, name in ipairs({ 'train_dataloader', 'val_dataloader', 'test_dataloader', 'predict_dataloader' }) do
  DataModule[name] = function()
    Misconfiguration:raise(('`%s` must be implemented to be used with the Lightning Trainer'):format(name), 2)
  end
end

-- the batch-transfer hooks: a datamodule that overrides one is used instead of the module's
DataModule.on_before_batch_transfer = LightningModule.on_before_batch_transfer
DataModule.transfer_batch_to_device = LightningModule.transfer_batch_to_device
DataModule.on_after_batch_transfer = LightningModule.on_after_batch_transfer

--- The datamodule's state for a checkpoint (Lightning's stateful datamodule): a table, saved
--- under the class name when not empty and given back to load_state_dict on restore.
function DataModule:state_dict() return {} end
function DataModule:load_state_dict() end

--- save_hyperparameters(tbl, {ignore=}): as LightningModule's; the checkpoint keeps them as
--- datamodule_hyper_parameters and the loggers get them merged with the module's.
DataModule.save_hyperparameters = LightningModule.save_hyperparameters

function DataModule:__tostring()
  return (getmetatable(self).__name or 'LightningDataModule') .. '()'
end

--- MyDataModule:load_from_checkpoint(path, {<hyper-parameter>=value, ...}): a datamodule built
--- from the datamodule_hyper_parameters a Trainer checkpoint saved (the options override
--- them), as Lightning's classmethod. Its state_dict is not loaded (Lightning neither: the
--- Trainer does that when it restores a checkpoint with this datamodule attached).
function DataModule.load_from_checkpoint(cls, checkpoint_path, opts)
  cls = LightningModule._checkpoint_args(cls, checkpoint_path, opts, 'MyDataModule')
  if opts and opts.hparams_file ~= nil then
    errors.NotImplementedError:raise('load_from_checkpoint: hparams_file is not supported; pass the hyper-parameters'
      .. ' to override in the options table', 2)
  end
  local ckpt = require('dpl.trainer.checkpoint').load(checkpoint_path)
  local hp = ckpt.datamodule_hyper_parameters
  if type(hp) ~= 'table' then hp = {} end
  return LightningModule._instantiate(cls, hp, ckpt.datamodule_hparams_name, opts or {})
end

local FROM_KEYS = { train_dataset = true, val_dataset = true, test_dataset = true, predict_dataset = true,
  batch_size = true, num_workers = true }

--- MyDataModule:from_datasets{train_dataset=, val_dataset=, test_dataset=, predict_dataset=,
--- batch_size=1, num_workers=0, <constructor argument>=...}: Lightning's classmethod. A
--- datamodule whose *_dataloader hooks wrap the datasets given in dpl.data.DataLoaders of
--- batch_size (the training one shuffled); a list of datasets gives a list of loaders (a table
--- of training datasets by name, a table of loaders by name). The
--- constructor gets batch_size / num_workers when it has parameters of those names, and
--- every other option by the name of its parameter.
function DataModule.from_datasets(cls, opts)
  if type(cls) ~= 'table' then
    Misconfiguration:raise('from_datasets is a class method: call it as dpl.LightningDataModule:from_datasets{...}', 2)
  end
  if rawget(cls, '__index') ~= cls then cls = getmetatable(cls) end
  opts = opts or {}
  if type(opts) ~= 'table' then
    Misconfiguration:raise(('from_datasets: the options must be a table, got %s'):format(type(opts)), 2)
  end
  local batch_size, num_workers = opts.batch_size or 1, opts.num_workers or 0
  if type(batch_size) ~= 'number' or batch_size < 1 or batch_size % 1 ~= 0 then
    Misconfiguration:raise(('from_datasets: batch_size must be a positive integer, got %s'):format(
      type(batch_size) == 'string' and ("'" .. batch_size .. "'") or tostring(batch_size)), 2)
  end
  if type(num_workers) ~= 'number' or num_workers < 0 or num_workers % 1 ~= 0 then
    Misconfiguration:raise(('from_datasets: num_workers must be a non-negative integer, got %s'):format(tostring(num_workers)), 2)
  end
  local names = LightningModule._param_names(cls.__init)
  local takes = {}
  for _, n in ipairs(names) do takes[n] = true end
  for k in pairs(opts) do
    if not FROM_KEYS[k] and not takes[k] then
      errors.TypeError:raise(("from_datasets: %s() got an unexpected argument '%s' (not a parameter of its constructor)")
        :format(cls.__name or 'LightningDataModule', tostring(k)), 2)
    end
  end
  local args = {}
  for i, n in ipairs(names) do
    if n == 'batch_size' then args[i] = batch_size
    elseif n == 'num_workers' then args[i] = num_workers
    elseif not FROM_KEYS[n] then args[i] = opts[n] end
  end
  local dm = cls(unpack(args, 1, #names))
  local data = require 'dpl.data'
  local function loaders(ds, shuffle, by_name)
    -- a plain list of datasets (a Lua table with [1] and no metatable) gives a list of loaders
    if type(ds) == 'table' and getmetatable(ds) == nil and ds[1] ~= nil then
      local out = {}
      for i, d in ipairs(ds) do out[i] = data.DataLoader(d, { batch_size = batch_size, shuffle = shuffle, num_workers = num_workers }) end
      return out
    end
    -- training datasets by name (Lightning's Mapping[str, Dataset]): loaders by name
    if by_name and type(ds) == 'table' and getmetatable(ds) == nil and next(ds) ~= nil then
      local out = {}
      for k, d in pairs(ds) do out[k] = data.DataLoader(d, { batch_size = batch_size, shuffle = shuffle, num_workers = num_workers }) end
      return out
    end
    return data.DataLoader(ds, { batch_size = batch_size, shuffle = shuffle, num_workers = num_workers })
  end
  for _, s in ipairs({ 'train', 'val', 'test', 'predict' }) do
    local ds = opts[s .. '_dataset']
    if ds ~= nil then
      local shuffle = s == 'train'
      dm[s .. '_dataloader'] = function() return loaders(ds, shuffle, s == 'train') end
    end
  end
  return dm
end

return DataModule
