-- dpl.tensor_sort: sorting, selection and counting on dpl.tensor's handles, with PyTorch's
-- names and semantics: sort, argsort, topk, kthvalue, median, mode (values and 1-based
-- indices, as max(dim)), unique, bincount, histc, count_nonzero. The work is done in C
-- (src/tensor/dpl_tensor_sort.c, dpl_tensor_count.c; count_nonzero composes ne and sum).
-- dpl.tensor installs them (require('dpl.tensor_sort')(M, helpers)) as methods and module
-- functions. Optional arguments are positional as in PyTorch (t:sort(2, true),
-- t:topk(3, 1, false)) and/or an options table last (t:sort{descending = true, stable =
-- true}); the selected values record their gradient with the rules of dpl.autograd_rules.
local ffi = require 'ffi'
local C = require('dpl.capi').C
local options = require 'dpl.options'
local errors = require 'dpl.errors'

local type, tostring, tonumber = type, tostring, tonumber
local floor = math.floor
local fmt = string.format
local ENOMEM = -2
local check_opts, keys = options.check, options.keys

local SORT_KEYS = keys('dim', 'descending', 'stable')
local TOPK_KEYS = keys('dim', 'largest', 'sorted')
local KTH_KEYS = keys('dim', 'keepdim')
local UNIQUE_KEYS = keys('sorted', 'return_inverse', 'return_counts', 'dim')
local BINCOUNT_KEYS = keys('weights', 'minlength')
local HISTC_KEYS = keys('bins', 'min', 'max')
local COUNT_KEYS = keys('dim')

