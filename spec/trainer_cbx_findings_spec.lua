-- trainer_cbx_findings_spec.lua: what an exploratory pass over the callbacks, loggers,
-- profilers, tuner and Fabric found against PyTorch Lightning 1.9.5.
--
-- Expected values are literals recorded by running the same small problems with Lightning
-- 1.9.5 (/work/main/build/plref/bin/python, torch 1.13 CPU); the script is described above
-- each test.
local dpl = require 'dpl'
local th = require 'spec.support.trainer_helpers'

local nn = dpl.nn
local C = dpl.callbacks

local function quiet(o)
  local a = { enable_progress_bar = false, enable_model_summary = false, logger = false,
    num_sanity_val_steps = 0 }
  for k, v in pairs(o) do a[k] = v end
  return a
end
local function ls(dir)
  local out = {}
  for _, n in ipairs(require('dpl.loggers.base').listdir(dir)) do out[#out + 1] = n end
  table.sort(out)
  return out
end
local function base(p) return (p:gsub('.*/', '')) end
local function err(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, 'expected an error')
  return tostring(e)
end

-- Lightning's BoringModel-like problem: Linear(1, 1), 2 training batches, one validation batch
-- logging VALS[epoch + 1] as `v`
local function valued(vals)
  local M = dpl.LightningModule:extend('Valued')
  function M:__init() dpl.LightningModule.__init(self); self.l = nn.Linear(1, 1) end
  function M:training_step(b) return self.l(b[1]):sum() end
  function M:validation_step() self:log('v', vals[self.current_epoch + 1]) end
  function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
  function M:train_dataloader() return dpl.data.DataLoader(dpl.data.TensorDataset(dpl.ones(2, 1)), { batch_size = 1 }) end
  function M:val_dataloader() return dpl.data.DataLoader(dpl.data.TensorDataset(dpl.ones(1, 1)), { batch_size = 1 }) end
  return M
end

describe('ModelCheckpoint', function()
  -- Lightning 1.9.5: ModelCheckpoint(dirpath=d, monitor='v', save_top_k=2, mode=mode,
  -- filename='{epoch}'), Trainer(max_epochs=6, num_sanity_val_steps=0), v = 1, 1, 1, 0.5, 2, 0.5:
  --   min: files epoch=3, epoch=5; best epoch=3, kth epoch=3 (scores 0.5, 0.5)
  --   max: files epoch=1, epoch=4; best epoch=4, kth epoch=1 (scores 2.0, 1.0)
  -- (best_k_models is a dict: of equal scores, min()/max() take the one added first)
  it('breaks ties between equal scores by age, as Lightning (it used the file names)', function()
    local M = valued({ 1.0, 1.0, 1.0, 0.5, 2.0, 0.5 })
    local want = { min = { { 'epoch=3.ckpt', 'epoch=5.ckpt' }, 'epoch=3.ckpt', 'epoch=3.ckpt', 0.5, 0.5 },
      max = { { 'epoch=1.ckpt', 'epoch=4.ckpt' }, 'epoch=4.ckpt', 'epoch=1.ckpt', 2.0, 1.0 } }
    for _, mode in ipairs({ 'min', 'max' }) do
      local dir = th.tmpdir()
      local cb = C.ModelCheckpoint{ dirpath = dir, monitor = 'v', save_top_k = 2, mode = mode, filename = '{epoch}' }
      dpl.Trainer(quiet{ max_epochs = 6, callbacks = { cb } }):fit(M())
      local w = want[mode]
      assert.same(w[1], ls(dir), mode)
      assert.equal(w[2], base(cb.best_model_path), mode)
      assert.equal(w[3], base(cb.kth_best_model_path), mode)
      assert.equal(w[4], cb.best_model_score, mode)
      assert.equal(w[5], cb.kth_value, mode)
    end
  end)

  it('keeps the order of best_k_models across a resume', function()
    -- v = 1, 1 then (resumed) 0.5: the kth of the two 1.0 is the first saved, epoch=0
    local M = valued({ 1.0, 1.0, 0.5 })
    local dir = th.tmpdir()
    local cb = C.ModelCheckpoint{ dirpath = dir, monitor = 'v', save_top_k = 2, filename = '{epoch}', save_last = true }
    dpl.Trainer(quiet{ max_epochs = 2, callbacks = { cb } }):fit(M())
    local cb2 = C.ModelCheckpoint{ dirpath = dir, monitor = 'v', save_top_k = 2, filename = '{epoch}', save_last = true }
    dpl.Trainer(quiet{ max_epochs = 3, callbacks = { cb2 } }):fit(M(), nil, nil, { ckpt_path = dir .. '/last.ckpt' })
    assert.same({ 'epoch=1.ckpt', 'epoch=2.ckpt', 'last.ckpt' }, ls(dir))
  end)

  -- Lightning 1.9.5: class MC(ModelCheckpoint): CHECKPOINT_JOIN_CHAR = '_'; MC(dirpath=d,
  -- save_last=True), one epoch of 2 steps -> ['epoch=0_step=2.ckpt', 'last.ckpt']
  it("uses the class's CHECKPOINT_JOIN_CHAR in the default name and versions (was always '-')", function()
    local MC = C.ModelCheckpoint:extend('MC')
    MC.CHECKPOINT_JOIN_CHAR = '_'
    local dir = th.tmpdir()
    dpl.Trainer(quiet{ max_epochs = 1, callbacks = { MC{ dirpath = dir, save_last = true } } }):fit(valued({ 1 })())
    assert.same({ 'epoch=0_step=2.ckpt', 'last.ckpt' }, ls(dir))
    local cb = MC{ dirpath = dir }
    assert.equal(dir .. '/epoch=0_step=2_v1.ckpt', cb:format_checkpoint_name({ epoch = 0, step = 2 }, nil, 1))
    assert.equal('epoch=0-step=2', C.ModelCheckpoint._format_checkpoint_name(nil, { epoch = 0, step = 2 }))
  end)

  it('takes train_time_interval as a table of timedelta keywords, its state_key as Lightning', function()
    local cb = C.ModelCheckpoint{ train_time_interval = { minutes = 1, seconds = 30 } }
    -- Lightning 1.9.5: ModelCheckpoint(train_time_interval=timedelta(minutes=1, seconds=30)).state_key
    assert.equal("ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 0, 'every_n_epochs': 0, "
      .. "'train_time_interval': datetime.timedelta(seconds=90)}", cb:state_key())
    assert.equal('datetime.timedelta(days=1, seconds=5, microseconds=500000)', C.ModelCheckpoint._timedelta_repr(86405.5))
    assert.matches('train_time_interval', err(C.ModelCheckpoint, { train_time_interval = { hourz = 1 } }))
    assert.matches('must be a number of seconds or a table', err(C.ModelCheckpoint, { train_time_interval = 'x' }))
    -- a tiny interval saves at every batch
    local dir = th.tmpdir()
    dpl.Trainer(quiet{ max_epochs = 1, callbacks = { C.ModelCheckpoint{ dirpath = dir, save_top_k = -1,
      train_time_interval = { microseconds = 1 } } } }):fit(valued({ 1 })())
    assert.same({ 'epoch=0-step=1.ckpt', 'epoch=0-step=2.ckpt' }, ls(dir))
  end)

  it('calls the loggers\' after_save_checkpoint and log_graph hooks, as Lightning', function()
    local calls = {}
    local L = dpl.loggers.Logger:extend('HookLogger')
    function L:__init() dpl.loggers.Logger.__init(self, { save_dir = th.tmpdir() }) end
    function L:log_graph(model) calls[#calls + 1] = 'log_graph ' .. tostring(getmetatable(model).__name) end
    function L:after_save_checkpoint(cb) calls[#calls + 1] = 'after_save ' .. base(cb.best_model_path) end
    local dir = th.tmpdir()
    dpl.Trainer(quiet{ max_epochs = 2, logger = L(), callbacks = { C.ModelCheckpoint{ dirpath = dir, filename = '{epoch}' } } })
      :fit(valued({ 1, 1 })())
    assert.same({ 'log_graph Valued', 'after_save epoch=0.ckpt', 'after_save epoch=1.ckpt' }, calls)
  end)
end)

describe('LearningRateMonitor', function()
  -- Lightning 1.9.5: Adam with two param groups (StepLR(1, 0.5)), SGD(lr=0.5, momentum=0.9) with a
  -- step-interval StepLR(1, 0.1) named 'my', SGD(lr=0.3) without a scheduler; 3 batches, 2 epochs,
  -- log_every_n_steps=2, CSVLogger, LearningRateMonitor(logging_interval=..., log_momentum=True).
  -- metrics.csv headers (the rows' dicts have the schedulers' optimizers first, then the others):
  local headers = {
    ['nil'] = 'lr-Adam/pg1,lr-Adam/pg1-momentum,lr-Adam/pg2,lr-Adam/pg2-momentum,lr-SGD,lr-SGD-momentum,step,my,my-momentum,loss,epoch',
    step = 'lr-Adam/pg1,lr-Adam/pg1-momentum,lr-Adam/pg2,lr-Adam/pg2-momentum,my,my-momentum,lr-SGD,lr-SGD-momentum,step,loss,epoch',
    epoch = 'lr-Adam/pg1,lr-Adam/pg1-momentum,lr-Adam/pg2,lr-Adam/pg2-momentum,my,my-momentum,lr-SGD,lr-SGD-momentum,step,loss,epoch',
  }
  it("writes the rates in Lightning's key order (they were sorted by name)", function()
    local optim = dpl.optim
    local M = dpl.LightningModule:extend('ThreeOpt')
    function M:__init() dpl.LightningModule.__init(self); self.a = nn.Linear(1, 1); self.b = nn.Linear(1, 1); self.c = nn.Linear(1, 1) end
    function M:training_step(b, i, optimizer_idx)
      self:log('loss', 1.0 + i)
      return (self.a(b[1]) + self.b(b[1]) + self.c(b[1])):sum()
    end
    function M:configure_optimizers()
      local o1 = optim.Adam({ { params = self.a:parameters() }, { params = self.b:parameters(), lr = 0.01 } }, { lr = 0.1 })
      local o2 = optim.SGD(self.c:parameters(), { lr = 0.5, momentum = 0.9 })
      local o3 = optim.SGD(self.c:parameters(), { lr = 0.3 })
      return { o1, o2, o3 }, { optim.lr_scheduler.StepLR(o1, 1, { gamma = 0.5 }),
        { scheduler = optim.lr_scheduler.StepLR(o2, 1, { gamma = 0.1 }), interval = 'step', name = 'my' } }
    end
    function M:train_dataloader() return dpl.data.DataLoader(dpl.data.TensorDataset(dpl.ones(3, 1)), { batch_size = 1 }) end
    local dir = th.tmpdir()
    for _, iv in ipairs({ 'nil', 'step', 'epoch' }) do
      local lm = C.LearningRateMonitor{ logging_interval = iv ~= 'nil' and iv or nil, log_momentum = true }
      local t = dpl.Trainer(quiet{ max_epochs = 2, callbacks = { lm }, enable_checkpointing = false, log_every_n_steps = 2,
        logger = dpl.loggers.CSVLogger{ save_dir = dir, name = iv } })
      t:fit(M())
      local f = assert(io.open(t.logger.experiment.metrics_file_path))
      assert.equal(headers[iv], f:read('*l'), iv)
      f:close()
    end
  end)
end)

describe('EarlyStopping', function()
  -- Lightning 1.9.5, EarlyStopping(monitor='v', verbose=True, ...) on `valued` (v logged per epoch):
  --   stopping_threshold=0.5, v = 1, 0.7, 0.5, 0.4: stops at epoch 3, 'Stopping threshold reached:
  --     v = 0.4000000059604645 < 0.5. Signaling Trainer to stop.' (its v is a float32 tensor's item())
  --   divergence_threshold=5.0, v = 1, 2, 6: stops at epoch 2, 'Divergence threshold reached:
  --     v = 6.0 < 5.0. ...' (Lightning's sign is the stopping threshold's; dplhost's reads `>`)
  --   v = 1, nan: stops at epoch 1, 'Monitored metric v = nan is not finite. Previous best value was 1.000. ...'
  local function run(opts, vals)
    local log = require 'dpl.log'
    local said, info = {}, log.info
    log.info = function(f, ...) said[#said + 1] = select('#', ...) > 0 and f:format(...) or f end
    opts.monitor, opts.verbose = 'v', true
    local es = C.EarlyStopping(opts)
    local ok, e = pcall(function()
      dpl.Trainer(quiet{ max_epochs = #vals, callbacks = { es }, enable_checkpointing = false }):fit(valued(vals)())
    end)
    log.info = info
    assert(ok, e)
    local stop
    for _, m in ipairs(said) do if m:find('Signaling Trainer to stop', 1, true) then stop = m end end
    return es, stop
  end
  it('prints thresholds and values as Python floats (were `6 > 5`)', function()
    local es, msg = run({ stopping_threshold = 0.5 }, { 1, 0.7, 0.5, 0.4, 0.3 })
    assert.equal(3, es.stopped_epoch)
    assert.equal('Stopping threshold reached: v = 0.4 < 0.5. Signaling Trainer to stop.', msg)
    es, msg = run({ divergence_threshold = 5 }, { 1, 2, 6, 1 })
    assert.equal(2, es.stopped_epoch)
    assert.equal('Divergence threshold reached: v = 6.0 > 5.0. Signaling Trainer to stop.', msg)
    es, msg = run({}, { 1, 0 / 0, 0.5 })
    assert.equal(1, es.stopped_epoch)
    assert.equal('Monitored metric v = nan is not finite. Previous best value was 1.000. Signaling Trainer to stop.', msg)
  end)
end)
