-- dpl.dist: process groups and collectives (torch.distributed's API, 0-based
-- ranks). Backends: 'shm' (processes on one host, shared memory; the default),
-- 'mpi' (Open MPI, loaded on demand; the default under mpirun) and 'nccl' (shm
-- plus an NCCL communicator for GPU tensors, through the CUDA plugin). Data:
-- contiguous dpl tensors (their _data/_numel/_dtype), or raw ffi buffers with an
-- explicit {count=, dtype=}. Lua objects travel with string.buffer. Failures
-- raise DistError (a RuntimeError); bad arguments raise ValueError/TypeError;
-- configuration mistakes MisconfigurationException. See docs/distributed.md.
local ffi = require 'ffi'
local sbuf = require 'string.buffer'
local capi = require 'dpl.capi'
local errors = require 'dpl.errors'
local C = capi.C

local M = {}

local DistError = errors.new_class('DistError', errors.RuntimeError)
M.DistError = DistError

local status_names = capi.status_names

-- Raises DistError (or ValueError for EINVAL) with the C side's message; call: the
-- user's function when it runs the C collective under another name (broadcast_object
-- runs broadcasts): "dist: broadcast_object: rank 0 timed out ... in broadcast #1 ...".
local function check(st, level, call)
  if st == 0 then return end
  local msg = ffi.string(C.dpl_last_error())
  if call then msg = 'dist: ' .. call .. ': ' .. msg:gsub('^dist: ', '') end
  local cls = st == -1 and errors.ValueError or DistError
  local e = cls(msg)
  e.status = status_names[st] or st
  error(e, (level or 1) + 1)
end

local function verr(msg, level) error(errors.ValueError(msg), (level or 1) + 1) end
local function terr(msg, level) error(errors.TypeError(msg), (level or 1) + 1) end
local function cfgerr(msg, level) error(errors.MisconfigurationException(msg), (level or 1) + 1) end

---------------------------------------------------------------- dtypes, ops

