-- amp16_script.lua: precision '16-mixed' on a simulated GPU (run with DPL_VIRTUAL_GPUS=1
-- by spec/trainer_amp16_spec.lua). Prints "key value" lines the spec checks.
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local mode = arg[1] or 'train'
local root = arg[2]

local rec = {} -- what the hooks saw (module fields holding tensors would become its buffers)
local M = dpl.LightningModule:extend('Amp16')
function M:__init() dpl.LightningModule.__init(self); dpl.manual_seed(0); self.net = nn.Linear(4, 3) end
function M:forward(x) return self.net(x) end
function M:training_step(batch, i)
  local out = self(batch[1])
  local loss = F.cross_entropy(out, batch[2])
  self.seen = self.seen or {}
  self.seen[#self.seen + 1] = { out = out.dtype, loss = loss.dtype, autocast = dpl.amp.is_autocast_enabled() }
  if self.poison == self.trainer.global_step then loss = loss * math.huge end -- inf gradients this step
  return loss
end
function M:on_before_backward(loss) self.scaled_loss = loss:item() end
function M:on_before_optimizer_step()
  rec.w_before = self.net.weight:to('cpu'):clone()
  rec.grad_max = self.net.weight.grad:abs():max():item()
end
function M:on_train_batch_end()
  self.steps = self.steps or {}
  local changed = not self.net.weight:to('cpu'):eq(rec.w_before):all():item()
  local sc = self.trainer.scaler
  self.steps[#self.steps + 1] = { changed = changed, scale = sc and sc:get_scale() or 1, grad_max = rec.grad_max }
end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end

dpl.manual_seed(1)
local ds = dpl.data.TensorDataset(dpl.randn({ 16, 4 }), dpl.randint(1, 4, { 16 }))
local loader = dpl.data.DataLoader(ds, { batch_size = 4 })
local base = { max_steps = 4, enable_progress_bar = false, enable_model_summary = false, logger = false,
  accelerator = 'gpu', devices = 1, default_root_dir = root }

if mode == 'train' then
  local o = {}
  for k, v in pairs(base) do o[k] = v end
  o.precision = '16-mixed'
  o.enable_checkpointing = false
  local t = dpl.Trainer(o)
  local m = M()
  m.poison = 2 -- the third step's gradients are inf
  print('scale0 ' .. t.scaler:get_scale())
  t:fit(m, loader)
  for i, s in ipairs(m.seen) do print(('seen %d %s %s %s'):format(i, s.out, s.loss, tostring(s.autocast))) end
  for i, s in ipairs(m.steps) do print(('step %d changed %s scale %g'):format(i, tostring(s.changed), s.scale)) end
  print('grad_max1 ' .. m.steps[1].grad_max)
  print('scaled_loss ' .. m.scaled_loss)
  print('autocast_after ' .. tostring(dpl.amp.is_autocast_enabled()))
  -- the same run in float32 without the poisoned step: the first steps match closely
  local o32 = {}
  for k, v in pairs(base) do o32[k] = v end
  o32.max_steps = 1
  o32.enable_checkpointing = false
  local m32 = M()
  dpl.Trainer(o32):fit(m32, loader)
  print('grad_max1_fp32 ' .. rec.grad_max)
elseif mode == 'ckpt' then
  local o = {}
  for k, v in pairs(base) do o[k] = v end
  o.precision = 16
  o.max_steps = 3
  local t = dpl.Trainer(o)
  local m = M()
  m.poison = 1
  t:fit(m, loader)
  local path = t.checkpoint_callback.last_model_path ~= '' and t.checkpoint_callback.last_model_path
    or t.checkpoint_callback.best_model_path
  print('ckpt_scale ' .. t.scaler:get_scale())
  o.max_steps = 4
  local t2 = dpl.Trainer(o)
  local m2 = M()
  t2:fit(m2, loader, nil, { ckpt_path = path })
  print('resumed_scale ' .. m2.steps[1].scale)
end
