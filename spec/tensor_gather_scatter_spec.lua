-- tensor_gather_scatter_spec.lua: gather and scatter_add_ with their 1-based indices read by C as they
-- are (dpl_gather_base / dpl_scatter_add_base, base 1: no shifted index copy) and each index checked
-- as the loop uses it: results against a plain Lua loop over every dim, dtypes (float32/64, int64/32,
-- float16, uint8), int32 and int64 indices, index shapes smaller than self, strided self, src and
-- index, duplicates; the range errors (index 0, size + 1, negative; the value as written, 1-based) and
-- what stays written when one comes (the additions before it, as in PyTorch's kernel).
local dpl = require 'dpl'
local raises = require('spec.support.helpers').raises

local H = require 'spec.support.helpers'
local at, set, positions = H.at, H.set_at, H.positions

-- reference: scatter_add_ and gather by the definition, on nested tables
local function ref_scatter_add(self, dim, idx, src, ishape)
  local r = self:totable()
  local it, st = idx:totable(), src:totable()
  for _, p in ipairs(positions(ishape)) do
    local q = { unpack(p) }
    q[dim] = at(it, p)
    set(r, q, at(r, q) + at(st, p))
  end
  return r
end
local function ref_gather(self, dim, idx, ishape)
  local s, it = self:totable(), idx:totable()
  local r = idx:totable()
  for _, p in ipairs(positions(ishape)) do
    local q = { unpack(p) }
    q[dim] = at(it, p)
    set(r, p, at(s, q))
  end
  return r
end

local function same_nested(a, b, label)
  if type(a) == 'table' then
    assert.are.equal(#b, #a, label)
    for i = 1, #a do same_nested(a[i], b[i], label) end
  else
    assert(a == b or math.abs(a - b) <= 1e-3 * math.max(1, math.abs(b)), ('%s: %s vs %s'):format(label, tostring(a), tostring(b)))
  end
end

describe('gather / scatter_add_ with 1-based indices read in place', function()
  it('match the definition for every dim, dtype, index dtype and smaller index shapes', function()
    dpl.manual_seed(7)
    for _, dtype in ipairs({ 'float32', 'float64', 'int64', 'int32', 'float16', 'uint8' }) do
      for _, shape in ipairs({ { 5 }, { 4, 6 }, { 3, 4, 5 } }) do
        for dim = 1, #shape do
          for _, idt in ipairs({ 'int64', 'int32' }) do
            local ishape = {}
            for d = 1, #shape do ishape[d] = d == dim and shape[d] + 2 or math.max(1, shape[d] - (d % 2)) end
            local self = (dpl.rand(unpack(shape)) * 10):to(dtype)
            local src = (dpl.rand(unpack(ishape)) * 10):to(dtype)
            local idx = dpl.randint(1, shape[dim] + 1, ishape):to(idt) -- duplicates: more entries than the dim
            local label = ('%s %s dim %d idx %s'):format(dtype, table.concat(shape, 'x'), dim, idt)
            local want = ref_scatter_add(self, dim, idx, src, ishape)
            same_nested(self:clone():scatter_add_(dim, idx, src):totable(), want, 'scatter_add_ ' .. label)
            same_nested(dpl.scatter_add(self, dim, idx, src):totable(), want, 'dpl.scatter_add ' .. label)
            same_nested(self:gather(dim, idx):totable(), ref_gather(self, dim, idx, ishape), 'gather ' .. label)
          end
        end
      end
    end
  end)

  it('read strided self, src and index, and write a strided self', function()
    dpl.manual_seed(11)
    local base = dpl.randn(6, 5)
    local self = base:t() -- [5, 6], strides {1, 5}
    local src = dpl.randn(6, 5):t()
    local idx = dpl.randint(1, 7, { 6, 5 }):t() -- [5, 6], strided
    for dim = 1, 2 do
      local lim = self:size(dim)
      local ix = idx:remainder(lim):add(1)
      local want = ref_scatter_add(self, dim, ix, src, { 5, 6 })
      local got = self:clone() -- (contiguous) and a strided one
      same_nested(got:scatter_add_(dim, ix, src):totable(), want, 'contiguous self, dim ' .. dim)
      local strided = base:clone():t()
      assert.is_false(strided:is_contiguous())
      same_nested(strided:scatter_add_(dim, ix, src):totable(), want, 'strided self, dim ' .. dim)
      same_nested(self:gather(dim, ix):totable(), ref_gather(self, dim, ix, { 5, 6 }), 'strided gather, dim ' .. dim)
    end
    -- a 1000-wide contiguous row (the unrolled loop, prefetching rows ahead) against index_add_'s way
    local m = dpl.randn(9, 1000)
    local ix = dpl.randint(1, 1001, { 9, 1000 })
    local want = ref_scatter_add(m, 2, ix, m, { 9, 1000 })
    same_nested(m:clone():scatter_add_(2, ix, m):totable(), want, 'wide rows')
    -- an index table and an index shared with self's memory
    assert.are.same({ { 0, 2, 0 } }, dpl.zeros(1, 3):scatter_add_(2, { { 2, 2 } }, dpl.ones(1, 2)):totable())
  end)

  it('name the bad index as written (1-based) and the dim size, for index 0, size + 1 and negatives', function()
    local x = dpl.zeros(3, 4)
    local src = dpl.ones(3, 4)
    local cases = {
      { 2, { { 1, 0 } }, 'index 0 is out of range for dim 2 of size 4 (expected 1..4)' },
      { 2, { { 5 } }, 'index 5 is out of range for dim 2 of size 4 (expected 1..4)' },
      { 1, { { 4 } }, 'index 4 is out of range for dim 1 of size 3 (expected 1..3)' },
      { 1, { { -1 } }, 'index -1 is out of range for dim 1 of size 3 (expected 1..3)' },
      { 2, { { 2, 3 }, { 1, -7 } }, 'index -7 is out of range for dim 2 of size 4 (expected 1..4)' },
    }
    for _, c in ipairs(cases) do
      for _, idt in ipairs({ 'int64', 'int32' }) do
        local idx = dpl.tensor(c[2], { dtype = idt })
        local n = #c[2][1]
        raises(function() return x:clone():scatter_add_(c[1], idx, src:narrow(2, 1, n)) end, 'scatter_add_: ' .. c[3])
        raises(function() return x:gather(c[1], idx) end, 'gather: ' .. c[3])
      end
    end
    -- the 1000-wide unrolled loop: a bad index in the middle of a pair and at the row's end
    local m = dpl.zeros(2, 1000)
    for _, p in ipairs({ 1, 2, 501, 1000 }) do
      local idx = dpl.ones(2, 1000):long()
      idx[2][p] = 1001
      raises(function() return m:clone():scatter_add_(2, idx, dpl.ones(2, 1000)) end,
        'scatter_add_: index 1001 is out of range for dim 2 of size 1000 (expected 1..1000)')
    end
  end)

  it('keep the additions made before a bad index (as PyTorch does) and nothing after it', function()
    local x = dpl.zeros(2, 3)
    local idx = dpl.tensor({ { 1, 2, 3 }, { 3, 9, 1 } })
    local ok = pcall(function() return x:scatter_add_(2, idx, dpl.ones(2, 3)) end)
    assert.is_false(ok)
    assert.are.same({ { 1, 1, 1 }, { 0, 0, 1 } }, x:totable())
  end)

  it('refuse an expanded self (one memory location for several elements), as PyTorch', function()
    local e = dpl.zeros(1, 3):expand(4, 3)
    raises(function() return e:scatter_add_(1, dpl.tensor({ { 1, 2, 1 } }), dpl.ones(1, 3)) end,
      'scatter_add_: unsupported operation: more than one element of the written-to tensor refers to a single memory location')
  end)

  it('read an index sharing self\'s memory before writing self (the documented rule for sources)', function()
    -- {3, 1, 1} as the index of itself: 1 added at 3, 1 and 1 (read before the writes); read
    -- in place, the third entry would have become 2 after the first write
    for _, dt in ipairs({ 'int64', 'int32' }) do
      local a = dpl.tensor({ 3, 1, 1 }, { dtype = dt })
      a:scatter_add_(1, a, dpl.tensor({ 1, 1, 1 }, { dtype = dt }))
      assert.are.same({ 5, 1, 2 }, a:totable(), dt)
      local b = dpl.tensor({ 3, 1, 1, 7 }, { dtype = dt }) -- a view of self as the index
      b:scatter_add_(1, b:narrow(1, 1, 3), dpl.ones({ 3 }, { dtype = dt }))
      assert.are.same({ 5, 1, 2, 7 }, b:totable(), dt)
    end
  end)
  it('gather and scatter_add_ are each other\'s gradient through the 1-based index', function()
    local x = dpl.randn(3, 4):requires_grad_()
    local idx = dpl.tensor({ { 4, 4 }, { 1, 2 }, { 3, 3 } })
    x:gather(2, idx):sum():backward()
    assert.are.same({ { 0, 0, 0, 2 }, { 1, 1, 0, 0 }, { 0, 0, 2, 0 } }, x.grad:totable())
    local s = dpl.randn(3, 2):requires_grad_()
    local y = dpl.zeros(3, 4):scatter_add(2, idx, s) * dpl.arange(1, 13):view(3, 4)
    y:sum():backward()
    assert.are.same({ { 4, 4 }, { 5, 6 }, { 11, 11 } }, s.grad:totable())
    -- src larger than the index: the elements it does not read get a zero gradient
    local big = dpl.randn(4, 3):requires_grad_()
    local z = dpl.zeros(3, 4):scatter_add(2, idx, big) * dpl.arange(1, 13):view(3, 4)
    z:sum():backward()
    assert.are.same({ { 4, 4, 0 }, { 5, 6, 0 }, { 11, 11, 0 }, { 0, 0, 0 } }, big.grad:totable())
  end)
end)

describe('clone into fresh (cold) memory', function()
  it('copies big tensors exactly, whatever the alignment of the source and the tail length', function()
    -- (over 1 MB into a fresh block: the streaming copy of dpl_tensor_to)
    local n = 2 ^ 19 + 13
    local base = dpl.arange(0, n + 8):float()
    for _, off in ipairs({ 0, 1, 2, 3, 5 }) do
      local src = base:narrow(1, off + 1, n - off) -- a contiguous view at an offset of off floats
      local c = src:clone()
      assert.are.equal(n - off, c:numel())
      assert.is_true(c:eq(src):all():item(), 'offset ' .. off)
      assert.are.equal(src[n - off]:item(), c[n - off]:item())
      c[1] = -1 -- its own memory
      assert.are.equal(off, src[1]:item())
    end
    local d = dpl.randn(1000, 300):double()
    assert.is_true(d:clone():eq(d):all():item())
  end)

end)

describe('gather / scatter_add_ dtypes', function()
  it("convert a src of another dtype to self's (as index_add_; PyTorch refuses) and refuse an index that is not "
    .. 'int64/int32, as PyTorch', function()
    local t = dpl.zeros(3)
    t:scatter_add_(1, dpl.tensor({ 1, 2, 2 }), dpl.tensor({ 1.5, 2, 3 }, { dtype = 'float64' }))
    assert.are.same({ 1.5, 5, 0 }, t:totable())
    assert.are.equal('float32', t.dtype)
    local ok, e
    ok, e = pcall(function() return t:gather(1, dpl.tensor({ 1, 1 }, { dtype = 'uint8' })) end)
    assert.is_false(ok)
    assert.truthy(tostring(e):find('gather: expected an integer index tensor (int64 or int32), got uint8', 1, true),
      tostring(e))
    assert.is_false(pcall(function() return t:gather(1, dpl.tensor({ true, true })) end))
  end)

  it('index_select, index_add_ and embedding refuse a uint8 index too, as PyTorch (were read as indices)', function()
    local m = dpl.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } }, { dtype = 'float32' })
    local u = dpl.tensor({ 2 }, { dtype = 'uint8' })
    for name, f in pairs({
      index_select = function() return m:index_select(1, u) end,
      index_add_ = function() return m:clone():index_add_(1, u, dpl.ones(1, 2)) end,
      embedding = function() return dpl.embedding(m, u) end,
    }) do
      local ok, e = pcall(f)
      assert.is_false(ok, name)
      assert.truthy(tostring(e):find(name .. ': expected an integer index tensor (int64 or int32), got uint8', 1, true),
        tostring(e))
    end
  end)
