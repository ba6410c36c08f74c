-- Trainer features that need real tensors: gradient clipping (Trainer flag), gradient
-- norm tracking (log_grad_norm), self:log of tensors, DataLoader batches of tensors.
local ok_nn = pcall(function() local dpl = require 'dpl'; return dpl.nn.Linear and dpl.optim.SGD end)

local function model_class(extra)
  local dpl = require 'dpl'
  local nn, F = dpl.nn, dpl.nn.functional
  local M = dpl.LightningModule:extend('Real')
  function M:__init() dpl.LightningModule.__init(self); dpl.manual_seed(0); self.net = nn.Linear(4, 3) end
  function M:forward(x) return self.net(x) end
  function M:training_step(batch)
    local loss = F.cross_entropy(self(batch[1]), batch[2]) * 100
    self:log('loss', loss)
    return loss
  end
  function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
  for k, v in pairs(extra or {}) do M[k] = v end
  return M
end

local function grad_norm(m)
  local s = 0
  for _, p in ipairs(m:parameters()) do s = s + (p.grad * p.grad):sum():item() end
  return math.sqrt(s)
end

local function loader()
  local dpl = require 'dpl'
  dpl.manual_seed(1)
  local ds = dpl.data.TensorDataset(dpl.randn({ 8, 4 }), dpl.randint(1, 4, { 8 }))
  return dpl.data.DataLoader(ds, { batch_size = 4 })
end

local quiet = { enable_progress_bar = false, enable_model_summary = false, logger = false, enable_checkpointing = false }
local function T(o)
  local a = {}
  for k, v in pairs(quiet) do a[k] = v end
  for k, v in pairs(o) do a[k] = v end
  return require('dpl').Trainer(a)
end

