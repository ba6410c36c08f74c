-- tensor_compat_spec.lua: the PyTorch functions of lua/dpl/tensor_compat.lua and
-- lua/dpl/tensor_more.lua (aliases, rad2deg, signbit, float_power, gcd/lcm, shifts, heaviside,
-- copysign, nextafter, ldexp, frexp, isin, renorm, finfo/iinfo, the complex-number names, splits,
-- scatter_reduce, index_reduce, index_add, histogram, cov, corrcoef, cartesian_prod,
-- combinations, trapezoid, diag_embed, vander, addbmm): values, dtypes, shapes and gradients
-- against PyTorch 1.13 (spec/fixtures/compat_ref.lua, written by spec/fixtures/gen_compat_ref.py),
-- and the errors.
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local raises = h.raises
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/compat_ref.lua')

local function R(name) return assert(ref[name], 'no fixture case ' .. name) end
local tr = require 'spec.support.torch_ref' -- (T, same: the fixtures' {v=, s=, d=} tensors)
local T, same = tr.T, tr.same

-- case name: f(inputs...) against y (a list of results: f returns them in order); with gx,
-- the gradients of sum(f(...) * g) too
local function check(name, f, tol)
  local c = R(name)
  local xs = {}
  for i, e in ipairs(c.x or {}) do
    xs[i] = T(e)
    if c.gx and xs[i]:is_floating_point() then xs[i]:requires_grad_() end
  end
  local ys = { f(unpack(xs, 1, #(c.x or {}))) }
  if type(ys[1]) == 'table' and not dpl.is_tensor(ys[1]) then ys = ys[1] end
  if c.y.v then
    same(ys[1], c.y, name, tol)
  else
    for k, e in ipairs(c.y) do same(ys[k], e, name .. ': result ' .. k, tol) end
  end
  if c.gx then
    (ys[1] * T(c.g)):sum():backward()
    local k = 0
    for _, x in ipairs(xs) do
      if x:is_floating_point() then
        k = k + 1
        same(x.grad, c.gx[k], name .. ': gradient of input ' .. k, tol)
      end
    end
  end
end

describe('aliases and elementwise functions', function()
  it('match torch: values and gradients', function()
    for _, n in ipairs({ 'fix', 'rad2deg', 'deg2rad', 'absolute', 'arccos', 'arcsin', 'arctan', 'arccosh', 'arcsinh',
      'arctanh', 'sgn' }) do
      check(n, function(x) return x[n](x) end)
      check(n, function(x) return dpl[n](x) end)
    end
    check('arctan2', function(a, b) return a:arctan2(b) end)
    check('float_power', function(a, b) return a:float_power(b) end)
    check('float_power scalar base', function(e) return dpl.float_power(2, e) end)
    check('ldexp', function(a, b) return a:ldexp(b) end)
    check('copysign', function(a, b) return a:copysign(b) end)
    check('renorm', function(t) return t:renorm(2, 1, 1.5) end)
    check('renorm p1 dim2', function(t) return dpl.renorm(t, 1, 2, 2.0) end)
    check('frexp grad', function(t) return (t:frexp()) end)
  end)
  it('match torch: integer inputs, signbit, frexp, nextafter', function()
    check('rad2deg int', function(x) return x:rad2deg() end)
    check('fix int', function(x) return x:fix() end)
    check('float_power int', function(x) return x:float_power(2) end)
    check('signbit', function(x) return x:signbit() end)
    check('signbit int', function(x) return dpl.signbit(x) end)
    check('copysign int', function(a, b) return a:copysign(b) end)
    check('ldexp int', function(a, b) return dpl.ldexp(a, b) end)
    check('frexp', function(x) return x:frexp() end, 0)
    check('frexp float32', function(x) return dpl.frexp(x) end, 0)
    check('nextafter float32', function(a, b) return a:nextafter(b) end, 0)
    check('nextafter float64', function(a, b) return dpl.nextafter(a, b) end, 0)
    local b = dpl.tensor({ 1, 2 }, { dtype = 'bfloat16' })
    assert.are.same({ 1.0078125, 1.9921875 }, b:nextafter(dpl.tensor({ 2, 1 }, { dtype = 'bfloat16' })):float():totable())
    local hf = dpl.tensor({ 1, 0 }, { dtype = 'float16' }):nextafter(dpl.tensor({ 2, -1 }, { dtype = 'float16' }))
    assert.are.same({ 1 + 2 ^ -10, -2 ^ -24 }, hf:float():totable())
    local x = dpl.tensor({ 3.5, -1 }, { dtype = 'float64' })
    x:rad2deg_()
    assert.is_true(math.abs(x:totable()[1] - 3.5 * 180 / math.pi) < 1e-12)
    assert.are.same({ -0.0, 2.0 }, dpl.tensor({ 0, -2 }, { dtype = 'float32' }):copysign_(-1):abs():totable())
  end)
  it('gcd, lcm and the shifts match torch', function()
    check('gcd', function(a, b) return a:gcd(b) end)
    check('lcm', function(a, b) return dpl.lcm(a, b) end)
    check('gcd int32 broadcast', function(a, b) return a:gcd(b) end)
    check('lcm uint8', function(a, b) return a:lcm(b) end)
    check('left shift', function(a, b) return a:bitwise_left_shift(b) end)
    check('right shift', function(a, b) return dpl.bitwise_right_shift(a, b) end)
    check('left shift int32', function(a) return a:__lshift__(3) end)
    check('right shift int32', function(a) return a:bitwise_right_shift(2) end)
    check('left shift uint8', function(a) return a:bitwise_left_shift(1) end)
    check('right shift uint8', function(a) return a:bitwise_right_shift(3) end)
    check('left shift scalar self', function(b) return dpl.bitwise_left_shift(3, b) end)
    -- beyond the width (undefined in torch 1.13's CPU kernels): 0, or the sign for a right shift
    assert.are.same({ 0, 0 }, dpl.tensor({ 1, -1 }):bitwise_left_shift(dpl.tensor({ 64, -1 })):totable())
    assert.are.same({ 0, -1 }, dpl.tensor({ 5, -5 }, { dtype = 'int32' }):bitwise_right_shift(40):totable())
    local t = dpl.tensor({ 1, 2 })
    assert.are.equal(t, t:bitwise_left_shift_(2))
    assert.are.same({ 4, 8 }, t:totable())
    assert.are.same({ 5, 10 }, dpl.tensor({ 10, 20 }):gcd_(dpl.tensor({ 5, 30 })):totable())
    raises(function() dpl.tensor({ 1.5 }):gcd(dpl.tensor({ 2 })) end, 'RuntimeError: gcd: expected integer tensors')
    raises(function() dpl.tensor({ true }):bitwise_left_shift(dpl.tensor({ true })) end,
      'bitwise_left_shift: expected integer tensors (uint8, int32, int64), got bool')
    assert.are.same({ 2 }, dpl.tensor({ true }):bitwise_left_shift(1):totable()) -- (bool and an integer: int64)
    raises(function() dpl.tensor({ 1 }):lcm('x') end, 'ValueError: lcm: other must be a tensor or a number, got string')
  end)
  it('heaviside and isin match torch', function()
    check('heaviside', function(a, b) return a:heaviside(b) end)
    check('heaviside int', function(a, b) return dpl.heaviside(a, b) end)
    raises(function() dpl.ones(2):heaviside(dpl.ones(2, { dtype = 'float64' })) end,
      'heaviside: is not yet implemented for tensors with different dtypes')
    local x = dpl.randn(3, { dtype = 'float64' }):requires_grad_()
    raises(function() x:heaviside(dpl.zeros(1, { dtype = 'float64' })):sum():backward() end,
      "NotImplementedError: backward: the derivative for 'heaviside' is not implemented")
    check('isin', function(a, b) return dpl.isin(a, b) end)
    check('isin invert', function(a, b) return dpl.isin(a, b, { invert = true }) end)
    check('isin promote', function(a, b) return dpl.isin(a, b) end)
    check('isin large', function(a, b) return dpl.isin(a, b) end)
    check('isin large float', function(a, b) return dpl.isin(a, b, false, true) end)
    assert.is_true(dpl.isin(2, dpl.tensor({ 1, 2 })):item())
    assert.are.same({ false, true }, dpl.isin(dpl.tensor({ 1, 2 }), 2):totable())
    raises(function() dpl.isin(dpl.tensor({ true }), dpl.tensor({ true })) end, 'isin: unsupported input type bool')
    raises(function() dpl.isin(1, 2) end, 'isin: elements or test_elements must be a tensor')
    raises(function() dpl.isin(dpl.ones(2), dpl.ones(2), { invrt = true }) end, "isin: unknown option 'invrt'")
  end)
  it('renorm, rad2deg_, float_power_, positive, copysign_: the errors name the function', function()
    raises(function() dpl.ones(2, 2, { dtype = 'int64' }):renorm(2, 1, 1) end,
      'renorm: expected a floating point tensor, got int64')
    raises(function() dpl.ones(2):renorm(2, 1, 1) end, 'renorm: input needs at least 2 dimensions, got 1')
    raises(function() dpl.ones(2, 2):renorm(-1, 1, 1) end, 'renorm: non-positive-norm not supported')
    raises(function() dpl.ones(2, 2):renorm(2, 3, 1) end, 'renorm: dim 3 out of range')
    raises(function() dpl.ones(2, { dtype = 'int64' }):rad2deg_() end,
      "rad2deg_: result type float32 can't be cast to the desired output type int64")
    raises(function() dpl.ones(2):float_power_(2) end,
      "float_power_: the base given to float_power_ has dtype float32 but the operation's result requires dtype float64")
    local d = dpl.ones(2, { dtype = 'float64' })
    assert.are.same({ 1, 1 }, d:float_power_(3):totable())
    raises(function() dpl.tensor({ true }):positive() end, 'positive: the `+` operator, on a bool tensor is not supported')
    raises(function() dpl.tensor({ 1 }):frexp() end, 'frexp: only supports floating-point dtypes, got int64')
    raises(function() dpl.tensor({ 1 }):nextafter(dpl.tensor({ 2 })) end, 'nextafter: expected floating point tensors')
  end)
end)

describe('the complex-number names, metadata and dtype info', function()
  it('a real tensor is its own conj, real part and resolved view', function()
    local x = dpl.randn(3)
    for _, n in ipairs({ 'conj', 'resolve_conj', 'resolve_neg', 'conj_physical', 'conj_physical_', 'positive' }) do
      assert.are.equal(x, x[n](x), n)
      assert.are.equal(x, dpl[n](x), n)
    end
    assert.are.equal(x, x.real)
    assert.are.equal(x, dpl.real(x))
    assert.is_false(x:is_complex())
    assert.is_false(x:is_conj())
    assert.is_false(x:is_neg())
    assert.is_false(dpl.is_complex(x))
    raises(function() return x.imag end, 'RuntimeError: imag: imag is not implemented for tensors with non-complex dtypes')
    raises(function() dpl.imag(x) end, 'imag is not implemented for tensors with non-complex dtypes')
  end)
  it('nbytes, itemsize, pin_memory, share_memory_, char, short', function()
    local x = dpl.zeros(3, 4, { dtype = 'float64' })
    assert.are.equal(8, x.itemsize)
    assert.are.equal(96, x.nbytes)
    assert.are.equal(2 * 5 * 2, dpl.zeros(5, { dtype = 'float16' }):expand(2, 5).nbytes)
    assert.are.equal(x, x:pin_memory())
    assert.is_false(x:is_pinned())
    assert.is_false(x:is_shared())
    raises(function() x:share_memory_() end, 'NotImplementedError: share_memory_: dplhost keeps CPU tensors')
    raises(function() x:char() end, 'NotImplementedError: char: dplhost has no int8 dtype')
    raises(function() x:short() end, 'NotImplementedError: short: dplhost has no int16 dtype')
  end)
  it("finfo and iinfo give PyTorch's values", function()
    for dt, e in pairs(ref.info) do
      local r = e.eps and dpl.finfo(dt) or dpl.iinfo(dt)
      for k, v in pairs(e) do assert.are.equal(v, r[k], dt .. '.' .. k) end
      assert.are.equal(dt, r.dtype)
    end
    assert.are.equal(dpl.finfo('float32').eps, dpl.finfo().eps)
    assert.are.equal(dpl.finfo('double').max, dpl.finfo('float64').max)
    local i = dpl.iinfo('int64')
    assert.are.equal('9223372036854775807LL', tostring(i.max))
    assert.are.equal('-9223372036854775808LL', tostring(i.min))
    assert.are.equal(64, i.bits)
    assert.matches('^finfo%(resolution=1e%-06, ', tostring(dpl.finfo()))
    raises(function() dpl.finfo('int32') end, 'finfo: requires a floating point dtype, got int32')
    raises(function() dpl.iinfo('bool') end, 'iinfo: requires an integer dtype')
    raises(function() dpl.iinfo('float32') end, 'iinfo: requires an integer dtype (uint8, int32, int64), got float32')
    raises(function() dpl.finfo('int8') end, "finfo: unknown dtype 'int8'")
    raises(function() dpl.finfo(dpl.ones(1)) end, 'finfo: expected a dtype name, got a tensor')
  end)
end)

describe('splits and copies', function()
  local function vals(list)
    local r = {}
    for i, t in ipairs(list) do r[i] = t:totable() end
    return r
  end
  it("tensor_split, hsplit, vsplit, dsplit: torch's pieces, 1-based split positions", function()
    local x = dpl.arange(7)
    assert.are.same({ { 0, 1, 2 }, { 3, 4 }, { 5, 6 } }, vals(x:tensor_split(3)))
    assert.are.same({ { 0, 1, 2 }, { 3, 4 }, { 5, 6 } }, vals(dpl.tensor_split(x, dpl.tensor(3))))
    -- torch.tensor_split(x, [1, 5, -1, 10, 2])
    assert.are.same({ { 0 }, { 1, 2, 3, 4 }, { 5 }, { 6 }, {}, { 2, 3, 4, 5, 6 } }, vals(x:tensor_split({ 2, 6, -1, 11, 3 })))
    assert.are.same({ { 0 }, { 1, 2, 3, 4, 5, 6 } }, vals(x:tensor_split(dpl.tensor({ 2 }))))
    local m = dpl.arange(12):view(3, 4)
    assert.are.same({ { { 0, 1 }, { 4, 5 }, { 8, 9 } }, { { 2, 3 }, { 6, 7 }, { 10, 11 } } }, vals(m:tensor_split(2, 2)))
    assert.are.same({ { { 0, 1 }, { 4, 5 }, { 8, 9 } }, { { 2, 3 }, { 6, 7 }, { 10, 11 } } }, vals(m:hsplit(2)))
    assert.are.same({ { 0, 1 }, { 2, 3, 4, 5, 6, 7 } }, vals(dpl.hsplit(dpl.arange(8), { 3 })))
    assert.are.same({ { { 0, 1, 2, 3 } }, { { 4, 5, 6, 7 }, { 8, 9, 10, 11 } } }, vals(m:vsplit({ 2 })))
    assert.are.same({ 2, 2, 2 }, dpl.ones(2, 2, 4):dsplit(2)[2]:size())
    raises(function() x:tensor_split(0) end, 'tensor_split: number of sections must be larger than 0, got 0')
    raises(function() dpl.tensor(3):tensor_split(2) end, 'tensor_split: expected at least a 1-dimensional tensor')
    raises(function() x:tensor_split({ 0 }) end, 'tensor_split: indices are 1-based')
    raises(function() x:hsplit(2) end, 'hsplit: attempted to split along dimension 1, but the size of the dimension 7 is '
      .. 'not divisible by the split_size 2!')
    raises(function() x:vsplit(2) end, 'vsplit: requires a tensor with at least 2 dimensions, but got a tensor with 1')
    raises(function() m:dsplit(2) end, 'dsplit: requires a tensor with at least 3 dimensions')
    raises(function() x:tensor_split(1.5) end, 'tensor_split: sections must be an integer, got 1.5')
  end)
  it('ravel and narrow_copy', function()
    local m = dpl.arange(6):view(2, 3)
    assert.is_true(m:ravel():is_set_to(m))
    assert.are.same({ 0, 3, 1, 4, 2, 5 }, m:t():ravel():totable())
    local c = m:narrow_copy(2, 2, 2)
    assert.are.same({ { 1, 2 }, { 4, 5 } }, c:totable())
    assert.is_true(c:is_contiguous())
    assert.is_false(c:is_set_to(m))
    assert.are.same({ { 1, 2 } }, dpl.narrow_copy(m, 1, 1, 1):narrow(2, 2, 2):totable())
  end)
end)

describe('scatter_reduce, index_reduce, index_add', function()
  it("match torch's values and gradients for every reduction, with and without self", function()
    for _, red in ipairs({ 'sum', 'prod', 'mean', 'amax', 'amin' }) do
      for _, inc in ipairs({ true, false }) do
        check(('scatter_reduce %s %s'):format(red, inc and 'True' or 'False'), function(s, i, t) return s:scatter_reduce(1, i, t, red, inc) end)
      end
      check('scatter_reduce int64 ' .. red, function(s, i, t) return dpl.scatter_reduce(s, 1, i, t, red) end)
    end
    check('scatter_reduce int64 mean exclude', function(s, i, t) return s:scatter_reduce(1, i, t, 'mean', { include_self = false }) end)
    check('scatter_reduce dim2 amax', function(s, i, t) return s:scatter_reduce(-1, i, t, 'amax') end)
    check('scatter_reduce larger src', function(s, i, t) return s:scatter_reduce(2, i, t, 'mean', false) end)
    for _, red in ipairs({ 'prod', 'mean', 'amax', 'amin' }) do
      for _, inc in ipairs({ true, false }) do
        check(('index_reduce %s %s'):format(red, inc and 'True' or 'False'), function(s, i, t) return s:index_reduce(2, i, t, red, inc) end)
      end
    end
    check('index_add', function(s, i, t) return s:index_add(1, i, t, 2.5) end)
  end)
  it('in place, and the errors', function()
    local t = dpl.zeros(3)
    assert.are.equal(t, t:scatter_reduce_(1, dpl.tensor({ 1, 1, 3 }), dpl.tensor({ 2, 5, 1 }, { dtype = 'float32' }), 'amax'))
    assert.are.same({ 5, 0, 1 }, t:totable())
    assert.are.same({ 10, 0, 1 }, t:index_reduce_(1, dpl.tensor({ 1 }), dpl.tensor({ 2 }, { dtype = 'float32' }), 'prod'):totable())
    local b = dpl.tensor({ true, false }):scatter_reduce(1, dpl.tensor({ 1, 1, 2 }), dpl.tensor({ true, false, true }), 'sum')
    assert.are.same({ true, true }, b:totable())
    local i, s = dpl.tensor({ 1, 2 }), dpl.ones(2)
    raises(function() dpl.zeros(2):scatter_reduce(1, i, s, 'max') end,
      "RuntimeError: scatter_reduce: reduce argument must be either sum, prod, mean, amax or amin, got 'max'")
    raises(function() dpl.zeros(2):index_reduce(1, i, s, 'sum') end,
      "index_reduce: reduce argument must be either prod, mean, amax or amin, got 'sum'")
    raises(function() dpl.zeros(2):scatter_reduce(1, i, s:double(), 'sum') end,
      'scatter_reduce: expected self.dtype to be equal to src.dtype (float32 and float64)')
    raises(function() dpl.zeros(2):scatter_reduce(1, dpl.tensor({ 1, 3 }), s, 'sum') end,
      'scatter_reduce: index 3 is out of range for dim 1 of size 2 (expected 1..2)')
    raises(function() dpl.zeros(2):scatter_reduce(1, i:float(), s, 'sum') end,
      'scatter_reduce: expected an int64 (or int32) index tensor, got float32')
    raises(function() dpl.zeros(2):scatter_reduce(1, i, s, 'sum', 1) end, 'scatter_reduce: include_self must be a boolean')
    raises(function() dpl.zeros(2, 2):scatter_reduce(1, i, s, 'sum') end, 'must have the same number of dimensions')
    raises(function() dpl.zeros(2, 2):index_reduce(1, i, dpl.ones(3, 2), 'mean') end,
      'index_reduce: source [3, 2] must have the shape of self [2, 2] with dim 1 of size 2')
    raises(function() dpl.tensor({ true }):scatter_reduce(1, dpl.tensor({ 1 }), dpl.tensor({ true }), 'mean') end,
      "scatter_reduce: reduce 'mean' is not implemented for bool")
  end)
end)

describe('histogram', function()
  it("matches torch's counts and edges", function()
    check('histogram bins', function(t) return t:histogram(7) end)
    check('histogram range', function(t) return dpl.histogram(t, 4, { range = { -1.0, 1.5 } }) end)
    check('histogram edges', function(t, e) return t:histogram(e) end)
    check('histogram weight density', function(t, w) return t:histogram(5, { weight = w, density = true }) end)
    check('histogram float64 density', function(t) return t:histogram(6, { density = true }) end)
    check('histogram constant', function(t) return t:histogram(2) end)
    check('histogram edges float64 weight', function(t, e, w) return t:histogram(e, { weight = w }) end)
  end)
  it('refuses bad input with messages naming it', function()
    local x = dpl.randn(5)
    raises(function() dpl.tensor({ 1, 2 }):histogram(3) end, 'histogram: expected a float32 or float64 input, got int64')
    raises(function() x:histogram(0) end, 'histogram: bins must be > 0, got 0')
    raises(function() x:histogram(2, { range = { 2, 1 } }) end, 'histogram: min should not exceed max, but got min 2 max 1')
    raises(function() dpl.tensor({ 1, 0 / 0 }, { dtype = 'float32' }):histogram(2) end, 'is not finite')
    raises(function() x:histogram(dpl.ones(1, 2)) end, 'histogram: bins tensor should have one dimension, got 2')
    raises(function() x:histogram(2, { weight = dpl.ones(5, { dtype = 'int64' }) }) end,
      'histogram: weight must have the dtype of input (float32), got int64')
    raises(function() x:histogram(2, { wieght = x }) end, "histogram: unknown option 'wieght'")
    raises(function() x:histogram(2, { range = 3 }) end, 'histogram: range must be a pair of numbers')
  end)
end)

describe('cov, corrcoef, cartesian_prod, combinations', function()
  it('match torch: values and gradients', function()
    check('cov', function(t) return t:cov() end)
    check('cov correction0', function(t) return dpl.cov(t, { correction = 0 }) end)
    check('cov 1d', function(t) return t:cov() end)
    check('cov fweights', function(t, f) return t:cov({ fweights = f }) end)
    check('cov aweights', function(t, a) return t:cov({ aweights = a }) end)
    check('cov both', function(t, f, a) return t:cov({ fweights = f, aweights = a }) end)
    check('cov int', function(t) return t:cov() end)
    check('corrcoef', function(t) return t:corrcoef() end)
    check('corrcoef 1d', function(t) return dpl.corrcoef(t) end)
    check('cartesian_prod', function(a, b, c) return dpl.cartesian_prod(a, b, c) end)
    check('combinations', function(t) return dpl.combinations(t) end)
    check('combinations r3', function(t) return dpl.combinations(t, 3) end)
    check('combinations replacement', function(t) return dpl.combinations(t, { with_replacement = true }) end)
  end)
  it('edge cases and errors', function()
    raises(function() dpl.ones(2, 2, 2):cov() end, 'cov: expected input to have two or fewer dimensions but got an input with 3')
    raises(function() dpl.ones(1, 3):cov({ fweights = dpl.ones(3) }) end,
      'cov: expected fweights to have integral dtype but got fweights with float32 dtype')
    raises(function() dpl.ones(1, 3):cov({ fweights = dpl.tensor({ 1, -2, 1 }) }) end, 'cov: fweights cannot be negative')
    raises(function() dpl.ones(1, 3):cov({ aweights = dpl.tensor({ 1, 2, 1 }) }) end,
      'cov: expected aweights to have floating point dtype')
    raises(function() dpl.ones(1, 3):cov({ aweights = dpl.ones(2) }) end, 'cov: expected aweights to have the same numel')
    raises(function() dpl.ones(1, 3):cov({ corection = 0 }) end, "cov: unknown option 'corection'")
    assert.are.same({ 1 }, { dpl.cartesian_prod(dpl.tensor({ 1, 2 })):size(1) / 2 })
    assert.are.same({ 0 }, dpl.combinations(dpl.tensor({ 1, 2, 3 }), 0):size())
    assert.are.same({ 0, 4 }, dpl.combinations(dpl.tensor({ 1, 2, 3 }), 4):size())
    raises(function() dpl.combinations(dpl.ones(1, 3)) end, 'combinations: expect a 1D vector, but got shape [1, 3]')
    raises(function() dpl.combinations(dpl.ones(3), -1) end, 'combinations: expect a non-negative number, but got -1')
    raises(function() dpl.cartesian_prod(dpl.ones(2), dpl.ones(2, { dtype = 'int64' })) end,
      'cartesian_prod: expects all tensors to have the same dtype')
  end)
end)

describe('trapezoid, diag_embed, vander, addbmm', function()
  it('match torch: values and gradients', function()
    check('trapezoid', function(y) return dpl.trapezoid(y) end)
    check('trapezoid dx', function(y) return dpl.trapz(y, { dx = 0.5, dim = 1 }) end)
    check('trapezoid x', function(y, x) return dpl.trapezoid(y, x) end)
    check('trapezoid x full', function(y, x) return dpl.trapezoid(y, x, { dim = 1 }) end)
    check('trapezoid int', function(y) return dpl.trapezoid(y) end)
    check('cumulative_trapezoid', function(y) return dpl.cumulative_trapezoid(y) end)
    check('cumulative_trapezoid dx', function(y) return dpl.cumulative_trapezoid(y, { dx = 2.0, dim = 1 }) end)
    check('cumulative_trapezoid x', function(y, x) return dpl.cumulative_trapezoid(y, x) end)
    check('cumulative_trapezoid int', function(y) return dpl.cumulative_trapezoid(y) end)
    check('diag_embed', function(t) return t:diag_embed() end)
    check('diag_embed offset', function(t) return dpl.diag_embed(t, 1) end)
    check('diag_embed neg dims', function(t) return t:diag_embed({ offset = -2, dim1 = 1, dim2 = 3 }) end)
    check('diag_embed 1d', function(t) return t:diag_embed(0, 2, 1) end)
    check('vander', function(x) return dpl.vander(x) end)
    check('vander N increasing', function(x) return dpl.vander(x, 3, true) end)
    check('vander grad', function(x) return dpl.vander(x) end)
    check('vander int32', function(x) return dpl.vander(x) end)
    check('vander N0', function(x) return dpl.vander(x, { N = 0 }) end)
    check('addbmm', function(c, a, b) return c:addbmm(a, b, { beta = 0.5, alpha = 2.0 }) end)
    check('addbmm broadcast', function(c, a, b) return dpl.addbmm(c, a, b) end)
    check('addbmm int', function(c, a, b) return dpl.addbmm(c, a, b, { beta = 2, alpha = 3 }) end)
  end)
  it('in place, and the errors', function()
    local c = dpl.zeros(2, 2)
    assert.are.equal(c, c:addbmm_(dpl.ones(3, 2, 4), dpl.ones(3, 4, 2)))
    assert.are.same({ { 12, 12 }, { 12, 12 } }, c:totable())
    raises(function() dpl.zeros(2):addbmm_(dpl.ones(1, 2, 2), dpl.ones(1, 2, 2)) end,
      'addbmm_: self [2] must have the shape of the result [2, 2]')
    raises(function() dpl.addbmm(dpl.zeros(2, 2), dpl.ones(2, 2), dpl.ones(1, 2, 2)) end, 'addbmm: batch1 must be a 3D tensor')
    raises(function() dpl.addbmm(dpl.zeros(2, 2), dpl.ones(1, 2, 3), dpl.ones(1, 2, 2)) end,
      'addbmm: batch1 [1, 2, 3] and batch2 [1, 2, 2] cannot be multiplied')
    raises(function() dpl.ones(2):diag_embed(0, 1, 1) end, 'diag_embed: diagonal dimensions cannot be identical 1, 1')
    raises(function() dpl.vander(dpl.ones(2, 2)) end, 'vander: x must be a one-dimensional tensor')
    raises(function() dpl.vander(dpl.ones(2), -1) end, 'vander: N must be non-negative, got -1')
    raises(function() dpl.trapezoid(dpl.ones(3), dpl.ones(2)) end,
      'trapezoid: there must be one `x` value for each sample point')
    raises(function() dpl.trapezoid(dpl.ones(3), dpl.ones(3), { dx = 1 }) end, 'trapezoid: give either x or dx, not both')
    raises(function() dpl.trapezoid(dpl.tensor({ true, false })) end, 'trapezoid: received a bool input')
    assert.are.same({ 2 }, dpl.trapezoid(dpl.ones(2, 0)):size())
  end)
end)
