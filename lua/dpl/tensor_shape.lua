-- dpl.tensor_shape: PyTorch's shape and scan methods of tensors: cumsum, cumprod, cummax,
-- cummin; flip, fliplr, flipud, roll, rot90; repeat (spelt t['repeat'](t, ...): `repeat`
-- is a Lua keyword) and tile, repeat_interleave; chunk, split, unbind (lists of views);
-- tril, triu (and in place), diag, diagonal (a view), trace; movedim/moveaxis,
-- swapaxes/swapdims; unfold (a view); sum_to_size; new_zeros, new_ones, new_full,
-- new_empty, new_tensor; type_as; take. dpl.tensor installs them
-- (require('dpl.tensor_shape')(M, helpers)) before dpl.autograd wraps them: the ones
-- with a kernel of their own (dpl_tensor_scan.c: scans, flip, roll, tril/triu) or a view
-- geometry of their own (diagonal, unfold) have backward rules in dpl.autograd_rules,
-- the others are made of ops that are recorded already. Dims and indices are 1-based
-- (negative dims count from the end); C is 0-based.
local ffi = require 'ffi'
local C = require('dpl.capi').C
local errors = require 'dpl.errors'
local options = require 'dpl.options'

local type, tostring, tonumber = type, tostring, tonumber
local floor, ceil, max, min, abs = math.floor, math.ceil, math.max, math.min, math.abs
local fmt = string.format
local lua_error = error
local ENOMEM = -2
local SCAN_SUM, SCAN_PROD, SCAN_MAX, SCAN_MIN = 0, 1, 2, 3

local CUM_KEYS = options.keys('dtype')
local NEW_KEYS = options.keys('dtype', 'device', 'requires_grad', 'layout', 'pin_memory')
local RI_KEYS = options.keys('output_size')

