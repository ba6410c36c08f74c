-- gpu_check.lua: the GPU checks of scripts/gpu-check.sh, run by dplhost
-- without busted (the GPU machine may not have it):
--   dplhost scripts/gpu_check.lua ops [OUT.md]     op consistency, CUDA vs CPU (spec/support/cuda_check.lua)
--   dplhost scripts/gpu_check.lua bench [OUT.md]   GEMM TFLOP/s, copy and elementwise bandwidth
--   dplhost scripts/gpu_check.lua train [OUT.md] [DATA_DIR]   an MLP on Fashion-MNIST on cuda:0
--   dplhost scripts/gpu_check.lua nccl [OUT.md]    dist with backend nccl, rank r on cuda:r (one rank: cuda:0)
--   dplhost --nproc 2 scripts/gpu_check.lua dist [OUT.md]   GPU tensors through the shm backend
-- Each prints a markdown table (and appends it to OUT.md when given); the exit
-- status is 1 when a check failed. DPL_GPU_CHECK_ONLY=<Lua pattern> limits `ops`
-- to the matching cases (e.g. 'conv2d' or '^matmul').
package.path = './?.lua;' .. package.path
local dpl = require 'dpl'

local mode, out_path = ...
local out = out_path and assert(io.open(out_path, 'a'))
local function emit(fmt, ...)
  local s = select('#', ...) > 0 and fmt:format(...) or fmt
  io.write(s, '\n')
  io.flush()
  if out then out:write(s, '\n') out:flush() end
end

local clock = dpl.C.dpl_clock
local sync = dpl.cuda.synchronize

local K = require 'spec.support.cuda_check'
local ready, why = K.gpu_ready()
-- DPL_GPU_CHECK_SIMULATED=1: run on DPL_VIRTUAL_GPUS (CPU kernels) to test this script itself
local small = os.getenv('DPL_GPU_CHECK_SIMULATED') == '1'
if small then ready = true end
if not ready then
  emit('**no usable GPU**: %s', why)
  os.exit(1)
end

-- median over `rounds` of the mean time of `iters` calls, after a warm-up
local function timed(f, iters, rounds)
  rounds = rounds or 5
  for _ = 1, 2 do f() end
  sync()
  local ts = {}
  for r = 1, rounds do
    local t0 = clock()
    for _ = 1, iters do f() end
    sync()
    ts[r] = (clock() - t0) / iters
  end
  table.sort(ts)
  return ts[math.floor((rounds + 1) / 2)]
end

local failed = false

if mode == 'ops' then
  dpl.C.dpl_proc_setenv('DPL_CUDA_POISON', '1') -- must precede the first GPU allocation
  emit('| op case | result | max rel. error |')
  emit('|---|---|---|')
  local npass, nfail = 0, 0
  local t0 = clock()
  local only = os.getenv('DPL_GPU_CHECK_ONLY') -- a Lua pattern: rerun some cases only
  for i, c in ipairs(K.cases) do
    if only and not c.name:find(only) then goto continue end
    local ok, detail = K.run_case(c, 'cuda:0', 1000 + i)
    if ok then
      npass = npass + 1
      emit('| %s | pass | %.2g |', c.name, detail)
    else
      nfail = nfail + 1
      emit('| %s | **FAIL** | %s |', c.name, tostring(detail):gsub('|', '/'):gsub('\n', ' '))
    end
    collectgarbage()
    ::continue::
  end
  -- integer matmul runs on the GPU (the int64 kernel), with fixed values
  local ok, e = pcall(function()
    local x = dpl.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = 'int64' }):cuda()
    local r = x:matmul(x):totable()
    return r[1][1] == 7 and r[1][2] == 10 and r[2][1] == 15 and r[2][2] == 22
  end)
  local good = ok and e == true
  emit('| int64 matmul on cuda gives [[7, 10], [15, 22]] | %s | %s |', good and 'pass' or '**FAIL**',
    ok and (good and '' or 'wrong values') or tostring(e))
  if not good then nfail = nfail + 1 else npass = npass + 1 end
  -- dpl.linalg runs on the GPU (cuSOLVER): fixed values as well as the cases above
  local ok3, e3 = pcall(function()
    local A = dpl.tensor({ { 4, 1 }, { 1, 3 } }, { dtype = 'float64' }):cuda()
    local inv, d = dpl.linalg.inv(A):totable(), dpl.linalg.det(A):item()
    return math.abs(inv[1][1] - 3 / 11) < 1e-14 and math.abs(inv[1][2] + 1 / 11) < 1e-14 and d == 11
  end)
  local good3 = ok3 and e3 == true
  emit('| linalg.inv/det on cuda of [[4, 1], [1, 3]] | %s | %s |', good3 and 'pass' or '**FAIL**',
    ok3 and (good3 and '' or 'wrong values') or tostring(e3):gsub('|', '/'):gsub('\n', ' '))
  if good3 then npass = npass + 1 else nfail = nfail + 1 end
  emit('')
  emit('op consistency: %d passed, %d failed (%.1f s)', npass, nfail, clock() - t0)
  local yes, no = dpl.cuda.supported_ops()
  emit('backend ops on the GPU: %s', table.concat(yes, ', '))
  emit('backend ops not on the GPU: %s', table.concat(no, ', '))
  failed = nfail > 0

