-- dpl.fabric: dpl.Fabric, Lightning 1.9's Fabric (formerly LightningLite) for a training loop
-- written by hand: the Trainer's accelerator/devices/strategy/precision selection
-- (dpl.trainer.connector), launching (the processes a launcher started, ddp_spawn's forked
-- workers, ddp's re-run script), setup of modules/optimizers/loaders (device, rank 0's
-- parameters, DistributedSampler), backward with DDP's bucketed gradient all-reduce
-- (dpl.strategies.ddp), collectives, checkpoints, callbacks and loggers. docs/trainer.md
-- ("Fabric") lists the API and where it differs from Lightning.
local class = require 'dpl.class'
local errors = require 'dpl.errors'
local W = require 'dpl.fabric_wrappers'

local Fabric = class.Object:extend('Fabric')

local fmt = string.format

local FC = require 'dpl.fabric_collectives'
local is_tensor, describe = FC._is_tensor, FC._describe

local function is_nn_module(x) return type(x) == 'table' and rawget(x, '_is_module') == true end
local function is_optimizer(x)
  return type(x) == 'table' and type(x.param_groups) == 'table' and type(x.step) == 'function'
    and type(x.zero_grad) == 'function'
end
-- a plain table given last: an options table ({move_to_device = false}, ...)
local function is_opts(x) return type(x) == 'table' and getmetatable(x) == nil and x[1] == nil end

local KEYS = require('dpl.options').keys('accelerator', 'devices', 'strategy', 'num_nodes', 'precision', 'plugins',
  'callbacks', 'loggers')
-- strategies Fabric runs with (the others raise in the constructor)
local SUPPORTED = { single_device = true, ddp = true, ddp_spawn = true, ddp_fork = true, ddp_notebook = true,
  horovod = true, ddp_find_unused_parameters_false = true, ddp_spawn_find_unused_parameters_false = true,
  ddp_fork_find_unused_parameters_false = true, ddp_notebook_find_unused_parameters_false = true }
local SPAWNING = { ddp_spawn = true, ddp_fork = true, ddp_notebook = true, ddp_spawn_find_unused_parameters_false = true,
  ddp_fork_find_unused_parameters_false = true, ddp_notebook_find_unused_parameters_false = true }

-- a list (plain table with an array part, or empty) or one object -> a list
local function as_list(v)
  if v == nil then return {} end
  if type(v) == 'table' and getmetatable(v) == nil and (next(v) == nil or v[1] ~= nil) then
    local out = {}
    for i = 1, #v do out[i] = v[i] end
    return out
  end
  return { v }
end

--- Fabric{accelerator=, devices=, strategy=, num_nodes=1, precision=32, plugins=nil, callbacks=, loggers=}
function Fabric:__init(opts)
  if opts == nil then opts = {} end
  if type(opts) ~= 'table' or getmetatable(opts) ~= nil then
    errors.TypeError:raise(fmt('Fabric{...}: expected an options table, got %s', describe(opts)), 3)
  end
  require('dpl.options').check(opts, KEYS, 'Fabric')
  if opts.plugins ~= nil then
    errors.NotImplementedError:raise('Fabric: plugins= is not supported by dplhost (set precision=, accelerator='
      .. ' and devices= instead)', 3)
  end
  local nn = opts.num_nodes
  if nn == nil then nn = 1 end
  if type(nn) ~= 'number' or nn < 1 or nn % 1 ~= 0 then
    errors.ValueError:raise(fmt('`num_nodes` must be a positive integer, but got %s.', describe(nn)), 3)
  end
  local connector = require 'dpl.trainer.connector'
  local a = { accelerator = opts.accelerator, devices = opts.devices, strategy = opts.strategy, num_nodes = nn,
    precision = opts.precision == nil and 32 or opts.precision }
  local sel = connector.select(a)
  -- Lightning's Fabric picks 'ddp' for several devices (the Trainer 1.9 picks ddp_spawn)
  if opts.strategy == nil and SPAWNING[sel.strategy.strategy_name] then
    a.strategy = 'ddp'
    sel = connector.select(a)
  end
  local s = sel.strategy
  if not SUPPORTED[s.strategy_name] then
    errors.NotImplementedError:raise(fmt("Fabric: strategy '%s' is not supported by dpl.Fabric (single_device, ddp,"
      .. ' ddp_spawn/ddp_fork/ddp_notebook and horovod are)', s.strategy_name), 3)
  end
  self.strategy = s
  self.accelerator = sel.accelerator
  self.precision = sel.precision
  s.precision = sel.precision
  if sel.precision == 16 then self._scaler = require('dpl.amp').GradScaler() end
  self._mode = sel.precision == 'bf16' and 'bfloat16' or sel.precision == 16 and 'float16'
    or sel.precision == 64 and 'float64' or nil
  self.callbacks = as_list(opts.callbacks)
  for i, cb in ipairs(self.callbacks) do
    if type(cb) ~= 'table' and type(cb) ~= 'userdata' then
      errors.TypeError:raise(fmt('Fabric: callbacks[%d] must be an object (a table of hook methods), got %s', i,
        describe(cb)), 3)
    end
  end
  self.loggers = as_list(opts.loggers)
  for i, lg in ipairs(self.loggers) do
    local ok, f = pcall(function() return lg.log_metrics end)
    if not ok or type(f) ~= 'function' then
      errors.TypeError:raise(fmt('Fabric: loggers[%d] must be a logger (an object with log_metrics, e.g.'
        .. ' dpl.loggers.CSVLogger), got %s', i, describe(lg)), 3)
    end
  end
  self.logger = self.loggers[1]
  self._models_setup = 0
  self._models = {} -- the FabricModules, in setup order (the order of their all-reduces)
  self._pending = {} -- FabricModules that ran forward since the last backward
  self._launched = false
  self:_refresh()
