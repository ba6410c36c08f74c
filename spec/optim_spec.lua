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
      for step, g in ipairs(ref.grads) do
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
