-- dpl.metrics.regression: torchmetrics 0.11's regression metrics on dplhost tensors:
-- MeanSquaredError (squared), MeanAbsoluteError, MeanAbsolutePercentageError,
-- SymmetricMeanAbsolutePercentageError, MeanSquaredLogError, R2Score (num_outputs,
-- adjusted, multioutput), ExplainedVariance, PearsonCorrCoef, SpearmanCorrCoef (mid-ranks),
-- CosineSimilarity, and their functional forms. Sums are kept in float64 (a running
-- variance from sums of squares would lose digits in float32).
local T = require 'dpl.tensor'
local errors = require 'dpl.errors'

local type, tostring, ipairs = type, tostring, ipairs
local fmt = string.format
local lua_error = error
local EPS = 1.17e-06

local function value_error(msg) lua_error(errors.ValueError(msg), 0) end
local function runtime_error(msg) lua_error(errors.RuntimeError(msg), 0) end
local is_tensor = T.is_tensor

return function(M, Metric)
  local F = M.functional
  -- the functional form of a metric class: one update and a compute
  local function functional(cls)
    return function(preds, target, o)
      local m = cls(o)
      m:update(preds, target)
      return m:compute()
    end
  end

  local function check(name, preds, target)
    if not is_tensor(preds) then value_error(fmt('%s: preds must be a tensor, got %s', name, type(preds))) end
    if not is_tensor(target) then value_error(fmt('%s: target must be a tensor, got %s', name, type(target))) end
    local a, b = preds:size(), target:size()
    local same = #a == #b
    for i = 1, #a do if a[i] ~= b[i] then same = false end end
    if not same then
      runtime_error(fmt('%s: predictions and targets are expected to have the same shape, but got %s and %s', name,
        tostring(preds.shape), tostring(target.shape)))
    end
    return preds:double(), target:double()
  end
  local function zero() return T.tensor(0.0, { dtype = 'float64' }) end
  local function out(x, like) return x:to(like or 'float32') end

  -- metrics of a sum over elements divided by their count
  local function mean_of(name, fname, term, keys, post)
    local cls = Metric:extend(name)
    function cls:__init(o)
      o = self:_check_opts(name, o, keys or {})
      Metric.__init(self, o)
      self.opts = o
      self:add_state('sum', zero(), 'sum')
      self:add_state('total', T.tensor(0, { dtype = 'int64' }), 'sum')
    end
    function cls:update(preds, target)
      local p, t = check(name, preds, target)
      self.sum = self.sum + term(p, t, self.opts):sum()
      self.total = self.total + t:numel()
    end
    function cls:compute()
      local v = self.sum / self.total:double()
      if post then v = post(v, self.opts) end
      return out(v)
    end
    M[name] = cls
    F[fname] = functional(cls)
  end
  mean_of('MeanSquaredError', 'mean_squared_error', function(p, t) return (p - t) ^ 2 end, { squared = true, num_outputs = true },
    function(v, o) if o.squared == false then return v:sqrt() end return v end)
  mean_of('MeanAbsoluteError', 'mean_absolute_error', function(p, t) return (p - t):abs() end)
  mean_of('MeanAbsolutePercentageError', 'mean_absolute_percentage_error',
    function(p, t) return (p - t):abs() / t:abs():clamp(EPS) end)
  mean_of('SymmetricMeanAbsolutePercentageError', 'symmetric_mean_absolute_percentage_error',
    function(p, t) return (p - t):abs() * 2 / (p:abs() + t:abs()):clamp(EPS) end)
  mean_of('MeanSquaredLogError', 'mean_squared_log_error', function(p, t) return (p:log1p() - t:log1p()) ^ 2 end)

  -- columns of [N] or [N, num_outputs] inputs
  local function outputs_of(name, p, n_out)
    if p._ndim > 2 then runtime_error(fmt('%s: expected both prediction and target to be 1D or 2D tensors, but received tensors with dimension %s', name, tostring(p.shape))) end
    local k = p._ndim == 2 and tonumber(p._shape[1]) or 1
    if k ~= n_out then
      runtime_error(fmt('%s: expected argument `num_outputs` to match the second dimension of input, but got %d and %d', name, n_out, k))
    end
  end

  local R2Score = Metric:extend('R2Score')
  M.R2Score = R2Score
  R2Score.higher_is_better = true
  function R2Score:__init(o)
    o = self:_check_opts('R2Score', o, { num_outputs = true, adjusted = true, multioutput = true })
    Metric.__init(self, o)
    self.num_outputs = o.num_outputs or 1
    self.adjusted = o.adjusted or 0
    self.multioutput = o.multioutput or 'uniform_average'
    if self.multioutput ~= 'raw_values' and self.multioutput ~= 'uniform_average' and self.multioutput ~= 'variance_weighted' then
      value_error(fmt("R2Score: invalid input to argument `multioutput`. Choose one of the following: ('raw_values', 'uniform_average', 'variance_weighted'), got %s", tostring(self.multioutput)))
    end
    if type(self.adjusted) ~= 'number' or self.adjusted < 0 or self.adjusted ~= math.floor(self.adjusted) then
      value_error('R2Score: `adjusted` parameter should be an integer larger or equal to 0.')
    end
    local k = self.num_outputs
    self:add_state('sum_squared_error', T.zeros(k, { dtype = 'float64' }), 'sum')
    self:add_state('sum_error', T.zeros(k, { dtype = 'float64' }), 'sum')
    self:add_state('residual', T.zeros(k, { dtype = 'float64' }), 'sum')
    self:add_state('total', T.tensor(0, { dtype = 'int64' }), 'sum')
  end
  function R2Score:update(preds, target)
    local p, t = check('R2Score', preds, target)
    outputs_of('R2Score', p, self.num_outputs)
    if p._ndim == 1 then p, t = p:unsqueeze(2), t:unsqueeze(2) end
    self.sum_error = self.sum_error + t:sum(1)
    self.sum_squared_error = self.sum_squared_error + (t * t):sum(1)
    self.residual = self.residual + ((t - p) ^ 2):sum(1)
    self.total = self.total + tonumber(t._shape[0])
  end
  function R2Score:compute()
    local n = self.total:item()
    if n < 2 then runtime_error('R2Score: Needs at least two samples to calculate r2 score.') end
    local mean = self.sum_error / n
    local tss = self.sum_squared_error - self.sum_error * mean
    local raw = 1 - self.residual / tss
    local r2
    if self.multioutput == 'raw_values' then r2 = raw
    elseif self.multioutput == 'uniform_average' then r2 = raw:mean()
    else r2 = (tss / tss:sum() * raw):sum() end
    local k = self.adjusted
    if k ~= 0 then
      if k > n - 1 then
        require('dpl.log').warn('More independent regressions than data points in adjusted r2 score. Falls back to standard r2 score.')
      elseif k == n - 1 then
        require('dpl.log').warn('Division by zero in adjusted r2 score. Falls back to standard r2 score.')
      else
        r2 = 1 - (1 - r2) * (n - 1) / (n - k - 1)
      end
    end
    return out(r2)
  end
  F.r2_score = functional(R2Score)

  local ExplainedVariance = Metric:extend('ExplainedVariance')
  M.ExplainedVariance = ExplainedVariance
  function ExplainedVariance:__init(o)
    o = self:_check_opts('ExplainedVariance', o, { multioutput = true })
    Metric.__init(self, o)
    self.multioutput = o.multioutput or 'uniform_average'
    for _, s in ipairs({ 'sum_error', 'sum_squared_error', 'sum_target', 'sum_squared_target' }) do self:add_state(s, zero(), 'sum') end
    self:add_state('n_obs', T.tensor(0, { dtype = 'int64' }), 'sum')
  end
  function ExplainedVariance:update(preds, target)
    local p, t = check('ExplainedVariance', preds, target)
    local e = t - p
    self.sum_error = self.sum_error + e:sum(1)
    self.sum_squared_error = self.sum_squared_error + (e * e):sum(1)
    self.sum_target = self.sum_target + t:sum(1)
    self.sum_squared_target = self.sum_squared_target + (t * t):sum(1)
    self.n_obs = self.n_obs + tonumber(t._shape[0])
  end
  function ExplainedVariance:compute()
    local n = self.n_obs:double()
    local diff = self.sum_squared_error / n - (self.sum_error / n) ^ 2
    local den = self.sum_squared_target / n - (self.sum_target / n) ^ 2
    local num_nz, den_nz = diff:ne(0), den:ne(0)
    local score = T.where(num_nz:logical_and(den_nz), 1 - diff / T.where(den_nz, den, T.ones_like(den)), T.ones_like(diff))
    score = T.where(num_nz:logical_and(den_nz:logical_not()), T.zeros_like(score), score)
    if self.multioutput == 'raw_values' then return out(score) end
    if self.multioutput == 'uniform_average' then return out(score:mean()) end
    return out((den / den:sum() * score):sum())
  end
  F.explained_variance = functional(ExplainedVariance)

  local PearsonCorrCoef = Metric:extend('PearsonCorrCoef')
  M.PearsonCorrCoef = PearsonCorrCoef
  function PearsonCorrCoef:__init(o)
    o = self:_check_opts('PearsonCorrCoef', o, { num_outputs = true })
    Metric.__init(self, o)
    self.num_outputs = o.num_outputs or 1
    local k = self.num_outputs
    for _, s in ipairs({ 'sx', 'sy', 'sxx', 'syy', 'sxy' }) do self:add_state(s, T.zeros(k, { dtype = 'float64' }), 'sum') end
    self:add_state('n', T.tensor(0, { dtype = 'int64' }), 'sum')
  end
  function PearsonCorrCoef:update(preds, target)
    local p, t = check('PearsonCorrCoef', preds, target)
    outputs_of('PearsonCorrCoef', p, self.num_outputs)
    if p._ndim == 1 then p, t = p:unsqueeze(2), t:unsqueeze(2) end
    self.sx, self.sy = self.sx + p:sum(1), self.sy + t:sum(1)
    self.sxx, self.syy, self.sxy = self.sxx + (p * p):sum(1), self.syy + (t * t):sum(1), self.sxy + (p * t):sum(1)
    self.n = self.n + tonumber(p._shape[0])
  end
  function PearsonCorrCoef:compute()
    local n = self.n:double()
    local cov = self.sxy - self.sx * self.sy / n
    local vx = self.sxx - self.sx * self.sx / n
    local vy = self.syy - self.sy * self.sy / n
    local r = (cov / (vx * vy):sqrt()):clamp(-1, 1)
    return out(self.num_outputs == 1 and r:squeeze(1) or r)
  end
  F.pearson_corrcoef = functional(PearsonCorrCoef)

  -- mid-ranks (1-based) of each column of x [N, k]
  local function ranks(x)
    local cols = {}
    for j = 1, tonumber(x._shape[1]) do
      local c = x:select(2, j)
      local sorted, order = c:sort()
      local _, inverse, counts = T.unique(sorted, { return_inverse = true, return_counts = true })
      local ends = counts:double():cumsum(1)
      local mid = (ends - (counts:double() - 1) / 2):index_select(1, inverse:reshape(-1))
      cols[j] = T.zeros_like(mid):index_copy_(1, order, mid)
    end
    return T.stack(cols, 2)
  end
  local SpearmanCorrCoef = Metric:extend('SpearmanCorrCoef')
  M.SpearmanCorrCoef = SpearmanCorrCoef
  function SpearmanCorrCoef:__init(o)
    o = self:_check_opts('SpearmanCorrCoef', o, { num_outputs = true })
    Metric.__init(self, o)
    self.num_outputs = o.num_outputs or 1
    self:add_state('preds', {}, 'cat')
    self:add_state('target', {}, 'cat')
  end
  function SpearmanCorrCoef:update(preds, target)
    local p, t = check('SpearmanCorrCoef', preds, target)
    outputs_of('SpearmanCorrCoef', p, self.num_outputs)
    if p._ndim == 1 then p, t = p:unsqueeze(2), t:unsqueeze(2) end
    self.preds[#self.preds + 1] = p
    self.target[#self.target + 1] = t
  end
  function SpearmanCorrCoef:compute()
    local rp, rt = ranks(self.preds), ranks(self.target)
    local mp, mt = rp - rp:mean(1, true), rt - rt:mean(1, true)
    local r = (mp * mt):sum(1) / ((mp * mp):sum(1) * (mt * mt):sum(1)):sqrt()
    r = r:clamp(-1, 1)
    return out(self.num_outputs == 1 and r:squeeze(1) or r)
  end
  F.spearman_corrcoef = functional(SpearmanCorrCoef)

  local CosineSimilarity = Metric:extend('CosineSimilarity')
  M.CosineSimilarity = CosineSimilarity
  function CosineSimilarity:__init(o)
    o = self:_check_opts('CosineSimilarity', o, { reduction = true })
    Metric.__init(self, o)
    self.reduction = o.reduction or 'sum'
    if self.reduction ~= 'sum' and self.reduction ~= 'mean' and self.reduction ~= 'none' then
      value_error(fmt("CosineSimilarity: expected argument `reduction` to be one of ('sum', 'mean', 'none', None) but got %s", tostring(self.reduction)))
    end
    self:add_state('preds', {}, 'cat')
    self:add_state('target', {}, 'cat')
  end
  function CosineSimilarity:update(preds, target)
    local p, t = check('CosineSimilarity', preds, target)
    if p._ndim ~= 2 then runtime_error('CosineSimilarity: expected input to be 2D tensors of shape [N, D]') end
    self.preds[#self.preds + 1] = p
    self.target[#self.target + 1] = t
  end
  function CosineSimilarity:compute()
    local p, t = self.preds, self.target
    local sim = (p * t):sum(2) / (p:norm(2, 2) * t:norm(2, 2))
    if self.reduction == 'sum' then sim = sim:sum() elseif self.reduction == 'mean' then sim = sim:mean() end
    return out(sim)
  end
  F.cosine_similarity = functional(CosineSimilarity)
end
