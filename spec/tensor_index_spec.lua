-- tensor_index_spec.lua: the index/scatter writes of dpl.tensor_index (scatter(_),
-- index_fill(_), index_copy(_), index_put(_), masked_scatter(_), put(_), fill_diagonal_)
-- against PyTorch 1.13 (spec/fixtures/index_ref.lua, written by gen_index_ref.py): values,
-- result dtypes and shapes for every dtype, negative dims and indices, non-contiguous
-- self / sources / indices, empty and 0-d tensors, gradients; then the option forms, every
-- error message, autograd's in-place rules (leaves, views, version counter), tensors in
-- GPU memory, simulated GPUs, numpy()'s message, and that no byte is leaked.
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local run = require 'spec.support.devices_run'
local raises = h.raises
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/index_ref.lua')

local function flatten(v, out)
  out = out or {}
  if type(v) ~= 'table' then out[#out + 1] = v return out end
  for i = 1, #v do flatten(v[i], out) end
  return out
end

-- a fixture tensor: the input (a transposed or narrowed view when spec.view) and its base
local function mk(spec)
  if spec == nil then return nil end
  local n = 1
  for _, s in ipairs(spec.shape) do n = n * s end
  local base
  if #spec.shape == 0 then base = dpl.tensor(spec.values, { dtype = spec.dtype })
  elseif n == 0 then base = dpl.zeros(spec.shape, { dtype = spec.dtype })
  else base = dpl.tensor(spec.values, { dtype = spec.dtype }) end
  assert.are.same(spec.shape, base:size())
  local t = base
  if spec.view == 't' then t = base:t()
  elseif type(spec.view) == 'table' then t = base:narrow(spec.view[2], spec.view[3], spec.view[4]) end
  if spec.view then assert.is_false(t:is_contiguous(), 'the view of the fixture should not be contiguous') end
  return t, base
end

local function same(got, exp, label)
  assert(dpl.tensor.is_tensor(got), label .. ': expected a tensor, got ' .. type(got))
  assert.are.equal(exp.dtype, got.dtype, label .. ': dtype')
  assert.are.same(exp.shape, got:size(), label .. ': shape')
  local g = flatten(got:totable())
  local e = flatten(exp.values)
  assert.are.equal(#e, #g, label .. ': element count')
  for i = 1, #e do
    local a, b = g[i], e[i]
    if type(b) == 'boolean' then
      assert(a == b, ('%s: element %d is %s, PyTorch says %s'):format(label, i, tostring(a), tostring(b)))
    else
      assert(math.abs(a - b) <= 1e-12 * (1 + math.abs(b)),
        ('%s: element %d is %.10g, PyTorch says %.10g'):format(label, i, a, b))
    end
  end
end

local function weights(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return dpl.arange(n, { dtype = 'float64' }):remainder(7):add(1):view(shape)
end

-- calls op (in place or not) as a method, or (module = true) as dpl.op(t, ...); options
-- positional, or (opts = true) as their table form
local function call(c, self, inputs, module, opts)
  local op = c.op == 'fill_diagonal' and 'fill_diagonal_' or (c.inplace and c.op .. '_' or c.op)
  local f = module and dpl[op] or self[op]
  local args
  if c.op == 'scatter' then
    local red = c.reduce
    if opts and red then red = { reduce = red } end
    args = { c.dim, inputs.index, inputs.src or c.value, red }
  elseif c.op == 'index_fill' then
    args = { c.dim, inputs.index, inputs.value_t or c.value }
  elseif c.op == 'index_copy' then
    args = { c.dim, inputs.index, inputs.source }
  elseif c.op == 'index_put' then
    local acc = c.accumulate
    if opts and acc ~= nil then acc = { accumulate = acc } end
    args = { inputs.indices, inputs.values, acc }
  elseif c.op == 'masked_scatter' then
    args = { inputs.mask, inputs.source }
  elseif c.op == 'put' then
    local acc = c.accumulate
    if opts and acc ~= nil then acc = { accumulate = acc } end
    args = { inputs.index, inputs.source, acc }
  elseif c.op == 'fill_diagonal' then
    local wrap = c.wrap
    if opts and wrap ~= nil then wrap = { wrap = wrap } end
    args = { c.value, wrap }
  end
  return f(self, unpack(args, 1, 4))
end

local function inputs_of(c)
  local ins = {}
  for _, k in ipairs({ 'index', 'src', 'value_t', 'source', 'values', 'mask' }) do ins[k] = mk(c[k]) end
  if c.indices then
    ins.indices = {}
    for i, s in ipairs(c.indices) do ins.indices[i] = mk(s) end
  end
  return ins
end

local function run_case(c, module, opts)
  local self, base = mk(c.self)
  local original = self:clone()
  local ins = inputs_of(c)
  local label = c.name .. (module and ' (dpl.' .. c.op .. ')' or '') .. (opts and ' (options table)' or '')
  local r = call(c, self, ins, module, opts)
  if c.inplace then
    assert.is_true(rawequal(r, self), label .. ': an in-place op returns self')
    same(self, c.expected, label)
    same(base, c.expected_base, label .. ' (the base of the view)')
  else
    assert.is_false(rawequal(r, self), label .. ': an out-of-place op returns a new tensor')
    same(r, c.expected, label)
    same(self, { values = original:totable(), shape = original:size(), dtype = original.dtype }, label .. ' (self unchanged)')
  end
end

describe('index/scatter writes against PyTorch', function()
  local by_op = {}
  for _, c in ipairs(ref) do
    by_op[c.op] = by_op[c.op] or {}
    table.insert(by_op[c.op], c)
  end
  for _, op in ipairs({ 'scatter', 'index_fill', 'index_copy', 'index_put', 'masked_scatter', 'put', 'fill_diagonal' }) do
    it(op .. ': values, dtypes and shapes (' .. #by_op[op] .. ' cases)', function()
      for i, c in ipairs(by_op[op]) do
        if not c.grads then run_case(c, i % 3 == 0, i % 2 == 0) end
      end
    end)
    it(op .. ': the in-place form writes into self what the out-of-place form returns', function()
      local n = 0
      for _, c in ipairs(by_op[op]) do
        local self = mk(c.self)
        if not c.grads and not c.inplace and op ~= 'fill_diagonal'
            and table.concat(c.expected.shape, ',') == table.concat(self:size(), ',') then
          local cc = {}
          for k, v in pairs(c) do cc[k] = v end
          cc.inplace = true
          local r = call(cc, self, inputs_of(c))
          assert.is_true(rawequal(r, self), c.name)
          same(self, c.expected, c.name .. ' (in place)')
          n = n + 1
        end
      end
      assert.is_true(n > 0 or op == 'fill_diagonal')
    end)
  end

  it('gradients equal PyTorch\'s (loss = sum(out * w))', function()
    local n = 0
    for _, c in ipairs(ref) do
      if c.grads then
        n = n + 1
        local self = mk(c.self):requires_grad_()
        local ins = inputs_of(c)
        local leaves = { self = self }
        for k in pairs(c.grads) do
          if k ~= 'self' then ins[k] = ins[k]:requires_grad_(); leaves[k] = ins[k] end
        end
        local out
        if c.op == 'fill_diagonal' then out = self:clone():fill_diagonal_(c.value)
        else out = call(c, self, ins) end
        assert.is_true(out.requires_grad, c.name)
        ;(out * weights(out:size())):sum():backward()
        for k, g in pairs(c.grads) do same(leaves[k].grad, g, c.name .. ': gradient of ' .. k) end
      end
    end
    assert.is_true(n >= 12, 'expected the gradient cases of every op, found ' .. n)
  end)
end)

describe('index/scatter writes: semantics beyond the fixture', function()
  it('are functions of the module and methods; none is a NotImplementedError stub any more', function()
    for _, k in ipairs({ 'scatter', 'scatter_', 'index_fill', 'index_fill_', 'index_copy', 'index_copy_', 'index_put',
      'index_put_', 'masked_scatter', 'masked_scatter_', 'put', 'put_', 'fill_diagonal_', 'scatter_add', 'scatter_add_' }) do
      assert.are.equal('function', type(dpl[k]), 'dpl.' .. k)
      assert.are.equal('function', type(dpl.tensor.methods[k]), 'method ' .. k)
    end
    local x = dpl.zeros(2, 2)
    assert.are.same({ { 0, 1 }, { 0, 0 } }, dpl.scatter_add(x, 2, dpl.tensor({ { 2 } }), dpl.ones(1, 1)):totable())
    assert.are.same({ { 5, 0 }, { 0, 5 } }, dpl.fill_diagonal_(x, 5):totable())
  end)

  it('accept index tables and int32 index tensors as index_select and gather do', function()
    local x = dpl.zeros(2, 3)
    assert.are.same({ { 0, 7, 0 }, { 0, 0, 7 } }, x:scatter(2, { { 2 }, { 3 } }, 7):totable())
    assert.are.same({ { 0, 7, 0 }, { 0, 0, 7 } }, x:scatter(2, dpl.tensor({ { 2 }, { 3 } }, { dtype = 'int32' }), 7):totable())
    assert.are.same({ { 0, 0, 1 }, { 0, 0, 1 } }, x:index_fill(2, 3, 1):totable())
    assert.are.same({ { 1, 0, 0 }, { 1, 0, 0 } }, x:index_copy(2, { 1 }, dpl.ones(2, 1)):totable())
    assert.are.same({ { 0, 0, 0 }, { 0, 9, 0 } }, x:index_put({ { 2 }, { 2 } }, 9):totable())
    assert.are.same({ { 0, 0, 0 }, { 0, 0, 4 } }, x:index_put({ 2, 3 }, 4):totable()) -- numbers: 0-d indices
    assert.are.same({ { 4, 4, 4 }, { 0, 0, 0 } }, x:index_put({ { true, false } }, 4):totable()) -- a mask
    assert.are.same({ { 0, 0, 0 }, { 0, 0, 3 } }, x:put({ -1 }, dpl.tensor({ 3 }):float()):totable())
    assert.are.same({ { 0, 0, 0 }, { 0, 0, 3 } }, x:put(dpl.tensor({ 6 }, { dtype = 'int32' }), dpl.tensor({ 3 }):float()):totable())
    assert.are.same({ { 0, 0, 0 }, { 0, 0, 0 } }, x:totable())
  end)

  it('index_copy_ takes negative indices as index_add_ does (PyTorch refuses them)', function()
    local x = dpl.zeros(2, 3)
    assert.are.same({ { 0, 0, 1 }, { 0, 0, 1 } }, x:index_copy(2, { -1 }, dpl.ones(2, 1)):totable())
    raises(function() x:index_copy(2, { -4 }, dpl.ones(2, 1)) end,
      'index_copy: index -4 is out of range for a dim of size 3 (expected 1..3, or -3..-1 from the end)')
  end)

  it('keep int64 values beyond 2^53 exact', function()
    local big = 2 ^ 62 + 4096
    local x = dpl.zeros(2, 2, { dtype = 'int64' })
    for _, r in ipairs({ x:scatter(1, { { 1, 2 } }, big), x:index_fill(1, { 1 }, big), x:index_put({ { 1 } }, big),
      x:clone():fill_diagonal_(big) }) do
      assert.are.equal(big, r[1][1]:item())
    end
  end)

  it('an overlapping source, index or mask is read before self is written', function()
    local x = dpl.arange(1, 7):view(2, 3)
    assert.are.same({ { 4, 5, 6 }, { 1, 2, 3 } }, x:clone():index_copy_(1, { 2, 1 }, x):totable())
    local y = dpl.arange(1, 7):view(2, 3)
    y:index_copy_(1, { 2, 1 }, y) -- source is self
    assert.are.same({ { 4, 5, 6 }, { 1, 2, 3 } }, y:totable())
    local z = dpl.tensor({ 1, 2, 3, 4 })
    z:put_(dpl.tensor({ 4, 3, 2, 1 }), z)
    assert.are.same({ 4, 3, 2, 1 }, z:totable())
    local w = dpl.tensor({ { 1, 2 }, { 3, 4 } })
    w:scatter_(1, dpl.tensor({ { 2, 1 }, { 1, 2 } }), w)
    assert.are.same({ { 3, 2 }, { 1, 4 } }, w:totable())
    local m = dpl.tensor({ 1.5, 2.5, 3.5 })
    m:masked_scatter_(dpl.tensor({ false, true, true }), m:narrow(1, 1, 2))
    assert.are.same({ 1.5, 1.5, 2.5 }, m:totable())
    local i = dpl.tensor({ 2, 1, 1 })
    i:index_fill_(1, i:narrow(1, 1, 2), 3) -- the index is (a view of) self
    assert.are.same({ 3, 3, 1 }, i:totable())
  end)
end)

local x = dpl.zeros(3, 4)
local error_cases
do
  local src = dpl.arange(1, 13):float():view(3, 4)
  local i11 = dpl.tensor({ { 1 } })
  error_cases = {
    -- scatter
    { function() return x:scatter(1, { { 1, 2 } }, src:double()) end,
      'RuntimeError: scatter: self and src must have the same dtype, got float32 (self) and float64 (src)' },
    { function() return x:scatter_(1, { 1, 2 }, src) end, 'RuntimeError: scatter_: index must have as many dims as self (2), got 1' },
    { function() return x:scatter(1, i11, dpl.ones(4)) end, 'RuntimeError: scatter: src must have as many dims as index (2), got 1' },
    { function() return x:scatter(3, i11, src) end, 'ValueError: scatter: dim 3 out of range (expected 1..2 or -2..-1 for a 2-d tensor)' },
    { function() return x:scatter(-3, i11, src) end, 'ValueError: scatter: dim -3 out of range' },
    { function() return x:scatter('a', i11, src) end, 'ValueError: scatter: dim must be an integer, got a' },
    { function() return x:scatter(1, dpl.tensor({ { 1.5 } }), src) end,
      'ValueError: scatter: expected an integer index tensor (int64 or int32, 1-based), got float32' },
    { function() return x:scatter(1, dpl.tensor({ { 1 } }, { dtype = 'uint8' }), src) end,
      'ValueError: scatter: expected an integer index tensor (int64 or int32, 1-based), got uint8' },
    { function() return x:scatter(1, 'i', src) end, 'ValueError: scatter: index must be a tensor (or a table) of integers, got string' },
    { function() return x:scatter(1, i11, src, 'sum') end, "ValueError: scatter: reduce must be 'add' or 'multiply', got 'sum'" },
    { function() return x:scatter(1, i11, src, 3) end, "ValueError: scatter: reduce must be 'add' or 'multiply', got number" },
    { function() return x:scatter(1, i11, src, { reduc = 'add' }) end,
      "ValueError: scatter: unknown option 'reduc' (did you mean 'reduce'?); accepted options: reduce" },
    { function() return x:scatter(1, i11, 'a') end, 'ValueError: scatter: value must be a number, got string' },
    { function() return x:scatter(1, i11) end, 'ValueError: scatter: expected a src tensor or a value (a number) after the index, got nil' },
    { function() return x:scatter(1, i11, dpl.ones(2)) end, 'RuntimeError: scatter: src must have as many dims as index (2), got 1' },
    { function() return x:scatter(1, dpl.ones(4, 5, { dtype = 'int64' }), src) end,
      'RuntimeError: scatter: index of shape [4, 5] must be no larger than self [3, 4] (but in the scatter dim) and than src [3, 4]' },
    { function() return x:scatter(1, dpl.ones(2, 4, { dtype = 'int64' }), dpl.ones(1, 4)) end,
      'RuntimeError: scatter: index of shape [2, 4] must be no larger than self [3, 4] (but in the scatter dim) and than src [1, 4]' },
    { function() return x:scatter(1, { { 4 } }, src) end, 'RuntimeError: scatter: index 4 is out of range for dim 1 of size 3 (expected 1..3)' },
    { function() return x:scatter(2, { { 0 } }, src) end, 'RuntimeError: scatter: index 0 is out of range for dim 2 of size 4 (expected 1..4)' },
    { function() return x:scatter(1, { { -1 } }, src) end, 'RuntimeError: scatter: index -1 is out of range for dim 1 of size 3 (expected 1..3)' },
    { function() return dpl.zeros(2, { dtype = 'uint8' }):scatter(1, { 1 }, 256) end,
      'ValueError: scatter: value 256 cannot be converted to uint8 without overflow' },
    { function() return dpl.zeros(2, { dtype = 'int32' }):scatter(1, { 1 }, 2 ^ 31) end,
      'ValueError: scatter: value 2147483648 cannot be converted to int32 without overflow' },
    { function() return dpl.tensor(1.5):scatter(2, { 1 }, 1) end, 'ValueError: scatter: dim 2 out of range: the tensor has no dims (0-d)' },
    { function() return dpl.scatter(3, 1, i11, src) end, 'ValueError: scatter: self must be a tensor, got number' },
    { function() return dpl.scatter_(nil, 1, i11, src) end, 'ValueError: scatter_: self must be a tensor, got nil' },
    { function() return dpl.zeros(1, 2):expand(3, 2):scatter_(1, i11, 1) end,
      'RuntimeError: scatter_: unsupported operation: more than one element of the written-to tensor refers to a single memory location' },
    -- index_fill
    { function() return x:index_fill(2, { 1, 5 }, 1) end, 'RuntimeError: index_fill: index 5 is out of range for dim 2 of size 4 (expected 1..4)' },
    { function() return x:index_fill_(2, { -5 }, 1) end,
      'ValueError: index_fill_: index -5 is out of range for a dim of size 4 (expected 1..4, or -4..-1 from the end)' },
    { function() return x:index_fill(2, { { 1 } }, 1) end, 'RuntimeError: index_fill: expected a 0-d or 1-d index, got 2 dims' },
    { function() return x:index_fill(2, { 1.5 }, 1) end,
      'ValueError: index_fill: expected an integer index tensor (int64 or int32, 1-based), got float32' },
    { function() return x:put({ 2.5 }, dpl.ones(1)) end, 'ValueError: put: expected an integer index tensor (int64 or int32, 1-based), got float32' },
    { function() return x:index_fill(2, { 1 }, dpl.ones(1)) end,
      'ValueError: index_fill: value must be a number or a 0-d tensor, got a tensor with 1 dims' },
    { function() return x:index_fill(2, { 1 }, 'x') end, 'ValueError: index_fill: value must be a number, got string' },
    { function() return x:index_fill(2, dpl.tensor({ true }), 1) end,
      'ValueError: index_fill: expected an integer index tensor (int64 or int32, 1-based), got bool' },
    { function() return x:index_fill(0, { 1 }, 1) end, 'ValueError: index_fill: dim 0 out of range (expected 1..2 or -2..-1 for a 2-d tensor)' },
    { function() return dpl.zeros(2, { dtype = 'int64' }):index_fill(1, { 1 }, 0 / 0) end,
      'ValueError: index_fill: value nan cannot be converted to int64 without overflow' },
    -- index_copy
    { function() return x:index_copy(2, { 1, 3 }, dpl.ones(3, 3)) end,
      "RuntimeError: index_copy: source of shape [3, 3] does not match self [3, 4] with the indexed dim's size replaced by the index length 2 (expected [3, 2])" },
    { function() return x:index_copy_(2, { 1, 3 }, dpl.ones(6)) end,
      "RuntimeError: index_copy_: source of shape [6] does not match self [3, 4] with the indexed dim's size replaced by the index length 2 (expected [3, 2])" },
    { function() return x:index_copy(2, { 1, 3 }, dpl.ones(3, 2, { dtype = 'float64' })) end,
      'RuntimeError: index_copy: self and source must have the same dtype, got float32 (self) and float64 (source)' },
    { function() return x:index_copy(2, { 1, 5 }, dpl.ones(3, 2)) end, 'RuntimeError: index_copy: index 5 is out of range for dim 2 of size 4 (expected 1..4)' },
    { function() return x:index_copy(2, { 1, 3 }, 5) end, 'ValueError: index_copy: source must be a tensor, got number' },
    { function() return x:index_copy(2, { { 1 } }, dpl.ones(3, 1)) end, 'RuntimeError: index_copy: expected a 0-d or 1-d index, got 2 dims' },
    -- index_put
    { function() return x:index_put({ { 1, 3 }, { 2, 4 }, { 1 } }, 1) end, 'ValueError: index_put: too many indices for a tensor of 2 dims (got 3)' },
    { function() return x:index_put({ x:gt(0), { 1 } }, 1) end,
      'ValueError: index_put: too many indices for a tensor of 2 dims (got 3)' },
    { function() return x:index_put({ { 1, 3, 2 }, { 2, 4 } }, 1) end,
      'ValueError: index_put: shape mismatch: the index tensors cannot be broadcast together (shapes [3], [2])' },
    { function() return x:index_put({ { 1, 3 }, { 2, 4 } }, dpl.ones(3)) end,
      'RuntimeError: index_put: shape mismatch: values of shape [3] cannot be broadcast to the indexing result of shape [2]' },
    { function() return x:index_put_({ { 1, 4 } }, 1) end, 'RuntimeError: index_put_: index 4 is out of range for dim 1 of size 3 (expected 1..3)' },
    { function() return x:index_put({ { 1 }, { -5 } }, 1) end,
      'ValueError: index_put: index -5 is out of range for a dim of size 4 (expected 1..4, or -4..-1 from the end)' },
    { function() return x:index_put({ { 1, 3 } }, dpl.ones(4, { dtype = 'float64' })) end,
      'RuntimeError: index_put: self and values must have the same dtype, got float32 (self) and float64 (values)' },
    { function() return x:index_put({}, 1) end, 'ValueError: index_put: indices must be a non-empty list of index tensors' },
    { function() return x:index_put(5, 1) end, 'ValueError: index_put: indices must be a list of index tensors, got number' },
    { function() return x:index_put({ [2] = dpl.tensor({ 1 }) }, 1) end,
      'ValueError: index_put: indices must be a list (keys 1..n) of index tensors, got a table with key 2' },
    { function() return x:index_put({ 'a' }, 1) end,
      'ValueError: index_put: indices[1] must be a tensor of indices (int64, int32) or a mask (bool, uint8), got string' },
    { function() return x:index_put({ dpl.tensor({ true, false }) }, 1) end,
      'ValueError: index_put: the mask indices[1] of shape [2] does not match the shape [3] of the dims 1..1 of self [3, 4]' },
    { function() return x:index_put({ dpl.tensor(true) }, 1) end,
      'NotImplementedError: index_put: a 0-d mask (indices[1]) is not implemented' },
    { function() return x:index_put({ dpl.tensor({ 1.5 }) }, 1) end,
      'ValueError: index_put: indices[1] must be an integer (int64, int32) or boolean (bool, uint8) tensor, got float32' },
    { function() return x:index_put({ { 1 } }, 1, 'yes') end, 'ValueError: index_put: accumulate must be true or false, got string' },
    { function() return x:index_put({ { 1 } }, 1, { acc = true }) end,
      "ValueError: index_put: unknown option 'acc'; accepted options: accumulate" },
    { function() return x:index_put({ { 1 } }, 'v') end, 'ValueError: index_put: values must be a number, got string' },
    { function() return dpl.tensor(1.5):index_put({ { 1 } }, 1) end, 'ValueError: index_put: too many indices for a tensor of 0 dims (got 1)' },
    -- masked_scatter
    { function() return x:masked_scatter(x:ge(0), dpl.ones(3)) end,
      'RuntimeError: masked_scatter: source has 3 elements, fewer than the 12 true elements of the mask' },
    { function() return x:masked_scatter(x:ge(0):float(), dpl.ones(12)) end, 'ValueError: masked_scatter: mask must be a bool tensor, got float32' },
    { function() return x:masked_scatter_(x:ge(0), dpl.ones(12, { dtype = 'int64' })) end,
      'RuntimeError: masked_scatter_: self and source must have the same dtype, got float32 (self) and int64 (source)' },
    { function() return x:clone():masked_scatter_(dpl.ones(2, 3, 4):bool(), dpl.ones(24)) end,
      "RuntimeError: masked_scatter_: mask of shape [2, 3, 4] cannot be broadcast to self's shape [3, 4]" },
    { function() return x:masked_scatter(dpl.ones(2):bool(), dpl.ones(24)) end,
      'ValueError: masked_scatter: self of shape [3, 4] and mask of shape [2] cannot be broadcast together' },
    { function() return x:masked_scatter({ true }, dpl.ones(24)) end, 'ValueError: masked_scatter: mask must be a tensor, got table' },
    { function() return x:masked_scatter(x:ge(0), 1) end, 'ValueError: masked_scatter: source must be a tensor, got number' },
    -- put
    { function() return x:put({ 13 }, dpl.ones(1)) end, 'RuntimeError: put: index 13 is out of range for self with 12 elements (expected 1..12)' },
    { function() return x:put_({ 0 }, dpl.ones(1)) end, 'RuntimeError: put_: index 0 is out of range for self with 12 elements (expected 1..12)' },
    { function() return x:put({ -13 }, dpl.ones(1)) end,
      'ValueError: put: index -13 is out of range for self with 12 elements (expected 1..12, or -12..-1 from the end)' },
    { function() return x:put({ 1, 2 }, dpl.ones(1)) end,
      'RuntimeError: put: source and index must have the same number of elements, got 1 (source) and 2 (index)' },
    { function() return x:put({ 1 }, dpl.ones(1, { dtype = 'int32' })) end,
      'RuntimeError: put: self and source must have the same dtype, got float32 (self) and int32 (source)' },
    { function() return x:put({ 1 }, 5) end, 'ValueError: put: source must be a tensor, got number' },
    { function() return x:put(dpl.tensor({ 1.5 }), dpl.ones(1)) end,
      'ValueError: put: expected an integer index tensor (int64 or int32, 1-based), got float32' },
    { function() return x:put({ 1 }, dpl.ones(1), 1) end, 'ValueError: put: accumulate must be true or false, got number' },
    { function() return dpl.zeros(0):put({ 1 }, dpl.ones(1)) end, 'RuntimeError: put: cannot put elements into an empty tensor' },
    -- fill_diagonal_
    { function() return dpl.zeros(3):fill_diagonal_(1) end, 'RuntimeError: fill_diagonal_: expected a tensor with at least 2 dims, got 1' },
    { function() return dpl.zeros(2, 3, 2):fill_diagonal_(1) end,
      'RuntimeError: fill_diagonal_: all dims of a tensor with more than 2 dims must have the same size, got [2, 3, 2]' },
    { function() return dpl.zeros(2, 2, { dtype = 'uint8' }):fill_diagonal_(300) end,
      'ValueError: fill_diagonal_: value 300 cannot be converted to uint8 without overflow' },
    { function() return dpl.zeros(2, 2):fill_diagonal_(1e39) end,
      'ValueError: fill_diagonal_: value 1e+39 cannot be converted to float32 without overflow' },
    { function() return dpl.zeros(2, 2, { dtype = 'float16' }):fill_diagonal_(70000) end,
      'ValueError: fill_diagonal_: value 70000 cannot be converted to float16 without overflow' },
    { function() return dpl.zeros(2, 2):fill_diagonal_(1, 'x') end, 'ValueError: fill_diagonal_: wrap must be true or false, got string' },
    { function() return dpl.zeros(2, 2):fill_diagonal_(1, { wrp = true }) end,
      "ValueError: fill_diagonal_: unknown option 'wrp' (did you mean 'wrap'?); accepted options: wrap" },
    { function() return dpl.zeros(2, 2):fill_diagonal_(dpl.ones(2)) end,
      'ValueError: fill_diagonal_: fill_value must be a number or a 0-d tensor, got a tensor with 1 dims' },
    { function() return dpl.zeros(2, 2):fill_diagonal_() end, 'ValueError: fill_diagonal_: fill_value must be a number, got nil' },
    { function() return dpl.zeros(1, 2):expand(2, 2):fill_diagonal_(1) end,
      'RuntimeError: fill_diagonal_: unsupported operation: more than one element of the written-to tensor refers to a single memory location' },
    -- a freed tensor
    { function() local y = dpl.zeros(2, 2) y:free() return y:index_fill_(1, { 1 }, 1) end, 'index_fill_: self was freed with :free()' },
  }
end

describe('index/scatter writes: errors name the op, the expected and the received value', function()
  it('for every op (' .. #error_cases .. ' cases)', function()
    for _, c in ipairs(error_cases) do raises(c[1], c[2]) end
    assert.are.same({ { 0, 0, 0, 0 }, { 0, 0, 0, 0 }, { 0, 0, 0, 0 } }, x:totable()) -- nothing was written
  end)

  it('numpy() says what to use instead', function()
    raises(function() return x:numpy() end, 'NotImplementedError: tensor:numpy() is not available in dplhost: there is no NumPy in Lua')
    raises(function() return x:numpy() end, 't:totable()')
    raises(function() return x:numpy() end, 'data_ptr()')
  end)
end)

describe('index/scatter writes: autograd', function()
  local function D(t) return dpl.tensor(t, { dtype = 'float64' }):requires_grad_() end
  local function R(...) return dpl.randn({ ... }, { dtype = 'float64' }):requires_grad_() end
  local gradcheck = dpl.autograd.gradcheck

  it('gradcheck: every op and form, also where PyTorch 1.13 has no gradient or a wrong one', function()
    dpl.manual_seed(3)
    local a, s = R(3, 4), R(3, 4)
    local idx = dpl.tensor({ { 1, 2, 3, 1 } })
    assert.is_true(gradcheck(function(a, s) return a:scatter(1, idx, s) end, { a, s })) -- src larger than index
    assert.is_true(gradcheck(function(a, s) return a:scatter(1, { { 3, 1 }, { 1, 2 } }, s, 'add') end, { a, s }))
    assert.is_true(gradcheck(function(a) return a:scatter(2, { { 4 }, { 1 }, { 2 } }, 1.5) end, { a }))
    assert.is_true(gradcheck(function(a) return a:scatter(2, { { 4 }, { 1 }, { 2 } }, 1.5, { reduce = 'add' }) end, { a }))
    assert.is_true(gradcheck(function(a, v) return a:scatter(1, { 1 }, v) end, { D(2.5), D({ 3 }) })) -- 0-d self
    assert.is_true(gradcheck(function(a, v) return a:scatter(1, { 2 }, v) end, { R(3), D(4) })) -- 0-d src
    assert.is_true(gradcheck(function(a, v) return a:index_fill(-1, { 1, 3, 1 }, v) end, { a, D(2) }))
    assert.is_true(gradcheck(function(a, v) return a:index_fill(1, { 1 }, v) end, { D(2.5), D(1) }))
    assert.is_true(gradcheck(function(a, v) return a:index_copy(2, { 4, 2 }, v) end, { a, R(3, 2) }))
    assert.is_true(gradcheck(function(a, v) return a:index_copy(1, { 1 }, v) end, { D(2.5), D(1) }))
    assert.is_true(gradcheck(function(a, v) return a:index_put({ { 1, 1, 3 }, { 2, 2, -1 } }, v, true) end, { a, R(3) }))
    assert.is_true(gradcheck(function(a, v) return a:index_put({ { 1, 3 } }, v) end, { a, R(2, 1) }))
    assert.is_true(gradcheck(function(a, v) return a:index_put({ a:gt(0) }, v) end, { a, D(0.5) }))
    assert.is_true(gradcheck(function(a, v) return a:masked_scatter(a:gt(0), v) end, { a, R(13) }))
    assert.is_true(gradcheck(function(a, v) return a:masked_scatter(dpl.ones(2, 4):bool(), v) end, { R(4), R(8) }))
    assert.is_true(gradcheck(function(a, v) return a:put({ 1, 1, -1 }, v, true) end, { a, R(3) }))
    assert.is_true(gradcheck(function(a, v) return a:put({ { 1, 5 }, { -1, 2 } }, v) end, { a, R(4) }))
    assert.is_true(gradcheck(function(a) return a:clone():fill_diagonal_(3, true) end, { R(7, 3) }))
  end)

  local ops = { -- name, its arguments after self given a source v, v
    { 'scatter', function(v) return { 1, { { 2, 1, 3 } }, v } end, { 1, 3 } },
    { 'index_fill', function(v) return { 2, { 3, 1 }, v } end, {} },
    { 'index_copy', function(v) return { 1, { 3 }, v } end, { 1, 3 } },
    { 'index_put', function(v) return { { { 1, 3 }, { 2, 2 } }, v, true } end, { 2 } },
    { 'masked_scatter', function(v) return { dpl.tensor({ { true, false, true } }), v } end, { 7 } },
    { 'put', function(v) return { { 1, 9, 1 }, v } end, { 3 } },
  }

  it('in place on a tensor with history: the gradients of the out-of-place form', function()
    local w = weights({ 3, 3 })
    for _, o in ipairs(ops) do
      local name, args = o[1], o[2]
      local x, v = R(3, 3), R(unpack(o[3]))
      local y1 = x * 2
      ;(y1[name](y1, unpack(args(v))) * w):sum():backward()
      local gx, gv = x.grad, v.grad
      x.grad, v.grad = nil, nil
      local y2 = x * 2
      assert.is_true(rawequal(y2, y2[name .. '_'](y2, unpack(args(v)))), name)
      assert.are.equal(name .. '_', y2.grad_fn.name)
      ;(y2 * w):sum():backward()
      h.near(x.grad, gx)
      h.near(v.grad, gv)
    end
    local x = R(3, 3)
    local y = x * 2
    y:fill_diagonal_(1)
    ;(y * w):sum():backward()
    h.near(x.grad, (w * 2):fill_diagonal_(0))
  end)

  it('in place on a view of a tensor with history: the gradient goes through the base', function()
    local x = R(3, 3)
    local y = x * 1
    y:narrow(1, 1, 2):index_fill_(2, { 1 }, 0)
    y:t():scatter_(1, { { 3 } }, 5) -- y[1][3]
    y:sum():backward()
    h.near(x.grad, { { 0, 1, 0 }, { 0, 1, 1 }, { 1, 1, 1 } })
  end)

  it('a source that requires grad makes the result require grad (self does not)', function()
    local v = R(2)
    for _, r in ipairs({ dpl.zeros(3, { dtype = 'float64' }):index_put({ { 1, 3 } }, v),
      dpl.zeros(3, { dtype = 'float64' }):put_({ 1, 3 }, v), dpl.zeros(3, { dtype = 'float64' }):masked_scatter_(dpl.tensor({ true, false, true }), v),
      dpl.zeros(3, { dtype = 'float64' }):scatter_(1, { 2, 3 }, v), dpl.zeros(3, { dtype = 'float64' }):index_copy(1, { 2, 3 }, v) }) do
      assert.is_true(r.requires_grad)
      r:sum():backward()
    end
    h.near(v.grad, { 5, 5 })
    local n = D(1.5)
    local r = dpl.zeros(3, { dtype = 'float64' }):index_fill_(1, { 1, 3 }, n)
    assert.is_true(r.requires_grad)
    r:sum():backward()
    h.near(n.grad, 2)
  end)

  it('in place on a leaf (or a view of one) that requires grad is an error; under no_grad it is fine', function()
    for _, o in ipairs(ops) do
      local name, args = o[1] .. '_', o[2]
      local v = dpl.randn(unpack(o[3])):double()
      raises(function() R(3, 3)[name](R(3, 3), unpack(args(v))) end,
        name .. ': a leaf tensor that requires grad is being used in an in-place operation')
      local l = R(3, 3)
      raises(function() local t = l:t() t[name](t, unpack(args(v))) end,
        name .. ': a view of a leaf tensor that requires grad is being used in an in-place operation')
      dpl.no_grad(function() l[name](l, unpack(args(v))) end)
      assert.is_true(l.is_leaf and l.requires_grad)
    end
    raises(function() R(2, 2):fill_diagonal_(1) end, 'fill_diagonal_: a leaf tensor that requires grad is being used in an in-place operation')
  end)

  it('in place bumps the version counter: a tensor saved for backward was modified', function()
    for _, o in ipairs(ops) do
      local name, args = o[1] .. '_', o[2]
      local x = R(3, 3)
      local y = x * 1
      local z = y * y -- saves y
      y[name](y, unpack(args(dpl.randn(unpack(o[3])):double())))
      raises(function() z:sum():backward() end, '(last modified by ' .. name .. ')')
    end
    local x = R(3, 3)
    local y = x * 1
    local z = y * y
    y:fill_diagonal_(0)
    raises(function() z:sum():backward() end, 'saved by mul is at version 1; expected version 0 instead (last modified by fill_diagonal_)')
  end)

  it("reduce='multiply' has no gradient (as in PyTorch 1.13): backward says so", function()
    local a = R(3)
    local out = (a * 1):scatter(1, { 2 }, 2, 'multiply')
    raises(function() out:sum():backward() end, "scatter_: the gradient of reduce='multiply' is not implemented")
    local ok = pcall(function() (a * 1):scatter(1, { 2 }, 2, 'add'):sum():backward() end)
    assert.is_true(ok)
  end)
end)

describe('index/scatter writes: devices', function()
  -- marks a CPU tensor's view as GPU memory (the devmem flag) in a process without the CUDA plugin
  local fake_devmem = [[
local ffi = require 'ffi'
local bit = require 'bit'
local function devmem(t) local v = t:view(t:size()) v._flags = bit.bor(v._flags, 2) return v end
local function undo(v) v._flags = bit.band(v._flags, bit.bnot(2)) end
local function try(f) local v = {} local ok, e = pcall(f, v) for _, t in ipairs(v) do undo(t) end if ok then return 'no error' end error(e, 0) end
dpl.C.dpl_proc_setenv('DPL_CUDA_PLUGIN', 'off')
]]
  it('a tensor in GPU memory: "<op>: not implemented on cuda", never a crash (Lua and C)', function()
    local function on_gpu(expr) return 'try(function(v) local x = devmem(dpl.zeros(3, 4)) v[1] = x ' .. expr .. ' end)' end
    local function gpu_arg(expr)
      return 'try(function(v) local x = dpl.zeros(3, 4) local g = devmem(dpl.ones(3, 4)) v[1] = g ' .. expr .. ' end)'
    end
    local nic = 'not implemented on cuda (self is on cuda:0; move it with :to("cpu"))'
    local nip = 'not implemented on cuda (the CUDA plugin is not loaded)' -- the ops that run on cuda
    local nipc = 'err NotImplementedError: to: ' .. nip -- their out-of-place forms: the clone fails first
    run.check(nil, {
      { on_gpu('return x:scatter_(1, {{1}}, 2)'), 'err NotImplementedError: scatter_: ' .. nip },
      { on_gpu('return x:scatter(1, {{1}}, 2)'), nipc },
      { on_gpu('return x:index_fill_(1, {1}, 2)'), 'err NotImplementedError: index_fill_: ' .. nip },
      { on_gpu('return x:index_fill(1, {1}, 2)'), nipc },
      { on_gpu('return x:index_copy_(1, {1}, dpl.ones(1, 4))'), 'err NotImplementedError: index_copy_: ' .. nip },
      { on_gpu('return x:index_copy(1, {1}, dpl.ones(1, 4))'), nipc },
      { on_gpu('return x:index_put_({{1}}, 2)'), 'err NotImplementedError: index_put_: ' .. nip },
      { on_gpu('return x:index_put({{1}}, 2)'), nipc },
      { on_gpu('return x:masked_scatter_(dpl.ones(3, 4):bool(), dpl.ones(12))'), 'err NotImplementedError: masked_scatter_: ' .. nip },
      { on_gpu('return x:masked_scatter(dpl.ones(3, 4):bool(), dpl.ones(12))'), nipc },
      { on_gpu('return x:put_({1}, dpl.ones(1))'), 'err NotImplementedError: put_: ' .. nip },
      { on_gpu('return x:put({1}, dpl.ones(1))'), nipc },
      { on_gpu('return x:fill_diagonal_(1)'), 'err NotImplementedError: fill_diagonal_: ' .. nip },
      { gpu_arg('return x:scatter_(1, {{1}}, g)'), 'err NotImplementedError: scatter_: not implemented on cuda (src is on cuda:0' },
      { gpu_arg('return x:index_copy_(1, {1}, g:narrow(1, 1, 1))'), 'err index_copy_: not implemented on cuda (source is on cuda:0' },
      { 'try(function(v) local g = devmem(dpl.ones(1, {dtype = "int64"})) v[1] = g return dpl.zeros(2):index_put_({g}, 1) end)',
        'err index_put_: not implemented on cuda (an index is on cuda:0' },
      { 'try(function(v) local g = devmem(dpl.ones(1, {dtype = "int64"})) v[1] = g return dpl.zeros(2):put_(g, dpl.ones(1)) end)',
        'err put_: not implemented on cuda (index is on cuda:0' },
      { 'try(function(v) local g = devmem(dpl.ones(1, {dtype = "int64"})) v[1] = g return dpl.zeros(2):index_fill_(1, g, 1) end)',
        'err index_fill_: not implemented on cuda (index is on cuda:0' },
      { gpu_arg('return x:index_put_({{1}}, g[1])'), 'err index_put_: not implemented on cuda (values is on cuda:0' },
      { 'try(function(v) local g = devmem(dpl.ones(3, 4):bool()) v[1] = g return dpl.zeros(3, 4):masked_scatter_(g, dpl.ones(12)) end)',
        'err masked_scatter_: not implemented on cuda (mask is on cuda:0' },
      { gpu_arg('return x:put_({1}, g:view(-1):narrow(1, 1, 1))'), 'err put_: not implemented on cuda (source is on cuda:0' },
      { gpu_arg('return x:index_fill_(1, {1}, g[1][1])'), 'err index_fill_: not implemented on cuda (value is on cuda:0' },
      -- the C guard itself
      { '(function() local x = devmem(dpl.zeros(2, 2)) local st = dpl.C.dpl_fill_diagonal_(x, dpl.tensor(1.0), 0) undo(x) '
        .. 'return st .. " " .. ffi.string(dpl.C.dpl_last_error()) end)()',
        'ok "-4 fill_diagonal_: not implemented on cuda (the CUDA plugin is not loaded)"' },
      { '(function() local x = devmem(dpl.zeros(2, 2)) local st = dpl.C.dpl_scatter_(x, 0, dpl.zeros(1, 1, {dtype = "int64"}), '
        .. 'dpl.tensor(1.0), 0) undo(x) return st end)()', 'ok -4' },
    }, { setup = fake_devmem })
  end)

  it('simulated GPUs (host memory) run them; tensors on two devices are an error', function()
    run.check(1, {
      { 'dpl.zeros(2, 2, {device = "cuda:0"}):index_fill(1, {1}, 3):totable()', 'ok {{3, 3}, {0, 0}}' },
      { 'tostring(dpl.zeros(2, 2, {device = "cuda:0"}):index_put({{2}, {1}}, 3).device)', 'ok "cuda:0"' },
      { 'dpl.zeros(2, 2, {device = "cuda:0"}):put({-1}, dpl.ones(1, {device = "cuda:0"})):totable()', 'ok {{0, 0}, {0, 1}}' },
      { 'dpl.zeros(2, 2, {device = "cuda:0"}):scatter(1, {{2, 1}}, 4):totable()', 'ok {{0, 4}, {4, 0}}' },
      { 'dpl.zeros(2, 2, {device = "cuda:0"}):fill_diagonal_(7):totable()', 'ok {{7, 0}, {0, 7}}' },
      { 'dpl.zeros(2, 2, {device = "cuda:0"}):scatter(1, dpl.tensor({{1}}), 2)',
        'err scatter: expected all tensors on the same device, got cuda:0 and cpu' },
      { 'dpl.zeros(2, 2, {device = "cuda:0"}):index_copy_(1, {1}, dpl.ones(1, 2))',
        'err index_copy_: expected all tensors on the same device, got cuda:0 and cpu' },
      { 'dpl.zeros(2, 2, {device = "cuda:0"}):masked_scatter(dpl.ones(2, 2, {device = "cuda:0"}):bool(), dpl.ones(4))',
        'err masked_scatter: expected all tensors on the same device, got cuda:0 and cpu' },
    })
  end)
end)

describe('index/scatter writes: memory', function()
  it('returns every byte after collectgarbage(): results, temporaries, gradients, errors', function()
    local before = h.settle_memory()
    for _ = 1, 3 do
      for _, c in ipairs(ref) do
        if not c.grads then run_case(c) end
      end
      for _, c in ipairs(error_cases) do pcall(c[1]) end
      local a, v = dpl.randn(3, 4, { dtype = 'float64' }):requires_grad_(), dpl.randn(3, { dtype = 'float64' }):requires_grad_()
      local y = a * 1
      y:index_put_({ { 1, 2, 3 }, { 1, 2, 3 } }, v, true):masked_scatter_(y:gt(0), dpl.ones(12, { dtype = 'float64' }))
      y:scatter(1, { { 1 } }, 1):index_fill(2, { 2 }, 0):put({ 1 }, v:narrow(1, 1, 1)):sum():backward()
      a, v, y = nil, nil, nil
    end
    local after = h.settle_memory()
    assert(after.current_bytes <= before.current_bytes, ('%d bytes leaked'):format(after.current_bytes - before.current_bytes))
    assert(after.live_storages <= before.live_storages, ('%d storages leaked'):format(after.live_storages - before.live_storages))
  end)
end)

-- Cases found by the randomized differential test against PyTorch 1.13
-- (scripts/difftest/difftest.py); torch's behaviour inline.
describe('index writes: differential test findings', function()
  it("a fraction (or a floating 0-d tensor's value) for an integer self follows PyTorch's rule for floats", function()
    local t = dpl.zeros(3, { dtype = 'uint8' })
    -- torch: -2.5, -0.5, 255.5 and a tensor(-2.8) overflow uint8; -3 and tensor(-3) wrap to 253
    for _, v in ipairs({ -2.5, -0.5, 255.5, dpl.tensor(-2.8) }) do
      h.raises(function() return t:clone():index_fill_(1, { 1 }, v) end, 'cannot be converted to uint8 without overflow')
    end
    h.raises(function() return t:clone():index_fill(1, { 1 }, dpl.tensor(300)) end, 'without overflow')
    assert.are.same({ 253, 0, 0 }, t:clone():index_fill_(1, { 1 }, -3):totable())
    assert.are.same({ 253, 0, 0 }, t:clone():index_fill_(1, { 1 }, dpl.tensor(-3)):totable())
    assert.are.same({ 7, 0, 0 }, t:clone():index_fill_(1, { 1 }, 7.0):totable())
    h.raises(function() return t:clone():scatter_(1, dpl.tensor({ 1 }), -0.5) end, 'without overflow')
    h.raises(function() return dpl.zeros(2, { dtype = 'int32' }):index_fill(1, { 1 }, 2.5e9) end, 'int32 without overflow')
  end)
end)

describe('index writes: differential test findings (floating self)', function()
  it("index_fill checks a 0-d tensor value against a floating self's range too, as PyTorch", function()
    h.raises(function() return dpl.zeros(1, { dtype = 'float16' }):index_fill_(1, { 1 }, dpl.tensor(199551495, { dtype = 'int32' })) end,
      'cannot be converted to float16 without overflow')
    assert.are.same({ 7 }, dpl.zeros(1, { dtype = 'float16' }):index_fill_(1, { 1 }, dpl.tensor(7)):totable())
    assert.are.same({ 1, 0 }, dpl.zeros(2, { dtype = 'uint8' }):index_fill_(1, { 1 }, dpl.tensor(true)):totable())
  end)
end)
