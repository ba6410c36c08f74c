-- metrics_spec.lua: dpl.metrics (lua/dpl/metrics/) against torchmetrics 0.11.4
-- (spec/fixtures/metrics_ref.lua, from gen_metrics_ref.py: each metric fed 2-3 batches by
-- forward, the batch values and the final compute); then the Metric base class (states,
-- forward vs update, reset, clone, add_state errors), aggregation, MetricCollection, the
-- functional forms, errors, and the Trainer logging a Metric as Lightning 1.9.5 does.
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local raises = h.raises
local tm = dpl.metrics

local function build(e) return dpl.tensor(e.v, { dtype = e.dtype }) end
local function close(name, got, want, tol)
  local w = dpl.tensor(want, { dtype = 'float64' })
  if type(want) == 'number' then w = w:reshape({}) end
  assert.is_true(dpl.is_tensor(got), name .. ': not a tensor')
  assert.are.same(w:size(), got:size(), name .. ': shape')
  local g = got:double()
  local ok = g:eq(w):logical_or(g:ne(g):logical_and(w:ne(w))):logical_or((g - w):abs():le(tol or 1e-6))
  if not ok:all():item() then error(('%s: got %s, torchmetrics %s'):format(name, tostring(g), tostring(w)), 2) end
end

describe('dpl.metrics against torchmetrics 0.11.4', function()
  for _, c in ipairs(dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/metrics_ref.lua')) do
    it(c.name, function()
      local cls = tm[c.cls]
      assert.is_not_nil(cls, c.cls)
      local m = cls(next(c.opts) and c.opts or nil)
      for i, b in ipairs(c.batches) do
        local v = m(build(b[1]), build(b[2]))
        close(c.name .. ' forward ' .. i, v, c.forward[i])
      end
      close(c.name .. ' compute', m:compute(), c.out)
    end)
  end
end)

describe('dpl.metrics: the Metric class', function()
  local preds = dpl.tensor({ { 0.1, 0.8, 0.1 }, { 0.7, 0.2, 0.1 }, { 0.2, 0.2, 0.6 }, { 0.3, 0.4, 0.3 } })
  local target = dpl.tensor({ 2, 1, 2, 3 }, { dtype = 'int64' })

  it('update accumulates, compute is cached until the next update, reset starts over', function()
    local m = tm.Accuracy({ task = 'multiclass', num_classes = 3 })
    m:update(preds, target)
    local a = m:compute()
    assert.are.equal(a, m:compute())
    assert.are.equal(0.5, a:item())
    m:update(preds:narrow(1, 1, 2), target:narrow(1, 1, 2))
    assert.is_true(math.abs(m:compute():item() - 4 / 6) < 1e-6)
    m:reset()
    m:update(preds:narrow(1, 1, 1), target:narrow(1, 1, 1))
    assert.are.equal(1, m:compute():item())
  end)

  it('forward returns the batch value and adds the batch (also with full_state_update)', function()
    local m = tm.MaxMetric()
    assert.are.equal(3, m(dpl.tensor({ 1, 3 })):item())
    assert.are.equal(2, m(dpl.tensor({ 2 })):item())
    assert.are.equal(3, m:compute():item())
    local mean = tm.MeanMetric()
    mean(dpl.tensor({ 1, 2 }))
    assert.are.equal(4, mean(4, 2):item())
    assert.is_true(math.abs(mean:compute():item() - 11 / 4) < 1e-6)
  end)

  it('a subclass defines update and compute with add_state; clone copies the states', function()
    local Count = tm.Metric:extend('Count')
    function Count:__init() tm.Metric.__init(self); self:add_state('n', dpl.tensor(0), 'sum'); self:add_state('xs', {}, 'cat') end
    function Count:update(x) self.n = self.n + x:numel(); self.xs[#self.xs + 1] = x end
    function Count:compute() return self.xs:sum() / self.n end
    local c = Count()
    assert.are.equal(2, c(dpl.tensor({ 1, 3 })):item())
    c:update(dpl.tensor({ 8 }))
    assert.are.equal(4, c:compute():item())
    local d = c:clone()
    d:update(dpl.tensor({ 0 }))
    assert.are.equal(4, c:compute():item())
    assert.are.equal(3, d:compute():item())
    raises(function() c:add_state('bad', 3) end, 'state variable must be a tensor or any empty list')
    raises(function() c:add_state('bad2', dpl.tensor(0), 'median') end, '`dist_reduce_fx` must be callable or one of')
  end)

  it('aggregation: Sum, Mean (weighted), Max, Min, Cat, and nan_strategy', function()
    local s = tm.SumMetric()
    s:update(dpl.tensor({ 1, 2 })); s:update(3)
    assert.are.equal(6, s:compute():item())
    local c = tm.CatMetric()
    c:update(dpl.tensor({ 1, 2 })); c:update(dpl.tensor({ 3 }))
    assert.are.same({ 1, 2, 3 }, c:compute():totable())
    local mn = tm.MinMetric({ nan_strategy = 'ignore' })
    mn:update(dpl.tensor({ 5, 0 / 0, 2 }))
    assert.are.equal(2, mn:compute():item())
    raises(function() tm.SumMetric({ nan_strategy = 'error' }):update(dpl.tensor({ 0 / 0 })) end, 'Encounted `nan` values in tensor')
    local f = tm.SumMetric({ nan_strategy = 0.5 })
    f:update(dpl.tensor({ 0 / 0, 1 }))
    assert.are.equal(1.5, f:compute():item())
  end)

  it('MetricCollection: prefix, forward, compute, reset, clone', function()
    local mc = tm.MetricCollection({ tm.MulticlassAccuracy({ num_classes = 3, average = 'micro' }),
      tm.MulticlassRecall({ num_classes = 3, average = 'micro' }) }, { prefix = 'val_' })
    local r = mc(preds, target)
    assert.are.same({ 'val_MulticlassAccuracy', 'val_MulticlassRecall' }, mc:keys())
    assert.are.equal(0.5, r.val_MulticlassAccuracy:item())
    local c2 = mc:clone({ prefix = 'test_' })
    c2:update(preds:narrow(1, 1, 1), target:narrow(1, 1, 1))
    assert.is_true(math.abs(c2:compute().test_MulticlassAccuracy:item() - 3 / 5) < 1e-6) -- (a copy keeps the states)
    assert.are.equal(0.5, mc:compute().val_MulticlassAccuracy:item())
    mc:reset()
    raises(function() tm.MetricCollection({ 1 }) end, 'MetricCollection: entry 1 is not a metric')
  end)

  it('functional forms', function()
    local F = tm.functional
    assert.are.equal(0.5, F.accuracy(preds, target, { task = 'multiclass', num_classes = 3 }):item())
    assert.are.equal(0.75, F.auroc(dpl.tensor({ 0.1, 0.4, 0.35, 0.8 }), dpl.tensor({ 0, 0, 1, 1 }, { dtype = 'int64' }), { task = 'binary' }):item())
    assert.is_true(math.abs(F.mean_squared_error(dpl.tensor({ 1, 2, 3 }), dpl.tensor({ 1, 2, 5 })):item() - 4 / 3) < 1e-6)
    assert.are.same({ { 1, 0, 0 }, { 0, 1, 1 }, { 0, 1, 0 } },
      F.confusion_matrix(preds, target, { task = 'multiclass', num_classes = 3 }):totable())
  end)

  it('bad input raises errors naming the metric', function()
    raises(function() tm.Accuracy({ task = 'multi' }) end, "expected argument `task` to either be 'binary', 'multiclass' or 'multilabel'")
    raises(function() tm.MulticlassAccuracy({ num_classes = 1 }) end, 'expected argument `num_classes` to be an integer larger than 1')
    raises(function() tm.MulticlassAccuracy({ num_classes = 3, average = 'avg' }) end, 'expected argument `average` to be one of')
    raises(function() tm.MulticlassAccuracy({ num_classes = 3, foo = 1 }) end, "unknown option 'foo'")
    raises(function() tm.MulticlassAccuracy({ num_classes = 3 }):update(preds, dpl.tensor({ 1, 2, 3, 4 }, { dtype = 'int64' })) end,
      'detected the following values in `target`: 4 but expected only values in 1..3')
    raises(function() tm.MulticlassAccuracy({ num_classes = 3 }):update(preds, target:float()) end,
      'expected argument `target` to be an int or long tensor')
    raises(function() tm.BinaryAccuracy():update(dpl.rand(3), dpl.tensor({ 0, 1 }, { dtype = 'int64' })) end,
      'expected `preds` and `target` to have the same shape')
    raises(function() tm.MulticlassAccuracy({ num_classes = 3, multidim_average = 'samplewise' }) end,
      "NotImplementedError: MulticlassAccuracy: multidim_average='samplewise' is not implemented")
    raises(function() tm.R2Score():compute() end, 'Needs at least two samples')
  end)

  it('follows the device of its inputs (states move on the first update)', function()
    local m = tm.MeanSquaredError()
    m:update(dpl.tensor({ 1.0 }), dpl.tensor({ 2.0 }))
    assert.are.equal('cpu', tostring(m.sum.device))
  end)
end)

describe('dpl.metrics in the Trainer (self:log of a Metric, as Lightning 1.9.5 with torchmetrics 0.11.4)', function()
  -- Lightning 1.9.5 + torchmetrics 0.11.4: the same module in Python (training_step:
  -- self.train_acc(p, t); self.log('train_acc', self.train_acc, on_step=True, on_epoch=True);
  -- validation_step: self.val_acc.update(p, t); self.val_f1(p, t); self.log('val_acc',
  -- self.val_acc); self.log('val_f1', self.val_f1, prog_bar=True)), these scores and labels
  -- (0-based there), batch_size 2, max_epochs=2, CSVLogger, log_every_n_steps=1: metrics.csv
  -- below, callback_metrics {train_acc=0.3333, train_acc_epoch=0.3333, train_acc_step=0.0,
  -- val_acc=0.0, val_f1=0.0}, and the metrics' states reset after fit (tp sum 0).
  it('logs step values of forward, epoch values of compute, and resets after each epoch', function()
    local scores = dpl.tensor({ { 0.7576315999031067, 0.2793108820915222, 0.40306925773620605 },
      { 0.7346844673156738, 0.029281556606292725, 0.7998586297035217 },
      { 0.3971373438835144, 0.7543719410896301, 0.5695084929466248 },
      { 0.4387779235839844, 0.6386804580688477, 0.524665892124176 },
      { 0.6826140880584717, 0.30514949560165405, 0.46354562044143677 },
      { 0.4549863338470459, 0.5724719762802124, 0.4980025887489319 } })
    local y = dpl.tensor({ 1, 2, 3, 2, 2, 1 }, { dtype = 'int64' })
    local vscores = dpl.tensor({ { 0.93708336353302, 0.655595064163208, 0.31379687786102295 },
      { 0.19801932573318481, 0.4161921739578247, 0.2843296527862549 },
      { 0.3397757411003113, 0.5239408016204834, 0.7980638742446899 },
      { 0.77176833152771, 0.011224567890167236, 0.8099602460861206 } })
    local vy = dpl.tensor({ 3, 3, 1, 2 }, { dtype = 'int64' })
    local D = dpl.data
    local M = dpl.LightningModule:extend('MetricsModule')
    function M:__init()
      dpl.LightningModule.__init(self)
      self.l = dpl.nn.Linear(1, 1)
      self.train_acc = tm.Accuracy({ task = 'multiclass', num_classes = 3 })
      self.val_acc = tm.Accuracy({ task = 'multiclass', num_classes = 3 })
      self.val_f1 = tm.F1Score({ task = 'multiclass', num_classes = 3, average = 'macro' })
    end
    function M:training_step(b)
      self.train_acc(b[2], b[3])
      self:log('train_acc', self.train_acc, { on_step = true, on_epoch = true })
      return self.l(b[1]):sum()
    end
    function M:validation_step(b)
      self.val_acc:update(b[2], b[3])
      self.val_f1(b[2], b[3])
      self:log('val_acc', self.val_acc)
      self:log('val_f1', self.val_f1, { prog_bar = true })
    end
    function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
    function M:train_dataloader() return D.DataLoader(D.TensorDataset(dpl.ones(6, 1), scores, y), { batch_size = 2 }) end
    function M:val_dataloader() return D.DataLoader(D.TensorDataset(dpl.ones(4, 1), vscores, vy), { batch_size = 2 }) end
    local dir = h.tmpname('.metrics')
    local t = dpl.Trainer({ max_epochs = 2, num_sanity_val_steps = 0, enable_progress_bar = false,
      enable_model_summary = false, logger = dpl.loggers.CSVLogger(dir, { name = 'm', version = 0 }),
      log_every_n_steps = 1, enable_checkpointing = false })
    local m = M()
    t:fit(m)
    local cb = t.callback_metrics
    assert.is_true(math.abs(cb.train_acc - 1 / 3) < 1e-6 and math.abs(cb.train_acc_epoch - 1 / 3) < 1e-6)
    assert.are.equal(0, cb.train_acc_step)
    assert.are.equal(0, cb.val_acc)
    assert.are.equal(0, cb.val_f1)
    assert.are.equal(0, t.progress_bar_metrics.val_f1)
    local f = assert(io.open(dir .. '/m/version_0/metrics.csv'))
    local csv = f:read('*a')
    f:close()
    assert.are.equal(table.concat({ 'train_acc_step,epoch,step,val_acc,val_f1,train_acc_epoch',
      '0.5,0,0,,,', '0.5,0,1,,,', '0.0,0,2,,,', ',0,2,0.0,0.0,', ',0,2,,,0.3333333432674408',
      '0.5,1,3,,,', '0.5,1,4,,,', '0.0,1,5,,,', ',1,5,0.0,0.0,', ',1,5,,,0.3333333432674408', '' }, '\n'), csv)
    assert.are.equal(0, m.train_acc.tp:sum():item())
    assert.are.equal(0, m.train_acc._update_count)
    os.execute('rm -rf ' .. h.q(dir))
  end)

  it('a metric computing several values cannot be logged', function()
    local M = dpl.LightningModule:extend('BadMetric')
    function M:__init() dpl.LightningModule.__init(self); self.l = dpl.nn.Linear(1, 1)
      self.acc = tm.MulticlassAccuracy({ num_classes = 2, average = 'none' }) end
    function M:training_step(b)
      self.acc:update(dpl.tensor({ 1, 2 }, { dtype = 'int64' }), dpl.tensor({ 1, 1 }, { dtype = 'int64' }))
      self:log('acc', self.acc, { on_epoch = true, on_step = false })
      return self.l(b[1]):sum()
    end
    function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
    function M:train_dataloader() return dpl.data.DataLoader(dpl.data.TensorDataset(dpl.ones(2, 1)), { batch_size = 1 }) end
    raises(function()
      dpl.Trainer({ max_epochs = 1, enable_progress_bar = false, enable_model_summary = false, logger = false,
        enable_checkpointing = false }):fit(M())
    end, 'the metric computed a tensor of 2 elements')
  end)
end)

describe('dpl.metrics across processes', function()
  it('compute() syncs the states of every rank (sums, maxima, and concatenated lists of different lengths)', function()
    local out, err, rc = h.dplhost('--nproc 2 ' .. h.q(h.root .. '/spec/support/metrics_dist_script.lua'), { timeout = 60 })
    assert.are.equal(0, rc, err)
    assert.matches('METRICS%-DIST rank 0 ok', out)
    assert.matches('METRICS%-DIST rank 1 ok', out)
  end)
end)

describe('dpl.metrics on a (simulated) GPU', function()
  it("a metric's first batch on a GPU through forward moves the states there (and MultivariateNormal validates there)", function()
    local f = h.write_file(h.tmpname('.lua'), [[
local dpl = require 'dpl'
local dev = 'cuda:0'
local acc = dpl.metrics.Accuracy({ task = 'multiclass', num_classes = 3 })
local p = dpl.tensor({ { 0.1, 0.8, 0.1 }, { 0.7, 0.2, 0.1 } }):to(dev)
local t = dpl.tensor({ 2, 1 }, { dtype = 'int64' }):to(dev)
print(acc(p, t):item(), acc:compute():item(), tostring(acc.tp.device))
local D = dpl.distributions
local mvn = D.MultivariateNormal(dpl.zeros(2):to(dev), { covariance_matrix = dpl.tensor({ { 2, 0.5 }, { 0.5, 1 } }):to(dev) })
print(string.format('%.4f', mvn:log_prob(dpl.ones(2):to(dev)):item()))
]])
    local out, err, rc = h.sh('DPL_VIRTUAL_GPUS=1 ' .. h.q(h.bin) .. ' ' .. h.q(f))
    os.remove(f)
    assert.are.equal(0, rc, err)
    assert.matches('1\t1\tcuda:0\n%-2%.6891', out)
  end)
end)

describe('dpl.metrics in a module', function()
  it('metric attributes print as children of the module, as torchmetrics modules do', function()
    local M = dpl.LightningModule:extend('LitPrint')
    function M:__init()
      dpl.LightningModule.__init(self)
      self.l = dpl.nn.Linear(2, 3)
      self.train_acc = tm.Accuracy({ task = 'multiclass', num_classes = 3 })
    end
    local s = tostring(M())
    assert.matches('\n  %(l%): Linear%(in_features=2, out_features=3, bias=true%)  %-%- 9 params\n  %(train_acc%): MulticlassAccuracy%(%)\n%)', s)
  end)
end)
