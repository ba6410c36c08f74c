-- dpl.distributions_kl: kl_divergence(p, q) and register_kl(P, Q, fn) of dpl.distributions: a
-- registry of KL(p || q) by the classes of p and q (the most specific pair registered wins,
-- walking p's class chain, then q's), with PyTorch's closed forms for the pairs of one family.
-- dpl.distributions installs it (require('dpl.distributions_kl')(D, helpers)) once its classes exist.
local T = require 'dpl.tensor'
local SP = require 'dpl.special'
local class = require 'dpl.class'

local type, getmetatable, rawget = type, getmetatable, rawget
local huge = math.huge
local fmt = string.format

return function(D, H)
  local Distribution = D.Distribution
  local value_error, not_impl, no_grad, softplus = H.value_error, H.not_impl, H.no_grad, H.softplus
  local lbeta, half_log_det, batch_mahalanobis, sum_rightmost = H.lbeta, H.half_log_det, H.batch_mahalanobis, H.sum_rightmost
  local Normal, LogNormal, HalfNormal, Bernoulli, Categorical, OneHotCategorical, Uniform, Exponential, Laplace, Gamma, Beta, Dirichlet, Poisson, Geometric, Binomial, MultivariateNormal, Independent =
    D.Normal, D.LogNormal, D.HalfNormal, D.Bernoulli, D.Categorical, D.OneHotCategorical, D.Uniform, D.Exponential, D.Laplace, D.Gamma, D.Beta, D.Dirichlet, D.Poisson, D.Geometric, D.Binomial, D.MultivariateNormal, D.Independent

  local KL = {}
  --- register_kl(P, Q, fn): kl_divergence(p, q) for instances of P and Q (subclasses included)
  -- P is Distribution or one of its subclasses (a class table, not an instance)
  local function is_dist_class(P)
    if type(P) ~= 'table' then return false end
    local c = P
    while c do
      if c == Distribution then return true end
      c = rawget(c, 'super')
    end
    return false
  end
  local function what(v)
    if type(v) ~= 'table' then return type(v) end
    if class.is_instance(v, Distribution) then return 'an instance of ' .. tostring(v.__name) .. ' (pass its class)' end
    return 'a table that is not a Distribution class'
  end
  function D.register_kl(P, Q, fn)
    if not is_dist_class(P) then value_error('register_kl: expected P to be a Distribution subclass, got ' .. what(P)) end
    if not is_dist_class(Q) then value_error('register_kl: expected Q to be a Distribution subclass, got ' .. what(Q)) end
    if type(fn) ~= 'function' then value_error('register_kl: fn must be a function, got ' .. type(fn)) end
    KL[P] = KL[P] or {}
    KL[P][Q] = fn
  end
  --- kl_divergence(p, q): KL(p || q), batch-shaped
  function D.kl_divergence(p, q)
    if not (class.is_instance(p, Distribution) and class.is_instance(q, Distribution)) then
      value_error('kl_divergence: expected two distributions')
    end
    -- the most specific registered pair: walk p's class chain, then q's
    local cp = getmetatable(p)
    while cp do
      local row = KL[cp]
      if row then
        local cq = getmetatable(q)
        while cq do
          if row[cq] then return row[cq](p, q) end
          cq = rawget(cq, 'super')
        end
      end
      cp = rawget(cp, 'super')
    end
    not_impl(fmt('No KL(p || q) is implemented for p = %s, q = %s', p.__name, q.__name))
  end
  local function infs_where(cond, x) return T.where(cond, T.full_like(x, huge), x) end

  D.register_kl(Normal, Normal, function(p, q)
    local vr = (p.scale / q.scale) ^ 2
    local t1 = ((p.loc - q.loc) / q.scale) ^ 2
    return (vr + t1 - 1 - vr:log()) * 0.5
  end)
  D.register_kl(LogNormal, LogNormal, function(p, q) return D.kl_divergence(p.base_dist, q.base_dist) end)
  D.register_kl(HalfNormal, HalfNormal, function(p, q) return D.kl_divergence(p.base_dist, q.base_dist) end)
  D.register_kl(Bernoulli, Bernoulli, function(p, q)
    local t1 = p.probs * (softplus(-q.logits) - softplus(-p.logits))
    t1 = infs_where(q.probs:eq(0), t1)
    t1 = T.where(p.probs:eq(0), T.zeros_like(t1), t1)
    local t2 = (1 - p.probs) * (softplus(q.logits) - softplus(p.logits))
    t2 = infs_where(q.probs:eq(1), t2)
    t2 = T.where(p.probs:eq(1), T.zeros_like(t2), t2)
    return t1 + t2
  end)
  D.register_kl(Categorical, Categorical, function(p, q)
    local t = p.probs * (p.logits - q.logits)
    t = infs_where(q.probs:eq(0), t)
    t = T.where(p.probs:eq(0), T.zeros_like(t), t)
    return t:sum(-1)
  end)
  D.register_kl(OneHotCategorical, OneHotCategorical, function(p, q) return D.kl_divergence(p._categorical, q._categorical) end)
  D.register_kl(Uniform, Uniform, function(p, q)
    local r = ((q.high - q.low) / (p.high - p.low)):log()
    return infs_where(q.low:gt(p.low):logical_or(q.high:lt(p.high)), r)
  end)
  D.register_kl(Exponential, Exponential, function(p, q)
    local rr = q.rate / p.rate
    return -rr:log() + rr - 1
  end)
  D.register_kl(Laplace, Laplace, function(p, q)
    local sr = p.scale / q.scale
    local d = (p.loc - q.loc):abs()
    return -sr:log() + d / q.scale + sr * (-d / p.scale):exp() - 1
  end)
  D.register_kl(Gamma, Gamma, function(p, q)
    local t1 = q.concentration * (p.rate / q.rate):log()
    local t2 = SP.gammaln(q.concentration) - SP.gammaln(p.concentration)
    local t3 = (p.concentration - q.concentration) * SP.digamma(p.concentration)
    local t4 = (q.rate - p.rate) * (p.concentration / p.rate)
    return t1 + t2 + t3 + t4
  end)
  D.register_kl(Beta, Beta, function(p, q)
    local a1, b1, a2, b2 = p.concentration1, p.concentration0, q.concentration1, q.concentration0
    return lbeta(a2, b2) - lbeta(a1, b1) + (a1 - a2) * SP.digamma(a1) + (b1 - b2) * SP.digamma(b1) +
        (a2 - a1 + b2 - b1) * SP.digamma(a1 + b1)
  end)
  D.register_kl(Dirichlet, Dirichlet, function(p, q)
    local cp, cq = p.concentration, q.concentration
    local sp_, sq = cp:sum(-1), cq:sum(-1)
    local t1 = SP.gammaln(sp_) - SP.gammaln(sq)
    local t2 = (SP.gammaln(cp) - SP.gammaln(cq)):sum(-1)
    local t3 = cp - cq
    local t4 = SP.digamma(cp) - SP.digamma(sp_):unsqueeze(-1)
    return t1 - t2 + (t3 * t4):sum(-1)
  end)
  D.register_kl(Poisson, Poisson, function(p, q)
    return p.rate * (p.rate:log() - q.rate:log()) - (p.rate - q.rate)
  end)
  D.register_kl(Geometric, Geometric, function(p, q)
    return -p:entropy() - (-q.probs):log1p() / p.probs - q.logits
  end)
  D.register_kl(Binomial, Binomial, function(p, q)
    if not no_grad(function() return p.total_count:eq(q.total_count):all():item() end) then
      not_impl('KL between Binomials where q.total_count > p.total_count is not implemented')
    end
    local n = p.total_count
    local kl = n * (p.probs * (p.logits - q.logits) + (-p.probs):log1p() - (-q.probs):log1p())
    return infs_where(q.probs:eq(0):logical_and(p.probs:gt(0)), kl)
  end)
  D.register_kl(MultivariateNormal, MultivariateNormal, function(p, q)
    local k = p.event_shape[1]
    local Lp, Lq = p._unbroadcasted_scale_tril, q._unbroadcasted_scale_tril
    local LA = require 'dpl.linalg'
    local half = half_log_det(Lq) - half_log_det(Lp)
    local bl = T.broadcast_tensors({ Lp, Lq })
    local term2 = LA.solve_triangular(bl[2], bl[1], { upper = false }) -- Lq^-1 Lp
    local t2 = (term2 * term2):sum({ -2, -1 })
    local t3 = batch_mahalanobis(Lq, q.loc - p.loc)
    return half + (t2 + t3 - k) * 0.5
  end)
  D.register_kl(Independent, Independent, function(p, q)
    if p.reinterpreted_batch_ndims ~= q.reinterpreted_batch_ndims then
      not_impl('KL between Independents with different reinterpreted_batch_ndims is not implemented')
    end
    return sum_rightmost(D.kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)
  end)
end
