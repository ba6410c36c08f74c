-- devices_ids_spec.lua: the `gpus` argument (spec/devices.md): _check_data_type,
-- the string and list normalisations, sanitize_gpu_ids, parse_gpu_ids and
-- determine_root_gpu_device, with 0, 1, 2 and 16 simulated GPUs (one dplhost
-- subprocess per GPU count) and in process where the GPU count does not matter.
local D = require 'dpl.devices'
local errors = require 'dpl.errors'
local run = require 'spec.support.devices_run'

local NONE = 'GPUs requested but none are available.'
local TYPE = "MisconfigurationException: Device ID's (GPU/TPU) must be int, string or sequence of ints or nil"

local function raises(cls, text, f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, 'expected an error containing: ' .. text)
  assert.is_true(errors.is(e, cls), 'wrong error class: ' .. tostring(e))
  assert.truthy(tostring(e):find(text, 1, true), 'expected "' .. text .. '" in: ' .. tostring(e))
  return e
end

describe('dpl.devices._check_data_type', function()
  it('accepts nil, integers, strings and sequences of integers', function()
    for _, v in ipairs({ 0, 1, 3, -1, -2, 1.0, '0', '', 'a,b', {}, { 0 }, { 1, 3 }, { -1 } }) do
      assert.has_no.errors(function() D._check_data_type(v) end)
    end
    assert.has_no.errors(function() D._check_data_type(nil) end)
  end)

  it('rejects booleans, fractions, maps, functions, userdata and cdata, saying what it got', function()
    local ffi = require 'ffi'
    local cases = {
      { true, 'got the boolean true' }, { false, 'got the boolean false' },
      { 0.1, 'got the number 0.1' }, { 1.5, 'got the number 1.5' },
      { { a = 1 }, 'got a table that is not a sequence (a map)' },
      { { 1, nil, 3 }, 'not a sequence' }, { { [0] = 1 }, 'not a sequence' },
      { { 1, x = 2 }, 'not a sequence' },
      { print, 'got a function' }, { io.stdout, 'got a userdata' },
      { ffi.new('int64_t', 1), 'got a cdata ctype<int64_t>' },
      { coroutine.create(print), 'got a thread' },
      { math.huge, 'got the number inf' },
    }
    for _, c in ipairs(cases) do
      local e = raises(errors.MisconfigurationException, c[2], D._check_data_type, c[1])
      assert.truthy(tostring(e):find(TYPE, 1, true), tostring(e))
    end
  end)

  it('(fix) rejects sequences whose elements are not integers', function()
    raises(errors.MisconfigurationException, "got the sequence {'0'} (element 1 is the string '0')",
           D._check_data_type, { '0' })
    raises(errors.MisconfigurationException, 'element 2 is the number 1.5', D._check_data_type, { 0, 1.5 })
    raises(errors.MisconfigurationException, 'element 1 is the boolean true', D._check_data_type, { true })
    raises(errors.MisconfigurationException, 'element 1 is the sequence {}', D._check_data_type, { {} })
  end)

  it('rejects a device object with a clear description', function()
    raises(errors.MisconfigurationException, 'got the device cpu', D._check_data_type, D.device('cpu'))
  end)
end)

describe('dpl.devices._normalize_parse_gpu_string_input', function()
  local f = D._normalize_parse_gpu_string_input

  it('returns non-strings unchanged', function()
    local t = { 1, 2 }
    assert.are.equal(t, f(t))
    assert.are.equal(3, f(3))
    assert.is_nil(f(nil))
  end)

  it('turns "-1" into the number -1 (after trimming)', function()
    assert.are.equal(-1, f('-1'))
    assert.are.equal(-1, f('  -1 '))
  end)

  it('turns any other string into a list of GPU ids', function()
    assert.are.same({ 0 }, f('0'))
    assert.are.same({ 3 }, f('3'))
    assert.are.same({ 1 }, f('1,'))
    assert.are.same({ 1, 2 }, f(' 1 , 2 '))
    assert.are.same({ 1, 3 }, f('1, 3'))
    assert.are.same({}, f(''))
    assert.are.same({}, f(','))
    assert.are.same({}, f('  '))
    assert.are.same({ 0, 1, 2 }, f('0,,1,2,'))
    assert.are.same({ -1, 2 }, f('-1,2'))
    assert.are.same({ 7 }, f('+7'))
    assert.are.equal('number', type(f('0')[1]))
  end)

  it('(fix) raises MisconfigurationException naming the whole input for a non-integer piece', function()
    raises(errors.MisconfigurationException, "Invalid gpus string '1,a': 'a' is not an integer", f, '1,a')
    raises(errors.MisconfigurationException, "Invalid gpus string '1.5': '1.5'", f, '1.5')
    raises(errors.MisconfigurationException, "'0x1'", f, '0x1')
    raises(errors.MisconfigurationException, "'1 2'", f, '1 2')
    raises(errors.MisconfigurationException, "'cuda:0'", f, 'cuda:0')
  end)
end)

