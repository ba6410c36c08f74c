-- cuda_emu_spec.lua: the CUDA plugin run on the CPU by the emulator of
-- scripts/cuda-emu (docs/cuda.md, "Running the plugin on the CPU"): `make
-- cuda-emu` builds it with g++ alone, the fake NVML reports the emulated GPU,
-- and the op-consistency check (scripts/gpu_check.lua ops: every case of
-- spec/support/cuda_check.lua, allocations poisoned; again with a guard page
-- after every device allocation) passes with the plugin's
-- own host code, allocator, copies, launch geometry and kernels; dpl.dist's
-- nccl backend runs on the emulator's NCCL with one rank, and with two ranks
-- (dplhost --nproc 2, rank r on emulated cuda:r: every tensor collective
-- against the CPU, a Trainer DDP fit against one CPU process); random cases
-- (scripts/cuda-emu/fuzz.lua) agree with the CPU; two emulated GPUs
-- exchange tensors; the emulator's checks are live (emu_selftest; a kernel
-- handed host memory fails as on a GPU); index checks do not make a training
-- step wait for the GPU and still report a bad target (at the next item(), or
-- at the op with DPL_CUDA_SYNC_CHECKS=1 / CUDA_LAUNCH_BLOCKING=1). Skips without g++.
local h = require 'spec.support.helpers'

local emu = h.root .. '/build/cuda-emu'
local run_ops = h.q(h.root .. '/scripts/cuda-emu/run-ops.sh')

local function has_gxx() return h.has_command('g++') and h.has_command('perl') end

