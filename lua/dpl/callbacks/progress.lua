-- dpl.callbacks.progress: ProgressBar (Lightning's TQDMProgressBar role). On a
-- terminal: a live bar (\r-refreshed, at most 10 times a second) with it/s, ETA
-- and the prog_bar metrics. Not a terminal (CI logs): plain lines, at most one
-- per 30 s plus one at each epoch end, never a \r. Only global rank 0 prints.
-- Evaluation has its own bar, per dataloader, as Lightning's: "Sanity Checking
-- DataLoader 0", "Validation DataLoader 0" (both cleared when done while fitting),
-- "Validation/Testing/Predicting DataLoader N" for validate/test/predict (left on
-- screen; not a terminal: one plain line when each dataloader is done). The plain
-- lines of all bars share one clock, so there is at most one per interval.
local ffi = require 'ffi'
local Callback = require 'dpl.callbacks.callback'

pcall(ffi.cdef, 'int isatty(int fd);')

local ProgressBar = Callback:extend('ProgressBar')

local function clock() return require('dpl.capi').C.dpl_clock() end

--- ProgressBar{refresh_rate=, interval=30 (non-tty seconds), stream=io.stdout, tty=(auto)}
function ProgressBar:__init(o)
  Callback.__init(self)
  o = o or {}
  self.refresh_rate = o.refresh_rate or 1
  self.interval = o.interval or 30
  self.stream = o.stream or io.stdout
  self._tty = o.tty
  if self._tty == nil then
    local ok, r = pcall(function() return ffi.C.isatty(1) end)
    self._tty = ok and r == 1
  end
  self._enabled = true
  self.lines_printed = 0
end

function ProgressBar:disable() self._enabled = false end
function ProgressBar:enable() self._enabled = true end
function ProgressBar:is_tty() return self._tty end

local function fmt_time(s)
  if s ~= s or s == math.huge then return '?' end
  s = math.floor(s + 0.5)
  local h, m = math.floor(s / 3600), math.floor(s / 60) % 60
  if h > 0 then return ('%d:%02d:%02d'):format(h, m, s % 60) end
  return ('%02d:%02d'):format(m, s % 60)
end

--- The metrics shown: the trainer's progress_bar_metrics and v_num.
function ProgressBar:get_metrics(trainer)
  trainer._results_connector:flush()
  local out = {}
  for k, v in pairs(trainer.progress_bar_metrics) do out[k] = v end
  local lg = trainer.logger
  if lg then
    local v = require('dpl.loggers.base').attr(lg, 'version')
    if v ~= nil then out.v_num = v end
  end
  return out
end

local function metrics_text(m)
  local keys = {}
  for k in pairs(m) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    local v = m[k]
    if type(v) == 'number' then
      if v == math.floor(v) and math.abs(v) < 1e15 then parts[#parts + 1] = ('%s=%d'):format(k, v)
      else parts[#parts + 1] = ('%s=%.3g'):format(k, v) end
    else parts[#parts + 1] = k .. '=' .. tostring(v) end
  end
  return table.concat(parts, ', ')
end

function ProgressBar:_active(trainer)
  return self._enabled and trainer.is_global_zero
end

function ProgressBar:_write(s)
  self.stream:write(s)
  self.stream:flush()
end

function ProgressBar:on_train_epoch_start(trainer)
  if not self:_active(trainer) then return end
  self.epoch = trainer.current_epoch
  self.n = 0
  self.total = trainer.num_training_batches
  self.t0 = clock()
  self.last = self.t0
  self.last_plain = self.t0
end

function ProgressBar:_line(trainer, final)
  local el = clock() - self.t0
  local rate = el > 0 and self.n / el or 0
  local total = self.total
  local m = metrics_text(self:get_metrics(trainer))
  if total and total ~= math.huge and total > 0 then
    local pct = math.floor(100 * self.n / total)
    local eta = rate > 0 and (total - self.n) / rate or math.huge
    if self._tty then
      local width = 20
      local fill = math.floor(width * self.n / total)
      return ('Epoch %d: %3d%%|%s%s| %d/%d [%s<%s, %.2fit/s%s]'):format(self.epoch, pct, string.rep('#', fill),
        string.rep(' ', width - fill), self.n, total, fmt_time(el), fmt_time(eta), rate, m ~= '' and (', ' .. m) or '')
    end
    return ('Epoch %d: %d/%d batches (%d%%), %.2f it/s, elapsed %s, ETA %s%s%s'):format(self.epoch, self.n, total, pct,
      rate, fmt_time(el), final and '0:00' and fmt_time(0) or fmt_time(eta), m ~= '' and ', ' or '', m)
  end
  return ('Epoch %d: %d batches, %.2f it/s, elapsed %s%s%s'):format(self.epoch, self.n, rate, fmt_time(el),
    m ~= '' and ', ' or '', m)
end

function ProgressBar:on_train_batch_end(trainer)
  if not self._enabled or not trainer.is_global_zero or self.t0 == nil then return end
  self.n = self.n + 1
  local now = clock()
  if self._tty then
    if now - self.last >= 0.1 or self.n == self.total then
      self.last = now
      self:_write('\r' .. self:_line(trainer, false) .. '\027[K')
    end
  elseif now - (self.last_plain or self.t0) >= self.interval then
    self.last, self.last_plain = now, now
    self:_write(self:_line(trainer, false) .. '\n')
    self.lines_printed = self.lines_printed + 1
  end
end

function ProgressBar:on_train_epoch_end(trainer)
  if not self:_active(trainer) or self.t0 == nil then return end
  if self._tty then
    self:_write('\r' .. self:_line(trainer, true) .. '\027[K\n')
  else
    self:_write(self:_line(trainer, true) .. '\n')
  end
  self.lines_printed = self.lines_printed + 1
  self.t0 = nil
end

function ProgressBar:on_train_end(trainer)
  self.t0 = nil
end

---------------------------------------------------------------- evaluation bars

local DESC = { sanity = 'Sanity Checking', val = 'Validation', test = 'Testing', predict = 'Predicting' }
ProgressBar.descriptions = DESC

local function eval_total(trainer, stage, dl_idx)
  local counts = (stage == 'sanity' and trainer.num_sanity_val_batches) or (stage == 'val' and trainer.num_val_batches)
    or (stage == 'test' and trainer.num_test_batches) or (stage == 'predict' and trainer.num_predict_batches)
  local v = type(counts) == 'table' and counts[dl_idx + 1] or nil
  if type(v) ~= 'number' or v == math.huge then return nil end
  return v
end

function ProgressBar:_eval_line(b, final)
  local el = clock() - b.t0
  local rate = el > 0 and b.n / el or 0
  local total = b.total
  if total and total > 0 then
    local pct = math.floor(100 * b.n / total)
    local eta = final and 0 or (rate > 0 and (total - b.n) / rate or math.huge)
    if self._tty then
      local width = 20
      local fill = math.floor(width * b.n / total)
      return ('%s: %3d%%|%s%s| %d/%d [%s<%s, %.2fit/s]'):format(b.desc, pct, string.rep('#', fill),
        string.rep(' ', width - fill), b.n, total, fmt_time(el), fmt_time(eta), rate)
    end
    return ('%s: %d/%d batches (%d%%), %.2f it/s, elapsed %s, ETA %s'):format(b.desc, b.n, total, pct, rate,
      fmt_time(el), fmt_time(eta))
  end
  return ('%s: %d batches, %.2f it/s, elapsed %s'):format(b.desc, b.n, rate, fmt_time(el))
end

-- a bar per (stage, dataloader): a new dataloader index ends the previous bar
function ProgressBar:_eval_batch_start(trainer, base, dl_idx)
  if not self:_active(trainer) then return end
  local stage = (base == 'val' and trainer.sanity_checking) and 'sanity' or base
  dl_idx = dl_idx or 0
  local b = self._eval
  if b and b.stage == stage and b.dl == dl_idx then return end
  if b then self:_eval_finish(trainer) end
  local now = clock()
  self._eval = { stage = stage, dl = dl_idx, n = 0, total = eval_total(trainer, stage, dl_idx), t0 = now, last = now,
    desc = DESC[stage] .. ' DataLoader ' .. dl_idx }
  if self.last_plain == nil then self.last_plain = now end
end

function ProgressBar:_eval_batch_end(trainer)
  local b = self._eval
  if b == nil or not self:_active(trainer) then return end
  b.n = b.n + 1
  local now = clock()
  if self._tty then
    if now - b.last >= 0.1 or b.n == b.total then
      b.last = now
      self:_write('\r' .. self:_eval_line(b, false) .. '\027[K')
    end
  elseif now - (self.last_plain or b.t0) >= self.interval then
    self.last_plain = now
    self:_write(self:_eval_line(b, false) .. '\n')
    self.lines_printed = self.lines_printed + 1
  end
end

-- Lightning leaves the test/predict bars and those of a lone validate() on screen and
-- clears the sanity-check and in-fit validation ones (the training bar comes back).
function ProgressBar:_eval_finish(trainer)
  local b = self._eval
  self._eval = nil
  if b == nil or not self:_active(trainer) then return end
  local leave = b.stage == 'test' or b.stage == 'predict' or (b.stage == 'val' and trainer.state.fn ~= 'fit')
  if self._tty then
    if leave then
      self:_write('\r' .. self:_eval_line(b, true) .. '\027[K\n')
    else
      self:_write('\r\027[K' .. (self.t0 and self.n > 0 and self:_line(trainer, false) or ''))
    end
  elseif leave then
    self:_write(self:_eval_line(b, true) .. '\n')
    self.lines_printed = self.lines_printed + 1
    self.last_plain = clock()
  end
end

function ProgressBar:on_validation_start() self._eval = nil end
function ProgressBar:on_test_start() self._eval = nil end
function ProgressBar:on_predict_start() self._eval = nil end
function ProgressBar:on_validation_batch_start(trainer, _, _, _, dl_idx) self:_eval_batch_start(trainer, 'val', dl_idx) end
function ProgressBar:on_test_batch_start(trainer, _, _, _, dl_idx) self:_eval_batch_start(trainer, 'test', dl_idx) end
function ProgressBar:on_predict_batch_start(trainer, _, _, _, dl_idx) self:_eval_batch_start(trainer, 'predict', dl_idx) end
function ProgressBar:on_validation_batch_end(trainer) self:_eval_batch_end(trainer) end
function ProgressBar:on_test_batch_end(trainer) self:_eval_batch_end(trainer) end
function ProgressBar:on_predict_batch_end(trainer) self:_eval_batch_end(trainer) end
function ProgressBar:on_validation_end(trainer) self:_eval_finish(trainer) end
function ProgressBar:on_test_end(trainer) self:_eval_finish(trainer) end
function ProgressBar:on_predict_end(trainer) self:_eval_finish(trainer) end

Callback._mark_lazy_metrics_ok(ProgressBar)
return ProgressBar
