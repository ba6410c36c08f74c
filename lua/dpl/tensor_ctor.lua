-- dpl.tensor_ctor: the constructors of dpl.tensor and the module-level state functions that go
-- with them: empty/zeros/ones/full, arange/linspace/eye, dpl.tensor(nested table or number)
-- with PyTorch's dtype inference, the *_like forms, rand/randn/randint, manual_seed and the
-- generator state, the random fills (uniform_, normal_, random_, bernoulli_), set/get_num_threads,
-- share_cores, blas_info and vmath. dpl.tensor installs
-- them (require('dpl.tensor_ctor')(M, helpers)) where they used to be defined, so everything
-- after them in dpl.tensor sees them as before.
local ffi = require 'ffi'
local C = require('dpl.capi').C
local bit = require 'bit'

local type, tostring, tonumber, ipairs, next = type, tostring, tonumber, ipairs, next
local floor, huge = math.floor, math.huge
local istype = ffi.istype
local I64, U64 = ffi.typeof('int64_t'), ffi.typeof('uint64_t')
local I64_LIM = 2 ^ 63 -- integral numbers from here on (and below -2^63) make float32, not a saturated int64
-- a number that makes an int64 tensor by default: integral and in int64's range (nan is not)
local function int64_number(v) return v == floor(v) and v < I64_LIM and v >= -I64_LIM end
local fmt = string.format

