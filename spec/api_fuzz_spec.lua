-- api_fuzz_spec.lua: the crashes, hangs and raw Lua/FFI errors scripts/fuzz_api.lua found, as
-- regression cases, and a bounded deterministic run of the fuzzer itself (a subprocess: a crash
-- or a C-side hang there fails this spec instead of killing the runner). The full fuzzer (many
-- seeds, large N, release and SAN builds) is documented in docs/testing.md.
local dpl = require 'dpl'
local h = require 'spec.support.helpers'

local function err_of(f)
  local ok, e = pcall(f)
  assert.is_false(ok, 'expected an error')
  return tostring(e)
end

-- runs f in a fresh dplhost with a time limit: it must finish (no hang) with exit status 0
local function finishes(code, timeout)
  local out, err, rc = h.run_chunk(code, nil, { timeout = timeout or 20 })
  assert.are.equal(0, rc, 'exit ' .. tostring(rc) .. '\n' .. out .. err)
  return out
end

describe('fuzz findings: hangs', function()
  it('tile/repeat of 5+ dims by a huge count: a size error, or an empty result, at once', function()
    local out = finishes([[
      local dpl = require 'dpl'
      print(pcall(function() return dpl.arange(24):reshape(1, 2, 4, 3, 1):tile(2 ^ 40) end))
      print(pcall(function() return dpl.ones(1, 2, 4, 3, 1):tile(2 ^ 50) end))
      print(dpl.zeros(0, 3, 1, 2, 2):tile(2 ^ 40, 1, 1, 1, 1):numel())]])
    assert.matches('false\t[^\n]*out of memory allocating', out)
    assert.matches('false\t[^\n]*tile: the result is too large: %d+ elements %(more than 2%^48%)', out)
    assert.matches('\n0\n', out)
    local t = dpl.arange(24):reshape(1, 2, 4, 3, 1)
    local b = dpl.cat({ t, t }, 1)
    b = dpl.cat({ b, b, b }, 3)
    assert.is_true(dpl.equal(dpl.cat({ b, b }, 5), t:tile(2, 1, 3, 1, 2)))
  end)

  it('polygamma of a huge order finishes (n! stops counting at inf)', function()
    local out = finishes([[
      local dpl = require 'dpl'
      print(dpl.polygamma(2 ^ 53, dpl.tensor({ 0.5, 2 })):isnan():logical_not():any():item())
      print(dpl.special.polygamma(2 ^ 40, dpl.tensor({ 3.0 })):numel())]])
    assert.truthy(out:find('1', 1, true))
  end)

  it('zeta and polygamma at a large negative q finish and agree with the direct sum', function()
    finishes([[
      local dpl = require 'dpl'
      dpl.special.zeta(dpl.tensor({ 3.0, 2.0 }, { dtype = 'float64' }), dpl.tensor({ -1e300, -1e12 - 0.5 }, { dtype = 'float64' }))
      dpl.polygamma(3, dpl.tensor({ -1e9 + 0.5 }, { dtype = 'float64' }))]])
    -- the closed form for q < -64 against values from the term-by-term sum (q + k from q up)
    local z = dpl.special.zeta(dpl.tensor({ 2, 3, 4, 5 }, { dtype = 'float64' }),
      dpl.tensor({ -100.3, -100.3, -1000.7, -70.9 }, { dtype = 'float64' })):tolist()
    local want = { 15.069493149244012, -34.418722648980754, 128.17015238865457, 99998.909781580674 }
    for i = 1, 4 do assert.is_true(h.rel_near(want[i], z[i], 1e-12), ('%d: %.17g vs %.17g'):format(i, z[i], want[i])) end
  end)

  it('multigammaln of an empty tensor with a huge p and data.range to inf finish', function()
    assert.are.same({ 0 }, dpl.special.multigammaln(dpl.zeros(0), 2 ^ 62):size())
    assert.truthy(err_of(function() dpl.data.range(-1, math.huge) end):find('data.range: last (argument #2) must be an integer', 1, true))
    assert.truthy(err_of(function() dpl.data.range(1, 2 ^ 40) end):find('more than 2^31 items', 1, true))
    assert.are.same({ 2, 3, 4 }, dpl.data.range(2, 4))
  end)

  it('a binary op whose result can never be allocated fails once instead of collecting garbage forever', function()
    -- (binop retried after each ENOMEM with a full GC, without end; a shape past 2^50 elements is
    -- ENOMEM every time; found through Dirichlet(empty):sample({2^62}))
    local out = finishes([[
      local dpl = require 'dpl'
      local a = dpl.zeros(0, 2, 1, 0):expand({ 2 ^ 62, 0, 2, 1, 0 })
      print(select(2, pcall(a.lt, a, 1)))
      print(select(2, pcall(function() return dpl.distributions.Dirichlet(dpl.zeros(0, 2, 1, 0):to('float16')):sample({ 2 ^ 62 }) end)))]], 20)
    assert.truthy(out:find('lt: shape [4611686018427387904, 0, 2, 1, 0] is too large', 1, true), out)
  end)

  it('tensor_split into 2^40 sections and linalg.vander with N = 2^62 are errors, not loops', function()
    assert.truthy(err_of(function() dpl.zeros(5, 0, 4):tensor_split(2 ^ 40) end):find('more than 2^24 sections', 1, true))
    assert.truthy(err_of(function() dpl.linalg.vander(dpl.zeros(5, 1, 4), { N = 2 ^ 62 }) end):find('is too large', 1, true))
    assert.truthy(err_of(function() dpl.linalg.vander(dpl.tensor({ 1, 2, 3 }), { N = 2 ^ 40 }) end):find('is too large', 1, true))
    assert.are.equal(3, #dpl.zeros(4):tensor_split(3))
  end)

  it('nn.init.dirac_ of a tensor with an empty dim 1 and groups = 2^62 finishes (it looped over the groups)', function()
    assert.are.same({ 0, 1, 0 }, dpl.nn.init.dirac_(dpl.zeros(0, 1, 0), 2 ^ 62):size())
    local w = dpl.nn.init.dirac_(dpl.ones(4, 2, 3), 2)
    assert.are.same({ { { 0, 1, 0 }, { 0, 0, 0 } }, { { 0, 0, 0 }, { 0, 1, 0 } },
      { { 0, 1, 0 }, { 0, 0, 0 } }, { { 0, 0, 0 }, { 0, 1, 0 } } }, w:tolist())
  end)
end)

describe('fuzz findings: sizes that overflow int64 (UB in C, views outside their storage)', function()
  it('a size or a dim of inf or 1e308 is named as passed (%d and the int64 conversion showed -2^63)', function()
    local m = err_of(function() dpl.empty(math.huge) end)
    assert.truthy(m:find('empty: size inf at position 1 is out of range', 1, true), m)
    m = err_of(function() dpl.FloatTensor(2, 1e308) end)
    assert.truthy(m:find('size 1e+308 at position 2 is out of range', 1, true), m)
    m = err_of(function() dpl.ones(3):view(-math.huge) end)
    assert.truthy(m:find('view: size -inf at position 1', 1, true), m)
    m = err_of(function() dpl.ones(2, 3):sum(math.huge) end)
    assert.truthy(m:find('sum: dim must be an integer, got inf', 1, true), m)
    m = err_of(function() dpl.ones(2, 3):sum({ 1, -math.huge }) end)
    assert.truthy(m:find('sum: dims must be integers, got -inf at position 2', 1, true), m)
    m = err_of(function() dpl.argmin(dpl.tensor(1), 1e308) end)
    assert.truthy(m:find('argmin: dim must be an integer, got 1e+308', 1, true), m)
    assert.are.same({ 3 }, dpl.ones(3):view(-1):size())
  end)

  it('eye and random_ refuse non-integers (2.5 was truncated) and NaN/inf, arange past 2^62 elements is too large', function()
    local function has(f, s) local m = err_of(f); assert.truthy(m:find(s, 1, true), m) end
    has(function() dpl.eye(2.5) end, 'eye: n must be a non-negative integer, got 2.5')
    has(function() dpl.eye(0 / 0) end, 'eye: n must be a non-negative integer, got nan')
    has(function() dpl.eye(2, math.huge) end, 'eye: m must be a non-negative integer, got inf')
    has(function() dpl.zeros(3):random_(0.5, 3) end, 'random_: from must be an integer, got 0.5')
    has(function() dpl.zeros(3):random_(math.huge) end, 'random_: to must be an integer, got inf')
    has(function() dpl.arange(1e308) end, 'arange: 1e+308 elements')
    assert.are.same({ 3, 2 }, dpl.eye(3, 2):size())
    local r = dpl.zeros(100):random_(-2, 2)
    assert.is_true(r:min():item() >= -2 and r:max():item() <= 1)
  end)

  it('randint, linspace, narrow and manual_seed refuse non-integers and NaN (randint(NaN, 5) drew garbage, 2.5 was truncated)', function()
    local function has(f, s) local m = err_of(f); assert.truthy(m:find(s, 1, true), m) end
    local x = dpl.arange(12):view(3, 4)
    has(function() dpl.randint(0 / 0, 5, { 2 }) end, 'randint: low must be an integer, got nan')
    has(function() dpl.randint(5.5, { 2 }) end, 'randint: high must be an integer, got 5.5')
    has(function() dpl.linspace(0, 1, 2.5) end, 'linspace: steps must be a non-negative integer, got 2.5')
    has(function() dpl.linspace(0, 1, 0 / 0) end, 'linspace: steps must be a non-negative integer, got nan')
    has(function() x:narrow(1, 1.5, 1) end, 'narrow: start and length must be integers, got 1.5 and 1')
    has(function() x:narrow(1, 1, 0 / 0) end, 'narrow: start and length must be integers, got 1 and nan')
    has(function() dpl.manual_seed(math.huge) end, 'manual_seed: expected a non-negative integer, got inf')
    assert.are.same({ 3, 2 }, x:narrow(2, -2, 2):size())
    assert.are.same({ 3 }, dpl.linspace(0, 1, 3):size())
    local r = dpl.randint(2, 4, { 50 })
    assert.is_true(r:min():item() >= 2 and r:max():item() <= 3)
  end)

  it('integer arguments of inf or 1e308 are named as passed, not as -2^63', function()
    local x = dpl.ones(4, 3)
    local F = dpl.nn.functional
    local cases = {
      { function() dpl.polygamma(1e308, x) end, 'polygamma: n must be a non-negative integer, got 1e+308' },
      { function() x:select(1, math.huge) end, 'select: index must be an integer, got inf' },
      { function() x:topk(1e308) end, 'topk: k must be an integer, got 1e+308' },
      { function() x:kthvalue(1e308) end, 'kthvalue: k must be an integer, got 1e+308' },
      { function() dpl.linalg.vander(x, 1e308) end, 'linalg.vander: N must be an integer, got 1e+308' },
      { function() F.glu(x, -math.huge) end, 'glu: dim must be an integer, got -inf' },
      { function() F.channel_shuffle(dpl.ones(4, 4, 4), 1e308) end, 'Value of groups: 1e+308' },
      { function() F.group_norm(dpl.ones(5, 1), 1e308) end, 'group_norm: num_groups must be a positive integer, got 1e+308' },
      { function() dpl.nn.Conv1d(math.huge, 1) end, 'Conv1d: in_channels must be an integer >= 1, got inf' },
      { function() dpl.nn.Conv1d(2, 4, 3, { groups = math.huge }) end, 'Conv1d: groups must be a positive integer, got inf' },
    }
    for _, c in ipairs(cases) do
      local m = err_of(c[1])
      assert.truthy(m:find(c[2], 1, true), m)
      assert.falsy(m:find('9223372036854775808', 1, true), m)
    end
  end)

  it('expand to a shape of more than 2^50 elements is an error', function()
    assert.truthy(err_of(function() dpl.randn(3, 1):expand(3, 2 ^ 62) end):find('expand: shape [3, 4611686018427387904] is too large', 1, true))
    assert.truthy(err_of(function() dpl.randn(2):expand(2 ^ 62, 3, 2) end):find('too large', 1, true))
    assert.are.same({ 3, 2 ^ 20 }, dpl.randn(3, 1):expand(3, 2 ^ 20):size())
  end)

  it('a new empty tensor whose other sizes overflow is an error (their strides would)', function()
    assert.truthy(err_of(function() dpl.zeros(3, 4, 0, 2 ^ 62) end):find('is too large', 1, true))
    assert.truthy(err_of(function() dpl.empty({ 2 ^ 62, 2, 0 }) end):find('is too large', 1, true))
    assert.are.same({ 2 ^ 40, 0 }, dpl.zeros(2 ^ 40, 0):size())
  end)

  it('view/reshape of an empty tensor to sizes that overflow is an error', function()
    assert.truthy(err_of(function() dpl.zeros(0):view(2 ^ 62, 4, 0) end):find('view: shape [4611686018427387904, 4, 0] is too large', 1, true))
    assert.truthy(err_of(function() dpl.zeros(0, 2, 2):reshape(2 ^ 62, 2, 0) end):find('is too large', 1, true))
  end)

  it("as_strided whose extent passes 2^63 is an error (it wrapped to a view reading element 0 over and over)", function()
    assert.truthy(err_of(function() dpl.zeros(10):as_strided({ 5 }, { 2 ^ 62 }, 0) end):find('past 2^63', 1, true))
    assert.truthy(err_of(function() dpl.zeros(10):as_strided({ 3, 2 }, { 2 ^ 61, 2 ^ 62 }) end):find('past 2^63', 1, true))
    assert.truthy(err_of(function() dpl.zeros(10):as_strided({ 2 }, { 1 }, 0 / 0) end):find('storage_offset must be a non-negative integer', 1, true))
    assert.are.same({ { 0, 0 }, { 0, 0 } }, dpl.zeros(4):as_strided({ 2, 2 }, { 1, 2 }):tolist())
  end)

  it('repeat and distributions sampling with huge sizes are errors', function()
    assert.truthy(err_of(function() dpl.randn(5, 5):repeatTensor(2 ^ 40, 2 ^ 40) end):find('too large', 1, true))
    assert.truthy(err_of(function() dpl.distributions.Normal(dpl.zeros(2), dpl.ones(2)):sample({ 3, 4, 0, 2 ^ 62 }) end)
      :find('too large', 1, true))
  end)
end)

describe('fuzz findings: raw Lua/FFI errors become named errors', function()
  local cases = {
    { function() dpl.nn.ReLU()(1) end, 'ReLU' },
    { function() dpl.nn.Softmax(1)({ 1, 2 }) end, 'expected a tensor as input' },
    { function() dpl.nn.Flatten('a') end, 'Flatten: start_dim must be a nonzero integer' },
    { function() dpl.matmul(1, dpl.randn(2, 2)) end, 'matmul: input must be a tensor, got number' },
    { function() dpl.mm('x', dpl.randn(2, 2)) end, 'mm: input must be a tensor' },
    { function() dpl.dot(dpl.randn(2)) end, 'dot: other must be a tensor, got nil' },
    { function() dpl.randn(2):add_({ 1 }, 2) end, 'add_: other must be a tensor' },
    { function() dpl.zeros(3):index_add_(1, dpl.tensor({ 1 }), 5) end, 'index_add_: source must be a tensor' },
    { function() dpl.zeros(3):scatter_add_(1, dpl.tensor({ 1 }), {}) end, 'scatter_add_: src must be a tensor' },
    { function() dpl.get_item(nil, 1) end, 'get_item: expected a tensor and an integer index' },
    { function() dpl.arange() end, 'arange: start, end and step must be numbers' },
    { function() dpl.conv2d(dpl.randn(1, 1, 3, 3), dpl.randn(1, 1, 2, 2), 3) end, 'conv2d: bias must be a tensor' },
    { function() dpl.data.TensorDataset({ 0 }, dpl.randn(2)) end, 'TensorDataset: argument 1 must be a tensor' },
    { function() dpl.data.default_collate(5) end, 'default_collate: items must be a list' },
    { function() dpl.optim.Optimizer({ dpl.randn(2):requires_grad_() }, 4) end, 'defaults must be a table' },
    { function() dpl.optim.LBFGS({ dpl.randn(2):requires_grad_() }, { max_iter = {} }) end, 'LBFGS: max_iter must be a positive integer' },
    { function() dpl.nn.RNNBase(true, 1, 2, 3) end, 'RNNBase(mode, class, input_size, hidden_size, ...)' },
    { function() dpl.nn.RNNCellBase('RNNCell', print, 3, 5) end, 'RNNCellBase(class, gates' },
    { function() dpl.metrics.Metric(1e-300) end, 'options must be a table, got number' },
    { function() dpl.nn.SyncBatchNorm(3, 'x') end, 'SyncBatchNorm: eps must be a number' },
    { function() dpl.distributions.Normal(0, 1):icdf() end, 'Normal.icdf: value must be a tensor, got nil' },
    { function() dpl.distributions.Chi2(dpl.ones(2)):expand(-1) end, 'Chi2.expand: batch_shape must be a list of sizes' },
    { function() dpl.nn.init.calculate_fan_in_and_fan_out(1) end, 'calculate_fan_in_and_fan_out: expected a tensor' },
    { function() dpl.nn.functional.one_hot(dpl.tensor({ 1, 2 }), dpl.tensor(3)) end, 'one_hot: num_classes must be an integer' },
    { function() dpl.nn.functional.one_hot(dpl.tensor({ true })) end, 'one_hot: expected integer labels' },
    { function() dpl.nn.functional.batch_norm(dpl.randn(5, 3), dpl.zeros(3)) end, 'running_mean and running_var' },
    { function() dpl.linalg.tensorsolve(dpl.randn(4, 2), dpl.randn(2, 1, 3)) end, 'B has 3 dims but A only 2' },
    { function() dpl.nn.Sequential(nil, dpl.nn.ReLU()) end, 'Sequential: argument 1 is not a Module' },
    { function() dpl.arange(4):clamp_max(false) end, 'clamp: min and max must be numbers (or nil), got boolean' },
    { function() dpl.ones(2):clamp_(false, 1) end, 'clamp_: min and max must be numbers (or nil), got boolean' },
    { function() dpl.optim.LBFGS({ { params = {} } }) end, 'LBFGS: needs at least one parameter' },
    { function() dpl.optim.LBFGS({ dpl.zeros(3, { dtype = 'bool' }) }) end, 'LBFGS: parameters must be floating-point tensors, got bool' },
    { function()
        local p = dpl.randn(2):requires_grad_()
        p.grad = dpl.ones(2)
        dpl.optim.Optimizer({ p }, { lr = 0.1 }):step()
      end, 'the base Optimizer has no update rule' },
    { function() dpl.distributions.register_kl(nil, dpl.distributions.Normal, function() end) end,
      'register_kl: expected P to be a Distribution subclass, got nil' },
    { function() dpl.distributions.register_kl(dpl.distributions.Normal, dpl.distributions.Normal(0, 1), function() end) end,
      'register_kl: expected Q to be a Distribution subclass, got an instance of Normal' },
    { function() dpl.ones(2, 2):fill_(dpl.ones(3)) end, 'fill_: value must be a number or a one-element tensor, got a tensor of 3 elements' },
    { function() dpl.ones(2, 2):masked_fill(dpl.ones(2, 2):gt(0), dpl.ones(2)) end,
      'masked_fill_: value must be a number or a one-element tensor, got a tensor of 2 elements' },
    { function() dpl.ones(2, 2):requires_grad_().grad = dpl.tensor(1) end, 'grad: assigned grad has shape [], the tensor has shape [2, 2]' },
    { function() dpl.reduction_id('x', {}) end, "reduction_id: reduction must be 'none', 'mean' or 'sum', got 'x'" },
    { function() dpl.floor_divide(2) end, 'floor_divide: expected a tensor and a tensor or a number, got number and nil' },
    { function() dpl.floor_divide(dpl.ones(2)) end, 'floor_divide: expected a tensor and a tensor or a number, got a tensor and nil' },
    { function() dpl.nn.LayerNorm(dpl.ones(4)) end, 'LayerNorm: normalized_shape must be an integer or a list of integers, got a tensor' },
    { function() dpl.nn.LayerNorm() end, 'LayerNorm: normalized_shape must be an integer or a list of integers, got nil' },
    { function() dpl.nn.LayerNorm({ 2.5 }) end, 'LayerNorm: normalized_shape[1] must be a non-negative integer, got 2.5' },
    { function() dpl.dtype_id('L', {}) end, "dtype: unknown dtype 'L'" },
    { function() dpl.data.check_seed(print, {}) end, 'seed must be an integer, got function' },
    { function() dpl.ones(2, 3):cumsum_(2, dpl.ones(2)) end, 'cumsum_: unknown dtype (a tensor: pass its .dtype)' },
  }
  for i, c in ipairs(cases) do
    it(('case %d: %s'):format(i, c[2]), function()
      local m = err_of(c[1])
      assert.truthy(m:find(c[2], 1, true), m)
      for _, raw in ipairs({ 'attempt to ', 'bad argument #', 'cannot convert' }) do
        assert.falsy(m:find(raw, 1, true), m)
      end
    end)
  end
end)

describe('fuzz findings: constructors and argument values', function()
  it('a distribution sample_shape of inf or 1e308 is an error naming it (it wrapped to a size of -2^63)', function()
    local D = dpl.distributions
    for _, ss in ipairs({ math.huge, 1e308, { 0, math.huge, 2 } }) do
      local m = err_of(function() D.Normal(0, 1):sample(ss) end)
      assert.truthy(m:find('sample_shape%[%d%] must be a non%-negative integer below 2%^63'), m)
    end
    local m = err_of(function() D.Geometric(0.5):sample(1e308) end)
    assert.truthy(m:find('Geometric.sample: sample_shape[1]', 1, true), m)
  end)

  it('a distribution parameter given as a number float32 cannot hold becomes inf, as torch.tensor(1e308) (was an error naming full)', function()
    local D = dpl.distributions
    assert.are.equal(math.huge, D.Normal(1e308, 1).loc:item())
    assert.are.equal(0, D.Exponential(1e308):sample():item())
    assert.are.equal('float64', D.Normal(1.5, dpl.ones(2):double()).loc.dtype)
  end)

  it('a special function number operand float32 cannot hold becomes inf, as a wrapped number (was an error naming full)', function()
    assert.are.same({ 2 }, dpl.special.zeta(dpl.ones(2) * 2, 1e308):size())
    assert.are.same({ 3 }, dpl.ones(3):igammac(1e308):size())
  end)

  it('optimizers with positional arguments and only nils after params take their defaults', function()
    local p = { dpl.randn(2):requires_grad_() }
    for _, name in ipairs({ 'Adam', 'AdamW', 'RMSprop', 'Adagrad', 'Adamax', 'NAdam', 'RAdam', 'Rprop', 'ASGD', 'LBFGS' }) do
      assert.are.equal(name, dpl.optim[name](p, nil, nil).__name)
      assert.are.equal(name, dpl.optim[name](p, nil).__name)
    end
    assert.truthy(err_of(function() dpl.optim.SGD(p, nil, nil) end):find('SGD: lr is required', 1, true))
    assert.are.equal(0.5, dpl.optim.SGD(p, 0.5, nil, nil).param_groups[1].lr)
    assert.truthy(err_of(function() dpl.optim.lr_scheduler.StepLR(dpl.optim.SGD(p, 0.1), nil, nil) end):find('StepLR', 1, true))
  end)
end)

describe('fuzz findings: integer comparisons with out-of-range scalars', function()
  it('compare mathematically instead of wrapping the scalar', function()
    local u = dpl.tensor({ 3 }, { dtype = 'uint8' })
    assert.are.same({ false }, u:gt(256):tolist())
    assert.are.same({ true }, u:lt(256):tolist())
    assert.are.same({ false }, u:eq(259):tolist())
    assert.are.same({ true }, u:ne(259):tolist())
    assert.are.same({ true }, u:gt(-1):tolist())
    assert.are.same({ false }, u:le(-1):tolist())
    assert.are.same({ false }, dpl.tensor({ 3 }, { dtype = 'int32' }):gt(2 ^ 40):tolist())
    assert.are.same({ 1 }, dpl.tensor({ 3 }, { dtype = 'uint8' }):lt_(300):tolist())
  end)
  it('mvlgamma with a huge p and RNN/LSTM/GRU with a huge num_layers are errors, not hangs', function()
    assert.truthy(err_of(function() dpl.mvlgamma(dpl.tensor({ 1e300 }), 2 ^ 40) end):find('p must be at most 2^24', 1, true))
    assert.truthy(err_of(function() dpl.nn.LSTM(2, 3, 2 ^ 40) end):find('LSTM: num_layers must be at most 65536', 1, true))
    assert.truthy(err_of(function() dpl.nn.GRU(2, 3, { num_layers = 2 ^ 20 }) end):find('at most 65536', 1, true))
  end)
  it('chunk of an empty dim into 2^40 chunks is an error, not a hang', function()
    assert.truthy(err_of(function() dpl.zeros(0):chunk(2 ^ 40) end):find('chunk: ', 1, true))
    assert.are.equal(3, #dpl.zeros(0):chunk(3))
  end)
end)

-- The bounded run: these callables had no internal error (and no crash or hang) in 1.2 M release and
-- SAN calls after the fixes; a new raw Lua/FFI error in them fails here.
local CLEAN = { '^method:', '^dpl%.', '^F%.', '^nn%.', '^linalg%.', '^special%.', '^distributions%.', '^optim%.',
  '^lr_scheduler%.', '^metrics%.', '^data%.' }

describe('scripts/fuzz_api.lua (bounded, deterministic)', function()
  local function run(seed, n, only)
    local rep = h.tmpname('.txt')
    local out, err, rc = h.dplhost(('%s/scripts/fuzz_api.lua --seed %d --n %d --timeout 10 --report %s%s'):format(
      h.root, seed, n, rep, only and (' --only ' .. h.q(only)) or ''), { timeout = 120 })
    local text = h.read_all(rep)
    os.remove(rep)
    assert.truthy(text:find('outcomes:', 1, true), out .. err)
    return text, rc
  end
  for _, c in ipairs({ { 1, 20000 }, { 2, 20000 } }) do
    it(('seed %d, %d calls: no crash, no hang, no internal error in the cleaned modules'):format(c[1], c[2]), function()
      local text, rc = run(c[1], c[2])
      assert.truthy(text:find('crash=0 hang=0', 1, true), text)
      assert.are.equal(0, rc, text)
      local bad = {}
      for line in text:gmatch('[^\n]+') do
        local cls, name = line:match('^%s+%d+%s+(%a+) | ([^|]-) |')
        if cls == 'internal' or cls == 'badresult' or cls == 'harness' then
          for _, p in ipairs(CLEAN) do
            if name:find(p) then bad[#bad + 1] = line break end
          end
        end
      end
      assert.are.same({}, bad)
    end)
  end
  it('a seed gives the same calls and outcomes every run', function()
    local a = run(7, 40, '^special%.')
    local b = run(7, 40, '^special%.')
    assert.are.equal(a:match('outcomes:[^\n]*'), b:match('outcomes:[^\n]*'))
  end)
end)
