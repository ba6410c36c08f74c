-- dpl.tensor_print: tostring for tensors, PyTorch-style values followed by the
-- dtype, the shape and the device; big tensors are summarized (first and last
-- three entries of each dim around '...').
local ffi = require 'ffi'
local C = require('dpl.capi').C

local M = {}

local floor, abs, max, huge = math.floor, math.abs, math.max, math.huge
local concat = table.concat
local fmt = string.format

M.threshold = 1000 -- more elements than this: summarize
M.edgeitems = 3

local valbuf = ffi.new('double[1]')
local ivalbuf = ffi.new('int64_t[1]')

local function get(t, pos, isint)
  if isint then
    C.dpl_tensor_get_i64(t, pos, ivalbuf)
    return ivalbuf[0] -- an int64 cdata: a double would round values beyond 2^53
  end
  C.dpl_tensor_get(t, pos, valbuf)
  return valbuf[0]
end

-- index lists per dim (nil entry = the '...' marker)
local function dim_indices(n, summarize)
  local e = M.edgeitems
  local r = {}
  if summarize and n > 2 * e then
    for i = 0, e - 1 do r[#r + 1] = i end
    r[#r + 1] = false
    for i = n - e, n - 1 do r[#r + 1] = i end
  else
    for i = 0, n - 1 do r[#r + 1] = i end
  end
  return r
end

local function number_formatter(vals, kind)
  if kind == 'bool' then
    return function(v) return v ~= 0 and 'true' or 'false' end, 5
  end
  if kind == 'int' then
    local function istr(v) return (tostring(v):gsub('LL$', '')) end
    local w = 1
    for i = 1, #vals do w = max(w, #istr(vals[i])) end
    return function(v) local s = istr(v) return (' '):rep(w - #s) .. s end, w
  end
  -- PyTorch's _Formatter: the mode and the width come from the nonzero finite values only
  -- (nan, inf and 0 take their own widths); scientific when max / min > 1000 or max > 1e8,
  -- or (values not all integral) min < 1e-4
  local int_mode, maxa, mina = true, 0, huge
  for i = 1, #vals do
    local v = vals[i]
    if v == v and v ~= huge and v ~= -huge and v ~= 0 then
      if v ~= floor(v) then int_mode = false end
      local a = abs(v)
      if a > maxa then maxa = a end
      if a < mina then mina = a end
    end
  end
  local special = function(v)
    if v ~= v then return 'nan' elseif v == huge then return 'inf' elseif v == -huge then return '-inf' end
  end
  local f, w = nil, 1
  if mina == huge then -- no nonzero finite value
    f = function(v) return special(v) or fmt('%.0f.', v) end
  elseif maxa / mina > 1e3 or maxa > 1e8 or (not int_mode and mina < 1e-4) then
    f = function(v) return special(v) or fmt('%.4e', v) end
  elseif int_mode then
    f = function(v) return special(v) or fmt('%.0f.', v) end
  else
    f = function(v) return special(v) or fmt('%.4f', v) end
  end
  for i = 1, #vals do
    local v = vals[i]
    if v == v and v ~= huge and v ~= -huge and v ~= 0 then w = max(w, #f(v)) end
  end
  return function(v)
    local s = f(v)
    return (' '):rep(w - #s) .. s
  end, w
end

-- The walkers below take everything as arguments: a closure over the tensor, once compiled
-- by the JIT (recursive calls of a known closure read its immutable upvalues as constants),
-- kept that tensor alive for as long as the trace lived (a tensor printed once never freed).
-- P: the tensor, its shape, strides and index lists, whether its values are integers, the
-- collected values and the formatter
local function collect(P, d, base)
  local idx, nd = P.idx[d], P.nd
  for k = 1, #idx do
    local i = idx[k]
    if i then
      local pos = base + i * P.strides[d]
      if d == nd then P.vals[#P.vals + 1] = get(P.t, pos, P.isint) else collect(P, d + 1, pos) end
    end
  end
end

local function render(P, d, base, ind)
  local idx, nd = P.idx[d], P.nd
  local parts = {}
  for k = 1, #idx do
    local i = idx[k]
    if not i then
      parts[#parts + 1] = d == nd and ' ...' or '...' -- PyTorch: ",  ..., " within a row
    elseif d == nd then
      parts[#parts + 1] = P.f(get(P.t, base + i * P.strides[d], P.isint))
    else
      parts[#parts + 1] = render(P, d + 1, base + i * P.strides[d], ind .. ' ')
    end
  end
  if d == nd then return '[' .. concat(parts, ', ') .. ']' end
  local sep = ',' .. ('\n'):rep(nd - d) .. ind .. ' '
  return '[' .. concat(parts, sep) .. ']'
end

--- The body "[[1., 2.], [3., 4.]]" as PyTorch lays it out, with `indent` spaces
--- before continuation lines.
function M.body(t, indent)
  local nd = t._ndim
  local numel = tonumber(t._numel)
  local dt = t._dtype
  local kind = (dt == 7) and 'bool' or (dt >= 4) and 'int' or 'float'
  local isint = kind ~= 'float'
  if nd == 0 then
    local v = get(t, 0, isint)
    local f = number_formatter({ v }, kind)
    return (f(v):gsub('^%s+', ''))
  end
  if numel == 0 then return '[]' end
  local summarize = numel > M.threshold
  local shape, strides = {}, {}
  for i = 1, nd do shape[i] = tonumber(t._shape[i - 1]) end
  local s = 1
  for i = nd, 1, -1 do strides[i] = s; s = s * shape[i] end
  local idx = {}
  for i = 1, nd do idx[i] = dim_indices(shape[i], summarize) end
  -- collect the shown values first (for a common width)
  local P = { t = t, nd = nd, strides = strides, idx = idx, isint = isint, vals = {} }
  collect(P, 1, 0)
  P.f = number_formatter(P.vals, kind)
  return render(P, 1, 0, (' '):rep(indent))
end

function M.tostring(t)
  if t._storage == nil then return 'tensor(<freed>)' end
  local shape = {}
  for i = 1, t._ndim do shape[i] = tostring(tonumber(t._shape[i - 1])) end
  local dev = t._devtype == 0 and 'cpu' or ('cuda:' .. t._devindex)
  local dtype = ffi.string(C.dpl_dtype_name(t._dtype))
  return fmt('tensor(%s, dtype=%s, shape=[%s], device=%s)', M.body(t, 7), dtype, concat(shape, ', '), dev)
end

return M
