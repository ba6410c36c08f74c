-- dpl.nn.init: parameter initialisers (PyTorch's torch.nn.init), all in place and
-- without recording gradients.
local autograd = require 'dpl.autograd'

local M = {}
local fmt = string.format

-- Errors are objects whose tostring reads "ClassName: message" (DESIGN.md).
local error = require('dpl.errors').raise -- string messages become ValueError objects

--- fan_in, fan_out of a weight [out, in, k...] as PyTorch computes them.
function M.calculate_fan_in_and_fan_out(t)
  local nd = t:dim()
  if nd < 2 then error('init: fan in and fan out need a tensor with at least 2 dims', 3) end
  local rf = 1
  for i = 3, nd do rf = rf * t:size(i) end
  return t:size(2) * rf, t:size(1) * rf
end

--- The recommended gain of a nonlinearity ('linear', 'relu', 'leaky_relu', 'tanh', 'sigmoid', ...).
function M.calculate_gain(nl, param)
  if nl == 'linear' or nl == 'conv2d' or nl == 'sigmoid' or nl == 'identity' then return 1
  elseif nl == 'tanh' then return 5 / 3
  elseif nl == 'relu' then return math.sqrt(2)
  elseif nl == 'leaky_relu' then
    if param ~= nil and type(param) ~= 'number' then
      error(fmt('calculate_gain: negative_slope %s not a valid number', tostring(param)), 2)
    end
    local s = param or 0.01
    return math.sqrt(2 / (1 + s * s))
  elseif nl == 'selu' then return 3 / 4 end
  error(fmt('calculate_gain: unsupported nonlinearity %s', tostring(nl)), 2)
end

local function nograd(f) return autograd.no_grad(f) end

function M.uniform_(t, a, b) nograd(function() t:uniform_(a or 0, b or 1) end) return t end
function M.normal_(t, m, s) nograd(function() t:normal_(m or 0, s or 1) end) return t end
function M.constant_(t, v) nograd(function() t:fill_(v) end) return t end
function M.zeros_(t) return M.constant_(t, 0) end
function M.ones_(t) return M.constant_(t, 1) end

local function fan_of(t, mode, fn)
  if mode ~= nil and mode ~= 'fan_in' and mode ~= 'fan_out' then
    error(fmt('%s: mode %s not supported, please use one of fan_in, fan_out', fn, tostring(mode)), 3)
  end
  local fan_in, fan_out = M.calculate_fan_in_and_fan_out(t)
  return mode == 'fan_out' and fan_out or fan_in
end

--- kaiming_uniform_(t, a=0, mode='fan_in', nonlinearity='leaky_relu'): U(-b, b), b = gain*sqrt(3/fan).
function M.kaiming_uniform_(t, a, mode, nl)
  local fan = fan_of(t, mode, 'kaiming_uniform_')
  local gain = M.calculate_gain(nl or 'leaky_relu', a or 0)
  local bound = fan > 0 and gain * math.sqrt(3 / fan) or 0
  return M.uniform_(t, -bound, bound)
end
function M.kaiming_normal_(t, a, mode, nl)
  local fan = fan_of(t, mode, 'kaiming_normal_')
  local std = M.calculate_gain(nl or 'leaky_relu', a or 0) / math.sqrt(fan)
  return M.normal_(t, 0, std)
end
function M.xavier_uniform_(t, gain)
  local fi, fo = M.calculate_fan_in_and_fan_out(t)
  local b = (gain or 1) * math.sqrt(6 / (fi + fo))
  return M.uniform_(t, -b, b)
end
function M.xavier_normal_(t, gain)
  local fi, fo = M.calculate_fan_in_and_fan_out(t)
  return M.normal_(t, 0, (gain or 1) * math.sqrt(2 / (fi + fo)))
end

return M
