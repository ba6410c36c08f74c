-- dpl.loggers.crc: the reflected 32-bit CRCs the loggers need, from one table-driven
-- routine: CRC-32 (ISO-HDLC, zlib's and PNG's, polynomial 0xEDB88320) for the PNG encoder
-- and CRC-32C (Castagnoli, 0x82F63B78) for TensorBoard's TFRecord framing. Both start from
-- and end with an xor of 0xFFFFFFFF; the result is an unsigned number.
local ffi = require 'ffi'
local bit = require 'bit'

local band, bxor, rshift, tobit = bit.band, bit.bxor, bit.rshift, bit.tobit

local M = {}

--- A function crc(s) -> unsigned 32-bit CRC of string s, for a reflected polynomial.
function M.make(poly)
  local tbl = {}
  for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
      if band(c, 1) ~= 0 then c = bxor(rshift(c, 1), tobit(poly)) else c = rshift(c, 1) end
    end
    tbl[i] = c
  end
  local ones = tobit(0xFFFFFFFF)
  return function(s)
    local p = ffi.cast('const uint8_t *', s)
    local c = ones
    for i = 0, #s - 1 do c = bxor(tbl[band(bxor(c, p[i]), 0xFF)], rshift(c, 8)) end
    c = bxor(c, ones)
    return c < 0 and c + 4294967296 or c
  end
end

M.crc32 = M.make(0xEDB88320)
M.crc32c = M.make(0x82F63B78)

return M
