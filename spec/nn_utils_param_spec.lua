-- nn_utils_param_spec.lua: nn.utils.weight_norm / spectral_norm (and their removal),
-- nn.utils.parametrize, parametrizations.spectral_norm and nn.utils.prune against PyTorch
-- 1.13 (spec/fixtures/nn_extra_ref.lua from gen_nn_extra_ref.py): values, float64 gradients,
-- state dict keys, train/eval, errors.
local dpl = require 'dpl'
local nn = dpl.nn
local U = nn.utils
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/nn_extra_ref.lua')

local function d(t) return dpl.tensor(t, { dtype = 'float64' }) end
local function flat(v, out)
  out = out or {}
  if type(v) == 'table' then for _, x in ipairs(v) do flat(x, out) end else out[#out + 1] = v end
  return out
end
local function near(expected, got, what, tol)
  if type(got) == 'cdata' then got = got:totable() end
  if type(expected) == 'cdata' then expected = expected:totable() end
  local e, g = flat(expected), flat(got)
  assert.are.equal(#e, #g, what .. ': element count')
  for i = 1, #e do
    if math.abs(e[i] - g[i]) > (tol or 1e-10) * (1 + math.abs(e[i])) then
      error(('%s: element %d: expected %.12g, got %.12g'):format(what, i, e[i], g[i]), 2)
    end
  end
end
local function err_of(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, 'expected an error')
  return tostring(e)
end
local function check(name, fn, params)
  local r = ref[name]
  for _, p in ipairs(params or {}) do p.grad = nil end
  local xs = {}
  for i, x in ipairs(r.x) do xs[i] = d(x):requires_grad_() end
  local y = fn(unpack(xs))
  near(r.out, y, name .. ' output')
  y:backward(d(r.g))
  for i, gx in ipairs(r.gx or {}) do near(gx, xs[i].grad, name .. ' grad of input ' .. i) end
  for i, p in ipairs(params or {}) do near(r.gp[i], p.grad, name .. ' grad of parameter ' .. i) end
end
local function linear(inf, outf, p)
  local m = nn.Linear(inf, outf):to('float64')
  m.weight = nn.Parameter(d(p.w))
  if p.b then m.bias = nn.Parameter(d(p.b)) end
  return m
end

describe('weight_norm', function()
  it('Linear (dim 1): g, v, keys, values and gradients; remove_weight_norm', function()
    local m = U.weight_norm(linear(4, 3, ref.wn_params))
    assert.are.same(ref.wn_keys, m:state_dict_keys())
    near(ref.wn_g, m.weight_g, 'weight_g')
    check('wn', function(x) return m(x) end, { m.weight_g, m.weight_v, m.bias })
    assert.matches('Cannot register two weight_norm hooks', err_of(U.weight_norm, m))
    U.remove_weight_norm(m)
    assert.are.same(ref.wn_removed_keys, m:state_dict_keys())
    near(ref.wn_removed_w, m.weight, 'weight after remove')
    assert.matches("weight_norm of 'weight' not found in Linear", err_of(U.remove_weight_norm, m))
  end)
  it('Conv1d with dim=false (one norm, PyTorch dim=None)', function()
    local c = nn.Conv1d(2, 3, 2):to('float64')
    c.weight = nn.Parameter(d(ref.wn_conv_params.w))
    c.bias = nn.Parameter(d(ref.wn_conv_params.b))
    U.weight_norm(c, 'weight', false)
    near(ref.wn_conv_g, c.weight_g, 'weight_g')
    check('wn_conv_none', function(x) return c(x) end, { c.weight_g, c.weight_v })
  end)
end)

describe('spectral_norm', function()
  it('Linear: power iteration in training (u, v updated), none in eval; keys; gradients', function()
    local m = U.spectral_norm(linear(4, 3, ref.sn_params), { n_power_iterations = 2 })
    assert.are.same(ref.sn_keys, m:state_dict_keys())
    m.weight_u:copy_(dpl.nn.functional.normalize(d(ref.sn_u0), 2, 1))
    m.weight_v:copy_(dpl.nn.functional.normalize(d(ref.sn_v0), 2, 1))
    check('sn_train', function(x) return m(x) end, { m.weight_orig, m.bias })
    near(ref.sn_u1, m.weight_u, 'u after the step')
    near(ref.sn_v1, m.weight_v, 'v after the step')
    m:eval()
    check('sn_eval', function(x) return m(x) end, { m.weight_orig, m.bias })
    near(ref.sn_u1, m.weight_u, 'u unchanged in eval')
  end)
  it('ConvTranspose1d uses dim 2; remove_spectral_norm', function()
    local c = nn.ConvTranspose1d(3, 2, 2):to('float64')
    c.weight = nn.Parameter(d(ref.snct_params.w))
    c.bias = nn.Parameter(d(ref.snct_params.b))
    U.spectral_norm(c)
    assert.are.same({ 2 }, c.weight_u:size())
    c.weight_u:copy_(dpl.nn.functional.normalize(d(ref.snct_u0), 2, 1))
    c.weight_v:copy_(dpl.nn.functional.normalize(d(ref.snct_v0), 2, 1))
    check('snct_train', function(x) return c(x) end, { c.weight_orig })
    U.remove_spectral_norm(c)
    assert.are.same(ref.snct_removed_keys, c:state_dict_keys())
    near(ref.snct_removed_w, c.weight, 'weight after remove')
    assert.matches('n_power_iterations to be a non%-negative integer', err_of(U.spectral_norm, nn.Linear(2, 2), 'weight', -1))
  end)
end)

describe('parametrize', function()
  local Sym = nn.Module:extend('Sym')
  function Sym:forward(X) return X:triu() + X:triu(1):transpose(-1, -2) end
  local Scale = nn.Module:extend('Scale')
  function Scale:__init() nn.Module.__init(self) self.s = nn.Parameter(d({ 2 })) end
  function Scale:forward(X) return X * self.s end
  function Scale:right_inverse(X) return X / 2 end

  it('register_parametrization composes, state dict keys (1-based list), gradients, remove', function()
    local m = linear(3, 3, ref.pz_params)
    local P = U.parametrize
    P.register_parametrization(m, 'weight', Sym())
    P.register_parametrization(m, 'weight', Scale())
    assert.is_true(P.is_parametrized(m) and P.is_parametrized(m, 'weight') and not P.is_parametrized(m, 'bias'))
    local keys = {}
    for i, k in ipairs(ref.pz_keys) do keys[i] = k:gsub('weight%.1%.', 'weight.2.') end -- 1-based ModuleList
    assert.are.same(keys, m:state_dict_keys())
    near(ref.pz_weight, m.weight, 'parametrized weight')
    assert.are.equal('ParametrizedLinear', m.__name)
    check('pz', function(x) return m(x) end, { m.parametrizations.weight.original, m.parametrizations.weight[2].s,
      m.bias })
    -- cached: one computation per tensor
    local calls = 0
    local f = Sym.forward
    Sym.forward = function(s, X) calls = calls + 1 return f(s, X) end
    P.cached(function() local _ = m.weight + m.weight end)
    assert.are.equal(1, calls)
    Sym.forward = f
    P.remove_parametrizations(m, 'weight')
    assert.are.same(ref.pz_removed_keys, m:state_dict_keys())
    near(ref.pz_weight, m.weight, 'weight kept parametrized')
    assert.are.equal('Linear', m.__name)
    assert.is_false(P.is_parametrized(m))
    assert.matches('does not have a parametrization on weight', err_of(P.remove_parametrizations, m, 'weight'))
  end)
  it('assignment goes through right_inverse; shape changes need unsafe', function()
    local m = nn.Linear(2, 2):to('float64')
    U.parametrize.register_parametrization(m, 'weight', Scale())
    m.weight = d({ { 2, 4 }, { 6, 8 } })
    near({ { 1, 2 }, { 3, 4 } }, m.parametrizations.weight.original, 'original')
    near({ { 2, 4 }, { 6, 8 } }, m.weight, 'weight')
    local Flat = nn.Module:extend('Flat')
    function Flat:forward(X) return X:reshape(-1) end
    assert.matches('may not change the shape', err_of(U.parametrize.register_parametrization, nn.Linear(2, 2), 'weight',
      Flat()))
    local u = nn.Linear(2, 2)
    U.parametrize.register_parametrization(u, 'weight', Flat(), { unsafe = true })
    assert.are.same({ 4 }, u.weight:size())
  end)
  it('parametrizations.spectral_norm: the weight has spectral norm ~1', function()
    dpl.manual_seed(2)
    local m = nn.Linear(5, 4):to('float64')
    U.parametrizations.spectral_norm(m)
    assert.are.same({ 'bias', 'parametrizations.weight.original', 'parametrizations.weight.1._u',
      'parametrizations.weight.1._v' }, m:state_dict_keys())
    for _ = 1, 20 do m(dpl.randn(1, 5, { dtype = 'float64' })) end
    -- the largest singular value of the normalised weight is 1: ||W v||/||v|| <= 1 with equality at the top
    local W = m.weight
    local best = 0
    for _ = 1, 200 do
      local v = dpl.randn(5, { dtype = 'float64' })
      best = math.max(best, W:matmul(v):norm():item() / v:norm():item())
    end
    assert.is_true(best <= 1 + 1e-9 and best > 0.8)
  end)
end)

describe('prune', function()
  local pr = U.prune
  local function fresh() local m = nn.Linear(4, 3):to('float64') m.weight = nn.Parameter(d(ref.prune_w)) m.bias = nn.Parameter(dpl.zeros(3, { dtype = 'float64' })) return m end
  it('l1_unstructured: masks, keys, iterative pruning, forward and gradients, remove', function()
    local m = fresh()
    pr.l1_unstructured(m, 'weight', 0.25)
    near(ref.prune_l1_mask, m.weight_mask, 'mask')
    assert.are.same(ref.prune_keys, m:state_dict_keys())
    assert.is_true(pr.is_pruned(m) and pr.is_pruned(nn.Sequential(m)))
    pr.l1_unstructured(m, 'weight', 2)
    near(ref.prune_l1_mask2, m.weight_mask, 'mask after the second pruning')
    check('prune_fw', function(x) return m(x) end, { m.weight_orig })
    local orig = m.weight_orig
    pr.remove(m, 'weight')
    assert.are.same(ref.prune_removed_keys, m:state_dict_keys())
    assert.are.equal(orig, m.weight)
    assert.is_false(pr.is_pruned(m))
    assert.matches("has to be pruned before pruning can be removed", err_of(pr.remove, m, 'weight'))
  end)
  it('ln_structured (1-based dims), combined; random_unstructured; global_unstructured', function()
    local m = fresh()
    pr.ln_structured(m, 'weight', 0.34, 2, 1)
    near(ref.prune_ln_mask, m.weight_mask, 'ln mask')
    pr.ln_structured(m, 'weight', 1, 1, 2)
    near(ref.prune_ln_mask2, m.weight_mask, 'ln mask 2')
    local r = fresh()
    pr.random_unstructured(r, 'weight', 0.5)
    assert.are.equal(6, r.weight_mask:sum():item())
    pr.random_unstructured(r, 'weight', 3)
    assert.are.equal(3, r.weight_mask:sum():item())
    local m1, m2 = fresh(), nn.Linear(3, 2):to('float64')
    m2.weight = nn.Parameter(d(ref.prune_g2))
    pr.global_unstructured({ { m1, 'weight' }, { m2, 'weight' } }, { pruning_method = pr.L1Unstructured, amount = 0.4 })
    near(ref.prune_global_m1, m1.weight_mask, 'global m1')
    near(ref.prune_global_m2, m2.weight_mask, 'global m2')
    assert.matches('amount=20 should be smaller than the number of parameters to prune=12',
      err_of(pr.l1_unstructured, fresh(), 'weight', 20))
    assert.matches("has no parameter or buffer with name 'w'", err_of(pr.l1_unstructured, fresh(), 'w', 1))
  end)
end)