describe('Trainer with real tensors', function()
  it('gradient_clip_val clips the gradient norm before the step', function()
    if not ok_nn then pending('dpl.nn / dpl.optim not available') return end
    local seen = {}
    local M = model_class({ optimizer_step = function(self, e, i, opt, idx, closure)
      opt:step(closure)
      seen[#seen + 1] = grad_norm(self)
    end })
    T({ max_steps = 2, gradient_clip_val = 0.5 }):fit(M(), loader())
    assert.equal(2, #seen)
    for _, n in ipairs(seen) do assert.is_true(math.abs(n - 0.5) < 1e-4, tostring(n)) end
    local seen2 = {}
    local M2 = model_class({ optimizer_step = function(self, e, i, opt, idx, closure)
      opt:step(closure)
      seen2[#seen2 + 1] = self.net.weight.grad:abs():max():item()
    end })
    T({ max_steps = 1, gradient_clip_val = 0.01, gradient_clip_algorithm = 'value' }):fit(M2(), loader())
    assert.is_true(seen2[1] <= 0.01 + 1e-7)
  end)

  it('track_grad_norm logs grad_2_norm/<name> and the total', function()
    if not ok_nn then pending('dpl.nn / dpl.optim not available') return end
    local t = T({ max_steps = 1, track_grad_norm = 2 })
    local m = model_class()()
    t:fit(m, loader())
    local cm = t.callback_metrics
    assert.truthy(cm['grad_2_norm/net.weight_step'])
    assert.truthy(cm['grad_2_norm/net.bias_step'])
    local w, b = cm['grad_2_norm/net.weight_step'], cm['grad_2_norm/net.bias_step']
    assert.is_true(math.abs(cm['grad_2_norm_total_step'] - math.sqrt(w * w + b * b)) < 1e-3)
    assert.is_number(cm.loss)
  end)
end)

describe('gradient mode', function()
  it('evaluation and predict run without gradient recording; fit trains with it', function()
    if not ok_nn then pending('dpl.nn / dpl.optim not available') return end
    local ag = require 'dpl.autograd'
    local modes = {}
    local M = model_class({
      validation_step = function(self, batch) modes.val = ag.is_grad_enabled() end,
      predict_step = function(self, batch) modes.predict = ag.is_grad_enabled(); return 1 end,
      on_train_batch_start = function() modes.train = ag.is_grad_enabled() end })
    local t = T({ max_steps = 1, limit_val_batches = 1, num_sanity_val_steps = 0, val_check_interval = 1 })
    local m = M()
    t:fit(m, loader(), loader())
    t:predict(m, loader())
    assert.same({ val = false, predict = false, train = true }, modes)
    assert.is_true(ag.is_grad_enabled())
  end)
end)

describe('precision=64', function()
  it('casts the module and the floating batches to float64', function()
    if not ok_nn then pending('dpl.nn / dpl.optim not available') return end
    local seen = {}
    local M = model_class({ training_step = function(self, batch)
      seen.x, seen.y, seen.w = batch[1].dtype, batch[2].dtype, self.net.weight.dtype
      return require('dpl').nn.functional.cross_entropy(self(batch[1]), batch[2])
    end })
    T({ max_steps = 1, precision = 64 }):fit(M(), loader())
    assert.same({ x = 'float64', y = 'int64', w = 'float64' }, seen)
  end)
end)

describe('precision="bf16-mixed" on the CPU', function()
  it('runs Linear in bfloat16 (float32 accumulation), the loss and the parameters in float32', function()
    if not ok_nn then pending('dpl.nn / dpl.optim not available') return end
    local dpl = require 'dpl'
    local seen = {}
    local M = model_class({ training_step = function(self, batch)
      local out = self(batch[1])
      local loss = dpl.nn.functional.cross_entropy(out, batch[2])
      seen.out, seen.loss, seen.w = out.dtype, loss.dtype, self.net.weight.dtype
      seen.autocast = dpl.amp.is_autocast_enabled()
      return loss
    end, validation_step = function(self, batch) seen.val = self(batch[1]).dtype end,
    on_after_backward = function(self) seen.grad = self.net.weight.grad.dtype end })
    local m = M()
    local w0 = m.net.weight:clone()
    local t = T({ max_steps = 2, precision = 'bf16-mixed', limit_val_batches = 1, num_sanity_val_steps = 0 })
    assert.is_true(t.use_amp)
    t:fit(m, loader(), loader())
    assert.same({ out = 'bfloat16', loss = 'float32', w = 'float32', grad = 'float32', autocast = true,
      val = 'bfloat16' }, seen)
    assert.is_false(dpl.amp.is_autocast_enabled()) -- off outside the steps
    assert.equal('float32', m.net.weight.dtype)
    assert.is_false(m.net.weight:eq(w0):all():item()) -- trained
    -- the same step in float32 gives nearly the same weights (bf16 has 8 bits of mantissa)
    local m32 = M()
    T({ max_steps = 2, limit_val_batches = 0 }):fit(m32, loader())
    assert.is_true((m.net.weight - m32.net.weight):abs():max():item() < 0.05)
    -- autocast by hand: conv too; float64 is left alone; errors restore the state
    dpl.amp.autocast('bfloat16', function()
      local c = dpl.nn.Conv2d(1, 2, 3)
      assert.equal('bfloat16', c(dpl.randn(1, 1, 5, 5)).dtype)
      assert.equal('bfloat16', dpl.nn.functional.linear(dpl.randn(2, 4), dpl.randn(3, 4)).dtype)
      assert.equal('float64', dpl.nn.Linear(4, 3, { dtype = 'float64' })(dpl.randn(2, 4):double()).dtype)
      assert.equal('float32', dpl.nn.functional.mse_loss(dpl.randn(3):bfloat16(), dpl.randn(3)).dtype)
    end)
    assert.has_error(function() dpl.amp.autocast('bfloat16', function() error('boom') end) end)
    assert.is_false(dpl.amp.is_autocast_enabled())
    assert.equal('float16', dpl.amp.autocast('float16', function() return dpl.nn.Linear(4, 3)(dpl.randn(2, 4)).dtype end))
    assert.is_false(dpl.amp.is_autocast_enabled())
    assert.has_error(function() dpl.amp.autocast('int8', function() end) end)
  end)
end)
