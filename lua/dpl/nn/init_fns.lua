-- dpl.nn.init: parameter initialisers (PyTorch's torch.nn.init), all in place and
-- without recording gradients.
local autograd = require 'dpl.autograd'
local T = require 'dpl.tensor'
local options = require 'dpl.options'

local M = {}
local fmt = string.format

-- Errors are objects whose tostring reads "ClassName: message" (DESIGN.md).
local error = require('dpl.errors').raise -- string messages become ValueError objects

--- fan_in, fan_out of a weight [out, in, k...] as PyTorch computes them.
function M.calculate_fan_in_and_fan_out(t)
  if not T.is_tensor(t) then
    error(fmt('calculate_fan_in_and_fan_out: expected a tensor, got %s', type(t)), 2)
  end
  local nd = t:dim()
  if nd < 2 then error('init: fan in and fan out need a tensor with at least 2 dims', 3) end
  local rf = 1
  for i = 3, nd do rf = rf * t:size(i) end
  return t:size(2) * rf, t:size(1) * rf
end

-- PyTorch's linear_fns: gain 1
local LINEAR = { linear = true, conv1d = true, conv2d = true, conv3d = true, conv_transpose1d = true,
  conv_transpose2d = true, conv_transpose3d = true }

--- The recommended gain of a nonlinearity: 'linear', 'conv1d', 'conv2d', 'conv3d',
--- 'conv_transpose1d/2d/3d', 'sigmoid', 'identity' (1), 'tanh' (5/3), 'relu' (√2),
--- 'leaky_relu' (√(2/(1+slope²)), slope param, default 0.01), 'selu' (3/4).
function M.calculate_gain(nl, param)
  if LINEAR[nl] or nl == 'sigmoid' or nl == 'identity' then return 1
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

--- eye_(t): the identity matrix in a 2-D tensor (ones on the diagonal of a non-square one).
function M.eye_(t)
  if t:dim() ~= 2 then error('eye_: only tensors with 2 dimensions are supported', 2) end
  nograd(function() t:copy_(T.eye(t:size(1), t:size(2), { dtype = t.dtype, device = t.device })) end)
  return t
end

-- erfinv(x) for x in (-1, 1), elementwise with tensor ops: Giles' double-precision
-- approximation ("Approximating the erfinv function", GPU Computing Gems, 2011; three
-- branches in w = -log(1 - x^2)); in float64 within 1e-14 (relative) of the exact values
-- (the spec checks it against mpmath's; PyTorch's own erfinv is off by up to 1e-10 in the tails)
local function erfinv(x)
  local w = -(((-x) + 1) * (x + 1)):log()
  local small = w:lt(6.25)
  -- central region (w < 6.25), in w - 3.125
  local a = w - 3.125
  local p = a * 0 - 3.6444120640178196996e-21
  for _, c in ipairs({ -1.685059138182016589e-19, 1.2858480715256400167e-18, 1.115787767802518096e-17,
    -1.333171662854620906e-16, 2.0972767875968561637e-17, 6.6376381343583238325e-15, -4.0545662729752068639e-14,
    -8.1519341976054721522e-14, 2.6335093153082322977e-12, -1.2975133253453532498e-11,
    -5.4154120542946279317e-11, 1.051212273321532285e-09, -4.1126339803469836976e-09,
    -2.9070369957882005086e-08, 4.2347877827932403518e-07, -1.3654692000834678645e-06,
    -1.3882523362786468719e-05, 0.0001867342080340571352, -0.00074070253416626697512,
    -0.0060336708714301490533, 0.24015818242558961693, 1.6536545626831027356 }) do
    p = p * a + c
  end
  -- tail (w >= 6.25), in sqrt(w) - 3.25 (clamped so the unused branch stays finite)
  local b = w:clamp(6.25, nil):sqrt() - 3.25
  local q = b * 0 + 2.2137376921775787049e-09
  for _, c in ipairs({ 9.0756561938885390979e-08, -2.7517406297064545428e-07, 1.8239629214389227755e-08,
    1.5027403968909827627e-06, -4.013867526981545969e-06, 2.9234449089955446044e-06, 1.2475304481671778723e-05,
    -4.7318229009055733981e-05, 6.8284851459573175448e-05, 2.4031110387097893999e-05,
    -0.0003550375203628474796, 0.00095328937973738049703, -0.0016882755560235047313,
    0.0024914420961078508066, -0.0037512085075692412107, 0.005370914553590063617, 1.0052589676941592334,
    3.0838856104922207635 }) do
    q = q * b + c
  end
  -- far tail (w >= 16), in sqrt(w) - 5
  local c3 = w:clamp(16, nil):sqrt() - 5
  local r = c3 * 0 - 2.7109920616438573243e-11
  for _, c in ipairs({ -2.5556418169965252055e-10, 1.5076572693500548083e-09, -3.7894654401267369937e-09,
    7.6157012080783393804e-09, -1.4960026627149240478e-08, 2.9147953450901080826e-08, -6.7711997758452339498e-08,
    2.2900482228026654717e-07, -9.9298272942317002539e-07, 4.5260625972231537039e-06,
    -1.9681778105531670567e-05, 7.5995277030017761139e-05, -0.00021503011930044477347,
    -0.00013871931833623122026, 1.0103004648645343977, 4.8499064014085844221 }) do
    r = r * c3 + c
  end
  return T.where(small, p, T.where(w:lt(16), q, r)) * x
end
M._erfinv = erfinv

local function norm_cdf(v) return (1 + T.erf(T.tensor(v / math.sqrt(2), { dtype = 'float64' })):item()) / 2 end

--- trunc_normal_(t, mean=0, std=1, a=-2, b=2): N(mean, std²) truncated to [a, b] (PyTorch's
--- method: the inverse CDF of a uniform sample in [cdf(a), cdf(b)], computed in float64).
function M.trunc_normal_(t, mean, std, a, b)
  mean, std, a, b = mean or 0, std or 1, a or -2, b or 2
  for _, v in ipairs({ { 'mean', mean }, { 'std', std }, { 'a', a }, { 'b', b } }) do
    if type(v[2]) ~= 'number' then error(fmt('trunc_normal_: %s must be a number, got %s', v[1], type(v[2])), 2) end
  end
  if not (a < b) then error(fmt('trunc_normal_: a (%g) must be less than b (%g)', a, b), 2) end
  if std < 0 then error(fmt('trunc_normal_: std must be >= 0, got %g', std), 2) end
  local l, u = norm_cdf((a - mean) / std), norm_cdf((b - mean) / std)
  nograd(function()
    local s = T.empty(t:size(), { dtype = 'float64', device = t.device }):uniform_(2 * l - 1, 2 * u - 1)
    -- (uniform_ may return 2u - 1 = 1 when b is far in the tail: clamp inside (-1, 1))
    s = erfinv(s:clamp(-1 + 1e-15, 1 - 1e-15)) * (std * math.sqrt(2)) + mean
    t:copy_(s:clamp(a, b))
  end)
  return t
end

-- Q of the QR decomposition of A [rows, cols] (rows >= cols) with R's diagonal positive
-- (so unique), by classical Gram-Schmidt with reorthogonalisation, column by column, in
-- float64 (Q's columns orthonormal to ~1e-15)
local function orthonormal_columns(A)
  local rows, cols = A:size(1), A:size(2)
  local Qt = T.zeros(cols, rows, { dtype = 'float64', device = A.device })
  local At = A:t():contiguous()
  for j = 1, cols do
    local v = At:narrow(1, j, 1):clone() -- [1, rows]
    if j > 1 then
      local Qp = Qt:narrow(1, 1, j - 1)
      for _ = 1, 2 do v = v - v:mm(Qp:t()):mm(Qp) end
    end
    local n = v:norm():item()
    if n == 0 then error('orthogonal_: the random matrix is rank-deficient; try again', 3) end
    Qt:narrow(1, j, 1):copy_(v / n)
  end
  return Qt:t()
end
M._orthonormal_columns = orthonormal_columns

--- orthogonal_(t, gain=1): a (semi-)orthogonal matrix as PyTorch's: t viewed as
--- [size(1), numel/size(1)], from the QR decomposition of a normal sample (Q with R's
--- diagonal made positive; transposed when there are fewer rows than columns), times gain.
--- Gram-Schmidt in float64 (dplhost has no QR): O(rows·cols²), ~1 s for 1024x1024 on a CPU.
function M.orthogonal_(t, gain)
  if t:dim() < 2 then error('orthogonal_: only tensors with 2 or more dimensions are supported', 2) end
  if gain ~= nil and type(gain) ~= 'number' then error(fmt('orthogonal_: gain must be a number, got %s', type(gain)), 2) end
  if t:numel() == 0 then return t end
  local rows = t:size(1)
  local cols = t:numel() / rows
  nograd(function()
    local flat = T.randn(rows, cols, { dtype = 'float64' })
    if rows < cols then flat = flat:t() end
    local q = orthonormal_columns(flat)
    if rows < cols then q = q:t() end
    t:copy_(q:reshape(t:size()):mul(gain or 1))
  end)
  return t
end

--- dirac_(t, groups=1): the identity of a convolution (t [out, in, k...], 3 to 5 dims): zero
--- everywhere but weight[g * out/groups + d, d, centre] = 1 for d < min(out/groups, in), as
--- PyTorch's (out must be divisible by groups).
function M.dirac_(t, groups)
  local nd = t:dim()
  if nd < 3 or nd > 5 then error(fmt('dirac_: only tensors with 3, 4, or 5 dimensions are supported, got %d', nd), 2) end
  groups = groups or 1
  if type(groups) ~= 'number' or groups < 1 or groups ~= math.floor(groups) or t:size(1) % groups ~= 0 then
    error(fmt('dirac_: dim 1 (%d) must be divisible by groups (%s)', t:size(1), tostring(groups)), 2)
  end
  local opg = t:size(1) / groups
  local n = math.min(opg, t:size(2))
  nograd(function()
    t:zero_()
    -- (n == 0: nothing to set; an empty dim 1 passes any groups, up to 2^62, as a loop bound)
    for g = 0, n > 0 and groups - 1 or -1 do
      for d = 1, n do
        local v = t:select(1, g * opg + d):select(1, d)
        for k = 3, nd do v = v:select(1, math.floor(t:size(k) / 2) + 1) end
        v:fill_(1)
      end
    end
  end)
  return t
end

-- The public forms: PyTorch's positional values or one options table with its keyword names
-- (kaiming_uniform_(w, {mode = 'fan_out', nonlinearity = 'relu'}) = kaiming_uniform_(w, 0,
-- 'fan_out', 'relu')); the tensor and the numbers are checked, an unknown key is an error.
local ARGS = {
  uniform_ = { 'a', 'b' }, normal_ = { 'mean', 'std' }, constant_ = { 'val' },
  trunc_normal_ = { 'mean', 'std', 'a', 'b' }, xavier_uniform_ = { 'gain' }, xavier_normal_ = { 'gain' },
  kaiming_uniform_ = { 'a', 'mode', 'nonlinearity' }, kaiming_normal_ = { 'a', 'mode', 'nonlinearity' },
  orthogonal_ = { 'gain' }, zeros_ = {}, ones_ = {}, eye_ = {}, dirac_ = { 'groups' },
}
local NUMERIC = { a = true, b = true, mean = true, std = true, val = true, gain = true }
local unpack = unpack
for name, names in pairs(ARGS) do
  local core, accepted = M[name], options.keys(unpack(names))
  M[name] = function(t, ...)
    if not T.is_tensor(t) then error(fmt('%s: expected a tensor as the first argument, got %s', name, type(t)), 2) end
    local o = options.positional(name, names, ...)
    options.check(o, accepted, name)
    o = o or {}
    local args = {}
    for i, k in ipairs(names) do
      local v = o[k]
      if v ~= nil and NUMERIC[k] and type(v) ~= 'number' then
        error(fmt('%s: %s must be a number, got %s', name, k, type(v) == 'string' and fmt("'%s'", v) or type(v)), 2)
      end
      args[i] = v
    end
    if name == 'constant_' and args[1] == nil then error('constant_: val (the fill value) is required', 2) end
    return core(t, unpack(args, 1, #names))
  end
end

return M
