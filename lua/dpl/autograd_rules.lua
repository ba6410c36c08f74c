-- dpl.autograd_rules: the backward rule of each differentiable op, keyed by op name:
-- what the op's node saves in the forward pass and how it turns the output's gradient
-- into its inputs' gradients. dpl.autograd records nodes with these rules and wraps the
-- tensor methods; it binds the helpers the rules use (save with version check, sum_to
-- after broadcasting, ...) and the dpl.tensor module they build tensors with (R.bind).
--
-- rules[name] = { nin = number of leading tensor args, save = function(n, out, ...),
--                 bw = function(n, g) -> grads of the inputs, inplace_input = true when the
--                 in-place variant needs the old value of self, view = true for views }
local R = {}
local rules = {}
R.rules = rules

-- bound by dpl.autograd (R.bind): the tensor module, and autograd's helpers
local T, is_tensor
local bshape, sum_to, needs, save, sv, size_of, like, raw_alias
local type = type

--- h: {T=, is_tensor=, bshape=, sum_to=, needs=, save=, sv=, size_of=, like=, alias=}
function R.bind(h)
  T, is_tensor = h.T, h.is_tensor
  bshape, sum_to, needs, save, sv = h.bshape, h.sum_to, h.needs, h.save, h.sv
  size_of, like, raw_alias = h.size_of, h.like, h.alias
end



rules.add = {
  nin = 2,
  save = function(n, out, a, b, alpha)
    if type(alpha) == 'table' then alpha = alpha.alpha end -- (add(b, {alpha = x}))
    n.sa, n.sb, n.alpha = bshape(a, out), bshape(b, out), alpha or 1
  end,
  bw = function(n, g)
    local ga = needs(n, 1) and sum_to(g, n.sa) or nil
    local gb
    if needs(n, 2) then gb = sum_to(n.alpha == 1 and g or g * n.alpha, n.sb) end
    return ga, gb
  end,
}
rules.sub = {
  nin = 2,
  save = rules.add.save,
  bw = function(n, g)
    local ga = needs(n, 1) and sum_to(g, n.sa) or nil
    local gb = needs(n, 2) and sum_to(g * (-n.alpha), n.sb) or nil
    return ga, gb
  end,
}
rules.mul = {
  nin = 2, inplace_input = true,
  save = function(n, out, a, b)
    n.sa, n.sb = bshape(a, out), bshape(b, out)
    if n[2] then n.a = is_tensor(a) and save(n, a) or a end
    if n[1] then n.b = is_tensor(b) and save(n, b) or b end
  end,
  bw = function(n, g)
    local ga = needs(n, 1) and sum_to(g * n.b, n.sa) or nil
    local gb = needs(n, 2) and sum_to(g * n.a, n.sb) or nil
    return ga, gb
  end,
}
rules.div = {
  nin = 2, inplace_input = true,
  save = function(n, out, a, b, opts)
    n.sa, n.sb = bshape(a, out), bshape(b, out)
    if type(opts) == 'table' and opts.rounding_mode ~= nil then n.rounded = true return end -- floor/trunc: zero gradients
    n.b = is_tensor(b) and save(n, b) or b
    if n[2] then n.a = is_tensor(a) and save(n, a) or a end
  end,
  bw = function(n, g)
    if n.rounded then
      local z = g * 0
      return needs(n, 1) and sum_to(z, n.sa) or nil, needs(n, 2) and sum_to(z, n.sb) or nil
    end
    local ga = needs(n, 1) and sum_to(g / n.b, n.sa) or nil
    local gb = needs(n, 2) and sum_to(-g * n.a / (n.b * n.b), n.sb) or nil
    return ga, gb
  end,
}
rules.pow = {
  nin = 2, inplace_input = true,
  save = function(n, out, a, b)
    n.sa, n.sb = bshape(a, out), bshape(b, out)
    n.a = is_tensor(a) and save(n, a) or a
    n.b = is_tensor(b) and save(n, b) or b
    if n[2] then n.out = save(n, raw_alias(out)) end
  end,
  bw = function(n, g)
    local a, b = n.a, n.b
    local ga, gb
    if needs(n, 1) then
      if type(b) == 'number' then
        ga = b == 0 and g * 0 or g * (a ^ (b - 1)) * b
      else -- 0 where the exponent is 0 (0 ^ -1 would make it NaN at a zero base), as PyTorch
        ga = sum_to((g * b * (a ^ (b - 1))):masked_fill_(b:eq(0), 0), n.sa)
      end
    end
    if needs(n, 2) then -- 0 where the base is 0 and the exponent >= 0 (log 0 = -inf), as PyTorch
      if type(a) == 'number' then
        gb = g * n.out * math.log(a)
        if a == 0 then gb = gb:masked_fill_(b:ge(0), 0) end
      else
        gb = (g * n.out * a:log()):masked_fill_(a:eq(0):logical_and(b:ge(0)), 0)
      end
      gb = sum_to(gb, n.sb)
    end
    return ga, gb
  end,
}
local function minmax_rule(gtop)
  return {
    nin = 2, inplace_input = true,
    save = function(n, out, a, b)
      n.sa, n.sb = bshape(a, out), bshape(b, out)
      n.a, n.b = sv(n, a), sv(n, b)
    end,
    bw = function(n, g)
      local a, b = n.a, n.b
      if not is_tensor(a) then a = T.full_like(b, a) end
      -- ties split the gradient, as PyTorch does
      local wa = (gtop(a, b)):to(g.dtype) + (a:eq(b)):to(g.dtype) * 0.5
      local ga = needs(n, 1) and sum_to(g * wa, n.sa) or nil
      local gb = needs(n, 2) and sum_to(g * (1 - wa), n.sb) or nil
      return ga, gb
    end,
  }
end
rules.maximum = minmax_rule(function(a, b) return a:gt(b) end)
rules.minimum = minmax_rule(function(a, b) return a:lt(b) end)
-- remainder: a - floor(a / b) * b; fmod: a - trunc(a / b) * b (round: 'floor' or 'trunc')
local function mod_rule(round)
  return {
    nin = 2, inplace_input = true,
    save = function(n, out, a, b)
      n.sa, n.sb = bshape(a, out), bshape(b, out)
      if n[2] then n.a, n.b = sv(n, a), sv(n, b) end
    end,
    bw = function(n, g)
      local ga = needs(n, 1) and sum_to(g, n.sa) or nil
      local gb
      if needs(n, 2) then
        local q = n.a / n.b
        gb = sum_to(-g * q[round](q), n.sb)
      end
      return ga, gb
    end,
  }
