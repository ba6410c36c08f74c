-- dpl.tensor_compat: PyTorch's aliases and small elementwise functions that dplhost's other
-- groups lack: fix, rad2deg/deg2rad, positive, absolute, the numpy names arccos ... arctan2,
-- sgn, the complex-number names of a real tensor (conj, resolve_conj, resolve_neg,
-- conj_physical, real, imag, is_complex, is_conj, is_neg), nbytes/itemsize, pin_memory,
-- share_memory_/is_shared, signbit, float_power, gcd/lcm, bitwise_left_shift/right_shift,
-- heaviside, copysign, nextafter, ldexp, frexp, isin, renorm, finfo/iinfo and char/short
-- (int8/int16 do not exist here). Loaded on first use of one of its names (the LAZY table of
-- lua/dpl/tensor.lua lists them); installed after dpl.autograd wrapped the methods, so they
-- compose the recording methods (or record a rule of their own). Dims are 1-based.
local ffi = require 'ffi'
local bit = require 'bit'
local C = require('dpl.capi').C
local errors = require 'dpl.errors'
local options = require 'dpl.options'

local type, tostring = type, tostring
local floor, huge, pi = math.floor, math.huge, math.pi
local frexp = math.frexp
local fmt = string.format
local lua_error = error

pcall(ffi.cdef, 'double nextafter(double x, double y); float nextafterf(float x, float y);')

local K_ISIN = options.keys('assume_unique', 'invert')

