-- dpl.special: PyTorch's torch.special (gammaln, digamma/psi, polygamma, multigammaln, erf,
-- erfc, erfcx, erfinv, the modified Bessel functions i0/i0e/i1/i1e, ndtr/ndtri/log_ndtr,
-- sinc, entr, xlogy/xlog1py, zeta, gammainc/gammaincc, and the aliases expit, logit, exp2,
-- expm1, log1p, logsumexp, softmax, log_softmax, round), on CPU and GPU tensors; the one- and
-- two-argument functions run in C (src/tensor/dpl_tensor_special.c; on a GPU the backend's
-- kernel with the same per-element math, dpl_special_math.h) and record their
-- gradients with the rules below (zeta's in x and gammainc's in a raise, as PyTorch's).
-- `require 'dpl.special'` is the namespace (dpl.special); dpl.tensor calls it as a function
-- the first time one of the tensor names is read (t:lgamma(), dpl.digamma, t:polygamma(n),
-- t:erfc(), t:i0(), t:sinc(), t:mvlgamma(p), dpl.igamma/igammac, and their `_` forms).
local ffi = require 'ffi'
local C = require('dpl.capi').C
local errors = require 'dpl.errors'
local T = require 'dpl.tensor'

local type, tostring, select = type, tostring, select
local floor, huge, pi, log, sqrt = math.floor, math.huge, math.pi, math.log, math.sqrt
local fmt = string.format
local lua_error = error
local ENOMEM = -2

local S = {}
local is_tensor = T.is_tensor
local out1 = ffi.new('dpl_tensor*[1]')
local SP = { lgamma = 0, digamma = 1, polygamma = 2, erfc = 3, erfcx = 4, i0 = 5, i0e = 6, i1 = 7, i1e = 8,
  ndtr = 9, ndtri = 10, log_ndtr = 11, sinc = 12, zeta = 13, gammainc = 14, gammaincc = 15 }

local function AG() return package.loaded['dpl.autograd'] end
local function value_error(msg) lua_error(errors.ValueError(msg), 0) end
local function got(v)
  if type(v) == 'cdata' then return is_tensor(v) and 'a tensor' or 'cdata (not a tensor)' end
  if type(v) == 'string' then return fmt("'%s'", v) end
  return type(v) == 'number' and tostring(v) or type(v)
end
local function need_tensor(name, what, v)
  if not is_tensor(v) then value_error(fmt('%s: %s must be a tensor, got %s', name, what, got(v))) end
end
-- a number operand of a two-argument function becomes a 0-d tensor of the other's dtype
local function as_tensor(name, what, v, like)
  if is_tensor(v) then return v end
  if type(v) ~= 'number' then value_error(fmt('%s: %s must be a tensor or a number, got %s', name, what, got(v))) end
  local dt = like and T.dtype_names[like._dtype] or 'float32'
  if dt ~= 'float64' and dt ~= 'float16' and dt ~= 'bfloat16' then dt = 'float32' end
  -- (as PyTorch's wrapped number: 1e308 beside a float32 tensor is inf there, not an error naming full)
  return T.tensor(v, { dtype = dt, device = like and like.device or nil })
end
local function wants_grad(...)
  local A = AG()
  if not (A and A.is_grad_enabled()) then return false end
  for i = 1, select('#', ...) do
    local x = select(i, ...)
    if is_tensor(x) and x.requires_grad then return true end
  end
  return false
end
local function save(n, t)
  local A = AG()
  return A.save_for_backward and A.save_for_backward(n, t) or t
end

local function raw1(op, x, n)
  local st = C.dpl_special(op, x, n or 0, out1)
  if st == ENOMEM then collectgarbage(); st = C.dpl_special(op, x, n or 0, out1) end
  if st ~= 0 then T._fail(2, st) end
  return T._wrap(out1)
end
local function raw2(op, a, b)
  local st = C.dpl_special2(op, a, b, out1)
  if st == ENOMEM then collectgarbage(); st = C.dpl_special2(op, a, b, out1) end
  if st ~= 0 then T._fail(2, st) end
  return T._wrap(out1)
end

-- the derivative of each one-argument function at x (y: its value, n: polygamma's order)
local deriv = {}
local function one(name, op, fn_deriv)
  deriv[name] = fn_deriv
  local rule = {
    nin = 1, name = name,
    save = function(nd, out, x, n) nd.x, nd.y, nd.order = save(nd, x), save(nd, out), n end,
    bw = function(nd, g) return g * deriv[name](nd.x, nd.y, nd.order) end,
  }
  return function(x, n)
    need_tensor(name, 'input', x)
    if n ~= nil and op ~= SP.polygamma then value_error(fmt('%s: takes one tensor, got a second argument (%s)', name, got(n))) end
    local y = raw1(op, x, n)
    if wants_grad(x) then y = AG().record(rule, y, x, n) end
    return y
  end
end
local function where0(x, v, other) -- v where x == 0, else other
  return T.where(x:eq(0), T.full({}, v, { dtype = T.dtype_names[other._dtype], device = other.device }), other)
end

S.gammaln = one('lgamma', SP.lgamma, function(x) return S.digamma(x) end)
S.digamma = one('digamma', SP.digamma, function(x) return S.polygamma(1, x) end)
local polygamma1 = one('polygamma', SP.polygamma, function(x, _, n) return S.polygamma(n + 1, x) end)
--- special.polygamma(n, x): the n-th derivative of digamma (n >= 0)
function S.polygamma(n, x)
  if type(n) ~= 'number' or n ~= floor(n) or n < 0 or n >= 2 ^ 63 then -- (1e308 reached C as -2^63)
    value_error(fmt('polygamma: n must be a non-negative integer, got %s', got(n)))
  end
  need_tensor('polygamma', 'input', x)
  return polygamma1(x, n)
end
S.erfc = one('erfc', SP.erfc, function(x) return (-(x * x)):exp() * (-2 / sqrt(pi)) end)
S.erfcx = one('erfcx', SP.erfcx, function(x, y) return x * y * 2 - 2 / sqrt(pi) end)
S.i0 = one('i0', SP.i0, function(x) return S.i1(x) end)
S.i0e = one('i0e', SP.i0e, function(x, y) return S.i1e(x) - x:sign() * y end)
S.i1 = one('i1', SP.i1, function(x, y) return where0(x, 0.5, S.i0(x) - y / where0(x, 1, x)) end)
S.i1e = one('i1e', SP.i1e, function(x, y)
  return where0(x, 0.5, S.i0e(x) - y * (x:sign() + where0(x, 1, x):reciprocal()))
end)
S.ndtr = one('ndtr', SP.ndtr, function(x) return (x * x * -0.5):exp() * (1 / sqrt(2 * pi)) end)
S.ndtri = one('ndtri', SP.ndtri, function(_, y) return (y * y * 0.5):exp() * sqrt(2 * pi) end)
S.log_ndtr = one('log_ndtr', SP.log_ndtr, function(x, y) return (x * x * -0.5 - y):exp() * (1 / sqrt(2 * pi)) end)
S.sinc = one('sinc', SP.sinc, function(x)
  local px = where0(x, 1, x) * pi
  return where0(x, 0, ((px):cos() * px - px:sin()) / (px * where0(x, 1, x)))
end)
S.psi = S.digamma

-- two-argument functions: zeta(x, q), gammainc(a, x), gammaincc(a, x)
local function two(name, op, grad1_msg, grad2)
  local rule = {
    nin = 2, name = name,
    save = function(nd, out, a, b) nd.a, nd.b = save(nd, a), save(nd, b) end,
    bw = function(nd, g)
      if nd[1] then lua_error(errors.NotImplementedError(grad1_msg), 0) end
      return nil, g * grad2(nd.a, nd.b)
    end,
  }
  return function(a, b)
    if not is_tensor(a) and not is_tensor(b) then
      value_error(fmt('%s: expected at least one tensor argument, got %s and %s', name, got(a), got(b)))
    end
    a = as_tensor(name, 'input', a, is_tensor(b) and b or nil)
    b = as_tensor(name, 'other', b, a)
    local y = raw2(op, a, b)
    if wants_grad(a, b) then y = AG().record(rule, y, a, b) end
    return y
  end
end
--- special.zeta(x, q): Hurwitz's zeta, sum over k >= 0 of (q + k)^-x
S.zeta = two('zeta', SP.zeta, "the derivative for 'zeta' with respect to x is not implemented (as in PyTorch)",
  function(x, q) return -x * S.zeta(x + 1, q) end)
local function gammainc_dx(a, x) return (-x + (a - 1) * x:log() - S.gammaln(a)):exp() end
--- special.gammainc(a, x) / gammaincc(a, x): the regularized lower / upper incomplete gamma
S.gammainc = two('gammainc', SP.gammainc, "the derivative for 'gammainc' with respect to a is not implemented "
  .. '(as in PyTorch)', gammainc_dx)
S.gammaincc = two('gammaincc', SP.gammaincc, "the derivative for 'gammaincc' with respect to a is not implemented "
  .. '(as in PyTorch)', function(a, x) return -gammainc_dx(a, x) end)

--- special.multigammaln(x, p): log of the multivariate gamma function of dimension p
function S.multigammaln(x, p)
  local name = 'multigammaln'
  need_tensor(name, 'input', x)
  if type(p) ~= 'number' or p ~= floor(p) or p < 1 then value_error(fmt('%s: p must be an integer >= 1, got %s', name, got(p))) end
  if x:numel() == 0 then return S.gammaln(x) end -- (the sum below has p terms, even when empty)
  if p > 2 ^ 24 then value_error(fmt('%s: p must be at most 2^24, got %s', name, got(p))) end
  if not x:gt((p - 1) / 2):all():item() then
    lua_error(errors.RuntimeError(fmt('%s: All elements must be greater than (p-1)/2', name)), 0)
  end
  local r = S.gammaln(x)
  for j = 1, p - 1 do r = r + S.gammaln(x - j / 2) end
  return r + p * (p - 1) / 4 * log(pi)
end
--- special.entr(x): -x log x (0 at 0, -inf below)
function S.entr(x)
  need_tensor('entr', 'input', x)
  local pos = x:gt(0)
  local safe = T.where(pos, x, T.ones_like(x))
  local v = -safe * safe:log()
  return T.where(pos, v, T.where(x:eq(0), T.zeros_like(x), T.full_like(x, -huge)))
end
--- special.xlog1py(x, y): x * log1p(y), 0 where x is 0 (and y is not nan)
function S.xlog1py(x, y)
  local name = 'xlog1py'
  if not is_tensor(x) and not is_tensor(y) then value_error(name .. ': expected at least one tensor argument') end
  x = as_tensor(name, 'input', x, is_tensor(y) and y or nil)
  y = as_tensor(name, 'other', y, x)
  local zero = x:eq(0):logical_and(y:eq(y))
  local safe = T.where(zero, T.zeros_like(y), y)
  local r = x * safe:log1p()
  return T.where(zero, T.zeros_like(r), r)
end

-- the functions torch.special shares with torch
S.erf = function(x) need_tensor('erf', 'input', x); return x:erf() end
S.erfinv = function(x) need_tensor('erfinv', 'input', x); return x:erfinv() end
S.expit = function(x) need_tensor('expit', 'input', x); return x:sigmoid() end
S.logit = function(x, eps) need_tensor('logit', 'input', x); return x:logit(eps) end
S.exp2 = function(x) need_tensor('exp2', 'input', x); return x:exp2() end
S.expm1 = function(x) need_tensor('expm1', 'input', x); return x:expm1() end
S.log1p = function(x) need_tensor('log1p', 'input', x); return x:log1p() end
S.round = function(x, ...) need_tensor('round', 'input', x); return x:round(...) end
S.xlogy = function(x, y) return T.xlogy(x, y) end
S.logsumexp = function(x, ...) need_tensor('logsumexp', 'input', x); return x:logsumexp(...) end
S.softmax = function(x, ...) need_tensor('softmax', 'input', x); return x:softmax(...) end
S.log_softmax = function(x, ...) need_tensor('log_softmax', 'input', x); return x:log_softmax(...) end
S.modified_bessel_i0, S.modified_bessel_i1 = S.i0, S.i1

local MISSING = [[airy_ai bessel_j0 bessel_j1 bessel_y0 bessel_y1 chebyshev_polynomial_t chebyshev_polynomial_u
  chebyshev_polynomial_v chebyshev_polynomial_w hermite_polynomial_h hermite_polynomial_he laguerre_polynomial_l
  legendre_polynomial_p modified_bessel_k0 modified_bessel_k1 scaled_modified_bessel_k0 scaled_modified_bessel_k1
  shifted_chebyshev_polynomial_t shifted_chebyshev_polynomial_u shifted_chebyshev_polynomial_v
  shifted_chebyshev_polynomial_w spherical_bessel_j0]]
for n in MISSING:gmatch('%S+') do
  S[n] = function() lua_error(errors.NotImplementedError(fmt('special.%s: not implemented in dplhost', n)), 0) end
end

-- tensor names: dpl.X functions and t:X() methods (in-place forms copy the result back)
local function inplace(f)
  return function(x, ...)
    local r = f(x, ...)
    x:copy_(r)
    return x
  end
end
local tensor_names = {
  lgamma = S.gammaln, digamma = S.digamma, erfc = S.erfc, i0 = S.i0, sinc = S.sinc,
  polygamma = function(a, b) -- dpl.polygamma(n, x) and x:polygamma(n)
    if is_tensor(a) then return S.polygamma(b, a) end
    return S.polygamma(a, b)
  end,
  mvlgamma = S.multigammaln, igamma = S.gammainc, igammac = S.gammaincc,
}

return setmetatable(S, { __call = function(_, M)
  for k, f in pairs(tensor_names) do
    M[k], M.methods[k] = f, f
  end
  for _, k in ipairs({ 'lgamma', 'digamma', 'erfc', 'i0', 'sinc', 'mvlgamma', 'igamma', 'igammac' }) do
    M.methods[k .. '_'] = inplace(tensor_names[k])
  end
  M.methods.polygamma_ = function(x, n)
    need_tensor('polygamma_', 'self', x)
    x:copy_(S.polygamma(n, x))
    return x
  end
end })
