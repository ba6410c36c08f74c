-- data_seed_spec.lua: the shuffling seeds of dpl.data. A (seed, epoch) pair is mixed in
-- 64-bit integer arithmetic, so negative seeds, seeds past 2^32 and every epoch give their
-- own orders; seeds must be integers; a shuffling DataLoader without seed= draws its seed
-- from dpl's global generator at each pass (dpl.manual_seed / dpl.seed_everything make it
-- reproducible, as torch.manual_seed does for PyTorch's DataLoader); dpl.seed_everything.
local ffi = require 'ffi'
local dpl = require 'dpl'
local data = dpl.data
local errors = require 'dpl.errors'

local function order_of(loader)
  local it = loader:iter()
  return table.concat(it()[1]:totable(), ',')
end

local ds20 = data.TensorDataset(dpl.arange(1, 21))
local function loader(seed) return data.DataLoader(ds20, { batch_size = 20, shuffle = true, seed = seed }) end

local function misconf_matching(f, pattern)
  local ok, e = pcall(f)
  assert.is_false(ok)
  assert.is_true(errors.is(e, errors.MisconfigurationException), tostring(e))
  assert.truthy(tostring(e):find(pattern), tostring(e))
end

describe('shuffle seeds', function()
  it('negative and large seeds change the order between passes and epochs, and differ from each other', function()
    local seen = {}
    for _, s in ipairs({ 42, 0, -1, -2, -12345, 1.7e12, 1700000000123, 2 ^ 53, -2 ^ 53 }) do
      local l = loader(s)
      local p1, p2, p3 = order_of(l), order_of(l), order_of(l)
      assert.are_not.equal(p1, p2, 'seed ' .. s)
      assert.are_not.equal(p2, p3, 'seed ' .. s)
      l:set_epoch(0)
      local e0 = order_of(l)
      assert.are.equal(p1, e0, 'pass k of a fresh loader is epoch k')
      assert.are.equal(e0, order_of(l), 'the same epoch again')
      l:set_epoch(1)
      local e1 = order_of(l)
      l:set_epoch(7)
      local e7 = order_of(l)
      assert.are_not.equal(e0, e1, 'seed ' .. s)
      assert.are_not.equal(e1, e7, 'seed ' .. s)
      assert.is_nil(seen[e0], 'seed ' .. s .. ' repeats another seed\'s order')
      seen[e0] = true
    end
  end)

  it('seed 0 at epoch 1000003 and seed 1 at epoch 0 are different streams (no seed * 1000003 + epoch)', function()
    local a, b = loader(0), loader(1)
    a:set_epoch(1000003)
    b:set_epoch(0)
    assert.are_not.equal(order_of(a), order_of(b))
  end)

  it('DistributedSampler and randperm: distinct negative seeds, epochs', function()
    local function dist(seed, epoch)
      local s = data.DistributedSampler{ size = 20, num_replicas = 1, rank = 0, seed = seed }
      s:set_epoch(epoch)
      return table.concat(s:indices(), ',')
    end
    assert.are_not.equal(dist(-1, 0), dist(-7, 0))
    assert.are_not.equal(dist(-1, 0), dist(-1, 3))
    assert.are_not.equal(dist(0, 1), dist(1, 0))
    assert.are.equal(dist(-1, 3), dist(-1, 3))
    assert.are_not.same(data.randperm(20, -1), data.randperm(20, -2))
    assert.are.same(data.randperm(20, -1), data.randperm(20, -1))
    -- randperm(n, s) is the order of a RandomSampler{seed=s} at epoch 0
    local r = data.RandomSampler(20, { seed = -5 })
    r:set_epoch(0)
    assert.are.same(data.randperm(20, -5), r:indices())
    -- the 64-bit cdata seeds work, two's complement for the negatives
    assert.are.same(data.randperm(20, -3), data.randperm(20, ffi.new('int64_t', -3)))
    assert.are.same(data.randperm(20, -3), data.randperm(20, 0xFFFFFFFFFFFFFFFDULL))
  end)

  it('seeds must be integers: clear errors when the loader is made', function()
    for _, s in ipairs({ 1.5, 0 / 0, math.huge, 2 ^ 53 + 2, 2 ^ 70 }) do
      misconf_matching(function() loader(s) end, 'DataLoader seed must be an integer in %[%-2%^53, 2%^53%]')
    end
    misconf_matching(function() loader('abc') end, "DataLoader seed must be an integer, got string 'abc'")
    misconf_matching(function() loader(true) end, 'DataLoader seed must be an integer, got boolean true')
    -- validated even when shuffle is off
    misconf_matching(function() data.DataLoader(ds20, { seed = 'x' }) end, 'DataLoader seed must be an integer')
    misconf_matching(function() data.RandomSampler(4, { seed = 0.5 }) end, 'RandomSampler seed must be an integer')
    misconf_matching(function() data.DistributedSampler{ size = 4, seed = 'a' } end,
      'DistributedSampler seed must be an integer')
    misconf_matching(function() data.randperm(5, 'x') end, "randperm seed must be an integer, got string 'x'")
    misconf_matching(function() loader(1):set_epoch(1.5) end, 'set_epoch: epoch must be an integer >= 0, got 1.5')
    misconf_matching(function() loader(1):set_epoch(-1) end, 'set_epoch: epoch must be an integer >= 0, got %-1')
  end)

  it('without seed=, dpl.manual_seed makes the shuffling reproducible; each pass draws a new seed', function()
    local function run()
      local l = loader(nil)
      return { order_of(l), order_of(l) }
    end
    dpl.manual_seed(0)
    local a = run()
    local after_a = dpl.randn(2):totable()
    dpl.manual_seed(0)
    local b = run()
    assert.are.same(a, b)
    assert.are.same(after_a, dpl.randn(2):totable()) -- the same draws from the generator
    assert.are_not.equal(a[1], a[2])
    dpl.manual_seed(1)
    assert.are_not.same(a, run())
    -- randperm without a seed draws one too
    dpl.manual_seed(3)
    local p = data.randperm(20)
    dpl.manual_seed(3)
    assert.are.same(p, data.randperm(20))
  end)
end)

