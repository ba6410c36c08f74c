-- dpl.strategies.spawn: the launcher of ddp_spawn / ddp_fork / ddp_notebook.
-- trainer:fit (validate, test, predict) forks N workers from the running script
-- (the Lua state cannot be pickled: workers inherit it), each with RANK,
-- LOCAL_RANK, WORLD_SIZE and a shared DPL_JOB_ID, runs the trainer function in
-- every worker, joins them, and brings rank 0's results back into the parent:
-- the model's weights, the best checkpoint path, the trainer's state
-- (current_epoch, global_step, ...), the callback metrics and the function's
-- return value — as Lightning's _MultiProcessingLauncher does. A failing
-- worker stops the others; the parent raises an error naming the rank.
local errors = require 'dpl.errors'

local M = {}
local worker_body -- below

M.ProcessRaisedException = require('dpl.spawn').ProcessRaisedException

-- Lua values string.buffer can carry (numbers, strings, booleans, plain tables)
local function plain(v, depth)
  depth = depth or 0
  local tv = type(v)
  if tv == 'number' or tv == 'string' or tv == 'boolean' then return v end
  if tv == 'table' and depth < 20 then
    local out = {}
    for k, x in pairs(v) do
      local pk, px = plain(k, depth + 1), plain(x, depth + 1)
      if pk ~= nil and px ~= nil then out[pk] = px end
    end
    return out
  end
  if tv == 'table' or tv == 'cdata' then
    local to = require('dpl.trainer.results').to_number(v)
    return to
  end
  return nil
end

