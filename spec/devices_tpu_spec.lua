-- devices_tpu_spec.lua: the `tpu_cores` argument (spec/devices.md):
-- _parse_tpu_cores_str, _tpu_cores_valid and parse_tpu_cores. TPU core indices
-- are 1..8 as in the seed; nothing here looks for a TPU.
local D = require 'dpl.devices'
local errors = require 'dpl.errors'

local MSG = 'MisconfigurationException: tpu_cores can only be 1, 8 or [<1-8>]'

local function raises(text, f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, 'expected an error containing: ' .. text)
  assert.is_true(errors.is(e, errors.MisconfigurationException), tostring(e))
  assert.truthy(tostring(e):find(text, 1, true), 'expected "' .. text .. '" in: ' .. tostring(e))
end

describe('dpl.devices._parse_tpu_cores_str', function()
  it('reads "1" and "8" as numbers and anything else as a list of core indices', function()
    local f = D._parse_tpu_cores_str
    assert.are.equal(1, f('1'))
    assert.are.equal(8, f('8'))
    assert.are.equal(8, f(' 8 '))
    assert.are.same({ 1 }, f('1,'))
    assert.are.same({ 2 }, f('2'))
    assert.are.same({ 8 }, f('8,'))
    assert.are.same({ 1, 2 }, f('1, 2'))
    assert.are.same({}, f(''))
    assert.are.same({}, f(','))
    assert.are.same({ 0 }, f('0'))
  end)
  it('(fix) raises MisconfigurationException for a non-integer piece', function()
    raises(MSG .. ", got the string 'a'", D._parse_tpu_cores_str, 'a')
    raises("'1.5' is not an integer core index", D._parse_tpu_cores_str, '1,1.5')
  end)
end)

describe('dpl.devices._tpu_cores_valid', function()
  it('accepts nil, 1, 8 and {k} with 1 <= k <= 8', function()
    for _, v in ipairs({ 1, 8, { 1 }, { 2 }, { 5 }, { 8 } }) do
      assert.is_true(D._tpu_cores_valid(v), require('dpl.devices')._describe(v))
    end
    assert.is_true(D._tpu_cores_valid(nil))
  end)
  it('rejects everything else', function()
    for _, v in ipairs({ 0, 2, 4, 10, -1, 1.5, { 0 }, { 9 }, { -1 }, { 1, 2 }, {}, { 1.5 }, { '1' },
                         '1', '8', { a = 1 }, true }) do
      assert.is_false(D._tpu_cores_valid(v), D._describe(v))
    end
  end)
end)

describe('dpl.devices.parse_tpu_cores', function()
  it('is _parse_tpu_cores under its public name', function()
    assert.are.equal(D._parse_tpu_cores, D.parse_tpu_cores)
  end)

  it('returns valid values as given', function()
    assert.is_nil(D.parse_tpu_cores(nil))
    assert.are.equal(1, D.parse_tpu_cores(1))
    assert.are.equal(8, D.parse_tpu_cores(8))
    local t = { 5 }
    assert.are.equal(t, D.parse_tpu_cores(t))
    assert.are.same({ 5 }, t)
    assert.are.same({ 1 }, D.parse_tpu_cores({ 1 }))
    assert.are.same({ 8 }, D.parse_tpu_cores({ 8 }))
  end)

  it('parses strings', function()
    assert.are.equal(1, D.parse_tpu_cores('1'))
    assert.are.equal(8, D.parse_tpu_cores('8'))
    assert.are.equal(8, D.parse_tpu_cores(' 8 '))
    assert.are.same({ 1 }, D.parse_tpu_cores('1,'))
    assert.are.same({ 2 }, D.parse_tpu_cores('2'))
    assert.are.same({ 7 }, D.parse_tpu_cores(' 7 ,'))
  end)

  it('raises "tpu_cores can only be 1, 8 or [<1-8>]" for invalid values, naming the value', function()
    local cases = {
      { 0, 'got the number 0' }, { 2, 'got the number 2' }, { 10, 'got the number 10' },
      { -1, 'got the number -1' }, { { 0 }, 'got the sequence {0}' }, { { 9 }, 'got the sequence {9}' },
      { { 1, 2 }, 'got the sequence {1, 2}' }, { {}, 'got the sequence {}' },
      { '', "got the string ''" }, { '0', "got the string '0'" }, { '9', "got the string '9'" },
      { '1,2', "got the string '1,2'" }, { '-1', "got the string '-1'" },
    }
    for _, c in ipairs(cases) do raises(MSG .. ', ' .. c[2], D.parse_tpu_cores, c[1]) end
  end)

  it('checks the type first', function()
    local TYPE = "Device ID's (GPU/TPU) must be int, string or sequence of ints or nil"
    raises(TYPE, D.parse_tpu_cores, true)
    raises(TYPE, D.parse_tpu_cores, 1.5)
    raises(TYPE, D.parse_tpu_cores, { a = 1 })
    raises(TYPE, D.parse_tpu_cores, { 1.5 })
    raises(TYPE, D.parse_tpu_cores, print)
  end)

  it('does not depend on the GPUs or look for a TPU', function()
    local run = require 'spec.support.devices_run'
    run.check(nil, { { 'D.parse_tpu_cores(8)', 'ok 8' }, { "D.parse_tpu_cores('3')", 'ok {3}' } })
    run.check(16, { { 'D.parse_tpu_cores({1})', 'ok {1}' }, { 'D.parse_tpu_cores(2)', 'err ' .. MSG } })
  end)
end)
