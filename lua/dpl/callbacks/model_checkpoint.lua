-- dpl.callbacks.model_checkpoint: ModelCheckpoint (Lightning 1.9): where
-- (dirpath / logger version dir / default_root_dir), when (every_n_epochs,
-- every_n_train_steps, at train epoch end or validation end), which
-- (top-k by a monitored metric, or the latest), filename templates
-- ("{epoch}-{step}", "{epoch:03d}-{val_loss:.2f}"), save_last, -vN versions.
local errors = require 'dpl.errors'
local log = require 'dpl.log'
local Callback = require 'dpl.callbacks.callback'

local Misconfiguration = errors.MisconfigurationException

local ModelCheckpoint = Callback:extend('ModelCheckpoint')
ModelCheckpoint.CHECKPOINT_JOIN_CHAR = '-'
ModelCheckpoint.CHECKPOINT_NAME_LAST = 'last'
ModelCheckpoint.FILE_EXTENSION = '.ckpt'
ModelCheckpoint.STARTING_VERSION = 1

local function misconf(fmt, ...)
  error(Misconfiguration(select('#', ...) > 0 and fmt:format(...) or fmt), 0)
end

local known = { dirpath = 1, filename = 1, monitor = 1, verbose = 1, save_last = 1, save_top_k = 1,
  save_weights_only = 1, mode = 1, auto_insert_metric_name = 1, every_n_train_steps = 1,
  train_time_interval = 1, every_n_epochs = 1, save_on_train_epoch_end = 1 }

function ModelCheckpoint:__init(o)
  Callback.__init(self)
  o = o or {}
  for k in pairs(o) do
    if not known[k] then misconf('ModelCheckpoint got an unknown argument: %s', tostring(k)) end
  end
  self.dirpath = o.dirpath
  self.filename = o.filename
  self.monitor = o.monitor
  self.verbose = o.verbose == true
  self.save_last = o.save_last
  self.save_top_k = o.save_top_k == nil and 1 or o.save_top_k
  self.save_weights_only = o.save_weights_only == true
  self.mode = o.mode or 'min'
  self.auto_insert_metric_name = o.auto_insert_metric_name ~= false
  self._save_on_train_epoch_end = o.save_on_train_epoch_end
  -- train_time_interval: Lightning's timedelta, as a table of its keywords ({minutes=30}), or a
  -- number of seconds; _train_time_s holds the seconds
  self.train_time_interval = o.train_time_interval
  if self.train_time_interval ~= nil then
    local tiv = self.train_time_interval
    if not (type(tiv) == 'number' or (type(tiv) == 'table' and getmetatable(tiv) == nil)) then
      misconf('ModelCheckpoint: `train_time_interval` must be a number of seconds or a table of timedelta keywords'
        .. ' ({minutes=30}), got %s (%s)', tostring(tiv), type(tiv))
    end
    self._train_time_s = require('dpl.callbacks.timer').parse_duration(tiv, 'ModelCheckpoint: `train_time_interval`')
  end
  if self.mode ~= 'min' and self.mode ~= 'max' then
    misconf('`mode` can be min, max but got %s', tostring(self.mode))
  end
  if type(self.save_top_k) ~= 'number' or self.save_top_k < -1 then
    misconf('Invalid value for save_top_k=%s. Must be >= -1', tostring(self.save_top_k))
  end
  local steps, epochs = o.every_n_train_steps, o.every_n_epochs
  if steps ~= nil and steps < 0 then misconf('Invalid value for every_n_train_steps=%s. Must be >= 0', tostring(steps)) end
  if epochs ~= nil and epochs < 0 then misconf('Invalid value for every_n_epochs=%s. Must be >= 0', tostring(epochs)) end
  local given = (steps and steps > 0 and 1 or 0) + (epochs and epochs > 0 and 1 or 0) + (self.train_time_interval and 1 or 0)
  if given > 1 then
    misconf('Combination of parameters every_n_train_steps=%s, every_n_epochs=%s and train_time_interval=%s should be mutually exclusive.',
            tostring(steps), tostring(epochs), tostring(self.train_time_interval))
  end
  if steps == nil and epochs == nil and self.train_time_interval == nil then epochs, steps = 1, 0 end
  self._every_n_train_steps = steps or 0
  self._every_n_epochs = epochs or 0
  if self.monitor == nil and self.save_top_k ~= -1 and self.save_top_k ~= 0 and self.save_top_k ~= 1 then
    misconf('ModelCheckpoint(save_top_k=%d, monitor=nil) is not a valid configuration. No quantity for top_k to track.',
            self.save_top_k)
  end
  self.best_k_models = {}
  self._best_k_order = {}
  self.kth_best_model_path = ''
  self.best_model_score = nil
  self.best_model_path = ''
  self.last_model_path = ''
  self.current_score = nil
  self.kth_value = self.mode == 'min' and math.huge or -math.huge
  self._last_global_step_saved = 0
  self._last_time_checked = nil