end
rules.remainder = mod_rule('floor')
rules.fmod = mod_rule('trunc')
rules.atan2 = {
  nin = 2, inplace_input = true,
  save = function(n, out, a, b)
    n.sa, n.sb = bshape(a, out), bshape(b, out)
    n.a, n.b = sv(n, a), sv(n, b)
  end,
  bw = function(n, g)
    local a, b = n.a, n.b
    local d = a * a + b * b
    local ga = needs(n, 1) and sum_to(g * b / d, n.sa) or nil
    local gb = needs(n, 2) and sum_to(-g * a / d, n.sb) or nil
    return ga, gb
  end,
}

-- unary rules: kind 'x' saves the input, 'y' the output
local function unary(kind, f)
  if kind == 'x' then
    return { nin = 1, inplace_input = true, save = function(n, out, a) n.x = save(n, a) end,
      bw = function(n, g) return f(g, n.x) end }
  elseif kind == 'y' then
    return { nin = 1, save = function(n, out) n.y = save(n, raw_alias(out)) end,
      bw = function(n, g) return f(g, n.y) end }
  end
  return { nin = 1, save = function() end, bw = function(n, g) return f(g) end }
end
local LN2 = math.log(2)
local TWO_OVER_SQRTPI = 2 / math.sqrt(math.pi)
rules.neg = unary(nil, function(g) return -g end)
rules.abs = unary('x', function(g, x) return g * x:sign() end)
rules.exp = unary('y', function(g, y) return g * y end)
rules.log = unary('x', function(g, x) return g / x end)
rules.sqrt = unary('y', function(g, y) return g / (y * 2) end)
rules.rsqrt = unary('y', function(g, y) return g * (y * y * y) * -0.5 end)
rules.tanh = unary('y', function(g, y) return T.activation_backward('tanh', g, y) end)
rules.sigmoid = unary('y', function(g, y) return T.activation_backward('sigmoid', g, y) end)
-- relu saves its output (as PyTorch): relu(x) > 0 exactly where x > 0
rules.relu = unary('y', function(g, y) return T.activation_backward('relu', g, y) end)
rules.gelu = unary('x', function(g, x) return T.activation_backward('gelu', g, x) end)
rules.silu = unary('x', function(g, x) return T.activation_backward('silu', g, x) end)
rules.sin = unary('x', function(g, x) return g * x:cos() end)
rules.cos = unary('x', function(g, x) return -g * x:sin() end)
rules.reciprocal = unary('y', function(g, y) return -g * y * y end)
rules.square = unary('x', function(g, x) return g * x * 2 end)
rules.log1p = unary('x', function(g, x) return g / (x + 1) end)
rules.expm1 = unary('y', function(g, y) return g * (y + 1) end)
rules.erf = unary('x', function(g, x) return g * (-(x * x)):exp() * TWO_OVER_SQRTPI end)
rules.log2 = unary('x', function(g, x) return g / (x * LN2) end)
for _, k in ipairs({ 'floor', 'ceil', 'round', 'sign', 'trunc' }) do
  rules[k] = unary(nil, function(g) return g * 0 end)
end

rules.clamp = {
  nin = 1, inplace_input = true,
  save = function(n, out, a, lo, hi)
    if type(lo) == 'table' then lo, hi = lo.min, lo.max end
    n.x, n.lo, n.hi = save(n, a), lo, hi
  end,
  bw = function(n, g)
    local x = n.x
    local m
    if n.lo then m = x:ge(n.lo) end
    if n.hi then
      local mh = x:le(n.hi)
      m = m and m:logical_and(mh) or mh
    end
    if not m then return g end
    return g * m:to(g.dtype)
  end,
}

rules.where = { -- dpl.where(cond, a, b)
  nin = 3,
  save = function(n, out, cond, a, b)
    n.cond, n.sa, n.sb = cond, bshape(a, out), bshape(b, out)
  end,
  bw = function(n, g)
    local ga = needs(n, 2) and sum_to(T.where(n.cond, g, 0), n.sa) or nil
    local gb = needs(n, 3) and sum_to(T.where(n.cond, 0, g), n.sb) or nil
    return nil, ga, gb
  end,
}

---------------------------------------------------------------- reductions
local function norm_dim(d, nd)
  if d == nil or nd == 0 then return nil end -- (dim 1 / -1 of a 0-d tensor: all of it)
  if d < 0 then return nd + d + 1 end
  return d
end

-- g (reduced over dim d, keepdim or not) broadcast back to the input shape
local function unreduce(g, n)
  if n.d == nil then return g:expand(n.shape) end
  if not n.keep then g = g:unsqueeze(n.d) end
  return g:expand(n.shape)
end

local function red_save(n, out, a, d, keepdim)
  n.shape, n.d, n.keep = size_of(a), norm_dim(d, a._ndim), keepdim and true or false
  n.count = tonumber(a._numel) / math.max(1, tonumber(out._numel))
end

rules.sum = { nin = 1, save = red_save, bw = function(n, g) return unreduce(g, n) end }
rules.mean = { nin = 1, save = red_save, bw = function(n, g) return unreduce(g, n) / n.count end }
rules.prod = {
  nin = 1,
  save = function(n, out, a, d, keepdim)
    red_save(n, out, a, d, keepdim)
    n.x, n.y = save(n, a), save(n, raw_alias(out))
  end,
  -- the product of the other elements: y / x without zeros; with one zero in a slice, the
  -- product of the rest at the zero and 0 elsewhere; with two or more, 0 (no 0 / 0)
  bw = function(n, g)
    local x = n.x
    local z = x:eq(0)
    if not z:any():item() then return unreduce(g * n.y, n) / x end
    local xs, zf = x:masked_fill(z, 1), z:to(x.dtype)
    local pnz = n.d and xs:prod(n.d, true) or xs:prod()
    local cnt = n.d and zf:sum(n.d, true) or zf:sum()
    return unreduce(g, n) * pnz * (cnt:eq(0):to(x.dtype) / xs + cnt:eq(1):to(x.dtype) * zf)
  end,
}
rules.logsumexp = {
  nin = 1,
  save = function(n, out, a, d, keepdim)
    red_save(n, out, a, d, keepdim)
    n.x, n.y = save(n, a), save(n, raw_alias(out))
  end,
  bw = function(n, g) return unreduce(g, n) * (n.x - unreduce(n.y, n)):exp() end,
}
local function varstd_save(n, out, a, d, unbiased, keepdim)
  if type(d) == 'boolean' then d, unbiased = nil, d end
  red_save(n, out, a, d, keepdim)
  n.x = save(n, a)
  n.ddof = unbiased == false and 0 or 1
  if n.std then n.y = save(n, raw_alias(out)) end
