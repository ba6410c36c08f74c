-- data_split_spec.lua: data.random_split (torch 1.13's: counts or fractions, the remainder
-- handed out round-robin, a seed or dpl's global generator) and data.ConcatDataset (items
-- in order, cumulative_sizes, the datasets' get_batch fast path gathered back into the
-- asked order, the per-item path otherwise).
local dpl = require 'dpl'
local data = dpl.data
local errors = require 'dpl.errors'

local Squares = data.Dataset:extend('SquaresS')
function Squares:__init(n, base) self.n, self.base = n, base or 0 end
function Squares:__len() return self.n end
function Squares:get(i) return { self.base + i, (self.base + i) ^ 2 } end

local function items_of(subset)
  local t = {}
  for i = 1, data.len(subset) do t[i] = subset:get(i)[1] end
  return t
end

describe('data.random_split', function()
  it('splits by counts into disjoint Subsets covering the dataset, reproducibly from seed', function()
    local ds = Squares(10)
    local parts = data.random_split(ds, { 3, 7 }, { seed = 1 })
    assert.are.equal(2, #parts)
    assert.are.equal(3, data.len(parts[1]))
    assert.are.equal(7, data.len(parts[2]))
    assert.is_true(require('dpl.class').is_instance(parts[1], data.Subset))
    local seen = {}
    for _, p in ipairs(parts) do
      for _, v in ipairs(items_of(p)) do
        assert.is_nil(seen[v])
        seen[v] = true
      end
    end
    for i = 1, 10 do assert.is_true(seen[i]) end
    -- the positions are randperm(n, seed), cut in order
    local perm = data.randperm(10, 1)
    assert.are.same({ perm[1], perm[2], perm[3] }, parts[1].indices)
    assert.are.same(parts[2].indices, data.random_split(ds, { 3, 7 }, { seed = 1 })[2].indices)
    assert.are_not.same(parts[2].indices, data.random_split(ds, { 3, 7 }, { seed = 2 })[2].indices)
  end)

  it('splits by fractions as torch 1.13: floor, then the remainder one by one from the first', function()
    local ds = Squares(10)
    local function lens(fracs)
      local out = {}
      for k, p in ipairs(data.random_split(ds, fracs, { seed = 0 })) do out[k] = data.len(p) end
      return out
    end
    assert.are.same({ 8, 2 }, lens({ 0.8, 0.2 }))
    assert.are.same({ 4, 3, 3 }, lens({ 1 / 3, 1 / 3, 1 / 3 }))
    assert.are.same({ 3, 2, 5 }, lens({ 0.25, 0.25, 0.5 })) -- floors 2, 2, 5, then +1 to the first
    assert.are.same({ 10 }, lens({ 1 }))
    assert.are.same({ 10, 0 }, lens({ 1, 0 }))           -- with a warning (an empty split)
  end)

  it('without a seed draws from the global generator (dpl.manual_seed reproduces it)', function()
    local ds = Squares(50)
    dpl.manual_seed(5)
    local a = data.random_split(ds, { 25, 25 })[1].indices
    dpl.manual_seed(5)
    assert.are.same(a, data.random_split(ds, { 25, 25 })[1].indices)
  end)

  it('rejects lengths that do not add up, bad entries and unknown options', function()
    local ds = Squares(10)
    assert.has_error(function() data.random_split(ds, { 3, 6 }) end,
      errors.ValueError('Sum of input lengths does not equal the length of the input dataset! (9 != 10)'))
    assert.has_error(function() data.random_split(ds, { 0.5, 0.4 }) end)
    assert.has_error(function() data.random_split(ds, { 2.5, 7.5 }) end)
    assert.has_error(function() data.random_split(ds, { 11, -1 }) end,
      errors.ValueError('random_split: lengths[2] must be a count or a fraction >= 0, got -1'))
    assert.has_error(function() data.random_split(ds, { '5', 5 }) end)
    assert.has_error(function() data.random_split(ds, {}) end)
    assert.has_error(function() data.random_split(ds, { 5, 5 }, { sed = 1 }) end)
    assert.has_error(function() data.random_split(ds, { 5, 5 }, { seed = 0.5 }) end)
  end)

  it('the Subsets feed a DataLoader on the fast path of a TensorDataset', function()
    local td = data.TensorDataset(dpl.arange(1, 101))
    local tr, va = unpack(data.random_split(td, { 0.9, 0.1 }, { seed = 3 }))
    local got = {}
    for b in data.DataLoader(va, { batch_size = 4 }):iter() do
      for _, v in ipairs(b[1]:totable()) do got[#got + 1] = v end
    end
    assert.are.same(va.indices, got)
    assert.are.equal(90, data.len(tr))
  end)
end)

describe('data.ConcatDataset', function()
  it('chains the items of its datasets; cumulative_sizes; index errors', function()
    local c = data.ConcatDataset({ Squares(3), Squares(0, 100), Squares(2, 10) })
    assert.are.equal(5, data.len(c))
    assert.are.same({ 3, 3, 5 }, c.cumulative_sizes)
    local firsts = {}
    for i = 1, 5 do firsts[i] = c:get(i)[1] end
    assert.are.same({ 1, 2, 3, 11, 12 }, firsts)
    assert.has_error(function() c:get(6) end)
    assert.has_error(function() c:get(0) end)
    local l = data.DataLoader(c, { batch_size = 2 })
    local b = l:iter()()
    assert.are.same({ 1, 2 }, b[1]:totable())
    assert.are.same({ 1, 4 }, b[2]:totable())
  end)

  it('uses the datasets\' get_batch, gathered back into the asked order', function()
    local a = data.TensorDataset(dpl.arange(1, 6), dpl.arange(1, 6) * 10)
    local b = data.TensorDataset(dpl.arange(101, 104), dpl.arange(101, 104) * 10)
    local c = data.ConcatDataset({ a, b })
    local batch = c:get_batch({ 7, 1, 6, 5, 8, 2 })
    assert.are.same({ 102, 1, 101, 5, 103, 2 }, batch[1]:totable())
    assert.are.same({ 1020, 10, 1010, 50, 1030, 20 }, batch[2]:totable())
    -- one dataset only: its own get_batch
    assert.are.same({ 3, 4 }, c:get_batch({ 3, 4 })[1]:totable())
    -- a shuffled loader covers every item once
    local seen = {}
    for bt in data.DataLoader(c, { batch_size = 3, shuffle = true, seed = 4 }):iter() do
      for _, v in ipairs(bt[1]:totable()) do
        assert.is_nil(seen[v])
        seen[v] = true
      end
    end
    for _, v in ipairs({ 1, 2, 3, 4, 5, 101, 102, 103 }) do assert.is_true(seen[v]) end
    -- a mix with a dataset without get_batch goes item by item, same values
    local NoFast = data.Dataset:extend('NoFast')
    function NoFast:__len() return 2 end
    function NoFast:get(i) return { dpl.tensor(200 + i), dpl.tensor(2000 + i * 10) } end
    local m = data.ConcatDataset({ a, NoFast() })
    local mb = m:get_batch({ 6, 1, 7 })
    assert.are.same({ 201, 1, 202 }, mb[1]:totable())
    assert.are.same({ 2010, 10, 2020 }, mb[2]:totable())
  end)

  it('rejects an empty list, a single dataset, and things that are not datasets', function()
    assert.has_error(function() data.ConcatDataset({}) end,
      errors.ValueError('ConcatDataset: datasets should not be an empty list'))
    assert.has_error(function() data.ConcatDataset(Squares(3)) end,
      errors.ValueError('ConcatDataset expects a list of datasets {ds1, ds2, ...}, got a SquaresS'))
    assert.has_error(function() data.ConcatDataset({ Squares(3), 5 }) end,
      errors.MisconfigurationException('ConcatDataset: dataset 2 must have a __len method, got number'))
  end)
end)
