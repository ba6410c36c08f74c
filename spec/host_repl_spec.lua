-- host_repl_spec.lua: the REPL, driven through a real pseudo-terminal (tmux):
-- values print, `=expr`, `_`, multi-line input, errors keep the loop going,
-- Ctrl-C interrupts a running chunk and clears a half-typed line, Ctrl-D
-- exits, history persists, Tab completes, help() prints. Also the pretty printer and the compile step alone.
local h = require 'spec.support.helpers'
local repl = require 'dpl.repl'
local pretty = require 'dpl.pretty'

local function sleep(s) require('dpl.capi').C.dpl_sleep(s) end

local Term = {}
Term.__index = Term

local function tmux(self, args)
  local out, err, rc = h.sh('tmux -L ' .. self.sock .. ' ' .. args)
  return out, err, rc
end

function Term.start(cmd)
  local self = setmetatable({ sock = 'dplspec' .. h.pid() .. math.random(1e6) }, Term)
  local _, err, rc = tmux(self, 'new-session -d -s t -x 150 -y 50 ' .. h.q(cmd .. '; echo "[exit $?]"; sleep 60'))
  assert(rc == 0, 'tmux failed: ' .. err)
  return self
end

function Term:type(text) tmux(self, 'send-keys -t t -l ' .. h.q(text)) end
function Term:key(k) tmux(self, 'send-keys -t t ' .. k) end
function Term:line(text) self:type(text); self:key('Enter') end
function Term:screen() return (tmux(self, 'capture-pane -p -J -t t -S -200')) end
function Term:wait_for(pattern, timeout)
  local deadline = os.time() + (timeout or 10)
  repeat
    local s = self:screen()
    if s:find(pattern) then return s end
    sleep(0.05)
  until os.time() > deadline
  error('timed out waiting for ' .. pattern .. '; screen:\n' .. self:screen(), 2)
end
function Term:close() tmux(self, 'kill-server') end