describe('dpl.devices._normalize_parse_gpu_input_to_list', function()
  local f = D._normalize_parse_gpu_input_to_list

  it('copies sequences', function()
    local t = { 1, 3 }
    local r = f(t)
    assert.are.same({ 1, 3 }, r)
    assert.are_not.equal(t, r)
    r[1] = 9
    assert.are.same({ 1, 3 }, t)
  end)

  it('maps 0 to nil, n > 0 to {0..n-1}, other negatives to {}', function()
    assert.is_nil(f(0))
    assert.are.same({ 0 }, f(1))
    assert.are.same({ 0, 1, 2 }, f(3))
    assert.are.same({}, f(-2))
    assert.are.same({}, f(-100))
  end)

  it('maps -1 to every available GPU', function()
    run.check(3, { { 'D._normalize_parse_gpu_input_to_list(-1)', 'ok {0, 1, 2}' } })
    run.check(nil, { { 'D._normalize_parse_gpu_input_to_list(-1)', 'ok {}' } })
  end)
end)

describe('dpl.devices.get_all_available_gpus', function()
  it('lists the ids of the simulated GPUs, {} when there are none', function()
    run.check(nil, { { 'D.get_all_available_gpus()', 'ok {}' } })
    run.check(0, { { 'D.get_all_available_gpus()', 'ok {}' } })
    run.check(1, { { 'D.get_all_available_gpus()', 'ok {0}' } })
    run.check(2, { { 'D.get_all_available_gpus()', 'ok {0, 1}' } })
    run.check(16, { { 'D.get_all_available_gpus()',
                      'ok {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}' } })
  end)

  it('reports a bad DPL_VIRTUAL_GPUS as a MisconfigurationException', function()
    run.check('x', { { 'D.get_all_available_gpus()',
                       "err MisconfigurationException: DPL_VIRTUAL_GPUS must be an integer" } })
  end)
end)

describe('dpl.devices.sanitize_gpu_ids', function()
  it('returns the very same list when every id is available', function()
    run.check(2, {
      { '(function() local t = {1, 0}; return D.sanitize_gpu_ids(t) == t end)()', 'ok true' },
      { 'D.sanitize_gpu_ids({0, 1})', 'ok {0, 1}' },
      { 'D.sanitize_gpu_ids({})', 'ok {}' },
    })
  end)

  it('raises showing both lists, and (fix) never swaps in other GPUs', function()
    run.check(2, {
      { 'D.sanitize_gpu_ids({1, 3})',
        'err MisconfigurationException: You requested GPUs: {1, 3}. But your machine only has: {0, 1}' },
      -- Lightning 0.9 returned {0, 1} here (same length as the available list)
      { 'D.sanitize_gpu_ids({2, 3})', 'err You requested GPUs: {2, 3}. But your machine only has: {0, 1}' },
      { 'D.sanitize_gpu_ids({-1})', 'err You requested GPUs: {-1}' },
    })
    run.check(nil, {
      { 'D.sanitize_gpu_ids({0})', 'err You requested GPUs: {0}. But your machine only has: {} (no ' },
    })
  end)

  it('(fix) raises for duplicate ids', function()
    run.check(2, {
      { 'D.sanitize_gpu_ids({0, 0})', "err MisconfigurationException: Device ID's (GPU) must be unique." },
      { 'D.sanitize_gpu_ids({1, 0, 1})', "err Device ID's (GPU) must be unique. Got {1, 0, 1}" },
    })
  end)

  it('rejects a non-sequence', function()
    run.check(2, { { 'D.sanitize_gpu_ids(1)', 'err MisconfigurationException: sanitize_gpu_ids: expected a sequence' } })
  end)
end)

