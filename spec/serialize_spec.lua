-- serialize_spec.lua: dpl.save / dpl.load (dpl.serialize), torch.save / torch.load for data:
-- trees of tensors, numbers (NaN, -0, 2^53+), strings with any bytes, booleans and int64
-- cdata come back exactly; one tensor stored once and loaded as one object (tied weights);
-- views saved as their values; state_dicts load into modules and optimizers; Torch7's argument
-- order; plain safetensors files; the clear errors for what cannot be stored.
local dpl = require 'dpl'
local h = require 'spec.support.helpers'

local function tmp(name) return h.tmpname('-' .. name) end

describe('dpl.save / dpl.load', function()
  it('round-trips a tree of tensors and plain values exactly', function()
    local w = dpl.randn(2, 2)
    local obj = { step = 7, name = 'run\0x\255', nan = 0 / 0, negz = -0.0, flags = { true, false },
      tied = { w, w }, big = 2 ^ 53 + 1LL, nested = { a = { b = { c = 'deep' } } },
      i64 = dpl.tensor({ 1, 2, 3 }, { dtype = 'int64' }), f64 = dpl.tensor({ 0.1, 1 / 3 }, { dtype = 'float64' }),
      u8 = dpl.tensor({ 0, 255 }, { dtype = 'uint8' }), view = dpl.arange(12):float():reshape(3, 4):t(), [3] = 'three' }
    local p = tmp('tree.dpl')
    dpl.save(obj, p)
    local o = dpl.load(p)
    assert.are.equal(7, o.step)
    assert.are.equal('run\0x\255', o.name)
    assert.is_true(o.nan ~= o.nan)
    assert.are.equal(-math.huge, 1 / o.negz)
    assert.are.same({ true, false }, o.flags)
    assert.is_true(rawequal(o.tied[1], o.tied[2]), 'one tensor saved twice comes back as one object')
    assert.are.same(w:totable(), o.tied[1]:totable())
    assert.is_true(o.big == 2 ^ 53 + 1LL)
    assert.are.equal('deep', o.nested.a.b.c)
    assert.are.equal('three', o[3])
    assert.are.equal('int64', o.i64.dtype)
    assert.are.same({ 1, 2, 3 }, o.i64:totable())
    assert.are.equal('float64', o.f64.dtype)
    assert.are.equal(1 / 3, o.f64:totable()[2])
    assert.are.same({ 0, 255 }, o.u8:totable())
    assert.are.same({ 4, 3 }, o.view:size())
    assert.are.same(obj.view:totable(), o.view:totable())
    -- a bare tensor, and an empty table
    dpl.save(dpl.ones(2), p)
    assert.are.same({ 1, 1 }, dpl.load(p):totable())
    dpl.save({}, p)
    assert.are.same({}, dpl.load(p))
    os.remove(p)
  end)

  it('state_dicts go back into a module and an optimizer', function()
    dpl.manual_seed(1)
    local m = dpl.nn.Linear(3, 2)
    local opt = dpl.optim.Adam(m:parameters(), { lr = 0.1 })
    m(dpl.randn(4, 3)):sum():backward()
    opt:step()
    local p = tmp('sd.dpl')
    dpl.save({ model = m:state_dict(), optimizer = opt:state_dict(), epoch = 3 }, p)
    local ck = dpl.load(p)
    local m2 = dpl.nn.Linear(3, 2)
    m2:load_state_dict(ck.model)
    assert.are.same(m.weight:totable(), m2.weight:totable())
    local opt2 = dpl.optim.Adam(m2:parameters(), { lr = 0.1 })
    opt2:load_state_dict(ck.optimizer)
    -- the next steps match
    local x = dpl.randn(4, 3)
    for _, pair in ipairs({ { m, opt }, { m2, opt2 } }) do
      pair[2]:zero_grad()
      pair[1](x):sum():backward()
      pair[2]:step()
    end
    assert.are.same(m.weight:totable(), m2.weight:totable())
    os.remove(p)
  end)

  it('takes Torch7\'s order (path, obj); reads plain safetensors files as name = tensor', function()
    local p = tmp('t7.dpl')
    dpl.save(p, { x = dpl.ones(3) })
    assert.are.same({ 1, 1, 1 }, dpl.load(p).x:totable())
    dpl.safetensors.save(p, { a = dpl.zeros(2) }, { note = 'from elsewhere' })
    local t = dpl.load(p)
    assert.are.same({ 0, 0 }, t.a:totable())
    os.remove(p)
  end)

  it('a table found in several places is stored once and comes back shared (a DAG stays small)', function()
    local p = tmp('shared.dpl')
    local cfg = { lr = 0.1, tags = { 'a' }, w = dpl.ones(2) }
    local t = { a = cfg, b = { cfg, cfg }, e = {}, }
    t.f = t.e
    -- 2^16 paths to the same leaf: stored once, not 65536 times
    local dag = { leaf = 'x' }
    for _ = 1, 16 do dag = { l = dag, r = dag } end
    t.dag = dag
    dpl.save(t, p)
    local f = io.open(p, 'rb')
    local size = f:seek('end')
    f:close()
    assert.is_true(size < 4096, size)
    local o = dpl.load(p)
    assert.is_true(rawequal(o.a, o.b[1]) and rawequal(o.a, o.b[2]))
    assert.is_true(rawequal(o.e, o.f))
    assert.are.same({ 'a' }, o.a.tags)
    assert.are.equal(0.1, o.a.lr)
    assert.are.same({ 1, 1 }, o.b[2].w:totable())
    assert.is_nil(rawget(o.a, '__dpl_def__'))
    local d = o.dag
    for _ = 1, 16 do assert.is_true(rawequal(d.l, d.r)); d = d.l end
    assert.are.same({ leaf = 'x' }, d)
    -- a big tree of numbers saves and loads quickly (the tree's base64 runs over FFI buffers)
    local big = {}
    for i = 1, 200000 do big[i] = i / 4 end
    local t0 = os.clock()
    dpl.save({ big = big, s = ('\0\1\255'):rep(100001) }, p)
    o = dpl.load(p)
    assert.are.equal(200000, #o.big)
    assert.are.equal(12345 / 4, o.big[12345])
    assert.are.equal(('\0\1\255'):rep(100001), o.s)
    assert.is_true(os.clock() - t0 < 2, os.clock() - t0)
    os.remove(p)
  end)

  it('refuses what it cannot store, naming where it is', function()
    local p = tmp('bad.dpl')
    local function err(...) local ok, e = pcall(dpl.save, ...) assert.is_false(ok) return tostring(e) end
    assert.matches('TypeError: dpl.save: obj is an object %(a table with a metatable.*save its state_dict%(%) instead',
      err(dpl.nn.Linear(1, 1), p))
    assert.matches('dpl.save: obj%["opts"%]%["f"%] is a function', err({ opts = { f = print } }, p))
    local c = {}
    c.self = c
    assert.matches('dpl.save: obj%["self"%] refers back to a table that contains it %(a cycle%)', err(c, p))
    assert.matches('keys must be strings, numbers or booleans', err({ [{}] = 1 }, p))
    -- dpl.save's own marker keys (a table holding one would load as a tensor or a reference)
    assert.matches('dpl.save: obj%["x"%] has the key "__dpl_tensor__", which dpl.save reserves',
      err({ x = { __dpl_tensor__ = 1 } }, p))
    assert.matches('has the key "__dpl_ref__"', err({ { __dpl_ref__ = 1 } }, p))
    assert.matches('path must be a string', err({}, 3))
    assert.matches('path must be a string', select(2, pcall(dpl.load, {})))
    assert.matches("cannot open", tostring(select(2, pcall(dpl.load, p .. '.none'))))
    assert.is_nil(io.open(p, 'rb'), 'nothing written on an error')
  end)
end)

describe('dpl.save files in Python\'s safetensors', function()
  it('load there: the tensors t1, t2 and the tree in the metadata (skipped without safetensors)', function()
    local py = os.getenv('DPL_PYTHON')
    if not py or py == '' or select(3, h.sh(h.q(py) .. ' -c "import safetensors, numpy"')) ~= 0 then
      print('skipped: no python with safetensors (scripts/install-deps.sh makes build/pyref)')
      return
    end
    local p = tmp('py.dpl')
    dpl.save({ w = dpl.tensor({ { 1, 2 }, { 3, 4 } }), step = 3, ids = dpl.tensor({ 7, 8 }, { dtype = 'int64' }) }, p)
    local out, err, rc = h.sh(h.q(py) .. ' -c ' .. h.q(([[
from safetensors import safe_open
with safe_open(%q, 'np') as f:
    meta = f.metadata()
    print(meta['format'], sorted(f.keys()), [f.get_tensor(k).tolist() for k in sorted(f.keys())], len(meta['dplhost.tree']) > 0)
]]):format(p)))
    os.remove(p)
    assert.are.equal(0, rc, err)
    assert.matches("^dplhost.save %['t1', 't2'%] .* True", out)
    assert.is_truthy(out:find('[7, 8]', 1, true), out)
    assert.is_truthy(out:find('[[1, 2], [3, 4]]', 1, true), out)
  end)
end)