describe('the REPL on a terminal #repl', function()
  local hist, term
  before_each(function()
    hist = h.tmpname('.hist')
    term = Term.start('DPL_HISTORY=' .. h.q(hist) .. ' ' .. h.q(h.bin))
    term:wait_for('dpl> ')
  end)
  after_each(function()
    term:close()
    os.remove(hist)
  end)

  it('prints values, pretty tables, _ and multi-line results', function()
    term:line('1 + 1')
    term:wait_for('\n2\n')
    term:line('={a = 1, b = {2, 3}}')
    term:wait_for('b = {2, 3},')
    term:line('_.a * 10')
    term:wait_for('\n10\n')
    term:line('for i = 1, 2 do')
    term:wait_for('>> ')
    term:line('print("line", i)')
    term:line('end')
    term:wait_for('line%s+1\nline%s+2\n')
  end)

  it('prints an error with its traceback and keeps going', function()
    term:line('local function f() error("oops") end f()')
    term:wait_for('stdin:1: oops\nstack traceback:\n')
    term:line('x = = 1')
    term:wait_for("unexpected symbol near '='")
    term:line('print("still " .. "here")')
    term:wait_for('\nstill here\n')
  end)

  it('interrupts a running chunk with Ctrl-C and keeps the variables', function()
    term:line('n = 0 while true do n = n + 1 collectgarbage("count") end')
    sleep(0.5)
    term:key('C-c')
    term:wait_for('%^Cinterrupted\n')
    term:line('print("alive", n > 0)')
    term:wait_for('alive%s+true')
  end)

  it('interrupts a loop LuaJIT would compile, typed at the prompt', function()
    term:line('s = 0 for i = 1, 1e12 do s = s + i end')
    sleep(0.5)
    term:key('C-c')
    term:wait_for('%^Cinterrupted\n', 3)
    term:line('print("alive", s > 0)')
    term:wait_for('alive%s+true')
    assert.is_nil(term:screen():find('cannot be interrupted', 1, true))
  end)

  it('clears a half-typed line with Ctrl-C at the prompt', function()
    term:type('this is not lua')
    term:key('C-c')
    term:wait_for('%^C')
    term:line('3 * 3')
    term:wait_for('\n9\n')
  end)

  it('completes names with Tab (libedit calls the completer) and prints help()', function()
    term:line('dpl = require "dpl"; tt = dpl.ones(2)')
    term:wait_for('ones%(2%)\ndpl> ')
    term:type('x = dpl.zeros_l')
    term:key('Tab')
    term:wait_for('dpl> x = dpl%.zeros_like')
    term:key('C-u')
    term:type('tt:resha')
    term:key('Tab') -- reshape( and reshape_as(: their common part
    term:wait_for('dpl> tt:reshape ')
    term:key('C-u')
    term:type('tt:nume')
    term:key('Tab')
    term:wait_for('dpl> tt:numel%(')
    term:type(') * 10')
    term:key('Enter')
    term:wait_for('numel%(%) %* 10%s*\n20\ndpl> ')
    term:type('dpl.ten')
    term:key('Tab')
    term:key('Tab') -- the second lists the candidates
    term:wait_for('dpl%.tensor%s+dpl%.tensor_split%s+dpl%.tensordot')
    term:key('C-u')
    term:line('help(dpl.nn.Linear)')
    term:wait_for('more: docs/nn%.md:%d+')
    term:type('Makef') -- no such name: nothing (libedit's fallback would complete ./Makefile)
    term:key('Tab')
    term:line('x')
    term:wait_for("dpl> Makefx%s*\nnil\n")
  end)

  it('exits with Ctrl-D and keeps the history for the next session', function()
    term:line('hist_marker = 123')
    term:key('C-d')
    term:wait_for('%[exit 0%]')
    term:close()
    assert.truthy(h.read_all(hist):find('hist_marker', 1, true), 'history file lacks the entry')
    term = Term.start('DPL_HISTORY=' .. h.q(hist) .. ' ' .. h.q(h.bin))
    term:wait_for('dpl> ')
    term:key('Up')
    term:wait_for('dpl> hist_marker = 123')
  end)
end)

describe('the REPL without a terminal', function()
  it('hints at `.` for `:` when a tensor method runs without its tensor (loss.item())', function()
    local out, err, rc = h.dplhost('-i', { stdin = 'dpl = require "dpl"\nloss = dpl.ones(1)\nloss.item()\n' })
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("attempt to index local 't' (a nil value)\n  (hint: a method called with '.' instead of ':'?", 1, true), out)
    local _, err2 = h.dplhost("-e \"require('dpl').ones(1).item()\"")
    assert.truthy(err2:find("(hint: a method called with '.' instead of ':'?", 1, true), err2)
  end)

  it('reads lines from stdin with -i and prints values without prompts', function()
    local out, err, rc = h.dplhost('-i', { stdin = '=1+2\nerror("bad")\nprint("next")\n"s"\n' })
    assert.are.equal(0, rc, err)
    assert.are.equal('3\nstdin:1: bad\nstack traceback:\n\tstdin:1: in main chunk\nnext\n"s"\n', out)
  end)

  it('shows the prompt\'s frame when an expression\'s call fails (no tail call hides it)', function()
    local out, err, rc = h.dplhost('-l dpl -i', { stdin = table.concat({
      'function f(x) return x:matmul(dpl.ones(5, 5)) end',
      'f(dpl.ones(2, 3))',
      'local function g() error("deep") end g()',
      'function three() return 1, nil, 3 end',
      'three()',
      '=three()',
      'print("printed")',
      '2 + 3;',
      '', }, '\n') })
    assert.are.equal(0, rc, err)
    local frames, inside = {}, false -- the matmul error's traceback
    for line in out:gmatch('[^\n]*') do
      if line:find('matmul: inner dims do not match', 1, true) then inside = true
      elseif inside and line:sub(1, 1) == '\t' then frames[#frames + 1] = line
      elseif inside and line ~= 'stack traceback:' and line ~= '' then break end
    end
    assert.are.equal('\tstdin:1: in main chunk', frames[#frames], table.concat(frames, '\n'))
    assert.matches('stdin:1: deep\nstack traceback:\n\tstdin:1: in function \'g\'\n\tstdin:1: in main chunk\n', out)
    assert.matches('\n1\tnil\t3\n1\tnil\t3\nprinted\n5\n$', out)
  end)

  it('prints several results one per line when one of them takes several lines (linalg tuples)', function()
    local out, err, rc = h.dplhost('-l dpl -i', { stdin = 'dpl.linalg.eigh(dpl.eye(2))\n1, "a", nil\n' })
    assert.are.equal(0, rc, err)
    assert.matches('^tensor%(%[1%., 1%.%][^\n]*\ntensor%(%[%[1%., 0%.%],\n%s+%[0%., 1%.%]%][^\n]*\n1\t"a"\tnil\n$', out)
  end)

  it('reports an entry left unfinished at the end of input instead of dropping it', function()
    local out, err, rc = h.dplhost('-i', { stdin = 'print("first")\nfor i = 1, 2 do\nprint(i)\n' })
    assert.are.equal(0, rc, err)
    assert.are.equal("first\nstdin:2: 'end' expected (to close 'for' at line 1) near '<eof>'\n", out)
  end)

  it('prints a distribution\'s one-element parameters by value (PyTorch\'s repr), larger ones by shape', function()
    local out, err, rc = h.dplhost('-l dpl -i', { stdin = table.concat({
      'dpl.distributions.Normal(0, 1)',
      'dpl.distributions.Normal(dpl.tensor({0.5}), dpl.tensor({2.0}))',
      'dpl.distributions.Normal(dpl.zeros(3), 1)',
      'dpl.distributions.Categorical({probs = dpl.tensor({0.2, 0.8})})',
      'dpl.distributions.Bernoulli({probs = 0.3})', '' }, '\n') })
    assert.are.equal(0, rc, err)
    assert.are.equal('Normal(loc: tensor(0.), scale: tensor(1.))\n' ..
      'Normal(loc: tensor([0.5000]), scale: tensor([2.]))\n' ..
      'Normal(loc: [3], scale: [3])\n' ..
      'Categorical(probs: [2])\n' ..
      'Bernoulli(probs: tensor(0.3000))\n', out)
  end)

  it('prints a MetricCollection as its metrics, not its fields', function()
    local out, err, rc = h.dplhost('-l dpl -i', { stdin = table.concat({
      'M = dpl.metrics',
      'M.MetricCollection({acc = M.Accuracy({task = "multiclass", num_classes = 3}), ' ..
        'f1 = M.F1Score({task = "multiclass", num_classes = 3})}, {prefix = "val_"})', '' }, '\n') })
    assert.are.equal(0, rc, err)
    assert.are.equal('MetricCollection(\n  (acc): MulticlassAccuracy()\n  (f1): MulticlassF1Score(),\n' ..
      "  prefix=val_\n)\n", out)
  end)

  it('describes an error object whose __tostring fails', function()
    local out, err, rc = h.dplhost('-i', { stdin = 'error(setmetatable({}, {__tostring = function() error("no text") end}))\n' })
    assert.are.equal(0, rc, err)
    assert.matches('^%(error object is a table value; its __tostring failed: stdin:1: no text%)\n', out)
  end)

  it('interrupts a loop LuaJIT would compile, typed at the prompt, and goes on', function()
    local ready = h.tmpname('.ready')
    local out, err = h.sh(([[printf '%%s\n' 'io.open(%q, "w"):close() s = 0 for i = 1, 1e12 do s = s + i end' \
        'print("alive", s > 0)' | %s -i & pid=$!
      i=0; while [ ! -e %s ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
      sleep 0.3; kill -INT $pid; wait $pid; echo "rc=$?"]]):format(ready, h.q(h.bin), h.q(ready)), { timeout = 20 })
    os.remove(ready)
    assert.are.equal('interrupted\nalive\ttrue\nrc=0\n', out, err)
  end)

end)

describe('repl.compile', function()
  it('compiles expressions, =expr, statements; reports incomplete and bad input', function()
    assert.are.equal(5, repl.compile('2 + 3')())
    assert.are.equal(7, repl.compile('=3 + 4')())
    assert.is_function(repl.compile('local x = 1'))
    local fn, err = repl.compile('for i = 1, 2 do')
    assert.is_nil(fn)
    assert.are.equal('incomplete', err)
    fn, err = repl.compile('x = = 1')
    assert.is_nil(fn)
    assert.matches("unexpected symbol near '='", err)
  end)
end)

describe('dpl.pretty', function()
  it('formats scalars, nested tables sorted, cycles and long tables', function()
    assert.are.equal('42', pretty.format(42))
    assert.are.equal('0.5', pretty.format(0.5))
    assert.are.equal('"a\\"b"', pretty.format('a"b'))
    assert.are.equal('{}', pretty.format({}))
    assert.are.equal('{\n  1,\n  2,\n  ["a b"] = "c",\n  x = true,\n}',
      pretty.format({ 1, 2, x = true, ['a b'] = 'c' }))
    local t = { name = 'loop' }
    t.self = t
    assert.matches('self = <cycle: table: ', pretty.format(t))
    local big = {}
    for i = 1, 300 do big[i] = i end
    assert.matches('%.%.%. %(300 entries in all%)', pretty.format(big))
  end)

  it('puts a short list of numbers on one line (a shape)', function()
    assert.are.equal('{4, 3}', pretty.format({ 4, 3 }))
    assert.are.equal('dpl.Size({4, 3})', pretty.format(require('dpl').ones(4, 3).shape))
    assert.are.equal('{\n  s = {1, 0.5, true},\n}', pretty.format({ s = { 1, 0.5, true } }))
    assert.are.equal('{\n  1,\n  "a",\n}', pretty.format({ 1, 'a' }))
  end)

  it('uses __tostring where a value has one', function()
    local v = setmetatable({}, { __tostring = function() return 'tensor([1, 2])' end })
    assert.are.equal('{\n  v = tensor([1, 2]),\n}', pretty.format({ v = v }))
  end)
end)

describe('repl.compile: line numbers of an expression', function()
  it('puts the error of an expression\'s last operation (an index) on stdin:1, with comments too', function()
    local fn = repl.compile('({})[1].x')
    local ok, e = pcall(fn)
    assert.is_false(ok)
    assert.matches('^stdin:1:', e)
    assert.are.equal(2, repl.compile('1 + 1 -- two')())
    assert.are.equal(2, repl.compile('=2 --[[x]]')())
  end)
end)
