-- nn_seq_spec.lua: the sequence group of dpl.nn (lua/dpl/nn/seq.lua, functional_seq.lua,
-- src/tensor/dpl_tensor_rnn.c) against PyTorch 1.13 (spec/fixtures/nn_seq_ref.lua from
-- gen_nn_seq_ref.py): RNN, LSTM, GRU (layers, directions, batch_first, unbatched, initial
-- states), the cells, MultiheadAttention (masks, kdim/vdim, bias_k/v, zero attention, per-head
-- weights), scaled_dot_product_attention, the Transformer modules: outputs, the gradients of
-- the inputs and of every parameter, in float64 and float32, contiguous and not, the fused C
-- time loop and the composed one; state dict keys and shapes; initialisation; train vs eval;
-- errors; memory; and two small trainings (an LSTM reading Fashion-MNIST rows, a Transformer
-- encoder sorting digits).
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local h = require 'spec.support.helpers'
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/nn_seq_ref.lua')

local raises = h.raises

---------------------------------------------------------------- helpers
local function flat(v, out)
  out = out or {}
  if type(v) == 'table' then for _, x in ipairs(v) do flat(x, out) end else out[#out + 1] = v end
  return out
end
local function tens(r, dt)
  if r.d == 'bool' then return dpl.tensor(r.v, { dtype = 'bool' }):reshape(r.s) end
  return dpl.tensor(r.v, { dtype = dt or 'float64' }):reshape(r.s)
end
-- got (a tensor) against expected ({v=, s=} or nested values): shape and values within tol
local function near(expected, got, tol, what)
  assert(dpl.is_tensor(got), what .. ': expected a tensor, got ' .. type(got))
  if expected.s then
    assert.are.same(expected.s, got:size(), what .. ': shape')
    expected = expected.v
  end
  local e, g = flat(expected), flat(got:double():totable())
  assert.are.equal(#e, #g, what .. ': element count')
  for i = 1, #e do
    local a, b = e[i], g[i]
    local ok = (a ~= a and b ~= b) or a == b or math.abs(a - b) <= tol * (1 + math.abs(a))
    if not ok then error(('%s: element %d: expected %.12g, got %.12g (tol %g)'):format(what, i, a, b, tol), 2) end
  end
end
-- PyTorch's ModuleList keys are 0-based (layers.0.), dplhost's 1-based (layers.1.)
local function dkey(k) return (k:gsub('layers%.(%d+)%.', function(i) return 'layers.' .. (tonumber(i) + 1) .. '.' end)) end
-- the same values, not contiguous (t's last two dims stored transposed)
local function noncontig(t)
  local v = t:transpose(-1, -2):contiguous():transpose(-1, -2)
  assert(not v:is_contiguous() or t:size(-1) == 1 or t:size(-2) == 1)
  return v
end
local function copy_opts(o, extra)
  local r = {}
  for k, v in pairs(o or {}) do r[k] = v end
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end

-- the module of a fixture case, with PyTorch's weights
local function build(c, dt)
  local o = copy_opts(c.opts, { dtype = dt })
  local m
  if c.call == 'sdpa' then return nil
  elseif c.call == 'te' then
    m = nn.TransformerEncoder(nn.TransformerEncoderLayer(c.args[1], c.args[2], o), c.args[3],
      { norm = c.norm and nn.LayerNorm(c.args[1], { dtype = dt }) or nil })
  elseif c.call == 'tr' then m = nn.Transformer(o)
  else m = nn[c.kind](c.args[1], c.args[2], o) end
  local sd = {}
  for _, e in ipairs(c.sd) do sd[dkey(e[1])] = tens(e[2], dt) end
  m:load_state_dict(sd)
  if c.train == false then m:eval() end
  return m
end

local function run(c, m, I)
  if c.call == 'rnn' then
    local hx = I.h0
    if c.kind == 'LSTM' and I.h0 then hx = { I.h0, I.c0 } end
    local out, st = m(I.x, hx)
    if c.kind == 'LSTM' then return { out = out, hn = st[1], cn = st[2] } end
    return { out = out, hn = st }
  elseif c.call == 'cell' then
    if c.kind == 'LSTMCell' then
      local h1, c1 = m(I.x, I.h0 and { I.h0, I.c0 } or nil)
      return { hn = h1, cn = c1 }
    end
    return { hn = m(I.x, I.h0) }
  elseif c.call == 'mha' then
    local q = I.q
    local k = c.self_attn and q or I.k
    local v = (c.self_attn or c.kv_same) and k or I.v
    local out, w = m(q, k, v, copy_opts(c.flags, { key_padding_mask = I.key_padding_mask, attn_mask = I.attn_mask }))
    return { out = out, w = w }
  elseif c.call == 'sdpa' then
    return { out = F.scaled_dot_product_attention(I.q, I.k, I.v, { attn_mask = I.attn_mask,
      is_causal = c.opts.is_causal, scale = c.opts.scale }) }
  elseif c.call == 'tel' then
    return { out = m(I.src, { src_mask = I.src_mask, src_key_padding_mask = I.src_key_padding_mask }) }
  elseif c.call == 'te' then
    return { out = m(I.src, { mask = I.mask, src_key_padding_mask = I.src_key_padding_mask }) }
  elseif c.call == 'tdl' then
    return { out = m(I.tgt, I.memory, { tgt_mask = I.tgt_mask, memory_mask = I.memory_mask,
      tgt_key_padding_mask = I.tgt_key_padding_mask, memory_key_padding_mask = I.memory_key_padding_mask }) }
  elseif c.call == 'tr' then
    return { out = m(I.src, I.tgt, { src_mask = I.src_mask, tgt_mask = I.tgt_mask, memory_mask = I.memory_mask,
      src_key_padding_mask = I.src_key_padding_mask, tgt_key_padding_mask = I.tgt_key_padding_mask,
      memory_key_padding_mask = I.memory_key_padding_mask }) }
  end
  error('unknown call ' .. tostring(c.call))
end

-- runs case c in dtype dt (inputs not contiguous with nc): outputs, input and parameter gradients
local function check_case(c, dt, tol, nc)
  local m = build(c, dt)
  local I = {}
  for k, r in pairs(c.inputs) do
    local t = tens(r, dt)
    if nc and t:dim() >= 2 and t:size(-1) > 1 and t:size(-2) > 1 then t = noncontig(t) end
    if t:is_floating_point() and not k:find('mask') then t = t:detach():requires_grad_() end
    I[k] = t
  end
  local outs = run(c, m, I)
  local loss
  for k, r in pairs(c.outs) do
    near(r, outs[k], tol, c.name .. ' ' .. dt .. ': output ' .. k)
    assert.are.equal(dt, outs[k].dtype)
    local term = (outs[k] * tens(c.g[k], dt)):sum()
    loss = loss and loss + term or term
  end
  for k in pairs(outs) do assert(c.outs[k], c.name .. ': unexpected output ' .. k) end
  loss:backward()
  for k, r in pairs(c.grads) do near(r, I[k].grad, tol, c.name .. ' ' .. dt .. ': gradient of ' .. k) end
  if m then
    local params = {}
    for name, p in m:named_parameters() do params[name] = p end
    local n = 0
    for k, r in pairs(c.pgrads) do
      local p = params[dkey(k)]
      assert(p, c.name .. ': no parameter ' .. dkey(k))
      near(r, p.grad or dpl.zeros_like(p), tol, c.name .. ' ' .. dt .. ': gradient of ' .. dkey(k))
      n = n + 1
    end
    assert.are.equal(n, #m:parameters(), c.name .. ': parameter count')
  end
end

local function cases(filter)
  local r = {}
  for _, c in ipairs(ref.cases) do if filter(c) then r[#r + 1] = c end end
  assert(#r > 0)
  return r
end
local function is_rnn(c) return c.call == 'rnn' or c.call == 'cell' end

---------------------------------------------------------------- against PyTorch
describe('nn sequence modules match PyTorch 1.13', function()
  for _, c in ipairs(ref.cases) do
    it(c.name .. ': float64, outputs and gradients', function() check_case(c, 'float64', 1e-9) end)
  end

  it('float32 with non-contiguous inputs (every case)', function()
    for _, c in ipairs(ref.cases) do check_case(c, 'float32', 2e-4, true) end
  end)

  it('the composed time loop (the GPU path) gives the same values and gradients', function()
    local fused = F._seq.fused
    F._seq.fused = false
    local ok, e = pcall(function()
      for _, c in ipairs(cases(is_rnn)) do check_case(c, 'float64', 1e-9) end
      for _, c in ipairs(cases(is_rnn)) do check_case(c, 'float32', 2e-4, true) end
    end)
    F._seq.fused = fused
    assert(ok, tostring(e))
  end)

  it("PyTorch's eval fast path of TransformerEncoder: zeros at padded positions (nested tensors)", function()
    local r = ref.nested
    local layer = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16, dropout = 0, batch_first = true,
      dtype = 'float64' })
    local enc = nn.TransformerEncoder(layer, 2)
    local sd = {}
    for _, e in ipairs(r.sd) do sd[dkey(e[1])] = tens(e[2]) end
    enc:load_state_dict(sd)
    enc:eval()
    local src, pad = tens(r.src), tens(r.pad)
    near(r.nested, dpl.no_grad(function() return enc(src, { src_key_padding_mask = pad }) end), 1e-9, 'no grad')
    -- with grad (a source that requires it), PyTorch takes the ordinary path
    near(r.plain, enc(src:clone():requires_grad_(), { src_key_padding_mask = pad }), 1e-9, 'with grad')
    -- enable_nested_tensor=false: the ordinary path in eval too
    local enc2 = nn.TransformerEncoder(layer, 2, { enable_nested_tensor = false })
    enc2:load_state_dict(sd)
    enc2:eval()
    near(r.plain, dpl.no_grad(function() return enc2(src, { src_key_padding_mask = pad }) end), 1e-9, 'not nested')
    -- a mask that is not left-aligned is not taken by the fast path either
    local odd = dpl.tensor({ { true, false, false, false }, { false, false, false, false } })
    local y = dpl.no_grad(function() return enc(src, { src_key_padding_mask = odd }) end)
    assert.is_true(y:select(1, 1):select(1, 1):abs():sum():item() > 0)
  end)

  it('state dict keys, their order and shapes are PyTorch\'s', function()
    local mods = {
      LSTM = nn.LSTM(10, 20, 2, { bidirectional = true }), GRU = nn.GRU(10, 20, { bias = false }),
      ['LSTM proj_size'] = nn.LSTM(10, 20, 2, { proj_size = 5, bidirectional = true }),
      RNN = nn.RNN(10, 20, 3), LSTMCell = nn.LSTMCell(10, 20), GRUCell = nn.GRUCell(10, 20),
      RNNCell = nn.RNNCell(10, 20, { bias = false }), MultiheadAttention = nn.MultiheadAttention(16, 4),
      ['MultiheadAttention kdim add_bias_kv'] = nn.MultiheadAttention(16, 4, { kdim = 5, vdim = 7, add_bias_kv = true }),
      TransformerEncoderLayer = nn.TransformerEncoderLayer(16, 4, { dim_feedforward = 32 }),
      TransformerDecoderLayer = nn.TransformerDecoderLayer(16, 4, { dim_feedforward = 32 }),
      Transformer = nn.Transformer({ d_model = 16, nhead = 4, num_encoder_layers = 2, num_decoder_layers = 1,
        dim_feedforward = 32 }),
    }
    local n = 0
    for name, want in pairs(ref.keys) do
      local m = assert(mods[name], name)
      local keys, sd = m:state_dict_keys(), m:state_dict()
      local exp_keys = {}
      for i, e in ipairs(want) do exp_keys[i] = dkey(e[1]) end
      assert.are.same(exp_keys, keys, name)
      for _, e in ipairs(want) do assert.are.same(e[2], sd[dkey(e[1])]:size(), name .. ' ' .. e[1]) end
      n = n + 1
    end
    assert.are.equal(12, n)
    -- PyTorch's names for the layers of a recurrent net
    local lstm = nn.LSTM(3, 4, 2, { bidirectional = true })
    assert.are.equal(lstm.weight_hh_l1_reverse, lstm:all_weights()[4][2])
    assert.are.same({ 16, 8 }, lstm.weight_ih_l1:size())
  end)
end)

---------------------------------------------------------------- initialisation
describe('initialisation (PyTorch\'s distributions, dpl\'s generator)', function()
  local function stats(t)
    local x = t:double()
    return x:min():item(), x:max():item(), x:mean():item(), x:std():item()
  end
  it('recurrent nets and cells: every parameter U(-1/sqrt(hidden), 1/sqrt(hidden))', function()
    dpl.manual_seed(3)
    for _, m in ipairs({ nn.LSTM(30, 100, 2), nn.GRU(30, 100, { bidirectional = true }), nn.RNN(30, 100),
      nn.LSTMCell(30, 100), nn.GRUCell(30, 100), nn.RNNCell(30, 100) }) do
      local b = 1 / math.sqrt(100)
      for name, p in m:named_parameters() do
        local lo, hi, mean, std = stats(p)
        assert(lo >= -b and hi <= b, name)
        if p:numel() >= 1000 then
          assert(lo < -0.9 * b and hi > 0.9 * b, name .. ': spans the bound')
          assert(math.abs(mean) < 0.05 * b, name .. ': mean')
          assert(math.abs(std - b / math.sqrt(3)) < 0.05 * b, name .. ': std of a uniform')
        end
      end
    end
    -- the generator is dpl's: the same seed, the same weights
    dpl.manual_seed(9)
    local a = nn.LSTM(4, 5)
    dpl.manual_seed(9)
    local b = nn.LSTM(4, 5)
    assert.is_true(a.weight_hh_l0:equal(b.weight_hh_l0))
  end)

  it('MultiheadAttention: xavier_uniform_ in_proj, zero biases, Linear out_proj, xavier_normal_ bias_k/v', function()
    dpl.manual_seed(4)
    local m = nn.MultiheadAttention(64, 8, { add_bias_kv = true })
    local b = math.sqrt(6 / (64 + 3 * 64))
    local lo, hi, _, std = stats(m.in_proj_weight)
    assert(lo >= -b and hi <= b and lo < -0.95 * b and hi > 0.95 * b)
    assert(math.abs(std - b / math.sqrt(3)) < 0.03 * b)
    assert.are.equal(0, m.in_proj_bias:abs():sum():item())
    assert.are.equal(0, m.out_proj.bias:abs():sum():item())
    local lb = 1 / math.sqrt(64) -- nn.Linear's kaiming_uniform(a = sqrt(5)) bound
    lo, hi = stats(m.out_proj.weight)
    assert(lo >= -lb and hi <= lb and hi > 0.9 * lb)
    -- bias_k [1, 1, 64]: fan_in 1, fan_out 64 -> std sqrt(2 / 65)
    local _, _, _, sk = stats(dpl.cat({ m.bias_k:reshape(-1), m.bias_v:reshape(-1) }))
    assert(math.abs(sk - math.sqrt(2 / 65)) < 0.06, sk)
    local s = nn.MultiheadAttention(8, 2, { kdim = 3, vdim = 5 })
    assert.is_nil(s.in_proj_weight)
    lo, hi = stats(s.k_proj_weight)
    assert(hi <= math.sqrt(6 / 11) and lo >= -math.sqrt(6 / 11))
  end)

  it('Transformer: every parameter with more than one dim xavier_uniform_; encoder layers are copies', function()
    dpl.manual_seed(5)
    local t = nn.Transformer({ d_model = 32, nhead = 4, num_encoder_layers = 2, num_decoder_layers = 2,
      dim_feedforward = 64 })
    for name, p in t:named_parameters() do
      if p:dim() > 1 then
        local b = math.sqrt(6 / (p:size(1) + p:size(2)))
        local lo, hi = stats(p)
        assert(lo >= -b and hi <= b and hi > 0.8 * b, name)
      end
    end
    -- deep copies: the same initial values, separate tensors
    local layer = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16 })
    local enc = nn.TransformerEncoder(layer, 3)
    assert.are.equal(3, enc.layers:len())
    for i = 1, 3 do
      local li = enc.layers[i]
      assert.are_not.equal(layer, li)
      assert.is_true(li.linear1.weight:equal(layer.linear1.weight))
      assert.is_false(li.linear1.weight:is_set_to(layer.linear1.weight))
      assert.is_true(nn.Module.is_parameter(li.self_attn.in_proj_weight))
    end
    dpl.no_grad(function() enc.layers[1].linear1.weight:add_(1) end)
    assert.is_false(enc.layers[2].linear1.weight:equal(enc.layers[1].linear1.weight))
    assert.are.equal(4 * (#layer:parameters()), #enc:parameters() + #layer:parameters())
  end)
end)

---------------------------------------------------------------- train / eval
describe('train and eval', function()
  it('LSTM/GRU dropout between layers: only in training, not after the last layer', function()
    for _, kind in ipairs({ 'LSTM', 'GRU', 'RNN' }) do
      dpl.manual_seed(1)
      local m = nn[kind](6, 8, 2, { dropout = 0.5 })
      local ref_m = nn[kind](6, 8, 2)
      ref_m:load_state_dict(m:state_dict())
      local x = dpl.randn(5, 3, 6)
      m:eval()
      local a = m(x)
      assert.is_true(a:equal((ref_m(x))), kind .. ': eval is deterministic and dropout-free')
      m:train()
      local b1, b2 = m(x), m(x)
      assert.is_false(b1:equal(a), kind .. ': training applies dropout')
      assert.is_false(b1:equal(b2), kind .. ': a fresh mask each call')
      -- one layer: nothing to drop between layers (PyTorch warns)
      local log = require 'dpl.log'
      local warn, said = log.warn, nil
      log.warn = function(f, ...) said = f:format(...) end
      local ok, one = pcall(nn[kind], 6, 8, { dropout = 0.3 })
      log.warn = warn
      assert(ok, tostring(one))
      assert.truthy(said and said:find(kind .. ': dropout option adds dropout after all but last recurrent layer', 1, true))
      assert.is_true(one(x):equal((one(x))))
    end
  end)

  it('MultiheadAttention and the Transformer layers: dropout in training only', function()
    dpl.manual_seed(2)
    local m = nn.MultiheadAttention(8, 2, { dropout = 0.5 })
    local q = dpl.randn(4, 2, 8)
    m:eval()
    local a, w = m(q, q, q)
    local a2 = m(q, q, q)
    assert.is_true(a:equal(a2))
    near({ v = dpl.ones(2, 4):totable(), s = { 2, 4 } }, w:sum(3), 1e-6, 'eval weights sum to 1')
    m:train()
    local b, wb = m(q, q, q)
    assert.is_false(b:equal(a))
    -- the returned weights are after dropout (zeros, and 2x the kept ones), as PyTorch's
    assert.is_true(wb:eq(0):any():item())
    local enc = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 16 }) -- dropout 0.1
    enc:eval()
    assert.is_true(enc(q):equal(enc(q)))
    enc:train()
    assert.is_false(enc(q):equal(enc(q)))
    -- F.scaled_dot_product_attention drops whenever dropout_p > 0 (torch 2.x)
    local y1 = F.scaled_dot_product_attention(q, q, q, { dropout_p = 0.5 })
    local y0 = F.scaled_dot_product_attention(q, q, q)
    assert.is_false(y1:equal(y0))
  end)
end)

---------------------------------------------------------------- more behaviour
describe('behaviour', function()
  it('batch sizes 1 and more agree row by row; batch_first is a transpose; unbatched is a batch of one', function()
    dpl.manual_seed(6)
    for _, kind in ipairs({ 'LSTM', 'GRU', 'RNN' }) do
      local m = nn[kind](3, 4, 2, { bidirectional = true }):double()
      local x = dpl.randn(5, 3, 3):double()
      local y = m(x)
      for b = 1, 3 do
        local yb = m(x:narrow(2, b, 1))
        near({ v = y:narrow(2, b, 1):totable(), s = yb:size() }, yb, 1e-12, kind .. ' batch row ' .. b)
        near({ v = y:select(2, b):totable(), s = { 5, 8 } }, m(x:select(2, b)), 1e-12, kind .. ' unbatched')
      end
      local bf = nn[kind](3, 4, 2, { bidirectional = true, batch_first = true }):double()
      bf:load_state_dict(m:state_dict())
      local yf, hf = bf(x:transpose(1, 2))
      near({ v = y:transpose(1, 2):totable(), s = { 3, 5, 8 } }, yf, 1e-12, kind .. ' batch_first')
      assert.are.same({ 4, 3, 4 }, (kind == 'LSTM' and hf[1] or hf):size()) -- (h_n is never batch-first)
    end
  end)

  it('LSTM returns {h_n, c_n}; h_n is the last output of each direction', function()
    local m = nn.LSTM(2, 3, { bidirectional = true }):double()
    local x = dpl.randn(4, 1, 2):double()
    local out, st = m(x)
    assert.are.equal('table', type(st))
    assert.are.equal(2, #st)
    near({ v = out:select(1, 4):narrow(2, 1, 3):totable(), s = { 1, 3 } }, st[1]:select(1, 1), 0, 'forward h_n')
    near({ v = out:select(1, 1):narrow(2, 4, 3):totable(), s = { 1, 3 } }, st[1]:select(1, 2), 0, 'reverse h_n')
    -- feeding the state back continues the sequence
    local uni = nn.LSTM(2, 3):double()
    local full = uni(x)
    local _, s1 = uni(x:narrow(1, 1, 2))
    local part = uni(x:narrow(1, 3, 2), s1)
    near({ v = full:narrow(1, 3, 2):totable(), s = { 2, 1, 3 } }, part, 1e-12, 'continued')
  end)

  it('a change of the weights in place before backward is an error, as in PyTorch', function()
    local m = nn.GRU(3, 4)
    local y = m(dpl.randn(2, 1, 3))
    dpl.no_grad(function() m.weight_hh_l0:add_(1) end)
    raises(function() y:sum():backward() end, 'modified by an inplace operation')
    -- the output may be changed in place: the node keeps its own buffers
    local l = nn.LSTM(3, 4)
    local x = dpl.randn(2, 1, 3):requires_grad_()
    local out = l(x)
    out:mul_(2)
    out:sum():backward()
    local x2 = x:detach():requires_grad_()
    local out2 = l(x2)
    out2:sum():backward()
    near({ v = (x2.grad * 2):totable(), s = x:size() }, x.grad, 1e-6, 'in-place on the output')
  end)

  it('needs no gradient work without grad (no_grad, eval), and works with frozen weights', function()
    local m = nn.LSTM(3, 4)
    local x = dpl.randn(2, 2, 3)
    local y = dpl.no_grad(function() return m(x) end)
    assert.is_false(y.requires_grad)
    m:requires_grad_(false)
    local xr = x:clone():requires_grad_()
    m(xr):sum():backward()
    assert.is_not_nil(xr.grad)
    assert.is_nil(m.weight_ih_l0.grad)
  end)

  it('MultiheadAttention: positional arguments as PyTorch\'s, need_weights=false gives nil weights', function()
    dpl.manual_seed(8)
    local m = nn.MultiheadAttention(8, 2)
    local q = dpl.randn(3, 2, 8)
    local mask = dpl.tensor({ { false, true, true }, { false, false, true }, { false, false, false } })
    local a1, w1 = m(q, q, q, nil, true, mask)
    local a2, w2 = m(q, q, q, { attn_mask = mask })
    assert.is_true(a1:equal(a2) and w1:equal(w2))
    local a3, w3 = m(q, q, q, { need_weights = false })
    assert.is_nil(w3)
    assert.are.same({ 3, 2, 8 }, a3:size())
    -- a float mask with -inf is the bool mask
    local fm = dpl.zeros(3, 3):masked_fill(mask, -math.huge)
    assert.is_true(m(q, q, q, { attn_mask = fm }):equal(a1))
    -- uint8 attn_mask reads as bool (PyTorch's deprecated byte mask)
    assert.is_true(m(q, q, q, { attn_mask = mask:to('uint8') }):equal(a1))
    -- a fully masked row gives NaN, as PyTorch
    local all = dpl.tensor({ { true, true, true }, { false, false, false }, { false, false, false } })
    local an = m(q, q, q, { attn_mask = all })
    assert.is_true(an:select(1, 1):isnan():all():item())
  end)

  it('F.scaled_dot_product_attention: a boolean mask marks the positions that may attend (torch 2.x)', function()
    local q, k, v = dpl.randn(2, 3, 4), dpl.randn(2, 3, 4), dpl.randn(2, 3, 5)
    local causal = F.scaled_dot_product_attention(q, k, v, { is_causal = true })
    local lower = dpl.ones(3, 3, { dtype = 'bool' }):tril()
    assert.is_true(causal:equal(F.scaled_dot_product_attention(q, k, v, { attn_mask = lower })))
    local first = F.scaled_dot_product_attention(q, k, v, { attn_mask = lower })
    near({ v = v:select(2, 1):totable(), s = { 2, 5 } }, first:select(2, 1), 1e-6, 'the first query sees the first key only')
  end)

  it('Transformer.generate_square_subsequent_mask and a causal decoder', function()
    local mk = nn.Transformer.generate_square_subsequent_mask(3)
    assert.are.same({ { 0, -math.huge, -math.huge }, { 0, 0, -math.huge }, { 0, 0, 0 } }, mk:totable())
    dpl.manual_seed(3)
    local dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, { dim_feedforward = 8, dropout = 0 }), 2)
    local mem = dpl.randn(4, 1, 8)
    local tgt = dpl.randn(3, 1, 8)
    local full = dec(tgt, mem, { tgt_mask = mk })
    local prefix = dec(tgt:narrow(1, 1, 2), mem, { tgt_mask = nn.Transformer.generate_square_subsequent_mask(2) })
    near({ v = full:narrow(1, 1, 2):totable(), s = { 2, 1, 8 } }, prefix, 1e-5, 'causal: the past does not see the future')
  end)

  it('activation may be a function or a module', function()
    dpl.manual_seed(4)
    local a = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 8, dropout = 0, activation = 'gelu' })
    local b = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 8, dropout = 0, activation = function(x) return x:gelu() end })
    local c = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 8, dropout = 0, activation = nn.GELU() })
    b:load_state_dict(a:state_dict())
    c:load_state_dict(a:state_dict())
    local x = dpl.randn(3, 2, 8)
    assert.is_true(a(x):equal(b(x)))
    assert.is_true(a(x):equal(c(x)))
    assert.truthy(tostring(c):find('GELU'))
  end)

  it('runs on a GPU (the CUDA plugin under the CPU emulator: the composed loop) as on the CPU', function()
    local emu = h.root .. '/build/cuda-emu/dpl_cuda_emu.so'
    local fh = io.open(emu, 'rb')
    if not fh then pending('the CUDA emulator is not built (make cuda-emu; spec/cuda_emu_spec.lua builds it)') return end
    fh:close()
    local f = h.write_file(h.tmpname('.lua'), [==[
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
dpl.manual_seed(1)
-- module m (CPU) and a copy on cuda:0: the same outputs and gradients (inputs, every parameter)
local function check(name, mk, call, ...)
  local args = { ... }
  local m, md = mk(), mk()
  md:load_state_dict(m:state_dict())
  md:to('cuda:0')
  local ca, ga = {}, {}
  for i, a in ipairs(args) do
    ca[i] = a:is_floating_point() and a:clone():requires_grad_() or a
    ga[i] = a:is_floating_point() and a:to('cuda:0'):requires_grad_() or a:to('cuda:0')
  end
  local y = call(m, unpack(ca))
  local g = dpl.randn(y:size())
  ;(y * g):sum():backward()
  local ok, err = pcall(function()
    local yd = call(md, unpack(ga))
    assert(tostring(yd.device) == 'cuda:0', tostring(yd.device))
    ;(yd * g:to('cuda:0')):sum():backward()
    local d = (yd:cpu() - y):abs():max():item()
    d = math.max(d, (ga[1].grad:cpu() - ca[1].grad):abs():max():item())
    local p1, p2 = m:parameters(), md:parameters()
    for i = 1, #p1 do d = math.max(d, (p2[i].grad:cpu() - p1[i].grad):abs():max():item()) end
    return d
  end)
  print(name, ok and 'ok' or 'error', err)
end
local q = dpl.randn(4, 2, 8)
local function call1(m, x) return (m(x)) end
check('LSTM', function() return nn.LSTM(8, 6, 2, { bidirectional = true }) end, call1, q)
check('GRU', function() return nn.GRU(8, 6, { batch_first = true }) end, call1, q)
check('RNN', function() return nn.RNN(8, 6, { nonlinearity = 'relu' }) end, call1, q)
check('LSTMCell', function() return nn.LSTMCell(8, 6) end, call1, q:select(1, 1))
check('GRUCell', function() return nn.GRUCell(8, 6) end, call1, q:select(1, 1))
check('MultiheadAttention', function() return nn.MultiheadAttention(8, 2, { add_bias_kv = true }) end, function(m, x, k)
  return (m(x, x, x, { attn_mask = nn.Transformer.generate_square_subsequent_mask(4, x.device), key_padding_mask = k }))
end, q, dpl.tensor({ { false, false, false, true }, { false, false, false, false } }))
check('TransformerEncoderLayer', function() return nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 8, dropout = 0 }) end, call1, q)
check('Transformer', function() return nn.Transformer({ d_model = 8, nhead = 2, num_encoder_layers = 1,
  num_decoder_layers = 1, dim_feedforward = 8, dropout = 0 }) end, function(m, x) return m(x, x:narrow(1, 1, 3)) end, q)
local qd = q:to('cuda:0')
local y = F.scaled_dot_product_attention(qd, qd, qd, { is_causal = true })
print('sdpa', 'ok', (y:cpu() - F.scaled_dot_product_attention(q, q, q, { is_causal = true })):abs():max():item())
]==])
    local out, err, rc = h.sh(h.q(h.root .. '/scripts/cuda-emu/run-ops.sh') .. ' ' .. h.q(f), { timeout = 300 })
    os.remove(f)
    assert.are.equal(0, rc, out .. err)
    local n = 0
    for name, status, d in out:gmatch('([%w_]+)\t(%a+)\t([^\n]*)') do
      assert.are.equal('ok', status, name .. ': ' .. d)
      assert(tonumber(d) and tonumber(d) < 1e-5, name .. ': ' .. d)
      n = n + 1
    end
    assert.are.equal(9, n, out .. err)
  end)

  it('runs on a simulated GPU (host memory, the fused loop) as on the CPU', function()
    local out, err, rc = h.run_chunk([[
local dpl = require 'dpl'
local nn = dpl.nn
dpl.manual_seed(1)
local function check(m, ...)
  local args = { ... }
  local y = m(unpack(args))
  local dev = {}
  for i, a in ipairs(args) do dev[i] = a:to('cuda:0') end
  m:to('cuda:0')
  local yd = m(unpack(dev))
  assert(tostring(yd.device) == 'cuda:0', tostring(yd.device))
  return (yd:cpu() - y):abs():max():item()
end
local q = dpl.randn(4, 2, 8)
print('lstm', check(nn.LSTM(8, 6, 2, { bidirectional = true }), q))
print('gru', check(nn.GRU(8, 6), q))
print('enc', check(nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 8, dropout = 0 }), q))
]], 'DPL_VIRTUAL_GPUS=1')
    assert.are.equal(0, rc, out .. err)
    for _, k in ipairs({ 'lstm', 'gru', 'enc' }) do
      local d = tonumber(out:match(k .. '\t(%S+)'))
      assert(d and d < 1e-6, k .. ': ' .. out .. err)
    end
  end)
