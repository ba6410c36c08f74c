-- Trainer arguments, seed fields, from_argv and strategy selection
-- (lightning-strategies.md §f), including simulated GPUs in subprocesses.
local dpl = require 'dpl'
local h = require 'spec.support.helpers'

local function err_of(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok)
  return tostring(e)
end

local base = { enable_progress_bar = false, enable_model_summary = false, logger = false, enable_checkpointing = false }
local function T(o)
  local a = {}
  for k, v in pairs(base) do a[k] = v end
  for k, v in pairs(o or {}) do a[k] = v end
  return dpl.Trainer(a)
end

describe('Trainer arguments', function()
  it('has Lightning defaults and the seed fields', function()
    local t = T()
    assert.equal('single_device', t.strategy.strategy_name)
    assert.equal('cpu', tostring(t.strategy.root_device))
    assert.equal(1000, t.max_epochs)
    assert.equal(-1, t.max_steps)
    assert.equal(2, t.num_sanity_val_steps)
    assert.equal(50, t.log_every_n_steps)
    assert.equal(1, t.accumulate_grad_batches)
    assert.equal(32, t.precision)
    assert.is_false(t.use_amp)
    assert.equal(0, t.global_rank)
    assert.is_nil(t.root_gpu)
    assert.is_nil(t.data_parallel_device_ids)
    assert.is_false(t.on_gpu)
    assert.is_false(t.single_gpu)
    assert.is_false(t.use_dp); assert.is_false(t.use_ddp); assert.is_false(t.use_ddp2)
    assert.is_false(t.use_horovod); assert.is_false(t.use_tpu)
    assert.is_nil(t.tpu_id)
    assert.equal(0, t.num_gpus)
    assert.is_false(t.testing)
    assert.is_nil(t.logger)
    assert.is_nil(t.progress_bar_callback)
  end)

  it('rejects unknown arguments, naming them', function()
    local e = err_of(dpl.Trainer, { max_epoch = 3, gpu = 1 })
    assert.matches('^MisconfigurationException: Trainer got unknown arguments: gpu, max_epoch', e)
  end)

  it('rejects bad and contradictory values', function()
    assert.matches('max_epochs', err_of(T, { max_epochs = 'x' }))
    assert.matches('min_epochs=5 and max_epochs=3', err_of(T, { min_epochs = 5, max_epochs = 3 }))
    assert.matches('invalid value 1.5 for limit_train_batches', err_of(T, { limit_train_batches = 1.5 }))
    assert.matches('fast_dev_run=%-1', err_of(T, { fast_dev_run = -1 }))
    assert.matches('accumulate_grad_batches` should be an int or a dict', err_of(T, { accumulate_grad_batches = 'x' }))
    assert.matches('gradient_clip_algorithm` \'foo\' is invalid', err_of(T, { gradient_clip_algorithm = 'foo' }))
    assert.matches('Precision 8 is invalid', err_of(T, { precision = 8 }))
    assert.matches('enable_checkpointing=false', err_of(dpl.Trainer, { enable_checkpointing = false,
      callbacks = { dpl.callbacks.ModelCheckpoint() } }))
    assert.matches("distributed_backend is an alias", err_of(T, { strategy = 'ddp', distributed_backend = 'dp' }))
    assert.matches("ddp_cpu", err_of(T, { strategy = 'ddp_cpu' }))
    assert.matches('invalid strategy name', err_of(T, { strategy = 'nope' }))
    assert.matches('invalid accelerator name', err_of(T, { accelerator = 'abc' }))
    assert.matches('devices=0', err_of(T, { devices = 0 }))
    assert.matches('No TPU devices were found', err_of(T, { tpu_cores = 8 }))
    assert.matches('tpu_cores can only be 1, 8', err_of(T, { tpu_cores = 2 }))
    assert.matches('No TPU devices were found', err_of(T, { strategy = 'tpu_spawn' }))
  end)

  it('plugins are refused (not implemented) instead of ignored; weights_save_path must be a path', function()
    assert.truthy(err_of(T, { plugins = { 'ddp_find_unused_parameters_false' } })
      :find("NotImplementedError: Trainer(plugins={'ddp_find_unused_parameters_false'}): plugins", 1, true))
    assert.truthy(err_of(T, { plugins = 'x' }):find('NotImplementedError', 1, true))
    T({ plugins = {} }) -- an empty list: nothing asked for
    assert.truthy(err_of(T, { weights_save_path = 3 }):find('`weights_save_path` must be a path (string), got 3', 1, true))
  end)

  it('weights_save_path: ModelCheckpoint saves there instead of the logger dir / default_root_dir', function()
    local th = require 'spec.support.trainer_helpers'
    local root, w = th.tmpdir(), th.tmpdir()
    local M = dpl.LightningModule:extend('W')
    function M:__init() dpl.LightningModule.__init(self) self.net = dpl.nn.Linear(2, 2) end
    function M:training_step(b) return self.net(b[1]):sum() end
    function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
    local loader = dpl.data.DataLoader(dpl.data.TensorDataset(dpl.randn(8, 2)), { batch_size = 4 })
    local t = T({ max_epochs = 1, default_root_dir = root, weights_save_path = w, enable_checkpointing = true })
    t:fit(M(), loader)
    assert.are.equal(w .. '/checkpoints/epoch=0-step=2.ckpt', t.checkpoint_callback.best_model_path)
    t = T({ max_epochs = 1, default_root_dir = root, weights_save_path = w, enable_checkpointing = true,
      logger = dpl.loggers.CSVLogger(root) })
    t:fit(M(), loader)
    assert.are.equal(w .. '/lightning_logs/version_0/checkpoints/epoch=0-step=2.ckpt', t.checkpoint_callback.best_model_path)
    assert.truthy(io.open(root .. '/lightning_logs/version_0/metrics.csv') or io.open(root .. '/lightning_logs/version_0/hparams.yaml'))
  end)

  it('limits: an integer is batches, a fraction is a share', function()
    local args = require 'dpl.trainer.args'
    assert.same({ kind = 'count', value = 1 }, args.parse_limit('x', 1))
    assert.same({ kind = 'all', value = 1 }, args.parse_limit('x', '1.0'))
    assert.same({ kind = 'fraction', value = 0.25 }, args.parse_limit('x', 0.25))
    assert.same({ kind = 'count', value = 2 }, args.parse_limit('x', '2.0'))
  end)

  it('fast_dev_run sets limits, steps and epochs', function()
    local t = T({ fast_dev_run = true })
    assert.equal(1, t.max_steps)
    assert.equal(1, t.max_epochs)
    assert.equal(0, t.num_sanity_val_steps)
    assert.same({ kind = 'count', value = 1 }, t._args._limits.val)
  end)

  it('selects CPU strategies like the connector', function()
    assert.equal('ddp_spawn', T({ accelerator = 'cpu', devices = 2 }).strategy.strategy_name)
    assert.equal('ddp_spawn', T({ num_processes = 3 }).strategy.strategy_name)
    assert.equal('ddp', T({ num_nodes = 2 }).strategy.strategy_name)
    assert.equal('ddp', T({ strategy = 'DDP' }).strategy.strategy_name)
    local t = T({ strategy = 'ddp', accelerator = 'cpu', devices = 2, num_nodes = 2 })
    assert.equal(4, t.strategy.world_size)
    assert.is_true(t.use_ddp)
    assert.equal('ddp', T({ strategy = 'dp' }).strategy.strategy_name) -- dp on CPU -> ddp
    assert.equal(32, T({ precision = '32-true' }).precision)
    assert.equal("MisconfigurationException: You passed `Trainer(accelerator='cpu', precision=16)` but AMP with fp16"
      .. " is not supported on CPU. Consider using `precision='bf16-mixed'` instead.",
      err_of(T, { precision = 16 })) -- as Lightning: fp16 AMP needs a GPU
    assert.matches("precision='16%-mixed'%)` but AMP with fp16", err_of(T, { precision = '16-mixed' }))
    assert.is_true(T({ precision = 'bf16-mixed' }).use_amp)
    assert.equal('bf16', T({ precision = 'bf16' }).precision)
  end)

  it('from_argv: --gpus 3 is a number, --gpus 0,1 a string; the rest is returned', function()
    local Trainer = dpl.Trainer
    local p, rest = Trainer.parse_argv({ '--gpus', '3', '--max_epochs=4', '--foo', 'bar', '--limit-val-batches', '0.5',
      '--fast_dev_run', '--enable_progress_bar', 'false' })
    assert.same({ gpus = 3, max_epochs = 4, limit_val_batches = '0.5', fast_dev_run = true, enable_progress_bar = false }, p)
    assert.same({ '--foo', 'bar' }, rest)
    assert.same({ gpus = '0,1' }, (Trainer.parse_argv({ '--gpus', '0,1' })))
    assert.same({ gpus = '3,' }, (Trainer.parse_argv({ '--gpus', '3,' })))
    local t = Trainer.from_argv({ '--max_epochs', '2', '--accelerator', 'cpu', '--devices', '2' }, base)
    assert.equal(2, t.max_epochs)
    assert.equal('ddp_spawn', t.strategy.strategy_name)
  end)

  it('from_argv: a bare --deterministic is true; --max_time takes "DD:HH:MM:SS" (Lightning\'s str) or seconds', function()
    local Trainer = dpl.Trainer
    assert.same({ deterministic = true, max_epochs = 2 }, (Trainer.parse_argv({ '--deterministic', '--max_epochs', '2' })))
    assert.same({ deterministic = true }, (Trainer.parse_argv({ '--deterministic' })))
    assert.same({ deterministic = 'warn' }, (Trainer.parse_argv({ '--deterministic', 'warn' })))
    assert.same({ deterministic = false }, (Trainer.parse_argv({ '--deterministic=false' })))
    assert.same({ max_time = '00:00:01:00' }, (Trainer.parse_argv({ '--max_time', '00:00:01:00' })))
    assert.same({ max_time = 90 }, (Trainer.parse_argv({ '--max-time=90' })))
    local t = Trainer.from_argv({ '--max_time', '00:00:01:00' }, base)
    local timer
    for _, cb in ipairs(t.callbacks) do if getmetatable(cb) == dpl.callbacks.Timer then timer = cb end end
    assert.equal(60, timer._duration)
  end)

  it('max_time: Lightning\'s "DD:HH:MM:SS" and timedelta-like tables, or seconds; a Timer with that duration', function()
    local function duration(mt)
      for _, cb in ipairs(T({ max_time = mt }).callbacks) do
        if getmetatable(cb) == dpl.callbacks.Timer then return cb._duration end
      end
    end
    assert.equal(60, duration('00:00:01:00'))
    assert.equal(93784, duration('01:02:03:04'))
    assert.equal(60, duration({ minutes = 1 }))
    assert.equal(90061, duration({ days = 1, hours = 1, minutes = 1, seconds = 1 }))
    assert.equal(604800 + 1.5, duration({ weeks = 1, milliseconds = 1500 }))
    assert.equal(30, duration(30))
    -- max_time given: max_epochs is not defaulted to 1000 (-1, as Lightning)
    assert.equal(-1, T({ max_time = { minutes = 1 } }).max_epochs)
    -- errors name the argument and show the table's keys
    assert.matches("^MisconfigurationException: `max_time` as a table takes the keys weeks, days, hours, minutes,"
      .. " seconds, milliseconds, microseconds %(as timedelta%); got the key 'minute' in {minute=1}",
      err_of(T, { max_time = { minute = 1 } }))
    assert.matches('`max_time` as a string must be "DD:HH:MM:SS"', err_of(T, { max_time = '01:00' }))
    assert.matches('`max_time` as a string must be "DD:HH:MM:SS"', err_of(T, { max_time = '00:00:xx:00' }))
    assert.matches("`max_time` must be a duration >= 0 .*got %-5", err_of(T, { max_time = -5 }))
    assert.matches("`max_time` must be .*got true", err_of(T, { max_time = true }))
  end)
end)

