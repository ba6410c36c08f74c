-- examples_ports_findings_spec.lua: what porting Lightning 1.9 projects (the autoencoder, GAN
-- and CNN-with-metrics examples) to dplhost found; each case is what a Lightning user writes,
-- with the behaviour of Lightning 1.9.5 / torch 1.13 / torchmetrics 0.11.
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

describe('configure_optimizers returning several values (Lightning\'s tuple)', function()
  it('`return opt_g, opt_d` in manual optimization: two optimizers, no scheduler', function()
    -- was: "configure_optimizers: <the second optimizer> is not an lr scheduler"
    local seen
    local M = dpl.LightningModule:extend('TupleOpts')
    function M:__init()
      dpl.LightningModule.__init(self)
      self.automatic_optimization = false
      self.g = nn.Linear(4, 1); self.d = nn.Linear(4, 1)
    end
    function M:training_step(b)
      local opts = self:optimizers()
      seen = #opts
      for i, net in ipairs({ self.g, self.d }) do
        local loss = F.mse_loss(net(b[1]), b[2])
        opts[i]:zero_grad(); self:manual_backward(loss); opts[i]:step()
      end
    end
    function M:configure_optimizers()
      return dpl.optim.Adam(self.g:parameters(), { lr = 1e-3 }), dpl.optim.Adam(self.d:parameters(), { lr = 1e-3 })
    end
    local t = trainer()
    t:fit(M(), loader(8, 4))
    assert.equal(2, seen)
    assert.equal(2, #t.optimizers)
    assert.equal(0, #t.lr_scheduler_configs)
    assert.equal(4, t.global_step) -- 2 batches x 2 optimizer steps, as Lightning counts them
  end)

  it('three optimizers, or dicts with `optimizer`, in automatic optimization', function()
    local idx = {}
    local M = dpl.LightningModule:extend('TupleOpts3')
    function M:__init()
      dpl.LightningModule.__init(self)
      self.a = nn.Linear(4, 1); self.b = nn.Linear(4, 1); self.c = nn.Linear(4, 1)
    end
    function M:training_step(b, i, opt_idx)
      idx[#idx + 1] = opt_idx
      return F.mse_loss(({ self.a, self.b, self.c })[opt_idx + 1](b[1]), b[2])
    end
    function M:configure_optimizers()
      local S = dpl.optim.SGD
      return S(self.a:parameters(), { lr = 0.1 }), S(self.b:parameters(), { lr = 0.1 }), S(self.c:parameters(), { lr = 0.1 })
    end
    local t = trainer()
    t:fit(M(), loader(4, 4))
    assert.same({ 0, 1, 2 }, idx)

    local D = M:extend('TupleDicts')
    function D:configure_optimizers()
      local S = dpl.optim.SGD
      local sa = S(self.a:parameters(), { lr = 0.1 })
      return { optimizer = sa, lr_scheduler = dpl.optim.lr_scheduler.StepLR(sa, { step_size = 1 }) },
        { optimizer = S(self.b:parameters(), { lr = 0.1 }) }, { optimizer = S(self.c:parameters(), { lr = 0.1 }) }
    end
    idx = {}
    local t2 = trainer()
    t2:fit(D(), loader(4, 4))
    assert.same({ 0, 1, 2 }, idx)
    assert.equal(1, #t2.lr_scheduler_configs)
  end)

  it('the two-lists form is unchanged: `return {opt}, {sched}`, and `return opt, sched`', function()
    local M = dpl.LightningModule:extend('ListsOpts')
    function M:__init() dpl.LightningModule.__init(self); self.a = nn.Linear(4, 1) end
    function M:training_step(b) return F.mse_loss(self.a(b[1]), b[2]) end
    function M:configure_optimizers()
      local o = dpl.optim.SGD(self.a:parameters(), { lr = 0.1 })
      return o, dpl.optim.lr_scheduler.StepLR(o, { step_size = 1 })
    end
    local t = trainer()
    t:fit(M(), loader(4, 4))
    assert.equal(1, #t.optimizers)
    assert.equal(1, #t.lr_scheduler_configs)
  end)
end)

describe('self:log_dict(MetricCollection) (Lightning 1.9: each metric under its prefixed name)', function()
  it('logs every metric object of the collection; epoch values are compute() over the epoch', function()
    -- was: "self:log(_metrics): the value must be a number or a tensor"
    local tm = dpl.metrics
    local M = dpl.LightningModule:extend('CollLog')
    function M:__init()
      dpl.LightningModule.__init(self)
      self.net = nn.Linear(4, 3)
      local mc = { task = 'multiclass', num_classes = 3 }
      self.test_metrics = tm.MetricCollection({ acc = tm.Accuracy(mc), f1 = tm.F1Score(mc) }, { prefix = 'test_' })
    end
    function M:test_step(b)
      self.test_metrics:update(self.net(b[1]):argmax(2), b[2])
      self:log_dict(self.test_metrics)
    end
    dpl.manual_seed(1)
    local x, y = dpl.randn(12, 4), dpl.randint(1, 4, { 12 })
    local m = M()
    local ref = tm.Accuracy({ task = 'multiclass', num_classes = 3 })
    ref:update(dpl.no_grad(function() return m.net(x) end):argmax(2), y)
    local r = trainer():test(m, dpl.data.DataLoader(dpl.data.TensorDataset(x, y), { batch_size = 4 }), { verbose = false })
    assert.same({ 'test_acc', 'test_f1' }, (function()
      local k = {}
      for name in pairs(r[1]) do k[#k + 1] = name end
      table.sort(k)
      return k
    end)())
    assert.near(ref:compute():item(), r[1].test_acc, 1e-6)
    assert.near(r[1].test_acc, r[1].test_f1, 1e-6) -- micro F1 is micro accuracy
  end)

  it('MetricCollection:items() iterates (prefixed name, metric) in the collection\'s order', function()
    local tm = dpl.metrics
    local mc = tm.MetricCollection({ tm.MeanMetric(), tm.SumMetric() }, { prefix = 'p_', postfix = '_s' })
    local names = {}
    for k, m in mc:items() do names[#names + 1] = k; assert.is_true(m.__is_metric) end
    assert.same({ 'p_MeanMetric_s', 'p_SumMetric_s' }, names)
  end)
end)

describe('F.binary_cross_entropy at probabilities 0 and 1 (a saturated sigmoid)', function()
  it('gives torch 1.13\'s finite gradient, not NaN', function()
    -- torch 1.13: loss 67.4427, grad [-2.5e11, 2.5e11, -0.5, -2.5e11], target grad [inf, -inf, 0, 17.2694]
    local p = dpl.tensor({ 0, 1, 0.5, 1e-30 }):requires_grad_()
    local y = dpl.tensor({ 1, 0, 1, 1 }, { dtype = 'float32' }):requires_grad_()
    local loss = F.binary_cross_entropy(p, y)
    loss:backward()
    assert.near(67.4427, loss:item(), 1e-3)
    local g, gy = p.grad, y.grad
    assert.near(-2.5e11, g[1]:item(), 1e4)
    assert.near(2.5e11, g[2]:item(), 1e4)
    assert.near(-0.5, g[3]:item(), 1e-6)
    assert.near(-2.5e11, g[4]:item(), 1e4)
    assert.equal(math.huge, gy[1]:item())
    assert.equal(-math.huge, gy[2]:item())
    assert.near(17.2694, gy[4]:item(), 1e-3)
  end)

  it('a discriminator whose sigmoid saturates still trains (finite parameters)', function()
    local d = nn.Sequential(nn.Linear(2, 1), nn.Sigmoid())
    dpl.no_grad(function() d[1].weight:fill_(100); d[1].bias:fill_(0) end)
    local x = dpl.tensor({ { 1, 1 }, { -1, -1 } }, { dtype = 'float32' })
    local y = dpl.tensor({ { 0 }, { 1 } }, { dtype = 'float32' }) -- both wrong, both saturated
    local loss = nn.BCELoss()(d(x), y)
    loss:backward()
    assert.near(100, loss:item(), 1e-3)
    for _, p in ipairs(d:parameters()) do
      assert.is_false(p.grad:isnan():any():item(), tostring(p.grad))
    end
  end)
end)
