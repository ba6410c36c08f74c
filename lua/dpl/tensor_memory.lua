-- dpl.tensor_memory: dpl.tensor's memory functions: maybe_collect (a full GC when C-side tensor
-- bytes grew past gc_soft_limit), memory_stats / memory_allocated / memory_cached / empty_cache,
-- and the GC pacing knobs set_gc_threshold / set_gc_handles. dpl.tensor installs them
-- (require('dpl.tensor_memory')(M, helpers)); the pacing itself stays in dpl.tensor.
local ffi = require 'ffi'
local C = require('dpl.capi').C

return function(M, H)
  local check, parse_device, need_count = H.check, H.parse_device, H.need_count
  M.gc_soft_limit = tonumber(os.getenv('DPL_GC_SOFT_LIMIT') or '') or 512 * 1024 * 1024
  local last_gc_bytes = 0

  --- Runs a full GC when C-side tensor bytes grew by more than gc_soft_limit since
  --- the last collection (LuaJIT's GC cannot see them). Call at safe points (the
  --- Trainer does between steps). Returns true when it collected.
  function M.maybe_collect()
    local now = tonumber(C.dpl_mem_current_total())
    if now - last_gc_bytes > M.gc_soft_limit then
      collectgarbage()
      last_gc_bytes = tonumber(C.dpl_mem_current_total())
      return true
    end
    if now < last_gc_bytes then last_gc_bytes = now end
    return false
  end

  local stats = ffi.new('dpl_mem_stats_t')
  --- Byte counters of a device: {current_bytes, peak_bytes, total_bytes, live_storages, allocations}.
  function M.memory_stats(device)
    local dt, di = parse_device(device or 'cpu', 'memory_stats')
    check(C.dpl_mem_stats(dt, di, stats))
    return {
      current_bytes = tonumber(stats.current_bytes), peak_bytes = tonumber(stats.peak_bytes),
      total_bytes = tonumber(stats.total_bytes), live_storages = tonumber(stats.live_storages),
      allocations = tonumber(stats.allocations),
    }
  end
  function M.memory_allocated(device) return M.memory_stats(device).current_bytes end
  --- Bytes of freed large blocks kept for reuse; empty_cache() returns them to the system.
  function M.memory_cached() return tonumber(C.dpl_mem_cached()) end
  function M.empty_cache() return tonumber(C.dpl_mem_empty_cache()) end
  --- Tensor bytes allocated between two GC runs triggered by C-side pressure.
  function M.set_gc_threshold(bytes)
    need_count('set_gc_threshold', 'bytes', bytes)
    M.gc_bytes = bytes C.dpl_set_gc_threshold(bytes)
  end
  --- Tensor handles created between two GC runs (at least; more with a big Lua heap).
  function M.set_gc_handles(n)
    need_count('set_gc_handles', 'n', n)
    M.gc_handles = n C.dpl_set_gc_handle_threshold(n)
  end
end
