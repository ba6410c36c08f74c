-- optim_spec.lua: optimizer update math and scheduler lr sequences against numbers
-- computed by Debian's python3-torch (spec/fixtures/optim_ref.lua, from gen_optim_ref.py),
-- param groups, zero_grad, state dicts (training resumes exactly) and bad input.
local dpl = require 'dpl'
local optim = dpl.optim
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/optim_ref.lua')

local function close(expected, t, tol)
  local got = t:totable()
  for i = 1, #expected do
    for j = 1, #expected[i] do
      local e, g = expected[i][j], got[i][j]
      if math.abs(e - g) > (tol or 1e-10) * (1 + math.abs(e)) then
        error(('element [%d][%d]: expected %.12g, got %.12g'):format(i, j, e, g), 2)
      end
    end
  end
end

describe('optim update math matches PyTorch', function()
  for name, case in pairs(ref.optim) do
    it(name, function()
      local p = dpl.tensor(ref.p0, { dtype = 'float64' }):requires_grad_()
      local opt = optim[case.class]({ p }, case.opts)
      for step, g in ipairs(case.long and ref.grads_long or ref.grads) do
        p.grad = dpl.tensor(g, { dtype = 'float64' })
        opt:step()
        close(case.params[step], p)
      end
    end)
  end
end)

