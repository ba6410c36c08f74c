-- distributions_spec.lua: dpl.distributions (lua/dpl/distributions.lua) against PyTorch 1.13
-- (spec/fixtures/distributions_ref.lua, from gen_distributions_ref.py): log_prob, entropy,
-- mean, variance, mode, stddev, cdf, icdf and their gradients in the parameters (float64),
-- KL divergences; then the draws (moments of many seeded samples, shapes, reproducibility,
-- rsample gradients including Gamma's implicit one), validation errors, expand, Independent.
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local raises = h.raises
local D = dpl.distributions
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/distributions_ref.lua')
local f64 = { dtype = 'float64' }

local function T(v) return dpl.tensor(v, f64) end
local function I(v) return dpl.tensor(v, { dtype = 'int64' }) end
-- each case's constructor from its parameter tensors (the same calls as the generator's)
local make = {
  Normal = D.Normal, LogNormal = D.LogNormal, HalfNormal = D.HalfNormal, Uniform = D.Uniform,
  Exponential = D.Exponential, Laplace = D.Laplace, Cauchy = D.Cauchy, Gumbel = D.Gumbel,
  Bernoulli = function(p) return D.Bernoulli({ probs = p }) end,
  ['Bernoulli logits'] = function(l) return D.Bernoulli({ logits = l }) end,
  Geometric = function(p) return D.Geometric(p) end,
  Categorical = function(p) return D.Categorical({ probs = p }) end,
  ['Categorical logits'] = function(l) return D.Categorical({ logits = l }) end,
  OneHotCategorical = function(p) return D.OneHotCategorical({ probs = p }) end,
  Gamma = D.Gamma, Chi2 = D.Chi2, Beta = D.Beta, Dirichlet = D.Dirichlet, StudentT = D.StudentT, Poisson = D.Poisson,
  Binomial = function(p) return D.Binomial(10, p) end,
  Multinomial = function(p) return D.Multinomial(10, p) end,
  MultivariateNormal = function(m, c) return D.MultivariateNormal(m, { covariance_matrix = c }) end,
  ['MultivariateNormal scale_tril'] = function(m, L) return D.MultivariateNormal(m, { scale_tril = L }) end,
  ['MultivariateNormal precision'] = function(m, P) return D.MultivariateNormal(m, { precision_matrix = P }) end,
  ['Independent Normal'] = function(m, s) return D.Independent(D.Normal(m, s), 1) end,
}
local int_values = { Categorical = true, ['Categorical logits'] = true }

local function close(name, got, want, tol)
  local w = type(want) == 'table' and T(want) or T({ want }):reshape({})
  if not dpl.is_tensor(got) then error(name .. ': not a tensor: ' .. tostring(got), 2) end
  assert.are.same(w:size(), got:size(), name .. ': shape')
  local g = got:double()
  local ok = g:eq(w):logical_or(g:ne(g):logical_and(w:ne(w))):logical_or(((g - w):abs() / (w:abs() + 1)):le(tol or 1e-12))
  if not ok:all():item() then error(('%s: got %s, PyTorch %s'):format(name, tostring(g), tostring(w)), 2) end
end

