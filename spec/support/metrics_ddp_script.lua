-- metrics_ddp_script.lua: dpl.metrics logged by a LightningModule under DDP, for
-- spec/trainer_ddp_features_spec.lua. arg[1] = 'values': 11 items (the DistributedSampler pads
-- rank 1 with item 1), batch 3, 3 epochs, Accuracy (train, on step and epoch), Accuracy, AUROC,
-- SpearmanCorrCoef (validation), a MetricCollection (test); prints each rank's callback_metrics
-- after fit and test's results. The same script in Lightning 1.9.5 + torchmetrics 0.11.4 (data
-- and initial weights from the same formulas; the training sampler an unshuffled
-- DistributedSampler, see docs/trainer.md) gives the values the spec expects.
-- arg[1] = 'stop' <dir>: EarlyStopping and ModelCheckpoint monitoring a metric's epoch value and
-- a rank-local step value; prints each rank's stop epoch and checkpoints.
-- arg[2]: the strategy (nil: one process)
local dpl = require 'dpl'
local nn, F, tm = dpl.nn, dpl.nn.functional, dpl.metrics
local what, strategy = arg[1], arg[2]
local spawn = strategy == 'ddp_spawn'

local function sorted(t)
  local ks = {}
  for k, v in pairs(t) do ks[#ks + 1] = ('%s=%.6f'):format(k, v) end
  table.sort(ks)
  return table.concat(ks, ' ')
end

if what == 'values' then
  local N = 11
  local M = dpl.LightningModule:extend('MetricsDDP')
  function M:__init()
    dpl.LightningModule.__init(self)
    self.net = nn.Linear(4, 2)
    dpl.no_grad(function()
      for i = 1, 2 do for j = 1, 4 do self.net.weight[i][j] = math.cos(i * 3 + j) * 0.3 end end
      self.net.bias:zero_()
    end)
    self.train_acc = tm.Accuracy({ task = 'multiclass', num_classes = 2 })
    self.val_acc = tm.Accuracy({ task = 'multiclass', num_classes = 2 })
    self.val_auroc = tm.AUROC({ task = 'binary' })
    self.val_sp = tm.SpearmanCorrCoef()
    self.test_mc = tm.MetricCollection({ tm.Accuracy({ task = 'multiclass', num_classes = 2 }),
      tm.F1Score({ task = 'multiclass', num_classes = 2, average = 'macro' }) }, { prefix = 'test_' })
  end
  function M:forward(x) return self.net(x) end
  function M:training_step(b)
    local out = self(b[1])
    self.train_acc(out, b[2])
    self:log('train_acc', self.train_acc, { on_step = true, on_epoch = true })
    return F.cross_entropy(out, b[2])
  end
  function M:validation_step(b)
    local out = self(b[1])
    local p = F.softmax(out, 2):select(2, 2)
    self.val_acc(out, b[2]); self.val_auroc:update(p, b[2] - 1); self.val_sp:update(p, b[1]:select(2, 1))
    self:log('val_acc', self.val_acc)
    self:log('val_auroc', self.val_auroc)
    self:log('val_sp', self.val_sp)
  end
  function M:test_step(b)
    self.test_mc(self(b[1]), b[2])
    self:log_dict(self.test_mc)
  end
  function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.5 }) end
  local x = dpl.zeros({ N, 4 })
  local yl = {}
  for i = 1, N do
    for j = 1, 4 do x[i][j] = math.sin(i * 7 + j * 3) end
    yl[i] = (math.sin(i * 7 + 3) + 0.5 * math.sin(i * 7 + 6) + 0.8 * math.sin(i * 13.7)) > 0 and 2 or 1
  end
  local dl = dpl.data.DataLoader(dpl.data.TensorDataset(x, dpl.tensor(yl, { dtype = 'int64' })), { batch_size = 3 })
  local t = dpl.Trainer{ strategy = strategy, max_epochs = 3, enable_progress_bar = false, enable_model_summary = false,
    logger = false, enable_checkpointing = false, num_sanity_val_steps = 0,
    accelerator = spawn and 'cpu' or nil, devices = spawn and 2 or nil }
  local m = M()
  t:fit(m, dl, dl)
  print(('R%d fit %s'):format(t.global_rank, sorted(t.callback_metrics)))
  local r = t:test(m, dl, { verbose = false })
  print(('R%d test %s'):format(t.global_rank, sorted(r[1])))
elseif what == 'stop' then
  local dir = arg[3]
  local M = dpl.LightningModule:extend('StopDDP')
  function M:__init()
    dpl.LightningModule.__init(self)
    dpl.manual_seed(0)
    self.l = nn.Linear(4, 3)
    self.vacc = tm.Accuracy({ task = 'multiclass', num_classes = 3 })
    self.tmean = tm.MeanMetric()
  end
  function M:training_step(b)
    local loss = F.cross_entropy(self.l(b[1]), b[2])
    self.tmean(loss + self.trainer.global_rank * 10) -- rank 1's values are 10 more
    self:log('tmean', self.tmean, { on_step = true, on_epoch = true })
    return loss
  end
  function M:validation_step(b)
    self.vacc(self.l(b[1]), b[2])
    self:log('vacc', self.vacc)
  end
  function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 2.0 }) end
  dpl.manual_seed(4)
  local dl = dpl.data.DataLoader(dpl.data.TensorDataset(dpl.randn({ 40, 4 }), dpl.randint(1, 4, { 40 })), { batch_size = 4 })
  local cb = dpl.callbacks
  local es = cb.EarlyStopping{ monitor = 'vacc', mode = 'max', patience = 1 }
  local mc = cb.ModelCheckpoint{ dirpath = dir, monitor = 'vacc', mode = 'max', save_top_k = 2 }
  local mc2 = cb.ModelCheckpoint{ dirpath = dir, monitor = 'tmean_step', mode = 'min', save_top_k = 1,
    filename = 'step-{epoch}-{step}', every_n_train_steps = 2 }
  local t = dpl.Trainer{ strategy = strategy, max_epochs = 30, enable_progress_bar = false, enable_model_summary = false,
    logger = false, callbacks = { es, mc, mc2 } }
  t:fit(M(), dl, dl)
  print(('R%d epoch=%d step=%d stopped=%d best=%s best2=%s vacc=%.6f tmean_epoch=%.4f'):format(t.global_rank,
    t.current_epoch, t.global_step, es.stopped_epoch, tostring(mc.best_model_path):gsub('.*/', ''),
    tostring(mc2.best_model_path):gsub('.*/', ''), t.callback_metrics.vacc, t.callback_metrics.tmean_epoch))
end
