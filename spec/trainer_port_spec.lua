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

-- io.stdout replaced while fn runs; returns what was written
local function capture_stdout(fn, ...)
  local buf, real = {}, io.stdout
  io.stdout = { write = function(self, ...) for _, s in ipairs({ ... }) do buf[#buf + 1] = tostring(s) end return self end,
    flush = function() end, setvbuf = function() end }
  local ok, err = pcall(fn, ...)
  io.stdout = real
  if not ok then error(err, 0) end
  return table.concat(buf)
end

describe('restoring a checkpoint prints Lightning\'s INFO lines', function()
  local Reg = dpl.LightningModule:extend('Reg')
  function Reg:__init() dpl.LightningModule.__init(self); self.l = nn.Linear(4, 1) end
  function Reg:training_step(b) return F.mse_loss(self.l(b[1]), b[2]) end
  function Reg:validation_step(b) self:log('val_loss', F.mse_loss(self.l(b[1]), b[2])) end
  function Reg:test_step(b) self:log('test_loss', F.mse_loss(self.l(b[1]), b[2])) end
  function Reg:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.01 }) end

  it('test/validate/predict: "Restoring states from ..." then "Loaded model weights from ..."; fit: "Restored all states ..."', function()
    local dir = th.tmpdir()
    local t = quiet { max_epochs = 1, limit_train_batches = 2, default_root_dir = dir, enable_checkpointing = true,
      callbacks = { dpl.callbacks.ModelCheckpoint { dirpath = dir, monitor = 'val_loss' } } }
    local m = Reg()
    local out = capture_stdout(function() t:fit(m, loader(8), loader(8)) end)
    assert.is_nil(out:find('Restor', 1, true))
    local best = t.checkpoint_callback.best_model_path
    out = capture_stdout(function() t:test(m, loader(8), { ckpt_path = 'best', verbose = false }) end)
    local a = out:find('Restoring states from the checkpoint path at ' .. best, 1, true)
    local b = out:find('Loaded model weights from checkpoint at ' .. best, 1, true)
    assert.is_truthy(a, out); assert.is_truthy(b, out); assert.is_true(a < b)
    local t2 = quiet { max_epochs = 2, limit_train_batches = 2, default_root_dir = dir }
    out = capture_stdout(function() t2:fit(Reg(), loader(8), nil, { ckpt_path = best }) end)
    assert.is_truthy(out:find('Restoring states from the checkpoint path at ' .. best, 1, true), out)
    assert.is_truthy(out:find('Restored all states from the checkpoint file at ' .. best, 1, true), out)
    os.execute('rm -rf ' .. dir)
  end)
end)

