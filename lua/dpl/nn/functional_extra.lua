-- dpl.nn.functional_extra: PyTorch 1.13 nn.functional pieces composed of differentiable
-- tensor ops: bilinear, rrelu (rrelu_), hardshrink, softshrink, embedding_bag, alpha_dropout,
-- feature_alpha_dropout, dropout3d, channel_shuffle, triplet_margin_with_distance_loss.
-- functional.lua installs them into dpl.nn.functional (M.install(F)); the modules are in
-- dpl.nn.extra. Options come as PyTorch's positional values or one options table of its
-- keyword names (checked by dpl.options). Ids, offsets and padding_idx are 1-based.
local ffi = require 'ffi'
local C = require('dpl.capi').C
local T = require 'dpl.tensor'
local autograd = require 'dpl.autograd'
local options = require 'dpl.options'
local errors = require 'dpl.errors'

local fmt = string.format
local type, tostring, floor = type, tostring, math.floor
local lua_error = error
local error = errors.raise -- string messages become ValueError objects
local is_tensor = T.is_tensor
local check_opts, keys = options.check, options.keys

local M = {}

local function got(v) return type(v) == 'cdata' and (is_tensor(v) and 'a tensor' or 'cdata') or tostring(v) end
local function shape_str(t) return '[' .. table.concat(t:size(), ', ') .. ']' end
M.got, M.shape_str = got, shape_str
local function need_tensor(x, fn, what)
  if not is_tensor(x) then error(fmt('%s: %s must be a tensor, got %s', fn, what, got(x)), 3) end
end
local function need_float(x, fn, what)
  need_tensor(x, fn, what or 'input')
  if not x:is_floating_point() then
    error(fmt('%s: expected a floating-point %s, got %s (shape %s)', fn, what or 'input', x.dtype, shape_str(x)), 3)
  end
end
local function need_bool(v, fn, what)
  if v ~= nil and type(v) ~= 'boolean' then error(fmt('%s: %s must be true or false, got %s', fn, what, got(v)), 3) end
end
local function need_num(v, fn, what)
  if type(v) ~= 'number' or v ~= v then error(fmt('%s: %s must be a number, got %s', fn, what, got(v)), 3) end
end
M.need_tensor, M.need_float, M.need_bool = need_tensor, need_float, need_bool

