-- dpl.loggers.tensorboard: TensorBoardLogger. Writes TensorBoard event files
-- (events.out.tfevents.<time>.<host>.<pid>.0) in <save_dir>/<name>/version_N/:
-- TFRecord framing (u64 length, masked CRC32C of it, the data, masked CRC32C of
-- the data) around Event protobufs encoded by hand (wall_time, step,
-- file_version "brain.Event:2", summary{value{tag, simple_value}}), and
-- hparams.yaml. No protobuf or TensorFlow library is involved.
local ffi = require 'ffi'
local bit = require 'bit'
local B = require 'dpl.loggers.base'

local band, bxor, rshift, lshift, bor, tobit = bit.band, bit.bxor, bit.rshift, bit.lshift, bit.bor, bit.tobit

local M = {}

---------------------------------------------------------------- CRC32C

local crc_table = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    if band(c, 1) ~= 0 then c = bxor(rshift(c, 1), tobit(0x82F63B78)) else c = rshift(c, 1) end
  end
  crc_table[i] = c
end

local function u32(x) if x < 0 then return x + 4294967296 end return x end

--- CRC-32C (Castagnoli) of a string, as an unsigned number.
function M.crc32c(s)
  local c = tobit(0xFFFFFFFF)
  for i = 1, #s do
    c = bxor(crc_table[band(bxor(c, s:byte(i)), 0xFF)], rshift(c, 8))
  end
  return u32(bxor(c, tobit(0xFFFFFFFF)))
end

--- TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8 mod 2^32.
function M.masked_crc32c(s)
  local c = tobit(M.crc32c(s))
  local rot = bor(rshift(c, 15), lshift(c, 17))
  return (u32(rot) + 0xA282EAD8) % 4294967296
end

local function le32(n)
  return string.char(n % 256, math.floor(n / 256) % 256, math.floor(n / 65536) % 256, math.floor(n / 16777216) % 256)
end

local function le64(n)
  local b = {}
  for i = 1, 8 do b[i] = string.char(n % 256); n = math.floor(n / 256) end
  return table.concat(b)
end

--- One TFRecord around data.
function M.record(data)
  local len = le64(#data)
  return len .. le32(M.masked_crc32c(len)) .. data .. le32(M.masked_crc32c(data))
end

---------------------------------------------------------------- protobuf

local function varint(n)
  local out = {}
  repeat
    local b = n % 128
    n = math.floor(n / 128)
    if n > 0 then b = b + 128 end
    out[#out + 1] = string.char(b)
  until n == 0
  return table.concat(out)
end
M.varint = varint

local dbuf = ffi.new('double[1]')
local fbuf = ffi.new('float[1]')
local function f64(x) dbuf[0] = x; return ffi.string(dbuf, 8) end
local function f32(x) fbuf[0] = x; return ffi.string(fbuf, 4) end

local function len_field(tag, s) return string.char(tag) .. varint(#s) .. s end

--- Event{wall_time, step, file_version | summary{value{tag, simple_value}...}}
function M.event(wall_time, step, file_version, scalars)
  local parts = { '\009' .. f64(wall_time) }
  if step and step ~= 0 then parts[#parts + 1] = '\016' .. varint(step) end
  if file_version then parts[#parts + 1] = len_field(0x1a, file_version) end
  if scalars then
    local vals = {}
    for _, kv in ipairs(scalars) do
      vals[#vals + 1] = len_field(0x0a, len_field(0x0a, kv[1]) .. '\021' .. f32(kv[2]))
    end
    parts[#parts + 1] = len_field(0x2a, table.concat(vals))
  end
  return table.concat(parts)
end

---------------------------------------------------------------- the logger

local TensorBoardLogger = B.Logger:extend('TensorBoardLogger')
M.TensorBoardLogger = TensorBoardLogger

local function hostname()
  local f = io.open('/proc/sys/kernel/hostname')
  local h = f and f:read('*l') or 'localhost'
  if f then f:close() end
  return h
end

local function pid()
  local f = io.open('/proc/self/stat')
  local p = f and f:read('*l'):match('^(%d+)') or '0'
  if f then f:close() end
  return p
end

pcall(ffi.cdef, 'struct timeval { long tv_sec; long tv_usec; }; int gettimeofday(struct timeval *tv, void *tz);')
local tv = ffi.new('struct timeval')
local function walltime()
  ffi.C.gettimeofday(tv, nil)
  return tonumber(tv.tv_sec) + tonumber(tv.tv_usec) * 1e-6
end

--- TensorBoardLogger{save_dir=, name="lightning_logs", version=, prefix=""}
function TensorBoardLogger:__init(o)
  if type(o) == 'string' then o = { save_dir = o } end
  B.Logger.__init(self, o)
  self.pending = {}
end

function TensorBoardLogger:_open()
  if self.file then return end
  local dir = self:log_dir()
  B.mkdir_p(dir)
  local t = walltime()
  self.file_path = ('%s/events.out.tfevents.%010d.%s.%s.0'):format(dir, math.floor(t), hostname(), pid())
  self.file = assert(io.open(self.file_path, 'wb'))
  self.file:write(M.record(M.event(t, 0, 'brain.Event:2')))
  self.file:flush()
end

function TensorBoardLogger:log_metrics(metrics, step)
  local keys = {}
  for k, v in pairs(metrics) do
    if type(v) == 'number' and k ~= 'epoch' or k == 'epoch' then keys[#keys + 1] = k end
  end
  table.sort(keys)
  local scalars = {}
  for _, k in ipairs(keys) do
    local tag = self.prefix ~= '' and (self.prefix .. '-' .. k) or k
    scalars[#scalars + 1] = { tag, metrics[k] }
  end
  if #scalars == 0 then return end
  self.pending[#self.pending + 1] = M.record(M.event(walltime(), step or 0, nil, scalars))
end

function TensorBoardLogger:save()
  if #self.pending == 0 and self.file then return end
  self:_open()
  if #self.pending > 0 then
    self.file:write(table.concat(self.pending))
    self.pending = {}
  end
  self.file:flush()
end

function TensorBoardLogger:finalize()
  self:save()
  if self.file then self.file:close(); self.file = nil end
end

return M
