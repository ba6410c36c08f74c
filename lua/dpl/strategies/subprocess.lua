-- dpl.strategies.subprocess: Lightning's _SubprocessScriptLauncher for strategy
-- 'ddp' when nobody started the processes (plain `dplhost train.lua` with
-- devices=N): this process becomes local rank 0 and starts local ranks 1..N-1 by
-- running the same script again (`<dplhost> <script> <args>`) with LOCAL_RANK,
-- RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR and a shared
-- DPL_JOB_ID in their environment. As in Lightning, the children are not
-- joined; a rank that dies makes the others' collectives fail (dpl.dist).
local ffi = require 'ffi'
local errors = require 'dpl.errors'

local M = {}

pcall(ffi.cdef, [[
int setenv(const char *name, const char *value, int overwrite);
long readlink(const char *path, char *buf, unsigned long bufsiz);
int getpid(void);
]])

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function exe_path()
  local buf = ffi.new('char[4096]')
  local n = ffi.C.readlink('/proc/self/exe', buf, 4095)
  if n > 0 then return ffi.string(buf, n) end
  return rawget(_G, 'arg') and _G.arg[-1] or 'dplhost'
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
  local job = os.getenv('DPL_JOB_ID') or ('ddp-%d-%d'):format(ffi.C.getpid(),
    math.floor(require('dpl.capi').C.dpl_clock() * 1e6) % 1e9)
  local parts = { q(exe_path()), q(script_arg[0]) }
  for i = 1, #script_arg do parts[#parts + 1] = q(script_arg[i]) end
  local cmd = table.concat(parts, ' ')
  local base = { WORLD_SIZE = n, LOCAL_WORLD_SIZE = n, NODE_RANK = 0, DPL_JOB_ID = job,
    MASTER_ADDR = os.getenv('MASTER_ADDR') or '127.0.0.1' }
  io.stdout:flush()
  for rank = 1, n - 1 do
    local env = {}
    for k, v in pairs(base) do env[#env + 1] = k .. '=' .. q(v) end
    env[#env + 1] = 'LOCAL_RANK=' .. rank
    env[#env + 1] = 'RANK=' .. rank
    table.sort(env)
    os.execute(('env %s %s &'):format(table.concat(env, ' '), cmd))
  end
  for k, v in pairs(base) do ffi.C.setenv(k, tostring(v), 1) end
  ffi.C.setenv('LOCAL_RANK', '0', 1)
  ffi.C.setenv('RANK', '0', 1)
  strategy:set_world_ranks()
  trainer:_refresh_ranks()
end

return M
