-- dpl.nn: modules (layers, containers), nn.functional, nn.init, nn.utils.
-- Layers initialise their parameters as PyTorch does.
local T = require 'dpl.tensor'
local autograd = require 'dpl.autograd'
local Module = require 'dpl.nn.module'
local F = require 'dpl.nn.functional'
local amp = require 'dpl.amp'
local init = require 'dpl.nn.init_fns'
local options = require 'dpl.options'

local fmt = string.format

-- Errors are objects whose tostring reads "ClassName: message" (DESIGN.md).
local lua_error = error
local error = require('dpl.errors').raise -- string messages become ValueError objects
local is_tensor = T.is_tensor
local shape_str = F._shape_str

local nn = {
  Module = Module,
  Parameter = Module.Parameter,
  functional = F,
  init = init,
  utils = require 'dpl.nn.utils',
}

local function check_int(layer, name, v, lo)
  if type(v) ~= 'number' or v ~= math.floor(v) or v < (lo or 1) then
    error(fmt('%s: %s must be an integer >= %d, got %s', layer, name, lo or 1, tostring(v)), 4)
  end
end

-- the constructors' options: nil or a table of the layer's keys (an unknown key is an error)
local check_opts, keys, int_or_pair = options.check, options.keys, options.int_or_pair
local DT = keys('dtype', 'device')
local LINEAR_KEYS = keys(DT, 'bias')
local CONV_KEYS = keys(DT, 'stride', 'padding', 'dilation', 'groups', 'bias', 'padding_mode')
local POOL_KEYS = keys('stride', 'padding', 'ceil_mode')
local AVGPOOL_KEYS = keys(POOL_KEYS, 'count_include_pad')
local BN_KEYS = keys(DT, 'eps', 'momentum', 'affine', 'track_running_stats')
local LN_KEYS = keys(DT, 'eps', 'elementwise_affine')
local GN_KEYS = keys(DT, 'eps', 'affine')
local EMB_KEYS = keys(DT, 'padding_idx')

-- an integer or a pair {h, w} of integers >= lo (kernel sizes, strides, padding)
local function check_pair(layer, name, v, lo)
  local h, w = int_or_pair(v, layer, name)
  if h < lo or w < lo then error(fmt('%s: %s must be >= %d, got %s', layer, name, lo, tostring(h < lo and h or w))) end
end

local function opts_dtype(opts) return { dtype = opts and opts.dtype or 'float32', device = opts and opts.device } end

local function check_input(self, x, want_dims, msg)
  if not is_tensor(x) then
    error(fmt('%s: expected a tensor as input, got %s', self:_label(), type(x)), 3)
  end
  if want_dims and not want_dims[x:dim()] then
    error(fmt('%s: input has shape %s, %s', self:_label(), shape_str(x), msg), 3)
  end
end

---------------------------------------------------------------- Linear
nn.Linear = Module:extend('Linear')
--- Linear(in_features, out_features [, {bias=true, dtype=, device=}])
function nn.Linear:__init(inf, outf, opts)
  Module.__init(self)
  check_opts(opts, LINEAR_KEYS, 'Linear')
  check_int('Linear', 'in_features', inf, 0)
  check_int('Linear', 'out_features', outf, 0)
  self.in_features, self.out_features = inf, outf
  local o = opts_dtype(opts)
  self.weight = nn.Parameter(T.empty(outf, inf, o))
  if not (opts and opts.bias == false) then self.bias = nn.Parameter(T.empty(outf, o)) end
  self:reset_parameters()
end
function nn.Linear:reset_parameters()
  init.kaiming_uniform_(self.weight, math.sqrt(5))
  if self.bias then
    local bound = self.in_features > 0 and 1 / math.sqrt(self.in_features) or 0
    init.uniform_(self.bias, -bound, bound)
  end
end
function nn.Linear:forward(x)
  if not is_tensor(x) or x:dim() == 0 or x:size(-1) ~= self.in_features then
    check_input(self, x)
    error(fmt('%s(in_features=%d, out_features=%d): input has shape %s, expected the last dim to be %d '
      .. '(weight %s)', self:_label(), self.in_features, self.out_features, shape_str(x), self.in_features,
      shape_str(self.weight)), 2)
  end
  if amp.dtype then return autograd.linear(amp.cast(x), amp.cast(self.weight), amp.cast(self.bias)) end
  return autograd.linear(x, self.weight, self.bias)
end
function nn.Linear:extra_repr()
  return fmt('in_features=%d, out_features=%d, bias=%s', self.in_features, self.out_features, tostring(self.bias ~= nil))
end

---------------------------------------------------------------- Conv2d
local function pair(v) if type(v) == 'table' then return v[1], v[2] end return v, v end

