-- autograd_rules_spec.lua: every backward rule of dpl.autograd.rules checked by
-- gradcheck (central finite differences in float64). A rule without a case here fails
-- the last test.
local dpl = require 'dpl'
local A = dpl.autograd
local F = dpl.nn.functional

local function r(...) dpl.manual_seed(7) return dpl.randn(...):double():requires_grad_() end
local function rs(seed, ...) dpl.manual_seed(seed) return dpl.randn(...):double():requires_grad_() end
local function pos(seed, ...) dpl.manual_seed(seed) return (dpl.rand(...):double() + 0.5):requires_grad_() end
local function away0(seed, ...) -- values with |x| in [0.2, 1.2]
  dpl.manual_seed(seed)
  local x = dpl.rand(...):double() + 0.2
  local s = dpl.rand(...):double():gt(0.5):double() * 2 - 1
  return (x * s):detach():requires_grad_()
end
local function i64(t) return dpl.tensor(t, { dtype = 'int64' }) end

local cases = {
  add = { function(a, b) return a + b end, { rs(1, 3, 4), rs(2, 4) } },
  sub = { function(a, b) return a:sub(b, 2) end, { rs(1, 3, 1), rs(2, 3, 4) } },
  mul = { function(a, b) return a * b end, { rs(1, 2, 3), rs(2, 2, 3) } },
  div = { function(a, b) return a / b end, { rs(1, 2, 3), pos(2, 3) } },
  pow = { function(a, b) return a ^ b end, { pos(1, 2, 3), rs(2, 2, 3) } },
  maximum = { function(a, b) return a:maximum(b) end, { rs(1, 5), rs(2, 5) } },
  minimum = { function(a, b) return a:minimum(b) end, { rs(1, 5), rs(2, 5) } },
  remainder = { function(a, b) return a:remainder(b) end, { (pos(1, 5) * 3):detach():requires_grad_(), pos(2, 5) } },
  fmod = { function(a, b) return a:fmod(b) end, { (pos(1, 5) * 3):detach():requires_grad_(), pos(2, 5) } },
  atan2 = { function(a, b) return a:atan2(b) end, { rs(1, 5), pos(2, 5) } },
  clamp = { function(a) return a:clamp(-0.5, 0.5) end, { away0(3, 6) } },
  where = { function(a, b) return dpl.where(a:gt(0), a, b) end, { rs(1, 6), rs(2, 6) } },
  sum = { function(a) return a:sum(2) end, { rs(1, 3, 4) } },
  mean = { function(a) return a:mean(-1, true) end, { rs(1, 3, 4) } },
  prod = { function(a) return a:prod(1) end, { pos(1, 3, 2) } },
  logsumexp = { function(a) return a:logsumexp(2) end, { rs(1, 3, 4) } },
  var = { function(a) return a:var(2) end, { rs(1, 3, 4) } },
  std = { function(a) return a:std() end, { rs(1, 3, 4) } },
  norm = { function(a) return a:norm() + a:norm(1, 2):sum() + a:norm(3, 1):sum() end, { away0(1, 3, 4) } },
  amax_all = { function(a) return a:max() + a:min() end, { rs(1, 3, 4) } },
  amax_dim = { function(a) local v = a:max(2) local w = a:min(1, true) return v:sum() + w:sum() end, { rs(1, 3, 4) } },
  sort = { function(a) return a:sort(2) * dpl.arange(1, 5):double() + a:t():sort(1, true):t() end, { rs(1, 3, 4) } },
  topk = { function(a) return a:topk(2, 1) * dpl.arange(1, 5):double() + a:topk(3, -1, false, { sorted = true }):sum() end, { rs(1, 3, 4) } },
  kthvalue = { function(a) return a:kthvalue(2, 1) + a:kthvalue(3, 2, true):sum() end, { rs(1, 3, 4) } },
  median = { function(a) return a:median(1) + a:t():median(1, true):sum() end, { rs(1, 3, 4) } },
  median_all = { function(a) return a:median() * a:t():median() end, { rs(1, 3, 4) } },
  mode = { function(a) return a:mode(2) + (a * 3):mode(1, true):sum() end, { rs(1, 3, 4) } },
  softmax = { function(a) return a:softmax(2) * dpl.arange(1, 5):double() end, { rs(1, 3, 4) } },
  log_softmax = { function(a) return a:log_softmax(1) end, { rs(1, 3, 4) } },
  cross_entropy = { function(a) return F.cross_entropy(a, i64({ 1, 3, 4 })) end, { rs(1, 3, 4) } },
  nll_loss = { function(a) return F.nll_loss(a, i64({ 2, 1, 4 }), { reduction = 'sum' }) end, { rs(1, 3, 4) } },
  mse_loss = { function(a, b) return F.mse_loss(a, b) end, { rs(1, 3, 4), rs(2, 3, 4) } },
  mm = { function(a, b) return a:mm(b) end, { rs(1, 3, 4), rs(2, 4, 2) } },
  bmm = { function(a, b) return a:bmm(b) end, { rs(1, 2, 3, 4), rs(2, 2, 4, 2) } },
  dot = { function(a, b) return a:dot(b) end, { rs(1, 4), rs(2, 4) } },
  matmul = { function(a, b, c) return a:matmul(b):matmul(c) end, { rs(1, 2, 3, 4), rs(2, 4, 2), rs(3, 2) } },
  addmm = { function(c, a, b) return dpl.addmm(c, a, b, { beta = 0.5, alpha = 2 }) end, { rs(1, 2), rs(2, 3, 4), rs(3, 4, 2) } },
  linear = { function(x, w, b) return A.linear(x, w, b) end, { rs(1, 2, 3, 4), rs(2, 5, 4), rs(3, 5) } },
  index_select = { function(a) return a:index_select(1, { 3, 1, 3 }) end, { rs(1, 3, 2) } },
  gather = { function(a) return a:gather(2, i64({ { 1, 1 }, { 2, 1 } })) end, { rs(1, 2, 3) } },
  index_add_ = { function(a, s) return (a * 1):index_add_(1, { 1, 3 }, s) end, { rs(1, 3, 2), rs(2, 2, 2) } },
  scatter_add_ = { function(a, s) return (a * 1):scatter_add_(2, i64({ { 1, 2 }, { 3, 3 } }), s) end, { rs(1, 2, 3), rs(2, 2, 2) } },
  masked_fill_ = { function(a, v) return a:masked_fill(dpl.tensor({ true, false, true }), v) * 2 end, { rs(1, 2, 3), rs(2) } },
  -- index/scatter writes (dpl.tensor_index): the in-place form on a tensor with history
  scatter_ = { function(a, s) return (a * 1):scatter_(2, { { 2, 1 }, { 3, 3 } }, s, 'add') end, { rs(1, 2, 3), rs(2, 2, 2) } },
  index_fill_ = { function(a, v) return (a * 1):index_fill_(2, { 3, 1 }, v) end, { rs(1, 2, 3), rs(2) } },
  index_copy_ = { function(a, s) return (a * 1):index_copy_(1, { 2 }, s) end, { rs(1, 2, 3), rs(2, 1, 3) } },
  index_put_ = { function(a, v) return (a * 1):index_put_({ { 1, 2, 1 }, { 3 } }, v, true) end, { rs(1, 2, 3), rs(2, 3) } },
  masked_scatter_ = { function(a, s) return (a * 1):masked_scatter_(dpl.tensor({ true, false, true }), s) end, { rs(1, 2, 3), rs(2, 5) } },
  put_ = { function(a, s) return (a * 1):put_({ -1, 2 }, s) end, { rs(1, 2, 3), rs(2, 2) } },
  fill_diagonal_ = { function(a) return (a * 1):fill_diagonal_(0.5, { wrap = true }) end, { rs(1, 5, 2) } },
  masked_select = { function(a) return a:masked_select(dpl.tensor({ true, false, true })) end, { rs(1, 2, 3) } },
  copy_ = { function(a, b) return (a * 1):copy_(b) * a end, { rs(1, 2, 3), rs(2, 3) } },
  fill_ = { function(a, v) return (a * 1):fill_(v) * a end, { rs(1, 3), rs(2) } },
  zero_ = { function(a) return (a * 1):zero_() + a end, { rs(1, 3) } },
  embedding = { function(w) return F.embedding(i64({ { 1, 3 }, { 3, 2 } }), w) end, { rs(1, 4, 3) } },
  conv2d = { function(x, w, b) return F.conv2d(x, w, b, { padding = 1, stride = 2 }) end, { rs(1, 2, 2, 5, 5), rs(2, 3, 2, 3, 3), rs(3, 3) } },
  max_pool2d = { function(x) return F.max_pool2d(x, 2) end, { rs(1, 1, 2, 4, 4) } },
  -- the fused dropout: the same seed each evaluation, so that each draws the same mask
  dropout = { function(x) dpl.manual_seed(11) return F.dropout(x, 0.4) end, { rs(1, 5, 13) } },
  layer_norm = { function(x, w, b) return F.layer_norm(x, { 2, 3 }, w, b) + F.layer_norm(x, 3) end, { rs(1, 2, 2, 3), rs(2, 2, 3), rs(3, 2, 3) } },
  avg_pool2d = { function(x) return F.avg_pool2d(x, 2, { stride = 1 }) end, { rs(1, 1, 2, 4, 4) } },
  -- the conv group (dpl.nn.functional_conv; against PyTorch: spec/nn_conv_spec.lua)
  conv_transpose2d = { function(x, w, b) return F.conv_transpose2d(x, w, b, { stride = 2, padding = 1, output_padding = 1,
    groups = 2 }) end, { rs(1, 2, 4, 3, 3), rs(2, 4, 1, 3, 2), rs(3, 2) } },
  im2col = { function(x) return F.unfold(x, { 2, 3 }, { padding = 1, stride = { 2, 1 }, dilation = { 1, 2 } }) end,
    { rs(1, 2, 2, 4, 5) } },
  col2im = { function(x) return F.fold(x, { 4, 5 }, 2, { stride = { 2, 1 } }) end, { rs(1, 2, 8, 8) } },
  pad = { function(x) return F.pad(x, { 2, 1, -1, 2 }, 'reflect') + F.pad(x, { 1, 2, 0, 1 }, 'replicate')
    + F.pad(x, { 1, 2, -1, 2 }, 'circular') + F.pad(x, { 3, 0, 0, 1 }, 'constant', 2) end, { rs(1, 2, 2, 4, 3) } },
  interpolate = { function(x) return F.interpolate(x, { scale_factor = 1.7, mode = 'bilinear' })
    + F.interpolate(x, { size = { 6, 5 }, mode = 'bilinear', align_corners = true })
    + F.interpolate(x, { size = { 6, 5 }, mode = 'nearest' }) end, { rs(1, 1, 2, 4, 3) } },
  adaptive_avg_pool2d = { function(x) return F.adaptive_avg_pool2d(x, { 3, 2 }) + F.adaptive_avg_pool2d(x, 1) end,
    { rs(1, 2, 2, 5, 4) } },
  adaptive_max_pool2d = { function(x) return F.adaptive_max_pool2d(x, { 2, 3 }) end, { rs(1, 2, 2, 5, 4) } },
  max_pool1d = { function(x) return F.max_pool1d(x, 3, { stride = 2, padding = 1, dilation = 2 }) end, { rs(1, 2, 3, 9) } },
  pixel_shuffle = { function(x) return F.pixel_shuffle(x, 2) end, { rs(1, 2, 1, 8, 2, 3) } },
  pixel_unshuffle = { function(x) return F.pixel_unshuffle(x:transpose(3, 4), 2) end, { rs(1, 1, 2, 6, 4) } },
  view = { function(a) return a:view(4, 3) * dpl.arange(12):double():view(4, 3) end, { rs(1, 3, 4) } },
  reshape = { function(a) return a:t():reshape(12) end, { rs(1, 3, 4) } },
  squeeze = { function(a) return a:squeeze(2) end, { rs(1, 3, 1, 2) } },
  unsqueeze = { function(a) return a:unsqueeze(1) end, { rs(1, 3) } },
  transpose = { function(a) return a:transpose(1, 3):contiguous() end, { rs(1, 2, 3, 4) } },
  t = { function(a) return a:t() end, { rs(1, 2, 3) } },
  permute = { function(a) return a:permute(3, 1, 2) end, { rs(1, 2, 3, 4) } },
  narrow = { function(a) return a:narrow(2, 2, 2) end, { rs(1, 2, 4) } },
  select = { function(a) return a:select(-1, 2) end, { rs(1, 2, 4) } },
  expand = { function(a) return a:expand(3, 2, 4) end, { rs(1, 2, 1) } },
  contiguous = { function(a) return a:t():contiguous() end, { rs(1, 2, 3) } },
  clone = { function(a) return a:clone() * a end, { rs(1, 3) } },
  to = { function(a) return a:to('float32'):to('float64') * 2 end, { rs(1, 3) }, { eps = 1e-3, atol = 1e-3 } },
  cat = { function(a, b) return dpl.cat({ a, b }, 2) end, { rs(1, 2, 3), rs(2, 2, 1) } },
  stack = { function(a, b) return dpl.stack({ a, b }, 1) end, { rs(1, 2, 3), rs(2, 2, 3) } },
  -- shape ops (more in spec/tensor_shape_spec.lua)
  cumsum = { function(a) return a:cumsum(2) end, { rs(1, 3, 4) } },
  cumprod = { function(a) return (a * i64({ 1, 0, 1, 1 }):double()):cumprod(2) + a:cumprod(1) end, { rs(1, 3, 4) } },
  cummax = { function(a) return (a:cummax(2)) end, { rs(1, 3, 4) } },
  cummin = { function(a) return (a:cummin(-2)) end, { rs(1, 3, 4) } },
  flip = { function(a) return a:flip(1, 2) * dpl.arange(12):double():view(3, 4) end, { rs(1, 3, 4) } },
  roll = { function(a) return a:roll({ 1, -2 }, { 1, 2 }) * dpl.arange(12):double():view(3, 4) end, { rs(1, 3, 4) } },
  tril = { function(a) return a:tril(1) + (a * 1):tril_(-1) end, { rs(1, 3, 4) } },
  triu = { function(a) return a:triu(-1) + (a * 1):triu_(2) end, { rs(1, 3, 4) } },
  diag = { function(a, b) return a:diag(1):sum(1) + b:diag(-1) end, { rs(1, 3), rs(2, 5, 4) } },
  take = { function(a) return a:take({ { 1, -1 }, { 5, 1 } }) end, { rs(1, 2, 3) } },
  diagonal = { function(a) return a:diagonal(1, 3, 1) end, { rs(1, 3, 2, 4) } },
  unfold = { function(a) return a:unfold(2, 3, 2) * 1 + a:unfold(1, 2, 1):sum(3):sum() end, { rs(1, 2, 7) } },
}
-- unary rules
local unary_inputs = {
  neg = rs, exp = rs, sin = rs, cos = rs, tanh = rs, sigmoid = rs, gelu = rs, silu = rs, erf = rs, square = rs,
  expm1 = rs, log = pos, sqrt = pos, rsqrt = pos, reciprocal = pos, log1p = pos, log2 = pos,
  abs = away0, relu = away0, floor = away0, ceil = away0, round = away0, sign = away0, trunc = away0,
}
for name, mk in pairs(unary_inputs) do
  cases[name] = { function(a) return a[name](a) end, { mk(11, 2, 3) } }
