-- host_signal_trainer.lua: a Trainer fit (ddp under dplhost --nproc) whose
-- process has tensor worker threads; a signal sent from outside (SLURM's SIGUSR1
-- or SIGTERM) must stop it at a batch boundary with a checkpoint.
-- arg[1]: default_root_dir; arg[2]: a file prefix, <prefix><rank> is created
-- during batch 2. Prints the outcome per rank; exits 3 when fit raised.
local dpl = require 'dpl'
local th = require 'spec.support.trainer_helpers'
local dir, ready = arg[1], arg[2]
local rank = tonumber(os.getenv('RANK') or '0')
dpl.set_num_threads(4)
local x = dpl.randn(1024, 1024)
for _ = 1, 4 do x = x + 1 end -- starts the worker threads
local Model = dpl.LightningModule:extend('Sig')
function Model:training_step(batch, i)
  if i == 2 then io.open(ready .. rank, 'w'):close() end
  local _ = x + 1 -- work for the worker threads
  dpl.C.dpl_sleep(0.02)
  return th.loss(1)
end
function Model:configure_optimizers() return th.Optimizer() end
local t = dpl.Trainer{ strategy = os.getenv('WORLD_SIZE') and 'ddp' or nil, max_epochs = 1, enable_progress_bar = false,
  enable_model_summary = false, logger = false, default_root_dir = dir }
local ok, e = pcall(t.fit, t, Model(), th.loader(500))
print(('rank %d ok=%s err=%s'):format(rank, tostring(ok), (tostring(e):gsub(dir:gsub('%p', '%%%0'), 'DIR'))))
io.stdout:flush()
os.exit(ok and 0 or 3, true) -- close the state: its tensors are freed (clean under LeakSanitizer)
