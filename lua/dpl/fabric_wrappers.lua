-- dpl.fabric_wrappers: the objects dpl.Fabric's setup methods return, as Lightning 1.9's
-- _FabricModule, _FabricOptimizer and _FabricDataLoader. FabricModule: calling it runs the
-- module (under the precision's autocast, outputs back to float32; float64 inputs with
-- precision 64) and, with several ranks, marks it for the gradient all-reduce of the next
-- fabric:backward; any other field or method is the module's. FabricOptimizer: step
-- (through the GradScaler with precision 16) and zero_grad; the rest is the optimizer's.
-- FabricDataLoader: iter() sets the distributed sampler's epoch and moves batches to the device.
local M = {}

local amp -- dpl.amp, loaded when a precision needs it
local autograd -- dpl.autograd, loaded when a module with buffers is set up on several ranks

local function is_tensor(x)
  return type(x) == 'cdata' and require('dpl.tensor').is_tensor(x)
end

-- Method lookups on a wrapper that fall through to the wrapped object: a method called on
-- the wrapper runs on the wrapped object (cached per wrapper and name).
local function forwarding_index(methods, inner_key)
  return function(w, k)
    local m = methods[k]
    if m ~= nil then return m end
    local inner = rawget(w, inner_key)
    local v = inner[k]
    if type(v) ~= 'function' then return v end
    local cache = rawget(w, '_bound')
    local c = cache[k]
    if c and c[1] == v then return c[2] end
    local f = function(self, ...)
      if self == w then return v(inner, ...) end
      return v(self, ...)
    end
    cache[k] = { v, f }
    return f
  end
end

---------------------------------------------------------------- FabricModule

local FabricModule = { __name = 'FabricModule' }
local fm_methods = {}
M.FabricModule = FabricModule

local LOW = { bfloat16 = true, float16 = true }

