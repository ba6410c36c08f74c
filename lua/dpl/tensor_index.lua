-- dpl.tensor_index: PyTorch's index/scatter writes on dpl.tensor's handles, in place and
-- out of place: scatter_ / scatter (a source or a value; reduce 'add' | 'multiply'),
-- index_fill_, index_copy_, index_put_ (a list of index tensors or masks: advanced
-- indexing over the leading dims, broadcast together, accumulate), masked_scatter_, put_
-- (flat indices), fill_diagonal_, and t:numpy()'s refusal. Indices are 1-based from Lua
-- (negative ones count from the end where PyTorch accepts them), handed to C as they are
-- (the *_base entries of src/tensor/dpl_tensor_scatter.c read them in place; index_put_'s
-- list is still made 0-based here). dpl.tensor installs this module
-- (require('dpl.tensor_index')(M, helpers)) before dpl.autograd wraps the methods; the
-- gradients are rules in dpl.autograd_rules.
local ffi = require 'ffi'
local bit = require 'bit'
local capi = require 'dpl.capi'
local C = capi.C
local errors = require 'dpl.errors'
local options = require 'dpl.options'

local type, tostring, tonumber = type, tostring, tonumber
local fmt = string.format
local lua_error = error

local SCATTER_KEYS, PUT_KEYS, WRAP_KEYS = options.keys('reduce'), options.keys('accumulate'), options.keys('wrap')
local REDUCE = { add = 1, multiply = 2 }
return function(M, H)
  local methods, is_tensor, dtype_names = M.methods, M.is_tensor, M.dtype_names
  local cdim, index0, call1, out1, error = H.cdim, H.index0, H.call1, H.out1, H.error
  local index_error_class = H.index_error_class
  -- the methods as they are before dpl.autograd wraps them: the ops below compute with
  -- these, and autograd records each op as one node (dpl.autograd_rules)
  local raw_view, raw_expand, raw_clone = methods.view, methods.expand, methods.clone
  local raw_nonzero, raw_select, raw_sub = methods.nonzero, methods.select, methods.sub

  local function got(v) return type(v) == 'cdata' and (is_tensor(v) and 'a tensor' or 'cdata') or type(v) end
  local function need_tensor(name, what, v)
    if not is_tensor(v) then error(fmt('%s: %s must be a tensor, got %s', name, what, got(v))) end
  end
  -- tensors in GPU memory: "<op>: not implemented on cuda", before any work on them (and
  -- a freed tensor, whose zeroed handle would look 0-d)
  local function host(name, t, what)
    if t._storage == nil then lua_error(errors.RuntimeError(fmt('%s: %s was freed with :free()', name, what)), 0) end
    if bit.band(t._flags, 2) ~= 0 then
      lua_error(errors.NotImplementedError(fmt('%s: not implemented on cuda (%s is on cuda:%d; move it with :to("cpu"))',
        name, what, t._devindex)), 0)
    end
  end
  -- a live tensor on any device (the ops that run on cuda: C checks the devices agree)
  local function live(name, t, what)
    if t._storage == nil then lua_error(errors.RuntimeError(fmt('%s: %s was freed with :free()', name, what)), 0) end
  end
  -- an argument of the op on self t: in GPU memory only beside a t there
  local function arg_of(name, t, x, what)
    if bit.band(t._flags, 2) ~= 0 then live(name, x, what) else host(name, x, what) end
  end
  -- a failure reported by C, named after the Lua op (C names the in-place form); flat put_
  -- positions said 1-based as dpl.capi says the others
  local function cfail(st, name, cname)
    local msg = capi.last_error()
    msg = msg:gsub('index (%-?%d+) is out of range for self with (%d+) elements %(expected 0%.%.%-?%d+, 0%-based%)',
      function(v, n) return fmt('index %d is out of range for self with %s elements (expected 1..%s)', v + 1, n, n) end)
    if name ~= cname and msg:sub(1, #cname + 1) == cname .. ':' then msg = name .. msg:sub(#cname + 1) end
    lua_error((st == -4 and errors.NotImplementedError or index_error_class(msg, st))(msg), 0)
  end
  local function free(...)
    for i = 1, select('#', ...) do
      local t = select(i, ...)
      if t ~= nil then C.dpl_tensor_free_data(t) end
    end
  end

  -- a scalar argument: a number, a boolean or a 0-d (one-element) tensor -> a number
  local function scalar_of(name, what, v)
    if is_tensor(v) then
      live(name, v, what)
      if v._ndim ~= 0 then
        error(fmt('%s: %s must be a number or a 0-d tensor, got a tensor with %d dims', name, what, v._ndim))
      end
      v = v:item()
    end
    if type(v) == 'boolean' then return v and 1 or 0 end
    if type(v) ~= 'number' then error(fmt('%s: %s must be a number, got %s', name, what, got(v))) end
    return v
  end
  -- PyTorch refuses a value its dtype cannot hold ("value cannot be converted to type uint8_t
  -- without overflow"): dpl.tensor's shared check (a fraction, or a value from a floating tensor:
  -- float_src, is a float to PyTorch: uint8 takes 0..255 then, no wrapping)
  local check_value = M._check_scalar
  local function checked_dtype(dt) return dt ~= 1 and dt ~= 7 end -- (float64 and bool take any number)
  -- a 0-d tensor of like's dtype and device holding v (exact for int64 beyond 2^53)
  local function value_tensor(v, like)
    local r = call1(C.dpl_tensor_empty, like._dtype, 0, nil, like._devtype, like._devindex, out1)
    local st
    if like._dtype == 5 and v == math.floor(v) and (v > 2 ^ 53 or v < -2 ^ 53) then st = C.dpl_tensor_fill_i64_(r, v)
    else st = C.dpl_tensor_fill_(r, v) end
    if st ~= 0 then cfail(st, 'fill_', 'fill_') end
    return r
  end

  -- an index argument (a tensor, a table or a number) as an integer tensor of 1-based indices,
  -- handed to C as it is (the *_base entries read it in place; negative ones count from the end
  -- where the op takes them); int64 or int32 (PyTorch's index is int64; int32 is accepted as
  -- elsewhere in dplhost).
  local function on(like) return like._devtype == 0 and 'cpu' or ('cuda:' .. like._devindex) end
  -- a table (or a number) of indices as a tensor on like's device: int64 when integral (a
  -- fraction makes it float32, refused by the dtype check; {} is an empty int64 tensor)
  local function as_tensor(x, like)
    if type(x) == 'table' and next(x) == nil then return M.tensor(x, { dtype = 'int64', device = on(like) }) end
    return M.tensor(x, { device = on(like) })
  end
  local function idx1(name, idx, like)
    if type(idx) == 'table' or type(idx) == 'number' then idx = as_tensor(idx, like) end
    if not is_tensor(idx) then error(fmt('%s: index must be a tensor (or a table) of integers, got %s', name, got(idx))) end
    arg_of(name, like, idx, 'index')
    local dt = idx._dtype
    if dt ~= 4 and dt ~= 5 then
      error(fmt('%s: expected an integer index tensor (int64 or int32, 1-based), got %s', name, dtype_names[dt]))
    end
    return idx
  end

  -- a 0-d tensor takes dim 1 or -1 (PyTorch's 0 / -1) as the 1-d tensor of its one element:
  -- the 0-based dim and the tensor to write through
  local function dim_of(name, t, d)
    if t._ndim == 0 and (d == 1 or d == -1) then return 0, raw_view(t, 1) end
    return cdim(t, d, name), t
  end
  local function ones_view(t, n) -- a 0-d tensor as n dims of size 1
    local s = {}
    for i = 1, n do s[i] = 1 end
    return raw_view(t, s)
  end

  ---------------------------------------------------------------- scatter_
  local function reduce_of(name, r)
    if type(r) == 'table' then
      options.check(r, SCATTER_KEYS, name)
      r = r.reduce
    end
    if r == nil then return 0 end
    local id = REDUCE[r]
    if not id then
      error(fmt("%s: reduce must be 'add' or 'multiply', got %s", name, type(r) == 'string' and ("'" .. r .. "'") or got(r)))
    end
    return id
  end
  M._scatter_reduce_of = reduce_of

  -- writes t (in place): t[..., index[p], ...] (op)= src[p]
  local function scatter_into(name, t, d, idx, src, reduce)
    local red = reduce_of(name, reduce)
    live(name, t, 'self')
    local cd, tv = dim_of(name, t, d)
    local i1 = idx1(name, idx, t)
    local iv = i1
    if tv ~= t and i1._ndim == 0 then iv = raw_view(i1, 1) end
    local s
    if is_tensor(src) then
      arg_of(name, t, src, 'src')
      s = src
      -- a 0-d src is a source of one element (PyTorch's), not a value for every position
      if src._ndim == 0 and iv._ndim > 0 then s = ones_view(src, iv._ndim) end
    else
      if src == nil then error(fmt('%s: expected a src tensor or a value (a number) after the index, got nil', name)) end
      local v = scalar_of(name, 'value', src)
      check_value(name, v, t._dtype)
      s = value_tensor(v, t)
    end
    local st = C.dpl_scatter_base(tv, cd, iv, s, red, 1)
    if st ~= 0 then cfail(st, name, 'scatter_') end
    return t
  end
  --- t:scatter_(dim, index, src [, reduce]) / t:scatter_(dim, index, value [, reduce]):
  --- t[..., index[p], ...] = src[p] along dim (1-based index, of t's ndim); reduce 'add' or
  --- 'multiply' (also {reduce = ...}) adds or multiplies instead of storing.
  function methods.scatter_(t, d, idx, src, reduce)
    need_tensor('scatter_', 'self', t)
    return scatter_into('scatter_', t, d, idx, src, reduce)
  end
  function methods.scatter(t, d, idx, src, reduce)
    need_tensor('scatter', 'self', t)
    live('scatter', t, 'self')
    return scatter_into('scatter', raw_clone(t), d, idx, src, reduce)
  end

  ---------------------------------------------------------------- index_fill_, index_copy_
  local function index_fill_into(name, t, d, idx, value)
    live(name, t, 'self')
    local cd, tv = dim_of(name, t, d)
    local i1 = idx1(name, idx, t)
    local vt
    if is_tensor(value) then
      arg_of(name, t, value, 'value')
      if value._ndim ~= 0 then
        error(fmt('%s: value must be a number or a 0-d tensor, got a tensor with %d dims', name, value._ndim))
      end
      if checked_dtype(t._dtype) then -- (its value converted to self's dtype, as PyTorch checks it)
        local v = value:item()
        if type(v) == 'boolean' then v = v and 1 or 0 end
        local ok, e = pcall(check_value, name, v, t._dtype, value._dtype <= 3)
        if not ok then lua_error(e, 0) end
      end
      vt = value
    else
      local v = scalar_of(name, 'value', value)
      check_value(name, v, t._dtype)
      vt = value_tensor(v, t)
    end
    local st = C.dpl_index_fill_base(tv, cd, i1, vt, 1)
    if st ~= 0 then cfail(st, name, 'index_fill_') end
    return t
  end
  --- t:index_fill_(dim, index, value): the slices index[j] (1-based, 1-d or 0-d) of t along dim
  --- set to value (a number or a 0-d tensor).
  function methods.index_fill_(t, d, idx, value)
    need_tensor('index_fill_', 'self', t)
    return index_fill_into('index_fill_', t, d, idx, value)
  end
  function methods.index_fill(t, d, idx, value)
    need_tensor('index_fill', 'self', t)
    live('index_fill', t, 'self')
    return index_fill_into('index_fill', raw_clone(t), d, idx, value)
  end

  local function index_copy_into(name, t, d, idx, src)
    need_tensor(name, 'source', src)
    live(name, t, 'self')
    arg_of(name, t, src, 'source')
    local cd, tv = dim_of(name, t, d)
    local i1 = idx1(name, idx, t)
    local s = src
    if tv ~= t and s._ndim == 0 then s = raw_view(s, 1) end
    local st = C.dpl_index_copy_base(tv, cd, i1, s, 1)
    if st ~= 0 then cfail(st, name, 'index_copy_') end
    return t
  end
  --- t:index_copy_(dim, index, source): slice index[j] (1-based) of t along dim = slice j of source.
  function methods.index_copy_(t, d, idx, src)
    need_tensor('index_copy_', 'self', t)
    return index_copy_into('index_copy_', t, d, idx, src)
  end
  function methods.index_copy(t, d, idx, src)
    need_tensor('index_copy', 'self', t)
    live('index_copy', t, 'self')
    return index_copy_into('index_copy', raw_clone(t), d, idx, src)
  end

  ---------------------------------------------------------------- index_put_
  local function shape_str(s) return '[' .. table.concat(s, ', ') .. ']' end
  local function size_of(t)
    local r = {}
    for i = 1, t._ndim do r[i] = tonumber(t._shape[i - 1]) end
    return r
  end
  -- the broadcast shape of tensors (nil when they do not broadcast)
  local broadcast = M._broadcast_shape

  -- indices (a list of index tensors or masks, one per leading dim of t; a mask covers as
  -- many dims as it has) -> a C array of 0-based int64 tensors of one shape, their count,
  -- and the Lua list keeping them alive
  local function index_list(name, t, indices)
    if is_tensor(indices) then indices = { indices } end
    if type(indices) ~= 'table' then
      error(fmt('%s: indices must be a list of index tensors, got %s', name, got(indices)))
    end
    local n = #indices
    for k in pairs(indices) do
      if type(k) ~= 'number' or k < 1 or k > n or k ~= math.floor(k) then
        error(fmt('%s: indices must be a list (keys 1..n) of index tensors, got a table with key %s', name, tostring(k)))
      end
    end
    if n == 0 then error(fmt('%s: indices must be a non-empty list of index tensors', name)) end
    local list, pos = {}, 0 -- pos: the dims of t indexed so far
    for i = 1, n do
      local ix = indices[i]
      if type(ix) == 'table' or type(ix) == 'number' or type(ix) == 'boolean' then ix = as_tensor(ix, t) end
      if not is_tensor(ix) then
        error(fmt('%s: indices[%d] must be a tensor of indices (int64, int32) or a mask (bool, uint8), got %s', name, i,
          got(ix)))
      end
      arg_of(name, t, ix, 'an index')
      local dt = ix._dtype
      if dt == 7 or dt == 6 then -- a mask: the coordinates of its true elements
        local k = ix._ndim
        if k == 0 then
          lua_error(errors.NotImplementedError(fmt('%s: a 0-d mask (indices[%d]) is not implemented; index with a 1-d '
            .. 'mask or with integer indices', name, i)), 0)
        end
        if pos + k > t._ndim then
          error(fmt('%s: too many indices for a tensor of %d dims (got %d, counting a mask as its dims)', name, t._ndim,
            pos + k))
        end
        for j = 1, k do
          if ix._shape[j - 1] ~= t._shape[pos + j - 1] then
            local sub = {}
            for q = 1, k do sub[q] = tonumber(t._shape[pos + q - 1]) end
            error(fmt('%s: the mask indices[%d] of shape %s does not match the shape %s of the dims %d..%d of self %s',
              name, i, shape_str(size_of(ix)), shape_str(sub), pos + 1, pos + k, shape_str(size_of(t))))
          end
        end
        local nz = raw_nonzero(ix) -- [nnz, k], 1-based
        for j = 1, k do list[#list + 1] = raw_sub(raw_select(nz, 2, j), 1) end
        pos = pos + k
      elseif dt == 4 or dt == 5 then
        pos = pos + 1
        if pos > t._ndim then
          error(fmt('%s: too many indices for a tensor of %d dims (got %d)', name, t._ndim, pos))
        end
        local len = tonumber(t._shape[pos - 1])
        if bit.band(ix._flags, 2) ~= 0 and ix._numel > 0 then -- (index0 maps GPU indices without reading them)
          local mn = methods.min(ix):item()
          if mn < -len then
            error(fmt('%s: index %d is out of range for a dim of size %d (expected 1..%d, or -%d..-1 from the end)', name,
              mn, len, len, len))
          end
        end
        list[#list + 1] = index0(ix, name, len)
      else
        error(fmt('%s: indices[%d] must be an integer (int64, int32) or boolean (bool, uint8) tensor, got %s', name, i,
          dtype_names[dt]))
      end
    end
    local shape = broadcast(list)
    if not shape then
      local s = {}
      for i = 1, #list do s[i] = shape_str(size_of(list[i])) end
      error(fmt('%s: shape mismatch: the index tensors cannot be broadcast together (shapes %s)', name, table.concat(s, ', ')))
    end
    local arr = ffi.new('dpl_tensor*[?]', #list)
    local keep = {}
    for i = 1, #list do
      local e = raw_expand(list[i], shape)
      keep[i] = e
      arr[i - 1] = e
    end
    return arr, #list, keep, list
  end

  local function accumulate_of(name, acc)
    if type(acc) == 'table' then
      options.check(acc, PUT_KEYS, name)
      acc = acc.accumulate
    end
    if acc == nil then return 0 end
    if type(acc) ~= 'boolean' then error(fmt('%s: accumulate must be true or false, got %s', name, got(acc))) end
    return acc and 1 or 0
  end
  M._accumulate_of = accumulate_of

  local function index_put_into(name, t, indices, values, acc)
    local a = accumulate_of(name, acc)
    live(name, t, 'self')
    local arr, n, keep, list = index_list(name, t, indices)
    local v = values
    if is_tensor(values) then arg_of(name, t, values, 'values')
    else
      local x = scalar_of(name, 'values', values)
      check_value(name, x, t._dtype)
      v = value_tensor(x, t)
    end
    local st = C.dpl_index_put_(t, n, arr, v, a)
    free(unpack(keep))
    free(unpack(list))
    if st ~= 0 then cfail(st, name, 'index_put_') end
    return t
  end
  --- t:index_put_(indices, values [, accumulate]): t[indices[1], indices[2], ...] = values, as
  --- PyTorch's advanced indexing: indices is a list of 1-based index tensors (one per leading
  --- dim, broadcast together) or bool masks; values (a tensor, or a number) broadcast to the
  --- indexed shape; accumulate (true, or {accumulate = true}) adds, duplicates included.
  function methods.index_put_(t, indices, values, acc)
    need_tensor('index_put_', 'self', t)
    return index_put_into('index_put_', t, indices, values, acc)
  end
  function methods.index_put(t, indices, values, acc)
    need_tensor('index_put', 'self', t)
    live('index_put', t, 'self')
    return index_put_into('index_put', raw_clone(t), indices, values, acc)
  end
  --- (autograd) t[indices] read at the positions index_put_ writes: the gradient of its values.
  function M._index_get(t, indices)
    need_tensor('index_get', 'self', t)
    live('index_get', t, 'self')
    local arr, n, keep, list = index_list('index_get', t, indices)
    local st = C.dpl_index_get(t, n, arr, out1)
    if st ~= 0 then free(unpack(keep)) free(unpack(list)) cfail(st, 'index_get', 'index_get') end
    local r = M._wrap(out1)
    free(unpack(keep))
    free(unpack(list))
    return r
  end

  ---------------------------------------------------------------- masked_scatter_
  local function masked_scatter_into(name, t, mask, src)
    local st = C.dpl_masked_scatter_(t, mask, src)
    if st ~= 0 then cfail(st, name, 'masked_scatter_') end
    return t
  end
  local function masked_args(name, t, mask, src)
    need_tensor(name, 'self', t)
    need_tensor(name, 'mask', mask)
    need_tensor(name, 'source', src)
    live(name, t, 'self') -- (on cuda: the device compaction finds the mask's positions)
    arg_of(name, t, mask, 'mask')
    arg_of(name, t, src, 'source')
    if mask._dtype ~= 7 and mask._dtype ~= 6 then
      error(fmt('%s: mask must be a bool tensor, got %s', name, dtype_names[mask._dtype]))
    end
  end
  --- t:masked_scatter_(mask, source): the elements of t where mask (broadcast to t) is true,
  --- in row-major order, get source's first elements (source has at least as many).
  function methods.masked_scatter_(t, mask, src)
    masked_args('masked_scatter_', t, mask, src)
    return masked_scatter_into('masked_scatter_', t, mask, src)
  end
  --- t:masked_scatter(mask, source): t and mask broadcast together (PyTorch's out-of-place form).
  function methods.masked_scatter(t, mask, src)
    masked_args('masked_scatter', t, mask, src)
    local shape = broadcast({ t, mask })
    if not shape then
      error(fmt('masked_scatter: self of shape %s and mask of shape %s cannot be broadcast together',
        shape_str(size_of(t)), shape_str(size_of(mask))))
    end
    local same = #shape == t._ndim
    for k = 1, #shape do same = same and t._shape[k - 1] == shape[k] end
    return masked_scatter_into('masked_scatter', raw_clone(same and t or raw_expand(t, shape)), mask, src)
  end

  ---------------------------------------------------------------- put_
  -- put_'s flat 1-based indices (negative from the end) go to C as they are
  local function put_into(name, t, idx, src, acc)
    need_tensor(name, 'source', src)
    local a = accumulate_of(name, acc)
    live(name, t, 'self')
    arg_of(name, t, src, 'source')
    local st = C.dpl_put_base(t, idx1(name, idx, t), src, a, 1)
    if st ~= 0 then cfail(st, name, 'put_') end
    return t
  end
  --- t:put_(index, source [, accumulate]): t viewed as 1-d in row-major order gets
  --- t[index[i]] = source[i] (1-based flat indices, negative from the end; index and source of
  --- one numel); accumulate (true, or {accumulate = true}) adds, duplicates included.
  function methods.put_(t, idx, src, acc)
    need_tensor('put_', 'self', t)
    return put_into('put_', t, idx, src, acc)
  end
  function methods.put(t, idx, src, acc)
    need_tensor('put', 'self', t)
    live('put', t, 'self')
    return put_into('put', raw_clone(t), idx, src, acc)
  end
  --- (autograd) t's elements at flat 1-based indices, shaped as the index (the gradient of put_'s source).
  function M._take_flat(t, idx)
    local i1 = idx1('put_backward', idx, t)
    local flat = t._ndim == 1 and t or methods.reshape(t, -1)
    local st = C.dpl_index_select_base(flat, 0, methods.reshape(i1, -1), 1, out1)
    if st ~= 0 then cfail(st, 'put_backward', 'index_select') end
    return raw_view(M._wrap(out1), size_of(i1))
  end

  ---------------------------------------------------------------- fill_diagonal_
  --- t:fill_diagonal_(fill_value [, wrap]): t[i, i, ...] = fill_value (t 2-d, or with all dims of
  --- one size); wrap (true, or {wrap = true}): a tall matrix's diagonal starts again every
  --- ncols + 1 rows.
  function methods.fill_diagonal_(t, value, wrap)
    local name = 'fill_diagonal_'
    need_tensor(name, 'self', t)
    if type(wrap) == 'table' then
      options.check(wrap, WRAP_KEYS, name)
      wrap = wrap.wrap
    end
    if wrap ~= nil and type(wrap) ~= 'boolean' then error(fmt('%s: wrap must be true or false, got %s', name, got(wrap))) end
    live(name, t, 'self')
    local v = scalar_of(name, 'fill_value', value)
    check_value(name, v, t._dtype)
    local st = C.dpl_fill_diagonal_(t, value_tensor(v, t), wrap and 1 or 0)
    if st ~= 0 then cfail(st, name, name) end
    return t
  end

  ---------------------------------------------------------------- numpy
  --- t:numpy(): there is no NumPy in Lua; the error says what to use instead.
  function methods.numpy()
    lua_error(errors.NotImplementedError("tensor:numpy() is not available in dplhost: there is no NumPy in Lua. Use "
      .. "t:totable() (nested Lua tables of numbers, as tolist()), t:item() (one number), or, for the raw memory of a "
      .. "CPU tensor, t:contiguous():data_ptr() (an FFI pointer: ffi.cast('float*', p) for float32, t:numel() "
      .. "elements)"), 2)
  end

  -- the module's functions (dpl.scatter(t, ...)): the out-of-place ones are the methods
  -- (dpl.autograd wraps both at once); the in-place ones and scatter_add call the method
  -- of the moment
  for _, k in ipairs({ 'scatter', 'index_fill', 'index_copy', 'index_put', 'masked_scatter', 'put' }) do
    M[k] = methods[k]
  end
  for _, k in ipairs({ 'scatter_', 'index_fill_', 'index_copy_', 'index_put_', 'masked_scatter_', 'put_',
    'fill_diagonal_', 'scatter_add', 'scatter_add_' }) do
    M[k] = function(t, ...)
      need_tensor(k, 'self', t)
      return methods[k](t, ...)
    end
  end
end
