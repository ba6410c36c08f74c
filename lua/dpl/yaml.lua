-- dpl.yaml: the YAML subset that Lightning's configuration files use, read and written
-- in Lua (for dpl.cli.LightningCLI's --config / --print_config / config.yaml).
--
-- Read: block mappings and block lists nested by indentation (a list may sit at its
-- key's indentation, "- key: value" items are mappings), flow lists [a, b] and flow
-- mappings {a: 1} (also over several lines), plain, 'single' and "double" quoted
-- scalars, comments, a leading "---". Not read (an error naming the line): block
-- scalars (| and >), anchors/aliases, tags, several documents, multi-line plain scalars.
-- Plain scalars resolve as YAML 1.1 (PyYAML) does for null (~, null, Null, NULL, empty)
-- and booleans (true/false, yes/no, on/off in their three spellings), as YAML 1.2's core
-- schema for numbers (decimal, 0x hex, 0o octal, floats with '.' or an exponent, .inf,
-- -.inf, .nan); anything else is a string. A null is yaml.null (a Lua table cannot hold
-- nil), so keys with null values are kept.
local errors = require 'dpl.errors'

local M = {}

--- The value of a YAML null (`key: null`, `~`, an empty value).
M.null = setmetatable({}, { __tostring = function() return 'null' end, __name = 'yaml.null' })

local function fail(name, lineno, fmt, ...)
  local msg = select('#', ...) > 0 and fmt:format(...) or fmt
  error(errors.ValueError(('%s:%d: %s'):format(name, lineno, msg)), 0)
end

local bools = {
  ['true'] = true, True = true, TRUE = true, yes = true, Yes = true, YES = true, on = true, On = true, ON = true,
  ['false'] = false, False = false, FALSE = false, no = false, No = false, NO = false, off = false, Off = false,
  OFF = false,
}
local nulls = { [''] = true, ['~'] = true, null = true, Null = true, NULL = true }

--- A plain (unquoted) scalar's value: yaml.null, a boolean, a number or the string itself.
function M.resolve(s)
  if nulls[s] then return M.null end
  local b = bools[s]
  if b ~= nil then return b end
  local t = s:gsub('_', '')
  if t:match('^[-+]?%d+$') or t:match('^[-+]?%d+%.%d*$') or t:match('^[-+]?%.%d+$')
      or t:match('^[-+]?%d+%.?%d*[eE][-+]?%d+$') or t:match('^[-+]?%.%d+[eE][-+]?%d+$') then
    if s:find('__') or s:match('^[-+]?_') then return s end
    return tonumber(t)
  end
  local sign, hex = t:match('^([-+]?)0x(%x+)$')
  if hex then return (sign == '-' and -1 or 1) * tonumber(hex, 16) end
  local osign, oct = t:match('^([-+]?)0o([0-7]+)$')
  if oct then return (osign == '-' and -1 or 1) * tonumber(oct, 8) end
  local isign, inf = s:match('^([-+]?)%.([iI][nN][fF])$')
  if inf and (inf == 'inf' or inf == 'Inf' or inf == 'INF') then return isign == '-' and -math.huge or math.huge end
  if s == '.nan' or s == '.NaN' or s == '.NAN' then return 0 / 0 end
  return s
end

---------------------------------------------------------------- reading

-- a line without its comment: '#' at the start or after a space, outside quotes (a quote
-- opens a quoted scalar only where a scalar starts: after ': ', '- ', '[', '{', ',')
local function strip_comment(line)
  local i, n, q = 1, #line, nil
  local prev = ' ' -- the last non-space character before i ('' at the start)
  local start = true
  while i <= n do
    local c = line:sub(i, i)
    if q == "'" then
      if c == "'" then
        if line:sub(i + 1, i + 1) == "'" then i = i + 1 else q = nil end
      end
    elseif q == '"' then
      if c == '\\' then i = i + 1 elseif c == '"' then q = nil end
    elseif c == '#' and (i == 1 or line:sub(i - 1, i - 1):match('%s')) then
      return line:sub(1, i - 1)
    elseif (c == "'" or c == '"') and (start or prev:match('[:%-%[{,]')) then
      q = c
    end
    if not c:match('%s') then
      start = false
      prev = c
    end
    i = i + 1
  end
  return line
end

local function utf8_char(cp)
  if cp < 0x80 then return string.char(cp) end
  if cp < 0x800 then return string.char(0xC0 + math.floor(cp / 64), 0x80 + cp % 64) end
  if cp < 0x10000 then
    return string.char(0xE0 + math.floor(cp / 4096), 0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
  end
  return string.char(0xF0 + math.floor(cp / 262144), 0x80 + math.floor(cp / 4096) % 64, 0x80 + math.floor(cp / 64) % 64,
    0x80 + cp % 64)
end

-- the escapes of a double-quoted scalar, in one pass (so "\\u0041" is a backslash and "u0041")
local function unescape_double(s, name, lineno)
  local map = { n = '\n', t = '\t', r = '\r', ['"'] = '"', ['\\'] = '\\', ['/'] = '/', ['0'] = '\0', [' '] = ' ',
    a = '\a', b = '\b', e = '\27', f = '\f', v = '\v', ['\t'] = '\t', N = '\194\133', _ = '\194\160',
    L = '\226\128\168', P = '\226\128\169' }
  local hexlen = { x = 2, u = 4, U = 8 }
  local out, i, n = {}, 1, #s
  while i <= n do
    local j = s:find('\\', i, true)
    if j == nil then out[#out + 1] = s:sub(i); break end
    out[#out + 1] = s:sub(i, j - 1)
    local c = s:sub(j + 1, j + 1)
    local hl = hexlen[c]
    if hl then
      local hex = s:sub(j + 2, j + 1 + hl)
      if #hex ~= hl or not hex:match('^%x+$') then
        fail(name, lineno, 'bad escape \\%s%s in a double-quoted string (%d hex digits expected)', c, hex, hl)
      end
      local cp = tonumber(hex, 16)
      if cp > 0x10FFFF then fail(name, lineno, 'bad escape \\%s%s in a double-quoted string (not a code point)', c, hex) end
      out[#out + 1] = utf8_char(cp)
      i = j + 2 + hl
    else
      local r = map[c]
      if r == nil then fail(name, lineno, 'unknown escape \\%s in a double-quoted string', c) end
      out[#out + 1] = r
      i = j + 2
    end
  end
  return table.concat(out)
end

-- a quoted scalar starting at s[pos]: the string and the position after the closing quote
local function read_quoted(s, pos, name, lineno)
  local q = s:sub(pos, pos)
  local i = pos + 1
  while i <= #s do
    local c = s:sub(i, i)
    if q == "'" and c == "'" then
      if s:sub(i + 1, i + 1) == "'" then i = i + 2 else
        return (s:sub(pos + 1, i - 1):gsub("''", "'")), i + 1
      end
    elseif q == '"' and c == '\\' then i = i + 2
    elseif q == '"' and c == '"' then
      return unescape_double(s:sub(pos + 1, i - 1), name, lineno), i + 1
    else i = i + 1 end
  end
  fail(name, lineno, 'unterminated %s-quoted string', q == "'" and 'single' or 'double')
end

local function check_plain(v, name, lineno)
  local c = v:sub(1, 1)
  if c == '&' or c == '*' then fail(name, lineno, 'anchors and aliases (%s) are not supported', v) end
  if c == '!' then fail(name, lineno, 'tags (%s) are not supported', v) end
  if c == '|' or c == '>' then fail(name, lineno, 'block scalars (| and >) are not supported; use a quoted string') end
  if c == '@' or c == '`' then fail(name, lineno, "a plain scalar cannot start with '%s'", c) end
end

-- a flow value ([...], {...}, quoted, plain) in s from pos: value, next position
local function skip_ws(s, pos)
  return s:find('[^%s]', pos) or #s + 1
end

local cur_floats -- the decode in progress: {[mapping] = {[key] = text}} of floats such as 1.0

-- a plain scalar's text that is a float with an integral value (1.0, 2e0): kept for the readers
-- that must tell 1.0 from 1
local function note_float(map, k, v, text)
  if cur_floats and text and type(v) == 'number' and v == math.floor(v) and text:find('[.eE]')
      and not text:find('^[-+]?0[xo]') then
    cur_floats[map] = cur_floats[map] or {}
    cur_floats[map][k] = text
  end
end

local read_flow
read_flow = function(s, pos, name, lineno)
  pos = skip_ws(s, pos)
  local c = s:sub(pos, pos)
  if c == '[' then
    local out, n = {}, 0
    pos = skip_ws(s, pos + 1)
    if s:sub(pos, pos) == ']' then return out, pos + 1 end
    while true do
      local v
      v, pos = read_flow(s, pos, name, lineno)
      n = n + 1
      out[n] = v
      pos = skip_ws(s, pos)
      local d = s:sub(pos, pos)
      if d == ',' then
        pos = skip_ws(s, pos + 1)
        if s:sub(pos, pos) == ']' then return out, pos + 1 end
      elseif d == ']' then return out, pos + 1
      else fail(name, lineno, "expected ',' or ']' in a flow list, found %s", d == '' and 'the end' or ("'" .. d .. "'")) end
    end
  elseif c == '{' then
    local out = {}
    pos = skip_ws(s, pos + 1)
    if s:sub(pos, pos) == '}' then return out, pos + 1 end
    while true do
      local k
      local kc = s:sub(pos, pos)
      if kc == '"' or kc == "'" then k, pos = read_quoted(s, pos, name, lineno)
      else
        local e = pos
        while e <= #s do
          local ch = s:sub(e, e)
          if ch == ',' or ch == '}' or (ch == ':' and s:sub(e + 1, e + 1):match('^[%s,}]?$')) then break end
          e = e + 1
        end
        k = s:sub(pos, e - 1):match('^(.-)%s*$')
        if k == '' then fail(name, lineno, 'a flow mapping entry without a key') end
        check_plain(k, name, lineno)
        local rk = M.resolve(k)
        k = type(rk) == 'number' and rk or k
        pos = e
      end
      pos = skip_ws(s, pos)
      local v = M.null
      if s:sub(pos, pos) == ':' then
        pos = skip_ws(s, pos + 1)
        local d = s:sub(pos, pos)
        if d ~= ',' and d ~= '}' then
          local text
          v, pos, text = read_flow(s, pos, name, lineno)
          note_float(out, k, v, text)
        end
      end
      if out[k] ~= nil then fail(name, lineno, "duplicate key '%s' in a flow mapping", tostring(k)) end
      out[k] = v
      pos = skip_ws(s, pos)
      local d = s:sub(pos, pos)
      if d == ',' then
        pos = skip_ws(s, pos + 1)
        if s:sub(pos, pos) == '}' then return out, pos + 1 end
      elseif d == '}' then return out, pos + 1
      else fail(name, lineno, "expected ',' or '}' in a flow mapping, found %s", d == '' and 'the end' or ("'" .. d .. "'")) end
    end
  elseif c == '"' or c == "'" then
    return read_quoted(s, pos, name, lineno)
  elseif c == '' then
    fail(name, lineno, 'a value is missing in a flow collection')
  end
  -- plain scalar in flow context: up to , ] } (a ':' followed by a space ends a key)
  local e = pos
  while e <= #s do
    local ch = s:sub(e, e)
    if ch == ',' or ch == ']' or ch == '}' then break end
    e = e + 1
  end
  local v = s:sub(pos, e - 1):match('^(.-)%s*$')
  check_plain(v, name, lineno)
  if v:find(': ') then fail(name, lineno, "a mapping inside a flow list needs braces: '%s'", v) end
  return M.resolve(v), e, v
end

-- the value written after 'key:' or '- ' on one line (lines: more lines for flow collections)
local function inline_value(text, lines, i, name)
  local L = lines[i]
  local c = text:sub(1, 1)
  if c == '[' or c == '{' then
    -- a flow collection may go on over the next lines
    local buf, j = text, i
    while true do
      local ok, v, pos = pcall(read_flow, buf, 1, name, L.lineno)
      if ok then
        if buf:find('[^%s]', pos) then
          fail(name, L.lineno, "unexpected text after a flow collection: '%s'", buf:sub(pos):match('^%s*(.-)%s*$'))
        end
        return v, j + 1
      end
      local msg = tostring(errors.is(v, errors.ValueError) and v.message or v)
      if not (msg:find('found the end') or msg:find('missing') or msg:find('without a key')) or lines[j + 1] == nil then error(v, 0) end
      j = j + 1
      buf = buf .. ' ' .. lines[j].text
    end
  end
  if c == '"' or c == "'" then
    local v, pos = read_quoted(text, 1, name, L.lineno)
    if text:find('[^%s]', pos) then
      fail(name, L.lineno, "unexpected text after a quoted string: '%s'", text:sub(pos):match('^%s*(.-)%s*$'))
    end
    return v, i + 1
  end
  check_plain(text, name, L.lineno)
  if text:find(':%s') then fail(name, L.lineno, "mapping values are not allowed here: '%s' (quote the string)", text) end
  local v = M.resolve(text)
  -- a float written with an integral value (1.0): its text, for readers that must tell 1.0 from 1
  if type(v) == 'number' and v == math.floor(v) and text:find('[.eE]') and not text:find('^[-+]?0[xo]') then
    return v, i + 1, text
  end
  return v, i + 1
end

-- 'key: rest' or 'key:' -> key, rest (nil when the text is not a mapping entry)
local function split_key(text, name, lineno)
  local c = text:sub(1, 1)
  if c == '"' or c == "'" then
    local k, pos = read_quoted(text, 1, name, lineno)
    local rest = text:sub(pos)
    local r = rest:match('^%s*:%s(.*)$') or (rest:match('^%s*:$') and '')
    if r == nil then return nil end
    return k, r:match('^%s*(.-)$')
  end
  if c == '[' or c == '{' then return nil end
  local k, r = text:match('^(.-):%s(.*)$')
  if not k then k = text:match('^(.-):$'); r = '' end
  if not k or k:find('^%s*$') then return nil end
  if k:find(': ') then return nil end
  k = k:match('^(.-)%s*$')
  check_plain(k, name, lineno)
  local rk = M.resolve(k)
  if type(rk) == 'number' then k = rk elseif rk == M.null then k = 'null' end
  return k, r:match('^%s*(.-)$')
end

local parse_node

local function parse_seq(lines, i, indent, name)
  local out, n = {}, 0
  while lines[i] and lines[i].indent == indent and (lines[i].text == '-' or lines[i].text:sub(1, 2) == '- ') do
    local L = lines[i]
    local rest = L.text:sub(2):match('^%s*(.-)$')
    local v
    if rest == '' then
      if lines[i + 1] and lines[i + 1].indent > indent then v, i = parse_node(lines, i + 1, indent + 1, name)
      else v, i = M.null, i + 1 end
    else
      local col = indent + (#L.text - #rest)
      if rest == '-' or rest:sub(1, 2) == '- ' or split_key(rest, name, L.lineno) ~= nil then
        -- "- - x" or "- key: value": the rest is a node at its own column
        lines[i] = { indent = col, text = rest, lineno = L.lineno }
        v, i = parse_node(lines, i, col, name)
      else
        v, i = inline_value(rest, lines, i, name)
      end
    end
    n = n + 1
    out[n] = v
  end
  if lines[i] and lines[i].indent > indent then
    fail(name, lines[i].lineno, 'bad indentation: expected a list item at column %d', indent + 1)
  end
  return out, i
end

local function parse_map(lines, i, indent, name)
  local out = {}
  while lines[i] and lines[i].indent == indent do
    local L = lines[i]
    if L.text == '-' or L.text:sub(1, 2) == '- ' then
      fail(name, L.lineno, 'a list item where a mapping key was expected')
    end
    local k, rest = split_key(L.text, name, L.lineno)
    if k == nil then fail(name, L.lineno, "expected 'key: value', found '%s'", L.text) end
    if out[k] ~= nil then fail(name, L.lineno, "duplicate key '%s'", tostring(k)) end
    local v
    if rest == '' then
      local nx = lines[i + 1]
      if nx and nx.indent > indent then v, i = parse_node(lines, i + 1, indent + 1, name)
      elseif nx and nx.indent == indent and (nx.text == '-' or nx.text:sub(1, 2) == '- ') then
        v, i = parse_seq(lines, i + 1, indent, name)
      else v, i = M.null, i + 1 end
    else
      local ftext
      v, i, ftext = inline_value(rest, lines, i, name)
      note_float(out, k, v, ftext)
    end
    out[k] = v
  end
  if lines[i] and lines[i].indent > indent then
    fail(name, lines[i].lineno, 'bad indentation: expected a key at column %d', indent + 1)
  end
  return out, i
end

parse_node = function(lines, i, min_indent, name)
  local L = lines[i]
  if L.indent < min_indent then return M.null, i end
  if L.text == '-' or L.text:sub(1, 2) == '- ' then return parse_seq(lines, i, L.indent, name) end
  if split_key(L.text, name, L.lineno) ~= nil then return parse_map(lines, i, L.indent, name) end
  local v, j = inline_value(L.text, lines, i, name)
  if lines[j] and lines[j].indent >= min_indent then
    fail(name, lines[j].lineno, 'unexpected text (multi-line plain scalars are not supported): %s', lines[j].text)
  end
  return v, j
end

--- yaml.decode(text [, name]) -> the value of the document (a table, a scalar, or yaml.null
--- for an empty one), and a table {[mapping] = {[key] = text}} of the block mapping values
--- written as floats with an integral value ("1.0", "2e0": Lua cannot tell 1.0 from 1).
--- Errors are ValueError('<name>:<line>: <what>'); name defaults to '<string>'.
function M.decode(text, name)
  cur_floats = {}
  local ok, v = pcall(M._decode, text, name)
  local floats = cur_floats
  cur_floats = nil
  if not ok then error(v, 0) end
  return v, floats
end

function M._decode(text, name)
  if type(text) ~= 'string' then
    errors.TypeError:raise(('yaml.decode expects a string, got %s'):format(type(text)), 2)
  end
  name = name or '<string>'
  local lines = {}
  local lineno, docs = 0, 0
  text = text:gsub('\r\n', '\n')
  if text:sub(1, 3) == '\239\187\191' then text = text:sub(4) end
  for raw in (text .. '\n'):gmatch('([^\n]*)\n') do
    lineno = lineno + 1
    local line = strip_comment(raw):match('^(.-)%s*$')
    local ws, rest = line:match('^([ \t]*)(.*)$')
    if rest ~= '' then
      if ws:find('\t') then fail(name, lineno, 'a tab in the indentation (YAML indents with spaces)') end
      if line:match('^%-%-%-') and (#line == 3 or line:sub(4, 4):match('%s')) then
        docs = docs + 1
        if docs > 1 or #lines > 0 then fail(name, lineno, 'several documents in one file are not supported') end
        local after = line:sub(4):match('^%s*(.-)$')
        if after ~= '' then lines[#lines + 1] = { indent = 0, text = after, lineno = lineno } end
      elseif line == '...' then
        break
      elseif rest:sub(1, 1) == '%' and #lines == 0 then
        fail(name, lineno, 'directives (%s) are not supported', rest)
      else
        lines[#lines + 1] = { indent = #ws, text = rest, lineno = lineno }
      end
    end
  end
  if #lines == 0 then return M.null end
  local v, i = parse_node(lines, 1, 0, name)
  if lines[i] then fail(name, lines[i].lineno, 'bad indentation or unexpected text: %s', lines[i].text) end
  return v
end

--- yaml.read_file(path) -> the decoded value; a file that cannot be read is an error naming it.
function M.read_file(path)
  local f, err = io.open(path, 'rb')
  if not f then errors.ValueError:raise(('cannot read %s: %s'):format(path, tostring(err)), 2) end
  -- (returns decode's two values)
  local text = f:read('*a')
  f:close()
  return M.decode(text, path)
end

---------------------------------------------------------------- writing

local function num(v)
  if v ~= v then return '.nan' end
  if v == math.huge then return '.inf' end
  if v == -math.huge then return '-.inf' end
  if v == math.floor(v) and math.abs(v) < 1e16 then return ('%d'):format(v) end
  for p = 1, 17 do
    local s = ('%.' .. p .. 'g'):format(v)
    if tonumber(s) == v then
      if not s:find('[%.e]') then s = s .. '.0' end
      return s
    end
  end
  return ('%.17g'):format(v)
end

--- One scalar as YAML: null, true/false, a number, or a string (quoted with '' when it
--- would read back as something else or is not plain).
function M.scalar(v)
  if v == nil or v == M.null then return 'null' end
  local tv = type(v)
  if tv == 'boolean' then return v and 'true' or 'false' end
  if tv == 'number' then return num(v) end
  local s = tostring(v)
  if M.resolve(s) ~= s or s:match('^%s') or s:match('%s$') or s:match('^[%-%?:,%[%]{}#&*!|>\'"%%@`]')
      or s:find(': ') or s:find(':$') or s:find(' #') or s:find('%c') then
    if s:find('%c') then -- control characters (PyYAML refuses them raw): escaped
      return '"' .. s:gsub('[\\"%c]', function(c)
        local m = { ['\\'] = '\\\\', ['"'] = '\\"', ['\n'] = '\\n', ['\t'] = '\\t', ['\r'] = '\\r' }
        return m[c] or ('\\x%02x'):format(c:byte())
      end) .. '"'
    end
    return "'" .. s:gsub("'", "''") .. "'"
  end
  return s
end

local function is_list(t)
  local n = 0
  for k in pairs(t) do
    if type(k) ~= 'number' then return false end
    n = n + 1
  end
  return n == #t
end
M.is_list = is_list

local function key_str(k) return M.scalar(k) end

local dump
dump = function(v, indent, out)
  local pad = string.rep(' ', indent)
  if is_list(v) then
    for _, x in ipairs(v) do
      if type(x) == 'table' and x ~= M.null and getmetatable(x) == nil and next(x) ~= nil then
        if is_list(x) then
          out[#out + 1] = pad .. '-\n'
          dump(x, indent + 2, out)
        else
          -- "- key: value" with the other keys under the first
          local sub = {}
          dump(x, indent + 2, sub)
          sub[1] = pad .. '- ' .. sub[1]:sub(indent + 3)
          for _, l in ipairs(sub) do out[#out + 1] = l end
        end
      else
        out[#out + 1] = pad .. '- ' .. M.encode_inline(x) .. '\n'
      end
    end
    return
  end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b)
    if type(a) == type(b) then return a < b end
    return type(a) == 'number'
  end)
  for _, k in ipairs(keys) do
    local x = v[k]
    if type(x) == 'table' and x ~= M.null and getmetatable(x) == nil and next(x) ~= nil then
      out[#out + 1] = pad .. key_str(k) .. ':\n'
      dump(x, is_list(x) and indent or indent + 2, out)
    else
      out[#out + 1] = pad .. key_str(k) .. ': ' .. M.encode_inline(x) .. '\n'
    end
  end
end

--- A scalar or an empty table on one line ([] for an empty table, the tostring of any other
--- value — a function, an object — as a quoted string).
function M.encode_inline(x)
  if type(x) == 'table' and x ~= M.null and getmetatable(x) == nil then
    if next(x) == nil then return '[]' end
    local out = {}
    if is_list(x) then
      for i, y in ipairs(x) do out[i] = M.encode_inline(y) end
      return '[' .. table.concat(out, ', ') .. ']'
    end
    local keys = {}
    for k in pairs(x) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for i, k in ipairs(keys) do out[i] = key_str(k) .. ': ' .. M.encode_inline(x[k]) end
    return '{' .. table.concat(out, ', ') .. '}'
  end
  local t = type(x)
  if x == nil or x == M.null or t == 'boolean' or t == 'number' or t == 'string' then return M.scalar(x) end
  return M.scalar(tostring(x))
end

--- yaml.encode(value [, indent]) -> block YAML text (mappings with sorted keys, lists in
--- order; yaml.null and nil as null). decode(encode(v)) gives v back for tables of
--- strings, numbers, booleans and yaml.null.
function M.encode(v, indent)
  indent = indent or 0
  if type(v) ~= 'table' or v == M.null or getmetatable(v) ~= nil or next(v) == nil then
    return string.rep(' ', indent) .. M.encode_inline(v) .. '\n'
  end
  local out = {}
  dump(v, indent, out)
  return table.concat(out)
end

return M
