-- tensor_vmath_spec.lua: the vectorised float32 math kernels (src/tensor/dpl_tensor_vmath.c) through
-- the public ops: the error each op claims (ulps of the correctly rounded result, over dense sweeps of
-- float32 inputs, against the float64 ops, which stay on libm), special values (NaN, infinities,
-- overflow, underflow and subnormals, -0), and the same bits on every path (dpl.vmath: AVX-512, AVX2,
-- scalar), for every thread count, stride and split of the work. scripts/vmath_ulp.c measures the same
-- bounds over every float32 (docs/tensors.md lists them).
local ffi = require 'ffi'
local dpl = require 'dpl'
local raises = require('spec.support.helpers').raises

local INF, FLT_MAX = math.huge, 3.4028234663852886e38

-- float32 inputs: every 16411th bit pattern of all 2^32 (every exponent, both signs, NaNs and
-- infinities), a fine grid over [-12, 12], and the edges of the ops' ranges
local function sweep()
  local edges = { 0, -0.0, 1, -1, 0.5, -0.5, 2, -2, 1e-30, -1e-30, 2 ^ -126, -2 ^ -126, 2 ^ -149, -2 ^ -149,
    88.72, 88.73, 89, -87.3, -87.4, -103.9, -104, -110, 20, 20.5, -20, 5.58, -5.58, 5.6, -5.6, 3.95, -3.95,
    9, 9.2, -9.2, 30, -30, 1.5e6, 1.6e6, -1.6e6, 1e10, FLT_MAX, -FLT_MAX, INF, -INF, 0 / 0, 4096, 4097, 0.625,
    0.6249, 0.4142, 2.4142, 0.999999, -0.999999, 1.0000001, 127.9, 128, 128.1, -149, -150, -151 }
  local nbits, ngrid = 262144, 131072
  local n = nbits + ngrid + #edges
  local x = dpl.empty(n, { dtype = 'float32' })
  local pu, pf = ffi.cast('uint32_t *', x:data_ptr()), ffi.cast('float *', x:data_ptr())
  for i = 0, nbits - 1 do pu[i] = (i * 16411) % 4294967296 end
  for i = 0, ngrid - 1 do pf[nbits + i] = -12 + 24 * i / ngrid end
  for i, v in ipairs(edges) do pf[nbits + ngrid + i - 1] = v end
  return x
end
local X = sweep()
local NX = X:numel()

local function ulp(r) -- of the float32 binade holding r (r finite, a double)
  local a = math.abs(r)
  if a < 2 ^ -126 then return 2 ^ -149 end
  local _, e = math.frexp(a)
  return 2 ^ (e - 24)
end
-- largest error of y (float32) against r (float64, the same op in double): ulps of the rounded
-- result; `mixed`: ulps of max(|r|, 1) (gradients, which cross zero). Special results must match
-- exactly: NaN, infinities, the sign of a zero. Returns the error and the input where it is.
local function max_err(x, y, r, mixed)
  local rf = r:float() -- r rounded to float32 (in C: no cdata stores in this loop)
  assert(y:is_contiguous() and r:is_contiguous() and rf:is_contiguous())
  -- the values as doubles with their NaNs made canonical (dpl_tensor_read_f64): the sweep's NaN
  -- payloads (0xffffffff, ...) read straight from the floats through the FFI can come back as
  -- LuaJIT type tags ("attempt to perform arithmetic on ... (a number value)", now and then)
  local function canon(t)
    local n = t:numel()
    local buf = ffi.new('double[?]', n > 0 and n or 1)
    dpl.check(dpl.C.dpl_tensor_read_f64(t, buf, n))
    return buf
  end
  local px, py, pr, prf = canon(x), canon(y), canon(r), canon(rf)
  local worst, at = 0, 0 / 0
  for i = 0, y:numel() - 1 do
    local a, b = py[i], pr[i]
    local e
    if b ~= b then
      e = a ~= a and 0 or INF
    else
      local bf = prf[i]
      if bf == INF or bf == -INF then e = a == bf and 0 or INF
      elseif a ~= a or a == INF or a == -INF then e = INF
      elseif b == 0 then e = (a == 0 and 1 / a == 1 / b) and 0 or (a == 0 and INF or math.abs(a) / 2 ^ -149)
      else e = math.abs(a - b) / ulp(mixed and math.max(math.abs(b), 1) or b) end
    end
    if e > worst then worst, at = e, px[i] end
  end
  return worst, at
