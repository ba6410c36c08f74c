-- tensor_conv_winograd_spec.lua: conv2d's float32 Winograd F(2x2, 3x3) path
-- (src/tensor/dpl_tensor_winograd.c) against the im2col path and a float64 reference:
-- the shapes that take it (padding 0/1/2 and uneven, odd sizes, groups, batch 1, rows of
-- more than 16 tiles, batches of many chunks, no bias, strided input) and the ones that do
-- not (stride 2, dilation, 5x5, few channels, float64), the same bits for 1 and 2 threads,
-- small maps whose tile rows share a vector (2x2, 4x4, odd tile rows, one tile row), and
-- dpl_conv2d_algo.
local dpl = require 'dpl'
local C = dpl.C

local function has_avx512()
  local f = io.open('/proc/cpuinfo')
  if not f then return false end
  local s = f:read('*a')
  f:close()
  return s:match('avx512f') ~= nil
end
local avx512 = has_avx512()

local function maxabs(t) return t:double():abs():max():item() end
local function conv_with(algo, x, w, b, opts)
  local prev = C.dpl_conv2d_algo(algo)
  local ok, y = pcall(dpl.conv2d, x, w, b, opts)
  C.dpl_conv2d_algo(prev)
  assert(ok, y)
  return y
end

-- one case: Winograd (auto) and im2col results, each within float32 rounding of the
-- float64 result; on AVX-512 CPUs the two differ in the bits exactly when the shape takes
-- the Winograd path
local function check(N, Cin, H, W, O, opts, takes, noncontig, nobias)
  opts = opts or {}
  local g = opts.groups or 1
  local kh, kw = opts.kh or 3, opts.kw or 3
  local x = dpl.randn(N, Cin, H, W)
  if noncontig then x = x:transpose(3, 4):contiguous():transpose(3, 4) end
  local w, b = dpl.randn(O, Cin / g, kh, kw), (not nobias) and dpl.randn(O) or nil
  local o = { padding = opts.padding, stride = opts.stride, dilation = opts.dilation, groups = opts.groups }
  local ref = dpl.conv2d(x:double(), w:double(), b and b:double(), o)
  local auto = conv_with(C.DPL_CONV_AUTO, x, w, b, o)
  local im2col = conv_with(C.DPL_CONV_IM2COL, x, w, b, o)
  assert.are.same(ref:size(), auto:size())
  assert.are.equal('float32', auto.dtype)
  local what = ('N=%d C=%d %dx%d O=%d'):format(N, Cin, H, W, O)
  local scale = maxabs(ref)
  local tol = 2e-6 * scale + 1e-6
  local e_auto, e_im2col = maxabs(auto:double() - ref), maxabs(im2col:double() - ref)
  assert(e_auto <= tol, ('%s: Winograd error %g > %g'):format(what, e_auto, tol))
  assert(e_im2col <= tol, ('%s: im2col error %g > %g'):format(what, e_im2col, tol))
  if avx512 then
    local differ = maxabs(auto - im2col) > 0
    assert(differ == takes, ('%s: expected the %s path'):format(what, takes and 'Winograd' or 'im2col'))
  end
  return x, w, b, o, auto
end

-- conv2d_backward with the algorithm set to algo (needs: which gradients, all by default)
local function bwd_with(algo, gy, x, w, opts, needs)
  local prev = C.dpl_conv2d_algo(algo)
  local ok, gx, gw, gb = pcall(dpl.conv2d_backward, gy, x, w, opts, needs)
  C.dpl_conv2d_algo(prev)
  assert(ok, gx)
  return gx, gw, gb
end

