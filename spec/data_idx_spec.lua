-- data_idx_spec.lua: the IDX reader (src/data/dpl_idx.c) on the real
-- Fashion-MNIST files of Debian's dataset-fashion-mnist, and on hand-made files:
-- plain and gzip, big-endian multi-byte types, and every kind of broken file.
local ffi = require 'ffi'
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local C = dpl.C

local root = '/usr/share/datasets/fashion-mnist/'

local function be32(n)
  return string.char(bit.band(bit.rshift(n, 24), 255), bit.band(bit.rshift(n, 16), 255),
    bit.band(bit.rshift(n, 8), 255), bit.band(n, 255))
end

local function header(path)
  local hd = ffi.new('dpl_idx_header')
  dpl.check(C.dpl_idx_read_header(path, hd))
  return hd
end

local function read_u8(path)
  local hd = header(path)
  local buf = ffi.new('uint8_t[?]', hd.count)
  dpl.check(C.dpl_idx_read(path, hd, buf, hd.count))
  return buf, hd
end

describe('IDX files', function()
  it('reads the Fashion-MNIST test labels: 10000, first 9 2 1, each class 1000 times', function()
    local buf, hd = read_u8(root .. 't10k-labels-idx1-ubyte.gz')
    assert.are.equal(8, hd.type_code)
    assert.are.equal(1, hd.ndim)
    assert.are.equal(10000, tonumber(hd.dims[0]))
    assert.are.same({ 9, 2, 1 }, { buf[0], buf[1], buf[2] })
    local counts = {}
    for i = 0, 9999 do counts[buf[i]] = (counts[buf[i]] or 0) + 1 end
    for c = 0, 9 do assert.are.equal(1000, counts[c]) end
  end)

  it('reads the Fashion-MNIST test images header: 10000 x 28 x 28 ubyte', function()
    local hd = header(root .. 't10k-images-idx3-ubyte.gz')
    assert.are.same({ 8, 3, 10000, 28, 28, 7840000 },
      { hd.type_code, hd.ndim, tonumber(hd.dims[0]), tonumber(hd.dims[1]), tonumber(hd.dims[2]),
        tonumber(hd.count) })
  end)

  it('converts big-endian int32 and float32 payloads, plain or gzip', function()
    local p = h.write_file(h.tmpname('.idx'), '\0\0\12\1' .. be32(3) .. be32(1) .. be32(256) .. be32(0x7fffffff))
    local hd = header(p)
    local buf = ffi.new('int32_t[3]')
    dpl.check(C.dpl_idx_read(p, hd, buf, 12))
    assert.are.same({ 1, 256, 0x7fffffff }, { buf[0], buf[1], buf[2] })
    os.execute('gzip -f ' .. h.q(p))
    buf = ffi.new('int32_t[3]')
    dpl.check(C.dpl_idx_read(p .. '.gz', hd, buf, 12))
    assert.are.same({ 1, 256, 0x7fffffff }, { buf[0], buf[1], buf[2] })
    os.remove(p .. '.gz')
    -- 1.5f = 0x3fc00000
    p = h.write_file(h.tmpname('.idx'), '\0\0\13\1' .. be32(1) .. be32(0x3fc00000))
    local f = ffi.new('float[1]')
    dpl.check(C.dpl_idx_read(p, header(p), f, 4))
    assert.are.equal(1.5, f[0])
    os.remove(p)
  end)

  local function expect_error(content, pattern, bytes)
    local p = h.write_file(h.tmpname('.idx'), content)
    local hd = ffi.new('dpl_idx_header')
    local buf = ffi.new('uint8_t[64]')
    local ok, err = pcall(function()
      dpl.check(C.dpl_idx_read_header(p, hd))
      dpl.check(C.dpl_idx_read(p, hd, buf, bytes or hd.count * hd.elem_size))
    end)
    os.remove(p)
    assert.is_false(ok)
    assert.matches(pattern, err)
    assert.truthy(err:find(p, 1, true), 'the message names the file: ' .. err)
  end

  it('rejects a wrong magic number', function()
    expect_error('\1\2\8\1' .. be32(1) .. 'x', 'is not an IDX file: magic 01 02 08 01')
    expect_error('\0\0\7\1' .. be32(1) .. 'x', 'is not an IDX file')
    expect_error('\0\0\8\9' .. be32(1) .. 'x', 'is not an IDX file')
  end)

  it('rejects a truncated header, truncated data and trailing bytes', function()
    expect_error('\0\0', 'truncated: 2 of the 4 magic bytes')
    expect_error('\0\0\8\2' .. be32(2), 'truncated in its header %(dimension 2 of 2%)')
    expect_error('\0\0\8\1' .. be32(5) .. 'abc', 'truncated: expected 5 bytes of data, got 3')
    expect_error('\0\0\8\1' .. be32(2) .. 'abc', 'trailing bytes after its 2 elements')
    expect_error('\0\0\8\1' .. be32(0), 'bad size 0 in dimension 1')
  end)

  it('rejects a buffer of the wrong size and a missing file', function()
    expect_error('\0\0\8\1' .. be32(3) .. 'abc', 'holds 3 bytes of data, the buffer has 2', 2)
    local ok, err = pcall(function() dpl.check(C.dpl_idx_read_header('/nonexistent/x.gz', ffi.new('dpl_idx_header'))) end)
    assert.is_false(ok)
    assert.matches('cannot open IDX file /nonexistent/x.gz', err)
  end)
end)
