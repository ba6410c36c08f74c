-- dpl.tensor_reduce: the reductions of dpl.tensor's handles (sum, mean, prod, logsumexp,
-- any/all, var/std, norm, max/min with 1-based indices, argmax/argmin) and softmax /
-- log_softmax with their backward, all computed by C (src/tensor/dpl_tensor_reduce.c).
-- dpl.tensor installs them (require('dpl.tensor_reduce')(M, helpers))
-- and gets back `reduce(name, t, dim, keepdim, param)`, which dpl.tensor_math's ops use.
local C = require('dpl.capi').C

local type = type
local huge = math.huge

return function(M, H)
  local methods, is_tensor = M.methods, M.is_tensor
  local OP = M.binary_ops
  local cdim, fail, check, call1, gc_wrap1, gcw = H.cdim, H.fail, H.check, H.call1, H.gc_wrap1, H.gcw
  local need_tensor, need_number, binop, new_empty = H.need_tensor, H.need_number, H.binop, H.new_empty
  local out1, out2 = H.out1, H.out2
  local binary_scalar_ = C.dpl_binary_scalar_

  local RED = { sum = 0, mean = 1, prod = 2, max = 3, min = 4, argmax = 5, argmin = 6, var = 7, std = 8,
    logsumexp = 9, norm = 10, any = 11, all = 12 }

  -- a 0-d tensor has one dim as far as reductions go (PyTorch accepts dim 0 / -1 there)
  local function scalar_dim(t, d) return t._ndim == 0 and (d == 1 or d == -1) end
  local function reduce(name, t, d, keepdim, param)
    local cd = -1
    if d ~= nil and not scalar_dim(t, d) then cd = cdim(t, d, name) end
    local st = C.dpl_reduce(RED[name], t, cd, keepdim and 1 or 0, param or 0, out1)
    if st ~= 0 then fail(3, st) end
    return gc_wrap1()
  end

  function methods.sum(t, d, keepdim) return reduce('sum', t, d, keepdim) end
  function methods.mean(t, d, keepdim) return reduce('mean', t, d, keepdim) end
  function methods.prod(t, d, keepdim) return reduce('prod', t, d, keepdim) end
  function methods.logsumexp(t, d, keepdim) return reduce('logsumexp', t, d, keepdim) end
  function methods.any(t, d, keepdim) return reduce('any', t, d, keepdim) end
  function methods.all(t, d, keepdim) return reduce('all', t, d, keepdim) end
  --- var(dim, unbiased=true, keepdim=false), like torch.var.
  function methods.var(t, d, unbiased, keepdim)
    if type(d) == 'boolean' then d, unbiased = nil, d end
    return reduce('var', t, d, keepdim, unbiased == false and 0 or 1)
  end
  function methods.std(t, d, unbiased, keepdim)
    if type(d) == 'boolean' then d, unbiased = nil, d end
    return reduce('std', t, d, keepdim, unbiased == false and 0 or 1)
  end
  --- norm(p=2, dim, keepdim); p may be math.huge ('inf').
  function methods.norm(t, p, d, keepdim)
    if p == nil or p == 'fro' then p = 2 elseif p == 'inf' then p = huge end
    need_number('norm', "p (a number, 'fro' or 'inf')", p)
    return reduce('norm', t, d, keepdim, p)
  end

  local function minmax(name, t, d, keepdim)
    if d == nil then return reduce(name, t, nil, false) end
    if is_tensor(d) then return binop(name == 'max' and OP.maximum or OP.minimum, t, d) end
    if is_tensor(t) and scalar_dim(t, d) then
      local i = new_empty(0, 5, t._devtype, t._devindex)
      check(C.dpl_tensor_fill_(i, 1))
      return reduce(name, t, nil, false), i
    end
    local st = C.dpl_reduce_index(RED[name], t, cdim(t, d, name), keepdim and 1 or 0, out1, out2)
    if st ~= 0 then fail(3, st) end
    local v = gcw(out1)
    local i = gcw(out2)
    binary_scalar_(0, i, 1) -- 1-based indices
    return v, i
  end
  --- t:max() -> 0-d tensor; t:max(dim [, keepdim]) -> values, indices (1-based); t:max(other) -> maximum.
  function methods.max(t, d, keepdim) return minmax('max', t, d, keepdim) end
  function methods.min(t, d, keepdim) return minmax('min', t, d, keepdim) end
  --- argmax over dim, or over the flattened tensor; 1-based int64.
  function methods.argmax(t, d, keepdim)
    local r = reduce('argmax', t, d, keepdim)
    binary_scalar_(0, r, 1)
    return r
  end
  function methods.argmin(t, d, keepdim)
    local r = reduce('argmin', t, d, keepdim)
    binary_scalar_(0, r, 1)
    return r
  end

  function methods.softmax(t, d)
    need_tensor('softmax', 'input', t)
    return call1(C.dpl_softmax, t, cdim(t, d or -1, 'softmax'), 0, out1)
  end
  function methods.log_softmax(t, d)
    need_tensor('log_softmax', 'input', t)
    return call1(C.dpl_softmax, t, cdim(t, d or -1, 'log_softmax'), 1, out1)
  end
  function M.softmax_backward(grad, output, d, log)
    need_tensor('softmax_backward', 'grad', grad)
    need_tensor('softmax_backward', 'output', output)
    return call1(C.dpl_softmax_backward, grad, output, cdim(output, d or -1, 'softmax_backward'), log and 1 or 0, out1)
  end
  return reduce
end