elseif mode == 'bench' then
  emit('| benchmark (dplhost, cuda:0) | size | result |')
  emit('|---|---|---|')
  for _, spec in ipairs(small and { { 'float32', 128 }, { 'bfloat16', 64 } } or
      { { 'float32', 4096 }, { 'float32', 8192 }, { 'bfloat16', 8192 }, { 'float16', 8192 } }) do
    local dt, n = spec[1], spec[2]
    local a = dpl.randn(n, n, { device = 'cuda:0' }):to(dt)
    local b = dpl.randn(n, n, { device = 'cuda:0' }):to(dt)
    local s = timed(function() a:matmul(b):free() end, dt == 'float32' and 3 or 10)
    emit('| %s GEMM (matmul) | %dx%dx%d | %.1f TFLOP/s |', dt, n, n, n, 2 * n ^ 3 / s / 1e12)
    a:free() b:free()
  end
  local N = small and 2 ^ 16 or 2 ^ 28 -- 1 GiB of float32 per tensor
  local x = dpl.rand(N, { device = 'cuda:0' })
  local y = dpl.rand(N, { device = 'cuda:0' })
  local z = dpl.empty(N, { device = 'cuda:0' })
  local bytes = 4 * N
  local s = timed(function() z:copy_(x) end, 10)
  local copy_bw = 2 * bytes / s / 1e9
  emit('| device-to-device copy (copy_) | 1 GiB | %.0f GB/s (read + write) |', copy_bw)
  s = timed(function() dpl.tensor.add(x, y):free() end, 10)
  local add_bw = 3 * bytes / s / 1e9
  emit('| elementwise add (x + y) | 1 GiB each | %.0f GB/s, %.0f%% of copy |', add_bw, 100 * add_bw / copy_bw)
  s = timed(function() x:relu():free() end, 10)
  emit('| unary relu | 1 GiB | %.0f GB/s |', 2 * bytes / s / 1e9)
  s = timed(function() x:add_(y, 0.5) end, 10)
  emit('| axpy (add_ with alpha) | 1 GiB each | %.0f GB/s |', 3 * bytes / s / 1e9)
  s = timed(function() x:sum() end, 10)
  emit('| sum (all) | 1 GiB | %.0f GB/s |', bytes / s / 1e9)
  local m = dpl.randn(small and 64 or 65536, 1024, { device = 'cuda:0' })
  s = timed(function() m:softmax(2):free() end, 10)
  emit('| softmax over rows | 65536x1024 | %.0f GB/s (in + out) |', 2 * 4 * 65536 * 1024 / s / 1e9)
  local h = dpl.rand(small and 2 ^ 16 or 2 ^ 26)
  s = timed(function() h:to('cuda:0'):free() end, 5, 3)
  emit('| host -> device (:to) | 256 MiB | %.1f GB/s |', 4 * 2 ^ 26 / s / 1e9)
  local d = h:to('cuda:0')
  s = timed(function() d:to('cpu'):free() end, 5, 3)
  emit('| device -> host (:to) | 256 MiB | %.1f GB/s |', 4 * 2 ^ 26 / s / 1e9)
  local st = dpl.cuda.memory_stats(0)
  emit('')
  emit('allocator: %d requests, %d cache hits, %d cudaMalloc, peak %.2f GiB reserved', st.allocations, st.cache_hits,
    st.device_mallocs, st.peak_reserved_bytes / 2 ^ 30)

