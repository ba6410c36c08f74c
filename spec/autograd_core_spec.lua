-- autograd_core_spec.lua: the tape: requires_grad, backward, accumulation, detach,
-- no_grad/enable_grad, retain_grad, in-place safety (version counter), freed graphs,
-- and that autograd state does not outlive the tensors.
local dpl = require 'dpl'
local A = dpl.autograd

local function d(t) return dpl.tensor(t, { dtype = 'float64' }) end
local near = require('spec.support.helpers').near

describe('autograd basics', function()
  it('requires_grad is a settable property; leaves and grad_fn', function()
    local x = dpl.randn(3)
    assert.is_false(x.requires_grad)
    x.requires_grad = true
    assert.is_true(x.requires_grad)
    assert.is_true(x.is_leaf)
    assert.is_nil(x.grad_fn)
    local y = x * 2
    assert.is_true(y.requires_grad)
    assert.is_false(y.is_leaf)
    assert.are.equal('mul', y.grad_fn.name)
    assert.are.equal(x, x:requires_grad_(false))
    assert.is_false(x.requires_grad)
    assert.has_error(function() dpl.zeros(2, { dtype = 'int64' }).requires_grad = true end,
      'ValueError: requires_grad: only floating point tensors can require gradients, got int64')
  end)

  it('backward of a scalar fills .grad; grads accumulate over calls', function()
    local x = d({ 1, 2, 3 }):requires_grad_()
    local y = (x * x):sum()
    y:backward()
    near(x.grad, { 2, 4, 6 })
    ;(x * 3):sum():backward()
    near(x.grad, { 5, 7, 9 })
    x.grad = nil
    assert.is_nil(x.grad)
  end)

  it('backward with a gradient argument; a non-scalar without one is an error', function()
    local x = d({ 1, 2 }):requires_grad_()
    local y = x * x
    assert.has_error(function() y:backward() end)
    local ok, e = pcall(function() y:backward() end)
    assert.truthy(tostring(e):find('grad can be implicitly created only for scalar outputs'))
    y:backward(d({ 1, 10 }))
    near(x.grad, { 2, 40 })
  end)

  it('a tensor used twice gets the sum of both paths', function()
    local x = d({ 3 }):requires_grad_()
    local y = x * x + x:exp() + x
    y:sum():backward()
    near(x.grad, { 6 + math.exp(3) + 1 })
  end)

  it('backward twice through a freed graph is a clear error; retain_graph keeps it', function()
    local x = d({ 1, 2 }):requires_grad_()
    local y = (x:exp()):sum()
    y:backward({ retain_graph = true })
    y:backward()
    near(x.grad, { 2 * math.exp(1), 2 * math.exp(2) })
    local ok, e = pcall(function() y:backward() end)
    assert.is_false(ok)
    assert.truthy(tostring(e):find('backward through the graph a second time'))
  end)

  it('backward on a tensor that does not require grad is an error', function()
    local ok, e = pcall(function() dpl.ones(1):backward() end)
    assert.is_false(ok)
    assert.truthy(tostring(e):find('does not require grad'))
  end)

  it('detach() shares storage and has no history', function()
    local x = d({ 1, 2 }):requires_grad_()
    local y = x * 2
    local z = y:detach()
    assert.is_false(z.requires_grad)
    assert.is_true(z:shares_storage(y))
  end)

  it('no_grad turns recording off and returns the results; enable_grad turns it back on', function()
    local x = d({ 1 }):requires_grad_()
    local y, extra = dpl.no_grad(function() return x * 2, 7 end)
    assert.is_false(y.requires_grad)
    assert.are.equal(7, extra)
    local z = dpl.no_grad(function() return dpl.enable_grad(function() return x * 2 end) end)
    assert.is_true(z.requires_grad)
    assert.is_true(dpl.is_grad_enabled())
    -- an error inside restores the mode
    pcall(dpl.no_grad, function() error('boom') end)
    assert.is_true(dpl.is_grad_enabled())
    local prev = dpl.set_grad_enabled(false)
    assert.is_true(prev)
    assert.is_false((x * 2).requires_grad)
    dpl.set_grad_enabled(true)
  end)

  it('retain_grad keeps the gradient of a non-leaf', function()
    local x = d({ 1, 2 }):requires_grad_()
    local y = x * 3
    y:retain_grad()
    local z = y * y
    z:sum():backward()
    near(y.grad, { 6, 12 })
    near(x.grad, { 18, 36 })
  end)

  it('register_hook sees and may replace gradients of leaves and non-leaves; remove() drops it', function()
    local x = d({ 1, 2 }):requires_grad_()
    local seen
    local h = x:register_hook(function(g) seen = g:totable() return g * 10 end)
    local y = x * 3
    y:register_hook(function(g) return g + 1 end)
    y:sum():backward()
    near(seen, { 6, 6 })
    near(x.grad, { 60, 60 })
    h:remove()
    x.grad = nil
    ;(x * 3):sum():backward()
    near(x.grad, { 3, 3 })
  end)

  it('leaves that share a gradient get separate tensors (clipping one leaves the other)', function()
    local a = d({ 1, 2 }):requires_grad_()
    local b = d({ 3, 4 }):requires_grad_()
    ;(a + b):sum():backward()
    a.grad:mul_(10)
    near(b.grad, { 1, 1 })
  end)

  it('mixed dtypes: the gradient comes back in the dtype of the leaf', function()
    local a = dpl.ones(2):requires_grad_()
    local b = d({ 2, 3 }):requires_grad_()
    ;(a * b):sum():backward()
    assert.are.equal('float32', a.grad.dtype)
    near(a.grad, { 2, 3 }, 1e-6)
  end)
end)