end)

---------------------------------------------------------------- errors
describe('errors name the module, the expected and the received value', function()
  it('recurrent constructors', function()
    raises(function() nn.LSTM(10, 20, { num_layer = 2 }) end, "LSTM: unknown option 'num_layer' (did you mean 'num_layers'?)")
    raises(function() nn.LSTM(10, 0) end, 'LSTM: hidden_size must be an integer >= 1, got 0')
    raises(function() nn.GRU(10.5, 4) end, 'GRU: input_size must be an integer >= 0, got 10.5')
    raises(function() nn.RNN(10, 20, 0) end, 'RNN: num_layers must be an integer >= 1, got 0')
    raises(function() nn.LSTM(10, 20, { dropout = 1.5 }) end, 'LSTM: dropout should be a number in range [0, 1]')
    raises(function() nn.LSTM(10, 20, 2, { num_layers = 2 }) end, 'num_layers given twice')
    raises(function() nn.GRU(10, 20, { nonlinearity = 'relu' }) end, "GRU: unknown option 'nonlinearity'")
    raises(function() nn.RNN(10, 20, { nonlinearity = 'sigmoid' }) end, "RNN: unknown nonlinearity 'sigmoid'")
    raises(function() nn.LSTM(10, 20, { bidirectional = 'yes' }) end, 'LSTM: bidirectional must be true or false, got yes')
    raises(function() nn.LSTM(10, 20, { proj_size = 20 }) end, 'LSTM: proj_size has to be smaller than hidden_size')
    raises(function() nn.LSTM(10, 20, { proj_size = -1 }) end, 'proj_size should be a positive integer or zero')
    raises(function() nn.GRU(10, 20, { proj_size = 5 }) end, "GRU: unknown option 'proj_size'")
    raises(function() nn.LSTMCell(4, 5, { nonlinearity = 'tanh' }) end, "LSTMCell: unknown option 'nonlinearity'")
    raises(function() nn.RNNCell(4, 5, { nonlinearity = 'x' }) end, "RNNCell: unknown nonlinearity 'x'")
  end)

  it('recurrent forward', function()
    local m = nn.LSTM(10, 20)
    m._name = 'enc'
    raises(function() m(dpl.randn(2, 3, 4, 10)) end,
      "LSTM 'enc': expected input of 3 dims [T, B, 10] or 2 dims (unbatched) [T, 10], got shape [2, 3, 4, 10]")
    raises(function() m(dpl.randn(5, 3, 7)) end,
      "LSTM 'enc': input.size(-1) must be equal to input_size. Expected 10, got 7 (input [5, 3, 7])")
    raises(function() m(dpl.randn(5, 3, 10):double()) end, "input must have dtype float32 (the parameters'), got float64")
    raises(function() m(dpl.zeros(5, 3, 10, { dtype = 'int64' })) end, 'got int64')
    raises(function() m('x') end, "LSTM 'enc': expected a tensor as input, got string")
    raises(function() m(dpl.randn(0, 3, 10)) end, 'expected a sequence of length > 0, got input [0, 3, 10]')
    raises(function() m(dpl.randn(5, 3, 10), dpl.randn(1, 3, 20)) end,
      'hx must be a list {h_0, c_0} of two tensors, got a tensor')
    raises(function() m(dpl.randn(5, 3, 10), { dpl.randn(2, 3, 20), dpl.randn(1, 3, 20) }) end,
      'expected hx[1] (h_0) of shape [1, 3, 20], got [2, 3, 20]')
    raises(function() m(dpl.randn(5, 3, 10), { dpl.randn(1, 3, 20), dpl.randn(3, 20) }) end,
      'for batched 3-d input, hx[2] (c_0) should be 3-d [1, 3, 20], got shape [3, 20]')
    raises(function() m(dpl.randn(5, 10), { dpl.randn(1, 3, 20), dpl.randn(1, 3, 20) }) end,
      'for unbatched 2-d input, hx[1] (h_0) should be 2-d [1, 20], got shape [1, 3, 20]')
    local p = nn.LSTM(10, 20, { proj_size = 4 })
    raises(function() p(dpl.randn(5, 3, 10), { dpl.randn(1, 3, 20), dpl.randn(1, 3, 20) }) end,
      'expected hx[1] (h_0) of shape [1, 3, 4], got [1, 3, 20]')
    local g = nn.GRU(4, 5, { batch_first = true })
    raises(function() g(dpl.randn(2, 3, 4), dpl.randn(1, 3, 5)) end, 'GRU: expected hx of shape [1, 2, 5], got [1, 3, 5]')
    raises(function() g(dpl.randn(2, 3, 4), dpl.randn(1, 2, 5):double()) end, "hx must have dtype float32 (the input's), got float64")
    local c = nn.LSTMCell(10, 20)
    raises(function() c(dpl.randn(3, 7)) end, 'LSTMCell: input has inconsistent input_size: got 7, expected 10')
    raises(function() c(dpl.randn(2, 3, 10)) end, 'LSTMCell: expected input to be 1-d or 2-d ([B, 10] or [10]), got shape [2, 3, 10]')
    raises(function() c(dpl.randn(3, 10), dpl.randn(3, 20)) end, 'LSTMCell: hx must be a list {h_0, c_0}')
    raises(function() nn.GRUCell(10, 20)(dpl.randn(3, 10), dpl.randn(2, 20)) end,
      'GRUCell: expected hx of shape [3, 20], got [2, 20]')
    raises(function() nn.RNNCell(10, 20)(dpl.randn(10), dpl.randn(3, 20)) end, 'RNNCell: expected hx of shape [20], got [3, 20]')
  end)

  it('attention', function()
    raises(function() nn.MultiheadAttention(10, 3) end, 'MultiheadAttention: embed_dim must be divisible by num_heads, got 10 and 3')
    raises(function() nn.MultiheadAttention(8, 2, { drop = 0.1 }) end, "MultiheadAttention: unknown option 'drop'")
    raises(function() nn.MultiheadAttention(8, 2, { dropout = -1 }) end, 'MultiheadAttention: dropout should be a number in range [0, 1]')
    local m = nn.MultiheadAttention(8, 2)
    local q = dpl.randn(3, 2, 8)
    raises(function() m(dpl.randn(3, 2, 6), q, q) end, 'MultiheadAttention(embed_dim=8): query has shape [3, 2, 6], expected the last dim to be 8')
    raises(function() m(q, dpl.randn(4, 8), dpl.randn(4, 8)) end, 'expected key and value to be 3-d, got [4, 8] and [4, 8]')
    raises(function() m(q, q, q, { attn_mask = dpl.zeros(3, 4, { dtype = 'bool' }) }) end,
      'the 2-d attn_mask has shape [3, 4], but should be [3, 3] (L, S)')
    raises(function() m(q, q, q, { attn_mask = dpl.zeros(3, 3, 3, { dtype = 'bool' }) }) end,
      'the 3-d attn_mask has shape [3, 3, 3], but should be [4, 3, 3] (N * num_heads, L, S)')
    raises(function() m(q, q, q, { attn_mask = dpl.zeros(3, 3, { dtype = 'int32' }) }) end,
      'only float, byte and bool attn_mask are supported, got int32')
    raises(function() m(q, q, q, { key_padding_mask = dpl.zeros(2, 3, { dtype = 'int64' }) }) end,
      'only bool and floating types of key_padding_mask are supported, got int64')
    raises(function() m(q, q, q, { key_padding_mask = dpl.zeros(2, 4, { dtype = 'bool' }) }) end,
      'expected key_padding_mask of shape [2, 3] (N, S), got [2, 4]')
    raises(function() m(q, q, q, { need_weight = false }) end, "MultiheadAttention.forward: unknown option 'need_weight' (did you mean 'need_weights'?)")
    raises(function() m(q, q, q, { need_weights = 'no' }) end, 'need_weights must be a boolean, got string')
    raises(function() m(q, dpl.randn(4, 3, 8), dpl.randn(4, 3, 8)) end, 'must have the same batch size')
    raises(function() m(q, dpl.randn(4, 2, 8), dpl.randn(5, 2, 8)) end, 'must agree in their sequence and batch dims')
    raises(function() m(q, q, q:double()) end, 'MultiheadAttention')
    local s = nn.MultiheadAttention(8, 2, { kdim = 3, vdim = 5 })
    raises(function() s(q, dpl.randn(4, 2, 4), dpl.randn(4, 2, 5)) end, 'key has shape [4, 2, 4], expected the last dim to be kdim=3')
    local sdpa = F.scaled_dot_product_attention
    raises(function() sdpa(dpl.randn(2, 3, 4), dpl.randn(2, 5, 3), dpl.randn(2, 5, 4)) end,
      'scaled_dot_product_attention: expected query [..., L, E], key [..., S, E] and value [..., S, Ev] of one dtype, got [2, 3, 4], [2, 5, 3]')
    raises(function() sdpa(q, q, q, { is_causal = true, attn_mask = dpl.ones(3, 2, { dtype = 'bool' }) }) end,
      'attn_mask and is_causal cannot both be given')
    raises(function() sdpa(q, q, q, { dropout_p = 2 }) end, 'dropout_p must be a probability in [0, 1], got 2')
    raises(function() sdpa(q, q, q, { attn_mask = dpl.ones(5, 5, { dtype = 'bool' }) }) end,
      'attn_mask of shape [5, 5] does not broadcast to the scores [..., L, S] [3, 2, 2]')
    raises(function() sdpa(q, q, q, { attn_mask = dpl.ones(2, 2, { dtype = 'int64' }) }) end,
      'attn_mask must be a bool or floating-point tensor, got int64')
    raises(function() sdpa(q, q, q, { causal = true }) end, "scaled_dot_product_attention: unknown option 'causal'; accepted options: attn_mask, dropout_p, is_causal, scale")
    raises(function() sdpa(dpl.randn(4), q, q) end, 'query must have at least 2 dims, got shape [4]')
    raises(function() F.scaled_dot_product_attention('q', q, q) end, 'input must be a tensor, got string')
  end)

  it('Transformer modules', function()
    raises(function() nn.TransformerEncoderLayer(8, 3) end, 'embed_dim must be divisible by num_heads, got 8 and 3')
    raises(function() nn.TransformerEncoderLayer(8, 2, { activation = 'tanh' }) end,
      "TransformerEncoderLayer: activation should be relu/gelu, not 'tanh'")
    raises(function() nn.TransformerEncoderLayer(8, 2, { dim_feedforwards = 8 }) end,
      "TransformerEncoderLayer: unknown option 'dim_feedforwards' (did you mean 'dim_feedforward'?)")
    raises(function() nn.TransformerDecoderLayer(8, 2, { dropout = 2 }) end, 'TransformerDecoderLayer: dropout should be a number in range [0, 1]')
    raises(function() nn.TransformerEncoder('x', 2) end, 'TransformerEncoder: expected a TransformerEncoderLayer as the layer, got string')
    local layer = nn.TransformerEncoderLayer(8, 2, { dim_feedforward = 8 })
    raises(function() nn.TransformerEncoder(layer, 0) end, 'TransformerEncoder: num_layers must be an integer >= 1, got 0')
    raises(function() nn.TransformerEncoder(layer, 2, { norm = 'ln' }) end, 'TransformerEncoder: norm must be a module')
    raises(function() nn.TransformerDecoder(layer, 2, { mask_check = false }) end, "TransformerDecoder: unknown option 'mask_check'")
    raises(function() layer(dpl.randn(3, 2, 6)) end,
      'TransformerEncoderLayer(d_model=8): src has shape [3, 2, 6], expected [S, N, 8] or unbatched [S, 8]')
    raises(function() layer(dpl.randn(1, 3, 2, 8)) end, 'src has shape [1, 3, 2, 8], expected [S, N, 8]')
    raises(function() layer(dpl.randn(3, 2, 8):double()) end, "TransformerEncoderLayer: src must have dtype float32 (the parameters'), got float64")
    local dl = nn.TransformerDecoderLayer(8, 2, { dim_feedforward = 8, batch_first = true })
    raises(function() dl(dpl.randn(2, 3, 8), dpl.randn(2, 3, 4)) end,
      'TransformerDecoderLayer(d_model=8): memory has shape [2, 3, 4], expected [N, S, 8] or unbatched [S, 8]')
    raises(function() dl(dpl.randn(2, 3, 8), dpl.randn(3, 3, 8)) end, 'must have the same batch size')
    raises(function() layer(dpl.randn(3, 2, 8), { mask = dpl.zeros(3, 3) }) end,
      "TransformerEncoderLayer.forward: unknown option 'mask'")
    local enc = nn.TransformerEncoder(layer, 1)
    raises(function() enc(dpl.randn(3, 2, 8), { src_key_padding_mask = dpl.zeros(2, 3, { dtype = 'int64' }) }) end,
      'TransformerEncoder: only bool and floating types of key_padding_mask are supported, got int64')
    local t = nn.Transformer({ d_model = 8, nhead = 2, num_encoder_layers = 1, num_decoder_layers = 1, dim_feedforward = 8 })
    raises(function() t(dpl.randn(3, 2, 8), dpl.randn(4, 3, 8)) end, 'Transformer: the batch number of src and tgt must be equal')
    raises(function() t(dpl.randn(3, 2, 8), dpl.randn(4, 2, 6)) end, 'Transformer: the feature number of src and tgt must be equal to d_model=8')
    raises(function() nn.Transformer({ d_model = 8, nhead = 2, custom_encoder = 'x' }) end, 'Transformer: custom_encoder must be a module')
  end)

  it('the C kernels check their operands (never a crash) and refuse GPU memory', function()
    local C = require('dpl.capi').C
    local capi = require 'dpl.capi'
    local function fails(st, text)
      assert.are_not.equal(0, st)
      local msg = capi.last_error()
      assert(msg:find(text, 1, true), ('expected %q in %q'):format(text, msg))
    end
    local pre, cp = dpl.randn(2, 8), dpl.randn(2, 2)
    local hh, cc = dpl.empty(2, 2), dpl.empty(2, 2)
    fails(C.dpl_lstm_cell_forward(pre, cp:double(), hh, cc, nil), 'lstm_cell: expected c_prev of dtype float32, got float64')
    fails(C.dpl_lstm_cell_forward(dpl.randn(2, 7), cp, hh, cc, nil), 'lstm_cell: expected gates of shape [B, 4 * hidden_size], got [2, 7]')
    fails(C.dpl_lstm_cell_forward(pre, cp, dpl.empty(3, 2), cc, nil), 'lstm_cell: expected h of shape [2, 2], got [3, 2]')
    fails(C.dpl_lstm_cell_forward(pre, cp:t(), hh, cc, nil), 'lstm_cell: c_prev must be contiguous')
    fails(C.dpl_gru_cell_forward(pre:int(), cp, cp, hh, nil), 'gru_cell: expected float32 or float64 tensors, got int32')
    fails(C.dpl_rnn_cell_backward(0, cp, nil, hh), 'rnn_tanh_cell_backward: h is NULL')
    fails(C.dpl_gru_cell_backward(dpl.randn(2, 2), dpl.randn(2, 8), cp, nil, dpl.empty(2, 6), dpl.empty(2, 5), hh),
      'gru_cell_backward: expected dhh of shape [2, 6], got [2, 5]')
    -- a tensor in GPU memory (the flag set by hand): "not implemented on cuda", as every CPU kernel
    local bit = require 'bit'
    local v = pre:view(2, 8)
    v._flags = bit.bor(v._flags, 2)
    local st = C.dpl_lstm_cell_forward(v, cp, hh, cc, nil)
    v._flags = bit.band(v._flags, bit.bnot(2))
    fails(st, 'lstm_cell: not implemented on cuda')
  end)
end)

