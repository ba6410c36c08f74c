-- dpl.nn.functional_conv3d: PyTorch 1.13's 3-d convolution and pooling and the other pools
-- nn.functional lacked: conv3d, conv_transpose3d, max_pool3d, avg_pool3d,
-- adaptive_avg_pool3d, adaptive_max_pool3d, max_unpool1d/2d/3d, lp_pool1d/2d,
-- fractional_max_pool2d. All are compositions of differentiable tensor ops:
-- conv3d gathers the kD depth slices of each output depth (index_select) and runs conv2d on
-- [N*oD, C*kD, H, W] with the weight as [out, C/g*kD, kH, kW]; conv_transpose3d inserts
-- stride-1 zeros between the input's elements, pads by dilation*(k-1)-padding and runs
-- conv3d with the flipped, transposed weight; the pools gather each window's elements
-- (index_select per spatial dim) into a last dim and reduce it; adaptive average pooling is
-- one averaging matrix per dim. Returned indices are 1-based positions in each spatial
-- volume (int64), as dplhost's 1-d and 2-d pools. max_pool3d and avg_pool3d of host tensors
-- run the C kernels of src/tensor/dpl_tensor_pool3d.c instead (the same results, to the bit
-- where the composition is deterministic; a hand-written backward); GPU tensors keep the
-- composition. functional.lua installs the functions (M.install(F)); the modules are in
-- dpl.nn.extra.
local ffi = require 'ffi'
local C = require('dpl.capi').C
local T = require 'dpl.tensor'
local autograd = require 'dpl.autograd'
local options = require 'dpl.options'
local errors = require 'dpl.errors'
local FX = require 'dpl.nn.functional_extra'

local fmt = string.format
local type, tostring, floor, ceil = type, tostring, math.floor, math.ceil
local error = errors.raise
local is_tensor = T.is_tensor
local check_opts, keys = options.check, options.keys
local got, shape_str, need_tensor, need_float, need_bool = FX.got, FX.shape_str, FX.need_tensor, FX.need_float,
  FX.need_bool

local M = {}
local I64 = { dtype = 'int64' }

local function is_int(v) return type(v) == 'number' and v == floor(v) and v > -2 ^ 31 and v < 2 ^ 31 end
--- an integer or a list of n integers, each >= lo -> a list of n
local function ntuple(v, n, fn, what, lo)
  local r = {}
  if type(v) == 'table' and not is_tensor(v) then
    if #v ~= n then error(fmt('%s: %s must be an integer or a list of %d integers, got a list of %d', fn, what, n, #v), 3) end
    for i = 1, n do r[i] = v[i] end
  else
    for i = 1, n do r[i] = v end
  end
  for i = 1, n do
    if not is_int(r[i]) or r[i] < lo then
      error(fmt('%s: %s must be an integer >= %d (or a list of %d), got %s', fn, what, lo, n, got(r[i])), 3)
    end
  end
  return r
end
M.ntuple = ntuple

-- x of nsp spatial dims: batched (nsp + 2 dims) or unbatched (nsp + 1); returns the batched
-- form and whether it was unbatched
local function batched(x, nsp, fn)
  need_tensor(x, fn, 'input')
  local nd = x:dim()
  if nd ~= nsp + 1 and nd ~= nsp + 2 then
    local names = ({ 'L', 'H, W', 'D, H, W' })[nsp]
    error(fmt('%s: expected a %d-d [N, C, %s] or %d-d [C, %s] input, got shape %s', fn, nsp + 2, names, nsp + 1, names,
      shape_str(x)), 3)
  end
  if nd == nsp + 1 then return x:unsqueeze(1), true end
  return x, false
end

