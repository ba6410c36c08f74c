-- dpl.nn.functional_conv: the conv group of nn.functional (PyTorch 1.13's names and
-- arguments): conv1d, conv_transpose1d/2d, max_pool1d, avg_pool1d, adaptive_avg_pool1d/2d,
-- adaptive_max_pool1d/2d, dropout1d/2d, pad, interpolate (and upsample,
-- upsample_nearest, upsample_bilinear), pixel_shuffle, pixel_unshuffle, unfold, fold.
-- functional.lua installs them into dpl.nn.functional (M.install(F)); the modules are in
-- dpl.nn.conv. Options are one table of PyTorch's keyword names, checked by dpl.options.
-- Dims given as arguments are 1-based; indices returned (return_indices) are 1-based int64.
-- C kernels (src/tensor/dpl_tensor_nnconv.c) do im2col/col2im, padding, interpolation,
-- adaptive pooling and 1-d max pooling; on a GPU im2col/col2im, adaptive max and average
-- pooling (global average pooling: a mean) and 1-d max pooling run in the CUDA plugin, pad
-- and interpolate are composed of GPU ops here;
-- conv1d, avg_pool1d, adaptive_avg/max_pool1d run the 2-d kernels on [N, C, 1, L] views;
-- conv_transpose runs conv2d's input-gradient kernel forward and conv2d's kernels backward
-- (so it works wherever conv2d does). The backward rules are in
-- dpl.autograd_rules ("conv group"); they call the raw functions M.* here.
local ffi = require 'ffi'
local C = require('dpl.capi').C
local T = require 'dpl.tensor'
local autograd = require 'dpl.autograd'
local amp = require 'dpl.amp'
local options = require 'dpl.options'
local errors = require 'dpl.errors'

local fmt = string.format
local type, tostring, floor = type, tostring, math.floor
local lua_error = error
local error = errors.raise -- string messages become ValueError objects
local is_tensor = T.is_tensor
local check_opts, keys, int_or_pair = options.check, options.keys, options.int_or_pair
local rules = autograd.rules
local record = autograd.record

local M = {}

local function not_impl(msg) lua_error(errors.NotImplementedError(msg), 0) end
M.not_impl = not_impl

local function shape_str(t) return '[' .. table.concat(t:size(), ', ') .. ']' end
M.shape_str = shape_str
local function devmem(t) return t._flags % 4 >= 2 end -- DPL_DEVMEM: a real GPU's memory
local function grad_on(...)
  if not autograd.is_grad_enabled() then return false end
  for i = 1, select('#', ...) do
    local t = select(i, ...)
    if is_tensor(t) and t.requires_grad then return true end
  end
  return false
end

---------------------------------------------------------------- C calls
local out1 = ffi.new('dpl_tensor*[1]')
local out2 = ffi.new('dpl_tensor*[1]')
local i32 = ffi.new('int32_t[8]')
local i64a = ffi.new('int64_t[6]')
local i64b = ffi.new('int64_t[2]')
local f64 = ffi.new('double[2]')
local wrap, fail = T._wrap, T._fail
local ENOMEM = -2
local function call(fn, ...)
  local st = fn(...)
  if st == ENOMEM then collectgarbage() st = fn(...) end
  if st ~= 0 then fail(2, st) end
end
local function set_i32(...)
  for i = 1, select('#', ...) do i32[i - 1] = select(i, ...) end
  return i32
end

--- im2col(x [N, C, H, W], p {kh, kw, dh, dw, ph, pw, sh, sw}) -> [N, C*kh*kw, L]
function M.im2col(x, p)
  call(C.dpl_im2col, x, set_i32(p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]), out1)
  return wrap(out1)
end
--- col2im(cols [N, C*kh*kw, L], H, W, p) -> [N, C, H, W]
function M.col2im(c, H, W, p)
  call(C.dpl_col2im, c, H, W, set_i32(p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8]), out1)
  return wrap(out1)
end
local PAD_MODES = { constant = 0, reflect = 1, replicate = 2, circular = 3 }
-- pads: {l1, r1, l2, r2, ...} in dim order of the last #pads/2 dims
local function set_pads(pads)
  for i = 1, #pads do i64a[i - 1] = pads[i] end
  return #pads / 2
end
function M.pad_raw(x, pads, mode, value)
  local n = set_pads(pads)
  call(C.dpl_pad, x, n, i64a, PAD_MODES[mode], value or 0, out1)
  return wrap(out1)
end
function M.pad_backward(g, pads, mode)
  local n = set_pads(pads)
  call(C.dpl_pad_backward, g, n, i64a, PAD_MODES[mode], out1)
  return wrap(out1)
end
local INTERP_MODES = { nearest = 0, ['nearest-exact'] = 1, linear = 2, bilinear = 2 }
-- geom: {nsp=, size={...}, scales={...} (0: none), mode=, align=}
local function set_interp(sizes, geom)
  for k = 1, geom.nsp do i64b[k - 1], f64[k - 1] = sizes[k], geom.scales[k] or 0 end
  return INTERP_MODES[geom.mode], geom.align and 1 or 0
end
function M.interpolate_raw(x, geom)
  local mode, align = set_interp(geom.size, geom)
  call(C.dpl_interpolate, x, geom.nsp, i64b, f64, mode, align, out1)
  return wrap(out1)
end
function M.interpolate_backward(g, in_size, geom)
  local mode, align = set_interp(in_size, geom)
  call(C.dpl_interpolate_backward, g, geom.nsp, i64b, f64, mode, align, out1)
  return wrap(out1)
end
function M.adaptive_avg_pool2d_raw(x, oh, ow)
  call(C.dpl_adaptive_avg_pool2d, x, oh, ow, out1)
  return wrap(out1)
end
function M.adaptive_avg_pool2d_backward(g, H, W)
  call(C.dpl_adaptive_avg_pool2d_backward, g, H, W, out1)
  return wrap(out1)
end
function M.adaptive_max_pool2d_raw(x, oh, ow)
  call(C.dpl_adaptive_max_pool2d, x, oh, ow, out1, out2)
  local v = wrap(out1)
  return v, wrap(out2)
end
function M.max_pool1d_raw(x, k, s, p, d, ceil)
  call(C.dpl_max_pool1d, x, set_i32(k, s, p, d, ceil and 1 or 0), out1, out2)
  local v = wrap(out1)
  return v, wrap(out2)
end

---------------------------------------------------------------- argument checks
local function got(v) return type(v) == 'cdata' and (is_tensor(v) and 'a tensor' or 'cdata') or tostring(v) end
local function is_int(v) return type(v) == 'number' and v == floor(v) and v > -2 ^ 31 and v < 2 ^ 31 end

--- an integer (or a one-element list of one) >= lo, for the 1-d ops
local function int1(v, fn, what, lo)
  if type(v) == 'table' and #v == 1 then v = v[1] end
  if not is_int(v) or v < lo then
    error(fmt('%s: %s must be an integer >= %d (or a list of one), got %s', fn, what, lo, got(v)), 3)
  end
  return v
end
M.int1 = int1
--- an integer or a pair of integers >= lo, for the 2-d ops
local function int2(v, fn, what, lo)
  local a, b = int_or_pair(v, fn, what)
  if a < lo or b < lo then error(fmt('%s: %s must be >= %d, got %s', fn, what, lo, tostring(a < lo and a or b)), 3) end
  return a, b
