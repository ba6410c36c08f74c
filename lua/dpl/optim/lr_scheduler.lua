-- dpl.optim.lr_scheduler: learning-rate schedules with PyTorch's formulas.
-- sched:step() advances one epoch (or one batch, as you call it) and sets each
-- group's lr; sched:get_last_lr() returns the lrs set last; state_dict() and
-- load_state_dict() save and restore the schedule's position.
local class = require 'dpl.class'
local errors = require 'dpl.errors'
local options = require 'dpl.options'

local fmt = string.format

-- Errors are objects whose tostring reads "ClassName: message" (DESIGN.md).
local error = require('dpl.errors').raise -- string messages become ValueError objects
local cos, pi, floor = math.cos, math.pi, math.floor

local M = {}

local function misconf(msg, ...) errors.MisconfigurationException:raise(fmt(msg, ...), 4) end

local LRScheduler = class.Object:extend('LRScheduler')
M.LRScheduler = LRScheduler

function LRScheduler:__init(optimizer, last_epoch)
  if type(optimizer) ~= 'table' or type(optimizer.param_groups) ~= 'table' then
    misconf('%s: expected an optimizer as the first argument, got %s', self.__name, type(optimizer))
  end
  self.optimizer = optimizer
  last_epoch = last_epoch or -1
  for i, g in ipairs(optimizer.param_groups) do
    if last_epoch == -1 then
      g.initial_lr = g.initial_lr or g.lr
    elseif g.initial_lr == nil then
      misconf("%s: param 'initial_lr' is not specified in param_groups[%d] when resuming an optimizer", self.__name, i)
    end
  end
  self.base_lrs = {}
  for i, g in ipairs(optimizer.param_groups) do self.base_lrs[i] = g.initial_lr end
  self.last_epoch = last_epoch
  self:step()
end

--- lr of group i at self.last_epoch (closed form); subclasses define it.
function LRScheduler:lr_at(i, base) return base end

function LRScheduler:step()
  self.last_epoch = self.last_epoch + 1
  self._last_lr = {}
  for i, g in ipairs(self.optimizer.param_groups) do
    g.lr = self:lr_at(i, self.base_lrs[i], g)
    self._last_lr[i] = g.lr
  end
end

function LRScheduler:get_last_lr()
  local r = {}
  for i, v in ipairs(self._last_lr or {}) do r[i] = v end
  return r
end

-- the scheduler's state: its fields but the optimizer and the lambdas (functions), tables
-- copied one level deep (both ways, so a saved dict and the scheduler share nothing)
local skip = { optimizer = true, lr_lambda = true, lr_lambdas = true }
local function copy_state(src, dst)
  for k, v in pairs(src) do
    if not skip[k] and type(v) ~= 'function' then
      if type(v) == 'table' then
        local c = {}
        for a, b in pairs(v) do c[a] = b end
        v = c
      end
      dst[k] = v
    end
  end
  return dst
end
function LRScheduler:state_dict() return copy_state(self, {}) end
function LRScheduler:load_state_dict(sd) copy_state(sd, self) end

-- a schedule's options: nil or a table of its keys (an unknown key is an error)
local keys = options.keys
local KEYS = {
  StepLR = keys('step_size', 'gamma', 'last_epoch'),
  MultiStepLR = keys('milestones', 'gamma', 'last_epoch'),
  ExponentialLR = keys('gamma', 'last_epoch'),
  CosineAnnealingLR = keys('T_max', 'eta_min', 'last_epoch'),
  LambdaLR = keys('lr_lambda', 'last_epoch'),
  LinearLR = keys('start_factor', 'end_factor', 'total_iters', 'last_epoch'),
  OneCycleLR = keys('max_lr', 'total_steps', 'epochs', 'steps_per_epoch', 'pct_start', 'anneal_strategy',
    'div_factor', 'final_div_factor', 'three_phase', 'cycle_momentum', 'base_momentum', 'max_momentum', 'last_epoch'),
  ReduceLROnPlateau = keys('mode', 'factor', 'patience', 'threshold', 'threshold_mode', 'cooldown', 'min_lr', 'eps'),
}
local function opts_of(o, name)
  options.check(o, KEYS[name], name)
  return o or {}
end

---------------------------------------------------------------- the schedules
M.StepLR = LRScheduler:extend('StepLR')
--- StepLR(opt, {step_size=, gamma=0.1})
function M.StepLR:__init(opt, o)
  o = opts_of(o, 'StepLR')
  if type(o.step_size) ~= 'number' or o.step_size < 1 then misconf('StepLR: step_size must be a positive integer') end
  self.step_size, self.gamma = o.step_size, o.gamma or 0.1
  LRScheduler.__init(self, opt, o.last_epoch)
end
function M.StepLR:lr_at(i, base) return base * self.gamma ^ floor(self.last_epoch / self.step_size) end

M.MultiStepLR = LRScheduler:extend('MultiStepLR')
--- MultiStepLR(opt, {milestones={...}, gamma=0.1})
function M.MultiStepLR:__init(opt, o)
  o = opts_of(o, 'MultiStepLR')
  if type(o.milestones) ~= 'table' then misconf('MultiStepLR: milestones must be a list of epochs') end
  self.milestones, self.gamma = o.milestones, o.gamma or 0.1
  LRScheduler.__init(self, opt, o.last_epoch)
