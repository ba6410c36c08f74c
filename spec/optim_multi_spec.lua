-- optim_multi_spec.lua: the multi-tensor optimizer entry points on the CPU
-- (dpl_sgd_step_multi / dpl_adam_step_multi, reached with foreach = true) give
-- bitwise the per-tensor Lua path's parameters and states (float32, float64; every
-- option; parameters without a gradient at some step; empty and chunk-spanning
-- tensors), the state dict is the same, groups that do not qualify fall back, and
-- the C entry points reject bad arguments.
local dpl = require 'dpl'
local ffi = require 'ffi'
local capi = require 'dpl.capi'
local optim = dpl.optim
local C = capi.C

local shapes = { { 5, 7 }, { 3 }, { 40000 }, { 0, 4 }, { 2, 3, 4 } }

local function train(dt, cls, opts, foreach, steps)
  dpl.manual_seed(11)
  local ps = {}
  for i, s in ipairs(shapes) do ps[i] = dpl.randn(unpack(s)):to(dt):requires_grad_() end
  local o = { foreach = foreach }
  for k, v in pairs(opts) do o[k] = v end
  local opt = optim[cls](ps, o)
  for step = 1, steps or 5 do
    for i, p in ipairs(ps) do p.grad = dpl.randn(unpack(shapes[i])):to(dt) end
    if step == 2 then ps[2].grad = nil end -- no gradient: no update, no state change
    if step == 3 then ps[5].grad = nil end -- its state starts a step later
    opt:step()
  end
  return ps, opt
end

local function bitwise(a, b, what)
  assert.are.same(a:size(), b:size(), what)
  assert.are.equal(a.dtype, b.dtype, what)
  if a:numel() == 0 then return end
  local same = a:eq(b):logical_or(a:isnan():logical_and(b:isnan())):all():item()
  assert.is_true(same, what .. ': differs, max |a - b| = ' .. tostring((a - b):abs():max():item()))
end

local configs = {
  { 'SGD', { lr = 0.1 } },
  { 'SGD', { lr = 0.1, momentum = 0.9 } },
  { 'SGD', { lr = 0.05, momentum = 0.8, dampening = 0.3, weight_decay = 0.01, maximize = true } },
  { 'SGD', { lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 0.1 } },
  { 'SGD', { lr = 0.1, weight_decay = 1 } },
  { 'Adam', { lr = 0.01 } },
  { 'Adam', { lr = 0.01, betas = { 0.8, 0.95 }, eps = 1e-6, weight_decay = 0.1, amsgrad = true, maximize = true } },
  { 'AdamW', { lr = 0.01 } },
  { 'AdamW', { lr = 0.02, weight_decay = 0.3, amsgrad = true } },
}

describe('multi-tensor optimizer steps on the CPU (foreach = true)', function()
  for _, dt in ipairs({ 'float32', 'float64' }) do
    for ci, c in ipairs(configs) do
      it(('%s #%d %s: bitwise the per-tensor path, states and state dict too'):format(c[1], ci, dt), function()
        local n0 = optim._multi_steps
        local a, oa = train(dt, c[1], c[2], false)
        assert.are.equal(n0, optim._multi_steps)
        local b, ob = train(dt, c[1], c[2], true)
        assert.are.equal(n0 + 5, optim._multi_steps) -- every step took the multi-tensor path
        for i = 1, #a do bitwise(a[i], b[i], 'param ' .. i) end
        local sa, sb = oa:state_dict(), ob:state_dict()
        assert.are.same(sa.param_groups, sb.param_groups)
        for i = 1, #shapes do
          local x, y = sa.state[i], sb.state[i]
          assert.are.equal(x == nil, y == nil, 'state ' .. i)
          if x then
            for k, v in pairs(x) do
              if dpl.is_tensor(v) then bitwise(v, y[k], ('state %d %s'):format(i, k))
              else assert.are.equal(v, y[k], ('state %d %s'):format(i, k)) end
            end
            for k in pairs(y) do assert.is_not_nil(x[k], ('state %d has %s only on the multi-tensor path'):format(i, k)) end
          end
        end
      end)
    end
  end

  it('really takes the multi-tensor path (a float16 group falls back; a mixed group too)', function()
    local n0 = optim._multi_steps
    -- float16: not a multi-tensor dtype, yet foreach = true trains as before
    local p = dpl.randn(4):half():requires_grad_()
    local q = p:detach():clone():requires_grad_()
    local o1 = optim.SGD({ p }, { lr = 0.1, momentum = 0.9, foreach = true })
    local o2 = optim.SGD({ q }, { lr = 0.1, momentum = 0.9, foreach = false })
    for _ = 1, 3 do
      local g = dpl.randn(4):half()
      p.grad, q.grad = g, g:clone()
      o1:step()
      o2:step()
    end
    bitwise(p, q, 'float16')
    -- mixed float32 / float64 group: falls back to the per-tensor path
    local x, y = dpl.randn(3):requires_grad_(), dpl.randn(3):double():requires_grad_()
    local opt = optim.Adam({ x, y }, { foreach = true })
    x.grad, y.grad = dpl.ones(3), dpl.ones(3):double()
    opt:step()
    assert.are.equal(1, opt.state[x].step)
    assert.are.equal(n0, optim._multi_steps)
    -- without foreach (nil), CPU tensors take the multi-tensor path too; false keeps them per tensor
    local z = dpl.zeros(3):requires_grad_()
    local oz = optim.SGD({ z }, { lr = 0.5, momentum = 0.9 })
    z.grad = dpl.ones(3)
    oz:step()
    assert.are.equal(n0 + 1, optim._multi_steps)
    local z2 = dpl.zeros(3):requires_grad_()
    local oz2 = optim.SGD({ z2 }, { lr = 0.5, momentum = 0.9, foreach = false })
    z2.grad = dpl.ones(3)
    oz2:step()
    assert.are.equal(n0 + 1, optim._multi_steps)
    assert.are.same(z:totable(), z2:totable())
    -- the C entry point itself runs (and counts nothing in Lua): step sizes land as computed
    local p1 = dpl.zeros(3):requires_grad_()
    local opt2 = optim.SGD({ p1 }, { lr = 0.5, foreach = true })
    p1.grad = dpl.ones(3)
    opt2:step()
    assert.are.same({ -0.5, -0.5, -0.5 }, p1:totable())
    assert.are.equal(n0 + 2, optim._multi_steps)
  end)

  it('checks foreach', function()
    assert.has_error(function() optim.SGD({ dpl.zeros(2):requires_grad_() }, { lr = 1, foreach = 'yes' }) end)
    assert.has_error(function() optim.Adam({ dpl.zeros(2):requires_grad_() }, { foreach = 1 }) end)
  end)
end)

