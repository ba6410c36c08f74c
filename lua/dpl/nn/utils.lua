-- dpl.nn.utils: gradient clipping.
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

--- clip_grad_norm_(params, max_norm [, norm_type=2]): scales the gradients in place so that
--- their total norm is at most max_norm; returns the total norm (a number) before clipping.
function M.clip_grad_norm_(params, max_norm, norm_type)
  params = param_list(params, 'clip_grad_norm_')
  norm_type = norm_type or 2
  if type(max_norm) ~= 'number' then error('clip_grad_norm_: max_norm must be a number', 2) end
  return autograd.no_grad(function()
    local total = 0
    if norm_type == math.huge or norm_type == 'inf' then
      for _, p in ipairs(params) do
        local g = p.grad
        if g then total = math.max(total, g:abs():max():item()) end
      end
    else
      for _, p in ipairs(params) do
        local g = p.grad
        if g then total = total + g:norm(norm_type):item() ^ norm_type end
      end
      total = total ^ (1 / norm_type)
    end
    local coef = max_norm / (total + 1e-6)
    if coef < 1 then
      for _, p in ipairs(params) do
        if p.grad then p.grad:mul_(coef) end
      end
    end
    return total
  end)
end

--- clip_grad_value_(params, clip_value): clamps every gradient element to [-v, v] in place.
function M.clip_grad_value_(params, v)
  params = param_list(params, 'clip_grad_value_')
  if type(v) ~= 'number' then error('clip_grad_value_: clip_value must be a number', 2) end
  autograd.no_grad(function()
    for _, p in ipairs(params) do
      if p.grad then p.grad:clamp_(-v, v) end
    end
  end)
end

--- parameters_to_vector(params): one 1-d tensor of all the parameters.
function M.parameters_to_vector(params)
  local parts = {}
  for _, p in ipairs(param_list(params, 'parameters_to_vector')) do parts[#parts + 1] = p:reshape(-1) end
  return T.cat(parts, 1)
end

return M
