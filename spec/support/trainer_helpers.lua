-- trainer_helpers.lua: stand-ins for the Trainer specs while tensors/autograd/
-- optim are being built: a loss object with backward(), an optimizer with
-- step()/zero_grad(), a scheduler, a dataset of numbers, and a LightningModule
-- subclass that records every hook call (after it returns, as Lightning's
-- test_hooks.py does) with its arguments.
local dpl = require 'dpl'
local data = require 'dpl.data'

local M = {}

-- a loss: a number with backward() (records that it ran) and division
local Loss = {}
Loss.__index = Loss
Loss.__div = function(a, b) return setmetatable({ value = a.value / b, log = a.log }, Loss) end
function Loss:backward() if self.log then self.log[#self.log + 1] = 'loss.backward' end end
function Loss:item() return self.value end
function M.loss(v, log) return setmetatable({ value = v, log = log }, Loss) end

-- an optimizer: counts steps and zero_grads
local Opt = require('dpl.class').Object:extend('SGD')
function Opt:__init(lr) self.steps, self.zeros, self.param_groups = 0, 0, { { lr = lr or 0.1 } } end
function Opt:step() self.steps = self.steps + 1 end
function Opt:zero_grad() self.zeros = self.zeros + 1 end
function Opt:state_dict() return { steps = self.steps, lr = self.param_groups[1].lr } end
function Opt:load_state_dict(s) self.steps = s.steps; self.param_groups[1].lr = s.lr end
M.Optimizer = Opt

local Sched = require('dpl.class').Object:extend('StepLR')
function Sched:__init(opt) self.optimizer, self.count = opt, 0 end
function Sched:step() self.count = self.count + 1; self.optimizer.param_groups[1].lr = self.optimizer.param_groups[1].lr * 0.5 end
function Sched:state_dict() return { count = self.count } end
function Sched:load_state_dict(s) self.count = s.count end
M.Scheduler = Sched

-- dataset of n numbers 1..n, loader with identity collation (batch = {items})
local NumDS = data.Dataset:extend('NumDS')
function NumDS:__init(n) self.n = n end
function NumDS:__len() return self.n end
function NumDS:get(i) return i end
function M.loader(n, bs)
  return data.DataLoader(NumDS(n), { batch_size = bs or 1, collate_fn = function(items) return items end })
end

local function describe(v)
  local tv = type(v)
  if tv == 'table' then
    if require('dpl.devices').is_device(v) then return tostring(v) end
    local mt = getmetatable(v)
    if mt == Loss then return 'loss' end
    if v.__name or (mt and mt.__name) then return (mt and mt.__name) or v.__name end
    if v.loss ~= nil then return '{loss}' end
    if v.x ~= nil then return '{x}' end
    if v.y ~= nil then return '{y}' end
    return 'table'
  end
  if tv == 'string' then return ("'%s'"):format(v) end
  return tostring(v)
end
M.describe = describe

--- A model class whose every hook call is recorded into calls: "name(args)".
function M.recording_model(calls, overrides)
  local LM = dpl.LightningModule
  local Model = LM:extend('BoringModel')
  function Model:__init()
    LM.__init(self)
    self.w = 1
  end
  function Model:forward(x) return x end
  function Model:training_step(batch) self:forward(batch); return { loss = M.loss(batch[1] or 0) } end
  function Model:validation_step(batch) self:forward(batch); return { x = batch[1] } end
  function Model:test_step(batch) self:forward(batch); return { y = batch[1] } end
  function Model:predict_step(batch) self:forward(batch); return batch[1] end
  function Model:configure_optimizers()
    local opt = M.Optimizer(0.1)
    return { optimizer = opt, lr_scheduler = { scheduler = M.Scheduler(opt), interval = 'epoch' } }
  end
  function Model:train_dataloader() return M.loader(64) end
  function Model:val_dataloader() return M.loader(64) end
  function Model:test_dataloader() return M.loader(64) end
  function Model:predict_dataloader() return M.loader(64) end
  function Model:validation_epoch_end() end
  function Model:test_epoch_end() end
  function Model:training_epoch_end() end
  function Model:state_dict() return { w = self.w } end
  function Model:load_state_dict(s) self.w = s.w end
  for k, v in pairs(overrides or {}) do Model[k] = v end
  -- wrap every hook (and forward/train/zero_grad)
  local names, seen = {}, {}
  for _, k in ipairs({ 'forward', 'train', 'zero_grad' }) do names[#names + 1] = k; seen[k] = true end
  for k, v in pairs(LM) do
    if seen[k] then v = nil end
    if type(v) == 'function' and type(k) == 'string' and k:sub(1, 1) ~= '_' and k ~= 'log' and k ~= 'log_dict'
       and k ~= 'optimizers' and k ~= 'lr_schedulers' and k ~= 'extend' and k ~= 'print'
       and k ~= 'save_hyperparameters' and k ~= 'eval' and k ~= 'state_dict' and k ~= 'load_state_dict' then
      names[#names + 1] = k
    end
  end
  for _, k in ipairs(names) do
    local f = Model[k]
    if f then
      Model[k] = function(self, ...)
        local r = { f(self, ...) }
        local args = {}
        for i = 1, select('#', ...) do args[i] = describe((select(i, ...))) end
        if k == 'train' and select('#', ...) == 0 then args[1] = 'true' end
        calls[#calls + 1] = k .. '(' .. table.concat(args, ', ') .. ')'
        return unpack(r)
      end
    end
  end
  return Model
end

--- A callback recording every hook as "C.name(args without trainer/module)".
function M.recording_callback(calls)
  local Callback = dpl.callbacks.Callback
  local CB = Callback:extend('HookedCallback')
  for _, k in ipairs(Callback.hook_names) do
    CB[k] = function(self, trainer, module, ...)
      local args = {}
      for i = 1, select('#', ...) do args[i] = describe((select(i, ...))) end
      calls[#calls + 1] = 'C.' .. k .. '(' .. table.concat(args, ', ') .. ')'
    end
  end
  function CB:state_dict() calls[#calls + 1] = 'C.state_dict()'; return { foo = true } end
  function CB:load_state_dict(s) calls[#calls + 1] = 'C.load_state_dict(' .. tostring(s.foo) .. ')' end
  return CB
end

--- A fresh directory (mktemp -d: unique even across spec files, whose module
--- caches busted resets).
function M.tmpdir()
  local base = os.getenv('DPL_TEST_TMP') or '/tmp'
  local p = io.popen('mktemp -d ' .. base .. '/dpl-trainer-XXXXXX')
  local d = p:read('*l')
  p:close()
  return d
end

-- The weights of a module as one string of %.9g numbers (to compare two runs exactly).
function M.flat_params(m)
  local parts = {}
  for _, p in ipairs(m:parameters()) do
    for _, v in ipairs(p:view(-1):tolist()) do parts[#parts + 1] = ('%.9g'):format(v) end
  end
  return table.concat(parts, ' ')
end

--- Resume equality runs of the LightningModule class Model on a shuffled 40-sample dataset
--- (deterministic, checkpoints in dir): a = 2 epochs straight, b = 1 epoch with a checkpoint,
--- c = a fresh model resumed from b's checkpoint to 2 epochs. Returns a, b, c.
function M.resume_runs(Model, dir)
  local dpl = require 'dpl'
  dpl.manual_seed(1)
  local ds = dpl.data.TensorDataset(dpl.randn({ 40, 4 }), dpl.randint(1, 4, { 40 }))
  local function loader() return dpl.data.DataLoader(ds, { batch_size = 8, shuffle = true, seed = 5 }) end
  local function trainer(epochs, ckpt)
    return dpl.Trainer{ max_epochs = epochs, enable_progress_bar = false, enable_model_summary = false, logger = false,
      enable_checkpointing = ckpt or false, default_root_dir = dir, deterministic = true }
  end
  local a = Model()
  trainer(2):fit(a, loader())
  local b = Model()
  local t1 = trainer(1, true)
  t1:fit(b, loader())
  local c = Model()
  trainer(2):fit(c, loader(), nil, { ckpt_path = t1.checkpoint_callback.best_model_path })
  return a, b, c
end

return M