end

-- the math group (dpl.tensor_math); values and gradients against PyTorch: spec/tensor_math_spec.lua
do
  local function unit(seed, ...) dpl.manual_seed(seed) return (dpl.rand(...):double() * 1.6 - 0.8):requires_grad_() end
  local function above1(seed, ...) dpl.manual_seed(seed) return (dpl.rand(...):double() + 1.5):requires_grad_() end
  local function half(seed, ...) dpl.manual_seed(seed) return (dpl.rand(...):double() * 0.5 + 0.25):requires_grad_() end
  local math_unary = { log10 = pos, exp2 = rs, sinh = rs, cosh = rs, tan = away0, asin = unit, acos = unit, atan = rs,
    asinh = rs, acosh = above1, atanh = unit, frac = half, mish = rs, hardswish = rs, nan_to_num = rs }
  for name, mk in pairs(math_unary) do
    cases[name] = { function(a) return a[name](a) end, { mk(11, 2, 3) } }
  end
  cases.hardtanh = { function(a) return a:hardtanh(-0.5, 0.7) + a:hardtanh() end, { away0(3, 6) } }
  cases.softplus = { function(a) return a:softplus(2, 1.5) + a:softplus() end, { rs(4, 8) } }
  cases.elu = { function(a) return a:elu(0.7) end, { away0(5, 6) } }
  cases.leaky_relu = { function(a) return a:leaky_relu(0.2) end, { away0(6, 6) } }
  cases.lerp = { function(s, e, w) return s:lerp(e, w) + s:lerp(e, 0.75) end, { rs(1, 2, 3), rs(2, 3), rs(3, 2, 1) } }
  cases.addcmul = { function(s, a, b) return s:addcmul(a, b, 0.5) end, { rs(1, 3), rs(2, 2, 3), rs(3, 2, 1) } }
  cases.addcdiv = { function(s, a, b) return s:addcdiv(a, b, { value = -2 }) end, { rs(1, 3), rs(2, 2, 3), pos(3, 2, 1) } }
  cases.baddbmm = { function(c, a, b) return dpl.baddbmm(c, a, b, { beta = 0.5, alpha = 2 }) end,
    { rs(1, 3, 1), rs(2, 2, 3, 4), rs(3, 2, 4, 2) } }
  cases.amax = { function(a) return a:amax(2) + a:amax({ 1, 2 }, true) + a:amax() end, { rs(1, 3, 4) } }
  cases.amin = { function(a) return a:amin(-1, true) + a:amin({ 2, 1 }) end, { rs(2, 3, 4) } }
  cases.nansum = { function(a) return a:nansum(1) + a:nansum({ 1, 2 }, true) + a:nanmean(1) end, { rs(3, 3, 4) } }
