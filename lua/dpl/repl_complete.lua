-- dpl.repl_complete: the names the REPL's Tab completes (dpl.repl hands
-- M.complete to dpl.host, which libedit calls). Pure Lua, so specs call it directly.
--
-- What the completer reads, and what it never runs:
--  * a table's own keys (next, no __pairs), the keys along a chain of __index
--    tables (class hierarchies), a class's methods and its _properties' names;
--  * a metatable's __dir (Python's __dir__), a function(obj) returning a list of
--    names: dpl's lazily loading modules (dpl, dpl.tensor, dpl.callbacks,
--    dpl.loggers, dpl.optim, dpl.metrics, dpl.strategies) list their names
--    there; a user's class may define one too;
--  * tensors: dpl.tensor's method and property lists (with the lazily loaded
--    modules' names from dpl.tensor_lazy), strings: the string library.
--  To look inside `a.b.` it reads a.b with rawget and the __index tables; a name
--  that only an __index function gives is read (a normal index) only when the
--  object's __dir lists it: that loads a dpl submodule the first time (as the
--  expression being typed will anyway; they are small). No other __index
--  function, property getter or metamethod is ever called (they are user code,
--  with possible side effects: nn.Module's, a Trainer property, a logger's
--  experiment creating directories).
local M = {}

local keywords = {
  'and', 'break', 'do', 'else', 'elseif', 'end', 'false', 'for', 'function', 'goto', 'if', 'in',
  'local', 'nil', 'not', 'or', 'repeat', 'return', 'then', 'true', 'until', 'while',
}

--- Characters that end a word for libedit (the completed word may hold '.' and ':').
M.word_break = ' \t\n"\\\'`@$><=;|&{}()[],+-*/%^~#'

local function is_name(k)
  return type(k) == 'string' and k:match('^[%a_][%w_]*$') ~= nil
end

-- the dpl tensor module when it is loaded and v is one of its tensors
local function tensor_module(v)
  if type(v) ~= 'cdata' then return nil end
  local T = package.loaded['dpl.tensor']
  if type(T) ~= 'table' or type(T.is_tensor) ~= 'function' then return nil end
  local ok, yes = pcall(T.is_tensor, v)
  return ok and yes and T or nil
end

-- the list a metatable's __dir gives (nil when it has none or it fails)
local function dir_list(mt, v)
  local d = type(mt) == 'table' and rawget(mt, '__dir')
  if type(d) ~= 'function' then return nil end
  local ok, list = pcall(d, v)
  if ok and type(list) == 'table' then return list end
  return nil
end

local function in_list(list, k)
  if not list then return false end
  for _, n in ipairs(list) do if n == k then return true end end
  return false
end