end
rules.var = {
  nin = 1, save = varstd_save,
  bw = function(n, g)
    local x = n.x
    local mu = n.d and x:mean(n.d, true) or x:mean()
    return unreduce(g, n) * (x - mu) * (2 / (n.count - n.ddof))
  end,
}
rules.std = {
  nin = 1,
  save = function(n, ...) n.std = true; return varstd_save(n, ...) end,
  bw = function(n, g)
    local x = n.x
    local mu = n.d and x:mean(n.d, true) or x:mean()
    -- 0 where the std is 0 (constant input), as PyTorch's std_backward (not 0 / 0)
    local gy = (g / n.y):masked_fill(n.y:eq(0), 0)
    return unreduce(gy, n) * (x - mu) / (n.count - n.ddof)
  end,
}
rules.norm = {
  nin = 1,
  save = function(n, out, a, p, d, keepdim)
    if p == nil or p == 'fro' then p = 2 elseif p == 'inf' then p = math.huge end
    red_save(n, out, a, d, keepdim)
    n.p, n.x, n.y = p, save(n, a), save(n, raw_alias(out))
  end,
  bw = function(n, g)
    local x, p = n.x, n.p
    local y = unreduce(n.y, n)
    local gg = unreduce(g, n)
    if p == 0 then return T.zeros_like(x) end -- (a count: no gradient)
    if p == 1 then return gg * x:sign() end
    if p == math.huge or p == -math.huge then
      local m = x:abs():eq(y):to(g.dtype)
      local cnt = n.d and m:sum(n.d, true) or m:sum()
      return gg * x:sign() * m / (n.d and cnt or cnt)
    end
    -- a zero norm (all of the slice 0) and zero elements get 0, as PyTorch (not 0 / 0)
    local ys = y:masked_fill(y:eq(0), 1)
    if p == 2 then return gg * x / ys end
    return (gg * x:sign() * x:abs() ^ (p - 1) / ys ^ (p - 1)):masked_fill_(x:eq(0), 0)
  end,
}
-- max()/min() over all elements (0-d result): the gradient goes to the maxima, split
rules.amax_all = {
  nin = 1,
  save = function(n, out, a) n.x, n.y, n.shape = save(n, a), save(n, raw_alias(out)), size_of(a) end,
  bw = function(n, g)
    local m = n.x:eq(n.y):to(g.dtype)
    return m * (g / m:sum())
  end,
}
-- max(dim)/min(dim): values get the gradient at the (1-based) indices
rules.amax_dim = {
  nin = 1,
  save = function(n, out, a, d, keepdim, idx)
    n.shape, n.d, n.keep, n.idx = size_of(a), norm_dim(d, a._ndim), keepdim and true or false, idx
    n.dtype = like(a)
  end,
  bw = function(n, g)
    local idx = n.idx
    if n.d == nil then return g:clone() end -- a 0-d input
    if not n.keep then g, idx = g:unsqueeze(n.d), idx:unsqueeze(n.d) end
    return T.zeros(n.shape, n.dtype):scatter_add_(n.d, idx, g)
  end,
}

---------------------------------------------------------------- sorting and selection (dpl.tensor_sort)
-- values selected along a dim (sort, topk, kthvalue, median(dim), mode): the gradient goes
-- back to the selected positions. dpl.tensor_sort records them with autograd.record(rule,
-- values, x, d, keepdim, indices): d the 1-based dim (nil for a 0-d x), indices 1-based
-- (saved: modifying them in place before backward is an error, as in PyTorch).
local function selected_rule()
  return {
    nin = 1,
    save = function(n, out, a, d, keepdim, idx)
      n.shape, n.dtype, n.d, n.keep, n.idx = size_of(a), like(a), d, keepdim, save(n, idx)
    end,
    bw = function(n, g)
      if n.d == nil then return g:clone() end -- a 0-d input
      local idx = n.idx
      if not n.keep then g, idx = g:unsqueeze(n.d), idx:unsqueeze(n.d) end
      return T.zeros(n.shape, n.dtype):scatter_add_(n.d, idx, g)
    end,
  }
end
for _, k in ipairs({ 'sort', 'topk', 'kthvalue', 'median', 'mode' }) do rules[k] = selected_rule() end
-- median() of all elements: the gradient split evenly among the elements equal to the
-- median (among the NaNs when it is NaN), as PyTorch
rules.median_all = {
  nin = 1,
  save = function(n, out, a) n.x, n.y = save(n, a), save(n, raw_alias(out)) end,
  bw = function(n, g)
    local y = n.y
    local m = (y:isnan():item() and n.x:isnan() or n.x:eq(y)):to(g.dtype)
    return m * (g / m:sum())
  end,
}

---------------------------------------------------------------- softmax, losses
rules.softmax = {
  nin = 1,
  save = function(n, out, a, d) n.y, n.d = save(n, raw_alias(out)), d or -1 end,
  bw = function(n, g) return T.softmax_backward(g, n.y, n.d, false) end,
}
rules.log_softmax = {
  nin = 1,
  save = function(n, out, a, d) n.y, n.d = save(n, raw_alias(out)), d or -1 end,
  bw = function(n, g) return T.softmax_backward(g, n.y, n.d, true) end,
}
rules.cross_entropy = {
  nin = 1,
  save = function(n, out, x, target, opts) n.x, n.t, n.o = save(n, x), target, opts end,
  bw = function(n, g) return T.cross_entropy_backward(g, n.x, n.t, n.o) end,
}
rules.nll_loss = {
  nin = 1,
  save = function(n, out, x, target, opts) n.x, n.t, n.o = save(n, x), target, opts end,
  bw = function(n, g) return T.nll_loss_backward(g, n.x, n.t, n.o) end,
}
rules.mse_loss = {
  nin = 2,
  save = function(n, out, a, b, opts) n.a, n.b, n.o = save(n, a), save(n, b), opts end,
  bw = function(n, g)
    local ga = T.mse_loss_backward(g, n.a, n.b, n.o)
    return needs(n, 1) and ga or nil, needs(n, 2) and -ga or nil
  end,
}