nn.Conv2d = Module:extend('Conv2d')
--- Conv2d(in_channels, out_channels, kernel_size [, {stride=1, padding=0 | 'same' | 'valid', dilation=1, groups=1,
--- bias=true, padding_mode='zeros'}])
function nn.Conv2d:__init(cin, cout, k, opts)
  Module.__init(self)
  check_opts(opts, CONV_KEYS, 'Conv2d')
  opts = opts or {}
  check_int('Conv2d', 'in_channels', cin)
  check_int('Conv2d', 'out_channels', cout)
  check_pair('Conv2d', 'kernel_size', k, 1)
  if opts.stride ~= nil then check_pair('Conv2d', 'stride', opts.stride, 1) end
  local padding = opts.padding
  if type(padding) == 'string' then
    if padding ~= 'same' and padding ~= 'valid' then
      error(fmt("Conv2d: invalid padding string '%s', should be one of 'valid', 'same'", padding), 2)
    end
    local sh, sw = pair(opts.stride or 1)
    if padding == 'same' and (sh ~= 1 or sw ~= 1) then
      error("Conv2d: padding='same' is not supported for strided convolutions", 2)
    end
  elseif padding ~= nil then
    check_pair('Conv2d', 'padding', padding, 0)
  end
  if opts.dilation ~= nil then check_pair('Conv2d', 'dilation', opts.dilation, 1) end
  local pm = opts.padding_mode or 'zeros'
  if pm ~= 'zeros' and pm ~= 'reflect' and pm ~= 'replicate' and pm ~= 'circular' then
    error(fmt("Conv2d: padding_mode must be one of 'zeros', 'reflect', 'replicate', 'circular', but got %s",
      tostring(pm)), 2)
  end
  local groups = opts.groups or 1
  check_int('Conv2d', 'groups', groups)
  if cin % groups ~= 0 or cout % groups ~= 0 then
    error(fmt('Conv2d: in_channels (%d) and out_channels (%d) must be divisible by groups (%d)', cin, cout, groups), 2)
  end
  local kh, kw = pair(k)
  self.in_channels, self.out_channels, self.kernel_size = cin, cout, { kh, kw }
  self.stride, self.padding, self.dilation, self.groups = opts.stride or 1, opts.padding or 0, opts.dilation or 1, groups
  self.padding_mode = pm
  -- the explicit padding of F.pad (left, right, top, bottom), when the conv cannot pad itself:
  -- a padding_mode other than 'zeros', or 'same' with an even extent (more on the right/bottom)
  local dh, dw = pair(self.dilation)
  local ph, pw
  if padding == 'same' then
    local th, tw = dh * (kh - 1), dw * (kw - 1)
    self._pad4 = { math.floor(tw / 2), tw - math.floor(tw / 2), math.floor(th / 2), th - math.floor(th / 2) }
    ph, pw = th % 2 == 0 and th / 2 or nil, tw % 2 == 0 and tw / 2 or nil
    if ph and pw then self._conv_padding = { ph, pw } end
  elseif padding == 'valid' then
    self._pad4, self._conv_padding = { 0, 0, 0, 0 }, 0
  else
    ph, pw = pair(self.padding)
    self._pad4, self._conv_padding = { pw, pw, ph, ph }, self.padding
  end
  if pm ~= 'zeros' then self._conv_padding = nil end
  local o = opts_dtype(opts)
  self.weight = nn.Parameter(T.empty(cout, cin / groups, kh, kw, o))
  if opts.bias ~= false then self.bias = nn.Parameter(T.empty(cout, o)) end
  self:reset_parameters()
end
function nn.Conv2d:reset_parameters()
  init.kaiming_uniform_(self.weight, math.sqrt(5))
  if self.bias then
    local fan_in = self.in_channels / self.groups * self.kernel_size[1] * self.kernel_size[2]
    local bound = 1 / math.sqrt(fan_in)
    init.uniform_(self.bias, -bound, bound)
  end
end
function nn.Conv2d:forward(x)
  if not is_tensor(x) or (x:dim() ~= 4 and x:dim() ~= 3) or x:size(-3) ~= self.in_channels then
    check_input(self, x)
    error(fmt('%s(%d, %d, kernel_size=%dx%d): input has shape %s, expected [N, %d, H, W] (weight %s)',
      self:_label(), self.in_channels, self.out_channels, self.kernel_size[1], self.kernel_size[2], shape_str(x),
      self.in_channels, shape_str(self.weight)), 2)
  end
  local unb = x:dim() == 3
  if unb then x = x:unsqueeze(1) end
  local w, b = self.weight, self.bias
  if amp.dtype then x, w, b = amp.cast(x), amp.cast(w), amp.cast(b) end
  local padding = self._conv_padding
  if padding == nil then -- F.pad first: padding_mode, or an uneven 'same'
    x = F.pad(x, self._pad4, self.padding_mode == 'zeros' and 'constant' or self.padding_mode)
    padding = 0
  end
  local y = T.conv2d(x, w, b,
    { stride = self.stride, padding = padding, dilation = self.dilation, groups = self.groups })
  if unb then y = y:squeeze(1) end
  return y
end
function nn.Conv2d:extra_repr()
  local s = fmt('%d, %d, kernel_size=(%d, %d)', self.in_channels, self.out_channels, self.kernel_size[1],
    self.kernel_size[2])
  local function p(v) if type(v) == 'table' then return fmt('(%d, %d)', v[1], v[2]) end return fmt('(%d, %d)', v, v) end
  if self.stride ~= 1 then s = s .. ', stride=' .. p(self.stride) end
  if type(self.padding) == 'string' then s = s .. ", padding='" .. self.padding .. "'"
  elseif self.padding ~= 0 then s = s .. ', padding=' .. p(self.padding) end
  if self.dilation ~= 1 then s = s .. ', dilation=' .. p(self.dilation) end
  if self.groups ~= 1 then s = s .. ', groups=' .. self.groups end
  if not self.bias then s = s .. ', bias=false' end
  if self.padding_mode ~= 'zeros' then s = s .. ", padding_mode='" .. self.padding_mode .. "'" end
  return s
end

---------------------------------------------------------------- pooling
local function pool_class(name, fn, accepted)
  local cls = Module:extend(name)
  function cls:__init(k, opts)
    Module.__init(self)
    opts = F._pool_opts(opts, name, name == 'MaxPool2d')
    check_opts(opts, accepted, name)
    opts = opts or {}
    check_pair(name, 'kernel_size', k, 1)
    if opts.stride ~= nil then check_pair(name, 'stride', opts.stride, 1) end
    if opts.padding ~= nil then check_pair(name, 'padding', opts.padding, 0) end
    if opts.ceil_mode ~= nil and type(opts.ceil_mode) ~= 'boolean' then
      error(fmt('%s: ceil_mode must be true or false, got %s', name, tostring(opts.ceil_mode)))
    end
    self.kernel_size, self.stride, self.padding = k, opts.stride or k, opts.padding or 0
    self.ceil_mode = opts.ceil_mode or false
    self.count_include_pad = opts.count_include_pad
    if opts.return_indices ~= nil and type(opts.return_indices) ~= 'boolean' then
      error(fmt('%s: return_indices must be true or false, got %s', name, tostring(opts.return_indices)))
    end
    self.return_indices = opts.return_indices or nil
  end
  function cls:forward(x)
    if not is_tensor(x) or (x:dim() ~= 4 and x:dim() ~= 3) then
      check_input(self, x)
      error(fmt('%s: input has shape %s, expected [N, C, H, W]', self:_label(), shape_str(x)), 2)
    end
    local unb = x:dim() == 3
    if unb then x = x:unsqueeze(1) end
    local y, idx = fn(x, self.kernel_size, { stride = self.stride, padding = self.padding, ceil_mode = self.ceil_mode,
      count_include_pad = self.count_include_pad, return_indices = self.return_indices })
    if unb then y = y:squeeze(1) end
    if self.return_indices then return y, unb and idx:squeeze(1) or idx end -- (1-based positions in each plane)
    return y
  end
  function cls:extra_repr()
    local function s(v) if type(v) == 'table' then return fmt('(%d, %d)', v[1], v[2]) end return tostring(v) end
    return fmt('kernel_size=%s, stride=%s, padding=%s%s', s(self.kernel_size), s(self.stride), s(self.padding),
      self.ceil_mode and ', ceil_mode=true' or '')
  end
  return cls
