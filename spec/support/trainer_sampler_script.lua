-- trainer_sampler_script.lua: under `dplhost --nproc 2` (strategy='ddp') or alone, for
-- trainer_ddp_spec. The training loader has a custom sampler (the even positions
-- 2..20): under DDP each rank gets its share of what that sampler yields (Lightning's
-- DistributedSamplerWrapper), and the user's loaders and list of loaders are left as
-- they were (the Trainer builds its own). Prints the items seen per epoch and the
-- user's loader afterwards.
local dpl = require 'dpl'
local th = require 'spec.support.trainer_helpers'
local data = dpl.data
local rank = tonumber(os.getenv('RANK') or '0')

local Even = data.Sampler:extend('Even')
function Even:indices() local t = {}; for i = 2, 20, 2 do t[#t + 1] = i end; return t end
function Even:__len() return 10 end

local seen = {}
local M = dpl.LightningModule:extend('M')
function M:training_step(batch)
  local e = self.current_epoch + 1
  seen[e] = (seen[e] and seen[e] .. ',' or '') .. table.concat(batch, ',')
  return th.loss(1)
end
function M:validation_step(batch) end
function M:configure_optimizers() return th.Optimizer() end

local sampler = Even()
local loader = data.DataLoader(th.loader(40).dataset, { batch_size = 5, sampler = sampler,
  collate_fn = function(items) return items end })
local val = { th.loader(6), th.loader(4) }
local val1, val2 = val[1], val[2]
local t = dpl.Trainer{ strategy = os.getenv('RANK') and 'ddp' or nil, max_epochs = 2, logger = false,
  enable_checkpointing = false, enable_progress_bar = false, enable_model_summary = false, num_sanity_val_steps = 0 }
t:fit(M(), loader, val)
print(('rank %d epoch0=%s epoch1=%s'):format(rank, seen[1], seen[2]))
print(('rank %d user loader: batches=%d sampler=%s same_sampler=%s vals=%d same_vals=%s val_batches=%d,%d trainer_batches=%d'):format(
  rank, #loader, loader.sampler.__name, tostring(loader.sampler == sampler), #val,
  tostring(val[1] == val1 and val[2] == val2), #val1, #val2, t.num_training_batches))
