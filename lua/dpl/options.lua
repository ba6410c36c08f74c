-- dpl.options: the check of the options tables ({key = value, ...}) that public entry
-- points take (nn.functional, layer constructors, optimizers, schedulers, DataLoader,
-- dpl.conv2d and pooling): a misspelt key (momentun=, strides=) is an error naming the
-- function, the key and the accepted keys, not an option silently left at its default.
local raise = require('dpl.errors').raise -- string messages become ValueError objects

local fmt = string.format

local M = {}

--- keys('a', 'b', ...): the set of accepted keys; a set among the arguments adds its keys
--- (keys(base_set, 'extra')). Build it once, at load time.
function M.keys(...)
  local set = {}
  for i = 1, select('#', ...) do
    local v = select(i, ...)
    if type(v) == 'table' then
      for k in pairs(v) do set[k] = true end
    else
      set[v] = true
    end
  end
  return set
end

-- edit distance (insertions, deletions, substitutions), for the "did you mean" hint
local function distance(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      local c = a:byte(i) == b:byte(j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + c)
    end
    prev = cur
  end
  return prev[#b]
end

M.distance = distance

--- nearest(k, accepted): the accepted key (a set: key -> anything) nearest to the string k,
--- at most 2 edits away (ties: the first in sorted order), or nil.
function M.nearest(k, accepted)
  if type(k) ~= 'string' then return nil end
  local list = {}
  for a in pairs(accepted) do if type(a) == 'string' then list[#list + 1] = a end end
  table.sort(list)
  local best, bd = nil, 3 -- at most 2 edits away
  for _, a in ipairs(list) do
    local d = distance(k, a)
    if d < bd then best, bd = a, d end
  end
  return best
end

local function unknown(k, accepted, fn)
  local list = {}
  for a in pairs(accepted) do list[#list + 1] = a end
  table.sort(list)
  local hint = ''
  local best = M.nearest(k, accepted)
  if best then hint = fmt(" (did you mean '%s'?)", best) end
  local name = type(k) == 'string' and fmt("'%s'", k) or fmt('[%s] (a %s key)', tostring(k), type(k))
  raise(fmt('%s: unknown option %s%s; accepted options: %s', fn, name, hint,
    #list > 0 and table.concat(list, ', ') or 'none'))
end

--- check(opts, accepted, fn): opts is nil or a table whose keys are all in the set accepted
--- (from keys()); raises a ValueError naming fn otherwise. One pairs() over opts, no
--- allocation: cheap enough for functions called every step.
function M.check(opts, accepted, fn)
  if opts == nil then return end
  if type(opts) ~= 'table' then
    raise(fmt('%s: options must be a table, got %s', fn, type(opts) == 'cdata' and 'cdata (not a table)' or type(opts)))
  end
  for k in pairs(opts) do
    if not accepted[k] then unknown(k, accepted, fn) end
  end
end

-- a keyword table: a table with named keys only (a list such as {30, 60} is a value)
local function is_kw(v) return type(v) == 'table' and getmetatable(v) == nil and v[1] == nil and next(v) ~= nil end

--- positional(fn, names, ...): PyTorch's calling forms for a constructor whose options
--- table follows its required arguments: f(x, opts) as it is, or the values in the order
--- of names (PyTorch's parameter order) with an optional options table after them
--- (StepLR(opt, 30, 0.1), StepLR(opt, 30, {gamma = 0.1}), SGD(params, 0.1, {momentum = 0.9})).
--- Returns the options table (the keys are still to be checked by the caller).
function M.positional(fn, names, ...)
  local n = select('#', ...)
  local a1 = select(1, ...)
  if n == 0 or (n == 1 and (a1 == nil or (type(a1) == 'table' and getmetatable(a1) == nil and a1[1] == nil))) then
    return a1
  end
  while n > 0 and select(n, ...) == nil do n = n - 1 end
  if n == 0 then return nil end -- (only nils: SGD(params, nil, nil) is SGD(params))
  local last = select(n, ...)
  local npos = is_kw(last) and n - 1 or n
  if npos > #names then
    raise(fmt('%s: takes at most %d positional values (%s) before its options table, got %d', fn, #names,
      table.concat(names, ', '), npos))
  end
  local o = {}
  if npos < n then for k, v in pairs(last) do o[k] = v end end
  for i = 1, npos do
    local v = select(i, ...)
    if v ~= nil then
      if o[names[i]] ~= nil then
        raise(fmt("%s: got two values for '%s' (value %d and the options table)", fn, names[i], i))
      end
      o[names[i]] = v
    end
  end
  return o
end

--- int_or_pair(v, fn, what): v is an integer or a pair {h, w} of integers; returns h, w.
function M.int_or_pair(v, fn, what)
  local h, w
  if type(v) == 'number' then
    h, w = v, v
  elseif type(v) == 'table' and #v == 2 and type(v[1]) == 'number' and type(v[2]) == 'number' then
    h, w = v[1], v[2]
  end
  if not h or h ~= math.floor(h) or w ~= math.floor(w) or math.abs(h) >= 2 ^ 31 or math.abs(w) >= 2 ^ 31 then
    local s = tostring(v)
    if type(v) == 'table' then
      local ok, c = pcall(table.concat, v, ', ')
      s = ok and '{' .. c .. '}' or 'a table'
    end
    raise(fmt('%s: %s must be an integer or a pair of integers {h, w}, got %s', fn, what, s))
  end
  return h, w
end

return M