local dtype_ids = {
  float32 = 0, float = 0, float64 = 1, double = 1, float16 = 2, half = 2, bfloat16 = 3,
  int32 = 4, int = 4, int64 = 5, long = 5, uint8 = 6, bool = 7,
}
local dtype_names = { [0] = 'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'bool' }
local dtype_sizes = { [0] = 4, 8, 2, 2, 4, 8, 1, 1 }

local function dtype_id(d, level)
  if type(d) == 'number' and dtype_names[d] then return d end
  if type(d) == 'string' and dtype_ids[d] then return dtype_ids[d] end
  if type(d) == 'table' and d.name and dtype_ids[d.name] then return dtype_ids[d.name] end
  if type(d) == 'table' and type(d.id) == 'number' and dtype_names[d.id] then return d.id end
  verr(('dist: unknown dtype %s (float32, float64, float16, bfloat16, int32, int64, uint8, bool)'):format(tostring(d)), (level or 1) + 1)
end

local ops = { sum = 0, mean = 1, avg = 1, max = 2, min = 3, prod = 4, product = 4 }
M.ReduceOp = { SUM = 'sum', AVG = 'avg', MEAN = 'mean', MAX = 'max', MIN = 'min', PRODUCT = 'prod', PROD = 'prod' }

local function op_id(op, level)
  if op == nil then return 0 end
  local id = type(op) == 'string' and ops[op:lower()] or nil
  if not id then
    verr(("dist: unknown reduce op '%s' (sum, mean/avg, max, min, prod)"):format(tostring(op)), (level or 1) + 1)
  end
  return id
end

---------------------------------------------------------------- buffers

local tensor_ptr_t = ffi.typeof('dpl_tensor *')
local tensor_t = ffi.typeof('dpl_tensor')

-- The dpl_tensor cdata behind t (a tensor handle or an object carrying one), or nil.
local function tensor_of(t)
  if type(t) == 'cdata' then
    if ffi.istype(tensor_ptr_t, t) or ffi.istype(tensor_t, t) then return t end
    return nil
  end
  if type(t) == 'table' then
    for _, k in ipairs({ '_t', '_handle', 'handle', '_c' }) do
      local v = rawget(t, k)
      if type(v) == 'cdata' and (ffi.istype(tensor_ptr_t, v) or ffi.istype(tensor_t, v)) then return v end
    end
  end
  return nil
end
M._tensor_of = tensor_of

local function device_ok(tt, level)
  if tt._devtype ~= 0 then
    local info = ffi.new('dpl_device_info')
    if C.dpl_device_get_info(tt._devtype, tt._devindex, info) ~= 0 or info.simulated == 0 then
      -- the tensor collectives stage GPU tensors before they get here (see stage below)
      verr(('dist: tensor on cuda:%d: the shm and mpi backends take host tensors (move it with :to("cpu"))')
        :format(tt._devindex), (level or 1) + 1)
    end
  end
end

-- Returns pointer, count, dtype id for a tensor or a raw buffer with opts. With a
-- tensor, opts.count/opts.dtype must agree with it; `label` (a buffer the call sizes
-- itself: "output 2", "the output tensor") words the error as "<label> is float64 x 4,
-- expected float32 x 4", else the user's options are named.
local function buffer_of(x, opts, what, level, label)
  level = (level or 1) + 1
  local tt = tensor_of(x)
  if tt then
    if bit.band(tt._flags, 1) == 0 then
      verr(('dist: %s needs a contiguous tensor (call :contiguous() first)'):format(what), level)
    end
    device_ok(tt, level)
    if opts then
      local n, d = opts.count, opts.dtype
      if d ~= nil then d = dtype_id(d, level) end
      if (n ~= nil and n ~= tonumber(tt._numel)) or (d ~= nil and d ~= tt._dtype) then
        if label then
          verr(('dist: %s: %s is %s x %d, expected %s x %d'):format(what, label, dtype_names[tt._dtype],
            tonumber(tt._numel), dtype_names[d or tt._dtype], n or tonumber(tt._numel)), level)
        elseif n ~= nil and n ~= tonumber(tt._numel) then
          verr(('dist: %s: count=%s but the tensor has %d elements'):format(what, tostring(n), tonumber(tt._numel)), level)
        else
          verr(('dist: %s: dtype=%s but the tensor is %s (leave dtype= out with a tensor)'):format(what,
            dtype_names[d], dtype_names[tt._dtype]), level)
        end
      end
    end
    return tt._data, tonumber(tt._numel), tt._dtype, tt
  end
  if type(x) == 'cdata' then
    if not opts or opts.count == nil or opts.dtype == nil then
      terr(('dist: %s: a raw buffer needs {count=, dtype=} (got %s without them)'):format(what, tostring(ffi.typeof(x))), level)
    end
    local n = opts.count
    if type(n) ~= 'number' or n < 0 or n % 1 ~= 0 then
      verr(('dist: %s: count must be a non-negative integer, got %s'):format(what, tostring(n)), level)
    end
    local d = dtype_id(opts.dtype, level)
    local sz = ffi.sizeof(x)
    if sz and sz < n * dtype_sizes[d] then
      verr(('dist: %s: buffer of %d bytes is smaller than count=%d %s (%d bytes)'):format(
        what, sz, n, dtype_names[d], n * dtype_sizes[d]), level)
    end
    return ffi.cast('void *', x), n, d, nil
  end
  terr(('dist: %s expects a tensor or an ffi buffer, got %s'):format(what, type(x)), level)
end

-- A new tensor shaped like tt (CPU), owned by Lua: through dpl.tensor when it is
-- there (its wrapper keeps the GC accounting), else a plain ffi.gc handle.
local tensor_mod
local function new_tensor_like(tt)
  local out = ffi.new('dpl_tensor *[1]')
  check(C.dpl_tensor_empty(tt._dtype, tt._ndim, tt._shape, tt._devtype, tt._devindex, out), 3)
  if tensor_mod == nil then
    local ok, m = pcall(require, 'dpl.tensor')
    tensor_mod = ok and type(m) == 'table' and m._wrap and m or false
  end
  if tensor_mod then return tensor_mod._wrap(out) end
  return ffi.gc(out[0], C.dpl_tensor_release)
end

---------------------------------------------------------------- state

local nccl_api = C  -- the dpl_nccl_* functions (specs put fakes here: M._set_nccl_api)
function M._set_nccl_api(api) nccl_api = api or C end

local world         -- the default group
local groups = {}   -- every live group, world first
local job_for_shm   -- segment name part

local Group = {}
Group.__index = Group
Group.__name = 'ProcessGroup'
function Group:__tostring()
  if not self.member then return 'ProcessGroup(non-member)' end
  return ('ProcessGroup(%s, rank %d of %d)'):format(self.backend, self.rank, self.size)
end
M.ProcessGroup = Group

local function env(name)
  local v = os.getenv(name)
  if v == nil or v == '' then return nil end
  return v
end

-- The first of the variables that is set, as an integer, and its name; a value that
-- is not an integer is a MisconfigurationException naming the variable (who: the
-- function reporting it).
local function envint(who, level, ...)
  for _, n in ipairs({ ... }) do
    local v = env(n)
    if v then
      local x = tonumber(v)
      if not x or x % 1 ~= 0 then
        cfgerr(("%s: %s='%s' is not an integer"):format(who, n, v), level + 1)
      end
      return x, n
    end
  end
  return nil
end

-- Timeouts are finite numbers of seconds > 0 (NaN, math.huge, 0 and below are refused:
-- there is no "wait forever").
local function seconds_ok(x) return type(x) == 'number' and x > 0 and x < math.huge end
local function check_timeout(v, who, level)
  if v ~= nil and not seconds_ok(v) then
    cfgerr(('%s: timeout must be a number of seconds > 0, got %s%s'):format(who, tostring(v),
      type(v) == 'number' and v > 0 and ' (it must be finite)' or ''), level + 1)
  end
end
-- DPL_COMM_TIMEOUT, when set, must be such a number too (C would fall back to 1800 s)
local function check_env_timeout(who, level)
  local v = env('DPL_COMM_TIMEOUT')
  if v and not seconds_ok(tonumber(v)) then
    cfgerr(("%s: DPL_COMM_TIMEOUT must be a finite number of seconds > 0, got '%s'"):format(who, v), level + 1)
  end
end

local function sanitize(s)
  s = s:gsub('[^%w_-]', '_')
  if #s > 100 then
    local h = 5381
    for i = 1, #s do h = (h * 33 + s:byte(i)) % 4294967296 end
    s = s:sub(1, 80) .. ('_%08x'):format(h)
  end
  return s
end

local function uid()
  local f = io.open('/proc/self/status')
  if not f then return '0' end
  local s = f:read('*a')
  f:close()
  return s:match('Uid:%s*(%d+)') or '0'
end

-- Name of the job for shm segments: unique per job, shared by its ranks.
local function job_id()
  local j = env('DPL_JOB_ID')
  if j then return sanitize(j) end
  local addr, port = env('MASTER_ADDR'), env('MASTER_PORT')
  if port then return sanitize(('m%s_%s_u%s'):format(addr or 'localhost', port, uid())) end
  local ns = env('PMIX_NAMESPACE') or env('OMPI_MCA_ess_base_jobid')
  if ns then return sanitize(('ompi_%s_u%s'):format(ns, uid())) end
  local sj = env('SLURM_JOB_ID')
  if sj then return sanitize(('slurm_%s_%s_u%s'):format(sj, env('SLURM_STEP_ID') or '0', uid())) end
  return nil
end

local function default_backend()
  local b = env('DPL_DIST_BACKEND')
  if b then return b end
  if env('OMPI_COMM_WORLD_SIZE') and not env('RANK') then return 'mpi' end
  return 'shm'
end

local function destroy_group(g)
  if g.nccl ~= nil then
    local n = g.nccl
    g.nccl = nil
    nccl_api.dpl_nccl_destroy(n)
  end
  if g.comm ~= nil then
    local c = g.comm
    g.comm = nil
    C.dpl_comm_destroy(c)
  end
  for i = #groups, 1, -1 do
    if groups[i] == g then table.remove(groups, i) end
  end
end

local atexit_registered = false
local function cleanup_all()
  for i = #groups, 1, -1 do destroy_group(groups[i]) end
  world = nil
end

-- set in a forked DataLoader worker: the groups are the parent's, collectives refused
local worker_refusal
--- Called in a forked DataLoader worker: get_rank / get_world_size / is_initialized still
--- answer (a dataset may shard by rank), every collective and init raise `why`.
function M._refuse_in_worker(why) worker_refusal = why end

local function get_group(group, level)
  if worker_refusal then error(DistError('dist: ' .. worker_refusal), (level or 1) + 1) end
  if group == nil then
    if not world then
      error(DistError('dist: the default process group is not initialised (call dist.init_process_group first)'), (level or 1) + 1)
    end
    return world
  end
  if getmetatable(group) ~= Group then terr('dist: group must be a ProcessGroup from new_group', (level or 1) + 1) end
  if not group.member then
    verr(('dist: rank %d is not a member of this group (ranks %s)'):format(world and world.rank or -1,
      table.concat(group.ranks, ',')), (level or 1) + 1)
  end
  if group.comm == nil then error(DistError('dist: this process group was destroyed'), (level or 1) + 1) end
  return group
end

-- Global rank -> rank in group g.
local function group_rank(g, r, what, level)
  if type(r) ~= 'number' or r % 1 ~= 0 then
    verr(('dist: %s must be an integer rank, got %s'):format(what,
      type(r) == 'string' and ("'%s' (a string)"):format(r) or type(r) == 'number' and tostring(r)
      or ('%s (a %s)'):format(tostring(r), type(r))), (level or 1) + 1)
  end
  if g == world then
    if r < 0 or r >= g.size then
      verr(('dist: %s=%d is not a rank of the group (0..%d; ranks are 0-based)'):format(what, r, g.size - 1), (level or 1) + 1)
    end
    return r
  end
  for i, gr in ipairs(g.ranks) do if gr == r then return i - 1 end end
  verr(('dist: %s=%d is not in the group (global ranks %s)'):format(what, r, table.concat(g.ranks, ',')), (level or 1) + 1)
end

---------------------------------------------------------------- init

function M.is_available() return true end
function M.is_initialized() return world ~= nil end

--- Backends this process can use: shm always, mpi when libmpi loads.
function M.is_mpi_available()
  return ffi.string(C.dpl_comm_mpi_unavailable_reason()) == ''
end

--- True when this process initialised MPI (it stays initialised until exit, also after
--- destroy_process_group): such a process must not fork.
function M.mpi_initialized() return C.dpl_comm_mpi_initialized() ~= 0 end

-- A new NCCL communicator for the members of host group g on GPU dev: rank 0's
-- unique id reaches the others through g's host backend. Returns it, or nil and why.
local function nccl_bootstrap(g, dev)
  -- 128 bytes of id and a flag: a rank 0 that could not make the id still takes part
  -- in the broadcast, so the others fail at once instead of waiting for their timeout
  local id = ffi.new('uint8_t[129]')
  local st, msg = 0, nil
  if g.rank == 0 then
    st = nccl_api.dpl_nccl_unique_id(id, 128)
    if st ~= 0 then msg = ffi.string(C.dpl_last_error()) end
    id[128] = st == 0 and 1 or 0
  end
  local bst = C.dpl_comm_broadcast(g.comm, id, 129, 6, 0)
  if bst ~= 0 then st = bst; msg = ffi.string(C.dpl_last_error())
  elseif st == 0 and id[128] ~= 1 then st = -1; msg = 'rank 0 could not create the NCCL unique id' end
  local nout = ffi.new('dpl_nccl *[1]')
  if st == 0 then st = nccl_api.dpl_nccl_init(id, 128, g.size, g.rank, dev, nout) end
  if st ~= 0 then return nil, msg or ffi.string(C.dpl_last_error()) end
  return nout[0]
end

function M.init_process_group(opts)
  opts = opts or {}
  if type(opts) == 'string' then opts = { backend = opts } end
  if type(opts) ~= 'table' then terr('dist.init_process_group expects an options table', 2) end
  if worker_refusal then error(DistError('dist: ' .. worker_refusal), 2) end
  if world then error(DistError('dist: init_process_group was already called in this process (destroy_process_group first)'), 2) end
  local backend = opts.backend or default_backend()
  if type(backend) == 'string' then backend = backend:lower() end
  -- nccl: a host backend for the group itself (barriers, objects, host tensors, the
  -- bootstrap: shm, or mpi under mpirun or with host_backend='mpi'), plus an NCCL
  -- communicator for GPU tensors (through the CUDA plugin)
  local nccl = backend == 'nccl'
  if nccl then
    local why = ffi.string(C.dpl_nccl_unavailable_reason())
    if why ~= '' then cfgerr(("init_process_group: backend='nccl' is not available: %s"):format(why), 2) end
    backend = opts.host_backend or ((env('OMPI_COMM_WORLD_SIZE') and not env('RANK')) and 'mpi' or 'shm')
    if type(backend) == 'string' then backend = backend:lower() end
    if backend ~= 'shm' and backend ~= 'mpi' then
      cfgerr(("init_process_group: host_backend='%s' for nccl must be 'shm' or 'mpi'"):format(tostring(backend)), 2)
    end
  end
  if backend ~= 'shm' and backend ~= 'mpi' then
    if backend == 'gloo' then
      cfgerr(("init_process_group: backend='%s' is not available in this build (use 'shm', 'mpi' or 'nccl')"):format(backend), 2)
    end
    cfgerr(("init_process_group: unknown backend='%s' (shm, mpi, nccl)"):format(tostring(backend)), 2)
  end
  local timeout = opts.timeout
  check_timeout(timeout, 'init_process_group', 2)
  if timeout == nil then check_env_timeout('init_process_group', 2) end
  local out = ffi.new('dpl_comm *[1]')
  local g = setmetatable({ backend = backend, member = true }, Group)
  if backend == 'mpi' then
    local why = ffi.string(C.dpl_comm_mpi_unavailable_reason())
    if why ~= '' then error(DistError("dist: backend 'mpi' unavailable: " .. why), 2) end
    check(C.dpl_comm_init_mpi(timeout or 0, out), 2)
    g.comm = out[0]
    g.rank, g.size = C.dpl_comm_rank(g.comm), C.dpl_comm_size(g.comm)
    if (opts.rank and opts.rank ~= g.rank) or (opts.world_size and opts.world_size ~= g.size) then
      local r, s = g.rank, g.size
      C.dpl_comm_destroy(g.comm)
      cfgerr(('init_process_group: rank=%s world_size=%s disagree with MPI (rank %d of %d)'):format(
        tostring(opts.rank), tostring(opts.world_size), r, s), 2)
    end
  else
    local size, size_src = opts.world_size, 'world_size'
    if size == nil then size, size_src = envint('init_process_group', 2, 'WORLD_SIZE', 'OMPI_COMM_WORLD_SIZE', 'PMI_SIZE', 'SLURM_NTASKS') end
    local rank, rank_src = opts.rank, 'rank'
    if rank == nil then rank, rank_src = envint('init_process_group', 2, 'RANK', 'OMPI_COMM_WORLD_RANK', 'PMI_RANK', 'SLURM_PROCID') end
    size = size or 1
    rank = rank or 0
    if type(size) ~= 'number' or size < 1 or size % 1 ~= 0 then
      cfgerr(('init_process_group: world_size must be an integer >= 1, got %s (from %s)'):format(tostring(size), size_src), 2)
    end
    if type(rank) ~= 'number' or rank < 0 or rank >= size or rank % 1 ~= 0 then
      cfgerr(('init_process_group: rank must be in [0, %d) (ranks are 0-based), got %s (from %s)'):format(
        size, tostring(rank), rank_src or 'default'), 2)
    end
    local job = opts.job_id and sanitize(tostring(opts.job_id)) or job_id()
    if size > 1 and not job then
      cfgerr('init_process_group: the shm backend needs a job id shared by the ranks: set DPL_JOB_ID '
        .. '(dplhost --nproc does), or MASTER_ADDR/MASTER_PORT', 2)
    end
    job_for_shm = job or 'single'
    check(C.dpl_comm_init_shm(job_for_shm, rank, size, timeout or 0, out), 2)
    g.comm = out[0]
    g.rank, g.size = rank, size
  end
  g.ranks = {}
  for i = 0, g.size - 1 do g.ranks[#g.ranks + 1] = i end
  if nccl then
    -- rank 0's unique id reaches every rank through the host group; each rank drives one GPU
    local ngpu = require('dpl.cuda').device_count()
    local dev = opts.device
    if type(dev) == 'string' then dev = tonumber(dev:match('^cuda:(%d+)$') or '') end
    if type(dev) == 'table' and dev.type == 'cuda' then dev = dev.index end
    if dev == nil then dev = (envint('init_process_group', 2, 'LOCAL_RANK', 'OMPI_COMM_WORLD_LOCAL_RANK', 'SLURM_LOCALID') or g.rank) % ngpu end
    local nc, msg = nccl_bootstrap(g, dev)
    if not nc then
      C.dpl_comm_destroy(g.comm)
      error(DistError('dist: backend nccl: ' .. msg), 2)
    end
    g.nccl, g.nccl_device, g.backend = nc, dev, 'nccl'
  end
  world = g
  groups[#groups + 1] = g
  if not atexit_registered then
    atexit_registered = true
    require('dpl').atexit(cleanup_all)
  end
  return g
end

--- Internal (ddp_spawn, whose workers join before they know their device): gives the
--- default group an NCCL communicator on GPU `device` (an index), making it 'nccl'.
--- Collective over the group's ranks.
function M._enable_nccl(device)
  local g = get_group(nil, 2)
  if g.nccl ~= nil then return g end
  local why = ffi.string(C.dpl_nccl_unavailable_reason())
  if why ~= '' then cfgerr(("dist: backend='nccl' is not available: %s"):format(why), 2) end
  local nc, msg = nccl_bootstrap(g, device)
  if not nc then error(DistError('dist: backend nccl: ' .. msg), 2) end
  g.nccl, g.nccl_device, g.backend = nc, device, 'nccl'
  return g
end

function M.destroy_process_group(group)
  if worker_refusal then error(DistError('dist: ' .. worker_refusal), 2) end
  if group == nil then
    cleanup_all()
    return
  end
  if getmetatable(group) ~= Group then terr('dist: destroy_process_group expects a ProcessGroup', 2) end
  if group == world then cleanup_all() else destroy_group(group) end
end

function M.get_rank(group)
  if group == nil and not world then return -1 end
  if group ~= nil and getmetatable(group) == Group and not group.member then return -1 end
  if worker_refusal then return (group or world).rank end
  return get_group(group, 2).rank
end

function M.get_world_size(group)
  if group == nil and not world then return -1 end
  if group ~= nil and getmetatable(group) == Group and not group.member then return -1 end
  if worker_refusal then return (group or world).size end
  return get_group(group, 2).size
end

function M.get_backend(group) return get_group(group, 2).backend end

--- Like torch.distributed.new_group: every rank of the world calls it with the same list.
function M.new_group(ranks, opts)
  local w = get_group(nil, 2)
  opts = opts or {}
  if type(opts) ~= 'table' then terr('dist.new_group: opts must be a table ({timeout=})', 2) end
  check_timeout(opts.timeout, 'dist.new_group', 2)
  local list = {}
  if ranks == nil then
    for i = 0, w.size - 1 do list[#list + 1] = i end
  else
    if type(ranks) ~= 'table' then terr('dist.new_group: ranks must be a list of 0-based ranks', 2) end
    for _, r in ipairs(ranks) do
      if type(r) ~= 'number' then verr(('dist.new_group: rank %s is not a number'):format(type(r) == 'string' and ("'" .. r .. "' (a string)") or tostring(r)), 2) end
      list[#list + 1] = r
    end
    table.sort(list)
  end
  if #list == 0 then verr('dist.new_group: empty ranks list', 2) end
  local arr = ffi.new('int32_t[?]', #list)
  for i, r in ipairs(list) do
    if type(r) ~= 'number' or r % 1 ~= 0 or r < 0 or r >= w.size then
      verr(('dist.new_group: rank %s is not in [0, %d)'):format(tostring(r), w.size), 2)
    end
    if i > 1 and list[i - 1] == r then verr(('dist.new_group: rank %d listed twice'):format(r), 2) end
    arr[i - 1] = r
  end
  local out = ffi.new('dpl_comm *[1]')
  check(C.dpl_comm_new_group(w.comm, #list, arr, out), 2)
  local g = setmetatable({ backend = w.backend, ranks = list, member = out[0] ~= nil }, Group)
  if g.member then
    g.comm = out[0]
    g.rank, g.size = C.dpl_comm_rank(g.comm), C.dpl_comm_size(g.comm)
    if opts.timeout ~= nil then check(C.dpl_comm_set_timeout(g.comm, opts.timeout), 2) end
    groups[#groups + 1] = g
  else
    g.size = #list
  end
  if w.nccl ~= nil then
    -- a subgroup of an nccl group gets its own communicator, split from the world's
    -- (every world rank takes part); where libnccl has no ncclCommSplit (before 2.18),
    -- made from a new unique id carried by the subgroup's host group (members only)
    local nout = ffi.new('dpl_nccl *[1]')
    local st = nccl_api.dpl_nccl_split(w.nccl, g.member and 0 or -1, w.rank, g.member and g.rank or 0,
      g.member and g.size or 0, nout)
    local msg
    if st == -4 then -- DPL_ENOTIMPL
      st = 0
      if g.member then
        local nc
        nc, msg = nccl_bootstrap(g, w.nccl_device)
        if nc then nout[0] = nc else st = -1 end
      end
    elseif st ~= 0 then
      msg = ffi.string(C.dpl_last_error())
    end
    if st ~= 0 then
      if g.member then destroy_group(g) end
      error(DistError('dist.new_group: the NCCL communicator: ' .. tostring(msg)), 2)
    end
    if g.member then g.nccl, g.nccl_device = nout[0], w.nccl_device end
  end
  return g
end

--- Internal (specs): the group table behind group (the world when nil).
function M._group(group) return get_group(group, 2) end

---------------------------------------------------------------- collectives

-- async_op=true: the collectives run synchronously (the shm and mpi backends have no
-- progress thread; NCCL work is queued on the device's stream, as without it); the
-- call returns a completed work handle (torch's Work): wait() returns true at once.
local Work = {}
Work.__index = Work
Work.__name = 'Work'
function Work:wait() return true end
function Work:is_completed() return true end
function Work:is_success() return true end
function Work:result() return self._result end
function Work:__tostring() return 'Work(completed)' end
M.Work = Work

-- f(args..., opts without async_op), its result kept in a completed Work
local function async_call(f, opts, ...)
  local r
  if f then
    local o = {}
    for k, v in pairs(opts) do if k ~= 'async_op' then o[k] = v end end
    local n = select('#', ...)
    local args = { ... }
    args[n + 1] = o
    r = f(unpack(args, 1, n + 1))
  end
  return setmetatable({ _result = r }, Work)
end

-- Options table is the last argument when it is a plain table with known keys.
local function split_opts(o)
  if type(o) == 'table' and getmetatable(o) == nil and not tensor_of(o) then return o end
  if getmetatable(o) == Group then return { group = o } end
  return nil
end

function M.barrier(group)
  local o = split_opts(group)
  local g
  if o then g = get_group(o.group, 2) else g = get_group(group, 2) end
  check(C.dpl_comm_barrier(g.comm), 2)
  if o and o.async_op then return async_call(nil, o) end
end

-- GPU tensors. A tensor in GPU memory (a real GPU) runs as an NCCL collective when
-- the group has a communicator (backend 'nccl') and the call's tensors are on its
-- GPU; otherwise (shm, mpi) every tensor collective stages it: inputs are copied to
-- host memory, the host backend runs, outputs are copied back (correct, not fast).
-- M._devmem says what is in GPU memory; specs replace it (and the NCCL calls, with
-- M._set_nccl_api) to run these paths on the simulated GPUs of DPL_VIRTUAL_GPUS.
function M._devmem(tt) return bit.band(tt._flags, 2) ~= 0 end
local function devmem_of(x)
  local tt = tensor_of(x)
  if tt and M._devmem(tt) then return tt end
  return nil
end


-- x, or its host copy when x (a tensor, or a plain list of them) is in GPU memory;
-- back collects {host, gpu} pairs to copy back when out is set.
local function stage(x, back, out)
  local tt = devmem_of(x)
  if tt then
    local h = tt:to('cpu')
    if out then back[#back + 1] = { h, tt } end
    return h
  end
  if type(x) == 'table' and getmetatable(x) == nil and not tensor_of(x) then
    local any = false
    for _, v in ipairs(x) do if devmem_of(v) then any = true break end end
    if any then
      local l = {}
      for i, v in ipairs(x) do l[i] = stage(v, back, out) end
      return l
    end
  end
  return x
end
local function unstage(back)
  for _, p in ipairs(back) do p[2]:copy_(p[1]) end
end
-- new tensors made on the host for a GPU input: moved to its GPU
local function to_gpu(list, gpu)
  if gpu and list then
    local dev = 'cuda:' .. tonumber(gpu._devindex)
    for i, o in ipairs(list) do list[i] = o:to(dev) end
  end
  return list
end

-- the GPU tensor of t when g has an NCCL communicator
local function nccl_tensor(g, t)
  if g.nccl == nil then return nil end
  return devmem_of(t)
end

-- NCCL before 2.10 has no ncclAvg: a mean is a sum, then a division (floating dtypes)
local nccl_version
local function nccl_op(tt, op)
  if op ~= 1 or tt._dtype > 3 then return op, false end
  if nccl_version == nil then nccl_version = tonumber(nccl_api.dpl_nccl_version()) end
  if nccl_version > 0 and nccl_version < 21000 then return 0, true end
  return op, false
end

-- A new 1-D tensor of n elements like tt (dtype, device).
local function new_flat(tt, n)
  local out = ffi.new('dpl_tensor *[1]')
  local shape = ffi.new('int64_t[1]', n)
  check(C.dpl_tensor_empty(tt._dtype, 1, shape, tt._devtype, tt._devindex, out), 3)
  if tensor_mod == nil then new_tensor_like(tt) end -- resolves tensor_mod
  if tensor_mod then return tensor_mod._wrap(out) end
  return ffi.gc(out[0], C.dpl_tensor_release)
end

-- Tensors of list (any device, n elements of dtype d each) copied into a new flat
-- GPU tensor like tt, block i at (i-1)*n.
local function flat_from(list, tt, n, what, level)
  local flat = new_flat(tt, n * #list)
  for i, x in ipairs(list) do
    local xt = tensor_of(x)
    if not xt or tonumber(xt._numel) ~= n or xt._dtype ~= tt._dtype then
      verr(('dist: %s: entry %d must be a %s tensor of %d elements (the GPU tensor\'s), got %s'):format(what, i,
        dtype_names[tt._dtype], n, xt and (dtype_names[xt._dtype] .. ' x ' .. tonumber(xt._numel)) or type(x)), level + 1)
    end
    if n > 0 then flat:narrow(1, (i - 1) * n + 1, n):view_as(xt):copy_(xt) end
  end
  return flat
end

-- The blocks of flat copied into the tensors of list (n elements each).
local function flat_to(list, flat, n, what, level)
  for i, x in ipairs(list) do
    local xt = tensor_of(x)
    if not xt or tonumber(xt._numel) ~= n or xt._dtype ~= flat._dtype then
      verr(('dist: %s: output %d must be a %s tensor of %d elements, got %s'):format(what, i,
        dtype_names[flat._dtype], n, xt and (dtype_names[xt._dtype] .. ' x ' .. tonumber(xt._numel)) or type(x)), level + 1)
    end
    if n > 0 then xt:copy_(flat:narrow(1, (i - 1) * n + 1, n):view_as(xt)) end
  end
  return list
end

-- New tensors shaped like tt: the blocks of flat (views of it, one storage).
local function flat_split(flat, tt, count)
  local n, out = tonumber(tt._numel), {}
  for i = 1, count do
    if n > 0 then out[i] = flat:narrow(1, (i - 1) * n + 1, n):view_as(tt)
    else out[i] = new_tensor_like(tt) end
  end
  return out
end

-- x as a flat GPU tensor of `total` elements for an NCCL call: itself when it is a
-- contiguous tensor on tt's GPU, else nil (the caller copies through a flat one).
local function direct(x, tt, total)
  local xt = devmem_of(x)
  if xt and xt._devindex == tt._devindex and bit.band(xt._flags, 1) ~= 0 and tonumber(xt._numel) == total
      and xt._dtype == tt._dtype then
    return xt
  end
  return nil
end

-- a GPU tensor for NCCL must be contiguous
local function nccl_contig(tt, what, level)
  if bit.band(tt._flags, 1) == 0 then
    verr(('dist: %s needs a contiguous tensor (call :contiguous() first)'):format(what), level + 1)
  end
  return tt
end

--- Internal (DDP's gradient buckets): all-reduces the tensors of `list` as one call
--- over their concatenation, in place, when every one is a contiguous tensor in host
--- memory of one dtype; returns false (and does nothing) otherwise, for the caller to
--- use a flat copy instead.
local multi_bufs, multi_counts, multi_cap = nil, nil, 0
function M._all_reduce_multi(list, op, group)
  local n = #list
  if n == 0 then return true end
  if n > multi_cap then
    multi_cap = math.max(n, 2 * multi_cap)
    multi_bufs, multi_counts = ffi.new('void *[?]', multi_cap), ffi.new('int64_t[?]', multi_cap)
  end
  local dt
  local seen = {}
  for i = 1, n do
    local tt = tensor_of(list[i])
    if not tt or bit.band(tt._flags, 1) == 0 or M._devmem(tt) then return false end
    if dt == nil then dt = tt._dtype elseif tt._dtype ~= dt then return false end
    -- two tensors sharing a storage could overlap: reduced twice in place
    local key = tonumber(ffi.cast('uintptr_t', tt._storage))
    if seen[key] then return false end
    seen[key] = true
    multi_bufs[i - 1] = tt._data
    multi_counts[i - 1] = tt._numel
  end
  local g = get_group(group, 2)
  check(C.dpl_comm_all_reduce_multi(g.comm, multi_bufs, multi_counts, n, dt, op_id(op, 2)), 2)
  return true
end

--- all_reduce(t, op='sum', opts): in place on every rank.
function M.all_reduce(t, op, opts)
  if type(op) == 'table' then opts, op = op, nil end
  opts = split_opts(opts) or {}
  if opts.async_op then return async_call(M.all_reduce, opts, t, op) end
  local g = get_group(opts.group, 2)
  local nt = nccl_tensor(g, t)
  if nt then
    local o, div = nccl_op(nt, op_id(op or opts.op, 2))
    check(nccl_api.dpl_nccl_all_reduce(g.nccl, nccl_contig(nt, 'all_reduce', 2), o), 2)
    if div then nt:div_(g.size) end
    return t
  end
  local back = {}
  local h = stage(t, back, true)
  local p, n, d = buffer_of(h, opts, 'all_reduce', 2)
  check(C.dpl_comm_all_reduce(g.comm, p, n, d, op_id(op or opts.op, 2)), 2)
  unstage(back)
  return t
end

--- reduce(t, dst, op='sum', opts): the result lands in t on rank dst (global rank).
function M.reduce(t, dst, op, opts)
  if type(op) == 'table' then opts, op = op, nil end
  opts = split_opts(opts) or {}
  if opts.async_op then return async_call(M.reduce, opts, t, dst, op) end
  local g = get_group(opts.group, 2)
  local root = group_rank(g, dst or 0, 'dst', 2)
  local nt = nccl_tensor(g, t)
  if nt then
    local o, div = nccl_op(nt, op_id(op or opts.op, 2))
    check(nccl_api.dpl_nccl_reduce(g.nccl, nccl_contig(nt, 'reduce', 2), o, root), 2)
    if div and g.rank == root then nt:div_(g.size) end
    return t
  end
  local back = {}
  local h = stage(t, back, g.rank == root)
  local p, n, d = buffer_of(h, opts, 'reduce', 2)
  check(C.dpl_comm_reduce(g.comm, p, n, d, op_id(op or opts.op, 2), root), 2)
  unstage(back)
  return t
end

--- broadcast(t, src, opts): t takes rank src's values on every rank.
function M.broadcast(t, src, opts)
  opts = split_opts(opts) or {}
  if opts.async_op then return async_call(M.broadcast, opts, t, src) end
  local g = get_group(opts.group, 2)
  local root = group_rank(g, src or 0, 'src', 2)
  local nt = nccl_tensor(g, t)
  if nt then
    check(nccl_api.dpl_nccl_broadcast(g.nccl, nccl_contig(nt, 'broadcast', 2), root), 2)
    return t
  end
  local back = {}
  local h = stage(t, back, g.rank ~= root)
  local p, n, d = buffer_of(h, opts, 'broadcast', 2)
  check(C.dpl_comm_broadcast(g.comm, p, n, d, root), 2)
  unstage(back)
  return t
end

local function copy_blocks_out(list, tmp, n, d, what)
  local es = dtype_sizes[d]
  for i, x in ipairs(list) do
    local p, m, xd = buffer_of(x, { count = n, dtype = d }, what, 3, 'output ' .. i)
    if m ~= n or xd ~= d then
      verr(('dist: %s: output %d is %s x %d, expected %s x %d'):format(what, i, dtype_names[xd], m, dtype_names[d], n), 3)
    end
    ffi.copy(p, ffi.cast('uint8_t *', tmp) + (i - 1) * n * es, n * es)
  end
end

-- the host backends' all_gather (a, b: host tensors, lists of them, raw buffers)
local function host_all_gather(g, a, b, opts)
  if b == nil then
    local p, n, d, tt = buffer_of(a, opts, 'all_gather', 3)
    if not tt then terr('dist: all_gather(t) needs a tensor; with raw buffers call all_gather(recv, send, {count=, dtype=})', 3) end
    local es = dtype_sizes[d]
    local tmp = ffi.new('uint8_t[?]', math.max(1, n * es * g.size))
    check(C.dpl_comm_all_gather(g.comm, p, tmp, n, d), 3)
    local out = {}
    for i = 1, g.size do
      local o = new_tensor_like(tt)
      ffi.copy(tensor_of(o)._data, tmp + (i - 1) * n * es, n * es)
      out[i] = o
    end
    return out
  end
  local p, n, d = buffer_of(b, opts, 'all_gather', 3)
  local es = dtype_sizes[d]
  if type(a) == 'table' and not tensor_of(a) then
    if #a ~= g.size then verr(('dist: all_gather: the output list has %d entries, the group %d ranks'):format(#a, g.size), 3) end
    local tmp = ffi.new('uint8_t[?]', math.max(1, n * es * g.size))
    check(C.dpl_comm_all_gather(g.comm, p, tmp, n, d), 3)
    copy_blocks_out(a, tmp, n, d, 'all_gather')
    return a
  end
  local rp = buffer_of(a, { count = n * g.size, dtype = d }, 'all_gather', 3, 'the output tensor')
  check(C.dpl_comm_all_gather(g.comm, p, rp, n, d), 3)
  return a
end

-- all_gather(t) -> list of new tensors; all_gather(list, t) fills list;
-- all_gather(recv, send, {count=, dtype=}) with raw buffers (recv: size*count).
-- GPU tensors with nccl: all_gather(t) returns views of one flat GPU tensor.
function M.all_gather(a, b, opts)
  if opts == nil and split_opts(b) then opts, b = b, nil end
  opts = split_opts(opts) or {}
  if opts.async_op then return async_call(M.all_gather, opts, a, b) end
  local g = get_group(opts.group, 2)
  local st = nccl_tensor(g, b == nil and a or b)
  if st then
    nccl_contig(st, 'all_gather', 2)
    local n = tonumber(st._numel)
    local rt = b ~= nil and direct(a, st, n * g.size)
    local flat = rt or new_flat(st, n * g.size)
    check(nccl_api.dpl_nccl_all_gather(g.nccl, st, tensor_of(flat)), 2)
    if b == nil then return flat_split(flat, st, g.size) end
    if rt then return a end
    if type(a) == 'table' and not tensor_of(a) then
      if #a ~= g.size then verr(('dist: all_gather: the output list has %d entries, the group %d ranks'):format(#a, g.size), 2) end
      return flat_to(a, flat, n, 'all_gather', 2)
    end
    return flat_to({ a }, flat, n * g.size, 'all_gather', 2) and a
  end
  local back = {}
  local a2, b2 = stage(a, back, b ~= nil), stage(b, back, false)
  local r = host_all_gather(g, a2, b2, opts)
  unstage(back)
  if b == nil then return to_gpu(r, devmem_of(a)) end
  return a
end

local function host_gather(g, t, list, root, opts)
  local p, n, d, tt = buffer_of(t, opts, 'gather', 3)
  local es = dtype_sizes[d]
  local me = g.rank == root
  if me and list ~= nil and type(list) == 'cdata' then
    local rp = buffer_of(list, { count = n * g.size, dtype = d }, 'gather', 3, 'the output tensor')
    check(C.dpl_comm_gather(g.comm, p, rp, n, d, root), 3)
    return list
  end
  local tmp = me and ffi.new('uint8_t[?]', math.max(1, n * es * g.size)) or nil
  check(C.dpl_comm_gather(g.comm, p, tmp, n, d, root), 3)
  if not me then return nil end
  if list == nil then
    if not tt then terr('dist: gather with a raw buffer needs a recv buffer on dst', 3) end
    list = {}
    for i = 1, g.size do list[i] = new_tensor_like(tt) end
  elseif #list ~= g.size then
    verr(('dist: gather: gather_list has %d entries, the group %d ranks'):format(#list, g.size), 3)
  end
  copy_blocks_out(list, tmp, n, d, 'gather')
  return list
end

-- gather(t, gather_list, dst, opts): torch's order; gather_list on dst only
-- (nil there: a list of new tensors is returned). Raw: gather(send, recv, dst, {count=, dtype=}).
function M.gather(t, list, dst, opts)
  opts = split_opts(opts) or {}
  if opts.async_op then return async_call(M.gather, opts, t, list, dst) end
  local g = get_group(opts.group, 2)
  local root = group_rank(g, dst or 0, 'dst', 2)
  local me = g.rank == root
  local st = nccl_tensor(g, t)
  if st then
    nccl_contig(st, 'gather', 2)
    local n = tonumber(st._numel)
    if not me then
      check(nccl_api.dpl_nccl_gather(g.nccl, st, nil, root), 2)
      return nil
    end
    if type(list) == 'table' and not tensor_of(list) and #list ~= g.size then
      verr(('dist: gather: gather_list has %d entries, the group %d ranks'):format(#list, g.size), 2)
    end
    local rt = list ~= nil and direct(list, st, n * g.size)
    local flat = rt or new_flat(st, n * g.size)
    check(nccl_api.dpl_nccl_gather(g.nccl, st, tensor_of(flat), root), 2)
    if rt then return list end
    if list == nil then return flat_split(flat, st, g.size) end
    if tensor_of(list) then flat_to({ list }, flat, n * g.size, 'gather', 2) return list end
    return flat_to(list, flat, n, 'gather', 2)
  end
  local back = {}
  local t2, l2 = stage(t, back, false), stage(list, back, me)
  local r = host_gather(g, t2, l2, root, opts)
  unstage(back)
  if not me then return nil end
  if list == nil then return to_gpu(r, devmem_of(t)) end
  return list
end

-- the buffers of list (n elements of dtype d each) one after another in a new byte
-- array, for the collectives that take one contiguous send buffer (errors name the
-- collective and the list, at the level of the API function's caller)
local function pack_list(list, n, d, what, list_name)
  local es = dtype_sizes[d]
  local sp = ffi.new('uint8_t[?]', math.max(1, n * es * #list))
  for i, x in ipairs(list) do
    local xp, m, xd = buffer_of(x, { count = n, dtype = d }, what, 4, ('%s[%d]'):format(list_name, i))
    if m ~= n or xd ~= d then
      verr(('dist: %s: %s[%d] is %s x %d, expected %s x %d'):format(what, list_name, i, dtype_names[xd], m,
        dtype_names[d], n), 4)
    end
    ffi.copy(sp + (i - 1) * n * es, xp, n * es)
  end
  return sp
end

local function host_scatter(g, t, list, root, opts)
  local p, n, d = buffer_of(t, opts, 'scatter', 3)
  local sp = nil
  if g.rank == root then
    if type(list) == 'cdata' or tensor_of(list) then -- a flat tensor or raw buffer of size blocks
      sp = buffer_of(list, { count = n * g.size, dtype = d }, 'scatter', 3, 'the input tensor')
    else
      if type(list) ~= 'table' or #list ~= g.size then
        verr(('dist: scatter: rank %d (src) needs a scatter_list of %d entries'):format(g.rank, g.size), 3)
      end
      sp = pack_list(list, n, d, 'scatter', 'scatter_list')
    end
  end
  check(C.dpl_comm_scatter(g.comm, sp, p, n, d, root), 3)
end

-- scatter(t, scatter_list, src, opts): t receives scatter_list[rank+1] of rank src.
-- Raw: scatter(recv, send, src, {count=, dtype=}) with send of size*count on src.
function M.scatter(t, list, src, opts)
  opts = split_opts(opts) or {}
  if opts.async_op then return async_call(M.scatter, opts, t, list, src) end
  local g = get_group(opts.group, 2)
  local root = group_rank(g, src or 0, 'src', 2)
  local rt = nccl_tensor(g, t)
  if rt then
    nccl_contig(rt, 'scatter', 2)
    local n = tonumber(rt._numel)
    local flat = nil
    if g.rank == root then
      if tensor_of(list) then
        flat = direct(list, rt, n * g.size) or flat_from({ list }, rt, n * g.size, 'scatter', 2)
      else
        if type(list) ~= 'table' or #list ~= g.size then
          verr(('dist: scatter: rank %d (src) needs a scatter_list of %d entries'):format(g.rank, g.size), 2)
        end
        flat = flat_from(list, rt, n, 'scatter', 2)
      end
    end
    check(nccl_api.dpl_nccl_scatter(g.nccl, flat and tensor_of(flat) or nil, rt, root), 2)
    return t
  end
  local back = {}
  local t2, l2 = stage(t, back, true), stage(list, back, false)
  host_scatter(g, t2, l2, root, opts)
  unstage(back)
  return t
end

local function host_reduce_scatter(g, out, inputs, op, opts)
  local p, n, d = buffer_of(out, opts, 'reduce_scatter', 3)
  local sp
  if type(inputs) == 'table' and not tensor_of(inputs) then
    if #inputs ~= g.size then
      verr(('dist: reduce_scatter: input_list has %d entries, the group %d ranks'):format(#inputs, g.size), 3)
    end
    sp = pack_list(inputs, n, d, 'reduce_scatter', 'input_list')
  else
    sp = buffer_of(inputs, { count = n * g.size, dtype = d }, 'reduce_scatter', 3, 'the input tensor')
  end
  check(C.dpl_comm_reduce_scatter(g.comm, sp, p, n, d, op_id(op or opts.op, 3)), 3)
end

-- reduce_scatter(output, input_list, op, opts): output = op over ranks of input_list[rank+1].
-- Raw: reduce_scatter(recv, send, op, {count=, dtype=}) with send of size*count.
function M.reduce_scatter(out, inputs, op, opts)
  if type(op) == 'table' then opts, op = op, nil end
  opts = split_opts(opts) or {}
  if opts.async_op then return async_call(M.reduce_scatter, opts, out, inputs, op) end
  local g = get_group(opts.group, 2)
  local rt = nccl_tensor(g, out)
  if rt then
    nccl_contig(rt, 'reduce_scatter', 2)
    local n = tonumber(rt._numel)
    local flat
    if tensor_of(inputs) then
      flat = direct(inputs, rt, n * g.size) or flat_from({ inputs }, rt, n * g.size, 'reduce_scatter', 2)
    else
      if type(inputs) ~= 'table' or #inputs ~= g.size then
        verr(('dist: reduce_scatter: input_list has %d entries, the group %d ranks'):format(
          type(inputs) == 'table' and #inputs or 0, g.size), 2)
      end
      flat = flat_from(inputs, rt, n, 'reduce_scatter', 2)
    end
    local o, div = nccl_op(rt, op_id(op or opts.op, 2))
    check(nccl_api.dpl_nccl_reduce_scatter(g.nccl, tensor_of(flat), rt, o), 2)
    if div then rt:div_(g.size) end
    return out
  end
  local back = {}
  local o2, i2 = stage(out, back, true), stage(inputs, back, false)
  host_reduce_scatter(g, o2, i2, op, opts)
  unstage(back)
  return out
end

-- The host backends' all_to_all over flat host tensors of size equal blocks: one
-- scatter per rank (rank r's input scattered into block r of every output).
local function host_all_to_all(g, out, inp, what, level)
  local p, n, d = buffer_of(out, nil, what, level)
  local ip, m, id = buffer_of(inp, nil, what, level)
  if m ~= n or id ~= d then
    verr(('dist: %s: input is %s x %d, output %s x %d (they must match)'):format(what, dtype_names[id], m, dtype_names[d], n), level)
  end
  if n % g.size ~= 0 then
    verr(('dist: %s: %d elements do not split into %d equal blocks'):format(what, n, g.size), level)
  end
  local b, es = n / g.size, dtype_sizes[d]
  for r = 0, g.size - 1 do
    check(C.dpl_comm_scatter(g.comm, g.rank == r and ip or nil, ffi.cast('uint8_t *', p) + r * b * es, b, d, r), level, what)
  end
end

--- all_to_all_single(output, input, opts): input and output hold `size` equal blocks
--- (split along the first dimension, as torch's without split sizes); block k of
--- rank j's input lands in block j of rank k's output.
local all_to_all_flat -- below
function M.all_to_all_single(out, inp, opts)
  opts = split_opts(opts) or {}
  if opts.async_op then return async_call(M.all_to_all_single, opts, out, inp) end
  if opts.output_split_sizes ~= nil or opts.input_split_sizes ~= nil then
    verr('dist: all_to_all_single: uneven split sizes are not supported (equal blocks only)', 2)
  end
  all_to_all_flat(out, inp, opts.group, 'all_to_all_single')
  return out
end

-- all_to_all_single's work (what: the user's call; errors at the level of its caller)
function all_to_all_flat(out, inp, group, what)
  local g = get_group(group, 3)
  local ot, it = tensor_of(out), tensor_of(inp)
  if not ot or not it then terr('dist: ' .. what .. ' expects two tensors (output, input)', 3) end
  local st = nccl_tensor(g, inp)
  if st then
    nccl_contig(st, what, 3)
    local n = tonumber(st._numel)
    if tonumber(ot._numel) ~= n or ot._dtype ~= st._dtype then
      verr(('dist: %s: input is %s x %d, output %s x %d (they must match)'):format(what,
        dtype_names[st._dtype], n, dtype_names[ot._dtype], tonumber(ot._numel)), 3)
    end
    if n % g.size ~= 0 then
      verr(('dist: %s: %d elements do not split into %d equal blocks'):format(what, n, g.size), 3)
    end
    local rt = direct(out, st, n)
    local flat = rt or new_flat(st, n)
    check(nccl_api.dpl_nccl_all_to_all(g.nccl, st, tensor_of(flat)), 3, what ~= 'all_to_all_single' and what or nil)
    if not rt then flat_to({ out }, flat, n, what, 3) end
    return out
  end
  local back = {}
  local o2, i2 = stage(out, back, true), stage(inp, back, false)
  host_all_to_all(g, o2, i2, what, 4)
  unstage(back)
  return out
end

--- all_to_all(output_list, input_list, opts): input_list[k] goes to rank k, where it
--- lands in output_list[rank+1]. Every tensor has one size and dtype.
function M.all_to_all(outs, inps, opts)
  opts = split_opts(opts) or {}
  if opts.async_op then return async_call(M.all_to_all, opts, outs, inps) end
  local g = get_group(opts.group, 2)
  for _, l in ipairs({ { outs, 'output_list' }, { inps, 'input_list' } }) do
    if type(l[1]) ~= 'table' or tensor_of(l[1]) or #l[1] ~= g.size then
      verr(('dist: all_to_all: %s must be a list of %d tensors (one per rank)'):format(l[2], g.size), 2)
    end
  end
  local lead = tensor_of(inps[1])
  if not lead then terr('dist: all_to_all: input_list[1] is not a tensor', 2) end
  local n = tonumber(lead._numel)
  -- through flat tensors of `size` blocks on the first input's device
  local flat_in = flat_from(inps, lead, n, 'all_to_all', 2)
  local flat_out = new_flat(lead, n * g.size)
  all_to_all_flat(flat_out, flat_in, opts.group, 'all_to_all')
  flat_to(outs, flat_out, n, 'all_to_all', 2)
  return outs
end

---------------------------------------------------------------- objects

local function encode(obj)
  local ok, s = pcall(sbuf.encode, obj)
  if ok then return s end
  return nil, tostring(s)
end

local function decode(s, from)
  local ok, v = pcall(sbuf.decode, s)
  if not ok then error(DistError(('dist: cannot decode the object from rank %d: %s'):format(from, tostring(v))), 3) end
  return v
end

--- broadcast_object(obj, src, opts) -> rank src's object on every rank.
function M.broadcast_object(obj, src, opts)
  opts = split_opts(opts) or {}
  local g = get_group(opts.group, 2)
  local root = group_rank(g, src or 0, 'src', 2)
  local len = ffi.new('int64_t[1]')
  local s, why
  if g.rank == root then
    s, why = encode(obj)
    len[0] = s and #s or -1
  end
  check(C.dpl_comm_broadcast(g.comm, len, 1, 5, root), 2, 'broadcast_object')
  local n = tonumber(len[0])
  if n < 0 then
    error(DistError(('dist: broadcast_object: rank %d (src) could not encode its object%s'):format(
      src or 0, why and (': ' .. why) or '')), 2)
  end
  local buf = ffi.new('uint8_t[?]', math.max(1, n))
  if g.rank == root then ffi.copy(buf, s, n) end
  check(C.dpl_comm_broadcast(g.comm, buf, n, 6, root), 2, 'broadcast_object')
  if g.rank == root then return obj end
  return decode(ffi.string(buf, n), src or 0)
end

local function gather_objects(obj, g, root, what)
  local s, why = encode(obj)
  local lens = ffi.new('int64_t[?]', g.size)
  local mine = ffi.new('int64_t[1]', s and #s or -1)
  -- every rank learns every length: the padded size, and who could not encode
  check(C.dpl_comm_all_gather(g.comm, mine, lens, 1, 5), 3, what)
  local recv = not root or g.rank == root
  local maxlen, bad = 0, {}
  for i = 0, g.size - 1 do
    local l = tonumber(lens[i])
    if l < 0 then bad[#bad + 1] = tostring(g.ranks[i + 1]) elseif l > maxlen then maxlen = l end
  end
  if #bad > 0 then
    error(DistError(('dist: %s: rank%s %s could not encode the object%s'):format(what,
      #bad == 1 and '' or 's', table.concat(bad, ','), why and (': ' .. why) or '')), 3)
  end
  local send = ffi.new('uint8_t[?]', math.max(1, maxlen))
  ffi.copy(send, s, #s)
  local all = recv and ffi.new('uint8_t[?]', math.max(1, maxlen * g.size)) or nil
  if root then check(C.dpl_comm_gather(g.comm, send, all, maxlen, 6, root), 3, what)
  else check(C.dpl_comm_all_gather(g.comm, send, all, maxlen, 6), 3, what) end
  if not recv then return nil end
  local out = {}
  for i = 0, g.size - 1 do
    out[i + 1] = decode(ffi.string(all + i * maxlen, tonumber(lens[i])), g.ranks[i + 1])
  end
  return out
end

--- all_gather_object(obj, opts) -> list (1-based) of every rank's object, rank order.
function M.all_gather_object(obj, opts)
  opts = split_opts(opts) or {}
  return gather_objects(obj, get_group(opts.group, 2), nil, 'all_gather_object')
end

--- gather_object(obj, dst, opts) -> the list on dst, nil elsewhere.
function M.gather_object(obj, dst, opts)
  opts = split_opts(opts) or {}
  local g = get_group(opts.group, 2)
  return gather_objects(obj, g, group_rank(g, dst or 0, 'dst', 2), 'gather_object')
end

--- broadcast_object_list(list, src, opts): torch's in-place form: on every rank the
--- entries of list become those of src's list (list[1..n], n = #list on src).
function M.broadcast_object_list(list, src, opts)
  if type(list) ~= 'table' then terr('dist.broadcast_object_list: object_list must be a list', 2) end
  opts = split_opts(opts) or {}
  local g = get_group(opts.group, 2)
  local root = group_rank(g, src or 0, 'src', 2)
  local mine = g.rank == root and { n = #list, unpack(list, 1, #list) } or nil
  local got = M.broadcast_object(mine, src or 0, { group = opts.group })
  if g.rank ~= root then
    for i = #list, got.n + 1, -1 do list[i] = nil end
    for i = 1, got.n do list[i] = got[i] end
  end
  return list
end

--- scatter_object_list(out_list, in_list, src, opts): out_list[1] becomes in_list[rank+1]
--- of rank src (in_list: one object per rank of the group, on src only). Returns out_list
--- (a new list when it is nil).
function M.scatter_object_list(out_list, in_list, src, opts)
  if out_list ~= nil and type(out_list) ~= 'table' then
    terr('dist.scatter_object_list: scatter_object_output_list must be a list', 2)
  end
  opts = split_opts(opts) or {}
  local g = get_group(opts.group, 2)
  local root = group_rank(g, src or 0, 'src', 2)
  -- src's lengths go round first (-1: an entry that could not be encoded, -2: a bad list)
  local lens = ffi.new('int64_t[?]', g.size)
  local enc, why = {}, nil
  if g.rank == root then
    if type(in_list) ~= 'table' or #in_list ~= g.size then
      why = ('scatter_object_input_list must hold %d objects (one per rank), got %s'):format(g.size,
        type(in_list) == 'table' and #in_list or type(in_list))
      for i = 0, g.size - 1 do lens[i] = -2 end
    else
      for i = 1, g.size do
        local e, w = encode(in_list[i])
        if not e and not why then why = ('entry %d: %s'):format(i, w) end
        enc[i] = e
        lens[i - 1] = e and #e or -1
      end
    end
  end
  check(C.dpl_comm_broadcast(g.comm, lens, g.size, 5, root), 2, 'scatter_object_list')
  local maxlen = 0
  for i = 0, g.size - 1 do
    local l = tonumber(lens[i])
    if l < 0 then
      local e = DistError(('dist: scatter_object_list: rank %d (src) %s'):format(src or 0,
        l == -2 and 'was not given a valid scatter_object_input_list' or 'could not encode an object')
        .. (why and (': ' .. why) or ''))
      error(e, 2)
    end
    if l > maxlen then maxlen = l end
  end
  local send = nil
  if g.rank == root then
    send = ffi.new('uint8_t[?]', math.max(1, maxlen * g.size))
    for i = 1, g.size do ffi.copy(send + (i - 1) * maxlen, enc[i], #enc[i]) end
  end
  local recv = ffi.new('uint8_t[?]', math.max(1, maxlen))
  check(C.dpl_comm_scatter(g.comm, send, recv, maxlen, 6, root), 2, 'scatter_object_list')
  out_list = out_list or {}
  out_list[1] = decode(ffi.string(recv, tonumber(lens[g.rank])), src or 0)
  return out_list
end

--- monitored_barrier(opts) (opts: a group, or {group=, timeout=}): a barrier that waits
--- at most timeout seconds (default: the group's timeout); on the shm backend the
--- error names the ranks that did not arrive. A timeout fails the group, as any other.
--- On mpi a barrier cannot time out by itself: the watchdog ends the job instead.
function M.monitored_barrier(opts, timeout)
  local o = split_opts(opts) or {}
  if timeout == nil then timeout = o.timeout end
  if getmetatable(opts) == Group then o = { group = opts } end
  check_timeout(timeout, 'dist.monitored_barrier', 2)
  local g = get_group(o.group, 2)
  local old = C.dpl_comm_timeout(g.comm)
  if timeout then check(C.dpl_comm_set_timeout(g.comm, timeout), 2) end
  local st = C.dpl_comm_barrier(g.comm)
  if timeout then C.dpl_comm_set_timeout(g.comm, old) end
  if st ~= 0 and timeout then -- the timeout that ran out is this call's own: say so
    local ok, e = pcall(check, st, 1, 'monitored_barrier')
    if not ok and type(e) == 'table' and type(e.message) == 'string' then
      e.message = e.message:gsub('%(timeout: init_process_group{timeout=} or DPL_COMM_TIMEOUT%)',
        '(timeout: monitored_barrier{timeout=})')
    end
    error(e, 2)
  end
  check(st, 2, 'monitored_barrier')
end

-- Point-to-point: the shm backend's protocol synchronises whole groups (every call
-- publishes and waits on per-rank steps), and the mpi backend follows it.
local function no_p2p(name)
  return function()
    error(errors.NotImplementedError(('dist.%s: point-to-point send/recv is not supported by dpl.dist '
      .. '(shm, mpi); use a collective instead: broadcast(t, src, {group = dist.new_group({src, dst})}) '
      .. 'moves a tensor from src to dst, scatter/gather and the *_object functions too'):format(name)), 2)
  end
end
M.send, M.recv, M.isend, M.irecv = no_p2p('send'), no_p2p('recv'), no_p2p('isend'), no_p2p('irecv')
M.batch_isend_irecv = no_p2p('batch_isend_irecv')

---------------------------------------------------------------- store

local Store = {}
Store.__index = Store
Store.__name = 'TCPStore'
M.TCPStore = setmetatable({}, { __call = function(_, opts) return M.store(opts) end })

--- dist.TCPStore{host=, port=, is_master=, timeout=}: the rendezvous key-value store
--- (rank 0 hosts it). Defaults: MASTER_ADDR (else 127.0.0.1), MASTER_PORT, is_master
--- on rank 0, the comm timeout. port=0 with is_master picks a free port (store:port()).
function M.store(opts)
  opts = opts or {}
  local host = opts.host or env('MASTER_ADDR') or '127.0.0.1'
  local port = opts.port or envint('TCPStore', 2, 'MASTER_PORT')
  local is_master = opts.is_master
  if is_master == nil then is_master = (envint('TCPStore', 2, 'RANK', 'OMPI_COMM_WORLD_RANK', 'SLURM_PROCID') or 0) == 0 end
  if port == nil then cfgerr('TCPStore: needs port= or MASTER_PORT', 2) end
  check_timeout(opts.timeout, 'TCPStore', 2)
  if opts.timeout == nil then check_env_timeout('TCPStore', 2) end
  local out = ffi.new('dpl_store *[1]')
  check(C.dpl_store_create(host, port, is_master and 1 or 0, opts.timeout or 0, out), 2)
  return setmetatable({ h = ffi.gc(out[0], C.dpl_store_destroy) }, Store)
end

local function live(self)
  if self.h == nil then error(DistError('dist: the store was closed'), 3) end
  return self.h
end

function Store:set(key, value)
  value = tostring(value)
  check(C.dpl_store_set(live(self), tostring(key), value, #value), 2)
end

--- Waits (up to timeout seconds, default the store's) until key exists; returns its value.
function Store:get(key, timeout)
  local v, n = ffi.new('const uint8_t *[1]'), ffi.new('int64_t[1]')
  check(C.dpl_store_get(live(self), tostring(key), timeout or 0, v, n), 2)
  return ffi.string(v[0], n[0])
end

--- Adds delta (default 1) to the integer under key (0 when absent); returns the new value.
function Store:add(key, delta)
  local n = ffi.new('int64_t[1]')
  check(C.dpl_store_add(live(self), tostring(key), delta or 1, n), 2)
  return tonumber(n[0])
end

--- Waits until every key in the list exists.
function Store:wait(keys, timeout)
  for _, k in ipairs(type(keys) == 'table' and keys or { keys }) do self:get(k, timeout) end
end

function Store:delete_key(key)
  local e = ffi.new('int32_t[1]')
  check(C.dpl_store_delete(live(self), tostring(key), e), 2)
  return e[0] ~= 0
end

function Store:port() return C.dpl_store_port(live(self)) end

function Store:close()
  if self.h ~= nil then
    local h = self.h
    self.h = nil
    C.dpl_store_destroy(ffi.gc(h, nil))
  end
end

-- dist.spawn lives in dpl.spawn (forks workers, each with its group); reachable here
setmetatable(M, { __index = function(_, k)
  if k == 'spawn' then return require('dpl.spawn').spawn end
end })

--- The C handle of a group (for benchmarks and other C code).
function M._comm(group) return get_group(group, 2).comm end

return M