describe('Trainer strategy selection with simulated GPUs', function()
  -- each case: Trainer arguments (Lua source) -> the fields printed by the script
  local script = [[
local dpl = require 'dpl'
local ok, t = pcall(dpl.Trainer, %s)
if not ok then print('err ' .. tostring(t)) return end
local ids = t.data_parallel_device_ids
print(('ok %%s root=%%s ids=%%s gpus=%%d on_gpu=%%s single=%%s dp=%%s ddp=%%s ddp2=%%s hvd=%%s world=%%d dev=%%s'):format(
  t.strategy.strategy_name, tostring(t.root_gpu), ids and table.concat(ids, ',') or 'nil', t.num_gpus,
  tostring(t.on_gpu), tostring(t.single_gpu), tostring(t.use_dp), tostring(t.use_ddp), tostring(t.use_ddp2),
  tostring(t.use_horovod), t.world_size, tostring(t.strategy.root_device)))
]]
  local function run(ngpus, args, env)
    local path = h.write_file(h.tmpname('.lua'), script:format(
      '{enable_progress_bar=false, enable_model_summary=false, logger=false, enable_checkpointing=false, ' .. args .. '}'))
    local out, err = h.sh(('%s DPL_VIRTUAL_GPUS=%d CUDA_VISIBLE_DEVICES= %s %s'):format(env or '', ngpus, h.q(h.bin), h.q(path)))
    os.remove(path)
    local last = out:match('([^\n]+)\n?$') or ''
    return last .. (out == '' and err or '')
  end

  it('gpus / devices / strategy combinations', function()
    assert.matches('^ok single_device root=0 ids=0 gpus=1 on_gpu=true single=true .* dev=cuda:0', run(2, 'gpus=1'))
    assert.matches('^ok single_device root=1 ids=1 .* dev=cuda:1', run(2, "gpus='1'"))
    assert.matches('^ok ddp_spawn root=0 ids=0,1 gpus=2 .* ddp=true .* world=2', run(2, 'gpus=2'))
    assert.matches('^ok dp root=0 ids=0,1 gpus=2 on_gpu=true single=false dp=true', run(2, "gpus=2, strategy='dp'"))
    assert.matches('^ok dp root=1 ids=1 gpus=1 on_gpu=true single=true dp=true', run(2, "gpus={1}, distributed_backend='dp'"))
    assert.matches('^ok ddp2 .* ddp2=true', run(2, "gpus=2, strategy='ddp2'"))
    assert.matches('^ok ddp_spawn root=0 ids=0,1,2', run(3, "accelerator='gpu', devices=-1"))
    assert.matches('^ok single_device .* dev=cuda:0', run(1, "accelerator='auto'"))
    assert.matches('^ok ddp root=0 ids=0,1 .* world=4', run(2, "gpus=2, num_nodes=2"))
    assert.matches('^ok ddp ', run(2, 'gpus=2', 'LOCAL_RANK=0'))
    assert.matches('^ok single_device .*dev=cpu', run(2, "accelerator='cpu', gpus=1"))
    assert.matches('^ok single_device root=0 ids=0 gpus=1 .* dev=cuda:0', run(2, "gpus='0'"))
    assert.matches('^ok single_device root=nil ids=nil gpus=0 on_gpu=false', run(2, 'gpus=0'))
    assert.matches('^err MisconfigurationException: GPUs requested but none are available', run(2, 'gpus={}'))
    assert.matches('^ok ddp_spawn root=0 ids=0,1', run(2, 'gpus=-1'))
  end)

  it('raises clear errors for invalid mixes', function()
    assert.matches('^err MisconfigurationException: .*CUDAAccelerator` can not run', run(0, 'gpus=1'))
    assert.matches('^err MisconfigurationException: You requested GPUs: {3}', run(2, "gpus='3'"))
    assert.matches('^err MisconfigurationException: DataParallel does not support num_nodes > 1',
                   run(2, "gpus=2, strategy='dp', num_nodes=2"))
    assert.matches('^err MisconfigurationException: Horovod does not support setting num_nodes',
                   run(2, "gpus=2, strategy='horovod'"))
    assert.matches('^err MisconfigurationException: strategy="ddp2" .* needs GPUs', run(0, "strategy='ddp2'"))
    assert.matches('^ok horovod', run(0, '', 'OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1'))
  end)

  it('checks the processes a launcher started: devices x num_nodes (ddp, devices given), one per node (ddp2)', function()
    local two = 'RANK=0 LOCAL_RANK=0 NODE_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2'
    -- ddp2 under `dplhost --nproc 2` on one node: both processes would be node 0, rank 0
    assert.matches("^err MisconfigurationException: strategy='ddp2' runs one process per node %(DP over the node's GPUs"
      .. " inside it%), but the launcher started 2 processes %(2 on this node%) for num_nodes=1: on one node, run one"
      .. " process", run(2, "gpus=2, strategy='ddp2'", two))
    -- as many processes as num_nodes: nodes (simulated on one machine, or one process per node)
    assert.matches('^ok ddp2 .* world=2', run(2, "gpus=2, strategy='ddp2', num_nodes=2", two))
    assert.matches('^ok ddp2 .* world=2', run(2, "gpus=2, strategy='ddp2', num_nodes=2",
      'RANK=1 LOCAL_RANK=0 NODE_RANK=1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=1'))
    assert.matches("^err MisconfigurationException: strategy='ddp2' .* started 4 processes %(2 on this node%) for"
      .. " num_nodes=2: start one process per node %(`dplhost %-%-nproc 1 %-%-nnodes 2 %-%-node%-rank <k> script.lua`",
      run(2, "gpus=2, strategy='ddp2', num_nodes=2", 'RANK=0 LOCAL_RANK=0 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2'))
    -- ddp: devices given must match the launch; not given, the launcher decides
    assert.matches("^err MisconfigurationException: strategy='ddp': devices=3 and num_nodes=1 ask for 3 process%(es%),"
      .. " 3 on each node, but the launcher started 2 %(2 on this node%): set devices=2, or start 3 process%(es%) per"
      .. " node %(dplhost %-%-nproc 3%)", run(0, "strategy='ddp', accelerator='cpu', devices=3", two))
    assert.matches("^err MisconfigurationException: strategy='ddp': devices=2 and num_nodes=2 ask for 4",
      run(0, "strategy='ddp', accelerator='cpu', devices=2, num_nodes=2", two))
    assert.matches("^err MisconfigurationException: strategy='ddp': devices=3 ",
      run(3, "strategy='ddp', accelerator='gpu', devices=3", two))
    assert.matches('^ok ddp .* world=2', run(0, "strategy='ddp', accelerator='cpu', devices=2", two))
    assert.matches('^ok ddp .* world=2', run(0, "strategy='ddp'", two))
    assert.matches('^ok ddp .* world=2', run(2, "strategy='ddp', accelerator='gpu'", two))
    assert.matches('^ok ddp .* world=4', run(0, "strategy='ddp', accelerator='cpu', devices=2, num_nodes=2",
      'RANK=0 LOCAL_RANK=0 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2'))
    -- ddp_spawn becomes ddp under a launcher, checked the same way; horovod is not checked
    assert.matches("^err MisconfigurationException: strategy='ddp': devices=3 ", run(0, "accelerator='cpu', devices=3", two))
    assert.matches('^ok horovod', run(0, "accelerator='cpu', devices=3", 'OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2'))
  end)

  it('auto_select_gpus picks free GPUs', function()
    assert.matches('^ok ddp_spawn root=1 ids=1,3', run(4, 'gpus=2, auto_select_gpus=true', 'DPL_VIRTUAL_GPUS_BUSY=0,2'))
  end)
end)

