-- Trainer / LightningModule behaviours checked against PyTorch Lightning 1.9.5 runs (the
-- expectations are what Lightning printed for the same scripts): estimated_stepping_batches,
-- all_gather, self.logger, predict's return_predictions, the entry points' options,
-- toggle_optimizer, configure_optimizers' two-value form, duplicate stateful callbacks, and
-- small state details.
local h = require 'spec.support.helpers'
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional

local tmp = os.getenv('DPL_TEST_TMP') or '/tmp'
local function fresh_dir(name)
  local d = ('%s/compat_%s_%d'):format(tmp, name, math.random(1, 1e9))
  os.execute('rm -rf ' .. d .. ' && mkdir -p ' .. d)
  return d
end

local function loader(n, bs)
  dpl.manual_seed(0)
  local x = dpl.randn(n, 4)
  local y = x:sum(2):gt(0):long():add(1)
  return dpl.data.DataLoader(dpl.data.TensorDataset(x, y), { batch_size = bs or 4 })
end

local Model = dpl.LightningModule:extend('CompatModel')
function Model:__init()
  dpl.LightningModule.__init(self)
  self.net = nn.Linear(4, 2)
end
function Model:forward(x) return self.net(x) end
function Model:training_step(b)
  local loss = F.cross_entropy(self(b[1]), b[2])
  self:log('train_loss', loss)
  return loss
end
function Model:validation_step(b) self:log('val_loss', F.cross_entropy(self(b[1]), b[2])) end
function Model:test_step(b) self:log('test_loss', F.cross_entropy(self(b[1]), b[2])) end
function Model:predict_step(b) return self(b[1]):sum():item() end
function Model:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end

local function quiet(o)
  local a = { enable_progress_bar = false, enable_model_summary = false, logger = false, enable_checkpointing = false }
  for k, v in pairs(o or {}) do a[k] = v end
  return a
end

describe('trainer.estimated_stepping_batches (Lightning 1.9.5)', function()
  it('epochs x ceil(batches / accumulation), limit_train_batches applied, read in training_step', function()
    local seen
    local M = Model:extend('EstM')
    function M:training_step(b, i)
      if seen == nil then seen = self.trainer.estimated_stepping_batches end
      return Model.training_step(self, b, i)
    end
    -- Lightning: max_epochs=2, limit_train_batches=3, accumulate_grad_batches=2 -> 4
    local t = dpl.Trainer(quiet{ max_epochs = 2, limit_train_batches = 3, accumulate_grad_batches = 2 })
    t:fit(M(), loader(16))
    assert.equal(4, seen)
    assert.equal(4, t.estimated_stepping_batches)
    assert.equal(4, t.global_step)
  end)

  it('is readable in configure_optimizers (OneCycleLR total_steps): the training loader is loaded for it', function()
    local total
    local M = Model:extend('EstCO')
    local calls = 0
    function M:train_dataloader() calls = calls + 1; return loader(20, 4) end
    function M:configure_optimizers()
      total = self.trainer.estimated_stepping_batches
      return Model.configure_optimizers(self)
    end
    local t = dpl.Trainer(quiet{ max_epochs = 3 })
    t:fit(M())
    assert.equal(15, total)
    assert.equal(2, calls) -- once for the estimate, once by the loop (as Lightning)
  end)

  it('max_steps caps it; max_epochs=-1 gives max_steps or infinity', function()
    local t = dpl.Trainer(quiet{ max_epochs = 5, max_steps = 7 })
    t:fit(Model(), loader(16))
    assert.equal(7, t.estimated_stepping_batches)
    local t2 = dpl.Trainer(quiet{ max_epochs = -1, max_steps = 3 })
    assert.equal(3, t2.estimated_stepping_batches)
    local t3 = dpl.Trainer(quiet{ max_epochs = -1 })
    assert.equal(math.huge, t3.estimated_stepping_batches)
  end)

  it('refuses an accumulation schedule that changes with the epoch', function()
    local t = dpl.Trainer(quiet{ max_epochs = 2, accumulate_grad_batches = { [0] = 1, [1] = 2 } })
    t:fit(Model(), loader(8))
    assert.has_error(function() return t.estimated_stepping_batches end,
      'MisconfigurationException: Estimated stepping batches cannot be computed with different `accumulate_grad_batches` at different epochs.')
  end)
end)

