-- tensor_math_spec.lua: the math group of tensor methods (lua/dpl/tensor_math.lua, the C
-- kernels of src/tensor/dpl_tensor_math.c and the unary/bitwise ones of dpl_tensor_elementwise.c)
-- against PyTorch 1.13: values, result dtypes and shapes, gradients (spec/fixtures/math_ref.lua,
-- written by spec/fixtures/gen_math_ref.py), and what the fixture cannot hold: non-contiguous
-- and empty inputs, in-place forms, the error messages, tensors in GPU memory, memory returned.
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local raises = h.raises
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/math_ref.lua')
local nn, F = dpl.nn, dpl.nn.functional

local function R(name) return assert(ref[name], 'no fixture case ' .. name) end
-- a fixture tensor ({v=, s=, d=}) as a dpl tensor
local function T(e, rg)
  local t = dpl.tensor(e.v, { dtype = e.d })
  if t:dim() ~= #e.s then t = t:reshape(e.s) end -- (empty and 0-d tensors)
  if rg then t:requires_grad_() end
  return t
end
local TOL = { float64 = 1e-12, float32 = 3e-6, float16 = 1e-3, bfloat16 = 1e-2 }
local function flat(t)
  if t:dim() == 0 then return { t:item() } end
  return t:reshape(-1):totable()
