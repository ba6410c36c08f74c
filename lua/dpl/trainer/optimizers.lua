-- dpl.trainer.optimizers: what `configure_optimizers` may return, parsed the way
-- Lightning 1.9 does (_configure_optimizers / _configure_schedulers), and the
-- LightningOptimizer wrapper whose step() runs the closure, the
-- on_before_optimizer_step hooks and gradient clipping, then the optimizer's step.
--
-- Contract with dpl.optim: an optimizer is an object with step() and zero_grad()
-- (state_dict/load_state_dict for checkpoints, param_groups for lr monitoring);
-- a scheduler has step() and no zero_grad(). The Trainer runs the closure itself
-- and then calls optimizer:step() with no argument.
local errors = require 'dpl.errors'

local Misconfiguration = errors.MisconfigurationException
local M = {}

local function has_method(obj, name)
  if type(obj) ~= 'table' and type(obj) ~= 'userdata' and type(obj) ~= 'cdata' then return false end
  local ok, f = pcall(function() return obj[name] end)
  return ok and type(f) == 'function'
end

local function is_optimizer(x) return has_method(x, 'step') and has_method(x, 'zero_grad') end
local function is_scheduler(x) return has_method(x, 'step') and not has_method(x, 'zero_grad') end
M.is_optimizer, M.is_scheduler = is_optimizer, is_scheduler

local function is_plateau(s)
  local mt = getmetatable(s)
  return (type(s) == 'table' and s.reduce_on_plateau == true)
      or (type(mt) == 'table' and mt.__name == 'ReduceLROnPlateau')
end

local sched_keys = { scheduler = true, name = true, interval = true, frequency = true,
  reduce_on_plateau = true, monitor = true, strict = true, opt_idx = true }

--- One scheduler (or dict) -> a LRSchedulerConfig table.
local function scheduler_config(s, monitor)
  local cfg
  if type(s) == 'table' and getmetatable(s) == nil and not is_scheduler(s) then
    for k in pairs(s) do
      if not sched_keys[k] then
        require('dpl.log').warn('Found unsupported keys in the lr scheduler dict: %s', tostring(k))
      end
    end
    if s.scheduler == nil then
      Misconfiguration:raise('The lr scheduler dict must have the key "scheduler" with its item being an lr scheduler', 0)
    end
    local interval = s.interval or 'epoch'
    if interval ~= 'step' and interval ~= 'epoch' then
      Misconfiguration:raise(('The "interval" key in lr scheduler dict must be "step" or "epoch" but is "%s"')
        :format(tostring(interval)), 0)
    end
    local freq = s.frequency or 1
    if type(freq) ~= 'number' or freq < 1 or freq ~= math.floor(freq) then
      Misconfiguration:raise(('The "frequency" key in lr scheduler dict must be a positive integer, got %s')
        :format(tostring(freq)), 0)
    end
    cfg = { scheduler = s.scheduler, name = s.name, interval = interval, frequency = freq,
      monitor = s.monitor or monitor, strict = s.strict ~= false, opt_idx = s.opt_idx }
    cfg.reduce_on_plateau = s.reduce_on_plateau
    if cfg.reduce_on_plateau == nil then cfg.reduce_on_plateau = is_plateau(s.scheduler) end
  else
    if not is_scheduler(s) then
      Misconfiguration:raise(('configure_optimizers: %s is not an lr scheduler (an object with step())')
        :format(tostring(s)), 0)
    end
    cfg = { scheduler = s, interval = 'epoch', frequency = 1, monitor = monitor, strict = true,
      reduce_on_plateau = is_plateau(s) }
  end
  if cfg.reduce_on_plateau and cfg.monitor == nil then
    Misconfiguration:raise('The lr scheduler dict must include a monitor when a `ReduceLROnPlateau` scheduler is used.'
      .. ' For example: {optimizer = optimizer, lr_scheduler = {scheduler = scheduler, monitor = "your_loss"}}', 0)
  end
  return cfg
end

