-- optim_swa_spec.lua: dpl.optim.swa_utils (AveragedModel, SWALR, update_bn) against
-- torch.optim.swa_utils 1.13. The expected values were printed by /usr/bin/python3 (torch
-- 1.13, float64) running the same scenarios (the script is in the comment of each test);
-- they are literals here.
local dpl = require 'dpl'
local nn = dpl.nn
local optim = dpl.optim
local swa = optim.swa_utils

local H = require 'spec.support.helpers'
local function near(e, g, tol) return H.rel_near(e, g, tol or 1e-12) end
local function assert_near_list(expected, got, what, tol) return H.assert_near_list(expected, got, what, tol or 1e-12) end
local function F64(x) return dpl.tensor(x, { dtype = 'float64' }) end

describe('SWALR', function()
  -- torch: SGD([{params:[p1], lr:0.1}, {params:[p2], lr:0.2}]); s = SWALR(o, swa_lr=..., anneal_epochs=...,
  -- anneal_strategy=...); the groups' lrs after construction and after each of 4 o.step(); s.step()
  local cases = {
    { 'cos', 3, 0.05, { { 0.1, 0.2 }, { 0.0875, 0.1625 }, { 0.0625, 0.0875 }, { 0.05, 0.05 }, { 0.05, 0.05 } } },
    { 'linear', 2, { 0.01, 0.02 }, { { 0.1, 0.2 }, { 0.055, 0.11 }, { 0.01, 0.02 }, { 0.01, 0.02 }, { 0.01, 0.02 } } },
    { 'cos', 0, 0.05, { { 0.05, 0.05 }, { 0.05, 0.05 }, { 0.05, 0.05 }, { 0.05, 0.05 }, { 0.05, 0.05 } } },
  }
  for _, c in ipairs(cases) do
    it(('anneals as torch 1.13 (%s, anneal_epochs=%d)'):format(c[1], c[2]), function()
      local o = optim.SGD({ { params = { dpl.zeros(1):requires_grad_() }, lr = 0.1 },
        { params = { dpl.zeros(1):requires_grad_() }, lr = 0.2 } }, { lr = 0.1 })
      local s = swa.SWALR(o, { swa_lr = c[3], anneal_epochs = c[2], anneal_strategy = c[1] })
      local function lrs() return { o.param_groups[1].lr, o.param_groups[2].lr } end
      assert_near_list(c[4][1], lrs(), 'after construction')
      for k = 1, 4 do
        o:step(); s:step()
        assert_near_list(c[4][k + 1], lrs(), 'after step ' .. k)
      end
    end)
  end

  it('takes the positional form and resumes from its state dict', function()
    local o = optim.SGD({ dpl.zeros(1):requires_grad_() }, { lr = 0.1 })
    local s = swa.SWALR(o, 0.05, 3, 'cos')
    s:step()
    local sd = s:state_dict()
    assert.equal('cos', sd.anneal_strategy)
    local o2 = optim.SGD({ dpl.zeros(1):requires_grad_() }, { lr = 0.1 })
    local s2 = swa.SWALR(o2, 0.05, 3, 'cos')
    s2:load_state_dict(sd)
    o2.param_groups[1].lr = o.param_groups[1].lr
    s:step(); s2:step()
    assert.is_true(near(0.0625, o.param_groups[1].lr))
    assert.is_true(near(o.param_groups[1].lr, o2.param_groups[1].lr))
  end)

  it('rejects bad options with torch\'s messages', function()
    local function opt() return optim.SGD({ dpl.zeros(1):requires_grad_() }, { lr = 0.1 }) end
    local function err(f) local ok, e = pcall(f); assert.is_false(ok); return tostring(e) end
    assert.equal("ValueError: anneal_strategy must by one of 'cos' or 'linear', instead got exp",
      err(function() swa.SWALR(opt(), { swa_lr = 0.1, anneal_strategy = 'exp' }) end))
    assert.equal('ValueError: anneal_epochs must be equal or greater than 0, got -1',
      err(function() swa.SWALR(opt(), { swa_lr = 0.1, anneal_epochs = -1 }) end))
    assert.equal('ValueError: swa_lr must have the same length as optimizer.param_groups: swa_lr has 2, optimizer.param_groups has 1',
      err(function() swa.SWALR(opt(), { swa_lr = { 0.1, 0.2 } }) end))
    assert.matches('swa_lr is required', err(function() swa.SWALR(opt(), {}) end))
    assert.matches('unknown', err(function() swa.SWALR(opt(), { swa_lr = 0.1, anneal_epoch = 2 }) end))
  end)
end)

