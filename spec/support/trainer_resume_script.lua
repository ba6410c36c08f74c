-- trainer_resume_script.lua: 2 epochs straight vs 1 epoch + resume for 1 epoch,
-- with real tensors (nn.Linear, SGD with momentum: its buffers are in the
-- checkpoint), shuffled data. arg[1]: a directory. Prints both weight lists.
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local dir = arg[1]

local M = dpl.LightningModule:extend('Resume')
function M:__init()
  dpl.LightningModule.__init(self)
  dpl.manual_seed(0)
  self.net = nn.Linear(4, 3)
end
function M:forward(x) return self.net(x) end
function M:training_step(batch) return F.cross_entropy(self(batch[1]), batch[2]) end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1, momentum = 0.9 }) end

local th = require 'spec.support.trainer_helpers'
local flat = th.flat_params
local a, _, c = th.resume_runs(M, dir)
print('straight ' .. flat(a))
print('resumed  ' .. flat(c))
