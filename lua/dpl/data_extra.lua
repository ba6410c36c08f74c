-- dpl.data_extra: the parts of torch.utils.data (1.13) that dpl.data installs from here:
-- IterableDataset, ChainDataset, get_worker_info, WeightedRandomSampler and
-- SubsetRandomSampler. Use them as dpl.data.X (this module only adds them to dpl.data).
-- Positions are 1-based; the random draws come from dpl.data's seeded streams (a seed=, a
-- data.Generator, or dpl's global generator), never torch's stream.
local ffi = require 'ffi'
local class = require 'dpl.class'
local errors = require 'dpl.errors'
local options = require 'dpl.options'

local M = {}

local function describe(v)
  if type(v) == 'string' then return ("string '%s'"):format(v) end
  if type(v) == 'number' then
    if v ~= v then return 'nan' end
    if v == math.floor(v) and math.abs(v) < 2 ^ 63 then return ('%.0f'):format(v) end
    return ('%.17g'):format(v)
  end
  if v == nil then return 'nil' end
  if type(v) == 'table' and v.__name then return tostring(v.__name) end
  return ('%s %s'):format(type(v), tostring(v))
end

local function value_error(msg, level) errors.ValueError:raise(msg, (level or 1) + 1) end

function M.install(data)
  local rng = data._rng
  local pass_key, uniform, order_array = rng.pass_key, rng.uniform, rng.order_array
  local SAMPLER_KEYS = options.keys('seed', 'generator')

  ---------------------------------------------------------------- iterable datasets
  --- IterableDataset: a dataset read as a stream (torch's IterableDataset). Subclasses define
  --- `__iter(self)` returning an iterator function: each call gives the next item, nil at the
  --- end (a Python generator is `coroutine.wrap(function() ... coroutine.yield(x) ... end)`);
  --- items cannot be nil. `__len(self)` is optional (torch's __len__): without it the
  --- DataLoader's length is unknown (`#loader` is a TypeError, the Trainer counts the batches as
  --- infinite). A DataLoader reads it in its own order: no sampler, no shuffle.
  local IterableDataset = data.Dataset:extend('IterableDataset')
  data.IterableDataset = IterableDataset
  IterableDataset.__len = false -- (no length unless a subclass defines one; extend copies this)
  function IterableDataset:__iter()
    errors.NotImplementedError:raise(('%s must define __iter() (an iterator function over its items)')
      :format(tostring(self.__name)), 2)
  end
  function IterableDataset:get(i)
    errors.TypeError:raise(("'%s' object is not subscriptable (an IterableDataset is read with __iter(), not get(i))")
      :format(tostring(self.__name)), 2)
  end

  --- True when ds is an IterableDataset (an instance of a subclass).
  function data.is_iterable(ds) return class.is_instance(ds, IterableDataset) end

  --- ChainDataset(datasets): the items of each IterableDataset in turn (torch's ChainDataset,
  --- also `ids1 + ids2`); its length, when asked, is the sum of theirs (each must have one).
  local ChainDataset = IterableDataset:extend('ChainDataset')
  data.ChainDataset = ChainDataset
  function ChainDataset:__init(datasets)
    if type(datasets) ~= 'table' or getmetatable(datasets) ~= nil then
      value_error(('ChainDataset expects a list of IterableDatasets {ds1, ds2, ...}, got %s'):format(describe(datasets)), 2)
    end
    for k = 1, #datasets do
      if not data.is_iterable(datasets[k]) then
        errors.TypeError:raise(('ChainDataset only supports IterableDataset: dataset %d is %s (chain map-style datasets'
          .. ' with ConcatDataset)'):format(k, describe(datasets[k])), 2)
      end
    end
    self.datasets = datasets
  end
  function ChainDataset:__iter()
    local dss, k, it = self.datasets, 0, nil
    return function()
      while true do
        if it then
          local x = it()
          if x ~= nil then return x end
          it = nil
        end
        k = k + 1
        local d = dss[k]
        if d == nil then return nil end
        it = d:__iter()
        if type(it) ~= 'function' then
          errors.TypeError:raise(('ChainDataset: %s:__iter() must return an iterator function, got %s')
            :format(tostring(d.__name), describe(it)), 2)
        end
      end
    end
  end
  function ChainDataset:__len()
    local total = 0
    for k, d in ipairs(self.datasets) do
      if type(d.__len) ~= 'function' then
        errors.TypeError:raise(("ChainDataset: object of type '%s' (dataset %d) has no len()"):format(tostring(d.__name), k), 2)
      end
      total = total + data.len(d)
    end
    return total
  end

  --- get_worker_info(): torch's, nil in the main process; dpl.data replaces it with
  --- dpl.data_workers' (a table in a DataLoader worker process).
  function data.get_worker_info() return nil end

  ---------------------------------------------------------------- samplers
  local function sampler_opts(who, opts)
    if class.is_instance(opts, data.Generator) then opts = { generator = opts } end
    if opts ~= nil and type(opts) ~= 'table' then
      value_error(('%s: expected a data.Generator or an options table {seed=, generator=}, got %s'):format(who,
        describe(opts)), 3)
    end
    options.check(opts, SAMPLER_KEYS, who)
    opts = opts or {}
    data.check_seed(opts.seed, who .. ' seed')
    data._check_generator(opts.generator, who)
    if opts.seed ~= nil and opts.generator ~= nil then value_error(who .. ': give seed= or generator=, not both', 3) end
    return opts
  end
  local function setup_stream(self, opts)
    self.seed, self.generator, self.epoch, self.draws = opts.seed, opts.generator, 0, 0
    if opts.seed ~= nil then self._seed64 = rng.to_u64('seed', opts.seed) end
  end
  local function set_epoch(self, epoch)
    data.Sampler.set_epoch(self, epoch)
    self.epoch_set = true
  end
  local function list_of_numbers(who, what, v)
    if data.is_tensor(v) then
      if v:dim() ~= 1 then
        local shape = {}
        for i = 1, v:dim() do shape[i] = tostring(v:size(i)) end
        value_error(('%s: %s should be a 1d sequence but given %s have shape (%s%s)'):format(who, what, what,
          table.concat(shape, ', '), #shape == 1 and ',' or ''), 3)
      end
      return v:to('float64'):totable()
    end
    if type(v) ~= 'table' or getmetatable(v) ~= nil then
      value_error(('%s: %s must be a list of numbers or a 1-d tensor, got %s'):format(who, what, describe(v)), 3)
    end
    for k = 1, #v do
      if type(v[k]) ~= 'number' then
        value_error(('%s: %s should be a 1d sequence of numbers, got %s at position %d'):format(who, what,
          type(v[k]) == 'table' and 'a table (nested lists)' or describe(v[k]), k), 3)
      end
    end
    return v
  end

  --- SubsetRandomSampler(indices [, generator | {seed=, generator=}]): the given positions, in a
  --- new random order each pass (torch's SubsetRandomSampler); seed= / generator= / neither as
  --- RandomSampler.
  local SubsetRandomSampler = data.Sampler:extend('SubsetRandomSampler')
  data.SubsetRandomSampler = SubsetRandomSampler
  function SubsetRandomSampler:__init(indices, opts)
    local list = data.is_tensor(indices) and indices:totable() or indices
    if type(list) ~= 'table' or getmetatable(list) ~= nil then
      value_error(('SubsetRandomSampler: indices must be a list of positions (or a 1-d tensor), got %s'):format(
        describe(indices)), 2)
    end
    for k = 1, #list do
      local i = list[k]
      if type(i) ~= 'number' or i ~= math.floor(i) or i < 1 or i > 2 ^ 31 - 1 then
        errors.TypeError:raise(('SubsetRandomSampler: indices must be integer positions >= 1, got %s at position %d')
          :format(describe(i), k), 2)
      end
    end
    self.indices_list = list
    setup_stream(self, sampler_opts('SubsetRandomSampler', opts))
  end
  function SubsetRandomSampler:__len() return #self.indices_list end
  function SubsetRandomSampler:_order()
    local list = self.indices_list
    local n = #list
    local p = rng.perm_array(n, pass_key(self))
    for k = 0, n - 1 do p[k] = list[p[k]] end
    return p, n
  end
  function SubsetRandomSampler:indices()
    local p, n = self:_order()
    local t = {}
    for k = 1, n do t[k] = p[k - 1] end
    return t
  end
  SubsetRandomSampler.set_epoch = set_epoch

  --- WeightedRandomSampler(weights, num_samples, replacement=true [, generator | {seed=,
  --- generator=}]): torch's; num_samples positions, position i drawn with probability
  --- weights[i] / sum (replacement=true), or without replacement in the order of a weighted
  --- draw one after the other (each next pick among those left, by weight). The weights (a list
  --- or a 1-d tensor) are copied and checked when it is made (torch checks them at the first
  --- pass).
  local WeightedRandomSampler = data.Sampler:extend('WeightedRandomSampler')
  data.WeightedRandomSampler = WeightedRandomSampler
  function WeightedRandomSampler:__init(weights, num_samples, replacement, opts)
    if type(replacement) == 'table' or class.is_instance(replacement, data.Generator) then
      opts, replacement = replacement, nil
    end
    local who = 'WeightedRandomSampler'
    if type(num_samples) ~= 'number' or num_samples ~= math.floor(num_samples) or num_samples <= 0
      or num_samples > 2 ^ 31 - 1 then
      value_error(('%s: num_samples should be a positive integer value, but got num_samples=%s'):format(who,
        describe(num_samples)), 2)
    end
    if replacement == nil then replacement = true end
    if type(replacement) ~= 'boolean' then
      value_error(('%s: replacement should be a boolean value, but got replacement=%s'):format(who,
        describe(replacement)), 2)
    end
    local w = list_of_numbers(who, 'weights', weights)
    local n = #w
    local cdf = ffi.new('double[?]', math.max(n, 1))
    local total, positive = 0, 0
    for k = 1, n do
      local x = w[k]
      if x ~= x or x < 0 then
        errors.RuntimeError:raise(('%s: invalid multinomial distribution (encountering probability entry < 0): weights[%d]'
          .. ' is %s'):format(who, k, describe(x)), 2)
      end
      if x == math.huge then
        errors.RuntimeError:raise(('%s: invalid multinomial distribution (encountering probability entry = infinity or'
          .. ' NaN): weights[%d] is inf'):format(who, k), 2)
      end
      if x > 0 then positive = positive + 1 end
      total = total + x
      cdf[k - 1] = total
    end
    if not (total > 0) then
      errors.RuntimeError:raise(('%s: invalid multinomial distribution (sum of probabilities <= 0)'):format(who), 2)
    end
    if not replacement and num_samples > n then
      errors.RuntimeError:raise(('%s: cannot sample n_sample > prob_dist.size(-1) samples without replacement (%d > %d)')
        :format(who, num_samples, n), 2)
    end
    if not replacement and num_samples > positive then
      errors.RuntimeError:raise(('%s: invalid multinomial distribution (with replacement=False, not enough non-negative'
        .. ' category to sample): %d positive weights for num_samples=%d'):format(who, positive, num_samples), 2)
    end
    local copy = {}
    for k = 1, n do copy[k] = w[k] end
    self.weights, self.num_samples, self.replacement = copy, num_samples, replacement
    self._cdf, self._n, self._total = cdf, n, total
    setup_stream(self, sampler_opts(who, opts))
  end
  function WeightedRandomSampler:__len() return self.num_samples end
  function WeightedRandomSampler:_order()
    local state = pass_key(self)
    local n, ns, cdf, total = self._n, self.num_samples, self._cdf, self._total
    local out = order_array(ns)
    local u
    if self.replacement then
      for k = 0, ns - 1 do
        state, u = uniform(state)
        local x = u * total
        -- the first position whose cumulative weight exceeds x (zero weights are never picked)
        local lo, hi = 0, n - 1
        while lo < hi do
          local mid = math.floor((lo + hi) / 2)
          if cdf[mid] > x then hi = mid else lo = mid + 1 end
        end
        out[k] = lo + 1
      end
      return out, ns
    end
    -- without replacement: the exponential race (E_i / w_i, E_i ~ Exp(1)); the smallest
    -- key first, which is a weighted draw one after the other
    local w, keys, idx = self.weights, ffi.new('double[?]', n), {}
    for i = 1, n do
      state, u = uniform(state)
      keys[i - 1] = w[i] > 0 and -math.log(1 - u) / w[i] or math.huge
      idx[i] = i
    end
    table.sort(idx, function(a, b)
      local ka, kb = keys[a - 1], keys[b - 1]
      if ka ~= kb then return ka < kb end
      return a < b
    end)
    for k = 0, ns - 1 do out[k] = idx[k + 1] end
    return out, ns
  end
  function WeightedRandomSampler:indices()
    local p, n = self:_order()
    local t = {}
    for k = 1, n do t[k] = p[k - 1] end
    return t
  end
  WeightedRandomSampler.set_epoch = set_epoch
  function WeightedRandomSampler:__tostring()
    return ('WeightedRandomSampler(%d weights, num_samples=%d, replacement=%s)'):format(self._n, self.num_samples,
      tostring(self.replacement))
  end
end

return M
