-- The fit loop's flags: accumulation, val_check_interval, check_val_every_n_epoch,
-- max_steps, min_epochs + should_stop, manual optimisation, lr scheduler
-- intervals, configure_optimizers forms, and resume == straight training.
local dpl = require 'dpl'
local th = require 'spec.support.trainer_helpers'
local data = require 'dpl.data'

local quiet = { enable_progress_bar = false, enable_model_summary = false, logger = false, enable_checkpointing = false }
local function T(o)
  local a = {}
  for k, v in pairs(quiet) do a[k] = v end
  for k, v in pairs(o or {}) do a[k] = v end
  return dpl.Trainer(a)
end

-- counts of hook calls by name
local function counting_model(counts, overrides)
  local calls = {}
  local Model = th.recording_model(calls, overrides)
  return Model, function()
    local c = {}
    for _, s in ipairs(calls) do
      local n = s:match('^([%w_%.]+)%(')
      c[n] = (c[n] or 0) + 1
    end
    return c, calls
  end
end

describe('fit loop', function()
  it('accumulate_grad_batches: zero_grad at window start, step every k and at the epoch end', function()
    local Model, get = counting_model()
    local t = T({ max_epochs = 1, limit_train_batches = 5, limit_val_batches = 0, accumulate_grad_batches = 2 })
    local m = Model()
    t:fit(m)
    local c, calls = get()
    assert.equal(5, c.training_step)
    assert.equal(3, c.optimizer_zero_grad) -- batches 0, 2, 4
    assert.equal(3, c.optimizer_step)       -- after 1, 3 and the last (4)
    assert.equal(3, t.global_step)
    assert.equal(3, t.fit_loop.batches_that_stepped)
    local steps = {}
    for _, s in ipairs(calls) do
      local i = s:match('^optimizer_step%(0, (%d+),')
      if i then steps[#steps + 1] = tonumber(i) end
    end
    assert.same({ 1, 3, 4 }, steps)
  end)

  it('the loss given to backward is divided by accumulate_grad_batches', function()
    local seen = {}
    local Model = th.recording_model({}, { on_before_backward = function(_, loss) seen[#seen + 1] = loss.value end,
      training_step = function(_, batch) return { loss = th.loss(batch[1]) } end })
    T({ max_epochs = 1, limit_train_batches = 2, limit_val_batches = 0, accumulate_grad_batches = 2 }):fit(Model())
    assert.same({ 0.5, 1 }, seen)
  end)

  it('val_check_interval as a fraction and as a number of batches', function()
    local function vals(o)
      local Model, get = counting_model()
      local a = { max_epochs = 1, limit_train_batches = 10, limit_val_batches = 1, num_sanity_val_steps = 0 }
      for k, v in pairs(o) do a[k] = v end
      T(a):fit(Model())
      return get().validation_step or 0
    end
    assert.equal(3, vals({ val_check_interval = 0.3 })) -- after batches 3, 6, 9; not 10
    assert.equal(2, vals({ val_check_interval = 5 }))
    assert.equal(1, vals({}))
    assert.equal(0, vals({ max_epochs = 1, check_val_every_n_epoch = 2 }))
    assert.equal(5, vals({ max_epochs = 2, val_check_interval = 4, check_val_every_n_epoch = false }))
    local ok, e = pcall(vals, { val_check_interval = 11 })
    assert.is_false(ok)
    assert.matches('must be less than or equal to the number of the training batches %(10%)', tostring(e))
  end)

  it('sanity check runs min(num_sanity_val_steps, batches) and its metrics do not leak', function()
    local Model, get = counting_model(nil, { validation_step = function(self, b, i) self:log('v', 1) return { x = 1 } end })
    local t = T({ max_epochs = 1, limit_train_batches = 0, limit_val_batches = 5, num_sanity_val_steps = 3 })
    t:fit(Model())
    assert.equal(3, get().validation_step)
    assert.is_nil(t.callback_metrics.v)
  end)

  it('limit fractions and errors', function()
    local Model, get = counting_model()
    T({ max_epochs = 1, limit_train_batches = 0.25, limit_val_batches = 0.5, num_sanity_val_steps = 0 }):fit(Model())
    local c = get()
    assert.equal(16, c.training_step)
    assert.equal(32, c.validation_step)
    local ok, e = pcall(function() T({ max_epochs = 1, limit_train_batches = 0.001 }):fit(Model()) end)
    assert.is_false(ok)
    assert.matches('You requested to check 0.001 of the `train_dataloader` but 0.001 %* 64 < 1', tostring(e))
  end)

  it('max_steps stops mid-epoch; min_epochs holds should_stop', function()
    local Model = th.recording_model({})
    local t = T({ max_steps = 3, limit_val_batches = 0 })
    t:fit(Model())
    assert.equal(3, t.global_step)
    assert.equal(1, t.current_epoch) -- the truncated epoch counts as completed (1.9)
    local Stopper = th.recording_model({}, { on_train_epoch_end = function(self) self.trainer.should_stop = true end })
    local t2 = T({ max_epochs = 10, min_epochs = 3, limit_train_batches = 2, limit_val_batches = 0 })
    t2:fit(Stopper())
    assert.equal(3, t2.current_epoch)
  end)

  it('should_stop set once before min_epochs/min_steps stays set; validation keeps its points (Lightning 1.9.5)', function()
    -- expectations from PyTorch Lightning 1.9.5 running the same loop (4 batches an epoch,
    -- val_check_interval=0.5, should_stop = True once, in epoch 0's first training_step)
    local function run(extra)
      local ev = {}
      local Model = th.recording_model({}, {
        training_step = function(self, batch, i)
          if self.current_epoch == 0 and i == 0 then self.trainer.should_stop = true end
          ev[#ev + 1] = ('T%d.%d'):format(self.current_epoch, i)
          return { loss = th.loss(1) }
        end,
        validation_step = function() ev[#ev + 1] = 'V' end })
      local a = { max_epochs = 6, limit_train_batches = 4, limit_val_batches = 1, num_sanity_val_steps = 0,
        val_check_interval = 0.5 }
      for k, v in pairs(extra) do a[k] = v end
      local t = T(a)
      t:fit(Model())
      return table.concat(ev, ' '), t
    end
    local ev, t = run({ min_epochs = 3 })
    assert.equal('T0.0 T0.1 V T0.2 T0.3 V T1.0 T1.1 V T1.2 T1.3 V T2.0 T2.1 V T2.2 T2.3 V', ev)
    assert.equal(3, t.current_epoch)
    assert.equal(12, t.global_step)
    assert.is_true(t.should_stop)
    -- min_steps: stops mid-epoch as soon as it is met, validating there
    ev, t = run({ min_steps = 5 })
    assert.equal('T0.0 T0.1 V T0.2 T0.3 V T1.0 V', ev)
    assert.equal(5, t.global_step)
    assert.equal(2, t.current_epoch)
    assert.is_true(t.should_stop)
  end)

  it('manual optimisation: the loop does not step; manual_backward runs the hooks', function()
    local calls = {}
    local Model = th.recording_model(calls, {
      training_step = function(self, batch)
        local opt = self:optimizers()
        opt:zero_grad()
        local loss = th.loss(batch[1])
        self:manual_backward(loss)
        opt:step()
        return { loss = loss }
      end })
    local M2 = Model:extend('Manual')
    function M2:__init() Model.__init(self); self.automatic_optimization = false end
    local t = T({ max_epochs = 1, limit_train_batches = 3, limit_val_batches = 0 })
    local m = M2()
    t:fit(m)
    assert.equal(3, t.global_step)
    local names = {}
    for _, s in ipairs(calls) do names[s:match('^([%w_]+)')] = true end
    assert.is_nil(names.optimizer_step)
    assert.is_nil(names.optimizer_zero_grad)
    assert.truthy(names.manual_backward)
    assert.truthy(names.on_before_optimizer_step)
    assert.equal(3, t.optimizers[1].steps)
  end)

  it('configure_optimizers forms and scheduler intervals', function()
    local O = require 'dpl.trainer.optimizers'
    local a, b = th.Optimizer(), th.Optimizer()
    local s = th.Scheduler(a)
    local opts, sch = O.parse(a)
    assert.same({ a }, opts); assert.same({}, sch)
    opts = O.parse({ a, b }); assert.same({ a, b }, opts)
    opts, sch = O.parse({ { a }, { s } })
    assert.same({ a }, opts); assert.equal(s, sch[1].scheduler); assert.equal('epoch', sch[1].interval)
    opts, sch = O.parse({ optimizer = a, lr_scheduler = { scheduler = s, interval = 'step', frequency = 2 } })
    assert.equal('step', sch[1].interval); assert.equal(2, sch[1].frequency)
    local ok, e = pcall(O.parse, { optimizer = a, lr_scheduler = { scheduler = s, interval = 'batch' } })
    assert.is_false(ok); assert.matches('"interval" key in lr scheduler dict must be "step" or "epoch"', tostring(e))
    ok, e = pcall(O.parse, { optimizer = a, lr_scheduler = { interval = 'step' } })
    assert.is_false(ok); assert.matches('must have the key "scheduler"', tostring(e))
    ok, e = pcall(O.parse, 42)
    assert.is_false(ok); assert.matches('Unknown configuration for model optimizers', tostring(e))
    -- step interval in a fit: stepped every 2 batches
    local n = 0
    local Model = th.recording_model({}, {
      configure_optimizers = function() local o = th.Optimizer(); return { optimizer = o, lr_scheduler = { scheduler = th.Scheduler(o), interval = 'step', frequency = 2 } } end,
      lr_scheduler_step = function() n = n + 1 end })
    T({ max_epochs = 1, limit_train_batches = 5, limit_val_batches = 0 }):fit(Model())
    assert.equal(2, n)
  end)

  it('a plateau scheduler whose metric is missing: strict raises, strict=false warns and skips the step', function()
    local n = 0
    local function model(strict)
      return th.recording_model({}, {
        configure_optimizers = function()
          local o = th.Optimizer()
          return { optimizer = o, lr_scheduler = { scheduler = th.Scheduler(o), reduce_on_plateau = true, monitor = 'nope',
            strict = strict } }
        end,
        lr_scheduler_step = function() n = n + 1 end })()
    end
    local ok, e = pcall(function() T({ max_epochs = 1, limit_train_batches = 2, limit_val_batches = 0 }):fit(model(true)) end)
    assert.is_false(ok)
    assert.matches('ReduceLROnPlateau conditioned on metric nope which is not available. Available metrics are', tostring(e))
    local err = io.stderr
    local lines = {}
    io.stderr = { write = function(_, ...) for _, v in ipairs({ ... }) do lines[#lines + 1] = tostring(v) end end, flush = function() end }
    local ok2, e2 = pcall(function() T({ max_epochs = 2, limit_train_batches = 2, limit_val_batches = 0 }):fit(model(false)) end)
    io.stderr = err
    assert.is_true(ok2, tostring(e2))
    assert.equal(0, n)
    local text = table.concat(lines)
    local _, count = text:gsub('ReduceLROnPlateau conditioned on metric nope which is not available but strict is set to `False`. Skipping learning rate update.', '')
    assert.equal(2, count) -- once per epoch
  end)

  it('two optimizers: training_step gets optimizer_idx, global_step counts both', function()
    local seen = {}
    local Model = th.recording_model({}, {
      configure_optimizers = function() return { th.Optimizer(), th.Optimizer() } end,
      training_step = function(_, batch, i, opt_idx) seen[#seen + 1] = opt_idx; return th.loss(1) end })
    local t = T({ max_epochs = 1, limit_train_batches = 2, limit_val_batches = 0 })
    t:fit(Model())
    assert.same({ 0, 1, 0, 1 }, seen)
    assert.equal(4, t.global_step)
  end)

  it('fit(ckpt_path) after 1 epoch gives the same weights as 2 epochs straight', function()
    -- a one-weight model: loss (w - x)^2 / 2 over shuffled data, plain SGD
    local Param = {}
    local Model = dpl.LightningModule:extend('Scalar')
    function Model:__init() dpl.LightningModule.__init(self); self.w, self.g = 0.25, 0 end
    function Model:training_step(batch)
      local m, x = self, batch[1]
      return setmetatable({ value = (m.w - x) ^ 2 / 2, backward = function() m.g = m.g + (m.w - x) end }, Param)
    end
    function Model:configure_optimizers()
      local m = self
      local Opt = th.Optimizer:extend('PlainSGD')
      function Opt:step() m.w = m.w - 0.01 * m.g; self.steps = self.steps + 1 end
      function Opt:zero_grad() m.g = 0 end
      return Opt(0.01)
    end
    function Model:state_dict() return { w = self.w } end
    function Model:load_state_dict(s) self.w = s.w end
    local function loader()
      return data.DataLoader(th.loader(7).dataset, { batch_size = 1, shuffle = true, seed = 3,
        collate_fn = function(items) return items end })
    end
    local dir = th.tmpdir()
    local straight = Model()
    T({ max_epochs = 2, deterministic = true }):fit(straight, loader())
    local first = Model()
    local t1 = T({ max_epochs = 1, enable_checkpointing = true, default_root_dir = dir })
    t1:fit(first, loader())
    local ck = t1.checkpoint_callback.best_model_path
    assert.truthy(ck:match('/checkpoints/epoch=0%-step=7%.ckpt$'))
    local resumed = Model()
    local t2 = T({ max_epochs = 2 })
    t2:fit(resumed, loader(), nil, { ckpt_path = ck })
    assert.equal(straight.w, resumed.w) -- bitwise
    assert.equal(14, t2.global_step)
    assert.equal(2, t2.current_epoch)
  end)

  it('a mid-epoch checkpoint resumes at the batch after the one it was written after (docs/trainer.md)', function()
    local seen = {}
    local Model = th.recording_model({}, { training_step = function(self, batch, i)
      seen[#seen + 1] = ('%d.%d:%d'):format(self.current_epoch, i, batch[1])
      return { loss = th.loss(batch[1]) }
    end })
    local function run(every, o)
      local dir = th.tmpdir()
      local a = { max_epochs = 2, limit_val_batches = 0, enable_checkpointing = true,
        callbacks = { dpl.callbacks.ModelCheckpoint{ dirpath = dir, every_n_train_steps = every, save_top_k = -1,
          filename = '{step}' } } }
      T(a):fit(Model(), th.loader(4))
      seen = {}
      local t = T(a)
      t:fit(Model(), th.loader(4), nil, { ckpt_path = ('%s/step=%d.ckpt'):format(dir, every) })
      os.execute('rm -rf ' .. dir)
      return t
    end
    -- written at step 5, after epoch 1's batch 0: batches 1..3 follow with their own data, the 8
    -- optimizer steps of a straight run (Lightning 1.9.5 trains batch 0 again: one step more)
    local t = run(5)
    assert.same({ '1.1:2', '1.2:3', '1.3:4' }, seen)
    assert.equal(8, t.global_step)
    t = run(6)
    assert.same({ '1.2:3', '1.3:4' }, seen)
    assert.equal(8, t.global_step)
    -- at step 4, after epoch 0's last batch (before its epoch end): epoch 1 follows
    t = run(4)
    assert.same({ '1.0:1', '1.1:2', '1.2:3', '1.3:4' }, seen)
    assert.equal(8, t.global_step)
  end)

  it('resumed at any step (accumulation, a step-interval scheduler, dropout) it ends with the weights of a straight run, bit for bit', function()
    local nn, F = dpl.nn, dpl.nn.functional
    local M = dpl.LightningModule:extend('MidResume')
    function M:__init()
      dpl.LightningModule.__init(self)
      dpl.manual_seed(0)
      self.net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Dropout(0.3), nn.Linear(6, 3))
    end
    function M:forward(x) return self.net(x) end
    function M:training_step(b) return F.cross_entropy(self(b[1]), b[2]) end
    function M:configure_optimizers()
      local opt = dpl.optim.SGD(self:parameters(), { lr = 0.1, momentum = 0.9 })
      return { optimizer = opt, lr_scheduler = { scheduler = dpl.optim.lr_scheduler.StepLR(opt, { step_size = 2, gamma = 0.5 }),
        interval = 'step' } }
    end
    dpl.manual_seed(1)
    local ds = data.TensorDataset(dpl.randn({ 40, 4 }), dpl.randint(1, 4, { 40 }))
    local function loader() return data.DataLoader(ds, { batch_size = 4, shuffle = true, seed = 5 }) end
    local dir = th.tmpdir()
    -- 10 batches an epoch, accumulating 3: steps after batches 2, 5, 8, 9
    local a = { max_epochs = 2, limit_val_batches = 0, enable_checkpointing = true, accumulate_grad_batches = 3,
      deterministic = true, callbacks = { dpl.callbacks.ModelCheckpoint{ dirpath = dir, every_n_train_steps = 1,
        save_top_k = -1, filename = '{step}' } } }
    local straight = M()
    T(a):fit(straight, loader())
    local want = th.flat_params(straight)
    for _, k in ipairs({ 1, 3, 4, 5, 7 }) do
      local m = M()
      dpl.manual_seed(99) -- (the resumed run's generator is not where the straight run's was)
      local t = T({ max_epochs = 2, limit_val_batches = 0, accumulate_grad_batches = 3, deterministic = true })
      t:fit(m, loader(), nil, { ckpt_path = ('%s/step=%d.ckpt'):format(dir, k) })
      assert.equal(8, t.global_step, 'from step ' .. k)
      assert.equal(want, th.flat_params(m), 'from step ' .. k)
    end
    os.execute('rm -rf ' .. dir)
  end)
end)

describe("checkpoints' random number generator states", function()
  local ck = require 'dpl.trainer.checkpoint'
  it('round-trip exactly, and are not restored from another number of ranks or a malformed entry', function()
    dpl.manual_seed(2 ^ 52 + 7)
    dpl.rand({ 5 })
    local list = ck.gather_rng_states()
    assert.equal(1, #list)
    local want = dpl.rand({ 3 }):tolist()
    local st = assert(ck.rng_state_for_rank(list))
    dpl.set_rng_state(st)
    assert.same(want, dpl.rand({ 3 }):tolist())
    local big = assert(ck.rng_state_for_rank({ '18446744073709551615:12345678901234567890' }))
    assert.equal('18446744073709551615ULL', tostring(big.seed))
    assert.equal('12345678901234567890ULL', tostring(big.offset))
    local none, why = ck.rng_state_for_rank({ '1:2', '3:4' })
    assert.is_nil(none)
    assert.matches('holds the random number generator states of 2 rank%(s%), this run has 1: they are not restored', why)
    none, why = ck.rng_state_for_rank({ '1:-2' })
    assert.is_nil(none)
    assert.matches([[state "1:%-2" is not 'seed:offset']], why)
    assert.is_nil((ck.rng_state_for_rank(nil)))
    assert.is_nil((ck.rng_state_for_rank({ '99999999999999999999999:1' })))
    assert.is_nil((ck.rng_state_for_rank({ '18446744073709551616:1' })))
  end)
end)

describe('reload_dataloaders_every_n_epochs', function()
  it('calls the dataloader hooks again every n epochs', function()
    local calls = {}
    local Model = th.recording_model(calls)
    T({ max_epochs = 4, limit_train_batches = 1, limit_val_batches = 1, num_sanity_val_steps = 0,
      reload_dataloaders_every_n_epochs = 2 }):fit(Model())
    local n, v = 0, 0
    for _, c in ipairs(calls) do
      if c == 'train_dataloader()' then n = n + 1 end
      if c == 'val_dataloader()' then v = v + 1 end
    end
    assert.equal(2, n) -- epochs 0 and 2
    assert.equal(2, v)
  end)
end)

describe('overfit_batches', function()
  it('limits train and val to the first n batches and turns shuffling off', function()
    local seen = {}
    local Model = th.recording_model({}, { training_step = function(_, batch) seen[#seen + 1] = batch[1]; return th.loss(1) end })
    local l = data.DataLoader(th.loader(20).dataset, { batch_size = 1, shuffle = true, seed = 1,
      collate_fn = function(items) return items end })
    T({ max_epochs = 2, overfit_batches = 3, num_sanity_val_steps = 0 }):fit(Model(), l)
    assert.same({ 1, 2, 3, 1, 2, 3 }, seen)
  end)
end)

describe('optimizer frequencies', function()
  it('alternate the active optimizer: {frequency=2}, {frequency=1}', function()
    local seen = {}
    local Model = th.recording_model({}, {
      configure_optimizers = function()
        return { { optimizer = th.Optimizer(), frequency = 2 }, { optimizer = th.Optimizer(), frequency = 1 } }
      end,
      training_step = function(_, batch, i, opt_idx) seen[#seen + 1] = opt_idx; return th.loss(1) end })
    local t = T({ max_epochs = 1, limit_train_batches = 6, limit_val_batches = 0 })
    t:fit(Model())
    assert.same({ 0, 0, 1, 0, 0, 1 }, seen)
    assert.equal(6, t.global_step)
  end)
end)

describe('a loader without a length', function()
  it('is iterated to its end; validation runs after its last batch', function()
    local Iter = {}
    Iter.__index = Iter
    function Iter:iter()
      local k = 0
      return function() k = k + 1; if k <= 5 then return { k } end end
    end
    local loader = setmetatable({}, Iter)
    local Model, get = counting_model()
    local t = T({ max_epochs = 2, limit_val_batches = 1, num_sanity_val_steps = 0 })
    t:fit(Model(), loader)
    local c = get()
    assert.equal(10, c.training_step)
    assert.equal(2, c.validation_step)
    assert.equal(10, t.global_step)
  end)
end)

describe('checkpoints of float64 models', function()
  it('load back as float64 tensors (resume and load_from_checkpoint), also mixed with number state', function()
    local th = require 'spec.support.trainer_helpers'
    local dir = th.tmpdir()
    local M = dpl.LightningModule:extend('F64Model')
    function M:__init() dpl.LightningModule.__init(self) dpl.manual_seed(0) self.l = dpl.nn.Linear(2, 1):double() end
    function M:training_step(b) return self.l(b[1]:double()):pow(2):mean() end
    function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1, momentum = 0.9 }) end
    local ds = dpl.data.TensorDataset(dpl.randn(8, 2))
    local function T(max_epochs, sub)
      return dpl.Trainer { default_root_dir = dir .. sub, max_epochs = max_epochs, logger = false,
        enable_progress_bar = false, enable_model_summary = false }
    end
    local t, m = T(1, '/a'), M()
    t:fit(m, dpl.data.DataLoader(ds, { batch_size = 4 }))
    local ck = t.checkpoint_callback.best_model_path
    local c = require('dpl.trainer.checkpoint').load(ck)
    assert.is_true(dpl.is_tensor(c.state_dict['l.weight']), 'state_dict entry: ' .. type(c.state_dict['l.weight']))
    assert.are.equal('float64', c.state_dict['l.weight'].dtype)
    assert.are.same(m.l.weight:totable(), c.state_dict['l.weight']:totable())
    local m2 = M:load_from_checkpoint(ck)
    assert.are.same(m.l.weight:totable(), m2.l.weight:totable())
    -- resume one more epoch = two epochs straight
    local t2, m3 = T(2, '/b'), M()
    t2:fit(m3, dpl.data.DataLoader(ds, { batch_size = 4 }), nil, { ckpt_path = ck })
    local t3, m4 = T(2, '/c'), M()
    t3:fit(m4, dpl.data.DataLoader(ds, { batch_size = 4 }))
    assert.are.same(m4.l.weight:totable(), m3.l.weight:totable())
  end)
end)

describe('save_hyperparameters without a table', function()
  it("takes the constructor's named arguments (Lightning's self.save_hyperparameters()), or those named, "
    .. 'and load_from_checkpoint builds the module from them', function()
    local th = require 'spec.support.trainer_helpers'
    local dir = th.tmpdir()
    local M = dpl.LightningModule:extend('HpModel')
    function M:__init(hidden, lr, tag)
      dpl.LightningModule.__init(self)
      self:save_hyperparameters()
      self.l = dpl.nn.Linear(2, hidden)
      self.lr = lr
    end
    function M:training_step(b) return self.l(b[1]):pow(2):mean() end
    function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = self.hparams.lr }) end
    local m = M(3, 0.05, 'x')
    assert.are.same({ hidden = 3, lr = 0.05, tag = 'x' }, m.hparams)
    local t = dpl.Trainer { default_root_dir = dir, max_epochs = 1, logger = false, enable_progress_bar = false,
      enable_model_summary = false }
    t:fit(m, dpl.data.DataLoader(dpl.data.TensorDataset(dpl.randn(8, 2)), { batch_size = 4 }))
    local m2 = M:load_from_checkpoint(t.checkpoint_callback.best_model_path)
    assert.are.same({ 3, 2 }, m2.l.weight:size())
    assert.are.equal(0.05, m2.lr)
    assert.are.same(m.l.weight:totable(), m2.l.weight:totable())

    local N = dpl.LightningModule:extend('HpNamed')
    function N:__init(hidden, lr, backbone) dpl.LightningModule.__init(self) self:save_hyperparameters('hidden', 'lr') end
    assert.are.same({ hidden = 4, lr = 0.1 }, N(4, 0.1, {}).hparams)
    local K = dpl.LightningModule:extend('HpIgnore')
    function K:__init(hidden, backbone) dpl.LightningModule.__init(self) self:save_hyperparameters(nil, { ignore = { 'backbone' } }) end
    assert.are.same({ hidden = 5 }, K(5, {}).hparams)
    local B = dpl.LightningModule:extend('HpBad')
    function B:__init(hidden) dpl.LightningModule.__init(self) self:save_hyperparameters('hiden') end
    local ok, e = pcall(B, 1)
    assert.is_false(ok)
    assert.matches("save_hyperparameters: 'hiden' is not an argument of the calling function", tostring(e), 1, true)
  end)
end)
