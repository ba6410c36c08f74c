-- tensor_core_spec.lua: the tensor type itself: constructors, dtypes and
-- conversions, metadata, views sharing storage, copies, printing, lifetimes and
-- byte counters, simulated-GPU placement, and the error messages of bad input.
local dpl = require 'dpl'
local T = require 'dpl.tensor'

local function close(a, b, tol)
  tol = tol or 1e-6
  if type(a) == 'table' then
    assert.are.equal(#b, #a)
    for i = 1, #a do close(a[i], b[i], tol) end
    return
  end
  assert(math.abs(a - b) <= tol * (1 + math.abs(b)), ('expected %s, got %s'):format(tostring(b), tostring(a)))
end

local function err_of(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, 'expected an error')
  return tostring(e)
end

describe('tensor constructors', function()
  it('builds from nested tables, inferring int64, float32 and bool', function()
    local a = dpl.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    assert.are.same({ 2, 3 }, a:size())
    assert.are.same({ 2, 3 }, a.shape)
    assert.are.equal('int64', a.dtype)
    assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 } }, a:totable())
    assert.are.equal('float32', dpl.tensor({ 1.5, 2 }).dtype)
    assert.are.equal('bool', dpl.tensor({ true, false }).dtype)
    assert.are.equal('float32', dpl.tensor({}).dtype)
    assert.are.same({ 0 }, dpl.tensor({}).shape)
    assert.are.same({ true, false }, dpl.tensor({ true, false }):totable())
    local s = dpl.tensor(3.5)
    assert.are.equal(0, s:dim())
    assert.are.equal(3.5, s:item())
    assert.are.equal(1, s:numel())
  end)

  it('takes dtype and device options', function()
    local a = dpl.tensor({ 1, 2 }, { dtype = 'float64' })
    assert.are.equal('float64', a.dtype)
    assert.are.equal(dpl.float64, a.dtype)
    assert.are.equal('cpu', tostring(a.device))
    assert.are.equal('int32', dpl.zeros(2, { dtype = dpl.int32 }).dtype)
  end)

  it('makes zeros, ones, full, empty, eye, arange, linspace and *_like', function()
    assert.are.same({ { 0, 0 }, { 0, 0 } }, dpl.zeros(2, 2):totable())
    assert.are.same({ 1, 1, 1 }, dpl.ones({ 3 }):totable())
    assert.are.same({ { 7, 7 } }, dpl.full({ 1, 2 }, 7):totable())
    assert.are.same({ 2, 5 }, dpl.empty(2, 5):size())
    assert.are.same({ 5 }, dpl.zeros({ 5 }, {}).shape)
    assert.are.same({}, dpl.zeros({}).shape)
    assert.are.same({ { 1, 0, 0 }, { 0, 1, 0 } }, dpl.eye(2, 3):totable())
    assert.are.same({ 0, 1, 2, 3 }, dpl.arange(4):totable())
    assert.are.equal('int64', dpl.arange(4).dtype)
    assert.are.same({ 2, 4, 6 }, dpl.arange(2, 8, 2):totable())
    close(dpl.arange(0, 1, 0.25):totable(), { 0, 0.25, 0.5, 0.75 })
    assert.are.equal('float32', dpl.arange(0, 1, 0.25).dtype)
    close(dpl.linspace(0, 1, 5):totable(), { 0, 0.25, 0.5, 0.75, 1 })
    local x = dpl.ones(2, 3, { dtype = 'float64' })
    assert.are.same({ 2, 3 }, dpl.zeros_like(x).shape)
    assert.are.equal('float64', dpl.ones_like(x).dtype)
    assert.are.same({ { 5, 5, 5 }, { 5, 5, 5 } }, dpl.full_like(x, 5):totable())
  end)

  it('draws reproducible random numbers from a seed, whatever the thread count', function()
    dpl.manual_seed(42)
    local a = dpl.randn(1000)
    local u = dpl.rand(100000)
    dpl.set_num_threads(1)
    dpl.manual_seed(42)
    local b = dpl.randn(1000)
    local v = dpl.rand(100000)
    dpl.set_num_threads(2)
    assert.are.same(a:totable(), b:totable())
    assert.is_true((u:eq(v)):all():item())
    local m, s = a:mean():item(), a:std():item()
    assert.is_true(math.abs(m) < 0.1 and math.abs(s - 1) < 0.1, ('mean %g std %g'):format(m, s))
    assert.is_true(u:min():item() >= 0 and u:max():item() < 1)
    local r = dpl.randint(3, 7, { 1000 })
    assert.are.equal('int64', r.dtype)
    assert.are.equal(3, r:min():item())
    assert.are.equal(6, r:max():item())
    local mask = dpl.empty(10000):bernoulli_(0.25)
    assert.is_true(math.abs(mask:mean():item() - 0.25) < 0.03)
  end)

  it('gives the same bits whatever the thread count', function()
    local x = dpl.randn(300, 1000)
    local function run()
      return { x:sum():item(), x:sum(1):sum():item(), x:softmax(2)[7][9]:item(), (x * 2 + 1):relu():mean():item(),
        x:std():item() } -- (OpenBLAS itself may round differently with another thread count)
    end
    dpl.set_num_threads(1)
    local one = run()
    dpl.set_num_threads(2)
    local two = run()
    assert.are.same(one, two)
    assert.are.equal(2, dpl.get_num_threads())
    assert.matches('RuntimeError: set_num_threads: expected 1..256 threads, got 0', tostring(select(2, pcall(dpl.set_num_threads, 0))))
  end)

  it('runs back-to-back parallel loops of varying widths on more threads than cores', function()
    -- jobs of 2, 3 and 4 chunks interleaved (a worker left out of one job must not
    -- take part in the next by mistake), products split over threads, many times
    local sizes = { 70000, 100000, 140000, 300000 }
    local xs, ref = {}, {}
    dpl.set_num_threads(1)
    local w = dpl.randn(64, 64)
    for k, n in ipairs(sizes) do
      xs[k] = dpl.arange(n):float():div(n)
      ref[k] = { (xs[k] * 3 + 1):sum():item(), xs[k]:view(-1, 10):matmul(dpl.ones(10, 64)):sum():item() }
    end
    local wref = w:matmul(w):sum():item()
    local ok, err = pcall(function()
      dpl.set_num_threads(4)
      for i = 1, 400 do
        local k = (i * 7) % #sizes + 1
        local x = xs[k]
        assert.are.equal(ref[k][1], (x * 3 + 1):sum():item())
        if i % 10 == 0 then
          assert.are.equal(ref[k][2], x:view(-1, 10):matmul(dpl.ones(10, 64)):sum():item())
          assert.are.equal(wref, w:matmul(w):sum():item())
        end
      end
    end)
    dpl.set_num_threads(2)
    assert(ok, err)
  end)

  it('runs each chunk of a parallel loop exactly once when threads outnumber cores', function()
    -- in-place updates: a chunk run twice or skipped leaves its elements off the count.
    -- 8 threads on this machine's cores: workers keep losing their core, and the caller
    -- and the workers claim chunks from one another
    local ok, err = pcall(function()
      dpl.set_num_threads(8)
      local xs = {}
      for k, n in ipairs({ 40000, 90000, 250000, 1000003 }) do xs[k] = dpl.zeros(n) end
      local ys = { dpl.zeros(300000, { dtype = 'int32' }), dpl.zeros(300000, { dtype = 'float64' }) }
      for i = 1, 300 do
        for k = 1, #xs do xs[k]:add_(1) end
        ys[1]:add_(2)
        ys[2]:mul_(0.5):add_(i)
      end
      local expect = 0
      for i = 1, 300 do expect = expect * 0.5 + i end
      for k = 1, #xs do
        assert.are.equal(300, xs[k]:min():item(), 'loop ' .. k)
        assert.are.equal(300, xs[k]:max():item(), 'loop ' .. k)
      end
      assert.are.same({ 600, 600 }, { ys[1]:min():item(), ys[1]:max():item() })
      assert.are.same({ expect, expect }, { ys[2]:min():item(), ys[2]:max():item() })
    end)
    dpl.set_num_threads(2)
    assert(ok, err)
  end)

  it('converts between all dtypes', function()
    local x = dpl.tensor({ -2.5, 0, 1.25, 300 })
    assert.are.same({ -2, 0, 1, 300 }, x:long():totable())
    assert.are.same({ -2, 0, 1, 300 }, x:int():totable())
    assert.are.same({ true, false, true, true }, x:bool():totable())
    close(x:half():float():totable(), { -2.5, 0, 1.25, 300 })
    close(x:bfloat16():float():totable(), { -2.5, 0, 1.25, 300 })
    close(x:double():totable(), { -2.5, 0, 1.25, 300 })
    assert.are.same({ 254, 0, 1, 44 }, x:long():byte():totable()) -- wraps like a C cast
    assert.are.equal(x, x:to('float32'))                             -- no change: the same tensor
    assert.are.equal('float64', x:to(dpl.float64).dtype)
    assert.are.equal('float16', x:type('float16').dtype)
    close(dpl.tensor({ 1e-3, 65504, 1 / 3 }):half():double():totable(), { 1e-3, 65504, 1 / 3 }, 1e-3)
  end)
