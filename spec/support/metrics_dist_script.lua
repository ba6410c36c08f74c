-- metrics_dist_script.lua: one rank of spec/metrics_spec.lua's distributed check. Each rank
-- updates metrics with its own share of one data set (of different lengths: 5 and 3
-- samples); compute() must give the value over all of it, which rank 0 also computes
-- alone on the whole set. Prints "METRICS-DIST rank <r> ok" or the first difference.
local dpl = require 'dpl'
local dist = dpl.dist
dist.init_process_group({ backend = 'shm' })
local R = dist.get_rank()
local tm = dpl.metrics
local scores = dpl.tensor({ { 0.1, 0.8, 0.1 }, { 0.7, 0.2, 0.1 }, { 0.2, 0.2, 0.6 }, { 0.3, 0.4, 0.3 },
  { 0.5, 0.3, 0.2 }, { 0.1, 0.1, 0.8 }, { 0.3, 0.3, 0.4 }, { 0.6, 0.3, 0.1 } })
local y = dpl.tensor({ 2, 1, 2, 3, 1, 3, 1, 2 }, { dtype = 'int64' })
local x = dpl.tensor({ 0.3, 1.2, -0.5, 2.0, 0.7, 1.1, -1.0, 0.2 })
local z = dpl.tensor({ 0.1, 1.0, -0.2, 2.5, 0.2, 0.9, -1.3, 0.0 })
local lo, n = R == 0 and 1 or 6, R == 0 and 5 or 3
-- local = true: the metrics do not sync (rank 0's reference over the whole data set)
local function make(loc)
  local s
  if loc then s = false end
  return {
    acc = tm.Accuracy({ task = 'multiclass', num_classes = 3, average = 'macro', sync_on_compute = s }),
    auroc = tm.AUROC({ task = 'multiclass', num_classes = 3, sync_on_compute = s }),
    mse = tm.MeanSquaredError({ sync_on_compute = s }), r2 = tm.R2Score({ sync_on_compute = s }),
    spearman = tm.SpearmanCorrCoef({ sync_on_compute = s }), maxm = tm.MaxMetric({ sync_on_compute = s }),
    mean = tm.MeanMetric({ sync_on_compute = s }),
  }
end
local function feed(ms, a, k)
  local s, t = scores:narrow(1, a, k), y:narrow(1, a, k)
  ms.acc:update(s, t); ms.auroc:update(s, t)
  local xa, za = x:narrow(1, a, k), z:narrow(1, a, k)
  ms.mse:update(xa, za); ms.r2:update(xa, za); ms.spearman:update(xa, za); ms.maxm:update(xa); ms.mean:update(xa)
end
local mine = make()
feed(mine, lo, n)
-- (in one order on every rank: compute() is a collective; pairs' order differs between processes)
local names = { 'acc', 'auroc', 'mse', 'r2', 'spearman', 'maxm', 'mean' }
local got = {}
for _, k in ipairs(names) do got[k] = mine[k]:compute():item() end
local all = make(true)
feed(all, 1, 8)
local bad
for _, k in ipairs(names) do
  local want = all[k]:compute():item()
  if math.abs(want - got[k]) > 1e-5 then bad = ('%s: %s, over all the data %s'):format(k, got[k], want) end
end
print(('METRICS-DIST rank %d %s'):format(R, bad or 'ok'))
dist.destroy_process_group()
