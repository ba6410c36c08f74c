-- dpl.callbacks.model_summary: ModelSummary. At fit start (rank 0) prints the
-- model's direct submodules with their parameter counts, and the totals.
local Callback = require 'dpl.callbacks.callback'

local ModelSummary = Callback:extend('ModelSummary')

--- ModelSummary{max_depth=1, stream=io.stdout}
function ModelSummary:__init(o)
  Callback.__init(self)
  o = o or {}
  self.max_depth = o.max_depth or 1
  self.stream = o.stream or io.stdout
end

local function numel(p)
  if type(p) == 'number' then return 1 end
  local ok, n = pcall(function() return p:numel() end)
  if ok and type(n) == 'number' then return n end
  return 0
end

local function count_params(m)
  local ok, ps = pcall(function() return m:parameters() end)
  if not ok or type(ps) ~= 'table' then return nil end
  local total, trainable = 0, 0
  for _, p in ipairs(ps) do
    local n = numel(p)
    total = total + n
    local rg = true
    pcall(function() rg = p.requires_grad ~= false end)
    if rg then trainable = trainable + n end
  end
  return total, trainable
end

-- {name, module} pairs: named_children() (an nn.Module), else the nn.Modules held in fields
local function children_of(model)
  if type(model.named_children) == 'function' then
    local ok, ch = pcall(model.named_children, model)
    if ok and type(ch) == 'table' then return ch end
    if ok and type(ch) == 'function' then
      local out = {}
      for name, m in ch do out[#out + 1] = { name, m } end
      return out
    end
  end
  local keys = {}
  for k, v in pairs(model) do
    if type(v) == 'table' and rawget(v, '_is_module') == true then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  local out = {}
  for _, k in ipairs(keys) do out[#out + 1] = { tostring(k), model[k] } end
  return out
end

--- Rows {name, type, params} and totals.
function ModelSummary.summarize(model)
  local rows = {}
  local sum_total, sum_trainable = 0, 0
  for _, c in ipairs(children_of(model)) do
    local name, mod = c[1], c[2]
    local mt = getmetatable(mod)
    local n, tr = count_params(mod)
    rows[#rows + 1] = { name, mt and mt.__name or type(mod), n or 0 }
    sum_total, sum_trainable = sum_total + (n or 0), sum_trainable + (tr or 0)
  end
  local total, trainable = count_params(model)
  if total == nil then total, trainable = sum_total, sum_trainable end
  return rows, total, trainable
end

local function human(n)
  if n >= 1e9 then return ('%.1f B'):format(n / 1e9) end
  if n >= 1e6 then return ('%.1f M'):format(n / 1e6) end
  if n >= 1e3 then return ('%.1f K'):format(n / 1e3) end
  return tostring(n)
end

function ModelSummary:on_fit_start(trainer, model)
  if not trainer.is_global_zero or self.max_depth == 0 then return end
  local rows, total, trainable = ModelSummary.summarize(model)
  local out = { ('  | %-12s | %-20s | %s'):format('Name', 'Type', 'Params') }
  for i, r in ipairs(rows) do
    out[#out + 1] = ('%d | %-12s | %-20s | %s'):format(i - 1, r[1], r[2], human(r[3]))
  end
  out[#out + 1] = ('%s     Trainable params'):format(human(trainable))
  out[#out + 1] = ('%s     Non-trainable params'):format(human(total - trainable))
  out[#out + 1] = ('%s     Total params'):format(human(total))
  self.stream:write(table.concat(out, '\n'), '\n')
  self.stream:flush()
end

Callback._mark_lazy_metrics_ok(ModelSummary)
return ModelSummary
