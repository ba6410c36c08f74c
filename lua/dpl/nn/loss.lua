-- dpl.nn.loss: the modules of the loss group, PyTorch 1.13's torch.nn names: the losses
-- (L1Loss ... CTCLoss), the distances (CosineSimilarity, PairwiseDistance), the activations
-- (LogSigmoid, Softmin, Softsign, Tanhshrink, Hardsigmoid, ReLU6, PReLU, SELU, CELU, GLU,
-- Threshold, Softmax2d) and LocalResponseNorm, InstanceNorm1d/2d/3d. Returns a table name ->
-- class that lua/dpl/nn/init.lua copies into dpl.nn. The computations are the functions of
-- lua/dpl/nn/functional_loss.lua, called with the module's label so that errors name it.
--
-- Constructors take PyTorch's arguments: the losses one options table (`nn.HuberLoss{delta =
-- 0.5, reduction = 'sum'}`; a class weight is a buffer, in the state dict as `weight` /
-- `pos_weight` like PyTorch's); the others positional arguments or one options table with
-- PyTorch's keyword names (`nn.CELU(0.5)`, `nn.CELU{alpha = 0.5}`).
local T = require 'dpl.tensor'
local Module = require 'dpl.nn.module'
local F = require 'dpl.nn.functional'
local options = require 'dpl.options'
local errors = require 'dpl.errors'

local fmt = string.format
local raise = errors.raise
local function error(msg) raise(msg) end
local is_tensor = T.is_tensor
local keys = options.keys

local LS = F._loss
local L, SPECS, parse, V, args = LS.impl, LS.specs, LS.parse, LS.V, LS.args

local M = {}

local function shape_str(t) return '[' .. table.concat(t:size(), ', ') .. ']' end
local function check_input(self, x, what)
  if not is_tensor(x) then
    error(fmt('%s: expected a tensor as %s, got %s', self:_label(), what or 'input',
      type(x) == 'cdata' and 'cdata (not a tensor)' or type(x)))
  end
end

---------------------------------------------------------------- losses
local TENSOR_OPTS = { weight = true, pos_weight = true }

-- cname: the class, fname: its function in F._loss.impl, nin: its tensor arguments
local function loss_module(cname, fname, nin)
  local cls = Module:extend(cname)
  local s, impl = SPECS[fname], L[fname]
  function cls:__init(opts)
    Module.__init(self)
    local o = parse(opts, s, cname)
    for _, e in ipairs(s.list) do
      local k = e[1]
      if TENSOR_OPTS[k] then
        self:register_buffer(k, o[k]) -- (nil: registered, not in the state dict, as PyTorch's None)
      else
        rawset(self, k, o[k])
      end
    end
  end
  if nin == 2 then
    function cls:forward(a, b) return impl(a, b, self, self:_label()) end
  elseif nin == 3 then
    function cls:forward(a, b, c) return impl(a, b, c, self, self:_label()) end
  else
    function cls:forward(a, b, c, d) return impl(a, b, c, d, self, self:_label()) end
  end
  function cls:extra_repr()
    local parts = {}
    for _, e in ipairs(s.list) do
      local k, v = e[1], rawget(self, e[1])
      if not TENSOR_OPTS[k] and v ~= nil and v ~= e[2] then
        parts[#parts + 1] = fmt('%s=%s', k, type(v) == 'string' and ("'" .. v .. "'") or tostring(v))
      end
    end
    return table.concat(parts, ', ')
  end
  M[cname] = cls
  return cls
end

loss_module('L1Loss', 'l1_loss', 2)
loss_module('MSELoss', 'mse_loss', 2)
loss_module('SmoothL1Loss', 'smooth_l1_loss', 2)
loss_module('HuberLoss', 'huber_loss', 2)
loss_module('SoftMarginLoss', 'soft_margin_loss', 2)
loss_module('KLDivLoss', 'kl_div', 2)
loss_module('BCELoss', 'binary_cross_entropy', 2)
loss_module('BCEWithLogitsLoss', 'binary_cross_entropy_with_logits', 2)
loss_module('PoissonNLLLoss', 'poisson_nll_loss', 2)
loss_module('GaussianNLLLoss', 'gaussian_nll_loss', 3)
loss_module('CrossEntropyLoss', 'cross_entropy', 2)
loss_module('NLLLoss', 'nll_loss', 2)
loss_module('MultiLabelSoftMarginLoss', 'multilabel_soft_margin_loss', 2)
loss_module('MultiLabelMarginLoss', 'multilabel_margin_loss', 2)
loss_module('MultiMarginLoss', 'multi_margin_loss', 2)
loss_module('MarginRankingLoss', 'margin_ranking_loss', 3)
loss_module('HingeEmbeddingLoss', 'hinge_embedding_loss', 2)
loss_module('CosineEmbeddingLoss', 'cosine_embedding_loss', 3)
loss_module('TripletMarginLoss', 'triplet_margin_loss', 3)
loss_module('CTCLoss', 'ctc_loss', 4)

---------------------------------------------------------------- modules with positional arguments
-- names: PyTorch's argument names, defaults their values (REQ: a required argument), checks
-- their validators (V.*), accepted the keys of an options table. Sets the values as fields
-- (not dtype and device); returns them as a table.
local REQ = {}
local function init_args(self, cname, names, defaults, checks, accepted, a1, a2, a3, a4, a5)
  local v = args(cname, names, accepted, a1, a2, a3, a4, a5)
  local opts = {}
  for i, k in ipairs(names) do
    local x = v[i]
    if x == nil then x = defaults[i] end
    if x == REQ then error(fmt('%s: missing argument %s', cname, k)) end
    if checks[i] and x ~= nil then x = checks[i](x, cname, k) end
    opts[k] = x
    if k ~= 'dtype' and k ~= 'device' then rawset(self, k, x) end
  end
  return opts
end

-- extra_repr: the arguments that differ from their defaults (and the required ones)
local function reprs(names, defaults)
  return function(self)
    local parts = {}
    for i, k in ipairs(names) do
      local v = rawget(self, k)
      if v ~= nil and v ~= defaults[i] then parts[#parts + 1] = fmt('%s=%s', k, tostring(v)) end
    end
    return table.concat(parts, ', ')
  end
end

-- an elementwise module: forward(x) = impl(x, <fields named in names>..., label)
local function act_module(cname, names, defaults, checks, forward)
  local cls = Module:extend(cname)
  local accepted = keys(unpack(names))
  function cls:__init(a1, a2, a3, a4, a5)
    Module.__init(self)
    if #names == 0 and a1 ~= nil and not (type(a1) == 'table' and next(a1) == nil) then
      error(fmt('%s: takes no arguments, got %s', cname, type(a1)))
    end
    init_args(self, cname, names, defaults, checks, accepted, a1, a2, a3, a4, a5)
  end
  function cls:forward(x)
    check_input(self, x)
    return forward(self, x, self:_label())
  end
  cls.extra_repr = reprs(names, defaults)
  M[cname] = cls
  return cls
end

local bool, num = V.boolean, V.number
local function check_dim(v, who, k)
  V.integer(v, who, k)
  if v == 0 then error(fmt('%s: %s must be a non-zero integer (1-based), got 0', who, k)) end
  return v
end
act_module('LogSigmoid', {}, {}, {}, function(_, x, who) return L.logsigmoid(x, who) end)
act_module('Softsign', {}, {}, {}, function(_, x, who) return L.softsign(x, who) end)
act_module('Tanhshrink', {}, {}, {}, function(_, x, who) return L.tanhshrink(x, who) end)
act_module('Hardsigmoid', { 'inplace' }, { false }, { bool },
  function(m, x, who) return L.hardsigmoid(x, m.inplace, who) end)
act_module('ReLU6', { 'inplace' }, { false }, { bool }, function(m, x, who) return L.relu6(x, m.inplace, who) end)
act_module('SELU', { 'inplace' }, { false }, { bool }, function(m, x, who) return L.selu(x, m.inplace, who) end)
act_module('CELU', { 'alpha', 'inplace' }, { 1.0, false }, {
  function(v, who, k)
    num(v, who, k)
    if v == 0 then error(fmt('%s: alpha cannot be 0 (ZeroDivisionError)', who)) end
    return v
  end, bool }, function(m, x, who) return L.celu(x, m.alpha, m.inplace, who) end)
act_module('GLU', { 'dim' }, { -1 }, { check_dim }, function(m, x, who) return L.glu(x, m.dim, who) end)
--- Softmin(dim=-1): PyTorch's dim=None (an implicit, deprecated choice) is dplhost's Softmax default, the last dim
act_module('Softmin', { 'dim' }, { -1 }, { check_dim }, function(m, x, who) return L.softmin(x, m.dim, nil, who) end)
act_module('Threshold', { 'threshold', 'value', 'inplace' }, { REQ, REQ, false }, { num, num, bool },
  function(m, x, who) return L.threshold(x, m.threshold, m.value, m.inplace, who) end)

M.Softmax2d = Module:extend('Softmax2d')
--- Softmax2d(): softmax over the channels (dim -3) of [N, C, H, W] or [C, H, W]
function M.Softmax2d:forward(x)
  check_input(self, x)
  if x:dim() ~= 3 and x:dim() ~= 4 then
    error(fmt('%s: input has shape %s, expected [N, C, H, W] or [C, H, W]', self:_label(), shape_str(x)))
  end
  if not x:is_floating_point() then
    error(fmt('%s: input must be a floating point tensor, got %s', self:_label(), x.dtype))
  end
  return x:softmax(-3)
end

---------------------------------------------------------------- distances
M.CosineSimilarity = Module:extend('CosineSimilarity')
local CS, CS_D = { 'dim', 'eps' }, { 2, 1e-8 }
local CS_K = keys(unpack(CS))
--- CosineSimilarity(dim=2, eps=1e-8): dim 2 is PyTorch's default dim=1
function M.CosineSimilarity:__init(a1, a2, a3)
  Module.__init(self)
  init_args(self, 'CosineSimilarity', CS, CS_D, { check_dim, num }, CS_K, a1, a2, a3)
end
function M.CosineSimilarity:forward(x1, x2)
  return L.cosine_similarity(x1, x2, self.dim, self.eps, self:_label())
end
M.CosineSimilarity.extra_repr = reprs(CS, CS_D)

M.PairwiseDistance = Module:extend('PairwiseDistance')
local PD, PD_D = { 'p', 'eps', 'keepdim' }, { 2.0, 1e-6, false }
local PD_K = keys(unpack(PD))
--- PairwiseDistance(p=2, eps=1e-6, keepdim=false); the norm degree is the field `norm`, as PyTorch's
function M.PairwiseDistance:__init(a1, a2, a3, a4)
  Module.__init(self)
  local o = init_args(self, 'PairwiseDistance', PD, PD_D, { num, num, bool }, PD_K, a1, a2, a3, a4)
  rawset(self, 'p', nil)
  rawset(self, 'norm', o.p)
end
function M.PairwiseDistance:forward(x1, x2)
  return L.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim, self:_label())
end
function M.PairwiseDistance:extra_repr() return fmt('p=%g, eps=%g, keepdim=%s', self.norm, self.eps, tostring(self.keepdim)) end

---------------------------------------------------------------- PReLU
M.PReLU = Module:extend('PReLU')
local PR = { 'num_parameters', 'init', 'dtype', 'device' }
local PR_K = keys(unpack(PR))
local function pos_int(v, who, k)
  if type(v) ~= 'number' or v ~= math.floor(v) or v < 1 then
    error(fmt('%s: %s must be an integer >= 1, got %s', who, k, tostring(v)))
  end
  return v
end
--- PReLU(num_parameters=1, init=0.25 [, dtype, device]): weight [num_parameters] filled with init
function M.PReLU:__init(a1, a2, a3, a4)
  Module.__init(self)
  local o = init_args(self, 'PReLU', PR, { 1, 0.25, 'float32' }, { pos_int, num }, PR_K, a1, a2, a3, a4)
  self.weight = Module.Parameter(T.empty(o.num_parameters, { dtype = o.dtype, device = o.device }))
  self:reset_parameters()
end
function M.PReLU:reset_parameters()
  require('dpl.autograd').no_grad(function() self.weight:fill_(self.init) end)
end
function M.PReLU:forward(x)
  check_input(self, x)
  return L.prelu(x, self.weight, self:_label())
end
function M.PReLU:extra_repr() return fmt('num_parameters=%d', self.num_parameters) end

---------------------------------------------------------------- normalisation
M.LocalResponseNorm = Module:extend('LocalResponseNorm')
local LRN, LRN_D = { 'size', 'alpha', 'beta', 'k' }, { REQ, 1e-4, 0.75, 1.0 }
local LRN_K = keys(unpack(LRN))
--- LocalResponseNorm(size, alpha=1e-4, beta=0.75, k=1)
function M.LocalResponseNorm:__init(a1, a2, a3, a4)
  Module.__init(self)
  init_args(self, 'LocalResponseNorm', LRN, LRN_D, { pos_int, num, num, num }, LRN_K, a1, a2, a3, a4)
end
function M.LocalResponseNorm:forward(x)
  check_input(self, x)
  return L.local_response_norm(x, self.size, self.alpha, self.beta, self.k, self:_label())
end
function M.LocalResponseNorm:extra_repr()
  return fmt('%d, alpha=%g, beta=%g, k=%g', self.size, self.alpha, self.beta, self.k)
end

local IN_KEYS = keys('eps', 'momentum', 'affine', 'track_running_stats', 'dtype', 'device')
-- InstanceNorm{1,2,3}d(num_features [, {eps=1e-5, momentum=0.1, affine=false,
-- track_running_stats=false, dtype=, device=}]): parameters and buffers as PyTorch's
-- (weight, bias; running_mean, running_var, num_batches_tracked, which it never advances)
local function instance_norm(cname, nsp)
  local cls = Module:extend(cname)
  local what = ({ '[N, C, L] or [C, L]', '[N, C, H, W] or [C, H, W]', '[N, C, D, H, W] or [C, D, H, W]' })[nsp]
  function cls:__init(C, opts)
    Module.__init(self)
    options.check(opts, IN_KEYS, cname)
    opts = opts or {}
    pos_int(C, cname, 'num_features')
    local eps, mom = opts.eps or 1e-5, opts.momentum
    if mom == nil then mom = 0.1 end
    num(eps, cname, 'eps')
    num(mom, cname, 'momentum')
    self.num_features, self.eps, self.momentum = C, eps, mom
    self.affine = opts.affine ~= nil and bool(opts.affine, cname, 'affine') or false
    self.track_running_stats = opts.track_running_stats ~= nil and bool(opts.track_running_stats, cname,
      'track_running_stats') or false
    local o = { dtype = opts.dtype or 'float32', device = opts.device }
    if self.affine then
      self.weight = Module.Parameter(T.ones(C, o))
      self.bias = Module.Parameter(T.zeros(C, o))
    end
    if self.track_running_stats then
      self:register_buffer('running_mean', T.zeros(C, o))
      self:register_buffer('running_var', T.ones(C, o))
      self:register_buffer('num_batches_tracked', T.zeros({}, { dtype = 'int64', device = opts.device }))
    end
  end
  function cls:forward(x)
    check_input(self, x)
    local nd = x:dim()
    if nd ~= nsp + 1 and nd ~= nsp + 2 then
      error(fmt('%s(%d): input has shape %s, expected %s', self:_label(), self.num_features, shape_str(x), what))
    end
    local unbatched = nd == nsp + 1
    local c = x:size(unbatched and 1 or 2)
    if c ~= self.num_features then
      error(fmt('%s(%d): input has shape %s, expected %d channels in dim %d', self:_label(), self.num_features,
        shape_str(x), self.num_features, unbatched and 1 or 2))
    end
    if unbatched then x = x:unsqueeze(1) end
    local y = L.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
      self.training or not self.track_running_stats, self.momentum, self.eps, self:_label())
    if unbatched then y = y:squeeze(1) end
    return y
  end
  function cls:_load_default(key)
    if key == 'num_batches_tracked' and self.track_running_stats then return T.zeros({}, { dtype = 'int64' }) end
  end
  function cls:extra_repr()
    return fmt('%d, eps=%g, momentum=%g, affine=%s, track_running_stats=%s', self.num_features, self.eps, self.momentum,
      tostring(self.affine), tostring(self.track_running_stats))
  end
  M[cname] = cls
end
instance_norm('InstanceNorm1d', 1)
instance_norm('InstanceNorm2d', 2)
instance_norm('InstanceNorm3d', 3)

return M