-- a floating tensor of the autocast dtype (or float64 with precision 64) back to float32
-- (Lightning's _convert_fp_tensor to the default dtype), through plain tables
local function out_fp32(x, depth)
  if type(x) == 'cdata' then
    if is_tensor(x) and (LOW[x.dtype] or x.dtype == 'float64') then return x:to('float32') end
    return x
  end
  if type(x) == 'table' and getmetatable(x) == nil and (depth or 0) < 16 then
    local out = {}
    for k, v in pairs(x) do out[k] = out_fp32(v, (depth or 0) + 1) end
    return out
  end
  return x
end

-- precision 64: floating inputs as float64 (Lightning's DoublePrecision.convert_input)
local function in_fp64(x, depth)
  if type(x) == 'cdata' then
    if is_tensor(x) and x:is_floating_point() and x.dtype ~= 'float64' then return x:to('float64') end
    return x
  end
  if type(x) == 'table' and getmetatable(x) == nil and (depth or 0) < 16 then
    local out = {}
    for k, v in pairs(x) do out[k] = in_fp64(v, (depth or 0) + 1) end
    return out
  end
  return x
end

local function all_fp32(...)
  local n = select('#', ...)
  if n == 1 then return (out_fp32((...))) end
  local t = { ... }
  for i = 1, n do t[i] = out_fp32(t[i]) end
  return unpack(t, 1, n)
end

local function all_fp64(...)
  local n = select('#', ...)
  if n == 1 then return (in_fp64((...))) end
  local t = { ... }
  for i = 1, n do t[i] = in_fp64(t[i]) end
  return unpack(t, 1, n)
end

-- the path with work to do: several ranks (mark for the all-reduce, buffers from rank 0)
-- or a precision that changes dtypes
local function forward_slow(w, ...)
  local f = w._fabric
  if f._multi then
    f._pending[w] = true
    if w._has_buffers then
      -- PyTorch DDP's broadcast_buffers: rank 0's buffers before a forward that follows a
      -- training forward (one with gradients on and the gradient sync not skipped)
      if w._sync_next then f:_sync_module_buffers(w) end
      w._sync_next = autograd.is_grad_enabled() and w._no_sync == 0
    end
  end
  local mode = w._mode
  if mode == 'float64' then return all_fp32(w._forward_module(all_fp64(...))) end
  if mode ~= nil then return all_fp32(amp.autocast(mode, w._forward_module, ...)) end
  return w._forward_module(...)
end

local function forward(w, ...)
  if w._plain then return w._forward_module(...) end
  return forward_slow(w, ...)
end
fm_methods.forward = forward
FabricModule.__call = forward
FabricModule.__index = forwarding_index(fm_methods, '_original_module')
-- fields set on the wrapper go to the module (the wrapper's own are set at creation)
FabricModule.__newindex = function(w, k, v) rawget(w, '_original_module')[k] = v end
FabricModule.__tostring = function(w) return 'FabricModule(' .. tostring(rawget(w, '_original_module')) .. ')' end

function fm_methods.state_dict(w, ...) return w._original_module:state_dict(...) end
function fm_methods.load_state_dict(w, ...) return w._original_module:load_state_dict(...) end

--- M.module(fabric, module, mode): mode nil, 'bfloat16', 'float16' or 'float64'.
function M.module(fabric, module, mode)
  if mode == 'bfloat16' or mode == 'float16' then amp = amp or require 'dpl.amp' end
  local w = {
    _forward_module = module, _original_module = module, module = module, _fabric = fabric,
    _mode = mode, _plain = false, _has_buffers = false, _sync_next = false, _no_sync = 0,
    _plan = nil, _bound = {}, _is_fabric_module = true,
  }
  setmetatable(w, FabricModule)
  M.refresh_module(w)
  return w
end

--- Recomputes whether a module's forward can take the plain path (one rank, precision 32).
function M.refresh_module(w)
  local f = rawget(w, '_fabric')
  rawset(w, '_plain', not f._multi and rawget(w, '_mode') == nil)
  if f._multi and rawget(w, '_has_buffers') then autograd = autograd or require 'dpl.autograd' end
end

function M.is_module(x) return type(x) == 'table' and rawget(x, '_is_fabric_module') == true end

---------------------------------------------------------------- FabricOptimizer

local FabricOptimizer = { __name = 'FabricOptimizer' }
local fo_methods = {}
M.FabricOptimizer = FabricOptimizer
FabricOptimizer.__index = forwarding_index(fo_methods, 'optimizer')
FabricOptimizer.__newindex = function(w, k, v) rawget(w, 'optimizer')[k] = v end
FabricOptimizer.__tostring = function(w) return 'FabricOptimizer(' .. tostring(rawget(w, 'optimizer')) .. ')' end

--- step([closure]): the optimizer's step; with precision 16 the GradScaler's (skipped when
--- the gradients hold inf/NaN) and then its update.
function fo_methods.step(w, closure)
  local scaler = w._scaler
  if scaler == nil then return w.optimizer:step(closure) end
  if closure ~= nil then
    require('dpl.errors').RuntimeError:raise('Closure use is not currently supported if GradScaler is enabled.', 2)
  end
  local r = scaler:step(w.optimizer)
  scaler:update()
  return r
end

function fo_methods.zero_grad(w, opts) return w.optimizer:zero_grad(opts) end
function fo_methods.state_dict(w) return w.optimizer:state_dict() end
function fo_methods.load_state_dict(w, sd) return w.optimizer:load_state_dict(sd) end

function M.optimizer(fabric, opt)
  return setmetatable({ optimizer = opt, _fabric = fabric, _scaler = fabric._scaler, _bound = {},
    _is_fabric_optimizer = true }, FabricOptimizer)
end

function M.is_optimizer(x) return type(x) == 'table' and rawget(x, '_is_fabric_optimizer') == true end

---------------------------------------------------------------- FabricDataLoader

local fdl_methods = {}

--- iter(): one pass. A distributed sampler gets set_epoch(number of passes so far) first
--- (Lightning does the user's set_epoch); batches go to the device when it is not the CPU.
function fdl_methods.iter(self)
  local impl = getmetatable(self).__impl
  local l = impl._dataloader
  local s = l.sampler
  if type(s) == 'table' and s.num_replicas ~= nil and type(s.set_epoch) == 'function' then
    s:set_epoch(impl._num_iter_calls)
  end
  impl._num_iter_calls = impl._num_iter_calls + 1
  local it = l:iter()
  local dev = impl._move_to
  if dev == nil then return it end
  local move = require('dpl.devices').move_data_to_device
  return function()
    local b = it()
    if b == nil then return nil end
    return move(b, dev)
  end
end

--- M.dataloader(loader, device, move): a userdata proxy (so that #loader works).
function M.dataloader(loader, device, move)
  local impl = { _dataloader = loader, device = device, _num_iter_calls = 0, _is_fabric_dataloader = true,
    _move_to = (move and device and device.type ~= 'cpu') and device or nil }
  local proxy = newproxy(true)
  local mt = getmetatable(proxy)
  mt.__impl = impl
  mt.__index = function(_, k)
    local m = fdl_methods[k]
    if m ~= nil then return m end
    local v = impl[k]
    if v ~= nil then return v end
    return loader[k]
  end
  mt.__newindex = function(_, k, v) impl[k] = v end
  mt.__len = function() return #loader end
  mt.__tostring = function() return 'FabricDataLoader(' .. tostring(loader) .. ')' end
  return proxy
end

function M.is_dataloader(x)
  if type(x) ~= 'userdata' then return false end
  local mt = getmetatable(x)
  return type(mt) == 'table' and type(mt.__impl) == 'table' and mt.__impl._is_fabric_dataloader == true
end

return M