elseif mode == 'train' then
  local root = select(3, ...)
  local nn, optim, F = dpl.nn, dpl.optim, dpl.nn.functional
  emit('| training (dplhost) | device | result |')
  emit('|---|---|---|')
  local okd, train = pcall(function() return dpl.datasets.FashionMNIST { root = root, train = true } end)
  local X, Y
  if okd then
    X, Y = train.images, train.labels
  else
    emit('| Fashion-MNIST | - | not found (%s): random data instead |', tostring(train):gsub('\n', ' '))
    X, Y = dpl.rand(60000, 1, 28, 28), dpl.randint(1, 11, { 60000 })
  end
  local function run(dev, steps, batch)
    dpl.manual_seed(0)
    local model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
      nn.Linear(128, 10)):to(dev)
    local opt = optim.SGD(model:parameters(), { lr = 0.01, momentum = 0.9 })
    local n = X:size(1)
    local first, last
    local t0
    for s = 1, steps do
      if s == 6 then sync() t0 = clock() end
      local at = ((s - 1) * batch) % (n - batch) + 1
      local x, y = X:narrow(1, at, batch):to(dev), Y:narrow(1, at, batch):to(dev)
      local loss = F.cross_entropy(model(x), y)
      opt:zero_grad()
      loss:backward()
      opt:step()
      if s == 1 then first = loss:item() end
      if s == steps then last = loss:item() end
    end
    sync()
    return (steps - 5) * batch / (clock() - t0), first, last
  end
  for _, dev in ipairs({ 'cuda:0', 'cpu' }) do
    local ok, sps, first, last = pcall(run, dev, (dev == 'cpu' or small) and 200 or 1000, 64)
    if ok then
      emit('| MLP 784-256-128-10, SGD, batch 64 | %s | %.0f samples/s; loss %.3f -> %.3f |', dev, sps, first, last)
      if dev == 'cuda:0' and not (last < first) then failed = true end
    else
      emit('| MLP 784-256-128-10, SGD, batch 64 | %s | **FAIL**: %s |', dev, tostring(sps):gsub('\n', ' '))
      failed = true
    end
  end
  local ok, e = pcall(function()
    local M = dpl.LightningModule:extend('GpuCheckMLP')
    function M:__init()
      dpl.LightningModule.__init(self)
      self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
    end
    function M:forward(x) return self.net(x) end
    function M:training_step(b) return F.cross_entropy(self(b[1]), b[2]) end
    function M:configure_optimizers() return optim.SGD(self:parameters(), { lr = 0.01 }) end
    local ds = dpl.data.TensorDataset(X:narrow(1, 1, 2048), Y:narrow(1, 1, 2048))
    local tr = dpl.Trainer { accelerator = 'gpu', devices = 1, max_epochs = 1, logger = false,
      enable_checkpointing = false, enable_progress_bar = false }
    tr:fit(M(), dpl.data.DataLoader(ds, { batch_size = 64 }))
  end)
  emit('| Trainer{accelerator="gpu", devices=1}:fit (MLP, 32 steps) | cuda:0 | %s |',
    ok and 'pass' or ('**FAIL**: ' .. tostring(e):gsub('\n', ' '):sub(1, 300)))
  failed = failed or not ok