end
nn.MaxPool2d = pool_class('MaxPool2d', F.max_pool2d, keys(POOL_KEYS, 'return_indices'))
nn.AvgPool2d = pool_class('AvgPool2d', T.avg_pool2d, AVGPOOL_KEYS)
-- the conv group (Conv1d, ConvTranspose1d/2d, 1-d and adaptive pooling, Dropout1d/2d, padding layers,
-- Upsample, PixelShuffle/Unshuffle, Unfold/Fold): dpl.nn.conv
require('dpl.nn.conv')(nn)
-- Bilinear, RReLU, Hardshrink, Softshrink, EmbeddingBag, AlphaDropout, FeatureAlphaDropout, Dropout3d,
-- LazyLinear, ChannelShuffle, Conv3d, ConvTranspose3d, the 3-d, unpooling, LP and fractional pools,
-- TripletMarginWithDistanceLoss: dpl.nn.extra
require('dpl.nn.extra')(nn)

---------------------------------------------------------------- simple layers
local function simple(name, f, repr)
  local cls = Module:extend(name)
  cls.forward = function(self, x)
    check_input(self, x)
    return f(x)
  end
  if repr then cls.extra_repr = repr end
  return cls
end
nn.ReLU = simple('ReLU', function(x) return x:relu() end)
nn.Tanh = simple('Tanh', function(x) return x:tanh() end)
nn.Sigmoid = simple('Sigmoid', function(x) return x:sigmoid() end)
nn.SiLU = simple('SiLU', function(x) return x:silu() end)
nn.LeakyReLU = Module:extend('LeakyReLU')
--- LeakyReLU(negative_slope=0.01)
function nn.LeakyReLU:__init(slope)
  Module.__init(self)
  if slope ~= nil and (type(slope) ~= 'number' or slope ~= slope) then
    error(fmt('LeakyReLU: negative_slope must be a number, got %s', tostring(slope)), 2)
  end
  self.negative_slope = slope or 0.01