describe('dpl.seed_everything', function()
  local C = dpl.C
  local saved = {}
  before_each(function()
    for _, k in ipairs({ 'PL_GLOBAL_SEED', 'PL_SEED_WORKERS' }) do saved[k] = os.getenv(k) end
  end)
  after_each(function()
    for _, k in ipairs({ 'PL_GLOBAL_SEED', 'PL_SEED_WORKERS' }) do C.dpl_proc_setenv(k, saved[k]) end
  end)

  it('seeds the generator and the shuffling, sets PL_GLOBAL_SEED, returns the seed', function()
    assert.are.equal(42, dpl.seed_everything(42))
    assert.are.equal('42', os.getenv('PL_GLOBAL_SEED'))
    assert.are.equal('0', os.getenv('PL_SEED_WORKERS'))
    local x = dpl.randn(3):totable()
    local o = order_of(loader(nil))
    local m = math.random()
    dpl.seed_everything(42, true)
    assert.are.equal('1', os.getenv('PL_SEED_WORKERS'))
    assert.are.same(x, dpl.randn(3):totable())
    assert.are.equal(o, order_of(loader(nil)))
    assert.are.equal(m, math.random())
  end)

  it('without a seed: PL_GLOBAL_SEED, else a random one; out of bounds seeds are replaced', function()
    C.dpl_proc_setenv('PL_GLOBAL_SEED', '7')
    assert.are.equal(7, dpl.seed_everything())
    C.dpl_proc_setenv('PL_GLOBAL_SEED', nil)
    local s = dpl.seed_everything()
    assert.is_true(s >= 0 and s <= 4294967295 and s == math.floor(s))
    assert.are.equal(tostring(s), os.getenv('PL_GLOBAL_SEED'))
    local r = dpl.seed_everything(-5)
    assert.is_true(r >= 0 and r <= 4294967295)
    assert.are.equal(3, dpl.seed_everything(3.7)) -- Python's int()
    assert.has_error(function() dpl.seed_everything('abc') end)
  end)
end)
