-- dpl.strategies.strategy: the Strategy base class (seed 004's interface) and
-- ParallelStrategy, the base of dp/ddp/ddp_spawn/ddp2/horovod. A strategy owns
-- the model's placement, the step dispatch (training_step, ...), the optimizer
-- step (closure, hooks, clipping, step) and the collectives between processes.
local class = require 'dpl.class'
local errors = require 'dpl.errors'

local M = {}

local Strategy = class.Object:extend('Strategy')
M.Strategy = Strategy

--- Strategy{root_device=, parallel_devices=, num_nodes=, precision=}
function Strategy:__init(opts)
  opts = opts or {}
  self.strategy_name = self.strategy_name or 'strategy'
  self.parallel_devices = opts.parallel_devices
  self.root_device = opts.root_device or (opts.parallel_devices and opts.parallel_devices[1])
  self.num_nodes = opts.num_nodes or 1
  self.local_rank, self.global_rank, self.node_rank, self.world_size = 0, 0, 0, 1
  self.is_global_zero = true
  self.lightning_module, self.model = nil, nil
  self.optimizers, self.lr_scheduler_configs, self.optimizer_frequencies = {}, {}, {}
  self._lightning_optimizers = {}
  self.launcher = nil
  self.handles_gradient_accumulation = false
  self._kwargs = opts.kwargs or {}
end

Strategy.__tostring = function(self) return ('%s(root_device=%s)'):format(getmetatable(self).__name, tostring(self.root_device)) end

--- Attaches the LightningModule (trainer.model is self.model).
function Strategy:connect(model)
  self.lightning_module = model
  self.model = model
end

function Strategy:setup_environment() end
--- Makes the root device the current GPU ('cuda' without an index means it), as Lightning's
--- CUDAAccelerator.setup_device calls torch.cuda.set_device; the Trainer calls this before
--- setup_environment.
function Strategy:setup_device()
  local d = self.root_device
  if d and d.type == 'cuda' then require('dpl.devices').set_current_cuda(d.index) end
end

--- A launcher module (launch(strategy, trainer, fn, ...)) when the strategy
--- starts processes itself (ddp_spawn), else nil.
function Strategy:launcher_for() return nil end

--- Moves the model to the root device, builds the optimizers when fitting.
function Strategy:setup(trainer)
  self:model_to_device()
  if trainer.state.fn == 'fit' then self:setup_optimizers(trainer) end
end

--- Calls configure_optimizers (through the trainer, so the call is a hook) and
--- wraps each optimizer in a LightningOptimizer.
function Strategy:setup_optimizers(trainer)
  local O = require 'dpl.trainer.optimizers'
  local out = trainer:_call_module_hook('configure_optimizers')
  self.optimizers, self.lr_scheduler_configs, self.optimizer_frequencies = O.parse(out)
  self._lightning_optimizers = {}
  for i, opt in ipairs(self.optimizers) do
    self._lightning_optimizers[i] = O.LightningOptimizer(opt, i - 1, trainer)
  end
end

--- Moves the model to the root device — and, with precision 64, casts it to
--- float64 (Lightning's DoublePrecisionPlugin) — before the optimizers exist.
function Strategy:model_to_device()
  local m, dev = self.model, self.root_device
  if m == nil or dev == nil then return end
  local dtype = self.precision == 64 and 'float64' or nil
  if type(m.to) == 'function' then
    local r = m:to(dev)
    if r ~= nil and r ~= m then self.model = r end
    if dtype then self.model:to(dtype) end
  else
    -- a LightningModule that is not an nn.Module yet: move the nn.Modules it holds
    for _, v in pairs(m) do
      if type(v) == 'table' and rawget(v, '_is_module') == true and type(v.to) == 'function' then
        v:to(dev)
        if dtype then v:to(dtype) end
      end
    end
  end
  self.lightning_module.device = dev
end

--- Moves the module back to the CPU when it ran on a GPU (Lightning's teardown).
function Strategy:teardown()
  local m = self.lightning_module
  if not (m and self.root_device and self.root_device.type ~= 'cpu') then return end
  if type(m.to) == 'function' then m:to('cpu') return end
  for _, v in pairs(m) do
    if type(v) == 'table' and rawget(v, '_is_module') == true and type(v.to) == 'function' then v:to('cpu') end
  end
  m.device = require('dpl.devices').device('cpu')
end

-- step dispatch
function Strategy:training_step(...) return self.model:training_step(...) end
function Strategy:validation_step(...) return self.model:validation_step(...) end
function Strategy:test_step(...) return self.model:test_step(...) end
function Strategy:predict_step(...) return self.model:predict_step(...) end
function Strategy:training_step_end(out) return out end
function Strategy:validation_step_end(out) return out end
function Strategy:test_step_end(out) return out end
function Strategy:post_training_step() end

-- backward
function Strategy:pre_backward() end
function Strategy:post_backward() end

--- Runs the closure, then on_before_optimizer_step and clipping, then the
--- optimizer's step (skipped in automatic optimisation when the closure
--- returned nil: the step was skipped).
function Strategy:optimizer_step(optimizer, opt_idx, closure, model)
  return self:_finish_optimizer_step(optimizer, opt_idx, closure(), model)
end

--- After the closure (and any gradient sync): with precision 16 the gradients are
--- unscaled first (so that the hooks and clipping see true values) and the scaler's
--- step skips the update when they hold inf/NaN, then adjusts the scale.
function Strategy:_finish_optimizer_step(optimizer, opt_idx, result, model)
  local trainer = model.trainer
  local scaler = trainer.scaler
  if scaler ~= nil then scaler:unscale_(optimizer) end
  trainer:_after_closure(optimizer, opt_idx)
  if model.automatic_optimization and result == nil then
    if scaler ~= nil then scaler:_forget(optimizer) end -- no step: the scale stays
    return
  end
  if scaler == nil then return optimizer:step() end
  local r = scaler:step(optimizer)
  scaler:update()
  return r
end

-- collectives (a single process: identities)
function Strategy:barrier() end
function Strategy:broadcast(obj) return obj end
function Strategy:reduce(t) return t end
function Strategy:reduce_boolean_decision(decision) return decision end
function Strategy:all_gather(t) return t end

--- Batches to the root device (the trainer calls the module's transfer hooks).
function Strategy:process_dataloader(loader) return loader end

function Strategy:lightning_module_state_dict()
  local m = self.lightning_module
  if type(m.state_dict) == 'function' then return m:state_dict() end
  return {}
end

---------------------------------------------------------------- ParallelStrategy

local ParallelStrategy = Strategy:extend('ParallelStrategy')
M.ParallelStrategy = ParallelStrategy

local function dist()
  local ok, d = pcall(require, 'dpl.dist')
  if ok and d.is_initialized() then return d end
  return nil
end
M._dist = dist

function ParallelStrategy:__init(opts)
  Strategy.__init(self, opts)
  self.num_processes = self.parallel_devices and #self.parallel_devices or 0
  self.root_device = self.parallel_devices and self.parallel_devices[1] or opts.root_device
end

--- global = node_rank * num_processes + local_rank; world = num_nodes * num_processes.
function ParallelStrategy:set_world_ranks()
  self.global_rank = self.node_rank * self.num_processes + self.local_rank
  self.world_size = self.num_nodes * self.num_processes
  self.is_global_zero = self.global_rank == 0
end

--- What a DistributedSampler gets: one replica per rank of the world (ddp and horovod:
--- every process; ddp2: one per node, as its world is the nodes).
function ParallelStrategy:distributed_sampler_kwargs()
  return { num_replicas = self.world_size, rank = self.global_rank }
end

function ParallelStrategy:_not_yet(what)
  errors.NotImplementedError:raise(("strategy '%s': %s needs %s, which is not available in dplhost yet")
    :format(self.strategy_name, what, self._needs or 'dpl.dist tensor collectives and autograd'), 3)
end

function ParallelStrategy:setup()
  self:_not_yet('training')
end

function ParallelStrategy:barrier()
  local d = dist()
  if d then d.barrier() end
end

function ParallelStrategy:broadcast(obj, src)
  local d = dist()
  if not d then return obj end
  return d.broadcast_object(obj, src or 0)
end

--- A non-tensor passes through unchanged (Lightning); tensors are all-reduced
--- when a process group exists.
function ParallelStrategy:reduce(t, group, reduce_op)
  local d = dist()
  if not d then return t end
  if not d._tensor_of(t) then return t end
  local op = reduce_op or 'mean'
  local mean = op == 'mean' or op == 'avg'
  local r = t:clone()
  d.all_reduce(r, mean and 'sum' or op, group and { group = group } or nil)
  if mean then r = r / d.get_world_size(group) end
  return r
end

--- all=true: every rank decided true; all=false: any rank did.
function ParallelStrategy:reduce_boolean_decision(decision, all)
  local d = dist()
  if not d then return decision end
  local votes = d.all_gather_object(decision and 1 or 0)
  local sum = 0
  for i = 1, #votes do sum = sum + votes[i] end
  if all == false then return sum > 0 end
  return sum == #votes
end

function ParallelStrategy:all_gather(t, group)
  local d = dist()
  if not d then return t end
  return d.all_gather(t, group and { group = group } or nil)
end

return M
