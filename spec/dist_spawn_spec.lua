-- dist_spawn_spec.lua: dist.spawn forks workers with ranks and a process group,
-- returns rank 0's value, and turns a worker's failure (error, exit code,
-- signal) into an error in the parent naming the rank, after stopping the
-- others; nothing is left behind; it refuses to fork after MPI is initialised.
local h = require 'spec.support.helpers'

local function run(body, opts)
  local s = h.write_file(h.tmpname('.lua'), "local spawn = require('dpl.spawn')\nlocal dist = require('dpl.dist')\n" .. body)
  local out, err, rc = h.sh((opts and opts.env or '') .. ' ' .. h.q(h.bin) .. ' ' .. h.q(s), opts)
  os.remove(s)
  return out, err, rc
end

describe('dist.spawn', function()
  it('runs fn(rank, ...) in N workers with a process group and returns rank 0 value', function()
    local out, err, rc = run([[
      local ffi = require 'ffi'
      local r = spawn.spawn(function(rank, tag)
        local buf = ffi.new('double[2]', rank, 1)
        dist.all_reduce(buf, 'sum', { count = 2, dtype = 'float64' })
        return { rank = rank, tag = tag, sum = buf[0], n = buf[1], ws = dist.get_world_size(),
                 env = os.getenv('RANK') .. '/' .. os.getenv('WORLD_SIZE'), nested = { list = { 1, 2, 3 } } }
      end, 3, { args = { 'hello' } })
      print(r.rank, r.tag, r.sum, r.n, r.ws, r.env, #r.nested.list)
      print('parent still has no group:', dist.is_initialized())
    ]])
    assert.are.equal(0, rc, err)
    assert.matches('^0\thello\t3\t3\t3\t0/3\t3\nparent still has no group:\tfalse\n$', out)
  end)

  it('returns all of rank 0\'s values (nil among them), tensors too (on the CPU, through dpl.save)', function()
    -- Lightning's launcher returns the worker's whole output, tensors moved to the CPU
    local out, err, rc = run([[
      local dpl = require 'dpl'
      local a, b, c, d = spawn.spawn(function(rank) return rank, 'two', nil, 4 end, 2)
      print('values', a, b, c, d, select('#', spawn.spawn(function() return 1, nil, nil end, 2)))
      local t, u = spawn.spawn(function(rank) return { w = dpl.tensor({ 1.5, 2.5 }), r = rank }, dpl.ones(2, 2) end, 2)
      print('tensors', t.w.dtype, t.w:sum():item(), t.r, u:sum():item(), t.w.device)
      local ok, e = pcall(spawn.spawn, function() return print end, 2)
      print('function', ok, (tostring(e):match('cannot be sent back: ([^\n]*)')))
    ]])
    assert.are.equal(0, rc, err)
    assert.matches('values\t0\ttwo\tnil\t4\t3\n', out)
    assert.matches('tensors\tfloat32\t4\t0\t4\tcpu\n', out)
    assert.matches('function\tfalse\tTypeError: dpl.save: obj%["values"%]%[1%] is a function', out)
  end)

  it("gives each worker its share of the cores unless the thread count is set", function()
    local body = "print('threads ' .. spawn.spawn(function() return require('dpl').get_num_threads() end, 2))"
    local cores = tonumber(io.popen('getconf _NPROCESSORS_ONLN'):read('*l'))
    local out, err, rc = run(body, { env = 'env -u DPL_NUM_THREADS -u OMP_NUM_THREADS' })
    assert.are.equal(0, rc, err)
    assert.matches('threads ' .. math.max(1, math.floor(cores / 2)), out)
    out, err, rc = run(body, { env = 'env -u OMP_NUM_THREADS DPL_NUM_THREADS=3' })
    assert.are.equal(0, rc, err)
    assert.matches('threads 3', out)
  end)

  it('raises in the parent with the failing rank, its message and traceback, and stops the others', function()
    local out, err, rc = run([[
      local t0 = require('dpl').C.dpl_clock()
      local ok, e = pcall(spawn.spawn, function(rank)
        if rank == 1 then
          local function deep() error('worker one broke') end
          deep()
        end
        require('dpl').C.dpl_sleep(20)
      end, 3)
      print(ok, tostring(e))
      print('took<5', require('dpl').C.dpl_clock() - t0 < 5)
    ]], { timeout = 40 })
    assert.are.equal(0, rc, err)
    assert.matches('^false\tProcessRaisedException: dist.spawn: rank 1 of 3 raised: .-worker one broke\nstack traceback:', out)
    assert.matches("in function 'deep'", out)
    assert.falsy(out:find('spawn.lua', 1, true), 'traceback shows spawn internals')
    assert.matches('took<5\ttrue', out)
  end)

  it('reports a worker that exits with a code or is killed by a signal', function()
    local out, err, rc = run([[
      local ok, e = pcall(spawn.spawn, function(rank) if rank == 1 then os.exit(4) end end, 2)
      print(tostring(e))
      ok, e = pcall(spawn.spawn, function(rank)
        if rank == 0 then require('dpl').C.dpl_proc_kill(require('dpl').C.dpl_proc_getpid(), 9) end
      end, 2)
      print(tostring(e))
    ]])
    assert.are.equal(0, rc, err)
    assert.matches('ProcessExitedException: dist.spawn: rank 1 of 2 exited with code 4\n', out)
    assert.matches('ProcessExitedException: dist.spawn: rank 0 of 2 was killed by SIGKILL\n', out)
  end)

  it('leaves no worker, shared-memory segment or temp dir behind', function()
    local out, err, rc = run([[
      local pids = {}
      local ok = pcall(spawn.spawn, function(rank)
        local ffi = require 'ffi'
        local b = ffi.new('float[1]', 1)
        dist.all_reduce(b, 'sum', { count = 1, dtype = 'float32' })
        if rank == 2 then error('late failure') end
        dist.barrier()
      end, 3)
      local ffi = require 'ffi'
      ffi.cdef 'int getpid(void);'
      print(ok, ffi.C.getpid())
    ]], { timeout = 60 })
    assert.are.equal(0, rc, err)
    local pid = out:match('^false\t(%d+)')
    assert.truthy(pid, out)
    -- this job's files only (the job id is s<parent pid>_<hex>): other runs may be spawning now
    local shm = h.sh('ls /dev/shm')
    assert.falsy(shm:find('s' .. pid .. '_%x+'), 'leftover segment: ' .. shm)
    local tmp = h.sh('ls -d /tmp/dpl-spawn-s' .. pid .. '_* 2>/dev/null')
    assert.are.equal('', tmp)
  end)

  it('an interrupted parent (SIGINT, SIGTERM) stops its workers, removes the job\'s files, exits with the signal',
    function()
    for _, case in ipairs({ { 'INT', 130 }, { 'TERM', 143 } }) do
      local dir = h.tmpname('-spawnsig')
      local s = h.write_file(h.tmpname('.lua'), [[
        local dpl = require 'dpl'
        local dist = dpl.dist
        local dir = arg[1]
        dist.spawn(function(rank)
          local f = io.open(dir .. '/pid.' .. rank, 'w'); f:write(dpl.C.dpl_proc_getpid()); f:close()
          local t = dpl.tensor.ones({ 10 })
          for i = 1, 1e9 do dist.all_reduce(t); if i % 1000 == 0 then t:fill_(1) end end
        end, 2)
      ]])
      local out, err = h.sh(([[mkdir -p %s; %s %s %s 2>%s/err & p=$!
        for i in $(seq 200); do [ -f %s/pid.0 ] && [ -f %s/pid.1 ] && break; sleep 0.05; done; sleep 0.3
        kill -%s $p; wait $p; echo "rc=$?"
        ls -d ${TMPDIR:-/tmp}/dpl-spawn-s${p}_* 2>/dev/null; ls /dev/shm | grep "s${p}_"
        for r in 0 1; do kill -0 $(cat %s/pid.$r) 2>/dev/null && echo "worker $r alive"; done]]):format(
        h.q(dir), h.q(h.bin), h.q(s), h.q(dir), h.q(dir), h.q(dir), h.q(dir), case[1], h.q(dir)), { timeout = 60 })
      local stderr = h.read_all(dir .. '/err')
      os.remove(s)
      h.sh('rm -rf ' .. h.q(dir))
      -- nothing after the status: no directory, no segment, no worker left
      assert.are.equal(('rc=%d\n'):format(case[2]), out, stderr .. err)
      assert.matches('interrupted', stderr)
    end
  end)

  it('checks its arguments', function()
    local out, err, rc = run([[
      for _, args in ipairs({ { 5, 2 }, { function() end, 0 }, { function() end, 1.5 } }) do
        local ok, e = pcall(spawn.spawn, args[1], args[2])
        print(tostring(e))
      end
      local ok, e = pcall(spawn.spawn, function() end, 2, { join = false })
      print(tostring(e))
    ]])
    assert.are.equal(0, rc, err)
    assert.matches('TypeError: dist.spawn: fn must be a function, got number\n', out)
    assert.matches('ValueError: dist.spawn: nprocs must be an integer >= 1, got 0\n', out)
    assert.matches('ValueError: dist.spawn: nprocs must be an integer >= 1, got 1.5\n', out)
    assert.matches('NotImplementedError: dist.spawn: join=false is not implemented', out)
  end)

  it('refuses to fork once MPI is initialised', function()
    local out, err, rc = run([[
      if not dist.is_mpi_available() then print('no mpi') return end
      dist.init_process_group{ backend = 'mpi' }
      local ok, e = pcall(spawn.spawn, function() end, 2)
      print(tostring(e))
      dist.destroy_process_group()
      ok, e = pcall(spawn.spawn, function() end, 2)
      print('after destroy: ' .. tostring(e))
    ]], { timeout = 60, env = 'ASAN_OPTIONS=detect_leaks=0' })
    assert.are.equal(0, rc, err)
    assert.matches('RuntimeError: dist.spawn: refusing to fork: MPI is initialised', out)
    assert.matches('after destroy: RuntimeError: dist.spawn: refusing to fork: MPI is initialised', out)
  end)
end)
