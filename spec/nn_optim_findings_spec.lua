-- nn_optim_findings_spec.lua: what an exploratory port of PyTorch 1.13 code found in nn.init,
-- the Module API and the optimizers (each case failed before its fix); reference values from
-- python3-torch 1.13, inline.
local dpl = require 'dpl'
local nn, optim = dpl.nn, dpl.optim
local init = nn.init

local function err_of(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, 'expected an error')
  return tostring(e)
end

describe('nn.init takes PyTorch keyword options as a table', function()
  it('kaiming_* with {a=, mode=, nonlinearity=} (was "negative_slope table: 0x... not a valid number")', function()
    local w = dpl.empty(400, 30, 3, 3)
    init.kaiming_uniform_(w, { mode = 'fan_out', nonlinearity = 'relu' })
    -- bound = gain * sqrt(3 / fan_out) = sqrt(2) * sqrt(3 / 3600)
    local bound = math.sqrt(2) * math.sqrt(3 / 3600)
    assert.is_true(w:abs():max():item() <= bound * (1 + 1e-6))
    assert.is_true(w:abs():max():item() > bound * 0.99)
    init.kaiming_normal_(w, { a = 0.2, nonlinearity = 'leaky_relu' })
    local std = math.sqrt(2 / 1.04) / math.sqrt(270)
    assert.is_true(math.abs(w:std():item() / std - 1) < 0.02)
    init.kaiming_uniform_(w, 0, 'fan_in', { nonlinearity = 'relu' }) -- positional, then the rest
    assert.is_true(w:abs():max():item() <= math.sqrt(2) * math.sqrt(3 / 270) * (1 + 1e-6))
  end)
  it('xavier_*, uniform_, normal_, constant_, trunc_normal_, orthogonal_ take their keywords too', function()
    local w = dpl.empty(200, 100)
    init.xavier_uniform_(w, { gain = 2 })
    assert.is_true(w:abs():max():item() <= 2 * math.sqrt(6 / 300) * (1 + 1e-6))
    init.uniform_(w, { a = -2, b = -1 })
    assert.is_true(w:max():item() <= -1 and w:min():item() >= -2)
    init.normal_(w, { mean = 5, std = 0.01 })
    assert.is_true(math.abs(w:mean():item() - 5) < 0.01)
    init.constant_(w, { val = 0.25 })
    assert.are.equal(0.25, w:max():item())
    init.trunc_normal_(w, { std = 0.02, a = -0.01, b = 0.01 })
    assert.is_true(w:abs():max():item() <= 0.01)
  end)
  it('wrong arguments are errors naming the function and the option', function()
    assert.matches("kaiming_uniform_: unknown option 'nonlinarity' (did you mean 'nonlinearity'?)",
      err_of(init.kaiming_uniform_, dpl.empty(2, 2), { nonlinarity = 'relu' }), nil, true)
    assert.matches('xavier_normal_: gain must be a number, got \'x\'', err_of(init.xavier_normal_, dpl.empty(2, 2), 'x'), nil, true)
    assert.matches('uniform_: expected a tensor as the first argument, got nil', err_of(init.uniform_, nil, 0, 1), nil, true)
    assert.matches('constant_: val (the fill value) is required', err_of(init.constant_, dpl.empty(2)), nil, true)
  end)
  it('dirac_(t, groups) as PyTorch (was missing)', function()
    local t = dpl.empty(6, 2, 3, 3)
    init.dirac_(t, 2)
    -- torch: sum 4; ones at [0,0,1,1], [1,1,1,1], [3,0,1,1], [4,1,1,1] (0-based)
    assert.are.equal(4, t:sum():item())
    for _, ix in ipairs({ { 1, 1 }, { 2, 2 }, { 4, 1 }, { 5, 2 } }) do
      assert.are.equal(1, t[ix[1]][ix[2]][2][2]:item())
    end
    local w = init.dirac_(dpl.empty(4, 3, 4), { groups = 1 })
    assert.are.equal(3, w:sum():item())
    assert.are.equal(1, w[3][3][3]:item())
    assert.matches('dirac_: dim 1 %(6%) must be divisible by groups %(4%)', err_of(init.dirac_, dpl.empty(6, 2, 3), 4))
    assert.matches('dirac_: only tensors with 3, 4, or 5 dimensions', err_of(init.dirac_, dpl.empty(6, 2)))
  end)
end)

