-- helpers.lua: what the specs share: where the binary and the repository are,
-- running a command as a subprocess (stdout, stderr, exit code), temp files.
local M = {}

M.root = os.getenv('DPL_ROOT') or os.getenv('PWD')
M.bin = os.getenv('DPL_BIN') or (M.root .. '/dplhost')

local function read_all(path)
  local f = io.open(path, 'rb')
  if not f then return '' end
  local s = f:read('*a')
  f:close()
  return s
end
M.read_all = read_all

function M.write_file(path, text)
  local f = assert(io.open(path, 'wb'))
  f:write(text)
  f:close()
  return path
end

--- Single-quotes s for sh.
function M.q(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local counter = 0
function M.tmpname(suffix)
  counter = counter + 1
  local dir = os.getenv('DPL_TEST_TMP') or '/tmp'
  return ('%s/dpl-spec-%d-%d%s'):format(dir, M.pid(), counter, suffix or '')
end

local pid
function M.pid()
  if not pid then
    local f = io.open('/proc/self/stat')
    pid = f and tonumber(f:read('*l'):match('^(%d+)')) or math.random(1e6)
    if f then f:close() end
  end
  return pid
end

--- Runs a shell command line; returns stdout, stderr, exit status.
--- opts.stdin: text fed to its standard input; opts.timeout: seconds (default 60).
function M.sh(cmdline, opts)
  opts = opts or {}
  local out, err, rcf = M.tmpname('.out'), M.tmpname('.err'), M.tmpname('.rc')
  local input = '/dev/null'
  if opts.stdin then input = M.write_file(M.tmpname('.in'), opts.stdin) end
  local full = ('timeout -k 5 %d sh -c %s <%s >%s 2>%s; echo $? >%s'):format(
    opts.timeout or 60, M.q(cmdline), input, out, err, rcf)
  os.execute(full)
  local o, e, rc = read_all(out), read_all(err), tonumber(read_all(rcf))
  os.remove(out); os.remove(err); os.remove(rcf)
  if opts.stdin then os.remove(input) end
  return o, e, rc
end

--- Runs dplhost with the given argument string.
function M.dplhost(args, opts)
  return M.sh(M.q(M.bin) .. ' ' .. (args or ''), opts)
end

--- Runs a Lua chunk in a fresh dplhost (env: a prefix of VAR=value words); returns
--- stdout, stderr, exit status.
function M.run_chunk(code, env, opts)
  local f = M.write_file(M.tmpname('.lua'), code)
  local out, err, rc = M.sh((env or '') .. ' ' .. M.q(M.bin) .. ' ' .. M.q(f), opts or { timeout = 30 })
  os.remove(f)
  return out, err, rc
end

function M.has_command(name)
  return os.execute('command -v ' .. name .. ' >/dev/null 2>&1') == 0
end

--- Asserts that f() raises an error whose text contains `text` (plain, not a pattern).
function M.raises(f, text)
  local ok, e = pcall(f)
  assert(not ok, 'expected an error containing: ' .. text)
  assert(tostring(e):find(text, 1, true), ('expected an error containing %q, got %q'):format(text, tostring(e)))
end

--- Asserts that f() raises an error that is not Lua's own "attempt to ..." and whose text contains
--- each of the further arguments (plain); returns the text.
function M.errs(f, ...)
  local ok, e = pcall(f)
  assert(not ok, 'expected an error')
  local m = tostring(e)
  assert(not m:find('attempt to', 1, true), m)
  for _, want in ipairs({ ... }) do
    assert(m:find(want, 1, true), ('%q not in %q'):format(want, m))
  end
  return m
end

--- Asserts that a and b (numbers, nested lists, or tensors read with totable) have the same
--- shape and agree within tol (1e-9 by default) elementwise.
--- The numbers of the line "weights v1 v2 ..." a run printed (the DDP equivalence scripts).
function M.weights_of(out)
  local line = out:match('weights ([^\n]+)')
  assert(line, 'no "weights" line in:\n' .. tostring(out))
  local w = {}
  for v in line:gmatch('%S+') do w[#w + 1] = tonumber(v) end
  return w
end

--- Asserts two weight lists agree within float32 tolerance (1e-5 relative to max(1, |a|)).
function M.assert_weights_close(a, b)
  assert(#a == #b, ('expected %d weights, got %d'):format(#a, #b))
  for i = 1, #a do
    assert(math.abs(a[i] - b[i]) <= 1e-5 * math.max(1, math.abs(a[i])), ('weight %d: %s vs %s'):format(i, a[i], b[i]))
  end
end

--- Relative closeness of two numbers: |e - g| <= tol * (1 + |e|) (tol 1e-12 unless given).
function M.rel_near(e, g, tol) return math.abs(e - g) <= (tol or 1e-12) * (1 + math.abs(e)) end

--- Asserts two lists of numbers have the same length and are rel_near element by element;
--- the message names `what` and the first index that differs.
function M.assert_near_list(expected, got, what, tol)
  assert(#expected == #got, ('%s: expected %d numbers, got %d'):format(tostring(what), #expected, #got))
  for i = 1, #expected do
    assert(M.rel_near(expected[i], got[i], tol),
      ('%s[%d]: expected %.17g, got %.17g'):format(tostring(what), i, expected[i], got[i]))
  end
end

function M.near(a, b, tol)
  if type(a) == 'cdata' then a = a:totable() end
  if type(b) == 'cdata' then b = b:totable() end
  assert(type(a) == type(b), ('expected a %s, got a %s'):format(type(b), type(a)))
  if type(a) == 'number' then
    assert(math.abs(a - b) <= (tol or 1e-9), ('%.12g vs %.12g'):format(a, b))
    return
  end
  assert(#a == #b, ('expected %d elements, got %d'):format(#b, #a))
  for i = 1, #a do M.near(a[i], b[i], tol) end
end

--- Collects garbage until the CPU byte and storage counters stop moving (a dead tensor's
--- gradient and saved tensors sit in autograd's weak tables one or two collections
--- longer); returns the stable dpl.memory_stats('cpu').
function M.settle_memory()
  local dpl = require 'dpl'
  local prev
  for _ = 1, 20 do
    collectgarbage()
    local s = dpl.memory_stats('cpu')
    if prev and prev.current_bytes == s.current_bytes and prev.live_storages == s.live_storages then return s end
    prev = s
  end
  return prev
end

--- Nested Lua tables as reference tensors: the element at a 1-based position list, setting
--- it, and every position of a shape in row-major order.
function M.at(t, pos)
  for _, p in ipairs(pos) do t = t[p] end
  return t
end
function M.set_at(t, pos, v)
  for i = 1, #pos - 1 do t = t[pos[i]] end
  t[pos[#pos]] = v
end
function M.positions(shape)
  local out, pos = {}, {}
  local function rec(d)
    if d > #shape then out[#out + 1] = { unpack(pos) } return end
    for i = 1, shape[d] do pos[d] = i rec(d + 1) end
  end
  rec(1)
  return out
end

return M
