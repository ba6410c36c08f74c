-- scripts/fuzz_api.lua: an API-wide fuzzer. Calls every public callable of dpl with random
-- argument lists and sorts the outcomes into success, clean error, internal error (a raw Lua or
-- FFI error from inside lua/dpl: a missing argument check), crash, hang and bad result.
--
--   dplhost scripts/fuzz_api.lua --seed S --n N [--only PATTERN] [--bin ./dplhost] [--timeout SEC]
--                                [--start I] [--verbose] [--report FILE] [--mem MB]
--
-- The parent (this invocation) runs the calls in a child process (`timeout` + the child's own
-- alarm(2) per call, so a C-side hang is caught) and restarts it after the call that crashed or
-- hung. Call i draws its callable and its arguments from (seed, i) only: `--start i --n i`
-- repeats one call. The child writes "B <i> <call>" before each call (flushed) and "E <i> <class>
-- <message>" after it, so the last call before a crash is known. PATTERN is a Lua pattern matched
-- against the callable's name ("method:add", "dpl.zeros", "F.conv2d", "nn.Linear", "linalg.inv",
-- "special.zeta", "distributions.Normal", "optim.SGD", "lr_scheduler.StepLR", "metrics.Accuracy",
-- "data.DataLoader", ...).
--
-- Denylist (not called; see DENY below): dpl.dist and launching (they block on peers or start
-- processes), dpl.save/dpl.load (files), dpl.help (prints), the REPL, the Trainer/Fabric/CLI/
-- loggers (files, processes), dpl.atexit, and the few knobs whose effect outlives the call and
-- would make later calls unreproducible (manual_seed-like state is reset after every call).
--
-- As a library: `loadfile('scripts/fuzz_api.lua')('fuzz_api_lib')` returns { callables =,
-- run_one =, classify_error = } (spec/api_fuzz_spec.lua runs the script itself, as a subprocess).
local ffi = require 'ffi'

local FUZZ = {}

----------------------------------------------------------------------------------------------
-- arguments
local function parse_args(argv)
  local o = { seed = 1, n = 1000, start = 1, only = nil, bin = nil, timeout = 10, mem = 6144 }
  local i = 1
  while argv and argv[i] do
    local a = argv[i]
    local k = a:match('^%-%-(.+)$')
    if not k then error('fuzz_api: unexpected argument ' .. a) end
    if k == 'child' or k == 'verbose' then o[k] = true; i = i + 1
    else
      local v = argv[i + 1]
      if v == nil then error('fuzz_api: --' .. k .. ' needs a value') end
      o[k] = tonumber(v) or v
      i = i + 2
    end
  end
  o.only = o.only and tostring(o.only)
  return o
end

----------------------------------------------------------------------------------------------
-- a small deterministic generator (independent of math.random, which dpl code may draw from)
local Rng = {}
Rng.__index = Rng
local function new_rng(seed, i)
  local s = ffi.new('uint64_t[1]')
  s[0] = 0x9E3779B97F4A7C15ULL * (ffi.cast('uint64_t', seed) + 1) + ffi.cast('uint64_t', i) * 0xBF58476D1CE4E5B9ULL
  return setmetatable({ s = s }, Rng)
end
function Rng:u32()
  local s = self.s
  s[0] = s[0] + 0x9E3779B97F4A7C15ULL
  local z = s[0]
  z = bit.bxor(z, bit.rshift(z, 30)) * 0xBF58476D1CE4E5B9ULL
  z = bit.bxor(z, bit.rshift(z, 27)) * 0x94D049BB133111EBULL
  z = bit.bxor(z, bit.rshift(z, 31))
  return tonumber(bit.rshift(z, 32))