---------------------------------------------------------------- linear algebra
local function tr(x) return x:transpose(-1, -2) end
rules.mm = {
  nin = 2,
  save = function(n, out, a, b)
    if n[2] then n.a = save(n, a) end
    if n[1] then n.b = save(n, b) end
  end,
  bw = function(n, g)
    return needs(n, 1) and g:mm(n.b:t()) or nil, needs(n, 2) and n.a:t():mm(g) or nil
  end,
}
rules.bmm = {
  nin = 2, save = rules.mm.save,
  bw = function(n, g)
    return needs(n, 1) and g:bmm(tr(n.b)) or nil, needs(n, 2) and tr(n.a):bmm(g) or nil
  end,
}
rules.dot = {
  nin = 2, save = function(n, out, a, b) n.a, n.b = save(n, a), save(n, b) end,
  bw = function(n, g) return needs(n, 1) and g * n.b or nil, needs(n, 2) and g * n.a or nil end,
}
rules.matmul = {
  nin = 2,
  save = function(n, out, a, b) n.a, n.b = save(n, a), save(n, b) end,
  bw = function(n, g)
    local a, b = n.a, n.b
    local sa, sb = size_of(a), size_of(b)
    if a._ndim == 1 and b._ndim == 1 then
      return needs(n, 1) and g * b or nil, needs(n, 2) and g * a or nil
    end
    local a2 = a._ndim == 1 and a:unsqueeze(1) or a
    local b2 = b._ndim == 1 and b:unsqueeze(2) or b
    local g2 = g
    if a._ndim == 1 then g2 = g2:unsqueeze(-2) end
    if b._ndim == 1 then g2 = g2:unsqueeze(-1) end
    local ga, gb
    if needs(n, 1) then
      ga = g2:matmul(tr(b2))
      if a._ndim == 1 then ga = ga:squeeze(-2) end
      ga = sum_to(ga, sa)
    end
    if needs(n, 2) then
      gb = tr(a2):matmul(g2)
      if b._ndim == 1 then gb = gb:squeeze(-1) end
      gb = sum_to(gb, sb)
    end
    return ga, gb
  end,
}
rules.addmm = { -- addmm(c, a, b, {beta=, alpha=})
  nin = 3,
  save = function(n, out, c, a, b, opts)
    n.sc = bshape(c, out)
    n.beta, n.alpha = opts and opts.beta or 1, opts and opts.alpha or 1
    if n[3] then n.a = save(n, a) end
    if n[2] then n.b = save(n, b) end
  end,
  bw = function(n, g)
    local gc, ga, gb
    if needs(n, 1) then gc = sum_to(n.beta == 1 and g or g * n.beta, n.sc) end
    if needs(n, 2) then ga = g:mm(n.b:t()); if n.alpha ~= 1 then ga = ga * n.alpha end end
    if needs(n, 3) then gb = n.a:t():mm(g); if n.alpha ~= 1 then gb = gb * n.alpha end end
    return gc, ga, gb
  end,
}
-- linear(x [.., in], w [out, in], b [out] or nil): the fused rule of nn.Linear
rules.linear = {
  nin = 3,
  save = function(n, out, x, w, b)
    if n[2] then n.x = save(n, x) end
    if n[1] then n.w = save(n, w) end
    if x._ndim ~= 2 then n.xshape = size_of(x) end
  end,
  bw = function(n, g)
    local gx, gw, gb
    local g2 = g._ndim == 2 and g or g:reshape(-1, tonumber(g._shape[g._ndim - 1]))
    if needs(n, 1) then
      gx = g2:mm(n.w)
      if n.xshape then gx = gx:view(n.xshape) end
    end
    if needs(n, 2) then
      local x = n.x
      local x2 = x._ndim == 2 and x or x:reshape(-1, tonumber(x._shape[x._ndim - 1]))
      gw = g2:t():mm(x2)
    end
    if needs(n, 3) then gb = g2:sum(1) end
    return gx, gw, gb
  end,
}

---------------------------------------------------------------- indexing
rules.index_select = {
  nin = 1,
  save = function(n, out, a, d, idx) n.shape, n.d, n.idx, n.dtype = size_of(a), d, idx, like(a) end,
  bw = function(n, g)
    return T.zeros(n.shape, n.dtype):index_add_(n.d, n.idx, g) end,
}
rules.gather = {
  nin = 1,
  save = function(n, out, a, d, idx) n.shape, n.d, n.idx, n.dtype = size_of(a), d, idx, like(a) end,
  bw = function(n, g) return T.zeros(n.shape, n.dtype):scatter_add_(n.d, n.idx, g) end,
}
rules.index_add_ = { -- t:index_add_(d, idx, src [, alpha])
  nin = 4,
  save = function(n, out, a, d, idx, src, alpha)
    n.d, n.idx = d, idx
    n.alpha = type(alpha) == 'table' and alpha.alpha or alpha
  end,
  bw = function(n, g)
    local gs = needs(n, 4) and g:index_select(n.d, n.idx) or nil
    if gs and n.alpha and n.alpha ~= 1 then gs = gs * n.alpha end
    return g, nil, nil, gs
  end,
}
rules.scatter_add_ = {
  nin = 4,
  save = function(n, out, a, d, idx, src)
    n.d, n.idx = d, idx
    -- src may be larger than the index (its other elements are not read): their gradient is 0
    if is_tensor(src) and is_tensor(idx) then
      local ss, is = size_of(src), size_of(idx)
      for i = 1, #ss do if ss[i] ~= is[i] then n.sshape, n.slike = ss, like(src) break end end
    end
  end,
  bw = function(n, g)
    local gs = needs(n, 4) and g:gather(n.d, n.idx) or nil
    if gs and n.sshape then
      local z = T.zeros(n.sshape, n.slike)
      local v = z
      for i = 1, gs:dim() do v = v:narrow(i, 1, gs:size(i)) end
      v:copy_(gs)
      gs = z
    end
    return g, nil, nil, gs
  end,
}
rules.masked_fill_ = { -- t:masked_fill_(mask, value): value a number or a 0-d tensor
  nin = 3,
  save = function(n, out, a, mask, v)
    n.mask = mask
    if n[3] then n.sv = size_of(v) end
  end,
  bw = function(n, g)
    local ga = needs(n, 1) and g:masked_fill(n.mask, 0) or nil
    local gv = needs(n, 3) and g:masked_fill(n.mask:logical_not(), 0):sum():reshape(n.sv) or nil
    return ga, nil, gv
  end,
}
rules.masked_select = {
  nin = 1,
  save = function(n, out, a, mask) n.shape, n.mask, n.dtype = size_of(a), mask, like(a) end,
  bw = function(n, g)
    local z = T.zeros(n.shape, n.dtype)
    local m = n.mask:expand(n.shape):reshape(-1)
    local pos = m:nonzero():reshape(-1)
    return z:reshape(-1):index_add_(1, pos, g):view(n.shape)
  end,
}
rules.copy_ = { -- t:copy_(src): the old values of t get no gradient
  nin = 2,
  save = function(n, out, a, src)
    if is_tensor(src) then n.ss, n.sdt = bshape(src, out), src.dtype end
  end,
  bw = function(n, g)
    local gs
    if needs(n, 2) then gs = sum_to(g, n.ss); if gs.dtype ~= n.sdt then gs = gs:to(n.sdt) end end
    return g * 0, gs
  end,
}
rules.fill_ = { -- t:fill_(value): value a number or a 0-d tensor (its gradient: the sum)
  nin = 2,
  save = function(n, out, a, v) if n[2] then n.sv = size_of(v) end end,
  bw = function(n, g) return needs(n, 1) and g * 0 or nil, needs(n, 2) and g:sum():reshape(n.sv) or nil end,
}
-- zero_, the random fills, the in-place comparisons: the old values get a zero gradient
rules.zero_ = { nin = 1, save = function() end, bw = function(n, g) return g * 0 end }
rules.embedding = {
  nin = 1,
  save = function(n, out, w, idx) n.idx, n.V = idx, tonumber(w._shape[0]) end,
  bw = function(n, g) return T.embedding_backward(g, n.idx, n.V) end,
}

