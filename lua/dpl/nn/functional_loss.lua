-- dpl.nn.functional_loss: the loss group of nn.functional (PyTorch 1.13's torch.nn.functional
-- names): every loss (the class losses cross_entropy / nll_loss on the C kernels, the
-- regression, margin, embedding, probabilistic losses and ctc_loss), the distances
-- (cosine_similarity, pairwise_distance, normalize), the activations logsigmoid, softmin,
-- softsign, tanhshrink, hardsigmoid, relu6, prelu, selu, celu, glu, threshold, and
-- local_response_norm, instance_norm. require('dpl.nn.functional_loss')(F) installs them
-- into F (nn.functional); the modules of lua/dpl/nn/loss.lua call the implementations in
-- F._loss with their own label, so that errors name the module.
--
-- Conventions: class labels and dims are 1-based; options are one table with PyTorch's
-- keyword names, checked by dpl.options (an unknown key is a ValueError); the deprecated
-- size_average / reduce and the options dplhost lacks raise NotImplementedError. Everything
-- is composed of tensor ops (so it runs wherever they do, and autograd differentiates it), with
-- three small hand-written backward rules where PyTorch's gradient is not that of the obvious
-- composition (logsigmoid at 0, the clamped norms of cosine_similarity, the clamped variance
-- of gaussian_nll_loss), and ctc_loss on a C kernel (src/tensor/dpl_tensor_ctc.c; on a GPU the
-- CUDA plugin's kernel).
local T = require 'dpl.tensor'
local autograd = require 'dpl.autograd'
local amp = require 'dpl.amp'
local options = require 'dpl.options'
local errors = require 'dpl.errors'

local fmt = string.format
local type, tostring, ipairs = type, tostring, ipairs
local huge = math.huge

local raise = errors.raise -- string messages become ValueError objects
local function error(msg) raise(msg) end
local function not_impl(msg) raise(msg, errors.NotImplementedError) end
local is_tensor = T.is_tensor
local check_opts, keys = options.check, options.keys

local function shape_str(t) return '[' .. table.concat(t:size(), ', ') .. ']' end
local function same_size(a, b)
  if a._ndim ~= b._ndim then return false end
  for i = 0, a._ndim - 1 do if a._shape[i] ~= b._shape[i] then return false end end
  return true
end
local function q(v) return type(v) == 'string' and ("'" .. v .. "'") or tostring(v) end

---------------------------------------------------------------- option specs
-- A spec lists a function's options as {name, default, check}; parse() checks the table
-- (unknown keys: ValueError; size_average / reduce: NotImplementedError) and returns the
-- values, defaults filled in (the modules keep them as fields, as PyTorch's).
local V = {}
function V.reduction(v, who, k)
  if v ~= 'mean' and v ~= 'sum' and v ~= 'none' then
    error(fmt("%s: %s must be 'none', 'mean' or 'sum', got %s", who, k, q(v)))
  end
  return v
end
function V.kl_reduction(v, who, k)
  if v ~= 'mean' and v ~= 'sum' and v ~= 'none' and v ~= 'batchmean' then
    error(fmt("%s: %s must be 'none', 'batchmean', 'sum' or 'mean', got %s", who, k, q(v)))
  end
  return v
end
function V.number(v, who, k)
  if type(v) ~= 'number' or v ~= v then error(fmt('%s: %s must be a number, got %s', who, k, q(v))) end
  return v
end
function V.positive(v, who, k)
  if type(v) ~= 'number' or not (v > 0) then error(fmt('%s: %s must be a positive number, got %s', who, k, q(v))) end
  return v
end
function V.nonneg(v, who, k)
  if type(v) ~= 'number' or not (v >= 0) then
    error(fmt('%s: %s must be a non-negative number, got %s', who, k, q(v)))
  end
  return v
end
function V.boolean(v, who, k)
  if type(v) ~= 'boolean' then error(fmt('%s: %s must be true or false, got %s', who, k, q(v))) end
  return v
end
function V.integer(v, who, k)
  if type(v) ~= 'number' or v ~= math.floor(v) or math.abs(v) >= 2 ^ 53 then
    error(fmt('%s: %s must be an integer, got %s', who, k, q(v)))
  end
  return v
end
function V.tensor(v, who, k)
  if not is_tensor(v) then error(fmt('%s: %s must be a tensor, got %s', who, k, type(v))) end
  if not v:is_floating_point() then error(fmt('%s: %s must be a floating point tensor, got %s', who, k, v.dtype)) end
  return v
end
function V.smoothing(v, who, k)
  if type(v) ~= 'number' or not (v >= 0 and v <= 1) then
    error(fmt('%s: %s must be between 0.0 and 1.0, got %s', who, k, q(v)))
  end
  return v
end
function V.p12(v, who, k)
  if v ~= 1 and v ~= 2 then error(fmt('%s: only %s = 1 and %s = 2 are supported, got %s', who, k, k, q(v))) end
  return v
end

local SPECS = {}
local function spec(name, list)
  local s = { list = list }
  local ks = {}
  for _, e in ipairs(list) do ks[#ks + 1] = e[1] end
  s.keys = keys(unpack(ks))
  SPECS[name] = s
  return s
end

local function parse(opts, s, who)
  if type(opts) == 'table' and (opts.size_average ~= nil or opts.reduce ~= nil) then
    not_impl(fmt("%s: size_average and reduce (deprecated in PyTorch) are not supported; use reduction = "
      .. "'none' | 'mean' | 'sum'", who))
  end
  check_opts(opts, s.keys, who)
  local o = {}
  for _, e in ipairs(s.list) do
    local v = opts and opts[e[1]]
    if v == nil then v = e[2] else v = e[3](v, who, e[1]) end
    o[e[1]] = v
  end
  return o
end

local RED = { 'reduction', 'mean', V.reduction }
spec('l1_loss', { RED })
spec('mse_loss', { RED })
spec('smooth_l1_loss', { RED, { 'beta', 1.0, V.nonneg } })
spec('huber_loss', { RED, { 'delta', 1.0, V.positive } })
spec('soft_margin_loss', { RED })
spec('kl_div', { { 'reduction', 'mean', V.kl_reduction }, { 'log_target', false, V.boolean } })
spec('binary_cross_entropy', { RED, { 'weight', nil, V.tensor } })
spec('binary_cross_entropy_with_logits', { RED, { 'weight', nil, V.tensor }, { 'pos_weight', nil, V.tensor } })
spec('poisson_nll_loss', { RED, { 'log_input', true, V.boolean }, { 'full', false, V.boolean },
  { 'eps', 1e-8, V.nonneg } })
spec('gaussian_nll_loss', { RED, { 'full', false, V.boolean }, { 'eps', 1e-6, V.nonneg } })
spec('cross_entropy', { RED, { 'weight', nil, V.tensor }, { 'ignore_index', nil, V.integer },
  { 'label_smoothing', 0.0, V.smoothing } })
spec('nll_loss', { RED, { 'weight', nil, V.tensor }, { 'ignore_index', nil, V.integer } })
spec('multilabel_soft_margin_loss', { RED, { 'weight', nil, V.tensor } })
spec('multilabel_margin_loss', { RED })
spec('multi_margin_loss', { RED, { 'p', 1, V.p12 }, { 'margin', 1.0, V.number }, { 'weight', nil, V.tensor } })
spec('margin_ranking_loss', { RED, { 'margin', 0.0, V.number } })
spec('hinge_embedding_loss', { RED, { 'margin', 1.0, V.number } })
spec('cosine_embedding_loss', { RED, { 'margin', 0.0, V.number } })
spec('triplet_margin_loss', { RED, { 'margin', 1.0, V.number }, { 'p', 2.0, V.number }, { 'eps', 1e-6, V.number },
  { 'swap', false, V.boolean } })
spec('ctc_loss', { RED, { 'blank', 1, V.integer }, { 'zero_infinity', false, V.boolean } })

---------------------------------------------------------------- argument checks
-- `who` in the messages is the function's name (F.*) or the module's label
local function need_tensor(x, who, what)
  if not is_tensor(x) then
    error(fmt('%s: %s must be a tensor, got %s', who, what, type(x) == 'cdata' and 'cdata (not a tensor)' or type(x)))
  end
end
local function need_float(x, who, what)
  need_tensor(x, who, what)
  if not x:is_floating_point() then
    error(fmt('%s: %s must be a floating point tensor, got %s', who, what, x.dtype))
  end
end
local function need_same_shape(a, b, who, what)
  if not same_size(a, b) then
    error(fmt('%s: input shape %s and %s shape %s differ', who, shape_str(a), what or 'target', shape_str(b)))
  end
end
-- input and target of one shape, floating (the target converted to a floating input's dtype when
-- it is an integer or bool tensor: the +1/-1 labels of the margin losses)
local function pair(a, b, who, int_target)
  need_float(a, who, 'input')
  need_tensor(b, who, 'target')
  if amp.dtype then a, b = amp.fp32(a), amp.fp32(b) end
  need_same_shape(a, b, who)
  if not b:is_floating_point() then
    if not int_target then error(fmt('%s: target must be a floating point tensor, got %s', who, b.dtype)) end
    b = b:to(a.dtype)
  end
  return a, b
end
-- the shape of broadcasting a and b, or an error naming both
local function broadcast_shape(sa, sb, who, what)
  local n = math.max(#sa, #sb)
  local r = {}
  for i = 1, n do
    local da, db = sa[#sa - n + i] or 1, sb[#sb - n + i] or 1
    if da ~= db and da ~= 1 and db ~= 1 then
      error(fmt('%s: %s: shapes [%s] and [%s] cannot be broadcast', who, what, table.concat(sa, ', '),
        table.concat(sb, ', ')))
    end
    r[i] = da == 1 and db or da
  end
  return r
end
-- a weight that must broadcast to shape (without changing it)
local function need_broadcastable(w, shape, who, what)
  local ws = w:size()
  local ok = #ws <= #shape
  for i = 1, #ws do
    local d, s = ws[#ws - i + 1], shape[#shape - i + 1]
    if d ~= 1 and d ~= s then ok = false end
  end
  if not ok then
    error(fmt('%s: %s of shape %s does not broadcast to the input shape [%s]', who, what, shape_str(w),
      table.concat(shape, ', ')))
  end
end

local function reduce(loss, reduction)
  if reduction == 'mean' then return loss:mean() end
  if reduction == 'sum' then return loss:sum() end
  return loss
end

-- 1-based dim d of an ndim-dim tensor (negative from the end), or an error
local function norm_dim(d, nd, who, what)
  if type(d) ~= 'number' or d ~= math.floor(d) or d >= 2 ^ 53 or d <= -2 ^ 53 then -- (inf: printed as -2^63 below)
    error(fmt('%s: %s must be an integer, got %s', who, what, q(d)))
  end
  local r = d < 0 and nd + d + 1 or d
  if r < 1 or r > math.max(nd, 1) or d == 0 then
    error(fmt('%s: %s %d is out of range for a %d-d input (expected 1..%d or -%d..-1)', who, what, d, nd,
      math.max(nd, 1), math.max(nd, 1)))
  end
  return r
end

---------------------------------------------------------------- hand-written rules
-- logsigmoid: min(x, 0) - log1p(exp(-|x|)) (PyTorch's forward), gradient sigmoid(-x) (the
-- composition would give 1 at x = 0: clamp and abs split the kink)
local logsigmoid_rule = {
  nin = 1, name = 'logsigmoid',
  save = function(n, out, x) n.x = x:detach() end,
  bw = function(n, g) return g * (-n.x):sigmoid() end,
}
local function logsigmoid(x)
  local xd = x:detach()
  local out = xd:clamp_max(0) - (-xd:abs()):exp():log1p()
  return autograd.record(logsigmoid_rule, out, x)
end

-- the 2-norm over dim d (kept), clamped below at eps with PyTorch 1.13's gradient for
-- cosine_similarity: x / clamped norm, the clamp passing the gradient through (torch clamps in
-- place under no_grad)
local cnorm_rule = {
  nin = 1, name = 'cosine_similarity_norm',
  save = function(n, out, x) n.x, n.y = x:detach(), out:detach() end,
  bw = function(n, g) return g * n.x / n.y end,
}
local function clamped_norm(x, d, eps)
  local out = x:detach():norm(2, d, true):clamp_min(eps)
  return autograd.record(cnorm_rule, out, x)
end

-- max(x, eps) whose gradient passes unchanged (gaussian_nll_loss clamps var under no_grad)
local pass_rule = { nin = 1, name = 'clamp_min_nograd', bw = function(_, g) return g end }
local function clamp_passing(x, eps) return autograd.record(pass_rule, x:detach():clamp_min(eps), x) end

-- binary_cross_entropy's elementwise loss -(y log p + (1 - y) log(1 - p)), the logs clamped at
-- -100, with PyTorch's gradients: (p - y) / max(p (1 - p), 1e-12) for p (finite at p = 0 and 1,
-- where the composition's 0/0 gave NaN), log(1 - p) - log(p) for y (not clamped: torch 1.13's
-- is infinite at p = 0 and 1)
local bce_rule = {
  nin = 2, name = 'binary_cross_entropy',
  save = function(n, out, p, y) n.p, n.y, n.y_grad = p:detach(), y:detach(), y.requires_grad end,
  bw = function(n, g)
    local gp = g * (n.p - n.y) / ((1 - n.p) * n.p):clamp_min(1e-12)
    if not n.y_grad then return gp end
    return gp, g * ((-n.p):log1p() - n.p:log())
  end,
}
local function bce_elementwise(p, y)
  local pd, yd = p:detach(), y:detach()
  local lp = pd:log():clamp(-100)
  local l1p = (-pd):log1p():clamp(-100)
  local out = -(yd * lp + (1 - yd) * l1p)
  return autograd.record(bce_rule, out, p, y)
end

---------------------------------------------------------------- implementations
-- L.name(inputs..., o, who): o holds the options (parse's result, or a module), who the name
-- used in messages.
local L = {}

function L.l1_loss(a, b, o, who)
  a, b = pair(a, b, who)
  return reduce((a - b):abs(), o.reduction)
end

function L.mse_loss(a, b, o, who)
  a, b = pair(a, b, who)
  if a.dtype ~= b.dtype then return reduce((a - b):square(), o.reduction) end
  return T.mse_loss(a, b, { reduction = o.reduction })
end

function L.smooth_l1_loss(a, b, o, who)
  a, b = pair(a, b, who)
  local beta = o.beta
  local d = (a - b):abs()
  if beta == 0 then return reduce(d, o.reduction) end -- the L1 loss, as PyTorch
  local quad = d:clamp(nil, beta)
  return reduce(quad * quad * (0.5 / beta) + (d - quad), o.reduction)
end

function L.huber_loss(a, b, o, who)
  a, b = pair(a, b, who)
  local delta = o.delta
  local d = (a - b):abs()
  local quad = d:clamp(nil, delta)
  return reduce(quad * quad * 0.5 + (d - quad) * delta, o.reduction)
end

function L.soft_margin_loss(a, b, o, who)
  a, b = pair(a, b, who, true)
  return reduce((-a * b):exp():log1p(), o.reduction)
end

-- xlogy(t, t) - t * x, or exp(t) * (t - x) with log_target
function L.kl_div(x, t, o, who)
  x, t = pair(x, t, who)
  local loss
  if o.log_target then
    loss = t:exp() * (t - x)
  else
    loss = T.where(t:eq(0), 0, t * t:log()) - t * x
  end
  local red = o.reduction
  if red == 'batchmean' then
    local s = loss:sum()
    if x:dim() == 0 then return s end
    return s / x:size(1)
  end
  return reduce(loss, red)
end

--- binary_cross_entropy: the logs clamped at -100 as PyTorch; probabilities outside [0, 1] are an error
function L.binary_cross_entropy(p, y, o, who)
  p, y = pair(p, y, who)
  if p:numel() > 0 then
    local pd = p:detach()
    local lo, hi = pd:min():item(), pd:max():item()
    if lo < 0 or hi > 1 then
      error(fmt('%s: all elements of input should be between 0 and 1, got values in [%.6g, %.6g]', who, lo, hi))
    end
  end
  local w = o.weight
  if w then need_broadcastable(w, p:size(), who, 'weight') end
  local loss = bce_elementwise(p, y)
  if w then loss = loss * w end
  return reduce(loss, o.reduction)
end

--- binary_cross_entropy_with_logits: (1 - y) x + (1 + (pos_weight - 1) y) (-logsigmoid(x))
function L.binary_cross_entropy_with_logits(x, y, o, who)
  x, y = pair(x, y, who)
  local w, pw = o.weight, o.pos_weight
  if w then need_broadcastable(w, x:size(), who, 'weight') end
  if pw then need_broadcastable(pw, x:size(), who, 'pos_weight') end
  local nls = -logsigmoid(x)
  local loss
  if pw then
    loss = (1 - y) * x + ((pw - 1) * y + 1) * nls
  else
    loss = (1 - y) * x + nls
  end
  if w then loss = loss * w end
  return reduce(loss, o.reduction)
end

function L.poisson_nll_loss(x, y, o, who)
  x, y = pair(x, y, who)
  local loss
  if o.log_input then loss = x:exp() - y * x
  else loss = x - y * (x + o.eps):log() end
  if o.full then
    -- Stirling's approximation of log(y!), for y > 1
    local st = y * y:log() - y + (y * (2 * math.pi)):log() * 0.5
    loss = loss + st:masked_fill(y:le(1), 0)
  end
  return reduce(loss, o.reduction)
end

function L.gaussian_nll_loss(x, y, var, o, who)
  need_float(x, who, 'input')
  need_float(y, who, 'target')
  need_float(var, who, 'var')
  if amp.dtype then x, y, var = amp.fp32(x), amp.fp32(y), amp.fp32(var) end
  if not same_size(var, x) then
    local xs, vs = x:size(), var:size()
    local ok = false
    if #vs == #xs - 1 then -- one dim short: var per sample, broadcast over the last dim
      ok = true
      for i = 1, #vs do if vs[i] ~= xs[i] then ok = false end end
      if ok then var = var:unsqueeze(-1) end
    elseif #vs == #xs and #xs > 0 and vs[#vs] == 1 then
      ok = true
      for i = 1, #vs - 1 do if vs[i] ~= xs[i] then ok = false end end
    end
    if not ok then
      error(fmt('%s: var of shape %s does not fit the input of shape %s (expected %s, the input shape without its '
        .. 'last dim, or with a last dim of 1)', who, shape_str(var), shape_str(x), shape_str(x)))
    end
  end
  if var:numel() > 0 and var:detach():min():item() < 0 then error(fmt('%s: var has negative entries', who)) end
  local v = clamp_passing(var, o.eps)
  local loss = (v:log() + (x - y):square() / v) * 0.5
  if o.full then loss = loss + 0.5 * math.log(2 * math.pi) end
  return reduce(loss, o.reduction)
end

---------------------------------------------------------------- class losses
-- The class losses take PyTorch's shapes: input [C], [N, C] or [N, C, d1, d2, ...]; target
-- the class indices (1-based) of shape [], [N] or [N, d1, d2, ...], or (cross_entropy) class
-- probabilities of the input's shape. Returns the input as [M, C] (classes last), the target
-- as [M] (or [M, C]), the class count, the shape of an unreduced loss and whether the
-- target holds probabilities.
local function class_inputs(input, target, who, allow_probs)
  need_tensor(input, who, 'input')
  need_tensor(target, who, 'target')
  if not input:is_floating_point() then
    error(fmt('%s: input must be a floating point tensor, got %s', who, input.dtype))
  end
  local nd = input:dim()
  if nd == 0 then
    error(fmt('%s: expected input of shape [C], [N, C] or [N, C, d1, ...], got a 0-d tensor', who))
  end
  local isz = input:size()
  local C = nd == 1 and isz[1] or isz[2]
  local probs = allow_probs and target:is_floating_point()
  local lshape = {} -- the target shape the input needs, and the shape of an unreduced loss
  if nd >= 2 then
    lshape[1] = isz[1]
    for i = 3, nd do lshape[#lshape + 1] = isz[i] end
  end
  local want = probs and isz or lshape
  local tsz = target:size()
  local same = #tsz == #want
  for i = 1, #want do if tsz[i] ~= want[i] then same = false end end
  if not same then
    error(fmt('%s: input of shape %s needs a target of shape [%s] (%s), got %s', who, shape_str(input),
      table.concat(want, ', '), probs and 'class probabilities' or 'class indices, 1-based', shape_str(target)))
  end
  if not probs and target:is_floating_point() then
    error(fmt('%s: target must hold integer class indices (1-based), got %s', who, target.dtype))
  end
  if nd == 2 then return input, target, C, lshape, probs end
  if nd == 1 then
    return input:unsqueeze(1), probs and target:unsqueeze(1) or target:reshape(1), C, lshape, probs
  end
  -- [N, C, d1, ...] -> [N, d1, ..., C] -> [M, C]
  local perm = { 1 }
  for i = 3, nd do perm[#perm + 1] = i end
  perm[#perm + 1] = 2
  local x2 = input:permute(perm):reshape(-1, C)
  local t2 = probs and target:permute(perm):reshape(-1, C) or target:reshape(-1)
  return x2, t2, C, lshape, probs
end

local function class_weight(w, C, input, who)
  if w == nil then return nil end
  if w:dim() ~= 1 or w:size(1) ~= C then
    error(fmt('%s: weight must have shape [%d] (one per class) for input of shape %s, got %s', who, C,
      shape_str(input), shape_str(w)))
  end
  return w
end

-- the C kernels name the target out of range by its sample; for an input of 3 or more dims
-- the message gives its position in the target instead, and a module's label comes first
local function call_class_kernel(kernel, x, t, kopts, lshape, nd, who, fname)
  local ok, out = pcall(kernel, x, t, kopts)
  if ok then return out end
  local e = out
  local msg = type(e) == 'table' and e.message or nil
  if type(msg) == 'string' then
    if nd > 2 then
      local v, k, rest = msg:match('^(.-target %-?%d+) of sample (%d+)( is out of range.*)$')
      if v then
        k = tonumber(k) - 1
        local pos = {}
        for i = #lshape, 1, -1 do
          pos[i] = k % lshape[i] + 1
          k = math.floor(k / lshape[i])
        end
        msg = fmt('%s at position [%s] of the target%s', v, table.concat(pos, ', '), rest)
      end
    end
    if who ~= fname then msg = who .. ': ' .. msg end
    e = setmetatable({ message = msg }, getmetatable(e))
  end
  _G.error(e, 0)
end

-- for an unreduced class loss [M] (zero where the target is ignored): the mask of the
-- counted targets (with ignore_index) and their class weights (with weight), by which
-- PyTorch's 'mean' divides; and the boolean mask of the counted targets
local function class_masks(loss, t, w, ign)
  local counted = ign and t:ne(ign) or nil
  local keep = counted and counted:to(loss.dtype) or nil
  local wt
  if w then
    local safe = ign and T.where(counted, t, 1) or t
    wt = w:to(loss.dtype):index_select(1, safe)
    if keep then wt = wt * keep end
  end
  return keep, wt, counted
end

--- cross_entropy(logits [N, C] (or [C], or [N, C, d1, ...]), target [N] (1-based classes; [] or
--- [N, d1, ...]) or class probabilities of the logits' shape,
--- {reduction='mean', label_smoothing=0, ignore_index=, weight=})
function L.cross_entropy(input, target, o, who)
  if amp.dtype then input, target = amp.fp32(input), amp.fp32(target) end
  local nd = is_tensor(input) and input:dim() or 0
  local x, t, C, lshape, probs = class_inputs(input, target, who, true)
  local eps, red, ign = o.label_smoothing, o.reduction, o.ignore_index
  local w = class_weight(o.weight, C, input, who)
  local loss
  if probs then -- class probabilities (PyTorch 1.10+)
    if ign ~= nil then
      error(fmt('%s: ignore_index is not supported for class-probability (floating point) targets', who))
    end
    local p = eps > 0 and t * (1 - eps) + eps / C or t
    local terms = x:log_softmax(2) * p
    if w then terms = terms * w:to(terms.dtype):view(1, C) end
    loss = -terms:sum(2)
    if red == 'none' and nd ~= 2 then return loss:view(lshape) end
    return reduce(loss, red)
  end
  if eps == 0 and not w then -- the fused kernel does it all
    loss = call_class_kernel(T.cross_entropy, x, t, { reduction = red, ignore_index = ign }, lshape, nd, who,
      'cross_entropy')
    if red == 'none' and nd ~= 2 then return loss:view(lshape) end
    return loss
  end
  local lp
  if eps > 0 then -- one log_softmax for both terms
    lp = x:log_softmax(2)
    loss = call_class_kernel(T.nll_loss, lp, t, { reduction = 'none', ignore_index = ign }, lshape, nd, who,
      'nll_loss')
  else
    loss = call_class_kernel(T.cross_entropy, x, t, { reduction = 'none', ignore_index = ign }, lshape, nd, who,
      'cross_entropy')
  end
  local keep, wt, counted = class_masks(loss, t, w, ign)
  if wt then loss = loss * wt end
  if eps > 0 then
    if w then lp = lp * w:to(lp.dtype):view(1, C) end
    local smooth = -lp:sum(2) -- the (weighted) sum over classes of -log p
    -- (where, not * keep: an ignored row gets a zero gradient even from a NaN 'mean')
    if counted then smooth = T.where(counted, smooth, 0) end
    loss = loss * (1 - eps) + smooth * (eps / C)
  end
  if red == 'none' then return nd ~= 2 and loss:view(lshape) or loss end
  if red == 'sum' then return loss:sum() end
  if wt then return loss:sum() / wt:sum() end
  if keep then return loss:sum() / keep:sum() end -- every target ignored: 0/0, NaN as PyTorch
  return loss:mean()
end

--- nll_loss(log_probs [N, C] (or [C], or [N, C, d1, ...]), target [N] (1-based; [] or
--- [N, d1, ...]), {reduction=, ignore_index=, weight=})
function L.nll_loss(input, target, o, who)
  if amp.dtype then input = amp.fp32(input) end
  local nd = is_tensor(input) and input:dim() or 0
  local x, t, C, lshape = class_inputs(input, target, who, false)
  local red, ign = o.reduction, o.ignore_index
  local w = class_weight(o.weight, C, input, who)
  if not w then
    local loss = call_class_kernel(T.nll_loss, x, t, { reduction = red, ignore_index = ign }, lshape, nd, who,
      'nll_loss')
    if red == 'none' and nd ~= 2 then return loss:view(lshape) end
    return loss
  end
  local loss = call_class_kernel(T.nll_loss, x, t, { reduction = 'none', ignore_index = ign }, lshape, nd, who,
    'nll_loss')
  local _, wt = class_masks(loss, t, w, ign)
  loss = loss * wt
  if red == 'none' then return nd ~= 2 and loss:view(lshape) or loss end
  if red == 'sum' then return loss:sum() end
  return loss:sum() / wt:sum()
end

-- input [C] or [N, C] and an integer target of its first dim(s): [N, C], [N], the loss shape
local function margin_inputs(x, t, who, multilabel)
  need_float(x, who, 'input')
  need_tensor(t, who, 'target')
  if amp.dtype then x = amp.fp32(x) end
  local nd = x:dim()
  if nd ~= 1 and nd ~= 2 then error(fmt('%s: input has shape %s, expected [C] or [N, C]', who, shape_str(x))) end
  if t:is_floating_point() then error(fmt('%s: target must hold integer class indices (1-based), got %s', who, t.dtype)) end
  local want = multilabel and x:size() or (nd == 2 and { x:size(1) } or {})
  local ts = t:size()
  local ok = #ts == #want
  for i = 1, #want do if ts[i] ~= want[i] then ok = false end end
  if not ok then
    error(fmt('%s: input of shape %s needs a target of shape [%s], got %s', who, shape_str(x), table.concat(want, ', '),
      shape_str(t)))
  end
  local C = x:size(-1)
  local x2 = nd == 2 and x or x:unsqueeze(1)
  local t2 = multilabel and (nd == 2 and t or t:unsqueeze(1)) or t:reshape(-1, 1)
  return x2, t2:long(), C, nd == 2 and { x:size(1) } or {}
end

--- multi_margin_loss(input [N, C] or [C], target [N] or [] (1-based), {p=1, margin=1, weight=}):
--- sum over i ~= y of max(0, margin - x[y] + x[i])^p (times weight[y]) / C
function L.multi_margin_loss(x, t, o, who)
  local x2, t2, C, lshape = margin_inputs(x, t, who, false)
  if t2:numel() > 0 then
    local lo, hi = t2:min():item(), t2:max():item()
    if lo < 1 or hi > C then
      error(fmt('%s: target %d is out of range: expected a class index in 1..%d', who, lo < 1 and lo or hi, C))
    end
  end
  local w = o.weight
  if w and (w:dim() ~= 1 or w:size(1) ~= C) then
    error(fmt('%s: weight must have shape [%d] (one per class), got %s', who, C, shape_str(w)))
  end
  local z = (x2 - x2:gather(2, t2) + o.margin):relu()
  if o.p == 2 then z = z * z end
  local others = T.arange(1, C + 1, { device = x2.device }):view(1, C):ne(t2)
  z = z * others:to(z.dtype)
  if w then z = z * w:to(z.dtype):index_select(1, t2:view(-1)):view(-1, 1) end
  local loss = z:sum(2) / C
  if o.reduction == 'none' then return loss:view(lshape) end
  return reduce(loss, o.reduction)
end

--- multilabel_margin_loss(input [N, C] or [C], target of the same shape: 1-based class
--- indices, the list ending at the first 0 (PyTorch's -1))
function L.multilabel_margin_loss(x, t, o, who)
  local x2, t2, C, lshape = margin_inputs(x, t, who, true)
  if t2:numel() > 0 then
    local lo, hi = t2:min():item(), t2:max():item()
    if lo < 0 or hi > C then
      error(fmt('%s: target value %d is out of range: expected class indices in 1..%d, a 0 ending the list', who,
        lo < 0 and lo or hi, C))
    end
  end
  local N = x2:size(1)
  -- the entries before the first 0 (no scan: argmax finds the first 0, and runs on GPUs too)
  local zero = t2:eq(0):long()
  local ends = T.where(zero:sum(2, true):gt(0), zero:argmax(2, true), C + 1) -- [N, 1]
  local valid = T.arange(1, C + 1, { device = x2.device }):view(1, C):lt(ends)
  -- only the first J columns hold targets (J: the longest list): [N, J, C] below, not [N, C, C]
  local J = N > 0 and ends:max():item() - 1 or 0
  if J == 0 then J = 1 end
  valid = valid:narrow(2, 1, J)
  local safe = T.where(valid, t2:narrow(2, 1, J), 1)
  local vf = valid:to(x2.dtype)
  local is_target = T.zeros({ N, C }, { dtype = x2.dtype, device = x2.device }):scatter_add_(2, safe, vf):gt(0)
  local xt = x2:gather(2, safe)                              -- [N, J]: x at the j-th target
  local z = (x2:unsqueeze(2) - xt:unsqueeze(3) + 1):relu()   -- [N, j, i]
  local mask = vf:unsqueeze(3) * is_target:logical_not():to(x2.dtype):unsqueeze(2)
  local loss = (z * mask):sum(3):sum(2) / C
  if o.reduction == 'none' then return loss:view(lshape) end
  return reduce(loss, o.reduction)
end

--- multilabel_soft_margin_loss(input [N, C] (classes last, any dims), target of its shape
--- (0/1), {weight=}): -(y logsigmoid(x) + (1 - y) logsigmoid(-x)) averaged over the classes
function L.multilabel_soft_margin_loss(x, y, o, who)
  x, y = pair(x, y, who, true)
  if x:dim() == 0 then error(fmt('%s: input has shape [], expected [C] or [N, C]', who)) end
  local loss = -(y * logsigmoid(x) + (1 - y) * logsigmoid(-x))
  if o.weight then
    need_broadcastable(o.weight, x:size(), who, 'weight')
    loss = loss * o.weight
  end
  loss = loss:sum(-1) / x:size(-1)
  return reduce(loss, o.reduction)
end

--- margin_ranking_loss(x1, x2, y): max(0, -y (x1 - x2) + margin); the three of one number of dims
function L.margin_ranking_loss(x1, x2, y, o, who)
  need_float(x1, who, 'input1')
  need_float(x2, who, 'input2')
  need_tensor(y, who, 'target')
  if amp.dtype then x1, x2, y = amp.fp32(x1), amp.fp32(x2), amp.fp32(y) end
  if x1:dim() ~= x2:dim() or x1:dim() ~= y:dim() then
    error(fmt('%s: input1, input2 and target must have the same number of dims, got %s, %s and %s', who,
      shape_str(x1), shape_str(x2), shape_str(y)))
  end
  broadcast_shape(broadcast_shape(x1:size(), x2:size(), who, 'input1 and input2'), y:size(), who, 'inputs and target')
  if not y:is_floating_point() then y = y:to(x1.dtype) end
  return reduce((-y * (x1 - x2) + o.margin):clamp_min(0), o.reduction)
end

--- hinge_embedding_loss(x, y (1 or -1)): x where y = 1, max(0, margin - x) where y = -1
function L.hinge_embedding_loss(x, y, o, who)
  x, y = pair(x, y, who, true)
  local m = T.where(y:ne(1), (o.margin - x):clamp_min(0), 0)
  return reduce(m + T.where(y:ne(-1), x, 0), o.reduction)
end

--- cosine_embedding_loss(x1 [N, D] or [D], x2 likewise, y [N] or []: 1 or -1):
--- 1 - cos where y = 1, max(0, cos - margin) where y = -1 (PyTorch's cos, with 1e-12 added to
--- each squared norm)
function L.cosine_embedding_loss(x1, x2, y, o, who)
  need_float(x1, who, 'input1')
  need_float(x2, who, 'input2')
  need_tensor(y, who, 'target')
  if amp.dtype then x1, x2, y = amp.fp32(x1), amp.fp32(x2), amp.fp32(y) end
  local td = y:dim()
  if td > 1 then error(fmt('%s: target must be 0-d or 1-d (one label per pair), got %s', who, shape_str(y))) end
  if x1:dim() ~= td + 1 or x2:dim() ~= td + 1 then
    error(fmt('%s: a %d-d target needs %d-d inputs ([%s]), got %s and %s', who, td, td + 1, td == 1 and 'N, D' or 'D',
      shape_str(x1), shape_str(x2)))
  end
  local d = td + 1
  local sh = broadcast_shape(x1:size(), x2:size(), who, 'input1 and input2')
  if td == 1 and y:size(1) ~= sh[1] and y:size(1) ~= 1 and sh[1] ~= 1 then
    error(fmt('%s: target of shape %s does not fit inputs of shape %s and %s', who, shape_str(y), shape_str(x1),
      shape_str(x2)))
  end
  local prod = (x1 * x2):sum(d)
  local m1 = (x1 * x1):sum(d) + 1e-12
  local m2 = (x2 * x2):sum(d) + 1e-12
  local cos = prod / (m1 * m2):sqrt()
  local loss = T.where(y:eq(1), 1 - cos, 0) + T.where(y:eq(-1), (cos - o.margin):clamp_min(0), 0)
  return reduce(loss, o.reduction)
end

---------------------------------------------------------------- distances
local function dist_pair(x1, x2, who)
  need_float(x1, who, 'x1')
  need_float(x2, who, 'x2')
  if amp.dtype then x1, x2 = amp.fp32(x1), amp.fp32(x2) end
  return x1, x2
end

--- pairwise_distance(x1, x2, p=2, eps=1e-6, keepdim=false): ||x1 - x2 + eps||_p over the last dim
function L.pairwise_distance(x1, x2, p, eps, keepdim, who)
  x1, x2 = dist_pair(x1, x2, who)
  broadcast_shape(x1:size(), x2:size(), who, 'x1 and x2')
  local nd = math.max(x1:dim(), x2:dim())
  return (x1 - x2 + eps):norm(p, nd == 0 and -1 or nd, keepdim)
end

--- cosine_similarity(x1, x2, dim=2, eps=1e-8): sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps))
--- over dim, after broadcasting x1 and x2 (dim 2 is PyTorch's default dim=1)
function L.cosine_similarity(x1, x2, dim, eps, who)
  x1, x2 = dist_pair(x1, x2, who)
  local sh = broadcast_shape(x1:size(), x2:size(), who, 'x1 and x2')
  local d = norm_dim(dim, #sh, who, 'dim')
  if #sh == 0 then x1, x2 = x1:view(1), x2:view(1) else x1, x2 = x1:expand(sh), x2:expand(sh) end
  local r = ((x1 / clamped_norm(x1, d, eps)) * (x2 / clamped_norm(x2, d, eps))):sum(d)
  if #sh == 0 then return r:view({}) end
  return r
end

--- triplet_margin_loss(anchor, positive, negative, {margin=1, p=2, eps=1e-6, swap=false}):
--- max(0, margin + d(a, p) - d(a, n)) with d the pairwise distance (swap: d(a, n) is the
--- smaller of d(a, n) and d(p, n))
function L.triplet_margin_loss(a, pos, neg, o, who)
  need_float(a, who, 'anchor')
  need_float(pos, who, 'positive')
  need_float(neg, who, 'negative')
  if a:dim() ~= pos:dim() or a:dim() ~= neg:dim() then
    error(fmt('%s: anchor, positive and negative must have the same number of dims, got %s, %s and %s', who,
      shape_str(a), shape_str(pos), shape_str(neg)))
  end
  if a:dim() ~= 1 and a:dim() ~= 2 then
    error(fmt('%s: expected inputs of shape [N, D] or [D], got %s', who, shape_str(a)))
  end
  local dp = L.pairwise_distance(a, pos, o.p, o.eps, false, who)
  local dn = L.pairwise_distance(a, neg, o.p, o.eps, false, who)
  if o.swap then dn = dn:minimum(L.pairwise_distance(pos, neg, o.p, o.eps, false, who)) end
  return reduce((dp - dn + o.margin):clamp_min(0), o.reduction)
end

--- normalize(x, p=2, dim=2, eps=1e-12): x / max(||x||_p over dim, eps)
function L.normalize(x, p, dim, eps, who)
  need_float(x, who, 'input')
  local d = norm_dim(dim, x:dim(), who, 'dim')
  if x:dim() == 0 then d = -1 end
  return x / x:norm(p, d, true):clamp_min(eps):expand_as(x)
end

---------------------------------------------------------------- activations
local SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
L.SELU_ALPHA, L.SELU_SCALE = SELU_ALPHA, SELU_SCALE

function L.logsigmoid(x, who)
  need_float(x, who, 'input')
  return logsigmoid(x)
end
function L.softmin(x, dim, dtype, who)
  need_tensor(x, who, 'input')
  if dtype ~= nil then x = x:to(dtype) end
  if not x:is_floating_point() then error(fmt('%s: input must be a floating point tensor, got %s', who, x.dtype)) end
  return (-x):softmax(norm_dim(dim, x:dim(), who, 'dim'))
end
function L.softsign(x, who)
  need_float(x, who, 'input')
  return x / (x:abs() + 1)
end
function L.tanhshrink(x, who)
  need_float(x, who, 'input')
  return x - x:tanh()
end
-- relu6(x) = hardtanh(x, 0, 6); hardsigmoid(x) = (hardtanh(x, -3, 3) + 3) / 6: the hardtanh
-- kernel's gradient is PyTorch's for both (zero at the kinks)
function L.relu6(x, inplace, who)
  need_float(x, who, 'input')
  if inplace then return x:hardtanh_(0, 6) end
  return x:hardtanh(0, 6)
end
function L.hardsigmoid(x, inplace, who)
  need_float(x, who, 'input')
  if inplace then return x:hardtanh_(-3, 3):add_(3):div_(6) end
  return (x:hardtanh(-3, 3) + 3) / 6
end
-- selu(x) = scale * elu(x, alpha); celu(x) = alpha * elu(x / alpha, 1)
function L.selu(x, inplace, who)
  need_float(x, who, 'input')
  if inplace then return x:elu_(SELU_ALPHA):mul_(SELU_SCALE) end
  return x:elu(SELU_ALPHA) * SELU_SCALE
end
function L.celu(x, alpha, inplace, who)
  need_float(x, who, 'input')
  if alpha == 0 then error(fmt('%s: alpha cannot be 0 (ZeroDivisionError)', who)) end
  if inplace then return x:div_(alpha):elu_(1):mul_(alpha) end
  if alpha == 1 then return x:elu(1) end
  return (x / alpha):elu(1) * alpha
end
function L.glu(x, dim, who)
  need_float(x, who, 'input')
  if x:dim() == 0 then error(fmt('%s: glu does not support 0-d inputs (the halved dim must be even)', who)) end
  local d = norm_dim(dim, x:dim(), who, 'dim')
  local n = x:size(d)
  if n % 2 ~= 0 then
    error(fmt('%s: the halved dim must be even, but dim %d of the input %s has size %d', who, dim, shape_str(x), n))
  end
  return x:narrow(d, 1, n / 2) * x:narrow(d, n / 2 + 1, n / 2):sigmoid()
end
function L.threshold(x, th, value, inplace, who)
  need_tensor(x, who, 'input')
  local m = x:le(th)
  if inplace then return x:masked_fill_(m, value) end
  return T.where(m, value, x)
end
--- prelu(x, weight): x where x > 0, else weight * x, weight [1] or one per channel (dim 2; an
--- input of fewer dims has one channel, as PyTorch's)
function L.prelu(x, w, who)
  need_float(x, who, 'input')
  need_float(w, who, 'weight')
  local n = w:numel()
  local shape
  if n ~= 1 then
    if w:dim() ~= 1 then error(fmt('%s: weight must be 1-d (one slope per channel) or hold one value, got %s', who,
      shape_str(w))) end
    if x:dim() < 2 or x:size(2) ~= n then
      error(fmt('%s: %d parameters for an input of shape %s, which has %d channels (dim 2)', who, n,
        shape_str(x), x:dim() < 2 and 1 or x:size(2)))
    end
    shape = {}
    for i = 1, x:dim() do shape[i] = i == 2 and n or 1 end
  else
    shape = {}
    for i = 1, x:dim() do shape[i] = 1 end
  end
  local wv = w:reshape(shape)
  return T.where(x:gt(0), x, wv * x)
end

---------------------------------------------------------------- normalisation
--- local_response_norm(x [N, C, ...], size, alpha=1e-4, beta=0.75, k=1): x divided by
--- (k + alpha / size * sum of x^2 over the `size` channels around)^beta (zero-padded, as PyTorch)
function L.local_response_norm(x, size, alpha, beta, k, who)
  need_float(x, who, 'input')
  if x:dim() < 3 then
    error(fmt('%s: expected an input of 3 or more dims [N, C, ...], got %s', who, shape_str(x)))
  end
  if x:numel() == 0 then return x end
  local N, C = x:size(1), x:size(2)
  local sq = (x * x):reshape(N, C, -1)
  local R = sq:size(3)
  local front, back = math.floor(size / 2), math.floor((size - 1) / 2)
  local parts = {}
  if front > 0 then parts[#parts + 1] = sq:new_zeros(N, front, R) end
  parts[#parts + 1] = sq
  if back > 0 then parts[#parts + 1] = sq:new_zeros(N, back, R) end
  local padded = #parts > 1 and T.cat(parts, 2) or sq
  local avg = padded:unfold(2, size, 1):sum(4) / size -- [N, C, R]
  local div = (avg * alpha + k):pow(beta):view(x:size())
  return x / div
end

--- instance_norm(x [N, C, ...], running_mean, running_var, weight, bias, use_input_stats=true,
--- momentum=0.1, eps=1e-5): each sample's channels normalised over their positions (biased
--- variance); with use_input_stats and running statistics, those move towards the batch's
--- mean of the per-instance statistics (unbiased variances), as PyTorch's
function L.instance_norm(x, rm, rv, w, b, use_stats, momentum, eps, who)
  need_float(x, who, 'input')
  if x:dim() < 3 then error(fmt('%s: expected an input [N, C, ...] of 3 or more dims, got %s', who, shape_str(x))) end
  local N, C = x:size(1), x:size(2)
  for _, e in ipairs({ { rm, 'running_mean' }, { rv, 'running_var' }, { w, 'weight' }, { b, 'bias' } }) do
    if e[1] ~= nil then
      need_float(e[1], who, e[2])
      if e[1]:numel() ~= C then
        error(fmt('%s: %s has %d elements, expected %d (the channels of the input %s)', who, e[2], e[1]:numel(), C,
          shape_str(x)))
      end
    end
  end
  local shape = { 1, C }
  for _ = 3, x:dim() do shape[#shape + 1] = 1 end
  local y
  if use_stats then
    local x3 = x:reshape(N, C, -1)
    local R = x3:size(3)
    if R <= 1 then
      error(fmt('%s: expected more than 1 spatial element when training, got input size %s', who, shape_str(x)))
    end
    local mean = x3:mean(3, true)
    local xc = x3 - mean
    local var = (xc * xc):mean(3, true)
    y = (xc * (var + eps):rsqrt()):view(x:size())
    if rm ~= nil or rv ~= nil then
      autograd.no_grad(function()
        if rm then rm:mul_(1 - momentum):add_(mean:detach():view(N, C):mean(1):to(rm.dtype) * momentum) end
        if rv then
          local unb = var:detach():view(N, C) * (R / (R - 1))
          rv:mul_(1 - momentum):add_(unb:mean(1):to(rv.dtype) * momentum)
        end
      end)
    end
  else
    if rm == nil or rv == nil then
      error(fmt('%s: running_mean and running_var are needed when use_input_stats is false', who))
    end
    y = (x - rm:view(shape)) * (rv:view(shape) + eps):rsqrt()
  end
  if w then y = y * w:view(shape) end
  if b then y = y + b:view(shape) end
  return y
end

---------------------------------------------------------------- CTC
-- the C kernels (dpl_ctc_loss, dpl_ctc_loss_backward in include/dpl.h): 0-based targets and blank
local ffi = require 'ffi'
local capi_C = require('dpl.capi').C
local out_a, out_b = ffi.new('dpl_tensor*[1]'), ffi.new('dpl_tensor*[1]')
local ENOMEM = -2
local function ctc_call(who, f, ...)
  local st = f(...)
  if st == ENOMEM then collectgarbage() st = f(...) end
  if st ~= 0 then
    local _, e = pcall(T._fail, 2, st)
    if who ~= 'ctc_loss' and type(e) == 'table' then -- (a module: its label first)
      e = setmetatable({ message = who .. ': ' .. tostring(e.message) }, getmetatable(e))
    end
    _G.error(e, 0)
  end
end
--- ctc_forward(log_probs [T, N, C], targets (int64, 1-based), input_lengths, target_lengths (int64
--- [N]), blank (1-based)) -> nll [N], log_alpha (for backward)
local function ctc_forward(lp, tg, il, tl, blank, who)
  ctc_call(who, capi_C.dpl_ctc_loss, lp, tg - 1, il, tl, blank - 1, out_a, out_b)
  local nll = T._wrap(out_a)
  return nll, T._wrap(out_b)
end
local function ctc_backward(g, lp, tg, il, tl, nll, alpha, blank, zinf)
  ctc_call('ctc_loss', capi_C.dpl_ctc_loss_backward, g, lp, tg - 1, il, tl, nll, alpha, blank - 1, zinf and 1 or 0, out_a)
  return T._wrap(out_a)
end
--- ctc_loss(log_probs [T, N, C] (or [T, C]), targets [N, S] or 1-d concatenated (1-based
--- classes), input_lengths, target_lengths (tensors or lists of N integers), {blank=1,
--- reduction='mean', zero_infinity=false}); 'mean' divides each loss by its target length,
--- then averages, as PyTorch. The C kernel computes the loss and, for backward, PyTorch's
--- gradient with respect to log_probs.
local ctc_rule = {
  nin = 1, name = 'ctc_loss',
  save = function(n, out, lp, tg, il, tl, blank, zinf, nll, alpha)
    n.lp, n.tg, n.il, n.tl, n.blank, n.zinf, n.nll, n.alpha = lp:detach(), tg, il, tl, blank, zinf, nll, alpha
  end,
  bw = function(n, g)
    return ctc_backward(g, n.lp, n.tg, n.il, n.tl, n.nll, n.alpha, n.blank, n.zinf)
  end,
}
local function int_list(v, who, what, n)
  if is_tensor(v) then
    if v:is_floating_point() then error(fmt('%s: %s must hold integers, got %s', who, what, v.dtype)) end
    if v:dim() > 1 then error(fmt('%s: %s must be 1-d, got %s', who, what, shape_str(v))) end
    v = v:to('cpu'):long():view(-1)
  elseif type(v) == 'table' then
    for i, e in ipairs(v) do
      if type(e) ~= 'number' or e ~= math.floor(e) then
        error(fmt('%s: %s[%d] must be an integer, got %s', who, what, i, q(e)))
      end
    end
    v = T.tensor(#v > 0 and v or {}, { dtype = 'int64' })
  elseif type(v) == 'number' and n == 1 then
    v = T.tensor({ v }, { dtype = 'int64' })
  else
    error(fmt('%s: %s must be a tensor or a list of integers, got %s', who, what, type(v)))
  end
  if v:numel() ~= n then
    error(fmt('%s: %s must have %d entries (one per sequence), got %d', who, what, n, v:numel()))
  end
  return v
end

function L.ctc_loss(lp, targets, il, tl, o, who)
  need_float(lp, who, 'log_probs')
  need_tensor(targets, who, 'targets')
  if amp.dtype then lp = amp.fp32(lp) end
  local batched = lp:dim() == 3
  if lp:dim() ~= 2 and lp:dim() ~= 3 then
    error(fmt('%s: log_probs has shape %s, expected [T, N, C] (or [T, C] unbatched)', who, shape_str(lp)))
  end
  if targets:is_floating_point() then
    error(fmt('%s: targets must hold integer class indices (1-based), got %s', who, targets.dtype))
  end
  local lp3 = batched and lp or lp:unsqueeze(2)
  local N, C = lp3:size(2), lp3:size(3)
  if o.blank < 1 or o.blank > C then
    error(fmt('%s: blank must be a class index in 1..%d, got %d', who, C, o.blank))
  end
  il = int_list(il, who, 'input_lengths', N)
  tl = int_list(tl, who, 'target_lengths', N)
  local tg = targets
  if not batched and tg:dim() == 1 and tl:numel() == 1 then tg = tg:view(1, -1) end
  if tg:dim() ~= 1 and tg:dim() ~= 2 then
    error(fmt('%s: targets must be [N, S] or the 1-d concatenation of the targets, got %s', who, shape_str(tg)))
  end
  if tg:dim() == 2 and tg:size(1) ~= N then
    error(fmt('%s: targets of shape %s for %d sequences (log_probs %s)', who, shape_str(tg), N, shape_str(lp)))
  end
  tg = tg:to('cpu'):long():contiguous()
  local nll, alpha = ctc_forward(lp3, tg, il, tl, o.blank, who)
  local loss = autograd.record(ctc_rule, nll, lp3, tg, il, tl, o.blank, o.zero_infinity, nll:detach(), alpha)
  if o.zero_infinity then
    local inf = nll:detach():eq(huge)
    if inf:any():item() then loss = T.where(inf, 0, loss) end
  end
  local red = o.reduction
  if red == 'mean' then
    return (loss / tl:to(loss.dtype):to(loss.device):clamp_min(1)):mean()
  elseif red == 'sum' then
    return loss:sum()
  end
  if not batched then return loss:view({}) end
  return loss
end

---------------------------------------------------------------- F.* entry points
-- positional arguments as PyTorch's, or one options table with its keyword names as the
-- last argument: args(who, names, defaults, accepted, a1, a2, ...) -> values
local function args(who, names, accepted, a1, a2, a3, a4, a5)
  local list = { a1, a2, a3, a4, a5 }
  local np, last = #names, 0
  for i = 1, 5 do if list[i] ~= nil then last = i end end
  local v = {}
  for i = 1, last do
    local a = list[i]
    if type(a) == 'table' and not is_tensor(a) then
      if i ~= last then error(fmt('%s: the options table must be the last argument', who)) end
      check_opts(a, accepted, who)
      for j = 1, np do
        local x = a[names[j]]
        if x ~= nil then
          if j < i then error(fmt('%s: %s given both as an argument and as an option', who, names[j])) end
          v[j] = x
        end
      end
      return v
    end
    if i > np then error(fmt('%s: too many arguments (expected at most %d after the input)', who, np)) end
    v[i] = a
  end
  return v
end
local function arg_keys(names) return keys(unpack(names)) end

return function(F)
  local SP = SPECS
  local function loss2(name)
    local s = SP[name]
    local impl = L[name]
    F[name] = function(a, b, opts) return impl(a, b, parse(opts, s, name), name) end
  end
  local function loss3(name)
    local s = SP[name]
    local impl = L[name]
    F[name] = function(a, b, c, opts) return impl(a, b, c, parse(opts, s, name), name) end
  end
  for _, n in ipairs({ 'l1_loss', 'mse_loss', 'smooth_l1_loss', 'huber_loss', 'soft_margin_loss', 'kl_div',
    'binary_cross_entropy', 'binary_cross_entropy_with_logits', 'poisson_nll_loss', 'cross_entropy', 'nll_loss',
    'multilabel_soft_margin_loss', 'multilabel_margin_loss', 'multi_margin_loss', 'hinge_embedding_loss' }) do
    loss2(n)
  end
  for _, n in ipairs({ 'gaussian_nll_loss', 'margin_ranking_loss', 'cosine_embedding_loss', 'triplet_margin_loss' }) do
    loss3(n)
  end
  --- ctc_loss(log_probs, targets, input_lengths, target_lengths [, {blank=1, reduction=, zero_infinity=}])
  F.ctc_loss = function(lp, tg, il, tl, opts)
    return L.ctc_loss(lp, tg, il, tl, parse(opts, SP.ctc_loss, 'ctc_loss'), 'ctc_loss')
  end

  -- distances
  local CS = { 'dim', 'eps' }
  local CS_K = arg_keys(CS)
  --- cosine_similarity(x1, x2, dim=2, eps=1e-8) (or {dim=, eps=})
  F.cosine_similarity = function(x1, x2, a, b, c)
    local v = args('cosine_similarity', CS, CS_K, a, b, c)
    local dim, eps = v[1] or 2, v[2] or 1e-8
    V.number(eps, 'cosine_similarity', 'eps')
    return L.cosine_similarity(x1, x2, dim, eps, 'cosine_similarity')
  end
  local PD = { 'p', 'eps', 'keepdim' }
  local PD_K = arg_keys(PD)
  --- pairwise_distance(x1, x2, p=2, eps=1e-6, keepdim=false) (or {p=, eps=, keepdim=})
  F.pairwise_distance = function(x1, x2, a, b, c, d)
    local v = args('pairwise_distance', PD, PD_K, a, b, c, d)
    local p, eps, kd = v[1] or 2, v[2] or 1e-6, v[3] or false
    V.number(p, 'pairwise_distance', 'p')
    V.number(eps, 'pairwise_distance', 'eps')
    V.boolean(kd, 'pairwise_distance', 'keepdim')
    return L.pairwise_distance(x1, x2, p, eps, kd, 'pairwise_distance')
  end
  local NZ = { 'p', 'dim', 'eps' }
  local NZ_K = keys('p', 'dim', 'eps', 'out')
  --- normalize(x, p=2, dim=2, eps=1e-12) (or {p=, dim=, eps=})
  F.normalize = function(x, a, b, c, d)
    local v = args('normalize', NZ, NZ_K, a, b, c, d)
    local last = d or c or b or a -- (args checked that an options table comes last)
    if type(last) == 'table' and last.out ~= nil then not_impl('normalize: option out is not supported in dplhost') end
    local p, dim, eps = v[1] or 2, v[2] or 2, v[3] or 1e-12
    V.number(p, 'normalize', 'p')
    V.number(eps, 'normalize', 'eps')
    return L.normalize(x, p, dim, eps, 'normalize')
  end

  -- activations
  F.logsigmoid = function(x) return L.logsigmoid(x, 'logsigmoid') end
  F.softsign = function(x) return L.softsign(x, 'softsign') end
  F.tanhshrink = function(x) return L.tanhshrink(x, 'tanhshrink') end
  local SM = { 'dim', 'dtype' }
  local SM_K = keys('dim', 'dtype', '_stacklevel')
  --- softmin(x, dim=-1, dtype=nil): softmax(-x, dim) (dim: dplhost's Softmax default, the last)
  F.softmin = function(x, a, b)
    local v = args('softmin', SM, SM_K, a, b)
    return L.softmin(x, v[1] or -1, v[2], 'softmin')
  end
  local IP = { 'inplace' }
  local IP_K = arg_keys(IP)
  local function inplace_arg(who, a, b)
    local v = args(who, IP, IP_K, a, b)
    if v[1] ~= nil then V.boolean(v[1], who, 'inplace') end
    return v[1] or false
  end
  F.relu6 = function(x, a, b) return L.relu6(x, inplace_arg('relu6', a, b), 'relu6') end
  F.hardsigmoid = function(x, a, b) return L.hardsigmoid(x, inplace_arg('hardsigmoid', a, b), 'hardsigmoid') end
  F.selu = function(x, a, b) return L.selu(x, inplace_arg('selu', a, b), 'selu') end
  F.selu_ = function(x) return L.selu(x, true, 'selu_') end
  local CE = { 'alpha', 'inplace' }
  local CE_K = arg_keys(CE)
  --- celu(x, alpha=1, inplace=false)
  F.celu = function(x, a, b, c)
    local v = args('celu', CE, CE_K, a, b, c)
    local alpha = v[1] or 1
    V.number(alpha, 'celu', 'alpha')
    if v[2] ~= nil then V.boolean(v[2], 'celu', 'inplace') end
    return L.celu(x, alpha, v[2] or false, 'celu')
  end
  F.celu_ = function(x, alpha)
    alpha = alpha or 1
    V.number(alpha, 'celu_', 'alpha')
    return L.celu(x, alpha, true, 'celu_')
  end
  local GL_K = keys('dim')
  --- glu(x, dim=-1)
  F.glu = function(x, a, b)
    local v = args('glu', { 'dim' }, GL_K, a, b)
    return L.glu(x, v[1] or -1, 'glu')
  end
  local TH = { 'threshold', 'value', 'inplace' }
  local TH_K = arg_keys(TH)
  --- threshold(x, threshold, value, inplace=false): value where x <= threshold, else x
  F.threshold = function(x, a, b, c, d)
    local v = args('threshold', TH, TH_K, a, b, c, d)
    V.number(v[1], 'threshold', 'threshold')
    V.number(v[2], 'threshold', 'value')
    if v[3] ~= nil then V.boolean(v[3], 'threshold', 'inplace') end
    return L.threshold(x, v[1], v[2], v[3] or false, 'threshold')
  end
  F.threshold_ = function(x, th, value)
    V.number(th, 'threshold_', 'threshold')
    V.number(value, 'threshold_', 'value')
    return L.threshold(x, th, value, true, 'threshold_')
  end
  F.prelu = function(x, w) return L.prelu(x, w, 'prelu') end
  local LRN = { 'size', 'alpha', 'beta', 'k' }
  local LRN_K = arg_keys(LRN)
  --- local_response_norm(x, size, alpha=1e-4, beta=0.75, k=1)
  F.local_response_norm = function(x, a, b, c, d, e)
    local v = args('local_response_norm', LRN, LRN_K, a, b, c, d, e)
    local size = v[1]
    V.integer(size, 'local_response_norm', 'size')
    if size < 1 then error(fmt('local_response_norm: size must be >= 1, got %d', size)) end
    local alpha, beta, k = v[2] or 1e-4, v[3] or 0.75, v[4] or 1
    V.number(alpha, 'local_response_norm', 'alpha')
    V.number(beta, 'local_response_norm', 'beta')
    V.number(k, 'local_response_norm', 'k')
    return L.local_response_norm(x, size, alpha, beta, k, 'local_response_norm')
  end
  --- instance_norm(x, running_mean, running_var, weight, bias, use_input_stats=true, momentum=0.1, eps=1e-5)
  F.instance_norm = function(x, rm, rv, w, b, use, mom, eps)
    if use == nil then use = true end
    V.boolean(use, 'instance_norm', 'use_input_stats')
    mom, eps = mom or 0.1, eps or 1e-5
    V.number(mom, 'instance_norm', 'momentum')
    V.number(eps, 'instance_norm', 'eps')
    return L.instance_norm(x, rm, rv, w, b, use, mom, eps, 'instance_norm')
  end

  F._loss = { impl = L, specs = SPECS, parse = parse, V = V, args = args, norm_dim = norm_dim }
  return F
end
