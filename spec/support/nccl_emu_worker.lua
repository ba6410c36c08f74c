-- nccl_emu_worker.lua MODE: run by spec/cuda_emu_spec.lua under the CUDA emulator
-- (scripts/cuda-emu/run-ops.sh) with DPL_CUDA_EMU_GPUS=2.
--   colls   (dplhost --nproc 2): backend nccl, rank r on cuda:r; every tensor collective
--           on every dtype and op dpl.dist maps to NCCL, roots 0 and 1, chunked messages,
--           subgroups (ncclCommSplit), against values computed here on the CPU for both
--           ranks. Prints 'NCCL-EMU-OK rank R device D checks N'.
--   ddp     (dplhost --nproc 2): a Trainer fit with strategy='ddp', accelerator='gpu',
--           devices=2 (batch B per rank); prints the backend and device each rank trained
--           with, and rank 0 the final weights.
--   single  (one process): the same fit on the CPU with batch 2B.
--   types   (dplhost --nproc 2): ncclAllReduce called directly on int8, uint32 and uint64.
--   errors [skip] (dplhost --nproc 2): calls that disagree across ranks, or that one rank
--           never makes; prints the errors dpl.dist raises.
local dpl = require 'dpl'
local dist = dpl.dist
local mode = arg[1]

if mode == 'colls' then
  dist.init_process_group { backend = 'nccl' }
  local r, n = dist.get_rank(), dist.get_world_size()
  assert(n == 2, 'two ranks expected')
  local G = 'cuda:' .. dist._group().nccl_device
  assert(dist.get_backend() == 'nccl', 'backend ' .. tostring(dist.get_backend()))
  local checks = 0
  local function cpu_list(t) return t:to('cpu'):to('float64'):view(-1):tolist() end
  local function same(got, want, what, tol)
    assert(tostring(got.device) == G, what .. ': result on ' .. tostring(got.device))
    local g = cpu_list(got)
    assert(#g == #want, ('%s: %d elements, want %d'):format(what, #g, #want))
    for i = 1, #g do
      if math.abs(g[i] - want[i]) > (tol or 0) then
        error(('%s: element %d is %.9g, want %.9g (rank %d)'):format(what, i, g[i], want[i], r), 0)
      end
    end
    checks = checks + 1
  end
  local floats = { float32 = true, float64 = true, float16 = true, bfloat16 = true }
  -- rank k's element i for dtype dt and op: small values every dtype holds exactly
  local function val(k, i, dt, op)
    if dt == 'bool' then return (i + k) % 3 == 0 and 1 or 0 end
    if op == 'prod' then
      local v = ({ 1, 2, -1, 3, -2 })[(i + 2 * k) % 5 + 1]
      return dt == 'uint8' and math.abs(v) or v
    end
    local v = (i * 7 + k * 3) % 17 - (dt == 'uint8' and 0 or 8)
    if floats[dt] then v = v + 0.25 * ((i + k) % 4) end
    return v
  end
  local function input(k, dt, op, len)
    local l = {}
    for i = 1, len do l[i] = val(k, i, dt, op) end
    return l
  end
  local function gpu(l, dt) return dpl.tensor(l, { dtype = dt }):to(G) end
  local function combine(op, dt, a, b)
    if dt == 'bool' then op = (op == 'prod' or op == 'min') and 'min' or 'max' end
    if op == 'sum' then return a + b elseif op == 'prod' then return a * b
    elseif op == 'max' then return math.max(a, b) elseif op == 'min' then return math.min(a, b) end
    return (a + b) / 2 -- mean
  end
  local function reduced(op, dt, len, x0, x1)
    x0, x1 = x0 or input(0, dt, op, len), x1 or input(1, dt, op, len)
    local l = {}
    for i = 1, len do l[i] = combine(op, dt, x0[i], x1[i]) end
    return l
  end

  -- all_reduce: every dtype and op (mean on the floating dtypes)
  for _, dt in ipairs({ 'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'bool' }) do
    for _, op in ipairs({ 'sum', 'prod', 'max', 'min', 'mean' }) do
      if op ~= 'mean' or floats[dt] then
        local t = gpu(input(r, dt, op, 37), dt)
        dist.all_reduce(t, op)
        same(t, reduced(op, dt, 37), ('all_reduce %s %s'):format(dt, op))
      end
    end
  end
  -- random float32 values, 40000 elements (chunked through the slots); the sum of two is rounded as on the CPU
  local xs = {}
  for k = 0, 1 do dpl.manual_seed(100 + k); xs[k] = dpl.randn(40000) end
  local t = xs[r]:to(G)
  dist.all_reduce(t)
  same(t, (xs[0] + xs[1]):tolist(), 'all_reduce randn 40000')
  t = xs[r]:to(G)
  dist.all_reduce(t, 'max')
  same(t, dpl.stack({ xs[0], xs[1] }):max(1):tolist(), 'all_reduce max randn 40000')
  -- reduce and broadcast, roots 0 and 1 (reduce: the root's tensor)
  for root = 0, 1 do
    for _, dt in ipairs({ 'float32', 'int64', 'bfloat16' }) do
      t = gpu(input(r, dt, 'sum', 11), dt)
      dist.reduce(t, root)
      if r == root then same(t, reduced('sum', dt, 11), ('reduce %s to %d'):format(dt, root)) end
      t = gpu(input(r, dt, 'sum', 13), dt)
      dist.broadcast(t, root)
      same(t, input(root, dt, 'sum', 13), ('broadcast %s from %d'):format(dt, root))
    end
  end
  -- all_gather (flat, and a list), gather and scatter to/from rank 1
  for _, dt in ipairs({ 'float16', 'int32', 'float64' }) do
    local l = dist.all_gather(gpu(input(r, dt, 'sum', 9), dt))
    for k = 0, 1 do same(l[k + 1], input(k, dt, 'sum', 9), ('all_gather %s [%d]'):format(dt, k)) end
  end
  local big = dist.all_gather(xs[r]:to(G))
  for k = 0, 1 do same(big[k + 1], xs[k]:tolist(), 'all_gather randn [' .. k .. ']') end
  local g = dist.gather(gpu(input(r, 'float32', 'sum', 5), 'float32'), nil, 1)
  if r == 1 then for k = 0, 1 do same(g[k + 1], input(k, 'float32', 'sum', 5), 'gather [' .. k .. ']') end end
  local sl = r == 1 and { gpu(input(10, 'int64', 'sum', 6), 'int64'), gpu(input(11, 'int64', 'sum', 6), 'int64') } or nil
  t = gpu(input(0, 'int64', 'sum', 6), 'int64')
  dist.scatter(t, sl, 1)
  same(t, input(10 + r, 'int64', 'sum', 6), 'scatter from 1')
  -- reduce_scatter: rank k's input is [block 0 | block 1]; rank j gets the reduction of block j
  for _, dt in ipairs({ 'float32', 'float64', 'bfloat16', 'int32' }) do
    for _, op in ipairs({ 'sum', 'max', 'min', 'prod', 'mean' }) do
      if op ~= 'mean' or floats[dt] then
        local ins = { input(r, dt, op, 14), input(r + 5, dt, op, 14) }
        local out = dpl.zeros({ 14 }, { device = G, dtype = dt })
        dist.reduce_scatter(out, { gpu(ins[1], dt), gpu(ins[2], dt) }, op)
        local b0, b1 = input(0, dt, op, 14), input(1, dt, op, 14)
        if r == 1 then b0, b1 = input(5, dt, op, 14), input(6, dt, op, 14) end
        same(out, reduced(op, dt, 14, b0, b1), ('reduce_scatter %s %s'):format(dt, op))
      end
    end
  end
  -- all_to_all: block k of rank j's input (100 j + k) lands in block j of rank k's output
  local inp = dpl.tensor({ 100 * r, 100 * r, 100 * r + 1, 100 * r + 1 }, { dtype = 'int64' }):to(G)
  local out = dpl.zeros({ 4 }, { device = G, dtype = 'int64' })
  dist.all_to_all_single(out, inp)
  same(out, { r, r, 100 + r, 100 + r }, 'all_to_all_single')
  local outs = { dpl.zeros({ 3 }, { device = G, dtype = 'float32' }), dpl.zeros({ 3 }, { device = G, dtype = 'float32' }) }
  dist.all_to_all(outs, { dpl.full({ 3 }, 10 * r, { device = G, dtype = 'float32' }),
    dpl.full({ 3 }, 10 * r + 1, { device = G, dtype = 'float32' }) })
  same(outs[1], { r, r, r }, 'all_to_all [0]')
  same(outs[2], { 10 + r, 10 + r, 10 + r }, 'all_to_all [1]')
  -- subgroups: both ranks (their own communicator, split from the world's), and rank 1 alone
  local both, solo = dist.new_group({ 0, 1 }), dist.new_group({ 1 })
  t = gpu(input(r, 'float32', 'sum', 8), 'float32')
  dist.all_reduce(t, { group = both })
  same(t, reduced('sum', 'float32', 8), 'subgroup all_reduce')
  local l = dist.all_gather(gpu({ r + 1, r + 2 }, 'float32'), { group = both })
  same(l[1], { 1, 2 }, 'subgroup all_gather [0]')
  same(l[2], { 2, 3 }, 'subgroup all_gather [1]')
  if r == 1 then
    t = gpu({ 7, 8 }, 'float32')
    dist.all_reduce(t, { group = solo })
    same(t, { 7, 8 }, 'one-rank subgroup all_reduce')
  end
  dist.destroy_process_group(solo)
  -- the world's communicator still works after the splits
  t = gpu(input(r, 'float32', 'sum', 5), 'float32')
  dist.all_reduce(t)
  same(t, reduced('sum', 'float32', 5), 'all_reduce after the subgroups')
  dist.barrier()
  print(('NCCL-EMU-OK rank %d device %s checks %d backend %s'):format(r, G, checks, dist.get_backend()))
  dist.destroy_process_group()
elseif mode == 'types' then
  -- the NCCL datatypes dplhost never passes (int8, uint32, uint64: signedness decides max/min and
  -- integer avg), called directly on the world communicator's ncclComm_t over the legacy stream
  local ffi = require 'ffi'
  ffi.cdef [[
    typedef struct { void *comm; int32_t device, rank, nranks; } emu_cu_nccl;
    int ncclAllReduce(const void *, void *, size_t, int, int, void *, void *);
    int cudaSetDevice(int);
    int cudaDeviceSynchronize(void);
  ]]
  local N = ffi.load(assert(os.getenv('DPL_LIBNCCL')))
  dist.init_process_group { backend = 'nccl' }
  local r = dist.get_rank()
  local dev = dist._group().nccl_device
  local comm = ffi.cast('emu_cu_nccl *', dist._group().nccl).comm
  local G = 'cuda:' .. dev
  local ops = { sum = 0, prod = 1, max = 2, min = 3, avg = 4 }
  local cases = { -- NCCL datatype, storage dtype, rank 0's and rank 1's values, results per op (as stored)
    { 0, 'uint8', { 200, 10, 127, 255 }, { 100, 250, 1, 1 }, -- int8: -56 10 127 -1 and 100 -6 1 1
      { sum = { 44, 4, 128, 0 }, prod = { 32, 196, 127, 255 }, max = { 100, 10, 127, 1 }, min = { 200, 250, 1, 255 },
        avg = { 22, 2, 192, 0 } } },
    { 3, 'int32', { -1, 3, 7 }, { 5, -2, 7 }, -- uint32: -1 is the largest
      { sum = { 4, 1, 14 }, max = { -1, -2, 7 }, min = { 5, 3, 7 }, avg = { 2, 0, 7 }, prod = { -5, -6, 49 } } },
    { 5, 'int64', { -1, 3, 7 }, { 5, -2, 7 }, -- uint64
      { sum = { 4, 1, 14 }, max = { -1, -2, 7 }, min = { 5, 3, 7 }, prod = { -5, -6, 49 } } },
  }
  local checks = 0
  for _, c in ipairs(cases) do
    for _, op in ipairs({ 'sum', 'prod', 'max', 'min', 'avg' }) do -- in one order on every rank
      local want = c[5][op]
      if want then
      local t = dpl.tensor(r == 0 and c[3] or c[4], { dtype = c[2] }):to(G)
      dpl.cuda.synchronize()
      N.cudaSetDevice(dev)
      local st = N.ncclAllReduce(t._data, t._data, t:numel(), c[1], ops[op], comm, nil)
      assert(st == 0, ('ncclAllReduce datatype %d op %s: %d'):format(c[1], op, st))
      N.cudaDeviceSynchronize() -- the legacy stream too
      local got = t:to('cpu'):tolist()
      for i = 1, #want do
        assert(got[i] == want[i], ('datatype %d op %s: element %d is %s, want %s'):format(c[1], op, i,
          tostring(got[i]), tostring(want[i])))
      end
      checks = checks + 1
      end
    end
  end
  print(('NCCL-EMU-TYPES-OK rank %d checks %d'):format(r, checks))
  dist.destroy_process_group()
elseif mode == 'errors' then
  -- what the emulator reports instead of a hang: ranks passing different counts, then a broken
  -- communicator; with arg[2] == 'skip', rank 1 never makes the call (DPL_CUDA_EMU_NCCL_TIMEOUT)
  dist.init_process_group { backend = 'nccl' }
  local r = dist.get_rank()
  local G = 'cuda:' .. dist._group().nccl_device
  if arg[2] == 'skip' then
    if r == 0 then print('skip: ' .. tostring(select(2, pcall(dist.all_reduce, dpl.ones(4, { device = G }))))) end
    dist.barrier()
  else
    print('mismatch: ' .. tostring(select(2, pcall(dist.all_reduce, dpl.ones(4 + r, { device = G })))))
    print('then: ' .. tostring(select(2, pcall(dist.all_reduce, dpl.ones(4, { device = G })))))
  end
elseif mode == 'ddp' or mode == 'single' then
  local nn, F = dpl.nn, dpl.nn.functional
  local b, steps = 8, tonumber(os.getenv('NCCL_EMU_STEPS') or '') or 6
  local seen = {}
  local M = dpl.LightningModule:extend('NcclEquiv')
  function M:__init()
    dpl.LightningModule.__init(self)
    dpl.manual_seed(0)
    self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
  end
  function M:forward(x) return self.net(x) end
  function M:training_step(batch)
    if not seen.backend then
      seen.backend = dist.is_initialized() and dist.get_backend() or 'none'
      seen.device = tostring(batch[1].device)
    end
    return F.cross_entropy(self(batch[1]), batch[2])
  end
  function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1, momentum = 0.9 }) end
  dpl.manual_seed(1)
  local ds = dpl.data.TensorDataset(dpl.randn({ 96, 4 }), dpl.randint(1, 4, { 96 }))
  local loader = dpl.data.DataLoader(ds, { batch_size = mode == 'single' and 2 * b or b })
  local t = dpl.Trainer { strategy = mode == 'ddp' and 'ddp' or nil, accelerator = mode == 'ddp' and 'gpu' or 'cpu',
    devices = mode == 'ddp' and 2 or 1, max_steps = steps, enable_progress_bar = false, enable_model_summary = false,
    logger = false, enable_checkpointing = false }
  local m = M()
  t:fit(m, loader)
  local parts = {}
  for _, p in ipairs(m:parameters()) do
    for _, v in ipairs(p:to('cpu'):view(-1):tolist()) do parts[#parts + 1] = ('%.9g'):format(v) end
  end
  print(('rank %d backend %s device %s steps %d'):format(t.global_rank, tostring(seen.backend), tostring(seen.device),
    t.global_step))
  if t.is_global_zero then print('weights ' .. table.concat(parts, ' ')) end
else
  io.stderr:write('usage: nccl_emu_worker.lua colls|ddp|single|types|errors [skip]\n')
  os.exit(2)
end
