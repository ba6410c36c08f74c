-- cuda_ops_spec.lua: op consistency on a real GPU: every case of
-- spec/support/cuda_check.lua (each op the CUDA plugin runs, on fresh random
-- inputs) gives the CPU's result on cuda:0 within the dtype's tolerance, with
-- every GPU allocation poisoned (0xff bytes) first. Skips without a real GPU;
-- scripts/gpu-check.sh runs it on the GPU machine.
local dpl = require 'dpl'
local K = require 'spec.support.cuda_check'

local ready, why = K.gpu_ready()

describe('CUDA op consistency (cuda:0 against the CPU)', function()
  if not ready then
    it('needs a real GPU', function() pending(why) end)
    return
  end
  -- poison every allocation from here on (read by the plugin at its first allocation)
  dpl.C.dpl_proc_setenv('DPL_CUDA_POISON', '1')
  for i, c in ipairs(K.cases) do
    it(c.name, function()
      local ok, detail = K.run_case(c, 'cuda:0', 1000 + i)
      assert.is_true(ok, c.name .. ': ' .. tostring(detail))
    end)
  end
  it('integer matmul and uint8/bool index_add_ run on cuda with the CPU\'s wraparound', function()
    local x = dpl.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = 'int64' }):cuda()
    assert.are.same({ { 7, 10 }, { 15, 22 } }, x:matmul(x):totable())
    local u = dpl.tensor({ { 16, 16 } }, { dtype = 'uint8' }):cuda()
    assert.are.same({ { 0 } }, u:matmul(u:t()):totable()) -- 512 wraps to 0
    local a = dpl.zeros(3, { dtype = 'uint8' }):cuda()
    a:index_add_(1, dpl.tensor({ 1, 1, 2 }):cuda(), dpl.tensor({ 200, 100, 7 }, { dtype = 'uint8' }):cuda())
    assert.are.same({ 44, 7, 0 }, a:totable())
    local b = dpl.zeros(3, { dtype = 'bool' }):cuda()
    b:index_add_(1, dpl.tensor({ 1, 1, 3 }):cuda(), dpl.tensor({ true, true, false }, { dtype = 'bool' }):cuda())
    assert.are.same({ true, false, false }, b:totable())
  end)
  it('allocator: cached blocks are reused, empty_cache returns them', function()
    dpl.cuda.synchronize()
    local before = dpl.cuda.memory_stats(0)
    for _ = 1, 20 do local t = dpl.empty(1024, 1024, { device = 'cuda:0' }) t:free() end
    local after = dpl.cuda.memory_stats(0)
    assert.is_true(after.cache_hits - before.cache_hits >= 19, 'cache hits')
    assert.is_true(after.device_mallocs - before.device_mallocs <= 1, 'cudaMalloc calls')
    assert.is_true(dpl.cuda.empty_cache() > 0)
    assert.are.equal(0, dpl.cuda.memory_stats(0).reserved_bytes - dpl.cuda.memory_stats(0).allocated_bytes)
  end)
end)
