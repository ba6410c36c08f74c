-- datamodule_ddp_script.lua: a LightningDataModule under dplhost --nproc 2 (ddp): prints
-- which hooks ran on each rank (prepare_data on local rank 0 only, setup/teardown on every
-- rank), how many samples each rank trained on (the Trainer gives the datamodule's loader a
-- DistributedSampler) and the final weights' sum (the same on both ranks).
-- Argument: "per_node" (default) or "global" (prepare_data_per_node = false).
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional

local M = dpl.LightningModule:extend('DdpDmModel')
function M:__init() dpl.LightningModule.__init(self) dpl.manual_seed(0) self.net = nn.Linear(8, 4) self.seen = 0 end
function M:training_step(b)
  self.seen = self.seen + b[1]:size(1)
  return F.cross_entropy(self.net(b[1]), b[2])
end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), 0.1) end

local calls = {}
local DM = dpl.LightningDataModule:extend('DdpDm')
function DM:__init() dpl.LightningDataModule.__init(self) self.prepare_data_per_node = arg[1] ~= 'global' end
function DM:prepare_data() calls[#calls + 1] = 'prepare_data' end
function DM:setup(stage)
  calls[#calls + 1] = 'setup(' .. stage .. ')'
  self.ds = dpl.datasets.SyntheticClassification { n = 256, features = 8, classes = 4, seed = 2 }
end
function DM:teardown(stage) calls[#calls + 1] = 'teardown(' .. stage .. ')' end
function DM:train_dataloader() return dpl.data.DataLoader(self.ds, { batch_size = 16, shuffle = true, seed = 1 }) end

local t = dpl.Trainer { strategy = 'ddp', max_epochs = 1, logger = false, enable_progress_bar = false,
  enable_checkpointing = false, enable_model_summary = false }
local m = M()
t:fit(m, DM())
print(('rank %d calls %s seen %d wsum %.9g'):format(t.global_rank, table.concat(calls, ','), m.seen,
  m.net.weight:sum():item()))