end
function M.MultiStepLR:lr_at(i, base)
  local k = 0
  for _, m in ipairs(self.milestones) do if m <= self.last_epoch then k = k + 1 end end
  return base * self.gamma ^ k
end

M.ExponentialLR = LRScheduler:extend('ExponentialLR')
--- ExponentialLR(opt, {gamma=})
function M.ExponentialLR:__init(opt, o)
  o = opts_of(o, 'ExponentialLR')
  if type(o.gamma) ~= 'number' then misconf('ExponentialLR: gamma is required') end
  self.gamma = o.gamma
  LRScheduler.__init(self, opt, o.last_epoch)
end
function M.ExponentialLR:lr_at(i, base) return base * self.gamma ^ self.last_epoch end

M.CosineAnnealingLR = LRScheduler:extend('CosineAnnealingLR')
--- CosineAnnealingLR(opt, {T_max=, eta_min=0})
function M.CosineAnnealingLR:__init(opt, o)
  o = opts_of(o, 'CosineAnnealingLR')
  if type(o.T_max) ~= 'number' or o.T_max <= 0 then misconf('CosineAnnealingLR: T_max must be a positive number') end
  self.T_max, self.eta_min = o.T_max, o.eta_min or 0
  LRScheduler.__init(self, opt, o.last_epoch)
end
function M.CosineAnnealingLR:lr_at(i, base)
  return self.eta_min + (base - self.eta_min) * (1 + cos(pi * self.last_epoch / self.T_max)) / 2
end

M.LambdaLR = LRScheduler:extend('LambdaLR')
--- LambdaLR(opt, {lr_lambda=function(epoch) ... end} or a list, one per group)
function M.LambdaLR:__init(opt, o)
  if type(o) == 'function' then o = { lr_lambda = o } end
  o = opts_of(o, 'LambdaLR')
  local f = o.lr_lambda
  if type(f) ~= 'function' and type(f) ~= 'table' then misconf('LambdaLR: lr_lambda must be a function') end
  self.lr_lambda = f
  LRScheduler.__init(self, opt, o.last_epoch)
end
function M.LambdaLR:lr_at(i, base)
  local f = self.lr_lambda
  if type(f) == 'table' then f = f[i] end
  return base * f(self.last_epoch)
end

M.LinearLR = LRScheduler:extend('LinearLR')
--- LinearLR(opt, {start_factor=1/3, end_factor=1, total_iters=5}): linear warmup (or decay)
function M.LinearLR:__init(opt, o)
  o = opts_of(o, 'LinearLR')
  self.start_factor, self.end_factor = o.start_factor or 1 / 3, o.end_factor or 1
  self.total_iters = o.total_iters or 5
  if self.start_factor <= 0 or self.start_factor > 1 then
    misconf('LinearLR: start_factor must be in (0, 1], got %s', tostring(self.start_factor))
  end
  LRScheduler.__init(self, opt, o.last_epoch)
end
function M.LinearLR:lr_at(i, base)
  local e = math.min(self.last_epoch, self.total_iters)
  return base * (self.start_factor + (self.end_factor - self.start_factor) * e / self.total_iters)
end

M.OneCycleLR = LRScheduler:extend('OneCycleLR')
--- OneCycleLR(opt, {max_lr=, total_steps= | epochs= and steps_per_epoch=, pct_start=0.3,
--- anneal_strategy='cos'|'linear', div_factor=25, final_div_factor=1e4, three_phase=false,
--- cycle_momentum=true, base_momentum=0.85, max_momentum=0.95})
function M.OneCycleLR:__init(opt, o)
  o = opts_of(o, 'OneCycleLR')
  if o.max_lr == nil then misconf('OneCycleLR: max_lr is required') end
  local total = o.total_steps or (o.epochs and o.steps_per_epoch and o.epochs * o.steps_per_epoch)
  if type(total) ~= 'number' or total <= 0 then
    misconf('OneCycleLR: give total_steps, or epochs and steps_per_epoch')
  end
  self.total_steps = total
  local pct = o.pct_start or 0.3
  self.anneal = o.anneal_strategy or 'cos'
  local div, fdiv = o.div_factor or 25, o.final_div_factor or 1e4
  if o.three_phase then
    self.phases = {
      { end_step = pct * total - 1, s = 'initial_lr', e = 'max_lr', sm = 'max_momentum', em = 'base_momentum' },
      { end_step = 2 * pct * total - 2, s = 'max_lr', e = 'initial_lr', sm = 'base_momentum', em = 'max_momentum' },
      { end_step = total - 1, s = 'initial_lr', e = 'min_lr', sm = 'max_momentum', em = 'max_momentum' },
    }
  else
    self.phases = {
      { end_step = pct * total - 1, s = 'initial_lr', e = 'max_lr', sm = 'max_momentum', em = 'base_momentum' },
      { end_step = total - 1, s = 'max_lr', e = 'min_lr', sm = 'base_momentum', em = 'max_momentum' },
    }
  end
  self.cycle_momentum = o.cycle_momentum ~= false
  for i, g in ipairs(opt.param_groups) do
    local mx = type(o.max_lr) == 'table' and o.max_lr[i] or o.max_lr
    g.initial_lr = mx / div
    g.max_lr = mx
    g.min_lr = g.initial_lr / fdiv
    if self.cycle_momentum then
      g.max_momentum = o.max_momentum or 0.95
      g.base_momentum = o.base_momentum or 0.85
      self.use_beta = g.betas ~= nil
      if g.betas then g.betas = { g.max_momentum, g.betas[2] } else g.momentum = g.max_momentum end
    end
  end
  LRScheduler.__init(self, opt, o.last_epoch)
