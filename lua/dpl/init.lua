-- dpl: the dplhost Lua library. `local dpl = require 'dpl'`.
-- Loads the C API (the embedded include/dpl.h) and loads submodules on first use
-- (dpl.devices, dpl.nn, ...), so `require 'dpl'` stays cheap.
local capi = require 'dpl.capi'

local dpl = {
  version = capi.version,
  C = capi.C,
  check = capi.check,
}

local lazy = {
  tensor = 'dpl.tensor', -- callable: dpl.tensor(data, opts)
  safetensors = 'dpl.safetensors',
  capi = 'dpl.capi',
  errors = 'dpl.errors',
  repl = 'dpl.repl',
  pretty = 'dpl.pretty',
  log = 'dpl.log',
  devices = 'dpl.devices',
  cuda = 'dpl.cuda',
  Trainer = 'dpl.trainer', LightningModule = 'dpl.lightning', callbacks = 'dpl.callbacks',
  loggers = 'dpl.loggers', strategies = 'dpl.strategies',
  dist = 'dpl.dist',
  amp = 'dpl.amp',
  autograd = 'dpl.autograd', nn = 'dpl.nn', optim = 'dpl.optim', datasets = 'dpl.datasets', data = 'dpl.data',
}

setmetatable(dpl, {
  __index = function(t, k)
    local mod = lazy[k]
    if mod then
      local v = require(mod)
      rawset(t, k, v)
      return v
    end
    -- tensor constructors and functions (dpl.zeros, dpl.float32, dpl.cat, ...)
    if type(k) == 'string' then
      local v = require('dpl.tensor')[k]
      if v ~= nil then rawset(t, k, v) end
      return v
    end
    return nil
  end,
})

--- dpl.device("cpu"), dpl.device("cuda:1"), dpl.device("cuda", 1): see dpl.devices.
function dpl.device(...) return require('dpl.devices').device(...) end

--- Moves a batch (tensors, modules, nested tables) to a device: see dpl.devices.
function dpl.move_data_to_device(batch, device)
  return require('dpl.devices').move_data_to_device(batch, device)
end

--- Registers fn to run when the host exits: normal end, os.exit, an uncaught
--- error, or SIGINT/SIGTERM. Cleanups run last-registered first, once.
function dpl.atexit(fn)
  if type(fn) ~= 'function' then
    error(('dpl.atexit: expected a function, got %s'):format(type(fn)), 2)
  end
  require('dpl.host').atexit(fn)
end

return dpl
