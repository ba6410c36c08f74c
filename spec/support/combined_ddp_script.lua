-- combined_ddp_script.lua: fit on a table of two training loaders under dplhost --nproc 2
-- (ddp): each loader gets its own DistributedSampler, so each rank sees its share of both;
-- prints the samples of each loader this rank trained on (spec/trainer_combined_spec.lua).
local dpl = require 'dpl'
local data = dpl.data
local M = dpl.LightningModule:extend('CombDdp')
function M:__init() dpl.LightningModule.__init(self) self.l = dpl.nn.Linear(1, 1) self.a, self.b = {}, {} end
function M:training_step(batch)
  for _, v in ipairs(batch.a[1]:totable()) do self.a[#self.a + 1] = v end
  for _, v in ipairs(batch.b[1]:totable()) do self.b[#self.b + 1] = v end
  return self.l(batch.a[1]:float():reshape(-1, 1)):sum()
end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), 0.01) end
local function rl(n) return data.DataLoader(data.TensorDataset(dpl.arange(n)), { batch_size = 2 }) end
local t = dpl.Trainer { strategy = 'ddp', max_epochs = 1, logger = false, enable_progress_bar = false,
  enable_checkpointing = false, enable_model_summary = false, multiple_trainloader_mode = arg[1] or 'max_size_cycle' }
local m = M()
t:fit(m, { a = rl(8), b = rl(12) })
print(('rank %d steps %d a %s b %s'):format(t.global_rank, t.global_step, table.concat(m.a, ','), table.concat(m.b, ',')))
