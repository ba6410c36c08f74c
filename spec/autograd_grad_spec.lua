-- autograd_grad_spec.lua: autograd.grad (no .grad side effects, non-leaf inputs, only the
-- needed part of the graph), leaf hooks on the summed gradient (AccumulateGrad), checks of
-- gradients from hooks and custom rules (shape, dtype), M.record under no_grad, and the
-- options and arguments of backward / autograd.grad. Expected values from PyTorch 1.13.
local dpl = require 'dpl'
local errors = require 'dpl.errors'
local A = dpl.autograd

local function d(t) return dpl.tensor(t, { dtype = 'float64' }) end
local near = require('spec.support.helpers').near
-- pcall(f) must fail with an error of class cls whose text contains msg (plain)
local function fails(cls, msg, f)
  local ok, e = pcall(f)
  assert.is_false(ok, 'expected an error: ' .. msg)
  assert.is_true(errors.is(e, cls), tostring(e))
  assert.truthy(tostring(e):find(msg, 1, true), tostring(e))
  return e
end

describe('autograd.grad', function()
  it('touches no .grad: not the inputs, not the other leaves of the graph', function()
    local a = d({ 1, 2 }):requires_grad_()
    local w = d({ 3, 4 }):requires_grad_()
    a.grad = d({ 10, 10 })
    local g = A.grad((a * w):sum(), { a })
    near(g[1], { 3, 4 }) -- torch: (tensor([3., 4.]),)
    assert.is_nil(w.grad) -- torch: None
    near(a.grad, { 10, 10 })
    -- gradient penalty: the gradient with respect to a model's input leaves its parameters alone
    local lin = dpl.nn.Linear(2, 1, { dtype = 'float64' })
    local x = dpl.randn(4, 2, { dtype = 'float64' }):requires_grad_()
    local gx = A.grad(lin(x):sum(), { x })
    assert.is_nil(lin.weight.grad)
    assert.is_nil(lin.bias.grad)
    local wt = lin.weight:detach():totable()[1]
    near(gx[1], { wt, wt, wt, wt })
  end)

  it('runs only the part of the graph that leads to the inputs', function()
    local a = d({ 1, 2 }):requires_grad_()
    local b = d({ 1, 2 }):requires_grad_()
    local z = b * 5
    local seen = 0
    z:register_hook(function() seen = seen + 1 end)
    local g = A.grad((a * z):sum(), { a })
    near(g[1], { 5, 10 })
    assert.are.equal(0, seen) -- torch: the hook of z does not run
    assert.is_nil(b.grad)
    -- a non-leaf that retains its gradient and lies on the way gets it, as in PyTorch
    local y = a * 2
    y:retain_grad()
    near(A.grad((y * y):sum(), { a })[1], { 8, 16 })
    near(y.grad, { 4, 8 })
  end)

  it('gradients with respect to non-leaf tensors', function()
    local a = d({ 1, 2 }):requires_grad_()
    local b = a * 3
    near(A.grad((b * b):sum(), { b })[1], { 6, 12 }) -- torch: 2b
    b = a * 3
    local r = A.grad((b * b):sum(), { b, a })
    near(r[1], { 6, 12 })
    near(r[2], { 18, 36 })
    -- a tensor listed twice gets its gradient twice
    b = a * 3
    r = A.grad((b * b):sum(), { b, a, b })
    near(r[1], { 6, 12 })
    near(r[2], { 18, 36 })
    near(r[3], { 6, 12 })
    r = A.grad((a * a):sum(), { a, a })
    near(r[1], { 2, 4 })
    near(r[2], { 2, 4 })
    -- the output itself
    local y = a * 2
    near(A.grad(y, { y }, d({ 3, 3 }))[1], { 3, 3 })
    near(A.grad(a, { a }, d({ 1, 1 }))[1], { 1, 1 })
  end)

  it('hooks: an input\'s own hooks do not run (PyTorch 1.13); hooks on the way do', function()
    local x = d({ 1, 2 }):requires_grad_()
    local seen = {}
    x:register_hook(function(g) seen[#seen + 1] = g:totable() return g * 10 end)
    near(A.grad((x * 3):sum() + (x * 4):sum(), { x })[1], { 7, 7 })
    assert.are.same({}, seen)
    x = d({ 1, 2 }):requires_grad_()
    local y = x * 2
    y:register_hook(function(g) seen[#seen + 1] = g:totable() return g * 10 end)
    near(A.grad((y * 3):sum(), { y })[1], { 3, 3 })
    assert.are.same({}, seen)
    near(A.grad((y * 3):sum(), { x })[1], { 60, 60 })
    near(seen, { { 3, 3 } })
  end)

  it('an unused input is an error unless allow_unused (nil then); inputs must require grad', function()
    local a = d({ 1, 2 }):requires_grad_()
    local c = d({ 5, 6 }):requires_grad_()
    fails(errors.RuntimeError, 'grad: inputs[2] appears not to have been used in the graph',
      function() A.grad((a * 2):sum(), { a, c }) end)
    local r = A.grad((a * 2):sum(), { a, c }, { allow_unused = true })
    near(r[1], { 2, 2 })
    assert.is_nil(r[2])
    fails(errors.RuntimeError, 'grad: inputs[2] does not require grad',
      function() A.grad((a * 2):sum(), { a, d({ 1, 1 }) }) end)
    fails(errors.RuntimeError, 'grad: the tensor does not require grad',
      function() A.grad(d({ 1, 1 }):sum(), { a }) end)
    fails(errors.RuntimeError, 'grad can be implicitly created only for scalar outputs',
      function() A.grad(a * 2, { a }) end)
  end)

  it('a single tensor as inputs gives a one-element list; the graph is freed unless retained', function()
    local a = d({ 1, 2 }):requires_grad_()
    local r = A.grad((a * 2):sum(), a)
    assert.are.equal(1, #r)
    near(r[1], { 2, 2 })
    local y = (a * a):sum()
    near(A.grad(y, { a }, { retain_graph = true })[1], { 2, 4 })
    near(A.grad(y, { a })[1], { 2, 4 })
    fails(errors.RuntimeError, 'backward through the graph a second time', function() A.grad(y, { a }) end)
  end)

  it('gradcheck leaves .grad alone', function()
    local a = d({ 1, 2 }):requires_grad_()
    local w = d({ 3, 4 }):requires_grad_()
    a.grad = d({ 7, 7 })
    assert.is_true(A.gradcheck(function(x) return x * w end, { a }))
    near(a.grad, { 7, 7 })
    assert.is_nil(w.grad)
  end)
end)

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

describe('gradient checks', function()
  it('a hook may not change the shape or the dtype of the gradient', function()
    local x = dpl.ones(2, { dtype = 'float64' }):requires_grad_()
    x:register_hook(function() return dpl.ones(5, { dtype = 'float64' }) end)
    fails(errors.RuntimeError, 'has changed the size of value (was [2], got [5])', function() (x * 2):sum():backward() end)
    assert.is_nil(x.grad)
    x = dpl.ones(2, { dtype = 'float64' }):requires_grad_()
    x:register_hook(function() return dpl.ones(1, { dtype = 'float64' }) * 5 end)
    fails(errors.RuntimeError, 'has changed the size of value (was [2], got [1])', function() (x * 2):sum():backward() end)
    x = dpl.ones(2, { dtype = 'float64' }):requires_grad_()
    local y = x * 2
    y:register_hook(function() return dpl.ones(5, { dtype = 'float64' }) end)
    fails(errors.RuntimeError, 'has changed the size of value', function() y:sum():backward() end)
    x = dpl.ones(2, { dtype = 'float64' }):requires_grad_()
    x:register_hook(function(g) return g:to('float32') end)
    fails(errors.RuntimeError, 'has changed the type of value (was float64, got float32)',
      function() (x * 2):sum():backward() end)
    y = dpl.ones(2, { dtype = 'float64' }):requires_grad_() * 2
    y:register_hook(function(g) return g:to('float32') end)
    fails(errors.RuntimeError, 'has changed the type of value', function() y:sum():backward() end)
    x = dpl.ones(2, { dtype = 'float64' }):requires_grad_()
    x:register_hook(function() return 5 end)
    fails(errors.TypeError, 'returned a number; expected a tensor or nil', function() (x * 2):sum():backward() end)
  end)

  it('a failed backward leaves nothing behind in a retained graph', function()
    local x = d({ 1, 2 }):requires_grad_()
    local a = x * 2
    local b, c = a * 3, a * 4
    local h = b:register_hook(function() error('boom') end)
    local y = (b + c):sum()
    assert.has_error(function() y:backward({ retain_graph = true }) end)
    h:remove()
    x.grad = nil
    y:backward()
    near(x.grad, { 14, 14 })
  end)

  it('an assigned .grad must have the tensor\'s dtype (and shape)', function()
    local x = d({ 1, 2 }):requires_grad_()
    fails(errors.RuntimeError, 'grad: assigned grad has data of a different type (float32; the tensor is float64)',
      function() x.grad = dpl.ones(2) end)
    fails(errors.RuntimeError, 'grad: assigned grad has shape [3], the tensor has shape [2]',
      function() x.grad = d({ 1, 2, 3 }) end)
    x.grad = d({ 5, 6 })
    near(x.grad, { 5, 6 })
  end)

  local function custom(grad_of)
    local rule = { nin = 1, name = 'custom', save = function() end, bw = function(n, g) return grad_of(g) end }
    return function(a) return A.record(rule, dpl.no_grad(function() return a * 1 end), a) end
  end

  it('a custom rule\'s gradient must have its input\'s shape, or one that sums down to it', function()
    local bad = custom(function() return dpl.ones(5, { dtype = 'float64' }) end)
    local a = dpl.ones(2, { dtype = 'float64' }):requires_grad_()
    fails(errors.RuntimeError, 'function custom returned an invalid gradient for input 1 - got [5] but expected shape '
      .. 'compatible with [2]', function() bad(a):sum():backward() end)
    fails(errors.RuntimeError, 'got [5] but expected shape compatible with [2]', function() bad(a * 1):sum():backward() end)
    local col = custom(function() return dpl.ones(2, 1, { dtype = 'float64' }) end)
    fails(errors.RuntimeError, 'got [2, 1] but expected shape compatible with [2]', function() col(a):sum():backward() end)
    fails(errors.RuntimeError, 'got [2, 1]', function() col(a * 1):sum():backward() end)
    local one = custom(function() return dpl.ones(1, { dtype = 'float64' }) end)
    fails(errors.RuntimeError, 'got [1] but expected shape compatible with [2]', function() one(a):sum():backward() end)
    assert.is_nil(a.grad)
    -- a broadcast gradient is summed down (torch: [3, 3])
    local wide = custom(function() return dpl.ones(3, 2, { dtype = 'float64' }) end)
    wide(a):sum():backward()
    near(a.grad, { 3, 3 })
    a.grad = nil
    wide(a * 1):sum():backward()
    near(a.grad, { 3, 3 })
    -- another dtype is converted to the input's
    a.grad = nil
    custom(function(g) return g:to('float32') end)(a):sum():backward()
    assert.are.equal('float64', a.grad.dtype)
    near(a.grad, { 1, 1 })
    local nt = custom(function() return 1 end)
    fails(errors.TypeError, 'function custom returned a number for input 1', function() nt(a):sum():backward() end)
  end)

  it('record: nothing is recorded under no_grad or when no input requires grad', function()
    local rule = { nin = 1, bw = function(n, g) return g end }
    local a = d({ 1, 2 }):requires_grad_()
    local y = dpl.no_grad(function() return A.record(rule, a * 2, a) end)
    assert.is_false(y.requires_grad) -- torch: False
    assert.is_nil(y.grad_fn)
    local c = d({ 1, 2 })
    assert.is_false(A.record(rule, c * 2, c).requires_grad)
    assert.is_true(A.record(rule, dpl.no_grad(function() return a * 2 end), a).requires_grad)
    fails(errors.ValueError, 'record: rule must be a table with a bw function', function() A.record({}, c, a) end)
    fails(errors.ValueError, 'record: rule.nin must be a positive integer', function() A.record({ nin = 0, bw = print }, c, a) end)
  end)
end)

describe('backward and autograd.grad arguments', function()
  it('unknown options are errors; create_graph is not implemented', function()
    local a = d({ 0.5, 1.5 }):requires_grad_()
    fails(errors.ValueError, "backward: unknown option 'bogus'", function() (a * a):sum():backward(nil, { bogus = 1 }) end)
    fails(errors.ValueError, "backward: unknown option 'retain_grap' (did you mean 'retain_graph'?)",
      function() (a * a):sum():backward({ retain_grap = true }) end)
    fails(errors.ValueError, "grad: unknown option 'bogus'", function() A.grad((a * a):sum(), { a }, { bogus = 1 }) end)
    fails(errors.NotImplementedError, 'backward: create_graph=true', function()
      (a * a):sum():backward({ create_graph = true })
    end)
    fails(errors.NotImplementedError, 'grad: create_graph=true', function()
      A.grad((a * a):sum(), { a }, { create_graph = true })
    end)
    assert.is_nil(a.grad)
    ;(a * a):sum():backward({ create_graph = false, retain_graph = false })
    near(a.grad, { 1, 3 })
    near(A.grad((a * a):sum(), { a }, d(2), { retain_graph = true, allow_unused = false })[1], { 2, 6 })
  end)

  it('bad arguments are clear errors', function()
    local p = dpl.zeros(2):requires_grad_()
    fails(errors.ValueError, 'backward: options must be a table, got number', function() (p * 2):sum():backward(nil, 5) end)
    fails(errors.ValueError, 'backward: gradient must be a tensor, got string', function() (p * 2):sum():backward('x') end)
    fails(errors.ValueError, 'grad: inputs must be a tensor or a list of tensors, got number',
      function() A.grad((p * 2):sum(), 3) end)
    fails(errors.ValueError, 'grad: inputs[1] must be a tensor, got string', function() A.grad((p * 2):sum(), { 'x' }) end)
    fails(errors.ValueError, 'grad: inputs must be a non-empty list', function() A.grad((p * 2):sum(), {}) end)
    -- (a list of outputs is torch's several-outputs form: its entries must be tensors)
    fails(errors.ValueError, 'grad: outputs[1] must be a tensor, got string', function() A.grad({ 'x' }, { p }) end)
    fails(errors.ValueError, 'grad: expected a tensor output, got string', function() A.grad('x', { p }) end)
  end)
end)
