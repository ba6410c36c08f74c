-- autograd_views_spec.lua: views, in-place operations and the version counter, with
-- PyTorch's semantics: views share their base's version counter; a view used after its
-- base changed in place sees the change (its history is rebuilt on the base's, as
-- PyTorch's AsStridedBackward); an in-place op on a view rewrites its base's history
-- (PyTorch's CopySlices); modifying a tensor saved for backward is an error at backward.
-- Reference numbers were computed with Debian's python3-torch 1.13 (the snippets are
-- in the comments); gradcheck covers the rest by finite differences.
local dpl = require 'dpl'
local A = dpl.autograd

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
  assert.truthy(tostring(e):find(pattern), tostring(e))
  return tostring(e)
end
local INPLACE = 'modified by an inplace operation'

describe('autograd: a view sees in-place changes of its base', function()
  it('narrow, then mul_ on the base, then backward through the view', function()
    -- x = torch.tensor([1.,2,3], dtype=torch.float64, requires_grad=True)
    -- y = x*2; v = y.narrow(0,0,2); y.mul_(3); v.sum().backward(); x.grad -> [6, 6, 0]
    local x = d({ 1, 2, 3 }):requires_grad_()
    local y = x * 2
    local v = y:narrow(1, 1, 2)
    y:mul_(3)
    assert.are.equal('as_strided', v.grad_fn.name)
    near(v, { 6, 12 })
    v:sum():backward()
    near(x.grad, { 6, 6, 0 })
  end)

  it('a chain of views (t, narrow, select), in-place on the base with a tensor argument', function()
    -- x = d([[1,2,3],[4,5,6]]).requires_grad_(); y = x*1
    -- v = y.t().narrow(0,1,2).select(1,0); y.mul_(y.detach()+1); (v*v).sum().backward()
    -- x.grad -> [[0, 36, 96], [0, 0, 0]]
    local x = d({ { 1, 2, 3 }, { 4, 5, 6 } }):requires_grad_()
    local y = x * 1
    local v = y:t():narrow(1, 2, 2):select(2, 1)
    y:mul_(y:detach() + 1)
    ;(v * v):sum():backward()
    near(x.grad, { 0, 36, 96, 0, 0, 0 })
  end)

  it('unsqueeze+expand and reshape views after exp_ on the base', function()
    -- x = d([1,2,3]).requires_grad_(); y = x*1; e = y.unsqueeze(0).expand(2,3); r = y.reshape(3,1)
    -- y.exp_(); ((e*d([[1,2,3],[4,5,6]])).sum() + (r*r).sum()).backward()
    local x = d({ 1, 2, 3 }):requires_grad_()
    local y = x * 1
    local e = y:unsqueeze(1):expand(2, 3)
    local r = y:reshape(3, 1)
    y:exp_()
    ;((e * d({ { 1, 2, 3 }, { 4, 5, 6 } })):sum() + (r * r):sum()):backward()
    near(x.grad, { 28.369521340157, 160.9196927588, 987.62741929416 }, 1e-12)
  end)

  it('a view made before its base got a history starts requiring grad', function()
    -- w = d([1,2,3]).requires_grad_(); buf = torch.zeros(3, dtype=torch.float64)
    -- v = buf.narrow(0,0,2); buf.add_(w*w); v.requires_grad -> True
    -- (v*d([3,5])).sum().backward(); w.grad -> [6, 20, 0]
    local w = d({ 1, 2, 3 }):requires_grad_()
    local buf = dpl.zeros(3, { dtype = 'float64' })
    local v = buf:narrow(1, 1, 2)
    assert.is_false(v.requires_grad)
    buf:add_(w * w)
    assert.is_true(v.requires_grad)
    ;(v * d({ 3, 5 })):sum():backward()
    near(w.grad, { 6, 20, 0 })
  end)

  it('gradcheck: views read after several in-place ops on the base', function()
    dpl.manual_seed(3)
    local x = dpl.randn(2, 3):double():requires_grad_()
    local w = dpl.randn(3):double():requires_grad_()
    assert.is_true(A.gradcheck(function(a, b)
      local y = a * 1
      local r = y:select(1, 1)          -- row 1
      local c = y:t():narrow(1, 2, 2)   -- columns 2..3, transposed
      y:mul_(b)
      y:sigmoid_()
      local e = y:view(6):unsqueeze(1):expand(2, 6)
      return dpl.cat({ r * 2, c:reshape(4), e:sum(1) })
    end, { x, w }))
  end)
end)

describe('autograd: in-place on a view rewrites its base', function()
  it('a chain of views, mul_ with a tensor, backward through the base and the views', function()
    -- x = d([[1,2,3],[4,5,6]]).requires_grad_(); w = d([10,20]).requires_grad_(); y = x*2
    -- v = y.t().narrow(0,1,2).select(1,1); v.mul_(w); u = y.view(6)
    -- ((y*y).sum() + (v*3).sum() + u[1]).backward()
    -- x.grad -> [[8, 18, 24], [32, 4060, 19320]]; w.grad -> [2030, 5796]
    local x = d({ { 1, 2, 3 }, { 4, 5, 6 } }):requires_grad_()
    local w = d({ 10, 20 }):requires_grad_()
    local y = x * 2
    local v = y:t():narrow(1, 2, 2):select(2, 2)
    v:mul_(w)
    assert.are.equal('copy_slices', y.grad_fn.name)
    local u = y:view(6)
    ;((y * y):sum() + (v * 3):sum() + u[2]):backward()
    near(x.grad, { 8, 18, 24, 32, 4060, 19320 })
    near(w.grad, { 2030, 5796 })
  end)

  it('in-place on a view, backward through the base', function()
    -- y = x*2; v = y.narrow(0,0,2); v.mul_(3); y.sum().backward(); x.grad -> [6, 6, 2]
    local x = d({ 1, 2, 3 }):requires_grad_()
    local y = x * 2
    local v = y:narrow(1, 1, 2)
    v:mul_(3)
    y:sum():backward()
    near(x.grad, { 6, 6, 2 })
  end)

  it('filling a buffer that needs no grad through views (t[i] = ..., narrow():copy_())', function()
    -- w = d([1,2]).requires_grad_(); buf = torch.zeros(3,2,dtype=torch.float64); buf[1] = w*2
    -- buf.narrow(0,2,1).copy_((w*w).view(1,2)); (buf*d([[1,1],[2,3],[5,7]])).sum().backward()
    -- w.grad -> [14, 34]
    local w = d({ 1, 2 }):requires_grad_()
    local buf = dpl.zeros(3, 2, { dtype = 'float64' })
    buf[2] = w * 2
    buf:narrow(1, 3, 1):copy_((w * w):view(1, 2))
    assert.is_true(buf.requires_grad)
    ;(buf * d({ { 1, 1 }, { 2, 3 }, { 5, 7 } })):sum():backward()
    near(w.grad, { 14, 34 })
  end)

  it('sibling views: the version counter is shared by the base and all its views', function()
    -- x = d([[1,2],[3,4]]).requires_grad_(); x2 = d([5,6]).requires_grad_(); y = x*1
    -- v1, v2 = y[0], y[1]; v1.mul_(2); v2.add_(x2*v1)   # x2*v1 saved v1 (version 1)
    -- (...).backward() -> RuntimeError: one of the variables needed for gradient
    -- computation has been modified by an inplace operation ... at version 2; expected version 1
    local x = d({ { 1, 2 }, { 3, 4 } }):requires_grad_()
    local x2 = d({ 5, 6 }):requires_grad_()
    local y = x * 1
    local v1, v2 = y[1], y[2]
    v1:mul_(2)
    v2:add_(x2 * v1)
    errs(function() ((y * y):sum() + v1:sum() * 10 + v2[1]):backward() end,
      INPLACE .. ': the float64 tensor of shape %[2%] saved by mul is at version %d+; expected version %d+ instead '
      .. '%(last modified by add_%)')
  end)

  it('gradcheck: in-place ops on views of an intermediate and of a fresh buffer', function()
    dpl.manual_seed(4)
    local x = dpl.randn(3, 4):double():requires_grad_()
    local w = dpl.randn(3):double():requires_grad_()
    assert.is_true(A.gradcheck(function(a, b)
      local y = a * 1
      y:t():narrow(1, 2, 2):mul_(b:view(1, 3))     -- columns 2..3 times b (broadcast)
      y:select(1, 3):tanh_()                        -- row 3
      local buf = dpl.zeros(2, 4, { dtype = 'float64' })
      buf[1] = y:select(1, 1) * y:select(1, 2)
      buf:narrow(1, 2, 1):copy_(y:narrow(1, 3, 1))
      buf:select(2, 4):mul_(b:narrow(1, 1, 2))
      return dpl.cat({ y:view(12), buf:view(8) })
    end, { x, w }))
  end)

  it('gradcheck: a long chain (permute, narrow, unsqueeze, squeeze, select, view) written in place', function()
    dpl.manual_seed(6)
    local x = dpl.randn(2, 3, 4):double():requires_grad_()
    local w = dpl.randn(2, 2):double():requires_grad_()
    assert.is_true(A.gradcheck(function(a, b)
      local y = a * 1
      local before = y:view(24)                   -- read after the writes below: sees them
      local v = y:permute(3, 1, 2):narrow(1, 2, 2):unsqueeze(1):squeeze(1):select(3, 2) -- [2, 2]
      v:mul_(b)
      v:t():add_(b * b)
      local row = y:select(2, 3):reshape(8)
      row:exp_()
      return dpl.cat({ before * 1, v:reshape(4) })
    end, { x, w }))
  end)

  it('retain_grad and hooks of a view survive the rebuild of its node', function()
    -- y = x*2; v = y.narrow(0,0,2); v.retain_grad(); y.mul_(3); v.mul_(d([5,7]))
    -- (v*v).sum().backward(); x.grad -> [1800, 7056, 0]; v.grad -> [60, 168]
    -- (torch 1.13 leaves a register_hook on the old node, where it never runs; dpl moves it)
    local x = d({ 1, 2, 3 }):requires_grad_()
    local y = x * 2
    local v = y:narrow(1, 1, 2)
    v:retain_grad()
    local seen = 0
    v:register_hook(function() seen = seen + 1 end)
    y:mul_(3)
    v:mul_(d({ 5, 7 }))
    ;(v * v):sum():backward()
    near(x.grad, { 1800, 7056, 0 })
    near(v.grad, { 60, 168 })
    assert.are.equal(1, seen)
  end)

  it('a view made under no_grad and modified under grad mode still gives correct gradients', function()
    -- (PyTorch refuses this case: "A view was created in no_grad mode and is being modified
    -- inplace with grad mode enabled"; dpl rewrites the base history as for any view)
    local x = d({ 1, 2, 3 }):requires_grad_()
    local y = x * 2
    local v = dpl.no_grad(function() return y:narrow(1, 2, 2) end)
    v:mul_(3)
    y:sum():backward()
    near(x.grad, { 2, 6, 6 })
  end)

  it('in-place on an expanded view that needs grad is an error', function()
    -- torch: "unsupported operation: more than one element of the written-to tensor refers
    -- to a single memory location. Please clone() the tensor before performing the operation."
    local y = d({ 1, 2, 3 }):requires_grad_() * 2
    local e = y:unsqueeze(1):expand(2, 3)
    errs(function() e:mul_(2) end, 'mul_: unsupported operation: more than one element of the written%-to tensor '
      .. 'refers to a single memory location')
  end)
end)

describe('autograd: in-place on leaves', function()
  it('a leaf or a view of a leaf that requires grad: PyTorch\'s errors; fine under no_grad', function()
    -- torch: "a leaf Variable that requires grad is being used in an in-place operation."
    --        "a view of a leaf Variable that requires grad is being used in an in-place operation."
    local x = d({ 1, 2, 3 }):requires_grad_()
    errs(function() x:add_(1) end, 'add_: a leaf tensor that requires grad is being used in an in%-place operation')
    errs(function() x[1]:add_(1) end, 'add_: a view of a leaf tensor that requires grad is being used in an in%-place')
    errs(function() x:narrow(1, 2, 2):zero_() end, 'zero_: a view of a leaf tensor that requires grad')
    errs(function() x:t():copy_(d({ 3, 2, 1 })) end, 'copy_: a view of a leaf tensor that requires grad')
    errs(function() x[2] = 5 end, 'fill_: a view of a leaf tensor that requires grad')
    -- a view made under no_grad is still a view of the leaf
    local v = dpl.no_grad(function() return x:narrow(1, 1, 2) end)
    errs(function() v:mul_(2) end, 'mul_: a view of a leaf tensor that requires grad')
    near(x, { 1, 2, 3 })
    dpl.no_grad(function() x:narrow(1, 1, 2):mul_(2) end)
    -- torch: with no_grad(): x.narrow(0,0,2).mul_(2); (x*x).sum().backward(); x.grad -> [4, 8, 6]
    ;(x * x):sum():backward()
    near(x.grad, { 4, 8, 6 })
  end)
end)

describe('autograd: in-place after saving', function()
  -- Each line: producer, target of the in-place op, the op, then torch 1.13's outcome of
  --   a = torch.tensor([[0.5,-1.],[2.,0.25]], dtype=torch.float64, requires_grad=True)
  --   x = a*1; y = producer(x); op(target); (y*y).sum().backward()
  -- 'ERR' (a saved tensor was modified) or 'ok' and a.grad; xview is x[0] (dpl: x[1]);
  -- the ops: mul_(2), add_(1), relu_(), copy_(ones_like), fill_(3), zero_().
  local expected = {
  'x*x x mul_ ERR',
  'x*x x add_ ERR',
  'x*x x relu_ ERR',
  'x*x x copy_ ERR',
  'x*x x fill_ ERR',
  'x*x x zero_ ERR',
  'x*x y mul_ ok 2 -16 128 0.25',
  'x*x y add_ ok 2.5 -8 40 1.0625',
  'x*x y relu_ ok 0.5 -4 32 0.0625',
  'x*x y copy_ ok 0 -0 0 0',
  'x*x y fill_ ok 0 -0 0 0',
  'x*x y zero_ ok 0 -0 0 0',
  'x*x xview mul_ ERR',
  'x*x xview add_ ERR',
  'x*x xview relu_ ERR',
  'x*x xview copy_ ERR',
  'x*x xview fill_ ERR',
  'x*x xview zero_ ERR',
  'x:exp() x mul_ ok 5.436563657 0.2706705665 109.1963001 3.297442541',
  'x:exp() x add_ ok 5.436563657 0.2706705665 109.1963001 3.297442541',
  'x:exp() x relu_ ok 5.436563657 0.2706705665 109.1963001 3.297442541',
  'x:exp() x copy_ ok 5.436563657 0.2706705665 109.1963001 3.297442541',
  'x:exp() x fill_ ok 5.436563657 0.2706705665 109.1963001 3.297442541',
  'x:exp() x zero_ ok 5.436563657 0.2706705665 109.1963001 3.297442541',
  'x:exp() y mul_ ERR',
  'x:exp() y add_ ERR',
  'x:exp() y relu_ ERR',
  'x:exp() y copy_ ERR',
  'x:exp() y fill_ ERR',
  'x:exp() y zero_ ERR',
  'x:exp() xview mul_ ok 5.436563657 0.2706705665 109.1963001 3.297442541',
  'x:exp() xview add_ ok 5.436563657 0.2706705665 109.1963001 3.297442541',
  'x:exp() xview relu_ ok 5.436563657 0.2706705665 109.1963001 3.297442541',
  'x:exp() xview copy_ ok 5.436563657 0.2706705665 109.1963001 3.297442541',
  'x:exp() xview fill_ ok 5.436563657 0.2706705665 109.1963001 3.297442541',
  'x:exp() xview zero_ ok 5.436563657 0.2706705665 109.1963001 3.297442541',
  'x:sigmoid() x mul_ ok 0.2925605071 0.1057541856 0.1849560865 0.2767415948',
  'x:sigmoid() x add_ ok 0.2925605071 0.1057541856 0.1849560865 0.2767415948',
  'x:sigmoid() x relu_ ok 0.2925605071 0.1057541856 0.1849560865 0.2767415948',
  'x:sigmoid() x copy_ ok 0.2925605071 0.1057541856 0.1849560865 0.2767415948',
  'x:sigmoid() x fill_ ok 0.2925605071 0.1057541856 0.1849560865 0.2767415948',
  'x:sigmoid() x zero_ ok 0.2925605071 0.1057541856 0.1849560865 0.2767415948',
  'x:sigmoid() y mul_ ERR',
  'x:sigmoid() y add_ ERR',
  'x:sigmoid() y relu_ ERR',
  'x:sigmoid() y copy_ ERR',
  'x:sigmoid() y fill_ ERR',
  'x:sigmoid() y zero_ ERR',
  'x:sigmoid() xview mul_ ok 0.2925605071 0.1057541856 0.1849560865 0.2767415948',
  'x:sigmoid() xview add_ ok 0.2925605071 0.1057541856 0.1849560865 0.2767415948',
  'x:sigmoid() xview relu_ ok 0.2925605071 0.1057541856 0.1849560865 0.2767415948',
  'x:sigmoid() xview copy_ ok 0.2925605071 0.1057541856 0.1849560865 0.2767415948',
  'x:sigmoid() xview fill_ ok 0.2925605071 0.1057541856 0.1849560865 0.2767415948',
  'x:sigmoid() xview zero_ ok 0.2925605071 0.1057541856 0.1849560865 0.2767415948',
  'x:relu() x mul_ ok 1 0 4 0.5',
  'x:relu() x add_ ok 1 0 4 0.5',
  'x:relu() x relu_ ok 1 0 4 0.5',
  'x:relu() x copy_ ok 1 0 4 0.5',
  'x:relu() x fill_ ok 1 0 4 0.5',
  'x:relu() x zero_ ok 1 0 4 0.5',
  'x:relu() y mul_ ERR',
  'x:relu() y add_ ERR',
  'x:relu() y relu_ ERR',
  'x:relu() y copy_ ERR',
  'x:relu() y fill_ ERR',
  'x:relu() y zero_ ERR',
  'x:relu() xview mul_ ok 1 0 4 0.5',
  'x:relu() xview add_ ok 1 0 4 0.5',
  'x:relu() xview relu_ ok 1 0 4 0.5',
  'x:relu() xview copy_ ok 1 0 4 0.5',
  'x:relu() xview fill_ ok 1 0 4 0.5',
  'x:relu() xview zero_ ok 1 0 4 0.5',
  'x:sum() x mul_ ok 3.5 3.5 3.5 3.5',
  'x:sum() x add_ ok 3.5 3.5 3.5 3.5',
  'x:sum() x relu_ ok 3.5 3.5 3.5 3.5',
  'x:sum() x copy_ ok 3.5 3.5 3.5 3.5',
  'x:sum() x fill_ ok 3.5 3.5 3.5 3.5',
  'x:sum() x zero_ ok 3.5 3.5 3.5 3.5',
  'x:sum() y mul_ ok 14 14 14 14',
  'x:sum() y add_ ok 5.5 5.5 5.5 5.5',
  'x:sum() y relu_ ok 3.5 3.5 3.5 3.5',
  'x:sum() y copy_ ok 0 0 0 0',
  'x:sum() y fill_ ok 0 0 0 0',
  'x:sum() y zero_ ok 0 0 0 0',
  'x:sum() xview mul_ ok 3.5 3.5 3.5 3.5',
  'x:sum() xview add_ ok 3.5 3.5 3.5 3.5',
  'x:sum() xview relu_ ok 3.5 3.5 3.5 3.5',
  'x:sum() xview copy_ ok 3.5 3.5 3.5 3.5',
  'x:sum() xview fill_ ok 3.5 3.5 3.5 3.5',
  'x:sum() xview zero_ ok 3.5 3.5 3.5 3.5',
  'x:t():mm(x) x mul_ ERR',
  'x:t():mm(x) x add_ ERR',
  'x:t():mm(x) x relu_ ERR',
  'x:t():mm(x) x copy_ ERR',
  'x:t():mm(x) x fill_ ERR',
  'x:t():mm(x) x zero_ ERR',
  'x:t():mm(x) y mul_ ok 34 -17 136 4.25',
  'x:t():mm(x) y add_ ok 6.5 -6.25 43 10.0625',
  'x:t():mm(x) y relu_ ok 8.5 -4.25 34 1.0625',
  'x:t():mm(x) y copy_ ok 0 0 0 0',
  'x:t():mm(x) y fill_ ok 0 0 0 0',
  'x:t():mm(x) y zero_ ok 0 0 0 0',
  'x:t():mm(x) xview mul_ ERR',
  'x:t():mm(x) xview add_ ERR',
  'x:t():mm(x) xview relu_ ERR',
  'x:t():mm(x) xview copy_ ERR',
  'x:t():mm(x) xview fill_ ERR',
  'x:t():mm(x) xview zero_ ERR'
  }
  local ops = {
    mul_ = function(t) t:mul_(2) end, add_ = function(t) t:add_(1) end, relu_ = function(t) t:relu_() end,
    copy_ = function(t) t:copy_(dpl.ones_like(t)) end, fill_ = function(t) t:fill_(3) end,
    zero_ = function(t) t:zero_() end,
  }
  local producers = {
    ['x*x'] = function(x) return x * x end, ['x:exp()'] = function(x) return x:exp() end,
    ['x:sigmoid()'] = function(x) return x:sigmoid() end, ['x:relu()'] = function(x) return x:relu() end,
    ['x:sum()'] = function(x) return x:sum() end, ['x:t():mm(x)'] = function(x) return x:t():mm(x) end,
  }
  it('matches torch on ' .. #expected .. ' cases (mul_ add_ relu_ copy_ fill_ zero_ on x, y and a view of x)',
    function()
      for _, line in ipairs(expected) do
        local pname, target, oname, outcome = line:match('^(%S+) (%S+) (%S+) (.*)$')
        local a = d({ { 0.5, -1 }, { 2, 0.25 } }):requires_grad_()
        local x = a * 1
        local y = producers[pname](x)
        local t = ({ x = x, y = y, xview = x[1] })[target]
        local ok, e = pcall(function()
          ops[oname](t)
          ;(y * y):sum():backward()
        end)
        if outcome == 'ERR' then
          assert.is_false(ok, line)
          assert.truthy(tostring(e):find(INPLACE .. ': the float64 tensor of shape %[[%d, ]*%] saved by '), line .. ': ' .. tostring(e))
          assert.truthy(tostring(e):find('last modified by ' .. oname, 1, true), line .. ': ' .. tostring(e))
        else
          assert.is_true(ok, line .. ': ' .. tostring(e))
          local want = {}
          for v in outcome:sub(4):gmatch('%S+') do want[#want + 1] = tonumber(v) end
          near(a.grad, want, 1e-9)
        end
      end
    end)

  it('a detached alias shares the version counter', function()
    local x = d({ 1, 2 }):requires_grad_()
    local u = x:exp()
    u:detach():zero_()
    errs(function() u:sum():backward() end, INPLACE)
  end)

  it('the in-place comparison ops bump the version too', function()
    local x = d({ 1, 2 }):requires_grad_()
    local y = x * 1
    local z = y * y
    y:gt_(1.5)
    errs(function() z:sum():backward() end, 'last modified by gt_')
  end)
end)

describe('autograd: no false positives on the training path', function()
  it('optimizer updates under no_grad, .grad accumulation, in-place on fresh tensors', function()
    dpl.manual_seed(5)
    local model = dpl.nn.Sequential(dpl.nn.Flatten(), dpl.nn.Linear(6, 4), dpl.nn.ReLU(), dpl.nn.Linear(4, 3))
    local opt = dpl.optim.SGD(model:parameters(), { lr = 0.1, momentum = 0.9 })
    local x = dpl.randn(5, 2, 3)
    local y = dpl.tensor({ 1, 2, 3, 1, 2 }, { dtype = 'int64' })
    local first, last
    for step = 1, 5 do
      opt:zero_grad()
      for _ = 1, 2 do -- two backwards accumulate into .grad
        local h = x:view(5, 6) -- a view of the input, not saved by anyone
        local scratch = dpl.zeros(5, 3)
        scratch:add_(1) -- fresh tensor, in place
        local out = model(h:view(5, 2, 3)) + scratch * 0
        local loss = dpl.nn.functional.cross_entropy(out, y)
        loss:backward()
        first = first or loss:item()
        last = loss:item()
      end
      opt:step()
    end
    assert.is_true(last < first)
    -- a parameter's view made in the forward and used after the optimizer step
    local w = model[2].weight
    local wt = w:t()
    local s = (wt * 2):sum()
    dpl.no_grad(function() w:add_(1) end)
    s:backward() -- mul saved only the number: nothing stale
    assert.is_not_nil(w.grad)
  end)

  it('views do not keep autograd state alive', function()
    collectgarbage()
    collectgarbage()
    local function count(t) local n = 0 for _ in pairs(t) do n = n + 1 end return n end
    local S = debug.getregistry()['dpl.autograd.state']
    local before = count(S.viewbase) + count(S.versions)
    for _ = 1, 30 do
      local x = dpl.randn(4):requires_grad_()
      local y = x * 1
      local v = y:view(2, 2)
      v[1]:mul_(2)
      ;(y:narrow(1, 1, 2) * 3):sum():backward()
    end
    collectgarbage()
    collectgarbage()
    local after = count(S.viewbase) + count(S.versions)
    assert.is_true(after <= before + 4, ('%d entries before, %d after'):format(before, after))
  end)
end)
