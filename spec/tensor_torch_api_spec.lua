-- tensor_torch_api_spec.lua: the PyTorch functions of lua/dpl/tensor_extra.lua (einsum,
-- tensordot, randperm, multinomial, the stacking and shape helpers, logaddexp, logit, xlogy,
-- hypot, erfinv, diff, take_along_dim, argwhere, meshgrid, searchsorted, bucketize,
-- tril/triu_indices, cdist, quantile, block_diag, logcumsumexp, the in-place view ops) and
-- F.group_norm / F.softmax's dtype: values, dtypes, shapes and gradients against PyTorch 1.13
-- (spec/fixtures/torch_api_ref.lua, written by spec/fixtures/gen_torch_api_ref.py), and the errors.
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local raises = h.raises
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/torch_api_ref.lua')
local F = dpl.nn.functional

local function R(name) return assert(ref[name], 'no fixture case ' .. name) end
local function T(e)
  local t = dpl.tensor(e.v, { dtype = e.d })
  if t:dim() ~= #e.s then t = t:reshape(e.s) end
  return t
end
local TOL = { float64 = 1e-10, float32 = 3e-6 }
local function flat(t)
  if t:dim() == 0 then return { t:item() } end
  return t:reshape(-1):totable()
end
local function same(got, e, what, tol)
  assert(dpl.is_tensor(got), what .. ': expected a tensor, got ' .. type(got))
  assert.are.equal(e.d, got.dtype, what .. ': dtype')
  assert.are.same(e.s, got:size(), what .. ': shape')
  tol = tol or TOL[e.d] or 0
  local a, b = flat(got), flat(T(e))
  for i = 1, #b do
    local x, y = a[i], b[i]
    if type(y) == 'boolean' or y == math.huge or y == -math.huge then
      assert(x == y, ('%s: element %d: %s, expected %s'):format(what, i, tostring(x), tostring(y)))
    elseif y ~= y then
      assert(x ~= x, ('%s: element %d: %s, expected nan'):format(what, i, tostring(x)))
    else
      assert(math.abs(x - y) <= tol * math.max(1, math.abs(y)), ('%s: element %d: %.17g, expected %.17g'):format(what, i, x, y))
    end
  end
