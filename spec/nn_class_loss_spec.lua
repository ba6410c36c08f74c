-- nn_class_loss_spec.lua: cross_entropy and nll_loss on PyTorch's shapes beyond [N, C]:
-- [N, C, d1, d2, ...] inputs with [N, d1, d2, ...] targets, [C] inputs with a 0-d target,
-- class-probability targets of the input's shape; weight, ignore_index, label_smoothing
-- and the three reductions. Values and input gradients against
-- spec/fixtures/class_loss_ref.lua (from gen_class_loss_ref.py, python3-torch 1.13), and
-- gradcheck; shape mistakes name both shapes.
local dpl = require 'dpl'
local F = dpl.nn.functional
local A = dpl.autograd
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/class_loss_ref.lua')

local function numel(shape) local n = 1 for i = 1, #shape do n = n * shape[i] end return n end
local function X(shape) -- x[i] = 2 sin(0.7 i + 0.3) over the flat (0-based) index, as the generator
  local v = {}
  for i = 0, numel(shape) - 1 do v[i + 1] = math.sin(0.7 * i + 0.3) * 2 end
  return dpl.tensor(v, { dtype = 'float64' }):view(shape)
end
local function P(shape) -- softmax over dim 2 of cos(1.3 i)
  local v = {}
  for i = 0, numel(shape) - 1 do v[i + 1] = math.cos(1.3 * i) end
  return dpl.tensor(v, { dtype = 'float64' }):view(shape):softmax(2)
