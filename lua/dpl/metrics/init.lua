-- dpl.metrics: torchmetrics (0.11) for dplhost. A Metric keeps states (tensors, or lists of
-- tensors for 'cat'), added with add_state and a reduction across processes; update(...)
-- accumulates a batch, compute() the value over everything since reset() (synced over the
-- dpl.dist process group when there is one), and calling the metric (forward) does both for
-- a batch: it returns the batch's value and adds the batch to the running states. The Trainer
-- takes a Metric in self:log (the step value is the last forward's, the epoch value compute(),
-- and the metric is reset at each epoch's end, as Lightning). Subclasses define update and
-- compute (the base class wraps them: counting, caching, syncing). States live on the device
-- of the first batch. This file: the base class, the aggregation metrics, MetricCollection;
-- dpl.metrics.classification and dpl.metrics.regression hold the rest (loaded on first use).
local T = require 'dpl.tensor'
local class = require 'dpl.class'
local errors = require 'dpl.errors'

local type, tostring, pairs, ipairs, select = type, tostring, pairs, ipairs, select
local fmt = string.format
local lua_error = error

local M = {}
local is_tensor = T.is_tensor
local function value_error(msg) lua_error(errors.ValueError(msg), 0) end
local function runtime_error(msg) lua_error(errors.RuntimeError(msg), 0) end
local function AG() return package.loaded['dpl.autograd'] end

local REDUCE = { sum = true, mean = true, max = true, min = true, cat = true }

---------------------------------------------------------------- Metric
local Metric = class.Object:extend('Metric')
M.Metric = Metric
Metric.__is_metric = true
Metric.full_state_update = false
Metric.is_differentiable = false
Metric.higher_is_better = nil

-- subclasses' update/compute become the wrapped ones' implementations
function Metric:extend(name)
  local cls = class.Object.extend(self, name)
  local mt = getmetatable(cls)
  mt.__newindex = function(c, k, v)
    if k == 'update' or k == 'compute' then rawset(c, '_' .. k .. '_impl', v) else rawset(c, k, v) end
  end
  return cls
end

local COMMON = { dist_sync_on_step = true, sync_on_compute = true, compute_on_cpu = true, process_group = true,
  dist_sync_fn = true, compute_with_cache = true }
--- Metric.__init(self, opts): opts are torchmetrics' common keywords (dist_sync_on_step,
--- sync_on_compute=true, compute_with_cache=true, ...)
function Metric:__init(opts)
  if opts ~= nil and type(opts) ~= 'table' then
    value_error(fmt('%s: options must be a table, got %s', self.__name or 'Metric', type(opts)))
  end
  opts = opts or {}
  rawset(self, '_defaults', {})
  rawset(self, '_reductions', {})
  rawset(self, '_state_names', {})
  self._update_count = 0
  self._computed = nil
  self._forward_cache = nil
  self._device = nil
  self.sync_on_compute = opts.sync_on_compute ~= false
  self.dist_sync_on_step = opts.dist_sync_on_step == true
  self.compute_with_cache = opts.compute_with_cache ~= false
