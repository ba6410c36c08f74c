-- nn_rnn_utils_spec.lua: nn.utils.rnn (lua/dpl/nn/utils_rnn.lua) and RNN/LSTM/GRU on a
-- PackedSequence against PyTorch 1.13 (spec/fixtures/nn_rnn_utils_ref.lua from
-- gen_nn_rnn_utils_ref.py): pad_sequence, pack_sequence (unsorted), pack_padded_sequence /
-- pad_packed_sequence, and a packed batch through 2-layer bidirectional LSTM (also proj_size), GRU
-- and RNN with initial states: outputs, h_n, c_n and the gradients of the input, the states and
-- every parameter. Also nn.Embedding.from_pretrained.
local dpl = require 'dpl'
local nn = dpl.nn
local R = nn.utils.rnn
local h = require 'spec.support.helpers'
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/nn_rnn_utils_ref.lua')

local raises = h.raises

local function tens(r) return dpl.tensor(r.v, { dtype = 'float64' }):reshape(r.s) end
local function close(expected, got, tol, what)
  if not dpl.is_tensor(expected) then expected = tens(expected) end
  assert.are.same(expected:size(), got:size(), what .. ': shape')
  local d = (expected - got:double()):abs():max():item()
  assert(d <= tol, ('%s: max abs diff %g > %g'):format(what, d, tol))
end
local function seqs()
  local l = {}
  for i, s in ipairs(ref.seqs) do l[i] = tens(s) end
  return l
end
local function plus1(l) local r = {} for i, v in ipairs(l) do r[i] = v + 1 end return r end

describe('nn.utils.rnn', function()
  it('pad_sequence matches PyTorch, time-major and batch-first with a padding value', function()
    close(tens(ref.pad_tf), R.pad_sequence(seqs()), 0, 'time-major')
    close(tens(ref.pad_bf), R.pad_sequence(seqs(), true, -1), 0, 'batch_first')
    close(tens(ref.pad_bf), R.pad_sequence(seqs(), { batch_first = true, padding_value = -1 }), 0, 'options')
  end)

  it('pack_sequence(enforce_sorted=false): data, batch_sizes and (1-based) indices as PyTorch', function()
    local ps = R.pack_sequence(seqs(), false)
    assert.is_true(R.is_packed(ps))
    close(tens(ref.pack.data), ps.data, 0, 'data')
    assert.are.same(ref.pack.batch_sizes, ps.batch_sizes:totable())
    assert.are.equal('int64', ps.batch_sizes.dtype)
    assert.are.same(plus1(ref.pack.sorted), ps.sorted_indices:totable())
    assert.are.same(plus1(ref.pack.unsorted), ps.unsorted_indices:totable())
    assert.truthy(tostring(ps):find('PackedSequence', 1, true))
  end)

  it('pad_packed_sequence restores the batch order, the lengths and the padding; round trips', function()
    local s = seqs()
    local padded = R.pad_sequence(s, true)
    local ps = R.pack_padded_sequence(padded, dpl.tensor(ref.lens), { batch_first = true, enforce_sorted = false })
    local back, lens = R.pad_packed_sequence(ps, true)
    close(padded, back, 0, 'round trip')
    assert.are.same(ref.lens, lens:totable())
    assert.are.equal('int64', lens.dtype)
    local tf, _ = R.pad_packed_sequence(ps, { padding_value = 7, total_length = 6 })
    assert.are.same({ 6, 5, 3 }, tf:size())
    assert.are.equal(7, tf[6][1][1]:item())
    assert.are.equal(7, tf[2][3][2]:item()) -- sequence 3 has length 1
    local un = R.unpack_sequence(ps)
    for i = 1, #s do close(s[i], un[i], 0, 'unpack_sequence ' .. i) end
    local up = R.unpad_sequence(padded, lens, true)
    for i = 1, #s do close(s[i], up[i], 0, 'unpad_sequence ' .. i) end
  end)

  it('packing is differentiable: the gradient reaches the padded input at the valid steps only', function()
    local x = dpl.randn(4, 3, 2, { dtype = 'float64' }):requires_grad_()
    local ps = R.pack_padded_sequence(x, { 4, 2, 1 })
    local back = R.pad_packed_sequence(ps)
    back:sum():backward()
    local g = x.grad
    assert.are.equal(7 * 2, g:sum():item())
    assert.are.equal(0, g[3][2]:abs():sum():item())
    assert.are.equal(2, g[1][3]:sum():item())
  end)

  it('errors: unsorted lengths with enforce_sorted, lengths out of range, the wrong count, bad options', function()
    local x = dpl.randn(4, 3, 2)
    raises(function() R.pack_padded_sequence(x, { 2, 4, 1 }) end, 'must be sorted in decreasing order')
    raises(function() R.pack_padded_sequence(x, { 4, 0, 0 }) end, 'has to be greater than 0')
    raises(function() R.pack_padded_sequence(x, { 5, 2, 1 }) end, 'exceeds the sequence length 4')
    raises(function() R.pack_padded_sequence(x, { 4, 2 }) end, 'expected 3 lengths')
    raises(function() R.pack_padded_sequence(x, { 4, 2, 1 }, { batch_frist = true }) end, "unknown option 'batch_frist'")
    raises(function() R.pad_packed_sequence(x) end, 'expected a PackedSequence')
    local ps = R.pack_padded_sequence(x, { 4, 2, 1 })
    raises(function() R.pad_packed_sequence(ps, false, 0, 3) end, 'total_length=3 and max sequence length being 4')
    raises(function() R.pad_sequence({}) end, 'empty list')
    raises(function() R.pad_sequence({ dpl.randn(2, 3), dpl.randn(2, 4) }) end, 'trailing dims must match')
    raises(function() R.pack_sequence({ dpl.randn(1, 3), dpl.randn(2, 3) }) end, 'pack_sequence: `lengths` array must be sorted')
  end)
end)

