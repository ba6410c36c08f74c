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
