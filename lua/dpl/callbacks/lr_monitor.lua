-- dpl.callbacks.lr_monitor: LearningRateMonitor, as Lightning 1.9.5's
-- lr_monitor.py. Logs the learning rate each optimizer will use (lr-<Class>,
-- or the scheduler config's `name`; -N for repeated classes; /pgN or
-- /<group name> per param group; -momentum with log_momentum) straight to the
-- loggers (no `epoch` key, not in trainer.logged_metrics), at step
-- batches_that_stepped:
--   logging_interval="step":  at each train batch start (a logging step), every rate;
--   logging_interval="epoch": at each train epoch start, every rate;
--   nil: at batch start the step-interval schedulers' rates and those of the
--        optimizers without a scheduler, at epoch start the epoch-interval
--        schedulers' and again the optimizers without a scheduler.
-- Logging at batch start means a step's row holds the rate that step trains with.
local errors = require 'dpl.errors'
local log = require 'dpl.log'
local Callback = require 'dpl.callbacks.callback'

local LearningRateMonitor = Callback:extend('LearningRateMonitor')

function LearningRateMonitor:__init(o)
  Callback.__init(self)
  o = o or {}
  for k in pairs(o) do
    if k ~= 'logging_interval' and k ~= 'log_momentum' then
      errors.MisconfigurationException:raise(('LearningRateMonitor got an unknown argument: %s'):format(tostring(k)), 2)
    end
  end
  local li = o.logging_interval
  if li ~= nil and li ~= 'step' and li ~= 'epoch' then
    errors.MisconfigurationException:raise('logging_interval should be `step` or `epoch` or `None`.', 2)
  end
  self.logging_interval = li
  self.log_momentum = o.log_momentum == true
  self.lrs = {}
  self.last_momentum_values = {}
end

