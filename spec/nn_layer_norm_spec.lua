-- nn_layer_norm_spec.lua: the fused layer_norm (dpl_layer_norm, T.layer_norm) against the
-- composed formula (mean, centering, rsqrt of the biased variance), forward and gradients,
-- float32 and float64, with and without affine, over one or several trailing dims; and
-- the argument checks of the C op.
local dpl = require 'dpl'
local F = dpl.nn.functional
local T = require 'dpl.tensor'

local function composed(x, shape, w, b, eps)
  local nd, k = x:dim(), #shape
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

local function maxdiff(a, b) return (a:double() - b:double()):abs():max():item() end

local function run(f, dt, xs, shape, affine, seed)
  dpl.manual_seed(seed)
  local x = (dpl.randn(xs) * 3 + 1):to(dt):requires_grad_()
  local w, b
  if affine then
    w = dpl.randn(shape):to(dt):requires_grad_()
    b = dpl.randn(shape):to(dt):requires_grad_()
  end
  local gy = dpl.randn(xs):to(dt)
  local y = f(x, shape, w, b, 1e-5)
  y:backward(gy)
  return y, x.grad, w and w.grad, b and b.grad
end

describe('fused layer_norm', function()
  local cases = {
    { { 3, 4 }, { 4 } }, { { 2, 3, 8 }, { 8 } }, { { 2, 3, 4, 5 }, { 4, 5 } }, { { 5, 1 }, { 1 } },
    { { 7, 300 }, { 300 } }, { { 1, 6 }, { 6 } },
  }
  for _, dt in ipairs({ 'float32', 'float64' }) do
    local tol = dt == 'float32' and 2e-4 or 1e-10
    for ci, c in ipairs(cases) do
      for _, affine in ipairs({ false, true }) do
        it(string.format('%s, x %s over %s, affine %s: matches the composed formula', dt,
          table.concat(c[1], 'x'), table.concat(c[2], 'x'), tostring(affine)), function()
          local y1, gx1, gw1, gb1 = run(F.layer_norm, dt, c[1], c[2], affine, ci)
          local y2, gx2, gw2, gb2 = run(composed, dt, c[1], c[2], affine, ci)
          assert.are.equal(dt, y1.dtype)
          assert.are.same(y2:size(), y1:size())
          assert.is_true(maxdiff(y1, y2) < tol, 'y')
          assert.is_true(maxdiff(gx1, gx2) < tol * 10, 'grad x')
          if affine then
            assert.are.same(c[2], gw1:size())
            assert.is_true(maxdiff(gw1, gw2) < tol * 10, 'grad w')
            assert.is_true(maxdiff(gb1, gb2) < tol * 10, 'grad b')
          end
        end)
      end
    end
  end

  it('bfloat16 and float16 compute in float32 and keep the dtype', function()
    dpl.manual_seed(3)
    local x = dpl.randn(4, 16)
    for _, dt in ipairs({ 'bfloat16', 'float16' }) do
      local y = F.layer_norm(x:to(dt), { 16 })
      assert.are.equal(dt, y.dtype)
      assert.is_true(maxdiff(y, composed(x:to(dt):float(), { 16 }, nil, nil, 1e-5)) < 0.05)
    end
  end)

  it('saves mean and rstd per row (float32, float64 for float64 input)', function()
    local x = dpl.tensor({ { 1, 2, 3, 4 }, { 2, 2, 2, 2 } }):float()
    local y, m, r = T.layer_norm(x, nil, nil, 4, 0)
    assert.are.equal('float32', m.dtype)
    assert.are.same({ 2 }, m:size())
    assert.is_true(math.abs(m[1]:item() - 2.5) < 1e-6)
    assert.is_true(math.abs(r[1]:item() - 1 / math.sqrt(1.25)) < 1e-6)
    local _, m64 = T.layer_norm(x:double():reshape(4, 2), nil, nil, 2, 1e-5)
    assert.are.equal('float64', m64.dtype)
    assert.are.same({ 4 }, m64:size())
    assert.are.same({ 2, 4 }, y:size())
  end)

  it('mixed dtypes take the composed path (promotion)', function()
    local x = dpl.randn(2, 4):double()
    local y = F.layer_norm(x, { 4 }, dpl.ones(4), dpl.zeros(4))
    assert.are.equal('float64', y.dtype)
  end)

  it('checks its arguments', function()
    local function errs(f, msg)
      local ok, e = pcall(f)
      assert.is_false(ok)
      assert.truthy(tostring(e):find(msg, 1, true), tostring(e))
    end
    local x = dpl.randn(2, 6)
    errs(function() T.layer_norm(x, nil, nil, 4, 1e-5) end, 'layer_norm: input of shape [2, 6] has no trailing dims of 4 elements')
    errs(function() T.layer_norm(x, nil, nil, 0, 1e-5) end, 'layer_norm: normalized_numel must be at least 1')
    errs(function() T.layer_norm(x, dpl.ones(5), nil, 6, 1e-5) end, 'layer_norm: expected weight of 6 elements, got 5')
    errs(function() T.layer_norm(x, nil, dpl.ones(6):double(), 6, 1e-5) end,
      'layer_norm: expected bias of dtype float32 (the input\'s), got float64')
    errs(function() T.layer_norm(dpl.ones(2, 6, { dtype = 'int64' }), nil, nil, 6, 1e-5) end,
      'layer_norm: expected a floating input, got int64')
    local _, m, r = T.layer_norm(x, nil, nil, 6, 1e-5)
    errs(function() T.layer_norm_backward(dpl.randn(2, 5), x, m, r, nil, {}) end,
      'layer_norm_backward: grad shape [2, 5] does not match the input shape [2, 6]')
    errs(function() T.layer_norm_backward(dpl.randn(2, 6), x, m:double(), r, nil, {}) end,
      'layer_norm_backward: expected mean and rstd of dtype float32')
    errs(function() T.layer_norm_backward(dpl.randn(2, 6), x, m:narrow(1, 1, 1), r, nil, {}) end,
      'layer_norm_backward: mean and rstd have 1 and 2 elements')
  end)
end)
