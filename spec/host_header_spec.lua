-- host_header_spec.lua: include/dpl.h, the text ffi.cdef reads, and the symbols
-- the binary exports agree: every declared function resolves through ffi.C.
local ffi = require 'ffi'
local capi = require 'dpl.capi'
local h = require 'spec.support.helpers'

describe('the C header', function()
  it('is embedded verbatim, less its preprocessor lines', function()
    local text = h.read_all(h.root .. '/include/dpl.h')
    local stripped = {}
    for line in text:gmatch('([^\n]*)\n') do
      if not line:match('^%s*#') then stripped[#stripped + 1] = line end
    end
    assert.are.equal(table.concat(stripped, '\n') .. '\n', capi.header)
  end)

  it('declares functions, each exported by the binary and callable through ffi.C', function()
    local names = capi.declared_functions()
    assert.is_true(#names >= 10, 'expected the API to declare functions, found ' .. #names)
    local missing = {}
    for _, name in ipairs(names) do
      local ok = pcall(function() return ffi.C[name] end)
      if not ok then missing[#missing + 1] = name end
    end
    assert.are.same({}, missing)
  end)

  it('detects a name that is not exported', function()
    ffi.cdef('int dpl_spec_no_such_function_xyz(void);')
    assert.has_error(function() return ffi.C.dpl_spec_no_such_function_xyz end)
  end)

  it('carries errors across as status codes and dpl_last_error()', function()
    local C = capi.C
    local n = ffi.new('int32_t[1]')
    assert.are.equal(0, C.dpl_device_count(C.DPL_DEVICE_CPU, n))
    assert.are.equal(1, n[0])
    local st = C.dpl_device_count(99, n)
    assert.are.equal(C.DPL_EINVAL, st)
    assert.matches('unknown device type 99', ffi.string(C.dpl_last_error()))
    assert.has_error(function() capi.check(C.dpl_device_count(99, n)) end,
      'dpl_device_count: unknown device type 99')
    assert.has_error(function() capi.check(C.dpl_sleep(-1)) end)
  end)
end)
