-- train_fmnist_dpl.lua: the dplhost side of bench/train_fmnist.sh, the same recipe and
-- timing as /work/shared/bench/torch/fmnist_common.py's train_single: training
-- samples/s over the epoch loops (shuffle + batch gather + step; loading and evaluation
-- excluded). Prints one line of `key value` pairs.
--   dplhost bench/train_fmnist_dpl.lua --model mlp|cnn --batch 64 --epochs 1 --threads 1 [--max_steps N]
local ffi = require 'ffi'
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional

local args = { model = 'mlp', batch = 64, epochs = 1, threads = 1, max_steps = 0, seed = 0, opt = 'sgd' }
do
  local a = { ... }
  for i = 1, #a, 2 do
    local k = a[i]:match('^%-%-([%w_]+)$')
    if not k then error('bad argument ' .. a[i]) end
    args[k] = tonumber(a[i + 1]) or a[i + 1]
  end
end
dpl.set_num_threads(args.threads)

ffi.cdef [[ int clock_gettime(int clk, struct timespec_b *ts); struct timespec_b { long s; long ns; }; ]]
local ts = ffi.new('struct timespec_b')
local function now() ffi.C.clock_gettime(1, ts) return tonumber(ts.s) + tonumber(ts.ns) * 1e-9 end

dpl.manual_seed(args.seed)
local t0 = now()
local train = dpl.datasets.FashionMNIST { train = true }
local test = dpl.datasets.FashionMNIST { train = false }
local load_s = now() - t0

local model
if args.model == 'cnn' then
  model = nn.Sequential(nn.Conv2d(1, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 5), nn.ReLU(),
    nn.MaxPool2d(2), nn.Flatten(), nn.Linear(512, 10))
else
  model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
end
local opt = args.opt == 'adam' and dpl.optim.Adam(model:parameters(), { lr = args.lr or 1e-3 })
  or dpl.optim.SGD(model:parameters(), { lr = args.lr or 0.1, momentum = 0.9 })
local loader = dpl.data.DataLoader(train, { batch_size = args.batch, shuffle = true, seed = args.seed })

local samples, loop_s, steps = 0, 0, 0
for ep = 0, args.epochs - 1 do
  loader:set_epoch(ep)
  local te0 = now()
  local bi = 0
  for batch in loader:iter() do
    if args.max_steps > 0 and bi >= args.max_steps then break end
    local x, y = batch[1], batch[2]
    opt:zero_grad()
    local loss = F.cross_entropy(model(x), y)
    loss:backward()
    opt:step()
    if bi % 100 == 0 then local _ = loss:item() end
    samples = samples + x:size(1)
    bi, steps = bi + 1, steps + 1
  end
  loop_s = loop_s + now() - te0
end

model:eval()
local correct = 0
dpl.no_grad(function()
  for s = 1, test.n, 1000 do
    local n = math.min(1000, test.n - s + 1)
    correct = correct + model(test.images:narrow(1, s, n)):argmax(2):eq(test.labels:narrow(1, s, n)):sum():item()
  end
end)
local rss = 0
for line in io.lines('/proc/self/status') do
  local v = line:match('^VmHWM:%s+(%d+)')
  if v then rss = tonumber(v) end
end
-- pool_contention: times the kernel threads found the machine oversubscribed (bench/oversubscribed.sh)
print(('train_samples_per_s %.1f steps %d test_acc %.4f data_load_s %.3f peak_rss_kb %d blas %s pool_contention %d'):format(
  samples / loop_s, steps, correct / test.n, load_s, rss, (dpl.blas_info():match('core (%S+)') or '?'),
  (function() -- (-1: a binary without it)
    local ok, n = pcall(function() return tonumber(require('dpl.capi').C.dpl_pool_contention()) end)
    return ok and n or -1
  end)()))
