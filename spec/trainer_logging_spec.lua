-- self:log (defaults per hook, forked names, aggregation, errors), the metric
-- dicts, CSVLogger's and TensorBoardLogger's files (TensorBoard's event files
-- checked by spec/support/tb_events.lua's decoder and, when importable, by Python's tensorboard).
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local th = require 'spec.support.trainer_helpers'

local function fit_logging(dir, loggers, extra)
  local Model = dpl.LightningModule:extend('LogModel')
  function Model:training_step(batch, i)
    self:log('train_loss', i + 0.5, { prog_bar = true })
    self:log('both', i, { on_step = true, on_epoch = true })
    self:log('total', 1, { on_step = false, on_epoch = true, reduce_fx = 'sum' })
    return th.loss(1)
  end
  function Model:validation_step(batch, i) self:log('val_loss', 10 - i) end
  function Model:configure_optimizers() return th.Optimizer(0.1) end
  for k, v in pairs(extra or {}) do Model[k] = v end
  local t = dpl.Trainer{ max_epochs = 2, log_every_n_steps = 2, enable_progress_bar = false, enable_model_summary = false,
    default_root_dir = dir, logger = loggers, enable_checkpointing = false }
  local m = Model()
  m:save_hyperparameters({ lr = 0.1, hidden = 64, name = 'mlp' })
  t:fit(m, th.loader(5), th.loader(3))
  return t, m
end

-- an independent reader of TFRecord/Event files (bitwise CRC32C, hand protobuf)
local tb = require 'spec.support.tb_events'
local crc32c, parse_fields, read_events = tb.crc32c, tb.parse_fields, tb.read_events

