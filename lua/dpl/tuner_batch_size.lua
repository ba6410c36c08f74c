-- dpl.tuner_batch_size: Lightning 1.9.5's batch size finder, behind
-- `trainer.tuner:scale_batch_size(model [, train_dataloaders, val_dataloaders, dataloaders] [, opts])`.
-- The batch size lives in an attribute (batch_arg_name) of the model, its hparams or the
-- datamodule (Lightning's lightning_hasattr/lightning_setattr order); the loaders are made again
-- from the hooks for every trial. Each trial runs steps_per_trial steps (fit) or batches
-- (validate/test/predict) on a Trainer of its own built from the user's arguments (no callbacks,
-- logger, checkpoints or progress bar), so the user's Trainer keeps its state; the weights and
-- the module's trainer fields are put back afterwards. 'power' doubles the size until a trial
-- runs out of memory, 'binsearch' then bisects; an error that is not out-of-memory (is_oom_error)
-- is raised again. The size found is written into the attribute and returned.
local class = require 'dpl.class'
local errors = require 'dpl.errors'
local options = require 'dpl.options'
local log = require 'dpl.log'

local fmt = string.format
local M = {}

M.SUPPORTED_MODES = { 'power', 'binsearch' }
M.METHODS = { 'fit', 'validate', 'test', 'predict' }
local OPT_KEYS = options.keys('datamodule', 'method', 'mode', 'steps_per_trial', 'init_val', 'max_trials',
  'batch_arg_name')
M.OPT_KEYS = OPT_KEYS
local STAGE = { fit = 'train', validate = 'val', test = 'test', predict = 'predict' }
local HOOK = { train = 'train_dataloader', val = 'val_dataloader', test = 'test_dataloader', predict = 'predict_dataloader' }

local function misconf(msg, ...) errors.MisconfigurationException:raise(fmt(msg, ...), 3) end

---------------------------------------------------------------- out of memory

-- the text of an error that Lightning would see as a RuntimeError (a Lua runtime error: the C
-- side's messages arrive as strings; or a dpl.errors.RuntimeError); nil for the others
-- (MisconfigurationException, ValueError, ...: never out-of-memory, as in Lightning)
local function runtime_text(e)
  if type(e) == 'string' then return e end
  if errors.is(e, errors.RuntimeError) then return tostring(e.message) end
  return nil
end

--- Lightning's is_oom_error for dplhost's texts: the CPU allocator's "<op>: out of memory
--- allocating <n> bytes for a <dtype> <shape> tensor" (src/tensor/dpl_tensor_core.c; torch's
--- "DefaultCPUAllocator: can't allocate memory") and the CUDA plugin's "... on cuda:<d>: out of
--- memory ..." (cudaMalloc, the caching allocator, any call failing with
--- cudaErrorMemoryAllocation; torch's "CUDA out of memory"). Other "out of memory" texts (an
--- op's scratch buffer, NCCL, safetensors) are not, as their torch counterparts are not.
function M.is_oom_error(e)
  local s = runtime_text(e)
  if s == nil then return false end
  return s:find('out of memory allocating %d+ bytes') ~= nil or s:find('on cuda:%d+: out of memory') ~= nil
end

---------------------------------------------------------------- Lightning's attribute lookup

local function hparams_has(obj, name)
  local hp = rawget(obj, 'hparams') or obj.hparams
  return type(hp) == 'table' and hp[name] ~= nil, hp
end

