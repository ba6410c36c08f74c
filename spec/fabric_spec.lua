-- fabric_spec.lua: dpl.Fabric (Lightning 1.9's Fabric): construction and strategy choice,
-- setup and its wrappers, the loop (backward, optimizer step, clipping, no_backward_sync,
-- autocast), checkpoints, callbacks, loggers, collectives, bad input; on 2 ranks (dplhost
-- --nproc 2, ddp_spawn, horovod under mpirun) the DDP equivalence and the collectives; a real
-- run on Fashion-MNIST (examples/fashion_mnist_fabric.lua). Reference values from Lightning
-- 1.9.5's lightning_fabric (build/plref, torch 1.13 CPU) are literals with a comment.
local h = require 'spec.support.helpers'
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local errors = require 'dpl.errors'

local function raises(cls, text, f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, 'expected an error containing: ' .. text)
  if cls then assert.is_true(errors.is(e, cls), ('expected a %s, got %s'):format(cls.__name, tostring(e))) end
  assert.truthy(tostring(e):find(text, 1, true), ('expected %q in %q'):format(text, tostring(e)))
end

local function net()
  dpl.manual_seed(0)
  return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
end

local function data(n)
  dpl.manual_seed(1)
  return dpl.data.TensorDataset(dpl.randn({ n or 32, 4 }), dpl.randint(1, 4, { n or 32 }))
end

local function flat(model)
  local out = {}
  for _, p in ipairs(model:parameters()) do
    for _, v in ipairs(p:reshape(-1):tolist()) do out[#out + 1] = v end
  end
  return out
end

describe('dpl.Fabric: construction', function()
  it('defaults to one CPU device, rank 0 of 1', function()
    local f = dpl.Fabric()
    -- lightning_fabric: Fabric(accelerator="cpu", devices=1) -> SingleDeviceStrategy, world 1, rank 0, cpu
    assert.equal('single_device', f.strategy.strategy_name)
    assert.equal(0, f.global_rank); assert.equal(0, f.local_rank); assert.equal(0, f.node_rank)
    assert.equal(1, f.world_size); assert.is_true(f.is_global_zero)
    assert.equal('cpu', f.device.type)
    assert.equal(32, f.precision)
  end)

  it("picks 'ddp' for several devices (Lightning's Fabric; the Trainer 1.9 picks ddp_spawn)", function()
    -- lightning_fabric: Fabric(accelerator="cpu", devices=2).strategy -> DDPStrategy
    assert.equal('ddp', dpl.Fabric{ accelerator = 'cpu', devices = 2 }.strategy.strategy_name)
    assert.equal('ddp_spawn', dpl.Fabric{ strategy = 'ddp_spawn', devices = 2 }.strategy.strategy_name)
    assert.equal('bf16', dpl.Fabric{ precision = 'bf16-mixed' }.precision)
  end)

  it('rejects bad arguments, naming them', function()
    raises(errors.ValueError, 'devise', dpl.Fabric, { devise = 2 })
    raises(errors.ValueError, '`num_nodes` must be a positive integer, but got 0.', dpl.Fabric, { num_nodes = 0 })
    raises(errors.NotImplementedError, 'plugins=', dpl.Fabric, { plugins = {} })
    raises(errors.MisconfigurationException, 'Precision 17 is invalid', dpl.Fabric, { precision = 17 })
    raises(errors.MisconfigurationException, 'AMP with fp16 is not supported on CPU', dpl.Fabric, { precision = 16 })
    raises(errors.MisconfigurationException, 'invalid strategy name', dpl.Fabric, { strategy = 'nope' })
    local dp = dpl.strategies.get('dp', { parallel_devices = { dpl.device('cpu') } })
    raises(errors.NotImplementedError, "strategy 'dp' is not supported", dpl.Fabric, { strategy = dp })
    raises(errors.TypeError, 'loggers[1] must be a logger', dpl.Fabric, { loggers = { 42 } })
    raises(errors.TypeError, 'callbacks[1] must be an object', dpl.Fabric, { callbacks = { 'x' } })
    raises(errors.TypeError, 'expected an options table', dpl.Fabric, 3)
  end)
end)

describe('dpl.Fabric: setup', function()
  it('wraps the module and optimizers; the wrapper runs and reads through to the module', function()
    local f = dpl.Fabric()
    local m = net()
    local o1 = dpl.optim.SGD(m:parameters(), { lr = 0.1 })
    local o2 = dpl.optim.Adam(m:parameters(), { lr = 0.1 })
    local fm, fo1, fo2 = f:setup(m, o1, o2)
    assert.truthy(tostring(fm):find('^FabricModule%('))
    assert.equal(m, fm.module)
    assert.equal(o1, fo1.optimizer); assert.equal(o2, fo2.optimizer)
    assert.equal(4, #fm:parameters())
    assert.equal(0.1, fo1.param_groups[1].lr)
    local x = dpl.randn({ 2, 4 })
    assert.same(m(x):tolist(), fm(x):tolist())
    assert.same(m:state_dict_keys(), fm:state_dict_keys())
    fm:eval(); assert.is_false(m.training); fm:train(); assert.is_true(m.training)
    -- setup_module / setup_optimizers
    local g = f:setup_module(net())
    local go = f:setup_optimizers(dpl.optim.SGD(g:parameters(), { lr = 1 }))
    assert.truthy(tostring(go):find('^FabricOptimizer'))
  end)

  it("raises Lightning's errors for things set up twice or not at all", function()
    local f = dpl.Fabric()
    local m = net()
    local o = dpl.optim.SGD(m:parameters(), { lr = 0.1 })
    local fm, fo = f:setup(m, o)
    -- lightning_fabric 1.9.5 (ValueError each):
    raises(errors.ValueError, 'A model should be passed only once to the `setup` method.', f.setup, f, fm)
    raises(errors.ValueError, 'An optimizer should be passed only once to the `setup` method.', f.setup, f, net(), fo)
    raises(errors.ValueError, 'A model should be passed only once to the `setup_module` method.', f.setup_module, f, fm)
    raises(errors.ValueError, '`setup_optimizers` requires at least one optimizer as input.', f.setup_optimizers, f)
    raises(errors.ValueError, 'An optimizer should be passed only once to the `setup_optimizers` method.',
      f.setup_optimizers, f, fo)
    raises(errors.ValueError, '`setup_dataloaders` requires at least one dataloader as input.', f.setup_dataloaders, f)
    local l = f:setup_dataloaders(dpl.data.DataLoader(data(), { batch_size = 4 }))
    raises(errors.ValueError, 'A dataloader should be passed only once to the `setup_dataloaders` method.',
      f.setup_dataloaders, f, l)
    -- lightning_fabric: TypeError "You need to set up the model first before you can call `self.no_backward_sync()`: ..."
    raises(errors.TypeError, 'You need to set up the model first before you can call `fabric:no_backward_sync()`',
      f.no_backward_sync, f, m, function() end)
    raises(errors.TypeError, 'module must be a dpl.nn.Module', f.setup, f, { 1, 2 })
    raises(errors.TypeError, 'optimizer 1 must be a dpl.optim optimizer', f.setup, f, net(), 'sgd')
    raises(errors.TypeError, 'Only dpl.data DataLoaders are currently supported', f.setup_dataloaders, f, 5)
    raises(errors.ValueError, 'move_to_devic', f.setup, f, net(), { move_to_devic = false })
  end)

  it('backward needs a tensor and a model set up', function()
    local f = dpl.Fabric()
    local loss = (dpl.ones({ 2 }, { requires_grad = true }) * 2):sum()
    raises(errors.RuntimeError, 'No models were set up for backward. Did you forget to call `fabric:setup()`?',
      f.backward, f, loss)
    f:setup(net())
    raises(errors.TypeError, 'fabric:backward(loss): loss must be a tensor, got 3', f.backward, f, 3)
  end)

  it('precision 64: float64 parameters and inputs, float32 outputs (as Lightning); the optimizer follows', function()
    local f = dpl.Fabric{ precision = 64 }
    local m = net()
    local o = dpl.optim.SGD(m:parameters(), { lr = 0.1 })
    local fm, fo = f:setup(m, o)
    local out = fm(dpl.randn({ 2, 4 }))
    -- lightning_fabric, Fabric(precision=64): parameters torch.float64, module output torch.float32
    assert.equal('float64', m:parameters()[1].dtype)
    assert.equal('float32', out.dtype)
    -- the optimizer holds the new float64 parameters
    assert.equal(m:parameters()[1], o.param_groups[1].params[1])
    local before = m:parameters()[1]:clone()
    fo:zero_grad(); f:backward(out:sum()); fo:step()
    assert.is_true((m:parameters()[1] - before):abs():max():item() > 0)
  end)

  it('16-mixed on a simulated GPU: model moved, optimizer following, gradients unscaled for clipping', function()
    local out, err, rc = h.sh(('DPL_VIRTUAL_GPUS=1 CUDA_VISIBLE_DEVICES= %s spec/support/fabric_amp16_script.lua')
      :format(h.q(h.bin)), { timeout = 60 })
    assert.equal(0, rc, err)
    assert.truthy(out:find('device\tcuda:0\tout\tfloat32\topt param is model param\ttrue', 1, true), out)
    local norm = tonumber(out:match('norm\t([%d.e+-]+)'))
    assert.truthy(norm and norm < 100, out) -- (scaled by 65536 it would be ~1e5)
    assert.truthy(out:find('scale\t65536\tmoved\ttrue', 1, true), out)
  end)

  it("bf16-mixed: the forward runs under autocast, outputs come back as float32 (as Lightning)", function()
    local f = dpl.Fabric{ precision = 'bf16-mixed' }
    local seen
    local M = nn.Module:extend('Probe')
    function M:__init() nn.Module.__init(self); self.l = nn.Linear(4, 2) end
    function M:forward(x) seen = dpl.amp.dtype; local y = self.l(x); return y, y.dtype end
    local fm = f:setup(M())
    local out, inner = fm(dpl.randn({ 3, 4 }))
    -- lightning_fabric, Fabric(precision="bf16"): module output torch.float32
    assert.equal('bfloat16', seen); assert.equal('bfloat16', inner); assert.equal('float32', out.dtype)
    assert.equal(nil, dpl.amp.dtype)
    assert.equal('bfloat16', f:autocast(function() return dpl.amp.dtype end))
    assert.equal(nil, dpl.Fabric():autocast(function() return dpl.amp.dtype end))
    raises(errors.TypeError, 'fn must be a function', f.autocast, f, 1)
  end)
end)

describe('dpl.Fabric: the loop', function()
  it('gives the weights of the same hand-written loop, bitwise (one process)', function()
    local ds = data(32)
    -- plain
    local m1 = net()
    local o1 = dpl.optim.SGD(m1:parameters(), { lr = 0.1, momentum = 0.9 })
    for b in dpl.data.DataLoader(ds, { batch_size = 8 }):iter() do
      o1:zero_grad(); F.cross_entropy(m1(b[1]), b[2]):backward(); o1:step()
    end
    -- Fabric
    local f = dpl.Fabric()
    local m2, o2 = f:setup(net(), dpl.optim.SGD(net():parameters(), { lr = 0.1, momentum = 0.9 }))
    o2 = f:setup_optimizers(dpl.optim.SGD(m2:parameters(), { lr = 0.1, momentum = 0.9 }))
    local loader = f:setup_dataloaders(dpl.data.DataLoader(ds, { batch_size = 8 }))
    assert.equal(4, #loader)
    for b in loader:iter() do
      o2:zero_grad(); f:backward(F.cross_entropy(m2(b[1]), b[2])); o2:step()
    end
    assert.same(flat(m1), flat(m2))
  end)

  it('setup_dataloaders leaves a one-process loader as it is', function()
    local f = dpl.Fabric()
    local ds = dpl.data.TensorDataset(dpl.arange(0, 10))
    local l = f:setup_dataloaders(dpl.data.DataLoader(ds, { batch_size = 4 }))
    -- lightning_fabric: len 3, SequentialSampler, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert.equal(3, #l)
    assert.equal('SequentialSampler', l.sampler.__name)
    local got = {}
    for b in l:iter() do got[#got + 1] = b[1]:tolist() end
    assert.same({ { 0, 1, 2, 3 }, { 4, 5, 6, 7 }, { 8, 9 } }, got)
    local a, b = f:setup_dataloaders(dpl.data.DataLoader(ds), dpl.data.DataLoader(ds, { batch_size = 5 }),
      { move_to_device = false })
    assert.equal(10, #a); assert.equal(2, #b)
  end)

  it('clip_gradients: by norm (returns it) or by value; one of the two', function()
    local f = dpl.Fabric()
    local m, o = f:setup(net(), dpl.optim.SGD(net():parameters(), { lr = 0.1 }))
    o = f:setup_optimizers(dpl.optim.SGD(m:parameters(), { lr = 0.1 }))
    local function grads()
      o:zero_grad()
      f:backward(m(dpl.ones({ 2, 4 }) * 10):pow(2):sum())
    end
    grads()
    local norm = f:clip_gradients(m, o, { max_norm = 0.5 })
    assert.is_true(norm > 0.5)
    local total = 0
    for _, p in ipairs(m:parameters()) do total = total + p.grad:pow(2):sum():item() end
    assert.is_true(math.abs(math.sqrt(total) - 0.5) < 1e-4)
    grads()
    assert.is_nil(f:clip_gradients(m, o, { clip_val = 0.01 }))
    for _, p in ipairs(m:parameters()) do assert.is_true(p.grad:abs():max():item() <= 0.01 + 1e-7) end
    -- Lightning 2.0's messages
    raises(errors.ValueError, 'Only one of `clip_val` or `max_norm` can be set', f.clip_gradients, f, m, o,
      { max_norm = 1, clip_val = 1 })
    raises(errors.ValueError, 'You have to specify either `clip_val` or `max_norm` to do gradient clipping!',
      f.clip_gradients, f, m, o, {})
    raises(errors.ValueError, 'max_norm must be a number >= 0', f.clip_gradients, f, m, o, { max_norm = 'x' })
    m:parameters()[1].grad:fill_(0 / 0)
    raises(errors.RuntimeError, 'is non-finite, so it cannot be clipped', f.clip_gradients, f, m, o, { max_norm = 1 })
  end)

  it('no_backward_sync runs the function (one process: nothing to skip) in either argument order', function()
    local f = dpl.Fabric()
    local m = f:setup(net())
    assert.equal(7, f:no_backward_sync(m, function() return 7 end))
    local a, b = f:no_backward_sync(m, false, function() return 1, 2 end)
    assert.equal(1, a); assert.equal(2, b)
    raises(errors.TypeError, 'fn must be a function', f.no_backward_sync, f, m, true)
    raises(errors.TypeError, 'enabled must be a boolean', f.no_backward_sync, f, m, function() end, 'yes')
  end)

  it('to_device, print, seed_everything', function()
    local f = dpl.Fabric()
    local t = dpl.ones({ 2 })
    local moved = f:to_device({ x = t })
    assert.equal('cpu', moved.x.device.type)
    local m = net()
    assert.equal(m, f:to_device(m))
    assert.equal(42, f:seed_everything(42))
    assert.equal('42', os.getenv('PL_GLOBAL_SEED'))
    assert.equal('1', os.getenv('PL_SEED_WORKERS')) -- Fabric's default workers=True
  end)

  it('one-process collectives are identities (numbers become tensors); bad arguments are named', function()
    local f = dpl.Fabric()
    local t = dpl.tensor({ 1, 2 })
    -- lightning_fabric, one device: all_gather(tensor([1., 2.])) -> tensor([1., 2.]); broadcast({'a': 1}) -> {'a': 1}
    assert.equal(t, f:all_gather(t))
    assert.equal(3, f:all_gather(3):item())
    assert.same({ a = 1 }, f:broadcast({ a = 1 }))
    assert.equal(t, f:all_reduce(t, { reduce_op = 'sum' }))
    f:barrier()
    raises(errors.ValueError, "reduce_op must be one of 'mean', 'sum', 'max', 'min', got 'median'", f.all_reduce, f, t,
      { reduce_op = 'median' })
    raises(errors.ValueError, 'src must be a rank in [0, 0], got 1', f.broadcast, f, 1, 1)
    raises(errors.TypeError, 'expected a tensor, a number or a table of them', f.all_gather, f, 'x')
  end)
end)

describe('dpl.Fabric: launch', function()
  it('runs fn(fabric, ...) and returns its results; fn must take the fabric', function()
    local f = dpl.Fabric()
    local a, b = f:launch(function(fab, x) return fab == f, x end, 5)
    assert.is_true(a); assert.equal(5, b)
    raises(errors.RuntimeError, 'fabric:launch() was already called', f.launch, f)
    -- lightning_fabric 1.9.5's TypeError
    raises(errors.TypeError, 'The function passed to `Fabric.launch()` needs to take at least one argument.',
      dpl.Fabric().launch, dpl.Fabric(), function() end)
    raises(errors.TypeError, 'fn must be a function or nil', dpl.Fabric().launch, dpl.Fabric(), 3)
    local g = dpl.Fabric{ strategy = 'ddp_spawn', devices = 2 }
    raises(errors.ValueError, 'forks workers that run a function', g.launch, g)
  end)
end)

describe('dpl.Fabric: checkpoints, callbacks, loggers', function()
  it('save writes state_dicts and values; load restores them in place and returns the rest', function()
    local f = dpl.Fabric()
    local m, o = f:setup(net(), dpl.optim.SGD(net():parameters(), { lr = 0.1, momentum = 0.9 }))
    o = f:setup_optimizers(dpl.optim.SGD(m:parameters(), { lr = 0.1, momentum = 0.9 }))
    o:zero_grad(); f:backward(m(dpl.ones({ 2, 4 })):sum()); o:step()
    local path = h.tmpname('.ckpt')
    f:save(path, { model = m, optimizer = o, step = 12, extra = 'x' })
    local raw = f:load(path)
    assert.equal(12, raw.step)
    assert.truthy(raw.model['1.weight'])
    assert.truthy(raw.optimizer.param_groups)
    local m2 = f:setup(net())
    m2:parameters()[1]:detach():fill_(0)
    local o2 = f:setup_optimizers(dpl.optim.SGD(m2:parameters(), { lr = 0.5, momentum = 0.9 }))
    local state = { model = m2, optimizer = o2, step = 0 }
    local rest = f:load(path, state)
    assert.same(flat(m), flat(m2))
    assert.equal(12, state.step)
    assert.equal(0.1, o2.param_groups[1].lr)
    assert.same({ extra = 'x' }, rest)
    -- 1.9's argument order (state, path) works too
    f:save({ step = 1 }, path)
    assert.equal(1, f:load(path).step)
    raises(errors.ValueError, "The requested state contains a key 'nope' that does not exist in the loaded checkpoint",
      f.load, f, path, { nope = 1 })
    assert.same({ step = 1 }, f:load(path, { nope = 1 }, { strict = false }))
    raises(errors.ValueError, 'no checkpoint at', f.load, f, path .. '.missing')
    raises(errors.TypeError, 'path must be a non-empty string', f.save, f, 3, {})
    os.remove(path)
  end)

  it('call runs the hook on the callbacks that have it', function()
    local got = {}
    local cb1 = { on_epoch = function(self, a, b) got[#got + 1] = { self.name, a, b } end, name = 'one' }
    local cb2 = { name = 'two' }
    local cb3 = { on_epoch = 5 }
    local f = dpl.Fabric{ callbacks = { cb1, cb2, cb3 } }
    f:call('on_epoch', 1, 2)
    assert.same({ { 'one', 1, 2 } }, got)
    assert.equal(cb1, dpl.Fabric{ callbacks = cb1 }.callbacks[1]) -- one callback, not a list
    raises(errors.TypeError, 'hook_name must be a string', f.call, f, 3)
  end)

  it('log / log_dict go to the loggers (CSVLogger), tensors as numbers', function()
    local dir = h.tmpname('-logs')
    local lg = dpl.loggers.CSVLogger(dir)
    local f = dpl.Fabric{ loggers = lg }
    assert.equal(lg, f.logger)
    f:log('loss', dpl.tensor(0.25), 0)
    f:log_dict({ acc = 0.5, loss = 0.125 }, 1)
    lg:finalize('success')
    local csv = h.read_all(lg.log_dir .. '/metrics.csv')
    assert.truthy(csv:find('0.25', 1, true), csv)
    assert.truthy(csv:find('0.125', 1, true), csv)
    raises(errors.ValueError, 'the value of loss must be a number or a one-element tensor', f.log, f, 'loss',
      dpl.ones({ 2 }))
    raises(errors.TypeError, 'metrics must be a table', f.log_dict, f, 3)
    raises(errors.ValueError, 'step must be an integer >= 0', f.log, f, 'x', 1, -1)
    os.execute('rm -rf ' .. h.q(dir))
  end)
end)

---------------------------------------------------------------- several ranks

local weights = h.weights_of

local close = h.assert_weights_close

describe('dpl.Fabric on 2 ranks: the weights of 1 rank with batch 2b', function()
  local script = 'spec/support/fabric_equiv_script.lua'
  local refs = {}
  local function ref(variant)
    if not refs[variant] then
      local out, err, rc = h.dplhost(script .. ' single 4 5 ' .. variant, { timeout = 60 })
      assert.equal(0, rc, err)
      refs[variant] = weights(out)
    end
    return refs[variant]
  end

  for _, variant in ipairs({ 'plain', 'accum', 'bn' }) do
    it('ddp under dplhost --nproc 2 (' .. variant .. ')', function()
      local out, err, rc = h.dplhost('--nproc 2 ' .. script .. ' ddp 4 5 ' .. variant, { timeout = 60 })
      assert.equal(0, rc, err)
      close(ref(variant), weights(out))
      -- one all-reduce per optimizer step: accumulation's first half skipped it
      assert.truthy(out:find('rank 1 of 2 steps 5 syncs 5', 1, true), out)
    end)
  end

  it('ddp_spawn (2 forked workers; the parent gets rank 0 result)', function()
    local out, err, rc = h.dplhost(script .. ' ddp_spawn 4 5 accum', { timeout = 60 })
    assert.equal(0, rc, err)
    close(ref('accum'), weights(out))
    assert.truthy(out:find('parent got weights', 1, true), out)
  end)

  it('horovod under mpirun -np 2', function()
    if not h.has_command('mpirun') then pending('mpirun is not installed') return end
    local out, err, rc = h.sh(('ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -np 2 %s %s horovod 4 5 plain')
      :format(h.q(h.bin), script), { timeout = 90 })
    assert.equal(0, rc, err)
    close(ref('plain'), weights(out))
  end)
end)

describe('dpl.Fabric on 2 ranks: collectives, samplers, checkpoints', function()
  local script = 'spec/support/fabric_dist_script.lua'
  local names = { 'ranks', 'all_gather', 'all_gather_table', 'all_reduce', 'broadcast', 'setup_broadcast', 'sampler',
    'set_epoch', 'no_sampler', 'save_load', 'log_rank0' }
  local function all_ok(out, prefix)
    for r = 0, 1 do
      for _, n in ipairs(names) do
        assert.truthy(out:find(('%srank %d check %s ok'):format(prefix and prefix(r) or '', r, n), 1, true),
          ('rank %d check %s:\n%s'):format(r, n, out))
      end
    end
    assert.falsy(out:find('FAILED', 1, true), out)
  end

  it('under dplhost --nproc 2', function()
    local dir = h.tmpname('-d')
    os.execute('mkdir -p ' .. h.q(dir))
    local out, err, rc = h.dplhost('--nproc 2 ' .. script .. ' ddp ' .. h.q(dir), { timeout = 60 })
    assert.equal(0, rc, err)
    all_ok(out, function(r) return ('[rank %d] '):format(r) end)
    os.execute('rm -rf ' .. h.q(dir))
  end)

  it('in ddp_spawn workers', function()
    local dir = h.tmpname('-d')
    os.execute('mkdir -p ' .. h.q(dir))
    local out, err, rc = h.dplhost(script .. ' spawn ' .. h.q(dir), { timeout = 60 })
    assert.equal(0, rc, err)
    all_ok(out)
    assert.truthy(out:find('parent got done', 1, true), out)
    os.execute('rm -rf ' .. h.q(dir))
  end)

  it("strategy='ddp' with devices=2 and no launcher: launch() runs the script again for rank 1", function()
    local out, err, rc = h.run_chunk([[
      local dpl = require 'dpl'
      local f = dpl.Fabric{ strategy = 'ddp', devices = 2, accelerator = 'cpu' }
      f:launch()
      print('rank', f.global_rank, 'of', f.world_size, 'sum', f:all_reduce(f.global_rank + 1, { reduce_op = 'sum' }):item())
    ]], nil, { timeout = 60 })
    assert.equal(0, rc, err)
    assert.truthy(out:find('rank\t0\tof\t2\tsum\t3', 1, true), out)
    assert.truthy(out:find('rank\t1\tof\t2\tsum\t3', 1, true), out)
  end)

  it('setup before fabric:launch() is refused on several ranks', function()
    local out, err, rc = h.dplhost('--nproc 2 ' .. script .. ' nolaunch /tmp', { timeout = 60 })
    assert.equal(0, rc, err)
    assert.truthy(out:find('nolaunch false RuntimeError: To use Fabric with more than one device, you must call'
      .. ' `fabric:launch()` before `fabric:setup()`', 1, true), out)
  end)
end)

describe('dpl.Fabric: Fashion-MNIST (examples/fashion_mnist_fabric.lua)', function()
  local have = pcall(dpl.datasets.FashionMNIST, { train = false })
  local ex = 'examples/fashion_mnist_fabric.lua'
  local function accuracy(out)
    local a = tonumber(out:match('test accuracy ([%d.]+)%%'))
    assert.truthy(a, out)
    return a
  end

  it('an MLP reaches > 75% test accuracy in 300 batches (one process)', function()
    if not have then pending('Fashion-MNIST is not installed') return end
    local out, err, rc = h.dplhost(ex .. ' --max_steps 300', { timeout = 120 })
    assert.equal(0, rc, err)
    assert.is_true(accuracy(out) > 75, out)
  end)

  it('and on 2 ranks (dplhost --nproc 2, 300 batches per rank)', function()
    if not have then pending('Fashion-MNIST is not installed') return end
    local out, err, rc = h.dplhost('--nproc 2 ' .. ex .. ' --strategy ddp --max_steps 300', { timeout = 120 })
    assert.equal(0, rc, err)
    assert.truthy(out:find('2 ranks', 1, true), out)
    assert.is_true(accuracy(out) > 75, out)
  end)

  it('runs briefly with a CSV logger and a checkpoint (ddp_spawn, bf16-mixed)', function()
    if not have then pending('Fashion-MNIST is not installed') return end
    local dir = h.tmpname('-fm')
    local out, err, rc = h.dplhost(('%s --strategy ddp_spawn --devices 2 --precision bf16-mixed --max_steps 50'
      .. ' --logdir %s --ckpt %s/last.ckpt'):format(ex, h.q(dir), h.q(dir)), { timeout = 120 })
    assert.equal(0, rc, err)
    assert.truthy(out:find('test accuracy', 1, true), out)
    local csv = h.read_all(dir .. '/lightning_logs/version_0/metrics.csv')
    assert.truthy(csv:find('train_loss', 1, true) and csv:find('test_acc', 1, true), csv)
    local ck = dpl.load(dir .. '/last.ckpt')
    assert.equal(50, ck.step)
    assert.truthy(ck.model['2.weight'])
    -- a bad flag: one line on stderr, exit status 2
    local _, err2, rc2 = h.dplhost(ex .. ' --bogus 1', { timeout = 30 })
    assert.equal(2, rc2)
    assert.truthy(err2:find("bad flag '--bogus'", 1, true), err2)
    os.execute('rm -rf ' .. h.q(dir))
  end)
end)
