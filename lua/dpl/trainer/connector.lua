-- dpl.trainer.connector: from the Trainer's arguments to an accelerator, the
-- devices and a strategy object, the way Lightning 1.9's accelerator connector
-- does (reference: lightning-strategies.md §f), with the seed's (0.8.5) rules
-- for gpus/num_processes/num_nodes/distributed_backend and its fields
-- (data_parallel_device_ids, root_gpu, on_gpu, use_dp, use_ddp, ...).
local errors = require 'dpl.errors'
local log = require 'dpl.log'

local Misconfiguration = errors.MisconfigurationException
local M = {}

local function misconf(fmt, ...)
  error(Misconfiguration(select('#', ...) > 0 and fmt:format(...) or fmt), 0)
end

local function repr(v)
  if type(v) == 'string' then return "'" .. v .. "'" end
  if type(v) == 'table' and not getmetatable(v) then
    local parts = {}
    for i = 1, #v do parts[i] = repr(v[i]) end
    return '{' .. table.concat(parts, ', ') .. '}'
  end
  return tostring(v)
end
M.repr = repr

local accelerators = { cpu = true, gpu = true, cuda = true, tpu = true, auto = true, mps = true, ipu = true, hpu = true }

-- falsy device flags in Lightning's sense: nil, false, 0, "0", {} (not given)
local function truthy_flag(v)
  if v == nil or v == false or v == 0 or v == '0' then return false end
  if type(v) == 'table' and next(v) == nil then return false end
  return true
end

local function strategy_env_launched()
  -- processes created outside: the --nproc launcher / torchrun (LOCAL_RANK), SLURM, LSF, Open MPI
  if os.getenv('LOCAL_RANK') then return true end
  if os.getenv('SLURM_NTASKS') and os.getenv('SLURM_JOB_NAME') ~= 'bash' then return true end
  if os.getenv('LSB_JOBID') and os.getenv('JSM_NAMESPACE_LOCAL_RANK') then return true end
  return false
end
M._externally_launched = strategy_env_launched

local function ffi_reason()
  local ok, capi = pcall(require, 'dpl.capi')
  if not ok then return 'no CUDA' end
  return require('ffi').string(capi.C.dpl_cuda_unavailable_reason())
end

local function under_horovodrun()
  return os.getenv('OMPI_COMM_WORLD_RANK') ~= nil or os.getenv('HOROVOD_RANK') ~= nil
end

--- Normalises `precision`: 32, 64, 16 or 'bf16'. 2.x names are accepted too.
function M.parse_precision(p)
  local map = { [32] = 32, [64] = 64, [16] = 16, ['32'] = 32, ['64'] = 64, ['16'] = 16,
    ['32-true'] = 32, ['64-true'] = 64, ['16-mixed'] = 16, bf16 = 'bf16', ['bf16-mixed'] = 'bf16' }
  local v = map[p]
  if v == nil then
    misconf('Precision %s is invalid. Allowed precision values: 64, 32, 16, "64", "32", "16", "bf16",'
      .. ' "64-true", "32-true", "16-mixed", "bf16-mixed"', repr(p))
  end
  return v
end