---------------------------------------------------------------- memory
describe('memory', function()
  it('returns every byte after forward and backward (buffers, saved activations, gradients)', function()
    local function work()
      local lstm, gru = nn.LSTM(6, 8, 2, { bidirectional = true }), nn.GRU(6, 8, { batch_first = true })
      local mha = nn.TransformerEncoderLayer(6, 2, { dim_feedforward = 12 })
      local cell = nn.LSTMCell(6, 8)
      for _ = 1, 3 do
        local x = dpl.randn(5, 3, 6):requires_grad_()
        local y, st = lstm(x)
        local z = gru(x)
        local hc, cc = cell(x:select(1, 1))
        ;(y:sum() + st[2]:sum() + z:sum() + mha(x):sum() + hc:sum() + cc:sum()):backward()
        local _ = dpl.no_grad(function() return lstm(x) end)
      end
    end
    work()
    local before = h.settle_memory()
    work()
    local after = h.settle_memory()
    assert(after.current_bytes <= before.current_bytes, ('%d bytes leaked'):format(after.current_bytes - before.current_bytes))
    assert(after.live_storages <= before.live_storages, ('%d storages leaked'):format(after.live_storages - before.live_storages))
  end)

  it('a step at a time (a cell, T = 1 generation) does not copy W_hh^T each call', function()
    -- the copy of [4H, H] floats cost more than the step itself: LSTM 2x256 at T = 1 went 0.32 -> 0.92 ms
    local H = 256
    local cell, lstm, gru = nn.LSTMCell(16, H), nn.LSTM(16, H, 2), nn.GRU(16, H)
    local x = dpl.randn(1, 16)
    local function bytes(f)
      local a = dpl.memory_stats('cpu').total_bytes
      dpl.no_grad(f)
      return dpl.memory_stats('cpu').total_bytes - a
    end
    local hh, cc = dpl.zeros(1, H), dpl.zeros(1, H)
    local wbytes = 3 * H * H * 4 -- one copy of GRU's W_hh (LSTM's is 4/3 of it)
    local b1 = bytes(function() for _ = 1, 10 do hh, cc = cell(x, { hh, cc }) end end)
    local b2 = bytes(function() local st; for _ = 1, 10 do local _; _, st = lstm(x:view(1, 1, 16), st) end end)
    local b3 = bytes(function() local st; for _ = 1, 10 do local _; _, st = gru(x:view(1, 1, 16), st) end end)
    assert(b1 < wbytes, ('LSTMCell: %d bytes allocated by 10 steps'):format(b1))
    assert(b2 < wbytes, ('LSTM: %d bytes allocated by 10 steps'):format(b2))
    assert(b3 < wbytes, ('GRU: %d bytes allocated by 10 steps'):format(b3))
  end)
