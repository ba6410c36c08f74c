-- embedding_bag_fast_spec.lua: embedding_bag's C pass without a gradient (bounds built as a
-- tensor, ids and offsets checked in C, the AVX-512 float32 bags) against the composite that
-- runs when a gradient is recorded (index_select, products, index_add, division): the same
-- bits for sum and mean, float32 and float64, embedding dims on and off the 16-float blocks,
-- per_sample_weights, padding_idx, include_last_offset, 2-d inputs, int32 ids and offsets,
-- empty bags, offsets as a list; the general code's messages for bad offsets and ids.
local dpl = require 'dpl'
local F = dpl.nn.functional

local function same_bits(a, b, what)
  assert.are.same(a:size(), b:size(), what .. ': shape')
  local ta, tb = a:reshape(-1):totable(), b:reshape(-1):totable()
  for i = 1, #ta do
    local x, y = ta[i], tb[i]
    if not (x == y and (x ~= 0 or 1 / x == 1 / y)) then
      error(('%s: element %d: %.17g vs %.17g'):format(what, i, x, y), 2)
    end
  end
end
-- the no-grad C pass and the composite (weight recording a gradient) on the same arguments
local function both(input, weight, offsets, opts)
  local fast = dpl.no_grad(function() return F.embedding_bag(input, weight, offsets, opts) end)
  local w = weight:detach():clone():requires_grad_()
  local o2 = opts and {} or nil
  if opts then for k, v in pairs(opts) do o2[k] = v end end
  if o2 and o2.per_sample_weights then o2.per_sample_weights = o2.per_sample_weights:detach() end
  local slow = F.embedding_bag(input, w, offsets, o2):detach()
  return fast, slow
end

describe('embedding_bag C pass against the composite', function()
  for _, dt in ipairs({ 'float32', 'float64' }) do
    for _, D in ipairs({ 64, 20, 80, 16, 3 }) do
      for _, mode in ipairs({ 'sum', 'mean' }) do
        it(('%s D=%d %s, 1-d with offsets'):format(dt, D, mode), function()
          dpl.manual_seed(D)
          local w = dpl.randn(50, D, { dtype = dt })
          local ids = dpl.randint(1, 51, { 40 })
          local offs = dpl.tensor({ 1, 4, 4, 12, 30, 41 }) -- an empty bag, a bag at the very end
          local a, b = both(ids, w, offs, { mode = mode })
          same_bits(a, b, 'plain')
          a, b = both(ids, w, offs, { mode = mode, padding_idx = ids[5]:item() })
          same_bits(a, b, 'padding_idx')
          a, b = both(ids:int(), w, offs:int(), { mode = mode, include_last_offset = true })
          same_bits(a, b, 'int32, include_last_offset')
          assert.are.same({ 5, D }, a:size())
          a, b = both(ids:view(8, 5), w, nil, { mode = mode })
          same_bits(a, b, '2-d input')
          if mode == 'sum' then
            local psw = dpl.randn(40, { dtype = dt })
            a, b = both(ids, w, offs, { mode = 'sum', per_sample_weights = psw })
            same_bits(a, b, 'per_sample_weights')
            a, b = both(ids, w, offs, { mode = 'sum', per_sample_weights = psw, padding_idx = ids[3]:item() })
            same_bits(a, b, 'per_sample_weights and padding_idx')
            a, b = both(ids:view(8, 5), w, nil, { mode = 'sum', per_sample_weights = psw:view(8, 5) })
            same_bits(a, b, '2-d per_sample_weights')
          end
        end)
      end
    end
  end

  it('the bench shape (4096 bags of 8 over 10k x 64) and a non-contiguous weight', function()
    dpl.manual_seed(9)
    local w = dpl.randn(10000, 64)
    local ids = dpl.randint(1, 10001, { 4096 * 8 })
    local offs = dpl.arange(0, 4096, { dtype = 'int64' }) * 8 + 1
    local a, b = both(ids, w, offs, { mode = 'mean' })
    same_bits(a, b, 'bench')
    local wt = dpl.randn(64, 300):t()
    a, b = both(ids:remainder(300):add(1), wt, offs, { mode = 'sum' })
    same_bits(a, b, 'transposed weight')
  end)

  it('offsets as a list, a last offset before the end, no bags, no ids', function()
    local w = dpl.randn(10, 16)
    local ids = dpl.tensor({ 1, 2, 3, 4, 5, 6 })
    local a, b = both(ids, w, { 1, 3 }, { mode = 'sum' })
    same_bits(a, b, 'list')
    a, b = both(ids, w, dpl.tensor({ 1, 3, 5 }), { mode = 'mean', include_last_offset = true })
    same_bits(a, b, 'last offset 5 of 7')
    local z = dpl.no_grad(function() return F.embedding_bag(ids, w, dpl.tensor({ 1 }), { include_last_offset = true }) end)
    assert.are.same({ 0, 16 }, z:size())
    z = dpl.no_grad(function() return F.embedding_bag(dpl.tensor({}, { dtype = 'int64' }), w, dpl.tensor({ 1, 1 })) end)
    assert.are.same({ 2, 16 }, z:size())
    assert.are.equal(0, z:abs():sum():item())
  end)

  it('bad offsets and ids: the messages of the general code', function()
    local w = dpl.randn(10, 16)
    local ids = dpl.tensor({ 1, 2, 3, 4 })
    local function msg(...)
      local args = { ... }
      local ok, e = pcall(function() return dpl.no_grad(function() return F.embedding_bag(unpack(args)) end) end)
      assert.is_false(ok)
      return tostring(e)
    end
    assert.matches('offsets%[1%] has to be 1', msg(ids, w, dpl.tensor({ 2, 3 })))
    assert.matches('offsets must be non%-decreasing', msg(ids, w, dpl.tensor({ 1, 3, 2 })))
    assert.matches('offsets must be non%-decreasing', msg(ids, w, dpl.tensor({ 1, 6 })))
    assert.matches('index 11 is out of range for a weight of 10 rows', msg(dpl.tensor({ 1, 11 }), w, dpl.tensor({ 1 })))
    assert.matches('index 0 is out of range', msg(dpl.tensor({ 0, 1 }), w, dpl.tensor({ 1 })))
    assert.matches('index 0 is out of range', msg(dpl.tensor({ { 0, 1 } }), w, nil, { mode = 'sum' }))
  end)
end)
