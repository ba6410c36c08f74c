-- tb_events.lua: an independent reader of TensorBoard event files for the specs (bitwise
-- CRC-32C and CRC-32, protobuf decoded by hand, PNG through the system's zlib): records,
-- Event{wall_time, step, file_version, summary}, and per Summary.Value: simple_value,
-- histo (HistogramProto), image (Summary.Image, its PNG decoded), tensor (TensorProto) and
-- plugin data. Shared by trainer_logging_spec.lua and tb_writer_spec.lua.
local ffi = require 'ffi'
local h = require 'spec.support.helpers'

local M = {}

local function crc32c(s)
  local c = 0xFFFFFFFF
  for i = 1, #s do
    c = bit.bxor(c, s:byte(i))
    for _ = 1, 8 do
      local lsb = bit.band(c, 1)
      c = bit.rshift(c, 1)
      if lsb ~= 0 then c = bit.bxor(c, 0x82F63B78) end
    end
  end
  c = bit.bxor(c, 0xFFFFFFFF)
  if c < 0 then c = c + 2^32 end
  return c
end
M.crc32c = crc32c

local function masked(s)
  local c = crc32c(s)
  local rot = (math.floor(c / 2^15) + (c * 2^17) % 2^32) % 2^32
  return (rot + 0xA282EAD8) % 2^32
end

local function u(s, i, n) -- little-endian
  local v = 0
  for k = n - 1, 0, -1 do v = v * 256 + s:byte(i + k) end
  return v
end
local function ube(s, i, n) -- big-endian
  local v = 0
  for k = 0, n - 1 do v = v * 256 + s:byte(i + k) end
  return v
end

local function varint(s, i)
  local v, mul = 0, 1
  while true do
    local b = s:byte(i); i = i + 1
    v = v + (b % 128) * mul
    if b < 128 then return v, i end
    mul = mul * 128
  end
end

local function parse_fields(s)
  local out, i = {}, 1
  while i <= #s do
    local key; key, i = varint(s, i)
    local f, w = math.floor(key / 8), key % 8
    local v
    if w == 0 then v, i = varint(s, i)
    elseif w == 1 then local b = ffi.new('double[1]'); ffi.copy(b, s:sub(i, i + 7), 8); v = b[0]; i = i + 8
    elseif w == 5 then local b = ffi.new('float[1]'); ffi.copy(b, s:sub(i, i + 3), 4); v = b[0]; i = i + 4
    elseif w == 2 then local n; n, i = varint(s, i); v = s:sub(i, i + n - 1); i = i + n
    else error('wire type ' .. w) end
    out[#out + 1] = { f, v }
  end
  return out
end
M.parse_fields = parse_fields

local function packed(s, ct, size)
  local out = {}
  local b = ffi.new(ct .. '[1]')
  for i = 1, #s, size do ffi.copy(b, s:sub(i, i + size - 1), size); out[#out + 1] = b[0] end
  return out
end

--- HistogramProto -> {min, max, num, sum, sum_squares, bucket_limit, bucket} (0 when absent)
function M.histogram(s)
  local hst = { min = 0, max = 0, num = 0, sum = 0, sum_squares = 0, bucket_limit = {}, bucket = {} }
  local names = { 'min', 'max', 'num', 'sum', 'sum_squares' }
  for _, f in ipairs(parse_fields(s)) do
    if f[1] <= 5 then hst[names[f[1]]] = f[2]
    elseif f[1] == 6 then hst.bucket_limit = packed(f[2], 'double', 8)
    elseif f[1] == 7 then hst.bucket = packed(f[2], 'double', 8) end
  end
  return hst
end

--- TensorProto -> {dtype, shape = {dims}, string_val = {...}, float_val, double_val}
function M.tensor(s)
  local t = { dtype = 0, shape = {}, string_val = {} }
  for _, f in ipairs(parse_fields(s)) do
    if f[1] == 1 then t.dtype = f[2]
    elseif f[1] == 2 then
      for _, d in ipairs(parse_fields(f[2])) do
        if d[1] == 2 then t.shape[#t.shape + 1] = (parse_fields(d[2])[1] or { 1, 0 })[2] end
      end
    elseif f[1] == 5 then t.float_val = packed(f[2], 'float', 4)
    elseif f[1] == 6 then t.double_val = packed(f[2], 'double', 8)
    elseif f[1] == 8 then t.string_val[#t.string_val + 1] = f[2] end
  end
  return t
end

---------------------------------------------------------------- PNG

local crc_tab = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do c = bit.band(c, 1) ~= 0 and bit.bxor(bit.rshift(c, 1), 0xEDB88320) or bit.rshift(c, 1) end
  crc_tab[i] = c
end
local function crc32(s)
  local c = bit.tobit(0xFFFFFFFF)
  for i = 1, #s do c = bit.bxor(crc_tab[bit.band(bit.bxor(c, s:byte(i)), 0xFF)], bit.rshift(c, 8)) end
  c = bit.bxor(c, 0xFFFFFFFF)
  return c < 0 and c + 2^32 or c
end

local zlib
do
  pcall(ffi.cdef, 'int uncompress(uint8_t *dest, unsigned long *destLen, const uint8_t *source, unsigned long sourceLen);')
  local ok = pcall(function() return ffi.C.uncompress end)
  if ok then zlib = ffi.C else
    local ok2, lib = pcall(ffi.load, 'z')
    if ok2 then zlib = lib end
  end
end
M.have_zlib = zlib ~= nil

--- PNG bytes -> {width, height, channels, pixels = {...} (HWC, filter 0 rows only)}; checks
--- the signature, each chunk's CRC-32 and (through zlib) the stream's Adler-32.
function M.png(s)
  assert(s:sub(1, 8) == '\137PNG\r\n\026\n', 'PNG signature')
  local i, ihdr, idat = 9, nil, {}
  while i <= #s do
    local len = ube(s, i, 4)
    local kind = s:sub(i + 4, i + 7)
    local data = s:sub(i + 8, i + 7 + len)
    assert(ube(s, i + 8 + len, 4) == crc32(kind .. data), 'CRC of ' .. kind)
    if kind == 'IHDR' then ihdr = data elseif kind == 'IDAT' then idat[#idat + 1] = data end
    i = i + 12 + len
    if kind == 'IEND' then break end
  end
  local w, hh = ube(ihdr, 1, 4), ube(ihdr, 5, 4)
  assert(ihdr:byte(9) == 8, 'bit depth 8')
  local ch = ({ [0] = 1, [4] = 2, [2] = 3, [6] = 4 })[ihdr:byte(10)]
  local out = { width = w, height = hh, channels = ch }
  if not zlib then return out end
  local z = table.concat(idat)
  local n = (w * ch + 1) * hh
  local buf = ffi.new('uint8_t[?]', n)
  local len = ffi.new('unsigned long[1]', n)
  assert(zlib.uncompress(buf, len, z, #z) == 0, 'zlib stream')
  assert(tonumber(len[0]) == n, 'decoded size')
  local px = {}
  for y = 0, hh - 1 do
    local row = y * (w * ch + 1)
    assert(buf[row] == 0, 'filter 0')
    for k = 1, w * ch do px[#px + 1] = buf[row + k] end
  end
  out.pixels = px
  return out
end

---------------------------------------------------------------- events

--- The events of a file: {wall_time, step, file_version, scalars = {tag = simple_value},
--- plugins = {tag = {name, content}}, histos = {tag = histogram}, images = {tag = {height,
--- width, colorspace, png}}, tensors = {tag = tensor}}; asserts every record's framing.
function M.read_events(path)
  local s = h.read_all(path)
  local i, events = 1, {}
  while i <= #s do
    local len = u(s, i, 8)
    assert(masked(s:sub(i, i + 7)) == u(s, i + 8, 4), 'length CRC')
    local d = s:sub(i + 12, i + 11 + len)
    assert(masked(d) == u(s, i + 12 + len, 4), 'data CRC')
    i = i + 16 + len
    local ev = { step = 0, scalars = {}, tags = {}, plugins = {}, histos = {}, images = {}, tensors = {} }
    for _, fv in ipairs(parse_fields(d)) do
      if fv[1] == 1 then ev.wall_time = fv[2]
      elseif fv[1] == 2 then ev.step = fv[2]
      elseif fv[1] == 3 then ev.file_version = fv[2]
      elseif fv[1] == 5 then
        for _, val in ipairs(parse_fields(fv[2])) do
          local tag, sv, meta, histo, image, tensor
          for _, x in ipairs(parse_fields(val[2])) do
            if x[1] == 1 then tag = x[2] elseif x[1] == 2 then sv = x[2] elseif x[1] == 9 then meta = x[2]
            elseif x[1] == 4 then image = x[2] elseif x[1] == 5 then histo = x[2] elseif x[1] == 8 then tensor = x[2] end
          end
          ev.scalars[tag] = sv
          ev.tags[#ev.tags + 1] = tag -- (in the order they were written)
          if meta then -- SummaryMetadata.plugin_data{plugin_name, content}
            local pd = parse_fields(meta)[1][2]
            local f = parse_fields(pd)
            ev.plugins[tag] = { name = f[1][2], content = f[2] and f[2][2] or '' }
          end
          if histo then ev.histos[tag] = M.histogram(histo) end
          if tensor then ev.tensors[tag] = M.tensor(tensor) end
          if image then
            local im = {}
            for _, x in ipairs(parse_fields(image)) do
              im[({ 'height', 'width', 'colorspace', 'png' })[x[1]]] = x[2]
            end
            ev.images[tag] = im
          end
        end
      end
    end
    events[#events + 1] = ev
  end
  return events
end

--- The event files directly in dir (sorted names).
function M.event_files(dir)
  local out = {}
  for _, name in ipairs(require('dpl.loggers.base').listdir(dir)) do
    if name:match('^events%.out%.tfevents%.') then out[#out + 1] = dir .. '/' .. name end
  end
  return out
end

--- A python that can import tensorboard (build/plref/bin/python under the repository root,
--- then python3), or nil.
function M.python()
  for _, py in ipairs({ h.root .. '/build/plref/bin/python', 'python3' }) do
    local _, _, rc = h.sh(h.q(py) .. ' -c "import tensorboard" >/dev/null 2>&1')
    if rc == 0 then return py end
  end
  return nil
end

return M
