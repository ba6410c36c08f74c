-- dpl.log: rank-aware console messages. info() prints on rank 0 only (the
-- launcher's ranks, mpirun's, SLURM's), unless DPL_LOG_ALL_RANKS=1 (the
-- launcher's --log-all-ranks); warn() and error() print on every rank.
local M = {}

local RANK_VARS = { 'RANK', 'OMPI_COMM_WORLD_RANK', 'PMI_RANK', 'SLURM_PROCID' }
local getenv = os.getenv
-- (read each call, not cached: a forked ddp_spawn worker sets RANK after the parent loaded this;
-- no table made per call: a logger's rank_zero_only methods ask every step)
local function env_rank()
  for i = 1, #RANK_VARS do
    local v = tonumber(getenv(RANK_VARS[i]) or '')
    if v then return v end
  end
  return 0
end

--- The process's global rank as the environment tells it (0 when alone).
M.rank = env_rank

local function emit(out, level, fmt, ...)
  local msg = select('#', ...) > 0 and fmt:format(...) or tostring(fmt)
  out:write(level, ': ', msg, '\n')
  out:flush()
end

function M.info(fmt, ...)
  if env_rank() == 0 or os.getenv('DPL_LOG_ALL_RANKS') == '1' then
    emit(io.stdout, 'INFO', fmt, ...)
  end
end

function M.warn(fmt, ...) emit(io.stderr, 'WARNING', fmt, ...) end
function M.error(fmt, ...) emit(io.stderr, 'ERROR', fmt, ...) end

return M
