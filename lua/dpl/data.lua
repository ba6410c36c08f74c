-- dpl.data: datasets, samplers and the DataLoader. Positions are 1-based (a
-- dataset of n items is indexed 1..n); ranks and epochs are 0-based. Batches of
-- tensors are assembled in C (index_select on the dataset's tensors, or stack
-- of the items), never as Lua tables of numbers.
local ffi = require 'ffi'
local class = require 'dpl.class'
local errors = require 'dpl.errors'
local options = require 'dpl.options'

local M = {}

local function misconf(fmt, ...)
  errors.MisconfigurationException:raise(fmt:format(...), 3)
end

-- options tables: an unknown key is an error (ValueError) naming the accepted ones
local check_opts, keys = options.check, options.keys
local LOADER_KEYS = keys('batch_size', 'shuffle', 'drop_last', 'sampler', 'batch_sampler', 'collate_fn', 'seed',
  'num_workers', 'generator', 'pin_memory', 'pin_memory_device', 'timeout', 'worker_init_fn', 'persistent_workers',
  'prefetch_factor', 'multiprocessing_context')
local RANDOM_KEYS = keys('seed', 'generator', 'replacement', 'num_samples')
local DIST_KEYS = keys('dataset', 'size', 'num_replicas', 'rank', 'shuffle', 'seed', 'drop_last')
local WRAPPER_KEYS = keys('sampler', 'num_replicas', 'rank', 'shuffle', 'seed', 'drop_last')

local function describe(v)
  if type(v) == 'string' then return ("string '%s'"):format(v) end
  if type(v) == 'number' then
    if v ~= v then return 'nan' end
    if v == math.huge or v == -math.huge then return tostring(v) end
    if v == math.floor(v) and math.abs(v) < 2 ^ 63 then return ('%.0f'):format(v) end
    local s = ('%.14g'):format(v)
    return tonumber(s) == v and s or ('%.17g'):format(v)
  end
  if v == nil then return 'nil' end
  return ('%s %s'):format(type(v), tostring(v))
end

-- v is an integer >= lo (and at most 2^53: math.huge, NaN and strings are errors)
local function check_int(name, v, lo)
  if type(v) ~= 'number' or v ~= math.floor(v) or v < lo or v > 2 ^ 53 then
    misconf('%s must be an integer >= %d, got %s', name, lo, describe(v))
  end
end

-- ------------------------------------------------------------------ random permutations
-- A permutation comes from a splitmix64 stream whose start is a key mixed from a
-- (seed, epoch) pair in 64-bit integer arithmetic: for a given epoch every seed gives its own
-- key, and for a given seed every epoch does (the mixing is a bijection of each while the
-- other is fixed), so negative seeds, seeds past 2^32 and consecutive epochs all give their
-- own orders. Nothing here touches the global random state; a sampler without seed= draws
-- its seed from dpl's global generator at each pass (as PyTorch's RandomSampler).
local U64 = ffi.typeof('uint64_t')
local I64 = ffi.typeof('int64_t')
local GOLDEN = 0x9E3779B97F4A7C15ULL

-- splitmix64's finalizer: a bijection of the 64-bit integers
local function mix64(x)
  x = bit.bxor(x, bit.rshift(x, 30)) * 0xBF58476D1CE4E5B9ULL
  x = bit.bxor(x, bit.rshift(x, 27)) * 0x94D049BB133111EBULL
  return bit.bxor(x, bit.rshift(x, 31))
end

local function splitmix(state)
  local z = state + GOLDEN
  return z, mix64(z)
end

local SAFE_INT = 2 ^ 53

--- The 64-bit pattern of an integer seed (or epoch): a Lua number that is an integer in
--- [-2^53, 2^53] (doubles past that are not all integers there: 2^53 + 1 does not exist),
--- or an int64_t / uint64_t cdata (any 64-bit value). Negatives are two's complement.
local function to_u64(name, v)
  if type(v) == 'number' then
    if v == math.floor(v) and v >= -SAFE_INT and v <= SAFE_INT then
      if v < 0 then return ffi.cast(U64, I64(v)) end
      return U64(v)
    end
    misconf('%s must be an integer in [-2^53, 2^53] (or an int64_t/uint64_t cdata), got %s', name, describe(v))
  elseif type(v) == 'cdata' and (ffi.istype(I64, v) or ffi.istype(U64, v)) then
    return ffi.cast(U64, v)
  end
  misconf('%s must be an integer, got %s', name, describe(v))
end

--- check_seed(v [, name]): v is nil or a valid seed (see to_u64); returns v.
function M.check_seed(v, name)
  if type(name) ~= 'string' then name = 'seed' end -- (a table label printed as 'table: 0x...')
  if v ~= nil then to_u64(name, v) end
  return v
end

-- the stream key of (seed, epoch), both uint64
local function stream_key(seed, epoch)
  return mix64(bit.bxor(mix64(seed + GOLDEN), epoch * 0xD1B54A32D192ED03ULL))
end

--- A seed drawn from dpl's global generator (dpl.manual_seed makes it reproducible): an
--- integer in [0, 2^53), one draw.
function M.draw_seed()
  return require('dpl.tensor').randint(0, SAFE_INT, { 1 }, { dtype = 'int64', device = 'cpu' }):item()
end

-- An epoch's order lives in an int32 array (slot k-1 holds the k-th position), outside
-- the Lua heap: a 60000-entry Lua table is ~0.5 MB that every garbage collection of the
-- epoch would walk (cold, after the batches' tensors went through the cache: ~0.4 ms a
-- collection); a cdata array is one object to the collector.
local I32A = ffi.typeof('int32_t[?]')
local MAX_POSITIONS = 2 ^ 31 - 1

local function order_array(n)
  if n > MAX_POSITIONS then misconf('a sampler over %d positions: at most %d are supported', n, MAX_POSITIONS) end
  return I32A(math.max(n, 1))
end

-- a random permutation of 1..n (Fisher-Yates) from a stream key, as an order array
local function perm_array(n, key)
  local p = order_array(n)
  for i = 0, n - 1 do p[i] = i + 1 end
  local state = key
  for i = n, 2, -1 do
    local r
    state, r = splitmix(state)
    local j = tonumber(r % U64(i))
    p[i - 1], p[j] = p[j], p[i - 1]
  end
  return p
end

local function array_to_list(a, n)
  local t = {}
  for i = 1, n do t[i] = a[i - 1] end
  return t
end

--- randperm(n [, seed]): a random permutation of 1..n (Fisher-Yates), as a list; the order
--- a RandomSampler{seed=seed} gives at epoch 0. Without seed, the seed is drawn from dpl's
--- global generator.
function M.randperm(n, seed)
  check_int('randperm size', n, 0)
  if seed == nil then seed = M.draw_seed() end
  return array_to_list(perm_array(n, stream_key(to_u64('randperm seed', seed), U64(0))), n)
end

