-- cuda_check_scatter.lua: the scatter-write cases of the CUDA op-consistency harness
-- (spec/support/cuda_check.lua adds them to its list): index_put_ (t[mask] = v with masks over
-- every number of leading dims, t[idx] = v, several index tensors broadcast, accumulate),
-- scatter_ (src, value, reduce 'add'), index_fill_, index_copy_ and fill_diagonal_ on cuda:0
-- against the CPU on every dtype: duplicates (the last write wins, as the CPU's loops),
-- negative indices, strided self, empty indices, the CPU's error messages for bad indices (as
-- bytes; raised at the op on cuda too: the index is read back for the checks), and gradients.
local dpl = require 'dpl'

return function(add, M, sample, all_dtypes)
  local err_bytes = M.err_bytes
  local function I(t, dev) return dpl.tensor(t, { dtype = 'int64' }):to(dev) end

  for _, dt in ipairs(all_dtypes) do
    add('index_put_/t[mask] = v ' .. dt, function()
      return { sample(dt, 4, 5, 3), dpl.rand(4, 5, 3):gt(0.5), dpl.rand(4, 5):gt(0.4), dpl.rand(4):gt(0.5),
        sample(dt, 60), sample(dt, 3) }
    end, function(dev, x, m3, m2, m1, vals, row)
      local one = (dt == 'bool') and true or 1
      local a = x:clone(); a[m3] = one
      local b = x:clone(); b[m2] = one
      local c = x:clone(); c[m1] = row -- values broadcast over the mask's rows
      local k = m3:sum():item()
      local d = x:clone(); d[m3] = vals:narrow(1, 1, k)
      local e = x:clone(); e:index_put_({ m2 }, row) -- a mask over two dims, a row per true element
      local f = x:clone(); f[m1:to('uint8')] = one -- a uint8 mask
      local g = x:clone(); g:index_put_({ m1 }, x:narrow(1, 1, 1):clone(), true) -- accumulate through a mask
      local h = x:transpose(1, 2):clone():transpose(1, 2); h[m3] = one -- strided self
      local z = x:clone(); z[dpl.zeros(4, 5, 3, { dtype = 'bool', device = dev })] = one -- no true element
      return { a, b, c, d, e, f, g, h, z }
    end)
    add('index_put_/t[idx] = v ' .. dt, function() return { sample(dt, 5, 4, 3), sample(dt, 6, 4, 3), sample(dt, 6, 3) } end,
      function(dev, x, v6, w6)
        local one = (dt == 'bool') and true or 1
        local dup = I({ 2, 5, 2, -1, 1, 2 }, dev) -- duplicates: the last write wins; -1 is the last row
        local a = x:clone(); a[dup] = v6
        local b = x:clone(); b[I({ 3, -2 }, dev)] = one
        local c = x:clone(); c:index_put_({ dup, I({ 1, 4, 1, -4, 2, 1 }, dev) }, w6) -- two indices: rows of 3
        local d = x:clone(); d:index_put_({ dup, I({ 1, 4, 1, -4, 2, 1 }, dev), I({ 3, 3, 3, 1, 2, 3 }, dev) }, v6:view(6, 12):narrow(2, 1, 1):view(6))
        local e = x:clone(); e:index_put_({ I({ { 1 }, { 2 } }, dev), I({ 1, 2, 4 }, dev) }, one) -- broadcast [2,1] x [3]
        local f = x:clone(); f:index_put_({ dup }, v6, true) -- accumulate duplicates
        local g = x:clone(); g:index_put_({ dup, I({ 1, 4, 1, -4, 2, 1 }, dev) }, w6, true)
        local h = x:clone(); h:index_put_({ I({}, dev) }, one) -- empty index
        local s = x:transpose(1, 3):clone():transpose(1, 3); s[dup] = v6 -- strided self
        return { a, b, c, d, e, f, g, h, s, x:index_put({ dup }, v6) }
      end)
    add('scatter_/index_fill_/index_copy_/fill_diagonal_ ' .. dt,
      function() return { sample(dt, 4, 6), sample(dt, 3, 5), sample(dt, 4, 4, 4), sample(dt, 7, 3) } end,
      function(dev, x, s, cube, tall)
        local one = (dt == 'bool') and true or 1
        local si = I({ { 1, 6, 6, 2, -1 }, { 3, 3, 3, 1, 2 }, { 5, 4, 1, 1, 6 } }, dev):clamp(1, 6) -- duplicates
        local a = x:clone():scatter_(2, si, s)
        local b = x:clone():scatter_(2, si, one)
        local c = x:clone():scatter_(1, si:narrow(2, 1, 4):clamp(1, 4), s:narrow(2, 1, 4))
        local d = x:t():clone():t():scatter_(2, si, s) -- strided self
        local e = x:clone():scatter_(2, si:narrow(1, 1, 0), s) -- empty index
        local f = x:clone():index_fill_(2, I({ 1, -1, 3, 1 }, dev), one)
        local g = x:t():clone():t():index_fill_(1, I({ 2 }, dev), dpl.tensor(1):to(dt):to(dev))
        local h = x:clone():index_copy_(1, I({ 4, 1, 4 }, dev), x:narrow(1, 2, 3):clone()) -- duplicates
        local k = x:clone():index_copy_(2, I({ -1, 2, -1 }, dev), x:narrow(2, 1, 3):clone())
        local l = tall:clone():fill_diagonal_(one, true)
        local m = tall:t():clone():fill_diagonal_(one)
        local n = cube:clone():fill_diagonal_(one)
        local o = tall:t():clone():t():fill_diagonal_(one, true) -- strided
        local out = { a, b, c, d, e, f, g, h, k, l, m, n, o, x:scatter(2, si, s), x:index_fill(1, I({ 3 }, dev), one) }
        if dt ~= 'bool' then out[#out + 1] = x:clone():scatter_(2, si, s, 'add') end
        if dt ~= 'bool' then out[#out + 1] = x:clone():scatter_(2, si, one, 'add') end
        return out
      end)
  end

  -- the CPU's messages for bad indices (and other refusals), as bytes: raised at the op on cuda too
  add('scatter writes: bad indices raise the CPU\'s message', function() return { dpl.randn(3, 4), dpl.randn(2, 4) } end,
    function(dev, x, s)
      local function e(f) return err_bytes(dev, f) end
      return { e(function() return x:clone():index_put_({ I({ 4 }, dev) }, 1) end),
        e(function() return x:clone():index_put_({ I({ 0 }, dev) }, 1) end),
        e(function() return x:clone():index_put_({ I({ -4 }, dev) }, 1) end),
        e(function() return x:clone():index_put_({ I({ 1 }, dev), I({ 5 }, dev) }, 1) end),
        e(function() local c = x:clone() c[I({ 2, 9 }, dev)] = 0 return c end),
        e(function() return x:clone():index_put_({ x:gt(0):narrow(2, 1, 3) }, 1) end),
        e(function() return x:clone():index_put_({ I({ 1, 2 }, dev) }, s:narrow(1, 1, 1):narrow(2, 1, 3)) end),
        e(function() return x:clone():scatter_(2, I({ { 1, 5 } }, dev), s) end),
        e(function() return x:clone():scatter_(2, I({ { 0 } }, dev), 3) end),
        e(function() return x:clone():scatter_(2, I({ { 1, 2, 3, 4, 1 } }, dev), s) end),
        e(function() return x:clone():index_fill_(1, I({ 4 }, dev), 1) end),
        e(function() return x:clone():index_fill_(2, I({ -5 }, dev), 1) end),
        e(function() return x:clone():index_copy_(1, I({ 1, 4 }, dev), s) end),
        e(function() return x:clone():index_copy_(1, I({ 1 }, dev), s) end),
        e(function() return x:clone():index_fill_(1, I({ 1 }, dev), 1e39) end) }
    end)

  -- gradients through the scatter writes (the rules compose index_fill/index_select/gather/_index_get)
  add('scatter writes: gradients', function() return { dpl.randn(4, 5), dpl.randn(3, 5), dpl.rand(4, 5):gt(0.5), dpl.randn(4, 5) } end,
    function(dev, x, s, m, g)
      local out = {}
      local function grads(f)
        local px, ps = x:clone():requires_grad_(), s:clone():requires_grad_()
        ;(f(px, ps) * g):sum():backward()
        out[#out + 1] = px.grad
        out[#out + 1] = ps.grad
      end
      local idx = I({ 2, 4, 2 }, dev)
      grads(function(px, ps) return px:index_put({ idx }, ps) end)
      grads(function(px, ps) return px:index_put({ idx }, ps, true) end)
      grads(function(px, ps) return px:index_put({ m }, ps:narrow(2, 1, 1):sum() * 1) + ps:sum() * 0 end)
      grads(function(px, ps) return px:scatter(1, I({ { 1, 2, 3, 4, 1 }, { 4, 3, 2, 1, 2 } }, dev), ps:narrow(1, 1, 2)) end)
      grads(function(px, ps) return px:index_copy(1, I({ 4, 1, 3 }, dev), ps) end)
      grads(function(px, ps) return px:index_fill(2, I({ 1, -1 }, dev), 0) + ps:sum() * 0 end)
      return out
    end)
end
