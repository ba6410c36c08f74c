-- trainer_port_spec.lua: deviations from Lightning 1.9.5 found by porting Lightning's own
-- example programs (autoencoder, GAN, CNN classifier) to dplhost and running both side by side.
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local th = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/support/trainer_helpers.lua')

local function loader(n, bs)
  dpl.manual_seed(0)
  local x = dpl.randn(n, 4)
  local y = dpl.randn(n, 1)
  return dpl.data.DataLoader(dpl.data.TensorDataset(x, y), { batch_size = bs or 4 })
end

local function quiet(t)
  t.enable_progress_bar = false; t.enable_model_summary = false
  if t.logger == nil then t.logger = false end
  if t.enable_checkpointing == nil then t.enable_checkpointing = false end
  return dpl.Trainer(t)
end

describe('configure_optimizers returning Lightning\'s `[opt_g, opt_d], []`', function()
  local TwoOpt = dpl.LightningModule:extend('TwoOpt')
  function TwoOpt:__init(form)
    dpl.LightningModule.__init(self)
    self.form = form
    self.a = nn.Linear(4, 1); self.b = nn.Linear(4, 1)
    self.seen = {}
  end
  function TwoOpt:training_step(batch, batch_idx, optimizer_idx)
    self.seen[#self.seen + 1] = optimizer_idx
    local net = optimizer_idx == 0 and self.a or self.b
    return F.mse_loss(net(batch[1]), batch[2])
  end
  function TwoOpt:configure_optimizers()
    local oa = dpl.optim.SGD(self.a:parameters(), { lr = 0.1 })
    local ob = dpl.optim.SGD(self.b:parameters(), { lr = 0.1 })
    if self.form == 'two values' then return { oa, ob }, {} end
    return { { oa, ob }, {} }
  end
  for _, form in ipairs({ 'two values', 'one table' }) do
    it('an empty scheduler list means no schedulers (' .. form .. ')', function()
      local m = TwoOpt(form)
      local t = quiet { max_epochs = 1, limit_train_batches = 3 }
      t:fit(m, loader(12))
      assert.are.equal(2, #t.optimizers)
      assert.are.equal(0, #t.lr_scheduler_configs)
      assert.are.same({ 0, 1, 0, 1, 0, 1 }, m.seen)
      assert.are.equal(6, t.global_step)
    end)
  end
end)