end
-- the options a metric's constructor takes besides its own keys: an unknown key is an error
function Metric:_check_opts(name, opts, own)
  if opts == nil then return {} end
  if type(opts) ~= 'table' then value_error(fmt('%s: options must be a table, got %s', name, type(opts))) end
  for k in pairs(opts) do
    if not (own[k] or COMMON[k]) then
      local names = {}
      for n in pairs(own) do names[#names + 1] = n end
      table.sort(names)
      value_error(fmt("%s: unknown option '%s' (expected %s)", name, tostring(k), table.concat(names, ', ')))
    end
  end
  return opts
end

--- add_state(name, default, dist_reduce_fx): default a tensor (cloned at each reset) or {}
--- (a list of tensors, concatenated on compute; dist_reduce_fx 'cat')
function Metric:add_state(name, default, reduce)
  if type(name) ~= 'string' then value_error('add_state: the name must be a string') end
  if not is_tensor(default) and not (type(default) == 'table' and #default == 0) then
    value_error(fmt('add_state(%s): state variable must be a tensor or any empty list (where you can append tensors)', name))
  end
  if reduce ~= nil and not REDUCE[reduce] and type(reduce) ~= 'function' then
    value_error(fmt("add_state(%s): `dist_reduce_fx` must be callable or one of ['mean', 'sum', 'cat', 'min', 'max', None]", name))
  end
  self._defaults[name] = default
  self._reductions[name] = reduce
  local names = self._state_names
  names[#names + 1] = name
  self[name] = is_tensor(default) and default:clone() or {}
end

function Metric:reset()
  for _, name in ipairs(self._state_names) do
    local d = self._defaults[name]
    if is_tensor(d) then
      local v = d:clone()
      if self._device and v.device ~= self._device then v = v:to(self._device) end
      self[name] = v
    else
      self[name] = {}
    end
  end
  self._update_count = 0
  self._computed = nil
  self._forward_cache = nil
end

-- states follow the device of the first tensor an update gets
local function first_tensor(...)
  for i = 1, select('#', ...) do
    local x = select(i, ...)
    if is_tensor(x) then return x end
  end
end
function Metric:_follow_device(...)
  local x = first_tensor(...)
  if not x then return end
  local dev = x.device
  if self._device == dev then return end
  self._device = dev
  for _, name in ipairs(self._state_names) do
    local v = self[name]
    if is_tensor(v) and v.device ~= dev then self[name] = v:to(dev) end
  end
end

--- update(...): adds a batch to the states
function Metric:update(...)
  if not self._update_impl then runtime_error(fmt('%s: update is not implemented', self.__name)) end
  self:_follow_device(...)
  self._computed = nil
  self._update_count = self._update_count + 1
  local A = AG()
  if A and not self.is_differentiable then
    A.no_grad(self._update_impl, self, ...)
  else
    self:_update_impl(...)
  end
end

-- the states reduced over the process group (a copy of each; the local ones stay)
local function dist_of()
  local ok, dist = pcall(require, 'dpl.dist')
  if ok and dist.is_initialized() and dist.get_world_size() > 1 then return dist end
end
function Metric:_synced_states()
  local dist = dist_of()
  local out = {}
  for _, name in ipairs(self._state_names) do
    local v, red = self[name], self._reductions[name]
    if type(v) == 'table' then -- a list state: one tensor (cat), gathered when synced
      local cat = #v > 0 and T.cat(v) or nil
      if dist and red ~= nil then cat = M._gather_cat(dist, cat, self._defaults[name]) end
      out[name] = cat
    elseif dist and red ~= nil then
      local c = v:clone()
      if red == 'sum' or red == 'max' or red == 'min' then dist.all_reduce(c, red)
      elseif red == 'mean' then dist.all_reduce(c, 'sum'); c = c / dist.get_world_size()
      elseif red == 'cat' then c = T.cat(dist.all_gather(c))
      else c = red(T.stack(dist.all_gather(c))) end
      out[name] = c
    else
      out[name] = v
    end
  end
  return out
end
-- all_gather of tensors of different lengths along dim 1: padded to the longest
function M._gather_cat(dist, t, default)
  local n = t and tonumber(t._shape[0]) or 0
  local sizes = dist.all_gather(T.tensor({ n }, { dtype = 'int64' }))
  local maxn = 0
  for _, s in ipairs(sizes) do maxn = math.max(maxn, s:item()) end
  if maxn == 0 then return t end
  local shape = t and t:size() or { 0 }
  shape[1] = maxn
  local padded = T.zeros(shape, { dtype = t and T.dtype_names[t._dtype] or 'float32' })
  if n > 0 then padded:narrow(1, 1, n):copy_(t) end
  local parts = dist.all_gather(padded)
  local keep = {}
  for i, p in ipairs(parts) do
    local k = sizes[i]:item()
    if k > 0 then keep[#keep + 1] = p:narrow(1, 1, k) end
  end
  return T.cat(keep)
end

--- compute(): the value over the states since the last reset (synced; cached until the next update)
function Metric:compute()
  if not self._compute_impl then runtime_error(fmt('%s: compute is not implemented', self.__name)) end
  if self._update_count == 0 then
    require('dpl.log').warn(fmt('The ``compute`` method of metric %s was called before the ``update`` method which may '
      .. 'lead to errors, as metric states have not yet been updated.', self.__name))
  end
  if self.compute_with_cache and self._computed ~= nil then return self._computed end
  local saved
  if self.sync_on_compute and dist_of() then
    saved = {}
    local synced = self:_synced_states()
    for _, name in ipairs(self._state_names) do saved[name] = self[name]; self[name] = synced[name] end
  else
    for _, name in ipairs(self._state_names) do -- list states are handed over as one tensor
      local v = self[name]
      if type(v) == 'table' then
        saved = saved or {}
        saved[name] = v
        self[name] = #v > 0 and T.cat(v) or nil
      end
    end
  end
  local ok, r = pcall(function()
    local A = AG()
    if A then return A.no_grad(self._compute_impl, self) end
    return self:_compute_impl()
  end)
  if saved then for name, v in pairs(saved) do self[name] = v end end
  if not ok then lua_error(r, 0) end
  self._computed = r
  return r
end

-- merges the batch's states b into the accumulated ones a (by each state's reduction)
local function merge(self, acc, batch)
  for _, name in ipairs(self._state_names) do
    local red, a, b = self._reductions[name], acc[name], batch[name]
    if type(a) == 'table' then
      for _, x in ipairs(b) do a[#a + 1] = x end
      self[name] = a
    elseif red == 'sum' or red == nil then self[name] = a + b
    elseif red == 'max' then self[name] = T.maximum(a, b)
    elseif red == 'min' then self[name] = T.minimum(a, b)
    elseif red == 'mean' then
      local n = self._update_count
      self[name] = (a * (n - 1) + b) / n
    elseif red == 'cat' then self[name] = T.cat({ a, b })
    else self[name] = red(T.stack({ a, b })) end
  end
end

--- forward(...) / metric(...): the value of this batch alone, and the batch added to the states
function Metric:forward(...)
  self:_follow_device(...) -- (the accumulated states join the batch's device before they are kept aside)
  if self.full_state_update then -- update twice: once into the states, once alone
    self:update(...)
    local count = self._update_count
    local acc = {}
    for _, name in ipairs(self._state_names) do acc[name] = self[name] end
    local cached = self._computed
    self:reset()
    self:update(...)
    local v = self:_local_compute()
    for _, name in ipairs(self._state_names) do self[name] = acc[name] end
    self._update_count = count
    self._computed = nil
    self._forward_cache = v
    return v
  end
  local acc = {}
  for _, name in ipairs(self._state_names) do acc[name] = self[name] end
  local count = self._update_count
  self:reset()
  self:update(...)
  local v = self:_local_compute()
  local batch = {}
  for _, name in ipairs(self._state_names) do batch[name] = self[name] end
  self._update_count = count + 1
  for _, name in ipairs(self._state_names) do self[name] = acc[name] end
  merge(self, acc, batch)
  self._computed = nil
  self._forward_cache = v
  return v
end
-- compute on this process's states only (the batch value of forward; dist_sync_on_step syncs)
function Metric:_local_compute()
  local sync = self.sync_on_compute
  self.sync_on_compute = self.dist_sync_on_step
  self._computed = nil
  local ok, r = pcall(self.compute, self)
  self.sync_on_compute = sync
  if not ok then lua_error(r, 0) end
  return r
end
Metric.__call = function(self, ...) return self:forward(...) end
Metric.__tostring = function(self) return self.__name .. '()' end

--- clone(): an independent copy (states included)
function Metric:clone()
  local c = setmetatable({}, getmetatable(self))
  for k, v in pairs(self) do
    if is_tensor(v) then c[k] = v:clone()
    elseif type(v) == 'table' and k ~= '_defaults' and k ~= '_reductions' and k ~= '_state_names' and getmetatable(v) == nil then
      local t = {}
      for i, x in pairs(v) do t[i] = is_tensor(x) and x:clone() or x end
      c[k] = t
    else c[k] = v end
  end
  return c
end
function Metric:to(device)
  self._device = type(device) == 'string' and device or tostring(device)
  for _, name in ipairs(self._state_names) do
    local v = self[name]
    if is_tensor(v) then self[name] = v:to(self._device) end
  end
  return self
end
--- state_dict(): the states (tensors; list states concatenated), for checkpoints
function Metric:state_dict()
  local sd = {}
  for _, name in ipairs(self._state_names) do
    local v = self[name]
    sd[name] = type(v) == 'table' and (#v > 0 and T.cat(v) or nil) or v:clone()
  end
  return sd
end
function Metric:load_state_dict(sd)
  for _, name in ipairs(self._state_names) do
    local v = sd[name]
    if v ~= nil then
      if type(self[name]) == 'table' then self[name] = { v:clone() } else self[name] = v:clone() end
    end
  end
  self._computed = nil
end

---------------------------------------------------------------- aggregation
-- values (numbers or tensors) as a float tensor; nan_strategy: 'error', 'warn', 'ignore' or a number
local function agg_values(self, value)
  if type(value) == 'number' then value = T.tensor(value, { dtype = 'float32' }) end
  if not is_tensor(value) then value_error(fmt('%s.update: value must be a tensor or a number, got %s', self.__name, type(value))) end
  if value._dtype > 3 then value = value:float() end
  local nan = value:isnan()
  if nan:any():item() then
    local s = self.nan_strategy
    if s == 'error' then runtime_error('Encounted `nan` values in tensor') end
    if s == 'warn' or s == 'ignore' then
      if s == 'warn' then require('dpl.log').warn('Encounted `nan` values in tensor. Will be removed.') end
      value = value:reshape(-1)[nan:reshape(-1):logical_not()]
    else
      value = T.where(nan, T.full_like(value, s), value)
    end
  end
  return value
end
local NAN = { nan_strategy = true }
local function aggregator(name, init_state)
  local cls = Metric:extend(name)
  M[name] = cls
  function cls:__init(opts)
    opts = self:_check_opts(name, opts, NAN)
    Metric.__init(self, opts)
    local s = opts.nan_strategy or 'warn'
    if not (s == 'error' or s == 'warn' or s == 'ignore' or type(s) == 'number') then
      value_error(fmt("%s: nan_strategy must be 'error', 'warn', 'ignore' or a number, got %s", name, tostring(s)))
    end
    self.nan_strategy = s
    init_state(self)
  end
  return cls
end
local SumMetric = aggregator('SumMetric', function(self) self:add_state('value', T.tensor(0.0), 'sum') end)
function SumMetric:update(value) self.value = self.value + agg_values(self, value):sum() end
function SumMetric:compute() return self.value end
local MaxMetric = aggregator('MaxMetric', function(self) self:add_state('value', T.tensor(-math.huge), 'max') end)
MaxMetric.full_state_update = true
function MaxMetric:update(value)
  local v = agg_values(self, value)
  if v:numel() > 0 then self.value = T.maximum(self.value, v:max()) end
end
function MaxMetric:compute() return self.value end
local MinMetric = aggregator('MinMetric', function(self) self:add_state('value', T.tensor(math.huge), 'min') end)
MinMetric.full_state_update = true
function MinMetric:update(value)
  local v = agg_values(self, value)
  if v:numel() > 0 then self.value = T.minimum(self.value, v:min()) end
end
function MinMetric:compute() return self.value end
local CatMetric = aggregator('CatMetric', function(self) self:add_state('value', {}, 'cat') end)
function CatMetric:update(value)
  local v = agg_values(self, value)
  if v:numel() > 0 then self.value[#self.value + 1] = v:reshape(-1) end
end
function CatMetric:compute() return self.value or T.empty(0) end
local MeanMetric = aggregator('MeanMetric', function(self)
  self:add_state('mean_value', T.tensor(0.0), 'sum')
  self:add_state('weight', T.tensor(0.0), 'sum')
end)
--- MeanMetric:update(value [, weight=1]): a weighted mean (weight broadcast to value)
function MeanMetric:update(value, weight)
  local v = agg_values(self, value)
  local w = weight == nil and T.ones_like(v) or (is_tensor(weight) and weight:to(T.dtype_names[v._dtype]) or
    T.full_like(v, weight))
  w = w:expand_as(v)
  self.mean_value = self.mean_value + (v * w):sum()
  self.weight = self.weight + w:sum()
end
function MeanMetric:compute() return self.mean_value / self.weight end

---------------------------------------------------------------- MetricCollection
local MetricCollection = class.Object:extend('MetricCollection')
M.MetricCollection = MetricCollection
MetricCollection.__is_metric_collection = true
--- MetricCollection(metrics [, {prefix=, postfix=}]): metrics a list (keyed by class name) or
--- a table name -> metric; calls, update, compute, reset apply to each; results keyed
--- prefix .. name .. postfix
function MetricCollection:__init(metrics, opts)
  opts = opts or {}
  self.prefix, self.postfix = opts.prefix or '', opts.postfix or ''
  if type(self.prefix) ~= 'string' or type(self.postfix) ~= 'string' then
    value_error('MetricCollection: prefix and postfix must be strings')
  end
  self._metrics, self._order = {}, {}
  if type(metrics) ~= 'table' then value_error('MetricCollection: expected a list or a table of metrics') end
  if metrics.__is_metric then metrics = { metrics } end
  for i, m in ipairs(metrics) do
    if type(m) ~= 'table' or not m.__is_metric then value_error(fmt('MetricCollection: entry %d is not a metric', i)) end
    local name = m.__name
    if self._metrics[name] then value_error(fmt('MetricCollection: encountered two metrics both named %s', name)) end
    self._metrics[name] = m
    self._order[#self._order + 1] = name
  end
  local named = {}
  for k, m in pairs(metrics) do
    if type(k) == 'string' then
      if type(m) ~= 'table' or not m.__is_metric then value_error(fmt("MetricCollection: entry '%s' is not a metric", k)) end
      named[#named + 1] = k
      self._metrics[k] = m
    end
  end
  table.sort(named)
  for _, k in ipairs(named) do self._order[#self._order + 1] = k end
end
local function each(self, f)
  local out = {}
  for _, name in ipairs(self._order) do out[self.prefix .. name .. self.postfix] = f(self._metrics[name]) end
  return out
end
function MetricCollection:forward(...)
  local args = { n = select('#', ...), ... }
  return each(self, function(m) return m:forward(unpack(args, 1, args.n)) end)
end
MetricCollection.__call = function(self, ...) return self:forward(...) end
function MetricCollection:update(...)
  local args = { n = select('#', ...), ... }
  each(self, function(m) m:update(unpack(args, 1, args.n)) end)
end
function MetricCollection:compute() return each(self, function(m) return m:compute() end) end
function MetricCollection:reset() each(self, function(m) m:reset() end) end
function MetricCollection:keys()
  local r = {}
  for i, name in ipairs(self._order) do r[i] = self.prefix .. name .. self.postfix end
  return r
end
function MetricCollection:get(name) return self._metrics[name] end
--- tostring (the REPL's print): torchmetrics' repr, the metrics in order, then prefix/postfix
MetricCollection.__tostring = function(self)
  local lines = { 'MetricCollection(' }
  for _, name in ipairs(self._order) do
    lines[#lines + 1] = fmt('  (%s): %s', name, tostring(self._metrics[name]):gsub('\n', '\n  '))
  end
  local extra = {}
  if self.prefix ~= '' then extra[#extra + 1] = '  prefix=' .. self.prefix end
  if self.postfix ~= '' then extra[#extra + 1] = '  postfix=' .. self.postfix end
  if #extra > 0 then lines[#lines] = lines[#lines] .. ',' end
  for _, l in ipairs(extra) do lines[#lines + 1] = l end
  lines[#lines + 1] = ')'
  return table.concat(lines, '\n')
end
--- items(): torchmetrics' items(): an iterator over (prefix .. name .. postfix, metric), in the
--- collection's order (`for k, m in mc:items() do ... end`)
function MetricCollection:items()
  local i = 0
  return function()
    i = i + 1
    local name = self._order[i]
    if name == nil then return nil end
    return self.prefix .. name .. self.postfix, self._metrics[name]
  end
end
--- clone({prefix=, postfix=}): copies of every metric under new names
function MetricCollection:clone(opts)
  opts = opts or {}
  local ms = {}
  for _, name in ipairs(self._order) do ms[name] = self._metrics[name]:clone() end
  local c = MetricCollection({}, { prefix = opts.prefix or self.prefix, postfix = opts.postfix or self.postfix })
  c._metrics = ms
  for i, name in ipairs(self._order) do c._order[i] = name end
  return c
end

-- the task modules load on first use: dpl.metrics.Accuracy, dpl.metrics.functional.accuracy, ...
local loaded = false
local function load_rest()
  if loaded then return end
  loaded = true
  require('dpl.metrics.classification')(M, Metric)
  require('dpl.metrics.regression')(M, Metric)
end
-- (__dir: what the REPL's Tab completion lists, dpl.repl_complete; here it loads the names)
local function dir() load_rest() return {} end
M.functional = setmetatable({}, { __dir = dir, __index = function(t, k)
  load_rest()
  return rawget(t, k)
end })
return setmetatable(M, { __dir = dir, __index = function(t, k)
  if type(k) ~= 'string' then return nil end
  load_rest()
  return rawget(t, k)
end })