end)

describe('tensor views', function()
  it('share storage: writes through a view show in the base', function()
    local a = dpl.zeros(3, 4)
    local row = a[2]
    row:fill_(1)
    assert.are.same({ 0, 0, 0, 0 }, a[1]:totable())
    assert.are.same({ 1, 1, 1, 1 }, a[2]:totable())
    assert.is_true(a:is_set_to(row))
    local col = a:select(2, 3)
    col:fill_(5)
    assert.are.same({ 5, 5, 5 }, a:select(2, -2):totable())
    a[3] = 9
    assert.are.same({ 9, 9, 9, 9 }, a[3]:totable())
    a:narrow(1, 1, 1):copy_(dpl.tensor({ 1, 2, 3, 4 }))
    assert.are.same({ 1, 2, 3, 4 }, a[1]:totable())
    assert.are.equal(2, a[1][2]:item())
  end)

  it('views, reshapes, transposes, permutes, expands, squeezes', function()
    local a = dpl.arange(6)
    local v = a:view(2, 3)
    assert.are.same({ { 0, 1, 2 }, { 3, 4, 5 } }, v:totable())
    assert.are.same({ 3, 2 }, a:view(-1, 2).shape)
    local t = v:t()
    assert.are.same({ { 0, 3 }, { 1, 4 }, { 2, 5 } }, t:totable())
    assert.is_false(t:is_contiguous())
    assert.is_true(t:contiguous():is_contiguous())
    assert.is_true(v:is_set_to(t))
    assert.are.same({ 0, 3, 1, 4, 2, 5 }, t:reshape(6):totable())
    assert.is_false(t:reshape(6):is_set_to(t)) -- reshape copied
    assert.is_true(v:reshape(3, 2):is_set_to(v))
    local p = dpl.zeros(2, 3, 4):permute(3, 1, 2)
    assert.are.same({ 4, 2, 3 }, p.shape)
    assert.are.same({ 1, 12, 4 }, p:stride())
    local e = dpl.tensor({ { 1 }, { 2 } }):expand(2, 3)
    assert.are.same({ { 1, 1, 1 }, { 2, 2, 2 } }, e:totable())
    assert.are.same({ 1, 0 }, e:stride())
    assert.are.same({ 2 }, dpl.zeros(1, 2, 1):squeeze().shape)
    assert.are.same({ 2, 1 }, dpl.zeros(1, 2, 1):squeeze(1).shape)
    assert.are.same({ 2, 1, 3 }, dpl.zeros(2, 3):unsqueeze(2).shape)
    assert.are.same({ 2, 3, 1 }, dpl.zeros(2, 3):unsqueeze(-1).shape)
    assert.are.same({ 2, 12 }, dpl.zeros(2, 3, 4):flatten(2).shape)
    assert.are.same({ 1, 2 }, dpl.arange(5):narrow(1, 2, 2):totable())
    assert.are.equal(1, dpl.arange(5):narrow(1, 2, 2):storage_offset())
  end)

  it('refuses a view that the strides cannot express, naming reshape', function()
    local t = dpl.zeros(2, 3):t()
    local e = err_of(function() return t:view(6) end)
    assert.matches('view: cannot view a non%-contiguous tensor of shape %[3, 2%] as %[6%]', e)
    assert.matches('reshape', e)
  end)

  it('clones and copies across dtypes with broadcasting', function()
    local a = dpl.tensor({ 1, 2, 3 }, { dtype = 'float32' })
    local c = a:clone()
    c:fill_(0)
    assert.are.same({ 1, 2, 3 }, a:totable())
    local d = dpl.zeros(2, 3, { dtype = 'float64' })
    d:copy_(dpl.tensor({ 1, 2, 3 }))
    assert.are.same({ { 1, 2, 3 }, { 1, 2, 3 } }, d:totable())
    assert.matches('copy_: source of shape %[2%] cannot be broadcast to destination shape %[2, 3%]',
      err_of(function() d:copy_(dpl.zeros(2)) end))
  end)

  it('copies between overlapping views of one tensor as through a temporary', function()
    -- (PyTorch refuses these; a loop over the elements would read what it already wrote)
    local m = dpl.arange(1, 10):view(3, 3)
    m:copy_(m:t())
    assert.are.same({ { 1, 4, 7 }, { 2, 5, 8 }, { 3, 6, 9 } }, m:totable())
    local x = dpl.arange(1, 7):float()
    x:narrow(1, 2, 5):copy_(x:narrow(1, 1, 5))
    assert.are.same({ 1, 1, 2, 3, 4, 5 }, x:totable())
    local y = dpl.arange(1, 13):view(3, 4)
    y:narrow(2, 2, 3):copy_(y:narrow(2, 1, 3)) -- strided rows, shifted right
    assert.are.same({ { 1, 1, 2, 3 }, { 5, 5, 6, 7 }, { 9, 9, 10, 11 } }, y:totable())
    local z = dpl.arange(1, 7):view(3, 2):double()
    z:copy_(z[2]) -- a row of itself, broadcast
    assert.are.same({ { 3, 4 }, { 3, 4 }, { 3, 4 } }, z:totable())
  end)

  it('in-place ops read an operand that overlaps the result as it was (x:add_(x:t())), alpha as a number or {alpha=}', function()
    local function m() return dpl.arange(1, 10):view(3, 3):float() end
    local a = m(); a:add_(a:t())
    assert.are.same({ { 2, 6, 10 }, { 6, 10, 14 }, { 10, 14, 18 } }, a:totable())
    local b = m(); b:add_(b:t(), { alpha = 2 })
    assert.are.same({ { 3, 10, 17 }, { 8, 15, 22 }, { 13, 20, 27 } }, b:totable())
    local c = m(); c:sub_(c:t(), 2)
    assert.are.same({ { -1, -6, -11 }, { 0, -5, -10 }, { 1, -4, -9 } }, c:totable())
    local d = m(); d:mul_(d:t())
    assert.are.same({ { 1, 8, 21 }, { 8, 25, 48 }, { 21, 48, 81 } }, d:totable())
    local e = dpl.arange(1, 7):float(); e:narrow(1, 2, 5):add_(e:narrow(1, 1, 5))
    assert.are.same({ 1, 3, 5, 7, 9, 11 }, e:totable())
    local b2 = dpl.tensor({ { true, false, true }, { false, false, true }, { true, true, false } })
    b2:masked_fill_(b2:t(), false) -- a bool tensor masked by its own transpose
    assert.are.same({ { false, false, false }, { false, false, false }, { false, false, false } }, b2:totable())
    assert.matches('add: alpha must be a number or {alpha = number}, got string', err_of(function() return m():add(m(), 'x') end))
  end)

  it('in-place ops refuse a destination whose elements share memory (an expanded view), as PyTorch', function()
    local z = dpl.zeros(1)
    for _, f in ipairs({ function(e) e:add_(1) end, function(e) e:add_(dpl.ones(3), 2) end, function(e) e:relu_() end,
        function(e) e:copy_(dpl.tensor({ 1, 2, 3 }, { dtype = 'float32' })) end,
        function(e) e:masked_fill_(dpl.tensor({ true, false, true }), 1) end }) do
      assert.matches('unsupported operation: more than one element of the written%-to tensor refers to a single memory location',
        err_of(function() f(z:expand(3)) end))
    end
    assert.are.equal(0, z:item()) -- untouched
    local e = dpl.zeros(3, 0) -- empty: its stride-0 dim holds no element
    e:add_(1)
    assert.are.same({ 3, 0 }, e:size())
  end)

  it('index_add_ and scatter_add_ with a source that shares self\'s memory add the values it had', function()
    local idx = dpl.tensor({ 2, 3, 4, 1 })
    local x = dpl.tensor({ 1, 2, 3, 4 }, { dtype = 'float32' })
    x:index_add_(1, idx, x)
    assert.are.same({ 5, 3, 5, 7 }, x:totable())
    local y = dpl.tensor({ 1, 2, 3, 4 }, { dtype = 'float32' })
    y:scatter_add_(1, idx, y)
    assert.are.same({ 5, 3, 5, 7 }, y:totable())
  end)

  it('clamp takes numbers or {min=, max=} in both forms, and names tensor bounds as not implemented', function()
    local z = dpl.arange(1, 7):float()
    assert.are.same({ 2, 2, 3, 4, 5, 5 }, z:clamp({ min = 2, max = 5 }):totable())
    z:clamp_({ max = 3 })
    assert.are.same({ 1, 2, 3, 3, 3, 3 }, z:totable())
    assert.matches('NotImplementedError: clamp_: tensor min/max are not implemented',
      err_of(function() z:clamp_(z * 0, z) end))
    assert.matches('ValueError: clamp: min and max must be numbers %(or nil%), got string', err_of(function() z:clamp('a') end))
  end)
end)