describe('dpl.devices.parse_gpu_ids', function()
  it('is _parse_gpu_ids under its public name', function()
    assert.are.equal(D._parse_gpu_ids, D.parse_gpu_ids)
  end)

  it('returns nil for nil and the number 0, whatever the machine', function()
    assert.is_nil(D.parse_gpu_ids(nil))
    assert.is_nil(D.parse_gpu_ids(0))
    run.check(nil, { { 'D.parse_gpu_ids(0)', 'ok nil' }, { 'D.parse_gpu_ids(nil)', 'ok nil' } })
  end)

  it('with no GPU: every request raises "GPUs requested but none are available."', function()
    local req = 'err MisconfigurationException: ' .. NONE
    run.check(nil, {
      { 'D.parse_gpu_ids(-1)', req }, { "D.parse_gpu_ids('-1')", req },
      { 'D.parse_gpu_ids({})', req }, { "D.parse_gpu_ids('')", req }, { "D.parse_gpu_ids(',')", req },
      { 'D.parse_gpu_ids(-2)', req },
      { 'D.parse_gpu_ids(1)', 'err You requested GPUs: {0}. But your machine only has: {}' },
      { "D.parse_gpu_ids('0')", 'err You requested GPUs: {0}. But your machine only has: {}' },
      { 'D.parse_gpu_ids({0})', 'err You requested GPUs: {0}' },
      { 'D.parse_gpu_ids(-1)', 'err ' .. NONE .. ' Got gpus = -1 (no ' },
    })
  end)

  it('with 1 GPU', function()
    run.check(1, {
      { 'D.parse_gpu_ids(1)', 'ok {0}' }, { 'D.parse_gpu_ids(-1)', 'ok {0}' },
      { "D.parse_gpu_ids('-1')", 'ok {0}' }, { "D.parse_gpu_ids('0')", 'ok {0}' },
      { 'D.parse_gpu_ids({0})', 'ok {0}' }, { "D.parse_gpu_ids('0,')", 'ok {0}' },
      { 'D.parse_gpu_ids(2)', 'err You requested GPUs: {0, 1}. But your machine only has: {0}' },
      { "D.parse_gpu_ids('1')", 'err You requested GPUs: {1}. But your machine only has: {0}' },
      { "D.parse_gpu_ids('')", 'err ' .. NONE .. " Got gpus = '' (this process sees 1 GPU)" },
      { 'D.parse_gpu_ids({0, 0})', "err Device ID's (GPU) must be unique." },
    })
  end)

  it('with 2 GPUs: numbers count GPUs, strings and sequences name them', function()
    run.check(2, {
      { 'D.parse_gpu_ids(1)', 'ok {0}' }, { 'D.parse_gpu_ids(2)', 'ok {0, 1}' },
      { 'D.parse_gpu_ids(-1)', 'ok {0, 1}' }, { "D.parse_gpu_ids('-1')", 'ok {0, 1}' },
      { "D.parse_gpu_ids(' -1 ')", 'ok {0, 1}' },
      { "D.parse_gpu_ids('0')", 'ok {0}' }, { "D.parse_gpu_ids('1')", 'ok {1}' },
      { "D.parse_gpu_ids('1,')", 'ok {1}' }, { "D.parse_gpu_ids(' 1 , 0 ')", 'ok {1, 0}' },
      { "D.parse_gpu_ids('0, 1')", 'ok {0, 1}' },
      { 'D.parse_gpu_ids({1})', 'ok {1}' }, { 'D.parse_gpu_ids({1, 0})', 'ok {1, 0}' },
      { 'D.parse_gpu_ids(3)', 'err You requested GPUs: {0, 1, 2}. But your machine only has: {0, 1}' },
      { "D.parse_gpu_ids('1, 3')", 'err You requested GPUs: {1, 3}. But your machine only has: {0, 1}' },
      { 'D.parse_gpu_ids({2})', 'err You requested GPUs: {2}' },
      { 'D.parse_gpu_ids({-1})', 'err You requested GPUs: {-1}' },
      { "D.parse_gpu_ids('2')", 'err You requested GPUs: {2}' },
      { 'D.parse_gpu_ids(-2)', 'err ' .. NONE .. ' Got gpus = -2 (this process sees 2 GPUs)' },
      { "D.parse_gpu_ids(',')", 'err ' .. NONE },
      { 'D.parse_gpu_ids({})', 'err ' .. NONE },
      { "D.parse_gpu_ids('a')", "err MisconfigurationException: Invalid gpus string 'a'" },
      { "D.parse_gpu_ids('0,1.5')", "err Invalid gpus string '0,1.5': '1.5' is not an integer" },
      { 'D.parse_gpu_ids(0.1)', 'err ' .. TYPE .. ', got the number 0.1' },
      { 'D.parse_gpu_ids(false)', 'err ' .. TYPE .. ', got the boolean false' },
      { 'D.parse_gpu_ids(true)', 'err ' .. TYPE },
      { "D.parse_gpu_ids({'0'})", 'err ' .. TYPE },
      { 'D.parse_gpu_ids({x = 0})', 'err ' .. TYPE },
      { 'D.parse_gpu_ids(print)', 'err ' .. TYPE .. ', got a function' },
      { 'D.parse_gpu_ids({0, 0})', "err Device ID's (GPU) must be unique." },
    })
  end)

  it('with 16 GPUs', function()
    run.check(16, {
      { 'D.parse_gpu_ids(16)', 'ok {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}' },
      { '#D.parse_gpu_ids(-1)', 'ok 16' },
      { "D.parse_gpu_ids('15, 3,7')", 'ok {15, 3, 7}' },
      { "D.parse_gpu_ids('16')", 'err You requested GPUs: {16}' },
      { 'D.parse_gpu_ids(17)', 'err You requested GPUs: {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}' },
      { 'D.parse_gpu_ids({3, 15})', 'ok {3, 15}' },
      { "D.parse_gpu_ids('10')", 'ok {10}' },
      { 'D.parse_gpu_ids(1e9)', 'err MisconfigurationException: You requested 1000000000 GPUs but your machine only has 16 GPUs.' },
    })
  end)

  it('returns a fresh list and never mutates the caller\'s', function()
    run.check(2, {
      { '(function() local t = {1, 0}; local r = D.parse_gpu_ids(t); return {r ~= t, t[1], t[2], #t} end)()',
        'ok {true, 1, 0, 2}' },
    })
  end)
end)

