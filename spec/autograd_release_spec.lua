-- autograd_release_spec.lua: backward frees the intermediate gradients it made and alone
-- holds as soon as their node ran (no collection needed), and never a gradient that user
-- code saw (hooks, retain_grad, autograd.grad captures, a custom rule's backward), one that
-- goes to several places, or one that is not its own (a saved or user tensor).
local dpl = require 'dpl'
local T, A = dpl.tensor, dpl.autograd

local N = 256 * 256 * 4 -- bytes of one [256, 256] float32 gradient

local function live() return T.memory_allocated() end
local function without_gc(fn)
  collectgarbage() collectgarbage()
  collectgarbage('stop')
  local ok, e = pcall(fn)
  collectgarbage('restart')
  if not ok then error(e, 0) end
end

describe('backward releases its intermediate gradients', function()
  it('a chain leaves only the leaf gradient behind', function()
    without_gc(function()
      local x = T.randn { 256, 256 }:requires_grad_()
      local s = ((x * 2):tanh() * 3):sum()
      local freed0 = A._release_stats.freed
      local before = live()
      s:backward()
      -- x.grad (N) is new; the gradients of the tanh and of its input (2 N) were freed
      local grew = live() - before
      assert.is_true(grew >= N and grew < N + 1024, tostring(grew))
      assert.are.equal(2, A._release_stats.freed - freed0)
      local y = (x:detach() * 2):tanh()
      assert.is_true(x.grad:allclose(y:square():neg():add(1):mul(6), 1e-5, 1e-6))
    end)
  end)

  it('gradients are unchanged: a value used twice, a pass-through to two nodes, sums', function()
    local x = T.randn({ 5, 4 }, { dtype = 'float64' }):requires_grad_()
    local p = T.randn({ 5, 4 }, { dtype = 'float64' }):requires_grad_()
    local function f(a, b)
      local d = (a - b):abs()
      local q = d:clamp(nil, 0.5)
      return (q * q * 0.5 + (d - q) + (a * b):sin():exp()):sum()
    end
    assert.is_true(A.gradcheck(f, { x, p }))
    f(x, p):backward()
    local gx, gp = x.grad:clone(), p.grad:clone()
    x.grad, p.grad = nil, nil
    for _ = 1, 3 do
      f(x, p):backward()
      assert.is_true(x.grad:equal(gx))
      assert.is_true(p.grad:equal(gp))
      x.grad, p.grad = nil, nil
    end
  end)

  it('a hook that keeps the gradient of a non-leaf keeps a valid tensor', function()
    local x = T.randn { 64, 64 }:requires_grad_()
    local h = (x * 2):tanh()
    local kept
    h:register_hook(function(g) kept = g end)
    local y = h * 3
    y:sum():backward()
    assert.are.equal(64 * 64 * 3, kept:sum():item())
  end)

  it('retain_grad and autograd.grad captures stay valid', function()
    local x = T.randn { 32, 32 }:requires_grad_()
    local h = (x * 2):tanh()
    h:retain_grad()
    local y = (h * 3):exp()
    y:sum():backward()
    local want = (h:detach() * 3):exp() * 3
    assert.is_true(h.grad:allclose(want, 1e-5, 1e-6))
    local h2 = (x * 2):tanh()
    local g = A.grad((h2 * 3):exp():sum(), { h2, x })
    assert.is_true(g[1]:allclose(want, 1e-5, 1e-6))
    assert.are.equal(32 * 32, g[2]:numel())
  end)

  it("a custom rule's backward may keep or return its own tensors", function()
    local keep_in, keep_out
    local rule = { nin = 1, name = 'keeper',
      save = function() end,
      bw = function(_, g)
        keep_in = g
        keep_out = g * 1
        return keep_out
      end }
    local x = T.randn { 16, 16 }:requires_grad_()
    local y = A.record(rule, dpl.no_grad(function() return x:clone() end), x)
    local z = (y * 2):tanh()
    z:sum():backward()
    assert.is_true(keep_out:equal(x.grad))
    local want = ((x:detach() * 2):tanh():square():neg():add(1)) * 2
    assert.is_true(keep_in:allclose(want, 1e-5, 1e-6))
  end)

  it('retain_graph: a second backward gives the same gradients', function()
    local x = T.randn { 8, 8 }:requires_grad_()
    local s = ((x * 2):tanh() * 3):exp():sum()
    s:backward { retain_graph = true }
    local g1 = x.grad:clone()
    x.grad = nil
    s:backward()
    assert.is_true(x.grad:equal(g1))
  end)

  it('the user gradient passed to backward is never freed', function()
    local x = T.randn { 8, 8 }:requires_grad_()
    local y = (x * 2):tanh()
    local go = T.ones { 8, 8 }
    y:backward(go)
    assert.are.equal(64, go:sum():item())
  end)
end)
