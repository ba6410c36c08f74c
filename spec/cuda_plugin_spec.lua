-- cuda_plugin_spec.lua: the CUDA plugin as seen without a GPU (CI, this
-- machine): dpl_cuda.so loads or says why, using a GPU that is not there fails
-- with the reason instead of crashing, `--devices` says "no CUDA driver" /
-- "no GPU", dpl.cuda works on simulated GPUs, and device tensors an op cannot
-- run raise "<op>: not implemented on cuda". Each case runs in its own dplhost
-- process (the device registry and the plugin load once per process).
local h = require 'spec.support.helpers'
local run = require 'spec.support.devices_run'

local plugin = h.root .. '/dpl_cuda.so'
local function plugin_built()
  local f = io.open(plugin, 'rb')
  if f then f:close() end
  return f ~= nil
end

-- marks a CPU tensor's view as device memory: only safe where no backend is loaded
local fake_devmem = [[
local bit = require 'bit'
local function devmem(t) local v = t:view(t:size()) v._flags = bit.bor(v._flags, 2) return v end
local function undo(v) v._flags = bit.band(v._flags, bit.bnot(2)) end
local function try(f) local v = {} local ok, e = pcall(f, v) for _, t in ipairs(v) do undo(t) end if ok then return 'no error' end error(e, 0) end
]]
local no_plugin = "dpl.C.dpl_proc_setenv('DPL_CUDA_PLUGIN', 'off')\n" .. fake_devmem

