-- dpl.nn.utils: gradient clipping; nn.utils.rnn (lua/dpl/nn/utils_rnn.lua).
local T = require 'dpl.tensor'
local autograd = require 'dpl.autograd'

local M = {}
local fmt = string.format

-- Errors are objects whose tostring reads "ClassName: message" (DESIGN.md).
local error = require('dpl.errors').raise -- string messages become ValueError objects

local function param_list(params, fn)
  if T.is_tensor(params) then return { params } end
  if type(params) ~= 'table' then error(fmt('%s: expected a tensor or a list of tensors', fn), 3) end
  if params.parameters and type(params.parameters) == 'function' then return params:parameters() end
  return params
end

-- gradients on a GPU: the norms, the total and the scale stay on the device (no wait for
-- it); the total comes back only when asked for (want_total)
local function nonfinite_error(total, norm_type)
  error(fmt('clip_grad_norm_: the total norm of order %s for gradients from `parameters` is non-finite (%s), so it '
    .. 'cannot be clipped; set error_if_nonfinite=false to clip anyway', tostring(norm_type), tostring(total)),
    require('dpl.errors').RuntimeError)
end

local function clip_on_device(grads, max_norm, norm_type, inf, want_total, error_if_nonfinite)
  local g1 = grads[1]
  local norms = {}
  for i, g in ipairs(grads) do
    local n = inf and g:abs():max() or g:norm(norm_type)
    if n.dtype ~= 'float64' then n = n:float() end
    if i > 1 then -- one dtype and device for the stack: the first gradient's
      if n._devtype ~= g1._devtype or n._devindex ~= g1._devindex then n = n:to(g1.device) end
      if n.dtype ~= norms[1].dtype then n = n:to(norms[1].dtype) end
    end
    norms[i] = n
  end
  local all = T.stack(norms)
  local total = inf and all:max() or all:norm(norm_type)
  if error_if_nonfinite then -- (a wait for the device, as PyTorch's check)
    local tv = total:item()
    if tv ~= tv or tv == math.huge or tv == -math.huge then nonfinite_error(tv, norm_type) end
  end
  -- min(1, max_norm / (total + 1e-6)): multiplying by exactly 1 leaves a gradient as it is
  local coef = ((total + 1e-6):reciprocal() * max_norm):clamp(nil, 1)
  for _, g in ipairs(grads) do
    local c = coef
    if g._devtype ~= c._devtype or g._devindex ~= c._devindex then c = c:to(g.device) end
    if g._dtype ~= c._dtype then c = c:to(g.dtype) end
    g:mul_(c)
  end
  if want_total then return total:item() end
  return nil
end

--- M._clip_grad_norm(params, max_norm, norm_type, want_total): clip_grad_norm_, returning
--- the total norm only when want_total (the Trainer's clipping does not read it back).
function M._clip_grad_norm(params, max_norm, norm_type, want_total, error_if_nonfinite)
  return autograd.no_grad(function()
    local inf = norm_type == math.huge or norm_type == 'inf'
    local grads, host = {}, true
    for _, p in ipairs(params) do
      local g = autograd.grad_of(p)
      if g then
        grads[#grads + 1] = g
        if g._devtype ~= 0 then host = false end
      end
    end
    if not host then return clip_on_device(grads, max_norm, norm_type, inf, want_total, error_if_nonfinite) end
    -- PyTorch's total: the norm_type-norm of the per-gradient norms (a NaN anywhere is NaN;
    -- norm_type 0 counts the gradients whose norm is not 0)
    local total = 0
    if inf then
      for _, g in ipairs(grads) do
        local n = g:numel() > 0 and g:abs():max():item() or 0
        if n ~= n or n > total then total = n end
        if total ~= total then break end
      end
    elseif norm_type == 0 then
      for _, g in ipairs(grads) do
        if g:norm(0):item() ~= 0 then total = total + 1 end
      end
    else
      for _, g in ipairs(grads) do total = total + math.abs(g:norm(norm_type):item()) ^ norm_type end
      total = total ^ (1 / norm_type)
    end
    if error_if_nonfinite and (total ~= total or total == math.huge) then nonfinite_error(total, norm_type) end
    -- the scale min(1, max_norm / (total + 1e-6)); a NaN total makes every gradient NaN, as
    -- PyTorch's multiplication by the clamped (NaN) coefficient
    local coef = max_norm / (total + 1e-6)
    if coef < 1 or coef ~= coef then
      for _, g in ipairs(grads) do g:mul_(coef) end
    end
    return total
  end)
end

--- clip_grad_norm_(params, max_norm [, norm_type=2 [, error_if_nonfinite=false [, foreach]]]) (or the
--- options after max_norm as a table {norm_type=, error_if_nonfinite=, foreach=}): scales the
--- gradients in place so that their total norm is at most max_norm; returns the total norm (a number)
--- before clipping. error_if_nonfinite: a NaN or infinite total is a RuntimeError, nothing is scaled.
--- Gradients on a GPU are scaled there without waiting for it; the returned number is
--- the one read back.
local options = require 'dpl.options'
local CLIP_KEYS = options.keys('norm_type', 'error_if_nonfinite', 'foreach')
function M.clip_grad_norm_(params, max_norm, norm_type, error_if_nonfinite, foreach)
  params = param_list(params, 'clip_grad_norm_')
  if type(norm_type) == 'table' then
    options.check(norm_type, CLIP_KEYS, 'clip_grad_norm_')
    norm_type, error_if_nonfinite = norm_type.norm_type, norm_type.error_if_nonfinite
  end
  if error_if_nonfinite ~= nil and type(error_if_nonfinite) ~= 'boolean' then
    error(fmt('clip_grad_norm_: error_if_nonfinite must be true or false, got %s', tostring(error_if_nonfinite)), 2)
  end
  local _ = foreach -- (PyTorch's foreach: the same computation either way)
  norm_type = norm_type or 2
  if type(max_norm) ~= 'number' then error('clip_grad_norm_: max_norm must be a number', 2) end
  if not ((type(norm_type) == 'number' and norm_type == norm_type) or norm_type == 'inf') then
    error(fmt("clip_grad_norm_: norm_type must be a number or 'inf', got %s", tostring(norm_type)), 2)
  end
  return M._clip_grad_norm(params, max_norm, norm_type, true, error_if_nonfinite)
end

--- clip_grad_value_(params, clip_value): clamps every gradient element to [-v, v] in place.
function M.clip_grad_value_(params, v)
  params = param_list(params, 'clip_grad_value_')
  if type(v) ~= 'number' then error('clip_grad_value_: clip_value must be a number', 2) end
  autograd.no_grad(function()
    for _, p in ipairs(params) do
      local g = autograd.grad_of(p)
      if g then g:clamp_(-v, v) end
    end
  end)
end

--- parameters_to_vector(params): one 1-d tensor of all the parameters.
function M.parameters_to_vector(params)
  local parts = {}
  for _, p in ipairs(param_list(params, 'parameters_to_vector')) do parts[#parts + 1] = p:reshape(-1) end
  return T.cat(parts, 1)
end

--- vector_to_parameters(vec, params): copies the slices of the 1-d vec into the parameters, in
--- order (PyTorch's inverse of parameters_to_vector; PyTorch makes each parameter's data a view
--- of vec, dplhost copies, so the parameters stay the tensors an optimizer holds). Not recorded.
function M.vector_to_parameters(vec, params)
  if not T.is_tensor(vec) then error(fmt('vector_to_parameters: expected a tensor as vec, got %s', type(vec)), 2) end
  if vec:dim() ~= 1 then error(fmt('vector_to_parameters: vec must be 1-d, got %d dims', vec:dim()), 2) end
  local list = param_list(params, 'vector_to_parameters')
  local total = 0
  for _, p in ipairs(list) do total = total + p:numel() end
  if total ~= vec:numel() then
    error(fmt('vector_to_parameters: vec has %d elements, the parameters %d', vec:numel(), total), 2)
  end
  autograd.no_grad(function()
    local off = 0
    for _, p in ipairs(list) do
      local n = p:numel()
      p:copy_(vec:narrow(1, off + 1, n):view_as(p))
      off = off + n
    end
  end)
end

-- state dicts between PyTorch's key names (positions in Sequential / ModuleList /
-- parametrization lists from 0) and dplhost's (from 1): the model's keys in both numberings
-- come in the same order, so key i of one is key i of the other. Keys the model does not have
-- are kept as they are (load_state_dict then names them as unexpected).
local function convert(fn, sd, model, from, to)
  if type(sd) ~= 'table' or rawget(sd, '_is_module') == true then
    error(fmt('%s: expected a state dict table as the first argument (sd, model), got %s', fn,
      type(sd) == 'table' and 'an nn.Module' or type(sd)), 3)
  end
  if type(model) ~= 'table' or rawget(model, '_is_module') ~= true then
    error(fmt('%s: expected the nn.Module the state dict belongs to as the second argument, got %s', fn, type(model)), 3)
  end
  local a, b = model:state_dict_keys({ index_base = from }), model:state_dict_keys({ index_base = to })
  local map = {}
  for i, k in ipairs(a) do map[k] = b[i] end
  local out, from_key = {}, {}
  for k, v in pairs(sd) do
    local nk = map[k] or k
    if from_key[nk] ~= nil then
      local x, y = from_key[nk], k
      if tostring(x) > tostring(y) then x, y = y, x end
      error(fmt("%s: the keys '%s' and '%s' would both become '%s' (is the state dict's numbering the other one?)", fn,
        tostring(x), tostring(y), tostring(nk)), 3)
    end
    from_key[nk] = k
    out[nk] = v
  end
  return out
end
--- state_dict_from_torch(sd, model): a state dict with PyTorch's keys ('0.weight',
--- 'layers.0.linear1.weight', 'parametrizations.weight.0._u') renamed to model's dplhost keys
--- ('1.weight', ...); model:load_state_dict(sd, {index_base = 0}) does the same in one step.
function M.state_dict_from_torch(sd, model) return convert('state_dict_from_torch', sd, model, 0, 1) end
--- state_dict_to_torch(sd, model): the other way (model:state_dict{index_base = 0} in one step).
function M.state_dict_to_torch(sd, model) return convert('state_dict_to_torch', sd, model, 1, 0) end

-- nn.utils.rnn: PackedSequence, pack_padded_sequence, pad_packed_sequence, pad_sequence, ...
M.rnn = require 'dpl.nn.utils_rnn'
-- weight_norm, spectral_norm, parametrize, parametrizations, prune (lua/dpl/nn/utils_param.lua)
do
  local P = require 'dpl.nn.utils_param'
  for _, k in ipairs({ 'weight_norm', 'remove_weight_norm', 'spectral_norm', 'remove_spectral_norm', 'parametrize',
    'parametrizations', 'prune' }) do M[k] = P[k] end
end

return M
