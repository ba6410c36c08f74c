-- autograd_grad_spec.lua: leaf hooks on the summed gradient (AccumulateGrad).
-- Expected values from PyTorch 1.13.
local dpl = require 'dpl'
local errors = require 'dpl.errors'
local A = dpl.autograd

local function d(t) return dpl.tensor(t, { dtype = 'float64' }) end
local function near(a, b, tol)
  if type(a) == 'cdata' then a = a:totable() end
  if type(b) == 'cdata' then b = b:totable() end
  assert.are.same(type(a), type(b))
  if type(a) == 'number' then
    assert.is_true(math.abs(a - b) <= (tol or 1e-9), ('%.12g vs %.12g'):format(a, b))
    return
  end
  assert.are.equal(#b, #a)
  for i = 1, #a do near(a[i], b[i], tol) end
end
-- pcall(f) must fail with an error of class cls whose text contains msg (plain)
local function fails(cls, msg, f)
  local ok, e = pcall(f)
  assert.is_false(ok, 'expected an error: ' .. msg)
  assert.is_true(errors.is(e, cls), tostring(e))
  assert.truthy(tostring(e):find(msg, 1, true), tostring(e))
  return e
end

describe('leaf hooks and accumulation', function()
  it('a leaf used several times: its hook runs once, on the summed gradient', function()
    local x = d({ 1, 2 }):requires_grad_()
    local calls = {}
    x:register_hook(function(g) calls[#calls + 1] = g:totable() return g:clamp(-1, 1) end)
    ;((x * 3):sum() + (x * 4):sum()):backward()
    near(calls, { { 7, 7 } }) -- torch: one call with [7, 7]
    near(x.grad, { 1, 1 })
  end)

  it('several hooks chain (nil keeps the gradient); .grad is added after them', function()
    local x = d({ 1, 2 }):requires_grad_()
    x.grad = d({ 1, 1 })
    local seen
    x:register_hook(function(g) seen = g:totable() return g * 2 end)
    x:register_hook(function() end)
    x:register_hook(function(g) return g + 1 end)
    ;((x * 3):sum() + (x * 4):sum()):backward()
    near(seen, { 7, 7 })
    near(x.grad, { 16, 16 }) -- torch: 1 + (7 * 2 + 1)
  end)

  it('a leaf reached along paths of different depths, and in two dtypes', function()
    local x = d({ 1, 2 }):requires_grad_()
    local calls = {}
    x:register_hook(function(g) calls[#calls + 1] = g:totable() end)
    ;(((x * 2):exp() * x):sum() + x:sum()):backward()
    assert.are.equal(1, #calls)
    near(calls[1], { 23.16716829679195, 273.9907501657212 }, 1e-9)
    local f = dpl.ones(2):requires_grad_()
    ;((f:to('float64') * d({ 2, 3 })):sum() + (f * 4):sum()):backward()
    assert.are.equal('float32', f.grad.dtype)
    near(f.grad, { 6, 7 }, 1e-6)
  end)

  it('a hook on the tensor backward starts from runs too', function()
    local x = d({ 1, 2 }):requires_grad_()
    x:register_hook(function(g) return g * 3 end)
    x:backward(d({ 1, 1 }))
    near(x.grad, { 3, 3 })
  end)
end)

