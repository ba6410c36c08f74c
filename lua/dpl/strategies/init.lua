-- dpl.strategies: the strategy registry (Lightning's names) and the classes.
-- strategies.get(name, opts) builds a strategy by its registered name;
-- strategies.names() lists them. The Trainer picks one through
-- dpl.trainer.connector, the way Lightning's accelerator connector does.
local errors = require 'dpl.errors'

local M = {}

local S = require 'dpl.strategies.strategy'
M.Strategy = S.Strategy
M.ParallelStrategy = S.ParallelStrategy

local lazy = {
  SingleDeviceStrategy = function() return require 'dpl.strategies.single_device' end,
  DataParallelStrategy = function() return require 'dpl.strategies.dp' end,
  DDPStrategy = function() return require('dpl.strategies.ddp').DDPStrategy end,
  DDPSpawnStrategy = function() return require('dpl.strategies.ddp').DDPSpawnStrategy end,
  DDP2Strategy = function() return require 'dpl.strategies.ddp2' end,
  HorovodStrategy = function() return require 'dpl.strategies.horovod' end,
  SingleTPUStrategy = function() return require('dpl.strategies.tpu').SingleTPUStrategy end,
  TPUSpawnStrategy = function() return require('dpl.strategies.tpu').TPUSpawnStrategy end,
}

-- name -> {class name, extra options}
local registry = {
  single_device = { 'SingleDeviceStrategy' },
  single_tpu = { 'SingleTPUStrategy' },
  tpu_spawn = { 'TPUSpawnStrategy' },
  dp = { 'DataParallelStrategy' },
  ddp = { 'DDPStrategy' },
  ddp_find_unused_parameters_false = { 'DDPStrategy', { find_unused_parameters = false } },
  ddp_spawn = { 'DDPSpawnStrategy', nil, 'spawn' },
  ddp_spawn_find_unused_parameters_false = { 'DDPSpawnStrategy', { find_unused_parameters = false }, 'spawn' },
  ddp_fork = { 'DDPSpawnStrategy', nil, 'fork' },
  ddp_fork_find_unused_parameters_false = { 'DDPSpawnStrategy', { find_unused_parameters = false }, 'fork' },
  ddp_notebook = { 'DDPSpawnStrategy', nil, 'fork' },
  ddp_notebook_find_unused_parameters_false = { 'DDPSpawnStrategy', { find_unused_parameters = false }, 'fork' },
  ddp2 = { 'DDP2Strategy' },
  horovod = { 'HorovodStrategy' },
}
M._registry = registry

setmetatable(M, { __dir = function()
  local names = {}
  for k in pairs(lazy) do names[#names + 1] = k end
  return names
end, __index = function(t, k)
  local f = lazy[k]
  if f then local v = f(); rawset(t, k, v); return v end
end })

--- The registered names, sorted.
function M.names()
  local out = {}
  for k in pairs(registry) do out[#out + 1] = k end
  table.sort(out)
  return out
end

function M.is_registered(name) return registry[name] ~= nil end

--- Builds the strategy registered as `name` (opts: parallel_devices=, device=, num_nodes=).
function M.get(name, opts)
  local entry = registry[name]
  if not entry then
    errors.MisconfigurationException:raise(("Strategy '%s' is not registered. Available: %s")
      :format(tostring(name), table.concat(M.names(), ', ')), 2)
  end
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  o.kwargs = entry[2]
  o.start_method = entry[3]
  local obj = M[entry[1]](o)
  obj.strategy_name = name
  return obj
end

--- True when x is a strategy object.
function M.is_strategy(x)
  return require('dpl.class').is_instance(x, S.Strategy)
end

return M
