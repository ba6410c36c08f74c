-- pool3d_kernel_spec.lua: the C kernels of max_pool3d / avg_pool3d (src/tensor/dpl_tensor_pool3d.c)
-- against the composed Lua path they replace on host tensors (functional_conv3d._composed):
-- values and indices to the bit, gradients to rounding (to the bit without overlapping
-- windows), float32 and float64, non-contiguous inputs, padding, ceil_mode, dilation, NaN,
-- -inf, empty batches, unbatched inputs; float64 gradcheck; the C entry points' checks.
local dpl = require 'dpl'
local ffi = require 'ffi'
local C = require('dpl.capi').C
local A = require 'dpl.autograd'
local F = dpl.nn.functional
local F3 = require 'dpl.nn.functional_conv3d'

-- forward (values, indices) and the input's gradient for a fixed output gradient
local function run(fn, x, k, o, composed)
  F3._composed = composed
  local ok, e = pcall(function()
    local xx = x:detach():clone():requires_grad_()
    local v, i = F3[fn](xx, k, o)
    dpl.manual_seed(7)
    local g = dpl.randn(v:size(), { dtype = x.dtype })
    ;(v * g):sum():backward()
    return { v, i, xx.grad }
  end)
  F3._composed = false
  if not ok then error(e, 0) end
  return e[1], e[2], e[3]
end
local function same_bits(a, b, what)
  assert.are.same(a:size(), b:size(), what .. ': shape')
  local ta, tb = a:reshape(-1):totable(), b:reshape(-1):totable()
  for i = 1, #ta do
    local x, y = ta[i], tb[i]
    if not (x == y or (x ~= x and y ~= y)) then
      error(('%s: element %d: %.17g vs %.17g'):format(what, i, x, y), 2)
    end
  end
end
local function close(a, b, tol, what)
  assert.are.same(a:size(), b:size(), what .. ': shape')
  if a:numel() == 0 then return end
  local m = (a - b):abs():max():item()
  assert(m <= tol, ('%s: max difference %g > %g'):format(what, m, tol))
end

local CASES = { -- fn, shape, kernel, opts, windows overlap (gradients to rounding only)
  { 'max_pool3d', { 2, 3, 8, 8, 8 }, 2, nil, false },
  { 'max_pool3d', { 2, 3, 7, 9, 10 }, 2, { return_indices = true }, false },
  { 'max_pool3d', { 1, 2, 7, 9, 6 }, 3, { stride = 2, padding = 1, return_indices = true }, true },
  { 'max_pool3d', { 1, 2, 7, 9, 6 }, { 3, 2, 3 }, { stride = { 2, 1, 2 }, padding = { 1, 1, 0 }, dilation = { 2, 1, 1 },
    ceil_mode = true, return_indices = true }, true },
  { 'max_pool3d', { 2, 5, 5, 6 }, 2, { return_indices = true, ceil_mode = true }, false },
  { 'max_pool3d', { 1, 1, 9, 8, 7 }, { 2, 3, 2 }, { stride = { 3, 3, 2 }, dilation = 2 }, false },
  { 'avg_pool3d', { 2, 3, 8, 9, 10 }, 2, nil, false },
  { 'avg_pool3d', { 1, 2, 7, 9, 6 }, 3, { stride = 2, padding = 1 }, true },
  { 'avg_pool3d', { 1, 2, 7, 9, 6 }, 3, { stride = 2, padding = 1, count_include_pad = false, ceil_mode = true }, true },
  { 'avg_pool3d', { 1, 2, 7, 9, 6 }, { 3, 2, 5 }, { stride = { 1, 2, 3 }, padding = { 1, 1, 2 }, divisor_override = 7 }, true },
  { 'avg_pool3d', { 3, 7, 6, 5 }, { 2, 2, 2 }, { stride = { 2, 3, 2 }, padding = 1, ceil_mode = true }, false },
  { 'avg_pool3d', { 1, 1, 5, 5, 5 }, 5, { divisor_override = -3 }, false },
}