describe('the CUDA plugin without a GPU', function()
  it('is built beside dplhost when nvcc is found, and loads without touching a GPU', function()
    if not plugin_built() then
      pending('dpl_cuda.so not built (no nvcc, or NO_CUDA=1)')
      return
    end
    run.check(nil, {
      { 'dpl.cuda.load()', ('ok %q'):format(plugin) },
      { 'dpl.cuda.plugin_path()', ('ok %q'):format(plugin) },
      { '#(dpl.cuda.supported_ops()) > 10', 'ok true' },
      -- a GPU call fails with the CUDA call, the device and the driver's reason
      { 'dpl.cuda.synchronize(0)', 'err cudaSetDevice on cuda:0: ' },
      { 'dpl.cuda.memory_stats(0).allocated_bytes', 'ok 0' },
    })
  end)

  it('says why the plugin is not there', function()
    run.check(nil, {
      { 'dpl.cuda.load()', 'err cannot load the CUDA plugin: /nonexistent/dpl_cuda.so: not found' },
      { 'dpl.cuda.plugin_path()', 'ok nil' },
    }, { setup = "dpl.C.dpl_proc_setenv('DPL_CUDA_PLUGIN', '/nonexistent/dpl_cuda.so')" })
    run.check(nil, {
      { 'dpl.cuda.load()', 'err switched off (DPL_CUDA_PLUGIN=off)' },
      { 'dpl.cuda.memory_stats()', 'err cuda.memory_stats: the CUDA plugin is not loaded' },
      { 'dpl.cuda.synchronize()', 'err cuda.synchronize: the CUDA plugin is not loaded' },
    }, { setup = "dpl.C.dpl_proc_setenv('DPL_CUDA_PLUGIN', 'off')" })
  end)

  it('reports no GPU: is_available, device_count, tensors on cuda:0', function()
    run.check(nil, {
      { 'dpl.cuda.is_available()', 'ok false' },
      { 'dpl.cuda.device_count()', 'ok 0' },
      { 'dpl.zeros(2):to("cuda:0")', 'err to: cannot allocate on cuda:0: no CUDA device (' },
      { 'dpl.zeros(2, {device = "cuda"})', 'err cannot allocate on cuda:0: no CUDA device' },
      { 'dpl.zeros(2):cuda()', 'err no CUDA device' },
    })
  end)

  it("dist backend 'nccl' says why it is unavailable; NCCL ids come from the plugin", function()
    run.check(nil, {
      { 'dpl.dist.init_process_group{backend = "nccl"}', "err init_process_group: backend='nccl' is not available: no " },
      { 'ffi.string(dpl.C.dpl_nccl_unavailable_reason()) ~= ""', 'ok true' },
    }, { setup = "ffi = require 'ffi'" })
    run.check(2, {
      { 'dpl.dist.init_process_group{backend = "nccl"}', 'err the simulated GPUs of DPL_VIRTUAL_GPUS have no NCCL' },
    })
    if plugin_built() then -- ncclGetUniqueId needs no GPU
      run.check(nil, {
        { '(function() local id = ffi.new("uint8_t[128]") dpl.cuda.load() local st = dpl.C.dpl_nccl_unique_id(id, 128) '
          .. 'if st ~= 0 then return ffi.string(dpl.C.dpl_last_error()):find("NCCL not found", 1, true) ~= nil end local nz = 0 '
          .. 'for i = 0, 127 do if id[i] ~= 0 then nz = nz + 1 end end return nz > 0 end)()', 'ok true' },
        { '(function() dpl.cuda.load() local o = ffi.new("dpl_nccl*[1]") local id = ffi.new("uint8_t[128]") '
          .. 'assert(dpl.C.dpl_nccl_init(id, 128, 1, 0, 0, o) ~= 0) local m = ffi.string(dpl.C.dpl_last_error()) '
          .. 'return m:find("cudaSetDevice on cuda:0: ", 1, true) ~= nil or m:find("NCCL not found", 1, true) ~= nil end)()',
          'ok true' },
      }, { setup = "ffi = require 'ffi'" })
    end
  end)

  it('--devices says there is no driver or no GPU', function()
    local out, err, rc = h.sh("DPL_VIRTUAL_GPUS= CUDA_VISIBLE_DEVICES='' " .. h.q(h.bin) .. ' --devices')
    assert.are.equal(0, rc, err)
    local line = out:match('\ncuda%s+([^\n]*)')
    assert.truthy(line, out)
    assert.truthy(line:find('no CUDA driver', 1, true) or line:find('no GPU', 1, true), line)
  end)

  it('dpl.cuda works on simulated GPUs (host memory)', function()
    run.check(2, {
      { 'dpl.cuda.is_available()', 'ok true' },
      { 'dpl.cuda.device_count()', 'ok 2' },
      { 'dpl.cuda.synchronize()', 'ok nil' },
      { 'dpl.cuda.synchronize("cuda:1")', 'ok nil' },
      { 'type(dpl.cuda.empty_cache())', 'ok "number"' },
      { '(function() local t = dpl.ones(1000, {device = "cuda:1"}) return dpl.cuda.memory_stats(1).allocated_bytes >= 4000 end)()', 'ok true' },
      { 'dpl.cuda.memory_stats("cuda:1").simulated', 'ok true' },
      { 'dpl.cuda.memory_stats("gpu")', "err cuda.memory_stats: expected a GPU index, 'cuda:<k>' or a cuda dpl.device, got gpu" },
    })
  end)

  it('device tensors fail with "<op>: not implemented on cuda", never a crash', function()
    run.check(nil, {
      { 'try(function(v) local x = devmem(dpl.randn(1, 2, 5, 5)) v[1] = x return dpl.tensor.conv2d(x, dpl.randn(3, 2, 3, 3)) end)',
        'err conv2d: not implemented on cuda (the CUDA plugin is not loaded)' },
      { 'try(function(v) local x = devmem(dpl.randn(4, 3)) v[1] = x return x:index_select(1, dpl.tensor({1, 2})) end)',
        'err index_select: not implemented on cuda (the CUDA plugin is not loaded)' },
      { 'try(function(v) local x = devmem(dpl.randn(4, 3)) v[1] = x return x:masked_select(x:gt(0)) end)',
        'err not implemented on cuda (' },
      { 'try(function(v) local x = devmem(dpl.randn(4, 3)) v[1] = x return x:gather(1, dpl.tensor({{1, 2, 1}})) end)',
        'err gather: not implemented on cuda' },
      { 'try(function(v) local x = devmem(dpl.randn(4, 3)) v[1] = x return x:nonzero() end)',
        'err nonzero: not implemented on cuda' },
      { 'try(function(v) local x = devmem(dpl.randn(4, 3)) v[1] = x return x:add_(1) end)',
        'err add: not implemented on cuda (the CUDA plugin is not loaded)' },
      { 'try(function(v) local x = devmem(dpl.randn(4, 3)) v[1] = x return x:exp_() end)',
        'err exp: not implemented on cuda (the CUDA plugin is not loaded)' },
      { 'try(function(v) local x = devmem(dpl.randn(4, 3)) v[1] = x return x:fill_(2) end)',
        'err fill_: not implemented on cuda (the CUDA plugin is not loaded)' },
      { 'try(function(v) local x = devmem(dpl.randn(4, 3)) v[1] = x return x:sum() end)',
        'err sum: not implemented on cuda (the CUDA plugin is not loaded)' },
      { 'try(function(v) local x = devmem(dpl.randn(4, 3)) v[1] = x return x:select(1, 2):select(1, 1):item() end)',
        'err not implemented on cuda (the CUDA plugin is not loaded)' },
      { 'try(function(v) local x = devmem(dpl.randn(4, 3)) v[1] = x return x:t():contiguous() end)',
        'err contiguous: not implemented on cuda (the CUDA plugin is not loaded)' },
      { 'try(function(v) local x = devmem(dpl.randn(4, 3)) v[1] = x return x:view(12):narrow(1, 2, 3):size(1) end)',
        'ok "no error"' },
    }, { setup = no_plugin })
  end)
end)