describe('predict under ddp_spawn (Lightning: return_predictions defaults to False for DDPSpawnStrategy)', function()
  local P = dpl.LightningModule:extend('P')
  function P:__init() dpl.LightningModule.__init(self); self.l = nn.Linear(4, 1) end
  function P:predict_step(b) return self.l(b[1]) end  -- a tensor per batch, as usual

  it('returns nil by default instead of failing to bring tensors back from the workers', function()
    local t = quiet { strategy = 'ddp_spawn', accelerator = 'cpu', devices = 2 }
    assert.is_nil(t:predict(P(), loader(8)))
  end)
  it('return_predictions=true raises Lightning\'s MisconfigurationException', function()
    for _, s in ipairs({ 'ddp_spawn', 'ddp_fork' }) do
      local t = quiet { strategy = s, accelerator = 'cpu', devices = 1 }
      local ok, e = pcall(t.predict, t, P(), loader(8), { return_predictions = true })
      assert.is_false(ok)
      assert.matches('`return_predictions` should be set to `False` when using the `DDPSpawnStrategy` or children class.'
        .. ' Found true with strategy DDPSpawnStrategy.', tostring(e), 1, true)
    end
  end)
  it('a single-process strategy still returns them', function()
    local t = quiet { max_epochs = 1 }
    local p = t:predict(P(), loader(8))
    assert.are.equal(2, #p)
    assert.are.same({ 4, 1 }, p[1]:size())
  end)
end)

describe('ModelSummary with example_input_array (Lightning: In sizes / Out sizes columns)', function()
  local Gen = dpl.LightningModule:extend('Gen')
  function Gen:__init()
    dpl.LightningModule.__init(self)
    self.enc = nn.Sequential(nn.Linear(5, 8), nn.ReLU())
    self.head = nn.Linear(8, 3)
    self.example_input_array = dpl.zeros(2, 5)
  end
  function Gen:forward(x) return self.head(self.enc(x)) end
  function Gen:training_step(b) return self(b[1]):sum() end
  function Gen:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end

  it('prints the shapes each layer saw in a forward of the example, as Lightning 1.9.5', function()
    local MS = dpl.callbacks.ModelSummary
    local m = Gen()
    m:train()
    local rows, total, trainable = MS.summarize(m, 1)
    assert.are.same({ 2, 5 }, rows[1].in_size)
    assert.are.same({ 2, 8 }, rows[1].out_size)
    assert.are.same({ 2, 8 }, rows[2].in_size)
    assert.are.same({ 2, 3 }, rows[2].out_size)
    assert.is_true(m.training) -- the mode is restored
    -- Lightning 1.9.5's table for the same module (the rows: name, type, params, In, Out)
    local want = table.concat({
      '  | Name | Type       | Params | In sizes | Out sizes',
      '-----------------------------------------------------------',
      '0 | enc  | Sequential | 48     | [2, 5]   | [2, 8]   ',
      '1 | head | Linear     | 27     | [2, 8]   | [2, 3]   ',
      '-----------------------------------------------------------',
      '75        Trainable params',
      '0         Non-trainable params',
      '75        Total params',
      '0.000     Total estimated model params size (MB)' }, '\n')
    assert.are.equal(want, MS.format_table(rows, total, trainable, 32))
  end)
  it('depth 2 shows nested layers; a layer the forward did not reach is "?"', function()
    local m = Gen()
    m.unused = nn.Linear(2, 2)
    local rows = dpl.callbacks.ModelSummary.summarize(m, 2)
    local by = {}
    for _, r in ipairs(rows) do by[r[1]] = r end
    assert.are.same({ 2, 5 }, by['enc.1'].in_size)
    assert.are.same({ 2, 8 }, by['enc.2'].out_size)
    assert.are.equal('?', by.unused.in_size)
    local s = dpl.callbacks.ModelSummary.format_table(rows, 0, 0, 32)
    assert.matches('| unused | Linear     | 6      | ?        | ?', s, 1, true)
  end)
  it('without example_input_array the table has no size columns', function()
    local m = Gen()
    m.example_input_array = nil
    local rows, total, trainable = dpl.callbacks.ModelSummary.summarize(m, 1)
    assert.is_nil(dpl.callbacks.ModelSummary.format_table(rows, total, trainable, 32):find('In sizes', 1, true))
  end)
end)

describe("validate/test results table: Lightning 1.9.5's _print_results layout (without rich)", function()
  local loops = require 'dpl.trainer.loops'
  -- (the expected texts are Lightning's own output for the same results, COLUMNS=80 and 30)
  local want80 = [==[
────────────────────────────────────────────────────────────────────────────────
       Test metric             DataLoader 0             DataLoader 1
────────────────────────────────────────────────────────────────────────────────
            n                       5.0
        test_acc                   0.75                      0.5
        test_loss                0.1234567                  1e-05
────────────────────────────────────────────────────────────────────────────────
────────────────────────────────────────────────────────────────────────────────
            Validate metric                           DataLoader 0
────────────────────────────────────────────────────────────────────────────────
a_rather_long_metric_name_of_thirty_two_                  0.1
              characters_x
                val_loss                         1.2345678901234568e+17
────────────────────────────────────────────────────────────────────────────────
]==]
  local want30 = [==[
──────────────────────────────
  Test metric   DataLoader 0
──────────────────────────────
      acc            1.0
──────────────────────────────
──────────────────────────────
  Test metric   DataLoader 1
──────────────────────────────
      acc           0.25
──────────────────────────────
──────────────────────────────
  Test metric   DataLoader 2
──────────────────────────────
      acc           3e+16
──────────────────────────────
]==]
  it('centres the columns, sorts the metrics, strips /dataloader_idx_k, prints values as Python does', function()
    local out = capture_stdout(function()
      loops.print_results('test', { { test_acc = 0.75, ['test_loss/dataloader_idx_0'] = 0.1234567, n = 5 },
        { test_acc = 0.5, ['test_loss/dataloader_idx_1'] = 1e-05 } }, 80)
      loops.print_results('val', { { val_loss = 123456789012345678,
        a_rather_long_metric_name_of_thirty_two_characters_x = 0.1 } }, 80)
    end)
    assert.are.equal(want80, out)
  end)
  it('splits the dataloaders over several tables when the terminal is narrow', function()
    local out = capture_stdout(function() loops.print_results('test', { { acc = 1 }, { acc = 0.25 }, { acc = 3e16 } }, 30) end)
    assert.are.equal(want30, out)
  end)
  it('the width is $COLUMNS, else the terminal\'s, else 120 (shutil.get_terminal_size)', function()
    local h = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/support/helpers.lua')
    local code = "require('dpl.trainer.loops').print_results('test', {{x = 1}})"
    local out = h.run_chunk(code, 'COLUMNS=50')
    assert.are.equal(50 * 3, #(out:match('^([^\n]*)')))  -- 50 '─' of 3 bytes
    out = h.run_chunk(code, 'COLUMNS=')
    assert.are.equal(120 * 3, #(out:match('^([^\n]*)')))
  end)
  it('Python float repr of values', function()
    local r = loops._py_float
    assert.are.equal('5.0', r(5)); assert.are.equal('0.1', r(0.1)); assert.are.equal('1e-05', r(1e-5))
    assert.are.equal('0.0001', r(1e-4)); assert.are.equal('1e+16', r(1e16)); assert.are.equal('1234567890123456.0', r(1234567890123456))
    assert.are.equal('-2.5', r(-2.5)); assert.are.equal('nan', r(0 / 0)); assert.are.equal('inf', r(math.huge))
    assert.are.equal('-inf', r(-math.huge)); assert.are.equal('0.7358999848365784', r(0.7358999848365784))
    assert.are.equal('1.5e-07', r(1.5e-7)); assert.are.equal('0.0', r(0)); assert.are.equal('1.2345678901234568e+17', r(123456789012345678))
  end)
end)

describe("training_step's optimizer_idx parameter with several optimizers (Lightning's _build_training_step_kwargs checks)", function()
  local function module(step, manual)
    local M = dpl.LightningModule:extend('M2')
    function M:__init()
      dpl.LightningModule.__init(self)
      self.a = nn.Linear(4, 1); self.b = nn.Linear(4, 1)
      self.automatic_optimization = not manual
    end
    M.training_step = step
    function M:configure_optimizers()
      return { dpl.optim.SGD(self.a:parameters(), { lr = 0.1 }), dpl.optim.SGD(self.b:parameters(), { lr = 0.1 }) }
    end
    return M()
  end
  local function fit(m)
    local t = quiet { max_epochs = 1, limit_train_batches = 2 }
    return pcall(t.fit, t, m, loader(8))
  end
  local function loss(self, b) return F.mse_loss(self.a(b[1]) + self.b(b[1]), b[2]) end

  it('automatic optimisation: a training_step without a third parameter is an error, not both optimizers on one loss', function()
    local ok, e = fit(module(function(self, batch, batch_idx) return loss(self, batch) end))
    assert.is_false(ok)
    assert.matches('ValueError: Your LightningModule defines 2 optimizers but `training_step` is missing the `optimizer_idx` argument.',
      tostring(e), 1, true)
  end)
  it('automatic optimisation: any name for it (Lua passes it by position), or `...`, is accepted', function()
    assert.is_true((fit(module(function(self, batch, batch_idx, opt_idx) return loss(self, batch) end))))
    assert.is_true((fit(module(function(self, batch, ...) return loss(self, batch) end))))
  end)
  it('manual optimisation: a parameter named optimizer_idx is an error', function()
    local ok, e = fit(module(function(self, batch, batch_idx, optimizer_idx) end, true))
    assert.is_false(ok)
    assert.matches('ValueError: Your `LightningModule.training_step` signature contains an `optimizer_idx` argument but in manual'
      .. ' optimization optimizers must be handled by the user. Remove the optimizer_idx argument or set'
      .. ' `self.automatic_optimization = True`.', tostring(e), 1, true)
    assert.is_true((fit(module(function(self, batch, batch_idx) end, true))))
  end)
end)