describe('dpl.distributions against PyTorch 1.13 (float64)', function()
  for _, c in ipairs(ref.cases) do
    it(c.name, function()
      local ps = {}
      for i, p in ipairs(c.params) do ps[i] = T(p):requires_grad_() end
      local d = make[c.name](unpack(ps))
      local v = int_values[c.name] and I(c.value) or T(c.value)
      local lp = d:log_prob(v)
      close(c.name .. ' log_prob', lp, c.out.log_prob)
      local loss = lp:sum()
      if c.out.entropy then
        local e = d:entropy()
        close(c.name .. ' entropy', e, c.out.entropy)
        loss = loss + e:sum()
      end
      for _, prop in ipairs({ 'mean', 'variance', 'mode', 'stddev' }) do
        local want = c.out[prop]
        if want ~= nil and prop == 'mode' and int_values[c.name] then -- (1-based categories)
          for i = 1, #want do want[i] = want[i] + 1 end
        end
        if want ~= nil then close(c.name .. ' ' .. prop, d[prop], want) end
      end
      if c.out.cdf then close(c.name .. ' cdf', d:cdf(T(c.value)), c.out.cdf) end
      if c.out.icdf then
        local probs = ({ 0.1, 0.5, 0.9 })
        if c.name == 'Normal' then probs = { 0.1, 0.5, 0.99 } end
        close(c.name .. ' icdf', d:icdf(T(probs)), c.out.icdf)
      end
      if c.grads then
        loss:backward()
        local k = 0
        for _, p in ipairs(ps) do
          k = k + 1
          if c.grads[k] then close(c.name .. ' grad ' .. k, p.grad or dpl.zeros_like(p), c.grads[k], 1e-9) end
        end
      end
    end)
  end

  local kl_pairs = {
    Normal = { D.Normal(T({ 0, 1 }), T({ 1, 2 })), D.Normal(T({ 0.5, -1 }), T({ 2, 0.5 })) },
    Bernoulli = { D.Bernoulli(T({ 0.3, 0 })), D.Bernoulli(T({ 0.6, 0.5 })) },
    Categorical = { D.Categorical({ probs = T({ 0.2, 0.3, 0.5 }) }), D.Categorical({ probs = T({ 0.1, 0.1, 0.8 }) }) },
    Uniform = { D.Uniform(T({ 0, 0 }), T({ 1, 2 })), D.Uniform(T({ -1, 0.5 }), T({ 2, 3 })) },
    Exponential = { D.Exponential(T({ 0.5, 2 })), D.Exponential(T({ 1, 1 })) },
    Laplace = { D.Laplace(T({ 0, 1 }), T({ 1, 2 })), D.Laplace(T({ 0.5, -1 }), T({ 2, 0.5 })) },
    Gamma = { D.Gamma(T({ 0.5, 3 }), T({ 1, 2 })), D.Gamma(T({ 2, 1 }), T({ 0.5, 3 })) },
    Beta = { D.Beta(T({ 0.5, 3 }), T({ 1, 2 })), D.Beta(T({ 2, 1 }), T({ 0.5, 3 })) },
    Dirichlet = { D.Dirichlet(T({ 0.5, 3, 1 })), D.Dirichlet(T({ 2, 1, 1 })) },
    Poisson = { D.Poisson(T({ 0.5, 3 })), D.Poisson(T({ 2, 1 })) },
    Geometric = { D.Geometric(T({ 0.3, 0.8 })), D.Geometric(T({ 0.5, 0.1 })) },
    Binomial = { D.Binomial(10, T({ 0.3, 0.8 })), D.Binomial(10, T({ 0.5, 0.1 })) },
    MultivariateNormal = { D.MultivariateNormal(T({ 0.5, -1 }), { covariance_matrix = T({ { 2, 0.5 }, { 0.5, 1 } }) }),
      D.MultivariateNormal(T({ 0, 0 }), { scale_tril = dpl.eye(2, f64) * 1.5 }) },
    Independent = { D.Independent(D.Normal(T({ 0, 1 }), T({ 1, 2 })), 1), D.Independent(D.Normal(T({ 0.5, -1 }), T({ 2, 0.5 })), 1) },
    LogNormal = { D.LogNormal(T({ 0, 1 }), T({ 1, 2 })), D.LogNormal(T({ 0.5, -1 }), T({ 2, 0.5 })) },
    HalfNormal = { D.HalfNormal(T({ 1, 2 })), D.HalfNormal(T({ 2, 0.5 })) },
  }
  for _, k in ipairs(ref.kl) do
    it('kl_divergence ' .. k.name, function()
      local pq = assert(kl_pairs[k.name], k.name)
      close('KL ' .. k.name, D.kl_divergence(pq[1], pq[2]), k.out)
    end)
  end
end)

