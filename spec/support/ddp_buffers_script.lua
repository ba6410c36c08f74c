-- ddp_buffers_script.lua: BatchNorm running statistics under dplhost --nproc 2 (or mpirun for
-- horovod): prints, per rank, the running_mean each training step and the first validation step
-- of each epoch start from (after the strategy's buffer sync), so the spec can compare ranks.
-- Each rank starts from its own statistics (filled with its rank): the setup sync must replace
-- them with rank 0's. Arguments: strategy ('ddp' | 'horovod'), broadcast_buffers ('true'|'false').
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local strategy, bb = arg[1] or 'ddp', arg[2] ~= 'false'

local M = dpl.LightningModule:extend('BufModel')
function M:__init()
  dpl.LightningModule.__init(self)
  dpl.manual_seed(0)
  self.bn = nn.BatchNorm1d(2)
  self.fc = nn.Linear(2, 2)
  self.seen = {}
  -- each rank builds its own statistics (the launcher's rank variable: the Trainer is not
  -- there yet); the strategy's setup must replace them with rank 0's
  local r = tonumber(os.getenv('RANK') or os.getenv('OMPI_COMM_WORLD_RANK') or '0')
  self.bn.running_mean:fill_(10 * (r + 1))
end
local function snap(self, tag)
  local rm = self.bn.running_mean:totable()
  self.seen[#self.seen + 1] = ('%s:%.9g,%.9g'):format(tag, rm[1], rm[2])
end
function M:training_step(b) snap(self, 't') return F.cross_entropy(self.fc(self.bn(b[1])), b[2]) end
function M:validation_step(b, i) if i == 0 or i == 1 then snap(self, 'v') end end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), 0.1) end

local ds = dpl.datasets.SyntheticClassification { n = 64, features = 2, classes = 2, seed = 3 }
local strat = strategy
if strategy == 'ddp' and not bb then strat = dpl.strategies.DDPStrategy { broadcast_buffers = false } end
local t = dpl.Trainer { strategy = strat, max_epochs = 2, logger = false, enable_progress_bar = false,
  enable_checkpointing = false, enable_model_summary = false, num_sanity_val_steps = 0 }
local m = M()
t:fit(m, dpl.data.DataLoader(ds, { batch_size = 8 }), dpl.data.DataLoader(ds, { batch_size = 8 }))
print(('rank %d %s'):format(t.global_rank, table.concat(m.seen, ' ')))