elseif mode == 'nccl' or mode == 'dist' then
  local dist = dpl.dist
  local nccl = mode == 'nccl'
  local ok, e = pcall(function()
    dist.init_process_group { backend = nccl and 'nccl' or 'shm' }
    local r, n = dist.get_rank(), dist.get_world_size()
    -- nccl: each rank on its communicator's GPU (cuda:LOCAL_RANK); shm: every rank on cuda:0
    local G = nccl and 'cuda:' .. dist._group().nccl_device or 'cuda:0'
    local t = dpl.full({ 1000 }, r + 1, { device = G, dtype = 'float32' })
    dist.all_reduce(t)
    assert(t:min():item() == n * (n + 1) / 2 and t:max():item() == n * (n + 1) / 2, 'all_reduce sum')
    local b = dpl.full({ 7, 3 }, r + 5, { device = G, dtype = 'bfloat16' })
    dist.broadcast(b, 0)
    assert(b:eq(5):all():item(), 'broadcast')
    local m = dpl.full({ 5 }, r, { device = G, dtype = 'int64' })
    dist.all_reduce(m, 'max')
    assert(m:eq(n - 1):all():item(), 'all_reduce max')
    local h = dpl.full({ 3 }, r + 1) -- a host tensor in the same group
    dist.all_reduce(h)
    assert(h:eq(n * (n + 1) / 2):all():item(), 'host all_reduce')
    -- every other tensor collective on GPU tensors, against values computed here on the CPU
    local function full(v, shape) return dpl.full(shape or { 2, 3 }, v, { device = G, dtype = 'float32' }) end
    local function same(t, want, what)
      assert(tostring(t.device) == G, what .. ': result on ' .. tostring(t.device))
      local got = t:to('cpu'):to('float64')
      want = type(want) == 'number' and dpl.full(got:size(), want, { dtype = 'float64' }) or want:to('float64')
      local err = got:sub(want):abs():max():item()
      assert(err < 1e-5, ('%s: max error %g (got %s)'):format(what, err, tostring(got)))
    end
    local tri = n * (n + 1) / 2
    local t = full(r + 1); dist.all_reduce(t, 'mean'); same(t, tri / n, 'all_reduce mean')
    t = full(r + 1); dist.reduce(t, n - 1); same(t, r == n - 1 and tri or r + 1, 'reduce')
    local l = dist.all_gather(full(r + 1))
    for i = 1, n do same(l[i], i, 'all_gather[' .. i .. ']') end
    l = {}
    for i = 1, n do l[i] = full(0) end
    dist.all_gather(l, full(r + 1))
    for i = 1, n do same(l[i], i, 'all_gather list[' .. i .. ']') end
    local flat = dpl.zeros({ 6 * n }, { device = G, dtype = 'float32' })
    dist.all_gather(flat, full(r + 1))
    for i = 1, n do same(flat:narrow(1, 6 * (i - 1) + 1, 6), i, 'all_gather flat') end
    l = dist.gather(full(r + 5), nil, 0)
    if r == 0 then for i = 1, n do same(l[i], i + 4, 'gather[' .. i .. ']') end end
    local sl = nil
    if r == 0 then sl = {} for i = 1, n do sl[i] = full(10 * i) end end
    t = full(0); dist.scatter(t, sl, 0); same(t, 10 * (r + 1), 'scatter')
    -- reduce_scatter: rank j's input block k+1 is 10 j + k + 1; rank k gets their sum
    local ins = {}
    for k = 1, n do ins[k] = full(10 * r + k) end
    t = full(0); dist.reduce_scatter(t, ins); same(t, 10 * (tri - n) + n * (r + 1), 'reduce_scatter')
    t = full(0); dist.reduce_scatter(t, dpl.cat(ins):contiguous(), 'max'); same(t, 10 * (n - 1) + r + 1, 'reduce_scatter max')
    -- all_to_all: block k of rank j's input (100 j + k) lands in block j of rank k's output
    local vals, want = {}, {}
    for k = 0, n - 1 do vals[#vals + 1] = 100 * r + k; want[#want + 1] = 100 * k + r end
    local inp = dpl.tensor(vals, { device = G, dtype = 'float32' })
    local out = dpl.zeros({ n }, { device = G, dtype = 'float32' })
    dist.all_to_all_single(out, inp)
    same(out, dpl.tensor(want), 'all_to_all_single')
    local outs, inl = {}, {}
    for k = 1, n do outs[k] = full(0); inl[k] = full(100 * r + k - 1) end
    dist.all_to_all(outs, inl)
    for k = 1, n do same(outs[k], 100 * (k - 1) + r, 'all_to_all[' .. k .. ']') end
    -- a subgroup of every rank, and one of rank 0 alone (their own NCCL communicators)
    local all, solo = dist.new_group(), dist.new_group({ 0 })
    t = full(r + 1); dist.all_reduce(t, { group = all }); same(t, tri, 'subgroup all_reduce')
    if r == 0 then
      t = full(3); dist.all_gather(t, { group = solo })
      t = full(7); dist.all_reduce(t, { group = solo }); same(t, 7, 'one-rank subgroup all_reduce')
    end
    dist.destroy_process_group(solo)
    -- DDP's gradient sync with cuda:0 gradients (flat buckets, mean); world_size 2 forces
    -- the sync with one rank (the mean over the group's ranks)
    local S = require('dpl.strategies.ddp').DDPStrategy
    local s = setmetatable({ world_size = math.max(n, 2), _ddp_kwargs = {} }, { __index = S })
    local params = { full(0):requires_grad_(), full(0, { 5 }):requires_grad_() }
    params[1].grad = full(r + 1)
    params[2].grad = full(2 * r, { 5 })
    s:_sync_gradients({ parameters = function() return params end })
    same(params[1].grad, tri / n, 'ddp grad 1')
    same(params[2].grad, n - 1, 'ddp grad 2')
    dist.barrier()
    assert(dist.get_backend() == (nccl and 'nccl' or 'shm'), 'backend ' .. tostring(dist.get_backend()))
    dist.destroy_process_group()
  end)
  local rank = tonumber(os.getenv('RANK') or '0')
  if rank == 0 then
    emit('| dist %s: every tensor collective, subgroups, DDP buckets on %s | %s | %s |', nccl and 'backend nccl' or
      'backend shm, GPU tensors through host memory', nccl and 'cuda:LOCAL_RANK' or 'cuda:0', os.getenv('WORLD_SIZE') or '1',
      ok and 'pass' or ('**FAIL**: ' .. tostring(e):gsub('\n', ' ')))
  elseif not ok then
    io.stderr:write(tostring(e), '\n')
  end
  failed = not ok
else
  io.stderr:write('usage: dplhost scripts/gpu_check.lua ops|bench|train|nccl|dist [OUT.md] [DATA_DIR]\n')
  os.exit(2)
end

if out then out:close() end
os.exit(failed and 1 or 0, true) -- closing the state: every tensor released (a sanitizer build reports no leaks)
