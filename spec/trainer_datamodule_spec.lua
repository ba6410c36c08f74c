-- trainer_datamodule_spec.lua: dpl.LightningDataModule with the Trainer, against Lightning
-- 1.9.5's behaviour (recorded with its own Trainer): the hook order of fit and test with a
-- datamodule (its prepare_data/setup/teardown before the callbacks' and the module's, its
-- dataloaders, state_dict in checkpoints, load_state_dict on restore), the batch-transfer hook
-- selection, the ways to pass one (positional, {datamodule=}), the errors for mixed or missing
-- data sources, hyper-parameters (checkpointed, merged for the loggers, clashes refused),
-- load_from_checkpoint, from_datasets, ddp under dplhost --nproc 2, and a real fit on
-- Fashion-MNIST through a datamodule.
local dpl = require 'dpl'
local nn, F, data = dpl.nn, dpl.nn.functional, dpl.data
local h = require 'spec.support.helpers'
local th = require 'spec.support.trainer_helpers'

local function loader(n, bs)
  return data.DataLoader(data.TensorDataset(dpl.randn(n or 4, 4), dpl.zeros({ n or 4 }, { dtype = 'int64' }) + 1),
    { batch_size = bs or 2 })
end

local M = dpl.LightningModule:extend('DmModel')
function M:__init(calls)
  dpl.LightningModule.__init(self)
  dpl.manual_seed(0)
  self.l = nn.Linear(4, 2)
  self.calls = calls
  self:save_hyperparameters({ lr = 0.1, shared = 1 })