end
function nn.LeakyReLU:forward(x) return F.leaky_relu(x, self.negative_slope) end
function nn.LeakyReLU:extra_repr() return fmt('negative_slope=%g', self.negative_slope) end
-- the activation modules of dpl.tensor_math's ops: positional arguments as PyTorch's, or one
-- options table with its keyword names (nn.ELU(0.5), nn.ELU{alpha = 0.5, inplace = true})
local function act_module(cname, fname, ps, defaults, repr)
  local cls = Module:extend(cname)
  local accepted = F._act_keys[fname]
  cls.__init = function(self, a1, a2, a3)
    Module.__init(self)
    local v = {}
    if type(a1) == 'table' then
      check_opts(a1, accepted, cname)
      for i, k in ipairs(ps) do v[i] = a1[k] end
      v.inplace = a1.inplace
    else
      local args = { a1, a2, a3 }
      for i = 1, #ps do v[i] = args[i] end
      v.inplace = args[#ps + 1]
    end
    for i, k in ipairs(ps) do
      if v[i] == nil then v[i] = defaults[i] end
      if type(v[i]) ~= 'number' or v[i] ~= v[i] then
        error(fmt('%s: %s must be a number, got %s', cname, k, tostring(v[i])), 3)
      end
      self[k] = v[i]
    end
    if v.inplace ~= nil and (type(v.inplace) ~= 'boolean' or not accepted.inplace) then
      error(fmt('%s: inplace must be a boolean%s, got %s', cname, accepted.inplace and '' or ' (not accepted here)',
        tostring(v.inplace)), 3)
    end
    self.inplace = v.inplace or false
    if cname == 'Hardtanh' and not (self.max_val > self.min_val) then
      error(fmt('Hardtanh: max_val (%g) must be greater than min_val (%g)', self.max_val, self.min_val), 3)
    end
  end
  local np = #ps
  cls.forward = function(self, x)
    local ip = self.inplace or nil
    if np == 0 then return F[fname](x, ip) end
    if np == 1 then return F[fname](x, self[ps[1]], ip) end
    return F[fname](x, self[ps[1]], self[ps[2]], ip)
  end
  cls.extra_repr = function(self)
    local r = repr(self)
    if self.inplace then r = r .. (r ~= '' and ', ' or '') .. 'inplace=true' end
    return r
  end
  return cls
end
nn.ELU = act_module('ELU', 'elu', { 'alpha' }, { 1 }, function(m) return fmt('alpha=%g', m.alpha) end)
nn.Hardtanh = act_module('Hardtanh', 'hardtanh', { 'min_val', 'max_val' }, { -1, 1 },
  function(m) return fmt('min_val=%g, max_val=%g', m.min_val, m.max_val) end)
nn.Softplus = act_module('Softplus', 'softplus', { 'beta', 'threshold' }, { 1, 20 },
  function(m) return fmt('beta=%g, threshold=%g', m.beta, m.threshold) end)
nn.Mish = act_module('Mish', 'mish', {}, {}, function() return '' end)
nn.Hardswish = act_module('Hardswish', 'hardswish', {}, {}, function() return '' end)
nn.Identity = Module:extend('Identity')
function nn.Identity:forward(x) return x end

nn.GELU = Module:extend('GELU')
function nn.GELU:__init(opts)
  Module.__init(self)
  check_opts(opts, F._option_keys.gelu, 'GELU')
  self.approximate = opts and opts.approximate or 'none'
  F._check_approximate(self.approximate, 'GELU')
end
function nn.GELU:forward(x) return F.gelu(x, { approximate = self.approximate }) end
function nn.GELU:extra_repr() return self.approximate ~= 'none' and ("approximate='" .. self.approximate .. "'") or '' end

-- dim: 1-based, negative from the end; nil is the last (PyTorch's implicit dim=None)
local function softmax_dim(layer, dim)
  if dim ~= nil and (type(dim) ~= 'number' or dim ~= math.floor(dim) or dim == 0) then
    error(fmt('%s: dim must be a nonzero integer (1-based, negative from the end) or nil, got %s', layer,
      type(dim) == 'string' and ("'" .. dim .. "'") or tostring(dim)), 3)
  end
  return dim or -1
end
nn.Softmax = Module:extend('Softmax')
function nn.Softmax:__init(dim) Module.__init(self) self.dim = softmax_dim('Softmax', dim) end
function nn.Softmax:forward(x) check_input(self, x) return x:softmax(self.dim) end
nn.LogSoftmax = Module:extend('LogSoftmax')
function nn.LogSoftmax:__init(dim) Module.__init(self) self.dim = softmax_dim('LogSoftmax', dim) end
function nn.LogSoftmax:forward(x) check_input(self, x) return x:log_softmax(self.dim) end

nn.Flatten = Module:extend('Flatten')
--- Flatten(start_dim=2, end_dim=-1): dim 1 is the batch.
function nn.Flatten:__init(s, e)
  Module.__init(self)
  for _, v in ipairs({ { 'start_dim', s }, { 'end_dim', e } }) do
    local d = v[2]
    if d ~= nil and (type(d) ~= 'number' or d ~= math.floor(d) or d == 0 or math.abs(d) > 2 ^ 31) then
      error(fmt('Flatten: %s must be a nonzero integer (1-based, negative from the end), got %s', v[1],
        type(d) == 'string' and ("'" .. d .. "'") or tostring(d)), 2)
    end
  end
  self.start_dim, self.end_dim = s or 2, e or -1
end
function nn.Flatten:forward(x) check_input(self, x) return x:flatten(self.start_dim, self.end_dim) end
function nn.Flatten:extra_repr() return fmt('start_dim=%d, end_dim=%d', self.start_dim, self.end_dim) end

nn.Unflatten = Module:extend('Unflatten')
--- Unflatten(dim, sizes): dim (1-based; negative from the end) becomes the dims `sizes`
--- (a list of sizes; one of them may be -1).
function nn.Unflatten:__init(dim, sizes)
  Module.__init(self)
  if type(dim) ~= 'number' or dim ~= math.floor(dim) or dim == 0 then
    error(fmt('Unflatten: dim must be a non-zero integer (1-based), got %s', tostring(dim)), 2)
  end
  if type(sizes) ~= 'table' or #sizes == 0 then
    error(fmt('Unflatten: unflattened_size must be a list of sizes, got %s', type(sizes)), 2)
  end
  local neg = 0
  for i, v in ipairs(sizes) do
    if type(v) ~= 'number' or v ~= math.floor(v) or (v < 0 and v ~= -1) then
      error(fmt('Unflatten: unflattened_size[%d] must be a size >= 0 or -1, got %s', i, tostring(v)), 2)
    end
    if v == -1 then neg = neg + 1 end
  end
  if neg > 1 then error('Unflatten: only one size can be -1', 2) end
  self.dim, self.unflattened_size = dim, { unpack(sizes) }
end
function nn.Unflatten:forward(x)
  check_input(self, x)
  local nd = x:dim()
  local d = self.dim < 0 and nd + self.dim + 1 or self.dim
  if d < 1 or d > nd then
    error(fmt('%s: dim %d is out of range for an input of shape %s', self:_label(), self.dim, shape_str(x)), 2)
  end
  local n, prod, free = x:size(d), 1, nil
  for i, v in ipairs(self.unflattened_size) do
    if v == -1 then free = i else prod = prod * v end
  end
  local sizes = { unpack(self.unflattened_size) }
  if free then
    if prod == 0 or n % prod ~= 0 then
      error(fmt("%s: provided sizes [%s] don't multiply up to the size of dim %d (%d) in the input %s",
        self:_label(), table.concat(self.unflattened_size, ', '), d, n, shape_str(x)), 2)
    end
    sizes[free] = n / prod
  elseif prod ~= n then
    error(fmt("%s: provided sizes [%s] don't multiply up to the size of dim %d (%d) in the input %s",
      self:_label(), table.concat(self.unflattened_size, ', '), d, n, shape_str(x)), 2)
  end
  local shape = {}
  for i = 1, d - 1 do shape[#shape + 1] = x:size(i) end
  for _, v in ipairs(sizes) do shape[#shape + 1] = v end
  for i = d + 1, nd do shape[#shape + 1] = x:size(i) end
  return x:reshape(shape)
end
function nn.Unflatten:extra_repr()
  return fmt('dim=%d, unflattened_size=(%s)', self.dim, table.concat(self.unflattened_size, ', '))
end

nn.Dropout = Module:extend('Dropout')
function nn.Dropout:__init(p)
  Module.__init(self)
  p = p or 0.5
  if type(p) ~= 'number' or p < 0 or p > 1 then
    error(fmt('Dropout: probability has to be between 0 and 1, but got %s', tostring(p)), 2)
  end
  self.p = p
end
function nn.Dropout:forward(x) return F.dropout(x, self.p, self.training) end
function nn.Dropout:extra_repr() return fmt('p=%g', self.p) end

---------------------------------------------------------------- normalisation
local function batchnorm(name, dims, opt_keys)
  local cls = Module:extend(name)
  --- (num_features [, {eps=1e-5, momentum=0.1, affine=true, track_running_stats=true}]), or
  --- PyTorch's positional form (num_features, eps, momentum, affine, track_running_stats
  --- [, process_group]): nn.BatchNorm1d(C, 0.8) is eps=0.8
  function cls:__init(C, opts, ...)
    Module.__init(self)
    if opts ~= nil and type(opts) ~= 'table' then
      local a = { opts, ... }
      if type(opts) ~= 'number' then
        error(fmt('%s: eps must be a number (or give an options table), got %s', name, tostring(opts)), 2)
      end
      for i, k in ipairs({ 'momentum', 'affine', 'track_running_stats' }) do
        local v = a[i + 1]
        if k ~= 'momentum' and v ~= nil and type(v) ~= 'boolean' then
          error(fmt('%s: %s must be a boolean, got %s', name, k, tostring(v)), 2)
        end
      end
      opts = { eps = a[1], momentum = a[2], affine = a[3], track_running_stats = a[4], process_group = a[5] }
    end
    check_opts(opts, opt_keys or BN_KEYS, name)
    opts = opts or {}
    check_int(name, 'num_features', C)
    -- momentum=false is PyTorch's momentum=None: the running statistics are cumulative
    -- averages (factor 1/num_batches_tracked)
    local momentum = opts.momentum
    if momentum == nil then momentum = 0.1 end
    if momentum ~= false and (type(momentum) ~= 'number' or momentum ~= momentum) then
      error(fmt('%s: momentum must be a number or false (a cumulative average, PyTorch\'s None), got %s', name,
        tostring(momentum)), 2)
    end
    if opts.eps ~= nil and type(opts.eps) ~= 'number' then
      error(fmt('%s: eps must be a number, got %s', name, tostring(opts.eps)), 2)
    end
    self.num_features, self.eps, self.momentum = C, opts.eps or 1e-5, momentum
    self.affine = opts.affine ~= false
    self.track_running_stats = opts.track_running_stats ~= false
    local o = opts_dtype(opts)
    if self.affine then
      self.weight = nn.Parameter(T.ones(C, o))
      self.bias = nn.Parameter(T.zeros(C, o))
    end
    if self.track_running_stats then
      self:register_buffer('running_mean', T.zeros(C, o))
      self:register_buffer('running_var', T.ones(C, o))
      self:register_buffer('num_batches_tracked', T.zeros({}, { dtype = 'int64' }))
    end
  end
  function cls:forward(x)
    if not is_tensor(x) or not dims[x:dim()] or x:size(2) ~= self.num_features then
      check_input(self, x)
      error(fmt('%s(%d): input has shape %s, expected %s with %d channels in dim 2', self:_label(),
        self.num_features, shape_str(x), dims.what, self.num_features), 2)
    end
    local use_batch = self.training or not self.track_running_stats
    if use_batch and x:numel() == self.num_features then -- the variance of one value (PyTorch: an error)
      error(fmt('%s(%d): expected more than 1 value per channel when training, got input size %s', self:_label(),
        self.num_features, shape_str(x)), 2)
    end
    local factor = self.momentum or 0
    if self.training and self.track_running_stats then
      autograd.no_grad(function() self.num_batches_tracked:add_(1) end)
      if self.momentum == false then factor = 1 / self.num_batches_tracked:item() end
    end
    return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, use_batch,
      factor, self.eps)
  end
  -- a state dict without num_batches_tracked (PyTorch's before 0.4.1) loads it as 0, as PyTorch's
  function cls:_load_default(key)
    if key == 'num_batches_tracked' and self.track_running_stats then return T.zeros({}, { dtype = 'int64' }) end
  end
  function cls:extra_repr()
    return fmt('%d, eps=%g, momentum=%s, affine=%s, track_running_stats=%s', self.num_features, self.eps,
      self.momentum == false and 'false' or fmt('%g', self.momentum), tostring(self.affine),
      tostring(self.track_running_stats))
  end
  return cls
end
nn.BatchNorm1d = batchnorm('BatchNorm1d', { [2] = true, [3] = true, what = '[N, C] or [N, C, L]' })
nn.BatchNorm2d = batchnorm('BatchNorm2d', { [4] = true, what = '[N, C, H, W]' })

nn.GroupNorm = Module:extend('GroupNorm')
--- GroupNorm(num_groups, num_channels [, {eps=1e-5, affine=true, dtype=, device=}]): each
--- sample's channels in num_groups groups, each group normalised over its channels and
--- positions (biased variance), then a per-channel weight and bias. Composed of tensor ops
--- (autograd differentiates it).
function nn.GroupNorm:__init(G, C, opts)
  Module.__init(self)
  check_opts(opts, GN_KEYS, 'GroupNorm')
  opts = opts or {}
  check_int('GroupNorm', 'num_groups', G)
  check_int('GroupNorm', 'num_channels', C)
  if C % G ~= 0 then error(fmt('GroupNorm: num_channels (%d) must be divisible by num_groups (%d)', C, G), 2) end
  if opts.eps ~= nil and type(opts.eps) ~= 'number' then
    error(fmt('GroupNorm: eps must be a number, got %s', tostring(opts.eps)), 2)
  end
  self.num_groups, self.num_channels, self.eps = G, C, opts.eps or 1e-5
  self.affine = opts.affine ~= false
  if self.affine then
    local o = opts_dtype(opts)
    self.weight = nn.Parameter(T.ones(C, o))
    self.bias = nn.Parameter(T.zeros(C, o))
  end
end
function nn.GroupNorm:forward(x)
  if not is_tensor(x) or x:dim() < 2 or x:size(2) ~= self.num_channels then
    check_input(self, x)
    error(fmt('%s(%d, %d): input has shape %s, expected [N, %d, *]', self:_label(), self.num_groups,
      self.num_channels, shape_str(x), self.num_channels), 2)
  end
  return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)
end
function nn.GroupNorm:extra_repr()
  return fmt('%d, %d, eps=%g, affine=%s', self.num_groups, self.num_channels, self.eps, tostring(self.affine))
end

nn.LayerNorm = Module:extend('LayerNorm')
--- LayerNorm(normalized_shape [, {eps=1e-5, elementwise_affine=true}])
function nn.LayerNorm:__init(shape, opts)
  Module.__init(self)
  check_opts(opts, LN_KEYS, 'LayerNorm')
  opts = opts or {}
  if type(shape) == 'number' then shape = { shape } end
  -- (a tensor, nil or 2.5 failed later inside ones: 'ones: sizes must be integers')
  if type(shape) ~= 'table' or is_tensor(shape) then
    error(fmt('LayerNorm: normalized_shape must be an integer or a list of integers, got %s',
      is_tensor(shape) and 'a tensor' or type(shape)), 2)
  end
  local list = {}
  for i = 1, #shape do
    local n = shape[i]
    if type(n) ~= 'number' or n ~= math.floor(n) or n < 0 or n >= 2 ^ 53 then
      error(fmt('LayerNorm: normalized_shape[%d] must be a non-negative integer, got %s', i, tostring(n)), 2)
    end
    list[i] = n
  end
  shape = list
  if opts.eps ~= nil and type(opts.eps) ~= 'number' then error(fmt('LayerNorm: eps must be a number, got %s', type(opts.eps)), 2) end
  self.normalized_shape, self.eps = shape, opts.eps or 1e-5
  self.elementwise_affine = opts.elementwise_affine ~= false
  if self.elementwise_affine then
    local o = opts_dtype(opts)
    self.weight = nn.Parameter(T.ones(shape, o))
    self.bias = nn.Parameter(T.zeros(shape, o))
  end
end
function nn.LayerNorm:forward(x)
  check_input(self, x)
  local ok, y = pcall(F.layer_norm, x, self.normalized_shape, self.weight, self.bias, self.eps)
  if not ok then error(self:_label() .. ': ' .. (type(y) == 'table' and tostring(y.message) or tostring(y)):gsub('^[^\n:]*:%d+: ', '')) end
  return y
end
function nn.LayerNorm:extra_repr()
  return fmt('[%s], eps=%g, elementwise_affine=%s', table.concat(self.normalized_shape, ', '), self.eps,
    tostring(self.elementwise_affine))
end

nn.Embedding = Module:extend('Embedding')
--- Embedding(num_embeddings, embedding_dim [, {padding_idx=}]) with 1-based ids; weight ~ N(0, 1).
--- The padding_idx row (1..V, or -V..-1 from the end; kept 1-based) starts at zero and gets no gradient.
function nn.Embedding:__init(V, D, opts)
  Module.__init(self)
  F._embedding_unsupported(opts, 'Embedding')
  check_opts(opts, EMB_KEYS, 'Embedding')
  check_int('Embedding', 'num_embeddings', V)
  check_int('Embedding', 'embedding_dim', D)
  self.num_embeddings, self.embedding_dim = V, D
  if opts and opts.padding_idx ~= nil then self.padding_idx = F._padding_row(opts.padding_idx, V, 'Embedding') end
  self.weight = nn.Parameter(T.empty(V, D, opts_dtype(opts)))
  self:reset_parameters()
end
--- Embedding.from_pretrained(embeddings [, freeze=true] [, {freeze=true, padding_idx=}]) (PyTorch's
--- classmethod; positional freeze or an options table): a layer whose weight is a Parameter on
--- embeddings' storage (not copied, as PyTorch's), frozen (requires_grad false) unless freeze = false.
--- The padding row is not zeroed (it keeps the given vector) and gets no gradient.
local FROM_PRETRAINED_KEYS = keys('freeze', 'padding_idx', 'max_norm', 'norm_type', 'scale_grad_by_freq', 'sparse')
function nn.Embedding.from_pretrained(embeddings, freeze, opts, extra)
  if embeddings == nn.Embedding then -- called as nn.Embedding:from_pretrained(...), PyTorch's spelling
    return nn.Embedding.from_pretrained(freeze, opts, extra)
  end
  if type(freeze) == 'table' and opts == nil then freeze, opts = nil, freeze end
  check_opts(opts, FROM_PRETRAINED_KEYS, 'Embedding.from_pretrained')
  F._embedding_unsupported(opts, 'Embedding.from_pretrained')
  if opts and opts.freeze ~= nil then
    if freeze ~= nil then error('Embedding.from_pretrained: freeze given twice (positionally and in the options)', 2) end
    freeze = opts.freeze
  end
  if freeze == nil then freeze = true end
  if type(freeze) ~= 'boolean' then
    error(fmt('Embedding.from_pretrained: freeze must be true or false, got %s', tostring(freeze)), 2)
  end
  if not is_tensor(embeddings) or embeddings:dim() ~= 2 then
    error(fmt('Embedding.from_pretrained: embeddings parameter is expected to be 2-dimensional, got %s',
      is_tensor(embeddings) and ('shape [' .. table.concat(embeddings:size(), ', ') .. ']') or type(embeddings)), 2)
  end
  if not embeddings:is_floating_point() then
    error(fmt('Embedding.from_pretrained: embeddings must be a floating point tensor, got %s', embeddings.dtype), 2)
  end
  local V, D = embeddings:size(1), embeddings:size(2)
  local e = nn.Embedding(V, D, { dtype = embeddings.dtype, device = embeddings.device,
    padding_idx = opts and opts.padding_idx })
  e.weight = nn.Parameter(embeddings:detach(), not freeze)
  return e
end
function nn.Embedding:reset_parameters()
  init.normal_(self.weight)
  if self.padding_idx then
    autograd.no_grad(function() self.weight:select(1, self.padding_idx):zero_() end)
  end
end
function nn.Embedding:forward(idx)
  if not is_tensor(idx) or idx:is_floating_point() then
    error(fmt('%s: expected an integer tensor of ids (1-based), got %s', self:_label(),
      is_tensor(idx) and idx.dtype or type(idx)), 2)
  end
  local ok, out = pcall(F._embedding, self.weight, idx, self.padding_idx)
  if ok then return out end
  if type(out) == 'table' and type(out.message) == 'string' then -- name the layer (an id out of range)
    out = setmetatable({ message = fmt('%s(%d, %d): %s', self:_label(), self.num_embeddings, self.embedding_dim,
      out.message) }, getmetatable(out))
  end
  lua_error(out, 0)
end
function nn.Embedding:extra_repr()
  local s = fmt('%d, %d', self.num_embeddings, self.embedding_dim)
  return self.padding_idx and s .. ', padding_idx=' .. self.padding_idx or s
end

---------------------------------------------------------------- containers
-- Sequential and ModuleList keep their children in the fields 1..n (self[i] is a plain
-- table read, the forward loop's); their __index adds the negative indices, -1 the last.
local function list_index(cls)
  return function(t, k)
    local v = cls[k]
    if v ~= nil then return v end
    if type(k) == 'number' and k < 0 then
      local n = rawget(t, '_n')
      if n and k >= -n and k == math.floor(k) then return rawget(t, n + 1 + k) end
    end
    return nil
  end
end

-- the methods Sequential and ModuleList share (PyTorch's append, extend, insert, pop, len)
local function list_methods(cls, name)
  cls.__index = list_index(cls)
  function cls:append(m)
    if not Module.is_module(m) then error(fmt('%s: append expects a Module, got %s', name, type(m)), 2) end
    local n = rawget(self, '_n') + 1
    self:add_module(n, m)
    rawset(self, '_n', n)
    return self
  end
  --- On an instance: appends the modules of a list (or of a ModuleList / Sequential). On the
  --- class: a subclass, as every class's extend(name).
  function cls:extend(x)
    if rawget(self, '_is_module') ~= true then
      local sub = Module.extend(self, x)
      sub.__index = list_index(sub)
      return sub
    end
    if type(x) ~= 'table' then error(fmt('%s: extend expects a list of Modules, got %s', name, type(x)), 2) end
    local list = {}
    if Module.is_module(x) then
      for _, m in x:named_children() do list[#list + 1] = m end
    else
      for i, m in ipairs(x) do
        if not Module.is_module(m) then error(fmt('%s: extend: element %d is not a Module (%s)', name, i, type(m)), 2) end
        list[i] = m
      end
    end
    for _, m in ipairs(list) do self:append(m) end
    return self
  end
  --- insert(i, m): m becomes element i (1..n+1; -n..-1 count from the end, as a Lua/Python
  --- list's insert: -1 puts m before the last); the later ones move up.
  function cls:insert(i, m)
    local n = rawget(self, '_n')
    if type(i) ~= 'number' or i ~= math.floor(i) then error(fmt('%s: insert: index must be an integer, got %s', name, tostring(i)), 2) end
    if not Module.is_module(m) then error(fmt('%s: insert expects a Module, got %s', name, type(m)), 2) end
    if i < 0 then i = math.max(n + 1 + i, 1) end
    if i < 1 or i > n + 1 then error(fmt('%s: insert: index %d is out of range (1..%d)', name, i, n + 1), 2) end
    for j = n, i, -1 do
      local c = rawget(self, j)
      if rawget(c, '_name') == tostring(j) then rawset(c, '_name', tostring(j + 1)) end
      rawset(self, j + 1, c)
    end
    rawset(self, '_n', n + 1)
    local names = rawget(self, '_module_names')
    names[#names + 1] = n + 1
    rawset(self, i, nil)
    if rawget(m, '_name') == nil then rawset(m, '_name', tostring(i)) end
    rawset(self, i, m)
    return self
  end
  --- pop([i=-1]): removes element i (negative: from the end) and returns it; the later
  --- ones move down.
  function cls:pop(i)
    local n = rawget(self, '_n')
    i = i or -1
    if type(i) ~= 'number' or i ~= math.floor(i) then error(fmt('%s: pop: index must be an integer, got %s', name, tostring(i)), 2) end
    if i < 0 then i = n + 1 + i end
    if i < 1 or i > n then error(fmt('%s: pop: index out of range (%d elements)', name, n), 2) end
    local m = rawget(self, i)
    for j = i, n - 1 do
      local c = rawget(self, j + 1)
      if rawget(c, '_name') == tostring(j + 1) then rawset(c, '_name', tostring(j)) end
      rawset(self, j, c)
    end
    rawset(self, n, nil)
    local names = rawget(self, '_module_names')
    for k = #names, 1, -1 do if names[k] == n then table.remove(names, k) break end end
    rawset(self, '_n', n - 1)
    return m
  end
  --- slice(i [, j=-1]): a new container of this class holding elements i..j (inclusive;
  --- negative: from the end; j < i: empty), the same modules (not copies), numbered 1.. (PyTorch's
  --- seq[a:b]; its Sequential slice keeps the old names, dplhost's renumbers as its ModuleList's).
  function cls:slice(i, j)
    local n = rawget(self, '_n')
    j = j == nil and -1 or j
    for _, v in ipairs({ i, j }) do
      if type(v) ~= 'number' or v ~= math.floor(v) then
        error(fmt('%s: slice: indices must be integers, got %s', name, tostring(v)), 2)
      end
    end
    if i < 0 then i = n + 1 + i end
    if j < 0 then j = n + 1 + j end
    i, j = math.max(i, 1), math.min(j, n)
    local list = {}
    for k = i, j do list[#list + 1] = rawget(self, k) end
    local r = getmetatable(self)()
    for _, m in ipairs(list) do r:append(m) end
    if rawget(self, 'training') == false then rawset(r, 'training', false) end
    return r
  end
  function cls:__len() return rawget(self, '_n') end
  function cls:len() return rawget(self, '_n') end
  --- for i, m in list:ipairs() do ... end
  function cls:ipairs()
    local i, n = 0, rawget(self, '_n')
    return function()
      i = i + 1
      if i <= n then return i, rawget(self, i) end
    end
  end
end

nn.Sequential = Module:extend('Sequential')
list_methods(nn.Sequential, 'Sequential')
--- Sequential(m1, m2, ...) or Sequential{m1, m2, ...}: children named 1, 2, ...; seq[-1] is the last.
function nn.Sequential:__init(...)
  Module.__init(self)
  local mods, n = { ... }, select('#', ...)
  if n == 1 and type(mods[1]) == 'table' and not Module.is_module(mods[1]) then mods = mods[1]; n = #mods end
  for i = 1, n do -- (not ipairs: a nil among the modules is an error, not the end of the list)
    local m = mods[i]
    if not Module.is_module(m) then error(fmt('Sequential: argument %d is not a Module (%s)', i, type(m)), 2) end
    self:add_module(i, m)
  end
  rawset(self, '_n', #mods)
end
function nn.Sequential:forward(x)
  for i = 1, rawget(self, '_n') do x = self[i](x) end
  return x
end

nn.ModuleList = Module:extend('ModuleList')
list_methods(nn.ModuleList, 'ModuleList')
function nn.ModuleList:__init(list)
  Module.__init(self)
  rawset(self, '_n', 0)
  if list ~= nil then self:extend(list) end
end

-- keys in a natural order: numbers first, then strings with digit runs compared as numbers
-- ('2' < '10' < 'a' < 'b')
local function natural_lt(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return ta == 'number' end
  if ta ~= 'string' then return a < b end
  local i, j = 1, 1
  while i <= #a and j <= #b do
    local da, db = a:match('^%d+', i), b:match('^%d+', j)
    if da and db then
      local na, nb = tonumber(da), tonumber(db)
      if na ~= nb then return na < nb end
      i, j = i + #da, j + #db
    else
      local ca, cb = a:sub(i, i), b:sub(j, j)
      if ca ~= cb then return ca < cb end
      i, j = i + 1, j + 1
    end
  end
  local ra, rb = #a - i, #b - j
  if ra ~= rb then return ra < rb end
  return a < b
end

nn.ModuleDict = Module:extend('ModuleDict')
local ModuleDict = nn.ModuleDict
-- The children live in self._store, not in fields of self, so that a key can be the name of
-- a method ('train', 'keys', 'forward'): md.train is the method, md:get('train') the child
-- (PyTorch's _modules). md.enc reads the child 'enc' when no method has that name. The store
-- is marked as a module (and holds nothing else) so that DataParallel replicas copy it.
function ModuleDict.__index(t, k)
  local v = ModuleDict[k]
  if v ~= nil then return v end
  local s = rawget(t, '_store')
  if s ~= nil then
    local c = rawget(s, k)
    if Module.is_module(c) then return c end
  end
  return nil
end
function ModuleDict.__newindex(t, k, v)
  local s = rawget(t, '_store')
  if Module.is_module(v) and s ~= nil then return t:add_module(k, v) end
  if v == nil and s ~= nil and Module.is_module(rawget(s, k)) then t:pop(k) return end
  return Module.__newindex(t, k, v)
end
function ModuleDict:extend(name)
  if rawget(self, '_is_module') == true then error('ModuleDict: extend is for classes; use update', 2) end
  local sub = Module.extend(self, name)
  local idx = function(t, k)
    local v = sub[k]
    if v ~= nil then return v end
    return ModuleDict.__index(t, k)
  end
  sub.__index, sub.__newindex = idx, ModuleDict.__newindex
  return sub
end

local function check_key(k)
  if (type(k) ~= 'string' and type(k) ~= 'number') or k == '_is_module' then
    error(fmt('ModuleDict: a key must be a string or a number (not _is_module), got %s', tostring(k)), 3)
  end
  if type(k) == 'string' and (k == '' or k:find('.', 1, true)) then
    error(fmt("ModuleDict: a key can't be empty or contain '.', got '%s'", k), 3)
  end
end

--- ModuleDict(dict): dict is a table name -> module (keys sorted in a natural order: Lua
--- tables have no insertion order), a list of {name, module} pairs (kept in that order, as
--- PyTorch's insertion order) or a ModuleDict.
function ModuleDict:__init(dict)
  Module.__init(self)
  rawset(self, '_store', { _is_module = true })
  if dict ~= nil then self:update(dict) end
end
function ModuleDict:add_module(name, m)
  check_key(name)
  if m ~= nil and not Module.is_module(m) then error(fmt('ModuleDict: %s is not a Module', tostring(name)), 2) end
  if m == nil then
    if rawget(rawget(self, '_store'), name) ~= nil then self:pop(name) end
    return
  end
  local names = rawget(self, '_module_names')
  local found = false
  for i = 1, #names do if names[i] == name then found = true break end end
  if not found then names[#names + 1] = name end
  if rawget(m, '_name') == nil then rawset(m, '_name', tostring(name)) end
  rawset(rawget(self, '_store'), name, m)
end
--- update(dict): adds or replaces entries (dict as for the constructor).
function ModuleDict:update(dict)
  if type(dict) ~= 'table' then error(fmt('ModuleDict: expected a table of modules, got %s', type(dict)), 2) end
  if Module.is_module(dict) then
    for k, m in dict:named_children() do self:add_module(k, m) end
    return self
  end
  if type(dict[1]) == 'table' and not Module.is_module(dict[1]) then -- {{name, module}, ...}
    for i, e in ipairs(dict) do
      if type(e) ~= 'table' or e[1] == nil or not Module.is_module(e[2]) then
        error(fmt('ModuleDict: element %d must be a {name, module} pair', i), 2)
      end
      self:add_module(e[1], e[2])
    end
    return self
  end
  local keys = {}
  for k in pairs(dict) do keys[#keys + 1] = k end
  table.sort(keys, natural_lt)
  for _, k in ipairs(keys) do
    if not Module.is_module(dict[k]) then error(fmt('ModuleDict: %s is not a Module (%s)', tostring(k), type(dict[k])), 2) end
    self:add_module(k, dict[k])
  end
  return self
end
--- get(key): the child (also one whose key is a method's name).
function ModuleDict:get(k) return Module._get_child(self, k) end
function ModuleDict:contains(k) return Module._get_child(self, k) ~= nil end
--- pop(key): removes the child and returns it.
function ModuleDict:pop(k)
  local s = rawget(self, '_store')
  local m = rawget(s, k)
  if not Module.is_module(m) then error(fmt("ModuleDict: no key '%s'", tostring(k)), 2) end
  rawset(s, k, nil)
  local names = rawget(self, '_module_names')
  for i = 1, #names do if names[i] == k then table.remove(names, i) break end end
  return m
end
function ModuleDict:clear()
  rawset(self, '_store', { _is_module = true })
  rawset(self, '_module_names', {})
end
--- The keys in insertion order.
function ModuleDict:keys()
  local r = {}
  for _, k in ipairs(rawget(self, '_module_names')) do r[#r + 1] = k end
  return r
end
function ModuleDict:values()
  local r = {}
  for _, k in ipairs(rawget(self, '_module_names')) do r[#r + 1] = Module._get_child(self, k) end
  return r
end
--- for key, module in md:items() do ... end
function ModuleDict:items()
  local names, i = rawget(self, '_module_names'), 0
  return function()
    i = i + 1
    local k = names[i]
    if k ~= nil then return k, Module._get_child(self, k) end
  end
end
function ModuleDict:len() return #rawget(self, '_module_names') end

---------------------------------------------------------------- the loss group (lua/dpl/nn/loss.lua)
-- losses, distances, LogSigmoid, Softmin, Softsign, Tanhshrink, Hardsigmoid, ReLU6, PReLU, SELU,
-- CELU, GLU, Threshold, Softmax2d, LocalResponseNorm, InstanceNorm1d/2d/3d
nn.BatchNorm3d = batchnorm('BatchNorm3d', { [5] = true, what = '[N, C, D, H, W]' })
for name, cls in pairs(require 'dpl.nn.loss') do nn[name] = cls end

-- SyncBatchNorm (lua/dpl/nn/syncbn.lua): batch statistics over the ranks of dpl.dist
nn._batchnorm, nn._BN_KEYS = batchnorm, BN_KEYS
require('dpl.nn.syncbn')(nn)

-- the sequence group: RNN/LSTM/GRU and their cells, MultiheadAttention, the Transformer modules
require('dpl.nn.seq')(nn)

-- Torch7's names (Sequential:add, zeroGradParameters, ...; hints for backward(x, gradOutput),
-- getParameters and the Torch7 class names): docs/torch7.md
require('dpl.nn.torch7').install(nn, Module)

return nn
