-- dpl.tensor_more: PyTorch functions dplhost's other groups lack, composed of recorded ops
-- where that is efficient (so autograd differentiates them), with loops over host copies and
-- rules of their own where it is not: ravel, tensor_split/hsplit/vsplit/dsplit, narrow_copy,
-- index_add (out of place), scatter_reduce(_) and index_reduce(_) (sum, prod, mean, amax, amin,
-- include_self), histogram, cov, corrcoef, cartesian_prod, combinations, trapezoid/trapz,
-- cumulative_trapezoid, diag_embed, vander, addbmm(_). Loaded on first use of one of its names
-- (the LAZY table of lua/dpl/tensor.lua lists them). Dims and indices are 1-based (negative
-- dims count from the end), as everywhere in dpl.tensor.
local ffi = require 'ffi'
local C = require('dpl.capi').C
local errors = require 'dpl.errors'
local options = require 'dpl.options'

local type, tostring, tonumber = type, tostring, tonumber
local floor, huge = math.floor, math.huge
local fmt = string.format
local lua_error = error

local K_HIST = options.keys('range', 'weight', 'density')
local K_COV = options.keys('correction', 'fweights', 'aweights')
local K_TRAP = options.keys('dx', 'dim')
local K_CTRAP = options.keys('dx', 'dim')
local K_SRED = options.keys('include_self')
local K_ADDBMM = options.keys('beta', 'alpha')
local K_COMB = options.keys('r', 'with_replacement')
local K_VANDER = options.keys('N', 'increasing')
local K_DIAG = options.keys('offset', 'dim1', 'dim2')

