-- cuda_check.lua: the CUDA op-consistency harness, shared by
-- spec/cuda_ops_spec.lua (busted) and scripts/gpu_check.lua (plain dplhost, for
-- the GPU machine). Every case draws fresh random CPU inputs, runs the same
-- function on the CPU and on cuda:0 (inputs copied there), and compares the
-- outputs: relative L2 error ||gpu - cpu|| / ||cpu|| within the output dtype's
-- tolerance, NaN only where the CPU has NaN, integers and bools exact. Run with
-- DPL_CUDA_POISON=1 (gpu-check.sh does) so that every GPU allocation starts as
-- 0xff bytes (NaN, -1): an output element a kernel forgot to write fails.
local dpl = require 'dpl'

local M = {}
local unpack = table.unpack or unpack

M.tol = { float32 = 1e-5, float64 = 1e-10, float16 = 2e-3, bfloat16 = 1e-2 }

local is_tensor = require('dpl.tensor').is_tensor

--- Compares one output; returns ok, relative error (or a message).
function M.compare(ref, got, tol_override)
  if ref:size() == nil then return false, 'no reference' end
  local rs, gs = table.concat(ref:size(), 'x'), table.concat(got:size(), 'x')
  if rs ~= gs then return false, ('shape %s, expected %s'):format(gs, rs) end
  if ref.dtype ~= got.dtype then return false, ('dtype %s, expected %s'):format(got.dtype, ref.dtype) end
  if got.device.type ~= 'cuda' then return false, 'result is on ' .. tostring(got.device) .. ', expected cuda' end
  local g = got:to('cpu')
  if ref:numel() == 0 then return true, 0 end
  local r64, g64 = ref:double(), g:double()
  local tol -- a number for every float output, or a table by dtype (integers then exact)
  if type(tol_override) == 'table' then tol = tol_override[ref.dtype] or M.tol[ref.dtype]
  else tol = tol_override or M.tol[ref.dtype] end
  if not tol then -- integers, bool: exact
    local bad = r64:ne(g64):sum():item()
    if bad > 0 then return false, ('%d of %d elements differ'):format(bad, ref:numel()) end
    return true, 0
  end
  local rn, gn = r64:isnan(), g64:isnan()
  local nanbad = rn:logical_xor(gn):sum():item()
  if nanbad > 0 then return false, ('%d elements NaN on one side only (unwritten output?)'):format(nanbad) end
  local same = r64:eq(g64):logical_or(rn) -- equal (infinities too) or both NaN
  local d = (g64 - r64):masked_fill(same, 0)
  local rc = r64:masked_fill(rn, 0):masked_fill(r64:isnan():logical_or(r64:abs():eq(math.huge)), 0)
  local num, den = d:norm():item(), rc:norm():item()
  local err = den > 0 and num / den or num
  if err ~= err then return false, 'error is NaN' end
  if err > tol then return false, ('relative error %.3g > %.3g'):format(err, tol) end
  return true, err
end

local function outputs(x)
  if type(x) ~= 'table' or is_tensor(x) then return { x } end
  return x
end

local function to_dev(list, dev)
  local r = {}
  for i, v in ipairs(list) do r[i] = is_tensor(v) and v:to(dev) or v end
  return r
end

