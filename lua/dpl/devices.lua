-- dpl.devices: device objects, the seed's device-id parsing (gpus, tpu_cores),
-- GPU picking and batch transfer: Lightning 0.9's trainer/distrib_parts.py as
-- dplhost implements it (normative text: spec/devices.md of the project; the
-- places where dplhost deliberately differs from Lightning are marked (fix)).
--
-- Device ids follow Lightning: 0-based (cuda:0 is GPU 0); TPU core indices are
-- 1..8 as in the seed. "Sequence" means a Lua table with keys 1..n and no other.
local ffi = require 'ffi'
local capi = require 'dpl.capi'
local errors = require 'dpl.errors'

local C = capi.C
local Misconfiguration = errors.MisconfigurationException
local RuntimeError = errors.RuntimeError
local TypeError = errors.TypeError
local ValueError = errors.ValueError

local floor, huge = math.floor, math.huge
local concat = table.concat

local M = {}

local DPL_DEVICE_CPU, DPL_DEVICE_CUDA = 0, 1
local DPL_EDEVICE, DPL_ENOMEM, DPL_ENOTIMPL, DPL_EINTR = -5, -2, -4, -8

-------------------------------------------------------------------- helpers

local function raise(cls, fmt, ...)
  error(cls(select('#', ...) > 0 and fmt:format(...) or fmt), 0)
end

local function last_error()
  return ffi.string(C.dpl_last_error())
end

local function is_integer(x)
  return type(x) == 'number' and x == floor(x) and x ~= huge and x ~= -huge
end

local device_fields = {} -- device object -> {type=, index=, type_id=, is_cuda=, str=}

--- True when t is a table whose (raw) keys are exactly 1..n (device objects are not).
local function is_sequence(t)
  if type(t) ~= 'table' or device_fields[t] then return false end
  local n = 0
  for k in next, t do
    if type(k) ~= 'number' or k < 1 or k ~= floor(k) then return false end
    n = n + 1
  end
  for i = 1, n do
    if rawget(t, i) == nil then return false end
  end
  return true
end

local function fmt_list(t)
  local parts = {}
  for i = 1, #t do parts[i] = tostring(t[i]) end
  return '{' .. concat(parts, ', ') .. '}'
end

--- A short description of a value for error messages ("got ...").
local function describe(v)
  local tv = type(v)
  if v == nil then return 'nil'
  elseif tv == 'string' then return ("the string '%s'"):format(v)
  elseif tv == 'number' then return 'the number ' .. tostring(v)
  elseif tv == 'boolean' then return 'the boolean ' .. tostring(v)
  elseif tv == 'table' then
    if device_fields[v] then return 'the device ' .. device_fields[v].str end
    if is_sequence(v) then
      local parts = {}
      for i = 1, #v do
        local x = v[i]
        parts[i] = type(x) == 'string' and ("'" .. x .. "'") or
                   (type(x) == 'number' or type(x) == 'boolean') and tostring(x) or type(x)
      end
      return 'the sequence {' .. concat(parts, ', ') .. '}'
    end
    return 'a table that is not a sequence (a map)'
  elseif tv == 'cdata' then return 'a cdata ' .. tostring(ffi.typeof(v))
  else return 'a ' .. tv end
end
M._describe = describe

--- A value as Lua source-like text: 'ab', 3, {0, 1}.
local function repr(v)
  if type(v) == 'string' then return "'" .. v .. "'" end
  if is_sequence(v) then
    local parts = {}
    for i = 1, #v do parts[i] = repr(v[i]) end
    return '{' .. concat(parts, ', ') .. '}'
  end
  return tostring(v)
end
M._is_sequence = is_sequence
M._is_integer = is_integer

local function trim(s)
  return (s:gsub('^%s+', ''):gsub('%s+$', ''))
end