-- one backward case: grad_input, grad_weight and grad_bias of the auto path and of im2col,
-- each within float32 rounding of the float64 result; on AVX-512 CPUs grad_input and
-- grad_weight differ from im2col's bits exactly when the shape takes the Winograd path.
-- noncontig: grad_out strided (transposed in memory). Returns the three auto gradients.
local function check_bwd(N, Cin, H, W, O, opts, takes, noncontig)
  opts = opts or {}
  local g = opts.groups or 1
  local kh, kw = opts.kh or 3, opts.kw or 3
  local o = { padding = opts.padding, stride = opts.stride, dilation = opts.dilation, groups = opts.groups }
  local x, w = dpl.randn(N, Cin, H, W), dpl.randn(O, Cin / g, kh, kw)
  local y = dpl.conv2d(x, w, nil, o)
  local gy = dpl.randn(y:size())
  if noncontig then gy = gy:transpose(3, 4):contiguous():transpose(3, 4) end
  local r = { dpl.conv2d_backward(gy:double(), x:double(), w:double(), o) }
  local a = { bwd_with(C.DPL_CONV_AUTO, gy, x, w, o) }
  local i = { bwd_with(C.DPL_CONV_IM2COL, gy, x, w, o) }
  local what = ('bwd N=%d C=%d %dx%d O=%d'):format(N, Cin, H, W, O)
  for k, name in ipairs({ 'grad_input', 'grad_weight', 'grad_bias' }) do
    assert.are.same(r[k]:size(), a[k]:size())
    assert.are.equal('float32', a[k].dtype)
    -- the sums run over N*OH*OW (grad_weight, grad_bias) or O*9 terms: a bound that grows with them
    local terms = k == 1 and O / g * kh * kw or N * y:size(3) * y:size(4)
    local tol = 1e-6 * math.sqrt(terms) * maxabs(r[k]) + 1e-5
    local ea, ei = maxabs(a[k]:double() - r[k]), maxabs(i[k]:double() - r[k])
    assert(ea <= tol, ('%s: %s error %g > %g (auto)'):format(what, name, ea, tol))
    assert(ei <= tol, ('%s: %s error %g > %g (im2col)'):format(what, name, ei, tol))
    local tk = takes
    if type(takes) == 'table' then tk = takes[k] end -- per gradient; 'any': not checked
    if avx512 and k < 3 and tk ~= 'any' then
      local differ = maxabs(a[k] - i[k]) > 0
      assert(differ == tk, ('%s: expected the %s path for %s'):format(what, tk and 'Winograd' or 'im2col', name))
    end
  end
  return gy, x, w, o, a
end

