-- dpl.loggers.tensorboard: TensorBoardLogger. Writes TensorBoard event files
-- (events.out.tfevents.<time>.<host>.<pid>.<n>, n counting this process's files) in <save_dir>/<name>/version_N/:
-- TFRecord framing (u64 length, masked CRC32C of it, the data, masked CRC32C of
-- the data) around Event protobufs encoded by hand (wall_time, step,
-- file_version "brain.Event:2", summary{value{tag, simple_value}}), and
-- hparams.yaml. No protobuf or TensorFlow library is involved.
-- log_hyperparams also writes what TensorBoard's HPARAMS tab reads, as
-- torch.utils.tensorboard.summary.hparams does: three summaries with "hparams"
-- plugin data (_hparams_/experiment, _hparams_/session_start_info,
-- _hparams_/session_end_info), and, with default_hp_metric (the default, as in
-- Lightning), the scalar hp_metric = -1 at step 0. logger.experiment is a SummaryWriter
-- (dpl.loggers.tb_writer) sharing the logger's event file (its FileWriter).
local ffi = require 'ffi'
local bit = require 'bit'
local B = require 'dpl.loggers.base'

local rshift, lshift, bor, tobit = bit.rshift, bit.lshift, bit.bor, bit.tobit

local M = {}

---------------------------------------------------------------- CRC32C

--- CRC-32C (Castagnoli) of a string, as an unsigned number.
M.crc32c = require('dpl.loggers.crc').crc32c

local function u32(x) if x < 0 then return x + 4294967296 end return x end

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
M.len_field, M.f64, M.f32 = len_field, f64, f32

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

---------------------------------------------------------------- hparams plugin

-- google.protobuf.Value: number_value (2), string_value (3). A boolean is a number (1 or 0)
-- with DATA_TYPE_FLOAT64, as torch's hparams() makes it (bool is an int in Python, and its
-- int/float branch comes first)
local function pb_value(v)
  if type(v) == 'boolean' then v = v and 1 or 0 end
  if type(v) == 'number' then return '\017' .. f64(v) end
  return len_field(0x1a, tostring(v))
end
local DATA_TYPE = { number = 3, boolean = 3 } -- DATA_TYPE_FLOAT64; else _STRING (1)

-- Python's str() of a value that is not a dict (a Lua list prints as a Python list: "[1, 2, 3]")
local function py_str(v, nested)
  local tv = type(v)
  if tv == 'boolean' then return v and 'True' or 'False' end
  if tv == 'number' then return B.num(v) end
  if tv == 'string' then return nested and ("'" .. v:gsub("\\", "\\\\"):gsub("'", "\\'") .. "'") or v end
  if tv == 'table' and getmetatable(v) == nil then
    local n = 0
    for _ in pairs(v) do n = n + 1 end
    if n == #v then
      local parts = {}
      for i = 1, #v do parts[i] = py_str(v[i], true) end
      return '[' .. table.concat(parts, ', ') .. ']'
    end
  end
  return tostring(v)
end
M._py_str = py_str

