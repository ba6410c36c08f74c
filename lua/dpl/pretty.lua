-- dpl.pretty: readable text for any Lua value, as the REPL prints it. Tables are
-- shown nested and sorted (arrays first), cycles marked, long ones cut, a short
-- list of numbers on one line ({4, 3}: a shape); values
-- with a __tostring metamethod (tensors, errors, devices) print through it.
local M = {}

local function is_identifier(k)
  return type(k) == 'string' and k:match('^[%a_][%w_]*$') ~= nil
end

local function key_text(k)
  if is_identifier(k) then return k end
  if type(k) == 'string' then return ('[%q]'):format(k) end
  return '[' .. tostring(k) .. ']'
end

local function scalar(v)
  local tv = type(v)
  if tv == 'string' then return ('%q'):format(v) end
  if tv == 'number' then
    if v == math.floor(v) and v > -1e15 and v < 1e15 then return ('%d'):format(v) end
    return ('%.14g'):format(v)
  end
  return nil
end

local function has_tostring(v)
  local mt = getmetatable(v)
  return type(mt) == 'table' and rawget(mt, '__tostring') ~= nil
end

local function sorted_keys(t, n)
  local keys = {}
  for k in pairs(t) do
    if not (type(k) == 'number' and k >= 1 and k <= n and k == math.floor(k)) then
      keys[#keys + 1] = k
    end
  end
  table.sort(keys, function(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return ta < tb end
    if ta == 'number' or ta == 'string' then return a < b end
    return tostring(a) < tostring(b)
  end)
  return keys
end

local function format(v, indent, seen, depth, opts, out)
  local s = scalar(v)
  if s then out[#out + 1] = s return end
  if type(v) ~= 'table' or has_tostring(v) then
    local ok, text = pcall(tostring, v)
    out[#out + 1] = ok and text or ('<' .. type(v) .. ': tostring failed: ' .. tostring(text) .. '>')
    return
  end
  if seen[v] then out[#out + 1] = '<cycle: ' .. tostring(v) .. '>' return end
  if depth > opts.max_depth then out[#out + 1] = '{...}' return end
  seen[v] = true
  local n = #v
  local keys = sorted_keys(v, n)
  if n == 0 and #keys == 0 then
    out[#out + 1] = '{}'
    seen[v] = nil
    return
  end
  if #keys == 0 and n <= 16 then -- a short list of numbers (a shape, t:tolist()): one line, {4, 3}
    local flat = true
    for i = 1, n do
      local tv = type(v[i])
      if tv ~= 'number' and tv ~= 'boolean' then flat = false break end
    end
    if flat then
      local parts = {}
      for i = 1, n do parts[i] = scalar(v[i]) or tostring(v[i]) end
      out[#out + 1] = '{' .. table.concat(parts, ', ') .. '}'
      seen[v] = nil
      return
    end
  end
  local inner = indent .. '  '
  out[#out + 1] = '{\n'
  local shown, limit = 0, opts.max_items
  for i = 1, n do
    shown = shown + 1
    if shown > limit then break end
    out[#out + 1] = inner
    format(v[i], inner, seen, depth + 1, opts, out)
    out[#out + 1] = ',\n'
  end
  for _, k in ipairs(keys) do
    shown = shown + 1
    if shown > limit then break end
    out[#out + 1] = inner .. key_text(k) .. ' = '
    format(v[k], inner, seen, depth + 1, opts, out)
    out[#out + 1] = ',\n'
  end
  if shown > limit then
    out[#out + 1] = inner .. ('... (%d entries in all)\n'):format(n + #keys)
  end
  out[#out + 1] = indent .. '}'
  seen[v] = nil
end

--- Returns the text of v. opts: max_depth (default 8), max_items (default 100).
function M.format(v, opts)
  opts = opts or {}
  local o = { max_depth = opts.max_depth or 8, max_items = opts.max_items or 100 }
  local out = {}
  format(v, '', {}, 1, o, out)
  return table.concat(out)
end

return M