describe('dpl_sgd_step_multi / dpl_adam_step_multi argument checks', function()
  local function arr(list)
    local a = ffi.new('dpl_tensor*[?]', #list)
    for i = 1, #list do a[i - 1] = list[i] end
    return a
  end
  local sgd = ffi.new('dpl_sgd_opts', { lr = 0.1, momentum = 0.9 })
  local adam = ffi.new('dpl_adam_opts', { lr = 0.1, beta1 = 0.9, beta2 = 0.999, eps = 1e-8 })
  local function fails(st, pattern)
    assert.are_not.equal(0, st)
    local msg = capi.last_error()
    assert.truthy(msg:find(pattern), msg)
  end

  it('rejects bad lists with messages naming the tensor', function()
    local p, g, b = dpl.zeros(3), dpl.ones(3), dpl.zeros(3)
    fails(C.dpl_sgd_step_multi(1, arr({ p }), arr({ g }), arr({ b }), nil, nil), 'opts is NULL')
    fails(C.dpl_sgd_step_multi(-1, arr({ p }), arr({ g }), arr({ b }), nil, sgd), 'n must be >= 0')
    fails(C.dpl_sgd_step_multi(1, arr({ p }), arr({ g }), nil, nil, sgd), 'bufs is NULL')
    fails(C.dpl_sgd_step_multi(1, arr({ p }), arr({ dpl.ones(4) }), arr({ b }), nil, sgd),
      'grads%[0%] has shape %[4%], its parameter %[3%]')
    fails(C.dpl_sgd_step_multi(1, arr({ p }), arr({ g:double() }), arr({ b }), nil, sgd),
      'grads%[0%] is float64, its parameter float32')
    fails(C.dpl_sgd_step_multi(2, arr({ p, dpl.zeros(2):double() }), arr({ g, dpl.ones(2):double() }),
      arr({ b, dpl.zeros(2):double() }), nil, sgd), 'params%[1%] is float64, params%[0%] float32 %(one dtype per call%)')
    fails(C.dpl_sgd_step_multi(1, arr({ dpl.zeros(3, { dtype = 'int64' }) }), arr({ dpl.ones(3, { dtype = 'int64' }) }),
      arr({ dpl.zeros(3, { dtype = 'int64' }) }), nil, sgd), 'params%[0%] is int64; multi%-tensor steps take float32 or float64')
    fails(C.dpl_sgd_step_multi(1, arr({ dpl.zeros(3):half() }), arr({ dpl.ones(3):half() }),
      arr({ dpl.zeros(3):half() }), nil, sgd), 'params%[0%] is float16')
    local m = dpl.zeros(4, 3)
    fails(C.dpl_sgd_step_multi(1, arr({ m:t() }), arr({ dpl.ones(3, 4) }), arr({ dpl.zeros(3, 4) }), nil, sgd),
      'params%[0%] is not contiguous')
    fails(C.dpl_sgd_step_multi(1, arr({ p }), arr({ g }), arr({ dpl.zeros(6):view(3, 2):t()[1] }),
      nil, sgd), 'bufs%[0%]')
    fails(C.dpl_sgd_step_multi(1, arr({ p }), ffi.new('dpl_tensor*[1]'), arr({ b }), nil, sgd), 'grads%[0%] is NULL')
    assert.are.same({ 0, 0, 0 }, p:totable()) -- nothing ran
    fails(C.dpl_adam_step_multi(1, arr({ p }), arr({ g }), arr({ b }), arr({ dpl.zeros(3) }), nil, nil, adam),
      'steps is NULL')
    fails(C.dpl_adam_step_multi(1, arr({ p }), arr({ g }), arr({ b }), arr({ dpl.zeros(3) }), nil,
      ffi.new('double[1]', { 0 }), adam), 'steps%[0%] must be >= 1')
    fails(C.dpl_adam_step_multi(1, arr({ p }), arr({ g }), arr({ b }), nil, nil, ffi.new('double[1]', { 1 }), adam),
      'exp_avg_sq is NULL')
    local ams = ffi.new('dpl_adam_opts', { lr = 0.1, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, amsgrad = 1 })
    fails(C.dpl_adam_step_multi(1, arr({ p }), arr({ g }), arr({ b }), arr({ dpl.zeros(3) }), nil,
      ffi.new('double[1]', { 1 }), ams), 'max_exp_avg_sq is NULL')
    -- n = 0 is a no-op
    assert.are.equal(0, C.dpl_sgd_step_multi(0, nil, nil, nil, nil, sgd))
  end)
end)
