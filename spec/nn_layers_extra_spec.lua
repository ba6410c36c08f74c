-- nn_layers_extra_spec.lua: GroupNorm, LeakyReLU, SmoothL1Loss, Unflatten, BatchNorm's
-- edge cases (one value per channel, momentum=false as PyTorch's None), option checks,
-- and nn.init's trunc_normal_, orthogonal_, eye_ and calculate_gain against PyTorch 1.13
-- (spec/fixtures/nn_module_ref.lua from gen_nn_module_ref.py).
local dpl = require 'dpl'
local nn = dpl.nn
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/nn_module_ref.lua')

local function d(t) return dpl.tensor(t, { dtype = 'float64' }) end
local function flat(v, out)
  out = out or {}
  if type(v) == 'table' then for _, x in ipairs(v) do flat(x, out) end else out[#out + 1] = v end
  return out
end
local function near(expected, got, what, tol)
  if type(got) == 'cdata' then got = got:totable() end
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

-- runs a module on x (float64) with upstream gradient g; checks against ref[name]
local function run(name, mod, x, g)
  mod:to('float64')
  local xt = d(x):requires_grad_()
  local y = mod(xt)
  y:backward(d(g))
  local r = ref[name]
  near(r.out, y, name .. ' output')
  near(r.gx, xt.grad, name .. ' input grad')
  if r.gw then
    near(r.gw, mod.weight.grad, name .. ' weight grad')
    near(r.gb, mod.bias.grad, name .. ' bias grad')
  end
end

describe('new layers match PyTorch', function()
  it('GroupNorm: values and gradients (2 groups, 1 group without affine, one group per channel in 4-D)', function()
    local gn = nn.GroupNorm(2, 4)
    gn.weight = nn.Parameter(d(ref.W))
    gn.bias = nn.Parameter(d(ref.B))
    run('group_norm', gn, ref.X3, ref.G)
    local g1 = nn.GroupNorm(1, 4, { affine = false, eps = 1e-3 })
    assert.are.equal(0, #g1:parameters())
    run('group_norm_1group_noaffine', g1, ref.X3, ref.G)
    local g4 = nn.GroupNorm(4, 4)
    g4.weight = nn.Parameter(d(ref.W))
    g4.bias = nn.Parameter(d(ref.B))
    local x4 = d(ref.X3):unsqueeze(4):totable()
    local gr4 = d(ref.G):unsqueeze(4):totable()
    run('group_norm_4d', g4, x4, gr4)
    assert.are.equal('GroupNorm(4, 4, eps=1e-05, affine=true)  -- 8 params', tostring(g4))
    assert.truthy(err_of(nn.GroupNorm, 3, 4):find('num_channels %(4%) must be divisible by num_groups %(3%)'))
    assert.truthy(err_of(g4, dpl.ones(2, 3)):find('GroupNorm%(4, 4%): input has shape %[2, 3%], expected %[N, 4, %*%]'))
    assert.truthy(err_of(nn.GroupNorm, 2, 4, { eps = 1e-5, momentum = 0.1 }):find("unknown option 'momentum'"))
  end)

  it('LeakyReLU and SmoothL1Loss modules', function()
    run('leaky_relu', nn.LeakyReLU(0.2), ref.X3, ref.G)
    run('leaky_relu_default', nn.LeakyReLU(), ref.X3, ref.G)
    assert.are.equal('LeakyReLU(negative_slope=0.2)', tostring(nn.LeakyReLU(0.2)))
    assert.truthy(err_of(nn.LeakyReLU, 'x'):find('negative_slope must be a number'))
    for name, opts in pairs({ smooth_l1 = nil, smooth_l1_beta = { beta = 0.5 }, smooth_l1_sum = { reduction = 'sum', beta = 2 } }) do
      local x = d(ref.X3):requires_grad_()
      local out = nn.SmoothL1Loss(opts)(x, d(ref.G))
      out:backward()
      near(ref[name].out, out:item(), name)
      near(ref[name].gx, x.grad, name .. ' grad')
    end
    local x = d(ref.X3):requires_grad_()
    local out = nn.SmoothL1Loss()(x, d(ref.G))
    out:backward()
    near(ref.smooth_l1.out, out:item(), 'smooth_l1')
    assert.truthy(err_of(nn.SmoothL1Loss, { beta = 1, betta = 2 }):find("unknown option 'betta'"))
  end)

  it('Unflatten', function()
    local x = dpl.randn(2, 12, 5)
    assert.are.same({ 2, 3, 4, 5 }, nn.Unflatten(2, { 3, 4 })(x):size())
    assert.are.same({ 2, 2, 6, 5 }, nn.Unflatten(2, { 2, -1 })(x):size())
    assert.are.same({ 2, 12, 5, 1 }, nn.Unflatten(-1, { 5, 1 })(x):size())
    local y = nn.Unflatten(2, { 3, 4 })(x)
    assert.are.same(x:reshape(2, 3, 4, 5):totable(), y:totable())
    assert.are.equal('Unflatten(dim=2, unflattened_size=(3, 4))', tostring(nn.Unflatten(2, { 3, 4 })))
    assert.truthy(err_of(nn.Unflatten(2, { 2, 3 }), dpl.ones(2, 5))
      :find("provided sizes %[2, 3%] don't multiply up to the size of dim 2 %(5%)"))
    assert.truthy(err_of(nn.Unflatten, 2, { -1, -1 }):find('only one size can be %-1'))
    assert.truthy(err_of(nn.Unflatten(4, { 1 }), dpl.ones(2, 5)):find('dim 4 is out of range'))
    -- Flatten and Unflatten round trip in a Sequential
    local s = nn.Sequential(nn.Flatten(), nn.Unflatten(2, { 3, 4 }))
    assert.are.same({ 2, 3, 4 }, s(dpl.ones(2, 12)):size())
  end)
end)

describe('BatchNorm edge cases', function()
  it('one value per channel in training is an error (running statistics untouched), as PyTorch', function()
    local bn = nn.BatchNorm1d(3)
    local e = err_of(bn, dpl.randn(1, 3))
    assert.truthy(e:find('expected more than 1 value per channel when training, got input size %[1, 3%]'), e)
    assert.are.same({ 1, 1, 1 }, bn.running_var:totable())
    assert.are.equal(0, bn.num_batches_tracked:item())
    local bn2 = nn.BatchNorm2d(3)
    e = err_of(bn2, dpl.randn(1, 3, 1, 1))
    assert.truthy(e:find('got input size %[1, 3, 1, 1%]'), e)
    -- fine: one sample with several positions, and eval with one sample
    assert.are.same({ 1, 3, 2, 1 }, bn2(dpl.randn(1, 3, 2, 1)):size())
    bn:eval()
    assert.are.same({ 1, 3 }, bn(dpl.randn(1, 3)):size())
    -- no running statistics: batch statistics also in eval, so the same error
    local nt = nn.BatchNorm1d(3, { track_running_stats = false })
    nt:eval()
    assert.truthy(err_of(nt, dpl.randn(1, 3)):find('more than 1 value per channel'))
    assert.truthy(err_of(nn.functional.batch_norm, dpl.randn(1, 3), nil, nil, nil, nil, true)
      :find('more than 1 value per channel'))
  end)

  it("momentum=false is PyTorch's momentum=None: cumulative averages", function()
    local bn = nn.BatchNorm1d(3, { momentum = false }):to('float64')
    for _, b in ipairs(ref.bn_cumulative.batches) do bn(d(b)) end
    near(ref.bn_cumulative.mean, bn.running_mean, 'running_mean')
    near(ref.bn_cumulative.var, bn.running_var, 'running_var')
    assert.are.equal(ref.bn_cumulative.n, bn.num_batches_tracked:item())
    assert.truthy(tostring(bn):find('momentum=false'))
    assert.truthy(err_of(nn.BatchNorm1d, 3, { momentum = 'none' }):find('momentum must be a number or false'))
    assert.truthy(err_of(nn.BatchNorm2d, 3, { momentum = true }):find('momentum must be a number or false'))
    assert.are.equal(0.1, nn.BatchNorm1d(3).momentum)
    assert.are.equal(0, nn.BatchNorm1d(3, { momentum = 0 }).momentum)
  end)
end)

describe('option checks', function()
  it("GELU / gelu: approximate other than 'none' or 'tanh' is an error", function()
    assert.truthy(err_of(nn.GELU, { approximate = 'bad' }):find("approximate must be 'none' or 'tanh', got 'bad'"))
    assert.truthy(err_of(nn.functional.gelu, dpl.ones(2), { approximate = 'Tanh' }):find("got 'Tanh'"))
    assert.are.equal("GELU(approximate='tanh')", tostring(nn.GELU({ approximate = 'tanh' })))
    assert.are.equal('GELU()', tostring(nn.GELU({ approximate = 'none' })))
  end)

  it('kaiming_*: mode must be fan_in or fan_out; calculate_gain checks its inputs', function()
    local t = dpl.empty(2, 2)
    assert.truthy(err_of(nn.init.kaiming_uniform_, t, 0, 'fan_avg')
      :find('mode fan_avg not supported, please use one of fan_in, fan_out'))
    assert.truthy(err_of(nn.init.kaiming_normal_, t, 0, 'fan_avg'):find('mode fan_avg not supported'))
    nn.init.kaiming_uniform_(t, 0, 'fan_out', 'relu')
    assert.truthy(err_of(nn.init.kaiming_uniform_, t, 0, 'fan_in', 'bad'):find('unsupported nonlinearity bad'))
    assert.truthy(err_of(nn.init.calculate_gain, 'leaky_relu', true):find('negative_slope true not a valid number'))
  end)
end)

describe('nn.init', function()
  it("calculate_gain: PyTorch's values, conv1d/3d and conv_transpose* included", function()
    for nl, g in pairs(ref.gains) do
      if nl == 'leaky_relu_02' then near(g, nn.init.calculate_gain('leaky_relu', 0.2), nl)
      else near(g, nn.init.calculate_gain(nl), nl) end
    end
  end)

  it("trunc_normal_: PyTorch's inverse-CDF method (erfinv checked), values inside [a, b]", function()
    near(ref.erfinv.y, nn.init._erfinv(d(ref.erfinv.x)), 'erfinv vs torch', 1e-9)
    near(ref.erfinv.exact, nn.init._erfinv(d(ref.erfinv.x)), 'erfinv vs mpmath', 1e-14)
    dpl.manual_seed(3)
    local t = dpl.empty(20000)
    assert.are.equal(t, nn.init.trunc_normal_(t))
    assert.is_true(t:min():item() >= -2 and t:max():item() <= 2)
    -- the N(0, 1) truncated to [-2, 2] has mean 0 and sd 0.8796
    assert.is_true(math.abs(t:mean():item()) < 0.03)
    assert.is_true(math.abs(t:std():item() - 0.8796) < 0.02)
    -- far in a tail (rejection sampling would not end): [5, 6] of N(1, 2): mean 5.4078
    nn.init.trunc_normal_(t, 1, 2, 5, 6)
    assert.is_true(t:min():item() >= 5 and t:max():item() <= 6)
    assert.is_true(math.abs(t:mean():item() - 5.4078) < 0.02)
    -- std 0.02 with PyTorch's default bounds [-2, 2] (a ViT's init): plain N(0, 0.02²)
    nn.init.trunc_normal_(t, 0, 0.02)
    assert.is_true(math.abs(t:std():item() - 0.02) < 0.001)
    local h = dpl.empty(100, { dtype = 'float64' })
    nn.init.trunc_normal_(h, 0, 1, -0.5, 0.5)
    assert.is_true(h:abs():max():item() <= 0.5)
    assert.truthy(err_of(nn.init.trunc_normal_, t, 0, 1, 2, -2):find('a %(2%) must be less than b %(%-2%)'))
  end)

  it("orthogonal_: QR's Q with R's diagonal positive (as PyTorch), rows < cols, gain", function()
    near(ref.qr.Q, nn.init._orthonormal_columns(d(ref.qr.A)), 'Q', 1e-12)
    local w = dpl.empty(6, 3, 2) -- viewed as [6, 6]
    nn.init.orthogonal_(w)
    local m = w:reshape(6, 6):double()
    near(dpl.eye(6):totable(), m:mm(m:t()), 'square Q Q^T', 1e-6)
    local wide = dpl.empty(3, 8, { dtype = 'float64' })
    nn.init.orthogonal_(wide, 2)
    near((dpl.eye(3) * 4):totable(), wide:mm(wide:t()), 'wide rows orthogonal, norm 2', 1e-12)
    local tall = dpl.empty(8, 3, { dtype = 'float64' })
    nn.init.orthogonal_(tall)
    near(dpl.eye(3):totable(), tall:t():mm(tall), 'tall columns orthonormal', 1e-12)
    assert.truthy(err_of(nn.init.orthogonal_, dpl.empty(3)):find('2 or more dimensions'))
  end)

  it('eye_', function()
    local t = dpl.empty(2, 3)
    assert.are.equal(t, nn.init.eye_(t))
    assert.are.same({ { 1, 0, 0 }, { 0, 1, 0 } }, t:totable())
    local p = nn.Parameter(dpl.empty(3, 3))
    nn.init.eye_(p) -- a leaf that requires grad: in place without recording
    assert.is_true(p.is_leaf)
    assert.truthy(err_of(nn.init.eye_, dpl.empty(2, 2, 2)):find('only tensors with 2 dimensions'))
  end)
end)

describe('max pooling indices', function()
  it('F.max_pool2d and nn.MaxPool2d return 1-based positions in each plane (PyTorch + 1)', function()
    local dpl = require 'dpl'
    local x = dpl.tensor({ { { { 1, 5, 0, 0 }, { 3, 2, 0, 9 } } } }):float()
    local v, i = dpl.nn.functional.max_pool2d(x, 2, { return_indices = true })
    assert.are.same({ { { { 5, 9 } } } }, v:totable())
    assert.are.same({ { { { 2, 8 } } } }, i:totable())
    assert.are.equal('int64', i.dtype)
    local m = dpl.nn.MaxPool2d(2, { return_indices = true })
    local v2, i2 = m(x)
    assert.are.same(v:totable(), v2:totable())
    assert.are.same(i:totable(), i2:totable())
    local _, iu = m(x[1]) -- unbatched [C, H, W]
    assert.are.same({ { { 2, 8 } } }, iu:totable())
    assert.are.equal(1, select('#', dpl.nn.MaxPool2d(2)(x)))
    require('spec.support.helpers').raises(function() dpl.nn.MaxPool2d(2, { return_indices = 1 }) end,
      'MaxPool2d: return_indices must be true or false, got 1')
  end)
end)

describe("nn.Conv2d padding='same'/'valid' and padding_mode", function()
  local dpl = require 'dpl'
  local h = require 'spec.support.helpers'
  local ref = dofile('spec/fixtures/conv2d_pad_ref.lua')
  for i, c in ipairs(ref) do
    it(('matches PyTorch (case %d): output and gradients'):format(i), function()
      local o = { dtype = 'float64' }
      for k, v in pairs(c.opts) do o[k] = v end
      local m = dpl.nn.Conv2d(2, 3, c.k, o)
      dpl.no_grad(function()
        m.weight:copy_(dpl.tensor(c.w, { dtype = 'float64' }))
        m.bias:copy_(dpl.tensor(c.b, { dtype = 'float64' }))
      end)
      local x = dpl.tensor(c.x, { dtype = 'float64' }):requires_grad_()
      local y = m(x)
      y:backward(dpl.ones_like(y))
      h.near(y, dpl.tensor(c.y, { dtype = 'float64' }), 1e-10)
      h.near(x.grad, dpl.tensor(c.gx, { dtype = 'float64' }), 1e-10)
      h.near(m.weight.grad, dpl.tensor(c.gw, { dtype = 'float64' }), 1e-10)
    end)
  end
  it('checks the padding string and mode', function()
    h.raises(function() dpl.nn.Conv2d(2, 3, 3, { padding = 'full' }) end,
      "Conv2d: invalid padding string 'full', should be one of 'valid', 'same'")
    h.raises(function() dpl.nn.Conv2d(2, 3, 3, { padding = 'same', stride = 2 }) end,
      "Conv2d: padding='same' is not supported for strided convolutions")
    h.raises(function() dpl.nn.Conv2d(2, 3, 3, { padding_mode = 'mirror' }) end,
      "Conv2d: padding_mode must be one of 'zeros', 'reflect', 'replicate', 'circular', but got mirror")
    assert.truthy(tostring(dpl.nn.Conv2d(2, 3, 3, { padding = 1, padding_mode = 'circular' })):find("padding_mode='circular'", 1, true))
  end)
end)
