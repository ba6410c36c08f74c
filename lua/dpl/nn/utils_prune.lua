-- dpl.nn.utils_prune: PyTorch 1.13's torch.nn.utils.prune as dpl.nn.utils.prune.
-- Pruning replaces the parameter `name` by the parameter name_orig and the buffer
-- name_mask (0/1, the parameter's dtype), and recomputes name = name_orig * name_mask before
-- each forward (a forward pre-hook). Pruning again combines the masks as PyTorch's
-- PruningContainer: unstructured methods choose among the entries not pruned yet,
-- structured ones among the channels not pruned yet. Differences: `amount` is a count when
-- it is an integer >= 1 and a fraction when below 1 (Lua has one number type: PyTorch's
-- amount=1.0, all entries, is the count n here); dims are 1-based.
local T = require 'dpl.tensor'
local autograd = require 'dpl.autograd'
local Module = require 'dpl.nn.module'
local options = require 'dpl.options'
local errors = require 'dpl.errors'

local fmt = string.format
local type, tostring, floor = type, tostring, math.floor
local error = errors.raise
local is_tensor = T.is_tensor
local no_grad = autograd.no_grad

return function(U, H)
  local M = {}

  -- Python's round (half to even)
  local function pyround(x)
    local f = floor(x)
    local d = x - f
    if d > 0.5 then return f + 1 end
    if d < 0.5 then return f end
    return f % 2 == 0 and f or f + 1
  end
  -- the number of entries to prune out of n
  local function count(amount, n, fn)
    if type(amount) ~= 'number' or amount ~= amount or amount < 0 then
      error(fmt('%s: amount=%s should either be a float in the range [0, 1] or a non-negative integer', fn,
        tostring(amount)), 4)
    end
    local k
    if amount >= 1 and amount == floor(amount) then k = amount else
      if amount > 1 then
        error(fmt('%s: amount=%s should either be a float in the range [0, 1] or a non-negative integer', fn,
          tostring(amount)), 4)
      end
      k = pyround(amount * n)
    end
    if k > n then
      error(fmt('%s: amount=%d should be smaller than the number of parameters to prune=%d', fn, k, n), 4)
    end
    return k
  end

  local function mask_of(m, name) return rawget(m, name .. '_mask') end

  -- installs (or updates) the pruning of m.name with the combined mask
  local function apply_mask(m, name, mask, method)
    local hooks = rawget(m, '_prune_hooks')
    if not hooks then hooks = {} rawset(m, '_prune_hooks', hooks) end
    if not hooks[name] then
      local orig = H.get_param(m, name, method)
      H.delattr(m, name)
      m:register_parameter(name .. '_orig', orig)
      m:register_buffer(name .. '_mask', mask)
      local h = m:register_forward_pre_hook(function(mod)
        rawset(mod, name, rawget(mod, name .. '_orig') * rawget(mod, name .. '_mask'))
      end)
      hooks[name] = { handle = h, methods = { method } }
    else
      rawset(m, name .. '_mask', mask)
      local ms = hooks[name].methods
      ms[#ms + 1] = method
    end
    rawset(m, name, rawget(m, name .. '_orig') * mask)
    return m
  end

  local function current(m, name, fn)
    local hooks = rawget(m, '_prune_hooks')
    if hooks and hooks[name] then return rawget(m, name .. '_orig'), mask_of(m, name) end
    local t = H.get_param(m, name, fn)
    return t, nil
  end

  -- unstructured: zero k more of the entries still kept, those of the smallest score
  local function unstructured(t, old, amount, fn, score)
    local flat_mask = old and old:reshape(-1) or nil
    local kept = flat_mask and flat_mask:sum():item() or t:numel()
    local k = count(amount, kept, fn)
    return no_grad(function()
      local mask = old and old:clone() or T.ones_like(t)
      if k == 0 then return mask end
      local s = score(t):reshape(-1):to('float64')
      if flat_mask then s = s:masked_fill(flat_mask:eq(0), math.huge) end
      local _, idx = s:sort()
      mask:view(-1):index_fill_(1, idx:narrow(1, 1, k), 0)
      return mask
    end)
  end

  local function scores_arg(fn, opts, t)
    options.check(opts, options.keys('importance_scores'), fn)
    local s = opts and opts.importance_scores
    if s ~= nil then
      if not is_tensor(s) or s:numel() ~= t:numel() then
        error(fmt('%s: importance_scores should have the same shape as parameter', fn), 3)
      end
      return s
    end
    return t
  end

  --- l1_unstructured(module, name, amount [, {importance_scores=}]): prunes the `amount` entries of
  --- smallest magnitude (a count, or a fraction of the entries not pruned yet)
  function M.l1_unstructured(m, name, amount, opts)
    local fn = 'l1_unstructured'
    H.need_module(m, fn)
    local t, old = current(m, name, fn)
    local s = scores_arg(fn, opts, t)
    return apply_mask(m, name, unstructured(s:view(t:size()), old, amount, fn, function(x) return x:abs() end), fn)
  end
  --- random_unstructured(module, name, amount): prunes `amount` entries drawn at random (dpl's generator)
  function M.random_unstructured(m, name, amount)
    local fn = 'random_unstructured'
    H.need_module(m, fn)
    local t, old = current(m, name, fn)
    return apply_mask(m, name, unstructured(t, old, amount, fn, function(x)
      return T.rand(x:size(), { dtype = 'float64' })
    end), fn)
  end

  --- ln_structured(module, name, amount, n, dim [, {importance_scores=}]): prunes the `amount`
  --- channels along dim (1-based) of smallest L_n norm among those not pruned yet
  function M.ln_structured(m, name, amount, n, dim, opts)
    local fn = 'ln_structured'
    H.need_module(m, fn)
    local t, old = current(m, name, fn)
    local s = scores_arg(fn, opts, t):view(t:size())
    if type(n) ~= 'number' and n ~= 'fro' and n ~= 'inf' then
      error(fmt('%s: n must be a number (math.huge for inf), got %s', fn, tostring(n)), 2)
    end
    if n == 'fro' then n = 2 elseif n == 'inf' then n = math.huge end
    if t:dim() < 1 then error(fmt('%s: cannot prune a 0-d tensor along a dim', fn), 2) end
    dim = H.norm_dim(dim, t:dim(), fn)
    local C = t:size(dim)
    local mask = no_grad(function()
      local sd = s:movedim(dim, 1):reshape(C, -1):to('float64')
      local norms = n == math.huge and sd:abs():max(2) or n == -math.huge and sd:abs():min(2) or sd:norm(n, 2)
      local keep_ch
      if old then keep_ch = old:movedim(dim, 1):reshape(C, -1):abs():sum(2):ne(0) end
      local kept = keep_ch and keep_ch:sum():item() or C
      local k = count(amount, kept, fn)
      local chm = T.ones(C, { dtype = t.dtype, device = t.device })
      if k > 0 then
        if keep_ch then norms = norms:masked_fill(keep_ch:logical_not(), math.huge) end
        local _, idx = norms:sort()
        chm:index_fill_(1, idx:narrow(1, 1, k), 0)
      end
      local shape = {}
      for i = 1, t:dim() do shape[i] = 1 end
      shape[dim] = C
      local mk = chm:view(shape):expand(t:size()):contiguous()
      if old then mk = mk * old end
      return mk
    end)
    return apply_mask(m, name, mask, fn)
  end

  --- identity(module, name): a mask of ones
  function M.identity(m, name)
    H.need_module(m, 'identity')
    local t, old = current(m, name, 'identity')
    return apply_mask(m, name, old and old:clone() or no_grad(function() return T.ones_like(t) end), 'identity')
  end
  --- custom_from_mask(module, name, mask): prunes where mask is 0 (combined with an earlier mask)
  function M.custom_from_mask(m, name, mask)
    local fn = 'custom_from_mask'
    H.need_module(m, fn)
    local t, old = current(m, name, fn)
    if not is_tensor(mask) or mask:numel() ~= t:numel() then
      error(fmt('%s: mask must be a tensor of the parameter\'s shape', fn), 2)
    end
    local mk = no_grad(function()
      local x = mask:to(t.dtype):to(t.device):view(t:size()):clone()
      if old then x = x * old end
      return x
    end)
    return apply_mask(m, name, mk, fn)
  end

  local METHODS = { l1_unstructured = 'l1', L1Unstructured = 'l1', random_unstructured = 'random',
    RandomUnstructured = 'random' }
  M.L1Unstructured, M.RandomUnstructured = 'L1Unstructured', 'RandomUnstructured'
  --- global_unstructured(parameters {{module, name}, ...}, {pruning_method='l1_unstructured' |
  --- 'random_unstructured' (or prune.L1Unstructured / RandomUnstructured), amount=,
  --- importance_scores= {[module] = {[name] = tensor}}}): one threshold over all the tensors
  function M.global_unstructured(params, opts)
    local fn = 'global_unstructured'
    if type(params) ~= 'table' or #params == 0 then
      error(fmt('%s: parameters must be a list of {module, name} pairs', fn), 2)
    end
    options.check(opts, options.keys('pruning_method', 'amount', 'importance_scores'), fn)
    opts = opts or {}
    local kind = METHODS[opts.pruning_method or '']
    if not kind then
      error(fmt("%s: pruning_method must be 'l1_unstructured' or 'random_unstructured' (unstructured methods only), got %s",
        fn, tostring(opts.pruning_method)), 2)
    end
    local scores, masks, sizes = {}, {}, {}
    for i, pr in ipairs(params) do
      local m, name = pr[1], pr[2]
      H.need_module(m, fn)
      local t, old = current(m, name, fn)
      local cur = old and no_grad(function() return t * old end) or t
      local imp = opts.importance_scores and opts.importance_scores[m] and opts.importance_scores[m][name]
      scores[i] = (imp or cur):detach():reshape(-1):to('float64')
      masks[i] = old and old:reshape(-1):to('float64') or T.ones(t:numel(), { dtype = 'float64' })
      sizes[i] = t:numel()
    end
    local s, mk = T.cat(scores), T.cat(masks)
    local final = unstructured(s, mk, opts.amount, fn, kind == 'l1' and function(x) return x:abs() end
      or function(x) return T.rand(x:size(), { dtype = 'float64' }) end)
    local off = 1
    for i, pr in ipairs(params) do
      local part = final:narrow(1, off, sizes[i])
      off = off + sizes[i]
      local m, name = pr[1], pr[2]
      local t = current(m, name, fn)
      apply_mask(m, name, no_grad(function() return part:to(t.dtype):to(t.device):view(t:size()):clone() end), fn)
    end
  end

  --- remove(module, name): makes the pruning permanent: the parameter name holds orig * mask
  --- (the name_orig tensor itself), name_orig and name_mask are gone
  function M.remove(m, name)
    H.need_module(m, 'remove')
    local hooks = rawget(m, '_prune_hooks')
    local e = hooks and hooks[name]
    if not e then
      error(fmt("remove: Parameter '%s' of module %s has to be pruned before pruning can be removed", tostring(name),
        m.__name), 2)
    end
    local orig, mask = rawget(m, name .. '_orig'), rawget(m, name .. '_mask')
    no_grad(function() orig:mul_(mask) end)
    e.handle:remove()
    hooks[name] = nil
    H.delattr(m, name)
    H.delattr(m, name .. '_orig')
    H.delattr(m, name .. '_mask')
    m:register_parameter(name, orig)
    return m
  end

  --- is_pruned(module): whether the module or one of its submodules has a pruned tensor
  function M.is_pruned(m)
    H.need_module(m, 'is_pruned')
    for _, sub in m:named_modules() do
      local hooks = rawget(sub, '_prune_hooks')
      if hooks and next(hooks) ~= nil then return true end
    end
    return false
  end
  M._Module = Module
  return M
end
