-- dpl.optim.lr_scheduler: learning-rate schedules with PyTorch 1.13's formulas.
-- sched:step() advances one epoch (or one batch, as you call it) and sets each
-- group's lr; sched:get_last_lr() returns the lrs set last; state_dict() and
-- load_state_dict() save and restore the schedule's position.
--
-- As PyTorch's, the schedules are chainable: step() computes the new lr from the group's
-- current lr (get_lr, the "chainable form": StepLR multiplies it by gamma at each step_size-th
-- epoch, ExponentialLR by gamma every epoch, ...), so several schedulers on one optimizer
-- compose, a hand-written param_groups[i].lr is carried on, and ReduceLROnPlateau's cuts are
-- kept. step(epoch) sets the epoch and uses the closed form from base_lrs where PyTorch has one
-- (_get_closed_form_lr). LambdaLR, OneCycleLR, CyclicLR and CosineAnnealingWarmRestarts
-- compute from base values (as PyTorch's). A group added to the optimizer after the scheduler
-- was made is scaled by the chainable forms and left alone by the closed ones (PyTorch's zip).
local class = require 'dpl.class'
local errors = require 'dpl.errors'
local options = require 'dpl.options'

local fmt = string.format

-- Errors are objects whose tostring reads "ClassName: message" (DESIGN.md).
local error = require('dpl.errors').raise -- string messages become ValueError objects
local cos, pi, floor, huge = math.cos, math.pi, math.floor, math.huge

local M = {}

local function misconf(msg, ...) errors.MisconfigurationException:raise(fmt(msg, ...), 4) end

local function show(v)
  if type(v) == 'string' then return fmt("'%s'", v) end
  return tostring(v)
end

-- option checks: a number (in a range), an integer, a callable
local function is_num(v) return type(v) == 'number' and v == v end
local function check_num(cls, name, v, lo, hi, what)
  if not is_num(v) or (lo and v < lo) or (hi and v > hi) then
    misconf('%s: %s must be %s, got %s', cls, name, what or 'a number', show(v))
  end
  return v
end
local function check_int(cls, name, v, lo, what)
  if not is_num(v) or v ~= floor(v) or (lo and v < lo) then
    misconf('%s: %s must be %s, got %s', cls, name, what or 'an integer', show(v))
  end
  return v
end
local function is_callable(f)
  if type(f) == 'function' then return true end
  local mt = getmetatable(f)
  return type(mt) == 'table' and mt.__call ~= nil
end

-- a number or a list of numbers, one per group (PyTorch's _format_param)
local function per_group(cls, name, v, opt, lo)
  local n = #opt.param_groups
  local r = {}
  if type(v) == 'table' and not is_callable(v) then
    if #v ~= n then misconf('%s: expected %d values for %s, got %d', cls, n, name, #v) end
    for i = 1, n do r[i] = check_num(cls, fmt('%s[%d]', name, i), v[i], lo) end
  else
    check_num(cls, name, v, lo, nil, 'a number or a list of numbers, one per param group')
    for i = 1, n do r[i] = v end
  end
  return r
end

local function check_optimizer(cls, optimizer)
  if type(optimizer) ~= 'table' or type(optimizer.param_groups) ~= 'table' then
    misconf('%s: expected an optimizer as the first argument, got %s', cls, type(optimizer))
  end
end

local function group_lrs(opt)
  local r = {}
  for i, g in ipairs(opt.param_groups) do r[i] = g.lr end
  return r
end

---------------------------------------------------------------- the base class
local LRScheduler = class.Object:extend('LRScheduler')
M.LRScheduler = LRScheduler

--- LRScheduler.__init(self, optimizer [, last_epoch=-1]): records initial_lr in the groups
--- (last_epoch = -1) or expects it there (resuming), base_lrs, and takes the initial step.
function LRScheduler:__init(optimizer, last_epoch)
  check_optimizer(self.__name, optimizer)
  self.optimizer = optimizer
  last_epoch = last_epoch == nil and -1 or check_int(self.__name, 'last_epoch', last_epoch, -1, 'an integer >= -1')
  for i, g in ipairs(optimizer.param_groups) do
    if last_epoch == -1 then
      if g.initial_lr == nil then g.initial_lr = g.lr end
    elseif g.initial_lr == nil then
      misconf("%s: param 'initial_lr' is not specified in param_groups[%d] when resuming an optimizer", self.__name, i)
    end
  end
  self.base_lrs = {}
  for i, g in ipairs(optimizer.param_groups) do self.base_lrs[i] = g.initial_lr end
  self.last_epoch = last_epoch
  self:_initial_step()
end

function LRScheduler:_initial_step()
  self._step_count = 0
  self:step()
end

--- get_lr(): the lrs of the groups at self.last_epoch (the chainable form); a subclass
--- defines it. (A subclass that defines lr_at(i, base_lr, group), a closed form, gets it here.)
function LRScheduler:get_lr()
  if self.lr_at == nil then
    errors.NotImplementedError:raise(fmt('%s: a scheduler must define get_lr()', self.__name), 2)
  end
  local r, groups = {}, self.optimizer.param_groups
  for i, base in ipairs(self.base_lrs) do
    if groups[i] == nil then break end
    r[i] = self:lr_at(i, base, groups[i])
  end
  return r
end

-- the closed forms' and the per-base-lr forms' loop: f(base_lr, group, i) over the groups
-- that have a base lr (PyTorch's zip(self.base_lrs, param_groups))
local function over_bases(self, f)
  local r, groups = {}, self.optimizer.param_groups
  for i, base in ipairs(self.base_lrs) do
    if groups[i] == nil then break end
    r[i] = f(base, groups[i], i)
  end
  return r
end
-- the chainable forms' loop: f(group lr) over every group
local function over_groups(self, f)
  local r = {}
  for i, g in ipairs(self.optimizer.param_groups) do
    if not is_num(g.lr) then
      error(fmt('%s: param_groups[%d].lr must be a number, got %s', self.__name, i, show(g.lr)))
    end
    r[i] = f(g.lr, i, g)
  end
  return r
end

--- step([epoch]): last_epoch + 1 and the chainable form; step(epoch) sets last_epoch = epoch
--- and uses the closed form where the schedule has one (PyTorch's deprecated form).
function LRScheduler:step(epoch)
  self._step_count = (self._step_count or 0) + 1
  local values
  if epoch == nil then
    self.last_epoch = self.last_epoch + 1
    values = self:get_lr()
  else
    check_num(self.__name, 'step: epoch', epoch)
    self.last_epoch = epoch
    values = self._get_closed_form_lr and self:_get_closed_form_lr() or self:get_lr()
  end
  local groups = self.optimizer.param_groups
  for i = 1, #groups do
    local lr = values[i]
    if lr == nil then break end -- zip(param_groups, values)
    groups[i].lr = lr
  end
  self._last_lr = group_lrs(self.optimizer)
end

function LRScheduler:get_last_lr()
  local r = {}
  for i, v in ipairs(self._last_lr or {}) do r[i] = v end
  return r
end

-- the scheduler's state: its fields but the optimizer, the lambdas (functions) and the
-- wrapped schedulers, tables copied one level deep (both ways, so a saved dict and the
-- scheduler share nothing)
local skip = { optimizer = true, lr_lambda = true, lr_lambdas = true, _schedulers = true }
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
local function check_sd(self, sd)
  if type(sd) ~= 'table' then
    error(fmt('%s: load_state_dict expects a table (a state_dict()), got %s', self.__name, type(sd)))
  end
end
function LRScheduler:state_dict() return copy_state(self, {}) end
function LRScheduler:load_state_dict(sd)
  check_sd(self, sd)
  copy_state(sd, self)
end

-- a schedule's options: nil or a table of its keys (an unknown key is an error)
local keys = options.keys
local KEYS = {
  StepLR = keys('step_size', 'gamma', 'last_epoch'),
  MultiStepLR = keys('milestones', 'gamma', 'last_epoch'),
  ConstantLR = keys('factor', 'total_iters', 'last_epoch'),
  ExponentialLR = keys('gamma', 'last_epoch'),
  CosineAnnealingLR = keys('T_max', 'eta_min', 'last_epoch'),
  CosineAnnealingWarmRestarts = keys('T_0', 'T_mult', 'eta_min', 'last_epoch'),
  LambdaLR = keys('lr_lambda', 'last_epoch'),
  MultiplicativeLR = keys('lr_lambda', 'last_epoch'),
  LinearLR = keys('start_factor', 'end_factor', 'total_iters', 'last_epoch'),
  PolynomialLR = keys('total_iters', 'power', 'last_epoch'),
  SequentialLR = keys('schedulers', 'milestones', 'last_epoch'),
  OneCycleLR = keys('max_lr', 'total_steps', 'epochs', 'steps_per_epoch', 'pct_start', 'anneal_strategy',
    'div_factor', 'final_div_factor', 'three_phase', 'cycle_momentum', 'base_momentum', 'max_momentum', 'last_epoch'),
  CyclicLR = keys('base_lr', 'max_lr', 'step_size_up', 'step_size_down', 'mode', 'gamma', 'scale_fn', 'scale_mode',
    'cycle_momentum', 'base_momentum', 'max_momentum', 'last_epoch'),
  ReduceLROnPlateau = keys('mode', 'factor', 'patience', 'threshold', 'threshold_mode', 'cooldown', 'min_lr', 'eps'),
}
-- PyTorch's parameter order after the optimizer: the positional forms (StepLR(opt, 30, 0.1))
local POS = {
  StepLR = { 'step_size', 'gamma', 'last_epoch' },
  MultiStepLR = { 'milestones', 'gamma', 'last_epoch' },
  ConstantLR = { 'factor', 'total_iters', 'last_epoch' },
  LinearLR = { 'start_factor', 'end_factor', 'total_iters', 'last_epoch' },
  ExponentialLR = { 'gamma', 'last_epoch' },
  PolynomialLR = { 'total_iters', 'power', 'last_epoch' },
  CosineAnnealingLR = { 'T_max', 'eta_min', 'last_epoch' },
  CosineAnnealingWarmRestarts = { 'T_0', 'T_mult', 'eta_min', 'last_epoch' },
  LambdaLR = { 'lr_lambda', 'last_epoch' },
  MultiplicativeLR = { 'lr_lambda', 'last_epoch' },
  SequentialLR = { 'schedulers', 'milestones', 'last_epoch' },
  OneCycleLR = { 'max_lr', 'total_steps', 'epochs', 'steps_per_epoch', 'pct_start', 'anneal_strategy',
    'cycle_momentum', 'base_momentum', 'max_momentum', 'div_factor', 'final_div_factor', 'three_phase', 'last_epoch' },
  CyclicLR = { 'base_lr', 'max_lr', 'step_size_up', 'step_size_down', 'mode', 'gamma', 'scale_fn', 'scale_mode',
    'cycle_momentum', 'base_momentum', 'max_momentum', 'last_epoch' },
  ReduceLROnPlateau = { 'mode', 'factor', 'patience', 'threshold', 'threshold_mode', 'cooldown', 'min_lr', 'eps' },
}
-- the options of schedule name: one table, or PyTorch's positional values (then a table)
local function opts_of(name, ...)
  local o = options.positional(name, POS[name], ...)
  options.check(o, KEYS[name], name)
  return o or {}
end

---------------------------------------------------------------- StepLR, MultiStepLR
M.StepLR = LRScheduler:extend('StepLR')
--- StepLR(opt, {step_size=, gamma=0.1})
function M.StepLR:__init(opt, ...)
  local o = opts_of('StepLR', ...)
  self.step_size = check_int('StepLR', 'step_size', o.step_size, 1, 'a positive integer')
  self.gamma = check_num('StepLR', 'gamma', o.gamma == nil and 0.1 or o.gamma)
  LRScheduler.__init(self, opt, o.last_epoch)
end
function M.StepLR:get_lr()
  local e, gamma = self.last_epoch, self.gamma
  if e == 0 or e % self.step_size ~= 0 then return over_groups(self, function(lr) return lr end) end
  return over_groups(self, function(lr) return lr * gamma end)
end
function M.StepLR:_get_closed_form_lr()
  local f = self.gamma ^ floor(self.last_epoch / self.step_size)
  return over_bases(self, function(base) return base * f end)
end

M.MultiStepLR = LRScheduler:extend('MultiStepLR')
--- MultiStepLR(opt, {milestones={...}, gamma=0.1}): a milestone listed twice decays twice
function M.MultiStepLR:__init(opt, ...)
  local o = opts_of('MultiStepLR', ...)
  local ms = o.milestones
  if type(ms) ~= 'table' then misconf('MultiStepLR: milestones must be a list of epochs, got %s', show(ms)) end
  local list = {}
  for i, m in ipairs(ms) do list[i] = check_int('MultiStepLR', fmt('milestones[%d]', i), m) end
  table.sort(list)
  self.milestones = list
  self.gamma = check_num('MultiStepLR', 'gamma', o.gamma == nil and 0.1 or o.gamma)
  LRScheduler.__init(self, opt, o.last_epoch)
end
function M.MultiStepLR:get_lr()
  local k, e = 0, self.last_epoch
  for _, m in ipairs(self.milestones) do if m == e then k = k + 1 end end
  if k == 0 then return over_groups(self, function(lr) return lr end) end
  local f = self.gamma ^ k
  return over_groups(self, function(lr) return lr * f end)
end
function M.MultiStepLR:_get_closed_form_lr()
  local k = 0
  for _, m in ipairs(self.milestones) do if m <= self.last_epoch then k = k + 1 end end
  local f = self.gamma ^ k
  return over_bases(self, function(base) return base * f end)
end

---------------------------------------------------------------- ConstantLR, LinearLR
M.ConstantLR = LRScheduler:extend('ConstantLR')
--- ConstantLR(opt, {factor=1/3, total_iters=5}): lr * factor until epoch total_iters
function M.ConstantLR:__init(opt, ...)
  local o = opts_of('ConstantLR', ...)
  -- PyTorch accepts factor = 0 and then divides by it at total_iters
  self.factor = check_num('ConstantLR', 'factor', o.factor == nil and 1 / 3 or o.factor, nil, nil, 'in (0, 1]')
  if self.factor <= 0 or self.factor > 1 then misconf('ConstantLR: factor must be in (0, 1], got %s', show(self.factor)) end
  self.total_iters = check_int('ConstantLR', 'total_iters', o.total_iters == nil and 5 or o.total_iters, 0,
    'a non-negative integer')
  LRScheduler.__init(self, opt, o.last_epoch)
end
function M.ConstantLR:get_lr()
  local e, f = self.last_epoch, self.factor
  if e == 0 then return over_groups(self, function(lr) return lr * f end) end
  if e ~= self.total_iters then return over_groups(self, function(lr) return lr end) end
  return over_groups(self, function(lr) return lr * (1 / f) end)
end
function M.ConstantLR:_get_closed_form_lr()
  local f = self.factor + (self.last_epoch >= self.total_iters and 1 or 0) * (1 - self.factor)
  return over_bases(self, function(base) return base * f end)
end

M.LinearLR = LRScheduler:extend('LinearLR')
--- LinearLR(opt, {start_factor=1/3, end_factor=1, total_iters=5}): linear warmup (or decay)
function M.LinearLR:__init(opt, ...)
  local o = opts_of('LinearLR', ...)
  -- start_factor = 0 (accepted by PyTorch) divides by zero at the first step
  self.start_factor = check_num('LinearLR', 'start_factor', o.start_factor == nil and 1 / 3 or o.start_factor)
  if self.start_factor <= 0 or self.start_factor > 1 then
    misconf('LinearLR: start_factor must be in (0, 1], got %s', show(self.start_factor))
  end
  self.end_factor = check_num('LinearLR', 'end_factor', o.end_factor == nil and 1 or o.end_factor, 0, 1, 'in [0, 1]')
  self.total_iters = check_int('LinearLR', 'total_iters', o.total_iters == nil and 5 or o.total_iters, 0,
    'a non-negative integer')
  LRScheduler.__init(self, opt, o.last_epoch)
end
function M.LinearLR:get_lr()
  local e, s, d, n = self.last_epoch, self.start_factor, self.end_factor - self.start_factor, self.total_iters
  if e == 0 then return over_groups(self, function(lr) return lr * s end) end
  if e > n then return over_groups(self, function(lr) return lr end) end
  local f = 1 + d / (n * s + (e - 1) * d)
  return over_groups(self, function(lr) return lr * f end)
end
function M.LinearLR:_get_closed_form_lr()
  local n = self.total_iters
  -- total_iters = 0: start_factor throughout, as the chainable form (PyTorch divides by zero)
  local f = n == 0 and self.start_factor
    or self.start_factor + (self.end_factor - self.start_factor) * math.min(n, self.last_epoch) / n
  return over_bases(self, function(base) return base * f end)
end

---------------------------------------------------------------- ExponentialLR, PolynomialLR
M.ExponentialLR = LRScheduler:extend('ExponentialLR')
--- ExponentialLR(opt, {gamma=})
function M.ExponentialLR:__init(opt, ...)
  local o = opts_of('ExponentialLR', ...)
  if o.gamma == nil then misconf('ExponentialLR: gamma is required') end
  self.gamma = check_num('ExponentialLR', 'gamma', o.gamma)
  LRScheduler.__init(self, opt, o.last_epoch)
end
function M.ExponentialLR:get_lr()
  local gamma = self.gamma
  if self.last_epoch == 0 then return over_groups(self, function(lr) return lr end) end
  return over_groups(self, function(lr) return lr * gamma end)
end
function M.ExponentialLR:_get_closed_form_lr()
  local f = self.gamma ^ self.last_epoch
  return over_bases(self, function(base) return base * f end)
end

M.PolynomialLR = LRScheduler:extend('PolynomialLR')
--- PolynomialLR(opt, {total_iters=5, power=1}): lr * (1 - t/total_iters)^power
function M.PolynomialLR:__init(opt, ...)
  local o = opts_of('PolynomialLR', ...)
  self.total_iters = check_int('PolynomialLR', 'total_iters', o.total_iters == nil and 5 or o.total_iters, 0,
    'a non-negative integer')
  self.power = check_num('PolynomialLR', 'power', o.power == nil and 1 or o.power)
  LRScheduler.__init(self, opt, o.last_epoch)
end
function M.PolynomialLR:get_lr()
  local e, n = self.last_epoch, self.total_iters
  if e == 0 or e > n then return over_groups(self, function(lr) return lr end) end
  local f = ((1 - e / n) / (1 - (e - 1) / n)) ^ self.power
  return over_groups(self, function(lr) return lr * f end)
end
function M.PolynomialLR:_get_closed_form_lr()
  local n = self.total_iters
  local f = n == 0 and 1 or (1 - math.min(n, self.last_epoch) / n) ^ self.power
  return over_bases(self, function(base) return base * f end)
end

---------------------------------------------------------------- CosineAnnealingLR
M.CosineAnnealingLR = LRScheduler:extend('CosineAnnealingLR')
--- CosineAnnealingLR(opt, {T_max=, eta_min=0}): PyTorch's recursive form (it follows an lr
--- changed outside the scheduler)
function M.CosineAnnealingLR:__init(opt, ...)
  local o = opts_of('CosineAnnealingLR', ...)
  if not is_num(o.T_max) or o.T_max <= 0 then misconf('CosineAnnealingLR: T_max must be a positive number, got %s', show(o.T_max)) end
  self.T_max = o.T_max
  self.eta_min = check_num('CosineAnnealingLR', 'eta_min', o.eta_min == nil and 0 or o.eta_min)
  LRScheduler.__init(self, opt, o.last_epoch)
end
function M.CosineAnnealingLR:get_lr()
  local e, T, eta = self.last_epoch, self.T_max, self.eta_min
  if e == 0 then return over_groups(self, function(lr) return lr end) end
  if self._step_count == 1 and e > 0 then
    return over_bases(self, function(base) return eta + (base - eta) * (1 + cos(e * pi / T)) / 2 end)
  end
  if (e - 1 - T) % (2 * T) == 0 then
    return over_bases(self, function(base, g) return g.lr + (base - eta) * (1 - cos(pi / T)) / 2 end)
  end
  local f = (1 + cos(pi * e / T)) / (1 + cos(pi * (e - 1) / T))
  return over_groups(self, function(lr) return f * (lr - eta) + eta end)
end
function M.CosineAnnealingLR:_get_closed_form_lr()
  local e, T, eta = self.last_epoch, self.T_max, self.eta_min
  return over_bases(self, function(base) return eta + (base - eta) * (1 + cos(pi * e / T)) / 2 end)
end

---------------------------------------------------------------- CosineAnnealingWarmRestarts
M.CosineAnnealingWarmRestarts = LRScheduler:extend('CosineAnnealingWarmRestarts')
--- CosineAnnealingWarmRestarts(opt, {T_0=, T_mult=1, eta_min=0}): cosine from the base lr to
--- eta_min over T_i epochs, then a restart; T_i = T_0 * T_mult^k. step([epoch]).
function M.CosineAnnealingWarmRestarts:__init(opt, ...)
  local o = opts_of('CosineAnnealingWarmRestarts', ...)
  local C = 'CosineAnnealingWarmRestarts'
  self.T_0 = check_int(C, 'T_0', o.T_0, 1, 'a positive integer')
  self.T_i = self.T_0
  self.T_mult = check_int(C, 'T_mult', o.T_mult == nil and 1 or o.T_mult, 1, 'an integer >= 1')
  self.eta_min = check_num(C, 'eta_min', o.eta_min == nil and 0 or o.eta_min)
  self.T_cur = o.last_epoch == nil and -1 or o.last_epoch
  LRScheduler.__init(self, opt, o.last_epoch)
end
function M.CosineAnnealingWarmRestarts:get_lr()
  local eta, f = self.eta_min, (1 + cos(pi * self.T_cur / self.T_i)) / 2
  return over_bases(self, function(base) return eta + (base - eta) * f end)
end
function M.CosineAnnealingWarmRestarts:step(epoch)
  self._step_count = (self._step_count or 0) + 1
  if epoch == nil and self.last_epoch < 0 then epoch = 0 end
  if epoch == nil then
    epoch = self.last_epoch + 1
    self.T_cur = self.T_cur + 1
    if self.T_cur >= self.T_i then
      self.T_cur = self.T_cur - self.T_i
      self.T_i = self.T_i * self.T_mult
    end
  else
    if not is_num(epoch) or epoch < 0 then
      error(fmt('CosineAnnealingWarmRestarts: expected a non-negative epoch, got %s', show(epoch)))
    end
    if epoch >= self.T_0 then
      if self.T_mult == 1 then
        self.T_cur = epoch % self.T_0
      else
        local n = floor(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1) / math.log(self.T_mult))
        self.T_cur = epoch - self.T_0 * (self.T_mult ^ n - 1) / (self.T_mult - 1)
        self.T_i = self.T_0 * self.T_mult ^ n
      end
    else
      self.T_i = self.T_0
      self.T_cur = epoch
    end
  end
  self.last_epoch = floor(epoch)
  local values, groups = self:get_lr(), self.optimizer.param_groups
  for i = 1, #groups do
    if values[i] == nil then break end
    groups[i].lr = values[i]
  end
  self._last_lr = group_lrs(self.optimizer)
end

---------------------------------------------------------------- LambdaLR, MultiplicativeLR
-- lr_lambda: one callable for every group, or a list of them, one per group
local function lambdas_of(cls, opt, ...)
  local o = opts_of(cls, ...)
  check_optimizer(cls, opt)
  local f, n = o.lr_lambda, #opt.param_groups
  local list = {}
  if is_callable(f) then
    for i = 1, n do list[i] = f end
  elseif type(f) == 'table' then
    if #f ~= n then misconf('%s: expected %d lr_lambdas (one per param group), got %d', cls, n, #f) end
    for i = 1, n do
      if not is_callable(f[i]) then misconf('%s: lr_lambda[%d] must be a function, got %s', cls, i, type(f[i])) end
      list[i] = f[i]
    end
  else
    misconf('%s: lr_lambda must be a function or a list of functions (one per param group), got %s', cls, type(f))
  end
  return list, o
end
-- the factor of lambda i at the epoch: a number, or an error naming the lambda
local function factor(self, i, e)
  local v = self.lr_lambdas[i](e)
  if not is_num(v) then
    if type(v) == 'cdata' and type(v.item) == 'function' then return v:item() end -- a 0-d tensor
    error(fmt('%s: lr_lambda%s returned %s for epoch %s; it must return a number', self.__name,
      #self.lr_lambdas > 1 and fmt('[%d]', i) or '', show(v), tostring(e)))
  end
  return v
end

M.LambdaLR = LRScheduler:extend('LambdaLR')
--- LambdaLR(opt, {lr_lambda=function(epoch) ... end} or a list, one per group): base_lr * f(epoch)
function M.LambdaLR:__init(opt, ...)
  local list, o = lambdas_of('LambdaLR', opt, ...)
  self.lr_lambdas = list
  LRScheduler.__init(self, opt, o.last_epoch)
end
function M.LambdaLR:get_lr()
  local e = self.last_epoch
  local r, n = {}, #self.optimizer.param_groups
  for i, base in ipairs(self.base_lrs) do
    if i > n or self.lr_lambdas[i] == nil then break end
    r[i] = base * factor(self, i, e)
  end
  return r
end

M.MultiplicativeLR = LRScheduler:extend('MultiplicativeLR')
--- MultiplicativeLR(opt, {lr_lambda=function(epoch) ... end} or a list): lr * f(epoch) each step
function M.MultiplicativeLR:__init(opt, ...)
  local list, o = lambdas_of('MultiplicativeLR', opt, ...)
  self.lr_lambdas = list
  LRScheduler.__init(self, opt, o.last_epoch)
end
function M.MultiplicativeLR:get_lr()
  local e, r = self.last_epoch, {}
  for i, g in ipairs(self.optimizer.param_groups) do
    if self.lr_lambdas[i] == nil then break end
    r[i] = e > 0 and g.lr * factor(self, i, e) or g.lr
  end
  return r
end

---------------------------------------------------------------- SequentialLR, ChainedScheduler
local function is_plateau(s) return class.is_instance(s, M.ReduceLROnPlateau) end

-- schedulers: a list of schedulers of one optimizer (opt when given)
local function check_schedulers(cls, list, opt)
  if type(list) ~= 'table' or #list == 0 then
    misconf('%s: schedulers must be a non-empty list of lr schedulers, got %s', cls,
      type(list) == 'table' and 'an empty list' or show(list))
  end
  for i, s in ipairs(list) do
    if type(s) ~= 'table' or type(s.step) ~= 'function' or type(s.optimizer) ~= 'table' then
      misconf('%s: schedulers[%d] is not an lr scheduler', cls, i)
    end
    if is_plateau(s) then
      misconf('%s: schedulers[%d] is a ReduceLROnPlateau, whose step takes a metric; step it on its own', cls, i)
    end
    if opt and s.optimizer ~= opt then
      misconf('%s: all the schedulers must belong to the optimizer given, schedulers[%d] does not', cls, i)
    end
    if s.optimizer ~= list[1].optimizer then
      misconf('%s: all the schedulers must belong to one optimizer; schedulers[1] and schedulers[%d] do not', cls, i)
    end
  end
end
-- state dicts of the wrappers: their fields and the wrapped schedulers' state dicts
local function wrapper_state_dict(self)
  local sd = copy_state(self, {})
  sd._schedulers = {}
  for i, s in ipairs(self._schedulers) do sd._schedulers[i] = s:state_dict() end
  return sd
end
local function wrapper_load_state_dict(self, sd)
  check_sd(self, sd)
  if sd._schedulers ~= nil and (type(sd._schedulers) ~= 'table' or #sd._schedulers ~= #self._schedulers) then
    error(fmt('%s: load_state_dict: the state dict has %s wrapped schedulers, this scheduler %d', self.__name,
      type(sd._schedulers) == 'table' and tostring(#sd._schedulers) or show(sd._schedulers), #self._schedulers))
  end
  copy_state(sd, self)
  for i, s in ipairs(sd._schedulers or {}) do self._schedulers[i]:load_state_dict(s) end
end

M.SequentialLR = LRScheduler:extend('SequentialLR')
--- SequentialLR(opt, {schedulers={s1, s2, ...}, milestones={m1, ...}}): s1 until epoch m1,
--- then s2 (started from its closed form at epoch 0), ...
function M.SequentialLR:__init(opt, ...)
  local o = opts_of('SequentialLR', ...)
  check_optimizer('SequentialLR', opt)
  check_schedulers('SequentialLR', o.schedulers, opt)
  local ms = o.milestones
  if type(ms) ~= 'table' then misconf('SequentialLR: milestones must be a list of epochs, got %s', show(ms)) end
  if #ms ~= #o.schedulers - 1 then
    misconf('SequentialLR: expected one milestone fewer than schedulers, got %d schedulers and %d milestones',
      #o.schedulers, #ms)
  end
  local list = {}
  for i, m in ipairs(ms) do
    list[i] = check_int('SequentialLR', fmt('milestones[%d]', i), m)
    if i > 1 and list[i] < list[i - 1] then misconf('SequentialLR: milestones must be increasing') end
  end
  local last_epoch = o.last_epoch == nil and -1 or check_int('SequentialLR', 'last_epoch', o.last_epoch, -1)
  self._schedulers = {}
  for i, s in ipairs(o.schedulers) do self._schedulers[i] = s end
  self._milestones = list
  self.last_epoch = last_epoch + 1
  self.optimizer = opt
  -- back to the initial lrs, the other schedulers' initial steps undone
  for i, g in ipairs(opt.param_groups) do
    if g.initial_lr == nil then
      misconf("SequentialLR: param 'initial_lr' is not specified in param_groups[%d] (a group added after the schedulers were made)", i)
    end
    g.lr = g.initial_lr
  end
  for _, s in ipairs(self._schedulers) do s.last_epoch = s.last_epoch - 1 end
  self._schedulers[1]:_initial_step()
  self._last_lr = self._schedulers[1]:get_last_lr()
end
function M.SequentialLR:step()
  self.last_epoch = self.last_epoch + 1
  local idx = 0 -- bisect_right: the milestones <= last_epoch
  for _, m in ipairs(self._milestones) do if m <= self.last_epoch then idx = idx + 1 end end
  local s = self._schedulers[idx + 1]
  if idx > 0 and self._milestones[idx] == self.last_epoch then s:step(0) else s:step() end
  self._last_lr = s:get_last_lr()
end
M.SequentialLR.state_dict = wrapper_state_dict
M.SequentialLR.load_state_dict = wrapper_load_state_dict

M.ChainedScheduler = LRScheduler:extend('ChainedScheduler')
--- ChainedScheduler({s1, s2, ...}): one step() steps each in turn
function M.ChainedScheduler:__init(schedulers)
  check_schedulers('ChainedScheduler', schedulers)
  self._schedulers = {}
  for i, s in ipairs(schedulers) do self._schedulers[i] = s end
  self.optimizer = schedulers[1].optimizer
  self._last_lr = group_lrs(self.optimizer)
end
function M.ChainedScheduler:step()
  for _, s in ipairs(self._schedulers) do s:step() end
  self._last_lr = group_lrs(self.optimizer)
end
M.ChainedScheduler.state_dict = wrapper_state_dict
M.ChainedScheduler.load_state_dict = wrapper_load_state_dict

---------------------------------------------------------------- OneCycleLR
M.OneCycleLR = LRScheduler:extend('OneCycleLR')
local ANNEAL = { cos = true, linear = true }
--- OneCycleLR(opt, {max_lr=, total_steps= | epochs= and steps_per_epoch=, pct_start=0.3,
--- anneal_strategy='cos'|'linear', div_factor=25, final_div_factor=1e4, three_phase=false,
--- cycle_momentum=true, base_momentum=0.85, max_momentum=0.95}). Not chainable (PyTorch's).
function M.OneCycleLR:__init(opt, ...)
  local C = 'OneCycleLR'
  local o = opts_of(C, ...)
  check_optimizer(C, opt)
  if o.max_lr == nil then misconf('OneCycleLR: max_lr is required') end
  local total
  if o.total_steps ~= nil then
    total = check_int(C, 'total_steps', o.total_steps, 1, 'a positive integer')
  elseif o.epochs ~= nil or o.steps_per_epoch ~= nil then
    total = check_int(C, 'epochs', o.epochs, 1, 'a positive integer')
      * check_int(C, 'steps_per_epoch', o.steps_per_epoch, 1, 'a positive integer')
  else
    misconf('OneCycleLR: give total_steps, or epochs and steps_per_epoch')
  end
  self.total_steps = total
  local pct = check_num(C, 'pct_start', o.pct_start == nil and 0.3 or o.pct_start, 0, 1, 'a number in [0, 1]')
  self.anneal = o.anneal_strategy == nil and 'cos' or o.anneal_strategy
  if not ANNEAL[self.anneal] then
    misconf("OneCycleLR: anneal_strategy must be 'cos' or 'linear', got %s", show(self.anneal))
  end
  local div = check_num(C, 'div_factor', o.div_factor == nil and 25 or o.div_factor)
  local fdiv = check_num(C, 'final_div_factor', o.final_div_factor == nil and 1e4 or o.final_div_factor)
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
  local last_epoch = o.last_epoch == nil and -1 or o.last_epoch
  local max_lrs = per_group(C, 'max_lr', o.max_lr, opt, 0)
  if last_epoch == -1 then
    for i, g in ipairs(opt.param_groups) do
      g.initial_lr = max_lrs[i] / div
      g.max_lr = max_lrs[i]
      g.min_lr = g.initial_lr / fdiv
    end
  end
  self.cycle_momentum = o.cycle_momentum ~= false
  if self.cycle_momentum then
    local d = opt.defaults or {}
    if d.momentum == nil and d.betas == nil then
      misconf('OneCycleLR: the optimizer must support momentum (momentum or betas) with cycle_momentum enabled')
    end
    self.use_beta1 = d.betas ~= nil
    local maxm = per_group(C, 'max_momentum', o.max_momentum == nil and 0.95 or o.max_momentum, opt)
    local basem = per_group(C, 'base_momentum', o.base_momentum == nil and 0.85 or o.base_momentum, opt)
    if last_epoch == -1 then
      for i, g in ipairs(opt.param_groups) do
        if self.use_beta1 then g.betas = { maxm[i], (g.betas or d.betas)[2] } else g.momentum = maxm[i] end
        g.max_momentum, g.base_momentum = maxm[i], basem[i]
      end
    end
  end
  LRScheduler.__init(self, opt, o.last_epoch)
end
local function anneal(kind, s, e, pct)
  if kind == 'linear' then return (e - s) * pct + s end
  return e + (s - e) / 2 * (cos(pi * pct) + 1)
end
function M.OneCycleLR:get_lr()
  local step = self.last_epoch
  if step > self.total_steps then
    error(fmt('OneCycleLR: tried to step %d times; the total number of steps is %d', step + 1, self.total_steps))
  end
  local r = {}
  for i, g in ipairs(self.optimizer.param_groups) do
    if g.max_lr == nil or (self.cycle_momentum and g.max_momentum == nil) then
      error(fmt('OneCycleLR: param_groups[%d] has no max_lr%s (a group added after the scheduler was made?)', i,
        self.cycle_momentum and '/max_momentum' or ''))
    end
    local start, lr, mom = 0, nil, nil
    for k, ph in ipairs(self.phases) do
      if step <= ph.end_step or k == #self.phases then
        local pct = (step - start) / (ph.end_step - start)
        lr = anneal(self.anneal, g[ph.s], g[ph.e], pct)
        if self.cycle_momentum then mom = anneal(self.anneal, g[ph.sm], g[ph.em], pct) end
        break
      end
      start = ph.end_step
    end
    r[i] = lr
    if self.cycle_momentum then
      if self.use_beta1 then g.betas = { mom, g.betas[2] } else g.momentum = mom end
    end
  end
  return r
end

---------------------------------------------------------------- CyclicLR
M.CyclicLR = LRScheduler:extend('CyclicLR')
local CYCLIC_MODES = { triangular = true, triangular2 = true, exp_range = true }
--- CyclicLR(opt, {base_lr=, max_lr=, step_size_up=2000, step_size_down=step_size_up,
--- mode='triangular'|'triangular2'|'exp_range', gamma=1, scale_fn=, scale_mode='cycle'|'iterations',
--- cycle_momentum=true, base_momentum=0.8, max_momentum=0.9}): step() after every batch.
function M.CyclicLR:__init(opt, ...)
  local C = 'CyclicLR'
  local o = opts_of(C, ...)
  check_optimizer(C, opt)
  if o.base_lr == nil then misconf('CyclicLR: base_lr is required') end
  if o.max_lr == nil then misconf('CyclicLR: max_lr is required') end
  local last_epoch = o.last_epoch == nil and -1 or o.last_epoch
  local base_lrs = per_group(C, 'base_lr', o.base_lr, opt, 0)
  if last_epoch == -1 then
    for i, g in ipairs(opt.param_groups) do g.lr = base_lrs[i] end
  end
  self.max_lrs = per_group(C, 'max_lr', o.max_lr, opt, 0)
  local up = check_num(C, 'step_size_up', o.step_size_up == nil and 2000 or o.step_size_up, 0)
  local down = o.step_size_down == nil and up or check_num(C, 'step_size_down', o.step_size_down, 0)
  self.total_size = up + down
  if self.total_size <= 0 then misconf('CyclicLR: step_size_up + step_size_down must be positive') end
  self.step_ratio = up / self.total_size
  local mode = o.mode == nil and 'triangular' or o.mode
  if o.scale_fn == nil and not CYCLIC_MODES[mode] then
    misconf("CyclicLR: mode must be 'triangular', 'triangular2' or 'exp_range' (or give scale_fn), got %s", show(mode))
  end
  self.mode = mode
  self.gamma = check_num(C, 'gamma', o.gamma == nil and 1 or o.gamma)
  if o.scale_fn ~= nil then
    if not is_callable(o.scale_fn) then misconf('CyclicLR: scale_fn must be a function, got %s', type(o.scale_fn)) end
    self._scale_fn_custom = o.scale_fn
    self.scale_mode = o.scale_mode == nil and 'cycle' or o.scale_mode
    if self.scale_mode ~= 'cycle' and self.scale_mode ~= 'iterations' then
      misconf("CyclicLR: scale_mode must be 'cycle' or 'iterations', got %s", show(self.scale_mode))
    end
  else
    self.scale_mode = mode == 'exp_range' and 'iterations' or 'cycle'
  end
  self.cycle_momentum = o.cycle_momentum ~= false
  if self.cycle_momentum then
    if (opt.defaults or {}).momentum == nil then
      misconf('CyclicLR: the optimizer must support momentum with cycle_momentum enabled (set cycle_momentum=false)')
    end
    local basem = per_group(C, 'base_momentum', o.base_momentum == nil and 0.8 or o.base_momentum, opt)
    if last_epoch == -1 then
      for i, g in ipairs(opt.param_groups) do g.momentum = basem[i] end
    end
    self.base_momentums = {}
    for i, g in ipairs(opt.param_groups) do self.base_momentums[i] = g.momentum end
    self.max_momentums = per_group(C, 'max_momentum', o.max_momentum == nil and 0.9 or o.max_momentum, opt)
  end
  LRScheduler.__init(self, opt, o.last_epoch)
  self.base_lrs = base_lrs
end
function M.CyclicLR:scale_fn(x)
  if self._scale_fn_custom then
    local v = self._scale_fn_custom(x)
    if not is_num(v) then error(fmt('CyclicLR: scale_fn returned %s for %s; it must return a number', show(v), tostring(x))) end
    return v
  end
  if self.mode == 'triangular2' then return 1 / (2 ^ (x - 1)) end
  if self.mode == 'exp_range' then return self.gamma ^ x end
  return 1
end
function M.CyclicLR:get_lr()
  local e = self.last_epoch
  local cycle = floor(1 + e / self.total_size)
  local x = 1 + e / self.total_size - cycle
  local scale = x <= self.step_ratio and x / self.step_ratio or (x - 1) / (self.step_ratio - 1)
  local s = self:scale_fn(self.scale_mode == 'cycle' and cycle or e)
  local r, n = {}, #self.optimizer.param_groups
  for i, base in ipairs(self.base_lrs) do
    if i > n or self.max_lrs[i] == nil then break end
    r[i] = base + (self.max_lrs[i] - base) * scale * s
  end
  if self.cycle_momentum then
    for i, g in ipairs(self.optimizer.param_groups) do
      local b, m = self.base_momentums[i], self.max_momentums[i]
      if b == nil or m == nil then break end
      g.momentum = m - (m - b) * scale * s
    end
  end
  return r
end

---------------------------------------------------------------- ReduceLROnPlateau
M.ReduceLROnPlateau = class.Object:extend('ReduceLROnPlateau')
--- ReduceLROnPlateau(opt, {mode='min', factor=0.1, patience=10, threshold=1e-4,
--- threshold_mode='rel', cooldown=0, min_lr=0, eps=1e-8}); step(metric)
function M.ReduceLROnPlateau:__init(opt, ...)
  local C = 'ReduceLROnPlateau'
  local o = opts_of(C, ...)
  check_optimizer(C, opt)
  self.optimizer = opt
  self.factor = check_num(C, 'factor', o.factor == nil and 0.1 or o.factor)
  if self.factor >= 1 then misconf('ReduceLROnPlateau: factor should be < 1.0, got %s', show(self.factor)) end
  self.patience = check_int(C, 'patience', o.patience == nil and 10 or o.patience, 0, 'a non-negative integer')
  self.cooldown = check_int(C, 'cooldown', o.cooldown == nil and 0 or o.cooldown, 0, 'a non-negative integer')
  self.eps = check_num(C, 'eps', o.eps == nil and 1e-8 or o.eps)
  self.mode = o.mode == nil and 'min' or o.mode
  self.threshold = o.threshold == nil and 1e-4 or o.threshold
  self.threshold_mode = o.threshold_mode == nil and 'rel' or o.threshold_mode
  self:_init_is_better()
  self.min_lrs = per_group(C, 'min_lr', o.min_lr == nil and 0 or o.min_lr, opt)
  self.last_epoch = 0
  self:_reset()
  self._last_lr = group_lrs(opt)
end
function M.ReduceLROnPlateau:_init_is_better()
  if self.mode ~= 'min' and self.mode ~= 'max' then
    misconf("ReduceLROnPlateau: mode must be 'min' or 'max', got %s", show(self.mode))
  end
  if self.threshold_mode ~= 'rel' and self.threshold_mode ~= 'abs' then
    misconf("ReduceLROnPlateau: threshold_mode must be 'rel' or 'abs', got %s", show(self.threshold_mode))
  end
  check_num('ReduceLROnPlateau', 'threshold', self.threshold)
  self.mode_worse = self.mode == 'min' and huge or -huge
end
function M.ReduceLROnPlateau:_reset()
  self.best = self.mode_worse
  self.cooldown_counter, self.num_bad_epochs = 0, 0
end
function M.ReduceLROnPlateau:is_better(a, best)
  if best == nil then best = self.best end
  local rel = self.threshold_mode == 'rel'
  if self.mode == 'min' then
    return a < (rel and best * (1 - self.threshold) or best - self.threshold)
  end
  return a > (rel and best * (1 + self.threshold) or best + self.threshold)
end
function M.ReduceLROnPlateau:step(metric)
  if type(metric) ~= 'number' then
    if type(metric) == 'cdata' and type(metric.item) == 'function' then metric = metric:item() else
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
      local min_lr = self.min_lrs[i]
      if min_lr == nil then
        error(fmt('ReduceLROnPlateau: no min_lr for param_groups[%d] (a group added after the scheduler was made)', i))
      end
      local new = math.max(g.lr * self.factor, min_lr)
      if g.lr - new > self.eps then g.lr = new end
    end
    self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
  end
  self._last_lr = group_lrs(self.optimizer)
end
M.ReduceLROnPlateau.get_last_lr = LRScheduler.get_last_lr
M.ReduceLROnPlateau.state_dict = LRScheduler.state_dict
function M.ReduceLROnPlateau:load_state_dict(sd)
  LRScheduler.load_state_dict(self, sd)
  self:_init_is_better()
end

return M
