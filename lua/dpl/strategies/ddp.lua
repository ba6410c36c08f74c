-- dpl.strategies.ddp: one process per device. 'ddp': the processes are started
-- outside (dplhost --nproc N, mpirun, srun: torchrun-like RANK/WORLD_SIZE/
-- LOCAL_RANK, Open MPI's or SLURM's variables); each joins the process group
-- (dpl.dist: nccl when the root device is a real GPU and NCCL is there, else shm
-- or mpi), parameters are broadcast from rank 0, gradients are
-- averaged (all-reduce) before each optimizer step (not on accumulation-only
-- batches, as DDP's no_sync), and a DistributedSampler is inserted.
-- 'ddp_spawn' forks workers from the running script (dpl.strategies.spawn);
-- 'ddp_fork' and 'ddp_notebook' are its aliases.
local ffi = require 'ffi'
local errors = require 'dpl.errors'
local S = require 'dpl.strategies.strategy'

local M = {}

local function env_int(...)
  for i = 1, select('#', ...) do
    local v = tonumber(os.getenv((select(i, ...))) or '')
    if v then return v end
  end
  return nil
end

-- the ranks given by whoever started the processes (nil when nobody did)
local function external_ranks()
  local rank = env_int('RANK', 'OMPI_COMM_WORLD_RANK', 'PMI_RANK', 'SLURM_PROCID')
  local size = env_int('WORLD_SIZE', 'OMPI_COMM_WORLD_SIZE', 'PMI_SIZE', 'SLURM_NTASKS')
  if rank == nil or size == nil then return nil end
  return rank, size, env_int('LOCAL_RANK', 'OMPI_COMM_WORLD_LOCAL_RANK', 'MPI_LOCALRANKID', 'SLURM_LOCALID') or 0,
    env_int('LOCAL_WORLD_SIZE', 'OMPI_COMM_WORLD_LOCAL_SIZE', 'MPI_LOCALNRANKS', 'SLURM_NTASKS_PER_NODE')
end
M._external_ranks = external_ranks

-- True when dev is a real CUDA GPU (not one of DPL_VIRTUAL_GPUS); specs stub it.
function M._real_gpu(dev)
  if type(dev) ~= 'table' or not dev.is_cuda then return false end
  local ffi = require 'ffi'
  local C = require('dpl.capi').C
  local info = ffi.new('dpl_device_info')
  return C.dpl_device_get_info(C.DPL_DEVICE_CUDA, dev.index, info) == 0 and info.simulated == 0
end

-- "" when NCCL can be used, else why not; specs stub it.
function M._nccl_unavailable()
  return require('ffi').string(require('dpl.capi').C.dpl_nccl_unavailable_reason())
end

local warned_nccl = false
--- The dist backend a DDP-family strategy joins with (Lightning's choice: nccl when
--- the root device is a GPU). An explicit process_group_backend option, then
--- DPL_DIST_BACKEND, win; a real GPU without NCCL falls back to `fallback` (nil: the
--- default, shm) with a one-line warning; otherwise `fallback`.
function M.process_group_backend(strategy, fallback)
  if strategy._process_group_backend ~= nil then return strategy._process_group_backend end
  local e = os.getenv('DPL_DIST_BACKEND')
  if e ~= nil and e ~= '' then return e end
  if M._real_gpu(strategy.root_device) then
    local why = M._nccl_unavailable()
    if why == '' then return 'nccl' end
    if not warned_nccl then
      warned_nccl = true
      require('dpl.log').warn("strategy '%s': the root device %s is a GPU but NCCL is unavailable (%s); using backend"
        .. " '%s' (GPU tensors staged through host memory)", strategy.strategy_name, tostring(strategy.root_device),
        why, fallback or 'shm')
    end
  end
  return fallback
end

local DDPStrategy = S.ParallelStrategy:extend('DDPStrategy')
DDPStrategy.strategy_name = 'ddp'
M.DDPStrategy = DDPStrategy

function DDPStrategy:__init(opts)
  S.ParallelStrategy.__init(self, opts)
  self.local_rank = env_int('LOCAL_RANK', 'OMPI_COMM_WORLD_LOCAL_RANK', 'SLURM_LOCALID') or 0
  self.node_rank = env_int('NODE_RANK', 'GROUP_RANK', 'SLURM_NODEID') or 0
  -- DistributedDataParallel's arguments, given as Lightning's DDPStrategy(**kwargs)
  local kw = {}
  for k, v in pairs(opts.kwargs or {}) do kw[k] = v end
  for _, k in ipairs({ 'bucket_cap_mb', 'find_unused_parameters', 'gradient_as_bucket_view', 'static_graph',
                       'broadcast_buffers' }) do
    if opts[k] ~= nil then kw[k] = opts[k] end
  end
  if kw.broadcast_buffers ~= nil and type(kw.broadcast_buffers) ~= 'boolean' then
    errors.ValueError:raise(('DDPStrategy: broadcast_buffers must be true or false, got %s'):format(tostring(kw.broadcast_buffers)), 2)
  end
  if kw.bucket_cap_mb ~= nil and (type(kw.bucket_cap_mb) ~= 'number' or not (kw.bucket_cap_mb > 0)) then
    errors.ValueError:raise(('DDPStrategy: bucket_cap_mb must be a number > 0, got %s'):format(tostring(kw.bucket_cap_mb)), 2)
  end
  self._ddp_kwargs = kw
  if opts.process_group_backend ~= nil then
    local b = opts.process_group_backend
    if b ~= 'shm' and b ~= 'mpi' and b ~= 'nccl' then
      errors.MisconfigurationException:raise(("DDPStrategy: process_group_backend='%s' (shm, mpi or nccl)")
        :format(tostring(b)), 2)
    end
    self._process_group_backend = b
  end
  self:set_world_ranks()
end

--- Ranks from the launcher's environment when there is one (torchrun-like),
--- else Lightning's node_rank * num_processes + local_rank.
function DDPStrategy:set_world_ranks()
  local rank, size, lrank = external_ranks()
  if rank ~= nil then
    self.global_rank, self.world_size, self.local_rank = rank, size, lrank
    self.is_global_zero = rank == 0
  else
    S.ParallelStrategy.set_world_ranks(self)
  end
  if self.parallel_devices then
    local dev = self.parallel_devices[self.local_rank + 1]
    -- one device per process: a launcher with more local ranks than devices reuses them (CPU)
    self.root_device = dev or self.parallel_devices[1]
  end
end

--- Under a launcher (dplhost --nproc, torchrun-like variables, mpirun, srun), the
--- processes it started must be the ones devices x num_nodes asks for, when devices were
--- given (Lightning 2.1's check of its TorchElastic and SLURM environments; 1.9 ran
--- on with a world that did not match its sampler or waited for ranks that never came).
--- devices not given: the launcher decides the processes per node (devices=1 on the CPU
--- under --nproc N works), but num_nodes must still match the nodes it started.
function DDPStrategy:validate_settings(num_devices, num_nodes, devices_given)
  local _, size, _, local_size = external_ranks()
  if size == nil then return end
  -- what would match the launch: its processes per node, and the nodes that makes
  local function matching(with_devices)
    if local_size == nil or local_size < 1 then return ('devices=%d'):format(math.floor(size / num_nodes)) end
    local nodes = size % local_size == 0 and size / local_size or nil
    if not with_devices then return ('num_nodes=%d'):format(nodes) end
    if nodes == nil or nodes == num_nodes then return ('devices=%d'):format(local_size) end
    return ('devices=%d and num_nodes=%d'):format(local_size, nodes)
  end
  local function start(d)
    if num_nodes == 1 then return ('start %d process(es) per node (dplhost --nproc %d)'):format(d, d) end
    return ('start %d process(es) on each of %d nodes (dplhost --nproc %d --nnodes %d --node-rank <k> on node k,'
      .. ' or mpirun / srun)'):format(d, num_nodes, d, num_nodes)
  end
  if not devices_given then
    if local_size ~= nil and local_size >= 1 and size % local_size == 0 and size ~= local_size * num_nodes then
      errors.MisconfigurationException:raise(("strategy='%s': num_nodes=%d, but the launcher started %d process(es),"
        .. " %d on this node (%d node(s)): set %s, or %s"):format(self.strategy_name, num_nodes, size, local_size,
        size / local_size, matching(false), start(local_size)), 0)
    end
    return
  end
  if size ~= num_devices * num_nodes or (local_size ~= nil and local_size ~= num_devices) then
    errors.MisconfigurationException:raise(("strategy='%s': devices=%d and num_nodes=%d ask for %d process(es), %d on"
      .. " each node, but the launcher started %d (%s on this node): set %s, or %s"):format(self.strategy_name,
      num_devices, num_nodes, num_devices * num_nodes, num_devices, size,
      local_size and tostring(local_size) or 'unknown', matching(true), start(num_devices)), 0)
  end
end

--- Nobody started the other processes (no RANK/WORLD_SIZE): the subprocess
--- launcher re-runs the script for local ranks 1..N-1 (Lightning's 'ddp').
function DDPStrategy:launcher_for()
  if self.world_size <= 1 or external_ranks() ~= nil then return nil end
  return require 'dpl.strategies.subprocess'
end

--- Joins the process group (once per process).
function DDPStrategy:setup_environment()
  if self.world_size <= 1 then return end
  local dist = require 'dpl.dist'
  if dist.is_initialized() then return end
  if external_ranks() == nil then
    errors.MisconfigurationException:raise(("strategy='%s' with %d processes: start them with"
      .. " `dplhost --nproc %d script.lua` (or mpirun / srun); this process has no RANK/WORLD_SIZE")
      :format(self.strategy_name, self.world_size, self.world_size), 0)
  end
  local backend = M.process_group_backend(self)
  dist.init_process_group{ backend = backend, rank = self.global_rank, world_size = self.world_size,
    device = backend == 'nccl' and self.root_device or nil }
  if self.global_rank == 0 then
    require('dpl.log').info('Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/%d; backend=%s. All distributed'
      .. ' processes registered. Starting with %d processes', self.world_size, dist.get_backend(), self.world_size)
  end
end

-- t's gradient without exposing it (dpl.autograd.grad_of; autograd is loaded on first use)
local grad_of_fn
local function grad_of(t)
  grad_of_fn = grad_of_fn or require('dpl.autograd').grad_of
  return grad_of_fn(t)
end

local function parameters(model)
  if type(model.parameters) ~= 'function' then return {} end
  return model:parameters() or {}
end

local function tensor_of(x)
  -- a dpl tensor, or a parameter object holding one in .data
  local dist = require 'dpl.dist'
  if dist._tensor_of(x) then return x end
  if type(x) == 'table' and x.data ~= nil and dist._tensor_of(x.data) then return x.data end
  return nil
end

--- DDPStrategy.check_materialized(module, who): PyTorch's DDP constructor refuses modules whose
--- parameters are not made yet (LazyLinear before its first forward): they would miss the
--- broadcast from rank 0 (each rank initialising them its own way) and the optimizer built at
--- setup. Raises RuntimeError naming the modules; who: the caller, for the message.
function DDPStrategy.check_materialized(module, who)
  if type(module) ~= 'table' or type(module.named_modules) ~= 'function' then return end
  local lazy = {}
  for name, m in module:named_modules() do
    if type(m.has_uninitialized_params) == 'function' and m:has_uninitialized_params() then
      lazy[#lazy + 1] = ('%s (%s)'):format(name == '' and '<the module>' or name, tostring(m.__name))
    end
  end
  if #lazy == 0 then return end
  errors.RuntimeError:raise(("%s: Modules with uninitialized parameters can't be used with `DistributedDataParallel`."
    .. ' Run a dummy forward pass to correctly initialize the modules (uninitialized: %s)'):format(who,
    table.concat(lazy, ', ')), 0)
end

function DDPStrategy:setup(trainer)
  self:model_to_device()
  if trainer.state.fn == 'fit' then
    DDPStrategy.check_materialized(self.lightning_module, ("strategy '%s'"):format(tostring(self.strategy_name)))
    -- sync_batchnorm=true: the BatchNorm layers become SyncBatchNorm, sharing their parameters
    -- and buffers (Lightning's TorchSyncBatchNorm layer sync, applied before DDP wraps the model)
    if trainer.sync_batchnorm then
      require('dpl.nn').SyncBatchNorm.convert_sync_batchnorm(self.lightning_module)
    end
    -- every rank starts from rank 0's parameters and buffers (DDP's constructor; Horovod's
    -- broadcast_parameters of the state_dict)
    self._buffers_model, self._sync_buffers_next = nil, true
    if self.world_size > 1 then
      local dist = require 'dpl.dist'
      for _, p in ipairs(parameters(self.lightning_module)) do
        local t = tensor_of(p)
        if t then dist.broadcast(t, 0) end
      end
      self:_sync_buffers()
    end
    self:setup_optimizers(trainer)
    self._buckets = nil -- made again at this fit's first gradient sync
    -- the ranks collect garbage together (see _sync_gradients)
    if self.world_size > 1 then require('dpl.tensor').gc_lockstep(true) end
  end
end

--- The module's buffers (BatchNorm's running statistics, ...) from rank 0, as PyTorch's DDP
--- (broadcast_buffers=true, its default) does before a forward: one broadcast per dtype and
--- device, the buffers packed into a flat tensor kept between calls. Whether the module has
--- buffers at all is looked at once per fit (a module without any pays nothing after that);
--- when it has, they are collected each time (a buffer may be replaced by another tensor).
function DDPStrategy:_sync_buffers()
  local model = self.lightning_module
  if self.world_size <= 1 or model == nil or type(model.buffers) ~= 'function' then return end
  if self._buffers_model == model and not self._has_buffers then return end
  local bufs = model:buffers()
  self._buffers_model, self._has_buffers = model, #bufs > 0
  if #bufs == 0 then return end
  local dist = require 'dpl.dist'
  local groups, order = {}, {}
  for _, b in ipairs(bufs) do
    local key = tostring(b.dtype) .. '@' .. tostring(b.device)
    local g = groups[key]
    if g == nil then g = { list = {}, numel = 0 } groups[key] = g order[#order + 1] = key end
    g.list[#g.list + 1] = b
    g.numel = g.numel + b:numel()
  end
  local flats = self._buffer_flats or {}
  self._buffer_flats = flats
  local T = require 'dpl.tensor'
  local root = self.global_rank == 0
  for _, key in ipairs(order) do
    local g = groups[key]
    if #g.list == 1 then
      dist.broadcast(g.list[1], 0)
    elseif g.numel > 0 then
      local first = g.list[1]
      local flat = flats[key]
      if flat == nil or flat:numel() ~= g.numel then
        flat = T.empty({ g.numel }, { dtype = first.dtype, device = first.device })
        flats[key] = flat
      end
      local off = 0
      if root then
        for _, b in ipairs(g.list) do
          local n = b:numel()
          if n > 0 then flat:narrow(1, off + 1, n):copy_(b:reshape(-1)) end
          off = off + n
        end
      end
      dist.broadcast(flat, 0)
      if not root then
        off = 0
        for _, b in ipairs(g.list) do
          local n = b:numel()
          if n > 0 then b:copy_(flat:narrow(1, off + 1, n):view(b:size())) end
          off = off + n
        end
      end
    end
  end
end

-- PyTorch's DDP forward syncs the buffers first when the previous forward through it was a
-- training one (require_forward_param_sync): before each training step after the first
-- (the constructor synced them), and before the first validation step of a fit's validation
-- run; a validation forward (no gradients) clears the flag. Test and predict, and
-- validation outside fit, call the module directly (Lightning's DDPStrategy) and touch nothing.
local function buffer_sync_wanted(self)
  return self._sync_buffers_next and self.world_size > 1 and self._broadcast_buffers_each_forward
    and (self._ddp_kwargs == nil or self._ddp_kwargs.broadcast_buffers ~= false)
end
DDPStrategy._broadcast_buffers_each_forward = true

function DDPStrategy:training_step(...)
  if buffer_sync_wanted(self) then self:_sync_buffers() end
  self._sync_buffers_next = true
  return S.ParallelStrategy.training_step(self, ...)
end

function DDPStrategy:validation_step(...)
  local t = self.lightning_module and self.lightning_module.trainer
  if t and t.state.fn == 'fit' then
    if buffer_sync_wanted(self) then self:_sync_buffers() end
    self._sync_buffers_next = false
  end
  return S.ParallelStrategy.validation_step(self, ...)
end

function DDPStrategy:teardown()
  require('dpl.tensor').gc_lockstep(false)
  return S.ParallelStrategy.teardown(self)
end

-- Gradient buckets, as PyTorch DDP's reducer lays them out: parameters in reverse
-- registration order (about the order backward produces their gradients),
-- grouped by dtype and device, a bucket closed when it passes its cap (the first at
-- 1 MiB or bucket_cap_mb if smaller, the others at bucket_cap_mb, default 25); one
-- all-reduce per bucket. Contiguous host gradients are averaged where they are
-- (dist._all_reduce_multi over the bucket's tensors). Otherwise (GPU memory,
-- non-contiguous) the bucket is a flat tensor, made on first use: the gradients are
-- copied in and the averages copied back into each .grad (PyTorch's default); with
-- gradient_as_bucket_view=true the .grad become views of it instead (no copy back;
-- a .grad kept from an earlier step is then overwritten by the next).
local FIRST_BUCKET_BYTES = 1024 * 1024

-- The plan is made at the first gradient sync of a fit and kept for the rest of it
-- (walking the module tree for its parameters each step cost ~15 µs): as with
-- PyTorch's DDP, the set of parameters is fixed once training starts.
function DDPStrategy:_bucket_plan(model)
  local plan = self._buckets
  if plan and plan.model == model then return plan end
  local params = parameters(model)
  local T = require 'dpl.tensor'
  local kw = self._ddp_kwargs or {}
  local cap = (kw.bucket_cap_mb or 25) * 1024 * 1024
  plan = { model = model, list = {}, as_view = kw.gradient_as_bucket_view == true, included = {}, n_included = 0 }
  local open = {} -- dtype/device key -> the bucket being filled
  for i = #params, 1, -1 do
    local p = params[i]
    local t = tensor_of(p)
    if t and (p.requires_grad ~= false) then
      plan.included[p] = true
      plan.n_included = plan.n_included + 1
      local key = tostring(t.dtype) .. '@' .. tostring(t.device)
      local b = open[key]
      if b == nil then
        b = { dtype = t.dtype, device = t.device, numel = 0, bytes = 0, members = {}, list = {},
              cap = #plan.list == 0 and math.min(FIRST_BUCKET_BYTES, cap) or cap }
        plan.list[#plan.list + 1] = b
        open[key] = b
      end
      local n = t:numel()
      b.members[#b.members + 1] = { p = p, off = b.numel, n = n, shape = t:size() }
      b.numel = b.numel + n
      b.bytes = b.bytes + n * t:element_size()
      if b.bytes >= b.cap then open[key] = nil end
    end
  end
  -- the last bucket carries the GC vote (see _sync_gradients) when it is in host memory;
  -- with GPU buckets the vote goes through the group's host backend on its own (reading
  -- it back from the GPU would make the host wait for the step's GPU work each step)
  local last = plan.list[#plan.list]
  if last and tostring(last.device) == 'cpu' then
    last.vote = T.zeros({ 1 }, { dtype = last.dtype, device = last.device })
  elseif last then
    plan.host_vote = ffi.new('double[1]')
  end
  self._buckets = plan
  return plan
end

--- Called by the fit loop after the train-epoch-start hooks: when the parameters requiring
--- gradients are no longer those the plan holds (BaseFinetuning/BackboneFinetuning unfreeze
--- modules there; PyTorch's DDP would leave them out for good, so Lightning's ranks drift
--- apart, Lightning issue #20340), the plan is made again at the next sync.
function DDPStrategy:_refresh_bucket_plan(model)
  local plan = self._buckets
  if plan == nil then return end
  if plan.model ~= model then self._buckets = nil return end
  local n = 0
  for _, p in ipairs(parameters(model)) do
    if tensor_of(p) and p.requires_grad ~= false then
      if not plan.included[p] then self._buckets = nil return end
      n = n + 1
    end
  end
  if n ~= plan.n_included then self._buckets = nil end
end

-- The bucket's flat tensor and the members' views of it (one more element for the vote).
local function flat_of(b, T)
  if b.flat then return b.flat end
  local extra = b.vote and 1 or 0
  b.flat = T.zeros({ b.numel + extra }, { dtype = b.dtype, device = b.device })
  if extra == 1 then b.flat_vote = b.flat:narrow(1, b.numel + 1, 1) end
  for _, m in ipairs(b.members) do m.view = b.flat:narrow(1, m.off + 1, m.n):view(m.shape) end
  return b.flat
end

-- A parameter unused on this rank gets a zero gradient, so that the ranks' collectives
-- stay aligned (DDP's find_unused_parameters).
local function zero_grad_for(b, m, T)
  local z = T.zeros(m.shape, { dtype = b.dtype, device = b.device })
  m.p.grad = z
  return z
end

--- Averages the gradients over the ranks: one all-reduce per bucket. The last
--- bucket carries one more element (host buckets; GPU ones: an 8-byte host all-reduce
--- after them): 1 on a rank whose garbage collection is due (tensor.gc_lockstep);
--- when any rank's is, every rank collects right after the all-reduce, so no rank
--- waits for another's collection at its next collective.
function DDPStrategy:_sync_gradients(model)
  if self.world_size <= 1 then return end
  local dist = require 'dpl.dist'
  local T = require 'dpl.tensor'
  local plan = self:_bucket_plan(model)
  for _, b in ipairs(plan.list) do
    if b.vote then b.vote:fill_(T.gc_due() and 1 or 0) end
    if plan.as_view or not self:_sync_in_place(b, dist, T) then self:_sync_flat(b, plan, dist, T) end
  end
  local hv = plan.host_vote
  if hv then
    hv[0] = T.gc_due() and 1 or 0
    dist.all_reduce(hv, 'max', { count = 1, dtype = 'float64' })
    if hv[0] > 0 then T.collect() end
    return
  end
  local last = plan.list[#plan.list]
  if last and last.vote:item() > 0 then T.collect() end
end

-- One bucket reduced in place over the gradients themselves (and the vote); false
-- (nothing done) when a gradient is not a contiguous host tensor of the bucket's dtype.
function DDPStrategy:_sync_in_place(b, dist, T)
  local list, k = b.list, 0
  for _, m in ipairs(b.members) do
    local g = grad_of(m.p)
    if g == nil or g == m.view then g = zero_grad_for(b, m, T) end
    k = k + 1
    list[k] = g
  end
  if b.vote then k = k + 1; list[k] = b.vote end
  for i = #list, k + 1, -1 do list[i] = nil end
  return dist._all_reduce_multi(list, 'mean')
end

-- One bucket through its flat tensor: copied in, all-reduced, copied back (or viewed).
function DDPStrategy:_sync_flat(b, plan, dist, T)
  local flat = flat_of(b, T)
  for _, m in ipairs(b.members) do
    local g = grad_of(m.p)
    if g == nil then m.view:zero_() elseif g ~= m.view then m.view:copy_(g) end
  end
  if b.vote then b.flat_vote:copy_(b.vote) end
  dist.all_reduce(flat, 'mean')
  if b.vote then b.vote:copy_(b.flat_vote) end
  for _, m in ipairs(b.members) do
    local g = grad_of(m.p)
    if plan.as_view then
      if g ~= m.view then m.p.grad = m.view end
    elseif g == nil or g == m.view then
      m.p.grad = m.view:clone()
    else
      g:copy_(m.view)
    end
  end
end

function DDPStrategy:optimizer_step(optimizer, opt_idx, closure, model)
  local result = closure()
  self:_sync_gradients(model)
  return self:_finish_optimizer_step(optimizer, opt_idx, result, model)
end

local DDPSpawnStrategy = DDPStrategy:extend('DDPSpawnStrategy')
DDPSpawnStrategy.strategy_name = 'ddp_spawn'
M.DDPSpawnStrategy = DDPSpawnStrategy

function DDPSpawnStrategy:__init(opts)
  DDPStrategy.__init(self, opts)
  self.start_method = opts.start_method or 'fork'
end

-- in the parent, before the workers exist: local rank 0 of num_processes
function DDPSpawnStrategy:set_world_ranks()
  self.local_rank = 0
  S.ParallelStrategy.set_world_ranks(self)
  self.root_device = self.parallel_devices and self.parallel_devices[self.local_rank + 1] or self.root_device
end

-- its workers are its own: nothing to check against a launcher
function DDPSpawnStrategy:validate_settings() end

--- The launcher that forks the workers (nil with one process).
function DDPSpawnStrategy:launcher_for()
  if self.num_processes * self.num_nodes <= 1 or self._in_worker then return nil end
  return require 'dpl.strategies.spawn'
end

--- In a worker: this process's index (its local and global rank).
function DDPSpawnStrategy:_set_process_index(i)
  self._in_worker = true
  self.local_rank = i
  S.ParallelStrategy.set_world_ranks(self)
  self.root_device = self.parallel_devices and self.parallel_devices[i + 1] or self.root_device
end

return M
