-- nn_bn_half_spec.lua: batch_norm of float16/bfloat16 inputs (under autocast, as in a
-- precision='16-mixed' step, and in a module converted to float16) computes its statistics
-- in float32: in float16 the backward of small activations overflowed (rsqrt's gradient
-- -0.5 var^-1.5), the input gradient was inf/NaN, and a GradScaler skipped every step.
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional

local function all_finite(t) return t:float():isfinite():all():item() end
local function maxdiff(a, b) return (a:double() - b:double()):abs():max():item() end

-- x [8, C] of scale s through BatchNorm1d, the gradient of sum(y * w) at x, in dtype dt
-- (under autocast: x in dt, the module in float32; else the module converted to dt)
local function grads(dt, s, autocast)
  dpl.manual_seed(3)
  local bn = nn.BatchNorm1d(6)
  local x0 = dpl.randn(8, 6) * s
  local w = dpl.randn(8, 6)
  if not autocast then bn:to(dt) end
  local x = x0:to(dt):requires_grad_()
  local y
  if autocast then
    y = dpl.amp.autocast(dt, function() return bn(x) end)
  else
    y = bn(x)
  end
  (y:float() * w):sum():backward()
  -- the float32 reference
  dpl.manual_seed(3)
  local bn32 = nn.BatchNorm1d(6)
  local x32 = x:detach():float():requires_grad_()
  local y32 = bn32(x32)
  ;(y32 * w):sum():backward()
  return y, x.grad, y32, x32.grad, bn, bn32
end

describe('batch_norm in float16/bfloat16', function()
  for _, dt in ipairs { 'float16', 'bfloat16' } do
    for _, autocast in ipairs { true, false } do
      local what = dt .. (autocast and ' under autocast' or ' module')
      it(what .. ': finite gradients for small activations, close to float32', function()
        for _, s in ipairs { 1, 0.03, 1e-3 } do
          local y, gx, y32, gx32, bn, bn32 = grads(dt, s, autocast)
          assert.are.equal(dt, y.dtype, what .. ': the output keeps the input dtype (PyTorch)')
          assert.are.equal(dt, gx.dtype)
          assert.is_true(all_finite(gx), ('%s, scale %g: the input gradient is not finite'):format(what, s))
          -- float16 keeps ~3 digits, bfloat16 ~2; the gradient scales as 1/s
          local tol = (dt == 'float16' and 5e-3 or 4e-2)
          assert.is_true(maxdiff(y, y32) < tol * 4, ('%s, scale %g: output off by %g'):format(what, s, maxdiff(y, y32)))
          local rel = maxdiff(gx, gx32) / gx32:abs():max():item()
          assert.is_true(rel < tol * 4, ('%s, scale %g: gradient off by %g (relative)'):format(what, s, rel))
          -- the running statistics are updated (in their own dtype), close to float32's
          -- (stored in dt for a converted module: rounded to its precision)
          local function close(a, b) return maxdiff(a, b) <= tol * (b:abs():max():item() + s) end
          assert.is_true(close(bn.running_mean, bn32.running_mean), what .. ': running_mean')
          assert.is_true(close(bn.running_var, bn32.running_var), what .. ': running_var')
          assert.are.equal(autocast and 'float32' or dt, bn.running_mean.dtype)
          if bn.weight.grad then assert.is_true(all_finite(bn.weight.grad), what .. ': weight gradient') end
        end
      end)
    end
  end

  it('eval mode: the running statistics, the output in the input dtype', function()
    local bn = nn.BatchNorm1d(4)
    bn.running_mean:copy_(dpl.tensor { 0.1, -0.2, 0.3, 0 })
    bn.running_var:copy_(dpl.tensor { 1e-3, 2, 0.5, 1 })
    bn:eval()
    local x = dpl.randn(5, 4) * 0.05
    local y = dpl.amp.autocast('float16', function() return bn(x:half()) end)
    assert.are.equal('float16', y.dtype)
    local ref = bn(x:half():float())
    assert.is_true(maxdiff(y, ref) < 2e-2, tostring(maxdiff(y, ref)))
  end)

  it('a float16 step through Linear + BatchNorm with a loss scale of 1024 has finite gradients', function()
    dpl.manual_seed(1)
    local fc, bn, out = nn.Linear(8, 16, { bias = false }), nn.BatchNorm1d(16), nn.Linear(16, 4)
    local h = dpl.randn(8, 8) * 0.03
    local loss = dpl.amp.autocast('float16', function()
      return F.cross_entropy(out(F.gelu(bn(fc(h)))), dpl.tensor({ 1, 2, 3, 4, 1, 2, 3, 4 }, { dtype = 'int64' }))
    end)
    ;(loss * 1024):backward()
    for _, p in ipairs { fc.weight, bn.weight, bn.bias, out.weight } do
      assert.is_true(all_finite(p.grad), 'a parameter gradient is not finite')
    end
  end)
end)
