-- trainer_unused_script.lua: under dplhost --nproc 2, each rank trains a different layer (the
-- other is unused there): DDP gives unused parameters zero gradients, the ranks stay in step.
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local M = dpl.LightningModule:extend('U')
function M:__init() dpl.LightningModule.__init(self); dpl.manual_seed(0); self.a = nn.Linear(4, 3); self.b = nn.Linear(4, 3) end
function M:parameters() local p = self.a:parameters(); for _, x in ipairs(self.b:parameters()) do p[#p + 1] = x end; return p end
function M:training_step(batch)
  local net = self.trainer.global_rank == 0 and self.a or self.b  -- each rank uses a different layer
  return F.cross_entropy(net(batch[1]), batch[2])
end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
dpl.manual_seed(1)
local ds = dpl.data.TensorDataset(dpl.randn({ 16, 4 }), dpl.randint(1, 4, { 16 }))
local t = dpl.Trainer{ strategy = 'ddp', max_steps = 3, logger = false, enable_checkpointing = false, enable_progress_bar = false, enable_model_summary = false }
local m = M()
t:fit(m, dpl.data.DataLoader(ds, { batch_size = 4 }))
print('rank', t.global_rank, 'ok', m.a.weight:sum():item(), m.b.weight:sum():item())
