-- dpl.strategies.spawn: the launcher of ddp_spawn / ddp_fork / ddp_notebook.
-- trainer:fit (validate, test, predict) forks N workers from the running script
-- (the Lua state cannot be pickled: workers inherit it), each with RANK,
-- LOCAL_RANK, WORLD_SIZE and a shared DPL_JOB_ID, runs the trainer function in
-- every worker, joins them, and brings rank 0's results back into the parent:
-- the model's weights, the best checkpoint path, the trainer's state
-- (current_epoch, global_step, ...), the callback metrics and the function's
-- return value — as Lightning's _MultiProcessingLauncher does. A failing
-- worker stops the others; the parent raises an error naming the rank.
local ffi = require 'ffi'
local sbuf = require 'string.buffer'
local errors = require 'dpl.errors'

local M = {}
local worker_body -- below

pcall(ffi.cdef, [[
int fork(void);
int waitpid(int pid, int *status, int options);
int kill(int pid, int sig);
void _exit(int status);
int setenv(const char *name, const char *value, int overwrite);
int getpid(void);
int prctl(int option, unsigned long arg2, unsigned long arg3, unsigned long arg4, unsigned long arg5);
]])

local SIGKILL, SIGTERM, WNOHANG, PR_SET_PDEATHSIG = 9, 15, 1, 1

local SpawnError = errors.new_class('ProcessRaisedException', errors.RuntimeError)
M.ProcessRaisedException = SpawnError

local function exit_code(st)
  local s = st[0]
  if bit.band(s, 0x7f) == 0 then return bit.rshift(bit.band(s, 0xff00), 8), nil end
  return nil, bit.band(s, 0x7f)
end

local function read_file(path)
  local f = io.open(path, 'rb')
  if not f then return nil end
  local s = f:read('*a')
  f:close()
  return s
end

-- Lua values string.buffer can carry (numbers, strings, booleans, plain tables)
local function plain(v, depth)
  depth = depth or 0
  local tv = type(v)
  if tv == 'number' or tv == 'string' or tv == 'boolean' then return v end
  if tv == 'table' and depth < 20 then
    local out = {}
    for k, x in pairs(v) do
      local pk, px = plain(k, depth + 1), plain(x, depth + 1)
      if pk ~= nil and px ~= nil then out[pk] = px end
    end
    return out
  end
  if tv == 'table' or tv == 'cdata' then
    local to = require('dpl.trainer.results').to_number(v)
    return to
  end
  return nil
end