return function(M, H)
  local gcw = H.gcw -- wrap a result handle (and collect when tensor bytes passed the threshold)
  local methods = M.methods
  local fail, need_tensor, error, release = H.fail, H.need_tensor, H.error, H.release
  local out1, out2 = H.out1, H.out2
  local out3 = ffi.new('dpl_tensor*[1]')
  local is_tensor, cdim = M.is_tensor, M._cdim
  local gc_flag = M._gc_flag
  local add_scalar_ = C.dpl_binary_scalar_

  local function got(v)
    if type(v) == 'cdata' then return is_tensor(v) and 'a tensor' or 'cdata (not a tensor)' end
    if type(v) == 'string' then return fmt("'%s'", v) end
    if type(v) == 'number' or type(v) == 'boolean' then return tostring(v) end
    return type(v)
  end
  local function need_bool(name, what, v)
    if v ~= nil and type(v) ~= 'boolean' then
      error(fmt('%s: %s must be true or false, got %s', name, what, got(v)))
    end
  end
  local function need_int(name, what, v)
    if type(v) ~= 'number' or v ~= floor(v) or v >= 2 ^ 63 or v < -2 ^ 63 then -- (1e308: printed as -2^63 by %d)
      error(fmt('%s: %s must be an integer, got %s', name, what, got(v)))
    end
  end
  -- a plain table of options (not a list, not a tensor)
  local function is_table(x) return type(x) == 'table' end
  -- a value given positionally or in the options table, not both
  local function opt(name, opts, key, pos)
    local v = opts[key]
    if v == nil then return pos end
    if pos ~= nil then error(fmt('%s: %s given twice (as an argument and in the options table)', name, key)) end
    return v
  end

  -- Lua dim (1-based, negative from the end, nil: the last) -> 0-based C dim. A 0-d tensor
  -- takes 1 or -1, as PyTorch's 0 / -1.
  local function dim_of(name, t, d)
    if d == nil then d = -1 end
    if t._ndim == 0 then
      if d ~= 1 and d ~= -1 then
        need_int(name, 'dim', d)
        error(fmt('%s: dim %d out of range (expected 1 or -1 for a 0-d tensor)', name, d))
      end
      return 0
    end
    if type(d) ~= 'number' or d ~= floor(d) then error(fmt('%s: dim must be an integer, got %s', name, got(d))) end
    return cdim(t, d, name)
  end
  -- the size along C dim cd (1 for a 0-d tensor)
  local function size_at(t, cd) return t._ndim == 0 and 1 or tonumber(t._shape[cd]) end

  -- C fn(a, b, c [, d], values, indices) -> values (when want_values), indices (1-based);
  -- one GC and retry on ENOMEM. An error keeps C's status: "not implemented on cuda" is a
  -- NotImplementedError.
  local function call2(want_values, fn, a, b, c, d)
    local ov = want_values and out1 or nil
    local st
    if d == nil then st = fn(a, b, c, ov, out2) else st = fn(a, b, c, d, ov, out2) end
    if st == ENOMEM then
      collectgarbage()
      if d == nil then st = fn(a, b, c, ov, out2) else st = fn(a, b, c, d, ov, out2) end
    end
    if st ~= 0 then fail(3, st) end
    local v = want_values and gcw(out1) or nil
    local i = gcw(out2)
    if gc_flag[0] ~= 0 then M.collect() end
    add_scalar_(0, i, 1) -- 1-based positions
    return v, i
  end

  -- values selected along a dim get their gradient back at the indices (dpl.autograd_rules)
  local function record(rule, v, t, cd, keepdim, i)
    if v._dtype > 3 then return v end
    local A = package.loaded['dpl.autograd']
    if not (A and A.record) then return v end
    return A.record(A.rules[rule], v, t, t._ndim > 0 and cd + 1 or nil, keepdim, i)
  end
  -- PyTorch's non-differentiable outputs of a differentiable input (unique, bincount's
  -- weights): the result requires grad and backward through it raises
  local function no_derivative(name)
    return { nin = 1, name = name, save = function() end, bw = function()
      error(errors.NotImplementedError(fmt("backward: the derivative for '%s' is not implemented (as in PyTorch)", name)))
    end }
  end
  local UNIQUE_RULE, BINCOUNT_RULE = no_derivative('unique'), no_derivative('bincount')
  local function record_none(rule, out, x)
    if out._dtype > 3 then return out end
    local A = package.loaded['dpl.autograd']
    if not (A and A.record) then return out end
    return A.record(rule, out, x)
  end

  ---------------------------------------------------------------- sort, argsort
  local function sort_args(name, t, d, desc, opts)
    need_tensor(name, 'self', t)
    if is_table(d) then d, opts = nil, d elseif is_table(desc) then desc, opts = nil, desc end
    if opts ~= nil then
      check_opts(opts, SORT_KEYS, name)
      d, desc = opt(name, opts, 'dim', d), opt(name, opts, 'descending', desc)
      need_bool(name, 'stable', opts.stable) -- (every sort here is stable)
    end
    need_bool(name, 'descending', desc)
    return dim_of(name, t, d), desc and 1 or 0
  end
  --- t:sort([dim=-1 [, descending=false]] [, {dim=, descending=, stable=}]) -> values, indices
  --- (1-based int64). Stable: equal values keep their order; NaN sorts as the largest.
  function methods.sort(t, d, desc, opts)
    local cd, de = sort_args('sort', t, d, desc, opts)
    local v, i = call2(true, C.dpl_sort, t, cd, de)
    return record('sort', v, t, cd, true, i), i
  end
  --- t:argsort([dim=-1 [, descending=false]] [, opts]): the indices of sort.
  function methods.argsort(t, d, desc, opts)
    local cd, de = sort_args('argsort', t, d, desc, opts)
    local _, i = call2(false, C.dpl_sort, t, cd, de)
    return i
  end

  ---------------------------------------------------------------- topk, kthvalue
  --- t:topk(k [, dim=-1 [, largest=true [, sorted=true]]] [, {dim=, largest=, sorted=}])
  --- -> values, indices: the k largest (or smallest) along dim, in order (sorted=false gives
  --- them in order too); ties: the lower index first.
  function methods.topk(t, k, d, largest, sorted, opts)
    need_tensor('topk', 'self', t)
    if is_table(d) then d, opts = nil, d
    elseif is_table(largest) then largest, opts = nil, largest
    elseif is_table(sorted) then sorted, opts = nil, sorted end
    if opts ~= nil then
      check_opts(opts, TOPK_KEYS, 'topk')
      d, largest, sorted = opt('topk', opts, 'dim', d), opt('topk', opts, 'largest', largest), opt('topk', opts, 'sorted', sorted)
    end
    need_int('topk', 'k', k)
    need_bool('topk', 'largest', largest)
    need_bool('topk', 'sorted', sorted)
    local cd = dim_of('topk', t, d)
    local size = size_at(t, cd)
    if k < 0 or k > size then
      error(fmt('topk: k %d out of range for dim %d of size %d (expected 0..%d)', k, cd + 1, size, size))
    end
    local v, i = call2(true, C.dpl_topk, t, k, cd, largest == false and 0 or 1)
    return record('topk', v, t, cd, true, i), i
  end

  local function kth_args(name, t, d, keepdim, opts)
    if is_table(d) then d, opts = nil, d elseif is_table(keepdim) then keepdim, opts = nil, keepdim end
    if opts ~= nil then
      check_opts(opts, KTH_KEYS, name)
      d, keepdim = opt(name, opts, 'dim', d), opt(name, opts, 'keepdim', keepdim)
    end
    need_bool(name, 'keepdim', keepdim)
    return d, keepdim and true or false
  end
  --- t:kthvalue(k [, dim=-1 [, keepdim=false]] [, opts]) -> values, indices: the k-th smallest
  --- (k in 1..size, PyTorch's k).
  function methods.kthvalue(t, k, d, keepdim, opts)
    need_tensor('kthvalue', 'self', t)
    d, keepdim = kth_args('kthvalue', t, d, keepdim, opts)
    need_int('kthvalue', 'k', k)
    local cd = dim_of('kthvalue', t, d)
    local size = size_at(t, cd)
    if k < 1 or k > size then
      error(fmt('kthvalue: k %d out of range for dim %d of size %d (expected 1..%d)', k, cd + 1, size, size))
    end
    local v, i = call2(true, C.dpl_kthvalue, t, k, cd, keepdim and 1 or 0)
    return record('kthvalue', v, t, cd, keepdim, i), i
  end

  ---------------------------------------------------------------- median, mode
  local function nonempty(name, t, cd)
    if size_at(t, cd) == 0 then
      error(fmt('%s: cannot select from dim %d of size 0 (expected a non-empty dim)', name, cd + 1))
    end
  end
  --- t:median() -> 0-d: the lower median of all elements (nan when one is nan, or when t is
  --- empty); t:median(dim [, keepdim=false]) -> values, indices.
  function methods.median(t, d, keepdim, opts)
    need_tensor('median', 'self', t)
    d, keepdim = kth_args('median', t, d, keepdim, opts)
    if d == nil then
      if keepdim then error('median: keepdim needs a dim (median() reduces over all elements)') end
      local st = C.dpl_median(t, -1, 0, out1, out2)
      if st == ENOMEM then collectgarbage() st = C.dpl_median(t, -1, 0, out1, out2) end
      if st ~= 0 then fail(2, st) end
      local v = gcw(out1)
      C.dpl_tensor_release(out2[0])
      if v._dtype > 3 then return v end
      local A = package.loaded['dpl.autograd']
      if not (A and A.record) then return v end
      return A.record(A.rules.median_all, v, t)
    end
    local cd = dim_of('median', t, d)
    nonempty('median', t, cd)
    local v, i = call2(true, C.dpl_median, t, cd, keepdim and 1 or 0)
    return record('median', v, t, cd, keepdim, i), i
  end
  --- t:mode([dim=-1 [, keepdim=false]] [, opts]) -> values, indices: the most frequent value
  --- (the smallest of several), at its last position.
  function methods.mode(t, d, keepdim, opts)
    need_tensor('mode', 'self', t)
    d, keepdim = kth_args('mode', t, d, keepdim, opts)
    local cd = dim_of('mode', t, d)
    nonempty('mode', t, cd)
    local v, i = call2(true, C.dpl_mode, t, cd, keepdim and 1 or 0)
    return record('mode', v, t, cd, keepdim, i), i
  end
  ---------------------------------------------------------------- unique
  --- t:unique([sorted=true [, return_inverse=false [, return_counts=false [, dim]]]] [, opts])
  --- -> output [, inverse] [, counts]: the distinct values, sorted (sorted=false too); inverse:
  --- for each element (each slice along dim) its 1-based position in output; counts: how many.
  --- With dim: the distinct slices along dim, in lexicographic order.
  function methods.unique(t, sorted, inv, cnt, d, opts)
    need_tensor('unique', 'self', t)
    if is_table(sorted) then sorted, opts = nil, sorted
    elseif is_table(inv) then inv, opts = nil, inv
    elseif is_table(cnt) then cnt, opts = nil, cnt
    elseif is_table(d) then d, opts = nil, d end
    if opts ~= nil then
      check_opts(opts, UNIQUE_KEYS, 'unique')
      sorted, inv = opt('unique', opts, 'sorted', sorted), opt('unique', opts, 'return_inverse', inv)
      cnt, d = opt('unique', opts, 'return_counts', cnt), opt('unique', opts, 'dim', d)
    end
    need_bool('unique', 'sorted', sorted)
    need_bool('unique', 'return_inverse', inv)
    need_bool('unique', 'return_counts', cnt)
    local cd = -1
    if d ~= nil then
      if type(d) ~= 'number' or d ~= floor(d) then error(fmt('unique: dim must be an integer, got %s', got(d))) end
      cd = cdim(t, d, 'unique')
    end
    local function go() return C.dpl_unique(t, cd, out1, inv and out2 or nil, cnt and out3 or nil) end
    local st = go()
    if st == ENOMEM then collectgarbage() st = go() end
    if st ~= 0 then fail(2, st) end
    local u = gcw(out1)
    local ri = inv and gcw(out2) or nil
    local rc = cnt and gcw(out3) or nil
    if gc_flag[0] ~= 0 then M.collect() end
    u = record_none(UNIQUE_RULE, u, t)
    if ri then add_scalar_(0, ri, 1) end
    if ri and rc then return u, ri, rc end
    if ri then return u, ri end
    if rc then return u, rc end
    return u
  end

  ---------------------------------------------------------------- bincount, histc
  --- t:bincount([weights [, minlength=0]] [, {weights=, minlength=}]): for a 1-d tensor of
  --- non-negative integers, entry v + 1 counts the elements equal to v (int64), or sums their
  --- weights (float32 weights: float32, others float64); max(t) + 1 entries, at least minlength.
  function methods.bincount(t, w, minlength, opts)
    need_tensor('bincount', 'self', t)
    if is_table(w) then w, opts = nil, w elseif is_table(minlength) then minlength, opts = nil, minlength end
    if opts ~= nil then
      check_opts(opts, BINCOUNT_KEYS, 'bincount')
      w, minlength = opt('bincount', opts, 'weights', w), opt('bincount', opts, 'minlength', minlength)
    end
    if w ~= nil and not is_tensor(w) then error(fmt('bincount: weights must be a tensor or nil, got %s', got(w))) end
    if minlength == nil then minlength = 0 end
    need_int('bincount', 'minlength', minlength)
    if minlength < 0 then error(fmt('bincount: minlength must be >= 0, got %d', minlength)) end
    local st = C.dpl_bincount(t, w, minlength, out1)
    if st == ENOMEM then collectgarbage() st = C.dpl_bincount(t, w, minlength, out1) end
    if st ~= 0 then fail(2, st) end
    local r = gcw(out1)
    if gc_flag[0] ~= 0 then M.collect() end
    if w ~= nil then r = record_none(BINCOUNT_RULE, r, w) end
    return r
  end

  --- t:histc([bins=100 [, min=0 [, max=0]]] [, {bins=, min=, max=}]): a histogram of a floating
  --- tensor in bins equal bins over [min, max] (min = max: the data's smallest and largest);
  --- elements outside the range and NaNs are not counted. t's dtype; not differentiable.
  function methods.histc(t, bins, lo, hi, opts)
    need_tensor('histc', 'self', t)
    if is_table(bins) then bins, opts = nil, bins
    elseif is_table(lo) then lo, opts = nil, lo
    elseif is_table(hi) then hi, opts = nil, hi end
    if opts ~= nil then
      check_opts(opts, HISTC_KEYS, 'histc')
      bins, lo, hi = opt('histc', opts, 'bins', bins), opt('histc', opts, 'min', lo), opt('histc', opts, 'max', hi)
    end
    if bins == nil then bins = 100 end
    need_int('histc', 'bins', bins)
    if bins <= 0 then error(fmt('histc: bins must be > 0, got %d', bins)) end
    lo, hi = lo or 0, hi or 0
    if type(lo) ~= 'number' then error(fmt('histc: min must be a number, got %s', got(lo))) end
    if type(hi) ~= 'number' then error(fmt('histc: max must be a number, got %s', got(hi))) end
    if lo > hi then error(fmt('histc: max must be larger than min, got min %s, max %s', tostring(lo), tostring(hi))) end
    local st = C.dpl_histc(t, bins, lo, hi, out1)
    if st == ENOMEM then collectgarbage() st = C.dpl_histc(t, bins, lo, hi, out1) end
    if st ~= 0 then fail(2, st) end
    local r = gcw(out1)
    if gc_flag[0] ~= 0 then M.collect() end
    return r
  end

  ---------------------------------------------------------------- count_nonzero
  --- t:count_nonzero([dim]) -> int64: the non-zero elements (NaN counts) over all elements,
  --- over dim, or over a list of dims ({1, 3}); also {dim = ...}.
  function methods.count_nonzero(t, d)
    need_tensor('count_nonzero', 'self', t)
    if type(d) == 'table' and rawget(d, 1) == nil and next(d) ~= nil then
      check_opts(d, COUNT_KEYS, 'count_nonzero')
      d = d.dim
    end
    local nz = methods.ne(t, 0)
    if d == nil then return methods.sum(nz) end
    if type(d) == 'number' then
      if t._ndim == 0 then dim_of('count_nonzero', t, d) return methods.sum(nz) end
      return methods.sum(nz, dim_of('count_nonzero', t, d) + 1)
    end
    if type(d) ~= 'table' then
      error(fmt('count_nonzero: dim must be an integer or a list of integers, got %s', got(d)))
    end
    if #d == 0 then return methods.sum(nz) end
    local cds, seen = {}, {}
    for k = 1, #d do
      local cd = dim_of('count_nonzero', t, d[k])
      if seen[cd] then error(fmt('count_nonzero: dim %d appears more than once in the list of dims', cd + 1)) end
      seen[cd] = true
      cds[#cds + 1] = cd
    end
    if t._ndim == 0 then return methods.sum(nz) end
    table.sort(cds, function(x, y) return x > y end) -- the last dims first: the others keep their numbers
    local r = nz
    for k = 1, #cds do r = methods.sum(r, cds[k] + 1) end
    return r
  end

  for _, name in ipairs({ 'sort', 'argsort', 'topk', 'kthvalue', 'median', 'mode', 'unique', 'bincount', 'histc',
    'count_nonzero' }) do
    M[name] = methods[name]
  end
end