describe('dpl.distributions draws', function()
  local function moments(x) return x:mean(1), x:var(1) end
  local N = 40000
  local cases = {
    { 'Normal', function() return D.Normal(T({ 0, 3 }), T({ 1, 0.5 })) end },
    { 'LogNormal', function() return D.LogNormal(T({ 0, 0.5 }), T({ 0.5, 0.25 })) end },
    { 'HalfNormal', function() return D.HalfNormal(T({ 1, 2 })) end },
    { 'Uniform', function() return D.Uniform(T({ 0, -2 }), T({ 1, 2 })) end },
    { 'Exponential', function() return D.Exponential(T({ 0.5, 4 })) end },
    { 'Laplace', function() return D.Laplace(T({ 0, 1 }), T({ 1, 0.5 })) end },
    { 'Gumbel', function() return D.Gumbel(T({ 0, 1 }), T({ 1, 0.5 })) end },
    { 'Bernoulli', function() return D.Bernoulli(T({ 0.1, 0.5 })) end },
    { 'Geometric', function() return D.Geometric(T({ 0.3, 0.8 })) end },
    { 'Gamma', function() return D.Gamma(T({ 0.3, 5 }), T({ 1, 2 })) end },
    { 'Chi2', function() return D.Chi2(T({ 1, 6 })) end },
    { 'Beta', function() return D.Beta(T({ 0.5, 4 }), T({ 2, 0.7 })) end },
    { 'StudentT', function() return D.StudentT(T({ 6, 10 }), T({ 0, 1 }), T({ 1, 2 })) end },
    { 'Poisson', function() return D.Poisson(T({ 0, 2.5, 9.5, 10.5, 150 })) end },
    { 'Binomial', function() return D.Binomial(T({ 5, 20 }), T({ 0.3, 0.9 })) end },
  }
  for _, c in ipairs(cases) do
    it(c[1] .. ': the moments of ' .. N .. ' draws match mean and variance', function()
      dpl.manual_seed(1234)
      local d = c[2]()
      local x = d:sample({ N })
      assert.are.same({ N, unpack(d.batch_shape) }, x:size())
      local m, v = moments(x)
      local mean, var = d.mean, d.variance
      -- 6 standard errors of the mean; the variance within 10% (+ a floor for 0)
      local se = (var / N):sqrt() * 6 + 1e-12
      assert.is_true((m - mean):abs():le(se):all():item(), ('%s mean %s, expected %s'):format(c[1], tostring(m), tostring(mean)))
      assert.is_true((v - var):abs():le(var * 0.1 + 1e-9):all():item(), ('%s variance %s, expected %s'):format(c[1], tostring(v), tostring(var)))
    end)
  end

  it('Categorical, OneHotCategorical, Multinomial, Dirichlet and MultivariateNormal draws', function()
    dpl.manual_seed(7)
    local p = T({ 0.1, 0.6, 0.3 })
    local x = D.Categorical({ probs = p }):sample({ N })
    assert.are.equal('int64', x.dtype)
    assert.are.equal(1, x:min():item())
    assert.are.equal(3, x:max():item())
    local freq = dpl.bincount(x, { minlength = 4 }):narrow(1, 2, 3):double() / N
    assert.is_true((freq - p):abs():max():item() < 0.01)
    local oh = D.OneHotCategorical({ probs = p }):sample({ N })
    assert.is_true((oh:mean(1) - p):abs():max():item() < 0.01 and oh:sum(2):eq(1):all():item())
    local mn = D.Multinomial(20, p):sample({ 5000 })
    assert.is_true(mn:sum(2):eq(20):all():item() and (mn:mean(1) - p * 20):abs():max():item() < 0.15)
    local dr = D.Dirichlet(T({ 1, 2, 3 })):sample({ N })
    assert.is_true((dr:sum(2) - 1):abs():max():item() < 1e-12 and (dr:mean(1) - T({ 1, 2, 3 }) / 6):abs():max():item() < 0.01)
    local cov = T({ { 2, 0.5 }, { 0.5, 1 } })
    local mv = D.MultivariateNormal(T({ 1, -1 }), { covariance_matrix = cov }):sample({ N })
    local c = mv - mv:mean(1)
    assert.is_true((c:t():matmul(c) / N - cov):abs():max():item() < 0.06)
  end)

  it("Multinomial's entropy is the sum over every outcome (torch 1.13's is off by 1.4e-7)", function()
    -- -sum p log p over the 66 outcomes of 10 draws from [0.2, 0.3, 0.5], in Python's float64
    local e = D.Multinomial(10, T({ 0.2, 0.3, 0.5 })):entropy():item()
    assert.is_true(math.abs(e - 3.3412185163945045) < 1e-13, tostring(e))
    assert.is_true(dpl.autograd.gradcheck(function(p) return D.Multinomial(4, p / p:sum()):entropy() end,
      { T({ 0.2, 0.3, 0.5 }):requires_grad_() }))
  end)

  it('shapes: sample_shape, batch_shape, event_shape, expand', function()
    local d = D.Normal(dpl.zeros(3), 1)
    assert.are.same({ 3 }, d.batch_shape)
    assert.are.same({ 2, 5, 3 }, d:sample({ 2, 5 }):size())
    assert.are.same({ 4, 3 }, d:sample(4):size())
    assert.are.same({ 3 }, d:sample():size())
    local e = d:expand({ 2, 3 })
    assert.are.same({ 2, 3 }, e.batch_shape)
    local mvn = D.MultivariateNormal(dpl.zeros(4, 2), { scale_tril = dpl.eye(2) })
    assert.are.same({ 4 }, mvn.batch_shape)
    assert.are.same({ 2 }, mvn.event_shape)
    assert.are.same({ 6, 4, 2 }, mvn:sample({ 6 }):size())
    assert.are.same({ 6, 4 }, mvn:log_prob(mvn:sample({ 6 })):size())
    local ind = D.Independent(D.Normal(dpl.zeros(4, 3), 1), 1)
    assert.are.same({ 4 }, ind.batch_shape)
    assert.are.same({ 3 }, ind.event_shape)
    assert.are.same({ 4 }, ind:log_prob(dpl.zeros(4, 3)):size())
    assert.are.same({ 5, 2 }, D.Categorical({ logits = dpl.zeros(2, 7) }):sample({ 5 }):size())
  end)

  it('the same seed gives the same draws', function()
    dpl.manual_seed(99)
    local a = D.Gamma(T({ 0.5, 3 }), 1):sample({ 100 })
    dpl.manual_seed(99)
    local b = D.Gamma(T({ 0.5, 3 }), 1):sample({ 100 })
    assert.is_true(a:equal(b))
  end)

  -- Gamma (and Beta, Dirichlet, Chi2, StudentT) and Poisson draw float32/float64 CPU tensors in C, each
  -- draw on its own Philox counters: numel counters per sample, the same draws whatever the thread count
  it('Gamma and Poisson draws in C: moments, counters, threads and paths', function()
    local prev, path = dpl.get_num_threads(), dpl.vmath()
    local N = 200000
    for _, dt in ipairs({ 'float32', 'float64' }) do
      local o = { dtype = dt }
      for _, a in ipairs({ 0.05, 0.5, 1, 2.5, 40 }) do
        dpl.manual_seed(17)
        local x = D.Gamma(dpl.tensor(a, o), dpl.tensor(2.0, o)):sample({ N })
        assert.are.equal(dt, x.dtype)
        local se = math.sqrt(a) / 2 / math.sqrt(N)
        assert.is_true(math.abs(x:mean():item() - a / 2) < 5 * se, ('Gamma(%g) %s mean %g'):format(a, dt, x:mean():item()))
        assert.is_true(math.abs(x:var():item() / (a / 4) - 1) < 0.05, ('Gamma(%g) %s var'):format(a, dt))
        assert.is_true(x:min():item() > 0)
      end
      for _, r in ipairs({ 0, 0.3, 4, 12, 300 }) do
        local x = D.Poisson(dpl.tensor(r, o)):sample({ N })
        assert.is_true(x:eq(x:floor()):all():item() and x:min():item() >= 0)
        local se = math.sqrt(r / N)
        assert.is_true(math.abs(x:mean():item() - r) < 5 * se + 1e-12, ('Poisson(%g) %s mean'):format(r, dt))
        if r > 0 then assert.is_true(math.abs(x:var():item() / r - 1) < 0.05, ('Poisson(%g) %s var'):format(r, dt)) end
      end
    end
    -- a batch of parameters (broadcast, then a contiguous copy): per-column moments
    dpl.manual_seed(5)
    local g = D.Gamma(T({ 0.3, 3, 30 }), T({ 1, 1, 1 })):sample({ N })
    assert.is_true((g:mean(1) - T({ 0.3, 3, 30 })):abs():max():item() < 0.05)
    -- numel counters per draw; the same values for 1 and 2 threads and on every vector path
    local function draws(th, p)
      dpl.set_num_threads(th)
      dpl.vmath(p)
      dpl.set_rng_state({ seed = 8, offset = 0 })
      local a = D.Gamma(T({ 0.4, 6 }), 1):sample({ 50001 })
      local after = dpl.get_rng_state().offset
      local b = D.Poisson(T({ 3, 40 })):sample({ 50001 })
      return a, b, after, dpl.get_rng_state().offset
    end
    local a1, b1, o1, o2 = draws(1, path)
    assert.are.same({ 100002, 200004 }, { o1, o2 })
    for _, th in ipairs({ 1, 2 }) do
      for _, p in ipairs({ 'auto', 'avx2', 'scalar', 'off' }) do
        local a2, b2 = draws(th, p)
        assert.is_true(a2:equal(a1) and b2:equal(b1), ('%d thread(s), path %s'):format(th, p))
      end
    end
    dpl.set_num_threads(prev)
    dpl.vmath(path)
  end)

  it('rsample is differentiable (Normal: reparameterized; Gamma: the implicit gradient)', function()
    local loc = dpl.zeros(2, f64):requires_grad_()
    local scale = dpl.ones(2, f64):requires_grad_()
    D.Normal(loc, scale):rsample({ 10 }):sum():backward()
    assert.are.same({ 10, 10 }, loc.grad:totable())
    dpl.manual_seed(3)
    -- d E[X] / d alpha = 1 for X ~ Gamma(alpha, 1): the mean of the per-draw gradients
    local alpha = T({ 0.5, 2, 9 }):requires_grad_()
    D.Gamma(alpha, 1):rsample({ 20000 }):mean(1):sum():backward()
    assert.is_true((alpha.grad - 1):abs():max():item() < 0.03, tostring(alpha.grad))
    -- Beta's mean a / (a + b): its gradient in a is b / (a + b)^2
    local a = T({ 2 }):requires_grad_()
    D.Beta(a, T({ 3 })):rsample({ 40000 }):mean():backward()
    assert.is_true(math.abs(a.grad:item() - 3 / 25) < 0.01, tostring(a.grad))
    assert.is_false(D.Bernoulli(T({ 0.5 })).has_rsample)
    raises(function() D.Poisson(T({ 1 })):rsample() end, 'NotImplementedError: Poisson has no rsample')
  end)
end)

