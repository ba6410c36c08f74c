-- dpl.tuner: Lightning 1.9's Tuner (trainer.tuner). lr_find is the learning-rate range test:
-- `trainer.tuner:lr_find(model, train_loader, val_loader, {min_lr=1e-8, max_lr=1, num_training=100,
-- mode='exponential', early_stop_threshold=4, update_attr=false})` (or
-- `dpl.tuner.Tuner(trainer):lr_find(...)`) trains for up to num_training
-- steps with the learning rate growing from min_lr to max_lr, records the smoothed loss at each
-- step, stops early when it diverges, puts the model's weights back as they were, and returns an
-- LRFinder whose `results` ({lr = {...}, loss = {...}}) and `suggestion()` (the lr of the steepest
-- loss decrease) are Lightning 1.9's. The run uses a Trainer of its own made from the user's
-- arguments (no logger, checkpoints, progress bar or sanity check; validation off), so the user's
-- Trainer keeps its state. scale_batch_size (the batch size finder) is in dpl.tuner_batch_size;
-- `_tune` is trainer:tune() (auto_scale_batch_size, then auto_lr_find).
local class = require 'dpl.class'
local errors = require 'dpl.errors'
local options = require 'dpl.options'
local log = require 'dpl.log'

local fmt = string.format
local M = {}

local SUGGESTION_KEYS = options.keys('skip_begin', 'skip_end')
local LR_FIND_KEYS = options.keys('min_lr', 'max_lr', 'num_training', 'mode', 'early_stop_threshold', 'update_attr',
  'datamodule', 'method')
local TUNE_KEYS = options.keys('datamodule', 'scale_batch_size_kwargs', 'lr_find_kwargs', 'method')

local function misconf(msg, ...) errors.MisconfigurationException:raise(fmt(msg, ...), 3) end

---------------------------------------------------------------- LRFinder
local LRFinder = class.Object:extend('LRFinder')
M.LRFinder = LRFinder

function LRFinder:__init(mode, lr_min, lr_max, num_training)
  self.mode, self.lr_min, self.lr_max, self.num_training = mode, lr_min, lr_max, num_training
  self.results = { lr = {}, loss = {} }
end

-- numpy.gradient of a list: one-sided differences at the ends, central ones inside
local function gradient(y)
  local n, g = #y, {}
  g[1] = y[2] - y[1]
  for i = 2, n - 1 do g[i] = (y[i + 1] - y[i - 1]) / 2 end
  g[n] = y[n] - y[n - 1]
  return g
end

