-- dpl.tensor_math: the math group of PyTorch's Tensor methods on dpl.tensor's handles:
-- unary math (log10, exp2, sinh, cosh, tan, asin, acos, atan, asinh, acosh, atanh, frac),
-- the activations hardtanh, softplus, elu, leaky_relu, mish, hardswish, the predicates
-- isinf, isfinite, nan_to_num, isclose, allclose, equal, the bitwise ops, true_divide,
-- lerp, addcmul, addcdiv, outer, cross, kron, baddbmm, and the reductions amax, amin,
-- aminmax, nansum, nanmean, std_mean, var_mean. Each is a tensor method and a function of
-- the module (dpl.lerp(a, b, w) as a:lerp(b, w)). dpl.tensor installs them
-- (require('dpl.tensor_math')(M, helpers)) before dpl.autograd wraps the differentiable
-- ones (dpl.autograd_rules, "math group"); the rest compose differentiable ops.
-- Elementwise kernels are C (src/tensor/dpl_tensor_math.c, dpl_unary, dpl_binary).
-- Optional arguments follow the conventions of add/clamp/addmm: positional, or one options
-- table with PyTorch's keyword names (t:elu(0.5) or t:elu{alpha = 0.5}), checked by
-- dpl.options (an unknown key is an error). Dims are 1-based, negative from the end.
local C = require('dpl.capi').C
local bit = require 'bit'
local rethrow = error -- (the builtin: H.error below wraps strings)
local options = require 'dpl.options'
local errors = require 'dpl.errors'

local type, tostring, floor, huge = type, tostring, math.floor, math.huge
local fmt = string.format
local check_opts, keys = options.check, options.keys

-- unary ops of dpl_unop (include/dpl.h) added by this group
local UOP = { log10 = 26, exp2 = 27, sinh = 28, cosh = 29, tan = 30, asin = 31, acos = 32, atan = 33, asinh = 34,
  acosh = 35, atanh = 36, frac = 37, isinf = 38, isfinite = 39, bitwise_not = 40 }
