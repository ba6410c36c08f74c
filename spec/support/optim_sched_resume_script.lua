-- optim_sched_resume_script.lua: 2 epochs straight vs 1 epoch + resume for 1 epoch with lr
-- schedulers (a per-step SequentialLR warmup -> cosine and a per-epoch ExponentialLR on the same
-- optimizer: the chainable forms compose; their state and the optimizer's lrs are in the
-- checkpoint). arg[1]: a directory. Prints both runs' weights and lrs.
local dpl = require 'dpl'
local nn, F, S = dpl.nn, dpl.nn.functional, dpl.optim.lr_scheduler
local dir = arg[1]

local M = dpl.LightningModule:extend('SchedResume')
function M:__init()
  dpl.LightningModule.__init(self)
  dpl.manual_seed(0)
  self.net = nn.Linear(4, 3)
  self.lrs = {}
end
function M:forward(x) return self.net(x) end
function M:training_step(batch)
  self.lrs[#self.lrs + 1] = ('%.17g'):format(self:optimizers().optimizer.param_groups[1].lr)
  return F.cross_entropy(self(batch[1]), batch[2])
end
function M:configure_optimizers()
  local opt = dpl.optim.SGD(self:parameters(), { lr = 0.1, momentum = 0.9 })
  local warm = S.LinearLR(opt, { start_factor = 0.2, total_iters = 3 })
  local cos = S.CosineAnnealingLR(opt, { T_max = 8, eta_min = 0.001 })
  local seq = S.SequentialLR(opt, { schedulers = { warm, cos }, milestones = { 3 } })
  return { { opt }, { { scheduler = seq, interval = 'step' }, S.ExponentialLR(opt, { gamma = 0.7 }) } }
end

local th = require 'spec.support.trainer_helpers'
local flat = th.flat_params
local a, b, c = th.resume_runs(M, dir)
-- the lrs of the resumed run's second epoch follow the first run's
local lrs = {}
for _, v in ipairs(b.lrs) do lrs[#lrs + 1] = v end
for _, v in ipairs(c.lrs) do lrs[#lrs + 1] = v end
print('straight ' .. flat(a) .. ' lrs ' .. table.concat(a.lrs, ' '))
print('resumed  ' .. flat(c) .. ' lrs ' .. table.concat(lrs, ' '))
if a.lrs[1] ~= a.lrs[#a.lrs] and a.lrs[2] ~= a.lrs[7] then print('lrs changed') end
