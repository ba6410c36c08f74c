-- nn_train_spec.lua: end to end against PyTorch: tiny models (MLP with SGD+momentum+weight
-- decay, MLP with GELU/LayerNorm and Adam, CNN with conv/pool) start from the same weights,
-- see the same batches, and must follow PyTorch's losses and end at its weights
-- (spec/fixtures/train_ref.lua from gen_train_ref.py; float64).
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/train_ref.lua')

-- PyTorch's Sequential keys are 0-based ('0.weight'); dpl's are 1-based ('1.weight')
local function key(k)
  local i, rest = k:match('^(%d+)(%..*)$')
  return tostring(tonumber(i) + 1) .. rest
end

local function replay(case, model, make_opt)
  model:double()
  local sd = {}
  for k, v in pairs(case.init) do sd[key(k)] = dpl.tensor(v.data, { dtype = 'float64' }):view(v.shape) end
  model:load_state_dict(sd)
  local opt = make_opt(model:parameters())
  local xs, ys = {}, {}
  for i, x in ipairs(case.x) do
    xs[i] = dpl.tensor(x, { dtype = 'float64' }):view(case.x_shape)
    ys[i] = dpl.tensor(case.y[i], { dtype = 'int64' })
  end
  for step, want in ipairs(case.losses) do
    local i = (step - 1) % #xs + 1
    opt:zero_grad()
    local loss = F.cross_entropy(model(xs[i]), ys[i])
    loss:backward()
    opt:step()
    local got = loss:item()
    assert.is_true(math.abs(got - want) < 1e-9, ('step %d: loss %.15g, PyTorch %.15g'):format(step, got, want))
  end
  local final = model:state_dict()
  for k, want in pairs(case.final) do
    local got = final[key(k)]:reshape(-1):totable()
    for j = 1, #want do
      assert.is_true(math.abs(got[j] - want[j]) < 1e-9, ('%s[%d]: %.15g vs PyTorch %.15g'):format(key(k), j, got[j], want[j]))
    end
  end
end

describe('training matches PyTorch step by step', function()
  it('MLP, SGD with momentum and weight decay', function()
    replay(ref.mlp_sgd, nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 4)),
      function(p) return dpl.optim.SGD(p, { lr = 0.1, momentum = 0.9, weight_decay = 1e-3 }) end)
  end)
  it('MLP with GELU and LayerNorm, Adam', function()
    replay(ref.mlp_adam, nn.Sequential(nn.Linear(12, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4)),
      function(p) return dpl.optim.Adam(p, { lr = 0.01 }) end)
  end)
  it('CNN: conv (padding), ReLU, max/avg pooling, Linear', function()
    replay(ref.cnn_sgd, nn.Sequential(nn.Conv2d(1, 3, 3, { padding = 1 }), nn.ReLU(), nn.MaxPool2d(2),
      nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AvgPool2d(2), nn.Flatten(), nn.Linear(4, 3)),
      function(p) return dpl.optim.SGD(p, { lr = 0.05, momentum = 0.9 }) end)
  end)
end)