local NO_INPLACE = { isinf = true, isfinite = true } -- (PyTorch has no isinf_)
local BITWISE = { bitwise_and = 27, bitwise_or = 28, bitwise_xor = 29 }
local OP_EQ = 16
-- activations of dpl_actop, their parameters (PyTorch's names, defaults)
local ACT = {
  hardtanh = { id = 0, 'min_val', 'max_val', -1, 1, inplace = true },
  softplus = { id = 1, 'beta', 'threshold', 1, 20 },
  elu = { id = 2, 'alpha', nil, 1, 0, inplace = true },
  leaky_relu = { id = 3, 'negative_slope', nil, 0.01, 0, inplace = true },
  mish = { id = 4, inplace = true },
  hardswish = { id = 5, inplace = true },
}
for _, a in pairs(ACT) do a.keys = keys(a[1] or {}, a[2] or {}) end
-- nan_to_num's defaults: the largest finite value of each floating dtype
local DT_MAX = { [0] = 3.4028234663852886e38, 1.7976931348623157e308, 65504, 3.3895313892515355e38 }

local K_CLOSE = keys('rtol', 'atol', 'equal_nan')
local K_N2N = keys('nan', 'posinf', 'neginf')
local K_VALUE = keys('value')
local K_DIM = keys('dim')
local K_MM = keys('beta', 'alpha')
local K_AMM = keys('dim', 'keepdim')

return function(M, H)
  local fail, error = H.fail, H.error
  local binop, reduce, cdim = H.binop, H.reduce, H.cdim
  local need_tensor, need_number = H.need_tensor, H.need_number
  local is_tensor, methods, dtype_names = M.is_tensor, M.methods, M.dtype_names
  local out1, wrap = H.out1, M._wrap
  local ENOMEM = -2
  -- C fn(args..., out1) -> the new tensor; a failure raises its status's class (a tensor in GPU
  -- memory: NotImplementedError "<op>: not implemented on cuda", as PyTorch's missing kernels)
  local function call1(fn, ...)
    local st = fn(...)
    if st == ENOMEM then collectgarbage() st = fn(...) end
    if st ~= 0 then fail(2, st) end
    return wrap(out1)
  end
  local function check(st) if st ~= 0 then fail(2, st) end end
  -- the raw view and copy ops (autograd wraps methods later; the ops with a rule of their own
  -- use these so that their insides are not recorded)
  local raw = { reshape = methods.reshape, clamp = methods.clamp, bmm = methods.bmm, mul_ = methods.mul_,
    add_ = methods.add_, add = methods.add, to = methods.to, copy_ = methods.copy_, where = M.where,
    isnan = methods.isnan, sum = methods.sum, mul = methods.mul, div = methods.div, gt = methods.gt, ge = methods.ge, le = methods.le,
    lt = methods.lt, exp = methods.exp, expm1 = methods.expm1, log1p = methods.log1p, tanh = methods.tanh,
    sigmoid = methods.sigmoid }
  for k, v in pairs(raw) do
    if v == nil then error(fmt('tensor_math: the raw method %s is missing', k)) end
  end

  local function got(v) return type(v) == 'cdata' and (is_tensor(v) and 'a tensor' or 'cdata') or type(v) end
  local function not_impl(msg) error(errors.NotImplementedError(msg)) end
  local function need_bool(name, what, v)
    if v ~= nil and type(v) ~= 'boolean' then error(fmt('%s: %s must be a boolean, got %s', name, what, got(v))) end
  end
  local function is_float(t) return t._dtype <= 3 end
  local function size_of(t)
    local r = {}
    for i = 1, t._ndim do r[i] = tonumber(t._shape[i - 1]) end
    return r
  end
  -- positional values, or one options table (checked) with the keys names[1..3]
  local function params(name, accepted, n1, n2, n3, a1, a2, a3)
    if type(a1) == 'table' and not is_tensor(a1) then
      if a2 ~= nil then error(fmt('%s: the options table must be the last argument, got %s after it', name, got(a2))) end
      check_opts(a1, accepted, name)
      return a1[n1], n2 and a1[n2], n3 and a1[n3]
    end
    return a1, a2, a3
  end

  ---------------------------------------------------------------- unary math
  for name, op in pairs(UOP) do
    methods[name] = function(t)
      if not is_tensor(t) then need_tensor(name, 'input', t) end
      return call1(C.dpl_unary, op, t, out1)
    end
    if not NO_INPLACE[name] then
      methods[name .. '_'] = function(t)
        if not is_tensor(t) then need_tensor(name .. '_', 'self', t) end
        check(C.dpl_unary_(op, t))
        return t
      end
    end
    M[name] = methods[name]
  end

  ---------------------------------------------------------------- activations
  -- an activation's parameters (p0, p1) from its arguments; nil (all defaults) or numbers
  local function act_params(name, a1, a2, a3)
    local a = ACT[name]
    if not a[1] then
      if a1 ~= nil and not (type(a1) == 'table' and next(a1) == nil) then
        error(fmt('%s: takes no arguments, got %s', name, got(a1)))
      end
      return 0, 0
    end
    local p0, p1, extra = params(name, a.keys, a[1], a[2], nil, a1, a2, a3)
    if extra ~= nil or (not a[2] and p1 ~= nil) then
      error(fmt('%s: too many arguments (expected %s)', name, a[2] and (a[1] .. ', ' .. a[2]) or a[1]))
    end
    if p0 == nil then p0 = a[3] else need_number(name, a[1], p0) end
    if p1 == nil then p1 = a[4] else need_number(name, a[2], p1) end
    return p0, p1
  end
  M._act_params = act_params

  -- hardtanh of an integer tensor clamps to the bounds truncated toward zero, keeping the dtype
  -- (PyTorch's); bool is refused
  local function int_hardtanh(name, t, lo, hi, inplace)
    if t._dtype == 7 then error(fmt('%s: bool tensors are not supported', name)) end
    local function tr(v) return v < 0 and math.ceil(v) or floor(v) end
    if t._dtype == 6 and (tr(lo) < 0 or tr(hi) < 0) then -- (PyTorch's check, on the truncated bounds)
      error(fmt('%s: cannot do hardtanh on an unsigned type (uint8) with negative limits, got min_val %s, max_val %s',
        name, tostring(lo), tostring(hi)))
    end
    if inplace then return methods.clamp_(t, tr(lo), tr(hi)) end
    return raw.clamp(t, tr(lo), tr(hi))
  end

  -- The C kernels run on the CPU (and simulated GPUs); a tensor in GPU memory composes the same
  -- formulas (PyTorch 1.13's, those of src/tensor/dpl_tensor_math.c) from ops the CUDA plugin
  -- runs, float16/bfloat16 through float32 as there: one rounding to the dtype at the end.
  local function devmem(t) return bit.band(t._flags, 2) ~= 0 end
  local function kd32(t)
    if t._dtype == 2 or t._dtype == 3 then return raw.to(t, 'float32') end
    return t
  end
  -- fn(...) composed of GPU ops; where one is not implemented there (no plugin), nil: the caller
  -- goes on to the C kernel, whose error names the activation
  local function composed(fn, ...)
    local ok, r = pcall(fn, ...)
    if ok then return r end
    if errors.is(r, errors.NotImplementedError) then return nil end
    rethrow(r, 0)
  end
  local function act_dev(id, x, p0, p1)
    local xf, y = kd32(x), nil
    if id == 0 then y = raw.clamp(xf, p0, p1)
    elseif id == 1 then
      local bx = raw.mul(xf, p0)
      y = raw.where(raw.gt(bx, p1), xf, raw.div(raw.log1p(raw.exp(bx)), p0))
    elseif id == 2 then y = raw.where(raw.le(xf, 0), raw.mul(raw.expm1(xf), p0), xf)
    elseif id == 3 then y = raw.where(raw.gt(xf, 0), xf, raw.mul(xf, p0))
    elseif id == 4 then y = raw.mul(xf, raw.tanh(raw.log1p(raw.exp(xf))))
    else y = raw.div(raw.mul(xf, raw.clamp(raw.add(xf, 3), 0, 6)), 6) end
    if y._dtype ~= x._dtype then y = raw.to(y, dtype_names[x._dtype]) end
    return y
  end
  local function act_bwd_dev(id, g, x, p0, p1)
    -- the promoted float dtype (float32 0, float64 1, float16 2, bfloat16 3)
    local rd = g._dtype == x._dtype and g._dtype or ((g._dtype == 1 or x._dtype == 1) and 1 or 0)
    local gf, xf, r = kd32(g), kd32(x), nil
    if id == 0 then r = raw.where(raw.le(xf, p0), 0, raw.where(raw.ge(xf, p1), 0, gf)) -- (NaN passes g)
    elseif id == 1 then
      local bx = raw.mul(xf, p0)
      local z = raw.exp(bx)
      r = raw.where(raw.gt(bx, p1), gf, raw.div(raw.mul(gf, z), raw.add(z, 1)))
    elseif id == 2 then r = raw.where(raw.le(xf, 0), raw.mul(raw.mul(gf, p0), raw.exp(xf)), gf)
    elseif id == 3 then r = raw.where(raw.gt(xf, 0), gf, raw.mul(gf, p0))
    elseif id == 4 then
      local sg = raw.sigmoid(xf)
      local ts = raw.tanh(raw.log1p(raw.exp(xf)))
      r = raw.mul(gf, raw.add(ts, raw.mul(raw.mul(xf, sg), raw.add(raw.mul(raw.mul(ts, ts), -1), 1))))
    else
      r = raw.where(raw.lt(xf, -3), 0, raw.where(raw.le(xf, 3), raw.mul(gf, raw.add(raw.div(xf, 3), 0.5)), gf))
    end
    if r._dtype ~= rd then r = raw.to(r, dtype_names[rd]) end
    return r
  end

  for name, a in pairs(ACT) do
    local id = a.id
    methods[name] = function(t, a1, a2, a3)
      if not is_tensor(t) then need_tensor(name, 'input', t) end
      local p0, p1 = act_params(name, a1, a2, a3)
      if id == 0 and not is_float(t) then return int_hardtanh(name, t, p0, p1) end
      if is_float(t) and devmem(t) then
        local y = composed(act_dev, id, t, p0, p1)
        if y then return y end
      end
      return call1(C.dpl_act, id, t, p0, p1, out1)
    end
    M[name] = methods[name]
    if a.inplace then
      local iname = name .. '_'
      methods[iname] = function(t, a1, a2, a3)
        if not is_tensor(t) then need_tensor(iname, 'self', t) end
        local p0, p1 = act_params(iname, a1, a2, a3)
        if id == 0 and not is_float(t) then return int_hardtanh(iname, t, p0, p1, true) end
        if is_float(t) and devmem(t) then
          local y = composed(function() return raw.copy_(t, act_dev(id, t, p0, p1)) end)
          if y then return y end
        end
        check(C.dpl_act_(id, t, p0, p1))
        return t
      end
    end
  end
  ACT.hardtanh_, ACT.elu_, ACT.leaky_relu_, ACT.mish_, ACT.hardswish_ = ACT.hardtanh, ACT.elu, ACT.leaky_relu,
    ACT.mish, ACT.hardswish

  --- act_backward(name, grad, x, p0, p1): grad * f'(x) for the activations above (their rules).
  function M.act_backward(name, grad, x, p0, p1)
    local a = ACT[name]
    if not a then error(fmt("act_backward: unknown activation '%s'", tostring(name))) end
    need_tensor('act_backward', 'grad', grad)
    need_tensor('act_backward', 'input', x)
    if devmem(grad) and devmem(x) and is_float(grad) and is_float(x) and grad._ndim == x._ndim then
      local same = true
      for i = 0, x._ndim - 1 do if grad._shape[i] ~= x._shape[i] then same = false end end
      local r = same and composed(act_bwd_dev, a.id, grad, x, p0 or 0, p1 or 0)
      if r then return r end
    end
    return call1(C.dpl_act_backward, a.id, grad, x, p0 or 0, p1 or 0, out1)
  end

  ---------------------------------------------------------------- predicates
  local function n2n_params(name, t, a1, a2, a3)
    local nan, pinf, ninf = params(name, K_N2N, 'nan', 'posinf', 'neginf', a1, a2, a3)
    if nan ~= nil then need_number(name, 'nan', nan) end
    if pinf ~= nil then need_number(name, 'posinf', pinf) end
    if ninf ~= nil then need_number(name, 'neginf', ninf) end
    local mx = DT_MAX[t._dtype] or 0
    return nan or 0, pinf or mx, ninf or -mx
  end
  M._n2n_params = n2n_params
  --- nan_to_num(nan=0, posinf=<largest finite>, neginf=<lowest finite>), or {nan=, posinf=, neginf=}
  function methods.nan_to_num(t, a1, a2, a3)
    if not is_tensor(t) then need_tensor('nan_to_num', 'input', t) end
    local nan, pinf, ninf = n2n_params('nan_to_num', t, a1, a2, a3)
    return call1(C.dpl_nan_to_num, t, nan, pinf, ninf, out1)
  end
  function methods.nan_to_num_(t, a1, a2, a3)
    if not is_tensor(t) then need_tensor('nan_to_num_', 'self', t) end
    local nan, pinf, ninf = n2n_params('nan_to_num_', t, a1, a2, a3)
    check(C.dpl_nan_to_num_(t, nan, pinf, ninf))
    return t
  end
  M.nan_to_num = methods.nan_to_num

  local function close_args(name, a, b, a1, a2, a3)
    need_tensor(name, 'input', a)
    need_tensor(name, 'other', b)
    local rtol, atol, en = params(name, K_CLOSE, 'rtol', 'atol', 'equal_nan', a1, a2, a3)
    if rtol ~= nil then need_number(name, 'rtol', rtol) end
    if atol ~= nil then need_number(name, 'atol', atol) end
    need_bool(name, 'equal_nan', en)
    return rtol or 1e-5, atol or 1e-8, en and 1 or 0
  end
  --- isclose(other, rtol=1e-5, atol=1e-8, equal_nan=false) or (other, {rtol=, atol=, equal_nan=}): bool
  function methods.isclose(a, b, a1, a2, a3)
    local rtol, atol, en = close_args('isclose', a, b, a1, a2, a3)
    return call1(C.dpl_isclose, a, b, rtol, atol, en, out1)
  end
  --- allclose(other, ...): a Lua boolean, isclose(...):all()
  function methods.allclose(a, b, a1, a2, a3)
    local rtol, atol, en = close_args('allclose', a, b, a1, a2, a3)
    local c = call1(C.dpl_isclose, a, b, rtol, atol, en, out1)
    local r = reduce('all', c, nil, false):item()
    C.dpl_tensor_free_data(c)
    return r
  end
  --- equal(other): a Lua boolean, true when both have the same shape and the same values
  --- (compared after type promotion, as torch.equal; NaN is not equal to itself)
  function methods.equal(a, b)
    need_tensor('equal', 'input', a)
    need_tensor('equal', 'other', b)
    if a._storage == nil or b._storage == nil then binop(OP_EQ, a, b) end -- (raises: a freed tensor)
    if a._ndim ~= b._ndim then return false end
    for i = 0, a._ndim - 1 do
      if a._shape[i] ~= b._shape[i] then return false end
    end
    if a._devtype ~= b._devtype or a._devindex ~= b._devindex then binop(OP_EQ, a, b) end -- (raises: devices)
    if a._numel == 0 then return true end
    local e = binop(OP_EQ, a, b)
    local r = reduce('all', e, nil, false):item()
    C.dpl_tensor_free_data(e)
    return r
  end
  M.isclose, M.allclose, M.equal = methods.isclose, methods.allclose, methods.equal

  ---------------------------------------------------------------- bitwise
  local function bit_operand(name, a, b)
    local ta, tb = type(a), type(b)
    if not is_tensor(a) and ta ~= 'number' and ta ~= 'boolean' then
      error(fmt('%s: input must be a tensor, a number or a boolean, got %s', name, got(a)))
    end
    if not is_tensor(b) and tb ~= 'number' and tb ~= 'boolean' then
      error(fmt('%s: other must be a tensor, a number or a boolean, got %s', name, got(b)))
    end
    if not is_tensor(a) and not is_tensor(b) then error(fmt('%s: at least one operand must be a tensor', name)) end
    if ta == 'boolean' then a = M.tensor(a, { device = b.device }) end
    return a, b
  end
  for name, op in pairs(BITWISE) do
    --- bitwise_and(other) etc.: integer and bool tensors (a floating operand is an error, as in PyTorch)
    methods[name] = function(a, b)
      a, b = bit_operand(name, a, b)
      if type(b) == 'boolean' then b = M.tensor(b, { device = a.device }) end
      if type(b) == 'number' then return call1(C.dpl_binary_scalar, op, a, b, 0, out1) end
      if type(a) == 'number' then return call1(C.dpl_binary_scalar, op, b, a, 1, out1) end
      return call1(C.dpl_binary, op, a, b, out1)
    end
    methods[name .. '_'] = function(a, b)
      if not is_tensor(a) then need_tensor(name .. '_', 'self', a) end
      a, b = bit_operand(name .. '_', a, b)
      if type(b) == 'boolean' then b = M.tensor(b, { device = a.device }) end
      if type(b) == 'number' then check(C.dpl_binary_scalar_(op, a, b)) else check(C.dpl_binary_(op, a, b)) end
      return a
    end
    M[name] = methods[name]
  end

  ---------------------------------------------------------------- binary, ternary
  --- true_divide(other): div (always true division: integers give float32)
  function methods.true_divide(a, b, extra)
    if extra ~= nil then error(fmt('true_divide: takes one argument (other), got %s as a second one', got(extra))) end
    return methods.div(a, b)
  end
  function methods.true_divide_(a, b, extra)
    if extra ~= nil then error(fmt('true_divide_: takes one argument (other), got %s as a second one', got(extra))) end
    return methods.div_(a, b)
  end
  M.true_divide = methods.true_divide

  local function lerp_args(name, s, e, w)
    need_tensor(name, 'input', s)
    need_tensor(name, 'end', e)
    if is_tensor(w) then return w, 0 end
    if type(w) ~= 'number' then error(fmt('%s: weight must be a number or a tensor, got %s', name, got(w))) end
    return nil, w
  end
  --- lerp(end, weight): input + weight * (end - input); weight a number or a tensor (broadcast)
  function methods.lerp(s, e, w)
    local wt, wv = lerp_args('lerp', s, e, w)
    return call1(C.dpl_lerp, s, e, wt, wv, out1)
  end
  function methods.lerp_(s, e, w)
    local wt, wv = lerp_args('lerp_', s, e, w)
    check(C.dpl_lerp_(s, e, wt, wv))
    return s
  end
  M.lerp = methods.lerp

  -- value of addcmul/addcdiv: a number, or {value = number} (PyTorch's keyword)
  local function addc_value(name, v, extra)
    if extra ~= nil then error(fmt('%s: too many arguments (expected tensor1, tensor2, value)', name)) end
    if type(v) == 'table' then
      check_opts(v, K_VALUE, name)
      v = v.value
    end
    if v == nil then return 1 end
    if type(v) == 'boolean' then return v and 1 or 0 end -- (a Python bool is a Scalar in PyTorch)
    need_number(name, 'value', v)
    return v
  end
  M._addc_value = addc_value
  -- the value of an integer input is converted to its dtype, as PyTorch checks it (uint8's
  -- 300: an error, not 44)
  local function int_value(name, v, s)
    if s._dtype >= 4 and s._dtype <= 6 then M._check_scalar(name, v, s._dtype) end
    return v
  end
  for _, name in ipairs({ 'addcmul', 'addcdiv' }) do
    local div = name == 'addcdiv' and 1 or 0
    --- addcmul(tensor1, tensor2, value=1): input + value * tensor1 * tensor2 (addcdiv: / tensor2)
    methods[name] = function(s, t1, t2, v, extra)
      need_tensor(name, 'input', s)
      need_tensor(name, 'tensor1', t1)
      need_tensor(name, 'tensor2', t2)
      return call1(C.dpl_addcmul, div, s, t1, t2, int_value(name, addc_value(name, v, extra), s), out1)
    end
    methods[name .. '_'] = function(s, t1, t2, v, extra)
      local iname = name .. '_'
      need_tensor(iname, 'self', s)
      need_tensor(iname, 'tensor1', t1)
      need_tensor(iname, 'tensor2', t2)
      check(C.dpl_addcmul_(div, s, t1, t2, int_value(iname, addc_value(iname, v, extra), s)))
      return s
    end
    M[name] = methods[name]
  end

  --- outer(vec2): the outer product of two 1-d tensors, [n, m]
  function methods.outer(a, b)
    need_tensor('outer', 'input', a)
    need_tensor('outer', 'vec2', b)
    if a._ndim ~= 1 then error(fmt('outer: expected a 1-d input, got a %d-d tensor', a._ndim)) end
    if b._ndim ~= 1 then error(fmt('outer: expected a 1-d vec2, got a %d-d tensor', b._ndim)) end
    return methods.mul(methods.reshape(a, tonumber(a._shape[0]), 1), methods.reshape(b, 1, tonumber(b._shape[0])))
  end
  M.outer = methods.outer

  --- cross(other, dim) or (other, {dim=}): the cross product along dim, by default the first
  --- dim of size 3 (torch.cross's); both of one dtype and of one number of dims (broadcast)
  function methods.cross(a, b, d, extra)
    need_tensor('cross', 'input', a)
    need_tensor('cross', 'other', b)
    if type(d) == 'table' then
      if extra ~= nil then error('cross: the options table must be the last argument') end
      check_opts(d, K_DIM, 'cross')
      d = d.dim
    elseif extra ~= nil then
      error(fmt('cross: too many arguments (expected other, dim), got %s after dim', got(extra)))
    end
    if a._ndim ~= b._ndim then
      error(fmt('cross: input and other must have the same number of dims, got %d and %d', a._ndim, b._ndim))
    end
    if a._dtype ~= b._dtype then
      error(fmt('cross: input and other must have the same dtype, got %s and %s', dtype_names[a._dtype],
        dtype_names[b._dtype]))
    end
    if a._dtype == 7 then error('cross: bool tensors are not supported') end
    local cd
    if d == nil then
      for i = 0, a._ndim - 1 do
        if a._shape[i] == 3 then cd = i break end
      end
      if not cd then error(fmt('cross: no dim of size 3 in input of shape [%s]', table.concat(size_of(a), ', '))) end
    else
      cd = cdim(a, d, 'cross')
    end
    local sa, sb = tonumber(a._shape[cd]), tonumber(b._shape[cd])
    if sa ~= 3 or sb ~= 3 then
      error(fmt('cross: dim %d must have size 3 in both inputs, got %d and %d', cd + 1, sa, sb))
    end
    local D = cd + 1
    local n = methods.narrow
    local a1, a2, a3 = n(a, D, 1, 1), n(a, D, 2, 1), n(a, D, 3, 1)
    local b1, b2, b3 = n(b, D, 1, 1), n(b, D, 2, 1), n(b, D, 3, 1)
    local mul, sub = methods.mul, methods.sub
    return M.cat({ sub(mul(a2, b3), mul(a3, b2)), sub(mul(a3, b1), mul(a1, b3)), sub(mul(a1, b2), mul(a2, b1)) }, D)
  end
  M.cross = methods.cross

  --- kron(other): the Kronecker product (the operand with fewer dims gets leading 1s); one
  --- broadcast product, so at most 4 dims
  function methods.kron(a, b)
    need_tensor('kron', 'input', a)
    need_tensor('kron', 'other', b)
    local na, nb = a._ndim, b._ndim
    local nd = math.max(na, nb)
    if nd > 4 then
      not_impl(fmt('kron: operands of more than 4 dims are not implemented (got %d and %d dims)', na, nb))
    end
    local sa, sb, ia, ib, out = {}, {}, {}, {}, {}
    for i = 1, nd do
      local x = i - (nd - na) >= 1 and tonumber(a._shape[i - (nd - na) - 1]) or 1
      local y = i - (nd - nb) >= 1 and tonumber(b._shape[i - (nd - nb) - 1]) or 1
      sa[2 * i - 1], sa[2 * i] = x, 1
      sb[2 * i - 1], sb[2 * i] = 1, y
      out[i] = x * y
    end
    if nd == 0 then return methods.mul(a, b) end
    local r = methods.mul(methods.reshape(a, sa), methods.reshape(b, sb))
    return methods.reshape(r, out)
  end
  M.kron = methods.kron

  local function mm_params(name, opts, extra, dt)
    if extra ~= nil then error(fmt('%s: too many arguments (expected input, batch1, batch2, {beta=, alpha=})', name)) end
    if opts ~= nil and type(opts) ~= 'table' then
      error(fmt('%s: options must be a table {beta=, alpha=}, got %s', name, got(opts)))
    end
    check_opts(opts, K_MM, name)
    local beta, alpha = opts and opts.beta or 1, opts and opts.alpha or 1
    need_number(name, 'beta', beta)
    need_number(name, 'alpha', alpha)
    if dt > 3 and (beta ~= floor(beta) or alpha ~= floor(alpha)) then
      error(fmt('%s: beta and alpha must be integers for %s tensors, got beta=%g, alpha=%g', name, dtype_names[dt], beta,
        alpha))
    end
    return beta, alpha
  end
  M._mm_params = mm_params
  --- dpl.baddbmm(input, batch1, batch2 [, {beta=1, alpha=1}]) = beta * input + alpha * (batch1 @ batch2),
  --- batch1 [B, n, m], batch2 [B, m, p], input broadcast to [B, n, p] (ignored when beta is 0)
  function M.baddbmm(c, a, b, opts, extra)
    need_tensor('baddbmm', 'input', c)
    need_tensor('baddbmm', 'batch1', a)
    need_tensor('baddbmm', 'batch2', b)
    if a._ndim ~= 3 or b._ndim ~= 3 then
      error(fmt('baddbmm: batch1 and batch2 must be 3-d tensors, got %d-d and %d-d', a._ndim, b._ndim))
    end
    if a._dtype ~= b._dtype then
      error(fmt('baddbmm: batch1 and batch2 must have the same dtype, got %s and %s', dtype_names[a._dtype],
        dtype_names[b._dtype]))
    end
    local beta, alpha = mm_params('baddbmm', opts, extra, a._dtype)
    local shape = { tonumber(a._shape[0]), tonumber(a._shape[1]), tonumber(b._shape[2]) }
    local nd = c._ndim
    local ok = nd <= 3
    for i = 1, math.min(nd, 3) do
      local s = tonumber(c._shape[nd - i])
      if s ~= 1 and s ~= shape[4 - i] then ok = false end
    end
    if not ok then
      error(fmt('baddbmm: input of shape [%s] cannot be broadcast to the product\'s shape [%s]',
        table.concat(size_of(c), ', '), table.concat(shape, ', ')))
    end
    local r = raw.bmm(a, b)
    if alpha ~= 1 then raw.mul_(r, alpha) end
    if beta == 0 then return r end
    -- the result has the batches' dtype, input converted to it (PyTorch's: a float64 input with
    -- float32 batches gives float32, an int64 one with float32 batches float32)
    if c._dtype ~= r._dtype then c = raw.to(c, dtype_names[r._dtype]) end
    return raw.add_(r, c, beta)
  end
  methods.baddbmm = M.baddbmm
  --- baddbmm_(batch1, batch2 [, opts]): in place, the result must fit self's dtype and shape
  function methods.baddbmm_(c, a, b, opts, extra)
    need_tensor('baddbmm_', 'self', c)
    if is_tensor(a) and c._dtype ~= a._dtype then -- (PyTorch: "Bad in-place call")
      error(fmt("baddbmm_: self's dtype %s must be the batches' (%s)", dtype_names[c._dtype], dtype_names[a._dtype]))
    end
    local r = methods.baddbmm(c, a, b, opts, extra)
    local same = r._ndim == c._ndim
    for i = 0, r._ndim - 1 do same = same and r._shape[i] == c._shape[i] end
    if not same then
      error(fmt('baddbmm_: the result shape [%s] does not match the in-place tensor\'s shape [%s]',
        table.concat(size_of(r), ', '), table.concat(size_of(c), ', ')))
    end
    if r._dtype <= 3 and c._dtype > 3 then
      error(fmt("baddbmm_: the result type %s cannot be stored in place in a %s tensor", dtype_names[r._dtype],
        dtype_names[c._dtype]))
    end
    return methods.copy_(c, r)
  end

  ---------------------------------------------------------------- reductions
  -- dim (an integer, a list of integers, or nil / {} for all dims) -> sorted 0-based C dims,
  -- or nil for all of them. A 0-d tensor takes dim 1 or -1 (PyTorch's 0 / -1).
  local function norm_dims(name, t, d)
    if d == nil then return nil end
    if type(d) == 'number' then d = { d }
    elseif type(d) ~= 'table' or is_tensor(d) then
      error(fmt('%s: dim must be an integer or a list of integers, got %s', name, got(d)))
    elseif #d == 0 and next(d) ~= nil then
      error(fmt('%s: dim must be an integer or a list of integers, got a table with key %s', name, tostring(next(d))))
    end
    if #d == 0 then return nil end
    local r, seen = {}, {}
    for i = 1, #d do
      local v = d[i]
      local c
      if t._ndim == 0 and (v == 1 or v == -1) then c = 0 else c = cdim(t, v, name) end
      if seen[c] then error(fmt('%s: dim %s appears multiple times in the list of dims', name, tostring(v))) end
      seen[c] = true
      r[#r + 1] = c
    end
    if t._ndim == 0 then return nil end
    table.sort(r)
    return r
  end
  M._norm_dims = norm_dims

  -- the shape of a reduction's result with keepdim: 1 at the reduced dims (all when dims is nil)
  local function kept_shape(t, dims)
    local s = size_of(t)
    if dims == nil then
      for i = 1, #s do s[i] = 1 end
    else
      for _, c in ipairs(dims) do s[c + 1] = 1 end
    end
    return s
  end
  M._kept_shape = kept_shape

  -- amax / amin (raw: their rule records the gradient)
  local function amax_impl(name, red, t, d, keepdim, extra)
    if not is_tensor(t) then need_tensor(name, 'input', t) end
    need_bool(name, 'keepdim', keepdim)
    if extra ~= nil then error(fmt('%s: too many arguments (expected dim, keepdim), got %s', name, got(extra))) end
    local dims = norm_dims(name, t, d)
    if dims == nil then
      if t._numel == 0 then
        error(fmt('%s: expected a dim to reduce over for an empty tensor (the reduction has no identity)', name))
      end
      local r = reduce(red, t, nil, false)
      if keepdim and t._ndim > 0 then r = raw.reshape(r, kept_shape(t, nil)) end
      return r
    end
    for _, c in ipairs(dims) do
      if t._shape[c] == 0 then
        error(fmt('%s: cannot reduce over dim %d of size 0 (the reduction has no identity)', name, c + 1))
      end
    end
    local r = t
    for i = #dims, 1, -1 do r = reduce(red, r, dims[i] + 1, keepdim) end
    return r
  end
  --- amax(dim, keepdim=false): the maximum over dim (an integer or a list; nil: all), NaN
  --- propagating; the gradient is split evenly between equal maxima (PyTorch's amax)
  function methods.amax(t, d, keepdim, extra) return amax_impl('amax', 'max', t, d, keepdim, extra) end
  function methods.amin(t, d, keepdim, extra) return amax_impl('amin', 'min', t, d, keepdim, extra) end
  M.amax, M.amin = methods.amax, methods.amin

  --- aminmax(dim, keepdim) or aminmax{dim=, keepdim=}: min, max (two tensors); dim an integer or nil
  function methods.aminmax(t, d, keepdim, extra)
    need_tensor('aminmax', 'input', t)
    if type(d) == 'table' then
      if keepdim ~= nil then error('aminmax: the options table must be the last argument') end
      check_opts(d, K_AMM, 'aminmax')
      d, keepdim = d.dim, d.keepdim
    end
    if d ~= nil and type(d) ~= 'number' then error(fmt('aminmax: dim must be an integer or nil, got %s', got(d))) end
    need_bool('aminmax', 'keepdim', keepdim)
    if extra ~= nil then error(fmt('aminmax: too many arguments (expected dim, keepdim), got %s', got(extra))) end
    local dims = norm_dims('aminmax', t, d)
    if (dims == nil and t._numel == 0) or (dims and t._shape[dims[1]] == 0) then
      error('aminmax: cannot compute aminmax over an empty dim (the reduction has no identity)')
    end
    return methods.amin(t, d, keepdim), methods.amax(t, d, keepdim)
  end
  M.aminmax = methods.aminmax

  -- sum over dims (nil: all), with the given sum and reshape (raw, or autograd's)
  local function sum_dims(t, dims, keepdim, sum, reshape)
    if dims == nil then
      local r = sum(t)
      if keepdim and t._ndim > 0 then r = reshape(r, kept_shape(t, nil)) end
      return r
    end
    local r = t
    for i = #dims, 1, -1 do r = sum(r, dims[i] + 1, keepdim) end
    return r
  end
  local function no_dtype(name, extra)
    if extra ~= nil then
      not_impl(fmt('%s: the dtype argument is not implemented (convert the input with :to() first)', name))
    end
  end
  --- nansum(dim, keepdim=false): sum treating NaN as 0 (integers: sum; results int64 as sum's).
  --- Raw (its rule multiplies the gradient by the not-NaN mask, as PyTorch: an infinite
  --- gradient gives NaN there, not 0)
  function methods.nansum(t, d, keepdim, extra)
    need_tensor('nansum', 'input', t)
    need_bool('nansum', 'keepdim', keepdim)
    no_dtype('nansum', extra)
    local dims = norm_dims('nansum', t, d)
    local x = t
    if is_float(t) then x = raw.where(raw.isnan(t), 0, t) end
    return sum_dims(x, dims, keepdim, raw.sum, raw.reshape)
  end
  --- nanmean(dim, keepdim=false): nansum / the count of non-NaN values (NaN where there are none)
  function methods.nanmean(t, d, keepdim, extra)
    need_tensor('nanmean', 'input', t)
    if not is_float(t) then
      error(fmt('nanmean: expected a floating-point tensor, got %s', dtype_names[t._dtype]))
    end
    need_bool('nanmean', 'keepdim', keepdim)
    no_dtype('nanmean', extra)
    local dims = norm_dims('nanmean', t, d)
    local count = sum_dims(methods.logical_not(raw.isnan(t)), dims, keepdim, raw.sum, raw.reshape)
    return methods.div(methods.nansum(t, d, keepdim), count)
  end
  M.nansum, M.nanmean = methods.nansum, methods.nanmean

  -- var/std and mean over dims (a list: the reduced dims permuted to the end and flattened)
  local function stat_mean(name, stat, t, d, unbiased, keepdim, extra)
    need_tensor(name, 'input', t)
    if type(d) == 'boolean' then d, unbiased = nil, d end
    if not is_float(t) then
      error(fmt('%s: expected a floating-point tensor, got %s', name, dtype_names[t._dtype]))
    end
    need_bool(name, 'unbiased', unbiased)
    need_bool(name, 'keepdim', keepdim)
    if extra ~= nil then
      if type(extra) == 'table' and extra.correction ~= nil then
        not_impl(name .. ': the correction option is not implemented (use unbiased = true or false)')
      end
      error(fmt('%s: too many arguments (expected dim, unbiased, keepdim), got %s', name, got(extra)))
    end
    local dims = norm_dims(name, t, d)
    if dims == nil or #dims == 1 then
      local dd = dims and dims[1] + 1 or nil
      local s = methods[stat](t, dd, unbiased, keepdim)
      local m = dd and methods.mean(t, dd, keepdim) or methods.mean(t)
      if dd == nil and keepdim and t._ndim > 0 then
        local ks = kept_shape(t, nil)
        s, m = methods.reshape(s, ks), methods.reshape(m, ks)
      end
      return s, m
    end
    local order, kept, n, red = {}, {}, 1, {}
    for _, c in ipairs(dims) do red[c] = true end
    for i = 0, t._ndim - 1 do
      if not red[i] then order[#order + 1] = i + 1; kept[#kept + 1] = tonumber(t._shape[i]) end
    end
    for _, c in ipairs(dims) do order[#order + 1] = c + 1; n = n * tonumber(t._shape[c]) end
    local shape = { unpack(kept) }
    shape[#shape + 1] = n
    local flat = methods.reshape(methods.permute(t, order), shape)
    local nd = #shape
    local s, m = methods[stat](flat, nd, unbiased, false), methods.mean(flat, nd)
    if keepdim then
      local ks = kept_shape(t, dims)
      s, m = methods.reshape(s, ks), methods.reshape(m, ks)
    end
    return s, m
  end
  --- std_mean(dim, unbiased=true, keepdim=false) -> std, mean (dim an integer, a list or nil)
  function methods.std_mean(t, d, unbiased, keepdim, extra) return stat_mean('std_mean', 'std', t, d, unbiased, keepdim, extra) end
  --- var_mean(dim, unbiased=true, keepdim=false) -> var, mean
  function methods.var_mean(t, d, unbiased, keepdim, extra) return stat_mean('var_mean', 'var', t, d, unbiased, keepdim, extra) end
  M.std_mean, M.var_mean = methods.std_mean, methods.var_mean
end