describe('RNN, LSTM, GRU on a PackedSequence', function()
  for ci, c in ipairs(ref.cases) do
    local label = c.name .. (c.opts.proj_size and ' proj_size' or '')
    it(label .. ' (2 layers, bidirectional, h0 given, unsorted batch): outputs and gradients match PyTorch', function()
      local o = { bidirectional = true, batch_first = true, dtype = 'float64', proj_size = c.opts.proj_size }
      local m = nn[c.name](3, 4, 2, o)
      local sd = {}
      for k, v in pairs(c.sd) do sd[k] = tens(v) end
      m:load_state_dict(sd)
      local x = R.pad_sequence(seqs(), true):clone():requires_grad_()
      local h0 = tens(c.h0):requires_grad_()
      local c0 = c.c0 and tens(c.c0):requires_grad_()
      local pk = R.pack_padded_sequence(x, dpl.tensor(ref.lens), true, false)
      local out, hn, cn
      if c0 then
        local st
        out, st = m(pk, { h0, c0 })
        hn, cn = st[1], st[2]
      else
        out, hn = m(pk, h0)
      end
      assert.is_true(R.is_packed(out))
      local po, lens = R.pad_packed_sequence(out, true, 0, 6)
      assert.are.same(c.lengths, lens:totable())
      close(c.odata, out.data, 1e-12, 'packed output data')
      close(c.po, po, 1e-12, 'padded output')
      close(c.hn, hn, 1e-12, 'h_n')
      if cn then close(c.cn, cn, 1e-12, 'c_n') end
      local loss = (po * tens(c.g)):sum() + (hn ^ 2):sum()
      if cn then loss = loss + (cn * 0.5):sum() end
      loss:backward()
      close(c.gx, x.grad, 1e-12, 'grad input')
      close(c.gh0, h0.grad, 1e-12, 'grad h0')
      if c0 then close(c.gc0, c0.grad, 1e-12, 'grad c0') end
      for k, p in m:named_parameters() do close(c.pgrads[k], p.grad, 1e-11, 'grad ' .. k) end
      local _ = ci
    end)
  end

  it('a sorted packed batch without initial state equals running each sequence alone', function()
    dpl.manual_seed(3)
    local m = nn.GRU(3, 4, { bidirectional = true, dtype = 'float64' })
    local s = { dpl.randn(5, 3, { dtype = 'float64' }), dpl.randn(5, 3, { dtype = 'float64' }),
      dpl.randn(2, 3, { dtype = 'float64' }) }
    local out, hn = m(R.pack_sequence(s))
    local po = R.pad_packed_sequence(out)
    for b = 1, 3 do
      local ob, hb = m(s[b])
      close(ob, po:select(2, b):narrow(1, 1, s[b]:size(1)), 1e-13, 'output ' .. b)
      close(hb, hn:select(2, b), 1e-13, 'h_n ' .. b)
    end
  end)

  it('LSTM (also proj_size): the one packed time loop (live rows per step) equals running the sequences by length', function()
    local FS = nn.functional._seq
    local function run(m, x, lens, sorted, hx)
      m:zero_grad()
      local xx = x:detach():requires_grad_(true)
      if hx then hx[1].grad, hx[2].grad = nil, nil end
      local out, st = m(R.pack_padded_sequence(xx, lens, { enforce_sorted = sorted }), hx)
      dpl.manual_seed(5)
      local loss = (out.data * dpl.randn(out.data:size(), { dtype = 'float64' })):sum()
        + (st[1] * dpl.randn(st[1]:size(), { dtype = 'float64' })):sum()
        + (st[2] * dpl.randn(st[2]:size(), { dtype = 'float64' })):sum()
      loss:backward()
      local r = { out = out.data, h_n = st[1], c_n = st[2], gx = xx.grad }
      for k, p in m:named_parameters() do r['grad ' .. k] = p.grad:clone() end
      if hx then r.gh0, r.gc0 = hx[1].grad, hx[2].grad end
      return r
    end
    for _, proj in ipairs({ 0, 3 }) do
      for _, bidir in ipairs({ false, true }) do
        for _, sorted in ipairs({ true, false }) do
          dpl.manual_seed(1)
          local m = nn.LSTM(6, 5, 2, { bidirectional = bidir, proj_size = proj, dtype = 'float64' })
          local D = bidir and 2 or 1
          local lens = sorted and { 7, 7, 5, 3, 3, 1 } or { 3, 7, 1, 5, 7, 3 }
          local x = dpl.randn(7, 6, 6, { dtype = 'float64' })
          local hx = { dpl.randn(2 * D, 6, proj > 0 and proj or 5, { dtype = 'float64' }):requires_grad_(),
            dpl.randn(2 * D, 6, 5, { dtype = 'float64' }):requires_grad_() }
          for _, st in ipairs({ false, hx }) do
            local a = run(m, x, lens, sorted, st or nil)
            FS.packed = false
            local okb, b = pcall(run, m, x, lens, sorted, st or nil)
            FS.packed = true
            assert(okb, b)
            for k, v in pairs(b) do close(v, a[k], 1e-13, 'proj_size ' .. proj .. ' ' .. k) end
          end
        end
      end
    end
  end)

  it('GRU, RNN (tanh, relu): the one packed time loop equals running the sequences by length', function()
    local FS = nn.functional._seq
    local function run(m, x, lens, sorted, h0)
      m:zero_grad()
      local xx = x:detach():requires_grad_(true)
      if h0 then h0.grad = nil end
      local out, hn = m(R.pack_padded_sequence(xx, lens, { enforce_sorted = sorted }), h0)
      dpl.manual_seed(5)
      local loss = (out.data * dpl.randn(out.data:size(), { dtype = 'float64' })):sum()
        + (hn * dpl.randn(hn:size(), { dtype = 'float64' })):sum()
      loss:backward()
      local r = { out = out.data, h_n = hn, gx = xx.grad }
      for k, p in m:named_parameters() do r['grad ' .. k] = p.grad:clone() end
      if h0 then r.gh0 = h0.grad end
      return r
    end
    local makers = {
      GRU = function(o) return nn.GRU(6, 5, 2, o) end,
      RNN_TANH = function(o) return nn.RNN(6, 5, 2, o) end,
      RNN_RELU = function(o) o.nonlinearity = 'relu' return nn.RNN(6, 5, 2, o) end,
    }
    for _, kind in ipairs({ 'GRU', 'RNN_TANH', 'RNN_RELU' }) do
      for _, bidir in ipairs({ false, true }) do
        for _, sorted in ipairs({ true, false }) do
          for _, bias in ipairs({ true, false }) do
            dpl.manual_seed(1)
            local m = makers[kind]({ bidirectional = bidir, bias = bias, dtype = 'float64' })
            local D = bidir and 2 or 1
            local lens = sorted and { 7, 7, 5, 3, 3, 1 } or { 3, 7, 1, 5, 7, 3 }
            local x = dpl.randn(7, 6, 6, { dtype = 'float64' })
            local h0 = dpl.randn(2 * D, 6, 5, { dtype = 'float64' }):requires_grad_()
            for _, st in ipairs({ false, h0 }) do
              local a = run(m, x, lens, sorted, st or nil)
              FS.packed = false
              local okb, b = pcall(run, m, x, lens, sorted, st or nil)
              FS.packed = true
              assert(okb, b)
              for k, v in pairs(b) do close(v, a[k], 1e-13, kind .. ' ' .. k) end
            end
          end
        end
      end
    end
  end)

  it('a packed input of the wrong width or a wrong hx is an error naming the layer', function()
    local m = nn.LSTM(3, 4)
    local ps = R.pack_sequence({ dpl.randn(2, 5) })
    raises(function() m(ps) end, "data must be [N, 3]")
    local ok = R.pack_sequence({ dpl.randn(2, 3) })
    raises(function() m(ok, dpl.zeros(1, 1, 4)) end, 'hx must be a list {h_0, c_0}')
    raises(function() m(ok, { dpl.zeros(1, 2, 4), dpl.zeros(1, 2, 4) }) end, 'expected hx[1] (h_0) of shape [1, 1, 4]')
  end)
end)

