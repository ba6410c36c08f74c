-- dpl.strategies.ddp2: DP inside a node (over the node's GPUs: scatter, replicas,
-- gather, as dp) and DDP across nodes: one process per node, local_rank =
-- global_rank = node_rank, world_size = num_nodes; gradients are averaged across
-- the nodes' processes before each optimizer step, the sampler shards by node.
-- The node index comes from NODE_RANK/GROUP_RANK/SLURM_NODEID, else from RANK
-- when the launcher started one process per node (WORLD_SIZE == num_nodes).
local errors = require 'dpl.errors'
local S = require 'dpl.strategies.strategy'
local DP = require 'dpl.strategies.dp'
local DDP = require('dpl.strategies.ddp').DDPStrategy

local DDP2Strategy = DP:extend('DDP2Strategy')
DDP2Strategy.strategy_name = 'ddp2'

local function env_int(...)
  for i = 1, select('#', ...) do
    local v = tonumber(os.getenv((select(i, ...))) or '')
    if v then return v end
  end
  return nil
end

function DDP2Strategy:__init(opts)
  S.ParallelStrategy.__init(self, opts)
  self._process_group_backend = opts.process_group_backend
  self:set_world_ranks()
end

function DDP2Strategy:set_world_ranks()
  local node = env_int('NODE_RANK', 'GROUP_RANK', 'SLURM_NODEID')
  local ws = env_int('WORLD_SIZE', 'OMPI_COMM_WORLD_SIZE', 'SLURM_NTASKS')
  if (node == nil or node == 0) and ws == self.num_nodes then
    node = env_int('RANK', 'OMPI_COMM_WORLD_RANK', 'SLURM_PROCID') or node
  end
  self.node_rank = node or 0
  self.local_rank = self.node_rank
  self.global_rank = self.node_rank
  self.world_size = self.num_nodes
  self.is_global_zero = self.global_rank == 0
end

--- One process per node: a launcher that started more (dplhost --nproc 2 on one node, with
--- num_nodes=1) would give two processes the same node rank, each running as rank 0 of
--- its own world. Refused; `num_nodes` equal to the processes started simulates that many
--- nodes on one machine.
function DDP2Strategy:validate_settings()
  local ws = env_int('WORLD_SIZE', 'OMPI_COMM_WORLD_SIZE', 'SLURM_NTASKS')
  if ws == nil or ws == self.num_nodes then return end
  local lws = env_int('LOCAL_WORLD_SIZE', 'OMPI_COMM_WORLD_LOCAL_SIZE', 'SLURM_NTASKS_PER_NODE')
  local how = self.num_nodes == 1 and 'on one node, run one process (`dplhost script.lua`, no --nproc)'
    or ('start one process per node (`dplhost --nproc 1 --nnodes %d --node-rank <k> script.lua` on each, `srun'
      .. ' --ntasks-per-node=1`)'):format(self.num_nodes)
  errors.MisconfigurationException:raise(("strategy='ddp2' runs one process per node (DP over the node's GPUs"
    .. " inside it), but the launcher started %d process%s%s for num_nodes=%d: %s, or use strategy='ddp'"
    .. " (one process per GPU)"):format(ws, ws == 1 and '' or 'es', lws and (' (%d on this node)'):format(lws) or '', self.num_nodes, how), 0)
end

function DDP2Strategy:setup_environment()
  if self.world_size <= 1 then return end
  local dist = require 'dpl.dist'
  if dist.is_initialized() then return end
  -- nccl when the root device is a real GPU with NCCL (ddp.process_group_backend)
  local backend = require('dpl.strategies.ddp').process_group_backend(self)
  dist.init_process_group{ backend = backend, rank = self.global_rank, world_size = self.world_size,
    device = backend == 'nccl' and self.root_device or nil }
end

-- collectives across the nodes' processes (dp's are identities)
DDP2Strategy.barrier = S.ParallelStrategy.barrier
DDP2Strategy.broadcast = S.ParallelStrategy.broadcast
DDP2Strategy.reduce_boolean_decision = S.ParallelStrategy.reduce_boolean_decision
DDP2Strategy.all_gather = S.ParallelStrategy.all_gather

--- As in Lightning's DDP2: the reduction is only across the node's devices (dp's
--- mean); gradients are what is averaged across the nodes.
DDP2Strategy.reduce = DP.reduce

function DDP2Strategy:setup(trainer)
  self:model_to_device()
  if trainer.state.fn == 'fit' then
    if self.world_size > 1 then
      local dist = require 'dpl.dist'
      for _, p in ipairs(type(self.lightning_module.parameters) == 'function' and self.lightning_module:parameters() or {}) do
        if dist._tensor_of(p) then dist.broadcast(p, 0) end
      end
    end
    self:setup_optimizers(trainer)
    self._buckets = nil -- the gradient buckets are made again at this fit's first sync
  end
end

DDP2Strategy._sync_gradients = DDP._sync_gradients
DDP2Strategy._bucket_plan = DDP._bucket_plan
DDP2Strategy._refresh_bucket_plan = DDP._refresh_bucket_plan
DDP2Strategy._sync_in_place = DDP._sync_in_place
DDP2Strategy._sync_flat = DDP._sync_flat
DDP2Strategy.optimizer_step = DDP.optimizer_step

return DDP2Strategy
