-- dpl.trainer.results: self:log's storage and where logged values go (Lightning
-- 1.9's ResultCollection + LoggerConnector): per-hook defaults and allowed
-- on_step/on_epoch, forked names (x_step / x_epoch), epoch aggregation (mean
-- weighted by batch size, sum, min, max), trainer.callback_metrics /
-- logged_metrics / progress_bar_metrics, and the loggers (every
-- log_every_n_steps, at epoch ends, at evaluation ends).
local errors = require 'dpl.errors'

local Misconfiguration = errors.MisconfigurationException
local M = {}
M.__index = M

local function misconf(fmt, ...)
  error(Misconfiguration(select('#', ...) > 0 and fmt:format(...) or fmt), 0)
end

-- hook -> {default on_step, default on_epoch, allowed on_step (nil: both), allowed on_epoch}
local STEP = { true, false }
local EVAL = { false, true }
local EPOCH = { false, true, false, true } -- on_step only false, on_epoch only true
local FX = {}
for _, h in ipairs({ 'training_step', 'training_step_end', 'on_train_batch_start', 'on_train_batch_end',
  'on_before_backward', 'backward', 'on_after_backward', 'on_before_optimizer_step', 'optimizer_step',
  'configure_gradient_clipping', 'clip_gradients', 'on_before_zero_grad', 'optimizer_zero_grad',
  'manual_backward', 'log_grad_norm' }) do FX[h] = STEP end
for _, h in ipairs({ 'validation_step', 'test_step', 'validation_step_end', 'test_step_end',
  'on_validation_batch_start', 'on_validation_batch_end', 'on_test_batch_start', 'on_test_batch_end' }) do FX[h] = EVAL end
for _, h in ipairs({ 'on_train_start', 'on_train_epoch_start', 'on_train_epoch_end', 'on_validation_start',
  'on_validation_epoch_start', 'on_validation_epoch_end', 'on_test_start', 'on_test_epoch_start',
  'on_test_epoch_end', 'training_epoch_end', 'validation_epoch_end', 'test_epoch_end' }) do FX[h] = EPOCH end
M.FX = FX

local reducers = { mean = 'mean', avg = 'mean', sum = 'sum', max = 'max', min = 'min' }
reducers[math.max] = 'max'
reducers[math.min] = 'min'

local T_is_tensor

-- v:item() of something with an item method (reading .item may raise on a cdata); apart from
-- to_number, whose closure would keep it from being compiled
local function item_of(v)
  local ok, item = pcall(function() return v.item end)
  if ok and type(item) == 'function' then return item(v) end
  return nil
end

local function to_number(v)
  local tv = type(v)
  if tv == 'number' then return v end
  if tv == 'boolean' then return v and 1 or 0 end
  if tv == 'cdata' then
    T_is_tensor = T_is_tensor or require('dpl.tensor').is_tensor
    if T_is_tensor(v) then -- (no closure: this runs for every tensor self:log gets on the CPU)
      local x = v:item()
      if type(x) == 'boolean' then return x and 1 or 0 end
      return x
    end
  end
  if (tv == 'cdata' or tv == 'table' or tv == 'userdata') then return item_of(v) end
  return nil
end
M.to_number = to_number

--- The batch size of a batch: dim 0 of the first tensor found, else 1.
local function batch_size_of(b, depth)
  depth = depth or 0
  if depth > 8 then return nil end
  local tb = type(b)
  if tb == 'cdata' or (tb == 'table' and getmetatable(b) and type(b.size) == 'function') then
    local ok, n = pcall(function() return b:size(1) end)
    if ok and type(n) == 'number' then return n end
    local ok2, sh = pcall(function() return b.shape end)
    if ok2 and type(sh) == 'table' and type(sh[1]) == 'number' then return sh[1] end
    return nil
  end
  if tb == 'table' then
    for _, v in ipairs(b) do
      local n = batch_size_of(v, depth + 1)
      if n then return n end
    end
    for k, v in pairs(b) do
      if type(k) ~= 'number' then
        local n = batch_size_of(v, depth + 1)
        if n then return n end
      end
    end
  end
  return nil
