-- autograd_probe_spec.lua: cases found by probing autograd against PyTorch 1.13 (Debian's
-- python3-torch; each reference snippet is in the comments).
local dpl = require 'dpl'

local function d(t) return dpl.tensor(t, { dtype = 'float64' }) end
local function flat(t) return t:contiguous():view(-1):totable() end
local function near(a, b, tol)
  if type(a) == 'cdata' then a = flat(a) end
  assert.are.equal(#b, #a, 'sizes differ')
  for i = 1, #b do
    assert.is_true(math.abs(a[i] - b[i]) <= (tol or 1e-9) * math.max(1, math.abs(b[i])),
      ('element %d: %.12g vs %.12g'):format(i, a[i], b[i]))
  end
end
local function errs(f, pattern)
  local ok, e = pcall(f)
  assert.is_false(ok, 'expected an error')
  assert.truthy(tostring(e):find(pattern, 1, true), tostring(e))
  return tostring(e)
end
local INPLACE = 'modified by an inplace operation'

describe('autograd: an in-place op whose saved input is the tensor it writes', function()
  -- PyTorch saves the inputs before the op runs; the op then bumps their version:
  -- x = torch.tensor([1.,2], dtype=torch.float64, requires_grad=True); y = x*1; y.mul_(y)
  -- y.sum().backward() -> RuntimeError: one of the variables needed for gradient computation
  -- has been modified by an inplace operation (dplhost gave [2, 6], the gradient computed
  -- with the new y as the saved factor)
  local cases = {
    { 'mul_(self)', function(y) y:mul_(y) end },
    { 'div_(self)', function(y) y:div_(y) end },
    { 'pow_(self)', function(y) y:pow_(y) end },
    { 'mul_(a view of self)', function(y) y:mul_(y:view(2)) end },
    { 'mul_(self:detach())', function(y) y:mul_(y:detach()) end },
    { 'addcmul_(self, self)', function(y) y:addcmul_(y, y) end },
    { 'atan2_(self)', function(y) y:atan2_(y) end },
  }
  for _, c in ipairs(cases) do
    it(c[1] .. ' is an error at backward', function()
      local x = d({ 1, 2 }):requires_grad_()
      local y = x * 1
      c[2](y)
      local e = errs(function() y:sum():backward() end, INPLACE)
      assert.truthy(e:find('is at version 1; expected version 0', 1, true), e)
    end)
  end
  it('a view writing with another part of its base: an error (torch: y[0:2].mul_(y[2:4]))', function()
    local x = d({ 1, 2, 3, 4 }):requires_grad_()
    local y = x * 1
    y:narrow(1, 1, 2):mul_(y:narrow(1, 3, 2))
    errs(function() y:sum():backward() end, INPLACE)
  end)
  it('ops that save nothing of the aliased input still work', function()
    -- y.add_(y) -> x.grad [2, 2]; y.copy_(y*3) -> [3, 3]
    local x = d({ 1, 2 }):requires_grad_()
    local y = x * 1
    y:add_(y)
    y:sum():backward()
    near(x.grad, { 2, 2 })
    x = d({ 1, 2 }):requires_grad_()
    y = x * 1
    y:copy_(y * 3)
    y:sum():backward()
    near(x.grad, { 3, 3 })
  end)
  it('an input on another storage is unaffected', function()
    local x = d({ 1, 2 }):requires_grad_()
    local y = x * 1
    y:mul_(x)
    y:sum():backward()
    near(x.grad, { 2, 4 })
  end)
end)

describe('autograd: a 0-d tensor value that requires grad gets its gradient', function()
  it('masked_fill (out of place, broadcast mask) and masked_fill_', function()
    -- x = torch.tensor([[1.,2],[3,4]], dtype=torch.float64, requires_grad=True)
    -- v = torch.tensor(5., dtype=torch.float64, requires_grad=True)
    -- y = x.masked_fill(torch.tensor([True, False]), v); (y*torch.tensor([[1.,2],[3,4]])).sum().backward()
    -- x.grad -> [[0, 2], [0, 4]]; v.grad -> 4  (dplhost: v.grad nil)
    local x = d({ { 1, 2 }, { 3, 4 } }):requires_grad_()
    local v = d(5):requires_grad_()
    local y = x:masked_fill(dpl.tensor({ true, false }), v)
    near(y, { 5, 2, 5, 4 })
    ;(y * d({ { 1, 2 }, { 3, 4 } })):sum():backward()
    near(x.grad, { 0, 2, 0, 4 })
    assert.are.same({}, v.grad:size())
    near(v.grad, { 4 })
    x = d({ 1, 2, 3 }):requires_grad_()
    v = d(7):requires_grad_()
    y = x * 2
    y:masked_fill_(dpl.tensor({ true, false, true }), v)
    y:sum():backward()
    near(x.grad, { 0, 2, 0 })
    near(v.grad, { 2 })
  end)
  it('fill_, also on a view and on a tensor without history', function()
    -- y = x*1; y.fill_(v); y.sum().backward() -> x.grad [0, 0, 0], v.grad 3
    -- y = x*1 (2x2); y[0].fill_(v); (y*w).sum().backward() -> x.grad [[0,0],[3,4]], v.grad 3
    -- b = torch.zeros(3); b.fill_(v); (b*b).sum().backward() -> v.grad 12 (v = 2)
    local x = d({ 1, 2, 3 }):requires_grad_()
    local v = d(7):requires_grad_()
    local y = x * 1
    y:fill_(v)
    y:sum():backward()
    near(x.grad, { 0, 0, 0 })
    near(v.grad, { 3 })
    x = d({ { 1, 2 }, { 3, 4 } }):requires_grad_()
    v = d(5):requires_grad_()
    y = x * 1
    y[1]:fill_(v)
    ;(y * d({ { 1, 2 }, { 3, 4 } })):sum():backward()
    near(x.grad, { 0, 0, 3, 4 })
    near(v.grad, { 3 })
    local b = dpl.zeros(3, { dtype = 'float64' })
    v = d(2):requires_grad_()
    b:fill_(v)
    ;(b * b):sum():backward()
    near(v.grad, { 12 })
  end)
  it('zero_ still gives a zero gradient', function()
    local x = d({ 1, 2 }):requires_grad_()
    local y = x * 1
    y:zero_()
    y:sum():backward()
    near(x.grad, { 0, 0 })
  end)
end)

describe('autograd: detach_ and requires_grad_ between forward and backward', function()
  it('detach_ on a view is an error (it left writes through the view out of the base\'s graph)', function()
    -- x = torch.tensor([1.,2,3,4], requires_grad=True); y = x*2; y.view(2,2).detach_()
    -- -> RuntimeError: Can't detach views in-place. Use detach() instead.
    -- (dplhost detached it; v[1]:mul_(3) then changed y without touching its history:
    -- x.grad [2, 2, 2, 2] for y = [6, 12, 6, 8])
    local x = d({ 1, 2, 3, 4 }):requires_grad_()
    local y = x * 2
    local v = y:view(2, 2)
    errs(function() v:detach_() end, "detach_: can't detach views in-place; use detach() instead")
    assert.is_true(v.requires_grad)
    v[1]:mul_(3)
    y:sum():backward()
    near(x.grad, { 6, 6, 2, 2 })
  end)
  it('detach_ on a non-view drops its history', function()
    -- y = x*2; z = y*3; y.detach_(); z.sum().backward() -> x.grad [6, 6]
    local x = d({ 1, 2 }):requires_grad_()
    local y = x * 2
    local z = y * 3
    y:detach_()
    assert.is_false(y.requires_grad)
    assert.is_true(y.is_leaf)
    z:sum():backward()
    near(x.grad, { 6, 6 })
  end)
  it('optimizer zero_grad(set_to_none=false) keeps a gradient that is a view (DDP bucket views)', function()
    local p = d({ 1, 2 }):requires_grad_()
    local bucket = dpl.zeros(4, { dtype = 'float64' })
    local gv = bucket:narrow(1, 1, 2)
    p.grad = gv
    gv:fill_(5)
    local opt = dpl.optim.SGD({ p }, { lr = 0.1 })
    opt:zero_grad({ set_to_none = false })
    assert.is_true(rawequal(p.grad, gv))
    near(bucket, { 0, 0, 0, 0 })
  end)
  it('a leaf that stopped requiring grad before backward gets no .grad', function()
    -- x = torch.tensor([1.,2], requires_grad=True); y = x*2; x.requires_grad_(False)
    -- y.sum().backward(); x.grad -> None  (dplhost: [2, 2])
    local x = d({ 1, 2 }):requires_grad_()
    local w = d({ 3, 4 }):requires_grad_()
    local y = x * w
    x:requires_grad_(false)
    y:sum():backward()
    assert.is_nil(x.grad)
    near(w.grad, { 1, 2 })
  end)
end)

describe('autograd: zero_ is one in-place op', function()
  it('bumps the version counter once (torch: "is at version 1; expected version 0")', function()
    local x = d({ 1, 2 }):requires_grad_()
    local e = x:exp()
    e:detach():zero_()
    local msg = errs(function() e:sum():backward() end, INPLACE)
    assert.truthy(msg:find('is at version 1; expected version 0 instead (last modified by zero_)', 1, true), msg)
  end)
end)

describe('autograd.grad with several outputs, inference_mode', function()
  it("sums the outputs' vector-Jacobian products (torch's grad_outputs list); inference_mode records nothing", function()
    local x = dpl.tensor({ 1, 2, 3 }, { dtype = 'float64', requires_grad = true })
    local g = dpl.autograd.grad({ x * x, (x * 3):sum() }, { x }, { d({ 1, 1, 0.5 }), nil })
    assert.are.same({ 5, 7, 6 }, flat(g[1])) -- torch: [5., 7., 6.]
    assert.are.same({ 3, 5, 7 }, flat(dpl.autograd.grad({ (x * x):sum(), x:sum() }, x)[1]))
    assert.is_false(pcall(dpl.autograd.grad, { x * x }, { x })) -- a non-scalar output needs its gradient
    assert.is_false(pcall(dpl.autograd.grad, { x * x }, { x }, d({ 1, 1, 1 }))) -- a list, not a tensor
    assert.is_false(dpl.inference_mode(function() return (x * 2).requires_grad end))
    assert.is_true((x * 2).requires_grad)
  end)
end)
