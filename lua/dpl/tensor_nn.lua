-- dpl.tensor_nn: the tensor functions of neural networks, on dpl.tensor's handles: the
-- class-index and regression losses (cross_entropy, nll_loss, mse_loss and their
-- backwards), embedding, conv2d, layer_norm, batch_norm, max/avg pooling. dpl.tensor installs them
-- (require('dpl.tensor_nn')(M, helpers)) before dpl.autograd wraps them; the
-- helpers are tensor.lua's own (result wrapping, argument checks, 1-based indices).
local ffi = require 'ffi'
local C = require('dpl.capi').C
local options = require 'dpl.options'

local type, tostring = type, tostring
local fmt = string.format
local ENOMEM = -2
local check_opts, keys, int_or_pair = options.check, options.keys, options.int_or_pair

-- the accepted option keys (return_indices: F.max_pool2d's, passed through)
local CLASS_KEYS, MSE_KEYS = keys('reduction', 'ignore_index'), keys('reduction')
local CONV_KEYS = keys('stride', 'padding', 'dilation', 'groups')
local MAXPOOL_KEYS = keys('stride', 'padding', 'ceil_mode', 'return_indices')
local AVGPOOL_KEYS = keys('stride', 'padding', 'ceil_mode', 'count_include_pad')

return function(M, H)
  local gcw = H.gcw -- wrap a result handle (and collect when tensor bytes passed the threshold)
  local call1, fail, fix_msg, done_tmp = H.call1, H.fail, H.fix_msg, H.done_tmp
  local zero_based, reduction_id, index_arg = H.zero_based, H.reduction_id, H.index_arg
  local need_tensor, need_number = H.need_tensor, H.need_number
  local release, out1, out2, error = H.release, H.out1, H.out2, H.error
  -- The class-index losses: 1-based targets and ignore_index from Lua, 0-based in C.
  -- cfn(x, target0, reduction, ignore_index0, out) computes the loss, cfn_b(grad, x, ...)
  -- its gradient with respect to x.
  local function class_target_args(name, target, opts)
    need_tensor(name, 'target', target)
    check_opts(opts, CLASS_KEYS, name)
    local red = reduction_id(opts and opts.reduction, name)
    local ign = opts and opts.ignore_index and opts.ignore_index - 1 or -101
    return zero_based(target, name), red, ign
  end
  local function class_loss(name, cfn, cfn_b)
    M[name] = function(x, target, opts)
      need_tensor(name, 'input', x)
      local t0, red, ign = class_target_args(name, target, opts)
      local st = cfn(x, t0, red, ign, out1)
      if st ~= 0 then fix_msg(2, st) end
      return done_tmp(t0)
    end
    local bname = name .. '_backward'
    M[bname] = function(grad_out, x, target, opts)
      need_tensor(bname, 'grad_output', grad_out)
      need_tensor(bname, 'input', x)
      local t0, red, ign = class_target_args(bname, target, opts)
      local st = cfn_b(grad_out, x, t0, red, ign, out1)
      if st ~= 0 then fix_msg(2, st) end
      return done_tmp(t0)
    end
  end
  --- cross_entropy(logits [N, C], target [N] with classes 1..C, {reduction=, ignore_index=});
  --- nll_loss(log-probabilities [N, C], target, opts) the same after log_softmax.
  class_loss('cross_entropy', C.dpl_cross_entropy, C.dpl_cross_entropy_backward)
  class_loss('nll_loss', C.dpl_nll_loss, C.dpl_nll_loss_backward)
  function M.mse_loss(a, b, opts)
    need_tensor('mse_loss', 'input', a)
    need_tensor('mse_loss', 'b', b)
    check_opts(opts, MSE_KEYS, 'mse_loss')
    return call1(C.dpl_mse_loss, a, b, reduction_id(opts and opts.reduction, 'mse_loss'), out1)
  end
  function M.mse_loss_backward(grad_out, a, b, opts)
    need_tensor('mse_loss_backward', 'grad_output', grad_out)
    need_tensor('mse_loss_backward', 'input', a)
    need_tensor('mse_loss_backward', 'b', b)
    check_opts(opts, MSE_KEYS, 'mse_loss_backward')
    return call1(C.dpl_mse_loss_backward, grad_out, a, b, reduction_id(opts and opts.reduction, 'mse_loss_backward'), out1)
  end

  --- embedding(weight [V, D], idx with 1-based ids): C reads the ids as they are (int64 or
  --- int32, no shifted copy)
  function M.embedding(weight, idx)
    need_tensor('embedding', 'input', weight)
    need_tensor('embedding', 'idx', idx)
    local st = C.dpl_embedding_base(weight, index_arg(idx, 'embedding', 3), 1, out1)
    if st ~= 0 then fix_msg(2, st) end
    return M._wrap(out1)
  end
  function M.embedding_backward(grad, idx, num_weights)
    need_tensor('embedding_backward', 'grad', grad)
    need_number('embedding_backward', 'num_weights', num_weights)
    local st = C.dpl_embedding_backward_base(grad, index_arg(idx, 'embedding_backward', 3), num_weights, 1, out1)
    if st ~= 0 then fix_msg(2, st) end
    return M._wrap(out1)
  end

  ---------------------------------------------------------------- convolution, pooling
  local params6 = ffi.new('int32_t[6]')
  local params7 = ffi.new('int32_t[7]') -- pooling: kernel, stride, padding, ceil_mode
  local out3 = ffi.new('dpl_tensor*[1]')
  local function pair(v, name, what, default)
    if v == nil then v = default end
    return int_or_pair(v, name, what)
  end

  local function conv_params(opts, name)
    check_opts(opts, CONV_KEYS, name)
    if not opts then
      params6[0], params6[1], params6[2], params6[3], params6[4], params6[5] = 1, 1, 0, 0, 1, 1
      return 1
    end
    params6[0], params6[1] = pair(opts.stride, name, 'stride', 1)
    params6[2], params6[3] = pair(opts.padding, name, 'padding', 0)
    params6[4], params6[5] = pair(opts.dilation, name, 'dilation', 1)
    local groups = opts.groups or 1
    if type(groups) ~= 'number' or groups ~= math.floor(groups) or groups < 1 or groups >= 2 ^ 31 then
      error(fmt('%s: groups must be a positive integer, got %s', name, tostring(groups)))
    end
    return groups
  end

  --- conv2d(x [N, C, H, W], weight [O, C/groups, kh, kw], bias or nil, {stride=, padding=, dilation=, groups=})
  function M.conv2d(x, w, b, opts)
    need_tensor('conv2d', 'input', x)
    need_tensor('conv2d', 'w', w)
    if b ~= nil then need_tensor('conv2d', 'bias', b) end
    local groups = conv_params(opts, 'conv2d')
    return call1(C.dpl_conv2d, x, w, b, params6, groups, out1)
  end
  --- Gradients of conv2d: grad_x, grad_w, grad_b (needs: {x=, w=, b=} booleans, all by default).
  function M.conv2d_backward(grad_out, x, w, opts, needs)
    need_tensor('conv2d_backward', 'grad_output', grad_out)
    need_tensor('conv2d_backward', 'input', x)
    need_tensor('conv2d_backward', 'weight', w)
    local groups = conv_params(opts, 'conv2d_backward')
    needs = needs or { x = true, w = true, b = true }
    local st = C.dpl_conv2d_backward(grad_out, x, w, params6, groups, needs.x and out1 or nil, needs.w and out2 or nil,
      needs.b and out3 or nil)
    if st ~= 0 then fail(2, st) end
    local gx = needs.x and gcw(out1) or nil
    local gw = needs.w and gcw(out2) or nil
    local gb = needs.b and gcw(out3) or nil
    return gx, gw, gb
  end

  --- layer_norm(x, weight or nil, bias or nil, normalized_numel, eps) -> y, mean, rstd: the fused
  --- op over the last normalized_numel elements of each row (mean, rstd: one per row, for backward)
  function M.layer_norm(x, w, b, n, eps)
    need_tensor('layer_norm', 'input', x)
    if w ~= nil then need_tensor('layer_norm', 'weight', w) end
    if b ~= nil then need_tensor('layer_norm', 'bias', b) end
    need_number('layer_norm', 'normalized_numel', n)
    need_number('layer_norm', 'eps', eps)
    local st = C.dpl_layer_norm(x, w, b, n, eps, out1, out2, out3)
    if st == ENOMEM then collectgarbage(); st = C.dpl_layer_norm(x, w, b, n, eps, out1, out2, out3) end
    if st ~= 0 then fail(2, st) end
    return gcw(out1), gcw(out2), gcw(out3)
  end
  --- batch_norm(x, weight or nil, bias or nil, running_mean or nil, running_var or nil, momentum, eps)
  --- -> y, mean, invstd: batch statistics per channel (dim 2) of a float32/float64 CPU x, the
  --- running stats (both or neither) updated in place; mean, invstd [C] for the backward
  function M.batch_norm(x, w, b, rm, rv, momentum, eps)
    need_tensor('batch_norm', 'input', x)
    if w ~= nil then need_tensor('batch_norm', 'weight', w) end
    if b ~= nil then need_tensor('batch_norm', 'bias', b) end
    if rm ~= nil then need_tensor('batch_norm', 'running_mean', rm) end
    if rv ~= nil then need_tensor('batch_norm', 'running_var', rv) end
    need_number('batch_norm', 'momentum', momentum)
    need_number('batch_norm', 'eps', eps)
    local st = C.dpl_batch_norm(x, w, b, rm, rv, momentum, eps, out1, out2, out3)
    if st == ENOMEM then collectgarbage(); st = C.dpl_batch_norm(x, w, b, rm, rv, momentum, eps, out1, out2, out3) end
    if st ~= 0 then fail(2, st) end
    local m, inv = gcw(out2), gcw(out3)
    return M._wrap(out1), m, inv -- (_wrap: a collection when tensor bytes passed the GC threshold)
  end
  --- Gradients of batch_norm: grad_x, grad_w, grad_b (needs: {x=, w=, b=} booleans; grad_w only with a weight).
  function M.batch_norm_backward(grad_y, x, mean, invstd, w, needs)
    need_tensor('batch_norm_backward', 'grad_output', grad_y)
    need_tensor('batch_norm_backward', 'input', x)
    need_tensor('batch_norm_backward', 'mean', mean)
    need_tensor('batch_norm_backward', 'invstd', invstd)
    if w ~= nil then need_tensor('batch_norm_backward', 'weight', w) end
    needs = needs or { x = true, w = true, b = true }
    local nx, nw, nb = needs.x, w ~= nil and needs.w, needs.b
    local function go()
      return C.dpl_batch_norm_backward(grad_y, x, mean, invstd, w, nx and out1 or nil, nw and out2 or nil,
        nb and out3 or nil)
    end
    local st = go()
    if st == ENOMEM then collectgarbage(); st = go() end
    if st ~= 0 then fail(2, st) end
    local gw = nw and gcw(out2) or nil
    local gb = nb and gcw(out3) or nil
    local gx = nx and M._wrap(out1) or nil
    if not nx and M._gc_flag[0] ~= 0 then M.collect() end
    return gx, gw, gb
  end
  --- Gradients of layer_norm: grad_x, grad_w, grad_b (needs: {w=, b=} booleans; grad_w only with a weight).
  function M.layer_norm_backward(grad_y, x, mean, rstd, w, needs)
    need_tensor('layer_norm_backward', 'grad_output', grad_y)
    need_tensor('layer_norm_backward', 'input', x)
    need_tensor('layer_norm_backward', 'mean', mean)
    need_tensor('layer_norm_backward', 'rstd', rstd)
    if w ~= nil then need_tensor('layer_norm_backward', 'weight', w) end
    needs = needs or { w = true, b = true }
    local nw, nb = w ~= nil and needs.w, needs.b
    local function go()
      return C.dpl_layer_norm_backward(grad_y, x, mean, rstd, w, out1, nw and out2 or nil, nb and out3 or nil)
    end
    local st = go()
    if st == ENOMEM then collectgarbage(); st = go() end
    if st ~= 0 then fail(2, st) end
    local gx = gcw(out1)
    local gw = nw and gcw(out2) or nil
    local gb = nb and gcw(out3) or nil
    return gx, gw, gb
  end

  --- dropout(x, p, keep_mask) -> out, mask or nil: the fused training-mode dropout of a contiguous
  --- float32/float64 CPU tensor, 0 <= p < 1 (the keep decisions of bernoulli_(1 - p), bit for bit);
  --- mask (with keep_mask): the decisions packed 8 to a byte (uint8), for dropout_backward
  function M.dropout(x, p, keep_mask)
    need_tensor('dropout', 'input', x)
    need_number('dropout', 'p', p)
    local function go() return C.dpl_dropout(x, p, out1, keep_mask and out2 or nil) end
    local st = go()
    if st == ENOMEM then collectgarbage(); st = go() end
    if st ~= 0 then fail(2, st) end
    -- (wrap: tensor.lua's, which runs the collector when the allocator asks, as other ops do)
    local y = M._wrap(out1)
    return y, keep_mask and M._wrap(out2) or nil
  end
  --- Gradient of dropout: grad * mask * 1/(1 - p) (mask and p: dropout's).
  function M.dropout_backward(grad, mask, p)
    need_tensor('dropout_backward', 'grad_output', grad)
    need_tensor('dropout_backward', 'mask', mask)
    need_number('dropout_backward', 'p', p)
    local st = C.dpl_dropout_backward(grad, mask, p, out1)
    if st == ENOMEM then collectgarbage(); st = C.dpl_dropout_backward(grad, mask, p, out1) end
    if st ~= 0 then fail(2, st) end
    return M._wrap(out1)
  end

  local function pool_params(kernel, opts, name, accepted)
    check_opts(opts, accepted, name)
    params7[0], params7[1] = pair(kernel, name, 'kernel_size')
    if not opts then
      params7[2], params7[3], params7[4], params7[5], params7[6] = params7[0], params7[1], 0, 0, 0
      return
    end
    params7[2], params7[3] = pair(opts.stride, name, 'stride', kernel)
    params7[4], params7[5] = pair(opts.padding, name, 'padding', 0)
    local cm = opts.ceil_mode
    if cm ~= nil and type(cm) ~= 'boolean' then
      error(fmt('%s: ceil_mode must be true or false, got %s', name, tostring(cm)))
    end
    params7[6] = cm and 1 or 0
  end

  --- max_pool2d(x, kernel_size, {stride=kernel_size, padding=0, ceil_mode=false}) -> values, indices
  --- (0-based plane positions, for backward)
  function M.max_pool2d(x, kernel, opts)
    need_tensor('max_pool2d', 'input', x)
    pool_params(kernel, opts, 'max_pool2d', MAXPOOL_KEYS)
    local st = C.dpl_max_pool2d(x, params7, out1, out2)
    if st ~= 0 then fail(2, st) end
    return gcw(out1), gcw(out2)
  end
  function M.max_pool2d_backward(grad_out, x, indices)
    need_tensor('max_pool2d_backward', 'grad_output', grad_out)
    need_tensor('max_pool2d_backward', 'input', x)
    need_tensor('max_pool2d_backward', 'indices', indices)
    return call1(C.dpl_max_pool2d_backward, grad_out, x, indices, out1)
  end
  --- avg_pool2d(x, kernel_size, {stride=kernel_size, padding=0, ceil_mode=false, count_include_pad=true})
  function M.avg_pool2d(x, kernel, opts)
    need_tensor('avg_pool2d', 'input', x)
    pool_params(kernel, opts, 'avg_pool2d', AVGPOOL_KEYS)
    local cip = not (opts and opts.count_include_pad == false)
    return call1(C.dpl_avg_pool2d, x, params7, cip and 1 or 0, out1)
  end
  function M.avg_pool2d_backward(grad_out, x, kernel, opts)
    need_tensor('avg_pool2d_backward', 'grad_output', grad_out)
    need_tensor('avg_pool2d_backward', 'input', x)
    pool_params(kernel, opts, 'avg_pool2d_backward', AVGPOOL_KEYS)
    local cip = not (opts and opts.count_include_pad == false)
    return call1(C.dpl_avg_pool2d_backward, grad_out, x, params7, cip and 1 or 0, out1)
  end
end