local function as_list(x)
  if type(x) == 'table' and getmetatable(x) == nil and x[1] ~= nil then return x end
  -- an empty list (Lightning's `return [opt_g, opt_d], []`): no schedulers
  if type(x) == 'table' and getmetatable(x) == nil and next(x) == nil then return x end
  return { x }
end

--- Parses what configure_optimizers returned. Returns optimizers (list),
--- lr_scheduler_configs (list), optimizer_frequencies (list, maybe empty).
function M.parse(out)
  local opts, scheds, freqs = {}, {}, {}
  if out == nil then
    require('dpl.log').warn('`LightningModule.configure_optimizers` returned `nil`, this fit will run with no optimizer')
    return { M.MockOptimizer() }, scheds, freqs
  end
  if is_optimizer(out) then
    opts[1] = out
  elseif type(out) == 'table' and out.optimizer ~= nil then
    -- {optimizer=, lr_scheduler=, frequency=, monitor=}
    opts[1] = out.optimizer
    if out.lr_scheduler ~= nil then scheds[1] = scheduler_config(out.lr_scheduler, out.monitor) end
    if out.frequency then freqs[1] = out.frequency end
  elseif type(out) == 'table' and out[1] ~= nil then
    if #out == 2 and type(out[1]) == 'table' and not is_optimizer(out[1]) and out[1].optimizer == nil
       and type(out[2]) == 'table' and not is_scheduler(out[2]) and (out[2][1] ~= nil or out[2].scheduler ~= nil or next(out[2]) == nil) then
      -- {{opt, ...}, {sched, ...}}
      for i, o in ipairs(out[1]) do opts[i] = o end
      for _, s in ipairs(as_list(out[2])) do scheds[#scheds + 1] = scheduler_config(s) end
    elseif type(out[1]) == 'table' and out[1].optimizer ~= nil then
      -- a list of dicts
      for i, d in ipairs(out) do
        if type(d) ~= 'table' or d.optimizer == nil then
          Misconfiguration:raise('configure_optimizers: every element of a list of dicts needs an "optimizer" key', 0)
        end
        opts[i] = d.optimizer
        if d.lr_scheduler ~= nil then
          local cfg = scheduler_config(d.lr_scheduler, d.monitor)
          cfg.opt_idx = i - 1
          scheds[#scheds + 1] = cfg
        end
        if d.frequency then freqs[i] = d.frequency end
      end
      if #freqs > 0 and #freqs ~= #opts then
        Misconfiguration:raise('A frequency must be given to each optimizer.', 0)
      end
    else
      for i, o in ipairs(out) do opts[i] = o end
    end
  else
    Misconfiguration:raise('Unknown configuration for model optimizers. Output from `model.configure_optimizers()`'
      .. ' should be one of: an optimizer; a list of optimizers; two lists (optimizers, schedulers);'
      .. ' a dict {optimizer=, lr_scheduler=}; a list of such dicts', 0)
  end
  for i, o in ipairs(opts) do
    if not is_optimizer(o) then
      Misconfiguration:raise(('configure_optimizers: element %d is not an optimizer (an object with step() and zero_grad()), got %s')
        :format(i, tostring(o)), 0)
    end
  end
  -- assign schedulers to optimizers (opt_idx)
  for _, cfg in ipairs(scheds) do
    if cfg.opt_idx == nil then
      local sopt = type(cfg.scheduler) == 'table' and rawget(cfg.scheduler, 'optimizer')
      cfg.opt_idx = 0
      for i, o in ipairs(opts) do
        if o == sopt then cfg.opt_idx = i - 1 end
      end
    end
  end
  return opts, scheds, freqs
end

---------------------------------------------------------------- MockOptimizer

local Mock = {}
Mock.__index = Mock
function Mock:step(closure) if closure then closure() end end
function Mock:zero_grad() end
function Mock:state_dict() return {} end
function Mock:load_state_dict() end
M.MockOptimizer = function() return setmetatable({ param_groups = {}, _mock = true }, Mock) end

---------------------------------------------------------------- LightningOptimizer

local LightningOptimizer = {}
LightningOptimizer.__name = 'LightningOptimizer'
-- a method of the wrapped optimizer, called with the optimizer as self (made apart from
-- __index, whose closure would keep every lookup from being compiled)
local function bind(self, k, v, opt)
  local bound = function(_, ...) return v(opt, ...) end
  rawset(self, k, bound)
  return bound
end
LightningOptimizer.__index = function(self, k)
  local m = LightningOptimizer[k]
  if m ~= nil then return m end
  local opt = rawget(self, 'optimizer')
  local v = opt[k]
  if type(v) == 'function' then return bind(self, k, v, opt) end
  return v
end
LightningOptimizer.__tostring = function(self) return 'LightningOptimizer(' .. tostring(self.optimizer) .. ')' end

local function do_nothing() end

function M.LightningOptimizer(optimizer, idx, trainer)
  return setmetatable({ optimizer = optimizer, _optimizer_idx = idx, _trainer = trainer }, LightningOptimizer)
end

--- step(closure): the strategy's optimizer_step (closure, on_before_optimizer_step
--- hooks, clipping, optimizer:step()); counts one optimizer step (global_step).
function LightningOptimizer:step(closure)
  local trainer = self._trainer
  trainer.strategy:optimizer_step(self.optimizer, self._optimizer_idx, closure or do_nothing, trainer.lightning_module)
  trainer:_on_optimizer_stepped()
end

function LightningOptimizer:zero_grad() self.optimizer:zero_grad() end
function LightningOptimizer:state_dict() return self.optimizer:state_dict() end
function LightningOptimizer:load_state_dict(s) return self.optimizer:load_state_dict(s) end

---------------------------------------------------------------- gradient clipping

--- Clips the gradients of an optimizer's parameters: the optimizer's own
--- clip_grad_norm_/clip_grad_value_ when it has them, else dpl.nn.utils.
function M.clip_gradients(optimizer, value, algorithm)
  if algorithm == 'norm' then
    if has_method(optimizer, 'clip_grad_norm_') then return optimizer:clip_grad_norm_(value) end
  elseif algorithm == 'value' then
    if has_method(optimizer, 'clip_grad_value_') then return optimizer:clip_grad_value_(value) end
  end
  local ok, utils = pcall(require, 'dpl.nn.utils')
  if ok and type(utils) == 'table' and optimizer.param_groups then
    local params = {}
    for _, g in ipairs(optimizer.param_groups) do
      for _, p in ipairs(g.params or {}) do params[#params + 1] = p end
    end
    -- (the total norm is not read back: on a GPU that would wait for the step's work)
    if algorithm == 'norm' then return utils._clip_grad_norm(params, value, 2, false) end
    return utils.clip_grad_value_(params, value)
  end
  errors.NotImplementedError:raise('gradient clipping needs dpl.nn.utils (clip_grad_norm_/clip_grad_value_), which is not available yet', 0)
end

return M