describe('dpl.distributions validation', function()
  it('checks parameters and values as PyTorch (validate_args)', function()
    raises(function() D.Normal(dpl.zeros(2), dpl.tensor({ 1, -1 })) end,
      'ValueError: Expected parameter scale (tensor of shape [2]) of distribution Normal(loc: [2], scale: [2]) to satisfy '
      .. 'the constraint GreaterThan(lower_bound=0.0), but found invalid values')
    raises(function() D.Bernoulli(dpl.tensor({ 1.5 })) end, 'Expected parameter probs')
    raises(function() D.Bernoulli(dpl.tensor({ 0.5 }), dpl.tensor({ 0 })) end,
      'Bernoulli: either `probs` or `logits` must be specified, but not both.')
    raises(function() D.Categorical({ probs = dpl.tensor({ 0.5, -0.1, 0.6 }) }) end, 'Simplex()')
    raises(function() D.Uniform(1, 0) end, 'of distribution Uniform to be less than high')
    raises(function() D.MultivariateNormal(dpl.zeros(2), { covariance_matrix = dpl.tensor({ { 1, 2 }, { 2, 1 } }) }) end,
      'PositiveDefinite()')
    raises(function() D.MultivariateNormal(dpl.zeros(2), {}) end,
      'Exactly one of covariance_matrix or precision_matrix or scale_tril may be specified.')
    raises(function() D.Normal(0, 1):log_prob(dpl.tensor({ 0 / 0 })) end, 'to be within the support (Real())')
    raises(function() D.Categorical({ probs = dpl.ones(3) / 3 }):log_prob(dpl.tensor({ 0 })) end,
      'IntegerInterval(lower_bound=1, upper_bound=3)')
    raises(function() D.Gamma(1, 1):log_prob(dpl.tensor({ -1 })) end, 'GreaterThanEq(lower_bound=0.0)')
    raises(function() D.Normal(0, 1):sample({ -1 }) end, 'sample_shape[1] must be a non-negative integer')
    raises(function() D.kl_divergence(D.Normal(0, 1), D.Gamma(1, 1)) end, 'NotImplementedError: No KL(p || q) is implemented')
    raises(function() D.Independent(D.Normal(0, 1), 1) end, 'Expected reinterpreted_batch_ndims <= len(base_distribution.batch_shape)')
    raises(function() D.Normal('a', 1) end, 'Normal: loc must be a tensor or a number')
    -- validate_args = false: no checks (as PyTorch)
    local d = D.Normal(dpl.zeros(1), dpl.tensor({ -1 }), false)
    assert.is_true(d:log_prob(dpl.zeros(1)):item() ~= d:log_prob(dpl.zeros(1)):item())
    D.Distribution.set_default_validate_args(false)
    local ok = pcall(D.Normal, 0, -1)
    D.Distribution.set_default_validate_args(true)
    assert.is_true(ok)
  end)

  it('register_kl adds a pair; subclasses find their parents\' entry', function()
    local MyNormal = D.Normal:extend('MyNormal')
    local p = MyNormal(dpl.zeros(1), dpl.ones(1))
    assert.are.equal(0, D.kl_divergence(p, D.Normal(dpl.zeros(1), dpl.ones(1))):item())
    D.register_kl(D.Gamma, D.Exponential, function() return dpl.tensor(42) end)
    assert.are.equal(42, D.kl_divergence(D.Gamma(1, 1), D.Exponential(1)):item())
  end)

  it("xlogy's gradient in x where x is 0 is log(y) (0 where y is 0 too), as PyTorch's: Dirichlet/Beta at concentration 1", function()
    local x = T({ 0, 1, 0 }):requires_grad_()
    dpl.xlogy(x, T({ 0.5, 0.5, 0 })):sum():backward()
    assert.are.same({ math.log(0.5), math.log(0.5), 0 }, x.grad:totable())
  end)

  it('tostring names the distribution and its parameter shapes', function()
    assert.are.equal('Normal(loc: [3], scale: [3])', tostring(D.Normal(dpl.zeros(3), 1)))
    -- PyTorch's repr: the parameter's size (torch.Size([2, 4])), one element by value
    assert.are.equal('Categorical(logits: [2, 4])', tostring(D.Categorical({ logits = dpl.zeros(2, 4) })))
    assert.are.equal('Normal(loc: tensor(0.), scale: tensor(1.))', tostring(D.Normal(0, 1)))
  end)
end)

