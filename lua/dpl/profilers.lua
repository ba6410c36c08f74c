-- dpl.profilers: Lightning's profilers for the Trainer (`Trainer{profiler = "simple"}` or a
-- profiler object). SimpleProfiler times named actions (every hook the Trainer calls, the
-- strategy's steps, the training epoch and batch, fetching batches) and prints, or writes
-- to a file, Lightning 1.9's report at the end of fit/validate/test/predict.
-- PassThroughProfiler records nothing (the Trainer's default; the Trainer skips timing
-- altogether then). Custom profilers: `Profiler:extend('Name')` with start/stop/summary.
local class = require 'dpl.class'
local errors = require 'dpl.errors'
local C = require('dpl.capi').C

local M = {}
local fmt = string.format

local function clock() return tonumber(C.dpl_clock()) end

local Profiler = class.Object:extend('Profiler')
M.Profiler = Profiler

--- Profiler{dirpath=, filename=}: with a filename the report goes to
--- <dirpath or the trainer's log_dir>/<stage>-<filename>[-<local_rank>].txt (appended to),
--- else it is printed by rank 0.
function Profiler:__init(opts)
  if opts ~= nil and type(opts) ~= 'table' then
    errors.ValueError:raise(fmt('%s: options must be a table {dirpath=, filename=}, got %s', self.__name, type(opts)), 3)
  end
  opts = opts or {}
  for _, k in ipairs({ 'dirpath', 'filename' }) do
    if opts[k] ~= nil and type(opts[k]) ~= 'string' then
      errors.ValueError:raise(fmt('%s: %s must be a string, got %s', self.__name, k, type(opts[k])), 3)
    end
  end
  self.dirpath, self.filename = opts.dirpath, opts.filename
  self._stage, self._local_rank = nil, nil
end

function Profiler:start(action) errors.NotImplementedError:raise(self.__name .. ':start is not implemented', 2) end
function Profiler:stop(action) errors.NotImplementedError:raise(self.__name .. ':stop is not implemented', 2) end
function Profiler:summary() return '' end

-- The traceback of a string error where it was raised: the timing wrappers catch errors to stop
-- their action and raise them again, which would leave only their own frames in the traceback
-- the Trainer adds. M.on_error (xpcall's handler in the wrappers) keeps the first one seen for
-- that message; M.traceback(e) returns it (else a traceback from the caller).
local pending_err, pending_tb
function M.on_error(e)
  if type(e) == 'string' and e ~= pending_err then pending_err, pending_tb = e, debug.traceback(e, 2) end
  return errors.attach_traceback(e, 2) -- an error object records it in itself
end
function M.traceback(e, level)
  if type(e) ~= 'string' then return errors.attach_traceback(e, (level or 1) + 1) end
  local tb = e == pending_err and pending_tb or debug.traceback(e, (level or 1) + 1)
  pending_err, pending_tb = nil, nil
  return tb
end

--- profiler:profile(action, fn, ...): fn(...) timed as action (stopped on an error too);
--- returns fn's results.
function Profiler:profile(action, fn, ...)
  self:start(action)
  local r = { xpcall(fn, M.on_error, ...) }
  self:stop(action)
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, table.maxn(r))
end

--- Called by the Trainer before a run: stage is 'fit', 'validate', 'test' or 'predict'.
function Profiler:setup(stage, local_rank, log_dir)
  self._stage, self._local_rank = stage, local_rank
  self.dirpath = self.dirpath or log_dir
end
function Profiler:teardown(stage) end

function Profiler:_prepare_filename(action, ext)
  local parts = {}
  if self._stage then parts[#parts + 1] = self._stage end
  if self.filename then parts[#parts + 1] = self.filename end
  if self._local_rank ~= nil then parts[#parts + 1] = tostring(self._local_rank) end
  if action then parts[#parts + 1] = action end
  return table.concat(parts, '-') .. (ext or '.txt')
end

--- Writes the report (to the file, or printed by rank 0), then tears down.
function Profiler:describe()
  local s = self:summary()
  if s and s ~= '' then
    if self.filename and self.dirpath then
      require('dpl.loggers.base').mkdir_p(self.dirpath)
      local path = self.dirpath .. '/' .. self:_prepare_filename()
      local f, err = io.open(path, 'a')
      if not f then errors.RuntimeError:raise(fmt('%s: cannot write the report to %s: %s', self.__name, path, tostring(err)), 0) end
      f:write(s)
      f:close()
    elseif self._local_rank == nil or self._local_rank == 0 then
      io.stdout:write(s)
      io.stdout:flush()
    end
  end
  self:teardown(self._stage)
end
function Profiler:local_rank() return self._local_rank or 0 end

---------------------------------------------------------------- PassThroughProfiler
local PassThroughProfiler = Profiler:extend('PassThroughProfiler')
M.PassThroughProfiler = PassThroughProfiler
function PassThroughProfiler:start() end
function PassThroughProfiler:stop() end

---------------------------------------------------------------- SimpleProfiler
local SimpleProfiler = Profiler:extend('SimpleProfiler')
M.SimpleProfiler = SimpleProfiler

--- SimpleProfiler{dirpath=, filename=, extended=true}: mean and total time per action; extended
--- adds the number of calls and each action's share of the time since the profiler was made.
local SIMPLE_KEYS = require('dpl.options').keys('dirpath', 'filename', 'extended')
function SimpleProfiler:__init(opts)
  Profiler.__init(self, opts)
  require('dpl.options').check(opts, SIMPLE_KEYS, 'SimpleProfiler') -- (a misspelt filename= would print instead)
  opts = opts or {}
  if opts.extended ~= nil and type(opts.extended) ~= 'boolean' then
    errors.ValueError:raise(fmt('SimpleProfiler: extended must be a boolean, got %s', type(opts.extended)), 3)
  end
  self.extended = opts.extended ~= false
  self.current_actions = {}   -- action -> start time
  self.recorded_durations = {} -- action -> { n = calls, sum = seconds }
  self._order = {}
  self.start_time = clock()
end

function SimpleProfiler:start(action)
  if self.current_actions[action] ~= nil then
    errors.ValueError:raise(fmt('Attempted to start %s which has already started.', tostring(action)), 2)
  end
  self.current_actions[action] = clock()
end

function SimpleProfiler:stop(action)
  local t = clock()
  local t0 = self.current_actions[action]
  if t0 == nil then
    errors.ValueError:raise(fmt('Attempting to stop recording an action (%s) which was never started.', tostring(action)), 2)
  end
  self.current_actions[action] = nil
  local d = self.recorded_durations[action]
  if d == nil then
    d = { n = 0, sum = 0 }
    self.recorded_durations[action] = d
    self._order[#self._order + 1] = action
  end
  d.n = d.n + 1
  d.sum = d.sum + (t - t0)
end

-- Python's "{:.5}" of a float: 5 significant digits, shortest form
local function g5(x)
  local s = fmt('%.5g', x)
  if s:find('e') then s = s:gsub('e([-+])0*(%d%d)', 'e%1%2') end
  if not s:find('[.e]') and not s:find('inf') and not s:find('nan') then s = s .. '.0' end
  return s
end
local function pad(s, w) return s .. string.rep(' ', w - #s) end
-- Python's str.expandtabs(8)
local function expandtabs(s)
  local out, col = {}, 0
  for ch in s:gmatch('.') do
    if ch == '\t' then
      local n = 8 - col % 8
      out[#out + 1] = string.rep(' ', n)
      col = col + n
    else
      out[#out + 1] = ch
      col = ch == '\n' and 0 or col + 1
    end
  end
  return table.concat(out)
end

--- Lightning 1.9's report: "<STAGE> Profiler Report", then the table sorted by share of time
--- (extended) or by mean duration.
function SimpleProfiler:summary()
  local sep = '\n'
  local out = {}
  if self._stage then out[#out + 1] = self._stage:upper() .. ' ' end
  out[#out + 1] = 'Profiler Report' .. sep
  local keys = self._order
  if #keys == 0 then
    out[#out + 1] = sep
    return table.concat(out)
  end
  local w = 0
  for _, k in ipairs(keys) do if #k > w then w = #k end end
  local rows = {}
  if self.extended then
    local function row(a, mean, calls, total, per)
      return sep .. '|  ' .. pad(a, w) .. '\t|  ' .. pad(mean, 15) .. '\t|  ' .. pad(calls, 15) .. '\t|  '
        .. pad(total, 15) .. '\t|  ' .. pad(per, 15) .. '\t|'
    end
    local header = row('Action', 'Mean duration (s)', 'Num calls', 'Total time (s)', 'Percentage %')
    local line = sep .. string.rep('-', #expandtabs(header) - 1)
    local total = clock() - self.start_time
    local calls = 0
    for _, k in ipairs(keys) do
      local d = self.recorded_durations[k]
      rows[#rows + 1] = { k, d.sum / d.n, d.n, d.sum, 100 * d.sum / total }
      calls = calls + d.n
    end
    table.sort(rows, function(a, b) if a[5] ~= b[5] then return a[5] > b[5] end return a[1] < b[1] end)
    out[#out + 1] = line .. header .. line
    out[#out + 1] = row('Total', '-', tostring(calls), g5(total), '100 %')
    out[#out + 1] = line
    for _, r in ipairs(rows) do out[#out + 1] = row(r[1], g5(r[2]), tostring(r[3]), g5(r[4]), g5(r[5])) end
    out[#out + 1] = line
  else
    local function row(a, mean, total) return sep .. '|  ' .. pad(a, w) .. '\t|  ' .. pad(mean, 15) .. '\t|  ' .. pad(total, 15) .. '\t|' end
    local header = row('Action', 'Mean duration (s)', 'Total time (s)')
    local line = sep .. string.rep('-', #expandtabs(header) - 1)
    for _, k in ipairs(keys) do
      local d = self.recorded_durations[k]
      rows[#rows + 1] = { k, d.sum / d.n, d.sum }
    end
    table.sort(rows, function(a, b) if a[2] ~= b[2] then return a[2] > b[2] end return a[1] < b[1] end)
    out[#out + 1] = line .. header .. line
    for _, r in ipairs(rows) do out[#out + 1] = row(r[1], g5(r[2]), g5(r[3])) end
    out[#out + 1] = line
  end
  out[#out + 1] = sep
  return table.concat(out)
end

---------------------------------------------------------------- the Trainer's argument
local NOT_HERE = {
  advanced = "profiler='advanced' (Python's cProfile per action) has no dplhost equivalent yet; use 'simple', "
    .. "or LuaJIT's sampling profiler (require('jit.p').start('Fl') ... require('jit.p').stop())",
  pytorch = "profiler='pytorch' (torch.profiler's operator traces) is not implemented in dplhost; use 'simple'",
  xla = "profiler='xla' needs a TPU runtime, which dplhost does not have; use 'simple'",
}

--- The Trainer's `profiler` argument as a profiler: nil -> PassThroughProfiler, "simple" ->
--- SimpleProfiler(), a Profiler instance as it is.
function M.from_arg(p)
  if p == nil then return PassThroughProfiler() end
  if type(p) == 'string' then
    local k = p:lower()
    if k == 'simple' then return SimpleProfiler() end
    if NOT_HERE[k] then errors.NotImplementedError:raise(NOT_HERE[k], 0) end
    errors.MisconfigurationException:raise(fmt("When passing string value for the `profiler` parameter of `Trainer`, "
      .. "it can only be one of ['simple', 'advanced', 'pytorch', 'xla']; got %q", p), 0)
  end
  if class.is_instance(p, Profiler) then return p end
  local c = type(p) == 'table' and p or nil -- a Profiler class (not an instance)?
  while c ~= nil and c ~= Profiler do c = rawget(c, 'super') end
  if c ~= nil then
    errors.MisconfigurationException:raise(fmt('Trainer(profiler=...): got the class %s, not a profiler; pass an '
      .. 'instance: %s() or %s{dirpath=, filename=}', tostring(rawget(p, '__name')), tostring(rawget(p, '__name')),
      tostring(rawget(p, '__name'))), 0)
  end
  errors.MisconfigurationException:raise(fmt('Only None, str and subclasses of `Profiler` are valid values for '
    .. '`Trainer(profiler=...)`; got %s', type(p) == 'table' and (getmetatable(p) and getmetatable(p).__name or 'a table')
      or type(p)), 0)
end

return M
