-- dist_gpu_spec.lua: dpl.dist on GPU tensors without a GPU. Two ranks on the
-- simulated GPUs of DPL_VIRTUAL_GPUS, treated as GPU memory (spec/support/
-- dist_gpu_worker.lua): every tensor collective staged through host memory (shm),
-- and the nccl paths against a fake NCCL (with and without ncclAvg); the DDP
-- strategies' choice of backend with a stubbed "real GPU"; argument errors.
local h = require 'spec.support.helpers'
local d = require 'spec.support.dist_helpers'
local worker = h.root .. '/spec/support/dist_gpu_worker.lua'

local function all_ok(res)
  for r = 0, 1 do
    local x = res[r + 1]
    assert.are.equal(0, x.rc, ('rank %d: rc=%s\n%s\n%s'):format(r, tostring(x.rc), x.out, x.err))
    assert.matches('DIST%-GPU%-OK rank ' .. r .. ' checks %d+', x.out)
  end
end

describe('dist on GPU tensors (simulated)', function()
  it('shm stages every tensor collective, subgroups and the DDP flat buckets through host memory', function()
    all_ok(d.run_ranks(2, worker, 'stage', { env = { DPL_VIRTUAL_GPUS = 1 } }))
  end)
  it('nccl: every tensor collective, subgroups (no ncclCommSplit) and DDP buckets take the NCCL calls', function()
    all_ok(d.run_ranks(2, worker, 'nccl', { env = { DPL_VIRTUAL_GPUS = 1 } }))
  end)
  it('nccl before 2.10 (no ncclAvg): a mean is a sum, then a division', function()
    all_ok(d.run_ranks(2, worker, 'nccl', { env = { DPL_VIRTUAL_GPUS = 1, FAKE_NCCL_VERSION = 20900 } }))
  end)
end)

describe('dist argument errors (GPU additions)', function()
  local run = h.run_chunk
  it('all_to_all and all_to_all_single check their arguments; one rank keeps the data', function()
    local out, err, rc = run([[
      local dpl = require 'dpl'
      local dist = dpl.dist
      dist.init_process_group{}
      local function e(f, ...) local ok, m = pcall(f, ...) assert(not ok) print(tostring(m):match('dist: .*')) end
      local a = dpl.tensor({1, 2, 3})
      e(dist.all_to_all_single, dpl.zeros(3), a, { input_split_sizes = {3} })
      e(dist.all_to_all_single, dpl.zeros(2), a)
      e(dist.all_to_all, { a, a }, { a })
      local o = dpl.zeros(3, { dtype = a.dtype })
      dist.all_to_all_single(o, a)
      print(o:eq(a):all():item())
      local l = { dpl.zeros(3, { dtype = a.dtype }) }
      dist.all_to_all(l, { a })
      print(l[1]:eq(a):all():item())
    ]])
    assert.are.equal(0, rc, err)
    assert.matches('uneven split sizes are not supported', out)
    assert.matches('input is int64 x 3, output float32 x 2', out)
    assert.matches('output_list must be a list of 1 tensors', out)
    assert.matches('true\ntrue\n$', out)
  end)
  it('backend nccl names a bad host_backend; DDPStrategy a bad process_group_backend', function()
    local out, err, rc = run([[
      local ok, m = pcall(require('dpl.strategies.ddp').DDPStrategy, { process_group_backend = 'gloo' })
      print(ok, tostring(m):match("process_group_backend='gloo'"))
    ]])
    assert.are.equal(0, rc, err)
    assert.matches("false\tprocess_group_backend='gloo'", out)
  end)
end)

describe('DDP-family backend choice', function()
  local ddp = require 'dpl.strategies.ddp'
  local real, why, saved
  before_each(function()
    saved = { ddp._real_gpu, ddp._nccl_unavailable, os.getenv }
    real, why = true, ''
    ddp._real_gpu = function() return real end
    ddp._nccl_unavailable = function() return why end
  end)
  after_each(function()
    ddp._real_gpu, ddp._nccl_unavailable = saved[1], saved[2]
    os.getenv = saved[3] -- luacheck: ignore
  end)
  local function env(vars) os.getenv = function(k) return vars[k] end end -- luacheck: ignore
  local function pick(s, fallback) return ddp.process_group_backend(s, fallback) end

  it('nccl on a real GPU with NCCL, shm (the default) otherwise', function()
    env({})
    assert.are.equal('nccl', pick({ strategy_name = 'ddp' }))
    real = false
    assert.is_nil(pick({ strategy_name = 'ddp' }))
    assert.are.equal('mpi', pick({ strategy_name = 'horovod' }, 'mpi'))
  end)
  it('an explicit option, then DPL_DIST_BACKEND, win over the device', function()
    env({ DPL_DIST_BACKEND = 'mpi' })
    assert.are.equal('mpi', pick({ strategy_name = 'ddp' }))
    assert.are.equal('shm', pick({ strategy_name = 'ddp', _process_group_backend = 'shm' }))
  end)
  it('a real GPU without NCCL falls back with one warning naming the reason', function()
    env({})
    why = 'NCCL not found (dlopen libnccl.so.2: nope)'
    local lines = {}
    local log = require 'dpl.log'
    local w = log.warn
    log.warn = function(fmt, ...) lines[#lines + 1] = fmt:format(...) end
    local a = pick({ strategy_name = 'ddp', root_device = 'cuda:0' })
    local b = pick({ strategy_name = 'ddp', root_device = 'cuda:0' }, 'mpi')
    log.warn = w
    assert.is_nil(a)
    assert.are.equal('mpi', b)
    assert.are.equal(1, #lines)
    assert.matches("strategy 'ddp': the root device cuda:0 is a GPU but NCCL is unavailable %(NCCL not found", lines[1])
  end)
  it('the simulated GPUs of DPL_VIRTUAL_GPUS and the CPU are not real GPUs', function()
    ddp._real_gpu = saved[1]
    assert.is_false(ddp._real_gpu(require('dpl').device('cpu')))
    assert.is_false(ddp._real_gpu(nil))
  end)
end)
