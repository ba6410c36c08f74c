-- nn_conv_spec.lua: the conv group of nn (dpl.nn.conv, dpl.nn.functional_conv): Conv1d,
-- ConvTranspose1d/2d, MaxPool1d, AvgPool1d, the adaptive pools, Dropout1d/2d, the padding
-- layers and F.pad, Upsample / F.interpolate, PixelShuffle/Unshuffle, Unfold/Fold. Values
-- and gradients (input and every parameter) against PyTorch 1.13 in float64 and float32,
-- contiguous and not (spec/fixtures/nn_conv_ref.lua from gen_nn_conv_ref.py), state dict
-- keys, the initialisation, dropout in train and eval, every error path, memory, and a small
-- CNN that learns a slice of Fashion-MNIST.
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local nn, F = dpl.nn, dpl.nn.functional
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/nn_conv_ref.lua')

local function flat(v, out)
  out = out or {}
  if type(v) == 'table' then for _, x in ipairs(v) do flat(x, out) end else out[#out + 1] = v end
  return out
end
-- |got - expected| <= tol * (1 + |expected|) elementwise, same shape
local function near(expected, got, what, tol)
  if type(got) == 'cdata' then got = got:double():totable() end
  local e, g = flat(expected), flat(got)
  assert(#e == #g, ('%s: expected %d elements, got %d'):format(what, #e, #g))
  for i = 1, #e do
    if not (math.abs(e[i] - g[i]) <= (tol or 1e-10) * (1 + math.abs(e[i]))) then
      error(('%s: element %d: expected %.12g, got %.12g'):format(what, i, e[i], g[i]), 2)
    end
  end
end
local function same_shape(t, shape, what)
  assert.are.same(shape, t:size(), what)
end
local function err_of(f)
  local ok, e = pcall(f)
  assert(not ok, 'expected an error')
  return tostring(e)
end

-- the dplhost side of a fixture case: a module (state loaded) or a function, and the module
local function build(c, dtype)
  local chunk = assert(load(c.lua, '=case', 't', setmetatable({ nn = nn, F = F, dpl = dpl }, { __index = _G })))
  local obj, mod = chunk()
  if nn.Module.is_module(obj) then mod = obj end
  if mod then
    mod:to(dtype)
    if c.state then
      local sd = {}
      for k, v in pairs(c.state) do sd[k] = dpl.tensor(v, { dtype = dtype }) end
      mod:load_state_dict(sd)
    end
  end
  return obj, mod
end

-- x in dtype, contiguous or a non-contiguous view with the same values
local function input(c, dtype, noncontig)
  local x = dpl.tensor(c.x, { dtype = dtype })
  if noncontig and x:dim() >= 2 then
    x = x:transpose(-1, -2):contiguous():transpose(-1, -2)
    assert(not x:is_contiguous() or x:size(-1) == 1 or x:size(-2) == 1)
  end
  return x
end

local function run_case(name, dtype, noncontig)
  local c = ref[name]
  local obj, mod = build(c, dtype)
  local x = input(c, dtype, noncontig)
  if c.gx then x:requires_grad_() end
  local y, idx = obj(x)
  same_shape(y, c.yshape, name .. ' output shape')
  assert.are.equal(dtype, y.dtype, name .. ' output dtype')
  local f32 = dtype == 'float32'
  local tol = f32 and 2e-5 or 1e-10
  near(f32 and c.y32 or c.y, y, name .. ' output (' .. dtype .. ')', f32 and not c.y32 and 1e-4 or tol)
  if c.idx then
    assert.are.equal('int64', idx.dtype)
    assert.are.same(flat(c.idx), flat(idx:totable()), name .. ' indices')
  end
  if c.gx then
    y:backward(dpl.tensor(c.g, { dtype = dtype }))
    near(f32 and c.gx32 or c.gx, x.grad, name .. ' input gradient (' .. dtype .. ')', f32 and not c.gx32 and 1e-4 or tol)
    for k, gp in pairs(c.gp or {}) do
      local p
      for pk, pv in mod:named_parameters() do if pk == k then p = pv end end
      assert(p, name .. ': no parameter ' .. k)
      near(gp, p.grad, name .. ' gradient of ' .. k .. ' (' .. dtype .. ')', f32 and 2e-4 or tol)
    end
  end
  return mod
end

local names = {}
for k, v in pairs(ref) do if type(v) == 'table' and v.lua then names[#names + 1] = k end end
table.sort(names)

describe('the conv group against PyTorch 1.13', function()
  for _, name in ipairs(names) do
    it(name .. ': values and gradients, float64 and float32, contiguous and not', function()
      local mod = run_case(name, 'float64', false)
      run_case(name, 'float32', false)
      run_case(name, 'float64', true)
      local c = ref[name]
      if c.keys then -- PyTorch's state dict keys, in its order, and shapes
        assert.are.same(c.keys, mod:state_dict_keys())
        for k, t in pairs(mod:state_dict()) do assert.are.same(c.shapes[k], t:size(), name .. ' ' .. k) end
      end
    end)
  end
end)

describe('the conv group beyond the fixtures', function()
  it('nearest interpolation and padding move elements of any dtype', function()
    local c = ref.interp_nearest_int
    local x = dpl.arange(9):view(1, 1, 3, 3)
    local y = F.interpolate(x, { size = { 4, 5 } })
    assert.are.equal('int64', y.dtype)
    assert.are.same(flat(c.y), flat(y:double():totable()))
    assert.are.equal('uint8', F.interpolate(x:to('uint8'), { scale_factor = 2 }).dtype)
    local b = dpl.tensor({ { { true, false, false } } })
    assert.are.same({ { { false, true, false, false, false } } }, F.pad(b, { 1, 1 }, 'reflect'):totable())
    assert.are.same({ { { 7, 7, 0, 1, 2, 3 } } }, F.pad(dpl.arange(5):view(1, 1, 5), { 2, -1 }, 'constant', 7):totable())
    assert.are.same({ { 0, 0, 1, 2, 2, 2 } }, F.pad(dpl.arange(3):view(1, 3), { 1, 2 }, 'replicate'):totable())
    -- float16 goes through float32, as PyTorch's CPU kernels
    local hx = dpl.randn(1, 1, 3, 3)
    local hy = F.interpolate(hx:half(), { scale_factor = 2, mode = 'bilinear' })
    assert.are.equal('float16', hy.dtype)
    near(flat(F.interpolate(hx:half():float(), { scale_factor = 2, mode = 'bilinear' }):totable()), hy:float(),
      'float16 bilinear', 1e-2)
  end)

  it('PyTorch initialisation: U(+-1/sqrt(fan_in)) weights and biases, fan_in with groups', function()
    dpl.manual_seed(3)
    local mods = {
      conv1d = nn.Conv1d(16, 32, 5, { groups = 2 }),
      convt1d = nn.ConvTranspose1d(16, 32, 5, { groups = 4 }),
      convt2d = nn.ConvTranspose2d(24, 12, { 3, 2 }, { groups = 3 }),
    }
    for name, m in pairs(mods) do
      local r = ref.init[name]
      assert.are.same(r.wshape, m.weight:size(), name)
      local w = m.weight:double()
      local mx = w:abs():max():item()
      assert(mx <= r.bound and mx > 0.95 * r.bound, ('%s: max |w| %g, bound %g'):format(name, mx, r.bound))
      local sd = w:std():item()
      assert(math.abs(sd - r.bound / math.sqrt(3)) < 0.08 * r.bound, ('%s: std %g'):format(name, sd))
      assert(math.abs(w:mean():item()) < 0.1 * r.bound, name .. ' mean')
      local bm = m.bias:double():abs():max():item()
      assert(bm <= r.bound and bm > 0.3 * r.bound, ('%s: max |b| %g'):format(name, bm))
    end
    -- the draws come from dplhost's seeded generator
    dpl.manual_seed(11)
    local a = nn.Conv1d(2, 3, 3).weight:clone()
    dpl.manual_seed(11)
    assert.is_true(a:equal(nn.Conv1d(2, 3, 3).weight))
    -- float64 and bias=false
    local m = nn.ConvTranspose2d(2, 4, 3, { dtype = 'float64', bias = false })
    assert.are.equal('float64', m.weight.dtype)
    assert.is_nil(m.bias)
    assert.are.same({ 'weight' }, m:state_dict_keys())
  end)

  it('Dropout1d / Dropout2d: whole channels in training, identity in eval, gradients through the mask', function()
    dpl.manual_seed(5)
    for _, case in ipairs({ { nn.Dropout2d(0.25), { 40, 50, 3, 4 } }, { nn.Dropout1d({ p = 0.25 }), { 40, 50, 6 } },
      { nn.Dropout1d(0.25), { 500, 6 } } }) do
      local m, shape = case[1], case[2]
      local x = (dpl.rand(shape) + 1):requires_grad_()
      local y = m(x)
      local r = (y / x):detach() -- 0 or 1/(1-p), constant over each channel
      local per = r:reshape(#shape == 2 and 1 or shape[1], #shape == 2 and shape[1] or shape[2], -1)
      local mn, mx = per:min(3), per:max(3)
      assert((mx - mn):max():item() < 1e-5, 'a channel is dropped whole')
      local vals = flat(mn:totable())
      local zeros = 0
      for _, v in ipairs(vals) do
        assert(v == 0 or math.abs(v - 1 / 0.75) < 1e-6, 'kept channels are scaled by 1/(1-p): ' .. v)
        if v == 0 then zeros = zeros + 1 end
      end
      local frac = zeros / #vals
      assert(frac > 0.18 and frac < 0.32, 'dropped fraction ' .. frac)
      y:sum():backward()
      near(flat(r:totable()), x.grad, 'the gradient is the mask', 1e-6)
      m:eval()
      assert.is_true(m(x):equal(x), 'eval: identity')
      m:train()
    end
    local x = dpl.randn(2, 3, 4, 4)
    assert.is_true(F.dropout2d(x, 0):equal(x))
    assert.is_true(F.dropout2d(x, 1):eq(0):all():item())
    assert.is_true(F.dropout2d(x, 0.5, false):equal(x))
    assert.is_true(F.dropout1d(x:flatten(3), { p = 0.5, training = false }):equal(x:flatten(3)))
    -- in place: the input itself
    local z = dpl.randn(4, 6, 5)
    local zz = z:clone()
    local out = nn.Dropout1d({ p = 0.5, inplace = true })(z)
    assert.is_true(out == z or out:is_set_to(z))
    assert.is_false(z:equal(zz))
    -- a 3-d input to dropout2d is [N, C, L], as in PyTorch 1.13
    local log = require 'dpl.log'
    local warn, said = log.warn, nil
    log.warn = function(fmt_, ...) said = fmt_:format(...) end
    local ok3, y3 = pcall(F.dropout2d, dpl.ones(8, 16, 5), 0.5)
    log.warn = warn
    assert(ok3, tostring(y3))
    if said then assert.truthy(said:find('read as [N, C, L]', 1, true), said) end -- (once per process)
    assert.is_true(y3:min(3):eq(y3:max(3)):all():item())
    assert.are.equal('float32', nn.Dropout2d(0.1)(dpl.randn(2, 3, 4, 4)).dtype)
  end)

  it('ConvTranspose is the adjoint of Conv (<conv(x), y> = <x, convT(y)>) and runs on float32 big shapes', function()
    dpl.manual_seed(9)
    local w = dpl.randn(6, 4, 3, 3, { dtype = 'float64' })
    local opts = { stride = 2, padding = 1, dilation = 1, groups = 2 }
    local x = dpl.randn(2, 8, 9, 9, { dtype = 'float64' })
    local y = F.conv2d(x, w, nil, opts)
    local u = dpl.randn(y:size(), { dtype = 'float64' })
    local xt = F.conv_transpose2d(u, w, nil, opts)
    same_shape(xt, x:size(), 'conv_transpose2d inverts the shape')
    near({ (y * u):sum():item() }, { (x * xt):sum():item() }, 'adjoint', 1e-10)
  end)

  it('unbatched inputs give the batched result without the batch dim (padding modes too)', function()
    dpl.manual_seed(4)
    local x3, x4 = dpl.randn(3, 9), dpl.randn(3, 6, 6)
    for _, m in ipairs({ nn.Conv1d(3, 2, 3, { padding = 1, padding_mode = 'circular' }),
      nn.Conv1d(3, 2, 3, { padding = 'same', padding_mode = 'reflect' }), nn.ConvTranspose1d(3, 2, 3, { stride = 2 }),
      nn.MaxPool1d(2), nn.AvgPool1d(3), nn.AdaptiveMaxPool1d(4), nn.ReplicationPad1d(2) }) do
      near(flat(m(x3:unsqueeze(1)):squeeze(1):totable()), m(x3), tostring(m), 1e-6)
    end
    for _, m in ipairs({ nn.ConvTranspose2d(3, 2, 2), nn.AdaptiveAvgPool2d({ 4, 5 }), nn.ReflectionPad2d(2),
      nn.Unfold(2), nn.Upsample({ scale_factor = 2, mode = 'bilinear' }) }) do
      local ok = pcall(m, x4)
      if m.__name ~= 'Upsample' then
        assert(ok, tostring(m))
        near(flat(m(x4:unsqueeze(1)):squeeze(1):totable()), m(x4), tostring(m), 1e-6)
      end
    end
  end)

  it('F functions check their first argument; modules name themselves in errors', function()
    h.raises(function() F.pad('x', { 1, 1 }) end, 'F.pad: input must be a tensor, got string')
    h.raises(function() F.interpolate(nil, { size = 2 }) end, 'F.interpolate: input must be a tensor, got nil')
    local m = nn.Sequential(nn.Conv1d(3, 4, 3))
    h.raises(function() m(dpl.randn(2, 5, 7)) end,
      "Conv1d '1'(3, 4, kernel_size=3): input has shape [2, 5, 7], expected [N, 3, L] or [3, L] (weight [4, 3, 3])")
  end)
end)

-- every error path: {function, text the message contains[, class]}
local E = {}
local function bad(f, text, cls) E[#E + 1] = { f, text, cls } end
local x3, x4 = dpl.randn(2, 3, 7), dpl.randn(2, 3, 5, 5)
local i3 = dpl.ones({ 2, 3, 7 }, { dtype = 'int64' })
-- constructors
bad(function() nn.Conv1d('a', 4, 3) end, 'Conv1d: in_channels must be an integer >= 1, got a')
bad(function() nn.Conv1d(3, 0, 3) end, 'Conv1d: out_channels must be an integer >= 1, got 0')
bad(function() nn.Conv1d(3, 4, 0) end, 'Conv1d: kernel_size must be an integer >= 1 (or a list of one), got 0')
bad(function() nn.Conv1d(3, 4, { 3, 3 }) end, 'Conv1d: kernel_size must be an integer >= 1 (or a list of one), got')
bad(function() nn.Conv1d(3, 4, 3, { groups = 2 }) end, 'Conv1d: in_channels (3) must be divisible by groups (2)')
bad(function() nn.Conv1d(4, 3, 3, { groups = 2 }) end, 'Conv1d: out_channels (3) must be divisible by groups (2)')
bad(function() nn.Conv1d(4, 4, 3, { groups = 0 }) end, 'Conv1d: groups must be a positive integer, got 0')
bad(function() nn.Conv1d(3, 4, 3, { padding = 'full' }) end, "Conv1d: invalid padding string 'full', should be one of 'valid', 'same'")
bad(function() nn.Conv1d(3, 4, 3, { padding = 'same', stride = 2 }) end, "Conv1d: padding='same' is not supported for strided convolutions")
bad(function() nn.Conv1d(3, 4, 3, { padding = -1 }) end, 'Conv1d: padding must be an integer >= 0 (or a list of one), got -1')
bad(function() nn.Conv1d(3, 4, 3, { padding_mode = 'mirror' }) end, "Conv1d: padding_mode must be one of 'zeros', 'reflect', 'replicate', 'circular', but got mirror")
bad(function() nn.Conv1d(3, 4, 3, { strides = 2 }) end, "Conv1d: unknown option 'strides' (did you mean 'stride'?)")
bad(function() nn.Conv1d(3, 4, 3, { bias = 1 }) end, 'Conv1d: bias must be true or false, got 1')
bad(function() nn.ConvTranspose2d(3, 4, 3, { padding_mode = 'reflect' }) end, "ConvTranspose2d: only 'zeros' padding mode is supported for ConvTranspose2d, got 'reflect'")
bad(function() nn.ConvTranspose2d(3, 4, 3, { stride = 2, output_padding = 2 }) end, 'ConvTranspose2d: output padding must be smaller than either stride or dilation, got output_padding (2, 2), stride (2, 2), dilation (1, 1)')
bad(function() nn.ConvTranspose2d(3, 4, 3, { padding = 'same' }) end, "ConvTranspose2d: padding must be an integer or a list of integers, got 'same'")
bad(function() nn.ConvTranspose2d(3, 4, { 3, 0 }) end, 'ConvTranspose2d: kernel_size must be >= 1, got 0')
bad(function() nn.ConvTranspose1d(3, 4, 2, { dilations = 1 }) end, "ConvTranspose1d: unknown option 'dilations' (did you mean 'dilation'?)")
bad(function() nn.MaxPool1d(0) end, 'MaxPool1d: kernel_size must be an integer >= 1 (or a list of one), got 0')
bad(function() nn.MaxPool1d(3, { padding = 2 }) end, 'MaxPool1d: padding should be at most half of kernel size, but got padding=2 and kernel_size=3')
bad(function() nn.MaxPool1d(3, { ceil_mode = 1 }) end, 'MaxPool1d: ceil_mode must be true or false, got 1')
bad(function() nn.MaxPool1d(3, { stride = 0 }) end, 'MaxPool1d: stride must be an integer >= 1 (or a list of one), got 0')
bad(function() nn.AvgPool1d(2, { padding = 2 }) end, 'AvgPool1d: padding should be at most half of kernel size, but got padding=2 and kernel_size=2')
bad(function() nn.AvgPool1d(2, { count_include_pad = 'no' }) end, 'AvgPool1d: count_include_pad must be true or false, got no')
bad(function() nn.AdaptiveAvgPool2d({ 1, 2, 3 }) end, 'AdaptiveAvgPool2d: output_size must be an integer >= 0 or a list of 2')
bad(function() nn.AdaptiveAvgPool2d(-1) end, 'AdaptiveAvgPool2d: output_size must be an integer >= 0 or a list of 2 (nil or false keeps the input size), got -1')
bad(function() nn.AdaptiveAvgPool1d(2.5) end, 'AdaptiveAvgPool1d: output_size must be an integer >= 0 or a list of 1')
bad(function() nn.AdaptiveAvgPool1d(2, true) end, 'AdaptiveAvgPool1d: takes only output_size, got a second argument (true)')
bad(function() nn.AdaptiveMaxPool2d(2, 'yes') end, 'AdaptiveMaxPool2d: return_indices must be true or false, got yes')
bad(function() nn.AdaptiveMaxPool2d(2, { return_indice = true }) end, "AdaptiveMaxPool2d: unknown option 'return_indice' (did you mean 'return_indices'?)")
bad(function() nn.Dropout2d(1.5) end, 'Dropout2d: dropout probability has to be between 0 and 1, but got 1.5')
bad(function() nn.Dropout1d({ p = 0.2, inplce = true }) end, "Dropout1d: unknown option 'inplce' (did you mean 'inplace'?)")
bad(function() nn.Dropout1d(0.2, 1) end, 'Dropout1d: inplace must be true or false, got 1')
bad(function() nn.ReflectionPad2d({ 1, 2 }) end, 'ReflectionPad2d: padding must be an integer or a list of 4 integers, got a list of 2')
bad(function() nn.ReplicationPad1d(1.5) end, 'ReplicationPad1d: padding must be an integer or a list of 2 integers, got 1.5')
bad(function() nn.ConstantPad1d(1) end, 'ConstantPad1d: value must be a number, got nil')
bad(function() nn.ReflectionPad1d(1, 2) end, 'ReflectionPad1d: takes only padding, got a second argument (2)')
bad(function() nn.Upsample({ scale_factor = 2, mode = 'bicubic' }) end, "Upsample: mode 'bicubic' is not implemented in dplhost", 'NotImplementedError')
bad(function() nn.Upsample({ scale_factor = 2, mode = 'trilinear' }) end, "Upsample: mode 'trilinear' is not implemented", 'NotImplementedError')
bad(function() nn.Upsample({ scale_factor = 2, mode = 'cubic' }) end, "Upsample: mode must be one of 'nearest', 'nearest-exact', 'linear', 'bilinear', 'area', got cubic")
bad(function() nn.Upsample({}) end, 'Upsample: either size or scale_factor should be defined')
bad(function() nn.Upsample({ size = 2, scale_factor = 2 }) end, 'Upsample: only one of size or scale_factor should be defined')
bad(function() nn.Upsample({ scale_factor = 2, align_corners = true }) end, 'Upsample: align_corners option can only be set with the interpolating modes: linear | bilinear')
bad(function() nn.Upsample(2) end, 'Upsample: expected an options table {size=, scale_factor=, mode=, align_corners=}, got 2')
bad(function() nn.Upsample({ scale = 2 }) end, "Upsample: unknown option 'scale'")
bad(function() nn.UpsamplingBilinear2d({ scale_factor = 2, mode = 'nearest' }) end, "UpsamplingBilinear2d: unknown option 'mode'")
bad(function() nn.PixelShuffle(0) end, 'PixelShuffle: upscale_factor must be an integer >= 1, got 0')
bad(function() nn.PixelUnshuffle(1.5) end, 'PixelUnshuffle: downscale_factor must be an integer >= 1, got 1.5')
bad(function() nn.Unfold(0) end, 'Unfold: kernel_size must be >= 1, got 0')
bad(function() nn.Unfold(2, { stride = 0 }) end, 'Unfold: stride must be >= 1, got 0')
bad(function() nn.Unfold(2, { padding = 1.5 }) end, 'Unfold: padding must be an integer or a pair of integers {h, w}, got 1.5')
bad(function() nn.Fold({ 0, 2 }, 2) end, 'Fold: output_size must be >= 1, got 0')
bad(function() nn.Fold(3, 2, { paddings = 1 }) end, "Fold: unknown option 'paddings' (did you mean 'padding'?)")
-- forward: rank, channels, dtype, sizes
bad(function() nn.Conv1d(3, 4, 3)(dpl.randn(2, 5, 7)) end, 'Conv1d(3, 4, kernel_size=3): input has shape [2, 5, 7], expected [N, 3, L] or [3, L] (weight [4, 3, 3])')
bad(function() nn.Conv1d(3, 4, 3)(x4) end, 'Conv1d(3, 4, kernel_size=3): input has shape [2, 3, 5, 5], expected [N, 3, L]')
bad(function() nn.Conv1d(3, 4, 3)(x3:double()) end, "Conv1d: input has dtype float64, expected float32 (the weight's")
bad(function() nn.Conv1d(3, 4, 3)(i3) end, 'Conv1d: expected a floating-point input, got int64 (shape [2, 3, 7])')
bad(function() nn.Conv1d(3, 4, 3)(dpl.randn(2, 3, 2)) end, 'Conv1d: input of shape [2, 3, 2] (padded length 2) is smaller than the kernel (3, dilated 3)')
bad(function() nn.Conv1d(3, 4, 3)('x') end, 'Conv1d: expected a tensor as input, got string')
bad(function() nn.ConvTranspose2d(3, 4, 3)(dpl.randn(2, 4, 5, 5)) end, 'ConvTranspose2d(3, 4, kernel_size=3x3): input has shape [2, 4, 5, 5], expected [N, 3, H, W] or [3, H, W] (weight [3, 4, 3, 3])')
bad(function() nn.ConvTranspose2d(3, 4, 3, { padding = 3 })(dpl.randn(1, 3, 1, 1)) end, 'ConvTranspose2d: input of shape [1, 3, 1, 1] gives an output size of -3 along dim 3 (padding too large)')
bad(function() nn.ConvTranspose2d(2, 3, 3, { stride = 2 })(dpl.randn(1, 2, 4, 4), { 20, 9 }) end, 'ConvTranspose2d: requested an output size of 20 along spatial dim 1, but valid sizes range from 9 to 10 (for an input of 4)')
bad(function() nn.ConvTranspose2d(2, 3, 3)(dpl.randn(1, 2, 4, 4), { 9 }) end, 'ConvTranspose2d: output_size must have 2 or 4 elements, got 1')
bad(function() nn.ConvTranspose1d(2, 3, 3)(dpl.randn(1, 2, 4):double()) end, 'ConvTranspose1d: input has dtype float64, expected float32')
bad(function() nn.MaxPool1d(3)(x4) end, 'MaxPool1d: input has shape [2, 3, 5, 5], expected [N, C, L] or [C, L]')
bad(function() nn.MaxPool1d(5)(dpl.randn(1, 1, 3)) end, 'MaxPool1d: input of length 3 is too small for kernel_size 5 (dilation 1, padding 0): the output length would be 0')
bad(function() nn.MaxPool1d(2)(i3) end, 'MaxPool1d: expected a floating-point input, got int64')
bad(function() nn.AvgPool1d(5)(dpl.randn(1, 1, 3)) end, 'AvgPool1d: input of shape [1, 1, 3] is too small for kernel_size 5 (padding 0)')
bad(function() nn.AdaptiveAvgPool2d(2)(dpl.randn(1, 2, 0, 3)) end, 'AdaptiveAvgPool2d: expected an input of non-zero size in its pooled dims, got shape [1, 2, 0, 3]')
bad(function() nn.AdaptiveAvgPool2d(2)(dpl.randn(4, 4)) end, 'AdaptiveAvgPool2d: input has shape [4, 4], expected [N, C, H, W] or [C, H, W]')
bad(function() nn.AdaptiveMaxPool1d(2)(i3) end, 'AdaptiveMaxPool1d: expected a floating-point input, got int64')
bad(function() nn.Dropout2d(0.5)(dpl.randn(2, 3)) end, 'Dropout2d: input has shape [2, 3], expected [N, C, H, W]')
bad(function() nn.Dropout1d(0.5)(x4) end, 'Dropout1d: input has shape [2, 3, 5, 5], expected [N, C, L] or [C, L]')
bad(function() nn.ReflectionPad1d(5)(dpl.randn(1, 2, 4)) end, 'ReflectionPad1d: reflect padding must be less than the input size, but got padding (5, 5) along dim 3 of input [1, 2, 4]')
bad(function() nn.ReflectionPad2d(1)(dpl.randn(4, 4)) end, 'ReflectionPad2d: input has shape [4, 4], expected 3 to 4 dims')
bad(function() nn.ReplicationPad1d(1)(dpl.randn(1, 2, 0)) end, 'ReplicationPad1d: replicate padding needs a non-empty dim 3, input [1, 2, 0]')
bad(function() nn.ConstantPad1d({ -3, -3 }, 0)(dpl.randn(2, 4)) end, 'ConstantPad1d: the input size 4, plus negative padding -3 and -3, gives a negative output size along dim 2')
bad(function() nn.ZeroPad2d(1)(dpl.randn(3)) end, 'ZeroPad2d: input has shape [3], expected 2 to 4 dims')
bad(function() nn.Upsample({ scale_factor = 2, mode = 'bilinear' })(x3) end, "Upsample: mode 'bilinear' needs a 4-d input [N, C, H, W], got shape [2, 3, 7]")
bad(function() nn.PixelShuffle(2)(dpl.randn(1, 7, 2, 2)) end, "PixelShuffle: expects its input's channel dim to be divisible by the square of upscale_factor, but input of shape [1, 7, 2, 2] has 7 channels, not divisible by 4")
bad(function() nn.Unfold(4)(dpl.randn(1, 2, 3, 3)) end, 'Unfold: given input with spatial size (3, 3), kernel_size (4, 4), dilation (1, 1), padding (0, 0), the array of sliding blocks has shape (0, 0), but its sizes must be at least 1')
bad(function() nn.Fold({ 3, 3 }, 2)(dpl.randn(1, 5, 4)) end, "Fold: expected size of input's dimension 2 to be divisible by the product of kernel_size (4), but got input.size(2)=5")
bad(function() nn.Fold({ 3, 3 }, 2)(dpl.randn(1, 8, 5)) end, "Fold: given output_size (3, 3), kernel_size (2, 2), dilation (1, 1), padding (0, 0), stride (1, 1), expected size of input's dimension 3 to match the number of sliding blocks 2 * 2 = 4, but got input.size(3)=5")
-- functional
bad(function() F.pad(x3, { 1 }) end, 'pad: padding length must be divisible by 2, got 1')
bad(function() F.pad(dpl.randn(3, 4), { 1, 1, 1, 1 }, 'reflect') end, 'pad: reflect padding of 2 dims expects a 3-d or 4-d input, got shape [3, 4]')
bad(function() F.pad(dpl.randn(3, 4), { 1, 2 }, 'circular') end, 'pad: circular padding of 1 dim expects a 3-d input, got shape [3, 4]')
bad(function() F.pad(x3, { 1, 1 }, 'reflect', 2) end, "pad: padding mode 'reflect' doesn't take in value argument")
bad(function() F.pad(x3, { 1, 1 }, 'mirror') end, "pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got mirror")
bad(function() F.pad(x3, { 1, 1 }, { mode = 'reflect', val = 1 }) end, "pad: unknown option 'val'")
bad(function() F.pad(dpl.randn(1, 1, 2, 2, 2, 2), { 1, 1, 1, 1, 1, 1, 1, 1 }, 'reflect') end, 'pad: reflect padding of 4 dims is not supported (1 to 3 dims)', 'NotImplementedError')
bad(function() F.pad(x3, { 1.5, 1 }) end, 'pad: pad[1] must be an integer, got 1.5')
bad(function() F.pad(dpl.randn(3, 4), { 1, 1, 1, 1, 1, 1 }) end, 'pad: padding length too large: 6 entries for an input of 2 dims [3, 4]')
bad(function() F.pad(x3, 3) end, 'pad: pad must be a list of integers {left, right, ...}, got 3')
bad(function() F.pad(dpl.randn(1, 1, 4), { 5, 1 }, 'circular') end, 'pad: circular padding (5, 1) along dim 3 of size 4 wraps around more than once')
bad(function() F.pad(dpl.randn(1, 1, 4), { 1, 1 }, 'constant', 'x') end, 'pad: value must be a number, got x')
bad(function() F.interpolate(x4, { size = 4, mode = 'linear' }) end, "interpolate: mode 'linear' needs a 3-d input [N, C, L], got shape [2, 3, 5, 5]")
bad(function() F.interpolate(dpl.randn(1, 1, 2, 2, 2), { size = 4 }) end, 'interpolate: 5-d inputs (3 spatial dims) are not implemented in dplhost', 'NotImplementedError')
bad(function() F.interpolate(dpl.randn(2, 2), { size = 4 }) end, 'interpolate: expected a 3-d [N, C, L] or 4-d [N, C, H, W] input, got shape [2, 2]')
bad(function() F.interpolate(x4, { size = { 2, 3, 4 } }) end, 'interpolate: input and output must have the same number of spatial dimensions, but got input of shape [2, 3, 5, 5] and output size {2, 3, 4}')
bad(function() F.interpolate(x4, { scale_factor = { 2, 3, 4 } }) end, 'interpolate: input and scale_factor must have the same number of spatial dimensions')
bad(function() F.interpolate(x4, { size = 0 }) end, 'interpolate: size must hold integers >= 1, got 0')
bad(function() F.interpolate(x4, { scale_factor = 0.1 }) end, 'interpolate: scale_factor 0.1 of an input of size 5 along spatial dim 1 gives an output size of 0; it must be at least 1')
bad(function() F.interpolate(x4, { scale_factor = -1 }) end, 'interpolate: scale_factor must hold positive numbers, got -1')
bad(function() F.interpolate(x4, { size = 4, recompute_scale_factor = true }) end, 'interpolate: recompute_scale_factor is not meaningful with an explicit size')
bad(function() F.interpolate(x4, { scale_factor = 2, mode = 'bilinear', antialias = true }) end, 'interpolate: antialias=true is not implemented in dplhost', 'NotImplementedError')
bad(function() F.interpolate(dpl.ones({ 1, 1, 2, 2 }, { dtype = 'int64' }), { scale_factor = 2, mode = 'bilinear' }) end, 'interpolate: expected a floating-point input, got int64')
bad(function() F.interpolate(x4, {}) end, 'interpolate: either size or scale_factor should be defined')
bad(function() F.interpolate(x4, { size = 2, scale_factor = 2 }) end, 'interpolate: only one of size or scale_factor should be defined')
bad(function() F.interpolate(x4, { size = 2, mode = 'bicubic' }) end, "interpolate: mode 'bicubic' is not implemented in dplhost", 'NotImplementedError')
bad(function() F.interpolate(x4, { size = 2, align_corners = false }) end, 'interpolate: align_corners option can only be set with the interpolating modes')
bad(function() F.pixel_shuffle(dpl.randn(4, 4), 2) end, 'pixel_shuffle: expected an input of at least 3 dims [*, C, H, W], got shape [4, 4]')
bad(function() F.pixel_unshuffle(dpl.randn(1, 1, 3, 4), 2) end, 'pixel_unshuffle: expects height and width to be divisible by downscale_factor 2, got input of shape [1, 1, 3, 4]')
bad(function() F.unfold(dpl.randn(2, 3), 2) end, 'unfold: expected a 3-d [C, H, W] or 4-d [N, C, H, W] input, got shape [2, 3]')
bad(function() F.fold(dpl.randn(2, 3, 4, 5), 3, 2) end, 'fold: expected a 2-d [C*kh*kw, L] or 3-d [N, C*kh*kw, L] input, got shape [2, 3, 4, 5]')
bad(function() F.conv_transpose2d(dpl.randn(1, 2, 1, 3, 3), dpl.randn(2, 2, 3, 3)) end, 'conv_transpose2d: expected a 3-d [C, H, W] or 4-d [N, C, H, W] input, got shape [1, 2, 1, 3, 3]')
bad(function() F.conv_transpose2d(x4, dpl.randn(3, 2, 3)) end, 'conv_transpose2d: weight must be 4-d [in_channels, out_channels/groups, kh, kw], got [3, 2, 3]')
bad(function() F.conv_transpose2d(x4, dpl.randn(3, 2, 3, 3), dpl.randn(3)) end, 'conv_transpose2d: bias must have shape [2], got [3]')
bad(function() F.conv_transpose2d(x4, dpl.randn(3, 2, 3, 3):double()) end, 'conv_transpose2d: input, weight and bias must have one dtype, got float32, float64')
bad(function() F.conv_transpose2d(x4, dpl.randn(3, 2, 3, 3), nil, { groups = 2 }) end, 'conv_transpose2d: in_channels (3) must be divisible by groups (2)')
bad(function() F.conv_transpose1d(x3, dpl.randn(3, 2, 3), nil, { output_padding = 1 }) end, 'conv_transpose1d: output padding must be smaller than either stride or dilation, but got output_padding 1, stride 1, dilation 1')
bad(function() F.conv1d(x3, dpl.randn(4, 3, 3), nil, { padding = 'same', stride = 2 }) end, "conv1d: padding='same' is not supported for strided convolutions")
bad(function() F.conv1d(x3, dpl.randn(4, 3, 3), dpl.randn(3)) end, 'conv1d: bias must have shape [4], got [3]')
bad(function() F.conv1d(x3, dpl.randn(4, 3, 3, 1)) end, 'conv1d: weight must be 3-d [out_channels, in_channels/groups, kernel_size], got [4, 3, 3, 1]')
bad(function() F.max_pool1d(x3, 3, { padding = 2 }) end, 'max_pool1d: padding should be at most half of kernel size, but got padding=2 and kernel_size=3')
bad(function() F.max_pool1d(x3, 3, { return_indice = true }) end, "max_pool1d: unknown option 'return_indice'")
bad(function() F.avg_pool1d(x3, 3, { padding = 2 }) end, 'avg_pool1d: padding should be at most half of kernel size, but got padding=2 and kernel_size=3')
bad(function() F.adaptive_max_pool2d(x4, 2, { return_indice = true }) end, "adaptive_max_pool2d: unknown option 'return_indice'")
bad(function() F.adaptive_avg_pool2d(x4, { 2, 'a' }) end, 'adaptive_avg_pool2d: output_size must hold integers >= 0 (or nil), got a')
bad(function() F.dropout2d(x4, 2) end, 'dropout2d: dropout probability has to be between 0 and 1, but got 2')
bad(function() F.dropout1d(x4) end, 'dropout1d: expected a 2-d [C, L] or 3-d [N, C, L] input, got shape [2, 3, 5, 5]')
bad(function() F.dropout2d(x4, { p = 0.5, trainng = false }) end, "dropout2d: unknown option 'trainng' (did you mean 'training'?)")

describe('error paths', function()
  it('each bad argument or input raises a clear error (' .. #E .. ' cases)', function()
    for _, e in ipairs(E) do
      local msg = err_of(e[1])
      assert(msg:find(e[2], 1, true), ('expected an error containing %q, got %q'):format(e[2], msg))
      local cls = e[3] or (msg:match('^RuntimeError') and 'RuntimeError' or 'ValueError')
      assert(msg:find('^' .. cls .. ': '), ('expected a %s, got %q'):format(cls, msg))
    end
  end)

  it('the C kernels refuse tensors in GPU memory: "<op>: not implemented on cuda"', function()
    local bit = require 'bit'
    local marked = {}
    local function devmem(t)
      local v = t:view(t:size())
      v._flags = bit.bor(v._flags, 2)
      marked[#marked + 1] = v
      return v
    end
    local ok, err = pcall(function()
      local cases = {
        { function() return F.pad(devmem(dpl.randn(1, 2, 5)), { 1, 1 }, 'reflect') end, 'pad: not implemented on cuda' },
        { function() return F.interpolate(devmem(dpl.randn(1, 2, 3, 3)), { scale_factor = 2 }) end,
          'interpolate: not implemented on cuda' },
        { function() return F.unfold(devmem(dpl.randn(1, 2, 3, 3)), 2) end, 'unfold: not implemented on cuda' },
        { function() return F.fold(devmem(dpl.randn(1, 8, 4)), 3, 2) end, 'fold: not implemented on cuda' },
        { function() return F.adaptive_max_pool2d(devmem(dpl.randn(1, 2, 4, 4)), 2) end,
          'adaptive_max_pool2d: not implemented on cuda' },
        { function() return F.adaptive_avg_pool2d(devmem(dpl.randn(1, 2, 4, 4)), 3) end,
          'adaptive_avg_pool2d: not implemented on cuda' },
        { function() return F.max_pool1d(devmem(dpl.randn(1, 2, 6)), 2) end, 'max_pool1d: not implemented on cuda' },
      }
      for _, c in ipairs(cases) do
        local msg = err_of(c[1])
        assert(msg:find('^NotImplementedError: ' .. c[2]:gsub('%p', '%%%0')), msg)
      end
    end)
    for _, v in ipairs(marked) do v._flags = bit.band(v._flags, bit.bnot(2)) end
    assert(ok, tostring(err))
  end)
end)

describe('memory', function()
  local function use_all()
    for _ = 1, 3 do
      local x4 = dpl.randn(2, 4, 6, 6):requires_grad_()
      local x3 = dpl.randn(2, 4, 9):requires_grad_()
      local mods4 = { nn.ConvTranspose2d(4, 2, 3, { stride = 2 }), nn.AdaptiveAvgPool2d({ 3, 2 }), nn.AdaptiveMaxPool2d(2),
        nn.ReflectionPad2d(2), nn.ReplicationPad2d(1), nn.ZeroPad2d(1), nn.Upsample({ scale_factor = 2, mode = 'bilinear' }),
        nn.Upsample({ size = { 3, 4 } }), nn.PixelShuffle(2), nn.PixelUnshuffle(2), nn.Dropout2d(0.3), nn.Unfold(2) }
      local mods3 = { nn.Conv1d(4, 3, 3, { padding_mode = 'circular', padding = 1 }), nn.ConvTranspose1d(4, 2, 2),
        nn.MaxPool1d(3, { return_indices = true }), nn.AvgPool1d(2), nn.AdaptiveAvgPool1d(4), nn.AdaptiveMaxPool1d(2),
        nn.Dropout1d(0.4), nn.ReflectionPad1d(2) }
      local loss
      for _, m in ipairs(mods4) do local y = m(x4) loss = loss and loss + y:sum() or y:sum() end
      for _, m in ipairs(mods3) do local y = m(x3) loss = loss + y:sum() end
      loss = loss + nn.Fold({ 6, 6 }, 2)(F.unfold(x4, 2)):sum() + F.interpolate(x3, { size = 5, mode = 'linear' }):sum()
      loss:backward()
      pcall(function() return F.pad(x3, { 20, 20 }, 'reflect') end) -- errors leave nothing behind either
      pcall(function() return F.fold(x3, 2, 2) end)
    end
  end
  it('returns every byte after collectgarbage()', function()
    use_all() -- (first use loads what stays: modules, caches)
    local before = h.settle_memory()
    use_all()
    local after = h.settle_memory()
    assert(after.current_bytes <= before.current_bytes, ('%d bytes leaked'):format(after.current_bytes - before.current_bytes))
    assert(after.live_storages <= before.live_storages, ('%d storages leaked'):format(after.live_storages - before.live_storages))
  end)
end)

describe('training', function()
  it('a CNN with Conv2d + AdaptiveAvgPool2d learns a slice of Fashion-MNIST; a ConvTranspose2d / Upsample '
    .. 'autoencoder reconstructs it', function()
    local ok, train = pcall(dpl.datasets.FashionMNIST, { train = true })
    if not ok then pending('Fashion-MNIST not installed: ' .. tostring(train)) return end
    local test = dpl.datasets.FashionMNIST { train = false }
    dpl.manual_seed(0)
    local N, NT, B = 5000, 1000, 100
    local tr = train:get_batch(dpl.data.range(1, N))
    local te = test:get_batch(dpl.data.range(1, NT))
    local model = nn.Sequential(
      nn.Conv2d(1, 8, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),
      nn.Conv2d(8, 16, 3, { padding = 1 }), nn.ReLU(),
      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
    local opt = dpl.optim.Adam(model:parameters(), { lr = 0.01 })
    for _ = 1, 4 do
      for s = 1, N, B do
        local loss = F.cross_entropy(model(tr[1]:narrow(1, s, B)), tr[2]:narrow(1, s, B))
        opt:zero_grad()
        loss:backward()
        opt:step()
      end
    end
    model:eval()
    local acc = dpl.no_grad(function() return model(te[1]) end):argmax(2):eq(te[2]):double():mean():item()
    assert(acc > 0.5, ('test accuracy %.3f (chance: 0.1)'):format(acc))

    local ae = nn.Sequential(
      nn.Conv2d(1, 8, 3, { stride = 2, padding = 1 }), nn.ReLU(),
      nn.Conv2d(8, 16, 3, { stride = 2, padding = 1 }), nn.ReLU(),
      nn.ConvTranspose2d(16, 8, 3, { stride = 2, padding = 1, output_padding = 1 }), nn.ReLU(),
      nn.Upsample({ scale_factor = 2, mode = 'bilinear' }), nn.ReflectionPad2d(1), nn.Conv2d(8, 1, 3), nn.Sigmoid())
    local opt2 = dpl.optim.Adam(ae:parameters(), { lr = 0.01 })
    for _ = 1, 2 do
      for s = 1, 2000, B do
        local x = tr[1]:narrow(1, s, B)
        local loss = F.mse_loss(ae(x), x)
        opt2:zero_grad()
        loss:backward()
        opt2:step()
      end
    end
    local base = F.mse_loss(te[1], te[1]:mean():expand(te[1]:size())):item() -- predicting the mean pixel
    local got = dpl.no_grad(function() return F.mse_loss(ae(te[1]), te[1]):item() end)
    assert(got < 0.4 * base, ('reconstruction error %.4f, the mean pixel gives %.4f'):format(got, base))
  end)
end)
