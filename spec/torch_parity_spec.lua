-- torch_parity_spec.lua: forms PyTorch users write that exploratory testing against python3-torch
-- 1.13 found (the values in the assertions are torch's, printed with the same inputs).
local dpl = require 'dpl'
local F = dpl.nn.functional

local function near(expected, t, tol)
  local got = t:contiguous():view(-1):totable()
  assert.equal(#expected, #got)
  for i = 1, #expected do
    assert.is_true(math.abs(expected[i] - got[i]) <= (tol or 1e-5), ('element %d: %s vs %s'):format(i, got[i], expected[i]))
  end
end
local function err_of(f) local ok, e = pcall(f) assert.is_false(ok) return tostring(e) end

describe('F.conv2d, F.max_pool2d, F.avg_pool2d', function()
  local x = (dpl.arange(12):float() / 10):view(1, 1, 3, 4)
  local w = (dpl.arange(8):float() / 10 - 0.3):view(2, 1, 2, 2)

  it("take padding = 'same' | 'valid', as torch's F.conv2d (nn.Conv2d's padding strings)", function()
    near({ -0.02, -0.08, -0.14, -0.12, -0.10, -0.32, -0.38, -0.28, -0.18, -0.44, -0.49, -0.30,
      0.22, 0.40, 0.50, 0.20, 0.46, 0.80, 0.90, 0.36, 0.18, 0.28, 0.31, 0.10 },
      F.conv2d(x, w, nil, { padding = 'same', dilation = { 1, 2 } }))
    assert.same({ 1, 2, 2, 3 }, F.conv2d(x, w, nil, { padding = 'valid' }).shape)
    -- the same numbers as nn.Conv2d's 'same' (an even total: the conv pads itself)
    local m = dpl.nn.Conv2d(1, 2, 3, { padding = 'same', bias = false })
    local y = F.conv2d(x, m.weight, nil, { padding = 'same' })
    assert.is_true(dpl.allclose(y, m(x)))
    -- gradients flow through the extra right/bottom padding
    local xg = x:clone():requires_grad_()
    F.conv2d(xg, w, nil, { padding = 'same' }):sum():backward()
    assert.same({ 1, 1, 3, 4 }, xg.grad.shape)
    assert.matches("padding='same' is not supported for strided convolutions",
      err_of(function() return F.conv2d(x, w, nil, { padding = 'same', stride = 2 }) end))
    assert.matches("invalid padding string 'full'", err_of(function() return F.conv2d(x, w, nil, { padding = 'full' }) end))
  end)

  it('take an unbatched [C, H, W] input, as torch 1.13 (and nn.Conv2d / nn.MaxPool2d)', function()
    local y = F.conv2d(x[1], w, nil, { padding = 'same' })
    assert.same({ 2, 3, 4 }, y.shape)
    near({ -0.06, -0.12, -0.18, -0.16, -0.30, -0.36, -0.42, -0.32, -0.42, -0.47, -0.52, -0.33,
      0.34, 0.44, 0.54, 0.24, 0.74, 0.84, 0.94, 0.40, 0.26, 0.29, 0.32, 0.11 }, y)
    near({ 0.5, 0.6, 0.7, 0.9, 1.0, 1.1 }, F.max_pool2d(x[1], 2, { stride = 1 }))
    local v, i = F.max_pool2d(x[1], 2, { stride = 1, return_indices = true })
    assert.same({ 1, 2, 3 }, v.shape)
    assert.same({ { { 6, 7, 8 }, { 10, 11, 12 } } }, i:totable())
    near({ 0.3, 0.4, 0.7, 0.8 }, F.avg_pool2d(x[1], { 2, 3 }, { stride = 1, ceil_mode = true, count_include_pad = false }))
    local xg = x[1]:clone():requires_grad_()
    F.max_pool2d(xg, 2):sum():backward()
    near({ 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0 }, xg.grad)
  end)
end)

describe('dpl.cat with empty 1-d tensors (PyTorch\'s legacy rule)', function()
  it('skips a [0] tensor beside tensors of more dims; its dtype still counts', function()
    local a = dpl.arange(6):float():view(2, 3)
    local acc = dpl.tensor({})
    for i = 1, 3 do acc = dpl.cat({ acc, a * i }) end -- torch: acc = torch.cat([acc, x])
    assert.same({ 6, 3 }, acc.shape)
    assert.same({ 6, 8, 10 }, acc[4]:totable()) -- (row 2 of a * 2)
    local r = dpl.cat({ dpl.zeros(0, { dtype = 'float64' }), a }, 2)
    assert.same({ 2, 3 }, r.shape)
    assert.equal('float64', r.dtype) -- as torch 1.13
    assert.same({ 2, 6 }, dpl.cat({ a, dpl.zeros(0), a }, -1).shape)
    assert.same({ 0 }, dpl.cat({ dpl.zeros(0), dpl.zeros(0) }).shape)
    assert.equal('float32', dpl.cat({ dpl.zeros(0), dpl.tensor({ 1, 2 }) }).dtype)
  end)
  it('names the tensors of a mismatch 1-based, counted with the skipped ones', function()
    local a = dpl.zeros(2, 3)
    assert.matches('cat: sizes must match except in dim 1: tensor 2 is %[2, 3%], tensor 3 is %[3, 2%]',
      err_of(function() return dpl.cat({ dpl.zeros(0), a, dpl.zeros(3, 2) }) end))
    assert.matches('cat: tensor 3 has 1 dims, tensor 2 has 2', err_of(function() return dpl.cat({ dpl.zeros(0), a, dpl.zeros(3) }) end))
    assert.matches('cat: zero%-dimensional tensors cannot be concatenated %(tensor 2%)',
      err_of(function() return dpl.cat({ a, dpl.tensor(1.5) }) end))
    assert.matches('cat: dim 3 out of range', err_of(function() return dpl.cat({ dpl.zeros(0), a }, 3) end))
  end)
  it('backward: the skipped tensor gets an empty gradient, the others their slices', function()
    local x = dpl.tensor({ 1, 2, 3 }, { dtype = 'float32' }):requires_grad_()
    local e = dpl.zeros(0):requires_grad_()
    dpl.cat({ e, x:view(1, 3), x:view(1, 3) * 2 }):sum():backward()
    assert.same({ 3, 3, 3 }, x.grad:totable())
    assert.same({ 0 }, e.grad.shape)
    x.grad = nil
    dpl.cat({ dpl.zeros(0), x:view(1, 3) * x:view(1, 3) }, 2):sum():backward()
    assert.same({ 2, 4, 6 }, x.grad:totable())
  end)
end)

describe('pooling options the 2-d kernels lack', function()
  local x = dpl.randn(1, 2, 6, 6)
  it("max_pool2d's dilation and avg_pool2d's divisor_override: NotImplementedError, not 'unknown option'", function()
    assert.matches('^NotImplementedError: max_pool2d: dilation = 2 is not implemented',
      err_of(function() return F.max_pool2d(x, 2, { dilation = 2 }) end))
    assert.matches('^NotImplementedError: max_pool2d: dilation = {1, 2} is not implemented',
      err_of(function() return F.max_pool2d(x, 2, { dilation = { 1, 2 } }) end))
    assert.matches('^NotImplementedError: MaxPool2d: dilation = 2',
      err_of(function() return dpl.nn.MaxPool2d(2, { dilation = 2 }) end))
    assert.matches('^NotImplementedError: avg_pool2d: divisor_override = 3 is not implemented',
      err_of(function() return F.avg_pool2d(x, 2, { divisor_override = 3 }) end))
    assert.matches('^NotImplementedError: AvgPool2d: divisor_override = 3',
      err_of(function() return dpl.nn.AvgPool2d(2, { divisor_override = 3 }) end))
    assert.matches("unknown option 'divisor_overide'", err_of(function() return F.avg_pool2d(x, 2, { divisor_overide = 3 }) end))
  end)
  it('their defaults are accepted', function()
    assert.is_true(dpl.equal(F.max_pool2d(x, 2), F.max_pool2d(x, 2, { dilation = 1 })))
    assert.is_true(dpl.equal(F.max_pool2d(x, 2, { stride = 1 }), F.max_pool2d(x, 2, { dilation = { 1, 1 }, stride = 1 })))
    assert.is_true(dpl.equal(F.max_pool2d(x, 2), dpl.nn.MaxPool2d(2, { dilation = 1 })(x)))
    assert.is_true(dpl.equal(F.avg_pool2d(x, 2), F.avg_pool2d(x, 2, { divisor_override = false })))
  end)
end)

describe('nn.utils.clip_grad_norm_', function()
  local function param(v, device)
    local p = dpl.zeros(#v, { device = device }):requires_grad_()
    p.grad = dpl.tensor(v, { dtype = 'float32', device = device })
    return p
  end
  it("takes PyTorch's error_if_nonfinite (4th argument or {error_if_nonfinite=}); it was ignored", function()
    local p = param({ 1, 0 / 0, 1 })
    assert.matches('^RuntimeError: clip_grad_norm_: the total norm of order 2 for gradients from `parameters` is non%-finite %(nan%)',
      err_of(function() return dpl.nn.utils.clip_grad_norm_({ p }, 1.0, 2, true) end))
    assert.equal(1, p.grad[1]:item()) -- nothing scaled
    assert.matches('non%-finite %(inf%)', err_of(function()
      return dpl.nn.utils.clip_grad_norm_({ param({ 1, math.huge }) }, 1.0, { norm_type = 'inf', error_if_nonfinite = true })
    end))
    local q = param({ 3, 4 })
    assert.near(5, dpl.nn.utils.clip_grad_norm_({ q }, 1.0, 2, true), 1e-6)
    assert.near(0.6, q.grad[1]:item(), 1e-6)
    assert.is_true(dpl.nn.utils.clip_grad_norm_({ param({ 1, 0 / 0 }) }, 1.0, 2, false) ~= 0) -- nan, as before
    assert.matches("unknown option 'error_if_nonfinit'", err_of(function()
      return dpl.nn.utils.clip_grad_norm_({ q }, 1.0, { error_if_nonfinit = true })
    end))
    assert.matches('error_if_nonfinite must be true or false', err_of(function()
      return dpl.nn.utils.clip_grad_norm_({ q }, 1.0, 2, 'yes')
    end))
  end)
end)

describe('reductions over a list of dims and with options tables', function()
  local x = dpl.arange(24):double():view(2, 3, 4)
  it('sum / mean / var / std / logsumexp / norm take a list of dims, as PyTorch\'s dim=(0, 2)', function()
    assert.same({ 60, 92, 124 }, x:sum({ 1, 3 }):totable())
    assert.same({ 2, 1, 1 }, x:mean({ -1, 2 }, true).shape)
    assert.same({ 5.5, 17.5 }, x:mean({ 2, 3 }):totable())
    assert.equal(276, x:sum({}):item()) -- dim=[]: every dim
    assert.near(x:select(2, 1):var():item(), x:var({ 1, 3 })[1]:item(), 1e-9) -- one variance over both dims
    assert.same({ 1, 3, 1 }, x:std({ 1, 3 }, false, true).shape)
    assert.near(math.sqrt(x:select(2, 2):pow(2):sum():item()), x:norm(2, { 1, 3 })[2]:item(), 1e-9)
    local g = x:clone():requires_grad_()
    g:mean({ 1, 3 }):sum():backward()
    assert.near(1 / 8, g.grad[2][3][4]:item(), 1e-12)
  end)
  it('read their keywords from an options table (a table was read as true: var(d, {unbiased=false}) was unbiased)', function()
    local v = dpl.tensor({ 1, 2, 3, 4 }, { dtype = 'float64' })
    assert.equal(1.25, v:var(1, { unbiased = false }):item())
    assert.equal(1.25, v:var(1, { correction = 0 }):item())
    assert.equal(1.25, v:var({ correction = 0 }):item())
    assert.same({ 1 }, v:var(1, { correction = 1, keepdim = true }).shape)
    assert.same({}, v:sum(1, { keepdim = false }).shape)
    assert.same({ 1 }, v:sum(1, { keepdim = true }).shape)
    assert.matches("sum: unknown option 'keepdm'", err_of(function() return v:sum(1, { keepdm = true }) end))
    assert.matches('std: unbiased must be true or false, got no', err_of(function() return v:std(1, 'no') end))
    assert.matches('sum: keepdim must be true or false, got 1', err_of(function() return v:sum(1, 1) end))
    assert.matches('^NotImplementedError: var: correction=2', err_of(function() return v:var(1, { correction = 2 }) end))
    assert.matches('dim 1 appears multiple times', err_of(function() return x:sum({ 1, -3 }) end))
  end)
end)

describe('0-d integer tensors where an integer is expected', function()
  it('select, narrow and the sizes of zeros/view/reshape take one (PyTorch: w.select(0, ids[i])); '
    .. 'a floating or bool 0-d tensor is refused', function()
    local w = dpl.arange(1, 16):view(5, 3)
    local ids = dpl.tensor({ 2, 4 })
    assert.are.same({ 4, 5, 6 }, w:select(1, ids[1]):totable())
    assert.are.same({ { 4, 5, 6 }, { 7, 8, 9 } }, w:narrow(1, ids[1], ids[1]):totable())
    assert.are.same({ 4 }, dpl.zeros(ids[2]):size())
    assert.are.same({ 15, 1 }, w:reshape(ids[2] * 0 + 15, 1):size())
    assert.are.same({ 3, 5 }, w:view(dpl.zeros(3, 5)):size()) -- a tensor of more dims still gives its shape
    assert.are.same({ 4, 5, 6 }, w:select(1, dpl.tensor(2, { dtype = 'int32' })):totable())
    assert.matches('select: index must be an integer, got tensor%(1.5', err_of(function() return w:select(1, dpl.tensor(1.5)) end))
    assert.matches('select: index must be an integer, got tensor%(true', err_of(function() return w:select(1, dpl.tensor(true)) end))
  end)
end)

describe('softmax dtype and the function forms of methods', function()
  it("t:softmax(dim, dtype) converts first, as torch's dtype= (it was ignored); gradients come back in "
    .. "the input's dtype; a bad name or option is named", function()
    local t = dpl.tensor({ { 1, 2, 3 }, { 0, 0, 1 } }, { dtype = 'float32', requires_grad = true })
    local y = t:softmax(2, 'float64')
    assert.are.equal('float64', y.dtype)
    near({ 0.09003057317038046, 0.24472847105479764, 0.6652409557748219,
      0.21194155761708544, 0.21194155761708544, 0.5761168847658291 }, y, 1e-12)
    y:select(2, 1):sum():backward()
    assert.are.equal('float32', t.grad.dtype)
    assert.are.equal('float64', t:log_softmax(2, { dtype = 'float64' }).dtype)
    assert.are.equal('float64', dpl.softmax(t, 2, 'float64').dtype)
    assert.matches("softmax: unknown dtype 'flot'", err_of(function() return t:softmax(2, 'flot') end))
    assert.matches("log_softmax: unknown option 'dtyp'", err_of(function() return t:log_softmax(2, { dtyp = 'float64' }) end))
  end)

  it('dpl.sum, dpl.mean, dpl.max, ... are the methods (torch.sum(x, 1) is dpl.sum(x, 2)), with their forms', function()
    local x = dpl.arange(1, 25):view(2, 3, 4):float()
    assert.are.same(x:sum(2):totable(), dpl.sum(x, 2):totable())
    assert.are.same({ 3 }, dpl.sum(x, { 1, 3 }):size())
    assert.are.same({ 1, 1, 4 }, dpl.mean(x, { 1, 2 }, { keepdim = true }):size())
    assert.are.equal(24, dpl.max(x):item())
    assert.are.same({ 2, 3 }, dpl.argmax(x, 3):size())
    assert.are.same({ 4, 3, 2 }, dpl.permute(x, 3, 2, 1):size())
    assert.are.same({ 2, 12 }, dpl.reshape(x, 2, -1):size())
    assert.are.equal(24, dpl.numel(x))
    assert.matches('TypeError: dpl.sum: expected a tensor as the first argument, got number', err_of(function() return dpl.sum(3) end))
  end)
end)

describe('.T', function()
  it('on more than 2 dims names .mT and permute (torch 1.13 deprecates reversing the dims)', function()
    assert.matches('T: expects a tensor with <= 2 dims, got 3 %(use .mT', err_of(function() return dpl.randn(2, 3, 4).T end))
    assert.are.same({ 3, 2 }, dpl.randn(2, 3).T:size())
  end)
end)
