-- tensor_shape_spec.lua: the shape group of tensor methods (dpl.tensor_shape and
-- src/tensor/dpl_tensor_scan.c): cumsum, cumprod, cummax, cummin, flip, fliplr, flipud,
-- roll, rot90, repeat/tile, repeat_interleave, chunk, split, unbind, tril/triu (and in
-- place), diag, diagonal, trace, movedim/moveaxis, swapaxes/swapdims, unfold, sum_to_size,
-- new_*, type_as, take. Values, dtypes, shapes and gradients against PyTorch 1.13
-- (spec/fixtures/shape_ref.lua, from gen_shape_ref.py); views sharing storage; every
-- error path; device tensors; memory returned.
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local run = require 'spec.support.devices_run'
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/shape_ref.lua')

local is_tensor = dpl.tensor.is_tensor

-- a fixture tensor (a fresh leaf, requiring grad when asked and floating)
local function mk(spec, grad)
  local t = dpl.tensor(spec.values, { dtype = spec.dtype }):view(spec.shape):clone()
  if grad and t:is_floating_point() then t:requires_grad_() end
  return t
end

local TOL = { float64 = 1e-12, float32 = 2e-6, float16 = 1e-3, bfloat16 = 1e-2 }
local function check(got, exp, label)
  assert(is_tensor(got), label .. ': expected a tensor, got ' .. type(got))
  assert.are.same(exp.shape, got.shape, label .. ': shape')
  assert.are.equal(exp.dtype, got.dtype, label .. ': dtype')
  local g = got:reshape(-1):totable()
  assert.are.equal(#exp.values, #g, label .. ': number of elements')
  local tol = TOL[exp.dtype] or 0
  for i, e in ipairs(exp.values) do
    local a = g[i]
    if type(e) == 'boolean' then
      assert(a == e, ('%s: element %d is %s, PyTorch says %s'):format(label, i, tostring(a), tostring(e)))
    elseif e ~= e then
      assert(a ~= a, ('%s: element %d is %s, PyTorch says nan'):format(label, i, tostring(a)))
    else
      assert(math.abs(a - e) <= tol * (1 + math.abs(e)),
        ('%s: element %d is %.17g, PyTorch says %.17g'):format(label, i, a, e))
    end
  end
end

-- the case's function: its results as a list (a list result, as chunk's, is its elements)
local function outputs(c, ins)
  local fn = assert(load('local dpl = ... return ' .. c.fn, c.name))(dpl)
  local r, outs = { fn(unpack(ins)) }, {}
  for _, v in ipairs(r) do
    if type(v) == 'table' then
      for _, e in ipairs(v) do outs[#outs + 1] = e end
    else
      outs[#outs + 1] = v
    end
  end
  return outs
end

describe('shape ops against PyTorch', function()
  for _, c in ipairs(ref) do
    it(c.name, function()
      local ins = {}
      for i, s in ipairs(c.inputs) do ins[i] = mk(s, c.grads ~= nil) end
      local outs = outputs(c, ins)
      assert.are.equal(#c.expected, #outs, c.name .. ': number of outputs')
      for k, e in ipairs(c.expected) do check(outs[k], e, c.name .. ': output ' .. k) end
      if c.grads then
        local loss
        for _, o in ipairs(outs) do
          if o:is_floating_point() then
            local w = dpl.arange(o:numel()):double():cos():view(o:size())
            local l = (o * w):sum()
            loss = loss and loss + l or l
          end
        end
        loss:backward()
        local k = 0
        for _, x in ipairs(ins) do
          if x.requires_grad then
            k = k + 1
            check(x.grad, c.grads[k], c.name .. ': gradient of input ' .. k)
          end
        end
        assert.are.equal(#c.grads, k, c.name .. ': number of gradients')
      end
    end)
  end

  it('covers every method of the group', function()
    local seen = {}
    for _, c in ipairs(ref) do
      for name in c.fn:gmatch('[:%.]([%w_]+)%(') do seen[name] = true end
      for name in c.fn:gmatch("%['([%w_]+)'%]") do seen[name] = true end
    end
    for _, name in ipairs({ 'cumsum', 'cumprod', 'cummax', 'cummin', 'flip', 'fliplr', 'flipud', 'roll', 'rot90',
      'repeat', 'tile', 'repeat_interleave', 'chunk', 'split', 'unbind', 'tril', 'triu', 'tril_', 'triu_', 'diag',
      'diagonal', 'trace', 'movedim', 'moveaxis', 'swapaxes', 'swapdims', 'unfold', 'sum_to_size', 'new_zeros',
      'new_ones', 'new_full', 'new_empty', 'new_tensor', 'type_as', 'take' }) do
      assert(seen[name], name .. ' has no PyTorch case')
    end
  end)
end)

describe('shape ops: methods and functions', function()
  local names = { 'cumsum', 'cumprod', 'cummax', 'cummin', 'flip', 'fliplr', 'flipud', 'roll', 'rot90', 'repeat',
    'tile', 'repeat_interleave', 'chunk', 'split', 'unbind', 'tril', 'triu', 'tril_', 'triu_', 'diag', 'diagonal',
    'trace', 'movedim', 'moveaxis', 'swapaxes', 'swapdims', 'unfold', 'sum_to_size', 'new_zeros', 'new_ones',
    'new_full', 'new_empty', 'new_tensor', 'type_as', 'take' }

  it('exist as t:name(...) and dpl.name(t, ...), and are no longer NotImplementedError', function()
    local t = dpl.zeros(2, 2)
    local missing = debug.getregistry()['dpl.tensor.state'].missing
    for _, name in ipairs(names) do
      assert.are.equal('function', type(t[name]), name)
      assert.are.equal('function', type(dpl[name]), 'dpl.' .. name)
      assert.is_nil(missing[name], name .. ' is still in the missing list')
    end
    assert.are.same({ 2, 2 }, dpl.tril(dpl.ones(2, 2)).shape)
    assert.are.same({ { 1, 2 }, { 1, 2 } }, dpl['repeat'](dpl.tensor({ 1, 2 }), 2, 1):totable())
    assert.are.same({ { 1, 2 }, { 1, 2 } }, dpl.tensor({ 1, 2 }):tile(2, 1):totable())
  end)

  it('cumsum: big tensors (many chunks, threads) match a sum of slices, whatever the thread count', function()
    dpl.manual_seed(3)
    local x = dpl.randint(-3, 4, { 300, 700 }):double()
    local function slices(d)
      local n = x:size(d)
      local acc, parts = nil, {}
      for i = 1, n do
        local s = x:narrow(d, i, 1)
        acc = acc and acc + s or s
        parts[i] = acc
      end
      return dpl.cat(parts, d)
    end
    local threads = dpl.get_num_threads()
    for _, nt in ipairs({ 1, 2 }) do
      dpl.set_num_threads(nt)
      assert.is_true(x:cumsum(1):eq(slices(1)):all():item())
      assert.is_true(x:cumsum(2):eq(slices(2)):all():item())
      assert.is_true(x:long():cumsum(2):eq(slices(2):long()):all():item())
      local v, i = x:cummax(1)
      assert.are.same({ 300, 700 }, i.shape)
      assert.is_true(v:eq(x:gather(1, i)):all():item())
      v, i = x:cummin(2) -- (rows longer than one chunk)
      assert.is_true(v:eq(x:gather(2, i)):all():item())
      assert.is_true(v:le(x):all():item())
      for _, d in ipairs({ 1, 2 }) do -- cumsum's gradient: from the end
        assert.is_true(dpl.tensor._cumsum_reverse(x, d):eq(x:flip(d):cumsum(d):flip(d)):all():item())
      end
      assert.is_true(x:flip(1, 2):eq(x:index_select(1, dpl.arange(300, 0, -1)):index_select(2, dpl.arange(700, 0, -1))):all():item())
      assert.is_true(x:roll(7, 2):eq(dpl.cat({ x:narrow(2, 694, 7), x:narrow(2, 1, 693) }, 2)):all():item())
      assert.is_true(x:tril(3):eq(x * dpl.ones(300, 700):tril(3):double()):all():item())
    end
    dpl.set_num_threads(threads)
  end)

  it('repeat and repeat_interleave on up to 8 dims (paths that do not double the dims)', function()
    local x = dpl.arange(6):view(1, 1, 1, 1, 1, 1, 2, 3):double():requires_grad_()
    local r = x['repeat'](x, 1, 1, 1, 1, 1, 2, 1, 1)
    assert.are.same({ 1, 1, 1, 1, 1, 2, 2, 3 }, r.shape)
    assert.are.same(x:view(2, 3):totable(), r:view(2, 2, 3)[2]:totable())
    assert.are.same({ 1, 1, 1, 1, 1, 0, 2, 3 }, x['repeat'](x, 1, 1, 1, 1, 1, 0, 1, 1).shape)
    r:sum():backward()
    assert.are.same({ 2, 2, 2, 2, 2, 2 }, x.grad:view(6):totable())
    local ri = x:repeat_interleave(2, -1)
    assert.are.same({ 1, 1, 1, 1, 1, 1, 2, 6 }, ri.shape)
    assert.are.same({ { 0, 0, 1, 1, 2, 2 }, { 3, 3, 4, 4, 5, 5 } }, ri:view(2, 6):totable())
    assert.are.same({ 0, 1, 1, 2, 3, 4, 5, 5 }, x:repeat_interleave({ 1, 2, 1, 1, 1, 2 }):totable())
  end)

  it('cumprod of integers wraps around in int64, as PyTorch', function()
    assert.are.same({ 2 ^ 31, 2 ^ 62, -2 ^ 63, 0 }, dpl.tensor({ 2 ^ 31, 2 ^ 31, 2, 2 }):cumprod(1):totable())
  end)

  it('repeat, tile and repeat_interleave with 1s still copy; rot90(0) copies', function()
    local x = dpl.ones(2, 3)
    for _, y in ipairs({ x['repeat'](x, 1, 1), x:tile(1), x:repeat_interleave(1, 1), x:rot90(0), x:rot90(4), x:flip({}) }) do
      assert.is_false(y:is_set_to(x))
    end
  end)
end)

describe('shape ops: views share storage', function()
  it('diagonal is a view with PyTorch geometry; writes show through', function()
    local x = dpl.arange(12):view(3, 4)
    local d = x:diagonal(1)
    assert.is_true(d:is_set_to(x))
    assert.are.same({ 3 }, d.shape)
    assert.are.same({ 5 }, d:stride())
    assert.are.equal(1, d:storage_offset())
    assert.are.equal(4, x:diagonal(-1):storage_offset())
    assert.are.equal(0, x:diagonal(9):storage_offset()) -- empty: the offset is kept, as PyTorch
    local y = dpl.zeros(2, 3, 4)
    local v = y:diagonal(0, 3, 1)
    assert.are.same({ 3, 2 }, v.shape)
    assert.are.same({ 4, 13 }, v:stride())
    v:fill_(7)
    assert.are.equal(7, y[2][1][2]:item())
    assert.are.equal(42, y:sum():item())
    d:fill_(-1)
    assert.are.same({ { 0, -1, 2, 3 }, { 4, 5, -1, 7 }, { 8, 9, 10, -1 } }, x:totable())
  end)

  it('unfold is a view with PyTorch geometry; writes show through', function()
    local x = dpl.arange(10):double()
    local u = x:unfold(1, 3, 2)
    assert.is_true(u:is_set_to(x))
    assert.are.same({ 4, 3 }, u.shape)
    assert.are.same({ 2, 1 }, u:stride())
    u:select(2, 1):fill_(-1)
    assert.are.same({ -1, 1, -1, 3, -1, 5, -1, 7, 8, 9 }, x:totable())
    local m = dpl.zeros(3, 4):t() -- a transposed input
    local w = m:unfold(2, 2, 1)
    assert.are.same({ 4, 2, 2 }, w.shape)
    assert.are.same({ 1, 4, 4 }, w:stride())
    assert.is_true(w:is_set_to(m))
  end)

  it('chunk, split, unbind give views; movedim, swapaxes give views', function()
    local x = dpl.zeros(5, 3)
    for _, list in ipairs({ x:chunk(2), x:split(2), x:split({ 1, 4 }), x:unbind(2) }) do
      for _, p in ipairs(list) do assert.is_true(p:is_set_to(x)) end
    end
    x:chunk(2)[2]:fill_(1)
    assert.are.equal(6, x:sum():item())
    x:unbind(2)[3]:fill_(2)
    assert.are.equal(2, x[5][3]:item())
    local y = dpl.zeros(2, 3, 4)
    assert.is_true(y:movedim(1, 3):is_set_to(y))
    assert.are.same({ 3, 4, 2 }, y:movedim(1, 3).shape)
    assert.are.same({ 4, 1, 12 }, y:movedim(1, 3):stride())
    assert.is_true(y:swapaxes(1, 2):is_set_to(y))
    assert.is_true(y:moveaxis({ 1, 2 }, { 2, 1 }):is_set_to(y))
  end)

  it('ops that copy do not share storage', function()
    local x = dpl.ones(3, 3)
    for _, y in ipairs({ x:cumsum(1), x:flip(1), x:roll(1), x:tril(), x:diag(), x:fliplr(), x['repeat'](x, 2, 1),
      x:take({ 1 }), x:new_tensor(x) }) do
      assert.is_false(y:is_set_to(x))
    end
  end)

  it('trace, tril_ and diagonal views work on non-contiguous inputs', function()
    local x = dpl.arange(16):view(4, 4):double()
    local v = x:t():narrow(1, 2, 3) -- rows 2..4 of the transpose
    assert.are.equal(1 + 6 + 11, v:trace():item())
    v:tril_(-1) -- v[i][j] = x[j][i + 1]: zeroes x[j][i + 1] for j >= i
    assert.are.same({ { 0, 0, 2, 3 }, { 4, 0, 0, 7 }, { 8, 0, 0, 0 }, { 12, 0, 0, 0 } }, x:totable())
  end)
end)

describe('shape ops: autograd', function()
  local A = dpl.autograd
  local function rs(seed, ...) dpl.manual_seed(seed) return dpl.randn(...):double():requires_grad_() end

  it('gradcheck of the rules and compositions', function()
    local w = dpl.arange(12):double():view(3, 4)
    local cases = {
      { function(a) return a:cumsum(2) end, { rs(1, 3, 4) } },
      { function(a) return a:cumsum(1, { dtype = 'float64' }) end, { rs(1, 3, 4) } },
      { function(a) return a:cumprod(2) end, { rs(1, 3, 4) } },
      { function(a) return (a * dpl.tensor({ { 1, 0, 1, 1 }, { 0, 1, 0, 1 }, { 1, 1, 1, 0 } }):double()):cumprod(2) end, { rs(2, 3, 4) } },
      { function(a) return (a:cummax(2)) end, { rs(3, 3, 4) } },
      { function(a) return (a:cummin(1)) end, { rs(3, 3, 4) } },
      { function(a) return a:flip(1, 2) * w end, { rs(4, 3, 4) } },
      { function(a) return a:roll({ 1, -2 }, { 1, 2 }) * w end, { rs(5, 3, 4) } },
      { function(a) return a:roll(5) * w end, { rs(5, 3, 4) } },
      { function(a) return a:rot90(3) end, { rs(5, 3, 4) } },
      { function(a) return a:tril(1) + a:triu(2) end, { rs(6, 3, 4) } },
      { function(a) return (a * 1):triu_(-1) end, { rs(6, 3, 4) } },
      { function(a) return (a * 1):tril_() end, { rs(6, 3, 4) } },
      { function(a) return a:diag(1) end, { rs(7, 3) } },
      { function(a) return a:diag(-1) end, { rs(7, 3, 4) } },
      { function(a) return a:diagonal(1, 3, 1) end, { rs(7, 3, 2, 4) } },
      { function(a) return a:trace() end, { rs(7, 3, 3) } },
      { function(a) return a:unfold(2, 3, 1) end, { rs(8, 2, 6) } },
      { function(a) return a:unfold(2, 4, 3) end, { rs(8, 2, 7) } },
      { function(a) return a:unfold(1, 5, 1) end, { rs(8, 6) } },
      { function(a) return a['repeat'](a, 2, 1, 3) end, { rs(9, 2, 3) } },
      { function(a) return a:tile(2, 1, 1, 1, 2) end, { rs(9, 2, 3) } },
      { function(a) return a:repeat_interleave(dpl.tensor({ 1, 0, 3 }), 2) end, { rs(10, 2, 3) } },
      { function(a) return a:repeat_interleave(2) end, { rs(10, 2, 3) } },
      { function(a) local c = a:chunk(2, 2) return c[1] * 2 + c[2]:sum() end, { rs(11, 2, 3) } },
      { function(a) local s = a:split({ 1, 2 }, 2) return s[2] * s[2] end, { rs(11, 2, 3) } },
      { function(a) local u = a:unbind(1) return u[1] * u[2] end, { rs(11, 2, 3) } },
      { function(a) return a:take({ { 1, -1 }, { 3, 3 } }) end, { rs(12, 2, 3) } },
      { function(a) return a:movedim(1, 3) * dpl.arange(24):double():view(3, 4, 2) end, { rs(13, 2, 3, 4) } },
      { function(a) return a:sum_to_size(1, 3) end, { rs(14, 2, 3) } },
      { function(a) return a:type_as(dpl.zeros(1, { dtype = 'float64' })) * 2 end, { rs(14, 2, 3) } },
    }
    for i, c in ipairs(cases) do
      local ok, e = pcall(A.gradcheck, c[1], c[2])
      assert(ok, ('case %d: %s'):format(i, tostring(e)))
    end
  end)

  it('ops record grad_fn names; integer results do not require grad', function()
    local x = dpl.randn(3, 4):requires_grad_()
    assert.are.equal('cumsum', x:cumsum(1).grad_fn.name)
    assert.are.equal('cumprod', x:cumprod(1).grad_fn.name)
    local v, i = x:cummax(2)
    assert.are.equal('cummax', v.grad_fn.name)
    assert.is_false(i.requires_grad)
    assert.are.equal('flip', x:flip(1).grad_fn.name)
    assert.are.equal('roll', x:roll(1).grad_fn.name)
    assert.are.equal('tril', x:tril().grad_fn.name)
    assert.are.equal('diag', x:diag().grad_fn.name)
    assert.are.equal('diagonal', x:diagonal().grad_fn.name)
    assert.are.equal('unfold', x:unfold(1, 2, 1).grad_fn.name)
    assert.is_false(x:long():cumsum(1).requires_grad)
    assert.is_false(x:cumsum(1, { dtype = 'int64' }).requires_grad)
    assert.is_true(x:diagonal().requires_grad)
    assert.is_false(dpl.no_grad(function() return x:flip(1) end).requires_grad)
  end)

  it('in-place tril_ / triu_ on a leaf that requires grad is an error, as PyTorch', function()
    local x = dpl.randn(3, 3):requires_grad_()
    h.raises(function() x:tril_() end, 'tril_: a leaf tensor that requires grad is being used in an in-place operation')
    h.raises(function() x:diagonal():zero_() end, 'zero_: a view of a leaf tensor that requires grad')
  end)

  it('cumprod saves its input: changing it in place before backward is an error', function()
    local x = dpl.randn(4):double():requires_grad_()
    local y = x * 1
    local z = y:cumprod(1)
    y:add_(1)
    h.raises(function() z:sum():backward() end, 'saved by cumprod is at version')
  end)
end)

describe('shape ops: errors', function()
  local function fails(class, text, f)
    local ok, e = pcall(f)
    assert(not ok, 'expected an error containing: ' .. text)
    local s = tostring(e)
    assert(s:find(text, 1, true), ('expected an error containing %q, got %q'):format(text, s))
    assert(s:sub(1, #class + 1) == class .. ':', ('expected a %s, got %q'):format(class, s))
  end
  local x = dpl.randn(3, 4)
  local s0 = dpl.tensor(1.5)

  it('cumsum, cumprod, cummax, cummin', function()
    fails('ValueError', 'cumsum: dim must be an integer, got nil', function() return x:cumsum() end)
    fails('ValueError', 'cumsum: dim 3 out of range (expected 1..2 or -2..-1 for a 2-d tensor)', function() return x:cumsum(3) end)
    fails('ValueError', 'cumprod: dim -3 out of range', function() return x:cumprod(-3) end)
    fails('ValueError', 'cumsum: dim 2 out of range (expected 1 or -1 for a 0-d tensor)', function() return s0:cumsum(2) end)
    fails('ValueError', "cumsum: unknown option 'dtyp' (did you mean 'dtype'?)", function() return x:cumsum(1, { dtyp = 'int64' }) end)
    fails('ValueError', "cumprod: unknown dtype 'float128'", function() return x:cumprod(1, { dtype = 'float128' }) end)
    fails('ValueError', "cumsum: unknown dtype 'double precision'", function() return x:cumsum(1, 'double precision') end)
    fails('RuntimeError', 'cumsum: dtype bool is not supported for the result', function() return x:cumsum(1, { dtype = 'bool' }) end)
    fails('ValueError', 'cumsum: input must be a tensor, got number', function() return dpl.cumsum(3, 1) end)
    fails('ValueError', 'cummax: dim 5 out of range', function() return x:cummax(5) end)
    fails('ValueError', 'cummin: dim must be an integer, got 1.5', function() return x:cummin(1.5) end)
    fails('ValueError', 'cummin: input must be a tensor, got table', function() return dpl.cummin({ 1, 2 }, 1) end)
  end)

  it('flip, fliplr, flipud, roll, rot90', function()
    fails('ValueError', 'flip: dims is required (a dim or a list of dims)', function() return x:flip() end)
    fails('ValueError', 'flip: dim -2 appears multiple times in the list of dims [1, -2]', function() return x:flip({ 1, -2 }) end)
    fails('ValueError', 'flip: dim 3 out of range (expected 1..2 or -2..-1 for a 2-d tensor)', function() return x:flip(3) end)
    fails('ValueError', 'flip: expected a list or several integers, not both', function() return x:flip({ 1 }, 2) end)
    fails('ValueError', 'flip: at most 8 dims, got 9', function() return x:flip({ 1, 1, 1, 1, 1, 1, 1, 1, 1 }) end)
    fails('ValueError', 'flip: at most 8 dims, got more than 8 arguments', function() return x:flip(1, 1, 1, 1, 1, 1, 1, 1, 1) end)
    fails('ValueError', 'fliplr: expected a tensor with at least 2 dims, got a 1-d tensor', function() return dpl.ones(3):fliplr() end)
    fails('ValueError', 'flipud: expected a tensor with at least 1 dim, got a 0-d tensor', function() return s0:flipud() end)
    fails('ValueError', 'roll: shifts is required (an integer or a list of integers)', function() return x:roll() end)
    fails('ValueError', 'roll: shifts and dims must align: 2 shifts and 1 dims', function() return x:roll({ 1, 2 }, { 1 }) end)
    fails('ValueError', 'roll: shifts and dims must align: 2 shifts and no dims', function() return x:roll({ 1, 2 }) end)
    fails('ValueError', 'roll: shifts must be an integer, got 1.5', function() return x:roll(1.5, 1) end)
    fails('ValueError', 'roll: dim 3 out of range', function() return x:roll(1, 3) end)
    fails('ValueError', 'roll: dim 1 out of range: the tensor has no dims (0-d)', function() return s0:roll(1, 1) end)
    fails('ValueError', 'rot90: the two dims must differ, got [1, -2]', function() return x:rot90(1, { 1, -2 }) end)
    fails('ValueError', 'rot90: dims must be a list of 2 dims, got [1]', function() return x:rot90(1, { 1 }) end)
    fails('ValueError', 'rot90: expected a tensor with at least 2 dims, got a 1-d tensor', function() return dpl.ones(3):rot90() end)
    fails('ValueError', 'rot90: k must be an integer, got 0.5', function() return x:rot90(0.5) end)
    fails('ValueError', 'rot90: dim 3 out of range', function() return x:rot90(1, { 1, 3 }) end)
  end)

  it('repeat, tile, repeat_interleave', function()
    fails('ValueError', 'repeat: the number of repeats (1) can not be smaller than the number of dims of the tensor (2)',
      function() return x['repeat'](x, 2) end)
    fails('ValueError', 'repeat: repeats must be non-negative integers, got -1 at position 2', function() return x['repeat'](x, 2, -1) end)
    fails('ValueError', 'repeat: repeats must be non-negative integers, got 1.5 at position 1', function() return x['repeat'](x, 1.5, 1) end)
    fails('ValueError', 'repeat: at most 8 dims, got 9 repeats', function() return x['repeat'](x, { 1, 1, 1, 1, 1, 1, 1, 1, 1 }) end)
    fails('ValueError', 'tile: repeats must be non-negative integers, got -2 at position 2', function() return x:tile(-2) end)
    fails('ValueError', 'repeat_interleave: repeats must not be negative, got -1', function() return x:repeat_interleave(-1) end)
    fails('RuntimeError', 'repeat_interleave: repeats must not be negative, got -2', function() return x:repeat_interleave({ 1, -2, 1 }, 1) end)
    fails('ValueError', 'repeat_interleave: repeats must be an integer tensor (int64 or int32), got float32',
      function() return x:repeat_interleave(dpl.tensor({ 1.5, 2 }), 1) end)
    fails('ValueError', 'repeat_interleave: repeats must be a 0-d or 1-d tensor, got a 2-d tensor',
      function() return x:repeat_interleave(dpl.tensor({ { 1, 2, 1 } }), 1) end)
    fails('ValueError', 'repeat_interleave: repeats must have one count per slice along dim 2 (4), got 3',
      function() return x:repeat_interleave({ 1, 2, 1 }, 2) end)
    fails('ValueError', 'repeat_interleave: output_size 5 does not match the size of the result (6)',
      function() return x:repeat_interleave(2, 1, { output_size = 5 }) end)
    fails('ValueError', "repeat_interleave: unknown option 'outputsize'", function() return x:repeat_interleave(2, 1, { outputsize = 6 }) end)
    fails('ValueError', 'repeat_interleave: dim 3 out of range', function() return x:repeat_interleave(2, 3) end)
    fails('ValueError', 'repeat_interleave: repeats must be an integer, a list of integers or an integer tensor, got string',
      function() return x:repeat_interleave('2', 1) end)
    fails('ValueError', 'repeat_interleave: repeats must be an integer tensor (int64 or int32), got float32',
      function() return dpl.repeat_interleave(dpl.ones(3)) end)
    fails('ValueError', 'repeat_interleave: the repeats alone must be a 1-d tensor, got a 0-d tensor',
      function() return dpl.repeat_interleave(dpl.tensor(3)) end)
    fails('ValueError', 'repeat_interleave: dim 1 out of range: the tensor has no dims (0-d)',
      function() return dpl.tensor(3.5):repeat_interleave(2, 1) end)
  end)

  it('chunk, split, unbind', function()
    fails('ValueError', 'chunk: chunks must be a positive integer, got 0', function() return x:chunk(0) end)
    fails('ValueError', 'chunk: expected a tensor with at least 1 dim, got a 0-d tensor', function() return s0:chunk(2) end)
    fails('ValueError', 'chunk: dim 3 out of range', function() return x:chunk(2, 3) end)
    fails('ValueError', 'split: split_size must be a non-negative integer or a list of integers, got -1', function() return x:split(-1) end)
    fails('ValueError', 'split: split_size must be a non-negative integer or a list of integers, got string', function() return x:split('2') end)
    fails('ValueError', 'split: split sizes must add up to the size of dim 1 (3), got [1, 1] (sum 2)', function() return x:split({ 1, 1 }) end)
    fails('ValueError', 'split: split sizes must be non-negative integers, got -1 at position 2', function() return x:split({ 4, -1 }) end)
    fails('ValueError', 'split: split_size can only be 0 when the size of dim 2 is 0, got 4', function() return x:split(0, 2) end)
    fails('ValueError', 'split: expected a tensor with at least 1 dim, got a 0-d tensor', function() return s0:split(1) end)
    fails('ValueError', 'unbind: expected a tensor with at least 1 dim, got a 0-d tensor', function() return s0:unbind() end)
    fails('ValueError', 'unbind: dim -3 out of range', function() return x:unbind(-3) end)
  end)

  it('tril, triu, diag, diagonal, trace', function()
    fails('RuntimeError', 'tril: expected a tensor with at least 2 dims, got a 1-d tensor', function() return dpl.ones(3):tril() end)
    fails('RuntimeError', 'triu_: expected a tensor with at least 2 dims, got a 0-d tensor', function() return s0:triu_() end)
    fails('ValueError', 'triu: diagonal must be an integer, got 0.5', function() return x:triu(0.5) end)
    fails('ValueError', 'tril_: diagonal must be an integer, got string', function() return x:tril_('1') end)
    fails('RuntimeError', 'tril_: unsupported operation: more than one element of the written-to tensor refers to a single memory location',
      function() return dpl.ones(3, 1):expand(3, 3):tril_() end)
    fails('ValueError', 'diag: expected a 1-d or 2-d tensor, got a 3-d tensor', function() return dpl.ones(2, 2, 2):diag() end)
    fails('ValueError', 'diag: expected a 1-d or 2-d tensor, got a 0-d tensor', function() return s0:diag() end)
    fails('ValueError', 'diag: diagonal must be an integer, got table', function() return x:diag({}) end)
    fails('ValueError', 'diagonal: dim1 and dim2 must differ, got 1 and -2 (the same dim)', function() return x:diagonal(0, 1, -2) end)
    fails('ValueError', 'diagonal: expected a tensor with at least 2 dims, got a 1-d tensor', function() return dpl.ones(3):diagonal() end)
    fails('ValueError', 'diagonal: dim 3 out of range', function() return x:diagonal(0, 1, 3) end)
    fails('ValueError', 'trace: expected a matrix (a 2-d tensor), got a 1-d tensor', function() return dpl.ones(3):trace() end)
    fails('ValueError', 'trace: expected a matrix (a 2-d tensor), got a 3-d tensor', function() return dpl.ones(2, 2, 2):trace() end)
  end)

  it('movedim, swapaxes, unfold, sum_to_size', function()
    fails('ValueError', 'movedim: source and destination must list as many dims, got [1, 2] and [1]', function() return x:movedim({ 1, 2 }, 1) end)
    fails('ValueError', 'movedim: repeated dim in source [1, -2]', function() return x:movedim({ 1, -2 }, { 1, 2 }) end)
    fails('ValueError', 'movedim: repeated dim in destination [2, 2]', function() return x:movedim({ 1, 2 }, { 2, 2 }) end)
    fails('ValueError', 'movedim: dim 3 out of range', function() return x:movedim(3, 1) end)
    fails('ValueError', 'moveaxis: dim 2 out of range', function() return s0:moveaxis(2, 1) end)
    fails('ValueError', 'swapaxes: dim 3 out of range', function() return x:swapaxes(1, 3) end)
    fails('ValueError', 'swapdims: dim must be an integer, got nil', function() return x:swapdims(1) end)
    fails('ValueError', 'unfold: size 5 is larger than the size of dim 1 (3)', function() return x:unfold(1, 5, 1) end)
    fails('ValueError', 'unfold: step must be positive, got 0', function() return x:unfold(1, 2, 0) end)
    fails('ValueError', 'unfold: size must be non-negative, got -1', function() return x:unfold(1, -1, 1) end)
    fails('ValueError', 'unfold: size must be an integer, got nil', function() return x:unfold(1) end)
    fails('ValueError', 'unfold: dim 3 out of range', function() return x:unfold(3, 1, 1) end)
    fails('ValueError', 'unfold: size 2 is larger than the size of dim 1 (1, a 0-d tensor)', function() return s0:unfold(1, 2, 1) end)
    fails('ValueError', 'unfold: the result would have 9 dims (at most 8)', function() return dpl.ones(1, 1, 1, 1, 1, 1, 1, 2):unfold(8, 1, 1) end)
    fails('ValueError', 'sum_to_size: size [4, 4] is not expandable to the size of the tensor [3, 4]', function() return x:sum_to_size(4, 4) end)
    fails('ValueError', 'sum_to_size: size [1, 3, 4] is not expandable to the size of the tensor [3, 4]', function() return x:sum_to_size(1, 3, 4) end)
    fails('ValueError', 'sum_to_size: sizes must be integers, got 0.5 at position 1', function() return x:sum_to_size(0.5) end)
    fails('ValueError', 'sum_to_size: expected sizes only, got an options table', function() return x:sum_to_size(4, { dtype = 'float32' }) end)
  end)

  it('new_*, type_as, take', function()
    fails('ValueError', "new_zeros: unknown option 'dtpye' (did you mean 'dtype'?)", function() return x:new_zeros(2, { dtpye = 'int32' }) end)
    fails('NotImplementedError', "new_ones: layout=sparse_coo is not implemented (only strided tensors)",
      function() return x:new_ones(2, { layout = 'sparse_coo' }) end)
    fails('NotImplementedError', 'new_empty: pin_memory=true is not implemented', function() return x:new_empty(2, { pin_memory = true }) end)
    fails('ValueError', 'requires_grad: only floating point tensors can require gradients, got int64',
      function() return x:new_zeros(2, { dtype = 'int64', requires_grad = true }) end)
    fails('ValueError', 'new_full: requires_grad must be a boolean, got string', function() return x:new_full({ 2 }, 1, { requires_grad = 'yes' }) end)
    fails('ValueError', 'new_zeros: sizes must be integers, got 1.5 at position 1', function() return x:new_zeros(1.5) end)
    fails('ValueError', 'new_full: size must be a list of sizes (or a number), got string', function() return x:new_full('2', 1) end)
    fails('ValueError', 'new_full: fill_value must be a number or a boolean, got nil', function() return x:new_full({ 2 }) end)
    fails('ValueError', "new_tensor: unknown dtype 'cplx'", function() return x:new_tensor({ 1 }, { dtype = 'cplx' }) end)
    fails('ValueError', 'new_zeros: self must be a tensor, got number', function() return dpl.new_zeros(1, 2) end)
    fails('ValueError', 'type_as: other must be a tensor, got string', function() return x:type_as('float64') end)
    fails('ValueError', 'take: index 13 is out of range for a tensor of 12 elements (expected 1..12, or -12..-1 from the end)',
      function() return x:take({ 1, 13 }) end)
    fails('ValueError', 'take: index -13 is out of range for a tensor of 12 elements', function() return x:take({ -13 }) end)
    fails('ValueError', 'take: index 0 is out of range for a tensor of 12 elements', function() return x:take({ 2, 0 }) end)
    fails('ValueError', 'take: index must be an integer tensor (int64 or int32, 1-based), got float32', function() return x:take({ 1.5 }) end)
    fails('ValueError', 'take: index must be a tensor, got number', function() return x:take(3) end)
    fails('ValueError', 'take: index 1 is out of range for a tensor of 0 elements', function() return dpl.ones(0):take({ 1 }) end)
  end)

  it('never crash on device tensors: "<op>: not implemented on cuda" (a fake device view, no plugin)', function()
    local setup = "dpl.C.dpl_proc_setenv('DPL_CUDA_PLUGIN', 'off')\n" .. [[
local bit = require 'bit'
local function devmem(t) local v = t:view(t:size()) v._flags = bit.bor(v._flags, 2) return v end
local function undo(v) v._flags = bit.band(v._flags, bit.bnot(2)) end
function try(f) local x = devmem(dpl.randn(3, 4)) local ok, e = pcall(f, x) undo(x) if ok then return 'no error' end error(e, 0) end
]]
    local cases, want = {}, {}
    for _, c in ipairs({
      { 'x:cumsum(1)', 'NotImplementedError: cumsum: not implemented on cuda' },
      { 'x:cumprod(2)', 'NotImplementedError: cumprod: not implemented on cuda' },
      { 'x:cummax(1)', 'NotImplementedError: cummax: not implemented on cuda' },
      { 'x:cummin(1)', 'NotImplementedError: cummin: not implemented on cuda' },
      { 'x:flip(1)', 'NotImplementedError: flip: not implemented on cuda' },
      { 'x:fliplr()', 'NotImplementedError: flip: not implemented on cuda' },
      { 'x:roll(1, 1)', 'NotImplementedError: roll: not implemented on cuda' },
      { 'x:rot90()', 'NotImplementedError: flip: not implemented on cuda' },
      { 'x:tril()', 'NotImplementedError: tril: not implemented on cuda' },
      { 'x:triu_(1)', 'NotImplementedError: triu_: not implemented on cuda' },
      { "x['repeat'](x, 2, 1)", 'not implemented on cuda' },
      { 'x:repeat_interleave(2, 1)', 'not implemented on cuda' },
      { 'x:take({1})', 'not implemented on cuda' },
      { 'x:diag()', 'not implemented on cuda' },
      { 'x:diagonal():size(1)', 'ok "no error"' },
      { 'x:unfold(2, 2, 1):size(1)', 'ok "no error"' },
      { '#x:chunk(2)', 'ok "no error"' },
      { 'x:movedim(1, 2):size(1)', 'ok "no error"' },
    }) do
      cases[#cases + 1] = 'try(function(x) return ' .. c[1] .. ' end)'
      want[#want + 1] = c[2]
    end
    local got = run.run(nil, cases, { setup = setup })
    for i, w in ipairs(want) do
      assert(got[i] and got[i]:find(w, 1, true), ('%s: expected %q, got %q'):format(cases[i], w, tostring(got[i])))
      if w ~= 'ok "no error"' then assert(got[i]:sub(1, 4) == 'err ', cases[i]) end
    end
  end)

  it('work on simulated GPUs (host memory) and keep the device', function()
    local got = run.run(2, {
      "tostring(dpl.arange(6, {device = 'cuda:1'}):view(2, 3):cumsum(2).device)",
      "dpl.arange(6, {device = 'cuda:1'}):view(2, 3):flip(2):roll(1, 1):tolist()",
      "tostring(dpl.ones(2, 3, {device = 'cuda:1'}):new_zeros(2).device)",
      "tostring(dpl.ones(2, 3):new_zeros(2, {device = 'cuda:1'}).device)",
      "dpl.ones(2, 2, {device = 'cuda:1'}):tril():take({1, 2, 3}):tolist()",
      "dpl.ones(2, 2, {device = 'cuda:1'}):diag(1):sum():item()",
      "dpl.ones(2, {device = 'cuda:1'}):take(dpl.tensor({1}))",
      "dpl.tensor({{1, 2}, {3, 4}}, {device = 'cuda:1'}):repeat_interleave({2, 1}, 2):tolist()",
      "dpl.repeat_interleave(dpl.tensor({1, 0, 2}, {device = 'cuda:1'})):tolist()",
      "tostring(dpl.repeat_interleave(dpl.tensor({1, 0, 2}, {device = 'cuda:1'})).device)",
    })
    assert.are.equal('ok "cuda:1"', got[1])
    assert.are.equal('ok {{5, 4, 3}, {2, 1, 0}}', got[2])
    assert.are.equal('ok "cuda:1"', got[3])
    assert.are.equal('ok "cuda:1"', got[4])
    assert.are.equal('ok {1, 0, 1}', got[5])
    assert.are.equal('ok 1', got[6])
    assert.are.equal('err ValueError: take: expected the index on the device of the input (cuda:1), got cpu', got[7])
    assert.are.equal('ok {{1, 1, 2}, {3, 3, 4}}', got[8])
    assert.are.equal('ok {1, 3, 3}', got[9])
    assert.are.equal('ok "cuda:1"', got[10])
  end)
end)

describe('shape ops: memory', function()
  local function use_all()
    for _ = 1, 3 do
      local x = dpl.randn(6, 5):requires_grad_()
      local outs = { x:cumsum(1), x:cumprod(2), (x:cummax(1)), select(2, x:cummin(2)), x:flip(1, 2), x:fliplr(), x:roll(2),
        x:roll({ 1, 1 }, { 1, 2 }), x:rot90(), x['repeat'](x, 2, 2), x:tile(3), x:repeat_interleave({ 1, 2, 0, 1, 1 }, 2),
        x:tril(), x:triu(1), x:diag(), x:diagonal(1), x:trace(), x:movedim(1, 2), x:unfold(1, 2, 2), x:sum_to_size(1, 5),
        x:new_zeros(3), x:new_tensor({ 1, 2 }), x:type_as(dpl.zeros(1, { dtype = 'float64' })), x:take({ 1, -1 }) }
      for _, p in ipairs(x:chunk(4)) do outs[#outs + 1] = p end
      for _, p in ipairs(x:split({ 2, 4 })) do outs[#outs + 1] = p end
      for _, p in ipairs(x:unbind(2)) do outs[#outs + 1] = p end
      local loss
      for _, o in ipairs(outs) do
        if o:is_floating_point() then loss = loss and loss + o:double():sum() or o:double():sum() end
      end
      loss:backward()
      local y = x:detach():clone()
      y:tril_()
      y:triu_(-1)
      pcall(function() return y:flip(3) end) -- errors leave nothing behind either
      pcall(function() return y:repeat_interleave({ 1, -1, 1, 1, 1, 1 }, 1) end)
    end
  end
  it('return every byte after collectgarbage()', function()
    local before = h.settle_memory()
    use_all()
    local after = h.settle_memory()
    -- (<=: what earlier specs left may be freed meanwhile)
    assert(after.current_bytes <= before.current_bytes, ('%d bytes leaked'):format(after.current_bytes - before.current_bytes))
    assert(after.live_storages <= before.live_storages, ('%d storages leaked'):format(after.live_storages - before.live_storages))
  end)
end)

-- Cases found by the randomized differential test against PyTorch 1.13
-- (scripts/difftest/difftest.py); torch's values inline.
describe('shape ops: differential test findings', function()
  local raises = h.raises
  it('swapaxes / swapdims of a 0-d tensor take dims 1 and -1 (PyTorch: 0 / -1)', function()
    local t = dpl.tensor(1.5)
    for _, f in ipairs({ 'swapaxes', 'swapdims' }) do
      local r = t[f](t, 1, -1)
      assert.are.same({}, r.shape)
      assert.are.equal(1.5, r:item())
      assert.are.equal(1.5, t[f](t, -1, -1):item())
      raises(function() return t[f](t, 2, 1) end, 'out of range')
    end
  end)
  it('sum_to_size() to no dims sums, as PyTorch: a 0-d bool or int32 tensor gives int64', function()
    local b = dpl.tensor(true):sum_to_size({})
    assert.are.equal('int64', b.dtype)
    assert.are.equal(1, b:item())
    assert.are.equal('int64', dpl.tensor(3, { dtype = 'int32' }):sum_to_size({}).dtype)
    local f = dpl.tensor(2.5)
    local r = f:sum_to_size({})
    assert.are.equal(2.5, r:item())
    assert.are.equal('float32', r.dtype)
    assert.are.equal(10, dpl.tensor({ 1, 2, 3, 4 }):sum_to_size({}):item())
  end)
  it('cummax, cummin and take save their input, as PyTorch: changing it in place before backward is an error',
    function()
      for _, op in ipairs({ 'cummax', 'cummin' }) do
        local x = dpl.tensor({ 1, 3, 2 }, { dtype = 'float64' }):requires_grad_()
        local b = x * 1
        local v = b[op](b, 1)
        b:add_(1)
        raises(function() v:sum():backward() end, 'modified by an inplace operation')
      end
      local x = dpl.tensor({ { 1, 3 }, { 2, 4 } }, { dtype = 'float64' }):requires_grad_()
      local b = x * 1
      local v = b:take({ 1, 1, -1 })
      b:mul_(2)
      raises(function() v:sum():backward() end, 'modified by an inplace operation')
    end)
  it("take's gradient adds up at repeated positions (one recorded op)", function()
    local x = dpl.tensor({ { 1, 3 }, { 2, 4 } }, { dtype = 'float64' }):requires_grad_()
    local v = x:take(dpl.tensor({ 1, 1, -1 }))
    assert.are.equal('take', v.grad_fn.name)
    ;(v * dpl.tensor({ 1, 2, 3 }, { dtype = 'float64' })):sum():backward()
    h.near(x.grad, { { 3, 0 }, { 0, 3 } })
    -- its result is a tensor of its own: in-place ops on it are fine
    local y = x:take({ 2, 3 })
    y:mul_(2)
    assert.are.same({ 6, 4 }, y:totable())
  end)
end)
