-- dpl.trainer.loops: the run (setup, hooks, teardown) and the fit / evaluation /
-- predict loops, in Lightning 1.9's order (reference: lightning-hooks.md §2-§5,
-- §9). The step path allocates no closures and formats no strings: one closure
-- per optimizer is made per fit, and the batch state lives in a table.
local errors = require 'dpl.errors'
local class = require 'dpl.class'
local log = require 'dpl.log'

local Misconfiguration = errors.MisconfigurationException
local M = {}

local huge, floor, min = math.huge, math.floor, math.min

local function misconf(fmt, ...)
  error(Misconfiguration(select('#', ...) > 0 and fmt:format(...) or fmt), 0)
end

---------------------------------------------------------------- dataloaders

local function is_loader(x)
  local tx = type(x)
  if tx == 'userdata' then return true end
  if tx == 'table' and getmetatable(x) ~= nil then return true end
  if tx == 'table' and type(rawget(x, 'iter')) == 'function' then return true end
  return false
end

--- nil, one loader or a list of loaders -> a list
local function as_loader_list(x)
  if x == nil then return {} end
  if is_loader(x) then return { x } end
  if type(x) == 'table' then
    for i, l in ipairs(x) do
      if not is_loader(l) then misconf('dataloaders[%d] is not a DataLoader (got %s)', i, tostring(l)) end
    end
    local n = #x
    for k in pairs(x) do
      if not (type(k) == 'number' and k >= 1 and k <= n and k % 1 == 0) then
        misconf('expected a DataLoader or a list of DataLoaders, got a table with the key %s (a table of loaders by'
          .. ' name is for training only: it combines them into one, CombinedLoader)', tostring(k))
      end
    end
    return x
  end
  misconf('expected a DataLoader or a list of DataLoaders, got %s', type(x))
end
M.as_loader_list = as_loader_list

--- Number of batches of a loader, or nil when unknown.
--- The end of the Trainer's pass over loader l (its batches done, or limited by
--- limit_*_batches / max_steps): a loader's worker processes (num_workers > 0, not
--- persistent_workers) end now, as torch's do when the loop drops its iterator.
function M.end_pass(l)
  pcall(function()
    if type(l.num_workers) == 'number' and l.num_workers > 0 and not l.persistent_workers
      and type(l.shutdown_workers) == 'function' then
      l:shutdown_workers()
    end
  end)
end