describe('max_pool3d / avg_pool3d C kernels against the composed path', function()
  for _, dt in ipairs({ 'float32', 'float64' }) do
    for n, c in ipairs(CASES) do
      it(('%s case %d, %s'):format(c[1], n, dt), function()
        dpl.manual_seed(100 + n)
        local x = dpl.randn(c[2], { dtype = dt })
        local v1, i1, g1 = run(c[1], x, c[3], c[4], false)
        local v2, i2, g2 = run(c[1], x, c[3], c[4], true)
        same_bits(v1, v2, 'values')
        if i1 ~= nil or i2 ~= nil then
          assert.are.equal('int64', i1.dtype)
          same_bits(i1, i2, 'indices')
        end
        if c[5] then close(g1, g2, dt == 'float32' and 1e-5 or 1e-12, 'gradient')
        else same_bits(g1, g2, 'gradient') end
      end)
    end
  end

  it('non-contiguous inputs (a permuted and a strided view)', function()
    dpl.manual_seed(3)
    local base = dpl.randn(4, 10, 9, 3, 8)
    local xp = base:permute({ 1, 4, 2, 3, 5 }) -- [4, 3, 10, 9, 8], not contiguous
    local xs = dpl.randn(2, 3, 12, 10, 14):narrow(5, 2, 11) -- strided last dim
    for _, x in ipairs({ xp, xs }) do
      assert.is_false(x:is_contiguous())
      for _, fn in ipairs({ 'max_pool3d', 'avg_pool3d' }) do
        local o = { stride = 2, padding = 1 }
        if fn == 'max_pool3d' then o.return_indices = true end
        local v1, i1, g1 = run(fn, x, 3, o, false)
        local v2, i2, g2 = run(fn, x, 3, o, true)
        same_bits(v1, v2, fn .. ' values')
        if i1 then same_bits(i1, i2, fn .. ' indices') end
        close(g1, g2, 1e-5, fn .. ' gradient')
      end
    end
  end)

  it('NaN propagates (the first NaN of a window, its index) and -inf windows', function()
    local x = dpl.randn(1, 2, 4, 4, 4)
    x[1][1][1][1][2] = 0 / 0
    x[1][1][1][2][1] = 0 / 0
    x[1][2][3][3][3] = -math.huge
    local v1, i1 = run('max_pool3d', x, 2, { return_indices = true }, false)
    local v2, i2 = run('max_pool3d', x, 2, { return_indices = true }, true)
    same_bits(v1, v2, 'values')
    same_bits(i1, i2, 'indices')
    assert.is_true(v1[1][1][1][1][1]:item() ~= v1[1][1][1][1][1]:item())
    assert.are.equal(2, i1[1][1][1][1][1]:item()) -- the first NaN (1-based position 2)
    local a1 = run('avg_pool3d', x, 2, nil, false)
    local a2 = run('avg_pool3d', x, 2, nil, true)
    same_bits(a1, a2, 'avg values')
    -- an all -inf volume: the value -inf, the index of the first element inside the input
    local m = dpl.full({ 1, 1, 3, 3, 3 }, -math.huge, { dtype = 'float32' })
    local v, i = F.max_pool3d(m, 3, { stride = 2, padding = 1, return_indices = true })
    assert.are.same({ -math.huge, -math.huge, -math.huge, -math.huge, -math.huge, -math.huge, -math.huge, -math.huge },
      v:reshape(-1):totable())
    assert.are.same({ 1, 2, 4, 5, 10, 11, 13, 14 }, i:reshape(-1):totable()) -- PyTorch's indices + 1
  end)

  it('empty batches and unbatched inputs', function()
    for _, fn in ipairs({ 'max_pool3d', 'avg_pool3d' }) do
      local e = dpl.zeros(0, 3, 4, 4, 4):requires_grad_()
      local y = F[fn](e, 2)
      assert.are.same({ 0, 3, 2, 2, 2 }, y:size())
      y:sum():backward()
      assert.are.same({ 0, 3, 4, 4, 4 }, e.grad:size())
      local u = dpl.randn(3, 5, 6, 7)
      same_bits(F[fn](u, 2, { stride = 1 }), F[fn](u:unsqueeze(1), 2, { stride = 1 }):squeeze(1), fn .. ' unbatched')
    end
  end)

  it('float64 gradcheck of both kernels', function()
    dpl.manual_seed(11)
    local x = dpl.randn(1, 2, 5, 4, 6, { dtype = 'float64' }):requires_grad_()
    assert.is_true(A.gradcheck(function(t) return F.max_pool3d(t, 2, { stride = 1, padding = 1 }) end, { x }))
    assert.is_true(A.gradcheck(function(t) return F.max_pool3d(t, { 2, 3, 2 }, { dilation = { 2, 1, 1 },
      ceil_mode = true }) end, { x }))
    assert.is_true(A.gradcheck(function(t) return F.avg_pool3d(t, 3, { stride = 2, padding = 1,
      count_include_pad = false, ceil_mode = true }) end, { x }))
    assert.is_true(A.gradcheck(function(t) return F.avg_pool3d(t, 2, { divisor_override = 5 }) end, { x }))
  end)

  it('float16 runs in float32 and keeps its dtype', function()
    local x = dpl.randn(1, 2, 4, 4, 4)
    local h = x:to('float16')
    local y = F.max_pool3d(h, 2)
    assert.are.equal('float16', y.dtype)
    same_bits(y:float(), F.max_pool3d(h:float(), 2), 'float16 max')
  end)

  it('the C entry points check their arguments', function()
    local p = ffi.new('int32_t[13]', { 2, 2, 2, 2, 2, 2, 0, 0, 0, 1, 1, 1, 0 })
    local out = ffi.new('dpl_tensor*[2]')
    local capi = require 'dpl.capi'
    local x = dpl.randn(1, 1, 4, 4, 4)
    assert.are_not.equal(0, C.dpl_max_pool3d(x, nil, out, out + 1))
    assert.matches('params is NULL', capi.last_error())
    assert.are_not.equal(0, C.dpl_max_pool3d(dpl.randn(4, 4, 4), p, out, out + 1))
    assert.matches('expected input %[N, C, D, H, W%]', capi.last_error())
    assert.are_not.equal(0, C.dpl_max_pool3d(dpl.ones(1, 1, 4, 4, 4, { dtype = 'int64' }), p, out, out + 1))
    assert.matches('floating%-point', capi.last_error())
    p[6] = 2 -- padding 2 > kernel 2 / 2
    assert.are_not.equal(0, C.dpl_max_pool3d(x, p, out, out + 1))
    assert.matches('at most half the kernel', capi.last_error())
    p[6], p[9] = 0, 2
    assert.are_not.equal(0, C.dpl_avg_pool3d(x, p, 1, 0, out))
    assert.matches('dilation must be 1', capi.last_error())
    p[9], p[0] = 1, 5
    assert.are_not.equal(0, C.dpl_max_pool3d(x, p, out, out + 1))
    assert.matches('output size 0 < 1', capi.last_error())
    p[0] = 2
    assert.are.equal(0, C.dpl_max_pool3d(x, p, out, out + 1))
    local v = dpl.tensor._wrap(out)
    local i = dpl.tensor._wrap(out + 1)
    local bad = dpl.full({ 1, 1, 2, 2, 2 }, 64, { dtype = 'int64' })
    assert.are_not.equal(0, C.dpl_max_pool3d_backward(v, x, bad, out))
    assert.matches('index 64 out of range for a 64%-element volume', capi.last_error())
    assert.are_not.equal(0, C.dpl_max_pool3d_backward(v, x, dpl.zeros(1, 1, 2, 2, 3, { dtype = 'int64' }), out))
    assert.matches('disagree in dim 5', capi.last_error())
    assert.are_not.equal(0, C.dpl_avg_pool3d_backward(dpl.zeros(1, 1, 2, 2, 3), x, p, 1, 0, out))
    assert.matches('grad_out must be', capi.last_error())
    assert.are_not.equal(0, C.dpl_avg_pool3d(x, p, 3, 0, out))
    assert.matches('count_include_pad must be 0 or 1', capi.last_error())
    assert.is_not_nil(i)
  end)
end)