end
local function anneal(kind, s, e, pct)
  if kind == 'linear' then return (e - s) * pct + s end
  return e + (s - e) / 2 * (cos(pi * pct) + 1)
end
function M.OneCycleLR:lr_at(i, base, g)
  local step = self.last_epoch
  if step > self.total_steps then
    error(fmt('OneCycleLR: tried to step %d times; the total number of steps is %d', step, self.total_steps), 4)
  end
  local start = 0
  local lr, mom
  for k, ph in ipairs(self.phases) do
    if step <= ph.end_step or k == #self.phases then
      local pct = (step - start) / (ph.end_step - start)
      lr = anneal(self.anneal, g[ph.s], g[ph.e], pct)
      if self.cycle_momentum then mom = anneal(self.anneal, g[ph.sm], g[ph.em], pct) end
      break
    end
    start = ph.end_step
  end
  if mom then
    if g.betas then g.betas = { mom, g.betas[2] } else g.momentum = mom end
  end
  return lr
end

---------------------------------------------------------------- ReduceLROnPlateau
M.ReduceLROnPlateau = class.Object:extend('ReduceLROnPlateau')
--- ReduceLROnPlateau(opt, {mode='min', factor=0.1, patience=10, threshold=1e-4,
--- threshold_mode='rel', cooldown=0, min_lr=0, eps=1e-8}); step(metric)
function M.ReduceLROnPlateau:__init(opt, o)
  o = opts_of(o, 'ReduceLROnPlateau')
  if type(opt) ~= 'table' or type(opt.param_groups) ~= 'table' then
    misconf('ReduceLROnPlateau: expected an optimizer as the first argument')
  end
  self.optimizer = opt
  self.mode, self.factor, self.patience = o.mode or 'min', o.factor or 0.1, o.patience or 10
  if self.factor >= 1 then misconf('ReduceLROnPlateau: factor should be < 1.0') end
  if self.mode ~= 'min' and self.mode ~= 'max' then misconf("ReduceLROnPlateau: mode must be 'min' or 'max'") end
  self.threshold, self.threshold_mode = o.threshold or 1e-4, o.threshold_mode or 'rel'
  self.cooldown, self.eps = o.cooldown or 0, o.eps or 1e-8
  self.min_lrs = {}
  for i = 1, #opt.param_groups do
    self.min_lrs[i] = type(o.min_lr) == 'table' and o.min_lr[i] or (o.min_lr or 0)
  end
  self.best = self.mode == 'min' and math.huge or -math.huge
  self.num_bad_epochs, self.cooldown_counter, self.last_epoch = 0, 0, 0
  self._last_lr = {}
  for i, g in ipairs(opt.param_groups) do self._last_lr[i] = g.lr end
end
function M.ReduceLROnPlateau:is_better(a)
  local rel = self.threshold_mode == 'rel'
  if self.mode == 'min' then
    return a < (rel and self.best * (1 - self.threshold) or self.best - self.threshold)
  end
  return a > (rel and self.best * (1 + self.threshold) or self.best + self.threshold)
end
function M.ReduceLROnPlateau:step(metric)
  if type(metric) ~= 'number' then
    if type(metric) == 'cdata' then metric = metric:item() else
      error(fmt('ReduceLROnPlateau: step expects the metric (a number), got %s', type(metric)), 2)
    end
  end
  self.last_epoch = self.last_epoch + 1
  if self:is_better(metric) then
    self.best, self.num_bad_epochs = metric, 0
  else
    self.num_bad_epochs = self.num_bad_epochs + 1
  end
  if self.cooldown_counter > 0 then
    self.cooldown_counter = self.cooldown_counter - 1
    self.num_bad_epochs = 0
  end
  if self.num_bad_epochs > self.patience then
    for i, g in ipairs(self.optimizer.param_groups) do
      local new = math.max(g.lr * self.factor, self.min_lrs[i])
      if g.lr - new > self.eps then g.lr = new end
    end
    self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
  end
  for i, g in ipairs(self.optimizer.param_groups) do self._last_lr[i] = g.lr end
end
M.ReduceLROnPlateau.get_last_lr = LRScheduler.get_last_lr
M.ReduceLROnPlateau.state_dict = LRScheduler.state_dict
M.ReduceLROnPlateau.load_state_dict = LRScheduler.load_state_dict

return M
