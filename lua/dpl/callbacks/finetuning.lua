-- dpl.callbacks.finetuning: BaseFinetuning and BackboneFinetuning (Lightning 1.9.5's).
-- BaseFinetuning owns the freeze / unfreeze helpers (freeze, freeze_module, make_trainable,
-- flatten_modules, filter_params, filter_on_optimizer, unfreeze_and_add_param_group), calls
-- the subclass's freeze_before_training(pl_module) at setup and
-- finetune_function(pl_module, epoch, optimizer, opt_idx) at each train epoch start, and
-- checkpoints the optimizers' param groups (parameters by name) so that a resumed fit gets
-- the groups it added back. BackboneFinetuning freezes `pl_module.backbone` and unfreezes it
-- at unfreeze_backbone_at_epoch in a new param group whose lr then follows lambda_func.
-- Returns {BaseFinetuning = ..., BackboneFinetuning = ...}.
local errors = require 'dpl.errors'
local log = require 'dpl.log'
local Callback = require 'dpl.callbacks.callback'
local swa_utils = require 'dpl.optim.swa_utils'

local Misconfiguration = errors.MisconfigurationException
local fmt = string.format

local BaseFinetuning = Callback:extend('BaseFinetuning')

local function is_module(m) return type(m) == 'table' and rawget(m, '_is_module') == true end
local is_bn = swa_utils.is_batchnorm

function BaseFinetuning:__init()
  Callback.__init(self)
  self._internal_optimizer_metadata = {} -- [opt_idx + 1] = {group, ...} with params as names
  self._restarting = false
end

function BaseFinetuning:state_dict()
  return { internal_optimizer_metadata = self._internal_optimizer_metadata }
end

function BaseFinetuning:load_state_dict(sd)
  if type(sd) ~= 'table' then
    errors.ValueError:raise(fmt('%s.load_state_dict expects a table, got %s', getmetatable(self).__name, type(sd)), 2)
  end
  self._restarting = true
  self._internal_optimizer_metadata = sd.internal_optimizer_metadata or sd
end

local function named_parameter_map(pl_module)
  local by_name, by_param = {}, {}
  for name, p in pl_module:named_parameters() do by_name[name] = p; by_param[p] = name end
  return by_name, by_param
end

function BaseFinetuning:on_fit_start(trainer, pl_module)
  if not self._restarting then return end
  local by_name = named_parameter_map(pl_module)
  for i, opt in ipairs(trainer.optimizers) do
    local groups = self._internal_optimizer_metadata[i]
    if groups ~= nil then opt.param_groups = BaseFinetuning._apply_mapping_to_param_groups(groups, by_name) end
  end
  self._restarting = false
end

-- a module, or a (nested) list of modules -> the list given as is
local function check_modules(modules, fn)
  if is_module(modules) then return end
  if type(modules) == 'table' and getmetatable(modules) == nil then
    for i, m in ipairs(modules) do
      if not is_module(m) and not (type(m) == 'table' and getmetatable(m) == nil) then
        errors.TypeError:raise(fmt('BaseFinetuning.%s: element %d is not an nn.Module (got %s)', fn, i, type(m)), 3)
      end
    end
    return
  end
  errors.TypeError:raise(fmt('BaseFinetuning.%s: expected an nn.Module or a list of modules, got %s', fn, type(modules)), 3)
end

--- The leaf modules, and the modules that hold parameters of their own, of a module or a
--- (nested) list of modules.
function BaseFinetuning.flatten_modules(modules)
  check_modules(modules, 'flatten_modules')
  local all = {}
  local function walk(x)
    if is_module(x) then
      for _, m in ipairs(x:modules()) do all[#all + 1] = m end
    else
      for _, m in ipairs(x) do walk(m) end
    end
  end
  walk(modules)
  local out = {}
  for _, m in ipairs(all) do
    if #m:children() == 0 or #m:parameters(false) > 0 then out[#out + 1] = m end
  end
  return out
end

--- The parameters of the modules whose requires_grad is `requires_grad` (default true);
--- train_bn = false leaves out the BatchNorm layers' (a list, where Lightning yields).
function BaseFinetuning.filter_params(modules, train_bn, requires_grad)
  if train_bn == nil then train_bn = true end
  if requires_grad == nil then requires_grad = true end
  local out = {}
  for _, m in ipairs(BaseFinetuning.flatten_modules(modules)) do
    if not (is_bn(m) and not train_bn) then
      for _, p in ipairs(m:parameters(false)) do
        if p.requires_grad == requires_grad then out[#out + 1] = p end
      end
    end
  end
  return out
end

--- requires_grad on every parameter of the modules; BatchNorm layers track running stats again.
function BaseFinetuning.make_trainable(modules)
  for _, m in ipairs(BaseFinetuning.flatten_modules(modules)) do
    if is_bn(m) then m.track_running_stats = true end
    for _, p in ipairs(m:parameters(false)) do p.requires_grad = true end
  end
end

--- Freezes one module's own parameters (a BatchNorm layer stops tracking running stats).
function BaseFinetuning.freeze_module(module)
  if not is_module(module) then
    errors.TypeError:raise(fmt('BaseFinetuning.freeze_module: expected an nn.Module, got %s', type(module)), 2)
  end
  if is_bn(module) then module.track_running_stats = false end
  for _, p in ipairs(module:parameters(false)) do p.requires_grad = false end
end

--- Freezes the modules; with train_bn (default true) BatchNorm layers stay trainable.
function BaseFinetuning.freeze(modules, train_bn)
  if train_bn == nil then train_bn = true end
  for _, m in ipairs(BaseFinetuning.flatten_modules(modules)) do
    if is_bn(m) and train_bn then BaseFinetuning.make_trainable(m) else BaseFinetuning.freeze_module(m) end
  end
end

--- The params that are in no param group of the optimizer yet (the others are left out with
--- Lightning's warning). (Lightning compares values with torch.equal; dplhost compares identity.)
function BaseFinetuning.filter_on_optimizer(optimizer, params)
  local have = {}
  for _, g in ipairs(optimizer.param_groups) do
    for _, p in ipairs(g.params) do have[p] = true end
  end
  local out, removed = {}, 0
  for _, p in ipairs(params) do
    if have[p] then removed = removed + 1 else out[#out + 1] = p end
  end
  if removed > 0 then
    local mt = getmetatable(optimizer)
    log.warn('The provided params to be frozen already exist within another group of this optimizer. Those parameters'
      .. ' will be skipped.\nHINT: Did you init your optimizer in `configure_optimizer` as such:\n %s(filter(lambda p:'
      .. ' p.requires_grad, self.parameters()), ...) ', mt and mt.__name or 'Optimizer')
  end
  return out
end

--- Unfreezes the modules and adds their parameters that the optimizer lacks as a new param
--- group, with lr (default: the first group's lr / initial_denom_lr).
function BaseFinetuning.unfreeze_and_add_param_group(modules, optimizer, lr, initial_denom_lr, train_bn)
  if type(optimizer) ~= 'table' or type(optimizer.param_groups) ~= 'table' or type(optimizer.add_param_group) ~= 'function' then
    errors.TypeError:raise(fmt('BaseFinetuning.unfreeze_and_add_param_group: expected an optimizer with add_param_group, got %s',
      type(optimizer)), 2)
  end
  if lr ~= nil and type(lr) ~= 'number' then
    errors.TypeError:raise(fmt('BaseFinetuning.unfreeze_and_add_param_group: lr must be a number, got %s', type(lr)), 2)
  end
  if initial_denom_lr == nil then initial_denom_lr = 10 end
  if train_bn == nil then train_bn = true end
  BaseFinetuning.make_trainable(modules)
  local params_lr = lr == nil and optimizer.param_groups[1].lr or lr
  local denom = lr == nil and initial_denom_lr or 1
  local params = BaseFinetuning.filter_on_optimizer(optimizer, BaseFinetuning.filter_params(modules, train_bn, true))
  if #params > 0 then optimizer:add_param_group({ params = params, lr = params_lr / denom }) end
end

function BaseFinetuning:setup(trainer, pl_module)
  self:freeze_before_training(pl_module)
end

-- groups with params as names -> groups with the parameters (mapping: name -> parameter), and back
function BaseFinetuning._apply_mapping_to_param_groups(groups, mapping)
  local out = {}
  for i, g in ipairs(groups) do
    local ng = {}
    for k, v in pairs(g) do if k ~= 'params' then ng[k] = v end end
    ng.params = {}
    for j, p in ipairs(g.params) do
      local q = mapping[p]
      if q == nil then
        errors.RuntimeError:raise(fmt('BaseFinetuning: param group %d, parameter %d (%s) is not a parameter of the module',
          i, j, tostring(p)), 0)
      end
      ng.params[j] = q
    end
    out[i] = ng
  end
  return out
end

function BaseFinetuning:_store(pl_module, opt_idx, num_param_groups, current)
  local _, by_param = named_parameter_map(pl_module)
  local key = opt_idx + 1
  local md = self._internal_optimizer_metadata
  if md[key] == nil then
    md[key] = BaseFinetuning._apply_mapping_to_param_groups(current, by_param)
  elseif num_param_groups ~= #current then
    local extra = {}
    for i = num_param_groups + 1, #current do extra[#extra + 1] = current[i] end
    for _, g in ipairs(BaseFinetuning._apply_mapping_to_param_groups(extra, by_param)) do md[key][#md[key] + 1] = g end
  end
end

function BaseFinetuning:on_train_epoch_start(trainer, pl_module)
  -- the optimizers active at batch 0 (with optimizer frequencies: the first one)
  local opts = trainer.optimizers
  local freqs = trainer.strategy and trainer.strategy.optimizer_frequencies
  local n = (freqs ~= nil and #freqs > 0) and math.min(1, #opts) or #opts
  for i = 1, n do
    local opt = opts[i]
    local before = #opt.param_groups
    self:finetune_function(pl_module, trainer.current_epoch, opt, i - 1)
    self:_store(pl_module, i - 1, before, opt.param_groups)
  end
end

function BaseFinetuning:finetune_function()
  errors.NotImplementedError:raise(fmt('%s must define finetune_function(pl_module, epoch, optimizer, opt_idx)',
    getmetatable(self).__name), 2)
end

function BaseFinetuning:freeze_before_training()
  errors.NotImplementedError:raise(fmt('%s must define freeze_before_training(pl_module)', getmetatable(self).__name), 2)
end

---------------------------------------------------------------- BackboneFinetuning
local BackboneFinetuning = BaseFinetuning:extend('BackboneFinetuning')

local KEYS = { unfreeze_backbone_at_epoch = 'int', lambda_func = 'function', backbone_initial_ratio_lr = 'number',
  backbone_initial_lr = 'number', should_align = 'boolean', initial_denom_lr = 'number', train_bn = 'boolean',
  verbose = 'boolean', rounding = 'int' }

--- Lightning's default lambda_func: the backbone's lr doubles every epoch.
function BackboneFinetuning.multiplicative() return 2.0 end

local function is_callable(f)
  if type(f) == 'function' then return true end
  local mt = getmetatable(f)
  return type(mt) == 'table' and mt.__call ~= nil
end

--- BackboneFinetuning{unfreeze_backbone_at_epoch=10, lambda_func=multiplicative,
--- backbone_initial_ratio_lr=0.1, backbone_initial_lr=nil, should_align=true,
--- initial_denom_lr=10, train_bn=true, verbose=false, rounding=12}
function BackboneFinetuning:__init(o)
  BaseFinetuning.__init(self)
  if o ~= nil and type(o) ~= 'table' then
    Misconfiguration:raise(fmt('BackboneFinetuning expects a table of options, got %s', type(o)), 2)
  end
  o = o or {}
  for k, v in pairs(o) do
    local kind = KEYS[k]
    if kind == nil then Misconfiguration:raise(fmt('BackboneFinetuning got an unknown argument: %s', tostring(k)), 2) end
    local ok
    if kind == 'int' then ok = type(v) == 'number' and v == math.floor(v)
    elseif kind == 'function' then ok = is_callable(v)
    else ok = type(v) == kind end
    if not ok then
      Misconfiguration:raise(fmt('BackboneFinetuning: %s must be %s, got %s', k,
        kind == 'int' and 'an integer' or kind == 'function' and 'a function' or ('a ' .. kind), tostring(v)), 2)
    end
  end
  local function get(k, d) if o[k] == nil then return d end return o[k] end
  self.unfreeze_backbone_at_epoch = get('unfreeze_backbone_at_epoch', 10)
  self.lambda_func = get('lambda_func', BackboneFinetuning.multiplicative)
  self.backbone_initial_ratio_lr = get('backbone_initial_ratio_lr', 0.1)
  self.backbone_initial_lr = o.backbone_initial_lr
  self.should_align = get('should_align', true)
  self.initial_denom_lr = get('initial_denom_lr', 10)
  self.train_bn = get('train_bn', true)
  self.verbose = get('verbose', false)
  self.rounding = get('rounding', 12)
  self.previous_backbone_lr = nil
end

function BackboneFinetuning:state_dict()
  return { internal_optimizer_metadata = self._internal_optimizer_metadata, previous_backbone_lr = self.previous_backbone_lr }
end

function BackboneFinetuning:load_state_dict(sd)
  if type(sd) == 'table' then self.previous_backbone_lr = sd.previous_backbone_lr end
  BaseFinetuning.load_state_dict(self, sd)
end

local function check_backbone(pl_module)
  if not is_module(rawget(pl_module, 'backbone') or pl_module.backbone) then
    Misconfiguration:raise('The LightningModule should have a nn.Module `backbone` attribute', 0)
  end
end

function BackboneFinetuning:on_fit_start(trainer, pl_module)
  check_backbone(pl_module)
  return BaseFinetuning.on_fit_start(self, trainer, pl_module)
end

function BackboneFinetuning:freeze_before_training(pl_module)
  check_backbone(pl_module) -- (Lightning fails here with an AttributeError)
  self.freeze(pl_module.backbone)
end

-- Python's repr(round(x, n))
local function rounded(x, n)
  local s = fmt('%.' .. n .. 'f', x):gsub('0+$', '')
  if s:sub(-1) == '.' then s = s .. '0' end
  return s
end

function BackboneFinetuning:finetune_function(pl_module, epoch, optimizer)
  local at = self.unfreeze_backbone_at_epoch
  if epoch == at then
    local current = optimizer.param_groups[1].lr
    local initial = self.backbone_initial_lr or current * self.backbone_initial_ratio_lr
    self.previous_backbone_lr = initial
    self.unfreeze_and_add_param_group(pl_module.backbone, optimizer, initial, self.initial_denom_lr, self.train_bn)
    if self.verbose then
      log.info('Current lr: %s, Backbone lr: %s', rounded(current, self.rounding), rounded(initial, self.rounding))
    end
  elseif epoch > at then
    local current = optimizer.param_groups[1].lr
    local nxt = self.lambda_func(epoch + 1) * self.previous_backbone_lr
    if self.should_align and nxt > current then nxt = current end
    optimizer.param_groups[#optimizer.param_groups].lr = nxt
    self.previous_backbone_lr = nxt
    if self.verbose then
      log.info('Current lr: %s, Backbone lr: %s', rounded(current, self.rounding), rounded(nxt, self.rounding))
    end
  end
end


return { BaseFinetuning = BaseFinetuning, BackboneFinetuning = BackboneFinetuning }
