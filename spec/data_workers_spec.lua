-- data_workers_spec.lua: DataLoader{num_workers = N > 0} (lua/dpl/data_workers.lua): the
-- same batches as num_workers = 0 in sampler order, worker_init_fn / get_worker_info and
-- the workers' seeds, IterableDataset interleaving, persistent_workers, errors and deaths
-- in a worker, timeouts, no process left behind, the option checks, CUDA and collectives
-- refused in a worker, DistributedSampler under dplhost --nproc 2, and a Trainer fit.
-- Every multi-process case runs in a fresh dplhost under a timeout, so none can hang.
local h = require 'spec.support.helpers'
local data = require 'dpl.data'
local errors = require 'dpl.errors'

local PRELUDE = [[
local dpl = require 'dpl'
local data = require 'dpl.data'
local T = require 'dpl.tensor'
local C = require('dpl.capi').C
local function children() -- the live (or zombie) children of this process, but the shell
  local p = io.popen('ps --ppid ' .. C.dpl_proc_getpid() .. ' -o pid=,stat=,comm=')
  local out = {}
  for line in p:lines() do if not line:find('sh$') and not line:find('ps$') then out[#out + 1] = line end end
  p:close()
  return #out, table.concat(out, ';')
end
local DS = data.Dataset:extend('DS')
function DS:__init(n, opts) self.n = n; self.opts = opts or {} end
function DS:__len() return self.n end
function DS:get(i)
  local o = self.opts
  if o.fail == i then error(require('dpl.errors').ValueError('item ' .. i .. ' is bad')) end
  if o.sleep then C.dpl_sleep(o.sleep) end
  return { x = T.arange(3):add(i):float(), y = i, tag = 'n' .. i, nest = { list = { i, i * 2 } } }
end
]]

local function run(body, opts)
  opts = opts or {}
  local f = h.write_file(h.tmpname('.lua'), PRELUDE .. body)
  local out, err, rc = h.sh((opts.env or '') .. ' ' .. (opts.pre or '') .. h.q(h.bin) .. ' ' .. h.q(f),
    { timeout = opts.timeout or 60 })
  os.remove(f)
  return out, err, rc
end

describe('DataLoader num_workers > 0', function()
  it('gives the batches of num_workers = 0, bit for bit, in sampler order (N = 1, 2, 3, uneven last batch)', function()
    local out, err, rc = run([[
      local function key(b)
        return table.concat(b.x:view(-1):tolist(), ',') .. '|' .. table.concat(b.y:tolist(), ',') .. '|'
          .. table.concat(b.tag, ',') .. '|' .. table.concat(b.nest.list[2]:tolist(), ',')
      end
      local function pass(opts)
        local l = data.DataLoader(DS(23), opts)
        local out = {}
        for b in l:iter() do
          assert(b.x.dtype == 'float32')
          out[#out + 1] = key(b) .. '#' .. table.concat(l.last_batch_indices, ',')
        end
        return table.concat(out, '\n'), #out
      end
      for _, base in ipairs({
        { batch_size = 5, shuffle = true, seed = 42 },
        { batch_size = 4, shuffle = true, seed = 7, drop_last = true },
        { batch_size = 3 },
        { batch_sampler = { { 3, 1 }, { 9, 8, 7 }, { 2 }, { 23, 22, 21, 20 } } },
      }) do
        local ref, n = pass(base)
        for _, nw in ipairs({ 1, 2, 3 }) do
          local o = {}
          for k, v in pairs(base) do o[k] = v end
          o.num_workers = nw
          local got = pass(o)
          print(nw, n, got == ref)
          if got ~= ref then print(ref, '\n--\n', got) end
        end
      end
      print('children', children())
    ]])
    assert.are.equal(0, rc, err)
    assert.falsy(out:find('false'), out)
    assert.truthy(out:find('3\t5\ttrue\n', 1, true), out)
    assert.truthy(out:find('\nchildren\t0\t\n', 1, true), out)
  end)

  it('never deadlocks on a large batch either way: 100000-position batches, 64 MB replies, small socket buffers', function()
    -- (DPL_CHAN_BUF=65536: the channels' buffers of a machine with a low net.core.wmem_max;
    -- before the pass's plan, a 100000-position task blocked the parent while the worker
    -- blocked sending its reply)
    local out, err, rc = run([[
      local N = 100000
      local ds = data.TensorDataset(T.arange(N):float(), T.arange(N))
      local rev, fwd = {}, {}
      for i = 1, N do rev[i], fwd[i] = N + 1 - i, i end
      local Own = data.Sampler:extend('Own') -- a sampler of one's own: a Lua list of positions
      function Own:__len() return N end
      function Own:indices() return rev end
      local function pass(opts)
        local l = data.DataLoader(ds, opts)
        local keys = {}
        for b in l do
          local idx = l.last_batch_indices
          keys[#keys + 1] = ('%d:%d:%d:%.0f:%d:%d'):format(b[2]:size(1), b[2][1]:item(), b[2][-1]:item(),
            b[1]:sum():item(), #idx, idx[#idx])
        end
        return table.concat(keys, ' ')
      end
      for _, base in ipairs({
        { batch_size = N, shuffle = true, seed = 3 },
        { batch_size = 60000, shuffle = true, seed = 4, persistent_workers = true },
        { batch_size = 30000, sampler = Own() },
        { batch_sampler = { rev, { 5, 3 }, fwd, { 1 }, rev, fwd } },
      }) do
        local o = {}
        for k, v in pairs(base) do o[k] = v end
        o.persistent_workers = nil
        local ref = pass(o)
        o.num_workers = 2
        o.persistent_workers = base.persistent_workers
        local got = pass(o)
        print('same', got == ref, #ref)
        if got ~= ref then print(ref, '\n--\n', got) end
      end
      -- positions that are not int32 integers travel as Lua lists
      local K = data.Dataset:extend('K')
      function K:__len() return 3 end
      function K:get(k) return T.full({ 1 }, #k) end
      local ks = {}
      for b in data.DataLoader(K(), { batch_sampler = { { 'a', 'bbb' }, { 'cc' } }, num_workers = 2 }) do
        ks[#ks + 1] = table.concat(b:view(-1):tolist(), ',')
      end
      print('keys', table.concat(ks, ' '))
      -- replies of 64 MB a batch
      local Big = data.Dataset:extend('Big')
      function Big:__len() return 4 end
      function Big:get_batch(idx) return T.full({ 16 * 1048576 }, idx[1]) end
      local sums = {}
      for b in data.DataLoader(Big(), { batch_size = 1, num_workers = 2 }) do
        sums[#sums + 1] = ('%.0f'):format(b:sum():item() / (16 * 1048576))
      end
      print('big', table.concat(sums, ','))
      print('children', children())
    ]], { env = 'DPL_CHAN_BUF=65536', timeout = 120 })
    assert.are.equal(0, rc, err)
    assert.falsy(out:find('same\tfalse'), out)
    local n = 0
    for _ in out:gmatch('same\ttrue') do n = n + 1 end
    assert.are.equal(4, n, out)
    assert.truthy(out:find('keys\t1,3 2\n', 1, true), out)
    assert.truthy(out:find('big\t1,2,3,4\n', 1, true), out)
    assert.truthy(out:find('\nchildren\t0\t\n', 1, true), out)
  end)

  it('runs worker_init_fn(id) with get_worker_info() {id, num_workers, seed, dataset}; nil in the parent', function()
    local out, err, rc = run([[
      local R = data.Dataset:extend('R')
      function R:__len() return 8 end
      function R:get(i)
        local info = data.get_worker_info()
        return { id = info.id, seed = info.seed, n = info.num_workers, same = info.dataset == self and 1 or 0,
                 r = T.rand({ 1 }), init = _G.INIT_SEEN or -1 }
      end
      local function pass()
        local l = data.DataLoader(R(), { batch_size = 2, num_workers = 3, worker_init_fn = function(id)
          assert(data.get_worker_info().id == id)
          rawset(_G, 'INIT_SEEN', id)
        end })
        local rows = {}
        for b in l:iter() do
          local id, seed = b.id:tolist()[1], b.seed:tolist()[1]
          rows[#rows + 1] = ('%d %d %d %d %d %d %.9f'):format(id, b.init:tolist()[1], b.n:tolist()[1],
            b.same:tolist()[1], seed - id, seed, b.r:view(-1):tolist()[1])
        end
        return rows
      end
      print('parent', data.get_worker_info())
      dpl.manual_seed(1)
      local a = pass()
      dpl.manual_seed(1)
      local b = pass()
      dpl.manual_seed(2)
      local c = pass()
      print(table.concat(a, '\n'))
      print('repeat', table.concat(a, ';') == table.concat(b, ';'), 'reseeded', table.concat(a, ';') ~= table.concat(c, ';'))
    ]])
    assert.are.equal(0, rc, err)
    assert.truthy(out:find('parent\tnil\n', 1, true), out)
    assert.truthy(out:find('repeat\ttrue\treseeded\ttrue', 1, true), out)
    local ids, bases, seeds, rands = {}, {}, {}, {}
    for id, init, n, same, base, seed, r in out:gmatch('\n(%d) (%d) (%d) (%d) (%d+) (%d+) ([%d.]+)') do
      ids[#ids + 1] = tonumber(id)
      assert.are.equal(id, init) -- worker_init_fn ran in that worker, with its id
      assert.are.equal('3', n)
      assert.are.equal('1', same)
      bases[base] = true
      seeds[id] = seed
      rands[#rands + 1] = r
    end
    assert.are.same({ 0, 1, 2, 0 }, ids) -- batch k from worker k % 3
    assert.are.equal(1, (function() local k = 0 for _ in pairs(bases) do k = k + 1 end return k end)())
    assert.are_not.equal(rands[1], rands[2]) -- each worker's generator seeded base_seed + id
  end)

  it('reads an IterableDataset with one iterator per worker, interleaved as torch (sharded by worker info)', function()
    local out, err, rc = run([[
      local S = data.IterableDataset:extend('S')
      function S:__init(n, shard) self.n, self.shard = n, shard end
      function S:__iter()
        local info, lo, step = data.get_worker_info(), 1, 1
        if info and self.shard then lo, step = info.id + 1, info.num_workers end
        local i = lo - step
        return function() i = i + step; if i <= self.n then return T.full({ 1 }, i) end end
      end
      for _, nw in ipairs({ 0, 2, 3 }) do
        for _, shard in ipairs({ true, false }) do
          local out = {}
          for b in data.DataLoader(S(7, shard), { batch_size = 2, num_workers = nw }):iter() do
            out[#out + 1] = table.concat(b:view(-1):tolist(), ',')
          end
          print(nw, shard, table.concat(out, ' '))
        end
      end
    ]])
    assert.are.equal(0, rc, err)
    -- torch 1.13: batch k from the k-th active worker in turn; a worker that ran out is skipped
    assert.truthy(out:find('0\ttrue\t1,2 3,4 5,6 7\n', 1, true), out)
    assert.truthy(out:find('2\ttrue\t1,3 2,4 5,7 6\n', 1, true), out)
    assert.truthy(out:find('3\ttrue\t1,4 2,5 3,6 7\n', 1, true), out)
    assert.truthy(out:find('2\tfalse\t1,2 1,2 3,4 3,4 5,6 5,6 7 7\n', 1, true), out) -- duplicated, as torch
  end)

  it('keeps persistent_workers across epochs (and after a break); otherwise new workers each epoch', function()
    local out, err, rc = run([[
      local P = data.Dataset:extend('P')
      function P:__len() return 7 end
      function P:get(i) return { i, C.dpl_proc_getpid() } end
      local function pids(l, stop)
        local seen = {}
        for b in l:iter() do
          seen[#seen + 1] = b[2]:tolist()[1]
          if stop and #seen == stop then break end
        end
        return table.concat(seen, ',')
      end
      local l = data.DataLoader(P(), { batch_size = 2, num_workers = 2, persistent_workers = true })
      local e1 = pids(l)
      local e2 = pids(l, 1)
      local e3 = pids(l)
      print('persistent', e1 == e3, e2 == e1:match('^%d+'), (children()))
      l:shutdown_workers()
      print('after shutdown', children())
      local m = data.DataLoader(P(), { batch_size = 2, num_workers = 2 })
      local f1 = pids(m)
      print('end of epoch', children())
      local f2 = pids(m)
      print('fresh', f1 ~= f2)
    ]])
    assert.are.equal(0, rc, err)
    assert.truthy(out:find('persistent\ttrue\ttrue\t2\n', 1, true), out)
    assert.truthy(out:find('after shutdown\t0\t\n', 1, true), out)
    assert.truthy(out:find('end of epoch\t0\t\n', 1, true), out)
    assert.truthy(out:find('fresh\ttrue', 1, true), out)
  end)

  it('re-raises a worker error in the parent with the worker id, class and traceback; nothing left behind', function()
    local out, err, rc = run([[
      local ok, e = pcall(function()
        for b in data.DataLoader(DS(12, { fail = 7 }), { batch_size = 2, num_workers = 2 }):iter() do end
      end)
      print(ok, require('dpl.errors').is(e, require('dpl.errors').ValueError), tostring(e))
      print('children', children())
      ok, e = pcall(function()
        for b in data.DataLoader(DS(4), { batch_size = 2, num_workers = 2,
          worker_init_fn = function(id) if id == 1 then error('init of ' .. id .. ' failed') end end }):iter() do end
      end)
      print(ok, tostring(e))
    ]])
    assert.are.equal(0, rc, err)
    assert.truthy(out:find('false\ttrue\tValueError: Caught ValueError in DataLoader worker process 1 (pid ', 1, true), out)
    assert.truthy(out:find('loading batch 4.\nOriginal traceback', 1, true), out)
    assert.truthy(out:find('ValueError: item 7 is bad\nstack traceback:', 1, true), out)
    assert.truthy(out:find("in function 'get'", 1, true), out)
    assert.truthy(out:find('children\t0\t\n', 1, true), out)
    assert.truthy(out:find('worker process 1 %(pid %d+%) loading batch 2%.\nOriginal traceback %(the worker\'s%):\nin worker_init_fn: .-init of 1 failed'), out)
  end)

  it('reports a worker killed with SIGKILL promptly, naming it, and kills and reaps the others', function()
    local out, err, rc = run([[
      local l = data.DataLoader(DS(400, { sleep = 0.01 }), { batch_size = 2, num_workers = 3 })
      local t0, victim = C.dpl_clock(), nil
      local ok, e = pcall(function()
        local k = 0
        for b in l:iter() do
          k = k + 1
          if k == 3 then
            victim = rawget(getmetatable(l).__index, '_pool').pids[1]
            C.dpl_proc_kill(victim, 9)
          end
        end
      end)
      print(ok, tostring(e))
      print('victim', victim, 'fast', C.dpl_clock() - t0 < 5)
      print('children', children())
    ]])
    assert.are.equal(0, rc, err)
    local victim = out:match('victim\t(%d+)')
    assert.truthy(out:find(('RuntimeError: DataLoader worker 1 (pid %s) exited unexpectedly (signal 9)'):format(victim), 1, true), out)
    assert.truthy(out:find('fast\ttrue', 1, true), out)
    assert.truthy(out:find('children\t0\t\n', 1, true), out)
  end)

  it('leaves no worker after a break (once the pass, or a for-in loop\'s batch, is collected, a new pass starts, or shutdown_workers)', function()
    local out, err, rc = run([[
      local l = data.DataLoader(DS(60), { batch_size = 2, num_workers = 3 })
      for b in l:iter() do break end
      print('alive after break', (children()))
      collectgarbage(); collectgarbage()
      print('after gc', children())
      for b in l:iter() do break end
      for b in l:iter() do break end -- the second pass ends the first one's workers
      print('second pass', (children()))
      for b in l do break end
      l:shutdown_workers()
      print('after shutdown_workers', children())
      -- `for b in loader do`: the pass lives while the loop runs (collections and all), and
      -- goes with the loop's batch after a break
      local n = 0
      for b in l do n = n + 1; collectgarbage(); collectgarbage() end
      print('gc in the loop', n)
      for b in l do break end
      print('alive after for-in break', (children()))
      collectgarbage(); collectgarbage()
      print('for-in break, after gc', children())
      -- an error in the training loop
      pcall(function() for b in l:iter() do error('loop failed') end end)
      collectgarbage(); collectgarbage()
      print('after loop error', children())
    ]])
    assert.are.equal(0, rc, err)
    assert.truthy(out:find('alive after break\t3\n', 1, true), out)
    assert.truthy(out:find('after gc\t0\t\n', 1, true), out)
    assert.truthy(out:find('second pass\t3\n', 1, true), out)
    assert.truthy(out:find('after shutdown_workers\t0\t\n', 1, true), out)
    assert.truthy(out:find('gc in the loop\t30\n', 1, true), out)
    assert.truthy(out:find('alive after for-in break\t3\n', 1, true), out)
    assert.truthy(out:find('for-in break, after gc\t0\t\n', 1, true), out)
    assert.truthy(out:find('after loop error\t0\t\n', 1, true), out)
  end)

  it('raises after timeout seconds naming the worker; workers die with the parent', function()
    local out, err, rc = run([[
      local t0 = C.dpl_clock()
      local ok, e = pcall(function()
        for b in data.DataLoader(DS(4, { sleep = 3 }), { batch_size = 2, num_workers = 2, timeout = 0.5 }):iter() do end
      end)
      print(ok, tostring(e), C.dpl_clock() - t0 < 2)
      print('children', children())
      -- the parent dies (SIGKILL) in mid-pass: its workers follow (PR_SET_PDEATHSIG)
      local l = data.DataLoader(DS(100, { sleep = 0.05 }), { batch_size = 1, num_workers = 2 })
      local it = l:iter()
      it()
      local pool = rawget(getmetatable(l).__index, '_pool')
      local f = io.open(os.getenv('PIDFILE'), 'w')
      f:write(pool.pids[0], ' ', pool.pids[1], '\n')
      f:close()
      C.dpl_proc_kill(C.dpl_proc_getpid(), 9)
    ]], { env = 'PIDFILE=' .. h.tmpname('.pids') })
    assert.truthy(out:find('false\tRuntimeError: DataLoader timed out after 0.5 seconds waiting for batch 1 from worker 0 (pid ', 1, true), out)
    assert.truthy(out:find(')\ttrue\nchildren\t0\t\n', 1, true), out)
    assert.are.equal(137, rc, err)
  end)

  it('checks the worker options as torch 1.13', function()
    local D = data.Dataset:extend('D0')
    function D:__len() return 4 end
    function D:get(i) return i end
    h.raises(function() data.DataLoader(D(), { num_workers = 1, multiprocessing_context = 'spawn' }) end,
      "NotImplementedError: DataLoader: multiprocessing_context='spawn'")
    h.raises(function() data.DataLoader(D(), { num_workers = 1, multiprocessing_context = 'threads' }) end,
      "ValueError: DataLoader: multiprocessing_context option should specify a valid start method")
    h.raises(function() data.DataLoader(D(), { multiprocessing_context = 'fork' }) end,
      'multiprocessing_context can only be used with multi-process loading')
    h.raises(function() data.DataLoader(D(), { num_workers = 2, prefetch_factor = 0 }) end,
      'prefetch_factor must be a positive integer, got 0')
    h.raises(function() data.DataLoader(D(), { persistent_workers = true }) end,
      'persistent_workers option needs num_workers > 0')
    h.raises(function() data.DataLoader(D(), { num_workers = -1 }) end, 'num_workers')
    local l = data.DataLoader(D(), { num_workers = 2, prefetch_factor = 3, persistent_workers = true,
      multiprocessing_context = 'fork', timeout = 5 })
    assert.are.equal(2, l.num_workers)
    assert.are.equal(3, l.prefetch_factor)
    assert.is_true(l.persistent_workers)
    -- a DistributedSampler's loader (the Trainer's with_sampler) keeps the worker options
    local l2 = l:with_sampler(data.SequentialSampler(4))
    assert.are.equal(2, l2.num_workers)
    assert.are.equal(3, l2.prefetch_factor)
    assert.is_true(l2.persistent_workers)
    assert.are.equal(5, l2.timeout)
    assert.is_nil(data.get_worker_info())
    local _ = errors
  end)

  it('refuses CUDA and unsendable values in a worker with a clear error', function()
    local out, err, rc = run([[
      local G = data.Dataset:extend('G')
      function G:__len() return 2 end
      function G:get(i) if i == 1 then return T.zeros({ 2 }, { device = 'cuda' }) end return { f = print } end
      local function first(opts)
        local ok, e = pcall(function() for b in data.DataLoader(G(), opts):iter() do end end)
        return tostring(e)
      end
      print(first({ batch_size = 1, num_workers = 1 }))
      print(first({ batch_size = 1, num_workers = 1, sampler = { 2 }, collate_fn = function(x) return x end }))
    ]])
    assert.are.equal(0, rc, err)
    assert.truthy(out:find('CUDA cannot be used in a DataLoader worker process', 1, true), out)
    assert.truthy(out:find('the batch holds a function at batch[1].f', 1, true), out)
  end)

  it('works with a DistributedSampler under dplhost --nproc 2; a worker cannot join collectives', function()
    local f = h.write_file(h.tmpname('.lua'), PRELUDE .. [[
      local dist = require 'dpl.dist'
      dist.init_process_group{ backend = 'shm' }
      local W = data.Dataset:extend('W')
      function W:__len() return 22 end
      function W:get(i)
        if i == 5 and self.coll then dist.all_reduce(T.ones({ 1 })) end
        return { T.full({ 1 }, i), dist.get_rank() }
      end
      local function pass(nw, coll)
        local ds = W(); ds.coll = coll
        local l = data.DataLoader(ds, { batch_size = 3, num_workers = nw,
          sampler = data.DistributedSampler{ dataset = ds, shuffle = true, seed = 3 } })
        local out = {}
        for b in l:iter() do out[#out + 1] = table.concat(b[1]:view(-1):tolist(), ',') .. '@' .. b[2]:tolist()[1] end
        return table.concat(out, ' ')
      end
      local rank = dist.get_rank()
      print('same', rank, pass(0) == pass(2))
      local ok, e = pcall(pass, 2, true)
      print('coll', rank, ok, (tostring(e):match('dist: [^\n]*')))
      local t = T.full({ 1 }, rank + 1)
      dist.all_reduce(t)
      print('sum', rank, t:item())
      dist.destroy_process_group()
    ]])
    local out, err, rc = h.dplhost('--nproc 2 ' .. h.q(f), { timeout = 90 })
    os.remove(f)
    assert.are.equal(0, rc, err)
    assert.truthy(out:find('same\t0\ttrue', 1, true), out)
    assert.truthy(out:find('same\t1\ttrue', 1, true), out)
    assert.truthy(out:find('\tfalse\tdist: collectives cannot run in a DataLoader worker process', 1, true), out)
    assert.truthy(out:find('sum\t0\t3', 1, true), out)
    assert.truthy(out:find('sum\t1\t3', 1, true), out)
  end)

  it('a Trainer fit on Fashion-MNIST with num_workers = 2 gives the weights of num_workers = 0', function()
    if not pcall(require('dpl').datasets.FashionMNIST, { train = false }) then
      pending('Fashion-MNIST is not installed')
      return
    end
    local out, err, rc = run([[
      local nn, F, optim = dpl.nn, dpl.nn.functional, dpl.optim
      local Net = dpl.LightningModule:extend('WNet')
      function Net:__init()
        dpl.LightningModule.__init(self)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))
      end
      function Net:forward(x) return self.net(x) end
      function Net:training_step(batch) return F.cross_entropy(self(batch[1]), batch[2]) end
      function Net:configure_optimizers() return optim.SGD(self:parameters(), { lr = 0.05, momentum = 0.9 }) end
      local idx = {}
      for i = 1, 640 do idx[i] = i end
      local function fit(nw)
        dpl.manual_seed(5)
        local model = Net()
        local ds = data.Subset(dpl.datasets.FashionMNIST { train = true }, idx)
        local loader = data.DataLoader(ds, { batch_size = 64, shuffle = true, seed = 11, num_workers = nw })
        local tr = dpl.Trainer { max_epochs = 2, limit_train_batches = 6, logger = false, enable_checkpointing = false,
          enable_progress_bar = false, enable_model_summary = false }
        tr:fit(model, loader)
        local parts = {}
        for _, p in ipairs(model:parameters()) do parts[#parts + 1] = p:view(-1) end
        return dpl.cat(parts), tr.global_step
      end
      local a, sa = fit(0)
      local b, sb = fit(2)
      print('same', dpl.equal(a, b), sa, sb)
      collectgarbage(); collectgarbage()
      print('children', children())
    ]], { timeout = 120 })
    assert.are.equal(0, rc, err)
    assert.truthy(out:find('same\ttrue\t12\t12', 1, true), out)
    assert.truthy(out:find('children\t0\t\n', 1, true), out)
  end)
end)
