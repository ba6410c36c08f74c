-- dpl.log: rank-aware console messages. info() prints on rank 0 only (the
-- launcher's ranks, mpirun's, SLURM's), unless DPL_LOG_ALL_RANKS=1 (the
-- launcher's --log-all-ranks); warn() and error() print on every rank.
local M = {}

local function env_rank()
  for _, k in ipairs({ 'RANK', 'OMPI_COMM_WORLD_RANK', 'PMI_RANK', 'SLURM_PROCID' }) do
    local v = tonumber(os.getenv(k) or '')
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
