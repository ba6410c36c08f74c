-- tuner_ddp_script.lua: lr_find under dplhost --nproc 2 (ddp), then a fit; prints each rank's
-- suggested lr and the fit's steps (spec/trainer_tuner_spec.lua).
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local M = dpl.LightningModule:extend('Tiny')
function M:__init() dpl.LightningModule.__init(self) self.lr = 0.1 dpl.manual_seed(0) self.net = nn.Linear(8, 4) end
-- rank 1 records a loss that drops steeply from its 30th step (by a constant: the gradients,
-- and so the training, are unchanged), so its own suggestion would differ from rank 0's
function M:training_step(b)
  local l = F.cross_entropy(self.net(b[1]), b[2])
  if self.global_rank == 1 and self.trainer.global_step >= 30 then l = l - 5 end
  return l
end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), self.lr) end
local ds = dpl.datasets.SyntheticClassification { n = 2048, features = 8, classes = 4, seed = 2 }
local t = dpl.Trainer { strategy = 'ddp', max_epochs = 1, logger = false, enable_progress_bar = false, enable_checkpointing = false,
  enable_model_summary = false }
local m = M()
t.tuner:lr_find(m, dpl.data.DataLoader(ds, { batch_size = 16 }), { num_training = 50, update_attr = true })
t:fit(m, dpl.data.DataLoader(ds, { batch_size = 16 }))
print(('rank %d lr %.17g steps %d'):format(t.global_rank, m.lr, t.global_step))
