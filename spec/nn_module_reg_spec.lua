-- nn_module_reg_spec.lua: nn.Module's registration, modes, state dicts, containers and
-- forward hooks as PyTorch 1.13 has them (spec/fixtures/nn_module_ref.lua from
-- gen_nn_module_ref.py for the key orders).
local dpl = require 'dpl'
local nn = dpl.nn
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/nn_module_ref.lua')

local function collect(iter)
  local r = {}
  for k in iter do r[#r + 1] = k end
  return r
end
local function err_of(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, 'expected an error')
  return tostring(e)
end

-- the fixture's Net (the names are PyTorch's)
local Block = nn.Module:extend('Block')
function Block:__init()
  nn.Module.__init(self)
  self.conv = nn.Linear(2, 2)
  self.bn = nn.BatchNorm1d(2)
  self:register_buffer('cache', dpl.zeros(1), false)
  self.scale = nn.Parameter(dpl.ones(1), false)
end
local Net = nn.Module:extend('Net')
function Net:__init()
  nn.Module.__init(self)
  self.emb = nn.Embedding(5, 2)
  self.block = Block()
  self:register_buffer('steps', dpl.zeros({}))
  self.head = nn.Linear(2, 5, { bias = false })
  self.head.weight = self.emb.weight -- tied
  self.alias = self.block
  self.w = nn.Parameter(dpl.ones(2))
end