describe('LightningModule:all_gather / self.logger', function()
  it('returns the tensor in one process; a number becomes a tensor; tables are gathered item by item', function()
    local got
    local M = Model:extend('AG')
    function M:training_step(b, i)
      got = { self:all_gather(dpl.tensor({ 1.5, 2 })), self:all_gather(3.5), self:all_gather({ a = dpl.tensor(1.0) }) }
      return Model.training_step(self, b, i)
    end
    dpl.Trainer(quiet{ max_epochs = 1, limit_train_batches = 1 }):fit(M(), loader(8))
    assert.is_true(dpl.is_tensor(got[1]))
    assert.same({ 1.5, 2 }, got[1]:tolist())
    assert.is_true(dpl.is_tensor(got[2]))
    assert.equal(0, got[2]:dim())
    assert.equal(3.5, got[2]:item())
    assert.is_true(dpl.is_tensor(got[3].a))
  end)

  it('self.logger and self.loggers are the trainer\'s inside training_step', function()
    local lg, lgs
    local M = Model:extend('LG')
    function M:training_step(b, i)
      lg, lgs = self.logger, self.loggers
      return Model.training_step(self, b, i)
    end
    local t = dpl.Trainer{ max_epochs = 1, limit_train_batches = 1, enable_progress_bar = false,
      enable_model_summary = false, enable_checkpointing = false, default_root_dir = fresh_dir('lg') }
    t:fit(M(), loader(8))
    assert.is_not_nil(lg)
    assert.equal(t.logger, lg)
    assert.equal(t.loggers, lgs)
  end)
end)