describe('lr_scheduler sequences match PyTorch', function()
  for name, case in pairs(ref.sched) do
    it(name, function()
      local p = dpl.zeros(1):requires_grad_()
      local opt = optim.SGD({ p }, { lr = 0.1, momentum = 0.9 })
      local s = optim.lr_scheduler[case.class](opt, case.opts)
      local lrs, moms = { opt.param_groups[1].lr }, { opt.param_groups[1].momentum }
      for i = 1, case.steps do
        if case.metrics then s:step(case.metrics[i]) else s:step() end
        lrs[#lrs + 1] = opt.param_groups[1].lr
        moms[#moms + 1] = opt.param_groups[1].momentum
      end
      for i = 1, #case.lrs do
        assert.is_true(math.abs(lrs[i] - case.lrs[i]) < 1e-12, ('lr %d: expected %.15g, got %.15g'):format(i,
          case.lrs[i], lrs[i]))
        assert.is_true(math.abs(moms[i] - case.momentum[i]) < 1e-12, ('momentum %d'):format(i))
      end
    end)
  end

  it('LambdaLR and get_last_lr; state_dict restores the position', function()
    local p = dpl.zeros(1):requires_grad_()
    local opt = optim.SGD({ p }, { lr = 1 })
    local s = optim.lr_scheduler.LambdaLR(opt, { lr_lambda = function(e) return 1 / (e + 1) end })
    s:step(); s:step()
    assert.are.same({ 1 / 3 }, s:get_last_lr())
    local st = s:state_dict()
    local opt2 = optim.SGD({ p }, { lr = 1 })
    local s2 = optim.lr_scheduler.StepLR(opt2, { step_size = 2, gamma = 0.5 })
    local opt3 = optim.SGD({ p }, { lr = 1 })
    local s3 = optim.lr_scheduler.StepLR(opt3, { step_size = 2, gamma = 0.5 })
    for _ = 1, 3 do s2:step() end
    -- the schedules are chainable (the next lr comes from the group's): the optimizer's state
    -- (its lrs) is restored with the scheduler's, as in PyTorch
    opt3:load_state_dict(opt2:state_dict())
    s3:load_state_dict(s2:state_dict())
    s2:step(); s3:step()
    assert.are.equal(s2:get_last_lr()[1], s3:get_last_lr()[1])
    assert.are.equal(2, st.last_epoch)
  end)
end)

describe('optimizers', function()
  it('take a module, param groups with their own options, and zero_grad', function()
    local nn = dpl.nn
    local m = nn.Linear(3, 2)
    local opt = optim.SGD({ { params = { m.weight }, lr = 0.5 }, { params = { m.bias } } }, { lr = 0.1 })
    assert.are.equal(0.5, opt.param_groups[1].lr)
    assert.are.equal(0.1, opt.param_groups[2].lr)
    local b0 = m.bias:clone()
    m.weight.grad = dpl.ones(2, 3)
    m.bias.grad = dpl.ones(2)
    opt:step()
    assert.is_true(((m.bias - (b0 - 0.1)):abs():max():item()) < 1e-6)
    opt:zero_grad({ set_to_none = false })
    assert.are.equal(0, m.weight.grad:abs():sum():item())
    opt:zero_grad()
    assert.is_nil(m.weight.grad)
    local o2 = optim.Adam(m, { lr = 1e-3 })
    assert.are.equal(2, #o2.param_groups[1].params)
  end)

  it('state_dict/load_state_dict resume training exactly', function()
    local function run(steps, resume_at)
      dpl.manual_seed(3)
      local p = dpl.randn(4, { dtype = 'float64' }):requires_grad_()
      local opt = optim.Adam({ p }, { lr = 0.1 })
      for i = 1, steps do
        if i == resume_at then
          local sd = opt:state_dict()
          local q = p:detach():clone():requires_grad_()
          opt = optim.Adam({ q }, { lr = 0.5 })
          opt:load_state_dict(sd)
          p = q
        end
        p.grad = (p * p):detach() * 0.1 + i
        opt:step()
      end
      return p
    end
    local a, b = run(6), run(6, 4)
    assert.are.same(a:totable(), b:totable())
  end)

  it('reject bad options with clear errors', function()
    local p = dpl.zeros(2):requires_grad_()
    assert.has_error(function() optim.SGD({ p }) end, 'MisconfigurationException: SGD: lr is required')
    assert.has_error(function() optim.SGD({}, { lr = 0.1 }) end)
    assert.has_error(function() optim.SGD({ p }, { lr = 0.1, nesterov = true }) end)
    local ok, e = pcall(optim.Adam, { p }, { betas = { 1.5, 0.9 } })
    assert.is_false(ok)
    assert.truthy(tostring(e):find('beta parameter at index 1'))
    local y = p * 2
    ok, e = pcall(optim.SGD, { y }, { lr = 1 })
    assert.truthy(tostring(e):find('non%-leaf'))
  end)
end)

describe('optimizer options and state dicts: clear errors naming the option', function()
  local function errs(f, pat)
    local ok, e = pcall(f)
    assert.is_false(ok, 'no error, expected ' .. pat)
    local s = tostring(e)
    assert.is_nil(s:find('%.lua:%d+'), 'a raw Lua error: ' .. s)
    assert.is_nil(s:find('attempt to'), 'a raw Lua error: ' .. s)
    assert.is_nil(s:find('cannot convert'), 'a raw Lua error: ' .. s)
    assert.truthy(s:find(pat, 1, true), ('expected %q in %q'):format(pat, s))
  end

  it('constructor options and param groups (were raw errors from the step or accepted)', function()
    local p = dpl.zeros(2):requires_grad_()
    errs(function() optim.Adam({ p }, { betas = 0.9 }) end, 'MisconfigurationException: Adam: betas must be a pair {beta1, beta2}, got 0.9')
    errs(function()
      local o = optim.Adam({ { params = { p }, betas = { 0.9, 'x' } } })
      p.grad = dpl.ones(2); o:step()
    end, "Adam: param_groups[1].betas must be a pair {beta1, beta2} of numbers in [0, 1), got {0.9, 'x'}")
    errs(function()
      local o = optim.SGD({ { params = { p }, momentum = 'x' } }, { lr = 0.1 })
      p.grad = dpl.ones(2); o:step()
    end, "SGD: param_groups[1].momentum must be a non-negative number, got 'x'")
    errs(function() optim.SGD({ p }, { lr = 0.1, momentum = 0.9, nesterov = 1 }) end, 'SGD: param_groups[1].nesterov must be true or false')
    errs(function() optim.RMSprop({ p }, { eps = -1 }) end, 'RMSprop: invalid eps value: -1')
    errs(function() optim.RMSprop({ p }, { weight_decay = -1 }) end, 'RMSprop: invalid weight_decay value: -1')
    errs(function() optim.Adagrad({ p }, { lr_decay = -1 }) end, 'Adagrad: invalid lr_decay value: -1')
    errs(function() optim.Adagrad({ p }, { initial_accumulator_value = -1 }) end,
      'Adagrad: invalid initial_accumulator_value value: -1')
    errs(function() optim.Adamax({ p }, { betas = { 1, 0.9 } }) end, 'Adamax: invalid beta parameter at index 1 value: 1')
    errs(function() optim.NAdam({ p }, { momentum_decay = -1 }) end, 'NAdam: invalid momentum_decay value: -1')
    errs(function() optim.RAdam({ p }, { eps = 'x' }) end, "RAdam: invalid eps value: 'x'")
    errs(function() optim.NAdam({ p }, { maximize = true }) end, "NAdam: unknown option 'maximize'")
    -- a value set by hand in a group is checked at the step
    local o = optim.SGD({ p }, { lr = 0.1, momentum = 0.9 })
    o.param_groups[1].momentum = 'x'
    p.grad = dpl.ones(2)
    errs(function() o:step() end, "SGD: param_groups[1].momentum must be a non-negative number, got 'x'")
  end)

  it('a malformed state dict is rejected before anything changes', function()
    local p = dpl.zeros(2):requires_grad_()
    local o = optim.SGD({ p }, { lr = 1, momentum = 0.9 })
    errs(function() o:load_state_dict(nil) end, 'load_state_dict: expected {state=, param_groups=}')
    errs(function() o:load_state_dict({ param_groups = { { params = { 1 }, lr = 1 } }, state = { [1] = 5 } }) end,
      'load_state_dict: the state of parameter 1 (param_groups[1].params[1]) must be a table, got number')
    errs(function() o:load_state_dict({ param_groups = { 5 }, state = {} }) end,
      'load_state_dict: param_groups[1] must be a table with params = {...}, got number')
    errs(function() o:load_state_dict({ param_groups = { { lr = 1 } }, state = {} }) end,
      'load_state_dict: param_groups[1] must be a table with params = {...}, got no params list')
    errs(function() o:load_state_dict({ param_groups = { { params = { 1 }, lr = 0.5 } }, state = 5 }) end,
      'load_state_dict: state must be a table')
    errs(function() o:load_state_dict({ param_groups = { { params = { 1 }, lr = 0.5, momentum = 'x' } }, state = {} }) end,
      "SGD: param_groups[1].momentum must be a non-negative number, got 'x'")
    assert.are.equal(1, o.param_groups[1].lr) -- untouched
    assert.are.equal(0.9, o.param_groups[1].momentum)
  end)

  it('zero_grad{set_to_none=false} zeroes the gradients in place (was new tensors)', function()
    local p = dpl.ones(3):requires_grad_()
    local o = optim.SGD({ p }, { lr = 0.1 })
    p.grad = dpl.ones(3) * 2
    local g = p.grad
    o:zero_grad({ set_to_none = false })
    assert.are.equal(g, p.grad)
    assert.are.same({ 0, 0, 0 }, g:totable())
    o:zero_grad(false) -- a boolean, as Module:zero_grad
    assert.are.equal(g, p.grad)
    o:zero_grad()
    assert.is_nil(p.grad)
  end)

  it('Adagrad makes its state in the constructor (as PyTorch) and for groups added later', function()
    local a, b = dpl.ones(2):requires_grad_(), dpl.ones(2):requires_grad_()
    local o = optim.Adagrad({ a }, { lr = 0.1, initial_accumulator_value = 0.5 })
    local sd = o:state_dict()
    assert.are.equal(0, sd.state[1].step)
    assert.are.same({ 0.5, 0.5 }, sd.state[1].sum:totable())
    o:add_param_group({ params = { b } })
    a.grad, b.grad = dpl.ones(2), dpl.ones(2)
    o:step()
    assert.are.equal(1, o.state[b].step)
    assert.is_true(math.abs(b:totable()[1] - (1 - 0.1 / math.sqrt(1.5))) < 1e-6, tostring(b)) -- sum 0.5 + 1
  end)
end)