-- the optimizer behind a wrapper (Lightning unwraps DeepSpeed's `.optimizer`)
local function unwrap(opt)
  local inner = type(opt) == 'table' and rawget(opt, 'optimizer')
  if type(inner) == 'table' and inner.param_groups ~= nil then return inner end
  return opt
end

local function class_of(opt) return getmetatable(opt) or opt end

local function class_name(opt)
  local mt = getmetatable(opt)
  return mt and mt.__name or 'Optimizer'
end

local function contains(list, x)
  for i = 1, #list do if rawequal(list[i], x) then return true end end
  return false
end

local function has_default(opt, key)
  local d = type(opt) == 'table' and opt.defaults
  if type(d) == 'table' then return d[key] ~= nil end
  local pg = opt.param_groups and opt.param_groups[1]
  return pg ~= nil and pg[key] ~= nil
end

-- Lightning's _add_suffix (use_names=true)
local function add_suffix(name, groups, i)
  local pg_name = groups[i].name
  if #groups > 1 then return name .. '/' .. (pg_name ~= nil and tostring(pg_name) or ('pg' .. i)) end
  if pg_name ~= nil then return name .. '/' .. tostring(pg_name) end
  return name
end

-- Lightning's _check_duplicates_and_update_name: the names of an optimizer's param groups
local function names_for(opt, name, seen_opts, seen_types, cfg)
  seen_opts[#seen_opts + 1] = opt
  local cls = class_of(opt)
  if cfg == nil or cfg.name == nil then seen_types[cls] = (seen_types[cls] or 0) + 1 end
  local groups = opt.param_groups or {}
  local count, dups = {}, {}
  for i, pg in ipairs(groups) do
    local n = pg.name ~= nil and tostring(pg.name) or ('pg' .. i)
    count[n] = (count[n] or 0) + 1
    if count[n] == 2 then dups[#dups + 1] = "'" .. n .. "'" end
  end
  if #dups > 0 then
    table.sort(dups)
    errors.MisconfigurationException:raise(('A single `Optimizer` cannot have multiple parameter groups with identical'
      .. ' `name` values. %s has duplicated parameter group names {%s}'):format(name, table.concat(dups, ', ')), 0)
  end
  local c = seen_types[cls]
  if c ~= nil and c > 1 then name = name .. '-' .. (c - 1) end
  local out = {}
  for i = 1, #groups do out[i] = add_suffix(name, groups, i) end
  return out
end

--- Names for the schedulers' optimizers: list of name lists (one per config), the
--- optimizers seen, the per-class counts.
function LearningRateMonitor:_find_names_from_schedulers(configs)
  local names, seen_opts, seen_types = {}, {}, {}
  for i, cfg in ipairs(configs or {}) do
    local opt = unwrap(cfg.scheduler.optimizer)
    if opt == nil then
      errors.MisconfigurationException:raise(('LearningRateMonitor: lr scheduler %d has no `optimizer` field'):format(i), 0)
    end
    local name = cfg.name ~= nil and tostring(cfg.name) or ('lr-' .. class_name(opt))
    names[i] = names_for(opt, name, seen_opts, seen_types, cfg)
  end
  return names, seen_opts, seen_types
end

--- Names for the optimizers without a scheduler: name lists and those optimizers.
function LearningRateMonitor:_find_names_from_optimizers(optimizers, seen_opts, seen_types)
  local names, without = {}, {}
  for _, opt in ipairs(optimizers or {}) do
    opt = unwrap(opt)
    if not contains(seen_opts, opt) then
      names[#names + 1] = names_for(opt, 'lr-' .. class_name(opt), seen_opts, seen_types, nil)
      without[#without + 1] = opt
    end
  end
  return names, without
end

function LearningRateMonitor:on_train_start(trainer)
  if #trainer.loggers == 0 then
    errors.MisconfigurationException:raise('Cannot use `LearningRateMonitor` callback with `Trainer` that has no logger.', 0)
  end
  local configs = trainer.lr_scheduler_configs or {}
  if self.log_momentum then
    local function missing(key)
      if #configs > 0 then
        for _, cfg in ipairs(configs) do
          if not has_default(unwrap(cfg.scheduler.optimizer), key) then return true end
        end
        return false
      end
      for _, opt in ipairs(trainer.optimizers or {}) do
        if not has_default(unwrap(opt), key) then return true end
      end
      return false
    end
    if missing('momentum') and missing('betas') and trainer.is_global_zero then
      log.warn('You have set log_momentum=True, but some optimizers do not have momentum.'
        .. ' This will log a value 0 for the momentum.')
    end
  end
  local names, seen_opts, seen_types = self:_find_names_from_schedulers(configs)
  local opt_names = self:_find_names_from_optimizers(trainer.optimizers, seen_opts, seen_types)
  self.lrs, self.last_momentum_values = {}, {}
  for _, list in ipairs({ names, opt_names }) do
    for _, group_names in ipairs(list) do
      for _, n in ipairs(group_names) do
        self.lrs[n] = {}
      end
    end
  end
end

-- Lightning's _remap_keys: a param group added since on_train_start moves pg1's history
function LearningRateMonitor:_remap_keys(names)
  for _, group_names in ipairs(names) do
    for _, n in ipairs(group_names) do
      local old = n:gsub('/pg1', '', 1)
      if n:find('/pg1', 1, true) and self.lrs[old] ~= nil then
        self.lrs[n], self.lrs[old] = self.lrs[old], nil
      elseif self.lrs[n] == nil then
        self.lrs[n] = {}
      end
    end
  end
end

function LearningRateMonitor:_get_lr_momentum_stat(opt, names, out)
  local groups = opt.param_groups or {}
  local use_betas = has_default(opt, 'betas')
  for i, pg in ipairs(groups) do
    local name = names[i]
    if name == nil then break end
    local lr = pg.lr
    local list = self.lrs[name]
    if list == nil then list = {}; self.lrs[name] = list end
    list[#list + 1] = lr
    out[name] = lr
    out._order[#out._order + 1] = name
    if self.log_momentum then
      local m
      if use_betas then m = pg.betas and pg.betas[1] or 0 else m = pg.momentum or 0 end
      self.last_momentum_values[name .. '-momentum'] = m
      out[name .. '-momentum'] = m
      out._order[#out._order + 1] = name .. '-momentum'
    end
  end
end

--- {name = lr} for the configs of an interval ("step", "epoch" or "any") and the
--- optimizers without a scheduler.
--- (`out._order` lists the names in the order Lightning's dict has them: the schedulers' optimizers,
--- then those without a scheduler; the loggers write them in that order)
function LearningRateMonitor:_extract_stats(trainer, interval)
  local out = { _order = {} }
  local configs = trainer.lr_scheduler_configs or {}
  local names, seen_opts, seen_types = self:_find_names_from_schedulers(configs)
  self:_remap_keys(names)
  for i, cfg in ipairs(configs) do
    if interval == 'any' or cfg.interval == interval then
      self:_get_lr_momentum_stat(unwrap(cfg.scheduler.optimizer), names[i], out)
    end
  end
  local opt_names, without = self:_find_names_from_optimizers(trainer.optimizers, seen_opts, seen_types)
  self:_remap_keys(opt_names)
  for i, opt in ipairs(without) do self:_get_lr_momentum_stat(opt, opt_names[i], out) end
  local order = out._order
  out._order = nil
  return out, order
end

-- logger.log_metrics straight (rank 0: Lightning's loggers are rank_zero_only)
local function send(trainer, stats, order)
  if next(stats) == nil or not trainer.is_global_zero then return end
  local step = trainer.fit_loop.batches_that_stepped
  for _, lg in ipairs(trainer.loggers) do lg:log_metrics(stats, step, order) end
end

function LearningRateMonitor:on_train_batch_start(trainer)
  -- the logger connector's should_update_logs (+1: checked before the step runs)
  if (trainer.fit_loop.batches_that_stepped + 1) % trainer.log_every_n_steps ~= 0 and not trainer.should_stop then
    return
  end
  if self.logging_interval == 'epoch' then return end
  send(trainer, self:_extract_stats(trainer, self.logging_interval == nil and 'step' or 'any'))
end

function LearningRateMonitor:on_train_epoch_start(trainer)
  if self.logging_interval == 'step' then return end
  send(trainer, self:_extract_stats(trainer, self.logging_interval == nil and 'epoch' or 'any'))
end

Callback._mark_lazy_metrics_ok(LearningRateMonitor)
return LearningRateMonitor