describe('Module API as PyTorch 1.13', function()
  local Net = nn.Module:extend('FindingsNet')
  function Net:__init()
    nn.Module.__init(self)
    self.conv = nn.Conv2d(1, 2, 3)
    self.bn = nn.BatchNorm2d(2)
    self.head = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2, { bias = false }))
    self.scale = nn.Parameter(dpl.ones(1))
    self:register_buffer('nb', dpl.zeros(2), false)
    self:register_buffer('pb', dpl.zeros(3))
  end
  local function list(it)
    local r = {}
    for k in it do r[#r + 1] = k end
    return table.concat(r, ' ')
  end

  it('named_parameters/named_buffers take (prefix, recurse) or {prefix=, recurse=} (the prefix was ignored)', function()
    local m = Net()
    -- torch: [n for n, _ in m.named_parameters(prefix='pre')] (Sequential children 0-based there)
    assert.are.equal('pre.scale pre.conv.weight pre.conv.bias pre.bn.weight pre.bn.bias pre.head.1.weight '
      .. 'pre.head.1.bias pre.head.3.weight', list(m:named_parameters('pre')))
    assert.are.equal('pre.scale', list(m:named_parameters('pre', false)))
    assert.are.equal('p.nb p.pb', list(m:named_buffers { prefix = 'p', recurse = false }))
    assert.are.equal('scale', list(m:named_parameters(false)))
    assert.are.equal('x x.1 x.2 x.3', list(m.head:named_modules { prefix = 'x' }))
    assert.matches("named_parameters: unknown option 'prefx'", tostring(select(2, pcall(m.named_parameters, m, { prefx = 'a' }))), nil, true)
  end)

  it('named_modules{remove_duplicate=false} lists a shared module under each name', function()
    local shared = nn.Linear(2, 2)
    local s = nn.Sequential(shared, nn.ReLU(), shared)
    -- torch (0-based names): ['', '0', '1'] and with remove_duplicate=False ['', '0', '1', '2']
    assert.are.equal(' 1 2', list(s:named_modules()))
    assert.are.equal(' 1 2 3', list(s:named_modules { remove_duplicate = false }))
  end)

  it('state_dict{prefix=, keep_vars=} (arguments were ignored)', function()
    local m = Net()
    local sd = m:state_dict { prefix = 'model.' }
    assert.is_not_nil(sd['model.conv.weight'])
    assert.is_nil(sd['conv.weight'])
    assert.are.equal(m.scale, m:state_dict { keep_vars = true }.scale)
    assert.is_true(m:state_dict { keep_vars = true }.scale.requires_grad)
    assert.is_false(m:state_dict().scale.requires_grad)
    assert.matches("state_dict: expected nil or an options table", err_of(m.state_dict, m, nil, 'p.'), nil, true)
  end)

  it('get_submodule, get_parameter, get_buffer (were missing)', function()
    local m = Net()
    assert.are.equal(m.head[1], m:get_submodule('head.1'))
    assert.are.equal(m, m:get_submodule(''))
    assert.are.equal(m.head[3].weight, m:get_parameter('head.3.weight'))
    assert.are.equal(m.scale, m:get_parameter('scale'))
    assert.are.equal(m.bn.running_mean, m:get_buffer('bn.running_mean'))
    assert.matches("get_submodule: head has no submodule '7' (in 'head.7')", err_of(m.get_submodule, m, 'head.7'), nil, true)
    assert.matches("get_parameter: bn has no parameter 'running_mean'", err_of(m.get_parameter, m, 'bn.running_mean'), nil, true)
    assert.matches("get_buffer: FindingsNet has no buffer 'scale'", err_of(m.get_buffer, m, 'scale'), nil, true)
  end)

  it("register_buffer / register_parameter / add_module check the name as PyTorch (silently replaced a submodule; 'a.b' made ambiguous state dict keys)", function()
    local m = Net()
    assert.matches("register_buffer: attribute 'conv' already exists (a submodule)", err_of(m.register_buffer, m, 'conv', dpl.zeros(1)), nil, true)
    assert.matches("register_buffer: attribute 'scale' already exists (a parameter)", err_of(m.register_buffer, m, 'scale', dpl.zeros(1)), nil, true)
    assert.matches("register_parameter: attribute 'pb' already exists (a buffer)", err_of(m.register_parameter, m, 'pb', dpl.zeros(1)), nil, true)
    assert.matches("add_module: attribute 'forward' already exists (a function)", err_of(m.add_module, m, 'forward', nn.ReLU()), nil, true)
    assert.matches("add_module: the name can't contain '.', got 'a.b'", err_of(m.add_module, m, 'a.b', nn.ReLU()), nil, true)
    assert.matches("register_buffer: the name can't be empty", err_of(m.register_buffer, m, '', dpl.zeros(1)), nil, true)
    assert.matches("register_parameter: the name must be a string, got number", err_of(m.register_parameter, m, 3, dpl.zeros(1)), nil, true)
    assert.matches("ModuleDict: a key can't be empty or contain '.', got 'a.b'", err_of(nn.ModuleDict, { ['a.b'] = nn.ReLU() }), nil, true)
    -- re-registering under the same kind, and a plain tensor field becoming a buffer, still work
    m:register_buffer('pb', dpl.ones(3))
    m:add_module('conv', nn.Conv2d(1, 2, 1))
    m.plain = dpl.zeros(2)
    m:register_buffer('plain', dpl.ones(2))
    assert.is_not_nil(m:state_dict().plain)
  end)

  it('Sequential and ModuleList slice(i, j) (seq[a:b]; was missing)', function()
    local s = nn.Sequential(nn.Linear(1, 2), nn.ReLU(), nn.Linear(2, 3), nn.Tanh())
    local a = s:slice(2, 3)
    assert.are.equal('Sequential', a.__name)
    assert.are.equal(2, #a)
    assert.are.equal(s[3], a[2]) -- the same module
    assert.are.equal('2.weight 2.bias', table.concat(a:state_dict_keys(), ' '))
    assert.are.equal(2, #s:slice(-2))
    assert.are.equal(0, #s:slice(3, 2))
    local y = s:slice(1, 2)(dpl.ones(1, 1))
    assert.are.same({ 1, 2 }, y:size())
    local ml = nn.ModuleList { nn.ReLU(), nn.Tanh() }
    assert.are.equal('ModuleList', ml:slice(2).__name)
    assert.matches('Sequential: slice: indices must be integers, got 1.5', err_of(s.slice, s, 1.5), nil, true)
  end)
end)

describe('optimizers a PyTorch 1.13 port uses (Rprop, ASGD, LBFGS were missing)', function()
  local function d(t) return dpl.tensor(t, { dtype = 'float64' }) end
  local function near(expected, got, tol, what)
    for i = 1, #expected do
      if math.abs(expected[i] - got[i]) > tol * (1 + math.abs(expected[i])) then
        error(('%s: element %d: expected %.15g, got %.15g'):format(what, i, expected[i], got[i]), 2)
      end
    end
  end
  local function GR(k) return d({ math.sin(1.3 * k), math.cos(0.7 * k) * (k % 2 == 1 and 1 or -1), 0.1 * k - 0.3 }) end
  -- 8 steps on the gradients GR(0..7), saved and resumed into a new optimizer after 4
  local function run(make, resume)
    local p = d({ 0.5, -1.0, 2.0 }):requires_grad_()
    local opt = make({ p })
    for k = 0, 7 do
      if resume and k == 4 then
        local sd = opt:state_dict()
        p = p:detach():clone():requires_grad_()
        opt = make({ p })
        opt:load_state_dict(sd)
      end
      p.grad = GR(k)
      opt:step()
    end
    return p:detach():totable(), opt, p
  end
  -- torch 1.13, float64: the same runs
  it('Rprop (etas, step_sizes, maximize), also resumed halfway', function()
    for _, resume in ipairs({ false, true }) do
      near({ 0.3725, -0.9125, 1.9632812499999994 }, (run(function(ps)
        return optim.Rprop(ps, { lr = 0.05, etas = { 0.3, 1.5 }, step_sizes = { 0.01, 0.2 } }) end, resume)), 1e-14, 'rprop')
      near({ 0.5226000000000001, -1.0224999999999997, 2.0022496 }, (run(function(ps)
        return optim.Rprop(ps, { maximize = true }) end, resume)), 1e-14, 'rprop maximize')
    end
    assert.matches('Rprop: invalid eta values', err_of(optim.Rprop, { d({ 1 }) }, { etas = { 1.5, 1.2 } }), nil, true)
  end)
  it('ASGD (lambd, alpha, t0, weight_decay) and its average ax', function()
    for _, resume in ipairs({ false, true }) do
      local p, opt, param = run(function(ps) return optim.ASGD(ps, { lr = 0.1, lambd = 0.01, alpha = 0.5, t0 = 3, weight_decay = 0.1 }) end, resume)
      near({ 0.31861217394199537, -0.8966681888664588, 1.7882315149631218 }, p, 1e-14, 'asgd')
      near({ 0.40436522869673586, -0.8962038169319311, 1.8690020645635206 }, opt.state[param].ax:totable(), 1e-14, 'asgd ax')
    end
  end)
  it('LBFGS with a closure: parameters, losses, func_evals and n_iter, also resumed between steps', function()
    local function rosen(x) return (1 - x[1]) ^ 2 + 100 * (x[2] - x[1] ^ 2) ^ 2 + (x[3] - 0.5) ^ 2 end
    local function lbfgs(kw, resume)
      local x = d({ -1.2, 1.0, 2.0 }):requires_grad_()
      local opt = optim.LBFGS({ x }, kw)
      local r = {}
      local function closure() opt:zero_grad(); local l = rosen(x); l:backward(); return l end
      for k = 1, 4 do
        if resume and k == 3 then
          local sd = opt:state_dict()
          x = x:detach():clone():requires_grad_()
          opt = optim.LBFGS({ x }, kw)
          opt:load_state_dict(sd)
        end
        r[#r + 1] = opt:step(closure):item()
      end
      local out = x:detach():totable()
      for _, l in ipairs(r) do out[#out + 1] = l end
      out[#out + 1] = opt.state[x].func_evals
      out[#out + 1] = opt.state[x].n_iter
      return out
    end
    for _, resume in ipairs({ false, true }) do
      near({ -1.0744968617338158, 1.0698720999352451, 1.9648460308146793, 26.449999999999996, 13.376834880415503,
        9.919341921893004, 8.114820403206773, 28, 28 }, lbfgs({ lr = 0.05, max_iter = 7, history_size = 3, max_eval = 9 }, resume),
        1e-12, 'lbfgs history 3')
      near({ 0.9842754856421231, 0.9657426255174041, 0.4992639778253666, 26.449999999999996, 1.4328393829421495,
        0.14162567605188744, 0.0011814749556554964, 54, 54 }, lbfgs({ lr = 1, tolerance_change = 1e-3 }, resume), 1e-7,
        'lbfgs tolerance_change')
    end
    local x = d({ 1 }):requires_grad_()
    assert.matches('LBFGS: step needs a closure', err_of(function() optim.LBFGS({ x }):step() end), nil, true)
    assert.matches("LBFGS: line_search_fn = 'strong_wolfe' is not implemented", err_of(optim.LBFGS, { x }, { line_search_fn = 'strong_wolfe' }), nil, true)
    assert.matches("LBFGS: doesn't support per-parameter options", err_of(optim.LBFGS, { { params = { x } }, { params = { d({ 2 }):requires_grad_() } } }), nil, true)
  end)
  it("RMSprop takes PyTorch 1.13's foreach keyword (was 'unknown option')", function()
    local o = optim.RMSprop({ d({ 1 }):requires_grad_() }, { foreach = true, lr = 0.1 })
    assert.is_true(o.foreach)
  end)
end)

describe('options turned on in a param group after some steps', function()
  local function d(t) return dpl.tensor(t, { dtype = 'float64' }) end
  -- torch 1.13 raises KeyError here; its values with the new state made as zeros by hand
  it("RMSprop momentum/centered (was \"attempt to index field 'grad_avg' (a nil value)\")", function()
    for _, foreach in ipairs({ false, true }) do
      local p = d({ 1.0, 2.0 }):requires_grad_()
      local o = optim.RMSprop({ p }, { lr = 0.1, foreach = foreach })
      p.grad = d({ 0.1, 0.2 })
      o:step()
      o.param_groups[1].momentum, o.param_groups[1].centered = 0.9, true
      for _, g in ipairs({ { 0.3, -0.1 }, { 0.2, 0.4 } }) do p.grad = d(g); o:step() end
      local r = p:detach():totable()
      assert.is_true(math.abs(r[1] + 2.35304620983272) < 1e-12 and math.abs(r[2] - 0.9773459084677983) < 1e-12)
    end
  end)
  it('Adam amsgrad (was "attempt to index field \'max_exp_avg_sq\'"), on both paths', function()
    for _, foreach in ipairs({ false, true }) do
      local q = d({ 1.0, 2.0 }):requires_grad_()
      local a = optim.Adam({ q }, { lr = 0.1, foreach = foreach })
      q.grad = d({ 0.1, 0.2 })
      a:step()
      a.param_groups[1].amsgrad = true
      for _, g in ipairs({ { 0.3, -0.1 }, { 0.02, 0.04 } }) do q.grad = d(g); a:step() end
      local r = q:detach():totable()
      assert.is_true(math.abs(r[1] - 0.7333844141877478) < 1e-12 and math.abs(r[2] - 1.8418419484793087) < 1e-12)
    end
  end)
end)

describe('nn.utils.vector_to_parameters (was missing)', function()
  it('inverts parameters_to_vector; a wrong size is an error naming both counts', function()
    local m = nn.Linear(3, 2)
    local v = nn.utils.parameters_to_vector(m)
    assert.are.equal(8, v:numel())
    local w = m.weight
    nn.utils.vector_to_parameters(dpl.arange(0, 8):float(), m)
    assert.are.equal(w, m.weight) -- the same tensor, updated in place
    assert.are.same({ { 0, 1, 2 }, { 3, 4, 5 } }, m.weight:detach():totable())
    assert.are.same({ 6, 7 }, m.bias:detach():totable())
    assert.is_true(m.weight.requires_grad and m.weight.is_leaf)
    assert.matches('vector_to_parameters: vec has 5 elements, the parameters 8',
      err_of(nn.utils.vector_to_parameters, dpl.zeros(5), m:parameters()), nil, true)
  end)
end)
