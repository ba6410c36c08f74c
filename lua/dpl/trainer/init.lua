-- dpl.trainer: the Trainer (dpl.Trainer{...}). Arguments as Lightning 1.9's,
-- strategy selection as its accelerator connector, the seed's fields, and
-- fit / validate / test / predict with Lightning's hook order (the loops are in
-- dpl.trainer.loops, logging in dpl.trainer.results, checkpoints in
-- dpl.trainer.checkpoint). Returns the Trainer class.
local class = require 'dpl.class'
local errors = require 'dpl.errors'
local log = require 'dpl.log'
local args_mod = require 'dpl.trainer.args'
local connector = require 'dpl.trainer.connector'
local Results = require 'dpl.trainer.results'

local Misconfiguration = errors.MisconfigurationException
local LightningModule -- loaded on first use
local LightningDataModule -- the same

local Trainer = class.Object:extend('Trainer')

-- Lightning's computed properties (trainer.estimated_stepping_batches, ...): read as fields,
-- computed when read (an instance field of the same name is never set)
local properties = {}
Trainer._properties = properties

-- The public attributes a trainer has that may be nil (Lightning's None): the arguments,
-- Lightning 1.9.5's attributes and properties, the seed's fields. Reading one of them gives
-- nil; reading any other public name that is not set raises AttributeError, as Python does
-- (a misspelt `trainer.current_epcoh` was a silent nil). Names starting with `_` (internal
-- state) and fields a script sets itself read as usual.
local nil_ok = {}
for _, k in ipairs(args_mod.order) do nil_ok[k] = true end
for k in ([[
  accelerator accumulate_grad_batches accumulation_scheduler amp_backend amp_level auto_lr_find
  auto_scale_batch_size callback_metrics callbacks check_val_every_n_epoch checkpoint_callback
  checkpoint_callbacks ckpt_path current_epoch data_parallel_device_ids datamodule default_root_dir
  deterministic device_ids distributed_backend early_stopping_callback early_stopping_callbacks
  fast_dev_run fit_loop global_rank global_step gradient_clip_algorithm gradient_clip_val
  is_global_zero is_last_batch lightning_module local_rank logged_metrics logger loggers
  lr_scheduler_configs max_epochs max_steps min_epochs min_steps model node_rank num_devices
  num_gpus num_nodes num_predict_batches num_processes num_sanity_val_batches num_sanity_val_steps
  num_test_batches num_training_batches num_val_batches on_gpu optimizers precision predicting
  profiler progress_bar_callback progress_bar_metrics resume_from_checkpoint root_gpu
  sanity_checking scaler should_stop single_gpu state strategy testing tpu_cores
  tpu_global_core_rank tpu_id tpu_local_core_rank train_dataloader training use_amp use_ddp
  use_ddp2 use_distributed_sampler use_dp use_horovod use_tpu val_check_batch validating
  world_size limit_train_batches limit_val_batches limit_test_batches limit_predict_batches
  val_check_interval overfit_batches log_every_n_steps move_metrics_to_cpu track_grad_norm
  reload_dataloaders_every_n_epochs gpus ipus devices weights_save_path benchmark
  multiple_trainloader_mode enable_checkpointing enable_progress_bar enable_model_summary
]]):gmatch('%S+') do nil_ok[k] = true end
Trainer._nil_attributes = nil_ok

-- Lightning 1.9.5's removed attributes: reading one raises its AttributeError
local removed = {
  lightning_optimizers = '`Trainer.lightning_optimizers` was deprecated in v1.6 and is no longer accessible as of v1.8.',
  should_rank_save_checkpoint = '`Trainer.should_rank_save_checkpoint` was deprecated in v1.6 and is no longer'
    .. ' accessible as of v1.8.',
  training_type_plugin = '`Trainer.training_type_plugin` was deprecated in v1.6 and is no longer accessible as of'
    .. ' v1.8. Use `Trainer.strategy` instead.',
  verbose_evaluate = 'The `Trainer.verbose_evaluate` was deprecated in v1.6 and is no longer accessible as of v1.8.'
    .. ' Please use `trainer.{validate,test}_loop.verbose` instead.',
}
for _, n in ipairs({ 'validated', 'tested', 'predicted' }) do
  removed[n .. '_ckpt_path'] = ('The `Trainer.%s_ckpt_path` was deprecated in v1.6 and is no longer accessible as of'
    .. ' v1.8. Please use `Trainer.ckpt_path` instead.'):format(n)
end

local function no_attribute(self, k)
  if removed[k] then errors.AttributeError:raise(removed[k], 3) end
  local known = {}
  for n in pairs(nil_ok) do known[n] = true end
  for n in pairs(properties) do known[n] = true end
  for n in pairs(self) do if type(n) == 'string' then known[n] = true end end
  local c = Trainer
  while c do
    for n, v in pairs(c) do if type(n) == 'string' and n:sub(1, 1) ~= '_' then known[n] = true end end
    c = rawget(c, 'super')
  end
  local best = require('dpl.options').nearest(k, known)
  errors.AttributeError:raise(("'Trainer' object has no attribute '%s'%s"):format(k,
    best and (" (did you mean '%s'?)"):format(best) or ''), 3)
end

Trainer.__index = function(self, k)
  local v = Trainer[k] -- (methods first: they are what is looked up on the step path)
  if v ~= nil then return v end
  local p = properties[k]
  if p ~= nil then return p(self) end
  if type(k) ~= 'string' or nil_ok[k] or k:byte(1) == 95 --[[ _ ]] then return nil end
  no_attribute(self, k)
end

local function misconf(fmt, ...)
  error(Misconfiguration(select('#', ...) > 0 and fmt:format(...) or fmt), 0)
end

local function cwd()
  return os.getenv('PWD') or '.'
end

-- trainer.fit_loop.max_epochs / max_steps are the trainer's (Lightning's loop limits: the way
-- to train further is `trainer.fit_loop.max_epochs = 10; trainer:fit(model)`)
local loop_limits = { max_epochs = -1, max_steps = -1 }
local function fit_loop_mt(trainer)
  return {
    __index = function(_, k) if loop_limits[k] then return trainer[k] end end,
    __newindex = function(fl, k, v)
      if loop_limits[k] then
        if type(v) ~= 'number' or v ~= math.floor(v) or v < loop_limits[k] then
          misconf('`fit_loop.%s` must be an integer >= -1, got %s', k, tostring(v))
        end
        trainer[k] = v
        if k == 'max_epochs' then trainer._warn_max_epochs = nil end
      else
        rawset(fl, k, v)
      end
    end,
  }
end

