-- dpl.optim.swa_utils: stochastic weight averaging, as torch.optim.swa_utils (1.13):
--   AveragedModel(model [, {device=, avg_fn=, use_buffers=false}])  a copy of model whose
--       parameters are the running average of model's: avg:update_parameters(model)
--   update_bn(loader, model [, device])  recomputes BatchNorm running statistics with one
--       pass over loader (cumulative averages: momentum false, PyTorch's None)
--   SWALR(optimizer, {swa_lr=, anneal_epochs=10, anneal_strategy='cos', last_epoch=-1})
--       anneals each group's lr to swa_lr over anneal_epochs steps, then keeps it there.
-- avg_fn(averaged_param, model_param, num_averaged) receives num_averaged as a number
-- (torch passes a tensor).
local class = require 'dpl.class'
local T = require 'dpl.tensor'
local autograd = require 'dpl.autograd'
local errors = require 'dpl.errors'
local options = require 'dpl.options'

local fmt = string.format
local is_tensor = T.is_tensor

local M = {}

local function value_error(msg, ...) errors.ValueError:raise(fmt(msg, ...), 3) end

local function is_callable(f)
  if type(f) == 'function' then return true end
  local mt = getmetatable(f)
  return type(mt) == 'table' and mt.__call ~= nil
end

local function nn() return require 'dpl.nn' end

--- True when m is a BatchNorm layer (BatchNorm1d/2d/3d, SyncBatchNorm and their subclasses):
--- PyTorch's isinstance(m, _BatchNorm).
function M.is_batchnorm(m)
  local n = nn()
  for _, cls in ipairs({ n.BatchNorm1d, n.BatchNorm2d, n.BatchNorm3d, rawget(n, 'SyncBatchNorm') or n.SyncBatchNorm }) do
    if cls and class.is_instance(m, cls) then return true end
  end
  return false
end

--- A copy of a module tree (copy.deepcopy's role): tensors are cloned (parameters stay
--- parameters, requires_grad kept), modules and plain tables are copied, anything else
--- (classes, functions, other objects such as a trainer the module refers to) is shared.
function M.copy_module(obj, memo)
  memo = memo or {}
  if is_tensor(obj) then
    local c = memo[obj]
    if c then return c end
    c = autograd.no_grad(function() return obj:detach():clone() end)
    if nn().Module.is_parameter(obj) then c = nn().Parameter(c, obj.requires_grad) end
    memo[obj] = c
    return c
  end
  if type(obj) ~= 'table' then return obj end
  local mt = getmetatable(obj)
  if mt ~= nil and not nn().Module.is_module(obj) then return obj end
  local c = memo[obj]
  if c then return c end
  c = {}
  memo[obj] = c
  for k, v in next, obj do c[M.copy_module(k, memo)] = M.copy_module(v, memo) end
  return setmetatable(c, mt)
end

local function default_avg_fn(avg, p, n)
  return avg + (p - avg) / (n + 1)
end

---------------------------------------------------------------- AveragedModel
local AVG_KEYS = options.keys('device', 'avg_fn', 'use_buffers')

local AveragedModel
local function averaged_model_class()
  if AveragedModel then return AveragedModel end
  local Module = nn().Module
  AveragedModel = Module:extend('AveragedModel')
  function AveragedModel:__init(model, ...)
    Module.__init(self)
    if not Module.is_module(model) then
      value_error('AveragedModel: expected an nn.Module to average, got %s', type(model))
    end
    local o = options.positional('AveragedModel', { 'device', 'avg_fn', 'use_buffers' }, ...) or {}
    options.check(o, AVG_KEYS, 'AveragedModel')
    if o.avg_fn ~= nil and not is_callable(o.avg_fn) then
      value_error('AveragedModel: avg_fn must be a function(averaged_param, model_param, num_averaged), got %s', type(o.avg_fn))
    end
    if o.use_buffers ~= nil and type(o.use_buffers) ~= 'boolean' then
      value_error('AveragedModel: use_buffers must be true or false, got %s', tostring(o.use_buffers))
    end
    local copy = M.copy_module(model)
    if o.device ~= nil then copy:to(o.device) end
    self.module = copy
    self:register_buffer('n_averaged', T.zeros({}, { dtype = 'int64', device = o.device }))
    rawset(self, 'avg_fn', o.avg_fn or default_avg_fn)
    rawset(self, 'use_buffers', o.use_buffers == true)
  end
  function AveragedModel:forward(...) return self.module(...) end
  --- update_parameters(model): averages model's parameters (and buffers with use_buffers)
  --- into this copy's; the first call copies them.
  function AveragedModel:update_parameters(model)
    if not Module.is_module(model) then
      value_error('AveragedModel:update_parameters: expected an nn.Module, got %s', type(model))
    end
    local mine, theirs = self.module:parameters(), model:parameters()
    if self.use_buffers then
      for _, b in ipairs(self.module:buffers()) do mine[#mine + 1] = b end
      for _, b in ipairs(model:buffers()) do theirs[#theirs + 1] = b end
    end
    local n = self.n_averaged:item()
    autograd.no_grad(function()
      for i = 1, math.min(#mine, #theirs) do -- (zip)
        local a = mine[i]
        local p = theirs[i]:detach():to(a.device)
        if n == 0 then a:copy_(p) else a:copy_(self.avg_fn(a:detach(), p, n)) end
      end
      self.n_averaged:add_(1)
    end)
  end
  return AveragedModel
end

---------------------------------------------------------------- update_bn
local function first_input(batch)
  if type(batch) == 'table' and not is_tensor(batch) and getmetatable(batch) == nil and batch[1] ~= nil then
    return batch[1]
  end
  return batch
end

--- update_bn(loader, model [, device]): resets the running statistics of model's BatchNorm
--- layers and recomputes them as cumulative averages over one pass of loader (a DataLoader
--- or a list of batches; a batch that is a list gives its first element as the input).
--- Nothing happens when model has no BatchNorm layer.
function M.update_bn(loader, model, device)
  if not nn().Module.is_module(model) then
    value_error('update_bn: expected an nn.Module as the second argument, got %s', type(model))
  end
  local momenta, order = {}, {}
  for _, m in ipairs(model:modules()) do
    if M.is_batchnorm(m) and is_tensor(m.running_mean) then
      autograd.no_grad(function()
        rawset(m, 'running_mean', T.zeros_like(m.running_mean))
        rawset(m, 'running_var', T.ones_like(m.running_var))
      end)
      momenta[m] = m.momentum
      order[#order + 1] = m
    end
  end
  if #order == 0 then return end
  local iter
  local has_iter = (type(loader) == 'table' or type(loader) == 'userdata')
    and select(2, pcall(function() return type(loader.iter) == 'function' end)) == true
  if has_iter then iter = loader:iter()
  elseif type(loader) == 'table' then
    local i = 0
    iter = function() i = i + 1 return loader[i] end
  else
    value_error('update_bn: loader must be a DataLoader or a list of batches, got %s', type(loader))
  end
  local was_training = model.training
  model:train()
  for _, m in ipairs(order) do
    m.momentum = false
    autograd.no_grad(function() m.num_batches_tracked:mul_(0) end)
  end
  local ok, err = pcall(autograd.no_grad, function()
    for batch in iter do
      local input = first_input(batch)
      if device ~= nil then input = input:to(device) end
      model(input)
    end
  end)
  for _, m in ipairs(order) do m.momentum = momenta[m] end
  model:train(was_training)
  if not ok then error(err, 0) end
end

---------------------------------------------------------------- SWALR
local LRScheduler = require('dpl.optim.lr_scheduler').LRScheduler
local SWALR = LRScheduler:extend('SWALR')
M.SWALR = SWALR

local SWALR_KEYS = options.keys('swa_lr', 'anneal_epochs', 'anneal_strategy', 'last_epoch')

local anneal = {
  cos = function(t) return (1 - math.cos(math.pi * t)) / 2 end,
  linear = function(t) return t end,
}

--- SWALR(optimizer, {swa_lr=, anneal_epochs=10, anneal_strategy='cos', last_epoch=-1}), or
--- PyTorch's positional form SWALR(optimizer, swa_lr, anneal_epochs, anneal_strategy, last_epoch).
function SWALR:__init(optimizer, ...)
  if type(optimizer) ~= 'table' or type(optimizer.param_groups) ~= 'table' then
    value_error('SWALR: expected an optimizer as the first argument, got %s', type(optimizer))
  end
  local o = options.positional('SWALR', { 'swa_lr', 'anneal_epochs', 'anneal_strategy', 'last_epoch' }, ...) or {}
  options.check(o, SWALR_KEYS, 'SWALR')
  local groups = optimizer.param_groups
  local swa_lrs = {}
  if type(o.swa_lr) == 'table' then
    if #o.swa_lr ~= #groups then
      value_error('swa_lr must have the same length as optimizer.param_groups: swa_lr has %d, optimizer.param_groups has %d',
        #o.swa_lr, #groups)
    end
    for i = 1, #groups do swa_lrs[i] = o.swa_lr[i] end
  else
    for i = 1, #groups do swa_lrs[i] = o.swa_lr end
  end
  for i, v in ipairs(swa_lrs) do
    if type(v) ~= 'number' or v ~= v then value_error('SWALR: swa_lr must be a number or a list of numbers, got %s', tostring(v)) end
    groups[i].swa_lr = v
  end
  if #groups > 0 and swa_lrs[1] == nil then value_error('SWALR: swa_lr is required') end
  local strategy = o.anneal_strategy == nil and 'cos' or o.anneal_strategy
  if not anneal[strategy] then
    value_error("anneal_strategy must by one of 'cos' or 'linear', instead got %s", tostring(strategy))
  end
  local ae = o.anneal_epochs == nil and 10 or o.anneal_epochs
  if type(ae) ~= 'number' or ae ~= math.floor(ae) or ae < 0 then
    value_error('anneal_epochs must be equal or greater than 0, got %s', tostring(ae))
  end
  self.anneal_strategy = strategy
  self.anneal_epochs = ae
  LRScheduler.__init(self, optimizer, o.last_epoch)
end

local function initial_lr(lr, swa_lr, alpha)
  if alpha == 1 then return swa_lr end
  return (lr - alpha * swa_lr) / (1 - alpha)
end

function SWALR:get_lr()
  local f = anneal[self.anneal_strategy]
  local step = self._step_count - 1
  if self.anneal_epochs == 0 then step = math.max(1, step) end
  local span = math.max(1, self.anneal_epochs)
  local prev_alpha = f(math.max(0, math.min(1, (step - 1) / span)))
  local alpha = f(math.max(0, math.min(1, step / span)))
  local r = {}
  for i, g in ipairs(self.optimizer.param_groups) do
    local prev = initial_lr(g.lr, g.swa_lr, prev_alpha)
    r[i] = g.swa_lr * alpha + prev * (1 - alpha)
  end
  return r
end

setmetatable(M, { __index = function(t, k)
  if k == 'AveragedModel' then
    local v = averaged_model_class()
    rawset(t, k, v)
    return v
  end
end })

return M
