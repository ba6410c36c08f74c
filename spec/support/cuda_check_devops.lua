-- cuda_check_devops.lua: cases of the CUDA op-consistency harness (spec/support/cuda_check.lua
-- adds them) for the ops that went through host memory or raised "not implemented on cuda":
-- nonzero / masked_select / argwhere (the device compaction), searchsorted / bucketize,
-- scatter_reduce / index_reduce, scatter_(reduce='multiply'), put_, masked_scatter_, gcd / lcm
-- / bitwise shifts, logcumsumexp (and its gradient), linalg.geqrf: cuda:0 against the CPU on
-- float32 / float64 / integer dtypes (bool and 16-bit floats where the op takes them), with
-- non-contiguous inputs, empty tensors and the CPU's error messages (compared as bytes).
local dpl = require 'dpl'

return function(add, M, sample, all_dtypes)
  local err_bytes = M.err_bytes
  local function I(t, dev) return dpl.tensor(t, { dtype = 'int64' }):to(dev) end
  local num_dtypes = { 'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8' }
  -- a sample with zeros (and a NaN for floats) among its values
  local function sparse(dt, ...)
    local x = sample(dt, ...)
    if dt == 'bool' then return x end
    local z = dpl.rand(...):lt(0.4)
    x = x:masked_fill(z, 0)
    if dt == 'float32' or dt == 'float64' then x:view(-1)[2] = 0 / 0 end
    return x
  end

  for _, dt in ipairs(all_dtypes) do
    add('nonzero/masked_select/argwhere ' .. dt, function()
      return { sparse(dt, 5, 7), dpl.rand(5, 7):gt(0.5), dpl.rand(7):gt(0.3), sparse(dt, 3, 40, 30),
        dpl.rand(3, 40, 30):gt(0.7) }
    end, function(dev, x, m, row, big, mbig)
      local out = { x:nonzero(), x:t():nonzero(), x:narrow(2, 2, 3):nonzero(), x[2][3]:nonzero(),
        x:narrow(1, 1, 0):nonzero(), x:masked_select(m), x:t():masked_select(m:t()), x:masked_select(row),
        x:masked_select(m:to('uint8')), x:argwhere(), big:nonzero(), big:masked_select(mbig),
        big:transpose(1, 3):nonzero(), x:masked_select(dpl.zeros(5, 7, { dtype = 'bool', device = dev })),
        x[m], dpl.tensor(0):to(dt):to(dev):nonzero(), x:narrow(1, 1, 0):masked_select(m:narrow(1, 1, 0)) }
      return out
    end)
  end

  for _, dt in ipairs({ 'float32', 'float64', 'int32', 'int64' }) do
    add('searchsorted/bucketize ' .. dt, function()
      local s = sample(dt, 20):sort()
      local s2 = sample(dt, 4, 12):sort(2)
      return { s, s2, sample(dt, 4, 9), sample(dt, 4, 6) }
    end, function(dev, s, s2, v, v2)
      local out = { dpl.searchsorted(s, v), dpl.searchsorted(s, v, { right = true }),
        dpl.searchsorted(s, v, { side = 'right', out_int32 = true }), dpl.searchsorted(s2, v2),
        dpl.searchsorted(s2, v2, { right = true }), dpl.searchsorted(s, 0), dpl.searchsorted(s, v:t()),
        dpl.searchsorted(s, v:narrow(1, 1, 0)), v:bucketize(s), v:t():bucketize(s, { right = true }),
        dpl.searchsorted(s, s), dpl.searchsorted(s2:t():contiguous():t(), v2) }
      local perm = dpl.randperm(20):to(dev) -- (the same draw on both sides: the seed is reset)
      out[#out + 1] = dpl.searchsorted(s:index_select(1, perm), v, { sorter = perm:argsort() })
      return out
    end)
  end
  add('searchsorted NaN and infinities', function()
    return { dpl.tensor({ -math.huge, -1, 0, 0, 2, math.huge, 0 / 0 }), dpl.tensor({ 0 / 0, -math.huge, 0, 1, math.huge, -0.0 }) }
  end, function(_, s, v)
    return { dpl.searchsorted(s, v), dpl.searchsorted(s, v, { right = true }), dpl.searchsorted(s:float(), v:float()) }
  end)

  local reds = { 'sum', 'prod', 'mean', 'amax', 'amin' }
  for _, dt in ipairs({ 'float32', 'float64', 'float16', 'int32', 'int64', 'uint8', 'bool' }) do
    add('scatter_reduce/index_reduce ' .. dt, function()
      local x, s = sample(dt, 4, 6), sample(dt, 3, 5)
      if dt == 'int32' or dt == 'int64' then x, s = sample(dt, 4, 6):remainder(7) - 3, sample(dt, 3, 5):remainder(5) - 2 end
      if dt == 'float32' or dt == 'float64' then s[2][2] = 0 / 0 end
      return { x, s, sample(dt, 4, 3) }
    end, function(dev, x, s, src3)
      local si = I({ { 1, 6, 6, 2, 6 }, { 3, 3, 3, 1, 2 }, { 4, 4, 1, 1, 6 } }, dev)
      local out = {}
      for _, r in ipairs(reds) do
        if not (dt == 'bool' and r == 'mean') then
          for _, inc in ipairs({ true, false }) do
            out[#out + 1] = x:scatter_reduce(2, si, s, r, inc)
            out[#out + 1] = x:scatter_reduce(1, si:narrow(2, 1, 4):clamp(1, 4), s:narrow(2, 1, 4), r, inc)
            out[#out + 1] = x:t():clone():t():scatter_reduce(2, si, s, r, { include_self = inc }) -- strided self
            out[#out + 1] = x:t():scatter_reduce(1, si:t(), s:t(), r, inc) -- transposed index and src
            if r ~= 'sum' then
              out[#out + 1] = x:index_reduce(2, I({ 3, 1, 3 }, dev), src3, r, inc)
              out[#out + 1] = x:t():index_reduce(1, I({ 6, 6 }, dev), src3:narrow(2, 1, 2):t(), r, inc)
            end
          end
        end
      end
      out[#out + 1] = x:scatter_reduce(2, si:narrow(1, 1, 0), s, 'sum') -- empty index
      local y = x:clone()
      y:scatter_reduce_(2, si, s, dt == 'bool' and 'amax' or 'mean')
      out[#out + 1] = y
      return out
    end)
  end
  add('scatter_reduce/index_reduce: bad indices raise the CPU\'s message', function() return { dpl.randn(3, 4), dpl.randn(2, 4) } end,
    function(dev, x, s)
      local function e(f) return err_bytes(dev, f) end
      return { e(function() return x:scatter_reduce(2, I({ { 1, 5 } }, dev), s, 'sum') end),
        e(function() return x:scatter_reduce(2, I({ { 0 } }, dev), s, 'amax', false) end),
        e(function() return x:scatter_reduce(1, I({ { 1, 2, 3, 1 }, { 1, 4, 1, 1 } }, dev), s, 'mean') end),
        e(function() return x:index_reduce(1, I({ 4, 1 }, dev), s, 'prod') end),
        e(function() return x:index_reduce_(2, I({ -1 }, dev), s:narrow(2, 1, 1):expand(3, 1):contiguous(), 'amin') end) }
    end)

  for _, dt in ipairs(num_dtypes) do
    add('scatter_(multiply)/put_/masked_scatter_ ' .. dt,
      function() return { sample(dt, 4, 6), sample(dt, 3, 5), dpl.rand(4, 6):gt(0.5), sample(dt, 30), dpl.rand(6):gt(0.5) } end,
      function(dev, x, s, m, src, mrow)
        local si = I({ { 1, 6, 6, 2, 6 }, { 3, 3, 3, 1, 2 }, { 5, 4, 1, 1, 6 } }, dev)
        local pi = I({ 3, -1, 3, 24, 1, -24, 7 }, dev) -- duplicates, negative indices
        local ps = src:narrow(1, 1, 7)
        return { x:clone():scatter_(2, si, s, 'multiply'), x:clone():scatter_(2, si, 2, 'multiply'),
          x:t():clone():t():scatter_(2, si, s, 'multiply'), x:clone():scatter_(1, si:narrow(2, 1, 4):clamp(1, 4),
            s:narrow(2, 1, 4), 'multiply'), x:clone():scatter_(2, si:narrow(1, 1, 0), s, 'multiply'),
          x:scatter(2, si, s, 'multiply'),
          x:clone():put_(pi, ps), x:clone():put_(pi, ps, true), x:t():clone():put_(pi, ps),
          x:t():clone():t():put_(pi:view(7, 1), ps:view(1, 7):t(), true), x:clone():put_(I({}, dev), src:narrow(1, 1, 0)),
          x:put(pi, ps),
          x:clone():masked_scatter_(m, src), x:clone():masked_scatter_(mrow, src), x:t():clone():t():masked_scatter_(m, src),
          x:t():clone():masked_scatter_(m:t(), src:view(5, 6):t()), x:masked_scatter(m, src),
          x:clone():masked_scatter_(dpl.zeros(4, 6, { dtype = 'bool', device = dev }), src:narrow(1, 1, 0)),
          x:narrow(1, 1, 0):clone():masked_scatter_(m:narrow(1, 1, 0), src) }
      end)
  end
  add('scatter_(multiply)/put_/masked_scatter_ bool', function() return { dpl.rand(4, 6):gt(0.3), dpl.rand(3, 5):gt(0.3), dpl.rand(4, 6):gt(0.5), dpl.rand(30):gt(0.5) } end,
    function(dev, x, s, m, src)
      local si = I({ { 1, 6, 6, 2, 6 }, { 3, 3, 3, 1, 2 }, { 5, 4, 1, 1, 6 } }, dev)
      return { x:clone():scatter_(2, si, s, 'multiply'), x:clone():put_(I({ 2, 2, -1 }, dev), src:narrow(1, 1, 3)),
        x:clone():masked_scatter_(m, src) }
    end)
  add('put_/masked_scatter_/scatter_: the CPU\'s messages', function() return { dpl.randn(3, 4), dpl.randn(2, 4) } end,
    function(dev, x, s)
      local function e(f) return err_bytes(dev, f) end
      return { e(function() return x:clone():put_(I({ 13 }, dev), s:view(-1):narrow(1, 1, 1)) end),
        e(function() return x:clone():put_(I({ -13 }, dev), s:view(-1):narrow(1, 1, 1)) end),
        e(function() return x:clone():put_(I({ 1, 2 }, dev), s:view(-1):narrow(1, 1, 3)) end),
        e(function() return x:clone():masked_scatter_(x:gt(-10), s) end),
        e(function() return x:clone():masked_scatter_(dpl.ones(2, 3, 4, { device = dev }):bool(), s) end),
        e(function() return x:clone():scatter_(2, I({ { 1, 5 } }, dev), s, 'multiply') end) }
    end)

  for _, dt in ipairs({ 'int32', 'int64', 'uint8' }) do
    add('gcd/lcm/bitwise shifts ' .. dt, function()
      local lo = dt == 'uint8' and 0 or -60
      local a = dpl.randint(lo, 60, { 5, 6 }, { dtype = dt })
      local b = dpl.randint(lo, 60, { 5, 6 }, { dtype = dt })
      local c = dpl.randint(dt == 'uint8' and 0 or -3, dt == 'int64' and 70 or 40, { 5, 6 }, { dtype = dt })
      return { a, b, c, dpl.randint(0, 9, { 6 }, { dtype = dt }) }
    end, function(_, a, b, c, row)
      return { a:gcd(b), a:lcm(b), a:gcd(6), a:t():gcd(b:t()), a:gcd(row), a:lcm(row), a:clone():gcd_(b),
        a:bitwise_left_shift(c), a:bitwise_right_shift(c), a:bitwise_left_shift(3), a:bitwise_right_shift(2),
        a:t():bitwise_left_shift(c:t()), a:bitwise_right_shift(row), a:clone():bitwise_left_shift_(row),
        dpl.bitwise_left_shift(3, c:narrow(1, 1, 2)), a:narrow(1, 1, 0):gcd(b:narrow(1, 1, 0)) }
    end)
  end
  add('gcd/lcm/shifts: the CPU\'s messages', function() return { dpl.randn(3), dpl.randint(0, 9, { 3 }) } end,
    function(dev, x, i)
      local function e(f) return err_bytes(dev, f) end
      return { e(function() return x:gcd(i) end), e(function() return i:lcm(1.5) end),
        e(function() return i:bitwise_left_shift(x) end), e(function() return i:gcd(i:bool()) end) }
    end)

  for _, dt in ipairs({ 'float32', 'float64', 'float16' }) do
    add('logcumsumexp and its gradient ' .. dt, function()
      local x = dpl.randn(4, 7) * 4
      x[1][3] = -math.huge
      x[2][1] = -math.huge
      x[2][2] = -math.huge
      x[3][4] = math.huge
      x[4][5] = 0 / 0
      return { x:to(dt), dpl.randn(4, 7):to(dt), (dpl.randn(3, 50, 2) * 30):to(dt) }
    end, function(dev, x, g, big)
      local out = { x:logcumsumexp(2), x:logcumsumexp(1), x:logcumsumexp(-1), x:t():logcumsumexp(1),
        x:narrow(1, 1, 0):logcumsumexp(2), x[1][1]:logcumsumexp(1), big:logcumsumexp(2), big:transpose(1, 2):logcumsumexp(3) }
      if dt ~= 'float16' then
        local p = g:clone():requires_grad_()
        ;(p:logcumsumexp(2) * g:t():contiguous():t()):sum():backward()
        out[#out + 1] = p.grad
        local q = x:clone():requires_grad_()
        ;(q:logcumsumexp(1):masked_fill(q:logcumsumexp(1):isnan(), 0) * g):sum():backward()
        out[#out + 1] = q.grad
        local b = big:clone():requires_grad_()
        b:logcumsumexp(2):sum():backward()
        out[#out + 1] = b.grad
      end
      return out
    end)
  end

  for _, dt in ipairs({ 'float32', 'float64' }) do
    add('linalg.geqrf ' .. dt, function() return { dpl.randn(5, 3):to(dt), dpl.randn(2, 4, 4):to(dt), dpl.randn(3, 5):to(dt) } end,
      function(dev, tall, batch, wide)
        local out = {}
        for _, a in ipairs({ tall, batch, wide, tall:t(), batch:transpose(2, 3), tall:narrow(1, 1, 0), batch:narrow(1, 1, 0) }) do
          local r, tau = dpl.linalg.geqrf(a)
          out[#out + 1] = r
          out[#out + 1] = tau
        end
        local r, tau = wide:geqrf()
        out[#out + 1] = dpl.linalg.householder_product(r:narrow(2, 1, 3), tau)
        out[#out + 1] = err_bytes(dev, function() return dpl.linalg.geqrf(tall:int()) end)
        return out
      end)
  end
end