end

-- the seq group: one recurrent layer's time loop (dpl.nn.functional_seq), both directions
cases.lstm_seq = { function(xp, h0, c0, w, hp, wp, whr) -- (hp, wp, whr: proj_size 1)
  local y, hn, cn = F._lstm_layer(xp, h0, c0, w, false)
  local yr, _, cr = F._lstm_layer(xp, h0, c0, w, true)
  local yp, _, cp = F._lstm_layer(xp, hp, c0, wp, true, whr)
  return dpl.cat({ y:reshape(-1), hn:reshape(-1), cn:reshape(-1) * 2, yr:reshape(-1), cr:reshape(-1), yp:reshape(-1),
    cp:reshape(-1) })
end, { rs(1, 3, 2, 8), rs(2, 2, 2), rs(3, 2, 2), rs(4, 8, 2), rs(5, 2, 1), rs(6, 8, 1), rs(7, 1, 2) } }
cases.gru_seq = { function(xp, h0, w, b)
  local y, hn = F._gru_layer(xp, h0, w, b, false)
  return dpl.cat({ y:reshape(-1), hn:reshape(-1), F._gru_layer(xp, h0, w, b, true):reshape(-1) })
end, { rs(1, 3, 2, 6), rs(2, 2, 2), rs(3, 6, 2), rs(4, 6) } }
cases.rnn_seq = { function(xp, h0, w)
  local y, hn = F._rnn_layer(xp, h0, w, false, false)
  return dpl.cat({ y:reshape(-1), hn:reshape(-1), F._rnn_layer(xp, h0, w, true, true):reshape(-1) })
end, { rs(1, 3, 2, 2), rs(2, 2, 2), rs(3, 2, 2) } }