end

Fabric.__tostring = function(self)
  return fmt('Fabric(strategy=%s, device=%s, world_size=%d, precision=%s)', self.strategy.strategy_name,
    tostring(self.device), self.world_size, tostring(self.precision))
end

-- the strategy's ranks and device as fields
function Fabric:_refresh()
  local s = self.strategy
  self.global_rank, self.local_rank, self.node_rank = s.global_rank or 0, s.local_rank or 0, s.node_rank or 0
  self.world_size = s.world_size or 1
  self.is_global_zero = self.global_rank == 0
  self.device = s.root_device or require('dpl.devices').device('cpu')
  -- several ranks of a DDP-family strategy: gradients are all-reduced in backward
  self._multi = self.world_size > 1 and s.strategy_name ~= 'single_device'
  for _, w in ipairs(self._models or {}) do W.refresh_module(w) end
end

function Fabric:_check_launched(what)
  if self.world_size > 1 and not self._launched then
    errors.RuntimeError:raise(fmt('To use Fabric with more than one device, you must call `fabric:launch()` before'
      .. ' `fabric:%s()` (strategy=%s, world_size=%d)', what, self.strategy.strategy_name, self.world_size), 3)
  end
end

---------------------------------------------------------------- launch

-- joins the process group and runs fn(self, ...)
function Fabric:_run_with_setup(fn, args)
  local s = self.strategy
  s:setup_device()
  s:setup_environment()
  self._launched = true
  self:_refresh()
  if self.world_size > 1 then require('dpl.tensor').gc_lockstep(true) end
  if fn ~= nil then return fn(self, unpack(args, 1, args.n)) end
end