describe('tensor printing', function()
  it('prints values, dtype, shape and device', function()
    local s = tostring(dpl.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = 'float32' }))
    assert.are.equal('tensor([[1., 2.],\n        [3., 4.]], dtype=float32, shape=[2, 2], device=cpu)', s)
    assert.are.equal('tensor([1, 2, 3], dtype=int64, shape=[3], device=cpu)', tostring(dpl.tensor({ 1, 2, 3 })))
    assert.are.equal('tensor(0.5000, dtype=float32, shape=[], device=cpu)', tostring(dpl.tensor(0.5)))
    assert.matches('true', tostring(dpl.tensor({ true })))
  end)

  it('summarizes big tensors', function()
    local s = tostring(dpl.arange(100000))
    assert.matches('%[    0,     1,     2,  ..., 99997, 99998, 99999%]', s)
    assert.is_true(#tostring(dpl.zeros(100, 100, 100)) < 2000)
  end)
end)

describe('tensor lifetimes', function()
  it('returns every byte after collectgarbage()', function()
    collectgarbage(); collectgarbage()
    local before = dpl.memory_stats('cpu').current_bytes
    do
      local a = dpl.randn(100, 100)
      local b = a:t():contiguous() + 1
      local v = a[3]
      local c = dpl.cat({ a, b }, 1):sum(2)
      assert.is_true(dpl.memory_stats('cpu').current_bytes > before)
      a, b, v, c = nil, nil, nil, nil
    end
    collectgarbage(); collectgarbage()
    local after = dpl.memory_stats('cpu').current_bytes
    assert(after <= before, ('%d bytes leaked'):format(after - before)) -- older garbage may go too
  end)

  it('frees explicitly, idempotently; views keep the storage alive', function()
    local a = dpl.zeros(1000)
    local v = a:narrow(1, 1, 10)
    v:fill_(3)
    assert.are.equal(30, v:sum():item())
    local m0 = dpl.memory_allocated()
    a:free()
    a:free()
    assert.is_true(a:is_freed())
    assert.are.equal('tensor(<freed>)', tostring(a))
    assert.are.equal(m0, dpl.memory_allocated()) -- still held by the view
    v:free()
    assert.are.equal(m0 - 4000, dpl.memory_allocated()) -- released now, no GC needed
    assert.matches('was freed', err_of(function() return a + 1 end))
    assert.matches('was freed', err_of(function() return a:equal(a) end))
  end)

  it('memory freed explicitly leaves the GC pacing count (no collection is due for it)', function()
    local C = require('dpl.capi').C
    T.collect()
    local before = tonumber(C.dpl_gc_since(0))
    local a = dpl.empty(1024, 1024) -- 4 MiB
    local v = a:view(-1)
    assert.are.equal(before + 4 * 1024 * 1024, tonumber(C.dpl_gc_since(0)))
    a:free() -- the view still holds the storage: nothing comes back yet
    assert.are.equal(before + 4 * 1024 * 1024, tonumber(C.dpl_gc_since(0)))
    v:free()
    assert.are.equal(before, tonumber(C.dpl_gc_since(0)))
  end)

  it('runs the GC itself when tensor bytes pile up, and reports allocation failures', function()
    local T = dpl.tensor
    local saved = T.gc_heap_factor
    T.gc_heap_factor = 0 -- every 8 MiB whatever the (test runner's) Lua heap
    T.collect()
    collectgarbage(); collectgarbage()
    local base = dpl.memory_allocated()
    local peak = 0
    local x = dpl.ones(1000000) -- 4 MB
    for _ = 1, 100 do           -- 400 MB of garbage: freed as it goes, not at the end
      local y = x + 1
      local now = dpl.memory_allocated() - base
      if now > peak then peak = now end
      y = nil
    end
    T.gc_heap_factor = saved
    assert(peak < 64 * 2 ^ 20, ('tensor bytes grew to %d'):format(peak))
    local maps = io.open('/proc/self/maps')
    local asan = maps and maps:read('*a'):find('libasan', 1, true)
    if maps then maps:close() end
    if not asan then -- ASan reports a 4 TB malloc instead of returning NULL
      assert.matches('RuntimeError: empty: out of memory allocating 4398046511104 bytes for a float32 %[1099511627776%] tensor',
        tostring(select(2, pcall(dpl.zeros, 2 ^ 40))))
    end
    assert.matches('shape %[1073741824, 1073741824%] is too large', tostring(select(2, pcall(dpl.zeros, 2 ^ 30, 2 ^ 30))))
  end)

  it('runs the GC itself when many small tensors pile up (handles, not bytes)', function()
    local T = dpl.tensor
    local saved_h, saved_f = T.gc_handles, T.gc_heap_per_handle
    T.gc_handles, T.gc_heap_per_handle = 2000, math.huge -- every 2000 handles whatever the heap
    T.collect()
    collectgarbage(); collectgarbage()
    local base = dpl.memory_stats().live_storages
    local a, b = dpl.ones(4, 4), dpl.ones(4, 4)
    local peak = 0
    for i = 1, 50000 do -- 64 bytes each: never near the byte threshold
      local c = i % 2 == 0 and a + b or a:view(16)
      if i % 100 == 0 then -- (no other Lua garbage: LuaJIT's own GC pacing stays out of it)
        local live = dpl.memory_stats().live_storages - base
        if live > peak then peak = live end
      end
      c = nil
    end
    T.gc_handles, T.gc_heap_per_handle = saved_h, saved_f
    T.collect()
    assert(peak < 4000, ('%d small tensors were alive at once'):format(peak))
    a, b = nil, nil
    collectgarbage(); collectgarbage()
    assert(dpl.memory_stats().live_storages <= base, 'small tensors left alive after collectgarbage()')
  end)

  it('parses sizes the same way when the JIT compiled the parsing', function()
    -- LuaJIT once compiled the old vararg parser into a trace that dropped the sizes
    -- (zeros({3, 2}, opts) gave a 0-d tensor after view(-1) calls made the trace)
    local shapes = { { 3, 2 }, { 4 }, { 2, 3, 4 }, { 5, 1 } }
    local bad = 0
    for it = 1, 3000 do
      local s = shapes[it % 4 + 1]
      local m, z = it % 5, nil
      if m == 0 then z = dpl.zeros(s, { dtype = 'float32', device = 'cpu' })
      elseif m == 1 then z = dpl.zeros(s)
      elseif m == 2 then z = dpl.zeros(unpack(s))
      elseif m == 3 then z = dpl.ones(s, { dtype = 'float64' })
      else z = dpl.randn(s) end
      if z:dim() ~= #s or z:size(1) ~= s[1] then bad = bad + 1 end
      if dpl.randn(6):view(-1):dim() ~= 1 then bad = bad + 1 end
      if dpl.randn(6):view(2, 3, nil, nil):dim() ~= 2 then bad = bad + 1 end
    end
    assert.are.equal(0, bad)
    assert.are.same({ 2, 3 }, dpl.zeros({ 2, 3 }, {}):size())
    assert.are.same({}, dpl.zeros({ dtype = 'int64' }):size())
    assert.are.equal('int64', dpl.zeros({ dtype = 'int64' }).dtype)
    assert.matches('at most 8 dims, got 9 sizes', err_of(dpl.zeros, 1, 1, 1, 1, 1, 1, 1, 1, 1))
    assert.matches('at most 8 dims', err_of(dpl.zeros, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1))
    assert.matches('sizes must be integers, got nil at position 2', err_of(dpl.zeros, 2, nil, 3))
  end)

  it('counts peak and totals', function()
    local s = dpl.memory_stats()
    for _, k in ipairs({ 'current_bytes', 'peak_bytes', 'total_bytes', 'live_storages', 'allocations' }) do
      assert.is_number(s[k])
    end
    assert.is_true(s.peak_bytes >= s.current_bytes)
  end)
end)

describe('tensor errors', function()
  it('names the op, what it expected and what it got, as error objects', function()
    local e = select(2, pcall(function() return dpl.zeros(2, 3) + dpl.zeros(4) end))
    assert.are.equal('RuntimeError: add: shapes [2, 3] and [4] cannot be broadcast (dim 2: 3 vs 4)', tostring(e))
    -- the dims C names are 1-based by the time Lua shows them (broadcast result, expand target, permute)
    assert.matches('cannot be broadcast %(dim 1: 5 vs 4%)', err_of(function() return dpl.zeros(5, 2, 3) + dpl.zeros(4, 1, 1) end))
    assert.matches('expand: cannot expand shape %[2, 1, 3%] to %[2, 4, 4%] %(dim 3: size 3 is not 1%)',
      err_of(function() return dpl.zeros(2, 1, 3):expand(2, 4, 4) end))
    assert.matches('expand: %-1 is not allowed for a new leading dim %(dim 1%)', err_of(function() return dpl.zeros(3):expand(-1, 3) end))
    assert.matches('permute: dim 1 appears twice', err_of(function() return dpl.zeros(2, 3):permute(1, 1) end))
    assert.matches('permute: dim 2 appears twice', err_of(function() return dpl.zeros(2, 3, 4):permute(2, -2, 1) end))
    e = select(2, pcall(function() return dpl.zeros(2):sum(2) end))
    assert.matches('^ValueError: sum: dim 2 out of range', tostring(e))
    assert.matches('add: shapes %[2, 3%] and %[4%] cannot be broadcast', err_of(function() return dpl.zeros(2, 3) + dpl.zeros(4) end))
    assert.matches('size: dim 3 out of range %(expected 1..2 or %-2..%-1 for a 2%-d tensor%)',
      err_of(function() return dpl.zeros(2, 3):size(3) end))
    assert.matches("unknown dtype 'float33'", err_of(function() return dpl.zeros(2, { dtype = 'float33' }) end))
    assert.matches('select: index 4 out of range for dim 1 of size 3', err_of(function() return dpl.zeros(3):select(1, 4) end))
    assert.matches('index 0 is out of range for dim 1 of size 3 %(expected 1..3', err_of(function() return dpl.zeros(3)[0] end))
    assert.matches('view: shape %[4%] is invalid for a tensor of 6 elements', err_of(function() return dpl.zeros(6):view(4) end))
    assert.matches('expand: cannot expand shape %[2%] to %[3%]', err_of(function() return dpl.zeros(2):expand(3) end))
    assert.matches('tensor: ragged nested table', err_of(function() return dpl.tensor({ { 1, 2 }, { 3 } }) end))
    assert.matches('item: only a tensor with one element', err_of(function() return dpl.zeros(2):item() end))
    assert.matches('add_: the result type float32 cannot be stored in place in a int64 tensor',
      err_of(function() return dpl.zeros(2, { dtype = 'int64' }):add_(dpl.ones(2)) end))
    assert.matches('matmul: inner dims do not match', err_of(function() return dpl.zeros(2, 3):matmul(dpl.zeros(2, 3)) end))
    assert.matches('matmul: expected both operands of the same dtype, got float32 and float64',
      err_of(function() return dpl.zeros(2, 2):matmul(dpl.zeros(2, 2, { dtype = 'float64' })) end))
    assert.matches('sizes must be non%-negative', err_of(function() return dpl.zeros(2, -1) end))
  end)
end)

-- PyTorch 1.13's checked conversion of a number into an element ("value cannot be converted to
-- type uint8_t without overflow"), the values torch gives noted beside each case
describe('numbers stored into integer dtypes (overflow is an error, as PyTorch)', function()
  local nan, inf = 0 / 0, math.huge
  local function u8(t) return dpl.tensor(t, { dtype = 'uint8' }) end
  local function overflow(f, msg)
    local e = err_of(f)
    assert.truthy(e:find('^ValueError: ') and e:find(msg, 1, true), e)
  end

  it('full, full_like, new_full, fill_, copy_ and t[k] = v refuse a value the dtype cannot hold', function()
    overflow(function() return dpl.full({ 2 }, 300, { dtype = 'uint8' }) end,
      'full: value 300 cannot be converted to uint8 without overflow') -- (was 44, wrapped)
    overflow(function() return dpl.full({ 2 }, 256, { dtype = 'uint8' }) end, 'full: value 256 cannot')
    overflow(function() return dpl.full({ 2 }, -256, { dtype = 'uint8' }) end, 'full: value -256 cannot')
    overflow(function() return dpl.full({ 2 }, 2 ^ 31, { dtype = 'int32' }) end,
      'full: value 2147483648 cannot be converted to int32 without overflow') -- (was INT32_MAX)
    overflow(function() return dpl.full({ 2 }, -2 ^ 31 - 1, { dtype = 'int32' }) end, 'int32 without overflow')
    overflow(function() return dpl.full({ 2 }, 2 ^ 63, { dtype = 'int64' }) end, 'int64 without overflow')
    overflow(function() return dpl.full_like(u8({ 1, 2 }), 300) end, 'full_like: value 300 cannot be converted to uint8')
    overflow(function() return dpl.zeros(2, { dtype = 'int32' }):new_full({ 3 }, 1e10) end,
      'new_full: value 10000000000 cannot be converted to int32')
    overflow(function() return u8({ 1, 2 }):fill_(300) end, 'fill_: value 300 cannot be converted to uint8')
    overflow(function() return u8({ 1, 2 }):fill_(dpl.tensor(300)) end, 'fill_: value 300') -- (a 0-d tensor's value)
    overflow(function() return u8({ 1, 2 }):copy_(300) end, 'copy_: value 300')
    overflow(function() local t = u8({ 1, 2 }) t[1] = 300 end, 'index: value 300 cannot be converted to uint8')
    overflow(function() local t = u8({ 1, 2 }) t[{ { 1, 2 } }] = 300 end, 'index: value 300')
    -- in range: stored as PyTorch stores them
    assert.are.same({ 255, 255 }, dpl.full({ 2 }, 255, { dtype = 'uint8' }):totable())
    assert.are.same({ 255, 255 }, dpl.full({ 2 }, -1, { dtype = 'uint8' }):totable()) -- (an integer wraps: -255..-1)
    assert.are.same({ 1 }, dpl.full({ 1 }, -255, { dtype = 'uint8' }):totable())
    assert.are.same({ 2147483647 }, dpl.full({ 1 }, 2 ^ 31 - 1, { dtype = 'int32' }):totable())
    assert.are.same({ -2147483648 }, dpl.full({ 1 }, -2 ^ 31, { dtype = 'int32' }):totable())
    assert.are.same({ true, true }, dpl.full({ 2 }, 300, { dtype = 'bool' }):totable()) -- (bool takes any number)
    assert.are.same({ true }, dpl.full({ 1 }, nan, { dtype = 'bool' }):totable())
    local t = u8({ 1, 2 })
    t[1] = -1
    assert.are.same({ 255, 2 }, t:totable())
    t[1] = dpl.tensor(300) -- (a tensor is copied: converted as copy_ converts, wrapping, as PyTorch)
    assert.are.same({ 44, 2 }, t:totable())
  end)

  it('nan and +-inf overflow every integer dtype; a fraction is truncated, a float takes uint8 0..255 only', function()
    for _, dt in ipairs({ 'uint8', 'int32', 'int64' }) do
      for _, v in ipairs({ nan, inf, -inf }) do
        overflow(function() return dpl.full({ 2 }, v, { dtype = dt }) end, 'cannot be converted to ' .. dt .. ' without overflow')
        overflow(function() return dpl.zeros(2, { dtype = dt }):fill_(v) end, 'fill_: value')
      end
    end
    assert.are.same({ 2, 2 }, dpl.full({ 2 }, 2.7, { dtype = 'uint8' }):totable())
    assert.are.same({ -2 }, dpl.full({ 1 }, -2.7, { dtype = 'int32' }):totable())
    assert.are.same({ 0 }, dpl.full({ 1 }, -0.5, { dtype = 'int64' }):totable())
    assert.are.same({ 255 }, dpl.full({ 1 }, 255.9, { dtype = 'int32' }):totable())
    overflow(function() return dpl.full({ 1 }, -0.5, { dtype = 'uint8' }) end, 'full: value -0.5 cannot be converted to uint8')
    overflow(function() return dpl.full({ 1 }, 255.5, { dtype = 'uint8' }) end, 'full: value 255.5')
    overflow(function() return dpl.full({ 1 }, 2147483647.5, { dtype = 'int32' }) end, 'int32 without overflow')
    -- the value of a floating 0-d tensor is a float to PyTorch: -1.0 does not wrap in uint8
    overflow(function() return u8({ 1 }):fill_(dpl.tensor(-1, { dtype = 'float32' })) end, 'fill_: value -1 cannot')
    assert.are.same({ 255 }, u8({ 1 }):fill_(dpl.tensor(-1)):totable())
    -- full's default dtype: an integral number in int64's range is int64, inf/nan/1e300 float32
    assert.are.equal('float32', dpl.full({ 1 }, inf).dtype)
    assert.are.equal(inf, dpl.full({ 1 }, inf):item())
    assert.are.equal('int64', dpl.full({ 1 }, 2 ^ 62).dtype)
    overflow(function() return dpl.full({ 1 }, 1e300) end, 'full: value 1e+300 cannot be converted to float32')
  end)

  it('masked_fill, where, clamp, tensor{} and the scalar arguments PyTorch checks', function()
    local m = dpl.tensor({ true, false })
    overflow(function() return u8({ 1, 2 }):masked_fill(m, 300) end, 'masked_fill: value 300 cannot be converted to uint8')
    overflow(function() return u8({ 1, 2 }):masked_fill_(m, nan) end, 'masked_fill_: value nan')
    overflow(function() return u8({ 1, 2 }):masked_fill_(m, dpl.tensor(300)) end, 'masked_fill_: value 300')
    assert.are.same({ 2, 2 }, u8({ 1, 2 }):masked_fill(m, 2.7):totable())
    overflow(function() return dpl.tensor({ 1, 300 }, { dtype = 'uint8' }) end, 'tensor: value 300 cannot be converted to uint8')
    overflow(function() return dpl.tensor(300, { dtype = 'uint8' }) end, 'tensor: value 300')
    overflow(function() return dpl.tensor({ { 1 }, { nan } }, { dtype = 'int32' }) end, 'tensor: value nan cannot be converted to int32')
    overflow(function() return dpl.tensor({ 2 ^ 40 }, { dtype = 'int32' }) end, 'int32 without overflow')
    assert.are.same({ 255, 2 }, dpl.tensor({ -1, 2.7 }, { dtype = 'uint8' }):totable())
    assert.are.equal(math.huge, dpl.tensor({ 1e39 }, { dtype = 'float32' }):item()) -- (torch.tensor keeps inf too)
    overflow(function() return dpl.where(m, u8({ 1, 2 }), 300) end, 'where: value 300 cannot be converted to uint8')
    overflow(function() return dpl.where(m, 2 ^ 40, dpl.zeros(2, { dtype = 'int32' })) end, 'where: value 1099511627776')
    assert.are.same({ 1, 255 }, dpl.where(m, u8({ 1, 2 }), -1):totable())
    assert.are.equal('float32', dpl.where(m, u8({ 1, 2 }), nan).dtype) -- (a float promotes, as PyTorch)
    overflow(function() return u8({ 1, 2 }):clamp(nil, 300) end, 'clamp: value 300 cannot be converted to uint8') -- (was a no-op)
    overflow(function() return u8({ 1, 2 }):clamp_min(300) end, 'clamp: value 300') -- (was 44)
    overflow(function() return u8({ 1, 2 }):clamp_(-256) end, 'clamp_: value -256')
    overflow(function() return dpl.zeros(2, { dtype = 'int32' }):clamp(nil, 2 ^ 40) end, 'int32 without overflow')
    assert.are.same({ 255, 255 }, u8({ 1, 2 }):clamp(-1):totable()) -- (min -1 is 255 in uint8: PyTorch's result)
    assert.are.same({ 1, 2 }, u8({ 1, 2 }):clamp(nil, 255):totable())
    overflow(function() return u8({ 1, 2 }):add(u8({ 1, 1 }), 300) end, 'add: value 300 cannot be converted to uint8')
    overflow(function() return u8({ 1, 2 }):sub_(u8({ 1, 1 }), 300) end, 'sub_: value 300')
    overflow(function() return dpl.zeros(2, { dtype = 'int32' }):add(dpl.ones(2, { dtype = 'int32' }), 2 ^ 40) end, 'add: value')
    overflow(function() return u8({ 1, 2 }):index_add_(1, dpl.tensor({ 1 }), u8({ 1 }), 300) end, 'index_add_: value 300')
    overflow(function() return u8({ 1, 2 }):addcmul(u8({ 1, 1 }), u8({ 1, 1 }), 300) end, 'addcmul: value 300')
    overflow(function() return u8({ 1, 2 }):pow(256) end, 'pow: value 256 cannot be converted to uint8')
    overflow(function() return dpl.pow(300, u8({ 1, 2 })) end, 'pow: value 300')
    overflow(function() return dpl.linspace(0, 300, 3, { dtype = 'uint8' }) end, 'linspace: value 300')
    local o = dpl.ones({ 1, 1 }, { dtype = 'uint8' })
    overflow(function() return o:addmm(o, o, { beta = 300 }) end, 'addmm: value 300')
    -- what PyTorch wraps stays wrapped: a number operand of add/sub/mul is converted, not checked
    assert.are.same({ 45, 46 }, u8({ 1, 2 }):add(300):totable())
    assert.are.same({ 44, 88 }, u8({ 1, 2 }):mul(300):totable())
    assert.are.same({ 0, 0 }, u8({ 1, 2 }):add(u8({ 1, 2 }), -1):totable())
    assert.are.same({ 1, 2 }, dpl.tensor({ 1, 2 }, { dtype = 'int32' }):add(2 ^ 40):totable())
  end)

  it('dpl.tensor takes int64_t/uint64_t cdata (9223372036854775807LL) exactly, where 2^63 overflows', function()
    overflow(function() return dpl.tensor({ 2 ^ 63 }, { dtype = 'int64' }) end,
      'tensor: value 9.2233720368548e+18 cannot be converted to int64 without overflow')
    local t = dpl.tensor({ 9223372036854775807LL, -9223372036854775807LL - 1, 5, 2 ^ 53 + 1LL })
    assert.are.equal('int64', t.dtype)
    assert.are.equal(-2 ^ 63, (t:narrow(1, 1, 1) + 1):item()) -- INT64_MAX + 1 wraps to INT64_MIN
    assert.are.equal(-2 ^ 63, t[2]:item())
    assert.are.equal(1, (t:narrow(1, 4, 1) - 2 ^ 53):item()) -- exact: 2^53 + 1 is no double
    assert.are.equal('int64', dpl.tensor(7LL).dtype)
    assert.are.same({ 1, 2.5 }, dpl.tensor({ 1LL, 2.5 }):totable()) -- with a fraction: float32
    assert.are.same({ { 1, 2 }, { 3, 4 } }, dpl.tensor({ { 1LL, 2 }, { 3, 4ULL } }, { dtype = 'int32' }):totable())
    overflow(function() return dpl.tensor({ 18446744073709551615ULL }) end,
      'tensor: value 18446744073709551615 cannot be converted to int64 without overflow')
    overflow(function() return dpl.tensor({ 300LL }, { dtype = 'uint8' }) end, 'tensor: value 300 cannot')
    overflow(function() return dpl.tensor({ true, 1LL }) end, 'tensor: mixed booleans and numbers')
  end)
end)

describe('tensors on simulated GPUs', function()
  local h = require 'spec.support.helpers'
  it('allocates on cuda:k, refuses busy ones, and names both devices in mixed ops', function()
    local script = h.write_file(h.tmpname('.lua'), [[
      local dpl = require 'dpl'
      local a = dpl.ones(2, 2, { device = 'cuda:1' })
      print(tostring(a.device), (a + 1):sum():item(), (a + 1).device)
      local b = a:to('cpu')
      collectgarbage()
      print(tostring(b.device), b:sum():item(), dpl.memory_stats('cuda:1').current_bytes)
      print(select(2, pcall(function() return a + b end)))
      print(select(2, pcall(function() return dpl.zeros(2, { device = 'cuda:2' }) end)))
      print(select(2, pcall(function() return dpl.zeros(2, { device = 'cuda:7' }) end)))
    ]])
    local out, err, rc = h.sh('DPL_VIRTUAL_GPUS=4 DPL_VIRTUAL_GPUS_BUSY=2 ' .. h.q(h.bin) .. ' ' .. h.q(script))
    assert.are.equal(0, rc, err)
    local lines = {}
    for l in out:gmatch('[^\n]+') do lines[#lines + 1] = l end
    assert.are.equal('cuda:1\t8\tcuda:1', lines[1])
    assert.are.equal('cpu\t4\t16', lines[2])
    assert.matches('add: expected all tensors on the same device, got cuda:1 and cpu', lines[3])
    assert.matches('cuda:2 is busy', lines[4])
    assert.matches('cuda:7: only 4 CUDA devices', lines[5])
    os.remove(script)
  end)
end)

describe('lockstep garbage collection (DDP ranks)', function()
  it('reports a collection due at the threshold and collects by itself only at the backstop', function()
    local T = require 'dpl.tensor'
    local C = require('dpl.capi').C
    T.collect()
    T.gc_lockstep(true)
    local ok, err = pcall(function()
      local mb, due_at = 0, nil
      while true do
        local before = tonumber(C.dpl_gc_since(0))
        local _ = dpl.empty(256 * 1024) -- 1 MiB, garbage at once
        mb = mb + 1
        local now = tonumber(C.dpl_gc_since(0))
        if now < before then break end -- the backstop collected
        if not due_at and T.gc_due() then due_at = mb end
        assert.is_true(mb < 4096, 'no collection after 4 GiB')
      end
      assert.truthy(due_at, 'gc_due never turned true')
      -- the backstop sits at gc_lockstep_backstop (4) x the threshold gc_due uses
      assert.is_true(mb >= 3.5 * due_at and mb <= 4.5 * due_at + 2, ('due at %d MiB, collected at %d MiB'):format(due_at, mb))
    end)
    T.gc_lockstep(false)
    assert(ok, err)
    T.collect()
    assert.is_false(T.gc_due())
  end)
end)

describe("the host's tensor finalizer", function()
  it('releases handles from the GC and refuses what is not a handle', function()
    local ffi = require 'ffi'
    local C = require('dpl.capi').C
    local host = require 'dpl.host'
    assert.are.equal('function', type(host.tensor_release))
    collectgarbage(); collectgarbage()
    local before = dpl.memory_stats('cpu').live_storages
    do
      local out = ffi.new('dpl_tensor *[1]')
      local shape = ffi.new('int64_t[1]', 1000)
      for _ = 1, 10 do
        assert.are.equal(0, C.dpl_tensor_empty(0, 1, shape, 0, 0, out))
        ffi.gc(out[0][0], host.tensor_release) -- a reference, as dpl.tensor makes them
      end
      assert.are.equal(0, C.dpl_tensor_empty(0, 1, shape, 0, 0, out))
      ffi.gc(out[0], host.tensor_release) -- a pointer, as dpl.dist makes them
      assert.are.equal(before + 11, dpl.memory_stats('cpu').live_storages)
    end
    collectgarbage(); collectgarbage()
    assert.are.equal(before, dpl.memory_stats('cpu').live_storages)
    assert.matches('tensor handle %(cdata%) expected', select(2, pcall(host.tensor_release, {})))
  end)
end)

describe('collections paced by tensor bytes', function()
  it('also run for ops with several results (a loop of layer_norm alone stays bounded)', function()
    local dpl = require 'dpl'
    local T = require 'dpl.tensor'
    local x = dpl.randn(1000, 1000)
    collectgarbage()
    collectgarbage()
    local base, peak = dpl.memory_allocated(), 0
    for _ = 1, 160 do -- 160 x 4 MB of results, each dropped at once
      local y = T.layer_norm(x, nil, nil, 1000, 1e-5)
      assert(y)
      peak = math.max(peak, dpl.memory_allocated() - base)
    end
    -- the threshold is 32 MiB of tensor bytes, up to T.gc_max_bytes (256 MiB) with a big Lua heap
    -- (as in a long busted run): without a collection here the loop held ~610 MB
    assert.is_true(peak < T.gc_max_bytes + 32 * 2 ^ 20, ('peak %.0f MB'):format(peak / 2 ^ 20))
  end)
end)
