-- nn_layers_spec.lua: nn.functional losses and layers against PyTorch's numbers
-- (spec/fixtures/nn_ref.lua from gen_nn_ref.py), PyTorch's initialisation, layer
-- shapes, dropout, and a short training run on synthetic data.
local dpl = require 'dpl'
local nn = dpl.nn
local F = nn.functional
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/nn_ref.lua')

local function d(t) return dpl.tensor(t, { dtype = 'float64' }):requires_grad_() end
local function flat(v, out)
  out = out or {}
  if type(v) == 'table' then for _, x in ipairs(v) do flat(x, out) end else out[#out + 1] = v end
  return out
end
local function near(expected, got, what)
  if type(got) == 'cdata' then got = got:totable() end
  local e, g = flat(expected), flat(got)
  assert.are.equal(#e, #g, what .. ': element count')
  for i = 1, #e do
    if math.abs(e[i] - g[i]) > 1e-7 * (1 + math.abs(e[i])) then
      error(('%s: element %d: expected %.10g, got %.10g'):format(what, i, e[i], g[i]), 2)
    end
  end
end

local function check(name, fn, ...)
  local inputs = { ... }
  local out = fn(unpack(inputs))
  if out:dim() > 0 then out:backward(dpl.ones_like(out)) else out:backward() end
  near(ref[name].out, out, name .. ' output')
  for i, x in ipairs(inputs) do near(ref[name].grads[i], x.grad, name .. ' grad ' .. i) end
end

local y = dpl.tensor(ref.Y, { dtype = 'int64' })
local T = dpl.tensor(ref.T, { dtype = 'float64' })

-- batch norm with batch statistics written with plain differentiable ops (the reference the
-- fused op and its C kernel are checked against): y, mean, biased variance
local function bn_composed(x, w, b, eps)
  local C = x:size(2)
  local xt = x:transpose(1, 2):reshape(C, -1)
  local mean = xt:mean(2)
  local var = ((xt - mean:view(C, 1)) ^ 2):mean(2)
  local shape = { 1, C }
  for _ = 3, x:dim() do shape[#shape + 1] = 1 end
  local y = (x - mean:view(shape)) / (var:view(shape) + eps):sqrt()
  if w then y = y * w:view(shape) end
  if b then y = y + b:view(shape) end
  return y, mean, var
end

describe('nn.functional matches PyTorch (values and gradients)', function()
  it('cross_entropy: reductions, label_smoothing, ignore_index', function()
    check('cross_entropy', function(x) return F.cross_entropy(x, y) end, d(ref.X))
    check('cross_entropy_sum', function(x) return F.cross_entropy(x, y, { reduction = 'sum' }) end, d(ref.X))
    check('cross_entropy_none', function(x) return F.cross_entropy(x, y, { reduction = 'none' }) end, d(ref.X))
    check('cross_entropy_smooth', function(x) return F.cross_entropy(x, y, { label_smoothing = 0.1 }) end, d(ref.X))
    check('cross_entropy_ignore', function(x) return F.cross_entropy(x, y, { ignore_index = 1 }) end, d(ref.X))
    check('cross_entropy_ignore_smooth', function(x)
      return F.cross_entropy(x, y, { ignore_index = 1, label_smoothing = 0.2 })
    end, d(ref.X))
  end)
  it('nll_loss, mse_loss, l1_loss, smooth_l1_loss (beta=0: the L1 loss, not NaN)', function()
    check('nll_loss', function(x) return F.nll_loss(F.log_softmax(x, 2), y) end, d(ref.X))
    check('mse_loss', F.mse_loss, d(ref.X), d(ref.P))
    check('l1_loss', F.l1_loss, d(ref.X), d(ref.P))
    check('smooth_l1', F.smooth_l1_loss, d(ref.X), d(ref.T))
    check('smooth_l1_beta0', function(a, b) return F.smooth_l1_loss(a, b, { beta = 0 }) end, d(ref.X), d(ref.T))
    local ok, e = pcall(F.smooth_l1_loss, d(ref.X), d(ref.P), { beta = -1 })
    assert.is_false(ok)
    assert.truthy(tostring(e):find('smooth_l1_loss: beta must be a non-negative number, got -1', 1, true), tostring(e))
  end)
  it('max_pool2d / avg_pool2d with ceil_mode (partial windows at the edges)', function()
    check('max_pool2d_ceil', function(x) return F.max_pool2d(x, 2, { ceil_mode = true }) end, d(ref.X56))
    check('max_pool2d_ceil_k3s2', function(x) return F.max_pool2d(x, 3, { stride = 2, ceil_mode = true }) end, d(ref.X56))
    -- a window must start inside the input or the left padding: 5 rows give 3, not 4
    check('max_pool2d_ceil_pad', function(x) return F.max_pool2d(x, 2, { stride = 2, padding = 1, ceil_mode = true }) end,
      d(ref.X56))
    check('avg_pool2d_ceil', function(x) return F.avg_pool2d(x, 2, { ceil_mode = true }) end, d(ref.X56))
    check('avg_pool2d_ceil_pad', function(x)
      return F.avg_pool2d(x, 3, { stride = 2, padding = 1, ceil_mode = true })
    end, d(ref.X56))
    check('avg_pool2d_ceil_pad_nocount', function(x)
      return F.avg_pool2d(x, 3, { stride = 2, padding = 1, ceil_mode = true, count_include_pad = false })
    end, d(ref.X56))
    -- the modules, and float32 (the vector 2x2 rows) on odd sizes
    local x = dpl.randn(2, 3, 9, 37)
    assert.are.same({ 2, 3, 5, 19 }, nn.MaxPool2d(2, { ceil_mode = true })(x):size())
    assert.are.same({ 2, 3, 5, 19 }, nn.AvgPool2d(2, { ceil_mode = true })(x):size())
    assert.are.same({ 2, 3, 4, 18 }, nn.MaxPool2d(2)(x):size())
    local padded = dpl.full({ 2, 3, 10, 38 }, -math.huge, { dtype = 'float32' })
    padded:narrow(3, 1, 9):narrow(4, 1, 37):copy_(x)
    assert.are.same(F.max_pool2d(padded, 2):totable(), F.max_pool2d(x, 2, { ceil_mode = true }):totable())
    assert.are.equal('MaxPool2d(kernel_size=2, stride=2, padding=0, ceil_mode=true)',
      tostring(nn.MaxPool2d(2, { ceil_mode = true })))
  end)
  it('binary_cross_entropy(_with_logits)', function()
    check('bce', function(p) return F.binary_cross_entropy(p, T) end, d(ref.P))
    check('bce_logits', function(x) return F.binary_cross_entropy_with_logits(x, T) end, d(ref.X))
    check('bce_logits_pos', function(x)
      return F.binary_cross_entropy_with_logits(x, T, { pos_weight = dpl.tensor({ 1, 2, 0.5, 3 }, { dtype = 'float64' }) })
    end, d(ref.X))
  end)
  it('gelu (exact and tanh), softmax, layer_norm', function()
    check('gelu', F.gelu, d(ref.X))
    check('gelu_tanh', function(x) return F.gelu(x, { approximate = 'tanh' }) end, d(ref.X))
    check('softmax', function(x) return F.softmax(x, 2) * dpl.arange(4):double() end, d(ref.X))
    check('layer_norm', function(x, w, b) return F.layer_norm(x, { 4 }, w, b) end, d(ref.X), d({ 1, 0.5, 2, -1 }),
      d({ 0.1, 0.2, 0.3, 0.4 }))
  end)
  it('BatchNorm1d: train (batch statistics, running stats) and eval', function()
    local bn = nn.BatchNorm1d(4):double()
    dpl.no_grad(function()
      bn.weight:copy_(dpl.tensor({ 1, 0.5, 2, -1 }, { dtype = 'float64' }))
      bn.bias:copy_(dpl.tensor({ 0.1, 0.2, 0.3, 0.4 }, { dtype = 'float64' }))
    end)
    check('batch_norm_train', function(x) return bn(x) * dpl.arange(12):double():view(3, 4) end, d(ref.X))
    near(ref.batch_norm_running.mean, bn.running_mean, 'running_mean')
    near(ref.batch_norm_running.var, bn.running_var, 'running_var')
    assert.are.equal(1, bn.num_batches_tracked:item())
    bn:eval()
    check('batch_norm_eval', function(x) return bn(x) end, d(ref.X))
  end)
  it('batch_norm with batch statistics (the fused op) equals the composed formula: output, gradients, stats', function()
    -- the formula written with plain differentiable ops; the fused op's backward is closed-form
    local composed = bn_composed
    local function near(want, got, what, tol)
      local err = ((got - want):abs() / (want:abs() + 1)):max():item()
      if not (err <= tol) then error(('%s: relative difference %g (tolerance %g)'):format(what, err, tol), 2) end
    end
    dpl.manual_seed(11)
    for _, case in ipairs({ { 8, 5, 6, 7 }, { 6, 3 }, { 4, 3, 9 }, { 3, 4, 2, 3, 2 } }) do
      for _, affine in ipairs({ true, false }) do
        for _, dt in ipairs({ 'float64', 'float32' }) do
          local tol = dt == 'float64' and 1e-10 or 2e-5
          local x0 = (dpl.randn(case) * 3 + 2):to(dt)
          if #case == 4 then x0 = x0:transpose(3, 4):contiguous():transpose(3, 4) end -- non-contiguous
          local g = dpl.randn(case):to(dt)
          local w0 = affine and (dpl.randn(case[2]) + 1):to(dt) or nil
          local b0 = affine and dpl.randn(case[2]):to(dt) or nil
          local function leaves()
            return x0:clone():requires_grad_(), w0 and w0:clone():requires_grad_(), b0 and b0:clone():requires_grad_()
          end
          local x1, w1, b1 = leaves()
          local rm, rv = dpl.zeros(case[2], { dtype = dt }), dpl.ones(case[2], { dtype = dt })
          local y1 = F.batch_norm(x1, rm, rv, w1, b1, true, 0.1, 1e-5)
          y1:backward(g)
          local x2, w2, b2 = leaves()
          local y2, mean, var = composed(x2, w2, b2, 1e-5)
          y2:backward(g)
          local M = x0:numel() / case[2]
          near(y2:double(), y1:double(), 'y', tol)
          near(x2.grad:double(), x1.grad:double(), 'grad x', tol)
          if affine then
            near(w2.grad:double(), w1.grad:double(), 'grad w', tol)
            near(b2.grad:double(), b1.grad:double(), 'grad b', tol)
          end
          near((mean * 0.1):double(), rm:double(), 'running_mean', tol)
          near((var:detach() * (0.1 * M / (M - 1)) + 0.9):double(), rv:double(), 'running_var', tol)
        end
      end
    end
  end)
  it('batch_norm: the C kernel (contiguous float32/float64 on the CPU) against the old path and the formula', function()
    -- the kernel takes contiguous CPU inputs (counted through T.batch_norm); a non-contiguous copy of
    -- the same values takes the composed statistics (bn_batch_stats): the statistics, the output and
    -- the running stats have the same bits, the gradients agree with the formula's autograd
    local T = dpl.tensor
    local raw, calls = T.batch_norm, 0
    T.batch_norm = function(...) calls = calls + 1; return raw(...) end
    local ok, err = pcall(function()
      local composed = bn_composed
      local function near(want, got, what, tol)
        local e = ((got:double() - want:double()):abs() / (want:double():abs() + 1)):max():item()
        if not (e <= tol) then error(('%s: relative difference %g (tolerance %g)'):format(what, e, tol), 2) end
      end
      local function same(want, got, what)
        if not want:equal(got) then
          error(('%s: not the same bits (max difference %g)'):format(what, (got - want):abs():max():item()), 2)
        end
      end
      local function noncontig(t) -- the same values, channels strided
        return t:transpose(1, 2):contiguous():transpose(1, 2)
      end
      dpl.manual_seed(5)
      for _, case in ipairs({ { 16, 5 }, { 5, 3, 7 }, { 4, 6, 5, 8 }, { 2, 3, 3, 2, 5 }, { 3, 2, 4, 4 } }) do
        for _, affine in ipairs({ true, false }) do
          for _, dt in ipairs({ 'float32', 'float64' }) do
            local tol = dt == 'float64' and 1e-10 or 2e-5
            local C = case[2]
            local x0 = (dpl.randn(case) * 2 - 1):to(dt)
            local g = dpl.randn(case):to(dt)
            local w0 = affine and (dpl.randn(C) + 1):to(dt) or nil
            local b0 = affine and dpl.randn(C):to(dt) or nil
            local function leaves(x)
              return x:requires_grad_(), w0 and w0:clone():requires_grad_(), b0 and b0:clone():requires_grad_()
            end
            local what = ('%s %s affine=%s'):format(table.concat(case, 'x'), dt, tostring(affine))
            -- the kernel, twice (the running stats after two updates)
            local x1, w1, b1 = leaves(x0:clone())
            local rm1, rv1 = dpl.randn(C):to(dt), dpl.rand(C):to(dt)
            local rm2, rv2 = rm1:clone(), rv1:clone()
            local n0 = calls
            local y1 = F.batch_norm(x1, rm1, rv1, w1, b1, true, 0.1, 1e-5)
            F.batch_norm(x0 * 0.5, rm1, rv1, w0, b0, true, 0.3, 1e-3)
            assert.are.equal(n0 + 2, calls, what .. ': the kernel')
            y1:backward(g)
            -- the old path on the same values
            local x2, w2, b2 = leaves(noncontig(x0))
            local y2 = F.batch_norm(x2, rm2, rv2, w2, b2, true, 0.1, 1e-5)
            F.batch_norm(noncontig(x0 * 0.5), rm2, rv2, w0, b0, true, 0.3, 1e-3)
            assert.are.equal(n0 + 2, calls, what .. ': the old path')
            y2:backward(g)
            same(y2, y1, what .. ': y')
            same(rm2, rm1, what .. ': running_mean')
            same(rv2, rv1, what .. ': running_var')
            near(x2.grad, x1.grad, what .. ': grad x (old path)', tol)
            -- the formula's autograd
            local x3, w3, b3 = leaves(x0:clone())
            composed(x3, w3, b3, 1e-5):backward(g)
            near(x3.grad, x1.grad, what .. ': grad x', tol)
            if affine then
              near(w3.grad, w1.grad, what .. ': grad w', tol)
              near(b3.grad, b1.grad, what .. ': grad b', tol)
              -- only the parameters ask for gradients (x does not)
              local w4, b4 = w0:clone():requires_grad_(), b0:clone():requires_grad_()
              F.batch_norm(x0, nil, nil, w4, b4, true, 0.1, 1e-5):backward(g)
              near(w3.grad, w4.grad, what .. ': grad w without grad x', tol)
              near(b3.grad, b4.grad, what .. ': grad b without grad x', tol)
            end
            -- no running stats (track_running_stats=false): the batch statistics, nothing updated
            same(y2:detach(), F.batch_norm(x0, nil, nil, w0, b0, true, 0.1, 1e-5), what .. ': y without running stats')
          end
        end
      end
      -- momentum nil (false): the cumulative average, through the module; eval mode keeps the composed
      -- path (running statistics) and its output
      for _, dt in ipairs({ 'float32', 'float64' }) do
        local m1 = nn.BatchNorm2d(3, { momentum = false, dtype = dt })
        local m2 = nn.BatchNorm2d(3, { momentum = false, dtype = dt })
        for step = 1, 3 do
          local x = (dpl.randn(4, 3, 5, 6) * step):to(dt)
          local n0 = calls
          m1(x)
          m2(noncontig(x))
          assert.are.equal(n0 + 1, calls, dt .. ': the kernel once per step')
        end
        same(m2.running_mean, m1.running_mean, dt .. ': cumulative running_mean')
        same(m2.running_var, m1.running_var, dt .. ': cumulative running_var')
        m1:eval()
        local x = dpl.randn(4, 3, 5, 6):to(dt)
        local n0 = calls
        local y = m1(x)
        assert.are.equal(n0, calls, dt .. ': eval mode does not take the kernel')
        local s = { 1, 3, 1, 1 }
        near((x - m1.running_mean:view(s)) / (m1.running_var:view(s) + 1e-5):sqrt(), y, dt .. ': eval output',
          dt == 'float64' and 1e-12 or 1e-6)
      end
      -- float16 runs in float32 (the kernel, once: spec/nn_bn_half_spec.lua); non-contiguous
      -- weights keep the composed path
      local n0 = calls
      F.batch_norm(dpl.randn(4, 3, 5):half(), nil, nil, nil, nil, true, 0.1, 1e-5)
      assert.are.equal(n0 + 1, calls, 'float16: the kernel in float32')
      F.batch_norm(dpl.randn(4, 3), nil, nil, dpl.randn(3, 2):select(2, 1), nil, true, 0.1, 1e-5)
      assert.are.equal(n0 + 1, calls, 'a strided weight: the composed path')
    end)
    T.batch_norm = raw
    if not ok then error(err, 0) end
  end)
  it('batch_norm kernels: argument errors name the op', function()
    local T = dpl.tensor
    local x = dpl.randn(4, 3, 5)
    local function fails(pat, f, ...)
      local ok, e = pcall(f, ...)
      if ok then error(('expected an error with %q'):format(pat), 2) end
      if not tostring(e):find(pat, 1, true) then error(('expected %q in %q'):format(pat, tostring(e)), 2) end
    end
    fails('batch_norm: expected a float32 or float64 input, got int64', T.batch_norm, dpl.ones(4, 3):long(), nil,
      nil, nil, nil, 0.1, 1e-5)
    fails('batch_norm: input has shape [4], expected [N, C, ...]', T.batch_norm, dpl.randn(4), nil, nil, nil, nil, 0.1,
      1e-5)
    fails('batch_norm: expected weight of 3 elements, got 4', T.batch_norm, x, dpl.randn(4), nil, nil, nil, 0.1, 1e-5)
    fails('batch_norm: expected bias of dtype float32 (the input\'s), got float64', T.batch_norm, x, nil,
      dpl.randn(3):double(), nil, nil, 0.1, 1e-5)
    fails('batch_norm: expected both running_mean and running_var, or neither', T.batch_norm, x, nil, nil,
      dpl.zeros(3), nil, 0.1, 1e-5)
    fails('batch_norm: expected a contiguous running_var', T.batch_norm, x, nil, nil, dpl.zeros(3),
      dpl.ones(3, 2):select(2, 1), 0.1, 1e-5)
    fails('batch_norm: expected more than 1 value per channel', T.batch_norm, dpl.randn(1, 3), nil, nil, nil, nil, 0.1,
      1e-5)
    fails('batch_norm: eps must be >= 0', T.batch_norm, x, nil, nil, nil, nil, 0.1, -1)
    local y, m, inv = T.batch_norm(x, nil, nil, nil, nil, 0.1, 1e-5)
    fails('batch_norm_backward: grad shape [4, 3] does not match the input shape [4, 3, 5]', T.batch_norm_backward,
      dpl.randn(4, 3), x, m, inv, nil)
    fails('batch_norm_backward: expected invstd of 3 elements, got 2', T.batch_norm_backward, y, x, m, inv:narrow(1, 1, 2),
      nil)
    fails('batch_norm_backward: expected grad of dtype float32 (the input\'s), got float64', T.batch_norm_backward,
      y:double(), x, m, inv, nil)
  end)
  it('a label out of range names the label and the class count', function()
    local ok, e = pcall(F.cross_entropy, dpl.randn(2, 10), dpl.tensor({ 3, 11 }))
    assert.is_false(ok)
    assert.truthy(tostring(e):find('target 11 of sample 2 is out of range: expected a class index in 1..10'))
    ok, e = pcall(F.one_hot, dpl.tensor({ 1, 5 }), 4)
    assert.truthy(tostring(e):find('label 5 is out of range: expected a class index in 1..4'))
  end)
  it('one_hot, dropout', function()
    assert.are.same({ { 0, 1, 0 }, { 0, 0, 1 } }, F.one_hot(dpl.tensor({ 2, 3 }), 3):totable())
    local x = dpl.ones(1000)
    assert.are.equal(x, F.dropout(x, 0.5, false))
    local y = F.dropout(x, 0.5)
    local kept = y:gt(0):sum():item()
    assert.is_true(kept > 400 and kept < 600)
    assert.is_true(math.abs(y:max():item() - 2) < 1e-6)
    local drop = nn.Dropout(0.3)
    drop:eval()
    assert.are.equal(x, drop(x))
  end)
end)

describe('nn layers', function()
  it('Linear and Conv2d initialise as PyTorch (kaiming-uniform bounds)', function()
    dpl.manual_seed(0)
    local l = nn.Linear(400, 50)
    local b = 1 / math.sqrt(400)
    assert.is_true(l.weight:abs():max():item() <= b + 1e-7)
    assert.is_true(l.weight:abs():max():item() > 0.9 * b)
    assert.is_true(l.bias:abs():max():item() <= b + 1e-7)
    local c = nn.Conv2d(16, 32, 5)
    local cb = 1 / math.sqrt(16 * 25)
    assert.is_true(c.weight:abs():max():item() <= cb + 1e-7)
    assert.is_true(c.weight:abs():max():item() > 0.9 * cb)
    assert.is_true(math.abs(c.weight:std():item() - cb / math.sqrt(3)) < 0.01)
  end)
  it('produce the shapes of PyTorch', function()
    local x = dpl.randn(2, 3, 8, 8)
    assert.are.same({ 2, 4, 8, 8 }, nn.Conv2d(3, 4, 3, { padding = 1 })(x):size())
    assert.are.same({ 2, 4, 3, 3 }, nn.Conv2d(3, 4, { 3, 3 }, { stride = 2 })(x):size())
    assert.are.same({ 2, 3, 4, 4 }, nn.MaxPool2d(2)(x):size())
    assert.are.same({ 2, 3, 7, 7 }, nn.AvgPool2d(2, { stride = 1 })(x):size())
    assert.are.same({ 2, 192 }, nn.Flatten()(x):size())
    assert.are.same({ 2, 3, 8, 8 }, nn.BatchNorm2d(3)(x):size())
    assert.are.same({ 2, 3, 8, 8 }, nn.LayerNorm({ 8, 8 })(x):size())
    assert.are.same({ 2, 5, 6 }, nn.Embedding(10, 6)(dpl.randint(1, 11, { 2, 5 })):size())
    for _, cls in ipairs({ nn.ReLU, nn.GELU, nn.Tanh, nn.Sigmoid, nn.Identity }) do
      assert.are.same({ 2, 3, 8, 8 }, cls()(x):size())
    end
  end)
  it('max_pool2d: the strided-views path equals the C kernel (values, argmax and gradients)', function()
    local A = dpl.autograd
    for _, c in ipairs({ { { 2, 3, 4, 6 }, 2, 2 }, { { 3, 2, 6, 9 }, 3, 3 }, { { 2, 2, 6, 6 }, 2, 3 }, { { 1, 2, 3, 3 }, 1, 1 } }) do
      dpl.manual_seed(5)
      local x = dpl.randn(unpack(c[1])):requires_grad_()
      local vc, ic = dpl.no_grad(function() return dpl.max_pool2d(x, { c[2], c[3] }) end)
      local y = A.max_pool2d_views(x, c[2], c[3])
      assert.are.same(vc:totable(), y:totable())
      local g = dpl.randn(unpack(y:size()))
      y:backward(g)
      assert.are.same(dpl.max_pool2d_backward(g, x, ic):totable(), x.grad:totable())
      local y2 = dpl.no_grad(function() return F.max_pool2d(x, { c[2], c[3] }) end)
      assert.are.same(vc:totable(), y2:totable())
    end
    assert.is_false(A.pool_fast_ok(dpl.randn(1, 1, 5, 5), 2))
    assert.is_false(A.pool_fast_ok(dpl.randn(1, 1, 4, 4), 2, { padding = 1 }))
  end)
  it('Embedding gets gradients at the used rows; padding_idx row starts at zero', function()
    local e = nn.Embedding(5, 2, { padding_idx = 1 })
    assert.are.same({ 0, 0 }, e.weight[1]:totable())
    e(dpl.tensor({ 2, 2, 4 })):sum():backward()
    assert.are.same({ { 0, 0 }, { 2, 2 }, { 0, 0 }, { 1, 1 }, { 0, 0 } }, e.weight.grad:totable())
  end)
  it('Embedding and F.embedding: the padding_idx row gets no gradient and stays fixed (PyTorch)', function()
    local e = nn.Embedding(5, 2, { padding_idx = 3 })
    local ids = dpl.tensor({ 1, 3, 3, 5 })
    local w = dpl.tensor({ 1, 2, 3, 4 }, { dtype = 'float32' }):view(4, 1)
    ;(e(ids) * w):sum():backward()
    assert.are.same({ { 1, 1 }, { 0, 0 }, { 0, 0 }, { 0, 0 }, { 4, 4 } }, e.weight.grad:totable())
    dpl.optim.SGD(e:parameters(), { lr = 1 }):step()
    assert.are.same({ 0, 0 }, e.weight[3]:totable())
    -- the padding row's value is still looked up (here set by hand, as torch allows)
    dpl.no_grad(function() e.weight[3]:fill_(7) end)
    assert.are.same({ 7, 7 }, e(dpl.tensor({ 3 }))[1]:totable())
    -- -1 is the last row; F.embedding takes {padding_idx=} too
    assert.are.equal(5, nn.Embedding(5, 2, { padding_idx = -1 }).padding_idx)
    local wt = dpl.randn(4, 3):requires_grad_()
    F.embedding(dpl.tensor({ 2, 4, 4 }), wt, { padding_idx = -1 }):sum():backward()
    assert.are.same({ { 0, 0, 0 }, { 1, 1, 1 }, { 0, 0, 0 }, { 0, 0, 0 } }, wt.grad:totable())
    for _, bad in ipairs({ 0, 6, -6, 1.5, 'x' }) do
      local ok, err = pcall(nn.Embedding, 5, 2, { padding_idx = bad })
      assert.is_false(ok)
      assert.truthy(tostring(err):find('Embedding: padding_idx must be an integer in 1..5', 1, true), tostring(err))
    end
  end)
  it('Softmax and LogSoftmax check dim when built: a nonzero integer or nil (the last dim)', function()
    local x = dpl.tensor({ { 1, 2, 3 }, { 1, 1, 1 } })
    assert.are.same(x:softmax(2):totable(), nn.Softmax()(x):totable())
    assert.are.same(x:log_softmax(1):totable(), nn.LogSoftmax(1)(x):totable())
    assert.are.same(x:softmax(1):totable(), nn.Softmax(-2)(x):totable())
    for _, layer in ipairs({ 'Softmax', 'LogSoftmax' }) do
      for _, bad in ipairs({ 0, 1.5, 'x', true }) do
        local ok, err = pcall(nn[layer], bad)
        assert.is_false(ok)
        assert.truthy(tostring(err):find(layer .. ': dim must be a nonzero integer', 1, true), tostring(err))
      end
    end
  end)
  it('a small MLP learns separable synthetic data', function()
    dpl.manual_seed(1)
    local ds = dpl.datasets.SyntheticClassification { n = 512, features = 8, classes = 4, seed = 2 }
    local model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    local opt = dpl.optim.SGD(model:parameters(), { lr = 0.1, momentum = 0.9 })
    local loader = dpl.data.DataLoader(ds, { batch_size = 32, shuffle = true, seed = 1 })
    local first, last
    for epoch = 1, 5 do
      for batch in loader:iter() do
        local loss = F.cross_entropy(model(batch[1]), batch[2])
        opt:zero_grad()
        loss:backward()
        opt:step()
        first = first or loss:item()
        last = loss:item()
      end
    end
    assert.is_true(last < first / 4, ('loss %.3f -> %.3f'):format(first, last))
    model:eval()
    local acc = dpl.no_grad(function() return model(ds.x):argmax(2):eq(ds.y):double():mean():item() end)
    assert.is_true(acc > 0.9, 'accuracy ' .. acc)
  end)
end)
