-- autograd_drop_grad_spec.lua: zero_grad's set_to_none releases a gradient's memory at once
-- when nothing else can reach it (autograd.drop_grad), and never when user code got it: read
-- through p.grad, stashed by a hook, assigned by the user, kept by an optimizer's own
-- update_param, or shared with a view.
local dpl = require 'dpl'
local T, nn, A = dpl.tensor, dpl.nn, dpl.autograd

-- the tensor bytes fn() gave back, with the GC stopped (only explicit releases count)
local function released_by(fn)
  collectgarbage('stop')
  local before = T.memory_allocated()
  local ok, e = pcall(fn)
  local after = T.memory_allocated()
  collectgarbage('restart')
  if not ok then error(e, 0) end
  return before - after
end

-- a linear model whose backward leaves a 64x512 float32 weight gradient (128 KiB)
local function setup()
  dpl.manual_seed(1)
  local m = nn.Linear(512, 64, { bias = false })
  local x = T.randn { 8, 512 }
  local function backward() m(x):sum():backward() end
  return m, m.weight, backward
end

local GRAD_BYTES = 64 * 512 * 4

describe('zero_grad releases an unreachable gradient at once', function()
  it('Optimizer:zero_grad frees the storage without a collection', function()
    local m, w, backward = setup()
    local opt = dpl.optim.SGD(m:parameters(), { lr = 0.1 })
    backward()
    opt:step()
    assert.are.equal(GRAD_BYTES, released_by(function() opt:zero_grad() end))
    assert.is_nil(w.grad)
  end)

  it('Module:zero_grad too, and a second backward gives the same gradient', function()
    local m, w, backward = setup()
    backward()
    local g1 = A.grad_of(w):clone()
    assert.are.equal(GRAD_BYTES, released_by(function() m:zero_grad() end))
    backward()
    assert.is_true(w.grad:equal(g1))
  end)

  it('a gradient read through p.grad stays valid', function()
    local m, w, backward = setup()
    local opt = dpl.optim.SGD(m:parameters(), { lr = 0.1 })
    backward()
    local kept = w.grad
    local copy = kept:clone()
    opt:zero_grad()
    assert.is_nil(w.grad)
    assert.is_true(kept:equal(copy))
    backward()
    assert.is_true(kept:equal(copy)) -- the next backward made a new gradient
  end)

  it('a gradient a leaf hook stashed stays valid', function()
    local m, w, backward = setup()
    local stash
    w:register_hook(function(g) stash = stash or g end)
    backward()
    local copy = stash:clone()
    m:zero_grad()
    backward()
    assert.is_true(stash:equal(copy))
  end)

  it('a gradient the user assigned stays valid', function()
    local m, w = setup()
    local g = T.ones { 64, 512 }
    w.grad = g
    m:zero_grad()
    assert.is_nil(w.grad)
    assert.are.equal(64 * 512, g:sum():item())
  end)

  it('a gradient with a live view is not freed (the view keeps its values)', function()
    local m, w, backward = setup()
    backward()
    local v = A.grad_of(w):view(-1)
    local copy = v:clone()
    m:zero_grad()
    assert.is_true(v:equal(copy))
  end)

  it("an optimizer's own update_param gets p.grad, and may keep it", function()
    local m, w, backward = setup()
    local Keep = dpl.optim.Optimizer:extend('Keep')
    function Keep:__init(params) dpl.optim.Optimizer.__init(self, params, { lr = 0 }) end
    function Keep:update_param(p, g, o, st) st.last = g end
    local opt = Keep(m:parameters())
    backward()
    opt:step()
    local last = opt.state[w].last
    local copy = last:clone()
    opt:zero_grad()
    backward()
    assert.is_true(last:equal(copy))
  end)

  it('retain_grad of a non-leaf whose gradient is also a leaf gradient stays valid', function()
    local a = T.randn { 4, 4 }:requires_grad_()
    local b = T.randn { 4, 4 }:requires_grad_()
    local y = a + b
    y:retain_grad()
    local z = y * T.full({ 4, 4 }, 2)
    z:sum():backward()
    assert.is_true(rawequal(A.grad_of(a), A.grad_of(y)) or rawequal(A.grad_of(b), A.grad_of(y))) -- (shared)
    A.drop_grad(a)
    A.drop_grad(b)
    assert.are.equal(32, y.grad:sum():item())
  end)

  it('gradients accumulate in place when nothing else can see the old one, else into a new tensor', function()
    local _, w, backward = setup()
    backward()
    local g1 = A.grad_of(w)
    local once = g1:clone()
    backward()
    assert.is_true(rawequal(g1, A.grad_of(w))) -- the same tensor, summed in place
    assert.is_true(A.grad_of(w):equal(once * 2))
    local seen = w.grad -- user code holds it now: it must keep its value
    local twice = seen:clone()
    backward()
    assert.is_false(rawequal(seen, A.grad_of(w)))
    assert.is_true(seen:equal(twice))
    assert.is_true(w.grad:equal(once * 3))
  end)

  it('grad_of does not count as exposing; drop_grad of a parameter without gradient is a no-op', function()
    local m, w, backward = setup()
    A.drop_grad(w)
    backward()
    assert.is_not_nil(A.grad_of(w))
    assert.are.equal(GRAD_BYTES, released_by(function() A.drop_grad(w) end))
  end)
end)
