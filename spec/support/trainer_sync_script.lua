-- trainer_sync_script.lua: sync_dist logging across 2 ranks with uneven shards (run by
-- trainer_ddp_spec under `dplhost --nproc 2` or mpirun). arg[1]: 'cpu' (numbers and CPU
-- tensors) or 'gpu' (tensors on simulated GPUs: the lazy path, read back in batches).
-- Rank 0 validates on one batch of 8 samples, rank 1 on one batch of 2
-- (use_distributed_sampler = false); each rank trains 2 steps of 4 samples.
-- Lightning syncs once: a step value at self:log, an epoch value at the epoch's end
-- (sum and batch size for a mean). Prints "rank R k=v ..." sorted by key.
local dpl = require 'dpl'
local acc = arg[1] or 'cpu'
local rank = tonumber(os.getenv('RANK') or os.getenv('OMPI_COMM_WORLD_RANK'))

local function val(self, x)
  if acc == 'gpu' then return dpl.tensor({ x }, { device = self.device }):reshape({}) end
  return x
end

local M = dpl.LightningModule:extend('SyncModel')
function M:__init()
  dpl.LightningModule.__init(self)
  self.l = dpl.nn.Linear(1, 1)
end
function M:training_step(b)
  local r1 = rank + 1
  -- on step and epoch: the step value is the ranks' mean (1.5) / sum (3); the epoch
  -- value the ranks' weighted mean (1.5) / the sum of all (6)
  self:log('ts', val(self, r1), { sync_dist = true, on_step = true, on_epoch = true })
  self:log('tsum', val(self, r1), { sync_dist = true, on_step = true, on_epoch = true, reduce_fx = 'sum' })
  -- epoch only: a count of 1 per batch (4 batches in all), the largest rank
  self:log('tcount', val(self, 1), { sync_dist = true, on_step = false, on_epoch = true, reduce_fx = 'sum' })
  self:log('tmax', val(self, rank), { sync_dist = true, on_step = false, on_epoch = true, reduce_fx = 'max' })
  local y = self.l(b[1])
  return (y * y):mean()
end
function M:validation_step(b)
  local n = b[1]:size(1)
  -- the mean weighted by batch size: (8 * 1 + 2 * 3) / 10 = 1.4
  self:log('m', val(self, rank == 0 and 1 or 3), { sync_dist = true })
  self:log('n', val(self, n), { sync_dist = true, reduce_fx = 'sum' })          -- 8 + 2
  self:log('ones', val(self, 1), { sync_dist = true, reduce_fx = 'sum' })       -- one batch per rank: 2
  self:log('mn', val(self, rank + 5), { sync_dist = true, reduce_fx = 'min' })  -- 5
  self:log('local_n', n, { reduce_fx = 'sum' })                                  -- no sync: 8 or 2
end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.01 }) end

local function ds(n) return dpl.data.TensorDataset(dpl.ones({ n, 1 })) end
local hvd = os.getenv('OMPI_COMM_WORLD_SIZE') ~= nil
local t = dpl.Trainer{ strategy = hvd and 'horovod' or 'ddp', accelerator = acc, devices = (not hvd) and 2 or nil,
  max_epochs = 1, logger = false, num_sanity_val_steps = 0, use_distributed_sampler = false,
  log_every_n_steps = 1, enable_checkpointing = false, enable_progress_bar = false, enable_model_summary = false }
t:fit(M(), dpl.data.DataLoader(ds(8), { batch_size = 4 }), dpl.data.DataLoader(ds(rank == 0 and 8 or 2), { batch_size = 8 }))
local keys = {}
for k in pairs(t.callback_metrics) do keys[#keys + 1] = k end
table.sort(keys)
local parts = {}
for _, k in ipairs(keys) do parts[#parts + 1] = ('%s=%.6g'):format(k, t.callback_metrics[k]) end
print(('rank %d %s logged ts_step=%.6g tsum_step=%.6g'):format(rank, table.concat(parts, ' '),
  t.logged_metrics.ts_step, t.logged_metrics.tsum_step))
