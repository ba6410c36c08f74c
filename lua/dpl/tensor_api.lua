-- dpl.tensor_api: torch.Tensor 1.13 names the other groups lacked, composed of recorded ops:
-- in-place and alias forms (addmm_, addmv(_), addr(_), clip_, cumsum_, cumprod_, floor_divide_,
-- negative_, divide, multiply, subtract, greater, greater_equal, less, less_equal, not_equal and
-- their `_` forms, swapaxes_/swapdims_), the random fills cauchy_, exponential_, geometric_,
-- log_normal_ (from the global generator), fmax/fmin, logaddexp2, isneginf/isposinf/isreal,
-- msort, nanmedian, diagflat, the *_scatter functions, new_empty_strided, the predicates
-- (is_same_size, is_signed, is_nonzero, is_cpu, is_inference, ...), split_with_sizes,
-- unique_consecutive, unsafe_chunk/unsafe_split, prelu, hardshrink, resize_/resize_as_, H,
-- angle, the legacy t:new(...), layout, storage_type, Torch7's apply_/map_/map2_, and the names
-- dplhost cannot support (complex, named, sparse and quantized tensors, removed linalg names),
-- which raise NotImplementedError saying why. Loaded on first use of one of its names
-- (dpl.tensor_lazy lists them); installed after dpl.autograd wrapped the methods, so gradients
-- flow through the ops composed. Dims and indices are 1-based.
local ffi = require 'ffi'
local bit = require 'bit'
local C = require('dpl.capi').C
local errors = require 'dpl.errors'
local options = require 'dpl.options'

local type, tostring, tonumber = type, tostring, tonumber
local floor, ceil, huge, pi, log = math.floor, math.ceil, math.huge, math.pi, math.log
local fmt = string.format
local lua_error = error

local K_BA = options.keys('beta', 'alpha')
local K_DIAG = options.keys('offset', 'dim1', 'dim2')
local K_SLICE = options.keys('dim', 'start', 'end', 'step')
local K_UC = options.keys('return_inverse', 'return_counts', 'dim')
local K_NEW = options.keys('dtype', 'device', 'requires_grad', 'layout', 'pin_memory')
local K_MED = options.keys('dim', 'keepdim')

-- the Lua-readable element type of each dtype id (float16/bfloat16 are read through float32)
local READ = { [0] = 'float32', 'float64', 'float32', 'float32', 'int32', 'int64', 'uint8', 'bool' }
local CPTR = { float32 = 'float *', float64 = 'double *', int32 = 'int32_t *', int64 = 'int64_t *',
  uint8 = 'uint8_t *', bool = 'bool *' }
local STORAGE = { float32 = 'Float', float64 = 'Double', float16 = 'Half', bfloat16 = 'BFloat16', int32 = 'Int',
  int64 = 'Long', uint8 = 'Byte', bool = 'Bool' }

