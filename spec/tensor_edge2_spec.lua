-- tensor_edge2_spec.lua: more edge cases where dplhost once differed from PyTorch 1.13
-- (expected values computed with Debian's python3-torch): fmod's sign rule, integer
-- remainder/fmod by zero, the dtype of dpl.tensor(inf) and of nested 0-d tensors, mixed
-- booleans and fractions in a nested table, and the print format (scientific mode, widths).
local dpl = require 'dpl'

local function same(t, dtype, values)
  assert.are.equal(dtype, t.dtype)
  local got = t:totable()
  assert.are.equal(#values, #got)
  for i = 1, #values do
    local g, v = got[i], values[i]
    if v ~= v then assert.is_true(g ~= g, i .. ': expected nan')
    else assert.is_true(g == v or math.abs(g - v) < 1e-12, ('%d: %s vs %s'):format(i, tostring(g), tostring(v))) end
  end
end
local raises = require('spec.support.helpers').raises

describe('fmod and remainder', function()
  it('fmod takes the sign of the dividend (C fmod), remainder the sign of the divisor', function()
    -- torch.tensor([-3., 3., -3.5]).fmod(2) -> [-1., 1., -1.5]; remainder -> [1., 1., 0.5]
    same(dpl.tensor({ -3, 3, -3.5 }):fmod(2), 'float32', { -1, 1, -1.5 })
    same(dpl.tensor({ -3, 3, -3.5 }):remainder(2), 'float32', { 1, 1, 0.5 })
    same(dpl.tensor({ -3, 3, -7 }):fmod(2), 'int64', { -1, 1, -1 })
    same(dpl.tensor({ -3, 3, -7 }, { dtype = 'int32' }):fmod(dpl.tensor({ 2, -2, -2 }, { dtype = 'int32' })), 'int32', { -1, 1, -1 })
    same(dpl.tensor({ -3.5 }, { dtype = 'float16' }):fmod(2), 'float16', { -1.5 })
    same(dpl.tensor({ -3.5, 1 }):fmod(1 / 0), 'float32', { -3.5, 1 })
    local x = dpl.tensor({ -7, 7 }, { dtype = 'float64' })
    x:fmod_(3)
    same(x, 'float64', { -1, 1 })
  end)
  it('fmod has its own gradient: d/db = -trunc(a / b)', function()
    local a = dpl.tensor({ -7, 7 }, { dtype = 'float64' }):requires_grad_()
    local b = dpl.tensor({ 2, 2 }, { dtype = 'float64' }):requires_grad_()
    a:fmod(b):sum():backward()
    same(a.grad, 'float64', { 1, 1 })
    same(b.grad, 'float64', { 3, -3 }) -- torch: [3., -3.]
  end)
  it('integer remainder and fmod by zero raise ZeroDivisionError, as PyTorch', function()
    raises(function() return dpl.tensor({ -3, 3 }):remainder(0) end, 'ZeroDivisionError')
    raises(function() return dpl.tensor({ -3, 3 }):fmod(0) end, 'ZeroDivisionError')
    raises(function() return dpl.tensor({ -3, 3 }) % dpl.tensor({ 1, 0 }) end, 'ZeroDivisionError')
    raises(function() return 5 % dpl.tensor({ 0, 3 }) end, 'ZeroDivisionError')
    raises(function() return dpl.tensor({ 3 }, { dtype = 'uint8' }):remainder_(0) end, 'ZeroDivisionError')
    -- floats give nan; integer division (true division) gives inf
    same(dpl.tensor({ -3.5, 1 }):fmod(0), 'float32', { 0 / 0, 0 / 0 })
    same(dpl.tensor({ -3, 3 }) / 0, 'float32', { -1 / 0, 1 / 0 })
    same(dpl.tensor({ -3, 3 }) % 2.5, 'float32', { 2, 0.5 })
  end)
end)

describe('div with rounding_mode', function()
  it("rounds as torch.div(a, b, rounding_mode=...), integers staying integers", function()
    local a = dpl.tensor({ 7, -7 })
    -- torch.div(tensor([7, -7]), 2, rounding_mode='floor') -> [3, -4]; 'trunc' -> [3, -3]
    same(a:div(2, { rounding_mode = 'floor' }), 'int64', { 3, -4 })
    same(a:div(2, { rounding_mode = 'trunc' }), 'int64', { 3, -3 })
    same(a:floor_divide(2), 'int64', { 3, -4 })
    same(a:float():div(2, { rounding_mode = 'floor' }), 'float32', { 3, -4 })
    same(dpl.tensor({ 7, -7 }, { dtype = 'int32' }):div(dpl.tensor({ 2, 2 }, { dtype = 'int32' }), { rounding_mode = 'floor' }),
      'int32', { 3, -4 })
    same(a:div(2, {}), 'float32', { 3.5, -3.5 })
    same(dpl.tensor({ 16777217 }):div(1, { rounding_mode = 'trunc' }), 'int64', { 16777217 })
    local b = dpl.tensor({ 7, -7 })
    b:div_(2, { rounding_mode = 'floor' })
    same(b, 'int64', { 3, -4 })
    same(a:float():div(0, { rounding_mode = 'floor' }), 'float32', { 1 / 0, -1 / 0 })
    raises(function() return a:div(0, { rounding_mode = 'floor' }) end, 'ZeroDivisionError')
    raises(function() return a:div(2, { rounding = 'floor' }) end, "unknown option 'rounding'")
    raises(function() return a:div(2, { rounding_mode = 'round' }) end, "rounding_mode must be 'floor', 'trunc' or nil")
  end)
  it('has zero gradients, as PyTorch', function()
    local x = dpl.tensor({ 7, -7 }, { dtype = 'float64' }):requires_grad_()
    x:div(2, { rounding_mode = 'floor' }):sum():backward()
    same(x.grad, 'float64', { 0, 0 })
  end)
end)

describe('dpl.tensor from numbers and nested tables', function()
  it('infinities make float32 (not a saturated int64)', function()
    assert.are.equal('float32', dpl.tensor(1 / 0).dtype)
    assert.are.equal(1 / 0, dpl.tensor(1 / 0):item())
    assert.are.equal(-1 / 0, dpl.tensor(-1 / 0):item())
  end)
  it('integral numbers beyond int64\'s range make float32 (not a saturated int64)', function()
    -- dpl.tensor({1e20}) was int64 9223372036854775807 (a histogram of {-1e308, 1e308} read +-9.2e18)
    assert.are.equal('float32', dpl.tensor(1e20).dtype)
    assert.are.equal(1e20, dpl.tensor({ 1e20 }, { dtype = 'float64' }):item())
    same(dpl.tensor({ 1, 2 ^ 63 }), 'float32', { 1, 2 ^ 63 })
    same(dpl.tensor({ 1e308, -1e308 }):double(), 'float64', { 1 / 0, -1 / 0 }) -- beyond float32's range
    same(dpl.tensor({ -2 ^ 63, 2 ^ 53 }), 'int64', { -2 ^ 63, 2 ^ 53 }) -- still int64 inside the range
  end)
  it('a nested 0-d tensor keeps its kind: float stays float, bool stays bool', function()
    -- torch.tensor([torch.tensor(True)]).dtype == torch.bool; a float 0-d tensor gives float32
    assert.are.equal('bool', dpl.tensor({ dpl.tensor(true) }).dtype)
    same(dpl.tensor({ dpl.tensor(2, { dtype = 'float64' }), 3 }), 'float32', { 2, 3 })
    same(dpl.tensor({ dpl.tensor(1 / 0) }), 'float32', { 1 / 0 })
    same(dpl.tensor({ dpl.tensor(2), 3 }), 'int64', { 2, 3 })
  end)
  it('booleans mixed with fractional numbers are refused in either order', function()
    raises(function() return dpl.tensor({ true, 1.5 }) end, 'mixed booleans and numbers')
    raises(function() return dpl.tensor({ 1.5, true }) end, 'mixed booleans and numbers')
  end)
  it('a table with keys but no list part is refused (it made an empty tensor)', function()
    raises(function() return dpl.tensor({ a = 1 }) end, 'expected a list (keys 1..n), got a table with key a')
    raises(function() return dpl.tensor({ { x = 1 } }) end, 'expected a list')
    assert.are.same({ 2, 0 }, dpl.tensor({ {}, {} }):size())
  end)
end)

describe('printing as PyTorch', function()
  local function body(t) return (tostring(t):gsub(', dtype=.*$', '')) end
  it('uses scientific notation when max / min of the nonzero finite values exceeds 1000', function()
    assert.are.equal('tensor([1.0000e-01, 2.5000e-01, 1.0050e+02]', body(dpl.tensor({ 0.1, 0.25, 100.5 })))
    assert.are.equal('tensor([1.0000e-03, 1.0000e+03]', body(dpl.tensor({ 0.001, 1000 })))
    assert.are.equal('tensor([[   0,    1,    2,  ...,  997,  998,  999],\n        [1000, 1001, 1002,  ..., 1997, 1998, 1999]]',
      body(dpl.arange(2000):view(2, 1000)))
    assert.are.equal('tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03, 1.9990e+03]',
      body(dpl.arange(2000):float()))
    assert.are.equal('tensor([  0.1000,   0.2500, 100.0000]', body(dpl.tensor({ 0.1, 0.25, 100 })))
  end)
  it('takes widths from the nonzero finite values only', function()
    assert.are.equal('tensor([1., nan, inf, -inf]', body(dpl.tensor({ 1, 0 / 0, 1 / 0, -1 / 0 })))
    assert.are.equal('tensor([1.5000,    nan,    inf,   -inf]', body(dpl.tensor({ 1.5, 0 / 0, 1 / 0, -1 / 0 })))
    assert.are.equal('tensor([-0., 0., nan]', body(dpl.tensor({ -0.0, 0, 0 / 0 }, { dtype = 'float32' })))
    assert.are.equal('tensor([100000000.,   1000000.]', body(dpl.tensor({ 1e8, 1e6 }, { dtype = 'float32' })))
    assert.are.equal('tensor([1.0000e+09, 1.0000e+07]', body(dpl.tensor({ 1e9, 1e7 }, { dtype = 'float32' })))
  end)
end)

describe('PyTorch methods dplhost lacks', function()
  it('raise NotImplementedError naming the method, not "attempt to call a nil value"', function()
    local t = dpl.zeros(3)
    -- the names still missing (groups of them get implemented over time)
    local names = {}
    for name in pairs(debug.getregistry()['dpl.tensor.state'].missing) do names[#names + 1] = name end
    table.sort(names)
    for _, name in ipairs(names) do
      local ok, e = pcall(function() return t[name](t, 1) end)
      assert.is_false(ok)
      assert.are.equal('NotImplementedError', e.class_name or tostring(e):match('^(%w+):'))
      -- (Torch7's names say so and give the dplhost form: docs/torch7.md)
      assert.truthy(tostring(e):find('tensor:' .. name .. '() is not implemented', 1, true)
        or tostring(e):find('tensor:' .. name .. "() is Torch7's and not in dplhost: ", 1, true), tostring(e))
    end
    -- numpy() has no Lua meaning: it says what to use instead
    local ok, e = pcall(function() return t:numpy() end)
    assert.is_false(ok)
    assert.are.equal('NotImplementedError', e.class_name or tostring(e):match('^(%w+):'))
    assert.truthy(tostring(e):find('totable', 1, true), tostring(e))
    assert.is_nil(t.no_such_field) -- other unknown keys still read as nil
  end)
end)

describe('existing ops on a tensor in GPU memory without the CUDA plugin', function()
  it('raise NotImplementedError (not RuntimeError) naming the op', function()
    local run = require 'spec.support.devices_run'
    local setup = [[
dpl.C.dpl_proc_setenv('DPL_CUDA_PLUGIN', 'off')
local bit = require 'bit'
local function devmem(t) local v = t:view(t:size()) v._flags = bit.bor(v._flags, 2) return v end
local function undo(v) v._flags = bit.band(v._flags, bit.bnot(2)) end
function try(f) local v = {} local ok, e = pcall(f, v) for _, t in ipairs(v) do undo(t) end if ok then return 'no error' end error(e, 0) end
function dev(v, t) local x = devmem(t) v[#v + 1] = x return x end
]]
    local cases = {}
    for _, c in ipairs({ { 'exp', 'dev(v, dpl.randn(4, 3)):exp_()' }, { 'mul', 'dev(v, dpl.randn(4, 3)):mul_(2)' },
      { 'sum', 'dev(v, dpl.randn(4, 3)):sum(1)' }, { 'index_select', 'dev(v, dpl.randn(4, 3)):index_select(1, {1})' },
      { 'cross_entropy', 'dpl.cross_entropy(dev(v, dpl.randn(4, 3)), dev(v, dpl.tensor({1, 2, 3, 1})))' },
      { 'max_pool2d', 'dpl.max_pool2d(dev(v, dpl.randn(1, 1, 4, 4)), 2)' },
      { 'conv2d', 'dpl.tensor.conv2d(dev(v, dpl.randn(1, 2, 5, 5)), dpl.randn(3, 2, 3, 3))' } }) do
      cases[#cases + 1] = { ('try(function(v) return %s end)'):format(c[2]), 'err NotImplementedError: ' .. c[1] }
    end
    run.check(nil, cases, { setup = setup })
  end)
end)

describe('index arguments', function()
  it('a fraction in an index table or number is an error, not truncated', function()
    local x = dpl.randn(3, 2)
    raises(function() return x:index_select(1, { 1.7 }) end,
      'index_select: index must hold integers (1-based), got a non-integer value in the table')
    raises(function() return x:index_select(1, 2.5) end, 'index_select: index must be an integer (1-based), got 2.5')
    raises(function() return x:gather(1, { { 1, 1.5 } }) end, 'gather: index must hold integers')
    assert.are.same({ 0, 2 }, x:index_select(1, {}).shape) -- an empty table selects nothing
    assert.are.same({ 2, 2 }, x:index_select(1, { 3, -1 }).shape)
  end)
  it("index_add_ / scatter_add_ shape errors name the dim 1-based", function()
    raises(function() return dpl.zeros(3, 4):index_add_(2, { 1 }, dpl.zeros(3, 2)) end,
      'index_add_: source shape [3, 2] does not match self [3, 4] with dim 2 of size 1 (the index length)')
    raises(function() return dpl.zeros(3, 4):scatter_add_(2, dpl.ones(3, 5):long(), dpl.zeros(3, 4)) end,
      'scatter_add_: index shape [3, 5] is larger than src [3, 4] at dim 2')
  end)
end)

describe('masked_fill out of place', function()
  it('broadcasts self against the mask, as PyTorch (the gradient sums back)', function()
    local x = dpl.randn(1, 3, 4):requires_grad_()
    local m = dpl.tensor({ { { true, false, false, true } }, { { false, false, true, false } } })
    local y = x:masked_fill(m, -1)
    assert.are.same({ 2, 3, 4 }, y.shape)
    assert.are.equal(-1, y[1][2][1]:item())
    assert.are.equal(x[1][2][2]:item(), y[2][2][1]:item() == -1 and 0 or y[1][2][2]:item())
    y:sum():backward()
    assert.are.same({ 1, 2, 1, 1 }, x.grad[1][1]:totable())
    raises(function() return x:masked_fill(dpl.ones(2, 2):bool(), 0) end,
      'masked_fill: the mask of shape [2, 2] does not broadcast with self of shape [1, 3, 4]')
  end)
end)

describe('integer tensors with integer scalars past their range', function()
  it('the scalar wraps modulo 2^32 / 2^8 as PyTorch 1.13 (int32 + 3e9, int32 * 2^31, uint8 + 300)', function()
    local x = dpl.tensor({ 1, 2 }, { dtype = 'int32' })
    same(x + 3e9, 'int32', { -1294967295, -1294967294 })
    same(x * 2 ^ 31, 'int32', { -2147483648, 0 })
    same(x - 2 ^ 32, 'int32', { 1, 2 })
    local y = dpl.tensor({ 1, 200 }, { dtype = 'uint8' })
    same(y + 300, 'uint8', { 45, 244 })
    same(y - 2, 'uint8', { 255, 198 })
    local z = dpl.tensor({ 5 }, { dtype = 'int32' })
    z:add_(2 ^ 32 + 1)
    same(z, 'int32', { 6 })
  end)
end)
