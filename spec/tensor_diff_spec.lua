-- tensor_diff_spec.lua: cross-cutting cases found by the randomized differential test of the
-- sort, shape, index and math groups against PyTorch 1.13 (scripts/difftest/difftest.py):
-- autograd's in-place checks on empty views and on views of a leaf that is itself a view.
-- PyTorch's behaviour inline.
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local raises = h.raises

describe('differential test findings: autograd', function()
  setup(function()
    -- autograd live (views are tracked from here on)
    local w = dpl.zeros(1, { dtype = 'float64' }):requires_grad_()
    local _ = w * 2
  end)

  it('an empty view whose other dims have stride 0 is not an expanded view: in-place ops work on it', function()
    -- zeros({2, 4, 0}) has strides {0, 0, 1}: a dim of 2 elements with stride 0, but no element
    local x = dpl.zeros({ 2, 4, 0 }, { dtype = 'float64' }):requires_grad_()
    local b = x:clone()
    local v = b:narrow(2, 3, 1)
    assert(rawequal(v:acos_(), v))
    assert(rawequal(v:mul_(2), v))
    assert(rawequal(v:index_fill_(3, dpl.tensor({}, { dtype = 'int64' }), 1), v))
    local e = (dpl.zeros({ 4, 0 }, { dtype = 'float64' }):requires_grad_() * 1):t()
    assert(rawequal(e:fill_diagonal_(1, true), e))
    assert(rawequal(e:index_put_({ dpl.tensor({}, { dtype = 'int64' }) }, 1.5, true), e))
    -- an expanded view with elements is still refused
    local y = dpl.zeros(1, { dtype = 'float64' }):requires_grad_() * 1
    raises(function() return y:expand(3):mul_(2) end, 'expanded view')
  end)

  it('backward through a view of an empty base changed in place (PyTorch: no error)', function()
    local x = dpl.zeros({ 4, 0 }, { dtype = 'float64' }):requires_grad_()
    local b = x * 1
    local v = b:t()
    b:mul_(2)
    local s = (v * 3):sum()
    s:backward()
    assert.are.same({ 4, 0 }, x.grad.shape)
  end)

  it('an in-place op on a view of a leaf that is itself a view is an error, as PyTorch', function()
    -- PyTorch: "a view of a leaf Variable that requires grad is being used in an in-place operation"
    for _, op in ipairs({ 'mul_', 'hardtanh_', 'index_fill_', 'tril_', 'exp2_' }) do
      local x = dpl.randn(12, { dtype = 'float64' }):view(3, 4):requires_grad_()
      local t = x:t()
      local f = ({
        mul_ = function() return t:mul_(2) end,
        hardtanh_ = function() return t:hardtanh_() end,
        index_fill_ = function() return t:index_fill_(1, dpl.tensor({ 1 }), 0) end,
        tril_ = function() return t:tril_() end,
        exp2_ = function() return t:exp2_() end,
      })[op]
      raises(f, 'a view of a leaf tensor that requires grad is being used in an in-place operation')
      -- the leaf itself too
      raises(function() return x:mul_(2) end, 'a leaf tensor that requires grad is being used in an in-place operation')
    end
    -- fine under no_grad, and through views of a non-leaf
    local x = dpl.randn(12, { dtype = 'float64' }):view(3, 4):requires_grad_()
    dpl.no_grad(function() x:t():mul_(2) end)
    local b = x * 1
    b:t():mul_(2)
    b:sum():backward()
    h.near(x.grad, dpl.full({ 3, 4 }, 2, { dtype = 'float64' }))
  end)

  it('an op whose result is a raw view of its own temporary keeps in-place ops on that result working', function()
    local x = dpl.randn(3, 4, { dtype = 'float64' }):requires_grad_()
    local y = x:amax(nil, true) -- (reshaped from the reduction's result)
    y:mul_(2)
    local z = x:take({ 1, 2 })
    z:add_(1)
    ;(y:sum() + z:sum()):backward()
    assert.are.same({ 3, 4 }, x.grad.shape)
  end)
end)

describe('differential test findings: var and std', function()
  it('var / std of a constant slice are exactly 0 (PyTorch: 0), so std_mean\'s gradient there is 0', function()
    local x = dpl.full({ 5, 5 }, 1.0491933168307692, { dtype = 'float64' }):requires_grad_()
    local s, m = x:std_mean()
    assert.are.equal(0, s:item()) -- (the mean's rounding left 2.27e-16)
    h.near(m:item(), 1.0491933168307692, 1e-14)
    s:backward()
    assert.are.same(dpl.zeros(5, 5, { dtype = 'float64' }):totable(), x.grad:totable())
    assert.are.same({ 0, 0 }, dpl.full({ 2, 25 }, 0.1, { dtype = 'float64' }):var(2):totable())
    local inf = dpl.full({ 3 }, math.huge, { dtype = 'float64' }):var():item()
    assert(inf ~= inf, 'var of infinities is nan, as PyTorch')
  end)
end)
