-- tensor_gemm_spec.lua: float32 products against the float64 product of the same values,
-- over the shapes that pick the GEMM's different paths (on AVX-512 CPUs: full 32-column
-- tiles, the 16-column tiles of narrow products and last panels, rows past a tile's 8, k
-- past one block of 512, A^T, B^T, alpha/beta, the 1-3 row path), and the same bits with 1
-- and 2 threads.
local dpl = require 'dpl'

-- The products, as a chunk run here and in a child dplhost whose own GEMM takes every product
-- from 32K multiply-adds up (DPL_SGEMM_OWN_MIN: on AMD's Zen 4 the small ones go to OpenBLAS by
-- default, which would leave the kernel's narrow paths unchecked there).
local PRODUCTS = [[
local dpl = ...
local function check(m, k, n, ta, tb)
  local a = ta and dpl.randn(k, m):t() or dpl.randn(m, k)
  local b = tb and dpl.randn(n, k):t() or dpl.randn(k, n)
  local r = a:matmul(b)
  local ref = a:double():matmul(b:double())
  assert(r:size(1) == m and r:size(2) == n, 'shape')
  local err = (r:double() - ref):abs():max():item()
  -- float32 accumulation over k terms of size ~1: error well under k * 2^-24 * |terms|
  local tol = 1e-5 * math.sqrt(k) * 4
  assert(err <= tol, ('matmul %dx%d%s @ %dx%d%s: max error %g over %g'):format(m, k, ta and '^T' or '', k, n,
    tb and '^T' or '', err, tol))
end
-- narrow and odd products (16-column tiles, partial tiles)
dpl.manual_seed(1)
for _, n in ipairs({ 1, 7, 8, 10, 15, 16, 17, 24, 31, 32, 33, 48, 49, 64 }) do
  for _, m in ipairs({ 4, 9, 64 }) do
    check(m, 128, n, false, false)
    check(m, 40, n, true, false)
    check(m, 40, n, false, true)
  end
end
-- small k, k past one block and the 1-3 row path
dpl.manual_seed(2)
for _, k in ipairs({ 1, 4, 9, 25, 513, 1100 }) do check(32, k, 100, false, false) end
for _, m in ipairs({ 1, 2, 3 }) do
  for _, n in ipairs({ 10, 16, 17, 100 }) do
    check(m, 256, n, false, false)
    check(m, 256, n, false, true)
  end
end
-- products over 2^20 multiply-adds with narrow sides
dpl.manual_seed(3)
check(64, 2048, 10, false, false)
check(64, 2048, 10, false, true)
check(10, 2048, 64, true, false)
print('products ok')
]]

describe('float32 matmul against float64', function()
  it('agrees for narrow, odd and small-k products, k past one block and the 1-3 row path', function()
    assert(load(PRODUCTS, '=products'))(dpl)
  end)

  it('agrees on every path of the own GEMM (DPL_SGEMM_OWN_MIN=32768, a child process)', function()
    local h = require 'spec.support.helpers'
    local out, err, rc = h.run_chunk("assert(load(" .. ('%q'):format(PRODUCTS)
      .. ", '=products'))(require 'dpl')", 'DPL_SGEMM_OWN_MIN=32768', { timeout = 120 })
    assert.are.equal(0, rc, out .. err)
    assert.matches('products ok', out)
  end)

  it('applies alpha and beta (addmm) on narrow outputs', function()
    dpl.manual_seed(3)
    local c, a, b = dpl.randn(64, 10), dpl.randn(64, 128), dpl.randn(128, 10)
    local r = dpl.addmm(c, a, b, { beta = 0.5, alpha = 2 })
    local ref = c:double() * 0.5 + a:double():matmul(b:double()) * 2
    assert.is_true((r:double() - ref):abs():max():item() < 1e-3)
  end)

  it('gives the same bits with 1 and 2 threads', function()
    local n0 = dpl.get_num_threads()
    dpl.manual_seed(4)
    local cases = { { 64, 784, 256 }, { 64, 128, 10 }, { 300, 600, 17 }, { 256, 512, 300 } }
    local one = {}
    dpl.set_num_threads(1)
    local ok, err = pcall(function()
      for i, s in ipairs(cases) do
        local a, b = dpl.randn(s[1], s[2]), dpl.randn(s[2], s[3])
        cases[i].a, cases[i].b = a, b
        one[i] = a:matmul(b)
      end
      dpl.set_num_threads(2)
      for i, s in ipairs(cases) do
        assert.is_true(s.a:matmul(s.b):equal(one[i]), ('%dx%dx%d differs between 1 and 2 threads'):format(s[1], s[2], s[3]))
      end
    end)
    dpl.set_num_threads(n0)
    assert(ok, err)
  end)
end)
