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

describe('t[{...}], t[mask] and t[idx]', function()
  local t
  before_each(function() t = dpl.arange(12):view(3, 4) end)

  it('read Torch7-style tables as views: numbers select, {} all, {s, e} and {s} narrow', function()
    assert.are.equal(6, t[{ 2, 3 }]:item())
    assert.are.same({}, t[{ 2, 3 }].shape)
    assert.are.same({ 1, 5, 9 }, t[{ {}, 2 }]:totable())
    assert.are.same({ { 4 }, { 8 } }, t[{ { 2, 3 }, { 1 } }]:totable())
    assert.are.same({ 8, 9, 10, 11 }, t[{ -1 }]:totable())
    assert.are.same({ { 5, 6 }, { 9, 10 } }, t[{ { -2, -1 }, { 2, 3 } }]:totable())
    assert.is_true(t[{ {}, 2 }]:is_set_to(t)) -- a view
    local v = t[{ {}, 2 }]
    v:fill_(-1)
    assert.are.same({ -1, -1, -1 }, t:select(2, 2):totable())
  end)

  it('read masks (t:shape or leading dims) and int index tensors as copies, like PyTorch', function()
    assert.are.same({ 6, 7, 8, 9, 10, 11 }, t[t:gt(5)]:totable())
    assert.are.same({ { 0, 1, 2, 3 }, { 8, 9, 10, 11 } }, t[dpl.tensor({ true, false, true })]:totable())
    assert.are.same({ { 8, 9, 10, 11 }, { 0, 1, 2, 3 } }, t[dpl.tensor({ 3, 1 })]:totable())
    assert.are.same({ 2, 1, 4 }, t[dpl.tensor({ { 3 }, { 1 } })].shape)
  end)

  it('write through the same forms', function()
    local u = t:clone()
    u[{ {}, 2 }] = 0
    assert.are.same({ 0, 0, 0 }, u:select(2, 2):totable())
    u[u:gt(8)] = -1
    assert.are.same({ 8, 0, -1, -1 }, u[3]:totable())
    u[dpl.tensor({ 1 })] = dpl.tensor({ { 7, 7, 7, 7 } })
    assert.are.same({ 7, 7, 7, 7 }, u[1]:totable())
    u[{ 2, { 2, 3 } }] = dpl.tensor({ 5, 6 })
    assert.are.same({ 4, 5, 6, 7 }, u[2]:totable())
  end)

  it('record gradients', function()
    local x = dpl.randn(3, 4):requires_grad_()
    x[{ {}, { 2, 3 } }]:sum():backward()
    assert.are.same({ 0, 1, 1, 0 }, x.grad[1]:totable())
    x.grad = nil
    x[x:gt(0)]:sum():backward()
    assert.is_true(x.grad:eq(x:gt(0):float()):all():item())
  end)

  it('refuse what they cannot take, saying what the forms are (never a silent nil)', function()
    assert.matches('index: 5 is out of range for dim 2 of size 4', err_of(function() return t[{ {}, 5 }] end))
    assert.matches('3 entries for a 2%-d tensor', err_of(function() return t[{ 1, 2, 3 }] end))
    assert.matches('the key has a field x', err_of(function() return t[{ x = 1 }] end))
    assert.matches('must be int64, int32 %(positions%) or bool, uint8 %(a mask%), got float32',
      err_of(function() return t[dpl.tensor({ 1.5 })] end))
    assert.matches('the shape of the mask %[2%] does not match', err_of(function() return t[dpl.tensor({ true, false })] end))
    assert.matches('a 0%-d tensor cannot be indexed', err_of(function() return dpl.tensor(1)[{ 1 }] end))
  end)
end)

describe('t.op() written for t:op()', function()
  it('says so, for ops checked in Lua and in C', function()
    local t = dpl.ones(2)
    assert.matches("exp: input must be a tensor, got nil %(a method called with '%.' instead of ':'%? write t:exp%(%.%.%.%)%)",
      err_of(function() return t.exp() end))
    assert.matches("sum: self is NULL/nil .*write t:sum%(%.%.%.%)", err_of(function() return t.sum() end))
  end)
end)

describe('sign', function()
  it('gives 0 for NaN and +0 for -0, as torch.sign (it returned the NaN and -0)', function()
    for _, dt in ipairs({ 'float32', 'float64', 'float16', 'bfloat16' }) do
      local s = dpl.tensor({ 0 / 0, -0.0, 2, -3 }, { dtype = dt }):sign()
      assert.are.same({ 0, 0, 1, -1 }, s:totable(), dt)
      assert.are.equal(math.huge, 1 / s[2]:item(), dt)
    end
  end)
end)