-- ------------------------------------------------------------------ generators
--- Generator(): torch.Generator's part that the data path uses, a seeded stream of its own
--- (a splitmix64 state) for samplers, DataLoader{generator=} and random_split: each use draws
--- from it and advances it, so one generator seeded the same way gives the same sequence of
--- orders, independent of dpl's global generator. `g:manual_seed(s)` (returns g),
--- `g:initial_seed()`, `g:seed()` (a new seed from dpl's global generator), `g:get_state()` /
--- `g:set_state(state)` (a uint64_t cdata). A fresh one is seeded with torch's default seed,
--- 67280421310721. Its draws are dplhost's own, not torch's stream.
M.Generator = class.Object:extend('Generator')
M.Generator.DEFAULT_SEED = 67280421310721
function M.Generator:__init(opts)
  if opts ~= nil and type(opts) ~= 'table' then misconf('Generator takes no arguments (or {device=}), got %s', describe(opts)) end
  check_opts(opts, keys('device'), 'Generator')
  self:manual_seed(M.Generator.DEFAULT_SEED)
end
function M.Generator:manual_seed(seed)
  if getmetatable(self) == nil then misconf('Generator:manual_seed: call it with a colon, g:manual_seed(seed)') end
  self._state = mix64(to_u64('Generator:manual_seed seed', seed) + GOLDEN)
  self._seed = seed
  return self
end
function M.Generator:initial_seed() return self._seed end
function M.Generator:seed()
  local s = M.draw_seed()
  self:manual_seed(s)
  return s
end
function M.Generator:get_state() return U64(self._state) end
function M.Generator:set_state(state)
  if not (type(state) == 'cdata' and (ffi.istype(U64, state) or ffi.istype(I64, state))) then
    misconf('Generator:set_state: expected the uint64_t cdata that get_state returned, got %s', describe(state))
  end
  self._state = ffi.cast(U64, state)
  return self
end
-- the key of a new stream (one pass's draws), advancing the generator
function M.Generator:_next_key()
  local r
  self._state, r = splitmix(self._state)
  return mix64(r)
end
function M.Generator:__tostring() return ('Generator(initial_seed=%s)'):format(tostring(self._seed)) end
local function check_generator(g, who)
  if g ~= nil and not class.is_instance(g, M.Generator) then
    misconf('%s: generator must be a dpl.data.Generator (or nil), got %s', who,
      type(g) == 'table' and tostring(g.__name or 'a table') or describe(g))
  end
  return g
end
M._check_generator = check_generator

-- the stream key of a sampler's next pass: from (seed, epoch or pass number) with seed=, else
-- the sampler's generator's next key, else a seed drawn from dpl's global generator
local function pass_key(self)
  local pass = self.draws or 0
  self.draws = pass + 1
  if self._seed64 then return stream_key(self._seed64, to_u64('epoch', self.epoch_set and self.epoch or pass)) end
  if self.generator then return self.generator:_next_key() end
  return stream_key(U64(M.draw_seed()), U64(0))
end
-- uniform doubles in [0, 1) from a stream: returns (state, u)
local TWO_M53 = 2 ^ -53
local function uniform(state)
  local r
  state, r = splitmix(state)
  return state, tonumber(bit.rshift(r, 11)) * TWO_M53
end
M._rng = { pass_key = pass_key, uniform = uniform, splitmix = splitmix, mix64 = mix64, perm_array = perm_array,
  order_array = order_array, to_u64 = to_u64, U64 = U64 }

-- ------------------------------------------------------------------ datasets
--- Base class: subclasses define `__len(self)` and `get(self, i)` (i is 1-based);
--- `get_batch(self, indices)` is an optional fast path returning a whole batch.
M.Dataset = class.Object:extend('Dataset')

-- ds[i] is ds:get(i) (PyTorch's dataset[i], 1-based here): a number key missing from the
-- instance goes to get; other keys to the class. Subclasses made with :extend get the same.
function M._dataset_index(cls)
  return function(self, k)
    if type(k) == 'number' then return self:get(k) end
    return cls[k]
  end
end
M.Dataset.__index = M._dataset_index(M.Dataset)
function M.Dataset:extend(name)
  local cls = class.Object.extend(self, name)
  cls.__index = M._dataset_index(cls)
  return cls
end

function M.Dataset:__len()
  error(('%s must define __len'):format(self.__name), 2)
end

function M.Dataset:get(i)
  error(('%s must define get(i)'):format(self.__name), 2)
end

-- ds1 + ds2: torch's Dataset.__add__, a ConcatDataset (an IterableDataset's gives a ChainDataset)
function M.Dataset.__add(a, b)
  if M.is_iterable(a) then return M.ChainDataset({ a, b }) end
  return M.ConcatDataset({ a, b })
end

-- the length of a dataset or a sampler (what: 'a dataset', 'the sampler', ...)
local function len_of(obj, what)
  if type(obj) == 'userdata' then -- a DataLoader: its number of batches (torch's len(loader))
    local ok, mt = pcall(getmetatable, obj)
    if ok and type(mt) == 'table' and type(mt.__len) == 'function' then return mt.__len(obj) end
  end
  local f = type(obj) == 'table' and obj.__len
  if type(f) ~= 'function' then
    if type(obj) == 'table' then
      misconf('%s must have a __len method, got a table without one%s', what,
        obj.__name and (' (%s)'):format(obj.__name) or '')
    end
    misconf('%s must have a __len method, got %s', what, type(obj))
  end
  local n = f(obj)
  if type(n) ~= 'number' or n ~= math.floor(n) or n < 0 or n > SAFE_INT then
    misconf('len(%s) must be an integer >= 0, got %s', what:gsub('^an? ', ''):gsub('^the ', ''), describe(n))
  end
  return n
end

--- Number of items of a dataset (calls its __len; Lua 5.1 tables ignore #'s __len).
function M.len(ds) return len_of(ds, 'a dataset') end

--- TensorDataset(t1, t2, ...): item i is {t1[i], t2[i], ...}; all share their first dim.
M.TensorDataset = M.Dataset:extend('TensorDataset')

function M.TensorDataset:__init(...)
  local ts = { ... }
  if #ts == 0 then misconf('TensorDataset needs at least one tensor') end
  for k = 1, select('#', ...) do
    if not M.is_tensor(ts[k]) then
      errors.TypeError:raise(('TensorDataset: argument %d must be a tensor, got %s'):format(k, describe(ts[k])), 3)
    end
  end
  if ts[1]:dim() == 0 then misconf('TensorDataset: tensor 1 is 0-d (it needs a first dim to index)') end
  local n = ts[1]:size(1)
  for k, t in ipairs(ts) do
    if t:dim() == 0 or t:size(1) ~= n then
      misconf('TensorDataset: tensor %d has size %s in dim 1, tensor 1 has %d', k,
        t:dim() == 0 and 'none (0-d)' or tostring(t:size(1)), n)
    end
  end
  self.tensors, self.n = ts, n
end

function M.TensorDataset:__len() return self.n end

function M.TensorDataset:get(i)
  local item = {}
  for k, t in ipairs(self.tensors) do item[k] = t[i] end
  return item
end

function M.TensorDataset:get_batch(indices)
  local dpl = require 'dpl'
  -- (an int64 tensor made from 2.5 holds 2, as torch's: a sampler's non-integer position
  -- would silently fetch another item)
  for k = 1, #indices do
    local i = indices[k]
    if type(i) ~= 'number' or i % 1 ~= 0 then
      errors.TypeError:raise(('TensorDataset:get_batch: position %d of the batch is %s, not an integer index'
        .. ' (a sampler yields integers 1..len(dataset))'):format(k, describe(i)), 2)
    end
  end
  local idx = dpl.tensor(indices, { dtype = 'int64' })
  local out = {}
  for k, t in ipairs(self.tensors) do out[k] = t:index_select(1, idx) end
  return out
end

--- data.range(first, last): the list {first, ..., last} (for Subset).
function M.range(first, last)
  for i, v in ipairs({ { 'first', first }, { 'last', last } }) do
    local x = v[2]
    if type(x) ~= 'number' or x ~= math.floor(x) or math.abs(x) > 2 ^ 53 then
      errors.TypeError:raise(('data.range: %s (argument #%d) must be an integer, got %s'):format(v[1], i, describe(x)), 2)
    end
  end
  if last - first >= 2 ^ 31 then
    errors.ValueError:raise(('data.range: %s..%s has more than 2^31 items (a Lua list that long cannot be built)')
      :format(describe(first), describe(last)), 2)
  end
  local t = {}
  for i = first, last do t[#t + 1] = i end
  return t
end

--- Subset(dataset, indices): the items indices[1], indices[2], ... of dataset (1-based), as
--- torch.utils.data.Subset. get_batch maps the positions and uses the dataset's own
--- get_batch when it has one (so a Subset of FashionMNIST keeps the fast path).
M.Subset = M.Dataset:extend('Subset')

function M.Subset:__init(ds, indices)
  local n = M.len(ds)
  if type(indices) ~= 'table' then misconf('Subset: indices must be a list of positions, got %s', type(indices)) end
  for k = 1, #indices do
    local i = indices[k]
    if type(i) ~= 'number' then
      errors.TypeError:raise(('Subset: indices must be integers (positions 1..%d), got %s at position %d')
        :format(n, describe(i), k), 2)
    end
    if i ~= math.floor(i) or i < 1 or i > n then
      misconf('Subset: index %s (at position %d) is out of range 1..%d', tostring(i), k, n)
    end
  end
  self.dataset, self.indices, self.n = ds, indices, #indices
end

function M.Subset:__len() return self.n end

function M.Subset:get(i)
  local j = self.indices[i]
  if not j then misconf('Subset: index %s out of range 1..%d', tostring(i), self.n) end
  return self.dataset:get(j)
end

function M.Subset:get_batch(positions)
  if type(positions) ~= 'table' then positions = positions:totable() end
  local map, mapped = self.indices, {}
  for k = 1, #positions do
    local j = map[positions[k]]
    if not j then misconf('Subset: index %s out of range 1..%d', tostring(positions[k]), self.n) end
    mapped[k] = j
  end
  local ds = self.dataset
  if ds.get_batch then return ds:get_batch(mapped) end
  local items = {}
  for k = 1, #mapped do items[k] = ds:get(mapped[k]) end
  return M.default_collate(items)
end

--- ConcatDataset(datasets): the items of datasets[1], then those of datasets[2], ... (torch's
--- ConcatDataset); `cumulative_sizes[k]` is the number of items in datasets 1..k. get_batch
--- uses the datasets' own get_batch when they all have one (a batch spanning several of them
--- is gathered back into the asked order), else their items and default_collate.
M.ConcatDataset = M.Dataset:extend('ConcatDataset')

function M.ConcatDataset:__init(datasets)
  if type(datasets) ~= 'table' or getmetatable(datasets) ~= nil then
    errors.raise(('ConcatDataset expects a list of datasets {ds1, ds2, ...}, got %s')
      :format(type(datasets) == 'table' and 'a ' .. tostring(datasets.__name or 'table with a metatable')
        or describe(datasets)))
  end
  if #datasets == 0 then errors.raise('ConcatDataset: datasets should not be an empty list') end
  local cum, total = {}, 0
  for k = 1, #datasets do
    local d = datasets[k]
    if M.is_iterable(d) then
      errors.TypeError:raise(('ConcatDataset does not support IterableDataset (dataset %d is %s): chain iterable'
        .. ' datasets with ChainDataset'):format(k, tostring(d.__name)), 2)
    end
    total = total + len_of(d, ('ConcatDataset: dataset %d'):format(k))
    if type(d.get) ~= 'function' then
      misconf('ConcatDataset: dataset %d has no get(i) method', k)
    end
    cum[k] = total
  end
  self.datasets, self.cumulative_sizes, self.n = datasets, cum, total
end

function M.ConcatDataset:__len() return self.n end

-- dataset number and position in it of the i-th item (binary search over cumulative_sizes)
function M.ConcatDataset:_locate(i)
  if type(i) ~= 'number' or i ~= math.floor(i) or i < 1 or i > self.n then
    misconf('ConcatDataset: index %s out of range 1..%d', describe(i), self.n)
  end
  local cum = self.cumulative_sizes
  local lo, hi = 1, #cum
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if cum[mid] >= i then hi = mid else lo = mid + 1 end
  end
  return lo, i - (cum[lo - 1] or 0)
end

function M.ConcatDataset:get(i)
  local d, j = self:_locate(i)
  return self.datasets[d]:get(j)
end

-- tensors, and plain tables of them: what get_batch parts can be merged as
local function mergeable(b)
  if M.is_tensor(b) then return true end
  if type(b) ~= 'table' or getmetatable(b) ~= nil then return false end
  for _, v in pairs(b) do if not mergeable(v) then return false end end
  return true
end

-- parts (batches of the same structure) concatenated on dim 1, then rows gathered by perm
local function merge(parts, perm)
  local first = parts[1]
  if M.is_tensor(first) then
    for k = 2, #parts do if not M.is_tensor(parts[k]) then return nil end end
    return require('dpl').cat(parts, 1):index_select(1, perm)
  end
  local out = {}
  for key in pairs(first) do
    local col = {}
    for k = 1, #parts do
      if type(parts[k]) ~= 'table' or parts[k][key] == nil then return nil end
      col[k] = parts[k][key]
    end
    local m = merge(col, perm)
    if m == nil then return nil end
    out[key] = m
  end
  for k = 2, #parts do
    for key in pairs(parts[k]) do if out[key] == nil then return nil end end
  end
  return out
end

function M.ConcatDataset:get_batch(positions)
  if type(positions) ~= 'table' then positions = positions:totable() end
  local dss = self.datasets
  local which, local_pos, groups, order = {}, {}, {}, {}
  local fast = true
  for k = 1, #positions do
    local d, j = self:_locate(positions[k])
    which[k], local_pos[k] = d, j
    if not groups[d] then
      groups[d] = {}
      order[#order + 1] = d
      if type(dss[d].get_batch) ~= 'function' then fast = false end
    end
    local g = groups[d]
    g[#g + 1] = j
  end
  if fast and #order == 1 then return dss[order[1]]:get_batch(groups[order[1]]) end
  if fast and #order > 1 then
    -- each dataset's batch, concatenated in `order`; row k of the answer is row at[k] of that
    local start, parts = {}, {}
    local base = 0
    for g = 1, #order do
      local d = order[g]
      start[d] = base
      base = base + #groups[d]
      parts[g] = dss[d]:get_batch(groups[d])
    end
    local ok_parts = true
    for g = 1, #parts do if not mergeable(parts[g]) then ok_parts = false break end end
    if ok_parts then
      local seen, at = {}, {}
      for k = 1, #positions do
        local d = which[k]
        seen[d] = (seen[d] or 0) + 1
        at[k] = start[d] + seen[d]
      end
      local merged = merge(parts, require('dpl').tensor(at, { dtype = 'int64' }))
      if merged ~= nil then return merged end
    end
  end
  local items = {}
  for k = 1, #positions do items[k] = dss[which[k]]:get(local_pos[k]) end
  return M.default_collate(items)
end

--- random_split(dataset, lengths [, {seed=} | {generator=} | generator]): torch.utils.data.random_split (1.13): Subsets
--- of non-overlapping random positions, lengths[k] items in the k-th; lengths are counts that
--- sum to #dataset, or fractions that sum to 1 (floor(n * f) items each, the remainder handed
--- out one by one from the first split). The positions are a randperm(#dataset, seed), or a
--- permutation drawn from the data.Generator given; without either, dpl's global generator.
local SPLIT_KEYS = keys('seed', 'generator')
function M.random_split(ds, lengths, opts)
  if class.is_instance(opts, M.Generator) then opts = { generator = opts } end -- torch's random_split(ds, lengths, g)
  check_opts(opts, SPLIT_KEYS, 'random_split')
  opts = opts or {}
  M.check_seed(opts.seed, 'random_split seed')
  check_generator(opts.generator, 'random_split')
  if opts.seed ~= nil and opts.generator ~= nil then misconf('random_split: give seed= or generator=, not both') end
  local n = M.len(ds)
  if type(lengths) ~= 'table' or #lengths == 0 then
    errors.raise(('random_split: lengths must be a non-empty list of counts or fractions, got %s')
      :format(type(lengths) == 'table' and 'an empty table' or describe(lengths)))
  end
  local sum = 0
  for k = 1, #lengths do
    local v = lengths[k]
    if type(v) ~= 'number' or v ~= v or v < 0 or v == math.huge then
      errors.raise(('random_split: lengths[%d] must be a count or a fraction >= 0, got %s'):format(k, describe(v)))
    end
    sum = sum + v
  end
  local counts = {}
  if math.abs(sum - 1) <= 1e-9 and sum <= 1 then -- math.isclose(sum, 1): fractions
    local given = 0
    for k = 1, #lengths do
      if lengths[k] > 1 then errors.raise(('random_split: fraction at index %d is not between 0 and 1'):format(k)) end
      counts[k] = math.floor(n * lengths[k])
      given = given + counts[k]
    end
    for i = 0, n - given - 1 do
      local k = i % #counts + 1
      counts[k] = counts[k] + 1
    end
    for k = 1, #counts do
      if counts[k] == 0 then
        require('dpl.log').warn('Length of split at index %d is 0. This might result in an empty dataset.', k)
      end
    end
  else
    for k = 1, #lengths do
      if lengths[k] ~= math.floor(lengths[k]) then
        errors.raise(('random_split: lengths[%d] is %s: lengths are counts (integers) summing to len(dataset) = %d, '
          .. 'or fractions summing to 1 (these sum to %s)'):format(k, tostring(lengths[k]), n, tostring(sum)))
      end
      counts[k] = lengths[k]
    end
  end
  local total = 0
  for k = 1, #counts do total = total + counts[k] end
  if total ~= n then
    errors.raise(('Sum of input lengths does not equal the length of the input dataset! (%s != %d)')
      :format(tostring(total), n))
  end
  local perm = opts.generator and array_to_list(perm_array(n, opts.generator:_next_key()), n) or M.randperm(n, opts.seed)
  local out, off = {}, 0
  for k = 1, #counts do
    local idx = {}
    for i = 1, counts[k] do idx[i] = perm[off + i] end
    off = off + counts[k]
    out[k] = M.Subset(ds, idx)
  end
  return out
end

-- ------------------------------------------------------------------ samplers
--- A sampler yields dataset positions; `sampler:indices()` returns them for this epoch
--- (a list). The built-in samplers also have `sampler:_order()` -> (int32 array, count),
--- the same positions outside the Lua heap, which the DataLoader reads when present.
M.Sampler = class.Object:extend('Sampler')
local function check_epoch(epoch)
  if type(epoch) ~= 'number' or epoch ~= math.floor(epoch) or epoch < 0 or epoch > SAFE_INT then
    misconf('set_epoch: epoch must be an integer >= 0, got %s', describe(epoch))
  end
end
function M.Sampler:set_epoch(epoch)
  check_epoch(epoch)
  self.epoch = epoch
end
function M.Sampler:__len() return #self:indices() end
local function indices_from_order(self) return array_to_list(self:_order()) end

M.SequentialSampler = M.Sampler:extend('SequentialSampler')
function M.SequentialSampler:__init(n)
  if type(n) == 'table' then n = len_of(n, 'SequentialSampler: the dataset') end -- (torch's data_source)
  check_int('SequentialSampler size', n, 0)
  self.n = n
end
function M.SequentialSampler:__len() return self.n end
function M.SequentialSampler:_order()
  local n = self.n
  local p = order_array(n)
  for i = 0, n - 1 do p[i] = i + 1 end
  return p, n
end
M.SequentialSampler.indices = indices_from_order

--- RandomSampler(n or dataset, {seed=, generator=, replacement=false, num_samples=}): a new
--- order of 1..n at every pass (torch's RandomSampler, which takes the dataset: a table with
--- __len here stands for its length). With seed, the order of a pass is a function of (seed,
--- epoch) once set_epoch was called, else of (seed, the pass number counted from 0), so pass k
--- of a fresh sampler is epoch k. With generator (a data.Generator), each pass draws from it.
--- Without either, each pass draws its seed from dpl's global generator (PyTorch's
--- RandomSampler without a generator): dpl.manual_seed / dpl.seed_everything make the passes
--- reproducible, and set_epoch does not change them. replacement=true: num_samples (default n)
--- positions drawn uniformly with replacement; num_samples without replacement: whole
--- permutations one after the other, the last one cut (torch's rules).
M.RandomSampler = M.Sampler:extend('RandomSampler')
function M.RandomSampler:__init(n, opts)
  if type(n) == 'table' then n = len_of(n, 'RandomSampler: the dataset') end
  check_int('RandomSampler size', n, 0)
  check_opts(opts, RANDOM_KEYS, 'RandomSampler')
  opts = opts or {}
  self.n, self.seed, self.epoch, self.draws = n, M.check_seed(opts.seed, 'RandomSampler seed'), 0, 0
  if self.seed ~= nil then self._seed64 = to_u64('seed', self.seed) end
  self.generator = check_generator(opts.generator, 'RandomSampler')
  if self.seed ~= nil and self.generator ~= nil then misconf('RandomSampler: give seed= or generator=, not both') end
  if opts.replacement ~= nil and type(opts.replacement) ~= 'boolean' then
    errors.TypeError:raise(('RandomSampler: replacement should be a boolean value, but got replacement=%s')
      :format(describe(opts.replacement)), 2)
  end
  self.replacement = opts.replacement == true
  local ns = opts.num_samples
  if ns ~= nil and (type(ns) ~= 'number' or ns ~= math.floor(ns) or ns <= 0 or ns > MAX_POSITIONS) then
    errors.ValueError:raise(('RandomSampler: num_samples should be a positive integer value, but got num_samples=%s')
      :format(describe(ns)), 2)
  end
  self._num_samples = ns
  if n == 0 and ns ~= nil then
    errors.ValueError:raise(('RandomSampler: cannot draw num_samples=%d positions from an empty dataset'):format(ns), 2)
  end
end
function M.RandomSampler:__len() return self._num_samples or self.n end
function M.RandomSampler:_order()
  local key = pass_key(self)
  local n, ns = self.n, self._num_samples
  if ns == nil and not self.replacement then return perm_array(n, key), n end
  ns = ns or n
  local out = order_array(ns)
  if self.replacement then
    local state, u = key
    for k = 0, ns - 1 do
      state, u = uniform(state)
      out[k] = math.floor(u * n) + 1
    end
    return out, ns
  end
  -- whole permutations, then a cut one; the k-th one from its own key
  local k, state, r = 0, key
  while k < ns do
    state, r = splitmix(state)
    local p = perm_array(n, mix64(r))
    for i = 0, math.min(n, ns - k) - 1 do out[k + i] = p[i] end
    k = k + n
  end
  return out, ns
end
M.RandomSampler.indices = indices_from_order
function M.RandomSampler:set_epoch(epoch)
  check_epoch(epoch)
  self.epoch, self.epoch_set = epoch, true
end

--- DistributedSampler{dataset=|size=, num_replicas=, rank=, shuffle=true, seed=0, drop_last=false}:
--- PyTorch's rules: each rank gets ceil(n / replicas) positions (padding by repeating the
--- first ones), or floor with drop_last; with shuffle the order is a function of (seed, epoch),
--- the same on every rank (seed: an integer, see randperm; the ranks must agree on it).
M.DistributedSampler = M.Sampler:extend('DistributedSampler')
function M.DistributedSampler:__init(opts)
  if type(opts) ~= 'table' then misconf('DistributedSampler expects an options table') end
  check_opts(opts, DIST_KEYS, 'DistributedSampler')
  local n = opts.size or (opts.dataset and M.len(opts.dataset))
  if not n then misconf('DistributedSampler needs dataset= or size=') end
  if opts.size ~= nil then check_int('DistributedSampler size', opts.size, 0) end
  local dist_ok, dist = pcall(require, 'dpl.dist')
  local initialized = dist_ok and dist.is_initialized and dist.is_initialized()
  local replicas = opts.num_replicas or (initialized and dist.get_world_size()) or 1
  local rank = opts.rank or (initialized and dist.get_rank()) or 0
  check_int('num_replicas', replicas, 1)
  check_int('rank', rank, 0)
  if rank >= replicas then
    misconf('Invalid rank %d, rank should be in the interval [0, %d]', rank, replicas - 1)
  end
  self.n, self.num_replicas, self.rank = n, replicas, rank
  self.shuffle = opts.shuffle ~= false
  self.seed = M.check_seed(opts.seed, 'DistributedSampler seed') or 0
  self._seed64 = to_u64('seed', self.seed)
  self.drop_last = opts.drop_last and true or false
  self.epoch = 0
  if self.drop_last and n % replicas ~= 0 then
    self.num_samples = math.ceil((n - replicas) / replicas)
  else
    self.num_samples = math.ceil(n / replicas)
  end
  self.total_size = self.num_samples * replicas
end
function M.DistributedSampler:__len() return self.num_samples end
function M.DistributedSampler:_order()
  local n, total = self.n, self.total_size
  local all
  if self.shuffle then all = perm_array(n, stream_key(self._seed64, to_u64('epoch', self.epoch)))
  else
    all = order_array(n)
    for i = 0, n - 1 do all[i] = i + 1 end
  end
  -- padded by repeating the first positions (total > n), or cut (drop_last)
  local function at(k) return all[k % n] end
  local mine, m = order_array(self.num_samples), 0
  if n > 0 then
    for k = self.rank, total - 1, self.num_replicas do mine[m] = at(k); m = m + 1 end
  end
  return mine, m
end
M.DistributedSampler.indices = indices_from_order

--- DistributedSamplerWrapper{sampler=, num_replicas=, rank=, shuffle=false, seed=0, drop_last=false}:
--- Lightning's wrapper of a custom sampler for distributed runs: each pass takes the
--- positions the wrapped sampler yields (len(sampler) of them) and gives this rank its
--- share of that list by DistributedSampler's rules (every num_replicas-th entry from
--- rank, padded by repeating the first ones; with shuffle, in an order from (seed, epoch)).
--- set_epoch reaches the wrapped sampler too.
M.DistributedSamplerWrapper = M.DistributedSampler:extend('DistributedSamplerWrapper')
function M.DistributedSamplerWrapper:__init(opts)
  if type(opts) ~= 'table' then misconf('DistributedSamplerWrapper expects an options table') end
  check_opts(opts, WRAPPER_KEYS, 'DistributedSamplerWrapper')
  local s = opts.sampler
  if type(s) ~= 'table' or (type(s.indices) ~= 'function' and type(s._order) ~= 'function') then
    misconf('DistributedSamplerWrapper needs sampler= (a sampler with indices()), got %s', tostring(s))
  end
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  o.dataset, o.size, o.sampler = nil, len_of(s, 'the wrapped sampler'), nil
  if o.shuffle == nil then o.shuffle = false end
  M.DistributedSampler.__init(self, o)
  self.sampler = s
end
function M.DistributedSamplerWrapper:set_epoch(epoch)
  check_epoch(epoch)
  self.epoch = epoch
  if type(self.sampler.set_epoch) == 'function' then self.sampler:set_epoch(epoch) end
end
-- A sampler's positions for one pass: (order, count, off) with order[k - off] the k-th
-- position (1-based k): an int32 array outside the Lua heap from _order() (off 1), or the
-- Lua list from indices() (off 0).
local function sampler_order(s)
  if s._order then
    local order, count = s:_order()
    return order, count, 1
  end
  local list = s:indices()
  return list, #list, 0
end
function M.DistributedSamplerWrapper:_order()
  local s = self.sampler
  local src, count, off = sampler_order(s)
  if count ~= self.n then
    misconf('DistributedSamplerWrapper: the wrapped %s yielded %d positions in this pass, its length is %d',
      tostring(s.__name or s), count, self.n)
  end
  local mine, m = M.DistributedSampler._order(self) -- positions 1..n in the wrapped sampler's list
  for k = 0, m - 1 do mine[k] = src[mine[k] - off] end
  return mine, m
end
M.DistributedSamplerWrapper.indices = indices_from_order

--- UnrepeatedDistributedSampler{...} and UnrepeatedDistributedSamplerWrapper{...} (the options of
--- DistributedSampler / DistributedSamplerWrapper): Lightning's samplers for predict under
--- several processes, without padding: rank r takes positions r+1, r+1+num_replicas, ... of the
--- pass's order, so every item goes to one rank once and the ranks' lengths differ by at most
--- one (drop_last does not apply). A rank may get none (fewer items than ranks).
local function unrepeat(self)
  local n, r = self.n, self.rank
  self.num_samples = n > r and math.floor((n - r - 1) / self.num_replicas) + 1 or 0
  self.total_size = n
end
M.UnrepeatedDistributedSampler = M.DistributedSampler:extend('UnrepeatedDistributedSampler')
function M.UnrepeatedDistributedSampler:__init(opts)
  M.DistributedSampler.__init(self, opts)
  unrepeat(self)
end
M.UnrepeatedDistributedSamplerWrapper = M.DistributedSamplerWrapper:extend('UnrepeatedDistributedSamplerWrapper')
function M.UnrepeatedDistributedSamplerWrapper:__init(opts)
  M.DistributedSamplerWrapper.__init(self, opts)
  unrepeat(self)
end

-- ------------------------------------------------------------------ batch samplers
--- BatchSampler(sampler, batch_size, drop_last=false) (or (sampler, {batch_size=, drop_last=})):
--- PyTorch's BatchSampler, the sampler's positions of one pass in lists of batch_size
--- (`batch_sampler:batches()`, a list of lists; `dpl.data.len(bs)` of them). Any object with
--- `batches()` and `__len()` can be a DataLoader's batch_sampler; one that also has
--- `with_sampler(sampler)` (BatchSampler has) can be given a DistributedSampler by the Trainer.
M.BatchSampler = class.Object:extend('BatchSampler')
function M.BatchSampler:__init(sampler, batch_size, drop_last)
  if type(batch_size) == 'table' then
    check_opts(batch_size, keys('batch_size', 'drop_last'), 'BatchSampler')
    batch_size, drop_last = batch_size.batch_size, batch_size.drop_last
  end
  M._check_sampler(sampler, 'BatchSampler')
  check_int('BatchSampler batch_size', batch_size, 1)
  if drop_last ~= nil and type(drop_last) ~= 'boolean' then
    misconf('BatchSampler drop_last must be a boolean, got %s', describe(drop_last))
  end
  self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last == true
end
function M.BatchSampler:__len()
  local n = len_of(self.sampler, 'the sampler')
  if self.drop_last then return math.floor(n / self.batch_size) end
  return math.ceil(n / self.batch_size)
end
function M.BatchSampler:batches()
  local order, total, off = sampler_order(self.sampler)
  local bs, out = self.batch_size, {}
  local stop = self.drop_last and (total - total % bs) or total
  for pos = 1, stop, bs do
    local b = {}
    for k = pos, math.min(pos + bs - 1, stop) do b[#b + 1] = order[k - off] end
    out[#out + 1] = b
  end
  return out
end
function M.BatchSampler:set_epoch(epoch)
  if self.sampler.set_epoch then self.sampler:set_epoch(epoch) end
end
function M.BatchSampler:with_sampler(sampler)
  return getmetatable(self)(sampler, self.batch_size, self.drop_last)
end

-- ------------------------------------------------------------------ collation
require 'dpl.capi' -- the dpl_tensor type
local T_is_tensor -- dpl.tensor's own test (its handles are references to dpl_tensor)
local function is_tensor(v)
  if type(v) ~= 'cdata' then return false end
  T_is_tensor = T_is_tensor or require('dpl.tensor').is_tensor
  return T_is_tensor(v)
end
M.is_tensor = is_tensor

-- every item has the first one's kind (a number, a boolean), else a TypeError naming one that has not
local function same_kind(items, kind, what)
  for i = 2, #items do
    if type(items[i]) ~= kind then
      errors.TypeError:raise(('default_collate: item %d is %s where item 1 is %s'):format(
        i, is_tensor(items[i]) and 'a tensor' or describe(items[i]), what), 3)
    end
  end
end

-- items[i] and items[1] differ in key k: lists of unequal sizes (torch's RuntimeError) or a
-- dict missing a key (torch's KeyError)
local function unequal(items, i, k)
  local a, b = items[1], items[i]
  if type(k) == 'number' and (#a > 0 or #b > 0) then
    errors.RuntimeError:raise(('default_collate: each element in list of batch should be of equal size (item 1 has %d'
      .. ' elements, item %d has %d)'):format(#a, i, #b), 3)
  end
  local key = type(k) == 'string' and ("'" .. k .. "'") or tostring(k)
  if a[k] ~= nil then
    errors.KeyError:raise(('default_collate: item %d has no key %s (item 1 has)'):format(i, key), 3)
  end
  errors.KeyError:raise(('default_collate: item %d has the key %s, item 1 has not'):format(i, key), 3)
end

--- Default collation: a list of items -> one batch. Tensors are stacked on a new
--- first dim, numbers become a tensor (int64 when all integers, else float64), booleans
--- a bool tensor (as torch's), tables are collated key by key, strings and other values
--- are listed.
function M.default_collate(items)
  if type(items) ~= 'table' or is_tensor(items) then
    errors.TypeError:raise(('default_collate: items must be a list of dataset items, got %s'):format(describe(items)), 2)
  end
  local first = items[1]
  if is_tensor(first) then
    for i = 2, #items do
      if not is_tensor(items[i]) then
        errors.TypeError:raise(('default_collate: item %d is %s where item 1 is a tensor'):format(
          i, type(items[i]) == 'table' and 'a table' or describe(items[i])), 2)
      end
    end
    return require('dpl').stack(items, 1)
  elseif type(first) == 'number' then
    same_kind(items, 'number', 'a number')
    local integral = true
    for i = 1, #items do
      if items[i] ~= math.floor(items[i]) then integral = false break end
    end
    return require('dpl').tensor(items, { dtype = integral and 'int64' or 'float64' })
  elseif type(first) == 'boolean' then
    same_kind(items, 'boolean', 'a boolean')
    return require('dpl').tensor(items, { dtype = 'bool' })
  elseif type(first) == 'table' and getmetatable(first) == nil then
    local out = {}
    for k in pairs(first) do
      local col = {}
      for i = 1, #items do
        if type(items[i]) ~= 'table' then
          errors.TypeError:raise(('default_collate: item %d is %s where item 1 is a table'):format(
            i, is_tensor(items[i]) and 'a tensor' or describe(items[i])), 2)
        end
        local v = items[i][k]
        if v == nil then unequal(items, i, k) end
        col[i] = v
      end
      out[k] = M.default_collate(col)
    end
    for i = 2, #items do -- (a key item 1 lacks would be dropped: torch refuses lists of unequal sizes)
      for k in pairs(items[i]) do
        if first[k] == nil then unequal(items, i, k) end
      end
    end
    return out
  end
  return items
end

-- ------------------------------------------------------------------ DataLoader
local Loader = {}
Loader.__index = Loader

local function check_sampler(s, who)
  local ok = (type(s) == 'table' or type(s) == 'userdata')
  if ok then
    local okf, f, g = pcall(function() return s._order, s.indices end)
    ok = okf and (type(f) == 'function' or type(g) == 'function')
  end
  if not ok then
    misconf('%s: sampler must be a sampler (an object with indices() and __len(), e.g. a '
      .. 'data.Sampler:extend(...) subclass), got %s', who or 'DataLoader',
      type(s) == 'table' and 'a table without indices()' or describe(s))
  end
end
M._check_sampler = check_sampler
local function check_batch_sampler(s)
  local ok = (type(s) == 'table' or type(s) == 'userdata')
  if ok then
    local okf, f = pcall(function() return s.batches end)
    ok = okf and type(f) == 'function'
  end
  if not ok then
    misconf('DataLoader: batch_sampler must be a batch sampler (an object with batches() and __len(), e.g. '
      .. 'data.BatchSampler(sampler, batch_size)), got %s', type(s) == 'table' and 'a table without batches()'
      or describe(s))
  end
end

-- torch's DataLoader options that concern worker processes, with torch 1.13's checks
-- (persistent_workers, prefetch_factor and multiprocessing_context need num_workers > 0)
local function check_worker_opts(opts)
  local function bad(msg) errors.ValueError:raise('DataLoader: ' .. msg, 4) end
  local nw = opts.num_workers or 0
  if opts.pin_memory ~= nil and type(opts.pin_memory) ~= 'boolean' then
    bad(('pin_memory must be a boolean, got %s'):format(describe(opts.pin_memory)))
  end
  if opts.pin_memory_device ~= nil and type(opts.pin_memory_device) ~= 'string' then
    bad(('pin_memory_device must be a string, got %s'):format(describe(opts.pin_memory_device)))
  end
  local to = opts.timeout
  if to ~= nil and (type(to) ~= 'number' or to ~= to) then bad(('timeout must be a number, got %s'):format(describe(to))) end
  if to ~= nil and to < 0 then bad('timeout option should be non-negative') end
  if opts.worker_init_fn ~= nil and type(opts.worker_init_fn) ~= 'function' then
    bad(('worker_init_fn must be a function, got %s'):format(describe(opts.worker_init_fn)))
  end
  if opts.persistent_workers ~= nil and type(opts.persistent_workers) ~= 'boolean' then
    bad(('persistent_workers must be a boolean, got %s'):format(describe(opts.persistent_workers)))
  end
  if opts.persistent_workers and nw == 0 then bad('persistent_workers option needs num_workers > 0') end
  local pf = opts.prefetch_factor
  if nw == 0 then
    if pf ~= nil and pf ~= 2 then
      bad('prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 to enable multiprocessing.')
    end
  elseif pf ~= nil and (type(pf) ~= 'number' or pf % 1 ~= 0 or pf < 1) then
    bad(('prefetch_factor must be a positive integer, got %s'):format(describe(pf)))
  end
  local mc = opts.multiprocessing_context
  if mc ~= nil then
    if nw == 0 then
      bad('multiprocessing_context can only be used with multi-process loading (num_workers > 0), but got num_workers=0')
    end
    if type(mc) ~= 'string' then
      bad(('multiprocessing_context must be a start method name (a string), got %s'):format(describe(mc)))
    end
    if mc ~= 'fork' then
      local known = { spawn = true, forkserver = true }
      if not known[mc] then
        bad(("multiprocessing_context option should specify a valid start method in ['fork', 'spawn',"
          .. " 'forkserver'], but got multiprocessing_context='%s'"):format(mc))
      end
      errors.NotImplementedError:raise(("DataLoader: multiprocessing_context='%s': dplhost's workers are forked from"
        .. " the training process (the Lua state cannot be pickled); only 'fork' is supported"):format(mc), 4)
    end
  end
end

-- torch takes any iterable as sampler / batch_sampler: a plain list of positions (or of lists of
-- them) becomes a ListSampler / ListBatchSampler (opts copied, the user's table left alone)
M.ListSampler = M.Sampler:extend('ListSampler')
function M.ListSampler:__init(list) self.list = list end
function M.ListSampler:__len() return #self.list end
function M.ListSampler:indices()
  local t = {}
  for k = 1, #self.list do t[k] = self.list[k] end
  return t
end
M.ListBatchSampler = class.Object:extend('ListBatchSampler')
function M.ListBatchSampler:__init(list) self.list = list end
function M.ListBatchSampler:__len() return #self.list end
function M.ListBatchSampler:batches() return self.list end
local function plain_list(v, elem)
  if type(v) ~= 'table' or getmetatable(v) ~= nil or #v == 0 or next(v, #v) ~= nil then return false end
  for k = 1, #v do if type(v[k]) ~= elem then return false end end
  return true
end
function M._list_samplers(opts)
  local s, b = opts.sampler, opts.batch_sampler
  local ls, lb = plain_list(s, 'number'), plain_list(b, 'table')
  if not ls and not lb then return opts end
  local o = {}
  for k, v in pairs(opts) do o[k] = v end
  if ls then o.sampler = M.ListSampler(s) end
  if lb then o.batch_sampler = M.ListBatchSampler(b) end
  return o
end

--- DataLoader(dataset, {batch_size=1, shuffle=false, drop_last=false, sampler=, batch_sampler=,
--- collate_fn=, seed=, generator=, num_workers=0, ...}).
--- Iterate with `for batch in loader:iter() do ... end` (or `for batch in loader do`: a new pass
--- each loop); `#loader` is the number of batches.
--- shuffle=true makes a RandomSampler(#dataset, {seed=seed, generator=generator}): without
--- either, each pass draws its seed from dpl's global generator (dpl.manual_seed makes the order
--- reproducible). batch_size=false is torch's batch_size=None: no batching, each item goes
--- through collate_fn (default: as it is). An IterableDataset is read in its own order, batch_size
--- items at a time (no sampler: shuffle, sampler and batch_sampler are errors, as torch's).
function M.DataLoader(ds, opts)
  if ds == nil then -- (`local a, b = x and f() or g()` keeps one value: a split's second part is nil)
    errors.TypeError:raise('DataLoader: the dataset (argument 1) is nil; expected a Dataset (a table with'
      .. ' __len and get, a TensorDataset, a list) or an IterableDataset', 2)
  end
  opts = opts or {}
  if type(opts) ~= 'table' then misconf('DataLoader options must be a table, got %s', type(opts)) end
  check_opts(opts, LOADER_KEYS, 'DataLoader')
  local iterable = M.is_iterable(ds)
  local n
  if iterable then
    if type(ds.__iter) ~= 'function' then misconf('DataLoader: %s must define __iter()', tostring(ds.__name)) end
    for _, k in ipairs({ 'shuffle', 'sampler', 'batch_sampler' }) do
      local v = opts[k]
      if v ~= nil and v ~= false then
        errors.ValueError:raise(('DataLoader with IterableDataset: expected unspecified %s option, but got %s=%s')
          :format(k, k, type(v) == 'table' and tostring(v.__name or 'a table') or type(v) == 'boolean' and tostring(v) or describe(v)), 2)
      end
    end
  else
    n = M.len(ds)
  end
  local bs = opts.batch_size
  if bs == nil then bs = 1 end
  if bs ~= false then check_int('batch_size', bs, 1) end
  for _, k in ipairs({ 'shuffle', 'drop_last' }) do
    if opts[k] ~= nil and type(opts[k]) ~= 'boolean' then
      misconf('%s must be a boolean, got %s', k, describe(opts[k]))
    end
  end
  if bs == false and opts.drop_last then
    errors.ValueError:raise('DataLoader: batch_size=None option disables auto-batching and is mutually exclusive'
      .. ' with drop_last (batch_size=false is torch\'s None)', 2)
  end
  M.check_seed(opts.seed, 'DataLoader seed')
  check_generator(opts.generator, 'DataLoader')
  if opts.seed ~= nil and opts.generator ~= nil then misconf('DataLoader: give seed= or generator=, not both') end
  -- torch's num_workers: 0 (the default) loads in this process, N > 0 in N forked worker
  -- processes (dpl.data_workers)
  if opts.num_workers ~= nil then check_int('num_workers', opts.num_workers, 0) end
  check_worker_opts(opts)
  opts = M._list_samplers(opts)
  if opts.sampler ~= nil then check_sampler(opts.sampler) end
  if opts.sampler and opts.shuffle then
    misconf('sampler option is mutually exclusive with shuffle')
  end
  if opts.batch_sampler ~= nil then
    check_batch_sampler(opts.batch_sampler)
    if (opts.batch_size ~= nil and opts.batch_size ~= 1) or opts.shuffle or opts.sampler or opts.drop_last then
      misconf('batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last')
    end
  end
  if opts.collate_fn ~= nil and type(opts.collate_fn) ~= 'function' then
    misconf('collate_fn must be a function, got %s', type(opts.collate_fn))
  end
  local sampler
  if not iterable then
    sampler = opts.sampler or (opts.shuffle and M.RandomSampler(n, { seed = opts.seed, generator = opts.generator }))
      or M.SequentialSampler(n)
  end
  local bsam = opts.batch_sampler
  if bsam then -- (the Trainer's samplers act on the batch sampler's own; loader.batch_size is nil, as torch's)
    sampler, bs = bsam.sampler or sampler, nil
  end
  local impl = setmetatable({
    dataset = ds, batch_size = bs or nil, drop_last = opts.drop_last and true or false,
    sampler = sampler, batch_sampler = bsam, collate_fn = opts.collate_fn, generator = opts.generator,
    pin_memory = opts.pin_memory == true, timeout = opts.timeout or 0, worker_init_fn = opts.worker_init_fn,
    num_workers = opts.num_workers or 0, persistent_workers = opts.persistent_workers == true,
    prefetch_factor = opts.prefetch_factor or 2, multiprocessing_context = opts.multiprocessing_context,
    _iterable = iterable,
  }, Loader)
  -- a userdata proxy, so that #loader works (Lua 5.1 ignores __len on tables)
  local proxy = newproxy(true)
  local mt = getmetatable(proxy)
  mt.__index = impl
  mt.__newindex = impl
  mt.__len = function()
    local nb = impl:num_batches()
    if nb == nil then -- torch's len() of a loader over an IterableDataset without __len__
      errors.TypeError:raise(("object of type '%s' has no len() (an IterableDataset without __len: the DataLoader's"
        .. " length is unknown)"):format(tostring(ds.__name or 'IterableDataset')), 2)
    end
    return nb
  end
  -- `for batch in loader do`: the generic for calls the loader with a nil control value
  -- first (a new pass), then with the batch it returned last (the same pass). The pass is
  -- found from that batch (a weak key: the loop's control value holds it), so a loop left
  -- with break lets its pass be collected (and a pass's workers end) once the batch is
  -- unreachable; a batch that cannot be a weak key (a number, a string) holds it here.
  local passes = setmetatable({}, { __mode = 'k' })
  local held
  mt.__call = function(_, _, prev)
    local pass
    if prev == nil then
      held = nil
      pass = impl:iter()
    else
      pass = passes[prev] or held
    end
    local b = pass and pass()
    held = nil
    if b ~= nil then
      local tb = type(b)
      if tb == 'table' or tb == 'userdata' or tb == 'cdata' or tb == 'function' or tb == 'thread' then
        passes[b] = pass
      else
        held = pass
      end
    end
    return b
  end
  mt.__tostring = function()
    local ok, nb = pcall(impl.num_batches, impl)
    nb = ok and nb ~= nil and tostring(nb) or '?'
    if bsam then return ('DataLoader(%s batches from %s)'):format(nb, tostring(bsam.__name or 'a batch sampler')) end
    if bs == false then return ('DataLoader(%s items, unbatched)'):format(nb) end
    return ('DataLoader(%s batches of %d)'):format(nb, bs)
  end
  return proxy
end

--- A new DataLoader like this one (dataset, batch size, drop_last, collate_fn and any other
--- field) that draws from `sampler`; this loader is left as it is (the Trainer gives the
--- DDP ranks their own loaders this way, as Lightning's _update_dataloader).
function Loader:with_sampler(sampler)
  local impl = type(self) == 'userdata' and getmetatable(self).__index or self
  local new
  if impl.batch_sampler then
    local b = impl.batch_sampler
    local ok, f = pcall(function() return b.with_sampler end)
    if not (ok and type(f) == 'function') then
      misconf('DataLoader: its batch_sampler (%s) cannot be given another sampler (a DistributedSampler): give it a '
        .. 'with_sampler(sampler) method (data.BatchSampler has one), or set use_distributed_sampler=false and shard '
        .. 'the data yourself', tostring(b.__name or 'a batch sampler'))
    end
    new = M.DataLoader(impl.dataset, { batch_sampler = b:with_sampler(sampler), collate_fn = impl.collate_fn,
      num_workers = impl.num_workers })
  else
    if impl._iterable then
      misconf('DataLoader: a loader over an IterableDataset has no sampler to replace (%s)', tostring(sampler.__name or sampler))
    end
    new = M.DataLoader(impl.dataset, { batch_size = impl.batch_size or false, drop_last = impl.drop_last,
      sampler = sampler, collate_fn = impl.collate_fn, num_workers = impl.num_workers })
  end
  local nimpl = getmetatable(new).__index
  for k, v in pairs(impl) do
    if rawget(nimpl, k) == nil and k ~= '_pool' then nimpl[k] = v end
  end
  -- the worker options as they are (not the workers: the new loader starts its own)
  nimpl.persistent_workers, nimpl.prefetch_factor = impl.persistent_workers, impl.prefetch_factor
  nimpl.timeout, nimpl.worker_init_fn = impl.timeout, impl.worker_init_fn
  nimpl.multiprocessing_context = impl.multiprocessing_context
  return new
end

--- The number of batches of a pass; nil when unknown (an IterableDataset without __len).
function Loader:num_batches()
  if self.batch_sampler then return len_of(self.batch_sampler, 'the batch_sampler') end
  local n
  if self._iterable then
    if type(self.dataset.__len) ~= 'function' then return nil end
    n = len_of(self.dataset, 'the IterableDataset')
  else
    n = len_of(self.sampler, 'the sampler')
  end
  if self.batch_size == nil then return n end
  if self.drop_last then return math.floor(n / self.batch_size) end
  return math.ceil(n / self.batch_size)
end

function Loader:set_epoch(epoch)
  local s = self.batch_sampler or self.sampler
  if s and s.set_epoch then s:set_epoch(epoch) end
end

function Loader:batch(indices)
  local ds = self.dataset
  if self.batch_size == nil and not self.batch_sampler then -- batch_size=false: one item, not batched
    local item = ds:get(indices[1])
    if self.collate_fn then return self.collate_fn(item) end
    return item
  end
  if not self.collate_fn and ds.get_batch then return ds:get_batch(indices) end
  local items = {}
  for k = 1, #indices do items[k] = ds:get(indices[k]) end
  if not self.collate_fn then
    for k = 1, #indices do
      if items[k] == nil then
        errors.TypeError:raise(('DataLoader: %s:get(%d) returned nil; default_collate takes tensors, numbers'
          .. ' and tables of them (a collate_fn of your own can drop missing items)'):format(
          tostring(ds.__name or 'dataset'), indices[k]), 3)
      end
    end
  end
  return (self.collate_fn or M.default_collate)(items)
end

-- one pass over an IterableDataset: its items, batch_size at a time (the last batch shorter,
-- or dropped with drop_last), through collate_fn; batch_size=false: the items one by one
function Loader:_iter_iterable()
  local ds, bs, collate = self.dataset, self.batch_size, self.collate_fn
  local it = ds:__iter()
  if type(it) ~= 'function' then
    errors.TypeError:raise(('DataLoader: %s:__iter() must return an iterator function (each call the next item, nil'
      .. ' at the end; coroutine.wrap makes one from a generator), got %s'):format(tostring(ds.__name), describe(it)), 3)
  end
  local done, nb = false, 0
  self.last_batch_indices = nil
  return function()
    if done then return nil end
    if bs == nil then
      local x = it()
      if x == nil then done = true return nil end
      if collate then
        x = collate(x)
        if x == nil then errors.TypeError:raise(('DataLoader: collate_fn returned nil for item %d'):format(nb + 1), 2) end
      end
      nb = nb + 1
      return x
    end
    local items, k = {}, 0
    while k < bs do
      local x = it()
      if x == nil then done = true break end
      k = k + 1
      items[k] = x
    end
    if k == 0 or (done and self.drop_last and k < bs) then return nil end
    nb = nb + 1
    local b = (collate or M.default_collate)(items)
    if b == nil then
      errors.TypeError:raise(('DataLoader: %s returned nil for batch %d (a batch cannot be nil)'):format(
        collate and 'collate_fn' or 'default_collate', nb), 2)
    end
    return b
  end
end

--- Ends this loader's worker processes now (num_workers > 0; persistent ones too, or the
--- ones of a pass left with a break); the next pass starts new ones. A no-op without.
function Loader:shutdown_workers()
  local impl = type(self) == 'userdata' and getmetatable(self).__index or self
  if rawget(impl, '_pool') then require('dpl.data_workers').shutdown(impl) end
end

--- Iterator over the batches of one pass (one epoch); with num_workers > 0 the batches are
--- loaded by worker processes (dpl.data_workers).
function Loader:iter()
  if self.num_workers > 0 then
    local w = require('dpl.data_workers')
    w._register_atexit()
    return w.iter(self)
  end
  if self._iterable then return self:_iter_iterable() end
  if self.batch_sampler then
    local lists, nb = self.batch_sampler:batches(), 0
    if type(lists) ~= 'table' then
      errors.TypeError:raise(('DataLoader: batch_sampler:batches() must return a list of lists of positions, got %s'):format(
        describe(lists)), 2)
    end
    return function()
      nb = nb + 1
      local idx = lists[nb]
      if idx == nil then return nil end
      if type(idx) ~= 'table' then
        errors.TypeError:raise(('DataLoader: batch %d of the batch_sampler is %s, not a list of positions'):format(
          nb, describe(idx)), 2)
      end
      self.last_batch_indices = idx
      local b = self:batch(idx)
      if b == nil then errors.TypeError:raise(('DataLoader: the collation returned nil for batch %d'):format(nb), 2) end
      return b
    end
  end
  local sampler = self.sampler
  local order, total, off = sampler_order(sampler) -- order[k - off] is the k-th position (1-based k)
  local bs = self.batch_size or 1
  local stop = self.drop_last and (total - total % bs) or total
  local pos, nb = 1, 0
  return function()
    if pos > stop then return nil end
    local last = math.min(pos + bs - 1, stop)
    local idx = {}
    for k = pos, last do idx[k - pos + 1] = order[k - off] end
    pos = last + 1
    nb = nb + 1
    self.last_batch_indices = idx -- (the dataset positions of the batch: BasePredictionWriter's batch_indices)
    local b = self:batch(idx)
    if b == nil then
      -- nil would end the caller's for loop early, the rest of the epoch silently skipped
      local ds = self.dataset
      local who = self.collate_fn and 'collate_fn'
        or (ds.get_batch and ('%s:get_batch'):format(tostring(ds.__name or 'dataset'))) or 'default_collate'
      errors.TypeError:raise(('DataLoader: %s returned nil for batch %d (a batch cannot be nil)'):format(who, nb), 2)
    end
    return b
  end
end

--- CombinedLoader(loaders, mode='min_size'): several loaders stepped together (a list or a
--- table of them by name; see dpl.combined_loader). fit combines several training loaders by
--- itself (Trainer{multiple_trainloader_mode=}).
function M.CombinedLoader(loaders, mode) return require('dpl.combined_loader').new(loaders, mode) end

-- IterableDataset, ChainDataset, get_worker_info, WeightedRandomSampler, SubsetRandomSampler
require('dpl.data_extra').install(M)
M._sampler_order = sampler_order
--- get_worker_info(): {id (0-based), num_workers, seed, dataset} in a DataLoader worker
--- process, nil in the training process (torch's).
M.get_worker_info = require('dpl.data_workers').get_worker_info

return M
