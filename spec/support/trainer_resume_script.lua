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

dpl.manual_seed(1)
local ds = dpl.data.TensorDataset(dpl.randn({ 40, 4 }), dpl.randint(1, 4, { 40 }))
local function loader() return dpl.data.DataLoader(ds, { batch_size = 8, shuffle = true, seed = 5 }) end
local function trainer(epochs, ckpt)
  return dpl.Trainer{ max_epochs = epochs, enable_progress_bar = false, enable_model_summary = false, logger = false,
    enable_checkpointing = ckpt or false, default_root_dir = dir, deterministic = true }
end
local function flat(m)
  local parts = {}
  for _, p in ipairs(m:parameters()) do
    for _, v in ipairs(p:view(-1):tolist()) do parts[#parts + 1] = ('%.9g'):format(v) end
  end
  return table.concat(parts, ' ')
end
local a = M()
trainer(2):fit(a, loader())
local b = M()
local t1 = trainer(1, true)
t1:fit(b, loader())
local c = M()
trainer(2):fit(c, loader(), nil, { ckpt_path = t1.checkpoint_callback.best_model_path })
print('straight ' .. flat(a))
print('resumed  ' .. flat(c))
