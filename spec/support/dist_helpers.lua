-- dist_helpers.lua: starting the ranks of a job for the dist specs: plain
-- processes with RANK/WORLD_SIZE/DPL_JOB_ID (no launcher, so the backend's own
-- failure detection is what is tested), under `dplhost --nproc`, or under mpirun.
-- Each returns per-rank results and the wall time; shm_left(job) lists the
-- job's segments still in /dev/shm.
local h = require 'spec.support.helpers'
local M = {}

local seq = 0
function M.job(tag)
  seq = seq + 1
  return ('spec%d_%s_%d'):format(h.pid(), tag or 'j', seq)
end

local function envs(t)
  local parts = {}
  for k, v in pairs(t or {}) do parts[#parts + 1] = k .. '=' .. h.q(v) end
  table.sort(parts)
  return table.concat(parts, ' ')
end

--- Starts P ranks of `script args` as plain processes; returns
--- { [r+1] = { rc=, out=, err= } }, seconds, job.
function M.run_ranks(P, script, args, opts)
  opts = opts or {}
  local job = opts.job or M.job('r')
  local base = h.tmpname('.rank')
  local lines = {}
  for r = 0, P - 1 do
    local env = { RANK = r, WORLD_SIZE = P, DPL_JOB_ID = job }
    for k, v in pairs(opts.env or {}) do env[k] = v end
    lines[#lines + 1] = ('( env %s %s %s %s >%s.%d.out 2>%s.%d.err; echo $? >%s.%d.rc ) &'):format(
      envs(env), h.q(h.bin), h.q(script), args or '', base, r, base, r, base, r)
  end
  local cmd = 'start=$(date +%s%N); ' .. table.concat(lines, ' ') ..
    ' wait; end=$(date +%s%N); echo "took_ms=$(( (end - start) / 1000000 ))"'
  local out = h.sh(cmd, { timeout = opts.timeout or 60 })
  local res = {}
  for r = 0, P - 1 do
    local p = ('%s.%d'):format(base, r)
    res[r + 1] = { rc = tonumber(h.read_all(p .. '.rc')), out = h.read_all(p .. '.out'), err = h.read_all(p .. '.err') }
    os.remove(p .. '.rc'); os.remove(p .. '.out'); os.remove(p .. '.err')
  end
  return res, (tonumber(out:match('took_ms=(%d+)')) or 1e9) / 1000, job
end

--- Runs a command line, returning stdout, stderr, rc and seconds.
function M.timed(cmd, opts)
  local out, err, rc = h.sh('start=$(date +%s%N); ' .. cmd ..
    '; rc=$?; end=$(date +%s%N); echo "took_ms=$(( (end - start) / 1000000 ))"; exit $rc', opts)
  local ms = tonumber(out:match('took_ms=(%d+)%s*$'))
  return out, err, rc, (ms or 1e9) / 1000
end

-- Open MPI leaks at exit by design; a SAN build would report it (its components
-- are unloaded by then, so suppressions cannot name them): no leak check under MPI.
M.mpi_env = 'ASAN_OPTIONS=detect_leaks=0'

function M.mpirun(P, script, args, opts)
  opts = opts or {}
  return M.timed(('%s %s mpirun --allow-run-as-root --oversubscribe -np %d %s %s %s'):format(
    M.mpi_env, envs(opts.env), P, h.q(h.bin), h.q(script), args or ''), { timeout = opts.timeout or 60 })
end

--- Open MPI's own shared-memory files (vader_segment.*) currently in /dev/shm.
function M.vader_files()
  local set = {}
  for name in h.sh('ls /dev/shm 2>/dev/null'):gmatch('[^\n]+') do
    if name:match('^vader_segment%.') then set[name] = true end
  end
  return set
end

--- Removes the vader segments that appeared since `before` and that no live
--- process maps: what Open MPI leaves behind when mpirun kills a failed job.
function M.vader_cleanup(before)
  for name in pairs(M.vader_files()) do
    if not before[name] then
      local users = h.sh(('grep -l -F %s /proc/[0-9]*/maps 2>/dev/null || true'):format(h.q(name)))
      if not users:match('/proc/%d+/maps') then os.remove('/dev/shm/' .. name) end
    end
  end
end

function M.shm_left(job)
  local out = h.sh('ls /dev/shm 2>/dev/null')
  local left = {}
  for name in out:gmatch('[^\n]+') do
    if name:find('dpl-' .. job, 1, true) then left[#left + 1] = name end
  end
  return left
end

--- pids of processes whose environment holds DPL_JOB_ID=job (still running).
function M.procs_left(job)
  local out = h.sh(('grep -l -a "DPL_JOB_ID=%s" /proc/[0-9]*/environ 2>/dev/null | grep -v "/proc/self/"'):format(job))
  local pids = {}
  for p in out:gmatch('/proc/(%d+)/environ') do
    local stat = h.read_all('/proc/' .. p .. '/stat')
    if stat ~= '' and not stat:match('^%d+ %b() [ZX]') then pids[#pids + 1] = p end
  end
  return pids
end

M.has_mpi = h.has_command('mpirun')
M.root = h.root
return M