--- Splits s on ',' into trimmed, non-empty integer pieces; returns the list, or
--- nil and the first piece that is not an integer literal.
local function parse_int_list(s)
  local out = {}
  for piece in (s .. ','):gmatch('([^,]*),') do
    piece = trim(piece)
    if piece ~= '' then
      if not piece:match('^[+-]?%d+$') then return nil, piece end
      out[#out + 1] = tonumber(piece)
    end
  end
  return out
end

local function cuda_count()
  local n = ffi.new('int32_t[1]')
  local st = C.dpl_device_count(DPL_DEVICE_CUDA, n)
  if st ~= 0 then
    -- only a bad DPL_VIRTUAL_GPUS/DPL_VIRTUAL_GPUS_BUSY gets here: the user's setting
    raise(Misconfiguration, '%s', last_error())
  end
  return n[0]
end

local function cuda_reason()
  return ffi.string(C.dpl_cuda_unavailable_reason())
end

-------------------------------------------------------------------- device objects

local device_methods = {}
local device_cache = {}

local DeviceMT = {
  __index = function(d, k)
    local f = device_fields[d]
    local v = f[k]
    if v ~= nil and k ~= 'str' then return v end
    return device_methods[k]
  end,
  __newindex = function(_, k)
    error(TypeError(("device objects are immutable (tried to set '%s')"):format(tostring(k))), 2)
  end,
  __tostring = function(d) return device_fields[d].str end,
  __eq = function(a, b)
    local fa, fb = device_fields[a], device_fields[b]
    return fa ~= nil and fb ~= nil and fa.str == fb.str
  end,
  __concat = function(a, b) return tostring(a) .. tostring(b) end,
}

local function intern(dtype, index)
  local str = dtype == 'cpu' and 'cpu' or ('%s:%d'):format(dtype, index)
  local d = device_cache[str]
  if not d then
    d = setmetatable({}, DeviceMT)
    device_fields[d] = {
      type = dtype, index = index, str = str,
      type_id = dtype == 'cpu' and DPL_DEVICE_CPU or DPL_DEVICE_CUDA,
      is_cuda = dtype == 'cuda',
    }
    device_cache[str] = d
  end
  return d
end

--- True when d is a device object made by dpl.device.
function M.is_device(d)
  return type(d) == 'table' and device_fields[d] ~= nil
end

local known_types = { cpu = true, cuda = true, tpu = true, xla = true }

-- The current GPU: what 'cuda' without an index means (dpl.device('cuda'), device = 'cuda',
-- t:cuda(), the dpl.cuda memory queries without a device), as torch.cuda.current_device.
-- 0 until set; the Trainer sets it to its root device on a GPU (Lightning's
-- torch.cuda.set_device(root_device)), so 'cuda' on DDP rank k means that rank's GPU. Kept in
-- the registry: one value per process, also for a module loaded again.
local REG = debug.getregistry()
function M.current_cuda() return REG['dpl.cuda.current'] or 0 end
function M.set_current_cuda(k)
  if not (is_integer(k) and k >= 0) then
    raise(ValueError, 'cuda.set_device: expected a GPU index >= 0, got %s', describe(k))
  end
  local n = cuda_count()
  if k >= n then
    raise(RuntimeError, 'cuda.set_device: cuda:%d does not exist: this process sees %d GPU%s', k, n, n == 1 and '' or 's')
  end
  REG['dpl.cuda.current'] = k
end

--- dpl.device("cpu"), dpl.device("cuda:1"), dpl.device("cuda", 1), dpl.device(dev).
--- Returns an interned, immutable device object with fields `type` ("cpu" or
--- "cuda"), `index` (0-based; the CPU is index 0), `is_cuda`, `type_id` (the C
--- dpl_device_type); tostring gives "cpu" / "cuda:1"; `==` compares devices.
--- "cuda" alone is the current GPU (M.current_cuda: cuda:0 until dpl.cuda.set_device). A GPU
--- must exist in this process (real, or simulated with DPL_VIRTUAL_GPUS).
function M.device(spec, index)
  if M.is_device(spec) then
    if index == nil or index == spec.index then return spec end
    raise(ValueError, 'dpl.device: device %s given with a different index %s', tostring(spec), tostring(index))
  end
  if type(spec) ~= 'string' then
    raise(TypeError, "dpl.device: expected a device string such as 'cpu', 'cuda' or 'cuda:1', got %s",
          describe(spec))
  end
  if index ~= nil and not (is_integer(index) and index >= 0) then
    raise(ValueError, "dpl.device: the device index must be a non-negative integer, got %s for '%s'",
          describe(index), spec)
  end
  local dtype, rest = spec:match('^(%a+):(.*)$')
  if not dtype then dtype = spec:match('^(%a+)$') end
  if not dtype or not known_types[dtype] then
    local hint = ''
    local t = dtype or spec:match('^%s*(%a+)')
    if t and (t:lower() == 'gpu' or t:lower() == 'cuda') then hint = "; did you mean 'cuda'?" end
    if t and t:lower() == 'cpu' then hint = "; did you mean 'cpu'?" end
    raise(ValueError, "dpl.device: invalid device string '%s' (expected 'cpu', 'cuda' or 'cuda:<index>')%s",
          spec, hint)
  end
  if rest then
    if not rest:match('^%d+$') then
      raise(ValueError, "dpl.device: invalid device index '%s' in '%s' (expected a non-negative integer, as in '%s:0')",
            rest, spec, dtype)
    end
    if index ~= nil then
      raise(ValueError, "dpl.device: the index is given twice: '%s' and %s", spec, tostring(index))
    end
    index = tonumber(rest)
  end
  if dtype == 'tpu' or dtype == 'xla' then
    raise(RuntimeError, "dpl.device: no TPU devices were found ('%s'): dplhost has no TPU backend", spec)
  end
  if dtype == 'cpu' then
    if index ~= nil and index ~= 0 then
      raise(RuntimeError, "dpl.device: cpu:%d does not exist: the CPU is the single device 'cpu' (index 0)", index)
    end
    return intern('cpu', 0)
  end
  index = index or M.current_cuda()
  local n = cuda_count()
  if index >= n then
    if n == 0 then
      raise(RuntimeError, 'dpl.device: cuda:%d is not available: this process sees no GPU (%s)',
            index, cuda_reason())
    end
    raise(RuntimeError, 'dpl.device: cuda:%d does not exist: this process sees %d GPU%s (cuda:0..cuda:%d)',
          index, n, n == 1 and '' or 's', n - 1)
  end
  return intern('cuda', index)
end

-------------------------------------------------------------------- device ids (seed)

--- The ids {0, ..., n-1} of the GPUs this process sees ({} when none). Counting
--- goes through the device registry (NVML or DPL_VIRTUAL_GPUS): no CUDA context.
function M.get_all_available_gpus()
  local ids = {}
  for i = 0, cuda_count() - 1 do ids[#ids + 1] = i end
  return ids
end

local TYPE_MSG = "Device ID's (GPU/TPU) must be int, string or sequence of ints or nil"

--- Raises MisconfigurationException unless device_ids is nil, an integer, a
--- string or a sequence of integers (fix: the elements are checked too).
function M._check_data_type(device_ids)
  local t = type(device_ids)
  if device_ids == nil or t == 'string' or is_integer(device_ids) then return end
  if is_sequence(device_ids) then
    for i = 1, #device_ids do
      if not is_integer(device_ids[i]) then
        raise(Misconfiguration, '%s, got %s (element %d is %s)', TYPE_MSG, describe(device_ids), i,
              describe(device_ids[i]))
      end
    end
    return
  end
  raise(Misconfiguration, '%s, got %s', TYPE_MSG, describe(device_ids))
end

--- A string names GPU ids: "-1" -> -1 (all GPUs), else a comma list of ids
--- ("0" -> {0}, " 1 , 2 " -> {1, 2}, "" -> {}). Non-strings are returned as they are.
function M._normalize_parse_gpu_string_input(s)
  if type(s) ~= 'string' then return s end
  local t = trim(s)
  if t == '-1' then return -1 end
  local ids, bad = parse_int_list(t)
  if not ids then
    raise(Misconfiguration, "Invalid gpus string '%s': '%s' is not an integer GPU id "
          .. "(expected a comma-separated list of ids such as '0,1', or '-1' for all GPUs)", s, bad)
  end
  return ids
end

local MAX_GPU_LIST = 4096

--- A sequence is copied; 0 -> nil; -1 -> all GPUs; n > 0 -> {0, ..., n-1};
--- any other negative number -> {}.
function M._normalize_parse_gpu_input_to_list(gpus)
  if gpus == nil then return nil end
  if type(gpus) == 'table' then
    local copy = {}
    for i = 1, #gpus do copy[i] = gpus[i] end
    return copy
  end
  if not is_integer(gpus) then
    raise(Misconfiguration, '_normalize_parse_gpu_input_to_list: expected an integer or a sequence of GPU ids, got %s',
          describe(gpus))
  end
  if gpus == 0 then return nil end
  if gpus == -1 then return M.get_all_available_gpus() end
  if gpus < 0 then return {} end
  if gpus > MAX_GPU_LIST then -- do not build a list of a billion ids to reject it
    local n = cuda_count()
    raise(Misconfiguration, 'You requested %d GPUs but your machine only has %d GPUs.', gpus, n)
  end
  local ids = {}
  for i = 0, gpus - 1 do ids[#ids + 1] = i end
  return ids
end

--- Returns gpus unchanged when every id is an available, distinct GPU; raises
--- MisconfigurationException otherwise (fix: never swaps in other GPUs; fix:
--- duplicates are an error).
function M.sanitize_gpu_ids(gpus)
  if not is_sequence(gpus) then
    raise(Misconfiguration, 'sanitize_gpu_ids: expected a sequence of GPU ids, got %s', describe(gpus))
  end
  local all = M.get_all_available_gpus()
  local available = {}
  for _, id in ipairs(all) do available[id] = true end
  for i = 1, #gpus do
    if not available[gpus[i]] then
      local note = ''
      if #all == 0 then note = ' (' .. cuda_reason() .. ')' end
      raise(Misconfiguration, 'You requested GPUs: %s. But your machine only has: %s%s',
            fmt_list(gpus), fmt_list(all), note)
    end
  end
  local seen = {}
  for i = 1, #gpus do
    if seen[gpus[i]] then
      raise(Misconfiguration, "Device ID's (GPU) must be unique. Got %s (GPU %s appears more than once)",
            fmt_list(gpus), tostring(gpus[i]))
    end
    seen[gpus[i]] = true
  end
  return gpus
end

--- gpus (nil, a number, a string or a sequence) -> nil (no GPU) or the sequence
--- of GPU ids to use. See docs/devices.md for the grammar and examples.
function M._parse_gpu_ids(gpus)
  M._check_data_type(gpus)
  if gpus == nil or gpus == 0 then return nil end
  local ids = M._normalize_parse_gpu_input_to_list(M._normalize_parse_gpu_string_input(gpus))
  if ids == nil or #ids == 0 then
    local n = #M.get_all_available_gpus()
    local note = n == 0 and (' (' .. cuda_reason() .. ')') or (' (this process sees %d GPU%s)'):format(n, n == 1 and '' or 's')
    raise(Misconfiguration, 'GPUs requested but none are available. Got gpus = %s%s', repr(gpus), note)
  end
  return M.sanitize_gpu_ids(ids)
end
M.parse_gpu_ids = M._parse_gpu_ids

local TPU_MSG = 'tpu_cores can only be 1, 8 or [<1-8>]'

--- "1" -> 1, "8" -> 8, anything else a comma list of core indices ("1," -> {1}).
function M._parse_tpu_cores_str(tpu_cores)
  if type(tpu_cores) ~= 'string' then
    raise(TypeError, '_parse_tpu_cores_str: expected a string, got %s', describe(tpu_cores))
  end
  local s = trim(tpu_cores)
  if s == '1' or s == '8' then return tonumber(s) end
  local ids, bad = parse_int_list(s)
  if not ids then
    raise(Misconfiguration, "%s, got the string '%s' ('%s' is not an integer core index)", TPU_MSG, tpu_cores, bad)
  end
  return ids
end

--- nil, 1, 8 or a one-element sequence {k} with 1 <= k <= 8.
function M._tpu_cores_valid(tpu_cores)
  if tpu_cores == nil or tpu_cores == 1 or tpu_cores == 8 then return true end
  if is_sequence(tpu_cores) and #tpu_cores == 1 then
    local k = tpu_cores[1]
    return is_integer(k) and k >= 1 and k <= 8
  end
  return false
end

--- tpu_cores -> nil, 1, 8 or {k}; raises MisconfigurationException for anything
--- else. Does not look for TPUs (the Trainer does).
function M._parse_tpu_cores(tpu_cores)
  M._check_data_type(tpu_cores)
  local v = tpu_cores
  if type(v) == 'string' then v = M._parse_tpu_cores_str(v) end
  if not M._tpu_cores_valid(v) then
    raise(Misconfiguration, '%s, got %s', TPU_MSG, describe(tpu_cores))
  end
  return v
end
M.parse_tpu_cores = M._parse_tpu_cores

--- nil -> nil; a non-empty sequence of ids -> its first id (the root GPU).
function M.determine_root_gpu_device(gpus)
  if gpus == nil then return nil end
  if not is_sequence(gpus) then
    raise(TypeError, 'gpus should be a list, got %s', describe(gpus))
  end
  if #gpus == 0 then raise(ValueError, 'gpus should be a non empty list') end
  return gpus[1]
end

--- Lightning's argparse type for --gpus / --tpu_cores: "3" -> the number 3,
--- "0,1" or "3," -> the string (ids). Non-integer words stay strings.
function M._gpus_allowed_type(s)
  if type(s) ~= 'string' then return s end
  if s:find(',', 1, true) then return s end
  local t = trim(s)
  if t:match('^[+-]?%d+$') then return tonumber(t) end
  return s
end

-------------------------------------------------------------------- retries, picking

-- Overridable for tests: sleep(seconds) and random() in [0, 1).
M._sleep = function(seconds)
  local st = C.dpl_sleep(seconds)
  if st == DPL_EINTR then error('interrupted', 0) end
  if st ~= 0 then raise(RuntimeError, '%s', last_error()) end
end
M._random = math.random

local function pack(...) return { n = select('#', ...), ... } end

local function check_number(name, v, min_ok)
  if type(v) ~= 'number' or v ~= v or v < min_ok then
    raise(ValueError, 'retry_jittered_backoff: %s must be a number >= %s, got %s', name, tostring(min_ok), describe(v))
  end
end

--- Calls func(); when it raises, retries with "full jitter" exponential backoff:
--- before retry i (1-based) sleeps uniformly in [0, min(cap_delay, base_delay * 2^i)].
--- Returns func's results on the first success; after num_retries failed calls
--- re-raises the last error; num_retries = 0 never calls func and returns nil.
--- (fix: Lightning's version never slept.) opts.sleep / opts.random replace the
--- sleep and the uniform [0, 1) generator (tests observe the delays with them).
function M.retry_jittered_backoff(func, num_retries, cap_delay, base_delay, opts)
  local fmt = debug.getmetatable(func)
  if not (type(func) == 'function' or (fmt and fmt.__call ~= nil)) then
    raise(TypeError, 'retry_jittered_backoff: func must be callable, got %s', describe(func))
  end
  if num_retries == nil then num_retries = 5 end
  if cap_delay == nil then cap_delay = 1.0 end
  if base_delay == nil then base_delay = 0.01 end
  if not (is_integer(num_retries) and num_retries >= 0) then
    raise(ValueError, 'retry_jittered_backoff: num_retries must be an integer >= 0, got %s', describe(num_retries))
  end
  check_number('cap_delay', cap_delay, 0)
  check_number('base_delay', base_delay, 0)
  local sleep = opts and opts.sleep or M._sleep
  local random = opts and opts.random or M._random
  for i = 1, num_retries do
    local res = pack(pcall(func))
    if res[1] then return unpack(res, 2, res.n) end
    -- a SIGINT/SIGTERM is not a transient failure: stop at once
    if i == num_retries or C.dpl_signal_received() ~= 0 then error(res[2], 0) end
    local bound = base_delay * 2 ^ i
    if bound > cap_delay then bound = cap_delay end
    sleep(random() * bound)
  end
  return nil
end

-- Probes GPU i with a small allocation: true (usable), false and why (refused
-- for good), or raises RuntimeError for a transient failure (to be retried).
-- Overridable for tests.
function M._probe_gpu(i)
  local st = C.dpl_device_probe_alloc(DPL_DEVICE_CUDA, i)
  if st == 0 then return true end
  if st == DPL_ENOTIMPL then return true end -- real GPU, no CUDA plugin: cannot tell, assume free
  if st == DPL_EDEVICE then return false, last_error() end
  if st == DPL_ENOMEM then raise(RuntimeError, '%s', last_error()) end
  raise(RuntimeError, 'pick_single_gpu: probing cuda:%d failed: %s', i, last_error())
end

--- Returns the first GPU id, not in exclude_gpus, on which a small allocation
--- succeeds; transient failures are retried with retry_jittered_backoff. None
--- left -> RuntimeError: No GPUs available.
function M.pick_single_gpu(exclude_gpus)
  if exclude_gpus == nil then exclude_gpus = {} end
  if not is_sequence(exclude_gpus) then
    raise(TypeError, 'pick_single_gpu: exclude_gpus must be a sequence of GPU ids, got %s', describe(exclude_gpus))
  end
  local excluded = {}
  for i = 1, #exclude_gpus do excluded[exclude_gpus[i]] = true end
  local n = cuda_count()
  local refused = {}
  for i = 0, n - 1 do
    if not excluded[i] then
      local ok, usable, why = pcall(M.retry_jittered_backoff, function() return M._probe_gpu(i) end)
      if not ok then
        if usable == 'interrupted' or C.dpl_signal_received() ~= 0 then error(usable, 0) end
        why = tostring(usable)
        usable = false
      end
      if usable then return i end
      refused[#refused + 1] = tostring(why)
    end
  end
  local detail
  if n == 0 then detail = 'this process sees no GPU (' .. cuda_reason() .. ')'
  else
    detail = ('%d GPU%s; excluded: %s'):format(n, n == 1 and '' or 's', fmt_list(exclude_gpus))
    if #refused > 0 then detail = detail .. '; refused: ' .. concat(refused, '; ') end
  end
  raise(RuntimeError, 'No GPUs available. %s', detail)
end

--- Picks nb free GPUs (auto_select_gpus): -1 means all of them.
function M.pick_multiple_gpus(nb)
  if not is_integer(nb) then
    raise(Misconfiguration, 'pick_multiple_gpus: the number of GPUs must be an integer, got %s', describe(nb))
  end
  if nb == 0 then
    raise(Misconfiguration, 'auto_select_gpus=true, gpus=0 is not a valid configuration. '
          .. 'Please select a valid number of GPU resources when using auto_select_gpus.')
  end
  if nb < -1 then
    raise(Misconfiguration, 'pick_multiple_gpus: gpus must be -1 (all GPUs) or a positive number, got %d', nb)
  end
  local n = cuda_count()
  if nb == -1 then nb = n end
  if nb > n then
    raise(Misconfiguration, 'You requested %d GPUs but your machine only has %d GPUs.', nb, n)
  end
  local picked = {}
  for _ = 1, nb do picked[#picked + 1] = M.pick_single_gpu(picked) end
  return picked
end

-------------------------------------------------------------------- batch transfer

local function get_to(v)
  local ok, to = pcall(function() return v.to end)
  if not ok then return nil end
  if type(to) == 'function' then return to end
  local mt = (type(to) == 'table' or type(to) == 'userdata' or type(to) == 'cdata') and debug.getmetatable(to)
  if mt and mt.__call then return to end
  return nil
end

local function key_path(path)
  local out = { 'batch' }
  for i = 1, #path do
    local k = path[i]
    if type(k) == 'string' and k:match('^[%a_][%w_]*$') then out[#out + 1] = '.' .. k
    elseif type(k) == 'string' then out[#out + 1] = ('[%q]'):format(k)
    elseif type(k) == 'number' or type(k) == 'boolean' then out[#out + 1] = '[' .. tostring(k) .. ']'
    else out[#out + 1] = '[<' .. type(k) .. '>]' end
  end
  return concat(out)
end

local function transfer(v, device, memo, active, path)
  local tv = type(v)
  if tv ~= 'table' and tv ~= 'userdata' and tv ~= 'cdata' then return v end
  local to = get_to(v)
  if to then
    local done = memo[v]
    if done ~= nil then return done end
    local r = to(v, device)
    if r == nil then r = v end
    memo[v] = r
    return r
  end
  if tv ~= 'table' then return v end -- userdata/cdata without `to`: as it is
  local done = memo[v]
  if done ~= nil then return done end
  if active[v] then
    raise(ValueError, 'move_data_to_device: the batch contains a cycle: %s refers back to %s',
          key_path(path), key_path({ unpack(path, 1, active[v]) }))
  end
  active[v] = #path
  local out = {}
  for k, x in next, v do
    path[#path + 1] = k
    rawset(out, k, transfer(x, device, memo, active, path))
    path[#path] = nil
  end
  active[v] = nil
  local mt = debug.getmetatable(v)
  if mt then debug.setmetatable(out, mt) end
  memo[v] = out
  return out
end

--- Moves a batch to a device: objects with a callable `to` (tensors, modules)
--- become obj:to(device) (or stay when it returns nil); tables are copied (new
--- tables, same keys and metatables, values moved recursively; the input is not
--- mutated; a table reached twice is copied once); anything else is returned as
--- it is. device: a device object or a string for dpl.device.
function M.move_data_to_device(batch, device)
  if type(device) == 'string' then device = M.device(device)
  elseif not M.is_device(device) then
    raise(TypeError, "move_data_to_device: device must be a device or a device string such as 'cpu' or 'cuda:0', got %s",
          describe(device))
  end
  return transfer(batch, device, {}, {}, {})
end

return M
