-- trainer_tune_spec.lua: trainer.tuner:scale_batch_size (dpl.tuner_batch_size, Lightning 1.9.5's
-- batch size finder) and trainer:tune with Trainer{auto_scale_batch_size=, auto_lr_find=}: the
-- batch sizes tried and the result against Lightning 1.9.5 (power, binsearch, simulated OOM), the
-- attribute on the model, its hparams or the datamodule, the state put back, the refusals, the
-- OOM test (is_oom_error), Fashion-MNIST, and the refusal under dplhost --nproc 2 with ddp.
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local errors = require 'dpl.errors'
local B = require 'dpl.tuner_batch_size'
local h = require 'spec.support.helpers'

local OOM = 'linear: out of memory allocating 4096 bytes for a float32 [%d, 8] tensor' -- the CPU allocator's text
local ds = dpl.datasets.SyntheticClassification { n = 1000, features = 8, classes = 4, seed = 2 }

-- records the size of every batch its steps see; raises the allocator's out-of-memory error for
-- batches larger than `oom`
local Rec = dpl.LightningModule:extend('TuneRec')
function Rec:__init(oom)
  dpl.LightningModule.__init(self)
  self.batch_size, self.oom, self.seen, self.vseen, self.lr = 16, oom, {}, {}, 0.1
  dpl.manual_seed(0)
  self.net = nn.Linear(8, 4)