end

-- Python's repr of timedelta(seconds=s)
local function timedelta_repr(s)
  local us = math.floor(s * 1e6 + 0.5)
  local days = math.floor(us / 86400e6)
  us = us - days * 86400e6
  local secs = math.floor(us / 1e6)
  us = us - secs * 1e6
  local parts = {}
  if days ~= 0 then parts[#parts + 1] = ('days=%d'):format(days) end
  if secs ~= 0 then parts[#parts + 1] = ('seconds=%d'):format(secs) end
  if us ~= 0 then parts[#parts + 1] = ('microseconds=%d'):format(us) end
  return 'datetime.timedelta(' .. (#parts > 0 and table.concat(parts, ', ') or '0') .. ')'
end
ModelCheckpoint._timedelta_repr = timedelta_repr

local function pyrepr(v)
  if v == nil then return 'None' end
  if type(v) == 'string' then return "'" .. v .. "'" end
  return tostring(v)
end

function ModelCheckpoint:state_key()
  return ("ModelCheckpoint{'monitor': %s, 'mode': %s, 'every_n_train_steps': %d, 'every_n_epochs': %d, 'train_time_interval': %s}")
    :format(pyrepr(self.monitor), pyrepr(self.mode), self._every_n_train_steps, self._every_n_epochs,
            type(self.train_time_interval) == 'table' and timedelta_repr(self._train_time_s) or pyrepr(self.train_time_interval))
end

---------------------------------------------------------------- paths and names

local function exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() return true end
  return false
end

function ModelCheckpoint:setup(trainer, pl_module, stage)
  local dir = self:_resolve_ckpt_dir(trainer)
  dir = trainer.strategy:broadcast(dir)
  self.dirpath = dir
  if trainer.is_global_zero and stage == 'fit' and self.save_top_k ~= 0 then
    if #require('dpl.loggers.base').listdir(dir) > 0 then
      log.warn('Checkpoint directory %s exists and is not empty.', dir)
    end
  end
end

function ModelCheckpoint:_resolve_ckpt_dir(trainer)
  if self.dirpath then return self.dirpath end
  local lg = trainer.loggers[1]
  -- Trainer(weights_save_path=) (Lightning 1.7's, since removed there): checkpoints under it
  -- instead of the logger's save_dir / default_root_dir
  local wsp = trainer.weights_save_path
  if wsp == trainer.default_root_dir then wsp = nil end
  if lg then
    local save_dir = wsp or lg.save_dir or trainer.default_root_dir
    local attr = require('dpl.loggers.base').attr
    local version = attr(lg, 'version')
    if type(version) == 'number' then version = 'version_' .. version end
    return ('%s/%s/%s/checkpoints'):format(save_dir, attr(lg, 'name'), version)
  end
  return (wsp or trainer.default_root_dir) .. '/checkpoints'
end

--- The files in this callback's checkpoint directory (dirpath, or the one Lightning's rule
--- gives for this trainer, deciding the logger's version as Lightning's does) whose names
--- contain CHECKPOINT_NAME_LAST: Lightning 1.9.5's _find_last_checkpoints, which
--- fit/validate/test/predict(ckpt_path="last") search.
local is_temp_name = require('dpl.trainer.checkpoint').is_temp_name
function ModelCheckpoint:_find_last_checkpoints(trainer)
  local dir = self:_resolve_ckpt_dir(trainer)
  local out = {}
  for _, name in ipairs(require('dpl.loggers.base').listdir(dir)) do
    -- (not the temp file of a write killed mid-way, which Lightning's in-place torch.save has not)
    if name:find(self.CHECKPOINT_NAME_LAST, 1, true) and not is_temp_name(name) then out[#out + 1] = dir .. '/' .. name end
  end
  return out
end

--- Formats a filename template with metrics (Lightning's _format_checkpoint_name).
--- `join` is the class's CHECKPOINT_JOIN_CHAR (Lightning's classmethod reads `cls`'s: a subclass
--- or a class-level assignment changes the default `{epoch}-{step}` and the prefix separator).
function ModelCheckpoint._format_checkpoint_name(filename, metrics, prefix, auto_insert_metric_name, join)
  join = join or ModelCheckpoint.CHECKPOINT_JOIN_CHAR
  if filename == nil or filename == '' then filename = '{epoch}' .. join .. '{step}' end
  if auto_insert_metric_name == nil then auto_insert_metric_name = true end
  local out = filename:gsub('{([^{}]*)}', function(inner)
    local name, spec = inner:match('^%s*([^:]-)%s*:(.*)$')
    if not name then name, spec = inner:match('^%s*(.-)%s*$'), nil end
    local v = metrics[name]
    if v == nil then v = 0 end
    if type(v) ~= 'number' then
      local r = require('dpl.trainer.results').to_number(v)
      v = r or 0
    end
    local text
    if spec and spec ~= '' then
      local fmt = '%' .. spec
      if spec:match('d$') then v = math.floor(v) end
      local ok, s = pcall(string.format, fmt, v)
      text = ok and s or tostring(v)
    else
      if v == math.floor(v) and math.abs(v) < 2^53 and (name == 'epoch' or name == 'step') then
        text = ('%d'):format(v)
      else
        text = (v == math.floor(v) and math.abs(v) < 2^53) and ('%d'):format(v) or ('%.17g'):format(v)
        -- Python's str(float): shortest round-trip
        for p = 1, 17 do
          local s = ('%.' .. p .. 'g'):format(v)
          if tonumber(s) == v then text = s break end
        end
      end
    end
    if auto_insert_metric_name then return name .. '=' .. text end
    return text
  end)
  if prefix and prefix ~= '' then out = prefix .. join .. out end
  return out
end

function ModelCheckpoint:format_checkpoint_name(metrics, filename, ver)
  filename = filename or self.filename
  local join = self.CHECKPOINT_JOIN_CHAR
  local name = ModelCheckpoint._format_checkpoint_name(filename, metrics, nil, self.auto_insert_metric_name, join)
  if ver ~= nil then name = name .. join .. 'v' .. ver end
  return (self.dirpath and (self.dirpath .. '/') or '') .. name .. self.FILE_EXTENSION
end

function ModelCheckpoint:_monitor_candidates(trainer)
  trainer._results_connector:flush()
  local m = {}
  for k, v in pairs(trainer.callback_metrics) do m[k] = v end
  if m.epoch == nil then m.epoch = trainer.current_epoch end
  if m.step == nil then m.step = trainer.global_step end
  return m
end

function ModelCheckpoint:_get_metric_interpolated_filepath_name(metrics, trainer, del_filepath)
  local path = self:format_checkpoint_name(metrics)
  local ver = self.STARTING_VERSION
  while self:_file_exists(path, trainer) and path ~= del_filepath do
    path = self:format_checkpoint_name(metrics, nil, ver)
    ver = ver + 1
  end
  return path
end

function ModelCheckpoint:_file_exists(path, trainer)
  return trainer.strategy:broadcast(exists(path))
end

---------------------------------------------------------------- when to save

function ModelCheckpoint:_should_skip_saving_checkpoint(trainer)
  return trainer.fast_dev_run or trainer.state.fn ~= 'fit' or trainer.sanity_checking
    or self._last_global_step_saved == trainer.global_step
end

function ModelCheckpoint:_should_save_on_train_epoch_end(trainer)
  if self._save_on_train_epoch_end ~= nil then return self._save_on_train_epoch_end end
  if trainer.check_val_every_n_epoch ~= 1 then return false end
  local nval = 0
  for _, n in ipairs(trainer.num_val_batches or {}) do nval = nval + n end
  if nval == 0 or not trainer._enable_validation then return true end
  local vc = trainer._args._val_check
  return vc.kind == 'fraction' and vc.value == 1
end

-- (Lightning: the train_time_interval clock starts at on_train_start)
function ModelCheckpoint:on_train_start()
  self._last_time_checked = require('dpl.capi').C.dpl_clock()
end

function ModelCheckpoint:on_train_batch_end(trainer)
  if self:_should_skip_saving_checkpoint(trainer) then return end
  local skip_batch = self._every_n_train_steps < 1 or trainer.global_step % self._every_n_train_steps ~= 0
  local skip_time = true
  if self._train_time_s then
    local now = require('dpl.capi').C.dpl_clock()
    self._last_time_checked = self._last_time_checked or now
    skip_time = trainer.strategy:broadcast(now - self._last_time_checked < self._train_time_s)
    if not skip_time then self._last_time_checked = now end
  end
  if skip_batch and skip_time then return end
  self:_save_topk_checkpoint(trainer, self:_monitor_candidates(trainer))
  self:_save_last_checkpoint(trainer, self:_monitor_candidates(trainer))
end

function ModelCheckpoint:on_train_epoch_end(trainer)
  if not self:_should_skip_saving_checkpoint(trainer) and self:_should_save_on_train_epoch_end(trainer) then
    self:_save_on_epoch(trainer)
  end
end

function ModelCheckpoint:on_validation_end(trainer)
  if not self:_should_skip_saving_checkpoint(trainer) and not self:_should_save_on_train_epoch_end(trainer) then
    self:_save_on_epoch(trainer)
  end
end

function ModelCheckpoint:_save_on_epoch(trainer)
  local m = self:_monitor_candidates(trainer)
  if self._every_n_epochs >= 1 and (trainer.current_epoch + 1) % self._every_n_epochs == 0 then
    self:_save_topk_checkpoint(trainer, m)
  end
  self:_save_last_checkpoint(trainer, m)
end

---------------------------------------------------------------- saving

function ModelCheckpoint:_save_checkpoint(trainer, path)
  trainer:save_checkpoint(path, self.save_weights_only)
  self._last_global_step_saved = trainer.global_step
  -- notify the loggers (Lightning's after_save_checkpoint, rank 0)
  if trainer.is_global_zero then
    for _, lg in ipairs(trainer.loggers or {}) do
      if type(lg.after_save_checkpoint) == 'function' then lg:after_save_checkpoint(self) end
    end
  end
end

-- p absolute (against $PWD, no symlinks resolved) with '.', '..' and repeated '/' folded
local function normpath(p)
  if p:sub(1, 1) ~= '/' then p = (os.getenv('PWD') or '.') .. '/' .. p end
  local parts = {}
  for c in p:gmatch('[^/]+') do
    if c == '..' then parts[#parts] = nil
    elseif c ~= '.' then parts[#parts + 1] = c end
  end
  return '/' .. table.concat(parts, '/')
end
ModelCheckpoint._normpath = normpath

-- Only files inside this callback's dirpath are removed, and never the checkpoint the run
-- resumed from (Lightning 2's _should_remove_checkpoint; 1.9.5 deleted a resumed-from best
-- checkpoint of another directory once the new run saved its first one: data lost).
function ModelCheckpoint:_should_remove(trainer, path)
  if not path or path == '' then return false end
  local p = normpath(path)
  local resumed = rawget(trainer, 'ckpt_path')
  if type(resumed) == 'string' and resumed ~= '' and normpath(resumed) == p then return false end
  if not self.dirpath then return false end
  local d = normpath(self.dirpath)
  return p:sub(1, #d + 1) == d .. '/'
end

function ModelCheckpoint:_remove_checkpoint(trainer, path)
  if trainer.is_global_zero and self:_should_remove(trainer, path) then os.remove(path) end
end

function ModelCheckpoint:_save_topk_checkpoint(trainer, m)
  if self.save_top_k == 0 then return end
  if self.monitor == nil then return self:_save_none_monitor_checkpoint(trainer, m) end
  if m[self.monitor] == nil then
    local keys = {}
    for k in pairs(m) do keys[#keys + 1] = "'" .. k .. "'" end
    table.sort(keys)
    local msg = ("`ModelCheckpoint(monitor='%s')` could not find the monitored key in the returned metrics: [%s]. HINT: Did you call `log('%s', value)` in the `LightningModule`?")
      :format(self.monitor, table.concat(keys, ', '), self.monitor)
    if trainer._val_ran then misconf('%s', msg) end
    if self.verbose or not self._warned_missing then log.warn('%s', msg) end
    self._warned_missing = true
    return
  end
  self:_save_monitor_checkpoint(trainer, m)
end

function ModelCheckpoint:check_monitor_top_k(trainer, current)
  if current == nil then return false end
  if self.save_top_k == -1 then return true end
  local n = 0
  for _ in pairs(self.best_k_models) do n = n + 1 end
  if n < self.save_top_k then return true end
  local better = self.mode == 'min' and current < self.kth_value or self.mode == 'max' and current > self.kth_value
  return trainer.strategy:reduce_boolean_decision(better, true)
end

function ModelCheckpoint:_save_monitor_checkpoint(trainer, m)
  local Rs = require 'dpl.trainer.results'
  local current = Rs.to_number(m[self.monitor])
  if self:check_monitor_top_k(trainer, current) then
    self:_update_best_and_save(current, trainer, m)
  elseif self.verbose then
    log.info("Epoch %d, global step %d: '%s' was not in top %d", trainer.current_epoch, trainer.global_step,
             self.monitor, self.save_top_k)
  end
end

function ModelCheckpoint:_save_none_monitor_checkpoint(trainer, m)
  -- no del_filepath here (Lightning 1.9.5): an existing file of the same name gets a -vN version
  local path = self:_get_metric_interpolated_filepath_name(m, trainer)
  local previous = self.best_model_path
  self.best_model_path = path
  self:_save_checkpoint(trainer, path)
  if self.save_top_k == 1 and previous ~= '' and previous ~= path then
    self:_remove_checkpoint(trainer, previous)
  end
end

-- best_k_models's paths in the order they were added (a Python dict's order: Lightning's
-- min()/max() over it keep the first of equal scores, so ties are decided by age, not by name);
-- paths put into best_k_models by other code come last, sorted.
function ModelCheckpoint:_best_k_paths()
  local out, seen = {}, {}
  for _, p in ipairs(self._best_k_order or {}) do
    if self.best_k_models[p] ~= nil and not seen[p] then out[#out + 1] = p; seen[p] = true end
  end
  local rest = {}
  for p in pairs(self.best_k_models) do if not seen[p] then rest[#rest + 1] = p end end
  table.sort(rest)
  for _, p in ipairs(rest) do out[#out + 1] = p end
  self._best_k_order = out
  return out
end

function ModelCheckpoint:_update_best_and_save(current, trainer, m)
  local order = self:_best_k_paths()
  local n = #order
  -- save_top_k=-1 keeps all: k is one more than those kept, so the kth (worst) is tracked too
  local k = self.save_top_k == -1 and n + 1 or self.save_top_k
  local del_path
  if n == k and k > 0 then
    del_path = self.kth_best_model_path
    self.best_k_models[del_path] = nil
    self:_best_k_paths() -- (a path saved again goes to the end, as a key popped and set again)
  end
  if current ~= current then current = self.mode == 'min' and math.huge or -math.huge end
  local path = self:_get_metric_interpolated_filepath_name(m, trainer, del_path)
  self.current_score = current
  self.best_k_models[path] = current
  self._best_k_order[#self._best_k_order + 1] = path
  order = self:_best_k_paths()
  local worse = self.mode == 'min' and function(a, b) return a > b end or function(a, b) return a < b end
  if #order == k then
    -- the worst of the kept (the first added of equal scores, as Python's max/min)
    local worst_p, worst_v
    for _, p in ipairs(order) do
      local v = self.best_k_models[p]
      if worst_p == nil or worse(v, worst_v) then worst_p, worst_v = p, v end
    end
    self.kth_best_model_path, self.kth_value = worst_p, worst_v
  end
  local best_p, best_v
  for _, p in ipairs(order) do
    local v = self.best_k_models[p]
    if best_p == nil or worse(best_v, v) then best_p, best_v = p, v end
  end
  self.best_model_path, self.best_model_score = best_p, best_v
  if self.verbose then
    log.info("Epoch %d, global step %d: '%s' reached %.5f (best %.5f), saving model to '%s' as top %s",
             trainer.current_epoch, trainer.global_step, self.monitor, current, best_v, path, tostring(k))
  end
  self:_save_checkpoint(trainer, path)
  if del_path and del_path ~= '' and del_path ~= path then self:_remove_checkpoint(trainer, del_path) end
end

function ModelCheckpoint:_save_last_checkpoint(trainer, m)
  if not self.save_last then return end
  local path = self:format_checkpoint_name(m, self.CHECKPOINT_NAME_LAST)
  if self:_file_exists(path, trainer) and path ~= self.last_model_path then
    local ver = self.STARTING_VERSION
    while self:_file_exists(path, trainer) and path ~= self.last_model_path do
      path = self:format_checkpoint_name(m, self.CHECKPOINT_NAME_LAST, ver)
      ver = ver + 1
    end
  end
  local previous = self.last_model_path
  self.last_model_path = path
  self:_save_checkpoint(trainer, path)
  if previous ~= '' and previous ~= path then self:_remove_checkpoint(trainer, previous) end
end

---------------------------------------------------------------- state

function ModelCheckpoint:state_dict()
  return { monitor = self.monitor, best_model_score = self.best_model_score, best_model_path = self.best_model_path,
    current_score = self.current_score, dirpath = self.dirpath, best_k_models = self.best_k_models,
    kth_best_model_path = self.kth_best_model_path, kth_value = self.kth_value, last_model_path = self.last_model_path,
    -- (not Lightning's: its dict keeps this order itself; JSON objects here are written sorted)
    best_k_models_order = self:_best_k_paths() }
end

function ModelCheckpoint:load_state_dict(s)
  if s.dirpath == self.dirpath or self.dirpath == nil then
    self.best_model_score = s.best_model_score
    self.kth_best_model_path = s.kth_best_model_path or ''
    self.kth_value = s.kth_value
    self.best_k_models = s.best_k_models or {}
    self._best_k_order = s.best_k_models_order or {}
    self:_best_k_paths()
    self.last_model_path = s.last_model_path or ''
    self.current_score = s.current_score
  else
    log.warn('The dirpath has changed from %s to %s, therefore `best_model_score`, `kth_best_model_path`, `kth_value`, `last_model_path` and `best_k_models` won\'t be reloaded. Only `best_model_path` will be reloaded.',
             tostring(s.dirpath), tostring(self.dirpath))
  end
  self.best_model_path = s.best_model_path or ''
end

Callback._mark_lazy_metrics_ok(ModelCheckpoint)
return ModelCheckpoint