end
-- case name: f(inputs...) against y; with gx, the gradients of sum(f(...) * g) too
local function check(name, f, tol)
  local c = R(name)
  local xs = {}
  for i, e in ipairs(c.x or {}) do
    xs[i] = T(e)
    if c.gx and xs[i]:is_floating_point() then xs[i]:requires_grad_() end
  end
  local y = f(unpack(xs, 1, #(c.x or {})))
  same(y, c.y, name, tol)
  if c.gx then
    (y * T(c.g)):sum():backward()
    local k = 0
    for _, x in ipairs(xs) do
      if x:is_floating_point() then
        k = k + 1
        same(x.grad, c.gx[k], name .. ': gradient of input ' .. k, tol)
      end
    end
  end
end

describe('einsum', function()
  local EQ = { matmul = 'ij,jk->ik', implicit = 'ij,jk', bmm = 'bij,bjk->bik', diag = 'ii->i', trace = 'ii',
    diag3 = 'iij->j', outer = 'i,j->ij', transpose = 'ij->ji', sum = 'ij->', dot = 'ij,ij->',
    bilinear = 'bn,anm,bm->ba', ellipsis = '...ij,...jk->...ik', ellipsis_implicit = '...ij,jk',
    ellipsis_sum = '...ij->ij', batch_diag = '...ii->...i', upper = 'Ab,bA->', broadcast1 = 'ij,jk', three = 'i,i,i->',
    hadamard_keep = 'ij,ij->ij', private = 'ijk,jl->il', spaces = ' ij , jk -> ki ' }
  it('matches torch.einsum, values and gradients', function()
    for name, eq in pairs(EQ) do
      check('einsum ' .. name, function(...) return dpl.einsum(eq, ...) end)
    end
    check('einsum int', function(a, b) return dpl.einsum('ij,jk->ik', a, b) end)
  end)
  it('takes the operands as a list too', function()
    local c = R('einsum matmul')
    same(dpl.einsum('ij,jk->ik', { T(c.x[1]), T(c.x[2]) }), c.y, 'list form')
  end)
  it('gradcheck on a three-operand contraction with a diagonal', function()
    local a = dpl.randn(3, 3, 2, { dtype = 'float64' }):requires_grad_()
    local b = dpl.randn(2, 4, { dtype = 'float64' }):requires_grad_()
    local c = dpl.randn(4, { dtype = 'float64' }):requires_grad_()
    assert.is_true(dpl.autograd.gradcheck(function(x, y, z) return dpl.einsum('iij,jk,k->i', x, y, z) end, { a, b, c }))
  end)
  it('names the bad argument', function()
    local a, b = dpl.randn(2, 3), dpl.randn(3, 4)
    raises(function() dpl.einsum(1, a) end, 'ValueError: einsum: equation must be a string, got number')
    raises(function() dpl.einsum('ij,jk', a) end, "einsum: equation 'ij,jk' has 2 operand terms but 1 operand were given")
    raises(function() dpl.einsum('ij', a, 'x') end, 'operand 2 must be a tensor, got string')
    raises(function() dpl.einsum('i1,jk', a, b) end, "ValueError: einsum: invalid subscript '1'")
    raises(function() dpl.einsum('ijk,jk', a, b) end,
      'RuntimeError: einsum: the number of subscripts in the equation (3) does not match the number of dims (2) of operand 1')
    raises(function() dpl.einsum('ij,jk->iz', a, b) end, "output subscript 'z' does not appear")
    raises(function() dpl.einsum('ij,jk->ii', a, b) end, "output subscript 'i' appears more than once")
    raises(function() dpl.einsum('ij,kj', a, b) end, "einsum: operands do not broadcast: subscript 'j' has size 4")
    raises(function() dpl.einsum('ii', a) end, "subscript 'i' is repeated for operand 1 but the sizes don't match, 2 != 3")
    raises(function() dpl.einsum('ij,jk', a, b:double()) end, 'einsum: expected all operands to have one dtype')
    raises(function() dpl.einsum('..i', a) end, "a '.' in operand 1 that is not part of an ellipsis")
    raises(function() dpl.einsum(a, { 1, 2 }) end, 'NotImplementedError: einsum: the sublist format')
  end)
end)

describe('tensordot', function()
  it('matches torch.tensordot', function()
    check('tensordot 2', function(a, b) return dpl.tensordot(a, b, 2) end)
    check('tensordot lists', function(a, b) return dpl.tensordot(a, b, { { 2, 1 }, { 1, 2 } }) end)
    check('tensordot 0', function(a, b) return dpl.tensordot(a, b, 0) end)
  end)
  it('names the bad argument', function()
    raises(function() dpl.tensordot(dpl.ones(2, 3), dpl.ones(2, 3), 1) end,
      'RuntimeError: tensordot: contracted dimensions need to match, but dim 2 of a has size 3 and dim 1 of b has size 2')
    raises(function() dpl.tensordot(dpl.ones(2), dpl.ones(2), 'x') end, 'ValueError: tensordot: dims must be')
    raises(function() dpl.tensordot(dpl.ones(2), dpl.ones(2), 3) end, 'tensordot: dims (3) must not exceed')
  end)
end)

describe('randperm and multinomial', function()
  local function sorted(t) return (t:sort()):totable() end
  it('randperm is a permutation of 1..n, reproducible under manual_seed and seed_everything', function()
    dpl.manual_seed(7)
    local p = dpl.randperm(50)
    assert.are.equal('int64', p.dtype)
    local want = {}
    for i = 1, 50 do want[i] = i end
    assert.are.same(want, sorted(p))
    dpl.manual_seed(7)
    assert.are.same(p:totable(), dpl.randperm(50):totable())
    dpl.seed_everything(3)
    local q = dpl.randperm(20)
    dpl.seed_everything(3)
    assert.are.same(q:totable(), dpl.randperm(20):totable())
    assert.are.same({}, dpl.randperm(0):totable())
    assert.are.equal('float64', dpl.randperm(4, { dtype = 'float64' }).dtype)
    assert.are.same({ 1, 2, 3, 4 }, sorted(dpl.randperm(4, { dtype = 'int32' })))
  end)
  it('randperm names the bad argument', function()
    raises(function() dpl.randperm(-1) end, 'ValueError: randperm: n must be a non-negative integer, got -1')
    raises(function() dpl.randperm(2.5) end, 'randperm: n must be a non-negative integer, got 2.5')
    raises(function() dpl.randperm(3, { dtyp = 'int32' }) end, "randperm: unknown option 'dtyp'")
    raises(function() dpl.randperm(3, { generator = {} }) end, 'NotImplementedError: randperm: generator= is not supported')
  end)
  it('multinomial draws 1-based categories with the right frequencies', function()
    dpl.manual_seed(1)
    local p = dpl.tensor({ 0.1, 0, 0.6, 0.3 })
    local s = dpl.multinomial(p, 20000, true)
    assert.are.equal('int64', s.dtype)
    assert.are.same({ 20000 }, s:size())
    local counts = s:bincount(nil, 5):totable()
    assert.are.equal(0, counts[1])
    assert.are.equal(0, counts[3]) -- category 2 has probability 0
    assert.is_true(math.abs(counts[2] / 20000 - 0.1) < 0.01, counts[2])
    assert.is_true(math.abs(counts[4] / 20000 - 0.6) < 0.015, counts[4])
    -- without replacement: distinct categories per row, zero weights last
    local w = dpl.tensor({ { 1, 1, 1, 0 }, { 0, 5, 0, 1 } }, { dtype = 'float64' })
    for _ = 1, 20 do
      local r = w:multinomial(3)
      assert.are.same({ 2, 3 }, r:size())
      local row = r[1]:totable()
      table.sort(row)
      assert.are.same({ 1, 2, 3 }, row)
      local r2 = r[2]:totable()
      assert.is_true((r2[1] == 2 or r2[1] == 4) and (r2[2] == 2 or r2[2] == 4) and r2[1] ~= r2[2])
    end
    -- reproducible
    dpl.manual_seed(5)
    local a = dpl.multinomial(p, 10, true)
    dpl.manual_seed(5)
    assert.are.same(a:totable(), dpl.multinomial(p, 10, { replacement = true }):totable())
  end)
  it('multinomial names the bad argument', function()
    local p = dpl.tensor({ 0.5, 0.5 })
    raises(function() dpl.multinomial(p, 3) end,
      'RuntimeError: multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement')
    raises(function() dpl.multinomial(p, 0) end, 'multinomial: cannot sample n_sample <= 0 samples')
    raises(function() dpl.multinomial(dpl.tensor({ 0.5, -1 }), 1) end, 'probability tensor contains either inf, nan or element < 0')
    raises(function() dpl.multinomial(dpl.tensor({ 0, 0 }, { dtype = 'float32' }), 1) end, 'sum of probabilities <= 0')
    raises(function() dpl.multinomial(dpl.ones(2, 2, 2), 1) end, 'multinomial: prob_dist must be 1 or 2 dim')
    raises(function() dpl.multinomial(dpl.tensor({ 1, 2 }), 1) end, 'expected a floating point probability tensor')
    raises(function() dpl.multinomial(p, 1, 'yes') end, 'ValueError: multinomial: replacement must be a boolean')
    raises(function() dpl.multinomial(p, 1, { generator = 1 }) end, 'NotImplementedError: multinomial: generator=')
  end)
end)

describe('shape helpers', function()
  it('broadcast_to, broadcast_tensors, atleast_*d', function()
    local x = dpl.tensor({ 1, 2, 3 })
    assert.are.same({ { 1, 2, 3 }, { 1, 2, 3 } }, dpl.broadcast_to(x, { 2, 3 }):totable())
    assert.are.same({ 2, 3 }, x:broadcast_to(2, 3):size())
    local b = dpl.broadcast_tensors(dpl.ones(3, 1), dpl.ones(2, 1, 4))
    assert.are.same({ 2, 3, 4 }, b[1]:size())
    assert.are.same({ 2, 3, 4 }, b[2]:size())
    raises(function() dpl.broadcast_tensors(dpl.ones(3), dpl.ones(2)) end, 'RuntimeError: broadcast_tensors: shape [2] of tensor 2')
    assert.are.same({ 1 }, dpl.atleast_1d(dpl.tensor(5)):size())
    assert.are.same({ 1, 1 }, dpl.atleast_2d(dpl.tensor(5)):size())
    assert.are.same({ 1, 3 }, dpl.atleast_2d(x):size())
    assert.are.same({ 1, 3, 1 }, dpl.atleast_3d(x):size())
    assert.are.same({ 2, 3, 1 }, dpl.atleast_3d(dpl.ones(2, 3)):size())
    assert.are.same({ 1, 1, 1 }, dpl.atleast_3d(dpl.tensor(1)):size())
    local l = dpl.atleast_2d({ x, dpl.ones(2, 2) })
    assert.are.same({ 1, 3 }, l[1]:size())
    assert.are.same({ 2, 2 }, l[2]:size())
  end)
  it('hstack, vstack, dstack, column_stack (as torch)', function()
    local a, b = dpl.tensor({ 1, 2, 3 }), dpl.tensor({ 4, 5, 6 })
    assert.are.same({ 1, 2, 3, 4, 5, 6 }, dpl.hstack({ a, b }):totable())
    assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 } }, dpl.vstack({ a, b }):totable())
    assert.are.same({ { { 1, 4 }, { 2, 5 }, { 3, 6 } } }, dpl.dstack({ a, b }):totable())
    assert.are.same({ { 1, 4 }, { 2, 5 }, { 3, 6 } }, dpl.column_stack({ a, b }):totable())
    assert.are.same({ 3, 3 }, dpl.column_stack({ a, dpl.ones(3, 2) }):size())
    assert.are.same({ 2, 5 }, dpl.hstack(dpl.ones(2, 2), dpl.ones(2, 3)):size())
    raises(function() dpl.hstack({}) end, 'ValueError: hstack: expected a non-empty list of tensors')
    raises(function() dpl.vstack({ a, 'x' }) end, 'vstack: tensors[2] must be a tensor, got string')
    -- differentiable
    local x = dpl.randn(3, { dtype = 'float64' }):requires_grad_()
    dpl.vstack({ x, x * 2 }):sum():backward()
    assert.are.same({ 3, 3, 3 }, x.grad:totable())
  end)
  it('unflatten, mT, mH', function()
    local x = dpl.arange(24):reshape(2, 12)
    assert.are.same({ 2, 3, 4 }, x:unflatten(2, { 3, 4 }):size())
    assert.are.same({ 2, 2, 6 }, dpl.unflatten(x, -1, { 2, -1 }):size())
    assert.are.same({ 1, 2, 12 }, x:unflatten(1, { 1, 2 }):size())
    raises(function() x:unflatten(2, { 5, -1 }) end, 'RuntimeError: unflatten: the size 12 of dim 2 cannot be split into [5, -1]')
    raises(function() x:unflatten(2, { 3, 3 }) end, 'unflatten: sizes [3, 3] do not multiply to the size 12 of dim 2')
    raises(function() x:unflatten(2, { -1, -1 }) end, 'only one dim in sizes can be -1')
    raises(function() x:unflatten(3, { 2, 6 }) end, 'unflatten: dim 3 out of range')
    local y = dpl.randn(2, 3, 4)
    assert.are.same({ 2, 4, 3 }, y.mT:size())
    assert.are.same(y:transpose(2, 3):totable(), y.mT:totable())
    assert.are.same({ 4, 3 }, dpl.ones(3, 4).mH:size())
    raises(function() return dpl.ones(3).mT end, 'RuntimeError: tensor.mT is only supported on matrices or batches of matrices')
  end)
