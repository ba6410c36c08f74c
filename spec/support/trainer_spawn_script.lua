-- trainer_spawn_script.lua: strategy='ddp_spawn' (accelerator='cpu', devices=2)
-- from a plain `dplhost` run, for trainer_ddp_spec. arg[1]: "fit" or "fail";
-- arg[2]: default_root_dir. Prints the parent's view after fit.
local dpl = require 'dpl'
local th = require 'spec.support.trainer_helpers'
local mode, dir = arg[1], arg[2]
if arg[3] == 'libc' then require('dpl.strategies.spawn')._prefer_host = false end -- the fallback fork path
local Model = dpl.LightningModule:extend('Spawned')
function Model:__init() dpl.LightningModule.__init(self); self.w = 0 end
function Model:training_step(batch, i)
  if mode == 'fail' and self.global_rank == 1 and i == 1 then error('boom on rank 1') end
  self.w = self.w + batch[1]
  self:log('w', self.w, { sync_dist = true })
  return th.loss(1)
end
function Model:validation_step(batch) self:log('val', batch[1]) end
function Model:configure_optimizers() return th.Optimizer() end
function Model:state_dict() return { w = self.w } end
function Model:load_state_dict(s) self.w = s.w end
local t = dpl.Trainer{ strategy = 'ddp_spawn', accelerator = 'cpu', devices = 2, max_epochs = 1,
  enable_progress_bar = false, enable_model_summary = false, default_root_dir = dir }
local m = Model()
local ok, e = pcall(t.fit, t, m, th.loader(6), th.loader(2))
if not ok then print('error ' .. tostring(e)) return end
print(('parent w=%s step=%d epoch=%d w_metric=%s best=%s'):format(m.w, t.global_step, t.current_epoch,
  tostring(t.callback_metrics.w), t.checkpoint_callback.best_model_path:gsub('^.*/lightning_logs/', '')))
-- a checkpoint written in the parent from the weights brought back (Lightning: the parent's
-- strategy holds the module)
t:save_checkpoint(dir .. '/after_fit.ckpt')
local ck = require('dpl.trainer.checkpoint').load(dir .. '/after_fit.ckpt')
print(('saved w=%s step=%d epoch=%d'):format(tostring(ck.state_dict.w), ck.global_step, ck.epoch))
local res = t:validate(m, th.loader(4), { verbose = false })
print(('validate val=%s'):format(tostring(res[1].val)))
