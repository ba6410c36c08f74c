-- devices_device_spec.lua: device objects (dpl.device), lazy loading through
-- require 'dpl', and the CLI device table with simulated GPUs.
local dpl = require 'dpl'
local errors = require 'dpl.errors'
local h = require 'spec.support.helpers'
local run = require 'spec.support.devices_run'

local function raises(cls, text, f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, 'expected an error containing: ' .. text)
  assert.is_true(errors.is(e, cls), 'wrong error class: ' .. tostring(e))
  assert.truthy(tostring(e):find(text, 1, true), 'expected "' .. text .. '" in: ' .. tostring(e))
end

describe('dpl.device', function()
  it('makes the CPU device: type, index, tostring, equality', function()
    local cpu = dpl.device('cpu')
    assert.are.equal('cpu', cpu.type)
    assert.are.equal(0, cpu.index)
    assert.are.equal('cpu', tostring(cpu))
    assert.is_false(cpu.is_cuda)
    assert.are.equal(0, cpu.type_id)
    assert.is_true(cpu == dpl.device('cpu:0'))
    assert.is_true(cpu == dpl.device('cpu', 0))
    assert.is_true(rawequal(cpu, dpl.device('cpu'))) -- interned
    assert.are.equal(cpu, dpl.device(cpu))
    assert.are.equal('on cpu', 'on ' .. cpu)
    assert.is_true(dpl.devices.is_device(cpu))
    assert.is_false(dpl.devices.is_device({ type = 'cpu', index = 0 }))
    assert.are.equal('cpu', require('dpl.pretty').format(cpu)) -- the REPL prints devices by name
  end)

  it('is immutable', function()
    local cpu = dpl.device('cpu')
    raises(errors.TypeError, "device objects are immutable (tried to set 'index')", function() cpu.index = 1 end)
    raises(errors.TypeError, 'immutable', function() cpu.foo = 1 end)
    assert.are.equal(0, cpu.index)
  end)

  it('rejects malformed strings and arguments with clear errors', function()
    raises(errors.ValueError, "invalid device index 'x' in 'cuda:x' (expected a non-negative integer, as in 'cuda:0')",
           dpl.device, 'cuda:x')
    raises(errors.ValueError, "invalid device string 'gpu:-1' (expected 'cpu', 'cuda' or 'cuda:<index>'); did you mean 'cuda'?",
           dpl.device, 'gpu:-1')
    raises(errors.ValueError, "did you mean 'cuda'?", dpl.device, 'gpu')
    raises(errors.ValueError, "did you mean 'cuda'?", dpl.device, 'CUDA:0')
    raises(errors.ValueError, "invalid device index '-1' in 'cuda:-1'", dpl.device, 'cuda:-1')
    raises(errors.ValueError, "invalid device index '' in 'cuda:'", dpl.device, 'cuda:')
    raises(errors.ValueError, "invalid device index '1:2'", dpl.device, 'cuda:1:2')
    raises(errors.ValueError, "invalid device string ''", dpl.device, '')
    raises(errors.ValueError, "invalid device string 'mps'", dpl.device, 'mps')
    raises(errors.ValueError, "invalid device string ' cpu'", dpl.device, ' cpu')
    raises(errors.ValueError, 'the device index must be a non-negative integer, got the number -1', dpl.device, 'cuda', -1)
    raises(errors.ValueError, 'got the number 1.5', dpl.device, 'cuda', 1.5)
    raises(errors.ValueError, "the index is given twice: 'cuda:1' and 1", dpl.device, 'cuda:1', 1)
    raises(errors.ValueError, 'given with a different index', dpl.device, dpl.device('cpu'), 1)
    raises(errors.TypeError, "expected a device string such as 'cpu', 'cuda' or 'cuda:1', got the number 0", dpl.device, 0)
    raises(errors.TypeError, 'got nil', dpl.device)
  end)

  it('raises for a TPU (dplhost has none) and for CPU indices other than 0', function()
    raises(errors.RuntimeError, "no TPU devices were found ('tpu')", dpl.device, 'tpu')
    raises(errors.RuntimeError, "no TPU devices were found ('tpu:0')", dpl.device, 'tpu:0')
    raises(errors.RuntimeError, "no TPU devices were found ('xla')", dpl.device, 'xla')
    raises(errors.RuntimeError, "cpu:1 does not exist: the CPU is the single device 'cpu'", dpl.device, 'cpu:1')
    raises(errors.RuntimeError, 'cpu:2 does not exist', dpl.device, 'cpu', 2)
  end)

  it('makes CUDA devices for simulated GPUs, with equality across spellings', function()
    run.check(2, {
      { "dpl.device('cuda:1')", 'ok device(cuda:1)' },
      { "dpl.device('cuda', 1) == dpl.device('cuda:1')", 'ok true' },
      { "rawequal(dpl.device('cuda', 1), dpl.device('cuda:1'))", 'ok true' },
      { "dpl.device('cuda') == dpl.device('cuda:0')", 'ok true' },
      { "dpl.device('cuda:0') == dpl.device('cuda:1')", 'ok false' },
      { "dpl.device('cuda:0') ~= dpl.device('cpu')", 'ok true' },
      { "{dpl.device('cuda:1').type, dpl.device('cuda:1').index, dpl.device('cuda:1').is_cuda, dpl.device('cuda:1').type_id}",
        'ok {"cuda", 1, true, 1}' },
      { "tostring(dpl.device('cuda', 0))", 'ok "cuda:0"' },
      { "dpl.device('cuda:2')", 'err RuntimeError: dpl.device: cuda:2 does not exist: this process sees 2 GPUs (cuda:0..cuda:1)' },
      { "dpl.device('cuda', 7)", 'err cuda:7 does not exist' },
    })
    run.check(1, { { "dpl.device('cuda:1')", 'err cuda:1 does not exist: this process sees 1 GPU (cuda:0..cuda:0)' } })
    run.check(16, { { "dpl.device('cuda:15')", 'ok device(cuda:15)' }, { "dpl.device('cuda:16')", 'err cuda:16 does not exist' } })
  end)

  it('says why there is no GPU when there is none', function()
    run.check(nil, {
      { "dpl.device('cuda')", 'err RuntimeError: dpl.device: cuda:0 is not available: this process sees no GPU (' },
      { "dpl.device('cuda:1')", 'err cuda:1 is not available' },
      { "dpl.device('cpu')", 'ok device(cpu)' },
    })
  end)

  it("is reachable from require 'dpl' without loading dpl.devices up front", function()
    local out, err, rc = h.dplhost([[-e "local dpl = require 'dpl'; local before = package.loaded['dpl.devices'] ~= nil; ]] ..
      [[local d = dpl.device('cpu'); print(before, tostring(d), package.loaded['dpl.devices'] == dpl.devices, ]] ..
      [[type(dpl.move_data_to_device), type(dpl.devices.parse_gpu_ids))"]])
    assert.are.equal(0, rc, err)
    assert.are.equal('false\tcpu\ttrue\tfunction\tfunction\n', out)
  end)
end)

describe('dplhost --devices with simulated GPUs', function()
  it('lists DPL_VIRTUAL_GPUS=4 as cuda:0..cuda:3, marked simulated', function()
    local out, _, rc = h.sh('DPL_VIRTUAL_GPUS=4 DPL_VIRTUAL_GPUS_BUSY= ' .. h.q(h.bin) .. ' --devices')
    assert.are.equal(0, rc)
    for i = 0, 3 do assert.matches('\ncuda:' .. i .. ' +simulated GPU ' .. i .. ' .-simulated\n', out) end
    assert.is_nil(out:find('cuda:4', 1, true))
    assert.is_nil(out:find('busy', 1, true))
  end)

  it('agrees with dpl.devices in the same environment', function()
    run.check(4, { { 'D.get_all_available_gpus()', 'ok {0, 1, 2, 3}' }, { 'D.pick_single_gpu()', 'ok 2' } },
              { busy = '0,1' })
  end)
end)

describe('the current GPU (simulated GPUs)', function()
  it("'cuda' without an index is the current GPU: set_device, t:cuda(), constructors, the Trainer's root device", function()
    local out, err, rc = h.run_chunk([[
      local dpl = require 'dpl'
      local r = {}
      local function add(...) local t = {} for i = 1, select('#', ...) do t[i] = tostring((select(i, ...))) end r[#r + 1] = table.concat(t, ' ') end
      add(dpl.cuda.current_device(), dpl.device('cuda'))
      dpl.cuda.set_device(1)
      add(dpl.cuda.current_device(), dpl.device('cuda'), dpl.zeros(2, { device = 'cuda' }).device, dpl.ones(2):cuda().device,
        dpl.ones(2):to('cuda').device, dpl.ones(2):cuda(0).device)
      add(pcall(dpl.cuda.set_device, 5))
      add(pcall(dpl.cuda.set_device, 'x'))
      dpl.cuda.set_device('cuda:0')
      -- a Trainer on cuda:1 makes it current: 'cuda' inside training_step is the model's GPU
      local M = dpl.LightningModule:extend('M')
      function M:__init() dpl.LightningModule.__init(self); self.l = dpl.nn.Linear(2, 1) end
      function M:training_step(b)
        self.seen = tostring(dpl.zeros(1, { device = 'cuda' }).device)
        return (self.l(b[1]) + dpl.zeros(1, { device = 'cuda' })):sum()
      end
      function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
      local ds = dpl.data.TensorDataset(dpl.randn(4, 2))
      local t = dpl.Trainer{ accelerator = 'gpu', devices = { 1 }, max_epochs = 1, logger = false, enable_checkpointing = false,
        enable_progress_bar = false, enable_model_summary = false }
      local m = M()
      t:fit(m, dpl.data.DataLoader(ds, { batch_size = 2 }))
      add(m.seen, dpl.cuda.current_device())
      print(table.concat(r, '\n'))
    ]], 'DPL_VIRTUAL_GPUS=2 CUDA_VISIBLE_DEVICES=')
    assert.are.equal(0, rc, err)
    local lines = {}
    for l in out:gmatch('[^\n]+') do if not l:match('^INFO') then lines[#lines + 1] = l end end
    assert.are.equal('0 cuda:0', lines[1])
    assert.are.equal('1 cuda:1 cuda:1 cuda:1 cuda:1 cuda:0', lines[2])
    assert.matches('^false .*cuda.set_device: cuda:5 does not exist: this process sees 2 GPUs', lines[3])
    assert.matches("^false .*cuda.set_device: expected a GPU index, 'cuda:<k>' or a cuda dpl.device, got x", lines[4])
    assert.are.equal('cuda:1 1', lines[5])
  end)

  it('an optimizer state saved on the CPU loads onto the GPU of its parameters; masked_select refuses mixed devices', function()
    local out, err, rc = h.run_chunk([[
      local dpl = require 'dpl'
      local w = dpl.ones(3):requires_grad_()
      local opt = dpl.optim.Adam({ w }, { lr = 0.1 })
      w.grad = dpl.ones(3); opt:step()
      local sd = opt:state_dict()
      local wg = dpl.ones(3):to('cuda:1'):requires_grad_()
      local og = dpl.optim.Adam({ wg }, { lr = 0.1 })
      og:load_state_dict(sd)
      local st = og.state[wg]
      wg.grad = dpl.ones(3):to('cuda:1')
      og:step()
      print(tostring(st.exp_avg.device), tostring(st.exp_avg_sq.device), tostring(wg.device))
      local x = dpl.ones(3):to('cuda:0')
      print(select(2, pcall(x.masked_select, x, x:gt(0):to('cuda:1'))))
      print(select(2, pcall(x.masked_select, x, dpl.ones(3):gt(0))))
    ]], 'DPL_VIRTUAL_GPUS=2 CUDA_VISIBLE_DEVICES=')
    assert.are.equal(0, rc, err)
    local l1, l2, l3 = out:match('^([^\n]*)\n([^\n]*)\n([^\n]*)')
    assert.are.equal('cuda:1\tcuda:1\tcuda:1', l1)
    assert.truthy(l2:find('masked_select: expected all tensors on the same device, got cuda:0 and cuda:1', 1, true), l2)
    assert.truthy(l3:find('masked_select: expected all tensors on the same device, got cuda:0 and cpu', 1, true), l3)
  end)

  it('backward refuses a gradient on another device (it used to leave a CPU .grad on a GPU leaf)', function()
    local out, err, rc = h.run_chunk([[
      local dpl = require 'dpl'
      local w = dpl.ones(3):to('cuda:0'):requires_grad_()
      print(select(2, pcall(function() (w * 2):backward(dpl.ones(3)) end)), tostring(w.grad))
      ;(w * 2):backward(dpl.ones(3, { dtype = 'float64' }):to('cuda:0')) -- another dtype: converted, as PyTorch
      print(tostring(w.grad.device), w.grad.dtype)
    ]], 'DPL_VIRTUAL_GPUS=1 CUDA_VISIBLE_DEVICES=')
    assert.are.equal(0, rc, err)
    local l1, l2 = out:match('^([^\n]*)\n([^\n]*)')
    assert.truthy(l1:find('backward: invalid gradient - expected device cuda:0 but got cpu\tnil', 1, true), l1)
    assert.are.equal('cuda:0\tfloat32', l2)
  end)
end)
