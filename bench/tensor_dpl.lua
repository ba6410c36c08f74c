-- tensor_dpl.lua: dplhost's side of bench/tensor.sh. Prints "name value" lines
-- (µs per op, GFLOP/s) for sgemm, elementwise ops on 1M floats and the per-op
-- overhead on 4x4 tensors. Threads: DPL_NUM_THREADS (the script sets it).
local dpl = require 'dpl'
local clock = dpl.C.dpl_clock

local function median(t) table.sort(t) return t[math.ceil(#t / 2)] end
local function allocated() return dpl.memory_stats().total_bytes end
local function time_us(f, n, reps)
  -- warm up past a few GC cycles: steady state, as in a training loop. Tensor memory is
  -- collected every 32 MB or more of new tensors, and the first cycle of a process pays
  -- the page faults of fresh memory (a 32 KB result: ~15 us more per call), so the
  -- warm-up runs 50 ms and at least 96 MB of results (3 cycles), 1 s at most
  local t0, b0 = clock(), allocated()
  repeat f() until clock() - t0 > 0.05 and (allocated() - b0 > 96e6 or clock() - t0 > 1)
  local r = {}
  for k = 1, reps or 5 do
    local t0 = clock()
    for i = 1, n do f() end
    r[k] = (clock() - t0) / n * 1e6
  end
  return median(r)
end

print('blas ' .. dpl.blas_info():gsub(' ', '_'))
print('threads ' .. dpl.get_num_threads())

for _, s in ipairs({ { 1024, 1024, 1024 }, { 64, 784, 256 }, { 64, 256, 128 }, { 64, 128, 10 }, { 784, 64, 256 } }) do
  local m, k, n = s[1], s[2], s[3]
  local a, b = dpl.rand(m, k), dpl.rand(k, n)
  if m == 784 then a = dpl.rand(k, m):t() end -- the MLP's weight gradient: x^T @ grad, a transposed operand
  local reps = math.max(3, math.floor(2e8 / (2 * m * n * k)))
  a:matmul(b)
  local us = time_us(function() return a:matmul(b) end, reps)
  print(('sgemm_%dx%dx%d_us %.3f'):format(m, k, n, us))
  print(('sgemm_%dx%dx%d_gflops %.2f'):format(m, k, n, 2 * m * n * k / us / 1e3))
end

local x, y = dpl.rand(1000000), dpl.rand(1000000)
print(('add_1M_us %.2f'):format(time_us(function() return x + y end, 200)))
print(('mul_1M_us %.2f'):format(time_us(function() return x * y end, 200)))
print(('relu_1M_us %.2f'):format(time_us(function() return x:relu() end, 200)))
print(('add_inplace_1M_us %.2f'):format(time_us(function() return x:add_(y) end, 200)))

local a, b = dpl.ones(4, 4), dpl.ones(4, 4)
print(('add_4x4_us %.4f'):format(time_us(function() return a + b end, 1000000)))
local l = dpl.randn(64, 10)
local w = dpl.randn(10, 10)
print(('matmul_64x10_us %.4f'):format(time_us(function() return l:matmul(w) end, 200000)))

-- the CNN's second convolution (batch 64) and its pooling
local cx, cw, cb = dpl.randn(64, 32, 14, 14), dpl.randn(64, 32, 3, 3), dpl.randn(64)
local gy = dpl.randn(64, 64, 14, 14)
print(('conv2d_fwd_us %.1f'):format(time_us(function() return dpl.conv2d(cx, cw, cb, { padding = 1 }) end, 5, 3)))
print(('conv2d_bwd_us %.1f'):format(time_us(function() return dpl.conv2d_backward(gy, cx, cw, { padding = 1 }) end, 3, 3)))
print(('max_pool2d_us %.1f'):format(time_us(function() return dpl.max_pool2d(gy, 2) end, 20, 3)))
-- the CNN's first convolution: one input channel, 28x28
local c1x, c1w, c1b = dpl.randn(64, 1, 28, 28), dpl.randn(32, 1, 3, 3), dpl.randn(32)
local c1gy = dpl.randn(64, 32, 28, 28)
print(('conv2d_c1_fwd_us %.1f'):format(time_us(function() return dpl.conv2d(c1x, c1w, c1b, { padding = 1 }) end, 10, 3)))
print(('conv2d_c1_bwd_us %.1f'):format(time_us(function() return dpl.conv2d_backward(c1gy, c1x, c1w, { padding = 1 }) end, 5, 3)))

-- the PyTorch methods added later: sorting, scans, index writes, math (1M floats / a 1000x1000 matrix)
local s1 = dpl.randn(1000000)
local m2 = dpl.randn(1000, 1000)
local idx = dpl.randint(1, 1001, { 1000, 1000 })
print(('sort_1M_us %.1f'):format(time_us(function() return s1:sort() end, 3, 3)))
print(('topk10_1M_us %.1f'):format(time_us(function() return s1:topk(10) end, 10, 3)))
print(('cumsum_1000x1000_us %.1f'):format(time_us(function() return m2:cumsum(2) end, 20, 3)))
print(('scatter_add_1000x1000_us %.1f'):format(time_us(function() return m2:clone():scatter_add_(2, idx, m2) end, 10, 3)))
print(('softplus_1M_us %.1f'):format(time_us(function() return s1:softplus() end, 50, 3)))
-- index_select of 1000 rows (1-based, read in place by C) and F.embedding of a [64, 128] batch of ids
local isx = dpl.randint(1, 1001, { 1000 })
print(('index_select_1000x1000_us %.1f'):format(time_us(function() return m2:index_select(1, isx) end, 20, 3)))
local ew, eids = dpl.randn(30000, 256), dpl.randint(1, 30001, { 64, 128 })
print(('embedding_64x128_30000x256_us %.1f'):format(time_us(function() return dpl.nn.functional.embedding(eids, ew) end, 20, 3)))

-- transcendental elementwise ops on 1M float32 (randn; log1p on rand in [0, 1))
for _, op in ipairs({ 'exp', 'tanh', 'gelu', 'elu', 'mish' }) do
  print(('%s_1M_us %.1f'):format(op, time_us(function() return s1[op](s1) end, 50, 3)))
end
print(('log1p_1M_us %.1f'):format(time_us(function() return x:log1p() end, 50, 3)))

-- cross_entropy forward + backward over 1000 classes (256 rows of float32 logits)
local ce_x, ce_t = dpl.randn(256, 1000), dpl.randint(1, 1001, { 256 })
print(('cross_entropy_256x1000_fwd_us %.1f'):format(time_us(function() return dpl.nn.functional.cross_entropy(ce_x, ce_t) end, 50, 3)))
print(('cross_entropy_256x1000_bwd_us %.1f'):format(time_us(function() return dpl.cross_entropy_backward(dpl.tensor(1), ce_x, ce_t) end, 50, 3)))
