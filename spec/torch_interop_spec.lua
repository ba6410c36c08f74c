-- torch_interop_spec.lua: "bring your PyTorch weights" and take them back (docs/nn.md, "PyTorch
-- weights"). spec/fixtures/torch_interop/<arch>.safetensors hold PyTorch 1.13 state dicts
-- (spec/fixtures/gen_torch_interop.py) of an MLP in nn.Sequential (float32 and float64), a CNN
-- (Conv2d, BatchNorm2d with running stats and num_batches_tracked, MaxPool2d, Linear), a
-- 2-layer bidirectional LSTM, a TransformerEncoder (layers in a ModuleList, final norm), an
-- Embedding + GRU language model with tied weights (the file has one name of the tied tensor,
-- as safetensors.torch.save_model writes) and a Sequential of weight_norm, parametrized
-- spectral_norm, orthogonal and hook spectral_norm layers; io.safetensors holds PyTorch's
-- inputs and outputs. Each is loaded into the same architecture written with dplhost and run;
-- then a dplhost model's state_dict{index_base = 0} is written and its keys, dtypes and shapes
-- are checked against PyTorch's. DPL_TORCH_INTEROP_OUT=DIR also writes those files with
-- dplhost's outputs for `gen_torch_interop.py --check DIR` (PyTorch loads them strictly).
local dpl = require 'dpl'
local nn = dpl.nn
local st = require 'dpl.safetensors'
local h = require 'spec.support.helpers'

local ROOT = (os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/torch_interop/'
local OUT = os.getenv('DPL_TORCH_INTEROP_OUT')
local io_t = st.load(ROOT .. 'io.safetensors')

---------------------------------------------------------------- the architectures (as the generator's)
local LSTMNet = nn.Module:extend('LSTMNet')
function LSTMNet:__init()
  nn.Module.__init(self)
  self.lstm = nn.LSTM(5, 7, 2, { bidirectional = true, batch_first = true })
  self.head = nn.Linear(14, 3)
end
function LSTMNet:forward(x)
  local out, hc = self.lstm(x)
  return self.head(out), hc[1], hc[2]
end

local LM = nn.Module:extend('LM')
function LM:__init()
  nn.Module.__init(self)
  self.encoder = nn.Embedding(20, 8)
  self.rnn = nn.GRU(8, 8, 2)
  self.decoder = nn.Linear(8, 20)
  self.decoder.weight = self.encoder.weight -- tied
end
function LM:forward(tokens)
  local out, hn = self.rnn(self.encoder(tokens + 1)) -- PyTorch's 0-based ids; dplhost's Embedding is 1-based
  return self.decoder(out), hn
end

local function mlp()
  return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))
end

local BUILD = {
  mlp = mlp,
  mlp64 = function() return mlp():double() end,
  cnn = function()
    return nn.Sequential(nn.Conv2d(3, 8, 3, { padding = 1 }), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
      nn.Conv2d(8, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 2 * 2, 5))
  end,
  lstm = LSTMNet,
  transformer = function()
    return nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16, dropout = 0.1 }), 2,
      { norm = nn.LayerNorm(8) })
  end,
  lm = LM,
  param = function()
    local U, P = nn.utils, nn.utils.parametrizations
    return nn.Sequential(U.weight_norm(nn.Linear(6, 8)), nn.Tanh(), P.spectral_norm(nn.Linear(8, 8)), nn.Tanh(),
      P.orthogonal(nn.Linear(8, 8)), nn.Tanh(), U.spectral_norm(nn.Linear(8, 4)))
  end,
}
local ARCHS = { 'mlp', 'mlp64', 'cnn', 'lstm', 'transformer', 'lm', 'param' }

local function outputs(model, x)
  local ys = table.pack(dpl.no_grad(function() return model(x) end))
  local r = {}
  for i = 1, ys.n do r[i] = ys[i] end
  return r
end
local function maxdiff(a, b)
  return (a:double() - b:double()):abs():max():item()
end
local function shape(t) return table.concat(t:size(), 'x') end

