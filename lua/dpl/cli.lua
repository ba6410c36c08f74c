-- dpl.cli: LightningCLI (Lightning 1.9's pytorch_lightning.cli) for Lua scripts:
--
--   dplhost train.lua fit --trainer.max_epochs 3 --model.lr 0.1 --config cfg.yaml
--
-- dpl.cli.LightningCLI(ModelClass, DataModuleClass, {args=, run=true, ...}) parses the
-- subcommand (fit/validate/test/predict/tune), the groups --trainer.* (the Trainer's
-- arguments), --model.* / --data.* (the constructor parameters of the classes, by name),
-- --config files (YAML, or .lua returning a table) and --print_config; seeds, builds the
-- model, datamodule and Trainer, and runs the subcommand. SaveConfigCallback writes the
-- resolved config as config.yaml into the log directory (rank 0). Differences from
-- Lightning: docs/trainer.md "LightningCLI".
local class = require 'dpl.class'
local errors = require 'dpl.errors'
local yaml = require 'dpl.yaml'
local targs = require 'dpl.trainer.args'

local M = {}
local NULL = yaml.null

M.SUBCOMMANDS = { 'fit', 'validate', 'test', 'predict', 'tune' }
local DESCRIPTION = {
  fit = 'Runs the full optimization routine.',
  validate = 'Perform one evaluation epoch over the validation set.',
  test = 'Perform one evaluation epoch over the test set.',
  predict = 'Run inference on your data.',
  tune = 'Runs routines to tune hyperparameters before training.',
}
-- each subcommand's own options with their defaults, in Lightning 1.9.5's order
local SUB_OPTIONS = {
  fit = { { 'ckpt_path', NULL } },
  validate = { { 'ckpt_path', NULL }, { 'verbose', true } },
  test = { { 'ckpt_path', NULL }, { 'verbose', true } },
  predict = { { 'return_predictions', NULL }, { 'ckpt_path', NULL } },
  tune = { { 'scale_batch_size_kwargs', NULL }, { 'lr_find_kwargs', NULL }, { 'method', 'fit' } },
}
local SUB_HELP = {
  ckpt_path = 'checkpoint to start from: a path, "best" or "last"',
  verbose = 'print the results (true/false)',
  return_predictions = 'keep and return the predictions (true/false/null)',
  scale_batch_size_kwargs = "options of the batch size finder (a YAML mapping, e.g. '{mode: binsearch}')",
  lr_find_kwargs = "options of the learning-rate finder (a YAML mapping, e.g. '{num_training: 50}')",
  method = 'the Trainer method tuned for (fit)',
}

-- the order of Lightning 1.9.5's Trainer parameters (its printed config); dplhost's other
-- arguments follow
local LIGHTNING_ORDER = {
  'logger', 'enable_checkpointing', 'callbacks', 'default_root_dir', 'gradient_clip_val', 'gradient_clip_algorithm',
  'num_nodes', 'num_processes', 'devices', 'gpus', 'auto_select_gpus', 'tpu_cores', 'ipus', 'enable_progress_bar',
  'overfit_batches', 'track_grad_norm', 'check_val_every_n_epoch', 'fast_dev_run', 'accumulate_grad_batches',
  'max_epochs', 'min_epochs', 'max_steps', 'min_steps', 'max_time', 'limit_train_batches', 'limit_val_batches',
  'limit_test_batches', 'limit_predict_batches', 'val_check_interval', 'log_every_n_steps', 'accelerator',
  'strategy', 'sync_batchnorm', 'precision', 'enable_model_summary', 'num_sanity_val_steps',
  'resume_from_checkpoint', 'profiler', 'benchmark', 'deterministic', 'reload_dataloaders_every_n_epochs',
  'auto_lr_find', 'replace_sampler_ddp', 'detect_anomaly', 'auto_scale_batch_size', 'plugins', 'amp_backend',
  'amp_level', 'move_metrics_to_cpu', 'multiple_trainloader_mode', 'inference_mode',
}
local TRAINER_ORDER = {}
do
  local seen = {}
  for _, k in ipairs(LIGHTNING_ORDER) do TRAINER_ORDER[#TRAINER_ORDER + 1] = k; seen[k] = true end
  for _, k in ipairs(targs.order) do
    if not seen[k] then TRAINER_ORDER[#TRAINER_ORDER + 1] = k end
  end
end
-- the arguments whose YAML float (1.0, 2.0) must stay a fraction (Lua has no 1.0 apart from 1)
local FRACTION_KEYS = { limit_train_batches = true, limit_val_batches = true, limit_test_batches = true,
  limit_predict_batches = true, val_check_interval = true, overfit_batches = true }

local OPTION_KEYS = {
  args = true, run = true, save_config_callback = true, save_config_kwargs = true, trainer_class = true,
  trainer_defaults = true, seed_everything_default = true, parser_kwargs = true, subclass_mode_model = true,
  subclass_mode_data = true, auto_configure_optimizers = true,
}

local function is_plain_table(v) return type(v) == 'table' and getmetatable(v) == nil end

local function copy(v)
  if not is_plain_table(v) then return v end
  local out = {}
  for k, x in pairs(v) do out[k] = copy(x) end
  return out
end

local function basename(p) return (tostring(p):match('([^/]+)$')) or tostring(p) end

---------------------------------------------------------------- usage errors

-- a usage error: raised as this object, caught by the constructor (one line on stderr, exit 2)
local UsageError = errors.new_class('UsageError', errors.ValueError)
M.UsageError = UsageError

local function usage_error(fmt, ...)
  error(UsageError(select('#', ...) > 0 and fmt:format(...) or fmt), 0)
end

local levenshtein = require('dpl.options').distance -- (edit distance)

-- the closest known name, when close enough
local function did_you_mean(word, known)
  local best, bd = nil, math.huge
  for _, k in ipairs(known) do
    local d = levenshtein(word, k)
    if d < bd then best, bd = k, d end
  end
  if best and bd <= math.max(2, math.floor(#word / 4)) then return (' (did you mean %s?)'):format(best) end
  return ''
end

---------------------------------------------------------------- SaveConfigCallback

local Callback = require 'dpl.callbacks.callback'

--- SaveConfigCallback(cli, config, {config_filename='config.yaml', overwrite=false,
--- multifile=false}): Lightning's. At setup, writes the config as YAML into trainer.log_dir
--- on global rank 0; an existing file there is a RuntimeError unless overwrite=true (rank 0
--- looks, every rank learns it by a broadcast). Saves once.
local SaveConfigCallback = Callback:extend('SaveConfigCallback')
M.SaveConfigCallback = SaveConfigCallback

function SaveConfigCallback:__init(cli, config, opts)
  opts = opts or {}
  if not is_plain_table(opts) then errors.TypeError:raise('SaveConfigCallback: the options must be a table', 2) end
  for k in pairs(opts) do
    if k ~= 'config_filename' and k ~= 'overwrite' and k ~= 'multifile' then
      errors.TypeError:raise(("SaveConfigCallback got an unexpected option '%s' (config_filename, overwrite,"
        .. ' multifile)'):format(tostring(k)), 2)
    end
  end
  if opts.multifile then
    errors.NotImplementedError:raise('SaveConfigCallback(multifile=true): the config is always saved as one file', 2)
  end
  self.cli, self.config = cli, config
  self.config_filename = opts.config_filename or 'config.yaml'
  if type(self.config_filename) ~= 'string' or self.config_filename == '' then
    errors.TypeError:raise('SaveConfigCallback: config_filename must be a file name (string)', 2)
  end
  self.overwrite = opts.overwrite and true or false
  self.multifile = false
  self.already_saved = false
end

local function file_exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() return true end
  return false
end

function SaveConfigCallback:setup(trainer)
  if self.already_saved then return end
  local strategy = trainer.strategy
  local log_dir = strategy:broadcast(trainer.log_dir or trainer.default_root_dir or '.')
  local config_path = log_dir .. '/' .. self.config_filename
  if not self.overwrite then
    local exists = trainer.is_global_zero and file_exists(config_path) or false
    exists = strategy:broadcast(exists)
    if exists then
      errors.RuntimeError:raise(('%s expected %s to NOT exist. Aborting to avoid overwriting results of a previous'
        .. ' run. You can delete the previous config file, set `LightningCLI(model, data, {save_config_callback ='
        .. ' false})` to disable config saving, or set `LightningCLI(model, data, {save_config_kwargs = {overwrite'
        .. ' = true}})` to overwrite the config file.'):format(getmetatable(self).__name or 'SaveConfigCallback',
        config_path), 2)
    end
  end
  if trainer.is_global_zero then
    local base = require 'dpl.loggers.base'
    base.mkdir_p(log_dir)
    base.write_file(config_path, self.cli:dump(self.config))
    self.already_saved = true
  end
  self.already_saved = strategy:broadcast(self.already_saved)
end

---------------------------------------------------------------- the CLI

local LightningCLI = class.Object:extend('LightningCLI')
M.LightningCLI = LightningCLI

-- constructor parameter names of a class (its __init) or a function
local function params_of(what, kind)
  local f = what
  if type(what) == 'table' then f = what.__init end
  if type(f) ~= 'function' then
    errors.TypeError:raise(('LightningCLI: the %s class must be a class (with an __init) or a function that'
      .. ' returns one, got %s'):format(kind, type(what)), 4)
  end
  return require('dpl.lightning')._param_names(f)
end

--- LightningCLI(model_class, datamodule_class, {args=, run=true, save_config_callback=true,
--- save_config_kwargs=, trainer_class=dpl.Trainer, trainer_defaults={}, seed_everything_default=true,
--- subclass_mode_model=false, subclass_mode_data=false, auto_configure_optimizers=true}).
--- Fields after it: config, subcommand, model, datamodule, trainer, result (what the
--- subcommand returned; not in Lightning).
function LightningCLI:__init(model_class, datamodule_class, opts)
  opts = opts or {}
  if not is_plain_table(opts) then
    errors.TypeError:raise(('LightningCLI(model_class, datamodule_class, {options}): the options must be a table,'
      .. ' got %s'):format(type(opts)), 3)
  end
  local unknown = {}
  for k in pairs(opts) do if not OPTION_KEYS[k] then unknown[#unknown + 1] = tostring(k) end end
  if #unknown > 0 then
    table.sort(unknown)
    errors.ValueError:raise(('Unexpected keyword parameters: %s'):format(table.concat(unknown, ', ')), 3)
  end
  if model_class == nil or opts.subclass_mode_model then
    errors.NotImplementedError:raise('LightningCLI: subclass_mode_model (--model.class_path / --model.init_args,'
      .. ' or no model class) is not implemented in dplhost; give the model class', 3)
  end
  if opts.subclass_mode_data then
    errors.NotImplementedError:raise('LightningCLI: subclass_mode_data (--data.class_path / --data.init_args) is'
      .. ' not implemented in dplhost; give the datamodule class', 3)
  end
  if opts.parser_kwargs ~= nil and not (is_plain_table(opts.parser_kwargs) and next(opts.parser_kwargs) == nil) then
    errors.NotImplementedError:raise('LightningCLI: parser_kwargs (jsonargparse options) are not implemented in dplhost', 3)
  end
  self.model_class, self.datamodule_class = model_class, datamodule_class
  self.model_params = params_of(model_class, 'model')
  self.data_params = datamodule_class ~= nil and params_of(datamodule_class, 'datamodule') or nil
  self.trainer_class = opts.trainer_class or require('dpl.trainer')
  local td = opts.trainer_defaults or {}
  if not is_plain_table(td) then errors.TypeError:raise('LightningCLI: trainer_defaults must be a table', 3) end
  for k in pairs(td) do
    if type(k) ~= 'string' or targs.defaults[k] == nil then
      errors.ValueError:raise(('LightningCLI: trainer_defaults has an unknown Trainer argument %s'):format(
        tostring(k)), 3)
    end
  end
  self.trainer_defaults = td
  local sed = opts.seed_everything_default
  if sed == nil then sed = true end
  if type(sed) ~= 'boolean' and not (type(sed) == 'number' and sed == math.floor(sed)) then
    errors.TypeError:raise('LightningCLI: seed_everything_default must be true, false or an integer', 3)
  end
  self.seed_everything_default = sed
  local scc = opts.save_config_callback
  if scc == nil or scc == true then scc = SaveConfigCallback end
  if scc ~= false and not (type(scc) == 'table' and class.is_instance(setmetatable({}, scc), Callback)) then
    errors.TypeError:raise('LightningCLI: save_config_callback must be true, false or a SaveConfigCallback class', 3)
  end
  self.save_config_callback = scc or nil
  self.save_config_kwargs = opts.save_config_kwargs or {}
  self.auto_configure_optimizers = opts.auto_configure_optimizers
  local run = opts.run
  if run == nil then run = true end
  local args = opts.args
  if args == nil then
    args = {}
    for i = 1, #(_G.arg or {}) do args[i] = _G.arg[i] end
  elseif not is_plain_table(args) or (next(args) ~= nil and args[1] == nil) then
    errors.TypeError:raise('LightningCLI: args must be a list of command-line words', 3)
  end
  self.prog = basename(_G.arg and _G.arg[0] or 'dplhost')

  local ok, err = pcall(self.parse_arguments, self, args, run)
  if not ok then
    if errors.is(err, UsageError) then self:_fail(err.message) end
    error(err, 0)
  end
  if self._print_config then
    self:_say(io.stdout, self:dump(self.config))
    self:_exit(0)
  end
  self:_set_seed()
  self:before_instantiate_classes()
  self:instantiate_classes()
  if self.subcommand ~= nil then self:_run_subcommand(self.subcommand) end
end

-- hooks a subclass may define (Lightning's)
function LightningCLI:before_instantiate_classes() end
function LightningCLI:add_arguments_to_parser(parser) end -- luacheck: ignore

---------------------------------------------------------------- the parser of add_arguments_to_parser

-- What `add_arguments_to_parser(parser)` gets: jsonargparse's link_arguments and set_defaults;
-- any other parser method is a NotImplementedError naming it (never silently ignored).
local CLIParser = {}
local PARSER_METHODS = {}
CLIParser.__index = function(_, k)
  local m = PARSER_METHODS[k]
  if m then return m end
  if type(k) == 'string' and not k:match('^_') then
    return function()
      errors.NotImplementedError:raise(('LightningCLI: parser:%s (jsonargparse) is not implemented in dplhost;'
        .. ' add_arguments_to_parser can use parser:link_arguments and parser:set_defaults'):format(k), 2)
    end
  end
  return nil
end

-- 'model.hidden' -> 'model', {'hidden'} (a group and a non-empty path)
local function split_key(key)
  if type(key) ~= 'string' then return nil end
  local group, rest = key:match('^(%a+)%.(.+)$')
  if not group then return nil end
  local path = {}
  for part in rest:gmatch('[^.]+') do path[#path + 1] = part end
  return group, path
end

function LightningCLI:_group_params(group)
  if group == 'trainer' then return TRAINER_ORDER end
  if group == 'model' then return self.model_params end
  if group == 'data' then return self.data_params end
  return nil
end

-- is `key` ('model.hidden', 'trainer.max_epochs', 'model.opts.depth') an argument of the parser?
function LightningCLI:_is_argument(key)
  local group, path = split_key(key)
  local params = group and self:_group_params(group)
  if not params then return false end
  if group == 'trainer' and #path > 1 then return false end
  for _, p in ipairs(params) do if p == path[1] then return true end end
  return false
end

--- parser:link_arguments(source, target [, compute_fn [, apply_on='parse']]) (or
--- (source, target, {compute_fn=, apply_on=})): jsonargparse's. `source` is a key such as
--- 'data.batch_size' (or a list of keys, passed to compute_fn in order); the target's value is
--- the source's (compute_fn(values...) when given). apply_on='parse': from the parsed config;
--- 'instantiate': from the object built for the source's group ('data.num_classes' reads the
--- datamodule's field), which is then built before the target's group. The target is no longer
--- an argument: given on the command line it is an error (exit 2), in a config it is replaced,
--- and the printed/saved config leaves it out.
function PARSER_METHODS.link_arguments(parser, source, target, compute_fn, apply_on)
  local cli = parser._cli
  if type(compute_fn) == 'table' and getmetatable(compute_fn) == nil and apply_on == nil then
    local o = compute_fn
    for k in pairs(o) do
      if k ~= 'compute_fn' and k ~= 'apply_on' then
        errors.TypeError:raise(("link_arguments got an unexpected option '%s' (compute_fn, apply_on)"):format(
          tostring(k)), 2)
      end
    end
    compute_fn, apply_on = o.compute_fn, o.apply_on
  end
  apply_on = apply_on or 'parse'
  if apply_on ~= 'parse' and apply_on ~= 'instantiate' then
    errors.ValueError:raise(('link_arguments: apply_on must be "parse" or "instantiate", got %s'):format(
      tostring(apply_on)), 2)
  end
  if compute_fn ~= nil and type(compute_fn) ~= 'function'
      and not (type(getmetatable(compute_fn)) == 'table' and getmetatable(compute_fn).__call) then
    errors.TypeError:raise(('link_arguments: compute_fn must be a function, got %s'):format(type(compute_fn)), 2)
  end
  local sources = type(source) == 'table' and source or { source }
  if #sources == 0 then errors.ValueError:raise('link_arguments: no source key given', 2) end
  if #sources > 1 and compute_fn == nil then
    errors.ValueError:raise('link_arguments: multiple source keys require a compute_fn', 2)
  end
  for _, s in ipairs(sources) do
    if apply_on == 'parse' then
      if not cli:_is_argument(s) then
        errors.ValueError:raise(('link_arguments: no action for the source key "%s"'):format(tostring(s)), 2)
      end
    else
      local g, path = split_key(s)
      if (g ~= 'model' and g ~= 'data') or (g == 'data' and not cli.data_params) or #path ~= 1 then
        errors.ValueError:raise(('link_arguments(apply_on="instantiate"): the source "%s" must be an attribute of'
          .. ' the model or the datamodule (model.NAME, data.NAME)'):format(tostring(s)), 2)
      end
    end
  end
  if not cli:_is_argument(target) then
    errors.ValueError:raise(('link_arguments: no action for the target key "%s"'):format(tostring(target)), 2)
  end
  local tgroup = split_key(target)
  if apply_on == 'instantiate' then
    local sgroup = split_key(sources[1])
    for _, s in ipairs(sources) do
      if split_key(s) ~= sgroup then
        errors.ValueError:raise('link_arguments(apply_on="instantiate"): the sources must be of one object', 2)
      end
    end
    if sgroup == tgroup then
      errors.ValueError:raise(('link_arguments: the source "%s" and the target "%s" are of the same object'):format(
        sources[1], target), 2)
    end
    local other = sgroup == 'model' and 'data' or 'model'
    for _, l in ipairs(cli._links) do
      if l.apply_on == 'instantiate' and l.sgroup == tgroup and l.tgroup == sgroup then
        errors.ValueError:raise(('link_arguments: links from %s to %s and back form a cycle'):format(sgroup, other), 2)
      end
    end
  end
  if cli._link_targets[target] then
    errors.ValueError:raise(('link_arguments: the target "%s" is already linked'):format(target), 2)
  end
  local l = { sources = sources, target = target, compute_fn = compute_fn, apply_on = apply_on,
    sgroup = split_key(sources[1]), tgroup = tgroup }
  cli._links[#cli._links + 1] = l
  cli._link_targets[target] = l
end

--- parser:set_defaults({['model.hidden'] = 16, ...}) or parser:set_defaults('model.hidden', 16):
--- new defaults (below config files and flags).
function PARSER_METHODS.set_defaults(parser, k, v)
  local cli = parser._cli
  local t = k
  if type(k) ~= 'table' then t = { [k] = v } end
  for key, val in pairs(t) do
    if not cli:_is_argument(key) then
      errors.KeyError:raise(('set_defaults: no action for the key "%s"'):format(tostring(key)), 2)
    end
    cli._set_defaults[#cli._set_defaults + 1] = { key, val }
  end
end

-- sets cfg's value at a key ('model.opts.depth')
local function set_at(cfg, key, v)
  local group, path = split_key(key)
  local t = cfg[group]
  for k = 1, #path - 1 do
    if not is_plain_table(t[path[k]]) then t[path[k]] = {} end
    t = t[path[k]]
  end
  t[path[#path]] = v
end

local function get_at(cfg, key)
  local group, path = split_key(key)
  local t = cfg[group]
  for k = 1, #path do
    if not is_plain_table(t) then return nil end
    t = t[path[k]]
  end
  return t
end

-- a link's value from its sources' values (NULL for a nil result)
local function link_value(l, values)
  local v
  if l.compute_fn then
    local args = {}
    for i, x in ipairs(values) do if x ~= NULL then args[i] = x end end
    v = l.compute_fn(unpack(args, 1, #values))
  else
    v = values[1]
  end
  if v == nil then return NULL end
  return v
end

-- output on global rank 0 only (every rank parses the same command line)
function LightningCLI:_say(f, text)
  if require('dpl.log').rank() == 0 then
    f:write(text)
    f:flush()
  end
end

function LightningCLI:_exit(code)
  io.stdout:flush()
  io.stderr:flush()
  os.exit(code)
end

function LightningCLI:_fail(msg)
  local where = self.prog .. (self.subcommand and (' ' .. self.subcommand) or '')
  msg = tostring(msg):gsub('\n', ' ')
  self:_say(io.stderr, ('%s: error: %s\n'):format(where, msg))
  if require('dpl.log').rank() ~= 0 then
    -- every rank parses the same line and fails alike, but only rank 0 writes the error: the
    -- others wait for rank 0 to exit first (the launcher then stops them), else a launcher that
    -- stops all ranks when one fails could stop rank 0 before its line is written
    pcall(require('dpl.devices')._sleep, 5)
  end
  self:_exit(2)
end

---------------------------------------------------------------- parsing

-- the config's defaults for a subcommand (nil: run=false)
function LightningCLI:_defaults(sub)
  local cfg = { seed_everything = self.seed_everything_default, trainer = {}, model = {} }
  for _, k in ipairs(TRAINER_ORDER) do
    local d = targs.defaults[k]
    cfg.trainer[k] = d == targs.NIL and NULL or d
  end
  for k, v in pairs(self.trainer_defaults) do
    if k ~= 'callbacks' then cfg.trainer[k] = copy(v) end
  end
  for _, p in ipairs(self.model_params) do cfg.model[p] = NULL end
  if self.data_params then
    cfg.data = {}
    for _, p in ipairs(self.data_params) do cfg.data[p] = NULL end
  end
  for _, kv in ipairs(self._set_defaults or {}) do set_at(cfg, kv[1], copy(kv[2])) end
  for _, o in ipairs(sub and SUB_OPTIONS[sub] or {}) do cfg[o[1]] = o[2] end
  return cfg
end

local function is_null_word(s)
  return s == '' or s == '~' or s == 'null' or s == 'Null' or s == 'NULL' or s == 'none' or s == 'None' or s == 'nil'
end

-- a flag's text as a YAML value (the rule of --model.* / --data.*)
local function yaml_value(raw, flag)
  local ok, v, floats = pcall(yaml.decode, raw, 'argument ' .. flag)
  if not ok then usage_error('%s', errors.is(v, errors.ValueError) and v.message or tostring(v)) end
  return v, floats
end

-- the Trainer arguments that take a list or a mapping (jsonargparse reads `[0, 1]`, `{minutes: 1}`)
local TABLE_ARGS = { devices = true, gpus = true, tpu_cores = true, max_time = true, accumulate_grad_batches = true }

-- a --trainer.NAME value, as Trainer.from_argv reads it (a list or mapping as YAML)
local function trainer_value(name, raw)
  if is_null_word(raw) then return NULL end
  if name == 'callbacks' or name == 'plugins' then return yaml_value(raw, '--trainer.' .. name) end
  if TABLE_ARGS[name] and raw:match('^%s*[%[{]') then return (yaml_value(raw, '--trainer.' .. name)) end
  if name == 'profiler' then return raw end
  local ok, out = pcall(targs.parse_argv, { '--' .. name, raw })
  if not ok then
    local msg = errors.is(out, errors.DplError) and out.message or tostring(out)
    usage_error('argument --trainer.%s: %s', name, (msg:gsub('^%-%-' .. name .. ' ', '')))
  end
  local v = out[name]
  if v == nil then return NULL end
  return v
end

-- a Trainer argument that may stand alone (`--trainer.fast_dev_run`): as Trainer.from_argv
local function trainer_bool_flag(name)
  return (pcall(targs.parse_argv, { '--' .. name }))
end

local function check_seed(v, where)
  if v == NULL then v = false end
  if type(v) ~= 'boolean' and not (type(v) == 'number' and v == math.floor(v)) then
    usage_error('%s: seed_everything expects true, false or an integer, got %s', where, yaml.encode_inline(v))
  end
  return v
end

-- a subcommand option's value (from a flag's text or a config file)
local function sub_value(name, v, where)
  if v == NULL then
    if name == 'verbose' then usage_error('%s: %s expects true or false, got null', where, name) end
    return NULL
  end
  if name == 'verbose' or name == 'return_predictions' then
    if type(v) ~= 'boolean' then usage_error('%s: %s expects true or false, got %s', where, name, yaml.encode_inline(v)) end
  elseif name == 'scale_batch_size_kwargs' or name == 'lr_find_kwargs' then
    if not is_plain_table(v) or (next(v) ~= nil and yaml.is_list(v)) then
      usage_error('%s: %s expects a mapping (such as {mode: power}), got %s', where, name, yaml.encode_inline(v))
    end
  elseif name == 'ckpt_path' or name == 'method' then
    if type(v) == 'number' or type(v) == 'boolean' then v = yaml.scalar(v) end
    if type(v) ~= 'string' then usage_error('%s: %s expects a string, got %s', where, name, yaml.encode_inline(v)) end
  end
  return v
end

-- deep merge for --model.* / --data.* (mappings merge, anything else replaces)
local function merge_into(dst, key, v)
  local cur = dst[key]
  if is_plain_table(cur) and is_plain_table(v) and not yaml.is_list(cur) and not yaml.is_list(v)
      and next(cur) ~= nil and next(v) ~= nil then
    for k, x in pairs(v) do merge_into(cur, k, x) end
  else
    dst[key] = copy(v)
  end
end

-- one group's mapping (a config file's section, or --model FILE|YAML) into the config
function LightningCLI:_apply_group(cfg, group, v, where, floats)
  if v == NULL then return end
  if not is_plain_table(v) or (next(v) ~= nil and yaml.is_list(v)) then
    usage_error('%s: "%s" must be a mapping, got %s', where, group, yaml.encode_inline(v))
  end
  local known = {}
  if group == 'trainer' then known = TRAINER_ORDER
  elseif group == 'model' then known = self.model_params
  else known = self.data_params end
  local set = {}
  for _, k in ipairs(known) do set[k] = true end
  for k, x in pairs(v) do
    if not set[k] then
      local full = {}
      for i, n in ipairs(known) do full[i] = group .. '.' .. n end
      usage_error('%s: No action for destination key "%s.%s" to check its value.%s', where, group, tostring(k),
        did_you_mean(group .. '.' .. tostring(k), full))
    end
    if group == 'trainer' then
      if FRACTION_KEYS[k] and floats and floats[v] and floats[v][k] then x = floats[v][k] end
      if (k == 'callbacks' or k == 'plugins') and x ~= NULL and not (is_plain_table(x) and next(x) == nil) then
        usage_error('%s: trainer.%s from a config or the command line (class_path / init_args) is not'
          .. ' supported in dplhost; give them in LightningCLI\'s trainer_defaults', where, k)
      end
      cfg.trainer[k] = copy(x)
    else
      merge_into(cfg[group], k, x)
    end
  end
end

-- a whole config (a file's content) into the config
function LightningCLI:_apply_config(cfg, c, where, floats, sub)
  if c == NULL then return end
  if not is_plain_table(c) or (next(c) ~= nil and yaml.is_list(c)) then
    usage_error('%s: a config must be a mapping, got %s', where, yaml.encode_inline(c))
  end
  local subkeys = {}
  for _, o in ipairs(sub and SUB_OPTIONS[sub] or {}) do subkeys[o[1]] = true end
  for k, v in pairs(c) do
    if k == 'trainer' or k == 'model' or (k == 'data' and self.data_params) then
      self:_apply_group(cfg, k, v, where, floats)
    elseif k == 'seed_everything' then
      cfg.seed_everything = check_seed(v, where)
    elseif subkeys[k] then
      cfg[k] = sub_value(k, v, where)
    else
      local known = { 'seed_everything', 'trainer', 'model' }
      if self.data_params then known[#known + 1] = 'data' end
      for n in pairs(subkeys) do known[#known + 1] = n end
      usage_error('%s: No action for destination key "%s" to check its value.%s', where, tostring(k),
        did_you_mean(tostring(k), known))
    end
  end
end

-- a config file: YAML, or a .lua file returning a table
local function read_config(path)
  if path:match('%.lua$') then
    local chunk, err = loadfile(path)
    if not chunk then usage_error('cannot load the config %s: %s', path, tostring(err)) end
    local ok, v = pcall(chunk)
    if not ok then usage_error('the config %s raised: %s', path, tostring(v)) end
    return v, nil
  end
  local f, err = io.open(path, 'rb')
  if not f then usage_error('argument --config: cannot read %s: %s', path, tostring(err)) end
  local text, rerr = f:read('*a')
  f:close()
  if text == nil then usage_error('argument --config: cannot read %s: %s', path, tostring(rerr or 'not a file')) end
  local ok, v, floats = pcall(yaml.decode, text, path)
  if not ok then usage_error('%s', errors.is(v, errors.ValueError) and v.message or tostring(v)) end
  return v, floats
end

-- every flag this subcommand knows (for did-you-mean and --help)
function LightningCLI:_known_flags(sub)
  local out = { '--help', '--config', '--print_config', '--seed_everything', '--trainer', '--model' }
  for _, k in ipairs(TRAINER_ORDER) do out[#out + 1] = '--trainer.' .. k end
  for _, k in ipairs(self.model_params) do out[#out + 1] = '--model.' .. k end
  if self.data_params then
    out[#out + 1] = '--data'
    for _, k in ipairs(self.data_params) do out[#out + 1] = '--data.' .. k end
  end
  for _, o in ipairs(sub and SUB_OPTIONS[sub] or {}) do out[#out + 1] = '--' .. o[1] end
  local kept = {}
  for _, f in ipairs(out) do
    if not (self._link_targets and self._link_targets[f:sub(3)]) then kept[#kept + 1] = f end
  end
  return kept
end

--- Parses the command-line words into self.config (and self.subcommand); --help prints and
--- exits 0, a bad flag raises a UsageError.
function LightningCLI:parse_arguments(args, run)
  self._links, self._link_targets, self._set_defaults = {}, {}, {}
  self.parser = setmetatable({ _cli = self }, CLIParser)
  self:add_arguments_to_parser(self.parser)
  local words = {}
  for i, w in ipairs(args) do
    if type(w) ~= 'string' then usage_error('argument %d is not a string (%s)', i, type(w)) end
    words[i] = w
  end
  local i, sub = 1, nil
  if run then
    local w = words[1]
    if w == '-h' or w == '--help' then self:_say(io.stdout, self:help()) self:_exit(0) end
    if w == nil then usage_error('"subcommand" is required but not given; one of {%s}', table.concat(M.SUBCOMMANDS, ',')) end
    for _, s in ipairs(M.SUBCOMMANDS) do if s == w then sub = s end end
    if sub == nil then
      usage_error("argument subcommand: invalid choice: '%s' (choose from %s)%s", w,
        "'" .. table.concat(M.SUBCOMMANDS, "', '") .. "'", did_you_mean(w, M.SUBCOMMANDS))
    end
    self.subcommand = sub
    i = 2
  end
  for j = i, #words do
    if words[j] == '-h' or words[j] == '--help' then self:_say(io.stdout, self:help(sub or false)) self:_exit(0) end
  end
  local cfg = self:_defaults(sub)
  local subopts = {}
  for _, o in ipairs(sub and SUB_OPTIONS[sub] or {}) do subopts[o[1]] = true end
  local configs, flags = {}, {}
  local known = self:_known_flags(sub)
  while i <= #words do
    local w = words[i]
    local key, val = w:match('^%-%-([^=]+)=(.*)$')
    if not key then
      if w == '-c' then key = 'config' else key = w:match('^%-%-(.+)$') end
    end
    if key == nil then
      usage_error('Unrecognized arguments: %s', w)
    end
    local group, name = key:match('^(%a+)%.(.+)$')
    if group == 'data' and not self.data_params then group = nil end
    local function value()
      if val ~= nil then return val end
      local nx = words[i + 1]
      -- (argparse's rule: a word starting with '--' is the next option, not a value; write
      -- --flag=--text for such a value)
      if nx == nil or (nx:sub(1, 2) == '--' and #nx > 2) then usage_error('argument --%s: expected one argument', key) end
      i = i + 1
      return nx
    end
    if key == 'print_config' then
      if val ~= nil and val ~= '' then
        usage_error('argument --print_config: the flags (%s) are not supported in dplhost', val)
      end
      self._print_config = true
    elseif key == 'config' then
      configs[#configs + 1] = value()
    elseif key == 'seed_everything' then
      local raw = value()
      flags[#flags + 1] = function() cfg.seed_everything = check_seed(yaml_value(raw, '--seed_everything'), 'argument --seed_everything') end
    elseif subopts[key] then
      local raw = value()
      flags[#flags + 1] = function()
        local v = yaml_value(raw, '--' .. key)
        if (key == 'ckpt_path' or key == 'method') and v ~= NULL then v = raw end
        cfg[key] = sub_value(key, v, 'argument --' .. key)
      end
    elseif (key == 'trainer' or key == 'model' or (key == 'data' and self.data_params)) then
      local raw = value()
      flags[#flags + 1] = function()
        local v, floats
        if file_exists(raw) then v, floats = read_config(raw) else v, floats = yaml_value(raw, '--' .. key) end
        self:_apply_group(cfg, key, v, 'argument --' .. key, floats)
      end
    elseif group and self._link_targets[key] then
      local l = self._link_targets[key]
      usage_error('Linked "%s" must be given via "%s".', key, table.concat(l.sources, '", "'))
    elseif group == 'trainer' and targs.defaults[name] ~= nil then
      local raw
      if val == nil and trainer_bool_flag(name) and (words[i + 1] == nil or words[i + 1]:sub(1, 2) == '--') then
        raw = 'true'
      else
        raw = value()
      end
      flags[#flags + 1] = function()
        local v = trainer_value(name, raw)
        if (name == 'callbacks' or name == 'plugins') and v ~= NULL then
          self:_apply_group(cfg, 'trainer', { [name] = v }, 'argument --trainer.' .. name)
        end
        cfg.trainer[name] = v
      end
    elseif (group == 'model' or group == 'data') then
      local path = {}
      for part in name:gmatch('[^.]+') do path[#path + 1] = part end
      local params = group == 'model' and self.model_params or self.data_params
      local ok = false
      for _, p in ipairs(params) do if p == path[1] then ok = true end end
      if not ok or #path == 0 then
        usage_error('Unrecognized arguments: %s%s', w:match('^[^=]+'), did_you_mean(w:match('^[^=]+'), known))
      end
      local raw = value()
      flags[#flags + 1] = function()
        local v = yaml_value(raw, '--' .. key)
        local t = cfg[group]
        for k = 1, #path - 1 do
          if not is_plain_table(t[path[k]]) then t[path[k]] = {} end
          t = t[path[k]]
        end
        merge_into(t, path[#path], v)
      end
    else
      local flag = w:match('^[^=]+')
      usage_error('Unrecognized arguments: %s%s', flag, did_you_mean(flag, known))
    end
    i = i + 1
  end
  -- defaults < config files (in order) < flags (in order)
  for _, path in ipairs(configs) do
    local c, floats = read_config(path)
    self:_apply_config(cfg, c, path, floats, sub)
  end
  for _, f in ipairs(flags) do f() end
  -- links applied on parse: the target takes its sources' value (a config's value is replaced)
  for _, l in ipairs(self._links) do
    if l.apply_on == 'parse' then
      local values = {}
      for k, src in ipairs(l.sources) do
        local v = get_at(cfg, src)
        if v == nil then v = NULL end
        values[k] = v
      end
      set_at(cfg, l.target, link_value(l, values))
    end
  end
  self.config = cfg
end

---------------------------------------------------------------- the config as YAML

-- a value after 'key:' (the key at column `indent`): inline, or the block below it
local function value_yaml(v, indent)
  if is_plain_table(v) and next(v) ~= nil then
    return '\n' .. yaml.encode(v, yaml.is_list(v) and indent or indent + 2)
  end
  return ' ' .. yaml.encode_inline(v) .. '\n'
end

--- The config as YAML, in Lightning's layout: seed_everything, trainer, model, data, the
--- subcommand's options. Values that are objects (a logger, a strategy given in
--- trainer_defaults) are not written (a comment says so); read back, the defaults give them.
function LightningCLI:dump(cfg)
  cfg = cfg or self.config
  if self._links and #self._links > 0 then -- linked targets are left out (jsonargparse's skip_link_targets)
    local c = {}
    for k, v in pairs(cfg) do c[k] = copy(v) end
    for _, l in ipairs(self._links) do set_at(c, l.target, nil) end
    cfg = c
  end
  local out = { ('# dplhost==%s\n'):format(require('dpl').version or '?') }
  out[#out + 1] = 'seed_everything: ' .. yaml.scalar(cfg.seed_everything) .. '\n'
  local function group(name, order)
    if cfg[name] == nil then return end
    out[#out + 1] = name .. ':' .. (#order == 0 and ' {}' or '') .. '\n'
    local seen = {}
    local function one(k)
      seen[k] = true
      local v = cfg[name][k]
      if v == nil then return end
      if type(v) == 'table' and v ~= NULL and getmetatable(v) ~= nil or type(v) == 'function' or type(v) == 'userdata'
          or type(v) == 'cdata' then
        local mt = type(v) == 'table' and getmetatable(v)
        local what = mt and type(mt) == 'table' and rawget(mt, '__name') or type(v)
        out[#out + 1] = ('  # %s: a %s (set by the script; not written)\n'):format(k, tostring(what))
      elseif name == 'trainer' and FRACTION_KEYS[k] and type(v) == 'string' and tonumber(v) then
        out[#out + 1] = '  ' .. k .. ': ' .. v .. '\n' -- "0.5", "1.0": a fraction, written as the float
      else
        out[#out + 1] = '  ' .. yaml.scalar(k) .. ':' .. value_yaml(v, 2)
      end
    end
    for _, k in ipairs(order) do one(k) end
    -- keys of a group not in its order (none for trainer/model/data)
    local extra = {}
    for k in pairs(cfg[name]) do if not seen[k] then extra[#extra + 1] = k end end
    table.sort(extra, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(extra) do one(k) end
  end
  group('trainer', TRAINER_ORDER)
  group('model', self.model_params)
  if self.data_params then group('data', self.data_params) end
  for _, o in ipairs(self.subcommand and SUB_OPTIONS[self.subcommand] or {}) do
    out[#out + 1] = o[1] .. ':' .. value_yaml(cfg[o[1]], 0)
  end
  return table.concat(out)
end

---------------------------------------------------------------- --help

local function wrap_opt(out, flag, help)
  if #flag <= 22 then
    out[#out + 1] = ('  %-22s %s'):format(flag, help)
  else
    out[#out + 1] = '  ' .. flag
    out[#out + 1] = (' '):rep(25) .. help
  end
end

local function class_name(c)
  if type(c) == 'table' then return rawget(c, '__name') or 'class' end
  return 'function'
end

--- The help text: the subcommands (sub == nil with run), or one subcommand's groups and options.
function LightningCLI:help(sub)
  local out = {}
  if sub == nil then
    out[1] = ('usage: %s [-h] {%s} ...'):format(self.prog, table.concat(M.SUBCOMMANDS, ','))
    out[#out + 1] = ''
    out[#out + 1] = 'dplhost Lightning trainer command line tool (LightningCLI)'
    out[#out + 1] = ''
    out[#out + 1] = 'options:'
    wrap_opt(out, '-h, --help', 'Show this help message and exit.')
    out[#out + 1] = ''
    out[#out + 1] = 'subcommands:'
    out[#out + 1] = '  For more details of each subcommand, add it as an argument followed by --help.'
    out[#out + 1] = ''
    for _, s in ipairs(M.SUBCOMMANDS) do wrap_opt(out, s, DESCRIPTION[s]) end
    return table.concat(out, '\n') .. '\n'
  end
  local defaults = self:_defaults(sub or nil)
  local u = ('usage: %s%s [-h] [-c CONFIG] [--print_config] [--seed_everything SEED_EVERYTHING]'
    .. ' [--trainer.NAME VALUE ...] [--model.NAME VALUE ...]'):format(self.prog, sub and (' ' .. sub) or '')
  if self.data_params then u = u .. ' [--data.NAME VALUE ...]' end
  for _, o in ipairs(sub and SUB_OPTIONS[sub] or {}) do u = u .. (' [--%s %s]'):format(o[1], o[1]:upper()) end
  out[1] = u
  out[#out + 1] = ''
  if sub then out[#out + 1] = DESCRIPTION[sub]; out[#out + 1] = '' end
  out[#out + 1] = 'options:'
  wrap_opt(out, '-h, --help', 'Show this help message and exit.')
  wrap_opt(out, '-c CONFIG, --config CONFIG', 'Path to a configuration file in YAML format (or a .lua file'
    .. ' returning a table); may be repeated: merged in order, flags override them.')
  wrap_opt(out, '--print_config', 'Print the configuration after applying all other arguments and exit.')
  wrap_opt(out, '--seed_everything SEED_EVERYTHING', ('An integer: seed_everything with it before the classes'
    .. ' are made; true: a random seed; false: no seeding. (default: %s)'):format(yaml.scalar(defaults.seed_everything)))
  if sub then
    out[#out + 1] = ''
    out[#out + 1] = DESCRIPTION[sub]:gsub('%.$', ':')
    for _, o in ipairs(SUB_OPTIONS[sub]) do
      wrap_opt(out, ('--%s %s'):format(o[1], o[1]:upper()), ('%s (default: %s)'):format(SUB_HELP[o[1]], yaml.scalar(o[2])))
    end
  end
  local function group(name, title, order)
    out[#out + 1] = ''
    out[#out + 1] = title
    wrap_opt(out, ('--%s CONFIG'):format(name), 'Path to a configuration file, or a YAML mapping, for the group.')
    for _, k in ipairs(order) do
      if self._link_targets and self._link_targets[name .. '.' .. k] then goto continue end
      local d = defaults[name][k]
      local shown = (type(d) == 'table' and d ~= NULL and getmetatable(d) ~= nil) and tostring(d) or yaml.encode_inline(d)
      wrap_opt(out, ('--%s.%s %s'):format(name, k, k:upper()), ('(default: %s)'):format(shown))
      ::continue::
    end
  end
  group('trainer', ('%s arguments (values read as Trainer.from_argv reads them):'):format(class_name(self.trainer_class)),
    TRAINER_ORDER)
  group('model', ('%s constructor parameters (values read as YAML):'):format(class_name(self.model_class)),
    self.model_params)
  if self.data_params then
    group('data', ('%s constructor parameters (values read as YAML):'):format(class_name(self.datamodule_class)),
      self.data_params)
  end
  return table.concat(out, '\n') .. '\n'
end

---------------------------------------------------------------- running

-- the seed shared by the ranks of one launch when seed_everything is true
local function launch_seed()
  local ws = tonumber(os.getenv('WORLD_SIZE') or '')
  if not ws or ws <= 1 or os.getenv('PL_GLOBAL_SEED') then return nil end
  local id = os.getenv('DPL_JOB_ID') or ((os.getenv('MASTER_ADDR') or '') .. ':' .. (os.getenv('MASTER_PORT') or ''))
  local h = 5381
  for c in id:gmatch('.') do h = (h * 33 + c:byte()) % 4294967296 end
  return h
end

function LightningCLI:_set_seed()
  local s = self.config.seed_everything
  if s == false or s == NULL then return end
  local dpl = require 'dpl'
  if s == true then
    local shared = launch_seed()
    if shared then
      if require('dpl.log').rank() == 0 then require('dpl.log').warn('No seed found, seed set to %d', shared) end
      s = dpl.seed_everything(shared, true)
    else
      s = dpl.seed_everything(nil, true)
    end
  else
    s = dpl.seed_everything(s, true)
  end
  self.config.seed_everything = s
end

-- a class built from its group (each constructor parameter by name; null is nil)
local function build(cls, params, group)
  local args = {}
  for i, p in ipairs(params) do
    local v = group[p]
    if v == NULL then v = nil end
    args[i] = v
  end
  return cls(unpack(args, 1, #params))
end

--- Builds the datamodule, the model and the Trainer (Lightning's instantiate_classes).
function LightningCLI:instantiate_classes()
  local cfg = self.config
  local model_first = false
  for _, l in ipairs(self._links or {}) do
    if l.apply_on == 'instantiate' and l.sgroup == 'model' and l.tgroup == 'data' then model_first = true end
  end
  local function data()
    if self.datamodule_class ~= nil then
      self.datamodule = build(self.datamodule_class, self.data_params, cfg.data)
      self:_apply_instantiate_links('data', self.datamodule)
    end
  end
  if not model_first then data() end
  self.model = build(self.model_class, self.model_params, cfg.model)
  self:_apply_instantiate_links('model', self.model)
  if model_first then data() end
  self.trainer = self:instantiate_trainer()
end

-- the links applied on instantiate whose source is the object just built for `group`
function LightningCLI:_apply_instantiate_links(group, obj)
  for _, l in ipairs(self._links or {}) do
    if l.apply_on == 'instantiate' and l.sgroup == group then
      local values = {}
      for k, src in ipairs(l.sources) do
        local _, path = split_key(src)
        local v = obj[path[1]]
        if v == nil then
          local mt = getmetatable(obj)
          errors.AttributeError:raise(("link_arguments: the %s (%s) has no attribute '%s' (the source of %s)"):format(
            group == 'data' and 'datamodule' or 'model', tostring(type(mt) == 'table' and rawget(mt, '__name') or '?'),
            path[1], l.target), 2)
        end
        values[k] = v
      end
      set_at(self.config, l.target, link_value(l, values))
    end
  end
end

--- The Trainer from config.trainer (nulls left out), with trainer_defaults' callbacks and
--- the SaveConfigCallback (not with fast_dev_run), as Lightning's _instantiate_trainer.
function LightningCLI:instantiate_trainer(extra)
  local kw = {}
  for k, v in pairs(self.config.trainer) do
    if v ~= NULL then kw[k] = v
    elseif targs.defaults[k] == true then kw[k] = false -- `logger: null`: Lightning's Trainer(logger=None), off
    end
  end
  for k, v in pairs(extra or {}) do kw[k] = v end
  local cbs = {}
  for _, c in ipairs(kw.callbacks or {}) do cbs[#cbs + 1] = c end
  local tdc = self.trainer_defaults.callbacks
  if tdc ~= nil then
    if require('dpl.callbacks').is_callback(tdc) then cbs[#cbs + 1] = tdc
    else for _, c in ipairs(tdc) do cbs[#cbs + 1] = c end end
  end
  if self.save_config_callback and not kw.fast_dev_run then
    cbs[#cbs + 1] = self.save_config_callback(self, self.config, self.save_config_kwargs)
  end
  kw.callbacks = cbs
  return self.trainer_class(kw)
end

function LightningCLI:_run_subcommand(sub)
  local before = self['before_' .. sub]
  if type(before) == 'function' then before(self) end
  local cfg, t, dm = self.config, self.trainer, self.datamodule
  local function opt(k) local v = cfg[k] if v == NULL then return nil end return v end
  local o = { datamodule = dm }
  -- (the loaders' positions stay empty: the datamodule, or the model's own hooks, give them)
  if sub == 'fit' then
    o.ckpt_path = opt('ckpt_path')
    self.result = t:fit(self.model, nil, nil, o)
  elseif sub == 'validate' or sub == 'test' then
    o.ckpt_path, o.verbose = opt('ckpt_path'), opt('verbose')
    self.result = t[sub](t, self.model, nil, o)
  elseif sub == 'predict' then
    o.ckpt_path, o.return_predictions = opt('ckpt_path'), opt('return_predictions')
    self.result = t:predict(self.model, nil, o)
  else
    o.scale_batch_size_kwargs, o.lr_find_kwargs, o.method = opt('scale_batch_size_kwargs'), opt('lr_find_kwargs'),
      opt('method')
    self.result = t:tune(self.model, o)
  end
  local after = self['after_' .. sub]
  if type(after) == 'function' then after(self) end
end

return M