end
M.batch_size_of = batch_size_of

local ffi = require 'ffi'
local nbuf = ffi.new('double[2]')

--- Reduces Lua numbers over the process group (sum/mean/max/min); numbers
--- stay as they are without one. n: 1 or 2 values.
local function reduce_numbers(a, b, op)
  local ok, dist = pcall(require, 'dpl.dist')
  if not (ok and dist.is_initialized()) then return a, b end
  nbuf[0], nbuf[1] = a, b or 0
  dist.all_reduce(nbuf, op == 'mean' and 'mean' or op, { count = b and 2 or 1, dtype = 'float64' })
  return nbuf[0], b and nbuf[1] or nil
end
M.reduce_numbers = reduce_numbers

function M.new(trainer)
  return setmetatable({
    trainer = trainer,
    -- a collection: its entries in order (list), and by fx then name (map) or, for names
    -- suffixed with a dataloader index, by fx, index, name (map_dl)
    -- seq: metric name -> rank in the collection's first-logged order, and dl: the name's
    -- dataloader index (the order the loggers see the keys in, as Lightning's ResultCollection,
    -- a dict whose entries outlive its resets)
    collections = { train = { list = {}, map = {}, map_dl = {}, seq = {}, nseq = 0, dl = {} },
      val = { list = {}, map = {}, map_dl = {}, seq = {}, nseq = 0, dl = {} },
      test = { list = {}, map = {}, map_dl = {}, seq = {}, nseq = 0, dl = {} } },
    -- dataloader_idx: the evaluation dataloader of the batch in flight (nil outside batches,
    -- e.g. in the epoch-end hooks: no suffix there, as Lightning's dataloader_idx=None)
    current = nil, stamp = 0, batch = nil, batch_size = nil, dataloader_idx = nil, num_dataloaders = 1,
    scratch_log = {}, scratch_pbar = {},
    lazy = {},  -- entries whose step value (a device tensor) awaits the dicts (M:flush)
    acc = {},   -- epoch aggregation of device values, in order: entry, tensor, batch size, ...
  }, M)
end

--- Selects the collection self:log writes to: 'train', 'val', 'test' or nil.
function M:set_stage(stage) self.current = stage and self.collections[stage] or nil end

function M:reset_collection(stage)
  local c = self.collections[stage]
  c.list, c.map, c.map_dl = {}, {}, {}
end

--- Clears the trainer's metric dicts (run start, around sanity checking).
function M:reset_metrics()
  self:flush()
  local t = self.trainer
  t.callback_metrics, t.logged_metrics, t.progress_bar_metrics = {}, {}, {}
end

--- The per-batch context: call before the batch's hooks.
function M:on_batch_start(batch, dataloader_idx)
  self.stamp = self.stamp + 1
  self.batch = batch
  self.batch_size = nil
  self.dataloader_idx = dataloader_idx or 0
end

--- Outside an evaluation's batches (its start and epoch-end hooks) values belong to no
--- dataloader.
function M:clear_dataloader_idx() self.dataloader_idx = nil end

--- Starts a new epoch of the current collection: epoch aggregates restart.
function M:on_epoch_start()
  local c = self.current
  if not c then return end
  self:flush()
  for i = 1, #c.list do
    local e = c.list[i]
    e.sum, e.weight, e.agg, e.has_epoch = 0, 0, nil, false
    if e.metric then e.metric:reset() end
  end
end

-- a logged Metric's epoch value: its compute(), which must be one number
local function metric_value(e)
  local r = e.metric:compute()
  local T = require 'dpl.tensor'
  if T.is_tensor(r) and tonumber(r._numel) ~= 1 then
    errors.ValueError:raise(('self:log(%s, metric): the metric computed a tensor of %d elements; a logged metric must '
      .. 'compute a single value (log its elements one by one)'):format(e.name, tonumber(r._numel)), 0)
  end
  return to_number(r)
end

-- adds value v (a number) with weight bs to e's epoch aggregate
local function accumulate(e, v, bs)
  local reduce = e.reduce
  if reduce == 'mean' then
    e.sum = e.sum + v * bs
    e.weight = e.weight + bs
  elseif reduce == 'sum' then e.sum = e.sum + v
  elseif reduce == 'max' then if e.agg == nil or v > e.agg then e.agg = v end
  else if e.agg == nil or v < e.agg then e.agg = v end end
end

-- true for a dpl tensor of one element in device memory (not host-backed)
local function value_on_device(v)
  T_is_tensor = T_is_tensor or require('dpl.tensor').is_tensor
  return T_is_tensor(v) and v._devtype ~= 0 and tonumber(v._numel) == 1
end

-- The numbers of a list of one-element device tensors: one stack and one copy to the
-- host per device and dtype (a read-back each would be one wait each).
local function read_back(ts)
  local T = require 'dpl.tensor'
  local groups, order, out = {}, {}, {}
  for i = 1, #ts do
    local x = ts[i]
    local key = (x._devtype * 4096 + x._devindex) * 64 + x._dtype
    local g = groups[key]
    if g == nil then g = { idx = {}, ts = {} }; groups[key] = g; order[#order + 1] = g end
    g.idx[#g.idx + 1] = i
    g.ts[#g.ts + 1] = x:reshape(1)
  end
  for _, g in ipairs(order) do
    local vals = T.cat(g.ts):to('cpu'):totable()
    for k, i in ipairs(g.idx) do out[i] = vals[k] end
  end
  return out
end
M.read_back = read_back

--- Writes the pending device values into the trainer's dicts and the epoch
--- aggregates (the host waits for the device here, once for all of them). The Trainer
--- calls it wherever the values can be seen: before a hook that a user defined, the
--- progress bar's refresh, logging, checkpoint/early-stopping checks, epoch ends.
--- extra: more device values to read back in the same go; their numbers are returned.
function M:flush(extra)
  local q, a = self.lazy, self.acc
  if q[1] == nil and a[1] == nil then return extra and read_back(extra) end
  local t = self.trainer
  local cbm, pbm, lgm = t.callback_metrics, t.progress_bar_metrics, t.logged_metrics
  local ts = {}
  for i = 1, #q do
    local v = q[i].value
    if type(v) ~= 'number' then ts[#ts + 1] = v end
  end
  for i = 2, #a, 3 do ts[#ts + 1] = a[i] end
  local nx = #ts
  if extra then for i = 1, #extra do ts[#ts + 1] = extra[i] end end
  local vals, k = read_back(ts), 0
  for i = 1, #q do
    local e = q[i]
    q[i] = nil
    e.queued = false
    local v = e.value
    if type(v) ~= 'number' then k = k + 1; v = vals[k]; e.value = v end
    if e.logger then lgm[e.n_step] = v end
    if e.prog_bar then pbm[e.n_step] = v end
    if e.training then
      cbm[e.n_step] = v
      cbm[e.name] = v
    end
  end
  for i = 1, #a, 3 do
    local e = a[i]
    k = k + 1
    accumulate(e, vals[k], a[i + 2])
    e.pending = e.pending - 1
    a[i], a[i + 1], a[i + 2] = nil, nil, nil
  end
  if extra then
    local out = {}
    for i = 1, #extra do out[i] = vals[nx + i] end
    return out
  end
end

function M:log(fx, name, value, opts)
  local c = self.current
  if fx == nil then
    misconf('You are trying to `self:log()` but it is not managed by the `Trainer` control flow (%s)', name)
  end
  local rule = FX[fx]
  if rule == nil then
    if fx:match('^on_predict') or fx == 'predict_step' or fx:match('dataloader$') or fx == 'setup'
       or fx == 'teardown' or fx:match('^configure_') or fx == 'prepare_data' or fx:match('checkpoint$')
       or fx:match('^on_.*_model_') or fx:match('batch_transfer$') or fx == 'transfer_batch_to_device'
       or fx == 'on_fit_start' or fx == 'on_fit_end' or fx:match('^on_sanity_check')
       or fx == 'on_train_end' or fx == 'on_validation_end' or fx == 'on_test_end'
       or fx == 'lr_scheduler_step' or fx == 'on_exception' then
      misconf("You can't `self:log()` inside `%s`. HINT: You can still log directly to the logger by using `self.logger.experiment`.", fx)
    end
    errors.RuntimeError:raise(('Logging inside `%s` is not implemented.'):format(fx), 0)
  end
  if c == nil then
    misconf('You are trying to `self:log()` but it is not managed by the `Trainer` control flow (%s in %s)', name, fx)
  end
  if name:find('/dataloader_idx_', 1, true) then
    misconf('You called `self:log` with the key `%s` but it should not contain information about `dataloader_idx`', name)
  end
  local on_step, on_epoch = opts.on_step, opts.on_epoch
  if on_step == nil then on_step = rule[1] end
  if on_epoch == nil then on_epoch = rule[2] end
  if rule[3] ~= nil and on_step ~= rule[3] then
    misconf("You can't `self:log(on_step=%s)` inside `%s`, must be one of (%s,).", tostring(on_step), fx, tostring(rule[3]))
  end
  if rule[4] ~= nil and on_epoch ~= rule[4] then
    misconf("You can't `self:log(on_epoch=%s)` inside `%s`, must be one of (%s,).", tostring(on_epoch), fx, tostring(rule[4]))
  end
  if not on_step and not on_epoch then
    misconf('`self:log(%s, on_step=false, on_epoch=false)` is not useful.', name)
  end
  local rfx = opts.reduce_fx
  local reduce = rfx == nil and 'mean' or reducers[type(rfx) == 'string' and rfx:lower() or rfx]
  if reduce == nil then
    misconf('Only `self:log(..., reduce_fx={min,max,mean,sum})` are supported. Found %s', tostring(rfx))
  end
  -- sync_dist as Lightning's ResultCollection: the step value is the ranks' reduction, made
  -- now (on_step only); the epoch aggregate adds this rank's own values, and the ranks'
  -- aggregates (sum and batch size for a mean) are reduced once, at the epoch's end
  -- (epoch_value). Reducing the logged value here and again at the epoch's end counted
  -- every rank's values world_size times.
  -- A one-element tensor on a GPU stays there until the value is needed (M:flush): a
  -- conversion now would make the host wait for the device at every logged step. A copy
  -- of it (on the device): the value as it is now, whatever later in-place ops do to it.
  -- The step value's reduction (a collective: every rank logs in the same order) runs on
  -- the GPU with NCCL, and the reduced tensor waits the same way.
  -- a torchmetrics-style Metric (dpl.metrics): the step value is its last forward's (none
  -- when it was only updated), the epoch value its compute() (it syncs itself), and it is
  -- reset when the collection's next epoch starts (Lightning's _ResultMetric)
  local metric
  if type(value) == 'table' and value.__is_metric then
    metric = value
    value = metric._forward_cache
    if value == nil then value = 0 end
  end
  local strategy = self.trainer.strategy
  local sync = opts.sync_dist == true and opts.rank_zero_only ~= true and metric == nil
  local step_sync = sync and on_step and self.trainer.world_size > 1
  local dev, dev_step, v_step = nil, nil, nil -- device copies (this rank's, the step value), the step number
  local v
  if type(value) == 'cdata' then
    T_is_tensor = T_is_tensor or require('dpl.tensor').is_tensor
    if T_is_tensor(value) and value._numel ~= 1 then
      local shown = tostring(value)
      errors.ValueError:raise(('`self:log(%s, %s)` was called, but the tensor must have a single element.'
        .. ' You can try doing `self:log(%s, %s:mean())`'):format(name, shown, name, shown), 0)
    end
  end
  if type(value) == 'cdata' and value_on_device(value) then
    local x = value:detach()
    if step_sync then
      local r = strategy:reduce(x, opts.sync_dist_group, reduce)
      if value_on_device(r) then dev_step = r else v_step = to_number(r) end
      if on_epoch then dev = x:clone() end
    else
      dev = x:clone()
      dev_step = dev
    end
    v = 0
  else
    v = to_number(value)
  end
  if v == nil then
    if type(value) == 'table' then
      misconf('self:log(%s): the value must be a number or a tensor; a table of values goes to self:log_dict (nested tables are not supported)', name)
    end
    misconf('self:log(%s): the value must be a number or a tensor, got %s', name, type(value))
  end
  local prog_bar = opts.prog_bar == true
  local logger = opts.logger ~= false
  -- Lightning's meta.dataloader_idx (nil with one dataloader, or outside a batch) and the
  -- index the name is suffixed with (not with add_dataloader_idx=false)
  local dl_idx = self.num_dataloaders > 1 and self.dataloader_idx or nil
  local dl = opts.add_dataloader_idx ~= false and dl_idx or nil
  -- entries by fx (then dataloader), then name: no key strings built per call
  local byfx
  if dl then
    local m = c.map_dl[fx]
    if m == nil then m = {}; c.map_dl[fx] = m end
    byfx = m[dl]
    if byfx == nil then byfx = {}; m[dl] = byfx end
  else
    byfx = c.map[fx]
    if byfx == nil then byfx = {}; c.map[fx] = byfx end
  end
  local e = byfx[name]
  if e == nil then
    local suffix = dl and ('/dataloader_idx_' .. dl) or ''
    local forked = on_step and on_epoch
    e = { fx = fx, name = name .. suffix, on_step = on_step, on_epoch = on_epoch, prog_bar = prog_bar,
      logger = logger, reduce = reduce, sync = sync, rank_zero_only = opts.rank_zero_only == true,
      n_step = forked and (name .. '_step' .. suffix) or (name .. suffix),
      n_epoch = forked and (name .. '_epoch' .. suffix) or (name .. suffix),
      forked = forked, value = 0, stamp = -1, sum = 0, weight = 0, agg = nil, has_epoch = false,
      dl_idx = dl_idx }
    byfx[name] = e
    c.list[#c.list + 1] = e
    -- the order the loggers see the keys in (Lightning's dicts keep first-logged order)
    local seq = c.seq
    if seq[e.n_step] == nil then c.nseq = c.nseq + 1; seq[e.n_step] = c.nseq end
    if seq[e.n_epoch] == nil then c.nseq = c.nseq + 1; seq[e.n_epoch] = c.nseq end
    c.dl[e.n_step], c.dl[e.n_epoch] = dl_idx, dl_idx
  elseif e.on_step ~= on_step or e.on_epoch ~= on_epoch or e.prog_bar ~= prog_bar or e.logger ~= logger
         or e.reduce ~= reduce or e.sync ~= sync or e.dl_idx ~= dl_idx then
    -- (dl_idx: the same name with add_dataloader_idx=false from two dataloaders, one key in
    -- Lightning whose metadata differ in dataloader_idx)
    misconf('You called `self:log(%s, ...)` twice in `%s` with different arguments. This is not allowed', name, fx)
  end
  if step_sync and dev_step == nil and v_step == nil then
    T_is_tensor = T_is_tensor or require('dpl.tensor').is_tensor
    if T_is_tensor(value) then v_step = to_number(strategy:reduce(value:detach(), opts.sync_dist_group, reduce)) end
    if v_step == nil then v_step = reduce_numbers(v, nil, reduce) end
  end
  e.value = dev_step or v_step or v
  e.stamp = self.stamp
  if metric then
    e.metric = metric
    if metric._forward_cache == nil then e.stamp = -1 end -- (no step value: only updated)
    if on_epoch then e.has_epoch = true end
    return
  end
  if on_epoch then
    e.has_epoch = true
    local bs = 1
    if reduce == 'mean' then
      bs = opts.batch_size
      if bs == nil then
        bs = self.batch_size
        if bs == nil then
          bs = batch_size_of(self.batch) or 1
          self.batch_size = bs
        end
      end
    end
    if dev then -- this rank's value (device), read back with the others at a flush
      local a = self.acc
      local n = #a
      a[n + 1], a[n + 2], a[n + 3] = e, dev, bs
      e.pending = (e.pending or 0) + 1
      if n >= 3 * 255 then self:flush() end -- a bounded queue: one wait every 256 values
    else
      if e.pending and e.pending > 0 then self:flush() end -- in order with its device values
      accumulate(e, v, bs) -- this rank's value: the ranks' aggregates are reduced at the epoch's end
    end
  end
end

local function epoch_value(e, sync)
  if e.reduce == 'mean' then
    local sum, w = e.sum, e.weight
    if sync then sum, w = reduce_numbers(sum, w, 'sum') end
    return w > 0 and sum / w or 0
  end
  if sync then
    local v = e.reduce == 'sum' and e.sum or e.agg
    return (reduce_numbers(v or 0, nil, e.reduce))
  end
  if e.reduce == 'sum' then return e.sum end
  return e.agg
end

--- Step-level metrics of this batch into the trainer's dicts; returns the
--- loggers' dict (nil when empty). training: callback_metrics get them too.
--- logged_metrics gets the logger=true values of every batch, whether or not this
--- is a step that goes to the loggers (Lightning's LoggerConnector.on_batch_end).
function M:collect_step(training)
  local c, t = self.current, self.trainer
  if not c then return nil end
  local list, stamp = c.list, self.stamp
  local logd
  local cbm, pbm, lgm = t.callback_metrics, t.progress_bar_metrics, t.logged_metrics
  for i = 1, #list do
    local e = list[i]
    if e.on_step and e.stamp == stamp then
      local v = e.value
      if e.logger then
        logd = logd or self.scratch_log
        logd[e.n_step] = v -- (a device value is converted if it is logged)
      end
      if type(v) ~= 'number' then -- a device value: into the dicts at the next flush
        e.training = training
        if not e.queued then
          e.queued = true
          local q = self.lazy
          q[#q + 1] = e
        end
      else
        if e.logger then lgm[e.n_step] = v end
        if e.prog_bar then pbm[e.n_step] = v end
        if training then
          cbm[e.n_step] = v
          cbm[e.name] = v
        end
      end
    end
  end
  return logd
end

-- Lightning's PossibleUserWarning for an epoch-level value that is not synced under several
-- ranks (each rank keeps its own: EarlyStopping or ModelCheckpoint monitoring it decide on
-- different numbers): once per name, on rank 0
local warned_unsynced = {}
local function warn_unsynced(t, name)
  if warned_unsynced[name] or not t.is_global_zero then return end
  warned_unsynced[name] = true
  require('dpl.log').warn("It is recommended to use `self:log('%s', ..., { sync_dist = true })` when logging on epoch"
    .. ' level in distributed setting to accumulate the metric across devices.', name)
end

--- Epoch-level metrics of the current collection into the trainer's dicts;
--- returns the loggers' dict (possibly empty).
function M:collect_epoch()
  self:flush()
  local c, t = self.current, self.trainer
  local logd = {}
  if not c then return logd end
  local cbm, pbm = t.callback_metrics, t.progress_bar_metrics
  for i = 1, #c.list do
    local e = c.list[i]
    if e.on_epoch and e.has_epoch then
      local v
      if e.metric then v = metric_value(e) else v = epoch_value(e, e.sync and t.world_size > 1) end
      if not e.sync and not e.metric and not e.rank_zero_only and t.world_size > 1 then warn_unsynced(t, e.name) end
      if e.logger then logd[e.n_epoch] = v end
      if e.prog_bar then pbm[e.n_epoch] = v end
      cbm[e.n_epoch] = v
      cbm[e.name] = v
    end
  end
  return logd
end

--- The Metrics logged in the current collection start over: called at the very end of an
--- epoch, after its last collect_epoch (Lightning resets them there).
function M:end_epoch()
  local c = self.current
  if not c then return end
  for i = 1, #c.list do
    local e = c.list[i]
    if e.metric then e.metric:reset() end
  end
end

local INT_EPOCH = { epoch = true }

-- log_metrics' key order (a module-level comparator reading sort_seq/sort_dls: no closure
-- made per call, which would keep log_metrics from being compiled)
local EMPTY = {}
local sort_seq, sort_dls
local function key_order(a, b)
  local seq, dls = sort_seq, sort_dls
  local x, y = seq[a] or (a == 'epoch' and 2 ^ 53 or 2 ^ 52), seq[b] or (b == 'epoch' and 2 ^ 53 or 2 ^ 52)
  if x < 2 ^ 52 and y < 2 ^ 52 then
    local da, db = dls[a], dls[b]
    if da ~= db then return (da and -da or math.huge) < (db and -db or math.huge) end
  end
  if x ~= y then return x < y end
  return tostring(a) < tostring(b)
end

--- Sends metrics to the loggers (rank 0); step defaults to the number of optimizer-stepped
--- batches. As Lightning's LoggerConnector.log_metrics, `epoch` is added when no step is
--- given (Lightning's training rows, which pass step=None, say so with `with_epoch`; the
--- evaluation step rows, logged at their batch index, get none). Updates
--- trainer.logged_metrics. The loggers also get the keys in first-logged order (then `epoch`).
function M:log_metrics(metrics, step, with_epoch)
  local t = self.trainer
  if metrics == nil or next(metrics) == nil then return end
  local out, keys, devs = {}, nil, nil
  for k, v in pairs(metrics) do
    if type(v) == 'cdata' and value_on_device(v) then -- a device value (collect_step): read below
      keys, devs = keys or {}, devs or {}
      keys[#keys + 1], devs[#devs + 1] = k, v
    elseif type(v) ~= 'number' then
      v = to_number(v) or v
    end
    out[k] = v
  end
  local vals = self:flush(devs) -- the waiting values and these, read back together
  if devs then
    for i, k in ipairs(keys) do out[k] = vals[i] end
  end
  for k, v in pairs(out) do t.logged_metrics[k] = v end
  local ints -- the keys whose values are ints in Lightning (the rest are floats)
  if (step == nil or with_epoch) and out.epoch == nil then out.epoch = t.current_epoch; ints = INT_EPOCH end
  if step == nil then step = t.fit_loop.batches_that_stepped end
  if not t.is_global_zero then return end
  local loggers = t.loggers
  if loggers[1] == nil then return end
  -- The keys in Lightning's order: the collection's first-logged order; an evaluation's
  -- epoch row with several dataloaders is Lightning's dict(ChainMap(*per_dataloader)), the
  -- last dataloader's keys first, then the epoch-end hooks' (no dataloader); `epoch` last
  -- (Lightning's setdefault).
  local c = self.current
  local order = {}
  for k in pairs(out) do order[#order + 1] = k end
  sort_seq, sort_dls = c and c.seq or EMPTY, c and c.dl or EMPTY
  table.sort(order, key_order)
  sort_seq, sort_dls = nil, nil
  -- Lightning writes its metric values as floats (tensor.item() of a float tensor, every
  -- self:log value is one), its `epoch` as an int: the CSV writes 1.0 and 0
  for i = 1, #loggers do
    loggers[i]:log_metrics(out, step, order, ints)
    loggers[i]:save()
  end
end

--- Clears a dict returned by collect_step (it is reused).
function M:release(d)
  if d then for k in pairs(d) do d[k] = nil end end
end

return M
