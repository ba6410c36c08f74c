-- dpl.data_workers: DataLoader{num_workers = N > 0}, torch 1.13's multi-process loading.
-- N workers are forked from the training process when a pass starts (each a copy of the
-- script's state: the dataset, collate_fn, worker_init_fn), each joined to the parent by a
-- socket pair (dpl_chan_*). At the start of a map-style pass the parent sends every worker
-- the pass's plan: the sampler's order as int32 (with the batch size and its count), or a batch_sampler's
-- lists flattened with their offsets. Then a task is a small frame {seq, epoch}: "load batch
-- seq of the plan". Batch k goes to worker (k-1) % N (the next active worker in turn for an
-- IterableDataset, whose tasks have no plan), up to prefetch_factor batches in flight per
-- worker; the batches come back in sampler order.
-- A batch travels as a frame: two int64 (the header's length, the tensors' bytes), the
-- header (string.buffer: the batch with each tensor replaced by a marker, the tensors'
-- dtype and shape), then each tensor's bytes, received straight into a new tensor.
--
-- Why no size can deadlock (a worker blocks sending a reply until the parent reads it; a
-- blocking send of the parent's would wait for a worker that is itself waiting):
--  * the plan is sent with blocking sends only at the start of a pass, when no worker has
--    a task (a new pool, or a persistent one drained of the last pass's replies): each is
--    reading, so the sends end, whatever the plan's size;
--  * during a pass the parent never blocks on a send to a worker that may be sending: task
--    frames are queued per worker and written with non-blocking sends (what fits now); the
--    parent waits only to complete the frame of the task whose reply it reads next, and that
--    worker has sent, and had read, the replies to all its earlier tasks, so it is reading;
--  * a worker only reads tasks and writes replies, one at a time, in order; the parent reads
--    replies in order, so a worker blocked in a send waits for the parent, which waits on no
--    cycle. Replies of any size (a 64 MB batch) stream through.
--
-- Workers run with one compute thread, refuse CUDA and collectives, ignore SIGINT and die
-- with the parent (PR_SET_PDEATHSIG); the parent kills and reaps them at the end of a pass
-- (unless persistent_workers), on an error, when a pass is abandoned (a new pass, the
-- pass's or the loader's garbage collection, the host's exit). A worker's error comes back
-- with its traceback; a dead worker is an error naming it, never a hang.
local ffi = require 'ffi'
local buffer = require 'string.buffer'
local capi = require 'dpl.capi'
local errors = require 'dpl.errors'
local C = capi.C

local M = {}

local SIGKILL = 9
local TENSOR_KEY = '__dpl_worker_tensor'
local have_usleep = pcall(ffi.cdef, 'int usleep(unsigned int usec);')

local worker_info = nil -- set in a worker process
--- get_worker_info(): {id (0-based), num_workers, seed, dataset} in a worker, nil in the
--- training process.
function M.get_worker_info() return worker_info end

local function describe(v)
  if type(v) == 'string' then return ("'%s'"):format(v) end
  return type(v) == 'table' and tostring(v.__name or 'a table') or type(v)
end

local function last_error() return ffi.string(C.dpl_last_error()) end

-- ------------------------------------------------------------------ frames
local hdr = ffi.new('int64_t[2]')
local recv_buf = buffer.new()
local send_buf = buffer.new()
local shape_buf = ffi.new('int64_t[8]')
local out1 = ffi.new('dpl_tensor*[1]')

-- the batch with its tensors replaced by markers; tensors[i] = the contiguous tensor,
-- descs[i] = {dtype, shape...}
local function flatten(v, tensors, descs, path, depth)
  local T = require 'dpl.tensor'
  if T.is_tensor(v) then
    if v._devtype ~= 0 then
      errors.RuntimeError:raise(('the batch holds a tensor on %s at %s: a DataLoader worker sends CPU tensors only'
        .. ' (it cannot use CUDA; move the batch to the GPU in the training loop)'):format(tostring(v.device), path), 0)
    end
    local c = v:contiguous()
    local d = { tonumber(c._dtype) }
    for k = 0, c._ndim - 1 do d[k + 2] = tonumber(c._shape[k]) end
    tensors[#tensors + 1] = c
    descs[#descs + 1] = d
    return { [TENSOR_KEY] = #tensors }
  end
  local tv = type(v)
  if tv == 'table' then
    if depth > 100 then errors.ValueError:raise(('the batch nests tables more than 100 deep at %s (a cycle?)'):format(path), 0) end
    if getmetatable(v) ~= nil then
      errors.TypeError:raise(('the batch holds an object with a metatable (%s) at %s: a DataLoader worker sends'
        .. ' tensors, numbers, strings, booleans and plain tables of them'):format(describe(v), path), 0)
    end
    local out = {}
    for k, x in pairs(v) do
      local kp = type(k) == 'string' and (path .. '.' .. k) or (path .. '[' .. tostring(k) .. ']')
      if type(k) == 'table' or T.is_tensor(k) then
        errors.TypeError:raise(('the batch has a table or tensor as a key at %s'):format(path), 0)
      end
      out[k] = flatten(x, tensors, descs, kp, depth + 1)
    end
    return out
  end
  if tv == 'function' or tv == 'userdata' or tv == 'thread' then
    errors.TypeError:raise(('the batch holds a %s at %s: a DataLoader worker sends tensors, numbers, strings,'
      .. ' booleans and plain tables of them'):format(tv, path), 0)
  end
  if tv == 'cdata' and not (ffi.istype('int64_t', v) or ffi.istype('uint64_t', v)) then
    errors.TypeError:raise(('the batch holds a cdata (%s) at %s: a DataLoader worker sends tensors, numbers,'
      .. ' strings, booleans and plain tables of them'):format(tostring(ffi.typeof(v)), path), 0)
  end
  return v
end

local function unflatten(v, tensors)
  if type(v) ~= 'table' then return v end
  local i = v[TENSOR_KEY]
  if i ~= nil then return tensors[i] end
  for k, x in pairs(v) do
    if type(x) == 'table' then v[k] = unflatten(x, tensors) end
  end
  return v
end

local function chan_check(st, what)
  if st ~= 0 then return nil, st, what .. ': ' .. last_error() end
  return true
end

-- appends a frame's header and message to buf (raw: the bytes of the tensors that follow)
local function put_frame(buf, msg, raw)
  local enc = buffer.encode(msg)
  hdr[0], hdr[1] = #enc, raw or 0
  buf:putcdata(hdr, 16):put(enc)
end

-- sends msg (a plain Lua table) and, when given, the tensors' bytes after it
local function send_frame(fd, msg, tensors, timeout)
  local raw = 0
  if tensors then
    for _, t in ipairs(tensors) do raw = raw + tonumber(t._numel) * tonumber(C.dpl_dtype_size(t._dtype)) end
  end
  send_buf:reset()
  put_frame(send_buf, msg, raw)
  local p, n = send_buf:ref()
  local ok, st, e = chan_check(C.dpl_chan_send(fd, p, n, timeout), 'sending')
  if not ok then return nil, st, e end
  if tensors then
    for _, t in ipairs(tensors) do
      local nb = tonumber(t._numel) * tonumber(C.dpl_dtype_size(t._dtype))
      if nb > 0 then
        ok, st, e = chan_check(C.dpl_chan_send(fd, t._data, nb, timeout), 'sending a tensor')
        if not ok then return nil, st, e end
      end
    end
  end
  return true
end

-- receives a frame: the message, with the tensors of msg.descs in msg.tensors
local function recv_frame(fd, timeout)
  local ok, st, e = chan_check(C.dpl_chan_recv(fd, hdr, 16, timeout), 'receiving')
  if not ok then return nil, st, e end
  local n, raw = tonumber(hdr[0]), tonumber(hdr[1])
  recv_buf:reset()
  local p = recv_buf:reserve(n)
  ok, st, e = chan_check(C.dpl_chan_recv(fd, p, n, timeout), 'receiving')
  if not ok then return nil, st, e end
  recv_buf:commit(n)
  local msg = recv_buf:decode()
  if raw > 0 or msg.descs then
    local T = require 'dpl.tensor'
    local tensors = {}
    for i, d in ipairs(msg.descs or {}) do
      local nd = #d - 1
      for k = 1, nd do shape_buf[k - 1] = d[k + 1] end
      local cst = C.dpl_tensor_empty(d[1], nd, shape_buf, 0, 0, out1)
      if cst ~= 0 then return nil, cst, 'allocating a batch tensor: ' .. last_error() end
      local t = T._wrap(out1)
      local nb = tonumber(t._numel) * tonumber(C.dpl_dtype_size(t._dtype))
      if nb > 0 then
        ok, st, e = chan_check(C.dpl_chan_recv(fd, t._data, nb, timeout), 'receiving a tensor')
        if not ok then return nil, st, e end
      end
      tensors[i] = t
    end
    msg.tensors = tensors
  end
  return msg
end
M._send_frame, M._recv_frame = send_frame, recv_frame

-- ------------------------------------------------------------------ a pass's plan
-- A map-style pass's batches, sent to every worker once at its start: the positions of the
-- pass in order as an int32 tensor, with the batch size (batch b: positions (b-1)*bs+1 ..
-- min(b*bs, count)) or, for a batch_sampler, its lists flattened and an int64 tensor of
-- offsets (batch b: offsets[b-1] .. offsets[b]-1, 0-based). Positions that are not int32
-- integers (a sampler or batch_sampler of one's own may yield anything its dataset takes)
-- travel as the Lua lists themselves. A task is then {seq, epoch}: batch seq of the plan.
local I32_MIN, I32_MAX = -2147483648, 2147483647
local function is_i32(v) return type(v) == 'number' and v % 1 == 0 and v >= I32_MIN and v <= I32_MAX end

local function new_raw(dtype, n)
  local T = require 'dpl.tensor'
  shape_buf[0] = n
  capi.check(C.dpl_tensor_empty(dtype, 1, shape_buf, 0, 0, out1), 3)
  return T._wrap(out1)
end
local DT_INT32, DT_INT64 = 4, 5

-- (msg, tensors, parent_indices(b), nb) for the pass of impl; raises on a bad batch_sampler
local function make_plan(impl, epoch)
  if impl.batch_sampler then
    local lists = impl.batch_sampler:batches()
    if type(lists) ~= 'table' then
      errors.TypeError:raise(('DataLoader: batch_sampler:batches() must return a list of lists of positions, got %s')
        :format(type(lists)), 0)
    end
    local nb, total, ints = 0, 0, true
    while true do
      local idx = lists[nb + 1]
      if idx == nil then break end
      if type(idx) ~= 'table' then
        errors.TypeError:raise(('DataLoader: batch %d of the batch_sampler is %s, not a list of positions'):format(
          nb + 1, type(idx)), 0)
      end
      nb = nb + 1
      local m = #idx
      for k = 1, m do if not is_i32(idx[k]) then ints = false break end end
      total = total + m
    end
    local function parent_indices(b) return lists[b] end
    if not ints then return { plan = true, epoch = epoch, nb = nb, lists = lists }, nil, parent_indices, nb end
    local pos, offs = new_raw(DT_INT32, total), new_raw(DT_INT64, nb + 1)
    local p, o = ffi.cast('int32_t*', pos._data), ffi.cast('int64_t*', offs._data)
    local at = 0
    o[0] = 0
    for b = 1, nb do
      local idx = lists[b]
      for k = 1, #idx do p[at] = idx[k]; at = at + 1 end
      o[b] = at
    end
    return { plan = true, epoch = epoch, nb = nb, descs = { { DT_INT32, total }, { DT_INT64, nb + 1 } } },
      { pos, offs }, parent_indices, nb
  end
  local order, total, off = require('dpl.data')._sampler_order(impl.sampler)
  local bs = impl.batch_size or 1
  local stop = impl.drop_last and (total - total % bs) or total
  local nb = math.ceil(stop / bs)
  local function parent_indices(b)
    local first, last = (b - 1) * bs + 1, math.min(b * bs, stop)
    local idx = {}
    for k = first, last do idx[k - first + 1] = order[k - off] end
    return idx
  end
  local msg = { plan = true, epoch = epoch, nb = nb, bs = bs, count = stop }
  local pos = new_raw(DT_INT32, stop)
  if off == 1 then -- an int32 array (0-based)
    if stop > 0 then ffi.copy(pos._data, order, stop * 4) end
  else
    local p = ffi.cast('int32_t*', pos._data)
    for k = 1, stop do
      local v = order[k]
      if not is_i32(v) then
        local list = {}
        for j = 1, stop do list[j] = order[j] end
        msg.list = list
        return msg, nil, parent_indices, nb
      end
      p[k - 1] = v
    end
  end
  msg.descs = { { DT_INT32, stop } }
  return msg, { pos }, parent_indices, nb
end

-- the worker's side of a plan: batch b's positions (a new list)
local function plan_indices(plan, b)
  if plan.lists then return plan.lists[b] end
  local lo, hi
  if plan.offs then
    lo, hi = tonumber(plan.offs[b - 1]), tonumber(plan.offs[b])
  else
    lo = (b - 1) * plan.bs
    hi = math.min(lo + plan.bs, plan.count)
  end
  local idx, pos, list = {}, plan.pos, plan.list
  if pos then
    for k = lo, hi - 1 do idx[k - lo + 1] = pos[k] end
  else
    for k = lo, hi - 1 do idx[k - lo + 1] = list[k + 1] end
  end
  return idx
end

-- ------------------------------------------------------------------ the worker side
-- a worker's error as it travels: its text with the worker's traceback (from the frame
-- that raised it; none with plain), and its class's name
local function error_reply(e, plain)
  local cls, msg = nil, e
  pcall(function() if type(e) == 'table' and type(e.__name) == 'string' then cls = e.__name end end)
  if type(e) ~= 'string' then
    local ok, s = pcall(tostring, e)
    msg = ok and type(s) == 'string' and s or ('(error object is a ' .. type(e) .. ' value)')
  end
  if plain ~= true and not msg:find('\nstack traceback:\n', 1, true) then
    msg = debug.traceback(msg, 2):gsub("\n%s*%[C%]: in function 'xpcall'.*$", '')
  end
  return { err = msg, cls = cls }
end

-- a worker never returns: it serves tasks until the parent says stop or goes away
local function worker_main(pool, wid, fd)
  local ok_setup = pcall(function()
    require('dpl.host').clear_atexit() -- the parent's cleanups are the parent's
  end)
  local _ = ok_setup
  C.dpl_proc_worker_setup()
  -- the parent's ends of every channel (this worker's, the other workers', other loaders')
  -- are not ours: closed, so that each side sees the other's end when it goes
  local pools = {}
  for p in pairs(M._pools) do pools[#pools + 1] = p end
  for _, p in ipairs(pools) do
    for w = 0, p.n - 1 do
      if p.fds[w] then C.dpl_chan_close(p.fds[w]) end
    end
    p.fds, p.pids, p.dead = {}, {}, true
  end
  local dist = package.loaded['dpl.dist']
  if dist and dist._refuse_in_worker then
    dist._refuse_in_worker('collectives cannot run in a DataLoader worker process (it is not a rank of the'
      .. ' process group); get_rank and get_world_size still answer')
  end
  local impl, seed = pool.impl, pool.base_seed + wid
  worker_info = { id = wid, num_workers = pool.n, seed = seed, dataset = impl.dataset }
  require('dpl.tensor').manual_seed(seed)
  math.randomseed(seed % 2147483647)
  local init_err
  if impl.worker_init_fn then
    local ok, e = xpcall(impl.worker_init_fn, error_reply, wid)
    if not ok then init_err = { err = 'in worker_init_fn: ' .. e.err, cls = e.cls } end
  end
  local epoch, it, done, plan = nil, nil, false, nil
  while true do
    local task = recv_frame(fd, -1)
    if not task or task.stop then C.dpl_proc_exit(0) end -- the parent closed the channel, or stop
    if task.plan then -- a map-style pass starts: its batches (no reply)
      plan = task
      local tt = task.tensors
      if tt then
        plan.pos = ffi.cast('int32_t*', tt[1]._data)
        if tt[2] then plan.offs = ffi.cast('int64_t*', tt[2]._data) end
      end
    else
      local reply
      if init_err then
        reply = { err = init_err.err, cls = init_err.cls }
      else
        local ok, r = xpcall(function()
          if impl._iterable then
            if task.epoch ~= epoch then epoch, it, done = task.epoch, impl:_iter_iterable(), false end
            if done then return nil end
            local b = it()
            if b == nil then done = true end
            return b
          end
          if not plan or plan.epoch ~= task.epoch or task.seq > plan.nb then
            errors.RuntimeError:raise(('DataLoader worker: batch %d of pass %s has no plan (an internal error)')
              :format(task.seq, tostring(task.epoch)), 0)
          end
          local b = impl:batch(plan_indices(plan, task.seq))
          if b == nil then
            errors.TypeError:raise(('DataLoader: %s returned nil for batch %d (a batch cannot be nil)'):format(
              impl.collate_fn and 'collate_fn' or 'the collation', task.seq), 0)
          end
          return b
        end, error_reply)
        if not ok then
          reply = r
        elseif r == nil then
          reply = { done = true }
        else
          local tensors, descs = {}, {}
          local okf, flat = pcall(flatten, r, tensors, descs, 'batch', 0)
          if okf then
            reply = { v = flat, descs = descs, tensors = tensors }
          else
            reply = error_reply(flat, true)
            reply.err = 'sending the batch: ' .. reply.err
          end
        end
      end
      reply.seq = task.seq
      local tensors = reply.tensors
      reply.tensors = nil
      if not send_frame(fd, reply, tensors, -1) then C.dpl_proc_exit(0) end -- the parent is gone
    end
  end
end

-- ------------------------------------------------------------------ the parent side
M._pools = setmetatable({}, { __mode = 'k' }) -- live pools (weak), for the exit cleanup and forks
local pool_mt = {}
pool_mt.__index = pool_mt

local pid_out, code_out = ffi.new('int32_t[1]'), ffi.new('int32_t[1]')

-- reaps pid within `wait` seconds (sleeping through the host's signal flag); its exit code
-- (-N: signal N), or nil
local function reap(pid, wait)
  local deadline = C.dpl_clock() + wait
  while true do
    local st = C.dpl_proc_wait(pid, 0.05, pid_out, code_out)
    if st == 0 then return code_out[0] end
    if st == C.DPL_EINTR then
      if have_usleep then ffi.C.usleep(2000) end
    elseif st ~= C.DPL_ETIMEOUT then
      return nil -- not our child (any more)
    end
    if C.dpl_clock() > deadline then return nil end
  end
end

--- Kills and reaps every worker of the pool (graceful: closes the channels first and gives
--- the workers a moment to exit on their own). Idempotent; a no-op in another process.
function pool_mt:shutdown(graceful)
  if self.dead or C.dpl_proc_getpid() ~= self.owner then return end
  self.dead = true
  M._pools[self] = nil
  -- (numeric loops over the worker ids, never pairs() with fields cleared as it goes: this
  -- runs from finalizers too, and there such a pairs() loop was seen to spin for ever in
  -- the JIT's trace exits, about 1 run in 30 under load, with bookworm's LuaJIT and with
  -- luajit2 alike; the cause inside LuaJIT is not pinned down, a plain repro stays clean)
  local fds, pids = self.fds, self.pids
  for w = 0, self.n - 1 do
    local f = fds[w]
    if f then fds[w] = nil; C.dpl_chan_close(f) end
  end
  if not graceful then
    for w = 0, self.n - 1 do
      if pids[w] then C.dpl_proc_kill(pids[w], SIGKILL) end
    end
  end
  for w = 0, self.n - 1 do
    local pid = pids[w]
    if pid then
      local code = reap(pid, graceful and 2 or 5)
      if code == nil and graceful then
        C.dpl_proc_kill(pid, SIGKILL)
        reap(pid, 5)
      end
      pids[w] = nil
    end
  end
end

local function signal_text(code)
  if code == nil then return 'it could not be reaped' end
  if code < 0 then return ('signal %d'):format(-code) end
  return ('exit code %d'):format(code)
end

-- the error for a failed wait on worker w (its pool shut down first)
function pool_mt:fail(w, st, e, seq)
  local pid = self.pids[w]
  if st == C.DPL_ECOMM then -- the worker's end closed: it died
    local code = pid and reap(pid, 1)
    if code ~= nil then self.pids[w] = nil end -- reaped; the others are killed below
    self:shutdown(false)
    errors.RuntimeError:raise(('DataLoader worker %d (pid %d) exited unexpectedly (%s) while loading batch %d')
      :format(w, pid or -1, signal_text(code), seq), 0)
  end
  self:shutdown(false)
  if st == C.DPL_ETIMEOUT then
    errors.RuntimeError:raise(('DataLoader timed out after %g seconds waiting for batch %d from worker %d (pid %d)')
      :format(self.timeout, seq, w, pid or -1), 0)
  end
  if st == C.DPL_EINTR then error('interrupted', 0) end
  errors.RuntimeError:raise(('DataLoader worker %d (pid %d): %s'):format(w, pid or -1, tostring(e)), 0)
end

local function new_pool(impl)
  local n = impl.num_workers
  -- (unlike dist.spawn, no fork guard: CUDA or MPI state in the parent is left alone, as the
  -- workers refuse both and end with _exit)
  local base_seed
  if impl.generator then
    base_seed = tonumber(impl.generator:_next_key() % 9007199254740992ULL)
  else
    base_seed = require('dpl.data').draw_seed()
  end
  local pool = setmetatable({ impl = impl, n = n, fds = {}, pids = {}, owner = C.dpl_proc_getpid(),
    base_seed = base_seed, timeout = impl.timeout or 0, prefetch = impl.prefetch_factor or 2,
    outstanding = {}, active = {}, epoch = 0, out = {}, flushed = {} }, pool_mt)
  -- a finalizer: a pool garbage-collected with its workers alive kills them
  local sentinel = newproxy(true)
  getmetatable(sentinel).__gc = function() pcall(pool_mt.shutdown, pool, false) end
  pool.sentinel = sentinel
  M._pools[pool] = true
  local fds = ffi.new('int32_t[2]')
  local pidbox = ffi.new('int32_t[1]')
  local ok, e = pcall(function()
    for w = 0, n - 1 do
      capi.check(C.dpl_chan_pair(fds), 2)
      local mine, theirs = fds[0], fds[1]
      pool.fds[w] = mine
      local st = C.dpl_proc_fork(pidbox)
      if st ~= 0 then C.dpl_chan_close(theirs); capi.check(st, 2) end
      if pidbox[0] == 0 then
        -- the child: never returns (an error here ends it)
        local okw, ew = xpcall(worker_main, error_reply, pool, w, theirs)
        if not okw then io.stderr:write('DataLoader worker ', w, ': ', ew.err, '\n') end
        C.dpl_proc_exit(1)
      end
      C.dpl_chan_close(theirs)
      pool.pids[w] = pidbox[0]
      pool.outstanding[w] = 0
      pool.active[w] = true
      pool.out[w], pool.flushed[w] = buffer.new(), 0
    end
  end)
  if not ok then
    pool:shutdown(false)
    error(e, 0)
  end
  return pool
end

-- Writes worker w's queued task frames: what fits now, never waiting; with upto, all of its
-- stream up to byte upto (counted from the pool's start), waiting as long as it takes. The
-- parent waits only for the task whose reply it wants next: that worker has sent every
-- earlier reply and had it read, so it is reading its tasks, and the wait ends.
function pool_mt:flush(w, upto, seq)
  local buf = self.out[w]
  local n = #buf
  if n == 0 then return end
  local p = buf:ref()
  if upto then
    local need = upto - self.flushed[w]
    if need <= 0 then return end
    local st = C.dpl_chan_send(self.fds[w], p, need, self.timeout > 0 and self.timeout or -1)
    if st ~= 0 then self:fail(w, st, 'sending a task: ' .. last_error(), seq) end
    buf:skip(need)
    self.flushed[w] = self.flushed[w] + need
  else
    local k = tonumber(C.dpl_chan_send_some(self.fds[w], p, n))
    if k < 0 then self:fail(w, k, 'sending a task: ' .. last_error(), seq) end
    if k > 0 then
      buf:skip(k)
      self.flushed[w] = self.flushed[w] + k
    end
  end
end

-- receives the reply to task seq (queued for worker w), sending its frame first if need be
function pool_mt:reply(task, seq)
  local w = task.w
  for v = 0, self.n - 1 do -- (the other workers' queued tasks: what fits)
    if v ~= w and #self.out[v] > 0 then self:flush(v, nil, seq) end
  end
  self:flush(w, task.upto, seq)
  local msg, st, err = recv_frame(self.fds[w], self.timeout > 0 and self.timeout or -1)
  if not msg then self:fail(w, st, err, seq) end
  self.outstanding[w] = self.outstanding[w] - 1
  return msg
end

--- One pass (epoch) of a loader with workers: an iterator function over its batches.
function M.iter(impl)
  local pool = impl._pool
  if pool and (pool.dead or not impl.persistent_workers) then
    pool:shutdown(false)
    pool = nil
  end
  if pool and pool.busy then pool:drain() end
  if not pool then
    pool = new_pool(impl)
    impl._pool = pool
  end
  pool.epoch = pool.epoch + 1
  local epoch = pool.epoch
  for w = 0, pool.n - 1 do pool.active[w] = true end
  local parent_indices, nbatches -- (map-style)
  local queue, sent, got, exhausted = {}, 0, 0, false
  local turn = 0 -- the next worker in turn
  pool.busy = true
  pool.queue = queue
  local function dispatch()
    while not exhausted do
      local w
      for i = 0, pool.n - 1 do -- the next active worker in turn (all of them for a map-style dataset)
        local c = (turn + i) % pool.n
        if pool.active[c] then w = c break end
      end
      if w == nil or pool.outstanding[w] >= pool.prefetch then return end
      if nbatches and sent >= nbatches then exhausted = true return end
      turn = (w + 1) % pool.n
      sent = sent + 1
      local out = pool.out[w]
      put_frame(out, { seq = sent, epoch = epoch })
      queue[sent] = { w = w, upto = pool.flushed[w] + #out }
      pool.outstanding[w] = pool.outstanding[w] + 1
      pool:flush(w, nil, sent)
    end
  end
  local finished = false
  local function finish()
    finished = true
    pool.busy = false
    if not impl.persistent_workers then
      pool:shutdown(true)
      if impl._pool == pool then impl._pool = nil end
    end
  end
  local ok, e = pcall(function()
    if not impl._iterable then
      -- the plan goes to every worker now, while each is idle (a new pool, or a drained one)
      -- and reading: these sends end whatever their size
      local msg, tensors
      msg, tensors, parent_indices, nbatches = make_plan(impl, epoch)
      for w = 0, pool.n - 1 do
        local okp, st, err = send_frame(pool.fds[w], msg, tensors, pool.timeout > 0 and pool.timeout or -1)
        if not okp then pool:fail(w, st, err, 1) end
      end
    end
    dispatch()
  end)
  if not ok then pool:shutdown(false) error(e, 0) end
  -- the pass's finalizer: abandoned unfinished (a break, an error in the loop), a
  -- non-persistent pool's workers are killed when the pass is collected
  local sentinel = newproxy(true)
  getmetatable(sentinel).__gc = function()
    if not finished and not impl.persistent_workers then pcall(pool_mt.shutdown, pool, false) end
  end
  local function step()
    while true do
      if got >= sent then
        finish()
        return nil
      end
      got = got + 1
      local task = queue[got]
      local msg = pool:reply(task, got)
      queue[got] = nil
      local w = task.w
      if msg.err then
        local pid = pool.pids[w]
        pool:shutdown(false)
        local cls = msg.cls and errors[msg.cls]
        if type(cls) ~= 'table' or type(cls.raise) ~= 'function' then cls = errors.RuntimeError end
        cls:raise(('Caught %s in DataLoader worker process %d (pid %d) loading batch %d.\nOriginal traceback'
          .. ' (the worker\'s):\n%s'):format(msg.cls or 'an error', w, pid or -1, got, msg.err), 0)
      end
      if msg.done then
        pool.active[w] = false
        dispatch()
      else
        impl.last_batch_indices = parent_indices and parent_indices(got) or nil
        dispatch()
        return unflatten(msg.v, msg.tensors or {})
      end
    end
  end
  return function()
    if finished then return nil end
    local _ = sentinel
    local okr, r = pcall(step)
    if not okr then
      finished = true
      pool.busy = false
      pcall(pool_mt.shutdown, pool, false) -- (a second try: a signal raises at most once)
      if impl._pool == pool then impl._pool = nil end
      error(r, 0)
    end
    return r
  end
end

--- A persistent pool left mid-pass (a break): the tasks still queued are sent, and their
--- replies read and dropped, so that every worker is idle again.
function pool_mt:drain()
  local queue = self.queue or {}
  local keys = {}
  for k in pairs(queue) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    self:reply(queue[k], k)
    queue[k] = nil
  end
  self.busy = false
end

--- Ends the loader's workers now (persistent ones too); the next pass starts new ones.
function M.shutdown(impl)
  local pool = impl._pool
  impl._pool = nil
  if pool then pool:shutdown(false) end
end

local atexit_done = false
function M._register_atexit()
  if atexit_done then return end
  atexit_done = true
  pcall(function()
    require('dpl.host').atexit(function()
      local pools = {} -- (shutdown clears M._pools[p]: collected first)
      for p in pairs(M._pools) do pools[#pools + 1] = p end
      for _, p in ipairs(pools) do pcall(pool_mt.shutdown, p, false) end
    end)
  end)
end

return M
