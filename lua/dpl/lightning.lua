-- dpl.lightning: the LightningModule (dpl.LightningModule). A model class with
-- Lightning 1.9's hooks (no-op defaults the Trainer calls in Lightning's order),
-- self:log / self:log_dict, save_hyperparameters, optimizers(), manual
-- optimisation. Returns the class: `local M = dpl.LightningModule:extend()`.
local errors = require 'dpl.errors'

-- A LightningModule is an nn.Module: parameters, train/eval, zero_grad,
-- state_dict, to(device) and the layer-tree tostring come from it.
local Base = require 'dpl.nn.module'

local Misconfiguration = errors.MisconfigurationException

local LightningModule = Base:extend('LightningModule')

function LightningModule:__init(...)
  Base.__init(self, ...)
  if self.training == nil then self.training = true end
  self.automatic_optimization = true
  self.hparams = {}
  self.trainer = nil
  self.device = nil          -- set by the strategy (model_to_device)
  self.global_rank = 0
  self.local_rank = 0
  self.current_epoch = 0
  self.global_step = 0
  self._current_fx_name = nil
  -- prepare_data on each node's local rank 0 (true) or on global rank 0 only (false)
  self.prepare_data_per_node = true
end


function LightningModule:forward()
  errors.NotImplementedError:raise(('%s:forward is not implemented'):format(
    getmetatable(self).__name or 'LightningModule'), 2)
end

---------------------------------------------------------------- hooks
-- Every hook Lightning 1.9 calls; the defaults do what Lightning's do.
local noop_hooks = {
  'prepare_data', 'setup', 'teardown', 'configure_sharded_model',
  'on_fit_start', 'on_fit_end',
  'on_train_start', 'on_train_end', 'on_train_epoch_start', 'on_train_epoch_end',
  'on_train_batch_start', 'on_train_batch_end',
  'on_validation_start', 'on_validation_end', 'on_validation_epoch_start', 'on_validation_epoch_end',
  'on_validation_batch_start', 'on_validation_batch_end',
  'on_test_start', 'on_test_end', 'on_test_epoch_start', 'on_test_epoch_end',
  'on_test_batch_start', 'on_test_batch_end',
  'on_predict_start', 'on_predict_end', 'on_predict_epoch_start', 'on_predict_epoch_end',
  'on_predict_batch_start', 'on_predict_batch_end',
  'on_before_backward', 'on_after_backward', 'on_before_optimizer_step', 'on_before_zero_grad',
  'on_save_checkpoint', 'on_load_checkpoint',
  'training_epoch_end', 'validation_epoch_end', 'test_epoch_end',
}
for _, name in ipairs(noop_hooks) do
  LightningModule[name] = function() end
end

