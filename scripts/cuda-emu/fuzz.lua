-- fuzz.lua: random CPU-vs-cuda:0 comparisons for the CUDA emulator (or a GPU):
-- random shapes (0 to 8 dims, empty and size-1 dims), views (transposed,
-- narrowed, broadcast), dtypes, special values (NaN, +-inf, -0, out-of-range
-- conversions) and parameters (conv2d/pooling strides, paddings, dilations,
-- groups; empty matmul dims; out-of-range indices into empty rows). Where the
-- CPU raises, cuda must raise too. Complements spec/support/cuda_check.lua's
-- fixed cases; each bug it found became one of those.
--   scripts/cuda-emu/run-ops.sh scripts/cuda-emu/fuzz.lua [N] [SEED]
-- prints "fuzz: R runs, F failures" (exit status 1 on a failure); DPL_FUZZ_VERBOSE=1 prints a
-- failing case's inputs and results.
package.path = './?.lua;' .. package.path
local dpl = require 'dpl'
local K = require 'spec.support.cuda_check'
local is_tensor = require('dpl.tensor').is_tensor
local T = dpl.tensor

local N, seed = tonumber(arg and arg[1] or (...)) or 100, tonumber(arg and arg[2] or select(2, ...)) or 1
dpl.C.dpl_proc_setenv('DPL_CUDA_POISON', '1')
math.randomseed(seed)
local R = math.random
local runs, fails = 0, 0

local function list(x) return is_tensor(x) and { x } or x end

-- f(...) on the CPU inputs and on their cuda:0 copies; f must not draw random numbers
local function both(name, f, ...)
  local ins, dins = { ... }, {}
  for i, v in ipairs(ins) do dins[i] = is_tensor(v) and v:to('cuda:0') or v end
  runs = runs + 1
  local okc, ref = pcall(f, unpack(ins))
  -- a bad index on cuda raises at the next call that waits for the GPU (docs/cuda.md)
  local okg, got = pcall(function() local r = f(unpack(dins)) dpl.cuda.synchronize('cuda:0') return r end)
  -- when an op raised before that synchronize, index checks of earlier ops may still be
  -- pending: they belong to this case, not to the next one
  if not okg then pcall(dpl.cuda.synchronize, 'cuda:0') end
  local why
  if not okc then
    if okg then why = 'the CPU raises, cuda does not: ' .. tostring(ref) end
  elseif not okg then
    why = tostring(got)
  else
    ref, got = list(ref), list(got)
    for k = 1, #ref do
      local ok, e = K.compare(ref[k], got[k])
      if not ok then why = ('output %d: %s'):format(k, e) break end
    end
  end
  if why then
    fails = fails + 1
    print(('FAIL %s: %s'):format(name, why))
    if os.getenv('DPL_FUZZ_VERBOSE') then -- the inputs, and both results when there are
      for i, v in ipairs(ins) do print('input ' .. i, v) end
      if okc and okg then for k = 1, #ref do print('cpu ' .. k, ref[k]) print('cuda ' .. k, got[k]) end end
    end
  end
end

