-- data_loader_spec.lua: samplers (sequential, random, distributed with PyTorch's
-- padding/drop_last rules), the DataLoader's batching, #loader, epochs, custom
-- collation, and bad options. Tensor batches are covered with the tensor specs.
local data = require 'dpl.data'
local class = require 'dpl.class'
local errors = require 'dpl.errors'

local Squares = data.Dataset:extend('Squares')
function Squares:__init(n) self.n = n end
function Squares:__len() return self.n end
function Squares:get(i) return { i, i * i } end

local function collect(loader)
  local out = {}
  for b in loader:iter() do out[#out + 1] = b end
  return out
end

local function list_collate(items) return items end

describe('dpl.class', function()
  it('builds classes with __init, super, inheritance and instance checks', function()
    local A = class.Object:extend('A')
    function A:__init(x) self.x = x end
    function A:twice() return 2 * self.x end
    A.__tostring = function(a) return 'A(' .. a.x .. ')' end
    local B = A:extend('B')
    function B:__init(x, y) B.super.__init(self, x) self.y = y end
    local b = B(3, 4)
    assert.are.equal(6, b:twice())
    assert.are.equal(4, b.y)
    assert.are.equal('A(3)', tostring(b))
    assert.is_true(class.is_instance(b, A))
    assert.is_false(class.is_instance(A(1), B))
    assert.are.equal(A, B.super)
  end)
end)

describe('samplers', function()
  it('SequentialSampler yields 1..n', function()
    assert.are.same({ 1, 2, 3 }, data.SequentialSampler(3):indices())
    assert.are.same({}, data.SequentialSampler(0):indices())
  end)

  it('randperm is a reproducible permutation', function()
    local p = data.randperm(100, 7)
    local seen = {}
    for _, v in ipairs(p) do seen[v] = true end
    for i = 1, 100 do assert.is_true(seen[i]) end
    assert.are.same(p, data.randperm(100, 7))
    assert.are_not.same(p, data.randperm(100, 8))
  end)

  it('RandomSampler gives a new order per epoch, the same for the same epoch', function()
    local s = data.RandomSampler(50, { seed = 3 })
    s:set_epoch(0)
    local e0 = s:indices()
    assert.are.same(e0, s:indices())
    s:set_epoch(1)
    assert.are_not.same(e0, s:indices())
  end)

  it('DistributedSampler: each sample once per epoch across ranks when n divides', function()
    for _, shuffle in ipairs({ true, false }) do
      local seen = {}
      for rank = 0, 3 do
        local s = data.DistributedSampler{ size = 20, num_replicas = 4, rank = rank, shuffle = shuffle, seed = 5 }
        assert.are.equal(5, #s:indices())
        for _, i in ipairs(s:indices()) do
          assert.is_nil(seen[i])
          seen[i] = true
        end
      end
      for i = 1, 20 do assert.is_true(seen[i]) end
    end
  end)

  it('DistributedSampler pads by repeating the first positions, or drops with drop_last', function()
    local r = {}
    for rank = 0, 2 do
      r[rank] = data.DistributedSampler{ size = 7, num_replicas = 3, rank = rank, shuffle = false }:indices()
    end
    -- PyTorch: indices 0..6 + padding [0, 1] -> rank k takes k::3 (here 1-based)
    assert.are.same({ 1, 4, 7 }, r[0])
    assert.are.same({ 2, 5, 1 }, r[1])
    assert.are.same({ 3, 6, 2 }, r[2])
    local d = data.DistributedSampler{ size = 7, num_replicas = 3, rank = 1, shuffle = false, drop_last = true }
    assert.are.same({ 2, 5 }, d:indices())
    assert.are.equal(2, data.len(d))
  end)

  it('DistributedSampler reshuffles with set_epoch and agrees across ranks', function()
    local a0 = data.DistributedSampler{ size = 10, num_replicas = 2, rank = 0, seed = 1 }
    local a1 = data.DistributedSampler{ size = 10, num_replicas = 2, rank = 1, seed = 1 }
    local first = a0:indices()
    a0:set_epoch(1)
    a1:set_epoch(1)
    assert.are_not.same(first, a0:indices())
    local all = {}
    for _, i in ipairs(a0:indices()) do all[i] = true end
    for _, i in ipairs(a1:indices()) do
      assert.is_nil(all[i])
      all[i] = true
    end
  end)

  -- a custom sampler: the even positions 2..14 (7 of them), with set_epoch recorded
  local Even = data.Sampler:extend('Even')
  function Even:__init() self.epochs = {} end
  function Even:indices() local t = {}; for i = 2, 14, 2 do t[#t + 1] = i end; return t end
  function Even:__len() return 7 end
  function Even:set_epoch(e) self.epochs[#self.epochs + 1] = e end

  it('DistributedSamplerWrapper gives each rank its share of the positions the wrapped sampler yields', function()
    local r = {}
    for rank = 0, 2 do
      local w = data.DistributedSamplerWrapper{ sampler = Even(), num_replicas = 3, rank = rank }
      assert.are.equal(3, data.len(w))
      r[rank] = w:indices()
    end
    -- the list 2, 4, ..., 14 padded by its first entries, every third entry from the rank
    assert.are.same({ 2, 8, 14 }, r[0])
    assert.are.same({ 4, 10, 2 }, r[1])
    assert.are.same({ 6, 12, 4 }, r[2])
    -- the built-in samplers' arrays work as well; drop_last; shuffle covers the list once
    local seq = data.DistributedSamplerWrapper{ sampler = data.SequentialSampler(5), num_replicas = 2, rank = 1,
      drop_last = true }
    assert.are.same({ 2, 4 }, seq:indices())
    local seen = {}
    for rank = 0, 1 do
      local w = data.DistributedSamplerWrapper{ sampler = data.SequentialSampler(8), num_replicas = 2, rank = rank,
        shuffle = true, seed = 3 }
      for _, i in ipairs(w:indices()) do assert.is_nil(seen[i]); seen[i] = true end
    end
    for i = 1, 8 do assert.is_true(seen[i]) end
  end)

  it('DistributedSamplerWrapper passes set_epoch on and checks the wrapped sampler\'s length', function()
    local e = Even()
    local w = data.DistributedSamplerWrapper{ sampler = e, num_replicas = 2, rank = 0 }
    w:set_epoch(3)
    assert.are.same({ 3 }, e.epochs)
    assert.are.equal(3, w.epoch)
    e.__len = function() return 8 end
    local bad = data.DistributedSamplerWrapper{ sampler = e, num_replicas = 2, rank = 0 }
    assert.has_error(function() bad:indices() end, errors.MisconfigurationException(
      'DistributedSamplerWrapper: the wrapped Even yielded 7 positions in this pass, its length is 8'))
    assert.has_error(function() data.DistributedSamplerWrapper{ num_replicas = 2, rank = 0 } end)
  end)

  it('DataLoader:with_sampler makes a new loader and leaves the original as it was', function()
    local l = data.DataLoader(Squares(10), { batch_size = 3, collate_fn = list_collate })
    l.extra = 'kept'
    local s0 = l.sampler
    local n = l:with_sampler(Even())
    assert.are.equal(3, #n)
    assert.are.equal('kept', n.extra)
    assert.are.same({ { 2, 4 }, { 4, 16 }, { 6, 36 } }, collect(n)[1])
    assert.are.equal(4, #l)
    assert.are.equal(s0, l.sampler)
  end)

  it('DistributedSampler checks size= (2.5 gave positions read from uninitialised memory)', function()
    for _, n in ipairs({ -1, 2.5, 0 / 0, math.huge, 'x' }) do
      local ok, e = pcall(data.DistributedSampler, { size = n, num_replicas = 2, rank = 0 })
      assert.is_false(ok, tostring(n))
      assert.matches('DistributedSampler size must be an integer >= 0', tostring(e))
      assert.is_true(class.is_instance(e, errors.MisconfigurationException))
    end
    assert.are.same({}, data.DistributedSampler({ size = 0, num_replicas = 2, rank = 1 }):indices())
  end)

  it('DistributedSampler rejects a bad rank', function()
    assert.has_error(function() data.DistributedSampler{ size = 4, num_replicas = 2, rank = 2 } end,
      errors.MisconfigurationException('Invalid rank 2, rank should be in the interval [0, 1]'))
  end)
end)

describe('DataLoader', function()
  it("takes torch's batch_sampler (BatchSampler or any object with batches() and __len()); the Trainer's "
    .. 'DistributedSampler reaches a BatchSampler through with_sampler', function()
    local dpl = require 'dpl'
    local ds = data.TensorDataset(dpl.arange(1, 11))
    local bs = data.BatchSampler(data.SequentialSampler(10), 4)
    assert.are.same({ { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10 } }, bs:batches())
    assert.are.equal(2, data.len(data.BatchSampler(data.SequentialSampler(10), { batch_size = 4, drop_last = true })))
    local l = data.DataLoader(ds, { batch_sampler = bs })
    assert.are.equal(3, #l)
    assert.is_nil(l.batch_size)
    local got = {}
    for b in l do got[#got + 1] = b[1]:totable() end
    assert.are.same({ { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10 } }, got)
    local l2 = l:with_sampler(data.DistributedSampler { dataset = ds, num_replicas = 2, rank = 1, shuffle = false })
    got = {}
    for b in l2:iter() do got[#got + 1] = b[1]:totable() end
    assert.are.same({ { 2, 4, 6, 8 }, { 10 } }, got)
    -- a batch sampler of one's own: any batches() / __len()
    local Pairs = data.Sampler:extend('Pairs')
    function Pairs:batches() return { { 10, 1 }, { 2, 9 } } end
    function Pairs:__len() return 2 end
    local lp = data.DataLoader(ds, { batch_sampler = Pairs() })
    got = {}
    for b in lp do got[#got + 1] = b[1]:totable() end
    assert.are.same({ { 10, 1 }, { 2, 9 } }, got)
    assert.has_error(function() lp:with_sampler(data.SequentialSampler(10)) end)
    for _, o in ipairs({ { batch_size = 2 }, { shuffle = true }, { drop_last = true }, { sampler = data.SequentialSampler(10) } }) do
      o.batch_sampler = bs
      assert.has_error(function() data.DataLoader(ds, o) end, errors.MisconfigurationException(
        'batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last'))
    end
    assert.has_error(function() data.DataLoader(ds, { batch_sampler = {} }) end)
    assert.has_error(function() data.BatchSampler(data.SequentialSampler(3), 0) end)
  end)

  it('iterates with `for batch in loader do` too: each loop a new pass, a loop left early ends its pass', function()
    local loader = data.DataLoader(Squares(7), { batch_size = 3, collate_fn = list_collate })
    local firsts = {}
    for b in loader do firsts[#firsts + 1] = b[1][1] end
    assert.are.same({ 1, 4, 7 }, firsts)
    for b in loader do assert.are.same({ 1, 1 }, b[1]) break end
    local again = {}
    for b in loader do again[#again + 1] = b[1][1] end
    assert.are.same({ 1, 4, 7 }, again)
  end)

  it('batches in order, #loader counts batches, last batch partial', function()
    local loader = data.DataLoader(Squares(7), { batch_size = 3, collate_fn = list_collate })
    assert.are.equal(3, #loader)
    local bs = collect(loader)
    assert.are.equal(3, #bs)
    assert.are.same({ { 1, 1 }, { 2, 4 }, { 3, 9 } }, bs[1])
    assert.are.same({ { 7, 49 } }, bs[3])
  end)

  it('drops the last partial batch with drop_last', function()
    local loader = data.DataLoader(Squares(7), { batch_size = 3, drop_last = true, collate_fn = list_collate })
    assert.are.equal(2, #loader)
    assert.are.equal(2, #collect(loader))
  end)

  it('shuffles reproducibly with a seed and covers every item', function()
    local function order(seed)
      local l = data.DataLoader(Squares(10), { batch_size = 4, shuffle = true, seed = seed, collate_fn = list_collate })
      l:set_epoch(0)
      local o = {}
      for b in l:iter() do for _, it in ipairs(b) do o[#o + 1] = it[1] end end
      return o
    end
    local a = order(11)
    assert.are.same(a, order(11))
    table.sort(a)
    assert.are.same({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }, a)
  end)

  it('uses a given sampler', function()
    local s = data.DistributedSampler{ size = 6, num_replicas = 2, rank = 1, shuffle = false }
    local l = data.DataLoader(Squares(6), { batch_size = 2, sampler = s, collate_fn = list_collate })
    assert.are.equal(2, #l)
    local got = {}
    for b in l:iter() do for _, it in ipairs(b) do got[#got + 1] = it[1] end end
    assert.are.same({ 2, 4, 6 }, got)
  end)

  it('rejects bad options with MisconfigurationException', function()
    assert.has_error(function() data.DataLoader(Squares(3), { batch_size = 0 }) end,
      errors.MisconfigurationException('batch_size must be an integer >= 1, got 0'))
    assert.has_error(function()
      data.DataLoader(Squares(3), { sampler = data.SequentialSampler(3), shuffle = true })
    end, errors.MisconfigurationException('sampler option is mutually exclusive with shuffle'))
    assert.has_error(function() data.DataLoader({}, {}) end)
    assert.has_error(function() data.DataLoader(Squares(3), { collate_fn = 5 }) end)
  end)

  it('batch_size must be a positive integer: math.huge, NaN and strings are errors', function()
    for _, bs in ipairs({ math.huge, 0 / 0, 2 ^ 60, 1.5, -1 }) do
      local ok, e = pcall(data.DataLoader, Squares(3), { batch_size = bs })
      assert.is_false(ok, tostring(bs))
      assert.is_true(errors.is(e, errors.MisconfigurationException))
      assert.truthy(tostring(e):find('batch_size must be an integer >= 1, got'), tostring(e))
    end
    assert.has_error(function() data.DataLoader(Squares(3), { batch_size = '4' }) end,
      errors.MisconfigurationException("batch_size must be an integer >= 1, got string '4'"))
    -- a batch larger than the dataset is one batch, and #loader says so
    local l = data.DataLoader(Squares(3), { batch_size = 2 ^ 40, collate_fn = list_collate })
    assert.are.equal(1, #l)
    assert.are.equal(1, #collect(l))
    assert.are.equal('DataLoader(1 batches of 1099511627776)', tostring(l))
  end)

  it('num_workers = 0 loads in this process; > 0 in worker processes (spec/data_workers_spec.lua)', function()
    local ds = Squares(5)
    assert.are.equal(3, #data.DataLoader(ds, { batch_size = 2, num_workers = 0 }))
    local l = data.DataLoader(ds, { batch_size = 2, num_workers = 4 })
    assert.are.equal(3, #l)
    assert.are.equal(4, l.num_workers)
    assert.has_error(function() data.DataLoader(ds, { num_workers = -1 }) end,
      errors.MisconfigurationException('num_workers must be an integer >= 0, got -1'))
  end)

  it('shuffle and drop_last must be booleans', function()
    assert.has_error(function() data.DataLoader(Squares(3), { shuffle = 'yes' }) end,
      errors.MisconfigurationException("shuffle must be a boolean, got string 'yes'"))
    assert.has_error(function() data.DataLoader(Squares(3), { drop_last = 1 }) end,
      errors.MisconfigurationException('drop_last must be a boolean, got 1'))
  end)

  it('checks sampler= when the loader is made, and names the sampler when it has no __len', function()
    assert.has_error(function() data.DataLoader(Squares(3), { sampler = 5 }) end,
      errors.MisconfigurationException('DataLoader: sampler must be a sampler (an object with indices() and '
        .. '__len(), e.g. a data.Sampler:extend(...) subclass), got 5'))
    assert.has_error(function() data.DataLoader(Squares(3), { sampler = {} }) end)
    -- a sampler with indices() but no __len: iterating works, #loader says what is missing
    local l = data.DataLoader(Squares(3), { sampler = { indices = function() return { 3, 2, 1 } end },
      collate_fn = list_collate })
    assert.are.same({ { { 3, 9 } }, { { 2, 4 } }, { { 1, 1 } } }, collect(l))
    assert.has_error(function() return #l end,
      errors.MisconfigurationException('the sampler must have a __len method, got a table without one'))
    assert.are.equal('DataLoader(? batches of 1)', tostring(l))
  end)

  it('a collate_fn (or get_batch) returning nil is an error, not the end of the epoch', function()
    local l = data.DataLoader(Squares(10), { batch_size = 4, collate_fn = function() return nil end })
    assert.are.equal(3, #l)
    local ok, e = pcall(function() for _ in l:iter() do end end)
    assert.is_false(ok)
    assert.is_true(errors.is(e, errors.TypeError))
    assert.are.equal('TypeError: DataLoader: collate_fn returned nil for batch 1 (a batch cannot be nil)', tostring(e))
    local Nil = data.Dataset:extend('NilBatches')
    function Nil:__len() return 4 end
    function Nil:get(i) return i end
    function Nil:get_batch(idx) if idx[1] > 2 then return nil end return idx end
    local ok2, e2 = pcall(function() for _ in data.DataLoader(Nil(), { batch_size = 2 }):iter() do end end)
    assert.is_false(ok2)
    assert.are.equal('TypeError: DataLoader: NilBatches:get_batch returned nil for batch 2 (a batch cannot be nil)',
      tostring(e2))
  end)
end)

describe('TensorDataset:get_batch', function()
  it('a non-integer position from a sampler is a TypeError (2.5 fetched item 2)', function()
    local dpl = require 'dpl'
    local ds = data.TensorDataset(dpl.arange(0, 5))
    local Half = data.Sampler:extend('Half')
    function Half:__init() end
    function Half:indices() return { 1, 2.5 } end
    local loader = data.DataLoader(ds, { batch_size = 2, sampler = Half() })
    assert.has_error(function() for _ in loader:iter() do end end,
      errors.TypeError('TensorDataset:get_batch: position 2 of the batch is 2.5, not an integer index'
        .. ' (a sampler yields integers 1..len(dataset))'))
    assert.are.same({ 4, 0 }, ds:get_batch({ 5, 1 })[1]:tolist())
  end)
end)

describe('default_collate', function()
  it('a number item among tensors (or the reverse) is a TypeError naming it, not a Lua error from math.floor', function()
    local dpl = require 'dpl'
    assert.has_error(function() data.default_collate({ 1, dpl.ones({ 3 }) }) end,
      errors.TypeError('default_collate: item 2 is a tensor where item 1 is a number'))
    assert.has_error(function() data.default_collate({ 1, 2, 'x' }) end,
      errors.TypeError("default_collate: item 3 is string 'x' where item 1 is a number"))
    -- a number among tensors (docs/nn.md's example): the TypeError, not stack's ValueError
    assert.has_error(function() data.default_collate({ dpl.ones({ 3 }), 2 }) end,
      errors.TypeError('default_collate: item 2 is 2 where item 1 is a tensor'))
    assert.has_error(function() data.default_collate({ dpl.ones({ 3 }), { 1 } }) end,
      errors.TypeError('default_collate: item 2 is a table where item 1 is a tensor'))
    -- and anything but a table among tables
    assert.has_error(function() data.default_collate({ { a = 1 }, 3 }) end,
      errors.TypeError('default_collate: item 2 is 3 where item 1 is a table'))
    assert.has_error(function() data.default_collate({ { a = 1 }, dpl.ones({ 3 }) }) end,
      errors.TypeError('default_collate: item 2 is a tensor where item 1 is a table'))
  end)

  it('booleans become a bool tensor, as torch\'s default_collate', function()
    local b = data.default_collate({ { ok = true }, { ok = false } }).ok
    assert.is_true(require('dpl').is_tensor(b))
    assert.are.equal('bool', b.dtype)
    assert.are.same({ true, false }, b:tolist())
    assert.has_error(function() data.default_collate({ true, 1 }) end,
      errors.TypeError('default_collate: item 2 is 1 where item 1 is a boolean'))
  end)

  it('an item with more entries than the first is an error (torch: lists of unequal sizes), not silently cut', function()
    -- torch 1.13: RuntimeError: each element in list of batch should be of equal size
    assert.has_error(function() data.default_collate({ { 1, 2 }, { 3, 4, 5 } }) end,
      errors.RuntimeError('default_collate: each element in list of batch should be of equal size (item 1 has 2 elements,'
        .. ' item 2 has 3)'))
    -- (torch drops a key the first dict lacks; dplhost refuses it)
    assert.has_error(function() data.default_collate({ { x = 1 }, { x = 2, y = 3 } }) end,
      errors.KeyError("default_collate: item 2 has the key 'y', item 1 has not"))
    assert.are.same({ 1, 3 }, data.default_collate({ { 1, 2 }, { 3, 4 } })[1]:totable())
  end)
end)

describe('Subset', function()
  it('a non-number index is a TypeError; out of range is a MisconfigurationException', function()
    local ok, e = pcall(data.Subset, Squares(10), { 1, '2' })
    assert.is_false(ok)
    assert.is_true(errors.is(e, errors.TypeError))
    assert.are.equal("TypeError: Subset: indices must be integers (positions 1..10), got string '2' at position 2",
      tostring(e))
    assert.has_error(function() data.Subset(Squares(10), { 11 }) end,
      errors.MisconfigurationException('Subset: index 11 (at position 1) is out of range 1..10'))
  end)
end)

describe('ds[i]', function()
  it('is ds:get(i) for every dataset class and subclass (PyTorch\'s dataset[i], 1-based)', function()
    local dpl = require 'dpl'
    local data = dpl.data
    local ds = data.TensorDataset(dpl.arange(5):float(), dpl.arange(5) * 2)
    assert.are.equal(1, ds[2][1]:item())
    assert.are.equal(2, ds[2][2]:item())
    local sub = data.Subset(ds, { 4, 5 })
    assert.are.equal(3, sub[1][1]:item())
    local My = data.Dataset:extend('IdxDs')
    function My:__init() self.n = 3 end
    function My:__len() return self.n end
    function My:get(i) return i * 10 end
    local Sub = My:extend('IdxSub')
    assert.are.equal(30, My()[3])
    assert.are.equal(20, Sub()[2])
    -- fields and methods are found as before; a missing string key is still nil
    assert.are.equal(3, Sub().n)
    assert.is_nil(Sub().nothing)
    local fm = dpl.datasets.FashionMNIST { train = false }
    assert.are.same({ 1, 28, 28 }, fm[1][1]:size())
    assert.are.equal(fm:get(7)[2], fm[7][2])
    assert.matches('out of range', tostring(select(2, pcall(function() return ds[9] end))))
  end)
end)

describe('DataLoader of nil', function()
  it('says the dataset is nil (a split unpacked through `a and f() or g()` keeps one value)', function()
    local ok, e = pcall(data.DataLoader, nil, { batch_size = 4 })
    assert.is_false(ok)
    assert.truthy(tostring(e):find('TypeError: DataLoader: the dataset (argument 1) is nil', 1, true), tostring(e))
  end)
end)