end)

describe('elementwise', function()
  it('logaddexp, logit, xlogy, hypot, erfinv match PyTorch (values, infinities, gradients)', function()
    check('logaddexp values', function(a, b) return dpl.logaddexp(a, b) end)
    check('logaddexp', function(a, b) return a:logaddexp(b) end)
    check('logaddexp float32', function(a, b) return a:logaddexp(b) end)
    check('logit values', function(x) return x:logit() end)
    check('logit eps values', function(x) return dpl.logit(x, 0.1) end)
    check('logit', function(x) return x:logit() end)
    check('logit eps', function(x) return x:logit({ eps = 0.2 }) end)
    check('xlogy values', function(x, y) return dpl.xlogy(x, y) end)
    check('xlogy', function(x, y) return x:xlogy(y) end)
    check('xlogy scalar', function(y) return dpl.xlogy(2, y) end)
    check('hypot values', function(a, b) return a:hypot(b) end)
    check('hypot float32', function(a, b) return dpl.hypot(a, b) end)
    check('hypot', function(a, b) return a:hypot(b) end)
    check('erfinv values', function(x) return x:erfinv() end, 1e-9)
    -- (float32 is computed in float64 and rounded once; torch 1.13's float32 kernel is off by up
    -- to ~4e-6 relative near -1 and 1)
    check('erfinv float32', function(x) return dpl.erfinv(x) end, 1e-5)
    check('erfinv', function(x) return x:erfinv() end)
    check('clamp_min', function(x) return dpl.clamp_min(x, 0.1) end)
    check('clamp_max', function(x) return x:clamp_max(-0.1) end)
  end)
  it('in-place forms and integer inputs', function()
    local x = dpl.tensor({ 0.25, 0.5 })
    x:logit_()
    assert.is_true(math.abs(x[1]:item() - math.log(1 / 3)) < 1e-6)
    local y = dpl.tensor({ 0.5, -0.5 }, { dtype = 'float64' })
    y:erfinv_()
    assert.is_true(math.abs(y[1]:item() - 0.4769362762044699) < 1e-12)
    local z = dpl.tensor({ 3.0, 5.5 })
    z:hypot_(dpl.tensor({ 4.0, 0.0 }))
    assert.are.same({ 5, 5.5 }, z:totable())
    local c = dpl.tensor({ -1.5, 2.5 })
    c:clamp_min_(0)
    c:clamp_max_(1)
    assert.are.same({ 0, 1 }, c:totable())
    assert.are.equal('float32', dpl.tensor({ 0, 1 }):erfinv().dtype)
    assert.are.equal('float32', dpl.tensor({ 3 }):hypot(dpl.tensor({ 4 })).dtype)
    raises(function() dpl.tensor({ 1, 2 }):erfinv_() end, 'RuntimeError: erfinv_: result type float32 cannot be cast to int64')
    raises(function() dpl.logaddexp(dpl.ones(2), 'a') end, 'ValueError: logaddexp: other must be a tensor or a number, got string')
    raises(function() dpl.xlogy(1, 2) end, 'ValueError: xlogy: expected a tensor, got number and number')
    raises(function() dpl.ones(2):logit('x') end, 'ValueError: logit: eps must be a number or nil, got string')
    raises(function() dpl.ones(2):logit({ eps = 0.1, epsilon = 1 }) end, "logit: unknown option 'epsilon'")
  end)
end)

