-- trainer_spawn_signal_script.lua: strategy='ddp_spawn' (2 workers) and a signal during fit,
-- for trainer_ddp_spec. arg[1]: 'self' (rank 1 sends arg[3] to itself at batch 3) or 'wait'
-- (the spec sends it from outside: to the parent or to a worker); arg[2]: default_root_dir.
-- Each worker writes its pid to DIR/pid.<rank> and its global_step after every batch to
-- DIR/step.<rank>; DIR/ready appears once both ranks trained a few batches. The parent
-- prints what fit raised and the trainer's step.
local ffi = require 'ffi'
pcall(ffi.cdef, 'int kill(int pid, int sig); int getpid(void); int usleep(unsigned int usec);')
local dpl = require 'dpl'
local th = require 'spec.support.trainer_helpers'
local mode, dir, sig = arg[1], arg[2], tonumber(arg[3] or '15')

local function write(path, s) local f = assert(io.open(path, 'w')); f:write(s); f:close() end

local Model = dpl.LightningModule:extend('SpawnSig')
function Model:training_step(batch, i)
  local r = self.global_rank
  if i == 0 then write(('%s/pid.%d'):format(dir, r), tostring(ffi.C.getpid())) end
  if mode == 'self' and r == 1 and i == 3 then ffi.C.kill(ffi.C.getpid(), sig) end
  if mode == 'wait' then
    ffi.C.usleep(20000)
    if i == 5 and r == 1 then write(dir .. '/ready', 'ready') end
  end
  return th.loss(1)
end
function Model:on_train_batch_end()
  write(('%s/step.%d'):format(dir, self.global_rank), tostring(self.trainer.global_step))
end
function Model:configure_optimizers() return th.Optimizer() end

local t = dpl.Trainer{ strategy = 'ddp_spawn', accelerator = 'cpu', devices = 2, max_epochs = 1, logger = false,
  enable_progress_bar = false, enable_model_summary = false, enable_checkpointing = false, default_root_dir = dir }
write(dir .. '/pid.parent', tostring(ffi.C.getpid()))
local ok, e = pcall(t.fit, t, Model(), th.loader(mode == 'wait' and 400 or 40))
print(('parent ok=%s step=%d err=%s'):format(tostring(ok), t.global_step,
  (tostring(e):gsub(dir:gsub('%p', '%%%0'), 'DIR'))))
io.stdout:flush()
os.exit(ok and 0 or 3)
