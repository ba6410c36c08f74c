-- dpl.distributions: PyTorch's torch.distributions. Each distribution is a class (dpl.class)
-- with batch_shape and event_shape (lists of sizes), sample(sample_shape) and, where the draw
-- is a differentiable function of the parameters, rsample(sample_shape); log_prob(value),
-- entropy(), cdf/icdf where they have closed forms; and the properties mean, mode, variance,
-- stddev, support, has_rsample, arg_constraints. Parameters are checked against their
-- constraints (validate_args, on by default as in PyTorch) and so are log_prob's values.
-- kl_divergence(p, q) looks the pair up in a registry (register_kl adds to it).
-- Indices are 1-based, as everywhere in dplhost: Categorical draws 1..K and its log_prob
-- takes 1..K. Draws come from dplhost's seeded generator (dpl.manual_seed), so they are
-- reproducible but not PyTorch's numbers. Gamma (and with it Chi2, Beta, Dirichlet and
-- StudentT) draws by Marsaglia and Tsang's method (in C for float32/float64 CPU tensors, each
-- draw retrying on its own Philox counters: docs/distributions.md); its rsample's gradient in the
-- concentration is the implicit one, -dF/dalpha / density, with dF/dalpha by a central
-- difference of gammainc. Poisson draws by multiplication for small rates and by Hormann's
-- transformed rejection (PTRS) above 10.
local T = require 'dpl.tensor'
local class = require 'dpl.class'
local errors = require 'dpl.errors'
local SP = require 'dpl.special'
local capi = require 'dpl.capi'

local type, tostring, ipairs, pairs, select = type, tostring, ipairs, pairs, select
local floor, huge, pi, log, sqrt, max = math.floor, math.huge, math.pi, math.log, math.sqrt, math.max
local fmt = string.format
local lua_error = error
local EULER = 0.57721566490153286061

local D = {}
local is_tensor = T.is_tensor

local function value_error(msg) lua_error(errors.ValueError(msg), 0) end
local function not_impl(msg) lua_error(errors.NotImplementedError(msg), 0) end
local function AG() return package.loaded['dpl.autograd'] end
local function no_grad(f, ...) return AG().no_grad(f, ...) end

---------------------------------------------------------------- shapes and parameters
local function shape_of(t)
  local s = {}
  for i = 0, t._ndim - 1 do s[i + 1] = tonumber(t._shape[i]) end
  return s
end
local function concat(...)
  local r = {}
  for i = 1, select('#', ...) do
    local s = select(i, ...)
    for j = 1, #s do r[#r + 1] = s[j] end
  end
  return r
end
local function shape_str(s) return '[' .. table.concat(s, ', ') .. ']' end
-- a parameter in a repr, as PyTorch's: one element by value (`tensor(0.)`), else its shape
local function param_str(v)
  if not is_tensor(v) then return tostring(v) end
  if tonumber(v._numel) ~= 1 then return shape_str(shape_of(v)) end
  local ok, body = pcall(function() return require('dpl.tensor_print').body(v:detach():cpu(), 7) end)
  return ok and ('tensor(' .. body .. ')') or shape_str(shape_of(v))
end
local function sample_shape_of(name, ss)
  if ss == nil then return {} end
  if type(ss) == 'number' then ss = { ss } end
  if type(ss) ~= 'table' or is_tensor(ss) then
    value_error(fmt('%s: sample_shape must be a list of sizes, got %s', name, type(ss)))
  end
  local r = {}
  for i, n in ipairs(ss) do
    -- (inf and 1e308 are integral numbers too: as int64 sizes they wrapped to -2^63)
    if type(n) ~= 'number' or n ~= floor(n) or n < 0 or n >= 2 ^ 63 then
      value_error(fmt('%s: sample_shape[%d] must be a non-negative integer below 2^63, got %s', name, i, tostring(n)))
    end
    r[i] = n
  end
  return r
end
-- the dtype parameters share: float64 when any tensor one is, else float32
local function common_opts(...)
  local dt = 'float32'
  local dev
  for i = 1, select('#', ...) do
    local x = select(i, ...)
    if is_tensor(x) then
      if x._dtype == 1 then dt = 'float64' end
      dev = dev or x.device
    end
  end
  return { dtype = dt, device = dev }
