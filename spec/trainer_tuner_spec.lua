-- trainer_tuner_spec.lua: trainer.tuner:lr_find (dpl.tuner), Lightning 1.9's learning-rate range
-- test: the lr schedule it runs (exponential and linear), the smoothed losses and the early stop,
-- suggestion() (numpy.gradient's steepest decrease after skip_begin/skip_end), update_attr, the
-- weights and the user's Trainer left as they were, and the refused arguments; under
-- dplhost --nproc 2 with ddp.
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local errors = require 'dpl.errors'
local h = require 'spec.support.helpers'

local Tiny = dpl.LightningModule:extend('TunerTiny')
function Tiny:__init(lr) dpl.LightningModule.__init(self) self.lr = lr or 0.1 dpl.manual_seed(0) self.net = nn.Linear(8, 4) end
function Tiny:training_step(b) return F.cross_entropy(self.net(b[1]), b[2]) end
function Tiny:configure_optimizers() return dpl.optim.SGD(self:parameters(), self.lr) end
local function loader(n)
  local ds = dpl.datasets.SyntheticClassification { n = n or 1024, features = 8, classes = 4, seed = 2 }
  return dpl.data.DataLoader(ds, { batch_size = 16 })
end
local function trainer(o)
  local a = { max_epochs = 3, logger = false, enable_progress_bar = false, enable_model_summary = false,
    enable_checkpointing = false }
  for k, v in pairs(o or {}) do a[k] = v end
  return dpl.Trainer(a)
end
local function near(a, b) return math.abs(a - b) <= 1e-9 * math.max(1, math.abs(b)) end

describe('trainer.tuner:lr_find', function()
  it('raises the lr from min_lr to max_lr (exponential), records smoothed losses, restores the weights', function()
    local t, m = trainer(), Tiny(0.05)
    local w = m.net.weight:clone()
    local f = t.tuner:lr_find(m, loader(), { num_training = 30, min_lr = 1e-4, max_lr = 1, early_stop_threshold = false })
    assert.are.equal(30, #f.results.lr)
    assert.are.equal(30, #f.results.loss)
    -- Lightning's _ExponentialLR: base at the first step, then base * (max/min)^((e+1)/n)
    assert.is_true(near(f.results.lr[1], 1e-4))
    for e = 1, 29 do assert.is_true(near(f.results.lr[e + 1], 1e-4 * 1e4 ^ ((e + 1) / 30)), 'step ' .. e) end
    for _, v in ipairs(f.results.loss) do assert.is_true(v == v and v > 0) end
    assert.are.same(w:totable(), m.net.weight:totable())
    assert.are.equal(0.05, m.lr)
    assert.is_nil(rawget(m, 'trainer'))
    assert.are.equal(0, t.global_step)
    -- the user's trainer trains as usual afterwards
    t:fit(m, loader(64))
    assert.are.equal(12, t.global_step)
  end)

  it('linear mode; the early stop on a diverging loss; suggestion and update_attr', function()
    local f = trainer().tuner:lr_find(Tiny(), loader(), { num_training = 20, min_lr = 0.01, max_lr = 0.2, mode = 'linear',
      early_stop_threshold = false })
    for e = 1, 19 do assert.is_true(near(f.results.lr[e + 1], 0.01 + (e + 1) / 20 * (0.2 - 0.01)), 'step ' .. e) end
    -- a huge max_lr diverges: stopped before num_training
    local m = Tiny()
    local g = trainer().tuner:lr_find(m, loader(4096), { num_training = 200, min_lr = 1e-3, max_lr = 1e6 })
    assert.is_true(#g.results.loss < 200, #g.results.loss)
    -- suggestion: numpy.gradient over loss[skip_begin+1 .. n-skip_end], argmin, + skip_begin
    g.results = { lr = { 1, 2, 3, 4, 5, 6, 7 }, loss = { 9, 9, 5, 4, 1, 0.5, 7 } }
    -- skip 1 at each end: {9, 5, 4, 1, 0.5}, gradient {-4, -2.5, -2, -1.75, -0.5}: index 1 -> lr[2]
    assert.are.equal(2, g:suggestion(1, 1))
    -- skip_begin 2, skip_end 0: {5, 4, 1, 0.5, 7}: {-1, -2, -1.75, 3, 6.5} -> index 2 -> lr[4]
    assert.are.equal(4, g:suggestion(2, 0))
    assert.is_nil(g:suggestion(6, 1)) -- fewer than 2 points
    assert.are.equal(4, g:suggestion({ skip_begin = 2, skip_end = 0 })) -- an options table too
    assert.truthy(tostring(select(2, pcall(g.suggestion, g, 'x'))):find('skip_begin must be a non-negative integer', 1, true))
    assert.truthy(tostring(select(2, pcall(g.suggestion, g, { skip_bgin = 1 }))):find("did you mean 'skip_begin'", 1, true))
    local m2 = Tiny(0.3)
    local f2 = trainer().tuner:lr_find(m2, loader(), { num_training = 40, update_attr = true })
    assert.are.equal(f2:suggestion(), m2.lr)
    assert.are_not.equal(0.3, m2.lr)
  end)

  it('stops at the user\'s max_epochs, as Lightning 1.9.5 (which only sets max_steps)', function()
    -- Lightning 1.9.5, 10 batches an epoch, lr_find(num_training=30, early_stop_threshold=None):
    -- max_epochs=1 -> 10 points, max_epochs=2 -> 20, max_epochs=None (1000) -> 30
    for _, c in ipairs({ { 1, 5 }, { 2, 10 }, { false, 30 } }) do
      local t = trainer({ max_epochs = c[1] or nil })
      if not c[1] then t = dpl.Trainer{ logger = false, enable_progress_bar = false, enable_model_summary = false } end
      local f = t.tuner:lr_find(Tiny(), loader(80), { num_training = 30, early_stop_threshold = false })
      assert.are.equal(c[2], #f.results.lr, tostring(c[1]))
    end
  end)

  it('refuses what it cannot do, naming it', function()
    local function err(f) local ok, e = pcall(f) assert.is_false(ok) return e end
    local e = err(function() trainer().tuner:lr_find(Tiny(), loader(), { min_lr = 1, max_lr = 0.1 }) end)
    assert.truthy(tostring(e):find('expected 0 < min_lr < max_lr', 1, true), tostring(e))
    e = err(function() trainer().tuner:lr_find(Tiny(), loader(), { mode = 'cosine' }) end)
    assert.truthy(tostring(e):find("mode should be either 'linear' or 'exponential'", 1, true), tostring(e))
    e = err(function() trainer().tuner:lr_find(Tiny(), loader(), { num_trainig = 5 }) end)
    assert.truthy(tostring(e):find("did you mean 'num_training'", 1, true), tostring(e))
    local NoLr = Tiny:extend('NoLr')
    function NoLr:__init() Tiny.__init(self) self.lr = nil end
    function NoLr:configure_optimizers() return dpl.optim.SGD(self:parameters(), 0.1) end
    e = err(function() trainer().tuner:lr_find(NoLr(), loader(), { update_attr = true }) end)
    assert.truthy(tostring(e):find("('lr', 'learning_rate')", 1, true), tostring(e))
    local Two = Tiny:extend('Two')
    function Two:configure_optimizers()
      return { dpl.optim.SGD(self:parameters(), 0.1), dpl.optim.SGD(self:parameters(), 0.1) }
    end
    e = err(function() trainer().tuner:lr_find(Two(), loader()) end)
    assert.truthy(tostring(e):find('only works with a single optimizer', 1, true), tostring(e))
    e = err(function() trainer({ strategy = 'ddp_spawn', accelerator = 'cpu', devices = 2 }).tuner:lr_find(Tiny(), loader()) end)
    assert.is_true(errors.is(e, errors.NotImplementedError), tostring(e))
    assert.is_nil(trainer({ fast_dev_run = true }).tuner:lr_find(Tiny(), loader()))
    assert.truthy(tostring(err(function() dpl.tuner.LRFinder('exponential', 1, 2, 3):plot() end)):find('NotImplementedError'))
  end)

  it('under dplhost --nproc 2 with ddp: every rank takes rank 0\'s records (the same lr), then fits', function()
    local out, err, rc = h.dplhost('--nproc 2 spec/support/tuner_ddp_script.lua', { timeout = 120 })
    assert.equal(0, rc, err)
    local a = out:match('%[rank 0%] rank 0 lr (%S+) steps 64')
    local b = out:match('%[rank 1%] rank 1 lr (%S+) steps 64')
    assert.truthy(a, out)
    assert.are.equal(a, b)
  end)
end)

describe('the tuner\'s own Trainers', function()
  it('do not print the device summary again (Lightning prints it once, for the user\'s Trainer)', function()
    local log = require 'dpl.log'
    local t = trainer()
    local said, info = {}, log.info
    log.info = function(f, ...) said[#said + 1] = f:format(...) end
    local ok, e = pcall(t.tuner.lr_find, t.tuner, Tiny(0.05), loader(), { num_training = 5, early_stop_threshold = false })
    log.info = info
    assert(ok, e)
    for _, line in ipairs(said) do
      assert.is_falsy(line:find('GPU available', 1, true), line)
      assert.is_falsy(line:find('TPU available', 1, true), line)
    end
  end)
end)
