-- special_spec.lua: dpl.special (lua/dpl/special.lua, src/tensor/dpl_tensor_special.c)
-- against PyTorch 1.13's values and gradients in float64 (spec/fixtures/special_ref.lua, from
-- gen_special_ref.py, over grids reaching every branch), then edge values, numerical
-- gradient checks, the tensor methods and their in-place forms, dtypes, and errors.
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local raises = h.raises
local sp = dpl.special
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/special_ref.lua')
local f64 = { dtype = 'float64' }
local huge = math.huge

local calls = {
  lgamma = dpl.lgamma, digamma = sp.digamma,
  ['polygamma 1'] = function(x) return sp.polygamma(1, x) end,
  ['polygamma 2'] = function(x) return dpl.polygamma(2, x) end,
  ['polygamma 5'] = function(x) return x:polygamma(5) end,
  erfc = function(x) return x:erfc() end, erfcx = sp.erfcx, i0 = sp.i0, i0e = sp.i0e, i1 = sp.i1, i1e = sp.i1e,
  ndtr = sp.ndtr, ndtri = sp.ndtri, log_ndtr = sp.log_ndtr, sinc = function(x) return x:sinc() end,
  zeta = sp.zeta,
  ['zeta grad q'] = function(q) return sp.zeta(dpl.tensor({ 2, 3, 4.5 }, f64), q) end,
  gammainc = function(x) return sp.gammainc(dpl.tensor({ 0.5, 1, 2, 5, 10, 30, 0.1, 100, 3 }, f64), x) end,
  gammaincc = function(x) return sp.gammaincc(dpl.tensor({ 0.5, 1, 2, 5, 10, 30, 0.1, 100, 3 }, f64), x) end,
  multigammaln = function(x) return sp.multigammaln(x, 3) end,
  entr = sp.entr, xlog1py = sp.xlog1py,
}
-- relative tolerances against PyTorch 1.13 (its trigamma/polygamma lose ~1e-13 at small x, its
-- gammainc(30, 25) is off by 1e-9) and against the exact values (50-digit mpmath, rounded)
local torch_tol = { gammainc = 1e-8, gammaincc = 1e-8, ['polygamma 1'] = 1e-9, ['polygamma 2'] = 1e-11,
  ['polygamma 5'] = 1e-10, digamma = 1e-10, log_ndtr = 1e-12 }
local exact_tol = { ['polygamma 5'] = 1e-12, i0 = 1e-13, i1 = 1e-13, i0e = 1e-13, i1e = 1e-13, erfcx = 1e-13,
  zeta = 1e-13, gammainc = 1e-13, gammaincc = 1e-12, digamma = 1e-13, ['polygamma 1'] = 1e-13,
  -- (the tails of ndtr/log_ndtr: erfc(x / sqrt 2) turns the rounding of x / sqrt 2 into a
  -- relative error of about x^2 eps, 3e-13 at x = 40)
  ndtr = 5e-13, log_ndtr = 5e-13,
  ['polygamma 2'] = 1e-13 }

-- got against want (a list): equal, both NaN, within rtol, or within atol (default 1e-250:
-- values PyTorch flushes to zero, as ndtr(-35) = 1.1e-268); skip_nan: elements want has as
-- NaN are not compared
local function check(name, got, want, rtol, skip_nan, atol)
  local w = dpl.tensor(want, f64)
  assert.are.same(w:size(), got:size(), name .. ': shape')
  local g = got:double()
  local both_nan = g:ne(g):logical_and(w:ne(w))
  if skip_nan then both_nan = w:ne(w) end
  local same = g:eq(w)
  local rel = (g - w):abs() / (w:abs() + 1e-300)
  local bad = same:logical_or(both_nan):logical_or(rel:le(rtol)):logical_or((g - w):abs():le(atol or 1e-250)):logical_not()
  if bad:any():item() then
    local i = bad:to('int64'):argmax():item()
    error(('%s: element %d is %.17g, the reference says %.17g'):format(name, i, g[i]:item(), w[i]:item()), 2)
  end
end

