-- data_port_findings_spec.lua: what porting torch.utils.data code found (each case: the torch 1.13
-- behaviour, run with /usr/bin/python3, in its comment), and the fixes.
local dpl = require 'dpl'
local data = dpl.data
local errors = require 'dpl.errors'

local function raises(cls, pattern, f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, 'expected an error')
  assert.is_true(errors.is(e, cls), 'error class: ' .. tostring(e))
  assert.matches(pattern, tostring(e.message or e), 1, true)
end
local function firsts(loader)
  local out = {}
  for b in loader do out[#out + 1] = b[1]:totable() end
  return out
end

describe('porting findings: samplers and lengths', function()
  it('a plain list is a sampler, a list of lists a batch_sampler (torch takes any iterable)', function()
    -- torch: [b[0].tolist() for b in DataLoader(TensorDataset(arange(10)), sampler=[3, 2, 1], batch_size=2)]
    -- -> [[3, 2], [1]] (0-based there; 1-based positions here); len 2.
    -- batch_sampler=[[1, 2], [3]] -> [[1, 2], [3]], len 2
    local ds = data.TensorDataset(dpl.arange(10))
    local l = data.DataLoader(ds, { sampler = { 4, 3, 2 }, batch_size = 2 })
    assert.are.equal(2, #l)
    assert.are.same({ { 3, 2 }, { 1 } }, firsts(l))
    local b = data.DataLoader(ds, { batch_sampler = { { 2, 3 }, { 4 } } })
    assert.are.equal(2, #b)
    assert.are.same({ { 1, 2 }, { 3 } }, firsts(b))
    raises(errors.MisconfigurationException, 'sampler must be a sampler', data.DataLoader, ds, { sampler = { 'a' } })
  end)

  it('SequentialSampler(dataset) and data.len(loader), as torch\'s SequentialSampler(ds) and len(loader)', function()
    -- torch: len(SequentialSampler(TensorDataset(arange(10)))) -> 10; len(DataLoader(ds, batch_size=3)) -> 4
    local ds = data.TensorDataset(dpl.arange(10))
    assert.are.equal(10, data.len(data.SequentialSampler(ds)))
    assert.are.equal(4, data.len(data.DataLoader(ds, { batch_size = 3 })))
  end)
end)

describe('porting findings: default_collate', function()
  it('lists of unequal sizes: torch\'s RuntimeError; a dict missing a key: KeyError', function()
    -- torch: default_collate([[1, 2], [3]]) -> RuntimeError: each element in list of batch should be of equal size
    raises(errors.RuntimeError, 'each element in list of batch should be of equal size', data.default_collate, { { 1, 2 }, { 3 } })
    raises(errors.RuntimeError, 'each element in list of batch should be of equal size', data.default_collate, { { 1 }, { 3, 4 } })
    -- torch: default_collate([{'a': 1}, {'b': 2}]) -> KeyError: 'a'
    raises(errors.KeyError, "default_collate: item 2 has no key 'a'", data.default_collate, { { a = 1 }, { b = 2 } })
    -- torch: default_collate([[[1, 2], [3]], [[4, 5], [6]]]) -> [[tensor([1, 4]), tensor([2, 5])], [tensor([3, 6])]]
    local c = data.default_collate({ { { 1, 2 }, { 3 } }, { { 4, 5 }, { 6 } } })
    assert.are.same({ 1, 4 }, c[1][1]:totable())
    assert.are.same({ 2, 5 }, c[1][2]:totable())
    assert.are.same({ 3, 6 }, c[2][1]:totable())
  end)
end)
