-- tune_ddp_script.lua: the batch size finder under dplhost --nproc 2 (ddp): scale_batch_size and
-- tune with auto_scale_batch_size refuse on every rank alike (Lightning's distributed refusal:
-- a rank that ran out of memory mid-step would leave the other waiting in the gradient
-- all-reduce), then tune with auto_lr_find only, then a fit (spec/trainer_tune_spec.lua).
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local M = dpl.LightningModule:extend('Tiny')
function M:__init() dpl.LightningModule.__init(self) self.lr, self.batch_size = 0.1, 16 dpl.manual_seed(0) self.net = nn.Linear(8, 4) end
local ds = dpl.datasets.SyntheticClassification { n = 2048, features = 8, classes = 4, seed = 2 }
function M:train_dataloader() return dpl.data.DataLoader(ds, { batch_size = self.batch_size }) end
function M:training_step(b) return F.cross_entropy(self.net(b[1]), b[2]) end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), self.lr) end
local function trainer(o)
  local a = { strategy = 'ddp', max_epochs = 1, logger = false, enable_progress_bar = false, enable_checkpointing = false,
    enable_model_summary = false }
  for k, v in pairs(o or {}) do a[k] = v end
  return dpl.Trainer(a)
end
local m = M()
local t = trainer()
local ok, e = pcall(t.tuner.scale_batch_size, t.tuner, m)
print(('rank %d sbs %s'):format(t.global_rank, ok and 'ran' or tostring(e)))
local t1 = trainer({ auto_scale_batch_size = true, auto_lr_find = true })
ok, e = pcall(t1.tune, t1, m)
print(('rank %d tune %s'):format(t.global_rank, ok and 'ran' or tostring(e)))
local t2 = trainer({ auto_lr_find = true })
t2:tune(m, { lr_find_kwargs = { num_training = 30 } })
t2:fit(m)
print(('rank %d lr %.17g bs %d steps %d'):format(t2.global_rank, m.lr, m.batch_size, t2.global_step))
