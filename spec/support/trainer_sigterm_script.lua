-- trainer_sigterm_script.lua: a real SIGTERM sent by rank `arg[1]` to itself during
-- batch 2 of fit; alone or under dplhost --nproc 2. Prints the outcome per rank.
local ffi = require 'ffi'
pcall(ffi.cdef, 'int kill(int pid, int sig); int getpid(void);')
local dpl = require 'dpl'
local th = require 'spec.support.trainer_helpers'
local who, dir = tonumber(arg[1]), arg[2]
local rank = tonumber(os.getenv('RANK') or '0')
local Model = dpl.LightningModule:extend('Sig')
function Model:training_step(batch, i)
  if i == 2 and rank == who then ffi.C.kill(ffi.C.getpid(), 15) end
  return th.loss(1)
end
function Model:configure_optimizers() return th.Optimizer() end
local t = dpl.Trainer{ strategy = os.getenv('WORLD_SIZE') and 'ddp' or nil, max_epochs = 1, enable_progress_bar = false,
  enable_model_summary = false, logger = false, default_root_dir = dir }
local ok, e = pcall(t.fit, t, Model(), th.loader(20))
print(('rank %d ok=%s step=%d err=%s'):format(rank, tostring(ok), t.global_step, (tostring(e):gsub(dir:gsub('%p', '%%%0'), 'DIR'))))
io.stdout:flush()
-- both ranks have printed before either exits (the launcher stops the others at the first exit)
local dist = require 'dpl.dist'
if dist.is_initialized() then dist.barrier() end
os.exit(ok and 0 or 3)