describe('autograd in-place and views', function()
  it('in-place on a leaf that requires grad is an error (fine under no_grad)', function()
    local x = d({ 1 }):requires_grad_()
    local ok, e = pcall(function() x:add_(1) end)
    assert.is_false(ok)
    assert.truthy(tostring(e):find('leaf tensor that requires grad'))
    dpl.no_grad(function() x:add_(1) end)
    near(x, { 2 })
  end)

  it('in-place ops on non-leaves are differentiated', function()
    local x = d({ 1, 2 }):requires_grad_()
    local y = x * 2
    y:mul_(x)      -- y = 2x^2
    y:add_(x)      -- y = 2x^2 + x
    y:exp_()
    y:sum():backward()
    near(x.grad, { math.exp(3) * 5, math.exp(10) * 9 }, 1e-6)
  end)

  it('modifying a saved tensor in place makes backward fail (version counter)', function()
    local x = d({ 1, 2 }):requires_grad_()
    local y = x * 2
    local z = y * y -- saves y
    y:add_(1)
    local ok, e = pcall(function() z:sum():backward() end)
    assert.is_false(ok)
    assert.truthy(tostring(e):find('modified by an inplace operation: the float64 tensor of shape %[2%] saved by mul '
      .. 'is at version %d+; expected version %d+ instead %(last modified by add_%)'), tostring(e))
    -- the saved output of exp, modified through a view
    local w = x:exp()
    local s = w:sum()
    local v = dpl.no_grad(function() return w:view(2) end)
    v:mul_(2)
    ok, e = pcall(function() s:backward() end)
    assert.is_false(ok) -- exp saved its output, changed through the view
    local u = x:exp()
    local uv = u:detach()
    uv:zero_()
    ok, e = pcall(function() u:sum():backward() end)
    assert.is_false(ok)
  end)

  it('views are differentiated; in-place on a view rewrites its base history', function()
    local x = d({ { 1, 2 }, { 3, 4 } }):requires_grad_()
    local y = x * 1
    local col = y:select(2, 2)
    ;(col * col):sum():backward()
    near(x.grad, { { 0, 4 }, { 0, 8 } })
    x.grad = nil
    local y2 = x * 1
    local v = y2:view(4)
    v:mul_(2)
    assert.are.equal('copy_slices', y2.grad_fn.name)
    ;(y2 * y2):sum():backward()
    near(x.grad, { { 8, 16 }, { 24, 32 } })
  end)

  it('t[i] indexing is differentiable', function()
    local x = d({ { 1, 2 }, { 3, 4 } }):requires_grad_()
    local r = x[2]
    ;(r * r):sum():backward()
    near(x.grad, { { 0, 0 }, { 6, 8 } })
  end)
end)

describe('autograd bookkeeping', function()
  it('leaves no state behind for collected tensors', function()
    collectgarbage()
    collectgarbage()
    local function count(t) local n = 0 for _ in pairs(t) do n = n + 1 end return n end
    local before = count(A._rg) + count(A._gfn) + count(A._grads)
    do
      for _ = 1, 50 do
        local x = dpl.randn(4):requires_grad_()
        local y = (x * x):sum()
        y:backward()
      end
    end
    collectgarbage()
    collectgarbage()
    local after = count(A._rg) + count(A._gfn) + count(A._grads)
    assert.is_true(after <= before + 2, ('%d entries before, %d after'):format(before, after))
  end)

  it('the no-grad path stays cheap', function()
    local a, b = dpl.randn(4, 4), dpl.randn(4, 4)
    local n = 20000
    local best = math.huge
    for _ = 1, 3 do
      local t0 = os.clock()
      for _ = 1, n do local c = a + b end
      best = math.min(best, (os.clock() - t0) / n)
    end
    -- PyTorch from Python: 1.09 us; generous bound for a loaded CI machine
    assert.is_true(best < 3e-6, ('%.3f us per 4x4 add'):format(best * 1e6))
  end)

  it('a reloaded dpl.tensor module gets the autograd wrappers again', function()
    package.loaded['dpl.tensor'] = nil
    local T = require 'dpl.tensor'
    assert.is_true(T._autograd_installed)
    local x = T.ones(2, { dtype = 'float64' }):requires_grad_()
    ;(x * x * 3):sum():backward()
    near(x.grad, { 6, 6 })
  end)

  it('autograd.grad returns gradients without touching .grad', function()
    local x = d({ 2 }):requires_grad_()
    local g = A.grad((x * x * x):sum(), { x })
    near(g[1], { 12 })
    assert.is_nil(x.grad)
  end)
end)

describe('grad_fn', function()
  it('prints as PyTorch\'s node names (<SumBackward>), not the node\'s fields', function()
    local dpl = require 'dpl'
    local x = dpl.randn(2, { requires_grad = true })
    local y = (x * 2):sum()
    assert.are.equal('<SumBackward>', tostring(y.grad_fn))
    assert.are.equal('<MulBackward>', tostring((x * 2).grad_fn))
    assert.are.equal('<LogSoftmaxBackward>', tostring(x:log_softmax(1).grad_fn))
    assert.are.equal('sum', y.grad_fn.name)
    assert.is_nil(x.grad_fn)
    y:backward()
    assert.are.same({ 2, 2 }, x.grad:totable())
  end)
end)
