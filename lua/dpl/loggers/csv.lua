-- dpl.loggers.csv: CSVLogger with Lightning's layout:
-- <save_dir>/<name>/version_N/metrics.csv (header: every key logged so far in
-- first-appearance order, as Lightning's dict of the rows' keys, `step` after each row's
-- metrics; one row per log_metrics call; the file is rewritten when new keys appear) and
-- hparams.yaml. logger.experiment is Lightning's ExperimentWriter over the same rows and file.
local B = require 'dpl.loggers.base'

local CSVLogger = B.Logger:extend('CSVLogger')

local known = { save_dir = true, name = true, version = true, prefix = true, flush_logs_every_n_steps = true }

--- CSVLogger{save_dir=, name="lightning_logs", version=, prefix="", flush_logs_every_n_steps=100}
--- (Lightning 1.9's arguments; any other key raises, naming it)
function CSVLogger:__init(o, rest)
  o = B.options(o, rest) -- also CSVLogger(save_dir, {name=, ...})
  B.check_options(o, known, 'CSVLogger', 2)
  B.Logger.__init(self, o)
  local n = o.flush_logs_every_n_steps
  if n == nil then n = 100 end
  if type(n) ~= 'number' or n < 1 or n ~= math.floor(n) then
    require('dpl.errors').MisconfigurationException:raise(
      ('CSVLogger: flush_logs_every_n_steps must be an integer >= 1, got %s'):format(tostring(n)), 2)
  end
  self._flush_logs_every_n_steps = n
  self.metrics = {}     -- every row logged (Lightning's experiment.metrics); the first `written` are on disk
  self.metric_keys = {} -- each row's keys, in order (nil for a row added by hand: sorted)
  self.metric_ints = {} -- each row's set of keys whose values are ints (else nil)
  self.keys = {}        -- header keys, in first-appearance order
  self.keyset = {}
  self.written = 0
end

function CSVLogger:metrics_file_path() return self.log_dir .. '/metrics.csv' end

local T_is_tensor
-- a logged value as Lightning's _handle_value: a tensor by item() (an integer tensor's is
-- a Python int); returns the value and whether it is an int
local function handle_value(v)
  if type(v) == 'cdata' then
    T_is_tensor = T_is_tensor or require('dpl.tensor').is_tensor
    if T_is_tensor(v) then
      local dt = tostring(v.dtype)
      return v:item(), (dt:match('int') or dt:match('bool')) ~= nil
    end
  end
  return v, false
end

--- log_metrics(metrics, step, order, ints): `order` (the Trainer passes it) lists the keys of
--- metrics in the order they were first logged; without it the row's keys are sorted.
--- Numbers are written as Python floats (`1.0`: Lightning's values are float tensors'
--- item()), `step`, the keys in the set `ints` (the Trainer's `epoch`) and integer tensors'
--- values as ints.
function CSVLogger:log_metrics(metrics, step, order, ints)
  local row, keys, rints = {}, {}, nil
  if order == nil then
    order = {}
    for k in pairs(metrics) do order[#order + 1] = k end
    table.sort(order, function(a, b) return tostring(a) < tostring(b) end)
  end
  for _, k in ipairs(order) do
    local v, int = handle_value(metrics[k])
    if v ~= nil then
      local key = self.prefix ~= '' and (self.prefix .. '-' .. k) or k
      row[key] = v
      keys[#keys + 1] = key
      if int or (ints and ints[k]) then rints = rints or {}; rints[key] = true end
    end
  end
  if row.step == nil then keys[#keys + 1] = 'step' end
  row.step = step
  self.metrics[#self.metrics + 1] = row
  self.metric_keys[#self.metrics] = keys
  self.metric_ints[#self.metrics] = rints
  -- Lightning writes every flush_logs_every_n_steps steps (the Trainer also saves after its own logging)
  if step ~= nil and (step + 1) % self._flush_logs_every_n_steps == 0 then self:save() end
end

local function cell(v, int)
  if v == nil then return '' end
  local s
  if type(v) == 'number' then s = int and B.num(v) or B.pyfloat(v)
  else s = tostring(v) end
  if s:find('[,"\n]') then s = '"' .. s:gsub('"', '""') .. '"' end
  return s
end

-- a row's cells: numbers as Python floats, but `step` and the row's ints as ints
local function line(keys, row, ints)
  local parts = {}
  for i, k in ipairs(keys) do
    parts[i] = cell(row[k], k == 'step' or (ints ~= nil and ints[k] == true))
  end
  return table.concat(parts, ',') .. '\n'
end

--- Writes the pending rows (rewriting the file when the header grew).
function CSVLogger:save()
  local rows = self.metrics
  if #rows == self.written then return end
  local new = false
  for i = self.written + 1, #rows do
    local row, keys = rows[i], self.metric_keys[i]
    if keys == nil then -- (a row added by hand)
      keys = {}
      for k in pairs(row) do keys[#keys + 1] = k end
      table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    end
    for _, k in ipairs(keys) do
      if not self.keyset[k] then self.keyset[k] = true; self.keys[#self.keys + 1] = k; new = true end
    end
  end
  B.mkdir_p(self.log_dir)
  local path = self:metrics_file_path()
  if new or self.written == 0 then
    local out = { table.concat(self.keys, ',') .. '\n' }
    for i, row in ipairs(rows) do out[#out + 1] = line(self.keys, row, self.metric_ints[i]) end
    B.write_file(path, table.concat(out))
  else
    -- every write checked: a full disk raises (before, the rows were dropped without a word)
    local f, err = io.open(path, 'ab')
    B.check_io(f, err, path)
    local out = {}
    for i = self.written + 1, #rows do out[#out + 1] = line(self.keys, rows[i], self.metric_ints[i]) end
    local ok, werr = f:write(table.concat(out))
    local cok, cerr = f:close()
    B.check_io(ok and cok, werr or cerr, path)
  end
  self.written = #rows
end

function CSVLogger:finalize() self:save() end

---------------------------------------------------------------- experiment

--- Lightning's ExperimentWriter (logger.experiment on global rank 0), over the logger's rows
--- and files: log_metrics(dict, step) adds a row (no prefix; step defaults to the number of
--- rows so far; tensors by item(); keys sorted, where Python keeps the dict's order),
--- log_hparams(dict) merges into the hyper-parameters, save() writes metrics.csv and
--- hparams.yaml; metrics is the list of rows (each with its step), metrics_file_path and log_dir
--- are strings.
local ExperimentWriter = require('dpl.class').Object:extend('ExperimentWriter')
CSVLogger.ExperimentWriter = ExperimentWriter
ExperimentWriter.NAME_HPARAMS_FILE = 'hparams.yaml'
ExperimentWriter.NAME_METRICS_FILE = 'metrics.csv'

function ExperimentWriter:__init(logger)
  self._logger = logger
  self.log_dir = logger.log_dir
  self.metrics_file_path = logger:metrics_file_path()
  self.metrics = logger.metrics
  self.hparams = logger.hparams
  B.mkdir_p(self.log_dir)
end

function ExperimentWriter:log_metrics(metrics_dict, step)
  if type(metrics_dict) ~= 'table' then
    require('dpl.errors').TypeError:raise(('log_metrics: metrics_dict must be a table of name = value, got %s'):format(type(metrics_dict)), 2)
  end
  if step ~= nil and type(step) ~= 'number' then
    require('dpl.errors').TypeError:raise(('log_metrics: step must be a number or nil, got %s'):format(type(step)), 2)
  end
  local lg = self._logger
  if step == nil then step = #lg.metrics end
  local row, keys, rints = {}, {}, nil
  for k, v in pairs(metrics_dict) do
    local int
    v, int = handle_value(v)
    row[k] = v
    if int then rints = rints or {}; rints[k] = true end
    if k ~= 'step' then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  keys[#keys + 1] = 'step'
  row.step = step
  lg.metrics[#lg.metrics + 1] = row
  lg.metric_keys[#lg.metrics] = keys
  lg.metric_ints[#lg.metrics] = rints
end

function ExperimentWriter:log_hparams(params)
  if type(params) ~= 'table' then
    require('dpl.errors').TypeError:raise(('log_hparams: params must be a table, got %s'):format(type(params)), 2)
  end
  for k, v in pairs(params) do self._logger.hparams[k] = v end
end

function ExperimentWriter:save()
  self._logger:save()
  B.write_file(self.log_dir .. '/' .. self.NAME_HPARAMS_FILE, B.yaml(self._logger.hparams))
end

--- logger.experiment (Lightning's property, read as a field): the ExperimentWriter on global
--- rank 0, created on first read; Lightning's dummy (methods that do nothing) on other ranks.
CSVLogger._properties = {
  experiment = function(self) return B.rank_zero_experiment(self, ExperimentWriter) end,
}


-- (Lightning's @rank_zero_only methods: on other ranks they do nothing)
B.rank_zero_only(CSVLogger, { 'log_hyperparams', 'log_metrics', 'save', 'finalize' })

return CSVLogger