describe('AveragedModel', function()
  it('averages parameters equally, or with avg_fn (torch 1.13 values)', function()
    -- torch: lin = Linear(2, 1), weight [[1, 2]], bias 3; avg = AveragedModel(lin); 3 times:
    -- weight *= 2, bias += 1, avg.update_parameters(lin) -> weight [[4.666..., 9.333...]], bias [5], n 3;
    -- then ema = AveragedModel(lin, avg_fn=lambda a, p, n: 0.5*a + 0.5*p); 3 times weight += 1,
    -- ema.update_parameters(lin) -> weight [[10.25, 18.25]]
    local lin = nn.Linear(2, 1, { dtype = 'float64' })
    dpl.no_grad(function() lin.weight:copy_(F64({ { 1, 2 } })); lin.bias:fill_(3) end)
    local avg = swa.AveragedModel(lin)
    for _ = 1, 3 do
      dpl.no_grad(function() lin.weight:mul_(2); lin.bias:add_(1) end)
      avg:update_parameters(lin)
    end
    assert_near_list({ 4.666666666666667, 9.333333333333334 }, avg.module.weight:view(-1):totable(), 'avg weight')
    assert_near_list({ 5 }, avg.module.bias:totable(), 'avg bias')
    assert.equal(3, avg.n_averaged:item())
    -- a copy: the model's own parameters are untouched, the copy's are parameters
    assert.is_true(near(8, lin.weight:view(-1):totable()[1]))
    assert.equal(2, #avg:parameters())
    local ema = swa.AveragedModel(lin, { avg_fn = function(a, p, n) return a * 0.5 + p * 0.5 end })
    for _ = 1, 3 do
      dpl.no_grad(function() lin.weight:add_(1) end)
      ema:update_parameters(lin)
    end
    assert_near_list({ 10.25, 18.25 }, ema.module.weight:view(-1):totable(), 'ema weight')
    -- forward goes to the copy
    local y = avg(F64({ { 1, 1 } }))
    assert.is_true(near(4.666666666666667 + 9.333333333333334 + 5, y:item()))
  end)

  it('checks its arguments', function()
    assert.has_error(function() swa.AveragedModel(42) end)
    assert.has_error(function() swa.AveragedModel(nn.Linear(1, 1), { avg_fn = 3 }) end)
    assert.has_error(function() swa.AveragedModel(nn.Linear(1, 1), { avg_fnn = print }) end)
  end)
end)

describe('update_bn', function()
  it('recomputes BatchNorm statistics as a cumulative average (torch 1.13 values)', function()
    -- torch: Sequential(Linear(2, 2) weight [[1, .5], [-1, 2]] bias 0, BatchNorm1d(2)), eval mode;
    -- update_bn over [(X[0:2],), (X[2:4],), (X[4:6],)] -> running_mean [1.9583333333333335,
    -- 0.33333333333333337], running_var [5.677083333333334, 13.333333333333334],
    -- num_batches_tracked 3, momentum 0.1 again, training False again
    local m = nn.Sequential(nn.Linear(2, 2, { dtype = 'float64' }), nn.BatchNorm1d(2, { dtype = 'float64' }))
    local lin, bn = m:children()[1], m:children()[2]
    dpl.no_grad(function() lin.weight:copy_(F64({ { 1, 0.5 }, { -1, 2 } })); lin.bias:fill_(0) end)
    local X = F64({ { 1, 2 }, { 3, -1 }, { 0, 1 }, { 2, 2 }, { -1, 0.5 }, { 4, 1 } })
    local loader = { { X:narrow(1, 1, 2) }, { X:narrow(1, 3, 2) }, { X:narrow(1, 5, 2) } }
    m:eval()
    swa.update_bn(loader, m)
    assert_near_list({ 1.9583333333333335, 0.33333333333333337 }, bn.running_mean:totable(), 'running_mean')
    assert_near_list({ 5.677083333333334, 13.333333333333334 }, bn.running_var:totable(), 'running_var')
    assert.equal(3, bn.num_batches_tracked:item())
    assert.equal(0.1, bn.momentum)
    assert.is_false(m.training)
    -- a DataLoader works too, and a model without BatchNorm is left alone
    local dl = dpl.data.DataLoader(dpl.data.TensorDataset(X), { batch_size = 2 })
    swa.update_bn(dl, m)
    assert_near_list({ 1.9583333333333335, 0.33333333333333337 }, bn.running_mean:totable(), 'running_mean (loader)')
    swa.update_bn(loader, nn.Linear(2, 2, { dtype = 'float64' }))
    assert.has_error(function() swa.update_bn(loader, 'x') end)
  end)
end)
