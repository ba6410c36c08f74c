-- tensor_forms.lua: the argument forms PyTorch users write, in front of the recorded (autograd)
-- tensor methods: reductions over a list of dims ({1, 3}: PyTorch's dim=(0, 2)) and with their
-- keywords in an options table (sum(d, {keepdim=}), var(d, {unbiased=, correction=, keepdim=})),
-- and softmax/log_softmax's dtype (t:softmax(dim, 'float64'), as torch's dtype=). The reduced
-- dims are moved last and flattened (permute + reshape, both recorded), then reduced as one; a
-- dtype converts first (a recorded `to`), as torch does. Installed by autograd.install.
local errors = require 'dpl.errors'
local fmt = string.format
local error = errors.raiser(errors.RuntimeError)

local M = {}

function M.install(T)
  local methods, is_tensor = T.methods, T.is_tensor
  local VE = errors.ValueError
  local function flag(v, fn, what)
    if v ~= nil and type(v) ~= 'boolean' then
      error(fmt('%s: %s must be true or false, got %s', fn, what, type(v) == 'table' and 'a table' or tostring(v)), VE)
    end
    return v
  end
  local function opts_of(o, fn, accepted)
    for k in pairs(o) do
      if not accepted[k] then
        local l = {}
        for a in pairs(accepted) do l[#l + 1] = a end
        table.sort(l)
        error(fmt("%s: unknown option '%s'; accepted options: %s", fn, tostring(k), table.concat(l, ', ')), VE)
      end
    end
    return o
  end
  local function is_list(d) return type(d) == 'table' and not is_tensor(d) and (d[1] ~= nil or next(d) == nil) end
  -- t with the dims of list d moved last and flattened into one; returns it and the keepdim shape
  local function flatten_dims(t, d, fn)
    local n = t:dim()
    local red, seen = {}, {}
    if #d == 0 then for k = 1, n do red[k] = k end end -- dim=[]: every dim, as PyTorch
    for i = 1, #d do
      local v = d[i]
      if type(v) ~= 'number' or v ~= math.floor(v) or v >= 2 ^ 53 or v <= -2 ^ 53 then -- (inf printed as -2^63 below)
        error(fmt('%s: dims must be integers, got %s at position %d', fn, tostring(v), i), VE)
      end
      local k = v < 0 and n + v + 1 or v
      if k < 1 or k > n then
        error(fmt('%s: dim %d out of range (expected 1..%d or -%d..-1 for a %d-d tensor)', fn, v, n, n, n), VE)
      end
      if seen[k] then error(fmt('%s: dim %d appears multiple times in the list of dims', fn, k), VE) end
      seen[k] = true
      red[#red + 1] = k
    end
    for k = 1, n do seen[k] = false end
    for _, k in ipairs(red) do seen[k] = true end
    local perm, shape, kshape = {}, {}, {}
    for k = 1, n do
      kshape[k] = seen[k] and 1 or t:size(k)
      if not seen[k] then perm[#perm + 1] = k; shape[#shape + 1] = t:size(k) end
    end
    table.sort(red)
    for _, k in ipairs(red) do perm[#perm + 1] = k end
    shape[#shape + 1] = -1
    if n == 0 then return t:reshape(-1), kshape end
    return t:permute(unpack(perm)):reshape(unpack(shape)), kshape
  end
  local KEEP = { keepdim = true }
  for _, name in ipairs({ 'sum', 'mean', 'logsumexp' }) do
    local orig = methods[name]
    methods[name] = function(t, d, keepdim)
      if type(keepdim) == 'table' then keepdim = opts_of(keepdim, name, KEEP).keepdim end
      flag(keepdim, name, 'keepdim')
      if is_list(d) then
        local y, kshape = flatten_dims(t, d, name)
        local r = orig(y, -1, false)
        if keepdim then r = r:reshape(unpack(kshape)) end
        return r
      end
      return orig(t, d, keepdim)
    end
  end
  local VAR = { unbiased = true, correction = true, keepdim = true }
  for _, name in ipairs({ 'var', 'std' }) do
    local orig = methods[name]
    methods[name] = function(t, d, unbiased, keepdim)
      if type(d) == 'table' and not is_tensor(d) and not is_list(d) then d, unbiased, keepdim = nil, d, nil end
      if type(unbiased) == 'table' then
        local o = opts_of(unbiased, name, VAR)
        if keepdim == nil then keepdim = o.keepdim end
        unbiased = o.unbiased
        if o.correction ~= nil then
          if o.unbiased ~= nil then error(fmt('%s: give unbiased or correction, not both', name), VE) end
          if o.correction == 0 or o.correction == 1 then unbiased = o.correction == 1
          else
            error(fmt('%s: correction=%s is not implemented (0 or 1)', name, tostring(o.correction)),
              errors.NotImplementedError)
          end
        end
      end
      if type(d) == 'boolean' then d, unbiased = nil, d end
      flag(unbiased, name, 'unbiased')
      flag(keepdim, name, 'keepdim')
      if is_list(d) then
        local y, kshape = flatten_dims(t, d, name)
        local r = orig(y, -1, unbiased, false)
        if keepdim then r = r:reshape(unpack(kshape)) end
        return r
      end
      return orig(t, d, unbiased, keepdim)
    end
  end
  local orig_norm = methods.norm
  methods.norm = function(t, p, d, keepdim)
    if type(keepdim) == 'table' then keepdim = opts_of(keepdim, 'norm', KEEP).keepdim end
    flag(keepdim, 'norm', 'keepdim')
    if is_list(d) then
      local y, kshape = flatten_dims(t, d, 'norm')
      local r = orig_norm(y, p, -1, false)
      if keepdim then r = r:reshape(unpack(kshape)) end
      return r
    end
    return orig_norm(t, p, d, keepdim)
  end

  -- softmax(dim, dtype): the input converted first, as torch's dtype= (it was ignored)
  for _, name in ipairs({ 'softmax', 'log_softmax' }) do
    local orig = methods[name]
    methods[name] = function(t, d, dtype)
      if dtype ~= nil then
        if type(dtype) == 'table' and not is_tensor(dtype) then
          for k in pairs(dtype) do
            if k ~= 'dtype' then error(fmt("%s: unknown option '%s'; accepted options: dtype", name, tostring(k)), errors.ValueError) end
          end
          dtype = dtype.dtype
        end
        if dtype ~= nil then
          T.dtype_id(dtype, name) -- an unknown name is a ValueError naming the op
          t = t:to(dtype)
        end
      end
      return orig(t, d)
    end
  end

  -- the function forms of the methods PyTorch also has as functions (torch.sum(x, 1) is
  -- dpl.sum(x, 2)): they call the method of the moment (recorded, with the forms above); the
  -- first argument must be a tensor
  for _, k in ipairs({ 'sum', 'mean', 'var', 'std', 'norm', 'logsumexp', 'prod', 'max', 'min', 'argmax', 'argmin',
    'all', 'any', 'clone', 'flatten', 'gather', 'index_select', 'masked_fill', 'masked_select', 'narrow', 'nonzero',
    'numel', 'permute', 'reshape', 'select', 'squeeze', 'unsqueeze', 't', 'transpose', 'clip', 'dot', 'negative',
    'detach', 'is_floating_point', 'as_strided', 'softmax', 'log_softmax' }) do
    T[k] = function(t, ...)
      if not is_tensor(t) then
        error(fmt('dpl.%s: expected a tensor as the first argument, got %s', k,
          type(t) == 'cdata' and 'cdata (not a tensor)' or type(t)), errors.TypeError)
      end
      return methods[k](t, ...)
    end
  end
end

return M
