-- dpl.spawn: dist.spawn(fn, nprocs, opts), what the ddp_spawn strategy uses.
-- Forks nprocs workers from the running script (the Lua state cannot be
-- pickled, so workers inherit it), gives each its rank and an initialised
-- process group, calls fn(rank, ...) in each, and returns rank 0's return
-- values (anything string.buffer encodes, or dpl.save stores: tensors come back on
-- the CPU) to the parent. When a worker fails,
-- the others are stopped and the parent raises an error naming the worker's
-- rank with its message and traceback. Refuses to fork after MPI or CUDA was
-- initialised in the parent.
local ffi = require 'ffi'
local buffer = require 'string.buffer'
local capi = require 'dpl.capi'
local errors = require 'dpl.errors'
local C = capi.C

local M = {}

local function pack(...) return { n = select('#', ...), ... } end

M.ProcessRaisedException = errors.new_class('ProcessRaisedException')
M.ProcessExitedException = errors.new_class('ProcessExitedException')

--- Checks run before forking; each returns nil or a reason not to fork.
M.fork_guards = {
  function()
    local dist = package.loaded['dpl.dist']
    if dist and dist.mpi_initialized() then
      return 'MPI is initialised in this process (forking an MPI process corrupts it); ' ..
        "use dplhost --nproc N or mpirun with strategy 'ddp' instead of spawning"
    end
  end,
  function()
    -- (as Lightning's fork strategies: a forked process cannot use CUDA once its parent did)
    if C.dpl_cuda_initialized() ~= 0 then
      return 'CUDA is already initialised in this process (a tensor or the model was put on a GPU, or ' ..
        'a GPU was probed or synchronized before fit); a forked worker cannot use CUDA then. Keep the ' ..
        "parent off the GPU until fit (the strategy moves the model), or use strategy 'ddp' with " ..
        'dplhost --nproc N'
    end
  end,
}

local SIGTERM, SIGKILL = 15, 9

local function signal_name(n)
  local names = { [1] = 'SIGHUP', [2] = 'SIGINT', [6] = 'SIGABRT', [9] = 'SIGKILL', [11] = 'SIGSEGV', [15] = 'SIGTERM' }
  return names[n] or ('signal ' .. n)
end

local function write_atomic(path, s)
  local tmp = path .. '.tmp'
  local f = io.open(tmp, 'wb')
  if not f then return false end
  f:write(s)
  f:close()
  return os.rename(tmp, path)
end

local function read_file(path)
  local f = io.open(path, 'rb')
  if not f then return nil end
  local s = f:read('*a')
  f:close()
  return s
end

local function traceback(e)
  local msg = e
  if type(e) ~= 'string' then
    local ok, s = pcall(tostring, e)
    msg = ok and s or ('(error object is a ' .. type(e) .. ' value)')
    -- an object that recorded where it was raised (the Trainer's errors.attach_traceback)
    if type(e) == 'table' and type(rawget(e, 'traceback')) == 'string' then
      return msg .. '\n' .. (rawget(e, 'traceback'):gsub("\n%s*%[C%]: in function 'xpcall'.*$", ''))
    end
  end
  -- a message with its traceback already (the Trainer's, raised again) gets no second one
  if msg:find('\nstack traceback:\n', 1, true) then return msg end
  local tb = debug.traceback(msg, 2)
  -- the worker's own frames; spawn's machinery below xpcall is noise
  return (tb:gsub("\n%s*%[C%]: in function 'xpcall'.*$", ''))
end

M._traceback = traceback

-- The worker side: never returns.
local function run_worker(rank, nprocs, job, dir, opts, fn, args)
  local host = require 'dpl.host'
  host.clear_atexit() -- the parent's cleanups are the parent's
  for k, v in pairs({ RANK = rank, LOCAL_RANK = rank, WORLD_SIZE = nprocs, LOCAL_WORLD_SIZE = nprocs,
                      NODE_RANK = 0, DPL_JOB_ID = job }) do
    C.dpl_proc_setenv(k, tostring(v))
  end
  require('dpl.tensor').share_cores(nprocs)
  local dist = require 'dpl.dist'
  local ok, res = xpcall(function()
    if dist.is_initialized() then dist.destroy_process_group() end -- the parent's group is not ours
    dist.init_process_group{ backend = opts.backend or 'shm', rank = rank, world_size = nprocs,
                             timeout = opts.timeout, job_id = job }
  end, traceback)
  if ok then
    -- fn called by xpcall itself, so the traceback holds the worker's frames only
    local r = pack(xpcall(fn, traceback, rank, unpack(args, 1, args.n)))
    ok = r[1]
    if ok then res = { n = r.n - 1, unpack(r, 2, r.n) } else res = r[2] end
  end
  local code = 0
  if ok then
    if rank == 0 then
      local enc_ok, enc = pcall(buffer.encode, { values = res })
      if enc_ok then
        write_atomic(dir .. '/result', enc)
      else
        -- tensors (cdata string.buffer does not encode): through dpl.save, back on the CPU
        local sok, serr = pcall(require('dpl.serialize').save, { values = res }, dir .. '/result.dpl')
        if not sok then
          write_atomic(dir .. '/error.' .. rank, 'rank 0 returned a value that cannot be sent back: ' .. tostring(serr))
          code = 1
        end
      end
    end
  else
    write_atomic(dir .. '/error.' .. rank, tostring(res))
    code = 1
  end
  pcall(function() if dist.is_initialized() then dist.destroy_process_group() end end)
  C.dpl_proc_exit(code)
end

local SIGINT, SIGUSR1 = 2, 10
local have_usleep = pcall(ffi.cdef, 'int usleep(unsigned int usec);')

-- The signal that interrupted the parent, as it goes on to the workers: SIGTERM and
-- SIGUSR1 as they are, anything else (SIGINT) as SIGTERM.
local function forwarded_signal()
  local s = C.dpl_signal_received() - 128
  if s == SIGTERM or s == SIGUSR1 then return s end
  return SIGTERM
end

local function kill_all(pids, sig) for _, p in pairs(pids) do C.dpl_proc_kill(p, sig) end end

-- Sends sig to the workers still running and reaps them, SIGKILL after `grace` seconds.
-- dpl_proc_wait returns DPL_EINTR at once while the host's signal flag is set: the
-- loop then sleeps on its own.
local function stop_workers(pids, sig, grace, pid_out, code_out)
  kill_all(pids, sig)
  local kill_at = C.dpl_clock() + grace
  while next(pids) ~= nil do
    local st = C.dpl_proc_wait(-1, 0.1, pid_out, code_out)
    if st == 0 then
      for r, p in pairs(pids) do if p == pid_out[0] then pids[r] = nil end end
    elseif st == C.DPL_EINTR then
      if have_usleep then ffi.C.usleep(2000) end
    elseif st ~= C.DPL_ETIMEOUT then
      return -- no children left to wait for
    end
    if kill_at and C.dpl_clock() > kill_at then
      kill_all(pids, SIGKILL)
      kill_at = nil
    end
  end
end

--- dist.spawn(fn, nprocs, {join=true, args={...}, backend='shm', timeout=, grace=5, pending_signal=}):
--- runs fn(rank, ...args) in nprocs forked workers; returns rank 0's return value.
--- pending_signal: a function the parent's wait calls (about every 0.1 s) that returns a
--- signal number the caller holds blocked and took (0: none); it is sent to the workers.
--- When the parent is interrupted (SIGINT, SIGTERM; the host's "interrupted" error), the
--- workers get the signal (SIGINT as SIGTERM), SIGKILL after `grace` seconds, the job's
--- shared memory and temp directory are removed, and the error goes on.
function M.spawn(fn, nprocs, opts)
  if type(fn) ~= 'function' then error(errors.TypeError('dist.spawn: fn must be a function, got ' .. type(fn)), 2) end
  if type(nprocs) ~= 'number' or nprocs < 1 or nprocs % 1 ~= 0 then
    error(errors.ValueError('dist.spawn: nprocs must be an integer >= 1, got ' .. tostring(nprocs)), 2)
  end
  opts = opts or {}
  if type(opts) ~= 'table' then error(errors.TypeError('dist.spawn: opts must be a table'), 2) end
  if opts.join == false then
    error(errors.NotImplementedError('dist.spawn: join=false is not implemented (the parent always joins)'), 2)
  end
  for _, guard in ipairs(M.fork_guards) do
    local why = guard()
    if why then
      error(errors.RuntimeError('dist.spawn: refusing to fork: ' .. why), 2)
    end
  end
  local args = opts.args or {}
  args.n = args.n or #args
  local pid0 = C.dpl_proc_getpid()
  local job = ('s%d_%x'):format(pid0, math.floor(C.dpl_clock() * 1e6) % 0x7fffffff)
  local dir = (os.getenv('TMPDIR') or '/tmp') .. '/dpl-spawn-' .. job
  if os.execute('mkdir -m 700 -p ' .. dir) ~= 0 then error('dist.spawn: cannot create ' .. dir, 2) end

  local pids, rank_of = {}, {}
  local pid_out, code_out = ffi.new('int32_t[1]'), ffi.new('int32_t[1]')
  local failed, failed_code, interrupted
  -- Forking and waiting run protected: the host's SIGINT/SIGTERM handler raises its
  -- "interrupted" error at the next Lua instruction, wherever the parent is (usually in
  -- this loop, before dpl_proc_wait could return DPL_EINTR); the workers are stopped and
  -- the job's segments and directory removed before that error goes on.
  local ok, e = pcall(function()
    local out = ffi.new('int32_t[1]')
    for rank = 0, nprocs - 1 do
      capi.check(C.dpl_proc_fork(out), 2)
      if out[0] == 0 then run_worker(rank, nprocs, job, dir, opts, fn, args) end
      pids[rank] = out[0]
      rank_of[out[0]] = rank
    end
    local alive, kill_at = nprocs, nil
    local pending = opts.pending_signal
    while alive > 0 do
      local st = C.dpl_proc_wait(-1, 0.1, pid_out, code_out)
      if st == 0 then
        local rank = rank_of[pid_out[0]]
        if rank then
          alive = alive - 1
          pids[rank] = nil
          if code_out[0] ~= 0 and not failed then
            failed, failed_code = rank, code_out[0]
            kill_all(pids, SIGTERM)
            kill_at = C.dpl_clock() + (opts.grace or 5)
          end
        end
      elseif st == C.DPL_EINTR then
        interrupted = true
        return
      end
      -- a signal the caller holds (ddp_spawn's fit: SIGTERM/SIGUSR1) goes to the workers,
      -- which stop together at a batch boundary
      if pending and not failed then
        local sig = pending()
        if sig ~= 0 then kill_all(pids, sig) end
      end
      if kill_at and C.dpl_clock() > kill_at then
        kill_all(pids, SIGKILL)
        kill_at = nil
      end
    end
  end)
  if not ok or interrupted then
    -- interrupted (or an error of the machinery): the signal goes on to the workers
    -- (SIGINT as SIGTERM), SIGKILL after the grace, then the cleanup below
    pcall(stop_workers, pids, forwarded_signal(), opts.grace or 5, pid_out, code_out)
  end
  local result_s, err_s, load_err
  local function cleanup()
    C.dpl_comm_shm_cleanup(job, nil) -- a worker killed during the rendezvous can leave a segment name
    result_s = read_file(dir .. '/result')
    err_s = failed and read_file(dir .. '/error.' .. failed)
    if not result_s and not failed and read_file(dir .. '/result.dpl') then
      local lok, v = pcall(require('dpl.serialize').load, dir .. '/result.dpl')
      if lok then result_s = v else load_err = tostring(v) end
    end
    os.execute('rm -rf ' .. dir)
  end
  -- a signal landing here raises in the first attempt (the host's hook fires once)
  if not pcall(cleanup) then cleanup() end
  if not ok then error(e, 0) end
  if interrupted then error('interrupted', 0) end
  if failed then
    if err_s then
      error(M.ProcessRaisedException(('dist.spawn: rank %d of %d raised: %s'):format(failed, nprocs, err_s)), 2)
    end
    local how = failed_code < 0 and ('was killed by ' .. signal_name(-failed_code))
      or ('exited with code ' .. failed_code)
    error(M.ProcessExitedException(('dist.spawn: rank %d of %d %s'):format(failed, nprocs, how)), 2)
  end
  if load_err then error(M.ProcessRaisedException(('dist.spawn: rank 0\'s result could not be read back: %s'):format(load_err)), 2) end
  if not result_s then return nil end
  local r = type(result_s) == 'string' and buffer.decode(result_s).values or result_s.values
  return unpack(r, 1, r.n)
end

return M
