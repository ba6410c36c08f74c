-- dist_gpu_worker.lua MODE: one rank of spec/dist_gpu_spec.lua, on the simulated
-- GPUs of DPL_VIRTUAL_GPUS, which dpl.dist is told to treat as GPU memory
-- (dist._devmem). MODE 'stage': the shm backend stages every GPU tensor through
-- host memory. MODE 'nccl': the world group gets a fake NCCL communicator whose
-- calls run the host collectives on the tensors' bytes (the simulated GPUs' memory
-- is host memory), so the nccl paths of dpl.dist (flat tensors, blocks, views,
-- subgroups, the mean without ncclAvg) run without NCCL. Prints DIST-GPU-OK.
local ffi = require 'ffi'
local dpl = require 'dpl'
local dist = dpl.dist
local C = require('dpl.capi').C
local mode = arg[1] or 'stage'

dist.init_process_group {}
local r, n = dist.get_rank(), dist.get_world_size()
local G = 'cuda:0'
dist._devmem = function(tt) return tt._devtype ~= 0 end

local calls = {}
if mode == 'nccl' then
  local comms, nextid = {}, 100
  local function key(c) return tonumber(ffi.cast('uintptr_t', c)) end
  local function comm(c)
    local cm = comms[key(c)]
    assert(cm, 'fake nccl: an unknown communicator')
    return cm
  end
  local function gpu(t, what)
    assert(t ~= nil and t._devtype ~= 0, 'fake nccl: ' .. what .. ' is not a GPU tensor')
    assert(bit.band(t._flags, 1) ~= 0, 'fake nccl: ' .. what .. ' is not contiguous')
    return t
  end
  local version = tonumber(os.getenv('FAKE_NCCL_VERSION') or '22800')
  local function op_ok(op) assert(op ~= 1 or version >= 21000, 'fake nccl: ncclAvg before 2.10') return op end
  local function count(name) calls[name] = (calls[name] or 0) + 1 end
  local fake = {
    dpl_nccl_version = function() return version end,
    dpl_nccl_destroy = function(c) comms[key(c)] = nil end,
    dpl_nccl_unique_id = function(id) ffi.fill(id, 128, 7) return 0 end,
    dpl_nccl_init = function(_, _, _, _, _, out)
      nextid = nextid + 1
      out[0] = ffi.cast('dpl_nccl *', nextid)
      comms[nextid] = false -- bound by the worker after new_group
      return 0
    end,
    dpl_nccl_split = function() return -4 end, -- as a libnccl without ncclCommSplit
    dpl_nccl_all_reduce = function(c, t, op)
      count('all_reduce')
      gpu(t, 'tensor')
      return C.dpl_comm_all_reduce(comm(c), t._data, t._numel, t._dtype, op_ok(op))
    end,
    dpl_nccl_reduce = function(c, t, op, root)
      count('reduce')
      return C.dpl_comm_reduce(comm(c), gpu(t, 'tensor')._data, t._numel, t._dtype, op_ok(op), root)
    end,
    dpl_nccl_broadcast = function(c, t, root)
      count('broadcast')
      return C.dpl_comm_broadcast(comm(c), gpu(t, 'tensor')._data, t._numel, t._dtype, root)
    end,
    dpl_nccl_all_gather = function(c, s, rv)
      count('all_gather')
      gpu(s, 'send'); gpu(rv, 'recv')
      assert(rv._numel == s._numel * n)
      return C.dpl_comm_all_gather(comm(c), s._data, rv._data, s._numel, s._dtype)
    end,
    dpl_nccl_reduce_scatter = function(c, s, rv, op)
      count('reduce_scatter')
      gpu(s, 'send'); gpu(rv, 'recv')
      assert(s._numel == rv._numel * n)
      return C.dpl_comm_reduce_scatter(comm(c), s._data, rv._data, rv._numel, rv._dtype, op_ok(op))
    end,
    dpl_nccl_gather = function(c, s, rv, root)
      count('gather')
      gpu(s, 'send')
      if rv ~= nil then gpu(rv, 'recv') assert(rv._numel == s._numel * n) end
      return C.dpl_comm_gather(comm(c), s._data, rv ~= nil and rv._data or nil, s._numel, s._dtype, root)
    end,
    dpl_nccl_scatter = function(c, s, rv, root)
      count('scatter')
      gpu(rv, 'recv')
      if s ~= nil then gpu(s, 'send') assert(s._numel == rv._numel * n) end
      return C.dpl_comm_scatter(comm(c), s ~= nil and s._data or nil, rv._data, rv._numel, rv._dtype, root)
    end,
    dpl_nccl_all_to_all = function(c, s, rv)
      count('all_to_all')
      gpu(s, 'send'); gpu(rv, 'recv')
      local cm, b = comm(c), tonumber(s._numel) / n
      local es = tonumber(C.dpl_dtype_size(s._dtype))
      for k = 0, n - 1 do
        local st = C.dpl_comm_scatter(cm, k == r and s._data or nil, ffi.cast('uint8_t *', rv._data) + k * b * es, b,
          s._dtype, k)
        if st ~= 0 then return st end
      end
      return 0
    end,
  }
  dist._set_nccl_api(fake)
  local w = dist._group()
  nextid = nextid + 1
  w.nccl, w.nccl_device, w.backend = ffi.cast('dpl_nccl *', nextid), 0, 'nccl'
  comms[nextid] = w.comm
  function calls.bind(g) comms[key(g.nccl)] = g.comm end
end