return function(M, H)
  local methods, props = M.methods, M.props
  local need_tensor = H.need_tensor
  local is_tensor, dtype_names = M.is_tensor, M.dtype_names

  local function value_error(msg) lua_error(errors.ValueError(msg), 0) end
  local function type_error(msg) lua_error(errors.TypeError(msg), 0) end
  local function runtime_error(msg) lua_error(errors.RuntimeError(msg), 0) end
  local function not_implemented(msg) lua_error(errors.NotImplementedError(msg), 0) end
  local function got(v)
    if type(v) == 'number' then return tostring(v) end
    return type(v) == 'cdata' and (is_tensor(v) and 'a tensor' or 'cdata (not a tensor)') or type(v)
  end
  local function is_float(t) return t._dtype <= 3 end
  local function dtype_of(t) return dtype_names[t._dtype] end
  local function dev_of(t) return t._devtype == 0 and 'cpu' or ('cuda:' .. t._devindex) end
  local function like(t) return { dtype = dtype_of(t), device = dev_of(t) } end
  local function size_of(t)
    local r = {}
    for i = 1, t._ndim do r[i] = tonumber(t._shape[i - 1]) end
    return r
  end
  local function shape_str(t) return '[' .. table.concat(size_of(t), ', ') .. ']' end
  local function same_shape(a, b)
    if a._ndim ~= b._ndim then return false end
    for i = 0, a._ndim - 1 do if a._shape[i] ~= b._shape[i] then return false end end
    return true
  end
  local function is_int(v) return type(v) == 'number' and v == floor(v) and v > -2 ^ 53 and v < 2 ^ 53 end
  local function need_int(name, what, v)
    if not is_int(v) then value_error(fmt('%s: %s must be an integer, got %s', name, what, got(v))) end
    return v
  end
  local function need_number(name, what, v)
    if type(v) ~= 'number' then value_error(fmt('%s: %s must be a number, got %s', name, what, got(v))) end
    return v
  end
  local function need_bool(name, what, v)
    if v ~= nil and type(v) ~= 'boolean' then value_error(fmt('%s: %s must be true or false, got %s', name, what, got(v))) end
    return v == true
  end
  local function is_opts(v) return type(v) == 'table' and getmetatable(v) == nil end
  local function autograd() return package.loaded['dpl.autograd'] end
  local function grad_on() return M.is_grad_enabled == nil or M.is_grad_enabled() end
  -- a 1-based dim of t, 1-based back (a 0-d tensor takes 1 or -1)
  local function pdim(t, d, name)
    local n = t._ndim == 0 and 1 or t._ndim
    if not is_int(d) then value_error(fmt('%s: dim must be an integer, got %s', name, got(d))) end
    if d < -n or d > n or d == 0 then
      value_error(fmt('%s: dim %d out of range (expected 1..%d or -%d..-1)', name, d, n, n))
    end
    return d < 0 and d + n + 1 or d
  end
  -- the function form dpl.X(t, ...) of each method
  local function fn_forms(list)
    for n in list:gmatch('%S+') do M[n] = function(...) return methods[n](...) end end
  end

  ---------------------------------------------------------------- in-place results
  -- PyTorch's can_cast: a floating result does not go into an integer or bool tensor, nor a
  -- non-bool one into a bool tensor
  local function can_cast(from, to)
    if from <= 3 and to > 3 then return false end
    if to == 7 and from ~= 7 then return false end
    return true
  end
  local function no_leaf(name, t)
    if grad_on() and t.requires_grad and t.is_leaf then
      runtime_error(fmt('%s: a leaf tensor that requires grad is being used in an in-place operation (use '
        .. 'dpl.no_grad, or work on a clone)', name))
    end
  end
  -- t gets r (the out-of-place result) under PyTorch's in-place rules, and is returned
  local function store(name, t, r)
    if not same_shape(t, r) then
      runtime_error(fmt("%s: the result shape %s does not match the in-place tensor's shape %s", name, shape_str(r),
        shape_str(t)))
    end
    if not can_cast(r._dtype, t._dtype) then
      runtime_error(fmt('%s: the result type %s cannot be stored in place in a %s tensor', name, dtype_of(r),
        dtype_of(t)))
    end
    no_leaf(name, t)
    methods.copy_(t, r)
    return t
  end

  ---------------------------------------------------------------- aliases
  local ALIAS = {
    clip_ = 'clamp_', negative_ = 'neg_', divide = 'div', divide_ = 'div_', multiply = 'mul', multiply_ = 'mul_',
    subtract = 'sub', subtract_ = 'sub_', greater = 'gt', greater_ = 'gt_', greater_equal = 'ge',
    greater_equal_ = 'ge_', less = 'lt', less_ = 'lt_', less_equal = 'le', less_equal_ = 'le_', not_equal = 'ne',
    not_equal_ = 'ne_', swapaxes_ = 'transpose_', swapdims_ = 'transpose_', unsafe_chunk = 'chunk',
    unsafe_split = 'split',
  }
  for name, to in pairs(ALIAS) do
    methods[name] = function(t, ...)
      need_tensor(name, 'input', t)
      return t[to](t, ...) -- (through the metatable: the target may be a lazily loaded one)
    end
  end
  -- divide(other, rounding_mode) takes the mode as a string too, as torch.divide's keyword
  for _, name in ipairs({ 'divide', 'divide_' }) do
    local to = ALIAS[name]
    methods[name] = function(t, o, mode, extra)
      need_tensor(name, 'input', t)
      if extra ~= nil then value_error(fmt('%s: too many arguments (expected other [, rounding_mode])', name)) end
      if type(mode) == 'string' then mode = { rounding_mode = mode } end
      return methods[to](t, o, mode)
    end
  end
  fn_forms('clip_ negative_ divide multiply subtract greater greater_equal less less_equal not_equal unsafe_chunk '
    .. 'unsafe_split')

  ---------------------------------------------------------------- addmm_, addmv, addr
  local function beta_alpha(name, t, opts)
    if opts ~= nil and not is_opts(opts) then
      value_error(fmt('%s: options must be a table {beta=, alpha=}, got %s', name, got(opts)))
    end
    if opts then options.check(opts, K_BA, name) end
    local beta, alpha = opts and opts.beta, opts and opts.alpha
    if beta == nil then beta = 1 end
    if alpha == nil then alpha = 1 end
    need_number(name, 'beta', beta)
    need_number(name, 'alpha', alpha)
    if not is_float(t) then
      if not is_int(beta) then runtime_error(fmt('%s: for integral input tensors, beta must not be a decimal, got %s',
        name, tostring(beta))) end
      if not is_int(alpha) then runtime_error(fmt('%s: for integral input tensors, alpha must not be a decimal, got '
        .. '%s', name, tostring(alpha))) end
    end
    return beta, alpha
  end
  -- beta * t + alpha * p (t broadcast; beta = 0 ignores t, NaN included, as PyTorch)
  local function axpby(t, p, beta, alpha)
    if alpha ~= 1 then p = methods.mul(p, alpha) end
    if beta == 0 then
      local l = M.broadcast_tensors(t, p)
      return methods.clone(l[2])
    end
    return methods.add(beta == 1 and t or methods.mul(t, beta), p)
  end
  local function one_dtype(name, t, ...)
    for _, o in ipairs({ ... }) do
      if o._dtype ~= t._dtype then
        runtime_error(fmt('%s: expected the operands to have one dtype, got %s (input) and %s', name, dtype_of(t),
          dtype_of(o)))
      end
    end
    if t._dtype == 7 then runtime_error(fmt('%s: not implemented for bool tensors', name)) end
  end
  local function addmv(name, t, mat, vec, opts)
    need_tensor(name, 'input', t)
    need_tensor(name, 'mat', mat)
    need_tensor(name, 'vec', vec)
    if mat._ndim ~= 2 or vec._ndim ~= 1 then
      runtime_error(fmt('%s: expected a 2-d mat and a 1-d vec, got shapes %s and %s', name, shape_str(mat),
        shape_str(vec)))
    end
    one_dtype(name, t, mat, vec)
    local beta, alpha = beta_alpha(name, t, opts)
    return axpby(t, methods.matmul(mat, vec), beta, alpha)
  end
  local function addr(name, t, u, v, opts)
    need_tensor(name, 'input', t)
    need_tensor(name, 'vec1', u)
    need_tensor(name, 'vec2', v)
    if u._ndim ~= 1 or v._ndim ~= 1 then
      runtime_error(fmt('%s: expected 1-d vectors, got shapes %s and %s', name, shape_str(u), shape_str(v)))
    end
    one_dtype(name, t, u, v)
    local beta, alpha = beta_alpha(name, t, opts)
    return axpby(t, methods.outer(u, v), beta, alpha)
  end
  --- t:addmv(mat, vec [, {beta=1, alpha=1}]): beta * t + alpha * (mat @ vec); addmv_ in place
  function methods.addmv(t, mat, vec, opts) return addmv('addmv', t, mat, vec, opts) end
  function methods.addmv_(t, mat, vec, opts) return store('addmv_', t, addmv('addmv_', t, mat, vec, opts)) end
  --- t:addr(vec1, vec2 [, {beta=1, alpha=1}]): beta * t + alpha * outer(vec1, vec2); addr_ in place
  function methods.addr(t, u, v, opts) return addr('addr', t, u, v, opts) end
  function methods.addr_(t, u, v, opts) return store('addr_', t, addr('addr_', t, u, v, opts)) end
  --- t:addmm_(mat1, mat2 [, {beta=, alpha=}]): addmm in place (t must have the product's shape)
  function methods.addmm_(t, a, b, opts)
    need_tensor('addmm_', 'input', t)
    return store('addmm_', t, M.addmm(t, a, b, opts))
  end
  fn_forms('addmv addmv_ addr')

  ---------------------------------------------------------------- cumsum_, cumprod_, floor_divide_
  for _, op in ipairs({ 'cumsum', 'cumprod' }) do
    local name = op .. '_'
    methods[name] = function(t, d, dt)
      need_tensor(name, 'input', t)
      if is_opts(dt) then dt = dt.dtype end
      if dt ~= nil and dt ~= dtype_of(t) and M.dtype_id(dt, name) ~= t._dtype then -- (unnamed: 'dtype: unknown dtype')
        runtime_error(fmt('%s: the dtype %s does not match the in-place tensor\'s dtype %s', name, tostring(dt),
          dtype_of(t)))
      end
      if t._dtype == 7 then runtime_error(fmt('%s: not implemented for bool tensors', name)) end
      -- (cumprod saves its input for backward: a tensor with history is read through a clone)
      return store(name, t, methods[op](t.requires_grad and methods.clone(t) or t, d, dtype_of(t)))
    end
  end
  function methods.floor_divide_(t, o)
    need_tensor('floor_divide_', 'input', t)
    return store('floor_divide_', t, methods.floor_divide(t, o))
  end

  ---------------------------------------------------------------- random fills
  -- n draws of the global generator as a float64 tensor of t's shape on t's device
  local function uniform64(t) return methods.uniform_(M.empty(size_of(t), { dtype = 'float64', device = dev_of(t) })) end
  local function fill_checks(name, t, floats_only)
    need_tensor(name, 'input', t)
    if t._dtype == 7 or (floats_only and not is_float(t)) then
      runtime_error(fmt('%s: expected a floating-point tensor%s, got %s', name, floats_only and '' or ' or an integer one',
        dtype_of(t)))
    end
    no_leaf(name, t)
  end
  local function fill(t, v)
    methods.copy_(t, v)
    return t
  end
  --- t:cauchy_([median=0 [, sigma=1]]): median + sigma * tan(pi * (U - 1/2))
  function methods.cauchy_(t, median, sigma)
    fill_checks('cauchy_', t, true)
    median = need_number('cauchy_', 'median', median == nil and 0 or median)
    sigma = need_number('cauchy_', 'sigma', sigma == nil and 1 or sigma)
    return fill(t, methods.add(methods.mul(methods.tan(methods.mul(methods.sub(uniform64(t), 0.5), pi)), sigma), median))
  end
  --- t:exponential_([lambd=1]): -log(1 - U) / lambd (lambd 0: inf)
  function methods.exponential_(t, lambd)
    fill_checks('exponential_', t, true)
    lambd = need_number('exponential_', 'lambd', lambd == nil and 1 or lambd)
    if not (lambd >= 0) then runtime_error(fmt('exponential_: expects lambd >= 0, got %s', tostring(lambd))) end
    if lambd == 0 then return methods.fill_(t, huge) end
    return fill(t, methods.div(methods.neg(methods.log1p(methods.neg(uniform64(t)))), lambd))
  end
  --- t:geometric_(p): the number of Bernoulli(p) trials up to the first success, ceil(log(1 - U) / log(1 - p))
  function methods.geometric_(t, p)
    fill_checks('geometric_', t, false)
    need_number('geometric_', 'p', p)
    if not (p > 0 and p < 1) then runtime_error(fmt('geometric_: expects p in (0, 1), got %s', tostring(p))) end
    local k = methods.ceil(methods.div(methods.log1p(methods.neg(uniform64(t))), math.log(1 - p)))
    return fill(t, methods.clamp_min(k, 1))
  end
  --- t:log_normal_([mean=1 [, std=2]]): exp(N(mean, std^2))
  function methods.log_normal_(t, mean, std)
    fill_checks('log_normal_', t, true)
    mean = need_number('log_normal_', 'mean', mean == nil and 1 or mean)
    std = need_number('log_normal_', 'std', std == nil and 2 or std)
    if not (std > 0) then runtime_error(fmt('log_normal_: expects std > 0, got %s', tostring(std))) end
    local z = methods.normal_(M.empty(size_of(t), { dtype = 'float64', device = dev_of(t) }), mean, std)
    return fill(t, methods.exp(z))
  end

  ---------------------------------------------------------------- elementwise
  -- fmax/fmin: maximum/minimum where a NaN loses to a number (NaN only when both are); ties go to
  -- input (the gradient too, as PyTorch's)
  local function fext(name, cmp)
    methods[name] = function(a, b)
      need_tensor(name, 'input', a)
      need_tensor(name, 'other', b)
      return M.where(methods.logical_or(methods[cmp](a, b), methods.isnan(b)), a, b)
    end
  end
  fext('fmax', 'ge')
  fext('fmin', 'le')
  local LN2 = log(2)
  --- logaddexp2(other): log2(2^t + 2^other), computed as logaddexp(t ln2, other ln2) / ln2
  function methods.logaddexp2(a, b)
    need_tensor('logaddexp2', 'input', a)
    if not is_tensor(b) and type(b) ~= 'number' then
      value_error(fmt('logaddexp2: other must be a tensor or a number, got %s', got(b)))
    end
    local bb = is_tensor(b) and methods.mul(b, LN2) or b * LN2
    return methods.div(a.logaddexp(methods.mul(a, LN2), bb), LN2)
  end
  local function bool_like(t, v) return M.full(size_of(t), v, { dtype = 'bool', device = dev_of(t) }) end
  function methods.isposinf(t)
    need_tensor('isposinf', 'input', t)
    return is_float(t) and methods.eq(t, huge) or bool_like(t, false)
  end
  function methods.isneginf(t)
    need_tensor('isneginf', 'input', t)
    return is_float(t) and methods.eq(t, -huge) or bool_like(t, false)
  end
  --- isreal(): true everywhere (there is no complex dtype)
  function methods.isreal(t)
    need_tensor('isreal', 'input', t)
    return bool_like(t, true)
  end
  --- angle(): pi where t < 0, 0 where t >= 0, NaN for NaN (integer and bool inputs give float32); zero gradient
  function methods.angle(t)
    need_tensor('angle', 'input', t)
    local f = is_float(t) and t or methods.to(t, 'float32')
    local r = methods.masked_fill(methods.mul(f, 0), methods.lt(f, 0), pi)
    return methods.masked_fill(r, methods.ge(f, 0), 0)
  end
  --- hardshrink([lambd=0.5]): t where |t| > lambd, else 0 (floating tensors)
  function methods.hardshrink(t, lambd)
    need_tensor('hardshrink', 'input', t)
    if is_opts(lambd) then lambd = lambd.lambd end
    lambd = need_number('hardshrink', 'lambd', lambd == nil and 0.5 or lambd)
    if not is_float(t) then runtime_error(fmt('hardshrink: expected a floating-point tensor, got %s', dtype_of(t))) end
    return M.where(methods.gt(methods.abs(t), lambd), t, 0)
  end
  --- prelu(weight): t where t > 0, else weight * t; weight 0-d or 1-d, one value or one per channel (dim 2)
  function methods.prelu(t, w)
    need_tensor('prelu', 'input', t)
    need_tensor('prelu', 'weight', w)
    if not is_float(t) then runtime_error(fmt('prelu: expected a floating-point input, got %s', dtype_of(t))) end
    if w._dtype ~= t._dtype then
      runtime_error(fmt("prelu: weight has dtype %s, expected %s (the input's)", dtype_of(w), dtype_of(t)))
    end
    if w._ndim > 1 then
      runtime_error(fmt('prelu: expected weight to be a 0-d or 1-d tensor, got %d dims', w._ndim))
    end
    local n = tonumber(w._numel)
    local shape = {}
    for i = 1, t._ndim do shape[i] = 1 end
    if n ~= 1 then
      local ch = t._ndim >= 2 and tonumber(t._shape[1]) or 1
      if n ~= ch then
        runtime_error(fmt('prelu: mismatch of parameter numbers and input channel size: %d parameters, %d channels '
          .. '(dim 2)', n, ch))
      end
      shape[2] = n
    end
    return M.where(methods.gt(t, 0), t, methods.mul(methods.reshape(w, shape), t))
  end
  fn_forms('fmax fmin logaddexp2 isposinf isneginf isreal angle hardshrink prelu')

  ---------------------------------------------------------------- msort, nanmedian
  function methods.msort(t)
    need_tensor('msort', 'input', t)
    return (methods.sort(t, 1))
  end
  -- the lower median of the non-NaN values along 1-based dim d: values, 1-based indices
  local function nanmedian_dim(t, d, keepdim)
    if t._ndim == 0 then
      return methods.clone(t), M.full({}, 1, { dtype = 'int64', device = dev_of(t) })
    end
    if t._shape[d - 1] == 0 then
      runtime_error(fmt('nanmedian: expected reduction dim %d to have non-zero size', d))
    end
    if not is_float(t) then return methods.median(t, d, keepdim) end
    local sorted, idx = methods.sort(t, d)
    local cnt = methods.sum(methods.logical_not(methods.isnan(t)), d, true)
    local pos = methods.add(methods.floor_divide(methods.clamp_min(methods.sub(cnt, 1), 0), 2), 1)
    local v, i = methods.gather(sorted, d, pos), methods.gather(idx, d, pos)
    if not keepdim then v, i = methods.squeeze(v, d), methods.squeeze(i, d) end
    return v, i
  end
  --- nanmedian(): the lower median of the non-NaN elements (NaN when there are none);
  --- nanmedian(dim [, keepdim]) / nanmedian{dim=, keepdim=}: values, 1-based indices along dim
  function methods.nanmedian(t, d, keepdim)
    need_tensor('nanmedian', 'input', t)
    if is_opts(d) then
      options.check(d, K_MED, 'nanmedian')
      d, keepdim = d.dim, d.keepdim
    end
    keepdim = need_bool('nanmedian', 'keepdim', keepdim)
    if d == nil then
      if t._numel == 0 or not is_float(t) then return methods.median(t) end
      return (nanmedian_dim(methods.reshape(t, -1), 1, false))
    end
    return nanmedian_dim(t, pdim(t, d, 'nanmedian'), keepdim)
  end
  fn_forms('msort nanmedian')

  ---------------------------------------------------------------- diagflat, *_scatter
  function methods.diagflat(t, offset)
    need_tensor('diagflat', 'input', t)
    if offset ~= nil then need_int('diagflat', 'offset', offset) end
    return methods.diag(methods.reshape(t, -1), offset or 0)
  end
  local function scatter_check(name, view, src)
    if not same_shape(view, src) then
      runtime_error(fmt('%s: expected src to have a size equal to the slice of self: src size %s, slice size %s', name,
        shape_str(src), shape_str(view)))
    end
  end
  -- a clone of t whose view(clone) is src
  local function scatter_into(name, t, src, view)
    need_tensor(name, 'input', t)
    need_tensor(name, 'src', src)
    local out = methods.clone(t)
    local v = view(out)
    scatter_check(name, v, src)
    methods.copy_(v, src)
    return out
  end
  --- diagonal_scatter(src [, offset=0 [, dim1=1 [, dim2=2]]]) (or {offset=, dim1=, dim2=}): t with the
  --- diagonal(offset, dim1, dim2) replaced by src
  function methods.diagonal_scatter(t, src, offset, d1, d2)
    if is_opts(offset) then
      options.check(offset, K_DIAG, 'diagonal_scatter')
      offset, d1, d2 = offset.offset, offset.dim1, offset.dim2
    end
    return scatter_into('diagonal_scatter', t, src, function(o) return methods.diagonal(o, offset, d1, d2) end)
  end
  --- select_scatter(src, dim, index): t with select(dim, index) replaced by src (index 1-based)
  function methods.select_scatter(t, src, d, i)
    return scatter_into('select_scatter', t, src, function(o)
      need_int('select_scatter', 'dim', d)
      need_int('select_scatter', 'index', i)
      return methods.select(o, d, i)
    end)
  end
  --- slice_scatter(src [, dim=1 [, start [, end [, step=1]]]]) (or {dim=, start=, ['end']=, step=}): t with the
  --- positions start, start + step, ... up to end (1-based, both inclusive, negative from the end: Torch7's
  --- t[{{start, end}}]; out of range clamps, as Python's slices) along dim replaced by src (index_copy: differentiable)
  function methods.slice_scatter(t, src, d, s, e, step)
    need_tensor('slice_scatter', 'input', t)
    need_tensor('slice_scatter', 'src', src)
    if is_opts(d) then
      options.check(d, K_SLICE, 'slice_scatter')
      d, s, e, step = d.dim, d.start, d['end'], d.step
    end
    if t._ndim == 0 then runtime_error('slice_scatter: cannot slice a 0-d tensor') end
    local pd = pdim(t, d == nil and 1 or d, 'slice_scatter')
    local n = tonumber(t._shape[pd - 1])
    step = need_int('slice_scatter', 'step', step == nil and 1 or step)
    if step < 1 then runtime_error(fmt('slice_scatter: step must be positive, got %d', step)) end
    local lo, hi = 0, n -- 0-based [lo, hi)
    if s ~= nil then
      need_int('slice_scatter', 'start', s)
      if s == 0 then value_error('slice_scatter: start 0 (positions are 1-based; negative ones count from the end)') end
      lo = s > 0 and s - 1 or n + s
    end
    if e ~= nil then
      need_int('slice_scatter', 'end', e)
      if e == 0 then value_error('slice_scatter: end 0 (positions are 1-based; negative ones count from the end)') end
      hi = e > 0 and e or n + e + 1
    end
    lo = math.min(math.max(lo, 0), n)
    hi = math.min(math.max(hi, lo), n)
    local len = hi > lo and ceil((hi - lo) / step) or 0
    local sz = size_of(t)
    sz[pd] = len
    if not same_shape(src, M.empty(sz)) then
      runtime_error(fmt('slice_scatter: expected src to have a size equal to the slice of self: src size %s, slice size '
        .. '[%s]', shape_str(src), table.concat(sz, ', ')))
    end
    local idx = M.arange(lo + 1, lo + 1 + len * step, step, { device = dev_of(t) })
    if src._dtype ~= t._dtype then src = methods.to(src, dtype_of(t)) end
    return methods.index_copy(t, pd, idx, src)
  end
  --- as_strided_scatter(src, size, stride [, storage_offset=0]): t (read as a contiguous tensor) with the elements
  --- its as_strided(size, stride, storage_offset) view would see replaced by src (0-based offset, as as_strided;
  --- put: differentiable)
  function methods.as_strided_scatter(t, src, size, stride, offset)
    need_tensor('as_strided_scatter', 'input', t)
    need_tensor('as_strided_scatter', 'src', src)
    for _, v in ipairs({ { 'size', size }, { 'stride', stride } }) do
      if type(v[2]) ~= 'table' or is_tensor(v[2]) then
        value_error(fmt('as_strided_scatter: %s must be a list of integers, got %s', v[1], got(v[2])))
      end
    end
    if #size ~= #stride then value_error('as_strided_scatter: size and stride must have the same length') end
    offset = need_int('as_strided_scatter', 'storage_offset', offset == nil and 0 or offset)
    local idx = M.full(size, offset + 1, { dtype = 'int64', device = dev_of(t) }) -- (checks the sizes)
    local last = offset
    for k = 1, #size do
      need_int('as_strided_scatter', 'stride[' .. k .. ']', stride[k])
      if stride[k] < 0 then value_error(fmt('as_strided_scatter: stride %d is negative', stride[k])) end
      if size[k] > 1 and stride[k] ~= 0 then
        local shape = {}
        for j = 1, #size do shape[j] = j == k and size[k] or 1 end
        idx = methods.add(idx, methods.reshape(M.arange(0, size[k] * stride[k], stride[k], { device = dev_of(t) }), shape))
      end
      last = last + (size[k] - 1) * stride[k]
    end
    if tonumber(idx._numel) > 0 and last >= tonumber(t._numel) then
      runtime_error(fmt('as_strided_scatter: the view reaches element %d (0-based) but the input holds %d elements', last,
        tonumber(t._numel)))
    end
    if not same_shape(src, idx) then
      runtime_error(fmt('as_strided_scatter: expected src to have a size equal to the slice of self: src size %s, slice '
        .. 'size %s', shape_str(src), shape_str(idx)))
    end
    if src._dtype ~= t._dtype then src = methods.to(src, dtype_of(t)) end
    return methods.reshape(methods.put(methods.contiguous(t), idx, src), size_of(t))
  end
  fn_forms('diagflat diagonal_scatter select_scatter slice_scatter as_strided_scatter')

  ---------------------------------------------------------------- splits, unique_consecutive
  --- split_with_sizes(sizes [, dim=1]): split into pieces of these sizes, which must sum to the dim's size
  function methods.split_with_sizes(t, sizes, d)
    need_tensor('split_with_sizes', 'input', t)
    if type(sizes) ~= 'table' or is_tensor(sizes) then
      value_error(fmt('split_with_sizes: split_sizes must be a list of integers, got %s', got(sizes)))
    end
    local pd = pdim(t, d == nil and 1 or d, 'split_with_sizes')
    local sum = 0
    for k = 1, #sizes do
      need_int('split_with_sizes', 'split_sizes[' .. k .. ']', sizes[k])
      if sizes[k] < 0 then
        runtime_error(fmt('split_with_sizes: expects split_sizes to have only non-negative entries, got %d at %d',
          sizes[k], k))
      end
      sum = sum + sizes[k]
    end
    local n = t._ndim == 0 and 1 or tonumber(t._shape[pd - 1])
    if sum ~= n then
      runtime_error(fmt("split_with_sizes: expects split_sizes to sum exactly to %d (the input's size in dim %d), "
        .. 'got a sum of %d', n, pd, sum))
    end
    return methods.split(t, sizes, pd)
  end
  local function no_derivative(name)
    return { nin = 1, name = name, save = function() end, bw = function()
      not_implemented(fmt("backward: the derivative for '%s' is not implemented (as in PyTorch)", name))
    end }
  end
  --- unique_consecutive([return_inverse [, return_counts [, dim]]]) (or {return_inverse=, return_counts=, dim=}):
  --- the first of each run of equal consecutive elements (or slices along dim); inverse (1-based, t's shape,
  --- or one per slice) and counts when asked for, in that order
  function methods.unique_consecutive(t, inv, cnt, d)
    need_tensor('unique_consecutive', 'input', t)
    if is_opts(inv) then
      options.check(inv, K_UC, 'unique_consecutive')
      inv, cnt, d = inv.return_inverse, inv.return_counts, inv.dim
    end
    inv = need_bool('unique_consecutive', 'return_inverse', inv)
    cnt = need_bool('unique_consecutive', 'return_counts', cnt)
    local x = methods.detach(t)
    local rows, n, pd
    if d == nil then
      rows = methods.reshape(x, -1, 1)
      n = tonumber(x._numel)
    else
      if x._ndim == 0 then runtime_error('unique_consecutive: dim given for a 0-d tensor (it has no dims)') end
      pd = pdim(x, d, 'unique_consecutive')
      n = tonumber(x._shape[pd - 1])
      rows = methods.reshape(methods.movedim(x, pd, 1), n, -1)
    end
    local keep
    if n == 0 then
      keep = M.empty(0, { dtype = 'bool', device = dev_of(x) })
    else
      local differ = methods.any(methods.ne(methods.narrow(rows, 1, 2, n - 1), methods.narrow(rows, 1, 1, n - 1)), 2)
      keep = M.cat({ M.full({ 1 }, true, { dtype = 'bool', device = dev_of(x) }), differ })
    end
    local starts = methods.reshape(methods.nonzero(keep), -1)
    local out
    if d == nil then
      out = methods.index_select(methods.reshape(x, -1), 1, starts)
    else
      out = methods.index_select(x, pd, starts)
    end
    if t.requires_grad and autograd() and autograd().record then
      out = autograd().record(no_derivative('unique_consecutive'), out, t)
    end
    local res = { out }
    if inv then
      local iv = methods.cumsum(keep, 1)
      res[#res + 1] = d == nil and methods.reshape(iv, size_of(x)) or iv
    end
    if cnt then
      local ends = M.cat({ starts, M.full({ 1 }, n + 1, { dtype = 'int64', device = dev_of(x) }) })
      res[#res + 1] = methods.sub(methods.narrow(ends, 1, 2, #starts), methods.narrow(ends, 1, 1, #starts))
    end
    return unpack(res)
  end
  fn_forms('split_with_sizes unique_consecutive')

  ---------------------------------------------------------------- new tensors
  --- new_empty_strided(size, stride [, {dtype=, device=, requires_grad=}]): an uninitialised tensor with those strides
  function methods.new_empty_strided(t, size, stride, opts)
    need_tensor('new_empty_strided', 'input', t)
    for _, v in ipairs({ { 'size', size }, { 'stride', stride } }) do
      if type(v[2]) ~= 'table' or is_tensor(v[2]) then
        value_error(fmt('new_empty_strided: %s must be a list of integers, got %s', v[1], got(v[2])))
      end
    end
    if #size ~= #stride then value_error('new_empty_strided: size and stride must have the same length') end
    if opts ~= nil and not is_opts(opts) then
      value_error(fmt('new_empty_strided: options must be a table {dtype=, device=, requires_grad=}, got %s', got(opts)))
    end
    opts = opts or {}
    options.check(opts, K_NEW, 'new_empty_strided')
    local span, empty = 1, false
    for k = 1, #size do
      need_int('new_empty_strided', 'size[' .. k .. ']', size[k])
      need_int('new_empty_strided', 'stride[' .. k .. ']', stride[k])
      if size[k] < 0 or stride[k] < 0 then value_error('new_empty_strided: sizes and strides must be non-negative') end
      if size[k] == 0 then empty = true end
      span = span + (size[k] - 1) * stride[k]
    end
    local o = {}
    for k, v in pairs(opts) do if k ~= 'requires_grad' then o[k] = v end end
    local base = methods.new_empty(t, { empty and 0 or span }, o)
    local r = methods.as_strided(base, size, stride, 0)
    if opts.requires_grad then r = methods.requires_grad_(r) end
    return r
  end
  --- t:new(...): PyTorch's legacy constructor with t's dtype and device: new() an empty tensor, new(2, 3) an
  --- uninitialised one of those sizes, new({1, 2}) from data, new(other) other itself (same dtype and device)
  function methods.new(t, a, ...)
    need_tensor('new', 'input', t)
    if a == nil then return M.empty(0, like(t)) end
    if is_tensor(a) then
      if select('#', ...) > 0 then value_error('new: takes one tensor, or sizes, or data') end
      if a._dtype ~= t._dtype or a._devtype ~= t._devtype or a._devindex ~= t._devindex then
        type_error(fmt('new: expected a tensor of dtype %s on %s (the input\'s), got %s on %s', dtype_of(t), dev_of(t),
          dtype_of(a), dev_of(a)))
      end
      return methods.view_as(a, a)
    end
    if type(a) == 'table' then
      if select('#', ...) > 0 then value_error('new: takes data (a table) alone, or sizes') end
      return M.tensor(a, like(t))
    end
    local sizes = { a, ... }
    for k = 1, #sizes do
      if not is_int(sizes[k]) or sizes[k] < 0 then
        type_error(fmt('new: expected sizes (non-negative integers), a table of data or a tensor; argument %d is %s', k,
          got(sizes[k])))
      end
    end
    return M.empty(sizes, like(t))
  end

  ---------------------------------------------------------------- predicates and metadata
  function methods.is_same_size(t, o)
    need_tensor('is_same_size', 'input', t)
    need_tensor('is_same_size', 'other', o)
    return same_shape(t, o)
  end
  function methods.is_signed(t)
    need_tensor('is_signed', 'input', t)
    return t._dtype ~= 6 and t._dtype ~= 7
  end
  --- is_nonzero(): the one element's truth (a Lua boolean); an error for zero or several elements
  function methods.is_nonzero(t)
    need_tensor('is_nonzero', 'input', t)
    if t._numel == 0 then runtime_error('is_nonzero: Boolean value of Tensor with no values is ambiguous') end
    if t._numel > 1 then runtime_error('is_nonzero: Boolean value of Tensor with more than one value is ambiguous') end
    local v = methods.item(t)
    if type(v) == 'boolean' then return v end
    return v ~= 0
  end
  function methods.is_inference(t)
    need_tensor('is_inference', 'input', t)
    return false
  end
  function methods.has_names(t)
    need_tensor('has_names', 'input', t)
    return false
  end
  fn_forms('is_same_size is_signed is_nonzero is_inference')
  props.is_cpu = function(t) return t._devtype == 0 end
  for _, k in ipairs({ 'is_meta', 'is_sparse', 'is_quantized', 'is_mkldnn', 'is_nested' }) do
    props[k] = function() return false end
  end
  props.layout = function() return 'torch.strided' end
  --- t.H: the conjugate transpose of a matrix (real tensors: the transpose, a view); 0-d: t
  props.H = function(t)
    if t._ndim == 0 then return t end
    if t._ndim ~= 2 then
      runtime_error(fmt('tensor.H is only supported on matrices (2-D tensors), got a %d-d tensor%s', t._ndim,
        t._ndim > 2 and ' (for batches of matrices, use t.mH)' or ''))
    end
    return methods.transpose(t, 1, 2)
  end
  --- storage_type(): 'torch.FloatStorage', 'torch.cuda.LongStorage', ... (the name; dplhost has no Storage objects)
  function methods.storage_type(t)
    need_tensor('storage_type', 'input', t)
    return fmt('torch.%s%sStorage', t._devtype == 0 and '' or 'cuda.', STORAGE[dtype_of(t)])
  end

  ---------------------------------------------------------------- resize_
  local function set_contiguous(t, sizes)
    t._ndim = #sizes
    local s, n = 1, 1
    for k = #sizes, 1, -1 do
      t._shape[k - 1] = sizes[k]
      t._stride[k - 1] = s
      s = s * sizes[k]
      n = n * sizes[k]
    end
    for k = #sizes, 7 do t._shape[k] = 0 t._stride[k] = 0 end
    t._numel = n
    t._flags = bit.bor(t._flags, 1)
  end
  local function parse_sizes(name, a, ...)
    local sizes = type(a) == 'table' and not is_tensor(a) and a or { a, ... }
    if type(a) == 'table' and select('#', ...) > 0 then value_error(fmt('%s: takes a list of sizes or sizes', name)) end
    if #sizes > 8 then value_error(fmt('%s: at most 8 dims, got %d', name, #sizes)) end
    local r = {}
    for k = 1, #sizes do
      local v = sizes[k]
      if is_tensor(v) and v._ndim == 0 then v = methods.item(v) end
      if not is_int(v) or v < 0 then value_error(fmt('%s: size %d must be a non-negative integer, got %s', name, k, got(v))) end
      r[k] = v
    end
    return r
  end
  local function resize(name, t, sizes)
    if t.requires_grad then runtime_error(fmt('%s: cannot resize a tensor that requires grad', name)) end
    local same = #sizes == t._ndim
    if same then for k = 1, #sizes do if t._shape[k - 1] ~= sizes[k] then same = false end end end
    if same then return t end
    local n = 1
    for k = 1, #sizes do n = n * sizes[k] end
    local es = methods.element_size(t)
    local off = tonumber(t._offset)
    local cap = floor(tonumber(C.dpl_storage_nbytes(t)) / es)
    if off + n > cap then
      -- a larger storage holding the old one's elements at their places; t takes it, the handle `new` the old one
      local new = M.empty({ off + n }, like(t))
      if cap > 0 then
        methods.copy_(methods.narrow(new, 1, 1, cap), methods.as_strided(methods.detach(t), { cap }, { 1 }, 0))
      end
      local old_base = ffi.cast('char *', t._data) - off * es
      local new_base = new._data
      t._storage, new._storage = new._storage, t._storage
      t._data = ffi.cast('char *', new_base) + off * es
      new._data = old_base
    end
    set_contiguous(t, sizes)
    return t
  end
  --- resize_(sizes...) / resize_({sizes}): t takes the new shape with contiguous strides from its storage
  --- offset; the elements there keep their values, a larger storage is allocated when it does not fit (the
  --- old one's elements copied to their places; the rest uninitialised). The same shape changes nothing.
  function methods.resize_(t, ...)
    need_tensor('resize_', 'input', t)
    return resize('resize_', t, parse_sizes('resize_', ...))
  end
  function methods.resize_as_(t, o)
    need_tensor('resize_as_', 'input', t)
    need_tensor('resize_as_', 'the_template', o)
    return resize('resize_as_', t, size_of(o))
  end

  ---------------------------------------------------------------- apply_, map_, map2_
  -- a contiguous host copy of t in a dtype Lua reads, and a pointer to its elements
  local function readable(t)
    local dt = READ[t._dtype]
    local c = methods.contiguous(methods.to(t, dt))
    return c, ffi.cast(CPTR[dt], c._data)
  end
  local function per_element(name, t, fn, others)
    need_tensor(name, 'input', t)
    if type(fn) ~= 'function' and not (type(fn) == 'table' and getmetatable(fn) and getmetatable(fn).__call) then
      type_error(fmt('%s: callable must be a function, got %s', name, got(fn)))
    end
    for k, o in ipairs(others) do need_tensor(name, k == 1 and (#others == 1 and 'other' or 'tensor1') or 'tensor2', o) end
    if t._devtype ~= 0 then type_error(fmt('%s: only CPU tensors are supported (got one on %s; the Lua function runs per element on the host: move the tensor with :to("cpu"))', name, dev_of(t))) end
    for _, x in ipairs({ t, unpack(others) }) do
      if x.requires_grad then
        runtime_error(fmt("%s: can't call %s() on a tensor that requires grad; use t:detach():%s(...)", name, name, name))
      end
    end
    local size = size_of(t)
    local srcs = {}
    for k, o in ipairs(others) do
      if o._dtype ~= t._dtype then
        type_error(fmt('%s: expected %s of dtype %s (the input\'s), got %s', name, #others == 1 and 'other' or 'tensor' .. k,
          dtype_of(t), dtype_of(o)))
      end
      if o._devtype ~= 0 then type_error(fmt('%s: only CPU tensors are supported (got one on %s; the Lua function runs per element on the host: move the tensor with :to("cpu"))', name, dev_of(o))) end
      local ok, e = pcall(methods.expand, o, size)
      if ok then
        srcs[k] = e
      elseif o._numel == t._numel then -- Torch7's rule: as many elements, paired in row-major order
        srcs[k] = methods.reshape(methods.contiguous(o), size)
      else
        runtime_error(fmt('%s: %s of shape %s neither broadcasts to the input\'s shape %s nor has as many elements',
          name, #others == 1 and 'other' or 'tensor' .. k, shape_str(o), shape_str(t)))
      end
    end
    local out, po = readable(methods.clone(t))
    if out._data == t._data then out = methods.clone(out) po = ffi.cast(CPTR[READ[t._dtype]], out._data) end
    local ps = {}
    local keep = {}
    for k = 1, #srcs do keep[k], ps[k] = readable(srcs[k]) end
    local n = tonumber(t._numel)
    local isbool, isint64 = t._dtype == 7, t._dtype == 5
    local function conv(v)
      if isint64 then return tonumber(v) end
      return v
    end
    for i = 0, n - 1 do
      local v
      if #ps == 0 then
        v = fn(conv(po[i]))
      elseif #ps == 1 then
        v = fn(conv(po[i]), conv(ps[1][i]))
      else
        v = fn(conv(po[i]), conv(ps[1][i]), conv(ps[2][i]))
      end
      if v ~= nil then
        local tv = type(v)
        if tv == 'boolean' then
          if not isbool then v = v and 1 or 0 end
        elseif tv ~= 'number' then
          type_error(fmt('%s: the function must return a number (or nil to keep the element), got %s', name, got(v)))
        elseif isbool then
          v = v ~= 0
        elseif t._dtype >= 4 then
          v = v ~= v and 0 or (v >= 0 and floor(v) or ceil(v))
        end
        po[i] = v
      end
    end
    methods.copy_(t, out)
    return t
  end
  --- apply_(fn): t's elements replaced by fn(element), in row-major order (Torch7's and PyTorch's apply_; a nil
  --- result keeps the element, as Torch7's); CPU tensors, not requiring grad. Returns t.
  function methods.apply_(t, fn) return per_element('apply_', t, fn, {}) end
  --- map_(other, fn): t's elements replaced by fn(t's, other's); other broadcasts to t (PyTorch) or has as
  --- many elements (Torch7: row-major pairs)
  function methods.map_(t, o, fn) return per_element('map_', t, fn, { o }) end
  --- map2_(tensor1, tensor2, fn): fn(t's, tensor1's, tensor2's)
  function methods.map2_(t, a, b, fn) return per_element('map2_', t, fn, { a, b }) end

  ---------------------------------------------------------------- names dplhost cannot support
  local COMPLEX = 'dplhost has no complex dtype'
  local NAMED = 'dplhost has no named tensors (dims are 1-based positions)'
  local SPARSE = 'dplhost has no sparse layouts (tensors are dense and strided)'
  local QUANT = 'dplhost has no quantized tensors'
  local UNSUPPORTED = {
    cfloat = COMPLEX, cdouble = COMPLEX, chalf = COMPLEX,
    stft = COMPLEX .. ' (a short-time Fourier transform returns complex values)', istft = COMPLEX,
    rename = NAMED, rename_ = NAMED, refine_names = NAMED, align_to = NAMED, align_as = NAMED,
    to_sparse = SPARSE, to_sparse_coo = SPARSE, to_sparse_csr = SPARSE, to_sparse_csc = SPARSE, to_sparse_bsr = SPARSE,
    to_sparse_bsc = SPARSE,
    q_scale = QUANT, q_zero_point = QUANT, q_per_channel_scales = QUANT, q_per_channel_zero_points = QUANT,
    q_per_channel_axis = QUANT, qscheme = QUANT, int_repr = QUANT, dequantize = QUANT,
    eig = 'removed from PyTorch (deprecated since 1.9): see dpl.linalg.eig, or dpl.linalg.eigh for symmetric matrices',
    lstsq = 'deprecated in PyTorch since 1.9: see dpl.linalg.lstsq(A, B) (its argument order)',
    solve = 'deprecated in PyTorch since 1.9: see dpl.linalg.solve(A, B) (torch.solve took (B, A))',
  }
  local FN = { stft = true, istft = true, q_scale = true, q_zero_point = true, q_per_channel_scales = true,
    q_per_channel_zero_points = true, q_per_channel_axis = true, qscheme = true, int_repr = true, dequantize = true,
    eig = true, lstsq = true, solve = true } -- (geqrf, orgqr, ormqr: dpl.linalg's)
  for name, why in pairs(UNSUPPORTED) do
    local f = function() not_implemented(fmt('%s is not supported: %s', name, why)) end
    methods[name] = f
    if FN[name] then M[name] = f end
  end
  --- t.names: reading it raises (PyTorch's unnamed tensors give a tuple of None)
  props.names = function() not_implemented('names is not supported: ' .. NAMED) end
end