describe('the CUDA plugin under the CPU emulator', function()
  if not has_gxx() then
    it('needs g++ and perl', function() pending('g++ or perl not found (build-essential): the emulator is not built') end)
    return
  end

  local built, build_log
  local function build()
    if built == nil then
      local out, err, rc = h.sh('cd ' .. h.q(h.root) .. ' && nice -n 19 make --no-print-directory cuda-emu 2>&1',
        { timeout = 600 })
      built, build_log = rc == 0, out .. err
    end
    assert(built, 'make cuda-emu failed:\n' .. tostring(build_log))
  end
  local function emulated(args, env, timeout)
    build()
    return h.sh((env or '') .. ' ' .. run_ops .. ' ' .. args, { timeout = timeout or 120 })
  end

  it('builds with g++ alone (make cuda-emu), warning-free', function()
    build()
    assert.is_nil(build_log:find('warning:', 1, true), build_log)
    for _, f in ipairs({ 'dpl_cuda_emu.so', 'libnvidia-ml.so.1' }) do
      local fh = io.open(emu .. '/' .. f, 'rb')
      assert.truthy(fh, f .. ' missing')
      fh:close()
    end
  end)

  it("passes its own checks (emu_selftest: barriers, faults, races, cuBLAS, float16)", function()
    build()
    local out, err, rc = h.sh(h.q(emu .. '/emu_selftest'))
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find('emu_selftest: %d+ checks, 0 failures'), out .. err)
  end)

  it('--devices lists the emulated GPU and the emulated plugin', function()
    local out, err, rc = emulated('--devices')
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find('cuda:0%s+dplhost CUDA emulator'), out)
    assert.truthy(out:find('compute capability 9.0', 1, true), out)
    assert.truthy(out:find('CUDA plugin ' .. emu .. '/dpl_cuda_emu.so', 1, true), out)
  end)

  for _, mode in ipairs({ { '', '' }, { ' with guard pages after every allocation', 'DPL_CUDA_EMU_GUARD=1' },
    { ' with index checks at the op (DPL_CUDA_SYNC_CHECKS=1)', 'DPL_CUDA_SYNC_CHECKS=1' } }) do
    it('passes the op-consistency check (gpu_check.lua ops, poisoned allocations)' .. mode[1], function()
      local out, err, rc = emulated('scripts/gpu_check.lua ops', mode[2], 300)
      local np, nf = out:match('op consistency: (%d+) passed, (%d+) failed')
      local fails = {}
      for line in out:gmatch('[^\n]+') do
        if line:find('**FAIL**', 1, true) then fails[#fails + 1] = line end
      end
      assert.truthy(np, 'no summary line:\n' .. out .. err)
      assert.are.equal(0, tonumber(nf), table.concat(fails, '\n') .. '\n' .. err)
      assert.is_true(tonumber(np) > 250, out)
      assert.are.equal(0, rc, out .. err)
      assert.is_nil(err:find('cuda-emu:', 1, true), err) -- no misuse reported by the emulator
    end)
  end

  it('agrees with the CPU on random shapes, views, dtypes, special values and parameters (fuzz.lua)', function()
    for _, seed in ipairs({ 11, 12 }) do
      local out, err, rc = emulated('scripts/cuda-emu/fuzz.lua 120 ' .. seed, nil, 300)
      assert.truthy(out:find('fuzz: %d+ runs, 0 failures'), out .. err)
      assert.are.equal(0, rc, out .. err)
      assert.is_nil(err:find('cuda-emu:', 1, true), err)
    end
  end)

  it("runs dpl.dist's nccl backend on its NCCL with one rank (gpu_check.lua nccl)", function()
    local out, err, rc = emulated('scripts/gpu_check.lua nccl', 'DPL_CUDA_POISON=1')
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find('| dist backend nccl: [^\n]*| 1 | pass |'), out .. err)
    assert.is_nil(err:find('cuda-emu:', 1, true), err)
  end)

  it('dpl.linalg on cuda without cuSOLVER: a clear NotImplementedError; solve_triangular (cuBLAS) still runs', function()
    local script = h.write_file(h.tmpname('.lua'), [[
      local dpl = require 'dpl'
      local A = dpl.tensor({ { 2, 1 }, { 0, 4 } }, { dtype = "float32" }):cuda()
      print(pcall(dpl.linalg.inv, A))
      print(dpl.linalg.solve_triangular(A, dpl.eye(2):cuda(), { upper = true }):cpu():totable()[1][2])
      print(dpl.linalg.inv(A:cpu()):totable()[1][2])]])
    local out, err, rc = emulated(h.q(script), 'DPL_LIBCUSOLVER=/nonexistent/libcusolver.so.12')
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find('false\tNotImplementedError: linalg.inv: not implemented on cuda here: cuSOLVER not found '
      .. '(dlopen /nonexistent/libcusolver.so.12: ', 1, true), out .. err)
    assert.truthy(out:find('\n%-0%.125\n%-0%.125'), out .. err)
    assert.is_nil(err:find('cuda-emu:', 1, true), err)
  end)

  -- two processes, rank r on emulated cuda:r, NCCL across them (emu_nccl.cpp's shared-memory rendezvous)
  local nccl_worker = h.q(h.root .. '/spec/support/nccl_emu_worker.lua')
  local function no_emu_errors(err)
    assert.is_nil(err:find('cuda-emu: race', 1, true), err)
    assert.is_nil(err:find('cuda-emu: [^s]'), err) -- no misuse reported (stats lines aside)
  end
  local function nccl_calls(err)
    local n = 0
    for line in err:gmatch('cuda%-emu: stats nccl %(several ranks%): ([^\n]*)') do
      for c in line:gmatch('(%d+) ') do n = n + tonumber(c) end
    end
    return n
  end

  for _, n in ipairs({ 2, 3 }) do
    it(("runs dpl.dist's nccl backend on %d ranks (--nproc %d, %d emulated GPUs): gpu_check.lua nccl"):format(n, n, n),
      function()
        local out, err, rc = emulated(('--nproc %d scripts/gpu_check.lua nccl'):format(n),
          ('DPL_CUDA_EMU_GPUS=%d DPL_CUDA_POISON=1 DPL_CUDA_EMU_STATS=1'):format(n), 180)
        assert.are.equal(0, rc, out .. err)
        assert.truthy(out:find('| dist backend nccl: [^\n]*| ' .. n .. ' | pass |'), out .. err)
        no_emu_errors(err)
        assert.is_true(nccl_calls(err) >= 15 * n, err) -- 18 calls a rank, each through the several-rank NCCL
      end)
  end

  it('NCCL across ranks on the datatypes dplhost never passes: int8, uint32, uint64 (signed/unsigned max, min, avg)',
    function()
      local out, err, rc = emulated('--nproc 2 ' .. nccl_worker .. ' types', 'DPL_CUDA_EMU_GPUS=2', 120)
      assert.are.equal(0, rc, out .. err)
      assert.truthy(out:find('NCCL-EMU-TYPES-OK rank 0 checks 14', 1, true), out .. err)
      assert.truthy(out:find('NCCL-EMU-TYPES-OK rank 1 checks 14', 1, true), out .. err)
      no_emu_errors(err)
    end)

  it('reports NCCL misuse across ranks instead of hanging: different counts, a call one rank never makes, '
    .. 'two ranks on one GPU', function()
    local out, err, rc = emulated('--nproc 2 ' .. nccl_worker .. ' errors', 'DPL_CUDA_EMU_GPUS=2', 120)
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find('mismatch: ValueError: ncclAllReduce on cuda:0: [^\n]*ncclAllReduce #1: rank 0 passes 4 '
      .. 'elements of datatype 7, rank 1 5 of 7'), out)
    assert.truthy(out:find('mismatch: ValueError: ncclAllReduce on cuda:1: [^\n]*rank 1 passes 5 elements'), out)
    assert.truthy(out:find('then: DistError: ncclAllReduce on cuda:0: [^\n]*failed before'), out)
    out, err, rc = emulated('--nproc 2 ' .. nccl_worker .. ' errors skip',
      'DPL_CUDA_EMU_GPUS=2 DPL_CUDA_EMU_NCCL_TIMEOUT=1', 120)
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find('skip: DistError: ncclAllReduce on cuda:0: [^\n]*nccl: rank 0 waits for rank 1 in '
      .. 'ncclAllReduce #1 %(1 s'), out .. err)
    out, err, rc = emulated('--nproc 2 ' .. nccl_worker .. ' errors', 'DPL_CUDA_EMU_GPUS=1', 120)
    assert.are_not.equal(0, rc)
    assert.truthy((out .. err):find('ncclCommInitRank: ranks 0 and 1 drive cuda:0 (NCCL refuses two ranks', 1, true),
      out .. err)
  end)

  it('every tensor collective across two ranks matches the CPU: dtypes, ops, roots, chunked messages, subgroups',
    function()
      -- 1000-byte slots: the 40000-element tensors go in 160 rounds, reduce_scatter and the groups in several
      local out, err, rc = emulated('--nproc 2 ' .. nccl_worker .. ' colls',
        'DPL_CUDA_EMU_GPUS=2 DPL_CUDA_POISON=1 DPL_CUDA_EMU_STATS=1 DPL_CUDA_EMU_NCCL_CHUNK=1000', 180)
      assert.are.equal(0, rc, out .. err)
      for r = 0, 1 do
        local n = out:match('NCCL%-EMU%-OK rank ' .. r .. ' device cuda:' .. r .. ' checks (%d+) backend nccl')
        assert.truthy(n, out .. err)
        assert.is_true(tonumber(n) >= 80, out)
      end
      no_emu_errors(err)
      -- both ranks' calls went through the several-rank NCCL (40 all_reduce ... 2 splits each)
      assert.is_true(nccl_calls(err) >= 2 * 70, err)
    end)

  it('Trainer DDP on nccl with sync_dist logging: the CPU run\'s metrics, reduced on the GPUs without a wait per log', function()
    local script = h.write_file(h.tmpname('.lua'), [[
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local acc, dir = arg[1], arg[2]
local ds = dpl.datasets.SyntheticClassification { n = 256, features = 8, classes = 3, seed = 2 }
local M = dpl.LightningModule:extend('M')
function M:__init() dpl.LightningModule.__init(self); dpl.manual_seed(0); self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)) end
function M:forward(x) return self.net(x) end
function M:training_step(b)
  local loss = F.cross_entropy(self(b[1]), b[2])
  self:log('train_loss', loss, { prog_bar = true, sync_dist = true })
  return loss
end
function M:validation_step(b)
  local logits = self(b[1])
  self:log('val_loss', F.cross_entropy(logits, b[2]), { sync_dist = true })
  self:log('val_acc', logits:argmax(2):eq(b[2]):float():mean(), { sync_dist = true })
end
function M:configure_optimizers() return dpl.optim.Adam(self:parameters(), { lr = 1e-2 }) end
local t = dpl.Trainer { strategy = 'ddp', accelerator = acc, devices = 2, max_epochs = 2, default_root_dir = dir,
  log_every_n_steps = 2, enable_checkpointing = false, enable_progress_bar = false, enable_model_summary = false,
  logger = dpl.loggers.CSVLogger { save_dir = dir } }
t:fit(M(), dpl.data.DataLoader(ds, { batch_size = 16 }), dpl.data.DataLoader(ds, { batch_size = 32 }))
if t.is_global_zero then print('log_dir ' .. t.logger.log_dir) end
]])
    local dc, dg = h.tmpname('-cpu'), h.tmpname('-gpu')
    local oc, ec, rc1 = h.sh(h.q(h.bin) .. ' --nproc 2 ' .. h.q(script) .. ' cpu ' .. h.q(dc), { timeout = 120 })
    local og, eg, rc2 = emulated('--nproc 2 ' .. h.q(script) .. ' gpu ' .. h.q(dg), 'DPL_CUDA_EMU_GPUS=2 DPL_CUDA_EMU_STATS=1',
      180)
    os.remove(script)
    assert.are.equal(0, rc1, oc .. ec)
    assert.are.equal(0, rc2, og .. eg)
    assert.is_nil(eg:find('cuda-emu: race', 1, true), eg)
    local function rows(out)
      local f = assert(io.open(out:match('log_dir (%S+)') .. '/metrics.csv'))
      local t = {}
      for l in f:lines() do t[#t + 1] = l end
      f:close()
      return t
    end
    local a, b = rows(oc), rows(og)
    h.sh('rm -rf ' .. h.q(dc) .. ' ' .. h.q(dg))
    assert.are.equal(#a, #b)
    assert.is_true(#a > 8, table.concat(a, '\n'))
    assert.are.equal(a[1], b[1]) -- the header
    for i = 2, #a do
      local va, vb = {}, {}
      for x in (a[i] .. ','):gmatch('([^,]*),') do va[#va + 1] = x end
      for x in (b[i] .. ','):gmatch('([^,]*),') do vb[#vb + 1] = x end
      assert.are.equal(#va, #vb)
      for k = 1, #va do
        if va[k] == '' then assert.are.equal('', vb[k], a[i] .. ' | ' .. b[i])
        else assert.is_true(math.abs(tonumber(va[k]) - tonumber(vb[k])) <= 1e-6 * math.max(1, math.abs(tonumber(va[k]))),
          a[i] .. ' | ' .. b[i]) end
      end
    end
    -- 16 steps and 2 validation epochs logging 3 values with sync_dist: the waits stay few
    for event in eg:gmatch('host syncs: %d+ device, %d+ stream, (%d+) event') do
      assert.is_true(tonumber(event) <= 40, eg:match('[^\n]*host syncs[^\n]*'))
    end
  end)

  it('horovod under mpirun puts each process on the GPU of its local rank, over nccl (bootstrapped by MPI)', function()
    if not h.has_command('mpirun') then return pending('mpirun not found') end
    build()
    -- horovod: lr x world size and averaged gradients = one process on the whole batch with lr x 2
    local script = h.write_file(h.tmpname('.lua'), [[
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local hvd = arg[1] == 'hvd'
dpl.manual_seed(1)
local ds = dpl.data.TensorDataset(dpl.randn({ 64, 4 }), dpl.randint(1, 4, { 64 }))
local M = dpl.LightningModule:extend('M')
function M:__init() dpl.LightningModule.__init(self); dpl.manual_seed(0); self.l = nn.Linear(4, 3) end
function M:training_step(b)
  self.dev = tostring(b[1].device)
  return F.cross_entropy(self.l(b[1]), b[2])
end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = hvd and 0.1 or 0.2 }) end
local t = dpl.Trainer { strategy = hvd and 'horovod' or nil, accelerator = hvd and 'gpu' or 'cpu', devices = 1,
  max_steps = 4, logger = false, enable_checkpointing = false, enable_progress_bar = false,
  enable_model_summary = false }
local m = M()
t:fit(m, dpl.data.DataLoader(ds, { batch_size = hvd and 8 or 16 }))
local w = {}
for _, p in ipairs(m:parameters()) do for _, v in ipairs(p:to('cpu'):view(-1):tolist()) do w[#w + 1] = ('%.9g'):format(v) end end
print(('rank %d on %s backend %s steps %d'):format(t.global_rank, m.dev,
  dpl.dist.is_initialized() and dpl.dist.get_backend() or 'none', t.global_step))
if t.global_rank == 0 then print('weights ' .. table.concat(w, ' ')) end
]])
    local emu = h.root .. '/build/cuda-emu'
    local env = ('-x LD_LIBRARY_PATH=%s -x DPL_CUDA_PLUGIN=%s/dpl_cuda_emu.so -x DPL_LIBNCCL=%s/dpl_cuda_emu.so '
      .. '-x DPL_CUDA_EMU_GPUS=2'):format(emu, emu, emu)
    local out, err, rc = h.sh(('ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -np 2 %s %s %s hvd')
      :format(env, h.q(h.bin), h.q(script)), { timeout = 180 })
    local single, serr, src = h.sh(h.q(h.bin) .. ' ' .. h.q(script) .. ' single', { timeout = 60 })
    os.remove(script)
    assert.are.equal(0, rc, out .. err)
    assert.are.equal(0, src, single .. serr)
    assert.is_nil(err:find('cuda-emu:', 1, true), err)
    assert.truthy(out:find('rank 0 on cuda:0 backend nccl steps 4', 1, true), out .. err)
    assert.truthy(out:find('rank 1 on cuda:1 backend nccl steps 4', 1, true), out .. err)
    local a, b = out:match('weights ([^\n]+)'), single:match('weights ([^\n]+)')
    assert.truthy(a and b, out .. single)
    local wa, wb = {}, {}
    for v in a:gmatch('%S+') do wa[#wa + 1] = tonumber(v) end
    for v in b:gmatch('%S+') do wb[#wb + 1] = tonumber(v) end
    assert.are.equal(15, #wa)
    assert.are.equal(#wb, #wa)
    for i = 1, #wa do assert.is_true(math.abs(wa[i] - wb[i]) < 1e-5, a .. '\n' .. b) end
  end)

  it('ddp_spawn forks its workers onto the GPUs, and refuses once the parent initialised CUDA', function()
    local script = h.write_file(h.tmpname('.lua'), [[
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
if arg[1] == 'touch' then local x = dpl.ones(3, { device = 'cuda:0' }) end
print('initialized ' .. tostring(dpl.cuda.is_initialized()))
local ds = dpl.datasets.SyntheticClassification { n = 64, features = 4, classes = 2, seed = 1 }
local M = dpl.LightningModule:extend('M')
function M:__init() dpl.LightningModule.__init(self); self.l = nn.Linear(4, 2) end
function M:training_step(b) return F.cross_entropy(self.l(b[1]), b[2]) end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
local t = dpl.Trainer { strategy = 'ddp_spawn', accelerator = 'gpu', devices = 2, max_epochs = 1, logger = false,
  enable_checkpointing = false, enable_progress_bar = false, enable_model_summary = false }
local ok, e = pcall(t.fit, t, M(), dpl.data.DataLoader(ds, { batch_size = 8 }))
print(('fit %s steps %d %s'):format(tostring(ok), t.global_step, ok and '' or tostring(e)))
]])
    local out, err, rc = emulated(h.q(script) .. ' none', 'DPL_CUDA_EMU_GPUS=2')
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find('initialized false\n', 1, true) and out:find('fit true steps 4', 1, true), out .. err)
    out, err, rc = emulated(h.q(script) .. ' touch', 'DPL_CUDA_EMU_GPUS=2')
    os.remove(script)
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find('initialized true\n', 1, true), out .. err)
    assert.truthy(out:find('fit false steps 0 RuntimeError: dist.spawn: refusing to fork: CUDA is already initialised '
      .. 'in this process', 1, true), out .. err)
  end)

  it('Trainer DDP on nccl makes no host wait per step (30 steps: the set-up\'s only)', function()
    -- the GC vote of GPU buckets goes through the host backend: reading it back from the
    -- last bucket waited for each step's GPU work (38 waits per rank in 30 steps)
    local out, err, rc = emulated('--nproc 2 ' .. nccl_worker .. ' ddp',
      'NCCL_EMU_STEPS=30 DPL_CUDA_EMU_GPUS=2 DPL_CUDA_EMU_STATS=1', 180)
    assert.are.equal(0, rc, out .. err)
    no_emu_errors(err)
    local n = 0
    for dev, stream, event in err:gmatch('host syncs: (%d+) device, (%d+) stream, (%d+) event') do
      n = n + 1
      assert.are.equal(0, tonumber(dev) + tonumber(stream), err)
      assert.is_true(tonumber(event) <= 12, err:match('[^\n]*host syncs[^\n]*'))
    end
    assert.are.equal(2, n, err)
  end)

  it("Trainer DDP on two emulated GPUs uses nccl and ends with the weights of one CPU process on the whole batch",
    function()
      local out, err, rc = emulated('--nproc 2 ' .. nccl_worker .. ' ddp', 'DPL_CUDA_EMU_GPUS=2 DPL_CUDA_EMU_STATS=1', 180)
      assert.are.equal(0, rc, out .. err)
      no_emu_errors(err)
      assert.truthy(out:find('rank 0 backend nccl device cuda:0 steps 6', 1, true), out .. err)
      assert.truthy(out:find('rank 1 backend nccl device cuda:1 steps 6', 1, true), out .. err)
      assert.is_true(nccl_calls(err) >= 2 * 6, err) -- a gradient all_reduce per step on each rank at least
      local single, serr, src = h.sh(h.q(h.root .. '/dplhost') .. ' ' .. nccl_worker .. ' single', { timeout = 120 })
      assert.are.equal(0, src, single .. serr)
      local a, b = out:match('weights ([^\n]+)'), single:match('weights ([^\n]+)')
      assert.truthy(a and b, out .. single)
      local wa, wb = {}, {}
      for v in a:gmatch('%S+') do wa[#wa + 1] = tonumber(v) end
      for v in b:gmatch('%S+') do wb[#wb + 1] = tonumber(v) end
      assert.are.equal(#wb, #wa)
      assert.is_true(#wa > 50, a)
      local worst = 0
      for i = 1, #wa do worst = math.max(worst, math.abs(wa[i] - wb[i])) end
      assert.is_true(worst < 1e-5, ('DDP on nccl vs one CPU process: max difference %g'):format(worst))
    end)

  it('queues uploads without waiting for the GPU (a training step does not drain its queue)', function()
    -- 50 small host -> device copies between kernels: the host waits only for the
    -- final item() (each upload used to wait for the previous one, which is queued
    -- behind all the compute work: one drain of the GPU per copy)
    local script = h.write_file(h.tmpname('.lua'), [[
local dpl = require 'dpl'
local x = dpl.rand(256)
local acc = dpl.zeros(256, { device = 'cuda:0' })
for i = 1, 50 do acc:add_((x + i):to('cuda:0')) end
print(('%.4f'):format(acc:sum():item() - (x:sum():item() * 50 + 256 * 1275)))
]])
    local out, err, rc = emulated(h.q(script), 'DPL_CUDA_EMU_STATS=1 DPL_CUDA_POISON=1')
    os.remove(script)
    assert.are.equal(0, rc, out .. err)
    assert.is_true(math.abs(tonumber(out:match('(%S+)')) or 1e9) < 1, out)
    local dev, stream, event = err:match('host syncs: (%d+) device, (%d+) stream, (%d+) event')
    assert.truthy(event, err)
    assert.is_true(tonumber(dev) + tonumber(stream) + tonumber(event) <= 2, err:match('[^\n]*host syncs[^\n]*'))
  end)

  -- a training loop: forward, cross_entropy, backward, SGD, 30 steps; then bad targets
  local train_script = [[
local dpl = require 'dpl'
local nn, optim, F = dpl.nn, dpl.optim, dpl.nn.functional
local steps = 30
dpl.manual_seed(1)
local model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 5)):to('cuda:0')
local opt = optim.SGD(model:parameters(), { lr = 0.1 })
local xs, ys = dpl.randn(steps, 8, 16), dpl.randint(1, 6, { steps, 8 })
local loss
for i = 1, steps do
  local x, y = xs[i]:to('cuda:0'), ys[i]:to('cuda:0')
  opt:zero_grad()
  loss = F.cross_entropy(model(x), y)
  loss:backward()
  opt:step()
end
print(('loss %.4f'):format(loss:item()))
local y = ys[1]:clone()
y[3] = 9 -- class 9 of 5, sample 3
local ok, bad = pcall(F.cross_entropy, model(xs[1]:to('cuda:0')), y:to('cuda:0'))
print('at the op: ' .. (ok and 'no error' or tostring(bad)))
if ok then
  local ok2, e = pcall(function() return bad:item() end)
  print('at item: ' .. (ok2 and 'no error' or tostring(e)))
  -- two failures before the next wait: one error, counting the second
  F.cross_entropy(model(xs[1]:to('cuda:0')), y:to('cuda:0'))
  dpl.tensor.embedding(xs[1]:to('cuda:0'), dpl.tensor({ 1, 12 }):to('cuda:0'))
  ok2, e = pcall(dpl.cuda.synchronize)
  print('at synchronize: ' .. (ok2 and 'no error' or tostring(e)))
end
print('then:', pcall(function() return loss:item() end))
]]

  it('checks indices without waiting: a training step makes no stream synchronization, a bad target raises at item()',
    function()
      local script = h.write_file(h.tmpname('.lua'), train_script)
      local out, err, rc = emulated(h.q(script), 'DPL_CUDA_EMU_STATS=1 DPL_CUDA_POISON=1')
      os.remove(script)
      assert.are.equal(0, rc, out .. err)
      assert.is_nil(err:find('cuda-emu: [^s]'), err) -- no race or misuse (stats lines aside)
      assert.truthy(out:find('loss %d'), out)
      -- the host waited only for the final item() calls and dpl.cuda.synchronize (its two streams), not at
      -- each step's cross_entropy (a stream synchronization per step before)
      local dev, stream, event = err:match('host syncs: (%d+) device, (%d+) stream, (%d+) event')
      assert.truthy(event, err)
      assert.is_true(tonumber(dev) + tonumber(stream) <= 2, err:match('[^\n]*host syncs[^\n]*'))
      assert.is_true(tonumber(event) <= 6, err:match('[^\n]*host syncs[^\n]*'))
      assert.truthy(out:find('at the op: no error', 1, true), out)
      assert.truthy(out:find('at item: RuntimeError: cross_entropy: target 9 of sample 3 is out of range: expected a '
        .. 'class index in 1..5 [found by an index check on cuda:0 and reported at this later call', 1, true), out)
      assert.truthy(out:find('DPL_CUDA_SYNC_CHECKS=1', 1, true), out)
      assert.truthy(out:find('at synchronize: RuntimeError: cross_entropy: target 9 of sample 3 [^\n]*; 1 later index '
        .. 'check on cuda:0 failed too%]'), out)
      assert.truthy(out:find('then:\ttrue\t%d'), out) -- reported once: the device goes on
    end)

  for _, var in ipairs({ 'DPL_CUDA_SYNC_CHECKS=1', 'CUDA_LAUNCH_BLOCKING=1' }) do
    it('with ' .. var .. ' a bad target raises at the op, in the CPU\'s words', function()
      local script = h.write_file(h.tmpname('.lua'), train_script)
      local out, err, rc = emulated(h.q(script), var)
      os.remove(script)
      assert.are.equal(0, rc, out .. err)
      assert.is_nil(err:find('cuda-emu:', 1, true), err)
      assert.truthy(out:find('at the op: RuntimeError: cross_entropy: target 9 of sample 3 is out of range: expected a '
        .. 'class index in 1..5\n', 1, true), out)
      assert.truthy(out:find('then:\ttrue\t%d'), out)
    end)
  end

  it('an MLP step with SGD momentum launches one optimizer kernel (multi-tensor), not one per tensor op', function()
    -- the MLP of scripts/cuda-emu/mlp_steps.lua; the launches of 10 steps with opt:step() minus those
    -- of 10 steps without it are the optimizer's (16-18 a step when each of the 6 parameters took
    -- mul_/add_/add_(alpha) kernels; one multi-tensor launch now)
    local script = h.write_file(h.tmpname('.lua'), [[
local dpl = require 'dpl'
local nn, optim, F = dpl.nn, dpl.optim, dpl.nn.functional
local steps, with_step = 10, (...) == 'step'
dpl.manual_seed(0)
local model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
  nn.Linear(128, 10)):to('cuda:0')
local opt = optim.SGD(model:parameters(), { lr = 0.01, momentum = 0.9 })
local X, Y = dpl.rand(64, 1, 28, 28):to('cuda:0'), dpl.randint(1, 11, { 64 }):to('cuda:0')
for _ = 1, steps do
  local loss = F.cross_entropy(model(X), Y)
  opt:zero_grad()
  loss:backward()
  if with_step then opt:step() end
end
print(('loss %.4f'):format(F.cross_entropy(model(X), Y):item()))
]])
    local function launches(arg)
      local out, err, rc = emulated(h.q(script) .. ' ' .. arg, 'DPL_CUDA_EMU_STATS=1 DPL_CUDA_POISON=1')
      assert.are.equal(0, rc, out .. err)
      assert.is_nil(err:find('cuda-emu: [^s]'), err) -- no race or misuse (stats lines aside)
      local n = 0
      for c in err:gmatch('cuda%-emu: stats [^\n]-(%d+) launches') do n = n + tonumber(c) end
      return n, out, err
    end
    local with, out = launches('step')
    local without = launches('none')
    os.remove(script)
    assert.truthy(out:find('loss %d'), out)
    local per_step = (with - without) / 10
    assert.is_true(per_step <= 2, ('%.1f optimizer launches per step (%d with steps, %d without)'):format(per_step,
      with, without))
  end)

  it('index_select/index_add_ with negative indices on the GPU do not wait for it (and match the CPU)', function()
    local script = h.write_file(h.tmpname('.lua'), [[
local dpl = require 'dpl'
local x, idx = dpl.randn(10, 4), dpl.tensor({ 1, -1, 3, -10, 10 })
local gx, gi = x:to('cuda:0'), idx:to('cuda:0')
local a, t = nil, dpl.zeros(10, 4, { device = 'cuda:0' })
for i = 1, 20 do a = gx:index_select(1, gi); t:index_add_(1, gi, a) end
local tc = dpl.zeros(10, 4)
for i = 1, 20 do tc:index_add_(1, idx, x:index_select(1, idx)) end
print(('%.3g'):format((t:cpu() - tc):abs():max():item()))
]])
    local out, err, rc = emulated(h.q(script), 'DPL_CUDA_EMU_STATS=1 DPL_CUDA_POISON=1')
    os.remove(script)
    assert.are.equal(0, rc, out .. err)
    assert.are.equal(0, tonumber(out:match('(%S+)')), out)
    local dev, stream, event = err:match('host syncs: (%d+) device, (%d+) stream, (%d+) event')
    assert.truthy(event, err)
    -- the one t:cpu() at the end (each call used to read the indices' minimum back: 40 waits)
    assert.is_true(tonumber(dev) + tonumber(stream) + tonumber(event) <= 2, err:match('[^\n]*host syncs[^\n]*'))
  end)

  it('copies between GPUs are ordered by events: no host wait, no race, the same values', function()
    -- x's block may come back from the cache for z while the copy to cuda:1 still reads
    -- it: cuda:0's stream must wait for the copy (the race checker reports it otherwise)
    local script = h.write_file(h.tmpname('.lua'), [[
local dpl = require 'dpl'
dpl.manual_seed(3)
local out = {}
for i = 1, 3 do
  local x = dpl.randn(1024, { device = 'cuda:0' }) * 2
  local y = x:to('cuda:1')
  local ref = x:to('cpu')
  x = nil
  collectgarbage(); collectgarbage()
  local z = dpl.randn(1024, { device = 'cuda:0' }) * 3
  out[#out + 1] = (y:to('cpu') - ref):abs():max():item()
end
print(table.concat(out, ' '))
]])
    local out, err, rc = emulated(h.q(script), 'DPL_CUDA_EMU_GPUS=2 DPL_CUDA_EMU_STATS=1')
    os.remove(script)
    assert.are.equal(0, rc, out .. err)
    assert.are.equal('0 0 0\n', out)
    assert.is_nil(err:find('race', 1, true), err)
    local dev, stream = err:match('host syncs: (%d+) device, (%d+) stream')
    assert.are.equal('0', stream, err)
  end)

  it('Trainer: a loss logged every step on cuda:0 does not make the host wait every step', function()
    -- 40 steps of a small classifier, self:log(prog_bar) each step, gradient clipping, a CSV
    -- logger every 10 steps; the waits: set-up, the logged rows, the epoch end (docs/trainer.md)
    local dir = h.tmpname('-lazy')
    local script = h.write_file(h.tmpname('.lua'), [[
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local ds = dpl.datasets.SyntheticClassification { n = 640, features = 16, classes = 4, seed = 1 }
local M = dpl.LightningModule:extend('M')
function M:__init() dpl.LightningModule.__init(self); self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)) end
function M:forward(x) return self.net(x) end
function M:training_step(b)
  local loss = F.cross_entropy(self(b[1]), b[2])
  self:log('train_loss', loss, { prog_bar = true })
  return loss
end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
local t = dpl.Trainer { accelerator = 'gpu', devices = 1, max_epochs = 1, log_every_n_steps = 10, gradient_clip_val = 1,
  logger = dpl.loggers.CSVLogger(arg[1]), enable_checkpointing = false, enable_progress_bar = false,
  enable_model_summary = false }
t:fit(M(), dpl.data.DataLoader(ds, { batch_size = 16 }))
print(('loss %.4f'):format(t.callback_metrics.train_loss))
]])
    local out, err, rc = emulated(h.q(script) .. ' ' .. h.q(dir), 'DPL_CUDA_EMU_STATS=1')
    os.remove(script)
    h.sh('rm -rf ' .. h.q(dir))
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:match('loss %d'), out)
    local dev, stream, event = err:match('host syncs: (%d+) device, (%d+) stream, (%d+) event')
    assert.truthy(event, err)
    -- was 40 + set-up; now set-up (~12), 4 logged rows and the epoch end
    assert.is_true(tonumber(dev) + tonumber(stream) + tonumber(event) <= 24, err:match('[^\n]*host syncs[^\n]*'))
  end)

  it('runs scripts/gpu-check.sh end to end (--emulated: the dry run of the GPU machine\'s check)', function()
    build()
    local dir = h.tmpname('-gpucheck')
    local out, err, rc = h.sh('cd ' .. h.q(h.root) .. ' && OUT=' .. h.q(dir) .. ' bash scripts/gpu-check.sh --emulated',
      { timeout = 300 })
    local f = io.open(dir .. '/gpu-check.md')
    local report = f and f:read('a') or ''
    if f then f:close() end
    h.sh('rm -rf ' .. h.q(dir))
    assert.are.equal(0, rc, out .. err)
    assert.truthy(report:find('**emulated**', 1, true), report)
    for _, s in ipairs({ 'op consistency', 'fuzz', 'benchmark: dplhost', 'training on cuda:0', 'dist: nccl backend',
      'dist: shm backend' }) do
      assert.truthy(report:find('| ' .. s .. '[^|]*| pass |'), s .. ' did not pass:\n' .. report)
    end
    assert.is_nil(report:find('**FAIL**', 1, true), report)
  end)

  it('runs two GPUs: peer copies, per-device streams and cuBLAS handles', function()
    local script = h.write_file(h.tmpname('.lua'), [[
local dpl = require 'dpl'
assert(dpl.cuda.device_count() == 2)
local x, w = dpl.randn(5, 7), dpl.randn(7, 3)
local a = x:to('cuda:1')
local b = a:to('cuda:0')
local d = {}
d[#d + 1] = (b:to('cuda:1'):cpu() - x):abs():max():item()
d[#d + 1] = (a:matmul(w:to('cuda:1')):cpu() - x:matmul(w)):abs():max():item()
d[#d + 1] = (b:matmul(w:to('cuda:0')):cpu() - x:matmul(w)):abs():max():item()
d[#d + 1] = (a:t():to('cuda:0'):contiguous():cpu() - x:t()):abs():max():item()
d[#d + 1] = (a:half():to('cuda:0'):float():cpu() - x:half():float()):abs():max():item()
d[#d + 1] = (a:softmax(2):cpu() - x:softmax(2)):abs():max():item()
dpl.cuda.synchronize()
for _, v in ipairs(d) do io.write(('%.3g '):format(v)) end
print(dpl.cuda.memory_stats(1).allocated_bytes > 0)
]])
    local out, err, rc = emulated(h.q(script), 'DPL_CUDA_EMU_GPUS=2 DPL_CUDA_POISON=1')
    os.remove(script)
    assert.are.equal(0, rc, out .. err)
    local vals = {}
    for v in out:gmatch('(%S+) ') do vals[#vals + 1] = tonumber(v) end
    assert.are.equal(6, #vals, out .. err)
    for i, v in ipairs(vals) do assert.is_true(v < 1e-5, ('check %d: %s'):format(i, out)) end
    assert.truthy(out:find('true', 1, true), out)
    assert.is_nil(err:find('cuda-emu:', 1, true), err)
  end)

  it('reports a kernel handed host memory, as a GPU faults on it', function()
    -- a CPU tensor marked as device memory: the plugin hands its host pointer to a kernel
    local script = h.write_file(h.tmpname('.lua'), [[
local dpl = require 'dpl'
local bit = require 'bit'
dpl.cuda.load()
local t = dpl.randn(4, 3)
local v = t:view(4, 3)
v._flags = bit.bor(v._flags, 2)
local ok, e = pcall(function() return v:exp_() end)
v._flags = bit.band(v._flags, bit.bnot(2))
print(ok, e)
]])
    local out, err, rc = emulated(h.q(script))
    os.remove(script)
    assert.are.equal(0, rc, out .. err)
    assert.truthy(out:find('false', 1, true), out)
    assert.truthy(out:find('cudaErrorIllegalAddress', 1, true), out)
    assert.truthy(err:find('cuda-emu: k_unary', 1, true), err)
    assert.truthy(err:find('is not device memory', 1, true), err)
  end)
end)