end
function M:training_step(b) return F.cross_entropy(self.l(b[1]), b[2]) end
function M:validation_step(b) self:log('v', F.cross_entropy(self.l(b[1]), b[2])) end
function M:test_step(b) self:log('t', F.cross_entropy(self.l(b[1]), b[2])) end
function M:predict_step(b) return self.l(b[1]) end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), 0.1) end
for _, hk in ipairs({ 'prepare_data', 'setup', 'teardown', 'on_fit_start', 'on_train_start', 'on_train_end',
  'on_save_checkpoint', 'on_load_checkpoint' }) do
  local base = dpl.LightningModule[hk]
  M[hk] = function(self, ...)
    local a = ...
    if self.calls then self.calls[#self.calls + 1] = 'M.' .. hk .. (type(a) == 'string' and '(' .. a .. ')' or '') end
    return base(self, ...)
  end
end

local DM = dpl.LightningDataModule:extend('DM')
function DM:__init(calls, batch_size)
  dpl.LightningDataModule.__init(self)
  self.calls = calls
  self:save_hyperparameters({ batch_size = batch_size or 2 })
  self.restored = nil
end
local function rec(self, s) if self.calls then self.calls[#self.calls + 1] = s end end
function DM:prepare_data() rec(self, 'DM.prepare_data') end
function DM:setup(s) rec(self, 'DM.setup(' .. s .. ')') end
function DM:teardown(s) rec(self, 'DM.teardown(' .. s .. ')') end
function DM:train_dataloader() rec(self, 'DM.train_dataloader') return loader() end
function DM:val_dataloader() rec(self, 'DM.val_dataloader') return loader() end
function DM:test_dataloader() rec(self, 'DM.test_dataloader') return loader() end
function DM:predict_dataloader() rec(self, 'DM.predict_dataloader') return loader() end
function DM:state_dict() rec(self, 'DM.state_dict') return { n = 3, w = dpl.tensor({ 1.5, 2.5 }) } end
function DM:load_state_dict(s) rec(self, 'DM.load_state_dict') self.restored = s end
function DM:on_before_batch_transfer(b) rec(self, 'DM.on_before_batch_transfer') return b end

local function trainer(dir, o)
  local a = { default_root_dir = dir, max_epochs = 1, limit_train_batches = 1, limit_val_batches = 1,
    num_sanity_val_steps = 1, enable_progress_bar = false, enable_model_summary = false, logger = false }
  for k, v in pairs(o or {}) do a[k] = v end
  return dpl.Trainer(a)
end

local function recording_callback(calls)
  local CB = dpl.callbacks.Callback:extend()
  function CB:setup(_, _, s) calls[#calls + 1] = 'C.setup(' .. s .. ')' end
  function CB:teardown(_, _, s) calls[#calls + 1] = 'C.teardown(' .. s .. ')' end
  return CB()
end

describe('LightningDataModule with the Trainer', function()
  it('fit and test call its hooks in Lightning 1.9.5\'s order; its state is checkpointed and restored', function()
    local dir = th.tmpdir()
    local calls = {}
    local t = trainer(dir, { callbacks = { recording_callback(calls) } })
    local dm = DM(calls)
    t:fit(M(calls), dm)
    -- the order Lightning 1.9.5 records for the same set-up (its M.transfer_batch_to_device /
    -- on_after_batch_transfer, not recorded here, follow each DM.on_before_batch_transfer)
    assert.are.same({
      'DM.prepare_data', 'M.prepare_data', 'DM.setup(fit)', 'C.setup(fit)', 'M.setup(fit)', 'M.on_fit_start',
      'DM.val_dataloader', 'DM.on_before_batch_transfer',
      'DM.train_dataloader', 'M.on_train_start', 'DM.on_before_batch_transfer', 'DM.on_before_batch_transfer',
      'DM.state_dict', 'M.on_save_checkpoint', 'M.on_train_end',
      'DM.teardown(fit)', 'C.teardown(fit)', 'M.teardown(fit)',
    }, calls)
    assert.are.equal(dm, t.datamodule)
    assert.are.equal(t, dm.trainer)

    local ck = t.checkpoint_callback.best_model_path
    local c = require('dpl.trainer.checkpoint').load(ck)
    assert.are.same({ batch_size = 2 }, c.datamodule_hyper_parameters)
    assert.are.equal('kwargs', c.datamodule_hparams_name)
    assert.are.equal(3, c.DM.n)
    assert.are.same({ 1.5, 2.5 }, c.DM.w:totable())
    assert.are.same({ lr = 0.1, shared = 1 }, c.hyper_parameters)

    for k in pairs(calls) do calls[k] = nil end
    local res = t:test(M(calls), { datamodule = dm, ckpt_path = ck, verbose = false })
    assert.are.same({
      'DM.prepare_data', 'M.prepare_data', 'DM.setup(test)', 'C.setup(test)', 'M.setup(test)',
      'M.on_load_checkpoint', 'DM.load_state_dict', 'DM.test_dataloader',
      'DM.on_before_batch_transfer', 'DM.on_before_batch_transfer',
      'DM.teardown(test)', 'C.teardown(test)', 'M.teardown(test)',
    }, calls)
    assert.are.equal(3, dm.restored.n)
    assert.is_number(res[1].t)
  end)

  it('is taken positionally or as {datamodule=} by fit, validate, test and predict', function()
    local dir = th.tmpdir()
    local t = trainer(dir, { enable_checkpointing = false })
    local calls = {}
    t:fit(M(), DM(calls))
    assert.is_truthy(table.concat(calls, ' '):find('DM.train_dataloader', 1, true))
    calls = {}
    t:fit(M(), { datamodule = DM(calls) })
    assert.is_truthy(table.concat(calls, ' '):find('DM.train_dataloader', 1, true))
    for _, fn in ipairs({ 'validate', 'test' }) do
      for _, how in ipairs({ 'positional', 'option' }) do
        calls = {}
        local r
        if how == 'positional' then r = t[fn](t, M(), DM(calls), { verbose = false })
        else r = t[fn](t, M(), { datamodule = DM(calls), verbose = false }) end
        assert.are.equal(1, #r, fn .. ' ' .. how)
        assert.is_truthy(table.concat(calls, ' '):find(fn == 'validate' and 'DM.val_dataloader' or 'DM.test_dataloader',
          1, true), fn .. ' ' .. how)
      end
    end
    calls = {}
    local p = t:predict(M(), DM(calls))
    assert.are.equal(2, #p)
    assert.are.same({ 2, 2 }, p[1]:size())
    p = t:predict(M(), { datamodule = DM(), return_predictions = false })
    assert.is_nil(p)
  end)

  it('refuses loaders and a datamodule together, a datamodule without the hook needed, and a non-datamodule', function()
    local t = trainer(th.tmpdir(), { enable_checkpointing = false })
    local function err(f) local ok, e = pcall(f) assert.is_false(ok) return tostring(e) end
    assert.matches('MisconfigurationException: You cannot pass `train_dataloader` or `val_dataloaders` to'
      .. ' `trainer.fit%(datamodule=...%)`', err(function() t:fit(M(), loader(), nil, { datamodule = DM() }) end))
    assert.matches('You cannot pass `train_dataloader` or `val_dataloaders`',
      err(function() t:fit(M(), nil, loader(), { datamodule = DM() }) end))
    assert.matches('You cannot pass `train_dataloader` or `val_dataloaders`', err(function() t:fit(M(), DM(), loader()) end))
    for _, fn in ipairs({ 'validate', 'test', 'predict' }) do
      assert.matches(('You cannot pass both `trainer.%s%%(dataloaders=..., datamodule=...%%)`'):format(fn),
        err(function() t[fn](t, M(), loader(), { datamodule = DM() }) end))
    end
    local Empty = dpl.LightningDataModule:extend('Empty')
    assert.matches('ValueError: An invalid dataloader was passed to `Trainer.fit%(train_dataloaders=...%)`. Either pass'
      .. ' the dataloader to the `.fit%(%)` method OR implement `def train_dataloader%(self%):` in your'
      .. ' LightningModule/LightningDataModule.', err(function() t:fit(M(), Empty()) end))
    assert.matches('`Trainer.test%(dataloaders=...%)`.*`def test_dataloader%(self%):`', err(function() t:test(M(), Empty()) end))
    -- the module's hooks are not a fallback: the datamodule is the source
    local WithOwn = M:extend('WithOwn')
    function WithOwn:train_dataloader() return loader() end
    assert.matches('An invalid dataloader', err(function() t:fit(WithOwn(), Empty()) end))
    assert.matches('`trainer.fit%(datamodule=...%)` expects a `LightningDataModule`',
      err(function() t:fit(M(), nil, nil, { datamodule = {} }) end))
    assert.matches("unknown option 'datamodul' %(did you mean 'datamodule'%?%)", err(function() t:fit(M(), nil, nil, { datamodul = DM() }) end))
    local Old = DM:extend('Old')
    function Old:on_save_checkpoint() end
    assert.matches('NotImplementedError: `LightningDataModule.on_save_checkpoint` was deprecated in v1.6 and is no'
      .. ' longer supported as of v1.8. Use `state_dict` instead.', err(function() t:fit(M(), Old()) end))
  end)

  it('takes the batch-transfer hooks a datamodule overrides, the module\'s others (warning when both define one)', function()
    local t = trainer(th.tmpdir(), { enable_checkpointing = false, limit_val_batches = 0 })
    local calls = {}
    local D2 = DM:extend('D2')
    function D2:transfer_batch_to_device(b) rec(self, 'DM.transfer') return b end
    local M2 = M:extend('M2')
    function M2:transfer_batch_to_device(b) self.calls[#self.calls + 1] = 'M.transfer' return b end
    function M2:on_after_batch_transfer(b) self.calls[#self.calls + 1] = 'M.after' return b end
    local log = require 'dpl.log'
    local warned, w = {}, log.warn
    log.warn = function(f, ...) warned[#warned + 1] = f:format(...) end
    local ok, e = pcall(t.fit, t, M2(calls), D2(calls))
    log.warn = w
    assert(ok, e)
    local s = ' ' .. table.concat(calls, ' ')
    assert.is_truthy(s:find(' DM.on_before_batch_transfer DM.transfer M.after', 1, true))
    assert.is_falsy(s:find(' M.transfer', 1, true))
    local ws = table.concat(warned, '\n')
    assert.is_truthy(ws:find('You have overridden `transfer_batch_to_device` in both `LightningModule` and'
      .. ' `LightningDataModule`. It will use the implementation from `LightningDataModule` instance.', 1, true), ws)
    assert.is_truthy(ws:find('You have overridden `on_after_batch_transfer` in `LightningModule` but have passed in a'
      .. ' `LightningDataModule`. It will use the implementation from `LightningModule` instance.', 1, true), ws)
  end)

  it('hands its hyper-parameters to the loggers merged with the module\'s; a clash is an error', function()
    local dir = th.tmpdir()
    local t = trainer(dir, { enable_checkpointing = false, logger = dpl.loggers.CSVLogger(dir) })
    local D3 = dpl.LightningDataModule:extend('D3')
    function D3:__init(extra) dpl.LightningDataModule.__init(self) self:save_hyperparameters(extra) end
    function D3:train_dataloader() return loader() end
    t:fit(M(), D3({ batch_size = 2, shared = 1 }))
    local y = assert(io.open(dir .. '/lightning_logs/version_0/hparams.yaml')):read('*a')
    assert.is_truthy(y:find('batch_size: 2', 1, true))
    assert.is_truthy(y:find('lr: 0.1', 1, true))
    assert.is_truthy(y:find('shared: 1', 1, true))
    local t2 = trainer(dir, { enable_checkpointing = false, logger = dpl.loggers.CSVLogger(dir) })
    local ok, e = pcall(t2.fit, t2, M(), D3({ shared = 2 }))
    assert.is_false(ok)
    assert.matches("MisconfigurationException: Error while merging hparams: the keys %['shared'%] are present in both"
      .. " the LightningModule's and LightningDataModule's hparams but have different values.", tostring(e))
    -- without loggers there is nothing to merge (Lightning returns before)
    local t3 = trainer(dir, { enable_checkpointing = false })
    t3:fit(M(), D3({ shared = 2 }))
  end)

  it('load_from_checkpoint builds a datamodule from the checkpoint\'s hyper-parameters', function()
    local dir = th.tmpdir()
    local t = trainer(dir)
    local D4 = dpl.LightningDataModule:extend('D4')
    function D4:__init(batch_size, seed)
      dpl.LightningDataModule.__init(self)
      self:save_hyperparameters({ batch_size = batch_size, seed = seed })
    end
    function D4:train_dataloader() return loader(4, self.hparams.batch_size) end
    t:fit(M(), D4(2, 7))
    local ck = t.checkpoint_callback.best_model_path
    local d = D4:load_from_checkpoint(ck)
    assert.are.same({ batch_size = 2, seed = 7 }, d.hparams)
    d = D4:load_from_checkpoint(ck, { batch_size = 4 })
    assert.are.same({ batch_size = 4, seed = 7 }, d.hparams)
    -- saved from the table the constructor got: it gets the table back
    local D5 = dpl.LightningDataModule:extend('D5')
    function D5:__init(cfg) dpl.LightningDataModule.__init(self) self.cfg = cfg self:save_hyperparameters(cfg) end
    function D5:train_dataloader() return loader() end
    local t2 = trainer(th.tmpdir())
    t2:fit(M(), D5({ a = 1, b = 'x' }))
    local d5 = D5:load_from_checkpoint(t2.checkpoint_callback.best_model_path)
    assert.are.same({ a = 1, b = 'x' }, d5.cfg)
    assert.has_error(function() D5.load_from_checkpoint(nil, ck) end)
    assert.matches('checkpoint path must be a string', select(2, pcall(D5.load_from_checkpoint, D5, 3)))
  end)

  it('from_datasets wraps datasets in loaders (the training one shuffled), lists in lists', function()
    local ds = data.TensorDataset(dpl.arange(10):float():reshape(10, 1))
    local dm = dpl.LightningDataModule:from_datasets { train_dataset = ds, val_dataset = { ds, ds }, batch_size = 4 }
    local tl = dm:train_dataloader()
    assert.are.equal(3, #tl)
    assert.are.equal('RandomSampler', tl.sampler.__name)
    local vl = dm:val_dataloader()
    assert.are.equal(2, #vl)
    assert.are.equal('SequentialSampler', vl[1].sampler.__name)
    assert.has_error(function() dm:test_dataloader() end, nil)
    -- batch_size reaches a constructor that takes it; other options by parameter name
    local D6 = dpl.LightningDataModule:extend('D6')
    function D6:__init(batch_size, tag) dpl.LightningDataModule.__init(self) self.bs, self.tag = batch_size, tag end
    local d6 = D6:from_datasets { train_dataset = ds, batch_size = 5, tag = 'x' }
    assert.are.equal(5, d6.bs)
    assert.are.equal('x', d6.tag)
    assert.matches("unexpected argument 'nope'", select(2, pcall(D6.from_datasets, D6, { nope = 1 })))
    -- num_workers reaches the loaders (worker processes: spec/data_workers_spec.lua)
    assert.are.equal(2, D6:from_datasets({ train_dataset = ds, num_workers = 2 }):train_dataloader().num_workers)
    assert.matches('batch_size must be a positive integer', select(2, pcall(D6.from_datasets, D6, { batch_size = 0 })))
    assert.matches("batch_size must be a positive integer, got '4'", select(2, pcall(D6.from_datasets, D6, { batch_size = '4' })))
    -- training datasets by name (Lightning's Mapping[str, Dataset]): loaders by name, stepped together
    local named = dpl.LightningDataModule:from_datasets { train_dataset = { a = ds, b = ds }, batch_size = 4 }
    local nl = named:train_dataloader()
    assert.are.equal(3, #nl.a)
    assert.are.equal('RandomSampler', nl.b.sampler.__name)
    -- and it trains
    local t = trainer(th.tmpdir(), { enable_checkpointing = false, limit_train_batches = 2 })
    local Lin = dpl.LightningModule:extend('Lin')
    function Lin:__init() dpl.LightningModule.__init(self) self.l = nn.Linear(1, 1) end
    function Lin:training_step(b) return self.l(b[1]):pow(2):mean() end
    function Lin:configure_optimizers() return dpl.optim.SGD(self:parameters(), 0.01) end
    t:fit(Lin(), dpl.LightningDataModule:from_datasets { train_dataset = ds, batch_size = 4 })
    assert.are.equal(2, t.global_step)
  end)

  it('under dplhost --nproc 2 (ddp): prepare_data on local rank 0 only, setup on each, the data sharded', function()
    for _, mode in ipairs({ 'per_node', 'global' }) do
      local out, err, rc = h.dplhost('--nproc 2 spec/support/datamodule_ddp_script.lua ' .. mode, { timeout = 120 })
      assert.are.equal(0, rc, err)
      local r0 = out:match('rank 0 calls (%S+) seen (%d+) wsum (%S+)')
      local c0, s0, w0 = out:match('rank 0 calls (%S+) seen (%d+) wsum (%S+)')
      local c1, s1, w1 = out:match('rank 1 calls (%S+) seen (%d+) wsum (%S+)')
      assert.is_truthy(r0, out)
      assert.are.equal('prepare_data,setup(fit),teardown(fit)', c0)
      assert.are.equal('setup(fit),teardown(fit)', c1)
      assert.are.equal('128', s0) -- 256 samples, half per rank
      assert.are.equal('128', s1)
      assert.are.equal(w0, w1)
    end
  end)

  it('trains a model on Fashion-MNIST through a datamodule', function()
    local FM = dpl.LightningDataModule:extend('FashionDM')
    function FM:setup(stage)
      if stage == 'fit' then
        local all = dpl.datasets.FashionMNIST { train = true }
        self.train = data.Subset(all, data.range(1, 6400))
        self.val = data.Subset(all, data.range(50001, 51000))
      end
    end
    function FM:train_dataloader() return data.DataLoader(self.train, { batch_size = 64, shuffle = true, seed = 0 }) end
    function FM:val_dataloader() return data.DataLoader(self.val, { batch_size = 500 }) end
    local Net = dpl.LightningModule:extend('FashionNet')
    function Net:__init() dpl.LightningModule.__init(self) dpl.manual_seed(0)
      self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10)) end
    function Net:training_step(b) return F.cross_entropy(self.net(b[1]), b[2]) end
    function Net:validation_step(b)
      local logits = self.net(b[1])
      self:log('val_acc', logits:argmax(2):eq(b[2]):float():mean())
    end
    function Net:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1, momentum = 0.9 }) end
    local t = dpl.Trainer { default_root_dir = th.tmpdir(), max_epochs = 1, enable_checkpointing = false,
      enable_progress_bar = false, enable_model_summary = false, logger = false, num_sanity_val_steps = 0 }
    t:fit(Net(), FM())
    assert.are.equal(100, t.global_step)
    local acc = t.callback_metrics.val_acc
    if type(acc) ~= 'number' then acc = acc:item() end
    assert.is_true(acc > 0.7, 'val_acc ' .. acc)
  end)
end)
