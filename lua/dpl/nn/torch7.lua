-- nn/torch7.lua: the Torch7 (luatorch) nn and optim names a Torch7 user types (docs/torch7.md).
--   * aliases with the same meaning: Sequential:add(m) (append), Sequential:get(i),
--     Sequential:size(), module:zeroGradParameters() (zero_grad), module:evaluate() (eval),
--     module:type('torch.DoubleTensor') (to a dtype, as PyTorch's Module.type), and
--     module:updateParameters(lr) (p -= lr * p.grad for each parameter with a gradient);
--   * Torch7's explicit-backward API (backward(input, gradOutput), updateGradInput,
--     accGradParameters), getParameters' flattening, clone/share with shared fields, and the
--     Torch7 class names (nn.ClassNLLCriterion, nn.SpatialConvolution, ...) and optim's
--     closures (optim.sgd(feval, x, config)): each raises NotImplementedError naming the
--     dplhost (PyTorch) way, instead of "attempt to call a nil value".
local errors = require 'dpl.errors'
local fmt = string.format

local M = {}

-- Torch7 nn class -> what to write in dplhost
local NN = {
  ClassNLLCriterion = 'nn.NLLLoss() (mean over the batch, as sizeAverage = true; nn.NLLLoss{weight = w} for weights)',
  CrossEntropyCriterion = 'nn.CrossEntropyLoss()',
  MSECriterion = "nn.MSELoss() (nn.MSELoss{reduction = 'sum'} for sizeAverage = false)",
  AbsCriterion = 'nn.L1Loss()',
  SmoothL1Criterion = 'nn.SmoothL1Loss()',
  BCECriterion = 'nn.BCELoss()',
  DistKLDivCriterion = 'nn.KLDivLoss()',
  MarginRankingCriterion = 'nn.MarginRankingLoss()',
  HingeEmbeddingCriterion = 'nn.HingeEmbeddingLoss()',
  CosineEmbeddingCriterion = 'nn.CosineEmbeddingLoss()',
  SoftMarginCriterion = 'nn.SoftMarginLoss()',
  MultiMarginCriterion = 'nn.MultiMarginLoss()',
  MultiLabelMarginCriterion = 'nn.MultiLabelMarginLoss()',
  SoftMax = 'nn.Softmax(dim) (the dim is required: 2 for a batch [N, C])',
  LogSoftMax = 'nn.LogSoftmax(dim) (the dim is required: 2 for a batch [N, C])',
  SoftMin = 'nn.Softmin(dim)',
  HardTanh = 'nn.Hardtanh()',
  SpatialConvolution = 'nn.Conv2d(nIn, nOut, {kH, kW}, {stride = {dH, dW}, padding = {padH, padW}}) '
    .. "(PyTorch's order: height first; Torch7 gave kW, kH)",
  SpatialMaxPooling = 'nn.MaxPool2d({kH, kW}, {stride = {dH, dW}}) (height first)',
  SpatialAveragePooling = 'nn.AvgPool2d({kH, kW}, {stride = {dH, dW}}) (height first)',
  SpatialBatchNormalization = 'nn.BatchNorm2d(C)',
  BatchNormalization = 'nn.BatchNorm1d(C)',
  TemporalConvolution = 'nn.Conv1d(inFrames, outFrames, kW) on [N, C, L] (Torch7 took [N, L, C])',
  SpatialFullConvolution = 'nn.ConvTranspose2d(nIn, nOut, {kH, kW}, ...)',
  SpatialZeroPadding = 'nn.ZeroPad2d({left, right, top, bottom})',
  LookupTable = 'nn.Embedding(nIndex, nOutput) (indices 1-based, as Torch7)',
  View = 'nn.Flatten() to make [N, *] into [N, -1], nn.Unflatten(dim, sizes), or x:view(...) in a forward',
  Reshape = 'nn.Flatten() / nn.Unflatten(dim, sizes), or x:reshape(...) in a forward',
  Concat = 'a Module whose forward is dpl.cat({a(x), b(x)}, dim)',
  ConcatTable = 'a Module whose forward returns {a(x), b(x)}',
  ParallelTable = 'a Module whose forward returns {a(x[1]), b(x[2])}',
  CAddTable = 'x[1] + x[2] in a forward',
  CMulTable = 'x[1] * x[2] in a forward',
  JoinTable = 'dpl.cat(list, dim) in a forward',
  SplitTable = 'x:unbind(dim) in a forward',
  SelectTable = 'x[i] in a forward',
  MulConstant = 'x * c in a forward',
  AddConstant = 'x + c in a forward',
  Square = 'x:square() in a forward',
  Sqrt = 'x:sqrt() in a forward',
  Power = 'x:pow(p) in a forward',
  Transpose = 'x:transpose(d1, d2) in a forward',
  Narrow = 'x:narrow(dim, start, length) in a forward',
  Replicate = 'x:unsqueeze(dim):expand(...) in a forward',
  Euclidean = 'nn.PairwiseDistance() or dpl.cdist',
  CosineDistance = 'nn.CosineSimilarity()',
  Criterion = 'nn.Module (a loss is a Module whose forward returns the loss)',
}
M.NN = NN

