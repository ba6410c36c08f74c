-- bad_input_spec.lua: the "Bad input" list of the autograd/nn issue, in one place: a
-- shape mismatch between layers names the layer and both shapes; a label out of range
-- names the label and the class count; backward on a non-scalar without a gradient, or
-- twice through a freed graph, is a clear error; loading a state dict of another
-- architecture lists every difference.
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional

local function errs(f, ...)
  local ok, e = pcall(f)
  assert.is_false(ok, 'expected an error')
  for _, want in ipairs({ ... }) do
    assert.truthy(tostring(e):find(want, 1, true), ('%q not in %q'):format(want, tostring(e)))
  end
  return tostring(e)
end

-- The raw Lua/FFI errors (not dpl's "ClassName: message") that call(k, args) raises for
-- each name in names and each argument list built from the wrong-typed candidates.
local function raw_errors(names, arg_lists, call)
  local raw = {}
  for _, k in ipairs(names) do
    for _, args in ipairs(arg_lists) do
      local ok, e = pcall(call, k, args)
      local m = tostring(e)
      if not ok and (m:find('cannot convert', 1, true) or m:find('bad argument #', 1, true)
          or m:find('attempt to ', 1, true)) then
        raw[#raw + 1] = k .. ': ' .. m:sub(1, 120)
      end
    end
  end
  return raw
end

-- argument lists with each candidate in the given positions (others: fixed values)
local function arg_lists(x, shapes)
  local cands = { 'str', { 1, 2 }, x, true, 1.5, -7, {} }
  local lists = {}
  for _, c in ipairs(cands) do
    for _, shape in ipairs(shapes) do
      local l = {}
      for i, v in ipairs(shape) do l[i] = v == '?' and c or v end
      lists[#lists + 1] = l
    end
  end
  return lists
end

describe('bad input', function()
  it('a shape mismatch between layers names the layer and both shapes', function()
    local mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(6, 2))
    errs(function() mlp(dpl.randn(3, 4)) end,
      "ValueError: Linear '3'(in_features=6, out_features=2): input has shape [3, 8], expected the last dim to be 6 "
      .. '(weight [2, 6])')
    local cnn = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(3, 2, 3))
    errs(function() cnn(dpl.randn(1, 1, 8, 8)) end,
      "Conv2d '3'(3, 2, kernel_size=3x3): input has shape [1, 4, 6, 6], expected [N, 3, H, W] (weight [2, 3, 3, 3])")
    local flat = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.Linear(100, 2))
    errs(function() flat(dpl.randn(2, 1, 8, 8)) end,
      "Linear '3'(in_features=100, out_features=2): input has shape [2, 144], expected the last dim to be 100")
    errs(function() nn.BatchNorm1d(10)(dpl.randn(3, 7)) end,
      'BatchNorm1d(10): input has shape [3, 7], expected [N, C] or [N, C, L] with 10 channels in dim 2')
    errs(function() nn.BatchNorm2d(10)(dpl.randn(3, 7, 2, 2)) end,
      'BatchNorm2d(10): input has shape [3, 7, 2, 2], expected [N, C, H, W] with 10 channels in dim 2')
    errs(function() nn.LayerNorm(8)(dpl.randn(2, 5)) end,
      'LayerNorm', 'input has shape [2, 5], expected the last dims to be [8]')
  end)

  it('a label out of range names the label and the class count', function()
    errs(function() F.cross_entropy(dpl.randn(2, 10), dpl.tensor({ 3, 11 })) end,
      'target 11 of sample 2 is out of range: expected a class index in 1..10')
    errs(function() F.nll_loss(dpl.randn(3, 4):log_softmax(2), dpl.tensor({ 1, 0, 2 })) end,
      'target 0 of sample 2 is out of range: expected a class index in 1..4')
    errs(function() F.cross_entropy(dpl.randn(2, 5, 3), dpl.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })) end,
      'target 6 at position [2, 3] of the target is out of range: expected a class index in 1..5')
    errs(function() F.one_hot(dpl.tensor({ 1, 5 }), 4) end, 'label 5 is out of range: expected a class index in 1..4')
    local emb = nn.Sequential(nn.Embedding(5, 3))
    errs(function() emb(dpl.tensor({ 1, 6 }, { dtype = 'int64' })) end,
      "Embedding '1'(5, 3): embedding: index 6 is out of range for dim 1 of size 5 (expected 1..5)")
  end)

  it('backward on a non-scalar without a gradient is a clear error', function()
    local x = dpl.randn(3):requires_grad_()
    errs(function() (x * 2):backward() end,
      'RuntimeError: backward: grad can be implicitly created only for scalar outputs; this tensor has shape [3] '
      .. '(pass a gradient of the same shape)')
    errs(function() (x * 2):backward(dpl.ones(2)) end,
      'backward: gradient has shape [2], the tensor has shape [3]')
  end)

  it('backward twice through a freed graph is a clear error, also through a shared part', function()
    local msg = 'RuntimeError: backward: trying to backward through the graph a second time'
    local x = dpl.randn(3):requires_grad_()
    local s = x:exp():sum()
    s:backward()
    errs(function() s:backward() end, msg, 'retain_graph = true')
    local y = x:exp()
    y:sum():backward()
    errs(function() (y * 2):sum():backward() end, msg) -- exp's saved output was freed
    local z = x:tanh()
    z:sum():backward({ retain_graph = true })
    ;(z * 2):sum():backward() -- kept
  end)

  it('loading a state dict of another architecture lists the differences', function()
    local a = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    local b = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 2), nn.ReLU(), nn.Linear(2, 2))
    errs(function() b:load_state_dict(a:state_dict()) end,
      'RuntimeError: Error(s) in loading state_dict for Sequential:',
      'Missing key(s): 2.weight, 2.bias, 4.weight, 4.bias',
      'Unexpected key(s): 3.bias, 3.weight',
      'Size mismatch: 1.weight: checkpoint shape [8, 4], model shape [6, 4]; 1.bias: checkpoint shape [8], model shape [6]')
  end)

  it('an unknown option key is an error naming the function, the key and the accepted keys', function()
    -- (a misspelt key used to be ignored: SGD{momentun=0.9} ran plain SGD, conv2d{strides=2} stride 1)
    local x4, w4, x, t = dpl.randn(1, 1, 5, 5), dpl.randn(1, 1, 3, 3), dpl.randn(2, 3), dpl.tensor({ 1, 2 })
    errs(function() F.conv2d(x4, w4, nil, { strides = 2 }) end,
      "ValueError: conv2d: unknown option 'strides' (did you mean 'stride'?); accepted options: dilation, groups, "
      .. 'padding, stride')
    errs(function() F.cross_entropy(x, t, { label_smothing = 0.1 }) end,
      "ValueError: cross_entropy: unknown option 'label_smothing' (did you mean 'label_smoothing'?); accepted "
      .. 'options: ignore_index, label_smoothing, reduction, weight')
    errs(function() F.max_pool2d(x4, 2, { 2 }) end, 'ValueError: max_pool2d: unknown option [1] (a number key)')
    -- every nn.functional function that takes options
    local p, y = dpl.rand(2, 3), dpl.rand(2, 3)
    local calls = {
      gelu = function(o) return F.gelu(x, o) end,
      conv2d = function(o) return F.conv2d(x4, w4, nil, o) end,
      max_pool2d = function(o) return F.max_pool2d(x4, 2, o) end,
      avg_pool2d = function(o) return F.avg_pool2d(x4, 2, o) end,
      embedding = function(o) return F.embedding(t, x, o) end,
      cross_entropy = function(o) return F.cross_entropy(x, t, o) end,
      nll_loss = function(o) return F.nll_loss(x, t, o) end,
      mse_loss = function(o) return F.mse_loss(p, y, o) end,
      l1_loss = function(o) return F.l1_loss(p, y, o) end,
      smooth_l1_loss = function(o) return F.smooth_l1_loss(p, y, o) end,
      binary_cross_entropy = function(o) return F.binary_cross_entropy(p, y, o) end,
      binary_cross_entropy_with_logits = function(o) return F.binary_cross_entropy_with_logits(p, y, o) end,
    }
    for name in pairs(F._option_keys) do
      assert.truthy(calls[name], name)
      calls[name]({}) -- the empty table is fine
      errs(function() calls[name]({ bogus = 1 }) end, 'ValueError: ' .. name .. ": unknown option 'bogus'; accepted options: ")
    end
    -- dpl.tensor's network functions
    errs(function() dpl.conv2d(x4, w4, nil, { strides = 2 }) end, "conv2d: unknown option 'strides'")
    errs(function() dpl.max_pool2d(x4, 2, { dilation = 1 }) end, "max_pool2d: unknown option 'dilation'; accepted "
      .. 'options: ceil_mode, padding, return_indices, stride')
    errs(function() dpl.avg_pool2d(x4, 2, { divisor_override = 3 }) end, "avg_pool2d: unknown option 'divisor_override'")
    errs(function() dpl.cross_entropy(x, t, { label_smoothing = 0.1 }) end,
      "cross_entropy: unknown option 'label_smoothing'; accepted options: ignore_index, reduction")
    -- layers
    errs(function() nn.Linear(2, 3, { biass = false }) end, "ValueError: Linear: unknown option 'biass' (did you mean 'bias'?)")
    errs(function() nn.Conv2d(1, 1, 3, { strides = 2 }) end, "Conv2d: unknown option 'strides' (did you mean 'stride'?)")
    errs(function() nn.MaxPool2d(2, { count_include_pad = false }) end,
      "MaxPool2d: unknown option 'count_include_pad'; accepted options: ceil_mode, padding, return_indices, stride")
    errs(function() nn.AvgPool2d(2, { dilation = 1 }) end, "AvgPool2d: unknown option 'dilation'")
    errs(function() nn.BatchNorm1d(3, { momentom = 0.1 }) end, "BatchNorm1d: unknown option 'momentom'")
    errs(function() nn.LayerNorm(3, { bias = false }) end, "LayerNorm: unknown option 'bias'")
    errs(function() nn.Embedding(3, 2, { padding = 1 }) end, "Embedding: unknown option 'padding'")
    errs(function() nn.GELU({ approx = 'tanh' }) end, "GELU: unknown option 'approx'")
    errs(function() nn.CrossEntropyLoss({ label_smothing = 0.1 }) end, "CrossEntropyLoss: unknown option 'label_smothing'")
    errs(function() nn.MSELoss({ reduce = 'sum' }) end, -- (PyTorch's deprecated option: not an unknown one)
      'NotImplementedError: MSELoss: size_average and reduce (deprecated in PyTorch) are not supported')
    errs(function() nn.MSELoss({ sum = true }) end, "MSELoss: unknown option 'sum'; accepted options: reduction")
    errs(function() nn.L1Loss({ reductoin = 'sum' }) end, "L1Loss: unknown option 'reductoin' (did you mean 'reduction'?)")
    local lin = nn.Linear(2, 2)
    errs(function() lin:zero_grad({ set_to_nil = true }) end, "zero_grad: unknown option 'set_to_nil'")
    errs(function() lin:load_state_dict(lin:state_dict(), { stric = false }) end, "load_state_dict: unknown option 'stric'")
    -- optimizers and schedules
    local q = dpl.ones(2):requires_grad_()
    errs(function() dpl.optim.SGD({ q }, { lr = 0.1, momentun = 0.9 }) end,
      "ValueError: SGD: unknown option 'momentun' (did you mean 'momentum'?); accepted options: dampening, foreach, "
      .. 'lr, maximize, momentum, nesterov, weight_decay')
    errs(function() dpl.optim.Adam({ q }, { beta = { 0.9, 0.99 } }) end, "Adam: unknown option 'beta' (did you mean 'betas'?)")
    errs(function() dpl.optim.AdamW({ q }, { weight_decy = 0 }) end, "AdamW: unknown option 'weight_decy'")
    errs(function() dpl.optim.RMSprop({ q }, { alpah = 0.9 }) end, "RMSprop: unknown option 'alpah'")
    local opt = dpl.optim.SGD({ q }, { lr = 0.1 })
    errs(function() opt:zero_grad({ set_to_None = true }) end, "zero_grad: unknown option 'set_to_None'")
    local S = dpl.optim.lr_scheduler
    errs(function() S.StepLR(opt, { step_size = 1, gama = 0.5 }) end, "StepLR: unknown option 'gama' (did you mean 'gamma'?)")
    errs(function() S.OneCycleLR(opt, { max_lr = 1, total_steps = 10, warmup = 2 }) end, "OneCycleLR: unknown option 'warmup'")
    errs(function() S.ReduceLROnPlateau(opt, { patiance = 3 }) end, "ReduceLROnPlateau: unknown option 'patiance'")
    -- data
    local ds = dpl.data.TensorDataset(dpl.randn(4, 2))
    errs(function() dpl.data.DataLoader(ds, { batch_size = 2, shufle = true }) end,
      "ValueError: DataLoader: unknown option 'shufle' (did you mean 'shuffle'?)")
    errs(function() dpl.data.RandomSampler(4, { sed = 1 }) end, "RandomSampler: unknown option 'sed'")
    errs(function() dpl.data.DistributedSampler({ size = 4, num_replica = 2 }) end,
      "DistributedSampler: unknown option 'num_replica'")
  end)

  it('integer-valued options (kernel sizes, stride, padding, dilation, groups) reject non-integers', function()
    local x4, w4 = dpl.randn(1, 2, 5, 5), dpl.randn(2, 1, 3, 3)
    errs(function() F.conv2d(x4, w4, nil, { padding = 1.5, groups = 2 }) end,
      'ValueError: conv2d: padding must be an integer or a pair of integers {h, w}, got 1.5')
    errs(function() F.conv2d(x4, w4, nil, { stride = { 1, 2.5 }, groups = 2 }) end, 'conv2d: stride must be an integer '
      .. 'or a pair of integers {h, w}, got {1, 2.5}')
    errs(function() F.conv2d(x4, w4, nil, { dilation = 0 / 0, groups = 2 }) end, 'conv2d: dilation must be an integer')
    errs(function() F.conv2d(x4, w4, nil, { groups = 1.5 }) end, 'conv2d: groups must be a positive integer, got 1.5')
    errs(function() F.max_pool2d(x4, 2.5) end, 'max_pool2d: kernel_size must be an integer or a pair of integers')
    errs(function() F.max_pool2d(x4, 2, { ceil_mode = 1 }) end, 'max_pool2d: ceil_mode must be true or false, got 1')
    errs(function() F.avg_pool2d(x4, { 2, 2 }, { padding = 0.5 }) end, 'avg_pool2d: padding must be an integer')
    errs(function() nn.Conv2d(2, 2, 2.5) end, 'Conv2d: kernel_size must be an integer or a pair of integers {h, w}, got 2.5')
    errs(function() nn.Conv2d(2, 2, 3, { stride = 1.5 }) end, 'Conv2d: stride must be an integer')
    errs(function() nn.Conv2d(2, 2, 3, { padding = -1 }) end, 'Conv2d: padding must be >= 0, got -1')
    errs(function() nn.Conv2d(2, 2, 3, { groups = 1.5 }) end, 'Conv2d: groups must be an integer >= 1, got 1.5')
    errs(function() nn.MaxPool2d({ 2, 1.5 }) end, 'MaxPool2d: kernel_size must be an integer or a pair of integers')
    errs(function() nn.AvgPool2d(2, { padding = 0.5 }) end, 'AvgPool2d: padding must be an integer')
  end)

  it('every tensor method given an argument of the wrong type raises a dpl error, not a raw FFI one', function()
    -- a string, a list, a tensor, a boolean, numbers and an empty table in each of the
    -- first two argument positions: any error must be one of dpl's ("ClassName: message"),
    -- never "bad argument #2 to 'fn' (cannot convert ...)" or "attempt to index ..."
    local T = require 'dpl.tensor'
    T._load_extra() -- (dpl.tensor_extra's methods load on first use: all of them here)
    local x = dpl.randn(3, 4)
    local skip = { backward = true, register_hook = true, free = true, retain_grad = true, requires_grad_ = true }
    local names = {}
    for k, v in pairs(T.methods) do
      if type(v) == 'function' and not k:match('^_') and not skip[k] then names[#names + 1] = k end
    end
    table.sort(names)
    assert.is_true(#names > 100, #names)
    assert.are.same({}, raw_errors(names, arg_lists(x, { { '?' }, { 1, '?' }, { '?', 1 } }), function(k, args)
      return x:clone()[k](x:clone(), unpack(args))
    end))
  end)

  it('every nn.functional function and dpl elementwise function names a non-tensor input', function()
    local n = 0
    for name, f in pairs(F) do
      if type(f) == 'function' and not name:match('^_') then
        for _, bad in ipairs({ 'str', true, { 1, 2 }, false }) do
          local ok, e = pcall(f, bad, dpl.randn(2, 2))
          assert.is_false(ok, name)
          assert.truthy(tostring(e):find('ValueError: F.' .. name .. ': input must be a tensor, got ' .. type(bad), 1, true),
            tostring(e))
        end
        n = n + 1
      end
    end
    assert.is_true(n > 20, n)
    for _, name in ipairs({ 'abs', 'exp', 'relu', 'sigmoid', 'neg' }) do
      assert.truthy(tostring(select(2, pcall(dpl[name], true))):find(name .. ': input must be a tensor, got boolean', 1, true))
    end
    assert.truthy(tostring(select(2, pcall(dpl.add, 1, true))):find('add: other must be a tensor or a number, got boolean', 1, true))
  end)

  it("dpl.tensor's functions given arguments of the wrong type raise dpl errors, not raw FFI ones", function()
    -- (the *_backward functions autograd calls and the thread/GC knobs included; get_item and the
    -- grad-mode switches take anything)
    local T = require 'dpl.tensor'
    T._load_extra() -- (dpl.tensor_extra's functions load on first use: all of them here)
    local x = dpl.randn(3, 4)
    local skip = { collect = true, no_grad = true, enable_grad = true, set_grad_enabled = true, get_item = true }
    local names = {}
    for k, f in pairs(T) do
      if type(k) == 'string' and type(f) == 'function' and not k:match('^_') and not skip[k] then
        names[#names + 1] = k
      end
    end
    table.sort(names)
    assert.is_true(#names > 80, #names)
    assert.are.same({}, raw_errors(names, arg_lists(x, { { '?' }, { x, '?' }, { '?', 1 }, { x, 1, '?' } }), function(k, args)
      return T[k](unpack(args))
    end))
  end)
end)

describe('a method called with . instead of :', function()
  local h = require 'spec.support.helpers'
  it('gets a hint in a script\'s error and at the REPL', function()
    local f = h.write_file(h.tmpname('.lua'), 'local m = require("dpl").nn.Linear(2, 2)\nm.parameters()\n')
    local _, err, rc = h.dplhost(h.q(f))
    os.remove(f)
    assert.are.equal(1, rc)
    assert.matches("local 'self' %(a nil value%)\n  %(hint: a method called with '%.' instead of ':'%? write obj:method%(...%)%)", err)
    local out, err2 = h.dplhost('-i', { stdin = 'm = require("dpl").nn.Linear(2, 2)\nm.parameters()\nprint("still here")\n' })
    assert.matches("%(hint: a method called with '%.' instead of ':'%?", out .. err2)
    assert.matches('still here', out)
  end)
end)