local checks = 0
local function same(t, want, what)
  checks = checks + 1
  local got = t:to('cpu'):to('float64')
  local ok = got:sub(want:to('float64')):abs():max():item() < 1e-6
  if not ok then error(('rank %d: %s: got %s, want %s'):format(r, what, tostring(got), tostring(want)), 2) end
  assert(tostring(t.device) == G, what .. ': result on ' .. tostring(t.device))
end
local function full(v) return dpl.full({ 2, 3 }, v, { device = G, dtype = 'float32' }) end
local function host(v) return dpl.full({ 2, 3 }, v, { dtype = 'float32' }) end

-- all_reduce, reduce, broadcast
local t = full(r + 1); dist.all_reduce(t); same(t, host(3), 'all_reduce sum')
t = full(r + 1); dist.all_reduce(t, 'mean'); same(t, host(1.5), 'all_reduce mean')
t = full(r + 1); dist.reduce(t, 1); same(t, host(r == 1 and 3 or 1), 'reduce to 1')
t = full(r + 1); dist.broadcast(t, 1); same(t, host(2), 'broadcast from 1')
-- all_gather: new tensors, a list (GPU and host entries), a flat receive tensor
local l = dist.all_gather(full(r + 1))
assert(#l == 2); same(l[1], host(1), 'all_gather[1]'); same(l[2], host(2), 'all_gather[2]')
l = { full(0), dpl.zeros({ 2, 3 }, { dtype = 'float32' }) }
dist.all_gather(l, full(r + 1))
same(l[1], host(1), 'all_gather list[1]')
assert(l[2]:eq(2):all():item() and tostring(l[2].device) == 'cpu', 'all_gather list[2] (host)')
local flat = dpl.zeros({ 12 }, { device = G, dtype = 'float32' })
dist.all_gather(flat, full(r + 1))
same(flat, dpl.tensor({ 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2 }), 'all_gather flat')
-- gather to rank 1
l = dist.gather(full(r + 5), nil, 1)
if r == 1 then same(l[1], host(5), 'gather[1]'); same(l[2], host(6), 'gather[2]') else assert(l == nil) end
-- scatter from rank 0
t = full(0)
dist.scatter(t, r == 0 and { full(10), full(20) } or nil, 0)
same(t, host(10 * (r + 1)), 'scatter')
-- reduce_scatter: input_list[k+1] = 10 r + k + 1 -> output on rank k: 10 + 2 (k + 1)
t = full(0)
dist.reduce_scatter(t, { full(10 * r + 1), full(10 * r + 2) })
same(t, host(10 + 2 * (r + 1)), 'reduce_scatter list')
t = full(0)
dist.reduce_scatter(t, dpl.cat({ full(10 * r + 1), full(10 * r + 2) }):contiguous(), 'max')
same(t, host(10 + r + 1), 'reduce_scatter flat max')
t = full(0)
dist.reduce_scatter(t, { full(10 * r + 1), full(10 * r + 2) }, 'mean')
same(t, host(5 + r + 1), 'reduce_scatter mean')
-- all_to_all: block k of rank j's input (100 j + k) lands in block j of rank k's output
local inp = dpl.tensor({ 100 * r, 100 * r, 100 * r + 1, 100 * r + 1 }, { device = G })
local out = dpl.zeros({ 4 }, { device = G, dtype = inp.dtype })
dist.all_to_all_single(out, inp)
same(out, dpl.tensor({ r, r, 100 + r, 100 + r }), 'all_to_all_single')
local outs = { full(0), full(0) }
dist.all_to_all(outs, { full(100 * r), full(100 * r + 1) })
same(outs[1], host(r), 'all_to_all[1]'); same(outs[2], host(100 + r), 'all_to_all[2]')
-- subgroups: their own communicator with nccl
local sub = dist.new_group({ 0, 1 })
local solo = dist.new_group({ 1 })
if mode == 'nccl' then
  calls.bind(dist._group(sub))
  if r == 1 then calls.bind(dist._group(solo)) end
end
t = full(r + 1); dist.all_reduce(t, { group = sub }); same(t, host(3), 'subgroup all_reduce')
if r == 1 then
  t = full(7); dist.all_reduce(t, { group = solo }); same(t, host(7), 'one-rank subgroup all_reduce')
  assert(mode ~= 'nccl' or dist._group(solo).nccl ~= nil, 'the subgroup has no NCCL communicator')
end
dist.destroy_process_group(solo)
-- DDP's gradient sync with GPU gradients (the flat-bucket path, a mean)
local S = require('dpl.strategies.ddp').DDPStrategy
local s = setmetatable({ world_size = n, _ddp_kwargs = {} }, { __index = S })
local params = { full(0):requires_grad_(), dpl.zeros({ 5 }, { device = G, dtype = 'float32' }):requires_grad_() }
params[1].grad = full(r + 1)
params[2].grad = dpl.full({ 5 }, 2 * r, { device = G, dtype = 'float32' })
s:_sync_gradients({ parameters = function() return params end })
same(params[1].grad, host(1.5), 'ddp sync grad 1')
same(params[2].grad, dpl.full({ 5 }, 1), 'ddp sync grad 2')
dist.barrier()
if mode == 'nccl' then
  for _, k in ipairs({ 'all_reduce', 'reduce', 'broadcast', 'all_gather', 'gather', 'scatter', 'reduce_scatter',
      'all_to_all' }) do
    assert((calls[k] or 0) > 0, 'the nccl path of ' .. k .. ' was not taken')
  end
end
dist.destroy_process_group()
print(('DIST-GPU-OK rank %d checks %d'):format(r, checks))
