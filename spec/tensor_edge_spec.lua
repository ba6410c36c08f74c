-- tensor_edge_spec.lua: edge cases where dplhost once differed from PyTorch 1.13 (the
-- expected values were computed with Debian's python3-torch): type promotion of scalars
-- and 0-d tensors, integer powers, norms at -inf, linspace of one step, gradients at
-- zeros (prod, norm, pow), index_add_'s alpha, reductions over the one dim of a 0-d
-- tensor, printing of large int64 values, the storage of tensors loaded from a file,
-- and the error messages of list ops and out-of-range negative indices.
local dpl = require 'dpl'

local function D(v) return dpl.tensor(v, { dtype = 'float64' }):requires_grad_() end
local function same(t, dtype, values)
  assert.are.equal(dtype, t.dtype)
  local got = t:totable()
  assert.are.equal(#values, #got)
  for i = 1, #values do
    if type(values[i]) == 'table' then
      for j = 1, #values[i] do assert.is_true(math.abs(got[i][j] - values[i][j]) < 1e-12, i .. ',' .. j) end
    elseif type(values[i]) == 'boolean' then assert.are.equal(values[i], got[i])
    else assert.is_true(math.abs(got[i] - values[i]) < 1e-12, ('%d: %s vs %s'):format(i, tostring(got[i]), values[i])) end
  end
end
local raises = require('spec.support.helpers').raises

describe('type promotion', function()
  it('where and clamp with a fractional scalar promote an integer tensor to float32', function()
    local x = dpl.tensor({ -3, 0, 3 })
    same(dpl.where(x:gt(0), x, 0.5), 'float32', { 0.5, 0.5, 3 })
    same(dpl.where(x:gt(0), 0.5, x), 'float32', { -3, 0, 0.5 })
    same(dpl.where(x:gt(0), x, 2), 'int64', { 2, 2, 3 })
    same(x:clamp(-2.5, 2.5), 'float32', { -2.5, 0, 2.5 })
    same(x:clamp(-2, 2), 'int64', { -2, 0, 2 })
    raises(function() x:clone():clamp_(-2.5, 2.5) end, "clamp_: result type float32 can't be cast to the tensor's dtype int64")
    local b = dpl.tensor({ true, false })
    same(dpl.where(b, b, 2), 'int64', { 1, 2 })
  end)

  it('a 0-d integer tensor promotes a bool tensor (a different category), not the other way', function()
    local b = dpl.tensor({ true, false })
    same(b + dpl.tensor(3), 'int64', { 4, 3 })
    same(b:mul(dpl.tensor(2, { dtype = 'int32' })), 'int32', { 2, 0 })
    same(b + dpl.tensor(2.5), 'float32', { 3.5, 2.5 })
    same(dpl.tensor({ 1, 2 }, { dtype = 'uint8' }) + dpl.tensor(3), 'uint8', { 4, 5 }) -- same category
    same(b:square(), 'int64', { 1, 0 })
  end)

  it('integers to a negative integer scalar power are refused', function()
    raises(function() return dpl.tensor({ 1, 2, 4 }) ^ -1 end, 'integers to negative integer powers are not allowed')
    raises(function() return dpl.tensor({ 1, 2 }):pow_(-2) end, 'integers to negative integer powers are not allowed')
    same(dpl.tensor({ 1, 2, 4 }) ^ 2, 'int64', { 1, 4, 16 })
    same(dpl.tensor({ 1, 2, 4 }) ^ dpl.tensor(-1), 'int64', { 1, 0, 0 }) -- a tensor exponent: as PyTorch
    same(dpl.tensor({ 2.5, 4 }, { dtype = 'float64' }) ^ -1, 'float64', { 0.4, 0.25 })
  end)
end)

describe('values', function()
  it('norm(-inf) is the smallest magnitude', function()
    local x = dpl.tensor({ { 1, -2, 3 }, { -4, 0.5, 6 } }, { dtype = 'float64' })
    assert.are.equal(0.5, x:norm(-math.huge):item())
    same(x:norm(-math.huge, 2), 'float64', { 1, 0.5 })
    same(x:norm(math.huge, 2), 'float64', { 3, 6 })
  end)

  it('linspace with one step is the start', function()
    same(dpl.linspace(3, 5, 1), 'float32', { 3 })
    same(dpl.linspace(3, 5, 3), 'float32', { 3, 4, 5 })
  end)

  it('index_add_ scales the source by alpha (a number or {alpha=}), also in its gradient', function()
    same(dpl.zeros(3):index_add_(1, { 1, 3 }, dpl.ones(2), 2), 'float32', { 2, 0, 2 })
    same(dpl.zeros(3):index_add_(1, { 1, 3 }, dpl.ones(2), { alpha = -1 }), 'float32', { -1, 0, -1 })
    local s = D({ 1, 1 })
    local r = dpl.zeros(3, { dtype = 'float64' }):index_add_(1, { 1, 3 }, s, 2)
    ;(r * dpl.tensor({ 1, 2, 3.5 }, { dtype = 'float64' })):sum():backward()
    same(s.grad, 'float64', { 2, 7 })
  end)

  it('reductions over dim 1 or -1 of a 0-d tensor reduce all of it, as dim 0 / -1 in PyTorch', function()
    local x = dpl.tensor(3.5)
    assert.are.equal(3.5, x:sum(1):item())
    assert.are.equal(3.5, x:mean(-1):item())
    local v, i = x:max(1)
    assert.are.equal(3.5, v:item())
    assert.are.equal(1, i:item())
    assert.are.equal(1, x:argmax(-1):item())
    local y = D(2.5)
    y:max(1):backward()
    assert.are.equal(1, y.grad:item())
    local z = D(2.5)
    ;(z:sum(1) * 3):backward()
    assert.are.equal(3, z.grad:item())
  end)

  it('int64 values beyond 2^53 print exactly (INT64_MAX too)', function()
    -- (2^62 - 1 + 2^62, computed in int64: 2^63 itself is no int64, an error as in PyTorch)
    local big = dpl.tensor({ 2 ^ 62, -4 }, { dtype = 'int64' }) - 1 + dpl.tensor({ 2 ^ 62, 0 }, { dtype = 'int64' })
    local s = tostring(big)
    assert.truthy(s:find('9223372036854775807', 1, true), s)
    assert.truthy(s:find('-5', 1, true), s)
    assert.truthy(tostring(dpl.tensor({ 2 ^ 60 + 1 }, { dtype = 'int64' }) + 0):find('1152921504606846976', 1, true))
  end)

  it('a tensor loaded from safetensors has its own storage (as_strided cannot reach the file header)', function()
    local path = os.tmpname()
    dpl.safetensors.save(path, { a = dpl.tensor({ 1, 2, 3 }, { dtype = 'float32' }), b = dpl.arange(9):float() })
    local t = dpl.safetensors.load(path)
    assert.are.equal(0, t.b:storage_offset())
    same(t.b:as_strided({ 2, 2 }, { 1, 2 }, 2), 'float32', { { 2, 4 }, { 3, 5 } })
    raises(function() t.a:as_strided({ 4 }, { 1 }, 0) end, 'as_strided')
    os.remove(path)
  end)
end)

describe('gradients at zeros (PyTorch gives 0, never NaN or inf)', function()
  it('prod: with no, one and several zeros, over all elements and along a dim', function()
    local x = D({ 0, 0, 2, 3 }); x:prod():backward(); same(x.grad, 'float64', { 0, 0, 0, 0 })
    x = D({ 0, 2, 3 }); x:prod():backward(); same(x.grad, 'float64', { 6, 0, 0 })
    x = D({ 1, 2, 3 }); x:prod():backward(); same(x.grad, 'float64', { 6, 3, 2 })
    x = D({ { 0, 2, 3 }, { 0, 0, 4 }, { 1, 2, 5 } }); x:prod(2):sum():backward()
    same(x.grad, 'float64', { { 6, 0, 0 }, { 0, 0, 0 }, { 10, 5, 2 } })
    x = D({ { 0, 2, 3 }, { 0, 0, 4 }, { 1, 2, 5 } })
    ;(x:prod(1) * dpl.tensor({ 1, 2, 3 }, { dtype = 'float64' })):sum():backward()
    same(x.grad, 'float64', { { 0, 0, 60 }, { 0, 8, 45 }, { 0, 0, 36 } })
  end)

  it('norm: an all-zero slice and zero elements', function()
    local x = D({ { 0, 0, 0 }, { 1, -2, 0 } }); x:norm(2, 2):sum():backward()
    same(x.grad, 'float64', { { 0, 0, 0 }, { 0.4472135954999579, -0.8944271909999159, 0 } })
    x = D({ { 0, 0, 0 }, { 1, -2, 0 } }); x:norm(3, 2):sum():backward()
    same(x.grad, 'float64', { { 0, 0, 0 }, { 0.2311204247835449, -0.9244816991341795, 0 } })
    x = D({ { 0, 0, 0 }, { 1, -2, 0.5 } }); x:norm(1.5, 2):sum():backward()
    same(x.grad, 'float64', { { 0, 0, 0 }, { 0.6206870223051937, -0.8777840049329767, 0.43889200246648835 } })
    x = D({ { 1, -2, 0.5 }, { 3, -3, 1 } }); x:norm(-math.huge, 2):sum():backward()
    same(x.grad, 'float64', { { 0, 0, 1 }, { 0, 0, 1 } })
  end)

  it('pow: a zero base with a zero or positive exponent', function()
    local a, b = D({ 0, 2, 0 }), D({ 2, 3, 0 })
    ;(a ^ b):sum():backward()
    same(a.grad, 'float64', { 0, 12, 0 })
    same(b.grad, 'float64', { 0, 5.545177444479562, 0 })
    local e = D({ 0, 1 }); (0 ^ e):sum():backward(); same(e.grad, 'float64', { 0, 0 })
    e = D({ 0, 1 }); (2 ^ e):sum():backward(); same(e.grad, 'float64', { 0.6931471805599453, 1.3862943611198906 })
  end)
end)

describe('error messages', function()
  it('number the tensors of cat and stack from 1, and name out-of-range negative indices', function()
    raises(function() dpl.cat({ dpl.ones(2, 2), dpl.ones(2) }) end, 'cat: tensor 2 has 1 dims, tensor 1 has 2')
    raises(function() dpl.cat({ dpl.ones(2, 2), dpl.ones(3, 3) }, 1) end,
      'cat: sizes must match except in dim 1: tensor 1 is [2, 2], tensor 2 is [3, 3]')
    raises(function() dpl.stack({ dpl.ones(2), dpl.ones(3) }) end,
      'stack: expected tensors of equal shape, tensor 1 is [2], tensor 2 is [3]')
    raises(function() dpl.ones(3):index_select(1, { -4 }) end, 'index_select: index -4 is out of range for a dim of size 3')
    raises(function() dpl.arange(0, math.huge) end, 'arange: start, end and step must be finite, got inf')
    raises(function() dpl.nn.functional.linear(dpl.ones(2, 3), dpl.ones(3)) end, 'linear: weight must be 2-d')
  end)
end)
