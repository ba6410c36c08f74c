-- dpl.repl: the interactive loop behind `dplhost` (and `dplhost -i`), in the
-- spirit of Torch7's `th`: line editing and history (libedit, through dpl.host),
-- multi-line input, `=expr` and bare expressions print their values, `_` holds
-- the last result, errors print a traceback and the loop goes on, Ctrl-C
-- interrupts a running chunk, Ctrl-D (end of input) leaves; Tab completes names
-- (dpl.repl_complete), help(obj) says what obj is (dpl.repl_help).
local host = require 'dpl.host'
local pretty = require 'dpl.pretty'

local M = {}

local unpack = unpack or table.unpack

local function history_path()
  local p = os.getenv('DPL_HISTORY')
  if p then return p ~= '' and p or nil end
  local home = os.getenv('HOME')
  return home and (home .. '/.dplhost_history') or nil
end

local function incomplete(msg)
  return type(msg) == 'string' and msg:sub(-7) == "'<eof>'"
end

-- Code typed at the prompt runs in the interpreter, never as machine code: LuaJIT
-- checks hooks only between interpreted instructions, so Ctrl-C could not stop a
-- loop it had compiled (`for i = 1, 1e12 do s = s + i end`). Functions defined at
-- the prompt run interpreted too; library code (dpl, required modules) is compiled
-- as usual.
local function interpreted(fn)
  if jit and jit.off then jit.off(fn, true) end
  return fn
end

--- Compiles the text of one REPL entry. Returns fn, or nil and 'incomplete',
--- or nil and the syntax error message. An expression compiles to
--- `return (function(...) return ... end)(<expr>)`: with `return <expr>`, a call
--- would be a tail call that leaves no frame of the chunk for the traceback
--- (`error('bad')` printed `bad` without `stdin:1:`).
function M.compile(src)
  local body = src
  if body:sub(1, 1) == '=' then body = body:sub(2) end
  local list = body:match('^(.-);%s*$') or body -- `return x;` is valid: so is `x;` here
  -- on one line, so that an error in the expression's last operation (`t[k]`, whose
  -- index LuaJIT emits when it reads the next token) says stdin:1, not stdin:2; with the
  -- parenthesis on a line of its own when the entry ends in a `--` comment
  local fn = loadstring('return (function(...) return ... end)(' .. list .. ')', '=stdin')
    or loadstring('return (function(...) return ... end)(' .. list .. '\n)', '=stdin')
  if fn then return interpreted(fn) end
  if src:sub(1, 1) == '=' then body = 'return ' .. body end
  local err
  fn, err = loadstring(body, '=stdin')
  if fn then return interpreted(fn) end
  if incomplete(err) then return nil, 'incomplete' end
  return nil, err
end

local function handler(e)
  if e == 'interrupted' or e == 'interrupted (SIGTERM)' then return e end
  local msg = e
  if type(e) ~= 'string' then
    local ok, s = pcall(tostring, e)
    if not ok then
      msg = ('(error object is a %s value; its __tostring failed: %s)'):format(type(e), tostring(s))
    elseif type(s) ~= 'string' then
      msg = ('(error object is a %s value)'):format(type(e))
    else
      msg = s
    end
  end
  -- a method called as obj.method(...): its self is missing (nil) or is the first argument
  if msg:find("local 'self' (a ", 1, true)
    or (msg:find("local 't' (a nil value)", 1, true) and msg:find('/dpl/tensor', 1, true)) then -- (t: a tensor method's self)
    msg = msg .. "\n  (hint: a method called with '.' instead of ':'? write obj:method(...))"
  end
  -- a property called as a method (logger:log_dir(): Lightning's properties are fields here)
  local prop, what = msg:match("attempt to call method '([%w_]+)' %(a (%a+) value%)")
  if prop == 'training' and what == 'boolean' then -- Torch7's m:training()
    msg = msg .. "\n  (hint: m.training is the mode flag (a boolean); Torch7's m:training() is m:train() here, "
      .. "m:evaluate() is m:eval(); docs/torch7.md)"
  elseif prop and (what == 'string' or what == 'number' or what == 'boolean') then
    msg = msg .. ("\n  (hint: '%s' is a property (a value), not a method: write obj.%s, without ':' and '()')")
      :format(prop, prop)
  end
  local tb = debug.traceback(msg, 2)
  -- keep the frames of the user's chunk, drop the REPL's own
  local lines = {}
  for l in tb:gmatch('[^\n]+') do
    if l:find('dpl/repl.lua', 1, true) or l:find("in function 'xpcall'", 1, true) then break end
    if not (l:find('^%s*%[builtin#') or l:find("^%s*%[C%]: in function 'error'")) then
      lines[#lines + 1] = l
    end
  end
  if #lines == 2 then lines[2] = nil end -- "stack traceback:" with no frame under it
  return table.concat(lines, '\n')
end

local function pack(...) return { n = select('#', ...), ... } end

--- Runs one compiled entry, printing results or the error; returns true on success.
function M.execute(fn, out)
  out = out or io.stdout
  local r = pack(xpcall(fn, handler))
  if not r[1] then
    host.clear_interrupt()
    out:write(tostring(r[2]), '\n')
    return false
  end
  if r.n > 1 then
    local parts = {}
    local multiline = false
    for i = 2, r.n do
      parts[#parts + 1] = pretty.format(r[i])
      multiline = multiline or parts[#parts]:find('\n', 1, true) ~= nil
    end
    -- several values, one of them on several lines (dpl.linalg.svd's U, S, Vh): one
    -- value per line, else the next one would start on the last line of the previous
    out:write(table.concat(parts, multiline and '\n' or '\t'), '\n')
    rawset(_G, '_', r[2])
  end
  return true
end

function M.run()
  local tty = host.isatty(0)
  local path = tty and history_path()
  if tty then
    io.stdout:write(('dplhost %s  |  LuaJIT  |  help() for help, Tab completes, =expr prints, Ctrl-D exits\n')
      :format(host.version))
    if path and host.line_editing() then host.read_history(path) end
    if host.line_editing() and host.set_completer then
      local complete = require 'dpl.repl_complete'
      host.set_completer(function(word) return complete.complete(word) end, complete.word_break)
    end
  end
  -- help(obj), as in Python's REPL: the prompt's global (not a script's: dpl.help is
  -- there for scripts), unless the script run before (-i) has its own
  if rawget(_G, 'help') == nil then rawset(_G, 'help', function(...) return require('dpl.repl_help').help(...) end) end
  local buffer
  host.set_interactive(true)
  while true do
    local line, interrupted = host.readline(tty and (buffer and '>> ' or 'dpl> ') or '')
    if interrupted then
      io.stdout:write('^C\n')
      buffer = nil
    elseif line == nil then
      if tty then io.stdout:write('\n') end
      if buffer then -- an unfinished entry (a `for` without its `end`): say why it never ran
        local _, err = loadstring((buffer:gsub('^=', 'return ')), '=stdin')
        if err then io.stdout:write(err, '\n') end
      end
      break
    else
      local src = buffer and (buffer .. '\n' .. line) or line
      if src:match('^%s*$') then
        buffer = nil
      else
        local fn, err = M.compile(src)
        if err == 'incomplete' then
          buffer = src
        else
          buffer = nil
          if tty then host.add_history(src) end
          if fn then M.execute(fn) else io.stdout:write(err, '\n') end
          io.stdout:flush()
        end
      end
    end
  end
  host.set_interactive(false)
  if path and host.line_editing() then host.write_history(path) end
end

return M
