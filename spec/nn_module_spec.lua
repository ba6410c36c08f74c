-- nn_module_spec.lua: nn.Module: registration by assignment, traversal, modes, grads,
-- state dicts (and their errors), to(), tostring, and a custom model class.
local dpl = require 'dpl'
local nn = dpl.nn

local Net = nn.Module:extend('Net')
function Net:__init(hidden)
  nn.Module.__init(self)
  self.fc1 = nn.Linear(4, hidden)
  self.act = nn.ReLU()
  self.fc2 = nn.Linear(hidden, 3)
  self.scale = nn.Parameter(dpl.ones(1))
  self.not_a_param = dpl.zeros(2) -- a plain tensor attribute
  self:register_buffer('steps', dpl.zeros({}, { dtype = 'int64' }))
end
function Net:forward(x) return self.fc2(self.act(self.fc1(x))) * self.scale end

describe('nn.Module', function()
  it('registers parameters and submodules by assignment, in order', function()
    local m = Net(5)
    local names = {}
    for name, p in m:named_parameters() do names[#names + 1] = name .. ':' .. table.concat(p:size(), 'x') end
    assert.are.same({ 'scale:1', 'fc1.weight:5x4', 'fc1.bias:5', 'fc2.weight:3x5', 'fc2.bias:3' }, names)
    assert.are.equal(5, #m:parameters())
    assert.are.equal(3, #m:children())
    assert.are.equal(4, #m:modules())
    assert.are.equal(1 + 25 + 18, m:num_parameters())
    local kids = {}
    for k in m:named_children() do kids[#kids + 1] = k end
    assert.are.same({ 'fc1', 'act', 'fc2' }, kids)
    local mods = {}
    for k, mod in m:named_modules() do mods[#mods + 1] = k .. '=' .. mod.__name end
    assert.are.same({ '=Net', 'fc1=Linear', 'act=ReLU', 'fc2=Linear' }, mods)
  end)

  it('__call runs forward; gradients reach every parameter; zero_grad clears them', function()
    local m = Net(5)
    local y = m(dpl.randn(2, 4))
    assert.are.same({ 2, 3 }, y:size())
    y:sum():backward()
    for name, p in m:named_parameters() do assert.is_not_nil(p.grad, name) end
    m:zero_grad({ set_to_none = false })
    assert.are.equal(0, m.fc1.weight.grad:abs():sum():item())
    m:zero_grad()
    assert.is_nil(m.fc1.weight.grad)
  end)

  it('train() and eval() set the mode recursively', function()
    local m = Net(5)
    assert.is_true(m.training and m.fc1.training)
    m:eval()
    assert.is_false(m.training or m.fc1.training or m.act.training)
    m:train()
    assert.is_true(m.fc2.training)
  end)

  it('state_dict holds parameters and buffers; load_state_dict copies them', function()
    local a, b = Net(5), Net(5)
    local sd = a:state_dict()
    local keys = {}
    for k in pairs(sd) do keys[#keys + 1] = k end
    table.sort(keys)
    assert.are.same({ 'fc1.bias', 'fc1.weight', 'fc2.bias', 'fc2.weight', 'scale', 'steps' }, keys)
    b:load_state_dict(sd)
    assert.are.same(a.fc1.weight:totable(), b.fc1.weight:totable())
    assert.is_true(b.fc1.weight.requires_grad)
    assert.is_true(b.fc1.weight.is_leaf)
  end)

  it('load_state_dict lists missing and unexpected keys and shape mismatches', function()
    local a, b = Net(5), Net(6)
    local ok, e = pcall(b.load_state_dict, b, a:state_dict())
    assert.is_false(ok)
    assert.truthy(tostring(e):find('Size mismatch'))
    assert.truthy(tostring(e):find('fc1.weight: checkpoint shape %[5, 4%], model shape %[6, 4%]'))
    local sd = a:state_dict()
    sd['fc1.bias'] = nil
    sd['extra.weight'] = dpl.zeros(1)
    local c = Net(5)
    ok, e = pcall(c.load_state_dict, c, sd)
    assert.is_false(ok)
    assert.truthy(tostring(e):find('Missing key%(s%): fc1.bias'))
    assert.truthy(tostring(e):find('Unexpected key%(s%): extra.weight'))
    local r = c:load_state_dict(sd, { strict = false })
    assert.are.same({ 'fc1.bias' }, r.missing_keys)
    assert.are.same({ 'extra.weight' }, r.unexpected_keys)
  end)

  it('to(dtype) converts floating parameters and buffers, keeping them trainable leaves', function()
    local m = Net(3):to('float64')
    assert.are.equal('float64', m.fc1.weight.dtype)
    assert.is_true(m.fc1.weight.requires_grad and m.fc1.weight.is_leaf)
    assert.are.equal('int64', m.steps.dtype)
    local y = m(dpl.randn(2, 4):double())
    assert.are.equal('float64', y.dtype)
    assert.are.equal(m, m:to('cpu'))
  end)

  it('tostring shows the tree with parameter counts', function()
    local s = tostring(nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)))
    assert.truthy(s:find('Sequential%('))
    assert.truthy(s:find('%(1%): Linear%(in_features=784, out_features=256, bias=true%)  %-%- 200,960 params'))
    assert.truthy(s:find('%(2%): ReLU%(%)'))
    assert.truthy(s:find('%)  %-%- 203,530 params'))
  end)

  it('containers: Sequential, ModuleList, ModuleDict', function()
    local seq = nn.Sequential(nn.Linear(2, 3), nn.Tanh())
    assert.are.equal(2, #seq)
    assert.are.equal('Linear', seq[1].__name)
    seq:append(nn.Linear(3, 1))
    assert.are.same({ 5, 1 }, seq(dpl.randn(5, 2)):size())
    local ml = nn.ModuleList({ nn.Linear(1, 1), nn.Linear(1, 1) })
    assert.are.equal(4, #ml:parameters())
    local n = 0
    for i, m in ml:ipairs() do n = n + i end
    assert.are.equal(3, n)
    local md = nn.ModuleDict({ enc = nn.Linear(2, 2), dec = nn.Identity() })
    assert.are.same({ 'dec', 'enc' }, md:keys())
    assert.are.equal(2, #md:parameters())
    local sd = nn.Sequential(nn.Linear(2, 2)):state_dict()
    assert.is_not_nil(sd['1.weight'])
  end)

  it('a shape mismatch names the layer and both shapes', function()
    local m = nn.Sequential(nn.Linear(784, 10))
    local ok, e = pcall(m, dpl.randn(3, 100))
    assert.is_false(ok)
    assert.truthy(tostring(e):find("Linear '1'%(in_features=784, out_features=10%): input has shape %[3, 100%], expected the last dim to be 784"))
    local conv = nn.Conv2d(3, 8, 3)
    ok, e = pcall(conv, dpl.randn(1, 1, 8, 8))
    assert.truthy(tostring(e):find('Conv2d%(3, 8, kernel_size=3x3%): input has shape %[1, 1, 8, 8%], expected %[N, 3, H, W%]'))
  end)

  it('clip_grad_norm_ and clip_grad_value_', function()
    local p = dpl.zeros(2):requires_grad_()
    local q = dpl.zeros(1):requires_grad_()
    p.grad = dpl.tensor({ 3.0, 0.0 }, { dtype = 'float32' })
    q.grad = dpl.tensor({ 4.0 }, { dtype = 'float32' })
    local total = nn.utils.clip_grad_norm_({ p, q }, 1)
    assert.is_true(math.abs(total - 5) < 1e-5)
    assert.is_true(math.abs(p.grad[1]:item() - 0.6) < 1e-4)
    assert.is_true(math.abs(q.grad[1]:item() - 0.8) < 1e-4)
    q.grad = dpl.tensor({ -4.0 }, { dtype = 'float32' })
    nn.utils.clip_grad_value_({ q }, 0.5)
    assert.are.equal(-0.5, q.grad[1]:item())
  end)

  it('clip_grad_norm_ on GPUs (simulated) scales as on the CPU: 2, inf and 3-norms, two devices, two dtypes', function()
    local out, err, rc = require('spec.support.helpers').run_chunk([[
      local dpl = require 'dpl'
      local nn = dpl.nn
      for _, d in ipairs({ { 'cpu', 'cpu' }, { 'cuda:0', 'cuda:1' } }) do
        dpl.manual_seed(1)
        local p, q = dpl.zeros(3, 4):to(d[1]):requires_grad_(), dpl.zeros(5, { dtype = 'float64' }):to(d[2]):requires_grad_()
        p.grad, q.grad = dpl.randn(3, 4):to(d[1]), dpl.randn(5, { dtype = 'float64' }):to(d[2])
        local a = nn.utils.clip_grad_norm_({ p, q }, 1)
        local b = nn.utils.clip_grad_norm_({ p, q }, 10, 'inf')
        local c = nn.utils.clip_grad_norm_({ p, q }, 0.5, 3)
        print(('%.6f %.6f %.6f %.6f %.6f %s %s'):format(a, b, c, p.grad:norm():item(), q.grad:norm():item(),
          tostring(q.grad.device), q.grad.dtype))
      end
    ]], 'DPL_VIRTUAL_GPUS=2 CUDA_VISIBLE_DEVICES=')
    assert.are.equal(0, rc, err)
    local cpu, gpu = out:match('^([^\n]*)\n([^\n]*)')
    assert.truthy(cpu, out)
    assert.are.equal((cpu:gsub(' cpu ', ' X ')), (gpu:gsub(' cuda:1 ', ' X ')))
    assert.matches(' cuda:1 float64$', gpu)
  end)
end)