describe('nn.Module registration (PyTorch semantics)', function()
  it('a Parameter that does not require grad is registered (parameters, state dict)', function()
    local M = nn.Module:extend('M')
    function M:__init()
      nn.Module.__init(self)
      self.frozen = nn.Parameter(dpl.ones(2), false)
      self.fc = nn.Linear(2, 2)
    end
    local m = M()
    assert.are.same({ 'frozen', 'fc.weight', 'fc.bias' }, collect(m:named_parameters()))
    assert.is_false(m.frozen.requires_grad)
    assert.is_not_nil(m:state_dict().frozen)
    assert.are.equal(2 + 6, m:num_parameters())
    assert.are.equal(6, m:num_parameters(true))
    assert.is_true(nn.Module.is_parameter(m.frozen))
    assert.is_false(nn.Module.is_parameter(dpl.ones(2)))
    -- the optimizer takes the list and skips the parameter without a gradient
    local opt = dpl.optim.SGD(m:parameters(), { lr = 0.1 })
    m.fc(dpl.ones(1, 2)):sum():backward()
    opt:step()
    assert.are.same({ 1, 1 }, m.frozen:totable())
    -- to() keeps the mark
    m:to('float64')
    assert.are.same({ 'frozen', 'fc.weight', 'fc.bias' }, collect(m:named_parameters()))
    assert.is_true(nn.Module.is_parameter(m.frozen))
  end)

  it('a field that held a plain tensor and then gets a Parameter is registered', function()
    local M = nn.Module:extend('M')
    function M:__init()
      nn.Module.__init(self)
      self.w = dpl.zeros(3) -- a plain attribute
      self.w = nn.Parameter(dpl.ones(3))
      self.plain = dpl.zeros(1)
      self.fc = nn.Linear(2, 2)
    end
    local m = M()
    assert.are.same({ 'w', 'fc.weight', 'fc.bias' }, collect(m:named_parameters()))
    m.plain = nn.Parameter(dpl.ones(1), false) -- later, from outside
    assert.are.same({ 'w', 'plain', 'fc.weight', 'fc.bias' }, collect(m:named_parameters()))
    local keys = m:state_dict_keys()
    assert.are.same({ 'w', 'plain', 'fc.weight', 'fc.bias' }, keys)
    -- a plain tensor stays an attribute; an activation (not a leaf) is not a parameter
    local A = nn.Module:extend('A')
    function A:__init() nn.Module.__init(self); self.fc = nn.Linear(2, 2) end
    function A:forward(x) self.last = dpl.zeros(1); self.last = self.fc(x); return self.last end
    local a = A()
    a(dpl.ones(1, 2))
    assert.are.same({ 'fc.weight', 'fc.bias' }, collect(a:named_parameters()))
  end)

  it('register_buffer(name, t, false): not in the state dict, not expected when loading', function()
    local M = nn.Module:extend('M')
    function M:__init()
      nn.Module.__init(self)
      self:register_buffer('cache', dpl.zeros(3), false)
      self:register_buffer('stat', dpl.zeros(2))
    end
    local m = M()
    assert.are.same({ 'stat' }, m:state_dict_keys())
    assert.are.same({ 'cache', 'stat' }, collect(m:named_buffers()))
    m:load_state_dict({ stat = dpl.ones(2) })
    assert.are.same({ 1, 1 }, m.stat:totable())
    -- a non-persistent buffer's key in a state dict is unexpected (PyTorch)
    local e = err_of(m.load_state_dict, m, { stat = dpl.ones(2), cache = dpl.ones(3) })
    assert.truthy(e:find('Unexpected key%(s%): cache'), e)
    -- the buffer still moves with the module
    m:to('float64')
    assert.are.equal('float64', m.cache.dtype)
  end)

  it("state_dict: PyTorch's keys and order (module by module; tied weights and shared modules under each name)", function()
    local net = Net()
    assert.are.same(ref.sd_keys, net:state_dict_keys())
    local n = 0
    for _ in pairs(net:state_dict()) do n = n + 1 end
    assert.are.equal(#ref.sd_keys, n)
    assert.are.same(ref.param_names, collect(net:named_parameters()))
    assert.are.same(ref.module_names, collect(net:named_modules()))
    -- a state dict with both tied keys loads (strictly); either alone too
    local src = Net()
    local sd = src:state_dict()
    local dst = Net()
    dst:load_state_dict(sd)
    assert.are.same(src.emb.weight:totable(), dst.head.weight:totable())
    assert.is_true(rawequal(dst.emb.weight, dst.head.weight))
    sd['head.weight'] = nil
    sd['alias.conv.weight'] = nil
    local r = Net():load_state_dict(sd)
    assert.are.same({}, r.missing_keys)
  end)

  it('to(dtype) keeps tied weights and shared buffers tied (one new tensor under both names, as PyTorch)', function()
    local Tied = nn.Module:extend('Tied')
    function Tied:__init()
      nn.Module.__init(self)
      self.emb = nn.Embedding(10, 4)
      self.head = nn.Linear(4, 10)
      self.head.weight = self.emb.weight
      self.a = nn.Module()
      self.b = nn.Module()
      local buf = dpl.zeros(3)
      self.a:register_buffer('steps', buf)
      self.b:register_buffer('steps', buf)
    end
    function Tied:forward(x) return self.head(self.emb(x)) end
    local m = Tied()
    assert.are.equal(2, #m:parameters())
    m:to('float64')
    assert.are.equal(m.emb.weight, m.head.weight)
    assert.are.equal(m.a.steps, m.b.steps)
    assert.are.equal('float64', m.head.weight.dtype)
    assert.are.equal(2, #m:parameters())
    local opt = dpl.optim.SGD(m:parameters(), { lr = 0.1 })
    local loss = dpl.nn.functional.cross_entropy(m(dpl.tensor({ 1, 2 })), dpl.tensor({ 3, 4 }))
    loss:backward()
    opt:step()
    assert.are.equal(m.emb.weight, m.head.weight)
    m:float()
    assert.are.equal(m.emb.weight, m.head.weight)
  end)

  it('load_state_dict: a BatchNorm state dict without num_batches_tracked loads (counter 0)', function()
    local bn = nn.BatchNorm1d(3)
    bn.num_batches_tracked:fill_(7)
    bn:load_state_dict({ weight = dpl.ones(3), bias = dpl.zeros(3), running_mean = dpl.full({ 3 }, 0.5),
      running_var = dpl.ones(3) })
    assert.are.equal(0, bn.num_batches_tracked:item())
    assert.are.same({ 0.5, 0.5, 0.5 }, bn.running_mean:totable())
    -- other missing keys are still reported
    local e = err_of(bn.load_state_dict, bn, { weight = dpl.ones(3), running_mean = dpl.zeros(3), running_var = dpl.ones(3) })
    assert.truthy(e:find('Missing key%(s%): bias$'), e)
  end)
end)

describe('nn.Module train/eval', function()
  it("a parent's train() calls each child's train, so overrides run (a frozen BatchNorm stays in eval)", function()
    local Frozen = nn.Module:extend('Frozen')
    function Frozen:__init() nn.Module.__init(self); self.bn = nn.BatchNorm1d(3); self.fc = nn.Linear(3, 3) end
    function Frozen:train(mode)
      nn.Module.train(self, mode)
      self.bn:eval()
      return self
    end
    local b = Frozen()
    local net = nn.Sequential(b, nn.ReLU())
    net:train()
    assert.is_false(b.bn.training)
    assert.is_true(b.fc.training and b.training and net.training)
    net:eval()
    assert.is_false(b.fc.training or net[2].training)
    local calls = {}
    local Spy = nn.Module:extend('Spy')
    function Spy:train(mode) calls[#calls + 1] = tostring(mode); return nn.Module.train(self, mode) end
    local s = nn.Sequential(nn.Sequential(Spy()), Spy())
    s:eval()
    s:train()
    assert.are.same({ 'false', 'false', 'true', 'true' }, calls)
    assert.truthy(err_of(s.train, s, 'yes'):find('boolean'))
  end)
end)

describe('containers', function()
  it('Sequential and ModuleList: negative indices, insert, extend, pop', function()
    local a, b, c = nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)
    local seq = nn.Sequential(a, b, c)
    assert.are.equal(c, seq[-1])
    assert.are.equal(a, seq[-3])
    assert.is_nil(seq[-4])
    assert.is_nil(seq[4])
    local ml = nn.ModuleList { nn.Identity(), nn.Identity() }
    local t = nn.Tanh()
    ml:insert(2, t)
    assert.are.equal(t, ml[2])
    assert.are.equal(3, #ml)
    ml:extend({ nn.ReLU(), nn.Sigmoid() })
    ml:extend(nn.ModuleList { nn.SiLU() })
    assert.are.equal(6, ml:len())
    assert.are.equal('SiLU', ml[-1].__name)
    local names = {}
    for _, m in ml:ipairs() do names[#names + 1] = m.__name end
    assert.are.same({ 'Identity', 'Tanh', 'Identity', 'ReLU', 'Sigmoid', 'SiLU' }, names)
    assert.are.same({ '1', '2', '3', '4', '5', '6' }, (function()
      local r = {}
      for k in ml:named_children() do r[#r + 1] = tostring(k) end
      return r
    end)())
    ml:insert(-1, nn.GELU()) -- before the last, as a list's insert
    assert.are.equal('GELU', ml[6].__name)
    assert.are.equal('SiLU', ml:pop().__name)
    assert.are.equal('Tanh', ml:pop(2).__name)
    assert.are.same({ 'Identity', 'Identity', 'ReLU', 'Sigmoid', 'GELU' },
      (function() local r = {} for _, m in ml:ipairs() do r[#r + 1] = m.__name end return r end)())
    -- Sequential insert: the forward follows the new order
    local s = nn.Sequential(nn.Linear(2, 2))
    s:insert(1, nn.Flatten())
    assert.are.same({ 4, 2 }, s(dpl.ones(4, 1, 2)):size())
    assert.are.equal('Linear', s[-1].__name)
    -- a subclass keeps the negative indices, and extend on a class still subclasses
    local MySeq = nn.Sequential:extend('MySeq')
    local ms = MySeq(nn.ReLU(), nn.Tanh())
    assert.are.equal('Tanh', ms[-1].__name)
  end)

  it('ModuleDict: keys may be method names; insertion order for {name, module} pairs; natural order for tables', function()
    local md = nn.ModuleDict { b = nn.Linear(1, 1), a = nn.ReLU(), ['10'] = nn.Tanh(), ['2'] = nn.Tanh() }
    assert.are.same({ '2', '10', 'a', 'b' }, md:keys())
    local pairs_md = nn.ModuleDict { { 'z', nn.ReLU() }, { 'a', nn.Tanh() }, { 'm', nn.Identity() } }
    assert.are.same({ 'z', 'a', 'm' }, pairs_md:keys())
    pairs_md.b = nn.Sigmoid() -- assignment appends
    pairs_md:update({ { 'c', nn.SiLU() } })
    assert.are.same({ 'z', 'a', 'm', 'b', 'c' }, pairs_md:keys())
    assert.are.equal('Sigmoid', pairs_md.b.__name)
    -- keys named as methods
    local md2 = nn.ModuleDict { train = nn.Linear(1, 1), keys = nn.Linear(1, 1), forward = nn.ReLU() }
    md2:eval()
    assert.is_false(md2.training)
    assert.is_false(md2:get('train').training)
    assert.are.same({ 'forward', 'keys', 'train' }, md2:keys())
    assert.are.equal(4, #md2:parameters())
    assert.are.same({ 'keys.weight', 'keys.bias', 'train.weight', 'train.bias' }, md2:state_dict_keys())
    assert.are.equal('Linear', md2:get('keys').__name)
    assert.is_true(md2:contains('train'))
    local keys = {}
    for k, m in md2:items() do keys[#keys + 1] = k .. '=' .. m.__name end
    assert.are.same({ 'forward=ReLU', 'keys=Linear', 'train=Linear' }, keys)
    assert.are.equal(3, md2:len())
    assert.are.equal(3, #md2:values())
    -- pop, nil assignment, clear
    assert.are.equal('ReLU', md2:pop('forward').__name)
    md2.keys = nil -- removes the child 'keys' (the method stays)
    assert.are.same({ 'train' }, md2:keys())
    md.a = nil
    assert.are.same({ '2', '10', 'b' }, md:keys())
    md:clear()
    assert.are.same({}, md:keys())
    -- load / state dict through a parent
    local P = nn.Module:extend('P')
    function P:__init() nn.Module.__init(self); self.heads = nn.ModuleDict { { 'train', nn.Linear(2, 1) } } end
    local p1, p2 = P(), P()
    p2:load_state_dict(p1:state_dict())
    assert.are.same(p1.heads:get('train').weight:totable(), p2.heads:get('train').weight:totable())
    assert.truthy(tostring(p1):find('%(train%): Linear'))
  end)
end)

describe('forward hooks', function()
  it('pre-hooks replace arguments, forward hooks replace the output, handles remove them', function()
    local lin = nn.Linear(2, 2)
    local seen = {}
    local h1 = lin:register_forward_pre_hook(function(m, args)
      seen[#seen + 1] = 'pre:' .. args.n
      return args[1] * 2
    end)
    local h2 = lin:register_forward_hook(function(m, args, out)
      seen[#seen + 1] = 'post'
      assert.are.equal(lin, m)
      return out + 1
    end)
    local x = dpl.ones(1, 2)
    local plain = lin:forward(x * 2) + 1
    local y = lin(x)
    assert.are.same(plain:totable(), y:totable())
    assert.are.same({ 'pre:1', 'post' }, seen)
    -- the gradient flows through the hooks' ops
    y:sum():backward()
    assert.is_not_nil(lin.weight.grad)
    h1:remove()
    h2:remove()
    h2:remove() -- twice: nothing
    assert.are.same(lin:forward(x):totable(), lin(x):totable())
    assert.is_nil(rawget(lin, '_has_hooks'))
    -- a hook that returns nothing only observes; in a Sequential the hooks of a child run
    local shapes = {}
    local seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    seq[1]:register_forward_hook(function(_, _, out) shapes[#shapes + 1] = table.concat(out:size(), 'x') end)
    seq(dpl.ones(4, 2))
    assert.are.same({ '4x3' }, shapes)
    -- a pre-hook may return a list of arguments
    local Two = nn.Module:extend('Two')
    function Two:forward(a, b) return a + b end
    local two = Two()
    two:register_forward_pre_hook(function(_, args) return { args[2], args[2] } end)
    assert.are.equal(6, two(dpl.tensor(1.0), dpl.tensor(3.0)):item())
    assert.truthy(err_of(lin.register_forward_hook, lin, 3):find('expected a function'))
  end)
end)
