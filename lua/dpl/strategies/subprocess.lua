-- dpl.strategies.subprocess: Lightning's _SubprocessScriptLauncher for strategy
-- 'ddp' when nobody started the processes (plain `dplhost train.lua` with
-- devices=N): this process becomes local rank 0 and starts local ranks 1..N-1 by
-- running the same script again (`<dplhost> <script> <args>`) with LOCAL_RANK,
-- RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR and a shared
-- DPL_JOB_ID in their environment. The children die with rank 0 (the kernel
-- sends them SIGTERM); when rank 0 exits it reaps them (stopping any that
-- still run after a grace period) and removes what the job left in /dev/shm.
-- A rank that dies makes the others' collectives fail (dpl.dist).
local ffi = require 'ffi'
local capi = require 'dpl.capi'
local errors = require 'dpl.errors'
local C = capi.C

local M = {}

--- Waits for the children (pids) up to grace seconds, then stops the rest.
local function reap(pids, job, grace)
  local pid_out, code_out = ffi.new('int32_t[1]'), ffi.new('int32_t[1]')
  local left = 0
  for _ in pairs(pids) do left = left + 1 end
  local deadline = C.dpl_clock() + grace
  while left > 0 do
    local st = C.dpl_proc_wait(-1, 0.05, pid_out, code_out)
    if st == 0 and pids[pid_out[0]] then
      pids[pid_out[0]] = nil
      left = left - 1
    elseif st ~= C.DPL_ETIMEOUT and st ~= 0 then
      break
    end
    if left > 0 and C.dpl_clock() > deadline then
      for pid in pairs(pids) do C.dpl_proc_kill(pid, 15) end
      deadline = math.huge
      C.dpl_sleep(1)
      for pid in pairs(pids) do C.dpl_proc_kill(pid, 9) end
    end
  end
  C.dpl_comm_shm_cleanup(job, nil)
end

--- Starts the other local ranks and makes this process rank 0 (env and strategy).
function M.prepare(strategy, trainer)
  local n = strategy.num_processes
  if strategy.num_nodes > 1 then
    errors.MisconfigurationException:raise(("strategy='%s' with num_nodes=%d: start the processes of every node"
      .. " with a launcher (dplhost --nproc %d --nnodes %d --node-rank R, mpirun or srun)")
      :format(strategy.strategy_name, strategy.num_nodes, n, strategy.num_nodes), 0)
  end
  local script_arg = rawget(_G, 'arg')
  local script = type(script_arg) == 'table' and script_arg[0]
  local f = type(script) == 'string' and script ~= '' and script ~= '-' and io.open(script, 'rb')
  if f then f:close() end
  if not f then
    errors.MisconfigurationException:raise(("strategy='%s' with %d processes re-runs the script for the other ranks,"
      .. " but this code does not come from a script file: run `dplhost --nproc %d script.lua` instead")
      :format(strategy.strategy_name, n, n), 0)
  end
  local job = os.getenv('DPL_JOB_ID') or ('ddp-%d-%d'):format(C.dpl_proc_getpid(),
    math.floor(C.dpl_clock() * 1e6) % 1e9)
  -- the same command line: the interpreter and its options (arg[-k..-1]), the script, its args
  local lo = 0
  while script_arg[lo - 1] ~= nil do lo = lo - 1 end
  local argv = {}
  for i = lo, #script_arg do argv[#argv + 1] = script_arg[i] end
  if lo == 0 then table.insert(argv, 1, 'dplhost') end
  local cargv = ffi.new('const char *[?]', #argv + 1)
  for i, a in ipairs(argv) do cargv[i - 1] = a end
  cargv[#argv] = nil
  local base = { WORLD_SIZE = n, LOCAL_WORLD_SIZE = n, NODE_RANK = 0, DPL_JOB_ID = job,
    MASTER_ADDR = os.getenv('MASTER_ADDR') or '127.0.0.1' }
  for k, v in pairs(base) do capi.check(C.dpl_proc_setenv(k, tostring(v))) end
  require('dpl.tensor').share_cores(n) -- this process and (through the environment) the others
  io.stdout:flush()
  local pids = {}
  local pid = ffi.new('int32_t[1]')
  for rank = 1, n - 1 do
    capi.check(C.dpl_proc_setenv('LOCAL_RANK', tostring(rank)))
    capi.check(C.dpl_proc_setenv('RANK', tostring(rank)))
    capi.check(C.dpl_proc_spawn_self(cargv, pid))
    pids[pid[0]] = rank
  end
  capi.check(C.dpl_proc_setenv('LOCAL_RANK', '0'))
  capi.check(C.dpl_proc_setenv('RANK', '0'))
  require('dpl').atexit(function() reap(pids, job, 30) end)
  strategy:set_world_ranks()
  trainer:_refresh_ranks()
end

return M
