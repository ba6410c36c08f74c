-- dpl.trainer.fit_loop: sanity check, epochs, batches, automatic and manual
-- optimisation, accumulation, lr schedulers, in-epoch validation, stopping
-- (Lightning 1.9's FitLoop / TrainingEpochLoop / OptimizerLoop, hook order of
-- lightning-hooks.md §2). The per-batch path makes no closures: the closure of
-- automatic optimisation is built once per fit and reads the batch from `st`.
local errors = require 'dpl.errors'
local log = require 'dpl.log'
local loops = require 'dpl.trainer.loops'
local reduce_numbers = require('dpl.trainer.results').reduce_numbers

local Misconfiguration = errors.MisconfigurationException
local M = {}
local signal_received, on_signal

local huge, floor, max = math.huge, math.floor, math.max

local function misconf(fmt, ...)
  error(Misconfiguration(select('#', ...) > 0 and fmt:format(...) or fmt), 0)
end

-- training_step output -> loss (nil: skip), checked as Lightning does
local function extract_loss(out)
  if out == nil then return nil end
  local to = type(out)
  if to == 'cdata' then return out end
  if to == 'table' then
    local mt = getmetatable(out)
    if mt ~= nil and type(out.backward) == 'function' then return out end
    do
      local loss = out.loss
      if loss == nil then
        misconf("In automatic_optimization, when `training_step` returns a dict, the 'loss' key needs to be present")
      end
      if type(loss) ~= 'cdata' and not (type(loss) == 'table' and type(loss.backward) == 'function') then
        misconf("In automatic_optimization, the 'loss' returned by `training_step` must be a Tensor. Got %s", type(loss))
      end
      return loss
    end
  end
  misconf('In automatic optimization, `training_step` must return a Tensor, a dict, or nil (where the step will be skipped). Got %s', to)
end