end

-- op name, the call, the bound claimed (ulps); gelu's bound holds from x = -5.5861 on (below -5.58614 it
-- returns -0: |gelu| < 1e-7 there), elsewhere over the whole float range (scripts/vmath_ulp.c over every
-- float32: gelu 5.43)
local OPS = {
  { 'exp', function(x) return x:exp() end, 1 },
  { 'expm1', function(x) return x:expm1() end, 1.5 },
  { 'exp2', function(x) return x:exp2() end, 1 },
  { 'log', function(x) return x:log() end, 1 },
  { 'log1p', function(x) return x:log1p() end, 1.5 },
  { 'log2', function(x) return x:log2() end, 2 },
  { 'log10', function(x) return x:log10() end, 2 },
  { 'sin', function(x) return x:sin() end, 1.5 },
  { 'cos', function(x) return x:cos() end, 1.5 },
  { 'tan', function(x) return x:tan() end, 3 },
  { 'asin', function(x) return x:asin() end, 2 },
  { 'acos', function(x) return x:acos() end, 1.5 },
  { 'atan', function(x) return x:atan() end, 2 },
  { 'sinh', function(x) return x:sinh() end, 2.5 },
  { 'cosh', function(x) return x:cosh() end, 2.5 },
  { 'tanh', function(x) return x:tanh() end, 1.5 },
  { 'asinh', function(x) return x:asinh() end, 2 },
  { 'acosh', function(x) return x:acosh() end, 2 },
  { 'atanh', function(x) return x:atanh() end, 2 },
  { 'erf', function(x) return x:erf() end, 2.5 },
  { 'sigmoid', function(x) return x:sigmoid() end, 3 },
  { 'silu', function(x) return dpl.nn.functional.silu(x) end, 3.5 },
  { 'gelu', function(x) return x:gelu() end, 5.5, -5.5861 },
  { 'softplus', function(x) return x:softplus() end, 2 },
  { 'softplus beta 2 threshold 5', function(x) return x:softplus(2, 5) end, 2 },
  { 'elu', function(x) return x:elu() end, 1 },
  { 'elu alpha 0.5', function(x) return x:elu(0.5) end, 1.5 },
  { 'mish', function(x) return x:mish() end, 4.5 },
}
-- gradients g f'(x) at g = 1 (mixed measure)
local G1 = dpl.ones(NX)
local GRADS = {
  { 'gelu backward', function(g, x) return dpl.activation_backward('gelu', g, x) end, 1.5 },
  { 'silu backward', function(g, x) return dpl.activation_backward('silu', g, x) end, 2 },
  { 'softplus backward', function(g, x) return dpl.act_backward('softplus', g, x, 1, 20) end, 1 },
  { 'elu backward', function(g, x) return dpl.act_backward('elu', g, x, 1) end, 1 },
  { 'mish backward', function(g, x) return dpl.act_backward('mish', g, x) end, 2 },
}

-- a and b (float32, same shape) hold the same bits, any NaN counting as NaN
local function same_bits(a, b)
  a, b = a:contiguous(), b:contiguous()
  if a:numel() ~= b:numel() then return false end
  local pa, pb = ffi.cast('uint32_t *', a:data_ptr()), ffi.cast('uint32_t *', b:data_ptr())
  local fa, fb = ffi.cast('float *', pa), ffi.cast('float *', pb)
  for i = 0, a:numel() - 1 do
    if pa[i] ~= pb[i] and not (fa[i] ~= fa[i] and fb[i] ~= fb[i]) then return false, i end
  end
  return true
end

local function inputs(lo)
  if not lo then return X end
  return X:masked_select(X:ge(lo)) -- (NaNs drop out here; the sweep without lo keeps them)
end

local INITIAL = dpl.vmath() -- (DPL_VMATH may have set it; the spec tests the kernels whatever it says)