end)

describe('row gathers into fresh memory', function()
  -- rows of 256 bytes or more go into a fresh (cold) result with streaming stores, 64 bytes at a
  -- time on AVX-512 CPUs: every row length and alignment (heads and tails that are not whole
  -- 64-byte pieces), float32 and float64, int32 and int64 ids, repeated ids, against the rows read
  -- one by one
  it('embedding and index_select copy every row exactly', function()
    for _, dt in ipairs({ 'float32', 'float64' }) do
      for _, D in ipairs({ 63, 64, 67, 100, 259 }) do
        local w = dpl.randn(700, D, { dtype = dt })
        for _, idt in ipairs({ 'int64', 'int32' }) do
          local ids = dpl.randint(1, 701, { 300 }, { dtype = idt })
          ids[1], ids[2] = 700, 700
          for _ = 1, 2 do
            local e = dpl.embedding(w, ids)
            local s = w:index_select(1, ids)
            assert.are.same({ 300, D }, e:size())
            local il = ids:totable()
            for i = 1, 300 do
              local want = w:select(1, il[i])
              assert.is_true(dpl.equal(e:select(1, i), want), ('embedding %s D=%d row %d'):format(dt, D, i))
              assert.is_true(dpl.equal(s:select(1, i), want), ('index_select %s D=%d row %d'):format(dt, D, i))
            end
          end
        end
      end
    end
  end)
end)
