-- repl_complete_spec.lua: the REPL's Tab completion candidates (dpl.repl_complete, pure
-- Lua) and help() (dpl.repl_help): names, fields, methods, lazily loaded names, and
-- that completing never runs a user's __index function.
local C = require 'dpl.repl_complete'
local H = require 'dpl.repl_help'
local dpl = require 'dpl'

local function has(list, x)
  for _, v in ipairs(list) do if v == x then return true end end
  return false
end

describe('dpl.repl_complete', function()
  local env
  before_each(function()
    env = setmetatable({ dpl = dpl, nn = dpl.nn, t = dpl.ones(2, 3), s = 'text', n = 3 }, { __index = _G })
  end)

  it('completes globals and keywords', function()
    assert.is_true(has(C.complete('pri', env), 'print('))
    assert.is_true(has(C.complete('func', env), 'function'))
    assert.is_true(has(C.complete('dp', env), 'dpl'))
  end)

  it('completes fields of tables, dpl\'s lazily loaded names included', function()
    local r = C.complete('dpl.ten', env)
    assert.is_true(has(r, 'dpl.tensor'), table.concat(r, ' '))
    assert.is_true(has(C.complete('dpl.ze', env), 'dpl.zeros'))
    assert.is_true(has(C.complete('nn.Lin', env), 'nn.Linear'))
    assert.is_true(has(C.complete('dpl.nn.functional.rel', env), 'dpl.nn.functional.relu('))
    assert.is_true(has(C.complete('dpl.callbacks.Early', env), 'dpl.callbacks.EarlyStopping'))
    assert.is_true(has(C.complete('dpl.loggers.CSV', env), 'dpl.loggers.CSVLogger'))
    assert.is_true(has(C.complete('dpl.optim.lr_scheduler.Step', env), 'dpl.optim.lr_scheduler.StepLR'))
    -- a tensor function a lazily loaded module installs (dpl.tensor_lazy lists it)
    assert.is_true(has(C.complete('dpl.tensor.einsu', env), 'dpl.tensor.einsum'))
  end)

  it('completes tensor methods after `:` and properties too after `.`', function()
    local r = C.complete('t:res', env)
    assert.is_true(has(r, 't:reshape('), table.concat(r, ' '))
    assert.is_false(has(C.complete('t:sh', env), 't:shape')) -- a property is not a method
    assert.is_true(has(C.complete('t.sh', env), 't.shape'))
    assert.is_true(has(C.complete('t.su', env), 't.sum')) -- listed, without `(`, after `.`
    assert.is_true(has(C.complete('t:logaddexp', env), 't:logaddexp(')) -- a lazily loaded method
  end)

  it('completes methods of class instances and string methods', function()
    env.m = dpl.nn.Linear(2, 3)
    assert.is_true(has(C.complete('m:parame', env), 'm:parameters('))
    assert.is_true(has(C.complete('m.wei', env), 'm.weight'))
    assert.is_true(has(C.complete('s:up', env), 's:upper('))
  end)

  it('hides _names until `_` is typed, metamethods until `__`', function()
    env.obj = { _private = 1, public = 2 }
    assert.are.same({ 'obj.public' }, C.complete('obj.', env))
    assert.are.same({ 'obj._private' }, C.complete('obj._', env))
  end)

  it('never calls an __index function (nor resolves through one) unless __dir names the key', function()
    local calls = 0
    env.lazy = setmetatable({}, { __index = function(_, k) calls = calls + 1 return { inner = 1 } end })
    assert.are.same({}, C.complete('lazy.', env))
    assert.are.same({}, C.complete('lazy.x.', env))
    assert.are.equal(0, calls)
    env.listed = setmetatable({}, {
      __dir = function() return { 'a' } end,
      __index = function(_, k) calls = calls + 1 return k == 'a' and { inner = 1 } or nil end,
    })
    assert.are.same({ 'listed.a' }, C.complete('listed.', env))
    assert.are.equal(0, calls)
    assert.are.same({ 'listed.a.inner' }, C.complete('listed.a.', env))
    assert.are.equal(1, calls)
  end)

  it('does not read a Trainer property (computed) while completing it', function()
    local Trainer = require 'dpl.trainer'
    env.tr = setmetatable({}, Trainer)
    local r = C.complete('tr.estimated', env)
    assert.is_true(has(r, 'tr.estimated_stepping_batches'), table.concat(r, ' '))
    assert.is_true(has(C.complete('tr:fi', env), 'tr:fit('))
    assert.are.same({}, C.complete('tr.estimated_stepping_batches.', env))
  end)

  it('gives nothing for what is not a name path', function()
    assert.are.same({}, C.complete('nosuch.', env))
    assert.are.same({}, C.complete('dpl..x', env))
    assert.are.same({}, C.complete('1.', env))
    assert.are.same({}, C.complete('n.', env))
  end)
end)

describe('dpl.repl_help', function()
  local function help(x)
    local lines = {}
    H.help(x, function(s) lines[#lines + 1] = s end)
    return table.concat(lines, '\n')
  end

  it('prints an overview, and a signature, a line and a docs reference for entry points', function()
    local lines = {}
    local real = io.stdout
    local ok = pcall(function()
      io.stdout = { write = function(_, ...) for _, s in ipairs({ ... }) do lines[#lines + 1] = s end end }
      H.help()
    end)
    io.stdout = real
    assert.is_true(ok)
    assert.truthy(table.concat(lines):find('docs/trainer.md', 1, true))
    local s = help(dpl.nn.Linear)
    assert.truthy(s:find('nn.Linear(in_features, out_features', 1, true), s)
    assert.truthy(s:find('more: docs/nn.md:%d+ %(## Layers%)'), s)
    s = help(dpl.tensor)
    assert.truthy(s:find('dpl.tensor(data', 1, true), s)
    assert.truthy(s:find('docs/tensors.md:%d+ %(## Constructors%)'), s)
    s = help('dpl.Trainer')
    assert.truthy(s:find('Lightning', 1, true), s)
    assert.truthy(s:find('docs/trainer.md', 1, true), s)
  end)

  it('names a tensor method and gives its parameters', function()
    local t = dpl.ones(2)
    local s = help(t.sum)
    assert.truthy(s:find('Tensor:sum(', 1, true) or s:find('dpl.sum(', 1, true), s)
    assert.truthy(s:find('docs/tensors.md', 1, true), s)
    s = help(t)
    assert.truthy(s:find('a Tensor: shape [2], dtype float32', 1, true), s)
  end)

  it('describes an instance through its class, a user function by its definition', function()
    local s = help(dpl.nn.Linear(2, 3))
    assert.truthy(s:find('an instance of dpl.nn.Linear', 1, true), s)
    local function mine(a, b) return a + b end
    s = help(mine)
    assert.truthy(s:find('function(a, b)', 1, true), s)
    assert.truthy(s:find('repl_complete_spec.lua:%d+'), s)
  end)

  it('says clearly when it knows nothing', function()
    assert.truthy(help(42):find('42 is a number value; there is no documentation for it', 1, true))
    assert.truthy(help('no.such.thing'):find('help: no no.such.thing found', 1, true))
    assert.truthy(help({}):find("not one of dpl's names", 1, true))
    assert.truthy(help(nil):find('the value is nil', 1, true))
  end)
end)