return function(M, H)
  local methods, props = M.methods, M.props
  local need_tensor = H.need_tensor
  local is_tensor, dtype_names = M.is_tensor, M.dtype_names

  local function value_error(msg) lua_error(errors.ValueError(msg), 0) end
  local function runtime_error(msg) lua_error(errors.RuntimeError(msg), 0) end
  local function not_implemented(msg) lua_error(errors.NotImplementedError(msg), 0) end
  local function got(v) return type(v) == 'cdata' and (is_tensor(v) and 'a tensor' or 'cdata (not a tensor)') or type(v) end
  local function is_float(t) return t._dtype <= 3 end
  local function dtype_of(t) return dtype_names[t._dtype] end
  local function dev_of(t) return t._devtype == 0 and 'cpu' or ('cuda:' .. t._devindex) end
  local function size_of(t)
    local r = {}
    for i = 1, t._ndim do r[i] = tonumber(t._shape[i - 1]) end
    return r
  end
  local function is_opts(v) return type(v) == 'table' and getmetatable(v) == nil end
  local function autograd() return package.loaded['dpl.autograd'] end
  -- a tensor operand, or a number (boolean) as PyTorch's Scalar
  local function need_operand(name, what, v)
    if not is_tensor(v) and type(v) ~= 'number' and type(v) ~= 'boolean' then
      value_error(fmt('%s: %s must be a tensor or a number, got %s', name, what, got(v)))
    end
  end
  -- the dtype of a op b under PyTorch's promotion (numbers and 0-d tensors count as such)
  local function proto(v)
    if not is_tensor(v) then return v end
    return M.empty(v._ndim == 0 and {} or { 0 }, { dtype = dtype_of(v) })
  end
  local function result_type(a, b)
    if is_tensor(a) and is_tensor(b) and a._dtype == b._dtype then return dtype_of(a) end
    if type(a) == 'boolean' then a = a and 1 or 0 end
    if type(b) == 'boolean' then b = b and 1 or 0 end
    if not is_tensor(a) then return methods.add(proto(b), a).dtype end
    return methods.add(proto(a), proto(b)).dtype
  end
  -- v as a tensor of dtype dt on t's device (a number becomes a 0-d tensor)
  local function as_tensor(v, dt, like)
    if type(v) == 'boolean' then v = v and 1 or 0 end
    if is_tensor(v) then return dtype_of(v) == dt and v or methods.to(v, dt) end
    return M.tensor(v, { dtype = dt, device = like and dev_of(like) or 'cpu' })
  end
  -- a contiguous host copy of t in dtype dt, without history
  local function host(t, dt)
    return methods.contiguous(methods.to(methods.detach(t), { dtype = dt or dtype_of(t), device = 'cpu' }))
  end
  local function back(r, like) return like._devtype == 0 and r or methods.to(r, dev_of(like)) end
  -- 2 as a 0-d tensor of t's floating dtype (float32 for integers): a base that promotes as torch's 2.0
  local function two(t) return M.tensor(2.0, { dtype = is_float(t) and dtype_of(t) or 'float32', device = dev_of(t) }) end
  local function broadcast2(a, b)
    local l = M.broadcast_tensors(a, b)
    return l[1], l[2]
  end
  -- backward through it raises, as PyTorch's ops without a derivative
  local function no_derivative(name, nin)
    return { nin = nin, name = name, save = function() end, bw = function()
      not_implemented(fmt("backward: the derivative for '%s' is not implemented (as in PyTorch)", name))
    end }
  end
  local function record(rule, out, ...)
    local A = autograd()
    if not (A and A.record) then return out end
    return A.record(rule, out, ...)
  end
  -- the function form dpl.X(t, ...) of each method
  local function fn_forms(list)
    for n in list:gmatch('%S+') do M[n] = function(...) return methods[n](...) end end
  end

  ---------------------------------------------------------------- aliases
  local ALIAS = {
    fix = 'trunc', fix_ = 'trunc_', absolute = 'abs', absolute_ = 'abs_', sgn = 'sign', sgn_ = 'sign_',
    arccos = 'acos', arccos_ = 'acos_', arcsin = 'asin', arcsin_ = 'asin_', arctan = 'atan', arctan_ = 'atan_',
    arccosh = 'acosh', arccosh_ = 'acosh_', arcsinh = 'asinh', arcsinh_ = 'asinh_', arctanh = 'atanh',
    arctanh_ = 'atanh_', arctan2 = 'atan2', arctan2_ = 'atan2_',
  }
  for name, to in pairs(ALIAS) do
    methods[name] = function(t, ...)
      need_tensor(name, 'input', t)
      return methods[to](t, ...)
    end
  end
  fn_forms('fix fix_ absolute absolute_ sgn arccos arccos_ arcsin arcsin_ arctan arctan_ arccosh arccosh_ arcsinh '
    .. 'arcsinh_ arctanh arctanh_ arctan2')

  --- t:rad2deg(), t:deg2rad() (and `_`): t * 180/pi, t * pi/180; integer and bool inputs give float32
  local function angle(name, c)
    methods[name] = function(t)
      need_tensor(name, 'input', t)
      return methods.mul(is_float(t) and t or methods.to(t, 'float32'), c)
    end
    methods[name .. '_'] = function(t)
      need_tensor(name .. '_', 'input', t)
      if not is_float(t) then
        runtime_error(fmt("%s_: result type float32 can't be cast to the desired output type %s", name, dtype_of(t)))
      end
      return methods.mul_(t, c)
    end
  end
  angle('rad2deg', 180 / pi)
  angle('deg2rad', pi / 180)
  fn_forms('rad2deg rad2deg_ deg2rad deg2rad_')

  --- t:positive(): t itself (an error for bool, as PyTorch's unary +)
  function methods.positive(t)
    need_tensor('positive', 'input', t)
    if t._dtype == 7 then runtime_error('positive: the `+` operator, on a bool tensor is not supported') end
    return t
  end
  --- a real tensor's complex-number names: conj, resolve_conj, resolve_neg, conj_physical(_) return t
  for _, name in ipairs({ 'conj', 'resolve_conj', 'resolve_neg', 'conj_physical', 'conj_physical_' }) do
    methods[name] = function(t)
      need_tensor(name, 'input', t)
      return t
    end
  end
  for _, name in ipairs({ 'is_complex', 'is_conj', 'is_neg' }) do
    methods[name] = function(t)
      need_tensor(name, 'input', t)
      return false
    end
  end
  props.real = function(t) return t end
  props.imag = function() runtime_error('imag: imag is not implemented for tensors with non-complex dtypes (dplhost has no complex dtype)') end
  M.real = function(t) need_tensor('real', 'input', t) return t end
  M.imag = function(t) need_tensor('imag', 'input', t) return props.imag(t) end
  fn_forms('positive conj resolve_conj resolve_neg conj_physical conj_physical_ is_complex is_conj is_neg')

  --- t.itemsize (bytes per element), t.nbytes (numel * itemsize: the elements the tensor sees,
  --- as PyTorch 2.1's; an expanded view counts each element)
  props.itemsize = function(t) return methods.element_size(t) end
  props.nbytes = function(t) return tonumber(t._numel) * methods.element_size(t) end

  --- t:pin_memory(): t itself on the CPU (dplhost's host memory needs no pinning); t:is_pinned(): false
  function methods.pin_memory(t)
    need_tensor('pin_memory', 'input', t)
    if t._devtype ~= 0 then
      runtime_error(fmt('pin_memory: cannot pin a tensor on %s: only dense CPU tensors can be pinned', dev_of(t)))
    end
    return t
  end
  function methods.is_pinned(t)
    need_tensor('is_pinned', 'input', t)
    return false
  end
  --- t:share_memory_(): a no-op for a GPU tensor (as PyTorch's); CPU storage is private to its
  --- process in dplhost, so it is NotImplementedError there. t:is_shared(): true on a GPU only
  function methods.share_memory_(t)
    need_tensor('share_memory_', 'input', t)
    if t._devtype ~= 0 then return t end
    not_implemented('share_memory_: dplhost keeps CPU tensors in process-private memory: there is no shared-memory '
      .. 'storage to move them to (processes exchange tensors through dpl.dist collectives)')
  end
  function methods.is_shared(t)
    need_tensor('is_shared', 'input', t)
    return t._devtype ~= 0
  end

  --- t:char(), t:short(): int8 and int16 are not dtypes of dplhost
  for name, dt in pairs({ char = 'int8', short = 'int16' }) do
    methods[name] = function(t)
      need_tensor(name, 'input', t)
      not_implemented(fmt('%s: dplhost has no %s dtype (its dtypes: float32, float64, float16, bfloat16, int32, '
        .. 'int64, uint8, bool); use t:int() (int32) or t:byte() (uint8)', name, dt))
    end
  end

  ---------------------------------------------------------------- finfo, iinfo
  local FINFO = {
    float32 = { bits = 32, eps = 2 ^ -23, max = (2 - 2 ^ -23) * 2 ^ 127, tiny = 2 ^ -126, resolution = 1e-6 },
    float64 = { bits = 64, eps = 2 ^ -52, max = 1.7976931348623157e308, tiny = 2 ^ -1022, resolution = 1e-15 },
    float16 = { bits = 16, eps = 2 ^ -10, max = 65504, tiny = 2 ^ -14, resolution = 1e-3 },
    bfloat16 = { bits = 16, eps = 2 ^ -7, max = (2 - 2 ^ -7) * 2 ^ 127, tiny = 2 ^ -126, resolution = 1e-2 },
  }
  local DT_ALIAS = { float = 'float32', double = 'float64', half = 'float16', int = 'int32', long = 'int64', byte = 'uint8' }
  local IINFO = {
    uint8 = { bits = 8, min = 0, max = 255 },
    int32 = { bits = 32, min = -2 ^ 31, max = 2 ^ 31 - 1 },
    int64 = { bits = 64, min = -0x7fffffffffffffffLL - 1, max = 0x7fffffffffffffffLL },
  }
  local function info_dtype(name, dt)
    if type(dt) ~= 'string' then value_error(fmt('%s: expected a dtype name, got %s', name, got(dt))) end
    local canon = DT_ALIAS[dt] or dt
    if not FINFO[canon] and not IINFO[canon] and canon ~= 'bool' then
      value_error(fmt("%s: unknown dtype '%s' (expected one of float32, float64, float16, bfloat16, int32, int64, "
        .. 'uint8, bool)', name, dt))
    end
    return canon
  end
  local function info_string(kind, r, keys)
    local p = {}
    for _, k in ipairs(keys) do p[#p + 1] = k .. '=' .. tostring(r[k]) end
    return kind .. '(' .. table.concat(p, ', ') .. ')'
  end
  local INFO_MT = { __tostring = function(r) return r._repr end }
  --- dpl.finfo([dtype='float32']): {bits, eps, max, min, tiny, smallest_normal, resolution, dtype}
  --- of a floating dtype, PyTorch's values
  function M.finfo(dt)
    local canon = info_dtype('finfo', dt == nil and 'float32' or dt)
    local f = FINFO[canon]
    if not f then
      value_error(fmt('finfo: requires a floating point dtype, got %s; use dpl.iinfo for integer dtypes', canon))
    end
    local r = { bits = f.bits, eps = f.eps, max = f.max, min = -f.max, tiny = f.tiny, smallest_normal = f.tiny,
      resolution = f.resolution, dtype = canon }
    r._repr = info_string('finfo', r, { 'resolution', 'min', 'max', 'eps', 'smallest_normal', 'tiny', 'dtype' })
    return setmetatable(r, INFO_MT)
  end
  --- dpl.iinfo(dtype): {bits, max, min, dtype} of an integer dtype (int64's bounds are int64 cdata,
  --- exact, as no Lua number holds 2^63 - 1)
  function M.iinfo(dt)
    local canon = info_dtype('iinfo', dt)
    local f = IINFO[canon]
    if not f then
      value_error(fmt('iinfo: requires an integer dtype (uint8, int32, int64), got %s%s', canon,
        canon == 'bool' and '' or '; use dpl.finfo for floating dtypes'))
    end
    local r = { bits = f.bits, min = f.min, max = f.max, dtype = canon }
    r._repr = info_string('iinfo', { min = tostring(f.min):gsub('LL$', ''), max = tostring(f.max):gsub('LL$', ''),
      dtype = canon }, { 'min', 'max', 'dtype' })
    return setmetatable(r, INFO_MT)
  end

  ---------------------------------------------------------------- signbit, copysign
  -- the sign bits of a floating tensor's elements (-0.0 and -NaN included), as a bool tensor
  local function sign_bits(t)
    local h = host(t)
    local r = M.empty(size_of(h), { dtype = 'bool' })
    local n = tonumber(h._numel)
    local rp = ffi.cast('uint8_t*', r._data)
    local dt = t._dtype
    if dt == 1 then
      local p = ffi.cast('const uint32_t*', h._data)
      local hi = ffi.abi('le') and 1 or 0
      for i = 0, n - 1 do rp[i] = p[2 * i + hi] >= 0x80000000 and 1 or 0 end
    elseif dt == 0 then
      local p = ffi.cast('const uint32_t*', h._data)
      for i = 0, n - 1 do rp[i] = p[i] >= 0x80000000 and 1 or 0 end
    else
      local p = ffi.cast('const uint16_t*', h._data)
      for i = 0, n - 1 do rp[i] = p[i] >= 0x8000 and 1 or 0 end
    end
    return back(r, t)
  end
  --- t:signbit(): true where the sign bit is set (-0.0 and negative NaNs too); integers: t < 0
  function methods.signbit(t)
    need_tensor('signbit', 'input', t)
    if is_float(t) then return sign_bits(t) end
    if t._dtype == 6 or t._dtype == 7 then return M.zeros(size_of(t), { dtype = 'bool', device = dev_of(t) }) end
    return methods.lt(t, 0)
  end
  -- PyTorch's copysign backward: grad * result / t (0 where t is 0) for t, zeros for other
  local COPYSIGN_RULE = {
    nin = 2, name = 'CopysignBackward',
    save = function(n, out, t, o) n.out, n.t, n.o = out, methods.detach(t), o end,
    bw = function(n, g)
      local t = n.t
      local ratio = methods.masked_fill(methods.div(n.out, t), methods.eq(t, 0), 0)
      local gt = methods.mul(g, ratio)
      if is_float(t) and gt._dtype ~= t._dtype then gt = methods.to(gt, dtype_of(t)) end
      return gt, is_tensor(n.o) and M.zeros_like(n.o) or nil
    end,
  }
  --- t:copysign(other): |t| with the sign (bit) of other, broadcast; a floating result (integers
  --- give float32); the gradient of t is sign(t) * sign(result) (0 where t is 0), of other zero
  function methods.copysign(t, o)
    need_tensor('copysign', 'input', t)
    need_operand('copysign', 'other', o)
    local dt = result_type(t, o)
    if not FINFO[dt] then dt = 'float32' end
    local a = methods.detach(dtype_of(t) == dt and t or methods.to(t, dt))
    local s = methods.signbit(as_tensor(o, is_tensor(o) and dtype_of(o) or 'float64', t))
    local m = methods.abs(a)
    local out = M.where(s, methods.neg(m), m)
    return record(COPYSIGN_RULE, out, t, is_tensor(o) and o or out, o)
  end
  function methods.copysign_(t, o)
    need_tensor('copysign_', 'input', t)
    need_operand('copysign_', 'other', o)
    if not is_float(t) then
      runtime_error(fmt("copysign_: result type float32 can't be cast to the desired output type %s", dtype_of(t)))
    end
    return methods.copy_(t, methods.copysign(t, o))
  end

  ---------------------------------------------------------------- float_power, ldexp, frexp
  --- t:float_power(exponent): pow in float64 (t and exponent converted), a float64 result
  local function f64(v)
    if is_tensor(v) then return v._dtype == 1 and v or methods.to(v, 'float64') end
    if type(v) == 'boolean' then v = v and 1 or 0 end
    return v
  end
  function methods.float_power(t, e)
    if not is_tensor(t) and (type(t) == 'number' or type(t) == 'boolean') and is_tensor(e) then
      return methods.pow(M.tensor(f64(t), { dtype = 'float64', device = dev_of(e) }), f64(e))
    end
    need_tensor('float_power', 'input', t)
    need_operand('float_power', 'exponent', e)
    return methods.pow(f64(t), f64(e))
  end
  function methods.float_power_(t, e)
    need_tensor('float_power_', 'input', t)
    need_operand('float_power_', 'exponent', e)
    if t._dtype ~= 1 then
      runtime_error(fmt("float_power_: the base given to float_power_ has dtype %s but the operation's result "
        .. 'requires dtype float64', dtype_of(t)))
    end
    return methods.pow_(t, f64(e))
  end
  --- t:ldexp(other): t * 2^other (integer t: float32), differentiable in t
  function methods.ldexp(t, o)
    need_tensor('ldexp', 'input', t)
    need_operand('ldexp', 'other', o)
    local p = is_tensor(o) and methods.pow(two(t), o)
      or M.tensor(2 ^ (o == true and 1 or o == false and 0 or o), { dtype = is_float(t) and dtype_of(t) or 'float32',
        device = dev_of(t) })
    return methods.mul(is_float(t) and t or methods.to(t, 'float32'), p)
  end
  function methods.ldexp_(t, o)
    need_tensor('ldexp_', 'input', t)
    if not is_float(t) then
      runtime_error(fmt("ldexp_: result type float32 can't be cast to the desired output type %s", dtype_of(t)))
    end
    return methods.copy_(t, methods.ldexp(t, o))
  end
  local FREXP_RULE = {
    nin = 1, name = 'FrexpBackward',
    save = function(n, _, _, e) n.e = e end,
    bw = function(n, g) return methods.div(g, methods.pow(two(g), methods.to(n.e, dtype_of(g)))) end,
  }
  --- t:frexp() -> mantissa, exponent: t = mantissa * 2^exponent, |mantissa| in [0.5, 1) (0, inf
  --- and NaN keep their value, exponent 0); mantissa in t's dtype, exponent int32; floating t only
  function methods.frexp(t)
    need_tensor('frexp', 'input', t)
    if not is_float(t) then runtime_error(fmt('frexp: only supports floating-point dtypes, got %s', dtype_of(t))) end
    local h = host(t, 'float64')
    local n = tonumber(h._numel)
    local m = M.empty(size_of(h), { dtype = 'float64' })
    local e = M.empty(size_of(h), { dtype = 'int32' })
    local hp, mp, ep = ffi.cast('const double*', h._data), ffi.cast('double*', m._data), ffi.cast('int32_t*', e._data)
    for i = 0, n - 1 do
      local v = hp[i]
      if v ~= v or v == huge or v == -huge then
        mp[i], ep[i] = v, 0
      else
        local a, b = frexp(v)
        mp[i], ep[i] = a, b
      end
    end
    local mant = back(methods.to(m, dtype_of(t)), t)
    e = back(e, t)
    return record(FREXP_RULE, mant, t, e), e
  end

  ---------------------------------------------------------------- nextafter
  -- the next 16-bit float after x (bits b) towards y, as bits
  local function next16(b, x, y)
    if x ~= x or y ~= y then return 0x7fc0 end
    if x == y then return nil end
    if x == 0 then return y > 0 and 1 or 0x8001 end
    if (x < y) == (x > 0) then return b + 1 end
    return b - 1
  end
  --- t:nextafter(other): the next representable value after t towards other, in their floating dtype
  function methods.nextafter(t, o)
    need_tensor('nextafter', 'input', t)
    need_operand('nextafter', 'other', o)
    local dt = result_type(t, o)
    if not FINFO[dt] then runtime_error(fmt('nextafter: expected floating point tensors, got %s', dt)) end
    local a, b = broadcast2(as_tensor(t, dt), as_tensor(o, dt, t))
    local ha, hb = host(a), host(b)
    local n = tonumber(ha._numel)
    local r = M.empty(size_of(ha), { dtype = dt })
    if dt == 'float32' or dt == 'float64' then
      local ct = dt == 'float32' and 'float*' or 'double*'
      local f = dt == 'float32' and ffi.C.nextafterf or ffi.C.nextafter
      local ap, bp, rp = ffi.cast(ct, ha._data), ffi.cast(ct, hb._data), ffi.cast(ct, r._data)
      for i = 0, n - 1 do rp[i] = f(ap[i], bp[i]) end
    else
      local a32, b32 = host(a, 'float32'), host(b, 'float32')
      local ap, bp = ffi.cast('const float*', a32._data), ffi.cast('const float*', b32._data)
      local abits, bbits = ffi.cast('const uint16_t*', ha._data), ffi.cast('const uint16_t*', hb._data)
      local rp = ffi.cast('uint16_t*', r._data)
      local nan = dt == 'float16' and 0x7e00 or 0x7fc0
      for i = 0, n - 1 do
        local x, y = ap[i], bp[i]
        local v = next16(abits[i], x, y)
        if v == 0x7fc0 then v = nan end
        rp[i] = v == nil and bbits[i] or v
      end
    end
    return back(r, a)
  end
  function methods.nextafter_(t, o)
    need_tensor('nextafter_', 'input', t)
    return methods.copy_(t, methods.nextafter(t, o))
  end

  ---------------------------------------------------------------- gcd, lcm, shifts
  local INT_CT = { int32 = 'int32_t*', int64 = 'int64_t*', uint8 = 'uint8_t*' }
  -- a, b (tensors or numbers) broadcast, in their promoted integer dtype, on the host, with the
  -- result tensor: dt, ha, hb, r, n, like
  local function int_binary(name, a, b)
    need_operand(name, 'other', b)
    local dt = result_type(a, b)
    if not INT_CT[dt] then
      runtime_error(fmt('%s: expected integer tensors (uint8, int32, int64), got %s', name, dt))
    end
    local x, y = broadcast2(as_tensor(a, dt, is_tensor(b) and b or nil), as_tensor(b, dt, a))
    if x._devtype ~= 0 and y._devtype == x._devtype and y._devindex == x._devindex then
      return dt, nil, nil, nil, nil, x, y -- both on one GPU: dev_binary
    end
    local ha, hb = host(x), host(y)
    return dt, ha, hb, M.empty(size_of(ha), { dtype = dt }), tonumber(ha._numel), x
  end
  -- GPU operands (one dtype, broadcast): the backend's integer kernel through dpl_binary, whose
  -- ops GCD, LCM, LSHIFT, RSHIFT follow the loops below (src/tensor/dpl_tensor_elementwise.c)
  local C_OP = { gcd = 10, lcm = 11, bitwise_left_shift = 12, bitwise_right_shift = 13 }
  local function dev_binary(name, x, y)
    local st = C.dpl_binary(C_OP[name], x, y, H.out1)
    if st ~= 0 then H.fail(3, st) end
    return M._wrap(H.out1)
  end
  local function gcd1(x, y)
    if x < 0 then x = -x end
    if y < 0 then y = -y end
    while y ~= 0 do x, y = y, x % y end
    return x
  end
  local function gcd_lcm(name, lcm)
    return function(t, o)
      need_tensor(name, 'input', t)
      local dt, ha, hb, r, n, like, dy = int_binary(name, t, o)
      if dy then return dev_binary(name, like, dy) end
      local ct = INT_CT[dt]
      local ap, bp, rp = ffi.cast(ct, ha._data), ffi.cast(ct, hb._data), ffi.cast(ct, r._data)
      for i = 0, n - 1 do
        local x, y = ap[i], bp[i]
        local g = gcd1(x, y)
        if lcm then
          if g == 0 then rp[i] = 0 else
            local v = x / g * y -- (int64 cdata: integer division; numbers: exact, g divides x)
            rp[i] = v < 0 and -v or v
          end
        else
          rp[i] = g
        end
      end
      return back(r, like)
    end
  end
  --- t:gcd(other), t:lcm(other): greatest common divisor / least common multiple (non-negative) of
  --- integer tensors (other may be a number), broadcast; lcm(0, x) = 0
  methods.gcd = gcd_lcm('gcd', false)
  methods.lcm = gcd_lcm('lcm', true)
  methods.gcd_ = function(t, o) need_tensor('gcd_', 'input', t) return methods.copy_(t, methods.gcd(t, o)) end
  methods.lcm_ = function(t, o) need_tensor('lcm_', 'input', t) return methods.copy_(t, methods.lcm(t, o)) end

  local WIDTH = { int32 = 32, int64 = 64, uint8 = 8 }
  local function shift(name, left)
    return function(t, o)
      if not is_tensor(t) and (type(t) == 'number' or type(t) == 'boolean') and is_tensor(o) then
        -- dpl.bitwise_left_shift(3, t): a number first, as torch's Scalar self
        t = M.tensor(t == true and 1 or t == false and 0 or t, { device = dev_of(o) })
      end
      need_tensor(name, 'input', t)
      local dt, ha, hb, r, n, like, dy = int_binary(name, t, o)
      if dy then return dev_binary(name, like, dy) end
      local w = WIDTH[dt]
      local ct = INT_CT[dt]
      local ap, bp, rp = ffi.cast(ct, ha._data), ffi.cast(ct, hb._data), ffi.cast(ct, r._data)
      if dt == 'int64' then
        for i = 0, n - 1 do
          local x, s = ap[i], tonumber(bp[i])
          if s < 0 or s >= 64 then
            rp[i] = left and 0 or (x < 0 and -1 or 0)
          else
            rp[i] = left and bit.lshift(x, s) or bit.arshift(x, s)
          end
        end
      else
        for i = 0, n - 1 do
          local x, s = ap[i], bp[i]
          if s < 0 or s >= w then
            rp[i] = left and 0 or (x < 0 and -1 or 0)
          elseif left then
            rp[i] = w == 8 and bit.band(bit.lshift(x, s), 0xff) or bit.lshift(x, s)
          else
            rp[i] = bit.arshift(x, s)
          end
        end
      end
      return back(r, like)
    end
  end
  --- t:bitwise_left_shift(other), t:bitwise_right_shift(other) (and `_`; t:__lshift__ ... as
  --- PyTorch's dunder methods): integer tensors, broadcast; the left shift wraps in the dtype,
  --- the right shift is arithmetic; a shift by a negative count or by the width or more gives 0
  --- (-1 for a right shift of a negative value)
  methods.bitwise_left_shift = shift('bitwise_left_shift', true)
  methods.bitwise_right_shift = shift('bitwise_right_shift', false)
  methods.bitwise_left_shift_ = function(t, o)
    need_tensor('bitwise_left_shift_', 'input', t)
    return methods.copy_(t, methods.bitwise_left_shift(t, o))
  end
  methods.bitwise_right_shift_ = function(t, o)
    need_tensor('bitwise_right_shift_', 'input', t)
    return methods.copy_(t, methods.bitwise_right_shift(t, o))
  end
  methods.__lshift__, methods.__rshift__ = methods.bitwise_left_shift, methods.bitwise_right_shift
  methods.__ilshift__, methods.__irshift__ = methods.bitwise_left_shift_, methods.bitwise_right_shift_
  methods.__rlshift__ = function(t, o) need_tensor('__rlshift__', 'input', t) return M.bitwise_left_shift(o, t) end
  methods.__rrshift__ = function(t, o) need_tensor('__rrshift__', 'input', t) return M.bitwise_right_shift(o, t) end
  M.bitwise_left_shift, M.bitwise_right_shift = methods.bitwise_left_shift, methods.bitwise_right_shift

  ---------------------------------------------------------------- heaviside
  local HEAVISIDE_RULE = no_derivative('heaviside', 2)
  --- t:heaviside(values): 0 where t < 0, values where t == 0, 1 where t > 0 (NaN: 0); values a tensor of
  --- t's dtype (or a number), broadcast; no derivative (backward raises, as in PyTorch)
  function methods.heaviside(t, v)
    need_tensor('heaviside', 'input', t)
    need_operand('heaviside', 'values', v)
    if is_tensor(v) and v._dtype ~= t._dtype then
      runtime_error(fmt('heaviside: is not yet implemented for tensors with different dtypes (input %s, values %s)',
        dtype_of(t), dtype_of(v)))
    end
    local vd = as_tensor(v, dtype_of(t), t)
    local x = methods.detach(t)
    local out = M.where(methods.eq(x, 0), methods.detach(vd), methods.to(methods.gt(x, 0), dtype_of(t)))
    return record(HEAVISIDE_RULE, out, t, vd)
  end
  function methods.heaviside_(t, v)
    need_tensor('heaviside_', 'input', t)
    return methods.copy_(t, methods.heaviside(t, v))
  end

  ---------------------------------------------------------------- isin
  --- dpl.isin(elements, test_elements [, assume_unique [, invert]] [, {assume_unique=, invert=}]):
  --- a bool tensor of elements' shape, true where an element equals one of test_elements
  --- (either may be a number; compared in their promoted dtype; NaN is in nothing)
  function M.isin(e, s, assume_unique, invert, opts)
    if is_opts(assume_unique) then assume_unique, opts = nil, assume_unique
    elseif is_opts(invert) then invert, opts = nil, invert end
    if opts ~= nil then
      if not is_opts(opts) then value_error(fmt('isin: options must be a table, got %s', got(opts))) end
      options.check(opts, K_ISIN, 'isin')
      assume_unique = opts.assume_unique == nil and assume_unique or opts.assume_unique
      invert = opts.invert == nil and invert or opts.invert
    end
    if not is_tensor(e) and not is_tensor(s) then
      value_error(fmt('isin: elements or test_elements must be a tensor, got %s and %s', got(e), got(s)))
    end
    need_operand('isin', 'elements', e)
    need_operand('isin', 'test_elements', s)
    for _, f in ipairs({ { 'assume_unique', assume_unique }, { 'invert', invert } }) do
      if f[2] ~= nil and type(f[2]) ~= 'boolean' then
        value_error(fmt('isin: %s must be a boolean, got %s', f[1], got(f[2])))
      end
    end
    local dt = result_type(e, s)
    if dt == 'bool' or (is_tensor(e) and e._dtype == 7) or (is_tensor(s) and s._dtype == 7) then
      runtime_error('isin: unsupported input type bool')
    end
    local like = is_tensor(e) and e or s
    local et, st = methods.detach(as_tensor(e, dt, like)), methods.detach(as_tensor(s, dt, like))
    local shape = size_of(et)
    local ef, sf = methods.reshape(et, { -1 }), methods.reshape(st, { -1 })
    local ne, ns = tonumber(ef._numel), tonumber(sf._numel)
    local r
    if ns == 0 or ne == 0 then
      r = M.zeros(shape, { dtype = 'bool', device = dev_of(like) })
    elseif ne * ns <= 65536 then
      r = methods.reshape(methods.any(methods.eq(methods.unsqueeze(ef, 2), methods.unsqueeze(sf, 1)), 2), shape)
    else
      -- the distinct elements and test values together, stably sorted: an element is in the test
      -- values when the next value in that order is equal to it (the elements come first)
      local ue, inv = methods.unique(ef, true, true)
      local us = methods.unique(sf)
      local all = M.cat({ ue, us })
      local order = methods.argsort(all, { stable = true })
      local sorted = methods.index_select(all, 1, order)
      local n = tonumber(sorted._numel)
      local dup = M.cat({ methods.eq(methods.narrow(sorted, 1, 2, n - 1), methods.narrow(sorted, 1, 1, n - 1)),
        M.zeros(1, { dtype = 'bool', device = dev_of(like) }) })
      local mask = methods.index_copy(M.zeros(n, { dtype = 'bool', device = dev_of(like) }), 1, order, dup)
      r = methods.reshape(methods.index_select(methods.narrow(mask, 1, 1, tonumber(ue._numel)), 1,
        methods.reshape(inv, { -1 })), shape)
    end
    if invert then r = methods.logical_not(r) end
    return r
  end

  ---------------------------------------------------------------- renorm
  --- t:renorm(p, dim, maxnorm): each slice t:select(dim, i) whose p-norm exceeds maxnorm scaled to
  --- norm maxnorm (by maxnorm / (norm + 1e-7), as PyTorch); floating t of at least 2 dims; differentiable
  function methods.renorm(t, p, d, maxnorm)
    need_tensor('renorm', 'input', t)
    for _, a in ipairs({ { 'p', p }, { 'maxnorm', maxnorm } }) do
      if type(a[2]) ~= 'number' then value_error(fmt('renorm: %s must be a number, got %s', a[1], got(a[2]))) end
    end
    if type(d) ~= 'number' or d ~= floor(d) then value_error(fmt('renorm: dim must be an integer, got %s', got(d))) end
    if not is_float(t) then runtime_error(fmt('renorm: expected a floating point tensor, got %s', dtype_of(t))) end
    if p <= 0 then runtime_error(fmt('renorm: non-positive-norm not supported (p = %s)', tostring(p))) end
    if maxnorm < 0 then runtime_error(fmt('renorm: expected maxnorm to be >= 0 but got %s', tostring(maxnorm))) end
    if t._ndim < 2 then
      runtime_error(fmt('renorm: input needs at least 2 dimensions, got %d dimensions', t._ndim))
    end
    local pd = H.cdim(t, d, 'renorm') + 1
    local others = {}
    for k = 1, t._ndim do if k ~= pd then others[#others + 1] = k end end
    local norm = methods.norm(methods.detach(t), p, others, true)
    local norm_g = methods.norm(t, p, others, true)
    local big = methods.gt(norm, maxnorm)
    local factor = M.where(big, methods.mul(methods.reciprocal(methods.add(norm_g, 1e-7)), maxnorm), 1.0)
    return methods.mul(t, methods.to(factor, dtype_of(t)))
  end
  function methods.renorm_(t, p, d, maxnorm)
    need_tensor('renorm_', 'input', t)
    return methods.copy_(t, methods.renorm(t, p, d, maxnorm))
  end

  fn_forms('signbit copysign float_power_ ldexp frexp nextafter gcd gcd_ lcm lcm_ heaviside renorm')
  M.float_power = methods.float_power
end
