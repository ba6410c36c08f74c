-- dpl.fabric_collectives: the methods of dpl.Fabric that talk to the other ranks or to the
-- outside: print, barrier, broadcast, all_gather, all_reduce, seed_everything, save/load
-- (checkpoints: rank 0 writes, every rank reads), call (callbacks), log/log_dict (loggers).
-- install(Fabric) adds them to the class (dpl.fabric does).
local errors = require 'dpl.errors'
local W = require 'dpl.fabric_wrappers'

local M = {}
local fmt = string.format

local function is_tensor(x)
  return type(x) == 'cdata' and require('dpl.tensor').is_tensor(x)
end

local function describe(v)
  if type(v) == 'string' then return fmt("'%s'", v) end
  if type(v) == 'table' then
    local mt = getmetatable(v)
    return (mt and mt.__name) and fmt('a %s', mt.__name) or 'a table'
  end
  if is_tensor(v) then return 'a tensor' end
  return tostring(v)
end

-- the keys of a plain table in an order every rank agrees on
local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b)
    if type(a) == type(b) and (type(a) == 'number' or type(a) == 'string') then return a < b end
    return type(a) < type(b)
  end)
  return keys
end

-- f applied to every tensor (numbers become float64 tensors on the device: Lightning's
-- convert_to_tensors) of a nested plain table, in sorted key order
local function map_tensors(x, f, device, what, depth)
  if type(x) == 'number' then
    x = require('dpl.tensor').tensor(x, { dtype = 'float64', device = device })
  end
  if is_tensor(x) then return f(x) end
  if type(x) == 'table' and getmetatable(x) == nil and (depth or 0) < 16 then
    local out = {}
    for _, k in ipairs(sorted_keys(x)) do out[k] = map_tensors(x[k], f, device, what, (depth or 0) + 1) end
    return out
  end
  errors.TypeError:raise(fmt('fabric:%s: expected a tensor, a number or a table of them, got %s', what, describe(x)), 4)
end

local REDUCE_OPS = { mean = true, avg = true, sum = true, max = true, min = true }
local ALL_REDUCE_KEYS = require('dpl.options').keys('reduce_op', 'group')

--- One module-level function per method; install() puts them on the class.
local methods = {}