--- The lr at the steepest decrease of the recorded (smoothed) loss, leaving out skip_begin points
--- at the start and skip_end at the end (Lightning's); nil (and a logged error) when fewer than
--- two points remain.
function LRFinder:suggestion(skip_begin, skip_end)
  if type(skip_begin) == 'table' then -- suggestion{skip_begin=, skip_end=} too
    options.check(skip_begin, SUGGESTION_KEYS, 'suggestion')
    skip_begin, skip_end = skip_begin.skip_begin, skip_begin.skip_end
  end
  skip_begin, skip_end = skip_begin or 10, skip_end or 1
  for name, v in pairs({ skip_begin = skip_begin, skip_end = skip_end }) do
    if type(v) ~= 'number' or v < 0 or v % 1 ~= 0 then
      errors.ValueError:raise(fmt('suggestion: %s must be a non-negative integer, got %s', name, tostring(v)), 2)
    end
  end
  local loss = {}
  local all = self.results.loss
  for i = skip_begin + 1, #all - skip_end do
    local v = all[i]
    if v == v and v ~= math.huge and v ~= -math.huge then loss[#loss + 1] = v end
  end
  if #loss < 2 then
    log.error('Failed to compute suggesting for `lr`. There might not be enough points.')
    self._optimal_idx = nil
    return nil
  end
  local g = gradient(loss)
  local best = 1
  for i = 2, #g do if g[i] < g[best] then best = i end end
  -- (as Lightning: the index into the unfiltered list, which a non-finite loss shifts)
  self._optimal_idx = best + skip_begin
  return self.results.lr[self._optimal_idx]
end

function LRFinder:plot()
  errors.NotImplementedError:raise('LRFinder:plot needs a plotting library, which dplhost does not have: plot '
    .. 'lr_finder.results.lr against lr_finder.results.loss (log-scale lr) with your own tools', 2)
end

---------------------------------------------------------------- the callback that records
local Callback = require 'dpl.callbacks.callback'
local LRCallback = Callback:extend('LRFinderCallback')

function LRCallback:__init(finder, early_stop_threshold, beta)
  self.finder, self.early_stop_threshold, self.beta = finder, early_stop_threshold, beta or 0.98
  self.avg_loss, self.best_loss = 0, 0
end

local function stepping(trainer)
  return (trainer.fit_loop.batch_idx + 1) % trainer.accumulate_grad_batches == 0
end

function LRCallback:on_train_batch_start(trainer)
  if not stepping(trainer) then return end
  local lrs = self.finder.results.lr
  lrs[#lrs + 1] = trainer.optimizers[1].param_groups[1].lr
end

function LRCallback:on_train_batch_end(trainer, model, outputs)
  if not stepping(trainer) then return end
  local loss = outputs
  if type(loss) == 'table' and getmetatable(loss) == nil then loss = loss.loss end
  if loss == nil then return end
  local v = type(loss) == 'number' and loss or loss:item()
  local step = trainer.global_step
  self.avg_loss = self.beta * self.avg_loss + (1 - self.beta) * v
  local smoothed = self.avg_loss / (1 - self.beta ^ (step + 1))
  if self.early_stop_threshold ~= false and step > 1 and smoothed > self.early_stop_threshold * self.best_loss then
    trainer.should_stop = true -- diverging: this step is the last
  end
  if smoothed < self.best_loss or step == 1 then self.best_loss = smoothed end
  local losses = self.finder.results.loss
  losses[#losses + 1] = smoothed
end

---------------------------------------------------------------- Tuner
local Tuner = class.Object:extend('Tuner')
M.Tuner = Tuner

function Tuner:__init(trainer)
  if type(trainer) ~= 'table' or type(trainer.fit) ~= 'function' then
    errors.ValueError:raise(fmt('Tuner: expected a dpl.Trainer, got %s', type(trainer)), 3)
  end
  self.trainer = trainer
end

-- the attribute that holds the model's learning rate (Lightning's _determine_lr_attr_name):
-- trainer.auto_lr_find when it is a name, else "lr" or "learning_rate", found on the model, its
-- hparams or the datamodule (lightning_hasattr)
local function lr_attr(trainer, model, dm)
  local B = require 'dpl.tuner_batch_size'
  if type(trainer.auto_lr_find) == 'string' then
    if #B.attr_holders(model, dm, trainer.auto_lr_find) == 0 then
      misconf('`auto_lr_find` was set to %s, however could not find this as a field in `model` or `model.hparams`.',
        trainer.auto_lr_find)
    end
    return trainer.auto_lr_find
  end
  for _, k in ipairs({ 'lr', 'learning_rate' }) do
    if #B.attr_holders(model, dm, k) > 0 then return k end
  end
  misconf('When `auto_lr_find=True`, either `model` or `model.hparams` should have one of these fields: '
    .. "('lr', 'learning_rate') overridden.")
end

local SNAP_FIELDS = { 'trainer', 'logger', 'loggers', 'global_rank', 'local_rank', 'current_epoch', 'global_step' }

--- The model's weights and the fields a run sets on it (and a datamodule's trainer): returns a
--- function that puts them back (Lightning restores a checkpoint saved before tuning).
function M._snapshot(model, dm)
  local saved = {}
  for k, v in pairs(model:state_dict()) do saved[k] = v:clone() end
  local fields = {}
  for _, k in ipairs(SNAP_FIELDS) do fields[k] = rawget(model, k) end
  local dm_trainer = dm ~= nil and rawget(dm, 'trainer') or nil
  return function()
    model:load_state_dict(saved)
    for _, k in ipairs(SNAP_FIELDS) do rawset(model, k, fields[k]) end
    if dm ~= nil then rawset(dm, 'trainer', dm_trainer) end
  end
end

--- tuner:lr_find(model [, train_dataloaders [, val_dataloaders]] [, opts]): the range test (see
--- the top of this file). Returns an LRFinder, or nil with fast_dev_run (as Lightning).
function Tuner:lr_find(model, ...)
  local B = require 'dpl.tuner_batch_size'
  local train_loaders, val_loaders, dataloaders, opts = B.split_args(LR_FIND_KEYS, ...)
  options.check(opts, LR_FIND_KEYS, 'lr_find')
  opts = opts or {}
  if opts.method ~= nil and opts.method ~= 'fit' then
    misconf("method='fit' is an invalid configuration to run lr finder.") -- (Lightning's text)
  end
  B.check_tuner_configuration(train_loaders, val_loaders, dataloaders, 'fit')
  local min_lr, max_lr = opts.min_lr or 1e-8, opts.max_lr or 1
  local num_training = opts.num_training or 100
  local mode = opts.mode or 'exponential'
  local threshold = opts.early_stop_threshold
  if threshold == nil then threshold = 4.0 end
  if type(min_lr) ~= 'number' or type(max_lr) ~= 'number' or not (min_lr > 0) or not (max_lr > min_lr) then
    misconf('lr_find: expected 0 < min_lr < max_lr, got min_lr=%s, max_lr=%s', tostring(min_lr), tostring(max_lr))
  end
  if type(num_training) ~= 'number' or num_training < 1 or num_training % 1 ~= 0 then
    misconf('lr_find: num_training must be a positive integer, got %s', tostring(num_training))
  end
  if mode ~= 'exponential' and mode ~= 'linear' then
    misconf("lr_find: mode should be either 'linear' or 'exponential', got %s", tostring(mode))
  end
  if threshold ~= false and type(threshold) ~= 'number' then
    misconf('lr_find: early_stop_threshold must be a number or false (no early stop), got %s', tostring(threshold))
  end
  local trainer = self.trainer
  if trainer.fast_dev_run then
    log.warn('Skipping learning rate finder since fast_dev_run is enabled.')
    return nil
  end
  local name = trainer.strategy.strategy_name or ''
  if name:match('spawn') or name:match('fork') or name:match('notebook') then
    errors.NotImplementedError:raise(fmt("lr_find with strategy '%s': the search would run in forked workers whose"
      .. " results do not come back; run it with the default strategy (or under dplhost --nproc with 'ddp') and"
      .. ' pass the lr it suggests to the spawned fit', name), 2)
  end
  local dm = opts.datamodule
  if dm == nil and type(train_loaders) == 'table' and class.is_instance(train_loaders, require('dpl.datamodule')) then
    dm = train_loaders
  end
  local attr_dm = dm or trainer.datamodule
  local attr
  if opts.update_attr then attr = lr_attr(trainer, model, attr_dm) end

  -- the weights and the module fields a fit sets, to put back afterwards
  local restore = M._snapshot(model, dm)

  local finder = LRFinder(mode, min_lr, max_lr, num_training)
  local a = {}
  for k, v in pairs(trainer._user_args or {}) do a[k] = v end
  a.auto_lr_find, a.auto_scale_batch_size = nil, nil
  a.callbacks = { LRCallback(finder, threshold) }
  a.logger, a.enable_checkpointing, a.enable_progress_bar, a.enable_model_summary = false, false, false, false
  a.num_sanity_val_steps, a.limit_val_batches = 0, 0
  -- (Lightning sets only max_steps: the user's max_epochs, as resolved, still ends the search)
  a.max_steps, a.max_epochs, a.max_time, a.min_epochs, a.min_steps = num_training, trainer.max_epochs, nil, nil, nil
  a.profiler, a.val_check_interval, a.check_val_every_n_epoch = nil, nil, 1
  local inner = require('dpl.trainer')._inner(a)
  -- the user's optimizer at min_lr, with a scheduler that raises the lr every step
  local setup = inner.strategy.setup_optimizers
  inner.strategy.setup_optimizers = function(strategy, t)
    setup(strategy, t)
    if #strategy.optimizers ~= 1 then
      misconf('`model.configure_optimizers()` returned %d optimizers, but learning rate finder only works with a'
        .. ' single optimizer', #strategy.optimizers)
    end
    local opt = strategy.optimizers[1]
    for _, g in ipairs(opt.param_groups) do g.lr, g.initial_lr = min_lr, min_lr end
    local ratio, n_it = max_lr / min_lr, num_training
    local f = mode == 'exponential'
      and function(e) return e > 0 and ratio ^ ((e + 1) / n_it) or 1 end
      or function(e) return e > 0 and 1 + (e + 1) / n_it * (ratio - 1) or 1 end
    local sched = require('dpl.optim').lr_scheduler.LambdaLR(opt, f)
    strategy.lr_scheduler_configs = { { scheduler = sched, interval = 'step', frequency = 1, opt_idx = 0,
      reduce_on_plateau = false, strict = true } }
    strategy.optimizer_frequencies = {}
  end
  local ok, err = pcall(inner.fit, inner, model, train_loaders, val_loaders,
    opts.datamodule ~= nil and { datamodule = opts.datamodule } or nil)
  -- the weights and fields back, whatever happened
  restore()
  if not ok then error(err, 0) end
  -- every rank takes rank 0's records (Lightning's strategy.broadcast of the results): each
  -- rank saw its own shard's losses, and suggestions that differ would give the ranks
  -- different learning rates with update_attr
  if inner.world_size > 1 then finder.results = inner.strategy:broadcast(finder.results, 0) end
  if inner.global_step ~= num_training then
    log.info('LR finder stopped early after %d steps due to diverging loss.', inner.global_step)
  end
  if attr then
    local lr = finder:suggestion()
    if lr ~= nil then
      B.setattr(model, attr_dm, attr, lr) -- (every holder: model, hparams, datamodule)
      log.info('Learning rate set to %s', tostring(lr))
    end
  end
  trainer.auto_lr_find = false -- (Lightning's Tuner.lr_find)
  return finder
end

--- tuner:scale_batch_size(model [, train_dataloaders, val_dataloaders, dataloaders] [, {datamodule=,
--- method='fit', mode='power', steps_per_trial=3, init_val=2, max_trials=25, batch_arg_name='batch_size'}]):
--- Lightning 1.9.5's batch size finder (dpl.tuner_batch_size). Returns the batch size found, also
--- written into the attribute; nil with fast_dev_run.
function Tuner:scale_batch_size(model, ...)
  local r = require('dpl.tuner_batch_size').scale_batch_size(self, model, ...)
  self.trainer.auto_scale_batch_size = false -- (Lightning's Tuner.scale_batch_size)
  return r
end

--- trainer:tune(model [, train_dataloaders, val_dataloaders, dataloaders] [, {datamodule=,
--- scale_batch_size_kwargs=, lr_find_kwargs=, method='fit'}]): Lightning 1.9.5's Trainer.tune. With
--- Trainer{auto_scale_batch_size=true|'power'|'binsearch'} the batch size finder runs first
--- (the mode from the argument unless scale_batch_size_kwargs has one), then with
--- Trainer{auto_lr_find=true|name} lr_find (update_attr=true unless lr_find_kwargs says
--- otherwise). Returns {scale_batch_size=, lr_find=}; each flag is false afterwards. The global
--- random generator's state is put back afterwards (Lightning's isolate_rng).
function Tuner:_tune(model, ...)
  local B = require 'dpl.tuner_batch_size'
  local train, val, dataloaders, opts = B.split_args(TUNE_KEYS, ...)
  options.check(opts, TUNE_KEYS, 'Trainer.tune')
  opts = opts or {}
  local trainer = self.trainer
  if not class.is_instance(model, require('dpl.lightning')) then
    misconf('`Trainer.tune()` requires a `LightningModule`, got: %s', tostring(model))
  end
  for _, k in ipairs({ 'scale_batch_size_kwargs', 'lr_find_kwargs' }) do
    if opts[k] ~= nil and (type(opts[k]) ~= 'table' or getmetatable(opts[k]) ~= nil) then
      misconf('Trainer.tune: %s must be a table of options, got %s', k, type(opts[k]))
    end
  end
  local method = opts.method == nil and 'fit' or opts.method
  local T = require 'dpl.tensor'
  local rng = T.get_rng_state()
  local ok, res = pcall(function()
    local result = {}
    if trainer.auto_scale_batch_size and B.is_distributed(trainer) then
      misconf("`trainer.tune()` is currently not supported with `Trainer(strategy='%s')`.",
        tostring(trainer.strategy.strategy_name))
    end
    if trainer.auto_scale_batch_size then
      local kw = {}
      for k, v in pairs(opts.scale_batch_size_kwargs or {}) do kw[k] = v end
      options.check(kw, options.keys('mode', 'steps_per_trial', 'init_val', 'max_trials', 'batch_arg_name'),
        'Trainer.tune: scale_batch_size_kwargs')
      if type(trainer.auto_scale_batch_size) == 'string' and kw.mode == nil then kw.mode = trainer.auto_scale_batch_size end
      kw.datamodule, kw.method = opts.datamodule, method
      result.scale_batch_size = self:scale_batch_size(model, train, val, dataloaders, kw)
    end
    if trainer.auto_lr_find then
      local dm = opts.datamodule
      if type(train) == 'table' and class.is_instance(train, require('dpl.datamodule')) then dm, train = train, nil end
      if (train ~= nil or val ~= nil) and dm ~= nil then
        misconf('You cannot pass `train_dataloader` or `val_dataloaders` to `trainer.tune()` if datamodule is already passed.')
      end
      local kw = {}
      for k, v in pairs(opts.lr_find_kwargs or {}) do kw[k] = v end
      options.check(kw, options.keys('min_lr', 'max_lr', 'num_training', 'mode', 'early_stop_threshold', 'update_attr'),
        'Trainer.tune: lr_find_kwargs')
      if kw.update_attr == nil then kw.update_attr = true end
      if method ~= 'fit' then misconf("method='fit' is an invalid configuration to run lr finder.") end
      kw.datamodule = dm
      result.lr_find = self:lr_find(model, train, val, dataloaders, kw)
    end
    return result
  end)
  T.set_rng_state(rng)
  if not ok then error(res, 0) end
  return res
end

return M
