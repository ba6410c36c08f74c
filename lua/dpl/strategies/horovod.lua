-- dpl.strategies.horovod: Horovod's semantics over MPI (run under mpirun):
-- rank/size/local_rank from Open MPI's environment, the process group on the
-- mpi backend, parameters and optimizer state broadcast from rank 0, every
-- param group's lr (and schedulers' base_lrs) scaled by the world size,
-- gradients averaged with allreduce before each optimizer step (Horovod's
-- synchronize()). reduce() accepts numbers too (Horovod reduces non-tensors);
-- only mean/avg/sum and no sub-group.
local errors = require 'dpl.errors'
local S = require 'dpl.strategies.strategy'
local DDP = require('dpl.strategies.ddp').DDPStrategy

local HorovodStrategy = DDP:extend('HorovodStrategy')
HorovodStrategy.strategy_name = 'horovod'

local function env_int(name, default)
  return tonumber(os.getenv(name) or '') or default
end

function HorovodStrategy:__init(opts)
  S.ParallelStrategy.__init(self, opts)
  self._process_group_backend = opts.process_group_backend
  self._ddp_kwargs = {}
  self:set_world_ranks()
end

function HorovodStrategy:set_world_ranks()
  self.global_rank = env_int('OMPI_COMM_WORLD_RANK', env_int('HOROVOD_RANK', 0))
  self.local_rank = env_int('OMPI_COMM_WORLD_LOCAL_RANK', env_int('HOROVOD_LOCAL_RANK', 0))
  self.world_size = env_int('OMPI_COMM_WORLD_SIZE', env_int('HOROVOD_SIZE', 1))
  self.is_global_zero = self.global_rank == 0
  if self.parallel_devices then
    self.root_device = self.parallel_devices[self.local_rank + 1] or self.parallel_devices[1]
  end
end

-- mpirun decides the processes; devices= is not checked against them (Lightning's horovod)
function HorovodStrategy:validate_settings() end

function HorovodStrategy:setup_environment()
  if self.world_size <= 1 then return end
  local dist = require 'dpl.dist'
  if dist.is_initialized() then return end
  -- NCCL for GPU tensors when the root device is a real GPU with NCCL, bootstrapped
  -- through MPI (ddp.process_group_backend); else the mpi backend
  local backend = require('dpl.strategies.ddp').process_group_backend(self, 'mpi')
  if backend == 'nccl' then
    dist.init_process_group{ backend = 'nccl', host_backend = 'mpi', device = self.root_device }
  else
    dist.init_process_group{ backend = 'mpi' }
  end
end

-- Horovod syncs the state (parameters and buffers) once, at setup; its DistributedOptimizer
-- averages gradients and leaves the buffers to each rank afterwards
HorovodStrategy._broadcast_buffers_each_forward = false

function HorovodStrategy:setup(trainer)
  DDP.setup(self, trainer)
  if trainer.state.fn ~= 'fit' or self.world_size <= 1 then return end
  local w = self.world_size
  for _, opt in ipairs(self.optimizers) do
    for _, g in ipairs(opt.param_groups or {}) do
      if type(g.lr) == 'number' then g.lr = g.lr * w end
    end
  end
  for _, cfg in ipairs(self.lr_scheduler_configs) do
    local bl = type(cfg.scheduler) == 'table' and rawget(cfg.scheduler, 'base_lrs')
    if type(bl) == 'table' then for i, v in ipairs(bl) do bl[i] = v * w end end
  end
  -- optimizer state from rank 0
  for _, opt in ipairs(self.optimizers) do
    if type(opt.state_dict) == 'function' and type(opt.load_state_dict) == 'function' then
      local ok, st = pcall(opt.state_dict, opt)
      if ok then
        local ok2, synced = pcall(self.broadcast, self, st, 0)
        if ok2 and synced ~= nil then opt:load_state_dict(synced) end
      end
    end
  end
end

--- Horovod: no sub-groups; mean/avg/sum; numbers are reduced too.
function HorovodStrategy:reduce(t, group, reduce_op)
  if group ~= nil then
    errors.ValueError:raise('Horovod does not support allreduce using a subcommunicator at this time. Unset `group`.', 2)
  end
  if reduce_op ~= nil and reduce_op ~= 'mean' and reduce_op ~= 'avg' and reduce_op ~= 'sum' then
    errors.ValueError:raise(('unrecognized `reduce_op`: %s'):format(tostring(reduce_op)), 2)
  end
  if type(t) == 'number' then
    return (require('dpl.trainer.results').reduce_numbers(t, nil, reduce_op == 'sum' and 'sum' or 'mean'))
  end
  return S.ParallelStrategy.reduce(self, t, nil, reduce_op == 'sum' and 'sum' or 'mean')
end

return HorovodStrategy