local function loader_len(l)
  local ok, f = pcall(function() return l.num_batches end)
  if ok and type(f) == 'function' then return f(l) end
  if type(l) == 'userdata' then
    local ok2, n = pcall(function() return #l end)
    if ok2 and type(n) == 'number' then return n end
  end
  if type(l) == 'table' then
    local mt = getmetatable(l)
    if mt and mt.__len then return mt.__len(l) end
  end
  return nil
end
M.loader_len = loader_len

local limit_names = { train = 'train', val = 'val', test = 'test', predict = 'predict' }

--- Applies limit_<stage>_batches to a loader's length (Lightning's rules).
local function limited(trainer, stage, n)
  local lim = trainer._args._limits[stage]
  if lim.kind == 'all' then return n or huge end
  if lim.kind == 'count' then return n and min(n, lim.value) or lim.value end
  if n == nil then -- (Lightning 1.9.5's messages, the training one without its space)
    if stage == 'train' then
      misconf('When using an `IterableDataset`, `Trainer(limit_train_batches)` must be `1.0` or an int.An int specifies'
        .. ' `num_training_batches` to use.')
    end
    misconf('When using an `IterableDataset`, `Trainer(limit_%s_batches)` must be `1.0` or an int. An int specifies'
      .. ' `num_%s_batches` to use.', stage, stage)
  end
  local k = floor(n * lim.value)
  if k == 0 and lim.value > 0 and n > 0 then
    misconf('You requested to check %s of the `%s_dataloader` but %s * %d < 1. Please increase the `limit_%s_batches` argument. Try at least `limit_%s_batches=%s`',
            lim.value, limit_names[stage], lim.value, n, stage, stage, 1 / n)
  end
  return k
end

-- A loader like l drawing from sampler s, l left untouched (Lightning's
-- _update_dataloader re-instantiates the user's DataLoader): dpl.data loaders copy
-- themselves; another Lua object is copied field by field with its metatable.
local function with_sampler(l, s)
  local ok, f = pcall(function() return l.with_sampler end)
  if ok and type(f) == 'function' then return f(l, s) end
  if type(l) == 'table' then
    local copy = {}
    for k, v in pairs(l) do copy[k] = v end
    copy.sampler = s
    return setmetatable(copy, getmetatable(l))
  end
  misconf('the Trainer needs to give this DataLoader a %s, but cannot copy a %s: pass a dpl.data.DataLoader'
    .. ' (or set use_distributed_sampler=false and shard the data yourself)', tostring(s.__name or 'sampler'), type(l))
end
M._with_sampler = with_sampler

local hook_of = { train = 'train_dataloader', val = 'val_dataloader', test = 'test_dataloader', predict = 'predict_dataloader' }

--- Whether a stage has loaders: given to the entry point, else the hook of its source (the
--- datamodule of this call when there is one, else the module) is defined.
function M.has_loader_source(t, stage)
  if t._loaders[stage] ~= nil then return true end
  if t._dm ~= nil then return t:_dm_overridden(hook_of[stage]) end
  return t:_is_overridden(hook_of[stage])
end

--- The loaders of a stage: given to fit/validate/..., else the datamodule's hook (with one),
--- else the model's.
-- several training loaders (a table of them by name, nested tables, a list of more than one,
-- or a CombinedLoader): combined into one, whose batches have the collection's shape
local function multiple_train_loaders(raw)
  if type(raw) ~= 'table' then return false end
  if require('dpl.combined_loader').is_combined(raw) then return true end
  if is_loader(raw) then return false end
  if #raw == 1 and next(raw, 1) == nil and is_loader(raw[1]) then return false end
  return next(raw) ~= nil
end

function M.load_loaders(t, stage)
  local given = t._loaders[stage]
  local raw
  local lim = t._args._limits[stage]
  if lim.kind ~= 'all' and lim.value == 0 then
    return {}, {}
  elseif given ~= nil then
    raw = given
  elseif t._dm ~= nil then
    if t:_dm_overridden(hook_of[stage]) then raw = t:_call_datamodule_hook(hook_of[stage]) end
  elseif stage == 'train' or t:_is_overridden(hook_of[stage]) then
    raw = t:_call_module_hook(hook_of[stage])
  end
  local distributed = t.use_distributed_sampler and t.world_size > 1
  local data = require 'dpl.data'
  if stage == 'train' and multiple_train_loaders(raw) then
    local C = require 'dpl.combined_loader'
    local mode = t.multiple_trainloader_mode
    if C.is_combined(raw) then mode, raw = raw.mode, raw.loaders end
    -- each loader prepared as a single one would be (samplers, strategy), then combined
    local combined = C.new(C.map_leaves(raw, function(l) return M._prepare_loader(t, stage, l, distributed, data) end), mode)
    for _, l in ipairs(combined._leaves) do
      if loader_len(l) ~= nil then M._warn_sized_iterable(t, l, data) end
    end
    return { combined }, { limited(t, stage, loader_len(combined)) }
  end
  local list = as_loader_list(raw)
  local out = {} -- the trainer's loaders: the user's list and loaders are left as they are
  for i = 1, #list do out[i] = M._prepare_loader(t, stage, list[i], distributed, data) end
  list = out
  local counts = {}
  for i = 1, #list do
    local n = loader_len(list[i])
    if n ~= nil then M._warn_sized_iterable(t, list[i], data) end
    counts[i] = limited(t, stage, n)
  end
  return list, counts
end

-- Lightning's has_len_all_ranks warning for a loader over an IterableDataset that has a length
function M._warn_sized_iterable(t, l, data)
  local ok, ds = pcall(function() return l.dataset end)
  if ok and data.is_iterable(ds) and t.is_global_zero ~= false then
    log.warn('Your `IterableDataset` has `__len__` defined. In combination with multi-process data loading (when'
      .. ' num_workers > 1), `__len__` could be inaccurate if each worker is not configured independently to avoid'
      .. ' having duplicate data.')
  end
end

--- One loader as the Trainer runs it: unshuffled for overfit_batches, the strategy's
--- process_dataloader, and a DistributedSampler (or wrapper) with several processes.
function M._prepare_loader(t, stage, l, distributed, data)
  if type(l) == 'table' and l.iter == nil and not require('dpl.combined_loader').is_combined(l) then
    -- a Dataset (or another object) where a DataLoader belongs: Lightning's TypeError, with the fix
    local fn = t.state and t.state.fn or 'fit'
    local arg = stage == 'train' and 'train_dataloaders' or (fn == 'fit' and 'val_dataloaders' or 'dataloaders')
    local name = type(l.__name) == 'string' and l.__name or 'a table'
    errors.TypeError:raise(('An invalid dataloader was passed to `Trainer.%s(%s=...)`. Found %s%s.'):format(fn, arg, name,
      type(l.get) == 'function' and ', a Dataset: wrap it in a loader, dpl.data.DataLoader(dataset, {batch_size = 32})'
        or ', which has no iter() method (a dpl.data.DataLoader has one)'), 0)
  end
  if stage == 'train' and t._args._overfit then
    local s = l.sampler
    if s and (s.__name == 'RandomSampler' or (s.shuffle == true and s.num_replicas == nil)) then
      log.warn('You requested to overfit but enabled training dataloader shuffling. We are turning off the training dataloader shuffling for you.')
      l = with_sampler(l, data.SequentialSampler(data.len(s)))
    end
  end
  l = t.strategy:process_dataloader(l)
  if distributed then l = M.with_distributed_sampler(t.strategy, l, stage == 'predict') end
  return l
end

--- A loader with this rank's DistributedSampler, as Lightning gives one: a RandomSampler or
--- SequentialSampler becomes a DistributedSampler over the dataset (shuffled as the loader
--- was); any other sampler is wrapped, each rank taking its share of the positions it yields
--- (DistributedSamplerWrapper); a loader whose sampler is already distributed is left as it is.
--- The shuffle's seed is seed_everything's (PL_GLOBAL_SEED), else 0, as Lightning's. (The
--- Trainer's loaders and dpl.Fabric's setup_dataloaders.) unrepeated (predict): the samplers
--- that do not pad (Lightning's UnrepeatedDistributedSampler(Wrapper)), so no item is predicted
--- twice.
function M.with_distributed_sampler(strategy, l, unrepeated)
  local s = l.sampler
  if type(s) ~= 'table' or s.num_replicas ~= nil then return l end
  local data = require 'dpl.data'
  local kw = strategy:distributed_sampler_kwargs()
  local seed = math.floor(tonumber(os.getenv('PL_GLOBAL_SEED') or '') or 0)
  local random = s.__name == 'RandomSampler' or class.is_instance(s, data.RandomSampler)
  -- (a RandomSampler with replacement or num_samples yields its own draws: wrapped below)
  local own_draws = random and (s.replacement == true or s._num_samples ~= nil)
  local ds
  if not own_draws and (random or s.__name == 'SequentialSampler' or class.is_instance(s, data.SequentialSampler)) then
    ds = (unrepeated and data.UnrepeatedDistributedSampler or data.DistributedSampler){ dataset = l.dataset,
      num_replicas = kw.num_replicas, rank = kw.rank, shuffle = random, seed = seed }
  else
    ds = (unrepeated and data.UnrepeatedDistributedSamplerWrapper or data.DistributedSamplerWrapper){ sampler = s,
      num_replicas = kw.num_replicas, rank = kw.rank, shuffle = false, seed = seed }
  end
  return with_sampler(l, ds)
end

---------------------------------------------------------------- batch transfer

-- precision 64: floating tensors of a batch as float64 (new tables, input untouched)
local function to_double(b, depth)
  local T = package.loaded['dpl.tensor']
  if T and T.is_tensor(b) then
    if b:is_floating_point() and b.dtype ~= 'float64' then return b:to('float64') end
    return b
  end
  if type(b) == 'table' and getmetatable(b) == nil and (depth or 0) < 16 then
    local out = {}
    for k, v in pairs(b) do out[k] = to_double(v, (depth or 0) + 1) end
    return out
  end
  return b
end
M._to_double = to_double

local transfer_hooks = { 'on_before_batch_transfer', 'transfer_batch_to_device', 'on_after_batch_transfer' }

--- With a datamodule: which of it and the module runs each batch-transfer hook (Lightning's
--- _DataHookSelector: the datamodule's when it overrides the hook, with a warning when the
--- module does too; the module's otherwise, with a warning when it overrides it). Sets
--- t._dm_transfer (nil: every hook is the module's, the common case).
function M.select_transfer_hooks(t)
  t._dm_transfer = nil
  if t._dm == nil then return end
  local sel
  for _, h in ipairs(transfer_hooks) do
    if t:_dm_overridden(h) then
      if t:_is_overridden(h) then
        log.warn('You have overridden `%s` in both `LightningModule` and `LightningDataModule`. It will use the'
          .. ' implementation from `LightningDataModule` instance.', h)
      end
      sel = sel or {}
      sel[h] = true
    elseif t:_is_overridden(h) then
      log.warn('You have overridden `%s` in `LightningModule` but have passed in a `LightningDataModule`. It will'
        .. ' use the implementation from `LightningModule` instance.', h)
    end
  end
  t._dm_transfer = sel
end

local function data_hook(t, sel, name, ...)
  if sel and sel[name] then return t:_call_datamodule_hook(name, ...) end
  return t:_call_module_hook(name, ...)
end

local function transfer(t, batch, dl_idx)
  local sel = t._dm_transfer
  if sel == nil then
    batch = t:_call_module_hook('on_before_batch_transfer', batch, dl_idx)
    batch = t:_call_module_hook('transfer_batch_to_device', batch, t.strategy.root_device, dl_idx)
    batch = t:_call_module_hook('on_after_batch_transfer', batch, dl_idx)
  else
    batch = data_hook(t, sel, 'on_before_batch_transfer', batch, dl_idx)
    batch = data_hook(t, sel, 'transfer_batch_to_device', batch, t.strategy.root_device, dl_idx)
    batch = data_hook(t, sel, 'on_after_batch_transfer', batch, dl_idx)
  end
  if t.precision == 64 then batch = to_double(batch) end
  return batch
end
M.transfer = transfer

---------------------------------------------------------------- gradient mode

local autograd_mod
--- Turns gradient recording on/off (dpl.autograd); returns the previous mode
--- (nil when autograd is not there).
function M.set_grad_enabled(on)
  if autograd_mod == nil then
    local ok, ag = pcall(require, 'dpl.autograd')
    autograd_mod = ok and type(ag) == 'table' and ag.set_grad_enabled and ag or false
  end
  if not autograd_mod then return nil end
  local prev = autograd_mod.is_grad_enabled()
  autograd_mod.set_grad_enabled(on)
  return prev
end

---------------------------------------------------------------- the run

function M.run(t, model, ckpt_path)
  local strategy = t.strategy
  local fn = t.state.fn
  local rc = t._results_connector
  t.lightning_module = model
  model.trainer = t
  -- self.logger / self.loggers: the trainer's (Lightning's properties)
  model.logger, model.loggers = t.logger, t.loggers
  model.global_rank, model.local_rank = t.global_rank, t.local_rank
  strategy:connect(model)
  t.model = strategy.model
  t._cb_hooks = {}

  t:_attach_model_callbacks()
  M.verify_loop_configurations(t)
  M.select_transfer_hooks(t)
  -- the profiler (SimpleProfiler, ...) of this run: set up in the process that runs the
  -- loop (a ddp_spawn worker too), its report at the end (on an error as well)
  local prof = t._prof
  if prof then
    prof:setup(fn, t.world_size > 1 and t.local_rank or nil, t.log_dir)
    local profilers = require 'dpl.profilers'
    local ok, res = xpcall(M._run_stages, function(e) return profilers.traceback(e, 2) end, t, model, ckpt_path)
    -- an action the loop started and an error cut short is stopped (Lightning's profile()
    -- context manager), so the next run can start it again
    if t._prof_open then
      pcall(prof.stop, prof, t._prof_open)
      t._prof_open = nil
    end
    local dok, derr = pcall(prof.describe, prof)
    if not ok then error(res, 0) end
    if not dok then error(derr, 0) end
    return res
  end
  return M._run_stages(t, model, ckpt_path)
end

function M._run_stages(t, model, ckpt_path)
  local strategy = t.strategy
  local fn = t.state.fn
  local rc = t._results_connector
  -- prepare_data: the datamodule's then the module's, on each node's local rank 0 (or on
  -- global rank 0 only for an object with prepare_data_per_node = false)
  local dm = t.datamodule
  local function prepare_here(obj)
    if obj.prepare_data_per_node == false then return t.local_rank == 0 and (t.node_rank or 0) == 0 end
    return t.local_rank == 0
  end
  if dm ~= nil and prepare_here(dm) then t:_call_datamodule_hook('prepare_data') end
  if prepare_here(model) then t:_call_module_hook('prepare_data') end
  rc:reset_metrics()
  strategy:setup_device()
  strategy:setup_environment()
  -- setup hooks
  local stage = fn
  strategy:barrier('pre_setup')
  if dm ~= nil then t:_call_datamodule_hook('setup', stage) end
  t:_call_callback_hooks('setup', stage)
  t:_call_module_hook('setup', stage)
  strategy:barrier('post_setup')

  local ckpt
  if ckpt_path ~= nil then
    log.info('Restoring states from the checkpoint path at %s', ckpt_path) -- (Lightning's resume_start)
    ckpt = require('dpl.trainer.checkpoint').load(ckpt_path)
    require('dpl.trainer.checkpoint').restore_modules_and_callbacks(t, ckpt)
  end
  t:_call_module_hook('configure_sharded_model')
  strategy:setup(t)
  t.model = strategy.model
  t.optimizers = strategy.optimizers
  t.lr_scheduler_configs = strategy.lr_scheduler_configs

  if fn == 'fit' then
    t:_call_callback_hooks('on_fit_start')
    t:_call_module_hook('on_fit_start')
  end
  -- hyper-parameters to the loggers, at the start of every entry point (Lightning's _log_hyperparams)
  if #t.loggers > 0 then
    local hp = M.merged_hparams(model, t.datamodule) -- (on every rank: a clash stops them all)
    if t.is_global_zero then
      for _, lg in ipairs(t.loggers) do
        lg:log_hyperparams(hp)
        if type(lg.log_graph) == 'function' then lg:log_graph(model) end
        if type(lg.save) == 'function' then lg:save() end
      end
    end
  end
  if ckpt and fn == 'fit' then require('dpl.trainer.checkpoint').restore_training_state(t, ckpt) end
  if ckpt then -- (Lightning's resume_end)
    if fn == 'fit' then log.info('Restored all states from the checkpoint file at %s', ckpt_path)
    else log.info('Loaded model weights from checkpoint at %s', ckpt_path) end
  end

  local result
  if fn == 'fit' then
    M.run_train(t)
  elseif fn == 'validate' then
    result = M.run_evaluation_entry(t, 'val')
  elseif fn == 'test' then
    result = M.run_evaluation_entry(t, 'test')
  else
    result = M.run_predict(t)
  end

  strategy:teardown()
  if fn == 'fit' then
    t:_call_callback_hooks('on_fit_end')
    t:_call_module_hook('on_fit_end')
  end
  if dm ~= nil then t:_call_datamodule_hook('teardown', stage) end
  t:_call_callback_hooks('teardown', stage)
  t:_call_module_hook('teardown', stage)
  model._current_fx_name = nil
  for _, lg in ipairs(t.loggers) do
    if t.is_global_zero then lg:finalize('success') end
  end
  return result
end

--- The hyper-parameters the loggers get: the module's, merged with the datamodule's when it
--- saved some (Lightning's _log_hyperparams: a key in both with different values is an error).
function M.merged_hparams(model, dm)
  local mh = model.hparams or {}
  local dh = dm ~= nil and dm.hparams or nil
  if type(dh) ~= 'table' or next(dh) == nil then return mh end
  if next(mh) == nil then return dh end
  local bad = {}
  for k, v in pairs(mh) do
    local w = dh[k]
    if w ~= nil and (type(v) ~= type(w) or (type(v) == 'table' and not rawequal(v, w)) or (type(v) ~= 'table' and v ~= w)) then
      bad[#bad + 1] = "'" .. tostring(k) .. "'"
    end
  end
  if #bad > 0 then
    table.sort(bad)
    misconf("Error while merging hparams: the keys [%s] are present in both the LightningModule's and"
      .. " LightningDataModule's hparams but have different values.", table.concat(bad, ', '))
  end
  local out = {}
  for k, v in pairs(mh) do out[k] = v end
  for k, v in pairs(dh) do out[k] = v end
  return out
end

---------------------------------------------------------------- configuration checks

--- Lightning's _verify_loop_configurations: what each entry point needs.
function M.verify_loop_configurations(t)
  local fn = t.state.fn
  local ov = function(name) return t:_is_overridden(name) end
  local minimum = 'Lightning `Trainer` expects as minimum a `training_step()`, `train_dataloader()` and'
    .. ' `configure_optimizers()` to be defined.'
  -- no loaders given and no hook of the module (or the datamodule) to make them, for the
  -- stage this entry point needs (Lightning's _check_dataloader_none, before the checks below)
  local need = ({ fit = 'train', validate = 'val', test = 'test', predict = 'predict' })[fn]
  if need and not M.has_loader_source(t, need) then
    errors.ValueError:raise(('An invalid dataloader was passed to `Trainer.%s(%sdataloaders=...)`. Either pass the'
      .. ' dataloader to the `.%s()` method OR implement `def %s(self):` in your LightningModule/LightningDataModule.')
      :format(fn, fn == 'fit' and 'train_' or '', fn, hook_of[need]), 0)
  end
  if t._dm ~= nil then
    for _, h in ipairs({ 'on_save_checkpoint', 'on_load_checkpoint' }) do
      if t:_dm_overridden(h) then
        errors.NotImplementedError:raise(('`LightningDataModule.%s` was deprecated in v1.6 and is no longer supported'
          .. ' as of v1.8. Use `%s` instead.'):format(h, h == 'on_save_checkpoint' and 'state_dict' or 'load_state_dict'), 0)
      end
    end
  end
  if fn == 'fit' then
    if not ov('training_step') then misconf('No `training_step()` method defined. %s', minimum) end
    if not ov('configure_optimizers') then misconf('No `configure_optimizers()` method defined. %s', minimum) end
    local has_val = M.has_loader_source(t, 'val')
    if has_val and not ov('validation_step') then
      log.warn('You passed in a `val_dataloader` but have no `validation_step`. Skipping val loop.')
    end
    if not t.lightning_module.automatic_optimization then
      if t.gradient_clip_val ~= nil and t.gradient_clip_val > 0 then
        misconf('Automatic gradient clipping is not supported for manual optimization. Remove'
          .. ' `Trainer(gradient_clip_val=%s)` or switch to automatic optimization.', tostring(t.gradient_clip_val))
      end
      if t.accumulate_grad_batches ~= 1 or t.accumulation_scheduler:going_to_accumulate_grad_batches() then
        misconf('Automatic gradient accumulation is not supported for manual optimization. Remove'
          .. ' `Trainer(accumulate_grad_batches=%s)` or switch to automatic optimization.', tostring(t.accumulate_grad_batches))
      end
    end
  elseif fn == 'validate' then
    if not ov('validation_step') then misconf('No `validation_step()` method defined to run `Trainer.validate`.') end
  elseif fn == 'test' then
    if not ov('test_step') then misconf('No `test_step()` method defined to run `Trainer.test`.') end
  end
end

---------------------------------------------------------------- evaluation

local nouns = { val = 'validation', test = 'test' }
local eval_hooks = {}
for stage, noun in pairs(nouns) do
  eval_hooks[stage] = {
    model_eval = 'on_' .. noun .. '_model_eval', model_train = 'on_' .. noun .. '_model_train',
    start = 'on_' .. noun .. '_start', epoch_start = 'on_' .. noun .. '_epoch_start',
    batch_start = 'on_' .. noun .. '_batch_start', step = noun .. '_step', step_end = noun .. '_step_end',
    batch_end = 'on_' .. noun .. '_batch_end', epoch_end_model = noun .. '_epoch_end',
    epoch_end = 'on_' .. noun .. '_epoch_end', ['end'] = 'on_' .. noun .. '_end',
  }
end

--- Whether validation is enabled: a val loader source, validation_step, limit > 0.
function M.enable_validation(t)
  local lim = t._args._limits.val
  if lim.kind ~= 'all' and lim.value == 0 then return false end
  if not t:_is_overridden('validation_step') then return false end
  return M.has_loader_source(t, 'val') or t._val_loaders ~= nil
end

--- One evaluation run (validation in fit or alone, sanity check, test).
--- Returns the epoch metrics per dataloader, or nil when there were no batches.
function M.run_evaluation(t, stage, sanity)
  local H = eval_hooks[stage]
  local rc = t._results_connector
  local loaders, counts
  if stage == 'val' then
    if t._val_loaders == nil then
      t._val_loaders, t._val_counts = M.load_loaders(t, 'val')
      t.num_val_batches = t._val_counts
    end
    loaders, counts = t._val_loaders, t._val_counts
  else
    loaders, counts = M.load_loaders(t, 'test')
    t.num_test_batches = counts
    t._test_loaders = loaders
  end
  local maxes, total = {}, 0
  for i = 1, #loaders do
    local c = counts[i]
    if sanity then c = min(c, t.num_sanity_val_steps) end
    maxes[i] = c
    total = total + c
  end
  if sanity then t.num_sanity_val_batches = maxes end
  if total == 0 then return nil end

  local prev_stage = rc.current
  local was_training = t.training
  t.training = false
  if stage == 'val' then t.validating = true else t.testing = true end
  rc:set_stage(stage)
  rc:reset_collection(stage)
  rc.num_dataloaders = #loaders
  rc:clear_dataloader_idx()
  local model = t.lightning_module
  local strategy = t.strategy
  local ndl = #loaders

  local grad_prev = M.set_grad_enabled(false) -- evaluation records no gradients (torch.no_grad)
  t:_call_module_hook(H.model_eval)
  model:zero_grad()
  t:_call_callback_hooks(H.start)
  t:_call_module_hook(H.start)
  t:_call_callback_hooks(H.epoch_start)
  t:_call_module_hook(H.epoch_start)

  local keep = t:_is_overridden(H.epoch_end_model)
  local outputs = {}
  -- the step the loggers get for a batch's on_step values: the batch's count in its own
  -- dataloader, kept across the evaluations that use the same loaders and started again when
  -- they are (re)loaded (Lightning's _dl_batch_idx, reset by _reload_evaluation_dataloaders);
  -- every batch counts, whether or not it logged anything
  local counter_name = '_eval_steps_' .. stage
  local steps = t[counter_name]
  if steps == nil or steps.loaders ~= loaders then
    steps = { loaders = loaders }
    t[counter_name] = steps
  end
  for d = 1, ndl do
    local dl_idx = d - 1
    local outs = {}
    local it = loaders[d]:iter()
    local i = 0
    while i < maxes[d] do
      local batch = it()
      if batch == nil then break end
      rc:on_batch_start(batch, dl_idx)
      batch = transfer(t, batch, dl_idx)
      t:_call_callback_hooks(H.batch_start, batch, i, dl_idx)
      t:_call_module_hook(H.batch_start, batch, i, dl_idx)
      local out
      if ndl > 1 then out = t:_call_strategy_step(H.step, batch, i, dl_idx)
      else out = t:_call_strategy_step(H.step, batch, i) end
      out = t:_call_module_hook(H.step_end, out)
      out = strategy[H.step_end](strategy, out)
      t:_call_callback_hooks(H.batch_end, out, batch, i, dl_idx)
      t:_call_module_hook(H.batch_end, out, batch, i, dl_idx)
      local logd = rc:collect_step(false)
      if logd then
        if not sanity then rc:log_metrics(logd, steps[d] or 0) end
        rc:release(logd)
      end
      if not sanity then steps[d] = (steps[d] or 0) + 1 end
      if keep and out ~= nil then outs[#outs + 1] = out end
      i = i + 1
    end
    M.end_pass(loaders[d])
    outputs[d] = outs
  end
  rc:clear_dataloader_idx()
  rc:collect_epoch() -- epoch aggregates visible to the epoch-end hooks
  if keep then
    t:_call_module_hook(H.epoch_end_model, ndl == 1 and outputs[1] or outputs)
  end
  t:_call_callback_hooks(H.epoch_end)
  t:_call_module_hook(H.epoch_end)
  local logd = rc:collect_epoch()
  rc:end_epoch()
  if not sanity then
    rc:log_metrics(logd)
    t._val_ran = t._val_ran or stage == 'val'
  end
  t:_call_callback_hooks(H['end'])
  t:_call_module_hook(H['end'])
  t:_call_module_hook(H.model_train)
  if grad_prev ~= nil then M.set_grad_enabled(grad_prev) end

  -- results per dataloader
  local results = {}
  for d = 1, ndl do results[d] = {} end
  for k, v in pairs(logd) do
    local idx = k:match('/dataloader_idx_(%d+)$')
    if idx then results[tonumber(idx) + 1][k] = v
    else for d = 1, ndl do results[d][k] = v end end
  end
  if stage == 'val' then t.validating = false else t.testing = false end
  t.training = was_training
  rc.current = prev_stage
  rc.num_dataloaders = 1
  return results
end

--- validate / test entry: the evaluation, the results table printed (rank 0).
function M.run_evaluation_entry(t, stage)
  local rc = t._results_connector
  t._val_loaders = nil
  local results = M.run_evaluation(t, stage, false)
  rc:set_stage(nil)
  if results == nil then return {} end
  if t._verbose and t.is_global_zero then M.print_results(stage, results) end
  return results
end

-- Python's repr of a float (what Lightning's f"{val}" prints): the shortest digits that read
-- back as the same double; fixed notation for exponents -4..15 (with ".0" when integral), else
-- scientific with a signed two-digit exponent
function M._py_float(v)
  if v ~= v then return 'nan' end
  if v == math.huge then return 'inf' elseif v == -math.huge then return '-inf' end
  if v == 0 then return (1 / v < 0) and '-0.0' or '0.0' end
  local m
  for p = 1, 17 do
    m = ('%.' .. (p - 1) .. 'e'):format(v)
    if tonumber(m) == v then break end
  end
  local sign, d1, rest, e = m:match('^(%-?)(%d)%.?(%d*)e([-+]%d+)$')
  local digits = (d1 .. rest):gsub('0+$', '')
  if digits == '' then digits = '0' end
  e = tonumber(e)
  if e >= -4 and e < 16 then
    if e >= 0 then
      local int = digits:sub(1, e + 1)
      int = int .. string.rep('0', e + 1 - #int)
      local frac = digits:sub(e + 2)
      return sign .. int .. '.' .. (frac == '' and '0' or frac)
    end
    return sign .. '0.' .. string.rep('0', -e - 1) .. digits
  end
  local mant = digits:sub(1, 1) .. (#digits > 1 and ('.' .. digits:sub(2)) or '')
  return ('%s%se%s%02d'):format(sign, mant, e < 0 and '-' or '+', math.abs(e))
end

-- shutil.get_terminal_size(fallback=(120, 30)).columns or 120: $COLUMNS when a positive integer,
-- else the terminal on stdout, else 120
local function term_columns()
  local c = tonumber(os.getenv('COLUMNS') or '')
  if c and c > 0 and c == math.floor(c) then return c end
  local ok, cols = pcall(function()
    local ffi = require 'ffi'
    pcall(ffi.cdef, 'struct dpl_winsize { unsigned short ws_row, ws_col, ws_xpixel, ws_ypixel; };'
      .. ' int ioctl(int fd, unsigned long request, ...);')
    local ws = ffi.new('struct dpl_winsize')
    if ffi.C.ioctl(1, 0x5413, ws) ~= 0 then return nil end -- TIOCGWINSZ
    return ws.ws_col
  end)
  if ok and cols and cols > 0 then return cols end
  return 120
end

--- Lightning 1.9.5's EvaluationLoop._print_results (the layout without `rich`): the metrics
--- (their /dataloader_idx_k suffix removed) sorted, one centred column per dataloader, as many
--- dataloaders per table as the terminal's width holds, "─" rules as wide as the terminal.
function M.print_results(stage, results, columns)
  local cleaned, keys = {}, {}
  for d = 1, #results do
    cleaned[d] = {}
    for k, v in pairs(results[d]) do
      local name = tostring(k):gsub('/dataloader_idx_%d+$', '')
      cleaned[d][name] = v
      keys[name] = true
    end
  end
  local names = {}
  for k in pairs(keys) do names[#names + 1] = k end
  if #names == 0 then return end
  table.sort(names)
  local term = columns or term_columns()
  local longest = 0
  for _, k in ipairs(names) do longest = math.max(longest, #k) end
  local header_len = #('DataLoader ' .. (#results - 1))
  local maxlen = math.floor(math.min(math.max(longest, header_len, 25), term / 2))
  local function centre(v)
    local pad = maxlen - #v
    if pad <= 0 then return v end
    local left = math.floor(pad / 2)
    return string.rep(' ', left) .. v .. string.rep(' ', pad - left)
  end
  local function fmt_row(cells) return (table.concat((function()
    local o = {}
    for i, c in ipairs(cells) do o[i] = centre(c) end
    return o
  end)()):gsub('%s+$', '')) end
  local title = (stage == 'val' and 'Validate' or (stage:sub(1, 1):upper() .. stage:sub(2))) .. ' metric'
  local num_cols = math.floor((term - maxlen) / maxlen)
  if num_cols < 1 then num_cols = 1 end
  local bar = string.rep('\226\148\128', term) -- U+2500
  local half = math.floor(term / 2)
  local out = {}
  for first = 1, #results, num_cols do
    local last = math.min(#results, first + num_cols - 1)
    local head = { title }
    for d = first, last do head[#head + 1] = 'DataLoader ' .. (d - 1) end
    out[#out + 1] = bar
    out[#out + 1] = fmt_row(head)
    out[#out + 1] = bar
    for _, k in ipairs(names) do
      local row = {}
      for d = first, last do
        local v = cleaned[d][k]
        if v == nil then row[#row + 1] = ' '
        elseif type(v) == 'number' then row[#row + 1] = M._py_float(v)
        else row[#row + 1] = tostring(v) end
      end
      local metric = k
      if #metric > half then
        while #metric > half do
          local part = metric:sub(1, half)
          metric = metric:sub(half + 1)
          out[#out + 1] = fmt_row({ part, unpack(row) })
        end
        out[#out + 1] = fmt_row({ metric, ' ' })
      else
        out[#out + 1] = fmt_row({ metric, unpack(row) })
      end
    end
    out[#out + 1] = bar
  end
  io.stdout:write(table.concat(out, '\n'), '\n')
  io.stdout:flush()
end

---------------------------------------------------------------- predict

function M.run_predict(t)
  local loaders, counts = M.load_loaders(t, 'predict')
  t.num_predict_batches = counts
  t._predict_loaders = loaders
  local total = 0
  for i = 1, #counts do total = total + counts[i] end
  if total == 0 then return nil end
  local rc = t._results_connector
  rc:set_stage(nil)
  local ndl = #loaders
  local grad_prev = M.set_grad_enabled(false)
  t:_call_module_hook('on_predict_model_eval')
  t.lightning_module:zero_grad()
  t:_call_callback_hooks('on_predict_start')
  t:_call_module_hook('on_predict_start')
  t:_call_callback_hooks('on_predict_epoch_start')
  t:_call_module_hook('on_predict_epoch_start')
  local results = {}
  local keep = t._return_predictions ~= false
  -- Lightning's predict_loop: predictions (per dataloader) and the dataset positions of each
  -- batch are kept when they are returned or a BasePredictionWriter writes at epoch end
  local writers = {}
  local PW = require('dpl.callbacks').BasePredictionWriter
  local any_epoch_writer = false
  for _, cb in ipairs(t.callbacks) do
    if require('dpl.class').is_instance(cb, PW) then
      writers[#writers + 1] = cb
      if cb.interval.on_epoch then any_epoch_writer = true end
    end
  end
  local store = keep or any_epoch_writer
  local pl = { predictions = results, epoch_batch_indices = {}, return_predictions = keep,
    epoch_loop = { current_batch_indices = {} } }
  t.predict_loop = pl
  for d = 1, ndl do
    local dl_idx = d - 1
    local preds, dl_indices = {}, {}
    local loader = loaders[d]
    local it = loader:iter()
    local i = 0
    while i < counts[d] do
      local batch = it()
      if batch == nil then break end
      local ok, bi = pcall(function() return loader.last_batch_indices end)
      local cur = {}
      if ok and type(bi) == 'table' then for k = 1, #bi do cur[k] = bi[k] end end
      pl.epoch_loop.current_batch_indices = cur
      if store then dl_indices[#dl_indices + 1] = cur end
      batch = transfer(t, batch, dl_idx)
      t:_call_callback_hooks('on_predict_batch_start', batch, i, dl_idx)
      t:_call_module_hook('on_predict_batch_start', batch, i, dl_idx)
      local out
      if ndl > 1 then out = t:_call_strategy_step('predict_step', batch, i, dl_idx)
      else out = t:_call_strategy_step('predict_step', batch, i) end
      t:_call_callback_hooks('on_predict_batch_end', out, batch, i, dl_idx)
      t:_call_module_hook('on_predict_batch_end', out, batch, i, dl_idx)
      if store then preds[#preds + 1] = out end
      i = i + 1
    end
    M.end_pass(loader)
    results[d] = preds
    pl.epoch_batch_indices[d] = dl_indices
  end
  t:_call_callback_hooks('on_predict_epoch_end', results)
  t:_call_module_hook('on_predict_epoch_end', results)
  -- (cleared before on_predict_end, as Lightning: writers use them in on_predict_epoch_end)
  pl.predictions, pl.epoch_batch_indices = {}, {}
  t:_call_callback_hooks('on_predict_end')
  t:_call_module_hook('on_predict_end')
  if grad_prev ~= nil then M.set_grad_enabled(grad_prev) end
  if not keep then return nil end
  if ndl == 1 then return results[1] end
  return results
end

---------------------------------------------------------------- fit

--- The fit loop lives in dpl.trainer.fit_loop.
function M.run_train(t) return require('dpl.trainer.fit_loop').run_train(t) end

return M
