-- host_tour.lua: a short tour of the dplhost runtime: the host, the C
-- API reached through the FFI, the device registry, errors as Lua errors, and
-- an atexit cleanup. The training demo (`make demo`) is examples/fashion_mnist.lua.
local ffi = require 'ffi'
local dpl = require 'dpl'
local C = dpl.C

print(('dplhost %s on %s'):format(dpl.version, jit.version))
print(('JIT: %s, GC64: %s'):format(jit.status() and 'on' or 'off', tostring(ffi.abi('gc64'))))

-- devices, straight from the C registry
local n = ffi.new('int32_t[1]')
dpl.check(C.dpl_device_count(C.DPL_DEVICE_CUDA, n))
local info = ffi.new('dpl_device_info')
dpl.check(C.dpl_device_get_info(C.DPL_DEVICE_CPU, 0, info))
print(('cpu: %s, %d cores, %.1f GiB'):format(ffi.string(info.name), info.cores,
  tonumber(info.total_memory) / 2^30))
if n[0] == 0 then
  print('cuda: ' .. ffi.string(C.dpl_cuda_unavailable_reason()))
end
for i = 0, n[0] - 1 do
  dpl.check(C.dpl_device_get_info(C.DPL_DEVICE_CUDA, i, info))
  print(('cuda:%d: %s%s'):format(i, ffi.string(info.name), info.simulated == 1 and ' (simulated)' or ''))
end

-- a C error becomes a Lua error with the C side's message
local ok, err = pcall(function() dpl.check(C.dpl_device_get_info(C.DPL_DEVICE_CUDA, 99, info)) end)
print('asking for cuda:99 -> ' .. tostring(err):gsub('^.-: ', '', 1))

-- timing from the host's monotonic clock
local t0 = C.dpl_clock()
local s = 0
for i = 1, 1e7 do s = s + i % 7 end
print(('a 10M-iteration Lua loop took %.1f ms (sum %d)'):format((C.dpl_clock() - t0) * 1e3, s))

dpl.atexit(function() print('atexit: cleanups run on exit, os.exit, errors and SIGINT/SIGTERM') end)
print('try: ./dplhost (REPL), ./dplhost --devices, DPL_VIRTUAL_GPUS=4 ./dplhost --devices')
