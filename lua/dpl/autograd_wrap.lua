-- dpl.autograd_wrap: which operations of dpl.tensor are differentiable, and how each is
-- wrapped. dpl.autograd's install calls this with its recording machinery: every method (or
-- module function) listed here is replaced by a wrapper that records a node of its backward
-- rule (dpl.autograd_rules) when grad mode is on and an input requires grad, and otherwise
-- calls the original. wrap_method/wrap_inplace cover the ops of one tensor result; the ops
-- with several results (max/min with indices, layer_norm's statistics, cummax, max_pool2d's
-- indices), dropout's mask and the list ops (cat, stack) get wrappers of their own here.
local type, pcall, ipairs, unpack, tonumber = type, pcall, ipairs, unpack, tonumber

return function(A)
  local T, methods, rules, R, S = A.T, A.methods, A.rules, A.R, A.S
  local rg, gfn = S.rg, S.gfn
  local wrap_method, wrap_inplace, record, rethrow = A.wrap_method, A.wrap_inplace, A.record, A.rethrow
  local edge, forward_trace, is_tensor, is_float, error = A.edge, A.forward_trace, A.is_tensor, A.is_float, A.error

  -- binary elementwise
  for _, k in ipairs({ 'add', 'sub', 'mul', 'div', 'pow', 'maximum', 'minimum', 'remainder', 'fmod', 'atan2' }) do
    wrap_method(k)
    wrap_inplace(k .. '_', rules[k])
  end
  -- unary
  for _, k in ipairs({ 'neg', 'abs', 'exp', 'log', 'sqrt', 'rsqrt', 'tanh', 'sigmoid', 'relu', 'gelu', 'silu',
    'sin', 'cos', 'reciprocal', 'square', 'log1p', 'expm1', 'erf', 'log2', 'floor', 'ceil', 'round', 'sign', 'trunc' }) do
    wrap_method(k)
    wrap_inplace(k .. '_', rules[k])
  end
  methods.negative = methods.neg
  methods.max_elementwise = methods.maximum
  methods.mod = methods.remainder
  wrap_method('clamp')
  methods.clip = methods.clamp
  T.clamp = methods.clamp
  wrap_inplace('clamp_', rules.clamp)
  -- reductions
  for _, k in ipairs({ 'sum', 'mean', 'prod', 'logsumexp', 'var', 'std', 'norm' }) do wrap_method(k) end
  do
    local function wrap_minmax(name)
      local raw = methods[name]
      local function rec(t, d, keepdim)
        if is_tensor(d) then return methods[name == 'max' and 'maximum' or 'minimum'](t, d) end
        local ok, v, i = pcall(raw, t, d, keepdim)
        if not ok then rethrow(v) end
        if d == nil then
          record(rules.amax_all, v, t)
        else
          record(rules.amax_dim, v, t, d, keepdim, i)
        end
        return v, i
      end
      methods[name] = function(t, d, keepdim)
        if S.live and S.grad_on and (rg[t] or rg[d]) then return rec(t, d, keepdim) end
        return raw(t, d, keepdim)
      end
    end
    wrap_minmax('max')
    wrap_minmax('min')
  end
  wrap_method('softmax')
  wrap_method('log_softmax')
  T.softmax, T.log_softmax = T.softmax or methods.softmax, T.log_softmax or methods.log_softmax
  wrap_method('cross_entropy', nil, T)
  wrap_method('nll_loss', nil, T)
  wrap_method('mse_loss', nil, T)
  for _, k in ipairs({ 'mm', 'bmm', 'dot', 'matmul' }) do wrap_method(k) end
  T.matmul, T.mm, T.bmm = methods.matmul, methods.mm, methods.bmm
  wrap_method('addmm', nil, T)
  methods.addmm = function(c, a, b, opts) return T.addmm(c, a, b, opts) end
  wrap_method('index_select')
  wrap_method('gather')
  wrap_inplace('index_add_', rules.index_add_)
  wrap_inplace('scatter_add_', rules.scatter_add_)
  wrap_inplace('masked_fill_', rules.masked_fill_)
  wrap_method('masked_select')
  wrap_inplace('copy_', rules.copy_)
  wrap_inplace('fill_', rules.fill_)
  for _, k in ipairs({ 'zero_', 'uniform_', 'normal_', 'random_', 'bernoulli_' }) do
    wrap_inplace(k, rules.zero_)
  end
  -- in-place comparisons and logical ops: piecewise constant (zero gradient), and they
  -- bump the version counter like every in-place op
  for _, k in ipairs({ 'eq_', 'ne_', 'lt_', 'le_', 'gt_', 'ge_', 'logical_and_', 'logical_or_', 'logical_xor_',
    'logical_not_', 'isnan_' }) do
    if methods[k] then wrap_inplace(k, rules.zero_) end
  end
  -- index/scatter writes (dpl.tensor_index): the out-of-place form records the rule of the in-place one
  for _, k in ipairs({ 'scatter', 'index_fill', 'index_copy', 'index_put', 'masked_scatter', 'put' }) do
    wrap_method(k, rules[k .. '_'])
    wrap_inplace(k .. '_', rules[k .. '_'])
  end
  wrap_inplace('fill_diagonal_', rules.fill_diagonal_)
  wrap_method('embedding', nil, T)
  wrap_method('conv2d', nil, T)
  wrap_method('avg_pool2d', nil, T)
  wrap_method('where', nil, T)
  do -- layer_norm returns its saved statistics too
    local raw = T.layer_norm
    T.layer_norm = function(x, w, b, nnum, eps)
      if not (S.live and S.grad_on and (rg[x] or (w and rg[w]) or (b and rg[b]))) then
        return raw(x, w, b, nnum, eps)
      end
      local ok, y, m, r = pcall(raw, x, w, b, nnum, eps)
      if not ok then rethrow(y) end
      return record(rules.layer_norm, y, x, w, b, nnum, eps, m, r), m, r
    end
  end
  do -- dropout keeps its packed mask for backward
    local raw = T.dropout
    T.dropout = function(x, p, keep_mask)
      if not (S.live and S.grad_on and rg[x]) then return raw(x, p, keep_mask) end
      local ok, y, m = pcall(raw, x, p, true)
      if not ok then rethrow(y) end
      return record(rules.dropout, y, x, p, m)
    end
  end
  do
    local raw = T.max_pool2d
    T.max_pool2d = function(x, k, opts)
      if S.live and S.grad_on and rg[x] then
        local ok, v, i = pcall(raw, x, k, opts)
        if not ok then rethrow(v) end
        record(rules.max_pool2d, v, x, k, opts, i)
        return v, i
      end
      return raw(x, k, opts)
    end
  end
  for _, k in ipairs({ 'view', 'reshape', 'squeeze', 'unsqueeze', 'transpose', 't', 'permute', 'narrow', 'select',
    'expand', 'contiguous', 'clone', 'to' }) do
    wrap_method(k)
  end
  do
    local raw = T.get_item
    T.get_item = function(t, k)
      if S.live and S.grad_on and rg[t] then return methods.select(t, 1, k) end
      return raw(t, k)
    end
    local raw_as = methods.as_strided
    methods.as_strided = function(t, ...)
      if S.live and S.grad_on and rg[t] then error('as_strided: not differentiable (its input requires grad)', 2) end
      return raw_as(t, ...)
    end
  end

  -- the shape ops of dpl.tensor_shape with rules of their own (the others are made of recorded ops)
  for _, k in ipairs({ 'cumsum', 'cumprod', 'flip', 'roll', 'tril', 'triu', 'diag', 'diagonal', 'unfold', 'take' }) do
    wrap_method(k)
  end
  wrap_inplace('tril_', rules.tril)
  wrap_inplace('triu_', rules.triu)
  for _, k in ipairs({ 'cummax', 'cummin' }) do -- values and indices
    local raw = methods[k]
    methods[k] = function(t, d)
      if not (S.live and S.grad_on and rg[t]) then return raw(t, d) end
      local ok, v, i = pcall(raw, t, d)
      if not ok then rethrow(v) end
      if is_float(v) then record(rules[k], v, t, d, i) end
      return v, i
    end
    if T[k] == raw then T[k] = methods[k] end
  end

  -- the math group (dpl.tensor_math): the ops with a rule, their in-place forms
  for _, k in ipairs(R.math_ops) do
    wrap_method(k)
    if methods[k .. '_'] and rules[k].inplace ~= false then wrap_inplace(k .. '_', rules[k]) end
  end
  for _, k in ipairs(R.math_int_inplace) do wrap_inplace(k, rules.zero_) end

  -- cat / stack take a list
  local function list_op(name, rule_bw)
    local raw = T[name]
    T[name] = function(list, d)
      if S.live and S.grad_on and type(list) == 'table' then
        local any = false
        for i = 1, #list do if rg[list[i]] then any = true break end end
        if any then
          local ok, out = pcall(raw, list, d)
          if not ok then rethrow(out) end
          local n = { bw = rule_bw, n = #list, dt = out._dtype, d = d or 1, name = name }
          if S.anomaly then forward_trace(n) end
          local sizes = {}
          -- cat skips an empty 1-d input beside others of more dims (PyTorch's legacy rule)
          local ref_nd = name == 'cat' and T._cat_ref(list)._ndim or nil
          for i = 1, #list do
            n[i] = edge(list[i])
            local t = list[i]
            if ref_nd and t._ndim ~= ref_nd then
              sizes[i] = 0
              n.skipped = n.skipped or {}
              n.skipped[i] = true
            else
              sizes[i] = t._ndim > 0 and tonumber(t._shape[n.d < 0 and t._ndim + n.d or n.d - 1]) or 1
            end
          end
          n.sizes = sizes
          rg[out] = true
          gfn[out] = n
          return out
        end
      end
      return raw(list, d)
    end
  end
  rules.cat = {
    bw = function(n, g)
      local r, pos = {}, 1
      for i = 1, n.n do
        if n[i] then
          if n.skipped and n.skipped[i] then r[i] = g:new_zeros(0)
          else r[i] = g:narrow(n.d, pos, n.sizes[i]) end
        end
        pos = pos + n.sizes[i]
      end
      return unpack(r, 1, n.n)
    end,
  }
  rules.stack = {
    bw = function(n, g)
      local r = {}
      for i = 1, n.n do
        if n[i] then r[i] = g:select(n.d, i) end
      end
      return unpack(r, 1, n.n)
    end,
  }
  list_op('cat', rules.cat.bw)
  list_op('stack', rules.stack.bw)
  T.concat = T.cat
end
