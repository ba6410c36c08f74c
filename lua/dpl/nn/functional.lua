-- dpl.nn.functional: stateless layer functions (PyTorch's torch.nn.functional).
-- Class labels are 1-based. Everything here is differentiable through dpl.autograd.
local T = require 'dpl.tensor'
local autograd = require 'dpl.autograd'
local amp = require 'dpl.amp'
local options = require 'dpl.options'

local fmt = string.format

-- Errors are objects whose tostring reads "ClassName: message" (DESIGN.md).
local errors = require 'dpl.errors'
local lua_error = error
local error = errors.raise -- string messages become ValueError objects
local is_tensor = T.is_tensor

local F = {}

local function check_tensor(x, fn, what)
  if not is_tensor(x) then error(fmt('%s: %s must be a tensor, got %s', fn, what or 'input', type(x)), 3) end
end

-- an optional tensor argument (nil or a tensor)
local function check_opt_tensor(x, fn, what)
  if x ~= nil and not is_tensor(x) then error(fmt('%s: %s must be a tensor or nil, got %s', fn, what, type(x)), 3) end
end

-- options tables: nil or a table of the function's keys (an unknown key is an error)
local check_opts, keys = options.check, options.keys
local RED = keys('reduction')
local K = {
  gelu = keys('approximate'),
  conv2d = keys('stride', 'padding', 'dilation', 'groups'),
  max_pool2d = keys('stride', 'padding', 'ceil_mode', 'return_indices'),
  avg_pool2d = keys('stride', 'padding', 'ceil_mode', 'count_include_pad'),
  embedding = keys('padding_idx'),
  cross_entropy = keys(RED, 'label_smoothing', 'ignore_index', 'weight'),
  nll_loss = keys(RED, 'ignore_index', 'weight'),
  mse_loss = RED,
  l1_loss = RED,
  smooth_l1_loss = keys(RED, 'beta'),
  binary_cross_entropy = keys(RED, 'weight'),
  binary_cross_entropy_with_logits = keys(RED, 'weight', 'pos_weight'),
}
F._option_keys = K -- (the loss modules check their options at construction)

local function shape_str(t) return '[' .. table.concat(t:size(), ', ') .. ']' end
F._shape_str = shape_str

---------------------------------------------------------------- activations
function F.relu(x) return x:relu() end
--- gelu(x [, {approximate='none'|'tanh'}])
local function check_approximate(a, fn)
  if a ~= nil and a ~= 'none' and a ~= 'tanh' then
    error(fmt("%s: approximate must be 'none' or 'tanh', got %s", fn,
      type(a) == 'string' and ("'" .. a .. "'") or tostring(a)), 3)
  end
end
F._check_approximate = check_approximate
function F.gelu(x, opts)
  check_opts(opts, K.gelu, 'gelu')
  check_approximate(opts and opts.approximate, 'gelu')
  if opts and opts.approximate == 'tanh' then
    local c = math.sqrt(2 / math.pi)
    return x * 0.5 * ((x + x * x * x * 0.044715) * c):tanh():add(1)
  end
  return x:gelu()
end
function F.tanh(x) return x:tanh() end
function F.sigmoid(x) return x:sigmoid() end
function F.silu(x) return x:silu() end
-- the activations of dpl.tensor_math (C kernels, their own gradients), PyTorch's signatures:
-- F.elu(x, alpha, inplace) or F.elu(x, {alpha=, inplace=}); inplace = true runs x:elu_()
F._act_keys = {} -- (the modules check their options with these)
local ACTS = {
  hardtanh = { 'min_val', 'max_val' }, softplus = { 'beta', 'threshold', no_inplace = true }, elu = { 'alpha' },
  leaky_relu = { 'negative_slope' }, mish = {}, hardswish = {},
}
for name, ps in pairs(ACTS) do
  local np = #ps
  local accepted = keys(ps[1] or {}, ps[2] or {}, ps.no_inplace and {} or 'inplace')
  F._act_keys[name] = accepted
  F[name] = function(x, a1, a2, a3, a4)
    check_tensor(x, name)
    local p1, p2, inplace
    if type(a1) == 'table' and not is_tensor(a1) then
      if a2 ~= nil then error(fmt('%s: the options table must be the last argument', name), 2) end
      check_opts(a1, accepted, name)
      p1, p2, inplace = a1[ps[1] or 1], a1[ps[2] or 1], a1.inplace
    else
      local args = { a1, a2, a3 }
      p1, p2, inplace = np >= 1 and a1 or nil, np >= 2 and a2 or nil, args[np + 1]
      if a4 ~= nil or args[np + 2] ~= nil then error(fmt('%s: too many arguments', name), 2) end
      if ps.no_inplace and inplace ~= nil then error(fmt('%s: too many arguments (expected %s)', name,
        table.concat(ps, ', ')), 2) end
    end
    if inplace ~= nil and type(inplace) ~= 'boolean' then
      error(fmt('%s: inplace must be a boolean, got %s', name, type(inplace)), 2)
    end
    if inplace then return x[name .. '_'](x, p1, p2) end
    return x[name](x, p1, p2)
  end
  if not ps.no_inplace then
    F[name .. '_'] = function(x, a1, a2)
      check_tensor(x, name .. '_')
      return x[name .. '_'](x, a1, a2)
    end
  end
end
--- softmax(x [, dim=-1 [, dtype]]) / log_softmax: dtype (a dtype name, or {dtype=}; also
--- PyTorch's positional order (x, dim, _stacklevel, dtype)) casts x first, as PyTorch does.
local SOFTMAX_KEYS = keys('dtype')
local function softmax_dtype(fn, a, b)
  local dt = a
  if type(a) == 'number' then dt = b -- (PyTorch's _stacklevel, then dtype)
  elseif b ~= nil then error(fmt('%s: too many arguments (expected x, dim, dtype)', fn), 3) end
  if type(dt) == 'table' and not is_tensor(dt) then
    check_opts(dt, SOFTMAX_KEYS, fn)
    dt = dt.dtype
  end
  if dt ~= nil and type(dt) ~= 'string' then
    error(fmt('%s: dtype must be a dtype name such as \'float64\', got %s', fn, type(dt)), 3)
  end
  return dt
end
function F.softmax(x, dim, a, b)
  local dt = softmax_dtype('softmax', a, b)
  if dt then x = x:to(dt) end
  return x:softmax(dim or -1)
end
function F.log_softmax(x, dim, a, b)
  local dt = softmax_dtype('log_softmax', a, b)
  if dt then x = x:to(dt) end
  return x:log_softmax(dim or -1)
end

---------------------------------------------------------------- linear, conv, pooling
--- linear(x [..., in], weight [out, in], bias [out] or nil)
function F.linear(x, w, b)
  check_tensor(w, 'linear', 'weight')
  check_opt_tensor(b, 'linear', 'bias')
  if w:dim() ~= 2 then error(fmt('linear: weight must be 2-d [out_features, in_features], got shape %s', shape_str(w)), 2) end
  local inf = w:size(2)
  if x:dim() == 0 or x:size(-1) ~= inf then
    error(fmt('linear: input has shape %s, expected the last dim to be %d (weight %s)', shape_str(x), inf,
      shape_str(w)), 2)
  end
  if amp.dtype then return autograd.linear(amp.cast(x), amp.cast(w), amp.cast(b)) end
  return autograd.linear(x, w, b)
end

--- conv2d(x [N, C, H, W], weight [O, C/groups, kh, kw], bias, {stride=, padding=, dilation=, groups=})
function F.conv2d(x, w, b, opts)
  check_tensor(w, 'conv2d', 'weight')
  check_opt_tensor(b, 'conv2d', 'bias')
  -- (T.conv2d checks opts)
  if type(opts) == 'table' and type(opts.padding) == 'string' then
    -- PyTorch's padding='valid' | 'same' (stride 1; an odd total pads one more on the right/bottom)
    local pad = opts.padding
    if pad ~= 'same' and pad ~= 'valid' then
      error(fmt("conv2d: invalid padding string '%s', should be one of 'valid', 'same'", pad), 2)
    end
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    o.padding = 0
    if pad == 'same' then
      local st = opts.stride or 1
      local sh, sw = st, st
      if type(st) == 'table' then sh, sw = st[1], st[2] end
      if sh ~= 1 or sw ~= 1 then error("conv2d: padding='same' is not supported for strided convolutions", 2) end
      if w:dim() ~= 4 then
        error(fmt('conv2d: weight must be 4-d [out_channels, in_channels/groups, kh, kw], got %s', shape_str(w)), 2)
      end
      local dl = opts.dilation or 1
      local dh, dw = dl, dl
      if type(dl) == 'table' then dh, dw = dl[1], dl[2] end
      if type(dh) ~= 'number' or type(dw) ~= 'number' then
        error('conv2d: dilation must be an integer or a pair of integers {h, w}', 2)
      end
      local th, tw = dh * (w:size(3) - 1), dw * (w:size(4) - 1)
      local ph, pw = math.floor(th / 2), math.floor(tw / 2)
      if th % 2 == 0 and tw % 2 == 0 then
        o.padding = { ph, pw }
      else
        x = F.pad(x, { pw, tw - pw, ph, th - ph })
      end
    end
    opts = o
  end
  -- an unbatched [C, H, W] input, as PyTorch's (and nn.Conv2d's)
  local unb = T.is_tensor(x) and x:dim() == 3
  if unb then x = x:unsqueeze(1) end
  if amp.dtype then x, w, b = amp.cast(x), amp.cast(w), amp.cast(b) end
  local y = T.conv2d(x, w, b, opts)
  if unb then y = y:squeeze(1) end
  return y
end

-- PyTorch's pooling options that the 2-d kernels lack (max_pool2d's dilation, avg_pool2d's
-- divisor_override): their default is accepted and dropped, another value is a NotImplementedError
-- (not an 'unknown option'). Returns opts, or a copy without them.
local function pool_opts(opts, fn, max)
  if type(opts) ~= 'table' then return opts end
  local key = max and 'dilation' or 'divisor_override'
  local v = opts[key]
  if v == nil then return opts end
  local default
  if max then
    default = v == 1 or (type(v) == 'table' and v[1] == 1 and v[2] == 1 and v[3] == nil)
  else
    default = v == false
  end
  if not default then
    local shown = tostring(v)
    if type(v) == 'table' then
      local p = {}
      for i = 1, #v do p[i] = tostring(v[i]) end
      shown = '{' .. table.concat(p, ', ') .. '}'
    end
    error(fmt('%s: %s = %s is not implemented in dplhost%s', fn, key, shown,
      max and ' (max_pool1d / MaxPool1d have dilation)' or ''), errors.NotImplementedError)
  end
  local o = {}
  for k2, v2 in pairs(opts) do if k2 ~= key then o[k2] = v2 end end
  return o
end
F._pool_opts = pool_opts

--- max_pool2d(x, kernel_size, {stride=kernel_size, padding=0, ceil_mode=false}) -> values
--- (indices: return_indices=true)
function F.max_pool2d(x, k, opts)
  opts = pool_opts(opts, 'max_pool2d', true)
  check_opts(opts, K.max_pool2d, 'max_pool2d')
  if T.is_tensor(x) and x:dim() == 3 then -- unbatched [C, H, W], as PyTorch's
    local v, i = F.max_pool2d(x:unsqueeze(1), k, opts)
    if i ~= nil then return v:squeeze(1), i:squeeze(1) end
    return v:squeeze(1)
  end
  if not (opts and opts.return_indices) then
    -- without grad, the strided-views path is ~6x faster than the C loop (with grad, its
    -- argmax bookkeeping on strided views costs more than the C kernel)
    if not (x.requires_grad and autograd.is_grad_enabled()) then
      local fast, kh, kw = autograd.pool_fast_ok(x, k, opts)
      if fast then return autograd.max_pool2d_views(x, kh, kw) end
    end
  end
  local v, i = T.max_pool2d(x, k, opts)
  -- the positions in each H x W plane, 1-based (dplhost's index convention; PyTorch's + 1)
  if opts and opts.return_indices then return v, i + 1 end
  return v
end
--- avg_pool2d(x, kernel_size, {stride=kernel_size, padding=0, ceil_mode=false, count_include_pad=true})
function F.avg_pool2d(x, k, opts) -- (T.avg_pool2d checks opts)
  opts = pool_opts(opts, 'avg_pool2d', false)
  if T.is_tensor(x) and x:dim() == 3 then return T.avg_pool2d(x:unsqueeze(1), k, opts):squeeze(1) end -- [C, H, W]
  return T.avg_pool2d(x, k, opts)
end

function F.flatten(x, s, e) return x:flatten(s or 2, e or -1) end

---------------------------------------------------------------- dropout, normalisation
--- dropout(x, p=0.5, training=true): zeroes elements with probability p, scales by 1/(1-p).
function F.dropout(x, p, training)
  p = p or 0.5
  if type(p) ~= 'number' or p < 0 or p > 1 then
    error(fmt('dropout: probability has to be between 0 and 1, but got %s', tostring(p)), 2)
  end
  if training == false or p == 0 then return x end
  if p == 1 then return x * 0 end
  -- float32/float64 on the CPU: the fused kernel (the same draws, mask and numbers); a
  -- non-contiguous x (the transposed attention output of batch_first MultiheadAttention) through
  -- a contiguous copy: the composed form's mask (empty_like: contiguous) is drawn in the same
  -- logical order, so the bits are the same. Other dtypes and devices: the composed form
  if is_tensor(x) and x._devtype == 0 and x._dtype <= 1 then
    return T.dropout(x:is_contiguous() and x or x:contiguous(), p)
  end
  local mask = autograd.no_grad(function()
    return T.empty_like(x):bernoulli_(1 - p):div_(1 - p)
  end)
  return x * mask
end

--- group_norm(x [N, C, *], num_groups, weight [C] or nil, bias [C] or nil, eps=1e-5) (or
--- group_norm(x, num_groups, {weight=, bias=, eps=})): each sample's channels in num_groups
--- groups, each normalised over its channels and positions (biased variance), then the
--- per-channel affine map. nn.GroupNorm's forward. Composed of tensor ops (autograd differentiates it).
local GN_KEYS = keys('weight', 'bias', 'eps')
function F.group_norm(x, G, w, b, eps)
  if type(w) == 'table' and not is_tensor(w) then
    if b ~= nil or eps ~= nil then error('group_norm: the options table must be the last argument', 2) end
    check_opts(w, GN_KEYS, 'group_norm')
    w, b, eps = w.weight, w.bias, w.eps
  end
  if type(G) ~= 'number' or G ~= math.floor(G) or G < 1 or G >= 2 ^ 53 then -- (inf: %d gave -2^63)
    error(fmt('group_norm: num_groups must be a positive integer, got %s', tostring(G)), 2)
  end
  check_opt_tensor(w, 'group_norm', 'weight')
  check_opt_tensor(b, 'group_norm', 'bias')
  if eps == nil then eps = 1e-5 end
  if type(eps) ~= 'number' then error(fmt('group_norm: eps must be a number, got %s', type(eps)), 2) end
  if x:dim() < 2 then
    error(fmt('group_norm: expected an input of at least 2 dims [N, C, *], got shape %s', shape_str(x)), 2)
  end
  local N, Cn, nd = x:size(1), x:size(2), x:dim()
  if Cn % G ~= 0 then
    error(fmt('group_norm: expected the number of channels of input %s (%d) to be divisible by num_groups (%d)',
      shape_str(x), Cn, G), 2)
  end
  for _, p in ipairs({ { w, 'weight' }, { b, 'bias' } }) do
    if p[1] ~= nil and (p[1]:dim() ~= 1 or p[1]:size(1) ~= Cn) then
      error(fmt('group_norm: expected %s of shape [%d], got %s', p[2], Cn, shape_str(p[1])), 2)
    end
  end
  local xg = x:reshape(N, G, -1)
  local xc = xg - xg:mean(3, true)
  local var = (xc * xc):mean(3, true)
  local y = (xc * (var + eps):rsqrt()):reshape(x:size())
  if w ~= nil or b ~= nil then
    local shape = { 1, Cn }
    for _ = 3, nd do shape[#shape + 1] = 1 end
    if w ~= nil then y = y * w:view(shape) end
    if b ~= nil then y = y + b:view(shape) end
  end
  return y
end

--- layer_norm(x, normalized_shape, weight, bias, eps=1e-5)
function F.layer_norm(x, shape, w, b, eps)
  if type(shape) ~= 'number' and type(shape) ~= 'table' then
    error(fmt('layer_norm: normalized_shape must be a number or a list of sizes, got %s', type(shape)), 2)
  end
  check_opt_tensor(w, 'layer_norm', 'weight')
  check_opt_tensor(b, 'layer_norm', 'bias')
  if eps ~= nil and type(eps) ~= 'number' then error(fmt('layer_norm: eps must be a number, got %s', type(eps)), 2) end
  eps = eps or 1e-5
  if type(shape) == 'number' then shape = { shape } end
  local k = #shape
  local nd = x:dim()
  for i = 1, k do
    if x:size(nd - k + i) ~= shape[i] then
      error(fmt('layer_norm: input has shape %s, expected the last dims to be [%s]', shape_str(x),
        table.concat(shape, ', ')), 2)
    end
  end
  -- the fused op (dpl_layer_norm) when x, w and b agree in floating dtype and device;
  -- otherwise (mixed dtypes: promotion) the composed formula below
  local n = 1
  for i = 1, k do n = n * shape[i] end
  local function agrees(p)
    return p == nil or (is_tensor(p) and p._dtype == x._dtype and p._devtype == x._devtype
      and p._devindex == x._devindex)
  end
  if x._dtype <= 3 and agrees(w) and agrees(b) then return (T.layer_norm(x, w, b, n, eps)) end
  local s = {}
  for i = 1, nd - k do s[i] = x:size(i) end
  s[#s + 1] = -1
  local flat = x:reshape(s)
  local mu = flat:mean(-1, true)
  local xc = flat - mu
  local var = (xc * xc):mean(-1, true)
  local y = (xc * (var + eps):rsqrt()):reshape(x:size())
  if w then y = y * w end
  if b then y = y + b end
  return y
end

-- batch_norm with batch statistics as one recorded op: the statistics as before, then x seen as
-- [N, C, R], the centred input kept for a closed-form backward (PyTorch's
-- formulas: gx = w * invstd * (g - mean(g) - xc * invstd^2 * mean(g * xc)), gw = sum(g * xc) *
-- invstd, gb = sum(g)); the composed ops took ~3x PyTorch's time on a CNN's BatchNorm2d
local function bn_agrees(x, p)
  return p == nil or (is_tensor(p) and p._dtype == x._dtype and p._devtype == x._devtype and p._devindex == x._devindex)
end
local function chan_sum(t3) return t3:sum(3):sum(1) end -- [N, C, R] -> [C]
local bn_rule = {
  nin = 3, name = 'batch_norm',
  save = function(n, out, x, w, b, xc, inv, M) n.xc, n.inv, n.w, n.M, n.shape = xc, inv, w, M, x:size() end,
  bw = function(n, g)
    local xc, inv, M = n.xc, n.inv, n.M
    local N, C, R = xc:size(1), xc:size(2), xc:size(3)
    local g3 = g:reshape(N, C, R)
    local gb = chan_sum(g3)
    local sgx = chan_sum(g3 * xc) -- sum(g * xc) per channel
    local gx, gw
    if n[1] then
      local scale = n.w and inv * n.w or inv
      local k = (inv * inv * sgx):div_(M):view(1, C, 1)
      gx = (g3 - xc * k):sub_((gb / M):view(1, C, 1)):mul_(scale:view(1, C, 1)):view(n.shape)
    end
    if n[2] then gw = sgx * inv end
    return gx, gw, n[3] and gb or nil
  end,
}
local function bn_batch_stats(x, rm, rv, w, b, training, momentum, eps, C)
  local prev = autograd.set_grad_enabled(false)
  local ok, y, xc, inv, M = pcall(function()
    local N = x:size(1)
    local M = x:numel() / C
    -- the statistics as the composed path computes them (a [C, M] copy, row means): the same
    -- bits as before, and as SyncBatchNorm's on one rank
    local xt = x:transpose(1, 2):reshape(C, -1)
    local mean = xt:mean(2)
    local xtc = xt - mean:view(C, 1)
    local var = (xtc * xtc):mean(2)
    local xc = x:reshape(N, C, M / N) - mean:view(1, C, 1)
    if training and rm then
      rm:mul_(1 - momentum):add_(mean * momentum)
      rv:mul_(1 - momentum):add_(var * (momentum * M / math.max(M - 1, 1)))
    end
    local inv = (var + eps):rsqrt()
    local y = xc * inv:view(1, C, 1) -- (then w and b in place: the composed path's roundings)
    if w then y:mul_(w:view(1, C, 1)) end
    if b then y:add_(b:view(1, C, 1)) end
    return y:view(x:size()), xc, inv, M
  end)
  autograd.set_grad_enabled(prev)
  if not ok then error(y) end
  return autograd.record(bn_rule, y, x, w, b, xc, inv, M)
end

-- the C kernel (dpl_batch_norm) for contiguous float32/float64 CPU tensors (the running stats
-- too, when updated): the same statistics' bits and output roundings as bn_batch_stats, one pass
-- each for the mean, the variance and the output; x, mean and invstd kept for a backward of two
-- passes. GPU tensors, other dtypes and layouts keep bn_batch_stats.
local function bn_c_ok(x, p) return p == nil or (p._devtype == 0 and p:is_contiguous()) end
local bn_c_rule = {
  nin = 3, name = 'batch_norm',
  save = function(n, out, x, w, b, m, inv) n.x, n.w, n.m, n.inv = x, w, m, inv end,
  bw = function(n, g)
    return T.batch_norm_backward(g, n.x, n.m, n.inv, n.w, { x = n[1], w = n[2], b = n[3] })
  end,
}
local function bn_kernel(x, rm, rv, w, b, training, momentum, eps)
  if not (training and rm) then rm, rv = nil, nil end
  local prev = autograd.set_grad_enabled(false)
  local ok, y, m, inv = pcall(T.batch_norm, x, w, b, rm, rv, momentum, eps)
  autograd.set_grad_enabled(prev)
  if not ok then error(y) end
  return autograd.record(bn_c_rule, y, x, w, b, m, inv)
end

--- batch_norm(x, running_mean, running_var, weight, bias, training, momentum=0.1, eps=1e-5)
--- x is [N, C] or [N, C, ...]; statistics are per channel (dim 2).
function F.batch_norm(x, rm, rv, w, b, training, momentum, eps)
  check_opt_tensor(rm, 'batch_norm', 'running_mean')
  check_opt_tensor(rv, 'batch_norm', 'running_var')
  check_opt_tensor(w, 'batch_norm', 'weight')
  check_opt_tensor(b, 'batch_norm', 'bias')
  if (rm == nil) ~= (rv == nil) then
    error(fmt('batch_norm: running_mean and running_var are given together or not at all, got %s and %s',
      rm == nil and 'nil' or 'a tensor', rv == nil and 'nil' or 'a tensor'), 2)
  end
  momentum, eps = momentum or 0.1, eps or 1e-5
  check_tensor(x, 'batch_norm')
  local nd = x:dim()
  if nd < 2 then error(fmt('batch_norm: input has shape %s, expected [N, C, ...]', shape_str(x)), 2) end
  local C = x:size(2)
  if training and x:numel() == C then -- PyTorch's _verify_batch_size: the variance of one value is 0/0
    error(fmt('batch_norm: expected more than 1 value per channel when training, got input size %s',
      shape_str(x)), 2)
  end
  if x._dtype == 2 or x._dtype == 3 then
    -- float16/bfloat16 batch statistics in float32 (as PyTorch's kernels, which accumulate in
    -- float): the variance of small activations and rsqrt's gradient (-0.5 var^-1.5) leave
    -- float16's range (the gradient was inf/NaN for activations of ~0.03, so a 16-mixed
    -- GradScaler skipped every step); the output keeps x's dtype, as PyTorch's
    local function f32(t)
      if t == nil or t._dtype == 0 then return t end
      return t:to('float32')
    end
    local rm32, rv32 = f32(rm), f32(rv)
    local y = F.batch_norm(x:to('float32'), rm32, rv32, f32(w), f32(b), training, momentum, eps)
    if rm32 ~= rm or rv32 ~= rv then
      autograd.no_grad(function()
        if rm32 ~= rm then rm:copy_(rm32) end
        if rv32 ~= rv then rv:copy_(rv32) end
      end)
    end
    return y:to(x.dtype)
  end
  if (training or not rm) and not amp.dtype and x._dtype <= 3 and x:numel() > 0 and bn_agrees(x, w) and bn_agrees(x, b)
    and bn_agrees(x, rm) and bn_agrees(x, rv) then
    if x._dtype <= 1 and x._devtype == 0 and x:is_contiguous() and x:numel() > C and bn_c_ok(x, w) and bn_c_ok(x, b)
      and (not (training and rm) or (rv and bn_c_ok(x, rm) and bn_c_ok(x, rv))) then
      return bn_kernel(x, rm, rv, w, b, training, momentum, eps)
    end
    return bn_batch_stats(x, rm, rv, w, b, training, momentum, eps, C)
  end
  local shape = { 1, C }
  for _ = 3, nd do shape[#shape + 1] = 1 end
  local mean, var
  if training or not rm then
    -- [C, rest] view: move channels first
    local xt = x:transpose(1, 2):reshape(C, -1)
    mean = xt:mean(2)
    local xc = xt - mean:view(C, 1)
    var = (xc * xc):mean(2)
    if training and rm then
      local n = xt:size(2)
      autograd.no_grad(function()
        rm:mul_(1 - momentum):add_(mean:detach() * momentum)
        rv:mul_(1 - momentum):add_(var:detach() * (momentum * n / math.max(n - 1, 1)))
      end)
    end
  else
    mean, var = rm, rv
  end
  local y = (x - mean:view(shape)) * (var:view(shape) + eps):rsqrt()
  if w then y = y * w:view(shape) end
  if b then y = y + b:view(shape) end
  return y
end

-- embedding with a padding row: T.embedding's forward, and a backward that leaves the
-- padding row's gradient zero (as PyTorch: the row stays as it is in training)
local embedding_pad_rule = {
  nin = 1, name = 'embedding',
  save = function(n, out, w, idx, pad) n.idx, n.V, n.pad = idx, tonumber(w._shape[0]), pad end,
  bw = function(n, g)
    local gw = T.embedding_backward(g, n.idx, n.V)
    gw:select(1, n.pad):zero_()
    return gw
  end,
}

--- padding_idx as a row of a [V, D] weight: an integer in 1..V or -V..-1 (from the end)
function F._padding_row(pad, V, fn)
  if type(pad) ~= 'number' or pad ~= math.floor(pad) or pad == 0 or pad < -V or pad > V then
    error(fmt('%s: padding_idx must be an integer in 1..%d (or -%d..-1 from the end), got %s', fn, V, V,
      tostring(pad)), 3)
  end
  return pad < 0 and V + 1 + pad or pad
end

-- PyTorch's Embedding options dplhost does not implement: NotImplementedError naming them
-- (rather than "unknown option")
local EMB_UNSUPPORTED = { 'max_norm', 'norm_type', 'scale_grad_by_freq', 'sparse' }
function F._embedding_unsupported(opts, fn)
  if type(opts) ~= 'table' then return end
  for _, k in ipairs(EMB_UNSUPPORTED) do
    local v = opts[k]
    if v ~= nil and v ~= false and not (k == 'norm_type' and v == 2) then
      lua_error(errors.NotImplementedError(fmt('%s: %s is not implemented in dplhost (renormalising looked-up rows, '
        .. 'frequency-scaled and sparse gradients are not supported)', fn, k)), 0)
    end
  end
end

--- the lookup, pad: nil or the padding row (1-based, checked)
function F._embedding(weight, idx, pad)
  if pad == nil or not (weight.requires_grad and autograd.is_grad_enabled()) then return T.embedding(weight, idx) end
  local prev = autograd.set_grad_enabled(false)
  local ok, out = pcall(T.embedding, weight, idx)
  autograd.set_grad_enabled(prev)
  if not ok then error(out) end
  return autograd.record(embedding_pad_rule, out, weight, idx, pad)
end

--- embedding(idx (1-based ids), weight [V, D] [, {padding_idx=}]): the rows of weight; the
--- padding_idx row gets no gradient.
function F.embedding(idx, weight, opts)
  check_tensor(weight, 'embedding', 'weight')
  F._embedding_unsupported(opts, 'embedding')
  check_opts(opts, K.embedding, 'embedding')
  local pad = opts and opts.padding_idx
  if pad ~= nil then pad = F._padding_row(pad, weight:dim() > 0 and weight:size(1) or 0, 'embedding') end
  return F._embedding(weight, idx, pad)
end

---------------------------------------------------------------- losses, distances, the loss group's activations
-- (lua/dpl/nn/functional_loss.lua: cross_entropy, nll_loss, mse_loss, l1_loss, ..., ctc_loss,
-- cosine_similarity, normalize, logsigmoid, prelu, glu, instance_norm, ...)
require('dpl.nn.functional_loss')(F)

--- one_hot(labels (1-based int), num_classes) -> int64 [..., num_classes]
function F.one_hot(labels, num_classes)
  check_tensor(labels, 'one_hot')
  if num_classes ~= nil and (type(num_classes) ~= 'number' or num_classes ~= math.floor(num_classes)
      or num_classes < -1 or num_classes >= 2 ^ 53) then
    error(fmt('one_hot: num_classes must be an integer >= 0 (or -1 / nil: the largest label), got %s',
      type(num_classes) == 'number' and tostring(num_classes) or type(num_classes)), 2)
  end
  if labels._dtype == 7 then error('one_hot: expected integer labels (1-based), got a bool tensor', 2) end
  if labels:is_floating_point() then error('one_hot: expected integer labels (1-based)', 2) end
  if num_classes == nil or num_classes < 0 then num_classes = labels:numel() > 0 and labels:max():item() or 0 end
  if labels:numel() > 0 then
    local mn, mx = labels:min():item(), labels:max():item()
    if mn < 1 or mx > num_classes then
      error(fmt('one_hot: label %d is out of range: expected a class index in 1..%d', mn < 1 and mn or mx,
        num_classes), 2)
    end
  end
  local sz = labels:size()
  local out_sz = {}
  for i = 1, #sz do out_sz[i] = sz[i] end
  out_sz[#out_sz + 1] = num_classes
  local out = T.zeros(out_sz, { dtype = 'int64', device = labels.device })
  local nd = #sz + 1
  return out:scatter_add_(nd, labels:unsqueeze(nd), T.ones_like(labels:unsqueeze(nd), { dtype = 'int64' }))
end

-- the sequence group: scaled_dot_product_attention, multi_head_attention_forward, the RNN time loops
require('dpl.nn.functional_seq')(F)
-- the conv group (conv1d, conv_transpose1d/2d, 1-d and adaptive pooling, dropout1d/2d, pad, interpolate,
-- pixel_shuffle, unfold/fold): dpl.nn.functional_conv
require('dpl.nn.functional_conv').install(F)
-- bilinear, rrelu, hardshrink, softshrink, embedding_bag, alpha dropouts, dropout3d, channel_shuffle,
-- triplet_margin_with_distance_loss (dpl.nn.functional_extra); conv3d, conv_transpose3d, the 3-d,
-- unpooling, LP and fractional pools (dpl.nn.functional_conv3d)
require('dpl.nn.functional_extra').install(F)
require('dpl.nn.functional_conv3d').install(F)

-- Every function here takes a tensor first: a wrong one is named at the entry (it used to
-- surface as "attempt to call method 'dim' (a nil value)" or an FFI conversion error).
do
  local wrapped = {}
  for name, f in pairs(F) do
    if type(f) == 'function' and not name:match('^_') then
      wrapped[name] = function(x, a, b, c, d, e, g, h)
        if not is_tensor(x) then
          error(fmt('F.%s: input must be a tensor, got %s', name, type(x) == 'cdata' and 'cdata (not a tensor)' or type(x)), 2)
        end
        return f(x, a, b, c, d, e, g, h)
      end
    end
  end
  for name, w in pairs(wrapped) do F[name] = w end
end

return F
