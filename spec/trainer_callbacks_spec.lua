-- ModelCheckpoint, EarlyStopping, ProgressBar, Timer, LearningRateMonitor,
-- ModelSummary, custom callbacks and the checkpoint file itself.
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local th = require 'spec.support.trainer_helpers'

local ModelCheckpoint = dpl.callbacks.ModelCheckpoint

local function ls(dir)
  local p = io.popen('ls -1 ' .. h.q(dir) .. ' 2>/dev/null')
  local out = {}
  for l in p:lines() do out[#out + 1] = l end
  p:close()
  table.sort(out)
  return out
end

-- a model whose validation logs a scripted val_loss per epoch
local function scripted(values)
  return th.recording_model({}, {
    validation_step = function(self, batch, i)
      self:log('val_loss', values[self.current_epoch + 1] or 0)
      return { x = 1 }
    end })
end

local function T(o)
  local a = { enable_progress_bar = false, enable_model_summary = false, logger = false, limit_train_batches = 2,
    limit_val_batches = 1, num_sanity_val_steps = 0 }
  for k, v in pairs(o) do a[k] = v end
  return dpl.Trainer(a)
end

describe('ModelCheckpoint', function()
  it('formats filename templates as Lightning does', function()
    local f = ModelCheckpoint._format_checkpoint_name
    assert.equal('epoch=3-step=2', f('{epoch}-{step}', { epoch = 3, step = 2 }))
    assert.equal('epoch=005', f('{epoch:03d}', { epoch = 5 }))
    assert.equal('val_loss=0.12', f('{val_loss:.2f}', { val_loss = 0.1234 }))
    assert.equal('missing=0', f('{missing:d}', {}))
    assert.equal('x=0.5', f('{x}', { x = 0.5 }))
    assert.equal('val/acc=0.9', f('{val/acc}', { ['val/acc'] = 0.9 }))
    assert.equal('3-0.50', f('{epoch}-{val_loss:.2f}', { epoch = 3, val_loss = 0.5 }, nil, false))
    assert.equal('pre-epoch=1', f('{epoch}', { epoch = 1 }, 'pre'))
  end)

  it('validates its arguments', function()
    assert.has_error(function() ModelCheckpoint{ mode = 'avg' } end)
    local ok, e = pcall(ModelCheckpoint, { save_top_k = 3 })
    assert.is_false(ok)
    assert.matches('No quantity for top_k to track', tostring(e))
    ok, e = pcall(ModelCheckpoint, { every_n_epochs = 2, every_n_train_steps = 3 })
    assert.matches('mutually exclusive', tostring(e))
    assert.equal("ModelCheckpoint{'monitor': 'val_loss', 'mode': 'min', 'every_n_train_steps': 0, 'every_n_epochs': 1, 'train_time_interval': None}",
                 ModelCheckpoint{ monitor = 'val_loss' }:state_key())
  end)

  it('keeps the top k by the monitored metric, and last.ckpt', function()
    local dir = th.tmpdir()
    local cb = ModelCheckpoint{ dirpath = dir, monitor = 'val_loss', save_top_k = 2, save_last = true,
      filename = '{epoch}-{val_loss:.1f}' }
    local t = T({ max_epochs = 4, callbacks = { cb } })
    t:fit(scripted({ 0.5, 0.3, 0.4, 0.6 })())
    assert.same({ 'epoch=1-val_loss=0.3.ckpt', 'epoch=2-val_loss=0.4.ckpt', 'last.ckpt' }, ls(dir))
    assert.equal(dir .. '/epoch=1-val_loss=0.3.ckpt', cb.best_model_path)
    assert.equal(0.3, cb.best_model_score)
    assert.equal(dir .. '/epoch=2-val_loss=0.4.ckpt', cb.kth_best_model_path)
    assert.equal(dir .. '/last.ckpt', cb.last_model_path)
    -- test with ckpt_path = "best" loads that file
    local m = scripted({})()
    local res = t:test(m, nil, { ckpt_path = 'best', verbose = false })
    assert.same('table', type(res))
  end)

  it('without monitor keeps the latest; every_n_train_steps; versions', function()
    local dir = th.tmpdir()
    local t = T({ max_epochs = 2, callbacks = { ModelCheckpoint{ dirpath = dir } } })
    t:fit(scripted({})())
    assert.same({ 'epoch=1-step=4.ckpt' }, ls(dir))
    local dir2 = th.tmpdir()
    -- no monitor: an existing file of the same name gets a version, as in Lightning 1.9.5 (which passes
    -- no del_filepath there): every step's file is kept with save_top_k=-1
    local cb2 = ModelCheckpoint{ dirpath = dir2, every_n_train_steps = 1, save_top_k = -1, filename = 'same' }
    T({ max_epochs = 2, callbacks = { cb2 } }):fit(scripted({})())
    assert.same({ 'same-v1.ckpt', 'same-v2.ckpt', 'same-v3.ckpt', 'same.ckpt' }, ls(dir2))
    assert.equal(dir2 .. '/same-v3.ckpt', cb2.best_model_path)
    local dir2b = th.tmpdir()
    T({ max_epochs = 3, limit_val_batches = 0, callbacks = { ModelCheckpoint{ dirpath = dir2b, save_top_k = -1,
      filename = 'same' } } }):fit(scripted({})())
    assert.same({ 'same-v1.ckpt', 'same-v2.ckpt', 'same.ckpt' }, ls(dir2b))
    -- save_top_k=1: same.ckpt, then same-v1.ckpt (same.ckpt removed), then same.ckpt again (same-v1 removed)
    local dir2c = th.tmpdir()
    local cb2c = ModelCheckpoint{ dirpath = dir2c, filename = 'same' }
    T({ max_epochs = 3, limit_val_batches = 0, callbacks = { cb2c } }):fit(scripted({})())
    assert.same({ 'same.ckpt' }, ls(dir2c))
    assert.equal(dir2c .. '/same.ckpt', cb2c.best_model_path)
    local dir3 = th.tmpdir()
    T({ max_epochs = 3, callbacks = { ModelCheckpoint{ dirpath = dir3, monitor = 'val_loss', save_top_k = -1,
      filename = 'same' } } }):fit(scripted({ 1, 1, 1 })())
    assert.same({ 'same-v1.ckpt', 'same-v2.ckpt', 'same.ckpt' }, ls(dir3))
    -- save_top_k=-1 with a monitor tracks the kth (worst kept) too, as Lightning (k = kept + 1)
    local dir3b = th.tmpdir()
    local cb3b = ModelCheckpoint{ dirpath = dir3b, monitor = 'val_loss', save_top_k = -1, filename = '{epoch}' }
    T({ max_epochs = 4, callbacks = { cb3b } }):fit(scripted({ 3, 1, 2, 0.5 })())
    assert.same({ 'epoch=0.ckpt', 'epoch=1.ckpt', 'epoch=2.ckpt', 'epoch=3.ckpt' }, ls(dir3b))
    assert.equal(dir3b .. '/epoch=3.ckpt', cb3b.best_model_path)
    assert.equal(0.5, cb3b.best_model_score)
    assert.equal(dir3b .. '/epoch=0.ckpt', cb3b.kth_best_model_path)
    assert.equal(3, cb3b.kth_value)
    local dir4 = th.tmpdir()
    T({ max_epochs = 1, limit_train_batches = 4, callbacks = { ModelCheckpoint{ dirpath = dir4, every_n_train_steps = 2,
      save_top_k = -1 } } }):fit(scripted({})())
    assert.same({ 'epoch=0-step=2.ckpt', 'epoch=0-step=4.ckpt' }, ls(dir4))
  end)

  it('raises when the monitored key was never logged after validation ran', function()
    local t = T({ max_epochs = 1, callbacks = { ModelCheckpoint{ dirpath = th.tmpdir(), monitor = 'nope' } } })
    local ok, e = pcall(t.fit, t, scripted({ 1 })())
    assert.is_false(ok)
    assert.matches("could not find the monitored key in the returned metrics: %[.*'val_loss'.*%]. HINT", tostring(e))
  end)

  it('writes a safetensors file with Lightning\'s keys in the metadata', function()
    local dir = th.tmpdir()
    local t = T({ max_epochs = 1, callbacks = { ModelCheckpoint{ dirpath = dir } } })
    local m = scripted({ 1 })()
    m:save_hyperparameters({ lr = 0.5 })
    t:fit(m)
    local path = dir .. '/epoch=0-step=2.ckpt'
    local ck = require('dpl.trainer.checkpoint').load(path)
    assert.equal(0, ck.epoch)
    assert.equal(2, ck.global_step)
    assert.equal(1, ck.state_dict.w)
    assert.same({ lr = 0.5 }, ck.hyper_parameters)
    assert.equal('kwargs', ck.hparams_name)
    assert.same({ steps = 2, lr = 0.05 }, ck.optimizer_states[1]) -- the StepLR stand-in halved it at the epoch end
    assert.equal(1, ck.lr_schedulers[1].count)
    assert.truthy(ck.loops.fit_loop)
    assert.truthy(ck.callbacks["ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 0, 'every_n_epochs': 1, 'train_time_interval': None}"])
    -- an independent reader (Python's json/struct) accepts the layout
    local out, _, rc = h.sh('python3 -c ' .. h.q([[
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
hd = json.loads(b[8:8 + n])
assert n % 8 == 0
end = 0
for k, v in hd.items():
    if k == '__metadata__': continue
    s, e = v['data_offsets']; end = max(end, e)
    assert v['dtype'] == 'F64'
assert 8 + n + end == len(b)
print(sorted(k for k in hd if k != '__metadata__'), json.loads(hd['__metadata__']['dplhost.checkpoint'])['global_step'])
]]) .. ' ' .. h.q(path))
    if rc == 0 then
      assert.matches("%['state_dict.w'%] 2", out)
    end
  end)
end)

describe('ckpt_path="best"/"last"/"hpc"/nil (Lightning 1.9.5 _set_ckpt_path)', function()
  -- expectations from PyTorch Lightning 1.9.5 on the same sequences (py twins: a fresh Trainer's
  -- "last" searches the ModelCheckpoint directory on disk, newest file whose name holds "last")
  local loads
  local function model()
    return scripted({ 0.5, 0.4, 0.3 }):extend('Loading')
  end
  local Loading
  local function M()
    if not Loading then
      Loading = model()
      function Loading:on_load_checkpoint(ck) loads[#loads + 1] = ('epoch=%d gs=%d'):format(ck.epoch, ck.global_step) end
    end
    return Loading()
  end
  local function TT(dir, o)
    local a = { default_root_dir = dir, max_epochs = 1, callbacks = { ModelCheckpoint{ dirpath = dir .. '/ck', monitor = 'val_loss', save_last = true } } }
    for k, v in pairs(o or {}) do a[k] = v end
    return T(a)
  end
  local function err(f)
    local ok, e = pcall(f)
    assert.is_false(ok)
    return tostring(e)
  end

  it('"last" on a fresh Trainer: the newest last*.ckpt on disk, or a warning and a fresh start', function()
    local dir = th.tmpdir()
    loads = {}
    -- the first run of a script that always passes "last": nothing there yet
    local t = TT(dir)
    t:fit(M(), nil, nil, { ckpt_path = 'last' })
    assert.same({}, loads)
    assert.equal(2, t.global_step)
    assert.equal(dir .. '/ck/last.ckpt', t.checkpoint_callback.last_model_path)
    -- the second run (a new Trainer, as a new process would have) resumes from it
    t = TT(dir, { max_epochs = 2 })
    t:fit(M(), nil, nil, { ckpt_path = 'last' })
    assert.same({ 'epoch=0 gs=2' }, loads)
    assert.equal(4, t.global_step)
    -- the newest file wins, whatever its name: an older copy named zz-last.ckpt is not taken
    os.execute(('cp %s %s && touch -d 2000-01-01 %s'):format(h.q(dir .. '/ck/last.ckpt'), h.q(dir .. '/ck/zz-last.ckpt'),
      h.q(dir .. '/ck/zz-last.ckpt')))
    loads = {}
    TT(dir):validate(M(), th.loader(2), { ckpt_path = 'last', verbose = false })
    TT(dir):test(M(), th.loader(2), { ckpt_path = 'last', verbose = false })
    assert.same({ 'epoch=1 gs=4', 'epoch=1 gs=4' }, loads)
    -- predict with nothing on disk: a warning, the module as it is
    loads = {}
    local out = TT(th.tmpdir()):predict(M(), th.loader(3), { ckpt_path = 'last' })
    assert.equal(3, #out)
    assert.same({}, loads)
  end)

  it('"best", nil and "hpc": Lightning\'s errors and choices', function()
    local dir = th.tmpdir()
    loads = {}
    assert.matches('^ValueError: `%.validate%(ckpt_path="best"%)` is set but `ModelCheckpoint` is not configured to save the best model%.',
      err(function() TT(dir):validate(M(), th.loader(2), { ckpt_path = 'best', verbose = false }) end))
    assert.matches('^ValueError: `%.test%(ckpt_path="best"%)` is set but `ModelCheckpoint` is not configured%.$',
      err(function() T({ enable_checkpointing = false }):test(M(), th.loader(2), { ckpt_path = 'best', verbose = false }) end))
    -- no model given, one attached: "best" (with a warning), which needs a ModelCheckpoint
    local t0 = T({ max_epochs = 1, enable_checkpointing = false })
    t0:fit(M())
    assert.matches('^ValueError: `%.validate%(ckpt_path="best"%)` is set but `ModelCheckpoint` is not configured%.',
      err(function() t0:validate(nil, th.loader(2), { verbose = false }) end))
    local tf = TT(dir, { fast_dev_run = true })
    tf:fit(M())
    assert.matches('You cannot execute `%.validate%(ckpt_path="best"%)` with `fast_dev_run=True`',
      err(function() tf:validate(nil, th.loader(2), { verbose = false }) end))
    local t = TT(dir, { max_epochs = 3 })
    t:fit(M())
    assert.equal(dir .. '/ck/epoch=2-step=6.ckpt', t.checkpoint_callback.best_model_path)
    loads = {}
    t:validate(nil, th.loader(2), { verbose = false }) -- the best one
    t:validate(M(), th.loader(2), { verbose = false }) -- a model given: no checkpoint
    assert.same({ 'epoch=2 gs=6' }, loads)
    assert.matches("^ValueError: `%.validate%(%)` found no path for the best weights: ''",
      err(function() t:validate(M(), th.loader(2), { ckpt_path = '', verbose = false }) end))
    -- hpc: the largest hpc_ckpt_<n>.ckpt in default_root_dir
    local hdir = th.tmpdir()
    assert.matches('^ValueError: `%.validate%(ckpt_path="hpc"%)` is set but no HPC checkpoint was found%.',
      err(function() TT(hdir):validate(M(), th.loader(2), { ckpt_path = 'hpc', verbose = false }) end))
    local t1 = TT(th.tmpdir())
    t1:fit(M())
    t1:save_checkpoint(hdir .. '/hpc_ckpt_12.ckpt')
    t:save_checkpoint(hdir .. '/hpc_ckpt_3.ckpt')
    loads = {}
    TT(hdir):validate(M(), th.loader(2), { ckpt_path = 'hpc', verbose = false })
    assert.same({ 'epoch=1 gs=2' }, loads) -- hpc_ckpt_12 (t1's, written after its fit), not hpc_ckpt_3
    -- under SLURM (srun, not an interactive job) a fit with no ckpt_path resumes from it
    local C = dpl.C
    local t2 = TT(hdir, { max_epochs = 2 })
    loads = {}
    C.dpl_proc_setenv('SLURM_NTASKS', '1')
    C.dpl_proc_setenv('SLURM_JOB_NAME', 'train')
    local ok, e = pcall(t2.fit, t2, M())
    C.dpl_proc_setenv('SLURM_NTASKS', nil)
    C.dpl_proc_setenv('SLURM_JOB_NAME', nil)
    assert(ok, tostring(e))
    assert.same({ 'epoch=1 gs=2' }, loads)
    assert.equal(4, t2.global_step)
  end)
end)

describe('EarlyStopping', function()
  it('stops after patience checks without improvement', function()
    local es = dpl.callbacks.EarlyStopping{ monitor = 'val_loss', patience = 2 }
    local t = T({ max_epochs = 10, callbacks = { es }, enable_checkpointing = false })
    t:fit(scripted({ 1, 0.5, 0.6, 0.5, 0.4 })())
    assert.equal(4, t.current_epoch) -- epochs 0..3 ran; no improvement in epochs 2 and 3
    assert.equal(3, es.stopped_epoch)
    assert.equal(0.5, es.best_score)
  end)

  it('min_delta: a change of exactly min_delta is not an improvement; strict raises', function()
    local es = dpl.callbacks.EarlyStopping{ monitor = 'val_loss', patience = 1, min_delta = 0.5, mode = 'max' }
    local t = T({ max_epochs = 10, callbacks = { es }, enable_checkpointing = false })
    t:fit(scripted({ 1, 1.5, 3 })())
    assert.equal(2, t.current_epoch)
    local t2 = T({ max_epochs = 2, callbacks = { dpl.callbacks.EarlyStopping{ monitor = 'acc' } }, enable_checkpointing = false })
    local ok, e = pcall(t2.fit, t2, scripted({ 1 })())
    assert.is_false(ok)
    assert.matches('Early stopping conditioned on metric `acc` which is not available. Pass in or modify your `EarlyStopping` callback to use any of the following: `val_loss`', tostring(e))
  end)
end)

describe('ProgressBar, Timer, LearningRateMonitor, ModelSummary, custom callbacks', function()
  local function sink()
    local s = { parts = {} }
    function s:write(...) for _, x in ipairs({ ... }) do self.parts[#self.parts + 1] = x end end
    function s:flush() end
    function s:text() return table.concat(self.parts) end
    return s
  end

  it('not a terminal: plain lines, one per epoch (and per interval), no \\r, rank 0', function()
    local out = sink()
    local pb = dpl.callbacks.ProgressBar{ stream = out, tty = false, interval = 30 }
    local t = dpl.Trainer{ max_epochs = 3, limit_train_batches = 4, limit_val_batches = 0, callbacks = { pb },
      enable_model_summary = false, logger = false, enable_checkpointing = false }
    t:fit(th.recording_model({})())
    local text = out:text()
    assert.is_nil(text:find('\r', 1, true))
    local lines = {}
    for l in text:gmatch('[^\n]+') do lines[#lines + 1] = l end
    assert.equal(3, #lines)
    assert.matches('^Epoch 0: 4/4 batches %(100%%%), [%d.]+ it/s', lines[1])
    assert.matches('^Epoch 2: 4/4', lines[3])
    local out2 = sink()
    local pb2 = dpl.callbacks.ProgressBar{ stream = out2, tty = false, interval = 0 }
    dpl.Trainer{ max_epochs = 1, limit_train_batches = 3, limit_val_batches = 0, callbacks = { pb2 },
      enable_model_summary = false, logger = false, enable_checkpointing = false }:fit(th.recording_model({})())
    local n = select(2, out2:text():gsub('\n', ''))
    assert.equal(4, n) -- interval 0: a line per batch, plus the epoch line
  end)

  it('on a terminal: \\r-refreshed bar with metrics', function()
    local out = sink()
    local pb = dpl.callbacks.ProgressBar{ stream = out, tty = true }
    local Model = th.recording_model({}, { training_step = function(self, b) self:log('l', 0.25, { prog_bar = true }); return th.loss(1) end })
    dpl.Trainer{ max_epochs = 1, limit_train_batches = 2, limit_val_batches = 0, callbacks = { pb },
      enable_model_summary = false, logger = false, enable_checkpointing = false }:fit(Model())
    local text = out:text()
    assert.truthy(text:find('\r', 1, true))
    assert.matches('Epoch 0: 100%%|#+| 2/2 %[.*it/s, l=0.25%]', text)
    assert.equal(pb, dpl.Trainer{ callbacks = { pb }, logger = false }.progress_bar_callback)
  end)

  it('evaluation bars, not a terminal: a line per validate/test/predict dataloader, none inside fit', function()
    local out = sink()
    local pb = dpl.callbacks.ProgressBar{ stream = out, tty = false, interval = 30 }
    local t = dpl.Trainer{ max_epochs = 2, limit_train_batches = 3, limit_val_batches = 2, limit_test_batches = 4,
      limit_predict_batches = 5, num_sanity_val_steps = 1, callbacks = { pb }, enable_model_summary = false,
      logger = false, enable_checkpointing = false }
    local model = th.recording_model({})()
    t:fit(model)
    local fit_text = out:text()
    assert.is_nil(fit_text:find('Validation', 1, true))
    assert.is_nil(fit_text:find('Sanity', 1, true))
    assert.equal(2, select(2, fit_text:gsub('\n', '')))
    out.parts = {}
    t:validate(model, nil, { verbose = false })
    t:test(model, nil, { verbose = false })
    t:predict(model)
    local text = out:text()
    assert.is_nil(text:find('\r', 1, true))
    local lines = {}
    for l in text:gmatch('[^\n]+') do lines[#lines + 1] = l end
    assert.equal(3, #lines)
    assert.matches('^Validation DataLoader 0: 2/2 batches %(100%%%), [%d.]+ it/s, elapsed 00:00, ETA 00:00$', lines[1])
    assert.matches('^Testing DataLoader 0: 4/4 batches %(100%%%)', lines[2])
    assert.matches('^Predicting DataLoader 0: 5/5 batches %(100%%%)', lines[3])
    -- interval 0: a line per batch as well
    local out2 = sink()
    local pb2 = dpl.callbacks.ProgressBar{ stream = out2, tty = false, interval = 0 }
    dpl.Trainer{ limit_test_batches = 3, callbacks = { pb2 }, enable_model_summary = false, logger = false,
      enable_checkpointing = false }:test(th.recording_model({})(), nil, { verbose = false })
    assert.equal(4, select(2, out2:text():gsub('\n', '')))
    assert.matches('Testing DataLoader 0: 1/3 batches', out2:text())
  end)

  it('evaluation bars on a terminal: sanity and in-fit validation cleared, test left; rank 0 only', function()
    local out = sink()
    local pb = dpl.callbacks.ProgressBar{ stream = out, tty = true }
    local t = dpl.Trainer{ max_epochs = 1, limit_train_batches = 2, limit_val_batches = 2, limit_test_batches = 2,
      num_sanity_val_steps = 1, callbacks = { pb }, enable_model_summary = false, logger = false,
      enable_checkpointing = false }
    local model = th.recording_model({})()
    t:fit(model)
    local text = out:text()
    assert.matches('\rSanity Checking DataLoader 0: 100%%|#+| 1/1 %[', text)
    assert.matches('\rValidation DataLoader 0: 100%%|#+| 2/2 %[', text)
    assert.truthy(text:find('\r\027[KEpoch 0:', 1, true)) -- cleared, the training bar drawn again
    assert.matches('Epoch 0: 100%%|#+| 2/2 %[.-%]\027%[K\n$', text)
    out.parts = {}
    t:test(model, nil, { verbose = false })
    assert.matches('^\rTesting DataLoader 0: 100%%|####################| 2/2 %[.-%]\027%[K\n$', out:text())
    -- two dataloaders: a bar each
    out.parts = {}
    t:predict(model, { th.loader(2), th.loader(3) })
    assert.matches('Predicting DataLoader 0: 100%%|#+| 2/2 .*\n.*Predicting DataLoader 1: 100%%|#+| 3/3', out:text())
    -- not rank 0: nothing
    out.parts = {}
    local fake = { is_global_zero = false, num_test_batches = { 2 } }
    pb:on_test_start(fake)
    pb:on_test_batch_start(fake, nil, nil, 0, 0)
    pb:on_test_batch_end(fake, nil, nil, nil, 0, 0)
    pb:on_test_end(fake)
    assert.equal('', out:text())
  end)

  it('Timer stops fitting after its duration', function()
    local timer = dpl.callbacks.Timer{ duration = 1e-9 }
    local t = T({ max_epochs = 5, callbacks = { timer }, enable_checkpointing = false, limit_val_batches = 0 })
    t:fit(th.recording_model({})())
    assert.equal(1, t.global_step)
    assert.truthy(timer:time_elapsed('train') > 0)
    assert.has_error(function() dpl.callbacks.Timer{ interval = 'hour' } end)
  end)

  it('max_time with a Timer in the callbacks keeps that Timer and says so', function()
    local out, lines = io.stdout, {}
    io.stdout = { write = function(_, ...) for _, v in ipairs({ ... }) do lines[#lines + 1] = tostring(v) end end,
      flush = function() end }
    local ok, t = pcall(T, { max_time = 5, callbacks = { dpl.callbacks.Timer{ duration = 3 } } })
    io.stdout = out
    assert.is_true(ok, tostring(t))
    assert.truthy(table.concat(lines):find('Ignoring `Trainer(max_time=...)`, callbacks list already contains a Timer.', 1, true))
    local n = 0
    for _, cb in ipairs(t.callbacks) do if cb._duration then n = n + 1; assert.equal(3, cb._duration) end end
    assert.equal(1, n)
  end)

  it('Timer takes Lightning\'s durations; a depleted timer stops at fit start; time_elapsed starts at the offset', function()
    local Timer = dpl.callbacks.Timer
    assert.equal(60, Timer{ duration = '00:00:01:00' }._duration)
    assert.equal(86400 + 7200 + 180 + 4, Timer{ duration = '01:02:03:04' }._duration)
    assert.equal(3600, Timer{ duration = { hours = 1 } }._duration)
    assert.equal(0, Timer{ duration = {} }._duration) -- timedelta()
    assert.is_nil(Timer()._duration)
    assert.has_error(function() Timer{ duration = '1:00:00' } end,
      'MisconfigurationException: Timer: `duration` as a string must be "DD:HH:MM:SS" (days, hours, minutes, seconds;'
      .. ' e.g. "00:12:00:00"), got \'1:00:00\'')
    assert.has_error(function() Timer{ duration = { hour = 1 } } end,
      "MisconfigurationException: Timer: `duration` as a table takes the keys weeks, days, hours, minutes, seconds,"
      .. " milliseconds, microseconds (as timedelta); got the key 'hour' in {hour=1}")
    assert.has_error(function() Timer{ duraton = 5 } end, 'MisconfigurationException: Timer got an unknown argument: duraton')
    -- restored state: elapsed time counts from the checkpoint's; a depleted timer stops before any batch
    local timer = Timer{ duration = '00:00:00:10' }
    timer:load_state_dict({ time_elapsed = { train = 20 } })
    assert.equal(20, timer:time_elapsed('train'))
    assert.equal(0, timer:time_elapsed('validate'))
    local t = T({ max_epochs = 5, callbacks = { timer }, enable_checkpointing = false, limit_val_batches = 0 })
    t:fit(th.recording_model({})())
    assert.equal(0, t.global_step)
    assert.is_true(t.should_stop)
  end)

  it('LearningRateMonitor logs lr-<Optimizer> to the loggers', function()
    local dir = th.tmpdir()
    local t = T({ max_epochs = 2, log_every_n_steps = 1, enable_checkpointing = false, limit_val_batches = 0,
      callbacks = { dpl.callbacks.LearningRateMonitor{ logging_interval = 'epoch' } }, logger = dpl.loggers.CSVLogger(dir) })
    t:fit(th.recording_model({})())
    local csv = h.read_all(dir .. '/lightning_logs/version_0/metrics.csv')
    assert.matches('lr%-SGD', csv)
    assert.matches('0.05', csv) -- halved by the StepLR stand-in after epoch 0
    local t2 = T({ max_epochs = 1, callbacks = { dpl.callbacks.LearningRateMonitor() } })
    local ok, e = pcall(t2.fit, t2, th.recording_model({})())
    assert.is_false(ok)
    assert.matches('no logger', tostring(e))
  end)

  it('ModelSummary prints totals; custom callbacks by Callback:extend()', function()
    local out = sink()
    local Model = th.recording_model({}, { parameters = function() return { 1, 2, 3 } end, zero_grad = function() end })
    local seen = {}
    local MyCb = dpl.callbacks.Callback:extend('MyCb')
    function MyCb:on_train_epoch_end(trainer, module) seen[#seen + 1] = trainer.current_epoch end
    T({ max_epochs = 2, enable_model_summary = true, callbacks = { dpl.callbacks.ModelSummary{ stream = out }, MyCb() },
      enable_checkpointing = false }):fit(Model())
    assert.matches('\n3         Total params\n', out:text()) -- (Lightning pads the count to 10)
    assert.same({ 0, 1 }, seen)
  end)
end)

describe('checkpoints holding tensors', function()
  it('go through dpl.safetensors and come back as tensors', function()
    local ok, T = pcall(require, 'dpl.tensor')
    if not ok or type(T) ~= 'table' or not pcall(require, 'dpl.safetensors') then
      pending('dpl.tensor / dpl.safetensors not available')
      return
    end
    local ck = require 'dpl.trainer.checkpoint'
    local path = th.tmpdir() .. '/t.ckpt'
    local w = dpl.tensor({ { 1.5, 2 }, { 3, 4 } }, { dtype = 'float32' })
    ck.save({ epoch = 1, state_dict = { weight = w, b = 2 }, hyper_parameters = { lr = 0.1 } }, path)
    local r = ck.load(path)
    assert.equal(1, r.epoch)
    assert.equal(2, r.state_dict.b)
    assert.equal(0.1, r.hyper_parameters.lr)
    assert.truthy(T.is_tensor(r.state_dict.weight))
    assert.equal(4, r.state_dict.weight[2][2]:item())
  end)
end)

describe('epoch-level metrics at train epoch end', function()
  it('ModelCheckpoint and EarlyStopping see x_epoch in on_train_epoch_end', function()
    local dir = th.tmpdir()
    local vals = { 3, 2, 2.5, 2.6, 2.7, 2.8 }
    local Model = th.recording_model({}, { training_step = function(self, batch)
      self:log('tl', vals[self.current_epoch + 1], { on_step = true, on_epoch = true })
      return th.loss(1)
    end })
    local cb = ModelCheckpoint{ dirpath = dir, monitor = 'tl_epoch', filename = '{epoch}' }
    local es = dpl.callbacks.EarlyStopping{ monitor = 'tl_epoch', patience = 2 }
    local t = T({ max_epochs = 6, limit_val_batches = 0, callbacks = { cb, es } })
    t:fit(Model())
    assert.equal(dir .. '/epoch=1.ckpt', cb.best_model_path)
    assert.equal(2, cb.best_model_score)
    assert.equal(4, t.current_epoch) -- no improvement in epochs 2 and 3
  end)
end)

describe('step-level metrics at train batch end', function()
  it('ModelCheckpoint(every_n_train_steps, monitor=) sees the step value just logged', function()
    local dir = th.tmpdir()
    local vals = { 5, 1, 3, 4 }
    local Model = th.recording_model({}, { training_step = function(self, batch, i)
      self:log('l', vals[i + 1])
      return th.loss(1)
    end })
    local cb = ModelCheckpoint{ dirpath = dir, monitor = 'l', every_n_train_steps = 1, filename = '{step}-{l:.0f}' }
    T({ max_epochs = 1, limit_train_batches = 4, limit_val_batches = 0, callbacks = { cb } }):fit(Model())
    assert.equal(dir .. '/step=2-l=1.ckpt', cb.best_model_path)
    assert.same({ 'step=2-l=1.ckpt' }, ls(dir))
  end)
end)

describe('LearningRateMonitor (Lightning 1.9.5 lr_monitor.py)', function()
  -- a logger recording each log_metrics call as "step: k=v k=v" (sorted keys)
  local function rec_logger(rows)
    local L = dpl.loggers.Logger:extend('RecLogger')
    function L:log_metrics(m, step)
      local keys = {}
      for k in pairs(m) do keys[#keys + 1] = k end
      table.sort(keys)
      local parts = {}
      for i, k in ipairs(keys) do parts[i] = k .. '=' .. tostring(m[k]) end
      rows[#rows + 1] = step .. ': ' .. table.concat(parts, ' ')
    end
    return L{ save_dir = th.tmpdir() }
  end
  -- stand-ins: an optimizer class of a given name with param groups and defaults, a scheduler scaling
  -- every group's lr by `factor` at each step
  local function opt_class(name)
    local C = th.Optimizer:extend(name)
    function C:__init(groups, defaults)
      th.Optimizer.__init(self)
      self.param_groups, self.defaults = groups, defaults or {}
    end
    return C
  end
  local SGD, Adam = opt_class('SGD'), opt_class('Adam')
  local Sched = th.Scheduler:extend('StepLR')
  function Sched:__init(opt, factor) th.Scheduler.__init(self, opt); self.factor = factor end
  function Sched:step()
    for _, pg in ipairs(self.optimizer.param_groups) do pg.lr = pg.lr * self.factor end
  end

  local function run(interval, configure, o)
    local rows = {}
    local model = th.recording_model({}, { configure_optimizers = configure })()
    local a = { max_epochs = 2, limit_train_batches = 3, limit_val_batches = 0, log_every_n_steps = 1,
      logger = rec_logger(rows), enable_checkpointing = false,
      callbacks = { dpl.callbacks.LearningRateMonitor{ logging_interval = interval, log_momentum = o and o.momentum } } }
    for k, v in pairs(o or {}) do if k ~= 'momentum' then a[k] = v end end
    T(a):fit(model)
    local out = {}
    for _, r in ipairs(rows) do if r:find('lr%-') or r:find('my_lr') then out[#out + 1] = r end end
    return out
  end
  local function step_sched()
    local opt = SGD({ { lr = 1 } })
    return { optimizer = opt, lr_scheduler = { scheduler = Sched(opt, 0.5), interval = 'step' } }
  end

  it('logs the rate a step trains with, at batch start, straight to the loggers (no epoch key)', function()
    local want = { '0: lr-SGD=1', '1: lr-SGD=0.5', '2: lr-SGD=0.25', '3: lr-SGD=0.125', '4: lr-SGD=0.0625',
      '5: lr-SGD=0.03125' }
    assert.same(want, run('step', step_sched))
    -- interval nil: a step-interval scheduler is logged at batch start only (no extra epoch-start rows)
    assert.same(want, run(nil, step_sched))
    -- "epoch": every rate at each epoch start
    assert.same({ '0: lr-SGD=1', '3: lr-SGD=0.125' }, run('epoch', step_sched))
    -- the logging steps: (batches_that_stepped + 1) % log_every_n_steps == 0, checked before the step
    assert.same({ '1: lr-SGD=0.5', '3: lr-SGD=0.125', '5: lr-SGD=0.03125' }, run('step', step_sched, { log_every_n_steps = 2 }))
  end)

  it('interval nil: epoch schedulers at epoch start, step ones at batch start, unscheduled optimizers at both', function()
    local function three()
      local o1, o2, o3 = SGD({ { lr = 1 } }), Adam({ { lr = 0.01 } }), SGD({ { lr = 3 } })
      return { { optimizer = o1, lr_scheduler = { scheduler = Sched(o1, 0.5), interval = 'step' } },
               { optimizer = o2, lr_scheduler = { scheduler = Sched(o2, 0.1), interval = 'epoch' } },
               { optimizer = o3 } }
    end
    local rows = run(nil, three)
    -- what Lightning 1.9.5 logs for the same configuration (the second SGD is lr-SGD-1)
    assert.same({ '0: lr-Adam=0.01 lr-SGD-1=3', '0: lr-SGD=1 lr-SGD-1=3', '1: lr-SGD=0.5 lr-SGD-1=3',
      '2: lr-SGD=0.25 lr-SGD-1=3', '3: lr-Adam=0.001 lr-SGD-1=3', '3: lr-SGD=0.125 lr-SGD-1=3',
      '4: lr-SGD=0.0625 lr-SGD-1=3', '5: lr-SGD=0.03125 lr-SGD-1=3' }, rows)
  end)

  it('names: the config name, param group names or pgN, -N for repeats; momentum; duplicate names raise', function()
    local function named()
      local o1 = SGD({ { lr = 1, name = 'enc', momentum = 0.9 }, { lr = 2, momentum = 0.9 } }, { momentum = 0.9 })
      local o2 = SGD({ { lr = 5, momentum = 0 } }, { momentum = 0 })
      local o3 = Adam({ { lr = 0.01, betas = { 0.9, 0.999 } } }, { betas = { 0.9, 0.999 } })
      return { { optimizer = o1, lr_scheduler = { scheduler = Sched(o1, 0.5), interval = 'step', name = 'my_lr' } },
               { optimizer = o2 }, { optimizer = o3 } }
    end
    local rows = run(nil, named, { max_epochs = 1, limit_train_batches = 2, momentum = true })
    -- Lightning 1.9.5's rows for the same configuration
    assert.same({
      '0: lr-Adam=0.01 lr-Adam-momentum=0.9 lr-SGD=5 lr-SGD-momentum=0',
      '0: lr-Adam=0.01 lr-Adam-momentum=0.9 lr-SGD=5 lr-SGD-momentum=0 my_lr/enc=1 my_lr/enc-momentum=0.9 my_lr/pg2=2 my_lr/pg2-momentum=0.9',
      '1: lr-Adam=0.01 lr-Adam-momentum=0.9 lr-SGD=5 lr-SGD-momentum=0 my_lr/enc=0.5 my_lr/enc-momentum=0.9 my_lr/pg2=1 my_lr/pg2-momentum=0.9',
    }, rows)
    local function dup()
      return SGD({ { lr = 1, name = 'a' }, { lr = 1, name = 'a' } })
    end
    local ok, e = pcall(run, 'step', dup)
    assert.is_false(ok)
    assert.matches("cannot have multiple parameter groups with identical `name` values. lr%-SGD has duplicated parameter group names {'a'}", tostring(e))
    assert.has_error(function() dpl.callbacks.LearningRateMonitor{ interval = 'step' } end,
      'MisconfigurationException: LearningRateMonitor got an unknown argument: interval')
  end)

  it('keeps the history in lrs', function()
    local cb = dpl.callbacks.LearningRateMonitor{ logging_interval = 'step' }
    local model = th.recording_model({}, { configure_optimizers = step_sched })()
    T({ max_epochs = 1, limit_train_batches = 3, limit_val_batches = 0, log_every_n_steps = 1, enable_checkpointing = false,
      logger = rec_logger({}), callbacks = { cb } }):fit(model)
    assert.same({ ['lr-SGD'] = { 1, 0.5, 0.25 } }, cb.lrs)
  end)
end)

describe('LightningModule:load_from_checkpoint (Lightning 1.9.5 core/saving.py)', function()
  local ok_nn = pcall(function() return dpl.nn.Linear and dpl.optim.SGD end)
  local nn, F = dpl.nn, dpl.nn.functional
  local function tensor_loader()
    dpl.manual_seed(1)
    return dpl.data.DataLoader(dpl.data.TensorDataset(dpl.randn({ 8, 4 }), dpl.randint(1, 3, { 8 })), { batch_size = 4 })
  end
  local function train_and_save(M, m)
    local dir = th.tmpdir()
    local cb = ModelCheckpoint{ dirpath = dir, filename = 'm' }
    T({ max_epochs = 1, limit_val_batches = 0, callbacks = { cb } }):fit(m, tensor_loader())
    return cb.best_model_path
  end
  local function base_methods(M)
    function M:forward(x) return self.net(x) end
    function M:training_step(b) return F.cross_entropy(self(b[1]), b[2]) end
    function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = self.hparams.lr or 0.1 }) end
  end

  it('builds the module from the saved hyper-parameters (by parameter name), on_load_checkpoint, then the weights', function()
    if not ok_nn then pending('dpl.nn / dpl.optim not available') return end
    local calls = {}
    local M = dpl.LightningModule:extend('LFC')
    function M:__init(hidden, lr)
      dpl.LightningModule.__init(self)
      calls[#calls + 1] = ('init(%s, %s)'):format(tostring(hidden), tostring(lr))
      self:save_hyperparameters({ hidden = hidden, lr = lr })
      self.net = nn.Linear(4, hidden)
    end
    base_methods(M)
    function M:on_load_checkpoint(ck) calls[#calls + 1] = 'on_load_checkpoint(' .. tostring(ck.global_step) .. ')' end
    local m = M(3, 0.5)
    local path = train_and_save(M, m)
    calls = {}
    local loaded = M:load_from_checkpoint(path)
    assert.same({ 'init(3, 0.5)', 'on_load_checkpoint(2)' }, calls)
    assert.equal(getmetatable(m), getmetatable(loaded))
    assert.same({ hidden = 3, lr = 0.5 }, loaded.hparams)
    assert.same(m.net.weight:tolist(), loaded.net.weight:tolist())
    assert.same(m.net.bias:tolist(), loaded.net.bias:tolist())
    assert.is_true(loaded.training) -- as the constructor left it (Lightning's examples call .eval() themselves)
    -- keyword overrides: passed to the constructor and stored
    calls = {}
    local l2 = M:load_from_checkpoint(path, { lr = 0.25, map_location = 'cpu' })
    assert.same({ 'init(3, 0.25)', 'on_load_checkpoint(2)' }, calls)
    assert.same({ hidden = 3, lr = 0.25 }, l2.hparams)
    -- called on an instance: its class
    assert.equal(getmetatable(m), getmetatable(m:load_from_checkpoint(path)))
    -- a different width cannot take the weights: the shape mismatch raises
    assert.has_error(function() M:load_from_checkpoint(path, { hidden = 5 }) end)
    assert.has_error(function() M.load_from_checkpoint(path) end)
    assert.has_error(function() M:load_from_checkpoint(path, { hparams_file = 'h.yaml' }) end)
  end)

  it('hyper-parameters saved from a constructor argument come back as that argument', function()
    if not ok_nn then pending('dpl.nn / dpl.optim not available') return end
    local got
    local M = dpl.LightningModule:extend('LFCOpts')
    function M:__init(opts)
      dpl.LightningModule.__init(self)
      got = opts
      self:save_hyperparameters(opts)
      self.net = nn.Linear(4, opts and opts.hidden or 2)
    end
    base_methods(M)
    local m = M({ hidden = 2, lr = 0.1 })
    assert.equal('opts', m._hparams_name)
    local path = train_and_save(M, m)
    assert.equal('opts', require('dpl.trainer.checkpoint').load(path).hparams_name)
    M:load_from_checkpoint(path)
    assert.same({ hidden = 2, lr = 0.1 }, got)
    M:load_from_checkpoint(path, { lr = 0.3 })
    assert.same({ hidden = 2, lr = 0.3 }, got)
  end)

  it('strict=false loads the common keys and warns about the others', function()
    if not ok_nn then pending('dpl.nn / dpl.optim not available') return end
    local M = dpl.LightningModule:extend('LFCA')
    function M:__init() dpl.LightningModule.__init(self); self.net = nn.Linear(4, 2) end
    base_methods(M)
    local m = M()
    local path = train_and_save(M, m)
    local M2 = M:extend('LFCB')
    function M2:__init() M.__init(self); self.extra = nn.Linear(2, 2) end
    local ok, e = pcall(M2.load_from_checkpoint, M2, path)
    assert.is_false(ok)
    assert.matches('Missing key%(s%): extra.weight, extra.bias', tostring(e))
    local loaded = M2:load_from_checkpoint(path, { strict = false })
    assert.same(m.net.weight:tolist(), loaded.net.weight:tolist())
  end)
end)

describe('ModelCheckpoint never deletes what is not its own', function()
  it('keeps the checkpoint a run resumed from (another directory, or its own) and removes only files in dirpath', function()
    local th = require 'spec.support.trainer_helpers'
    local dir = th.tmpdir()
    local M = dpl.LightningModule:extend('CkKeep')
    function M:__init() dpl.LightningModule.__init(self) dpl.manual_seed(0) self.l = dpl.nn.Linear(2, 1) end
    function M:training_step(b) return self.l(b[1]):pow(2):mean() end
    function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
    local ds = dpl.data.TensorDataset(dpl.randn(8, 2))
    local function fit(sub, epochs, ckpt)
      local t = dpl.Trainer { default_root_dir = dir .. sub, max_epochs = epochs, logger = false,
        enable_progress_bar = false, enable_model_summary = false }
      t:fit(M(), dpl.data.DataLoader(ds, { batch_size = 4 }), nil, { ckpt_path = ckpt })
      return t
    end
    local t1 = fit('/a', 1)
    local first = t1.checkpoint_callback.best_model_path
    assert.is_truthy(io.open(first, 'rb'), first)
    local t2 = fit('/b', 2, first) -- resumes from /a's file; saves its own in /b
    assert.are_not.equal(first, t2.checkpoint_callback.best_model_path)
    assert.is_truthy(io.open(first, 'rb'), 'the resumed-from checkpoint was deleted: ' .. first)
    local t3 = fit('/a', 3, first) -- the same directory: still never the file it resumed from
    assert.is_truthy(io.open(first, 'rb'), 'the resumed-from checkpoint was deleted: ' .. first)
    assert.is_truthy(io.open(t3.checkpoint_callback.best_model_path, 'rb'))
    local cb = t3.checkpoint_callback
    assert.is_false(cb:_should_remove(t3, '/etc/passwd'))
    assert.is_true(cb:_should_remove(t3, cb.dirpath .. '/x.ckpt'))
    assert.is_false(cb:_should_remove(t3, cb.dirpath .. '/../x.ckpt'))
  end)
end)