-- Torch7 optim closures -> the optimizer class
local OPTIM = {
  sgd = 'SGD', adam = 'Adam', adamax = 'Adamax', adagrad = 'Adagrad', rmsprop = 'RMSprop', nag = 'SGD',
}
M.OPTIM = OPTIM

local TYPE_NAMES = require('dpl.tensor_torch7').TYPE_NAMES

local function nie(msg, level) error(errors.NotImplementedError(msg), level or 3) end

function M.install(nn, Module)
  local raise = errors.raiser(errors.ValueError)

  Module.zeroGradParameters = function(self) return self:zero_grad() end
  Module.evaluate = function(self) return self:eval() end

  --- updateParameters(lr): p <- p - lr * p.grad for each parameter with a gradient (Torch7's)
  function Module:updateParameters(lr)
    if type(lr) ~= 'number' then raise(fmt('updateParameters: learning rate must be a number, got %s', type(lr))) end
    for _, p in ipairs(self:parameters()) do
      local g = p.grad
      if g ~= nil then p:detach():add_(g, -lr) end
    end
    return self
  end

  --- type(name): to a dtype ('float64', or Torch7's/PyTorch's 'torch.DoubleTensor'); type() is the dtype
  --- of the first floating parameter (nil without parameters)
  function Module:type(name)
    if name == nil then
      for _, p in ipairs(self:parameters()) do return p.dtype end
      return nil
    end
    if type(name) ~= 'string' then raise(fmt('type: expected a dtype name, got %s', type(name))) end
    local cuda, base = name:match('^torch%.(cuda%.?)(%w+)$')
    if not base then base = name:match('^torch%.(%w+)$') end
    if base then
      local d = TYPE_NAMES[base]
      if not d then raise(fmt("type: unknown type name '%s'", name)) end
      self:to(d)
      if cuda then self:cuda() end
      return self
    end
    return self:to(name)
  end

  local function explicit(name, what)
    Module[name] = function(self)
      if type(self) ~= 'table' then nie(fmt('Module:%s is called with a colon: m:%s(...)', name, name)) end
      nie(fmt("%s:%s() is Torch7's and not in dplhost: %s (docs/torch7.md)",
        tostring(rawget(getmetatable(self) or {}, '__name') or 'Module'), name, what))
    end
  end
  local AUTOGRAD = 'gradients come from autograd: out = m(x) (m:forward(x) too), then loss:backward() '
    .. '(or out:backward(gradOutput)); gradients are in p.grad for p in m:parameters(), and in x.grad for an '
    .. 'input made with {requires_grad = true}'
  if rawget(Module, 'backward') == nil then explicit('backward', AUTOGRAD) end
  explicit('updateGradInput', AUTOGRAD)
  explicit('accGradParameters', AUTOGRAD)
  explicit('accUpdateGradParameters', AUTOGRAD)
  explicit('getParameters', 'there is no flattened copy: m:parameters() lists the parameter tensors (their '
    .. 'gradients in p.grad), and an optimizer takes that list: dpl.optim.SGD(m:parameters(), {lr = 0.1}); '
    .. 'dpl.nn.utils.parameters_to_vector(m:parameters()) makes a flat copy')
  explicit('share', 'to share a layer, use the same module object in both places (its parameters are the same '
    .. 'tensors), or assign one module\'s parameter to another: b.weight = a.weight')
  explicit('clone', 'make a new instance and copy the weights: local c = Net(...); c:load_state_dict(m:state_dict()); '
    .. 'to share weights, use the same module object (or assign b.weight = a.weight)')
  explicit('listModules', 'm:modules() lists self and every descendant')
  explicit('findModules', "loop over m:modules() and test getmetatable(c) == dpl.nn.Linear (or c:_label())")
  explicit('reset', 'layers have reset_parameters(); for a whole model: m:apply(function(c) if c.reset_parameters '
    .. 'then c:reset_parameters() end end)')
  explicit('clearState', 'dplhost modules keep no output/gradInput buffers')
  -- (no training() stub: m.training is the mode flag, a field read before any method; the docs
  -- say to write m:train())

  -- Sequential: add(m) appends (returns the container, so :add chains), get(i) is m[i], size() the count
  local Seq = nn.Sequential
  function Seq:add(m) return self:append(m) end
  function Seq:get(i)
    if type(i) ~= 'number' then raise(fmt('Sequential: get expects an index, got %s', type(i))) end
    return self[i]
  end
  function Seq:size() return rawget(self, '_n') end
  --- remove([i=last]): Torch7's name of pop
  function Seq:remove(i) return self:pop(i) end
  -- Torch7's insert(module, index) has PyTorch's two arguments swapped
  local insert = Seq.insert
  function Seq:insert(i, m)
    if Module.is_module(i) then
      raise("Sequential: insert(module, index) is Torch7's order; dplhost's is PyTorch's insert(index, module)")
    end
    return insert(self, i, m)
  end

  -- nn.ClassNLLCriterion and friends: a callable that raises, found through nn's __index
  -- (so that pairs(nn) lists dplhost's classes only)
  local stubs = {}
  for name, what in pairs(NN) do
    stubs[name] = setmetatable({}, { __call = function()
      nie(fmt("nn.%s is Torch7's and not in dplhost: use %s (docs/torch7.md)", name, what))
    end, __index = function(_, k)
      nie(fmt("nn.%s is Torch7's and not in dplhost (reading .%s): use %s (docs/torch7.md)", name, tostring(k), what))
    end })
  end
  local mt = getmetatable(nn)
  if mt == nil then
    mt = {}
    setmetatable(nn, mt)
  end
  local prev = mt.__index
  mt.__index = function(t, k)
    if prev ~= nil then
      local v
      if type(prev) == 'function' then v = prev(t, k) else v = prev[k] end
      if v ~= nil then return v end
    end
    return stubs[k]
  end
end

function M.install_optim(optim)
  local stubs = {}
  for name, cls in pairs(OPTIM) do
    stubs[name] = function()
      nie(fmt("optim.%s(feval, params, config) is Torch7's closure form and not in dplhost: make an optimizer once, "
        .. 'opt = dpl.optim.%s(model:parameters(), {lr = ...}), then each step: opt:zero_grad(); '
        .. 'loss = criterion(model(x), y); loss:backward(); opt:step() (docs/torch7.md)', name, cls), 2)
    end
  end
  local mt = getmetatable(optim)
  local prev = mt and mt.__index
  if mt == nil then
    mt = {}
    setmetatable(optim, mt)
  end
  mt.__index = function(t, k)
    if prev ~= nil then
      local v
      if type(prev) == 'function' then v = prev(t, k) else v = prev[k] end
      if v ~= nil then return v end
    end
    return stubs[k]
  end
end

return M
