-- checkpoint_spec.lua: dpl.utils.checkpoint (torch.utils.checkpoint's reentrant checkpoint):
-- the same values and gradients (inputs and parameters, float64) as the plain run, dropout
-- replayed from the saved generator state, several and non-tensor results, the recompute.
local dpl = require 'dpl'
local nn = dpl.nn

local function maxdiff(a, b) return (a - b):abs():max():item() end

describe('dpl.utils.checkpoint', function()
  it('matches the plain run: output, input and parameter gradients, with dropout replayed', function()
    dpl.manual_seed(0)
    local net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Dropout(0.3), nn.Linear(8, 3)):to('float64')
    local x = dpl.randn(5, 4, { dtype = 'float64' }):requires_grad_()
    dpl.manual_seed(7)
    local y = net(x)
    y:pow(2):sum():backward()
    local gx, gw, gb = x.grad:clone(), net[1].weight.grad:clone(), net[4].bias.grad:clone()
    x.grad = nil
    net:zero_grad()
    dpl.manual_seed(7)
    local y2 = dpl.utils.checkpoint(net, x)
    assert.are.equal(0, maxdiff(y, y2))
    local after = dpl.rand(1):item()
    y2:pow(2):sum():backward()
    assert.are.equal(0, maxdiff(gx, x.grad))
    assert.are.equal(0, maxdiff(gw, net[1].weight.grad))
    assert.are.equal(0, maxdiff(gb, net[4].bias.grad))
    -- the generator is left where the forward left it (backward restores it)
    dpl.manual_seed(7)
    net(x)
    assert.are.equal(after, dpl.rand(1):item())
  end)
  it('recomputes in backward; several results, non-tensor arguments and results', function()
    local calls = 0
    local w = dpl.randn(3, { dtype = 'float64' }):requires_grad_()
    local function f(a, scale, b)
      calls = calls + 1
      return a * w * scale, 'tag', (a + b):exp()
    end
    local a = dpl.randn(3, { dtype = 'float64' }):requires_grad_()
    local b = dpl.randn(3, { dtype = 'float64' })
    local p, tag, q = dpl.utils.checkpoint.checkpoint(f, a, 2, b)
    assert.are.equal(1, calls)
    assert.are.equal('tag', tag)
    ;(p:sum() + q:sum() * 3):backward()
    assert.are.equal(2, calls)
    local ga, gw = a.grad:clone(), w.grad:clone()
    a.grad, w.grad = nil, nil
    local p2, _, q2 = f(a, 2, b)
    ;(p2:sum() + q2:sum() * 3):backward()
    assert.is_true(maxdiff(ga, a.grad) < 1e-14 and maxdiff(gw, w.grad) < 1e-14)
    assert.are.equal(dpl.autograd.checkpoint, dpl.autograd.checkpoint) -- also on dpl.autograd
  end)
  it('under no_grad it is a plain call; errors', function()
    local x = dpl.randn(2, { dtype = 'float64' }):requires_grad_()
    local y = dpl.no_grad(function() return dpl.utils.checkpoint(function(t) return t * 2 end, x) end)
    assert.is_false(y.requires_grad)
    assert.has_error(function() dpl.utils.checkpoint(3, x) end)
    local ok, e = pcall(dpl.utils.checkpoint, function(t) return t end, x, { use_reentrant = false })
    assert.is_false(ok)
    assert.matches('NotImplementedError', tostring(e))
    local seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2), nn.ReLU()):to('float64')
    local out = dpl.utils.checkpoint.checkpoint_sequential(seq, 2, x:view(1, 2))
    assert.is_true(maxdiff(out, seq(x:view(1, 2))) == 0)
  end)
end)