return function(M, H)
  local methods = M.methods
  local need_tensor, cdim, fail = H.need_tensor, H.cdim, H.fail
  local is_tensor, dtype_names = M.is_tensor, M.dtype_names

  local function value_error(msg) lua_error(errors.ValueError(msg), 0) end
  local function runtime_error(msg) lua_error(errors.RuntimeError(msg), 0) end
  local function got(v) return type(v) == 'cdata' and (is_tensor(v) and 'a tensor' or 'cdata (not a tensor)') or type(v) end
  local function is_float(t) return t._dtype <= 3 end
  local function dtype_of(t) return dtype_names[t._dtype] end
  local function dev_of(t) return t._devtype == 0 and 'cpu' or ('cuda:' .. t._devindex) end
  local function size_of(t)
    local r = {}
    for i = 1, t._ndim do r[i] = tonumber(t._shape[i - 1]) end
    return r
  end
  local function shape_str(s)
    if is_tensor(s) then s = size_of(s) end
    local p = {}
    for i = 1, #s do p[i] = tostring(s[i]) end
    return '[' .. table.concat(p, ', ') .. ']'
  end
  local function is_opts(v) return type(v) == 'table' and getmetatable(v) == nil end
  local function is_int(v) return type(v) == 'number' and v == floor(v) and v > -2 ^ 53 and v < 2 ^ 53 end
  -- an integer argument; a 0-d integer tensor counts as its value
  local function int_arg(name, what, v, lo)
    if is_tensor(v) and v._ndim == 0 and not is_float(v) and v._dtype ~= 7 then v = tonumber(methods.item(v)) end
    if not is_int(v) or (lo and v < lo) then
      value_error(fmt('%s: %s must be %s, got %s', name, what, lo == 0 and 'a non-negative integer'
        or lo == 1 and 'a positive integer' or 'an integer', type(v) == 'number' and tostring(v) or got(v)))
    end
    return v
  end
  local function need_bool(name, what, v)
    if v ~= nil and type(v) ~= 'boolean' then value_error(fmt('%s: %s must be a boolean, got %s', name, what, got(v))) end
    return v
  end
  local function check_opts(name, o, keys)
    if o == nil then return {} end
    if not is_opts(o) then value_error(fmt('%s: options must be a table, got %s', name, got(o))) end
    options.check(o, keys, name)
    return o
  end
  -- a 1-based dim of t (negative from the end) -> 1-based positive; a 0-d tensor takes 1 or -1
  local function pdim(t, d, name)
    if t._ndim == 0 and (d == 1 or d == -1) then return 1 end
    return cdim(t, d, name) + 1
  end
  -- a contiguous host copy of t in dtype dt, without history
  local function host(t, dt)
    return methods.contiguous(methods.to(methods.detach(t), { dtype = dt or dtype_of(t), device = 'cpu' }))
  end
  local function back(r, like) return like._devtype == 0 and r or methods.to(r, dev_of(like)) end
  local function record(rule, out, ...)
    local A = package.loaded['dpl.autograd']
    if not (A and A.record) then return out end
    return A.record(rule, out, ...)
  end
  local function fn_forms(list)
    for n in list:gmatch('%S+') do M[n] = function(...) return methods[n](...) end end
  end

  ---------------------------------------------------------------- ravel, narrow_copy, splits
  --- t:ravel(): t flattened to 1-d (a view when t is contiguous, else a copy)
  function methods.ravel(t)
    need_tensor('ravel', 'input', t)
    return methods.view(methods.contiguous(t), { -1 })
  end
  --- t:narrow_copy(dim, start, length): a contiguous copy of t:narrow(dim, start, length)
  function methods.narrow_copy(t, d, start, length)
    need_tensor('narrow_copy', 'input', t)
    return methods.clone(methods.narrow(t, d, start, length))
  end
  -- 1-based split positions -> 0-based (negatives from the end, as PyTorch's), clamped to [0, n]
  local function split_at(name, v, n)
    v = int_arg(name, 'indices', v)
    if v == 0 then value_error(fmt('%s: indices are 1-based (the first element is 1), got 0', name)) end
    local z = v > 0 and v - 1 or n + v
    if z < 0 then z = 0 elseif z > n then z = n end
    return z
  end
  local function split_list(name, ios)
    if is_tensor(ios) then
      if ios._ndim == 0 then return nil, ios end
      if ios._ndim ~= 1 or is_float(ios) or ios._dtype == 7 then
        value_error(fmt('%s: a tensor of indices must be a 1-d integer tensor, got %s of shape %s', name, dtype_of(ios),
          shape_str(ios)))
      end
      local l = methods.totable(ios)
      for i = 1, #l do l[i] = tonumber(l[i]) end
      return l
    end
    if is_opts(ios) then return ios end
    return nil, ios
  end
  --- t:tensor_split(indices_or_sections [, dim=1]): views along dim; sections n: n pieces, the
  --- first size % n of them one longer; indices (a list or 1-d int tensor): 1-based positions
  --- where a new piece starts (PyTorch's indices + 1; negative from the end)
  local function tensor_split(name, t, ios, d)
    need_tensor(name, 'input', t)
    if t._ndim == 0 then
      runtime_error(fmt('%s: expected at least a 1-dimensional tensor, but got a tensor with 0 dims', name))
    end
    local pd = pdim(t, d == nil and 1 or d, name)
    local n = tonumber(t._shape[pd - 1])
    local list, sections = split_list(name, ios)
    local out = {}
    if list then
      local start = 0
      for i = 1, #list do
        local e = split_at(name, list[i], n)
        out[#out + 1] = methods.narrow(t, pd, start + 1, e > start and e - start or 0)
        start = e
      end
      out[#out + 1] = methods.narrow(t, pd, start + 1, n - start)
      return out
    end
    sections = int_arg(name, 'sections', sections)
    if sections <= 0 then runtime_error(fmt('%s: number of sections must be larger than 0, got %d', name, sections)) end
    if sections > 2 ^ 24 and sections > n then -- (a list of that many mostly empty views: hours, then out of memory)
      runtime_error(fmt('%s: %d sections of a dim of size %d: more than 2^24 sections is only supported up to the '
        .. 'size of the dim', name, sections, n))
    end
    local q, r = floor(n / sections), n % sections
    local start = 0
    for i = 1, sections do
      local len = q + (i <= r and 1 or 0)
      out[i] = methods.narrow(t, pd, start + 1, len)
      start = start + len
    end
    return out
  end
  methods.tensor_split = function(t, ios, d) return tensor_split('tensor_split', t, ios, d) end
  local function xsplit(name, min_dims, dim_of)
    methods[name] = function(t, ios)
      need_tensor(name, 'input', t)
      if t._ndim < min_dims then
        runtime_error(fmt('%s: requires a tensor with at least %d dimension%s, but got a tensor with %d dimensions!', name,
          min_dims, min_dims > 1 and 's' or '', t._ndim))
      end
      local d = dim_of(t)
      local list, sections = split_list(name, ios)
      if not list then
        sections = int_arg(name, 'sections', sections)
        local n = tonumber(t._shape[d - 1])
        if sections <= 0 or n % sections ~= 0 then
          runtime_error(fmt('%s: attempted to split along dimension %d, but the size of the dimension %d is not '
            .. 'divisible by the split_size %d!', name, d, n, sections))
        end
        return tensor_split(name, t, sections, d)
      end
      return tensor_split(name, t, list, d)
    end
  end
  --- t:hsplit(sections_or_indices) (dim 2, or 1 for a 1-d t), vsplit (dim 1), dsplit (dim 3): as
  --- tensor_split, sections must divide the dim
  xsplit('hsplit', 1, function(t) return t._ndim == 1 and 1 or 2 end)
  xsplit('vsplit', 2, function() return 1 end)
  xsplit('dsplit', 3, function() return 3 end)
  fn_forms('ravel narrow_copy tensor_split hsplit vsplit dsplit')

  ---------------------------------------------------------------- index_add
  --- t:index_add(dim, index, source [, alpha]): index_add_ on a copy of t (differentiable)
  function methods.index_add(t, d, index, source, alpha)
    need_tensor('index_add', 'input', t)
    return methods.index_add_(methods.clone(t), d, index, source, alpha)
  end
  fn_forms('index_add')

  ---------------------------------------------------------------- scatter_reduce, index_reduce
  local REDUCE = { sum = 1, prod = 2, mean = 3, amax = 4, amin = 5 }
  local CTYPE = { float32 = 'float*', float64 = 'double*', int32 = 'int32_t*', int64 = 'int64_t*', uint8 = 'uint8_t*' }
  -- computed in: float16/bfloat16 in float32, bool in uint8 (sum: or, prod: and, amax: or, amin: and)
  local function compute_dtype(dt)
    if dt == 'float16' or dt == 'bfloat16' then return 'float32' end
    if dt == 'bool' then return 'uint8' end
    return dt
  end
  -- the forward: a new tensor (t's dtype, on t's device), from host copies
  local function sred_forward(name, t, pd, index, src, red, include_self)
    local dt = dtype_of(t)
    local cdt = compute_dtype(dt)
    local n = t._ndim
    local ishape = size_of(index)
    local sv = src
    for k = 1, n do
      if ishape[k] ~= tonumber(sv._shape[k - 1]) then sv = methods.narrow(sv, k, 1, ishape[k]) end
    end
    if t._devtype ~= 0 and index._devtype == t._devtype and index._devindex == t._devindex
      and src._devtype == t._devtype and src._devindex == t._devindex then
      -- on t's GPU: the same folds in a kernel, one thread per line of the index along the dim, in
      -- this loop's order (dpl_scatter_reduce_dev checks the index on a host copy: this message)
      local dev = dev_of(t)
      local function on_dev(x, d) return methods.contiguous(methods.to(methods.detach(x), { dtype = d, device = dev })) end
      local out = methods.clone(on_dev(t, cdt))
      local st = C.dpl_scatter_reduce_dev(out, pd - 1, on_dev(index, 'int64'), on_dev(sv, cdt), red,
        include_self and 1 or 0, dt == 'bool' and 1 or 0, name)
      if st ~= 0 then fail(3, st) end
      return cdt == dt and out or methods.to(out, dt)
    end
    local out = methods.clone(host(t, cdt))
    local hs, hi = host(sv, cdt), host(index, 'int64')
    local N = tonumber(hi._numel)
    local ct = CTYPE[cdt]
    local op, sp = ffi.cast(ct, out._data), ffi.cast(ct, hs._data)
    local ip = ffi.cast('const int64_t*', hi._data)
    local osz = tonumber(out._numel)
    local cnt = ffi.new('int32_t[?]', osz > 0 and osz or 1)
    local ostride, c = {}, {}
    for k = 0, n - 1 do ostride[k] = tonumber(out._stride[k]) c[k] = 0 end
    local cd = pd - 1
    local dsize = n > 0 and tonumber(out._shape[cd]) or 1
    local dstride = n > 0 and ostride[cd] or 0
    local is64 = cdt == 'int64'
    local isint = not (cdt == 'float32' or cdt == 'float64')
    local isbool = dt == 'bool'
    local base = 0
    -- float32/float64: the loop below in C (dpl_scatter_reduce_fill, the same folds); an index out
    -- of range stops it (out and cnt perhaps partly folded: they are thrown away), and the Lua
    -- loop reports it
    local cfill = (cdt == 'float32' or cdt == 'float64') and N > 0 and
      C.dpl_scatter_reduce_fill(out, cd, hi, hs, red, include_self and 1 or 0, cnt) == 0
    for p = 0, cfill and -1 or N - 1 do
      local v = tonumber(ip[p])
      if v < 1 or v > dsize then
        runtime_error(fmt('%s: index %d is out of range for dim %d of size %d (expected 1..%d)', name, v, pd, dsize, dsize))
      end
      local o = base + (v - 1) * dstride
      local s = sp[p]
      local k0 = cnt[o]
      if k0 == 0 and not include_self then
        op[o] = s
      elseif red == 1 or red == 3 then
        op[o] = (isbool and (op[o] ~= 0 or s ~= 0)) and 1 or (isbool and 0 or op[o] + s)
      elseif red == 2 then
        op[o] = isbool and ((op[o] ~= 0 and s ~= 0) and 1 or 0) or op[o] * s
      elseif red == 4 then
        local cur = op[o]
        if s ~= s or (cur == cur and s > cur) then op[o] = s end
      else
        local cur = op[o]
        if s ~= s or (cur == cur and s < cur) then op[o] = s end
      end
      cnt[o] = k0 + 1
      -- next position of index (row-major), keeping base = its offset in out without dim cd
      local k = n - 1
      while k >= 0 do
        c[k] = c[k] + 1
        if k ~= cd then base = base + ostride[k] end
        if c[k] < ishape[k + 1] then break end
        if k ~= cd then base = base - ostride[k] * c[k] end
        c[k] = 0
        k = k - 1
      end
    end
    if red == 3 then
      local extra = include_self and 1 or 0
      for o = 0, osz - 1 do
        local k = cnt[o]
        if k > 0 then
          local m = k + extra
          if is64 then
            local s = op[o]
            local q = s / m
            if q * m ~= s and s < 0 then q = q - 1 end
            op[o] = q
          elseif isint then
            op[o] = floor(op[o] / m)
          else
            op[o] = op[o] / m
          end
        end
      end
    end
    local r = cdt == dt and out or methods.to(out, dt)
    return back(r, t)
  end
  local function pad_to(g, shape)
    local same = g._ndim == #shape
    for k = 1, #shape do if tonumber(g._shape[k - 1]) ~= shape[k] then same = false end end
    if same then return g end
    local z = M.zeros(shape, { dtype = dtype_of(g), device = dev_of(g) })
    local v = z
    for k = 1, #shape do v = methods.narrow(v, k, 1, tonumber(g._shape[k - 1])) end
    methods.copy_(v, g)
    return z
  end
  local function as_dt(b, like) return methods.to(b, dtype_of(like)) end
  -- PyTorch 1.13's scatter_reduce_backward
  local SRED_RULE = {
    nin = 2, name = 'ScatterReduceBackward',
    save = function(n, out, t, src, pd, index, red, include_self)
      n.out, n.t, n.src, n.pd, n.index, n.red, n.inc = methods.detach(out), methods.detach(t), methods.detach(src), pd,
        index, red, include_self
    end,
    bw = function(n, g)
      local t, src, out, pd, index, red, inc = n.t, n.src, n.out, n.pd, n.index, n.red, n.inc
      local src_i = src
      for k = 1, src._ndim do src_i = methods.narrow(src_i, k, 1, tonumber(index._shape[k - 1])) end
      local gs, gsrc
      if red == 1 then
        gs, gsrc = g, methods.gather(g, pd, index)
      elseif red == 3 then
        local N = inc and M.ones_like(t) or M.zeros_like(t)
        N = methods.scatter_add(N, pd, index, M.ones_like(src_i))
        N = methods.masked_fill(N, methods.eq(N, 0), 1)
        local gn = methods.div(g, N)
        gs, gsrc = gn, methods.gather(gn, pd, index)
      elseif red == 2 then
        local masked_t = methods.masked_fill(t, methods.eq(t, 0), 1)
        local mres = sred_forward('scatter_reduce', masked_t, pd, index, src_i, 2, inc)
        gs = methods.div(methods.mul(g, mres), masked_t)
        local src_zero = methods.eq(src_i, 0)
        local nz = methods.gather(methods.scatter_add(M.zeros_like(t), pd, index, as_dt(src_zero, t)), pd, index)
        local single = methods.logical_and(src_zero, methods.eq(nz, 1))
        local msrc_res = sred_forward('scatter_reduce', t, pd, index, methods.masked_fill(src_i, single, 1), 2, inc)
        gsrc = M.where(single, methods.gather(methods.mul(g, msrc_res), pd, index),
          methods.div(methods.gather(methods.mul(g, out), pd, index), methods.masked_fill(src_i, src_zero, 1)))
      else
        local value = methods.gather(out, pd, index)
        local self_is = methods.eq(t, out)
        local src_is = methods.eq(src_i, value)
        local Nd = methods.scatter_add(as_dt(self_is, t), pd, index, as_dt(src_is, t))
        local gd = methods.div(g, Nd)
        gs = methods.mul(gd, as_dt(self_is, t))
        gsrc = methods.mul(methods.gather(gd, pd, index), as_dt(src_is, t))
      end
      if not inc then gs = methods.scatter(gs, pd, index, 0) end
      return gs, pad_to(gsrc, size_of(src))
    end,
  }
  local function check_index(name, index)
    need_tensor(name, 'index', index)
    if index._dtype ~= 5 and index._dtype ~= 4 then
      runtime_error(fmt('%s: expected an int64 (or int32) index tensor, got %s', name, dtype_of(index)))
    end
  end
  local function reduce_arg(name, reduce, allowed)
    if type(reduce) ~= 'string' or not REDUCE[reduce] or (allowed and not allowed[reduce]) then
      runtime_error(fmt("%s: reduce argument must be either %s, got %s", name,
        allowed and 'prod, mean, amax or amin' or 'sum, prod, mean, amax or amin',
        type(reduce) == 'string' and ("'" .. reduce .. "'") or got(reduce)))
    end
    return REDUCE[reduce]
  end
  local function include_arg(name, inc)
    if is_opts(inc) then
      options.check(inc, K_SRED, name)
      inc = inc.include_self
    end
    if inc == nil then return true end
    need_bool(name, 'include_self', inc)
    return inc
  end
  local function sred(name, t, d, index, src, reduce, inc)
    need_tensor(name, 'input', t)
    check_index(name, index)
    need_tensor(name, 'src', src)
    local red = reduce_arg(name, reduce)
    inc = include_arg(name, inc)
    local pd = pdim(t, d, name)
    if src._dtype ~= t._dtype then
      runtime_error(fmt('%s: expected self.dtype to be equal to src.dtype (%s and %s)', name, dtype_of(t), dtype_of(src)))
    end
    if t._dtype == 7 and red == 3 then runtime_error(fmt("%s: reduce 'mean' is not implemented for bool", name)) end
    if index._ndim ~= t._ndim or src._ndim ~= t._ndim then
      runtime_error(fmt('%s: index %s, self %s and src %s must have the same number of dimensions', name,
        shape_str(index), shape_str(t), shape_str(src)))
    end
    for k = 1, t._ndim do
      local ik = tonumber(index._shape[k - 1])
      if ik > tonumber(src._shape[k - 1]) or (k ~= pd and ik > tonumber(t._shape[k - 1])) then
        runtime_error(fmt('%s: expected index %s to be no larger than self %s apart from dim %d and no larger than '
          .. 'src %s', name, shape_str(index), shape_str(t), pd, shape_str(src)))
      end
    end
    if t._devtype ~= index._devtype or t._devindex ~= index._devindex or t._devtype ~= src._devtype
      or t._devindex ~= src._devindex then
      runtime_error(fmt('%s: expected all tensors on the same device, got %s, %s and %s', name, dev_of(t), dev_of(index),
        dev_of(src)))
    end
    local out = sred_forward(name, t, pd, index, src, red, inc)
    if not is_float(t) then return out end
    return record(SRED_RULE, out, t, src, pd, index, red, inc)
  end
  --- t:scatter_reduce(dim, index, src, reduce [, include_self=true]) (include_self also
  --- {include_self=}): out[..., index[p], ...] reduced with src[p] for every position p of index
  --- ('sum', 'prod', 'mean', 'amax', 'amin'; include_self=false leaves t's values out at the
  --- positions index reaches); PyTorch 1.13's gradients; integer 'mean' rounds down
  function methods.scatter_reduce(t, d, index, src, reduce, inc)
    return sred('scatter_reduce', t, d, index, src, reduce, inc)
  end
  function methods.scatter_reduce_(t, d, index, src, reduce, inc)
    need_tensor('scatter_reduce_', 'input', t)
    return methods.copy_(t, sred('scatter_reduce_', t, d, index, src, reduce, inc))
  end
  local IDX_REDUCE = { prod = true, mean = true, amax = true, amin = true }
  --- t:index_reduce(dim, index, source, reduce [, include_self=true]): slice index[j] of t along dim
  --- reduced with slice j of source ('prod', 'mean', 'amax', 'amin'); index 1-d, 1-based
  local function index_reduce(name, t, d, index, source, reduce, inc)
    need_tensor(name, 'input', t)
    check_index(name, index)
    need_tensor(name, 'source', source)
    reduce_arg(name, reduce, IDX_REDUCE)
    local pd = pdim(t, d, name)
    if index._ndim > 1 then runtime_error(fmt('%s: index must be 1-d or 0-d, got %s', name, shape_str(index))) end
    local L = index._ndim == 0 and 1 or tonumber(index._shape[0])
    if source._ndim ~= t._ndim then
      runtime_error(fmt('%s: source %s must have as many dims as self %s', name, shape_str(source), shape_str(t)))
    end
    local ssh = size_of(source)
    for k = 1, t._ndim do
      local want = k == pd and L or tonumber(t._shape[k - 1])
      if ssh[k] ~= want then
        runtime_error(fmt('%s: source %s must have the shape of self %s with dim %d of size %d (the index length)', name,
          shape_str(source), shape_str(t), pd, L))
      end
    end
    local vshape = {}
    for k = 1, math.max(t._ndim, 1) do vshape[k] = k == pd and L or 1 end
    local full = methods.expand(methods.reshape(index, vshape), t._ndim == 0 and { 1 } or ssh)
    if t._ndim == 0 then full = methods.reshape(full, {}) end
    return sred(name, t, pd, full, source, reduce, inc)
  end
  function methods.index_reduce(t, d, index, source, reduce, inc)
    return index_reduce('index_reduce', t, d, index, source, reduce, inc)
  end
  function methods.index_reduce_(t, d, index, source, reduce, inc)
    need_tensor('index_reduce_', 'input', t)
    return methods.copy_(t, index_reduce('index_reduce_', t, d, index, source, reduce, inc))
  end
  fn_forms('scatter_reduce index_reduce')

  ---------------------------------------------------------------- histogram
  --- t:histogram(bins [, {range={lo, hi}, weight=, density=false}]) -> hist, bin_edges: bins a
  --- count (equal bins over range, or the data's smallest and largest value) or a 1-d tensor of
  --- increasing edges; each bin holds [edge_i, edge_i+1), the last one its right edge too; values
  --- outside and NaN are left out. float32 / float64 input; hist and edges in its dtype.
  function methods.histogram(t, bins, opts)
    need_tensor('histogram', 'input', t)
    opts = check_opts('histogram', opts, K_HIST)
    if t._dtype ~= 0 and t._dtype ~= 1 then
      runtime_error(fmt('histogram: expected a float32 or float64 input, got %s', dtype_of(t)))
    end
    local dt = dtype_of(t)
    local w, density = opts.weight, need_bool('histogram', 'density', opts.density)
    if w ~= nil then
      need_tensor('histogram', 'weight', w)
      if w._dtype ~= t._dtype then
        runtime_error(fmt('histogram: weight must have the dtype of input (%s), got %s', dt, dtype_of(w)))
      end
      if shape_str(w) ~= shape_str(t) then
        runtime_error(fmt('histogram: weight %s must have the shape of input %s', shape_str(w), shape_str(t)))
      end
    end
    local n = tonumber(t._numel)
    local edges
    if is_tensor(bins) then
      if opts.range ~= nil then value_error('histogram: range is taken with a number of bins only, not with edges') end
      if bins._ndim ~= 1 then
        runtime_error(fmt('histogram: bins tensor should have one dimension, got %d', bins._ndim))
      end
      if bins._dtype ~= t._dtype then
        runtime_error(fmt('histogram: bins tensor must have the dtype of input (%s), got %s', dt, dtype_of(bins)))
      end
      if tonumber(bins._numel) < 1 then runtime_error('histogram: bins tensor must have at least one edge') end
      edges = bins
    else
      local nb = int_arg('histogram', 'bins', bins)
      if nb <= 0 then runtime_error(fmt('histogram: bins must be > 0, got %d', nb)) end
      local lo, hi
      if opts.range ~= nil then
        local r = opts.range
        if not is_opts(r) or type(r[1]) ~= 'number' or type(r[2]) ~= 'number' then
          value_error(fmt('histogram: range must be a pair of numbers {min, max}, got %s', got(r)))
        end
        lo, hi = r[1], r[2]
      elseif n == 0 then
        lo, hi = 0, 1
      else -- (min and max propagate NaN, as the scan did)
        local xc = host(t)
        lo, hi = tonumber(methods.item(methods.min(xc))), tonumber(methods.item(methods.max(xc)))
      end
      if lo > hi then runtime_error(fmt('histogram: min should not exceed max, but got min %s max %s', lo, hi)) end
      if lo ~= lo or hi ~= hi or lo == -huge or hi == huge then
        runtime_error(fmt('histogram: range [%s, %s] is not finite', tostring(lo), tostring(hi)))
      end
      if lo == hi then lo, hi = lo - 0.5, hi + 0.5 end
      edges = M.linspace(lo, hi, nb + 1, { dtype = dt })
    end
    local he = host(edges, 'float64')
    local ne = tonumber(he._numel)
    local nb = ne - 1
    local ep = ffi.cast('const double*', he._data)
    local hist = M.zeros(nb > 0 and nb or 0, { dtype = dt })
    local hp = ffi.cast(dt == 'float32' and 'float*' or 'double*', hist._data)
    local first, last = ep[0], ep[nb]
    -- the counting in C (dpl_histogram_fill: the same bins, the same additions in order)
    local xin = host(t)
    if nb > 0 and C.dpl_histogram_fill(xin, w and host(w), he, hist) == 0 then n = 0 end
    local xp = n > 0 and ffi.cast('const double*', host(t, 'float64')._data)
    local wp = w and n > 0 and ffi.cast('const double*', host(w, 'float64')._data)
    for i = 0, n - 1 do
      local v = xp[i]
      if v >= first and v <= last and nb > 0 then
        local b
        if v == last then b = nb - 1 else
          local l, h = 0, nb -- the last edge <= v: ep[l] <= v < ep[h]
          while h - l > 1 do
            local m = floor((l + h) / 2)
            if ep[m] <= v then l = m else h = m end
          end
          b = l
        end
        hp[b] = hp[b] + (wp and wp[i] or 1)
      end
    end
    if density then
      local widths = methods.sub(methods.narrow(he, 1, 2, nb), methods.narrow(he, 1, 1, nb))
      hist = methods.div(hist, methods.mul(methods.sum(hist), methods.to(widths, dt)))
    end
    return back(hist, t), is_tensor(bins) and bins or back(edges, t)
  end
  fn_forms('histogram')

  ---------------------------------------------------------------- cov, corrcoef
  --- t:cov([{correction=1, fweights=, aweights=}]): the covariance matrix of the variables in
  --- t's rows (observations in its columns; a 1-d t is one variable), numpy's/PyTorch's weighting
  function methods.cov(t, opts)
    need_tensor('cov', 'input', t)
    opts = check_opts('cov', opts, K_COV)
    if t._ndim > 2 then
      runtime_error(fmt('cov: expected input to have two or fewer dimensions but got an input with %d dimensions',
        t._ndim))
    end
    if t._dtype == 7 then runtime_error('cov: bool dtype is not supported for input') end
    local correction = opts.correction == nil and 1 or opts.correction
    if type(correction) ~= 'number' or correction ~= floor(correction) then
      value_error(fmt('cov: correction must be an integer, got %s', type(correction) == 'number' and tostring(correction)
        or got(correction)))
    end
    local x = t._ndim < 2 and methods.reshape(t, { 1, -1 }) or t
    local nobs = tonumber(x._shape[1])
    local fw, aw = opts.fweights, opts.aweights
    local w
    for _, e in ipairs({ { 'fweights', fw }, { 'aweights', aw } }) do
      local k, v = e[1], e[2]
      if v ~= nil then
        need_tensor('cov', k, v)
        if v._ndim > 1 then
          runtime_error(fmt('cov: expected %s to have one or fewer dimensions but got %s with %d dimensions', k, k,
            v._ndim))
        end
        if k == 'fweights' and (is_float(v) or v._dtype == 7) then
          runtime_error(fmt('cov: expected fweights to have integral dtype but got fweights with %s dtype', dtype_of(v)))
        end
        if k == 'aweights' and not is_float(v) then
          runtime_error(fmt('cov: expected aweights to have floating point dtype but got aweights with %s dtype',
            dtype_of(v)))
        end
        if tonumber(v._numel) ~= nobs then
          runtime_error(fmt('cov: expected %s to have the same numel as there are observations in the input but got '
            .. '%d != %d', k, tonumber(v._numel), nobs))
        end
        if nobs > 0 and methods.item(methods.lt(methods.min(methods.detach(v)), 0)) then
          runtime_error(fmt('cov: %s cannot be negative', k))
        end
        w = w and methods.mul(w, v) or v
      end
    end
    local w_sum = w and methods.sum(w) or M.tensor(nobs, { dtype = 'int64', device = dev_of(t) })
    if w and methods.item(methods.eq(methods.detach(w_sum), 0)) then
      runtime_error("cov: weights sum to zero, can't be normalized")
    end
    local avg = methods.div(methods.sum(w and methods.mul(x, w) or x, 2), w_sum)
    local norm
    if w and correction ~= 0 then
      norm = methods.sub(w_sum, aw and methods.mul(methods.div(methods.sum(methods.mul(w, aw)), w_sum), correction)
        or correction)
    else
      norm = methods.sub(w_sum, correction)
    end
    if methods.item(methods.le(methods.detach(norm), 0)) then
      require('dpl.log').warn('cov(): degrees of freedom is <= 0')
      norm = methods.mul(norm, 0)
    end
    local xc = methods.sub(x, methods.unsqueeze(avg, 2))
    local c = methods.mm(xc, methods.t(w and methods.mul(xc, w) or xc))
    return methods.squeeze(methods.div(c, norm))
  end
  --- t:corrcoef(): Pearson's correlation coefficients of t's rows (cov / (std_i std_j), clipped to
  --- [-1, 1])
  function methods.corrcoef(t)
    need_tensor('corrcoef', 'input', t)
    local c = methods.cov(t)
    if c._ndim == 0 then return methods.div(c, c) end
    local sd = methods.sqrt(methods.diag(c))
    c = methods.div(c, methods.reshape(sd, { -1, 1 }))
    c = methods.div(c, methods.reshape(sd, { 1, -1 }))
    return methods.clamp(c, -1, 1)
  end
  fn_forms('cov corrcoef')

  ---------------------------------------------------------------- cartesian_prod, combinations
  --- dpl.cartesian_prod(a, b, ...) (1-d tensors of one dtype, or a list): [N, k] rows of every
  --- combination (the first tensor varies slowest); one tensor: itself
  function M.cartesian_prod(a, ...)
    local list = is_opts(a) and a or { a, ... }
    if #list == 0 then value_error('cartesian_prod: expected at least one tensor') end
    for i = 1, #list do
      local v = list[i]
      if not is_tensor(v) then value_error(fmt('cartesian_prod: tensors[%d] must be a tensor, got %s', i, got(v))) end
      if v._ndim ~= 1 then
        runtime_error(fmt('cartesian_prod: expects 1-d tensors, got tensors[%d] of shape %s', i, shape_str(v)))
      end
      if v._dtype ~= list[1]._dtype then
        runtime_error(fmt('cartesian_prod: expects all tensors to have the same dtype, got %s and %s',
          dtype_of(list[1]), dtype_of(v)))
      end
    end
    if #list == 1 then return list[1] end
    local grids = M.meshgrid(list, { indexing = 'ij' })
    for i = 1, #grids do grids[i] = methods.reshape(grids[i], { -1 }) end
    return M.stack(grids, 2)
  end
  --- dpl.combinations(t [, r=2 [, with_replacement=false]]) (also {r=, with_replacement=}): the
  --- r-element combinations of a 1-d t's elements, as rows [C, r] in lexicographic order of positions
  function M.combinations(t, r, wr)
    need_tensor('combinations', 'input', t)
    if is_opts(r) then
      options.check(r, K_COMB, 'combinations')
      r, wr = r.r, r.with_replacement
    end
    if t._ndim ~= 1 then runtime_error(fmt('combinations: expect a 1D vector, but got shape %s', shape_str(t))) end
    r = r == nil and 2 or int_arg('combinations', 'r', r)
    if r < 0 then runtime_error(fmt('combinations: expect a non-negative number, but got %d', r)) end
    need_bool('combinations', 'with_replacement', wr)
    if r == 0 then return M.empty(0, { dtype = dtype_of(t), device = dev_of(t) }) end
    local n = tonumber(t._shape[0])
    local idx, cur = {}, {}
    local function rec(k, from)
      if k > r then
        for j = 1, r do idx[#idx + 1] = cur[j] end
        return
      end
      for v = from, n do
        cur[k] = v
        rec(k + 1, wr and v or v + 1)
      end
    end
    rec(1, 1)
    local count = #idx / r
    if count == 0 then return M.empty({ 0, r }, { dtype = dtype_of(t), device = dev_of(t) }) end
    local it = M.tensor(idx, { dtype = 'int64', device = dev_of(t) })
    return methods.reshape(methods.index_select(t, 1, it), { count, r })
  end

  ---------------------------------------------------------------- trapezoid
  local function trap_args(name, y, x, opts, keys)
    need_tensor(name, 'y', y)
    if is_opts(x) and opts == nil then x, opts = nil, x end
    opts = check_opts(name, opts, keys)
    if x ~= nil then
      need_tensor(name, 'x', x)
      if opts.dx ~= nil then value_error(name .. ': give either x or dx, not both') end
    end
    local dx = opts.dx
    if dx ~= nil and type(dx) ~= 'number' then value_error(fmt('%s: dx must be a number, got %s', name, got(dx))) end
    local pd = pdim(y, opts.dim == nil and -1 or opts.dim, name)
    if y._ndim == 0 then runtime_error(fmt('%s: y must have at least one dim', name)) end
    if x == nil and y._dtype == 7 then
      runtime_error(fmt('%s: received a bool input for `y`, but bool is not supported', name))
    end
    return x, dx or 1, pd
  end
  -- the differences of x along pd, shaped to broadcast against y
  local function spacing(name, y, x, pd)
    local n = tonumber(y._shape[pd - 1])
    if x._ndim == 1 then
      if tonumber(x._shape[0]) ~= n then
        runtime_error(fmt('%s: there must be one `x` value for each sample point (%d values for %d points)', name,
          tonumber(x._shape[0]), n))
      end
      local s = {}
      for k = 1, y._ndim do s[k] = k == pd and n or 1 end
      x = methods.reshape(x, s)
    elseif x._ndim ~= y._ndim then
      runtime_error(fmt('%s: x %s must be 1-d or have the dims of y %s', name, shape_str(x), shape_str(y)))
    end
    local m = tonumber(x._shape[pd - 1])
    return methods.sub(methods.narrow(x, pd, 2, m - 1), methods.narrow(x, pd, 1, m - 1))
  end
  local function except_dim(y, pd)
    local s = size_of(y)
    table.remove(s, pd)
    return M.zeros(s, { dtype = dtype_of(y), device = dev_of(y) })
  end
  --- dpl.trapezoid(y [, x] [, {dx=1, dim=-1}]) (dpl.trapz too): the trapezoidal rule along dim,
  --- with sample points x (1-d, or y's dims) or a constant spacing dx
  function M.trapezoid(y, x, opts)
    local dx, pd
    x, dx, pd = trap_args('trapezoid', y, x, opts, K_TRAP)
    local n = tonumber(y._shape[pd - 1])
    if n == 0 then return except_dim(y, pd) end
    if x then
      local d = spacing('trapezoid', y, x, pd)
      local s = methods.add(methods.narrow(y, pd, 2, n - 1), methods.narrow(y, pd, 1, n - 1))
      return methods.div(methods.sum(methods.mul(d, s), pd), 2)
    end
    local ends = methods.add(methods.select(y, pd, 1), methods.select(y, pd, n))
    return methods.mul(methods.sub(methods.sum(y, pd), methods.mul(ends, 0.5)), dx)
  end
  M.trapz = M.trapezoid
  --- dpl.cumulative_trapezoid(y [, x] [, {dx=1, dim=-1}]): the running trapezoidal rule (one
  --- element fewer along dim)
  function M.cumulative_trapezoid(y, x, opts)
    local dx, pd
    x, dx, pd = trap_args('cumulative_trapezoid', y, x, opts, K_CTRAP)
    local n = tonumber(y._shape[pd - 1])
    if n == 0 then return methods.mul(y, 0.5) end
    local s = methods.add(methods.narrow(y, pd, 1, n - 1), methods.narrow(y, pd, 2, n - 1))
    if x then
      return methods.div(methods.cumsum(methods.mul(s, spacing('cumulative_trapezoid', y, x, pd)), pd), 2)
    end
    return methods.cumsum(methods.mul(s, dx / 2), pd)
  end

  ---------------------------------------------------------------- diag_embed, vander, addbmm
  --- t:diag_embed([offset=0 [, dim1=-2 [, dim2=-1]]]) (or {offset=, dim1=, dim2=}): t's last dim
  --- on the diagonal (offset above it, negative below) of the planes (dim1, dim2) of a new tensor
  --- with one dim more (dims of the result); zeros elsewhere
  function methods.diag_embed(t, offset, d1, d2)
    need_tensor('diag_embed', 'input', t)
    if is_opts(offset) then
      options.check(offset, K_DIAG, 'diag_embed')
      offset, d1, d2 = offset.offset, offset.dim1, offset.dim2
    end
    offset = offset == nil and 0 or int_arg('diag_embed', 'offset', offset)
    d1 = d1 == nil and -2 or int_arg('diag_embed', 'dim1', d1)
    d2 = d2 == nil and -1 or int_arg('diag_embed', 'dim2', d2)
    local nd = t._ndim + 1
    local p1 = cdim(t, d1, 'diag_embed', 1) + 1
    local p2 = cdim(t, d2, 'diag_embed', 1) + 1
    if p1 == p2 then runtime_error(fmt('diag_embed: diagonal dimensions cannot be identical %d, %d', d1, d2)) end
    local x = t._ndim == 0 and methods.reshape(t, { 1 }) or t
    local shape = size_of(x)
    local n = shape[#shape]
    local m = n + (offset < 0 and -offset or offset)
    local pos = {}
    for i = 0, n - 1 do
      local row, col = offset >= 0 and i or i - offset, offset >= 0 and i + offset or i
      pos[i + 1] = row * m + col + 1
    end
    local flat = {}
    for k = 1, #shape - 1 do flat[k] = shape[k] end
    flat[#flat + 1] = m * m
    local z = M.zeros(flat, { dtype = dtype_of(t), device = dev_of(t) })
    local out
    if n == 0 then out = z else
      out = methods.index_copy(z, #flat, M.tensor(pos, { dtype = 'int64', device = dev_of(t) }), x)
    end
    flat[#flat] = m
    flat[#flat + 1] = m
    out = methods.reshape(out, flat)
    return methods.movedim(out, { nd - 1, nd }, { p1, p2 })
  end
  fn_forms('diag_embed')

  --- dpl.vander(x [, N=#x [, increasing=false]]) (or {N=, increasing=}): the Vandermonde matrix
  --- [#x, N] of the 1-d x, columns x^(N-1) .. x^0 (increasing: x^0 .. x^(N-1)); integer and bool x
  --- give int64
  function M.vander(x, N, inc)
    need_tensor('vander', 'x', x)
    if is_opts(N) then
      options.check(N, K_VANDER, 'vander')
      N, inc = N.N, N.increasing
    end
    if x._ndim ~= 1 then runtime_error(fmt('vander: x must be a one-dimensional tensor, got shape %s', shape_str(x))) end
    local n0 = tonumber(x._shape[0])
    N = N == nil and n0 or int_arg('vander', 'N', N)
    if N < 0 then runtime_error(fmt('vander: N must be non-negative, got %d', N)) end
    need_bool('vander', 'increasing', inc)
    local dt = is_float(x) and dtype_of(x) or 'int64'
    local xv = dtype_of(x) == dt and x or methods.to(x, dt)
    local ones = M.ones({ n0, N > 0 and 1 or 0 }, { dtype = dt, device = dev_of(x) })
    local r = ones
    if N > 1 then
      local cols = methods.cumprod(methods.expand(methods.unsqueeze(xv, 2), { n0, N - 1 }), 2)
      r = M.cat({ ones, cols }, 2)
    end
    if not inc and N > 1 then r = methods.flip(r, 2) end
    return r
  end

  --- dpl.addbmm(input, batch1, batch2 [, {beta=1, alpha=1}]) / t:addbmm(b1, b2, opts): beta * input
  --- + alpha * (sum over b of batch1[b] @ batch2[b]), as one matrix product; addbmm_ in place
  local function addbmm(name, input, b1, b2, opts)
    need_tensor(name, 'input', input)
    need_tensor(name, 'batch1', b1)
    need_tensor(name, 'batch2', b2)
    opts = check_opts(name, opts, K_ADDBMM)
    if b1._ndim ~= 3 then runtime_error(fmt('%s: batch1 must be a 3D tensor, got %s', name, shape_str(b1))) end
    if b2._ndim ~= 3 then runtime_error(fmt('%s: batch2 must be a 3D tensor, got %s', name, shape_str(b2))) end
    local B, n, m = tonumber(b1._shape[0]), tonumber(b1._shape[1]), tonumber(b1._shape[2])
    local p = tonumber(b2._shape[2])
    if tonumber(b2._shape[0]) ~= B or tonumber(b2._shape[1]) ~= m then
      runtime_error(fmt('%s: batch1 %s and batch2 %s cannot be multiplied (batch sizes and inner dims must match)', name,
        shape_str(b1), shape_str(b2)))
    end
    local a = methods.reshape(methods.transpose(b1, 1, 2), { n, B * m })
    local b = methods.reshape(b2, { B * m, p })
    return M.addmm(input, a, b, { beta = opts.beta, alpha = opts.alpha })
  end
  function methods.addbmm(t, b1, b2, opts) return addbmm('addbmm', t, b1, b2, opts) end
  function methods.addbmm_(t, b1, b2, opts)
    local r = addbmm('addbmm_', t, b1, b2, opts)
    if shape_str(r) ~= shape_str(t) then
      runtime_error(fmt('addbmm_: self %s must have the shape of the result %s', shape_str(t), shape_str(r)))
    end
    return methods.copy_(t, r)
  end
  fn_forms('addbmm')
end