describe('conv2d float32 Winograd path', function()
  it('matches the float64 result on the shapes that take it', function()
    dpl.manual_seed(1)
    check(64, 32, 14, 14, 64, { padding = 1 }, true) -- the CNN's second conv: many chunks
    check(1, 8, 5, 5, 32, { padding = 1 }, true)     -- batch 1, odd size (a half tile at the edges)
    check(3, 16, 7, 6, 16, { padding = 0 }, true)    -- no padding, odd height
    check(2, 16, 9, 11, 24, { padding = 2 }, true)   -- wide padding, O not a multiple of 8
    check(2, 12, 8, 13, 24, { padding = { 0, 1 } }, true)
    check(2, 8, 6, 40, 32, { padding = 1 }, true)    -- 20 tiles a row: more than one vector
    check(2, 32, 10, 10, 32, { padding = 1, groups = 2 }, true)
    check(2, 16, 5, 5, 16, { padding = 1 }, true, false, true) -- no bias
    check(2, 16, 9, 7, 16, { padding = 1 }, true, true)        -- strided input
    check(1, 16, 3, 3, 16, { padding = 0 }, true)    -- a 1x1 output
  end)

  it('leaves the other shapes to im2col', function()
    dpl.manual_seed(2)
    check(64, 1, 28, 28, 32, { padding = 1 }, false)                 -- the CNN's first conv: one channel
    check(2, 16, 9, 9, 16, { padding = 1, stride = 2 }, false)
    check(2, 16, 9, 9, 16, { padding = 2, dilation = 2 }, false)
    check(2, 16, 9, 9, 16, { padding = 2, kh = 5, kw = 5 }, false)
    check(2, 4, 9, 9, 64, { padding = 1 }, false)                    -- 4 input channels
    check(2, 16, 9, 9, 16, { padding = 1, groups = 4 }, false)       -- 4 per group
    -- float64 keeps the exact path whatever the algorithm
    local x, w, b = dpl.randn(2, 16, 6, 6):double(), dpl.randn(16, 16, 3, 3):double(), dpl.randn(16):double()
    local a = conv_with(C.DPL_CONV_AUTO, x, w, b, { padding = 1 })
    local i = conv_with(C.DPL_CONV_IM2COL, x, w, b, { padding = 1 })
    assert.are.equal(0, maxabs(a - i))
  end)

  it('gives the same bits for 1 and 2 threads', function()
    dpl.manual_seed(3)
    local x, w, b = dpl.randn(16, 32, 14, 14), dpl.randn(64, 32, 3, 3), dpl.randn(64)
    local prev = dpl.get_num_threads and dpl.get_num_threads() or 1
    dpl.set_num_threads(1)
    local y1 = conv_with(C.DPL_CONV_AUTO, x, w, b, { padding = 1 })
    dpl.set_num_threads(2)
    local y2 = conv_with(C.DPL_CONV_AUTO, x, w, b, { padding = 1 })
    dpl.set_num_threads(prev)
    assert.are.equal(0, maxabs(y1 - y2))
  end)

  it('backward matches the float64 result on the shapes that take it', function()
    dpl.manual_seed(4)
    check_bwd(64, 32, 14, 14, 64, { padding = 1 }, true) -- the CNN's second conv
    check_bwd(1, 8, 5, 5, 32, { padding = 1 }, true)     -- batch 1, odd size
    check_bwd(3, 16, 7, 6, 16, { padding = 0 }, true)    -- no padding (grad_input padding 2)
    check_bwd(2, 16, 9, 11, 24, { padding = 2 }, true)   -- grad_input padding 0
    check_bwd(2, 16, 6, 7, 16, { padding = 3 }, true)    -- grad_input padding -1
    check_bwd(2, 12, 8, 13, 24, { padding = { 0, 1 } }, true)
    check_bwd(2, 8, 6, 40, 32, { padding = 1 }, true)    -- rows of more than 16 tiles
    check_bwd(2, 32, 10, 10, 32, { padding = 1, groups = 2 }, true)
    check_bwd(2, 16, 9, 7, 16, { padding = 1 }, true, true) -- strided grad_out
    check_bwd(1, 16, 3, 3, 16, { padding = 0 }, true)    -- a 1x1 output
    check_bwd(5, 40, 9, 9, 48, { padding = 1 }, true)    -- channels past one 32-wide panel
    -- one gradient at a time
    local gy, x, w, o, a = check_bwd(3, 16, 8, 8, 16, { padding = 1 }, true)
    local gx = bwd_with(C.DPL_CONV_AUTO, gy, x, w, o, { x = true })
    local _, gw = bwd_with(C.DPL_CONV_AUTO, gy, x, w, o, { w = true })
    local _, _, gb = bwd_with(C.DPL_CONV_AUTO, gy, x, w, o, { b = true })
    assert.are.equal(0, maxabs(gx - a[1]))
    assert.are.equal(0, maxabs(gw - a[2]))
    assert.are.equal(0, maxabs(gb - a[3]))
  end)

  it('backward leaves the other shapes to im2col', function()
    dpl.manual_seed(5)
    check_bwd(64, 1, 28, 28, 32, { padding = 1 }, false) -- the CNN's first conv
    check_bwd(2, 16, 9, 9, 16, { padding = 1, stride = 2 }, false)
    check_bwd(2, 16, 9, 9, 16, { padding = 2, dilation = 2 }, false)
    check_bwd(2, 16, 9, 9, 16, { padding = 2, kh = 5, kw = 5 }, false)
    check_bwd(2, 4, 9, 9, 64, { padding = 1 }, false)
    check_bwd(2, 16, 9, 9, 16, { padding = 1, groups = 4 }, false)
    local x, w = dpl.randn(2, 16, 6, 6):double(), dpl.randn(16, 16, 3, 3):double()
    local gy = dpl.randn(2, 16, 6, 6):double()
    local a = { bwd_with(C.DPL_CONV_AUTO, gy, x, w, { padding = 1 }) }
    local i = { bwd_with(C.DPL_CONV_IM2COL, gy, x, w, { padding = 1 }) }
    for k = 1, 3 do assert.are.equal(0, maxabs(a[k] - i[k])) end
  end)

  it('backward gives the same bits for 1 and 2 threads', function()
    dpl.manual_seed(6)
    local x, w, gy = dpl.randn(16, 32, 14, 14), dpl.randn(64, 32, 3, 3), dpl.randn(16, 64, 14, 14)
    local prev = dpl.get_num_threads and dpl.get_num_threads() or 1
    dpl.set_num_threads(1)
    local r1 = { bwd_with(C.DPL_CONV_AUTO, gy, x, w, { padding = 1 }) }
    dpl.set_num_threads(2)
    local r2 = { bwd_with(C.DPL_CONV_AUTO, gy, x, w, { padding = 1 }) }
    dpl.set_num_threads(prev)
    for k = 1, 3 do assert.are.equal(0, maxabs(r1[k] - r2[k])) end
  end)

  -- the transforms take 16 tiles a vector whatever tile rows (and samples) they come from:
  -- maps with few tiles a row put several rows, and several samples, in one vector
  it('packs several tile rows (and samples) into one vector: forward and backward', function()
    dpl.manual_seed(7)
    local cases = {
      { 4, 16, 5, 5, 16, { padding = 1 } },          -- 3x3 tiles: an odd number of tile rows, pieces across samples
      { 5, 16, 2, 2, 16, { padding = 1 } },          -- 2x2 maps: one tile a sample
      { 3, 16, 4, 4, 24, { padding = 1 } },          -- 4x4 maps: 2x2 tiles
      { 1, 16, 4, 4, 16, { padding = 0 } },          -- batch 1, one 2x2 output tile
      { 2, 16, 3, 20, 16, { padding = 0 } },         -- one tile row of 9 tiles (a 1-row output)
      { 3, 16, 2, 9, 16, { padding = 1 } },          -- one tile row, odd width
      { 2, 16, 7, 7, 16, { padding = 3 } },          -- padding 3: 11x11 outputs, 6 tiles a row
      { 2, 16, 6, 5, 16, { padding = { 2, 0 } } },   -- uneven padding, a 1-column-wide last tile
      { 2, 16, 9, 3, 16, { padding = { 1, 2 } } },   -- 3 tiles a row, odd height
      { 2, 16, 5, 36, 16, { padding = 1 } },         -- 18 tiles a row: pieces across the rows' ends
      { 3, 32, 5, 5, 32, { padding = 1, groups = 2 } },
      { 3, 16, 1, 1, 16, { padding = 1 }, { true, 'any' } }, -- 1x1 maps and outputs (grad_weight's bits
                                                              -- may equal im2col's: one term a weight)
      { 40, 32, 5, 5, 32, { padding = 1 } },         -- several chunks starting inside a sample
    }
    for _, c in ipairs(cases) do
      check(c[1], c[2], c[3], c[4], c[5], c[6], true)
      check_bwd(c[1], c[2], c[3], c[4], c[5], c[6], c[7] or true)
    end
    local x, w, gy = dpl.randn(40, 32, 5, 5), dpl.randn(32, 32, 3, 3), dpl.randn(40, 32, 5, 5)
    local prev = dpl.get_num_threads and dpl.get_num_threads() or 1
    dpl.set_num_threads(1)
    local y1, r1 = conv_with(C.DPL_CONV_AUTO, x, w, nil, { padding = 1 }), { bwd_with(C.DPL_CONV_AUTO, gy, x, w, { padding = 1 }) }
    dpl.set_num_threads(2)
    local y2, r2 = conv_with(C.DPL_CONV_AUTO, x, w, nil, { padding = 1 }), { bwd_with(C.DPL_CONV_AUTO, gy, x, w, { padding = 1 }) }
    dpl.set_num_threads(prev)
    assert.are.equal(0, maxabs(y1 - y2))
    for k = 1, 3 do assert.are.equal(0, maxabs(r1[k] - r2[k])) end
  end)

  it('operands holding inf or NaN take im2col: the infinities stay infinities (as PyTorch)', function()
    dpl.manual_seed(4)
    local x, w = dpl.randn(2, 16, 6, 6), dpl.randn(16, 16, 3, 3)
    x[1][1][3][3] = math.huge
    local y = dpl.conv2d(x, w, nil, { padding = 1 })
    assert.are.equal(0, y:isnan():sum():item())
    assert.are.equal(144, y:isinf():sum():item())
    local gy = dpl.randn(2, 16, 6, 6)
    gy[1][2][2][2] = -math.huge
    local gx, gw = dpl.conv2d_backward(gy, dpl.randn(2, 16, 6, 6), w, { padding = 1 })
    assert.are.equal(0, gx:isnan():sum():item())
    assert.are.equal(0, gw:isnan():sum():item())
    assert.is_true(gx:isinf():sum():item() > 0)
  end)

  it('dpl_conv2d_algo sets and reads the algorithm', function()
    local prev = C.dpl_conv2d_algo(-1)
    assert.are.equal(prev, C.dpl_conv2d_algo(C.DPL_CONV_IM2COL))
    assert.are.equal(C.DPL_CONV_IM2COL, C.dpl_conv2d_algo(-1))
    assert.are.equal(C.DPL_CONV_IM2COL, C.dpl_conv2d_algo(7)) -- an unknown value only reads
    assert.are.equal(C.DPL_CONV_IM2COL, C.dpl_conv2d_algo(prev))
    assert.are.equal(prev, C.dpl_conv2d_algo(-1))
  end)
end)