-- a list (1..n keys only; an empty table is not one: it is an empty dict, which flattens to nothing)
local function is_list(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n > 0 and n == #t
end

-- a Summary with one value: tag + SummaryMetadata{plugin_data{plugin_name "hparams", content}}
local function hparams_summary(tag, content)
  local plugin_data = len_field(0x0a, 'hparams') .. len_field(0x12, content)
  local value = len_field(0x0a, tag) .. len_field(0x4a, len_field(0x0a, plugin_data))
  return len_field(0x0a, value)
end

--- Flattens nested tables with '/' (Lightning's _flatten_dict; a list is a value, not a table
--- to flatten) and turns values that are not numbers, booleans or strings into strings (its
--- _sanitize_params: a list becomes Python's str of it, "[1, 2, 3]"). Sorted pairs.
function M.flatten_hparams(params)
  local flat = {}
  local function walk(prefix, t)
    for k, v in pairs(t) do
      local key = prefix and (prefix .. '/' .. tostring(k)) or tostring(k)
      if type(v) == 'table' and getmetatable(v) == nil and not is_list(v) then walk(key, v)
      elseif type(v) == 'number' or type(v) == 'boolean' or type(v) == 'string' then flat[key] = v
      else flat[key] = py_str(v) end
    end
  end
  walk(nil, params or {})
  local keys = {}
  for k in pairs(flat) do keys[#keys + 1] = k end
  table.sort(keys)
  local out = {}
  for i, k in ipairs(keys) do out[i] = { k, flat[k] } end
  return out
end

--- The three hparams-plugin summaries (encoded Summary messages) for hparams (sorted
--- pairs) and metric tags: experiment, session_start_info, session_end_info.
function M.hparams_summaries(pairs_list, metric_tags)
  local infos, entries = {}, {}
  for _, kv in ipairs(pairs_list) do
    local name, v = kv[1], kv[2]
    infos[#infos + 1] = len_field(0x22, len_field(0x0a, name) .. '\032' .. varint(DATA_TYPE[type(v)] or 1))
    entries[#entries + 1] = len_field(0x0a, len_field(0x0a, name) .. len_field(0x12, pb_value(v)))
  end
  for _, tag in ipairs(metric_tags) do
    infos[#infos + 1] = len_field(0x2a, len_field(0x0a, len_field(0x12, tag)))
  end
  local experiment = len_field(0x12, table.concat(infos))           -- HParamsPluginData.experiment
  local start = len_field(0x1a, table.concat(entries))              -- .session_start_info
  local stop = len_field(0x22, '\008\001')                          -- .session_end_info{STATUS_SUCCESS}
  return {
    hparams_summary('_hparams_/experiment', experiment),
    hparams_summary('_hparams_/session_start_info', start),
    hparams_summary('_hparams_/session_end_info', stop),
  }
end

--- An Event around an encoded Summary (step: nil or 0 is not written, as protobuf's default).
function M.summary_event(wall_time, summary, step)
  local s = (step and step ~= 0) and ('\016' .. varint(step)) or ''
  return '\009' .. f64(wall_time) .. s .. len_field(0x2a, summary)
end

---------------------------------------------------------------- the logger

local TensorBoardLogger = B.Logger:extend('TensorBoardLogger')
M.TensorBoardLogger = TensorBoardLogger

function M.hostname()
  local f = io.open('/proc/sys/kernel/hostname')
  local h = f and f:read('*l') or 'localhost'
  if f then f:close() end
  return h
end

function M.pid()
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
M.walltime = walltime

-- Lightning 1.9's arguments, then those it passes on to torch's SummaryWriter
local known = { save_dir = true, name = true, version = true, log_graph = true, default_hp_metric = true,
  prefix = true, sub_dir = true, comment = true, purge_step = true, max_queue = true, flush_secs = true,
  filename_suffix = true }

--- TensorBoardLogger{save_dir=, name="lightning_logs", version=, log_graph=false, default_hp_metric=true,
--- prefix="", sub_dir=nil, and SummaryWriter's comment=, max_queue=, flush_secs=, filename_suffix=""}:
--- events in <save_dir>/<name>/version_N[/<sub_dir>]/. Any other key raises, naming it.
function TensorBoardLogger:__init(o, rest)
  o = B.options(o, rest) -- also TensorBoardLogger(save_dir, {name=, ...})
  B.check_options(o, known, 'TensorBoardLogger', 2)
  B.Logger.__init(self, o)
  local errors = require 'dpl.errors'
  if o.sub_dir ~= nil and type(o.sub_dir) ~= 'string' then
    errors.MisconfigurationException:raise(('TensorBoardLogger: sub_dir must be a path (string), got %s'):format(tostring(o.sub_dir)), 2)
  end
  if o.filename_suffix ~= nil and type(o.filename_suffix) ~= 'string' then
    errors.MisconfigurationException:raise(('TensorBoardLogger: filename_suffix must be a string, got %s'):format(tostring(o.filename_suffix)), 2)
  end
  if o.purge_step ~= nil then
    errors.MisconfigurationException:raise('TensorBoardLogger: purge_step is not supported (events are only ever appended)', 2)
  end
  self.sub_dir = o.sub_dir
  self._filename_suffix = o.filename_suffix or ''
  self.default_hp_metric = o.default_hp_metric ~= false
  self._log_graph = false
  if o.log_graph then
    require('dpl.log').warn('TensorBoardLogger(log_graph=True): dplhost does not write the model graph (experiment:add_graph raises NotImplementedError).')
  end
  self._writer_opts = { filename_suffix = self._filename_suffix, max_queue = o.max_queue, flush_secs = o.flush_secs }
end

--- logger.experiment (Lightning's property, read as a field): on global rank 0 a SummaryWriter
--- (dpl.loggers.tb_writer) writing into log_dir(), into the same event file as log_metrics;
--- created on first read. On the other ranks Lightning's dummy, whose methods do nothing.
TensorBoardLogger._properties = {
  experiment = function(self)
    return B.rank_zero_experiment(self, function()
      local o = {}
      for k, v in pairs(self._writer_opts) do o[k] = v end
      o.file_writer = self:_file_writer()
      return require('dpl.loggers.tb_writer').SummaryWriter(self.log_dir, o)
    end)
  end,
}

--- The FileWriter of log_dir (the events file: created on the first save).
function TensorBoardLogger:_file_writer()
  local fw = rawget(self, '_fw')
  if fw == nil then
    fw = require('dpl.loggers.tb_writer').FileWriter(self.log_dir, self._filename_suffix)
    self._fw = fw
  end
  return fw
end

--- logger.log_dir: <save_dir>/<name>/version_N, then /<sub_dir> when given (Lightning's).
function TensorBoardLogger._properties.log_dir(self)
  local d = B.Logger._properties.log_dir(self)
  if self.sub_dir ~= nil then d = d .. '/' .. self.sub_dir end
  return d
end

--- hparams.yaml, and the HPARAMS tab's summaries; metrics (a table, or a number for
--- hp_metric) default to {hp_metric = -1} with default_hp_metric.
function TensorBoardLogger:log_hyperparams(params, metrics)
  B.Logger.log_hyperparams(self, params)
  if type(metrics) == 'number' then metrics = { hp_metric = metrics } end
  if metrics == nil and self.default_hp_metric then metrics = { hp_metric = -1 } end
  if metrics == nil or next(metrics) == nil then return end
  self:log_metrics(metrics, 0)
  local tags = {}
  for k in pairs(metrics) do tags[#tags + 1] = k end
  table.sort(tags)
  local t = walltime()
  local fw = self:_file_writer()
  for _, summary in ipairs(M.hparams_summaries(M.flatten_hparams(params), tags)) do
    fw:add_record(M.record(M.summary_event(t, summary)))
  end
  self:save()
end

--- log_metrics(metrics, step, order): `order` (the Trainer passes it) lists the keys in the
--- order they were first logged, the order Lightning writes them in; without it they are sorted.
function TensorBoardLogger:log_metrics(metrics, step, order)
  if order == nil then
    order = {}
    for k in pairs(metrics) do order[#order + 1] = k end
    table.sort(order, function(a, b) return tostring(a) < tostring(b) end)
  end
  local scalars = {}
  for _, k in ipairs(order) do
    local v = metrics[k]
    if type(v) == 'number' then
      local tag = self.prefix ~= '' and (self.prefix .. '-' .. k) or k
      scalars[#scalars + 1] = { tag, v }
    end
  end
  if #scalars == 0 then return end
  self:_file_writer():add_record(M.record(M.event(walltime(), step or 0, nil, scalars)))
end

--- Writes the waiting events (opening the event file on the first call), the experiment's too.
function TensorBoardLogger:save()
  local e = rawget(self, '_experiment')
  if e then e:flush() end
  local fw = self:_file_writer()
  if #fw.pending == 0 and fw.file then return end
  fw:flush()
end

--- save(), then closes the files (a later save opens new ones, as torch's writer after close).
function TensorBoardLogger:finalize()
  self:save()
  local e = rawget(self, '_experiment')
  if e then e:close() end
  self:_file_writer():close()
end


-- (Lightning's @rank_zero_only methods: on other ranks they do nothing)
B.rank_zero_only(TensorBoardLogger, { 'log_hyperparams', 'log_metrics', 'save', 'finalize' })

return M