describe('diff, take_along_dim, argwhere, meshgrid', function()
  it('diff matches torch.diff', function()
    check('diff', function(x) return x:diff() end)
    check('diff n2 dim1', function(x) return dpl.diff(x, 2, 1) end)
    check('diff prepend append', function(x, p, a) return x:diff(1, -1, p, a) end)
    check('diff bool', function(x) return x:diff() end)
    check('diff int n3', function(x) return x:diff({ n = 3 }) end)
    assert.are.same({ 1, 1, 1 }, dpl.tensor({ 1, 2, 3 }):diff(1, 1, 0):totable())
    raises(function() dpl.tensor(1):diff() end, 'RuntimeError: diff: expects input to be at least one-dimensional')
    raises(function() dpl.ones(3):diff(-1) end, 'ValueError: diff: n must be a non-negative integer, got -1')
    raises(function() dpl.ones(2, 3):diff(1, 2, dpl.ones(2)) end, 'diff: expected prepend to have the same number of dims as input (2), got 1')
  end)
  it('take_along_dim with 1-based indices, argwhere, meshgrid', function()
    check('take_along_dim', function(t, i) return t:take_along_dim(i, 2) end)
    check('take_along_dim broadcast', function(t, i) return dpl.take_along_dim(t, i, 2) end)
    check('take_along_dim flat', function(t, i) return t:take_along_dim(i) end)
    local x = dpl.randn(3, 4)
    same(x:take_along_dim(x:argmax(2, true), 2), { v = x:amax(2, true):totable(), s = { 3, 1 }, d = 'float32' }, 'argmax')
    raises(function() x:take_along_dim(dpl.ones(3, 1), 2) end, 'RuntimeError: take_along_dim: dtype of indices should be int64')
    raises(function() x:take_along_dim(dpl.ones(3, { dtype = 'int64' }), 2) end, 'should have the same number of dimensions')
    check('argwhere', function(w) return w:argwhere() end)
    local c = R('meshgrid ij')
    local m = dpl.meshgrid(dpl.tensor({ 1, 2, 3 }), dpl.tensor({ 4, 5 }), { indexing = 'ij' })
    same(m[1], c.y[1], 'meshgrid ij 1')
    same(m[2], c.y[2], 'meshgrid ij 2')
    m = dpl.meshgrid({ dpl.tensor({ 1, 2, 3 }), dpl.tensor({ 4, 5 }) })
    same(m[2], c.y[2], 'meshgrid list, default ij')
    c = R('meshgrid xy')
    m = dpl.meshgrid(dpl.tensor({ 1, 2, 3 }), dpl.tensor({ 4, 5 }), dpl.tensor({ 6, 7, 8, 9 }), { indexing = 'xy' })
    for i = 1, 3 do same(m[i], c.y[i], 'meshgrid xy ' .. i) end
    raises(function() dpl.meshgrid(dpl.ones(2), { indexing = 'ji' }) end, "ValueError: meshgrid: indexing must be 'ij' or 'xy', got ji")
    raises(function() dpl.meshgrid(dpl.ones(2, 2)) end, 'RuntimeError: meshgrid: expected 0-d or 1-d tensors')
  end)
end)