--- The objects holding attribute `name`, in Lightning's order (_lightning_get_all_attr_holders):
--- the model, model.hparams, the datamodule, datamodule.hparams. Each is {obj, key}.
function M.attr_holders(model, dm, name)
  local out = {}
  if model[name] ~= nil then out[#out + 1] = model end
  local has, hp = hparams_has(model, name)
  if has then out[#out + 1] = hp end
  if dm ~= nil then
    if dm[name] ~= nil then out[#out + 1] = dm end
    local dhas, dhp = hparams_has(dm, name)
    if dhas then out[#out + 1] = dhp end
  end
  return out
end

--- lightning_getattr: the value in the last holder (nil when none).
function M.getattr(model, dm, name)
  local h = M.attr_holders(model, dm, name)
  if #h == 0 then return nil end
  return h[#h][name]
end

--- lightning_setattr: `value` into every holder.
function M.setattr(model, dm, name, value)
  local h = M.attr_holders(model, dm, name)
  if #h == 0 then
    misconf('%s is neither stored in the model namespace nor the `hparams` namespace/dict, nor the datamodule.', name)
  end
  for _, obj in ipairs(h) do obj[name] = value end
end

---------------------------------------------------------------- helpers

--- Lightning's _accelerator_connector.is_distributed: the ddp family (spawn, fork, sharded,
--- fully sharded), deepspeed, horovod, tpu_spawn, hpu_parallel.
function M.is_distributed(trainer)
  local name = trainer.strategy and trainer.strategy.strategy_name or ''
  return name:match('^ddp') ~= nil or name:match('deepspeed') ~= nil or name:match('fsdp') ~= nil
    or name == 'horovod' or name == 'tpu_spawn' or name == 'hpu_parallel' or (trainer.world_size or 1) > 1
end

local function is_datamodule(x)
  return type(x) == 'table' and class.is_instance(x, require('dpl.datamodule'))
end

-- the number of batches of a raw loader collection (what a stage's hook returns) and the
-- length of its dataset (Lightning's len(CombinedLoader) / len(loader.dataset)); nil when unknown
local function lengths(raw, mode)
  if raw == nil then return nil, nil end
  local C = require 'dpl.combined_loader'
  local loops = require 'dpl.trainer.loops'
  local data = require 'dpl.data'
  local leaves, combined
  if C.is_combined(raw) then combined, leaves = raw, raw._leaves
  elseif C.is_loader(raw) then leaves = { raw }
  elseif type(raw) == 'table' then
    if #raw == 1 and next(raw, 1) == nil then leaves = { raw[1] }
    else
      local ok, c = pcall(C.new, raw, mode)
      if not ok then return nil, nil end
      combined, leaves = c, c._leaves
    end
  else return nil, nil end
  local nb = combined and combined:num_batches() or loops.loader_len(leaves[1])
  local dl -- CombinedDataset's length: the shortest (min_size) or the longest dataset
  for _, l in ipairs(leaves) do
    local ok, ds = pcall(function() return l.dataset end)
    local n = ok and ds ~= nil and select(2, pcall(data.len, ds)) or nil
    if type(n) ~= 'number' then dl = nil break end
    if dl == nil or (combined and ((combined.mode == 'min_size') == (n < dl))) then dl = n end
    if not combined then break end
  end
  return nb, dl
end

-- an options table in last place: a plain table with named keys only (or none) that names an
-- option or holds no loader (a table of loaders by name, possibly nested, holds loaders)
local function holds_loader(v, depth)
  if type(v) == 'userdata' or (type(v) == 'table' and getmetatable(v) ~= nil) then return true end
  if type(v) ~= 'table' or depth > 8 then return false end
  for _, x in pairs(v) do if holds_loader(x, depth + 1) then return true end end
  return false
end
local function is_opts(t, keys)
  if type(t) ~= 'table' or getmetatable(t) ~= nil or t[1] ~= nil then return false end
  for k in pairs(t) do if keys[k] then return true end end
  return not holds_loader(t, 0)
end

--- (model, a, b, c, opts) from a call's variable arguments: up to three positional loader
--- arguments, then an optional options table.
function M.split_args(keys, ...)
  local n = select('#', ...)
  local last = n > 0 and select(n, ...) or nil
  local opts
  if is_opts(last, keys) then opts, n = last, n - 1 end
  if n > 3 then misconf('expected at most 3 loader arguments (train_dataloaders, val_dataloaders, dataloaders)'
    .. ' before the options table, got %d', n) end
  local a, b, c = ...
  if n < 1 then a = nil end
  if n < 2 then b = nil end
  if n < 3 then c = nil end
  return a, b, c, opts
end

--- Lightning's _check_tuner_configuration (the loader arguments against the method).
function M.check_tuner_configuration(train, val, dataloaders, method)
  local ok = false
  for _, m in ipairs(M.METHODS) do if m == method then ok = true end end
  if not ok then
    errors.ValueError:raise(fmt("method %s is invalid. Should be one of ('fit', 'validate', 'test', 'predict').",
      type(method) == 'string' and ("'" .. method .. "'") or tostring(method)), 3)
  end
  if method == 'fit' then
    if dataloaders ~= nil then
      misconf("In tuner with method='fit', `dataloaders` argument should be None, please consider setting"
        .. ' `train_dataloaders` and `val_dataloaders` instead.')
    end
  elseif train ~= nil or val ~= nil then
    misconf("In tuner with `method`='%s', `train_dataloaders` and `val_dataloaders` arguments should be None,"
      .. ' please consider setting `dataloaders` instead.', method)
  end
end

local function check_int(name, v, lo)
  if type(v) ~= 'number' or v % 1 ~= 0 or v < lo then
    misconf('scale_batch_size: %s must be an integer >= %d, got %s', name, lo, tostring(v))
  end
end

local function gc()
  collectgarbage()
  local ok, cuda = pcall(require, 'dpl.cuda')
  if ok and cuda.is_available and cuda.is_available() then pcall(cuda.empty_cache) end
end

---------------------------------------------------------------- the finder

--- tuner:scale_batch_size(model [, train_dataloaders, val_dataloaders, dataloaders] [, opts]):
--- see the top of this file. Returns the batch size found (nil with fast_dev_run).
function M.scale_batch_size(tuner, model, ...)
  local train, val, dataloaders, opts = M.split_args(OPT_KEYS, ...)
  options.check(opts, OPT_KEYS, 'scale_batch_size')
  opts = opts or {}
  local trainer = tuner.trainer
  local method = opts.method == nil and 'fit' or opts.method
  M.check_tuner_configuration(train, val, dataloaders, method)
  local mode = opts.mode == nil and 'power' or opts.mode
  mode = type(mode) == 'string' and mode:lower() or mode
  if mode ~= 'power' and mode ~= 'binsearch' then
    errors.ValueError:raise("`mode` should be either of ('power', 'binsearch')", 2)
  end
  local steps = opts.steps_per_trial or 3
  local init_val = opts.init_val or 2
  local max_trials = opts.max_trials or 25
  local name = opts.batch_arg_name or 'batch_size'
  check_int('steps_per_trial', steps, 1)
  check_int('init_val', init_val, 1)
  check_int('max_trials', max_trials, 0)
  if type(name) ~= 'string' or name == '' then
    misconf('scale_batch_size: batch_arg_name must be an attribute name (a string), got %s', tostring(name))
  end
  -- what trainer.fit/validate/... would check first
  if not class.is_instance(model, require('dpl.lightning')) then
    misconf('`Trainer.%s()` requires a `LightningModule`, got: %s', method, tostring(model))
  end
  local dm = opts.datamodule
  if dm ~= nil and not is_datamodule(dm) then
    misconf('`trainer.%s(datamodule=...)` expects a `LightningDataModule`, got: %s', method, tostring(dm))
  end
  local given -- the loaders of the stage passed directly
  if method == 'fit' then
    if is_datamodule(train) then
      if dm ~= nil and dm ~= train then misconf('`trainer.fit()` got two datamodules: one in place of the dataloaders and one as `datamodule=`') end
      dm, train = train, nil
    end
    if dm ~= nil and (train ~= nil or val ~= nil) then
      misconf('You cannot pass `train_dataloader` or `val_dataloaders` to `trainer.fit(datamodule=...)`')
    end
  else
    if is_datamodule(dataloaders) then
      if dm ~= nil and dm ~= dataloaders then
        misconf('`trainer.%s()` got two datamodules: one in place of the dataloaders and one as `datamodule=`', method)
      end
      dm, dataloaders = dataloaders, nil
    end
    if dm ~= nil and dataloaders ~= nil then
      misconf('You cannot pass both `trainer.%s(dataloaders=..., datamodule=...)`', method)
    end
    given = dataloaders
  end
  -- BatchSizeFinder.setup's refusals
  if M.is_distributed(trainer) then
    misconf('The Batch size finder is not supported with distributed strategies.')
  end
  if method == 'fit' and train ~= nil then
    misconf('The Batch size finder cannot be used with dataloaders passed directly to `.fit()`. Please disable the'
      .. ' feature or incorporate the dataloader into your LightningModule or LightningDataModule.')
  end
  local stage = STAGE[method]
  local hook = HOOK[stage]
  local C = require 'dpl.combined_loader'
  local function check_multiple(raw)
    if stage ~= 'train' and type(raw) == 'table' and not C.is_loader(raw) and not C.is_combined(raw) and #raw > 1 then
      misconf('The Batch size finder cannot be used with multiple %s dataloaders.', stage)
    end
  end
  if given ~= nil then check_multiple(given) end
  local attr_dm = dm or trainer.datamodule
  if #M.attr_holders(model, attr_dm, name) == 0 then
    misconf('Field %s not found in `model`, `datamodule`, nor their `hparams` attributes.', name)
  end
  if model[name] ~= nil and hparams_has(model, name) then
    log.warn('Field `model.%s` and `model.hparams.%s` are mutually exclusive! `model.%s` will be used as the initial'
      .. ' batch size for scaling. If this is not the intended behavior, please remove either one.', name, name, name)
  end
  if trainer.fast_dev_run then
    log.warn('Skipping batch size scaler since `fast_dev_run` is enabled.')
    return nil
  end
  local restore = require('dpl.tuner')._snapshot(model, dm)
  local mtl = trainer.multiple_trainloader_mode
  local cur_raw -- the stage's loaders of the last trial (Lightning's trainer.train_dataloader)
  local new_size -- the size of the next trial
  local started = false -- the first adjust (to init_val) done
  local frozen_val -- fit: the validation loaders as first loaded, kept for every trial (as Lightning)

  -- Lightning's _adjust_batch_size
  local function adjust(factor, value, desc)
    local bs = M.getattr(model, attr_dm, name)
    local new = value or math.floor(bs * factor)
    if desc then log.info('Batch size %s %s, trying batch size %s', tostring(bs), desc, tostring(new)) end
    local nb, dl = lengths(cur_raw, mtl)
    if nb ~= nil and not (new <= nb) and dl ~= nil then new = math.min(new, dl) end
    M.setattr(model, attr_dm, name, new)
    return new, new ~= bs
  end

  -- one trial on a Trainer of its own; returns ok, err
  local function trial()
    local a = {}
    for k, v in pairs(trainer._user_args or {}) do a[k] = v end
    a.auto_lr_find, a.auto_scale_batch_size = nil, nil
    a.callbacks, a.logger, a.enable_checkpointing, a.enable_progress_bar, a.enable_model_summary = {}, false, false, false, false
    a.profiler, a.max_time = nil, nil
    if stage == 'train' then
      -- (Lightning restarts its fit loop each trial, which validates first: the sanity check here)
      a.limit_train_batches, a.limit_val_batches, a.max_steps, a.num_sanity_val_steps = nil, steps, steps, steps
      a.overfit_batches = nil
    else
      a['limit_' .. stage .. '_batches'] = steps
    end
    local info = log.info
    log.info = function() end -- (the device summary of each trial's Trainer)
    local ok, inner = pcall(require('dpl.trainer')._inner, a)
    log.info = info
    if not ok then return false, inner end
    -- the stage's loaders as loaded (for the next adjust), the validation loaders kept from the first
    local function wrap(field)
      local orig = inner[field]
      inner[field] = function(t, hname, ...)
        if hname == 'val_dataloader' and stage == 'train' and frozen_val ~= nil then return frozen_val end
        if (hname == hook or (stage == 'train' and hname == 'val_dataloader')) and not started then
          -- (Lightning, once the setup hooks have run: the loaders at the size the attribute had,
          -- init_val checked against them, then the loaders again at init_val; before the
          -- validation loaders, which the first trial loads at init_val)
          started = true
          cur_raw = orig(t, hook)
          check_multiple(cur_raw)
          new_size = adjust(nil, init_val)
        end
        local r = orig(t, hname, ...)
        if hname == hook then cur_raw = r end
        if hname == 'val_dataloader' and stage == 'train' then frozen_val = r end
        return r
      end
    end
    wrap('_call_module_hook')
    wrap('_call_datamodule_hook')
    if given ~= nil then cur_raw = given end
    local dmo = dm ~= nil and { datamodule = dm } or nil
    if method == 'fit' then
      return pcall(inner.fit, inner, model, nil, val, dmo)
    elseif method == 'predict' then
      return pcall(inner.predict, inner, model, given, { datamodule = dm, return_predictions = false })
    end
    return pcall(inner[method], inner, model, given, { datamodule = dm, verbose = false })
  end
  local function fail(err)
    restore()
    error(err, 0)
  end

  if given ~= nil then
    cur_raw, started = given, true
    new_size = adjust(nil, init_val)
  end
  local function first_trial()
    local ok, err = trial()
    if not started then -- (a trial that failed before loading its loaders)
      started = true
      new_size = adjust(nil, init_val)
    end
    return ok, err
  end
  if mode == 'power' then
    local any_success = false
    for i = 1, max_trials do
      gc()
      local ok, err = (i == 1 and first_trial or trial)()
      if ok then
        local changed
        new_size, changed = adjust(2.0, nil, 'succeeded')
        if not changed then break end
        any_success = true
      elseif M.is_oom_error(err) then
        gc()
        new_size = adjust(0.5, nil, 'failed')
        if any_success then break end
      else
        fail(err)
      end
    end
  else
    local low, high, count = 1, nil, 0
    local run = first_trial
    while true do
      gc()
      local ok, err = run()
      run = trial
      if ok then
        count = count + 1
        if count > max_trials then break end
        low = new_size
        local changed
        if high ~= nil and high ~= 0 then
          if high - low <= 1 then break end
          new_size, changed = adjust(nil, math.floor((high + low) / 2), 'succeeded')
        else
          new_size, changed = adjust(2.0, nil, 'succeeded')
        end
        if not changed then break end
      elseif M.is_oom_error(err) then
        gc()
        high = new_size
        new_size = adjust(nil, math.floor((high + low) / 2), 'failed')
        if high - low <= 1 then break end
      else
        fail(err)
      end
    end
  end
  if not started then new_size = adjust(nil, init_val) end -- (max_trials 0)
  gc()
  log.info('Finished batch size finder, will continue with full run using batch size %s', tostring(new_size))
  restore()
  return new_size
end

return M