end
local function flat(t) return t:contiguous():view(-1):totable() end
local function near(got, want, what)
  assert.are.equal(#want, #got, what .. ': sizes differ')
  for i = 1, #want do
    assert.is_true(math.abs(got[i] - want[i]) <= 1e-10 * math.max(1, math.abs(want[i])),
      ('%s, element %d: %.15g vs %.15g'):format(what, i, got[i], want[i]))
  end
end

local function run_case(c, x)
  local opts = {}
  for k, v in pairs(c.opts) do opts[k] = v end
  if opts.weight then opts.weight = dpl.tensor(ref.W, { dtype = 'float64' }) end
  local target
  if c.probs then target = P(c.shape)
  elseif type(c.target) == 'number' then target = dpl.tensor(c.target, { dtype = 'int64' })
  else target = dpl.tensor(c.target, { dtype = 'int64' }) end
  if c.loss == 'nll_loss' then
    return F.nll_loss(x:log_softmax(x:dim() > 1 and 2 or 1), target, opts)
  end
  return F.cross_entropy(x, target, opts)
end

describe('cross_entropy and nll_loss on [N, C, d1, ...] and [C] inputs match PyTorch', function()
  for _, c in ipairs(ref.cases) do
    it(c.name .. ' (' .. c.loss .. ')', function()
      local x = X(c.shape):requires_grad_()
      local out = run_case(c, x)
      assert.are.same(c.out_shape, out:size())
      near(flat(out), c.out, c.name .. ' output')
      local coef = dpl.arange(1, out:numel() + 1, { dtype = 'float64' }):view(out:size())
      ;(out * coef):sum():backward()
      near(flat(x.grad), c.grad, c.name .. ' gradient')
    end)
  end

  it('gradcheck through the moved class dim, weight, ignore_index and label smoothing', function()
    local W = dpl.tensor(ref.W, { dtype = 'float64' })
    local t = dpl.tensor({ { { 1, 3 }, { 2, 1 } }, { { 3, 3 }, { 2, 2 } } }, { dtype = 'int64' })
    assert.is_true(A.gradcheck(function(x)
      return F.cross_entropy(x, t, { weight = W, ignore_index = 3, label_smoothing = 0.2, reduction = 'none' })
    end, { X({ 2, 3, 2, 2 }):requires_grad_() }))
    assert.is_true(A.gradcheck(function(x)
      return F.nll_loss(x, t:select(3, 1), { weight = W })
    end, { X({ 2, 3, 2 }):requires_grad_() }))
    assert.is_true(A.gradcheck(function(x) return F.cross_entropy(x, P({ 2, 3, 4 })) end,
      { X({ 2, 3, 4 }):requires_grad_() }))
  end)

  it('float32 [N, C, H, W] logits: the same loss as the [N*H*W, C] rows', function()
    dpl.manual_seed(1)
    local x = dpl.randn(3, 5, 4, 2)
    local t = dpl.randint(1, 6, { 3, 4, 2 }, { dtype = 'int64' })
    local rows = x:permute(1, 3, 4, 2):reshape(-1, 5)
    assert.is_true(math.abs(F.cross_entropy(x, t):item() - F.cross_entropy(rows, t:reshape(-1)):item()) < 1e-6)
  end)

  it('float32 logits (the vectorised-exp rows) match the float64 computation: loss and gradient, '
    .. 'wide rows, extreme and -inf logits, NaN rows, ignored samples', function()
    dpl.manual_seed(7)
    for _, C in ipairs({ 3, 10, 1000, 1500 }) do -- 1500: past the kernel's stack scratch row
      local x = dpl.randn(9, C) * 4
      x[2][1] = 85; x[3][C] = -85; x[4][2] = -math.huge; x[5]:fill_(-1e30)
      local t = dpl.randint(1, C + 1, { 9 }, { dtype = 'int64' })
      t[6] = -100 -- ignored
      for _, red in ipairs({ 'none', 'mean', 'sum' }) do
        for _, loss in ipairs({ 'cross_entropy', 'nll_loss' }) do
          local what = ('%s C=%d %s'):format(loss, C, red)
          local x32 = x:clone():requires_grad_()
          local x64 = x:double():requires_grad_()
          local l32 = F[loss](x32, t, { reduction = red })
          local l64 = F[loss](x64, t, { reduction = red })
          assert.are.equal('float32', l32.dtype, what)
          local a, b = flat(l32:double()), flat(l64)
          for i = 1, #b do
            assert.is_true(math.abs(a[i] - b[i]) <= 2e-5 * math.max(1, math.abs(b[i])),
              ('%s, loss %d: %.9g vs %.9g'):format(what, i, a[i], b[i]))
          end
          (red == 'none' and l32:sum() or l32):backward()
          ;(red == 'none' and l64:sum() or l64):backward()
          assert.are.equal('float32', x32.grad.dtype, what)
          local g, h = flat(x32.grad:double()), flat(x64.grad)
          for i = 1, #h do
            assert.is_true(math.abs(g[i] - h[i]) <= 1e-6 + 2e-5 * math.abs(h[i]),
              ('%s, grad %d: %.9g vs %.9g'):format(what, i, g[i], h[i]))
          end
          for k = 1, C, math.max(1, math.floor(C / 7)) do assert.are.equal(0, x32.grad[6][k]:item(), what .. ': ignored row') end
        end
      end
      -- a NaN logit makes that sample's loss and gradient row NaN, and no other
      local xn = x:clone(); xn[7][math.floor(C / 2) + 1] = 0 / 0
      local ln = F.cross_entropy(xn, t, { reduction = 'none' })
      local v = ln[7]:item()
      assert.is_true(v ~= v, 'NaN row, C=' .. C)
      assert.is_true(ln[8]:item() == ln[8]:item(), 'the next row, C=' .. C)
    end
  end)

  it('float32: a certain prediction has a gradient of exactly 0 (computed in float, as PyTorch)', function()
    local x = dpl.tensor({ { 0, 200, 0 }, { 0, 200, 0 }, { 0, 200, 0 } }, { dtype = "float32" }):requires_grad_()
    F.cross_entropy(x, dpl.tensor({ 2, 2, 2 }, { dtype = 'int64' })):backward()
    assert.are.same({ 0, 0, 0 }, x.grad[1]:totable())
  end)

  it('nn.CrossEntropyLoss and nn.NLLLoss pass weight, ignore_index and label_smoothing through', function()
    local W = dpl.tensor(ref.W, { dtype = 'float64' })
    local t = dpl.tensor({ { { 1, 3 }, { 2, 1 } }, { { 3, 3 }, { 2, 2 } } }, { dtype = 'int64' })
    local x = X({ 2, 3, 2, 2 })
    local opts = { weight = W, ignore_index = 3, label_smoothing = 0.2 }
    assert.are.equal(F.cross_entropy(x, t, opts):item(), dpl.nn.CrossEntropyLoss(opts)(x, t):item())
    for _, c in ipairs(ref.cases) do
      if c.name == '4d_all' then assert.is_true(math.abs(dpl.nn.CrossEntropyLoss(opts)(x, t):item() - c.out[1]) < 1e-12) end
    end
    local lp = x:log_softmax(2)
    assert.are.equal(F.nll_loss(lp, t, { weight = W }):item(), dpl.nn.NLLLoss({ weight = W })(lp, t):item())
  end)

  it("every target ignored: 'mean' is NaN (0/0) with or without label_smoothing and weight, 'sum' 0, "
    .. 'the gradient 0 (PyTorch)', function()
    local W = dpl.tensor(ref.W, { dtype = 'float64' })
    local t = dpl.tensor({ 2, 2, 2, 2 }, { dtype = 'int64' })
    for _, o in ipairs({ {}, { label_smoothing = 0.1 }, { weight = W }, { weight = W, label_smoothing = 0.1 } }) do
      for _, loss in ipairs({ 'cross_entropy', 'nll_loss' }) do
        if loss == 'cross_entropy' or not o.label_smoothing then
          local what = loss .. (o.label_smoothing and ' label_smoothing' or '') .. (o.weight and ' weight' or '')
          local x = X({ 4, 3 }):requires_grad_()
          local m = F[loss](x, t, { ignore_index = 2, label_smoothing = o.label_smoothing, weight = o.weight })
          local v = m:item()
          assert.is_true(v ~= v, what .. ': mean ' .. v)
          m:backward()
          assert.are.same({ 0, 0, 0 }, x.grad[1]:totable(), what)
          assert.are.equal(0, F[loss](x, t, { ignore_index = 2, label_smoothing = o.label_smoothing, weight = o.weight,
            reduction = 'sum' }):item(), what)
        end
      end
    end
  end)
end)

describe('class losses: shape mistakes name both shapes', function()
  local function errs(f, pattern)
    local ok, e = pcall(f)
    assert.is_false(ok)
    assert.truthy(tostring(e):find(pattern, 1, true), tostring(e))
  end
  local i64 = function(t) return dpl.tensor(t, { dtype = 'int64' }) end
  it('target of the wrong shape', function()
    errs(function() F.cross_entropy(dpl.randn(2, 3, 4), i64({ 1, 2 })) end,
      'ValueError: cross_entropy: input of shape [2, 3, 4] needs a target of shape [2, 4] (class indices, 1-based), got [2]')
    errs(function() F.cross_entropy(dpl.randn(2, 3), i64({ { 1 }, { 2 } })) end,
      'cross_entropy: input of shape [2, 3] needs a target of shape [2] (class indices, 1-based), got [2, 1]')
    errs(function() F.cross_entropy(dpl.randn(3), i64({ 1 })) end,
      'cross_entropy: input of shape [3] needs a target of shape [] (class indices, 1-based), got [1]')
    errs(function() F.cross_entropy(dpl.randn(2, 3, 4), dpl.rand(2, 4, 3)) end,
      'cross_entropy: input of shape [2, 3, 4] needs a target of shape [2, 3, 4] (class probabilities), got [2, 4, 3]')
    errs(function() F.nll_loss(dpl.randn(2, 3, 4, 5), i64({ { 1 } })) end,
      'nll_loss: input of shape [2, 3, 4, 5] needs a target of shape [2, 4, 5] (class indices, 1-based), got [1, 1]')
    errs(function() F.nll_loss(dpl.randn(2, 3), dpl.rand(2)) end,
      'nll_loss: target must hold integer class indices (1-based), got float32')
    errs(function() F.cross_entropy(dpl.randn(2, 3), i64({ 1, 2 }), { weight = dpl.ones(4) }) end,
      'cross_entropy: weight must have shape [3] (one per class) for input of shape [2, 3], got [4]')
  end)

  it('a label out of range names the label, its position and the class count', function()
    local t = i64({ { 1, 2, 3 }, { 2, 7, 1 } })
    errs(function() F.cross_entropy(dpl.randn(2, 4, 3), t) end,
      'target 7 at position [2, 2] of the target is out of range: expected a class index in 1..4')
    errs(function() F.nll_loss(dpl.randn(2, 4, 3), t, { reduction = 'sum' }) end,
      'target 7 at position [2, 2] of the target is out of range: expected a class index in 1..4')
    errs(function() F.cross_entropy(dpl.randn(2, 4), i64({ 1, 0 })) end,
      'target 0 of sample 2 is out of range: expected a class index in 1..4')
  end)
end)