-- positional values (in PyTorch's order) or one options table in place of the first of them
local function args(fn, names, defaults, ...)
  local a = { ... }
  local n = select('#', ...)
  while n > 0 and a[n] == nil do n = n - 1 end -- (F's entry check passes trailing nils)
  if type(a[1]) == 'table' and not is_tensor(a[1]) then
    if n > 1 then error(fmt('%s: the options table must be the last argument', fn), 3) end
    check_opts(a[1], keys(unpack(names)), fn)
    local o = a[1]
    a = {}
    for i, k in ipairs(names) do a[i] = o[k] end
  elseif n > #names then
    error(fmt('%s: too many arguments (%d; it takes %s)', fn, n, table.concat(names, ', ')), 3)
  end
  for i = 1, #names do if a[i] == nil then a[i] = defaults[i] end end
  return unpack(a, 1, #names)
end
M.args = args

local function fmask(c, x) return c:to(x.dtype) end

---------------------------------------------------------------- activations
--- hardshrink(x, lambd=0.5): x where |x| > lambd, else 0
function M.hardshrink(x, ...)
  local fn = 'hardshrink'
  need_float(x, fn)
  local l = args(fn, { 'lambd' }, { 0.5 }, ...)
  need_num(l, fn, 'lambd')
  local keep = autograd.no_grad(function() return fmask(x:lt(-l):logical_or(x:gt(l)), x) end)
  return x * keep
end

--- softshrink(x, lambd=0.5): x - lambd above lambd, x + lambd below -lambd, else 0
function M.softshrink(x, ...)
  local fn = 'softshrink'
  need_float(x, fn)
  local l = args(fn, { 'lambd' }, { 0.5 }, ...)
  need_num(l, fn, 'lambd')
  if l < 0 then error(fmt('softshrink: lambda must be greater or equal to 0, but found to be %s.', tostring(l)), 2) end
  local hi, lo = autograd.no_grad(function() return fmask(x:gt(l), x), fmask(x:lt(-l), x) end)
  return (x - l) * hi + (x + l) * lo
end

local function rrelu_args(fn, ...)
  local lower, upper, training, inplace = args(fn, { 'lower', 'upper', 'training', 'inplace' },
    { 1 / 8, 1 / 3, false, false }, ...)
  need_num(lower, fn, 'lower')
  need_num(upper, fn, 'upper')
  need_bool(training, fn, 'training')
  need_bool(inplace, fn, 'inplace')
  if lower > upper then
    error(fmt('%s: Lower bound should be less than or equal to the upper bound (lower=%s, upper=%s)', fn,
      tostring(lower), tostring(upper)), 3)
  end
  return lower, upper, training, inplace
end
-- the slopes: U(lower, upper) where x <= 0 in training, 1 elsewhere
local function rrelu_noise(x, lower, upper)
  return autograd.no_grad(function()
    local u = T.empty(x:size(), { dtype = x.dtype, device = x.device }):uniform_(lower, upper)
    return T.where(x:le(0), u, T.ones_like(u))
  end)
end
--- rrelu(x, lower=1/8, upper=1/3, training=false, inplace=false): in training each element
--- <= 0 gets its own slope drawn from U(lower, upper); otherwise leaky_relu with the mean slope
function M.rrelu(x, ...)
  local fn = 'rrelu'
  need_float(x, fn)
  local lower, upper, training, inplace = rrelu_args(fn, ...)
  if not training then
    if inplace then return x:leaky_relu_((lower + upper) / 2) end
    return x:leaky_relu((lower + upper) / 2)
  end
  local noise = rrelu_noise(x, lower, upper)
  if inplace then return x:mul_(noise) end
  return x * noise
end
function M.rrelu_(x, lower, upper, training)
  if type(lower) == 'table' then
    local o = {}
    for k, v in pairs(lower) do o[k] = v end
    o.inplace = true
    return M.rrelu(x, o)
  end
  return M.rrelu(x, lower, upper, training, true)
end

---------------------------------------------------------------- dropout
-- PyTorch's _dropout_impl with alpha: kept x*a + alpha*a*p, dropped -alpha*a + alpha*a*p,
-- over an element (feature = false) or a channel (feature = true) mask
local ALPHA = 1.7580993408473766
local function alpha_dropout_impl(fn, x, p, training, inplace, feature)
  need_float(x, fn)
  if type(p) ~= 'number' or not (p >= 0 and p <= 1) then
    error(fmt('%s: dropout probability has to be between 0 and 1, but got %s', fn, got(p)), 3)
  end
  need_bool(training, fn, 'training')
  need_bool(inplace, fn, 'inplace')
  if p == 0 or not training or x:numel() == 0 then return x end
  if p == 1 then
    if inplace then return x:mul_(0) end
    return x * 0
  end
  local shape = x:size()
  if feature then
    if x:dim() < 2 then
      error(fmt('%s: Feature dropout requires at least 2 dimensions in the input, got shape %s', fn, shape_str(x)), 3)
    end
    for i = 3, #shape do shape[i] = 1 end
  end
  local a = 1 / math.sqrt((ALPHA * ALPHA * p + 1) * (1 - p))
  local mul, add = autograd.no_grad(function()
    local keep = T.empty(shape, { dtype = x.dtype, device = x.device }):bernoulli_(1 - p)
    return keep * a, (keep - 1) * (ALPHA * a) + ALPHA * a * p
  end)
  if inplace then return x:mul_(mul):add_(add) end
  return x * mul + add
end
local DROP = { 'p', 'training', 'inplace' }
--- alpha_dropout(x, p=0.5, training=false, inplace=false): SELU-preserving dropout
function M.alpha_dropout(x, ...)
  local p, training, inplace = args('alpha_dropout', DROP, { 0.5, false, false }, ...)
  return alpha_dropout_impl('alpha_dropout', x, p, training, inplace, false)
end
--- feature_alpha_dropout(x [N, C, *], p=0.5, training=false, inplace=false): whole channels
function M.feature_alpha_dropout(x, ...)
  local p, training, inplace = args('feature_alpha_dropout', DROP, { 0.5, false, false }, ...)
  return alpha_dropout_impl('feature_alpha_dropout', x, p, training, inplace, true)
end

--- dropout3d(x [N, C, D, H, W] or [C, D, H, W], p=0.5, training=true, inplace=false):
--- zeroes whole channels with probability p and scales the rest by 1/(1-p)
function M.dropout3d(x, ...)
  local fn = 'dropout3d'
  need_tensor(x, fn, 'input')
  local p, training, inplace = args(fn, DROP, { 0.5, true, false }, ...)
  if type(p) ~= 'number' or not (p >= 0 and p <= 1) then
    error(fmt('%s: dropout probability has to be between 0 and 1, but got %s', fn, got(p)), 2)
  end
  need_bool(training, fn, 'training')
  need_bool(inplace, fn, 'inplace')
  if x:dim() ~= 4 and x:dim() ~= 5 then
    error(fmt('%s: expected a 5-d [N, C, D, H, W] or 4-d [C, D, H, W] input, got shape %s', fn, shape_str(x)), 2)
  end
  if not training or p == 0 then return x end
  local F = require 'dpl.nn.functional'
  -- [N, C, D, H, W] as [N, C, D, H*W] (unbatched: [1, C, D, H*W]): dropout2d's channel mask
  local xs = x:size()
  local n = #xs
  local v = x:reshape(n == 5 and xs[1] or 1, xs[n - 3], xs[n - 2], xs[n - 1] * xs[n])
  local y = F.dropout2d(v, p, training, false):view(xs)
  if inplace then return x:copy_(y) end
  return y
end

---------------------------------------------------------------- bilinear
--- bilinear(x1 [*, in1], x2 [*, in2], weight [out, in1, in2] [, bias [out]]) -> [*, out]:
--- y_o = x1^T W_o x2 + b_o
function M.bilinear(x1, x2, w, b)
  local fn = 'bilinear'
  need_float(x1, fn, 'input1')
  need_float(x2, fn, 'input2')
  need_float(w, fn, 'weight')
  if b ~= nil then need_float(b, fn, 'bias') end
  if w:dim() ~= 3 then error(fmt('%s: weight must be 3-d [out, in1, in2], got shape %s', fn, shape_str(w)), 2) end
  local O, I1, I2 = w:size(1), w:size(2), w:size(3)
  if x1:dim() == 0 or x1:size(-1) ~= I1 then
    error(fmt('%s: input1 has shape %s, expected the last dim to be %d (weight %s)', fn, shape_str(x1), I1,
      shape_str(w)), 2)
  end
  if x2:dim() == 0 or x2:size(-1) ~= I2 then
    error(fmt('%s: input2 has shape %s, expected the last dim to be %d (weight %s)', fn, shape_str(x2), I2,
      shape_str(w)), 2)
  end
  local s1, s2 = x1:size(), x2:size()
  local same = #s1 == #s2
  if same then for i = 1, #s1 - 1 do if s1[i] ~= s2[i] then same = false end end end
  if not same then
    error(fmt('%s: input1 %s and input2 %s must have the same batch dims', fn, shape_str(x1), shape_str(x2)), 2)
  end
  if b ~= nil and (b:dim() ~= 1 or b:size(1) ~= O) then
    error(fmt('%s: bias has shape %s, expected [%d]', fn, shape_str(b), O), 2)
  end
  local a = x1:reshape(-1, I1)
  local c = x2:reshape(-1, I2)
  local n = a:size(1)
  -- (x1 W) as [n, out, in2], times x2, summed over in2
  local t = a:matmul(w:permute(2, 1, 3):reshape(I1, O * I2)):view(n, O, I2)
  local y = (t * c:unsqueeze(2)):sum(3)
  if b ~= nil then y = y + b end
  s1[#s1] = O
  return y:view(s1)
end

---------------------------------------------------------------- channel_shuffle
--- channel_shuffle(x [N, C, *], groups): [N, g, C/g, *] -> [N, C/g, g, *]
function M.channel_shuffle(x, groups)
  local fn = 'channel_shuffle'
  need_tensor(x, fn, 'input')
  if type(groups) ~= 'number' or groups ~= floor(groups) or groups < 1 or groups >= 2 ^ 53 then -- (inf: %d gave -2^63)
    error(fmt('%s: Number of groups to divide channels in must be positive. Value of groups: %s', fn, got(groups)), 2)
  end
  if x:dim() < 3 then
    error(fmt('%s: channel_shuffle expects input to have at least 3 dimensions, but got input with sizes %s', fn,
      shape_str(x)), 2)
  end
  local s = x:size()
  local C = s[2]
  if C % groups ~= 0 then
    error(fmt('%s: Number of channels must be divisible by groups. Got %d channels and %d groups.', fn, C, groups), 2)
  end
  local v = { s[1], groups, C / groups }
  for i = 3, #s do v[#v + 1] = s[i] end
  return x:reshape(v):transpose(2, 3):reshape(s)
end

---------------------------------------------------------------- embedding_bag
local EB_KEYS = keys('offsets', 'max_norm', 'norm_type', 'scale_grad_by_freq', 'mode', 'sparse',
  'per_sample_weights', 'include_last_offset', 'padding_idx')
local function int_list(t)
  if is_tensor(t) then return t:to('int64'):totable() end
  return t
end
-- embedding_bag's C pass with the bag bounds built as a tensor: [B, D], or nil when there is
-- no bag or no id (the general code returns those) or the C checks refuse the ids or bounds
local function eb_fill_fast(input, weight, offsets, psw, pad, mode, last)
  local ids = input:reshape(-1):to('int64'):contiguous()
  local L = tonumber(ids._numel)
  local bounds, B
  if offsets == nil then -- 2-d input: bags of N
    local N = input:size(2)
    B = input:size(1)
    bounds = T.empty({ B + 1 }, { dtype = 'int64' })
    local bp = ffi.cast('int64_t*', bounds._data)
    for b = 0, B do bp[b] = b * N + 1 end
  else
    local nb = offsets:size(1)
    B = last and nb - 1 or nb
    if B < 1 then return nil end
    if last then
      bounds = offsets:to('int64'):contiguous()
    else
      bounds = T.empty({ nb + 1 }, { dtype = 'int64' })
      bounds:narrow(1, 1, nb):copy_(offsets)
      ffi.cast('int64_t*', bounds._data)[nb] = L + 1
    end
  end
  if B < 1 or L == 0 then return nil end
  local out = T.empty({ B, weight:size(2) }, { dtype = weight.dtype })
  local st = C.dpl_embedding_bag_fill(weight:detach():contiguous(), ids, bounds,
    psw and psw:detach():reshape(-1):contiguous() or nil, pad or 0, mode == 'mean' and 1 or 0, out)
  if st ~= 0 then return nil end
  return out
end

--- embedding_bag(input, weight [V, D] [, offsets] [, {mode='mean'|'sum'|'max', offsets=,
--- per_sample_weights=, include_last_offset=false, padding_idx=}]): per bag, the sum, mean or
--- max of the rows of weight; input 2-d [B, N] (bags of N) or 1-d with offsets (1-based starts)
function M.embedding_bag(input, weight, offsets, opts)
  local fn = 'embedding_bag'
  if type(offsets) == 'table' and not is_tensor(offsets) and opts == nil
    and (next(offsets) == nil or type(next(offsets)) == 'string') then
    opts, offsets = offsets, nil -- embedding_bag(input, weight, {mode=, ...})
  end
  check_opts(opts, EB_KEYS, fn)
  opts = opts or {}
  if offsets == nil then offsets = opts.offsets elseif opts.offsets ~= nil then
    error(fmt('%s: offsets given twice (argument and option)', fn), 2)
  end
  require('dpl.nn.functional')._embedding_unsupported(opts, fn)
  need_tensor(input, fn, 'input')
  need_float(weight, fn, 'weight')
  if weight:dim() ~= 2 then error(fmt('%s: weight must be 2-d [num_embeddings, embedding_dim], got shape %s', fn,
    shape_str(weight)), 2) end
  if input:is_floating_point() or input.dtype == 'bool' then
    error(fmt('%s: expected an integer input of 1-based ids, got %s', fn, input.dtype), 2)
  end
  local mode = opts.mode or 'mean'
  if mode ~= 'sum' and mode ~= 'mean' and mode ~= 'max' then
    error(fmt("%s: mode has to be one of sum, mean or max, got '%s'", fn, tostring(mode)), 2)
  end
  local psw = opts.per_sample_weights
  if psw ~= nil then
    need_float(psw, fn, 'per_sample_weights')
    if mode ~= 'sum' then
      error(fmt("%s: per_sample_weights was not None. per_sample_weights is only supported for mode='sum' "
        .. "(got mode='%s')", fn, mode), 2)
    end
    local same = psw:dim() == input:dim()
    if same then for i = 1, psw:dim() do if psw:size(i) ~= input:size(i) then same = false end end end
    if not same then
      error(fmt('%s: per_sample_weights has shape %s, expected the input shape %s', fn, shape_str(psw),
        shape_str(input)), 2)
    end
  end
  need_bool(opts.include_last_offset, fn, 'include_last_offset')
  local V, D = weight:size(1), weight:size(2)
  local pad = opts.padding_idx
  if pad ~= nil then pad = require('dpl.nn.functional')._padding_row(pad, V, fn) end
  -- sum / mean on the CPU without a gradient to record, offsets a tensor (or a 2-d input): the
  -- bag bounds as a tensor and one C pass (dpl_embedding_bag_fill checks the ids and bounds; when
  -- it refuses them, the code below finds the error and reports it)
  if mode ~= 'max' and weight._devtype == 0 and (weight.dtype == 'float32' or weight.dtype == 'float64')
    and input._devtype == 0 and (input:dim() == 2 and offsets == nil
      or input:dim() == 1 and is_tensor(offsets) and offsets:dim() == 1 and offsets._devtype == 0)
    and (psw == nil or (psw.dtype == weight.dtype and psw._devtype == 0))
    and not (autograd.is_grad_enabled() and (weight.requires_grad or (psw ~= nil and psw.requires_grad))) then
    local out = eb_fill_fast(input, weight, offsets, psw, pad, mode, opts.include_last_offset)
    if out then return out end
  end
  local ids, starts
  if input:dim() == 2 then
    if offsets ~= nil then
      error(fmt('%s: if input is 2D, then offsets has to be None, as input is treated is a mini-batch of fixed '
        .. 'length sequences. However, found offsets of type %s', fn, is_tensor(offsets) and 'Tensor' or type(offsets)), 2)
    end
    local B, N = input:size(1), input:size(2)
    ids = input:reshape(-1)
    starts = {}
    for i = 1, B do starts[i] = (i - 1) * N + 1 end
    if psw ~= nil then psw = psw:reshape(-1) end
  elseif input:dim() == 1 then
    if offsets == nil then error(fmt('%s: offsets has to be a 1D Tensor but got None', fn), 2) end
    if is_tensor(offsets) and offsets:dim() ~= 1 then
      error(fmt('%s: offsets has to be a 1D Tensor, got shape %s', fn, shape_str(offsets)), 2)
    end
    ids = input
    starts = int_list(offsets)
    if type(starts) ~= 'table' then error(fmt('%s: offsets must be a 1-d tensor or a list, got %s', fn, got(offsets)), 2) end
  else
    error(fmt('%s: input has to be 1D or 2D Tensor, but got Tensor of dimension %d', fn, input:dim()), 2)
  end
  local L = ids:numel()
  if #starts > 0 and starts[1] ~= 1 then
    error(fmt('%s: offsets[1] has to be 1, i.e., the first sequence in the mini-batch has to start from position 1. '
      .. 'However, got %s', fn, tostring(starts[1])), 2)
  end
  for i, s in ipairs(starts) do
    if type(s) ~= 'number' or s ~= floor(s) or s < 1 or s > L + 1 or (i > 1 and s < starts[i - 1]) then
      error(fmt('%s: offsets must be non-decreasing 1-based start positions in 1..%d, got %s at %d', fn, L + 1,
        tostring(s), i), 2)
    end
  end
  local B = #starts
  if opts.include_last_offset then
    if B < 1 then error(fmt('%s: include_last_offset: number of offsets should be at least 1', fn), 2) end
    B = B - 1
  end
  local ends = {} -- bag b covers ids starts[b] .. ends[b]
  for b = 1, B do ends[b] = (b < #starts) and starts[b + 1] - 1 or L end
  if L > 0 then
    local lo, hi = ids:min():item(), ids:max():item()
    if lo < 1 or hi > V then
      error(fmt('%s: index %d is out of range for a weight of %d rows (ids are 1-based)', fn, lo < 1 and lo or hi, V), 2)
    end
  end
  local idl = ids:to('int64'):contiguous()
  local o = { dtype = weight.dtype, device = weight.device }
  if B == 0 then return T.zeros({ 0, D }, o) end
  if L == 0 then return T.zeros({ B, D }, o) end
  -- sum / mean on the CPU without a gradient to record: one C pass over the bags
  -- (dpl_embedding_bag_fill, the composite's operations in its order), no [L, D] gather
  if mode ~= 'max' and weight._devtype == 0 and (weight.dtype == 'float32' or weight.dtype == 'float64')
    and (psw == nil or (psw.dtype == weight.dtype and psw._devtype == 0))
    and not (autograd.is_grad_enabled() and (weight.requires_grad or (psw ~= nil and psw.requires_grad))) then
    local bounds = T.empty({ B + 1 }, { dtype = 'int64' })
    local bp = ffi.cast('int64_t*', bounds._data)
    for b = 1, B do bp[b - 1] = starts[b] end
    bp[B] = B < #starts and starts[B + 1] or L + 1
    local out = T.empty({ B, D }, o)
    local w = weight:detach():contiguous()
    local st = C.dpl_embedding_bag_fill(w, idl, bounds, psw and psw:detach():contiguous() or nil, pad or 0,
      mode == 'mean' and 1 or 0, out)
    if st ~= 0 then T._fail(2, st) end
    return out
  end
  local rows = weight:index_select(1, idl:to(weight.device)) -- [L, D]
  local keep
  if pad ~= nil then keep = autograd.no_grad(function() return idl:ne(pad):to(weight.dtype):to(weight.device) end) end
  if mode == 'max' then
    local ks = keep and keep:totable()
    local outs = {}
    for b = 1, B do
      local sel = {}
      for i = starts[b], ends[b] do if not ks or ks[i] == 1 then sel[#sel + 1] = i end end
      if #sel == 0 then
        outs[b] = T.zeros(D, o)
      else
        outs[b] = rows:index_select(1, T.tensor(sel, { dtype = 'int64', device = weight.device })):max(1)
      end
    end
    return T.stack(outs)
  end
  if psw ~= nil then rows = rows * psw:reshape(-1, 1) end
  if keep then rows = rows * keep:unsqueeze(2) end
  local bag = {}
  for b = 1, B do for i = starts[b], ends[b] do bag[i] = b end end
  local bt = T.tensor(bag, { dtype = 'int64', device = weight.device })
  if #bag < L then -- ids after the last bag (include_last_offset with a last offset < L + 1)
    rows = rows:narrow(1, 1, #bag)
  end
  local out = T.zeros({ B, D }, { dtype = rows.dtype, device = weight.device }):index_add(1, bt, rows)
  if mode == 'mean' then
    local cnt = {}
    local ks = keep and keep:totable()
    for b = 1, B do
      local c = 0
      for i = starts[b], ends[b] do if not ks or ks[i] == 1 then c = c + 1 end end
      cnt[b] = c > 0 and c or 1
    end
    out = out / T.tensor(cnt, o):unsqueeze(2)
  end
  return out
end

---------------------------------------------------------------- triplet_margin_with_distance_loss
local TMD_KEYS = keys('distance_function', 'margin', 'swap', 'reduction')
--- triplet_margin_with_distance_loss(anchor, positive, negative [, {distance_function=
--- pairwise_distance, margin=1, swap=false, reduction='mean'}]):
--- max(d(a, p) - d(a, n) + margin, 0)
function M.triplet_margin_with_distance_loss(a, pos, neg, opts, who)
  local fn = who or 'triplet_margin_with_distance_loss'
  check_opts(opts, TMD_KEYS, fn)
  opts = opts or {}
  need_tensor(a, fn, 'anchor')
  need_tensor(pos, fn, 'positive')
  need_tensor(neg, fn, 'negative')
  local dist = opts.distance_function
  if dist ~= nil and type(dist) ~= 'function' and not (type(dist) == 'table' and getmetatable(dist)
    and getmetatable(dist).__call) then
    error(fmt('%s: distance_function must be a function or a module, got %s', fn, type(dist)), 2)
  end
  local margin = opts.margin or 1.0
  need_num(margin, fn, 'margin')
  if margin <= 0 then error(fmt('%s: margin must be greater than 0, got %s', fn, tostring(margin)), 2) end
  need_bool(opts.swap, fn, 'swap')
  local red = opts.reduction or 'mean'
  if red ~= 'mean' and red ~= 'sum' and red ~= 'none' then
    error(fmt("%s: %s is not a valid value for reduction", fn, tostring(red)), 2)
  end
  local nd = a:dim()
  if pos:dim() ~= nd or neg:dim() ~= nd then
    error(fmt('%s: The anchor, positive, and negative tensors are expected to have the same number of dimensions, '
      .. 'but got: anchor %dD, positive %dD, and negative %dD inputs', fn, nd, pos:dim(), neg:dim()), 2)
  end
  dist = dist or require('dpl.nn.functional').pairwise_distance
  local dp, dn = dist(a, pos), dist(a, neg)
  if opts.swap then dn = T.minimum(dn, dist(pos, neg)) end
  local loss = (dp - dn + margin):clamp_min(0)
  if red == 'mean' then return loss:mean() end
  if red == 'sum' then return loss:sum() end
  return loss
end

local NAMES = { 'hardshrink', 'softshrink', 'rrelu', 'rrelu_', 'alpha_dropout', 'feature_alpha_dropout', 'dropout3d',
  'bilinear', 'channel_shuffle', 'embedding_bag', 'triplet_margin_with_distance_loss' }
function M.install(F)
  for _, name in ipairs(NAMES) do F[name] = M[name] end
  return F
end

return M