end
M.int2 = int2
local function need_bool(v, fn, what)
  if v ~= nil and type(v) ~= 'boolean' then error(fmt('%s: %s must be true or false, got %s', fn, what, got(v)), 3) end
end
M.need_bool = need_bool
local function need_float(x, fn)
  if not x:is_floating_point() then
    error(fmt('%s: expected a floating-point input, got %s (shape %s)', fn, x.dtype, shape_str(x)), 3)
  end
end
local function need_dims(x, fn, dims, what)
  if not dims[x:dim()] then error(fmt('%s: expected %s input, got shape %s', fn, what, shape_str(x)), 3) end
end
local function need_tensor(x, fn, what)
  if not is_tensor(x) then error(fmt('%s: %s must be a tensor, got %s', fn, what, got(x)), 3) end
end

---------------------------------------------------------------- convolution
local K = {
  conv1d = keys('stride', 'padding', 'dilation', 'groups'),
  conv_transpose = keys('stride', 'padding', 'output_padding', 'groups', 'dilation'),
  max_pool1d = keys('stride', 'padding', 'dilation', 'ceil_mode', 'return_indices'),
  avg_pool1d = keys('stride', 'padding', 'ceil_mode', 'count_include_pad'),
  adaptive_max = keys('return_indices'),
  dropout = keys('p', 'training', 'inplace'),
  pad = keys('mode', 'value'),
  interpolate = keys('size', 'scale_factor', 'mode', 'align_corners', 'recompute_scale_factor', 'antialias'),
  upsample2 = keys('size', 'scale_factor'),
  unfold = keys('dilation', 'padding', 'stride'),
}
M.keys = K

--- 'same' padding of one dim: PyTorch's left and right (the odd one extra on the right)
local function same_pad(k, d) local total = d * (k - 1) return floor(total / 2), total - floor(total / 2) end
M.same_pad = same_pad

--- conv1d(x [N, C, L] or [C, L], weight [O, C/groups, k], bias [O] or nil,
--- {stride=1, padding=0 | 'same' | 'valid', dilation=1, groups=1})
function M.conv1d(x, w, b, opts)
  local fn = 'conv1d'
  need_tensor(w, fn, 'weight')
  if b ~= nil then need_tensor(b, fn, 'bias') end
  check_opts(opts, K.conv1d, fn)
  opts = opts or {}
  local s = int1(opts.stride or 1, fn, 'stride', 1)
  local d = int1(opts.dilation or 1, fn, 'dilation', 1)
  local groups = int1(opts.groups or 1, fn, 'groups', 1)
  if w:dim() ~= 3 then error(fmt('%s: weight must be 3-d [out_channels, in_channels/groups, kernel_size], got %s',
    fn, shape_str(w)), 2) end
  need_dims(x, fn, { [2] = true, [3] = true }, 'a 2-d [C, L] or 3-d [N, C, L]')
  local unb = x:dim() == 2
  if unb then x = x:unsqueeze(1) end
  if x:size(2) ~= w:size(2) * groups then
    error(fmt('%s: input has shape %s, expected %d channels in dim %d (weight %s, groups %d)', fn,
      shape_str(unb and x:squeeze(1) or x), w:size(2) * groups, unb and 1 or 2, shape_str(w), groups), 2)
  end
  if w:size(1) % groups ~= 0 then
    error(fmt('%s: out_channels (%d) must be divisible by groups (%d)', fn, w:size(1), groups), 2)
  end
  if b ~= nil and (b:dim() ~= 1 or b:size(1) ~= w:size(1)) then
    error(fmt('%s: bias must have shape [%d], got %s', fn, w:size(1), shape_str(b)), 2)
  end
  if amp.dtype then x, w, b = amp.cast(x), amp.cast(w), amp.cast(b) end
  need_float(x, fn)
  if x.dtype ~= w.dtype or (b and b.dtype ~= x.dtype) then
    error(fmt('%s: input, weight and bias must have one dtype, got %s, %s%s', fn, x.dtype, w.dtype,
      b and (' and ' .. b.dtype) or ''), 2)
  end
  local pad, p = opts.padding or 0, nil
  if pad == 'valid' then p = 0
  elseif pad == 'same' then
    if s ~= 1 then error(fmt("%s: padding='same' is not supported for strided convolutions", fn), 2) end
    local l, r = same_pad(w:size(3), d)
    if r > l then x = M.pad(x, { 0, r - l }) end
    p = l
  elseif type(pad) == 'string' then
    error(fmt("%s: invalid padding string '%s', should be one of 'valid', 'same'", fn, pad), 2)
  else
    p = int1(pad, fn, 'padding', 0)
  end
  local L = x:size(3) + 2 * p
  if L < d * (w:size(3) - 1) + 1 then
    error(fmt('%s: input of shape %s (padded length %d) is smaller than the kernel (%d, dilated %d)', fn,
      shape_str(x), L, w:size(3), d * (w:size(3) - 1) + 1), 2)
  end
  local y = T.conv2d(x:unsqueeze(3), w:unsqueeze(3), b,
    { stride = { 1, s }, padding = { 0, p }, dilation = { 1, d }, groups = groups })
  y = y:squeeze(3)
  if unb then y = y:squeeze(1) end
  return y
end

-- the geometry of a transposed convolution: o = {stride=, padding=, output_padding=,
-- dilation=, groups=} as pairs, checked
local function ct_geom(opts, fn, nd)
  check_opts(opts, K.conv_transpose, fn)
  opts = opts or {}
  local g = {}
  local function get(v, what, lo) return int2(v, fn, what, lo) end
  if nd == 1 then -- the 2-d kernels run with a dim of 1 first
    g.stride = { 1, int1(opts.stride or 1, fn, 'stride', 1) }
    g.padding = { 0, int1(opts.padding or 0, fn, 'padding', 0) }
    g.output_padding = { 0, int1(opts.output_padding or 0, fn, 'output_padding', 0) }
    g.dilation = { 1, int1(opts.dilation or 1, fn, 'dilation', 1) }
  else
    g.stride = { get(opts.stride or 1, 'stride', 1) }
    g.padding = { get(opts.padding or 0, 'padding', 0) }
    g.output_padding = { get(opts.output_padding or 0, 'output_padding', 0) }
    g.dilation = { get(opts.dilation or 1, 'dilation', 1) }
  end
  g.groups = int1(opts.groups or 1, fn, 'groups', 1)
  for i = nd == 1 and 2 or 1, 2 do
    local op = g.output_padding[i]
    if op >= g.stride[i] and op >= g.dilation[i] then
      error(fmt('%s: output padding must be smaller than either stride or dilation, but got output_padding %d, '
        .. 'stride %d, dilation %d', fn, op, g.stride[i], g.dilation[i]), 3)
    end
  end
  g.conv = { stride = g.stride, padding = g.padding, dilation = g.dilation, groups = g.groups }
  return g
end
M.ct_geom = ct_geom

-- the output size of a transposed conv along one dim
local function ct_size(n, k, s, p, op, d) return (n - 1) * s - 2 * p + d * (k - 1) + op + 1 end

