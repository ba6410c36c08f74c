-- trainer_subprocess_script.lua: strategy='ddp' with devices=2 from a plain
-- `dplhost script.lua DIR`: this process is rank 0 and re-runs the script for rank 1.
local dpl = require 'dpl'
local th = require 'spec.support.trainer_helpers'
local dir = arg[1]
local M = dpl.LightningModule:extend('Sub')
function M:__init() dpl.LightningModule.__init(self); self.items = {} end
function M:training_step(batch) self.items[#self.items + 1] = batch[1]; return th.loss(1) end
function M:configure_optimizers() return th.Optimizer() end
local t = dpl.Trainer{ strategy = 'ddp', accelerator = 'cpu', devices = 2, max_epochs = 1, logger = false,
  enable_checkpointing = false, enable_progress_bar = false, enable_model_summary = false }
local m = M()
t:fit(m, th.loader(6))
local line = ('rank %d/%d items=%s'):format(t.global_rank, t.world_size, table.concat(m.items, ','))
if t.global_rank == 1 then
  local f = assert(io.open(dir .. '/rank1.txt', 'w')); f:write(line); f:close()
end
t.strategy:barrier()
if t.global_rank == 0 then print(line) end
