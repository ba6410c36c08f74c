-- dpl.callbacks.stochastic_weight_avg: StochasticWeightAveraging, as Lightning 1.9.5's.
-- Owns the running average of the module's parameters (a snapshot taken at `setup`,
-- averaged at the start of each epoch from swa_start to the last), the swap of the
-- user's lr scheduler for dpl.optim.swa_utils.SWALR, the copy of the average into the
-- module when training ends and, for a module with BatchNorm layers, the extra epoch
-- that recomputes their running statistics (forward passes only), and its checkpoint
-- state {n_averaged, latest_update_epoch, scheduler_state, average_model_state}.
local errors = require 'dpl.errors'
local log = require 'dpl.log'
local autograd = require 'dpl.autograd'
local Callback = require 'dpl.callbacks.callback'
local swa_utils = require 'dpl.optim.swa_utils'

local Misconfiguration = errors.MisconfigurationException
local fmt = string.format

local SWA = Callback:extend('StochasticWeightAveraging')

local KEYS = { swa_lrs = true, swa_epoch_start = true, annealing_epochs = true, annealing_strategy = true,
  avg_fn = true, device = true }

local function is_int(v) return type(v) == 'number' and v == math.floor(v) and v > -math.huge and v < math.huge end
local function is_callable(f)
  if type(f) == 'function' then return true end
  local mt = getmetatable(f)
  return type(mt) == 'table' and mt.__call ~= nil
end

--- StochasticWeightAveraging{swa_lrs=, swa_epoch_start=0.8, annealing_epochs=10,
--- annealing_strategy='cos', avg_fn=, device='cpu'}. swa_epoch_start: an integer >= 1 is the
--- (1-based) epoch where averaging starts; a number strictly between 0 and 1 is a fraction of
--- max_epochs (Lightning's float).
function SWA:__init(o)
  Callback.__init(self)
  if type(o) ~= 'table' then
    Misconfiguration:raise(fmt('StochasticWeightAveraging expects a table of options {swa_lrs = ..., ...}, got %s', type(o)), 2)
  end
  for k in pairs(o) do
    if not KEYS[k] then Misconfiguration:raise(fmt('StochasticWeightAveraging got an unknown argument: %s', tostring(k)), 2) end
  end
  local start = o.swa_epoch_start == nil and 0.8 or o.swa_epoch_start
  local err_msg = 'swa_epoch_start should be a >0 integer or a float between 0 and 1.'
  if type(start) ~= 'number' or start ~= start then Misconfiguration:raise(err_msg, 2) end
  if is_int(start) and start < 1 then Misconfiguration:raise(err_msg, 2) end
  if not is_int(start) and not (start > 0 and start < 1) then Misconfiguration:raise(err_msg, 2) end
  local lrs = o.swa_lrs
  local ok = false
  if type(lrs) == 'number' then ok = lrs > 0
  elseif type(lrs) == 'table' and getmetatable(lrs) == nil and #lrs > 0 then
    ok = true
    for _, v in ipairs(lrs) do if type(v) ~= 'number' or not (v > 0) then ok = false end end
  end
  if not ok then Misconfiguration:raise('The `swa_lrs` should a positive float, or a list of positive floats', 2) end
  if o.avg_fn ~= nil and not is_callable(o.avg_fn) then Misconfiguration:raise('The `avg_fn` should be callable.', 2) end
  local ae = o.annealing_epochs == nil and 10 or o.annealing_epochs
  if not is_int(ae) or ae < 0 then
    errors.ValueError:raise(fmt('annealing_epochs must be equal or greater than 0, got %s', tostring(ae)), 2)
  end
  local strat = o.annealing_strategy == nil and 'cos' or o.annealing_strategy
  if strat ~= 'cos' and strat ~= 'linear' then
    errors.ValueError:raise(fmt("anneal_strategy must by one of 'cos' or 'linear', instead got %s", tostring(strat)), 2)
  end
  local dev = o.device
  if dev == nil then dev = 'cpu' end
  if dev ~= false and type(dev) ~= 'string' and not require('dpl.devices').is_device(dev) then
    Misconfiguration:raise(fmt('device is expected to be a device or a str. Found %s', tostring(dev)), 2)
  end
  self._swa_epoch_start = start
  self._swa_lrs = lrs
  self._annealing_epochs = ae
  self._annealing_strategy = strat
  self._avg_fn = o.avg_fn or SWA.avg_fn
  self._device = dev ~= false and dev or nil -- false: the module's device (Lightning's None)
  self.n_averaged = nil
  self._model_contains_batch_norm = nil
  self._average = nil          -- {params = {...}, buffers = {{name, tensor}, ...}}
  self._initialized = false
  self._swa_scheduler = nil
  self._scheduler_state = nil
  self._init_n_averaged = 0
  self._latest_update_epoch = -1
  self.momenta = {}