function Trainer:__init(user_args)
  local a = args_mod.validate(user_args)
  self._args = a
  -- the arguments as given (dpl.tuner builds its own Trainer from them)
  self._user_args = {}
  for k, v in pairs(user_args or {}) do self._user_args[k] = v end
  -- the arguments, readable under Lightning's names
  for _, k in ipairs(args_mod.order) do self[k] = a[k] end
  self.max_epochs, self.max_steps, self.min_steps = a.max_epochs, a.max_steps, a.min_steps
  -- Lightning keeps min_epochs None when not given (the loop uses a.min_epochs)
  self.min_epochs = user_args and user_args.min_epochs or nil
  self.num_sanity_val_steps = a.num_sanity_val_steps
  self.accumulate_grad_batches = 1 -- (set from the accumulation scheduler in _setup_callbacks)
  self.gradient_clip_algorithm = a.gradient_clip_algorithm
  self._clip_algorithm_given = a._clip_algorithm_given
  self.fast_dev_run = a._fast_dev_run > 0 and a._fast_dev_run or false
  self.check_val_every_n_epoch = a.check_val_every_n_epoch
  self.default_root_dir = a.default_root_dir or cwd()
  self.use_distributed_sampler = a.use_distributed_sampler
  -- Lightning 1.9's deprecated resume_from_checkpoint: the next fit's ckpt_path when it has none
  self._resume_fit_path = a.resume_from_checkpoint
  if a.fast_dev_run ~= false and a._fast_dev_run > 0 then
    log.info('Running in `fast_dev_run` mode: will run the requested loop using %d batch(es). Logging and checkpointing is suppressed.',
             a._fast_dev_run)
  end
  if a._max_epochs_defaulted and user_args and user_args.max_epochs == nil then
    self._warn_max_epochs = true
  end
  if a.deterministic == true or a.deterministic == 'warn' then
    self.deterministic = a.deterministic
  end
  -- profiler: nil -> a PassThroughProfiler (and no timing at all: self._prof stays nil),
  -- "simple" or a dpl.profilers.Profiler; the others raise (dpl.profilers.from_arg)
  self._prof = false
  if a.profiler ~= nil then
    local profilers = require 'dpl.profilers'
    self.profiler = profilers.from_arg(a.profiler)
    if not class.is_instance(self.profiler, profilers.PassThroughProfiler) then self._prof = self.profiler end
  else
    self.profiler = nil -- (made on first read: see properties.profiler)
  end

  -- accelerator, devices, strategy
  local sel = connector.select(a)
  self.strategy = sel.strategy
  local sname = sel.strategy.strategy_name
  if a.sync_batchnorm and (sname == 'dp' or sname == 'ddp2') then
    errors.NotImplementedError:raise(('sync_batchnorm=true with strategy=%q: the device replicas of one process have no'
      .. ' process group to synchronise their batch statistics through; dplhost\'s SyncBatchNorm works across the'
      .. ' processes of ddp, ddp_spawn and horovod'):format(sname), 0)
  end
  self.accelerator = sel.accelerator
  self.precision = sel.precision
  self.strategy.precision = sel.precision
  self.use_amp = sel.precision == 16 or sel.precision == 'bf16'
  -- precision 16: float16 autocast with dynamic loss scaling (Lightning's MixedPrecisionPlugin)
  if sel.precision == 16 then self.scaler = require('dpl.amp').GradScaler() end
  self.amp_level = a.amp_level
  self.amp_backend = a.amp_backend
  self.num_devices = sel.num_devices
  self.device_ids = {}
  for i, d in ipairs(sel.parallel_devices) do self.device_ids[i] = d.index end
  self.num_nodes = a.num_nodes

  -- the seed's fields
  local name = self.strategy.strategy_name
  self.data_parallel_device_ids = sel.gpu_ids
  self.root_gpu = sel.gpu_ids and require('dpl.devices').determine_root_gpu_device(sel.gpu_ids) or nil
  if name == 'horovod' and sel.gpu_ids then self.root_gpu = self.strategy.root_device.index end
  self.on_gpu = sel.gpu_ids ~= nil
  self.num_gpus = sel.gpu_ids and #sel.gpu_ids or 0
  self.use_dp = name == 'dp'
  self.use_ddp = name == 'ddp' or name:match('^ddp_spawn') ~= nil or name:match('^ddp_fork') ~= nil
    or name:match('^ddp_notebook') ~= nil or name:match('^ddp_find') ~= nil
  self.use_ddp2 = name == 'ddp2'
  self.use_horovod = name == 'horovod'
  self.single_gpu = self.num_gpus == 1 and not self.use_ddp2 and not self.use_horovod
  self.use_tpu = false
  self.tpu_cores, self.tpu_id, self.tpu_local_core_rank, self.tpu_global_core_rank = nil, nil, nil, nil
  self.num_processes = name == 'single_device' and 1 or (self.strategy.num_processes or 1)
  self.distributed_backend = name
  self.global_rank = self.strategy.global_rank
  self.local_rank = self.strategy.local_rank
  self.node_rank = self.strategy.node_rank
  self.world_size = self.strategy.world_size
  self.is_global_zero = self.global_rank == 0
  self.root_device = self.strategy.root_device
  if a.resume_from_checkpoint ~= nil and self.is_global_zero then
    log.warn('Setting `Trainer(resume_from_checkpoint=)` is deprecated in v1.5 and will be removed in v2.0. Please'
      .. ' pass `Trainer.fit(ckpt_path=)` directly instead.')
  end

  -- state
  self.state = { fn = nil, stage = nil, status = 'initializing' }
  self.training, self.validating, self.testing, self.predicting, self.sanity_checking = false, false, false, false, false
  self.should_stop = false
  self.is_last_batch = false
  self.current_epoch, self.global_step = 0, 0
  self.fit_loop = setmetatable({ batches_that_stepped = 0, batch_idx = 0, epoch_done = false, restarting = false },
    fit_loop_mt(self))
  self.callback_metrics, self.logged_metrics, self.progress_bar_metrics = {}, {}, {}
  self._results_connector = Results.new(self)
  self.optimizers, self.lr_scheduler_configs = {}, {}
  self.lightning_module, self.model = nil, nil
  self.datamodule = nil -- the LightningDataModule of the last entry point given one (Lightning keeps it)
  self.num_training_batches, self.num_val_batches, self.num_test_batches, self.num_predict_batches = 0, {}, {}, {}
  self.num_sanity_val_batches = {}

  -- Lightning's device summary (rank 0); not for the tuner's own Trainers (Trainer._inner)
  if not Trainer._quiet then
    local ngpu = #require('dpl.devices').get_all_available_gpus()
    log.info('GPU available: %s (cuda), used: %s', ngpu > 0 and 'True' or 'False', self.on_gpu and 'True' or 'False')
    log.info('TPU available: False, using: 0 TPU cores')
  end

  self:_setup_loggers(a.logger)
  self:_setup_callbacks(a.callbacks or {})
  self.state.status = 'initialized'
end

---------------------------------------------------------------- loggers / callbacks

function Trainer:_setup_loggers(lg)
  local L = require 'dpl.loggers'
  local list
  if lg == true then
    list = { L.default_logger(self.default_root_dir) }
  elseif lg == false or lg == nil then
    list = {}
  elseif L.is_logger(lg) then
    list = { lg }
  elseif type(lg) == 'table' then
    list = {}
    for i, x in ipairs(lg) do
      if not L.is_logger(x) then misconf('logger[%d] is not a logger (got %s)', i, tostring(x)) end
      list[i] = x
    end
  else
    misconf('`logger` must be true, false, a logger or a list of loggers, got %s', tostring(lg))
  end
  if self._args._fast_dev_run > 0 then list = {} end -- Lightning's DummyLogger
  self.loggers = list
  self.logger = list[1]
end

function Trainer:_setup_callbacks(user)
  local C = require 'dpl.callbacks'
  local list = {}
  local has_ckpt, has_pbar, has_summary, has_timer = false, false, false, false
  for _, cb in ipairs(user) do
    list[#list + 1] = cb
    if class.is_instance(cb, C.ModelCheckpoint) then has_ckpt = true end
    if class.is_instance(cb, C.ProgressBar) then has_pbar = true end
    if class.is_instance(cb, C.ModelSummary) then has_summary = true end
    if class.is_instance(cb, C.Timer) then has_timer = true end
  end
  local a = self._args
  if has_ckpt and not a.enable_checkpointing then
    misconf('Trainer was configured with `enable_checkpointing=false` but found `ModelCheckpoint` in callbacks list.')
  end
  if has_pbar and not a.enable_progress_bar then
    misconf('Trainer was configured with `enable_progress_bar=false` but found `ProgressBar` in callbacks list.')
  end
  if a.enable_model_summary and not has_summary then list[#list + 1] = C.ModelSummary() end
  if a.enable_progress_bar and not has_pbar then list[#list + 1] = C.ProgressBar() end
  if a.max_time and has_timer then
    log.info('Ignoring `Trainer(max_time=...)`, callbacks list already contains a Timer.')
  elseif a.max_time then
    list[#list + 1] = C.Timer{ duration = a.max_time }
  end
  -- accumulate_grad_batches becomes a GradientAccumulationScheduler in the list (Lightning's
  -- _configure_accumulated_gradients): one mechanism for the int, the table and the callback
  local GAS = C.GradientAccumulationScheduler
  local sched
  for _, cb in ipairs(user) do
    if class.is_instance(cb, GAS) then sched = sched or cb end
  end
  if sched then
    if a.accumulate_grad_batches ~= nil then
      misconf('You have set both `accumulate_grad_batches` and passed an instance of `GradientAccumulationScheduler`'
        .. ' inside callbacks. Either remove `accumulate_grad_batches` from trainer or remove'
        .. ' `GradientAccumulationScheduler` from callbacks list.')
    end
  else
    sched = GAS{ scheduling = a._accumulate or { [0] = 1 } }
    list[#list + 1] = sched
  end
  self.accumulation_scheduler = sched
  self.accumulate_grad_batches = sched:get_accumulate_grad_batches(0)
  if a.enable_checkpointing and not has_ckpt then list[#list + 1] = C.ModelCheckpoint() end
  self.callbacks = self:_reorder_callbacks(list)
  self:_refresh_callback_refs()
  self:_validate_callbacks_list()
end

-- Lightning's _validate_callbacks_list: two stateful callbacks (state_dict overridden) with the
-- same state_key would overwrite each other in a checkpoint
function Trainer:_validate_callbacks_list()
  local Cb = require 'dpl.callbacks.callback'
  local seen = {}
  for _, cb in ipairs(self.callbacks) do
    if cb.state_dict ~= Cb.state_dict then
      local key = type(cb.state_key) == 'function' and cb:state_key() or cb.state_key
      if seen[key] then
        local name = getmetatable(cb).__name or 'Callback'
        error(errors.RuntimeError(('Found more than one stateful callback of type `%s`. In the current'
          .. ' configuration, this callback does not support being saved alongside other instances of the same type.'
          .. ' Please consult the documentation of `%s` regarding valid settings for'
          .. ' the callback state to be checkpointable.'
          .. ' HINT: The `callback.state_key` must be unique among all callbacks in the Trainer.'):format(name, name)), 0)
      end
      seen[key] = true
    end
  end
end

-- checkpoint callbacks run last (Lightning's _reorder_callbacks)
function Trainer:_reorder_callbacks(list)
  local C = require 'dpl.callbacks'
  local head, tail = {}, {}
  for _, cb in ipairs(list) do
    if class.is_instance(cb, C.ModelCheckpoint) then tail[#tail + 1] = cb else head[#head + 1] = cb end
  end
  for _, cb in ipairs(tail) do head[#head + 1] = cb end
  return head
end

function Trainer:_refresh_callback_refs()
  local C = require 'dpl.callbacks'
  self.checkpoint_callbacks, self.early_stopping_callbacks = {}, {}
  self.progress_bar_callback = nil
  for _, cb in ipairs(self.callbacks) do
    if class.is_instance(cb, C.ModelCheckpoint) then self.checkpoint_callbacks[#self.checkpoint_callbacks + 1] = cb end
    if class.is_instance(cb, C.EarlyStopping) then self.early_stopping_callbacks[#self.early_stopping_callbacks + 1] = cb end
    if class.is_instance(cb, C.ProgressBar) and self.progress_bar_callback == nil then self.progress_bar_callback = cb end
  end
  self.checkpoint_callback = self.checkpoint_callbacks[1]
  self.early_stopping_callback = self.early_stopping_callbacks[1]
  self._cb_hooks = {}
end

-- model:configure_callbacks(): those replace user callbacks of the same type
function Trainer:_attach_model_callbacks()
  local extra = self:_call_module_hook('configure_callbacks')
  if extra == nil then return end
  local C = require 'dpl.callbacks'
  if C.is_callback(extra) then extra = { extra } end
  if #extra == 0 then return end
  local types = {}
  for _, cb in ipairs(extra) do types[getmetatable(cb)] = true end
  local kept = {}
  for _, cb in ipairs(self.callbacks) do
    if not types[getmetatable(cb)] then kept[#kept + 1] = cb end
  end
  for _, cb in ipairs(extra) do kept[#kept + 1] = cb end
  self.callbacks = self:_reorder_callbacks(kept)
  self:_refresh_callback_refs()
end

---------------------------------------------------------------- hook calls

local Callback -- base class, for "does this callback define the hook"

--- The callbacks that define hook `name`, in order (cached per run).
function Trainer:_callbacks_for(name)
  local list = self._cb_hooks[name]
  if list then return list end
  Callback = Callback or require 'dpl.callbacks.callback'
  list = {}
  local base = Callback[name]
  for _, cb in ipairs(self.callbacks) do
    local f = cb[name]
    if f ~= nil and f ~= base then list[#list + 1] = cb end
  end
  self._cb_hooks[name] = list
  return list
end

-- the action names of SimpleProfiler's report (Lightning's), cached per object and hook
local prof_keys = setmetatable({}, { __mode = 'k' })
local function prof_key(kind, obj, label, name)
  local per = prof_keys[obj]
  if per == nil then per = {} prof_keys[obj] = per end
  local k = per[name]
  if k == nil then
    k = '[' .. kind .. ']' .. label .. '.' .. name
    per[name] = k
  end
  return k
end
local function class_name(obj)
  local mt = getmetatable(obj)
  return mt and mt.__name or tostring(obj)
end

function Trainer:_call_callback_hooks(name, ...)
  local list = self._cb_hooks[name] or self:_callbacks_for(name)
  local n = #list
  if n == 0 then return end
  if self._prof then return self:_call_callback_hooks_profiled(list, name, ...) end
  local rc = self._results_connector
  if rc.lazy[1] ~= nil or rc.acc[1] ~= nil then
    -- logged device values reach the metric dicts before a callback that may read them
    Callback = Callback or require 'dpl.callbacks.callback'
    local ok = Callback._lazy_metrics_ok
    for i = 1, n do
      if not ok[list[i][name]] then rc:flush(); break end
    end
  end
  local model = self.lightning_module
  local prev = model._current_fx_name
  model._current_fx_name = name
  for i = 1, n do
    local cb = list[i]
    cb[name](cb, self, model, ...)
  end
  model._current_fx_name = prev
end

-- the same with each callback's hook timed
function Trainer:_call_callback_hooks_profiled(list, name, ...)
  local prof = self._prof
  local rc = self._results_connector
  if rc.lazy[1] ~= nil or rc.acc[1] ~= nil then rc:flush() end
  local model = self.lightning_module
  local prev = model._current_fx_name
  model._current_fx_name = name
  for i = 1, #list do
    local cb = list[i]
    local key = prof_key('Callback', cb, type(cb.state_key) == 'function' and cb:state_key() or class_name(cb), name)
    prof:profile(key, cb[name], cb, self, model, ...)
  end
  model._current_fx_name = prev
end

-- configure_optimizers' results, all of them (it may return two lists)
local function configure_optimizers_returned(prev, model, ...)
  model._current_fx_name = prev
  if select('#', ...) > 1 then return Trainer._optimizers_returned({ n = select('#', ...), ... }) end
  return (...)
end

-- (no closure in here: a function that makes one cannot be compiled, and this runs for
-- every module hook of every step)
local function module_hook_raw(self, model, name, ...)
  local rc = self._results_connector
  if (rc.lazy[1] ~= nil or rc.acc[1] ~= nil) and self:_is_overridden(name, model) then rc:flush() end
  local prev = model._current_fx_name
  model._current_fx_name = name
  if name == 'configure_optimizers' then
    return configure_optimizers_returned(prev, model, model[name](model, ...))
  end
  local r = model[name](model, ...)
  model._current_fx_name = prev
  return r
end

function Trainer:_call_module_hook(name, ...)
  local model = self.lightning_module
  local prof = self._prof
  if prof then
    return (prof:profile(prof_key('LightningModule', model, class_name(model), name), module_hook_raw, self, model, name, ...))
  end
  return module_hook_raw(self, model, name, ...)
end

-- configure_optimizers returning several values. Each one an optimizer, or each one a dict
-- with an `optimizer` key: Lua's form of Lightning's tuple `return opt_g, opt_d` (a list of
-- optimizers, or of dicts). Else two values, `return {opt, ...}, {sched, ...}` (Lua's form of
-- Lightning's `return [opts], [scheds]`): the pair of lists (a single optimizer or scheduler
-- is a list of one).
function Trainer._optimizers_returned(out)
  local is_opt = require('dpl.trainer.optimizers').is_optimizer
  local all_opts, all_dicts = true, true
  for i = 1, out.n do
    local v = out[i]
    if not is_opt(v) then all_opts = false end
    if not (type(v) == 'table' and getmetatable(v) == nil and v.optimizer ~= nil) then all_dicts = false end
  end
  if all_opts or all_dicts then
    local list = {}
    for i = 1, out.n do list[i] = out[i] end
    return list
  end
  return Trainer._optimizers_pair(out[1], out[2])
end
function Trainer._optimizers_pair(opts, scheds)
  local function as_list(x)
    if type(x) == 'table' and getmetatable(x) == nil and x[1] ~= nil then return x end
    if type(x) == 'table' and getmetatable(x) == nil and next(x) == nil then return x end
    return { x }
  end
  return { as_list(opts), as_list(scheds) }
end

--- Step dispatch through the strategy (strategy:training_step(...) etc.); with
--- precision "bf16" the step runs under dpl.amp.autocast('bfloat16') (Lightning's
--- MixedPrecisionPlugin.forward_context).
local amp -- dpl.amp, loaded for bf16 only
local function strategy_step_raw(self, strategy, name, ...)
  local r
  if self.precision == 'bf16' or self.precision == 16 then
    amp = amp or require 'dpl.amp'
    r = amp.autocast(self.precision == 16 and 'float16' or 'bfloat16', strategy[name], strategy, ...)
  else
    r = strategy[name](strategy, ...)
  end
  return r
end
function Trainer:_call_strategy_step(name, ...)
  local model = self.lightning_module
  local prev = model._current_fx_name
  model._current_fx_name = name
  local strategy = self.strategy
  local r
  local prof = self._prof
  if prof then
    -- (model._current_fx_name stays set after an error, as without the profiler)
    r = prof:profile(prof_key('Strategy', strategy, class_name(strategy), name), strategy_step_raw, self, strategy, name, ...)
  else
    r = strategy_step_raw(self, strategy, name, ...)
  end
  model._current_fx_name = prev
  return r
end

--- True when the model's class (or the model) redefines a LightningModule hook.
--- A hook of the datamodule (Lightning's _call_lightning_datamodule_hook): nil without one;
--- timed as "[LightningDataModule]<class>.<hook>" under a profiler.
function Trainer:_call_datamodule_hook(name, ...)
  local dm = self.datamodule
  if dm == nil then return nil end
  local prof = self._prof
  if prof then
    return (prof:profile(prof_key('LightningDataModule', dm, class_name(dm), name), dm[name], dm, ...))
  end
  return (dm[name](dm, ...))
end

--- Whether the datamodule of this call defines hook `name` (not LightningDataModule's default).
function Trainer:_dm_overridden(name)
  local dm = self._dm
  if dm == nil then return false end
  LightningDataModule = LightningDataModule or require 'dpl.datamodule'
  local f = dm[name]
  return f ~= nil and f ~= LightningDataModule[name]
end

function Trainer:_is_overridden(name, model)
  LightningModule = LightningModule or require 'dpl.lightning'
  model = model or self.lightning_module
  local f = model[name]
  return f ~= nil and f ~= LightningModule[name]
end

-- backward with its hooks (automatic: called by the closure; manual: manual_backward)
function Trainer:_backward(loss, optimizer, opt_idx, ...)
  -- precision 16: the loss is scaled before backward (the hooks see the scaled loss, as in Lightning)
  if self.scaler ~= nil then loss = self.scaler:scale(loss) end
  self:_call_callback_hooks('on_before_backward', loss)
  self:_call_module_hook('on_before_backward', loss)
  self:_call_module_hook('backward', loss, optimizer, opt_idx, ...)
  self.strategy:post_backward(loss)
  self:_call_callback_hooks('on_after_backward')
  self:_call_module_hook('on_after_backward')
end

-- (name, parameter) pairs of a module: its named_parameters, else those of the
-- nn.Modules it holds (a LightningModule that is not an nn.Module yet)
local function named_parameters(model)
  local out = {}
  if type(model.named_parameters) == 'function' then
    for name, p in model:named_parameters() do out[#out + 1] = { name, p } end
    return out
  end
  local keys = {}
  for k, v in pairs(model) do
    if type(v) == 'table' and rawget(v, '_is_module') == true then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do
    for name, p in model[k]:named_parameters() do out[#out + 1] = { tostring(k) .. '.' .. name, p } end
  end
  return out
end
Trainer._named_parameters = named_parameters

--- Lightning's grad_norm: {"grad_<p>_norm/<name>" = norm, "grad_<p>_norm_total" = norm of norms}.
function Trainer:_grad_norm(norm_type)
  local out, norms = {}, {}
  local p = norm_type == 'inf' and math.huge or tonumber(norm_type)
  local label = norm_type == 'inf' and 'inf' or (p == math.floor(p) and ('%d'):format(p) or tostring(p))
  local names, dev = {}, {} -- norms of GPU gradients are read back together (one wait)
  for _, e in ipairs(named_parameters(self.lightning_module)) do
    local g = require('dpl.autograd').grad_of(e[2])
    if g ~= nil then
      local n = g:norm(p)
      if n._devtype == 0 then n = n:item() else dev[#dev + 1] = n end
      names[#names + 1] = ('grad_%s_norm/%s'):format(label, e[1])
      norms[#norms + 1] = n
    end
  end
  if dev[1] ~= nil then
    local vals, k = Results.read_back(dev), 0
    for i, n in ipairs(norms) do
      if type(n) ~= 'number' then k = k + 1; norms[i] = vals[k] end
    end
  end
  for i, name in ipairs(names) do out[name] = norms[i] end
  if #norms > 0 then
    local total = 0
    if p == math.huge then for _, n in ipairs(norms) do if n > total then total = n end end
    else
      for _, n in ipairs(norms) do total = total + n ^ p end
      total = total ^ (1 / p)
    end
    out[('grad_%s_norm_total'):format(label)] = total
  end
  return out
end

-- after the closure, before optimizer:step(): hooks, grad norms, then clipping
function Trainer:_after_closure(optimizer, opt_idx)
  self:_call_callback_hooks('on_before_optimizer_step', optimizer, opt_idx)
  self:_call_module_hook('on_before_optimizer_step', optimizer, opt_idx)
  local tgn = self.track_grad_norm
  if tgn ~= nil and tgn ~= -1 then
    local norms = self:_grad_norm(tgn)
    if next(norms) ~= nil then self:_call_module_hook('log_grad_norm', norms) end
  end
  if self.lightning_module.automatic_optimization then
    self:_call_module_hook('configure_gradient_clipping', optimizer, opt_idx, self.gradient_clip_val,
                           self.gradient_clip_algorithm)
  end
end

-- manual optimisation counts each optimizer step (automatic: the loop counts)
function Trainer:_on_optimizer_stepped()
  if not self.lightning_module.automatic_optimization then
    self.global_step = self.global_step + 1
    self.lightning_module.global_step = self.global_step
  end
end

---------------------------------------------------------------- entry points

local function check_model(model, fn)
  LightningModule = LightningModule or require 'dpl.lightning'
  if not class.is_instance(model, LightningModule) then
    misconf('`Trainer.%s()` requires a `LightningModule`, got: %s', fn, tostring(model))
  end
  if model.automatic_optimization == nil or model.hparams == nil then
    -- (its __init did not run LightningModule's: with automatic_optimization nil the loop
    -- took it for manual optimisation and trained nothing)
    local name = getmetatable(model).__name or 'the LightningModule'
    misconf('`Trainer.%s()`: %s was not initialised as a LightningModule: its constructor must call'
      .. ' `dpl.LightningModule.__init(self)` first (Python\'s `super().__init__()`)', fn, name)
  end
end

local options = require 'dpl.options'
-- the options each entry point takes (Lightning's keyword arguments): a key not among them
-- is an error, not silently dropped
local entry_keys = {
  fit = options.keys('ckpt_path', 'datamodule'),
  validate = options.keys('ckpt_path', 'verbose', 'datamodule'),
  test = options.keys('ckpt_path', 'verbose', 'datamodule'),
  predict = options.keys('ckpt_path', 'return_predictions', 'datamodule'),
}

local function is_datamodule(x)
  if type(x) ~= 'table' then return false end
  LightningDataModule = LightningDataModule or require 'dpl.datamodule'
  return class.is_instance(x, LightningDataModule)
end

-- the datamodule of an entry point: opts.datamodule, or the loaders argument when it is one
-- (Lightning "fixes it for the user"); both loaders and a datamodule is an error
local function datamodule_of(self, fn, loaders, opts, val_loaders)
  local dm = opts.datamodule
  if dm ~= nil and not is_datamodule(dm) then
    misconf('`trainer.%s(datamodule=...)` expects a `LightningDataModule`, got: %s', fn, tostring(dm))
  end
  if is_datamodule(loaders) then
    if dm ~= nil and dm ~= loaders then
      misconf('`trainer.%s()` got two datamodules: one in place of the dataloaders and one as `datamodule=`', fn)
    end
    dm, loaders = loaders, nil
  end
  if dm ~= nil and (loaders ~= nil or val_loaders ~= nil) then
    if fn == 'fit' then misconf('You cannot pass `train_dataloader` or `val_dataloaders` to `trainer.fit(datamodule=...)`') end
    misconf('You cannot pass both `trainer.%s(dataloaders=..., datamodule=...)`', fn)
  end
  -- the data sources of this call (Lightning's attach_datamodule); trainer.datamodule stays
  -- set from an earlier call when this one has none, as in Lightning 1.9
  self._dm = dm
  if dm ~= nil then
    self.datamodule = dm
    dm.trainer = self
  end
  return loaders
end

-- the options table given in place of the loaders (`trainer:fit(model, {ckpt_path = p})`,
-- `trainer:predict(model, {return_predictions = false})`, as Lightning's keywords): a plain
-- table with a datamodule, or whose keys are all the entry point's options with no table values
-- (a loader, a list or a table of loaders is never taken for options)
local function options_in_place(x, fn)
  if type(x) ~= 'table' or getmetatable(x) ~= nil or next(x) == nil then return false end
  if x.datamodule ~= nil then return true end
  for k, v in pairs(x) do
    if not entry_keys[fn][k] or type(v) == 'table' then return false end
  end
  return true
end

-- Lightning 1.9's positional parameters after (model, dataloaders[, val_dataloaders]):
-- fit(..., datamodule, ckpt_path), validate/test(..., ckpt_path, verbose, datamodule),
-- predict(..., datamodule, return_predictions, ckpt_path)
local positional_names = {
  fit = { 'datamodule', 'ckpt_path' },
  validate = { 'ckpt_path', 'verbose', 'datamodule' },
  test = { 'ckpt_path', 'verbose', 'datamodule' },
  predict = { 'datamodule', 'return_predictions', 'ckpt_path' },
}

--- The options of an entry point from what follows the loaders: an options table, or
--- Lightning's positional values (`trainer:test(model, dl, 'best')`,
--- `trainer:predict(model, dl, nil, false)`, `trainer:fit(model, nil, nil, dm)`).
local function opts_of(fn, x, ...)
  local names, n = positional_names[fn], select('#', ...)
  if type(x) == 'table' and not is_datamodule(x) then
    if n > 0 and (...) ~= nil or n > 1 and select(2, ...) ~= nil then
      misconf('`trainer.%s()`: an options table (%s) takes no positional arguments after it', fn,
        table.concat(names, '=, ') .. '=')
    end
    options.check(x, entry_keys[fn], ('Trainer.%s'):format(fn))
    return x
  end
  local o, vals = {}, { x, ... }
  if n + 1 > #names and vals[n + 1] ~= nil then
    misconf('`trainer.%s()` takes at most %d arguments after the dataloaders (%s), got %d', fn, #names,
      table.concat(names, ', '), n + 1)
  end
  -- (a string where Lightning's first positional is the datamodule: the checkpoint path, as
  -- trainer:fit(model, loader, nil, 'last.ckpt') reads)
  if names[1] == 'datamodule' and type(x) == 'string' then vals[1], o.ckpt_path = nil, x end
  if fn == 'predict' and type(x) == 'boolean' then vals[1], o.return_predictions = nil, x end
  if names[1] ~= 'datamodule' and is_datamodule(x) then vals[1], o.datamodule = nil, x end
  for i, name in ipairs(names) do
    local v = vals[i]
    if v ~= nil then
      if o[name] ~= nil then misconf('`trainer.%s()`: %s given twice', fn, name) end
      o[name] = v
    end
  end
  if o.ckpt_path ~= nil and type(o.ckpt_path) ~= 'string' then
    misconf('`trainer.%s()`: ckpt_path must be a string path, "best" or "last", got %s', fn, type(o.ckpt_path))
  end
  for _, name in ipairs({ 'verbose', 'return_predictions' }) do
    if o[name] ~= nil and type(o[name]) ~= 'boolean' then
      misconf('`trainer.%s()`: %s must be a boolean, got %s', fn, name, type(o[name]))
    end
  end
  return o
end

--- trainer:fit(model, train_dataloaders, val_dataloaders, {ckpt_path=, datamodule=}), or Lightning's
--- positional form trainer:fit(model, train_dataloaders, val_dataloaders, datamodule, ckpt_path)
function Trainer:fit(model, train_dataloaders, val_dataloaders, opts, ...)
  check_model(model, 'fit')
  if opts == nil and select('#', ...) == 0 and val_dataloaders == nil and options_in_place(train_dataloaders, 'fit') then
    -- trainer:fit(model, {datamodule = dm} | {ckpt_path = p}): the options in place of the loaders
    opts, train_dataloaders = train_dataloaders, nil
  end
  opts = opts_of('fit', opts, ...)
  train_dataloaders = datamodule_of(self, 'fit', train_dataloaders, opts, val_dataloaders)
  local ckpt_path = opts.ckpt_path
  if ckpt_path == nil and self._resume_fit_path ~= nil then
    -- (used once, as Lightning clears it after resuming)
    ckpt_path, self._resume_fit_path, self.resume_from_checkpoint = self._resume_fit_path, nil, nil
  end
  self.state.fn, self.state.stage = 'fit', 'train'
  rawset(self, 'train_dataloader', nil) -- (Lightning's attach_dataloaders)
  -- Lightning's _parse_loop_limits: min_epochs becomes 0 (1 with min_steps) once fit starts
  self.min_epochs = self._args.min_epochs
  self.training = true
  self._loaders = { train = train_dataloaders, val = val_dataloaders }
  return self:_run(model, self:_set_ckpt_path('fit', ckpt_path, true, self.lightning_module ~= nil))
end

--- trainer:tune(model [, train_dataloaders, val_dataloaders, dataloaders] [, {datamodule=,
--- scale_batch_size_kwargs=, lr_find_kwargs=, method='fit'}]) -> {scale_batch_size=, lr_find=}:
--- Lightning 1.9's tune (Trainer{auto_scale_batch_size=, auto_lr_find=}; see dpl.tuner).
function Trainer:tune(model, ...)
  return self.tuner:_tune(model, ...)
end

--- trainer:validate(model, dataloaders, {ckpt_path=, verbose=true}) -> {metrics per dataloader}
function Trainer:validate(model, dataloaders, opts, ...)
  return self:_run_eval_entry('validate', 'val', model, dataloaders, opts, ...)
end

--- trainer:test(model, dataloaders, {ckpt_path=, verbose=true}) -> {metrics per dataloader}
function Trainer:test(model, dataloaders, opts, ...)
  return self:_run_eval_entry('test', 'test', model, dataloaders, opts, ...)
end

--- trainer:predict(model, dataloaders, {ckpt_path=, return_predictions=true}) -> predictions (a list per
--- dataloader when several; nil with return_predictions=false)
function Trainer:predict(model, dataloaders, opts, ...)
  if opts == nil and select('#', ...) == 0 and options_in_place(dataloaders, 'predict') then
    opts, dataloaders = dataloaders, nil
  end
  opts = opts_of('predict', opts, ...)
  dataloaders = datamodule_of(self, 'predict', dataloaders, opts)
  -- return_predictions=false: nothing is kept, nil is returned (Lightning). The strategies that
  -- fork workers (DDPSpawnStrategy and its children: ddp_spawn, ddp_fork, ddp_notebook) do not
  -- bring predictions back: false by default there, true refused (Lightning's PredictionLoop)
  local is_spawn = require('dpl.class').is_instance(self.strategy, require('dpl.strategies.ddp').DDPSpawnStrategy)
  if is_spawn and opts.return_predictions then
    misconf('`return_predictions` should be set to `False` when using the `DDPSpawnStrategy` or children class.'
      .. ' Found %s with strategy %s.', tostring(opts.return_predictions), self.strategy.__name or 'DDPSpawnStrategy')
  end
  if opts.return_predictions == nil then self._return_predictions = not is_spawn
  else self._return_predictions = opts.return_predictions ~= false end
  local provided = model ~= nil
  model = self:_model_or_attached(model, 'predict')
  self.state.fn, self.state.stage = 'predict', 'predict'
  self.predicting = true
  self._loaders = { predict = dataloaders }
  return self:_run(model, self:_set_ckpt_path('predict', opts.ckpt_path, provided, self.lightning_module ~= nil))
end

function Trainer:_run_eval_entry(fn, stage, model, dataloaders, opts, ...)
  if opts == nil and select('#', ...) == 0 and options_in_place(dataloaders, fn) then
    opts, dataloaders = dataloaders, nil
  end
  opts = opts_of(fn, opts, ...)
  dataloaders = datamodule_of(self, fn, dataloaders, opts)
  local provided = model ~= nil
  model = self:_model_or_attached(model, fn)
  self.state.fn, self.state.stage = fn, stage == 'val' and 'validate' or 'test'
  if stage == 'val' then self.validating = true else self.testing = true end
  self._loaders = { [stage] = dataloaders }
  self._verbose = opts.verbose ~= false
  return self:_run(model, self:_set_ckpt_path(fn, opts.ckpt_path, provided, self.lightning_module ~= nil))
end

function Trainer:_model_or_attached(model, fn)
  if model == nil then
    if self.lightning_module == nil then
      misconf('`model` must be provided to `trainer.%s()` when it\'s not attached to the trainer from a previous run', fn)
    end
    return self.lightning_module
  end
  check_model(model, fn)
  return model
end

-- Lightning 1.9.5's SLURMEnvironment.detect(): srun started this process (not an
-- interactive job: SLURM_JOB_NAME bash or interactive)
local function slurm_detected()
  local name = os.getenv('SLURM_JOB_NAME')
  return os.getenv('SLURM_NTASKS') ~= nil and name ~= 'bash' and name ~= 'interactive'
end

--- default_root_dir/hpc_ckpt_<n>.ckpt with the largest n among the names holding "hpc_ckpt_"
--- (the digits after it), nil when there is none: Lightning's _hpc_resume_path.
function Trainer:_hpc_resume_path()
  local dir = self.default_root_dir
  local best
  for _, name in ipairs(require('dpl.loggers.base').listdir(dir)) do
    local s, e = name:find('hpc_ckpt_', 1, true)
    -- (not the temp file of a write killed mid-way: hpc_ckpt_2.ckpt.tmp.4242 would read as 24242)
    if s and not require('dpl.trainer.checkpoint').is_temp_name(name) then
      -- (the part after the last "hpc_ckpt_", its digits only)
      local rest = name:sub(e + 1)
      while true do
        local s2, e2 = rest:find('hpc_ckpt_', 1, true)
        if not s2 then break end
        rest = rest:sub(e2 + 1)
      end
      local n = tonumber((rest:gsub('%D', '')))
      if n and (best == nil or n > best) then best = n end
    end
  end
  if best == nil then return nil end
  return ('%s/hpc_ckpt_%d.ckpt'):format(dir, best)
end

--- The checkpoint an entry point loads, by Lightning 1.9.5's
--- CheckpointConnector._set_ckpt_path: nil with a model given (on SLURM: the newest
--- hpc_ckpt_<n>.ckpt in default_root_dir when there is one), "best" when no model is given and
--- one is attached (warning), "best" the first ModelCheckpoint's best_model_path, "last" the
--- newest file whose name holds "last" in a ModelCheckpoint's directory on disk (none: a
--- warning and nothing loaded), "hpc" the newest hpc checkpoint, else the path given.
function Trainer:_set_ckpt_path(fn, ckpt_path, model_provided, model_connected)
  if ckpt_path == nil and slurm_detected() and self:_hpc_resume_path() ~= nil then ckpt_path = 'hpc' end
  if model_provided and ckpt_path == nil then return nil end
  if model_connected and ckpt_path == nil then
    ckpt_path = 'best'
    if self.is_global_zero then log.warn("`.%s(ckpt_path=None)` was called without a model. The best model of the previous `fit` call will be used."
      .. " You can pass `.%s(ckpt_path='best')` to use the best model or `.%s(ckpt_path='last')` to use the last model."
      .. ' If you pass a value, this warning will be silenced.', fn, fn, fn) end
  end
  if ckpt_path == 'best' then
    if #(self.checkpoint_callbacks or {}) > 1 and self.is_global_zero then
      log.warn('`.%s(ckpt_path="best")` is called with Trainer configured with multiple `ModelCheckpoint` callbacks.'
        .. ' It will use the best checkpoint path from first checkpoint callback.', fn)
    end
    local cb = self.checkpoint_callback
    if not cb then
      errors.ValueError:raise(('`.%s(ckpt_path="best")` is set but `ModelCheckpoint` is not configured.'):format(fn), 0)
    end
    if (cb.best_model_path or '') == '' then
      if self.fast_dev_run then
        errors.ValueError:raise(('You cannot execute `.%s(ckpt_path="best")` with `fast_dev_run=True`.'
          .. ' Please pass an exact checkpoint path to `.%s(ckpt_path=...)`'):format(fn, fn), 0)
      end
      errors.ValueError:raise(('`.%s(ckpt_path="best")` is set but `ModelCheckpoint` is not configured to save the best model.')
        :format(fn), 0)
    end
    ckpt_path = cb.best_model_path
  elseif ckpt_path == 'last' then
    local ckpt = require 'dpl.trainer.checkpoint'
    local newest, newest_t
    for _, cb in ipairs(self.checkpoint_callbacks or {}) do
      for _, p in ipairs(cb:_find_last_checkpoints(self)) do
        local mt = ckpt.mtime(p)
        if mt and (newest_t == nil or mt > newest_t or (mt == newest_t and p > newest)) then newest, newest_t = p, mt end
      end
    end
    if newest == nil then
      -- not an error, so that it can be set once for the first run too (Lightning)
      if self.is_global_zero then
        log.warn('.%s(ckpt_path="last") is set, but there is no fault tolerant or last checkpoint available.'
          .. ' No checkpoint will be loaded.', fn)
      end
      return nil
    end
    ckpt_path = newest
  elseif ckpt_path == 'hpc' then
    local p = self:_hpc_resume_path()
    if not p then
      errors.ValueError:raise(('`.%s(ckpt_path="hpc")` is set but no HPC checkpoint was found.'
        .. ' Please pass an exact checkpoint path to `.%s(ckpt_path=...)`'):format(fn, fn), 0)
    end
    ckpt_path = p
  end
  if ckpt_path == nil or ckpt_path == '' then
    errors.ValueError:raise(("`.%s()` found no path for the best weights: %s. Please specify a path for a checkpoint"
      .. ' `.%s(ckpt_path=PATH)`'):format(fn, ckpt_path == nil and 'None' or "''", fn), 0)
  end
  if type(ckpt_path) ~= 'string' then
    misconf('`.%s(ckpt_path=...)` expects a path (a string) or "best", "last", "hpc"; got %s', fn, type(ckpt_path))
  end
  return ckpt_path
end

function Trainer:_run(model, ckpt_path)
  local loops = require 'dpl.trainer.loops'
  self.ckpt_path = ckpt_path -- (Lightning's trainer.ckpt_path: the checkpoint this run loads, or nil)
  self.fit_loop._rng_restore = nil -- (set by the restore below, if any)
  -- every entry point starts with no evaluation loaders (Lightning's attach_dataloaders sets
  -- val/test/predict_dataloaders to None): they are the ones this run loads
  self._val_loaders, self._test_loaders, self._predict_loaders = nil, nil, nil
  self.state.status = 'running'
  self.should_stop = false
  local launcher = self.strategy:launcher_for()
  if launcher and launcher.prepare then
    -- a launcher that starts the other ranks, this process being rank 0 (ddp's subprocess launcher)
    launcher.prepare(self.strategy, self)
    launcher = nil
  end
  local grad_mode = loops.set_grad_enabled(true)
  if grad_mode ~= nil then loops.set_grad_enabled(grad_mode) end
  local ok, res
  local fit_loop = require 'dpl.trainer.fit_loop'
  -- while fitting, SIGTERM/SIGUSR1 wait for a batch boundary: held here when this process
  -- runs the loop; with a launcher (ddp_spawn) the launcher holds them around the fork, so
  -- that each worker starts with them held, and forwards them to the workers
  local sigmask = (not launcher and self.state.fn == 'fit') and fit_loop._block_signals() or nil
  -- detect_anomaly=true: fit runs with autograd's anomaly detection (Lightning wraps its fit
  -- loop in torch.autograd.set_detect_anomaly); the setting before is restored afterwards
  local anomaly_prev
  if self.state.fn == 'fit' and self.detect_anomaly then
    anomaly_prev = require('dpl.autograd').set_detect_anomaly(true)
  end
  if launcher then
    -- the workers run everything; the parent gets rank 0's results back. The module is
    -- attached here too (Lightning's fit sets strategy._lightning_module before launching):
    -- the weights brought back land in it, and trainer:save_checkpoint() works afterwards
    self.lightning_module = model
    self.strategy:connect(model)
    self.model = self.strategy.model
    ok, res = pcall(launcher.launch, self.strategy, self, loops.run, model, ckpt_path)
  else
    ok, res = xpcall(loops.run, function(e)
      -- (loops.run with a profiler raises a string that already has its traceback)
      if type(e) == 'string' and not e:find('\nstack traceback:\n', 1, true) then return debug.traceback(e, 2) end
      -- an error object (a DistError from a collective, a MisconfigurationException) keeps
      -- where it was raised: the re-raise below would leave the host only this frame
      return errors.attach_traceback(e, 2)
    end, self, model, ckpt_path)
  end
  self.training, self.validating, self.testing, self.predicting, self.sanity_checking = false, false, false, false, false
  if grad_mode ~= nil then loops.set_grad_enabled(grad_mode) end -- also after an error mid-evaluation
  fit_loop._restore_signals(sigmask)
  if anomaly_prev ~= nil then require('dpl.autograd').set_detect_anomaly(anomaly_prev) end
  -- logged GPU values still queued (a run that stopped mid-epoch) into the metric dicts
  pcall(self._results_connector.flush, self._results_connector)
  if not ok then
    self.state.status = 'interrupted'
    self.state.stage = nil
    if self.lightning_module then
      pcall(self._call_callback_hooks, self, 'on_exception', res)
    end
    pcall(function() self.strategy:teardown() end)
    for _, lg in ipairs(self.loggers) do pcall(lg.finalize, lg, 'failed') end
    error(res, 0)
  end
  self.state.status = 'finished'
  self.state.stage = nil -- Lightning's _teardown leaves the stage None
  return res
end

-- the strategy's ranks as the trainer's fields (after a spawn launcher set them)
function Trainer:_refresh_ranks()
  local s = self.strategy
  self.global_rank, self.local_rank, self.node_rank, self.world_size = s.global_rank, s.local_rank, s.node_rank, s.world_size
  self.is_global_zero = self.global_rank == 0
  self.root_device = s.root_device
end

---------------------------------------------------------------- checkpoints

--- The checkpoint as a table (Lightning's keys); see dpl.trainer.checkpoint.
function Trainer:_dump_checkpoint(weights_only)
  return require('dpl.trainer.checkpoint').dump(self, weights_only)
end

--- Saves a checkpoint (rank 0 writes; every rank must call it).
function Trainer:save_checkpoint(path, weights_only)
  if self.lightning_module == nil then
    misconf('Saving a checkpoint is only possible if a model is attached to the Trainer. Did you call `Trainer.save_checkpoint()` before calling `Trainer.{fit,validate,test,predict}`?')
  end
  local ckpt = self:_dump_checkpoint(weights_only)
  if self.is_global_zero then require('dpl.trainer.checkpoint').save(ckpt, path) end
  self.strategy:barrier('Trainer.save_checkpoint')
end

---------------------------------------------------------------- properties

--- trainer.profiler without a profiler argument: a PassThroughProfiler (Lightning's default),
--- made when first read.
function properties.profiler(self)
  local p = require('dpl.profilers').PassThroughProfiler()
  rawset(self, 'profiler', p)
  return p
end

--- trainer.tuner: a dpl.tuner.Tuner for this trainer (trainer.tuner:lr_find(model, ...)).
function properties.tuner(self)
  local t = require('dpl.tuner').Tuner(self)
  rawset(self, 'tuner', t)
  return t
end

--- trainer.interrupted: the last run ended with an exception (Lightning's property).
function properties.interrupted(self)
  return self.state.status == 'interrupted'
end

--- trainer.estimated_stepping_batches: Lightning 1.9.5's estimate of the optimizer steps of
--- the whole fit (what OneCycleLR's total_steps wants, readable in configure_optimizers):
--- max_epochs -1 → max_steps (math.huge when -1 too); else ceil(num_training_batches /
--- accumulate_grad_batches) × max(max_epochs, 1), capped by max_steps when set. The training
--- loader is loaded first when the fit has not loaded it yet (its hook is called again by the
--- loop, as in Lightning); num_training_batches is per rank (after limit_train_batches and
--- the distributed sampler), so several devices divide it.
function properties.estimated_stepping_batches(self)
  local sched = self.accumulation_scheduler
  if #sched.epochs ~= 1 then
    misconf('Estimated stepping batches cannot be computed with different `accumulate_grad_batches` at different epochs.')
  end
  local max_epochs, max_steps = self.max_epochs, self.max_steps
  if max_epochs == -1 then
    return max_steps == -1 and math.huge or max_steps
  end
  if rawget(self, 'train_dataloader') == nil then
    if self.lightning_module == nil or self._loaders == nil then
      misconf('`trainer.estimated_stepping_batches` needs a model and a training dataloader: read it during `fit`')
    end
    if self.is_global_zero then log.info('Loading `train_dataloader` to estimate number of stepping batches.') end
    local loaders, counts = require('dpl.trainer.loops').load_loaders(self, 'train')
    rawset(self, 'train_dataloader', loaders[1])
    self.num_training_batches = counts[1] or 0
  end
  local total = self.num_training_batches
  if total == math.huge then return max_steps end
  self.accumulate_grad_batches = sched:get_accumulate_grad_batches(self.current_epoch)
  local k = self.accumulate_grad_batches
  local steps = math.ceil(total / k) * math.max(max_epochs, 1)
  if max_steps ~= -1 then steps = math.min(steps, max_steps) end
  return steps
end

--- trainer.data_parallel: the strategy is a ParallelStrategy (ddp, ddp_spawn, dp, horovod, ...).
function properties.data_parallel(self)
  return class.is_instance(self.strategy, require('dpl.strategies.strategy').ParallelStrategy)
end

--- trainer.distributed_sampler_kwargs: what a DistributedSampler gets ({num_replicas=, rank=})
--- under a ParallelStrategy, else nil (Lightning's None).
function properties.distributed_sampler_kwargs(self)
  if not properties.data_parallel(self) then return nil end
  return self.strategy:distributed_sampler_kwargs()
end

--- trainer.enable_validation: a validation source is given, validation_step is overridden and
--- limit_val_batches is not 0.
function properties.enable_validation(self)
  if rawget(self, 'lightning_module') == nil or self._loaders == nil then return false end
  return require('dpl.trainer.loops').enable_validation(self) == true
end

--- trainer.evaluating: a validation or test loop is running (not the sanity check).
function properties.evaluating(self)
  return (self.validating or self.testing) and not self.sanity_checking
end

--- trainer.tuning: trainer:tune / the tuner is running (Lightning's RunningStage.TUNING).
function properties.tuning(self)
  return self.state.stage == 'tune'
end

--- trainer.optimizer_frequencies: the strategy's (configure_optimizers' `frequency`s; {} without).
function properties.optimizer_frequencies(self)
  return self.strategy.optimizer_frequencies or {}
end

--- trainer.prediction_writer_callbacks: the BasePredictionWriter callbacks.
function properties.prediction_writer_callbacks(self)
  local PW = require('dpl.callbacks').BasePredictionWriter
  local out = {}
  for _, cb in ipairs(self.callbacks or {}) do
    if class.is_instance(cb, PW) then out[#out + 1] = cb end
  end
  return out
end

--- trainer.predict_loop before any predict: Lightning's loop with nothing predicted yet
--- (predict sets the trainer's own: predictions, epoch_batch_indices, return_predictions).
function properties.predict_loop(self)
  return { predictions = {}, epoch_batch_indices = {}, return_predictions = true,
    epoch_loop = { current_batch_indices = {} } }
end

--- trainer.val_dataloaders / test_dataloaders / predict_dataloaders: the loaders of the last
--- run that loaded them (a list, one per dataloader), nil before (Lightning's None).
function properties.val_dataloaders(self) return rawget(self, '_val_loaders') end
function properties.test_dataloaders(self) return rawget(self, '_test_loaders') end
function properties.predict_dataloaders(self) return rawget(self, '_predict_loaders') end

-- Lightning's loop objects and precision plugin: dplhost has no such objects
for _, k in ipairs({ 'validate_loop', 'test_loop', 'precision_plugin' }) do
  properties[k] = function()
    errors.NotImplementedError:raise(('`trainer.%s` is not available in dplhost: its loops are not objects'
      .. ' (trainer.fit_loop holds the fit counters and limits, trainer.predict_loop the predictions) and it'
      .. ' has no precision plugins (trainer.precision, trainer.scaler)'):format(k), 3)
  end
end

--- Lightning's trainer.log_dir (a property, read as a field): the first logger's version
--- directory when it is a TensorBoardLogger, its save_dir for any other logger,
--- default_root_dir without one.
function properties.log_dir(self)
  local lg = self.logger
  if lg == nil then return self.default_root_dir end
  local attr = require('dpl.loggers.base').attr
  if class.is_instance(lg, require('dpl.loggers').TensorBoardLogger) then return attr(lg, 'log_dir') end
  return attr(lg, 'save_dir')
end

--- The seed's batch transfer: to cuda:<gpu_id> (nil: the root GPU), through the
--- attached model's on_before_batch_transfer / transfer_batch_to_device /
--- on_after_batch_transfer hooks when there is one.
function Trainer:transfer_batch_to_gpu(batch, gpu_id)
  local D = require 'dpl.devices'
  if gpu_id == nil then
    gpu_id = self.root_gpu
    if gpu_id == nil then
      misconf('transfer_batch_to_gpu: no GPU id given and this trainer has no root GPU (gpus=%s)', tostring(self.gpus))
    end
  end
  local device = D.device('cuda', gpu_id)
  local model = self.lightning_module
  if model == nil then return D.move_data_to_device(batch, device) end
  batch = self:_call_module_hook('on_before_batch_transfer', batch, 0)
  batch = self:_call_module_hook('transfer_batch_to_device', batch, device, 0)
  return self:_call_module_hook('on_after_batch_transfer', batch, 0)
end

--- No TPU backend: always a MisconfigurationException.
function Trainer:transfer_batch_to_tpu()
  misconf('Requested to transfer batch to TPU but no TPU is available')
end

function Trainer:print(...)
  if self.is_global_zero then print(...) end
end

--- A Trainer the library builds for its own runs (the tuner's searches): as Trainer(a), without
--- the device summary the user's Trainer already printed.
function Trainer._inner(a)
  local prev = Trainer._quiet
  Trainer._quiet = true
  local ok, t = pcall(Trainer, a)
  Trainer._quiet = prev
  if not ok then error(t, 0) end
  return t
end

--- Trainer.from_argv(arg, defaults [, {help = true}]): a Trainer from the command line
--- (`--max_epochs 3 --gpus 0,1 ...`); returns the trainer and the other words. `--help` / `-h`
--- prints the Trainer's flags and exits 0 (help = false: the word is returned with the others);
--- an other word that is a Trainer argument misspelt (`--max_epoch`) gets a warning naming it.
function Trainer.from_argv(argv, defaults, opts)
  if argv ~= nil and type(argv) ~= 'table' then
    misconf('Trainer.from_argv expects the script\'s `arg` table, got %s', type(argv))
  end
  if defaults ~= nil and type(defaults) ~= 'table' then
    misconf('Trainer.from_argv: defaults must be a table of Trainer arguments, got %s', type(defaults))
  end
  if opts ~= nil and (type(opts) ~= 'table' or (opts.help ~= nil and type(opts.help) ~= 'boolean')) then
    misconf('Trainer.from_argv: the third argument must be {help = true|false}, got %s', type(opts))
  end
  if opts ~= nil then
    for k in pairs(opts) do
      if k ~= 'help' then misconf('Trainer.from_argv: unknown option %s (it takes help)', tostring(k)) end
    end
  end
  if not (opts and opts.help == false) then
    for _, w in ipairs(argv or {}) do
      if w == '--' then break end
      if w == '--help' or w == '-h' then
        io.stdout:write(args_mod.argv_help(defaults))
        io.stdout:flush()
        os.exit(0)
      end
    end
  end
  local parsed, rest = args_mod.parse_argv(argv or {})
  for _, w in ipairs(rest) do
    local near = args_mod.unknown_hint(w)
    if near then
      log.warn("Trainer.from_argv: '%s' is not a Trainer argument (did you mean '--%s'?); it is left to the script "
        .. 'with the other words', w, near)
    end
  end
  local all = {}
  for k, v in pairs(defaults or {}) do all[k] = v end
  for k, v in pairs(parsed) do all[k] = v end
  return Trainer(all), rest
end

--- The Trainer arguments parsed from the command line, without building one.
Trainer.parse_argv = args_mod.parse_argv

Trainer.__tostring = function(self)
  return ('Trainer(strategy=%s, accelerator=%s, devices=%d)'):format(self.strategy.strategy_name, self.accelerator,
                                                                    self.num_devices)
end

return Trainer
