-- nn_dropout_fused_spec.lua: the fused dropout (dpl_dropout: one pass drawing bernoulli_'s
-- Philox decisions, a packed mask for backward) against the composed form it replaces,
-- x * empty_like(x):bernoulli_(1 - p):div_(1 - p): the same seed gives the same output, mask
-- and gradient bit for bit, whatever the thread count; the edge cases; argument checks.
local dpl = require 'dpl'
local T = require 'dpl.tensor'
local F = dpl.nn.functional
local bit = require 'bit'

local SEED = 20261201
local function composed(x, p)
  local m = dpl.no_grad(function() return T.empty_like(x):bernoulli_(1 - p):div_(1 - p) end)
  return x * m, m
end
local function with_threads(n, f)
  local prev = dpl.get_num_threads()
  dpl.set_num_threads(n)
  local ok, err = pcall(f)
  dpl.set_num_threads(prev)
  if not ok then error(err, 0) end
end
local function same(a, b, what)
  assert(a.dtype == b.dtype, what .. ': dtype')
  assert.are.same(a:size(), b:size(), what .. ': shape')
  assert(T.equal(a, b), what .. ': not identical')
end

describe('fused dropout', function()
  for _, threads in ipairs({ 1, 2 }) do
    it(('matches the composed form bit for bit: output, mask, gradient, RNG offset (%d thread(s))'):format(threads),
      function()
        with_threads(threads, function()
          for _, dt in ipairs({ 'float32', 'float64' }) do
            for _, shape in ipairs({ { 1 }, { 63 }, { 64 }, { 65 }, { 3, 5, 7 }, { 40000 } }) do
              for _, p in ipairs({ 0.1, 1 / 3, 0.5, 0.9, 1e-7 }) do
                local what = ('%s %s p=%g'):format(dt, table.concat(shape, 'x'), p)
                dpl.manual_seed(SEED)
                local x = dpl.randn(shape, { dtype = dt }):requires_grad_()
                local g = dpl.randn(shape, { dtype = dt })
                local st = dpl.get_rng_state()
                local ref, m = composed(x, p)
                local after = dpl.get_rng_state()
                ref:backward(g)
                local ref_gx = x.grad
                x.grad = nil
                dpl.set_rng_state(st)
                local y = F.dropout(x, p)
                assert.are.same(after, dpl.get_rng_state(), what .. ': RNG offset')
                same(y, ref, what .. ': output')
                y:backward(g)
                same(x.grad, ref_gx, what .. ': gradient')
                -- the mask itself: the packed bits, and its scale through a gradient of ones
                dpl.set_rng_state(st)
                local y2, packed = T.dropout(x:detach(), p, true)
                same(y2, ref, what .. ': T.dropout')
                same(T.dropout_backward(dpl.ones(shape, { dtype = dt }), packed, p), m, what .. ': mask')
                local bytes, flat = packed:totable(), m:reshape({ -1 }):totable()
                assert.are.equal(math.floor((#flat + 7) / 8), #bytes, what .. ': mask bytes')
                for i = 1, #flat do
                  local b = bit.band(bit.rshift(bytes[math.floor((i - 1) / 8) + 1], (i - 1) % 8), 1)
                  assert(b == (flat[i] ~= 0 and 1 or 0), what .. ': mask bit ' .. i)
                end
              end
            end
          end
        end)
      end)
  end

  it('gives the same numbers with 1 and 2 threads (several parallel chunks)', function()
    local res = {}
    for _, threads in ipairs({ 1, 2 }) do
      with_threads(threads, function()
        dpl.manual_seed(SEED)
        local x = dpl.randn({ 300001 }):requires_grad_()
        local y = F.dropout(x, 0.3)
        y:backward(dpl.ones({ 300001 }))
        res[threads] = { y, x.grad }
      end)
    end
    same(res[1][1], res[2][1], 'output')
    same(res[1][2], res[2][2], 'gradient')
  end)

  it('p = 0, p = 1 and eval as PyTorch: no draw, zeros (NaN stays NaN), the input itself', function()
    local x = dpl.tensor({ 1, -2, 0 / 0, 1 / 0 }):requires_grad_()
    local st = dpl.get_rng_state()
    assert.are.equal(x, F.dropout(x, 0))
    assert.are.equal(x, F.dropout(x, 0.5, false))
    local z = F.dropout(x, 1)
    assert.are.same(st, dpl.get_rng_state())
    local v = z:totable()
    assert.are.same({ 0, -0 }, { v[1], v[2] })
    assert.is_true(v[3] ~= v[3] and v[4] ~= v[4]) -- x * 0, as torch.dropout(p=1)
    z:sum():backward()
    assert.are.same({ 0, 0, 0, 0 }, x.grad:totable())
    -- empty input
    local e = F.dropout(dpl.zeros({ 0 }), 0.5)
    assert.are.same({ 0 }, e:size())
  end)

  it('other layouts and dtypes keep the composed form (same numbers)', function()
    for _, dt in ipairs({ 'float32', 'float16' }) do
      dpl.manual_seed(SEED)
      local x = dpl.randn({ 8, 9 }, { dtype = dt }):t() -- not contiguous
      local st = dpl.get_rng_state()
      local ref = composed(x, 0.4)
      dpl.set_rng_state(st)
      same(F.dropout(x, 0.4), ref, dt .. ' transposed')
    end
  end)

  it('a transposed float32/float64 input takes it through a contiguous copy: same output and gradient', function()
    for _, dt in ipairs({ 'float32', 'float64' }) do
      dpl.manual_seed(SEED)
      local base = dpl.randn({ 8, 9 }, { dtype = dt })
      local x1 = base:clone():t()
      x1.requires_grad = true
      local st = dpl.get_rng_state()
      local y1 = composed(x1, 0.4)
      y1:sum():backward()
      dpl.set_rng_state(st)
      local x2 = base:clone():t()
      x2.requires_grad = true
      local raw, used = T.dropout, 0
      T.dropout = function(...) used = used + 1 return raw(...) end
      local ok, y2 = pcall(F.dropout, x2, 0.4)
      T.dropout = raw
      assert(ok, y2)
      assert.are.equal(1, used, dt .. ': the fused kernel ran')
      y2:sum():backward()
      same(y2, y1, dt .. ' transposed output')
      same(x2.grad, x1.grad, dt .. ' transposed gradient')
    end
  end)

  it('nn.Dropout in training mode takes it, eval returns the input', function()
    local d = dpl.nn.Dropout(0.25)
    dpl.manual_seed(SEED)
    local x = dpl.randn({ 4, 33 })
    local st = dpl.get_rng_state()
    local ref = composed(x, 0.25)
    dpl.set_rng_state(st)
    same(d(x), ref, 'module')
    d:eval()
    assert.are.equal(x, d(x))
  end)

  it('validates its arguments', function()
    local x = dpl.randn({ 10 })
    local function fails(pat, f)
      local ok, e = pcall(f)
      assert.is_false(ok)
      assert(tostring(e):find(pat, 1, true), tostring(e))
    end
    fails('expected 0 <= p < 1, got 1', function() T.dropout(x, 1) end)
    fails('expected 0 <= p < 1, got -0.5', function() T.dropout(x, -0.5) end)
    fails('expected 0 <= p < 1, got ', function() T.dropout(x, 0 / 0) end)
    fails('p must be a number', function() T.dropout(x, 'a') end)
    fails('input must be a tensor', function() T.dropout(nil, 0.5) end)
    fails('expected input of dtype float32 or float64, got int64', function() T.dropout(dpl.arange(5), 0.5) end)
    fails('expected input of dtype float32 or float64, got float16', function()
      T.dropout(x:to('float16'), 0.5)
    end)
    fails('expected a contiguous input', function() T.dropout(dpl.randn({ 3, 4 }):t(), 0.5) end)
    local _, m = T.dropout(x, 0.5, true)
    assert.are.same({ 2 }, m:size())
    assert.are.equal('uint8', m.dtype)
    fails('expected mask to be a contiguous uint8 tensor of 3 bytes', function()
      T.dropout_backward(dpl.ones({ 20 }), m, 0.5)
    end)
    fails('expected mask to be a contiguous uint8 tensor of 2 bytes', function()
      T.dropout_backward(x, m:to('int32'), 0.5)
    end)
    fails('expected 0 <= p < 1, got 1', function() T.dropout_backward(x, m, 1) end)
    fails('mask must be a tensor', function() T.dropout_backward(x, nil, 0.5) end)
    fails('expected grad_output of dtype float32 or float64, got int64', function()
      T.dropout_backward(dpl.arange(10), m, 0.5)
    end)
    -- a non-contiguous gradient is fine (copied)
    local g = dpl.randn({ 5, 2 }):t()
    same(T.dropout_backward(g, m, 0.5):reshape({ -1 }), T.dropout_backward(g:contiguous(), m, 0.5):reshape({ -1 }),
      'strided grad')
    fails('dropout: probability has to be between 0 and 1, but got 2', function() F.dropout(x, 2) end)
  end)
end)