end

--- The default average: avg + (p - avg) / (n + 1).
function SWA.avg_fn(avg, p, n) return avg + (p - avg) / (n + 1) end

--- 0-based epochs of the averaging window.
function SWA:swa_start() return math.max(self._swa_epoch_start - 1, 0) end
function SWA:swa_end() return self._max_epochs - 1 end

function SWA.pl_module_contains_batch_norm(pl_module)
  for _, m in ipairs(pl_module:modules()) do
    if swa_utils.is_batchnorm(m) then return true end
  end
  return false
end

local function clone(t) return autograd.no_grad(function() return t:detach():clone() end) end

-- the copy of the module's state that is averaged (Lightning's deepcopy of the module)
function SWA:setup(trainer, pl_module, stage)
  local params, buffers = {}, {}
  for name, p in pl_module:named_parameters() do params[#params + 1] = { name, clone(p) } end
  for name, b in pl_module:named_buffers() do buffers[#buffers + 1] = { name, clone(b) } end
  self._average = { params = params, buffers = buffers }
end

function SWA:on_fit_start(trainer, pl_module)
  if #trainer.optimizers ~= 1 then Misconfiguration:raise('SWA currently works with 1 `optimizer`.', 0) end
  if #trainer.lr_scheduler_configs > 1 then
    Misconfiguration:raise('SWA currently not supported for more than 1 `lr_scheduler`.', 0)
  end
  if trainer.max_epochs == nil or trainer.max_epochs < 0 then
    Misconfiguration:raise('StochasticWeightAveraging needs `max_epochs` (the averaging ends at the last epoch), got -1', 0)
  end
  if not is_int(self._swa_epoch_start) then
    self._swa_epoch_start = math.floor(trainer.max_epochs * self._swa_epoch_start)
  end
  self._model_contains_batch_norm = SWA.pl_module_contains_batch_norm(pl_module)
  self._max_epochs = trainer.max_epochs
  if self._model_contains_batch_norm then
    -- one more epoch: the pass that recomputes the BatchNorm statistics
    trainer.max_epochs = trainer.max_epochs + 1
  end
  if self._scheduler_state ~= nil then
    -- restored from a checkpoint: the SWALR state is loaded at the start of the epoch, not into
    -- the user's scheduler
    local cfgs = trainer.lr_scheduler_configs
    for i = #cfgs, 1, -1 do cfgs[i] = nil end
  end
end

local function sched_repr(cfg)
  local mt = getmetatable(cfg.scheduler)
  return fmt("LRSchedulerConfig(scheduler=%s, name=%s, interval='%s', frequency=%d, reduce_on_plateau=%s, monitor=%s, strict=%s, opt_idx=%s)",
    mt and mt.__name or tostring(cfg.scheduler), tostring(cfg.name), tostring(cfg.interval), cfg.frequency or 1,
    cfg.reduce_on_plateau and 'True' or 'False', tostring(cfg.monitor), cfg.strict == false and 'False' or 'True',
    tostring(cfg.opt_idx))
end

function SWA:on_train_epoch_start(trainer, pl_module)
  local epoch = trainer.current_epoch
  local start, stop = self:swa_start(), self:swa_end()
  if not self._initialized and start <= epoch and epoch <= stop then
    self._initialized = true
    local params = pl_module:parameters()
    local dev = self._device or (params[1] and params[1].device)
    if dev ~= nil then
      for _, e in ipairs(self._average.params) do e[2] = e[2]:to(dev) end
    end
    local opt = trainer.optimizers[1]
    local lrs = self._swa_lrs
    if type(lrs) == 'number' then
      local l = {}
      for i = 1, #opt.param_groups do l[i] = lrs end
      lrs = l
      self._swa_lrs = l
    end
    for i, g in ipairs(opt.param_groups) do
      if lrs[i] ~= nil then g.initial_lr = lrs[i] end
    end
    self._swa_scheduler = swa_utils.SWALR(opt, { swa_lr = lrs, anneal_epochs = self._annealing_epochs,
      anneal_strategy = self._annealing_strategy,
      last_epoch = self._annealing_strategy == 'cos' and trainer.max_epochs or -1 })
    if self._scheduler_state ~= nil then
      self._swa_scheduler:load_state_dict(self._scheduler_state)
    elseif epoch ~= start then
      log.warn('SWA is initializing after swa_start without any checkpoint data. This may be caused by loading a'
        .. ' checkpoint from an older version of PyTorch Lightning.')
    end
    local cfg = { scheduler = self._swa_scheduler, interval = 'epoch', frequency = 1, opt_idx = 0, strict = true,
      reduce_on_plateau = false }
    local cfgs = trainer.lr_scheduler_configs
    if #cfgs > 0 then
      local old = cfgs[1]
      if old.interval ~= 'epoch' or (old.frequency or 1) ~= 1 then
        log.warn('SWA is currently only supported every epoch. Found %s', sched_repr(old))
      end
      local mt = getmetatable(old.scheduler)
      if trainer.is_global_zero then
        log.info('Swapping scheduler `%s` for `SWALR`', mt and mt.__name or tostring(old.scheduler))
      end
      cfgs[1] = cfg
    else
      cfgs[1] = cfg
    end
    if self.n_averaged == nil then self.n_averaged = self._init_n_averaged end
  end
  if start <= epoch and epoch <= stop and epoch > self._latest_update_epoch then
    self:update_parameters(pl_module)
    self._latest_update_epoch = epoch
  end
  if epoch == stop + 1 then
    -- the BatchNorm epoch: the average into the module, fresh statistics, forward passes only
    self:transfer_weights(pl_module)
    self:reset_batch_norm_and_save_state(pl_module)
    trainer.fit_loop._skip_backward = true
  end
end

function SWA:on_train_epoch_end(trainer)
  trainer.fit_loop._skip_backward = false
end

function SWA:on_train_end(trainer, pl_module)
  -- (current_epoch was advanced before this hook)
  local stop = self._max_epochs and self:swa_end()
  if stop == nil then return end
  if self._model_contains_batch_norm and trainer.current_epoch - 1 == stop + 1 then
    trainer.max_epochs = trainer.max_epochs - 1
    self:reset_momenta()
  elseif trainer.current_epoch - 1 == stop then
    self:transfer_weights(pl_module)
  end
end

--- Averages pl_module's parameters into the copy (the first update copies them).
function SWA:update_parameters(pl_module)
  local mine, theirs = self._average.params, pl_module:parameters()
  local n = self.n_averaged
  local f = self._avg_fn
  autograd.no_grad(function()
    for i = 1, math.min(#mine, #theirs) do
      local a = mine[i][2]
      local p = theirs[i]:detach():to(a.device)
      if n == 0 then a:copy_(p) else a:copy_(f(a, p, n)) end
    end
  end)
  self.n_averaged = n + 1
end

--- Copies the averaged parameters into pl_module's.
function SWA:transfer_weights(pl_module)
  local src, dst = self._average.params, pl_module:parameters()
  autograd.no_grad(function()
    for i = 1, math.min(#src, #dst) do dst[i]:copy_(src[i][2]:to(dst[i].device)) end
  end)
end

function SWA:reset_batch_norm_and_save_state(pl_module)
  local T = require 'dpl.tensor'
  self.momenta = {}
  for _, m in ipairs(pl_module:modules()) do
    if swa_utils.is_batchnorm(m) and m.running_mean ~= nil then
      autograd.no_grad(function()
        rawset(m, 'running_mean', T.zeros_like(m.running_mean))
        rawset(m, 'running_var', T.ones_like(m.running_var))
        m.num_batches_tracked:mul_(0)
      end)
      self.momenta[#self.momenta + 1] = { m, m.momentum }
      m.momentum = false -- a cumulative average (PyTorch's None)
    end
  end
end

function SWA:reset_momenta()
  for _, e in ipairs(self.momenta) do e[1].momentum = e[2] end
end

function SWA:state_dict()
  local avg
  if self._average ~= nil then
    avg = {}
    for _, e in ipairs(self._average.params) do avg[e[1]] = e[2] end
    for _, e in ipairs(self._average.buffers) do avg[e[1]] = e[2] end
  end
  return {
    n_averaged = self.n_averaged or 0,
    latest_update_epoch = self._latest_update_epoch,
    scheduler_state = self._swa_scheduler and self._swa_scheduler:state_dict() or nil,
    average_model_state = avg,
  }
end

function SWA:load_state_dict(sd)
  if type(sd) ~= 'table' then
    errors.ValueError:raise(fmt('StochasticWeightAveraging.load_state_dict expects a table, got %s', type(sd)), 2)
  end
  self._init_n_averaged = sd.n_averaged or 0
  self._latest_update_epoch = sd.latest_update_epoch or -1
  self._scheduler_state = sd.scheduler_state
  local st = sd.average_model_state
  if self._average ~= nil and type(st) == 'table' then
    local T = require 'dpl.tensor'
    local function load(e)
      local v = st[e[1]]
      if v == nil then return end
      -- (a float64 tensor may come back from the checkpoint as its flat list of numbers)
      if not T.is_tensor(v) then v = T.tensor(type(v) == 'table' and v or { v }, { dtype = e[2].dtype }):view_as(e[2]) end
      e[2]:copy_(v)
    end
    autograd.no_grad(function()
      for _, e in ipairs(self._average.params) do load(e) end
      for _, e in ipairs(self._average.buffers) do load(e) end
    end)
  end
end

Callback._mark_lazy_metrics_ok(SWA)

return SWA
