-- tensor_random_spec.lua: the Philox 4x32-10 stream behind uniform_ / bernoulli_ / random_: each
-- element i of a draw takes counter (offset + i) under the key (seed). The C kernels run 16 or
-- 64 counters at a time (AVX-512, vectorized loops); a scalar Philox written here in Lua checks
-- their bits, across block remainders, a carry into the counter's high word and thread counts.
local dpl = require 'dpl'
local ffi = require 'ffi'
local bit = require 'bit'

local U64 = ffi.typeof('uint64_t')
local function u32(x) return tonumber(x % 4294967296ULL) end
-- the reference: Random123's philox4x32_10 with ctr = {lo, hi, 0, 0}, key = {lo, hi}
local function philox(seed, ctr)
  seed, ctr = U64(seed), U64(ctr)
  local c0, c1, c2, c3 = u32(ctr), u32(ctr / 4294967296ULL), 0, 0
  local k0, k1 = u32(seed), u32(seed / 4294967296ULL)
  for _ = 1, 10 do
    local p0, p1 = U64(0xD2511F53) * c0, U64(0xCD9E8D57) * c2
    local hi0, lo0, hi1, lo1 = u32(p0 / 4294967296ULL), u32(p0), u32(p1 / 4294967296ULL), u32(p1)
    c0, c1, c2, c3 = bit.bxor(hi1, c1, k0) % 4294967296, lo1, bit.bxor(hi0, c3, k1) % 4294967296, lo0
    k0, k1 = (k0 + 0x9E3779B9) % 4294967296, (k1 + 0xBB67AE85) % 4294967296
  end
  return c0, c1, c2, c3
end

describe('tensor random streams', function()
  it('matches the Philox4x32-10 known answer (counter 0, key 0)', function()
    local a, b, c, d = philox(0, 0)
    assert.are.same({ 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 }, { a, b, c, d })
  end)

  for _, threads in ipairs({ 1, 2 }) do
    it(('bernoulli_ and uniform_ give the scalar Philox bits (%d thread(s))'):format(threads), function()
      local prev = dpl.get_num_threads()
      dpl.set_num_threads(threads)
      -- offsets just below a 2^32 boundary: some blocks carry into the counter's high word
      for _, start in ipairs({ 0, 4294967296 - 37, 3 * 4294967296 - 5 }) do
        for _, n in ipairs({ 1, 15, 16, 17, 63, 64, 65, 100 }) do
          for _, dt in ipairs({ 'float32', 'float64', 'int32' }) do
            for _, p in ipairs({ 0, 0.1, 1 / 3, 0.9, 1 }) do
              dpl.set_rng_state({ seed = 123456789012, offset = start })
              local t = dpl.empty(n, { dtype = dt }):bernoulli_(p)
              for i = 1, n do
                local u0 = philox(123456789012, U64(start) + (i - 1))
                local want = (bit.rshift(u0, 8) % 16777216) / 16777216 < p and 1 or 0
                if t[i]:item() ~= want then
                  error(('bernoulli_(%g) %s, offset %.0f, n %d: element %d is %g, want %d'):format(p, dt, start, n, i,
                    t[i]:item(), want))
                end
              end
            end
          end
          dpl.set_rng_state({ seed = 7, offset = start })
          local t = dpl.empty(n):uniform_(0, 1)
          for i = 1, n do
            local u0 = philox(7, U64(start) + (i - 1))
            local want = (bit.rshift(u0, 8) % 16777216) / 16777216
            assert.are.equal(want, t[i]:item())
          end
        end
      end
      dpl.set_num_threads(prev)
    end)
  end

  it('bernoulli_(p) with p exactly one of the draws: that draw is not below p', function()
    for _, dt in ipairs({ 'float32', 'float64' }) do
      for k = 0, 40 do -- elements 1..41 of the block: the vector lanes and the tail
        local v = bit.rshift(philox(99, k), 8) % 16777216
        local p = v / 16777216
        dpl.set_rng_state({ seed = 99, offset = 0 })
        local t = dpl.empty(41, { dtype = dt }):bernoulli_(p)
        assert.are.equal(0, t[k + 1]:item())
        dpl.set_rng_state({ seed = 99, offset = 0 })
        t = dpl.empty(41, { dtype = dt }):bernoulli_((v + 1) / 16777216)
        assert.are.equal(1, t[k + 1]:item())
      end
    end
  end)

  it('fills a large float32 mask with the rate asked, the same bits whatever the thread count', function()
    local prev = dpl.get_num_threads()
    local function draw(th)
      dpl.set_num_threads(th)
      dpl.manual_seed(5)
      return dpl.empty(3, 100003):bernoulli_(0.9)
    end
    local a, b = draw(1), draw(2)
    dpl.set_num_threads(prev)
    assert.is_true(a:eq(b):all():item())
    assert.is_true(math.abs(a:mean():item() - 0.9) < 0.005)
    -- a non-contiguous target draws into a temporary and copies: the same values as contiguous
    dpl.manual_seed(5)
    local c = dpl.empty(100003, 3):t():bernoulli_(0.9)
    assert.is_true(c:eq(a):all():item())
  end)

  -- float32 normal_ runs a vector Box-Muller (dpl_vm_normal_f32) that hands back to the libm formula
  -- every element whose float32 rounding it cannot vouch for: the bits of the libm loop (DPL_VMATH=off)
  it('normal_ float32: the libm formula\'s bits (scalar Philox, the libm loop), on every path and thread count', function()
    local f32 = ffi.new('float[1]')
    for _, start in ipairs({ 0, 4294967296 - 37 }) do
      for _, ms in ipairs({ { 0, 1 }, { 0.5, 2 }, { -3, 1e-3 } }) do
        dpl.set_rng_state({ seed = 99, offset = start })
        local n = 130
        local t = dpl.empty(n):normal_(ms[1], ms[2])
        for i = 1, n do
          local a, b = philox(99, U64(start) + (i - 1))
          local z = math.sqrt(-2 * math.log((a + 1) / 4294967296)) * math.cos(6.283185307179586 * (b / 4294967296))
          f32[0] = ms[1] + ms[2] * z
          assert.are.equal(f32[0], t[i]:item())
        end
      end
    end
    local prev, path = dpl.get_num_threads(), dpl.vmath()
    local function draw(p, th, mean, sd)
      dpl.vmath(p)
      dpl.set_num_threads(th)
      dpl.manual_seed(11)
      return dpl.empty(1000003):normal_(mean, sd)
    end
    for _, ms in ipairs({ { 0, 1 }, { 0.5, 2 }, { 1e6, 1 }, { 2.5, 1e5 }, { 0, 1e-30 }, { 1, 0 } }) do
      local ref = draw('off', 1, ms[1], ms[2])
      for _, p in ipairs({ 'auto', 'avx2', 'scalar' }) do
        for _, th in ipairs({ 1, 2 }) do
          assert.is_true(draw(p, th, ms[1], ms[2]):eq(ref):all():item(), ('%s, %d thread(s), mean %g std %g'):format(p, th,
            ms[1], ms[2]))
        end
      end
    end
    dpl.vmath(path)
    dpl.set_num_threads(prev)
  end)
end)