describe('dpl.devices.determine_root_gpu_device', function()
  local f = D.determine_root_gpu_device
  it('returns nil for nil and the first id of a list', function()
    assert.is_nil(f(nil))
    assert.are.equal(0, f({ 0 }))
    assert.are.equal(1, f({ 1 }))
    assert.are.equal(3, f({ 3 }))
    assert.are.equal(1, f({ 1, 2 }))
  end)
  it('raises for a non-list and for an empty list', function()
    raises(errors.TypeError, 'gpus should be a list', f, 1)
    raises(errors.TypeError, 'gpus should be a list', f, '0')
    raises(errors.TypeError, 'gpus should be a list', f, { a = 1 })
    raises(errors.ValueError, 'gpus should be a non empty list', f, {})
  end)
end)

describe('dpl.devices._gpus_allowed_type (argparse type of --gpus)', function()
  it('reads "3" as the number 3 and "0,1" / "3," as id strings', function()
    assert.are.equal(3, D._gpus_allowed_type('3'))
    assert.are.equal(-1, D._gpus_allowed_type('-1'))
    assert.are.equal('0,1', D._gpus_allowed_type('0,1'))
    assert.are.equal('3,', D._gpus_allowed_type('3,'))
    assert.are.equal('abc', D._gpus_allowed_type('abc'))
  end)
end)
