-- dpl.cuda: the GPU side of dplhost as PyTorch's torch.cuda names it:
-- is_available, device_count, synchronize, empty_cache, memory_stats and
-- friends, plus what the CUDA plugin (dpl_cuda.so) runs. Real GPUs go through
-- the plugin's caching allocator and streams; the simulated GPUs of
-- DPL_VIRTUAL_GPUS live in host memory, where synchronize and empty_cache have
-- nothing to do and memory_stats reports the tensor byte counters.
local ffi = require 'ffi'
local capi = require 'dpl.capi'
local errors = require 'dpl.errors'
local C = capi.C

local M = {}

local function fail(fmt, ...)
  error(errors.RuntimeError(fmt:format(...)), 3)
end

local function c_fail(level)
  error(errors.RuntimeError(capi.last_error()), (level or 2) + 1)
end

local count_buf = ffi.new('int32_t[1]')
--- Number of GPUs this process sees (real, or simulated with DPL_VIRTUAL_GPUS).
function M.device_count()
  if C.dpl_device_count(1, count_buf) ~= 0 then c_fail() end
  return count_buf[0]
end

local info = ffi.new('dpl_device_info')
local function simulated(k)
  return C.dpl_device_get_info(1, k, info) == 0 and info.simulated ~= 0
end

--- True when at least one GPU can hold tensors: a real one with the plugin
--- loaded, or a simulated one.
function M.is_available()
  if M.device_count() == 0 then return false end
  if simulated(0) then return true end
  return ffi.string(C.dpl_cuda_unavailable_reason()) == ''
end

--- True once CUDA was initialised in this process (torch.cuda.is_initialized): a
--- tensor on a real GPU, a device probe. Simulated GPUs never initialise it.
function M.is_initialized()
  return C.dpl_cuda_initialized() ~= 0
end

--- Why no GPU is usable ("" when one is).
function M.unavailable_reason()
  return ffi.string(C.dpl_cuda_unavailable_reason())
end

--- Path of the loaded plugin (nil when none). load=true tries to load it first.
function M.plugin_path(load)
  if load then C.dpl_cuda_load() end
  local p = ffi.string(C.dpl_cuda_plugin_path())
  return p ~= '' and p or nil
end

--- Loads the plugin now (it normally loads at the first device query when a GPU
--- is present); raises why it cannot. Touches no GPU.
function M.load()
  if C.dpl_cuda_load() ~= 0 then c_fail() end
  return M.plugin_path()
end

-- a device argument: nil (every device for synchronize/empty_cache, cuda:0 for
-- stats), an index, 'cuda:k', or a dpl.device
local function index_of(d, what, default)
  if d == nil then return default end
  if type(d) == 'number' and d >= 0 and d % 1 == 0 then return d end
  if type(d) == 'string' then
    if d == 'cuda' then return require('dpl.devices').current_cuda() end
    local k = d:match('^cuda:(%d+)$')
    if k then return tonumber(k) end
  elseif type(d) == 'table' and d.type == 'cuda' and type(d.index) == 'number' then
    return d.index
  end
  fail("%s: expected a GPU index, 'cuda:<k>' or a cuda dpl.device, got %s", what, tostring(d))
end

--- dpl.cuda.set_device(k | 'cuda:k' | device): the current GPU, what 'cuda' without an index
--- means (torch.cuda.set_device); the Trainer sets it to its root device on a GPU.
function M.set_device(d)
  require('dpl.devices').set_current_cuda(index_of(d, 'cuda.set_device'))
end
--- The index of the current GPU (0 until set).
function M.current_device() return require('dpl.devices').current_cuda() end

local function all_simulated()
  local n = M.device_count()
  return n > 0 and simulated(0)
end

--- Waits until every queued kernel and copy of the device (all devices when nil) finished.
function M.synchronize(device)
  local k = index_of(device, 'cuda.synchronize', -1)
  if all_simulated() then return end
  if C.dpl_cuda_synchronize(k) ~= 0 then c_fail() end
end

local freed = ffi.new('int64_t[1]')
--- Returns the allocator's cached free blocks to the driver; the bytes freed.
function M.empty_cache(device)
  local k = index_of(device, 'cuda.empty_cache', -1)
  if all_simulated() then return tonumber(C.dpl_mem_empty_cache()) end
  if C.dpl_cuda_empty_cache(k, freed) ~= 0 then c_fail() end
  return tonumber(freed[0])
end

local stats = ffi.new('dpl_cuda_mem_stats')
local hstats = ffi.new('dpl_mem_stats_t')
--- Allocator counters of a device (the current GPU when nil): allocated_bytes,
--- reserved_bytes, peak_allocated_bytes, peak_reserved_bytes, allocations,
--- cache_hits, device_mallocs, device_frees.
function M.memory_stats(device)
  local k = index_of(device, 'cuda.memory_stats', require('dpl.devices').current_cuda())
  if all_simulated() then
    if C.dpl_mem_stats(1, k, hstats) ~= 0 then c_fail() end
    return {
      allocated_bytes = tonumber(hstats.current_bytes), reserved_bytes = tonumber(hstats.current_bytes),
      peak_allocated_bytes = tonumber(hstats.peak_bytes), peak_reserved_bytes = tonumber(hstats.peak_bytes),
      allocations = tonumber(hstats.allocations), cache_hits = 0, device_mallocs = 0, device_frees = 0,
      simulated = true,
    }
  end
  if C.dpl_cuda_memory_stats(k, stats) ~= 0 then c_fail() end
  return {
    allocated_bytes = tonumber(stats.allocated_bytes), reserved_bytes = tonumber(stats.reserved_bytes),
    peak_allocated_bytes = tonumber(stats.peak_allocated_bytes), peak_reserved_bytes = tonumber(stats.peak_reserved_bytes),
    allocations = tonumber(stats.allocations), cache_hits = tonumber(stats.cache_hits),
    device_mallocs = tonumber(stats.device_mallocs), device_frees = tonumber(stats.device_frees),
  }
end

function M.memory_allocated(device) return M.memory_stats(device).allocated_bytes end
function M.max_memory_allocated(device) return M.memory_stats(device).peak_allocated_bytes end
function M.memory_reserved(device) return M.memory_stats(device).reserved_bytes end

--- Backend op names the loaded plugin runs on the GPU, and those it does not
--- (they raise "<op>: not implemented on cuda"). Empty lists without a plugin.
function M.supported_ops()
  local yes, no = {}, {}
  local i = 0
  while true do
    local name = ffi.string(C.dpl_cuda_op_name(i))
    if name == '' then break end
    if C.dpl_cuda_supports(i) ~= 0 then yes[#yes + 1] = name else no[#no + 1] = name end
    i = i + 1
  end
  if M.plugin_path() == nil then return {}, {} end
  return yes, no
end

return M