describe('Trainer batch transfer (seed)', function()
  it('transfer_batch_to_gpu through the model hooks; transfer_batch_to_tpu raises', function()
    local script = h.write_file(h.tmpname('.lua'), [[
local dpl = require 'dpl'
local t = dpl.Trainer{ gpus = '1', logger = false, enable_checkpointing = false, enable_progress_bar = false }
local Obj = {}
Obj.__index = Obj
function Obj:to(d) return setmetatable({ dev = tostring(d) }, Obj) end
local b = t:transfer_batch_to_gpu({ x = setmetatable({}, Obj) })
local b0 = t:transfer_batch_to_gpu({ x = setmetatable({}, Obj) }, 0)
local M = dpl.LightningModule:extend('M')
local seen = {}
function M:on_before_batch_transfer(batch, i) seen[#seen + 1] = 'before'; return batch end
function M:on_after_batch_transfer(batch, i) seen[#seen + 1] = 'after'; return batch end
t.lightning_module = M()
local b2 = t:transfer_batch_to_gpu({ x = setmetatable({}, Obj) })
local ok, e = pcall(t.transfer_batch_to_tpu, t, {})
print(b.x.dev, b0.x.dev, b2.x.dev, table.concat(seen, ','), tostring(e))
]])
    local out = h.sh(('DPL_VIRTUAL_GPUS=2 CUDA_VISIBLE_DEVICES= %s %s'):format(h.q(h.bin), h.q(script)))
    os.remove(script)
    assert.equal('cuda:1\tcuda:0\tcuda:1\tbefore,after\tMisconfigurationException: Requested to transfer batch to TPU but no TPU is available',
                 out:match('([^\n]+)\n$'))
  end)
end)

describe('loop configuration checks', function()
  local th = require 'spec.support.trainer_helpers'
  local function err(f) local ok, e = pcall(f); assert.is_false(ok); return tostring(e) end
  it('names what is missing, as Lightning does', function()
    local M = dpl.LightningModule:extend('Bare')
    assert.matches('No `training_step%(%)` method defined', err(function() T():fit(M(), th.loader(2)) end))
    local M2 = dpl.LightningModule:extend('NoOpt')
    function M2:training_step() return th.loss(1) end
    assert.matches('No `configure_optimizers%(%)` method defined', err(function() T():fit(M2(), th.loader(2)) end))
    -- no loader and no hook to make one: Lightning 1.9's ValueError, before the other checks
    assert.matches('An invalid dataloader was passed to `Trainer.fit%(train_dataloaders=...%)`. Either pass the'
      .. ' dataloader to the `.fit%(%)` method OR implement `def train_dataloader%(self%):`', err(function() T():fit(M2()) end))
    assert.matches('No `test_step%(%)` method defined to run `Trainer.test`', err(function() T():test(M2(), th.loader(2)) end))
    assert.matches('No `validation_step%(%)` method defined to run `Trainer.validate`', err(function() T():validate(M2(), th.loader(2)) end))
    assert.matches('An invalid dataloader was passed to `Trainer.predict%(dataloaders=...%)`.*`def predict_dataloader%(self%):`',
      err(function() T():predict(M2()) end))
    assert.matches('An invalid dataloader was passed to `Trainer.validate%(dataloaders=...%)`.*`def val_dataloader%(self%):`',
      err(function() T():validate(M2()) end))
    assert.matches('An invalid dataloader was passed to `Trainer.test%(dataloaders=...%)`.*`def test_dataloader%(self%):`',
      err(function() T():test(M2()) end))
    local M3 = M2:extend('Manual')
    function M3:__init() M2.__init(self); self.automatic_optimization = false end
    function M3:configure_optimizers() return th.Optimizer() end
    assert.matches('Automatic gradient accumulation is not supported for manual optimization',
      err(function() T({ accumulate_grad_batches = 2 }):fit(M3(), th.loader(2)) end))
  end)
end)

describe('Lightning 1.9\'s deprecated and device arguments', function()
  local th = require 'spec.support.trainer_helpers'
  it('resume_from_checkpoint is the next fit\'s ckpt_path (once), with Lightning\'s deprecation warning', function()
    local dir = th.tmpdir()
    local M = dpl.LightningModule:extend('ResumeArg')
    function M:__init() dpl.LightningModule.__init(self) dpl.manual_seed(0) self.l = dpl.nn.Linear(1, 1) end
    function M:training_step(b) return self.l(b[1]:float():reshape(-1, 1)):pow(2):mean() end
    function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), 0.01) end
    local function L() return dpl.data.DataLoader(dpl.data.TensorDataset(dpl.arange(10)), { batch_size = 2 }) end
    local t = dpl.Trainer { default_root_dir = dir .. '/a', max_epochs = 1, logger = false, enable_progress_bar = false,
      enable_model_summary = false }
    t:fit(M(), L())
    local ck = t.checkpoint_callback.best_model_path
    local log = require 'dpl.log'
    local said, w = {}, log.warn
    log.warn = function(f, ...) said[#said + 1] = f:format(...) end
    local ok, t2 = pcall(dpl.Trainer, { default_root_dir = dir .. '/b', max_epochs = 2, logger = false,
      enable_progress_bar = false, enable_model_summary = false, resume_from_checkpoint = ck })
    log.warn = w
    assert(ok, t2)
    assert.are.equal('Setting `Trainer(resume_from_checkpoint=)` is deprecated in v1.5 and will be removed in v2.0.'
      .. ' Please pass `Trainer.fit(ckpt_path=)` directly instead.', said[1])
    assert.are.equal(ck, t2.resume_from_checkpoint)
    t2:fit(M(), L())
    assert.are.equal(10, t2.global_step) -- 5 steps restored, 5 trained
    assert.is_nil(t2.resume_from_checkpoint)
    -- an explicit ckpt_path wins; a missing file is Lightning's error
    local t3 = T { resume_from_checkpoint = dir .. '/none.ckpt', max_epochs = 1 }
    assert.matches('Checkpoint at .*none.ckpt not found. Aborting training.', err_of(t3.fit, t3, M(), L()))
    assert.matches('`resume_from_checkpoint` must be a checkpoint path %(string%), got 3',
      err_of(dpl.Trainer, { resume_from_checkpoint = 3 }))
    assert.are.equal('x.ckpt', dpl.Trainer.parse_argv({ '--resume_from_checkpoint', 'x.ckpt' }).resume_from_checkpoint)
  end)

  it('ipus asks for an IPU accelerator, which is not here (Lightning\'s error)', function()
    assert.matches("`accelerator='ipu'` can not run on your system since the accelerator is not available",
      err_of(dpl.Trainer, { ipus = 1 }))
    assert.matches('`ipus` must be a non%-negative integer', err_of(dpl.Trainer, { ipus = 1.5 }))
    assert.equal('single_device', T({ ipus = 0 }).strategy.strategy_name)
  end)
end)
