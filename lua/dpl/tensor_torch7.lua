-- tensor_torch7.lua: the Torch7 (luatorch) names a Torch7 user types, on dplhost's PyTorch
-- semantics (docs/torch7.md). Three kinds:
--   * aliases, where Torch7's method is one of dplhost's with the same meaning: Torch7's
--     in-place methods go to PyTorch's underscored ones (x:fill(v) is x:fill_(v), x:cmul(y)
--     is x:mul_(y), x:indexCopy(...) is x:index_copy_(...), x:apply(f) is x:apply_(f)), the others to their PyTorch
--     names (nElement is numel, viewAs is view_as, repeatTensor is repeat);
--   * names whose Torch7 meaning differs or that dplhost does not have (storage, set,
--     random's inclusive bounds, ...): calling one raises NotImplementedError naming
--     the dplhost way (through the tensor metatable's `missing` table), instead of Lua's
--     "attempt to call method 'storage' (a nil value)";
--   * dpl.Tensor(...) and dpl.FloatTensor(...) etc. as constructors, dpl.range (inclusive, as
--     Torch7's and PyTorch's deprecated torch.range), dpl.manualSeed, dpl.isTensor, and
--     t:type('torch.DoubleTensor') (PyTorch takes those names too).
-- Installed by dpl.autograd.install after the recorded ops are wrapped; an alias looks its
-- target up by name at each call, so it always reaches the recorded (autograd) version.
local errors = require 'dpl.errors'
local fmt = string.format

local M = {}

-- Torch7 name -> dplhost method (same meaning; Torch7's in-place methods map to the `_` ones)
local ALIASES = {
  nElement = 'numel', nDimension = 'dim', isContiguous = 'is_contiguous',
  fill = 'fill_', zero = 'zero_', copy = 'copy_',
  cmul = 'mul_', cdiv = 'div_', csub = 'sub_', cmax = 'maximum_', cmin = 'minimum_',
  viewAs = 'view_as', expandAs = 'expand_as', repeatTensor = 'repeat',
  index = 'index_select', indexCopy = 'index_copy_', indexFill = 'index_fill_', indexAdd = 'index_add_',
  maskedFill = 'masked_fill_', maskedSelect = 'masked_select', maskedCopy = 'masked_scatter_',
  uniform = 'uniform_', normal = 'normal_', apply = 'apply_', map = 'map_', map2 = 'map2_', resize = 'resize_',
  resizeAs = 'resize_as_', geometric = 'geometric_', cauchy = 'cauchy_', exponential = 'exponential_',
  logNormal = 'log_normal_', isSameSizeAs = 'is_same_size',
}
M.ALIASES = ALIASES

-- Torch7 names dplhost does not provide (or not with Torch7's meaning): the hint each one's
-- NotImplementedError gives
local MISSING = {
  storage = 'dplhost has no Storage objects: t:data_ptr() is the address, t:storage_offset() the (0-based) offset, '
    .. 't:is_set_to(o) / t:shares_storage(o) compare storages',
  storageOffset = "use t:storage_offset(), which is 0-based as PyTorch's (Torch7's storageOffset() is that plus 1)",
  set = 'dplhost tensors cannot be re-pointed at another storage: use the other tensor, or a view of it '
    .. '(view, narrow, as_strided)',
  random = "Torch7's t:random(a, b) draws from [a, b] inclusive; dplhost's t:random_(low, high) draws from "
    .. '[low, high) as PyTorch: t:random_(a, b + 1)',
  bernoulli = "in place: t:bernoulli_(p); PyTorch's t:bernoulli() (a draw with t's values as the probabilities) "
    .. 'is not provided',
  mv = 'use A:matmul(v) (or dpl.matmul(A, v))',
  ger = "use dpl.outer(u, v) (PyTorch's torch.outer; Torch7's res:ger(u, v) wrote into res)",
  dist = 'write (a - b):norm(p) (p = 2 by default)',
  isSize = 'compare t:size() with the list: t:size(i) == sizes[i] for each dim (t:dim() == #sizes)',
  data = "use t:data_ptr() (the address, as PyTorch's; Torch7's data() was a raw pointer too)",
  cdata = 'a dplhost tensor is itself an FFI cdata (struct dpl_tensor)',
  storageSize = 'dplhost tensors have no Storage objects: t:numel() counts the elements a tensor sees',
  isTensor = 'use dpl.is_tensor(t) (dpl.isTensor(t) too)',
  typeAs = 'use t:type_as(other)',
}
M.MISSING = MISSING

-- Torch7's torch.X functions (and a few of PyTorch's) that dplhost does not have as dpl.X: the
-- hint the NotImplementedError of dpl.X gives (found through dpl's __index, so that a script
-- calling torch.setdefaulttensortype(...) as dpl.setdefaulttensortype(...) learns what to write
-- instead of "attempt to call field 'setdefaulttensortype' (a nil value)")
local NO_DEFAULT = 'dplhost has no global default dtype: tensors are float32 unless made with {dtype = ...} '
  .. "(dpl.zeros(2, 3, {dtype = 'float64'}), dpl.DoubleTensor(2, 3)); convert with x:double() / x:to('float64')"
local CLOCK = "use os.clock() (CPU seconds) or require('dpl').C.dpl_clock() (a monotonic wall clock in seconds)"
local MODULE_MISSING = {
  setdefaulttensortype = NO_DEFAULT, getdefaulttensortype = NO_DEFAULT .. ' (the default is float32)',
  set_default_dtype = NO_DEFAULT, set_default_tensor_type = NO_DEFAULT,
  Timer = CLOCK, tic = CLOCK, toc = CLOCK,
  class = "dplhost's classes come from :extend(): local MyNet = dpl.nn.Module:extend('MyNet') "
    .. '(and function MyNet:__init(...) dpl.nn.Module.__init(self) ... end)',
  typename = "dpl.is_tensor(x) and x:type() (the dtype, 'float32'); a module prints its class name with tostring(m)",
  type = "Lua's type(x) ('cdata' for a tensor), dpl.is_tensor(x), and x:type() for a tensor's dtype",
  serialize = 'dpl.save(obj, path) writes tensors and tables of them to a file (string.buffer for plain Lua values)',
  deserialize = 'dpl.load(path) reads what dpl.save wrote',
  DiskFile = 'io.open for text and bytes; dpl.save(obj, path) / dpl.load(path) for tensors',
  MemoryFile = "string.buffer (require 'string.buffer') for bytes; dpl.save / dpl.load for tensors",
  PipeFile = 'io.popen',
  pointer = 'x:data_ptr() (the address of a tensor\'s first element)',
  CmdLine = "the script's arg table: dpl.Trainer.from_argv(arg) reads the Trainer's flags (docs/trainer.md), "
    .. 'dpl.cli.LightningCLI a whole command line',
  random = "math.random(a, b) (a number), or dpl.randint(low, high, {n}) (from [low, high))",
  uniform = 'math.random() (a number in [0, 1)), or dpl.rand(n) / x:uniform_(a, b)',
  normal = 'dpl.randn(n) * std + mean, or x:normal_(mean, std)',
  bernoulli = "x:bernoulli_(p) (p a number) or dpl.rand(n):lt(p):float()",
  Storage = 'dplhost has no Storage objects: make a tensor, dpl.tensor({...})',
  FloatStorage = 'dplhost has no Storage objects: make a tensor, dpl.tensor({...})',
  LongStorage = "dplhost has no Storage objects: sizes are plain tables ({2, 3}) or dpl.Size({2, 3})",
  initialSeed = 'dpl.manual_seed(s) / dpl.seed_everything(s) set the seed; keep the number you gave',
  expand = 'x:expand(sizes...) (a method)',
  isTypeOf = 'getmetatable(obj) == Class, or an isinstance-like walk of Class.super',
}
M.MODULE_MISSING = MODULE_MISSING

--- M.module_missing(name): for dpl's __index, a function raising NotImplementedError for a
--- Torch7 name in MODULE_MISSING (nil for other names)
function M.module_missing(name)
  local hint = MODULE_MISSING[name]
  if hint == nil then return nil end
  return function()
    error(errors.NotImplementedError(fmt("dpl.%s (torch.%s) is not in dplhost: %s (docs/torch7.md)", name, name, hint)), 2)
  end
end

-- torch.<Name>Tensor -> dtype (PyTorch's t.type('torch.DoubleTensor') takes them too)
local TYPE_NAMES = {
  FloatTensor = 'float32', DoubleTensor = 'float64', HalfTensor = 'float16', BFloat16Tensor = 'bfloat16',
  IntTensor = 'int32', LongTensor = 'int64', ByteTensor = 'uint8', BoolTensor = 'bool',
}
M.TYPE_NAMES = TYPE_NAMES

function M.install(T)
  local methods, is_tensor = T.methods, T.is_tensor
  local VE, NIE = errors.ValueError, errors.NotImplementedError
  local raise = errors.raiser(VE)

  for t7, name in pairs(ALIASES) do
    if methods[t7] == nil then
      methods[t7] = function(t, ...)
        local m = methods[name]
        if m == nil and is_tensor(t) then m = t[name] end -- (a lazily loaded target)
        if m == nil then raise(fmt('%s: expected a tensor, got %s', t7, type(t))) end
        return m(t, ...)
      end
    end
  end
  -- Torch7's res:cmul(a, b) wrote a * b into res; here a second tensor is an error, not res *= a
  for _, t7 in ipairs({ 'cmul', 'cdiv', 'cmax', 'cmin' }) do
    local name = ALIASES[t7]
    methods[t7] = function(t, o, extra)
      if extra ~= nil then
        raise(fmt("%s: takes one argument (x:%s(y) is x:%s(y), in place); Torch7's res:%s(a, b) form is "
          .. 'res:copy_(dpl.%s(a, b)) here', t7, t7, name, t7, name:sub(1, -2)))
      end
      return methods[name](t, o)
    end
  end

  local missing = T._missing
  if missing then
    for name, hint in pairs(MISSING) do
      if methods[name] == nil then
        missing[name] = function()
          error(NIE(fmt("tensor:%s() is Torch7's and not in dplhost: %s (docs/torch7.md)", name, hint)), 2)
        end
      end
    end
  end

  -- t:type('torch.DoubleTensor') / 'torch.cuda.FloatTensor', as torch (and PyTorch) take them
  local raw_type = methods.type
  function methods.type(t, dt, ...)
    if type(dt) == 'string' and dt:sub(1, 6) == 'torch.' then
      local cuda, base = dt:match('^torch%.(cuda%.?)(%w+)$')
      if not base then base = dt:match('^torch%.(%w+)$') end
      local d = base and TYPE_NAMES[base]
      if not d then
        raise(fmt("type: unknown type name '%s' (expected torch.FloatTensor, torch.DoubleTensor, torch.LongTensor, "
          .. 'torch.IntTensor, torch.ByteTensor, torch.BoolTensor, torch.HalfTensor, or a dtype name such as '
          .. "'float64')", dt))
      end
      local r = raw_type(t, d, ...)
      if cuda then r = r:cuda() end
      return r
    end
    return raw_type(t, dt, ...)
  end

  -- x:sub(other [, alpha]): Torch7's x:sub(i1, i2, j1, j2) (a sub-tensor) would silently
  -- compute x - alpha * i1 under PyTorch's signature; more arguments than PyTorch's is an error
  local function too_many(name, hint)
    raise(fmt('%s: too many arguments (expected other [, alpha]); %s', name, hint))
  end
  for _, name in ipairs({ 'sub', 'add' }) do
    local raw = methods[name]
    local hint = name == 'sub'
      and "Torch7's x:sub(i1, i2, j1, j2) (a sub-tensor) is x[{{i1, i2}, {j1, j2}}] or x:narrow(1, i1, i2 - i1 + 1)"
      or "Torch7's res:add(a, value, b) form: write a:add(b, value)"
    methods[name] = function(a, b, alpha, extra)
      if extra ~= nil then too_many(name, hint) end
      -- x:sub(i1, i2): Torch7's rows i1..i2 (a view), which PyTorch's signature reads as x - i1 * i2
      if name == 'sub' and type(b) == 'number' and type(alpha) == 'number' then
        raise(fmt("sub: got two numbers (%g, %g): Torch7's x:sub(i1, i2) (positions i1..i2 along dim 1) is "
          .. 'x:narrow(1, i1, i2 - i1 + 1) or x[{{i1, i2}}] here; to subtract, x:sub(value) or x - value * alpha',
          b, alpha))
      end
      if type(b) == 'number' and is_tensor(alpha) then
        raise(fmt("%s: got a number then a tensor: Torch7's x:%s(value, y) (x %s value * y, in place there) is "
          .. 'x:%s(y, value) here, or x:%s_(y, value) in place', name, name, name == 'add' and '+' or '-', name, name))
      end
      return raw(a, b, alpha)
    end
  end
  T.add, T.sub = methods.add, methods.sub

  -- addcmul(value, tensor1, tensor2): Torch7's order (and in place there); PyTorch's value is last
  for _, name in ipairs({ 'addcmul', 'addcdiv', 'addcmul_', 'addcdiv_' }) do
    local raw = methods[name]
    local ip = name:sub(-1) == '_' and name or name .. '_'
    methods[name] = function(s, t1, t2, v, extra)
      if type(t1) == 'number' and is_tensor(t2) then
        raise(fmt("%s: got a number then tensors: Torch7's x:%s(value, t1, t2) (in place there) is "
          .. 'x:%s(t1, t2, {value = value}) here', name, name:gsub('_$', ''), ip))
      end
      return raw(s, t1, t2, v, extra)
    end
  end

  -- constructors: dpl.Tensor(2, 3) / dpl.Tensor({1, 2}) and the typed ones, as torch.Tensor(...)
  local function ctor(name, dtype)
    return function(a, ...)
      if a == nil then return T.empty(0, { dtype = dtype }) end
      -- dpl.Tensor(x:size()): sizes (Torch7's torch.Tensor(x:size()) and PyTorch's torch.Tensor(torch.Size)),
      -- not the data {2, 3}
      if type(a) == 'table' and getmetatable(a) == T._SizeMT then
        if select('#', ...) > 0 then raise(fmt('%s: takes a dpl.Size alone, got more arguments', name)) end
        return T.empty(a, { dtype = dtype })
      end
      if type(a) == 'table' or is_tensor(a) or type(a) == 'boolean' then
        if select('#', ...) > 0 then
          raise(fmt('%s: takes sizes (%s(2, 3)) or data (%s({1, 2})), not data and more arguments', name, name, name))
        end
        if is_tensor(a) then return a:to(dtype) end
        return T.tensor(a, { dtype = dtype })
      end
      if type(a) ~= 'number' then
        raise(fmt('%s: expected sizes (%s(2, 3)) or a table of data, got %s', name, name, type(a)))
      end
      local sizes = { a, ... }
      for i = 2, #sizes do
        if type(sizes[i]) ~= 'number' then
          raise(fmt('%s: size %d must be a number, got %s', name, i, type(sizes[i])))
        end
      end
      return T.empty(sizes, { dtype = dtype })
    end
  end
  for name, d in pairs(TYPE_NAMES) do
    if T[name] == nil then T[name] = ctor(name, d) end
  end
  -- dpl.Tensor is the methods table (PyTorch's torch.Tensor holds the methods too); calling it constructs
  if getmetatable(methods) == nil then
    local tensor_ctor = ctor('Tensor', 'float32')
    setmetatable(methods, { __call = function(_, ...) return tensor_ctor(...) end })
  end

  --- dpl.range(a, b [, step=1] [, opts]): a, a + step, ... up to b inclusive (Torch7's torch.range and PyTorch's
  --- deprecated one); float32 unless opts.dtype. dpl.arange excludes b.
  function T.range(a, b, step, opts)
    if type(step) == 'table' and opts == nil then step, opts = nil, step end
    step = step == nil and 1 or step
    for _, v in ipairs({ { 'start', a }, { 'end', b }, { 'step', step } }) do
      if type(v[2]) ~= 'number' then raise(fmt('range: %s must be a number, got %s', v[1], type(v[2]))) end
    end
    if opts ~= nil and type(opts) ~= 'table' then raise(fmt('range: opts must be a table, got %s', type(opts))) end
    if step == 0 then raise('range: step must be nonzero') end
    if (b - a) / step < 0 then
      raise(fmt('range: upper bound and larger bound inconsistent with step sign (%g, %g, step %g)', a, b, step))
    end
    local n = math.floor((b - a) / step + 1e-9) + 1
    local o = { dtype = 'float32' }
    if opts then for k, v in pairs(opts) do o[k] = v end end
    local r = T.arange(0, n, 1, o)
    if step ~= 1 then r = r:mul(step) end
    if a ~= 0 then r = r:add(a) end
    return r
  end
  T.manualSeed = T.manual_seed
  T.isTensor = T.is_tensor
  -- Torch7's (and PyTorch's) module functions with the same meaning
  T.getnumthreads, T.setnumthreads = T.get_num_threads, T.set_num_threads
  T.getRNGState, T.setRNGState = T.get_rng_state, T.set_rng_state
  --- dpl.mv(A, v): the matrix-vector product (torch.mv; a 2-d A and a 1-d v)
  function T.mv(A, v)
    if not is_tensor(A) or not is_tensor(v) then
      raise(fmt('mv: expected a matrix and a vector, got %s and %s', is_tensor(A) and 'a tensor' or type(A),
        is_tensor(v) and 'a tensor' or type(v)))
    end
    if A:dim() ~= 2 or v:dim() ~= 1 then
      raise(fmt('mv: expected a 2-d matrix and a 1-d vector, got %d-d and %d-d', A:dim(), v:dim()))
    end
    return T.matmul(A, v)
  end
  --- dpl.ger(u, v): the outer product (torch.ger, PyTorch's deprecated name of torch.outer)
  function T.ger(u, v) return T.outer(u, v) end

  -- Torch7's LAPACK names over dpl.linalg (their forms without result tensors): potrf(A
  -- [, 'U'|'L']) (upper by default: A = U^T U), potrs(B, chol [, uplo]), potri(chol [, uplo]),
  -- gesv(B, A) -> X, LU, trtrs(b, a [, 'U'|'L' [, 'N'|'T' [, 'N'|'U']]]), gels(B, A) (least
  -- squares), getri(A), symeig(A [, 'N'|'V' [, 'U'|'L']]) -> e [, V]
  local function LA() return require('dpl.linalg') end
  local function flag(name, what, v, default, allowed)
    if v == nil then return default end
    if not allowed[v] then
      raise(fmt("%s: %s must be one of %s, got %s", name, what, table.concat((function()
        local r = {}
        for k in pairs(allowed) do r[#r + 1] = "'" .. k .. "'" end
        table.sort(r)
        return r
      end)(), ', '), tostring(v)))
    end
    return v
  end
  local UL, NT, NU, NV = { U = true, L = true }, { N = true, T = true }, { N = true, U = true }, { N = true, V = true }
  local t7la = {
    potrf = function(A, uplo)
      uplo = flag('potrf', 'uplo', uplo, 'U', UL)
      return LA().cholesky(A, { upper = uplo == 'U' })
    end,
    potrs = function(B, chol, uplo)
      uplo = flag('potrs', 'uplo', uplo, 'U', UL)
      return T.cholesky_solve(B, chol, uplo == 'U')
    end,
    potri = function(chol, uplo)
      uplo = flag('potri', 'uplo', uplo, 'U', UL)
      return T.cholesky_inverse(chol, uplo == 'U')
    end,
    gesv = function(B, A)
      local X = LA().solve(A, B)
      return X, (LA().lu_factor(A))
    end,
    trtrs = function(b, a, uplo, trans, diag)
      uplo = flag('trtrs', 'uplo', uplo, 'U', UL)
      trans = flag('trtrs', 'trans', trans, 'N', NT)
      diag = flag('trtrs', 'diag', diag, 'N', NU)
      local M2, up = a, uplo == 'U'
      if trans == 'T' then M2, up = a:t(), not up end
      return LA().solve_triangular(M2, b, { upper = up, unitriangular = diag == 'U' })
    end,
    gels = function(B, A) return (LA().lstsq(A, B)) end,
    getri = function(A) return LA().inv(A) end,
    -- symeig: Torch7's (A, 'N'|'V', 'U'|'L') or PyTorch 1.13's deprecated (A, eigenvectors=false,
    -- upper=true) -> eigenvalues, eigenvectors (an empty tensor without them, as PyTorch)
    symeig = function(A, jobz, uplo)
      if type(jobz) ~= 'string' and type(uplo) ~= 'string' then
        if jobz ~= nil and type(jobz) ~= 'boolean' then raise(fmt('symeig: eigenvectors must be true or false, got %s', type(jobz))) end
        if uplo ~= nil and type(uplo) ~= 'boolean' then raise(fmt('symeig: upper must be true or false, got %s', type(uplo))) end
        local U = uplo ~= false and 'U' or 'L'
        if jobz then return LA().eigh(A, { UPLO = U }) end
        return LA().eigvalsh(A, { UPLO = U }), T.empty(0, { dtype = T.dtype_names[A._dtype] })
      end
      jobz = flag('symeig', 'jobz', jobz, 'N', NV)
      uplo = flag('symeig', 'uplo', uplo, 'U', UL)
      if jobz == 'N' then return LA().eigvalsh(A, { UPLO = uplo }) end
      return LA().eigh(A, { UPLO = uplo })
    end,
  }
  for name, f in pairs(t7la) do
    if rawget(T, name) == nil then T[name] = f end
    if methods[name] == nil then methods[name] = f end
  end
end

return M