-- index/scatter writes (dpl.tensor_index): one rule per op for the in-place form and the
-- out-of-place one (its out is a copy of self, written). n.zd: a 0-d self (dim 1 or -1),
-- computed on the 1-d tensor of its one element.
local function as_index(idx)
  if is_tensor(idx) then return idx end
  return T.tensor(idx, { dtype = 'int64' })
end
local function flat1(n, g, idx)
  if not n.zd then return g, idx end
  idx = as_index(idx)
  return g:reshape(1), idx._ndim == 0 and idx:reshape(1) or idx
end
local function unflat(n, x, shape) return x and n.zd and x:reshape(shape or {}) or x end
rules.scatter_ = { -- t:scatter_(d, idx, src_or_value [, reduce])
  nin = 4,
  save = function(n, out, a, d, idx, src, reduce)
    n.d, n.idx, n.zd = d, idx, a._ndim == 0
    n.red = T._scatter_reduce_of('scatter_', reduce)
    if is_tensor(src) then n.ss = size_of(src) end
  end,
  bw = function(n, g)
    if n.red == 2 then
      error(require('dpl.errors').NotImplementedError("scatter_: the gradient of reduce='multiply' is not implemented (nor in PyTorch 1.13)"), 0)
    end
    local g1, idx = flat1(n, g, n.idx)
    local d = n.zd and 1 or n.d
    local ga, gs
    if needs(n, 1) then ga = n.red == 1 and g or unflat(n, g1:scatter(d, idx, 0)) end
    if n.ss and needs(n, 4) then -- grad gathered at index; zeros where src is larger than index
      local sel = g1:gather(d, idx)
      local ss = n.ss
      if #ss == 0 then gs = sel:reshape({})
      else
        gs = T.zeros(ss, like(g))
        local region = gs
        for k = 1, #ss do region = region:narrow(k, 1, tonumber(sel._shape[k - 1])) end
        region:copy_(sel)
      end
    end
    return ga, nil, nil, gs
  end,
}
rules.index_fill_ = { -- t:index_fill_(d, idx, value): value a number or a 0-d tensor
  nin = 4,
  save = function(n, out, a, d, idx) n.d, n.idx, n.zd = d, idx, a._ndim == 0 end,
  bw = function(n, g)
    local g1, idx = flat1(n, g, n.idx)
    local ga = unflat(n, g1:index_fill(n.zd and 1 or n.d, idx, 0))
    return needs(n, 1) and ga or nil, nil, nil, needs(n, 4) and (g - ga):sum() or nil
  end,
}
rules.index_copy_ = { -- t:index_copy_(d, idx, source)
  nin = 4,
  save = function(n, out, a, d, idx, src) n.d, n.idx, n.zd, n.ss = d, idx, a._ndim == 0, size_of(src) end,
  bw = function(n, g)
    local g1, idx = flat1(n, g, n.idx)
    local d = n.zd and 1 or n.d
    local ga = needs(n, 1) and unflat(n, g1:index_fill(d, idx, 0)) or nil
    local gs = needs(n, 4) and unflat(n, g1:index_select(d, idx), n.ss) or nil
    return ga, nil, nil, gs
  end,
}
rules.index_put_ = { -- t:index_put_(indices, values [, accumulate])
  nin = 3,
  save = function(n, out, a, indices, values, acc)
    n.indices, n.acc = indices, T._accumulate_of('index_put_', acc) == 1
    if is_tensor(values) then n.vs = size_of(values) end
  end,
  bw = function(n, g)
    local ga = needs(n, 1) and (n.acc and g or g:index_put(n.indices, 0)) or nil
    local gv = n.vs and needs(n, 3) and sum_to(T._index_get(g, n.indices), n.vs) or nil
    return ga, nil, gv
  end,
}
rules.masked_scatter_ = { -- t:masked_scatter_(mask, source); out-of-place, t and mask broadcast
  nin = 3,
  save = function(n, out, a, mask, src) n.mask, n.sa, n.ss = mask, bshape(a, out), size_of(src) end,
  bw = function(n, g)
    local ga = needs(n, 1) and sum_to(g:masked_fill(n.mask, 0), n.sa) or nil
    local gs
    if needs(n, 3) then -- the selected gradient into source's first elements
      local sel = g:masked_select(n.mask)
      local cnt = 1
      for k = 1, #n.ss do cnt = cnt * n.ss[k] end
      gs = T.zeros({ cnt }, like(g))
      if sel:numel() > 0 then gs:narrow(1, 1, sel:numel()):copy_(sel) end
      gs = gs:reshape(n.ss)
    end
    return ga, nil, gs
  end,
}
rules.put_ = { -- t:put_(idx, source [, accumulate]): flat indices
  nin = 3,
  save = function(n, out, a, idx, src, acc)
    n.idx, n.acc, n.ss = idx, T._accumulate_of('put_', acc) == 1, size_of(src)
  end,
  bw = function(n, g)
    local ga, gs
    if needs(n, 1) then
      ga = g
      if not n.acc then
        local idx = as_index(n.idx)
        ga = g:put(idx, T.zeros({ idx:numel() }, like(g)))
      end
    end
    if needs(n, 3) then gs = T._take_flat(g, n.idx):reshape(n.ss) end
    return ga, nil, gs
  end,
}
rules.fill_diagonal_ = { -- t:fill_diagonal_(value [, wrap])
  nin = 1,
  save = function(n, out, a, value, wrap) n.wrap = wrap end,
  bw = function(n, g) return g:clone():fill_diagonal_(0, n.wrap) end,
}