describe('nn.Embedding.from_pretrained', function()
  it('shares the given storage, frozen by default; freeze=false trains; padding_idx gets no gradient', function()
    local E = dpl.randn(6, 4)
    local e = nn.Embedding.from_pretrained(E)
    assert.is_false(e.weight.requires_grad)
    assert.is_true(e.weight:is_set_to(E))
    assert.is_false(E.requires_grad)
    close(E:narrow(1, 2, 2), e(dpl.tensor({ 2, 3 })), 0, 'lookup')
    local e2 = nn.Embedding.from_pretrained(E, { freeze = false, padding_idx = 1 })
    assert.is_true(e2.weight.requires_grad)
    assert.are.equal(1, #e2:parameters())
    e2(dpl.tensor({ 1, 2, 2 })):sum():backward()
    assert.are.equal(0, e2.weight.grad[1]:abs():sum():item())
    assert.are.equal(8, e2.weight.grad[2]:sum():item())
    assert.is_true(nn.Embedding.from_pretrained(E, false).weight.requires_grad)
    assert.is_true(nn.Embedding:from_pretrained(E, false).weight.requires_grad) -- PyTorch's cls-method spelling
    assert.are.same({ 'weight' }, nn.Embedding.from_pretrained(E):state_dict_keys())
  end)
  it('errors: not 2-d, an unknown option, unsupported options', function()
    raises(function() nn.Embedding.from_pretrained(dpl.randn(3)) end, 'expected to be 2-dimensional')
    raises(function() nn.Embedding.from_pretrained(dpl.randn(3, 2), { frezze = true }) end, "did you mean 'freeze'")
    raises(function() nn.Embedding.from_pretrained(dpl.randn(3, 2), { sparse = true }) end, 'NotImplementedError')
  end)
end)
