-- scatter_reduce_fast_spec.lua: the odometer-free fold of dpl_scatter_reduce_fill (index of
-- self's shape outside dim, self contiguous: the bench's 1-d case and the 2-d/3-d ones) and the
-- general one (a smaller index) against a reference fold written here: every reduction, with and
-- without include_self, float32 and float64, repeated positions, NaN, -0/+0 ties, out-of-range
-- indices (message, no result) and an index in the middle of a larger self.
local dpl = require 'dpl'

-- the reference: index positions row-major, each folded in turn (PyTorch's CPU order)
local function ref_fold(self, dim, index, src, red, inc)
  local out = self:clone()
  local flat_o = out:reshape(-1) -- a view of out (contiguous)
  local osz, isz = self:size(), index:size()
  local n = #isz
  local ost = {}
  local acc = 1
  for k = n, 1, -1 do ost[k] = acc acc = acc * osz[k] end
  local iv, sv = index:contiguous():reshape(-1):totable(), src:contiguous():reshape(-1):totable()
  local ov = flat_o:totable()
  local cnt = {}
  local c = {}
  for k = 1, n do c[k] = 0 end
  local f32 = self.dtype == 'float32'
  local function r32(x) return f32 and dpl.tensor({ x }, { dtype = 'float32' }):item() or x end
  for p = 1, #iv do
    local o = 1
    for k = 1, n do o = o + (k == dim and (iv[p] - 1) or c[k]) * ost[k] end
    local s, cur, k0 = sv[p], ov[o], cnt[o] or 0
    if k0 == 0 and not inc then ov[o] = s
    elseif red == 'sum' or red == 'mean' then ov[o] = r32(cur + s)
    elseif red == 'prod' then ov[o] = r32(cur * s)
    elseif red == 'amax' then if s ~= s or (cur == cur and s > cur) then ov[o] = s end
    else if s ~= s or (cur == cur and s < cur) then ov[o] = s end end
    cnt[o] = k0 + 1
    for k = n, 1, -1 do
      c[k] = c[k] + 1
      if c[k] < isz[k] then break end
      c[k] = 0
    end
  end
  if red == 'mean' then
    for o = 1, #ov do
      if cnt[o] then ov[o] = r32(ov[o] / (cnt[o] + (inc and 1 or 0))) end
    end
  end
  return dpl.tensor(ov, { dtype = self.dtype }):view(osz)
end

local function same_bits(a, b, what)
  assert.are.same(a:size(), b:size(), what .. ': shape')
  local ta, tb = a:reshape(-1):totable(), b:reshape(-1):totable()
  for i = 1, #ta do
    local x, y = ta[i], tb[i]
    local ok = (x ~= x and y ~= y) or (x == y and (x ~= 0 or 1 / x == 1 / y))
    if not ok then error(('%s: element %d: %.17g vs %.17g'):format(what, i, x, y), 2) end
  end
end

local REDS = { 'sum', 'prod', 'mean', 'amax', 'amin' }
local SHAPES = { -- self shape, dim, index shape (nil: self's shape with dim's size 3x)
  { { 50 }, 1 },
  { { 7, 9 }, 1 },
  { { 7, 9 }, 2 },
  { { 4, 5, 6 }, 2 },
  { { 4, 5, 6 }, 3 },
  { { 6, 5 }, 1, { 12, 3 } }, -- a smaller index: the general fold
}

describe('scatter_reduce C folds against a reference fold', function()
  for _, dt in ipairs({ 'float32', 'float64' }) do
    for si, sh in ipairs(SHAPES) do
      for _, red in ipairs(REDS) do
        for _, inc in ipairs({ true, false }) do
          it(('%s shape %d dim %d %s include_self=%s'):format(dt, si, sh[2], red, tostring(inc)), function()
            dpl.manual_seed(si * 31 + #red)
            local self = dpl.randn(sh[1], { dtype = dt })
            local isz = sh[3]
            if not isz then
              isz = {}
              for k, v in ipairs(sh[1]) do isz[k] = k == sh[2] and 3 * v or v end
            end
            local size = sh[1][sh[2]]
            local index = dpl.randint(1, size + 1, isz)
            local src = dpl.randn(isz, { dtype = dt })
            if red == 'prod' then src = src:abs():add(0.5) end
            -- NaN and signed zeros in a few places
            local fs = src:view(-1)
            fs[2] = 0 / 0
            fs[5] = -0.0
            local fo = self:view(-1)
            fo[1] = 0.0
            local got = self:scatter_reduce(sh[2], index, src, red, { include_self = inc })
            same_bits(got, ref_fold(self, sh[2], index, src, red, inc), 'result')
          end)
        end
      end
    end
  end

  it('-0 against +0 keeps the first (amax and amin), NaN wins and stays', function()
    local self = dpl.tensor({ 0.0, 0.0 / 0.0, 1.0 }, { dtype = 'float32' })
    local idx = dpl.tensor({ 1, 1, 2, 3, 3 })
    local src = dpl.tensor({ -0.0, 5.0, 7.0, 0.0 / 0.0, 2.0 }, { dtype = 'float32' })
    for _, red in ipairs({ 'amax', 'amin' }) do
      local r = self:scatter_reduce(1, idx, src, red)
      same_bits(r, ref_fold(self, 1, idx, src, red, true), red)
      local v = r:totable()
      assert.is_true(v[2] ~= v[2] and v[3] ~= v[3])
    end
    local r = dpl.tensor({ 0.0 }, { dtype = 'float64' }):scatter_reduce(1, dpl.tensor({ 1 }), dpl.tensor({ -0.0 },
      { dtype = 'float64' }), 'amax')
    assert.are.equal(math.huge, 1 / r:item()) -- +0 kept
  end)

  it('an index out of range: the message, whatever the path', function()
    for _, case in ipairs({ { { 4 }, { 1, 2, 5, 1 } }, { { 4 }, { 0 } }, { { 2, 4 }, { { 1, 2 }, { 3, 9 } } } }) do
      local self = dpl.zeros(case[1])
      local idx = dpl.tensor(case[2])
      local src = dpl.ones(idx:size())
      local ok, e = pcall(function() return self:scatter_reduce(#case[1], idx, src, 'amax') end)
      assert.is_false(ok)
      assert.matches('is out of range for dim', tostring(e))
    end
  end)

  it('a 1M fold into 1000 (the bench case) matches the reference on a sample of positions', function()
    dpl.manual_seed(5)
    local src, idx = dpl.randn(100000), dpl.randint(1, 1001, { 100000 })
    local t = dpl.zeros(1000)
    same_bits(t:scatter_reduce(1, idx, src, 'amax'), ref_fold(t, 1, idx, src, 'amax', true), 'amax')
    same_bits(t:scatter_reduce(1, idx, src, 'sum'), ref_fold(t, 1, idx, src, 'sum', true), 'sum')
  end)
end)
