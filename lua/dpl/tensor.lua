-- dpl.tensor: the Lua tensor type. An ffi.metatype over the C handle
-- (struct dpl_tensor): one C allocation per tensor plus an ffi.gc finalizer,
-- an idempotent t:free(), constructors, PyTorch-named methods and operators.
-- Positions are 1-based (dims, indices, class labels); C is 0-based and this
-- module converts. Dtypes are strings ("float32", ...) or dpl.float32, ...
local ffi = require 'ffi'
local capi = require 'dpl.capi'
local C = capi.C

local errors = require 'dpl.errors'
local registry = debug.getregistry()

local type, tonumber, tostring, select = type, tonumber, tostring, select
local floor, huge = math.floor, math.huge
local fmt = string.format

-- Errors are objects whose tostring reads "ClassName: message" (DESIGN.md):
-- a bad argument caught here is a ValueError, a failure reported by C (shape,
-- dtype, device, index, memory) a RuntimeError, as PyTorch raises them.
local lua_error = error
local ValueError, RuntimeError = errors.ValueError, errors.RuntimeError
local status_class = { [-4] = errors.NotImplementedError }
local function error(msg)
  if type(msg) == 'string' then msg = ValueError(msg) end
  lua_error(msg, 0)
end

-- argument checks at the entry points (a wrong type would otherwise reach the FFI and
-- read "bad argument #2 to 'fn' (cannot convert ...)")
local function got(v) return type(v) == 'cdata' and 'cdata (not a tensor)' or type(v) end
local need_tensor -- (set once is_tensor is defined) need_tensor(op, what, v)
local function need_number(op, what, v)
  if type(v) ~= 'number' then error(('%s: %s must be a number, got %s'):format(op, what, got(v))) end
end

-- a non-negative integer (thread counts, thresholds)
local function need_count(op, what, v)
  if type(v) ~= 'number' or v ~= floor(v) or v < 0 or v >= 2 ^ 63 then -- (inf: an int64 of -2^63)
    error(('%s: %s must be a non-negative integer, got %s'):format(op, what, type(v) == 'number' and tostring(v) or got(v)))
  end
end

local M = {}
local methods = {}
M.methods = methods
M.Tensor = methods

local tensor_ct = ffi.typeof('dpl_tensor')
local out1 = ffi.new('dpl_tensor*[1]')
local out2 = ffi.new('dpl_tensor*[1]')
local shp = ffi.new('int64_t[8]')
local shp2 = ffi.new('int64_t[8]')
local dims32 = ffi.new('int32_t[8]')
-- the handles' finalizer: the host's lua_CFunction when running inside dplhost (the GC
-- calls it directly), else the C function through the FFI
local release
do
  local ok, host = pcall(require, 'dpl.host')
  release = ok and type(host) == 'table' and host.tensor_release or C.dpl_tensor_release
end
local ENOMEM = -2