describe('entry point options', function()
  it('predict with return_predictions=false returns nil (Lightning)', function()
    local t = dpl.Trainer(quiet{})
    local m = Model()
    assert.equal(2, #t:predict(m, loader(8)))
    assert.is_nil(t:predict(m, loader(8), { return_predictions = false }))
    assert.is_nil(t:predict(m, { loader(8), loader(4) }, { return_predictions = false }))
    assert.equal(2, #t:predict(m, loader(8), { return_predictions = true }))
  end)

  it('an unknown option key is an error naming it, for each entry point', function()
    local t = dpl.Trainer(quiet{ max_epochs = 1 })
    local m = Model()
    assert.has_error(function() t:predict(m, loader(8), { return_prediction = false }) end)
    local ok, e = pcall(t.predict, t, m, loader(8), { return_prediction = false })
    assert.is_false(ok)
    assert.matches("Trainer.predict: unknown option 'return_prediction' %(did you mean 'return_predictions'%?%)", tostring(e))
    ok, e = pcall(t.fit, t, m, loader(8), nil, { ckpt = 'x' })
    assert.matches("Trainer.fit: unknown option 'ckpt'", tostring(e))
    ok, e = pcall(t.validate, t, m, loader(8), { verbos = false })
    assert.matches("Trainer.validate: unknown option 'verbos'", tostring(e))
    ok, e = pcall(t.test, t, m, loader(8), { return_predictions = false })
    assert.matches("Trainer.test: unknown option 'return_predictions'", tostring(e))
    -- the accepted ones still work
    assert.equal(1, #t:validate(m, loader(8), { verbose = false }))
  end)
end)

describe('toggle_optimizer / untoggle_optimizer (Lightning 1.9)', function()
  local Two = dpl.LightningModule:extend('TwoOpt')
  function Two:__init()
    dpl.LightningModule.__init(self)
    self.a = nn.Linear(4, 4)
    self.b = nn.Linear(4, 2)
  end
  function Two:forward(x) return self.b(self.a(x)) end
  function Two:configure_optimizers()
    return { dpl.optim.SGD(self.a:parameters(), { lr = 0.1 }), dpl.optim.SGD(self.b:parameters(), { lr = 0.1 }) }
  end

  it('automatic optimisation with two optimizers: only the active one\'s parameters require grad', function()
    local seen = {}
    local M = Two:extend('TwoAuto')
    function M:training_step(batch, i, oi)
      seen[#seen + 1] = ('%d %s %s'):format(oi, tostring(self.a.weight.requires_grad), tostring(self.b.weight.requires_grad))
      return F.cross_entropy(self(batch[1]), batch[2])
    end
    local m = M()
    dpl.Trainer(quiet{ max_epochs = 1, limit_train_batches = 1 }):fit(m, loader(8))
    -- Lightning 1.9.5: opt_idx=0 a=True b=False; opt_idx=1 a=False b=True
    assert.same({ '0 true false', '1 false true' }, seen)
    assert.is_true(m.a.weight.requires_grad)
    assert.is_true(m.b.weight.requires_grad)
  end)

  it('manual: toggle freezes the other optimizer\'s parameters, untoggle restores them (a frozen one stays frozen)', function()
    local log = {}
    local M = Two:extend('TwoManual')
    function M:__init()
      Two.__init(self)
      self.automatic_optimization = false
      self.b.bias.requires_grad = false -- set by the user: kept through toggle/untoggle
    end
    function M:training_step(batch)
      local o1 = self:optimizers()[1]
      self:toggle_optimizer(o1, 0)
      log[#log + 1] = ('%s %s %s'):format(tostring(self.a.weight.requires_grad), tostring(self.b.weight.requires_grad),
        tostring(self.b.bias.requires_grad))
      local loss = F.cross_entropy(self(batch[1]), batch[2])
      o1:zero_grad(); self:manual_backward(loss); o1:step()
      log[#log + 1] = tostring(self.b.weight.grad ~= nil)
      self:untoggle_optimizer(0)
      log[#log + 1] = ('%s %s %s'):format(tostring(self.a.weight.requires_grad), tostring(self.b.weight.requires_grad),
        tostring(self.b.bias.requires_grad))
    end
    dpl.Trainer(quiet{ max_epochs = 1, limit_train_batches = 1 }):fit(M(), loader(8))
    assert.same({ 'true false false', 'false', 'true true false' }, log)
  end)
end)

describe('configure_optimizers returning two values', function()
  it('`return {opts}, {scheds}` is the pair of lists: the schedulers are kept', function()
    local M = Model:extend('MultiRet')
    function M:configure_optimizers()
      local o = dpl.optim.SGD(self:parameters(), { lr = 0.1 })
      return { o }, { dpl.optim.lr_scheduler.StepLR(o, { step_size = 1, gamma = 0.5 }) }
    end
    local t = dpl.Trainer(quiet{ max_epochs = 2, limit_train_batches = 1 })
    t:fit(M(), loader(8))
    assert.equal(1, #t.lr_scheduler_configs)
    assert.near(0.025, t.optimizers[1].param_groups[1].lr, 1e-12)
  end)

  it('a single optimizer and scheduler as two values work too', function()
    local M = Model:extend('MultiRet1')
    function M:configure_optimizers()
      local o = dpl.optim.SGD(self:parameters(), { lr = 0.1 })
      return o, dpl.optim.lr_scheduler.StepLR(o, { step_size = 1, gamma = 0.5 })
    end
    local t = dpl.Trainer(quiet{ max_epochs = 1, limit_train_batches = 1 })
    t:fit(M(), loader(8))
    assert.equal(1, #t.lr_scheduler_configs)
    assert.near(0.05, t.optimizers[1].param_groups[1].lr, 1e-12)
  end)
end)

describe('duplicate stateful callbacks', function()
  it('raise Lightning 1.9.5\'s RuntimeError when the Trainer is built', function()
    local CB = dpl.callbacks.Callback:extend('DupCB')
    function CB:__init(k) self.k = k end
    function CB:state_dict() return { k = self.k } end
    local ok, e = pcall(dpl.Trainer, quiet{ callbacks = { CB(1), CB(2) } })
    assert.is_false(ok)
    assert.equal('Found more than one stateful callback of type `DupCB`. In the current configuration, this callback'
      .. ' does not support being saved alongside other instances of the same type. Please consult the documentation'
      .. ' of `DupCB` regarding valid settings for the callback state to be checkpointable. HINT: The'
      .. ' `callback.state_key` must be unique among all callbacks in the Trainer.', e.message)
    assert.is_true(require('dpl.errors').is(e, require('dpl.errors').RuntimeError))
    -- stateless ones may repeat
    local Plain = dpl.callbacks.Callback:extend('PlainCB')
    assert.is_not_nil(dpl.Trainer(quiet{ callbacks = { Plain(), Plain() } }))
  end)
end)

describe('trainer state as Lightning 1.9.5', function()
  it('min_epochs nil until fit, state.stage nil after it, interrupted', function()
    local t = dpl.Trainer(quiet{ max_epochs = 1, limit_train_batches = 1 })
    assert.is_nil(t.min_epochs)
    assert.is_false(t.interrupted)
    t:fit(Model(), loader(8))
    assert.equal(0, t.min_epochs)
    assert.equal('fit', t.state.fn)
    assert.equal('finished', t.state.status)
    assert.is_nil(t.state.stage)
    assert.is_false(t.interrupted)
    local Bad = Model:extend('Bad')
    function Bad:training_step() error('boom') end
    local t2 = dpl.Trainer(quiet{ max_epochs = 1, limit_train_batches = 1 })
    assert.is_false(pcall(t2.fit, t2, Bad(), loader(8)))
    assert.is_true(t2.interrupted)
    assert.equal('interrupted', t2.state.status)
    assert.is_nil(t2.state.stage)
  end)

  it('checkpoints say pytorch-lightning_version 1.9.5; the Timer state has every stage but tune', function()
    local dir = fresh_dir('ver')
    local timer = dpl.callbacks.Timer{ duration = 1000 }
    local t = dpl.Trainer(quiet{ max_epochs = 1, limit_train_batches = 1, callbacks = { timer } })
    t:fit(Model(), loader(8))
    t:save_checkpoint(dir .. '/a.ckpt')
    local ck = require('dpl.trainer.checkpoint').load(dir .. '/a.ckpt')
    assert.equal('1.9.5', ck['pytorch-lightning_version'])
    local te = timer:state_dict().time_elapsed
    local keys = {}
    for k in pairs(te) do keys[#keys + 1] = k end
    table.sort(keys)
    assert.same({ 'predict', 'sanity_check', 'test', 'train', 'validate' }, keys)
    assert.equal(0, te.sanity_check)
  end)
end)

describe('loggers as Lightning 1.9.5', function()
  local function read(path)
    local f = assert(io.open(path, 'rb'))
    local s = f:read('*a')
    f:close()
    return s
  end
  local HP = dpl.LightningModule:extend('HPModel')
  function HP:__init()
    dpl.LightningModule.__init(self)
    self.net = nn.Linear(4, 2)
    self:save_hyperparameters({ lr = 0.5 })
  end
  function HP:forward(x) return self.net(x) end
  function HP:validation_step(b, i) self:log('vs', i + 0.5, { on_step = true }) end
  function HP:test_step(b, i) self:log('ts', i + 0.5) end

  it('evaluation step rows have no epoch; validate on a fresh trainer writes hparams.yaml (t15)', function()
    local root = fresh_dir('valonly')
    local t = dpl.Trainer{ default_root_dir = root, enable_progress_bar = false,
      logger = dpl.loggers.CSVLogger{ save_dir = root } }
    t:validate(HP(), loader(12), { verbose = false })
    -- Lightning 1.9.5 (0.0, 1.0, 2.0 logged): vs_step,step,vs_epoch,epoch / 0.0,0,, / ... / ,0,1.0,0
    assert.equal('vs_step,step,vs_epoch,epoch\n0.5,0,,\n1.5,1,,\n2.5,2,,\n,0,1.5,0\n',
      read(root .. '/lightning_logs/version_0/metrics.csv'))
    assert.equal('lr: 0.5\n', read(root .. '/lightning_logs/version_0/hparams.yaml'))
  end)

  it('trainer.log_dir is a CSVLogger\'s save_dir, a TensorBoardLogger\'s version directory', function()
    local root = fresh_dir('logdir')
    local t = dpl.Trainer(quiet{ logger = dpl.loggers.CSVLogger{ save_dir = root .. '/csv' } })
    assert.equal(root .. '/csv', t.log_dir)
    local t2 = dpl.Trainer(quiet{ logger = dpl.loggers.TensorBoardLogger{ save_dir = root .. '/tb' } })
    assert.equal(root .. '/tb/lightning_logs/version_0', t2.log_dir)
    local t3 = dpl.Trainer(quiet{ default_root_dir = root })
    assert.equal(root, t3.log_dir)
  end)

  it('logger.log_dir, .version, .name, .root_dir, .save_dir are properties, as Lightning\'s', function()
    local root = fresh_dir('props')
    local lg = dpl.loggers.CSVLogger{ save_dir = root, name = 'exp' }
    assert.equal(0, lg.version)
    assert.equal('exp', lg.name)
    assert.equal(root, lg.save_dir)
    assert.equal(root .. '/exp', lg.root_dir)
    assert.equal(root .. '/exp/version_0', lg.log_dir)
    local tb = dpl.loggers.TensorBoardLogger(root, { name = 'tb', version = 'v', sub_dir = 's' })
    assert.equal(root .. '/tb/v/s', tb.log_dir)
    assert.equal('v', tb.version)
    -- the old method form says what to write instead
    local _, err = h.dplhost("-e \"require('dpl').loggers.CSVLogger{ save_dir = '/tmp' }:log_dir()\"")
    assert.truthy(err:find("attempt to call method 'log_dir' (a string value)", 1, true), err)
    assert.truthy(err:find("(hint: 'log_dir' is a property (a value), not a method: write obj.log_dir", 1, true), err)
    local out = h.dplhost('-i', { stdin = "lg = require('dpl').loggers.CSVLogger{ save_dir = '/tmp' }\nlg:version()\n" })
    assert.truthy(out:find("(hint: 'version' is a property (a value), not a method", 1, true), out)
  end)

  it('a logger class of one\'s own may define name and version as methods (the checkpoint dir)', function()
    local root = fresh_dir('ownlogger')
    local Mine = dpl.loggers.Logger:extend('Mine')
    function Mine:name() return 'mine' end
    function Mine:version() return 7 end
    local lg = Mine{ save_dir = root }
    local t = dpl.Trainer(quiet{ logger = lg, default_root_dir = root })
    assert.equal(root, t.log_dir)
    local mc = dpl.callbacks.ModelCheckpoint{}
    assert.equal(root .. '/mine/version_7/checkpoints', mc:_resolve_ckpt_dir(t))
  end)

  it('TensorBoard: test after fit logs the hyper-parameters again into its own event file', function()
    local root = fresh_dir('tb2')
    local M = HP:extend('HPFit')
    function M:training_step(b) return F.cross_entropy(self(b[1]), b[2]) end
    function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
    local t = dpl.Trainer{ max_epochs = 1, limit_train_batches = 2, limit_val_batches = 0, default_root_dir = root,
      enable_progress_bar = false, enable_model_summary = false, enable_checkpointing = false }
    local m = M()
    t:fit(m, loader(8))
    t:test(m, loader(8), { verbose = false })
    local dir = root .. '/lightning_logs/version_0'
    local files = {}
    for _, n in ipairs(require('dpl.loggers.base').listdir(dir)) do
      if n:find('^events') then files[#files + 1] = n end
    end
    assert.equal(2, #files)
    for _, n in ipairs(files) do
      local s = read(dir .. '/' .. n)
      assert.truthy(s:find('_hparams_/session_start_info', 1, true), n)
      assert.truthy(s:find('hp_metric', 1, true), n)
    end
  end)

  it('TensorBoard hparams: a list is one string as Python prints it, a boolean a FLOAT64 number', function()
    local TB = require 'dpl.loggers.tensorboard'
    local flat = TB.flatten_hparams({ flag = true, list = { 1, 2, 3 }, names = { 'a', 'b' }, nested = { a = 1, b = { c = 0.5 } }, empty = {} })
    assert.same({ { 'flag', true }, { 'list', '[1, 2, 3]' }, { 'names', "['a', 'b']" }, { 'nested/a', 1 }, { 'nested/b/c', 0.5 } }, flat)
    local s = TB.hparams_summaries({ { 'flag', true } }, {})
    -- experiment: HParamInfo{name "flag", type DATA_TYPE_FLOAT64 (3)}
    assert.truthy(s[1]:find('\010\004flag\032\003', 1, true))
    -- session_start_info: hparams["flag"] = Value{number_value 1.0}
    assert.truthy(s[2]:find('\017\000\000\000\000\000\000\240\063', 1, true))
  end)

  it('version_N counts directories only (t14)', function()
    local root = fresh_dir('ver')
    os.execute(('mkdir -p %s/lightning_logs/version_0 %s/lightning_logs/version_2 && touch %s/lightning_logs/version_7')
      :format(root, root, root))
    assert.equal(3, dpl.loggers.CSVLogger{ save_dir = root }.version)
  end)
end)

describe('ModelSummary as Lightning 1.9.5', function()
  local S = dpl.LightningModule:extend('SumM')
  function S:__init()
    dpl.LightningModule.__init(self)
    self.encoder = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
    self.head = nn.Linear(8, 2)
    self.frozen = nn.Linear(8, 3)
    for _, p in ipairs(self.frozen:parameters()) do p.requires_grad = false end
  end
  function S:forward(x) return self.head(self.encoder(x)) end
  function S:training_step(b) return F.cross_entropy(self(b[1]), b[2]) end
  function S:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end

  local function summary(depth)
    local buf = {}
    local stream = { write = function(_, ...) for i = 1, select('#', ...) do buf[#buf + 1] = select(i, ...) end end,
      flush = function() end }
    local t = dpl.Trainer{ max_epochs = 1, limit_train_batches = 1, enable_progress_bar = false, logger = false,
      enable_checkpointing = false, callbacks = { dpl.callbacks.ModelSummary{ max_depth = depth, stream = stream } } }
    t:fit(S(), loader(8))
    return table.concat(buf)
  end
  local tail = '234       Trainable params\n27        Non-trainable params\n261       Total params\n'
    .. '0.001     Total estimated model params size (MB)\n'

  it('max_depth 1: the table, separators, padded columns and the size line (Lightning\'s text)', function()
    assert.equal('\n  | Name    | Type       | Params\n'
      .. '---------------------------------------\n'
      .. '0 | encoder | Sequential | 216   \n'
      .. '1 | head    | Linear     | 18    \n'
      .. '2 | frozen  | Linear     | 27    \n'
      .. '---------------------------------------\n' .. tail, summary(1))
  end)

  it('max_depth 2 and -1 list the submodules (dplhost names Sequential children 1, 2, 3)', function()
    local want = '\n  | Name      | Type       | Params\n'
      .. '-----------------------------------------\n'
      .. '0 | encoder   | Sequential | 216   \n'
      .. '1 | encoder.1 | Linear     | 80    \n'
      .. '2 | encoder.2 | ReLU       | 0     \n'
      .. '3 | encoder.3 | Linear     | 136   \n'
      .. '4 | head      | Linear     | 18    \n'
      .. '5 | frozen    | Linear     | 27    \n'
      .. '-----------------------------------------\n' .. tail
    assert.equal(want, summary(2))
    assert.equal(want, summary(-1))
  end)

  it('counts read as Lightning\'s get_human_readable_count', function()
    local h = dpl.callbacks.ModelSummary._human
    assert.equal('0  ', h(0))
    assert.equal('216  ', h(216))
    assert.equal('1.2 K', h(1234))
    assert.equal('123 K', h(123456))
    assert.equal('1.2 M', h(1234567))
    assert.equal('235 K', h(235146))
  end)
end)

describe('LightningModule:freeze / unfreeze', function()
  it('turn requires_grad off and eval on for every parameter and submodule, and back', function()
    local dpl = require 'dpl'
    local M = dpl.LightningModule:extend('F')
    function M:__init()
      dpl.LightningModule.__init(self)
      self.net = dpl.nn.Sequential(dpl.nn.Linear(2, 3), dpl.nn.Dropout(0.5), dpl.nn.Linear(3, 1))
    end
    local m = M()
    m:freeze()
    for _, p in ipairs(m:parameters()) do assert.is_false(p.requires_grad) end
    assert.is_false(m.training)
    assert.is_false(m.net[2].training)
    m:unfreeze()
    for _, p in ipairs(m:parameters()) do assert.is_true(p.requires_grad) end
    assert.is_true(m.net[2].training)
  end)
end)