describe('searchsorted, bucketize, tril_indices, triu_indices', function()
  it('match PyTorch (1-based: torch + 1)', function()
    check('searchsorted left', function(s, v) return dpl.searchsorted(s, v) end)
    check('searchsorted right', function(s, v) return dpl.searchsorted(s, v, { right = true }) end)
    check('searchsorted 2d', function(s, v) return dpl.searchsorted(s, v) end)
    check('searchsorted 2d right int32', function(s, v) return dpl.searchsorted(s, v, { side = 'right', out_int32 = true }) end)
    check('searchsorted sorter', function(s, v, so) return dpl.searchsorted(s, v, { sorter = so }) end)
    check('bucketize', function(x, b) return dpl.bucketize(x, b) end)
    check('bucketize right', function(x, b) return x:bucketize(b, { right = true }) end)
    assert.are.equal(2, dpl.searchsorted(dpl.tensor({ 1, 2, 2, 3 }), 2):item())
    assert.are.equal(4, dpl.searchsorted(dpl.tensor({ 1, 2, 2, 3 }), 2, { right = true }):item())
    for k, c in pairs(ref) do
      local r, cc, o = k:match('^tril_indices (%d+) (%d+) (%-?%d+)$')
      if r then same(dpl.tril_indices(tonumber(r), tonumber(cc), tonumber(o)), c.y, k) end
      r, cc, o = k:match('^triu_indices (%d+) (%d+) (%-?%d+)$')
      if r then same(dpl.triu_indices(tonumber(r), tonumber(cc), tonumber(o)), c.y, k) end
    end
    assert.are.equal('int32', dpl.tril_indices(3, 3, 0, { dtype = 'int32' }).dtype)
  end)
  it('name the bad argument', function()
    local s = dpl.tensor({ 1, 2, 3 })
    raises(function() dpl.searchsorted(s, dpl.ones(2), { side = 'up' }) end, "ValueError: searchsorted: side can only be 'left' or 'right'")
    raises(function() dpl.searchsorted(s, dpl.ones(2), { side = 'left', right = true }) end, "side and right can't be set to opposites")
    raises(function() dpl.searchsorted(dpl.ones(2, 3), dpl.ones(3, 2)) end, 'RuntimeError: searchsorted: boundaries tensor should be 1 dimension')
    raises(function() dpl.searchsorted(s, 'x') end, 'searchsorted: values must be a tensor or a number, got string')
    raises(function() dpl.bucketize(dpl.ones(2), dpl.ones(2, 2)) end, 'RuntimeError: bucketize: boundaries tensor must be 1 dimension')
    raises(function() dpl.tril_indices(-1, 2) end, 'ValueError: tril_indices: row must be a non-negative integer, got -1')
    raises(function() dpl.triu_indices(2, 2, 0, { dtype = 'float32' }) end, 'triu_indices: dtype must be int64 or int32')
  end)
end)

