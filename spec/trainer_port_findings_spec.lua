-- trainer_port_findings_spec.lua: what porting Lightning 1.9 scripts to dplhost found;
-- expected values from Lightning 1.9.5 runs of the same cases.
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional

local quiet = { max_epochs = 1, logger = false, enable_checkpointing = false, enable_progress_bar = false,
  enable_model_summary = false }
local function trainer(o)
  local a = {}
  for k, v in pairs(quiet) do a[k] = v end
  for k, v in pairs(o or {}) do a[k] = v end
  return dpl.Trainer(a)
end
local function loader(n, bs)
  dpl.manual_seed(0)
  return dpl.data.DataLoader(dpl.data.TensorDataset(dpl.randn(n, 4), dpl.randn(n, 1)), { batch_size = bs })
end

describe('training_step outputs given to on_train_batch_end and training_epoch_end', function()
  it('two optimizers: a list per batch of each optimizer\'s output, in optimizer order', function()
    local batch_end, epoch_end = {}, nil
    local M = dpl.LightningModule:extend('TwoOpt')
    function M:__init() dpl.LightningModule.__init(self); self.a = nn.Linear(4, 1); self.b = nn.Linear(4, 1) end
    function M:training_step(b, i, opt_idx)
      if opt_idx == 0 then return F.mse_loss(self.a(b[1]), b[2]) end
      return { loss = F.mse_loss(self.b(b[1]), b[2]), extra = i }
    end
    function M:configure_optimizers()
      return { dpl.optim.SGD(self.a:parameters(), { lr = 0.1 }), dpl.optim.SGD(self.b:parameters(), { lr = 0.1 }) }
    end
    function M:on_train_batch_end(out) batch_end[#batch_end + 1] = out end
    function M:training_epoch_end(outs) epoch_end = outs end
    trainer():fit(M(), loader(12, 4))
    -- Lightning 1.9.5: outs = [[{'loss': t}, {'loss': t, 'extra': 0}], ...] (3 batches)
    assert.equal(3, #epoch_end)
    for k = 1, 3 do
      assert.equal(2, #epoch_end[k])
      assert.is_nil(epoch_end[k][1].extra)
      assert.equal(k - 1, epoch_end[k][2].extra)
      assert.equal('cdata', type(epoch_end[k][1].loss))
      assert.equal(2, #batch_end[k])
      assert.equal(k - 1, batch_end[k][2].extra)
    end
  end)

  it('two optimizers, one batch: the list of that batch (Lightning squeezes the batch dimension)', function()
    local epoch_end
    local M = dpl.LightningModule:extend('TwoOpt1')
    function M:__init() dpl.LightningModule.__init(self); self.a = nn.Linear(4, 1); self.b = nn.Linear(4, 1) end
    function M:training_step(b, i, opt_idx)
      return F.mse_loss((opt_idx == 0 and self.a or self.b)(b[1]), b[2])
    end
    function M:configure_optimizers()
      return { dpl.optim.SGD(self.a:parameters(), { lr = 0.1 }), dpl.optim.SGD(self.b:parameters(), { lr = 0.1 }) }
    end
    function M:training_epoch_end(outs) epoch_end = outs end
    trainer():fit(M(), loader(4, 4))
    assert.equal(2, #epoch_end)
    assert.equal('cdata', type(epoch_end[1].loss))
    assert.equal('cdata', type(epoch_end[2].loss))
  end)

  it('the loss kept is detached and divided by accumulate_grad_batches; the returned table is not changed', function()
    local returned, kept = {}, {}
    local M = dpl.LightningModule:extend('Kept')
    function M:__init() dpl.LightningModule.__init(self); self.l = nn.Linear(4, 1) end
    function M:training_step(b)
      local out = { loss = F.mse_loss(self.l(b[1]), b[2]), hiddens = 1, other = 2 }
      returned[#returned + 1] = out
      return out
    end
    function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
    function M:training_epoch_end(outs) kept = outs end
    trainer({ accumulate_grad_batches = 2 }):fit(M(), loader(8, 4))
    assert.equal(2, #kept)
    for k = 1, 2 do
      assert.is_false(kept[k].loss.requires_grad)
      assert.is_true(returned[k].loss.requires_grad)
      assert.is_near(returned[k].loss:item() / 2, kept[k].loss:item(), 1e-7)
      assert.is_nil(kept[k].hiddens)
      assert.equal(2, kept[k].other)
      assert.equal(1, returned[k].hiddens)
    end
  end)

  it('a dict whose loss is not a tensor is a MisconfigurationException naming it', function()
    local M = dpl.LightningModule:extend('NumLoss')
    function M:__init() dpl.LightningModule.__init(self); self.l = nn.Linear(4, 1) end
    function M:training_step() return { loss = 3 } end
    function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
    local ok, err = pcall(function() trainer():fit(M(), loader(4, 4)) end)
    assert.is_false(ok)
    assert.matches("MisconfigurationException: .*'loss' returned by `training_step` must be a Tensor%. Got number", tostring(err))
  end)
end)

describe('training_step returning nil (a skipped step), as Lightning 1.9.5', function()
  -- Lightning 1.9.5, 2 batches (limit_train_batches=2) with training_step returning None for
  -- every batch or for batch 1 only: on_train_batch_end gets [] for a skipped batch and
  -- training_epoch_end is called, with [] when every step was skipped; the same in manual
  -- optimisation, where a tensor returned reaches the hooks as {'loss': <it, detached>}
  local function run(auto, skip, nopt)
    local seen = { batch_end = {}, epoch_end = false }
    local M = dpl.LightningModule:extend('Skip')
    function M:__init()
      dpl.LightningModule.__init(self); self.l = nn.Linear(4, 1); self.automatic_optimization = auto
    end
    function M:training_step(b, i, ...)
      if not auto then
        local o = self:optimizers(); o:zero_grad(); self:manual_backward(F.mse_loss(self.l(b[1]), b[2])); o:step()
      end
      if skip(i) then return nil end
      return F.mse_loss(self.l(b[1]), b[2])
    end
    function M:on_train_batch_end(out) seen.batch_end[#seen.batch_end + 1] = out end
    function M:training_epoch_end(outs) seen.epoch_end = outs end
    function M:configure_optimizers()
      if nopt == 2 then
        return { dpl.optim.SGD(self:parameters(), { lr = 0.1 }), dpl.optim.SGD(self:parameters(), { lr = 0.1 }) }
      end
      return dpl.optim.SGD(self:parameters(), { lr = 0.1 })
    end
    trainer({ limit_train_batches = 2 }):fit(M(), loader(4, 1))
    return seen
  end
  local all, odd = function() return true end, function(i) return i % 2 == 1 end

  it('every step skipped: [] to on_train_batch_end, training_epoch_end([]) (automatic, 1 or 2 optimizers, manual)', function()
    for _, c in ipairs({ { true, 1 }, { true, 2 }, { false, 1 } }) do
      local seen = run(c[1], all, c[2])
      assert.equal(2, #seen.batch_end)
      assert.same({}, seen.batch_end[1])
      assert.same({}, seen.batch_end[2])
      assert.same({}, seen.epoch_end) -- (false: not called)
    end
  end)

  it('one step skipped: [] for it, the others kept (automatic and manual)', function()
    for _, auto in ipairs({ true, false }) do
      local seen = run(auto, odd, 1)
      assert.equal('cdata', type(seen.batch_end[1].loss))
      assert.is_false(seen.batch_end[1].loss.requires_grad)
      assert.same({}, seen.batch_end[2])
      assert.equal(1, #seen.epoch_end)
      assert.equal(seen.batch_end[1], seen.epoch_end[1])
    end
    local seen = run(true, odd, 2)
    assert.equal(2, #seen.batch_end[1])
    assert.same({}, seen.batch_end[2])
    assert.equal(1, #seen.epoch_end)
    assert.equal(2, #seen.epoch_end[1])
  end)

  it('manual optimisation: a table returned reaches the hooks without hiddens, another value is refused', function()
    local kept, returned
    local M = dpl.LightningModule:extend('ManualOut')
    function M:__init() dpl.LightningModule.__init(self); self.l = nn.Linear(4, 1); self.automatic_optimization = false end
    function M:training_step(b)
      returned = { loss = F.mse_loss(self.l(b[1]), b[2]), hiddens = 1, other = 2 }
      return returned
    end
    function M:on_train_batch_end(out) kept = out end
    function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
    trainer({ limit_train_batches = 1 }):fit(M(), loader(4, 4))
    assert.is_nil(kept.hiddens)
    assert.equal(2, kept.other)
    assert.is_false(kept.loss.requires_grad)
    assert.equal(1, returned.hiddens)
    local Bad = dpl.LightningModule:extend('ManualBad')
    function Bad:__init() dpl.LightningModule.__init(self); self.l = nn.Linear(4, 1); self.automatic_optimization = false end
    function Bad:training_step() return 3 end
    function Bad:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
    local ok, err = pcall(function() trainer({ limit_train_batches = 1 }):fit(Bad(), loader(4, 4)) end)
    assert.is_false(ok)
    assert.matches('MisconfigurationException: In manual optimization, `training_step` must either return a Tensor, a dict'
      .. ' with extras to pass to `training_epoch_end` or have no return.', tostring(err), 1, true)
  end)
end)

describe('Trainer attributes (Lightning 1.9.5)', function()
  it('has Lightning\'s properties, with its values on a CPU fit', function()
    -- Lightning 1.9.5, the same fit (one device, validation): data_parallel False,
    -- distributed_sampler_kwargs None, enable_validation False then True, evaluating False
    -- (True in validation_step, False in the sanity check), optimizer_frequencies [], scaler
    -- None, tuning False, prediction_writer_callbacks [], val_dataloaders None then [loader]
    local seen = {}
    local M = dpl.LightningModule:extend('Props')
    function M:__init() dpl.LightningModule.__init(self); self.l = nn.Linear(4, 1) end
    function M:training_step(b) return F.mse_loss(self.l(b[1]), b[2]) end
    function M:validation_step()
      local t = self.trainer
      seen[#seen + 1] = tostring(t.sanity_checking) .. ' ' .. tostring(t.evaluating)
    end
    function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
    local t = trainer({ num_sanity_val_steps = 1, limit_val_batches = 1 })
    assert.is_false(t.data_parallel)
    assert.is_nil(t.distributed_sampler_kwargs)
    assert.is_false(t.enable_validation)
    assert.is_false(t.evaluating)
    assert.same({}, t.optimizer_frequencies)
    assert.is_nil(t.scaler)
    assert.is_false(t.tuning)
    assert.same({}, t.prediction_writer_callbacks)
    assert.same({}, t.predict_loop.predictions)
    assert.is_nil(t.val_dataloaders)
    assert.is_nil(t.test_dataloaders)
    local val = loader(4, 4)
    t:fit(M(), loader(4, 4), val)
    assert.same({ 'true false', 'false true' }, seen)
    assert.is_true(t.enable_validation)
    assert.is_false(t.evaluating)
    assert.equal(1, #t.val_dataloaders)
    -- every entry point starts with no evaluation loaders (Lightning's attach_dataloaders)
    local P = M:extend('PropsEval')
    function P:test_step() end
    function P:forward(x) return self.l(x) end
    function P:predict_step(b) return self(b[1]) end
    t:test(P(), loader(4, 4))
    assert.equal(1, #t.test_dataloaders)
    assert.is_nil(t.val_dataloaders)
    t:predict(P(), loader(4, 4))
    assert.equal(1, #t.predict_dataloaders)
    assert.is_nil(t.test_dataloaders)
    t:fit(M(), loader(4, 4), val)
    assert.is_nil(t.predict_dataloaders)
    local W = dpl.callbacks.BasePredictionWriter:extend('W')
    local w = W('epoch')
    table.insert(t.callbacks, w)
    assert.same({ w }, t.prediction_writer_callbacks)
  end)

  it('reading a name it does not have raises AttributeError (Python\'s), Lightning\'s removed ones its message', function()
    local t = trainer()
    local ok, e = pcall(function() return t.current_epcoh end)
    assert.is_false(ok)
    assert.equal("AttributeError: 'Trainer' object has no attribute 'current_epcoh' (did you mean 'current_epoch'?)",
      tostring(e))
    ok, e = pcall(function() return t.lightning_optimizers end)
    assert.equal('AttributeError: `Trainer.lightning_optimizers` was deprecated in v1.6 and is no longer accessible as of'
      .. ' v1.8.', tostring(e))
    ok, e = pcall(function() return t.tested_ckpt_path end)
    assert.matches('Please use `Trainer.ckpt_path` instead.', tostring(e), 1, true)
    -- attributes that may be None read as nil; a script's own fields and internal ones read as usual
    assert.is_nil(t.ckpt_path); assert.is_nil(t.datamodule); assert.is_nil(t.logger); assert.is_nil(t.min_steps)
    assert.is_nil(t.early_stopping_callback); assert.is_nil(t.gradient_clip_val); assert.is_nil(t.resume_from_checkpoint)
    t.my_flag = 3
    assert.equal(3, t.my_flag)
    assert.is_nil(t._not_set_here)
    -- dplhost has no loop objects but fit_loop/predict_loop, and no precision plugins
    assert.has_error(function() return t.validate_loop end)
  end)
end)

describe('manual optimisation as Lightning\'s docs write it', function()
  local function manual_model(body)
    local M = dpl.LightningModule:extend('Manual')
    function M:__init() dpl.LightningModule.__init(self); self.automatic_optimization = false; self.l = nn.Linear(4, 1) end
    function M:training_step(b, i)
      local opt = self:optimizers()
      opt:zero_grad()
      self:manual_backward(F.mse_loss(self.l(b[1]), b[2]) * 100)
      body(self, opt, i)
      opt:step()
    end
    function M:configure_optimizers()
      local o = dpl.optim.SGD(self:parameters(), { lr = 0.1 })
      return { o }, { dpl.optim.lr_scheduler.StepLR(o, { step_size = 1, gamma = 0.5 }) }
    end
    return M
  end

  it('trainer.is_last_batch is true at each epoch\'s last batch only (stepping a scheduler per epoch)', function()
    local seen = {}
    local M = manual_model(function(self, opt, i)
      seen[#seen + 1] = self.trainer.is_last_batch
      if self.trainer.is_last_batch then self:lr_schedulers():step() end
    end)
    local t = trainer({ max_epochs = 2 })
    assert.is_false(t.is_last_batch)
    t:fit(M(), loader(12, 4))
    assert.same({ false, false, true, false, false, true }, seen)
    assert.equal(0.025, t.optimizers[1].param_groups[1].lr)
  end)

  it('clip_gradients takes Lightning\'s keywords as an options table, and checks the algorithm', function()
    local norms = {}
    local M = manual_model(function(self, opt)
      self:clip_gradients(opt, { gradient_clip_val = 0.5, gradient_clip_algorithm = 'NORM' })
      local s = 0
      for _, p in ipairs(self:parameters()) do s = s + (p.grad * p.grad):sum():item() end
      norms[#norms + 1] = math.sqrt(s)
    end)
    trainer():fit(M(), loader(8, 4))
    for _, n in ipairs(norms) do assert.is_true(n <= 0.5 + 1e-5, tostring(n)) end
    local function fails(args, pat)
      local Bad = manual_model(function(self, opt) self:clip_gradients(opt, unpack(args)) end)
      local ok, err = pcall(function() trainer():fit(Bad(), loader(4, 4)) end)
      assert.is_false(ok)
      assert.matches(pat, tostring(err))
    end
    fails({ 0.5, 'nrom' }, "MisconfigurationException: `gradient_clip_algorithm` nrom is invalid%. Allowed algorithms: %['value', 'norm'%]")
    fails({ { gradient_clip_val = 0.5, gradient_clip_algoritm = 'norm' } }, "TypeError: clip_gradients got an unexpected keyword argument 'gradient_clip_algoritm'")
    fails({ '0.5' }, 'TypeError: `gradient_clip_val` should be an int or a float%. Got 0%.5%.')
  end)
end)

describe('trainer.ckpt_path', function()
  it('is the checkpoint the last entry point loaded (resolved), nil when none', function()
    local dir = os.tmpname(); os.remove(dir)
    local M = dpl.LightningModule:extend('Ck')
    function M:__init() dpl.LightningModule.__init(self); self.l = nn.Linear(4, 1) end
    function M:training_step(b) return F.mse_loss(self.l(b[1]), b[2]) end
    function M:validation_step(b) self:log('v', F.mse_loss(self.l(b[1]), b[2])) end
    function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
    local ck = dpl.callbacks.ModelCheckpoint{ dirpath = dir, monitor = 'v' }
    local t = trainer({ enable_checkpointing = true, callbacks = { ck } })
    t:fit(M(), loader(8, 4), loader(8, 4))
    assert.is_nil(t.ckpt_path)
    t:validate(nil, loader(8, 4), { ckpt_path = 'best', verbose = false })
    assert.equal(ck.best_model_path, t.ckpt_path)
    t:validate(M(), loader(8, 4), { verbose = false })
    assert.is_nil(t.ckpt_path)
    os.execute('rm -rf ' .. dir)
  end)
end)

describe('mistakes a port makes', function()
  it('a LightningModule whose constructor skips LightningModule.__init is refused (it trained nothing)', function()
    local M = dpl.LightningModule:extend('NoSuper')
    function M:__init() self.l = nn.Linear(4, 1) end
    function M:training_step(b) return F.mse_loss(self.l(b[1]), b[2]) end
    function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
    for _, fn in ipairs({ 'fit', 'validate' }) do
      local ok, err = pcall(function() trainer()[fn](trainer(), M(), loader(8, 4)) end)
      assert.is_false(ok)
      assert.matches('MisconfigurationException: `Trainer%.' .. fn .. '%(%)`: NoSuper was not initialised as a LightningModule:'
        .. ' its constructor must call `dpl%.LightningModule%.__init%(self%)` first', tostring(err))
    end
  end)

  it('a dataset item that is nil names the dataset and the position (default collation)', function()
    local DS = dpl.data.Dataset:extend('Holey')
    function DS:__len() return 8 end
    function DS:get(i) if i == 6 then return nil end return { dpl.randn(4), dpl.randn(1) } end
    local ok, err = pcall(function()
      for _ in dpl.data.DataLoader(DS(), { batch_size = 4 }):iter() do end
    end)
    assert.is_false(ok)
    assert.matches('TypeError: DataLoader: Holey:get%(6%) returned nil; default_collate takes', tostring(err))
    -- a collate_fn of one's own sees the hole
    local n = 0
    for b in dpl.data.DataLoader(DS(), { batch_size = 4, collate_fn = function(items) return items end }):iter() do
      for k = 1, 4 do if b[k] ~= nil then n = n + 1 end end
    end
    assert.equal(7, n)
    ok, err = pcall(dpl.data.default_collate, { { dpl.randn(2) }, dpl.randn(2) })
    assert.is_false(ok)
    assert.matches('default_collate: item 2 is .* where item 1 is a table', tostring(err))
  end)
end)

describe('EarlyStopping', function()
  it('says by how much the metric improved once there is a best score (Lightning\'s _improvement_message)', function()
    local es = dpl.callbacks.EarlyStopping{ monitor = 'v', min_delta = 0.01, patience = 2 }
    local stop, msg = es:_evaluate_stopping_criteria(5)
    assert.is_false(stop)
    assert.equal('Metric v improved. New best score: 5.000', msg)
    stop, msg = es:_evaluate_stopping_criteria(4)
    assert.equal('Metric v improved by 1.000 >= min_delta = 0.01. New best score: 4.000', msg)
    local es2 = dpl.callbacks.EarlyStopping{ monitor = 'acc', mode = 'max' }
    es2:_evaluate_stopping_criteria(0.5)
    stop, msg = es2:_evaluate_stopping_criteria(0.75)
    assert.equal('Metric acc improved by 0.250 >= min_delta = 0.0. New best score: 0.750', msg)
  end)
end)

describe('evaluation on_step values reach the loggers', function()
  it('at each dataloader\'s own batch count, across validations, restarted by validate (Lightning 1.9.5\'s steps)', function()
    local rows = {}
    local Lg = dpl.loggers.CSVLogger:extend('RecLogger')
    function Lg:log_metrics(m, step)
      for k in pairs(m) do
        local dl = k:match('^v_step/dataloader_idx_(%d)$')
        if dl then rows[#rows + 1] = dl .. '@' .. step end
      end
    end
    local M = dpl.LightningModule:extend('EvalSteps')
    function M:__init() dpl.LightningModule.__init(self); self.l = nn.Linear(4, 1) end
    function M:training_step(b) return F.mse_loss(self.l(b[1]), b[2]) end
    function M:validation_step(b, i, di)
      if not (di == 0 and i == 1) then self:log('v', i, { on_step = true, on_epoch = true }) end
    end
    function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.01 }) end
    local dir = os.tmpname(); os.remove(dir)
    local t = trainer({ max_epochs = 2, num_sanity_val_steps = 1, logger = Lg{ save_dir = dir } })
    local m = M()
    local vals = { loader(24, 8), loader(24, 12) }
    t:fit(m, loader(8, 4), vals)
    -- Lightning 1.9.5: dataloader 0 at 0, 1, 2 then 3, 4, 5, dataloader 1 at 0, 1 then 2, 3; its rows
    -- at 1 and 4 repeat batch 0's and 3's stale value (batch 1 logs nothing): dplhost writes no
    -- row for a batch that logged nothing, but the batch counts
    assert.same({ '0@0', '0@2', '1@0', '1@1', '0@3', '0@5', '1@2', '1@3' }, rows)
    rows = {}
    t:validate(m, vals, { verbose = false })
    assert.same({ '0@0', '0@2', '1@0', '1@1' }, rows)
    os.execute('rm -rf ' .. dir)
  end)
end)

describe('training further on the same trainer', function()
  it('trainer.fit_loop.max_epochs (and max_steps) raise the limits of the next fit, as in Lightning', function()
    local M = dpl.LightningModule:extend('Further')
    function M:__init() dpl.LightningModule.__init(self); self.l = nn.Linear(4, 1) end
    function M:training_step(b) return F.mse_loss(self.l(b[1]), b[2]) end
    function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
    local t, m, dl = trainer({ max_epochs = 2 }), M(), loader(16, 4)
    t:fit(m, dl)
    assert.equal(8, t.global_step)
    t:fit(m, dl) -- (Lightning: max_epochs=2 reached, nothing trained)
    assert.equal(8, t.global_step)
    assert.equal(2, t.fit_loop.max_epochs)
    t.fit_loop.max_epochs = 3
    t:fit(m, dl)
    assert.equal(12, t.global_step)
    assert.equal(3, t.current_epoch)
    t.fit_loop.max_epochs = 10
    t.fit_loop.max_steps = 14
    t:fit(m, dl)
    assert.equal(14, t.global_step)
    assert.has_error(function() t.fit_loop.max_epochs = 2.5 end)
  end)
end)
