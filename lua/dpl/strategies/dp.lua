-- dpl.strategies.dp: DataParallel in one process over several GPUs (real, or
-- simulated with DPL_VIRTUAL_GPUS). Each step: the batch (already on the root
-- device) is scattered along dim 1 over the devices, the module is replicated
-- (parameters copied with autograd-tracked :to(device), so gradients flow back to
-- the root parameters), the replicas run the step one after another, and their
-- outputs are gathered on the root device (0-d tensors become a vector of one
-- value per device). `*_step_end` reduces: the module's hook when it defines one,
-- else the mean of every tensor (Lightning's DataParallelStrategy.reduce).
local S = require 'dpl.strategies.strategy'

local DataParallelStrategy = S.ParallelStrategy:extend('DataParallelStrategy')
DataParallelStrategy.strategy_name = 'dp'

local T -- dpl.tensor, loaded on first use

local function tensor_mod()
  T = T or require 'dpl.tensor'
  return T
end

local function is_tensor(x) return tensor_mod().is_tensor(x) end

function DataParallelStrategy:__init(opts)
  S.ParallelStrategy.__init(self, opts)
  self:set_world_ranks()
end

-- one process: the world is this process
function DataParallelStrategy:set_world_ranks()
  self.global_rank, self.local_rank, self.world_size, self.is_global_zero = 0, 0, 1, true
end
function DataParallelStrategy:barrier() end
function DataParallelStrategy:broadcast(obj) return obj end
function DataParallelStrategy:reduce_boolean_decision(d) return d end

function DataParallelStrategy:setup(trainer)
  self:model_to_device()
  if trainer.state.fn == 'fit' then self:setup_optimizers(trainer) end
end

--- Tensors: their mean (over the gathered per-device values); anything else as it is.
function DataParallelStrategy:reduce(t)
  if not is_tensor(t) then return t end
  if t:dim() == 0 then return t end
  local dt = t.dtype
  if t:is_floating_point() then return t:mean() end
  return t:to('float32'):mean():to(dt)
end

local function is_module_like(v)
  if type(v) ~= 'table' then return false end
  if rawget(v, '_is_module') == true then return true end
  local LM = require 'dpl.lightning'
  return require('dpl.class').is_instance(v, LM)
end

--- A copy of a module tree on `device`: tensors copied with :to(device) (autograd
--- keeps parameters' gradients flowing to the originals), submodules replicated,
--- other fields shared.
local function replicate(obj, device, memo)
  local done = memo[obj]
  if done then return done end
  local copy = {}
  memo[obj] = copy
  for k, v in next, obj do
    if k == 'trainer' then
      copy[k] = v
    elseif is_tensor(v) then
      copy[k] = v:to(device)
    elseif is_module_like(v) then
      copy[k] = replicate(v, device, memo)
    else
      copy[k] = v
    end
  end
  rawset(copy, 'device', device)
  return setmetatable(copy, getmetatable(obj))
end
DataParallelStrategy._replicate = replicate

-- the first tensor's dim-1 size in a batch
local function first_size(b, depth)
  if is_tensor(b) then return b:dim() > 0 and b:size(1) or nil end
  if type(b) == 'table' and getmetatable(b) == nil and (depth or 0) < 8 then
    for _, v in pairs(b) do
      local n = first_size(v, (depth or 0) + 1)
      if n then return n end
    end
  end
  return nil
end

-- piece i of m (torch.chunk sizes) of every tensor along dim 1, on device
local function scatter_one(b, i, m, device)
  if is_tensor(b) then
    if b:dim() == 0 then return b:to(device) end
    local n = b:size(1)
    local chunk = math.ceil(n / m)
    local start = (i - 1) * chunk
    local len = math.min(chunk, n - start)
    return b:narrow(1, start + 1, len):to(device)
  end
  if type(b) == 'table' and getmetatable(b) == nil then
    local out = {}
    for k, v in pairs(b) do out[k] = scatter_one(v, i, m, device) end
    return out
  end
  return b
end

local function gather(outs, root)
  local first = outs[1]
  if is_tensor(first) then
    local list = {}
    for i, o in ipairs(outs) do list[i] = o:to(root) end
    if first:dim() == 0 then return tensor_mod().stack(list, 1) end
    return tensor_mod().cat(list, 1)
  end
  if type(first) == 'table' and getmetatable(first) == nil then
    local out = {}
    for k in pairs(first) do
      local col = {}
      for i, o in ipairs(outs) do col[i] = o[k] end
      out[k] = gather(col, root)
    end
    return out
  end
  if type(first) == 'number' then
    local s = 0
    for _, o in ipairs(outs) do s = s + o end
    return s / #outs
  end
  return first
end
DataParallelStrategy._gather = gather

--- Runs `name` on the replicas: scatter, replicate, apply, gather.
function DataParallelStrategy:_parallel(name, batch, ...)
  local model = self.model
  local devices = self.parallel_devices
  local n = #devices
  local size = first_size(batch)
  local m = size and math.min(n, size) or 1
  if m <= 1 then return model[name](model, batch, ...) end
  local root = self.root_device
  local outs = {}
  local fx = model._current_fx_name
  for i = 1, m do
    local dev = devices[i]
    local piece = scatter_one(batch, i, m, dev)
    local replica = i == 1 and model or replicate(model, dev, {})
    replica._current_fx_name = fx
    outs[i] = replica[name](replica, piece, ...)
  end
  for i = 1, m do if outs[i] == nil then return nil end end
  return gather(outs, root)
end

function DataParallelStrategy:training_step(...) return self:_parallel('training_step', ...) end
function DataParallelStrategy:validation_step(...) return self:_parallel('validation_step', ...) end
function DataParallelStrategy:test_step(...) return self:_parallel('test_step', ...) end
function DataParallelStrategy:predict_step(...) return self:_parallel('predict_step', ...) end

local function reduce_output(self, hook, out)
  local trainer = self.lightning_module.trainer
  if trainer and trainer:_is_overridden(hook) then return out end
  if is_tensor(out) then return self:reduce(out) end
  if type(out) == 'table' and getmetatable(out) == nil then
    local r = {}
    for k, v in pairs(out) do r[k] = is_tensor(v) and self:reduce(v) or v end
    return r
  end
  return out
end

function DataParallelStrategy:training_step_end(out) return reduce_output(self, 'training_step_end', out) end
function DataParallelStrategy:validation_step_end(out) return reduce_output(self, 'validation_step_end', out) end
function DataParallelStrategy:test_step_end(out) return reduce_output(self, 'test_step_end', out) end

return DataParallelStrategy