---------------------------------------------------------------- dtypes
local dtype_ids = {
  float32 = 0, float64 = 1, float16 = 2, bfloat16 = 3, int32 = 4, int64 = 5, uint8 = 6, bool = 7,
  float = 0, double = 1, half = 2, int = 4, long = 5, byte = 6,
}
local dtype_names = { [0] = 'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'bool' }
M.dtype_names = dtype_names
M.dtype_ids = dtype_ids
for name, id in pairs(dtype_ids) do
  if dtype_names[id] == name then M[name] = name end
end
M.float, M.double, M.half, M.long, M.int, M.byte = 'float32', 'float64', 'float16', 'int64', 'int32', 'uint8'

-- PyTorch's checked conversion of a number written into an element (c10::checked_convert:
-- "value cannot be converted to type uint8_t without overflow"), shared by every op that
-- stores a Lua number into a tensor of dtype dt (full, fill_, masked_fill, index_fill,
-- scatter, where, clamp, the tensor constructor, ...): once per number, never per element.
-- Lua has one number type; an integral number is a Python int to PyTorch's rule, a
-- fraction (or the value of a floating 0-d tensor: float_src) a Python float:
--   int32/int64: the dtype's range (int64: -2^63 <= v < 2^63); nan and +-inf overflow;
--   uint8: an integer takes -255..255 (a negative one wraps: -1 is 255), a float 0..255;
--   a float fraction is truncated toward zero by the store (2.7 -> 2, -2.7 -> -2);
--   float16/bfloat16/float32: a finite number beyond the largest finite value overflows
--   (nan and +-inf are kept); float64 and bool take any number (bool: v ~= 0).
local INT_RANGE = { [4] = { -2 ^ 31, 2 ^ 31 - 1 }, [5] = { -2 ^ 63, 2 ^ 63 }, [6] = { -255, 255 } }
local FLOAT_MAX = { [0] = 3.4028234663852886e38, [2] = 65504, [3] = 3.3895313892515355e38 }
M._INT_RANGE = INT_RANGE
local function scalar_fits(v, dt, float_src)
  local r = INT_RANGE[dt]
  if r then
    if v ~= v or v >= 2 ^ 63 then return false end -- (also int64's 2^63, which r[2] lets through)
    if float_src or v ~= floor(v) then
      if dt == 6 then return v >= 0 and v <= 255 end
      return v >= r[1] and v <= r[2]
    end
    return v >= r[1] and v <= r[2]
  end
  local fmax = FLOAT_MAX[dt]
  if fmax and v == v and v ~= huge and v ~= -huge then return v <= fmax and v >= -fmax end
  return true
end
local function check_scalar(name, v, dt, float_src)
  if not scalar_fits(v, dt, float_src) then
    error(fmt('%s: value %s cannot be converted to %s without overflow', name, tostring(v), dtype_names[dt]))
  end
  return v
end
M._check_scalar = check_scalar
-- PyTorch's spelling as text ('torch.float32', 'torch.long': what print(x.dtype) shows there)
do
  local torch_names = {}
  for name, id in pairs(dtype_ids) do torch_names['torch.' .. name] = id end
  for name, id in pairs(torch_names) do dtype_ids[name] = id end
end

local function fail(level, st)
  lua_error((status_class[st] or RuntimeError)(capi.last_error()), 0)
end
M._fail = fail

local function dtype_id(d, what)
  if d == nil then return 0 end
  if type(what) ~= 'string' then what = nil end -- (a table label printed as 'table: 0x...')
  local id = dtype_ids[d]
  if id then return id end
  if type(d) == 'number' and dtype_names[d] then return d end
  error(fmt("%s: unknown dtype %s (expected one of float32, float64, float16, bfloat16, int32, int64, uint8, bool)",
    what or 'dtype', type(d) == 'string' and ("'" .. d .. "'")
      or (type(d) == 'cdata' and ffi.istype(tensor_ct, d)) and '(a tensor: pass its .dtype)' or tostring(d)), 3)
end
M.dtype_id = dtype_id

---------------------------------------------------------------- devices
local function devices()
  return require 'dpl.devices' -- not cached: specs may reload it
end

-- a device object (from dpl.device): its C type id and index
local function device_fields(d)
  if type(d) ~= 'table' then return nil end
  local ok, tid, idx = pcall(function() return d.type_id, d.index end)
  if ok and type(tid) == 'number' and type(idx) == 'number' then return tid, idx end
  return nil
end

-- returns devtype, devindex
local function parse_device(d, what)
  if d == nil or d == 'cpu' then return 0, 0 end
  if type(what) ~= 'string' then what = nil end -- (a table label printed as 'table: 0x...')
  local td = type(d)
  if td == 'string' then
    if d == 'cuda' then return 1, registry['dpl.cuda.current'] or 0 end -- the current GPU (dpl.devices)
    local k = d:match('^cuda:(%d+)$')
    if k then return 1, tonumber(k) end
    if d == 'cpu:0' then return 0, 0 end
  elseif td == 'table' and device_fields(d) then
    return device_fields(d)
  elseif td == 'number' and d >= 0 and d == floor(d) then
    return 1, d
  end
  error(fmt("%s: invalid device %s (expected 'cpu', 'cuda', 'cuda:<k>' or a dpl.device)", what or 'device',
    td == 'string' and ("'" .. d .. "'") or tostring(d)), 3)
end
M.parse_device = parse_device

local function is_device_spec(d)
  local td = type(d)
  if td == 'string' then return d == 'cpu' or d == 'cuda' or d:match('^cuda:%d+$') ~= nil or d == 'cpu:0' end
  return td == 'table' and device_fields(d) ~= nil
end

---------------------------------------------------------------- handles
local function is_tensor(x)
  return type(x) == 'cdata' and ffi.istype(tensor_ct, x)
end
need_tensor = function(op, what, v)
  if not is_tensor(v) then
    error(('%s: %s must be a tensor, got %s%s'):format(op, what, got(v), v == nil and (what == 'input' or what == 'self')
      and (" (a method called with '.' instead of ':'? write t:%s(...))"):format(op) or ''))
  end
end
M.is_tensor = is_tensor

local gc_done = C.dpl_gc_done
-- LuaJIT's GC cannot see tensor memory: C counts tensor bytes and handles and
-- raises a flag (read here as gc_flag[0], no call) when either passed its threshold.
-- Tensor bytes allocated between two such collections: at least gc_bytes (reusing
-- freed blocks soon keeps them in cache), and more when the Lua heap is big (a
-- collection costs in proportion to it).
M.gc_bytes = tonumber(os.getenv('DPL_GC_BYTES') or '') or 32 * 1024 * 1024
M.gc_heap_factor = 32                -- x the Lua heap (in bytes) ...
M.gc_max_bytes = 256 * 1024 * 1024   -- ... but never more than this
-- Handles created between two collections: each costs a finalizer, a C block and
-- a few hundred bytes however small its data, and a full collection of a small
-- heap costs ~15 us: collecting every 8192 small tensors keeps LuaJIT's finalizer
-- table and the freed blocks in cache (4x4 adds: ~0.2 us instead of ~0.4 us when
-- left to LuaJIT's own pacing, 30k-130k tensors a cycle). With a big heap, one
-- collection per gc_heap_per_handle bytes of it at most, as its cost grows with it:
-- 128 (4x4 adds with dpl.tensor alone, 1.2 MB heap: 0.198 us; with the Trainer and nn
-- loaded, 2.2 MB: 0.207 us; at 32 they were 0.269 / 0.343 us, the finalizer table and
-- the freed blocks of 40-80k handles a cycle out of cache)
M.gc_handles = tonumber(os.getenv('DPL_GC_HANDLES') or '') or 8192
M.gc_heap_per_handle = 128
local gc_flag = C.dpl_gc_flag()
M._gc_flag = gc_flag
-- Lockstep mode (DDP ranks, M.gc_lockstep): a collection stops a rank for a few
-- hundred µs to ms, and every other rank waits for it at the next collective; the
-- ranks then agree on when to collect (M.gc_due at a step boundary, shared through
-- the gradient all-reduce) and the flag only fires at gc_lockstep_backstop x the
-- thresholds, as a backstop.
local soft_bytes, soft_handles, lockstep = 0, 0, false
M.gc_lockstep_backstop = 4
local function set_gc_thresholds(heap)
  soft_bytes = math.max(M.gc_bytes, math.min(M.gc_heap_factor * heap, M.gc_max_bytes))
  soft_handles = math.max(M.gc_handles, floor(heap / M.gc_heap_per_handle))
  local k = lockstep and M.gc_lockstep_backstop or 1
  C.dpl_set_gc_threshold(soft_bytes * k)
  C.dpl_set_gc_handle_threshold(soft_handles * k)
end
set_gc_thresholds(0)
local function collect()
  collectgarbage()
  -- the heap still holds what the handles collected now cost: their cdata (16 bytes
  -- each, freed by the next collection) and the finalizer table's slots (24-48
  -- bytes each): not part of what the next collection marks
  local handles = tonumber(gc_done())
  set_gc_thresholds(math.max(0, collectgarbage('count') * 1024 - 64 * handles))
end
M.collect = collect

--- Lockstep GC on (true) or off: see above. The strategy that turns it on calls
--- M.gc_due() at the same point of every step on every rank and M.collect() on all
--- ranks when any of them is due.
function M.gc_lockstep(on)
  lockstep = on and true or false
  set_gc_thresholds(math.max(0, collectgarbage('count') * 1024))
end
--- True when tensor bytes or handles created since the last collection passed the
--- (soft) thresholds.
function M.gc_due()
  return tonumber(C.dpl_gc_since(0)) > soft_bytes or tonumber(C.dpl_gc_since(1)) > soft_handles
end

-- out[0] -> a garbage-collected handle (a reference to the struct, so t[i] reaches __index)
local function wrap(p)
  local r = ffi.gc(p[0][0], release)
  if gc_flag[0] ~= 0 then collect() end
  return r
end
M._wrap = wrap

local function new_empty(shape_n, dt, devt, devi)
  local st = C.dpl_tensor_empty(dt, shape_n, shp, devt, devi, out1)
  if st ~= 0 then
    if st == ENOMEM then
      collectgarbage()
      st = C.dpl_tensor_empty(dt, shape_n, shp, devt, devi, out1)
    end
    if st ~= 0 then fail(3, st) end
  end
  return wrap(out1)
end

-- calls C fn(args..., out1) with one GC-and-retry on ENOMEM; returns the new handle
local function call1(fn, ...)
  local st = fn(...)
  if st ~= 0 then
    if st == ENOMEM then
      collectgarbage()
      st = fn(...)
    end
    if st ~= 0 then fail(3, st) end
  end
  return wrap(out1)
end

-- call1 for the view ops: the new handle (on t's storage) is passed to the view hook
-- that dpl.autograd installs (views of a tensor share its version counter and, for
-- autograd, its history)
local view_hook = nil
function M._set_view_hook(fn) view_hook = fn end
local function view1(fn, t, ...)
  local st = fn(t, ...)
  if st ~= 0 then
    if st == ENOMEM then
      collectgarbage()
      st = fn(t, ...)
    end
    if st ~= 0 then fail(3, st) end
  end
  local r = wrap(out1)
  if view_hook then view_hook(r, t) end
  return r
end

local function check(st)
  if st ~= 0 then fail(3, st) end
end

---------------------------------------------------------------- memory pressure
-- maybe_collect, memory_stats/allocated/cached, empty_cache, set_gc_threshold/handles: dpl.tensor_memory
require('dpl.tensor_memory')(M, { check = check, parse_device = parse_device, need_count = need_count })

---------------------------------------------------------------- argument helpers
local function ndim(t) return t._ndim end

-- 1-based (or negative) Lua dim -> 0-based C dim
local function cdim(t, d, name, extra)
  local n = t._ndim + (extra or 0)
  -- (inf and 1e308 are no dims either: %d printed them as -2^63 in the range error)
  if type(d) ~= 'number' or d ~= floor(d) or d >= 2 ^ 53 or d <= -2 ^ 53 then
    error(fmt('%s: dim must be an integer, got %s', name, tostring(d)), 3)
  end
  local r = d < 0 and n + d or d - 1
  if r < 0 or r >= n then
    if n == 0 then error(fmt('%s: dim %d out of range: the tensor has no dims (0-d)', name, d), 3) end
    error(fmt('%s: dim %d out of range (expected 1..%d or -%d..-1 for a %d-d tensor)', name, d, n, n, t._ndim), 3)
  end
  return r
end
M._cdim = cdim

local function is_opts(x)
  return type(x) == 'table' and rawget(x, 1) == nil and next(x) ~= nil
end

-- a 0-d integer tensor where an integer is expected (a size, an index): its value, as
-- PyTorch's int arguments take one (w:select(1, ids[i])); anything else unchanged
local function int_of(v)
  if type(v) == 'cdata' and is_tensor(v) and v._ndim == 0 and v._dtype > 3 and v._dtype ~= 7 then return methods.item(v) end
  return v
end
M._int_of = int_of

-- (sizes...) or ({sizes}) [, opts] -> n (filled into buf), opts.
-- Not a vararg function on purpose. The old one read its varargs inside loops
-- (`select(n, ...)`, `local first = ...`), and LuaJIT 2.1 as Debian ships it (a 2022
-- snapshot, before upstream's 2022-23 fixes to recording varargs, e.g. issues #864,
-- #1024, #1046) sometimes compiled a trace starting inside it that returned n = 0:
-- zeros({3, 2}, opts) gave a 0-d tensor (spec/autograd_rules_spec.lua, after a
-- view(-1) made the trace). Callers pass their `...` on; no vararg is read here.
local function size_at(name, buf, i, v)
  if type(v) ~= 'number' then v = int_of(v) end
  if type(v) ~= 'number' or v ~= floor(v) then
    error(fmt('%s: sizes must be integers, got %s at position %d', name, tostring(v), i), 4)
  end
  -- (inf, 1e308: integral, but as int64 they became -2^63, "sizes must be non-negative")
  if v >= 2 ^ 63 or v < -2 ^ 63 then
    error(fmt('%s: size %s at position %d is out of range (sizes are non-negative integers below 2^63)', name, tostring(v), i), 4)
  end
  buf[i - 1] = v
end

-- (No loops either: a loop inside would abort the trace of every loop calling it,
-- as "inner loop in root trace", and leave t:view(n) in a loop interpreted.)
local function parse_sizes(name, buf, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11)
  if a11 ~= nil then error(fmt('%s: at most 8 dims, got more than 10 arguments', name), 3) end
  -- wrappers may pass trailing nils
  local n = a10 ~= nil and 10 or a9 ~= nil and 9 or a8 ~= nil and 8 or a7 ~= nil and 7 or a6 ~= nil and 6
    or a5 ~= nil and 5 or a4 ~= nil and 4 or a3 ~= nil and 3 or a2 ~= nil and 2 or a1 ~= nil and 1 or 0
  local last
  if n == 1 then last = a1 elseif n == 2 then last = a2 elseif n == 3 then last = a3
  elseif n == 4 then last = a4 elseif n == 5 then last = a5 elseif n == 6 then last = a6
  elseif n == 7 then last = a7 elseif n == 8 then last = a8 elseif n == 9 then last = a9
  elseif n == 10 then last = a10 end
  local opts
  -- options: a table of named fields last, or an empty table after the sizes (zeros({2}, {}))
  if type(last) == 'table' and ((n > 0 and is_opts(last)) or (n > 1 and next(last) == nil)) then
    opts = last
    n = n - 1
  end
  if n == 1 and type(a1) == 'table' then
    local list = a1
    n = #list
    if n > 8 then error(fmt('%s: at most 8 dims, got %d sizes', name, n), 3) end
    if n >= 1 then size_at(name, buf, 1, list[1]) end
    if n >= 2 then size_at(name, buf, 2, list[2]) end
    if n >= 3 then size_at(name, buf, 3, list[3]) end
    if n >= 4 then size_at(name, buf, 4, list[4]) end
    if n >= 5 then size_at(name, buf, 5, list[5]) end
    if n >= 6 then size_at(name, buf, 6, list[6]) end
    if n >= 7 then size_at(name, buf, 7, list[7]) end
    if n >= 8 then size_at(name, buf, 8, list[8]) end
    return n, opts
  end
  if n > 8 then error(fmt('%s: at most 8 dims, got %d sizes', name, n), 3) end
  if n >= 1 then size_at(name, buf, 1, a1) end
  if n >= 2 then size_at(name, buf, 2, a2) end
  if n >= 3 then size_at(name, buf, 3, a3) end
  if n >= 4 then size_at(name, buf, 4, a4) end
  if n >= 5 then size_at(name, buf, 5, a5) end
  if n >= 6 then size_at(name, buf, 6, a6) end
  if n >= 7 then size_at(name, buf, 7, a7) end
  if n >= 8 then size_at(name, buf, 8, a8) end
  return n, opts
end
M._parse_sizes = parse_sizes

-- an options argument: nil or a table
local function need_opts(name, opts)
  if opts ~= nil and type(opts) ~= 'table' then
    error(('%s: options must be a table {dtype=, device=, ...}, got %s'):format(name, got(opts)))
  end
end

-- the keys a constructor's options table takes ({dtyp = 'float64'} is an error, not float32)
local CTOR_KEYS = require('dpl.options').keys('dtype', 'device', 'requires_grad')
M.ctor_option_keys = CTOR_KEYS

-- dtype, device type, device index and requires_grad (true or nil) of a constructor's options
local function opts_dtype_device(opts, name, default_dt)
  need_opts(name, opts)
  local dt = default_dt or 0
  local devt, devi = 0, 0
  local rg
  if opts then
    require('dpl.options').check(opts, CTOR_KEYS, name)
    if opts.dtype ~= nil then dt = dtype_id(opts.dtype, name) end
    if opts.device ~= nil then devt, devi = parse_device(opts.device, name) end
    rg = opts.requires_grad
    if rg ~= nil and type(rg) ~= 'boolean' then
      error(('%s: requires_grad must be a boolean, got %s'):format(name, got(rg)))
    end
    if rg == false then rg = nil end
  end
  return dt, devt, devi, rg
end

---------------------------------------------------------------- constructors
-- empty/zeros/ones/full, arange/linspace/eye, dpl.tensor, *_like, rand/randn/randint, seeds,
-- threads: dpl.tensor_ctor
require('dpl.tensor_ctor')(M, { call1 = call1, check = check, check_scalar = check_scalar, dtype_id = dtype_id,
  error = error, got = got,
  is_opts = is_opts, is_tensor = is_tensor, need_count = need_count, need_number = need_number, need_opts = need_opts,
  need_tensor = need_tensor, new_empty = new_empty, opts_dtype_device = opts_dtype_device, out1 = out1,
  parse_device = parse_device, parse_sizes = parse_sizes, shp = shp })

---------------------------------------------------------------- metadata
local props = {}

function methods.dim(t) return t._ndim end
methods.ndimension = methods.dim
function methods.numel(t) return tonumber(t._numel) end
methods.nelement = methods.numel

-- dpl.Size: what t:size() and t.shape return, a plain list of the sizes (s[1], #s, ipairs,
-- unpack, and it may be changed) that prints as dpl.Size({4, 3}) (torch.Size([4, 3])) and
-- compares by value with == against another dpl.Size (Lua calls __eq for two tables only).
local SizeMT = {}
SizeMT.__index = { numel = function(s) local p = 1 for i = 1, #s do p = p * s[i] end return p end }
SizeMT.__tostring = function(s) return 'dpl.Size({' .. table.concat(s, ', ') .. '})' end
SizeMT.__eq = function(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end
M._SizeMT = SizeMT
--- dpl.Size({4, 3}) or dpl.Size(4, 3): a dpl.Size, e.g. to compare with t.shape.
function M.Size(a, ...)
  local list = type(a) == 'table' and select('#', ...) == 0 and a or { a, ... }
  local r = {}
  for i = 1, #list do
    local v = list[i]
    if type(v) ~= 'number' or v < 0 or v ~= math.floor(v) then
      error(fmt('Size: size %d must be a non-negative integer, got %s', i, tostring(v)), 2)
    end
    r[i] = v
  end
  return setmetatable(r, SizeMT)
end

--- t:size() -> dpl.Size{n1, n2, ...}; t:size(d) -> size of dim d (1-based, negative from the end).
function methods.size(t, d)
  if d then return tonumber(t._shape[cdim(t, d, 'size')]) end
  local r = {}
  for i = 1, t._ndim do r[i] = tonumber(t._shape[i - 1]) end
  return setmetatable(r, SizeMT)
end
function methods.stride(t, d)
  if d then return tonumber(t._stride[cdim(t, d, 'stride')]) end
  local r = {}
  for i = 1, t._ndim do r[i] = tonumber(t._stride[i - 1]) end
  return r
end
function methods.storage_offset(t) return tonumber(t._offset) end
function methods.is_contiguous(t) return t._numel == 0 or bit.band(t._flags, 1) ~= 0 end
function methods.is_floating_point(t) return t._dtype <= 3 end
function methods.element_size(t) return tonumber(C.dpl_dtype_size(t._dtype)) end
function methods.data_ptr(t) return t._data end
function methods.is_freed(t) return t._storage == nil end
--- True when both tensors view the same storage.
function methods.is_set_to(t, o) need_tensor('is_set_to', 'other', o) return t._storage == o._storage end
methods.shares_storage = methods.is_set_to

props.shape = methods.size
props.dtype = function(t) return dtype_names[t._dtype] end
props.ndim = function(t) return t._ndim end
props.is_cuda = function(t) return t._devtype == 1 end
props.device = function(t)
  if t._devtype == 0 then return devices().device('cpu') end
  return devices().device('cuda', t._devindex)
end
props.T = function(t)
  if t._ndim > 2 then -- (torch 1.13 still reverses the dims with a deprecation warning; it will refuse)
    error(fmt('T: expects a tensor with <= 2 dims, got %d (use .mT to transpose the last two dims, or permute)', t._ndim), 3)
  end
  return t:t()
end
function methods.type(t, dt)
  if dt == nil then return dtype_names[t._dtype] end
  return t:to(dt)
end
function methods.get_device(t) return t._devtype == 0 and -1 or t._devindex end

---------------------------------------------------------------- lifetime, copies
--- Releases the storage now (views keep theirs); t becomes a "freed" tensor.
function methods.free(t)
  C.dpl_tensor_free_data(t)
end

function methods.clone(t)
  return call1(C.dpl_tensor_to, t, t._dtype, t._devtype, t._devindex, out1)
end

function methods.copy_(t, src)
  if type(src) == 'number' then check(C.dpl_tensor_fill_(t, check_scalar('copy_', src, t._dtype))) return t end
  need_tensor('copy_', 'src', src)
  check(C.dpl_tensor_copy_(t, src))
  return t
end

function methods.fill_(t, v)
  if type(v) == 'boolean' then v = v and 1 or 0 end
  local float_src = false -- (a floating 0-d tensor's value is a float to PyTorch's check)
  if is_tensor(v) then
    float_src = v._dtype <= 3
    if v._numel ~= 1 then -- (item's error named item, not fill_)
      error(fmt('fill_: value must be a number or a one-element tensor, got a tensor of %d elements', tonumber(v._numel)), 2)
    end
    v = v:item()
    if type(v) == 'boolean' then v = v and 1 or 0 end
  end
  if type(v) ~= 'number' then error(fmt('fill_: expected a number, got %s', type(v)), 2) end
  check_scalar('fill_', v, t._dtype, float_src)
  if t._dtype == 5 and v == floor(v) and (v > 2^53 or v < -2^53) then check(C.dpl_tensor_fill_i64_(t, v))
  else check(C.dpl_tensor_fill_(t, v)) end
  return t
end
-- (not through methods.fill_: autograd wraps both, and zero_ is one in-place op)
function methods.zero_(t) check(C.dpl_tensor_fill_(t, 0)) return t end

--- t:to(device_or_dtype [, dtype_or_device]): a converted copy, or t itself when nothing changes.
function methods.to(t, a, b)
  local dt, devt, devi = t._dtype, t._devtype, t._devindex
  for _, x in ipairs({ a, b }) do
    if x ~= nil then
      if is_opts(x) then
        if x.dtype then dt = dtype_id(x.dtype, 'to') end
        if x.device then devt, devi = parse_device(x.device, 'to') end
      elseif is_device_spec(x) then devt, devi = parse_device(x, 'to')
      elseif is_tensor(x) then dt, devt, devi = x._dtype, x._devtype, x._devindex
      else dt = dtype_id(x, 'to') end
    end
  end
  if dt == t._dtype and devt == t._devtype and devi == t._devindex then return t end
  return call1(C.dpl_tensor_to, t, dt, devt, devi, out1)
end
function methods.float(t) return t:to('float32') end
function methods.double(t) return t:to('float64') end
function methods.half(t) return t:to('float16') end
function methods.bfloat16(t) return t:to('bfloat16') end
function methods.int(t) return t:to('int32') end
function methods.long(t) return t:to('int64') end
function methods.byte(t) return t:to('uint8') end
methods.uint8 = methods.byte
function methods.bool(t) return t:to('bool') end
function methods.cpu(t) return t:to('cpu') end
function methods.cuda(t, k)
  if k ~= nil then need_number('cuda', 'device index', k) end
  return t:to(k and ('cuda:' .. k) or 'cuda')
end

local getbuf = ffi.new('double[1]')
local geti = ffi.new('int64_t[1]')
function methods.item(t)
  if t._numel ~= 1 then
    error(fmt('item: only a tensor with one element can be converted to a number, this one has %d', tonumber(t._numel)), 2)
  end
  local dt = t._dtype
  if dt == 5 then check(C.dpl_tensor_get_i64(t, 0, geti)) return tonumber(geti[0]) end
  check(C.dpl_tensor_get(t, 0, getbuf))
  if dt == 7 then return getbuf[0] ~= 0 end
  return getbuf[0]
end

--- Nested Lua tables of the values (numbers; booleans for bool tensors); a number for 0-d.
-- the nested tables of totable; its state goes as an argument, not as upvalues: a closure
-- compiled by the JIT reads immutable upvalues as constants, and the trace kept the buffer
-- (or the tensor) alive (see dpl.tensor_print)
local function totable_build(P, d)
  local r = {}
  local n = P.shape[d]
  if d == P.nd then
    local buf, pos, isbool = P.buf, P.pos, P.isbool
    for i = 1, n do
      local v = buf[pos + i - 1]
      if isbool then v = v ~= 0 end
      r[i] = v
    end
    P.pos = pos + n
  else
    for i = 1, n do r[i] = totable_build(P, d + 1) end
  end
  return r
end
function methods.totable(t)
  local n = tonumber(t._numel)
  local buf = ffi.new('double[?]', n > 0 and n or 1)
  check(C.dpl_tensor_read_f64(t, buf, n))
  local isbool = t._dtype == 7
  local nd = t._ndim
  if nd == 0 then
    if isbool then return buf[0] ~= 0 end
    return buf[0]
  end
  return totable_build({ buf = buf, shape = methods.size(t), nd = nd, isbool = isbool, pos = 0 }, 1)
end
methods.tolist = methods.totable

---------------------------------------------------------------- views
local function shape_args(t, name, first, ...)
  if is_tensor(first) then
    local v = int_of(first) -- a 0-d integer tensor is a size (PyTorch); another tensor gives its shape
    if type(v) == 'number' then return parse_sizes(name, shp, v, ...) end
    return parse_sizes(name, shp, methods.size(first))
  end
  return parse_sizes(name, shp, first, ...)
end

function methods.view(t, ...)
  local n = shape_args(t, 'view', ...)
  return view1(C.dpl_tensor_view, t, n, shp, out1)
end
function methods.view_as(t, o) need_tensor('view_as', 'other', o) return methods.view(t, methods.size(o)) end
function methods.reshape(t, ...)
  local n = shape_args(t, 'reshape', ...)
  return view1(C.dpl_tensor_reshape, t, n, shp, out1)
end
function methods.reshape_as(t, o) need_tensor('reshape_as', 'other', o) return methods.reshape(t, methods.size(o)) end
function methods.flatten(t, s, e)
  local n = t._ndim
  if n == 0 then return methods.reshape(t, 1) end
  s = s and cdim(t, s, 'flatten') or 0
  e = e and cdim(t, e, 'flatten') or n - 1
  if s > e then error('flatten: start dim must not come after end dim', 2) end
  local sizes = {}
  for i = 0, s - 1 do sizes[#sizes + 1] = tonumber(t._shape[i]) end
  local p = 1
  for i = s, e do p = p * tonumber(t._shape[i]) end
  sizes[#sizes + 1] = p
  for i = e + 1, n - 1 do sizes[#sizes + 1] = tonumber(t._shape[i]) end
  return methods.reshape(t, sizes)
end
function methods.transpose(t, d0, d1)
  return view1(C.dpl_tensor_transpose, t, cdim(t, d0, 'transpose'), cdim(t, d1, 'transpose'), out1)
end
function methods.t(t)
  if t._ndim > 2 then error(fmt('t: expects a tensor with <= 2 dims, got %d (use transpose)', t._ndim), 2) end
  if t._ndim < 2 then return view1(C.dpl_tensor_alias, t, out1) end
  return view1(C.dpl_tensor_transpose, t, 0, 1, out1)
end
function methods.permute(t, list, ...)
  if type(list) ~= 'table' then list = { list, ... } end
  if #list ~= t._ndim then
    error(fmt('permute: expected %d dims for a %d-d tensor, got %d', t._ndim, t._ndim, #list), 2)
  end
  for i = 1, #list do dims32[i - 1] = cdim(t, list[i], 'permute') end
  return view1(C.dpl_tensor_permute, t, #list, dims32, out1)
end
--- narrow(dim, start, length) with start 1-based.
function methods.narrow(t, d, start, len)
  local cd = cdim(t, d, 'narrow')
  local size = tonumber(t._shape[cd])
  if type(start) ~= 'number' then start = int_of(start) end
  if type(len) ~= 'number' then len = int_of(len) end
  if type(start) ~= 'number' or type(len) ~= 'number' then error('narrow: expected (dim, start, length)', 2) end
  -- (1.5 was truncated; NaN passed the range check and reached C as -2^63)
  if start ~= floor(start) or len ~= floor(len) or start >= 2 ^ 53 or start <= -2 ^ 53 or len >= 2 ^ 53 then
    error(fmt('narrow: start and length must be integers, got %s and %s', tostring(start), tostring(len)), 2)
  end
  local s0 = start < 0 and size + start or start - 1
  if s0 < 0 or len < 0 or s0 + len > size then
    error(fmt('narrow: start %d, length %d out of range for dim %d of size %d (start is 1-based)', start, len, d, size), 2)
  end
  return view1(C.dpl_tensor_narrow, t, cd, s0, len, out1)
end
--- select(dim, index) with index 1-based (negative from the end); drops the dim.
function methods.select(t, d, i)
  local cd = cdim(t, d, 'select')
  local size = tonumber(t._shape[cd])
  if type(i) ~= 'number' then i = int_of(i) end
  if type(i) ~= 'number' or i ~= floor(i) or i >= 2 ^ 53 or i <= -2 ^ 53 then -- (inf: printed as -2^63 below)
    error(fmt('select: index must be an integer, got %s', tostring(i)), 2)
  end
  local i0 = i < 0 and size + i or i - 1
  if i0 < 0 or i0 >= size then
    error(fmt('select: index %d out of range for dim %d of size %d (expected 1..%d or -%d..-1)', i, d, size, size, size), 2)
  end
  return view1(C.dpl_tensor_select, t, cd, i0, out1)
end
function methods.expand(t, ...)
  local n = shape_args(t, 'expand', ...)
  return view1(C.dpl_tensor_expand, t, n, shp, out1)
end
function methods.expand_as(t, o) need_tensor('expand_as', 'other', o) return methods.expand(t, methods.size(o)) end
function methods.squeeze(t, d)
  return view1(C.dpl_tensor_squeeze, t, d and cdim(t, d, 'squeeze') or -1, out1)
end
function methods.unsqueeze(t, d)
  return view1(C.dpl_tensor_unsqueeze, t, cdim(t, d, 'unsqueeze', 1), out1)
end
function methods.contiguous(t)
  if t._numel == 0 or bit.band(t._flags, 1) ~= 0 then return t end
  return call1(C.dpl_tensor_contiguous, t, out1)
end
function methods.as_strided(t, size, stride, offset)
  local n = parse_sizes('as_strided', shp, size)
  local m = parse_sizes('as_strided', shp2, stride)
  if n ~= m then error('as_strided: size and stride must have the same length', 2) end
  if offset ~= nil and (type(offset) ~= 'number' or offset ~= floor(offset) or offset < 0 or offset >= 2 ^ 62) then
    error(fmt('as_strided: storage_offset must be a non-negative integer, got %s',
      type(offset) == 'number' and tostring(offset) or got(offset)), 2)
  end
  return view1(C.dpl_tensor_as_strided, t, n, shp, shp2, offset or tonumber(t._offset), out1)
end

---------------------------------------------------------------- elementwise
local OP = {
  add = 0, sub = 1, mul = 2, div = 3, pow = 4, maximum = 5, minimum = 6, remainder = 7, atan2 = 8, fmod = 9,
  eq = 16, ne = 17, lt = 18, le = 19, gt = 20, ge = 21, logical_and = 24, logical_or = 25, logical_xor = 26,
}
M.binary_ops = OP
local UOP = {
  neg = 0, abs = 1, exp = 2, log = 3, sqrt = 4, rsqrt = 5, tanh = 6, sigmoid = 7, relu = 8, gelu = 9,
  sin = 10, cos = 11, floor = 12, ceil = 13, round = 14, sign = 15, reciprocal = 16, square = 17,
  log1p = 18, expm1 = 19, logical_not = 20, silu = 21, erf = 22, trunc = 23, log2 = 24, isnan = 25,
}
M.unary_ops = UOP

local binary, binary_scalar, binary_, binary_scalar_ = C.dpl_binary, C.dpl_binary_scalar, C.dpl_binary_, C.dpl_binary_scalar_

local function gc_wrap1()
  local r = ffi.gc(out1[0][0], release)
  if gc_flag[0] ~= 0 then collect() end
  return r
end
-- the same for any out array (the ops with several results): the handle is collected and,
-- when tensor bytes passed the threshold, the garbage collector runs (as wrap's callers do)
local function gcw(o)
  local r = ffi.gc(o[0][0], release)
  if gc_flag[0] ~= 0 then collect() end
  return r
end

-- a binary op's operand that is neither a tensor nor a number (nor a boolean)
local OP_NAME = {}
local function bad_operand(op, v, inplace)
  local name = (OP_NAME[op] or 'binary op') .. (inplace and '_' or '')
  error(('%s: other must be a tensor or a number, got %s%s'):format(name, got(v),
    v == nil and (" (a method called with '.' instead of ':'? write t:%s(other))"):format(name) or ''))
end

-- pow's number operand with an integer tensor is converted to its dtype, as PyTorch checks it
-- (uint8 ^ 256, 300 ^ uint8: errors); the other ops wrap the number as PyTorch does (uint8 + 300
-- is uint8 + 44) or promote a fraction to float32
local POW = OP.pow
local function pow_scalar(name, t, v)
  local dt = t._dtype
  if dt >= 4 and dt <= 6 and v == floor(v) then check_scalar(name, v, dt) end
end

local function binop(op, a, b, retried)
  local st
  if type(b) == 'number' then
    if type(a) == 'number' then error('binary op: at least one operand must be a tensor', 3) end
    if not is_tensor(a) then bad_operand(op, a) end
    if op == POW then pow_scalar('pow', a, b) end
    st = binary_scalar(op, a, b, 0, out1)
  elseif type(a) == 'number' then
    if not is_tensor(b) then bad_operand(op, b) end
    if op == POW then pow_scalar('pow', b, a) end
    st = binary_scalar(op, b, a, 1, out1)
  else
    if type(b) == 'boolean' then b = M.tensor(b) elseif type(a) == 'boolean' then a = M.tensor(a) end
    if not is_tensor(a) then bad_operand(op, a) elseif not is_tensor(b) then bad_operand(op, b) end
    st = binary(op, a, b, out1)
  end
  if st ~= 0 then
    -- (one GC and one retry, as call1: a result that can never fit, e.g. a shape past 2^50
    -- elements, failed with ENOMEM forever)
    if st == ENOMEM and not retried then collectgarbage() return binop(op, a, b, true) end
    fail(3, st)
  end
  return gc_wrap1()
end
M._binop = binop

local function binop_(op, a, b)
  local st
  if type(b) == 'number' then
    if op == POW and is_tensor(a) then pow_scalar('pow_', a, b) end
    st = binary_scalar_(op, a, b)
  else
    if type(b) == 'boolean' then b = M.tensor(b) end
    if not is_tensor(b) then bad_operand(op, b, true) end
    st = binary_(op, a, b)
  end
  if st ~= 0 then fail(3, st) end
  return a
end

for name, op in pairs(OP) do
  if OP_NAME[op] == nil or #name < #OP_NAME[op] then OP_NAME[op] = name end
  methods[name] = function(a, b) return binop(op, a, b) end
  methods[name .. '_'] = function(a, b) return binop_(op, a, b) end
  M[name] = methods[name]
end

-- alpha of add/sub/add_/sub_: a number, or {alpha = number} (PyTorch's keyword)
local function alpha_of(name, alpha)
  if alpha == nil or type(alpha) == 'number' then return alpha end
  if type(alpha) == 'table' and (alpha.alpha == nil or type(alpha.alpha) == 'number') then return alpha.alpha end
  error(('%s: alpha must be a number or {alpha = number}, got %s'):format(name, type(alpha)))
end

-- alpha of two integer tensors is converted to their result dtype, as PyTorch checks it
-- (add(x, y, 300) with uint8 x and y: an error, not alpha 44); once per call
local INT_RANK = { [7] = 0, [6] = 1, [4] = 2, [5] = 3 }
local function int_alpha(name, alpha, a, b)
  if type(alpha) ~= 'number' or not is_tensor(a) or not is_tensor(b) then return alpha end
  local ra, rb = INT_RANK[a._dtype], INT_RANK[b._dtype]
  if ra and rb then check_scalar(name, alpha, ra >= rb and a._dtype or b._dtype) end
  return alpha
end

--- t:add(other [, alpha]) = t + alpha * other (as torch.add); alpha also as {alpha = x}.
function methods.add(a, b, alpha)
  alpha = int_alpha('add', alpha_of('add', alpha), a, b)
  if alpha == nil or alpha == 1 then return binop(0, a, b) end
  if type(b) == 'number' then return binop(0, a, b * alpha) end
  local scaled = binop(2, b, alpha)
  local r = binop(0, a, scaled)
  C.dpl_tensor_free_data(scaled)
  return r
end
function methods.add_(a, b, alpha)
  alpha = int_alpha('add_', alpha_of('add_', alpha), a, b)
  if alpha == nil or alpha == 1 or type(b) == 'number' then return binop_(0, a, type(b) == 'number' and b * (alpha or 1) or b) end
  need_tensor('add_', 'other', b)
  check(C.dpl_axpy_(a, alpha, b))
  return a
end
function methods.sub(a, b, alpha)
  alpha = int_alpha('sub', alpha_of('sub', alpha), a, b)
  if alpha == nil or alpha == 1 then return binop(1, a, b) end
  return methods.add(a, b, -alpha)
end
function methods.sub_(a, b, alpha)
  alpha = int_alpha('sub_', alpha_of('sub_', alpha), a, b)
  if alpha == nil or alpha == 1 then return binop_(1, a, b) end
  return methods.add_(a, b, -alpha)
end
M.add, M.sub = methods.add, methods.sub
-- integer remainder/fmod by zero: PyTorch raises ZeroDivisionError (a RuntimeError)
local is_int_dt = { [4] = true, [5] = true, [6] = true, [7] = true }
local function int_zero_div(name, a, b)
  local ta = is_tensor(a) and a or nil
  if type(b) == 'number' then
    if b ~= 0 or not (ta and is_int_dt[ta._dtype]) then return end
  elseif type(a) == 'number' then
    if a ~= floor(a) or not (is_tensor(b) and is_int_dt[b._dtype]) then return end
    if not methods.any(binop(16, b, 0)):item() then return end
  elseif is_tensor(a) and is_tensor(b) then
    if not (is_int_dt[a._dtype] and is_int_dt[b._dtype]) then return end
    if not methods.any(binop(16, b, 0)):item() then return end
  else
    return
  end
  lua_error(RuntimeError(name .. ': ZeroDivisionError (integer division by zero)'), 0)
end
for _, name in ipairs({ 'remainder', 'fmod' }) do
  local f, f_ = methods[name], methods[name .. '_']
  methods[name] = function(a, b) int_zero_div(name, a, b) return f(a, b) end
  methods[name .. '_'] = function(a, b) int_zero_div(name .. '_', a, b) return f_(a, b) end
  M[name] = methods[name]
end
methods.mod = methods.remainder

-- div(other [, {rounding_mode = 'floor'|'trunc'}]) as torch.div: rounded quotients keep an
-- integer dtype (computed in float64: exact below 2^53); integers by zero raise ZeroDivisionError
local ROUNDING = { floor = UOP.floor, trunc = UOP.trunc }
local function rounding_of(name, opts)
  if opts == nil then return nil end
  if type(opts) ~= 'table' then error(('%s: expected {rounding_mode = ...} as third argument, got %s'):format(name, type(opts)), 3) end
  for k in pairs(opts) do
    if k ~= 'rounding_mode' then error(("%s: unknown option '%s' (expected rounding_mode)"):format(name, tostring(k)), 3) end
  end
  local m = opts.rounding_mode
  if m == nil then return nil end
  if not ROUNDING[m] then error(("%s: rounding_mode must be 'floor', 'trunc' or nil, got %s"):format(name, tostring(m)), 3) end
  return ROUNDING[m]
end
local function div_operand(v) return is_tensor(v) or type(v) == 'number' or type(v) == 'boolean' end
local function div_what(v) return is_tensor(v) and 'a tensor' or got(v) end
local function rounded_div(name, a, b, rop)
  -- (a missing operand failed inside binop, named 'add')
  if not (div_operand(a) and div_operand(b)) then
    error(fmt('%s: expected a tensor and a tensor or a number, got %s and %s', name, div_what(a), div_what(b)))
  end
  if not is_tensor(a) and not is_tensor(b) then error(name .. ': at least one operand must be a tensor') end
  int_zero_div(name, a, b)
  local want = binop(0, a, b)._dtype -- the dtype of the promoted operands
  if want == 7 then want = 5 end
  local q
  if is_int_dt[want] then
    local da = is_tensor(a) and methods.to(a, 'float64') or a
    local db = is_tensor(b) and methods.to(b, 'float64') or b
    q = binop(3, da, db)
  else
    q = binop(3, a, b)
  end
  local st = C.dpl_unary_(rop, q)
  if st ~= 0 then fail(3, st) end
  if q._dtype ~= want then q = methods.to(q, dtype_names[want]) end
  return q
end
local div, div_ = methods.div, methods.div_
function methods.div(a, b, opts)
  if opts == nil then return div(a, b) end
  local rop = rounding_of('div', opts)
  if rop == nil then return div(a, b) end
  return rounded_div('div', a, b, rop)
end
function methods.div_(a, b, opts)
  if opts == nil then return div_(a, b) end
  local rop = rounding_of('div_', opts)
  if rop == nil then return div_(a, b) end
  if not is_tensor(a) then need_tensor('div_', 'self', a) end
  return methods.copy_(a, rounded_div('div_', a, b, rop))
end
M.div = methods.div
--- floor_divide(other): div with rounding_mode = 'floor' (PyTorch 1.13's floor_divide)
function methods.floor_divide(a, b) return rounded_div('floor_divide', a, b, UOP.floor) end
M.floor_divide = methods.floor_divide
methods.max_elementwise = methods.maximum

local unary, unary_ = C.dpl_unary, C.dpl_unary_
for name, op in pairs(UOP) do
  methods[name] = function(t)
    if not is_tensor(t) then need_tensor(name, 'input', t) end
    local st = unary(op, t, out1)
    if st ~= 0 then fail(2, st) end
    return gc_wrap1()
  end
  methods[name .. '_'] = function(t)
    local st = unary_(op, t)
    if st ~= 0 then fail(2, st) end
    return t
  end
  M[name] = methods[name]
end
methods.negative = methods.neg
do -- bool:square() counts in int64, as PyTorch
  local square = methods.square
  methods.square = function(t)
    if is_tensor(t) and t._dtype == 7 then t = methods.to(t, 'int64') end
    return square(t)
  end
  M.square = methods.square
end
methods.isnan = methods.isnan

--- Gradient of an activation (op 'relu', 'gelu', 'silu' use the input; 'tanh', 'sigmoid' the output).
function M.activation_backward(op, grad, saved)
  local id = UOP[op]
  if not id then error(fmt("activation_backward: unknown op '%s'", tostring(op)), 2) end
  need_tensor('activation_backward', 'grad', grad)
  need_tensor('activation_backward', 'saved', saved)
  return call1(C.dpl_activation_backward, id, grad, saved, saved, out1)
end

-- clamp's bounds: numbers or nil, also as {min=, max=}
local function clamp_bounds(name, lo, hi)
  if is_opts(lo) then lo, hi = lo.min, lo.max end
  for i = 1, 2 do
    local v = hi
    if i == 1 then v = lo end -- (false is a bad bound, not a missing one)
    if v ~= nil and type(v) ~= 'number' then
      if is_tensor(v) then
        lua_error(errors.NotImplementedError(name .. ': tensor min/max are not implemented; use '
          .. 'dpl.maximum(x, min) and dpl.minimum(x, max)'), 0)
      end
      error(('%s: min and max must be numbers (or nil), got %s'):format(name, type(v)))
    end
  end
  return lo, hi
end
-- a fractional bound promotes an integer tensor to float32 (PyTorch's result type)
local function fractional(lo, hi) return (lo and lo ~= floor(lo)) or (hi and hi ~= floor(hi)) end
-- an integral bound of an integer tensor is converted to its dtype first, as PyTorch does:
-- one the dtype cannot hold is an error (uint8's max 300), a negative one wraps in uint8
-- (min -1 is 255, PyTorch's result) (a fractional bound has made t float32 by then)
local function int_bound(name, t, v)
  if v == nil or t._dtype <= 3 or t._dtype == 7 then return v end
  check_scalar(name, v, t._dtype)
  if t._dtype == 6 and v < 0 then v = v + 256 end
  return v
end
function methods.clamp(t, lo, hi)
  need_tensor('clamp', 'input', t)
  lo, hi = clamp_bounds('clamp', lo, hi)
  if t._dtype > 3 and fractional(lo, hi) then t = methods.to(t, 'float32') end
  lo, hi = int_bound('clamp', t, lo), int_bound('clamp', t, hi)
  return call1(C.dpl_clamp, t, lo or 0, hi or 0, lo and 1 or 0, hi and 1 or 0, out1)
end
function methods.clamp_(t, lo, hi)
  lo, hi = clamp_bounds('clamp_', lo, hi)
  if t._dtype > 3 and fractional(lo, hi) then
    error(("clamp_: result type float32 can't be cast to the tensor's dtype %s"):format(dtype_names[t._dtype]))
  end
  lo, hi = int_bound('clamp_', t, lo), int_bound('clamp_', t, hi)
  check(C.dpl_clamp_(t, lo or 0, hi or 0, lo and 1 or 0, hi and 1 or 0))
  return t
end
function methods.clamp_min(t, lo) return methods.clamp(t, lo, nil) end
function methods.clamp_max(t, hi) return methods.clamp(t, nil, hi) end
methods.clip = methods.clamp
M.clamp = methods.clamp

-- a number operand of where as a 0-d tensor: the other operand's dtype when the number fits
-- its kind, as PyTorch promotes a scalar (a fraction with an integer or bool tensor: float32;
-- an integer with a bool tensor: int64)
local function as_tensor_like(x, like)
  if is_tensor(x) then return x end
  local dt
  if type(x) == 'boolean' then
    x, dt = x and 1 or 0, like and like._dtype or 7
  elseif type(x) == 'number' and x ~= floor(x) then
    dt = (like and like._dtype <= 3) and like._dtype or 0
  else
    dt = like == nil and 5 or like._dtype == 7 and 5 or like._dtype
  end
  if type(x) == 'number' then check_scalar('where', x, dt) end -- (converted to the tensor's dtype, as PyTorch checks it)
  return M.tensor(x, { dtype = dt, device = like and like.device or nil })
end

--- dpl.where(cond, a, b): a where cond is true, else b (numbers allowed for a or b).
function M.where(cond, a, b)
  if not is_tensor(cond) then error('where: condition must be a tensor', 2) end
  local ta = is_tensor(a) and a or nil
  local tb = is_tensor(b) and b or nil
  a = as_tensor_like(a, tb)
  b = as_tensor_like(b, ta)
  return call1(C.dpl_where, cond, a, b, out1)
end
function methods.where(t, cond, other) return M.where(cond, t, other) end

function methods.masked_fill_(t, mask, v)
  need_tensor('masked_fill_', 'mask', mask)
  if type(v) == 'boolean' then v = v and 1 or 0 end
  local float_src = false
  if is_tensor(v) then
    float_src = v._dtype <= 3
    if v._numel ~= 1 then -- (item's error named item, not masked_fill_)
      error(fmt('masked_fill_: value must be a number or a one-element tensor, got a tensor of %d elements', tonumber(v._numel)), 2)
    end
    v = v:item()
    if type(v) == 'boolean' then v = v and 1 or 0 end
  end
  need_number('masked_fill_', 'value', v)
  check_scalar('masked_fill_', v, t._dtype, float_src)
  check(C.dpl_masked_fill_(t, mask, v))
  return t
end
--- The broadcast shape of a list of tensors (a Lua list of sizes), nil when they do not
--- broadcast together (masked_fill here; index_put_ and masked_scatter in dpl.tensor_index).
local function broadcast_shape(list)
  local nd = 0
  for i = 1, #list do if list[i]._ndim > nd then nd = list[i]._ndim end end
  local shape = {}
  for k = 1, nd do shape[k] = 1 end
  for i = 1, #list do
    local t = list[i]
    local lead = nd - t._ndim
    for k = 1, t._ndim do
      local s = tonumber(t._shape[k - 1])
      local cur = shape[lead + k]
      if cur == 1 then shape[lead + k] = s elseif s ~= 1 and s ~= cur then return nil end
    end
  end
  return shape
end
M._broadcast_shape = broadcast_shape

-- out of place, self broadcasts against the mask (PyTorch's): a [1, L, S] tensor with an
-- [N, 1, S] mask gives [N, L, S]
function methods.masked_fill(t, mask, v)
  need_tensor('masked_fill', 'self', t)
  need_tensor('masked_fill', 'mask', mask)
  local shape = broadcast_shape({ t, mask })
  if not shape then
    error(fmt('masked_fill: the mask of shape [%s] does not broadcast with self of shape [%s]',
      table.concat(methods.size(mask), ", "), table.concat(methods.size(t), ", ")), 2)
  end
  if type(v) == 'number' then check_scalar('masked_fill', v, t._dtype) end -- (before the copy)
  local same = #shape == t._ndim
  for k = 1, #shape do same = same and t._shape[k - 1] == shape[k] end
  if not same then t = t:expand(shape) end
  return methods.masked_fill_(methods.clone(t), mask, v)
end
function methods.masked_select(t, mask)
  need_tensor('masked_select', 'mask', mask)
  return call1(C.dpl_masked_select, t, mask, out1)
end

---------------------------------------------------------------- reductions, softmax
-- sum, mean, ..., max/min, argmax, var/std, norm, softmax/log_softmax: dpl.tensor_reduce
local reduce = require('dpl.tensor_reduce')(M, { cdim = cdim, fail = fail, check = check, call1 = call1,
  gc_wrap1 = gc_wrap1, gcw = gcw, need_tensor = need_tensor, need_number = need_number, binop = binop,
  new_empty = new_empty, out1 = out1, out2 = out2 })

---------------------------------------------------------------- losses
local reductions = { none = 0, mean = 1, sum = 2 }
local function reduction_id(r, name)
  if type(name) ~= 'string' then name = 'reduction_id' end -- (a table printed as 'table: 0x...')
  local id = reductions[r or 'mean']
  if not id then error(fmt("%s: reduction must be 'none', 'mean' or 'sum', got '%s'", name, tostring(r)), 3) end
  return id
end
M.reduction_id = reduction_id

-- wraps the result in out1 and releases the temporary index tensor now (not at the next GC)
local function done_tmp(tmp)
  local r = gcw(out1)
  C.dpl_tensor_free_data(tmp)
  return r
end

-- Lua's 1-based class labels -> a 0-based int64 tensor for C
local function zero_based(target, name)
  if not is_tensor(target) then error(fmt('%s: target must be a tensor of class indices', name), 3) end
  if target._dtype <= 3 or target._dtype == 7 then
    error(fmt('%s: expected integer class indices (1-based) as target, got %s', name, dtype_names[target._dtype]), 3)
  end
  return binop(1, target, 1)
end
M._zero_based = zero_based

-- an index counted from the end beyond the dim's size is a bad argument (a ValueError, as when
-- Lua checked it), the other range errors failures reported by C
local function index_error_class(msg, st)
  if msg:find('from the end%)$') then return ValueError end
  return status_class[st] or RuntimeError
end
M._index_error_class = index_error_class
local function fix_msg(level, st)
  -- C speaks 0-based; say it in Lua's terms (capi.last_error)
  local msg = capi.last_error()
  lua_error(index_error_class(msg, st)(msg), 0)
end

---------------------------------------------------------------- linear algebra
-- (dpl.matmul(a, b) is the same function: the first argument is checked too)
function methods.matmul(a, b)
  need_tensor('matmul', 'input', a)
  need_tensor('matmul', 'other', b)
  return call1(C.dpl_matmul, a, b, out1)
end
function methods.mm(a, b)
  need_tensor('mm', 'input', a)
  need_tensor('mm', 'mat2', b)
  return call1(C.dpl_mm, a, b, out1)
end
function methods.bmm(a, b)
  need_tensor('bmm', 'input', a)
  need_tensor('bmm', 'mat2', b)
  return call1(C.dpl_bmm, a, b, out1)
end
function methods.dot(a, b)
  need_tensor('dot', 'input', a)
  need_tensor('dot', 'other', b)
  if a._ndim ~= 1 or b._ndim ~= 1 then error('dot: expected two 1-d tensors', 2) end
  return call1(C.dpl_matmul, a, b, out1)
end
--- dpl.addmm(c, a, b [, {beta=, alpha=}]) = beta * c + alpha * (a @ b).
function M.addmm(c, a, b, opts)
  need_tensor('addmm', 'input', c)
  need_tensor('addmm', 'mat1', a)
  need_tensor('addmm', 'mat2', b)
  if opts ~= nil and type(opts) ~= 'table' then error(('addmm: options must be a table {beta=, alpha=}, got %s'):format(type(opts))) end
  local beta = opts and opts.beta or 1
  local alpha = opts and opts.alpha or 1
  need_number('addmm', 'beta', beta)
  need_number('addmm', 'alpha', alpha)
  if INT_RANK[c._dtype] then check_scalar('addmm', beta, c._dtype) check_scalar('addmm', alpha, c._dtype) end
  return call1(C.dpl_addmm, c, a, b, beta, alpha, out1)
end
function methods.addmm(c, a, b, opts) return M.addmm(c, a, b, opts) end
M.matmul, M.mm, M.bmm = methods.matmul, methods.mm, methods.bmm

---------------------------------------------------------------- indexing
-- an index argument as an integer tensor, its values as the user wrote them (1-based); a table or
-- a number becomes an int64 tensor. lvl: the error level of the user's call.
local function index_arg(idx, name, lvl)
  if type(idx) == 'table' then
    -- inferred: int64 when every entry is an integer (a fraction is an error, not truncated)
    local t = M.tensor(idx)
    if t._dtype <= 3 then
      if t._numel > 0 then error(fmt('%s: index must hold integers (1-based), got a non-integer value in the table', name), lvl) end
      t = M.tensor(idx, { dtype = 'int64' })
    end
    idx = t
  elseif type(idx) == 'number' then
    if idx % 1 ~= 0 then error(fmt('%s: index must be an integer (1-based), got %s', name, tostring(idx)), lvl) end
    idx = M.tensor({ idx }, { dtype = 'int64' })
  end
  if not is_tensor(idx) then error(fmt('%s: index must be a tensor or a table of integers', name), lvl) end
  if idx._dtype <= 3 or idx._dtype == 7 then
    error(fmt('%s: expected an integer index tensor (1-based), got %s', name, dtype_names[idx._dtype]), lvl)
  end
  if idx._dtype == 6 then -- uint8: PyTorch's index ops take int64/int32 only (uint8 would be a mask there)
    error(fmt('%s: expected an integer index tensor (int64 or int32), got uint8', name), lvl)
  end
  return idx
end

-- the index as a 0-based int64 tensor for C (negative values, with len, count from the end)
local function index0(idx, name, len)
  idx = index_arg(idx, name, 4)
  if len and idx._numel > 0 then
    -- negative indices count from the end. In GPU memory, always through where: reading
    -- the minimum back would make the host wait for the GPU at every call
    local mn = bit.band(idx._flags, 2) ~= 0 and -1 or reduce('min', idx, nil, false):item()
    if mn < -len then
      error(fmt('%s: index %d is out of range for a dim of size %d (expected 1..%d, or -%d..-1 from the end)', name, mn,
        len, len, len), 3)
    end
    if mn < 0 then
      local neg = binop(OP.lt, idx, 0)
      return M.where(neg, binop(OP.add, idx, len), binop(OP.sub, idx, 1))
    end
  end
  return binop(OP.sub, idx, 1)
end
M._index0 = index0

-- index_select, index_add_, gather and scatter_add_ hand C the 1-based index as it is (no shifted
-- copy; C maps each entry as it reads it, negative ones from the end where the op takes them)
--- index_select(dim, index) with 1-based indices (a tensor or a table; -n..-1 from the end).
function methods.index_select(t, d, idx)
  local cd = cdim(t, d, 'index_select')
  local st = C.dpl_index_select_base(t, cd, index_arg(idx, 'index_select', 3), 1, out1)
  if st ~= 0 then fix_msg(2, st) end
  return wrap(out1)
end
--- t:index_add_(dim, index, source [, alpha]): t[index[i]] += alpha * source[i] along dim
--- (alpha also as {alpha = x}, PyTorch's keyword)
function methods.index_add_(t, d, idx, src, alpha)
  alpha = int_alpha('index_add_', alpha_of('index_add_', alpha), t, src)
  if alpha ~= nil and alpha ~= 1 then
    need_tensor('index_add_', 'source', src)
    src = binop(OP.mul, src, alpha)
  end
  need_tensor('index_add_', 'source', src)
  local cd = cdim(t, d, 'index_add_')
  local st = C.dpl_index_add_base(t, cd, index_arg(idx, 'index_add_', 3), src, 1)
  if st ~= 0 then fix_msg(2, st) end
  return t
end
function methods.gather(t, d, idx)
  local cd = cdim(t, d, 'gather')
  local st = C.dpl_gather_base(t, cd, index_arg(idx, 'gather', 3), 1, out1)
  if st ~= 0 then fix_msg(2, st) end
  return wrap(out1)
end
function methods.scatter_add_(t, d, idx, src)
  need_tensor('scatter_add_', 'src', src)
  local cd = cdim(t, d, 'scatter_add_')
  local st = C.dpl_scatter_add_base(t, cd, index_arg(idx, 'scatter_add_', 3), src, 1)
  if st ~= 0 then fix_msg(2, st) end
  return t
end
function methods.scatter_add(t, d, idx, src) return methods.scatter_add_(methods.clone(t), d, idx, src) end
--- Coordinates (1-based) of the non-zero elements, [nnz, ndim] int64.
function methods.nonzero(t)
  local r = call1(C.dpl_nonzero, t, out1)
  binary_scalar_(0, r, 1)
  return r
end

local function tensor_list(list, name)
  if is_tensor(list) then
    error(fmt("%s: expected a list of tensors {t1, t2, ...}, got a tensor (Torch7's %s(t1, t2 [, dim]) is "
      .. "dpl.%s({t1, t2}, dim) here; Torch7's default dim is the last, dplhost's is 1 as PyTorch's)", name, name, name), 3)
  end
  if type(list) ~= 'table' or #list == 0 then error(fmt('%s: expected a non-empty list of tensors', name), 3) end
  local arr = ffi.new('dpl_tensor*[?]', #list)
  for i = 1, #list do
    if not is_tensor(list[i]) then error(fmt('%s: element %d is not a tensor (%s)', name, i, type(list[i])), 3) end
    arr[i - 1] = list[i]
  end
  return arr, #list
end

--- dpl.cat({t1, t2, ...}, dim=1)
--- An empty 1-d tensor (shape [0]) is skipped, as PyTorch's legacy rule (its dtype still counts):
--- acc = dpl.tensor({}); acc = dpl.cat({acc, x}) works for x of any shape.
local function cat_ref(list)
  for i = 1, #list do
    local t = list[i]
    if not (t._ndim == 1 and t._shape[0] == 0) then return t end
  end
  return list[1]
end
M._cat_ref = cat_ref
function M.cat(list, d)
  local arr, n = tensor_list(list, 'cat')
  local cd = cdim(cat_ref(list), d or 1, 'cat')
  local r = call1(C.dpl_cat, n, arr, cd, out1)
  return r
end
M.concat = M.cat
--- dpl.stack({t1, t2, ...}, dim=1): a new dim.
function M.stack(list, d)
  local arr, n = tensor_list(list, 'stack')
  local cd = cdim(list[1], d or 1, 'stack', 1)
  return call1(C.dpl_stack, n, arr, cd, out1)
end

-- the random fills (uniform_, normal_, random_, bernoulli_) are with the constructors: dpl.tensor_ctor

---------------------------------------------------------------- metatable
local printer
local function tostring_tensor(t)
  printer = printer or require 'dpl.tensor_print'
  return printer.tostring(t)
end
methods.tostring = tostring_tensor

local function get_item(t, k)
  if type(k) ~= 'number' or not is_tensor(t) then
    error(fmt('get_item: expected a tensor and an integer index, got %s and %s', got(t), got(k)))
  end
  if t._ndim == 0 then error('index: a 0-d tensor cannot be indexed (use :item())', 3) end
  local size = tonumber(t._shape[0])
  local i0 = k < 0 and size + k or k - 1
  if k ~= floor(k) or i0 < 0 or i0 >= size then
    error(fmt('index %s is out of range for dim 1 of size %d (expected 1..%d or -%d..-1)', tostring(k), size, size, size), 3)
  end
  return view1(C.dpl_tensor_select, t, 0, i0, out1)
end

M.get_item = get_item -- t[i]; dpl.autograd wraps it

-- t[{...}], t[mask], t[idx] reads and writes: dpl.tensor_subscript
require('dpl.tensor_subscript')(M, { error = error, got = got, get_item = get_item })

local setters = {} -- k -> function(t, v) for `t.k = v` (dpl.autograd adds requires_grad, grad)
M.setters = setters
M.props = props

-- A ctype's metatable is set once per process, but this module may be loaded
-- again (a test runner resetting package.loaded): the metatable dispatches
-- through a state table kept in the registry, which each load points at its own
-- methods.
local S = registry['dpl.tensor.state']
local first_load = S == nil
if first_load then
  S = {}
  registry['dpl.tensor.state'] = S
end
S.methods, S.props, S.setters, S.M, S.tostring = methods, props, setters, M, tostring_tensor

-- PyTorch Tensor methods dplhost does not have: calling one raises NotImplementedError naming
-- it (instead of Lua's "attempt to call method 'cumsum' (a nil value)")
local missing = {}
for name in ([[]]):gmatch('%S+') do -- (none left: every group of them is implemented)
  missing[name] = function()
    lua_error(errors.NotImplementedError(fmt("tensor:%s() is not implemented in dplhost (PyTorch's Tensor.%s); "
      .. 'see docs/tensors.md for the operations there are', name, name)), 2)
  end
end
S.missing = missing
M._missing = missing -- (dpl.tensor_torch7 adds Torch7's names)

local mt = registry['dpl.tensor.mt'] or {
  __index = function(t, k)
    local m = S.methods[k]
    if m ~= nil then return m end
    local p = S.props[k]
    if p ~= nil then return p(t) end
    if type(k) == 'number' then return S.M.get_item(t, k) end
    if type(k) == 'table' or type(k) == 'cdata' then return S.M._subscript_get(t, k) end
    local e = S.extra_names and S.extra_names[k] -- (dpl.tensor_extra's names load it on first use)
    if e and S.load_extra(k) then
      if S.methods[k] ~= nil then return S.methods[k] end
      if S.props[k] ~= nil then return S.props[k](t) end
    end
    local miss = S.missing and S.missing[k]
    if miss ~= nil then return miss end
    return nil
  end,
  __newindex = function(t, k, v)
    if type(k) == 'number' then
      local s = S.M.get_item(t, k)
      if S.M.is_tensor(v) then S.methods.copy_(s, v)
      else
        if type(v) == 'number' then S.M._check_scalar('index', v, s._dtype) end -- (named as t[k] = v)
        S.methods.fill_(s, v)
      end
      return
    end
    if type(k) == 'table' or type(k) == 'cdata' then return S.M._subscript_set(t, k, v) end
    local set = S.setters[k] -- settable properties (autograd: requires_grad, grad)
    if set ~= nil then return set(t, v) end
    S.M._raise(fmt("tensor: cannot set field '%s'", tostring(k)))
  end,
  __tostring = function(t) return S.tostring(t) end,
  __len = function(t)
    if t._ndim == 0 then S.M._raise('len() of a 0-d tensor') end
    return tonumber(t._shape[0])
  end,
  -- operators dispatch through methods, so that dpl.autograd can wrap them
  __add = function(a, b) return S.methods.add(a, b) end,
  __sub = function(a, b) return S.methods.sub(a, b) end,
  __mul = function(a, b) return S.methods.mul(a, b) end,
  __div = function(a, b) return S.methods.div(a, b) end,
  __pow = function(a, b) return S.methods.pow(a, b) end,
  __mod = function(a, b) return S.methods.remainder(a, b) end,
  __unm = function(a) return S.methods.neg(a) end,
}
M._raise = error
M.metatable = mt
if first_load then
  registry['dpl.tensor.mt'] = mt
  ffi.metatype(tensor_ct, mt)
end

-- the layout Lua reads must be the one C compiled
do
  local fields = { '_dtype', '_ndim', '_devtype', '_devindex', '_numel', '_offset', '_shape', '_stride', '_data',
    '_storage', '_flags', '_reserved' }
  assert(tonumber(C.dpl_tensor_layout(-1)) == ffi.sizeof(tensor_ct), 'dpl.tensor: struct dpl_tensor size mismatch')
  for i, f in ipairs(fields) do
    assert(tonumber(C.dpl_tensor_layout(i - 1)) == ffi.offsetof(tensor_ct, f), 'dpl.tensor: layout mismatch at ' .. f)
  end
end

-- the losses and the network ops (conv, pooling, layer norm, embedding) live in dpl.tensor_nn
require("dpl.tensor_nn")(M, {
  call1 = call1, fail = fail, fix_msg = fix_msg, done_tmp = done_tmp, zero_based = zero_based,
  reduction_id = reduction_id, index0 = index0, index_arg = index_arg, need_tensor = need_tensor, need_opts = need_opts,
  need_number = need_number, release = release, out1 = out1, out2 = out2, error = error, gcw = gcw,
})
-- sorting, selection and counting (sort, topk, median, unique, bincount, ...) live in dpl.tensor_sort
require('dpl.tensor_sort')(M, { fail = fail, need_tensor = need_tensor, error = error, release = release,
  out1 = out1, out2 = out2, gcw = gcw })

-- PyTorch's index/scatter writes (scatter_, index_fill_, index_copy_, index_put_, masked_scatter_, put_, ...)
require("dpl.tensor_index")(M, { cdim = cdim, index0 = index0, call1 = call1, out1 = out1, error = error,
  index_error_class = index_error_class })

-- the shape group (cumsum, flip, roll, tril, diagonal, chunk, repeat/tile, new_zeros, ...): dpl.tensor_shape
require('dpl.tensor_shape')(M, { view1 = view1, fail = fail, cdim = cdim, parse_sizes = parse_sizes,
  need_tensor = need_tensor, error = error, out1 = out1, out2 = out2 })

-- the math group (unary math, activations, predicates, bitwise, lerp/addcmul, amax, nansum, ...)
require("dpl.tensor_math")(M, { fail = fail, error = error, binop = binop, reduce = reduce, cdim = cdim,
  need_tensor = need_tensor, need_number = need_number, out1 = out1 })

-- the modules loaded the first time one of their names is read (dpl.tensor_lazy lists them)
local LAZY = require 'dpl.tensor_lazy'
local extra_names, extra_mod = {}, {}
for mod, group in pairs(LAZY) do
  for kind, list in pairs(group) do
    for n in list:gmatch('%S+') do
      extra_names[n] = extra_names[n] or {}; extra_names[n][kind] = true; extra_mod[n] = mod
    end
  end
end
M._extra_names = extra_names
local lazy_loaded = {}
local function load_mod(mod)
  if lazy_loaded[mod] then return false end
  lazy_loaded[mod] = true
  require(mod)(M, { need_tensor = need_tensor, cdim = cdim, fail = fail, out1 = out1 })
  return true
end
-- loads the module of name k (every lazy module when k is nil); false when already loaded
local function load_extra(k)
  if k ~= nil then return extra_mod[k] ~= nil and load_mod(extra_mod[k]) end
  local any = false
  for mod in pairs(LAZY) do any = load_mod(mod) or any end
  return any
end
M._load_extra = load_extra
S.extra_names, S.load_extra = extra_names, load_extra

-- dpl.tensor(data, opts) calls the constructor; dpl.tensor.zeros etc. are the module's functions
setmetatable(M, {
  __call = function(_, ...) return M.tensor(...) end,
  -- the lazily loaded functions' names (the REPL's Tab completion lists them: dpl.repl_complete)
  __dir = function()
    local names = {}
    for n, e in pairs(extra_names) do if e.functions then names[#names + 1] = n end end
    return names
  end,
  __index = function(_, k)
    local e = extra_names[k]
    if e and e.functions and load_extra(k) then return rawget(M, k) end
    return nil
  end,
})

-- autograd wraps the differentiable methods above (requires_grad, backward, ...)
package.loaded['dpl.tensor'] = M
local autograd = require 'dpl.autograd'
if autograd.install then autograd.install(M) end -- (nil while autograd itself is loading first)

return M