describe('cdist, quantile, block_diag, logcumsumexp', function()
  it('cdist matches torch.cdist', function()
    check('cdist p=2.0', function(a, b) return dpl.cdist(a, b) end)
    check('cdist p=1.0', function(a, b) return dpl.cdist(a, b, 1) end)
    check('cdist p=3.0', function(a, b) return dpl.cdist(a, b, { p = 3 }) end)
    check('cdist p=inf', function(a, b) return dpl.cdist(a, b, math.huge) end)
    check('cdist p=0.0', function(a, b) return dpl.cdist(a, b, 0) end)
    check('cdist batched', function(a, b) return dpl.cdist(a, b) end)
    -- a zero distance has a zero gradient, as PyTorch's
    local x = dpl.tensor({ { 1, 2 } }, { dtype = 'float64' }):requires_grad_()
    dpl.cdist(x, x:detach()):sum():backward()
    assert.are.same({ { 0, 0 } }, x.grad:totable())
    raises(function() dpl.cdist(dpl.ones(2, 3), dpl.ones(2, 4)) end, 'RuntimeError: cdist: x1 and x2 must have the same number of columns, got 3 and 4')
    raises(function() dpl.cdist(dpl.ones(2, 3), dpl.ones(2, 3), -1) end, 'cdist: only supports non-negative p values')
    raises(function() dpl.cdist(dpl.ones(3), dpl.ones(3)) end, 'cdist: only supports at least 2-d tensors')
  end)
  it('quantile and nanquantile match PyTorch', function()
    local q = dpl.tensor({ 0.0, 0.25, 0.5, 0.9, 1.0 }, { dtype = 'float64' })
    check('quantile all', function(x) return x:quantile(q) end)
    check('quantile dim', function(x) return dpl.quantile(x, q, 2) end)
    check('quantile dim keepdim', function(x) return x:quantile(0.3, 1, true) end)
    check('quantile scalar', function(x) return x:quantile(0.4) end)
    check('quantile all keepdim', function(x) return x:quantile(q, { keepdim = true }) end)
    for _, m in ipairs({ 'lower', 'higher', 'midpoint', 'nearest' }) do
      check('quantile ' .. m, function(x) return x:quantile(q, -1, false, m) end)
      check('quantile ' .. m, function(x) return x:quantile(q, { dim = -1, interpolation = m }) end)
    end
    check('quantile nan', function(x) return x:quantile({ 0.0, 0.25, 0.5, 0.9, 1.0 }, 2) end)
    check('nanquantile nan', function(x) return x:nanquantile(q, 2) end)
    check('quantile float32', function(x) return dpl.quantile(x, 0.3) end)
    raises(function() dpl.ones(3):quantile(1.5) end, 'RuntimeError: quantile: q values must be in the range [0, 1]')
    raises(function() dpl.tensor({ 1, 2 }):quantile(0.5) end, 'quantile: input tensor must be either float or double dtype, got int64')
    raises(function() dpl.ones(3):quantile(q) end, 'quantile: q tensor must be same dtype as the input tensor (float32), got float64')
    raises(function() dpl.ones(3):quantile(0.5, 1, false, 'cubic') end, 'ValueError: quantile: interpolation must be one of')
  end)
  it('block_diag and logcumsumexp match PyTorch', function()
    check('block_diag', function(a, b, c) return dpl.block_diag(a, b, c) end)
    local c = R('block_diag promote')
    same(dpl.block_diag({ dpl.tensor({ { 1, 2 } }), dpl.tensor(3.5), dpl.tensor({ true }) }), c.y, 'block_diag promote')
    raises(function() dpl.block_diag(dpl.ones(2, 2, 2)) end, 'RuntimeError: block_diag: Input tensors must have 2 or fewer dimensions. Input 1 has 3 dimensions')
    check('logcumsumexp', function(x) return x:logcumsumexp(2) end)
    check('logcumsumexp dim1', function(x) return dpl.logcumsumexp(x, 1) end)
    check('logcumsumexp values', function(x) return x:logcumsumexp(1) end)
    check('logcumsumexp float32', function(x) return x:logcumsumexp(1) end)
    raises(function() dpl.ones(3):logcumsumexp() end, 'ValueError: logcumsumexp: dim is required')
    local x = dpl.tensor({ { -1000, 0, 3 }, { 2, -math.huge, 700 } }, { dtype = 'float64' }):requires_grad_()
    assert.is_true(dpl.autograd.gradcheck(function(v) return v:logcumsumexp(2) end, { dpl.randn(3, 4, { dtype = 'float64' }):requires_grad_() }))
    local y = x:logcumsumexp(2)
    assert.are.same({ -1000, math.log(1 + math.exp(-1000)), y[1][3]:item() }, y[1]:totable())
  end)
end)