--- fabric:launch([fn, ...]): joins the processes. Under dplhost --nproc N, mpirun or srun they
--- exist already: this process joins the group, then fn(fabric, ...) runs (when given) and
--- its results are returned. strategy='ddp' with devices=N and no launcher: as Lightning's
--- subprocess launcher, this process becomes rank 0 and runs the script again for the other
--- ranks. ddp_spawn: N workers are forked, each runs fn(fabric, ...), and the parent returns
--- rank 0's result (numbers, strings, booleans and tables of them travel back).
function Fabric:launch(fn, ...)
  if fn ~= nil and type(fn) ~= 'function' then
    errors.TypeError:raise(fmt('fabric:launch(fn, ...): fn must be a function or nil, got %s', describe(fn)), 2)
  end
  if fn ~= nil then
    local info = debug.getinfo(fn, 'u')
    if info and info.nparams == 0 and not info.isvararg then
      errors.TypeError:raise('The function passed to `Fabric.launch()` needs to take at least one argument. The'
        .. ' launcher will pass in the `Fabric` object so you can use it inside the function.', 2)
    end
  end
  if self._launched then
    errors.RuntimeError:raise('fabric:launch() was already called in this process: the processes exist and'
      .. ' joined the group; calling `.launch()` again is not allowed.', 2)
  end
  local args = { n = select('#', ...), ... }
  local s = self.strategy
  local launcher = s:launcher_for()
  if launcher == nil then return self:_run_with_setup(fn, args) end
  if launcher.prepare then
    -- ddp without a launcher: rank 0 here, the script re-run for ranks 1..N-1
    launcher.prepare(s, { _refresh_ranks = function() end })
    self:_refresh()
    return self:_run_with_setup(fn, args)
  end
  -- ddp_spawn: forked workers
  if fn == nil then
    errors.ValueError:raise(fmt("fabric:launch(): strategy='%s' forks workers that run a function: pass one,"
      .. ' fabric:launch(function(fabric) ... end)', s.strategy_name), 2)
  end
  if s.num_nodes > 1 then
    errors.MisconfigurationException:raise(fmt("strategy='%s' forks workers on this machine only: num_nodes=%d needs"
      .. " strategy='ddp' under a launcher", s.strategy_name, s.num_nodes), 2)
  end
  local n = s.num_processes * s.num_nodes
  return require('dpl.spawn').spawn(function(rank)
    s:_set_process_index(rank)
    local dist = require 'dpl.dist'
    if dist.is_initialized() and dist.get_world_size() > 1
        and require('dpl.strategies.ddp').process_group_backend(s) == 'nccl' then
      dist._enable_nccl(s.root_device.index)
    end
    self:_refresh()
    return self:_run_with_setup(fn, args)
  end, n)
end

---------------------------------------------------------------- setup

-- the parameter tensor of p (a parameter table holding .data, or the tensor itself)
local function tensor_of(p)
  if is_tensor(p) then return p end
  if type(p) == 'table' and is_tensor(p.data) then return p.data end
  return nil
end

