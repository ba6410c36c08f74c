-- dpl.loggers.tb_writer: TensorBoardLogger.experiment, a SummaryWriter in the manner of
-- torch.utils.tensorboard's: add_scalar, add_scalars (a run directory per tag), add_histogram
-- (numpy's histogram with SummaryWriter's default "tensorflow" bucket edges, torch's
-- HistogramProto), add_histogram_raw, add_image / add_images (torch's dataformats, scaling
-- and grid; PNG from dpl.loggers.png), add_text (the text plugin's string tensor), flush,
-- close, log_dir; what it does not implement raises NotImplementedError naming it. Also the
-- FileWriter the logger and the writer share (one event file per directory and process, opened
-- on the first flush) and the DummyExperiment of the ranks other than 0.
local ffi = require 'ffi'
local errors = require 'dpl.errors'
local B = require 'dpl.loggers.base'
local TB = require 'dpl.loggers.tensorboard'

local varint, len_field, f64, f32 = TB.varint, TB.len_field, TB.f64, TB.f32
local floor, huge = math.floor, math.huge

local M = {}

local function fail(cls, level, fmt, ...)
  errors[cls]:raise(select('#', ...) > 0 and fmt:format(...) or fmt, level + 1)
end

---------------------------------------------------------------- FileWriter

M._uid = 0 -- event files opened by this process (the last part of their names)

--- FileWriter(dir, filename_suffix): records wait in `pending` until flush(), which opens
--- <dir>/events.out.tfevents.<time>.<host>.<pid>.<n><suffix> on first use (its first record
--- the file_version event). close() flushes and closes; a later flush opens a new file.
local FileWriter = require('dpl.class').Object:extend('FileWriter')
M.FileWriter = FileWriter

function FileWriter:__init(dir, filename_suffix)
  self.dir = dir
  self.filename_suffix = filename_suffix or ''
  self.pending = {}
  self.last_flush = TB.walltime()
end

function FileWriter:get_logdir() return self.dir end

function FileWriter:add_record(rec) self.pending[#self.pending + 1] = rec end

function FileWriter:_open()
  if self.file then return end
  B.mkdir_p(self.dir)
  local t = TB.walltime()
  -- n counts the files of this process (TensorFlow's global uid): a file reopened within the
  -- same second never truncates the previous one
  local path
  repeat
    path = ('%s/events.out.tfevents.%010d.%s.%s.%d%s'):format(self.dir, floor(t), TB.hostname(), TB.pid(), M._uid,
                                                                self.filename_suffix)
    M._uid = M._uid + 1
    local f = io.open(path, 'rb')
    if f then f:close() end
  until not f
  self.path = path
  local f, err = io.open(path, 'wb')
  B.check_io(f, err, path, 3)
  self.file = f
  local ok, werr = self.file:write(TB.record(TB.event(t, 0, 'brain.Event:2')))
  B.check_io(ok, werr, path, 3)
end

function FileWriter:flush()
  self:_open()
  -- checked: a full disk raises, naming the file (before, the events were dropped silently)
  if #self.pending > 0 then
    local ok, err = self.file:write(table.concat(self.pending))
    self.pending = {}
    B.check_io(ok, err, self.path, 2)
  end
  local ok, err = self.file:flush()
  B.check_io(ok, err, self.path, 2)
  self.last_flush = TB.walltime()
end

function FileWriter:close()
  if #self.pending > 0 or self.file then self:flush() end
  if self.file then
    local f = self.file
    self.file = nil
    local ok, err = f:close()
    B.check_io(ok, err, self.path, 2)
  end
end

---------------------------------------------------------------- values

local function is_tensor(x)
  return type(x) == 'cdata' and require('dpl.tensor').is_tensor(x)
end

--- The values of a tensor or of a (nested) Lua list of numbers: a double[?] buffer, the count,
--- the shape and the dtype ('float64' for a list).
local function read_values(x, what, level)
  if is_tensor(x) then
    local n = x:numel()
    local buf = ffi.new('double[?]', n > 0 and n or 1)
    require('dpl.capi').check(require('dpl.capi').C.dpl_tensor_read_f64(x, buf, n))
    return buf, n, x:size(), x.dtype
  end
  if type(x) ~= 'table' then fail('TypeError', level + 1, '%s must be a tensor or a list of numbers, got %s', what, type(x)) end
  local flat, shape = {}, {}
  local function walk(t, d)
    if type(t) == 'number' then flat[#flat + 1] = t return end
    if type(t) ~= 'table' then fail('TypeError', level + 3, '%s must hold numbers, got %s', what, type(t)) end
    if shape[d] == nil then shape[d] = #t elseif shape[d] ~= #t then
      fail('ValueError', level + 3, '%s is a ragged list (lengths %d and %d at depth %d)', what, shape[d], #t, d)
    end
    for i = 1, #t do walk(t[i], d + 1) end
  end
  walk(x, 1)
  local buf = ffi.new('double[?]', #flat > 0 and #flat or 1)
  for i = 1, #flat do buf[i - 1] = flat[i] end
  return buf, #flat, shape, 'float64'
end

local function check_step(step, level)
  if step ~= nil and (type(step) ~= 'number' or step ~= floor(step) or step < 0 or step >= 2 ^ 53) then
    fail('TypeError', level + 1, 'global_step must be nil or a non-negative integer, got %s', tostring(step))
  end
end

local function check_tag(tag, name, level)
  if type(tag) ~= 'string' then fail('TypeError', level + 1, '%s must be a string, got %s', name, type(tag)) end
end

---------------------------------------------------------------- summaries

--- An encoded Summary with one Summary.Value: tag, then the given fields (already encoded,
--- in field-number order).
local function summary(tag, body) return len_field(0x0a, len_field(0x0a, tag) .. body) end

local function plugin_metadata(name, content)
  local pd = len_field(0x0a, name)
  if content and content ~= '' then pd = pd .. len_field(0x12, content) end
  return len_field(0x4a, len_field(0x0a, pd))
end

--- scalar(tag, v, new_style, double_precision): simple_value (a float32), or with new_style
--- a TensorProto (DT_FLOAT float_val or DT_DOUBLE double_val) with "scalars" plugin data.
function M.scalar_summary(tag, v, new_style, double_precision)
  if not new_style then return summary(tag, '\021' .. f32(v)) end
  local tensor
  if double_precision then tensor = '\008\002' .. len_field(0x32, f64(v))
  else tensor = '\008\001' .. len_field(0x2a, f32(v)) end
  return summary(tag, len_field(0x42, tensor) .. plugin_metadata('scalars'))
end

--- The text plugin's summary: tag/text_summary, a DT_STRING tensor of shape [1].
function M.text_summary(tag, text)
  local tensor = '\008\007' .. len_field(0x12, len_field(0x12, '\008\001')) .. len_field(0x42, text)
  return summary(tag .. '/text_summary', len_field(0x42, tensor) .. plugin_metadata('text'))
end

local function packed_doubles(field, list)
  local parts = {}
  for i, x in ipairs(list) do parts[i] = f64(x) end
  return len_field(field, table.concat(parts))
end

-- proto3: a double equal to +0 is not written
local function dbl(tag, x)
  if x == 0 and 1 / x > 0 then return '' end
  return string.char(tag) .. f64(x)
end

--- An encoded HistogramProto of h = {min, max, num, sum, sum_squares, bucket_limit, bucket}.
function M.histogram_proto(h)
  return dbl(0x09, h.min) .. dbl(0x11, h.max) .. dbl(0x19, h.num) .. dbl(0x21, h.sum) .. dbl(0x29, h.sum_squares)
    .. packed_doubles(0x32, h.bucket_limit) .. packed_doubles(0x3a, h.bucket)
end

function M.histogram_summary(tag, h) return summary(tag, len_field(0x2a, M.histogram_proto(h))) end

--- An image summary (Summary.Image: height, width, colorspace, the encoded PNG).
function M.image_summary(tag, height, width, colorspace, png)
  local img = '\008' .. varint(height) .. '\016' .. varint(width) .. '\024' .. varint(colorspace) .. len_field(0x22, png)
  return summary(tag, len_field(0x22, img))
end

---------------------------------------------------------------- histograms

-- SummaryWriter's default bins ("tensorflow"): -1e20..-1e-12, 0, 1e-12..1e20 growing by 1.1
local default_bins
function M.default_bins()
  if default_bins then return default_bins end
  local pos, v = {}, 1e-12
  while v < 1e20 do pos[#pos + 1] = v; v = v * 1.1 end
  default_bins = {}
  for i = #pos, 1, -1 do default_bins[#default_bins + 1] = -pos[i] end
  default_bins[#default_bins + 1] = 0
  for i = 1, #pos do default_bins[#default_bins + 1] = pos[i] end
  return default_bins
end

--- numpy's histogram counts of buf[0..n-1] over the edges (bin i: [e_i, e_i+1), the last one
--- closed; values outside are dropped): a binary search per value.
local function count_bins(buf, n, edges)
  local nb = #edges - 1
  local counts = {}
  for i = 1, nb do counts[i] = 0 end
  local lo_e, hi_e = edges[1], edges[#edges]
  for k = 0, n - 1 do
    local v = buf[k]
    if v >= lo_e and v <= hi_e then
      local lo, hi = 1, nb -- the last edge index i with edges[i] <= v, at most nb
      while lo < hi do
        local mid = floor((lo + hi + 1) / 2)
        if edges[mid] <= v then lo = mid else hi = mid - 1 end
      end
      counts[lo] = counts[lo] + 1
    end
  end
  return counts
end

--- torch's make_histogram of n values (a double buffer): bins "tensorflow" (the default edges),
--- an integer (numpy's equal-width bins over [min, max], +-0.5 when they are equal) or a list of
--- increasing edges; max_bins merges neighbouring bins as torch does; then only the bins from
--- the one before the first non-empty bin to the last non-empty one are kept (each by its right
--- edge). Returns {min, max, num, sum, sum_squares, bucket_limit, bucket}.
function M.make_histogram(buf, n, bins, max_bins, level)
  level = (level or 1) + 1
  if n == 0 then fail('ValueError', level, 'add_histogram: the input has no element') end
  local mn, mx, sum, sq = huge, -huge, 0, 0
  for k = 0, n - 1 do
    local v = buf[k]
    if v ~= v or v == huge or v == -huge then
      fail('ValueError', level, 'add_histogram: the values must be finite, got %s', tostring(v))
    end
    if v < mn then mn = v end
    if v > mx then mx = v end
    sum = sum + v
    sq = sq + v * v
  end
  local edges
  if bins == nil or bins == 'tensorflow' then edges = M.default_bins()
  elseif type(bins) == 'number' then
    if bins < 1 or bins ~= floor(bins) then fail('ValueError', level, 'add_histogram: bins must be a positive integer, got %s', tostring(bins)) end
    local first, last = mn, mx
    if first == last then first, last = first - 0.5, last + 0.5 end
    local step = (last - first) / bins -- numpy's linspace: i * step + first, the last edge exact
    edges = {}
    for i = 0, bins - 1 do edges[i + 1] = i * step + first end
    edges[bins + 1] = last
  elseif type(bins) == 'table' then
    if #bins < 2 then fail('ValueError', level, 'add_histogram: a list of bins needs at least 2 edges, got %d', #bins) end
    for i = 1, #bins do
      if type(bins[i]) ~= 'number' or (i > 1 and bins[i] < bins[i - 1]) then
        fail('ValueError', level, 'add_histogram: bins must increase monotonically (edge %d)', i)
      end
    end
    edges = bins
  elseif type(bins) == 'string' then
    fail('NotImplementedError', level, "add_histogram: bins='%s' (numpy's bin estimators) is not implemented; use 'tensorflow', a number of bins or a list of edges", bins)
  else
    fail('TypeError', level, "add_histogram: bins must be 'tensorflow', an integer or a list of edges, got %s", type(bins))
  end
  local counts = count_bins(buf, n, edges)
  local limits = edges
  if max_bins ~= nil then
    if type(max_bins) ~= 'number' or max_bins < 1 or max_bins ~= floor(max_bins) then
      fail('ValueError', level, 'add_histogram: max_bins must be a positive integer, got %s', tostring(max_bins))
    end
    local nb = #counts
    if nb > max_bins then
      local sub = floor(nb / max_bins)
      local rem = nb % sub
      if rem ~= 0 then for _ = 1, sub - rem do counts[#counts + 1] = 0 end end
      local merged, new_limits = {}, {}
      for i = 1, #counts / sub do
        local s = 0
        for j = (i - 1) * sub + 1, i * sub do s = s + counts[j] end
        merged[i] = s
      end
      for i = 1, #limits - 1, sub do new_limits[#new_limits + 1] = limits[i] end
      new_limits[#new_limits + 1] = limits[#limits]
      counts, limits = merged, new_limits
    end
  end
  local first_nz, last_nz
  for i = 1, #counts do
    if counts[i] > 0 then
      first_nz = first_nz or i
      last_nz = i
    end
  end
  if not first_nz then
    fail('ValueError', level, 'add_histogram: no value falls within the bins (the histogram is empty)')
  end
  local bucket, bucket_limit = {}, {}
  if first_nz > 1 then
    for i = first_nz - 1, last_nz do bucket[#bucket + 1] = counts[i] end
  else
    bucket[1] = 0
    for i = 1, last_nz do bucket[#bucket + 1] = counts[i] end
  end
  for i = first_nz, last_nz + 1 do bucket_limit[#bucket_limit + 1] = limits[i] end
  return { min = mn, max = mx, num = n, sum = sum, sum_squares = sq, bucket_limit = bucket_limit, bucket = bucket }
end

---------------------------------------------------------------- images

local fbuf = ffi.new('float[1]')
local function to_f32(x) fbuf[0] = x; return fbuf[0] end

--- A uint8 sample as torch computes it: (float32(v) * scale in float32) cast to uint8 (clamped
--- here to 0..255, NaN as 0, where numpy's cast is undefined).
local function sample(v, scale)
  if scale ~= 1 then v = to_f32(to_f32(v) * scale) end
  if v ~= v or v <= 0 then return 0 end
  if v >= 255 then return 255 end
  return floor(v)
end

local function check_format(fmt, ndim, level)
  if type(fmt) ~= 'string' then fail('TypeError', level + 1, 'dataformats must be a string, got %s', type(fmt)) end
  local up = fmt:upper()
  local seen = {}
  for c in up:gmatch('.') do
    if seen[c] then fail('ValueError', level + 1, "dataformats '%s' uses %s twice", fmt, c) end
    seen[c] = true
  end
  local want = ({ [2] = 'HW', [3] = 'CHW', [4] = 'NCHW' })[#up]
  if not want then fail('ValueError', level + 1, "dataformats '%s' must be 2 to 4 of N, C, H, W", fmt) end
  for c in want:gmatch('.') do
    if not seen[c] then fail('ValueError', level + 1, "dataformats '%s' must be a permutation of %s", fmt, want) end
  end
  if #up ~= ndim then
    fail('ValueError', level + 1, "the image has %d dimensions but dataformats '%s' names %d", ndim, fmt, #up)
  end
  return up
end

--- An image tensor as torch's image() sees it: dataformats of 2 (HW), 3 (CHW in any order) or
--- 4 letters (NCHW in any order: torch's make_grid, 8 images per row, no padding); one channel
--- repeated into 3; uint8 kept, any other dtype scaled by 255. Returns the HWC uint8 pixels
--- (cdata), height, width, channels.
function M.image_pixels(x, dataformats, level)
  level = (level or 1) + 1
  if not is_tensor(x) then fail('TypeError', level, 'img_tensor must be a tensor, got %s', type(x)) end
  local fmt = check_format(dataformats, x:dim(), level)
  local buf, n, shape, dtype = read_values(x, 'img_tensor', level)
  if n == 0 then fail('ValueError', level, 'img_tensor has no element') end
  local scale = dtype == 'uint8' and 1 or 255
  -- row-major strides of the input, by letter
  local stride, size = {}, {}
  local s = 1
  for i = #fmt, 1, -1 do
    local c = fmt:sub(i, i)
    stride[c], size[c] = s, shape[i]
    s = s * shape[i]
  end
  local N, C, H, W = size.N or 1, size.C or 1, size.H, size.W
  local sN, sC, sH, sW = stride.N or 0, stride.C or 0, stride.H, stride.W
  local ncols, nrows = 1, 1
  if #fmt == 4 then
    if C ~= 1 and C ~= 3 then
      fail('ValueError', level, 'add_images: the images must have 1 or 3 channels (torch\'s make_grid), got %d', C)
    end
    ncols = math.min(N, 8)
    nrows = math.ceil(N / ncols)
  elseif #fmt == 3 and (C < 1 or C > 4) then
    fail('ValueError', level, 'an image has 1 to 4 channels, got %d', C)
  end
  local OC = C == 1 and 3 or C
  local OH, OW = H * nrows, W * ncols
  local out = ffi.new('uint8_t[?]', OH * OW * OC) -- zeros: the grid's empty cells
  for img = 0, N - 1 do
    local gy, gx = floor(img / ncols) * H, (img % ncols) * W
    for y = 0, H - 1 do
      local row = ((gy + y) * OW + gx) * OC
      for xx = 0, W - 1 do
        local base = img * sN + y * sH + xx * sW
        local o = row + xx * OC
        if C == 1 then
          local v = sample(buf[base], scale)
          out[o], out[o + 1], out[o + 2] = v, v, v
        else
          for c = 0, C - 1 do out[o + c] = sample(buf[base + c * sC], scale) end
        end
      end
    end
  end
  return out, OH, OW, OC
end

---------------------------------------------------------------- SummaryWriter

local SummaryWriter = require('dpl.class').Object:extend('SummaryWriter')
M.SummaryWriter = SummaryWriter

local writer_known = { filename_suffix = true, max_queue = true, flush_secs = true, file_writer = true,
  comment = true, purge_step = true }

--- SummaryWriter(log_dir, {filename_suffix="", max_queue=10, flush_secs=120, file_writer=}):
--- events in log_dir (file_writer: the FileWriter to share, the logger's). A FileWriter is
--- flushed when max_queue records wait or flush_secs have passed since its last flush (checked
--- at each add, no timer thread), and by flush() / close().
function SummaryWriter:__init(log_dir, o)
  if type(log_dir) ~= 'string' then fail('TypeError', 2, 'SummaryWriter: log_dir must be a string, got %s', type(log_dir)) end
  o = o or {}
  B.check_options(o, writer_known, 'SummaryWriter', 2)
  if o.purge_step ~= nil then fail('NotImplementedError', 2, 'SummaryWriter: purge_step is not implemented (events are only appended)') end
  self.log_dir = log_dir
  self.filename_suffix = o.filename_suffix or ''
  self.max_queue = o.max_queue or 10
  self.flush_secs = o.flush_secs or 120
  self.file_writer = o.file_writer or FileWriter(log_dir, self.filename_suffix)
  self.all_writers = { [log_dir] = self.file_writer }
  self._order = { log_dir }
end

function SummaryWriter:get_logdir() return self.log_dir end

-- the trailing arguments after global_step: positional (names) or one options table
local function trailing(method, names, known, level, ...)
  local a = ...
  local o = {}
  if type(a) == 'table' and select('#', ...) == 1 and (next(a) == nil or type(next(a)) == 'string') then
    for k, v in pairs(a) do
      if not known[k] then
        local list = {}
        for n in pairs(known) do list[#list + 1] = n end
        table.sort(list)
        fail('TypeError', level + 1, "%s() got an unexpected option '%s' (it takes %s)", method, tostring(k), table.concat(list, ', '))
      end
      o[k] = v
    end
  else
    for i = 1, select('#', ...) do
      if i > #names then fail('TypeError', level + 1, '%s() takes at most %d arguments after global_step', method, #names) end
      o[names[i]] = (select(i, ...))
    end
  end
  if o.walltime ~= nil and type(o.walltime) ~= 'number' then
    fail('TypeError', level + 1, '%s(): walltime must be a number (seconds since the epoch), got %s', method, type(o.walltime))
  end
  return o
end

function SummaryWriter:_add(fw, summ, step, walltime)
  fw:add_record(TB.record(TB.summary_event(walltime or TB.walltime(), summ, step)))
  if #fw.pending >= self.max_queue or TB.walltime() - fw.last_flush >= self.flush_secs then fw:flush() end
end

local function scalar_value(v, what, level)
  if is_tensor(v) then
    if v:numel() ~= 1 then
      fail('ValueError', level + 1, '%s: a tensor of one element is needed, got %d elements', what, v:numel())
    end
    return v:item()
  end
  if type(v) == 'boolean' then return v and 1 or 0 end
  if type(v) ~= 'number' then fail('TypeError', level + 1, '%s must be a number or a one-element tensor, got %s', what, type(v)) end
  return v
end

--- add_scalar(tag, value, global_step, walltime | {walltime=, new_style=false, double_precision=false})
function SummaryWriter:add_scalar(tag, value, global_step, ...)
  check_tag(tag, 'add_scalar: tag', 2)
  local v = scalar_value(value, 'add_scalar: scalar_value', 2)
  check_step(global_step, 2)
  local o = trailing('add_scalar', { 'walltime', 'new_style', 'double_precision' },
    { walltime = true, new_style = true, double_precision = true }, 2, ...)
  self:_add(self.file_writer, M.scalar_summary(tag, v, o.new_style, o.double_precision), global_step, o.walltime)
end

--- add_scalars(main_tag, {tag = value}, global_step, walltime | {walltime=}): each tag in its own
--- run, <log_dir>/<main_tag with / as _>_<tag>, under the tag main_tag (tags in sorted order).
function SummaryWriter:add_scalars(main_tag, tag_scalar_dict, global_step, ...)
  check_tag(main_tag, 'add_scalars: main_tag', 2)
  if type(tag_scalar_dict) ~= 'table' then
    fail('TypeError', 2, 'add_scalars: tag_scalar_dict must be a table of tag = value, got %s', type(tag_scalar_dict))
  end
  check_step(global_step, 2)
  local o = trailing('add_scalars', { 'walltime' }, { walltime = true }, 2, ...)
  local walltime = o.walltime or TB.walltime()
  local tags = {}
  for k, v in pairs(tag_scalar_dict) do
    if type(k) ~= 'string' then fail('TypeError', 2, 'add_scalars: the tags must be strings, got %s', type(k)) end
    tags[#tags + 1] = k
    scalar_value(v, ('add_scalars: the value of %s'):format(k), 2)
  end
  table.sort(tags)
  for _, tag in ipairs(tags) do
    local dir = self.file_writer:get_logdir() .. '/' .. main_tag:gsub('/', '_') .. '_' .. tag
    local fw = self.all_writers[dir]
    if fw == nil then
      fw = FileWriter(dir, self.filename_suffix)
      self.all_writers[dir] = fw
      self._order[#self._order + 1] = dir
    end
    self:_add(fw, M.scalar_summary(main_tag, scalar_value(tag_scalar_dict[tag], tag, 2)), global_step, walltime)
  end
end

--- add_histogram(tag, values, global_step, bins='tensorflow' | {bins=, walltime=, max_bins=}, walltime, max_bins)
function SummaryWriter:add_histogram(tag, values, global_step, ...)
  check_tag(tag, 'add_histogram: tag', 2)
  check_step(global_step, 2)
  -- (a list of edges in bins' place is positional: its keys are numbers)
  local o = trailing('add_histogram', { 'bins', 'walltime', 'max_bins' }, { bins = true, walltime = true, max_bins = true }, 2, ...)
  local buf, n = read_values(values, 'add_histogram: values', 2)
  local h = M.make_histogram(buf, n, o.bins, o.max_bins, 2)
  self:_add(self.file_writer, M.histogram_summary(tag, h), global_step, o.walltime)
end

--- add_histogram_raw(tag, min, max, num, sum, sum_squares, bucket_limits, bucket_counts, global_step, walltime)
function SummaryWriter:add_histogram_raw(tag, min, max, num, sum, sum_squares, bucket_limits, bucket_counts, global_step, walltime)
  check_tag(tag, 'add_histogram_raw: tag', 2)
  for name, v in pairs({ min = min, max = max, num = num, sum = sum, sum_squares = sum_squares }) do
    if type(v) ~= 'number' then fail('TypeError', 2, 'add_histogram_raw: %s must be a number, got %s', name, type(v)) end
  end
  local lim = type(bucket_limits) == 'table' and bucket_limits or (is_tensor(bucket_limits) and bucket_limits:totable())
  local cnt = type(bucket_counts) == 'table' and bucket_counts or (is_tensor(bucket_counts) and bucket_counts:totable())
  if not lim or not cnt then fail('TypeError', 2, 'add_histogram_raw: bucket_limits and bucket_counts must be lists or tensors') end
  if #lim ~= #cnt then
    fail('ValueError', 2, 'add_histogram_raw: len(bucket_limits) != len(bucket_counts), see the document.')
  end
  check_step(global_step, 2)
  local h = { min = min, max = max, num = num, sum = sum, sum_squares = sum_squares, bucket_limit = lim, bucket = cnt }
  self:_add(self.file_writer, M.histogram_summary(tag, h), global_step, walltime)
end

local function add_image(self, method, default_fmt, tag, img, global_step, ...)
  check_tag(tag, method .. ': tag', 3)
  check_step(global_step, 3)
  local o = trailing(method, { 'walltime', 'dataformats' }, { walltime = true, dataformats = true }, 3, ...)
  local px, h, w, c = M.image_pixels(img, o.dataformats or default_fmt, 3)
  local png = require('dpl.loggers.png').encode(w, h, c, px)
  self:_add(self.file_writer, M.image_summary(tag, h, w, c, png), global_step, o.walltime)
end

--- add_image(tag, img_tensor, global_step, walltime | {walltime=, dataformats='CHW'}, dataformats)
function SummaryWriter:add_image(tag, img, global_step, ...) add_image(self, 'add_image', 'CHW', tag, img, global_step, ...) end

--- add_images(tag, img_tensor, global_step, walltime | {walltime=, dataformats='NCHW'}, dataformats):
--- one image, the grid of torch's make_grid (8 per row, no padding, black empty cells).
function SummaryWriter:add_images(tag, img, global_step, ...) add_image(self, 'add_images', 'NCHW', tag, img, global_step, ...) end

--- add_text(tag, text_string, global_step, walltime | {walltime=}): the tag <tag>/text_summary.
function SummaryWriter:add_text(tag, text, global_step, ...)
  check_tag(tag, 'add_text: tag', 2)
  if type(text) ~= 'string' then fail('TypeError', 2, 'add_text: text_string must be a string, got %s', type(text)) end
  check_step(global_step, 2)
  local o = trailing('add_text', { 'walltime' }, { walltime = true }, 2, ...)
  self:_add(self.file_writer, M.text_summary(tag, text), global_step, o.walltime)
end

--- Writes every waiting event (the main file and add_scalars' runs).
function SummaryWriter:flush()
  for _, dir in ipairs(self._order) do self.all_writers[dir]:flush() end
end

--- Flushes and closes every file; a later add_* opens new ones (as torch's).
function SummaryWriter:close()
  for _, dir in ipairs(self._order) do self.all_writers[dir]:close() end
end

-- what torch's SummaryWriter has and this one does not: a clear error, never a nil call
for _, name in ipairs({ 'add_graph', 'add_onnx_graph', 'add_embedding', 'add_audio', 'add_figure', 'add_video',
    'add_pr_curve', 'add_pr_curve_raw', 'add_mesh', 'add_hparams', 'add_custom_scalars',
    'add_custom_scalars_multilinechart', 'add_custom_scalars_marginchart', 'add_image_with_boxes',
    'add_event', 'add_summary' }) do
  SummaryWriter[name] = function()
    fail('NotImplementedError', 2, 'SummaryWriter.%s is not implemented by dplhost\'s TensorBoard writer '
      .. '(it writes add_scalar, add_scalars, add_histogram, add_histogram_raw, add_image, add_images, add_text)', name)
  end
end

M.DummyExperiment = B.DummyExperiment -- (the ranks other than 0)

return M
