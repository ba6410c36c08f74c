-- dpl.tensor_subscript: the table, tensor and cdata keys of dpl.tensor's __index and
-- __newindex (M._subscript_get / M._subscript_set).
local type, tonumber, tostring, next, pairs = type, tonumber, tostring, next, pairs
local floor = math.floor
local fmt = string.format

return function(M, H)
  local methods, is_tensor, dtype_names = M.methods, M.is_tensor, M.dtype_names
  local error, got, get_item = H.error, H.got, H.get_item

  -- t[{...}] (Torch7's form: one entry per leading dim, a number selects, {} takes the dim
  -- whole, {s, e} narrows to s..e inclusive, {s} to s alone; negatives count from the end),
  -- t[mask] (bool/uint8 over t's shape or its leading dims) and t[idx] (an int tensor of
  -- 1-based positions along dim 1). Views for the table form, copies for masks and indices,
  -- as PyTorch's basic and advanced indexing; every step is a recorded op (select, narrow,
  -- index_select). t[k] = v writes through the same forms (fill_/copy_ of the view, index_put_).
  local unpack = unpack
  local function shp_str(x)
    local p = {}
    for i = 0, x._ndim - 1 do p[#p + 1] = tostring(tonumber(x._shape[i])) end
    return '[' .. table.concat(p, ', ') .. ']'
  end
  local function bad_key(t, k, why)
    error(fmt('index: %s; t[{...}] takes one entry per dim: a number (select), {} (all), {s, e} (s..e) or {s} '
      .. '(for a %d-d tensor)', why, t._ndim), 4)
  end
  local function range_bound(t, d, v, what)
    local size = tonumber(t._shape[d - 1])
    if type(v) ~= 'number' or v ~= floor(v) then bad_key(t, nil, fmt('the %s of the range for dim %d must be an integer, got %s', what, d, type(v) == 'number' and tostring(v) or type(v))) end
    local i = v < 0 and size + v + 1 or v
    if i < 1 or i > size then
      error(fmt('index: %s %d of the range for dim %d is out of range for size %d (expected 1..%d or -%d..-1)', what, v, d, size, size, size), 4)
    end
    return i
  end
  local function table_view(t, key)
    local m = methods
    local n = #key
    for k in pairs(key) do
      if type(k) ~= 'number' or k < 1 or k > n or k ~= floor(k) then bad_key(t, key, fmt('the key has a field %s', tostring(k))) end
    end
    if n > t._ndim then bad_key(t, key, fmt('%d entries for a %d-d tensor', n, t._ndim)) end
    local r, d = t, 1 -- d: the dim of r that entry i reaches (selected dims are gone)
    for i = 1, n do
      local e = key[i]
      if type(e) == 'number' then
        local size = tonumber(t._shape[i - 1])
        if e ~= floor(e) or e < -size or e > size or e == 0 then
          error(fmt('index: %s is out of range for dim %d of size %d (expected 1..%d or -%d..-1)', tostring(e), i, size, size, size), 3)
        end
        r = m.select(r, d, e)
      elseif type(e) == 'table' and not is_tensor(e) then
        if #e > 2 or (next(e) ~= nil and e[1] == nil) then bad_key(t, key, fmt('entry %d is a table that is not {}, {s} or {s, e}', i)) end
        if e[1] ~= nil then
          local size = tonumber(t._shape[i - 1])
          local a = range_bound(t, i, e[1], 'start')
          local b = e[2] == nil and a or range_bound(t, i, e[2], 'end')
          if b < a - 1 then b = a - 1 end -- an empty range (PyTorch's t[3:1])
          if not (a == 1 and b == size) then r = m.narrow(r, d, a, b - a + 1) end
        end
        d = d + 1
      else
        bad_key(t, key, fmt('entry %d is a %s', i, is_tensor(e) and 'tensor (index with t[idx] or index_select)' or type(e)))
      end
    end
    return r
  end
  local int_index = { [4] = true, [5] = true }
  local function mask_or_index(t, k)
    if k._dtype == 7 or k._dtype == 6 then -- a mask over t's leading dims
      local nd = k._ndim
      if nd == 0 or nd > t._ndim then
        error(fmt('index: a mask of shape %s cannot index a tensor of shape %s (it covers 1..%d leading dims)',
          shp_str(k), shp_str(t), t._ndim), 3)
      end
      for i = 0, nd - 1 do
        if k._shape[i] ~= t._shape[i] then
          error(fmt('index: the shape of the mask %s does not match the shape of the indexed tensor %s at dim %d',
            shp_str(k), shp_str(t), i + 1), 3)
        end
      end
      local m = methods
      local rest = {}
      for i = nd, t._ndim - 1 do rest[#rest + 1] = tonumber(t._shape[i]) end
      local flat = m.reshape(t, -1, unpack(rest))
      local pos = m.view(m.nonzero(m.reshape(k, -1)), -1)
      return m.index_select(flat, 1, pos)
    end
    if not int_index[k._dtype] then
      error(fmt('index: a tensor used as an index must be int64, int32 (positions) or bool, uint8 (a mask), got %s',
        dtype_names[k._dtype]), 3)
    end
    if t._ndim == 0 then error('index: a 0-d tensor cannot be indexed (use :item())', 3) end
    local m = methods
    local r = m.index_select(t, 1, m.reshape(k, -1))
    local shape = {}
    for i = 0, k._ndim - 1 do shape[#shape + 1] = tonumber(k._shape[i]) end
    for i = 1, t._ndim - 1 do shape[#shape + 1] = tonumber(t._shape[i]) end
    return m.reshape(r, unpack(shape))
  end
  function M._subscript_get(t, k)
    if is_tensor(k) then return mask_or_index(t, k) end
    if type(k) == 'cdata' then -- an int64 number (1LL) is a position; other cdata is no key
      if tonumber(k) == nil then error(fmt('index: expected a number, a table or a tensor as key, got %s', got(k)), 3) end
      return get_item(t, tonumber(k))
    end
    if t._ndim == 0 then error('index: a 0-d tensor cannot be indexed (use :item())', 3) end
    return table_view(t, k)
  end
  function M._subscript_set(t, k, v)
    local m = methods
    if type(k) == 'cdata' and not is_tensor(k) then k = { M._subscript_get(t, k) and tonumber(k) } end
    if is_tensor(k) then
      if not int_index[k._dtype] then mask_or_index(t, k) end -- (a mask's shape checked, or the dtype's error)
      if type(v) == 'boolean' then v = v and 1 or 0 end
      if type(v) ~= 'number' and not is_tensor(v) then
        error(fmt('index: t[idx] = v takes a number or a tensor, got %s', got(v)), 3)
      end
      m.index_put_(t, { k }, v)
      return
    end
    local r = t._ndim == 0 and error('index: a 0-d tensor cannot be indexed (use t:fill_(v))', 3) or table_view(t, k)
    if is_tensor(v) then m.copy_(r, v)
    else
      if type(v) == 'number' then M._check_scalar('index', v, t._dtype) end -- (named as t[k] = v)
      m.fill_(r, v)
    end
  end
end