--- The hooks a LightningModule can define, in a stable order (used by tests and docs).
LightningModule._hook_names = noop_hooks
noop_hooks[#noop_hooks + 1] = 'toggle_optimizer'
noop_hooks[#noop_hooks + 1] = 'untoggle_optimizer'

-- the parameters of an optimizer (a LightningOptimizer too), group by group
local function each_param(opt, f)
  for _, g in ipairs(opt.param_groups or {}) do
    for _, p in ipairs(g.params or {}) do f(p) end
  end
end

--- self:toggle_optimizer(optimizer, optimizer_idx): Lightning 1.9's. The parameters of every
--- other optimizer get requires_grad = false (their previous state is remembered), those of
--- `optimizer` keep the state they had, so only its parameters receive gradients. The loop
--- calls it around each optimizer's step in automatic optimisation with several optimizers.
function LightningModule:toggle_optimizer(optimizer, optimizer_idx)
  local state, order = {}, {}
  local trainer = self.trainer
  for _, opt in ipairs(trainer and trainer.optimizers or {}) do
    each_param(opt, function(p)
      if state[p] == nil then
        state[p] = p.requires_grad and true or false
        order[#order + 1] = p
        p.requires_grad = false
      end
    end)
  end
  each_param(optimizer, function(p)
    if state[p] ~= nil then p.requires_grad = state[p] end
  end)
  self._param_requires_grad_state = state
end

--- self:untoggle_optimizer(optimizer_idx): gives the parameters of the optimizers other than
--- `optimizer_idx` back the requires_grad they had before toggle_optimizer.
function LightningModule:untoggle_optimizer(optimizer_idx)
  local state = self._param_requires_grad_state or {}
  local trainer = self.trainer
  for i, opt in ipairs(trainer and trainer.optimizers or {}) do
    if i - 1 ~= optimizer_idx then
      each_param(opt, function(p)
        if state[p] ~= nil then p.requires_grad = state[p] end
      end)
    end
  end
  self._param_requires_grad_state = {}
end

--- self:all_gather(data, group, sync_grads): Lightning's. Numbers become tensors (on the
--- module's device), then each tensor of `data` (a tensor, or a table of them, nested) is
--- gathered from every process through the strategy: with several processes a tensor of
--- shape (world_size, ...); in one process the tensor itself. `sync_grads` is accepted (the
--- gather is not recorded by autograd).
function LightningModule:all_gather(data, group, sync_grads)
  local dpl = require 'dpl'
  local trainer = self.trainer
  local strategy = trainer and trainer.strategy
  local function gather(x)
    if type(x) == 'number' or type(x) == 'boolean' then
      x = dpl.tensor(type(x) == 'boolean' and (x and 1 or 0) or x)
      if self.device ~= nil and self.device.type ~= 'cpu' then x = x:to(self.device) end
    end
    if dpl.is_tensor(x) then
      if strategy == nil then return x end
      local r = strategy:all_gather(x, group, sync_grads)
      -- dist.all_gather gives one tensor per rank: Lightning stacks them
      if type(r) == 'table' and not dpl.is_tensor(r) then return dpl.stack(r) end
      return r
    end
    if type(x) == 'table' and getmetatable(x) == nil then
      local out = {}
      for k, v in pairs(x) do out[k] = gather(v) end
      return out
    end
    return x
  end
  return gather(data)
end

function LightningModule:configure_callbacks() return {} end

--- With Trainer{track_grad_norm = p}: logs the gradient norms (on step and epoch).
function LightningModule:log_grad_norm(grad_norm_dict)
  self:log_dict(grad_norm_dict, { on_step = true, on_epoch = true, prog_bar = false, logger = true })
end

function LightningModule:configure_optimizers()
  Misconfiguration:raise('No `configure_optimizers()` method defined. Lightning `Trainer` expects as minimum a'
    .. ' `training_step()`, `train_dataloader()` and `configure_optimizers()` to be defined.', 2)
end

function LightningModule:training_step()
  Misconfiguration:raise('No `training_step()` method defined. Lightning `Trainer` expects as minimum a'
    .. ' `training_step()`, `train_dataloader()` and `configure_optimizers()` to be defined.', 2)
end
function LightningModule:validation_step() end
function LightningModule:test_step() end
--- Default predict_step: forward on the batch, as in Lightning.
function LightningModule:predict_step(batch) return self:forward(batch) end

function LightningModule:training_step_end(out) return out end
function LightningModule:validation_step_end(out) return out end
function LightningModule:test_step_end(out) return out end

function LightningModule:train_dataloader()
  Misconfiguration:raise('`train_dataloader` must be implemented to be used with the Lightning Trainer', 2)
end
function LightningModule:val_dataloader() end
function LightningModule:test_dataloader() end
function LightningModule:predict_dataloader() end

-- evaluation mode switches: the defaults put the trainer's model in eval/train mode
function LightningModule:on_validation_model_eval() self.trainer.model:eval() end
function LightningModule:on_validation_model_train() self.trainer.model:train() end
function LightningModule:on_test_model_eval() self.trainer.model:eval() end
function LightningModule:on_test_model_train() self.trainer.model:train() end
function LightningModule:on_predict_model_eval() self.trainer.model:eval() end

-- batch transfer
function LightningModule:on_before_batch_transfer(batch) return batch end
function LightningModule:on_after_batch_transfer(batch) return batch end
local no_gpus -- true when this process sees no GPU: every tensor is on the CPU
function LightningModule:transfer_batch_to_device(batch, device)
  if no_gpus == nil then no_gpus = #require('dpl.devices').get_all_available_gpus() == 0 end
  -- nothing can be elsewhere than the CPU: the batch is already there (no copy)
  if no_gpus and device ~= nil and device.type == 'cpu' then return batch end
  return require('dpl.devices').move_data_to_device(batch, device)
end

-- optimisation
function LightningModule:backward(loss)
  if self._fused_backward then return self._fused_backward(loss) end
  loss:backward()
end

function LightningModule:optimizer_zero_grad(epoch, batch_idx, optimizer)
  optimizer:zero_grad()
end

function LightningModule:optimizer_step(epoch, batch_idx, optimizer, optimizer_idx, optimizer_closure)
  optimizer:step(optimizer_closure)
end

function LightningModule:lr_scheduler_step(scheduler, optimizer_idx, metric)
  if metric == nil then scheduler:step() else scheduler:step(metric) end
end

function LightningModule:configure_gradient_clipping(optimizer, optimizer_idx, gradient_clip_val,
                                                     gradient_clip_algorithm)
  self:clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
end

function LightningModule:clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
  if type(gradient_clip_val) == 'table' and getmetatable(gradient_clip_val) == nil then
    -- Lightning's keyword form: clip_gradients(opt, {gradient_clip_val=, gradient_clip_algorithm=})
    local o = gradient_clip_val
    for k in pairs(o) do
      if k ~= 'gradient_clip_val' and k ~= 'gradient_clip_algorithm' then
        errors.TypeError:raise(("clip_gradients got an unexpected keyword argument '%s'"
          .. ' (it takes gradient_clip_val, gradient_clip_algorithm)'):format(tostring(k)), 2)
      end
    end
    gradient_clip_val, gradient_clip_algorithm = o.gradient_clip_val, o.gradient_clip_algorithm
  end
  if type(gradient_clip_algorithm) == 'string' then gradient_clip_algorithm = gradient_clip_algorithm:lower() end
  local trainer = self.trainer
  if trainer then
    local tv, ta = trainer.gradient_clip_val, trainer.gradient_clip_algorithm
    if gradient_clip_val == nil then gradient_clip_val = tv
    elseif tv ~= nil and tv > 0 and tv ~= gradient_clip_val then
      Misconfiguration:raise(('You have set `Trainer(gradient_clip_val=%s)` and have passed'
        .. ' `clip_gradients(gradient_clip_val=%s)`. Please use only one of them.'):format(tv, gradient_clip_val), 2)
    end
    if gradient_clip_algorithm == nil then gradient_clip_algorithm = ta
    elseif ta ~= nil and ta ~= gradient_clip_algorithm and trainer._clip_algorithm_given then
      Misconfiguration:raise(('You have set `Trainer(gradient_clip_algorithm=%q)` and have passed'
        .. ' `clip_gradients(gradient_clip_algorithm=%q)` Please use only one of them.'):format(ta, gradient_clip_algorithm), 2)
    end
  end
  if gradient_clip_val ~= nil and type(gradient_clip_val) ~= 'number' then
    errors.TypeError:raise(('`gradient_clip_val` should be an int or a float. Got %s.'):format(tostring(gradient_clip_val)), 2)
  end
  if gradient_clip_algorithm ~= nil and gradient_clip_algorithm ~= 'norm' and gradient_clip_algorithm ~= 'value' then
    Misconfiguration:raise(("`gradient_clip_algorithm` %s is invalid. Allowed algorithms: ['value', 'norm']."):format(
      tostring(gradient_clip_algorithm)), 2)
  end
  if gradient_clip_val == nil or gradient_clip_val <= 0 then return end
  require('dpl.trainer.optimizers').clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm or 'norm')
end

--- self:manual_backward(loss): backward with the hooks, in manual optimisation.
function LightningModule:manual_backward(loss, ...)
  local trainer = self.trainer
  if not trainer then return loss:backward() end
  if self.automatic_optimization then
    Misconfiguration:raise('`manual_backward` is only available in manual optimisation'
      .. ' (set `self.automatic_optimization = false`)', 2)
  end
  trainer.strategy:pre_backward(loss)
  trainer:_backward(loss, nil, nil, ...)
end

--- The optimizers (wrapped as LightningOptimizer): one, or a list when several.
function LightningModule:optimizers(use_pl_optimizer)
  local trainer = self.trainer
  if not trainer then return nil end
  local list = use_pl_optimizer == false and trainer.optimizers or trainer.strategy._lightning_optimizers
  if list == nil or #list == 0 then return nil end
  if #list == 1 then return list[1] end
  return list
end

--- The lr schedulers: one, a list, or nil.
function LightningModule:lr_schedulers()
  local trainer = self.trainer
  if not trainer or not trainer.lr_scheduler_configs or #trainer.lr_scheduler_configs == 0 then return nil end
  local cfgs = trainer.lr_scheduler_configs
  if #cfgs == 1 then return cfgs[1].scheduler end
  local out = {}
  for i = 1, #cfgs do out[i] = cfgs[i].scheduler end
  return out
end

--- Stores hyper-parameters (a table) as self.hparams; logged and checkpointed.
function LightningModule:save_hyperparameters(tbl, opts, ...)
  local ignore = {}
  if type(tbl) == 'string' then -- save_hyperparameters('lr', 'hidden'): those constructor arguments
    local names, wanted = { tbl, opts, ... }, {}
    local n = select('#', ...) + 2
    if n == 2 and opts == nil then n = 1 end
    for i = 1, n do
      if type(names[i]) ~= 'string' then
        Misconfiguration:raise(('save_hyperparameters: argument names must be strings, got %s at position %d'):format(
          type(names[i]), i), 2)
      end
      wanted[names[i]] = true
    end
    local args = {}
    local info = debug.getinfo(2, 'u')
    for i = 1, info and info.nparams or 0 do
      local name, value = debug.getlocal(2, i)
      if wanted[name] then args[name] = value; wanted[name] = nil end
    end
    local missing = next(wanted)
    if missing then
      Misconfiguration:raise(("save_hyperparameters: '%s' is not an argument of the calling function"):format(missing), 2)
    end
    tbl, opts = args, nil
  elseif tbl == nil then -- save_hyperparameters(): every named argument of the caller (the constructor)
    local args = {}
    local info = debug.getinfo(2, 'u')
    for i = 1, info and info.nparams or 0 do
      local name, value = debug.getlocal(2, i)
      if name ~= 'self' then args[name] = value end
    end
    tbl = args
  elseif type(tbl) ~= 'table' then
    Misconfiguration:raise(('save_hyperparameters expects a table of hyper-parameters, got %s'):format(type(tbl)), 2)
  end
  if opts and opts.ignore then
    for _, k in ipairs(type(opts.ignore) == 'table' and opts.ignore or { opts.ignore }) do ignore[k] = true end
  end
  local hp = {}
  for k, v in pairs(tbl) do
    if not ignore[k] then hp[k] = v end
  end
  self.hparams = hp
  self._hparams_initial = hp
  -- Lightning: a table that is one of the caller's (the constructor's) arguments is saved under that
  -- argument's name, so load_from_checkpoint passes the hyper-parameters back as that argument
  self._hparams_name = 'kwargs'
  local info = debug.getinfo(2, 'u')
  for i = 1, info and info.nparams or 0 do
    local name, value = debug.getlocal(2, i)
    if name ~= 'self' and rawequal(value, tbl) then self._hparams_name = name break end
  end
end

-- the parameter names of a function, without self (a `...` constructor gets only its named ones:
-- Lua has no keyword arguments)
local function param_names(f)
  local names = {}
  local info = debug.getinfo(f, 'u')
  for i = 1, info.nparams or 0 do
    local n = debug.getlocal(f, i)
    if n ~= 'self' then names[#names + 1] = n end
  end
  return names
end

local function py_list(t)
  local parts = {}
  for i, k in ipairs(t) do parts[i] = "'" .. tostring(k) .. "'" end
  return '[' .. table.concat(parts, ', ') .. ']'
end

--- cls built from saved hyper-parameters `hp` (updated in place with `overrides`): each
--- constructor parameter gets the hyper-parameter of its name, or, when they were saved from a
--- table the constructor received (`args_name`, the checkpoint's hparams_name), that parameter
--- gets the table; the overrides win. Shared with LightningDataModule.load_from_checkpoint.
function LightningModule._instantiate(cls, hp, args_name, overrides)
  for k, v in pairs(overrides) do hp[k] = v end
  local names = param_names(cls.__init)
  local kwargs = {}
  for k, v in pairs(hp) do kwargs[k] = v end
  if args_name ~= nil then
    for _, n in ipairs(names) do
      if n == args_name then kwargs = { [args_name] = kwargs } break end
    end
  end
  for k, v in pairs(overrides) do kwargs[k] = v end
  local args = {}
  for i, n in ipairs(names) do args[i] = kwargs[n] end
  return cls(unpack(args, 1, #names))
end
LightningModule._param_names = param_names

--- Model:load_from_checkpoint(path, {map_location=, strict=true, <hyper-parameter>=value, ...}):
--- Lightning's classmethod. Builds the module from the checkpoint's hyper-parameters (those
--- save_hyperparameters stored, updated with the overrides): each constructor parameter gets the
--- hyper-parameter of its name, or, when the hyper-parameters were saved from a table the
--- constructor received (save_hyperparameters(opts) in __init(opts)), that parameter gets the
--- table; then calls on_load_checkpoint(checkpoint) and loads the state dict (strict: missing or
--- unexpected keys raise; strict=false warns about them). Returns the module as its constructor
--- left it (training mode, on the CPU unless the constructor moved it), as Lightning 1.9.
--- The checks load_from_checkpoint makes (LightningModule's and LightningDataModule's): a
--- class method (an instance stands for its class), a path, an options table. Returns the class.
function LightningModule._checkpoint_args(cls, checkpoint_path, opts, example)
  if type(cls) ~= 'table' then
    Misconfiguration:raise(('load_from_checkpoint is a class method: call it as %s:load_from_checkpoint(path, {...})')
      :format(example), 3)
  end
  if rawget(cls, '__index') ~= cls then cls = getmetatable(cls) end -- called on an instance: its class
  if type(checkpoint_path) ~= 'string' then
    Misconfiguration:raise(('load_from_checkpoint: the checkpoint path must be a string, got %s'):format(type(checkpoint_path)), 3)
  end
  if opts ~= nil and type(opts) ~= 'table' then
    Misconfiguration:raise(('load_from_checkpoint: the options must be a table, got %s'):format(type(opts)), 3)
  end
  return cls
end

function LightningModule.load_from_checkpoint(cls, checkpoint_path, opts)
  cls = LightningModule._checkpoint_args(cls, checkpoint_path, opts, 'MyModule')
  opts = opts or {}
  local strict = opts.strict
  if strict == nil then strict = true end
  if type(strict) ~= 'boolean' then
    Misconfiguration:raise(('load_from_checkpoint: strict must be true or false, got %s'):format(tostring(strict)), 2)
  end
  if opts.hparams_file ~= nil then
    errors.NotImplementedError:raise('load_from_checkpoint: hparams_file is not supported; pass the hyper-parameters'
      .. ' to override in the options table', 2)
  end
  -- map_location: where Lightning reads the checkpoint's tensors before load_state_dict copies them
  -- into the module's own; here they are read into host memory, so it changes nothing
  local overrides = {}
  for k, v in pairs(opts) do
    if k ~= 'strict' and k ~= 'map_location' and k ~= 'hparams_file' then overrides[k] = v end
  end
  local ckpt = require('dpl.trainer.checkpoint').load(checkpoint_path)
  local hp = ckpt.hyper_parameters
  if type(hp) ~= 'table' then hp = {}; ckpt.hyper_parameters = hp end
  local obj = LightningModule._instantiate(cls, hp, ckpt.hparams_name, overrides)

  obj:on_load_checkpoint(ckpt)
  local keys = obj:load_state_dict(ckpt.state_dict or {}, { strict = strict })
  if not strict and type(keys) == 'table' and require('dpl.log').rank() == 0 then -- rank_zero_warn
    local log = require 'dpl.log'
    if keys.missing_keys and #keys.missing_keys > 0 then
      log.warn('Found keys that are in the model state dict but not in the checkpoint: %s', py_list(keys.missing_keys))
    end
    if keys.unexpected_keys and #keys.unexpected_keys > 0 then
      log.warn('Found keys that are not in the model state dict but in the checkpoint: %s', py_list(keys.unexpected_keys))
    end
  end
  return obj
end

--- self:freeze(): every parameter stops requiring gradients and the module goes to eval mode
--- (Lightning's, for inference); self:unfreeze() undoes both.
function LightningModule:freeze()
  self:requires_grad_(false)
  self:eval()
end
function LightningModule:unfreeze()
  self:requires_grad_(true)
  self:train()
end

--- self:print(...): prints on global rank 0 only.
function LightningModule:print(...)
  if (self.trainer and self.trainer.global_rank or 0) == 0 then print(...) end
end

---------------------------------------------------------------- logging

local log_defaults = { prog_bar = false, logger = true, reduce_fx = 'mean', sync_dist = false,
  add_dataloader_idx = true, rank_zero_only = false }

-- the options of self:log and self:log_dict: Lightning's keyword arguments (log_dict has no
-- metric_attribute); a key not among them is a TypeError there, as here
local log_order = { 'prog_bar', 'logger', 'on_step', 'on_epoch', 'reduce_fx', 'enable_graph', 'sync_dist',
  'sync_dist_group', 'add_dataloader_idx', 'batch_size', 'metric_attribute', 'rank_zero_only' }
local log_keys, log_dict_keys = {}, {}
for _, k in ipairs(log_order) do log_keys[k] = true; log_dict_keys[k] = k ~= 'metric_attribute' or nil end
local function list_keys(keys)
  local out = {}
  for _, k in ipairs(log_order) do if keys[k] then out[#out + 1] = k end end
  return table.concat(out, ', ')
end

-- a cold path: the error for an option that is not one
local function bad_option(fn, opts, keys)
  if type(opts) ~= 'table' then
    errors.TypeError:raise(('%s: the options must be a table ({on_step=true, ...}), got %s'):format(fn, type(opts)), 3)
  end
  for k in pairs(opts) do
    if not keys[k] then
      errors.TypeError:raise(("%s got an unexpected option '%s' (the options are: %s)"):format(fn, tostring(k), list_keys(keys)), 3)
    end
  end
end

--- self:log(name, value, {on_step=, on_epoch=, prog_bar=false, logger=true,
--- reduce_fx='mean', sync_dist=false, sync_dist_group=, batch_size=, add_dataloader_idx=true,
--- rank_zero_only=false, enable_graph=false, metric_attribute=}).
function LightningModule:log(name, value, opts)
  if opts ~= nil then -- (every step: a look at each key of the small table, nothing allocated)
    if type(opts) ~= 'table' then bad_option('self:log()', opts, log_keys) end
    for k in next, opts do
      if not log_keys[k] then bad_option('self:log()', opts, log_keys) end
    end
  end
  local trainer = self.trainer
  if trainer == nil then
    -- Lightning warns once and does nothing when no trainer is attached
    if not self._warned_no_trainer then
      self._warned_no_trainer = true
      require('dpl.log').warn('You are trying to `self:log()` but the `self.trainer` reference is not'
        .. ' registered on the model yet. This is most likely because the model hasn\'t been passed'
        .. ' to the `Trainer`')
    end
    return
  end
  if type(name) ~= 'string' then
    Misconfiguration:raise(('self:log: the name must be a string, got %s'):format(type(name)), 2)
  end
  trainer._results_connector:log(self._current_fx_name, name, value, opts or log_defaults)
end

--- self:log_dict({name = value, ...}, opts): self:log for each entry (same options).
function LightningModule:log_dict(dict, opts)
  if type(dict) ~= 'table' then
    Misconfiguration:raise(('self:log_dict expects a table, got %s'):format(type(dict)), 2)
  end
  if opts ~= nil then
    if type(opts) ~= 'table' then bad_option('self:log_dict()', opts, log_dict_keys) end
    for k in next, opts do
      if not log_dict_keys[k] then bad_option('self:log_dict()', opts, log_dict_keys) end
    end
  end
  if dict.__is_metric_collection then
    -- Lightning's log_dict(MetricCollection): each metric object under its prefixed name
    for k, m in dict:items() do self:log(k, m, opts) end
    return
  end
  local keys = {}
  for k in pairs(dict) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for i = 1, #keys do self:log(keys[i], dict[keys[i]], opts) end
end

return LightningModule