-- x [N, Cin, H, W] padded with zeros at the end to the size conv2d over the output gives
-- (output_padding >= stride, possible with a dilation above it, adds floor(op/stride) rows)
local function ct_padded(x, g)
  local eh = floor(g.output_padding[1] / g.stride[1])
  local ew = floor(g.output_padding[2] / g.stride[2])
  if eh == 0 and ew == 0 then return x end
  return M.pad(x, { 0, ew, 0, eh })
end

--- the raw forward: conv2d's input gradient with x as the output gradient, plus the bias
function M.conv_transpose2d_raw(x, w, b, g)
  local N, H, W = x:size(1), x:size(3), x:size(4)
  local kh, kw = w:size(3), w:size(4)
  local OH = ct_size(H, kh, g.stride[1], g.padding[1], g.output_padding[1], g.dilation[1])
  local OW = ct_size(W, kw, g.stride[2], g.padding[2], g.output_padding[2], g.dilation[2])
  local Cout = w:size(2) * g.groups
  -- (conv2d_backward reads its input only for the weight's gradient: an empty tensor of the
  -- output's shape stands for it)
  local like = T.empty({ N, Cout, OH, OW }, { dtype = x.dtype, device = x.device })
  local y = T.conv2d_backward(ct_padded(x, g), like, w, g.conv, { x = true })
  if b then y:add_(b:view(1, Cout, 1, 1)) end
  return y
end

--- gradients of conv_transpose2d (nx, nw, nb: which are needed)
function M.conv_transpose2d_backward(gy, x, w, g, nx, nw, nb)
  local gx, gw, gb
  if nx then
    gx = T.conv2d(gy, w, nil, g.conv)
    if gx:size(3) ~= x:size(3) or gx:size(4) ~= x:size(4) then
      gx = gx:narrow(3, 1, x:size(3)):narrow(4, 1, x:size(4)):contiguous()
    end
  end
  if nw then
    local _
    _, gw = T.conv2d_backward(ct_padded(x, g), gy, w, g.conv, { w = true })
  end
  if nb then gb = gy:sum(4):sum(3):sum(1) end
  return gx, gw, gb
end

-- checks shared by conv_transpose1d/2d: dims, channels, dtypes; returns the output sizes
local function ct_check(x, w, b, g, fn, nd)
  need_tensor(w, fn, 'weight')
  if b ~= nil then need_tensor(b, fn, 'bias') end
  local wd = nd + 2
  if w:dim() ~= wd then
    error(fmt('%s: weight must be %d-d [in_channels, out_channels/groups, %s], got %s', fn, wd,
      nd == 1 and 'kernel_size' or 'kh, kw', shape_str(w)), 3)
  end
  if x:size(2) ~= w:size(1) then
    error(fmt('%s: input has shape %s, expected %d channels in dim 2 (weight %s)', fn, shape_str(x), w:size(1),
      shape_str(w)), 3)
  end
  if w:size(1) % g.groups ~= 0 then
    error(fmt('%s: in_channels (%d) must be divisible by groups (%d)', fn, w:size(1), g.groups), 3)
  end
  local cout = w:size(2) * g.groups
  if b ~= nil and (b:dim() ~= 1 or b:size(1) ~= cout) then
    error(fmt('%s: bias must have shape [%d], got %s', fn, cout, shape_str(b)), 3)
  end
  need_float(x, fn)
  if x.dtype ~= w.dtype or (b and b.dtype ~= x.dtype) then
    error(fmt('%s: input, weight and bias must have one dtype, got %s, %s%s', fn, x.dtype, w.dtype,
      b and (' and ' .. b.dtype) or ''), 3)
  end
  local sizes = {}
  for i = 1, nd do
    local j = nd == 1 and 2 or i
    local n = x:size(2 + i)
    local o = ct_size(n, w:size(2 + i), g.stride[j], g.padding[j], g.output_padding[j], g.dilation[j])
    if o < 1 then
      error(fmt('%s: input of shape %s gives an output size of %d along dim %d (padding too large)', fn,
        shape_str(x), o, 2 + i), 3)
    end
    sizes[i] = o
  end
  return sizes
end

-- out-of-place conv_transpose2d with its rule
local function conv_transpose2d(x, w, b, g)
  if not grad_on(x, w, b) then return M.conv_transpose2d_raw(x, w, b, g) end
  local y = autograd.no_grad(M.conv_transpose2d_raw, x, w, b, g)
  return record(rules.conv_transpose2d, y, x, w, b, g)
end

--- conv_transpose2d(x [N, Cin, H, W] or [Cin, H, W], weight [Cin, Cout/groups, kh, kw], bias,
--- {stride=1, padding=0, output_padding=0, groups=1, dilation=1})
function M.conv_transpose2d(x, w, b, opts)
  local fn = 'conv_transpose2d'
  local g = ct_geom(opts, fn, 2)
  need_dims(x, fn, { [3] = true, [4] = true }, 'a 3-d [C, H, W] or 4-d [N, C, H, W]')
  local unb = x:dim() == 3
  if unb then x = x:unsqueeze(1) end
  if amp.dtype then x, w, b = amp.cast(x), amp.cast(w), amp.cast(b) end
  ct_check(x, w, b, g, fn, 2)
  local y = conv_transpose2d(x, w, b, g)
  return unb and y:squeeze(1) or y
end

--- conv_transpose1d(x [N, Cin, L] or [Cin, L], weight [Cin, Cout/groups, k], bias, opts as 2d's)
function M.conv_transpose1d(x, w, b, opts)
  local fn = 'conv_transpose1d'
  local g = ct_geom(opts, fn, 1)
  need_dims(x, fn, { [2] = true, [3] = true }, 'a 2-d [C, L] or 3-d [N, C, L]')
  local unb = x:dim() == 2
  if unb then x = x:unsqueeze(1) end
  if amp.dtype then x, w, b = amp.cast(x), amp.cast(w), amp.cast(b) end
  ct_check(x, w, b, g, fn, 1)
  local y = conv_transpose2d(x:unsqueeze(3), w:unsqueeze(3), b, g):squeeze(3)
  return unb and y:squeeze(1) or y
end

--- output_padding that makes a transposed conv give output_size (the module's forward(x,
--- output_size)); sizes: the input's spatial sizes, ks: the kernel's
function M.output_padding_for(fn, output_size, sizes, ks, g, nd)
  local want = output_size
  if is_tensor(want) then want = want:size() end
  if type(want) == 'number' then want = { want } end
  if type(want) ~= 'table' then error(fmt('%s: output_size must be a list of sizes, got %s', fn, got(output_size)), 3) end
  if #want == nd + 2 then want = { unpack(want, 3) } end
  if #want ~= nd then
    error(fmt('%s: output_size must have %d or %d elements, got %d', fn, nd, nd + 2, #want), 3)
  end
  local ops = {}
  for i = 1, nd do
    local j = nd == 1 and 2 or i
    local lo = ct_size(sizes[i], ks[i], g.stride[j], g.padding[j], 0, g.dilation[j])
    local hi = lo + g.stride[j] - 1
    if not is_int(want[i]) or want[i] < lo or want[i] > hi then
      error(fmt('%s: requested an output size of %s along spatial dim %d, but valid sizes range from %d to %d '
        .. '(for an input of %d)', fn, tostring(want[i]), i, lo, hi, sizes[i]), 3)
    end
    ops[i] = want[i] - lo
  end
  return ops
end

---------------------------------------------------------------- pooling
local function max_pool1d(x, k, s, p, d, ceil)
  local v, i = M.max_pool1d_raw(x, k, s, p, d, ceil)
  if grad_on(x) then record(rules.max_pool1d, v, x, i) end
  return v, i
end

--- max_pool1d(x [N, C, L] or [C, L], kernel_size, {stride=kernel_size, padding=0, dilation=1,
--- ceil_mode=false, return_indices=false}) -> values [, indices (1-based, int64)]
function M.max_pool1d(x, k, opts)
  local fn = 'max_pool1d'
  check_opts(opts, K.max_pool1d, fn)
  opts = opts or {}
  k = int1(k, fn, 'kernel_size', 1)
  local s = opts.stride ~= nil and int1(opts.stride, fn, 'stride', 1) or k
  local p = int1(opts.padding or 0, fn, 'padding', 0)
  local d = int1(opts.dilation or 1, fn, 'dilation', 1)
  need_bool(opts.ceil_mode, fn, 'ceil_mode')
  need_bool(opts.return_indices, fn, 'return_indices')
  need_dims(x, fn, { [2] = true, [3] = true }, 'a 2-d [C, L] or 3-d [N, C, L]')
  need_float(x, fn)
  local unb = x:dim() == 2
  if unb then x = x:unsqueeze(1) end
  local v, i
  if devmem(x) and d == 1 then -- a real GPU: max_pool2d's kernel on [N, C, 1, L] (the CPU's checks first)
    if 2 * p > k then
      lua_error(errors.RuntimeError(fmt('%s: padding should be at most half of kernel size, but got padding=%d and '
        .. 'kernel_size=%d', fn, p, k)), 0)
    end
    local L = x:size(3)
    local span = L + 2 * p - k
    local o = (opts.ceil_mode and math.ceil(span / s) or floor(span / s)) + 1
    if opts.ceil_mode and (o - 1) * s >= L + p then o = o - 1 end
    if span < 0 or o < 1 then
      lua_error(errors.RuntimeError(fmt('%s: input of length %d is too small for kernel_size %d (dilation 1, padding %d):'
        .. ' the output length would be 0', fn, L, k, p)), 0)
    end
    local ok, a, b = pcall(T.max_pool2d, x:unsqueeze(3), { 1, k }, { stride = { 1, s }, padding = { 0, p },
      ceil_mode = opts.ceil_mode, return_indices = true })
    if ok then v, i = a:squeeze(3), b:squeeze(3)
    elseif not errors.is(a, errors.NotImplementedError) then lua_error(a, 0) end
  end
  if v == nil then v, i = max_pool1d(x, k, s, p, d, opts.ceil_mode) end
  if unb then v, i = v:squeeze(1), i:squeeze(1) end
  if opts.return_indices then return v, i + 1 end
  return v
end

--- avg_pool1d(x [N, C, L] or [C, L], kernel_size, {stride=kernel_size, padding=0,
--- ceil_mode=false, count_include_pad=true}): avg_pool2d's kernel on [N, C, 1, L]
function M.avg_pool1d(x, k, opts)
  local fn = 'avg_pool1d'
  check_opts(opts, K.avg_pool1d, fn)
  opts = opts or {}
  k = int1(k, fn, 'kernel_size', 1)
  local s = opts.stride ~= nil and int1(opts.stride, fn, 'stride', 1) or k
  local p = int1(opts.padding or 0, fn, 'padding', 0)
  need_bool(opts.ceil_mode, fn, 'ceil_mode')
  need_bool(opts.count_include_pad, fn, 'count_include_pad')
  need_dims(x, fn, { [2] = true, [3] = true }, 'a 2-d [C, L] or 3-d [N, C, L]')
  need_float(x, fn)
  if 2 * p > k then
    error(fmt('%s: padding should be at most half of kernel size, but got padding=%d and kernel_size=%d', fn, p, k), 2)
  end
  if x:size(-1) + 2 * p < k then
    error(fmt('%s: input of shape %s is too small for kernel_size %d (padding %d)', fn, shape_str(x), k, p), 2)
  end
  local unb = x:dim() == 2
  if unb then x = x:unsqueeze(1) end
  local y = T.avg_pool2d(x:unsqueeze(3), { 1, k }, { stride = { 1, s }, padding = { 0, p }, ceil_mode = opts.ceil_mode,
    count_include_pad = opts.count_include_pad }):squeeze(3)
  return unb and y:squeeze(1) or y
end

-- an adaptive output size: n entries, each an integer >= 0 or nil/false (the input's size)
local function out_sizes(v, n, x, fn)
  local r = {}
  if type(v) == 'number' then
    for i = 1, n do r[i] = v end
  elseif type(v) == 'table' and not is_tensor(v) then
    for k in pairs(v) do
      if type(k) ~= 'number' or k < 1 or k > n or k ~= floor(k) then
        error(fmt('%s: output_size must be an integer or a list of %d (nil or false keeps the input size), got a '
          .. 'table with key %s', fn, n, tostring(k)), 3)
      end
    end
    for i = 1, n do r[i] = v[i] end
  else
    error(fmt('%s: output_size must be an integer or a list of %d, got %s', fn, n, got(v)), 3)
  end
  local nd = x:dim()
  for i = 1, n do
    if r[i] == nil or r[i] == false then r[i] = x:size(nd - n + i)
    elseif not is_int(r[i]) or r[i] < 0 then
      error(fmt('%s: output_size must hold integers >= 0 (or nil), got %s', fn, tostring(r[i])), 3)
    end
  end
  return r
end
M.out_sizes = out_sizes

local function adaptive_avg_pool2d(x, oh, ow)
  if devmem(x) then -- a real GPU: global pooling by a mean, else the backend's kernel
    if oh == 1 and ow == 1 then return x:flatten(3):mean(3, true):unsqueeze(4) end
  end
  local y = M.adaptive_avg_pool2d_raw(x, oh, ow)
  if grad_on(x) then record(rules.adaptive_avg_pool2d, y, x) end
  return y
end
local function adaptive_max_pool2d(x, oh, ow)
  local v, i = M.adaptive_max_pool2d_raw(x, oh, ow)
  if grad_on(x) then record(rules.adaptive_max_pool2d, v, x, i) end
  return v, i
end

local function adaptive_in(x, fn, nsp)
  need_tensor(x, fn, 'input')
  if nsp == 2 then need_dims(x, fn, { [3] = true, [4] = true }, 'a 3-d [C, H, W] or 4-d [N, C, H, W]')
  else need_dims(x, fn, { [2] = true, [3] = true }, 'a 2-d [C, L] or 3-d [N, C, L]') end
  need_float(x, fn)
  for i = x:dim() - nsp + 1, x:dim() do
    if x:size(i) < 1 then
      error(fmt('%s: expected an input of non-zero size in its pooled dims, got shape %s', fn, shape_str(x)), 3)
    end
  end
  local unb = x:dim() == nsp + 1
  return unb and x:unsqueeze(1) or x, unb
end

--- adaptive_avg_pool2d(x [N, C, H, W] or [C, H, W], output_size): an integer or {oh, ow}
--- (nil / false entries keep the input's size)
function M.adaptive_avg_pool2d(x, size)
  local fn = 'adaptive_avg_pool2d'
  local x4, unb = adaptive_in(x, fn, 2)
  local s = out_sizes(size, 2, x, fn)
  local y = adaptive_avg_pool2d(x4, s[1], s[2])
  return unb and y:squeeze(1) or y
end
--- adaptive_avg_pool1d(x [N, C, L] or [C, L], output_size)
function M.adaptive_avg_pool1d(x, size)
  local fn = 'adaptive_avg_pool1d'
  local x3, unb = adaptive_in(x, fn, 1)
  local s = out_sizes(size, 1, x, fn)
  local y = adaptive_avg_pool2d(x3:unsqueeze(3), 1, s[1]):squeeze(3)
  return unb and y:squeeze(1) or y
end
local function ret_indices(a, fn)
  if type(a) == 'table' then check_opts(a, K.adaptive_max, fn) a = a.return_indices end
  need_bool(a, fn, 'return_indices')
  return a
end
--- adaptive_max_pool2d(x, output_size [, return_indices | {return_indices=}]) -> values
--- [, indices: 1-based positions in each H*W plane, int64]
function M.adaptive_max_pool2d(x, size, ri)
  local fn = 'adaptive_max_pool2d'
  ri = ret_indices(ri, fn)
  local x4, unb = adaptive_in(x, fn, 2)
  local s = out_sizes(size, 2, x, fn)
  local v, i = adaptive_max_pool2d(x4, s[1], s[2])
  if unb then v, i = v:squeeze(1), i:squeeze(1) end
  if ri then return v, i + 1 end
  return v
end
--- adaptive_max_pool1d(x [N, C, L] or [C, L], output_size [, return_indices])
function M.adaptive_max_pool1d(x, size, ri)
  local fn = 'adaptive_max_pool1d'
  ri = ret_indices(ri, fn)
  local x3, unb = adaptive_in(x, fn, 1)
  local s = out_sizes(size, 1, x, fn)
  local v, i = adaptive_max_pool2d(x3:unsqueeze(3), 1, s[1])
  v, i = v:squeeze(3), i:squeeze(3)
  if unb then v, i = v:squeeze(1), i:squeeze(1) end
  if ri then return v, i + 1 end
  return v
end

---------------------------------------------------------------- dropout
local warned3d = false
-- positional (p, training, inplace) or one options table
local function dropout_args(fn, p, training, inplace)
  if type(p) == 'table' then
    if training ~= nil then error(fmt('%s: the options table must be the last argument', fn), 3) end
    check_opts(p, K.dropout, fn)
    p, training, inplace = p.p, p.training, p.inplace
  end
  if p == nil then p = 0.5 end
  if type(p) ~= 'number' or not (p >= 0 and p <= 1) then
    error(fmt('%s: dropout probability has to be between 0 and 1, but got %s', fn, got(p)), 3)
  end
  need_bool(training, fn, 'training')
  need_bool(inplace, fn, 'inplace')
  return p, training ~= false, inplace
end
M.dropout_args = dropout_args

-- whole channels: x [N, C, *] times a [N, C, 1, ...] mask of Bernoulli(1 - p) / (1 - p)
local function feature_dropout(x, p, training, inplace)
  if not training or p == 0 or x:numel() == 0 then return x end
  local mshape = { x:size(1), x:size(2) }
  for _ = 3, x:dim() do mshape[#mshape + 1] = 1 end
  if p == 1 then
    if inplace then return x:mul_(0) end
    return x * 0
  end
  local mask = autograd.no_grad(function()
    return T.empty(mshape, { dtype = x.dtype, device = x.device }):bernoulli_(1 - p):div_(1 - p)
  end)
  if inplace then return x:mul_(mask) end
  return x * mask
end

--- dropout1d(x [N, C, L] or [C, L], p=0.5, training=true, inplace=false): zeroes whole channels
function M.dropout1d(x, p, training, inplace)
  local fn = 'dropout1d'
  p, training, inplace = dropout_args(fn, p, training, inplace)
  if x:dim() ~= 2 and x:dim() ~= 3 then
    error(fmt('%s: expected a 2-d [C, L] or 3-d [N, C, L] input, got shape %s', fn, shape_str(x)), 2)
  end
  if x:dim() == 2 then -- unbatched [C, L]
    local y = feature_dropout(x:unsqueeze(1), p, training, inplace)
    return inplace and x or y:squeeze(1)
  end
  return feature_dropout(x, p, training, inplace)
end
--- dropout2d(x [N, C, H, W], p=0.5, training=true, inplace=false): zeroes whole channels; a 3-d
--- input is [N, C, L] (PyTorch 1.13's behaviour, with its warning)
function M.dropout2d(x, p, training, inplace)
  local fn = 'dropout2d'
  p, training, inplace = dropout_args(fn, p, training, inplace)
  if x:dim() ~= 3 and x:dim() ~= 4 then
    error(fmt('%s: expected a 4-d [N, C, H, W] (or 3-d [N, C, L]) input, got shape %s', fn, shape_str(x)), 2)
  end
  if x:dim() == 3 and not warned3d then
    warned3d = true
    require('dpl.log').warn('dropout2d: received a 3-d input; as PyTorch 1.13 it is read as [N, C, L] (channel-wise '
      .. '1-d dropout; use dropout1d for that)')
  end
  return feature_dropout(x, p, training, inplace)
end

---------------------------------------------------------------- padding
local function pad_rule_apply(x, pads, mode, value)
  local y = M.pad_raw(x, pads, mode, value)
  if grad_on(x) then record(rules.pad, y, x, pads, mode, value) end
  return y
end

-- a constant pad on a real GPU (no C kernel there): a filled tensor and a copy of the region
local function pad_constant_composed(x, pads, value)
  local n = #pads / 2
  local nd = x:dim()
  local shape = x:size()
  for k = 1, n do shape[nd - n + k] = shape[nd - n + k] + pads[2 * k - 1] + pads[2 * k] end
  local y = T.full(shape, value or 0, { dtype = x.dtype, device = x.device })
  local src, dst = x, y
  for k = 1, n do
    local d, l, r = nd - n + k, pads[2 * k - 1], pads[2 * k]
    local keep = x:size(d) + math.min(l, 0) + math.min(r, 0)
    if keep <= 0 then return y end
    src = src:narrow(d, 1 + math.max(-l, 0), keep)
    dst = dst:narrow(d, 1 + math.max(l, 0), keep)
  end
  dst:copy_(src)
  return y
end

-- fn(...) composed of GPU ops; nil where one is not implemented there (no CUDA plugin): the
-- caller goes on to the C kernel, whose error names the op
local function gpu_composed(fn, ...)
  local ok, r = pcall(fn, ...)
  if ok then return r end
  if errors.is(r, errors.NotImplementedError) then return nil end
  lua_error(r, 0)
end

-- reflect/replicate/circular pads on a real GPU (no C kernel there): one index_select per padded
-- dim with the CPU kernel's source map (pad_src in dpl_tensor_nnconv.c) and its checks; the
-- gradient comes from index_select's (index_add_ on the GPU)
local function pad_index_composed(x, pads, mode)
  local n, nd = #pads / 2, x:dim()
  local function rt(msg, ...) lua_error(errors.RuntimeError(fmt(msg, ...)), 0) end
  local y = x
  for k = 1, n do
    local d = nd - n + k
    local l, r, D = pads[2 * k - 1], pads[2 * k], x:size(d)
    local O = D + l + r
    if mode == 'reflect' and (l >= D or r >= D) then
      rt('pad: reflect padding must be less than the input size, but got padding (%d, %d) along dim %d of input %s',
        l, r, d, shape_str(x))
    end
    if mode == 'replicate' and D < 1 then rt('pad: replicate padding needs a non-empty dim %d, input %s', d, shape_str(x)) end
    local a = l < 0 and -l or 0
    local dc = D - a - (r < 0 and -r or 0)
    if mode == 'circular' and (dc < 1 or l > dc or r > dc) then
      rt('pad: circular padding (%d, %d) along dim %d of size %d wraps around more than once (or crops it all)', l, r, d, D)
    end
    if O < 1 then
      rt('pad: input size %d along dim %d is too small for padding (%d, %d): the output size would be %d', D, d, l, r, O)
    end
    local idx = {}
    for j = 0, O - 1 do
      local i = j - l
      if mode == 'reflect' then
        if i < 0 then i = -i end
        if i >= D then i = 2 * (D - 1) - i end
      elseif mode == 'replicate' then
        i = i < 0 and 0 or i >= D and D - 1 or i
      else
        i = (j - (l > 0 and l or 0)) % dc -- (Lua's % is never negative here)
        i = a + i
      end
      idx[j + 1] = i + 1
    end
    y = y:index_select(d, T.tensor(idx, { dtype = 'int64', device = x.device }))
  end
  return y
end

--- pad(x, pad, mode='constant', value=0) or pad(x, pad, {mode=, value=}): pad is PyTorch's
--- list {left, right [, top, bottom [, front, back]]} from the last dim backwards (negative
--- entries crop); modes 'constant', 'reflect', 'replicate', 'circular'
function M.pad(x, pad, mode, value)
  local fn = 'pad'
  if type(mode) == 'table' then
    if value ~= nil then error('pad: the options table must be the last argument', 2) end
    check_opts(mode, K.pad, fn)
    mode, value = mode.mode, mode.value
  end
  mode = mode or 'constant'
  if PAD_MODES[mode] == nil then
    error(fmt("pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got %s", got(mode)), 2)
  end
  if value ~= nil and type(value) ~= 'number' and type(value) ~= 'boolean' then
    error(fmt('pad: value must be a number, got %s', got(value)), 2)
  end
  if type(value) == 'boolean' then value = value and 1 or 0 end
  if mode ~= 'constant' and value ~= nil and value ~= 0 then
    error(fmt("pad: padding mode '%s' doesn't take in value argument", mode), 2)
  end
  if type(pad) ~= 'table' or is_tensor(pad) then
    error(fmt('pad: pad must be a list of integers {left, right, ...}, got %s', got(pad)), 2)
  end
  local np = #pad
  for i = 1, np do
    if not is_int(pad[i]) then error(fmt('pad: pad[%d] must be an integer, got %s', i, got(pad[i])), 2) end
  end
  if np % 2 ~= 0 then error(fmt('pad: padding length must be divisible by 2, got %d', np), 2) end
  local n, nd = np / 2, x:dim()
  if n > nd then error(fmt('pad: padding length too large: %d entries for an input of %d dims %s', np, nd,
    shape_str(x)), 2) end
  if n == 0 then return x:clone() end
  if mode ~= 'constant' then
    if n > 3 then not_impl(fmt("pad: %s padding of %d dims is not supported (1 to 3 dims)", mode, n)) end
    local ok = nd == n + 1 or nd == n + 2
    if mode == 'circular' then ok = nd == n + 2 end
    if not ok then
      error(fmt("pad: %s padding of %d dim%s expects a %s input, got shape %s", mode, n, n > 1 and 's' or '',
        mode == 'circular' and fmt('%d-d', n + 2) or fmt('%d-d or %d-d', n + 1, n + 2), shape_str(x)), 2)
    end
  end
  -- to dim order: pad's pairs go from the last dim backwards
  local pads = {}
  for k = 1, n do
    local j = n - k + 1 -- pair j of PyTorch's list is dim nd - j + 1
    pads[2 * k - 1], pads[2 * k] = pad[2 * j - 1], pad[2 * j]
  end
  if mode == 'constant' and (n > 3 or devmem(x)) then return pad_constant_composed(x, pads, value) end
  if devmem(x) then
    local y = gpu_composed(pad_index_composed, x, pads, mode)
    if y then return y end
  end
  return pad_rule_apply(x, pads, mode, value)
end

---------------------------------------------------------------- interpolation
local function interp_modes_msg(m)
  return fmt("interpolate: mode must be one of 'nearest', 'nearest-exact', 'linear', 'bilinear', 'area' "
    .. "(dplhost does not implement 'bicubic' and 'trilinear'), got %s", got(m))
end

-- interpolation on a real GPU (no C kernel there): index_select by the CPU kernel's source
-- tables (interp_tables in dpl_tensor_nnconv.c, computed here in the same float or double
-- arithmetic), the linear weights as tensors, the CPU's order of products and sums; the
-- gradient comes from the recorded ops (index_add_ on the GPU)
local f32b = ffi.new('float[1]')
local function r32(v) f32b[0] = v return f32b[0] end
local function interp_table(mode, align, kd, inn, out, sf)
  local i0, i1, w0, w1 = {}, {}, {}, {}
  local rr = kd == 'float64' and function(v) return v end or r32
  for o = 0, out - 1 do
    local a, b, l1
    if mode ~= 'linear' and mode ~= 'bilinear' then
      local scale = sf > 0 and r32(1 / sf) or r32(r32(inn) / r32(out))
      if mode == 'nearest-exact' then a = floor(r32((o + 0.5) * scale))
      elseif out == inn then a = o
      elseif out == 2 * inn then a = floor(o / 2)
      else a = floor(r32(r32(o) * scale)) end
      if a > inn - 1 then a = inn - 1 end
      b, l1 = a, 0
    elseif out == inn then
      a, b, l1 = o, o, 0
    else
      local scale
      if align then scale = out > 1 and rr(rr(inn - 1) / rr(out - 1)) or 0
      else scale = sf > 0 and rr(1 / sf) or rr(rr(inn) / rr(out)) end
      local src = align and rr(scale * o) or rr(rr(scale * rr(o + 0.5)) - 0.5)
      if not align and src < 0 then src = 0 end
      a = floor(src)
      b = a + (a < inn - 1 and 1 or 0)
      l1 = rr(src - a)
      l1 = l1 < 0 and 0 or l1 > 1 and 1 or l1
    end
    i0[o + 1], i1[o + 1], w1[o + 1], w0[o + 1] = a + 1, b + 1, l1, rr(1 - l1)
  end
  return i0, i1, w0, w1
end
local function interp_composed(x, geom)
  local linear = geom.mode == 'linear' or geom.mode == 'bilinear'
  local kd = (not linear) and x.dtype or (x.dtype == 'float64' and 'float64' or 'float32')
  local dev = x.device
  local function ix(t) return T.tensor(t, { dtype = 'int64', device = dev }) end
  local function wt(t, shape) return T.tensor(t, { dtype = kd, device = dev }):view(shape) end
  local xin = linear and x:to(kd) or x
  local nsp = geom.nsp
  local wd = nsp + 2 -- the last dim (W)
  local W, OW = x:size(wd), geom.size[nsp]
  local wi0, wi1, ww0, ww1 = interp_table(geom.mode, geom.align, kd, W, OW, geom.scales[nsp] or 0)
  local function along_w(t)
    if not linear then return t:index_select(wd, ix(wi0)) end
    return t:index_select(wd, ix(wi0)) * wt(ww0, { OW }) + t:index_select(wd, ix(wi1)) * wt(ww1, { OW })
  end
  local y
  if nsp == 1 then
    y = along_w(xin)
  else
    local H, OH = x:size(3), geom.size[1]
    local hi0, hi1, hw0, hw1 = interp_table(geom.mode, geom.align, kd, H, OH, geom.scales[1] or 0)
    if not linear then
      y = along_w(xin:index_select(3, ix(hi0)))
    else
      y = along_w(xin:index_select(3, ix(hi0))) * wt(hw0, { OH, 1 })
        + along_w(xin:index_select(3, ix(hi1))) * wt(hw1, { OH, 1 })
    end
  end
  if y.dtype ~= x.dtype then y = y:to(x.dtype) end
  return y
end

--- interpolate(x [N, C, L] or [N, C, H, W], {size=, scale_factor=, mode='nearest',
--- align_corners=, recompute_scale_factor=, antialias=false})
function M.interpolate(x, opts)
  local fn = 'interpolate'
  check_opts(opts, K.interpolate, fn)
  opts = opts or {}
  local mode = opts.mode or 'nearest'
  if mode == 'bicubic' or mode == 'trilinear' then
    not_impl(fmt("interpolate: mode '%s' is not implemented in dplhost (nearest, nearest-exact, linear, bilinear, "
      .. "area are)", mode))
  end
  if mode ~= 'nearest' and mode ~= 'nearest-exact' and mode ~= 'linear' and mode ~= 'bilinear' and mode ~= 'area' then
    error(interp_modes_msg(mode), 2)
  end
  local align = opts.align_corners
  need_bool(align, fn, 'align_corners')
  need_bool(opts.recompute_scale_factor, fn, 'recompute_scale_factor')
  need_bool(opts.antialias, fn, 'antialias')
  if mode == 'nearest' or mode == 'nearest-exact' or mode == 'area' then
    if align ~= nil then
      error('interpolate: align_corners option can only be set with the interpolating modes: linear | bilinear', 2)
    end
  end
  if opts.antialias then
    not_impl('interpolate: antialias=true is not implemented in dplhost')
  end
  local nd = x:dim()
  if nd == 5 then not_impl('interpolate: 5-d inputs (3 spatial dims) are not implemented in dplhost') end
  if nd ~= 3 and nd ~= 4 then
    error(fmt('interpolate: expected a 3-d [N, C, L] or 4-d [N, C, H, W] input, got shape %s', shape_str(x)), 2)
  end
  local nsp = nd - 2
  if mode == 'linear' and nd ~= 3 then
    error(fmt("interpolate: mode 'linear' needs a 3-d input [N, C, L], got shape %s", shape_str(x)), 2)
  end
  if mode == 'bilinear' and nd ~= 4 then
    error(fmt("interpolate: mode 'bilinear' needs a 4-d input [N, C, H, W], got shape %s", shape_str(x)), 2)
  end
  local size, sf = opts.size, opts.scale_factor
  if size ~= nil and sf ~= nil then error('interpolate: only one of size or scale_factor should be defined', 2) end
  if size == nil and sf == nil then error('interpolate: either size or scale_factor should be defined', 2) end
  if opts.recompute_scale_factor and size ~= nil then
    error('interpolate: recompute_scale_factor is not meaningful with an explicit size', 2)
  end
  local out, scales = {}, {}
  if size ~= nil then
    if type(size) == 'number' then size = { size } end
    if type(size) ~= 'table' or is_tensor(size) then error(fmt('interpolate: size must be an integer or a list, got %s',
      got(opts.size)), 2) end
    if #size == 1 and nsp > 1 then size = { size[1], size[1] } end
    if #size ~= nsp then
      error(fmt('interpolate: input and output must have the same number of spatial dimensions, but got input of '
        .. 'shape %s and output size {%s}', shape_str(x), table.concat(size, ', ')), 2)
    end
    for i = 1, nsp do
      if not is_int(size[i]) or size[i] < 1 then
        error(fmt('interpolate: size must hold integers >= 1, got %s', got(size[i])), 2)
      end
      out[i], scales[i] = size[i], 0
    end
  else
    if type(sf) == 'number' then sf = { sf } end
    if type(sf) ~= 'table' or is_tensor(sf) then
      error(fmt('interpolate: scale_factor must be a number or a list, got %s', got(opts.scale_factor)), 2)
    end
    if #sf == 1 and nsp > 1 then sf = { sf[1], sf[1] } end
    if #sf ~= nsp then
      error(fmt('interpolate: input and scale_factor must have the same number of spatial dimensions, but got input '
        .. 'of shape %s and %d scale factors', shape_str(x), #sf), 2)
    end
    local recompute = opts.recompute_scale_factor or mode == 'area'
    for i = 1, nsp do
      local f = sf[i]
      if type(f) ~= 'number' or not (f > 0) or f == math.huge then
        error(fmt('interpolate: scale_factor must hold positive numbers, got %s', got(f)), 2)
      end
      out[i] = floor(x:size(2 + i) * f)
      scales[i] = recompute and 0 or f
      if out[i] < 1 then
        error(fmt('interpolate: scale_factor %g of an input of size %d along spatial dim %d gives an output size '
          .. 'of %d; it must be at least 1', f, x:size(2 + i), i, out[i]), 2)
      end
    end
  end
  for i = 1, nsp do
    if x:size(2 + i) < 1 then
      error(fmt('interpolate: expected an input of non-zero spatial size, got shape %s', shape_str(x)), 2)
    end
  end
  if mode == 'area' then
    if nsp == 1 then return M.adaptive_avg_pool1d(x, out[1]) end
    return M.adaptive_avg_pool2d(x, out)
  end
  if mode ~= 'nearest' and mode ~= 'nearest-exact' then need_float(x, fn) end
  local geom = { nsp = nsp, size = out, scales = scales, mode = mode, align = align or false }
  if devmem(x) then
    local y = gpu_composed(interp_composed, x, geom)
    if y then return y end
  end
  local y = M.interpolate_raw(x, geom)
  if grad_on(x) then record(rules.interpolate, y, x, geom) end
  return y
end

--- upsample(x, opts): interpolate (PyTorch's deprecated name)
function M.upsample(x, opts) return M.interpolate(x, opts) end
--- upsample_nearest(x, {size=, scale_factor=}) and upsample_bilinear (align_corners=true), 4-d
local function upsample2(name, mode, align)
  return function(x, opts)
    check_opts(opts, K.upsample2, name)
    if x:dim() ~= 4 then error(fmt('%s: expected a 4-d input [N, C, H, W], got shape %s', name, shape_str(x)), 2) end
    opts = opts or {}
    return M.interpolate(x, { size = opts.size, scale_factor = opts.scale_factor, mode = mode, align_corners = align })
  end
end
M.upsample_nearest = upsample2('upsample_nearest', 'nearest', nil)
M.upsample_bilinear = upsample2('upsample_bilinear', 'bilinear', true)

---------------------------------------------------------------- pixel shuffle
-- the leading dims of x (all but the last 3) and their count
local function lead_of(x)
  local lead = {}
  for i = 1, x:dim() - 3 do lead[i] = x:size(i) end
  return lead, #lead
end
local function cat(a, ...)
  local r = { unpack(a) }
  for i = 1, select('#', ...) do r[#r + 1] = select(i, ...) end
  return r
end
--- the raw ops (no recording; each the other's gradient). pixel_shuffle writes through a
--- permuted view of its output, so that the copy runs along contiguous rows of the input
function M.pixel_shuffle_raw(x, r)
  local lead, b = lead_of(x)
  local c, h, w = x:size(-3), x:size(-2), x:size(-1)
  local oc = c / (r * r)
  local y = T.empty(cat(lead, oc, h * r, w * r), { dtype = x.dtype, device = x.device })
  local perm = {}
  for i = 1, b do perm[i] = i end
  for _, v in ipairs({ 1, 3, 5, 2, 4 }) do perm[#perm + 1] = b + v end
  y:view(cat(lead, oc, h, r, w, r)):permute(perm):copy_(x:reshape(cat(lead, oc, r, r, h, w)))
  return y
end
function M.pixel_unshuffle_raw(x, r)
  local lead, b = lead_of(x)
  local c, h, w = x:size(-3), x:size(-2), x:size(-1)
  local perm = {}
  for i = 1, b do perm[i] = i end
  for _, v in ipairs({ 1, 3, 5, 2, 4 }) do perm[#perm + 1] = b + v end
  return x:reshape(cat(lead, c, h / r, r, w / r, r)):permute(perm):reshape(cat(lead, c * r * r, h / r, w / r))
end
local function shuffle_op(raw, rule, x, r)
  if not grad_on(x) then return raw(x, r) end
  local y = autograd.no_grad(raw, x, r)
  return record(rule, y, x, r)
end

--- pixel_shuffle(x [*, C*r*r, H, W], r) -> [*, C, H*r, W*r]
function M.pixel_shuffle(x, r)
  local fn = 'pixel_shuffle'
  if not is_int(r) or r < 1 then error(fmt('%s: upscale_factor must be an integer >= 1, got %s', fn, got(r)), 2) end
  if x:dim() < 3 then error(fmt('%s: expected an input of at least 3 dims [*, C, H, W], got shape %s', fn, shape_str(x)), 2) end
  local c = x:size(-3)
  if c % (r * r) ~= 0 then
    error(fmt("%s: expects its input's channel dim to be divisible by the square of upscale_factor, but input "
      .. "of shape %s has %d channels, not divisible by %d", fn, shape_str(x), c, r * r), 2)
  end
  return shuffle_op(M.pixel_shuffle_raw, rules.pixel_shuffle, x, r)
end
--- pixel_unshuffle(x [*, C, H*r, W*r], r) -> [*, C*r*r, H, W]
function M.pixel_unshuffle(x, r)
  local fn = 'pixel_unshuffle'
  if not is_int(r) or r < 1 then error(fmt('%s: downscale_factor must be an integer >= 1, got %s', fn, got(r)), 2) end
  if x:dim() < 3 then error(fmt('%s: expected an input of at least 3 dims [*, C, H, W], got shape %s', fn, shape_str(x)), 2) end
  local h, w = x:size(-2), x:size(-1)
  if h % r ~= 0 or w % r ~= 0 then
    error(fmt('%s: expects height and width to be divisible by downscale_factor %d, got input of shape %s', fn, r,
      shape_str(x)), 2)
  end
  return shuffle_op(M.pixel_unshuffle_raw, rules.pixel_unshuffle, x, r)
end

---------------------------------------------------------------- unfold / fold
-- {kh, kw, dh, dw, ph, pw, sh, sw} from kernel_size and {dilation=, padding=, stride=}
local function col_params(k, opts, fn)
  check_opts(opts, K.unfold, fn)
  opts = opts or {}
  local kh, kw = int2(k, fn, 'kernel_size', 1)
  local dh, dw = int2(opts.dilation or 1, fn, 'dilation', 1)
  local ph, pw = int2(opts.padding or 0, fn, 'padding', 0)
  local sh, sw = int2(opts.stride or 1, fn, 'stride', 1)
  return { kh, kw, dh, dw, ph, pw, sh, sw }
end
M.col_params = col_params

--- unfold(x [N, C, H, W] or [C, H, W], kernel_size, {dilation=1, padding=0, stride=1}) ->
--- [N, C*kh*kw, L] (im2col: the sliding blocks as columns)
function M.unfold(x, k, opts)
  local fn = 'unfold'
  local p = col_params(k, opts, fn)
  need_dims(x, fn, { [3] = true, [4] = true }, 'a 3-d [C, H, W] or 4-d [N, C, H, W]')
  need_float(x, fn)
  local unb = x:dim() == 3
  if unb then x = x:unsqueeze(1) end
  local y = M.im2col(x, p)
  if grad_on(x) then record(rules.im2col, y, x, p) end
  return unb and y:squeeze(1) or y
end

--- fold(x [N, C*kh*kw, L] or [C*kh*kw, L], output_size, kernel_size, {dilation=1, padding=0,
--- stride=1}) -> [N, C, H, W] (col2im: the columns summed back into place)
function M.fold(x, size, k, opts)
  local fn = 'fold'
  local oh, ow = int2(size, fn, 'output_size', 1)
  local p = col_params(k, opts, fn)
  need_dims(x, fn, { [2] = true, [3] = true }, 'a 2-d [C*kh*kw, L] or 3-d [N, C*kh*kw, L]')
  need_float(x, fn)
  local unb = x:dim() == 2
  if unb then x = x:unsqueeze(1) end
  local y = M.col2im(x, oh, ow, p)
  if grad_on(x) then record(rules.col2im, y, x, oh, ow, p) end
  return unb and y:squeeze(1) or y
end

---------------------------------------------------------------- install
local NAMES = { 'conv1d', 'conv_transpose1d', 'conv_transpose2d', 'max_pool1d', 'avg_pool1d', 'adaptive_avg_pool1d',
  'adaptive_avg_pool2d', 'adaptive_max_pool1d', 'adaptive_max_pool2d', 'dropout1d', 'dropout2d', 'pad', 'interpolate',
  'upsample', 'upsample_nearest', 'upsample_bilinear', 'pixel_shuffle', 'pixel_unshuffle', 'unfold', 'fold' }
M.names = NAMES

--- install(F): adds the functions above to dpl.nn.functional
function M.install(F)
  for _, name in ipairs(NAMES) do F[name] = M[name] end
  return F
end

return M
