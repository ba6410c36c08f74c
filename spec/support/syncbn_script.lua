-- syncbn_script.lua: nn.SyncBatchNorm under dplhost --nproc 2 against nn.BatchNorm2d on the
-- whole batch in one process. Each rank takes its half of a [6, 3, 2, 2] batch (rank 0:
-- samples 1-2, rank 1: samples 3-6, uneven on purpose); prints the largest differences of the
-- output, the input gradient, the weight/bias gradients (summed over the ranks) and the
-- running statistics.
local dpl = require 'dpl'
local nn, dist = dpl.nn, dpl.dist
dist.init_process_group { backend = 'shm' }
local rank = dist.get_rank()
dpl.manual_seed(3)
local x = dpl.randn(6, 3, 2, 2) * 2 + 1
local gy = dpl.randn(6, 3, 2, 2)
local ref = nn.BatchNorm2d(3)
local sync = nn.SyncBatchNorm(3)
dpl.no_grad(function()
  ref.weight:copy_(dpl.tensor({ 0.5, 1.5, -1 })) ref.bias:copy_(dpl.tensor({ 0.1, 0, -0.2 }))
  sync.weight:copy_(ref.weight) sync.bias:copy_(ref.bias)
end)
local xr = x:clone():requires_grad_()
local yr = ref(xr)
yr:backward(gy)
local lo, n = rank == 0 and 1 or 3, rank == 0 and 2 or 4
local xs = x:narrow(1, lo, n):clone():requires_grad_()
local ys = sync(xs)
ys:backward(gy:narrow(1, lo, n))
local function maxdiff(a, b) return (a - b):abs():max():item() end
local gw, gb = sync.weight.grad:clone(), sync.bias.grad:clone()
dist.all_reduce(gw) dist.all_reduce(gb)
print(('rank %d out %.3g gx %.3g gw %.3g gb %.3g rm %.3g rv %.3g'):format(rank,
  maxdiff(ys, yr:narrow(1, lo, n)), maxdiff(xs.grad, xr.grad:narrow(1, lo, n)), maxdiff(gw, ref.weight.grad),
  maxdiff(gb, ref.bias.grad), maxdiff(sync.running_mean, ref.running_mean), maxdiff(sync.running_var, ref.running_var)))
-- eval: the running statistics, no communication
sync:eval() ref:eval()
print(('rank %d eval %.3g'):format(rank, maxdiff(sync(xs), ref(x:narrow(1, lo, n)))))
dist.destroy_process_group()