-- manual optimisation: what the batch-end and epoch-end hooks get for a training_step output
-- (Lightning 1.9's ManualResult): a tensor gives {loss = <it, detached>}, a table a new table
-- of its keys but 'hiddens' (its loss detached), nil nil; anything else is refused
local function manual_result(out)
  if out == nil then return nil end
  local to = type(out)
  local function tensor_like(v)
    return type(v) == 'cdata' or (type(v) == 'table' and getmetatable(v) ~= nil and type(v.backward) == 'function')
  end
  local extra
  if tensor_like(out) then
    extra = { loss = out }
  elseif to == 'table' then
    extra = {}
    for k, v in pairs(out) do
      if k ~= 'hiddens' then extra[k] = v end
    end
  else
    misconf('In manual optimization, `training_step` must either return a Tensor, a dict with extras to pass to'
      .. ' `training_epoch_end` or have no return.')
  end
  local loss = extra.loss
  if loss ~= nil and tensor_like(loss) and type(loss.detach) == 'function' then extra.loss = loss:detach() end
  return extra
end

-- the state of the batch being processed, read by the closures
local function new_state(t)
  local st = { t = t, batch = nil, batch_idx = 0, opt = nil, opt_idx = 0, n_opts = 1, out = nil,
    accumulate = 1 }
  -- one closure per fit: training_step, zero_grad (window start), backward
  st.closure = function()
    local tr = st.t
    local strategy = tr.strategy
    local out
    if st.n_opts > 1 then out = tr:_call_strategy_step('training_step', st.batch, st.batch_idx, st.opt_idx)
    else out = tr:_call_strategy_step('training_step', st.batch, st.batch_idx) end
    strategy:post_training_step()
    out = tr:_call_module_hook('training_step_end', out)
    out = strategy:training_step_end(out)
    local loss = extract_loss(out)
    if loss ~= nil then
      -- what the batch-end and epoch-end hooks get (Lightning's ClosureResult.asdict): the
      -- loss detached (the graph of every batch is not kept alive by training_epoch_end's
      -- outputs) and divided by accumulate_grad_batches as the backward's is, the other keys
      -- as returned ('hiddens' left out); the table returned is not modified
      local d = type(loss) == 'cdata' and loss:detach() or loss
      local kept = { loss = st.accumulate > 1 and d / st.accumulate or d }
      if type(out) == 'table' and out ~= loss then
        for k, v in pairs(out) do
          if k ~= 'loss' and k ~= 'hiddens' then kept[k] = v end
        end
      end
      st.out = kept
    else
      st.out = nil
    end
    if loss == nil then return nil end
    if st.skip_backward then return loss end -- (StochasticWeightAveraging's BatchNorm pass: forward only)
    if st.batch_idx % st.accumulate == 0 and not strategy.handles_gradient_accumulation then
      local opt = st.opt
      tr:_call_callback_hooks('on_before_zero_grad', opt)
      tr:_call_module_hook('on_before_zero_grad', opt)
      tr:_call_module_hook('optimizer_zero_grad', tr.current_epoch, st.batch_idx, opt, st.opt_idx)
    end
    if st.accumulate > 1 then loss = loss / st.accumulate end
    tr:_backward(loss, st.opt, st.opt_idx)
    return loss
  end
  return st
end

--- The lr schedulers of an interval ("step"/"epoch"), plateau ones or not.
local function update_lr_schedulers(t, interval, plateau, stepped)
  local cfgs = t.lr_scheduler_configs
  if cfgs == nil or #cfgs == 0 then return end
  local model = t.lightning_module
  if not model.automatic_optimization then return end
  for i = 1, #cfgs do
    local cfg = cfgs[i]
    if cfg.interval == interval and (cfg.reduce_on_plateau == true) == plateau
       and (stepped == nil or stepped[cfg.opt_idx or 0]) then
      local counter = interval == 'step' and (t._cur_batch_idx + 1) or (t.current_epoch + 1)
      if counter % cfg.frequency == 0 then
        local metric
        if cfg.reduce_on_plateau then
          t._results_connector:flush()
          metric = t.callback_metrics[cfg.monitor]
          if metric == nil then
            if cfg.strict then
              local avail = {}
              for k in pairs(t.callback_metrics) do avail[#avail + 1] = k end
              table.sort(avail)
              misconf('ReduceLROnPlateau conditioned on metric %s which is not available. Available metrics are: %s.'
                .. ' Condition can be set using `monitor` key in lr scheduler dict', cfg.monitor, table.concat(avail, ', '))
            end
            log.warn(('ReduceLROnPlateau conditioned on metric %s which is not available but strict is set to `False`.'
              .. ' Skipping learning rate update.'):format(cfg.monitor))
            goto continue
          end
        end
        t:_call_module_hook('lr_scheduler_step', cfg.scheduler, cfg.opt_idx or 0, metric)
      end
    end
    ::continue::
  end
end
M.update_lr_schedulers = update_lr_schedulers

-- Lightning's FitLoop._can_stop_early: the processed epochs (current_epoch while an epoch
-- runs, and once it is counted) and optimizer steps reach min_epochs / min_steps
local function can_stop_early(t)
  local met_epochs = t.current_epoch >= (t.min_epochs or 0)
  local met_steps = t.min_steps == nil or t.global_step >= t.min_steps
  return met_epochs and met_steps
end

-- should_stop is set, may the loop stop now? Not before the minimums: the flag stays set
-- (Lightning 1.9.5 keeps it; the fit stops as soon as they are met) and the message is
-- printed once per fit (Lightning's WarningCache)
local function may_stop(t)
  if can_stop_early(t) then return true end
  if not t._min_not_met_said then
    t._min_not_met_said = true
    log.info('Trainer was signaled to stop but the required `min_epochs=%s` or `min_steps=%s` has not been met. Training will continue...',
             tostring(t.min_epochs), t.min_steps == nil and 'None' or tostring(t.min_steps))
  end
  return false
end

local function fit_done(t)
  if t.max_steps ~= -1 and t.global_step >= t.max_steps then
    log.info('`Trainer.fit` stopped: `max_steps=%d` reached.', t.max_steps)
    return true
  end
  if t.max_epochs ~= -1 and t.current_epoch >= t.max_epochs then
    log.info('`Trainer.fit` stopped: `max_epochs=%d` reached.', t.max_epochs)
    return true
  end
  -- should_stop set on one rank at an epoch's end (on_train_epoch_end, ...): every rank
  -- agrees before deciding (one 8-byte all-reduce per epoch)
  if t.world_size > 1 then t.should_stop = reduce_numbers(t.should_stop and 1 or 0, nil, 'max') > 0 end
  if t.should_stop and may_stop(t) then return true end
  return false
end

-- validation after batch b of the epoch? (1.9 _should_check_val_fx)
local function should_check_val(t, batch_idx, is_last)
  if not t._enable_validation then return false end
  local every = t.check_val_every_n_epoch
  if every ~= nil and (t.current_epoch + 1) % every ~= 0 then return false end
  local vcb = t.val_check_batch
  if vcb == huge and is_last then return true end
  -- a stop request runs validation now only once the loop may stop (Lightning 1.9.5,
  -- PR #16719): before min_epochs/min_steps validation keeps its usual points
  if t.should_stop and can_stop_early(t) then return true end
  if vcb == huge then return false end
  local cur = every == nil and t._total_batch_idx or batch_idx
  return (cur + 1) % vcb == 0
end

local function run_validation_in_fit(t)
  local rc = t._results_connector
  loops.run_evaluation(t, 'val', false)
  rc:set_stage('train')
end

---------------------------------------------------------------- signals

local C = require('dpl.capi').C
local SignalReceived = errors.new_class('SignalReceived', errors.RuntimeError)
M.SignalReceived = SignalReceived

-- SIGTERM and SIGUSR1 are blocked while fitting and polled at batch boundaries
-- (sigpending, then consumed with sigtimedwait): the host's handler, which would
-- interrupt the running step, never sees them then. Linux/glibc sigset_t layout.
local ffi = require 'ffi'
local SIGUSR1, SIGTERM = 10, 15
local have_sig = pcall(ffi.cdef, [[
typedef struct { unsigned long val[16]; } dpl_sigset_t_;
struct dpl_timespec_ { long tv_sec; long tv_nsec; };
int sigemptyset(dpl_sigset_t_ *set);
int sigaddset(dpl_sigset_t_ *set, int signum);
int sigismember(const dpl_sigset_t_ *set, int signum);
int pthread_sigmask(int how, const dpl_sigset_t_ *set, dpl_sigset_t_ *oldset);
int sigpending(dpl_sigset_t_ *set);
int sigtimedwait(const dpl_sigset_t_ *set, void *info, const struct dpl_timespec_ *timeout);
]]) and ffi.os == 'Linux'
local pend, one, zero_ts = nil, nil, nil
if have_sig then
  pend, one = ffi.new('dpl_sigset_t_'), ffi.new('dpl_sigset_t_')
  zero_ts = ffi.new('struct dpl_timespec_')
end

--- Blocks SIGTERM/SIGUSR1 in this thread; returns the previous mask (nil when unsupported).
function M._block_signals()
  if not have_sig then return nil end
  local set, old = ffi.new('dpl_sigset_t_'), ffi.new('dpl_sigset_t_')
  ffi.C.sigemptyset(set)
  ffi.C.sigaddset(set, SIGTERM)
  ffi.C.sigaddset(set, SIGUSR1)
  if ffi.C.pthread_sigmask(0, set, old) ~= 0 then return nil end -- SIG_BLOCK
  return old
end

--- Restores a mask saved by _block_signals (a pending signal is delivered then).
function M._restore_signals(old)
  if old ~= nil then ffi.C.pthread_sigmask(2, old, nil) end -- SIG_SETMASK
end

local function pending_signal()
  if not have_sig then return 0 end
  ffi.C.sigpending(pend)
  for _, sig in ipairs({ SIGTERM, SIGUSR1 }) do
    if ffi.C.sigismember(pend, sig) == 1 then
      ffi.C.sigemptyset(one)
      ffi.C.sigaddset(one, sig)
      ffi.C.sigtimedwait(one, nil, zero_ts) -- consume it
      return 128 + sig
    end
  end
  return 0
end

--- A SIGTERM/SIGUSR1 that is pending (blocked), consumed: its number, 0 when none
--- (ddp_spawn's parent forwards it to the workers).
function M._take_pending_signal()
  local s = pending_signal()
  return s > 0 and s - 128 or 0
end

-- 128 + signal number, 0 when none: the host's flag (SIGINT, or a signal that came
-- before fit) or a blocked SIGTERM/SIGUSR1; replaceable for tests
M._signal_source = function()
  local s = C.dpl_signal_received()
  if s ~= 0 then return s end
  return pending_signal()
end
signal_received = function() return M._signal_source() end

--- Tells the host that signal `sig` (SIGTERM/SIGUSR1) stopped the run (its exit status
--- becomes 128+sig); replaceable for tests.
function M._record_signal(sig)
  local ok, host = pcall(require, 'dpl.host')
  if ok and type(host) == 'table' and host.record_signal and (sig == SIGTERM or sig == SIGUSR1) then
    host.record_signal(sig)
  end
end

--- The rank whose failure made dplhost's launcher stop this one (nil: none, or not under
--- the launcher); replaceable for tests.
function M._launcher_failed_rank()
  local ok, host = pcall(require, 'dpl.host')
  if ok and type(host) == 'table' and host.launcher_failed_rank then return host.launcher_failed_rank() end
  return nil
end

-- every rank: a checkpoint written by rank 0 (hpc_ckpt_<n>.ckpt in
-- default_root_dir, as Lightning's SLURM connector), then an error (exit non-zero)
on_signal = function(t, status)
  local dir = t.default_root_dir
  local n = 0
  for _, name in ipairs(require('dpl.loggers.base').listdir(dir)) do
    local k = tonumber(name:match('^hpc_ckpt_(%d+)%.ckpt$') or '')
    if k and k > n then n = k end
  end
  n = t.strategy:broadcast(n)
  local path = ('%s/hpc_ckpt_%d.ckpt'):format(dir, n + 1)
  t:save_checkpoint(path)
  local sig = status - 128
  -- this rank's own copy of the signal (a launcher or SLURM signals every rank; the ranks
  -- stopped on whichever saw it first) may still be pending: consumed here, past the
  -- checkpoint's barrier, so that restoring the signal mask after fit does not deliver it as
  -- an interrupt in place of this error
  if have_sig and sig > 0 then
    ffi.C.sigemptyset(one)
    ffi.C.sigaddset(one, sig)
    ffi.C.sigtimedwait(one, nil, zero_ts)
  end
  -- the host learns of it (taken here with sigtimedwait, its handler never ran): a script
  -- that ends or raises now exits 128+N, as one stopped by the signal does (docs/host.md);
  -- nothing is interrupted. (SIGINT reached the host's handler already.)
  M._record_signal(sig)
  error(SignalReceived(('received signal %d (%s) on a rank: every rank stopped after global_step %d; checkpoint saved to %s')
    :format(sig, sig == 15 and 'SIGTERM' or sig == 10 and 'SIGUSR1' or sig == 2 and 'SIGINT' or 'signal',
            t.global_step, path)), 0)
end

---------------------------------------------------------------- epoch


-- This rank's pending signal (0 or 128+N) and should_stop, agreed over the ranks in one
-- 2-number max all-reduce when there are several: returns the signal; should_stop is set
-- on every rank when any set it.
local function agree_signal_and_stop(t, multi)
  local sig = signal_received()
  if sig == 128 + SIGTERM then
    -- the launcher's SIGTERM after another rank failed (dplhost --nproc): that rank will not
    -- join an agreement or a checkpoint; this one stops now, and the host says so in one line
    local fr = M._launcher_failed_rank()
    if fr ~= nil then
      M._record_signal(SIGTERM)
      error(SignalReceived(('stopped by the launcher: rank %d failed'):format(fr)), 0)
    end
  end
  if multi then
    local stop
    sig, stop = reduce_numbers(sig, t.should_stop and 1 or 0, 'max')
    t.should_stop = stop > 0
  end
  return sig
end
-- Lightning's _build_training_step_kwargs checks, with several optimizers: automatic
-- optimisation passes optimizer_idx, so training_step must take it (Lua passes it by position:
-- a third parameter of any name, or `...`); manual optimisation refuses one named optimizer_idx
local function check_optimizer_idx_param(model, n_opts)
  if n_opts <= 1 then return end
  local f = model.training_step
  if type(f) ~= 'function' then return end
  local info = debug.getinfo(f, 'u')
  local third = debug.getlocal(f, 4) -- (self, batch, batch_idx, optimizer_idx)
  if not model.automatic_optimization then
    if third == 'optimizer_idx' then
      errors.ValueError:raise('Your `LightningModule.training_step` signature contains an `optimizer_idx` argument but'
        .. ' in manual optimization optimizers must be handled by the user. Remove the optimizer_idx'
        .. ' argument or set `self.automatic_optimization = True`.', 0)
    end
  elseif (info.nparams or 0) < 4 and not info.isvararg then
    errors.ValueError:raise(('Your LightningModule defines %d optimizers but `training_step` is missing the'
      .. ' `optimizer_idx` argument.'):format(n_opts), 0)
  end
end

local function run_train_epoch(t, st, loader, nbatches)
  local model = t.lightning_module
  local rc = t._results_connector
  local automatic = model.automatic_optimization
  local lopts = t.strategy._lightning_optimizers
  local opts = t.optimizers
  local n_opts = #opts
  local handles_acc = t.strategy.handles_gradient_accumulation
  local keep_outputs = t:_is_overridden('training_epoch_end')
  local outputs = keep_outputs and {} or nil
  local per_opt = (automatic and n_opts > 1) and {} or nil
  local log_every = t.log_every_n_steps
  local stepped = {}
  local freqs = t.strategy.optimizer_frequencies
  if freqs == nil or #freqs == 0 then freqs = nil end
  local freq_total = 0
  for _, f in ipairs(freqs or {}) do freq_total = freq_total + f end
  st.n_opts = n_opts
  if nbatches ~= 0 and not st._opt_idx_checked then
    check_optimizer_idx_param(model, n_opts)
    st._opt_idx_checked = true
  end
  st.accumulate = t.accumulate_grad_batches
  st.epoch_batches = 0 -- the batches that reached their batch-end hooks (for training_epoch_end)
  -- fit_loop._skip_backward (set by a callback for one epoch: StochasticWeightAveraging's
  -- pass that recomputes BatchNorm statistics): training_step runs, no backward, no
  -- zero_grad, no optimizer step
  local skip_backward = t.fit_loop._skip_backward == true
  st.skip_backward = skip_backward
  local multi = t.world_size > 1
  local agree_skip = multi and t:_is_overridden('on_train_batch_start')

  local it = loader:iter()
  local prof = t._prof
  if prof then
    local raw_it = it
    it = function() return prof:profile('[_TrainingEpochLoop].train_dataloader_next', raw_it) end
  end
  t.fit_loop._pending = nil
  local start = t.fit_loop.batch_idx
  for _ = 1, start do -- resumed mid-epoch: the batches already trained on
    if it() == nil then break end
  end
  if t.fit_loop._rng_restore then -- (a mid-epoch resume: the generator as after the batch saved)
    require('dpl').set_rng_state(t.fit_loop._rng_restore)
    t.fit_loop._rng_restore = nil
  end
  local i = start
  -- one batch of look-ahead (Lightning's prefetching): the last batch of a loader of
  -- unknown length is known as such
  local nxt = i < nbatches and it() or nil
  while i < nbatches do
    local batch = nxt
    if batch == nil then break end
    nxt = i + 1 < nbatches and it() or nil
    local is_last = nxt == nil
    t.is_last_batch = is_last -- (Lightning's trainer.is_last_batch)
    t._cur_batch_idx = i
    rc:on_batch_start(batch, 0)
    batch = loops.transfer(t, batch, 0)
    t:_call_callback_hooks('on_train_batch_start', batch, i)
    local r = t:_call_module_hook('on_train_batch_start', batch, i)
    -- -1 ends the epoch; with several ranks they agree first (a max all-reduce, only when
    -- the module overrides the hook), so one rank's -1 ends every rank's epoch here
    -- instead of leaving the others in a gradient all-reduce it never joins
    if agree_skip and reduce_numbers(r == -1 and 1 or 0, nil, 'max') > 0 then r = -1 end
    if r == -1 then
      t.fit_loop.batch_idx = i + 1
      break
    end
    local accumulating = skip_backward or ((i + 1) % st.accumulate ~= 0 and not (is_last and not handles_acc))
    st.batch, st.batch_idx, st.out = batch, i, nil
    local any_step = false
    if prof then prof:start('run_training_batch') t._prof_open = 'run_training_batch' end
    if automatic then
      local o_first, o_last = 1, n_opts
      if freqs then
        -- optimizer frequencies: one optimizer per batch, in turn (Lightning's _get_active_optimizers)
        local place = t._total_batch_idx % freq_total
        local acc = 0
        for k = 1, #freqs do
          acc = acc + freqs[k]
          if place < acc then o_first, o_last = k, k break end
        end
      end
      for o = o_first, o_last do
        local opt_idx = o - 1
        st.opt, st.opt_idx, st.out = opts[o], opt_idx, nil
        if n_opts > 1 then t:_call_module_hook('toggle_optimizer', opts[o], opt_idx) end
        if accumulating and not handles_acc then
          st.closure()
        else
          t:_call_module_hook('optimizer_step', t.current_epoch, i, lopts[o], opt_idx, st.closure, false, false)
          t.global_step = t.global_step + 1
          model.global_step = t.global_step
          stepped[opt_idx] = true
          any_step = true
        end
        if n_opts > 1 then
          t:_call_module_hook('untoggle_optimizer', opt_idx)
          per_opt[o] = st.out
        end
      end
      if n_opts > 1 then
        -- Lightning's outputs with several optimizers: a list of each optimizer's output
        -- in optimizer order, those that returned nothing (or did not run) left out
        local l = {}
        for o = 1, n_opts do
          if per_opt[o] ~= nil then l[#l + 1] = per_opt[o]; per_opt[o] = nil end
        end
        st.out = l
      end
    else
      local gs = t.global_step
      local out = t:_call_strategy_step('training_step', batch, i)
      t.strategy:post_training_step()
      out = t:_call_module_hook('training_step_end', out)
      st.out = manual_result(t.strategy:training_step_end(out))
      any_step = t.global_step > gs
    end
    if prof then prof:stop('run_training_batch') t._prof_open = nil end
    -- batch i is trained; until its counters advance below, a checkpoint written now (in
    -- on_train_batch_end: ModelCheckpoint's every_n_train_steps; in the validation after it)
    -- records them as after this batch, so a resume goes on at batch i + 1 (checkpoint.dump)
    t.fit_loop._pending = accumulating and 1 or 2
    local out = st.out
    if any_step then
      update_lr_schedulers(t, 'step', false, stepped)
      if is_last then update_lr_schedulers(t, 'epoch', false, stepped) end
    end
    -- this step's values are in callback_metrics for the batch-end hooks (Lightning's
    -- callback_metrics is live: ModelCheckpoint(every_n_train_steps, monitor=) reads it)
    rc:release(rc:collect_step(true))
    -- a skipped step (training_step returned nil) is Lightning's `[]` for the batch-end hooks
    local bout = out
    if bout == nil then bout = {} end
    t:_call_callback_hooks('on_train_batch_end', bout, batch, i)
    t:_call_module_hook('on_train_batch_end', bout, batch, i)
    -- The ranks agree, in one 2-number max all-reduce per batch, on a signal (SIGTERM,
    -- SIGUSR1, the host's flag; acted on after the batch) and on should_stop set on any
    -- rank (Lightning's reduce_boolean_decision(any)), before should_stop decides logging,
    -- validation and the end of the epoch: every rank stops after the same batch.
    local sig = agree_signal_and_stop(t, multi)
    -- logging (values logged in on_train_batch_end included)
    local logd = rc:collect_step(true)
    if logd then
      if not (accumulating and automatic)
         and ((t.fit_loop.batches_that_stepped + 1) % log_every == 0 or t.should_stop) then
        rc:log_metrics(logd, t.fit_loop.batches_that_stepped, true)
      end
      rc:release(logd)
    end
    if keep_outputs then
      if out ~= nil then outputs[#outputs + 1] = out end
      st.epoch_batches = st.epoch_batches + 1
    end
    t.fit_loop.batch_idx = i + 1
    if any_step then for k in pairs(stepped) do stepped[k] = nil end end
    -- on_advance_end: validation, plateau schedulers, counters
    if should_check_val(t, i, is_last) then
      run_validation_in_fit(t)
      -- a signal that came during validation, a should_stop set in it on one rank: agreed
      -- again (once per validation, not per batch)
      local sig2 = agree_signal_and_stop(t, multi)
      if sig2 > sig then sig = sig2 end
    end
    if any_step then update_lr_schedulers(t, 'step', true, nil) end
    if not accumulating then t.fit_loop.batches_that_stepped = t.fit_loop.batches_that_stepped + 1 end
    t._total_batch_idx = t._total_batch_idx + 1
    t.fit_loop._pending = nil
    i = i + 1
    -- SIGTERM/SIGUSR1/SIGINT (also on another rank): every rank stops after this same batch
    if sig ~= 0 then on_signal(t, sig) end
    if t.max_steps ~= -1 and t.global_step >= t.max_steps then break end
    if t.should_stop and may_stop(t) then break end
  end
  if outputs and per_opt then
    -- Lightning squeezes the [batch][optimizer] array: one batch gives its list itself;
    -- batches whose optimizers all returned nothing are dropped
    if #outputs == 1 then outputs = outputs[1] end
    local kept = {}
    for k = 1, #outputs do
      local o = outputs[k]
      if getmetatable(o) ~= nil or next(o) ~= nil then kept[#kept + 1] = o end
    end
    outputs = kept
  end
  return outputs
end

---------------------------------------------------------------- fit

function M.run_train(t)
  local rc = t._results_connector
  local model = t.lightning_module
  local strategy = t.strategy
  strategy:barrier('setup_training')
  t._val_loaders = nil
  t._enable_validation = loops.enable_validation(t)
  t._total_batch_idx = t._total_batch_idx or 0

  -- sanity check
  if t._enable_validation and t.num_sanity_val_steps > 0 and not t.fit_loop.restarting then
    t.sanity_checking = true
    rc:reset_metrics()
    t:_call_callback_hooks('on_sanity_check_start')
    loops.run_evaluation(t, 'val', true)
    t:_call_callback_hooks('on_sanity_check_end')
    rc:reset_metrics()
    rc:reset_collection('val')
    t.sanity_checking = false
  end

  t.model:train()
  loops.set_grad_enabled(true)
  local loaders, counts = loops.load_loaders(t, 'train')
  if #loaders == 0 then
    t.num_training_batches = 0
    return
  end
  if #loaders ~= 1 then
    misconf('fit expects one training DataLoader, got %d', #loaders)
  end
  local loader, nbatches = loaders[1], counts[1]
  t.train_dataloader = loader
  t.num_training_batches = nbatches
  -- val_check_batch
  local vc = t._args._val_check
  if vc.kind == 'count' then
    if t.check_val_every_n_epoch ~= nil and nbatches ~= huge and vc.value > nbatches then
      errors.ValueError:raise(('`val_check_interval` (%d) must be less than or equal to the number of the training batches (%d). If you want to disable validation set `limit_val_batches` to 0.0 instead. If you want to validate based on the total training batches, set `check_val_every_n_epoch=nil`.')
        :format(vc.value, nbatches), 0)
    end
    t.val_check_batch = vc.value
  elseif nbatches == huge or loops.loader_len(loader) == nil then
    -- a loader of unknown length (an IterableDataset without __len): only 1.0 or an int (and
    -- validation at the epoch's end, also when limit_train_batches bounds the epoch: Lightning's inf)
    if vc.value ~= 1 then
      misconf('When using an IterableDataset for `train_dataloader`, `Trainer(val_check_interval)` must be `1.0` or an'
        .. ' int. An int k specifies checking validation every k training batches.')
    end
    t.val_check_batch = huge
  else
    t.val_check_batch = max(1, floor(nbatches * vc.value))
  end
  if t._enable_validation and t._val_loaders == nil then
    local every = t.check_val_every_n_epoch
    if every == nil or (t.current_epoch + 1) % every == 0 then
      t._val_loaders, t._val_counts = loops.load_loaders(t, 'val')
      t.num_val_batches = t._val_counts
    end
  end
  if t.fit_loop.batch_idx > 0 and t.fit_loop.batch_idx >= nbatches then
    t.current_epoch, t.fit_loop.batch_idx = t.current_epoch + 1, 0
  end
  if nbatches == 0 then
    log.info('`Trainer.fit` stopped: No training batches.')
    return
  end
  if t._warn_max_epochs then
    log.warn('`max_epochs` was not set. Setting it to 1000 epochs. To train without an epoch limit, set `max_epochs=-1`.')
  end

  t.training = true
  t._min_not_met_said = false
  -- self:log in on_train_start (epoch level only) goes into the first epoch's results, as in
  -- Lightning (its training ResultCollection is live from on_train_start and reset at each
  -- epoch's end): the values reach callback/logged metrics at that epoch's end
  rc:set_stage('train')
  rc:on_epoch_start()
  rc.batch, rc.batch_size = nil, nil
  t:_call_callback_hooks('on_train_start')
  t:_call_module_hook('on_train_start')
  local st = new_state(t)
  local reload_every, last_reload = t.reload_dataloaders_every_n_epochs, t.current_epoch
  local first_epoch = true
  while not fit_done(t) do
    local epoch = t.current_epoch
    model.current_epoch = epoch
    if t.fit_loop._rng_restore and t.fit_loop.batch_idx == 0 then
      -- resumed from an epoch's end: the generator as it was there
      require('dpl').set_rng_state(t.fit_loop._rng_restore)
      t.fit_loop._rng_restore = nil
    end
    if reload_every > 0 and epoch - last_reload >= reload_every then
      -- Lightning's reload_dataloaders_every_n_epochs: the hooks are called again
      loaders, counts = loops.load_loaders(t, 'train')
      loader, nbatches = loaders[1], counts[1]
      t.train_dataloader, t.num_training_batches = loader, nbatches
      t._val_loaders = nil
      last_reload = epoch
    end
    local ok, se = pcall(function() return loader.set_epoch end)
    if ok and type(se) == 'function' then se(loader, epoch) end
    -- the accumulation factor of this epoch, before the hooks (Lightning's FitLoop.on_advance_start)
    t.accumulation_scheduler:on_train_epoch_start(t, model)
    rc:set_stage('train')
    if not first_epoch then rc:on_epoch_start() end -- the first one started before on_train_start
    first_epoch = false
    t:_call_callback_hooks('on_train_epoch_start')
    t:_call_module_hook('on_train_epoch_start')
    -- ddp: the hooks may have frozen or unfrozen parameters (BaseFinetuning): the gradient
    -- buckets follow at the next sync
    if t.strategy._refresh_bucket_plan then t.strategy:_refresh_bucket_plan(model) end
    local outputs
    if t._prof then outputs = t._prof:profile('run_training_epoch', run_train_epoch, t, st, loader, nbatches)
    else outputs = run_train_epoch(t, st, loader, nbatches) end
    loops.end_pass(loader)
    t.fit_loop._pending = nil -- (a break after the batch's training: it ended the epoch)
    t.fit_loop.epoch_done = t.fit_loop.batch_idx >= nbatches
    -- the epoch aggregates are visible in callback_metrics from here on (Lightning's
    -- epoch_end_reached: ModelCheckpoint/EarlyStopping read them in on_train_epoch_end)
    rc:collect_epoch()
    -- Lightning calls training_epoch_end once a batch has run, with `[]` when every
    -- training_step returned nil (not when the epoch ran no batch)
    if outputs and (#outputs > 0 or st.epoch_batches > 0) then
      local r = t:_call_module_hook('training_epoch_end', outputs)
      if r ~= nil then misconf('`training_epoch_end` expects a return of nil.') end
    end
    t:_call_callback_hooks('on_train_epoch_end')
    t:_call_module_hook('on_train_epoch_end')
    local logd = rc:collect_epoch()
    rc:log_metrics(logd, max(0, t.fit_loop.batches_that_stepped - 1), true)
    rc:end_epoch()
    update_lr_schedulers(t, 'epoch', true, nil)
    t.current_epoch = epoch + 1
    model.current_epoch = t.current_epoch
    t.fit_loop.batch_idx = 0
    t.fit_loop.epoch_done = false
  end
  t:_call_callback_hooks('on_train_end')
  t:_call_module_hook('on_train_end')
  t.training = false
end

return M
