-- nn_extra_spec.lua: the nn pieces of dpl.nn.extra / functional_extra / functional_conv3d
-- (Bilinear, RReLU, Hardshrink, Softshrink, EmbeddingBag, AlphaDropout, FeatureAlphaDropout,
-- Dropout3d, LazyLinear, ChannelShuffle, Conv3d, ConvTranspose3d, the 3-d pools, MaxUnpool,
-- LPPool, FractionalMaxPool2d, TripletMarginWithDistanceLoss) against PyTorch 1.13
-- (spec/fixtures/nn_extra_ref.lua from gen_nn_extra_ref.py): values, float64 gradients of
-- inputs and parameters, state dict keys, train/eval, errors.
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/nn_extra_ref.lua')

local function d(t) return dpl.tensor(t, { dtype = 'float64' }) end
local function i64(t) return dpl.tensor(t, { dtype = 'int64' }) end
local function flat(v, out)
  out = out or {}
  if type(v) == 'table' then for _, x in ipairs(v) do flat(x, out) end else out[#out + 1] = v end
  return out
end
local function near(expected, got, what, tol)
  if type(got) == 'cdata' then got = got:totable() end
  if type(expected) == 'cdata' then expected = expected:totable() end
  local e, g = flat(expected), flat(got)
  assert.are.equal(#e, #g, what .. ': element count')
  for i = 1, #e do
    if math.abs(e[i] - g[i]) > (tol or 1e-10) * (1 + math.abs(e[i])) then
      error(('%s: element %d: expected %.12g, got %.12g'):format(what, i, e[i], g[i]), 2)
    end
  end
end
local function err_of(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, 'expected an error')
  return tostring(e)
end
local function keys_of(m) return m:state_dict_keys() end

-- runs fn on the case's inputs (float64 leaves), backward with its upstream gradient, and
-- compares output, input gradients and the given parameters' gradients
local function check(name, fn, params, tol)
  local r = ref[name]
  for _, p in ipairs(params or {}) do p.grad = nil end
  local xs = {}
  for i, x in ipairs(r.x) do xs[i] = d(x):requires_grad_() end
  local y, extra = fn(unpack(xs))
  near(r.out, y, name .. ' output', tol)
  y:backward(d(r.g))
  for i, gx in ipairs(r.gx or {}) do near(gx, xs[i].grad, name .. ' grad of input ' .. i, tol) end
  for i, p in ipairs(params or {}) do near(r.gp[i], p.grad, name .. ' grad of parameter ' .. i, tol) end
  if r.extra then near(r.extra[1], extra, name .. ' indices') end
  return xs, y
end

describe('activations', function()
  it('Hardshrink, Softshrink, RReLU (eval) match PyTorch with gradients', function()
    check('hardshrink', function(x) return nn.Hardshrink(0.6)(x) end)
    check('hardshrink', function(x) return F.hardshrink(x, { lambd = 0.6 }) end)
    check('softshrink', function(x) return nn.Softshrink(0.6)(x) end)
    check('rrelu_eval', function(x) return nn.RReLU(0.1, 0.3):eval()(x) end)
    check('rrelu_eval', function(x) return F.rrelu(x, 0.1, 0.3) end) -- training=false by default
    assert.matches('lambda must be greater or equal to 0', err_of(nn.Softshrink, -1))
    assert.matches('Lower bound should be less than or equal', err_of(nn.RReLU, 0.5, 0.1))
    assert.matches("Hardshrink: expected a tensor", err_of(function() nn.Hardshrink()(3) end))
  end)
  it('RReLU in training draws one slope per non-positive element in [lower, upper], the gradient is it', function()
    dpl.manual_seed(1)
    local m = nn.RReLU(0.1, 0.3)
    local x = dpl.randn(200, { dtype = 'float64' }):requires_grad_()
    local y = m(x)
    y:sum():backward()
    local xs, ys, gs = x:totable(), y:totable(), x.grad:totable()
    local slopes = {}
    for i = 1, 200 do
      if xs[i] > 0 then
        assert.are.equal(xs[i], ys[i]); assert.are.equal(1, gs[i])
      else
        local a = ys[i] / xs[i]
        assert.is_true(a >= 0.1 and a <= 0.3)
        assert.is_true(math.abs(gs[i] - a) < 1e-12)
        slopes[#slopes + 1] = a
      end
    end
    assert.is_true(#slopes > 50 and slopes[1] ~= slopes[2])
    -- inplace
    local z = dpl.tensor({ -1, 2 }, { dtype = 'float64' })
    assert.are.equal(z, F.rrelu_(z, 0.2, 0.2, true))
    near({ -0.2, 2 }, z, 'rrelu_')
  end)
  it('ChannelShuffle', function()
    local r = ref.channel_shuffle
    near(r.out, nn.ChannelShuffle(3)(d(r.x[1])), 'channel_shuffle')
    local x = d(r.x[1]):requires_grad_()
    F.channel_shuffle(x, 3):mul(d(r.out)):sum():backward()
    near(r.out, x.grad:view(2, 6, 2, 2):totable() and F.channel_shuffle(x.grad, 3), 'shuffled grad')
    assert.matches('Number of channels must be divisible by groups. Got 6 channels and 4 groups',
      err_of(F.channel_shuffle, d(r.x[1]), 4))
  end)
end)

describe('dropout variants', function()
  it('AlphaDropout keeps mean and variance, is the identity in eval; p = 1 gives zeros', function()
    dpl.manual_seed(3)
    local x = dpl.randn(200000, { dtype = 'float64' })
    local m = nn.AlphaDropout(0.3)
    local y = m(x)
    assert.is_true(math.abs(y:mean():item()) < 0.01)
    assert.is_true(math.abs(y:std():item() - 1) < 0.01)
    -- two values for the dropped: the same constant
    local a = 1 / math.sqrt((1.7580993408473766 ^ 2 * 0.3 + 1) * 0.7)
    local dropped = -1.7580993408473766 * a + 1.7580993408473766 * a * 0.3
    local yt, xt = y:narrow(1, 1, 1000):totable(), x:narrow(1, 1, 1000):totable()
    local nd = 0
    for i = 1, 1000 do
      if math.abs(yt[i] - dropped) < 1e-12 then nd = nd + 1
      else assert.is_true(math.abs(yt[i] - (a * xt[i] + 1.7580993408473766 * a * 0.3)) < 1e-12) end
    end
    assert.is_true(nd > 230 and nd < 370)
    m:eval()
    assert.are.equal(x, m(x))
    assert.are.equal(x, F.alpha_dropout(x, 0.5)) -- training=false by default, as PyTorch
    near({ 0, 0 }, F.alpha_dropout(d({ 1, 2 }), 1, true), 'p=1')
  end)
  it('FeatureAlphaDropout and Dropout3d drop whole channels', function()
    dpl.manual_seed(4)
    local x = dpl.ones(8, 16, 2, 3, 2, { dtype = 'float64' })
    for _, m in ipairs({ nn.FeatureAlphaDropout(0.5), nn.Dropout3d(0.5) }) do
      local y = m(x):view(8 * 16, 12)
      local mn, mx = y:min(2), y:max(2)
      near(mn, mx, tostring(m) .. ' constant per channel')
      m:eval()
      assert.are.equal(x, m(x))
    end
    local y = nn.Dropout3d(0.5)(x):view(8 * 16, 12):select(2, 1):totable()
    for _, v in ipairs(y) do assert.is_true(v == 0 or v == 2) end
    local u = nn.Dropout3d(0.5)(dpl.ones(4, 2, 2, 2)) -- unbatched [C, D, H, W]
    assert.are.same({ 4, 2, 2, 2 }, u:size())
    assert.matches('Dropout3d.*expected a 5%-d', err_of(function() nn.Dropout3d()(dpl.ones(2, 3)) end))
    assert.matches('dropout probability has to be between 0 and 1', err_of(nn.AlphaDropout, 2))
  end)
end)

describe('Bilinear and LazyLinear', function()
  it('Bilinear: values, gradients, keys, init bounds', function()
    local m = nn.Bilinear(3, 4, 2):to('float64')
    assert.are.same(ref.bilinear_keys, keys_of(m))
    for _, p in ipairs(m:parameters()) do assert.is_true(p:abs():max():item() <= 1 / math.sqrt(3)) end
    m.weight = nn.Parameter(d(ref.bilinear_params.w))
    m.bias = nn.Parameter(d(ref.bilinear_params.b))
    check('bilinear', function(a, b) return m(a, b) end, { m.weight, m.bias })
    assert.matches("Bilinear: input1 has shape %[2, 5%], expected the last dim to be 3",
      err_of(function() m(d({ { 1, 2, 3, 4, 5 }, { 1, 2, 3, 4, 5 } }), d({ { 1, 2, 3, 4 } })) end))
  end)
  it('LazyLinear infers in_features at the first call and becomes a Linear', function()
    local m = nn.LazyLinear(3)
    assert.are.equal(0, m.in_features)
    assert.are.equal(0, #m:parameters())
    local y = m(dpl.randn(2, 5))
    assert.are.same({ 2, 3 }, y:size())
    assert.are.equal(5, m.in_features)
    assert.are.same({ 3, 5 }, m.weight:size())
    assert.are.same({ 'weight', 'bias' }, keys_of(m))
    assert.are.equal('Linear', m.__name)
    assert.is_true(m.weight:abs():max():item() <= 1 / math.sqrt(5))
    local m2 = nn.LazyLinear(3, { bias = false })
    m2:load_state_dict({ weight = dpl.ones(3, 4) })
    assert.are.same({ 3, 4 }, m2.weight:size())
    assert.matches('out_features must be an integer', err_of(nn.LazyLinear, 'x'))
  end)
end)

describe('EmbeddingBag', function()
  local W, ids, offs = ref.eb_W, ref.eb_ids, ref.eb_offs
  for _, mode in ipairs({ 'sum', 'mean', 'max' }) do
    it(mode .. ': offsets, padding_idx, include_last_offset, 2-d input; weight gradients', function()
      local function mk(o)
        o.mode = mode
        return nn.EmbeddingBag.from_pretrained(d(W), false, o)
      end
      local e = mk({})
      check('eb_' .. mode, function() return e(i64(ids), i64(offs)) end, { e.weight })
      e = mk({ padding_idx = 5 })
      check('eb_pad_' .. mode, function() return e(i64(ids), i64(offs)) end, { e.weight })
      e = mk({ include_last_offset = true })
      local ol = flat(offs)
      ol[#ol + 1] = 11
      check('eb_last_' .. mode, function() return e(i64(ids), i64(ol)) end, { e.weight })
      e = mk({})
      check('eb_2d_' .. mode, function() return e(i64(ids):view(2, 5)) end, { e.weight })
    end)
  end
  it('per_sample_weights, keys, init, errors', function()
    local e = nn.EmbeddingBag.from_pretrained(d(W), { freeze = false, mode = 'sum' })
    check('eb_psw', function(p) return e(i64(ids), i64(offs), p) end, { e.weight })
    local m = nn.EmbeddingBag(4, 2, { padding_idx = 2 })
    assert.are.same(ref.eb_keys, keys_of(m))
    near({ 0, 0 }, m.weight[2], 'padding row zero')
    assert.matches("per_sample_weights is only supported for mode='sum'",
      err_of(function() nn.EmbeddingBag(4, 2)(i64({ 1, 2 }), i64({ 1 }), d({ 1, 1 })) end))
    assert.matches('offsets has to be None', err_of(function() m(i64({ { 1, 2 } }), i64({ 1 })) end))
    assert.matches('EmbeddingBag.*offsets%[1%] has to be 1', err_of(function() m(i64({ 1, 2 }), i64({ 0 })) end))
    assert.matches('index 5 is out of range', err_of(function() m(i64({ 1, 5 }), i64({ 1 })) end))
    assert.matches('max_norm is not implemented', err_of(nn.EmbeddingBag, 4, 2, { max_norm = 1 }))
  end)
end)

describe('Conv3d and ConvTranspose3d', function()
  it('Conv3d: stride, padding, dilation, groups; values and gradients; keys; init', function()
    local c = nn.Conv3d(4, 6, { 2, 3, 2 }, { stride = { 2, 1, 2 }, padding = { 1, 0, 1 }, dilation = { 1, 2, 1 },
      groups = 2 }):to('float64')
    assert.are.same(ref.conv3d_keys, keys_of(c))
    assert.is_true(c.weight:abs():max():item() <= 1 / math.sqrt(2 * 12) + 1e-12)
    c.weight = nn.Parameter(d(ref.conv3d_params.w))
    c.bias = nn.Parameter(d(ref.conv3d_params.b))
    check('conv3d', function(x) return c(x) end, { c.weight, c.bias })
    check('conv3d', function(x) return F.conv3d(x, c.weight, c.bias, { stride = { 2, 1, 2 }, padding = { 1, 0, 1 },
      dilation = { 1, 2, 1 }, groups = 2 }) end, { c.weight, c.bias })
    local c2 = nn.Conv3d(2, 3, 3, { padding = 'same', padding_mode = 'circular', bias = false }):to('float64')
    c2.weight = nn.Parameter(d(ref.conv3d_same_params.w))
    check('conv3d_same', function(x) return c2(x) end, { c2.weight })
    local u = c(d(ref.conv3d.x[1])[1])
    near(ref.conv3d.out[1], u, 'unbatched')
    assert.matches("Conv3d%(4, 6, kernel_size=%(2, 3, 2%)%): input has shape %[2, 3, 5, 6, 5%]",
      err_of(function() c(dpl.zeros(2, 3, 5, 6, 5, { dtype = 'float64' })) end))
  end)
  it('ConvTranspose3d: values and gradients, output_size', function()
    local ct = nn.ConvTranspose3d(4, 6, { 3, 2, 3 }, { stride = { 2, 1, 2 }, padding = { 1, 0, 1 },
      output_padding = { 1, 0, 0 }, dilation = { 1, 2, 1 }, groups = 2 }):to('float64')
    assert.are.same({ 4, 3, 3, 2, 3 }, ct.weight:size())
    ct.weight = nn.Parameter(d(ref.convt3d_params.w))
    ct.bias = nn.Parameter(d(ref.convt3d_params.b))
    check('convt3d', function(x) return ct(x) end, { ct.weight, ct.bias })
    ct.output_padding = { 0, 0, 0 }
    local sz = ref.convt3d.out
    check('convt3d', function(x) return ct(x, { #sz[1][1], #sz[1][1][1], #sz[1][1][1][1] }) end)
    assert.matches('ConvTranspose3d.*valid sizes range', err_of(function() ct(d(ref.convt3d.x[1]), { 1, 1, 1 }) end))
    assert.matches('output padding must be smaller than either stride or dilation',
      err_of(F.conv_transpose3d, dpl.zeros(1, 4, 2, 2, 2), dpl.zeros(4, 1, 2, 2, 2), nil, { output_padding = 1 }))
  end)
end)

describe('3-d pools, unpooling, LP and fractional pools', function()
  it('MaxPool3d / AvgPool3d / adaptive 3-d pools match PyTorch (values, indices, gradients)', function()
    check('max_pool3d', function(x) return nn.MaxPool3d({ 2, 3, 2 }, { stride = { 2, 2, 1 }, padding = { 1, 1, 0 },
      return_indices = true })(x) end)
    check('max_pool3d_dil_ceil', function(x) return F.max_pool3d(x, 2, { stride = 2, dilation = { 1, 2, 1 },
      ceil_mode = true, return_indices = true }) end)
    check('avg_pool3d', function(x) return nn.AvgPool3d({ 2, 3, 2 }, { stride = { 2, 2, 1 }, padding = { 1, 1, 0 } })(x) end)
    check('avg_pool3d_nopad_ceil', function(x) return F.avg_pool3d(x, 3, { stride = 2, padding = 1, ceil_mode = true,
      count_include_pad = false }) end)
    check('avg_pool3d_ceil', function(x) return F.avg_pool3d(x, 3, { stride = 2, padding = 1, ceil_mode = true }) end)
    check('avg_pool3d_div', function(x) return F.avg_pool3d(x, 2, { divisor_override = 3 }) end)
    check('adaptive_avg_pool3d', function(x) return nn.AdaptiveAvgPool3d({ 2, 4, 3 })(x) end)
    check('adaptive_max_pool3d', function(x) return nn.AdaptiveMaxPool3d({ 2, 4, 3 }, true)(x) end)
    check('adaptive_max_pool3d_unb', function(x) return F.adaptive_max_pool3d(x, { 3, 1, 5 }, true) end)
    assert.matches('MaxPool3d: pad should be smaller than or equal to half',
      err_of(function() nn.MaxPool3d(2, { padding = 2 })(dpl.zeros(1, 1, 4, 4, 4)) end))
    assert.matches('Output size is too small', err_of(F.max_pool3d, dpl.zeros(1, 1, 1, 4, 4), 2))
  end)
  it('MaxUnpool1d/2d/3d put the values back at the (1-based) indices; gradients', function()
    check('unpool2d', function(x) return nn.MaxUnpool2d(2)(x, i64(ref.unpool2d_idx), { 6, 7 }) end)
    check('unpool1d', function(x) return nn.MaxUnpool1d(3, { stride = 2 })(x, i64(ref.unpool1d_idx)) end)
    check('unpool3d', function(x) return F.max_unpool3d(x, i64(ref.unpool3d_idx), 2, { output_size = { 5, 6, 7 } }) end)
    -- round trip with dplhost's own pool
    local x = d(ref.unpool2d.x[1])
    local v, i = F.max_pool2d(dpl.randn(1, 2, 4, 4, { dtype = 'float64' }), 2, { return_indices = true })
    assert.are.same({ 1, 2, 4, 4 }, F.max_unpool2d(v, i, 2):size())
    assert.matches('Found an invalid max index', err_of(F.max_unpool2d, x, i64(ref.unpool2d_idx):mul(100), 2))
  end)
  it('LPPool1d / LPPool2d', function()
    check('lp_pool2d', function(x) return nn.LPPool2d(2, { 2, 3 }, { 2, 1 })(x) end)
    check('lp_pool2d_p3_ceil', function(x) return nn.LPPool2d(3, 3, 2, true)(x:abs() + 0.1) end)
    check('lp_pool1d', function(x) return nn.LPPool1d(1.5, 3)(x) end)
  end)
  it('FractionalMaxPool2d with given samples matches PyTorch (float64, float32 and the ratio form)', function()
    local S = d(ref.fmp_samples)
    check('fmp', function(x) return nn.FractionalMaxPool2d({ 2, 3 }, { output_size = { 4, 5 }, return_indices = true,
      _random_samples = S })(x) end)
    check('fmp_ratio', function(x) return F.fractional_max_pool2d(x, 2, { output_ratio = 0.5, return_indices = true,
      _random_samples = S }) end)
    local v, i = F.fractional_max_pool2d(d(ref.fmp.x[1]):float(), 3, { output_size = { 3, 4 }, return_indices = true,
      _random_samples = S:float() })
    near(ref.fmp_f32.out, v, 'float32 values', 1e-6)
    near(ref.fmp_f32.idx, i, 'float32 indices')
    -- random samples from dpl's generator: seeded
    local x = dpl.randn(1, 1, 9, 9)
    dpl.manual_seed(5)
    local a = nn.FractionalMaxPool2d(2, { output_ratio = 0.5 })(x)
    dpl.manual_seed(5)
    near(a, nn.FractionalMaxPool2d(2, { output_ratio = 0.5 })(x), 'seeded', 0)
    assert.matches('requires specifying either an output size', err_of(nn.FractionalMaxPool2d, 2))
    assert.matches('too large relative to input', err_of(F.fractional_max_pool2d, x, 5, { output_size = 6 }))
  end)
end)

describe('TripletMarginWithDistanceLoss', function()
  it('default distance and a custom one with swap', function()
    check('tmd', function(a, p, n) return nn.TripletMarginWithDistanceLoss()(a, p, n) end)
    local cos = function(u, v) return 1 - F.cosine_similarity(u, v) end
    check('tmd_swap', function(a, p, n) return nn.TripletMarginWithDistanceLoss({ distance_function = cos, margin = 0.5,
      swap = true, reduction = 'none' })(a, p, n) end)
    assert.matches('expected margin to be greater than 0', err_of(nn.TripletMarginWithDistanceLoss, { margin = 0 }))
  end)
end)