-- moves/casts the module (new parameter tensors when they change) and points the
-- optimizers at the new parameters, their state following (Lightning does this for XLA;
-- dplhost's Module:to always makes new tensors when a parameter moves)
function Fabric:_move_module(module, optimizers, move)
  local before = module:parameters()
  if self._mode == 'float64' then module:to('float64') end -- DoublePrecision.convert_module
  if move then module:to(self.device) end
  local after = module:parameters()
  local map, changed = {}, false
  for i, p in ipairs(before) do
    if after[i] ~= p then map[p] = after[i]; changed = true end
  end
  if not changed then return end
  for _, opt in ipairs(optimizers) do
    for _, g in ipairs(opt.param_groups) do
      for j, p in ipairs(g.params) do
        local q = map[p]
        if q then
          g.params[j] = q
          if opt.state and opt.state[p] ~= nil then opt.state[q] = opt.state[p]; opt.state[p] = nil end
        end
      end
    end
  end
end

-- several ranks: parameters and buffers from rank 0 (DDP's constructor)
function Fabric:_broadcast_module(w)
  local module = w._original_module
  if self._multi then require('dpl.strategies.ddp').DDPStrategy.check_materialized(module, 'Fabric.setup') end
  local bufs = type(module.buffers) == 'function' and module:buffers() or {}
  rawset(w, '_has_buffers', #bufs > 0)
  if not self._multi then return end
  local dist = require 'dpl.dist'
  for _, p in ipairs(module:parameters()) do
    local t = tensor_of(p)
    if t then dist.broadcast(t, 0) end
  end
  if #bufs > 0 then self:_sync_module_buffers(w, true) end
end

-- rank 0's buffers (at setup; before forwards, unless broadcast_buffers=false)
function Fabric:_sync_module_buffers(w, at_setup)
  local s = self.strategy
  if not at_setup and s._ddp_kwargs and s._ddp_kwargs.broadcast_buffers == false then return end
  s.lightning_module = w._original_module
  s:_sync_buffers()
end

function Fabric:_wrap_module(module, optimizers, move, where)
  if W.is_module(module) then
    errors.ValueError:raise(fmt('A model should be passed only once to the `%s` method.', where), 3)
  end
  if not is_nn_module(module) then
    errors.TypeError:raise(fmt('fabric:%s(module, ...): module must be a dpl.nn.Module, got %s', where,
      describe(module)), 3)
  end
  self:_check_launched(where)
  self:_move_module(module, optimizers, move)
  local w = W.module(self, module, self._mode)
  self:_broadcast_module(w)
  W.refresh_module(w)
  self._models[#self._models + 1] = w
  self._models_setup = self._models_setup + 1
  return w
end

function Fabric:_wrap_optimizer(opt)
  if self.strategy.strategy_name == 'horovod' and self._multi then
    -- Horovod's broadcast_optimizer_state: rank 0's state on every rank
    local st = require('dpl.dist').broadcast_object(opt:state_dict(), 0)
    opt:load_state_dict(st)
  end
  return W.optimizer(self, opt)
end

local function check_optimizers(list, where)
  for i, o in ipairs(list) do
    if W.is_optimizer(o) then
      errors.ValueError:raise(fmt('An optimizer should be passed only once to the `%s` method.', where), 3)
    end
    if not is_optimizer(o) then
      errors.TypeError:raise(fmt('fabric:%s: optimizer %d must be a dpl.optim optimizer, got %s', where, i,
        describe(o)), 3)
    end
  end
end

local SETUP_KEYS = require('dpl.options').keys('move_to_device')

-- (a, b, ..., [opts]) -> list, opts
local function split_args(...)
  local n = select('#', ...)
  local list = { ... }
  local opts = {}
  if n > 0 and is_opts(list[n]) then opts = list[n]; list[n] = nil; n = n - 1 end
  for i = 1, n do
    if list[i] == nil then
      errors.TypeError:raise(fmt('argument %d is nil', i + 1), 3)
    end
  end
  return list, opts, n
end

--- model, opt1, opt2, ... = fabric:setup(model, opt1, opt2, ..., [{move_to_device = true}])
function Fabric:setup(module, ...)
  local opts_list, opts = split_args(...)
  require('dpl.options').check(opts, SETUP_KEYS, 'fabric:setup')
  check_optimizers(opts_list, 'setup')
  if W.is_module(module) then errors.ValueError:raise('A model should be passed only once to the `setup` method.', 2) end
  local w = self:_wrap_module(module, opts_list, opts.move_to_device ~= false, 'setup')
  local out = { w }
  for i, o in ipairs(opts_list) do out[i + 1] = self:_wrap_optimizer(o) end
  return unpack(out, 1, #opts_list + 1)
end

--- fabric:setup_module(model, [{move_to_device = true}])
function Fabric:setup_module(module, opts)
  opts = opts or {}
  require('dpl.options').check(opts, SETUP_KEYS, 'fabric:setup_module')
  return self:_wrap_module(module, {}, opts.move_to_device ~= false, 'setup_module')
end

--- opt1, opt2, ... = fabric:setup_optimizers(opt1, opt2, ...)
function Fabric:setup_optimizers(...)
  local list, _, n = split_args(...)
  if n == 0 then errors.ValueError:raise('`setup_optimizers` requires at least one optimizer as input.', 2) end
  check_optimizers(list, 'setup_optimizers')
  self:_check_launched('setup_optimizers')
  local out = {}
  for i, o in ipairs(list) do out[i] = self:_wrap_optimizer(o) end
  return unpack(out, 1, n)
end

local LOADER_KEYS = require('dpl.options').keys('use_distributed_sampler', 'replace_sampler', 'move_to_device')

function Fabric:_setup_dataloader(l, use_sampler, move)
  if use_sampler and self.world_size > 1 then
    l = require('dpl.trainer.loops').with_distributed_sampler(self.strategy, l)
  end
  l = self.strategy:process_dataloader(l)
  return W.dataloader(l, self.device, move)
end

--- loader1, loader2, ... = fabric:setup_dataloaders(loader1, ..., [{use_distributed_sampler = true,
--- move_to_device = true}]) (replace_sampler= is 1.9's name of use_distributed_sampler)
function Fabric:setup_dataloaders(...)
  local list, opts, n = split_args(...)
  require('dpl.options').check(opts, LOADER_KEYS, 'fabric:setup_dataloaders')
  if n == 0 then errors.ValueError:raise('`setup_dataloaders` requires at least one dataloader as input.', 2) end
  for i, l in ipairs(list) do
    if W.is_dataloader(l) then
      errors.ValueError:raise('A dataloader should be passed only once to the `setup_dataloaders` method.', 2)
    end
    local ok, it = pcall(function() return l.iter end)
    if not ok or type(it) ~= 'function' then
      errors.TypeError:raise(fmt('Only dpl.data DataLoaders are currently supported in `setup_dataloaders`'
        .. ' (argument %d is %s).', i, describe(l)), 2)
    end
  end
  self:_check_launched('setup_dataloaders')
  local use = opts.use_distributed_sampler
  if use == nil then use = opts.replace_sampler end
  local out = {}
  for i, l in ipairs(list) do out[i] = self:_setup_dataloader(l, use ~= false, opts.move_to_device ~= false) end
  return unpack(out, 1, n)
end

---------------------------------------------------------------- the step

-- averages the gradients of one module over the ranks: DDP's buckets (a plan per module)
function Fabric:_sync_module(w)
  if w._no_sync > 0 then return end
  local s = self.strategy
  s._buckets = w._plan
  s:_sync_gradients(w._original_module)
  rawset(w, '_plan', s._buckets)
end

--- fabric:backward(loss, [{model = m}]): loss:backward() (scaled with precision 16); with
--- several ranks the gradients of the modules that ran forward since the last backward (or
--- of `model`; when none did, of every set-up module) are averaged over the ranks, unless
--- inside fabric:no_backward_sync for that module.
function Fabric:backward(loss, opts)
  if not is_tensor(loss) then
    errors.TypeError:raise(fmt('fabric:backward(loss): loss must be a tensor, got %s', describe(loss)), 2)
  end
  if self._models_setup == 0 then
    errors.RuntimeError:raise('No models were set up for backward. Did you forget to call `fabric:setup()`?', 2)
  end
  local scaler = self._scaler
  if scaler ~= nil then loss = scaler:scale(loss) end
  loss:backward()
  if not self._multi then return end
  local models, pending = self._models, self._pending
  local only = opts and opts.model
  if only ~= nil then
    if not W.is_module(only) then
      errors.TypeError:raise(fmt('fabric:backward(loss, {model=}): model must be a module set up with'
        .. ' fabric:setup, got %s', describe(only)), 2)
    end
    self:_sync_module(only)
  elseif next(pending) == nil then
    for i = 1, #models do self:_sync_module(models[i]) end
  else
    -- (in setup order, the same on every rank)
    for i = 1, #models do
      local w = models[i]
      if pending[w] then self:_sync_module(w) end
    end
  end
  for k in pairs(pending) do pending[k] = nil end
end

--- fabric:no_backward_sync(model, fn [, enabled=true]) (or (model, enabled, fn)): runs fn()
--- with the gradient all-reduce of `model` skipped in the fabric:backward calls inside it
--- (gradient accumulation: the next backward outside averages the summed gradients); returns
--- what fn returns. One rank, or enabled=false: fn() as it is.
function Fabric:no_backward_sync(model, a, b)
  if not W.is_module(model) then
    errors.TypeError:raise('You need to set up the model first before you can call `fabric:no_backward_sync()`:'
      .. ' `model = fabric:setup(model, ...)`', 2)
  end
  local fn, enabled = a, b
  if type(a) == 'boolean' then fn, enabled = b, a end
  if type(fn) ~= 'function' then
    errors.TypeError:raise(fmt('fabric:no_backward_sync(model, fn [, enabled]): fn must be a function, got %s',
      describe(fn)), 2)
  end
  if enabled ~= nil and type(enabled) ~= 'boolean' then
    errors.TypeError:raise(fmt('fabric:no_backward_sync: enabled must be a boolean, got %s', describe(enabled)), 2)
  end
  if enabled == false or not self._multi then return fn() end
  rawset(model, '_no_sync', model._no_sync + 1)
  local r = { n = 0 }
  local function keep(ok, ...)
    r.n = select('#', ...)
    for i = 1, r.n do r[i] = (select(i, ...)) end
    return ok
  end
  local ok = keep(pcall(fn))
  rawset(model, '_no_sync', model._no_sync - 1)
  if not ok then error(r[1], 0) end
  return unpack(r, 1, r.n)
end

local CLIP_KEYS = require('dpl.options').keys('max_norm', 'clip_val', 'norm_type', 'error_if_nonfinite')

--- fabric:clip_gradients(model, optimizer, {max_norm= | clip_val=, norm_type=2,
--- error_if_nonfinite=true}) (Lightning 2.0's): the optimizer's gradients (unscaled first
--- with precision 16) clipped by total norm (returns it) or by value (returns nil).
function Fabric:clip_gradients(model, optimizer, opts)
  if not (W.is_module(model) or is_nn_module(model)) then
    errors.TypeError:raise(fmt('fabric:clip_gradients(model, optimizer, opts): model must be a module, got %s',
      describe(model)), 2)
  end
  local opt = W.is_optimizer(optimizer) and optimizer.optimizer or optimizer
  if not is_optimizer(opt) then
    errors.TypeError:raise(fmt('fabric:clip_gradients(model, optimizer, opts): optimizer must be an optimizer, got %s',
      describe(optimizer)), 2)
  end
  if type(opts) ~= 'table' then
    errors.TypeError:raise('fabric:clip_gradients(model, optimizer, opts): opts must be a table ({max_norm=} or'
      .. ' {clip_val=})', 2)
  end
  require('dpl.options').check(opts, CLIP_KEYS, 'fabric:clip_gradients')
  local max_norm, clip_val = opts.max_norm, opts.clip_val
  if max_norm ~= nil and clip_val ~= nil then
    errors.ValueError:raise('Only one of `clip_val` or `max_norm` can be set as this specifies the underlying'
      .. ' clipping algorithm!', 2)
  end
  if max_norm == nil and clip_val == nil then
    errors.ValueError:raise('You have to specify either `clip_val` or `max_norm` to do gradient clipping!', 2)
  end
  for k, v in pairs({ max_norm = max_norm, clip_val = clip_val }) do
    if type(v) ~= 'number' or v ~= v or v < 0 then
      errors.ValueError:raise(fmt('fabric:clip_gradients: %s must be a number >= 0, got %s', k, describe(v)), 2)
    end
  end
  if self._scaler ~= nil then self._scaler:unscale_(opt) end
  local params = {}
  for _, g in ipairs(opt.param_groups) do
    for _, p in ipairs(g.params) do params[#params + 1] = p end
  end
  local U = require 'dpl.nn.utils'
  if clip_val ~= nil then U.clip_grad_value_(params, clip_val) return nil end
  local norm_type = opts.norm_type or 2
  local total = U._clip_grad_norm(params, math.huge, norm_type, true) -- the norm, nothing scaled
  if total ~= total or total == math.huge then
    if opts.error_if_nonfinite ~= false then
      errors.RuntimeError:raise(fmt('The total norm of order %s for gradients from `parameters` is non-finite, so it'
        .. ' cannot be clipped. To disable this error and scale the gradients by the non-finite norm anyway, set'
        .. ' `error_if_nonfinite=False`', tostring(norm_type)), 2)
    end
  end
  local coef = max_norm / (total + 1e-6)
  if coef < 1 or coef ~= coef then
    require('dpl.autograd').no_grad(function()
      local grad_of = require('dpl.autograd').grad_of
      for _, p in ipairs(params) do
        local g = grad_of(p)
        if g then g:mul_(coef) end
      end
    end)
  end
  return total
end

--- fabric:autocast(fn, ...): fn(...) under the precision's autocast (bf16-mixed, 16-mixed);
--- other precisions: fn(...) as it is.
function Fabric:autocast(fn, ...)
  if type(fn) ~= 'function' then
    errors.TypeError:raise(fmt('fabric:autocast(fn, ...): fn must be a function, got %s', describe(fn)), 2)
  end
  local m = self._mode
  if m == 'bfloat16' or m == 'float16' then return require('dpl.amp').autocast(m, fn, ...) end
  return fn(...)
end

--- fabric:to_device(x): a module moved to the device (returned), or a tensor / nested table
--- of tensors copied there.
function Fabric:to_device(obj)
  if W.is_module(obj) then obj._original_module:to(self.device) return obj end
  if is_nn_module(obj) then obj:to(self.device) return obj end
  return require('dpl.devices').move_data_to_device(obj, self.device)
end

FC.install(Fabric)
return Fabric