---------------------------------------------------------------- conv, pooling
rules.conv2d = {
  nin = 3,
  save = function(n, out, x, w, b, opts) n.x, n.w, n.o = save(n, x), save(n, w), opts end,
  bw = function(n, g)
    return T.conv2d_backward(g, n.x, n.w, n.o, { x = needs(n, 1), w = needs(n, 2), b = needs(n, 3) })
  end,
}
rules.layer_norm = { -- T.layer_norm(x, w, b, normalized_numel, eps) -> y, mean, rstd (saved)
  nin = 3,
  save = function(n, out, x, w, b, nnum, eps, mean, rstd)
    n.x, n.m, n.r, n.w, n.bs = save(n, x), mean, rstd, w and save(n, w), b and size_of(b)
  end,
  bw = function(n, g)
    local gx, gw, gb = T.layer_norm_backward(g, n.x, n.m, n.r, n.w or nil,
      { w = n.w and needs(n, 2), b = n.bs and needs(n, 3) })
    return gx, gw, gb and gb:reshape(n.bs)
  end,
}
rules.dropout = { -- T.dropout(x, p) -> y (the packed mask saved)
  nin = 1,
  save = function(n, out, x, p, mask) n.m, n.p = mask, p end,
  bw = function(n, g) return T.dropout_backward(g, n.m, n.p) end,
}
rules.max_pool2d = {
  nin = 1,
  save = function(n, out, x, k, opts, idx) n.x, n.idx = save(n, x), idx end,
  bw = function(n, g) return T.max_pool2d_backward(g, n.x, n.idx) end,
}
rules.avg_pool2d = {
  nin = 1,
  save = function(n, out, x, k, opts) n.x, n.k, n.o = save(n, x), k, opts end,
  bw = function(n, g) return T.avg_pool2d_backward(g, n.x, n.k, n.o) end,
}
-- the conv group (dpl.nn.functional_conv records these with autograd.record; its raw C
-- wrappers do the work; conv1d, avg_pool1d, dropout1d/2d compose recorded ops)
local function CK() return package.loaded['dpl.nn.functional_conv'] or require('dpl.nn.functional_conv') end
rules.conv_transpose2d = { -- (x, w, b, geom): conv2d's input gradient forward, conv2d's kernels backward
  nin = 3,
  save = function(n, out, x, w, b, geom) n.x, n.w, n.geom = save(n, x), save(n, w), geom end,
  bw = function(n, g) return CK().conv_transpose2d_backward(g, n.x, n.w, n.geom, needs(n, 1), needs(n, 2), needs(n, 3)) end,
}
rules.im2col = { -- F.unfold (x, params): the gradient folded back
  nin = 1,
  save = function(n, out, x, p) n.p, n.H, n.W = p, tonumber(x._shape[2]), tonumber(x._shape[3]) end,
  bw = function(n, g) return CK().col2im(g, n.H, n.W, n.p) end,
}
rules.col2im = { -- F.fold (cols, H, W, params): the gradient unfolded
  nin = 1,
  save = function(n, out, c, H, W, p) n.p = p end,
  bw = function(n, g) return CK().im2col(g, n.p) end,
}
rules.pad = { -- (x, pads, mode, value): the padded positions' gradients summed into their sources
  nin = 1,
  save = function(n, out, x, pads, mode) n.pads, n.mode = pads, mode end,
  bw = function(n, g) return CK().pad_backward(g, n.pads, n.mode) end,
}
rules.interpolate = { -- (x, geom)
  nin = 1,
  save = function(n, out, x, geom)
    local s = size_of(x)
    n.geom, n.in_size = geom, { s[3], s[4] }
  end,
  bw = function(n, g) return CK().interpolate_backward(g, n.in_size, n.geom) end,
}
rules.adaptive_avg_pool2d = {
  nin = 1,
  save = function(n, out, x) n.H, n.W = tonumber(x._shape[2]), tonumber(x._shape[3]) end,
  bw = function(n, g) return CK().adaptive_avg_pool2d_backward(g, n.H, n.W) end,
}
rules.adaptive_max_pool2d = { -- (x, indices): max_pool2d's backward scatters to the 0-based indices
  nin = 1,
  save = function(n, out, x, idx) n.x, n.idx = save(n, x), idx end,
  bw = function(n, g) return T.max_pool2d_backward(g, n.x, n.idx) end,
}
rules.pixel_shuffle = { -- (x, r): the gradient unshuffled
  nin = 1,
  save = function(n, out, x, r) n.r = r end,
  bw = function(n, g) return CK().pixel_unshuffle_raw(g, n.r) end,
}
rules.pixel_unshuffle = { -- (x, r): the gradient shuffled
  nin = 1,
  save = function(n, out, x, r) n.r = r end,
  bw = function(n, g) return CK().pixel_shuffle_raw(g, n.r) end,
}
rules.max_pool1d = { -- (x [N, C, L], indices): as a [N, C, 1, L] max_pool2d
  nin = 1,
  save = function(n, out, x, idx) n.x, n.idx = save(n, x), idx end,
  bw = function(n, g)
    return T.max_pool2d_backward(g:unsqueeze(3), n.x:unsqueeze(3), n.idx:unsqueeze(3)):squeeze(3)
  end,
}