-- adds the names of table t (its keys, then its metatable's: __dir, __index tables, and
-- when __index is a function and the metatable is a class, the class chain's)
local function table_names(t, add, seen)
  if seen[t] then return end
  seen[t] = true
  local mt = debug.getmetatable(t)
  local lazy = dir_list(mt, t) -- (first: it may load what then shows among the keys)
  for k in next, t do add(k, rawget(t, k)) end
  if type(mt) ~= 'table' then return end
  for _, n in ipairs(lazy or {}) do add(n, nil, 'lazy') end
  local idx = rawget(mt, '__index')
  if type(idx) == 'table' then
    table_names(idx, add, seen)
  elseif type(idx) == 'function' and (rawget(mt, 'super') ~= nil or rawget(mt, '__name') ~= nil) then
    -- an instance of a class whose __index is a function (properties, lazy fields)
    local c = mt
    while type(c) == 'table' and not seen[c] do
      seen[c] = true
      for k in next, c do add(k, rawget(c, k)) end
      local props = rawget(c, '_properties')
      if type(props) == 'table' then for k in next, props do add(k, nil, 'prop') end end
      c = rawget(c, 'super')
    end
  end
end

local function tensor_names(T, add, methods_only)
  for k, v in pairs(T.methods or {}) do add(k, v) end
  if not methods_only then for k in pairs(T.props or {}) do add(k, nil, 'prop') end end
  local ok, lazy = pcall(require, 'dpl.tensor_lazy')
  if ok and type(lazy) == 'table' then
    for _, group in pairs(lazy) do
      for n in (group.methods or ''):gmatch('%S+') do add(n, nil, 'method') end
      if not methods_only then for n in (group.props or ''):gmatch('%S+') do add(n, nil, 'prop') end end
    end
  end
end

--- The value of v's field k as the completer may read it (see the top comment), or nil.
function M.field(v, k)
  local tv = type(v)
  if tv == 'string' then return string[k] end
  if tensor_module(v) then return nil end -- (its properties are computed: not read)
  if tv ~= 'table' then return nil end
  local seen = {}
  local t = v
  while type(t) == 'table' and not seen[t] do
    seen[t] = true
    local mt = debug.getmetatable(t)
    local lazy = dir_list(mt, t)
    local r = rawget(t, k)
    if r ~= nil then return r end
    if type(mt) ~= 'table' then return nil end
    if in_list(lazy, k) then
      local ok, x = pcall(function() return t[k] end)
      return ok and x or nil
    end
    local idx = rawget(mt, '__index')
    if type(idx) == 'function' then -- a class instance: its methods, up the class chain
      local c = mt
      while type(c) == 'table' and not seen[c] do
        seen[c] = true
        r = rawget(c, k)
        if r ~= nil then return r end
        c = rawget(c, 'super')
      end
      return nil
    end
    t = idx
  end
  return nil
end

--- Resolves a dotted path ('dpl.nn.functional') from env (default _G); nil when a part is missing.
function M.resolve(path, env)
  local v = env or _G
  for part in path:gmatch('[^%.]+') do
    v = M.field(v, part)
    if v == nil then return nil end
  end
  return v
end

local function callable(v)
  if type(v) == 'function' then return true end
  return false
end

--- The completions of `word` (the text before the cursor back to a word break): a sorted
--- list of whole replacements. `name`, `a.b.na`, `obj:me` (methods); a function gets `(`
--- (not after `t.` on a tensor, where the methods are listed for reference: help(t.sum)).
--- Names starting with `_` are offered only once `_` is typed; metamethods (`__x`) after `__`.
function M.complete(word, env)
  env = env or _G
  if type(word) ~= 'string' then return {} end
  local base, sep, prefix = word:match('^([%a_][%w_%.]*)([%.:])([%a_]?[%w_]*)$')
  if not base then
    if not word:match('^[%a_]?[%w_]*$') then return {} end
    prefix = word
  elseif base:find('..', 1, true) or base:sub(-1) == '.' then
    return {}
  end
  local out, have = {}, {}
  local hide_private = prefix:sub(1, 1) ~= '_'
  local hide_meta = prefix:sub(1, 2) ~= '__'
  -- kind: 'method' (a function not read), 'prop' (a property), 'lazy' (a name __dir lists)
  local function add(k, v, kind, no_paren)
    if not is_name(k) or have[k] or k:sub(1, #prefix) ~= prefix then return end
    if hide_private and k:sub(1, 1) == '_' then return end
    if hide_meta and k:sub(1, 2) == '__' then return end
    if sep == ':' and (kind == 'prop' or (v ~= nil and not callable(v))) then return end
    have[k] = true
    local paren = (kind == 'method' or callable(v)) and not no_paren
    out[#out + 1] = (base and (base .. sep) or '') .. k .. (paren and '(' or '')
  end
  if not base then
    table_names(env, add, {})
    for _, k in ipairs(keywords) do add(k, nil) end
  else
    local obj = M.resolve(base, env)
    if obj == nil then return {} end
    local T = tensor_module(obj)
    if T then
      local on_dot = sep == '.'
      tensor_names(T, function(k, v, kind) add(k, v, kind, on_dot) end, sep == ':')
    elseif type(obj) == 'string' then
      for k, v in pairs(string) do add(k, v) end
    elseif type(obj) == 'table' then
      table_names(obj, add, {})
    else
      return {}
    end
  end
  table.sort(out)
  return out
end

return M