describe('in-place view ops', function()
  it('unsqueeze_, squeeze_, t_, transpose_ change the tensor itself', function()
    local x = dpl.arange(6):reshape(2, 3)
    assert.are.equal(x, x:unsqueeze_(1))
    assert.are.same({ 1, 2, 3 }, x:size())
    x:squeeze_(1)
    assert.are.same({ 2, 3 }, x:size())
    x:t_()
    assert.are.same({ 3, 2 }, x:size())
    assert.are.same({ { 0, 3 }, { 1, 4 }, { 2, 5 } }, x:totable())
    assert.is_false(x:is_contiguous())
    x:transpose_(1, 2)
    assert.is_true(x:is_contiguous())
    assert.are.same({ { 0, 1, 2 }, { 3, 4, 5 } }, x:totable())
    local y = dpl.ones(1, 3, 1)
    y:squeeze_()
    assert.are.same({ 3 }, y:size())
    y:unsqueeze_(-1)
    assert.are.same({ 3, 1 }, y:size())
  end)
  it('are refused on a tensor that requires grad', function()
    local w = dpl.ones(2, 3):requires_grad_()
    raises(function() w:unsqueeze_(1) end, 'RuntimeError: unsqueeze_: an in-place view op on a tensor that requires grad')
    raises(function() w:t_() end, 't_: an in-place view op')
    raises(function() (w * 2):transpose_(1, 2) end, 'transpose_: an in-place view op')
    raises(function() dpl.ones(2, 2, 2):t_() end, 'RuntimeError: t_: expects a tensor with <= 2 dims')
  end)
end)