-- The worker's part: this process's ranks, the run, and (rank 0) what the parent needs.
worker_body = function(strategy, trainer, fn, rank, tmp, ...)
  strategy:_set_process_index(rank)
  -- nccl when this worker's device is a real GPU with NCCL (ddp.process_group_backend)
  local dist = require 'dpl.dist'
  if dist.is_initialized() and dist.get_world_size() > 1
      and require('dpl.strategies.ddp').process_group_backend(strategy) == 'nccl' then
    dist._enable_nccl(strategy.root_device.index)
  end
  trainer:_refresh_ranks()
  -- a SIGTERM/SIGUSR1 while fitting: every rank stopped at the same step, rank 0 wrote the
  -- hpc checkpoint, and each raised SignalReceived (as under ddp); the parent raises it
  -- after bringing the results back. Any other error goes on with its traceback.
  local SignalReceived = require('dpl.trainer.fit_loop').SignalReceived
  local ok, result = xpcall(fn, function(e)
    if errors.is(e, SignalReceived) then return e end
    return require('dpl.spawn')._traceback(e)
  end, trainer, ...)
  local signal
  if not ok then
    if not errors.is(result, SignalReceived) then error(result, 0) end
    signal, result = result.message, nil
  end
  if rank ~= 0 then return nil end
  local out = {
    signal = signal,
    best_model_path = trainer.checkpoint_callback and trainer.checkpoint_callback.best_model_path or nil,
    last_model_path = trainer.checkpoint_callback and trainer.checkpoint_callback.last_model_path or nil,
    callback_metrics = plain(trainer.callback_metrics),
    logged_metrics = plain(trainer.logged_metrics),
    state = { current_epoch = trainer.current_epoch, global_step = trainer.global_step,
      status = trainer.state.status, fn = trainer.state.fn },
  }
  -- the loggers' versions rank 0 wrote to (version_N decided in the worker): the parent's
  -- logger.version / log_dir name the run's directory, not the next free one
  out.logger_versions = {}
  for i, lg in ipairs(trainer.loggers or {}) do
    local v = type(lg) == 'table' and rawget(lg, '_version') or nil
    if type(v) == 'number' or type(v) == 'string' then out.logger_versions[i] = v end
  end
  -- (results are numbers: validate/test's metrics; predict returns nothing from spawned
  -- workers, as Lightning's return_predictions=false there)
  out.result = plain(result)
  if trainer.state.fn == 'fit' then
    -- the weights travel through a temporary checkpoint (tensors included)
    local weights = tmp .. '.temp.ckpt'
    -- with the callbacks' states (ModelCheckpoint's best_model_score and best_k_models,
    -- EarlyStopping's stopped_epoch and wait_count, ...), by state_key as in a checkpoint
    local cbs = {}
    for _, cb in ipairs(trainer.callbacks or {}) do
      local sok, st = pcall(cb.state_dict, cb)
      if sok and type(st) == 'table' and next(st) ~= nil then cbs[cb:state_key()] = st end
    end
    require('dpl.trainer.checkpoint').save({ state_dict = strategy:lightning_module_state_dict(), callbacks = cbs },
      weights)
    out.weights_path = weights
  end
  return out
end

--- Runs fn(trainer, ...) in `n` forked workers; returns rank 0's result in the
--- parent after restoring its state there.
function M.launch(strategy, trainer, fn, ...)
  local n = strategy.num_processes * strategy.num_nodes
  if strategy.num_nodes > 1 then
    errors.MisconfigurationException:raise(("strategy='%s' forks workers on this machine only: num_nodes=%d needs"
      .. " strategy='ddp' under a launcher"):format(strategy.strategy_name, strategy.num_nodes), 0)
  end
  local tmp = os.tmpname()
  os.remove(tmp)
  -- a version the previous launch brought back is not this run's: its workers take the next
  -- free one again (as Lightning's, whose parent never learns it), rather than rewriting the
  -- previous run's files from loggers that hold none of its rows
  for _, lg in ipairs(trainer.loggers or {}) do
    if type(lg) == 'table' and rawget(lg, '_version_from_spawn') then
      rawset(lg, '_version', nil)
      rawset(lg, '_version_from_spawn', nil)
    end
  end
  local args = { n = select('#', ...), ... }
  -- fitting: SIGTERM/SIGUSR1 are held (blocked) here before the fork, so the workers start
  -- with them held and poll them at batch boundaries as an in-process fit does; one sent
  -- to this process is taken in the wait and forwarded to the workers
  local fit_loop = require 'dpl.trainer.fit_loop'
  local fitting = trainer.state.fn == 'fit'
  local mask = fitting and fit_loop._block_signals() or nil
  local ok, out = pcall(require('dpl.spawn').spawn, function(rank)
    return worker_body(strategy, trainer, fn, rank, tmp, unpack(args, 1, args.n))
  end, n, { pending_signal = fitting and fit_loop._take_pending_signal or nil })
  fit_loop._restore_signals(mask)
  if not ok then error(out, 0) end
  if type(out) ~= 'table' then
    errors.RuntimeError:raise('ddp_spawn: rank 0 returned no results', 0)
  end
  -- recover rank 0's results in the parent
  local cb = trainer.checkpoint_callback
  if cb and out.best_model_path then cb.best_model_path = out.best_model_path end
  if cb and out.last_model_path then cb.last_model_path = out.last_model_path end
  if out.weights_path then
    local ck = require('dpl.trainer.checkpoint').load(out.weights_path)
    os.remove(out.weights_path)
    local model = trainer.lightning_module
    if type(model.load_state_dict) == 'function' then model:load_state_dict(ck.state_dict or {}) end
    -- the parent's callbacks take rank 0's states, as after an in-process fit (Lightning
    -- brings back best_model_path only: its best_model_score stayed None in the parent)
    local states = ck.callbacks or {}
    for _, c in ipairs(trainer.callbacks or {}) do
      local st = states[c:state_key()]
      if st ~= nil then c:load_state_dict(st) end
    end
  end
  for k, v in pairs(out.state or {}) do
    if k == 'status' or k == 'fn' then trainer.state[k] = v else trainer[k] = v end
  end
  for i, v in pairs(out.logger_versions or {}) do
    local lg = (trainer.loggers or {})[i]
    if type(lg) == 'table' and rawget(lg, '_version') == nil then
      rawset(lg, '_version', v)
      rawset(lg, '_version_from_spawn', true)
    end
  end
  trainer.callback_metrics = out.callback_metrics or {}
  trainer.logged_metrics = out.logged_metrics or {}
  if out.signal then
    -- this process exits 128+N too when the error is not caught (as the workers' did)
    local sig = tonumber(tostring(out.signal):match('received signal (%d+)') or '')
    if sig then fit_loop._record_signal(sig) end
    error(fit_loop.SignalReceived(out.signal), 0)
  end
  return out.result
end

return M
