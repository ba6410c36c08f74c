-- dist_api_spec.lua: dpl.dist in one process: defaults from the environment,
-- argument errors (clear Lua errors, never a crash), world size 1, the C
-- reduction kernels, tensors as buffers, and the binary without libmpi.
local h = require 'spec.support.helpers'
local ffi = require 'ffi'
local dpl = require 'dpl'

-- Runs a Lua chunk in a fresh dplhost; returns stdout, stderr, rc.
local run = h.run_chunk

describe('dist API', function()
  it('is reachable as dpl.dist and starts uninitialised', function()
    local out, err, rc = run([[
      local dist = require('dpl').dist
      print(dist.is_initialized(), dist.get_rank(), dist.get_world_size(), dist.is_available())
    ]])
    assert.are.equal(0, rc, err)
    assert.are.equal('false\t-1\t-1\ttrue\n', out)
  end)

  it('world size 1 needs no environment and every collective works', function()
    local out, err, rc = run([[
      local ffi = require 'ffi'
      local dist = require('dpl').dist
      dist.init_process_group{}
      assert(dist.get_rank() == 0 and dist.get_world_size() == 1 and dist.get_backend() == 'shm')
      local b = ffi.new('double[3]', 1, 2, 3)
      dist.all_reduce(b, 'mean', {count = 3, dtype = 'float64'})
      assert(b[0] == 1 and b[2] == 3)
      local r = ffi.new('double[3]')
      dist.all_gather(r, b, {count = 3, dtype = 'float64'})
      assert(r[1] == 2)
      assert(dist.broadcast_object({a = {1, 2}}, 0).a[2] == 2)
      assert(dist.all_gather_object('x')[1] == 'x')
      dist.barrier()
      dist.destroy_process_group()
      assert(not dist.is_initialized())
      dist.init_process_group{backend = 'shm'}
      print('ok')
    ]])
    assert.are.equal(0, rc, err)
    assert.are.equal('ok\n', out)
  end)

  it('scatter and reduce_scatter pack a list of tensors, and name a bad entry', function()
    local out, err, rc = run([[
      local dpl = require 'dpl'
      local dist = dpl.dist
      dist.init_process_group{}
      local t = dpl.zeros(3)
      dist.scatter(t, { dpl.tensor({ 1, 2, 3 }, { dtype = 'float32' }) }, 0)
      print(table.concat(t:totable(), ' '))
      dist.reduce_scatter(t, { dpl.tensor({ 4, 5, 6 }, { dtype = 'float32' }) }, 'sum')
      print(table.concat(t:totable(), ' '))
      local ok, e = pcall(dist.scatter, t, { dpl.zeros(2) }, 0)
      print(tostring(e))
      ok, e = pcall(dist.reduce_scatter, t, { dpl.zeros(3, { dtype = 'float64' }) }, 'sum')
      print(tostring(e))
      ok, e = pcall(dist.reduce_scatter, t, { dpl.zeros(3), dpl.zeros(3) }, 'sum')
      print(tostring(e))
    ]])
    assert.are.equal(0, rc, err)
    local l = {}
    for line in out:gmatch('[^\n]+') do l[#l + 1] = line end
    assert.are.equal('1 2 3', l[1])
    assert.are.equal('4 5 6', l[2])
    assert.matches('ValueError: dist: scatter: scatter_list[1] is float32 x 2, expected float32 x 3', l[3], 1, true)
    assert.matches('reduce_scatter: input_list%[1%] is float64 x 3, expected float32 x 3', l[4])
    assert.matches('reduce_scatter: input_list has 2 entries, the group 1 ranks', l[5])
  end)

  it('reads rank and world size from RANK/WORLD_SIZE, OMPI_* and SLURM_*', function()
    local code = [[
      local dist = require('dpl').dist
      local ok, e = pcall(dist.init_process_group, {timeout = 0.3})
      print(tostring(e))
    ]]
    local _, _, _ = nil
    local out = run(code, 'RANK=1 WORLD_SIZE=2 DPL_JOB_ID=' .. 'apienv' .. h.pid())
    assert.matches('rank 1 timed out after 0.3 s in init_process_group', out)
    out = run(code, 'SLURM_PROCID=2 SLURM_NTASKS=3 SLURM_JOB_ID=77')
    assert.matches('rank 2 timed out', out)
  end)

  it('DPL_COMM_TIMEOUT sets the default timeout', function()
    local out = run([[
      local ok, e = pcall(require('dpl').dist.init_process_group, {})
      print(tostring(e))
    ]], 'DPL_COMM_TIMEOUT=0.4 RANK=1 WORLD_SIZE=2 DPL_JOB_ID=apito' .. h.pid())
    assert.matches('rank 1 timed out after 0.4 s in init_process_group', out)
  end)

  it('refuses non-contiguous tensors', function()
    local out, err, rc = run([[
      local ok, T = pcall(require, 'dpl.tensor')
      if not ok or not T.tensor then print('no tensors yet') return end
      local dist = require('dpl').dist
      dist.init_process_group{}
      local t = T.tensor({{1, 2}, {3, 4}}):t()
      local ok2, e = pcall(dist.all_reduce, t)
      print(tostring(e))
      dist.all_reduce(t:contiguous())
      print('contiguous ok')
    ]])
    assert.are.equal(0, rc, err)
    if out ~= 'no tensors yet\n' then
      assert.matches('all_reduce needs a contiguous tensor %(call :contiguous%(%) first%)', out)
      assert.matches('contiguous ok', out)
    end
  end)

  it('names the mistake in configuration errors', function()
    local out, err, rc = run([[
      local dist = require('dpl').dist
      local function e(f, ...) local ok, x = pcall(f, ...) assert(not ok) print(tostring(x)) end
      e(dist.init_process_group, {backend = 'carrier-pigeon'})
      e(dist.init_process_group, {backend = 'nccl'})
      e(dist.init_process_group, {rank = 3, world_size = 2})
      e(dist.init_process_group, {rank = 0, world_size = 2})
      e(dist.init_process_group, {timeout = -1})
      e(dist.barrier)
    ]], 'env -u DPL_JOB_ID -u MASTER_PORT')
    assert.are.equal(0, rc, err)
    assert.matches("MisconfigurationException: init_process_group: unknown backend='carrier%-pigeon'", out)
    assert.matches("backend='nccl' is not available", out)
    assert.matches('rank must be in %[0, 2%) %(ranks are 0%-based%), got 3', out)
    assert.matches('needs a job id shared by the ranks: set DPL_JOB_ID', out)
    assert.matches('timeout must be a number of seconds > 0, got %-1', out)
    assert.matches('DistError: dist: the default process group is not initialised', out)
  end)

  it('rejects bad buffers, ops, dtypes and ranks with clear errors', function()
    local out, err, rc = run([[
      local ffi = require 'ffi'
      local dist = require('dpl').dist
      dist.init_process_group{}
      local b = ffi.new('float[4]')
      local function e(f, ...) local ok, x = pcall(f, ...) assert(not ok) print(tostring(x)) end
      e(dist.all_reduce, b)
      e(dist.all_reduce, b, 'sum', {count = 5, dtype = 'float32'})
      e(dist.all_reduce, b, 'median', {count = 4, dtype = 'float32'})
      e(dist.all_reduce, ffi.new('int32_t[4]'), 'mean', {count = 4, dtype = 'int32'})
      e(dist.all_reduce, b, 'sum', {count = 4, dtype = 'complex64'})
      e(dist.broadcast, b, 1, {count = 4, dtype = 'float32'})
      e(dist.all_reduce, 'not a tensor')
      e(dist.new_group, {0, 5})
      print('still usable', dist.all_reduce(b, 'sum', {count = 4, dtype = 'float32'}) ~= nil)
    ]])
    assert.are.equal(0, rc, err)
    assert.matches('TypeError: dist: all_reduce: a raw buffer needs {count=, dtype=}', out)
    assert.matches('buffer of 16 bytes is smaller than count=5 float32 %(20 bytes%)', out)
    assert.matches("ValueError: dist: unknown reduce op 'median'", out)
    assert.matches("op 'mean' needs a floating dtype, got int32", out)
    assert.matches('unknown dtype complex64', out)
    assert.matches('src=1 is not a rank of the group %(0..0; ranks are 0%-based%)', out)
    assert.matches('expects a tensor or an ffi buffer, got string', out)
    assert.matches('new_group: rank 5 is not in %[0, 1%)', out)
    assert.matches('still usable\ttrue', out)
  end)

  it('takes contiguous dpl tensors (reads _data, _numel, _dtype)', function()
    local C = dpl.C
    local out, err, rc = run([[
      local ffi = require 'ffi'
      local dpl = require 'dpl'
      local dist = dpl.dist
      dist.init_process_group{}
      local shape = ffi.new('int64_t[1]', 3)
      local p = ffi.new('dpl_tensor *[1]')
      if dpl.C.dpl_tensor_empty(0, 1, shape, 0, 0, p) ~= 0 then print('no tensors yet') return end
      local t = ffi.gc(p[0], dpl.C.dpl_tensor_release)
      local d = ffi.cast('float *', t._data)
      d[0], d[1], d[2] = 1, 2, 3
      dist.all_reduce(t, 'sum')
      local list = dist.all_gather(t)
      print(#list, ffi.cast('float *', list[1]._data)[2])
    ]])
    assert.are.equal(0, rc, err)
    if out ~= 'no tensors yet\n' then assert.are.equal('1\t3\n', out) end
    assert.is_not_nil(C)
  end)

  it('dpl_comm_reduce_local implements every op and dtype rule', function()
    local C = dpl.C
    local a, b = ffi.new('float[3]', 1, -2, 3), ffi.new('float[3]', 4, 5, -6)
    assert.are.equal(0, C.dpl_comm_reduce_local(a, b, 3, 0, 0))
    assert.are.same({ 5, 3, -3 }, { a[0], a[1], a[2] })
    local x, y = ffi.new('int64_t[2]', 7, -1), ffi.new('int64_t[2]', 3, 9)
    assert.are.equal(0, C.dpl_comm_reduce_local(x, y, 2, 5, 2)) -- max
    assert.are.same({ 7, 9 }, { tonumber(x[0]), tonumber(x[1]) })
    local p, q = ffi.new('uint8_t[3]', 1, 0, 1), ffi.new('uint8_t[3]', 0, 0, 1)
    assert.are.equal(0, C.dpl_comm_reduce_local(p, q, 3, 7, 4)) -- bool prod = and
    assert.are.same({ 0, 0, 1 }, { p[0], p[1], p[2] })
    -- float16: 1.5 + 2.25 = 3.75 (0x3c00 = 1.0)
    local h1, h2 = ffi.new('uint16_t[1]', 0x3e00), ffi.new('uint16_t[1]', 0x4080)
    assert.are.equal(0, C.dpl_comm_reduce_local(h1, h2, 1, 2, 0))
    assert.are.equal(0x4380, h1[0])
    -- NaN propagates through max
    local n1, n2 = ffi.new('double[1]', 0 / 0), ffi.new('double[1]', 1)
    C.dpl_comm_reduce_local(n2, n1, 1, 1, 2)
    assert.is_true(n2[0] ~= n2[0])
    assert.are.equal(-1, C.dpl_comm_reduce_local(a, b, 3, 99, 0))
    assert.matches('unknown dtype', ffi.string(C.dpl_last_error()))
  end)

  it('says which rank could not encode an object', function()
    local out, err, rc = run([[
      local dist = require('dpl').dist
      dist.init_process_group{}
      local ok, e = pcall(dist.broadcast_object, {f = print}, 0)
      print(tostring(e))
      ok, e = pcall(dist.all_gather_object, coroutine.create(print))
      print(tostring(e))
    ]])
    assert.are.equal(0, rc, err)
    assert.matches('DistError: dist: broadcast_object: rank 0 %(src%) could not encode its object', out)
    assert.matches('DistError: dist: all_gather_object: rank 0 could not encode the object', out)
  end)

  it('dpl_comm_shm_cleanup removes a job\'s leftover segments, and only those', function()
    local C = dpl.C
    local job = 'cleanup' .. h.pid()
    for _, n in ipairs({ 'dpl-' .. job .. '-g0', 'dpl-' .. job .. '-g2', 'dpl-' .. job .. 'x-g0' }) do
      h.write_file('/dev/shm/' .. n, '')
    end
    local n = ffi.new('int32_t[1]')
    assert.are.equal(0, C.dpl_comm_shm_cleanup(job, n))
    assert.are.equal(2, n[0])
    assert.is_nil(io.open('/dev/shm/dpl-' .. job .. '-g0'))
    assert.is_not_nil(io.open('/dev/shm/dpl-' .. job .. 'x-g0'))
    os.remove('/dev/shm/dpl-' .. job .. 'x-g0')
    assert.are.equal(-1, C.dpl_comm_shm_cleanup('', n))
  end)

  it('tells whether MPI stays initialised in this process (no fork then)', function()
    if not h.has_command('mpirun') then return end
    local out, err, rc = run([[
      local d = require('dpl').dist
      print(d.mpi_initialized())
      d.init_process_group{backend = 'mpi'}
      d.destroy_process_group()
      print(d.mpi_initialized(), type(d.spawn))
    ]], 'ASAN_OPTIONS=detect_leaks=0')
    assert.are.equal(0, rc, err)
    assert.are.equal('false\ntrue\tfunction\n', out)
  end)

  it('the binary does not link libmpi and explains when it cannot load it', function()
    local ldd = h.sh('ldd ' .. h.q(h.bin))
    assert.is_nil(ldd:match('libmpi'))
    local out, err, rc = run([[
      local dist = require('dpl').dist
      print(dist.is_mpi_available())
      local ok, e = pcall(dist.init_process_group, {backend = 'mpi'})
      print(tostring(e))
    ]], 'DPL_LIBMPI=/nonexistent/libmpi.so.40')
    assert.are.equal(0, rc, err)
    assert.matches('^false\n', out)
    assert.matches("DistError: dist: backend 'mpi' unavailable: libmpi not found %(/nonexistent/libmpi.so.40", out)
  end)
end)