end)

---------------------------------------------------------------- training
describe('the modules learn', function()
  it('an LSTM reading Fashion-MNIST rows (28 steps of 28) beats chance by far in a few hundred steps', function()
    local ok_ds, train = pcall(dpl.datasets.FashionMNIST, { train = true })
    if not ok_ds then pending('no Fashion-MNIST: ' .. tostring(train)) return end
    local test = dpl.datasets.FashionMNIST { train = false }
    dpl.manual_seed(0)
    local Net = nn.Module:extend('RowLSTM')
    function Net:__init()
      nn.Module.__init(self)
      self.rnn = nn.LSTM(28, 64, { batch_first = true })
      self.head = nn.Linear(64, 10)
    end
    function Net:forward(img)
      local _, st = self.rnn(img:view(img:size(1), 28, 28))
      return self.head(st[1]:select(1, 1))
    end
    local net = Net()
    local opt = dpl.optim.Adam(net:parameters(), { lr = 5e-3 })
    local loader = dpl.data.DataLoader(dpl.data.Subset(train, dpl.data.range(1, 9600)),
      { batch_size = 64, shuffle = true, seed = 1 })
    local first, last
    for batch in loader:iter() do
      local loss = F.cross_entropy(net(batch[1]), batch[2])
      opt:zero_grad()
      loss:backward()
      opt:step()
      first = first or loss:item()
      last = loss:item()
    end
    net:eval()
    local b = test:get_batch(dpl.data.range(1, 1000))
    local acc = dpl.no_grad(function() return net(b[1]):argmax(2):eq(b[2]):double():mean():item() end)
    assert(acc > 0.6, ('accuracy %.3f after 150 steps (chance 0.1); loss %.3f -> %.3f'):format(acc, first, last))
  end)

  it('a tiny Transformer encoder learns to sort short digit sequences', function()
    dpl.manual_seed(0)
    local V, L, D = 10, 6, 32
    local Net = nn.Module:extend('Sorter')
    function Net:__init()
      nn.Module.__init(self)
      self.emb = nn.Embedding(V, D)
      self.pos = nn.Parameter(dpl.randn(L, D) * 0.1)
      self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(D, 4, { dim_feedforward = 64, dropout = 0,
        batch_first = true }), 2)
      self.out = nn.Linear(D, V)
    end
    function Net:forward(ids) return self.out(self.enc(self.emb(ids) + self.pos)) end
    local net = Net()
    local opt = dpl.optim.Adam(net:parameters(), { lr = 3e-3 })
    local function batch(n)
      local x = dpl.randint(1, V + 1, { n, L })
      return x, (x:sort(2))
    end
    for _ = 1, 300 do
      local x, y = batch(64)
      local loss = F.cross_entropy(net(x):reshape(-1, V), y:reshape(-1))
      opt:zero_grad()
      loss:backward()
      opt:step()
    end
    net:eval()
    local x, y = batch(500)
    local acc = dpl.no_grad(function() return net(x):argmax(3):eq(y):double():mean():item() end)
    assert(acc > 0.9, ('per-position accuracy %.3f (chance 0.1)'):format(acc))
  end)
end)