---------------------------------------------------------------- windows
-- gathers windows: x [lead..., S_1..S_n] (the last n dims spatial), idx[j] a list of o_j*k_j
-- 1-based positions (window by window) -> [lead..., o_1..o_n, k_1*...*k_n]
local function windows(x, lead, specs)
  local y = x
  local n = #specs
  for j = 1, n do
    local sp = specs[j]
    local dim = lead + 2 * (j - 1) + 1
    y = y:index_select(dim, T.tensor(sp.idx, { dtype = 'int64', device = x.device }))
    local s = y:size()
    local ns = {}
    for i = 1, dim - 1 do ns[#ns + 1] = s[i] end
    ns[#ns + 1] = sp.o
    ns[#ns + 1] = sp.k
    for i = dim + 1, #s do ns[#ns + 1] = s[i] end
    y = y:view(ns)
  end
  local perm = {}
  for i = 1, lead do perm[i] = i end
  for j = 1, n do perm[#perm + 1] = lead + 2 * j - 1 end
  for j = 1, n do perm[#perm + 1] = lead + 2 * j end
  y = y:permute(perm)
  local s = y:size()
  local ns, K = {}, 1
  for i = 1, lead + n do ns[i] = s[i] end
  for j = 1, n do K = K * specs[j].k end
  ns[#ns + 1] = K
  return y:reshape(ns)
end
M.windows = windows

-- a table [o_1..o_n, K] (int64) of the flat 1-based input positions of each window element,
-- pos[j] a list of o_j*k_j 0-based input positions per dim, sizes S_j
local function position_table(pos, specs, sizes, device)
  local n = #specs
  local flat, stride = nil, 1
  for j = n, 1, -1 do
    local vs = {}
    for i = 1, 2 * n do vs[i] = 1 end
    vs[j], vs[n + j] = specs[j].o, specs[j].k -- [1.., o_j, 1.., 1.., k_j, 1..]: o_j-major, as pos[j]
    local term = T.tensor(pos[j], I64):view(vs) * stride
    flat = flat and (flat + term) or term
    stride = stride * sizes[j]
  end
  local os, K = {}, 1
  for j = 1, n do os[j] = specs[j].o K = K * specs[j].k end
  os[n + 1] = K
  return (flat + 1):reshape(os):to(device)
end

-- PyTorch's pooling_output_shape
local function pool_out(size, k, s, p, d, ceil_mode)
  local o = floor((size + 2 * p - d * (k - 1) - 1 + (ceil_mode and s - 1 or 0)) / s) + 1
  if ceil_mode and (o - 1) * s >= size + p then o = o - 1 end
  return o
end

-- the windows of a (dilated) pool over one dim: 0-based input positions (may be < 0 or
-- >= size: padding)
local function pool_positions(o, k, s, p, d)
  local pos = {}
  for i = 0, o - 1 do for kk = 0, k - 1 do pos[#pos + 1] = i * s - p + kk * d end end
  return pos
end

---------------------------------------------------------------- conv3d
local CONV_KEYS = keys('stride', 'padding', 'dilation', 'groups')
local CONVT_KEYS = keys('stride', 'padding', 'output_padding', 'groups', 'dilation')

local function conv_check(fn, x, w, b, groups, transposed)
  need_tensor(w, fn, 'weight')
  if b ~= nil then need_tensor(b, fn, 'bias') end
  if w:dim() ~= 5 then
    error(fmt('%s: weight must be 5-d [%s, kD, kH, kW], got %s', fn, transposed and 'in_channels, out_channels/groups'
      or 'out_channels, in_channels/groups', shape_str(w)), 3)
  end
  local x5, unb = batched(x, 3, fn)
  need_float(x5, fn)
  local cin = transposed and w:size(1) or w:size(2) * groups
  if x5:size(2) ~= cin then
    error(fmt('%s: input has shape %s, expected %d channels in dim %d (weight %s, groups %d)', fn, shape_str(x), cin,
      unb and 1 or 2, shape_str(w), groups), 3)
  end
  local cout = transposed and w:size(2) * groups or w:size(1)
  if not transposed and w:size(1) % groups ~= 0 then
    error(fmt('%s: out_channels (%d) must be divisible by groups (%d)', fn, w:size(1), groups), 3)
  end
  if transposed and w:size(1) % groups ~= 0 then
    error(fmt('%s: in_channels (%d) must be divisible by groups (%d)', fn, w:size(1), groups), 3)
  end
  if b ~= nil and (b:dim() ~= 1 or b:size(1) ~= cout) then
    error(fmt('%s: bias must have shape [%d], got %s', fn, cout, shape_str(b)), 3)
  end
  if w.dtype ~= x5.dtype then
    error(fmt('%s: input dtype %s and weight dtype %s differ', fn, x5.dtype, w.dtype), 3)
  end
  return x5, unb
end

-- conv3d on a batched input with explicit (symmetric) padding
local function conv3d_raw(x, w, b, s, p, d, groups)
  local F = require 'dpl.nn.functional'
  local N, C, D = x:size(1), x:size(2), x:size(3)
  local O, kD = w:size(1), w:size(3)
  if p[1] > 0 then x = F.pad(x, { 0, 0, 0, 0, p[1], p[1] }) D = D + 2 * p[1] end
  local oD = floor((D - d[1] * (kD - 1) - 1) / s[1]) + 1
  local H, W = x:size(4), x:size(5)
  local oH = floor((H + 2 * p[2] - d[2] * (w:size(4) - 1) - 1) / s[2]) + 1
  local oW = floor((W + 2 * p[3] - d[3] * (w:size(5) - 1) - 1) / s[3]) + 1
  if oD < 1 or oH < 1 or oW < 1 then
    error(fmt('conv3d: the (padded) input [%d, %d, %d] is smaller than the (dilated) kernel [%d, %d, %d]', D,
      H + 2 * p[2], W + 2 * p[3], d[1] * (kD - 1) + 1, d[2] * (w:size(4) - 1) + 1, d[3] * (w:size(5) - 1) + 1), 3)
  end
  local idx = {}
  for od = 0, oD - 1 do for kd = 0, kD - 1 do idx[#idx + 1] = od * s[1] + kd * d[1] + 1 end end
  local xs = x:index_select(3, T.tensor(idx, { dtype = 'int64', device = x.device })) -- [N, C, oD*kD, H, W]
  xs = xs:view(N, C, oD, kD, H, W):permute(1, 3, 2, 4, 5, 6):reshape(N * oD, C * kD, H, W)
  local w2 = w:reshape(O, w:size(2) * kD, w:size(4), w:size(5))
  local y = F.conv2d(xs, w2, b, { stride = { s[2], s[3] }, padding = { p[2], p[3] }, dilation = { d[2], d[3] },
    groups = groups })
  return y:view(N, oD, O, y:size(3), y:size(4)):permute(1, 3, 2, 4, 5):contiguous()
end

--- conv3d(x [N, C, D, H, W] or [C, D, H, W], weight [out, C/groups, kD, kH, kW] [, bias] [,
--- {stride=1, padding=0 | 'same' | 'valid', dilation=1, groups=1}])
function M.conv3d(x, w, b, opts)
  local fn = 'conv3d'
  check_opts(opts, CONV_KEYS, fn)
  opts = opts or {}
  local s = ntuple(opts.stride or 1, 3, fn, 'stride', 1)
  local d = ntuple(opts.dilation or 1, 3, fn, 'dilation', 1)
  local groups = ntuple(opts.groups or 1, 1, fn, 'groups', 1)[1]
  local x5, unb = conv_check(fn, x, w, b, groups, false)
  local pad = opts.padding or 0
  local y
  if type(pad) == 'string' then
    if pad ~= 'same' and pad ~= 'valid' then
      error(fmt("%s: invalid padding string '%s', should be one of 'valid', 'same'", fn, pad), 2)
    end
    if pad == 'same' then
      if s[1] ~= 1 or s[2] ~= 1 or s[3] ~= 1 then
        error(fmt("%s: padding='same' is not supported for strided convolutions", fn), 2)
      end
      local pads = {}
      for j = 3, 1, -1 do
        local total = d[j] * (w:size(2 + j) - 1)
        pads[#pads + 1] = floor(total / 2)
        pads[#pads + 1] = total - floor(total / 2)
      end
      x5 = require('dpl.nn.functional').pad(x5, pads)
    end
    y = conv3d_raw(x5, w, b, s, { 0, 0, 0 }, d, groups)
  else
    y = conv3d_raw(x5, w, b, s, ntuple(pad, 3, fn, 'padding', 0), d, groups)
  end
  return unb and y:squeeze(1) or y
end

-- stride - 1 zeros between the elements of dim `dim`
local function dilate(x, dim, s)
  if s == 1 or x:size(dim) <= 1 then return x end
  local sz = x:size()
  local n = sz[dim]
  local xu = x:unsqueeze(dim + 1)
  local zs = xu:size()
  zs[dim + 1] = s - 1
  local y = T.cat({ xu, T.zeros(zs, { dtype = x.dtype, device = x.device }) }, dim + 1)
  sz[dim] = n * s
  return y:reshape(sz):narrow(dim, 1, (n - 1) * s + 1)
end

--- conv_transpose3d(x [N, C_in, D, H, W] or unbatched, weight [C_in, out/groups, kD, kH, kW]
--- [, bias] [, {stride=1, padding=0, output_padding=0, groups=1, dilation=1}])
function M.conv_transpose3d(x, w, b, opts)
  local fn = 'conv_transpose3d'
  check_opts(opts, CONVT_KEYS, fn)
  opts = opts or {}
  local s = ntuple(opts.stride or 1, 3, fn, 'stride', 1)
  local p = ntuple(opts.padding or 0, 3, fn, 'padding', 0)
  local op = ntuple(opts.output_padding or 0, 3, fn, 'output_padding', 0)
  local d = ntuple(opts.dilation or 1, 3, fn, 'dilation', 1)
  local groups = ntuple(opts.groups or 1, 1, fn, 'groups', 1)[1]
  for j = 1, 3 do
    if op[j] >= s[j] and op[j] >= d[j] then
      error(fmt('%s: output padding must be smaller than either stride or dilation, but got output_padding=%d, '
        .. 'stride=%d, dilation=%d', fn, op[j], s[j], d[j]), 2)
    end
  end
  local x5, unb = conv_check(fn, x, w, b, groups, true)
  local y = x5
  local pads = {}
  for j = 1, 3 do
    y = dilate(y, 2 + j, s[j])
    local e = d[j] * (w:size(2 + j) - 1) - p[j]
    pads[7 - 2 * j], pads[8 - 2 * j] = e, e + op[j]
  end
  for j = 1, 3 do
    local size = (x5:size(2 + j) - 1) * s[j] - 2 * p[j] + d[j] * (w:size(2 + j) - 1) + op[j] + 1
    if size < 1 then
      error(fmt('%s: the output size %d along spatial dim %d is not positive (input %s, weight %s)', fn, size, j,
        shape_str(x), shape_str(w)), 2)
    end
  end
  y = require('dpl.nn.functional').pad(y, pads)
  local Cin, Og = w:size(1), w:size(2)
  local k = { w:size(3), w:size(4), w:size(5) }
  -- [Cin, out/g, k] -> [g, Cin/g, out/g, k] -> [g, out/g, Cin/g, k] -> [out, Cin/g, k], flipped
  local wt = w:reshape(groups, Cin / groups, Og, k[1], k[2], k[3]):transpose(2, 3)
    :reshape(groups * Og, Cin / groups, k[1], k[2], k[3]):flip({ 3, 4, 5 })
  y = conv3d_raw(y, wt, b, { 1, 1, 1 }, { 0, 0, 0 }, d, groups)
  return unb and y:squeeze(1) or y
end

---------------------------------------------------------------- max_pool3d / avg_pool3d
local out1 = ffi.new('dpl_tensor*[1]')
local out2 = ffi.new('dpl_tensor*[1]')
local p13 = ffi.new('int32_t[13]')
local wrap, fail = T._wrap, T._fail
local record = autograd.record
local function devmem(t) return t._flags % 4 >= 2 end -- DPL_DEVMEM: a real GPU's memory
-- M._composed = true: the composition on host tensors too (the specs compare the two)
M._composed = false
local function call(fn, ...)
  local st = fn(...)
  if st == -2 then collectgarbage() st = fn(...) end -- ENOMEM: once more after a collection
  if st ~= 0 then fail(2, st) end
end
-- the C kernels' params: kernel, stride, padding, dilation (3 each), ceil_mode
local function set_p13(k, s, p, d, ceil_mode)
  for j = 1, 3 do
    p13[j - 1], p13[2 + j], p13[5 + j], p13[8 + j] = k[j], s[j], p[j], d[j]
  end
  p13[12] = ceil_mode and 1 or 0
  return p13
end
-- backward rules of the C kernels (indices 0-based, as the kernel returns them)
local max3_rule = {
  nin = 1, name = 'max_pool3d',
  save = function(n, out, x, idx) n.x, n.idx = autograd.save_for_backward(n, x), idx end,
  bw = function(n, g)
    call(C.dpl_max_pool3d_backward, g, n.x, n.idx, out1)
    return wrap(out1)
  end,
}
local avg3_rule = {
  nin = 1, name = 'avg_pool3d',
  save = function(n, out, x, geom) n.x, n.geom = x:detach(), geom end,
  bw = function(n, g)
    local q = n.geom
    call(C.dpl_avg_pool3d_backward, g, n.x, set_p13(q[1], q[2], q[3], q[4], q[5]), q[6], q[7], out1)
    return wrap(out1)
  end,
}
local MAXP_KEYS = keys('stride', 'padding', 'dilation', 'ceil_mode', 'return_indices')
local AVGP_KEYS = keys('stride', 'padding', 'ceil_mode', 'count_include_pad', 'divisor_override')

local function pool_geom(fn, x5, k, s, p, d, ceil_mode)
  local o = {}
  for j = 1, 3 do
    if 2 * p[j] > k[j] then
      error(fmt('%s: pad should be smaller than or equal to half of kernel size, but got padding=%d and '
        .. 'kernel_size=%d', fn, p[j], k[j]), 3)
    end
    o[j] = pool_out(x5:size(2 + j), k[j], s[j], p[j], d[j], ceil_mode)
  end
  if o[1] < 1 or o[2] < 1 or o[3] < 1 then
    error(fmt('%s: Given input size: (%d, %d, %d, %d). Calculated output size: (%d, %d, %d, %d). Output size is too '
      .. 'small', fn, x5:size(2), x5:size(3), x5:size(4), x5:size(5), x5:size(2), o[1], o[2], o[3]), 3)
  end
  return o
end

-- the padded input's windows: pads by p on the left and enough on the right, fill value v
local function padded_windows(x5, o, k, s, p, d, v)
  local F = require 'dpl.nn.functional'
  local pads, specs, pos = {}, {}, {}
  for j = 1, 3 do
    local size = x5:size(2 + j)
    local need = (o[j] - 1) * s[j] + d[j] * (k[j] - 1) + 1 -- extent from the left padding
    local right = math.max(0, need - p[j] - size)
    pads[7 - 2 * j], pads[8 - 2 * j] = p[j], right
    pos[j] = pool_positions(o[j], k[j], s[j], p[j], d[j])
    local idx = {}
    for i = 1, #pos[j] do idx[i] = pos[j][i] + p[j] + 1 end
    specs[j] = { o = o[j], k = k[j], idx = idx }
  end
  local xp = x5
  if pads[1] + pads[2] + pads[3] + pads[4] + pads[5] + pads[6] > 0 then xp = F.pad(x5, pads, 'constant', v) end
  return windows(xp, 2, specs), specs, pos
end

--- max_pool3d(x [N, C, D, H, W] or [C, D, H, W], kernel_size [, {stride=kernel_size,
--- padding=0, dilation=1, ceil_mode=false, return_indices=false}]) -> values [, indices]
function M.max_pool3d(x, k, opts)
  local fn = 'max_pool3d'
  check_opts(opts, MAXP_KEYS, fn)
  opts = opts or {}
  k = ntuple(k, 3, fn, 'kernel_size', 1)
  local s = opts.stride ~= nil and ntuple(opts.stride, 3, fn, 'stride', 1) or k
  local p = ntuple(opts.padding or 0, 3, fn, 'padding', 0)
  local d = ntuple(opts.dilation or 1, 3, fn, 'dilation', 1)
  need_bool(opts.ceil_mode, fn, 'ceil_mode')
  need_bool(opts.return_indices, fn, 'return_indices')
  local x5, unb = batched(x, 3, fn)
  need_float(x5, fn)
  local o = pool_geom(fn, x5, k, s, p, d, opts.ceil_mode)
  if not devmem(x5) and not M._composed then -- host memory: the C kernel
    call(C.dpl_max_pool3d, x5, set_p13(k, s, p, d, opts.ceil_mode), out1, out2)
    local v = wrap(out1)
    local i0 = wrap(out2)
    if x5.requires_grad and autograd.is_grad_enabled() then v = record(max3_rule, v, x5, i0) end
    if unb then v = v:squeeze(1) end
    if not opts.return_indices then return v end
    local idx = i0 + 1
    return v, unb and idx:squeeze(1) or idx
  end
  local win, specs, pos = padded_windows(x5, o, k, s, p, d, -math.huge)
  local v, arg = win:max(-1)
  if unb then v = v:squeeze(1) end
  if not opts.return_indices then return v end
  local P = position_table(pos, specs, { x5:size(3), x5:size(4), x5:size(5) }, x5.device)
  local ps = arg:size()
  ps[#ps + 1] = P:size(4)
  local idx = P:expand(ps):gather(6, arg:unsqueeze(6)):squeeze(6)
  if unb then idx = idx:squeeze(1) end
  return v, idx
end

-- PyTorch's avg_pool divisor of the windows along one dim (count_include_pad: the window
-- clipped at size + pad; else clipped at the input)
local function avg_counts(o, k, s, p, size, include)
  local c = {}
  for i = 0, o - 1 do
    local a = i * s - p
    local e = math.min(a + k, size + p)
    local full = e - a
    a, e = math.max(a, 0), math.min(e, size)
    c[i + 1] = include and full or (e - a)
  end
  return c
end

--- avg_pool3d(x, kernel_size [, {stride=kernel_size, padding=0, ceil_mode=false,
--- count_include_pad=true, divisor_override=}])
function M.avg_pool3d(x, k, opts)
  local fn = 'avg_pool3d'
  check_opts(opts, AVGP_KEYS, fn)
  opts = opts or {}
  k = ntuple(k, 3, fn, 'kernel_size', 1)
  local s = opts.stride ~= nil and ntuple(opts.stride, 3, fn, 'stride', 1) or k
  local p = ntuple(opts.padding or 0, 3, fn, 'padding', 0)
  need_bool(opts.ceil_mode, fn, 'ceil_mode')
  need_bool(opts.count_include_pad, fn, 'count_include_pad')
  local div = opts.divisor_override
  if div ~= nil and (not is_int(div) or div == 0) then
    error(fmt('%s: divisor must be not zero (an integer), got %s', fn, got(div)), 2)
  end
  local x5, unb = batched(x, 3, fn)
  need_float(x5, fn)
  local one = { 1, 1, 1 }
  local o = pool_geom(fn, x5, k, s, p, one, opts.ceil_mode)
  if not devmem(x5) and not M._composed then -- host memory: the C kernel
    local cip = opts.count_include_pad ~= false and 1 or 0
    call(C.dpl_avg_pool3d, x5, set_p13(k, s, p, one, opts.ceil_mode), cip, div or 0, out1)
    local y = wrap(out1)
    if x5.requires_grad and autograd.is_grad_enabled() then
      y = record(avg3_rule, y, x5, { k, s, p, one, opts.ceil_mode, cip, div or 0 })
    end
    return unb and y:squeeze(1) or y
  end
  local win = padded_windows(x5, o, k, s, p, one, 0)
  local y = win:sum(-1)
  if div ~= nil then
    y = y / div
  else
    local include = opts.count_include_pad ~= false
    local c = {}
    for j = 1, 3 do c[j] = avg_counts(o[j], k[j], s[j], p[j], x5:size(2 + j), include) end
    local o_ = { dtype = x5.dtype, device = x5.device }
    local cnt = T.tensor(c[1], o_):view(-1, 1, 1) * T.tensor(c[2], o_):view(1, -1, 1) * T.tensor(c[3], o_):view(1, 1, -1)
    y = y / cnt
  end
  return unb and y:squeeze(1) or y
end

---------------------------------------------------------------- adaptive 3-d pools
-- output sizes: an integer or a list of 3 (nil/false: the input's size)
local function adaptive_sizes(v, x5, fn)
  local r = {}
  for j = 1, 3 do
    local e = v
    if type(v) == 'table' and not is_tensor(v) then
      if #v > 3 or (v.n and v.n ~= 3) then error(fmt('%s: output_size must be an integer or a list of 3', fn), 3) end
      e = v[j]
    end
    if e == nil or e == false then e = x5:size(2 + j) end
    if not is_int(e) or e < 0 then error(fmt('%s: output_size must be integers >= 0, got %s', fn, got(e)), 3) end
    r[j] = e
  end
  return r
end
local function astart(i, S, O) return floor(i * S / O) end
local function aend(i, S, O) return ceil((i + 1) * S / O) end

--- adaptive_avg_pool3d(x [N, C, D, H, W] or [C, D, H, W], output_size)
function M.adaptive_avg_pool3d(x, size)
  local fn = 'adaptive_avg_pool3d'
  local x5, unb = batched(x, 3, fn)
  need_float(x5, fn)
  local o = adaptive_sizes(size, x5, fn)
  local y = x5
  for j = 1, 3 do
    local S, O = x5:size(2 + j), o[j]
    if not (S == O) then
      local A = {}
      for i = 0, O - 1 do
        local row = {}
        for q = 1, S do row[q] = 0 end
        local a, e = astart(i, S, O), aend(i, S, O)
        for q = a + 1, e do row[q] = 1 / (e - a) end
        A[i + 1] = row
      end
      local At = T.tensor(A, { dtype = x5.dtype, device = x5.device }):t()
      if O == 0 then At = T.zeros({ S, 0 }, { dtype = x5.dtype, device = x5.device }) end
      y = y:movedim(2 + j, 5):matmul(At):movedim(5, 2 + j)
    end
  end
  y = y:contiguous()
  return unb and y:squeeze(1) or y
end

--- adaptive_max_pool3d(x, output_size [, return_indices | {return_indices=}]) -> values
--- [, indices: 1-based positions in each D*H*W volume]
function M.adaptive_max_pool3d(x, size, ri)
  local fn = 'adaptive_max_pool3d'
  if type(ri) == 'table' then check_opts(ri, keys('return_indices'), fn) ri = ri.return_indices end
  need_bool(ri, fn, 'return_indices')
  local x5, unb = batched(x, 3, fn)
  need_float(x5, fn)
  local o = adaptive_sizes(size, x5, fn)
  local specs, pos = {}, {}
  for j = 1, 3 do
    local S, O = x5:size(2 + j), o[j]
    if S == 0 or O == 0 then error(fmt('%s: input %s and output size (%d, %d, %d) must be non-empty', fn, shape_str(x),
      o[1], o[2], o[3]), 2) end
    local kmax = 0
    for i = 0, O - 1 do kmax = math.max(kmax, aend(i, S, O) - astart(i, S, O)) end
    local p, idx = {}, {}
    for i = 0, O - 1 do
      local a, e = astart(i, S, O), aend(i, S, O)
      for kk = 0, kmax - 1 do
        local q = math.min(a + kk, e - 1) -- a repeat of the window's last element: the max and first argmax stay
        p[#p + 1] = q
        idx[#idx + 1] = q + 1
      end
    end
    specs[j], pos[j] = { o = O, k = kmax, idx = idx }, p
  end
  local win = windows(x5, 2, specs)
  local v, arg = win:max(-1)
  if unb then v = v:squeeze(1) end
  if not ri then return v end
  local P = position_table(pos, specs, { x5:size(3), x5:size(4), x5:size(5) }, x5.device)
  local ps = arg:size()
  ps[#ps + 1] = P:size(4)
  local idx = P:expand(ps):gather(6, arg:unsqueeze(6)):squeeze(6)
  if unb then idx = idx:squeeze(1) end
  return v, idx
end

---------------------------------------------------------------- max_unpool
local UNPOOL_KEYS = keys('stride', 'padding', 'output_size')
local function max_unpool(nsp, x, indices, k, opts)
  local fn = 'max_unpool' .. nsp .. 'd'
  check_opts(opts, UNPOOL_KEYS, fn)
  opts = opts or {}
  need_tensor(indices, fn, 'indices')
  k = ntuple(k, nsp, fn, 'kernel_size', 1)
  local s = opts.stride ~= nil and ntuple(opts.stride, nsp, fn, 'stride', 1) or k
  local p = ntuple(opts.padding or 0, nsp, fn, 'padding', 0)
  local xb, unb = batched(x, nsp, fn)
  need_float(xb, fn)
  if indices.dtype ~= 'int64' then error(fmt('%s: indices must be int64, got %s', fn, indices.dtype), 2) end
  local same = indices:dim() == x:dim()
  if same then for i = 1, x:dim() do if indices:size(i) ~= x:size(i) then same = false end end end
  if not same then
    error(fmt('%s: Expected shape of indices to be same as that of the input tensor (%s) but got indices tensor with '
      .. 'shape %s', fn, shape_str(x), shape_str(indices)), 2)
  end
  local out = {}
  local os = opts.output_size
  if os ~= nil then
    if type(os) ~= 'table' then error(fmt('%s: output_size must be a list, got %s', fn, got(os)), 2) end
    local n = #os
    if n == nsp + 2 then for j = 1, nsp do out[j] = os[j + 2] end
    elseif n == nsp + 1 and unb then for j = 1, nsp do out[j] = os[j + 1] end
    elseif n == nsp then for j = 1, nsp do out[j] = os[j] end
    else error(fmt('%s: output_size should be a sequence containing %d or %d elements, but it has a length of %d', fn,
      nsp, nsp + 2, n), 2) end
    for j = 1, nsp do
      local def = (xb:size(2 + j) - 1) * s[j] - 2 * p[j] + k[j]
      if not is_int(out[j]) or out[j] < def - s[j] or out[j] > def + s[j] then
        error(fmt('%s: invalid output_size %s (dim %d must be between %d and %d)', fn, got(out[j]), j, def - s[j],
          def + s[j]), 2)
      end
    end
  else
    for j = 1, nsp do out[j] = (xb:size(2 + j) - 1) * s[j] - 2 * p[j] + k[j] end
  end
  local N, C = xb:size(1), xb:size(2)
  local vol = 1
  for j = 1, nsp do vol = vol * out[j] end
  local ib = unb and indices:unsqueeze(1) or indices
  local flat_i = ib:reshape(N, C, -1)
  if flat_i:numel() > 0 then
    local lo, hi = flat_i:min():item(), flat_i:max():item()
    if lo < 1 or hi > vol then
      error(fmt('%s: Found an invalid max index: %d (output volumes are of size %s; indices are 1-based)', fn,
        lo < 1 and lo or hi, table.concat(out, 'x')), 2)
    end
  end
  local y = T.zeros({ N, C, vol }, { dtype = xb.dtype, device = xb.device })
    :scatter(3, flat_i:to(xb.device), xb:reshape(N, C, -1))
  local shape = { N, C }
  for j = 1, nsp do shape[2 + j] = out[j] end
  y = y:view(shape)
  return unb and y:squeeze(1) or y
end
--- max_unpool1d/2d/3d(x, indices (1-based, as the max pools return them), kernel_size [,
--- {stride=kernel_size, padding=0, output_size=}]): x's values at the indices, zeros elsewhere
function M.max_unpool1d(x, i, k, opts) return max_unpool(1, x, i, k, opts) end
function M.max_unpool2d(x, i, k, opts) return max_unpool(2, x, i, k, opts) end
function M.max_unpool3d(x, i, k, opts) return max_unpool(3, x, i, k, opts) end

---------------------------------------------------------------- lp_pool
local LP_KEYS = keys('stride', 'ceil_mode')
local function lp_pool(nsp, x, norm_type, k, opts)
  local fn = 'lp_pool' .. nsp .. 'd'
  local F = require 'dpl.nn.functional'
  if type(opts) ~= 'table' and opts ~= nil then opts = { stride = opts } end
  check_opts(opts, LP_KEYS, fn)
  opts = opts or {}
  if type(norm_type) ~= 'number' or norm_type ~= norm_type or norm_type == 0 then
    error(fmt('%s: norm_type must be a non-zero number, got %s', fn, got(norm_type)), 3)
  end
  need_tensor(x, fn, 'input')
  need_float(x, fn)
  local kk = ntuple(k, nsp, fn, 'kernel_size', 1)
  need_bool(opts.ceil_mode, fn, 'ceil_mode')
  local out
  if nsp == 1 then
    out = F.avg_pool1d(x:pow(norm_type), kk[1], { stride = opts.stride, ceil_mode = opts.ceil_mode })
  else
    if x:dim() ~= 3 and x:dim() ~= 4 then
      error(fmt('%s: expected a 4-d [N, C, H, W] or 3-d [C, H, W] input, got shape %s', fn, shape_str(x)), 3)
    end
    out = F.avg_pool2d(x:pow(norm_type), kk, { stride = opts.stride, ceil_mode = opts.ceil_mode })
  end
  local n = 1
  for j = 1, nsp do n = n * kk[j] end
  return (out:sign() * out:abs():relu()):mul(n):pow(1 / norm_type)
end
--- lp_pool1d(x [N, C, L] or [C, L], norm_type, kernel_size [, stride | {stride=, ceil_mode=}]):
--- (sum over the window of x^p)^(1/p), as PyTorch's (an average pool of x^p times the size)
function M.lp_pool1d(x, norm_type, k, opts) return lp_pool(1, x, norm_type, k, opts) end
--- lp_pool2d(x [N, C, H, W] or [C, H, W], norm_type, kernel_size [, stride | {stride=, ceil_mode=}])
function M.lp_pool2d(x, norm_type, k, opts) return lp_pool(2, x, norm_type, k, opts) end

---------------------------------------------------------------- fractional_max_pool2d
local FMP_KEYS = keys('output_size', 'output_ratio', 'return_indices', '_random_samples')
--- fractional_max_pool2d(x [N, C, H, W] or [C, H, W], kernel_size [, {output_size=,
--- output_ratio=, return_indices=false, _random_samples= [N, C, 2]}]): max over windows
--- of kernel_size starting at PyTorch's pseudo-random sequence (from U(0, 1) samples drawn
--- from dpl's generator, one pair per plane: [1] for the width, [2] for the height)
function M.fractional_max_pool2d(x, k, opts)
  local fn = 'fractional_max_pool2d'
  check_opts(opts, FMP_KEYS, fn)
  opts = opts or {}
  k = ntuple(k, 2, fn, 'kernel_size', 1)
  need_bool(opts.return_indices, fn, 'return_indices')
  local x4, unb = batched(x, 2, fn)
  need_float(x4, fn)
  local N, Cc, H, W = x4:size(1), x4:size(2), x4:size(3), x4:size(4)
  local oh, ow
  if opts.output_size ~= nil then
    local os = ntuple(opts.output_size, 2, fn, 'output_size', 1)
    oh, ow = os[1], os[2]
  elseif opts.output_ratio ~= nil then
    local r = opts.output_ratio
    if type(r) ~= 'table' then r = { r, r } end
    for j = 1, 2 do
      if type(r[j]) ~= 'number' or not (r[j] > 0 and r[j] < 1) then
        error(fmt('%s: output_ratio must be between 0 and 1 (got %s)', fn, got(r[j])), 2)
      end
    end
    oh, ow = floor(H * r[1]), floor(W * r[2])
  else
    error(fmt('%s: fractional_max_pool2d requires specifying either an output_size or an output_ratio', fn), 2)
  end
  if oh + k[1] - 1 > H then
    error(fmt('%s: pool height %d too large relative to input height %d (output height %d)', fn, k[1], H, oh), 2)
  end
  if ow + k[2] - 1 > W then
    error(fmt('%s: pool width %d too large relative to input width %d (output width %d)', fn, k[2], W, ow), 2)
  end
  local o_ = { dtype = x4.dtype, device = 'cpu' }
  local samples = opts._random_samples
  if samples ~= nil then
    need_float(samples, fn, '_random_samples')
    if samples:dim() ~= 3 or samples:size(1) ~= N or samples:size(2) ~= Cc or samples:size(3) ~= 2 then
      error(fmt('%s: _random_samples must have shape [%d, %d, 2], got %s', fn, N, Cc, shape_str(samples)), 2)
    end
    samples = samples:to('cpu'):to(x4.dtype)
  else
    samples = autograd.no_grad(function() return T.rand({ N, Cc, 2 }, o_) end)
  end
  -- PyTorch's generate_intervals, in the input's dtype: floor((i + u) * alpha) - floor(u * alpha)
  local function seq(u, S, O, K) -- u [N*C, 1] -> starts [N*C, O] (0-based)
    local NC = u:size(1)
    if O == 1 then return T.full({ NC, 1 }, S - K, I64) end
    local alpha = T.tensor((S - K), o_) / (O - 1)
    local i = T.arange(0, O - 1, o_):view(1, -1)
    local st = ((i + u) * alpha):floor() - (u * alpha):floor()
    return T.cat({ st:to('int64'), T.full({ NC, 1 }, S - K, I64) }, 2)
  end
  local us = autograd.no_grad(function() return samples:reshape(N * Cc, 2) end)
  local sw = seq(us:narrow(2, 1, 1), W, ow, k[2])
  local sh = seq(us:narrow(2, 2, 1), H, oh, k[1])
  -- flat positions [N*C, oh, ow, kh, kw] = (sh + a) * W + (sw + b)
  local rows = (sh:view(N * Cc, oh, 1, 1, 1) + T.arange(0, k[1], I64):view(1, 1, 1, -1, 1)) * W
  local cols = sw:view(N * Cc, 1, ow, 1, 1) + T.arange(0, k[2], I64):view(1, 1, 1, 1, -1)
  local pos = (rows + cols):reshape(N * Cc, oh * ow * k[1] * k[2]):to(x4.device)
  local win = x4:reshape(N * Cc, H * W):gather(2, pos + 1):view(N, Cc, oh, ow, k[1] * k[2])
  local v, arg = win:max(-1)
  if unb then v = v:squeeze(1) end
  if not opts.return_indices then return v end
  local idx = pos:view(N, Cc, oh, ow, k[1] * k[2]):gather(5, arg:unsqueeze(5)):squeeze(5) + 1
  if unb then idx = idx:squeeze(1) end
  return v, idx
end

local NAMES = { 'conv3d', 'conv_transpose3d', 'max_pool3d', 'avg_pool3d', 'adaptive_avg_pool3d', 'adaptive_max_pool3d',
  'max_unpool1d', 'max_unpool2d', 'max_unpool3d', 'lp_pool1d', 'lp_pool2d', 'fractional_max_pool2d' }
function M.install(F)
  for _, name in ipairs(NAMES) do F[name] = M[name] end
  return F
end

return M
