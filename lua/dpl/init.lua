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
  Fabric = 'dpl.fabric',
  Trainer = 'dpl.trainer', LightningModule = 'dpl.lightning', LightningDataModule = 'dpl.datamodule',
  callbacks = 'dpl.callbacks',
  loggers = 'dpl.loggers', strategies = 'dpl.strategies', profilers = 'dpl.profilers', tuner = 'dpl.tuner',
  cli = 'dpl.cli', yaml = 'dpl.yaml',
  dist = 'dpl.dist',
  amp = 'dpl.amp',
  linalg = 'dpl.linalg', special = 'dpl.special', distributions = 'dpl.distributions', metrics = 'dpl.metrics',
  autograd = 'dpl.autograd', utils = 'dpl.utils', nn = 'dpl.nn', optim = 'dpl.optim', datasets = 'dpl.datasets', data = 'dpl.data',
}

-- the names reading dpl gives without holding them yet (the REPL's Tab completion lists
-- them; see dpl.repl_complete): the submodules, dpl.tensor's functions
local function dir()
  local names = {}
  for k in pairs(lazy) do names[#names + 1] = k end
  local T = require 'dpl.tensor'
  for k in pairs(T) do
    if type(k) == 'string' and k:sub(1, 1) ~= '_' then names[#names + 1] = k end
  end
  local tmt = getmetatable(T)
  for _, k in ipairs(tmt and tmt.__dir and tmt.__dir(T) or {}) do names[#names + 1] = k end
  return names
end

setmetatable(dpl, {
  __dir = dir,
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
      if v ~= nil then rawset(t, k, v) return v end
      -- Torch7's torch.X names dplhost lacks: a function raising an error that names the dplhost way
      return require('dpl.tensor_torch7').module_missing(k)
    end
    return nil
  end,
})

--- dpl.save(obj, path) / dpl.load(path): torch.save / torch.load for tensors and tables of
--- them (and of numbers, strings, booleans); see dpl.serialize.
function dpl.save(obj, path) return require('dpl.serialize').save(obj, path) end
function dpl.load(path) return require('dpl.serialize').load(path) end

--- dpl.help([obj]): what obj is, its signature and where docs/ says more (the REPL's help()).
function dpl.help(...) return require('dpl.repl_help').help(...) end

--- dpl.device("cpu"), dpl.device("cuda:1"), dpl.device("cuda", 1): see dpl.devices.
function dpl.device(...) return require('dpl.devices').device(...) end

--- Moves a batch (tensors, modules, nested tables) to a device: see dpl.devices.
function dpl.move_data_to_device(batch, device)
  return require('dpl.devices').move_data_to_device(batch, device)
end

--- dpl.seed_everything([seed [, workers]]): Lightning 1.9's seed_everything. Seeds dpl's
--- generator (dpl.manual_seed: CPU and GPU draws, and the seeds that shuffling DataLoaders
--- without seed= draw at each pass) and Lua's math.random, sets PL_GLOBAL_SEED (and
--- PL_SEED_WORKERS, 1 with workers=true; dpl's DataLoader has no worker processes) and
--- returns the seed. Without seed: PL_GLOBAL_SEED when set, else a random one, with a
--- warning; a seed outside [0, 2^32 - 1] is replaced by a random one, with a warning.
function dpl.seed_everything(seed, workers)
  local log = require 'dpl.log'
  local errors = require 'dpl.errors'
  local MAX = 4294967295
  local function warn(...) if log.rank() == 0 then log.warn(...) end end -- rank_zero_warn
  local function random_seed()
    local f = io.open('/dev/urandom', 'rb')
    local b = f and f:read(4)
    if f then f:close() end
    if b and #b == 4 then return ((b:byte(1) * 256 + b:byte(2)) * 256 + b:byte(3)) * 256 + b:byte(4) end
    return (os.time() * 1000003 + math.floor(os.clock() * 1e6)) % (MAX + 1)
  end
  if seed == nil then
    local env = os.getenv('PL_GLOBAL_SEED')
    if env == nil then
      seed = random_seed()
      warn('No seed found, seed set to %d', seed)
    else
      local v = tonumber(env)
      if v and v == math.floor(v) and math.abs(v) < 2 ^ 53 then
        seed = v
      else
        seed = random_seed()
        warn("Invalid seed found: '%s', seed set to %d", env, seed)
      end
    end
  elseif type(seed) == 'string' and tonumber(seed) and tonumber(seed) == math.floor(tonumber(seed)) then
    seed = tonumber(seed) -- Python's int('42')
  elseif type(seed) ~= 'number' or seed ~= seed or seed == math.huge or seed == -math.huge then
    errors.TypeError:raise(('seed_everything: seed must be an integer, got %s'):format(
      type(seed) == 'string' and ("string '" .. seed .. "'") or tostring(seed)), 2)
  elseif seed ~= math.floor(seed) then
    seed = seed < 0 and math.ceil(seed) or math.floor(seed) -- Python's int(): toward zero
  end
  if seed < 0 or seed > MAX then
    warn('%s is not in bounds, numpy accepts from 0 to %d', ('%.0f'):format(seed), MAX)
    seed = random_seed()
  end
  local prefix = ''
  for _, k in ipairs({ 'RANK', 'LOCAL_RANK', 'SLURM_PROCID', 'JSM_NAMESPACE_RANK' }) do
    local r = os.getenv(k)
    if r then prefix = ('[rank: %s] '):format(r) break end
  end
  log.info('%sGlobal seed set to %d', prefix, seed)
  local C = require('dpl.capi').C
  C.dpl_proc_setenv('PL_GLOBAL_SEED', ('%d'):format(seed))
  math.randomseed(seed)
  require('dpl.tensor').manual_seed(seed)
  C.dpl_proc_setenv('PL_SEED_WORKERS', workers and '1' or '0')
  return seed
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