---------------------------------------------------------------- math group (dpl.tensor_math)
-- the unary math functions, the activations with parameters, nan_to_num, lerp, addcmul,
-- addcdiv, baddbmm, amax, amin: dpl.autograd wraps R.math_ops and their in-place forms (the
-- group's other ops compose differentiable ones)
local LN10 = math.log(10)
rules.log10 = unary('x', function(g, x) return g / (x * LN10) end)
rules.exp2 = unary('y', function(g, y) return g * y * LN2 end)
rules.sinh = unary('x', function(g, x) return g * x:cosh() end)
rules.cosh = unary('x', function(g, x) return g * x:sinh() end)
rules.tan = unary('y', function(g, y) return g * (y * y + 1) end)
rules.asin = unary('x', function(g, x) return g * (-(x * x) + 1):rsqrt() end)
rules.acos = unary('x', function(g, x) return -g * (-(x * x) + 1):rsqrt() end)
rules.atan = unary('x', function(g, x) return g / (x * x + 1) end)
rules.asinh = unary('x', function(g, x) return g * (x * x + 1):rsqrt() end)
rules.acosh = unary('x', function(g, x) return g * (x * x - 1):rsqrt() end)
rules.atanh = unary('x', function(g, x) return g / (-(x * x) + 1) end)
rules.frac = unary(nil, function(g) return g end)
-- activations: grad * f'(x) by the C kernel (dpl_act_backward), with the parameters of the call
local function act_rule(name)
  return {
    nin = 1, inplace_input = true,
    save = function(n, out, x, a1, a2, a3)
      n.x = save(n, x)
      n.p0, n.p1 = T._act_params(name, a1, a2, a3)
    end,
    bw = function(n, g) return T.act_backward(name, g, n.x, n.p0, n.p1) end,
  }
end
for _, k in ipairs({ 'hardtanh', 'softplus', 'elu', 'leaky_relu', 'mish', 'hardswish' }) do rules[k] = act_rule(k) end
rules.nan_to_num = unary('x', function(g, x) return g * x:isfinite() end)
rules.lerp = { -- start:lerp(end, weight)
  nin = 3, inplace_input = true,
  save = function(n, out, s, e, w)
    n.ss, n.se, n.sw = bshape(s, out), bshape(e, out), bshape(w, out)
    n.w = sv(n, w)
    if n[3] then n.s, n.e = save(n, s), save(n, e) end
  end,
  bw = function(n, g)
    local w = n.w
    local gs = needs(n, 1) and sum_to(g * (-w + 1), n.ss) or nil
    local ge = needs(n, 2) and sum_to(g * w, n.se) or nil
    local gw = needs(n, 3) and sum_to(g * (n.e - n.s), n.sw) or nil
    return gs, ge, gw
  end,
}
local function addc_rule(div)
  return {
    nin = 3,
    save = function(n, out, s, t1, t2, v, extra)
      n.ss, n.s1, n.s2 = bshape(s, out), bshape(t1, out), bshape(t2, out)
      n.v = T._addc_value('addcmul', v, extra)
      if n[2] or (div and n[3]) then n.t2 = save(n, t2) end
      if n[3] then n.t1 = save(n, t1) end
    end,
    bw = function(n, g)
      local gs = needs(n, 1) and sum_to(g, n.ss) or nil
      local gv = n.v == 1 and g or g * n.v
      local g1, g2
      if div then
        if needs(n, 2) then g1 = sum_to(gv / n.t2, n.s1) end
        if needs(n, 3) then g2 = sum_to(-gv * n.t1 / (n.t2 * n.t2), n.s2) end
      else
        if needs(n, 2) then g1 = sum_to(gv * n.t2, n.s1) end
        if needs(n, 3) then g2 = sum_to(gv * n.t1, n.s2) end
      end
      return gs, g1, g2
    end,
  }
end
rules.addcmul = addc_rule(false)
rules.addcdiv = addc_rule(true)
rules.baddbmm = { -- dpl.baddbmm(c, a, b, {beta=, alpha=}); baddbmm_ composes baddbmm and copy_
  nin = 3, inplace = false,
  save = function(n, out, c, a, b, opts)
    n.sc = bshape(c, out)
    n.beta, n.alpha = opts and opts.beta or 1, opts and opts.alpha or 1
    if n[3] then n.a = save(n, a) end
    if n[2] then n.b = save(n, b) end
  end,
  bw = function(n, g)
    local gc, ga, gb
    if needs(n, 1) then gc = sum_to(n.beta == 1 and g or g * n.beta, n.sc) end
    if needs(n, 2) then ga = g:bmm(tr(n.b)); if n.alpha ~= 1 then ga = ga * n.alpha end end
    if needs(n, 3) then gb = tr(n.a):bmm(g); if n.alpha ~= 1 then gb = gb * n.alpha end end
    return gc, ga, gb
  end,
}
-- amax/amin over dims: the gradient split evenly between the elements equal to the result
local function amax_rule(name)
  return {
    nin = 1,
    save = function(n, out, x, d, keepdim)
      n.x, n.y = save(n, x), save(n, raw_alias(out))
      n.dims, n.keep = T._norm_dims(name, x, d), keepdim
      n.ks = T._kept_shape(x, n.dims)
    end,
    bw = function(n, g)
      local x = n.x
      local y, gk = n.y, g
      if not n.keep then y, gk = y:reshape(n.ks), g:reshape(n.ks) end
      local m = x:eq(y):to(g.dtype)
      local cnt
      if n.dims == nil then cnt = m:sum() else
        cnt = m
        for _, c in ipairs(n.dims) do cnt = cnt:sum(c + 1, true) end
      end
      return m * (gk / cnt)
    end,
  }
end
rules.amax = amax_rule('amax')
rules.amin = amax_rule('amin')
rules.nansum = { -- the gradient times the not-NaN mask (PyTorch's: inf * 0 is NaN)
  nin = 1,
  save = function(n, out, x, d, keepdim)
    n.x, n.keep = save(n, x), keepdim
    n.ks = T._kept_shape(x, T._norm_dims('nansum', x, d))
  end,
  bw = function(n, g)
    local x = n.x
    if not n.keep then g = g:reshape(n.ks) end
    if x._dtype > 3 then return g:expand(size_of(x)) end
    return g * x:isnan():logical_not()
  end,
}
R.math_ops = { 'log10', 'exp2', 'sinh', 'cosh', 'tan', 'asin', 'acos', 'atan', 'asinh', 'acosh', 'atanh', 'frac',
  'hardtanh', 'softplus', 'elu', 'leaky_relu', 'mish', 'hardswish', 'nan_to_num', 'lerp', 'addcmul', 'addcdiv',
  'baddbmm', 'amax', 'amin', 'nansum' }
-- in-place ops of integer and bool tensors: no gradient, a version bump
R.math_int_inplace = { 'bitwise_and_', 'bitwise_or_', 'bitwise_xor_', 'bitwise_not_' }

---------------------------------------------------------------- seq group (dpl.nn.functional_seq)
-- the time loop of one recurrent layer and direction, one node: lstm_seq(xp, h0, c0, w_hh, w_hr),
-- gru_seq(xp, h0, w_hh, b_hh), rnn_seq(xp, h0, w_hh), recorded by dpl.nn.functional_seq with
-- a context after the inputs: its per-step buffers and the function that runs the loop back
-- through time (ctx.backward(ctx, g, needs...)). The hidden weights (LSTM's projection w_hr
-- (proj_size) or nil, GRU's b_hh) are saved:
-- changing them in place before backward is an error, as for every op.
local function seq_rule(nin, nw)
  return {
    nin = nin,
    save = function(n, out, ...)
      local a = { ... }
      for i = nin - nw + 1, nin do if is_tensor(a[i]) then save(n, a[i]) end end
      n.ctx = a[nin + 1]
    end,
    bw = function(n, g)
      return n.ctx.backward(n.ctx, g, needs(n, 1), needs(n, 2), needs(n, 3), needs(n, 4), needs(n, 5))
    end,
  }
end
rules.lstm_seq, rules.gru_seq, rules.rnn_seq = seq_rule(5, 2), seq_rule(4, 2), seq_rule(3, 1)

---------------------------------------------------------------- views, copies, conversions
local function shape_rule()
  return { nin = 1, view = true, save = function(n, out, a) n.shape = size_of(a) end,
    bw = function(n, g) return g:reshape(n.shape) end }
end
rules.view = shape_rule()
rules.reshape = shape_rule()
rules.squeeze = shape_rule()
rules.unsqueeze = shape_rule()
rules.transpose = {
  nin = 1, view = true,
  save = function(n, out, a, d0, d1) n.d0, n.d1 = d0, d1 end,
  bw = function(n, g) return g:transpose(n.d0, n.d1) end,
}
rules.t = { nin = 1, view = true, save = function() end, bw = function(n, g) return g:t() end }
rules.permute = {
  nin = 1, view = true,
  save = function(n, out, a, list, ...)
    if type(list) ~= 'table' then list = { list, ... } end
    local nd, inv = a._ndim, {}
    for i = 1, nd do
      local d = list[i]
      if d < 0 then d = nd + d + 1 end
      inv[d] = i
    end
    n.inv = inv
  end,
  bw = function(n, g) return g:permute(n.inv) end,
}
rules.narrow = {
  nin = 1, view = true,
  save = function(n, out, a, d, start, len) n.shape, n.d, n.s, n.l, n.dtype = size_of(a), d, start, len, like(a) end,
  bw = function(n, g)
    local z = T.zeros(n.shape, n.dtype)
    z:narrow(n.d, n.s, n.l):copy_(g)
    return z
  end,
}
rules.select = {
  nin = 1, view = true,
  save = function(n, out, a, d, i) n.shape, n.d, n.i, n.dtype = size_of(a), d, i, like(a) end,
  bw = function(n, g)
    local z = T.zeros(n.shape, n.dtype)
    z:select(n.d, n.i):copy_(g)
    return z
  end,
}
rules.expand = {
  nin = 1, view = true,
  save = function(n, out, a) n.shape = size_of(a) end,
  bw = function(n, g) return sum_to(g, n.shape) end,
}
rules.contiguous = { nin = 1, save = function() end, bw = function(n, g) return g end }
rules.clone = rules.contiguous
rules.to = {
  nin = 1,
  save = function(n, out, a) n.dtype = like(a) end,
  bw = function(n, g) return g:to(n.dtype) end,
}

---------------------------------------------------------------- shape ops (dpl.tensor_shape)
-- (chunk, split, unbind, repeat, tile, repeat_interleave, rot90, trace, movedim, ...
-- are made of recorded ops and need no rule)
-- (with a dtype option, the gradient is converted to the input's dtype first, as PyTorch)
rules.cumsum = { -- t:cumsum(d [, opts]): the gradient summed from the end
  nin = 1,
  save = function(n, out, a, d) n.d, n.in_dtype = d, a.dtype end,
  bw = function(n, g) return T._cumsum_reverse(g.dtype == n.in_dtype and g or g:to(n.in_dtype), n.d) end,
}
rules.cumprod = { -- zeros in the input included (dpl_cumprod_backward)
  nin = 1,
  save = function(n, out, a, d) n.x, n.y, n.d = save(n, a), save(n, raw_alias(out)), d end,
  bw = function(n, g)
    local x = n.x
    return T._cumprod_backward(g._dtype == x._dtype and g or g:to(x.dtype), x, n.y, n.d)
  end,
}
local function cumext_rule() -- cummax / cummin: the gradient goes to the (1-based) indices
  return {
    nin = 1,
    save = function(n, out, a, d, idx)
      n.shape, n.d, n.idx, n.dtype = size_of(a), d, save(n, idx), like(a)
      save(n, a) -- (PyTorch saves the input: changing it in place before backward is an error)
    end,
    bw = function(n, g)
      if #n.shape == 0 then return g:clone() end
      return T.zeros(n.shape, n.dtype):scatter_add_(n.d, n.idx, g)
    end,
  }
end
rules.cummax, rules.cummin = cumext_rule(), cumext_rule()
rules.flip = {
  nin = 1,
  save = function(n, out, a, d1, ...) n.dims = type(d1) == 'table' and d1 or { d1, ... } end,
  bw = function(n, g) return g:flip(n.dims) end,
}
rules.roll = {
  nin = 1,
  save = function(n, out, a, shifts, dims)
    local neg = {}
    for i, s in ipairs(type(shifts) == 'table' and shifts or { shifts }) do neg[i] = -s end
    n.shifts, n.dims = neg, dims
  end,
  bw = function(n, g) return g:roll(n.dims == nil and n.shifts[1] or n.shifts, n.dims) end,
}
local function tri_rule(name)
  return {
    nin = 1,
    save = function(n, out, a, k) n.k = k end,
    bw = function(n, g) return g[name](g, n.k) end,
  }
end
rules.tril, rules.triu = tri_rule('tril'), tri_rule('triu')
rules.take = { -- t:take(index): the gradient put back at the (1-based, flat) positions, adding up
  nin = 1,
  save = function(n, out, a, idx)
    n.shape, n.numel, n.dtype, n.idx = size_of(a), a:numel(), like(a), idx
    save(n, a) -- (PyTorch saves the input: changing it in place before backward is an error)
  end,
  bw = function(n, g)
    return T.zeros({ n.numel }, n.dtype):put_(n.idx, g:reshape(-1), true):view(n.shape)
  end,
}
rules.diag = { -- 1-d -> the diagonal of a matrix, or a matrix's diagonal (a copy)
  nin = 1,
  save = function(n, out, a, k) n.shape, n.k, n.dtype = size_of(a), k or 0, like(a) end,
  bw = function(n, g)
    if #n.shape == 1 then return g:diagonal(n.k):contiguous() end
    local z = T.zeros(n.shape, n.dtype)
    z:diagonal(n.k):copy_(g)
    return z
  end,
}
rules.diagonal = {
  nin = 1, view = true,
  save = function(n, out, a, off, d1, d2) n.shape, n.off, n.d1, n.d2, n.dtype = size_of(a), off, d1, d2, like(a) end,
  bw = function(n, g)
    local z = T.zeros(n.shape, n.dtype)
    z:diagonal(n.off, n.d1, n.d2):copy_(g)
    return z
  end,
}
rules.unfold = { -- windows may overlap (step < size): their gradients add up
  nin = 1, view = true,
  save = function(n, out, a, d, size, step)
    n.shape, n.dtype, n.size, n.step = size_of(a), like(a), size, step
    n.d = a._ndim == 0 and 1 or (d < 0 and a._ndim + d + 1 or d) -- 1-based
    n.nw = tonumber(out._shape[a._ndim == 0 and 0 or n.d - 1])
  end,
  bw = function(n, g)
    local z = T.zeros(n.shape, n.dtype)
    if #n.shape == 0 then
      if n.size == 1 then z:copy_(g:reshape({})) end
      return z
    end
    if z:numel() == 0 or n.size == 0 then return z end
    local d, st = n.d, z:stride()
    if n.size <= n.nw then -- one strided view of z per position in the window
      local vshape, vstride = z:size(), z:stride()
      vshape[d], vstride[d] = n.nw, st[d] * n.step
      for j = 1, n.size do z:as_strided(vshape, vstride, (j - 1) * st[d]):add_(g:select(-1, j)) end
    else -- one narrow of z per window
      for w = 1, n.nw do z:narrow(d, (w - 1) * n.step + 1, n.size):add_(g:select(d, w):movedim(-1, d)) end
    end
    return z
  end,
}

return R
