-- dpl.trainer.args: the Trainer's arguments (Lightning 1.9 names and defaults),
-- their validation (unknown or contradictory arguments raise
-- MisconfigurationException naming them), and the command-line parsing of
-- Trainer.from_argv.
--
-- LuaJIT cannot tell 1.0 from 1: a limit_*_batches / val_check_interval with a
-- fractional part (or a string such as "1.0" or "0.25") is a fraction, an
-- integer is a number of batches; nil (the default) is Lightning's 1.0 (all).
local errors = require 'dpl.errors'

local Misconfiguration = errors.MisconfigurationException
local M = {}

local function misconf(fmt, ...)
  error(Misconfiguration(select('#', ...) > 0 and fmt:format(...) or fmt), 0)
end

-- connector's repr, and a table with named keys shown with them ({minutes=1}, not {})
local function repr(v)
  if type(v) == 'table' and getmetatable(v) == nil then
    local n, named = #v, {}
    for k in pairs(v) do
      if not (type(k) == 'number' and k >= 1 and k <= n and k == math.floor(k)) then named[#named + 1] = k end
    end
    if #named > 0 then
      local parts = {}
      for i = 1, n do parts[i] = repr(v[i]) end
      table.sort(named, function(a, b) return tostring(a) < tostring(b) end)
      for _, k in ipairs(named) do parts[#parts + 1] = tostring(k) .. '=' .. repr(v[k]) end
      return '{' .. table.concat(parts, ', ') .. '}'
    end
  end
  return require('dpl.trainer.connector').repr(v)
end

-- name -> default (M.NIL for nil); the order is the documented one
local NIL = setmetatable({}, { __tostring = function() return 'nil' end })
M.NIL = NIL
M.order = {
  'accelerator', 'devices', 'gpus', 'tpu_cores', 'num_processes', 'num_nodes', 'auto_select_gpus',
  'strategy', 'distributed_backend', 'precision', 'amp_backend', 'amp_level', 'plugins', 'sync_batchnorm',
  'max_epochs', 'min_epochs', 'max_steps', 'min_steps', 'max_time',
  'limit_train_batches', 'limit_val_batches', 'limit_test_batches', 'limit_predict_batches',
  'val_check_interval', 'check_val_every_n_epoch', 'num_sanity_val_steps',
  'accumulate_grad_batches', 'gradient_clip_val', 'gradient_clip_algorithm',
  'fast_dev_run', 'deterministic', 'benchmark', 'enable_progress_bar', 'enable_checkpointing',
  'enable_model_summary', 'logger', 'callbacks', 'default_root_dir', 'log_every_n_steps',
  'use_distributed_sampler', 'replace_sampler_ddp', 'reload_dataloaders_every_n_epochs',
  'inference_mode', 'detect_anomaly', 'track_grad_norm', 'move_metrics_to_cpu', 'profiler',
  'weights_save_path', 'overfit_batches', 'multiple_trainloader_mode', 'ipus', 'resume_from_checkpoint',
  'auto_lr_find', 'auto_scale_batch_size',
}
M.defaults = {
  accelerator = NIL, devices = NIL, gpus = NIL, tpu_cores = NIL, num_processes = NIL, num_nodes = 1,
  auto_select_gpus = false, strategy = NIL, distributed_backend = NIL, precision = 32,
  amp_backend = 'native', amp_level = NIL, plugins = NIL, sync_batchnorm = false,
  max_epochs = NIL, min_epochs = NIL, max_steps = -1, min_steps = NIL, max_time = NIL,
  limit_train_batches = NIL, limit_val_batches = NIL, limit_test_batches = NIL, limit_predict_batches = NIL,
  val_check_interval = NIL, check_val_every_n_epoch = 1, num_sanity_val_steps = 2,
  accumulate_grad_batches = NIL, gradient_clip_val = NIL, gradient_clip_algorithm = NIL,
  fast_dev_run = false, deterministic = NIL, benchmark = NIL, enable_progress_bar = true,
  enable_checkpointing = true, enable_model_summary = true, logger = true, callbacks = NIL,
  default_root_dir = NIL, log_every_n_steps = 50, use_distributed_sampler = true, replace_sampler_ddp = NIL,
  reload_dataloaders_every_n_epochs = 0, inference_mode = true, detect_anomaly = false,
  track_grad_norm = -1, move_metrics_to_cpu = false, profiler = NIL, weights_save_path = NIL,
  overfit_batches = 0, multiple_trainloader_mode = 'max_size_cycle', ipus = NIL, resume_from_checkpoint = NIL,
  auto_lr_find = false, auto_scale_batch_size = false,
}

local function is_int(v) return type(v) == 'number' and v == math.floor(v) and v == v and v ~= math.huge and v ~= -math.huge end

local function check_int(a, name, lo, allow_nil)
  local v = a[name]
  if v == nil and allow_nil then return end
  if not is_int(v) or v < lo then
    misconf('`%s` must be an integer >= %d%s, got %s', name, lo, allow_nil and ' or nil' or '', repr(v))
  end
end

local function check_bool(a, name, allow_nil)
  local v = a[name]
  if v == nil and allow_nil then return end
  if type(v) ~= 'boolean' then misconf('`%s` must be true or false, got %s', name, repr(v)) end
end

--- A limit_* value -> {kind='all'|'count'|'fraction', value=}.
function M.parse_limit(name, v)
  if v == nil then return { kind = 'all', value = 1 } end
  local frac_str = false
  if type(v) == 'string' then
    local n = tonumber(v)
    if not n then misconf('You have passed invalid value %s for %s, it has to be in [0.0, 1.0] or an int.', repr(v), name) end
    frac_str = v:find('[%.eE]') ~= nil
    v = n
  end
  if type(v) ~= 'number' or v ~= v or v < 0 then
    misconf('You have passed invalid value %s for %s, it has to be in [0.0, 1.0] or an int.', repr(v), name)
  end
  if frac_str or v ~= math.floor(v) then
    if v > 1 then
      if v == math.floor(v) then return { kind = 'count', value = v } end
      misconf('You have passed invalid value %s for %s, it has to be in [0.0, 1.0] or an int.', repr(v), name)
    end
    if v == 1 then return { kind = 'all', value = 1 } end
    return { kind = 'fraction', value = v }
  end
  if v == math.huge then return { kind = 'all', value = 1 } end
  return { kind = 'count', value = v }
end

--- Validates and completes the arguments table (a copy). Raises
--- MisconfigurationException naming unknown or bad arguments.
function M.validate(user)
  if user ~= nil and type(user) ~= 'table' then
    misconf('dpl.Trainer expects one table of arguments, as in dpl.Trainer{max_epochs = 3}, got %s', repr(user))
  end
  user = user or {}
  local unknown = {}
  for k in pairs(user) do
    if type(k) ~= 'string' or M.defaults[k] == nil then unknown[#unknown + 1] = tostring(k) end
  end
  if #unknown > 0 then
    table.sort(unknown)
    local hints = {} -- the nearest argument name of each (at most 2 edits away), as dpl.options says it
    for _, k in ipairs(unknown) do
      local best = require('dpl.options').nearest(k, M.defaults)
      if best then hints[#hints + 1] = ("'%s'"):format(best) end
    end
    misconf('Trainer got unknown argument%s: %s%s', #unknown > 1 and 's' or '', table.concat(unknown, ', '),
      #hints > 0 and (' (did you mean %s?)'):format(table.concat(hints, ', ')) or '')
  end
  local a = {}
  for k, d in pairs(M.defaults) do
    local v = user[k]
    if v == nil and d ~= NIL then v = d end
    a[k] = v
  end
  -- Lua tables cannot hold nil: check_val_every_n_epoch=false is Lightning's None
  if a.check_val_every_n_epoch == false then a.check_val_every_n_epoch = nil end
  if a.replace_sampler_ddp ~= nil then a.use_distributed_sampler = a.replace_sampler_ddp end

  check_int(a, 'num_nodes', 1)
  check_bool(a, 'auto_select_gpus')
  check_int(a, 'max_epochs', -1, true)
  check_int(a, 'min_epochs', 0, true)
  check_int(a, 'max_steps', -1)
  check_int(a, 'min_steps', 0, true)
  check_int(a, 'num_sanity_val_steps', -1)
  check_int(a, 'log_every_n_steps', 1)
  check_int(a, 'reload_dataloaders_every_n_epochs', 0)
  if a.check_val_every_n_epoch ~= nil then check_int(a, 'check_val_every_n_epoch', 1) end
  if a.num_processes ~= nil then check_int(a, 'num_processes', 1) end
  for _, b in ipairs({ 'enable_progress_bar', 'enable_checkpointing', 'enable_model_summary',
                       'use_distributed_sampler', 'inference_mode', 'detect_anomaly', 'sync_batchnorm',
                       'move_metrics_to_cpu' }) do
    check_bool(a, b)
  end
  if a.resume_from_checkpoint ~= nil and type(a.resume_from_checkpoint) ~= 'string' then
    misconf('`resume_from_checkpoint` must be a checkpoint path (string), got %s', repr(a.resume_from_checkpoint))
  end
  local mtm = a.multiple_trainloader_mode
  if mtm ~= 'max_size_cycle' and mtm ~= 'min_size' then
    misconf("`multiple_trainloader_mode` must be 'max_size_cycle' or 'min_size', got %s", repr(mtm))
  end
  -- the tuner's flags (trainer:tune): Lightning checks them when tuning; here at once, with its texts
  local alf = a.auto_lr_find
  if type(alf) ~= 'boolean' and (type(alf) ~= 'string' or alf == '') then
    misconf('`auto_lr_find` must be true, false or the name of the learning-rate attribute (a string), got %s', repr(alf))
  end
  local asb = a.auto_scale_batch_size
  if type(asb) == 'string' then
    local m = asb:lower()
    if m ~= 'power' and m ~= 'binsearch' then
      error(errors.ValueError(("`mode` should be either of ('power', 'binsearch'): `auto_scale_batch_size=%s`")
        :format(repr(asb))), 0)
    end
  elseif type(asb) ~= 'boolean' then
    misconf("`auto_scale_batch_size` must be true, false, 'power' or 'binsearch', got %s", repr(asb))
  end
  local tgn = a.track_grad_norm
  if not (tgn == 'inf' or (type(tgn) == 'number' and (tgn == -1 or tgn > 0))) then
    misconf('`track_grad_norm` must be a positive number, "inf" or -1 (off), got %s', repr(tgn))
  end
  -- max_time: Lightning's forms ("DD:HH:MM:SS", {days=, hours=, minutes=, seconds=}) or seconds;
  -- checked here, given to the Timer as it is
  require('dpl.callbacks.timer').parse_duration(a.max_time, '`max_time`')
  if a.default_root_dir ~= nil and type(a.default_root_dir) ~= 'string' then
    misconf('`default_root_dir` must be a path (string), got %s', repr(a.default_root_dir))
  end
  if a.deterministic ~= nil and type(a.deterministic) ~= 'boolean' and a.deterministic ~= 'warn' then
    misconf('`deterministic` must be true, false or "warn", got %s', repr(a.deterministic))
  end

  -- limits and validation frequency
  a._limits = {}
  for _, s in ipairs({ 'train', 'val', 'test', 'predict' }) do
    local name = 'limit_' .. s .. '_batches'
    a._limits[s] = M.parse_limit(name, a[name])
  end
  local vci = a.val_check_interval
  if vci == nil then a._val_check = { kind = 'fraction', value = 1 }
  else
    local l = M.parse_limit('val_check_interval', vci)
    if l.kind == 'count' and l.value < 1 then
      misconf('`val_check_interval` (%s) must be an int >= 1 or a fraction in (0.0, 1.0]', repr(vci))
    end
    if l.kind == 'all' then l = { kind = 'fraction', value = 1 } end
    if l.kind == 'fraction' and l.value <= 0 then
      misconf('`val_check_interval` (%s) must be an int >= 1 or a fraction in (0.0, 1.0]', repr(vci))
    end
    a._val_check = l
  end
  if a.check_val_every_n_epoch == nil and a._val_check.kind ~= 'count' then
    misconf('`val_check_interval` should be an integer when `check_val_every_n_epoch=nil`, found %s.', repr(vci))
  end

  -- accumulation: an int or a {[epoch] = factor} table, checked as Lightning's
  -- GradientAccumulationScheduler checks them (the Trainer builds one from it)
  local agb = a.accumulate_grad_batches
  if agb ~= nil and not is_int(agb) and type(agb) ~= 'table' then
    misconf('`accumulate_grad_batches` should be an int or a dict. Got %s.', type(agb) == 'string' and agb or repr(agb))
  end
  if agb ~= nil then
    local GAS = require 'dpl.callbacks.gradient_accumulation_scheduler'
    a._accumulate = GAS.check_scheduling(is_int(agb) and { [0] = agb } or agb, 3)
  end

  -- clipping
  if a.gradient_clip_val ~= nil and type(a.gradient_clip_val) ~= 'number' then
    misconf('`gradient_clip_val` should be an int or a float. Got %s.', repr(a.gradient_clip_val))
  end
  a._clip_algorithm_given = a.gradient_clip_algorithm ~= nil
  if a.gradient_clip_algorithm ~= nil then
    local alg = type(a.gradient_clip_algorithm) == 'string' and a.gradient_clip_algorithm:lower()
    if alg ~= 'norm' and alg ~= 'value' then
      misconf('`gradient_clip_algorithm` %s is invalid. Allowed algorithms: norm, value.', repr(a.gradient_clip_algorithm))
    end
    a.gradient_clip_algorithm = alg
  end

  -- plugins: Lightning's precision/cluster/checkpoint-IO plugin objects have no dplhost
  -- counterparts; refused rather than ignored (precision= and strategy= cover what they set)
  if a.plugins ~= nil and not (type(a.plugins) == 'table' and getmetatable(a.plugins) == nil and next(a.plugins) == nil) then
    error(errors.NotImplementedError(('Trainer(plugins=%s): plugins (precision, cluster environment, checkpoint IO)'
      .. ' are not implemented in dplhost; set precision= and strategy= (a strategy object for its options)'
      .. ' instead'):format(repr(a.plugins))), 0)
  end
  if a.weights_save_path ~= nil and type(a.weights_save_path) ~= 'string' then
    misconf('`weights_save_path` must be a path (string), got %s', repr(a.weights_save_path))
  end

  -- overfit_batches: the first n (or a fraction of the) training batches, unshuffled, for
  -- training and validation alike
  local ob = a.overfit_batches
  if type(ob) ~= 'number' and type(ob) ~= 'string' then
    misconf('`overfit_batches` must be an int or a fraction, got %s', repr(ob))
  end
  local obl = M.parse_limit('overfit_batches', ob)
  if not (obl.kind == 'count' and obl.value == 0) and obl.kind ~= 'all' then
    a._overfit = obl
    a._limits.train, a._limits.val = obl, obl
  end

  -- fast_dev_run
  local fdr = a.fast_dev_run
  if fdr == true then fdr = 1 end
  if fdr == false then fdr = 0 end
  if not is_int(fdr) then misconf('fast_dev_run=%s is not a valid configuration. It should be a boolean or an int >= 0.', repr(a.fast_dev_run)) end
  if fdr < 0 then misconf('fast_dev_run=%s is not a valid configuration. It should be >= 0.', repr(a.fast_dev_run)) end
  a._fast_dev_run = fdr
  if fdr > 0 then
    for _, s in ipairs({ 'train', 'val', 'test', 'predict' }) do
      if not (a._overfit and (s == 'train' or s == 'val')) then a._limits[s] = { kind = 'count', value = fdr } end
    end
    a.max_steps, a.max_epochs, a.num_sanity_val_steps = fdr, 1, 0
    a._val_check = { kind = 'fraction', value = 1 }
    a.check_val_every_n_epoch = 1
  end

  -- epochs / steps
  if a.max_epochs == nil then
    a._max_epochs_defaulted = a.max_steps == -1 and a.max_time == nil
    a.max_epochs = a._max_epochs_defaulted and 1000 or -1
  end
  if a.min_epochs == nil then a.min_epochs = a.min_steps and 1 or 0 end
  if a.max_epochs ~= -1 and a.min_epochs > a.max_epochs then
    misconf('min_epochs=%d and max_epochs=%d contradict each other: min_epochs must be <= max_epochs', a.min_epochs, a.max_epochs)
  end
  if a.min_steps and a.max_steps ~= -1 and a.min_steps > a.max_steps then
    misconf('min_steps=%d and max_steps=%d contradict each other: min_steps must be <= max_steps', a.min_steps, a.max_steps)
  end
  if a.num_sanity_val_steps == -1 then a.num_sanity_val_steps = math.huge end

  -- callbacks / logger types
  if a.callbacks ~= nil then
    if type(a.callbacks) ~= 'table' then misconf('`callbacks` must be a list of callbacks, got %s', repr(a.callbacks)) end
    local C = require 'dpl.callbacks'
    local list = C.is_callback(a.callbacks) and { a.callbacks } or a.callbacks
    for i, cb in ipairs(list) do
      if not C.is_callback(cb) then misconf('callbacks[%d] is not a Callback (got %s)', i, repr(cb)) end
    end
    a.callbacks = list
  end
  return a
end

---------------------------------------------------------------- from_argv

-- how each argument's command-line text becomes a value
local kinds = {
  gpus = 'devices', devices = 'devices', tpu_cores = 'devices',
  auto_select_gpus = 'bool', enable_progress_bar = 'bool', enable_checkpointing = 'bool',
  enable_model_summary = 'bool', use_distributed_sampler = 'bool', replace_sampler_ddp = 'bool',
  inference_mode = 'bool', detect_anomaly = 'bool', sync_batchnorm = 'bool', move_metrics_to_cpu = 'bool',
  fast_dev_run = 'int_or_bool', deterministic = 'bool_or_str', benchmark = 'bool', logger = 'bool',
  accelerator = 'str', strategy = 'str', distributed_backend = 'str', amp_backend = 'str', amp_level = 'str',
  gradient_clip_algorithm = 'str', default_root_dir = 'str', multiple_trainloader_mode = 'str', resume_from_checkpoint = 'str',
  weights_save_path = 'str',
  precision = 'int_or_str',
  limit_train_batches = 'limit', limit_val_batches = 'limit', limit_test_batches = 'limit',
  limit_predict_batches = 'limit', val_check_interval = 'limit', max_time = 'duration',
  auto_lr_find = 'bool_or_any_str', auto_scale_batch_size = 'bool_or_any_str',
}

local function to_bool(name, s)
  local l = s:lower()
  if l == 'true' or l == '1' or l == 'yes' or l == 'y' or l == 't' or l == 'on' then return true end
  if l == 'false' or l == '0' or l == 'no' or l == 'n' or l == 'f' or l == 'off' then return false end
  misconf('--%s expects a boolean (true/false), got %s', name, repr(s))
end

local function convert(name, s)
  local kind = kinds[name] or 'number'
  if s:lower() == 'none' or s:lower() == 'nil' then return nil end
  if kind == 'devices' then
    -- Lightning's argparse: "3" is the number 3, "0,1" / "3," are id strings
    return require('dpl.devices')._gpus_allowed_type(s)
  elseif kind == 'bool' then return to_bool(name, s)
  elseif kind == 'str' then return s
  elseif kind == 'int_or_bool' then
    local n = tonumber(s)
    if n then return n end
    return to_bool(name, s)
  elseif kind == 'bool_or_str' then
    if s == 'warn' then return s end
    return to_bool(name, s)
  elseif kind == 'bool_or_any_str' then
    -- Lightning's str_to_bool_or_str: a boolean word is a boolean, any other text stays text
    local ok, b = pcall(to_bool, name, s)
    if ok then return b end
    return s
  elseif kind == 'int_or_str' then return tonumber(s) or s
  elseif kind == 'duration' then return tonumber(s) or s -- seconds, or "DD:HH:MM:SS" for the Timer
  elseif kind == 'limit' then
    -- keep "1.0" a fraction: the string goes to parse_limit
    if s:find('[%.eE]') then return s end
    return tonumber(s) or s
  end
  local n = tonumber(s)
  if n == nil then misconf('--%s expects a number, got %s', name, repr(s)) end
  return n
end

-- flags that may stand alone (`--fast_dev_run`, `--deterministic`: true)
local bool_flags = { fast_dev_run = true, deterministic = true, auto_lr_find = true, auto_scale_batch_size = true }
for k, v in pairs(kinds) do if v == 'bool' then bool_flags[k] = true end end

--- M.argv_help(defaults): the text from_argv prints for --help: the Trainer's command-line
--- flags, one a line, with the value each takes and its default (defaults: the script's, which
--- win over the Trainer's)
function M.argv_help(defaults)
  local names = {}
  for k in pairs(M.defaults) do
    if k ~= 'callbacks' and k ~= 'plugins' and k ~= 'profiler' then names[#names + 1] = k end
  end
  table.sort(names)
  local what = { devices = 'N|IDS', bool = 'true|false', str = 'TEXT', int_or_bool = 'N|true|false',
    bool_or_str = 'true|false|warn', bool_or_any_str = 'true|false|TEXT', int_or_str = 'N|TEXT', limit = 'N|FRACTION',
    duration = 'SECONDS|DD:HH:MM:SS', number = 'N' }
  local lines = { 'Trainer flags (--name value or --name=value; dashes or underscores; none is nil):' }
  for _, k in ipairs(names) do
    local d = defaults and defaults[k]
    if d == nil then d = M.defaults[k] end
    if d == NIL then d = nil end
    lines[#lines + 1] = string.format('  --%-32s %s', k .. ' ' .. what[kinds[k] or 'number'],
      d == nil and '' or ('(default: ' .. tostring(d) .. ')')):gsub('%s+$', '')
  end
  lines[#lines + 1] = "(the script's own flags, if it has any, are not in this list)"
  return table.concat(lines, '\n') .. '\n'
end

--- M.unknown_hint(word): for a command-line word `--name[=value]` that is not a Trainer argument
--- but is at most 2 edits from one, that argument's name (a probable typo); else nil
function M.unknown_hint(word)
  local key = type(word) == 'string' and (word:match('^%-%-([%w_%-]+)=') or word:match('^%-%-([%w_%-]+)$'))
  if not key then return nil end
  local name = key:gsub('%-', '_')
  if M.defaults[name] ~= nil then return nil end
  local accepted = {}
  for k in pairs(M.defaults) do accepted[k] = true end
  accepted.callbacks, accepted.plugins, accepted.profiler = nil, nil, nil
  return require('dpl.options').nearest(name, accepted)
end

--- Parses `--name value`, `--name=value` (dashes or underscores) for the Trainer's
--- arguments. Returns the arguments table and the other command-line words.
function M.parse_argv(argv)
  local out, rest = {}, {}
  local i, n = 1, #(argv or {})
  while i <= n do
    local w = argv[i]
    local key, val = w:match('^%-%-([%w_%-]+)=(.*)$')
    if not key then key = w:match('^%-%-([%w_%-]+)$') end
    local name = key and key:gsub('%-', '_')
    if name and M.defaults[name] ~= nil and name ~= 'callbacks' and name ~= 'plugins' and name ~= 'profiler' then
      if val == nil then
        local nxt = argv[i + 1]
        if bool_flags[name] and (nxt == nil or nxt:sub(1, 2) == '--') then
          val = 'true'
        else
          if nxt == nil then misconf('--%s expects a value', key) end
          val = nxt
          i = i + 1
        end
      end
      out[name] = convert(name, val)
    else
      rest[#rest + 1] = w
    end
    i = i + 1
  end
  return out, rest
end

return M