return function(M, H)
  local methods = M.methods
  local view1, fail, cdim, parse_sizes = H.view1, H.fail, H.cdim, H.parse_sizes
  local need_tensor, error = H.need_tensor, H.error
  local out1, out2 = H.out1, H.out2
  local wrap, is_tensor, dtype_id, dtype_names = M._wrap, M.is_tensor, M.dtype_id, M.dtype_names
  local shp = ffi.new('int64_t[9]')
  local strd = ffi.new('int64_t[9]')
  local dims = ffi.new('int32_t[8]')
  local shifts = ffi.new('int64_t[8]')

  -- the raw ops (dpl.autograd wraps the methods later): take is one recorded op (its rule
  -- saves the input, as PyTorch's), so it computes with these
  local raw_index_select, raw_reshape = methods.index_select, methods.reshape

  local function not_implemented(msg) lua_error(errors.NotImplementedError(msg), 0) end

  -- calls C fn(...) that fills out1 (one GC-and-retry on ENOMEM); a failure raises with the
  -- status's class (a device tensor: NotImplementedError "<op>: not implemented on cuda")
  local function c1(fn, ...)
    local st = fn(...)
    if st == ENOMEM then collectgarbage() st = fn(...) end
    if st ~= 0 then fail(2, st) end
    return wrap(out1)
  end
  local function cdo(st) if st ~= 0 then fail(2, st) end end

  local function like(t)
    return { dtype = dtype_names[t._dtype], device = t._devtype == 0 and 'cpu' or ('cuda:' .. t._devindex) }
  end
  local function size_of(t)
    local r = {}
    for i = 1, t._ndim do r[i] = tonumber(t._shape[i - 1]) end
    return r
  end
  local function is_int(v) return type(v) == 'number' and v == floor(v) and v > -2 ^ 53 and v < 2 ^ 53 end
  local function need_int(name, what, v)
    if not is_int(v) then error(fmt('%s: %s must be an integer, got %s', name, what, type(v) == 'number' and tostring(v) or type(v))) end
    return v
  end
  local function list_str(l)
    local p = {}
    for i = 1, #l do p[i] = tostring(l[i]) end
    return '[' .. table.concat(p, ', ') .. ']'
  end
  local function shape_str(t) return list_str(size_of(t)) end

  -- a dim of t, 0-based; a 0-d tensor takes dim 1 or -1 (PyTorch's 0 / -1) as one dim of size 1
  local function sdim(t, d, name)
    if t._ndim == 0 then
      if d == 1 or d == -1 then return 0 end
      if is_int(d) then error(fmt('%s: dim %d out of range (expected 1 or -1 for a 0-d tensor)', name, d)) end
    end
    return cdim(t, d, name)
  end
  local function need_dims(name, t, n)
    if t._ndim < n then
      error(fmt('%s: expected a tensor with at least %d dim%s, got a %d-d tensor', name, n, n > 1 and 's' or '', t._ndim))
    end
  end
  -- a list argument: a table, or one value (nil: an empty list)
  local function as_list(v) if type(v) == 'table' then return v elseif v == nil then return {} end return { v } end
  -- (a, b, ...) or ({a, b, ...}) -> a list (fixed arguments, no vararg read: see parse_sizes
  -- in dpl.tensor on Debian's LuaJIT recording varargs)
  local function args_list(name, a, b, c, d, e, f, g, h, i)
    if type(a) == 'table' then
      if b ~= nil then error(name .. ': expected a list or several integers, not both') end
      return a
    end
    if a == nil then return {} end
    if i ~= nil then error(name .. ': at most 8 dims, got more than 8 arguments') end
    return { a, b, c, d, e, f, g, h }
  end

  ---------------------------------------------------------------- scans
  -- the dtype option of cumsum/cumprod: {dtype = ...} or a dtype (PyTorch's positional one)
  local function cum_dtype(name, opts)
    if opts == nil then return -1 end
    if type(opts) == 'string' then return dtype_id(opts, name) end
    options.check(opts, CUM_KEYS, name)
    if opts.dtype == nil then return -1 end
    return dtype_id(opts.dtype, name)
  end
  --- t:cumsum(dim [, {dtype=}]): running sums along dim (integers and bool count in int64
  --- unless a dtype is given; the input is converted to it first).
  function methods.cumsum(t, d, opts)
    need_tensor('cumsum', 'input', t)
    return c1(C.dpl_cumulative, SCAN_SUM, t, sdim(t, d, 'cumsum'), cum_dtype('cumsum', opts), 0, out1)
  end
  --- t:cumprod(dim [, {dtype=}]): running products along dim.
  function methods.cumprod(t, d, opts)
    need_tensor('cumprod', 'input', t)
    return c1(C.dpl_cumulative, SCAN_PROD, t, sdim(t, d, 'cumprod'), cum_dtype('cumprod', opts), 0, out1)
  end
  -- for the backward rules: cumsum from the end of dim; cumprod's gradient
  function M._cumsum_reverse(g, d) return c1(C.dpl_cumulative, SCAN_SUM, g, sdim(g, d, 'cumsum'), -1, 1, out1) end
  function M._cumprod_backward(g, x, y, d) return c1(C.dpl_cumprod_backward, g, x, y, sdim(x, d, 'cumprod'), out1) end

  local function cumext(name, op, t, d)
    need_tensor(name, 'input', t)
    local cd = sdim(t, d, name)
    local st = C.dpl_cumulative_index(op, t, cd, out1, out2)
    if st == ENOMEM then collectgarbage() st = C.dpl_cumulative_index(op, t, cd, out1, out2) end
    if st ~= 0 then fail(3, st) end
    local v = wrap(out1)
    local i = wrap(out2)
    cdo(C.dpl_binary_scalar_(0, i, 1)) -- 1-based indices
    return v, i
  end
  --- t:cummax(dim) -> values, indices (1-based int64): the running maximum and where it was
  --- last seen (ties take the later index; a NaN takes over, as in PyTorch).
  function methods.cummax(t, d) return cumext('cummax', SCAN_MAX, t, d) end
  function methods.cummin(t, d) return cumext('cummin', SCAN_MIN, t, d) end

  ---------------------------------------------------------------- flip, roll, rot90
  -- a list of distinct dims of t into `dims` (0-based); returns the count
  local function fill_dims(name, t, list, unique)
    if #list > 8 then error(fmt('%s: at most 8 dims, got %d', name, #list)) end
    local seen = {}
    for i = 1, #list do
      local cd = (unique and sdim or cdim)(t, list[i], name) -- (roll of a 0-d tensor takes no dim, as PyTorch)
      if unique and seen[cd] then
        error(fmt('%s: dim %s appears multiple times in the list of dims %s', name, tostring(list[i]), list_str(list)))
      end
      seen[cd] = true
      dims[i - 1] = cd
    end
    return #list
  end
  --- t:flip(dims): a copy reversed along each dim listed (flip(1), flip({1, 2}), flip(1, 2)).
  function methods.flip(t, a, ...)
    need_tensor('flip', 'input', t)
    if a == nil then error('flip: dims is required (a dim or a list of dims)') end
    local n = fill_dims('flip', t, args_list('flip', a, ...), true)
    return c1(C.dpl_flip, t, n, dims, out1)
  end
  --- t:fliplr(): flip(2), for tensors with at least 2 dims; t:flipud(): flip(1).
  function methods.fliplr(t)
    need_tensor('fliplr', 'input', t)
    need_dims('fliplr', t, 2)
    return methods.flip(t, 2)
  end
  function methods.flipud(t)
    need_tensor('flipud', 'input', t)
    need_dims('flipud', t, 1)
    return methods.flip(t, 1)
  end

  --- t:roll(shifts [, dims]): elements shifted along dims (circularly); without dims, along the
  --- flattened tensor (then one shift). shifts and dims: numbers or lists of one length.
  function methods.roll(t, s, d)
    need_tensor('roll', 'input', t)
    local sl = as_list(s)
    if #sl == 0 then error('roll: shifts is required (an integer or a list of integers)') end
    for i = 1, #sl do need_int('roll', 'shifts', sl[i]) end
    if d == nil then
      if #sl ~= 1 then
        error(fmt('roll: shifts and dims must align: %d shifts and no dims (the flattened tensor takes one shift)', #sl))
      end
      -- the flattened tensor, rolled and shaped back (raw C calls: one recorded op)
      local c = c1(C.dpl_tensor_contiguous, t, out1)
      shp[0] = tonumber(t._numel)
      local flat = c1(C.dpl_tensor_view, c, 1, shp, out1)
      dims[0], shifts[0] = 0, sl[1]
      local r = c1(C.dpl_roll, flat, 1, shifts, dims, out1)
      for i = 0, t._ndim - 1 do shp[i] = t._shape[i] end
      return c1(C.dpl_tensor_view, r, t._ndim, shp, out1)
    end
    local dl = as_list(d)
    if #dl ~= #sl then error(fmt('roll: shifts and dims must align: %d shifts and %d dims', #sl, #dl)) end
    local n = fill_dims('roll', t, dl, false)
    for i = 1, n do shifts[i - 1] = sl[i] end
    return c1(C.dpl_roll, t, n, shifts, dims, out1)
  end

  --- t:rot90([k=1 [, dims={1, 2}]]): rotated by k quarter turns from dims[1] towards dims[2]
  --- (PyTorch's: flips and a transpose).
  function methods.rot90(t, k, dl)
    need_tensor('rot90', 'input', t)
    k = k == nil and 1 or need_int('rot90', 'k', k)
    dl = dl == nil and { 1, 2 } or dl
    if type(dl) ~= 'table' or #dl ~= 2 then
      error(fmt('rot90: dims must be a list of 2 dims, got %s', type(dl) == 'table' and list_str(dl) or type(dl)))
    end
    need_dims('rot90', t, 2)
    local d0, d1 = cdim(t, dl[1], 'rot90'), cdim(t, dl[2], 'rot90')
    if d0 == d1 then error(fmt('rot90: the two dims must differ, got %s', list_str(dl))) end
    k = k % 4
    if k == 1 then return methods.transpose(methods.flip(t, d1 + 1), d0 + 1, d1 + 1) end
    if k == 2 then return methods.flip(t, d0 + 1, d1 + 1) end
    if k == 3 then return methods.transpose(methods.flip(t, d0 + 1), d0 + 1, d1 + 1) end
    return methods.clone(t)
  end

  ---------------------------------------------------------------- repeat, tile, repeat_interleave
  local function repeat_impl(name, t, reps)
    local nd, n = t._ndim, #reps
    if n > 8 then error(fmt('%s: at most 8 dims, got %d repeats', name, n)) end
    if n < nd then
      error(fmt('%s: the number of repeats (%d) can not be smaller than the number of dims of the tensor (%d)', name, n, nd))
    end
    for i = 1, n do
      if not is_int(reps[i]) or reps[i] < 0 then
        error(fmt('%s: repeats must be non-negative integers, got %s at position %d', name, tostring(reps[i]), i))
      end
    end
    local shape, out = {}, {}
    for i = 1, n do
      shape[i] = i <= n - nd and 1 or tonumber(t._shape[i - 1 - (n - nd)])
      out[i] = shape[i] * reps[i]
    end
    local total = 1
    for i = 1, n do total = total * out[i] end
    if total > 2 ^ 48 then
      error(fmt('%s: the result is too large: %.0f elements (more than 2^48)', name, total))
    end
    local x = methods.reshape(t, shape)
    if total == 0 then return methods.clone(methods.reshape(methods.narrow(methods.reshape(x, { -1 }), 1, 1, 0), out)) end
    if 2 * n <= 8 then -- [1, s1, 1, s2, ...] expanded to [r1, s1, r2, s2, ...]: one copy
      local v, e = {}, {}
      for i = 1, n do v[2 * i - 1], v[2 * i], e[2 * i - 1], e[2 * i] = 1, shape[i], reps[i], shape[i] end
      x = methods.reshape(methods.expand(methods.reshape(x, v), e), out)
    else -- more dims than fit twice: one dim at a time
      for i = 1, n do
        local r = reps[i]
        if r == 0 then x = methods.narrow(x, i, 1, 0)
        elseif r > 1 and n < 8 then -- [.., 1, s_i, ..] expanded to [.., r, s_i, ..], merged
          local v, e, m = {}, {}, {}
          for d = 1, n do
            local sd = tonumber(x._shape[d - 1])
            if d == i then v[#v + 1], e[#e + 1] = 1, r end
            v[#v + 1], e[#e + 1] = sd, sd
            m[d] = d == i and sd * r or sd
          end
          x = methods.reshape(methods.contiguous(methods.expand(methods.reshape(x, v), e)), m)
        elseif r > 1 then
          local list = {}
          for k = 1, r do list[k] = x end
          x = M.cat(list, i)
        end
      end
    end
    if x._storage == t._storage then x = methods.clone(x) end -- always a new tensor, as PyTorch
    return x
  end
  --- t['repeat'](t, sizes...) (PyTorch's Tensor.repeat; `repeat` is a Lua keyword, prefer
  --- t:tile(...)): t tiled sizes[i] times along dim i; at least as many sizes as dims (more
  --- add leading dims).
  methods['repeat'] = function(t, a, ...)
    need_tensor('repeat', 'input', t)
    return repeat_impl('repeat', t, args_list('repeat', a, ...))
  end
  --- t:tile(dims...): repeat, with fewer repeats than dims allowed (ones are prepended).
  function methods.tile(t, a, ...)
    need_tensor('tile', 'input', t)
    local reps = args_list('tile', a, ...)
    if #reps < t._ndim then
      local r = {}
      for i = 1, t._ndim - #reps do r[i] = 1 end
      for i = 1, #reps do r[#r + 1] = reps[i] end
      reps = r
    end
    return repeat_impl('tile', t, reps)
  end

  local function check_output_size(opts, n)
    local os = opts and opts.output_size
    if os ~= nil then
      need_int('repeat_interleave', 'output_size', os)
      if os ~= n then
        error(fmt('repeat_interleave: output_size %d does not match the size of the result (%d)', os, n))
      end
    end
  end
  local function repeats_tensor(r)
    if type(r) == 'table' then
      for i = 1, #r do need_int('repeat_interleave', 'repeats', r[i]) end
      return M.tensor(r, { dtype = 'int64' })
    end
    if not is_tensor(r) then
      error(fmt('repeat_interleave: repeats must be an integer, a list of integers or an integer tensor, got %s',
        type(r) == 'cdata' and 'cdata (not a tensor)' or type(r)))
    end
    if r._dtype <= 3 or r._dtype == 7 then
      error(fmt('repeat_interleave: repeats must be an integer tensor (int64 or int32), got %s', dtype_names[r._dtype]))
    end
    return r
  end
  --- t:repeat_interleave(repeats [, dim [, {output_size=}]]): each element (slice along dim)
  --- repeated; repeats is an integer or a list/tensor of one count per slice (or of one);
  --- without dim the flattened tensor. dpl.repeat_interleave(repeats) (no other argument):
  --- the 1-based index list 1 (repeats[1] times), 2, ... as torch.repeat_interleave(repeats).
  function methods.repeat_interleave(t, repeats, d, opts)
    need_tensor('repeat_interleave', 'input', t)
    if type(d) == 'table' and opts == nil then d, opts = nil, d end
    options.check(opts, RI_KEYS, 'repeat_interleave')
    if repeats == nil then
      if d ~= nil then error('repeat_interleave: repeats is required') end
      local rt = repeats_tensor(t)
      if rt._ndim ~= 1 then
        error(fmt('repeat_interleave: the repeats alone must be a 1-d tensor, got a %d-d tensor', rt._ndim))
      end
      local idx = c1(C.dpl_repeat_interleave_index, rt._devtype == 0 and rt or methods.cpu(rt), out1)
      idx = methods.to(idx, like(rt).device)
      cdo(C.dpl_binary_scalar_(0, idx, 1))
      check_output_size(opts, tonumber(idx._numel))
      return idx
    end
    local x = t
    if d == nil then x, d = methods.reshape(t, -1), 1 end -- (a 0-d tensor takes no dim, as in PyTorch)
    local cd = cdim(x, d, 'repeat_interleave')
    local size = tonumber(x._shape[cd])
    if is_tensor(repeats) or type(repeats) == 'table' then
      local rt = repeats_tensor(repeats)
      if rt._ndim > 1 then
        error(fmt('repeat_interleave: repeats must be a 0-d or 1-d tensor, got a %d-d tensor', rt._ndim))
      end
      if tonumber(rt._numel) == 1 then
        repeats = rt:item()
      else
        if tonumber(rt._numel) ~= size then
          error(fmt('repeat_interleave: repeats must have one count per slice along dim %s (%d), got %d', tostring(d),
            size, tonumber(rt._numel)))
        end
        -- the index list is made on the CPU, then moved to x's device
        local idx = c1(C.dpl_repeat_interleave_index, rt._devtype == 0 and rt or methods.cpu(rt), out1)
        cdo(C.dpl_binary_scalar_(0, idx, 1))
        check_output_size(opts, tonumber(idx._numel))
        return methods.index_select(x, cd + 1, methods.to(idx, like(x).device))
      end
    end
    if type(repeats) ~= 'number' then repeats_tensor(repeats) end -- (the error saying what repeats may be)
    need_int('repeat_interleave', 'repeats', repeats)
    if repeats < 0 then error(fmt('repeat_interleave: repeats must not be negative, got %d', repeats)) end
    check_output_size(opts, size * repeats)
    local r
    if x._ndim < 8 then
      local xs = methods.unsqueeze(x, cd + 2)
      local e = size_of(xs)
      e[cd + 2] = repeats
      local shape = size_of(x)
      shape[cd + 1] = size * repeats
      r = methods.reshape(methods.expand(xs, e), shape)
    else
      r = methods.index_select(x, cd + 1, M.arange(1, size + 1, { device = like(x).device }):repeat_interleave(repeats))
    end
    if r._storage == t._storage then r = methods.clone(r) end
    return r
  end

  ---------------------------------------------------------------- chunk, split, unbind
  local function pieces(t, cd, ss, n)
    local size, r = tonumber(t._shape[cd]), {}
    for k = 0, n - 1 do
      local start = k * ss
      r[k + 1] = methods.narrow(t, cd + 1, start + 1, min(ss, size - start))
    end
    return r
  end
  local function split_dim(name, t, d)
    need_tensor(name, 'input', t)
    if t._ndim == 0 then error(fmt('%s: expected a tensor with at least 1 dim, got a 0-d tensor', name)) end
    return cdim(t, d == nil and 1 or d, name)
  end
  --- t:chunk(chunks [, dim=1]): a list of at most `chunks` views along dim, all of
  --- ceil(size / chunks) elements but the last.
  function methods.chunk(t, chunks, d)
    local cd = split_dim('chunk', t, d)
    if not is_int(chunks) or chunks < 1 then
      error(fmt('chunk: chunks must be a positive integer, got %s', tostring(chunks)))
    end
    local size = tonumber(t._shape[cd])
    if size == 0 then -- as PyTorch: chunks empty views (a list of more than 2^16 is an error, not a hang)
      if chunks > 65536 then error(fmt('chunk: %s empty chunks of an empty dim: at most 65536', tostring(chunks))) end
      return pieces(t, cd, 0, chunks)
    end
    local ss = ceil(size / chunks)
    return pieces(t, cd, ss, ceil(size / ss))
  end
  --- t:split(split_size_or_sizes [, dim=1]): a list of views along dim: of split_size elements
  --- each (the last may be smaller), or of the sizes listed (they must add up to the dim's size).
  function methods.split(t, s, d)
    local cd = split_dim('split', t, d)
    local size = tonumber(t._shape[cd])
    if type(s) == 'table' then
      local sum = 0
      for i = 1, #s do
        if not is_int(s[i]) or s[i] < 0 then
          error(fmt('split: split sizes must be non-negative integers, got %s at position %d', tostring(s[i]), i))
        end
        sum = sum + s[i]
      end
      if sum ~= size then
        error(fmt('split: split sizes must add up to the size of dim %s (%d), got %s (sum %d)', tostring(d or 1), size,
          list_str(s), sum))
      end
      local r, pos = {}, 1
      for i = 1, #s do
        r[i] = methods.narrow(t, cd + 1, pos, s[i])
        pos = pos + s[i]
      end
      return r
    end
    if not is_int(s) or s < 0 then
      error(fmt('split: split_size must be a non-negative integer or a list of integers, got %s',
        type(s) == 'number' and tostring(s) or type(s)))
    end
    if s == 0 then
      if size ~= 0 then error(fmt('split: split_size can only be 0 when the size of dim %s is 0, got %d', tostring(d or 1), size)) end
      return pieces(t, cd, 0, 1)
    end
    return pieces(t, cd, s, max(ceil(size / s), 1))
  end
  --- t:unbind([dim=1]): the list of the slices along dim (views, as select).
  function methods.unbind(t, d)
    local cd = split_dim('unbind', t, d)
    local r = {}
    for i = 1, tonumber(t._shape[cd]) do r[i] = methods.select(t, cd + 1, i) end
    return r
  end

  ---------------------------------------------------------------- tril, triu, diag, diagonal, trace
  local function diag_offset(name, k)
    if k == nil then return 0 end
    return need_int(name, 'diagonal', k)
  end
  --- t:tril([diagonal=0]) / t:triu([diagonal=0]): the lower / upper triangle of the last two
  --- dims (columns j - i <= diagonal / >= diagonal of row i), zeros elsewhere. tril_, triu_: in place.
  function methods.tril(t, k)
    need_tensor('tril', 'input', t)
    return c1(C.dpl_tril, t, diag_offset('tril', k), 0, out1)
  end
  function methods.triu(t, k)
    need_tensor('triu', 'input', t)
    return c1(C.dpl_tril, t, diag_offset('triu', k), 1, out1)
  end
  function methods.tril_(t, k)
    need_tensor('tril_', 'input', t)
    cdo(C.dpl_tril_(t, diag_offset('tril_', k), 0))
    return t
  end
  function methods.triu_(t, k)
    need_tensor('triu_', 'input', t)
    cdo(C.dpl_tril_(t, diag_offset('triu_', k), 1))
    return t
  end

  -- the geometry of t's diagonal `off` over dims d1, d2 (0-based) into shp/strd; returns ndim, offset
  local function diag_geom(t, off, d1, d2)
    local s1, s2 = tonumber(t._shape[d1]), tonumber(t._shape[d2])
    local len = off >= 0 and min(s1, s2 - off) or min(s1 + off, s2)
    len = max(len, 0)
    local offset = tonumber(t._offset)
    if len > 0 then
      offset = off >= 0 and offset + off * tonumber(t._stride[d2]) or offset - off * tonumber(t._stride[d1])
    end
    local k = 0
    for i = 0, t._ndim - 1 do
      if i ~= d1 and i ~= d2 then shp[k], strd[k], k = t._shape[i], t._stride[i], k + 1 end
    end
    shp[k], strd[k] = len, t._stride[d1] + t._stride[d2]
    return k + 1, offset
  end
  --- t:diagonal([offset=0 [, dim1=1 [, dim2=2]]]): a view of the diagonal of the dim1 x dim2
  --- matrices (above the main one for offset > 0), as a last dim after the others.
  function methods.diagonal(t, off, d1, d2)
    need_tensor('diagonal', 'input', t)
    off = diag_offset('diagonal', off)
    need_dims('diagonal', t, 2)
    local c1_, c2_ = cdim(t, d1 == nil and 1 or d1, 'diagonal'), cdim(t, d2 == nil and 2 or d2, 'diagonal')
    if c1_ == c2_ then
      error(fmt('diagonal: dim1 and dim2 must differ, got %s and %s (the same dim)', tostring(d1 or 1), tostring(d2 or 2)))
    end
    local n, offset = diag_geom(t, off, c1_, c2_)
    return view1(C.dpl_tensor_as_strided, t, n, shp, strd, offset, out1)
  end
  --- t:diag([diagonal=0]): a 1-d t as the diagonal of a new square matrix (zeros elsewhere),
  --- or a copy of a 2-d t's diagonal.
  function methods.diag(t, k)
    need_tensor('diag', 'input', t)
    k = diag_offset('diag', k)
    if t._ndim == 1 then
      local m = tonumber(t._shape[0]) + abs(k)
      local z = M.zeros({ m, m }, like(t))
      local n, offset = diag_geom(z, k, 0, 1)
      local v = c1(C.dpl_tensor_as_strided, z, n, shp, strd, offset, out1)
      cdo(C.dpl_tensor_copy_(v, t))
      return z
    end
    if t._ndim ~= 2 then error(fmt('diag: expected a 1-d or 2-d tensor, got a %d-d tensor', t._ndim)) end
    local n, offset = diag_geom(t, k, 0, 1)
    local v = c1(C.dpl_tensor_as_strided, t, n, shp, strd, offset, out1)
    return c1(C.dpl_tensor_to, v, v._dtype, v._devtype, v._devindex, out1)
  end
  --- t:trace(): the sum of a matrix's diagonal (integers and bool sum in int64).
  function methods.trace(t)
    need_tensor('trace', 'input', t)
    if t._ndim ~= 2 then error(fmt('trace: expected a matrix (a 2-d tensor), got a %d-d tensor', t._ndim)) end
    return methods.sum(methods.diagonal(t))
  end

  ---------------------------------------------------------------- movedim, swapaxes, unfold
  --- t:movedim(source, destination): the dims listed in source (a dim or a list) moved to
  --- the positions in destination, the others kept in order (a view, as permute).
  local function movedim(name, t, src, dst)
    need_tensor(name, 'input', t)
    local sl, dl = as_list(src), as_list(dst)
    if #sl ~= #dl then
      error(fmt('%s: source and destination must list as many dims, got %s and %s', name, list_str(sl), list_str(dl)))
    end
    local nd = t._ndim
    if nd == 0 then
      for i = 1, #sl do sdim(t, sl[i], name) sdim(t, dl[i], name) end
      return methods.permute(t, {})
    end
    local order, used = {}, {}
    for i = 1, #sl do
      local s, d = cdim(t, sl[i], name), cdim(t, dl[i], name)
      if used[s] then error(fmt('%s: repeated dim in source %s', name, list_str(sl))) end
      if order[d] then error(fmt('%s: repeated dim in destination %s', name, list_str(dl))) end
      used[s], order[d] = true, s
    end
    local rest, k = {}, 1
    for s = 0, nd - 1 do if not used[s] then rest[#rest + 1] = s end end
    local perm = {}
    for d = 0, nd - 1 do
      if order[d] == nil then order[d], k = rest[k], k + 1 end
      perm[d + 1] = order[d] + 1
    end
    return methods.permute(t, perm)
  end
  function methods.movedim(t, src, dst) return movedim('movedim', t, src, dst) end
  function methods.moveaxis(t, src, dst) return movedim('moveaxis', t, src, dst) end
  --- t:swapaxes(d0, d1) / t:swapdims(d0, d1): transpose(d0, d1).
  local function swap(name)
    return function(t, d0, d1)
      need_tensor(name, 'input', t)
      if t._ndim == 0 then -- dims 1 / -1, as PyTorch's 0 / -1: the tensor itself, as a view
        sdim(t, d0, name)
        sdim(t, d1, name)
        return methods.permute(t, {})
      end
      cdim(t, d0, name)
      cdim(t, d1, name)
      return methods.transpose(t, d0, d1)
    end
  end
  methods.swapaxes, methods.swapdims = swap('swapaxes'), swap('swapdims')

  --- t:unfold(dim, size, step): a view of the windows of `size` elements along dim, `step`
  --- apart: dim gets the window count, a last dim of `size` is added.
  function methods.unfold(t, d, size, step)
    need_tensor('unfold', 'input', t)
    need_int('unfold', 'size', size)
    need_int('unfold', 'step', step)
    if size < 0 then error(fmt('unfold: size must be non-negative, got %d', size)) end
    if step <= 0 then error(fmt('unfold: step must be positive, got %d', step)) end
    local nd = t._ndim
    if nd == 0 then
      sdim(t, d, 'unfold')
      if size > 1 then error(fmt('unfold: size %d is larger than the size of dim %s (1, a 0-d tensor)', size, tostring(d))) end
      shp[0], strd[0] = size, 1
      return view1(C.dpl_tensor_as_strided, t, 1, shp, strd, tonumber(t._offset), out1)
    end
    if nd >= 8 then error('unfold: the result would have 9 dims (at most 8)') end
    local cd = cdim(t, d, 'unfold')
    local s = tonumber(t._shape[cd])
    if size > s then error(fmt('unfold: size %d is larger than the size of dim %s (%d)', size, tostring(d), s)) end
    for i = 0, nd - 1 do shp[i], strd[i] = t._shape[i], t._stride[i] end
    shp[cd], strd[cd] = floor((s - size) / step) + 1, t._stride[cd] * step
    shp[nd], strd[nd] = size, t._stride[cd]
    return view1(C.dpl_tensor_as_strided, t, nd + 1, shp, strd, tonumber(t._offset), out1)
  end

  ---------------------------------------------------------------- sum_to_size
  --- t:sum_to_size(sizes...): t summed down to a shape it broadcasts from (leading dims
  --- summed away, size-1 dims summed with keepdim); t itself when it has that shape.
  function methods.sum_to_size(t, ...)
    need_tensor('sum_to_size', 'input', t)
    local n, opts = parse_sizes('sum_to_size', shp, ...)
    if opts ~= nil then error('sum_to_size: expected sizes only, got an options table') end
    local sizes = {}
    for i = 1, n do sizes[i] = tonumber(shp[i - 1]) end
    local nd = t._ndim
    local ok = n <= nd
    for i = 1, n do
      if ok then
        local ts = tonumber(t._shape[nd - n + i - 1])
        ok = sizes[i] == 1 or sizes[i] == ts
      end
    end
    if not ok then
      error(fmt('sum_to_size: size %s is not expandable to the size of the tensor %s', list_str(sizes), shape_str(t)))
    end
    if n == 0 then return methods.sum(t) end -- as PyTorch's sum_to: () sums, a 0-d t too (int64 for integers)
    local r = t
    for _ = 1, nd - n do r = methods.sum(r, 1) end
    for i = 1, n do
      if sizes[i] == 1 and tonumber(r._shape[i - 1]) ~= 1 then r = methods.sum(r, i, true) end
    end
    return r
  end

  ---------------------------------------------------------------- new_*, type_as, take
  -- {dtype=, device=} of a new_* call: t's unless given; requires_grad; layout and pin_memory
  -- are PyTorch's options that dplhost does not have
  local function new_opts(t, name, opts)
    options.check(opts, NEW_KEYS, name)
    local o = like(t)
    local rg = nil
    if opts then
      if opts.layout ~= nil and opts.layout ~= 'strided' and opts.layout ~= 'torch.strided' then
        not_implemented(fmt("%s: layout=%s is not implemented (only strided tensors)", name, tostring(opts.layout)))
      end
      if opts.pin_memory then not_implemented(name .. ': pin_memory=true is not implemented') end
      if opts.dtype ~= nil then o.dtype = dtype_names[dtype_id(opts.dtype, name)] end
      if opts.device ~= nil then M.parse_device(opts.device, name) o.device = opts.device end
      rg = opts.requires_grad
      if rg ~= nil and type(rg) ~= 'boolean' then
        error(fmt('%s: requires_grad must be a boolean, got %s', name, type(rg)))
      end
    end
    return o, rg
  end
  local function finish(r, rg)
    if rg then r.requires_grad = true end
    return r
  end
  local function new_sized(name, ctor)
    return function(t, ...)
      need_tensor(name, 'self', t)
      local n, opts = parse_sizes(name, shp, ...)
      local sizes = {}
      for i = 1, n do sizes[i] = tonumber(shp[i - 1]) end
      local o, rg = new_opts(t, name, opts)
      return finish(ctor(sizes, o), rg)
    end
  end
  --- t:new_zeros(sizes... [, {dtype=, device=, requires_grad=}]) and new_ones, new_empty: t's
  --- dtype and device unless given.
  methods.new_zeros = new_sized('new_zeros', M.zeros)
  methods.new_ones = new_sized('new_ones', M.ones)
  methods.new_empty = new_sized('new_empty', M.empty)
  --- t:new_full(size, value [, opts]).
  function methods.new_full(t, size, value, opts)
    need_tensor('new_full', 'self', t)
    if type(size) ~= 'number' and type(size) ~= 'table' then
      error(fmt('new_full: size must be a list of sizes (or a number), got %s', type(size)))
    end
    parse_sizes('new_full', shp, type(size) == 'number' and { size } or size)
    if type(value) ~= 'number' and type(value) ~= 'boolean' then
      error(fmt('new_full: fill_value must be a number or a boolean, got %s', type(value)))
    end
    local o, rg = new_opts(t, 'new_full', opts)
    if type(value) == 'number' then M._check_scalar('new_full', value, M.dtype_ids[o.dtype]) end
    return finish(M.full(size, value, o), rg)
  end
  --- t:new_tensor(data [, opts]): dpl.tensor(data) in t's dtype and device unless given (a
  --- tensor is copied, without history).
  function methods.new_tensor(t, data, opts)
    need_tensor('new_tensor', 'self', t)
    local o, rg = new_opts(t, 'new_tensor', opts)
    return finish(M.tensor(data, o), rg)
  end
  --- t:type_as(other): t converted to other's dtype (and device); t itself when they match.
  function methods.type_as(t, other)
    need_tensor('type_as', 'input', t)
    need_tensor('type_as', 'other', other)
    return methods.to(t, other)
  end

  --- t:take(index): the elements at the 1-based positions of the flattened t (negative count
  --- from the end), shaped as index.
  function methods.take(t, idx)
    need_tensor('take', 'input', t)
    if type(idx) == 'table' then -- nested lists of integers ({} : no element), on t's device
      idx = M.tensor(idx, { device = like(t).device })
      if idx._numel == 0 then idx = idx:long() end
    end
    need_tensor('take', 'index', idx)
    if idx._devtype ~= t._devtype or idx._devindex ~= t._devindex then
      error(fmt('take: expected the index on the device of the input (%s), got %s', like(t).device, like(idx).device))
    end
    if idx._dtype <= 3 or idx._dtype == 7 then
      error(fmt('take: index must be an integer tensor (int64 or int32, 1-based), got %s', dtype_names[idx._dtype]))
    end
    local N = tonumber(t._numel)
    if idx._numel > 0 then
      local mn, mx = methods.min(idx):item(), methods.max(idx):item()
      local bad = mx > N and mx or mn < -N and mn or methods.any(methods.eq(idx, 0)):item() and 0 or nil
      if bad then
        error(fmt('take: index %d is out of range for a tensor of %d elements (expected 1..%d, or -%d..-1 from the end)',
          bad, N, N, N))
      end
      if mn < 0 then idx = M.where(methods.lt(idx, 0), methods.add(idx, N + 1), idx) end
    end
    local r = raw_index_select(raw_reshape(t, -1), 1, raw_reshape(idx, -1))
    -- shaped as index by a raw C view: the result is a tensor of its own, not a view of r
    local nd = idx._ndim
    for i = 0, nd - 1 do shp[i] = idx._shape[i] end
    return c1(C.dpl_tensor_view, r, nd, shp, out1)
  end

  for _, k in ipairs({ 'cumsum', 'cumprod', 'cummax', 'cummin', 'flip', 'fliplr', 'flipud', 'roll', 'rot90', 'repeat',
    'tile', 'repeat_interleave', 'chunk', 'split', 'unbind', 'tril', 'triu', 'tril_', 'triu_', 'diag', 'diagonal',
    'trace', 'movedim', 'moveaxis', 'swapaxes', 'swapdims', 'unfold', 'sum_to_size', 'new_zeros', 'new_ones',
    'new_full', 'new_empty', 'new_tensor', 'type_as', 'take' }) do
    M[k] = methods[k]
  end
end