end
-- got has the fixture's dtype and shape, and its values within a relative tolerance (NaN where
-- the reference has NaN, infinities equal)
local function same(got, e, what, tol)
  what = what or ''
  assert(dpl.is_tensor(got), what .. ': expected a tensor, got ' .. type(got))
  assert.are.equal(e.d, got.dtype, what .. ': dtype')
  assert.are.same(e.s, got:size(), what .. ': shape')
  tol = tol or TOL[e.d] or 0
  local a, b = flat(got), flat(T(e))
  assert.are.equal(#b, #a, what)
  for i = 1, #b do
    local x, y = a[i], b[i]
    if type(y) == 'boolean' then
      assert(x == y, ('%s: element %d: %s, expected %s'):format(what, i, tostring(x), tostring(y)))
    elseif y ~= y then
      assert(x ~= x, ('%s: element %d: %s, expected nan'):format(what, i, tostring(x)))
    elseif y == math.huge or y == -math.huge then
      assert(x == y, ('%s: element %d: %s, expected %s'):format(what, i, tostring(x), tostring(y)))
    else
      assert(math.abs(x - y) <= tol * math.max(1, math.abs(y)),
        ('%s: element %d: %.17g, expected %.17g'):format(what, i, x, y))
    end
  end
end
-- the same values as another tensor (in-place forms, module functions, strided inputs), exactly
-- or within a relative tolerance
local function same_as(got, want, what, tol)
  assert.are.equal(want.dtype, got.dtype, what)
  assert.are.same(want:size(), got:size(), what)
  local a, b = flat(got), flat(want)
  for i = 1, #b do
    local x, y = a[i], b[i]
    local ok = x == y or (x ~= x and y ~= y) or (tol and math.abs(x - y) <= tol * math.max(1, math.abs(y)))
    assert(ok, ('%s: element %d: %.17g, expected %.17g'):format(what or '', i, tonumber(x) or 0, tonumber(y) or 0))
  end
end
local function sorted_keys(prefix)
  local r = {}
  for k in pairs(ref) do if k:sub(1, #prefix) == prefix then r[#r + 1] = k end end
  table.sort(r)
  assert.is_true(#r > 0, prefix)
  return r
end

local UNARY = { 'log10', 'exp2', 'sinh', 'cosh', 'tan', 'asin', 'acos', 'atan', 'asinh', 'acosh', 'atanh', 'frac',
  'isinf', 'isfinite' }

describe('unary math', function()
  it('matches PyTorch in float64 and float32, with NaN and infinities', function()
    for _, op in ipairs(UNARY) do
      for _, dt in ipairs({ 'float64', 'float32' }) do
        local c = R(op .. ' ' .. dt)
        local x = T(c.x)
        same(x[op](x), c.y, op .. ' ' .. dt)
        same(dpl[op](x), c.y, 'dpl.' .. op)
      end
    end
  end)

  it('gives float32 for integer and bool inputs (bool for isinf/isfinite); frac refuses them', function()
    for _, op in ipairs(UNARY) do
      if op ~= 'frac' then
        for _, dt in ipairs({ 'int64', 'bool' }) do
          local c = R(op .. ' ' .. dt)
          same(T(c.x)[op](T(c.x)), c.y, op .. ' ' .. dt)
        end
      end
    end
    same(dpl.tensor({ 1, 100 }, { dtype = 'int32' }):log10(), { v = { 0, 2 }, s = { 2 }, d = 'float32' }, 'int32')
    same(dpl.tensor({ 1, 3 }, { dtype = 'uint8' }):exp2(), { v = { 2, 8 }, s = { 2 }, d = 'float32' }, 'uint8')
    raises(function() return dpl.tensor({ 1, 2 }):frac() end, 'RuntimeError: frac: expected a floating-point tensor, got int64')
    raises(function() return dpl.tensor({ true }):frac_() end, 'frac: expected a floating-point tensor, got bool')
  end)

  it('has in-place forms (none for isinf/isfinite), which refuse a float result in an integer tensor', function()
    for _, op in ipairs(UNARY) do
      local c = R(op .. ' float64')
      if op == 'isinf' or op == 'isfinite' then
        assert.is_nil(T(c.x)[op .. '_'])
      else
        local x = T(c.x)
        local r = x[op .. '_'](x)
        assert.are.equal(x, r)
        same(x, c.y, op .. '_')
        if op ~= 'frac' then
          raises(function() local i = dpl.tensor({ 1, 2 }) return i[op .. '_'](i) end,
            op .. '_: the result type float32 cannot be stored in place in a int64 tensor')
        end
      end
    end
    local h16 = dpl.tensor({ 0.5, 2 }, { dtype = 'float16' })
    h16:log10_()
    same(h16, { v = { -0.30103, 0.30103 }, s = { 2 }, d = 'float16' }, 'float16 in place')
  end)

  it('takes strided, float16/bfloat16, empty and 0-d inputs', function()
    local x = dpl.randn(4, 3):double():mul(0.5)
    for _, op in ipairs(UNARY) do
      same_as(x:t()[op](x:t()), x[op](x):t(), op .. ' of a transposed tensor')
      same_as(x:narrow(2, 2, 2)[op](x:narrow(2, 2, 2)), x[op](x):narrow(2, 2, 2), op .. ' of a narrowed tensor')
      local e = dpl.zeros(0, 3)
      assert.are.same({ 0, 3 }, e[op](e):size())
      local z = dpl.tensor(0.25)
      assert.are.equal(0, z[op](z):dim())
      local hx = x:half()
      local want = hx:float()[op](hx:float()) -- (computed in float32, rounded to float16)
      local got = hx[op](hx)
      assert.are.equal((op == 'isinf' or op == 'isfinite') and 'bool' or 'float16', got.dtype)
      same_as(got, want:to(got.dtype), op .. ' float16')
    end
    same(dpl.tensor({ 1.5 }, { dtype = 'bfloat16' }):frac(), { v = { 0.5 }, s = { 1 }, d = 'bfloat16' }, 'bf16 frac')
  end)

  it('has gradients equal to PyTorch\'s', function()
    for _, op in ipairs(UNARY) do
      if op ~= 'isinf' and op ~= 'isfinite' then
        local c = R(op .. ' grad')
        local x = T(c.x, true)
        local y = x[op](x)
        same(y, c.y, op)
        local _ = (y * T(c.g)):sum():backward()
        same(x.grad, c.gx, op .. ' grad')
        -- in place on a non-leaf: the same gradient
        local x2 = T(c.x, true)
        local y2 = x2 * 1
        y2[op .. '_'](y2)
        local _ = (y2 * T(c.g)):sum():backward()
        same(x2.grad, c.gx, op .. '_ grad')
      end
    end
    assert.is_false(dpl.randn(3):requires_grad_():isinf().requires_grad)
  end)
end)

local ACTS = { hardtanh = 2, softplus = 2, elu = 1, leaky_relu = 1, mish = 1, hardswish = 1 }
local INPLACE = { hardtanh = true, elu = true, leaky_relu = true, mish = true, hardswish = true }
local PNAMES = { hardtanh = { 'min_val', 'max_val' }, softplus = { 'beta', 'threshold' }, elu = { 'alpha' },
  leaky_relu = { 'negative_slope' }, mish = {}, hardswish = {} }
local function pos_args(name, p)
  local n = PNAMES[name]
  return p[n[1] or ''], p[n[2] or '']
end

describe('activations', function()
  it('match PyTorch with default and given parameters, positional or as options', function()
    for name, n in pairs(ACTS) do
      for i = 0, n - 1 do
        for _, dt in ipairs({ 'float64', 'float32' }) do
          local c = R(('%s %d %s'):format(name, i, dt))
          local x = T(c.x)
          same(x[name](x, pos_args(name, c.p)), c.y, name .. ' positional')
          if next(c.p) then same(x[name](x, c.p), c.y, name .. ' options') end
          same(dpl[name](x, pos_args(name, c.p)), c.y, 'dpl.' .. name)
          same(F[name](x, pos_args(name, c.p)), c.y, 'F.' .. name)
          if INPLACE[name] then
            local y = x:clone()
            assert.are.equal(y, y[name .. '_'](y, pos_args(name, c.p)))
            same(y, c.y, name .. '_')
          else
            assert.is_nil(x[name .. '_'])
          end
        end
      end
    end
  end)

  it('have the gradients of PyTorch, at the kinks too', function()
    for name, n in pairs(ACTS) do
      for i = 0, n - 1 do
        local c = R(('%s %d grad'):format(name, i))
        local x = T(c.x, true)
        local y = x[name](x, pos_args(name, c.p))
        same(y, c.y, name)
        local _ = (y * T(c.g)):sum():backward()
        same(x.grad, c.gx, name .. ' grad')
        if INPLACE[name] then
          local x2 = T(c.x, true)
          local y2 = x2 * 1
          y2[name .. '_'](y2, c.p)
          local _ = (y2 * T(c.g)):sum():backward()
          same(x2.grad, c.gx, name .. '_ grad')
        end
      end
    end
  end)

  it('hardtanh keeps integer dtypes (bounds truncated); the others take floating tensors only', function()
    local c = R('hardtanh int64')
    same(T(c.x):hardtanh(-2.5, 2.5), c.y, 'hardtanh int64')
    local i = T(c.x)
    i:hardtanh_(-2.5, 2.5)
    same(i, c.y, 'hardtanh_ int64')
    raises(function() return dpl.tensor({ true }):hardtanh() end, 'hardtanh: bool tensors are not supported')
    for _, name in ipairs({ 'softplus', 'elu', 'leaky_relu', 'mish', 'hardswish' }) do
      raises(function() return dpl.tensor({ 1, 2 })[name](dpl.tensor({ 1, 2 })) end,
        'RuntimeError: ' .. name .. ': expected a floating-point tensor, got int64')
    end
    local hx = dpl.tensor({ -1, 0.5 }, { dtype = 'bfloat16' })
    same(hx:elu(), { v = { math.exp(-1) - 1, 0.5 }, s = { 2 }, d = 'bfloat16' }, 'bfloat16 elu')
  end)

  it('take strided, empty and 0-d inputs', function()
    local x = dpl.randn(5, 4):double()
    for name in pairs(ACTS) do
      same_as(x:t()[name](x:t()), x[name](x):t(), name .. ' of a transposed tensor')
      assert.are.same({ 0, 2 }, dpl.zeros(0, 2)[name](dpl.zeros(0, 2)):size())
      assert.are.equal(0, dpl.tensor(-0.5)[name](dpl.tensor(-0.5)):dim())
      if INPLACE[name] then
        local y = x:clone()
        y:t()[name .. '_'](y:t())
        same_as(y, x[name](x), name .. '_ through a transposed view')
      end
    end
  end)

  it('check their arguments', function()
    local x = dpl.randn(3)
    raises(function() return x:elu('a') end, "ValueError: elu: alpha must be a number, got string")
    raises(function() return x:elu({ alpah = 1 }) end, "ValueError: elu: unknown option 'alpah' (did you mean 'alpha'?); accepted options: alpha")
    raises(function() return x:softplus(1, {}) end, 'softplus: threshold must be a number, got table')
    raises(function() return x:hardtanh({ min_val = -1 }, 2) end, 'hardtanh: the options table must be the last argument')
    raises(function() return x:leaky_relu(0.1, 2) end, 'leaky_relu: too many arguments (expected negative_slope)')
    raises(function() return x:mish(2) end, 'mish: takes no arguments, got number')
    raises(function() return dpl.elu('x') end, 'elu: input must be a tensor, got string')
    raises(function() return x:elu_(true) end, 'elu_: alpha must be a number, got boolean')
    raises(function() return dpl.act_backward('relu6', x, x) end, "act_backward: unknown activation 'relu6'")
    raises(function() return dpl.act_backward('elu', x, dpl.randn(4)) end,
      'elu_backward: grad shape [3] does not match the input\'s shape [4]')
    local e = dpl.randn(1):expand(3)
    raises(function() return e:elu_() end, 'elu_: unsupported operation: more than one element of the written-to tensor')
  end)

  it('have nn.functional forms (inplace=) and modules (ELU, Hardtanh, Softplus, Mish, Hardswish)', function()
    local c = R('elu 1 float32')
    local x = T(c.x)
    same(F.elu(x, { alpha = 0.5 }), c.y, 'F.elu options')
    local y = x:clone()
    assert.are.equal(y, F.elu(y, 0.5, true))
    same(y, c.y, 'F.elu inplace')
    local z = x:clone()
    F.elu_(z, 0.5)
    same(z, c.y, 'F.elu_')
    same(nn.ELU(0.5)(x), c.y, 'nn.ELU')
    same(nn.ELU({ alpha = 0.5 })(x), c.y, 'nn.ELU options')
    same(nn.Hardtanh(-0.5, 2)(T(R('hardtanh 1 float32').x)), R('hardtanh 1 float32').y, 'nn.Hardtanh')
    same(nn.Softplus(2, 1.5)(T(R('softplus 1 float32').x)), R('softplus 1 float32').y, 'nn.Softplus')
    same(nn.Mish()(T(R('mish 0 float32').x)), R('mish 0 float32').y, 'nn.Mish')
    same(nn.Hardswish()(T(R('hardswish 0 float32').x)), R('hardswish 0 float32').y, 'nn.Hardswish')
    same(nn.LeakyReLU(0.2)(T(R('leaky_relu 1 float32').x)), R('leaky_relu 1 float32').y, 'nn.LeakyReLU')
    local w = x:clone()
    nn.Hardswish(true)(w)
    same(w, R('hardswish 0 float32').y, 'nn.Hardswish(inplace)')
    assert.are.equal('ELU(alpha=0.5)', tostring(nn.ELU(0.5)))
    assert.are.equal('Hardtanh(min_val=-1, max_val=1, inplace=true)', tostring(nn.Hardtanh({ inplace = true })))
    assert.are.equal('Softplus(beta=1, threshold=20)', tostring(nn.Softplus()))
    assert.are.equal('Mish()', tostring(nn.Mish()))
    raises(function() nn.Hardtanh(1, 1) end, 'Hardtanh: max_val (1) must be greater than min_val (1)')
    raises(function() nn.ELU({ alfa = 1 }) end, "ELU: unknown option 'alfa' (did you mean 'alpha'?)")
    raises(function() nn.Softplus({ inplace = true }) end, "Softplus: unknown option 'inplace'")
    raises(function() nn.ELU('a') end, 'ELU: alpha must be a number, got a')
    raises(function() nn.Mish(1) end, 'Mish: inplace must be a boolean, got 1')
    raises(function() F.softplus(x, 1, 20, true) end, 'softplus: too many arguments (expected beta, threshold)')
    raises(function() F.elu(x, 1, 'yes') end, 'elu: inplace must be a boolean, got string')
    raises(function() F.hardtanh(x, { max = 1 }) end, "hardtanh: unknown option 'max'")
    -- F.leaky_relu now has PyTorch's gradient at 0 (the slope), as the other forms
    local x0 = dpl.tensor({ 0, -1, 2 }, { dtype = 'float64' }):requires_grad_()
    F.leaky_relu(x0, 0.2):sum():backward()
    same(x0.grad, { v = { 0.2, 0.2, 1 }, s = { 3 }, d = 'float64' }, 'leaky_relu grad at 0')
    -- a model with the new layers trains (gradients reach every parameter)
    dpl.manual_seed(3)
    local m = nn.Sequential(nn.Linear(4, 8), nn.ELU(), nn.Linear(8, 8), nn.Mish(), nn.Linear(8, 8), nn.Hardswish(),
      nn.Linear(8, 8), nn.Softplus(), nn.Linear(8, 1), nn.Hardtanh(-5, 5))
    m(dpl.randn(6, 4)):sum():backward()
    for _, p in ipairs(m:parameters()) do assert.truthy(p.grad) end
  end)
end)

describe('nan_to_num, isinf, isfinite, isclose, allclose, equal', function()
  it('nan_to_num replaces NaN and infinities as PyTorch, per dtype', function()
    for _, dt in ipairs({ 'float32', 'float64', 'float16', 'bfloat16' }) do
      local c = R('nan_to_num ' .. dt)
      same(T(c.x):nan_to_num(), c.y, 'nan_to_num ' .. dt)
      local y = T(c.x)
      assert.are.equal(y, y:nan_to_num_())
      same(y, c.y, 'nan_to_num_ ' .. dt)
    end
    local c = R('nan_to_num args')
    same(T(c.x):nan_to_num(1.25, 100, -100), c.y, 'positional')
    same(dpl.nan_to_num(T(c.x), { nan = 1.25, posinf = 100, neginf = -100 }), c.y, 'options')
    c = R('nan_to_num f16 big')
    same(T(c.x):nan_to_num({ posinf = 1e6 }), c.y, 'posinf past float16')
    local i = dpl.tensor({ 1, -2 })
    local j = i:nan_to_num(0.5)
    same_as(j, i, 'int64 copy')
    assert.is_false(j:is_set_to(i))
    same_as(dpl.tensor({ true }):nan_to_num(), dpl.tensor({ true }), 'bool')
    local x = dpl.randn(3, 4):double()
    x[2][3] = 0 / 0
    same_as(x:t():nan_to_num(), x:nan_to_num():t(), 'transposed')
    raises(function() return x:nan_to_num('a') end, 'nan_to_num: nan must be a number, got string')
    raises(function() return x:nan_to_num({ pos_inf = 1 }) end, "nan_to_num: unknown option 'pos_inf' (did you mean 'posinf'?)")
    c = R('nan_to_num grad')
    local g = T(c.x, true)
    local _ = (g:nan_to_num() * T(c.g)):sum():backward()
    same(g.grad, c.gx, 'nan_to_num grad')
  end)

  it('isclose matches PyTorch (rtol, atol, equal_nan, infinities, broadcasting, integers)', function()
    for _, k in ipairs(sorted_keys('isclose ')) do
      local c = R(k)
      local a, b = T(c.a), T(c.b)
      local kw = c.kw or {}
      same(a:isclose(b, kw), c.y, k)
      same(dpl.isclose(a, b, kw.rtol, kw.atol, kw.equal_nan), c.y, k .. ' positional')
      if c.all ~= nil then
        local r = a:narrow(2, 1, 2):allclose(b:narrow(2, 1, 2), kw)
        assert.are.equal('boolean', type(r))
        assert.are.equal(c.all, r, k .. ' allclose')
      end
    end
    local a = dpl.randn(3, 4)
    same_as(a:t():isclose(a:t() * 1.000001), a:isclose(a * 1.000001):t(), 'transposed')
    assert.is_true(a:allclose(a:clone()))
    assert.is_true(dpl.tensor({ 0 / 0 }):allclose(dpl.tensor({ 0 / 0 }), { equal_nan = true }))
    assert.is_false(dpl.tensor({ 0 / 0 }):allclose(dpl.tensor({ 0 / 0 })))
    assert.is_true(dpl.zeros(0):allclose(dpl.zeros(0)))
    raises(function() return dpl.tensor({ 1 }):isclose(dpl.tensor({ 1.5 })) end,
      'RuntimeError: isclose: expected both tensors to have the same dtype, got int64 and float32')
    raises(function() return a:isclose(a, -1) end, 'isclose: rtol must be greater than or equal to zero, got -1')
    raises(function() return a:isclose(a, { atol = -1 }) end, 'isclose: atol must be greater than or equal to zero, got -1')
    raises(function() return a:isclose(1) end, 'isclose: other must be a tensor, got number')
    raises(function() return a:isclose(a, { eq_nan = true }) end, "isclose: unknown option 'eq_nan'")
    raises(function() return a:allclose(a, 1e-5, 1e-8, 1) end, 'allclose: equal_nan must be a boolean, got number')
    raises(function() return a:allclose(dpl.randn(2)) end, 'isclose: shapes [3, 4] and [2] cannot be broadcast')
  end)

  it('equal is a Lua boolean: the same shape and values (after promotion), as torch.equal', function()
    local a = dpl.tensor({ { 1, 2 }, { 3, 4 } })
    assert.is_true(a:equal(a:clone()))
    assert.is_true(dpl.equal(a, a:double()))
    assert.is_true(a:equal(a:t():t()))
    assert.is_false(a:equal(a:t()))
    assert.is_false(a:equal(a:reshape(4)))
    assert.is_false(a:equal(a:reshape(1, 4)))
    assert.is_false(dpl.tensor({ 0 / 0 }):equal(dpl.tensor({ 0 / 0 })))
    assert.is_true(dpl.zeros(0):equal(dpl.zeros(0)))
    assert.is_false(dpl.zeros(0, 2):equal(dpl.zeros(0)))
    assert.is_true(dpl.tensor({ true }):equal(dpl.tensor({ 1 })))
    assert.is_true(dpl.tensor(3):equal(dpl.tensor(3.0)))
    raises(function() return a:equal({ 1 }) end, 'equal: other must be a tensor, got table')
  end)
end)

describe('bitwise ops', function()
  it('match PyTorch on integer and bool tensors, with tensors, numbers or booleans', function()
    for _, op in ipairs({ 'bitwise_and', 'bitwise_or', 'bitwise_xor' }) do
      for _, k in ipairs({ 'int64', 'int32', 'uint8 int32', 'bool', 'bool int64' }) do
        local c = R(op .. ' ' .. k)
        local a, b = T(c.a), T(c.b)
        same(a[op](a, b), c.y, op .. ' ' .. k)
        same(dpl[op](a, b), c.y, 'dpl.' .. op .. ' ' .. k)
        same_as(a:t()[op](a:t(), b:t()), a[op](a, b):t(), op .. ' transposed')
      end
      local c = R(op .. ' scalar')
      same(T(c.a)[op](T(c.a), c.s), c.y, op .. ' scalar')
      same(dpl[op](c.s, T(c.a)), c.y, op .. ' scalar first')
      c = R(op .. ' bool scalar')
      same(T(c.a)[op](T(c.a), c.s), c.y, op .. ' bool scalar')
      same(dpl[op](c.s, T(c.a)), c.y, op .. ' bool scalar first')
      -- in place: the result is cast to self's dtype within a kind
      c = R(op .. ' int64')
      local a = T(c.a)
      assert.are.equal(a, a[op .. '_'](a, T(c.b)))
      same(a, c.y, op .. '_')
      local a32 = dpl.tensor({ 12, -7, 0 }, { dtype = 'int32' })
      a32[op .. '_'](a32, dpl.tensor({ 10, 3, -1 }))
      same_as(a32, dpl[op](dpl.tensor({ 12, -7, 0 }, { dtype = 'int32' }), dpl.tensor({ 10, 3, -1 }, { dtype = 'int32' })),
        op .. '_ int32 by int64')
      raises(function() local bb = dpl.tensor({ true, false }) return bb[op .. '_'](bb, dpl.tensor({ 1, 2 })) end,
        op .. '_: the result type int64 cannot be stored in place in a bool tensor')
      raises(function() return dpl.randn(2)[op](dpl.randn(2), dpl.randn(2)) end,
        'RuntimeError: ' .. op .. ': expected integer or bool operands, got float32')
      raises(function() return dpl.tensor({ 1, 2 })[op](dpl.tensor({ 1, 2 }), 1.5) end,
        op .. ': expected integer or bool operands, got float32')
      raises(function() return dpl.tensor({ 1 })[op](dpl.tensor({ 1 }), 'a') end,
        op .. ': other must be a tensor, a number or a boolean, got string')
      raises(function() return dpl[op](1, 2) end, op .. ': at least one operand must be a tensor')
      assert.are.same({ 0, 2 }, dpl.zeros(0, 2, { dtype = 'int64' })[op](dpl.zeros(0, 2, { dtype = 'int64' }), 3):size())
    end
    for _, dt in ipairs({ 'int64', 'int32', 'uint8', 'bool' }) do
      local c = R('bitwise_not ' .. dt)
      same(T(c.x):bitwise_not(), c.y, 'bitwise_not ' .. dt)
      local x = T(c.x)
      x:bitwise_not_()
      same(x, c.y, 'bitwise_not_ ' .. dt)
    end
    raises(function() return dpl.randn(2):bitwise_not() end, 'bitwise_not: expected an integer or bool tensor, got float32')
  end)
end)

describe('true_divide, lerp, addcmul, addcdiv', function()
  it('true_divide is div', function()
    local c = R('true_divide int64')
    same(T(c.a):true_divide(T(c.b)), c.y, 'true_divide')
    same(dpl.true_divide(T(c.a), T(c.b)), c.y, 'dpl.true_divide')
    local x = T(c.a):double()
    x:true_divide_(2)
    same_as(x, T(c.a):double() / 2, 'true_divide_')
    raises(function() return T(c.a):true_divide(2, { rounding_mode = 'floor' }) end, 'true_divide: takes one argument (other)')
  end)

  it('lerp matches PyTorch (number or tensor weight, broadcasting) and has its gradients', function()
    for _, k in ipairs(sorted_keys('lerp scalar ')) do
      local c = R(k)
      same(T(c.s):lerp(T(c.e), c.w), c.y, k)
    end
    local c = R('lerp tensor weight')
    same(dpl.lerp(T(c.s), T(c.e), T(c.w)), c.y, 'lerp tensor weight')
    c = R('lerp f64')
    same(T(c.s):lerp(T(c.e), T(c.w)), c.y, 'lerp f64')
    local s = T(c.s)
    assert.are.equal(s, s:lerp_(T(c.e), T(c.w)))
    same(s, c.y, 'lerp_')
    local st = T(c.s):t():contiguous()
    same_as(st:t():lerp(T(c.e), T(c.w)), T(c.s):lerp(T(c.e), T(c.w)), 'lerp of a transposed tensor')
    c = R('lerp grad')
    local a, b, w = T(c.s, true), T(c.e, true), T(c.w, true)
    local y = a:lerp(b, w)
    same(y, c.y, 'lerp')
    local _ = (y * T(c.g)):sum():backward()
    same(a.grad, c.gs, 'lerp grad input')
    same(b.grad, c.ge, 'lerp grad end')
    same(w.grad, c.gw, 'lerp grad weight')
    c = R('lerp grad scalar')
    a, b = T(c.s, true), T(c.e, true)
    local _ = (a:lerp(b, 0.25) * T(c.g)):sum():backward()
    same(a.grad, c.gs, 'lerp grad input')
    same(b.grad, c.ge, 'lerp grad end')
    -- only the weight requires grad, in place
    local w2 = T(R('lerp grad').w, true)
    local s2 = T(R('lerp grad').s):detach():clone()
    local y2 = s2:lerp_(T(R('lerp grad').e), w2)
    local _ = (y2 * T(R('lerp grad').g)):sum():backward()
    same(w2.grad, R('lerp grad').gw, 'lerp_ grad weight')
    local half = dpl.tensor({ 0, 1 }, { dtype = 'float16' })
    same(half:lerp(dpl.tensor({ 1, 3 }, { dtype = 'float16' }), 0.5), { v = { 0.5, 2 }, s = { 2 }, d = 'float16' }, 'float16')
    raises(function() return dpl.tensor({ 1, 2 }):lerp(dpl.tensor({ 1, 2 }), 0.5) end,
      'RuntimeError: lerp: expected a floating-point tensor, got int64')
    raises(function() return dpl.ones(2):lerp(dpl.ones(2):double(), 0.5) end, 'lerp: expected dtype float32 for end, got float64')
    raises(function() return dpl.ones(2):lerp(dpl.ones(2), dpl.ones(2):double()) end,
      'lerp: expected dtype float32 for weight, got float64')
    raises(function() return dpl.ones(2):lerp(dpl.ones(2), 'x') end, 'lerp: weight must be a number or a tensor, got string')
    raises(function() return dpl.ones(2):lerp(1, 0.5) end, 'lerp: end must be a tensor, got number')
    raises(function() return dpl.ones(3):lerp_(dpl.ones(2, 3), 0.5) end,
      "lerp_: the result shape [2, 3] does not match the in-place tensor's shape [3]")
    raises(function() return dpl.ones(3):lerp(dpl.ones(2), 0.5) end, 'lerp: shapes [3] and [2] cannot be broadcast')
  end)

  it('addcmul and addcdiv match PyTorch (value, broadcasting, promotion, integers) and have their gradients', function()
    for _, op in ipairs({ 'addcmul', 'addcdiv' }) do
      for _, v in ipairs({ '1', '0.5', '-2' }) do
        local c = R(op .. ' ' .. v)
        local s, a, b = T(c.s), T(c.a), T(c.b)
        same(s[op](s, a, b, c.v), c.y, op .. ' ' .. v)
        same(dpl[op](s, a, b, { value = c.v }), c.y, op .. ' ' .. v .. ' options')
        same_as(s[op](s, a:t():contiguous():t(), b), s[op](s, a, b, 1), op .. ' strided')
        local s2 = s:expand(2, 3):contiguous()
        assert.are.equal(s2, s2[op .. '_'](s2, a, b, c.v))
        same(s2, c.y, op .. '_')
      end
      local c = R(op .. ' grad')
      local s, a, b = T(c.s, true), T(c.a, true), T(c.b, true)
      local y = s[op](s, a, b, c.v)
      same(y, c.y, op)
      local _ = (y * T(c.g)):sum():backward()
      same(s.grad, c.gs, op .. ' grad input')
      same(a.grad, c.ga, op .. ' grad tensor1')
      same(b.grad, c.gb, op .. ' grad tensor2')
      -- in place on a non-leaf, only tensor2 requiring grad
      local b2 = T(c.b, true)
      local s2 = T(c.s):expand(2, 3):contiguous()
      s2[op .. '_'](s2, T(c.a), b2, c.v)
      local _ = (s2 * T(c.g)):sum():backward()
      same(b2.grad, c.gb, op .. '_ grad tensor2')
    end
    for _, k in ipairs({ 'addcmul int64', 'addcmul uint8', 'addcmul promote', 'addcdiv float by int' }) do
      local c = R(k)
      local op = k:match('^%a+')
      same(T(c.s)[op](T(c.s), T(c.a), T(c.b), c.v), c.y, k)
    end
    local i = dpl.tensor({ 1, 2 })
    raises(function() return i:addcdiv(i, i) end, 'RuntimeError: addcdiv: integer division of tensor1 (int64) by tensor2 (int64) is not supported')
    raises(function() return dpl.ones(2):addcdiv(i, i) end, 'addcdiv: integer division')
    raises(function() return i:addcmul(i, i, 0.5) end, 'addcmul: value must be an integer for int64 tensors, got 0.5')
    raises(function() return dpl.tensor({ true }):addcmul(dpl.tensor({ true }), dpl.tensor({ true })) end,
      'addcmul: not supported for bool tensors')
    raises(function() return i:addcmul_(dpl.ones(2), i) end,
      'addcmul_: the result type float32 cannot be stored in place in a int64 tensor')
    raises(function() return dpl.ones(3):addcmul_(dpl.ones(2, 3), dpl.ones(3)) end,
      "addcmul_: the result shape [2, 3] does not match the in-place tensor's shape [3]")
    raises(function() return dpl.ones(3):addcmul(dpl.ones(3), 2) end, 'addcmul: tensor2 must be a tensor, got number')
    raises(function() return dpl.ones(3):addcmul(dpl.ones(3), dpl.ones(3), 'x') end, 'addcmul: value must be a number, got string')
    raises(function() return dpl.ones(3):addcdiv(dpl.ones(3), dpl.ones(3), { val = 1 }) end, "addcdiv: unknown option 'val'")
    raises(function() return dpl.ones(3):addcmul(dpl.ones(3), dpl.ones(3), 1, 2) end, 'addcmul: too many arguments')
    local h16 = dpl.ones(2, { dtype = 'float16' })
    same(h16:addcmul(h16, h16 * 3, 0.5), { v = { 2.5, 2.5 }, s = { 2 }, d = 'float16' }, 'float16')
  end)
end)

describe('outer, cross, kron, baddbmm', function()
  it('outer', function()
    for _, k in ipairs({ 'outer f64', 'outer int64 float32', 'outer bool' }) do
      local c = R(k)
      same(T(c.a):outer(T(c.b)), c.y, k)
      same(dpl.outer(T(c.a), T(c.b)), c.y, k)
    end
    local c = R('outer grad')
    local a, b = T(c.a, true), T(c.b, true)
    local _ = (a:outer(b) * T(c.g)):sum():backward()
    same(a.grad, c.ga, 'outer grad')
    same(b.grad, c.gb, 'outer grad vec2')
    assert.are.same({ 0, 3 }, dpl.zeros(0):outer(dpl.zeros(3)):size())
    raises(function() return dpl.ones(2, 2):outer(dpl.ones(2)) end, 'outer: expected a 1-d input, got a 2-d tensor')
    raises(function() return dpl.ones(2):outer(dpl.tensor(1)) end, 'outer: expected a 1-d vec2, got a 0-d tensor')
  end)

  it('cross along the first dim of size 3 or the one given', function()
    for _, k in ipairs(sorted_keys('cross ')) do
      if k ~= 'cross grad' then
        local c = R(k)
        same(T(c.a):cross(T(c.b), c.dim), c.y, k)
        if c.dim then same(dpl.cross(T(c.a), T(c.b), { dim = c.dim }), c.y, k .. ' options') end
      end
    end
    local c = R('cross default')
    same_as(T(c.a):t():contiguous():t():cross(T(c.b)), T(c.a):cross(T(c.b)), 'strided')
    c = R('cross grad')
    local a, b = T(c.a, true), T(c.b, true)
    local _ = (a:cross(b) * T(c.g)):sum():backward()
    same(a.grad, c.ga, 'cross grad')
    same(b.grad, c.gb, 'cross grad other')
    assert.are.same({ 0, 3 }, dpl.zeros(0, 3):cross(dpl.zeros(0, 3)):size())
    raises(function() return dpl.ones(2, 4):cross(dpl.ones(2, 4)) end, 'cross: no dim of size 3 in input of shape [2, 4]')
    raises(function() return dpl.ones(3, 2):cross(dpl.ones(3, 2), 2) end, 'cross: dim 2 must have size 3 in both inputs, got 2 and 2')
    raises(function() return dpl.ones(3, 3):cross(dpl.ones(1, 3)) end, 'cross: dim 1 must have size 3 in both inputs, got 3 and 1')
    raises(function() return dpl.ones(2, 3):cross(dpl.ones(3)) end, 'cross: input and other must have the same number of dims, got 2 and 1')
    raises(function() return dpl.ones(3):cross(dpl.ones(3):double()) end, 'cross: input and other must have the same dtype, got float32 and float64')
    raises(function() return dpl.ones(3):cross(dpl.ones(3), 3) end, 'cross: dim 3 out of range')
    raises(function() return dpl.ones(3):cross(dpl.ones(3), { axis = 1 }) end, "cross: unknown option 'axis'")
    raises(function() return dpl.tensor({ true, true, false }):cross(dpl.tensor({ true, true, false })) end,
      'cross: bool tensors are not supported')
  end)

  it('kron', function()
    for _, k in ipairs(sorted_keys('kron ')) do
      if k ~= 'kron grad' then
        local c = R(k)
        same(T(c.a):kron(T(c.b)), c.y, k)
      end
    end
    local c = R('kron grad')
    local a, b = T(c.a, true), T(c.b, true)
    local _ = (dpl.kron(a, b) * T(c.g)):sum():backward()
    same(a.grad, c.ga, 'kron grad')
    same(b.grad, c.gb, 'kron grad other')
    local x = T(R('kron (2, 3) (4,)').a)
    same(x:t():contiguous():t():kron(T(R('kron (2, 3) (4,)').b)), R('kron (2, 3) (4,)').y, 'strided')
    raises(function() return dpl.ones(1, 1, 1, 1, 2):kron(dpl.ones(2)) end,
      'NotImplementedError: kron: operands of more than 4 dims are not implemented (got 5 and 1 dims)')
    raises(function() return dpl.ones(2):kron(3) end, 'kron: other must be a tensor, got number')
  end)

  it('baddbmm matches PyTorch (beta, alpha, broadcast input, beta 0 ignoring NaN) and has its gradients', function()
    for _, k in ipairs(sorted_keys('baddbmm ')) do
      if k ~= 'baddbmm grad' then
        local c = R(k)
        same(dpl.baddbmm(T(c.c), T(c.a), T(c.b), c.kw), c.y, k)
        same(T(c.c):baddbmm(T(c.a), T(c.b), c.kw), c.y, k .. ' method')
      end
    end
    local c = R('baddbmm (2, 3, 5) {\'beta\': 0.5, \'alpha\': 2.0}')
    local t = T(c.c)
    assert.are.equal(t, t:baddbmm_(T(c.a), T(c.b), c.kw))
    same(t, c.y, 'baddbmm_')
    same_as(dpl.baddbmm(T(c.c), T(c.a):transpose(2, 3):contiguous():transpose(2, 3), T(c.b), c.kw), dpl.baddbmm(T(c.c), T(c.a), T(c.b), c.kw), 'strided')
    c = R('baddbmm grad')
    local x, a, b = T(c.c, true), T(c.a, true), T(c.b, true)
    local _ = (dpl.baddbmm(x, a, b, c.kw) * T(c.g)):sum():backward()
    same(x.grad, c.gc, 'baddbmm grad input')
    same(a.grad, c.ga, 'baddbmm grad batch1')
    same(b.grad, c.gb, 'baddbmm grad batch2')
    local m1, m2 = dpl.randn(2, 3, 4), dpl.randn(2, 4, 5)
    raises(function() return dpl.baddbmm(dpl.ones(2, 2, 3, 5), m1, m2) end,
      "baddbmm: input of shape [2, 2, 3, 5] cannot be broadcast to the product's shape [2, 3, 5]")
    raises(function() return dpl.baddbmm(dpl.ones(4), m1, m2) end, 'cannot be broadcast')
    raises(function() return dpl.baddbmm(dpl.ones(5), m1:double(), m2) end,
      'baddbmm: batch1 and batch2 must have the same dtype, got float64 and float32')
    raises(function() return dpl.baddbmm(dpl.ones(5), m1[1], m2) end, 'baddbmm: batch1 and batch2 must be 3-d tensors, got 2-d and 3-d')
    raises(function() return dpl.baddbmm(dpl.ones(5), m1, m2, { gamma = 1 }) end, "baddbmm: unknown option 'gamma'")
    raises(function() return dpl.baddbmm(dpl.ones(5), m1, m2, 2) end, 'baddbmm: options must be a table {beta=, alpha=}, got number')
    raises(function() return dpl.baddbmm(dpl.ones(5), m1:long(), m2:long(), { beta = 0.5 }) end,
      'baddbmm: beta and alpha must be integers for int64 tensors, got beta=0.5, alpha=1')
    raises(function() return dpl.ones(5):baddbmm_(m1, m2) end, "baddbmm_: the result shape [2, 3, 5] does not match the in-place tensor's shape [5]")
    raises(function() return dpl.ones(2, 3, 5, { dtype = 'int64' }):baddbmm_(m1, m2) end,
      "baddbmm_: self's dtype int64 must be the batches' (float32)")
  end)
end)

describe('amax, amin, aminmax, nansum, nanmean, std_mean, var_mean', function()
  it('amax and amin match PyTorch over a dim, a list of dims or all, with keepdim; ties share the gradient', function()
    for _, op in ipairs({ 'amax', 'amin' }) do
      for _, k in ipairs(sorted_keys(op .. ' ')) do
        local c = R(k)
        local x = T(c.x, c.gx ~= nil)
        local y = x[op](x, c.dim, c.keepdim)
        same(y, c.y, k)
        if c.gx then
          local _ = (y * T(c.g)):sum():backward()
          same(x.grad, c.gx, k .. ' grad')
        end
        same(dpl[op](T(c.x), c.dim, c.keepdim), c.y, 'dpl.' .. k)
      end
      local x = T(R(op .. ' 2 False').x)
      same_as(x:transpose(1, 3)[op](x:transpose(1, 3), { 1, 3 }), x[op](x, { 1, 3 }), op .. ' of a transposed tensor')
      raises(function() return x[op](x, { 1, 1 }) end, op .. ': dim 1 appears multiple times in the list of dims')
      raises(function() return x[op](x, { 1, -3 }) end, op .. ': dim -3 appears multiple times in the list of dims')
      raises(function() return x[op](x, 4) end, op .. ': dim 4 out of range (expected 1..3 or -3..-1 for a 3-d tensor)')
      raises(function() return x[op](x, 'a') end, op .. ': dim must be an integer or a list of integers, got string')
      raises(function() return x[op](x, { keepdim = true }) end, op .. ': dim must be an integer or a list of integers, got a table with key keepdim')
      raises(function() return x[op](x, 1, 1) end, op .. ': keepdim must be a boolean, got number')
      raises(function() return dpl.zeros(0)[op](dpl.zeros(0)) end, op .. ': expected a dim to reduce over for an empty tensor')
      raises(function() return dpl.zeros(0, 3)[op](dpl.zeros(0, 3), 1) end, op .. ': cannot reduce over dim 1 of size 0')
      raises(function() return dpl.tensor(1)[op](dpl.tensor(1), 2) end, op .. ': dim 2 out of range: the tensor has no dims (0-d)')
    end
  end)

  it('aminmax returns min and max (dim and keepdim positional or as options)', function()
    for _, k in ipairs(sorted_keys('aminmax ')) do
      local c = R(k)
      local mn, mx = T(c.x):aminmax(c.dim, c.keepdim)
      same(mn, c.min, k .. ' min')
      same(mx, c.max, k .. ' max')
      mn, mx = dpl.aminmax(T(c.x), { dim = c.dim, keepdim = c.keepdim })
      same(mn, c.min, k .. ' min (options)')
      same(mx, c.max, k .. ' max (options)')
    end
    raises(function() return dpl.zeros(0):aminmax() end, 'aminmax: cannot compute aminmax over an empty dim')
    raises(function() return dpl.ones(2, 2):aminmax('a') end, 'aminmax: dim must be an integer or nil, got string')
    raises(function() return dpl.ones(2, 2):aminmax({ dim = { 1, 2 } }) end, 'aminmax: dim must be an integer or nil, got table')
    raises(function() return dpl.ones(2, 2):aminmax({ dims = 1 }) end, "aminmax: unknown option 'dims' (did you mean 'dim'?)")
  end)

  it('nansum and nanmean skip NaN (all-NaN slices: nanmean NaN) and have PyTorch\'s gradients', function()
    for _, op in ipairs({ 'nansum', 'nanmean' }) do
      for _, k in ipairs(sorted_keys(op .. ' ')) do
        local c = R(k)
        local x = T(c.x, c.gx ~= nil)
        local y = x[op](x, c.dim, c.keepdim)
        same(y, c.y, k)
        if c.gx then
          local _ = (y * T(c.g)):sum():backward()
          same(x.grad, c.gx, k .. ' grad')
        end
        same(dpl[op](T(c.x), c.dim, c.keepdim), c.y, 'dpl.' .. k)
      end
      local x = T(R(op .. ' 1 False').x)
      same_as(x:t()[op](x:t(), 2), x[op](x, 1), op .. ' of a transposed tensor')
      raises(function() return x[op](x, 1, false, { dtype = 'float64' }) end,
        'NotImplementedError: ' .. op .. ': the dtype argument is not implemented')
      raises(function() return x[op](x, { 2, 2 }) end, op .. ': dim 2 appears multiple times')
    end
    raises(function() return dpl.tensor({ 1, 2 }):nanmean() end, 'nanmean: expected a floating-point tensor, got int64')
  end)

  it('std_mean and var_mean match PyTorch (dims, unbiased, keepdim) with gradients through both results', function()
    for _, op in ipairs({ 'std_mean', 'var_mean' }) do
      for _, k in ipairs(sorted_keys(op .. ' ')) do
        local c = R(k)
        local x = T(c.x, c.gx ~= nil)
        local s, m
        if c.dim == nil and c.keepdim == nil and c.unbiased == nil then s, m = x[op](x)
        elseif c.dim == nil then s, m = x[op](x, c.unbiased)
        else s, m = x[op](x, c.dim, c.unbiased, c.keepdim) end
        same(s, c.s, k .. ' ' .. op:sub(1, 3))
        same(m, c.m, k .. ' mean')
        if c.gx then
          local _ = ((s * T(c.g1)):sum() + (m * T(c.g2)):sum()):backward()
          same(x.grad, c.gx, k .. ' grad', 1e-11)
        end
      end
      local x = T(R(op .. ' 2 True False').x)
      local s1, m1 = x:transpose(1, 3)[op](x:transpose(1, 3), { 1, 3 })
      local s2, m2 = dpl[op](x, { 3, 1 })
      same_as(s1, s2, op .. ' transposed', 1e-14)
      same_as(m1, m2, op .. ' transposed mean', 1e-14)
      raises(function() return dpl.tensor({ 1, 2 })[op](dpl.tensor({ 1, 2 })) end,
        op .. ': expected a floating-point tensor, got int64')
      raises(function() return x[op](x, 1, 1) end, op .. ': unbiased must be a boolean, got number')
      raises(function() return x[op](x, 1, true, false, { correction = 0 }) end,
        'NotImplementedError: ' .. op .. ': the correction option is not implemented')
    end
  end)
end)

describe('the math group as a whole', function()
  local NAMES = { 'log10', 'exp2', 'sinh', 'cosh', 'tan', 'asin', 'acos', 'atan', 'asinh', 'acosh', 'atanh', 'frac',
    'hardtanh', 'softplus', 'elu', 'leaky_relu', 'mish', 'hardswish', 'isinf', 'isfinite', 'nan_to_num', 'isclose',
    'allclose', 'equal', 'bitwise_and', 'bitwise_or', 'bitwise_xor', 'bitwise_not', 'true_divide', 'lerp', 'addcmul',
    'addcdiv', 'outer', 'cross', 'kron', 'baddbmm', 'amax', 'amin', 'aminmax', 'nansum', 'nanmean', 'std_mean',
    'var_mean' }

  it('every method is a tensor method and a dpl function, no longer NotImplementedError', function()
    local T = require 'dpl.tensor'
    local S = debug.getregistry()['dpl.tensor.state']
    for _, name in ipairs(NAMES) do
      assert.are.equal('function', type(T.methods[name]), name)
      assert.are.equal('function', type(dpl[name]), 'dpl.' .. name)
      assert.is_nil(S.missing[name], name .. ' is still in the missing list')
    end
    for _, name in ipairs({ 'log10_', 'frac_', 'hardtanh_', 'elu_', 'leaky_relu_', 'mish_', 'hardswish_', 'nan_to_num_',
      'bitwise_and_', 'bitwise_not_', 'true_divide_', 'lerp_', 'addcmul_', 'addcdiv_', 'baddbmm_' }) do
      assert.are.equal('function', type(T.methods[name]), name)
    end
  end)

  it('in-place forms bump the version counter (a saved tensor modified is an error in backward)', function()
    local x = dpl.randn(3):double():requires_grad_()
    local y = x * 1
    local z = y:exp() -- saves its output
    z:elu_()
    raises(function() z:sum():backward() end, 'modified by an inplace operation')
    local w = dpl.randn(3):requires_grad_()
    raises(function() w:addcmul_(w, w) end, 'addcmul_: a leaf tensor that requires grad is being used in an in-place operation')
    local i = dpl.tensor({ 1, 2 })
    i:bitwise_and_(3) -- (integer tensors: no history)
    assert.is_false(i.requires_grad)
  end)

  it('tensors in GPU memory raise NotImplementedError "<op>: not implemented on cuda", never a crash', function()
    local calls = {
      { 'x:log10()', 'log10' }, { 'x:atanh_()', 'atanh' }, { 'x:isinf()', 'isinf' }, { 'x:frac()', 'frac' },
      { 'x:elu()', 'elu' }, { 'x:hardswish_()', 'hardswish' }, { 'x:nan_to_num()', 'nan_to_num' },
      { 'x:isclose(x)', 'isclose' }, { 'x:lerp(x, 0.5)', 'lerp' }, { 'x:addcmul(x, x)', 'addcmul' },
      { 'x:addcdiv_(x, x)', 'addcdiv_' }, { 'dpl.act_backward("mish", x, x)', 'mish_backward' },
      { 'i:bitwise_and(i)', 'bitwise_and' }, { 'i:bitwise_not()', 'bitwise_not' }, { 'i:bitwise_xor_(1)', 'bitwise_xor' },
    }
    local code = { [[
dpl.C.dpl_proc_setenv('DPL_CUDA_PLUGIN', 'off')
local bit = require 'bit'
local function devmem(t) local v = t:view(t:size()) v._flags = bit.bor(v._flags, 2) return v end
local function undo(v) v._flags = bit.band(v._flags, bit.bnot(2)) end
]] }
    for k, c in ipairs(calls) do
      code[#code + 1] = ([[
do
  local x, i = devmem(dpl.randn(2, 3)), devmem(dpl.tensor({ 1, 2 }))
  local ok, e = pcall(function() return %s end)
  undo(x) undo(i)
  print(%d, ok, tostring(e))
end
]]):format(c[1], k)
    end
    local out, err, rc = h.run_chunk("local dpl = require 'dpl'\n" .. table.concat(code))
    assert.are.equal(0, rc, out .. err)
    for k, c in ipairs(calls) do
      local line = out:match('\n?(' .. k .. '\tfalse\t[^\n]*)')
      assert(line, ('case %d (%s): no error line in\n%s%s'):format(k, c[1], out, err))
      assert(line:find('NotImplementedError: ' .. c[2] .. ': not implemented on cuda', 1, true), line)
    end
  end)

  it('returns every byte after collectgarbage() (results, temporaries, gradients)', function()
    -- in a fresh process: the byte counters then see this work only
    local out, err, rc = h.run_chunk([[
local dpl = require 'dpl'
local function work() -- (a function: its dead locals leave the Lua stack when it returns)
  local x = dpl.randn(16, 8):double():requires_grad_()
  local y = dpl.randn(16, 8):double()
  local l = x:sinh():sum() + x:elu(0.5):sum() + x:lerp(y, 0.3):sum() + x:addcdiv(y, y:abs() + 1):sum()
    + x:amax(2):sum() + x:nanmean({ 1, 2 }) + select(1, x:var_mean({ 1, 2 })) + x:nan_to_num():sum()
    + x:t():kron(y:narrow(1, 1, 2)):sum() + x:narrow(2, 1, 3):cross(y:narrow(2, 1, 3)):sum()
    + dpl.baddbmm(y:narrow(1, 1, 2):reshape(2, 8, 1), x:reshape(2, 8, 8), y:reshape(2, 8, 8)):sum()
    + x:nansum(2):sum() + x:std_mean() + x:aminmax() + (x * 1):hardtanh_(-5, 5):sum()
  l:backward()
  local h16 = y:half()
  local _ = h16:asinh() + h16:softplus() + h16:nan_to_num(0):mish()
  local i = dpl.randint(0, 100, { 32 })
  local _, _ = i:bitwise_xor(7):bitwise_not(), i:aminmax()
  local _ = x:isclose(y):any():item() and x:allclose(y) and x:equal(y)
  pcall(function() return i:addcdiv(i, i) end) -- errors free their temporaries too
  pcall(function() return x:lerp(dpl.ones(3), 0.5) end)
  pcall(function() return y:addcmul_(x, dpl.ones(3, 3)) end)
end
local function collect() -- (a gradient in autograd's weak-keyed tables goes a cycle after its tensor)
  for _ = 1, 4 do collectgarbage() end
end
collect()
local start = dpl.memory_stats('cpu').current_bytes
work()
collect()
local before = dpl.memory_stats('cpu').current_bytes
for _ = 1, 5 do work() end
collect()
print(start, before, dpl.memory_stats('cpu').current_bytes)
]])
    assert.are.equal(0, rc, out .. err)
    local start, before, after = out:match('(%d+)%s+(%d+)%s+(%d+)')
    assert(after, out .. err)
    assert.are.equal(tonumber(start), tonumber(before), 'bytes left by one round: ' .. out)
    assert.are.equal(tonumber(start), tonumber(after), 'bytes left by 6 rounds: ' .. out)
  end)
end)

-- Cases found by the randomized differential test against PyTorch 1.13
-- (scripts/difftest/difftest.py); torch's values inline.
describe('math group: differential test findings', function()
  it("lerp takes the first side of PyTorch 1.13's formula for every weight below 0.5, negative ones too", function()
    local inf = math.huge
    local r = dpl.tensor({ 0.3, 0.3, 1 }):lerp(dpl.tensor({ -inf, inf, 2 }), dpl.tensor({ -0.7, -0.7, -1.5 }))
    assert.are.same({ inf, -inf, -0.5 }, r:totable()) -- (|w| >= 0.5 on the second side gave nan, nan)
    assert.are.equal(inf, dpl.tensor({ 0.3 }):lerp(dpl.tensor({ -inf }), -2):item())
    local a = dpl.tensor({ 0.3 }, { dtype = 'float64' })
    a:lerp_(dpl.tensor({ -inf }, { dtype = 'float64' }), -0.7)
    assert.are.equal(inf, a:item())
  end)
  it('addcmul / addcdiv take a boolean value (a Python bool is a Scalar in PyTorch)', function()
    assert.are.same({ 16, 26 }, dpl.tensor({ 1, 2 }):addcmul(dpl.tensor({ 3, 4 }), dpl.tensor({ 5, 6 }), true):totable())
    local f = { dtype = 'float32' }
    assert.are.same({ 1, 2 },
      dpl.tensor({ 1, 2 }, f):addcdiv(dpl.tensor({ 3, 4 }, f), dpl.tensor({ 2, 8 }, f), { value = false }):totable())
  end)
  it('hardtanh of uint8 with a negative bound is an error, as PyTorch (the bounds truncated first)', function()
    local u = dpl.tensor({ 1, 2 }, { dtype = 'uint8' })
    raises(function() return u:hardtanh() end, 'cannot do hardtanh on an unsigned type')
    raises(function() return u:clone():hardtanh_(0, -1) end, 'negative limits')
    assert.are.same({ 1, 1 }, u:hardtanh(-0.5, 1):totable())
  end)
end)

describe('math group: differential test findings (std)', function()
  it("std_mean's (and std's) gradient is 0 where the std is 0, as PyTorch's std_backward", function()
    local x = dpl.tensor({ { 1, 1, 1 }, { 1, 2, 4 } }, { dtype = 'float64' }):requires_grad_()
    local s = x:std_mean(2)
    ;(s * dpl.tensor({ 1, 2 }, { dtype = 'float64' })):sum():backward()
    h.near(x.grad, { { 0, 0, 0 }, { -0.8728715609439697, -0.2182178902359925, 1.0910894511799618 } }, 1e-12)
    local y = dpl.tensor({ 3, 3 }, { dtype = 'float64' }):requires_grad_()
    y:std():backward()
    assert.are.same({ 0, 0 }, y.grad:totable())
  end)
end)

describe('math group: differential test findings (baddbmm dtypes)', function()
  it("baddbmm's result has the batches' dtype, input converted to it; baddbmm_ needs self of that dtype", function()
    local function b1(dt) return dpl.ones({ 2, 2, 3 }, { dtype = dt }) end
    local function b2(dt) return dpl.ones({ 2, 3, 2 }, { dtype = dt }) end
    -- torch: (input dtype, batch dtype) -> result dtype, element
    for _, c in ipairs({ { 'float64', 'float32', 'float32', 4.5 }, { 'int64', 'float32', 'float32', 4 },
      { 'float16', 'float32', 'float32', 4.5 }, { 'float32', 'int64', 'int64', 4 }, { 'float32', 'float64', 'float64', 4.5 } }) do
      local r = dpl.baddbmm(dpl.full({ 1 }, 1.5, { dtype = c[1] }), b1(c[2]), b2(c[2]))
      assert.are.equal(c[3], r.dtype)
      assert.are.equal(c[4], r[1][1][1]:item())
      raises(function() return dpl.full({ 2, 2, 2 }, 1.5, { dtype = c[1] }):baddbmm_(b1(c[2]), b2(c[2])) end,
        "must be the batches'")
    end
    local x = dpl.ones({ 2, 2, 2 }, { dtype = 'float64' }):requires_grad_()
    local y = dpl.baddbmm(x, b1('float32'), b2('float32'))
    y:sum():backward()
    assert.are.equal('float64', x.grad.dtype)
    h.near(x.grad, dpl.ones({ 2, 2, 2 }, { dtype = 'float64' }))
  end)
end)

describe('math group: differential test findings (isclose of 16-bit floats)', function()
  it('isclose of float16 rounds each step to float16, as PyTorch (rtol and atol too)', function()
    local a = dpl.tensor({ 1.9501953125, 1.0, 100.0 }, { dtype = 'float16' })
    local b = dpl.tensor({ 1.9521484375, 1.0009765625, 100.125 }, { dtype = 'float16' })
    -- torch: [True, True, False]; in float32 arithmetic the first would be false
    assert.are.same({ true, true, false }, a:isclose(b, 0.001, 1e-8):totable())
    assert.are.same({ false, true, false }, a:float():isclose(b:float(), 0.001, 1e-8):totable())
    assert.is_true(a:narrow(1, 1, 2):allclose(b:narrow(1, 1, 2), 0.001, 1e-8))
  end)
end)

describe('float32 products of 1-3 rows', function()
  it('are the same bits as OpenBLAS (DPL_SGEMM_SMALLM=0) and as the rows of a larger product', function()
    -- (dplhost's own kernel for m < 4, k <= 320: each output one FMA chain from zero over k, as
    -- OpenBLAS's Haswell kernels within one k block; the generation steps of the recurrent nets)
    local script = os.tmpname()
    local f = assert(io.open(script, 'w'))
    f:write([[
      local dpl = require 'dpl'
      local ffi = require 'ffi'
      dpl.manual_seed(7)
      local parts = {}
      for _, m in ipairs({ 1, 2, 3 }) do
        for _, n in ipairs({ 16, 17, 100, 1024 }) do
          for _, k in ipairs({ 1, 15, 17, 64, 255, 320, 321 }) do
            local a, w, c = dpl.randn(m, k), dpl.randn(n, k), dpl.randn(m, n)
            for _, r in ipairs({ dpl.addmm(c, a, w:t()), dpl.addmm(c, a, w:t():contiguous()), a:mm(w:t()),
              a:mm(w:t():contiguous()) }) do
              local b = ffi.string(r._data, m * n * 4)
              local h = 0
              for i = 1, #b, 7 do h = (h * 31 + b:byte(i)) % 2147483647 end
              parts[#parts + 1] = h
            end
          end
        end
      end
      print(table.concat(parts, ' '))
    ]])
    f:close()
    -- (the kernel runs on AVX-512 CPUs only; OpenBLAS held to its Haswell kernels there, whose k
    -- blocks this was checked against: another core type may block k otherwise)
    local ci = io.open('/proc/cpuinfo')
    local avx512 = ci and ci:read('*a'):find(' avx512f') ~= nil
    if ci then ci:close() end
    local function run(env)
      env = env .. (avx512 and ' OPENBLAS_CORETYPE=Haswell' or '')
      local p = assert(io.popen(env .. ' DPL_NUM_THREADS=1 ' .. h.q(h.bin) .. ' ' .. script))
      local s = p:read('*a')
      p:close()
      return s
    end
    local mine, blas = run(''), run('DPL_SGEMM_SMALLM=0')
    os.remove(script)
    assert(#mine > 100, 'no output')
    assert.are.equal(blas, mine)
    dpl.manual_seed(3)
    for _, k in ipairs({ 64, 128, 256 }) do
      local a, w, c = dpl.randn(8, k), dpl.randn(512, k), dpl.randn(8, 512)
      local full = dpl.addmm(c, a, w:t())
      for m = 1, 3 do
        assert.is_true(dpl.addmm(c:narrow(1, 1, m), a:narrow(1, 1, m), w:t()):equal(full:narrow(1, 1, m)))
      end
    end
  end)
end)