describe('self:log', function()
  it('fills callback/logged/progress-bar metrics with forked names', function()
    local t = fit_logging(th.tmpdir(), false)
    assert.equal(4.5, t.callback_metrics.train_loss)
    assert.equal(4, t.callback_metrics.both_step)
    assert.equal(2, t.callback_metrics.both_epoch) -- mean of 0..4
    assert.equal(2, t.callback_metrics.both)
    assert.equal(5, t.callback_metrics.total)
    assert.equal(9, t.callback_metrics.val_loss)
    assert.equal(4.5, t.progress_bar_metrics.train_loss)
    assert.is_nil(t.progress_bar_metrics.val_loss)
    assert.equal(9, t.logged_metrics.val_loss)
  end)

  it('logged_metrics holds the last step values even between log_every_n_steps (Lightning 1.9.5)', function()
    -- Lightning 1.9.5, 4 steps (< log_every_n_steps=50), with or without a logger:
    -- logged_metrics == {a_epoch=1.5, a_step=3, d=1}; the logger got only the epoch row
    for _, with_logger in ipairs({ false, true }) do
      local dir = th.tmpdir()
      local Model = dpl.LightningModule:extend('LM')
      function Model:training_step(batch, i)
        self:log('a', i, { on_step = true, on_epoch = true })
        self:log('d', 1)
        self:log('hidden', 5, { logger = false })
        return th.loss(1)
      end
      function Model:configure_optimizers() return th.Optimizer() end
      local t = dpl.Trainer{ max_epochs = 1, limit_train_batches = 4, enable_progress_bar = false, enable_model_summary = false,
        enable_checkpointing = false, logger = with_logger and dpl.loggers.CSVLogger{ save_dir = dir } or false }
      t:fit(Model(), th.loader(4))
      assert.same({ a_epoch = 1.5, a_step = 3, d = 1 }, t.logged_metrics)
      if with_logger then
        local csv = h.read_all(dir .. '/lightning_logs/version_0/metrics.csv')
        local _, rows = csv:gsub('\n', '')
        assert.equal(2, rows) -- the header and the epoch row
        assert.matches('a_epoch', csv)
        assert.is_nil(csv:match('a_step'))
      end
    end
  end)

  it('checks hooks and arguments as Lightning does', function()
    local function try(fx_body, hook)
      local Model = dpl.LightningModule:extend('Bad')
      function Model:training_step() return th.loss(1) end
      function Model:configure_optimizers() return th.Optimizer() end
      Model[hook or 'training_step'] = function(self, ...)
        fx_body(self)
        if hook == nil then return th.loss(1) end
      end
      local t = dpl.Trainer{ max_epochs = 1, enable_progress_bar = false, enable_model_summary = false, logger = false,
        enable_checkpointing = false }
      local ok, e = pcall(t.fit, t, Model(), th.loader(2))
      assert.is_false(ok)
      return tostring(e)
    end
    assert.matches('is not useful', try(function(s) s:log('a', 1, { on_step = false, on_epoch = false }) end))
    assert.matches('reduce_fx', try(function(s) s:log('a', 1, { reduce_fx = 'median' }) end))
    assert.matches("You can't `self:log%(%)` inside `on_fit_start`", try(function(s) s:log('a', 1) end, 'on_fit_start'))
    assert.matches("on_step=true%)` inside `on_train_epoch_end`", try(function(s) s:log('a', 1, { on_step = true }) end, 'on_train_epoch_end'))
    assert.matches('twice in `training_step` with different arguments', try(function(s)
      s:log('a', 1); s:log('a', 1, { prog_bar = true }) end))
    assert.matches('must be a number or a tensor', try(function(s) s:log('a', 'x') end))
    assert.matches('^MisconfigurationException', try(function(s) s:log('a', {}) end))
    -- a misspelt option is an error naming it and the valid ones (Lightning: TypeError
    -- "log() got an unexpected keyword argument 'on_stepp'"), also through log_dict
    local e = try(function(s) s:log('a', 1, { on_stepp = true }) end)
    assert.matches("^TypeError: self:log%(%) got an unexpected option 'on_stepp'", e)
    assert.matches('prog_bar, logger, on_step, on_epoch, reduce_fx, enable_graph, sync_dist, sync_dist_group, '
      .. 'add_dataloader_idx, batch_size, metric_attribute, rank_zero_only', e, 1, true)
    assert.matches("^TypeError: self:log_dict%(%) got an unexpected option 'metric_attribute'",
      try(function(s) s:log_dict({ a = 1 }, { metric_attribute = 'm' }) end))
    assert.matches('^TypeError: self:log%(%): the options must be a table', try(function(s) s:log('a', 1, true) end))
    -- every valid option is accepted
    local Model = dpl.LightningModule:extend('AllOpts')
    function Model:training_step()
      self:log('a', 1, { prog_bar = true, logger = true, on_step = true, on_epoch = true, reduce_fx = 'mean',
        enable_graph = false, sync_dist = false, sync_dist_group = nil, add_dataloader_idx = true, batch_size = 2,
        metric_attribute = 'm', rank_zero_only = false })
      return th.loss(1)
    end
    function Model:configure_optimizers() return th.Optimizer() end
    local t = dpl.Trainer{ max_epochs = 1, enable_progress_bar = false, enable_model_summary = false, logger = false,
      enable_checkpointing = false }
    t:fit(Model(), th.loader(2))
    assert.equal(1, t.callback_metrics.a_epoch)
    -- a tensor of more than one element: Lightning's ValueError, naming the metric
    local T = require 'dpl.tensor'
    e = try(function(s) s:log('wide', T.tensor({ 1, 2 })) end)
    assert.matches('^ValueError: `self:log%(wide, tensor%(', e)
    assert.matches('was called, but the tensor must have a single element. You can try doing `self:log(wide, tensor(', e, 1, true)
    assert.matches('):mean())`', e, 1, true)
  end)

  it('logs from on_train_start (module and callback), epoch level, into the first epoch (Lightning 1.9.5)', function()
    -- Lightning 1.9.5 on the same run: nothing visible in on_train_start or at the first
    -- on_train_epoch_start; x=1 at epoch 0's end (callback, logged and progress-bar metrics, and
    -- epoch 0's row of the logger), no x in epoch 1's row; on_step=True raises
    local dir = th.tmpdir()
    local seen = {}
    local CB = dpl.callbacks.Callback:extend('StartLogger')
    function CB:on_train_start(trainer, pl_module) pl_module:log('from_cb', 2) end
    local Model = dpl.LightningModule:extend('StartLog')
    function Model:training_step() return th.loss(1) end
    function Model:configure_optimizers() return th.Optimizer() end
    function Model:on_train_start()
      self:log('x', 1, { prog_bar = true })
      seen.start = self.trainer.callback_metrics.x
    end
    function Model:on_train_epoch_start() seen['start' .. self.current_epoch] = self.trainer.callback_metrics.x end
    function Model:on_train_epoch_end() seen['end' .. self.current_epoch] = self.trainer.callback_metrics.x end
    local t = dpl.Trainer{ max_epochs = 2, limit_train_batches = 2, enable_progress_bar = false, enable_model_summary = false,
      enable_checkpointing = false, callbacks = { CB() }, logger = dpl.loggers.CSVLogger{ save_dir = dir } }
    t:fit(Model(), th.loader(4))
    assert.is_nil(seen.start)
    assert.is_nil(seen.start0)
    assert.equal(1, seen.end0)
    assert.equal(1, seen.start1)
    assert.equal(1, t.callback_metrics.x)
    assert.equal(2, t.callback_metrics.from_cb)
    assert.equal(1, t.logged_metrics.x)
    assert.equal(1, t.progress_bar_metrics.x)
    local csv = h.read_all(dir .. '/lightning_logs/version_0/metrics.csv')
    local header = csv:match('^[^\n]+')
    local rows = {}
    for line in csv:gmatch('[^\n]+') do rows[#rows + 1] = line end
    local cols = {}
    for name in header:gmatch('[^,]+') do cols[#cols + 1] = name end
    local with_x = {}
    for r = 2, #rows do
      local vals = {}
      for v in (rows[r] .. ','):gmatch('([^,]*),') do vals[#vals + 1] = v end
      local row = {}
      for i, name in ipairs(cols) do row[name] = vals[i] end
      if row.x ~= '' then with_x[#with_x + 1] = row end
    end
    assert.equal(1, #with_x)
    assert.equal(0, tonumber(with_x[1].epoch))
    assert.equal(1, tonumber(with_x[1].x))
    assert.equal(2, tonumber(with_x[1].from_cb))
    -- on_step=true is refused there
    local Bad = Model:extend('StartLogStep')
    function Bad:on_train_start() self:log('x', 1, { on_step = true }) end
    local t2 = dpl.Trainer{ max_epochs = 1, enable_progress_bar = false, enable_model_summary = false, logger = false,
      enable_checkpointing = false }
    local ok, e = pcall(t2.fit, t2, Bad(), th.loader(2))
    assert.is_false(ok)
    assert.matches("You can't `self:log%(on_step=true%)` inside `on_train_start`, must be one of %(false,%)", tostring(e))
  end)
end)

describe('loggers', function()
  it('CSVLogger: lightning_logs/version_N/metrics.csv and hparams.yaml', function()
    local dir = th.tmpdir()
    fit_logging(dir, dpl.loggers.CSVLogger(dir))
    local csv = h.read_all(dir .. '/lightning_logs/version_0/metrics.csv')
    local lines = {}
    for l in csv:gmatch('[^\n]+') do lines[#lines + 1] = l end
    -- Lightning 1.9.5's columns: first-appearance order, each row's metrics in first-logged
    -- order, then epoch, then step
    assert.equal('train_loss,both_step,epoch,step,val_loss,both_epoch,total', lines[1])
    assert.equal('1.5,1.0,0,1,,,', lines[2]) -- floats as Python writes them; epoch and step ints
    assert.equal(',,0,4,9.0,,', lines[4])
    assert.equal(',,0,4,,2.0,5.0', lines[5])
    assert.equal('hidden: 64\nlr: 0.1\nname: mlp\n', h.read_all(dir .. '/lightning_logs/version_0/hparams.yaml'))
    -- a second logger in the same place takes the next version
    local lg = dpl.loggers.CSVLogger(dir)
    assert.equal(1, lg.version)
  end)

  it('CSVLogger writes metrics.csv as Lightning 1.9.5 does: floats, ints, column order', function()
    -- The same run in Lightning 1.9.5 (pytorch_lightning.loggers.CSVLogger, two validation
    -- dataloaders, fit then validate) wrote exactly this file: every self:log value a float
    -- (`1.0`, `2.0` for a logged 2), epoch and step ints, and the validation epoch row's keys
    -- as Lightning's dict(ChainMap(*per_dataloader)): the last dataloader's first, then the
    -- epoch-end hooks'.
    local T = require 'dpl.tensor'
    local dir = th.tmpdir()
    local X, Y = T.zeros(8, 3), T.zeros(8, 1)
    local function dl() return dpl.data.DataLoader(dpl.data.TensorDataset(X, Y), { batch_size = 4 }) end
    local M = dpl.LightningModule:extend('CsvOrder')
    function M:__init() dpl.LightningModule.__init(self); self.l = dpl.nn.Linear(3, 1) end
    function M:training_step(b, i)
      self:log('one', 1.0)
      self:log('loss', 0.25 * (i + 1), { on_step = true, on_epoch = true })
      self:log('intv', 2, { on_step = true })
      self:log('small', 9.999999747378752e-06) -- (Lightning's float32 1e-05)
      return self.l(b[1]):sum() * 0
    end
    function M:validation_step(b, i, d)
      self:log('vone', 1.0, { on_step = true, on_epoch = true })
      self:log('vb', 1234567.0 + d)
      if d == 1 then self:log('only1', 0.5) end
    end
    function M:validation_epoch_end() self:log('vend', 4.0) end
    function M:training_epoch_end() self:log('tend', 5.0) end
    function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
    local t = dpl.Trainer{ max_epochs = 1, logger = dpl.loggers.CSVLogger(dir), log_every_n_steps = 1,
      enable_progress_bar = false, enable_model_summary = false, enable_checkpointing = false, num_sanity_val_steps = 0 }
    t:fit(M(), dl(), { dl(), dl() })
    t:validate(t.lightning_module, { dl(), dl() }, { verbose = false })
    assert.equal(table.concat({
      'one,loss_step,intv,small,epoch,step,vone_step/dataloader_idx_0,vone_step/dataloader_idx_1,'
        .. 'vone_epoch/dataloader_idx_1,vb/dataloader_idx_1,only1/dataloader_idx_1,vone_epoch/dataloader_idx_0,'
        .. 'vb/dataloader_idx_0,vend,loss_epoch,tend',
      '1.0,0.25,2.0,9.999999747378752e-06,0,0,,,,,,,,,,',
      '1.0,0.5,2.0,9.999999747378752e-06,0,1,,,,,,,,,,',
      ',,,,,0,1.0,,,,,,,,,',
      ',,,,,1,1.0,,,,,,,,,',
      ',,,,,0,,1.0,,,,,,,,',
      ',,,,,1,,1.0,,,,,,,,',
      ',,,,0,1,,,1.0,1234568.0,0.5,1.0,1234567.0,4.0,,',
      ',,,,0,1,,,,,,,,,0.375,5.0',
      ',,,,,0,1.0,,,,,,,,,',
      ',,,,,1,1.0,,,,,,,,,',
      ',,,,,0,,1.0,,,,,,,,',
      ',,,,,1,,1.0,,,,,,,,',
      ',,,,1,2,,,1.0,1234568.0,0.5,1.0,1234567.0,4.0,,', '' }, '\n'),
      h.read_all(dir .. '/lightning_logs/version_0/metrics.csv'))
    -- direct calls: a tensor by item() (an integer tensor's is an int), numbers as floats, step
    -- an int (Lua's keys come sorted where Python keeps the dict's order)
    local d2 = th.tmpdir()
    local lg = dpl.loggers.CSVLogger(d2)
    lg.experiment:log_metrics({ b = T.tensor(1.0, { dtype = 'float32' }), a = T.tensor(3, { dtype = 'int64' }), c = 2 })
    lg:log_metrics({ z = T.tensor(7, { dtype = 'int64' }), y = T.tensor(0.5) }, 4)
    lg:save()
    assert.equal('a,b,c,step,y,z\n3,1.0,2.0,0,,\n,,,4,0.5,7\n', h.read_all(d2 .. '/lightning_logs/version_0/metrics.csv'))
    -- Python's float repr
    local B = require 'dpl.loggers.base'
    local want = { [1] = '1.0', [0.1] = '0.1', [1e-4] = '0.0001', [1e-5] = '1e-05', [1.5e-7] = '1.5e-07',
      [123456.5] = '123456.5', [1e15] = '1000000000000000.0', [1e16] = '1e+16', [1.5e16] = '1.5e+16',
      [1 / 3] = '0.3333333333333333', [-2.5] = '-2.5', [1e300] = '1e+300', [5e-324] = '5e-324' }
    for v, s in pairs(want) do assert.equal(s, B.pyfloat(v)) end
    assert.equal('nan', B.pyfloat(0 / 0)); assert.equal('-inf', B.pyfloat(-math.huge)); assert.equal('-0.0', B.pyfloat(-0.0))
  end)

  it('TensorBoardLogger: event files with valid framing and scalars', function()
    local dir = th.tmpdir()
    fit_logging(dir, dpl.loggers.TensorBoardLogger{ save_dir = dir })
    local vdir = dir .. '/lightning_logs/version_0'
    local p = io.popen('ls ' .. h.q(vdir))
    local files = p:read('*a'); p:close()
    local name = files:match('(events%.out%.tfevents%.%d+%.[^\n]+)')
    assert.truthy(name)
    local events = read_events(vdir .. '/' .. name)
    assert.equal('brain.Event:2', events[1].file_version)
    local function first(pred) for _, ev in ipairs(events) do if pred(ev) then return ev end end end
    local tr = first(function(ev) return ev.scalars.train_loss end)
    assert.equal(1, tr.step)
    assert.equal(1.5, tr.scalars.train_loss)
    -- in the order they were first logged, then epoch (Lightning's: not sorted)
    assert.same({ 'train_loss', 'both_step', 'epoch' }, tr.tags)
    local found = first(function(ev) return ev.scalars.val_loss end)
    assert.equal(9, found.scalars.val_loss)
    assert.equal(4, found.step)
    -- the HPARAMS tab: hp_metric = -1 at step 0 and the three hparams-plugin summaries
    local hp = first(function(ev) return ev.scalars.hp_metric end)
    assert.same({ 0, -1 }, { hp.step, hp.scalars.hp_metric })
    local exp = first(function(ev) return ev.plugins['_hparams_/experiment'] end).plugins['_hparams_/experiment']
    assert.equal('hparams', exp.name)
    local start = first(function(ev) return ev.plugins['_hparams_/session_start_info'] end)
    local ssi = parse_fields(parse_fields(start.plugins['_hparams_/session_start_info'].content)[1][2])
    local hps = {}
    for _, entry in ipairs(ssi) do
      local kv = parse_fields(entry[2])
      local val = parse_fields(kv[2][2])[1] -- google.protobuf.Value: {field, value}
      hps[kv[1][2]] = val[2]
    end
    assert.same({ lr = 0.1, hidden = 64, name = 'mlp' }, hps)
    local sei = first(function(ev) return ev.plugins['_hparams_/session_end_info'] end)
    assert.equal('\034\002\008\001', sei.plugins['_hparams_/session_end_info'].content) -- STATUS_SUCCESS
    -- Python's tensorboard reads them too, when it is installed
    local py = tb.python()
    if not py then print('\n(skipped: no python here can import tensorboard; the Lua decoder checked the files)') end
    local out, err, rc = h.sh(h.q(py or 'false') .. ' -c "'
      .. 'from tensorboard.backend.event_processing.event_accumulator import EventAccumulator as E;'
      .. 'e=E(\'' .. vdir .. '\');e.Reload();print(sorted(e.Tags()[\'scalars\']));'
      .. 'print([(x.step,x.value) for x in e.Scalars(\'val_loss\')]);'
      .. 'from tensorboard.plugins.hparams import plugin_data_pb2 as P;'
      .. 'c=e.PluginTagToContent(\'hparams\');'
      .. 'x=P.HParamsPluginData.FromString(c[\'_hparams_/experiment\']).experiment;'
      .. 'print(sorted((h.name,h.type) for h in x.hparam_infos),[m.name.tag for m in x.metric_infos]);'
      .. 's=P.HParamsPluginData.FromString(c[\'_hparams_/session_start_info\']).session_start_info;'
      .. 'print(sorted((k,v.WhichOneof(\'kind\')) for k,v in s.hparams.items()))"')
    if py then
      assert.equal(0, rc, err)
      assert.matches("%['both_epoch', 'both_step', 'epoch', 'hp_metric', 'total', 'train_loss', 'val_loss'%]", out)
      assert.matches('%[%(4, 9%.0%), %(9, 9%.0%)%]', out)
      assert.matches("%[%('hidden', 3%), %('lr', 3%), %('name', 1%)%] %['hp_metric'%]", out)
      assert.matches("%[%('hidden', 'number_value'%), %('lr', 'number_value'%), %('name', 'string_value'%)%]", out)
    end
    -- default_hp_metric=false: no hp_metric, no hparams summaries (hparams.yaml only), as Lightning
    local dir2 = th.tmpdir()
    local lg = dpl.loggers.TensorBoardLogger{ save_dir = dir2, default_hp_metric = false }
    lg:log_hyperparams({ a = 1 })
    lg:log_hyperparams({ b = { c = true } }, { acc = 0.5 })
    lg:finalize()
    local p2 = io.popen('ls ' .. h.q(lg.log_dir))
    local ev2 = read_events(lg.log_dir .. '/' .. p2:read('*a'):match('(events%.out%.tfevents%.[^\n]+)'))
    p2:close()
    local tags = {}
    for _, ev in ipairs(ev2) do
      for k in pairs(ev.scalars) do tags[#tags + 1] = k end
      for k in pairs(ev.plugins) do tags[#tags + 1] = k end
    end
    table.sort(tags)
    assert.same({ '_hparams_/experiment', '_hparams_/session_end_info', '_hparams_/session_start_info', 'acc' }, tags)
    assert.same({ { 'a', 1 }, { 'b/c', true } }, require('dpl.loggers.tensorboard').flatten_hparams({ a = 1, b = { c = true } }))
    -- written again after finalize (fit, then test): a second file, the first one kept
    local dir3 = th.tmpdir()
    local lg3 = dpl.loggers.TensorBoardLogger{ save_dir = dir3 }
    lg3:log_metrics({ a = 1 }, 1); lg3:finalize()
    lg3:log_metrics({ b = 2 }, 2); lg3:finalize()
    local p3 = io.popen('ls ' .. h.q(lg3.log_dir))
    local names = {}
    for l in p3:lines() do if l:match('^events') then names[#names + 1] = l end end
    p3:close()
    assert.equal(2, #names)
    local got = {}
    for _, n in ipairs(names) do
      for _, ev in ipairs(read_events(lg3.log_dir .. '/' .. n)) do for k, v in pairs(ev.scalars) do got[k] = v end end
    end
    assert.same({ a = 1, b = 2 }, got)
  end)

  it('TensorBoardLogger{sub_dir=}: events and hparams.yaml in version_N/<sub_dir>, checkpoints not (Lightning 1.9)', function()
    local dir = th.tmpdir()
    local lg = dpl.loggers.TensorBoardLogger{ save_dir = dir, name = 'tb', sub_dir = 'sub', filename_suffix = '.x' }
    local t = fit_logging(dir, lg)
    assert.equal(dir .. '/tb/version_0/sub', lg.log_dir)
    assert.equal(dir .. '/tb/version_0/sub', t.log_dir)
    local p = io.popen('cd ' .. h.q(dir) .. ' && find . -type f | sort')
    local files = p:read('*a'); p:close()
    assert.matches('^%./tb/version_0/sub/events%.out%.tfevents%.%d+%.[^\n]+%.%d+%.x\n%./tb/version_0/sub/hparams%.yaml\n$', files)
    local name = files:match('(events%.out%.tfevents[^\n]+)')
    local events = read_events(dir .. '/tb/version_0/sub/' .. name)
    local seen = false
    for _, ev in ipairs(events) do if ev.scalars.train_loss then seen = true end end
    assert.is_true(seen)
    -- ModelCheckpoint's directory is <save_dir>/<name>/version_N/checkpoints, without sub_dir (as Lightning)
    local cb = dpl.callbacks.ModelCheckpoint()
    local t2 = dpl.Trainer{ max_epochs = 1, limit_train_batches = 1, limit_val_batches = 0, enable_progress_bar = false,
      enable_model_summary = false, default_root_dir = dir, callbacks = { cb },
      logger = dpl.loggers.TensorBoardLogger{ save_dir = dir, name = 'tb2', sub_dir = 'a/b' } }
    t2:fit(th.recording_model({})())
    assert.equal(dir .. '/tb2/version_0/checkpoints/epoch=0-step=1.ckpt', cb.best_model_path)
  end)

  it('CSVLogger and TensorBoardLogger refuse unknown options, naming them', function()
    local dir = th.tmpdir()
    assert.has_error(function() dpl.loggers.TensorBoardLogger{ save_dir = dir, subdir = 'x' } end,
      'MisconfigurationException: TensorBoardLogger got an unknown argument: subdir (it takes comment, default_hp_metric,'
      .. ' filename_suffix, flush_secs, log_graph, max_queue, name, prefix, purge_step, save_dir, sub_dir, version)')
    assert.has_error(function() dpl.loggers.CSVLogger{ save_dir = dir, flush_every = 3, b = 1 } end,
      'MisconfigurationException: CSVLogger got unknown arguments: b, flush_every (it takes flush_logs_every_n_steps,'
      .. ' name, prefix, save_dir, version)')
    assert.has_error(function() dpl.loggers.TensorBoardLogger{ save_dir = dir, sub_dir = 3 } end,
      'MisconfigurationException: TensorBoardLogger: sub_dir must be a path (string), got 3')
    assert.has_error(function() dpl.loggers.TensorBoardLogger{ save_dir = dir, purge_step = 3 } end)
    -- Lightning's own and SummaryWriter's options are taken
    dpl.loggers.TensorBoardLogger{ save_dir = dir, name = 'n', version = 'v', log_graph = false, default_hp_metric = false,
      prefix = 'p', sub_dir = 's', comment = 'c', max_queue = 10, flush_secs = 120, filename_suffix = '' }
    dpl.loggers.CSVLogger{ save_dir = dir, name = 'n', version = 1, prefix = 'p', flush_logs_every_n_steps = 10 }
    -- Lightning's positional save_dir with the other options after it
    assert.equal(dir .. '/lz/version_3', dpl.loggers.CSVLogger(dir, { name = 'lz', version = 3 }).log_dir)
    assert.equal(dir .. '/tb/version_0/s', dpl.loggers.TensorBoardLogger(dir, { name = 'tb', sub_dir = 's' }).log_dir)
    assert.has_error(function() dpl.loggers.CSVLogger(dir, { nme = 'lz' }) end)
    -- flush_logs_every_n_steps: metrics.csv is written when (step + 1) is a multiple of it
    local lg = dpl.loggers.CSVLogger{ save_dir = dir, name = 'flush', flush_logs_every_n_steps = 2 }
    lg:log_metrics({ a = 1 }, 0)
    assert.is_nil(io.open(lg:metrics_file_path()))
    lg:log_metrics({ a = 2 }, 1)
    assert.equal('a,step\n1.0,0\n2.0,1\n', h.read_all(lg:metrics_file_path())) -- (a Lua number is written as a float)
  end)

  it('the CRC32C matches the published check value', function()
    assert.equal(0xE3069283, require('dpl.loggers.tensorboard').crc32c('123456789'))
    assert.equal(0xE3069283, crc32c('123456789'))
  end)
end)

describe('several evaluation dataloaders', function()
  it('pass dataloader_idx to the step and suffix the metric names', function()
    local seen = {}
    local Model = dpl.LightningModule:extend('MultiVal')
    function Model:validation_step(batch, i, dl) seen[#seen + 1] = dl; self:log('v', batch[1] + 100 * dl) end
    local t = dpl.Trainer{ enable_progress_bar = false, enable_model_summary = false, logger = false,
      enable_checkpointing = false }
    local res = t:validate(Model(), { th.loader(2), th.loader(3) }, { verbose = false })
    assert.same({ 0, 0, 1, 1, 1 }, seen)
    assert.equal(1.5, res[1]['v/dataloader_idx_0'])
    assert.equal(102, res[2]['v/dataloader_idx_1'])
    assert.is_nil(res[1]['v/dataloader_idx_1'])
  end)

  it('epoch-end values have no dataloader suffix; add_dataloader_idx=false from two dataloaders raises (Lightning 1.9.5)', function()
    -- Lightning 1.9.5: validate with 2 dataloaders, self.log('e', 5) in on_validation_epoch_end
    -- gives [{x/dataloader_idx_0, e}, {x/dataloader_idx_1, e}]
    local Model = dpl.LightningModule:extend('MultiValEnd')
    function Model:validation_step(batch, i, dl) self:log('x', dl) end
    function Model:on_validation_epoch_start() self:log('s', 4) end
    function Model:on_validation_epoch_end() self:log('e', 5) end
    local t = dpl.Trainer{ enable_progress_bar = false, enable_model_summary = false, logger = false,
      enable_checkpointing = false }
    local res = t:validate(Model(), { th.loader(2), th.loader(3) }, { verbose = false })
    assert.same({ ['x/dataloader_idx_0'] = 0, e = 5, s = 4 }, res[1])
    assert.same({ ['x/dataloader_idx_1'] = 1, e = 5, s = 4 }, res[2])
    assert.equal(5, t.callback_metrics.e)
    assert.is_nil(t.callback_metrics['e/dataloader_idx_1'])
    -- the same name from both dataloaders without the suffix: one key, two dataloaders
    local Same = dpl.LightningModule:extend('MultiValSame')
    function Same:validation_step(batch, i, dl) self:log('x', dl or 0, { add_dataloader_idx = false }) end
    local ok, e = pcall(t.validate, t, Same(), { th.loader(2), th.loader(3) }, { verbose = false })
    assert.is_false(ok)
    assert.matches('^MisconfigurationException: You called `self:log%(x, %.%.%.%)` twice in `validation_step` with different arguments', tostring(e))
    -- one dataloader: add_dataloader_idx=false changes nothing
    res = t:validate(Same(), th.loader(2), { verbose = false })
    assert.same({ x = 0 }, res[1])
  end)
end)