end
function Rec:train_dataloader() return dpl.data.DataLoader(ds, { batch_size = self.batch_size }) end
function Rec:training_step(b)
  local n = b[1]:size(1)
  self.seen[#self.seen + 1] = n
  if self.oom and n > self.oom then error(OOM:format(n)) end
  return F.cross_entropy(self.net(b[1]), b[2])
end
function Rec:configure_optimizers() return dpl.optim.SGD(self:parameters(), self.lr) end
local RecV = Rec:extend('TuneRecV')
function RecV:val_dataloader() return dpl.data.DataLoader(ds, { batch_size = self.batch_size }) end
function RecV:validation_step(b) self.vseen[#self.vseen + 1] = b[1]:size(1) end
function RecV:test_dataloader() return dpl.data.DataLoader(ds, { batch_size = self.batch_size }) end
function RecV:test_step(b)
  local n = b[1]:size(1)
  self.vseen[#self.vseen + 1] = n
  if self.oom and n > self.oom then error(OOM:format(n)) end
end

local function trainer(o)
  local a = { max_epochs = 1000, logger = false, enable_progress_bar = false, enable_model_summary = false,
    enable_checkpointing = false }
  for k, v in pairs(o or {}) do a[k] = v end
  return dpl.Trainer(a)
end
local function err(f, ...) local ok, e = pcall(f, ...) assert.is_false(ok) return e end
local function has(e, s) assert.truthy(tostring(e):find(s, 1, true), tostring(e)) end
local function rep(list) -- {{v, n}, ...} -> v repeated n times, in order
  local out = {}
  for _, p in ipairs(list) do for _ = 1, p[2] do out[#out + 1] = p[1] end end
  return out
end

-- Lightning 1.9.5 on the same problem (1000 samples, a module whose train_dataloader uses
-- self.batch_size = 16, max_epochs=1000, no logger/checkpoint/progress bar, training_step raising
-- RuntimeError("CUDA out of memory. ...") above `oom`): /work/main/build/plref/bin/python with
-- pl.Trainer(...).tuner.scale_batch_size(model, mode=..., **opts), recording the batch size of
-- every training_step (train) and validation_step (eval) call, the value returned and
-- model.batch_size afterwards (equal to it in every case).
local POW = { 2, 2, 2, 4, 4, 4, 8, 8, 8, 16, 16, 16, 32, 32, 32, 64, 64, 64, 128, 128, 128, 256, 256, 256,
  512, 488, 512, 1000, 1000, 1000 } -- (at 512 the 3 steps cross an epoch end: 512, 488, 512)
local LIGHTNING = {
  { 'power, no OOM: doubles to the dataset length', {}, nil, 1000, POW },
  { 'binsearch, no OOM', { mode = 'binsearch' }, nil, 1000, POW },
  { 'power, OOM above 100', {}, 100, 64,
    { 2, 2, 2, 4, 4, 4, 8, 8, 8, 16, 16, 16, 32, 32, 32, 64, 64, 64, 128 } },
  { 'binsearch, OOM above 100', { mode = 'binsearch' }, 100, 100,
    { 2, 2, 2, 4, 4, 4, 8, 8, 8, 16, 16, 16, 32, 32, 32, 64, 64, 64, 128, 96, 96, 96, 112, 104, 100, 100, 100,
      102, 101 } },
  { 'binsearch, OOM above 100, init_val 3, steps_per_trial 2', { mode = 'binsearch', init_val = 3, steps_per_trial = 2 },
    100, 100, { 3, 3, 6, 6, 12, 12, 24, 24, 48, 48, 96, 96, 192, 144, 120, 108, 102, 99, 99, 100, 100, 101 } },
  { 'power, max_trials 3', { max_trials = 3 }, nil, 16, { 2, 2, 2, 4, 4, 4, 8, 8, 8 } },
  { 'binsearch, max_trials 3', { mode = 'binsearch', max_trials = 3 }, nil, 16,
    { 2, 2, 2, 4, 4, 4, 8, 8, 8, 16, 16, 16 } },
  { 'power, OOM from the start (above 1), max_trials 4', { max_trials = 4 }, 1, 1, { 2, 1, 1, 1, 2 } },
}

describe('trainer.tuner:scale_batch_size', function()
  for _, c in ipairs(LIGHTNING) do
    it('as Lightning 1.9.5: ' .. c[1], function()
      local t, m = trainer(), Rec(c[3])
      local opts = {}
      for k, v in pairs(c[2]) do opts[k] = v end
      assert.are.equal(c[4], t.tuner:scale_batch_size(m, opts))
      assert.are.equal(c[4], m.batch_size)
      assert.are.same(c[5], m.seen)
    end)
  end

  it('as Lightning 1.9.5 with validation: each trial validates first, on the loader first loaded (size 2)', function()
    local m = RecV()
    assert.are.equal(1000, trainer().tuner:scale_batch_size(m))
    assert.are.same(POW, m.seen)
    -- Lightning: 42 validation_step calls of batch size 2 (3 at the start of each of the 10
    -- trials, 3 at each epoch end: 1 at 512, 3 at 1000)
    assert.are.same(rep({ { 2, 42 } }), m.vseen)
  end)

  it('method="test" with OOM above 100 (binsearch): 100, the trials limited to steps_per_trial batches', function()
    local t, m = trainer(), RecV(100)
    assert.are.equal(100, t.tuner:scale_batch_size(m, { method = 'test', mode = 'binsearch' }))
    -- Lightning 1.9.5 (with RunningStage formatted as in Python <= 3.10: under 3.11 its
    -- f"{stage}_loop" fails) finds 100 too, but runs its first trial on the loader it loaded before
    -- the search (size 16, all 63 batches); here the first trial is at init_val:
    -- Lightning's eval list is 62 x 16, 8, then the same as below from 4 on
    assert.are.same({ 2, 2, 2, 4, 4, 4, 8, 8, 8, 16, 16, 16, 32, 32, 32, 64, 64, 64, 128, 96, 96, 96, 112, 104,
      100, 100, 100, 102, 101 }, m.vseen)
    assert.are.same({}, m.seen)
  end)

  it('the attribute in model.hparams or on the datamodule (Lightning\'s holders: all set, the last read)', function()
    local H = Rec:extend('TuneHp')
    function H:__init(oom) Rec.__init(self, oom) self.batch_size = nil self:save_hyperparameters({ batch_size = 16 }) end
    function H:train_dataloader() return dpl.data.DataLoader(ds, { batch_size = self.hparams.batch_size }) end
    local m = H(100)
    assert.are.equal(64, trainer().tuner:scale_batch_size(m))
    assert.are.equal(64, m.hparams.batch_size)
    assert.is_nil(rawget(m, 'batch_size'))

    local DM = dpl.LightningDataModule:extend('TuneDM')
    function DM:__init() dpl.LightningDataModule.__init(self) self.bs = 8 end
    function DM:train_dataloader() return dpl.data.DataLoader(ds, { batch_size = self.bs }) end
    local N = Rec:extend('TuneNoBs')
    function N:__init(oom) Rec.__init(self, oom) self.batch_size = nil end
    local dm, m2 = DM(), N(100)
    local t = trainer()
    assert.are.equal(100, t.tuner:scale_batch_size(m2, dm, { mode = 'binsearch', batch_arg_name = 'bs' }))
    assert.are.equal(100, dm.bs)
    assert.is_nil(rawget(dm, 'trainer'))
    assert.are.same({ 2, 2, 2, 4, 4, 4, 8, 8, 8, 16, 16, 16, 32, 32, 32, 64, 64, 64, 128, 96, 96, 96, 112, 104, 100,
      100, 100, 102, 101 }, m2.seen)
    -- {datamodule=} as well; the field on the model and on the datamodule: both set
    local m3, dm3 = N(), DM()
    m3.bs = 5
    assert.are.equal(16, trainer().tuner:scale_batch_size(m3, { datamodule = dm3, batch_arg_name = 'bs', max_trials = 3 }))
    assert.are.equal(16, m3.bs)
    assert.are.equal(16, dm3.bs)
  end)

  it('puts the weights, the trainer and the model back; the user\'s callbacks see nothing', function()
    local Cb = dpl.callbacks.Callback:extend('TuneSpy')
    local calls = {}
    for _, k in ipairs({ 'setup', 'on_fit_start', 'on_train_batch_start', 'on_train_batch_end', 'teardown' }) do
      Cb[k] = function() calls[#calls + 1] = k end
    end
    local cb = Cb()
    local t, m = trainer({ callbacks = { cb } }), Rec(100)
    local w = m.net.weight:clone()
    assert.are.equal(64, t.tuner:scale_batch_size(m))
    assert.are.same(w:totable(), m.net.weight:totable())
    assert.are.equal(0, t.global_step)
    assert.is_nil(rawget(m, 'trainer'))
    assert.is_nil(t.lightning_module)
    assert.are.same({}, calls)
    assert.are.equal(cb, t.callbacks[1])
    assert.is_false(t.auto_scale_batch_size)
    -- the user's trainer then fits with the batch size found
    local t2 = trainer({ max_epochs = 1, callbacks = { cb } })
    m.seen = {}
    t2:fit(m)
    assert.are.equal(16, t2.global_step) -- ceil(1000 / 64)
    assert.are.equal(64, m.seen[1])
  end)

  it('an error that is not out-of-memory is raised again, the weights put back', function()
    local Bad = Rec:extend('TuneBad')
    function Bad:training_step(b)
      if b[1]:size(1) > 8 then error('some other failure') end
      return Rec.training_step(self, b)
    end
    local m = Bad()
    local w = m.net.weight:clone()
    has(err(function() trainer().tuner:scale_batch_size(m) end), 'some other failure')
    assert.are.same(w:totable(), m.net.weight:totable())
    assert.is_nil(rawget(m, 'trainer'))
    -- "out of memory" in a configuration error (not a RuntimeError) is not OOM either (Lightning)
    local Cfg = Rec:extend('TuneCfg')
    function Cfg:training_step(b)
      if b[1]:size(1) > 8 then errors.ValueError:raise(OOM:format(8)) end
      return Rec.training_step(self, b)
    end
    assert.is_true(errors.is(err(function() trainer().tuner:scale_batch_size(Cfg()) end), errors.ValueError))
  end)

  it('is_oom_error: the CPU allocator\'s and the CUDA plugin\'s texts, as Lightning\'s', function()
    assert.is_true(B.is_oom_error('x.lua:3: ' .. OOM:format(4)))
    assert.is_true(B.is_oom_error('cudaMalloc(1048576 bytes) on cuda:0: out of memory (cudaErrorMemoryAllocation);'
      .. ' 0 bytes in tensors, 0 reserved'))
    assert.is_true(B.is_oom_error('cudaMalloc(64 bytes) on cuda:1: out of memory (transient)'))
    assert.is_true(B.is_oom_error('matmul: allocating 64 bytes for a float32 [4, 4] tensor on cuda:0: cudaMalloc(64'
      .. ' bytes) on cuda:0: out of memory (cudaErrorMemoryAllocation)'))
    assert.is_true(B.is_oom_error(errors.RuntimeError(OOM:format(4))))
    assert.is_false(B.is_oom_error('nccl init: out of memory'))
    assert.is_false(B.is_oom_error('out of memory'))
    assert.is_false(B.is_oom_error(errors.MisconfigurationException(OOM:format(4))))
    assert.is_false(B.is_oom_error(nil))
  end)

  it('refuses what Lightning refuses, with its messages', function()
    local t = trainer()
    local l = dpl.data.DataLoader(ds, { batch_size = 4 })
    has(err(function() t.tuner:scale_batch_size(Rec(), { method = 'train' }) end),
      "method 'train' is invalid. Should be one of ('fit', 'validate', 'test', 'predict').")
    has(err(function() t.tuner:scale_batch_size(Rec(), l) end),
      'The Batch size finder cannot be used with dataloaders passed directly to `.fit()`.')
    has(err(function() t.tuner:scale_batch_size(Rec(), nil, nil, l) end),
      "In tuner with method='fit', `dataloaders` argument should be None")
    has(err(function() t.tuner:scale_batch_size(RecV(), l, nil, nil, { method = 'validate' }) end),
      "In tuner with `method`='validate', `train_dataloaders` and `val_dataloaders` arguments should be None")
    has(err(function() t.tuner:scale_batch_size(Rec(), { mode = 'linear' }) end),
      "`mode` should be either of ('power', 'binsearch')")
    has(err(function() t.tuner:scale_batch_size(Rec(), { batch_arg_name = 'bsz' }) end),
      'Field bsz not found in `model`, `datamodule`, nor their `hparams` attributes.')
    has(err(function() t.tuner:scale_batch_size(Rec(), { mdoe = 'power' }) end), "did you mean 'mode'")
    has(err(function() t.tuner:scale_batch_size(Rec(), { init_val = 0 }) end), 'init_val must be an integer >= 1')
    local Two = RecV:extend('TuneTwoVal')
    function Two:val_dataloader() return { RecV.val_dataloader(self), RecV.val_dataloader(self) } end
    has(err(function() t.tuner:scale_batch_size(Two(), { method = 'validate' }) end),
      'The Batch size finder cannot be used with multiple val dataloaders.')
    local e = err(function() trainer({ strategy = 'ddp_spawn', accelerator = 'cpu', devices = 2 }).tuner:scale_batch_size(Rec()) end)
    assert.is_true(errors.is(e, errors.MisconfigurationException), tostring(e))
    has(e, 'The Batch size finder is not supported with distributed strategies.')
    assert.is_nil(trainer({ fast_dev_run = true }).tuner:scale_batch_size(Rec()))
  end)
end)

describe('Trainer{auto_scale_batch_size=, auto_lr_find=} and trainer:tune', function()
  it('checks the arguments, also from argv', function()
    local t = trainer()
    assert.is_false(t.auto_lr_find)
    assert.is_false(t.auto_scale_batch_size)
    assert.are.equal('binsearch', trainer({ auto_scale_batch_size = 'binsearch' }).auto_scale_batch_size)
    assert.are.equal('my_lr', trainer({ auto_lr_find = 'my_lr' }).auto_lr_find)
    local e = err(function() trainer({ auto_scale_batch_size = 'foo' }) end)
    assert.is_true(errors.is(e, errors.ValueError), tostring(e))
    has(e, "`mode` should be either of ('power', 'binsearch')")
    has(err(function() trainer({ auto_scale_batch_size = 3 }) end), '`auto_scale_batch_size` must be true, false')
    has(err(function() trainer({ auto_lr_find = 1e-3 }) end), '`auto_lr_find` must be true, false or the name')
    local p = dpl.Trainer.parse_argv({ '--auto_lr_find', '--auto-scale-batch-size', 'power' })
    assert.are.same({ auto_lr_find = true, auto_scale_batch_size = 'power' }, p)
    p = dpl.Trainer.parse_argv({ '--auto_lr_find=lr2', '--auto_scale_batch_size=false' })
    assert.are.same({ auto_lr_find = 'lr2', auto_scale_batch_size = false }, p)
    local ft = dpl.Trainer.from_argv({ '--auto_scale_batch_size', 'true', '--logger', 'false' })
    assert.is_true(ft.auto_scale_batch_size)
  end)

  it('batch size first, then lr_find (update_attr) at the size found; both flags off afterwards', function()
    local t, m = trainer({ auto_scale_batch_size = 'binsearch', auto_lr_find = true }), Rec(100)
    local r = t:tune(m, { lr_find_kwargs = { num_training = 20 } })
    assert.are.equal(100, r.scale_batch_size)
    assert.are.equal(100, m.batch_size)
    assert.is_table(r.lr_find)
    assert.are.equal(20, #r.lr_find.results.lr)
    assert.are.equal(r.lr_find:suggestion(), m.lr)
    -- the trials, then 20 lr_find steps at 100 (the last of the binsearch trials failed at 101)
    for i = #m.seen - 19, #m.seen do assert.are.equal(100, m.seen[i]) end
    assert.are.equal(101, m.seen[#m.seen - 20])
    assert.is_false(t.auto_scale_batch_size)
    assert.is_false(t.auto_lr_find)
    assert.are.same({}, t:tune(m)) -- nothing left to do: Lightning returns {} too
    -- the mode from scale_batch_size_kwargs over the argument's; the rng state put back
    local m2 = Rec(100)
    dpl.manual_seed(7)
    local before = dpl.rand(3):totable()
    dpl.manual_seed(7)
    local r2 = trainer({ auto_scale_batch_size = 'binsearch' }):tune(m2, { scale_batch_size_kwargs = { mode = 'power' } })
    assert.are.same(before, dpl.rand(3):totable())
    assert.are.equal(64, r2.scale_batch_size)
    assert.is_nil(r2.lr_find)
  end)

  it('auto_lr_find as an attribute name; Lightning\'s refusals', function()
    local L = Rec:extend('TuneMyLr')
    function L:__init() Rec.__init(self) self.my_lr = 0.5 end
    function L:configure_optimizers() return dpl.optim.SGD(self:parameters(), self.my_lr) end
    local m = L()
    local r = trainer({ auto_lr_find = 'my_lr' }):tune(m, { lr_find_kwargs = { num_training = 20 } })
    assert.are.equal(r.lr_find:suggestion(), m.my_lr)
    assert.are.equal(0.1, m.lr)
    has(err(function() trainer({ auto_lr_find = 'nope' }):tune(Rec()) end),
      '`auto_lr_find` was set to nope, however could not find this as a field in `model` or `model.hparams`.')
    has(err(function() trainer({ auto_scale_batch_size = true, strategy = 'ddp_spawn', accelerator = 'cpu', devices = 2 }):tune(Rec()) end),
      "`trainer.tune()` is currently not supported with `Trainer(strategy='ddp_spawn')`.")
    has(err(function() trainer({ auto_lr_find = true }):tune(Rec(), { method = 'test' }) end),
      "method='fit' is an invalid configuration to run lr finder.")
    local DM = dpl.LightningDataModule:extend('TuneDM2')
    has(err(function() trainer({ auto_lr_find = true }):tune(Rec(), nil, dpl.data.DataLoader(ds), { datamodule = DM() }) end),
      'You cannot pass `train_dataloader` or `val_dataloaders` to `trainer.tune()` if datamodule is already passed.')
    has(err(function() trainer():tune(Rec(), { scale_batch_size_kwarg = {} }) end), "did you mean 'scale_batch_size_kwargs'")
    has(err(function() trainer():tune('model') end), '`Trainer.tune()` requires a `LightningModule`')
  end)

  it('Fashion-MNIST: a datamodule whose train_dataloader uses self.batch_size (OOM above 300, binsearch)', function()
    local DM = dpl.LightningDataModule:extend('TuneFashion')
    function DM:__init() dpl.LightningDataModule.__init(self) self.batch_size = 32 end
    function DM:setup()
      if self.ds == nil then
        local idx = {}
        for i = 1, 2000 do idx[i] = i end
        self.ds = dpl.data.Subset(dpl.datasets.FashionMNIST { train = false }, idx)
      end
    end
    function DM:train_dataloader() return dpl.data.DataLoader(self.ds, { batch_size = self.batch_size }) end
    local Net = dpl.LightningModule:extend('TuneFashionNet')
    function Net:__init() dpl.LightningModule.__init(self) dpl.manual_seed(0) self.fc = nn.Linear(784, 10) end
    function Net:training_step(b)
      if b[1]:size(1) > 300 then error(OOM:format(b[1]:size(1))) end
      return F.cross_entropy(self.fc(b[1]:reshape(b[1]:size(1), 784)), b[2])
    end
    function Net:configure_optimizers() return dpl.optim.SGD(self:parameters(), 0.05) end
    local dm, m = DM(), Net()
    local w = m.fc.weight:clone()
    local t = trainer({ auto_scale_batch_size = 'binsearch' })
    local r = t:tune(m, dm, { scale_batch_size_kwargs = { steps_per_trial = 1 } })
    assert.are.equal(300, r.scale_batch_size)
    assert.are.equal(300, dm.batch_size)
    assert.are.same(w:totable(), m.fc.weight:totable())
    local t2 = trainer({ max_steps = 3 })
    t2:fit(m, dm)
    assert.are.equal(3, t2.global_step)
  end)

  it('under dplhost --nproc 2 with ddp: every rank refuses alike (no hang), lr_find then fit run', function()
    local out, e, rc = h.dplhost('--nproc 2 spec/support/tune_ddp_script.lua', { timeout = 120 })
    assert.equal(0, rc, e)
    for r = 0, 1 do
      local pre = ('%%[rank %d%%] rank %d '):format(r, r)
      assert.truthy(out:match(pre .. 'sbs MisconfigurationException: The Batch size finder is not supported with'
        .. ' distributed strategies%.'), out)
      assert.truthy(out:match(pre .. "tune MisconfigurationException: `trainer%.tune%(%)` is currently not supported"
        .. " with `Trainer%(strategy='ddp'%)`%."), out)
    end
    local a = out:match('%[rank 0%] rank 0 lr (%S+) bs 16 steps 64')
    local b = out:match('%[rank 1%] rank 1 lr (%S+) bs 16 steps 64')
    assert.truthy(a, out)
    assert.are.equal(a, b)
  end)
end)