describe('nn.functional', function()
  it('group_norm matches PyTorch and nn.GroupNorm uses it', function()
    check('group_norm', function(x, w, b) return F.group_norm(x, 2, w, b, 1e-5) end)
    check('group_norm 4d', function(x) return F.group_norm(x, 3, { eps = 0.1 }) end)
    local c = R('group_norm')
    local m = dpl.nn.GroupNorm(2, 4, { dtype = 'float64' })
    m.weight:detach():copy_(T(c.x[2]))
    m.bias:detach():copy_(T(c.x[3]))
    same(m:forward(T(c.x[1])), c.y, 'nn.GroupNorm')
    raises(function() F.group_norm(dpl.ones(2, 3), 2) end, 'ValueError: group_norm: expected the number of channels of input [2, 3] (3) to be divisible by num_groups (2)')
    raises(function() F.group_norm(dpl.ones(2, 4), 2, dpl.ones(3)) end, 'group_norm: expected weight of shape [4], got [3]')
    raises(function() F.group_norm(dpl.ones(2, 4), 0) end, 'group_norm: num_groups must be a positive integer, got 0')
  end)
  it('softmax and log_softmax honour dtype', function()
    local c = R('softmax dtype')
    same(F.softmax(T(c.x[1]), 2, 'float64'), c.y, 'softmax dtype')
    same(F.softmax(T(c.x[1]), 2, { dtype = 'float64' }), c.y, 'softmax {dtype=}')
    same(F.softmax(T(c.x[1]), 2, 3, 'float64'), c.y, 'softmax (x, dim, _stacklevel, dtype)')
    c = R('log_softmax dtype')
    same(F.log_softmax(T(c.x[1]), 1, 'float64'), c.y, 'log_softmax dtype')
    raises(function() F.softmax(dpl.ones(2), 1, { dtyp = 'float64' }) end, "softmax: unknown option 'dtyp'")
    raises(function() F.softmax(dpl.ones(2), 1, true) end, 'softmax: dtype must be a dtype name')
  end)
  it('Embedding and F.embedding name max_norm as not implemented', function()
    raises(function() dpl.nn.Embedding(4, 2, { max_norm = 1 }) end, 'NotImplementedError: Embedding: max_norm is not implemented')
    raises(function() F.embedding(dpl.tensor({ 1 }), dpl.ones(3, 2), { max_norm = 1.0 }) end,
      'NotImplementedError: embedding: max_norm is not implemented')
    raises(function() dpl.nn.Embedding(4, 2, { sparse = true }) end, 'NotImplementedError: Embedding: sparse is not implemented')
  end)
end)

describe('dpl.tensor_extra loads on first use', function()
  it("installs exactly the names dpl.tensor lists for it, and any of them (method, property, dpl.X) loads it", function()
    local code = [[
local T = require 'dpl.tensor'
local function keys(t) local r = {} for k in pairs(t) do if type(k) == 'string' then r[k] = true end end return r end
local before = { functions = keys(T), methods = keys(T.methods), props = keys(T.props) }
local heap0 = collectgarbage('count')
T._load_extra()
local now = { functions = keys(T), methods = keys(T.methods), props = keys(T.props) }
local bad = {}
for kind, set in pairs(now) do
  for k in pairs(set) do
    if not before[kind][k] then
      local e = T._extra_names[k]
      if not (e and e[kind]) then bad[#bad + 1] = kind .. ' ' .. k .. ' is not listed' end
    end
  end
end
for k, e in pairs(T._extra_names) do
  for kind in pairs(e) do
    if not now[kind][k] then bad[#bad + 1] = kind .. ' ' .. k .. ' is listed but not installed' end
  end
end
table.sort(bad)
print(#bad == 0 and 'consistent' or table.concat(bad, '; '))
print(before.functions.einsum == nil and before.methods.logaddexp == nil and 'was not loaded' or 'was loaded already')
]]
    local out, err, rc = h.run_chunk(code)
    assert.are.equal(0, rc, err)
    assert.matches('consistent', out, 1, true)
    assert.matches('was not loaded', out, 1, true)
    -- each way in loads it in a fresh process
    for _, use in ipairs({ "print(dpl.einsum('ij->i', dpl.ones(2, 3)):totable()[1])",
      'print(dpl.ones(2, 3).mT:size()[1])', 'print(dpl.ones(2, 3):logaddexp(dpl.zeros(2, 3)):size()[2])',
      "print(require('dpl.tensor').hstack({ dpl.ones(2), dpl.ones(2) }):size()[1])" }) do
      out, err, rc = h.run_chunk("local dpl = require 'dpl'\n" .. use)
      assert.are.equal(0, rc, err)
      assert.matches('^[34]\n', out, nil, false)
    end
  end)
end)