describe('dpl.special against PyTorch 1.13 (float64)', function()
  for _, c in ipairs(ref) do
    it(c.name, function()
      local f = assert(calls[c.name], 'no call for ' .. c.name)
      local ins = {}
      for i, v in ipairs(c.inputs) do
        ins[i] = dpl.tensor(v, f64)
        if c.w then ins[i]:requires_grad_() end
      end
      local y = f(unpack(ins))
      check(c.name, y, c.out, torch_tol[c.name] or 1e-13, false, c.name == 'ndtr' and 1e-15 or nil) -- (torch's ndtr(-8) is 6.1e-16, true 6.2e-16; 0 from -10)
      -- (sinc at the integers: 0 in exact arithmetic, sin(pi x) of the rounded pi x here and in PyTorch)
      if c.exact then check(c.name .. ' (exact)', y, c.exact, exact_tol[c.name] or 2e-15, true, c.name == 'sinc' and 1e-15 or nil) end
      if c.w then
        (y * dpl.tensor(c.w, f64)):sum():backward()
        for i, g in ipairs(c.grads) do
          if g then check(c.name .. ' grad', ins[i].grad, g, (torch_tol[c.name] or 1e-13) * 100) end
        end
      end
    end)
  end
end)

describe('dpl.special details', function()
  it('edge values: poles, infinities, NaN, signed zero', function()
    local x = dpl.tensor({ 0, -0.0, -2, huge, -huge, 0 / 0 }, f64)
    assert.are.same({ -huge, huge }, sp.digamma(x):narrow(1, 1, 2):totable())
    local d = sp.digamma(x):totable()
    assert.is_true(d[3] ~= d[3] and d[4] == huge and d[5] ~= d[5] and d[6] ~= d[6])
    assert.are.same({ huge, huge, huge, huge, huge }, x:narrow(1, 1, 5):lgamma():totable())
    assert.are.same({ -huge, huge }, sp.ndtri(dpl.tensor({ 0, 1 }, f64)):totable())
    local bad = sp.ndtri(dpl.tensor({ -0.5, 1.5 }, f64)):totable()
    assert.is_true(bad[1] ~= bad[1] and bad[2] ~= bad[2])
    assert.are.same({ 1 }, sp.sinc(dpl.zeros(1, f64)):totable())
    assert.are.equal(huge, sp.zeta(dpl.tensor({ 1 }, f64), dpl.tensor({ 2 }, f64)):item())
    assert.are.equal(huge, sp.zeta(dpl.tensor({ 2 }, f64), dpl.tensor({ 0 }, f64)):item())
    local z = sp.zeta(dpl.tensor({ 0.5 }, f64), dpl.tensor({ 1 }, f64)):item()
    assert.is_true(z ~= z)
    assert.are.same({ 1, 0 }, sp.gammainc(dpl.tensor({ 0, 0.5 }, f64), dpl.tensor({ 1, 0 }, f64)):totable())
  end)

  it('gammainc(30, 25) to full precision (mpmath: 0.182103915977455; torch 1.13 says 0.18210391575658647)', function()
    local v = sp.gammainc(dpl.tensor({ 30 }, f64), dpl.tensor({ 25 }, f64)):item()
    assert.is_true(math.abs(v - 0.1821039159774551) < 1e-14 * v, tostring(v))
  end)

  it('numerical gradient checks of every rule', function()
    local gc = dpl.autograd.gradcheck
    local x = dpl.tensor({ 0.3, 1.7, 4.2, 12.5 }, f64):requires_grad_()
    local s = dpl.tensor({ -3.1, -0.4, 0.6, 2.9, 35 }, f64):requires_grad_()
    for _, f in ipairs({ dpl.lgamma, sp.digamma, function(t) return sp.polygamma(2, t) end, sp.i0, sp.i1, sp.i0e, sp.i1e,
      sp.erfc, sp.erfcx, sp.ndtr, sp.log_ndtr, sp.sinc }) do
      assert.is_true(gc(f, { (f == dpl.lgamma or f == sp.digamma or f == sp.i0 or f == sp.i1) and x or s }))
    end
    assert.is_true(gc(sp.ndtri, { dpl.tensor({ 0.05, 0.2, 0.6, 0.99 }, f64):requires_grad_() }))
    assert.is_true(gc(function(q) return sp.zeta(dpl.tensor({ 2.5 }, f64), q) end, { x }))
    assert.is_true(gc(function(t) return sp.gammainc(dpl.tensor({ 2.5 }, f64), t) + sp.gammaincc(dpl.tensor({ 0.7 }, f64), t) end, { x }))
    assert.is_true(gc(function(t) return sp.multigammaln(t + 2, 2) end, { x }))
    -- the gradient at 0 of i1, i1e and sinc (the limits)
    local z = dpl.zeros(1, f64):requires_grad_()
    sp.i1(z):sum():backward()
    assert.are.equal(0.5, z.grad:item())
    z.grad = nil
    sp.sinc(z):sum():backward()
    assert.are.equal(0, z.grad:item())
  end)

  it("zeta's gradient in x and gammainc's in a raise, as PyTorch's", function()
    local a = dpl.tensor({ 2.5 }, f64):requires_grad_()
    raises(function() sp.zeta(a, dpl.tensor({ 1 }, f64)):sum():backward() end,
      "NotImplementedError: the derivative for 'zeta' with respect to x is not implemented")
    raises(function() sp.gammainc(a, dpl.tensor({ 1 }, f64)):sum():backward() end,
      "the derivative for 'gammainc' with respect to a is not implemented")
  end)

  it('dtypes: float32 stays float32 (computed in double), integers give float32; numbers broadcast', function()
    local y = dpl.tensor({ 0.5, 2 }):lgamma()
    assert.are.equal('float32', y.dtype)
    assert.is_true(math.abs(y[1]:item() - 0.57236494) < 1e-6)
    assert.are.equal('float32', dpl.tensor({ 1, 2 }):digamma().dtype)
    assert.are.equal('float32', sp.i0(dpl.tensor({ 1, 2 }, { dtype = 'int64' })).dtype)
    assert.are.equal('float16', sp.erfcx(dpl.ones(2, { dtype = 'float16' })).dtype)
    local z = sp.zeta(2, dpl.tensor({ 1, 2 }, f64))
    assert.are.equal('float64', z.dtype)
    assert.is_true(math.abs(z[1]:item() - math.pi ^ 2 / 6) < 1e-14)
    assert.are.same({ 2, 3 }, sp.gammainc(dpl.ones(2, 1), dpl.ones(3)):size())
  end)

  it('tensor methods, dpl functions and in-place forms', function()
    local x = dpl.tensor({ 0.5, 1.5 }, f64)
    assert.is_true((x:lgamma() - sp.gammaln(x)):abs():max():item() == 0)
    assert.is_true((dpl.digamma(x) - sp.psi(x)):abs():max():item() == 0)
    assert.is_true((dpl.tensor({ 2.5 }, f64):mvlgamma(2) - sp.multigammaln(dpl.tensor({ 2.5 }, f64), 2)):abs():max():item() == 0)
    local y = x:clone()
    assert.are.equal(y, y:lgamma_())
    assert.is_true((y - x:lgamma()):abs():max():item() == 0)
    local p = x:clone():polygamma_(1)
    assert.is_true((p - sp.polygamma(1, x)):abs():max():item() == 0)
    assert.is_true((dpl.igamma(x, x) - sp.gammainc(x, x)):abs():max():item() == 0)
    assert.are.equal(sp.expit, sp.expit)
    assert.is_true((sp.expit(x) - x:sigmoid()):abs():max():item() == 0)
  end)

  it('bad arguments raise errors naming the function', function()
    raises(function() sp.polygamma(-1, dpl.ones(2)) end, 'polygamma: n must be a non-negative integer, got -1')
    raises(function() sp.polygamma(1.5, dpl.ones(2)) end, 'polygamma: n must be a non-negative integer, got 1.5')
    raises(function() sp.i0('x') end, "ValueError: i0: input must be a tensor, got 'x'")
    raises(function() sp.zeta(1, 2) end, 'zeta: expected at least one tensor argument')
    raises(function() sp.zeta(dpl.ones(2), dpl.ones(3)) end, 'zeta: shapes [2] and [3] cannot be broadcast')
    raises(function() sp.multigammaln(dpl.ones(2), 4) end, 'multigammaln: All elements must be greater than (p-1)/2')
    raises(function() sp.bessel_j0(dpl.ones(2)) end, 'NotImplementedError: special.bessel_j0: not implemented in dplhost')
  end)
end)

-- float32 lgamma, digamma, erfc and i0 run vector kernels in double lanes (src/tensor/dpl_tensor_vmath_sp.h):
-- the float64 result rounded to float32, within 1 ulp (scripts/vmath_ulp.c measures 0.5: equal on every
-- input it tries), the same bits on every path (dpl.vmath), stride and split; 'off' keeps the libm loop
describe('dpl.special float32 vector kernels', function()
  local ffi = require 'ffi'
  local huge32 = 3.4028234663852886e38
  local INITIAL = dpl.vmath()
  after_each(function() dpl.vmath(INITIAL) end)
  -- every 65521st float32 bit pattern, a grid over [-12, 12] (negative poles and halves included), edges
  local function sweep()
    local edges = { 0, 1, 2, -1, -2, -100, 0.5, 1.5, 2.5, -0.5, 1e-30, 2 ^ -126, 2 ^ -149, 1.4616321, 7.999999, 8,
      8.000001, 9.999999, 10, 10.1, 10.06, -3.9, -10.2, 91.9, 92, -92, 100, 1e10, 4.08e36, 4.1e36, huge32, -huge32,
      huge, -huge, 0 / 0 }
    local nbits, ngrid = 65536, 24001
    local x = dpl.empty(nbits + ngrid + #edges)
    local pu, pf = ffi.cast('uint32_t *', x:data_ptr()), ffi.cast('float *', x:data_ptr())
    for i = 0, nbits - 1 do pu[i] = (i * 65521) % 4294967296 end
    for i = 0, ngrid - 1 do pf[nbits + i] = -12 + i / 1000 end
    for i, v in ipairs(edges) do pf[nbits + ngrid + i - 1] = v end
    pf[nbits + ngrid + #edges - 1] = 0 / 0
    return x
  end
  local X = sweep()
  local fns = { lgamma = dpl.lgamma, digamma = sp.digamma, erfc = sp.erfc, i0 = sp.i0 }
  -- y (float32) against r (float64): the same non-finite values, finite ones within 1 ulp of r's float32 binade
  local function within_ulp(name, y, r)
    local y64, r32 = y:to('float64'), r:to('float32'):to('float64')
    local fin = r32:isfinite()
    local same = y64:eq(r32):logical_or(y64:isnan():logical_and(r32:isnan()))
    assert.is_true(same:logical_or(fin):all():item(), name .. ': a NaN or infinity differs')
    local err = ((y64 - r):abs() / r:abs():clamp(2 ^ -126)):masked_fill(fin:logical_not(), 0)
    local worst = err:max():item()
    assert.is_true(worst <= 2 ^ -23, ('%s: relative error %.3g at x = %.9g'):format(name, worst,
      X[err:argmax():item() + 1]:item()))
  end

  for name, f in pairs(fns) do
    it(name .. ': the float64 result rounded, on every path; strided and split inputs give the same bits', function()
      local r = f(X:to('float64'))
      local best = dpl.vmath()
      if best == 'off' then best = dpl.vmath('scalar') end
      local y = f(X)
      assert.are.equal('float32', y.dtype)
      within_ulp(name, y, r)
      for _, path in ipairs({ 'avx512', 'avx2', 'scalar' }) do
        if dpl.vmath(path) == path then
          local yp = f(X)
          assert.is_true(yp:eq(y):logical_or(yp:isnan():logical_and(y:isnan())):all():item(), name .. ' on ' .. path)
        end
      end
      dpl.vmath(best)
      local xs = dpl.stack({ X, -X }, 2):select(2, 1) -- stride 2
      local ys = f(xs)
      assert.is_true(ys:eq(y):logical_or(ys:isnan():logical_and(y:isnan())):all():item(), name .. ' strided')
      local tail = f(X:narrow(1, 3, 37)) -- a short run, unaligned: the tail through the padded vector
      assert.is_true(tail:eq(y:narrow(1, 3, 37)):logical_or(tail:isnan()):all():item())
      dpl.vmath('off')
      within_ulp(name .. ' (libm loop)', f(X), r)
    end)
  end

  it('edge values in float32', function()
    local x = dpl.tensor({ 0, -1, -2, huge, -huge, 0 / 0, 1, 2 })
    assert.are.same({ huge, huge, huge, huge, huge }, dpl.lgamma(x):narrow(1, 1, 5):totable())
    assert.are.same({ 0, 0 }, dpl.lgamma(x):narrow(1, 7, 2):totable())
    local d = sp.digamma(x):totable()
    assert.is_true(d[1] == -huge and d[2] ~= d[2] and d[4] == huge and d[5] ~= d[5] and d[6] ~= d[6])
    assert.are.same({ 1, 2, 0, 2 }, sp.erfc(dpl.tensor({ 0, -huge, huge, -10 })):totable())
    local i = sp.i0(dpl.tensor({ 0, huge, -huge, 92, -100 })):totable()
    assert.is_true(i[1] == 1 and i[2] ~= i[2] and i[3] ~= i[3] and i[4] == huge and i[5] == huge)
  end)
end)
