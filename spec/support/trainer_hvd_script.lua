-- trainer_hvd_script.lua: run under `mpirun -np 2` by trainer_ddp_spec: the
-- strategy is chosen automatically (horovod under Open MPI); lr is scaled by
-- the world size, gradients averaged, the data sharded.
local ffi = require 'ffi'
local dpl = require 'dpl'
local th = require 'spec.support.trainer_helpers'
local C = require('dpl.capi').C
local function scalar(v)
  local out, shape = ffi.new('dpl_tensor *[1]'), ffi.new('int64_t[1]', 1)
  assert(C.dpl_tensor_empty(1, 1, shape, 0, 0, out) == 0)
  local t = ffi.gc(out[0], C.dpl_tensor_release)
  C.dpl_tensor_fill_(t, v)
  return t
end
local function value(t) local d = ffi.new('double[1]'); C.dpl_tensor_get(t, 0, d); return d[0] end
local Model = dpl.LightningModule:extend('HvdModel')
function Model:__init() dpl.LightningModule.__init(self); self.p = { data = scalar(tonumber(os.getenv('OMPI_COMM_WORLD_RANK')) + 3) }; self.items, self.seen = {}, {} end
function Model:parameters() return { self.p } end
function Model:training_step(batch)
  local m, r = self, self.trainer.global_rank
  m.items[#m.items + 1] = batch[1]
  return setmetatable({}, { __index = { backward = function() m.p.grad = scalar((r + 1) * batch[1]) end } })
end
function Model:configure_optimizers()
  local m = self
  local Opt = th.Optimizer:extend('Rec')
  function Opt:step() m.seen[#m.seen + 1] = value(m.p.grad) end
  return Opt(0.1)
end
local t = dpl.Trainer{ max_epochs = 1, enable_progress_bar = false, enable_model_summary = false, logger = false,
  enable_checkpointing = false }
local m = Model()
t:fit(m, th.loader(4, 1))
print(('hvd rank %d/%d strategy=%s p=%s lr=%s grads=%s items=%s'):format(t.global_rank, t.world_size,
  t.strategy.strategy_name, value(m.p.data), t.optimizers[1].param_groups[1].lr, table.concat(m.seen, ','),
  table.concat(m.items, ',')))
