-- dpl.checkpoint: activation checkpointing, torch.utils.checkpoint's checkpoint(fn, ...) (the
-- reentrant variant). The forward runs fn under no_grad, so none of its intermediate
-- activations is kept; one autograd node (recorded with autograd.record) holds the inputs
-- and the generator state. Its backward runs fn again with grad on (from the same generator
-- state, so dropout draws the same masks), then backward through that recomputed graph:
-- the inputs' gradients flow on, and the parameters fn uses get theirs accumulated in .grad
-- (as PyTorch's reentrant checkpoint; like it, autograd.grad through a checkpoint is not
-- supported). Exposed as dpl.utils.checkpoint (callable, and .checkpoint) and
-- dpl.autograd.checkpoint.
local T = require 'dpl.tensor'
local autograd = require 'dpl.autograd'
local errors = require 'dpl.errors'

local fmt = string.format
local is_tensor = T.is_tensor
local lua_error = error
local error = errors.raise

local M = {}
local warned = false

local function pack(...) return { n = select('#', ...), ... } end

--- checkpoint(fn, ...[, {preserve_rng_state=true, use_reentrant=true}]): fn(...)'s results,
--- with fn's activations recomputed in backward instead of kept. The tensor results
--- (up to any number, of one floating dtype and device) are differentiable; other results
--- are returned as they are. A trailing options table is taken as options only when it
--- has no array part and only these keys.
function M.checkpoint(fn, ...)
  if type(fn) ~= 'function' and not (type(fn) == 'table' and getmetatable(fn) and getmetatable(fn).__call) then
    error(fmt('checkpoint: expected a function or a module, got %s', type(fn)), 2)
  end
  local args = pack(...)
  local opts = {}
  local last = args[args.n]
  if type(last) == 'table' and getmetatable(last) == nil and #last == 0 and next(last) ~= nil then
    local only = true
    for k in pairs(last) do
      if k ~= 'preserve_rng_state' and k ~= 'use_reentrant' then only = false end
    end
    if only then
      opts = last
      args.n = args.n - 1
    end
  end
  if opts.use_reentrant == false then
    lua_error(errors.NotImplementedError('checkpoint: use_reentrant=false is not implemented in dplhost (the '
      .. 'reentrant variant is)'), 2)
  end
  local preserve = opts.preserve_rng_state ~= false
  -- the tensor arguments (the node's inputs)
  local tins, any = {}, false
  for i = 1, args.n do
    local a = args[i]
    if is_tensor(a) then
      tins[#tins + 1] = i
      if a.requires_grad then any = true end
    end
  end
  local rng = preserve and T.get_rng_state() or nil
  local outs = pack(autograd.no_grad(function() return fn(unpack(args, 1, args.n)) end))
  if not autograd.is_grad_enabled() then return unpack(outs, 1, outs.n) end
  if not any then
    if not warned then
      warned = true
      require('dpl.log').warn('checkpoint: None of the inputs have requires_grad=true. Gradients will be nil')
    end
    return unpack(outs, 1, outs.n)
  end
  -- the floating tensor results, flattened into one tensor the node produces
  local pos, parts, dtype, device = {}, {}, nil, nil
  for i = 1, outs.n do
    local o = outs[i]
    if is_tensor(o) and o:is_floating_point() then
      if dtype and (o.dtype ~= dtype or o.device ~= device) then
        error('checkpoint: the tensor results must share one dtype and device', 2)
      end
      dtype, device = o.dtype, o.device
      pos[#pos + 1] = i
      parts[#parts + 1] = o:reshape(-1)
    end
  end
  if #pos == 0 then return unpack(outs, 1, outs.n) end
  local shapes = {}
  for k, i in ipairs(pos) do shapes[k] = outs[i]:size() end
  local flat = #parts == 1 and parts[1]:contiguous() or T.cat(parts)
  local tensors = {}
  for k, i in ipairs(tins) do tensors[k] = args[i] end
  local rule = {
    nin = #tensors, name = 'checkpoint',
    save = function(n)
      -- the inputs as they are now (detached aliases), the other arguments, the rng state
      n.saved = {}
      for k, t in ipairs(tensors) do n.saved[k] = t:detach() end
      n.rg = {}
      for k, t in ipairs(tensors) do n.rg[k] = t.requires_grad end
    end,
    bw = function(n, g)
      local xs = {}
      for k, t in ipairs(n.saved) do
        local x = t:detach()
        if n.rg[k] and x:is_floating_point() then x:requires_grad_() end
        xs[k] = x
      end
      local a = { n = args.n }
      for i = 1, args.n do a[i] = args[i] end
      for k, i in ipairs(tins) do a[i] = xs[k] end
      local saved_rng
      if rng then
        saved_rng = T.get_rng_state()
        T.set_rng_state(rng)
      end
      local ok, err = pcall(function()
        autograd.enable_grad(function()
          local r = pack(fn(unpack(a, 1, a.n)))
          local total, off = nil, 1
          for k, i in ipairs(pos) do
            local o = r[i]
            local numel = 1
            for _, s in ipairs(shapes[k]) do numel = numel * s end
            if is_tensor(o) and o.requires_grad then
              local gk = g:narrow(1, off, numel):view(shapes[k])
              local term = (o * gk):sum()
              total = total and total + term or term
            end
            off = off + numel
          end
          if total then total:backward() end
        end)
      end)
      if saved_rng then T.set_rng_state(saved_rng) end
      if not ok then lua_error(err, 0) end
      local grads = {}
      for k, x in ipairs(xs) do grads[k] = n.rg[k] and x.grad or nil end
      return unpack(grads, 1, #xs)
    end,
  }
  flat = autograd.record(rule, flat, unpack(tensors))
  local off = 1
  for k, i in ipairs(pos) do
    local numel = 1
    for _, s in ipairs(shapes[k]) do numel = numel * s end
    outs[i] = flat:narrow(1, off, numel):view(shapes[k])
    off = off + numel
  end
  return unpack(outs, 1, outs.n)
end

--- checkpoint_sequential(functions, segments, input): runs a Sequential (or a list of
--- modules/functions) in `segments` checkpointed chunks (the last chunk runs plainly, as PyTorch's)
function M.checkpoint_sequential(fns, segments, input, opts)
  local list = fns
  if type(fns) == 'table' and fns.children and type(fns.children) == 'function' then list = fns:children() end
  if type(list) ~= 'table' then error('checkpoint_sequential: expected a Sequential or a list of functions', 2) end
  if type(segments) ~= 'number' or segments < 1 or segments % 1 ~= 0 then
    error(fmt('checkpoint_sequential: segments must be a positive integer, got %s', tostring(segments)), 2)
  end
  local n = #list
  local size = math.floor(n / segments)
  if size < 1 then size = 1 end
  local function run(a, b)
    return function(x) for i = a, b do x = list[i](x) end return x end
  end
  local start = 1
  local x = input
  while start + size - 1 < n do
    local e = start + size - 1
    x = M.checkpoint(run(start, e), x, opts)
    start = e + 1
  end
  return run(start, n)(x)
end

return setmetatable(M, { __call = function(_, ...) return M.checkpoint(...) end })
