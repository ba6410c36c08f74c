-- dpl.loggers.csv: CSVLogger with Lightning's layout:
-- <save_dir>/<name>/version_N/metrics.csv (header: every key logged so far in
-- first-appearance order, as Lightning's dict of the rows' keys, `step` after each row's
-- metrics; one row per log_metrics call; the file is rewritten when new keys appear) and
-- hparams.yaml.
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
  self.rows = {}       -- pending rows
  self.keys = {}       -- header keys, in first-appearance order
  self.row_keys = {}   -- the pending rows' keys, in order
  self.keyset = {}
  self.written = 0     -- rows on disk
  self.all_rows = {}   -- every row (for rewrites)
end

function CSVLogger:metrics_file_path() return self:log_dir() .. '/metrics.csv' end

--- log_metrics(metrics, step, order): `order` (the Trainer passes it) lists the keys of
--- metrics in the order they were first logged; without it the row's keys are sorted.
function CSVLogger:log_metrics(metrics, step, order)
  local row, keys = {}, {}
  if order == nil then
    order = {}
    for k in pairs(metrics) do order[#order + 1] = k end
    table.sort(order, function(a, b) return tostring(a) < tostring(b) end)
  end
  for _, k in ipairs(order) do
    local v = metrics[k]
    if v ~= nil then
      local key = self.prefix ~= '' and (self.prefix .. '-' .. k) or k
      row[key] = v
      keys[#keys + 1] = key
    end
  end
  if row.step == nil then keys[#keys + 1] = 'step' end
  row.step = step
  self.rows[#self.rows + 1] = row
  self.row_keys[#self.rows] = keys
  -- Lightning writes every flush_logs_every_n_steps steps (the Trainer also saves after its own logging)
  if step ~= nil and (step + 1) % self._flush_logs_every_n_steps == 0 then self:save() end
end

local function cell(v)
  if v == nil then return '' end
  local s = type(v) == 'number' and B.num(v) or tostring(v)
  if s:find('[,"\n]') then s = '"' .. s:gsub('"', '""') .. '"' end
  return s
end

local function line(keys, row)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = cell(row[k]) end
  return table.concat(parts, ',') .. '\n'
end

--- Writes the pending rows (rewriting the file when the header grew).
function CSVLogger:save()
  if #self.rows == 0 then return end
  local new = false
  for i, row in ipairs(self.rows) do
    local keys = self.row_keys[i]
    if keys == nil then -- (a row added by hand)
      keys = {}
      for k in pairs(row) do keys[#keys + 1] = k end
      table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    end
    for _, k in ipairs(keys) do
      if not self.keyset[k] then self.keyset[k] = true; self.keys[#self.keys + 1] = k; new = true end
    end
  end
  B.mkdir_p(self:log_dir())
  local path = self:metrics_file_path()
  for _, row in ipairs(self.rows) do self.all_rows[#self.all_rows + 1] = row end
  if new or self.written == 0 then
    local out = { table.concat(self.keys, ',') .. '\n' }
    for _, row in ipairs(self.all_rows) do out[#out + 1] = line(self.keys, row) end
    B.write_file(path, table.concat(out))
  else
    local f = assert(io.open(path, 'ab'))
    for _, row in ipairs(self.rows) do f:write(line(self.keys, row)) end
    f:close()
  end
  self.written = #self.all_rows
  self.rows, self.row_keys = {}, {}
end

function CSVLogger:finalize() self:save() end

return CSVLogger