describe('PyTorch weights: PyTorch 1.13 state dicts load into the same architectures', function()
  for _, arch in ipairs(ARCHS) do
    it(arch .. ': outputs equal PyTorch\'s', function()
      dpl.manual_seed(1)
      local model = BUILD[arch]()
      model:eval()
      local r, meta = st.load_model(model, ROOT .. arch .. '.safetensors')
      assert.same({}, r.missing_keys)
      assert.same({}, r.unexpected_keys)
      assert.equal('pt', meta.format)
      local ys = outputs(model, io_t[arch .. '.x'])
      local tol = arch == 'mlp64' and 1e-12 or 1e-5
      local worst = 0
      for i, y in ipairs(ys) do
        local ref = io_t[arch .. '.y' .. i]
        assert.is_not_nil(ref, arch .. ': more outputs than PyTorch\'s')
        assert.equal(shape(ref), shape(y))
        assert.equal(ref.dtype, y.dtype)
        worst = math.max(worst, maxdiff(y, ref))
      end
      assert.is_nil(io_t[arch .. '.y' .. (#ys + 1)], arch .. ': fewer outputs than PyTorch\'s')
      if os.getenv('DPL_TORCH_INTEROP_VERBOSE') then print(('%s: max |dplhost - torch| = %.3g'):format(arch, worst)) end
      assert.is_true(worst <= tol, ('%s: max |dplhost - torch| = %g > %g'):format(arch, worst, tol))
    end)
  end

  it('the values land where PyTorch has them (tied weights, buffers, int64 counters)', function()
    local cnn = BUILD.cnn()
    st.load_model(cnn, ROOT .. 'cnn.safetensors')
    local ref = st.load(ROOT .. 'cnn.safetensors')
    assert.equal('int64', cnn[2].num_batches_tracked.dtype)
    assert.equal(ref['1.num_batches_tracked']:item(), cnn[2].num_batches_tracked:item())
    assert.equal(0, maxdiff(cnn[6].running_var, ref['5.running_var']))
    assert.equal(0, maxdiff(cnn[9].weight, ref['8.weight']))
    local lm = LM()
    st.load_model(lm, ROOT .. 'lm.safetensors') -- decoder.weight is not in the file: tied to encoder.weight
    assert.equal(0, maxdiff(lm.decoder.weight, st.load(ROOT .. 'lm.safetensors')['encoder.weight']))
    assert.is_true(rawequal(lm.decoder.weight, lm.encoder.weight))
  end)
end)

describe('PyTorch weights: dplhost state dicts under PyTorch names', function()
  local tmp = os.tmpname()
  after_each(function() os.remove(tmp) end)
  for _, arch in ipairs(ARCHS) do
    it(arch .. ': save_model writes PyTorch\'s keys, dtypes and shapes', function()
      dpl.manual_seed(2)
      local model = BUILD[arch]()
      if arch == 'cnn' or arch == 'param' then -- statistics, counters and power iterations of its own
        model:train()
        dpl.no_grad(function() for _ = 1, 2 do model(io_t[arch .. '.x'] * 2) end end)
      end
      model:eval()
      st.save_model(model, tmp)
      local got, meta = st.load(tmp)
      assert.equal('pt', meta.format)
      local ref = st.load(ROOT .. arch .. '.safetensors')
      if arch == 'lm' then ref['decoder.weight'] = ref['encoder.weight'] end -- both names in a state dict
      local gk, rk = {}, {}
      for k, t in pairs(got) do gk[#gk + 1] = k .. ' ' .. t.dtype .. ' ' .. shape(t) end
      for k, t in pairs(ref) do rk[#rk + 1] = k .. ' ' .. t.dtype .. ' ' .. shape(t) end
      table.sort(gk)
      table.sort(rk)
      assert.same(rk, gk)
      assert.same(model:state_dict_keys({ index_base = 0 }), (function()
        local r = {}
        for k in pairs(model:state_dict({ index_base = 0 })) do r[#r + 1] = k end
        local order = {}
        for i, k in ipairs(model:state_dict_keys({ index_base = 0 })) do order[k] = i end
        table.sort(r, function(a, b) return order[a] < order[b] end)
        return r
      end)())
      -- and back: a fresh model loads the file and computes the same outputs
      dpl.manual_seed(3)
      local again = BUILD[arch]()
      again:eval()
      st.load_model(again, tmp)
      local x = io_t[arch .. '.x']
      local a, b = outputs(model, x), outputs(again, x)
      for i = 1, #a do assert.equal(0, maxdiff(a[i], b[i])) end
      if OUT then -- for gen_torch_interop.py --check OUT
        st.save_model(model, OUT .. '/' .. arch .. '.safetensors')
        local io_out = { x = x }
        for i, y in ipairs(a) do io_out['y' .. i] = y:contiguous() end
        st.save(OUT .. '/' .. arch .. '_io.safetensors', io_out)
      end
    end)
  end
end)

describe('PyTorch weights: index_base', function()
  it('shifts only the positions of children in lists, never parameter names or ModuleDict keys', function()
    local Net = nn.Module:extend('IndexNet')
    function Net:__init()
      nn.Module.__init(self)
      self.body = nn.Sequential(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), nn.GRU(2, 2, 2))
      self.heads = nn.ModuleDict({ ['0'] = nn.Linear(2, 1), a = nn.ModuleList({ nn.Linear(2, 1) }) })
    end
    local keys = Net():state_dict_keys({ index_base = 0 })
    local set = {}
    for _, k in ipairs(keys) do set[k] = true end
    for _, k in ipairs({ 'body.0.0.weight', 'body.0.1.bias', 'body.1.weight_ih_l0', 'body.1.bias_hh_l1',
      'heads.0.weight', 'heads.a.0.bias' }) do
      assert.is_true(set[k], k)
    end
    local ones = {}
    for _, k in ipairs(Net():state_dict_keys()) do ones[k] = true end
    for _, k in ipairs({ 'body.1.1.weight', 'body.1.2.bias', 'body.2.weight_ih_l0', 'heads.0.weight', 'heads.a.1.bias' }) do
      assert.is_true(ones[k], k)
    end
    local p = nn.Sequential(nn.utils.parametrizations.spectral_norm(nn.Linear(3, 3)))
    local sd = p:state_dict({ index_base = 0 })
    assert.is_not_nil(sd['0.parametrizations.weight.0._u'])
    assert.is_not_nil(sd['0.parametrizations.weight.original'])
    assert.is_not_nil(p:state_dict()['1.parametrizations.weight.1._u'])
  end)

  it('state_dict{index_base = 0} loads back with index_base = 0, not without', function()
    local a, b = mlp(), mlp()
    b:load_state_dict(a:state_dict({ index_base = 0 }), { index_base = 0 })
    assert.equal(0, maxdiff(a[6].weight, b[6].weight))
    local r = b:load_state_dict(a:state_dict({ index_base = 0 }), { strict = false })
    assert.same({ '1.weight', '1.bias', '4.weight', '4.bias', '6.weight', '6.bias' },
      (function() local t = {} for _, k in ipairs(r.missing_keys) do t[#t + 1] = k end return t end)())
  end)

  it('a mismatch names the keys and, when only the numbering differs, the option', function()
    local m = mlp()
    local torch_sd = st.load(ROOT .. 'mlp.safetensors')
    local ok, err = pcall(m.load_state_dict, m, torch_sd)
    assert.is_false(ok)
    local msg = tostring(err)
    assert.truthy(msg:find('Missing key(s): 1.weight, 1.bias, 4.weight', 1, true), msg)
    assert.truthy(msg:find('Unexpected key(s): 0.bias, 0.weight, 3.bias', 1, true), msg)
    assert.truthy(msg:find('load_state_dict(sd, {index_base = 0})', 1, true), msg)
    -- dplhost's keys loaded as PyTorch's: the hint points back
    h.raises(function() m:load_state_dict(mlp():state_dict(), { index_base = 0 }) end, '(index_base = 1)')
    -- keys that differ otherwise: no hint
    torch_sd['extra'] = torch_sd['0.bias']
    ok, err = pcall(m.load_state_dict, m, torch_sd)
    assert.is_false(ok)
    assert.is_nil(tostring(err):find('index_base', 1, true))
    assert.truthy(tostring(err):find('extra', 1, true))
  end)

  it('LazyLinear layers inside containers take their shapes from the state dict (PyTorch\'s lazy load hook)', function()
    local m = nn.Sequential(nn.LazyLinear(16), nn.ReLU(), nn.Dropout(0.2), nn.LazyLinear(16), nn.Tanh(), nn.LazyLinear(3))
    st.load_model(m, ROOT .. 'mlp.safetensors')
    m:eval()
    assert.equal('Linear', m[4].__name)
    assert.is_true(maxdiff(outputs(m, io_t['mlp.x'])[1], io_t['mlp.y1']) <= 1e-5)
  end)

  it('checks its arguments', function()
    local m = mlp()
    h.raises(function() m:state_dict({ index_base = 2 }) end, 'state_dict: index_base must be 1')
    h.raises(function() m:load_state_dict({}, { index_base = '0' }) end, 'load_state_dict: index_base must be 1')
    h.raises(function() m:state_dict_keys(0) end, 'state_dict_keys: expected nil or an options table')
    h.raises(function() st.load_model('x.safetensors', m) end, 'safetensors.load_model: expected an nn.Module')
    h.raises(function() st.save_model(m, 3) end, 'safetensors.save_model: path must be a string')
    h.raises(function() st.save_model(m, '/tmp/x', nil, { index_bas = 0 }) end, 'index_bas')
  end)
end)

describe('PyTorch weights: nn.utils.state_dict_from_torch / state_dict_to_torch', function()
  it('rename the keys the model has, and keep the others', function()
    local m = BUILD.transformer()
    local torch_sd = st.load(ROOT .. 'transformer.safetensors')
    torch_sd.extra = torch_sd['norm.bias']
    local sd = nn.utils.state_dict_from_torch(torch_sd, m)
    assert.is_not_nil(sd['layers.1.self_attn.in_proj_weight'])
    assert.is_not_nil(sd['layers.2.linear1.weight'])
    assert.is_nil(sd['layers.0.linear1.weight'])
    assert.is_not_nil(sd.extra)
    sd.extra = nil
    m:load_state_dict(sd)
    local back = nn.utils.state_dict_to_torch(m:state_dict(), m)
    local keys = {}
    for k in pairs(back) do keys[#keys + 1] = k end
    table.sort(keys)
    local want = m:state_dict_keys({ index_base = 0 })
    table.sort(want)
    assert.same(want, keys)
    assert.equal(0, maxdiff(back['layers.1.linear2.weight'], torch_sd['layers.1.linear2.weight']))
  end)
  it('check their arguments', function()
    h.raises(function() nn.utils.state_dict_from_torch(mlp(), {}) end, 'state_dict_from_torch: expected a state dict table')
    h.raises(function() nn.utils.state_dict_to_torch({}, {}) end, 'state_dict_to_torch: expected the nn.Module')
    local m = mlp()
    h.raises(function() nn.utils.state_dict_from_torch({ ['0.weight'] = 1, ['1.weight'] = 2 }, m) end,
      "would both become '1.weight'")
  end)
end)
