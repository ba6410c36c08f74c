-- tensor_session_spec.lua: what an interactive session ran into (tester D): constructors'
-- options, numbers beyond int64, error messages that say what was wrong, table and mask
-- indexing.
local dpl = require 'dpl'

local function err_of(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, 'expected an error')
  return tostring(e)
end

describe('constructors from an interactive session', function()
  it('make float32 from integral numbers beyond int64, as PyTorch from a Python float', function()
    local t = dpl.tensor({ 1e20, 1 })
    assert.are.equal('float32', t.dtype)
    assert.is_true(math.abs(t[1]:item() - 1e20) < 1e13)
    assert.are.equal('float32', dpl.tensor(1e20).dtype)
    assert.are.equal('float32', dpl.tensor({ -1e19 }).dtype)
    assert.are.equal('float32', dpl.tensor({ 2 ^ 63 }).dtype)
    -- the int64 range itself stays int64
    assert.are.equal('int64', dpl.tensor({ -2 ^ 63, 2 ^ 62 }).dtype)
    assert.are.equal(2 ^ 62, dpl.tensor({ 2 ^ 62 })[1]:item())
  end)

  it('refuse an unknown option key instead of ignoring it', function()
    local e = err_of(dpl.zeros, 2, { dtyp = 'float64' })
    assert.matches("zeros: unknown option 'dtyp' %(did you mean 'dtype'%?%)", e)
    assert.matches("tensor: unknown option 'devce'", err_of(dpl.tensor, { 1 }, { devce = 'cpu' }))
    assert.matches("ones_like: unknown option 'dtpye'", err_of(dpl.ones_like, dpl.ones(2), { dtpye = 'float64' }))
    assert.matches("randn: unknown option 'requires_gard'", err_of(dpl.randn, 2, { requires_gard = true }))
  end)

  it('honour requires_grad = true (a leaf that records), as torch.zeros(2, requires_grad=True)', function()
    for _, t in ipairs({ dpl.zeros(2, { requires_grad = true }), dpl.ones({ 2 }, { requires_grad = true }),
      dpl.randn(2, 2, { requires_grad = true }), dpl.tensor({ 1.5, 2 }, { requires_grad = true }),
      dpl.full({ 2 }, 0.5, { requires_grad = true }), dpl.zeros_like(dpl.ones(2), { requires_grad = true }),
      dpl.arange(0, 1, 0.25, { requires_grad = true }), dpl.empty(3, { requires_grad = true }) }) do
      assert.is_true(t.requires_grad)
      assert.is_true(t.is_leaf)
    end
    local w = dpl.ones(3, { requires_grad = true })
    w:mul(2):sum():backward()
    assert.are.same({ 2, 2, 2 }, w.grad:totable())
    assert.is_false(dpl.zeros(2, { requires_grad = false }).requires_grad)
    assert.matches('only floating point tensors can require gradients',
      err_of(dpl.tensor, { 1, 2 }, { requires_grad = true }))
    assert.matches('requires_grad must be a boolean', err_of(dpl.zeros, 2, { requires_grad = 1 }))
  end)
end)

describe('error messages from an interactive session', function()
  it('name a nil operand (and the . for : slip) instead of calling it cdata', function()
    local a = dpl.ones(2, 2)
    local e = err_of(function() return a:add(nil) end)
    assert.matches('add: other must be a tensor or a number, got nil', e)
    assert.not_matches('cdata', e)
    assert.matches("write t:add%(other%)", err_of(function() return a.add(dpl.ones(2)) end))
    assert.matches('got table', err_of(function() return a:mul({}) end))
  end)
end)
