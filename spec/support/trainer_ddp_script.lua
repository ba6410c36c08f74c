-- trainer_ddp_script.lua: run under `dplhost --nproc 2` by trainer_ddp_spec.
-- One "parameter" per model: a float64 dpl_tensor made through the C API;
-- backward sets its gradient to (rank + 1) * batch value; the optimizer records
-- the gradient it sees. Prints one line per rank: "rank R grads=... items=...".
local ffi = require 'ffi'
local dpl = require 'dpl'
local th = require 'spec.support.trainer_helpers'
local C = require('dpl.capi').C
local mode, dir = arg[1], arg[2]

local function scalar(v)
  local out, shape = ffi.new('dpl_tensor *[1]'), ffi.new('int64_t[1]', 1)
  assert(C.dpl_tensor_empty(1, 1, shape, 0, 0, out) == 0)
  local t = ffi.gc(out[0], C.dpl_tensor_release)
  C.dpl_tensor_fill_(t, v)
  return t
end
local function value(t) local d = ffi.new('double[1]'); C.dpl_tensor_get(t, 0, d); return d[0] end

local rank = tonumber(os.getenv('RANK'))
local Model = dpl.LightningModule:extend('DDPModel')
function Model:__init() dpl.LightningModule.__init(self); self.p = { data = scalar(rank == 0 and 5 or 7), grad = nil }; self.items = {}; self.seen = {} end
function Model:parameters() return { self.p } end
function Model:training_step(batch)
  local m = self
  m.items[#m.items + 1] = batch[1]
  self:log('train_v', rank, { sync_dist = true, on_step = false, on_epoch = true })
  local L = setmetatable({}, { __index = { backward = function() m.p.grad = scalar((rank + 1) * batch[1]) end } })
  return L
end
function Model:validation_step(batch) self:log('val_loss', rank == 1 and 1 or 3, { sync_dist = true }) end
function Model:configure_optimizers()
  local m = self
  local Opt = th.Optimizer:extend('Rec')
  function Opt:step() m.seen[#m.seen + 1] = value(m.p.grad) end
  return Opt()
end

local es = mode == 'stop' and dpl.callbacks.EarlyStopping{ monitor = 'val_loss', patience = 1 } or nil
local t = dpl.Trainer{ strategy = 'ddp', max_epochs = mode == 'stop' and 10 or 1, enable_progress_bar = false,
  enable_model_summary = false, default_root_dir = dir, logger = dpl.loggers.CSVLogger(dir),
  callbacks = es and { es } or nil, num_sanity_val_steps = 0 }
local m = Model()
if mode == 'stop' then
  -- rank 1 worsens every epoch from the start: its "any" decision stops everyone
  m.validation_step = function(self)
    self:log('val_loss', rank == 1 and self.current_epoch or 0)
  end
end
t:fit(m, th.loader(6, 1), th.loader(2, 1))
print(('rank %d world=%d p=%s grads=%s items=%s train_v=%s val_loss=%s epochs=%d'):format(t.global_rank, t.world_size,
  tostring(value(m.p.data)), table.concat(m.seen, ','), table.concat(m.items, ','),
  tostring(t.callback_metrics.train_v), tostring(t.callback_metrics.val_loss), t.current_epoch))