return function(M, H)
  local call1, check, dtype_id, error, got, is_opts = H.call1, H.check, H.dtype_id, H.error, H.got, H.is_opts
  local check_scalar = H.check_scalar
  local is_tensor, need_count, need_number, need_opts = H.is_tensor, H.need_count, H.need_number, H.need_opts
  local need_tensor, new_empty, opts_dtype_device, out1 = H.need_tensor, H.new_empty, H.opts_dtype_device, H.out1
  local parse_device, parse_sizes, shp = H.parse_device, H.parse_sizes, H.shp

  -- an integer in int64 (1.5 was truncated, inf reached C as -2^63), as PyTorch's int arguments
  local function need_int64(op, what, x)
    need_number(op, what, x)
    if x ~= floor(x) or x >= 2 ^ 63 or x < -2 ^ 63 then
      error(fmt('%s: %s must be an integer, got %s', op, what, tostring(x)), 2)
    end
  end

  -- {requires_grad = true} of a constructor: the new leaf records gradients (autograd's setter
  -- refuses integer and bool dtypes, as PyTorch)
  local function grad_leaf(t, rg)
    if rg then t.requires_grad = true end
    return t
  end

  function M.empty(...)
    local n, opts = parse_sizes('empty', shp, ...)
    local dt, devt, devi, rg = opts_dtype_device(opts, 'empty')
    return grad_leaf(new_empty(n, dt, devt, devi), rg)
  end

  function M.zeros(...)
    local n, opts = parse_sizes('zeros', shp, ...)
    local dt, devt, devi, rg = opts_dtype_device(opts, 'zeros')
    local t = new_empty(n, dt, devt, devi)
    if bit.band(t._flags, 2) ~= 0 then check(C.dpl_tensor_fill_(t, 0)) -- device memory (a real GPU)
    else ffi.fill(t._data, tonumber(t._numel) * tonumber(C.dpl_dtype_size(dt))) end
    return grad_leaf(t, rg)
  end

  function M.ones(...)
    local n, opts = parse_sizes('ones', shp, ...)
    local dt, devt, devi, rg = opts_dtype_device(opts, 'ones')
    local t = new_empty(n, dt, devt, devi)
    check(C.dpl_tensor_fill_(t, 1))
    return grad_leaf(t, rg)
  end

  --- full(size, value [, opts]) with size a table (or a number for 1-d).
  function M.full(size, value, opts)
    if type(size) == 'number' then size = { size } end
    if type(size) ~= 'table' then error('full: expected a size table as the first argument', 2) end
    if type(value) ~= 'number' and type(value) ~= 'boolean' then
      error(fmt('full: expected a number as fill value, got %s', type(value)), 2)
    end
    local n = parse_sizes('full', shp, size)
    -- the default dtype: bool, int64 for an integral number in int64's range, else float32
    -- (inf, nan, 1e300 are floats, as in Python)
    local def = type(value) == 'boolean' and 7
      or (int64_number(value) and 5 or 0)
    local dt, devt, devi, rg = opts_dtype_device(opts, 'full', def)
    if type(value) == 'boolean' then value = value and 1 or 0 end
    check_scalar('full', value, dt)
    local t = new_empty(n, dt, devt, devi)
    check(C.dpl_tensor_fill_(t, value))
    return grad_leaf(t, rg)
  end

  function M.arange(a, b, c, opts)
    if is_opts(b) then opts, b = b, nil elseif is_opts(c) then opts, c = c, nil end
    local start, stop, step
    if b == nil then start, stop, step = 0, a, 1 else start, stop, step = a, b, c or 1 end
    local sse = { start, stop, step }
    for i = 1, 3 do
      local v = sse[i] -- (a nil end: ipairs would stop before it)
      if type(v) ~= 'number' or v ~= v then error('arange: start, end and step must be numbers', 2) end
      if v == huge or v == -huge then error(fmt('arange: start, end and step must be finite, got %g', v), 2) end
    end
    if step == 0 then error('arange: step must be nonzero', 2) end
    if (step > 0 and stop < start) or (step < 0 and stop > start) then
      error(fmt('arange: upper bound and step sign are inconsistent (start=%g, end=%g, step=%g)', start, stop, step), 2)
    end
    local n = math.ceil((stop - start) / step)
    if n < 0 then n = 0 end
    -- (arange(1e308): past int64 the count became -2^63, "negative length")
    if n >= 2 ^ 62 then error(fmt('arange: %g elements (start=%g, end=%g, step=%g) is too large', n, start, stop, step), 2) end
    local allint = start == floor(start) and stop == floor(stop) and step == floor(step)
    local dt, devt, devi, rg = opts_dtype_device(opts, 'arange', allint and 5 or 0)
    return grad_leaf(call1(C.dpl_tensor_arange, start, step, n, dt, devt, devi, out1), rg)
  end

  function M.linspace(start, stop, steps, opts)
    if type(start) ~= 'number' or type(stop) ~= 'number' or type(steps) ~= 'number' then
      error('linspace: expected (start, end, steps)', 2)
    end
    need_count('linspace', 'steps', steps) -- (2.5 was truncated, NaN/inf reached C as -2^63)
    local dt, devt, devi, rg = opts_dtype_device(opts, 'linspace')
    if M._INT_RANGE[dt] then check_scalar('linspace', start, dt) check_scalar('linspace', stop, dt) end
    return grad_leaf(call1(C.dpl_tensor_linspace, start, stop, steps, dt, devt, devi, out1), rg)
  end

  function M.eye(n, m, opts)
    if is_opts(m) then opts, m = m, nil end
    m = m or n
    if type(n) ~= 'number' or type(m) ~= 'number' then error('eye: expected (n [, m])', 2) end
    -- (2.5 was truncated to 2; NaN and inf reached C as -2^63)
    need_count('eye', 'n', n)
    need_count('eye', 'm', m)
    local dt, devt, devi, rg = opts_dtype_device(opts, 'eye')
    return grad_leaf(call1(C.dpl_tensor_eye, n, m, dt, devt, devi, out1), rg)
  end

  -- the leaves of a nested table, depth-first into P.flat (P.n of them), and their kind:
  -- 'int', 'float' or 'bool' (P.wide: an int64_t/uint64_t cdata among them). The state goes as
  -- an argument: a per-call closure, once compiled, kept its immutable upvalues (the flat
  -- list of every value) alive in the trace (see dpl.tensor_print)
  local function walk_nested(P, v, d)
    local shape = P.shape
    if d > #shape then
      local tv = type(v)
      if tv == 'cdata' and is_tensor(v) and v._ndim == 0 then -- a 0-d tensor: its value, its dtype's kind
        local fl = v._dtype <= 3
        v = v:item()
        tv = type(v)
        if fl and P.kind ~= 'bool' then P.kind = 'float' end
      end
      if tv == 'number' then
        if P.kind == 'bool' then error('tensor: mixed booleans and numbers', 5) end
        if P.kind ~= 'float' and not int64_number(v) then P.kind = 'float' end
      elseif tv == 'cdata' and (istype(I64, v) or istype(U64, v)) then -- 9223372036854775807LL: exact
        if P.kind == 'bool' then error('tensor: mixed booleans and numbers', 5) end
        P.wide = true
      elseif tv == 'boolean' then
        if P.n > 0 and P.kind ~= 'bool' then error('tensor: mixed booleans and numbers', 5) end
        P.kind = 'bool'
        v = v and 1 or 0
      else
        error(fmt('tensor: expected numbers, booleans or int64_t/uint64_t cdata, got %s', tv), 5)
      end
      local n = P.n + 1
      P.n = n
      P.flat[n] = v
      return
    end
    if type(v) ~= 'table' or #v ~= shape[d] then
      error(fmt('tensor: ragged nested table: expected a list of %d at depth %d, got %s', shape[d], d,
        type(v) == 'table' and ('a list of ' .. #v) or type(v)), 5)
    end
    for i = 1, shape[d] do walk_nested(P, v[i], d + 1) end
  end

  -- nested Lua table -> shape, flat values, kind ('int', 'float', 'bool')
  local function scan_nested(data)
    local shape = {}
    local x = data
    while type(x) == 'table' do
      if #x == 0 and next(x) ~= nil then
        error(fmt('tensor: expected a list (keys 1..n), got a table with key %s', tostring((next(x)))), 4)
      end
      shape[#shape + 1] = #x
      if #shape > 8 then error('tensor: at most 8 dims', 4) end
      x = x[1]
    end
    local P = { shape = shape, flat = {}, n = 0, kind = 'int', wide = false }
    walk_nested(P, data, 1)
    return shape, P.flat, P.n, P.kind, P.wide
  end

  -- a list 1..#l of numbers only (no nested table, no hash part beside it)?
  local function flat_numbers(l)
    local n = #l
    for i = 1, n do if type(l[i]) ~= 'number' then return false end end
    return next(l, n) == nil
  end
  -- 'int' when every number of the list is an integer int64 can hold, else 'float'
  local function int_kind(l, n)
    for i = 1, n do
      if not int64_number(l[i]) then return 'float' end
    end
    return 'int'
  end

  -- an int64_t/uint64_t cdata element: into an int64 element exactly, into another dtype as
  -- the number it is (an integer dtype's range checked as for any number)
  local I64_MAX = 9223372036854775807ULL
  local function wide_elem(v, dt)
    if dt == 5 then
      if istype(U64, v) and v > I64_MAX then
        error(fmt('tensor: value %s cannot be converted to int64 without overflow', tostring(v):gsub('ULL$', '')), 4)
      end
      return ffi.cast('int64_t', v)
    end
    local x = tonumber(v)
    if M._INT_RANGE[dt] then check_scalar('tensor', x, dt) end
    return x
  end

  --- dpl.tensor(data [, {dtype=, device=}]): data is a number, a boolean, a nested
  --- table of them, or a tensor (copied).
  function M.tensor(data, opts)
    local _, _, _, rg = opts_dtype_device(opts, 'tensor') -- (checks the keys)
    if is_tensor(data) then
      local dt = opts and opts.dtype and dtype_id(opts.dtype, 'tensor') or data._dtype
      local devt, devi = data._devtype, data._devindex
      if opts and opts.device then devt, devi = parse_device(opts.device, 'tensor') end
      return grad_leaf(call1(C.dpl_tensor_to, data, dt, devt, devi, out1), rg)
    end
    local td = type(data)
    local shape, flat, n, kind, wide
    if td == 'number' or td == 'boolean' then
      shape, flat, n = {}, { td == 'boolean' and (data and 1 or 0) or data }, 1
      kind = td == 'boolean' and 'bool' or (int64_number(data) and 'int' or 'float')
    elseif td == 'cdata' and (istype(I64, data) or istype(U64, data)) then
      shape, flat, n, kind, wide = {}, { data }, 1, 'int', true
    elseif td == 'table' and type(data[1]) == 'number' and flat_numbers(data) then
      -- a flat list of numbers (a batch's indices, every step): no closure, compiled
      n = #data
      shape, flat, kind = { n }, data, int_kind(data, n)
    elseif td == 'table' then
      shape, flat, n, kind, wide = scan_nested(data)
    else
      error(fmt('tensor: expected a number, a boolean, a nested table or a tensor, got %s', td), 2)
    end
    local def = kind == 'bool' and 7 or (kind == 'int' and n > 0) and 5 or 0 -- {} is float32, as in PyTorch
    local dt, devt, devi = opts_dtype_device(opts, 'tensor', def)
    for i = 1, #shape do shp[i - 1] = shape[i] end
    local t = new_empty(#shape, dt, devt, devi)
    if n > 0 and wide and dt == 5 and devt == 0 then -- (int64 cdata among the elements: no
      -- trip through double; the new tensor is contiguous)
      local p = ffi.cast('int64_t*', t._data)
      for i = 1, n do
        local v = flat[i]
        if type(v) == 'number' then p[i - 1] = check_scalar('tensor', v, dt) else p[i - 1] = wide_elem(v, dt) end
      end
    elseif n > 0 and wide and dt == 5 then -- (on a device: built on the CPU, then copied)
      local cpu = M.tensor(data, { dtype = 'int64' })
      check(C.dpl_tensor_copy_(t, cpu))
    elseif n > 0 then
      if wide then for i = 1, n do if type(flat[i]) ~= 'number' then flat[i] = wide_elem(flat[i], dt) end end end
      local buf = ffi.new('double[?]', n)
      if M._INT_RANGE[dt] then -- (an explicit integer dtype: each number checked as PyTorch's
        -- tensor() does; a floating dtype keeps an overflow as inf, as there)
        for i = 1, n do buf[i - 1] = check_scalar('tensor', flat[i], dt) end
      else
        for i = 1, n do buf[i - 1] = flat[i] end
      end
      check(C.dpl_tensor_set_from_f64(t, buf, n))
    end
    return grad_leaf(t, rg)
  end
  M.as_tensor = M.tensor

  local function like_opts(t, opts, name)
    need_tensor(name, 'input', t)
    local _, _, _, rg = opts_dtype_device(opts, name) -- (checks the keys)
    local dt = opts and opts.dtype and dtype_id(opts.dtype, name) or t._dtype
    local devt, devi = t._devtype, t._devindex
    if opts and opts.device then devt, devi = parse_device(opts.device, name) end
    for i = 0, t._ndim - 1 do shp[i] = t._shape[i] end
    return t._ndim, dt, devt, devi, rg
  end

  local function empty_like(t, opts, name)
    local n, dt, a, b, rg = like_opts(t, opts, name)
    return new_empty(n, dt, a, b), rg
  end
  function M.empty_like(t, opts) return grad_leaf(empty_like(t, opts, 'empty_like')) end
  function M.zeros_like(t, opts)
    local r, rg = empty_like(t, opts, 'zeros_like')
    if bit.band(r._flags, 2) ~= 0 then check(C.dpl_tensor_fill_(r, 0)) -- device memory (a real GPU)
    else ffi.fill(r._data, tonumber(r._numel) * tonumber(C.dpl_dtype_size(r._dtype))) end
    return grad_leaf(r, rg)
  end
  function M.ones_like(t, opts) local r, rg = empty_like(t, opts, 'ones_like') check(C.dpl_tensor_fill_(r, 1)) return grad_leaf(r, rg) end
  function M.full_like(t, v, opts)
    if type(v) == 'boolean' then v = v and 1 or 0 end
    need_number('full_like', 'fill_value', v)
    local r, rg = empty_like(t, opts, 'full_like')
    check_scalar('full_like', v, r._dtype)
    check(C.dpl_tensor_fill_(r, v))
    return grad_leaf(r, rg)
  end
  function M.rand_like(t, opts) local r, rg = empty_like(t, opts, 'rand_like') check(C.dpl_tensor_uniform_(r, 0, 1)) return grad_leaf(r, rg) end
  function M.randn_like(t, opts) local r, rg = empty_like(t, opts, 'randn_like') check(C.dpl_tensor_normal_(r, 0, 1)) return grad_leaf(r, rg) end

  function M.rand(...)
    local n, opts = parse_sizes('rand', shp, ...)
    local dt, devt, devi, rg = opts_dtype_device(opts, 'rand')
    local t = new_empty(n, dt, devt, devi)
    check(C.dpl_tensor_uniform_(t, 0, 1))
    return grad_leaf(t, rg)
  end

  function M.randn(...)
    local n, opts = parse_sizes('randn', shp, ...)
    local dt, devt, devi, rg = opts_dtype_device(opts, 'randn')
    local t = new_empty(n, dt, devt, devi)
    check(C.dpl_tensor_normal_(t, 0, 1))
    return grad_leaf(t, rg)
  end

  --- randint(high, size [, opts]) or randint(low, high, size [, opts]): integers in [low, high).
  function M.randint(a, b, c, opts)
    local low, high, size
    if type(b) == 'table' and not is_opts(b) then low, high, size, opts = 0, a, b, c
    else low, high, size = a, b, c end
    if type(low) ~= 'number' or type(high) ~= 'number' or type(size) ~= 'table' then
      error('randint: expected (high, size) or (low, high, size) with size a table', 2)
    end
    need_int64('randint', 'low', low) -- (NaN drew garbage, 5.5 was truncated)
    need_int64('randint', 'high', high)
    local n = parse_sizes('randint', shp, size)
    local dt, devt, devi, rg = opts_dtype_device(opts, 'randint', 5)
    local t = new_empty(n, dt, devt, devi)
    check(C.dpl_tensor_randint_(t, low, high))
    return grad_leaf(t, rg)
  end

  function M.manual_seed(s)
    if type(s) ~= 'number' or s ~= floor(s) or s < 0 or s >= 2 ^ 64 then -- (inf was taken)
      error(fmt('manual_seed: expected a non-negative integer, got %s', tostring(s)), 2)
    end
    C.dpl_manual_seed(s)
  end
  local rngbuf = ffi.new('uint64_t[2]')
  function M.get_rng_state()
    C.dpl_rng_get_state(rngbuf, rngbuf + 1)
    return { seed = rngbuf[0], offset = rngbuf[1] }
  end
  function M.set_rng_state(s)
    local function num(v) return type(v) == 'number' or (type(v) == 'cdata' and tonumber(v) ~= nil) end
    if type(s) ~= 'table' or not num(s.seed) or not num(s.offset) then
      error(('set_rng_state: expected a state from get_rng_state() ({seed=, offset=}), got %s'):format(got(s)))
    end
    C.dpl_rng_set_state(s.seed, s.offset)
  end

  function M.set_num_threads(n)
    need_count('set_num_threads', 'n', n)
    check(C.dpl_set_num_threads(n))
  end
  function M.get_num_threads() return C.dpl_get_num_threads() end
  --- For one of nprocs processes started together on this machine (ddp_spawn, the
  --- subprocess launcher; `dplhost --nproc` does the same in C): unless the user set
  --- DPL_NUM_THREADS or OMP_NUM_THREADS, kernels get max(1, cores // nprocs) threads,
  --- so that the ranks' threads do not outnumber the cores (torchrun sets 1). Also
  --- exported as DPL_NUM_THREADS for processes started from here. Returns the count
  --- set, or nil when the user's setting stands.
  local devinfo = ffi.new('dpl_device_info')
  function M.share_cores(nprocs)
    need_count('share_cores', 'nprocs', nprocs)
    local function set(v) return v ~= nil and v ~= '' end
    if set(os.getenv('DPL_NUM_THREADS')) or set(os.getenv('OMP_NUM_THREADS')) then return nil end
    local cores = 1
    if C.dpl_device_get_info(0, 0, devinfo) == 0 and devinfo.cores > 0 then cores = devinfo.cores end
    local n = math.max(1, math.floor(cores / math.max(1, nprocs)))
    check(C.dpl_set_num_threads(n))
    C.dpl_proc_setenv('DPL_NUM_THREADS', tostring(n))
    return n
  end
  function M.blas_info() return ffi.string(C.dpl_blas_info()) end
  --- The path of the vectorised float32 math kernels: 'avx512', 'avx2', 'scalar' or 'off'.
  --- vmath(name) sets it ('auto' for the best this CPU runs) and returns the one in effect.
  function M.vmath(name)
    if name ~= nil and type(name) ~= 'string' then
      error(('vmath: expected a path name (string), got %s'):format(type(name)), 2)
    end
    local r = C.dpl_vmath(name)
    if r == nil then check(C.DPL_EINVAL) end
    return ffi.string(r)
  end

  -- random fills in place (the same counter-based generator as rand/randn/randint)
  local methods = M.methods
  function methods.uniform_(t, a, b)
    if a ~= nil then need_number('uniform_', 'from', a) end
    if b ~= nil then need_number('uniform_', 'to', b) end
    check(C.dpl_tensor_uniform_(t, a or 0, b or 1))
    return t
  end
  function methods.normal_(t, m, s)
    if m ~= nil then need_number('normal_', 'mean', m) end
    if s ~= nil then need_number('normal_', 'std', s) end
    check(C.dpl_tensor_normal_(t, m or 0, s or 1))
    return t
  end
  function methods.random_(t, a, b)
    if b == nil then a, b = 0, a end
    need_int64('random_', 'from', a)
    need_int64('random_', 'to', b)
    check(C.dpl_tensor_randint_(t, a, b))
    return t
  end
  function methods.bernoulli_(t, p)
    if p ~= nil then need_number('bernoulli_', 'p', p) end
    check(C.dpl_tensor_bernoulli_(t, p or 0.5))
    return t
  end
end
