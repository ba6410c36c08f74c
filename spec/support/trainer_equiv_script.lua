-- trainer_equiv_script.lua: DDP equivalence with real tensors (nn.Linear, SGD with
-- momentum, cross-entropy). arg[1] = "single" (one process, batch 2b) or "ddp" (under
-- dplhost --nproc 2, batch b per rank; the DistributedSampler interleaves the items, so
-- each step sees the same 2b items); arg[2] = b, arg[3] = steps. Prints the weights.
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local mode, b, k = arg[1], tonumber(arg[2]), tonumber(arg[3])
-- arg[4] = "deep": two layers and a parameter no step uses; ddp then runs with
-- buckets of ~20 bytes (one or two parameters each), .grad as bucket views
local deep = arg[4] == 'deep'
-- arg[4] = "bn": a BatchNorm1d between the layers; the ddp modes run with sync_batchnorm=true,
-- so their batch statistics cover the 2b items as the single process's do (running stats
-- are printed too)
local bn = arg[4] == 'bn'

local M = dpl.LightningModule:extend('Equiv')
function M:__init()
  dpl.LightningModule.__init(self)
  dpl.manual_seed(0)
  if bn then
    self.net = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 3))
  elseif deep then
    self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    self.unused = nn.Linear(2, 2)
  else
    self.net = nn.Linear(4, 3)
  end
end
function M:forward(x) return self.net(x) end
function M:training_step(batch) return F.cross_entropy(self(batch[1]), batch[2]) end
function M:configure_optimizers()
  -- horovod multiplies lr by the world size: start from lr / size to compare
  local lr = mode == 'horovod' and 0.1 / self.trainer.world_size or 0.1
  return dpl.optim.SGD(self:parameters(), { lr = lr, momentum = 0.9 })
end

dpl.manual_seed(1)
local x = dpl.randn({ 64, 4 })
local y = dpl.randint(1, 4, { 64 })
local ds = dpl.data.TensorDataset(x, y)
-- one process with the whole batch: single and dp (dp scatters it over 2 simulated GPUs)
-- ddp2 (2 processes as 2 nodes, each DP over 2 simulated GPUs): 2b per process
local loader = dpl.data.DataLoader(ds, { batch_size = (mode == 'single' or mode == 'dp' or mode == 'ddp2') and 2 * b or b })
local strategy = mode ~= 'single' and mode or nil
if deep and mode == 'ddp' then strategy = dpl.strategies.DDPStrategy{ bucket_cap_mb = 2e-5, gradient_as_bucket_view = true } end
local t = dpl.Trainer{ strategy = strategy, max_steps = k, enable_progress_bar = false,
  enable_model_summary = false, logger = false, enable_checkpointing = false,
  accelerator = mode == 'ddp_spawn' and 'cpu' or (mode == 'dp' or mode == 'ddp2') and 'gpu' or nil,
  devices = (mode == 'ddp_spawn' or mode == 'dp' or mode == 'ddp2') and 2 or nil,
  num_nodes = mode == 'ddp2' and 2 or nil, sync_batchnorm = bn and mode ~= 'single' or nil }
local m = M()
t:fit(m, loader)
local parts = {}
for _, p in ipairs(m:parameters()) do
  for _, v in ipairs(p:view(-1):tolist()) do parts[#parts + 1] = ('%.7g'):format(v) end
end
if bn then
  local norm = m.net[2]
  for _, b in ipairs({ norm.running_mean, norm.running_var }) do
    for _, v in ipairs(b:view(-1):tolist()) do parts[#parts + 1] = ('%.7g'):format(v) end
  end
  print(('rank %d norm %s'):format(t.global_rank, getmetatable(norm).__name))
end
if t.is_global_zero then print('weights ' .. table.concat(parts, ' ')) end
print(('rank %d steps %d'):format(t.global_rank, t.global_step))
if t.strategy._buckets then print(('rank %d buckets %d'):format(t.global_rank, #t.strategy._buckets.list)) end
