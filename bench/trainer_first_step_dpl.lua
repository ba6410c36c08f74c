-- trainer_first_step_dpl.lua: runs examples/fashion_mnist.lua itself (its data, MLP,
-- CSV logger, ModelCheckpoint, EarlyStopping, progress bar, sanity check) and ends
-- the process at the end of its first optimizer step. Prints three times in ms from
-- this script's start: the example's set-up up to the Trainer (data sets and loaders),
-- up to fit() (Trainer and model built), and the first optimizer step done (the
-- sanity check, and whatever data loading was left for first use, included). The
-- host's own start-up (~1 ms, bench/startup.sh) comes on top; trainer_first_step.sh
-- also measures the whole process from outside.
--   dplhost bench/trainer_first_step_dpl.lua [flags of the example]
local C = require('dpl.capi').C
local t0 = C.dpl_clock()
local dpl = require 'dpl'
local Trainer = dpl.Trainer
local t_trainer, t_fit
local init, fit = Trainer.__init, Trainer.fit
Trainer.__init = function(self, ...)
  t_trainer = t_trainer or C.dpl_clock()
  return init(self, ...)
end
Trainer.fit = function(self, model, ...)
  t_fit = C.dpl_clock()
  -- an instance field shadows the module's hook: the first batch end is the first step
  model.on_train_batch_end = function()
    local t = C.dpl_clock()
    io.stdout:write(('%.1f %.1f %.1f\n'):format((t_trainer - t0) * 1e3, (t_fit - t0) * 1e3, (t - t0) * 1e3))
    io.stdout:flush()
    C.dpl_proc_exit(0)
  end
  return fit(self, model, ...)
end
local chunk = assert(loadfile('examples/fashion_mnist.lua'))
chunk(...)
error('the example ended without an optimizer step')
