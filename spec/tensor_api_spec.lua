-- tensor_api_spec.lua: the torch.Tensor 1.13 names of lua/dpl/tensor_api.lua (in-place and alias
-- forms, addmv/addr, random fills, fmax/fmin, logaddexp2, nanmedian, diagflat, the *_scatter
-- functions, unique_consecutive, prelu, hardshrink, angle, resize_, new, apply_/map_/map2_, the
-- predicates and the names dplhost cannot support): values, dtypes, shapes and float64 gradients
-- against PyTorch 1.13 (spec/fixtures/tensor_api_ref.lua, written by
-- spec/fixtures/gen_tensor_api_ref.py), the distributions of the random fills, and the errors.
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local raises = h.raises
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/tensor_api_ref.lua')

local function R(name) return assert(ref[name], 'no fixture case ' .. name) end
local tr = require 'spec.support.torch_ref' -- (T, same: the fixtures' {v=, s=, d=} tensors)
local T, same = tr.T, tr.same
local checked = {}

-- case name: f(inputs...) against y (a list of results: f returns them in order); with gx,
-- the gradients of sum(f(...)[1] * g) too
local function check(name, f, tol)
  local c = R(name)
  checked[name] = true
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
    assert.are.equal(#c.y, #ys, name .. ': number of results')
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

describe('addmv, addr, addmm_ and the in-place and alias forms', function()
  it('match torch: values and gradients', function()
    check('addmv', function(c, a, b) return c:addmv(a, b, { beta = 0.5, alpha = 2.0 }) end)
    check('addmv broadcast', function(c, a, b) return dpl.addmv(c, a, b) end)
    check('addmv int', function(c, a, b) return c:addmv(a, b, { beta = 2, alpha = 3 }) end)
    check('addmv beta0', function(c, a, b) return c:addmv(a, b, { beta = 0 }) end)
    check('addmv_', function(c, a, b) return c:clone():addmv_(a, b, { alpha = -1.5 }) end)
    check('addr', function(c, a, b) return c:addr(a, b, { beta = -1.0, alpha = 0.5 }) end)
    check('addr broadcast', function(c, a, b) return dpl.addr(c, a, b) end)
    check('addr int', function(c, a, b) return c:addr(a, b, { alpha = 2 }) end)
    check('addr_', function(c, a, b) return c:clone():addr_(a, b, { beta = 2.0 }) end)
    check('addmm_', function(c, a, b) return c:clone():addmm_(a, b, { beta = 0.5, alpha = 3.0 }) end)
    check('addmm_ int', function(c, a, b) return c:clone():addmm_(a, b, { beta = 2 }) end)
    check('cumsum_', function(t) return t:clone():cumsum_(2) end)
    check('cumprod_', function(t) return t:clone():cumprod_(1) end)
    check('cumsum_ int32', function(t) return t:clone():cumsum_(1) end)
    check('cumprod_ uint8', function(t) return t:clone():cumprod_(-1) end)
    check('floor_divide_', function(t) return t:clone():floor_divide_(3) end)
    check('floor_divide_ float', function(t, o) return t:clone():floor_divide_(o) end)
    check('divide floor', function(t) return t:divide(-3, 'floor') end)
    check('divide trunc', function(t, o) return t:divide(o, { rounding_mode = 'trunc' }) end)
    check('divide', function(t, o) return dpl.divide(t, o) end)
    check('divide_', function(t, o) return t:clone():divide_(o) end)
    check('multiply', function(t, o) return dpl.multiply(t, o) end)
    check('multiply_', function(t, o) return t:clone():multiply_(o) end)
    check('subtract', function(t, o) return dpl.subtract(t, o, 2) end)
    check('subtract_', function(t, o) return t:clone():subtract_(o, -0.5) end)
    check('negative_', function(t) return t:clone():negative_() end)
    check('clip_', function(t) return t:clone():clip_(-0.5, 0.5) end)
    for _, n in ipairs({ 'greater', 'greater_equal', 'less', 'less_equal', 'not_equal' }) do
      check(n, function(a, b) return a[n](a, b) end)
      check(n, function(a, b) return dpl[n](a, b) end)
      check(n .. '_', function(a, b) local c = a:clone() return c[n .. '_'](c, b) end)
    end
    check('greater_ int', function(a) return a:clone():greater_(1.5) end)
  end)

  it('the in-place forms return self and refuse what PyTorch refuses', function()
    local t = dpl.randn(2, 2)
    assert.are.equal(t, t:addmm_(dpl.randn(2, 3), dpl.randn(3, 2)))
    assert.are.equal(t, t:clip_(-1, 1))
    assert.are.equal(t, t:negative_())
    assert.are.equal(t, t:cumsum_(1))
    assert.are.equal(t, t:swapaxes_(1, 2))
    assert.are.equal(t, t:swapdims_(1, -1))
    local s = dpl.zeros(2, 3)
    assert.are.equal(s, s:swapaxes_(1, 2))
    assert.are.same({ 3, 2 }, s:size())
    raises(function() dpl.ones(2):addmm_(dpl.ones(2, 3), dpl.ones(3, 2)) end,
      "RuntimeError: addmm_: the result shape [2, 2] does not match the in-place tensor's shape [2]")
    raises(function() dpl.ones(1):addmv_(dpl.ones(2, 2), dpl.ones(2)) end,
      "addmv_: the result shape [2] does not match the in-place tensor's shape [1]")
    raises(function() dpl.tensor({ 1, 2 }):floor_divide_(2.5) end,
      'floor_divide_: the result type float32 cannot be stored in place in a int64 tensor')
    raises(function() dpl.tensor({ 1, 2 }, { dtype = 'int32' }):cumsum_(1, 'float64') end,
      "cumsum_: the dtype float64 does not match the in-place tensor's dtype int32")
    raises(function() dpl.tensor({ true }):cumsum_(1) end, 'cumsum_: not implemented for bool tensors')
    raises(function() dpl.tensor({ 1, 2 }):addmv(dpl.ones(2, 2), dpl.ones(2)) end,
      'addmv: expected the operands to have one dtype, got int64 (input) and float32')
    raises(function() dpl.tensor({ 1, 2 }):addr(dpl.tensor({ 1, 2 }), dpl.tensor({ 1, 2 }), { beta = 0.5 }) end,
      'addr: for integral input tensors, beta must not be a decimal, got 0.5')
    raises(function() dpl.ones(2):addmv(dpl.ones(2), dpl.ones(2)) end, 'addmv: expected a 2-d mat and a 1-d vec')
    raises(function() dpl.ones(2):addr(dpl.ones(2), dpl.ones(2), { betta = 1 }) end, "addr: unknown option 'betta'")
    local leaf = dpl.ones(2, 2, { dtype = 'float64' }):requires_grad_()
    raises(function() leaf:addmm_(dpl.ones(2, 2, { dtype = 'float64' }), dpl.ones(2, 2, { dtype = 'float64' })) end,
      'addmm_: a leaf tensor that requires grad is being used in an in-place operation')
    raises(function() dpl.ones(2):divide(1, 'floor', 3) end, 'divide: too many arguments')
  end)
end)

describe('random fills', function()
  local N = 200000
  local function moments(t)
    local x = t:double()
    return x:mean():item(), x:var():item()
  end
  it('draw from the distributions (moments and quantiles of many draws)', function()
    dpl.manual_seed(7)
    local m, v = moments(dpl.empty(N):exponential_(2))
    assert.is_true(math.abs(m - 0.5) < 0.01, m)
    assert.is_true(math.abs(v - 0.25) < 0.01, v)
    local g = dpl.empty(N, { dtype = 'int64' }):geometric_(0.25)
    m, v = moments(g)
    assert.is_true(math.abs(m - 4) < 0.05, m)      -- 1/p
    assert.is_true(math.abs(v - 12) < 0.4, v)      -- (1-p)/p^2
    assert.are.equal(1, g:min():item())
    assert.is_true(math.abs(g:eq(1):double():mean():item() - 0.25) < 0.005)
    local ln = dpl.empty(N, { dtype = 'float64' }):log_normal_(0.5, 0.25)
    m, v = moments(ln:log())
    assert.is_true(math.abs(m - 0.5) < 0.005, m)
    assert.is_true(math.abs(v - 0.0625) < 0.002, v)
    assert.is_true(math.abs(ln:mean():item() - math.exp(0.5 + 0.0625 / 2)) < 0.01)
    -- Cauchy: no moments; its median and quartiles are median -+ sigma
    local c = dpl.empty(N, { dtype = 'float64' }):cauchy_(1, 2)
    local q = c:quantile(dpl.tensor({ 0.25, 0.5, 0.75 }, { dtype = 'float64' })):totable()
    assert.is_true(math.abs(q[1] + 1) < 0.05 and math.abs(q[2] - 1) < 0.03 and math.abs(q[3] - 3) < 0.05,
      table.concat(q, ' '))
    m = moments(dpl.empty(N):exponential_()) -- default lambd 1
    assert.is_true(math.abs(m - 1) < 0.02, m)
    assert.is_true(math.abs(dpl.empty(N, { dtype = 'float64' }):log_normal_():log():mean():item() - 1) < 0.03)
  end)
  it('repeat under a seed, fill in place, keep the dtype and return self', function()
    for _, f in ipairs({
      function(t) return t:cauchy_() end, function(t) return t:exponential_(3) end,
      function(t) return t:geometric_(0.5) end, function(t) return t:log_normal_(0, 1) end }) do
      dpl.manual_seed(42)
      local a = dpl.empty(3, 4, { dtype = 'float64' })
      assert.are.equal(a, f(a))
      dpl.manual_seed(42)
      local b = f(dpl.empty(3, 4, { dtype = 'float64' }))
      assert.is_true(a:equal(b))
      assert.is_false(a:equal(f(dpl.empty(3, 4, { dtype = 'float64' }))))
    end
    local half = dpl.empty(4, { dtype = 'float16' }):exponential_()
    assert.are.equal('float16', half.dtype)
    local view = dpl.zeros(4, 4):t()
    view:exponential_()
    assert.is_true(view:gt(0):all():item())
    assert.is_true(dpl.empty(3):exponential_(0):eq(math.huge):all():item()) -- as torch: inf
  end)
  it('refuse the dtypes and parameters PyTorch refuses', function()
    raises(function() dpl.zeros(2, { dtype = 'int64' }):cauchy_() end,
      'RuntimeError: cauchy_: expected a floating-point tensor, got int64')
    raises(function() dpl.zeros(2, { dtype = 'int32' }):exponential_() end, 'exponential_: expected a floating-point tensor')
    raises(function() dpl.zeros(2, { dtype = 'uint8' }):log_normal_() end, 'log_normal_: expected a floating-point tensor')
    raises(function() dpl.zeros(2, { dtype = 'bool' }):geometric_(0.5) end,
      'geometric_: expected a floating-point tensor or an integer one, got bool')
    raises(function() dpl.zeros(2):exponential_(-1) end, 'exponential_: expects lambd >= 0, got -1')
    raises(function() dpl.zeros(2):geometric_(1) end, 'geometric_: expects p in (0, 1), got 1')
    raises(function() dpl.zeros(2):geometric_(0) end, 'geometric_: expects p in (0, 1), got 0')
    raises(function() dpl.zeros(2):geometric_() end, 'geometric_: p must be a number, got nil')
    raises(function() dpl.zeros(2):log_normal_(0, 0) end, 'log_normal_: expects std > 0, got 0')
    raises(function() dpl.zeros(2):cauchy_('a') end, 'ValueError: cauchy_: median must be a number, got string')
    raises(function() dpl.zeros(2):requires_grad_():exponential_() end,
      'exponential_: a leaf tensor that requires grad is being used in an in-place operation')
  end)
end)

describe('elementwise: fmax, fmin, logaddexp2, isposinf, isneginf, isreal, angle, hardshrink, prelu', function()
  it('match torch: values, NaN rules, dtypes and gradients', function()
    check('fmax', function(a, b) return a:fmax(b) end)
    check('fmin', function(a, b) return dpl.fmin(a, b) end)
    check('fmax grad', function(a, b) return a:fmax(b) end)
    check('fmin grad', function(a, b) return a:fmin(b) end)
    check('fmax ties', function(a, b) return a:fmax(b) end)
    check('fmax int float', function(a, b) return a:fmax(b) end)
    check('fmin int', function(a, b) return a:fmin(b) end)
    check('fmax bool', function(a, b) return a:fmax(b) end)
    check('logaddexp2', function(a, b) return a:logaddexp2(b) end)
    check('logaddexp2 inf', function(a, b) return dpl.logaddexp2(a, b) end)
    check('logaddexp2 float32', function(a, b) return a:logaddexp2(b) end, 1e-5)
    check('isneginf', function(t) return t:isneginf() end)
    check('isposinf', function(t) return dpl.isposinf(t) end)
    check('isposinf int', function(t) return t:isposinf() end)
    check('isreal', function(t) return t:isreal() end)
    check('angle', function(t) return t:angle() end)
    check('angle int', function(t) return dpl.angle(t) end)
    check('angle bool', function(t) return t:angle() end)
    check('hardshrink', function(t) return t:hardshrink() end)
    check('hardshrink lambd', function(t) return dpl.hardshrink(t, 1.0) end)
    check('prelu', function(t, w) return t:prelu(w) end)
    check('prelu one', function(t, w) return dpl.prelu(t, w) end)
    check('prelu 0d weight', function(t, w) return t:prelu(w) end)
    check('prelu 1d input', function(t, w) return t:prelu(w) end)
  end)
  it('name the function in their errors', function()
    raises(function() dpl.ones(2):fmax(1) end, 'ValueError: fmax: other must be a tensor, got number')
    raises(function() dpl.ones(2):fmin(dpl.ones(3)) end, 'cannot be broadcast')
    raises(function() dpl.tensor({ 1, 2 }):hardshrink() end, 'hardshrink: expected a floating-point tensor, got int64')
    raises(function() dpl.ones(2, 3):prelu(dpl.ones(2)) end,
      'prelu: mismatch of parameter numbers and input channel size: 2 parameters, 3 channels')
    raises(function() dpl.ones(2, 3):prelu(dpl.ones(1, 3)) end, 'prelu: expected weight to be a 0-d or 1-d tensor')
    raises(function() dpl.ones(2, 3):prelu(dpl.ones(1, { dtype = 'float64' })) end,
      "prelu: weight has dtype float64, expected float32 (the input's)")
    raises(function() dpl.tensor({ 1 }):prelu(dpl.tensor({ 1 })) end, 'prelu: expected a floating-point input')
    raises(function() dpl.ones(2):logaddexp2('a') end, 'logaddexp2: other must be a tensor or a number, got string')
  end)
end)

describe('msort, nanmedian', function()
  it('match torch: values, 1-based indices and gradients', function()
    check('msort', function(t) return t:msort() end)
    check('msort int', function(t) return dpl.msort(t) end)
    check('nanmedian dim', function(t) return t:nanmedian(2) end)
    check('nanmedian dim1', function(t) return dpl.nanmedian(t, 1) end)
    check('nanmedian keepdim', function(t) return t:nanmedian(-1, true) end)
    check('nanmedian keepdim', function(t) return t:nanmedian({ dim = 2, keepdim = true }) end)
    check('nanmedian all', function(t) return t:nanmedian() end)
    check('nanmedian all nan', function(t) return t:nanmedian() end)
    check('nanmedian empty', function(t) return t:nanmedian() end)
    check('nanmedian int', function(t) return t:nanmedian(1) end)
    check('nanmedian 0d', function(t) return t:nanmedian(1) end)
    check('nanmedian no nan', function(t) return t:nanmedian(2) end)
    -- an all-NaN slice: NaN at its first NaN (torch's index there depends on its nth_element)
    local v, i = dpl.tensor({ { 1, 0 / 0 }, { 0 / 0, 0 / 0 } }):nanmedian(2)
    assert.is_true(v[2]:isnan():item())
    assert.are.same({ 1, 1 }, i:totable())
  end)
  it('errors', function()
    raises(function() dpl.ones(2, 0):nanmedian(2) end,
      'RuntimeError: nanmedian: expected reduction dim 2 to have non-zero size')
    raises(function() dpl.ones(2):nanmedian(3) end, 'nanmedian: dim 3 out of range')
    raises(function() dpl.ones(2):nanmedian(1, 1) end, 'nanmedian: keepdim must be true or false, got 1')
    raises(function() dpl.ones(2):nanmedian({ dims = 1 }) end, "nanmedian: unknown option 'dims'")
  end)
end)

describe('diagflat and the scatter functions', function()
  it('match torch: values and gradients', function()
    check('diagflat', function(t) return t:diagflat() end)
    check('diagflat 2d offset', function(t) return dpl.diagflat(t, -1) end)
    check('diagflat 0d', function(t) return t:diagflat() end)
    check('diagonal_scatter', function(t, s) return dpl.diagonal_scatter(t, s) end)
    check('diagonal_scatter offset', function(t, s) return t:diagonal_scatter(s, 1) end)
    check('diagonal_scatter dims', function(t, s) return t:diagonal_scatter(s, { offset = -1, dim1 = 1, dim2 = 3 }) end)
    check('select_scatter', function(t, s) return dpl.select_scatter(t, s, 2, -1) end)
    check('select_scatter dim0', function(t, s) return t:select_scatter(s, 1, 2) end)
    check('select_scatter dtype', function(t, s) return t:select_scatter(s, 1, 1) end)
    check('slice_scatter', function(t, s) return t:slice_scatter(s, 1, 2, 3) end)
    check('slice_scatter step', function(t, s) return dpl.slice_scatter(t, s, 1, nil, nil, 2) end)
    check('slice_scatter step', function(t, s) return t:slice_scatter(s, { step = 2 }) end)
    check('slice_scatter dim2 neg', function(t, s) return t:slice_scatter(s, 2, -2) end)
    check('slice_scatter clamp', function(t, s) return t:slice_scatter(s, { dim = 2, start = 2, ['end'] = 100, step = 2 }) end)
    check('as_strided_scatter', function(t, s) return dpl.as_strided_scatter(t, s, { 2, 2 }, { 1, 2 }, 1) end)
    check('as_strided_scatter default', function(t, s) return t:as_strided_scatter(s, { 2 }, { 3 }) end)
  end)
  it('errors', function()
    raises(function() dpl.zeros(2, 3):diagonal_scatter(dpl.ones(3)) end,
      'RuntimeError: diagonal_scatter: expected src to have a size equal to the slice of self: src size [3], slice size [2]')
    raises(function() dpl.zeros(2, 3):select_scatter(dpl.ones(2), 2, 4) end, 'out of range')
    raises(function() dpl.zeros(4, 3):slice_scatter(dpl.ones(2, 3), 1, 1, 4, 0) end, 'slice_scatter: step must be positive')
    raises(function() dpl.zeros(4, 3):slice_scatter(dpl.ones(2, 3), 1, 0) end, 'slice_scatter: start 0 (positions are 1-based')
    raises(function() dpl.zeros(4, 3):slice_scatter(dpl.ones(3, 3), 1, 1, 2) end,
      'slice_scatter: expected src to have a size equal to the slice of self: src size [3, 3], slice size [2, 3]')
    raises(function() dpl.zeros(4):as_strided_scatter(dpl.ones(3), { 2 }, { 2 }) end, 'slice size [2]')
    raises(function() dpl.zeros(4):select_scatter('a', 1, 1) end, 'select_scatter: src must be a tensor')
  end)
end)

describe('unique_consecutive, split_with_sizes, unsafe_split, unsafe_chunk', function()
  it('unique_consecutive matches torch (1-based inverse)', function()
    check('unique_consecutive', function(t) return t:unique_consecutive() end)
    check('unique_consecutive all', function(t) return dpl.unique_consecutive(t, true, true) end)
    check('unique_consecutive nan', function(t) return t:unique_consecutive({ return_inverse = true, return_counts = true }) end)
    check('unique_consecutive dim0', function(t) return t:unique_consecutive(true, true, 1) end)
    check('unique_consecutive dim1', function(t) return t:unique_consecutive({ return_inverse = true, return_counts = true, dim = -1 }) end)
    check('unique_consecutive counts', function(t) return t:unique_consecutive(false, true) end)
    check('unique_consecutive 0d', function(t) return t:unique_consecutive(true, true) end)
    check('unique_consecutive empty', function(t) return t:unique_consecutive(true, true) end)
    local x = dpl.tensor({ 1, 1, 2 }, { dtype = 'float32' }):requires_grad_()
    local u = x:unique_consecutive()
    raises(function() u:sum():backward() end, "NotImplementedError: backward: the derivative for 'unique_consecutive'")
    raises(function() dpl.tensor(3):unique_consecutive(false, false, 1) end, 'unique_consecutive: dim given for a 0-d tensor')
    raises(function() dpl.ones(3):unique_consecutive({ return_counts = 1 }) end,
      'unique_consecutive: return_counts must be true or false, got 1')
  end)
  it('split_with_sizes needs sizes summing to the dim; unsafe_split and unsafe_chunk are split and chunk', function()
    local t = dpl.arange(10):reshape(2, 5)
    local p = t:split_with_sizes({ 2, 0, 3 }, 2)
    assert.are.equal(3, #p)
    assert.are.same({ { 2, 3, 4 }, { 7, 8, 9 } }, p[3]:totable())
    assert.are.same({ 2, 0 }, p[2]:size())
    assert.are.equal(2, #dpl.split_with_sizes(t, { 1, 1 }))
    raises(function() t:split_with_sizes({ 2, 2 }, 2) end,
      "RuntimeError: split_with_sizes: expects split_sizes to sum exactly to 5 (the input's size in dim 2), got a sum of 4")
    raises(function() t:split_with_sizes({ 2, -1, 4 }, 2) end, 'split_with_sizes: expects split_sizes to have only non-negative')
    raises(function() t:split_with_sizes(2) end, 'split_with_sizes: split_sizes must be a list of integers, got 2')
    assert.are.same({ 2, 2, 1 }, { t:unsafe_split(2, 2)[1]:size(2), t:unsafe_split(2, 2)[2]:size(2), t:unsafe_split(2, 2)[3]:size(2) })
    assert.are.equal(2, #dpl.unsafe_chunk(t, 2, 2))
    assert.are.same({ 2, 3 }, t:unsafe_chunk(2, 2)[1]:size())
  end)
end)

describe('resize_, resize_as_, new, new_empty_strided', function()
  it("resize_ keeps the elements that fit and the storage offset, as PyTorch's", function()
    local t = dpl.arange(6, { dtype = 'float32' })
    assert.are.equal(t, t:resize_(2, 2))
    assert.are.same({ { 0, 1 }, { 2, 3 } }, t:totable())
    assert.are.same({ 2, 1 }, { t:stride(1), t:stride(2) })
    t:resize_({ 6 })
    assert.are.same({ 0, 1, 2, 3, 4, 5 }, t:totable()) -- the storage kept them
    local v = dpl.arange(6, { dtype = 'float64' }):narrow(1, 3, 4)
    v:resize_(3)
    assert.are.same({ 2, 3, 4 }, v:totable())
    assert.are.equal(2, v:storage_offset())
    v:resize_(2, 5) -- grows: a new storage with the old elements at their places
    assert.are.equal(2, v:storage_offset())
    assert.are.same({ 2, 3, 4, 5 }, { v[1][1]:item(), v[1][2]:item(), v[1][3]:item(), v[1][4]:item() })
    assert.is_true(v:is_contiguous())
    v:fill_(7)
    assert.are.equal(70, v:sum():item())
    -- the same shape changes nothing (a transposed view stays transposed)
    local tr = dpl.arange(6, { dtype = 'float32' }):view(2, 3):t()
    tr:resize_(3, 2)
    assert.are.same({ { 0, 3 }, { 1, 4 }, { 2, 5 } }, tr:totable())
    tr:resize_(2, 3) -- another shape: contiguous strides over the storage
    assert.are.same({ { 0, 1, 2 }, { 3, 4, 5 } }, tr:totable())
    local e = dpl.arange(4, { dtype = 'float32' }):expand(2, 4)
    assert.are.same({ 0, 1, 2 }, e:resize_(3):totable())
    local z = dpl.empty(0)
    z:resize_(3, 3):fill_(1)
    assert.are.equal(9, z:sum():item())
    local r = dpl.arange(4, { dtype = 'float32' })
    assert.are.equal(r, r:resize_as_(dpl.ones(2, 2)))
    assert.are.same({ { 0, 1 }, { 2, 3 } }, r:totable())
    raises(function() dpl.ones(2):requires_grad_():resize_(3) end, 'RuntimeError: resize_: cannot resize a tensor that requires grad')
    raises(function() dpl.ones(2):resize_(-1) end, 'resize_: size 1 must be a non-negative integer, got -1')
    raises(function() dpl.ones(2):resize_as_(3) end, 'resize_as_: the_template must be a tensor')
  end)
  it('new: the legacy constructor with t\'s dtype and device', function()
    local t = dpl.tensor({ 1, 2 })
    local e = t:new()
    assert.are.same({ 0 }, e:size())
    assert.are.equal('int64', e.dtype)
    assert.are.same({ 2, 3 }, t:new(2, 3):size())
    local d = t:new({ 1.5, 2 })
    assert.are.equal('int64', d.dtype)
    assert.are.same({ 1, 2 }, d:totable())
    local same = t:new(t)
    assert.is_true(same:is_set_to(t))
    raises(function() t:new(dpl.ones(2)) end, 'TypeError: new: expected a tensor of dtype int64 on cpu')
    raises(function() t:new(2.5) end, 'TypeError: new: expected sizes (non-negative integers)')
  end)
  it('new_empty_strided', function()
    local t = dpl.zeros(4, { dtype = 'float64' })
    local s = t:new_empty_strided({ 2, 3 }, { 1, 2 })
    assert.are.same({ 2, 3 }, s:size())
    assert.are.same({ 1, 2 }, { s:stride(1), s:stride(2) })
    assert.are.equal('float64', s.dtype)
    local i = t:new_empty_strided({ 2 }, { 3 }, { dtype = 'int32', requires_grad = false })
    assert.are.equal('int32', i.dtype)
    assert.is_true(t:new_empty_strided({ 2 }, { 1 }, { requires_grad = true }).requires_grad)
    assert.are.same({ 0, 5 }, t:new_empty_strided({ 0, 5 }, { 5, 1 }):size())
    raises(function() t:new_empty_strided({ 2 }, { 1, 1 }) end, 'new_empty_strided: size and stride must have the same length')
    raises(function() t:new_empty_strided({ 2 }, { 1 }, { dtyp = 'int32' }) end, "new_empty_strided: unknown option 'dtyp'")
  end)
end)

describe('predicates and metadata', function()
  it('is PyTorch\'s', function()
    local t = dpl.ones(2, 3)
    assert.is_true(t:is_same_size(dpl.zeros(2, 3)))
    assert.is_false(dpl.ones(3):is_same_size(dpl.ones(3, 1)))
    assert.is_true(dpl.is_same_size(t, t))
    assert.is_true(t:is_signed())
    assert.is_true(dpl.ones(1, { dtype = 'int32' }):is_signed())
    assert.is_false(dpl.ones(1, { dtype = 'uint8' }):is_signed())
    assert.is_false(dpl.is_signed(dpl.ones(1, { dtype = 'bool' })))
    assert.is_false(dpl.zeros(1, 1):is_nonzero())
    assert.is_true(dpl.tensor({ 0 / 0 }):is_nonzero())
    assert.is_true(dpl.tensor(true):is_nonzero())
    assert.is_true(dpl.is_nonzero(dpl.tensor({ -2 })))
    raises(function() dpl.ones(2):is_nonzero() end, 'RuntimeError: is_nonzero: Boolean value of Tensor with more than one value is ambiguous')
    raises(function() dpl.ones(0):is_nonzero() end, 'Boolean value of Tensor with no values is ambiguous')
    assert.is_true(t.is_cpu)
    assert.is_false(t:is_inference())
    assert.is_false(dpl.is_inference(t))
    assert.is_false(t:has_names())
    for _, k in ipairs({ 'is_meta', 'is_sparse', 'is_quantized', 'is_mkldnn', 'is_nested' }) do assert.is_false(t[k], k) end
    assert.are.equal('torch.strided', t.layout)
    assert.are.same({ 0, 0 }, t:new_zeros({ 2 }, { layout = t.layout }):totable())
    assert.are.equal('torch.FloatStorage', t:storage_type())
    assert.are.equal('torch.LongStorage', dpl.ones(1, { dtype = 'int64' }):storage_type())
    assert.are.equal('torch.BFloat16Storage', dpl.ones(1, { dtype = 'bfloat16' }):storage_type())
  end)
  it('H is the transpose of a real matrix; retains_grad', function()
    local m = dpl.arange(6, { dtype = 'float64' }):reshape(2, 3):requires_grad_()
    local hm = m.H
    assert.are.same({ 3, 2 }, hm:size())
    assert.is_true(hm:is_set_to(m))
    assert.are.same(m:t():totable(), hm:totable())
    ;(hm * dpl.arange(6, { dtype = 'float64' }):reshape(3, 2)):sum():backward()
    assert.are.same({ { 0, 2, 4 }, { 1, 3, 5 } }, m.grad:totable())
    local s = dpl.tensor(2.0)
    assert.are.equal(s, s.H)
    raises(function() return dpl.ones(2).H end, 'RuntimeError: tensor.H is only supported on matrices (2-D tensors), got a 1-d tensor')
    raises(function() return dpl.ones(2, 2, 2).H end, 'use t.mH')
    local x = dpl.ones(2):requires_grad_()
    local y = x * 2
    assert.is_false(y.retains_grad)
    assert.is_false(x.retains_grad)
    y:retain_grad()
    assert.is_true(y.retains_grad)
    assert.is_false(x.retains_grad)
    assert.is_false(dpl.ones(2).retains_grad)
  end)
end)

describe('apply_, map_, map2_', function()
  it('apply fn to each element in row-major order, in place, and return self', function()
    local t = dpl.arange(6, { dtype = 'float64' }):view(2, 3):t() -- not contiguous
    local seen = {}
    assert.are.equal(t, t:apply_(function(v) seen[#seen + 1] = v return v * 2 end))
    assert.are.same({ 0, 3, 1, 4, 2, 5 }, seen) -- torch: the same order
    assert.are.same({ { 0, 6 }, { 2, 8 }, { 4, 10 } }, t:totable())
    local i = dpl.tensor({ 1, 2, -3 })
    i:apply_(function(v) return v + 0.7 end) -- truncated, as torch
    assert.are.same({ 1, 2, -2 }, i:totable())
    i:apply_(function() return true end)
    assert.are.same({ 1, 1, 1 }, i:totable())
    local b = dpl.tensor({ true, false })
    b:apply_(function(v) return not v end)
    assert.are.same({ false, true }, b:totable())
    local hf = dpl.tensor({ 1, 2 }, { dtype = 'float16' })
    hf:apply_(function(v) return v / 4 end)
    assert.are.same({ 0.25, 0.5 }, hf:totable())
    local big = dpl.tensor({ 2 ^ 40 }, { dtype = 'int64' })
    big:apply_(function(v) return v + 1 end)
    assert.are.equal(2 ^ 40 + 1, big:item())
  end)
  it('map_ and map2_ broadcast the others to t (PyTorch) or pair as many elements (Torch7)', function()
    local t = dpl.ones(2, 3)
    assert.are.equal(t, t:map_(dpl.tensor({ 1, 2, 3 }, { dtype = 'float32' }), function(a, b) return a + b end))
    assert.are.same({ { 2, 3, 4 }, { 2, 3, 4 } }, t:totable())
    t = dpl.ones(2, 3)
    t:map2_(dpl.tensor({ 1, 2, 3 }, { dtype = 'float32' }), dpl.tensor({ { 1 }, { 2 } }, { dtype = 'float32' }),
      function(a, b, c) return a + b * c end)
    assert.are.same({ { 2, 3, 4 }, { 3, 5, 7 } }, t:totable()) -- torch's values
    local u = dpl.zeros(2, 3)
    u:map_(dpl.arange(6, { dtype = 'float32' }):view(3, 2), function(_, b) return b end)
    assert.are.same({ { 0, 1, 2 }, { 3, 4, 5 } }, u:totable())
    local x = dpl.tensor({ 1., 2., 3. })
    x:map_(x, function(a, b) return a * b end) -- other is self: read before written
    assert.are.same({ 1, 4, 9 }, x:totable())
  end)
  it('refuse what PyTorch refuses', function()
    raises(function() dpl.ones(3):requires_grad_():apply_(function(v) return v end) end,
      "RuntimeError: apply_: can't call apply_() on a tensor that requires grad")
    raises(function() dpl.ones(3):map_(dpl.ones(3):requires_grad_(), function(a) return a end) end,
      "map_: can't call map_() on a tensor that requires grad")
    raises(function() dpl.ones(3):apply_(function() return 'a' end) end,
      'TypeError: apply_: the function must return a number (or nil to keep the element), got string')
    raises(function() dpl.ones(3):apply_(3) end, 'TypeError: apply_: callable must be a function, got 3')
    raises(function() dpl.ones(3):map_(dpl.ones(3, { dtype = 'float64' }), function(a) return a end) end,
      "TypeError: map_: expected other of dtype float32 (the input's), got float64")
    raises(function() dpl.ones(3):map_(dpl.ones(4), function(a) return a end) end,
      "map_: other of shape [4] neither broadcasts to the input's shape [3] nor has as many elements")
    raises(function() dpl.ones(3):map2_(dpl.ones(3), 'x', function(a) return a end) end, 'map2_: tensor2 must be a tensor')
  end)
end)

describe('names dplhost cannot support', function()
  it('raise NotImplementedError naming the function and the reason', function()
    local t = dpl.ones(2, 2)
    local cases = {
      { 'cfloat', 'no complex dtype' }, { 'cdouble', 'no complex dtype' }, { 'chalf', 'no complex dtype' },
      { 'stft', 'no complex dtype' }, { 'istft', 'no complex dtype' }, { 'rename', 'no named tensors' },
      { 'rename_', 'no named tensors' }, { 'refine_names', 'no named tensors' }, { 'align_to', 'no named tensors' },
      { 'align_as', 'no named tensors' }, { 'to_sparse', 'no sparse layouts' }, { 'to_sparse_csr', 'no sparse layouts' },
      { 'to_sparse_csc', 'no sparse' }, { 'to_sparse_bsr', 'no sparse' }, { 'to_sparse_bsc', 'no sparse' },
      { 'to_sparse_coo', 'no sparse' }, { 'q_scale', 'no quantized tensors' }, { 'q_zero_point', 'no quantized' },
      { 'q_per_channel_scales', 'no quantized' }, { 'q_per_channel_zero_points', 'no quantized' },
      { 'q_per_channel_axis', 'no quantized' }, { 'qscheme', 'no quantized' }, { 'int_repr', 'no quantized' },
      { 'dequantize', 'no quantized' }, { 'eig', 'dpl.linalg.eigh' },
      { 'lstsq', 'dpl.linalg.lstsq' }, { 'solve', 'dpl.linalg.solve(A, B)' },
    }
    for _, c in ipairs(cases) do
      raises(function() t[c[1]](t) end, 'NotImplementedError: ' .. c[1] .. ' is not supported: ')
      raises(function() t[c[1]](t) end, c[2])
    end
    for _, n in ipairs({ 'stft', 'istft', 'q_scale', 'int_repr', 'dequantize', 'eig', 'lstsq', 'solve' }) do
      raises(function() dpl[n](t) end, 'NotImplementedError: ' .. n .. ' is not supported')
    end
    raises(function() return t.names end, 'NotImplementedError: names is not supported: dplhost has no named tensors')
  end)
end)

describe('the fixture', function()
  it('was checked case by case', function()
    local missed = {}
    for k in pairs(ref) do if not checked[k] then missed[#missed + 1] = k end end
    table.sort(missed)
    assert.are.same({}, missed)
  end)
end)

describe('dpl.Size (t:size() and t.shape)', function()
  local dpl = require 'dpl'
  it('is a list of the sizes that prints like torch.Size and compares by value', function()
    local t = dpl.zeros(4, 3)
    local s = t.shape
    assert.are.equal(2, #s)
    assert.are.equal(4, s[1])
    assert.are.equal(3, t:size()[2])
    assert.are.same({ 4, 3 }, s)
    assert.are.same({ 4, 3 }, { unpack(s) })
    assert.are.equal('dpl.Size({4, 3})', tostring(s))
    assert.are.equal('dpl.Size({})', tostring(dpl.tensor(1.5).shape))
    assert.is_true(s == dpl.ones(4, 3).shape)
    assert.is_true(s == dpl.Size { 4, 3 })
    assert.is_true(s == dpl.Size(4, 3))
    assert.is_false(s == dpl.zeros(3, 4).shape)
    assert.is_false(s == dpl.zeros(4, 3, 1).shape)
    assert.are.equal(12, s:numel())
    assert.are.equal(1, dpl.Size({}):numel())
    -- it goes back into the constructors and views as any list of sizes
    assert.are.same({ 4, 3 }, dpl.zeros(s).shape)
    assert.are.same({ 3, 4 }, dpl.zeros(12):view(dpl.Size { 3, 4 }).shape)
    s[3] = 1 -- a list the caller owns
    assert.are.same({ 4, 3, 1 }, t:view(s).shape)
  end)
  it('rejects sizes that are not non-negative integers', function()
    assert.has_error(function() dpl.Size({ 2, -1 }) end, 'ValueError: Size: size 2 must be a non-negative integer, got -1')
    assert.has_error(function() dpl.Size(2, 'x') end)
  end)
end)