end
-- parameters as tensors of one dtype, broadcast to one shape
local function broadcast_all(name, names, ...)
  local n = select('#', ...)
  local o = common_opts(...)
  local ts = {}
  for i = 1, n do
    local x = select(i, ...)
    if type(x) == 'number' then x = T.tensor(x, o) -- (as PyTorch's torch.tensor: 1e308 in float32 is inf)
    elseif not is_tensor(x) then value_error(fmt('%s: %s must be a tensor or a number, got %s', name, names[i], type(x)))
    elseif x._dtype > 3 then x = x:to(o.dtype)
    elseif x._dtype ~= (o.dtype == 'float64' and 1 or 0) and x._dtype ~= 2 and x._dtype ~= 3 then x = x:to(o.dtype) end
    ts[i] = x
  end
  if n == 1 then return ts[1] end
  local ok, r = pcall(T.broadcast_tensors, ts)
  if not ok then value_error(fmt('%s: the parameters cannot be broadcast together (%s)', name, tostring(r))) end
  return unpack(r, 1, n)
end
local function opts_of(t) return { dtype = T.dtype_names[t._dtype], device = t.device } end

---------------------------------------------------------------- constraints
local constraints = {}
D.constraints = constraints
local function constraint(name, check, extra)
  local c = { name = name, check = check }
  if extra then for k, v in pairs(extra) do c[k] = v end end
  return setmetatable(c, { __tostring = function(self) return self.name end })
end
constraints.real = constraint('Real()', function(x) return x:eq(x) end)
constraints.positive = constraint('GreaterThan(lower_bound=0.0)', function(x) return x:gt(0) end)
constraints.nonnegative = constraint('GreaterThanEq(lower_bound=0.0)', function(x) return x:ge(0) end)
constraints.unit_interval = constraint('Interval(lower_bound=0.0, upper_bound=1.0)', function(x) return x:ge(0):logical_and(x:le(1)) end)
constraints.boolean = constraint('Boolean()', function(x) return x:eq(0):logical_or(x:eq(1)) end)
constraints.nonnegative_integer = constraint('IntegerGreaterThan(lower_bound=0)', function(x)
  return x:ge(0):logical_and(x:eq(x:floor()))
end)
constraints.positive_integer = constraint('IntegerGreaterThan(lower_bound=1)', function(x)
  return x:ge(1):logical_and(x:eq(x:floor()))
end)
function constraints.integer_interval(lo, hi)
  return constraint(fmt('IntegerInterval(lower_bound=%s, upper_bound=%s)', tostring(lo), tostring(hi)), function(x)
    return x:ge(lo):logical_and(x:le(hi)):logical_and(x:eq(x:floor()))
  end)
end
function constraints.greater_than(lo)
  return constraint(fmt('GreaterThan(lower_bound=%s)', tostring(lo)), function(x) return x:gt(lo) end)
end
function constraints.interval(lo, hi) -- lo, hi: tensors or numbers; [lo, hi)
  return constraint('HalfOpenInterval(lower_bound, upper_bound)', function(x) return x:ge(lo):logical_and(x:lt(hi)) end)
end
constraints.simplex = constraint('Simplex()', function(x)
  return x:ge(0):all(-1):logical_and((x:sum(-1) - 1):abs():lt(1e-6))
end, { event_dim = 1 })
constraints.real_vector = constraint('IndependentConstraint(Real(), 1)', function(x) return x:eq(x):all(-1) end, { event_dim = 1 })
constraints.lower_cholesky = constraint('LowerCholesky()', function(x)
  local tril_ok = x:triu(1):eq(0):all(-1):all(-1)
  return tril_ok:logical_and(x:diagonal(0, -2, -1):gt(0):all(-1))
end, { event_dim = 2 })
constraints.positive_definite = constraint('PositiveDefinite()', function(x)
  local _, info = require('dpl.linalg').cholesky_ex(x)
  -- (the infos are host tensors, the matrix may be on a GPU)
  return x:eq(x:transpose(-2, -1)):all(-1):all(-1):logical_and(info:eq(0):to(x.device))
end, { event_dim = 2 })
constraints.dependent = constraint('Dependent()', nil)

local default_validate = true
--- Distribution.set_default_validate_args(on): validation by default (true, as PyTorch)

---------------------------------------------------------------- the base class
local Distribution = class.Object:extend('Distribution')
D.Distribution = Distribution
Distribution.has_rsample = false
Distribution.has_enumerate_support = false
Distribution.arg_constraints = {}
Distribution.support = constraints.real

function Distribution.set_default_validate_args(on)
  if type(on) ~= 'boolean' then value_error('set_default_validate_args: expected true or false') end
  default_validate = on
end

-- a subclass whose properties (mean, variance, ...) are getters: cls.get_mean(self)
local function dist_class(name, parent)
  local cls = (parent or Distribution):extend(name)
  cls.__index = function(self, k)
    if type(k) == 'string' then -- (a property's getter wins over a class field of that name)
      local g = cls['get_' .. k]
      if g ~= nil then return g(self) end
    end
    return cls[k]
  end
  cls.__tostring = function(self) return self:_repr() end
  D[name] = cls
  return cls
end

function Distribution:__init(batch_shape, event_shape, validate_args)
  rawset(self, 'batch_shape', batch_shape or {})
  rawset(self, 'event_shape', event_shape or {})
  if validate_args == nil then validate_args = default_validate end
  rawset(self, '_validate_args', validate_args)
  if validate_args then self:_check_params() end
end
function Distribution:_repr()
  local parts = {}
  for _, k in ipairs(self._param_names or {}) do
    local v = rawget(self, k)
    if is_tensor(v) then parts[#parts + 1] = fmt('%s: %s', k, param_str(v)) end
  end
  return fmt('%s(%s)', self.__name, table.concat(parts, ', '))
end
function Distribution:_check_params()
  for _, k in ipairs(self._param_names or {}) do
    local c = self.arg_constraints[k]
    local v = rawget(self, k)
    if c and c.check and is_tensor(v) then
      local ok = no_grad(function() return c.check(v):all():item() end)
      if not ok then
        value_error(fmt('Expected parameter %s (tensor of shape %s) of distribution %s to satisfy the constraint %s, but '
          .. 'found invalid values:\n%s', k, shape_str(shape_of(v)), self:_repr(), tostring(c), tostring(v)))
      end
    end
  end
end
function Distribution:_validate_sample(value, name)
  if not is_tensor(value) then value_error(fmt('%s.%s: value must be a tensor, got %s', self.__name, name, type(value))) end
  if not self._validate_args then return end
  local sup = self.support
  if sup and sup.check then
    local ok = no_grad(function() return sup.check(value):all():item() end)
    if not ok then
      value_error(fmt('Expected value argument (tensor of shape %s) to be within the support (%s) of the distribution %s, '
        .. 'but found invalid values:\n%s', shape_str(shape_of(value)), tostring(sup), self:_repr(), tostring(value)))
    end
  end
end
function Distribution:_extended_shape(ss) return concat(ss, self.batch_shape, self.event_shape) end
function Distribution:sample(ss)
  if self.has_rsample then
    return no_grad(function() return self:rsample(ss) end)
  end
  not_impl(fmt('%s.sample is not implemented', self.__name))
end
function Distribution:rsample()
  not_impl(fmt('%s has no rsample (its draws are not differentiable in its parameters: use sample)', self.__name))
end
function Distribution:sample_n(n) return self:sample({ n }) end
function Distribution:log_prob() not_impl(fmt('%s.log_prob is not implemented', self.__name)) end
function Distribution:entropy() not_impl(fmt('%s.entropy is not implemented', self.__name)) end
function Distribution:cdf() not_impl(fmt('%s.cdf is not implemented', self.__name)) end
function Distribution:icdf() not_impl(fmt('%s.icdf is not implemented', self.__name)) end
function Distribution:perplexity() return self:entropy():exp() end
function Distribution:get_stddev() return self.variance:sqrt() end
function Distribution:get_mean() not_impl(fmt('%s.mean is not implemented', self.__name)) end
function Distribution:get_variance() not_impl(fmt('%s.variance is not implemented', self.__name)) end
function Distribution:get_mode() not_impl(fmt('%s.mode is not implemented', self.__name)) end
-- a new distribution of this kind with the parameters expanded to batch_shape
function Distribution:expand(batch_shape)
  local args = {}
  for i, k in ipairs(self._param_names) do
    local v = rawget(self, k)
    local ev = self._param_event_dims and self._param_event_dims[k] or 0
    if is_tensor(v) then
      local s = shape_of(v)
      local tail = {}
      for j = #s - ev + 1, #s do tail[#tail + 1] = s[j] end
      v = v:expand(concat(batch_shape, tail))
    end
    args[i] = v
  end
  return self:_rebuild(args)
end
function Distribution:_rebuild(args) return getmetatable(self)(unpack(args, 1, #self._param_names)) end

-- probs/logits pairs (Bernoulli, Categorical, Binomial, Geometric, ...): keep whichever was
-- given, derive the other on first use
local function probs_or_logits(name, probs, logits)
  if (probs == nil) == (logits == nil) then
    value_error(fmt('%s: either `probs` or `logits` must be specified, but not both.', name))
  end
  return probs, logits
end
local function clamp_probs(p)
  local eps = p._dtype == 1 and 2.220446049250313e-16 or 1.1920928955078125e-07
  return p:clamp(eps, 1 - eps)
end
local function softplus(x) return x:softplus() end

---------------------------------------------------------------- Normal
local Normal = dist_class('Normal')
Normal.arg_constraints = { loc = constraints.real, scale = constraints.positive }
Normal.support = constraints.real
Normal.has_rsample = true
Normal._param_names = { 'loc', 'scale' }
function Normal:__init(loc, scale, validate_args)
  if type(validate_args) == 'table' then validate_args = validate_args.validate_args end
  self.loc, self.scale = broadcast_all('Normal', { 'loc', 'scale' }, loc, scale)
  Distribution.__init(self, shape_of(self.loc), {}, validate_args)
end
function Normal:get_mean() return self.loc end
function Normal:get_mode() return self.loc end
function Normal:get_stddev() return self.scale end
function Normal:get_variance() return self.scale * self.scale end
function Normal:rsample(ss)
  local shape = self:_extended_shape(sample_shape_of('Normal.rsample', ss))
  return self.loc + T.randn(shape, opts_of(self.loc)) * self.scale
end
function Normal:log_prob(x)
  self:_validate_sample(x, 'log_prob')
  return -((x - self.loc) ^ 2) / (self.scale * self.scale * 2) - self.scale:log() - 0.5 * log(2 * pi)
end
function Normal:entropy() return self.scale:log() + 0.5 + 0.5 * log(2 * pi) end
function Normal:cdf(x)
  self:_validate_sample(x, 'cdf')
  return ((x - self.loc) / (self.scale * sqrt(2))):erf() * 0.5 + 0.5
end
function Normal:icdf(p) return self.loc + self.scale * (p * 2 - 1):erfinv() * sqrt(2) end

---------------------------------------------------------------- LogNormal, HalfNormal
local LogNormal = dist_class('LogNormal')
LogNormal.arg_constraints = Normal.arg_constraints
LogNormal.support = constraints.positive
LogNormal.has_rsample = true
LogNormal._param_names = { 'loc', 'scale' }
function LogNormal:__init(loc, scale, validate_args)
  self.base_dist = Normal(loc, scale, validate_args)
  self.loc, self.scale = self.base_dist.loc, self.base_dist.scale
  Distribution.__init(self, shape_of(self.loc), {}, validate_args)
end
function LogNormal:rsample(ss) return self.base_dist:rsample(ss):exp() end
function LogNormal:log_prob(x)
  self:_validate_sample(x, 'log_prob')
  local lx = x:log()
  return self.base_dist:log_prob(lx) - lx
end
function LogNormal:entropy() return self.base_dist:entropy() + self.loc end
function LogNormal:get_mean() return (self.loc + self.scale ^ 2 / 2):exp() end
function LogNormal:get_mode() return (self.loc - self.scale ^ 2):exp() end
function LogNormal:get_variance()
  local s2 = self.scale ^ 2
  return s2:expm1() * (self.loc * 2 + s2):exp()
end
function LogNormal:cdf(x) return self.base_dist:cdf(x:log()) end
function LogNormal:icdf(p) return self.base_dist:icdf(p):exp() end

local HalfNormal = dist_class('HalfNormal')
HalfNormal.arg_constraints = { scale = constraints.positive }
HalfNormal.support = constraints.nonnegative
HalfNormal.has_rsample = true
HalfNormal._param_names = { 'scale' }
function HalfNormal:__init(scale, validate_args)
  self.scale = broadcast_all('HalfNormal', { 'scale' }, scale)
  self.base_dist = Normal(T.zeros_like(self.scale), self.scale, false)
  Distribution.__init(self, shape_of(self.scale), {}, validate_args)
end
function HalfNormal:rsample(ss) return self.base_dist:rsample(ss):abs() end
function HalfNormal:log_prob(x)
  self:_validate_sample(x, 'log_prob')
  local lp = self.base_dist:log_prob(x) + log(2)
  return T.where(x:ge(0), lp, T.full_like(lp, -huge))
end
function HalfNormal:entropy() return (self.scale ^ 2 * (pi / 2)):log() * 0.5 + 0.5 end
function HalfNormal:get_mean() return self.scale * sqrt(2 / pi) end
function HalfNormal:get_mode() return T.zeros_like(self.scale) end
function HalfNormal:get_variance() return self.scale ^ 2 * (1 - 2 / pi) end
function HalfNormal:cdf(x) return self.base_dist:cdf(x) * 2 - 1 end
function HalfNormal:icdf(p) return self.base_dist:icdf((p + 1) / 2) end

---------------------------------------------------------------- Uniform, Exponential, Laplace, Cauchy, Gumbel
local Uniform = dist_class('Uniform')
Uniform.arg_constraints = { low = constraints.dependent, high = constraints.dependent }
Uniform.has_rsample = true
Uniform._param_names = { 'low', 'high' }
function Uniform:__init(low, high, validate_args)
  self.low, self.high = broadcast_all('Uniform', { 'low', 'high' }, low, high)
  local v = validate_args
  if v == nil then v = default_validate end
  if v then
    if not no_grad(function() return self.low:lt(self.high):all():item() end) then
      value_error(fmt('Expected parameter low (tensor of shape %s) of distribution Uniform to be less than high',
        shape_str(shape_of(self.low))))
    end
  end
  Distribution.__init(self, shape_of(self.low), {}, validate_args)
end
function Uniform:get_support() return constraints.interval(self.low, self.high) end
function Uniform:rsample(ss)
  local shape = self:_extended_shape(sample_shape_of('Uniform.rsample', ss))
  return self.low + T.rand(shape, opts_of(self.low)) * (self.high - self.low)
end
function Uniform:log_prob(x)
  self:_validate_sample(x, 'log_prob')
  local inside = x:ge(self.low):logical_and(x:lt(self.high))
  local lp = -(self.high - self.low):log()
  return T.where(inside, lp, T.full_like(lp, -huge))
end
function Uniform:entropy() return (self.high - self.low):log() end
function Uniform:cdf(x) return ((x - self.low) / (self.high - self.low)):clamp(0, 1) end
function Uniform:icdf(p) return self.low + p * (self.high - self.low) end
function Uniform:get_mean() return (self.low + self.high) / 2 end
function Uniform:get_mode() return T.full_like(self.low, 0 / 0) end
function Uniform:get_variance() return (self.high - self.low) ^ 2 / 12 end

local Exponential = dist_class('Exponential')
Exponential.arg_constraints = { rate = constraints.positive }
Exponential.support = constraints.nonnegative
Exponential.has_rsample = true
Exponential._param_names = { 'rate' }
function Exponential:__init(rate, validate_args)
  self.rate = broadcast_all('Exponential', { 'rate' }, rate)
  Distribution.__init(self, shape_of(self.rate), {}, validate_args)
end
function Exponential:rsample(ss)
  local shape = self:_extended_shape(sample_shape_of('Exponential.rsample', ss))
  return -(-T.rand(shape, opts_of(self.rate))):log1p() / self.rate
end
function Exponential:log_prob(x)
  self:_validate_sample(x, 'log_prob')
  return self.rate:log() - self.rate * x
end
function Exponential:entropy() return 1 - self.rate:log() end
function Exponential:cdf(x) return 1 - (-self.rate * x):exp() end
function Exponential:icdf(p) return -(-p):log1p() / self.rate end
function Exponential:get_mean() return self.rate:reciprocal() end
function Exponential:get_mode() return T.zeros_like(self.rate) end
function Exponential:get_variance() return self.rate ^ -2 end

local Laplace = dist_class('Laplace')
Laplace.arg_constraints = { loc = constraints.real, scale = constraints.positive }
Laplace.has_rsample = true
Laplace._param_names = { 'loc', 'scale' }
function Laplace:__init(loc, scale, validate_args)
  self.loc, self.scale = broadcast_all('Laplace', { 'loc', 'scale' }, loc, scale)
  Distribution.__init(self, shape_of(self.loc), {}, validate_args)
end
function Laplace:rsample(ss)
  local shape = self:_extended_shape(sample_shape_of('Laplace.rsample', ss))
  local eps = 1.1920928955078125e-07
  local u = (T.rand(shape, opts_of(self.loc)) * 2 - 1):clamp(-1 + eps, 1 - eps)
  return self.loc - self.scale * u:sign() * (-u:abs()):log1p()
end
function Laplace:log_prob(x)
  self:_validate_sample(x, 'log_prob')
  return -(self.scale * 2):log() - (x - self.loc):abs() / self.scale
end
function Laplace:entropy() return (self.scale * 2):log() + 1 end
function Laplace:cdf(x)
  local z = x - self.loc
  return 0.5 - z:sign() * (-z:abs() / self.scale):expm1() * 0.5
end
function Laplace:icdf(p)
  local t = p - 0.5
  return self.loc - self.scale * t:sign() * (-t:abs() * 2):log1p()
end
function Laplace:get_mean() return self.loc end
function Laplace:get_mode() return self.loc end
function Laplace:get_variance() return self.scale ^ 2 * 2 end
function Laplace:get_stddev() return self.scale * sqrt(2) end

local Cauchy = dist_class('Cauchy')
Cauchy.arg_constraints = { loc = constraints.real, scale = constraints.positive }
Cauchy.has_rsample = true
Cauchy._param_names = { 'loc', 'scale' }
function Cauchy:__init(loc, scale, validate_args)
  self.loc, self.scale = broadcast_all('Cauchy', { 'loc', 'scale' }, loc, scale)
  Distribution.__init(self, shape_of(self.loc), {}, validate_args)
end
function Cauchy:rsample(ss)
  local shape = self:_extended_shape(sample_shape_of('Cauchy.rsample', ss))
  return self.loc + self.scale * ((T.rand(shape, opts_of(self.loc)) - 0.5) * pi):tan()
end
function Cauchy:log_prob(x)
  self:_validate_sample(x, 'log_prob')
  return -log(pi) - self.scale:log() - (((x - self.loc) / self.scale) ^ 2):log1p()
end
function Cauchy:entropy() return (self.scale * 4 * pi):log() end
function Cauchy:cdf(x) return ((x - self.loc) / self.scale):atan() / pi + 0.5 end
function Cauchy:icdf(p) return ((p - 0.5) * pi):tan() * self.scale + self.loc end
function Cauchy:get_mean() return T.full_like(self.loc, 0 / 0) end
function Cauchy:get_mode() return self.loc end
function Cauchy:get_variance() return T.full_like(self.loc, huge) end

local Gumbel = dist_class('Gumbel')
Gumbel.arg_constraints = { loc = constraints.real, scale = constraints.positive }
Gumbel.has_rsample = true
Gumbel._param_names = { 'loc', 'scale' }
function Gumbel:__init(loc, scale, validate_args)
  self.loc, self.scale = broadcast_all('Gumbel', { 'loc', 'scale' }, loc, scale)
  Distribution.__init(self, shape_of(self.loc), {}, validate_args)
end
function Gumbel:rsample(ss)
  local shape = self:_extended_shape(sample_shape_of('Gumbel.rsample', ss))
  local eps = self.loc._dtype == 1 and 2.220446049250313e-16 or 1.1920928955078125e-07
  local u = T.rand(shape, opts_of(self.loc)):clamp(eps, 1 - eps)
  return self.loc - self.scale * (-u:log()):log()
end
function Gumbel:log_prob(x)
  self:_validate_sample(x, 'log_prob')
  local z = (x - self.loc) / self.scale
  return -(z + (-z):exp()) - self.scale:log()
end
function Gumbel:entropy() return self.scale:log() + (1 + EULER) end
function Gumbel:cdf(x) return (-(-(x - self.loc) / self.scale):exp()):exp() end
function Gumbel:icdf(p) return self.loc - self.scale * (-p:log()):log() end
function Gumbel:get_mean() return self.loc + self.scale * EULER end
function Gumbel:get_mode() return self.loc end
function Gumbel:get_variance() return self.scale ^ 2 * (pi * pi / 6) end

---------------------------------------------------------------- Bernoulli, Geometric
local function lazy_pair(cls)
  function cls:get_probs()
    local p = rawget(self, '_probs')
    if p == nil then p = self._logits:sigmoid(); rawset(self, '_probs', p) end
    return p
  end
  function cls:get_logits()
    local l = rawget(self, '_logits')
    if l == nil then
      local p = clamp_probs(self._probs)
      l = p:log() - (-p):log1p()
      rawset(self, '_logits', l)
    end
    return l
  end
end
local Bernoulli = dist_class('Bernoulli')
Bernoulli.arg_constraints = { probs = constraints.unit_interval, logits = constraints.real }
Bernoulli.support = constraints.boolean
Bernoulli._param_names = { 'probs', 'logits' }
lazy_pair(Bernoulli)
--- Bernoulli(probs) / Bernoulli({probs=}) / Bernoulli({logits=}) / Bernoulli(nil, logits)
local function pl_args(name, a, b, c)
  local validate
  if type(a) == 'table' and not is_tensor(a) then
    validate = a.validate_args
    return a.probs, a.logits, validate, a
  end
  if type(c) == 'table' then validate = c.validate_args elseif type(c) == 'boolean' then validate = c end
  return a, b, validate
end
function Bernoulli:__init(a, b, c)
  local probs, logits, validate = pl_args('Bernoulli', a, b, c)
  probs_or_logits('Bernoulli', probs, logits)
  if probs ~= nil then rawset(self, '_probs', broadcast_all('Bernoulli', { 'probs' }, probs))
  else rawset(self, '_logits', broadcast_all('Bernoulli', { 'logits' }, logits)) end
  rawset(self, '_given', probs ~= nil and 'probs' or 'logits')
  Distribution.__init(self, shape_of(rawget(self, '_probs') or rawget(self, '_logits')), {}, validate)
end
function Bernoulli:_check_params()
  local k = self._given
  local v = rawget(self, '_' .. k)
  local c = self.arg_constraints[k]
  if not no_grad(function() return c.check(v):all():item() end) then
    value_error(fmt('Expected parameter %s (tensor of shape %s) of distribution %s to satisfy the constraint %s, but found '
      .. 'invalid values:\n%s', k, shape_str(shape_of(v)), self.__name, tostring(c), tostring(v)))
  end
end
function Bernoulli:_repr() return fmt('%s(%s: %s)', self.__name, self._given, param_str(rawget(self, '_' .. self._given))) end
function Bernoulli:_rebuild(args)
  local k = self._given
  local v = rawget(self, '_' .. k)
  return getmetatable(self)({ [k] = v, validate_args = self._validate_args })
end
function Bernoulli:expand(bs)
  local k = self._given
  return getmetatable(self)({ [k] = rawget(self, '_' .. k):expand(bs), validate_args = self._validate_args })
end
function Bernoulli:sample(ss)
  local shape = self:_extended_shape(sample_shape_of('Bernoulli.sample', ss))
  return no_grad(function()
    local p = self.probs:expand(shape)
    return T.rand(shape, opts_of(p)):lt(p):to(T.dtype_names[p._dtype])
  end)
end
local function bce_logits(logits, target) -- softplus(l) - l t (smooth: the right gradient at l = 0)
  return logits:softplus() - logits * target
end
function Bernoulli:log_prob(x)
  self:_validate_sample(x, 'log_prob')
  return -bce_logits(self.logits, x)
end
function Bernoulli:entropy() return bce_logits(self.logits, self.probs) end
function Bernoulli:get_mean() return self.probs end
function Bernoulli:get_mode()
  local m = self.probs:ge(0.5):to(T.dtype_names[self.probs._dtype])
  return T.where(self.probs:eq(0.5), T.full_like(m, 0 / 0), m)
end
function Bernoulli:get_variance() return self.probs * (1 - self.probs) end
function Bernoulli:enumerate_support()
  local v = T.tensor({ 0, 1 }, opts_of(self.probs))
  local shape = concat({ 2 }, self.batch_shape)
  local vs = { 2 }
  for _ = 1, #self.batch_shape do vs[#vs + 1] = 1 end
  return v:reshape(vs):expand(shape)
end
Bernoulli.has_enumerate_support = true

local Geometric = dist_class('Geometric', Bernoulli)
Geometric.support = constraints.nonnegative_integer
lazy_pair(Geometric)
function Geometric:sample(ss)
  local shape = self:_extended_shape(sample_shape_of('Geometric.sample', ss))
  return no_grad(function()
    local p = self.probs
    local tiny = p._dtype == 1 and 2.2250738585072014e-308 or 1.1754943508222875e-38
    local u = T.rand(shape, opts_of(p)):clamp(tiny)
    return (u:log() / (-p):log1p()):floor()
  end)
end
function Geometric:log_prob(x)
  self:_validate_sample(x, 'log_prob')
  local p = clamp_probs(self.probs)
  return x * (-p):log1p() + p:log()
end
function Geometric:entropy() return bce_logits(self.logits, self.probs) / self.probs end
function Geometric:get_mean() return 1 / self.probs - 1 end
function Geometric:get_mode() return T.zeros_like(self.probs) end
function Geometric:get_variance() return (1 / self.probs - 1) / self.probs end
Geometric.has_enumerate_support = false
function Geometric:enumerate_support() not_impl('Geometric.enumerate_support: its support is infinite') end

---------------------------------------------------------------- Categorical, OneHotCategorical
local Categorical = dist_class('Categorical')
Categorical.arg_constraints = { probs = constraints.simplex, logits = constraints.real_vector }
Categorical.has_enumerate_support = true
Categorical._param_names = { 'probs', 'logits' }
Categorical._param_event_dims = { probs = 1, logits = 1 }
function Categorical:__init(a, b, c)
  local probs, logits, validate = pl_args('Categorical', a, b, c)
  probs_or_logits('Categorical', probs, logits)
  local t = probs ~= nil and probs or logits
  if not is_tensor(t) then value_error(fmt('Categorical: %s must be a tensor, got %s', probs and 'probs' or 'logits', type(t))) end
  if t._ndim < 1 then value_error('Categorical: `probs`/`logits` parameter must be at least one-dimensional.') end
  if t._dtype > 3 then t = t:float() end
  if probs ~= nil then rawset(self, '_probs', t / t:sum(-1, true))
  else rawset(self, '_logits', t - t:logsumexp(-1, true)) end
  rawset(self, '_given', probs ~= nil and 'probs' or 'logits')
  rawset(self, '_num_events', tonumber(t._shape[t._ndim - 1]))
  local bs = shape_of(t)
  bs[#bs] = nil
  Distribution.__init(self, bs, {}, validate)
end
Categorical._check_params = Bernoulli._check_params
Categorical._repr = Bernoulli._repr
function Categorical:expand(bs)
  local k = self._given
  return getmetatable(self)({ [k] = rawget(self, '_' .. k):expand(concat(bs, { self._num_events })),
    validate_args = self._validate_args })
end
function Categorical:get_probs()
  local p = rawget(self, '_probs')
  if p == nil then p = self._logits:softmax(-1); rawset(self, '_probs', p) end
  return p
end
function Categorical:get_logits()
  local l = rawget(self, '_logits')
  if l == nil then l = clamp_probs(self._probs):log(); rawset(self, '_logits', l) end
  return l
end
function Categorical:get_support() return constraints.integer_interval(1, self._num_events) end
function Categorical:get_param_shape() return concat(self.batch_shape, { self._num_events }) end
function Categorical:sample(ss)
  ss = sample_shape_of('Categorical.sample', ss)
  return no_grad(function()
    local K = self._num_events
    local p2 = self.probs:reshape(-1, K)
    local n = 1
    for _, s in ipairs(ss) do n = n * s end
    local draws = n > 0 and T.multinomial(p2, n, true) or T.zeros({ p2:size()[1], 0 }, { dtype = 'int64' })
    -- [batch, n] -> [sample..., batch...]
    return draws:t():reshape(concat(ss, self.batch_shape))
  end)
end
function Categorical:log_prob(value)
  self:_validate_sample(value, 'log_prob')
  local idx = value:to('int64')
  local lg = self.logits
  local ok, r = pcall(T.broadcast_tensors, { idx:unsqueeze(-1), lg })
  if not ok then value_error(fmt('Categorical.log_prob: value of shape %s does not broadcast with batch_shape %s',
    shape_str(shape_of(value)), shape_str(self.batch_shape))) end
  local vi, l = r[1], r[2]
  return l:gather(-1, vi:narrow(-1, 1, 1)):squeeze(-1)
end
function Categorical:entropy()
  local p, l = self.probs, self.logits
  return -T.where(p:gt(0), p * l, T.zeros_like(p)):sum(-1)
end
function Categorical:get_mean() return T.full(self.batch_shape, 0 / 0, opts_of(self.probs)) end
function Categorical:get_variance() return T.full(self.batch_shape, 0 / 0, opts_of(self.probs)) end
function Categorical:get_mode() return self.probs:argmax(-1) end
function Categorical:enumerate_support()
  local K = self._num_events
  local v = T.arange(1, K + 1, { dtype = 'int64' })
  local vs = { K }
  for _ = 1, #self.batch_shape do vs[#vs + 1] = 1 end
  return v:reshape(vs):expand(concat({ K }, self.batch_shape))
end

local OneHotCategorical = dist_class('OneHotCategorical')
OneHotCategorical.arg_constraints = Categorical.arg_constraints
OneHotCategorical._param_names = Categorical._param_names
OneHotCategorical.has_enumerate_support = true
OneHotCategorical.support = constraint('OneHot()', function(x)
  return x:eq(0):logical_or(x:eq(1)):all(-1):logical_and(x:sum(-1):eq(1))
end, { event_dim = 1 })
function OneHotCategorical:__init(a, b, c)
  local probs, logits, validate = pl_args('OneHotCategorical', a, b, c)
  rawset(self, '_categorical', Categorical({ probs = probs, logits = logits, validate_args = validate }))
  local cat = self._categorical
  Distribution.__init(self, cat.batch_shape, { cat._num_events }, validate)
end
function OneHotCategorical:_check_params() end
function OneHotCategorical:_repr() return fmt('OneHotCategorical(%s)', self._categorical:_repr()) end
function OneHotCategorical:get_probs() return self._categorical.probs end
function OneHotCategorical:get_logits() return self._categorical.logits end
function OneHotCategorical:sample(ss)
  local idx = self._categorical:sample(ss)
  return no_grad(function()
    return T.zeros(concat(shape_of(idx), { self._categorical._num_events }), opts_of(self.probs))
      :scatter_(-1, idx:unsqueeze(-1), 1)
  end)
end
function OneHotCategorical:log_prob(x)
  self:_validate_sample(x, 'log_prob')
  return self._categorical:log_prob(x:argmax(-1))
end
function OneHotCategorical:entropy() return self._categorical:entropy() end
function OneHotCategorical:get_mean() return self.probs end
function OneHotCategorical:get_variance() return self.probs * (1 - self.probs) end
function OneHotCategorical:get_mode()
  local p = self.probs
  return T.zeros_like(p):scatter_(-1, p:argmax(-1, true), 1)
end

---------------------------------------------------------------- Gamma and its family
-- standard Gamma(alpha, 1) draws, alpha a tensor (Marsaglia and Tsang; alpha < 1 boosted
-- through Gamma(alpha + 1) * U^(1/alpha)). float32/float64 on the CPU: one C pass
-- (dpl_tensor_standard_gamma: each draw retries on its own counters until accepted); other
-- dtypes and device tensors: whole-tensor rounds here until every element is accepted.
local function standard_gamma_rounds(alpha)
  local o = opts_of(alpha)
  local small = alpha:lt(1)
  local a = T.where(small, alpha + 1, alpha)
  local d = a - 1 / 3
  local c = (d * 9):rsqrt()
  local out = T.zeros_like(a)
  local pending = T.ones_like(a):to('bool')
  for _ = 1, 200 do
    local x = T.randn(shape_of(a), o)
    local v = (x * c + 1) ^ 3
    local u = T.rand(shape_of(a), o)
    local ok = v:gt(0):logical_and(u:log():lt(x * x * 0.5 + d - d * v + d * v:clamp(1e-300):log()))
    local take = ok:logical_and(pending)
    out = T.where(take, d * v, out)
    pending = pending:logical_and(take:logical_not())
    if not pending:any():item() then break end
  end
  local boost = T.rand(shape_of(a), o):pow(alpha:reciprocal())
  out = T.where(small, out * boost, out)
  local tiny = alpha._dtype == 1 and 2.2250738585072014e-308 or 1.1754943508222875e-38
  return out:clamp(tiny)
end
local function standard_gamma(alpha)
  return no_grad(function()
    if alpha._devtype == 0 and (alpha._dtype == 0 or alpha._dtype == 1) then
      local a = alpha:contiguous()
      local out = T.empty_like(a)
      capi.check(capi.C.dpl_tensor_standard_gamma(a, out))
      return out
    end
    return standard_gamma_rounds(alpha)
  end)
end
-- the implicit reparameterization gradient of a standard Gamma draw x in alpha:
-- dx/dalpha = -(dP(alpha, x)/dalpha) / density(x), dP/dalpha by a central difference
local GAMMA_RULE = {
  nin = 1, name = 'Gamma.rsample',
  save = function(n, out, alpha) n.alpha, n.x = alpha, out end,
  bw = function(n, g)
    local a, x = n.alpha:double(), n.x:double()
    local h = a:clamp(1) * 1e-5
    local dP = (SP.gammainc(a + h, x) - SP.gammainc(a - h, x)) / (h * 2)
    local logdens = (a - 1) * x:log() - x - SP.gammaln(a)
    local dx = -dP / logdens:exp()
    return (g:double() * dx):to(T.dtype_names[n.alpha._dtype])
  end,
}
local function rsample_standard_gamma(alpha, shape)
  local a = alpha:expand(shape)
  local x = standard_gamma(a:contiguous())
  if AG().is_grad_enabled() and alpha.requires_grad then x = AG().record(GAMMA_RULE, x, a) end
  return x
end

local Gamma = dist_class('Gamma')
Gamma.arg_constraints = { concentration = constraints.positive, rate = constraints.positive }
Gamma.support = constraints.nonnegative
Gamma.has_rsample = true
Gamma._param_names = { 'concentration', 'rate' }
function Gamma:__init(concentration, rate, validate_args)
  self.concentration, self.rate = broadcast_all('Gamma', { 'concentration', 'rate' }, concentration, rate)
  Distribution.__init(self, shape_of(self.concentration), {}, validate_args)
end
function Gamma:rsample(ss)
  local shape = self:_extended_shape(sample_shape_of('Gamma.rsample', ss))
  return rsample_standard_gamma(self.concentration, shape) / self.rate
end
function Gamma:log_prob(x)
  self:_validate_sample(x, 'log_prob')
  local a, b = self.concentration, self.rate
  return T.xlogy(a, b) + T.xlogy(a - 1, x) - b * x - SP.gammaln(a)
end
function Gamma:entropy()
  local a = self.concentration
  return a - self.rate:log() + SP.gammaln(a) + (1 - a) * SP.digamma(a)
end
function Gamma:cdf(x) return SP.gammainc(self.concentration, self.rate * x) end
function Gamma:get_mean() return self.concentration / self.rate end
function Gamma:get_mode() return ((self.concentration - 1) / self.rate):clamp(0) end
function Gamma:get_variance() return self.concentration / self.rate ^ 2 end

local Chi2 = dist_class('Chi2', Gamma)
Chi2._param_names = { 'df' }
function Chi2:__init(df, validate_args)
  local d = broadcast_all('Chi2', { 'df' }, df)
  Gamma.__init(self, d * 0.5, T.full_like(d, 0.5), validate_args)
  self.df = d
end
function Chi2:_repr() return fmt('Chi2(df: %s)', param_str(self.df)) end

local Beta = dist_class('Beta')
Beta.arg_constraints = { concentration1 = constraints.positive, concentration0 = constraints.positive }
Beta.support = constraints.unit_interval
Beta.has_rsample = true
Beta._param_names = { 'concentration1', 'concentration0' }
function Beta:__init(c1, c0, validate_args)
  self.concentration1, self.concentration0 = broadcast_all('Beta', { 'concentration1', 'concentration0' }, c1, c0)
  Distribution.__init(self, shape_of(self.concentration1), {}, validate_args)
end
function Beta:rsample(ss)
  local shape = self:_extended_shape(sample_shape_of('Beta.rsample', ss))
  local x = rsample_standard_gamma(self.concentration1, shape)
  local y = rsample_standard_gamma(self.concentration0, shape)
  return x / (x + y)
end
local function lbeta(a, b) return SP.gammaln(a) + SP.gammaln(b) - SP.gammaln(a + b) end
local dirichlet_mode
function Beta:log_prob(x)
  self:_validate_sample(x, 'log_prob')
  local a, b = self.concentration1, self.concentration0
  return T.xlogy(a - 1, x) + T.xlogy(b - 1, 1 - x) - lbeta(a, b)
end
function Beta:entropy()
  local a, b = self.concentration1, self.concentration0
  return lbeta(a, b) - (a - 1) * SP.digamma(a) - (b - 1) * SP.digamma(b) + (a + b - 2) * SP.digamma(a + b)
end
function Beta:get_mean() return self.concentration1 / (self.concentration1 + self.concentration0) end
function Beta:get_mode()
  return dirichlet_mode(T.stack({ self.concentration1, self.concentration0 }, -1)):select(-1, 1)
end
function Beta:get_variance()
  local a, b = self.concentration1, self.concentration0
  local t = a + b
  return a * b / (t ^ 2 * (t + 1))
end

local Dirichlet = dist_class('Dirichlet')
Dirichlet.arg_constraints = { concentration = constraint('IndependentConstraint(GreaterThan(lower_bound=0.0), 1)',
  function(x) return x:gt(0):all(-1) end, { event_dim = 1 }) }
Dirichlet.support = constraints.simplex
Dirichlet.has_rsample = true
Dirichlet._param_names = { 'concentration' }
Dirichlet._param_event_dims = { concentration = 1 }
function Dirichlet:__init(concentration, validate_args)
  if not is_tensor(concentration) or concentration._ndim < 1 then
    value_error('Dirichlet: `concentration` parameter must be at least one-dimensional.')
  end
  self.concentration = concentration._dtype > 3 and concentration:float() or concentration
  local s = shape_of(self.concentration)
  local K = s[#s]
  s[#s] = nil
  Distribution.__init(self, s, { K }, validate_args)
end
function Dirichlet:rsample(ss)
  local shape = self:_extended_shape(sample_shape_of('Dirichlet.rsample', ss))
  local g = rsample_standard_gamma(self.concentration, shape)
  return g / g:sum(-1, true)
end
function Dirichlet:log_prob(x)
  self:_validate_sample(x, 'log_prob')
  local c = self.concentration
  return T.xlogy(c - 1, x):sum(-1) + SP.gammaln(c:sum(-1)) - SP.gammaln(c):sum(-1)
end
function Dirichlet:entropy()
  local c = self.concentration
  local K = c:size()[c:dim()]
  local c0 = c:sum(-1)
  return SP.gammaln(c):sum(-1) - SP.gammaln(c0) + (c0 - K) * SP.digamma(c0) - ((c - 1) * SP.digamma(c)):sum(-1)
end
function Dirichlet:get_mean() return self.concentration / self.concentration:sum(-1, true) end
-- (c - 1)+ normalized; where every c < 1, a one-hot at the largest (PyTorch's rule)
function dirichlet_mode(c)
  local m = (c - 1):clamp(0)
  m = m / m:sum(-1, true)
  local all_small = c:lt(1):all(-1, true)
  local hot = T.zeros_like(c):scatter_(-1, c:argmax(-1, true), 1)
  return T.where(all_small:expand_as(c), hot, m)
end
function Dirichlet:get_mode() return dirichlet_mode(self.concentration) end
function Dirichlet:get_variance()
  local c = self.concentration
  local c0 = c:sum(-1, true)
  return c * (c0 - c) / (c0 ^ 2 * (c0 + 1))
end

local StudentT = dist_class('StudentT')
StudentT.arg_constraints = { df = constraints.positive, loc = constraints.real, scale = constraints.positive }
StudentT.has_rsample = true
StudentT._param_names = { 'df', 'loc', 'scale' }
function StudentT:__init(df, loc, scale, validate_args)
  self.df, self.loc, self.scale = broadcast_all('StudentT', { 'df', 'loc', 'scale' }, df, loc == nil and 0 or loc,
    scale == nil and 1 or scale)
  Distribution.__init(self, shape_of(self.df), {}, validate_args)
end
function StudentT:rsample(ss)
  local shape = self:_extended_shape(sample_shape_of('StudentT.rsample', ss))
  local x = T.randn(shape, opts_of(self.df))
  local z = rsample_standard_gamma(self.df * 0.5, shape) * 2 -- Chi2(df)
  return self.loc + self.scale * x * (self.df / z):sqrt()
end
function StudentT:log_prob(x)
  self:_validate_sample(x, 'log_prob')
  local v = self.df
  local y = (x - self.loc) / self.scale
  local Z = self.scale:log() + v:log() * 0.5 + 0.5 * log(pi) + SP.gammaln(v * 0.5) - SP.gammaln((v + 1) * 0.5)
  return -((v + 1) * 0.5) * (y * y / v):log1p() - Z
end
function StudentT:entropy()
  local v = self.df
  return self.scale:log() + (v + 1) * 0.5 * (SP.digamma((v + 1) * 0.5) - SP.digamma(v * 0.5)) + v:log() * 0.5 +
      lbeta(v * 0.5, T.full_like(v, 0.5))
end
function StudentT:get_mean() return T.where(self.df:gt(1), self.loc, T.full_like(self.loc, 0 / 0)) end
function StudentT:get_mode() return self.loc end
function StudentT:get_variance()
  local v = self.df
  local var = self.scale ^ 2 * v / (v - 2)
  var = T.where(v:gt(2), var, T.full_like(var, huge))
  return T.where(v:gt(1), var, T.full_like(var, 0 / 0))
end

---------------------------------------------------------------- Poisson, Binomial, Multinomial
-- Poisson draws: multiplication of uniforms below rate 10, Hormann's PTRS above; float32/float64
-- on the CPU in C (dpl_tensor_poisson: each draw on its own counters), else whole-tensor rounds here
local function poisson_draw(rate)
  return no_grad(function()
    if rate._devtype == 0 and (rate._dtype == 0 or rate._dtype == 1) then
      local out = T.empty_like(rate)
      capi.check(capi.C.dpl_tensor_poisson(rate, out))
      return out
    end
    local o = opts_of(rate)
    local shape = shape_of(rate)
    local out = T.zeros(shape, o)
    local small = rate:lt(10)
    -- small rates: count uniforms until their product drops below exp(-rate)
    if small:any():item() then
      local limit = (-rate):exp()
      local prod = T.ones(shape, o)
      local k = T.zeros(shape, o)
      local pending = small:clone()
      for _ = 1, 1000 do
        prod = prod * T.rand(shape, o)
        local stop = prod:le(limit):logical_and(pending)
        out = T.where(stop, k, out)
        pending = pending:logical_and(stop:logical_not())
        if not pending:any():item() then break end
        k = k + 1
      end
    end
    local big = small:logical_not():logical_and(rate:gt(0))
    if big:any():item() then
      local lam = T.where(big, rate, T.full_like(rate, 10))
      local slam, loglam = lam:sqrt(), lam:log()
      local b = slam * 2.53 + 0.931
      local a = b * 0.02483 - 0.059
      local inva = (b - 3.4):reciprocal() * 1.1328 + 1.1239
      local vr = (b - 2):reciprocal() * -3.6224 + 0.9277
      local pending = big:clone()
      for _ = 1, 1000 do
        local U = T.rand(shape, o) - 0.5
        local V = T.rand(shape, o)
        local us = 0.5 - U:abs()
        local k = ((a * 2 / us + b) * U + lam + 0.43):floor()
        local quick = us:ge(0.07):logical_and(V:le(vr))
        local reject = k:lt(0):logical_or(us:lt(0.013):logical_and(V:gt(us)))
        local lhs = V:log() + inva:log() - (a / (us * us) + b):log()
        local rhs = -lam + k * loglam - SP.gammaln(k + 1)
        local accept = quick:logical_or(reject:logical_not():logical_and(lhs:le(rhs))):logical_and(pending)
        out = T.where(accept, k, out)
        pending = pending:logical_and(accept:logical_not())
        if not pending:any():item() then break end
      end
    end
    return out
  end)
end
local Poisson = dist_class('Poisson')
Poisson.arg_constraints = { rate = constraints.nonnegative }
Poisson.support = constraints.nonnegative_integer
Poisson._param_names = { 'rate' }
function Poisson:__init(rate, validate_args)
  self.rate = broadcast_all('Poisson', { 'rate' }, rate)
  Distribution.__init(self, shape_of(self.rate), {}, validate_args)
end
function Poisson:sample(ss)
  local shape = self:_extended_shape(sample_shape_of('Poisson.sample', ss))
  return poisson_draw(self.rate:expand(shape):contiguous())
end
function Poisson:log_prob(x)
  self:_validate_sample(x, 'log_prob')
  local r = self.rate
  return T.xlogy(x, r) - r - SP.gammaln(x + 1)
end
function Poisson:get_mean() return self.rate end
function Poisson:get_mode() return self.rate:floor() end
function Poisson:get_variance() return self.rate end

local Binomial = dist_class('Binomial')
Binomial.arg_constraints = { total_count = constraints.nonnegative_integer, probs = constraints.unit_interval,
  logits = constraints.real }
Binomial._param_names = { 'total_count', 'probs', 'logits' }
lazy_pair(Binomial)
--- Binomial(total_count, probs) / Binomial({total_count=, probs= | logits=})
function Binomial:__init(n, probs, logits, validate)
  if type(n) == 'table' and not is_tensor(n) then
    n, probs, logits, validate = n.total_count, n.probs, n.logits, n.validate_args
  end
  if n == nil then n = 1 end
  probs_or_logits('Binomial', probs, logits)
  local p = probs ~= nil and probs or logits
  local tc, pt = broadcast_all('Binomial', { 'total_count', probs ~= nil and 'probs' or 'logits' }, n, p)
  self.total_count = tc
  rawset(self, probs ~= nil and '_probs' or '_logits', pt)
  rawset(self, '_given', probs ~= nil and 'probs' or 'logits')
  Distribution.__init(self, shape_of(tc), {}, validate)
end
function Binomial:_check_params()
  if not no_grad(function() return constraints.nonnegative_integer.check(self.total_count):all():item() end) then
    value_error(fmt('Expected parameter total_count (tensor of shape %s) of distribution Binomial to satisfy the constraint '
      .. '%s, but found invalid values:\n%s', shape_str(shape_of(self.total_count)),
      tostring(constraints.nonnegative_integer), tostring(self.total_count)))
  end
  Bernoulli._check_params(self)
end
function Binomial:_repr() return fmt('Binomial(total_count: %s, %s: %s)', param_str(self.total_count), self._given,
  param_str(rawget(self, '_' .. self._given))) end
function Binomial:get_support() return constraints.integer_interval(0, 'total_count') end
function Binomial:_validate_sample(value, name)
  if not is_tensor(value) then value_error(fmt('Binomial.%s: value must be a tensor, got %s', name, type(value))) end
  if not self._validate_args then return end
  local ok = no_grad(function()
    return value:ge(0):logical_and(value:le(self.total_count)):logical_and(value:eq(value:floor())):all():item()
  end)
  if not ok then
    value_error(fmt('Expected value argument (tensor of shape %s) to be within the support (IntegerInterval(lower_bound=0, '
      .. 'upper_bound=total_count)) of the distribution %s, but found invalid values:\n%s', shape_str(shape_of(value)),
      self:_repr(), tostring(value)))
  end
end
-- One Binomial(n, p) draw, n an integer >= 0 (any size), p in [0, 1], from the uniforms u():
-- inversion (BINV) when n min(p, 1-p) < 10, else Hormann's BTRS transformed rejection with the
-- exact log-pmf acceptance test (expected O(1) draws whatever n).
local ffi = require 'ffi'
pcall(ffi.cdef, 'double lgamma(double);')
local lgamma = ffi.C.lgamma
local function binomial_one(n, p, u)
  if n == 0 or p == 0 then return 0 end
  if p == 1 then return n end
  if p > 0.5 then return n - binomial_one(n, 1 - p, u) end
  local q = 1 - p
  if n * p < 10 then
    local s, r0 = p / q, q ^ n
    local a = (n + 1) * s
    while true do
      local r, x, v = r0, 0, u()
      while v > r and x <= n do
        v = v - r
        x = x + 1
        r = r * (a / x - s)
      end
      if x <= n then return x end
    end
  end
  local spq = sqrt(n * p * q)
  local b = 1.15 + 2.53 * spq
  local a = -0.0873 + 0.0248 * b + 0.01 * p
  local c = n * p + 0.5
  local vr = 0.92 - 4.2 / b
  local alpha = (2.83 + 5.1 / b) * spq
  local lpq = log(p / q)
  local m = floor((n + 1) * p)
  local h = lgamma(m + 1) + lgamma(n - m + 1)
  while true do
    local U, V = u() - 0.5, u()
    local us = 0.5 - math.abs(U)
    local k = floor((2 * a / us + b) * U + c)
    if k >= 0 and k <= n then
      if us >= 0.07 and V <= vr then return k end
      V = log(V * alpha / (a / (us * us) + b))
      if V <= h - lgamma(k + 1) - lgamma(n - k + 1) + (k - m) * lpq then return k end
    end
  end
end
D._binomial_one = binomial_one

function Binomial:sample(ss)
  local shape = self:_extended_shape(sample_shape_of('Binomial.sample', ss))
  return no_grad(function()
    local n = self.total_count:expand(shape)
    local p = self.probs:expand(shape)
    local nmax = n:numel() > 0 and n:max():item() or 0
    if nmax <= 64 then -- a sum of nmax Bernoulli draws, whole tensors at a time
      local out = T.zeros(shape, opts_of(p))
      for i = 1, nmax do out = out + T.rand(shape, opts_of(p)):lt(p):logical_and(n:ge(i)):to(T.dtype_names[p._dtype]) end
      return out
    end
    -- element by element (exact at any total_count: 2^40 draws in O(1) each)
    local ns = n:to('float64'):contiguous():reshape(-1):tolist()
    local ps = p:to('float64'):contiguous():reshape(-1):tolist()
    local buf, bi = nil, 1025
    local function u()
      if bi > 1024 then buf, bi = T.rand({ 1024 }, { dtype = 'float64' }):tolist(), 1 end
      local v = buf[bi]
      bi = bi + 1
      return v
    end
    local out = {}
    for i = 1, #ns do out[i] = binomial_one(ns[i], ps[i], u) end
    return T.tensor(out, { dtype = 'float64' }):reshape(shape):to(opts_of(p))
  end)
end
function Binomial:log_prob(k)
  self:_validate_sample(k, 'log_prob')
  local n, l = self.total_count, self.logits
  local lbin = SP.gammaln(n + 1) - SP.gammaln(k + 1) - SP.gammaln(n - k + 1)
  -- k l - n log(1 + e^l)
  return lbin + k * l - n * l:softplus()
end
function Binomial:enumerate_support()
  local n = no_grad(function() return self.total_count:max():item() end)
  if not no_grad(function() return self.total_count:eq(n):all():item() end) then
    not_impl('Binomial: inhomogeneous total_count is not supported by enumerate_support')
  end
  local vs = { n + 1 }
  for _ = 1, #self.batch_shape do vs[#vs + 1] = 1 end
  return T.arange(0, n + 1, opts_of(self.probs)):reshape(vs)
end
function Binomial:entropy()
  local n = no_grad(function() return self.total_count:max():item() end)
  if not no_grad(function() return self.total_count:eq(n):all():item() end) then
    not_impl('Binomial: inhomogeneous total_count is not supported by entropy')
  end
  local lp = self:log_prob(self:enumerate_support())
  return -(lp:exp() * lp):sum(1)
end
function Binomial:get_mean() return self.total_count * self.probs end
function Binomial:get_mode() return T.minimum(((self.total_count + 1) * self.probs):floor(), self.total_count) end
function Binomial:get_variance() return self.total_count * self.probs * (1 - self.probs) end

local Multinomial = dist_class('Multinomial')
Multinomial.arg_constraints = Categorical.arg_constraints
Multinomial._param_names = { 'total_count', 'probs', 'logits' }
--- Multinomial(total_count, probs) / Multinomial({total_count=, probs= | logits=})
function Multinomial:__init(n, probs, logits, validate)
  if type(n) == 'table' and not is_tensor(n) then
    n, probs, logits, validate = n.total_count, n.probs, n.logits, n.validate_args
  end
  if n == nil then n = 1 end
  if type(n) ~= 'number' or n ~= floor(n) or n < 0 then
    value_error(fmt('Multinomial: total_count must be a non-negative integer (inhomogeneous total_count is not '
      .. 'supported, as in PyTorch), got %s', tostring(n)))
  end
  self.total_count = n
  rawset(self, '_categorical', Categorical({ probs = probs, logits = logits, validate_args = validate }))
  local cat = self._categorical
  Distribution.__init(self, cat.batch_shape, { cat._num_events }, validate)
end
function Multinomial:_check_params() end
function Multinomial:_repr() return fmt('Multinomial(total_count: %d, %s)', self.total_count, self._categorical:_repr()) end
function Multinomial:get_probs() return self._categorical.probs end
function Multinomial:get_logits() return self._categorical.logits end
function Multinomial:get_support() return constraint('IntegerInterval(0, total_count) per category', function(x)
  return x:ge(0):logical_and(x:eq(x:floor())):all(-1):logical_and(x:sum(-1):eq(self.total_count))
end) end
function Multinomial:sample(ss)
  ss = sample_shape_of('Multinomial.sample', ss)
  local K = self._categorical._num_events
  return no_grad(function()
    local draws = self._categorical:sample(concat({ self.total_count }, ss)) -- [n, sample..., batch...]
    local counts = T.zeros(concat(shape_of(draws), { K }), opts_of(self.probs))
    counts:scatter_(-1, draws:unsqueeze(-1), 1)
    return counts:sum(1)
  end)
end
function Multinomial:log_prob(x)
  self:_validate_sample(x, 'log_prob')
  local l = self.logits
  local lf = SP.gammaln(x:sum(-1) + 1) - SP.gammaln(x + 1):sum(-1)
  local lg = T.where(x:eq(0), T.zeros_like(l * x), l * x)
  return lf + lg:sum(-1)
end
function Multinomial:entropy()
  local n = self.total_count
  local p = self.probs
  local term1 = self._categorical:entropy() * n - SP.gammaln(T.full({}, n + 1, opts_of(p)))
  if n == 0 then return term1 end
  -- sum over k = 1..n and the categories of Binomial(n, p_i).prob(k) * lgamma(k + 1)
  local vs = { n }
  for _ = 1, p:dim() do vs[#vs + 1] = 1 end
  local k = T.arange(1, n + 1, opts_of(p)):reshape(vs)
  local bin = Binomial(T.full_like(p, n), p, nil, false)
  local lp = bin:log_prob(k:expand(concat({ n }, shape_of(p))))
  local dims = { 1, -1 }
  return term1 + (lp:exp() * SP.gammaln(k + 1)):sum(dims)
end
function Multinomial:get_mean() return self.probs * self.total_count end
function Multinomial:get_variance() return self.probs * (1 - self.probs) * self.total_count end

---------------------------------------------------------------- MultivariateNormal
local MultivariateNormal = dist_class('MultivariateNormal')
MultivariateNormal.arg_constraints = { loc = constraints.real_vector, covariance_matrix = constraints.positive_definite,
  precision_matrix = constraints.positive_definite, scale_tril = constraints.lower_cholesky }
MultivariateNormal.support = constraints.real_vector
MultivariateNormal.has_rsample = true
--- MultivariateNormal(loc, {covariance_matrix= | precision_matrix= | scale_tril=, validate_args=})
function MultivariateNormal:__init(loc, o, c)
  local name = 'MultivariateNormal'
  if is_tensor(o) then o = { covariance_matrix = o } end -- (the positional covariance of PyTorch)
  o = o or {}
  if type(o) ~= 'table' then value_error(name .. ': the second argument must be an options table or a covariance matrix') end
  local given = 0
  for _, k in ipairs({ 'covariance_matrix', 'precision_matrix', 'scale_tril' }) do if o[k] ~= nil then given = given + 1 end end
  if given ~= 1 then
    value_error('Exactly one of covariance_matrix or precision_matrix or scale_tril may be specified.')
  end
  if not is_tensor(loc) or loc._ndim < 1 then value_error('loc must be at least one-dimensional.') end
  local M = o.covariance_matrix or o.precision_matrix or o.scale_tril
  if is_tensor(M) and M._dtype > 3 then M = M:to(loc._dtype == 1 and 'float64' or 'float32') end
  if loc._dtype > 3 then loc = loc:to(is_tensor(M) and T.dtype_names[M._dtype] or 'float32') end
  if not is_tensor(M) or M._ndim < 2 then
    value_error('scale_tril, covariance_matrix or precision_matrix must be at least two-dimensional, with optional '
      .. 'leading batch dimensions')
  end
  local k = tonumber(loc._shape[loc._ndim - 1])
  local validate = o.validate_args
  if validate == nil and type(c) == 'boolean' then validate = c end
  if validate == nil then validate = default_validate end
  local key = o.covariance_matrix and 'covariance_matrix' or o.precision_matrix and 'precision_matrix' or 'scale_tril'
  if validate then
    local con = self.arg_constraints[key]
    if not no_grad(function() return con.check(M):all():item() end) then
      value_error(fmt('Expected parameter %s (tensor of shape %s) of distribution MultivariateNormal to satisfy the '
        .. 'constraint %s, but found invalid values:\n%s', key, shape_str(shape_of(M)), tostring(con), tostring(M)))
    end
  end
  local LA = require 'dpl.linalg'
  local L
  if o.scale_tril then L = o.scale_tril
  elseif o.covariance_matrix then L = LA.cholesky(M)
  else L = LA.cholesky(LA.inv(M)) end
  local ms = shape_of(M)
  if ms[#ms] ~= k or ms[#ms - 1] ~= k then
    value_error(fmt('%s: loc has %d components but the matrix is %dx%d', name, k, ms[#ms - 1], ms[#ms]))
  end
  local lb = shape_of(loc)
  lb[#lb] = nil
  local mb = {}
  for i = 1, #ms - 2 do mb[i] = ms[i] end
  local ok, bl = pcall(T.broadcast_tensors, { T.empty(lb), T.empty(mb) })
  if not ok then value_error(fmt('%s: the batch shapes of loc %s and of the matrix %s do not broadcast', name,
    shape_str(lb), shape_str(mb))) end
  local bs = shape_of(bl[1])
  self.loc = loc:expand(concat(bs, { k }))
  self._unbroadcasted_scale_tril = L
  rawset(self, '_given_key', key)
  rawset(self, '_given', M)
  Distribution.__init(self, bs, { k }, false)
  rawset(self, '_validate_args', validate)
end
function MultivariateNormal:_repr() return fmt('MultivariateNormal(loc: %s, %s: %s)', shape_str(shape_of(self.loc)),
  self._given_key, shape_str(shape_of(self._given))) end
function MultivariateNormal:expand(bs)
  local k = self.event_shape[1]
  return MultivariateNormal(self.loc:expand(concat(bs, { k })),
    { scale_tril = self._unbroadcasted_scale_tril:expand(concat(bs, { k, k })), validate_args = self._validate_args })
end
function MultivariateNormal:get_scale_tril()
  local k = self.event_shape[1]
  return self._unbroadcasted_scale_tril:expand(concat(self.batch_shape, { k, k }))
end
function MultivariateNormal:get_covariance_matrix()
  local L = self._unbroadcasted_scale_tril
  local k = self.event_shape[1]
  return L:matmul(L:transpose(-2, -1)):expand(concat(self.batch_shape, { k, k }))
end
function MultivariateNormal:get_precision_matrix() return require('dpl.linalg').inv(self.covariance_matrix) end
function MultivariateNormal:get_mean() return self.loc end
function MultivariateNormal:get_mode() return self.loc end
function MultivariateNormal:get_variance()
  local k = self.event_shape[1]
  return (self._unbroadcasted_scale_tril ^ 2):sum(-1):expand(concat(self.batch_shape, { k }))
end
function MultivariateNormal:rsample(ss)
  local shape = self:_extended_shape(sample_shape_of('MultivariateNormal.rsample', ss))
  local eps = T.randn(shape, opts_of(self.loc))
  return self.loc + self._unbroadcasted_scale_tril:matmul(eps:unsqueeze(-1)):squeeze(-1)
end
local function half_log_det(L) return L:diagonal(0, -2, -1):log():sum(-1) end
-- |L^-1 x|^2 over the last dim, L broadcast against x's batch dims
local function batch_mahalanobis(L, x)
  local LA = require 'dpl.linalg'
  local k = tonumber(x._shape[x._ndim - 1])
  local xs = shape_of(x)
  xs[#xs] = nil
  local ls = shape_of(L)
  local lb = {}
  for i = 1, #ls - 2 do lb[i] = ls[i] end
  local bl = T.broadcast_tensors({ T.empty(xs), T.empty(lb) })
  local bs = shape_of(bl[1])
  local Le = L:expand(concat(bs, { k, k }))
  local xe = x:expand(concat(bs, { k })):unsqueeze(-1)
  local y = LA.solve_triangular(Le, xe, { upper = false }):squeeze(-1)
  return (y * y):sum(-1)
end
function MultivariateNormal:log_prob(x)
  self:_validate_sample(x, 'log_prob')
  local k = self.event_shape[1]
  local M = batch_mahalanobis(self._unbroadcasted_scale_tril, x - self.loc)
  return -0.5 * (M + k * log(2 * pi)) - half_log_det(self._unbroadcasted_scale_tril)
end
function MultivariateNormal:entropy()
  local k = self.event_shape[1]
  local H = half_log_det(self._unbroadcasted_scale_tril) + 0.5 * k * (1 + log(2 * pi))
  if #self.batch_shape == 0 then return H end
  return H:expand(self.batch_shape)
end

---------------------------------------------------------------- Independent
local Independent = dist_class('Independent')
--- Independent(base_distribution, reinterpreted_batch_ndims)
function Independent:__init(base, n, validate_args)
  if not class.is_instance(base, Distribution) then
    value_error('Independent: base_distribution must be a distribution, got ' .. type(base))
  end
  if type(n) ~= 'number' or n ~= floor(n) or n < 0 or n > #base.batch_shape then
    value_error(fmt('Expected reinterpreted_batch_ndims <= len(base_distribution.batch_shape), actual %s vs %d',
      tostring(n), #base.batch_shape))
  end
  self.base_dist, self.reinterpreted_batch_ndims = base, n
  local bs, es = {}, {}
  local nb = #base.batch_shape
  for i = 1, nb - n do bs[i] = base.batch_shape[i] end
  for i = nb - n + 1, nb do es[#es + 1] = base.batch_shape[i] end
  for _, s in ipairs(base.event_shape) do es[#es + 1] = s end
  Distribution.__init(self, bs, es, false)
  rawset(self, '_validate_args', validate_args)
end
function Independent:_repr() return fmt('Independent(%s, %d)', self.base_dist:_repr(), self.reinterpreted_batch_ndims) end
function Independent:get_has_rsample() return self.base_dist.has_rsample end
function Independent:get_support() return self.base_dist.support end
local function sum_rightmost(x, n)
  if n == 0 then return x end
  local dims = {}
  for i = 1, n do dims[i] = -i end
  return x:sum(dims)
end
function Independent:sample(ss) return self.base_dist:sample(ss) end
function Independent:rsample(ss) return self.base_dist:rsample(ss) end
function Independent:log_prob(x) return sum_rightmost(self.base_dist:log_prob(x), self.reinterpreted_batch_ndims) end
function Independent:entropy() return sum_rightmost(self.base_dist:entropy(), self.reinterpreted_batch_ndims) end
function Independent:get_mean() return self.base_dist.mean end
function Independent:get_mode() return self.base_dist.mode end
function Independent:get_variance() return self.base_dist.variance end
function Independent:expand(bs)
  local full = concat(bs, {})
  local nb = #self.base_dist.batch_shape
  for i = nb - self.reinterpreted_batch_ndims + 1, nb do full[#full + 1] = self.base_dist.batch_shape[i] end
  return Independent(self.base_dist:expand(full), self.reinterpreted_batch_ndims, self._validate_args)
end

---------------------------------------------------------------- KL divergence
-- kl_divergence, register_kl and the closed forms: dpl.distributions_kl
require('dpl.distributions_kl')(D, { value_error = value_error, not_impl = not_impl, no_grad = no_grad,
  softplus = softplus, lbeta = lbeta, half_log_det = half_log_det, batch_mahalanobis = batch_mahalanobis,
  sum_rightmost = sum_rightmost })

-- argument checks at the public entries of every distribution (one place, for each class and
-- the methods it defines): cdf/icdf take a tensor, expand a batch shape (a list; sample's
-- sample_shape is checked by sample_shape_of)
local function check_shape(self, m, s, may_be_nil)
  if s == nil and may_be_nil then return end
  if type(s) ~= 'table' then -- (the sizes in a list are checked where it is read)
    value_error(fmt('%s.%s: %s must be a list of sizes%s, got %s', self.__name, m,
      m == 'expand' and 'batch_shape' or 'sample_shape', may_be_nil and ' (or nil)' or '',
      type(s) == 'number' and tostring(s) or type(s)))
  end
end
local function need_value(self, m, v)
  if not is_tensor(v) then value_error(fmt('%s.%s: value must be a tensor, got %s', self.__name, m, type(v))) end
end
local wrapped = {}
for _, cls in pairs(D) do
  if type(cls) == 'table' and class.is_instance(setmetatable({}, cls), Distribution) and not wrapped[cls] then
    wrapped[cls] = true
    for _, m in ipairs({ 'cdf', 'icdf' }) do
      local f = rawget(cls, m)
      if f then cls[m] = function(self, v, ...) need_value(self, m, v) return f(self, v, ...) end end
    end
    local f = rawget(cls, 'expand')
    if f then cls.expand = function(self, bs, ...) check_shape(self, 'expand', bs, false) return f(self, bs, ...) end end
  end
end

return D