describe('Binomial.sample at large total_count', function()
  it('is exact in distribution and O(1) a draw (inversion below n p = 10, BTRS above; 2^40 drew for hours)', function()
    dpl.manual_seed(3)
    for _, c in ipairs({ { 2 ^ 40, 0.5 }, { 1e6, 0.3 }, { 1000, 0.001 }, { 1000, 0.999 }, { 100, 0.7 } }) do
      local n, p = c[1], c[2]
      local x = D.Binomial(n, p):sample({ 4000 }):double()
      local mean, var = n * p, n * p * (1 - p)
      -- 6 standard errors of the sample mean; the variance within 15%
      assert.is_true(math.abs(x:mean():item() - mean) < 6 * math.sqrt(var / 4000), ('n=%g p=%g mean'):format(n, p))
      assert.is_true(math.abs(x:var():item() / var - 1) < 0.15, ('n=%g p=%g var %g'):format(n, p, x:var():item()))
      assert.is_true(x:min():item() >= 0 and x:max():item() <= n)
    end
    local y = D.Binomial(dpl.tensor({ 0, 100, 1000 }), dpl.tensor({ 0.5, 0, 1 })):sample({ 3 })
    assert.are.same({ { 0, 0, 1000 }, { 0, 0, 1000 }, { 0, 0, 1000 } }, y:tolist())
  end)
end)