--- Without the host's process primitives: fork through libc directly.
function M._fork_workers(strategy, trainer, fn, n, tmp, ...)
  local ok, dist = pcall(require, 'dpl.dist')
  if ok and dist.is_initialized() then
    errors.RuntimeError:raise("Lightning can't create new processes if a process group is already initialized"
      .. ' (dpl.dist.init_process_group was called, possibly with MPI): use strategy="ddp" under dplhost --nproc / mpirun', 0)
  end
  local parent = ffi.C.getpid()
  local job = ('spawn-%d-%d'):format(parent, math.floor(require('dpl.capi').C.dpl_clock() * 1e6) % 1e9)
  io.stdout:flush()
  io.stderr:flush()
  local pids = {}
  for rank = 0, n - 1 do
    local pid = ffi.C.fork()
    if pid < 0 then
      for _, p in ipairs(pids) do ffi.C.kill(p, SIGKILL) end
      errors.RuntimeError:raise('ddp_spawn: fork failed', 0)
    end
    if pid == 0 then
      -- the worker: whatever happens (an error, the host's signal interrupt), it
      -- ends here and never returns into the parent's code
      local args = { n = select('#', ...), ... }
      local status = 1
      pcall(function()
        ffi.C.prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0)
        for k, v in pairs({ RANK = rank, LOCAL_RANK = rank, WORLD_SIZE = n, LOCAL_WORLD_SIZE = n, NODE_RANK = 0,
                            DPL_JOB_ID = job }) do
          ffi.C.setenv(k, tostring(v), 1)
        end
        local okw, res = xpcall(worker_body, function(e)
          if type(e) == 'string' then return debug.traceback(e, 2) end
          return e
        end, strategy, trainer, fn, rank, tmp, unpack(args, 1, args.n))
        if okw then
          if rank == 0 then
            local f = assert(io.open(tmp, 'wb'))
            f:write(sbuf.encode(res))
            f:close()
          end
          status = 0
        else
          local msg = tostring(res)
          io.stderr:write(('[rank %d] %s\n'):format(rank, msg))
          local f = io.open(('%s.rank%d.err'):format(tmp, rank), 'wb')
          if f then f:write((msg:gsub('\nstack traceback:.*$', ''))); f:close() end
        end
        io.stdout:flush()
        io.stderr:flush()
      end)
      while true do pcall(ffi.C._exit, status) end
    end
    pids[#pids + 1] = pid
  end
  local st = ffi.new('int[1]')
  local left, failed = n, nil
  local rank_of = {}
  for r, p in ipairs(pids) do rank_of[p] = r - 1 end
  while left > 0 do
    local p = ffi.C.waitpid(-1, st, 0)
    if p > 0 and rank_of[p] then
      left = left - 1
      local code, sig = exit_code(st)
      if (code ~= 0 or sig) and not failed then
        failed = { rank = rank_of[p], code = code, sig = sig }
        for _, q in ipairs(pids) do if q ~= p then ffi.C.kill(q, SIGTERM) end end
      end
    elseif p < 0 then
      break
    end
  end
  local why
  for r = 0, n - 1 do
    local path = ('%s.rank%d.err'):format(tmp, r)
    local msg = read_file(path)
    if msg and failed and r == failed.rank then why = msg end
    os.remove(path)
  end
  local data = read_file(tmp)
  os.remove(tmp)
  if failed then
    error(SpawnError(('ddp_spawn: rank %d of %d %s%s'):format(failed.rank, n,
      failed.sig and ('was killed by signal ' .. failed.sig) or ('exited with code ' .. tostring(failed.code)),
      why and (': ' .. why) or '')), 0)
  end
  return data and data ~= '' and sbuf.decode(data) or nil
end

-- The worker's part: this process's ranks, the run, and (rank 0) what the parent needs.
worker_body = function(strategy, trainer, fn, rank, tmp, ...)
  strategy:_set_process_index(rank)
  trainer:_refresh_ranks()
  local result = fn(trainer, ...)
  if rank ~= 0 then return nil end
  local out = {
    result = plain(result),
    best_model_path = trainer.checkpoint_callback and trainer.checkpoint_callback.best_model_path or nil,
    last_model_path = trainer.checkpoint_callback and trainer.checkpoint_callback.last_model_path or nil,
    callback_metrics = plain(trainer.callback_metrics),
    logged_metrics = plain(trainer.logged_metrics),
    state = { current_epoch = trainer.current_epoch, global_step = trainer.global_step,
      status = trainer.state.status, fn = trainer.state.fn },
  }
  if trainer.state.fn == 'fit' then
    -- the weights travel through a temporary checkpoint (tensors included)
    local weights = tmp .. '.temp.ckpt'
    require('dpl.trainer.checkpoint').save({ state_dict = strategy:lightning_module_state_dict() }, weights)
    out.weights_path = weights
  end
  return out
end

-- dist.spawn (dpl.spawn) when the host has its process primitives
M._prefer_host = true
local function host_spawn()
  if not M._prefer_host then return nil end
  local ok, C = pcall(function() return require('dpl.capi').C end)
  if not ok or not pcall(function() return C.dpl_proc_fork end) then return nil end
  local ok2, sp = pcall(require, 'dpl.spawn')
  if ok2 and type(sp) == 'table' and type(sp.spawn) == 'function' then return sp end
  return nil
end

--- Runs fn(trainer, ...) in `n` forked workers; returns rank 0's result in the
--- parent after restoring its state there.
function M.launch(strategy, trainer, fn, ...)
  local n = strategy.num_processes * strategy.num_nodes
  if strategy.num_nodes > 1 then
    errors.MisconfigurationException:raise(("strategy='%s' forks workers on this machine only: num_nodes=%d needs"
      .. " strategy='ddp' under a launcher"):format(strategy.strategy_name, strategy.num_nodes), 0)
  end
  local tmp = os.tmpname()
  os.remove(tmp)
  local out
  local sp = host_spawn()
  if sp then
    local args = { n = select('#', ...), ... }
    out = sp.spawn(function(rank)
      return worker_body(strategy, trainer, fn, rank, tmp, unpack(args, 1, args.n))
    end, n, {})
  else
    out = M._fork_workers(strategy, trainer, fn, n, tmp, ...)
  end
  if type(out) ~= 'table' then
    errors.RuntimeError:raise('ddp_spawn: rank 0 returned no results', 0)
  end
  -- recover rank 0's results in the parent
  local cb = trainer.checkpoint_callback
  if cb and out.best_model_path then cb.best_model_path = out.best_model_path end
  if cb and out.last_model_path then cb.last_model_path = out.last_model_path end
  if out.weights_path then
    local ck = require('dpl.trainer.checkpoint').load(out.weights_path)
    os.remove(out.weights_path)
    local model = trainer.lightning_module
    if type(model.load_state_dict) == 'function' then model:load_state_dict(ck.state_dict or {}) end
  end
  for k, v in pairs(out.state or {}) do
    if k == 'status' or k == 'fn' then trainer.state[k] = v else trainer[k] = v end
  end
  trainer.callback_metrics = out.callback_metrics or {}
  trainer.logged_metrics = out.logged_metrics or {}
  return out.result
end

return M
