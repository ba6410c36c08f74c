-- dpl.callbacks.model_summary: ModelSummary. At fit start (rank 0) prints the
-- model's submodules down to max_depth with their parameter counts, and the totals, in
-- Lightning 1.9.5's table layout.
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

--- Rows {name, type, params} and totals, Lightning 1.9.5's ModelSummary(max_depth): depth 1
--- the direct submodules; n > 1 every submodule (pre-order, dotted names like `encoder.0`,
--- each module once) down to n levels; -1 all of them; 0 none.
function ModelSummary.summarize(model, max_depth)
  max_depth = max_depth or 1
  local rows = {}
  local sum_total, sum_trainable = 0, 0
  local seen = {}
  local function walk(mod, prefix, depth)
    for _, c in ipairs(children_of(mod)) do
      local name, child = prefix .. tostring(c[1]), c[2]
      if not seen[child] then
        seen[child] = true
        local mt = getmetatable(child)
        local n, tr = count_params(child)
        rows[#rows + 1] = { name, mt and mt.__name or type(child), n or 0, module = child }
        if depth == 1 then sum_total, sum_trainable = sum_total + (n or 0), sum_trainable + (tr or 0) end
        if max_depth < 0 or depth < max_depth then walk(child, name .. '.', depth + 1) end
      end
    end
  end
  if max_depth ~= 0 then walk(model, '', 1) end
  if model.example_input_array ~= nil and #rows > 0 then ModelSummary._example_sizes(model, rows) end
  local total, trainable = count_params(model)
  if total == nil then total, trainable = sum_total, sum_trainable end
  return rows, total, trainable
end

-- Lightning's parse_batch_shape: a tensor's shape (a list), a list of them (nested), else "?"
local function batch_shape(v)
  local T = require 'dpl.tensor'
  if T.is_tensor(v) then return v:size() end
  if type(v) == 'table' and getmetatable(v) == nil then
    local out = {}
    for i, x in ipairs(v) do out[i] = batch_shape(x) end
    return out
  end
  return '?'
end

--- Lightning's _forward_example_input: the module's `example_input_array` (moved to the module's
--- device) through forward once, in eval mode without gradient recording, each row's module
--- recording the shapes of its first call (`row.in_size`, `row.out_size`; "?" when the forward did
--- not reach it). A plain list is passed as the arguments, anything else (a tensor, a table of
--- names) as the one argument.
function ModelSummary._example_sizes(model, rows)
  local handles = {}
  for _, r in ipairs(rows) do
    r.in_size, r.out_size = '?', '?'
    local mod = r.module
    if type(mod) == 'table' and type(mod.register_forward_hook) == 'function' then
      local h
      h = mod:register_forward_hook(function(_, args, out)
        local inp = args
        if (args.n or #args) == 1 then inp = args[1] else inp = { unpack(args, 1, args.n or #args) } end
        r.in_size, r.out_size = batch_shape(inp), batch_shape(out)
        h:remove()
      end)
      handles[#handles + 1] = function() h:remove() end
    end
  end
  local dpl = require 'dpl'
  local input = model.example_input_array
  if model.device ~= nil and dpl.move_data_to_device then input = dpl.move_data_to_device(input, model.device) end
  local mode = model.training
  model:eval()
  local autograd = require 'dpl.autograd'
  local prev = autograd.is_grad_enabled()
  autograd.set_grad_enabled(false)
  local ok, err = pcall(function()
    if type(input) == 'table' and getmetatable(input) == nil and input[1] ~= nil then model(unpack(input))
    else model(input) end
  end)
  autograd.set_grad_enabled(prev)
  model:train(mode)
  for _, rm in ipairs(handles) do pcall(rm) end
  rows.example = true
  if not ok then error(err, 0) end
end

-- Python's str() of a shape list: [2, 5], [[2, 3], [2, 4]], '?'
local function shape_str(v)
  if type(v) ~= 'table' then return tostring(v) end
  local parts = {}
  for i, x in ipairs(v) do parts[i] = shape_str(x) end
  return '[' .. table.concat(parts, ', ') .. ']'
end

--- Lightning's get_human_readable_count: 216 → "216  ", 1234 → "1.2 K", 123456 → "123 K".
local function human(n)
  local labels = { ' ', 'K', 'M', 'B', 'T' }
  local digits = n > 0 and math.floor(math.log10(n)) + 1 or 1
  local groups = math.min(math.ceil(digits / 3), #labels)
  local x = n * 10 ^ (-3 * (groups - 1))
  local function commas(s)
    local int, rest = s:match('^(%d+)(.*)$')
    int = int:reverse():gsub('(%d%d%d)', '%1,'):reverse():gsub('^,', '')
    return int .. rest
  end
  if groups - 1 < 1 or x >= 100 then return commas(('%d'):format(math.floor(x))) .. ' ' .. labels[groups] end
  return commas(('%.1f'):format(x)) .. ' ' .. labels[groups]
end
ModelSummary._human = human

--- Lightning 1.9.5's _format_summary_table (with "In sizes" / "Out sizes" columns when the
--- rows come from a module with an example_input_array).
function ModelSummary.format_table(rows, total, trainable, precision)
  local cols = { { ' ', {} }, { 'Name', {} }, { 'Type', {} }, { 'Params', {} } }
  if rows.example then cols[5], cols[6] = { 'In sizes', {} }, { 'Out sizes', {} } end
  for i, r in ipairs(rows) do
    cols[1][2][i], cols[2][2][i], cols[3][2][i], cols[4][2][i] = tostring(i - 1), r[1], r[2], human(r[3])
    if rows.example then cols[5][2][i], cols[6][2][i] = shape_str(r.in_size), shape_str(r.out_size) end
  end
  local widths, total_width = {}, 3 * (1 + #cols)
  for j, c in ipairs(cols) do
    local w = #c[1]
    for _, v in ipairs(c[2]) do if #v > w then w = #v end end
    widths[j] = w
    total_width = total_width + w
  end
  local function pad(v, w) return v .. string.rep(' ', w - #v) end
  local head = {}
  for j, c in ipairs(cols) do head[j] = pad(c[1], widths[j]) end
  local rule = string.rep('-', total_width)
  local out = { table.concat(head, ' | '), rule }
  for i = 1, #rows do
    local line = {}
    for j, c in ipairs(cols) do line[j] = pad(c[2][i], widths[j]) end
    out[#out + 1] = table.concat(line, ' | ')
  end
  out[#out + 1] = rule
  -- params size: 4 bytes a parameter (8 with precision 64; mixed precision counts as 32, as Lightning)
  local bytes = (type(precision) == 'number' and precision or 32) / 8
  out[#out + 1] = pad(human(trainable), 10) .. 'Trainable params'
  out[#out + 1] = pad(human(total - trainable), 10) .. 'Non-trainable params'
  out[#out + 1] = pad(human(total), 10) .. 'Total params'
  out[#out + 1] = pad(('%.3f'):format(total * bytes * 1e-6), 10) .. 'Total estimated model params size (MB)'
  return table.concat(out, '\n')
end

function ModelSummary:on_fit_start(trainer, model)
  if not trainer.is_global_zero or self.max_depth == 0 then return end
  local rows, total, trainable = ModelSummary.summarize(model, self.max_depth)
  -- (Lightning logs "\n" .. table)
  self.stream:write('\n', ModelSummary.format_table(rows, total, trainable, trainer.precision), '\n')
  self.stream:flush()
end

Callback._mark_lazy_metrics_ok(ModelSummary)
return ModelSummary