describe('vectorised float32 math', function()
  before_each(function()
    if dpl.vmath('auto') == 'off' then dpl.vmath('scalar') end -- (a CPU without FMA: the scalar kernels)
  end)
  after_each(function() dpl.vmath(INITIAL) end)

  it('stays within the ulps each op claims over a dense sweep, against the float64 op', function()
    local report = {}
    for _, o in ipairs(OPS) do
      local x = inputs(o[4])
      local err, at = max_err(x, o[2](x), o[2](x:double()))
      report[#report + 1] = ('%s %.3f'):format(o[1], err)
      assert(err <= o[3], ('%s: %.3f ulps at x = %.9g (claimed: %g)'):format(o[1], err, at, o[3]))
    end
    for _, o in ipairs(GRADS) do
      local err, at = max_err(X, o[2](G1, X), o[2](G1:double(), X:double()), true)
      report[#report + 1] = ('%s %.3f'):format(o[1], err)
      assert(err <= o[3], ('%s: %.3f ulps at x = %.9g (claimed: %g)'):format(o[1], err, at, o[3]))
    end
    if os.getenv('DPL_VMATH_REPORT') then print('\n' .. table.concat(report, '\n')) end
  end)

  it('measures what it claims: an op off by an ulp fails the check', function()
    local y = X:exp()
    local py = ffi.cast('uint32_t *', y:data_ptr())
    local i = NX - 1000 -- a grid point (finite, normal)
    py[i] = py[i] + 2
    local err = max_err(X, y, X:double():exp())
    assert(err > 1, 'two ulps off must measure above 1 ulp, got ' .. err)
    assert.are.equal(INF, (max_err(dpl.tensor({ 1 }, { dtype = 'float32' }), dpl.tensor({ 0 / 0 }, { dtype = 'float32' }),
      dpl.tensor({ 1 }, { dtype = 'float64' }))))
    assert.are.equal(INF, (max_err(dpl.tensor({ 1 }, { dtype = 'float32' }), dpl.tensor({ 0.0 }, { dtype = 'float32' }),
      dpl.tensor({ -0.0 }, { dtype = 'float64' }))))
  end)

  it('gives the special values of libm: NaN, infinities, overflow, underflow, subnormals, -0', function()
    local cases = {
      { 'exp', { 0 / 0, INF, -INF, 88.73, 89, 1e30, -103, -104, -110, -1e30, -0.0, -87.5 } },
      { 'expm1', { 0 / 0, INF, -INF, 88.73, -30, -1e30, -0.0, 1e-30, -1e-30, 2 ^ -149 } },
      { 'exp2', { 0 / 0, INF, -INF, 128, 127.99, -149, -150, -126.5, -0.0 } },
      { 'log', { 0 / 0, INF, -INF, 0, -0.0, -1, 2 ^ -149, 2 ^ -130, FLT_MAX, 1 } },
      { 'log1p', { 0 / 0, INF, -INF, -1, -2, -0.0, 1e-30, -1e-30, FLT_MAX, 2 ^ -149 } },
      { 'log2', { 0 / 0, INF, 0, -1, 2 ^ -149, 2 ^ -140, 8, 0.125 } },
      { 'log10', { 0 / 0, INF, 0, -1, 2 ^ -149, 1000, 1e-30 } },
      { 'sin', { 0 / 0, INF, -INF, -0.0, 1e-30, 1.5e6, 3e6, 1e30, -FLT_MAX } },
      { 'cos', { 0 / 0, INF, -INF, -0.0, 3e6, 1e30, FLT_MAX } },
      { 'tan', { 0 / 0, INF, -0.0, 3e6, 1e30, 1.5707964 } },
      { 'asin', { 0 / 0, 1, -1, 1.0000001, -2, INF, -0.0 } },
      { 'acos', { 0 / 0, 1, -1, 1.0000001, -2, -0.0 } },
      { 'atan', { 0 / 0, INF, -INF, -0.0, FLT_MAX, 1e-30 } },
      { 'sinh', { 0 / 0, INF, -INF, -0.0, 89.4, 89.5, -89.5, 1e-30 } },
      { 'cosh', { 0 / 0, INF, -INF, -0.0, 89.4, 89.5, -89.5 } },
      { 'tanh', { 0 / 0, INF, -INF, -0.0, 9.1, -20, 1e-30 } },
      { 'asinh', { 0 / 0, INF, -INF, -0.0, FLT_MAX, -FLT_MAX, 1e-30 } },
      { 'acosh', { 0 / 0, INF, 1, 0.5, -INF, FLT_MAX } },
      { 'atanh', { 0 / 0, 1, -1, 1.0000001, -2, -0.0, 1e-30 } },
      { 'erf', { 0 / 0, INF, -INF, -0.0, 3.95, 4, -4, 1e-30, 2 ^ -149 } },
      { 'sigmoid', { 0 / 0, INF, -INF, -88.8, -100, -104, -110, 89, -0.0 } },
      { 'silu', { 0 / 0, INF, -INF, -88.8, -100, -110, -0.0 } },
      { 'gelu', { 0 / 0, INF, -INF, -0.0, 0, 5.6, -5.5, 1e-30, -1e-30, 2 ^ -149, -2 ^ -149, 2 ^ -126, -2 ^ -126,
        5.58614397, 5.58614349, -5.58614349, 1e30, FLT_MAX } },
      { 'softplus', { 0 / 0, INF, -INF, -100, -110, 20, 20.001, -0.0 } },
      { 'elu', { 0 / 0, INF, -INF, -0.0, -1e-30, -30 } },
      { 'mish', { 0 / 0, INF, -INF, -0.0, -100, -110, 20, 21 } },
    }
    local byname = {}
    for _, o in ipairs(OPS) do byname[o[1]] = o end
    for _, c in ipairs(cases) do
      local o = byname[c[1]]
      local x = dpl.tensor(c[2], { dtype = 'float32' })
      local err, at = max_err(x, o[2](x), o[2](x:double()))
      assert(err <= o[3], ('%s(%.9g): %.3f ulps off the float64 result (claimed: %g)'):format(c[1], at, err, o[3]))
    end
    -- documented choices where the float64 formula gives something else
    local g = dpl.tensor({ -5.587, -5.6, -30, -FLT_MAX }, { dtype = 'float32' }):gelu():totable()
    for _, v in ipairs(g) do assert(v == 0 and 1 / v < 0, 'gelu below -5.586 is -0, got ' .. v) end
  end)

  it('gelu: a dense sweep of [-5.586, 6] within its bound against erfc in float64, -0 below', function()
    -- every 1021st bit pattern of the positive floats up to 6 and of the negative ones down to -5.5861
    -- (subnormals, every binade of the centre, where most activations lie, and the negative tail, where
    -- the result is tiny and its relative error counts), and every 7th of [0.5, 2] and [-2, -0.5]
    local function band(lo_bits, hi_bits, step, sign)
      local n = math.floor((hi_bits - lo_bits) / step) + 1
      local x = dpl.empty(n, { dtype = 'float32' })
      local pu = ffi.cast('uint32_t *', x:data_ptr())
      for i = 0, n - 1 do pu[i] = lo_bits + step * i + sign end
      return x
    end
    local SIGN = 2147483648
    local bands = { band(0, 0x40C00000, 1021, 0), band(0, 0x40B2C155, 1021, SIGN), -- [0, 6], [-5.5861, -0]
      band(0x3F000000, 0x40000000, 7, 0), band(0x3F000000, 0x40000000, 7, SIGN) } -- [0.5, 2], [-2, -0.5]
    for _, x in ipairs(bands) do
      local err, at = max_err(x, x:gelu(), x:double():gelu())
      assert(err <= 5.5, ('gelu: %.3f ulps at x = %.9g'):format(err, at))
    end
    -- beyond the threshold: x itself above it, -0 below it (|gelu| < 1e-7 there)
    local far = dpl.tensor({ 5.58614397, 5.6, 100, 1e30, FLT_MAX, INF }, { dtype = 'float32' })
    assert.are.same(far:totable(), far:gelu():totable())
    local nfar = dpl.tensor({ -5.58614397, -5.6, -100, -1e30, -FLT_MAX }, { dtype = 'float32' }):gelu():totable()
    for _, v in ipairs(nfar) do assert(v == 0 and 1 / v < 0, 'gelu below -5.58614 is -0, got ' .. v) end
    local s = dpl.tensor({ 0 / 0, -INF, -0.0, 0.0 }, { dtype = 'float32' }):gelu():totable()
    assert(s[1] ~= s[1] and s[2] ~= s[2], 'gelu(NaN) and gelu(-inf) are NaN (x * 0 as the formula)')
    assert(s[3] == 0 and 1 / s[3] < 0 and s[4] == 0 and 1 / s[4] > 0, 'gelu keeps the sign of a zero')
  end)

  it('gives the same bits on every path (AVX-512, AVX2, scalar), ops and gradients alike', function()
    local function results()
      local r = {}
      for _, o in ipairs(OPS) do r[#r + 1] = o[2](X) end
      for _, o in ipairs(GRADS) do r[#r + 1] = o[2](G1, X) end
      return r
    end
    local best = dpl.vmath() -- the reference: the best path this CPU runs
    local want = results()
    local tried = {}
    for _, path in ipairs({ 'scalar', 'avx2', 'avx512' }) do
      if dpl.vmath(path) == path then -- (a path this CPU lacks falls back to the best)
        tried[#tried + 1] = path
        local got = results()
        for k = 1, #want do
          local ok, i = same_bits(got[k], want[k])
          if not ok then
            error(('%s path, result %d: x = %.9g gives %.9g, %s gives %.9g'):format(path, k, X[i + 1]:item(),
              got[k][i + 1]:item(), best, want[k][i + 1]:item()))
          end
        end
      end
    end
    assert.are.equal('scalar', tried[1], 'the scalar path runs everywhere')
    if best ~= 'scalar' then
      assert.is_true(#tried >= 2, 'expected the scalar path and ' .. best .. ', tried ' .. table.concat(tried, ', '))
    end
  end)

  it('gives the same bits for any thread count, stride, tail length or split of the work', function()
    local n = 300007 -- several threads' worth, an odd tail
    local x = dpl.randn(n) * 6
    local old = dpl.get_num_threads()
    dpl.set_num_threads(1)
    local one = { x:exp(), x:tanh(), x:gelu(), x:mish(), dpl.activation_backward('silu', dpl.ones(n), x) }
    dpl.set_num_threads(4)
    local four = { x:exp(), x:tanh(), x:gelu(), x:mish(), dpl.activation_backward('silu', dpl.ones(n), x) }
    dpl.set_num_threads(old)
    for k = 1, #one do assert.is_true(same_bits(one[k], four[k]), 'threads, result ' .. k) end
    -- strided and sliced inputs: every element as in the contiguous run
    local wide = dpl.randn(2, n) * 6
    local col = wide:t() -- [n, 2], stride 2 along the run
    assert.is_true(same_bits(col:tanh(), col:contiguous():tanh()), 'strided tanh')
    assert.is_true(same_bits(col:erf(), col:contiguous():erf()), 'strided erf')
    local full = x:log1p()
    for _, off in ipairs({ 1, 2, 5, 15, 16, 17, 31 }) do
      local part = x:narrow(1, off + 1, n - off - 3):log1p()
      assert.is_true(same_bits(part, full:narrow(1, off + 1, n - off - 3)), 'slice at ' .. off)
    end
    -- in place
    local y = x:clone()
    y:sigmoid_()
    assert.is_true(same_bits(y, x:sigmoid()), 'sigmoid_')
  end)

  it('dpl.vmath names, sets and restores the path; off goes back to libm per element', function()
    local best = dpl.vmath('auto')
    assert.is_true(best == 'avx512' or best == 'avx2' or best == 'scalar' or best == 'off', best)
    assert.are.equal(best, dpl.vmath())
    assert.are.equal('scalar', dpl.vmath('scalar'))
    assert.are.equal('scalar', dpl.vmath())
    assert.are.equal('off', dpl.vmath('off'))
    local x = dpl.tensor({ 0.5, -3, 100 }, { dtype = 'float32' })
    local err = max_err(x, x:exp(), x:double():exp())
    assert(err <= 1, 'libm exp')
    assert.are.equal(best, dpl.vmath('auto'))
    raises(function() dpl.vmath('sse9') end, "vmath: unknown path 'sse9' (expected auto, avx512, avx2, scalar or off)")
    raises(function() dpl.vmath(3) end, 'vmath: expected a path name (string), got number')
    assert.are.equal(best, dpl.vmath())
  end)
end)
