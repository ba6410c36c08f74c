-- devices_transfer_spec.lua: dpl.move_data_to_device (spec/devices.md, batch
-- transfer): objects with a callable `to` (tensor-like cdata metatypes, modules,
-- plain objects), nested arrays and maps copied with their metatables, leaves
-- untouched, inputs never mutated, shared tables, cycles reported.
local dpl = require 'dpl'
local D = require 'dpl.devices'
local errors = require 'dpl.errors'
local ffi = require 'ffi'
local run = require 'spec.support.devices_run'

-- A tensor stand-in: remembers where it is; `to` returns a new object.
local Fake = {}
Fake.__index = Fake
local moves = 0
local function fake(v, dev) return setmetatable({ v = v, device = dev or 'cpu' }, Fake) end
function Fake:to(device)
  moves = moves + 1
  return fake(self.v, tostring(device))
end

local function deepcopy(x, seen)
  if type(x) ~= 'table' then return x end
  seen = seen or {}
  if seen[x] then return seen[x] end
  local c = {}
  seen[x] = c
  for k, v in next, x do c[k] = deepcopy(v, seen) end
  return setmetatable(c, getmetatable(x))
end

describe('dpl.move_data_to_device', function()
  local cpu = dpl.device('cpu')

  it('is the function of dpl.devices', function()
    local b = { fake(1) }
    assert.are.equal('cpu', D.move_data_to_device(b, cpu)[1].device)
    assert.are.equal('cpu', dpl.move_data_to_device(b, 'cpu')[1].device)
  end)

  it('calls obj:to(device) on objects with a callable `to`, passing the device object', function()
    local got
    local obj = { to = function(self, d) got = { self, d }; return 'moved' end }
    assert.are.equal('moved', dpl.move_data_to_device(obj, 'cpu'))
    assert.are.equal(obj, got[1])
    assert.are.equal(cpu, got[2])
    local callable = setmetatable({}, { __call = function(_, self, d) return { self = self, d = tostring(d) } end })
    local o2 = { to = callable }
    local r = dpl.move_data_to_device(o2, cpu)
    assert.are.equal(o2, r.self)
    assert.are.equal('cpu', r.d)
  end)

  it('keeps the original object when `to` returns nil', function()
    local obj = setmetatable({ x = 1 }, { __index = { to = function() end } })
    assert.are.equal(obj, dpl.move_data_to_device(obj, cpu))
    local b = dpl.move_data_to_device({ obj, k = obj }, cpu)
    assert.are.equal(obj, b[1])
    assert.are.equal(obj, b.k)
  end)

  it('moves cdata with a `to` method (tensors are FFI metatypes)', function()
    pcall(ffi.cdef, 'typedef struct dpl_spec_fake_tensor { int dev; } dpl_spec_fake_tensor;')
    local T
    T = ffi.metatype('dpl_spec_fake_tensor', { __index = {
      to = function(self, d) return T(self.dev + 10 + d.index) end } })
    local t = T(1)
    local r = dpl.move_data_to_device({ x = t, list = { t } }, cpu)
    assert.are.equal(11, r.x.dev)
    assert.are.equal(r.x, r.list[1]) -- the same object reached twice is moved once
    assert.are.equal(1, t.dev)
  end)

  it('copies nested arrays and maps, keeping keys and metatables, and never mutates the input', function()
    local Batch = { __index = { kind = 'batch' } }
    local Pair = { __name = 'Pair' }
    local inner = setmetatable({ fake(1), fake(2) }, Pair)
    local batch = setmetatable({
      x = inner,
      y = { labels = { fake(3) }, n = 2, name = 'train', [7] = fake(4), [true] = 'flag' },
      fake(5), 'text', 42,
    }, Batch)
    local before = deepcopy(batch)
    moves = 0
    local out = dpl.move_data_to_device(batch, cpu)
    assert.are.equal(5, moves)
    -- new tables, same metatables
    assert.are_not.equal(batch, out)
    assert.are.equal(Batch, getmetatable(out))
    assert.are.equal('batch', out.kind)
    assert.are_not.equal(inner, out.x)
    assert.are.equal(Pair, getmetatable(out.x))
    assert.are_not.equal(batch.y, out.y)
    assert.is_nil(getmetatable(out.y))
    -- values moved, leaves as they are
    assert.are.equal('cpu', out.x[1].device)
    assert.are.equal(2, out.x[2].v)
    assert.are.equal(3, out.y.labels[1].v)
    assert.are_not.equal(batch.y.labels[1], out.y.labels[1])
    assert.are.equal(4, out.y[7].v)
    assert.are.equal('flag', out.y[true])
    assert.are.equal(2, out.y.n)
    assert.are.equal('train', out.y.name)
    assert.are.equal(5, out[1].v)
    assert.are.equal('text', out[2])
    assert.are.equal(42, out[3])
    -- the input is unchanged: same tables, same objects, same contents
    assert.are.same(before, batch)
    assert.are.equal(inner, batch.x)
    assert.are.equal('cpu', batch.x[1].device)
  end)

  it('returns leaves as they are: strings, numbers, booleans, nil, functions, cdata, userdata, threads', function()
    local cd = ffi.new('int[2]')
    local co = coroutine.create(print)
    local leaves = { 'a', 1.5, true, false, print, cd, io.stdout, co, ffi.new('int64_t', 3) }
    for _, v in ipairs(leaves) do
      assert.is_true(rawequal(v, dpl.move_data_to_device(v, cpu)), tostring(v))
    end
    assert.is_nil(dpl.move_data_to_device(nil, cpu))
    local out = dpl.move_data_to_device({ f = print, c = cd, s = 'x', u = io.stdout }, cpu)
    assert.are.equal(print, out.f)
    assert.is_true(rawequal(cd, out.c))
    assert.are.equal(io.stdout, out.u)
    assert.are.same({}, dpl.move_data_to_device({}, cpu))
  end)

  it('treats a `to` field that is not callable as data', function()
    local route = { from = 'a', to = 'b' }
    local out = dpl.move_data_to_device(route, cpu)
    assert.are_not.equal(route, out)
    assert.are.same(route, out)
  end)

  it('copies a table shared by two branches once, so the copy shares it too', function()
    local shared = { fake(1) }
    local out = dpl.move_data_to_device({ a = shared, b = shared }, cpu)
    assert.are.equal(out.a, out.b)
    assert.are_not.equal(shared, out.a)
  end)

  it('keeps protected metatables', function()
    local mt = { __metatable = 'locked', __index = { hello = 'world' } }
    local out = dpl.move_data_to_device(setmetatable({ 1 }, mt), cpu)
    assert.are.equal('locked', getmetatable(out))
    assert.are.equal('world', out.hello)
    assert.are.equal(mt, debug.getmetatable(out))
  end)

  it('does not trigger __newindex or __index of the tables it copies', function()
    local mt = { __newindex = function() error('__newindex called') end,
                 __index = function(_, k) if k ~= 'to' then error('__index called for ' .. tostring(k)) end end }
    local out = dpl.move_data_to_device(setmetatable({ a = fake(1), 2 }, mt), cpu)
    assert.are.equal(1, rawget(out, 'a').v)
    assert.are.equal(mt, getmetatable(out))
  end)

  it('reports a table that contains itself, instead of overflowing the stack', function()
    local a = { 1 }
    a[2] = a
    local ok, e = pcall(dpl.move_data_to_device, a, cpu)
    assert.is_false(ok)
    assert.is_true(errors.is(e, errors.ValueError))
    assert.are.equal('ValueError: move_data_to_device: the batch contains a cycle: batch[2] refers back to batch', tostring(e))
    local b = { x = { y = {} } }
    b.x.y.back = b.x
    ok, e = pcall(dpl.move_data_to_device, { data = b }, cpu)
    assert.is_false(ok)
    assert.truthy(tostring(e):find('cycle: batch.data.x.y.back refers back to batch.data.x', 1, true), tostring(e))
    local c = {}
    c['odd key'] = { c }
    ok, e = pcall(dpl.move_data_to_device, c, cpu)
    assert.truthy(tostring(e):find('batch["odd key"][1] refers back to batch', 1, true), tostring(e))
  end)

  it('passes errors of `to` through', function()
    local bad = { to = function() error(errors.RuntimeError('cannot move')) end }
    local ok, e = pcall(dpl.move_data_to_device, { bad }, cpu)
    assert.is_false(ok)
    assert.are.equal('RuntimeError: cannot move', tostring(e))
  end)

  it('checks the device argument', function()
    local function bad(cls, text, dev)
      local ok, e = pcall(dpl.move_data_to_device, {}, dev)
      assert.is_false(ok)
      assert.is_true(errors.is(e, cls), tostring(e))
      assert.truthy(tostring(e):find(text, 1, true), tostring(e))
    end
    bad(errors.TypeError, "move_data_to_device: device must be a device or a device string such as 'cpu' or 'cuda:0', got nil", nil)
    bad(errors.TypeError, 'got the number 0', 0)
    bad(errors.TypeError, 'got a table', { type = 'cpu' })
    bad(errors.ValueError, "invalid device string 'gpu'", 'gpu')
    bad(errors.RuntimeError, 'no TPU devices were found', 'tpu')
  end)

  it('moves to simulated GPUs by string or device', function()
    local setup = [[
      local Fake = {}; Fake.__index = Fake
      function Fake:to(d) return setmetatable({ where = d }, Fake) end
      batch = { x = setmetatable({}, Fake), y = { setmetatable({}, Fake), 3 } }
    ]]
    run.check(2, {
      { "dpl.move_data_to_device(batch, 'cuda:1').x.where", 'ok device(cuda:1)' },
      { "dpl.move_data_to_device(batch, dpl.device('cuda', 0)).y[1].where == dpl.device('cuda:0')", 'ok true' },
      { "dpl.move_data_to_device(batch, 'cuda:1').y[2]", 'ok 3' },
      { "dpl.move_data_to_device(batch, 'cuda:2')", 'err RuntimeError: dpl.device: cuda:2 does not exist' },
      { 'batch.x.where', 'ok nil' },
    }, { setup = setup })
  end)
end)