end
function Rng:float() return self:u32() / 4294967296 end
function Rng:int(a, b) return a + self:u32() % (b - a + 1) end
function Rng:pick(t) return t[self:int(1, #t)] end
function Rng:chance(p) return self:float() < p end

----------------------------------------------------------------------------------------------
-- the callables
local DENY = {
  -- (names as in the callable list)
  ['dpl.save'] = 'writes files', ['dpl.load'] = 'reads files', ['dpl.help'] = 'prints',
  ['dpl.atexit'] = 'registers an exit hook', ['dpl.check'] = 'internal status helper',
  ['dpl.set_num_threads'] = 'outlives the call (thread pool)', ['dpl.setnumthreads'] = 'outlives the call',
  ['dpl.set_gc_threshold'] = 'outlives the call', ['dpl.set_gc_handles'] = 'outlives the call',
  ['dpl.set_grad_enabled'] = 'outlives the call', ['dpl.set_default_dtype'] = 'outlives the call',
  ['dpl.set_default_tensor_type'] = 'outlives the call', ['dpl.set_rng_state'] = 'outlives the call',
  ['dpl.seed_everything'] = 'sets environment variables',
  ['dpl.collect'] = 'runs the GC', ['dpl.set_printoptions'] = 'outlives the call',
  ['dpl.use_deterministic_algorithms'] = 'outlives the call',
  ['data.get_worker_info'] = 'no arguments',
}

local function sorted_keys(t)
  local r = {}
  for k in pairs(t) do if type(k) == 'string' then r[#r + 1] = k end end
  table.sort(r)
  return r
end

local function is_class(v)
  if type(v) ~= 'table' then return false end
  local mt = getmetatable(v)
  return mt ~= nil and type(mt) == 'table' and mt.__call ~= nil
end

--- The list of callables: { name =, kind = 'func' | 'method' | 'nn' | 'dist' | 'optim' | 'sched'
--- | 'metric' | 'data', fn = }, sorted by name (so that (seed, i) means the same call every run).
function FUZZ.callables()
  local dpl = require 'dpl'
  local T = require 'dpl.tensor'
  T._load_extra()
  local list = {}
  local function add(name, kind, fn)
    if not DENY[name] then list[#list + 1] = { name = name, kind = kind, fn = fn } end
  end
  local function pub(k) return not k:match('^_') end
  for _, k in ipairs(sorted_keys(T.methods)) do
    if pub(k) and type(T.methods[k]) == 'function' then add('method:' .. k, 'method', k) end
  end
  local seen = {}
  for _, k in ipairs(sorted_keys(T)) do
    if pub(k) and type(T[k]) == 'function' then add('dpl.' .. k, 'func', T[k]); seen[k] = true end
  end
  for _, k in ipairs(sorted_keys(dpl)) do
    if pub(k) and not seen[k] and type(rawget(dpl, k)) == 'function' then add('dpl.' .. k, 'func', dpl[k]) end
  end
  local function funcs(prefix, mod)
    for _, k in ipairs(sorted_keys(mod)) do
      if pub(k) and type(mod[k]) == 'function' then add(prefix .. k, 'func', mod[k]) end
    end
  end
  funcs('F.', dpl.nn.functional)
  funcs('nn.init.', dpl.nn.init)
  funcs('linalg.', dpl.linalg)
  funcs('special.', dpl.special)
  local function classes(prefix, mod, kind, pred)
    for _, k in ipairs(sorted_keys(mod)) do
      local v = mod[k]
      if pub(k) and is_class(v) and (not pred or pred(k, v)) then add(prefix .. k, kind, v) end
    end
  end
  classes('nn.', dpl.nn, 'nn', function(_, v) return type(v.forward) == 'function' end)
  classes('distributions.', dpl.distributions, 'dist')
  funcs('distributions.', dpl.distributions)
  classes('optim.', dpl.optim, 'optim', function(_, v) return type(v.step) == 'function' end)
  classes('lr_scheduler.', dpl.optim.lr_scheduler, 'sched')
  local _ = dpl.metrics.Accuracy -- (the task metrics load on first use)
  classes('metrics.', dpl.metrics, 'metric', function(_, v) return type(v.update) == 'function' end)
  funcs('metrics.functional.', dpl.metrics.functional)
  classes('data.', dpl.data, 'data')
  funcs('data.', dpl.data)
  table.sort(list, function(a, b) return a.name < b.name end)
  return list
end

----------------------------------------------------------------------------------------------
-- the argument pool
local DTYPES = { 'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'bool' }
local HUGE = { 2 ^ 40, -1, -5, 0 / 0, math.huge, 1e308, 2 ^ 62, -2 ^ 63 }
local NUMBERS = { 0, -1, 1.5, 0 / 0, math.huge, -math.huge, 2 ^ 53, -2 ^ 63, 1e-300, -0.0, 0.5, 7 }
local STRINGS = { 'float32', 'int64', 'bool', 'mean', 'sum', 'none', 'cpu', 'cuda', 'cuda:7', 'fro', 'nuc', '',
  'reflect', 'zeros', 'linear', 'bilinear', 'nearest', 'max', 'L', 'U', 'reduced', 'garbage', '%s%d', ('x'):rep(300) }
local OPT_KEYS = { 'dim', 'keepdim', 'dtype', 'reduction', 'weight', 'bias', 'stride', 'padding', 'dilation',
  'groups', 'size', 'p', 'eps', 'lr', 'momentum', 'num_classes', 'task', 'threshold', 'batch_size', 'shuffle',
  'out', 'device', 'requires_grad', 'ignore_index', 'mode', 'scale_factor', 'kernel_size', 'num_layers',
  'hidden_size', 'beta', 'min', 'max', 'value', 'correction', 'unbiased', 'generator', 'seed', 'sampler',
  'drop_last', 'collate_fn', 'average', 'top_k', 'num_labels', 'weight_decay', 'betas', 'loc', 'scale', 'probs',
  'logits', 'validate_args', 'descending', 'sorted', 'return_inverse', 'label_smoothing', 'alpha', 'n', 'k' }

local Gen = {}
Gen.__index = Gen

local function shape_str(t)
  local s = {}
  for i = 0, t._ndim - 1 do s[#s + 1] = tostring(tonumber(t._shape[i])) end
  return '[' .. table.concat(s, ',') .. ']'
end

-- a random tensor: dtype, shape (0-d, empty, small), values (NaN/inf sometimes), view kind
function Gen:tensor(opts)
  local dpl, r = self.dpl, self.r
  opts = opts or {}
  local dtype = opts.dtype or (r:chance(0.55) and r:pick({ 'float32', 'float64' }) or r:pick(DTYPES))
  local shape
  if opts.shape then shape = opts.shape
  elseif r:chance(0.6) and #self.base > 0 then
    -- the call's base shape (or a prefix/suffix), so that arguments often fit together
    shape = {}
    local b = self.base
    local from = r:chance(0.7) and 1 or r:int(1, #b)
    for i = from, #b do shape[#shape + 1] = b[i] end
  else
    shape = {}
    local nd = r:pick({ 0, 1, 1, 2, 2, 2, 3, 3, 4, 5 })
    for i = 1, nd do shape[i] = r:pick({ 0, 1, 1, 2, 3, 3, 4, 5 }) end
  end
  local base_shape, view = {}, 'plain'
  for i, v in ipairs(shape) do base_shape[i] = v end
  local vk = r:int(1, 10)
  if vk == 1 and #shape >= 2 then view = 'transposed'; base_shape[1], base_shape[#shape] = shape[#shape], shape[1]
  elseif vk == 2 and #shape >= 1 then view = 'narrowed'; base_shape[1] = shape[1] + 2
  elseif vk == 3 and #shape >= 1 then view = 'expanded'; base_shape[1] = 1
  elseif vk == 4 and #shape >= 1 then view = 'stepped'; base_shape[#shape] = shape[#shape] * 2
  end
  local x = dpl.randn(base_shape, { dtype = 'float64' })
  local mode = r:int(1, 8)
  if mode == 1 then x = x:mul(100):round()
  elseif mode == 2 and x:numel() > 0 then x:view(-1):narrow(1, 1, 1):fill_(0 / 0)
  elseif mode == 3 and x:numel() > 0 then x:view(-1):narrow(1, 1, 1):fill_(math.huge)
  elseif mode == 4 then x = x:abs():mul(3):floor() -- small non-negative integers (labels, indices)
  elseif mode == 5 then x = x:gt(0):to('float64')
  end
  x = x:to(dtype)
  if view == 'transposed' then x = x:transpose(1, #shape)
  elseif view == 'narrowed' then x = x:narrow(1, 2, shape[1])
  elseif view == 'expanded' then x = x:expand(shape)
  elseif view == 'stepped' then
    local idx = {}
    for i = 1, #shape do idx[i] = ':' end
    x = x:narrow(#shape, 1, math.max(shape[#shape] * 2 - 1, 0))
    local ok, y = pcall(function()
      local s = {}
      for i = 0, x._ndim - 1 do s[i + 1] = tonumber(x._stride[i]) end
      s[#s] = s[#s] * 2
      return x:as_strided(shape, s, tonumber(x._offset))
    end)
    x = ok and y or x:narrow(#shape, 1, shape[#shape])
  end
  if (dtype == 'float32' or dtype == 'float64') and r:chance(0.15) then
    x = x:detach():requires_grad_(true)
    view = view .. ',grad'
  end
  return x, ('T<%s %s %s>'):format(dtype, shape_str(x), view)
end

local function fmt_num(v)
  if v ~= v then return 'NaN' end
  if v == math.huge then return 'inf' end
  if v == -math.huge then return '-inf' end
  if v == math.floor(v) and math.abs(v) < 1e15 then return ('%d'):format(v) end
  return ('%.17g'):format(v)
end

-- one random value and its description; depth bounds nested tables
function Gen:value(depth)
  local r = self.r
  depth = depth or 0
  local k = r:int(1, 100)
  if k <= 38 then return self:tensor()
  elseif k <= 56 then local v = r:pick({ 1, 2, 3, -1, 0, 1, 2, 4, -2, 5 }); return v, fmt_num(v)
  elseif k <= 64 then local v = r:pick(NUMBERS); return v, fmt_num(v)
  elseif k <= 67 then local v = r:pick(HUGE); return v, fmt_num(v)
  elseif k <= 74 then -- a shape/list of numbers
    local n, t, d = r:int(0, 4), {}, {}
    for i = 1, n do
      local v = r:chance(0.85) and r:pick({ 1, 2, 3, 4, 0, -1 }) or r:pick(HUGE)
      t[i], d[i] = v, fmt_num(v)
    end
    return t, '{' .. table.concat(d, ',') .. '}'
  elseif k <= 81 and depth < 2 then -- an options table
    local t, d = {}, {}
    for _ = 1, r:int(1, 3) do
      local key = r:pick(OPT_KEYS)
      local v, vd = self:value(depth + 1)
      if v ~= nil then t[key] = v; d[#d + 1] = key .. '=' .. vd end
    end
    return t, '{' .. table.concat(d, ',') .. '}'
  elseif k <= 86 then local v = r:pick(STRINGS); return v, ('%q'):format(#v > 20 and v:sub(1, 20) .. '...' or v)
  elseif k <= 89 then local v = r:chance(0.5); return v, tostring(v)
  elseif k <= 92 then return nil, 'nil'
  elseif k <= 94 and depth < 2 then -- a list of tensors / nested table
    local t, d = {}, {}
    for i = 1, r:int(0, 3) do t[i], d[i] = self:value(depth + 1) end
    return t, '{' .. table.concat(d, ',') .. '}'
  elseif k <= 96 then return {}, '{}'
  elseif k <= 98 then return function(...) return ... end, 'function'
  else return ffi.new('int[1]'), 'cdata<int[1]>'
  end
end

-- a plausible value: a tensor of the call's base shape (float mostly), a dim-like or size-like
-- integer, a plausible option table; arguments that get past the first checks
function Gen:plausible()
  local r = self.r
  local k = r:int(1, 100)
  if k <= 50 then
    return self:tensor({ dtype = r:chance(0.8) and 'float32' or nil, shape = r:chance(0.7) and self.base or nil })
  elseif k <= 75 then
    local v = r:pick({ 1, 2, -1, 1, 2, 3, 0, 4 }); return v, fmt_num(v)
  elseif k <= 85 then
    local keys = { 'dim', 'keepdim', 'dtype', 'reduction', 'p', 'eps', 'stride', 'padding', 'lr', 'num_classes',
      'kernel_size', 'batch_size' }
    local vals = { dim = { 1, -1, 2 }, keepdim = { true, false }, dtype = { 'float64', 'int64', 'float16' },
      reduction = { 'mean', 'sum', 'none' }, p = { 2, 1, 0.5 }, eps = { 1e-5 }, stride = { 1, 2 },
      padding = { 0, 1 }, lr = { 0.1 }, num_classes = { 3 }, kernel_size = { 1, 2 }, batch_size = { 2 } }
    local t, d = {}, {}
    for _ = 1, r:int(1, 2) do
      local key = r:pick(keys)
      local v = r:pick(vals[key])
      t[key] = v; d[#d + 1] = key .. '=' .. tostring(v)
    end
    return t, '{' .. table.concat(d, ',') .. '}'
  elseif k <= 92 then
    local t, d = {}, {}
    for i = 1, r:int(1, 3) do t[i] = r:pick({ 1, 2, 3, 4 }); d[i] = tostring(t[i]) end
    return t, '{' .. table.concat(d, ',') .. '}'
  else
    local v = r:pick({ 0.5, 1.5, 2, -0.5 }); return v, fmt_num(v)
  end
end

-- a hostile value: sizes and numbers at the edges, odd tensors, wrong types
function Gen:poison()
  local r = self.r
  local k = r:int(1, 10)
  if k <= 3 then local v = r:pick(HUGE); return v, fmt_num(v)
  elseif k <= 5 then local v = r:pick(NUMBERS); return v, fmt_num(v)
  elseif k <= 7 then return self:tensor()
  elseif k == 8 then
    local n, t, d = r:int(1, 4), {}, {}
    for i = 1, n do t[i] = r:chance(0.5) and r:pick(HUGE) or r:pick({ 1, 2, 0 }); d[i] = fmt_num(t[i]) end
    return t, '{' .. table.concat(d, ',') .. '}'
  else return self:value()
  end
end

-- n random values (nil holes kept: returns the count); plausible lists with one hostile value
-- most of the time, fully random lists otherwise
function Gen:values(lo, hi)
  local r = self.r
  local n = r:int(lo, hi)
  local v, d = {}, {}
  if r:chance(0.6) then
    for i = 1, n do v[i], d[i] = self:plausible() end
    if n > 0 and r:chance(0.7) then
      local j = r:int(1, n)
      v[j], d[j] = self:poison()
      d[j] = '!' .. d[j]
    end
  else
    for i = 1, n do v[i], d[i] = self:value() end
  end
  return v, n, table.concat(d, ', ')
end

local function new_gen(dpl, seed, i)
  local r = new_rng(seed, i)
  local base = {}
  for j = 1, r:pick({ 0, 1, 2, 2, 3, 3, 4 }) do base[j] = r:pick({ 1, 2, 3, 4, 0, 5 }) end
  return setmetatable({ dpl = dpl, r = r, base = base }, Gen)
end

----------------------------------------------------------------------------------------------
-- outcomes
local INTERNAL = {
  'attempt to index', 'attempt to perform arithmetic', 'attempt to call', 'attempt to compare',
  'attempt to concatenate', 'attempt to get length', 'bad argument #', 'cannot convert', 'table index is nil',
  'table index is NaN', 'number has no integer representation', "'for' initial value must be",
  "'for' limit must be", "'for' step must be", 'invalid value (at index', 'stack overflow', 'invalid option',
  'string length overflow', 'attempt to yield', 'error object is a', 'wrong number of arguments',
  'size of C type is unknown', 'invalid C type', 'bad light userdata', 'loop or previous error',
}

--- Sorts an error into 'clean', 'internal', 'oom' or 'budget'; returns the class and a message.
function FUZZ.classify_error(e)
  local errors = require 'dpl.errors'
  if type(e) == 'table' and errors.is(e, errors.DplError) then
    local m = tostring(e.message)
    -- a dpl error object carrying a raw Lua error as its message (a wrapper re-raised it)
    for _, p in ipairs(INTERNAL) do
      if m:find(p, 1, true) then return 'internal', tostring(e) end
    end
    return 'clean', tostring(e)
  end
  if type(e) ~= 'string' then
    local ok, s = pcall(tostring, e)
    if type(e) == 'table' and getmetatable(e) and getmetatable(e).__tostring then return 'clean', s end
    return 'internal', 'error object of type ' .. type(e) .. ': ' .. tostring(ok and s or '?')
  end
  if e:find('FUZZ_BUDGET', 1, true) then return 'budget', e end
  if e:find('not enough memory', 1, true) then return 'oom', e end
  for _, p in ipairs(INTERNAL) do
    if e:find(p, 1, true) then return 'internal', e end
  end
  return 'clean', e
end

-- checks a returned tensor: sane shape, numel, strides inside the storage, data readable
local function check_tensor(dpl, t)
  local C = dpl.C
  local nd = t._ndim
  if nd < 0 or nd > 8 then return 'ndim ' .. nd end
  local n = 1
  for i = 0, nd - 1 do
    if t._shape[i] < 0 then return 'negative size ' .. tostring(t._shape[i]) end
    n = n * tonumber(t._shape[i])
  end
  if n ~= tonumber(t._numel) then return ('numel %s but shape %s'):format(tostring(t._numel), shape_str(t)) end
  if n > 0 and t._devtype == 0 then
    local lo, hi = tonumber(t._offset), tonumber(t._offset)
    for i = 0, nd - 1 do
      local s = tonumber(t._stride[i]) * (tonumber(t._shape[i]) - 1)
      if s < 0 then lo = lo + s else hi = hi + s end
    end
    local es = tonumber(C.dpl_dtype_size(t._dtype))
    local nbytes = tonumber(C.dpl_storage_nbytes(t))
    if lo < 0 or (hi + 1) * es > nbytes then
      return ('view outside its storage: offset %d, shape %s, elements %d..%d of %d bytes'):format(
        tonumber(t._offset), shape_str(t), lo, hi, nbytes)
    end
    if n <= 1e6 then
      local ok, e = pcall(function() return t:detach():clone():sum() end)
      if not ok then return 'data not readable: ' .. tostring(e) end
    end
  end
  return nil
end

local function check_results(dpl, T, res, n)
  for i = 1, math.min(n, 4) do
    local v = res[i]
    if T.is_tensor(v) then
      local bad = check_tensor(dpl, v)
      if bad then return bad end
    elseif type(v) == 'table' and getmetatable(v) == nil then
      for j = 1, math.min(#v, 4) do
        if T.is_tensor(v[j]) then
          local bad = check_tensor(dpl, v[j])
          if bad then return bad end
        end
      end
    end
  end
  return nil
end

----------------------------------------------------------------------------------------------
-- one call
local BUDGET = 3e6 -- VM instructions (counted in steps of 1000) per call

local function with_budget(f, ...)
  local n = 0
  debug.sethook(function()
    n = n + 1
    if n > BUDGET / 1000 then n = 0; error('FUZZ_BUDGET: the call ran past ' .. BUDGET .. ' instructions') end
  end, '', 1000)
  local res = { pcall(f, ...) }
  debug.sethook()
  return res
end

local function pack(...) return { n = select('#', ...), ... } end

-- the random call for callable c, as a thunk and its description
local function make_call(g, c)
  local dpl, r = g.dpl, g.r
  if c.kind == 'method' then
    local self_t, sd = g:tensor()
    local a, n, ad = g:values(0, 4)
    return function()
      local m = self_t[c.fn]
      return m(self_t, unpack(a, 1, n))
    end, ('%s:%s(%s)'):format(sd, c.fn, ad)
  elseif c.kind == 'func' then
    local a, n, ad = g:values(0, 4)
    return function() return c.fn(unpack(a, 1, n)) end, ('%s(%s)'):format(c.name, ad)
  elseif c.kind == 'nn' then
    -- mostly small positive integers (feature counts, kernel sizes), else any value
    local n = r:int(0, 4)
    local a, d = {}, {}
    for i = 1, n do
      if r:chance(0.5) then a[i] = r:pick({ 1, 2, 3, 4 }); d[i] = tostring(a[i]) else a[i], d[i] = g:value() end
    end
    local ad = table.concat(d, ', ')
    local f, fn, fd = g:values(1, 3)
    return function()
      local m = c.fn(unpack(a, 1, n))
      if r:chance(0.2) then m:eval() end
      return m(unpack(f, 1, fn))
    end, ('%s(%s):forward(%s)'):format(c.name, ad, fd)
  elseif c.kind == 'dist' then
    local a, n, ad = g:values(0, 3)
    local s, sn, sd = g:values(0, 1)
    local x, xd = g:value()
    local extra = r:pick({ 'entropy', 'mean', 'variance', 'cdf', 'icdf', 'rsample', 'stddev', 'mode',
      'expand', 'enumerate_support', 'perplexity' })
    local e, en, ed = g:values(0, 1)
    return function()
      local d = c.fn(unpack(a, 1, n))
      local out = pack(d:sample(unpack(s, 1, sn)))
      d:log_prob(x)
      local m = d[extra]
      if type(m) == 'function' then return m(d, unpack(e, 1, en)) end
      return unpack(out, 1, out.n)
    end, ('%s(%s):sample(%s):log_prob(%s):%s(%s)'):format(c.name, ad, sd, xd, extra, ed)
  elseif c.kind == 'optim' or c.kind == 'sched' then
    local np = r:int(0, 3)
    local ps, pd, grads = {}, {}, {}
    for i = 1, np do
      local dt = r:chance(0.85) and 'float32' or r:pick(DTYPES)
      local p, d = g:tensor({ dtype = dt })
      if p:is_floating_point() then p = p:detach():clone():requires_grad_(true) end
      ps[i], pd[i] = p, d
      if r:chance(0.8) then
        local gr, grd
        if r:chance(0.8) then gr, grd = g:tensor({ dtype = dt, shape = p:size() }) else gr, grd = g:tensor() end
        grads[i] = gr:detach()
        pd[i] = pd[i] .. '.grad=' .. grd
      end
    end
    local a, n, ad = g:values(0, 2)
    local params = ps
    if r:chance(0.1) then params = { { params = ps, lr = r:pick(NUMBERS) } } end
    if r:chance(0.1) then params, pd = g:value() , { 'random:' .. select(2, g:value()) } end
    local sa, sn, sd = g:values(0, 3)
    local opt_cls = dpl.optim[r:pick({ 'SGD', 'Adam' })]
    local desc = ('%s({%s}, %s):step()'):format(c.name, table.concat(pd, ', '), ad)
    if c.kind == 'sched' then desc = ('%s(SGD{%s}, %s):step()'):format(c.name, table.concat(pd, ', '), sd) end
    return function()
      for i = 1, np do if grads[i] then ps[i].grad = grads[i] end end
      if c.kind == 'optim' then
        local o = c.fn(params, unpack(a, 1, n))
        o:zero_grad(r:chance(0.5))
        return o:step(r:chance(0.2) and function() return dpl.tensor(1.0) end or nil)
      else
        local o = opt_cls(ps, { lr = 0.1 })
        local s = c.fn(o, unpack(sa, 1, sn))
        s:step(); s:step()
        return s:get_last_lr()
      end
    end, desc
  elseif c.kind == 'metric' then
    local a, n, ad = g:values(0, 1)
    if r:chance(0.6) then
      a = { { task = r:pick({ 'binary', 'multiclass', 'multilabel', 'bogus' }), num_classes = r:pick({ 2, 3, 0, -1, 2 ^ 40 }),
        num_labels = r:pick({ 2, 3, 0 }), threshold = r:pick({ 0.5, 0 / 0, 2 }), average = r:pick({ 'micro', 'macro', 'none', 'weighted', 'x' }) } }
      n, ad = 1, '{task,num_classes,num_labels,threshold,average random}'
    end
    local u, un, ud = g:values(1, 3)
    local u2, un2, ud2 = g:values(1, 2)
    return function()
      local m = c.fn(unpack(a, 1, n))
      m:update(unpack(u, 1, un))
      if r:chance(0.3) then m:update(unpack(u2, 1, un2)) end
      return m:compute()
    end, ('%s(%s):update(%s):update?(%s):compute()'):format(c.name, ad, ud, ud2)
  elseif c.kind == 'data' then
    local a, n, ad = g:values(0, 3)
    if r:chance(0.4) and n >= 1 then
      local ds = dpl.data.TensorDataset(dpl.randn(4, 2), dpl.arange(4))
      a[1] = ds; ad = 'TensorDataset(4)' .. ad:gsub('^[^,]*', '', 1)
    end
    return function()
      local o = c.fn(unpack(a, 1, n))
      local mt = getmetatable(o)
      if type(o) == 'table' and mt then
        if mt.__len then local _ = #o end
        if type(o.iter) == 'function' then
          local k = 0
          for b in o:iter() do k = k + 1; if k > 3 then break end end
        elseif type(o.get) == 'function' then o:get(1)
        end
      end
      return o
    end, ('%s(%s):iter()'):format(c.name, ad)
  end
  error('fuzz_api: unknown kind ' .. tostring(c.kind))
end

--- Runs call i of the run with this seed on callable list `list` (or the one chosen by
--- (seed, i)); returns class, message, description, callable name.
function FUZZ.run_one(list, seed, i, on_begin)
  local dpl = require 'dpl'
  local T = require 'dpl.tensor'
  local g = new_gen(dpl, seed, i)
  local c = list[g.r:int(1, #list)]
  dpl.manual_seed(i)
  local ok_mk, thunk, desc = pcall(make_call, g, c)
  if not ok_mk then return 'harness', 'building the call: ' .. tostring(thunk), c.name, c.name end
  if on_begin then on_begin(desc) end
  local res = with_budget(function() return pack(thunk()) end)
  -- state a call may leave behind
  pcall(T.set_grad_enabled, true)
  pcall(T.set_default_dtype, 'float32')
  if not res[1] then
    local cls, msg = FUZZ.classify_error(res[2])
    return cls, msg, desc, c.name
  end
  local ok, bad = pcall(check_results, dpl, T, res[2], res[2].n)
  if not ok then return 'harness', 'checking the result: ' .. tostring(bad), desc, c.name end
  if bad then return 'badresult', bad, desc, c.name end
  return 'ok', '', desc, c.name
end

----------------------------------------------------------------------------------------------
-- the child: runs calls start..n, writes B/E lines to the log
local function child(o)
  jit.off() -- (the count hook that bounds a call sees interpreted code only)
  ffi.cdef [[ unsigned int alarm(unsigned int seconds); ]]
  local list = FUZZ.callables()
  if o.only then
    local l = {}
    for _, c in ipairs(list) do if c.name:find(o.only) then l[#l + 1] = c end end
    list = l
    if #list == 0 then error('fuzz_api: --only ' .. o.only .. ' matches nothing') end
  end
  local log = assert(io.open(o.log, 'a'))
  local function clean(s) return (tostring(s):gsub('[\r\n\t]', ' '):sub(1, 400)) end
  for i = o.start, o.n do
    local cls, msg, desc, name = FUZZ.run_one(list, o.seed, i, function(desc)
      log:write('B\t', i, '\t', clean(desc), '\n')
      log:flush()
      ffi.C.alarm(o.timeout)
    end)
    ffi.C.alarm(0)
    log:write('E\t', i, '\t', cls, '\t', name, '\t', clean(msg), '\t', clean(desc), '\n')
    log:flush()
    if i % 200 == 0 then collectgarbage() end
  end
  log:close()
  os.exit(0, true) -- (the state closed: under a SAN build, LeakSanitizer sees no live tensors)
end

----------------------------------------------------------------------------------------------
-- the parent: runs children until n calls are done, collects the outcomes
local function sh_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- the interpreter this script runs in: arg's lowest index (argv[0])
local function self_exe()
  if not arg then return nil end
  local lo = 0
  while arg[lo - 1] ~= nil do lo = lo - 1 end
  return lo < 0 and arg[lo] or nil
end

local function parent(o)
  local bin = o.bin or os.getenv('DPLHOST') or self_exe() or './dplhost'
  local script = arg and arg[0] or 'scripts/fuzz_api.lua'
  local tmp = os.tmpname()
  os.remove(tmp)
  local logf = tmp .. '.fuzzlog'
  local errf = tmp .. '.stderr'
  local counts, by_name, groups, crashes = {}, {}, {}, {}
  local start, t0 = o.start, os.time()
  local runs = 0
  while start <= o.n do
    runs = runs + 1
    local f = io.open(logf, 'w'); f:close()
    local cmd = ('ulimit -v %d 2>/dev/null; cd %s && timeout -s KILL %d %s %s --child --seed %d --n %d --start %d --timeout %d --log %s %s >/dev/null 2>%s; echo "RC=$?"')
      :format(o.mem * 1024, sh_quote(os.getenv('PWD') or '.'), math.max(60, (o.n - start + 1) * o.timeout), sh_quote(bin),
        sh_quote(script), o.seed, o.n, start, o.timeout, sh_quote(logf), o.only and ('--only ' .. sh_quote(o.only)) or '',
        sh_quote(errf))
    if os.getenv('SAN_NO_ULIMIT') then cmd = cmd:gsub('^ulimit %-v %d+ 2>/dev/null; ', '') end
    local p = io.popen(cmd)
    local out = p:read('*a')
    p:close()
    local rc = tonumber(out:match('RC=(%d+)')) or -1
    local last_b, last_bdesc, last_e = nil, nil, start - 1
    for line in io.lines(logf) do
      local kind, idx, rest = line:match('^(%u)\t(%d+)\t(.*)$')
      idx = tonumber(idx)
      if kind == 'B' then last_b, last_bdesc = idx, rest
      elseif kind == 'E' then
        last_e = idx
        local cls, name, msg, desc = rest:match('^([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$')
        counts[cls] = (counts[cls] or 0) + 1
        by_name[name] = by_name[name] or {}
        by_name[name][cls] = (by_name[name][cls] or 0) + 1
        if cls ~= 'ok' and cls ~= 'clean' then
          -- group by the callable and the message's first line with numbers blanked
          local key = cls .. ' | ' .. name .. ' | ' .. msg:gsub('%d+', 'N'):sub(1, 160)
          local gr = groups[key]
          if not gr then gr = { n = 0, example = ('seed %d call %d: %s'):format(o.seed, idx, desc), msg = msg }; groups[key] = gr end
          gr.n = gr.n + 1
        end
      end
    end
    if rc == 0 then break end
    -- a crash or a hang: the call after the last finished one
    local ef = io.open(errf, 'r')
    local err = ef and ef:read('*a') or ''
    if ef then ef:close() end
    local culprit = (last_b and last_b > last_e) and last_b or (last_e + 1)
    local what = (rc == 142 or rc == 137 or rc == 124) and 'hang' or 'crash'
    local desc = (last_b == culprit) and last_bdesc or '(before the first call: startup)'
    local tail = err:sub(-1500)
    crashes[#crashes + 1] = { idx = culprit, what = what, rc = rc, desc = desc, err = tail }
    counts[what] = (counts[what] or 0) + 1
    io.stderr:write(('[%s rc=%d] seed %d call %d: %s\n%s\n'):format(what, rc, o.seed, culprit, desc,
      o.verbose and tail or tail:sub(-400)))
    if last_b == nil and last_e < start then
      io.stderr:write('fuzz_api: the child failed before its first call; stopping\n' .. tail .. '\n')
      break
    end
    start = culprit + 1
  end
  os.remove(logf); os.remove(errf)
  -- the report
  local lines = {}
  local function say(...) lines[#lines + 1] = string.format(...) end
  say('fuzz_api: seed %d, calls %d..%d%s, %d s, %d child run(s), binary %s', o.seed, o.start, o.n,
    o.only and (', only ' .. o.only) or '', os.time() - t0, runs, bin)
  local cls_order = { 'ok', 'clean', 'internal', 'badresult', 'oom', 'budget', 'harness', 'crash', 'hang' }
  local parts = {}
  for _, c in ipairs(cls_order) do parts[#parts + 1] = c .. '=' .. (counts[c] or 0) end
  say('outcomes: %s', table.concat(parts, ' '))
  for _, c in ipairs(crashes) do say('%s rc=%d call %d: %s\n    %s', c.what:upper(), c.rc, c.idx, c.desc,
    (c.err:gsub('\n', '\n    '):sub(-900))) end
  local keys = {}
  for k in pairs(groups) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b)
    if groups[a].n ~= groups[b].n then return groups[a].n > groups[b].n end
    return a < b
  end)
  for _, k in ipairs(keys) do
    local gr = groups[k]
    say('%5d  %s\n       e.g. %s', gr.n, k, gr.example:sub(1, 300))
  end
  local text = table.concat(lines, '\n') .. '\n'
  io.write(text)
  if o.report then local f = assert(io.open(o.report, 'w')); f:write(text); f:close() end
  local bad = (counts.crash or 0) + (counts.hang or 0)
  os.exit(bad > 0 and 2 or 0)
end

if ... == 'fuzz_api_lib' then return FUZZ end -- (loadfile('scripts/fuzz_api.lua')('fuzz_api_lib'))
local o = parse_args(arg)
if o.child then child(o) else parent(o) end