--- fabric:print(...): print on local rank 0 only (Lightning's).
function methods:print(...)
  if self.local_rank == 0 then print(...) end
end

--- fabric:barrier([name]): waits for every rank.
function methods:barrier(name)
  self:_check_launched('barrier')
  self.strategy:barrier(name)
end

--- fabric:broadcast(obj, src=0): src's obj on every rank (numbers, strings, booleans, tables
--- of them; a tensor: its shape and dtype go first, so the others' may differ).
function methods:broadcast(obj, src)
  if src == nil then src = 0 end
  if type(src) ~= 'number' or src % 1 ~= 0 or src < 0 or src >= self.world_size then
    errors.ValueError:raise(fmt('fabric:broadcast(obj, src): src must be a rank in [0, %d], got %s',
      self.world_size - 1, describe(src)), 2)
  end
  self:_check_launched('broadcast')
  if self.world_size <= 1 then return obj end
  local dist = require 'dpl.dist'
  if is_tensor(obj) then
    local meta = dist.broadcast_object(self.global_rank == src and { obj:size(), obj.dtype } or nil, src)
    local t
    if self.global_rank == src then t = obj:contiguous():clone()
    else t = require('dpl.tensor').empty(meta[1], { dtype = meta[2], device = obj.device }) end
    dist.broadcast(t, src)
    return t
  end
  return self.strategy:broadcast(obj, src)
end

--- fabric:all_gather(x): a tensor of shape [world_size, ...] per tensor (numbers become
--- tensors; nested tables keep their shape). One rank: x (numbers as tensors).
function methods:all_gather(data)
  self:_check_launched('all_gather')
  local world = self.world_size
  local T = require 'dpl.tensor'
  return map_tensors(data, function(t)
    if world <= 1 then return t end
    local parts = require('dpl.dist').all_gather(t:contiguous())
    return T.stack(parts, 1)
  end, self.device, 'all_gather')
end

--- fabric:all_reduce(x, {reduce_op='mean'}) (Lightning 2.0's): each tensor reduced over the
--- ranks into a new tensor (mean, sum, max, min); numbers become tensors.
function methods:all_reduce(data, opts)
  opts = opts or {}
  if type(opts) ~= 'table' then
    errors.TypeError:raise(fmt("fabric:all_reduce(x, opts): opts must be a table ({reduce_op='mean'}), got %s",
      describe(opts)), 2)
  end
  require('dpl.options').check(opts, ALL_REDUCE_KEYS, 'fabric:all_reduce')
  local op = opts.reduce_op or 'mean'
  if type(op) ~= 'string' or not REDUCE_OPS[op:lower()] then
    errors.ValueError:raise(fmt("fabric:all_reduce: reduce_op must be one of 'mean', 'sum', 'max', 'min', got %s",
      describe(op)), 2)
  end
  op = op:lower()
  self:_check_launched('all_reduce')
  local s, world = self.strategy, self.world_size
  return map_tensors(data, function(t)
    if world <= 1 then return t end
    return s:reduce(t, opts.group, op)
  end, self.device, 'all_reduce')
end

--- fabric:seed_everything([seed [, workers=true]]): dpl.seed_everything (Fabric's default
--- workers=true).
function methods:seed_everything(seed, workers)
  if workers == nil then workers = true end
  return require('dpl').seed_everything(seed, workers)
end

---------------------------------------------------------------- checkpoints

local function is_stateful(x)
  if type(x) ~= 'table' then return false end
  local ok, a, b = pcall(function() return x.state_dict, x.load_state_dict end)
  return ok and type(a) == 'function' and type(b) == 'function'
end

local function inner(x)
  if W.is_module(x) then return rawget(x, '_original_module') end
  if W.is_optimizer(x) then return rawget(x, 'optimizer') end
  return x
end

--- fabric:save(path, state): state's modules, optimizers (and anything with state_dict) as
--- their state_dicts, other values as they are, in one dpl.save file written by rank 0
--- (atomically); every rank waits for it. (path, state) or 1.9's (state, path).
function methods:save(path, state)
  if type(path) == 'table' and type(state) == 'string' then path, state = state, path end
  if type(path) ~= 'string' or path == '' then
    errors.TypeError:raise(fmt('fabric:save(path, state): path must be a non-empty string, got %s', describe(path)), 2)
  end
  if type(state) ~= 'table' or getmetatable(state) ~= nil then
    errors.TypeError:raise(fmt('fabric:save(path, state): state must be a table of modules, optimizers and values,'
      .. ' got %s', describe(state)), 2)
  end
  self:_check_launched('save')
  if self.is_global_zero then
    local content = {}
    for k, v in pairs(state) do
      local o = inner(v)
      if is_stateful(o) then content[k] = o:state_dict() else content[k] = v end
    end
    local dir = path:match('^(.*)/[^/]*$')
    if dir and dir ~= '' then require('dpl.loggers.base').mkdir_p(dir) end -- (as Lightning's checkpoint IO)
    require('dpl.serialize').save(content, path)
  end
  self.strategy:barrier('Fabric.save')
end

local LOAD_KEYS = require('dpl.options').keys('strict')

--- fabric:load(path [, state [, {strict=true}]]): without state, the saved table. With it,
--- each module/optimizer/stateful object in state loads its entry (load_state_dict), each
--- other key of state takes the saved value; returns the saved entries not asked for.
--- strict: a key of state missing from the file is an error.
function methods:load(path, state, opts)
  if type(path) ~= 'string' or path == '' then
    errors.TypeError:raise(fmt('fabric:load(path [, state]): path must be a non-empty string, got %s', describe(path)), 2)
  end
  if state ~= nil and (type(state) ~= 'table' or getmetatable(state) ~= nil) then
    errors.TypeError:raise(fmt('fabric:load(path, state): state must be a table, got %s', describe(state)), 2)
  end
  opts = opts or {}
  require('dpl.options').check(opts, LOAD_KEYS, 'fabric:load')
  self:_check_launched('load')
  local f = io.open(path, 'rb')
  if not f then
    errors.ValueError:raise(fmt("fabric:load: no checkpoint at '%s'", path), 2)
  end
  f:close()
  local ck = require('dpl.serialize').load(path)
  if state == nil then return ck end
  if opts.strict ~= false then
    for k in pairs(state) do
      if ck[k] == nil then
        errors.ValueError:raise(fmt("The requested state contains a key '%s' that does not exist in the loaded"
          .. ' checkpoint. To disable strict loading, set `strict=False`.', tostring(k)), 2)
      end
    end
  end
  for k, v in pairs(state) do
    if ck[k] ~= nil then
      local o = inner(v)
      if is_stateful(o) then
        o:load_state_dict(ck[k])
        self:_state_to_device(o)
      else
        state[k] = ck[k]
      end
      ck[k] = nil
    end
  end
  if self._launched and self.world_size > 1 then self.strategy:barrier('Fabric.load') end
  return ck
end

-- an optimizer's state tensors next to their parameters (loaded on the CPU)
function methods:_state_to_device(opt)
  if self.device.type == 'cpu' or type(opt.param_groups) ~= 'table' or type(opt.state) ~= 'table' then return end
  for p, st in pairs(opt.state) do
    if type(st) == 'table' and is_tensor(p) then
      for k, v in pairs(st) do
        if is_tensor(v) and v.device ~= p.device then st[k] = v:to(p.device) end
      end
    end
  end
end

---------------------------------------------------------------- callbacks, loggers

--- fabric:call(hook_name, ...): cb:hook_name(...) on each callback that has it.
function methods:call(hook_name, ...)
  if type(hook_name) ~= 'string' then
    errors.TypeError:raise(fmt('fabric:call(hook_name, ...): hook_name must be a string, got %s', describe(hook_name)), 2)
  end
  for _, cb in ipairs(self.callbacks) do
    local ok, m = pcall(function() return cb[hook_name] end)
    if ok and m ~= nil then
      local mt = type(m) == 'table' and getmetatable(m)
      if type(m) ~= 'function' and not (mt and mt.__call) then
        if self.global_rank == 0 then
          require('dpl.log').warn('Skipping the callback `%s.%s` because it is not callable.',
            tostring((getmetatable(cb) or {}).__name or 'table'), hook_name)
        end
      else
        m(cb, ...)
      end
    end
  end
end

local function scalar(name, v)
  if type(v) == 'number' then return v end
  if type(v) == 'boolean' then return v and 1 or 0 end
  if is_tensor(v) then
    if v:numel() ~= 1 then
      errors.ValueError:raise(fmt('fabric:log: the value of %s must be a number or a one-element tensor, got a tensor'
        .. ' of %d elements', tostring(name), v:numel()), 4)
    end
    return v:item()
  end
  errors.TypeError:raise(fmt('fabric:log: the value of %s must be a number or a one-element tensor, got %s',
    tostring(name), describe(v)), 4)
end

--- fabric:log_dict(metrics, [step]): the values (numbers, one-element tensors) to every logger,
--- from global rank 0 (Lightning's loggers are rank-zero-only).
function methods:log_dict(metrics, step)
  if type(metrics) ~= 'table' or getmetatable(metrics) ~= nil then
    errors.TypeError:raise(fmt('fabric:log_dict(metrics, step): metrics must be a table of name = value, got %s',
      describe(metrics)), 2)
  end
  if step ~= nil and (type(step) ~= 'number' or step % 1 ~= 0 or step < 0) then
    errors.ValueError:raise(fmt('fabric:log_dict: step must be an integer >= 0 or nil, got %s', describe(step)), 2)
  end
  local out = {}
  for k, v in pairs(metrics) do
    if type(k) ~= 'string' then
      errors.TypeError:raise(fmt('fabric:log_dict: metric names must be strings, got %s', describe(k)), 2)
    end
    out[k] = scalar(k, v)
  end
  if self.global_rank ~= 0 then return end
  for _, lg in ipairs(self.loggers) do lg:log_metrics(out, step) end
end

--- fabric:log(name, value, [step])
function methods:log(name, value, step)
  if type(name) ~= 'string' then
    errors.TypeError:raise(fmt('fabric:log(name, value, step): name must be a string, got %s', describe(name)), 2)
  end
  return methods.log_dict(self, { [name] = value }, step)
end

function M.install(Fabric)
  for k, f in pairs(methods) do Fabric[k] = f end
  return Fabric
end

-- (shared with dpl.fabric)
M._is_tensor, M._describe = is_tensor, describe

return M
