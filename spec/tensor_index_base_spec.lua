-- tensor_index_base_spec.lua: the index ops whose 1-based indices C reads in place (the *_base
-- entries: no shifted copy made in Lua): index_select, index_add_, index_copy_, index_fill_,
-- scatter_, F.embedding (and its backward), put_ and take, against plain Lua loops over every
-- dim, int32 and int64 indices, negative ones (-n..-1 from the end) where the op takes them,
-- strided self, source and index; the range errors for 0, n + 1 and -n - 1 (the op, the value
-- as written and the size); the gradients through autograd (gradcheck). An index read off by
-- one fails every comparison here.
local dpl = require 'dpl'
local F = require('dpl.nn').functional
local A = require 'dpl.autograd'
local raises = require('spec.support.helpers').raises

local H = require 'spec.support.helpers'
local at, set, positions = H.at, H.set_at, H.positions
local function copy(p) return { unpack(p) } end
local function same_nested(a, b, label)
  if type(a) == 'table' then
    assert.are.equal(#b, #a, label)
    for i = 1, #a do same_nested(a[i], b[i], label) end
  else
    assert(a == b or math.abs(a - b) <= 1e-4 * math.max(1, math.abs(b)), ('%s: %s vs %s'):format(label, tostring(a), tostring(b)))
  end
end
local function size_of(t)
  local s = {}
  for i = 1, t:dim() do s[i] = t:size(i) end
  return s
end
-- a 1-based index as Lua reads it (negative: from the end of n)
local function norm(v, n) return v < 0 and v + n + 1 or v end

-- the references, on nested tables; idx a list of numbers
local function ref_index_select(self, dim, idx)
  local s, shape = self:totable(), size_of(self)
  shape[dim] = #idx
  local r = dpl.zeros(unpack(shape)):totable()
  local n = self:size(dim)
  for _, p in ipairs(positions(shape)) do
    local q = copy(p)
    q[dim] = norm(idx[p[dim]], n)
    set(r, p, at(s, q))
  end
  return r
end
local function ref_index_write(self, dim, idx, src, op) -- op 'add' | 'copy'
  local r, s, n = self:totable(), src:totable(), self:size(dim)
  for _, p in ipairs(positions(size_of(src))) do
    local q = copy(p)
    q[dim] = norm(idx[p[dim]], n)
    set(r, q, op == 'add' and at(r, q) + at(s, p) or at(s, p))
  end
  return r
end
local function ref_index_fill(self, dim, idx, v)
  local r, hit, n = self:totable(), {}, self:size(dim)
  for _, i in ipairs(idx) do hit[norm(i, n)] = true end
  for _, p in ipairs(positions(size_of(self))) do if hit[p[dim]] then set(r, p, v) end end
  return r
end
local function ref_scatter(self, dim, idx, src)
  local r, it, s = self:totable(), idx:totable(), src:totable()
  for _, p in ipairs(positions(size_of(idx))) do
    local q = copy(p)
    q[dim] = at(it, p)
    set(r, q, at(s, p))
  end
  return r
end

-- a 1-d index tensor of dtype idt holding list, contiguous or (strided) every other element of a buffer
local function index_of(list, idt, strided)
  if not strided then return dpl.tensor(list, { dtype = idt }) end
  local buf = {}
  for i, v in ipairs(list) do buf[2 * i - 1], buf[2 * i] = v, 999 end
  local t = dpl.tensor(buf, { dtype = idt }):view(#list, 2):select(2, 1)
  assert.is_false(t:is_contiguous())
  return t
end

describe('index ops reading 1-based indices in place', function()
  it('index_select / index_add_ / index_copy_ / index_fill_ match the definition (every dim, int32/int64, negatives, strides)', function()
    dpl.manual_seed(3)
    for _, shape in ipairs({ { 5 }, { 4, 6 }, { 3, 4, 5 } }) do
      for dim = 1, #shape do
        local n = shape[dim]
        -- duplicates for select/add, distinct for copy (the last write would be ambiguous), negatives both
        local dup = { n, 1, -1, 2, -n, n }
        local uniq = { -1, 1 }
        for i = 2, n - 1 do uniq[#uniq + 1] = i end
        for _, idt in ipairs({ 'int64', 'int32' }) do
          for _, strided in ipairs({ false, true }) do
            local label = ('%s dim %d %s%s'):format(table.concat(shape, 'x'), dim, idt, strided and ' strided index' or '')
            local self = dpl.randn(unpack(shape))
            local ix = index_of(dup, idt, strided)
            same_nested(self:index_select(dim, ix):totable(), ref_index_select(self, dim, dup), 'index_select ' .. label)
            local sshape = copy(shape)
            sshape[dim] = #dup
            local src = dpl.randn(unpack(sshape))
            same_nested(self:clone():index_add_(dim, ix, src):totable(), ref_index_write(self, dim, dup, src, 'add'),
              'index_add_ ' .. label)
            local ux = index_of(uniq, idt, strided)
            sshape[dim] = #uniq
            local usrc = dpl.randn(unpack(sshape))
            same_nested(self:clone():index_copy_(dim, ux, usrc):totable(), ref_index_write(self, dim, uniq, usrc, 'copy'),
              'index_copy_ ' .. label)
            same_nested(self:clone():index_fill_(dim, ix, 7.5):totable(), ref_index_fill(self, dim, dup, 7.5),
              'index_fill_ ' .. label)
          end
        end
      end
    end
  end)

  it('read and write strided self and source, and take int32 / int64 dtypes of self', function()
    dpl.manual_seed(5)
    local base = dpl.randn(6, 5)
    local self = base:t() -- [5, 6], not contiguous
    assert.is_false(self:is_contiguous())
    for dim = 1, 2 do
      local n = self:size(dim)
      local idx = { 2, n, -1, 1 }
      local ix = dpl.tensor(idx, { dtype = 'int32' })
      same_nested(self:index_select(dim, ix):totable(), ref_index_select(self, dim, idx), 'strided select ' .. dim)
      local sshape = size_of(self)
      sshape[dim] = #idx
      local src = dpl.randn(sshape[2], sshape[1]):t() -- a strided source
      same_nested(base:clone():t():index_add_(dim, ix, src):totable(), ref_index_write(self, dim, idx, src, 'add'),
        'strided index_add_ ' .. dim)
      local w = base:clone():t()
      w:index_fill_(dim, ix, -3)
      same_nested(w:totable(), ref_index_fill(self, dim, idx, -3), 'strided index_fill_ ' .. dim)
    end
    for _, dt in ipairs({ 'int64', 'int32', 'float64' }) do
      local x = dpl.arange(1, 13):view(3, 4):to(dt)
      assert.are.same({ { 4, 1 }, { 8, 5 }, { 12, 9 } }, x:index_select(2, { -1, 1 }):totable())
      assert.are.same({ { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 10, 10, 11, 13 } },
        x:clone():index_add_(1, dpl.tensor({ -1 }, { dtype = 'int32' }), dpl.tensor({ { 1, 0, 0, 1 } }):to(dt)):totable())
    end
  end)

  it('scatter_ matches the definition for every dim, int32/int64 and strided index, self and src', function()
    dpl.manual_seed(9)
    for _, dtype in ipairs({ 'float32', 'float64', 'int64', 'int32', 'float16', 'uint8' }) do
      for _, shape in ipairs({ { 5 }, { 4, 6 }, { 3, 4, 5 } }) do
        for dim = 1, #shape do
          for _, idt in ipairs({ 'int64', 'int32' }) do
            local ishape = {}
            for d = 1, #shape do ishape[d] = d == dim and shape[d] + 1 or math.max(1, shape[d] - (d % 2)) end
            local self = (dpl.rand(unpack(shape)) * 10):to(dtype)
            local src = (dpl.rand(unpack(ishape)) * 10):to(dtype)
            local idx = dpl.randint(1, shape[dim] + 1, ishape):to(idt)
            local label = ('%s %s dim %d idx %s'):format(dtype, table.concat(shape, 'x'), dim, idt)
            same_nested(self:clone():scatter_(dim, idx, src):totable(), ref_scatter(self, dim, idx, src), 'scatter_ ' .. label)
          end
        end
      end
    end
    local base = dpl.randn(6, 5)
    local self = base:t()
    local src = dpl.randn(6, 5):t()
    local idx = dpl.randint(1, 100, { 6, 5 })
    for dim = 1, 2 do
      local ix = idx:remainder(self:size(dim)):add(1):t()
      assert.is_false(ix:is_contiguous())
      same_nested(base:clone():t():scatter_(dim, ix, src):totable(), ref_scatter(self, dim, ix, src), 'strided scatter_ ' .. dim)
      local want = self:totable()
      for _, p in ipairs(positions({ 5, 6 })) do
        local q = copy(p)
        q[dim] = at(ix:totable(), p)
        set(want, q, 2.5)
      end
      same_nested(self:clone():scatter_(dim, ix, 2.5):totable(), want, 'scatter_ of a value ' .. dim)
    end
  end)

  it('F.embedding and its gradient read int32 / int64 ids of any shape, strided too', function()
    dpl.manual_seed(13)
    local w = dpl.randn(7, 3)
    local wt = w:totable()
    for _, idt in ipairs({ 'int64', 'int32' }) do
      local ids = dpl.tensor({ { 1, 7, 3 }, { 7, 7, 2 } }, { dtype = idt })
      for _, x in ipairs({ ids, ids:t() }) do
        local want = {}
        for i, row in ipairs(x:totable()) do
          want[i] = {}
          for j, v in ipairs(row) do want[i][j] = wt[v] end
        end
        same_nested(F.embedding(x, w):totable(), want, 'embedding ' .. idt)
        local g = dpl.randn(x:size(1), x:size(2), 3)
        local gw = dpl.zeros(7, 3):totable()
        local gt = g:totable()
        for i, row in ipairs(x:totable()) do
          for j, v in ipairs(row) do
            for k = 1, 3 do gw[v][k] = gw[v][k] + gt[i][j][k] end
          end
        end
        same_nested(dpl.embedding_backward(g, x, 7):totable(), gw, 'embedding_backward ' .. idt)
      end
    end
    local emb = require('dpl.nn').Embedding(5, 2)
    assert.are.same({ 2, 3, 2 }, size_of(emb(dpl.tensor({ { 1, 5, 2 }, { 5, 4, 3 } }, { dtype = 'int32' }))))
  end)

  it('put_ and take read flat 1-based indices (negative from the end)', function()
    local x = dpl.arange(1, 13):view(3, 4):float()
    for _, idt in ipairs({ 'int64', 'int32' }) do
      local ix = dpl.tensor({ 1, -1, 6, 12 }, { dtype = idt })
      assert.are.same({ 1, 12, 6, 12 }, x:take(ix):totable())
      assert.are.same({ { 10, 2, 3, 4 }, { 5, 30, 7, 8 }, { 9, 10, 11, 40 } },
        x:clone():put_(dpl.tensor({ 1, 6, -1 }, { dtype = idt }), dpl.tensor({ 10, 30, 40 }):float()):totable())
      assert.are.same({ { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10, 11, 14 } },
        x:clone():put_(dpl.tensor({ -1, 12 }, { dtype = idt }), dpl.tensor({ 1, 1 }):float(), true):totable())
    end
  end)

  it('name the op, the bad index as written and the size, for 0, n + 1 and -n - 1', function()
    local x = dpl.zeros(3, 4)
    for _, idt in ipairs({ 'int64', 'int32' }) do
      local function I(t) return dpl.tensor(t, { dtype = idt }) end
      for _, c in ipairs({ { 1, 3 }, { 2, 4 } }) do
        local d, n = c[1], c[2]
        local sshape = { 3, 4 }
        sshape[d] = 1
        local src = dpl.ones(unpack(sshape))
        local range = ('is out of range for dim %d of size %d (expected 1..%d)'):format(d, n, n)
        local from_end = ('index %d is out of range for a dim of size %d (expected 1..%d, or -%d..-1 from the end)'):format(
          -n - 1, n, n, n)
        for _, op in ipairs({
          { 'index_select', function(ix) return x:index_select(d, ix) end },
          { 'index_add_', function(ix) return x:clone():index_add_(d, ix, src) end },
          { 'index_copy_', function(ix) return x:clone():index_copy_(d, ix, src) end },
          { 'index_fill_', function(ix) return x:clone():index_fill_(d, ix, 1) end },
        }) do
          raises(function() return op[2](I({ 0 })) end, ('%s: index 0 %s'):format(op[1], range))
          raises(function() return op[2](I({ n + 1 })) end, ('%s: index %d %s'):format(op[1], n + 1, range))
          raises(function() return op[2](I({ -n - 1 })) end, ('ValueError: %s: %s'):format(op[1], from_end))
          raises(function() return op[2](I({ -n - 1 })) end, ('ValueError: %s: %s'):format(op[1], from_end))
        end
        -- scatter_ takes no negative index (as PyTorch)
        local sidx = sshape[1] == 1 and { { 0, 1, 1, 1 } } or { { 0 }, { 1 }, { 1 } }
        local function S(v)
          local t = I(sidx)
          t:view(-1)[1] = v
          return t
        end
        for _, v in ipairs({ 0, n + 1, -1, -n - 1 }) do
          raises(function() return x:clone():scatter_(d, S(v), x) end, ('scatter_: index %d %s'):format(v, range))
        end
      end
      -- nothing is written when one index is bad (all are checked first)
      local y = dpl.zeros(2, 3)
      pcall(function() return y:index_copy_(2, I({ 1, 4 }), dpl.ones(2, 2)) end)
      pcall(function() return y:index_fill_(2, I({ 1, -4 }), 1) end)
      pcall(function() return y:index_add_(1, I({ 1, 3 }), dpl.ones(2, 3)) end)
      assert.are.same({ { 0, 0, 0 }, { 0, 0, 0 } }, y:totable())
      -- embedding: no negatives
      local w = dpl.randn(5, 2)
      for _, v in ipairs({ 0, 6, -1 }) do
        raises(function() return F.embedding(I({ 1, v }), w) end,
          ('embedding: index %d is out of range for dim 1 of size 5 (expected 1..5)'):format(v))
      end
      raises(function() return x:clone():put_(I({ 13 }), dpl.ones(1)) end,
        'put_: index 13 is out of range for self with 12 elements (expected 1..12)')
      raises(function() return x:clone():put_(I({ 0 }), dpl.ones(1)) end,
        'put_: index 0 is out of range for self with 12 elements (expected 1..12)')
      raises(function() return x:clone():put_(I({ -13 }), dpl.ones(1)) end,
        'ValueError: put_: index -13 is out of range for self with 12 elements (expected 1..12, or -12..-1 from the end)')
    end
  end)

  it('gradients through the 1-based indices (gradcheck)', function()
    dpl.manual_seed(17)
    local function leaf(...) return dpl.randn(...):double():requires_grad_() end
    local ix = dpl.tensor({ 3, -1, 1, 3 })
    local ix32 = dpl.tensor({ 2, -4, 1 }, { dtype = 'int32' })
    assert.is_true(A.gradcheck(function(a) return a:index_select(1, ix) end, { leaf(4, 3) }))
    assert.is_true(A.gradcheck(function(a) return a:index_select(2, ix32) end, { leaf(3, 4) }))
    assert.is_true(A.gradcheck(function(a, s) return (a * 1):index_add_(2, ix32, s) end, { leaf(2, 4), leaf(2, 3) }))
    assert.is_true(A.gradcheck(function(a, s) return (a * 1):index_copy_(1, dpl.tensor({ -1, 2 }), s) end,
      { leaf(4, 3), leaf(2, 3) }))
    assert.is_true(A.gradcheck(function(a) return (a * 1):index_fill_(2, ix32, 0.5) end, { leaf(3, 4) }))
    local sidx = dpl.tensor({ { 2, 1 }, { 3, 1 } }, { dtype = 'int32' })
    assert.is_true(A.gradcheck(function(a, s) return a:scatter(2, sidx, s) end, { leaf(2, 3), leaf(2, 2) }))
    local ids = dpl.tensor({ { 1, 5 }, { 5, 2 } }, { dtype = 'int32' })
    assert.is_true(A.gradcheck(function(w) return F.embedding(ids, w) end, { leaf(5, 3) }))
    assert.is_true(A.gradcheck(function(a) return a:take(dpl.tensor({ -1, 2, 2 })) end, { leaf(2, 3) }))
    assert.is_true(A.gradcheck(function(a, s) return (a * 1):put_(dpl.tensor({ 6, -6 }), s) end, { leaf(2, 3), leaf(2) }))
    -- a hand-computed one: rows 3 and 1 picked twice and once
    local a = dpl.ones(3, 2):requires_grad_()
    a:index_select(1, { 3, -1, 1 }):sum():backward()
    assert.are.same({ { 1, 1 }, { 0, 0 }, { 2, 2 } }, a.grad:totable())
  end)

  it('index_select rows streamed into a big fresh result (rows of 260 and 4000 bytes, unaligned)', function()
    dpl.manual_seed(5)
    for _, w in ipairs({ 65, 1000 }) do
      local a = dpl.randn(700, w)
      local idx = dpl.randint(-700, 701, { 1200 })
      idx:masked_fill_(idx:eq(0), 5)
      local r = a:index_select(1, idx)
      local at, ia = r:totable(), idx:totable()
      for i = 1, 1200, 37 do
        local src = ia[i] < 0 and 701 + ia[i] or ia[i]
        assert.are.same(a[src]:totable(), at[i], ('row %d (index %d), width %d'):format(i, ia[i], w))
      end
      assert.are.same(a[ia[1200] < 0 and 701 + ia[1200] or ia[1200]]:totable(), at[1200])
      -- a column slice: rows of another stride
      local c = a:narrow(2, 2, w - 1):contiguous():index_select(1, idx)
      assert.are.same(r:narrow(2, 2, w - 1):totable(), c:totable())
    end
  end)
end)
