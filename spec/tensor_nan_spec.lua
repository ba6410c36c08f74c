-- tensor_nan_spec.lua: NaNs of any bit pattern reach Lua as numbers. LuaJIT keeps type tags in
-- the high bits of NaNs, so the bits of uninitialized memory read as a float (0xffffffff) or a
-- double (0xfffe...) used to come back from item()/totable()/printing as nil, a boolean or a
-- GC object ("bad argument to 'floor' (number expected, got trace)" in bad_input_spec, now and
-- then, when a fuzzed call printed an uninitialized tensor).
local dpl = require 'dpl'
local ffi = require 'ffi'

describe('NaN payloads', function()
  it('float32 NaNs with every sign and payload are numbers in Lua', function()
    local t = dpl.empty(6)
    local p = ffi.cast('uint32_t*', t._data)
    local bits = { 0xffffffff, 0xfffffffe, 0xffc00001, 0x7fffffff, 0x7f800001, 0xff800001 }
    for i, b in ipairs(bits) do p[i - 1] = b end
    for i, v in ipairs(t:totable()) do
      assert.are.equal('number', type(v), 'element ' .. i)
      assert.is_true(v ~= v)
    end
    for i = 1, 6 do assert.is_true(t[i]:item() ~= t[i]:item()) end
    assert.matches('nan, nan, nan', tostring(t), 1, true)
  end)

  it('float64 NaNs whose high bits look like LuaJIT tags are numbers too', function()
    local d = dpl.empty(3, { dtype = 'float64' })
    local q = ffi.cast('uint64_t*', d._data)
    q[0], q[1], q[2] = 0xfffe123456789abcULL, 0xffff000000000001ULL, 0xfff9000000000000ULL
    for _, x in ipairs(d:totable()) do assert.are.equal('number', type(x)); assert.is_true(x ~= x) end
    assert.is_true(d:sum():item() ~= d:sum():item())
  end)
end)