--- Selects accelerator, devices and strategy. a: the trainer's (validated)
--- arguments. Returns a table of results (see the fields set at the end).
function M.select(a)
  local D = require 'dpl.devices'
  local strategies = require 'dpl.strategies'
  local out = {}

  -- 1. strategy flag (alias distributed_backend)
  local strategy = a.strategy
  if a.distributed_backend ~= nil then
    if strategy ~= nil and strategy ~= a.distributed_backend then
      misconf('strategy=%s and distributed_backend=%s are both set and differ: distributed_backend is an alias of strategy, set only one',
              repr(strategy), repr(a.distributed_backend))
    end
    strategy = a.distributed_backend
  end
  local strategy_obj
  if type(strategy) == 'string' then
    strategy = strategy:lower()
    if strategy == 'auto' then strategy = nil
    elseif strategy == 'ddp_cpu' then
      misconf("`Trainer(strategy='ddp_cpu')` is not a valid strategy, you can use `Trainer(strategy='ddp'|'ddp_spawn'|'ddp_fork', accelerator='cpu')` instead.")
    elseif not strategies.is_registered(strategy) then
      misconf("You selected an invalid strategy name: `strategy=%s`. Available names are: %s",
              repr(strategy), table.concat(strategies.names(), ', '))
    end
  elseif strategy ~= nil then
    if not strategies.is_strategy(strategy) then
      misconf('strategy must be a strategy name (string) or a strategy object, got %s', repr(strategy))
    end
    strategy_obj, strategy = strategy, strategy.strategy_name
  end

  -- 2. accelerator flag
  local acc = a.accelerator
  if acc ~= nil then
    if type(acc) ~= 'string' or not accelerators[acc:lower()] then
      misconf('You selected an invalid accelerator name: `accelerator=%s`. Available names are: auto, cpu, cuda, gpu, tpu',
              repr(acc))
    end
    acc = acc:lower()
  end
  -- ipus (Lightning 1.9's device flag for Graphcore IPUs): an IPU accelerator, which is never here
  if a.ipus ~= nil and a.ipus ~= 0 and a.ipus ~= false then
    if type(a.ipus) ~= 'number' or a.ipus < 0 or a.ipus % 1 ~= 0 then
      misconf('`ipus` must be a non-negative integer, got %s', repr(a.ipus))
    end
    acc = 'ipu'
  end
  if acc == 'mps' or acc == 'ipu' or acc == 'hpu' then
    misconf("`accelerator=%s` can not run on your system since the accelerator is not available. The following"
      .. " accelerator(s) is available and can be passed into `accelerator` argument of `Trainer`: %s", repr(acc),
      #D.get_all_available_gpus() > 0 and "['cpu', 'cuda']" or "['cpu']")
  end

  -- 3. device flags: gpus / tpu_cores / num_processes override devices when truthy
  local devices = a.devices
  if devices ~= nil and (devices == 0 or devices == '0' or (type(devices) == 'table' and next(devices) == nil)) then
    misconf('`Trainer(devices=%s)` value is not a valid input using %s accelerator.', repr(devices), acc or 'cpu')
  end
  local flags = {}
  -- the seed's rules (spec/devices.md): gpus=nil or the number 0 means no GPU; any other
  -- value is parsed (the string "0" is GPU 0; {} and "" raise "GPUs requested but none ...")
  if a.tpu_cores ~= nil then flags[#flags + 1] = 'tpu_cores' end
  if a.gpus ~= nil and a.gpus ~= 0 and a.gpus ~= false then flags[#flags + 1] = 'gpus' end
  if a.num_processes ~= nil and truthy_flag(a.num_processes) then flags[#flags + 1] = 'num_processes' end
  local implied
  if #flags > 0 then
    if #flags > 1 then
      log.warn('The flags %s are set: more than one device specific flag has been set; %s wins',
               table.concat(flags, ', '), flags[#flags])
    end
    local flag = flags[#flags]
    if devices ~= nil then
      log.warn('The flag `devices=%s` will be ignored, instead the device specific number %s will be used',
               repr(devices), repr(a[flag]))
    end
    devices = a[flag]
    implied = flag == 'tpu_cores' and 'tpu' or flag == 'gpus' and 'cuda' or 'cpu'
  end
  if devices == 'auto' and acc == nil then
    misconf("You passed `devices=auto` but haven't specified `accelerator=('auto'|'tpu'|'gpu'|'cpu')` for the devices mapping.")
  end

  -- 4. accelerator choice
  local ngpus_visible = #D.get_all_available_gpus()
  if acc == nil then acc = implied or 'cpu'
  elseif acc == 'auto' then acc = ngpus_visible > 0 and 'cuda' or 'cpu'
  elseif acc == 'gpu' then acc = 'cuda' end
  if acc == 'cuda' and ngpus_visible == 0 then
    misconf("`CUDAAccelerator` can not run on your system since the accelerator is not available (%s)."
      .. " The following accelerator(s) is available and can be passed into `accelerator` argument of `Trainer`: ['cpu']",
      ffi_reason())
  end
  if acc == 'tpu' then
    -- parse first so a bad value names itself, then: no TPU here
    if a.tpu_cores ~= nil then D.parse_tpu_cores(a.tpu_cores) end
    misconf('No TPU devices were found.')
  end
  out.accelerator = acc

  -- 5. devices
  local gpu_ids, parallel_devices
  if acc == 'cuda' then
    local req = devices
    if req == nil or req == 'auto' then req = -1 end
    if a.auto_select_gpus and type(req) == 'number' then
      req = D.pick_multiple_gpus(req)
    end
    gpu_ids = D.parse_gpu_ids(req)
    if gpu_ids == nil then
      misconf('`Trainer(devices=%s)` value is not a valid input using cuda accelerator.', repr(devices))
    end
    parallel_devices = {}
    for i, id in ipairs(gpu_ids) do parallel_devices[i] = D.device('cuda', id) end
  else
    local n = devices
    if n == nil or n == 'auto' then n = 1 end
    if type(n) == 'string' and n:match('^%s*%d+%s*$') then n = tonumber(n) end
    if type(n) ~= 'number' or n <= 0 or n ~= math.floor(n) then
      misconf('`devices` selected with `CPUAccelerator` should be an int > 0, got %s.', repr(devices))
    end
    parallel_devices = {}
    local cpu = D.device('cpu')
    for i = 1, n do parallel_devices[i] = cpu end
  end
  local ndev = #parallel_devices
  local num_nodes = a.num_nodes

  -- 6. strategy choice
  if strategy == nil then
    if under_horovodrun() then strategy = 'horovod'
    elseif num_nodes > 1 then strategy = 'ddp'
    elseif ndev <= 1 then strategy = 'single_device'
    else
      if acc == 'cuda' then
        log.info('You requested multiple GPUs but did not specify a strategy: using strategy=ddp_spawn')
      end
      strategy = 'ddp_spawn'
    end
  end

  -- 7. fallbacks and checks
  if (strategy == 'ddp_spawn' or strategy == 'ddp_fork' or strategy == 'ddp_notebook') and strategy_env_launched() then
    strategy = 'ddp' -- the cluster / launcher already created the processes
  end
  if strategy == 'dp' and acc == 'cpu' then
    log.warn('dp is not supported on CPU. Using ddp instead.')
    strategy = 'ddp'
  end
  if strategy == 'dp' and num_nodes > 1 then
    misconf('DataParallel does not support num_nodes > 1 (num_nodes=%d). Use strategy="ddp" or "ddp2".', num_nodes)
  end
  if strategy == 'single_device' and (ndev > 1 or num_nodes > 1) then
    misconf('strategy="single_device" runs on one device, but %d devices on %d node(s) were requested', ndev, num_nodes)
  end
  if strategy == 'horovod' then
    if num_nodes > 1 or (acc == 'cuda' and ndev > 1) then
      misconf('Horovod does not support setting num_nodes / num_gpus explicitly. Use horovodrun / mpirun to'
        .. ' configure the number of processes.')
    end
    if acc == 'cuda' then
      -- as Lightning 1.9: the node's processes take cuda:0 .. cuda:local_size-1, each the one
      -- of its local rank (strategies/horovod.lua), whatever devices= said
      local local_size = tonumber(os.getenv('OMPI_COMM_WORLD_LOCAL_SIZE') or os.getenv('HOROVOD_LOCAL_SIZE') or '') or 1
      parallel_devices = {}
      for i = 1, math.max(1, local_size) do parallel_devices[i] = D.device('cuda', i - 1) end
    end
  end
  if strategy == 'ddp2' and acc ~= 'cuda' then
    misconf('strategy="ddp2" runs DP over the GPUs of each node: it needs GPUs (gpus= or accelerator="gpu"),'
      .. ' got accelerator=%s', repr(acc))
  end
  if (strategy == 'tpu_spawn' or strategy == 'single_tpu') then
    misconf('No TPU devices were found.')
  end
  if a.num_processes ~= nil and a.num_processes ~= 1 and acc == 'cuda' then
    log.warn('num_processes is only used for CPU processes (strategy="ddp" with accelerator="cpu"). Ignoring it.')
  end

  -- 8. build
  if strategy_obj then
    if strategy_obj.parallel_devices == nil then strategy_obj.parallel_devices = parallel_devices end
    if strategy_obj.root_device == nil then strategy_obj.root_device = parallel_devices[1] end
    strategy_obj.num_nodes = num_nodes
    if strategy_obj.set_world_ranks then strategy_obj:set_world_ranks() end
  elseif strategy == 'single_device' then
    strategy_obj = strategies.get('single_device', { device = parallel_devices[1] })
  else
    strategy_obj = strategies.get(strategy, { parallel_devices = parallel_devices, num_nodes = num_nodes })
  end
  -- the processes a launcher started against devices x num_nodes (ddp: when devices were
  -- given; ddp2: one process per node)
  if type(strategy_obj.validate_settings) == 'function' then
    local given = devices ~= nil and devices ~= 'auto' and devices ~= -1 and devices ~= '-1'
    strategy_obj:validate_settings(ndev, num_nodes, given)
  end
  out.strategy = strategy_obj
  out.strategy_name = strategy_obj.strategy_name
  out.parallel_devices = parallel_devices
  out.num_devices = ndev
  out.gpu_ids = gpu_ids

  -- 9. precision
  local prec = M.parse_precision(a.precision)
  if prec == 16 and acc == 'cpu' then
    -- as Lightning (2.x's wording): float16 autocast needs a GPU
    misconf("You passed `Trainer(accelerator='cpu', precision=%s)` but AMP with fp16 is not supported on CPU."
      .. " Consider using `precision='bf16-mixed'` instead.", repr(a.precision))
  end
  out.precision = prec
  if a.amp_level ~= nil and a.amp_backend ~= 'apex' then
    misconf('You have asked for `amp_level=%s` but it\'s only supported with `amp_backend="apex"`.', repr(a.amp_level))
  end
  if a.amp_backend == 'apex' then
    misconf('You have asked for Apex AMP (amp_backend="apex") but dplhost has no apex backend: use precision="bf16" or 16 with amp_backend="native"')
  end
  return out
end

return M
