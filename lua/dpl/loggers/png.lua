-- dpl.loggers.png: a small PNG encoder in Lua (no libpng, no zlib library), for the
-- TensorBoard writer's images: 8-bit grey, grey+alpha, RGB or RGBA; every scanline
-- with filter 0; the zlib stream (RFC 1950) made of DEFLATE stored blocks (RFC 1951,
-- BTYPE 00: no compression) followed by its Adler-32; chunks with their CRC-32. Linear
-- in the image size.
local ffi = require 'ffi'

local M = {}

--- CRC-32 (ISO-HDLC, zlib's and PNG's) of a string, as an unsigned number.
M.crc32 = require('dpl.loggers.crc').crc32

--- Adler-32 of a string (zlib's checksum), as an unsigned number.
function M.adler32(s)
  local p = ffi.cast('const uint8_t *', s)
  local a, b, n, i = 1, 0, #s, 0
  while i < n do
    local stop = math.min(n, i + 5552) -- the sums stay exact before the modulo
    for j = i, stop - 1 do a = a + p[j]; b = b + a end
    a, b, i = a % 65521, b % 65521, stop
  end
  return b * 65536 + a
end

local function be32(n)
  return string.char(math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256)
end

--- A zlib stream of data in stored (uncompressed) DEFLATE blocks of at most 65535 bytes.
function M.zlib_stored(data)
  local out, n, i = { '\120\001' }, #data, 1 -- CMF 0x78 (deflate, 32K window), FLG 0x01 (check bits)
  repeat
    local len = math.min(65535, n - i + 1)
    local final = (i + len > n) and 1 or 0
    local nlen = 65535 - len
    out[#out + 1] = string.char(final, len % 256, math.floor(len / 256), nlen % 256, math.floor(nlen / 256))
    out[#out + 1] = data:sub(i, i + len - 1)
    i = i + len
  until i > n
  out[#out + 1] = be32(M.adler32(data))
  return table.concat(out)
end

local function chunk(kind, data)
  return be32(#data) .. kind .. data .. be32(M.crc32(kind .. data))
end

local COLOR_TYPE = { [1] = 0, [2] = 4, [3] = 2, [4] = 6 } -- grey, grey+alpha, RGB, RGBA

--- PNG bytes of an image of width x height pixels with `channels` (1 grey, 2 grey+alpha,
--- 3 RGB, 4 RGBA) 8-bit samples each: pixels is a string or a uint8 cdata pointer/array
--- holding height rows of width * channels bytes, top row first (HWC order).
function M.encode(width, height, channels, pixels)
  for name, v in pairs({ width = width, height = height }) do
    if type(v) ~= 'number' or v < 1 or v ~= math.floor(v) or v > 2147483647 then
      error(('png.encode: %s must be a positive integer, got %s'):format(name, tostring(v)), 2)
    end
  end
  if not COLOR_TYPE[channels] then
    error(('png.encode: channels must be 1, 2, 3 or 4, got %s'):format(tostring(channels)), 2)
  end
  local row = width * channels
  local src
  if type(pixels) == 'string' then
    if #pixels ~= row * height then
      error(('png.encode: pixels must hold %d bytes (%dx%dx%d), got %d'):format(row * height, height, width, channels, #pixels), 2)
    end
    src = ffi.cast('const uint8_t *', pixels)
  elseif type(pixels) == 'cdata' then
    src = ffi.cast('const uint8_t *', pixels)
  else
    error(('png.encode: pixels must be a string or uint8 cdata, got %s'):format(type(pixels)), 2)
  end
  local raw = ffi.new('uint8_t[?]', (row + 1) * height) -- zeroed: each scanline's filter byte is 0
  for y = 0, height - 1 do ffi.copy(raw + y * (row + 1) + 1, src + y * row, row) end
  local ihdr = be32(width) .. be32(height) .. string.char(8, COLOR_TYPE[channels], 0, 0, 0)
  return '\137PNG\r\n\026\n' .. chunk('IHDR', ihdr)
    .. chunk('IDAT', M.zlib_stored(ffi.string(raw, (row + 1) * height))) .. chunk('IEND', '')
end

return M
