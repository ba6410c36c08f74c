-- optim_sched_spec.lua: lr schedulers beyond one schedule on one group, against PyTorch 1.13
-- (spec/fixtures/optim_ref.lua's scenarios, from gen_optim_ref.py): several schedulers on one
-- optimizer (the chainable forms), a hand-set lr, ReduceLROnPlateau after a warmup, groups
-- added after the scheduler, SequentialLR, ChainedScheduler, step(epoch) (closed forms); each
-- scenario again saved and resumed halfway (state dicts through the checkpoint's JSON) gives
-- the same lrs; the Trainer resumes a scheduled run bitwise; the option checks.
local dpl = require 'dpl'
local optim = dpl.optim
local S = optim.lr_scheduler
local ckpt = require 'dpl.trainer.checkpoint'
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/optim_ref.lua')

-- the lambdas of gen_optim_ref.py's LAMBDAS
local LAMBDAS = {
  mul095 = function() return 0.95 end,
  inv = function(e) return 1 / (e + 1) end,
  half_at_3 = function(e) return e == 3 and 0.5 or 1 end,
}

local function near(e, g) return math.abs(e - g) <= 1e-12 * (1 + math.abs(e)) end

local function assert_lrs(expected, got, what)
  assert.are.equal(#expected, #got, what .. ': number of groups')
  for i = 1, #expected do
    assert.is_true(near(expected[i], got[i]), ('%s, group %d: expected %.17g, got %.17g'):format(what, i,
      expected[i], got[i]))
  end
end

-- the scenario's optimizer, schedulers and wrapper, built as gen_optim_ref.py's scenario()
local function build(sc)
  local groups = {}
  for i, lr in ipairs(sc.groups) do groups[i] = { params = { dpl.zeros(1):requires_grad_() }, lr = lr } end
  local opt = optim.SGD(groups, { lr = 1, momentum = 0.9 })
  local scheds = {}
  for i, s in ipairs(sc.scheds) do
    local o = {}
    for k, v in pairs(s[2]) do o[k] = v end
    if type(o.lr_lambda) == 'string' then o.lr_lambda = LAMBDAS[o.lr_lambda]
    elseif type(o.lr_lambda) == 'table' then
      local l = {}
      for j, n in ipairs(o.lr_lambda) do l[j] = LAMBDAS[n] end
      o.lr_lambda = l
    end
    scheds[i] = S[s[1]](opt, o)
  end
  local top
  if sc.wrap and sc.wrap.kind == 'SequentialLR' then
    top = S.SequentialLR(opt, { schedulers = scheds, milestones = sc.wrap.milestones })
  elseif sc.wrap then
    top = S.ChainedScheduler(scheds)
  end
  return opt, scheds, top
end

local function lrs_of(opt, key)
  local r = {}
  for i, g in ipairs(opt.param_groups) do r[i] = g[key or 'lr'] end
  return r
end

-- runs the scenario, checking every step; resume_at: after that step, everything is saved,
-- built anew and loaded (the scheduler state dicts through the checkpoint JSON)
local function play(sc, resume_at)
  local opt, scheds, top = build(sc)
  assert_lrs(sc.lrs[1], lrs_of(opt), 'after construction')
  local last
  for k = 1, sc.steps do
    for _, ev in ipairs(sc.events or {}) do
      if ev.at == k and ev.kind == 'set_lr' then opt.param_groups[ev.group].lr = ev.value
      elseif ev.at == k and ev.kind == 'add_group' then
        opt:add_param_group({ params = { dpl.zeros(1):requires_grad_() }, lr = ev.lr })
      end
    end
    opt:step()
    if top then
      top:step()
      last = top:get_last_lr()
    else
      for _, s in ipairs(scheds) do
        if getmetatable(s) == S.ReduceLROnPlateau then s:step(sc.metrics[k])
        elseif sc.epochs then s:step(sc.epochs[k])
        else s:step() end
        last = s:get_last_lr()
      end
    end
    assert_lrs(sc.lrs[k + 1], lrs_of(opt), 'lr after step ' .. k)
    assert_lrs(sc.momentum[k + 1], lrs_of(opt, 'momentum'), 'momentum after step ' .. k)
    if k == resume_at then
      local osd = opt:state_dict()
      local ssd = {}
      for i, s in ipairs(top and { top } or scheds) do ssd[i] = ckpt.json_decode(ckpt.json_encode(s:state_dict())) end
      opt, scheds, top = build(sc)
      opt:load_state_dict(osd)
      for i, s in ipairs(top and { top } or scheds) do s:load_state_dict(ssd[i]) end
      assert_lrs(sc.lrs[k + 1], lrs_of(opt), 'lr after resuming at step ' .. k)
    end
  end
  assert_lrs(sc.last, last, 'get_last_lr()')
end

describe('lr scheduler scenarios match PyTorch 1.13', function()
  local names = {}
  for name in pairs(ref.scenarios) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local sc = ref.scenarios[name]
    it(name, function() play(sc) end)
    if not sc.events then
      it(name .. ', saved and resumed halfway', function() play(sc, math.floor(sc.steps / 2)) end)
    end
  end

  it('the tester\'s chain: StepLR(2, 0.5) + ExponentialLR(0.9) multiply the current lr', function()
    local opt = optim.SGD({ dpl.zeros(1):requires_grad_() }, { lr = 1 })
    local s1, s2 = S.StepLR(opt, { step_size = 2, gamma = 0.5 }), S.ExponentialLR(opt, { gamma = 0.9 })
    local got = {}
    for k = 1, 3 do s1:step(); s2:step(); got[k] = opt.param_groups[1].lr end
    assert_lrs({ 0.9, 0.405, 0.3645 }, got, 'chain') -- was 0.9 0.81 0.729
  end)

  it('add_param_group after the scheduler: the next step goes on (was a raw arithmetic error)', function()
    local a, b = dpl.zeros(1):requires_grad_(), dpl.zeros(1):requires_grad_()
    local opt = optim.SGD({ a }, { lr = 1 })
    local s = S.StepLR(opt, { step_size = 1, gamma = 0.5 })
    opt:add_param_group({ params = { b }, lr = 0.1 })
    s:step()
    assert_lrs({ 0.5, 0.05 }, s:get_last_lr(), 'get_last_lr')
    assert.is_nil(opt.param_groups[2].initial_lr) -- PyTorch 1.13 does not set it either
  end)

  it('a LinearLR with total_iters = 0 keeps start_factor (was NaN)', function()
    local opt = optim.SGD({ dpl.zeros(1):requires_grad_() }, { lr = 1 })
    local s = S.LinearLR(opt, { start_factor = 0.5, total_iters = 0 })
    for _ = 1, 3 do s:step() end
    assert.are.equal(0.5, opt.param_groups[1].lr)
    s:step(0) -- the closed form too (PyTorch divides by zero there)
    assert.are.equal(0.5, opt.param_groups[1].lr)
  end)

  it('a SequentialLR\'s state dict holds its schedulers\' (and nothing shared)', function()
    local opt = optim.SGD({ dpl.zeros(1):requires_grad_() }, { lr = 1 })
    local a, b = S.ConstantLR(opt, { factor = 0.5, total_iters = 2 }), S.ExponentialLR(opt, { gamma = 0.5 })
    local s = S.SequentialLR(opt, { schedulers = { a, b }, milestones = { 3 } })
    local sd = s:state_dict()
    assert.is_nil(sd.optimizer)
    assert.are.equal(2, #sd._schedulers)
    assert.are.equal(a.last_epoch, sd._schedulers[1].last_epoch)
    sd._milestones[1] = 99
    assert.are.equal(3, s._milestones[1])
    assert.has_error(function() s:load_state_dict({ _schedulers = { {} } }) end)
  end)
end)

describe('lr scheduler options: clear errors naming the option', function()
  local function opt1() return optim.SGD({ dpl.zeros(1):requires_grad_() }, { lr = 1 }) end
  local function errs(f, pat)
    local ok, e = pcall(f)
    assert.is_false(ok, 'no error, expected ' .. pat)
    local s = tostring(e)
    assert.is_nil(s:find('%.lua:%d+'), 'a raw Lua error: ' .. s)
    assert.is_nil(s:find('attempt to'), 'a raw Lua error: ' .. s)
    assert.truthy(s:find(pat, 1, true), ('expected %q in %q'):format(pat, s))
  end

  it('wrong types and values (were raw Lua errors or silently accepted)', function()
    errs(function() S.StepLR(opt1(), { step_size = 1, gamma = 'x' }) end, "StepLR: gamma must be a number, got 'x'")
    errs(function() S.StepLR(opt1(), { step_size = 0 }) end, 'StepLR: step_size must be a positive integer')
    errs(function() S.MultiStepLR(opt1(), { milestones = { 'a' } }) end, "MultiStepLR: milestones[1] must be an integer")
    errs(function() S.MultiStepLR(opt1(), { milestones = 3 }) end, 'MultiStepLR: milestones must be a list')
    errs(function() S.CosineAnnealingLR(opt1(), { T_max = 3, eta_min = 'x' }) end,
      "CosineAnnealingLR: eta_min must be a number, got 'x'")
    errs(function() S.ExponentialLR(opt1(), { gamma = {} }) end, 'ExponentialLR: gamma must be a number')
    errs(function() S.LambdaLR(opt1(), { lr_lambda = function() end }) end,
      'LambdaLR: lr_lambda returned nil for epoch 0; it must return a number')
    local two = optim.SGD({ { params = { dpl.zeros(1):requires_grad_() } }, { params = { dpl.zeros(1):requires_grad_() } } },
      { lr = 1 })
    errs(function() S.LambdaLR(two, { lr_lambda = { function() return 1 end } }) end,
      'LambdaLR: expected 2 lr_lambdas (one per param group), got 1')
    errs(function() S.MultiplicativeLR(two, { lr_lambda = { function() return 1 end, 3 } }) end,
      'MultiplicativeLR: lr_lambda[2] must be a function')
    local m = S.MultiplicativeLR(opt1(), function(e) return e < 2 and 1 or 'x' end)
    m:step()
    errs(function() m:step() end, "MultiplicativeLR: lr_lambda returned 'x' for epoch 2")
    errs(function() S.LinearLR(opt1(), { start_factor = 0 }) end, 'LinearLR: start_factor must be in (0, 1]')
    errs(function() S.LinearLR(opt1(), { end_factor = 2 }) end, 'LinearLR: end_factor must be in [0, 1]')
    errs(function() S.LinearLR(opt1(), { total_iters = -1 }) end, 'LinearLR: total_iters must be a non-negative integer')
    errs(function() S.ConstantLR(opt1(), { factor = 1.5 }) end, 'ConstantLR: factor must be in (0, 1]')
    errs(function() S.PolynomialLR(opt1(), { power = 'x' }) end, 'PolynomialLR: power must be a number')
    errs(function() S.OneCycleLR(opt1(), { max_lr = 1, total_steps = 10, anneal_strategy = 'foo' }) end,
      "OneCycleLR: anneal_strategy must be 'cos' or 'linear', got 'foo'")
    errs(function() S.OneCycleLR(opt1(), { max_lr = { 1, 2 }, total_steps = 10 }) end,
      'OneCycleLR: expected 1 values for max_lr, got 2')
    errs(function() S.OneCycleLR(opt1(), { max_lr = 1, total_steps = 2.5 }) end, 'OneCycleLR: total_steps must be a positive integer')
    errs(function() S.OneCycleLR(opt1(), { max_lr = 1, total_steps = 10, pct_start = 2 }) end,
      'OneCycleLR: pct_start must be a number in [0, 1]')
    errs(function() S.ReduceLROnPlateau(opt1(), { threshold_mode = 'foo' }) end,
      "ReduceLROnPlateau: threshold_mode must be 'rel' or 'abs', got 'foo'")
    errs(function() S.ReduceLROnPlateau(opt1(), { mode = 'avg' }) end, "ReduceLROnPlateau: mode must be 'min' or 'max'")
    errs(function() S.ReduceLROnPlateau(opt1(), { factor = 1 }) end, 'ReduceLROnPlateau: factor should be < 1.0')
    errs(function() S.ReduceLROnPlateau(opt1(), { min_lr = { 0, 0 } }) end, 'expected 1 values for min_lr, got 2')
    errs(function() S.CyclicLR(opt1(), { base_lr = 0.1, max_lr = 1, mode = 'sine' }) end, "CyclicLR: mode must be")
    errs(function() S.CyclicLR(optim.Adam({ dpl.zeros(1):requires_grad_() }), { base_lr = 0.1, max_lr = 1 }) end,
      'CyclicLR: the optimizer must support momentum')
    errs(function() S.CosineAnnealingWarmRestarts(opt1(), { T_0 = 0 }) end, 'CosineAnnealingWarmRestarts: T_0 must be a positive integer')
    errs(function() S.StepLR(opt1(), { step_size = 1, last_epoch = 'x' }) end, 'StepLR: last_epoch must be an integer')
    errs(function() S.StepLR(opt1(), { step_size = 1 }):load_state_dict(5) end, 'StepLR: load_state_dict expects a table')
  end)

  it('SequentialLR and ChainedScheduler check their schedulers', function()
    local o = opt1()
    local a, b = S.ConstantLR(o), S.ExponentialLR(o, { gamma = 0.9 })
    errs(function() S.SequentialLR(o, { schedulers = { a, b }, milestones = {} }) end,
      'SequentialLR: expected one milestone fewer than schedulers, got 2 schedulers and 0 milestones')
    errs(function() S.SequentialLR(opt1(), { schedulers = { a, b }, milestones = { 2 } }) end,
      'SequentialLR: all the schedulers must belong to the optimizer given')
    errs(function() S.ChainedScheduler({ a, S.ExponentialLR(opt1(), { gamma = 0.9 }) }) end,
      'ChainedScheduler: all the schedulers must belong to one optimizer')
    errs(function() S.ChainedScheduler({ a, S.ReduceLROnPlateau(o) }) end, 'ChainedScheduler: schedulers[2] is a ReduceLROnPlateau')
    errs(function() S.ChainedScheduler({}) end, 'ChainedScheduler: schedulers must be a non-empty list')
    errs(function() S.SequentialLR(o, { schedulers = { a, 3 }, milestones = { 1 } }) end,
      'SequentialLR: schedulers[2] is not an lr scheduler')
  end)

  it('a OneCycleLR stepped past its total, and one whose group was added later', function()
    local o = opt1()
    local s = S.OneCycleLR(o, { max_lr = 1, total_steps = 2 })
    s:step(); s:step()
    errs(function() s:step() end, 'OneCycleLR: tried to step 4 times; the total number of steps is 2')
    local o2 = opt1()
    local s2 = S.OneCycleLR(o2, { max_lr = 1, total_steps = 5 })
    o2:add_param_group({ params = { dpl.zeros(1):requires_grad_() } })
    errs(function() s2:step() end, 'OneCycleLR: param_groups[2] has no max_lr')
  end)
end)

describe("PyTorch's positional forms of optimizers and schedulers", function()
  local function p1() return { dpl.zeros(2):requires_grad_() } end
  -- the lrs of n steps of a scheduler
  local function lrs(s, n)
    local r = {}
    for i = 1, n do s.optimizer:step() s:step() r[i] = s:get_last_lr()[1] end
    return r
  end
  it('give the same optimizer and schedule as the options table', function()
    local a, b = optim.SGD(p1(), 0.1, 0.9, 0, 1e-4, true), optim.SGD(p1(), { lr = 0.1, momentum = 0.9, weight_decay = 1e-4, nesterov = true })
    for _, k in ipairs({ 'lr', 'momentum', 'dampening', 'weight_decay', 'nesterov' }) do
      assert.are.equal(b.param_groups[1][k], a.param_groups[1][k], k)
    end
    assert.are.same({ 0.8, 0.9 }, optim.Adam(p1(), 0.01, { 0.8, 0.9 }).param_groups[1].betas)
    assert.are.equal(0.5, optim.RMSprop(p1(), 0.01, 0.5).param_groups[1].alpha)
    assert.are.equal(0.9, optim.SGD(p1(), 0.1, { momentum = 0.9 }).param_groups[1].momentum)
    local cases = {
      { function(o) return S.StepLR(o, 2, 0.5) end, function(o) return S.StepLR(o, { step_size = 2, gamma = 0.5 }) end },
      { function(o) return S.StepLR(o, 2, { gamma = 0.5 }) end, function(o) return S.StepLR(o, { step_size = 2, gamma = 0.5 }) end },
      { function(o) return S.MultiStepLR(o, { 1, 3 }, 0.1) end, function(o) return S.MultiStepLR(o, { milestones = { 1, 3 }, gamma = 0.1 }) end },
      { function(o) return S.CosineAnnealingLR(o, 5, 0.01) end, function(o) return S.CosineAnnealingLR(o, { T_max = 5, eta_min = 0.01 }) end },
      { function(o) return S.LambdaLR(o, function(e) return 1 / (e + 1) end) end,
        function(o) return S.LambdaLR(o, { lr_lambda = function(e) return 1 / (e + 1) end }) end },
      { function(o) return S.OneCycleLR(o, 1.0, 10) end, function(o) return S.OneCycleLR(o, { max_lr = 1.0, total_steps = 10 }) end },
      { function(o) return S.LinearLR(o, 0.5, 1, 3) end, function(o) return S.LinearLR(o, { start_factor = 0.5, end_factor = 1, total_iters = 3 }) end },
    }
    for i, c in ipairs(cases) do
      local x, y = c[1](optim.SGD(p1(), 0.1, 0.9)), c[2](optim.SGD(p1(), 0.1, 0.9))
      assert.are.same(lrs(y, 6), lrs(x, 6), 'case ' .. i)
    end
    local o = optim.SGD(p1(), 0.1)
    local q = S.SequentialLR(o, { S.ConstantLR(o, 0.5, 2), S.ExponentialLR(o, 0.9) }, { 2 })
    assert.are.equal(2, #q._schedulers)
    assert.are.equal('max', S.ReduceLROnPlateau(optim.SGD(p1(), 0.1), 'max', 0.5).mode)
  end)
  it('too many values, or a value given twice, are errors naming the function', function()
    local ok, e = pcall(optim.SGD, p1(), 0.1, { lr = 0.2 })
    assert.is_false(ok)
    assert.truthy(tostring(e):find("SGD: got two values for 'lr'", 1, true), tostring(e))
    ok, e = pcall(S.StepLR, optim.SGD(p1(), 0.1), 1, 0.5, -1, 7)
    assert.is_false(ok)
    assert.truthy(tostring(e):find('StepLR: takes at most 3 positional values (step_size, gamma, last_epoch)', 1, true),
      tostring(e))
    ok, e = pcall(S.StepLR, optim.SGD(p1(), 0.1), 'x')
    assert.is_false(ok)
    assert.truthy(tostring(e):find('StepLR: step_size must be a positive integer', 1, true), tostring(e))
    -- a string lr (a positional slip) is shown as a string, not as the number it reads like
    ok, e = pcall(optim.SGD, p1(), '0.1')
    assert.is_false(ok)
    assert.truthy(tostring(e):find("SGD: lr must be a non-negative number, got '0.1'", 1, true), tostring(e))
  end)
end)

describe('the Trainer resumes a scheduled run', function()
  it('1 epoch + resume gives the lrs and weights of 2 epochs straight, bitwise', function()
    local h = require 'spec.support.helpers'
    local th = require 'spec.support.trainer_helpers'
    local out, err, rc = h.dplhost('spec/support/optim_sched_resume_script.lua ' .. h.q(th.tmpdir()), { timeout = 60 })
    assert.are.equal(0, rc, err)
    local a, b = out:match('straight ([^\n]+)'), out:match('resumed  ([^\n]+)')
    assert.truthy(a, out .. err)
    assert.are.equal(a, b)
    assert.truthy(out:match('lrs changed'), out) -- the schedules did move the lr
    -- PyTorch 1.13's lrs for these schedules (SequentialLR stepped per batch, ExponentialLR per
    -- epoch, 5 batches an epoch)
    local torch_lrs = '0.020000000000000004 0.046666666666666669 0.073333333333333334 0.10000000000000001 '
      .. '0.096232036859308701 0.059851249968113869 0.048666993770787099 0.03547426406871193 '
      .. '0.022281534366636765 0.011097278169309988'
    assert.are.equal(torch_lrs, a:match('lrs (.*)$'))
  end)
end)