describe('gradcheck of every backward rule', function()
  local names = {}
  for k in pairs(cases) do names[#names + 1] = k end
  table.sort(names)
  for _, name in ipairs(names) do
    local c = cases[name]
    it(name, function()
      assert.is_true(A.gradcheck(c[1], c[2], c[3]))
    end)
  end

  it('in-place variants of the elementwise ops', function()
    for _, name in ipairs({ 'add', 'mul', 'div', 'sub' }) do
      assert.is_true(A.gradcheck(function(a, b) return (a * 1)[name .. '_'](a * 1, b) end, { rs(1, 2, 3), pos(2, 3) }))
    end
    for _, name in ipairs({ 'exp', 'tanh', 'sigmoid', 'relu', 'sqrt' }) do
      local x = pos(3, 4)
      assert.is_true(A.gradcheck(function(a) local y = a * 1 return y[name .. '_'](y) end, { x }))
    end
    assert.is_true(A.gradcheck(function(a) return (a * 1):clamp_(0.6, 1.2) end, { pos(4, 5) }))
  end)

  it('gradcheck itself catches a wrong rule', function()
    local rule = { nin = 1, save = function() end, bw = function(n, g) return g * 3 end }
    local function f(a)
      local out = dpl.no_grad(function() return a * 2 end)
      return A.record(rule, out, a)
    end
    local ok, e = pcall(A.gradcheck, f, { rs(1, 2) })
    assert.is_false(ok)
    assert.truthy(tostring(e):find('Jacobian mismatch'))
  end)

  it('every rule of autograd.rules has a case here', function()
    local missing = {}
    for k in pairs(A.rules) do
      if not cases[k] then missing[#missing + 1] = k end
    end
    table.sort(missing)
    assert.are.same({}, missing)
  end)
end)
