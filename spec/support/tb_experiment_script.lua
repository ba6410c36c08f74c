-- tb_experiment_script.lua: a short fit on real Fashion-MNIST (a few batches) whose module
-- writes through self.logger.experiment (an image grid of its first batch, a histogram of a
-- weight, a text naming its rank) next to self:log (spec/tb_writer_spec.lua).
--   dplhost [--nproc 2] spec/support/tb_experiment_script.lua DIR [ddp [direct]]   (prints "rank R steps S";
--   direct: then every rank calls log_hyperparams/log_metrics/save/finalize of the TensorBoardLogger
--   and of a CSVLogger itself)
--   require('spec.support.tb_experiment_script').fit(dir, strategy) -> trainer, module
local dpl = require 'dpl'
local F = dpl.nn.functional

local M = {}

local Net = dpl.LightningModule:extend('TbExperimentNet')
function Net:__init()
  dpl.LightningModule.__init(self)
  self.fc = dpl.nn.Linear(784, 10)
end
function Net:forward(x) return self.fc(x:reshape(-1, 784)) end
function Net:training_step(batch, i)
  local loss = F.cross_entropy(self(batch[1]), batch[2])
  self:log('train_loss', loss)
  local tb = self.logger.experiment
  if i == 1 then
    tb:add_images('first_batch', batch[1], self.global_step) -- [B, 1, 28, 28] in [0, 1]: NCHW
    tb:add_image('first_image', batch[1][1], self.global_step) -- [1, 28, 28]: CHW
    tb:add_text('rank', ('rank %d'):format(self.global_rank), self.global_step)
  end
  tb:add_histogram('fc.weight', self.fc.weight, self.global_step)
  return loss
end
function Net:configure_optimizers() return dpl.optim.SGD(self:parameters(), 0.1) end
M.Net = Net

function M.fit(dir, strategy)
  dpl.manual_seed(0)
  local ds = dpl.data.Subset(dpl.datasets.FashionMNIST{ train = true }, dpl.data.range(1, 64))
  local loader = dpl.data.DataLoader(ds, { batch_size = 8 })
  local t = dpl.Trainer{ max_epochs = 1, limit_train_batches = 3, enable_progress_bar = false, enable_model_summary = false,
    enable_checkpointing = false, log_every_n_steps = 1, strategy = strategy,
    logger = dpl.loggers.TensorBoardLogger{ save_dir = dir } }
  local m = Net()
  t:fit(m, loader)
  return t, m
end

if select('#', ...) > 0 and (...) == 'spec.support.tb_experiment_script' then return M end

local t = M.fit(arg[1], arg[2])
print(('rank %d steps %d'):format(t.global_rank, t.global_step))
if arg[3] == 'direct' then
  -- every rank calls the loggers' methods itself (Lightning's are rank_zero_only: only rank 0 writes)
  local csv = dpl.loggers.CSVLogger{ save_dir = arg[1], name = 'csv' }
  local tbl = dpl.loggers.TensorBoardLogger{ save_dir = arg[1], name = 'tb' }
  for _, lg in ipairs({ tbl, csv }) do
    lg:log_hyperparams({ rank = t.global_rank })
    lg:log_metrics({ direct = t.global_rank }, 99)
    lg:save()
    lg:finalize('success')
  end
end
