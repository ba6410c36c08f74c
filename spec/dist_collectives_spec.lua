-- dist_collectives_spec.lua: every collective x dtype x op on world sizes 1-4,
-- on the shm backend (plain processes) and the mpi backend (mpirun), checked
-- against values computed in one process (spec/support/dist_worker.lua); the
-- object collectives with nested tables; subgroups.
local h = require 'spec.support.helpers'
local d = require 'spec.support.dist_helpers'
local worker = h.root .. '/spec/support/dist_worker.lua'

local function all_ok(res, P)
  for r = 0, P - 1 do
    local x = res[r + 1]
    assert.are.equal(0, x.rc, ('rank %d: rc=%s\n%s\n%s'):format(r, tostring(x.rc), x.out, x.err))
    assert.matches('DIST%-OK rank ' .. r .. ' checks %d+', x.out)
  end
end

describe('dist collectives (shm)', function()
  for P = 1, 4 do
    it(('match single-process values on %d rank%s (small slots: many chunks)'):format(P, P > 1 and 's' or ''), function()
      local res, took, job = d.run_ranks(P, worker, 'shm', { env = { DPL_COMM_SHM_SLOT = 16384 } })
      all_ok(res, P)
      assert.are.same({}, d.shm_left(job))
      assert.is_true(took < 30, 'took ' .. took)
    end)
  end

  for _, P in ipairs({ 2, 3 }) do
    it(('match on %d ranks with streaming stores into the slots (DPL_COMM_SLOT_NT=1)'):format(P), function()
      local res, _, job = d.run_ranks(P, worker, 'shm', { env = { DPL_COMM_SHM_SLOT = 16384, DPL_COMM_SLOT_NT = 1 } })
      all_ok(res, P)
      assert.are.same({}, d.shm_left(job))
    end)
  end

  it('give the same bits with plain, streaming and measured slot stores over many calls', function()
    -- 150 all_reduces of 3 float32 buffers (200 KB in all, odd sizes): the measured
    -- choice warms up, then alternates with its probes (every 32 or 128 calls)
    local s = h.write_file(h.tmpname('.lua'), [[
      local dpl = require 'dpl'
      local dist = dpl.dist
      dist.init_process_group{}
      local r, acc = dist.get_rank(), 0
      local bufs = { dpl.zeros(30011), dpl.zeros(20000), dpl.zeros(7) }
      for it = 1, 150 do
        for i, b in ipairs(bufs) do b:copy_(dpl.arange(b:numel()):float():mul(0.37 * (r + 1) + it * 0.001 + i):sin()) end
        dist._all_reduce_multi(bufs, it % 2 == 0 and 'mean' or 'sum')
        for _, b in ipairs(bufs) do acc = acc + b:double():mul(dpl.arange(b:numel()):double():add(1):sqrt()):sum():item() end
      end
      print(('acc=%.17g'):format(acc))
    ]])
    local got = {}
    for _, mode in ipairs({ '0', '1', '' }) do
      local res = d.run_ranks(2, s, '', { env = { DPL_COMM_SLOT_NT = mode } })
      for r = 1, 2 do
        assert.are.equal(0, res[r].rc, res[r].err)
        got[#got + 1] = res[r].out:match('acc=(%S+)')
      end
    end
    os.remove(s)
    assert.is_not_nil(got[1])
    for i = 2, #got do assert.are.equal(got[1], got[i]) end
  end)

  it('match on 2 ranks with the default slot size and DPL_COMM_CHECK=1', function()
    local res, _, job = d.run_ranks(2, worker, 'shm', { env = { DPL_COMM_CHECK = 1 } })
    all_ok(res, 2)
    assert.are.same({}, d.shm_left(job))
  end)

  it('work under dplhost --nproc (DPL_JOB_ID from the launcher)', function()
    local out, err, rc = h.dplhost('--nproc 3 ' .. h.q(worker), { timeout = 60 })
    assert.are.equal(0, rc, err)
    for r = 0, 2 do assert.matches('DIST%-OK rank ' .. r, out) end
  end)

  it('a forked child that exits (a data worker) does not take its parent out of the group', function()
    local s = h.write_file(h.tmpname('.lua'), [[
      local ffi = require 'ffi'
      ffi.cdef 'int fork(void); int waitpid(int, int *, int);'
      local dist = require('dpl').dist
      dist.init_process_group{}
      if dist.get_rank() == 0 then
        local pid = ffi.C.fork()
        if pid == 0 then os.exit(0) end -- runs the atexit cleanups in the child
        ffi.C.waitpid(pid, nil, 0)
      end
      local b = ffi.new('double[1]', 1)
      dist.all_reduce(b, 'sum', {count = 1, dtype = 'float64'})
      print('sum=' .. b[0])
    ]])
    local res = d.run_ranks(2, s, '')
    os.remove(s)
    for r = 1, 2 do
      assert.are.equal(0, res[r].rc, res[r].err)
      assert.matches('sum=2', res[r].out)
    end
  end)

  it('two jobs at once do not collide', function()
    local cmd = {}
    local jobs = { d.job('a'), d.job('b') }
    for _, job in ipairs(jobs) do
      for r = 0, 1 do
        cmd[#cmd + 1] = ('DPL_COMM_SHM_SLOT=16384 RANK=%d WORLD_SIZE=2 DPL_JOB_ID=%s %s %s >/dev/null 2>&1 || echo FAIL %s %d &')
          :format(r, job, h.q(h.bin), h.q(worker), job, r)
      end
    end
    local out = h.sh(table.concat(cmd, ' ') .. ' wait; echo done', { timeout = 60 })
    assert.are.equal('done\n', out)
  end)
end)

describe('dist collectives (mpi)', function()
  if not d.has_mpi then
    pending('mpirun is not installed')
    return
  end
  it('match on 1 rank (singleton, no mpirun)', function()
    local out, err, rc = h.sh(d.mpi_env .. ' ' .. h.q(h.bin) .. ' ' .. h.q(worker) .. ' mpi', { timeout = 60 })
    assert.are.equal(0, rc, err)
    assert.matches('DIST%-OK rank 0', out)
  end)
  for P = 2, 4 do
    it(('match single-process values on %d ranks under mpirun'):format(P), function()
      local out, err, rc = d.mpirun(P, worker, 'mpi')
      assert.are.equal(0, rc, out .. err)
      for r = 0, P - 1 do assert.matches('DIST%-OK rank ' .. r, out) end
    end)
  end
  it('the default backend under mpirun is mpi', function()
    local s = h.write_file(h.tmpname('.lua'), [[
      local dist = require('dpl').dist
      local g = dist.init_process_group{}
      print('backend=' .. dist.get_backend() .. ' rank=' .. dist.get_rank() .. '/' .. dist.get_world_size())
    ]])
    local out, err, rc = d.mpirun(2, s)
    os.remove(s)
    assert.are.equal(0, rc, err)
    assert.matches('backend=mpi rank=0/2', out)
    assert.matches('backend=mpi rank=1/2', out)
  end)
end)
