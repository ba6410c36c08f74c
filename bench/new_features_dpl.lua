-- new_features_dpl.lua: dplhost's side of bench/new_features.sh: dpl.special, dpl.distributions,
-- dpl.metrics, Conv3d / MaxPool3d, EmbeddingBag, scatter_reduce and histogram on the shapes of
-- bench/new_features_torch.py. Prints "name value" lines (us per call: median of REPS timed loops
-- after a warm-up). Threads: DPL_NUM_THREADS.
--   dplhost bench/new_features_dpl.lua [case ...]
local dpl = require 'dpl'
local nn = dpl.nn
local D = dpl.distributions
local SP = dpl.special
local tm = dpl.metrics
local clock = dpl.C.dpl_clock

local function median(t) table.sort(t) return t[math.ceil(#t / 2)] end
local function time_us(step, reps)
  local t0 = clock()
  repeat step() until clock() - t0 > 0.2
  local r = {}
  for k = 1, reps do
    local n, t1 = 0, clock()
    repeat step(); n = n + 1 until clock() - t1 > 0.05
    r[k] = (clock() - t1) / n * 1e6
  end
  return median(r)
end

dpl.manual_seed(0)
local N1M, N100K = 1000000, 100000
local xpos = dpl.rand(N1M) * 10 + 0.1        -- lgamma, digamma, i0 arguments in (0.1, 10.1)
local xn = dpl.randn(N1M) * 2                 -- erfc
local T = function(v) return dpl.tensor(v) end
local normal, gamma = D.Normal(T(0.5), T(2.0)), D.Gamma(T(2.0), T(1.5))
local beta, poisson = D.Beta(T(2.0), T(3.0)), D.Poisson(T(4.0))
local cat = D.Categorical({ probs = dpl.rand(10) + 0.1 })
local vn, vg = dpl.randn(N100K), dpl.rand(N100K) * 5 + 0.01
local preds, target = dpl.randn(256, 10), dpl.randint(1, 11, { 256 })
local acc = tm.MulticlassAccuracy({ num_classes = 10 })
local f1 = tm.MulticlassF1Score({ num_classes = 10 })
local scores, labels = dpl.rand(N100K), dpl.randint(0, 2, { N100K })
local auroc = tm.BinaryAUROC()
local conv = nn.Conv3d(8, 16, 3, { padding = 1 })
local x3 = dpl.randn(4, 8, 16, 16, 16)
local x3g = x3:clone():requires_grad_()
local pool = nn.MaxPool3d(2)
local ebw = dpl.randn(10000, 64)
local eb = nn.EmbeddingBag.from_pretrained(ebw, false, { mode = 'mean' })
local ids = dpl.randint(1, 10001, { 4096 * 8 })
local offs = dpl.arange(0, 4096, { dtype = 'int64' }) * 8 + 1
local src, sidx = dpl.randn(N1M), dpl.randint(1, 1001, { N1M })
local starget = dpl.zeros(1000)
local hx = dpl.randn(N1M)
local cases = {
  lgamma_1m = function() return SP.gammaln(xpos) end,
  digamma_1m = function() return SP.digamma(xpos) end,
  erfc_1m = function() return SP.erfc(xn) end,
  i0_1m = function() return SP.i0(xpos) end,
  normal_sample_100k = function() return normal:sample({ N100K }) end,
  gamma_sample_100k = function() return gamma:sample({ N100K }) end,
  beta_sample_100k = function() return beta:sample({ N100K }) end,
  poisson_sample_100k = function() return poisson:sample({ N100K }) end,
  categorical_sample_100k = function() return cat:sample({ N100K }) end,
  normal_log_prob_100k = function() return normal:log_prob(vn) end,
  gamma_log_prob_100k = function() return gamma:log_prob(vg) end,
  acc_f1_step = function()
    acc:update(preds, target); f1:update(preds, target)
    return acc:compute(), f1:compute()
  end,
  auroc_100k = function()
    auroc:reset(); auroc:update(scores, labels)
    return auroc:compute()
  end,
  conv3d_fwd_bwd = function()
    conv:zero_grad(); x3g.grad = nil
    conv(x3g):sum():backward()
  end,
  maxpool3d = function() return dpl.no_grad(function() return pool(x3) end) end,
  embedding_bag_mean = function() return dpl.no_grad(function() return eb(ids, offs) end) end,
  scatter_reduce_amax_1m = function() return starget:scatter_reduce(1, sidx, src, 'amax') end,
  histogram_1m = function() return hx:histogram(100) end,
}
local order = { 'lgamma_1m', 'digamma_1m', 'erfc_1m', 'i0_1m', 'normal_sample_100k', 'gamma_sample_100k',
  'beta_sample_100k', 'poisson_sample_100k', 'categorical_sample_100k', 'normal_log_prob_100k',
  'gamma_log_prob_100k', 'acc_f1_step', 'auroc_100k', 'conv3d_fwd_bwd', 'maxpool3d', 'embedding_bag_mean',
  'scatter_reduce_amax_1m', 'histogram_1m' }
local want = {}
for i = 1, #arg do want[arg[i]] = true end
for _, k in ipairs(order) do
  if next(want) == nil or want[k] then
    print(('%s_us %.3f'):format(k, time_us(cases[k], tonumber(os.getenv('REPS') or 5))))
    io.stdout:flush()
  end
end