local dtypes = { 'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'bool' }
local function sample(dt, shape)
  if #shape == 0 then return sample(dt, { 1 }):view() end
  if dt == 'bool' then return dpl.rand(unpack(shape)):gt(0.5) end
  if dt == 'uint8' then return dpl.randint(0, 256, shape, { dtype = 'uint8' }) end
  if dt == 'int32' or dt == 'int64' then return dpl.randint(-50, 50, shape, { dtype = dt }) end
  return (dpl.randn(unpack(shape)) * 3):to(dt)
end
local function view_of(x)
  local nd = x:dim()
  if nd >= 2 and R() < 0.5 then x = x:transpose(R(1, nd), R(1, nd)) end
  if nd >= 1 and R() < 0.3 then
    local d = R(1, nd)
    if x:size(d) > 2 then x = x:narrow(d, 2, x:size(d) - 2) end
  end
  return x
end
local specials = { 0 / 0, math.huge, -math.huge, 0, -0.0, 1e10, -300.7, 2 ^ 31, 2 ^ 63, 70000, 255.5, -1 }
local function with_specials(x, p)
  local v = x:view(x:numel())
  for k = 1, x:numel() do if R() < p then v[k] = specials[R(1, #specials)] end end
  return x
end

-- elementwise, reductions, copies on random shapes and views
local function fuzz_elementwise(it)
  local nd = R(0, 8)
  local shape = {}
  for i = 1, nd do shape[i] = R() < 0.15 and 1 or (R() < 0.05 and 0 or R(1, nd > 5 and 3 or 6)) end
  local dt = dtypes[R(1, #dtypes)]
  local x = view_of(sample(dt, shape))
  local bshape = {}
  for i = 1, x:dim() do bshape[i] = R() < 0.3 and 1 or x:size(i) end
  local y = sample(dt, bshape)
  local bop = ({ 'add', 'mul', 'maximum', 'minimum', 'eq', 'lt', 'logical_xor' })[R(1, 7)]
  local uop = ({ 'abs', 'relu', 'square', 'sign' })[R(1, 4)]
  local rop = ({ 'sum', 'prod', 'max', 'min', 'argmax', 'any' })[R(1, 6)]
  local d = x:dim() > 0 and R(1, x:dim()) or nil
  both(('elementwise %d %s %s/%s/%s'):format(it, dt, bop, uop, rop), function(a, b)
    local r = { a[bop](a, b), a[uop](a), a:contiguous():view(-1):clone() }
    if d and a:numel() > 0 and (dt ~= 'bool' or rop == 'any') and not (rop == 'prod' and dt:find('float1')) then
      r[#r + 1] = a[rop](a, d)
    end
    return r
  end, x, y)
end

-- conversions and binary ops with special values
local function fuzz_specials(it)
  local x = with_specials(dpl.randn(3, 7):double() * 5, 0.5)
  local y = with_specials(dpl.randn(3, 7):double() * 5, 0.3)
  local from, to = dtypes[R(1, #dtypes)], dtypes[R(1, #dtypes)]
  local op = ({ 'add', 'sub', 'mul', 'div', 'pow', 'maximum', 'remainder', 'atan2', 'ne', 'ge' })[R(1, 10)]
  local ok, xs, ys = pcall(function() return x:to(from), y:to(from) end)
  if not ok then return end
  both(('specials %d %s->%s %s'):format(it, from, to, op), function(a, b)
    return { a:to(to), a:t():to(to), a[op](a, b), a[op](a, b:narrow(1, 1, 1)), a[op](a, -2.5) }
  end, xs, ys)
  local z = with_specials(dpl.randn(R(1, 4), R(1, 6), R(1, 5)):double(), 0.1):to(R() < 0.5 and 'float32' or 'float64')
  local dim = R(1, 3)
  both(('reduce/softmax specials %d dim %d'):format(it, dim), function(a)
    local v, i = a:max(dim)
    return { a:sum(dim), a:prod(dim), v, i, a:argmin(dim), a:logsumexp(dim), a:var(dim), a:norm('inf', dim),
      a:softmax(dim), a:log_softmax(dim) }
  end, z)
end

-- matmul (empty dims), conv2d and pooling parameters, softmax dims
local function fuzz_shapes(it)
  local dt = R() < 0.5 and 'float32' or 'float64'
  local m, n, k = R(0, 12), R(0, 12), R(0, 12)
  both(('matmul %d %dx%dx%d %s'):format(it, m, n, k, dt), function(a, b, c)
    return { a:matmul(b:transpose(2, 3)), T.addmm(c, a[1], b[1]:t(), { beta = 0.5 }) }
  end, sample(dt, { R(1, 3), m, k }), sample(dt, { 1, n, k }), sample(dt, { m, n }))
  local g = R(1, 3)
  local C, O = g * R(1, 2), g * R(1, 2)
  local o = { stride = { R(1, 3), R(1, 3) }, padding = { R(0, 2), R(0, 2) }, dilation = { R(1, 2), R(1, 2) }, groups = g }
  local x, w, b = sample(dt, { R(1, 2), C, R(1, 8), R(1, 8) }), sample(dt, { O, C / g, R(1, 3), R(1, 3) }), sample(dt, { O })
  local oky, y = pcall(T.conv2d, x, w, b, o)
  if oky then
    both(('conv2d %d'):format(it), function(x_, w_, b_, gy)
      local gx, gw, gb = T.conv2d_backward(gy, x_, w_, o)
      return { T.conv2d(x_, w_, b_, o), gx, gw, gb }
    end, x, w, b, sample(dt, y:size()))
  end
  local ks, st, pd = R(1, 4), R(1, 3), R(0, 2)
  local cm = R() < 0.5
  local po = { stride = st, padding = pd, count_include_pad = R() < 0.5, ceil_mode = cm }
  local okp, v = pcall(T.max_pool2d, x, ks, { stride = st, padding = pd, ceil_mode = cm })
  if okp then
    both(('pool %d k%d s%d p%d%s'):format(it, ks, st, pd, cm and ' ceil' or ''), function(x_, gy)
      local v_, i_ = T.max_pool2d(x_, ks, { stride = st, padding = pd, ceil_mode = cm })
      return { v_, i_, T.max_pool2d_backward(gy, x_, i_), T.avg_pool2d(x_, ks, po), T.avg_pool2d_backward(gy, x_, ks, po) }
    end, x, sample(dt, v:size()))
  end
end

-- indexing, where/masked_fill, cat/stack, losses, embedding; indices may be out of range for empty dims
local function fuzz_index(it)
  local nd = R(1, 4)
  local shape = {}
  for i = 1, nd do shape[i] = R() < 0.1 and 0 or R(1, 5) end
  -- not float16/bfloat16: the CPU's index_add_/scatter_add_ round to them after every add, cuda adds in
  -- float32 and rounds once; with cancellation the two differ past any tolerance
  local dt = dtypes[({ 1, 2, 5, 6, 7, 8 })[R(1, 6)]]
  local x, d = sample(dt, shape), R(1, nd)
  local D, nidx = shape[d], R(0, 7)
  local idx = dpl.randint(1, math.max(D, 1) + 1, { nidx })
  local sshape, gshape, mshape = {}, {}, {}
  for i = 1, nd do
    sshape[i] = i == d and nidx or shape[i]
    gshape[i] = i == d and R(0, 4) or (shape[i] > 0 and R(1, shape[i]) or 0)
    mshape[i] = R() < 0.4 and 1 or shape[i]
  end
  local gidx = dpl.randint(1, math.max(D, 1) + 1, gshape)
  local sd = R(1, nd + 1)
  both(('index %d %s dim %d'):format(it, dt, d), function(a, i, s, gi, gs, m)
    local r = { a:index_select(d, i), a:clone():index_add_(d, i, s), a:gather(d, gi), a:clone():scatter_add_(d, gi, gs),
      dpl.where(m, a, a:clone()), a:masked_fill(m, 1), dpl.cat({ a, a }, d), dpl.stack({ a, a }, sd) }
    if dt ~= 'bool' then r[#r + 1] = a:clamp(-1, 2) end
    return r
  end, x, idx, sample(dt, sshape), gidx, sample(dt, gshape), dpl.rand(unpack(mshape)):gt(0.5))
  local n, c = R(0, 6), R(1, 6)
  local lo = { reduction = ({ 'mean', 'sum', 'none' })[R(1, 3)], ignore_index = R(1, c) }
  both(('losses %d N%d C%d'):format(it, n, c), function(l, t)
    return { T.cross_entropy(l, t, lo), T.nll_loss(l:log_softmax(2), t, lo) }
  end, dpl.randn(n, c), dpl.randint(1, c + 1, { n }))
  local V, E = R(1, 6), R(0, 5)
  local ei = dpl.randint(1, V + (R() < 0.2 and 3 or 1), { R(0, 3), R(1, 3) })
  both(('embedding %d V%d E%d'):format(it, V, E), function(w, i)
    return { T.embedding(w, i), T.embedding_backward(dpl.ones(i:size(1), i:size(2), E, { device = w.device }), i, V) }
  end, dpl.randn(V, E), ei)
end

for it = 1, N do
  fuzz_elementwise(it)
  fuzz_specials(it)
  fuzz_shapes(it)
  fuzz_index(it)
  collectgarbage()
end
print(('fuzz: %d runs, %d failures (N %d, seed %d)'):format(runs, fails, N, seed))
os.exit(fails == 0 and 0 or 1, true) -- closing the state: every tensor released (a sanitizer build reports no leaks)
