-- dpl.combined_loader: CombinedLoader (also dpl.data.CombinedLoader), Lightning 1.9's way of
-- training on several loaders at once: a list or a map of loaders (nested collections too)
-- whose batches come out in the same shape, one batch of each loader per step. Mode
-- "max_size_cycle" runs as long as the longest loader, restarting the shorter ones when they
-- run out; "min_size" stops when the shortest runs out. The Trainer builds one when fit gets
-- several training loaders (Trainer{multiple_trainloader_mode=}).
local errors = require 'dpl.errors'

local M = {}
M.SUPPORTED_MODES = { 'min_size', 'max_size_cycle' }

local Combined = {}
Combined.__index = Combined
Combined.__name = 'CombinedLoader'

local function misconf(msg, ...) errors.MisconfigurationException:raise(msg:format(...), 3) end

local function is_loader(x)
  local tx = type(x)
  if tx == 'userdata' then return true end
  if tx == 'table' and getmetatable(x) ~= nil then return true end
  return false
end
M.is_loader = is_loader

-- the keys of a plain table in a fixed order: the list part first, then the others sorted
local function ordered_keys(coll)
  local n = #coll
  local keys = {}
  for i = 1, n do keys[i] = i end
  local rest = {}
  for k in pairs(coll) do
    if not (type(k) == 'number' and k >= 1 and k <= n and k % 1 == 0) then rest[#rest + 1] = k end
  end
  table.sort(rest, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(rest) do keys[#keys + 1] = k end
  return keys
end

--- A copy of a collection (a loader, or a plain table of them, nested) with each loader
--- replaced by f(loader, i, path), i counting the loaders in a fixed order (the list part
--- first, then the other keys sorted). The user's tables are left as they are.
local function map_leaves(coll, f, path, counter)
  path = path or ''
  counter = counter or { 0 }
  if is_loader(coll) then
    counter[1] = counter[1] + 1
    return f(coll, counter[1], path)
  end
  if type(coll) ~= 'table' then
    misconf('CombinedLoader: expected DataLoaders (or lists / tables of them), got %s at %s', type(coll),
      path == '' and 'the top' or path)
  end
  local out = {}
  for _, k in ipairs(ordered_keys(coll)) do
    out[k] = map_leaves(coll[k], f, path .. (type(k) == 'number' and '[' .. k .. ']' or '.' .. tostring(k)), counter)
  end
  return out
end
M.map_leaves = map_leaves

-- the number of batches of a loader, nil when unknown
local function loader_len(l)
  local ok, f = pcall(function() return l.num_batches end)
  if ok and type(f) == 'function' then return f(l) end
  local ok2, n = pcall(function() return #l end)
  if ok2 and type(n) == 'number' then return n end
  return nil
end

--- CombinedLoader(loaders, mode='min_size'): `loaders` a list or table of loaders (nested
--- allowed, at least one loader). Lightning's default mode here is "min_size"; the Trainer
--- passes its multiple_trainloader_mode ("max_size_cycle" by default).
function M.new(loaders, mode)
  mode = mode or 'min_size'
  if mode ~= 'min_size' and mode ~= 'max_size_cycle' then
    misconf("CombinedLoader: invalid mode %s (the modes are 'min_size' and 'max_size_cycle')", tostring(mode))
  end
  local leaves = {}
  map_leaves(loaders, function(l, i) leaves[i] = l end)
  if #leaves == 0 then misconf('CombinedLoader: no DataLoader given') end
  return setmetatable({ loaders = loaders, mode = mode, _leaves = leaves }, Combined)
end

--- The number of batches: the longest loader's ("max_size_cycle") or the shortest's
--- ("min_size"); nil when a loader's length is unknown (max_size_cycle) or all are (min_size).
function Combined:num_batches()
  local best
  for _, l in ipairs(self._leaves) do
    local n = loader_len(l)
    if n == nil then
      if self.mode == 'max_size_cycle' then return nil end
    elseif best == nil or (self.mode == 'max_size_cycle' and n > best) or (self.mode == 'min_size' and n < best) then
      best = n
    end
  end
  return best
end

--- set_epoch(e) for each loader that has it (their samplers reshuffle per epoch).
function Combined:set_epoch(epoch)
  for _, l in ipairs(self._leaves) do
    local ok, f = pcall(function() return l.set_epoch end)
    if ok and type(f) == 'function' then f(l, epoch) end
  end
end

--- An iterator over the combined batches (nil at the end). With "max_size_cycle" a loader that
--- runs out starts a new pass (a shuffled one draws a new order) until every loader has run out
--- at least once and the longest has ended.
function Combined:iter()
  local leaves, cycle = self._leaves, self.mode == 'max_size_cycle'
  local nl = #leaves
  local its, done = {}, {}
  local n_done = 0
  for i, l in ipairs(leaves) do its[i] = l:iter() end
  local got = {}
  local finished = false
  local function pick(_, i) return got[i] end
  return function()
    if finished then return nil end
    local empty
    for i = 1, nl do
      got[i] = its[i]()
      if got[i] == nil then
        if not cycle then finished = true return nil end
        if not done[i] then done[i] = true n_done = n_done + 1 end
        empty = true
      end
    end
    if empty then
      -- every loader has run out once: the epoch is over (no loader is restarted for nothing)
      if n_done == nl then finished = true return nil end
      for i = 1, nl do
        if got[i] == nil then
          its[i] = leaves[i]:iter()
          got[i] = its[i]()
          if got[i] == nil then
            misconf('CombinedLoader: loader %d yields no batch: it cannot be cycled in max_size_cycle mode', i)
          end
        end
      end
    end
    return map_leaves(self.loaders, pick)
  end
end

function Combined:__tostring()
  return ('CombinedLoader(%d loaders, mode=%s)'):format(#self._leaves, self.mode)
end

--- True when x is a CombinedLoader.
function M.is_combined(x) return getmetatable(x) == Combined end

return M