---------------------------------------------------------------- cases
local cases = {}
M.cases = cases
-- add(name, inputs_fn, fn[, tol]): fn(dev, ...) gets the device string and the inputs
local function add(name, inputs, fn, tol) cases[#cases + 1] = { name = name, inputs = inputs, fn = fn, tol = tol } end

local function randn(...) return dpl.randn(...) end
local function randint(lo, hi, size, dt) return dpl.randint(lo, hi, size, { dtype = dt or 'int64' }) end

local all_dtypes = { 'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'bool' }
local function sample(dt, ...)
  if dt == 'bool' then return dpl.rand(...):gt(0.5) end
  if dt == 'uint8' then return randint(0, 256, { ... }, 'uint8') end
  if dt == 'int32' or dt == 'int64' then return randint(-50, 50, { ... }, dt) end
  return (randn(...) * 3):to(dt)
end

-- an error's message as an int64 tensor of its bytes on dev (both sides must raise the same one;
-- no error: an empty tensor)
local function err_bytes(dev, f, ...)
  local ok, e = pcall(f, ...)
  local m = ok and '' or tostring(e):gsub('^[^\n]-%.lua:%d+: ', '')
  local b = { m:byte(1, -1) }
  return dpl.tensor(#b > 0 and b or {}, { dtype = 'int64', device = dev })
end
M.err_bytes = err_bytes

-- transfers and conversions
for _, dt in ipairs(all_dtypes) do
  add('to/roundtrip ' .. dt, function() return { sample(dt, 7, 33) } end, function(_, x) return { x:clone() } end)
end
for _, pair in ipairs({ { 'float32', 'float16' }, { 'float32', 'bfloat16' }, { 'float32', 'int32' },
  { 'float64', 'float32' }, { 'int64', 'float32' }, { 'float32', 'bool' }, { 'uint8', 'float32' },
  { 'int32', 'int64' }, { 'bfloat16', 'float32' }, { 'float16', 'float64' }, { 'bool', 'int64' } }) do
  add(('to %s->%s'):format(pair[1], pair[2]), function() return { sample(pair[1], 5, 19) } end,
    function(_, x) return { x:to(pair[2]) } end)
end
add('copy strided/narrow/expand', function() return { randn(6, 5) } end, function(dev, x)
  local y = dpl.zeros(4, 6, 5, { device = dev })
  y:copy_(x)
  return { x:t():contiguous(), x:narrow(2, 2, 3):clone(), y, x:t():reshape(30) }
end)
add('copy_ between overlapping views of one tensor (as through a temporary)', function() return { randn(6, 6) } end,
  function(dev, x)
    local a, b, c, d = x:clone(), x:clone(), x:clone(), x:clone()
    a:narrow(2, 2, 5):copy_(a:narrow(2, 1, 5)) -- shifted right along rows (strided)
    b:view(-1):narrow(1, 1, 35):copy_(b:view(-1):narrow(1, 2, 35)) -- shifted left (contiguous)
    c:copy_(c:t()) -- its own transpose
    d:narrow(1, 2, 5):copy_(d[1]) -- one of its rows broadcast over the others
    local e, f, g = x:clone(), x:clone(), x:clone()
    e:add_(e:t()) -- in place, the other operand its own transpose
    f:add_(f:t(), 0.5) -- the same through axpy
    g:narrow(2, 2, 5):mul_(g:narrow(2, 1, 5)) -- shifted views of one tensor
    local h, k = x:clone(), x:clone()
    local idx = dpl.tensor({ 2, 3, 4, 5, 6, 1 }):to(dev)
    h:index_add_(1, idx, h) -- a source that is self
    k:scatter_add_(2, dpl.tensor({ { 6, 5, 4, 3, 2, 1 } }):expand(6, 6):contiguous():to(dev), k)
    local bm = x:gt(0)
    bm:masked_fill_(bm:t(), false) -- a bool tensor masked by its own transpose
    return { a, b, c, d, e, f, g, h, k, bm }
  end)
add('copy host<->device strided', function() return { randn(6, 5) } end, function(dev, x)
  local h = (x * 2):cpu() -- host memory
  local y = dpl.zeros(5, 6, { device = dev })
  y:t():copy_(h) -- host -> a strided device view
  local back = dpl.zeros(5, 6)
  back:copy_(x:t()) -- a strided device view -> host
  local bc = dpl.zeros(3, 6, 5)
  bc:copy_(x:to('float64')) -- converted and broadcast on the way
  return { y, back:to(dev), bc:to(dev) }
end)
add('fill/zeros/ones/full/arange/linspace/eye', function() return {} end, function(dev)
  local o = { device = dev }
  return { dpl.zeros(3, 4, o), dpl.ones(3, 4, o), dpl.full({ 2, 3 }, 2.5, o), dpl.full({ 4 }, 7, o),
    dpl.arange(0, 10, 0.5, o), dpl.linspace(-1, 1, 11, o), dpl.eye(4, 3, o),
    dpl.zeros(5, { device = dev, dtype = 'bfloat16' }):fill_(1.5), dpl.zeros(5, { device = dev, dtype = 'int64' }):fill_(2 ^ 40) }
end)
add('item/totable via host', function() return { randn(3, 4) } end, function(dev, x)
  local t = x:totable()
  local v = x:sum():item()
  return { dpl.tensor(t, { device = dev }), dpl.tensor({ v }, { device = dev, dtype = 'float64' }) }
end)

-- binary ops with broadcasting, on several kernel dtypes
local binops = { 'add', 'sub', 'mul', 'div', 'pow', 'maximum', 'minimum', 'remainder', 'fmod', 'atan2', 'eq', 'ne', 'lt',
  'le', 'gt', 'ge', 'logical_and', 'logical_or', 'logical_xor' }
for _, dt in ipairs({ 'float32', 'float64', 'bfloat16', 'float16', 'int32', 'int64' }) do
  for _, op in ipairs(binops) do
    local int = dt == 'int32' or dt == 'int64'
    if not (int and (op == 'pow')) then
      add(('binary %s %s'):format(op, dt), function()
        local a, b = sample(dt, 4, 1, 5), sample(dt, 3, 5)
        if op == 'pow' then a = a:abs() + 0.5 end
        if (op == 'remainder' or op == 'fmod') and int then -- no zero divisors (ZeroDivisionError)
          b = b:clamp(1, 9)
          a = a:masked_fill(a:eq(0), 3)
        end
        return { a, b }
      end, function(_, a, b) return { a[op](a, b), a[op](a, a:transpose(1, 3):transpose(1, 3)) } end)
    end
  end
end
add('binary mixed dtypes and 0-d', function() return { randn(4, 5), randint(-5, 5, { 4, 5 }), randn(1):view() } end,
  function(_, a, i, s) return { a + i, i * 2.5, i / 3, s * a, a - s, 2 - a, 3 / (a:abs() + 1), a:gt(0.5), i:lt(1) } end)
add('binary in place', function() return { randn(4, 5), randn(5) } end, function(_, a, b)
  local x = a:clone()
  x:add_(b)
  x:mul_(1.5)
  local y = a:clone()
  y:add_(b, 0.25) -- axpy
  local z = a:to('bfloat16')
  z:add_(b:to('bfloat16'), -2)
  return { x, y, z }
end)

-- large contiguous operands take the 16-byte vector kernels (4096+ elements, an odd tail)
for _, dt in ipairs({ 'float32', 'float64', 'int64', 'int32', 'bfloat16', 'uint8' }) do
  add('vector paths ' .. dt, function() return { sample(dt, 70, 61), sample(dt, 70, 61) } end, function(_, a, b)
    local int = dt == 'int64' or dt == 'int32' or dt == 'uint8'
    local r = { a + b, a * b, a - 3, a:lt(b), a:eq(b), a:maximum(b), a:abs() }
    if not int then
      r[#r + 1] = a:exp()
      r[#r + 1] = a:relu()
      local c = a:clone()
      c:add_(b, 0.5)
      r[#r + 1] = c
    end
    return r
  end)
end

-- unary
local unops = { 'neg', 'abs', 'exp', 'log', 'sqrt', 'rsqrt', 'tanh', 'sigmoid', 'relu', 'gelu', 'sin', 'cos', 'floor',
  'ceil', 'round', 'sign', 'reciprocal', 'square', 'log1p', 'expm1', 'logical_not', 'silu', 'erf', 'trunc', 'log2',
  'isnan', 'log10', 'exp2', 'sinh', 'cosh', 'tan', 'asin', 'acos', 'atan', 'asinh', 'acosh', 'atanh', 'frac', 'isinf',
  'isfinite' }
local positive = { log = true, sqrt = true, rsqrt = true, log1p = true, log2 = true, reciprocal = true, log10 = true,
  acosh = true }
local unit = { asin = true, acos = true, atanh = true } -- (-1, 1)
for _, dt in ipairs({ 'float32', 'float64', 'bfloat16' }) do
  for _, op in ipairs(unops) do
    add(('unary %s %s'):format(op, dt), function()
      local x = sample(dt, 6, 7)
      if positive[op] then x = x:abs() + 0.25 end
      if op == 'acosh' then x = x + 1 end
      if unit[op] then x = x:tanh() * 0.9 end
      if op == 'isinf' or op == 'isfinite' then x[{ 1, 1 }] = math.huge; x[{ 2, 3 }] = -math.huge; x[{ 3, 2 }] = 0 / 0 end
      return { x }
    end, function(_, x) return { x[op](x), x:t()[op](x:t()) } end)
  end
end
for _, op in ipairs({ 'neg', 'abs', 'relu', 'sign', 'square', 'logical_not', 'floor', 'exp', 'bitwise_not', 'isinf',
  'isfinite', 'sinh' }) do
  add('unary ' .. op .. ' int64', function() return { randint(-9, 9, { 5, 6 }) } end, function(_, x) return { x[op](x) } end)
end
add('unary bitwise_not bool and uint8', function() return { randint(0, 2, { 5, 6 }):bool(), randint(0, 256, { 5, 6 }):byte() } end,
  function(_, b, u) return { b:bitwise_not(), u:bitwise_not() } end)
add('unary in place', function() return { randn(5, 6) } end, function(_, x)
  local y = x:clone()
  y:relu_()
  local z = x:clone()
  z:exp_()
  return { y, z }
end)
for _, op in ipairs({ 'relu', 'gelu', 'silu', 'tanh', 'sigmoid' }) do
  add('activation_backward ' .. op, function() return { randn(6, 7), randn(6, 7) } end, function(_, g, x)
    local saved = (op == 'tanh' or op == 'sigmoid') and x[op](x) or x
    return { dpl.tensor.activation_backward(op, g, saved) }
  end)
end
-- the parametrised activations (composed of GPU ops on cuda, the C kernels on the CPU): forward,
-- in place and gradient (T.act_backward), NaN, the branch points and float16/bfloat16
local acts = { { 'hardtanh', -0.5, 2 }, { 'softplus', 2, 5 }, { 'softplus' }, { 'elu', 0.7 }, { 'leaky_relu', 0.2 },
  { 'mish' }, { 'hardswish' } }
for _, dt in ipairs({ 'float32', 'float64', 'float16', 'bfloat16' }) do
  for _, a in ipairs(acts) do
    local op, p0, p1 = a[1], a[2], a[3]
    add(('activation %s%s %s'):format(op, p0 and ('(' .. p0 .. (p1 and ', ' .. p1 or '') .. ')') or '', dt), function()
      local x = sample(dt, 6, 9)
      x[{ 1, 1 }] = 0; x[{ 1, 2 }] = -3; x[{ 1, 3 }] = 3; x[{ 1, 4 }] = -0.5; x[{ 1, 5 }] = 2; x[{ 1, 6 }] = 0 / 0
      x[{ 1, 7 }] = 30
      return { x, sample(dt, 6, 9) }
    end, function(_, x, g)
      local y = x:clone()
      if op ~= 'softplus' then y[op .. '_'](y, p0, p1) end
      local xt = x:t()
      return { x[op](x, p0, p1), xt[op](xt, p0, p1), y, dpl.tensor.act_backward(op, g, x, p0, p1),
        dpl.tensor.act_backward(op, g:t(), xt, p0, p1) }
    end)
  end
end
-- lerp, addcmul/addcdiv, nan_to_num, isclose/allclose (composed of GPU ops on cuda,
-- dpl_tensor_math.c's *_dev): out of place, in place, broadcast, transposed, special values
for _, dt in ipairs({ 'float32', 'float64', 'float16', 'bfloat16' }) do
  add('lerp/addcmul/addcdiv ' .. dt, function()
    local w = dpl.rand(5, 6):to(dt)
    w[{ 1, 1 }] = 0.5; w[{ 1, 2 }] = 0; w[{ 1, 3 }] = 1; w[{ 1, 4 }] = -0.25; w[{ 1, 5 }] = 1.5; w[{ 1, 6 }] = 0 / 0
    return { sample(dt, 5, 6), sample(dt, 5, 6), w, sample(dt, 5, 6), sample(dt, 6) }
  end, function(_, s, e, w, t1, t2)
    local a, b, c, d = s:clone(), s:clone(), s:clone(), s:t():clone():t()
    a:lerp_(e, 0.7)
    b:addcmul_(t1, t2, -0.5)
    c:addcdiv_(t1, t2:abs() + 0.5, 2)
    d:lerp_(e:t():contiguous():t(), w) -- non-contiguous self and end
    return { s:lerp(e, 0.3), s:lerp(e, 0.7), s:lerp(e, 0.5), s:lerp(e, w), s:t():lerp(e:t(), w:t()), s:lerp(e[1], w),
      a, d, s:addcmul(t1, t2), s:addcmul(t1:t():contiguous():t(), t2, 2.5), s:addcdiv(t1, t2), s:addcdiv(t1, t2, -3), b, c }
  end)
  add('nan_to_num ' .. dt, function()
    local x = sample(dt, 5, 6)
    x[{ 1, 1 }] = 0 / 0; x[{ 2, 2 }] = math.huge; x[{ 3, 3 }] = -math.huge; x[{ 4, 1 }] = 0 / 0
    return { x }
  end, function(_, x)
    local y, z = x:clone(), x:t():clone()
    y:nan_to_num_()
    z:nan_to_num_(1, 2, -2)
    return { x:nan_to_num(), x:nan_to_num(0.5), x:t():nan_to_num{ nan = -1, posinf = 1e30, neginf = -1e300 }, y, z }
  end)
  add('isclose/allclose ' .. dt, function()
    local a = sample(dt, 5, 6)
    local b = a + sample(dt, 5, 6) * 1e-3
    b[{ 1, 1 }] = a[{ 1, 1 }]
    a[{ 2, 2 }] = 0 / 0; b[{ 2, 2 }] = 0 / 0; a[{ 3, 3 }] = math.huge; b[{ 3, 3 }] = math.huge
    a[{ 4, 4 }] = math.huge; b[{ 4, 4 }] = -math.huge
    return { a, b }
  end, function(dev, a, b)
    local function flag(v) return dpl.tensor({ v and 1 or 0 }, { device = dev }) end
    return { a:isclose(b), a:isclose(b, 1e-2, 1e-3), a:isclose(b, { rtol = 0, atol = 5e-3, equal_nan = true }),
      a:t():isclose(b:t()[1]), flag(a:allclose(a:clone())), flag(a:allclose(b, { atol = 1, rtol = 1, equal_nan = true })),
      flag(a:allclose(b)) }
  end)
end
for _, dt in ipairs({ 'int32', 'int64', 'uint8', 'bool' }) do
  add('addcmul/nan_to_num/isclose ' .. dt, function() return { sample(dt, 5, 6), sample(dt, 5, 6), sample(dt, 6) } end,
    function(_, s, t1, t2)
      local r = { s:nan_to_num(), s:isclose(t1), s:isclose(s:t():contiguous():t(), 0, 2), s:isclose(t2) }
      if dt ~= 'bool' then
        local b = s:clone()
        b:addcmul_(t1, t2, 3)
        r[#r + 1] = s:addcmul(t1, t2, -2)
        r[#r + 1] = b
        r[#r + 1] = s:addcdiv(t1:double(), t2:double() + 0.5)
      end
      return r
    end)
end
-- the bitwise ops (integer and bool kernels of the binary op)
for _, dt in ipairs({ 'int32', 'int64', 'uint8', 'bool' }) do
  add('bitwise and/or/xor ' .. dt, function() return { sample(dt, 5, 6), sample(dt, 6), sample(dt, 70, 61), sample(dt, 70, 61) } end,
    function(_, a, b, c, d)
      local s = dt == 'bool' and true or 6
      local x, y = a:clone(), a:t():clone()
      x:bitwise_xor_(b)
      y:bitwise_or_(s)
      return { a:bitwise_and(b), a:bitwise_or(b), a:bitwise_xor(b), a:t():bitwise_and(a:t():contiguous()),
        a:bitwise_and(s), a:bitwise_or(s), a:bitwise_xor(s), x, y, c:bitwise_and(d), c:bitwise_xor(d) }
    end)
end
-- flip, roll, tril/triu (index_select with mapped aranges, a mask fill on cuda)
for _, dt in ipairs({ 'float32', 'float64', 'bfloat16', 'int64', 'uint8', 'bool' }) do
  add('flip/roll/tril/triu ' .. dt, function() return { sample(dt, 3, 4, 5), sample(dt, 6) } end, function(_, x, v)
    local a, b, c = x:clone(), x:transpose(2, 3):clone(), x:transpose(1, 3)
    a:tril_(1)
    b:triu_(-1)
    local d = c:clone()
    d:tril_()
    return { x:flip(1), x:flip(1, 3), x:transpose(1, 3):flip(2), v:flip(1), x:roll(2, 1), x:roll({ 2, -7 }, { 1, 3 }),
      x:roll(7), x:transpose(2, 3):roll({ 1, 1 }, { 2, 2 }), v:roll(-2), x:tril(), x:triu(), x:tril(-2), x:triu(3),
      x:transpose(1, 3):tril(1), a, b, d, x:narrow(1, 1, 0):flip(1), x:fliplr(), x:rot90() }
  end)
end
-- their gradients through autograd on cuda
for _, dt in ipairs({ 'float32', 'float64' }) do
  add('autograd: lerp/addcmul/addcdiv/nan_to_num/flip/roll/tril gradients ' .. dt, function()
    return { sample(dt, 4, 5), sample(dt, 4, 5), dpl.rand(4, 5):to(dt), sample(dt, 4, 5), sample(dt, 4, 5) }
  end, function(_, s, e, w, t, g)
    local ps = {}
    for i, v in ipairs({ s, e, w, t }) do ps[i] = v:clone():requires_grad_() end
    local a, b, c, d = ps[1], ps[2], ps[3], ps[4]
    local y = a:lerp(b, c) + a:lerp(b, 0.3) * 2 + a:addcmul(b, d, 0.5) + a:addcdiv(b, d:abs() + 1, -1.5)
      + a:nan_to_num() + d:flip(2) + d:roll(1, 1) * 3 + d:tril() - d:triu(1) * 2
    ;(y * g):sum():backward()
    return { a.grad, b.grad, c.grad, d.grad }
  end)
end
-- reflect/replicate/circular pads (one index_select per padded dim on the GPU) and their gradients
for _, dt in ipairs({ 'float32', 'float64', 'float16', 'int64' }) do
  add('pad reflect/replicate/circular ' .. dt, function() return { sample(dt, 2, 3, 5, 6) } end, function(_, x)
    local F = dpl.nn.functional
    local x3 = x[1]
    return { F.pad(x3, { 2, 1 }, 'reflect'), F.pad(x, { 1, 3, 2, 0 }, 'replicate'), F.pad(x, { 2, -1, 1, 2 }, 'circular'),
      F.pad(x3:transpose(2, 3), { 3, 3 }, 'reflect'), F.pad(x3, { -1, 2 }, 'replicate'), F.pad(x, { 1, 1, 1, 1 }, 'reflect'),
      F.pad(x:view(1, 2, 3, 5, 6), { 1, 1, 2, 1, 1, 0 }, 'replicate'), F.pad(x3, { 4, 5 }, 'circular') }
  end)
end
for _, dt in ipairs({ 'float32', 'float64' }) do
  add('autograd: pad reflect/replicate/circular gradients ' .. dt, function()
    return { sample(dt, 2, 3, 5, 6), sample(dt, 2, 3, 8, 9) }
  end, function(_, x, g)
    local F = dpl.nn.functional
    local p = x:clone():requires_grad_()
    local y = F.pad(p, { 2, 1, 1, 2 }, 'reflect') + F.pad(p, { 1, 2, 2, 1 }, 'replicate') * 2
      + F.pad(p, { 3, 0, 0, 3 }, 'circular') * 3
    ;(y * g):sum():backward()
    return { p.grad }
  end)
end
-- max_pool1d (max_pool2d's kernel on [N, C, 1, L]), values, 1-based indices and the gradient
for _, dt in ipairs({ 'float32', 'float64', 'bfloat16' }) do
  add('max_pool1d ' .. dt, function() return { sample(dt, 2, 3, 11) } end, function(_, x)
    local F = dpl.nn.functional
    local v1, i1 = F.max_pool1d(x, 3, { stride = 2, padding = 1, ceil_mode = true, return_indices = true })
    local v2, i2 = F.max_pool1d(x[1], 2, { return_indices = true })
    return { v1, i1, v2, i2, F.max_pool1d(x:transpose(2, 3):contiguous():transpose(2, 3), 4, { stride = 3 }) }
  end)
end
-- max_pool1d with dilation > 1 (DPL_BK_MAX_POOL1D: the CPU's windows, first maximum, the last NaN)
for _, dt in ipairs({ 'float32', 'float64', 'float16', 'bfloat16' }) do
  add('max_pool1d dilation ' .. dt, function() return { sample(dt, 2, 3, 13) } end, function(dev, x)
    local F = dpl.nn.functional
    local y = x:clone()
    y[{ 1, 1, 3 }] = 0 / 0; y[{ 1, 1, 5 }] = 0 / 0; y[{ 2, 3, 4 }] = -math.huge
    local z = x:round() -- ties
    local r = {}
    local function put(...) for _, t in ipairs({ ... }) do r[#r + 1] = t end end
    put(F.max_pool1d(x, 3, { dilation = 2, return_indices = true }))
    put(F.max_pool1d(y, 3, { stride = 2, padding = 1, dilation = 3, ceil_mode = true, return_indices = true }))
    put(F.max_pool1d(z, 2, { stride = 1, dilation = 4, return_indices = true }))
    put(F.max_pool1d(x[2], 4, { stride = 3, padding = 2, dilation = 2, return_indices = true }))
    put(F.max_pool1d(x:transpose(1, 2), 2, { dilation = 5, return_indices = true })) -- strided
    put(F.max_pool1d(x:narrow(1, 1, 0), 2, { dilation = 2, return_indices = true }))
    put(err_bytes(dev, function() return F.max_pool1d(x, 3, { dilation = 7 }) end))
    return r
  end)
end
add('autograd: max_pool1d dilation gradient', function() return { randn(2, 3, 13), randn(2, 3, 5) } end, function(_, x, g)
  local p = x:clone():requires_grad_()
  ;(dpl.nn.functional.max_pool1d(p, 3, { stride = 2, dilation = 2 }) * g):sum():backward()
  return { p.grad }
end)
-- adaptive max pooling (DPL_BK_ADAPTIVE_MAX_POOL2D: PyTorch's windows, overlapping or not; 1-d
-- through [N, C, 1, L]) and its gradient (max_pool2d's backward)
for _, dt in ipairs({ 'float32', 'float64', 'float16', 'bfloat16' }) do
  add('adaptive_max_pool1d/2d ' .. dt, function() return { sample(dt, 2, 3, 7, 10), sample(dt, 2, 4, 11) } end,
    function(dev, x, v)
      local F = dpl.nn.functional
      local y = x:clone()
      y[{ 1, 1, 2, 2 }] = 0 / 0; y[{ 1, 2, 1, 1 }] = -math.huge; y[{ 2, 1 }] = 0 -- ties
      local r = {}
      local function put(...) for _, t in ipairs({ ... }) do r[#r + 1] = t end end
      put(F.adaptive_max_pool2d(x, { 3, 4 }, true))
      put(F.adaptive_max_pool2d(y, 5, true))
      put(F.adaptive_max_pool2d(x, { 7, 10 }, true), F.adaptive_max_pool2d(x, { 1, 1 }, true))
      put(F.adaptive_max_pool2d(x, { nil, 3 }, true), F.adaptive_max_pool2d(x[1], { 9, 13 }, true))
      put(F.adaptive_max_pool2d(x:transpose(3, 4), { 2, 3 }, true)) -- strided
      put(F.adaptive_max_pool2d(x, { 0, 3 }, true))
      put(F.adaptive_max_pool1d(v, 4, true))
      put(F.adaptive_max_pool1d(v[2], 6, true))
      put(err_bytes(dev, function() return F.adaptive_max_pool2d(x:narrow(3, 1, 0), 2) end))
      return r
    end)
end
add('autograd: adaptive_max_pool2d gradient', function() return { randn(2, 3, 7, 10), randn(2, 3, 3, 4) } end,
  function(_, x, g)
    local p = x:clone():requires_grad_()
    ;(dpl.nn.functional.adaptive_max_pool2d(p, { 3, 4 }) * g):sum():backward()
    return { p.grad }
  end)
-- special functions (DPL_BK_SPECIAL: dpl_special_math.h's formulas per element in double, stored in
-- the input's dtype): edge values (poles, zeros, signed zeros, infinities, NaN, large
-- arguments), transposed inputs, the tensor methods and in-place forms, integer inputs (float32
-- results), broadcasting and numbers in the two-argument ones, errors as messages
local special_one = { 'gammaln', 'digamma', 'erfc', 'erfcx', 'i0', 'i0e', 'i1', 'i1e', 'ndtr', 'log_ndtr', 'sinc' }
local function on(dev, dt, list) return dpl.tensor(list, { dtype = 'float64' }):to(dt):to(dev) end
for _, dt in ipairs({ 'float32', 'float64', 'float16', 'bfloat16' }) do
  add('special one-argument ' .. dt, function() return { sample(dt, 5, 12), dpl.rand(4, 7):to(dt) } end,
    function(dev, x, p)
      local S = dpl.special
      local e = on(dev, dt, { 0, -0.0, -1, -2, -2.5, -0.5, 0.5, 1, 2, 1e-8, 3, 9.5, 25, 31, 40, 700, -8, -30, -40,
        1 / 0, -1 / 0, 0 / 0 })
      local r = {}
      for _, f in ipairs(special_one) do
        r[#r + 1] = S[f](x)
        r[#r + 1] = S[f](e)
        r[#r + 1] = S[f](x:t()) -- strided
      end
      r[#r + 1] = S.ndtri(p)
      r[#r + 1] = S.ndtri(on(dev, dt, { 0, 1, 0.5, 0.01, 0.02425, 0.3, 0.97, 0.999, 1e-30, -0.1, 1.1, 0 / 0 }))
      for n = 0, 3 do
        r[#r + 1] = S.polygamma(n, x)
        r[#r + 1] = S.polygamma(n, e)
      end
      r[#r + 1] = x:lgamma()
      r[#r + 1] = dpl.digamma(x:t())
      r[#r + 1] = x:polygamma(2)
      r[#r + 1] = x:erfc()
      r[#r + 1] = x:i0()
      r[#r + 1] = x:sinc()
      r[#r + 1] = x:clone():lgamma_()
      r[#r + 1] = x:clone():polygamma_(1)
      r[#r + 1] = x:t():clone():sinc_()
      r[#r + 1] = S.multigammaln(x:abs() + 2, 3)
      r[#r + 1] = S.gammaln(x:narrow(2, 1, 0)) -- empty
      r[#r + 1] = S.erfc(x[{ 2, 3 }]) -- 0-d
      r[#r + 1] = S.i1(x:view(5, 12, 1):expand(5, 12, 3)) -- broadcast view (stride 0)
      r[#r + 1] = err_bytes(dev, function() return S.polygamma(-1, x) end)
      r[#r + 1] = err_bytes(dev, function() return S.erfc(x, 2) end)
      return r
    end)
  add('special two-argument ' .. dt, function()
    return { (dpl.rand(4, 1) * 5 + 1.1):to(dt), (dpl.rand(1, 6) * 4):to(dt), (dpl.rand(3, 5) * 6):to(dt) }
  end, function(dev, s, q, a)
    local S = dpl.special
    local r = {}
    r[#r + 1] = S.zeta(s, q) -- [4, 1] with [1, 6]
    r[#r + 1] = S.zeta(s:t(), q:t()) -- [1, 4] with [6, 1]
    r[#r + 1] = S.zeta(2, q)
    r[#r + 1] = S.zeta(s, 1.5)
    r[#r + 1] = S.zeta(on(dev, dt, { 1, 0.5, 2, 3, 2, 4, 0 / 0, 2, 4, 2, 1.5, 12 }),
      on(dev, dt, { 1, 1, 0, -1, -1.5, -2.5, 1, 1 / 0, 0 / 0, 1e-3, -0.5, 0.25 }))
    for _, f in ipairs({ 'gammainc', 'gammaincc' }) do
      r[#r + 1] = S[f](s, q)
      r[#r + 1] = S[f](a, a:t():contiguous():t()) -- strided
      r[#r + 1] = S[f](a, 2.5)
      r[#r + 1] = S[f](on(dev, dt, { 0, 0, 1, -1, 0 / 0, 1 / 0, 2, 30, 0.5, 3, 100, 1e-3, 5 }),
        on(dev, dt, { 1, 0, 0, 1, 1, 1, 1 / 0, 25, 1e-3, 0 / 0, 101, 2, -1 }))
    end
    r[#r + 1] = dpl.igamma(a, a:t():contiguous():t())
    r[#r + 1] = dpl.igammac(s, q)
    r[#r + 1] = S.zeta(s:narrow(1, 1, 0), q) -- empty
    r[#r + 1] = err_bytes(dev, function() return S.zeta(s:view(4), q:view(6)) end)
    r[#r + 1] = err_bytes(dev, function() return S.gammainc(1, 2) end)
    return r
  end)
end
add('special mixed and integer dtypes', function()
  return { randint(-6, 30, { 4, 5 }, 'int32'), randint(-6, 30, { 4, 5 }), randint(0, 256, { 4, 5 }, 'uint8'),
    dpl.rand(4, 5):gt(0.5), (dpl.rand(4, 5) * 4 + 1.5):double(), dpl.rand(4, 5) * 3 }
end, function(_, i32, i64, u8, b, s64, q32)
  local S = dpl.special
  local r = {}
  for _, x in ipairs({ i32, i64, u8, b }) do
    r[#r + 1] = S.gammaln(x)
    r[#r + 1] = S.digamma(x)
    r[#r + 1] = S.i0e(x)
    r[#r + 1] = S.polygamma(1, x)
  end
  r[#r + 1] = S.zeta(s64, q32) -- float64 with float32: float64
  r[#r + 1] = S.gammainc(i64:abs(), q32)
  r[#r + 1] = S.zeta(i64:abs() + 2, i32:abs() + 1) -- integers: float32
  return r
end)
add('autograd: special function gradients', function()
  return { randn(3, 4), dpl.rand(3, 4) * 3 + 0.5, randn(3, 4), dpl.rand(3, 4) * 0.9 + 0.05 }
end, function(_, x, pos, g, p)
  local S = dpl.special
  local r = {}
  local function grad_of(f, v)
    local l = v:clone():requires_grad_()
    ;(f(l) * g):sum():backward()
    r[#r + 1] = l.grad
  end
  for _, f in ipairs({ 'erfc', 'erfcx', 'i0', 'i0e', 'i1', 'i1e', 'ndtr', 'log_ndtr', 'sinc' }) do grad_of(S[f], x) end
  grad_of(S.gammaln, pos)
  grad_of(S.digamma, pos)
  grad_of(function(v) return S.polygamma(2, v) end, pos)
  grad_of(S.ndtri, p)
  grad_of(function(v) return S.zeta(3, v) end, pos)
  grad_of(function(v) return S.gammainc(pos, v) end, pos)
  grad_of(function(v) return S.gammaincc(2.5, v) end, pos)
  grad_of(function(v) return S.i1(v * 0) end, x) -- at 0 (the 0.5 rule)
  r[#r + 1] = err_bytes(x.device, function()
    local l = pos:clone():requires_grad_()
    S.zeta(l, 2):sum():backward()
  end)
  return r
end)

-- the CTC loss (DPL_BK_CTC / DPL_BK_CTC_BWD: a block per sequence over the CPU's log-space
-- recursions): padded and concatenated targets, repeated labels, empty targets, a zero input
-- length, another blank, each reduction, zero_infinity with an impossible sequence, strided and
-- unbatched log_probs, targets longer than a block's threads, the gradients, errors as messages
for _, dt in ipairs({ 'float32', 'float64' }) do
  add('ctc_loss ' .. dt, function()
    return { randn(12, 5, 6):to(dt), randint(2, 7, { 5, 6 }), randn(5, 12, 6):to(dt), randn(5) }
  end, function(dev, x, tg, xt, w)
    local F = dpl.nn.functional
    local lp = x:log_softmax(3)
    local il, tl = { 12, 10, 7, 12, 0 }, { 5, 3, 0, 6, 0 }
    tg[{ 1, 2 }] = tg[{ 1, 1 }] -- a repeated label
    local r = {}
    local function put(...) for _, t in ipairs({ ... }) do r[#r + 1] = t end end
    for _, red in ipairs({ 'none', 'mean', 'sum' }) do put(F.ctc_loss(lp, tg, il, tl, { reduction = red })) end
    local flat = dpl.cat({ tg[1]:narrow(1, 1, 5), tg[2]:narrow(1, 1, 3), tg[4] }) -- concatenated
    put(F.ctc_loss(lp, flat, dpl.tensor(il), dpl.tensor(tl), { reduction = 'none' }))
    local tg3 = tg:masked_fill(tg:eq(3), 2) -- blank 3: labels avoid it
    put(F.ctc_loss(lp, tg3, il, tl, { blank = 3, reduction = 'none' }))
    local short = { 2, 10, 7, 12, 0 } -- sequence 1: 5 labels in 2 steps, impossible
    put(F.ctc_loss(lp, tg, short, tl, { reduction = 'none' }))
    put(F.ctc_loss(lp, tg, short, tl, { reduction = 'none', zero_infinity = true }))
    put(F.ctc_loss(lp, tg, short, tl, { zero_infinity = true }))
    local lps = xt:log_softmax(3):transpose(1, 2) -- strided [T, N, C]
    put(F.ctc_loss(lps, tg, il, tl, { reduction = 'none' }))
    put(F.ctc_loss(lp[{ {}, 2 }], tg[2]:narrow(1, 1, 3), { 10 }, { 3 })) -- unbatched [T, C]
    -- gradients: each reduction, zero_infinity, strided
    local function grad_of(src, f)
      local l = src:detach():clone():requires_grad_()
      f(l):backward()
      put(l.grad)
    end
    grad_of(lp, function(l) return (F.ctc_loss(l, tg, il, tl, { reduction = 'none' }) * w:to(dt):to(dev)):sum() end)
    grad_of(lp, function(l) return F.ctc_loss(l, tg, il, tl) end)
    grad_of(lp, function(l) return F.ctc_loss(l, flat, il, tl, { reduction = 'sum' }) end)
    grad_of(lp, function(l) return F.ctc_loss(l, tg3, il, tl, { blank = 3 }) end)
    grad_of(lp, function(l) return F.ctc_loss(l, tg, short, tl, { zero_infinity = true, reduction = 'sum' }) end)
    grad_of(x, function(l) return F.ctc_loss(l:log_softmax(3), tg, il, tl) end) -- through log_softmax
    local xs = xt:detach():clone():requires_grad_()
    F.ctc_loss(xs:transpose(1, 2):log_softmax(3), tg, il, tl):backward()
    put(xs.grad)
    put(err_bytes(dev, function() return F.ctc_loss(lp, tg:masked_fill(tg:eq(4), 1), il, tl) end)) -- the blank
    put(err_bytes(dev, function() return F.ctc_loss(lp, tg + 5, il, tl) end)) -- out of range
    put(err_bytes(dev, function() return F.ctc_loss(lp, tg, { 13, 1, 1, 1, 1 }, tl) end))
    put(err_bytes(dev, function() return F.ctc_loss(lp, tg, il, { 7, 1, 1, 1, 1 }) end))
    put(err_bytes(dev, function() return F.ctc_loss(lp, flat:narrow(1, 1, 5), il, tl) end))
    put(err_bytes(dev, function() return F.ctc_loss(lp:half(), tg, il, tl) end))
    return r
  end)
end
add('ctc_loss long targets (more positions than a block has threads)', function()
  return { randn(400, 2, 5):double(), randint(2, 6, { 2, 180 }) }
end, function(_, x, tg)
  local F = dpl.nn.functional
  local l = x:log_softmax(3):detach():requires_grad_()
  local loss = F.ctc_loss(l, tg, { 400, 390 }, { 180, 150 }, { reduction = 'none' })
  loss:sum():backward()
  return { loss, l.grad }
end)

-- adaptive average pooling to any size (DPL_BK_ADAPTIVE_AVG_POOL2D: PyTorch's windows, sums in
-- double in the CPU's order) and its gradient (DPL_BK_ADAPTIVE_AVG_POOL2D_BWD: a gather per input
-- element adding in the CPU's order); 1-d through [N, C, 1, L]
for _, dt in ipairs({ 'float32', 'float64', 'float16', 'bfloat16' }) do
  add('adaptive_avg_pool1d/2d ' .. dt, function() return { sample(dt, 2, 3, 7, 10), sample(dt, 2, 4, 11) } end,
    function(dev, x, v)
      local F = dpl.nn.functional
      local y = x:clone()
      y[{ 1, 1, 2, 2 }] = 0 / 0; y[{ 1, 2, 1, 1 }] = -math.huge
      local r = {}
      local function put(...) for _, t in ipairs({ ... }) do r[#r + 1] = t end end
      put(F.adaptive_avg_pool2d(x, { 3, 4 }), F.adaptive_avg_pool2d(y, 5), F.adaptive_avg_pool2d(x, { 7, 10 }))
      put(F.adaptive_avg_pool2d(x, { 1, 1 }), F.adaptive_avg_pool2d(x, { 1, 3 }), F.adaptive_avg_pool2d(x, { nil, 3 }))
      put(F.adaptive_avg_pool2d(x[1], { 9, 13 })) -- larger than the input: overlapping windows, unbatched
      put(F.adaptive_avg_pool2d(x:transpose(3, 4), { 2, 3 })) -- strided
      put(F.adaptive_avg_pool2d(x, { 0, 3 }), F.adaptive_avg_pool2d(x:narrow(1, 1, 0), 2)) -- empty
      put(F.adaptive_avg_pool1d(v, 4), F.adaptive_avg_pool1d(v[2], 6), F.adaptive_avg_pool1d(v, 15))
      put(dpl.nn.AdaptiveAvgPool2d({ 2, 5 })(x), dpl.nn.AdaptiveAvgPool1d(3)(v))
      put(err_bytes(dev, function() return F.adaptive_avg_pool2d(x:narrow(3, 1, 0), 2) end))
      put(err_bytes(dev, function() return F.adaptive_avg_pool2d(x, { -1, 2 }) end))
      return r
    end)
  add('autograd: adaptive_avg_pool1d/2d gradient ' .. dt, function()
    return { sample(dt, 2, 3, 7, 10), sample(dt, 2, 3, 3, 4), sample(dt, 2, 3, 9, 13), sample(dt, 2, 4, 11),
      sample(dt, 2, 4, 4) }
  end, function(_, x, g, g2, v, gv)
    local F = dpl.nn.functional
    local r = {}
    for _, c in ipairs({ { { 3, 4 }, g }, { { 9, 13 }, g2 } }) do
      local p = x:clone():requires_grad_()
      ;(F.adaptive_avg_pool2d(p, c[1]) * c[2]):sum():backward()
      r[#r + 1] = p.grad
    end
    local q = v:clone():requires_grad_()
    ;(F.adaptive_avg_pool1d(q, 4) * gv):sum():backward()
    r[#r + 1] = q.grad
    local t = x:clone():requires_grad_() -- strided input
    ;(F.adaptive_avg_pool2d(t:transpose(3, 4), { 4, 3 }) * g:transpose(3, 4)):sum():backward()
    r[#r + 1] = t.grad
    return r
  end)
end
-- F.unfold / F.fold (DPL_BK_IM2COL / DPL_BK_COL2IM; fold sums in the CPU's order) and their
-- gradients (each the other's), Tensor:unfold (a view) and its gradient
for _, dt in ipairs({ 'float32', 'float64', 'float16', 'bfloat16' }) do
  add('unfold/fold ' .. dt, function() return { sample(dt, 2, 3, 7, 8), sample(dt, 2, 12, 30) } end,
    function(dev, x, c)
      local F = dpl.nn.functional
      local r = {}
      local function put(...) for _, t in ipairs({ ... }) do r[#r + 1] = t end end
      put(F.unfold(x, 2), F.unfold(x, { 3, 2 }, { dilation = { 2, 1 }, padding = 1, stride = { 2, 3 } }))
      put(F.unfold(x:transpose(3, 4), 3, { padding = 2 }), F.unfold(x[1], 2)) -- strided, unbatched
      put(F.unfold(x:narrow(1, 1, 0), 2))
      put(F.fold(c, { 6, 7 }, 2), F.fold(c, { 5, 6 }, 2, { dilation = 2, padding = 1, stride = 1 }))
      put(F.fold(c:transpose(2, 3):contiguous():transpose(2, 3), { 6, 7 }, 2), F.fold(c[1], { 6, 7 }, 2))
      put(F.fold(F.unfold(x, 3, { padding = 1 }), { 7, 8 }, 3, { padding = 1 })) -- overlapping windows summed
      put(x:unfold(4, 3, 2), x:unfold(-1, 2, 1):sum(-1))
      put(err_bytes(dev, function() return F.unfold(x, 9) end))
      put(err_bytes(dev, function() return F.fold(c, { 6, 7 }, 5) end))
      return r
    end)
end
add('autograd: unfold/fold gradients', function() return { randn(2, 3, 7, 8), randn(2, 12, 30) } end,
  function(_, x, c)
    local F = dpl.nn.functional
    local p, q = x:clone():requires_grad_(), c:clone():requires_grad_()
    local u = F.unfold(p, 2, { stride = 1, padding = 1 })
    local y = (u * u:detach()):sum() + (F.fold(q, { 6, 7 }, 2) * 3):sum() + (p:unfold(3, 3, 2) * 2):sum()
    y:backward()
    return { p.grad, q.grad }
  end)
add('autograd: max_pool1d gradient', function() return { randn(2, 3, 11), randn(2, 3, 5) } end, function(_, x, g)
  local p = x:clone():requires_grad_()
  ;(dpl.nn.functional.max_pool1d(p, 3, { stride = 2 }) * g):sum():backward()
  return { p.grad }
end)
-- interpolate (index_select by the CPU's source tables, the linear weights as tensors) and gradients
for _, dt in ipairs({ 'float32', 'float64', 'float16', 'bfloat16' }) do
  add('interpolate nearest/linear/bilinear ' .. dt, function() return { sample(dt, 2, 3, 5, 7) } end, function(_, x)
    local F = dpl.nn.functional
    local x3 = x[1]
    return { F.interpolate(x, { scale_factor = 2 }), F.interpolate(x, { size = { 4, 11 } }),
      F.interpolate(x, { size = { 8, 3 }, mode = 'nearest-exact' }), F.interpolate(x, { scale_factor = 1.7, mode = 'bilinear' }),
      F.interpolate(x, { size = { 9, 13 }, mode = 'bilinear', align_corners = true }),
      F.interpolate(x:transpose(3, 4), { size = { 3, 4 }, mode = 'bilinear' }),
      F.interpolate(x3, { size = 12, mode = 'linear' }), F.interpolate(x3, { scale_factor = 0.6, mode = 'linear', align_corners = true }),
      F.interpolate(x3, { size = 10 }) }
  end)
end
add('interpolate nearest int64', function() return { randint(-9, 9, { 2, 3, 4, 5 }) } end, function(_, x)
  return { dpl.nn.functional.interpolate(x, { scale_factor = 3 }), dpl.nn.functional.interpolate(x, { size = { 7, 2 } }) }
end)
for _, dt in ipairs({ 'float32', 'float64' }) do
  add('autograd: interpolate gradients ' .. dt, function() return { sample(dt, 2, 3, 5, 7), sample(dt, 2, 3, 9, 11) } end,
    function(_, x, g)
      local F = dpl.nn.functional
      local p = x:clone():requires_grad_()
      local y = F.interpolate(p, { size = { 9, 11 }, mode = 'bilinear' }) + F.interpolate(p, { size = { 9, 11 } }) * 2
        + F.interpolate(p, { size = { 9, 11 }, mode = 'bilinear', align_corners = true }) * 3
      ;(y * g):sum():backward()
      return { p.grad }
    end)
end
-- scans along a dim (dpl_cuda_scan.cu: one thread per line, the CPU's order and accumulators)
for _, dt in ipairs({ 'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'bool' }) do
  add('cumsum/cumprod/cummax/cummin ' .. dt, function()
    local x = sample(dt, 4, 5, 6)
    if dt == 'float32' or dt == 'float64' then
      x[{ 1, 2, 3 }] = 0 / 0; x[{ 2, 1, 1 }] = math.huge; x[{ 3, 3, 3 }] = 0; x[{ 3, 3, 4 }] = 0
      x[{ 4, 2, 2 }] = x[{ 4, 2, 1 }] -- a tie
    end
    if dt == 'int64' or dt == 'int32' then x[{ 1, 1, 2 }] = x[{ 1, 1, 1 }] end
    return { x, sample(dt, 7) }
  end, function(_, x, v)
    local r = { x:cumsum(1), x:cumsum(2), x:cumsum(3), x:transpose(1, 3):cumsum(2), v:cumsum(1), x:cumsum(2, 'float64'),
      x:narrow(2, 1, 0):cumsum(2) }
    local cp = dt == 'bool' and x:cumprod(3) or (x:double():abs():clamp(0.5, 1.5):to(dt)):cumprod(3)
    r[#r + 1] = cp
    r[#r + 1] = x:transpose(2, 3):cumprod(2)
    for _, d in ipairs({ 1, 3 }) do
      local a, ia = x:cummax(d)
      local b, ib = x:transpose(1, 2):cummin(d)
      for _, t in ipairs({ a, ia, b, ib }) do r[#r + 1] = t end
    end
    if dt ~= 'bool' and dt ~= 'uint8' then r[#r + 1] = (x * 3):cumsum(1, { dtype = 'int32' }) end
    return r
  end)
end
for _, dt in ipairs({ 'float32', 'float64', 'bfloat16' }) do
  add('autograd: cumsum/cumprod gradients ' .. dt, function()
    local x = sample(dt, 4, 6)
    x[{ 2, 3 }] = 0; x[{ 3, 2 }] = 0; x[{ 3, 5 }] = 0 -- one zero, two zeros in a row (cumprod's cases)
    return { x, sample(dt, 4, 6), sample(dt, 4, 6) }
  end, function(_, x, g1, g2)
    local p = x:clone():requires_grad_()
    local y = p:cumsum(1) * g1 + p:cumprod(2) * g2 + p:t():cumprod(2):t() * g1 + p:cumsum(2, 'float64'):to(dt) * g2
    y:sum():backward()
    return { p.grad, dpl.tensor._cumsum_reverse(g1, 2) }
  end)
end
-- sort / argsort / topk (dpl_cuda_sort.cu: a bitonic sort per row in shared memory on the CPU's
-- total order; rows past 2048 through host memory): NaN, infinities, -0.0, ties, every dim
for _, dt in ipairs({ 'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'bool' }) do
  add('sort/argsort/topk ' .. dt, function()
    local x = sample(dt, 4, 6, 9)
    if dt == 'int32' or dt == 'int64' then x = x:remainder(5) end -- many ties
    if dt:find('float') then
      x = x:round() -- ties
      x[{ 1, 1, 1 }] = 0 / 0; x[{ 1, 1, 5 }] = 0 / 0; x[{ 1, 2, 2 }] = math.huge; x[{ 1, 3, 3 }] = -math.huge
      x[{ 2, 1, 1 }] = -0.0; x[{ 2, 1, 2 }] = 0.0
    end
    return { x, sample(dt, 37) }
  end, function(_, x, v)
    local r = {}
    local function put(...) for _, t in ipairs({ ... }) do r[#r + 1] = t end end
    for d = 1, 3 do
      put(x:sort(d))
      put(x:sort(d, true))
      put(x:topk(2, d))
      put(x:topk(3, d, false))
      put(x:argsort(d, true))
    end
    put(x:transpose(1, 3):sort(2))
    put(x:transpose(2, 3):topk(4))
    put(v:sort())
    put(v:topk(37))
    put(v:topk(0))
    put(x:narrow(3, 1, 0):sort(3))
    put(x:topk(1, 1))
    return r
  end)
end
add('sort/topk long rows (2048 bitonic, longer rows tiled and merged on the GPU)', function()
  return { randn(3, 2048):round(), randn(2, 2049), randint(0, 50, { 2, 3000 }), randn(9000):round(), randn(3, 5000) }
end, function(_, a, b, i, l, w)
  local r = {}
  local function put(...) for _, t in ipairs({ ... }) do r[#r + 1] = t end end
  put(a:sort(2))
  put(a:topk(10, 2))
  put(a:t():sort(1, true))
  put(b:sort(2))
  put(b:topk(7))
  put(i:sort(2, true))
  put(i:topk(20, 2, false))
  put(l:sort(), l:sort(1, true), l:topk(100), w:t():sort(1), w:argsort(2, true))
  return r
end)
for _, dt in ipairs({ 'float32', 'float64' }) do
  add('autograd: sort/topk gradients ' .. dt, function() return { sample(dt, 5, 8), sample(dt, 5, 8), sample(dt, 5, 3) } end,
    function(_, x, g, g3)
      local p = x:clone():requires_grad_()
      local s = p:sort(2, true)
      local t = p:topk(3)
      ;((s * g):sum() + (t * g3):sum()):backward()
      return { p.grad }
    end)
end
-- kthvalue / median(dim) / mode (DPL_BK_SELECT: the sort's bitonic rows, then the CPU's selection
-- in the block; rows past 2048 through host memory) and median() of all elements: NaN rows,
-- ties, -0.0, negative dims, keepdim, strided inputs, 0-d and empty tensors, every dtype
for _, dt in ipairs({ 'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'bool' }) do
  add('kthvalue/median/mode ' .. dt, function()
    local x = sample(dt, 4, 6, 9)
    if dt == 'int32' or dt == 'int64' then x = x:remainder(4) end -- many ties
    if dt:find('float') then
      x = x:remainder(3):round() -- ties
      x[{ 1, 1, 1 }] = 0 / 0; x[{ 1, 1, 5 }] = 0 / 0; x[{ 1, 2, 2 }] = math.huge; x[{ 1, 3, 3 }] = -math.huge
      x[{ 2, 1, 1 }] = -0.0; x[{ 2, 1, 2 }] = 0.0
      x[{ 3, 4 }] = 0 / 0 -- a row of NaNs
    end
    return { x, sample(dt, 37) }
  end, function(_, x, v)
    local r = {}
    local function put(...) for _, t in ipairs({ ... }) do r[#r + 1] = t end end
    for _, d in ipairs({ 1, 2, 3, -1, -2 }) do
      put(x:kthvalue(1, d))
      put(x:kthvalue(2, d, true))
      put(x:median(d))
      put(x:median(d, true))
      put(x:mode(d))
      put(x:mode(d, true))
    end
    put(x:kthvalue(4, 1), x:kthvalue(9, 3), x:kthvalue(5, { dim = 2, keepdim = true }))
    put(x:transpose(1, 3):median(2)) -- strided input
    put(x:narrow(3, 2, 5):mode(1))
    put(x:select(2, 3):kthvalue(3))
    put(v:median(), v:median(1), v:mode(), v:kthvalue(37))
    put(x:median(), x:transpose(2, 3):median())
    put(x:narrow(1, 1, 0):median(3)) -- an empty other dim
    put(x:narrow(1, 1, 0):kthvalue(2, 3, true))
    put(v[5]:median(1), v[5]:mode(-1), v[5]:kthvalue(1)) -- 0-d
    if dt:find('float') then put(v:narrow(1, 1, 0):median()) end -- nan
    return r
  end)
end
add('kthvalue/median/mode long rows (2048 on the GPU, 2049 through host memory)', function()
  return { randn(3, 2048):round(), randn(2, 2049):round(), randint(0, 50, { 2, 3000 }) }
end, function(_, a, b, i)
  local r = {}
  local function put(...) for _, t in ipairs({ ... }) do r[#r + 1] = t end end
  put(a:kthvalue(700, 2), a:median(2), a:mode(2), a:t():median(1, true))
  put(b:kthvalue(2049), b:median(-1), b:mode(2))
  put(i:median(2), i:mode(2), i:kthvalue(1, 2), a:median(), i:median())
  return r
end)
for _, dt in ipairs({ 'float32', 'float64' }) do
  add('autograd: kthvalue/median/mode gradients ' .. dt, function()
    return { sample(dt, 5, 8):round(), sample(dt, 5), sample(dt, 8) }
  end, function(_, x, g5, g8)
    local p = x:clone():requires_grad_()
    local y = (p:kthvalue(3, 2) * g5):sum() + (p:median(1) * g8):sum() + (p:mode(2, true):squeeze(2) * g5):sum()
      + p:median() * 2
    y:backward()
    return { p.grad }
  end)
end
-- unique of all elements (composed: one sort of the whole tensor, run starts, a cumsum, one read
-- back of the count, index_add_/index_select), along a dim (through host memory): NaN (never
-- equal), -0.0 and 0.0 (one value, the first one's bits), inverse and counts, every dtype
for _, dt in ipairs({ 'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'bool' }) do
  add('unique ' .. dt, function()
    local x = sample(dt, 4, 6, 5)
    if dt == 'int32' or dt == 'int64' then x = x:remainder(7) end
    if dt:find('float') then
      x = x:remainder(4):round()
      x[{ 1, 1, 1 }] = 0 / 0; x[{ 2, 3, 1 }] = 0 / 0; x[{ 1, 2, 2 }] = math.huge
      x[{ 2, 1, 1 }] = -0.0; x[{ 2, 1, 2 }] = 0.0; x[{ 3, 1, 1 }] = -0.0
    end
    return { x, sample(dt, 5000) }
  end, function(dev, x, big)
    local r = {}
    local function put(...) for _, t in ipairs({ ... }) do r[#r + 1] = t end end
    put(x:unique(), x:unique(true, true, true))
    put(x:transpose(1, 3):unique(true, true)) -- strided: the inverse in its shape
    put(x:unique({ return_counts = true }), x:unique(false, false, true))
    put(x:narrow(1, 1, 0):unique(true, true, true)) -- empty
    put(x[{ 2, 2, 2 }]:unique(true, true, true)) -- 0-d
    put(big:unique(true, true, true))
    local s = x:remainder(2)
    put(s:unique(true, true, true, 1), s:unique(true, true, true, -1), s:unique({ dim = 2, return_inverse = true }))
    put(err_bytes(dev, function() return x:unique(true, false, false, 4) end))
    return r
  end)
end
add('unique long (tiles merged on the GPU, a cumsum in lines)', function()
  return { randint(0, 3000, { 20000 }), randn(7000):round() }
end, function(_, i, f)
  local r = { i:unique(true, true, true) }
  local u, inv, c = f:unique(true, true, true)
  r[#r + 1], r[#r + 2], r[#r + 3] = u, inv, c
  return r
end)
-- bincount (composed: min/max read back, index_add_ of ones or float64 weights) and histc
-- (DPL_BK_HISTC: int64 atomic counts in the CPU's float arithmetic), their edge cases and errors
add('bincount', function()
  return { randint(0, 9, { 40 }), randint(0, 300, { 50 }, 'int32'), randint(0, 5, { 30 }, 'uint8'), randn(40), randn(50) }
end, function(dev, a, b, c, w, w2)
  local r = { a:bincount(), b:bincount(), c:bincount(), a:bincount(w), a:bincount(w:float()), b:bincount(w2:double()),
    a:bincount(nil, 20), a:bincount({ minlength = 3 }), a:bincount(w:half(), 12),
    a:narrow(1, 1, 0):bincount(), a:narrow(1, 1, 0):bincount(nil, 4), c:narrow(1, 1, 0):bincount(w:narrow(1, 1, 0)),
    a:view(8, 5):t()[2]:bincount(), a:bincount(w:view(8, 5):t():reshape(40)) }
  local neg = a:clone()
  neg[7] = -3
  neg[30] = -1
  r[#r + 1] = err_bytes(dev, function() return neg:bincount() end)
  r[#r + 1] = err_bytes(dev, function() return a:view(8, 5):bincount() end)
  r[#r + 1] = err_bytes(dev, function() return a:float():bincount() end)
  r[#r + 1] = err_bytes(dev, function() return a:bincount(w:narrow(1, 1, 9)) end)
  return r
end)
for _, dt in ipairs({ 'float32', 'float64', 'float16', 'bfloat16' }) do
  add('histc ' .. dt, function() return { sample(dt, 7, 9) } end, function(dev, x)
    local r = { x:histc(), x:histc(10), x:histc(7, -2, 2), x:t():histc(5, -1, 3), x:histc(1), x:histc(4, 0, 0),
      x:narrow(1, 1, 0):histc(5), x:narrow(1, 1, 0):histc(5, 1, 2), dpl.full({ 3 }, 2.5, { dtype = dt, device = dev }):histc(4) }
    local y = x:clone()
    y[{ 1, 1 }] = 0 / 0
    y[{ 2, 2 }] = math.huge
    r[#r + 1] = y:histc(6, -3, 3) -- NaN and infinities outside a given range: not counted
    r[#r + 1] = err_bytes(dev, function() return y:histc(6) end) -- the data's range holds a NaN
    y[{ 1, 1 }] = 1
    r[#r + 1] = err_bytes(dev, function() return y:histc(6) end) -- an infinity
    r[#r + 1] = err_bytes(dev, function() return x:histc(4, 3, 1) end)
    r[#r + 1] = err_bytes(dev, function() return x:long():histc(4) end)
    return r
  end)
end
add('clamp/where/masked_fill', function() return { randn(5, 6), randint(-9, 9, { 5, 6 }) } end, function(_, x, i)
  local m = x:gt(0)
  return { x:clamp(-0.5, 0.5), x:clamp_min(0), i:clamp(-3, 3), dpl.where(m, x, x * 10), x:masked_fill(m, -1),
    i:masked_fill(m, 7), dpl.where(m:narrow(1, 1, 1), x, 0) }
end)

-- reductions
local function red_inputs() return { randn(4, 6, 5), randint(-4, 5, { 4, 6, 5 }) } end
for _, op in ipairs({ 'sum', 'mean', 'prod', 'logsumexp', 'any', 'all', 'argmax', 'argmin' }) do
  add('reduce ' .. op, red_inputs, function(_, x, i)
    local xt = x:transpose(1, 3)
    local r = { x[op](x), x[op](x, 1), x[op](x, 2, true), x[op](x, 3), xt[op](xt, 2) }
    if op ~= 'mean' and op ~= 'logsumexp' then
      r[#r + 1] = i[op](i)
      r[#r + 1] = i[op](i, 2)
    end
    return r
  end, op == 'prod' and 1e-4 or nil)
end
add('reduce sum/mean of long rows (sliced)', function() return { randn(3, 300000) } end, function(_, x)
  return { x:sum(2), x:mean(2), x:sum(), x:mean(), x:double():sum(2, true) }
end)
add('reduce max/min with indices', red_inputs, function(_, x, i)
  local v1, i1 = x:max(2)
  local v2, i2 = x:min(3, true)
  local v3, i3 = i:max(1)
  return { x:max(), x:min(), v1, i1, v2, i2, v3, i3 }
end)
add('reduce var/std/norm', red_inputs, function(_, x)
  return { x:var(), x:var(2), x:std(1, false), x:std(3, true, true), x:norm(), x:norm(1, 2), x:norm('inf', 3),
    x:norm(3, 1), x:norm(-math.huge, 2), x:norm(-math.huge) }
end)

add('reduce layouts (outer dims, strided, expanded, size-1 dims)', function()
  return { randn(70, 40, 3), randint(-9, 9, { 70, 40 }) }
end, function(_, x, i)
  local xt, col = x:transpose(1, 2), x:select(3, 2) -- [40, 70, 3]; [70, 40] with strides (120, 3)
  local v, ix = x:max(1)
  local w, iw = col:min(1, true)
  local ex = x:narrow(1, 1, 1):expand(5, 40, 3) -- stride 0 along dim 1
  return { x:sum(1), x:mean(1, true), x:var(1), x:std(2, true), x:logsumexp(1), v, ix, w, iw, x:argmin(2),
    x:norm(3, 1), x:norm('inf', 1), x:narrow(1, 1, 6):prod(1), x:any(1), x:all(2), xt:sum(), xt:argmax(), xt:max(),
    col:sum(), col:sum(1), col:argmax(1), col:std(2), x:narrow(2, 1, 1):sum(2), x:narrow(2, 1, 1):argmax(2),
    ex:sum(1), ex:argmin(1), ex:var(), i:sum(1), i:max(1), i:t():argmin(2), i:any(1), i:all(2),
    i:narrow(1, 1, 5):prod(1), i:t():sum() }
end)
add('reduce long strided runs (sliced)', function() return { randn(300000, 3) } end, function(_, x)
  local xt = x:t() -- [3, 300000] with stride 3 along the runs
  return { xt:sum(2), xt:mean(2, true), xt:sum(), x:narrow(2, 2, 2):mean(), xt:double():sum(2) }
end)
for _, dt in ipairs({ 'float16', 'bfloat16', 'int32', 'uint8', 'bool' }) do
  add('reduce in ' .. dt, function() return { sample(dt, 37, 6) } end, function(_, x)
    local r = { x:sum(1), x:sum(2), x:sum(), x:argmax(1), x:argmin(2), x:any(1), x:all(2), x:t():sum(2) }
    if dt ~= 'bool' then
      local v, ix = x:max(1)
      r[#r + 1], r[#r + 2], r[#r + 3] = v, ix, x:min()
    end
    if dt:find('float') then
      r[#r + 1], r[#r + 2], r[#r + 3] = x:mean(1), x:std(2), x:logsumexp(1)
    end
    return r
  end)
end

-- softmax family, losses
for _, dt in ipairs({ 'float32', 'float64', 'bfloat16' }) do
  add('softmax/log_softmax ' .. dt, function() return { sample(dt, 4, 7, 5), sample(dt, 4, 7, 5) } end,
    function(_, x, g)
      local s, l = x:softmax(2), x:log_softmax(3)
      return { s, l, x:softmax(1), dpl.tensor.softmax_backward(g, s, 2, false),
        dpl.tensor.softmax_backward(g, l, 3, true) }
    end)
end
-- fused layer norm (dpl.tensor.layer_norm): y, the saved mean/rstd, and the gradients with and
-- without weight/bias, over row lengths 1, 7, 1024, 5000, many rows, and two normalized dims
for _, dt in ipairs({ 'float32', 'float64', 'bfloat16' }) do
  for _, c in ipairs({ { { 6, 1 }, { 1 } }, { { 9, 7 }, { 7 } }, { { 5, 1024 }, { 1024 } }, { { 3, 5000 }, { 5000 } },
    { { 1500, 7 }, { 7 } }, { { 4, 3, 5 }, { 3, 5 } } }) do
    local xs, ps = c[1], c[2]
    add(('layer_norm %s x %s over %s'):format(dt, table.concat(xs, 'x'), table.concat(ps, 'x')), function()
      return { sample(dt, unpack(xs)), sample(dt, unpack(ps)), sample(dt, unpack(ps)), sample(dt, unpack(xs)) }
    end, function(_, x, w, b, gy)
      local T = dpl.tensor
      local n = w:numel()
      local y, m, r = T.layer_norm(x, w, b, n, 1e-5)
      local y0, m0, r0 = T.layer_norm(x, nil, nil, n, 1e-5)
      local gx, gw, gb = T.layer_norm_backward(gy, x, m, r, w, { w = true, b = true })
      local gx0, _, gb0 = T.layer_norm_backward(gy, x, m0, r0, nil, { b = true })
      local gx1 = T.layer_norm_backward(gy, x, m, r, w, {})
      return { y, m, r, y0, gx, gw, gb, gx0, gb0, gx1 }
    end, dt == 'bfloat16' and 2e-2 or nil)
  end
end
-- rows with +inf, -inf and NaN along every dim: the CPU's rules (a row with +inf is all NaN in softmax)
add('softmax/log_softmax with inf and NaN, every dim', function()
  local x = randn(3, 4, 5):double()
  local v = x:view(60)
  v[3], v[17], v[18], v[31], v[44], v[52] = math.huge, math.huge, -math.huge, 0 / 0, -math.huge, math.huge
  return { x, x:float(), randn(3, 4, 5):double() }
end, function(_, x, xf, g)
  local r = {}
  for d = 1, 3 do
    r[#r + 1] = x:softmax(d)
    r[#r + 1] = x:log_softmax(d)
    r[#r + 1] = xf:softmax(d)
    r[#r + 1] = dpl.tensor.softmax_backward(g, x:softmax(d), d, false)
    r[#r + 1] = dpl.tensor.softmax_backward(g, x:log_softmax(d), d, true)
  end
  return r
end)
for _, red in ipairs({ 'mean', 'sum', 'none' }) do
  add('cross_entropy/nll ' .. red, function()
    local t = randint(1, 11, { 16 }) -- class 4 is ignored below
    return { randn(16, 10) * 3, t, red == 'none' and randn(16) or randn(1):view() }
  end, function(_, x, t, g)
    local o = { reduction = red, ignore_index = 4 }
    local lp = x:log_softmax(2)
    return { dpl.tensor.cross_entropy(x, t, o), dpl.tensor.nll_loss(lp, t, o),
      dpl.tensor.cross_entropy_backward(g, x, t, o), dpl.tensor.nll_loss_backward(g, lp, t, o) }
  end)
end
-- logits in every float dtype and layout, read in place by the loss kernels: contiguous, transposed
-- (class stride 16), narrowed columns (row stride 13), expanded rows (row stride 0), 1-d with a 0-d
-- target, a strided 1-d column; grad_out strided (stride 2), 0-d, float32 for a float16 input, and a
-- [4, 4] view whose dims do not coalesce (the one case the backward copies)
for _, dt in ipairs({ 'float32', 'float64', 'float16', 'bfloat16' }) do
  for _, red in ipairs({ 'mean', 'sum', 'none' }) do
    add(('cross_entropy/nll %s %s, strided'):format(dt, red), function()
      return { sample(dt, 10, 16), sample(dt, 16, 13), sample(dt, 1, 10), sample(dt, 10), sample(dt, 10, 3),
        randint(1, 11, { 16 }), randint(1, 11, {}), randn(16, 2), randn(4, 8), randn(1):view() }
    end, function(_, xt, xn, xe, x1, xc, t, t0, g2, g44, g0)
      local o = { reduction = red, ignore_index = 4 }
      local T = dpl.tensor
      local xs = { xt:t(), xn:narrow(2, 2, 10), xe:expand(16, 10) }
      local gs = red == 'none' and { g2:select(2, 1), g44:narrow(2, 1, 4), g2:select(2, 2):to(dt) } or { g0, g0:to(dt) }
      local r = {}
      for i, x in ipairs(xs) do
        local g = gs[(i - 1) % #gs + 1]
        r[#r + 1] = T.cross_entropy(x, t, o)
        r[#r + 1] = T.nll_loss(x, t, o)
        r[#r + 1] = T.cross_entropy_backward(g, x, t, o)
        r[#r + 1] = T.nll_loss_backward(g, x, t, o)
      end
      for _, x in ipairs({ x1, xc:select(2, 2) }) do
        r[#r + 1] = T.cross_entropy(x, t0, o)
        r[#r + 1] = T.nll_loss(x, t0, o)
        r[#r + 1] = T.cross_entropy_backward(g0, x, t0, o)
        r[#r + 1] = T.nll_loss_backward(g0, x, t0, o)
      end
      return r
    end)
  end
end
add('mse_loss', function() return { randn(6, 7), randn(6, 7), randn(1):view(), randn(6, 7) } end,
  function(_, a, b, g, gn)
    return { dpl.tensor.mse_loss(a, b), dpl.tensor.mse_loss(a, b, { reduction = 'sum' }),
      dpl.tensor.mse_loss(a, b, { reduction = 'none' }), dpl.tensor.mse_loss_backward(g, a, b),
      dpl.tensor.mse_loss_backward(gn, a, b, { reduction = 'none' }) }
  end)

-- matmul family
for _, dt in ipairs({ 'float32', 'float64', 'bfloat16', 'float16' }) do
  add('matmul ' .. dt, function()
    return { sample(dt, 7, 9), sample(dt, 9, 5), sample(dt, 3, 7, 9), sample(dt, 2, 1, 7, 9), sample(dt, 3, 9, 5),
      sample(dt, 9), sample(dt, 7) }
  end, function(_, a, b, ba, bb, bc, v, w)
    return { a:matmul(b), a:t():t():matmul(b), b:t():matmul(a:t()), ba:matmul(b), bb:matmul(bc), v:matmul(b),
      a:matmul(v), w:matmul(a), ba:bmm(bc:narrow(1, 1, 3)), dpl.tensor.addmm(w:view(7, 1), a, b, { beta = 0.5, alpha = 2 }),
      v:dot(v) }
  end, (dt == 'bfloat16' or dt == 'float16') and 2e-2 or (dt == 'float32' and 1e-5 or nil))
end

-- an empty inner dim (k = 0): the product is beta * C (zeros for matmul); empty operands' strides must still
-- give cuBLAS valid leading dimensions
for _, dt in ipairs({ 'float32', 'float64', 'bfloat16' }) do
  add('matmul ' .. dt .. ' empty inner dim', function()
    return { sample(dt, 5, 0), sample(dt, 0, 4), sample(dt, 2, 5, 0), sample(dt, 4, 0), sample(dt, 5, 4) }
  end, function(_, e50, e04, b250, e40, c54)
    return { e50:matmul(e04), b250:matmul(e04), e50:matmul(e40:t()), dpl.tensor.addmm(c54, e50, e04, { beta = 2 }),
      dpl.tensor.addmm(c54, e50, e04, { beta = 0 }) }
  end)
end

-- integer matmul (computed in int64 with wraparound on both devices, converted back to the dtype); int64
-- outputs are also compared through int32 (their low 32 bits exactly: the check compares in float64)
local function with_low_bits(list)
  local r = {}
  for _, t in ipairs(list) do
    r[#r + 1] = t
    if t.dtype == 'int64' then r[#r + 1] = t:to('int32') end
  end
  return r
end
local int_big = { int32 = 2 ^ 20, int64 = 2 ^ 40 } -- products and sums that wrap
for _, dt in ipairs({ 'int32', 'int64', 'uint8' }) do
  add('matmul ' .. dt, function()
    return { sample(dt, 7, 9), sample(dt, 9, 5), sample(dt, 3, 7, 9), sample(dt, 2, 1, 7, 9), sample(dt, 3, 9, 5),
      sample(dt, 9), sample(dt, 7) }
  end, function(_, a, b, ba, bb, bc, v, w)
    return with_low_bits({ a:matmul(b), a:mm(b), b:t():matmul(a:t()), ba:matmul(b), bb:matmul(bc), v:matmul(b),
      a:matmul(v), w:matmul(a), ba:bmm(bc:narrow(1, 1, 3)), bc:transpose(2, 3):matmul(ba:transpose(2, 3)),
      a:narrow(2, 2, 6):matmul(b:narrow(1, 1, 6)), bb:matmul(b:t():t()), b:t():matmul(ba:transpose(2, 3)),
      dpl.tensor.addmm(w:view(7, 1), a, b, { beta = 2, alpha = -3 }), dpl.tensor.addmm(b:narrow(1, 1, 5), b:t(), b,
      { beta = 0 }), v:dot(v) })
  end)
  add('matmul ' .. dt .. ' empty dims', function()
    return { sample(dt, 0, 4), sample(dt, 4, 3), sample(dt, 3, 0), sample(dt, 0, 4), sample(dt, 0, 3, 4),
      sample(dt, 3, 4) }
  end, function(_, e04, b43, e30, f04, e034, c34)
    return with_low_bits({ e04:matmul(b43), e30:matmul(f04), c34:matmul(b43:narrow(2, 1, 0)), e034:matmul(b43),
      c34:t():matmul(e30), dpl.tensor.addmm(c34, e30, f04, { beta = 2 }), e30:t():matmul(e30) })
  end)
  if int_big[dt] then
    add('matmul ' .. dt .. ' wraparound', function()
      local r = int_big[dt]
      return { randint(-r, r, { 7, 9 }, dt), randint(-r, r, { 9, 5 }, dt), randint(-r, r, { 2, 3, 7, 9 }, dt) }
    end, function(_, a, b, ba)
      return with_low_bits({ a:matmul(b), b:t():matmul(a:t()), ba:matmul(b), ba:transpose(1, 2):matmul(b),
        dpl.tensor.addmm(a:narrow(2, 1, 5), a, b, { beta = 7, alpha = 5 }) })
    end)
  end
end

-- indexing
add('embedding', function() return { randn(10, 6), randint(1, 11, { 4, 3 }), randn(4, 3, 6) } end,
  function(_, w, idx, g)
    return { dpl.tensor.embedding(w, idx), dpl.tensor.embedding_backward(g, idx, 10),
      dpl.tensor.embedding(w:to('bfloat16'), idx) }
  end)
add('index_select/index_add_/gather/scatter_add_', function()
  return { randn(5, 6, 4), randint(1, 6, { 7 }), randn(5, 7, 4), randint(1, 7, { 5, 3, 4 }), randn(5, 3, 4),
    randint(-9, 9, { 5, 6, 4 }) }
end, function(_, x, idx, src, gidx, gsrc, ints)
  local a = x:clone()
  a:index_add_(2, idx, src)
  local b = x:clone()
  b:scatter_add_(2, gidx, gsrc)
  local c = x:transpose(1, 3) -- strided self
  local i2 = ints:clone()
  i2:index_add_(2, idx, ints:index_select(2, idx))
  return { x:index_select(2, idx), x:index_select(1, idx:narrow(1, 1, 3)), a, x:gather(2, gidx), b,
    c:gather(2, gidx:transpose(1, 3)), ints:index_select(3, idx:narrow(1, 1, 2):clamp(1, 4)), i2,
    x:to('bfloat16'):index_select(2, idx) }
end)
-- index_add_/scatter_add_ on uint8 (wrapping) and bool (logical or), many colliding indices
for _, dt in ipairs({ 'uint8', 'bool' }) do
  add('index_add_/scatter_add_ ' .. dt, function()
    return { sample(dt, 5, 6, 4), randint(1, 7, { 12 }), sample(dt, 5, 12, 4), randint(1, 7, { 5, 8, 4 }),
      sample(dt, 5, 8, 4), randint(-300, 300, { 5, 12, 4 }) }
  end, function(_, x, idx, src, gidx, gsrc, wide)
    local a1 = x:clone():index_add_(2, idx, src)
    local a2 = x:clone():index_add_(2, idx, wide) -- src converted to self's dtype first
    local a3 = x:clone()
    a3:transpose(1, 3):index_add_(2, idx, src:transpose(1, 3)) -- strided self
    local a4 = x:clone():index_add_(1, idx:narrow(1, 1, 5):clamp(1, 5), x:clone())
    local a5 = x:clone():index_add_(2, idx:narrow(1, 1, 0), src:narrow(2, 1, 0))
    local b1 = x:clone():scatter_add_(2, gidx, gsrc)
    local b2 = x:clone():scatter_add_(3, gidx:narrow(2, 1, 6):clamp(1, 4), gsrc)
    local b3 = x:clone()
    b3:transpose(1, 2):scatter_add_(1, gidx:transpose(1, 2), gsrc:transpose(1, 2)) -- strided self and operands
    local b4 = x:clone():scatter_add_(2, gidx:narrow(2, 1, 0), gsrc:narrow(2, 1, 0))
    local b5 = x:clone():scatter_add_(2, gidx, wide:narrow(2, 1, 8))
    return { a1, a2, a3, a4, a5, b1, b2, b3, b4, b5 }
  end)
end
-- Bad indices on cuda: the kernels check them and the plugin reports a failure
-- at the next call that waits for the GPU (item, :cpu(), dpl.cuda.synchronize),
-- with the CPU's message and a note that it comes late; with
-- DPL_CUDA_SYNC_CHECKS=1 or CUDA_LAUNCH_BLOCKING=1 the op raises at once, as on
-- the CPU. M.sync_checks says which mode this process runs in.
local function env_on(v) v = os.getenv(v) return v ~= nil and v ~= '' and v ~= '0' end
M.sync_checks = env_on('DPL_CUDA_SYNC_CHECKS') or env_on('CUDA_LAUNCH_BLOCKING')
local LATE = 'reported at this later call'
--- Runs f() on dev; returns the error message or nil. On cuda the error must
--- come where the mode says (at the op, or from the next synchronize with the
--- late note, never at the op); else this raises.
function M.index_error(dev, f)
  local ok, e = pcall(f)
  if dev == 'cpu' then return not ok and tostring(e) or nil end
  if not ok and not M.sync_checks then error('raised at the op, expected at the next synchronizing call: ' .. tostring(e), 0) end
  if not ok then
    if tostring(e):find(LATE, 1, true) then error('the error says it is late in DPL_CUDA_SYNC_CHECKS mode: ' .. tostring(e), 0) end
    return tostring(e)
  end
  ok, e = pcall(dpl.cuda.synchronize, dev)
  if ok then return nil end
  if M.sync_checks then error('raised at synchronize in DPL_CUDA_SYNC_CHECKS mode: ' .. tostring(e), 0) end
  if not tostring(e):find(LATE, 1, true) then error('a late error without its note: ' .. tostring(e), 0) end
  return tostring(e)
end
-- out-of-range indices raise even where no element moves (empty rows), as on the CPU: 1 per op that raised
add('bad indices with empty rows raise', function() return { randn(2, 0), randn(0, 5), randn(4, 0) } end,
  function(dev, z, x, w)
    local function raised(f) local e = M.index_error(dev, f) return e and e:find('out of range', 1, true) and 1 or 0 end
    local i3, i7, i9 = dpl.tensor({ 3 }):to(dev), dpl.tensor({ 7 }):to(dev), dpl.tensor({ { 1, 9 } }):to(dev)
    return { dpl.tensor({ raised(function() return z:index_select(1, i3) end),
      raised(function() return z:clone():index_add_(1, i3, z:narrow(1, 1, 1)) end),
      raised(function() return x:index_select(2, i7) end),
      raised(function() return dpl.tensor.embedding(w, i9) end),
      raised(function() return dpl.tensor.embedding_backward(dpl.ones(1, 2, 0, { device = dev }), i9, 4) end) }, { device = dev }) }
  end)
-- every op that checks indices, each with one bad index: cuda raises the CPU's message (at the op, or
-- later with a note appended), naming the op and the bad value; 1 per op whose message matched
add('bad indices raise the CPU\'s message (cuda: at the next synchronizing call)',
  function() return { randn(4, 5), randn(6, 3), randn(1, 1, 4, 4) } end,
  function(dev, x, w, img)
    local T, F = dpl.tensor, dpl.nn.functional
    local tgt, ix = dpl.tensor({ 2, 5, 9, 1 }), dpl.tensor({ 2, 8, 1 })
    local pooled, pix = T.max_pool2d(img:cpu(), 2)
    pix = pix:clone()
    pix:view(-1)[3] = 17 -- outside the 16-element plane
    local ops = {
      function(d) return F.cross_entropy(x:to(d), tgt:to(d)) end,
      function(d) return F.nll_loss(x:to(d):log_softmax(2), tgt:to(d)) end,
      function(d) return T.embedding(w:to(d), ix:to(d)) end,
      function(d) return T.embedding_backward(dpl.ones(3, 3, { device = d }), ix:to(d), 6) end,
      function(d) return w:to(d):index_select(1, ix:to(d)) end,
      function(d) return w:to(d):clone():index_add_(1, ix:to(d), dpl.ones(3, 3, { device = d })) end,
      function(d) return x:to(d):gather(2, dpl.tensor({ { 1 }, { 2 }, { 6 }, { 1 } }):to(d)) end,
      function(d) return x:to(d):clone():scatter_add_(2, dpl.tensor({ { 1 }, { 7 }, { 6 }, { 1 } }):to(d), x:to(d)) end,
      function(d) return T.max_pool2d_backward(dpl.ones(unpack(pooled:size())):to(d), img:to(d), pix:to(d)) end,
    }
    local got = {}
    for k, op in ipairs(ops) do
      local want = M.index_error('cpu', function() return op('cpu') end)
      local e = M.index_error(dev, function() return op(dev) end)
      assert(want, 'case ' .. k .. ': the CPU does not raise')
      if dev ~= 'cpu' and not (e and e:sub(1, #want) == want) then
        error(('op %d: the CPU says %q, %s says %q'):format(k, want, dev, tostring(e)), 0)
      end
      got[k] = 1
    end
    return { dpl.tensor(got, { device = dev }) }
  end)
add('max(dim) backward through scatter_add_ (autograd)', function() return { randn(4, 6) } end, function(_, x)
  local v, i = x:max(2)
  return { dpl.zeros(4, 6, { device = x.device }):scatter_add_(2, i:view(4, 1), v:view(4, 1)) }
end)
add('masked_select/nonzero (through host memory)', function() return { randn(5, 6), randint(-1, 2, { 4, 3 }) } end,
  function(_, x, i)
    return { x:masked_select(x:gt(0.3)), x:nonzero(), i:nonzero(), i:masked_select(i:ne(0)) }
  end)
add('cat/stack', function() return { randn(3, 4), randn(2, 4), randn(3, 4) } end, function(_, a, b, c)
  return { dpl.cat({ a, b }, 1), dpl.cat({ a, c }, 2), dpl.stack({ a, c }, 1), dpl.stack({ a:t(), c:t() }, 3) }
end)

-- convolution and pooling (NCHW)
for _, cfg in ipairs({ { name = 'plain', o = nil }, { name = 'stride 2 pad 1', o = { stride = 2, padding = 1 } },
  { name = 'dilation 2 groups 2', o = { dilation = 2, groups = 2, padding = 2 } } }) do
  for _, dt in ipairs({ 'float32', 'float64', 'bfloat16' }) do
    add(('conv2d %s %s'):format(cfg.name, dt), function()
      local x, w, b = sample(dt, 3, 4, 9, 8), sample(dt, 6, cfg.o and cfg.o.groups and 2 or 4, 3, 3), sample(dt, 6)
      local y = dpl.tensor.conv2d(x, w, b, cfg.o)
      return { x, w, b, sample(dt, unpack(y:size())) }
    end, function(_, x, w, b, gy)
      local gx, gw, gb = dpl.tensor.conv2d_backward(gy, x, w, cfg.o)
      return { dpl.tensor.conv2d(x, w, b, cfg.o), dpl.tensor.conv2d(x, w, nil, cfg.o), gx, gw, gb }
    end, dt == 'bfloat16' and 2e-2 or (dt == 'float32' and 1e-5 or nil))
  end
end
for _, dt in ipairs({ 'float32', 'float64' }) do
  add('max_pool2d/avg_pool2d ' .. dt, function() return { sample(dt, 2, 3, 9, 8), sample(dt, 2, 3, 4, 4),
    sample(dt, 2, 3, 5, 4) } end, function(_, x, g2, g3)
    local v, i = dpl.tensor.max_pool2d(x, 2)
    local v3, i3 = dpl.tensor.max_pool2d(x, 3, { stride = 2, padding = 1 })
    return { v, i, v3, i3, dpl.tensor.max_pool2d_backward(g2, x, i), dpl.tensor.max_pool2d_backward(g3, x, i3),
      dpl.tensor.avg_pool2d(x, 2), dpl.tensor.avg_pool2d(x, 3, { stride = 2, padding = 1 }),
      dpl.tensor.avg_pool2d(x, 3, { stride = 2, padding = 1, count_include_pad = false }),
      dpl.tensor.avg_pool2d_backward(g2, x, 2), dpl.tensor.avg_pool2d_backward(g3, x, 3, { stride = 2, padding = 1 }) }
  end)
  -- ceil_mode on 8x7: partial windows at the edge; {k 2, s 2, p 1} drops the last column (a
  -- window must start inside the input or the left padding)
  add('max_pool2d/avg_pool2d ceil_mode ' .. dt, function() return { sample(dt, 2, 3, 8, 7), sample(dt, 2, 3, 4, 4),
    sample(dt, 2, 3, 5, 4) } end, function(_, x, g2, g3)
    local T = dpl.tensor
    local o2, o3, o4 = { ceil_mode = true }, { stride = 2, padding = 1, ceil_mode = true },
      { stride = 2, padding = 1, ceil_mode = true, count_include_pad = false }
    local v, i = T.max_pool2d(x, 2, o2)
    local v3, i3 = T.max_pool2d(x, 3, o3)
    local v4, i4 = T.max_pool2d(x, 2, o3)
    return { v, i, v3, i3, v4, i4, T.max_pool2d_backward(g2, x, i), T.max_pool2d_backward(g3, x, i3),
      T.max_pool2d_backward(g3, x, i4), T.avg_pool2d(x, 2, o2), T.avg_pool2d(x, 3, o3), T.avg_pool2d(x, 3, o4),
      T.avg_pool2d(x, 2, o4), T.avg_pool2d_backward(g2, x, 2, o2), T.avg_pool2d_backward(g3, x, 3, o3),
      T.avg_pool2d_backward(g3, x, 2, o4) }
  end)
end

-- autograd through nn modules: the same gradients on both devices
local function grads_of(dev, make, x, y)
  dpl.manual_seed(5)
  local model = make():to(dev)
  local loss = dpl.nn.functional.cross_entropy(model(x), y)
  loss:backward()
  local r = { loss }
  for _, p in ipairs(model:parameters()) do r[#r + 1] = p.grad end
  return r
end
add('autograd: MLP gradients', function() return { randn(16, 20), randint(1, 6, { 16 }) } end, function(dev, x, y)
  local nn = dpl.nn
  return grads_of(dev, function()
    return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 5))
  end, x, y)
end)
add('autograd: CNN gradients', function() return { randn(4, 1, 12, 12), randint(1, 4, { 4 }) } end, function(dev, x, y)
  local nn = dpl.nn
  return grads_of(dev, function()
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(4, 6, 3, { padding = 1 }), nn.Tanh(),
      nn.Flatten(), nn.Linear(6 * 5 * 5, 3))
  end, x, y)
end)
add('autograd: optimizer steps (SGD momentum, Adam)', function() return { randn(8, 6), randint(1, 4, { 8 }) } end,
  function(dev, x, y)
    local nn, optim = dpl.nn, dpl.optim
    dpl.manual_seed(9)
    local m = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 3)):to(dev)
    local o1 = optim.SGD(m:parameters(), { lr = 0.1, momentum = 0.9 })
    local o2 = optim.Adam(m:parameters(), { lr = 0.01 })
    for _ = 1, 3 do
      for _, o in ipairs({ o1, o2 }) do
        o:zero_grad()
        dpl.nn.functional.cross_entropy(m(x), y):backward()
        o:step()
      end
    end
    local r = {}
    for _, p in ipairs(m:parameters()) do r[#r + 1] = p:detach() end
    return r
  end, 1e-5)

-- multi-tensor optimizer steps (dpl_cuda_optim.cu) on cuda against the per-tensor path on the CPU:
-- params and states after 3 steps, one param without a gradient at step 2; sizes around the
-- 16384-element chunks, 30 tensors (more than a launch's 24), and one past a launch's 256 chunks
local function optim_case(name, cls, opts, sizes, dts)
  local steps = 3
  for _, dt in ipairs(dts or { 'float32', 'float64' }) do
    add(('optim multi-tensor %s %s'):format(name, dt), function()
      local r = {}
      for _, n in ipairs(sizes) do r[#r + 1] = randn(n):to(dt) end
      for _ = 1, steps do for _, n in ipairs(sizes) do r[#r + 1] = randn(n):to(dt) end end
      return r
    end, function(_, ...)
      local ins, k = { ... }, #sizes
      local ps = {}
      for i = 1, k do ps[i] = ins[i]:clone():requires_grad_() end
      local opt = dpl.optim[cls](ps, opts)
      for s = 1, steps do
        for i = 1, k do ps[i].grad = ins[s * k + i] end
        if s == 2 then ps[2].grad = nil end
        opt:step()
      end
      local out = {}
      for i = 1, k do
        out[#out + 1] = ps[i]:detach()
        local st = opt.state[ps[i]]
        for _, key in ipairs({ 'momentum_buffer', 'exp_avg', 'exp_avg_sq', 'max_exp_avg_sq' }) do
          if st[key] then out[#out + 1] = st[key] end
        end
      end
      return out
    end)
  end
end
local mixed = { 1, 7, 16384, 16385, 40000, 0 }
local many = {}
for i = 1, 30 do many[i] = (i * 37) % 200 + 1 end
many[5] = 20000
optim_case('SGD momentum', 'SGD', { lr = 0.1, momentum = 0.9 }, mixed)
optim_case('SGD nesterov weight_decay', 'SGD', { lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 0.01 }, mixed)
optim_case('SGD dampening maximize', 'SGD', { lr = 0.05, momentum = 0.5, dampening = 0.2, maximize = true }, many)
optim_case('SGD plain', 'SGD', { lr = 0.1, weight_decay = 0.1 }, mixed)
optim_case('Adam', 'Adam', { lr = 0.01 }, many)
optim_case('Adam amsgrad weight_decay maximize', 'Adam',
  { lr = 0.01, betas = { 0.8, 0.9 }, weight_decay = 0.1, amsgrad = true, maximize = true }, mixed)
optim_case('AdamW amsgrad', 'AdamW', { lr = 0.01, weight_decay = 0.2, amsgrad = true }, mixed)
optim_case('SGD momentum past 256 chunks', 'SGD', { lr = 0.1, momentum = 0.9 }, { 3, 256 * 16384 + 100, 5 }, { 'float32' })

-- random numbers: one seed, the same numbers on both devices
add('rng: same seed, same numbers', function() return {} end, function(dev)
  local o = { device = dev }
  dpl.manual_seed(1234)
  local u = dpl.rand(1000, o)
  local n = dpl.randn(1000, o)
  local d = dpl.rand(100, { device = dev, dtype = 'float64' })
  local r = dpl.randint(0, 100, { 1000 }, o)
  local b = dpl.zeros(1000, o):bernoulli_(0.3)
  local nc = dpl.zeros(8, 9, o)
  nc:t():normal_(2, 3) -- non-contiguous: drawn contiguous, then copied
  return { u, n, d, r, b, nc }
end, 1e-6)

-- dpl.linalg: cuSOLVER (and cuBLAS trsm) against the CPU's LAPACK
require('spec.support.cuda_check_linalg')(add, M)
require('spec.support.cuda_check_scatter')(add, M, sample, all_dtypes)
require('spec.support.cuda_check_devops')(add, M, sample, all_dtypes)

---------------------------------------------------------------- running
--- Runs one case; returns ok, detail (max error or message).
function M.run_case(c, dev, seed)
  dev = dev or 'cuda:0'
  dpl.manual_seed(seed or 7)
  local ok, res = pcall(function()
    local ins = c.inputs()
    local ref = outputs(c.fn('cpu', unpack(ins)))
    local dins = to_dev(ins, dev)
    local got = outputs(c.fn(dev, unpack(dins)))
    if #got ~= #ref then return { false, ('%d outputs, expected %d'):format(#got, #ref) } end
    local worst = 0
    for k = 1, #ref do
      local good, e = M.compare(ref[k], got[k], c.tol)
      if not good then return { false, ('output %d: %s'):format(k, e) } end
      if e > worst then worst = e end
    end
    return { true, worst }
  end)
  if not ok then return false, 'error: ' .. tostring(res) end
  return res[1], res[2]
end

--- 'cuda:0 holds tensors' or nil, why not.
function M.gpu_ready()
  local cuda = dpl.cuda
  local ok, n = pcall(cuda.device_count)
  if not ok then return nil, tostring(n) end
  if n == 0 then return nil, 'no GPU: ' .. cuda.unavailable_reason() end
  local info = require('ffi').new('dpl_device_info')
  dpl.C.dpl_device_get_info(1, 0, info)
  if info.simulated ~= 0 then return nil, 'simulated GPUs only (DPL_VIRTUAL_GPUS): no CUDA kernels to check' end
  if not cuda.is_available() then return nil, cuda.unavailable_reason() end
  return true
end

return M
