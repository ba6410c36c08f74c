-- trainer_ddp_dpl.lua: one epoch of the Fashion-MNIST MLP (batch 64 per rank, SGD)
-- under dpl.Trainer; run alone or under `dplhost --nproc 2` with strategy ddp. Prints
-- (rank 0) the epoch's wall time and the samples/s over all ranks.
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local C = require('dpl.capi').C
dpl.set_num_threads(1)
-- DDP_SYNC=lockstep: the ranks meet once a step (one 8-byte all-reduce, which also carries
-- the GC vote) but do not average gradients: what running in lockstep costs by itself
if os.getenv('DDP_SYNC') == 'lockstep' then
  local ddp, T, ffi = require 'dpl.strategies.ddp', require 'dpl.tensor', require 'ffi'
  local v = ffi.new('double[1]')
  ddp.DDPStrategy._sync_gradients = function()
    v[0] = T.gc_due() and 1 or 0
    dpl.dist.all_reduce(v, 'max', { count = 1, dtype = 'float64' })
    if v[0] > 0 then T.collect() end
  end
end
local train = dpl.datasets.FashionMNIST { train = true }
local loader = dpl.data.DataLoader(train, { batch_size = 64, shuffle = true, seed = 0 })
local M = dpl.LightningModule:extend('MLP')
function M:__init()
  dpl.LightningModule.__init(self)
  dpl.manual_seed(0)
  self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
end
function M:forward(x) return self.net(x) end
function M:training_step(b) return F.cross_entropy(self(b[1]), b[2]) end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.01, momentum = 0.9 }) end
local t0
function M:on_train_epoch_start() self.trainer.strategy:barrier(); t0 = C.dpl_clock() end
function M:on_train_epoch_end() self.trainer.strategy:barrier(); self.secs = C.dpl_clock() - t0 end
local t = dpl.Trainer{ strategy = os.getenv('WORLD_SIZE') and 'ddp' or nil, max_epochs = 1, logger = false,
  enable_checkpointing = false, enable_progress_bar = false, enable_model_summary = false }
local m = M()
t:fit(m, loader)
if t.is_global_zero then
  print(('%d %.3f %.0f'):format(t.world_size, m.secs, t.num_training_batches * 64 * t.world_size / m.secs))
end
