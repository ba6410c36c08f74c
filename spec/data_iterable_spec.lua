-- data_iterable_spec.lua: IterableDataset, ChainDataset, get_worker_info, the DataLoader over
-- them, batch_size=false (torch's None), WeightedRandomSampler, SubsetRandomSampler,
-- RandomSampler's replacement/num_samples, data.Generator, and the Trainer with loaders of
-- unknown length. Reference values: PyTorch 1.13 (/usr/bin/python3, torch.utils.data) and
-- Lightning 1.9.5 (build/plref), each case's comment says what was run. Random draws are
-- dplhost's own: the specs check distributions and reproducibility, not torch's values.
local dpl = require 'dpl'
local data = dpl.data
local errors = require 'dpl.errors'

local function err_of(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, 'expected an error')
  return e
end
local function raises(cls, pattern, f, ...)
  local e = err_of(f, ...)
  assert.is_true(errors.is(e, cls), 'error class: ' .. tostring(e))
  assert.matches(pattern, tostring(e.message or e), 1, true)
end

-- It(n): yields 0..n-1 (torch: `class It(IterableDataset): __iter__ = lambda s: iter(range(s.n))`)
local It = data.IterableDataset:extend('It')
function It:__init(n) self.n = n end
function It:__iter()
  local i = -1
  return function() i = i + 1; if i < self.n then return i end end
end
local ItL = It:extend('ItL') -- with __len__
function ItL:__len() return self.n end
local Gen = It:extend('Gen') -- a generator, as coroutine.wrap
function Gen:__iter()
  return coroutine.wrap(function() for i = 0, self.n - 1 do coroutine.yield(i) end end)
end

local function batches(loader)
  local out = {}
  for b in loader:iter() do out[#out + 1] = dpl.is_tensor(b) and b:totable() or b end
  return out
end

describe('DataLoader over an IterableDataset (torch 1.13)', function()
  it('batches by accumulation, drop_last, batch_size=false; len as torch', function()
    -- torch: [b.tolist() for b in DataLoader(It(5), batch_size=2)] -> [[0, 1], [2, 3], [4]];
    -- drop_last=True -> [[0, 1], [2, 3]]; batch_size=None over It(3) -> [0, 1, 2]
    assert.are.same({ { 0, 1 }, { 2, 3 }, { 4 } }, batches(data.DataLoader(It(5), { batch_size = 2 })))
    assert.are.same({ { 0, 1 }, { 2, 3 } }, batches(data.DataLoader(It(5), { batch_size = 2, drop_last = true })))
    assert.are.same({ 0, 1, 2 }, batches(data.DataLoader(It(3), { batch_size = false })))
    assert.are.same({ { 0, 1 }, { 2 } }, batches(data.DataLoader(Gen(3), { batch_size = 2 })))
    -- torch: len(DataLoader(It(5), batch_size=2)) -> TypeError: object of type 'It' has no len();
    -- with __len__: 3, drop_last 2, batch_size=None 5
    raises(errors.TypeError, "object of type 'It' has no len()", function() return #data.DataLoader(It(5), { batch_size = 2 }) end)
    assert.are.equal(3, #data.DataLoader(ItL(5), { batch_size = 2 }))
    assert.are.equal(2, #data.DataLoader(ItL(5), { batch_size = 2, drop_last = true }))
    assert.are.equal(5, #data.DataLoader(ItL(5), { batch_size = false }))
    assert.is_nil(data.DataLoader(It(5)):num_batches())
    -- iterating twice: two passes over the stream
    local l = data.DataLoader(It(3), { batch_size = 2 })
    assert.are.same(batches(l), batches(l))
    local n = 0
    for _ in l do n = n + 1 end
    assert.are.equal(2, n)
    -- collate_fn gets the accumulated list (batch_size=false: each item)
    local got = batches(data.DataLoader(It(3), { batch_size = 2, collate_fn = function(xs) return #xs end }))
    assert.are.same({ 2, 1 }, got)
    assert.are.same({ 10, 11, 12 }, batches(data.DataLoader(It(3), { batch_size = false, collate_fn = function(x) return x + 10 end })))
  end)

  it('refuses shuffle, sampler and batch_sampler as torch (shuffle=false is fine)', function()
    -- torch: ValueError: DataLoader with IterableDataset: expected unspecified shuffle option, but got shuffle=True
    raises(errors.ValueError, 'DataLoader with IterableDataset: expected unspecified shuffle option, but got shuffle=true',
      data.DataLoader, It(5), { shuffle = true })
    raises(errors.ValueError, 'expected unspecified sampler option, but got sampler=SequentialSampler',
      data.DataLoader, It(5), { sampler = data.SequentialSampler(5) })
    raises(errors.ValueError, 'expected unspecified batch_sampler option',
      data.DataLoader, It(5), { batch_sampler = data.BatchSampler(data.SequentialSampler(5), 2) })
    assert.are.same({ { 0, 1 } }, batches(data.DataLoader(It(2), { shuffle = false, batch_size = 2 })))
  end)

  it('a bad __iter is named', function()
    local Bad = data.IterableDataset:extend('Bad')
    function Bad:__iter() return { 1, 2 } end
    raises(errors.TypeError, 'Bad:__iter() must return an iterator function', function() return data.DataLoader(Bad()):iter() end)
    raises(errors.NotImplementedError, 'must define __iter()', function() return data.DataLoader(data.IterableDataset()):iter() end)
    raises(errors.TypeError, "'It' object is not subscriptable", function() return It(3)[1] end)
  end)
end)

describe('ChainDataset, +, get_worker_info', function()
  it('chains iterable datasets; len sums theirs; map-style datasets are refused (torch 1.13)', function()
    -- torch: list(ChainDataset([It(2), It(3)])) -> [0, 1, 0, 1, 2]; len(ChainDataset([ItL(2), ItL(3)])) -> 5;
    -- len with an It inside -> TypeError: object of type 'It' has no len()
    assert.are.same({ 0, 1, 0, 1, 2 }, batches(data.DataLoader(data.ChainDataset({ It(2), It(3) }), { batch_size = false })))
    assert.are.equal(5, data.len(data.ChainDataset({ ItL(2), ItL(3) })))
    raises(errors.TypeError, "object of type 'It' (dataset 2) has no len()", data.len, data.ChainDataset({ ItL(2), It(3) }))
    -- torch: AssertionError: ChainDataset only supports IterableDataset (checked here when it is made)
    raises(errors.TypeError, 'ChainDataset only supports IterableDataset',
      data.ChainDataset, { It(2), data.TensorDataset(dpl.arange(3)) })
    -- torch: AssertionError: ConcatDataset does not support IterableDataset
    raises(errors.TypeError, 'ConcatDataset does not support IterableDataset', data.ConcatDataset, { It(2) })
    -- torch: type(It(2) + It(3)) -> ChainDataset; TensorDataset + TensorDataset -> ConcatDataset
    assert.are.equal('ChainDataset', (It(2) + It(3)).__name)
    local c = data.TensorDataset(dpl.arange(3)) + data.TensorDataset(dpl.arange(2))
    assert.are.equal('ConcatDataset', c.__name)
    assert.are.equal(5, data.len(c))
    assert.is_true(data.is_iterable(It(1)))
    assert.is_false(data.is_iterable(c))
  end)

  it('get_worker_info() is nil in the main process (torch: None), where dpl loads', function()
    assert.is_nil(data.get_worker_info())
  end)
end)

describe('DataLoader batch_size=false (torch batch_size=None) and the worker options', function()
  it('map-style items one by one, len = len(dataset); drop_last refused as torch', function()
    -- torch: [b for b in DataLoader(TensorDataset(arange(3)), batch_size=None)] -> [[t(0)], [t(1)], [t(2)]], len 3
    local l = data.DataLoader(data.TensorDataset(dpl.arange(3)), { batch_size = false })
    assert.are.equal(3, #l)
    local got = {}
    for b in l do got[#got + 1] = b[1]:item() end
    assert.are.same({ 0, 1, 2 }, got)
    assert.is_nil(l.batch_size)
    -- torch: ValueError: batch_size=None option disables auto-batching and is mutually exclusive with drop_last
    raises(errors.ValueError, 'batch_size=None option disables auto-batching and is mutually exclusive with drop_last',
      data.DataLoader, data.TensorDataset(dpl.arange(3)), { batch_size = false, drop_last = true })
    -- shuffled, unbatched: each position once
    local s = data.DataLoader(data.TensorDataset(dpl.arange(5)), { batch_size = false, shuffle = true, seed = 1 })
    local seen = {}
    for b in s do seen[#seen + 1] = b[1]:item() end
    table.sort(seen)
    assert.are.same({ 0, 1, 2, 3, 4 }, seen)
  end)

  it('pin_memory, timeout, worker_init_fn, prefetch_factor=2 accepted; the worker-only ones refused as torch', function()
    local ds = data.TensorDataset(dpl.arange(3))
    local called = 0
    local l = data.DataLoader(ds, { pin_memory = true, timeout = 5, prefetch_factor = 2, persistent_workers = false,
      worker_init_fn = function() called = called + 1 end, num_workers = 0 })
    assert.are.equal(3, #batches(l))
    assert.are.equal(0, called) -- torch: worker_init_fn is only called in workers ([] with num_workers=0)
    -- torch 1.13 (num_workers=0): the ValueErrors below
    raises(errors.ValueError, 'persistent_workers option needs num_workers > 0', data.DataLoader, ds, { persistent_workers = true })
    raises(errors.ValueError, 'prefetch_factor option could only be specified in multiprocessing.let num_workers > 0',
      data.DataLoader, ds, { prefetch_factor = 4 })
    raises(errors.ValueError, 'timeout option should be non-negative', data.DataLoader, ds, { timeout = -1 })
    raises(errors.ValueError, 'multiprocessing_context can only be used with multi-process loading',
      data.DataLoader, ds, { multiprocessing_context = 'fork' })
    raises(errors.ValueError, 'pin_memory must be a boolean', data.DataLoader, ds, { pin_memory = 'yes' })
    raises(errors.ValueError, 'worker_init_fn must be a function', data.DataLoader, ds, { worker_init_fn = 3 })
  end)
end)

-- counts of each position over a list of positions
local function counts(list, n)
  local c = {}
  for i = 1, n do c[i] = 0 end
  for _, v in ipairs(list) do c[v] = c[v] + 1 end
  return c
end

describe('WeightedRandomSampler', function()
  it('checks its arguments with torch 1.13\'s messages', function()
    -- torch: ValueError: num_samples should be a positive integer value, but got num_samples=0 (2.0, True alike)
    raises(errors.ValueError, 'num_samples should be a positive integer value, but got num_samples=0',
      data.WeightedRandomSampler, { 1, 2 }, 0)
    raises(errors.ValueError, 'but got num_samples=2.5', data.WeightedRandomSampler, { 1, 2 }, 2.5)
    -- torch: ValueError: replacement should be a boolean value, but got replacement=1
    raises(errors.ValueError, 'replacement should be a boolean value, but got replacement=1',
      data.WeightedRandomSampler, { 1, 2 }, 2, 1)
    -- torch: ValueError: weights should be a 1d sequence but given weights have shape (2, 2)
    raises(errors.ValueError, 'weights should be a 1d sequence but given weights have shape (2, 2)',
      data.WeightedRandomSampler, dpl.ones(2, 2), 2)
    -- torch (at the first pass; here when it is made): RuntimeError: invalid multinomial distribution (...)
    raises(errors.RuntimeError, 'invalid multinomial distribution (encountering probability entry < 0)',
      data.WeightedRandomSampler, { 1, -2 }, 2)
    raises(errors.RuntimeError, 'invalid multinomial distribution (encountering probability entry < 0)',
      data.WeightedRandomSampler, { 1, 0 / 0 }, 2)
    raises(errors.RuntimeError, 'invalid multinomial distribution (encountering probability entry = infinity or NaN)',
      data.WeightedRandomSampler, { 1, math.huge }, 2)
    raises(errors.RuntimeError, 'invalid multinomial distribution (sum of probabilities <= 0)',
      data.WeightedRandomSampler, { 0, 0 }, 2)
    raises(errors.RuntimeError, 'invalid multinomial distribution (sum of probabilities <= 0)',
      data.WeightedRandomSampler, {}, 2)
    raises(errors.RuntimeError, 'cannot sample n_sample > prob_dist.size(-1) samples without replacement',
      data.WeightedRandomSampler, { 1, 2 }, 3, false)
    -- torch 1.13 returns zero-weight positions here ([1,0,0], 2 -> [0, 1]); refused (torch 2's message)
    raises(errors.RuntimeError, 'not enough non-negative category to sample',
      data.WeightedRandomSampler, { 1, 0, 0 }, 2, false)
    -- torch: len(WeightedRandomSampler([1, 2], 7)) -> 7
    assert.are.equal(7, data.len(data.WeightedRandomSampler({ 1, 2 }, 7)))
  end)

  it('with replacement: frequencies follow the weights, zero weights never drawn; same seed same order', function()
    -- torch 1.13, WeightedRandomSampler([1, 2, 3, 4], 100000, generator=manual_seed(0)):
    -- frequencies [0.0996, 0.2006, 0.2991, 0.4007] (expected w / 10)
    local s = data.WeightedRandomSampler({ 1, 2, 3, 4 }, 100000, true, { seed = 0 })
    local c = counts(s:indices(), 4)
    for i = 1, 4 do assert.is_true(math.abs(c[i] / 1e5 - i / 10) < 0.006, ('position %d: %g'):format(i, c[i] / 1e5)) end
    local z = counts(data.WeightedRandomSampler(dpl.tensor({ 0, 1, 0, 1 }), 2000, true, { seed = 3 }):indices(), 4)
    assert.are.equal(0, z[1] + z[3])
    assert.is_true(z[2] > 800 and z[4] > 800)
    -- reproducible: the same seed gives the same passes; successive passes differ
    local a = data.WeightedRandomSampler({ 1, 2, 3, 4 }, 50, true, { seed = 7 })
    local b = data.WeightedRandomSampler({ 1, 2, 3, 4 }, 50, true, { seed = 7 })
    local a1, a2 = a:indices(), a:indices()
    assert.are.same(a1, b:indices())
    assert.are.same(a2, b:indices())
    assert.are_not.same(a1, a2)
    -- a Generator: advances each pass; two generators seeded alike agree
    local g1, g2 = data.Generator():manual_seed(5), data.Generator():manual_seed(5)
    local w1, w2 = data.WeightedRandomSampler({ 1, 2, 3, 4 }, 50, true, g1), data.WeightedRandomSampler({ 1, 2, 3, 4 }, 50, true, g2)
    assert.are.same(w1:indices(), w2:indices())
    assert.are.same(w1:indices(), w2:indices())
    -- without seed or generator: dpl.manual_seed reproduces it
    dpl.manual_seed(11)
    local u1 = data.WeightedRandomSampler({ 1, 2, 3, 4 }, 50):indices()
    dpl.manual_seed(11)
    assert.are.same(u1, data.WeightedRandomSampler({ 1, 2, 3, 4 }, 50):indices())
  end)

  it('without replacement: distinct positions, a weighted draw one after the other', function()
    -- torch 1.13, 20000 runs of WeightedRandomSampler([1, 2, 3, 4], 2, replacement=False, generator=manual_seed(s)):
    -- first pick [0.1032, 0.1996, 0.2959, 0.4013]; pairs {0,1} .049 {0,2} .077 {0,3} .115 {1,2} .158 {1,3} .231
    -- {2,3} .37; exactly P{a,b} = w_a/10 * w_b/(10-w_a) + w_b/10 * w_a/(10-w_b)
    local s = data.WeightedRandomSampler({ 1, 2, 3, 4 }, 2, false, { seed = 1 })
    local first, pairs_ = { 0, 0, 0, 0 }, {}
    local runs = 20000
    for _ = 1, runs do
      local p = s:indices()
      assert.are_not.equal(p[1], p[2])
      first[p[1]] = first[p[1]] + 1
      local k = math.min(p[1], p[2]) * 10 + math.max(p[1], p[2])
      pairs_[k] = (pairs_[k] or 0) + 1
    end
    for i = 1, 4 do assert.is_true(math.abs(first[i] / runs - i / 10) < 0.012, 'first pick ' .. i) end
    for a = 1, 3 do
      for b = a + 1, 4 do
        local want = a / 10 * b / (10 - a) + b / 10 * a / (10 - b)
        assert.is_true(math.abs((pairs_[a * 10 + b] or 0) / runs - want) < 0.012, ('pair %d,%d'):format(a, b))
      end
    end
    local all = data.WeightedRandomSampler({ 5, 1, 0, 2 }, 3, false, { seed = 2 }):indices()
    table.sort(all)
    assert.are.same({ 1, 2, 4 }, all)
  end)

  it('drives a DataLoader (the Trainer wraps it under ddp, as any custom sampler)', function()
    local ds = data.TensorDataset(dpl.arange(4))
    local l = data.DataLoader(ds, { batch_size = 3, sampler = data.WeightedRandomSampler({ 0, 0, 1, 0 }, 6, true, { seed = 0 }) })
    assert.are.equal(2, #l)
    assert.are.same({ { 2, 2, 2 }, { 2, 2, 2 } }, (function()
      local out = {}
      for b in l do out[#out + 1] = b[1]:totable() end
      return out
    end)())
    local loops = require 'dpl.trainer.loops'
    local strat = { distributed_sampler_kwargs = function() return { num_replicas = 2, rank = 1 } end }
    local d = loops.with_distributed_sampler(strat, l)
    assert.are.equal('DistributedSamplerWrapper', d.sampler.__name)
    assert.are.equal(3, data.len(d.sampler))
  end)
end)

describe('SubsetRandomSampler, RandomSampler options, Generator, random_split with a generator', function()
  it('SubsetRandomSampler: the given positions in a new order each pass (torch: sorted -> [5, 6, 7], len 3)', function()
    local s = data.SubsetRandomSampler({ 5, 6, 7, 8, 9 }, { seed = 4 })
    assert.are.equal(5, data.len(s))
    local p1, p2 = s:indices(), s:indices()
    local sorted = { unpack(p1) }
    table.sort(sorted)
    assert.are.same({ 5, 6, 7, 8, 9 }, sorted)
    assert.are.same(p1, data.SubsetRandomSampler({ 5, 6, 7, 8, 9 }, { seed = 4 }):indices())
    assert.are_not.same(p1, p2)
    local g = data.Generator():manual_seed(1)
    assert.are.same(data.SubsetRandomSampler({ 1, 2, 3, 4, 5, 6 }, g):indices(),
      data.SubsetRandomSampler({ 1, 2, 3, 4, 5, 6 }, data.Generator():manual_seed(1)):indices())
    raises(errors.TypeError, 'indices must be integer positions >= 1, got 0 at position 2', data.SubsetRandomSampler, { 1, 0 })
    -- in a DataLoader: a validation split of the positions given
    local l = data.DataLoader(data.TensorDataset(dpl.arange(10)), { batch_size = 10, sampler = data.SubsetRandomSampler({ 2, 4, 6 }) })
    local b = l:iter()()[1]:totable()
    table.sort(b)
    assert.are.same({ 1, 3, 5 }, b)
  end)

  it('RandomSampler(dataset, {replacement=, num_samples=}) as torch 1.13', function()
    -- torch: len(RandomSampler(range(3), replacement=True, num_samples=7)) -> 7; without replacement,
    -- num_samples=7 over 3 -> whole permutations then a cut one: sorted [0, 0, 1, 1, 1, 2, 2]-like (each at least twice)
    local ds = data.TensorDataset(dpl.arange(3))
    assert.are.equal(7, data.len(data.RandomSampler(ds, { replacement = true, num_samples = 7 })))
    local c = counts(data.RandomSampler(3, { num_samples = 7, seed = 1 }):indices(), 3)
    for i = 1, 3 do assert.is_true(c[i] >= 2 and c[i] <= 3) end
    local r = counts(data.RandomSampler(3, { replacement = true, num_samples = 30000, seed = 1 }):indices(), 3)
    for i = 1, 3 do assert.is_true(math.abs(r[i] / 30000 - 1 / 3) < 0.015) end
    -- torch: ValueError num_samples should be a positive integer value, but got num_samples=0;
    -- TypeError replacement should be a boolean value, but got replacement=1
    raises(errors.ValueError, 'num_samples should be a positive integer value, but got num_samples=0',
      data.RandomSampler, 3, { num_samples = 0 })
    raises(errors.TypeError, 'replacement should be a boolean value, but got replacement=1',
      data.RandomSampler, 3, { replacement = 1 })
  end)

  it('Generator: torch\'s default seed, manual_seed chains, state round trip; DataLoader{generator=} shuffles from it', function()
    -- torch: torch.Generator().initial_seed() -> 67280421310721
    assert.are.equal(67280421310721, data.Generator():initial_seed())
    local g = data.Generator():manual_seed(3)
    assert.are.equal(3, g:initial_seed())
    local st = g:get_state()
    local ds = data.TensorDataset(dpl.arange(20))
    local function order(l) local b = l:iter()()[1]:totable() return b end
    local l1 = data.DataLoader(ds, { batch_size = 20, shuffle = true, generator = g })
    local e1, e2 = order(l1), order(l1)
    assert.are_not.same(e1, e2)
    g:set_state(st)
    assert.are.same(e1, order(l1))
    local l2 = data.DataLoader(ds, { batch_size = 20, shuffle = true, generator = data.Generator():manual_seed(3) })
    assert.are.same(e1, order(l2))
    assert.are.same(e2, order(l2))
    raises(errors.MisconfigurationException, 'generator must be a dpl.data.Generator', data.DataLoader, ds, { generator = 3 })
    raises(errors.MisconfigurationException, 'give seed= or generator=, not both', data.DataLoader, ds,
      { shuffle = true, seed = 1, generator = g })
  end)

  it('random_split(ds, fractions, generator): torch 1.13\'s sizes, reproducible', function()
    -- torch: [len(s) for s in random_split(range(10), [0.33, 0.33, 0.34], generator=Generator().manual_seed(0))] -> [4, 3, 3]
    local ds = data.TensorDataset(dpl.arange(10))
    local a = data.random_split(ds, { 0.33, 0.33, 0.34 }, data.Generator():manual_seed(0))
    assert.are.same({ 4, 3, 3 }, { data.len(a[1]), data.len(a[2]), data.len(a[3]) })
    local b = data.random_split(ds, { 0.33, 0.33, 0.34 }, { generator = data.Generator():manual_seed(0) })
    assert.are.same(a[1].indices, b[1].indices)
    assert.are.same(a[3].indices, b[3].indices)
    -- torch: random_split(range(10), [0.5, 0.6]) -> ValueError: Sum of input lengths does not equal the length of the
    -- input dataset! (dplhost's ValueError says why: neither counts nor fractions summing to 1)
    raises(errors.ValueError, 'or fractions summing to 1 (these sum to 1.1)', data.random_split, ds, { 0.5, 0.6 })
  end)
end)

-- the Trainer with loaders over iterable datasets: reference runs of Lightning 1.9.5 (build/plref,
-- torch 1.13) on the same data, recorded as 't<batch_idx>:<items>' / 'v<batch_idx>:<items>'
local Inf = data.IterableDataset:extend('Inf') -- 0, 1, 2, ... forever (torch: a `while True: yield` generator)
function Inf:__iter() local i = -1 return function() i = i + 1 return dpl.tensor({ i }) end end
local Fin = data.IterableDataset:extend('Fin') -- 0..n-1 as 1-element tensors, no __len__
function Fin:__init(n) self.n = n end
function Fin:__iter() local i = -1 return function() i = i + 1 if i < self.n then return dpl.tensor({ i }) end end end
local FinL = Fin:extend('FinL')
function FinL:__len() return self.n end

local Rec = dpl.LightningModule:extend('IterRec')
function Rec:__init() dpl.LightningModule.__init(self) self.l = dpl.nn.Linear(1, 1) self.ev = {} end
local function items(b) return table.concat(b:select(2, 1):totable(), ',') end
function Rec:training_step(b, i)
  self.ev[#self.ev + 1] = ('t%d:%s'):format(i, items(b))
  return self.l(b:float()):sum()
end
function Rec:validation_step(b, i) self.ev[#self.ev + 1] = ('v%d:%s'):format(i, items(b)) end
function Rec:configure_optimizers() return dpl.optim.SGD(self:parameters(), 0.0) end

local function fit(train, val, kw)
  local a = { logger = false, enable_progress_bar = false, enable_checkpointing = false, enable_model_summary = false }
  for k, v in pairs(kw or {}) do a[k] = v end
  local t, m = dpl.Trainer(a), Rec()
  t:fit(m, train, val)
  return t, table.concat(m.ev, ' ')
end
local DL = data.DataLoader

describe('Trainer with iterable datasets (Lightning 1.9.5)', function()
  it('an infinite stream stops at max_steps; estimated_stepping_batches is max_steps', function()
    -- Lightning: global_step 5, current_epoch 1, num_training_batches inf, val_check_batch inf, estimated 5
    local t, ev = fit(DL(Inf(), { batch_size = 2 }), nil, { max_steps = 5 })
    assert.are.same({ 5, 1, math.huge, math.huge, 5 },
      { t.global_step, t.current_epoch, t.num_training_batches, t.val_check_batch, t.estimated_stepping_batches })
    assert.are.equal('t0:0,1 t1:2,3 t2:4,5 t3:6,7 t4:8,9', ev)
  end)

  it('a finite stream without a length: epochs end with the stream, validation at each end', function()
    -- Lightning: max_epochs=2, train DataLoader(Fin(7), bs 2), val DataLoader(Fin(3), bs 2): global_step 8, epoch 2,
    -- num_val_batches [inf], estimated_stepping_batches -1 (max_steps)
    local t, ev = fit(DL(Fin(7), { batch_size = 2 }), DL(Fin(3), { batch_size = 2 }), { max_epochs = 2 })
    assert.are.same({ 8, 2, math.huge, math.huge, -1 },
      { t.global_step, t.current_epoch, t.num_training_batches, t.num_val_batches[1], t.estimated_stepping_batches })
    assert.are.equal('v0:0,1 v1:2 t0:0,1 t1:2,3 t2:4,5 t3:6 v0:0,1 v1:2 t0:0,1 t1:2,3 t2:4,5 t3:6 v0:0,1 v1:2', ev)
    -- drop_last: 3 batches
    t, ev = fit(DL(Fin(7), { batch_size = 2, drop_last = true }), nil, { max_epochs = 1 })
    assert.are.equal('t0:0,1 t1:2,3 t2:4,5', ev)
  end)

  it('val_check_interval: an int k validates every k batches; a fraction other than 1.0 is refused', function()
    -- Lightning, val_check_interval=2, num_sanity_val_steps=0: validation after batches 1 and 3
    local t, ev = fit(DL(Fin(7), { batch_size = 2 }), DL(Fin(3), { batch_size = 2 }),
      { max_epochs = 1, val_check_interval = 2, num_sanity_val_steps = 0 })
    assert.are.equal(2, t.val_check_batch)
    assert.are.equal('t0:0,1 t1:2,3 v0:0,1 v1:2 t2:4,5 t3:6 v0:0,1 v1:2', ev)
    -- Lightning: max_steps=7, val_check_interval=3, check_val_every_n_epoch=None over Inf()
    t, ev = fit(DL(Inf(), { batch_size = 2 }), DL(Fin(3), { batch_size = 2 }),
      { max_steps = 7, val_check_interval = 3, check_val_every_n_epoch = false, num_sanity_val_steps = 0 })
    assert.are.equal('t0:0,1 t1:2,3 t2:4,5 v0:0,1 v1:2 t3:6,7 t4:8,9 t5:10,11 v0:0,1 v1:2 t6:12,13', ev)
    -- Lightning: MisconfigurationException, word for word
    raises(errors.MisconfigurationException, 'When using an IterableDataset for `train_dataloader`, `Trainer(val_check_interval)`'
      .. ' must be `1.0` or an int. An int k specifies checking validation every k training batches.',
      fit, DL(Fin(7), { batch_size = 2 }), DL(Fin(3), { batch_size = 2 }), { max_epochs = 1, val_check_interval = 0.5 })
  end)

  it('limit_*_batches: an int bounds the epoch, a fraction is refused (Lightning\'s messages)', function()
    -- Lightning, limit_train_batches=3, max_epochs=2: 6 steps, num_training_batches 3, val_check_batch inf,
    -- estimated 6; with a validation loader it runs after each epoch's third batch
    local t, ev = fit(DL(Inf(), { batch_size = 2 }), DL(Fin(3), { batch_size = 2 }),
      { max_epochs = 2, limit_train_batches = 3, num_sanity_val_steps = 0 })
    assert.are.same({ 6, 3, math.huge, 6 }, { t.global_step, t.num_training_batches, t.val_check_batch, t.estimated_stepping_batches })
    assert.are.equal('t0:0,1 t1:2,3 t2:4,5 v0:0,1 v1:2 t0:0,1 t1:2,3 t2:4,5 v0:0,1 v1:2', ev)
    -- Lightning: limit_val_batches=1 over an infinite validation stream: one batch (num_val_batches [1])
    t, ev = fit(DL(Fin(7), { batch_size = 2 }), DL(Inf(), { batch_size = 2 }), { max_epochs = 1, limit_val_batches = 1 })
    assert.are.equal(1, t.num_val_batches[1])
    assert.are.equal('v0:0,1 t0:0,1 t1:2,3 t2:4,5 t3:6 v0:0,1', ev)
    raises(errors.MisconfigurationException, 'When using an `IterableDataset`, `Trainer(limit_train_batches)` must be'
      .. ' `1.0` or an int.An int specifies `num_training_batches` to use.',
      fit, DL(Fin(7), { batch_size = 2 }), nil, { max_epochs = 1, limit_train_batches = 0.5 })
    raises(errors.MisconfigurationException, 'When using an `IterableDataset`, `Trainer(limit_val_batches)` must be'
      .. ' `1.0` or an int. An int specifies `num_val_batches` to use.',
      fit, DL(Fin(7), { batch_size = 2 }), DL(Fin(3), { batch_size = 2 }), { max_epochs = 1, limit_val_batches = 0.5 })
  end)

  it('an IterableDataset with a length: that many batches, and Lightning\'s warning', function()
    -- Lightning: num_training_batches 4, val_check_batch 4, estimated 4; warns "Your `IterableDataset` has `__len__` defined. ..."
    local log = require 'dpl.log'
    local warned = {}
    local orig = log.warn
    log.warn = function(fmt, ...) warned[#warned + 1] = fmt:format(...) end
    local ok, t, ev = pcall(fit, DL(FinL(7), { batch_size = 2 }), nil, { max_epochs = 1 })
    log.warn = orig
    assert.is_true(ok, tostring(t))
    assert.are.same({ 4, 4, 4 }, { t.num_training_batches, t.val_check_batch, t.estimated_stepping_batches })
    assert.are.equal('t0:0,1 t1:2,3 t2:4,5 t3:6', ev)
    assert.matches('Your `IterableDataset` has `__len__` defined.', table.concat(warned, '\n'), 1, true)
  end)

  it('no DistributedSampler for an iterable loader (Lightning\'s has_iterable_dataset); set_epoch is harmless', function()
    local loops = require 'dpl.trainer.loops'
    local strat = { distributed_sampler_kwargs = function() return { num_replicas = 2, rank = 0 } end }
    local l = DL(Fin(4), { batch_size = 2 })
    assert.are.equal(l, loops.with_distributed_sampler(strat, l))
    assert.is_nil(l.sampler)
    l:set_epoch(3)
    raises(errors.MisconfigurationException, 'has no sampler to replace', function() return l:with_sampler(data.SequentialSampler(4)) end)
  end)
end)
