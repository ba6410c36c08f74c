-- dpl.nn.extra: PyTorch 1.13 nn modules added after the groups (names, arguments, defaults,
-- parameters, initialisation and state dict keys are PyTorch's): Bilinear, RReLU,
-- Hardshrink, Softshrink, EmbeddingBag, AlphaDropout, FeatureAlphaDropout, Dropout3d,
-- LazyLinear, ChannelShuffle, Conv3d, ConvTranspose3d, MaxPool3d, AvgPool3d,
-- AdaptiveAvgPool3d, AdaptiveMaxPool3d, MaxUnpool1d/2d/3d, LPPool1d/2d,
-- FractionalMaxPool2d, TripletMarginWithDistanceLoss. init.lua installs them
-- (require('dpl.nn.extra')(nn)); the functions they run are in dpl.nn.functional_extra and
-- dpl.nn.functional_conv3d. Positional arguments as PyTorch's, or one options table.
local T = require 'dpl.tensor'
local Module = require 'dpl.nn.module'
local init = require 'dpl.nn.init_fns'
local options = require 'dpl.options'
local errors = require 'dpl.errors'
local FX = require 'dpl.nn.functional_extra'
local F3 = require 'dpl.nn.functional_conv3d'

local fmt = string.format
local type, tostring, floor = type, tostring, math.floor
local lua_error = error
local error = errors.raise
local is_tensor = T.is_tensor
local check_opts, keys = options.check, options.keys
local got, shape_str, need_bool, ntuple = FX.got, FX.shape_str, FX.need_bool, F3.ntuple

local DT = keys('dtype', 'device')
local function opts_dtype(opts) return { dtype = opts and opts.dtype or 'float32', device = opts and opts.device } end
local function tuple(t) return '(' .. table.concat(t, ', ') .. (#t == 1 and ',)' or ')') end

-- the error of a call inside forward, its function name replaced by the layer's label
local function relabel(self, ok, ...)
  if ok then return ... end
  local e = ...
  if type(e) == 'table' and type(e.message) == 'string' then
    local msg = e.message:gsub('^[%w_]+: ', '')
    lua_error(setmetatable({ message = self:_label() .. ': ' .. msg }, getmetatable(e)), 0)
  end
  lua_error(e, 0)
end
local function need_input(self, x)
  if not is_tensor(x) then error(fmt('%s: expected a tensor as input, got %s', self:_label(), got(x)), 3) end
end
local function pint(v, name, what, lo)
  if type(v) ~= 'number' or v ~= floor(v) or v < lo then
    error(fmt('%s: %s must be an integer >= %d, got %s', name, what, lo, got(v)), 3)
  end
end

return function(nn)
  ---------------------------------------------------------------- activations
  local function simple(name, names, defaults, fwd, repr)
    local cls = Module:extend(name)
    function cls:__init(...)
      Module.__init(self)
      local vals = { FX.args(name, names, defaults, ...) }
      for i, k in ipairs(names) do self[k] = vals[i] end
      if self._check then self:_check() end
    end
    function cls:forward(x)
      need_input(self, x)
      return relabel(self, pcall(fwd, self, x))
    end
    cls.extra_repr = repr
    return cls
  end
  nn.Hardshrink = simple('Hardshrink', { 'lambd' }, { 0.5 }, function(self, x) return FX.hardshrink(x, self.lambd) end,
    function(self) return tostring(self.lambd) end)
  function nn.Hardshrink:_check()
    if type(self.lambd) ~= 'number' then error(fmt('Hardshrink: lambd must be a number, got %s', got(self.lambd)), 4) end
  end
  nn.Softshrink = simple('Softshrink', { 'lambd' }, { 0.5 }, function(self, x) return FX.softshrink(x, self.lambd) end,
    function(self) return tostring(self.lambd) end)
  function nn.Softshrink:_check()
    if type(self.lambd) ~= 'number' then error(fmt('Softshrink: lambd must be a number, got %s', got(self.lambd)), 4) end
    if self.lambd < 0 then
      error(fmt('Softshrink: lambda must be greater or equal to 0, but found to be %s.', tostring(self.lambd)), 4)
    end
  end
  --- RReLU(lower=1/8, upper=1/3, inplace=false): a random slope U(lower, upper) per
  --- non-positive element in training; the mean slope (lower + upper) / 2 in eval
  nn.RReLU = simple('RReLU', { 'lower', 'upper', 'inplace' }, { 1 / 8, 1 / 3, false },
    function(self, x) return FX.rrelu(x, self.lower, self.upper, self.training, self.inplace) end,
    function(self) return fmt('lower=%g, upper=%g%s', self.lower, self.upper, self.inplace and ', inplace=True' or '') end)
  function nn.RReLU:_check()
    for _, k in ipairs({ 'lower', 'upper' }) do
      if type(self[k]) ~= 'number' then error(fmt('RReLU: %s must be a number, got %s', k, got(self[k])), 4) end
    end
    if self.lower > self.upper then
      error(fmt('RReLU: Lower bound should be less than or equal to the upper bound (lower=%g, upper=%g)', self.lower,
        self.upper), 4)
    end
    need_bool(self.inplace, 'RReLU', 'inplace')
  end

  ---------------------------------------------------------------- dropout
  local function drop(name, fname)
    local cls = simple(name, { 'p', 'inplace' }, { 0.5, false },
      function(self, x) return FX[fname](x, self.p, self.training, self.inplace) end,
      function(self) return fmt('p=%g, inplace=%s', self.p, tostring(self.inplace)) end)
    function cls:_check()
      if type(self.p) ~= 'number' or not (self.p >= 0 and self.p <= 1) then
        error(fmt('%s: dropout probability has to be between 0 and 1, but got %s', name, got(self.p)), 4)
      end
      need_bool(self.inplace, name, 'inplace')
    end
    return cls
  end
  nn.AlphaDropout = drop('AlphaDropout', 'alpha_dropout')
  nn.FeatureAlphaDropout = drop('FeatureAlphaDropout', 'feature_alpha_dropout')
  nn.Dropout3d = drop('Dropout3d', 'dropout3d')

  ---------------------------------------------------------------- ChannelShuffle
  nn.ChannelShuffle = simple('ChannelShuffle', { 'groups' }, {},
    function(self, x) return FX.channel_shuffle(x, self.groups) end, function(self) return 'groups=' .. self.groups end)
  function nn.ChannelShuffle:_check() pint(self.groups, 'ChannelShuffle', 'groups', 1) end

  ---------------------------------------------------------------- Bilinear
  nn.Bilinear = Module:extend('Bilinear')
  --- Bilinear(in1_features, in2_features, out_features [, {bias=true, dtype=, device=}]):
  --- weight [out, in1, in2], bias [out], both U(+-1/sqrt(in1_features))
  function nn.Bilinear:__init(in1, in2, out, opts)
    Module.__init(self)
    check_opts(opts, keys(DT, 'bias'), 'Bilinear')
    pint(in1, 'Bilinear', 'in1_features', 1)
    pint(in2, 'Bilinear', 'in2_features', 1)
    pint(out, 'Bilinear', 'out_features', 1)
    need_bool(opts and opts.bias, 'Bilinear', 'bias')
    self.in1_features, self.in2_features, self.out_features = in1, in2, out
    local o = opts_dtype(opts)
    self.weight = nn.Parameter(T.empty(out, in1, in2, o))
    if not (opts and opts.bias == false) then self.bias = nn.Parameter(T.empty(out, o)) end
    self:reset_parameters()
  end
  function nn.Bilinear:reset_parameters()
    local bound = 1 / math.sqrt(self.weight:size(2))
    init.uniform_(self.weight, -bound, bound)
    if self.bias then init.uniform_(self.bias, -bound, bound) end
  end
  function nn.Bilinear:forward(x1, x2)
    need_input(self, x1)
    need_input(self, x2)
    return relabel(self, pcall(FX.bilinear, x1, x2, self.weight, self.bias))
  end
  function nn.Bilinear:extra_repr()
    return fmt('in1_features=%d, in2_features=%d, out_features=%d, bias=%s', self.in1_features, self.in2_features,
      self.out_features, tostring(self.bias ~= nil))
  end

  ---------------------------------------------------------------- LazyLinear
  nn.LazyLinear = Module:extend('LazyLinear')
  --- LazyLinear(out_features [, {bias=true, dtype=, device=}]): a Linear whose in_features
  --- (0 until then) is the last dim of the first input; the parameters are made (and
  --- initialised as Linear's) at the first call, or by load_state_dict, and the module then
  --- becomes an nn.Linear (PyTorch's cls_to_become)
  function nn.LazyLinear:__init(out, opts)
    Module.__init(self)
    check_opts(opts, keys(DT, 'bias'), 'LazyLinear')
    pint(out, 'LazyLinear', 'out_features', 0)
    need_bool(opts and opts.bias, 'LazyLinear', 'bias')
    self.in_features, self.out_features = 0, out
    rawset(self, '_lazy_opts', opts_dtype(opts))
    rawset(self, '_lazy_bias', not (opts and opts.bias == false))
  end
  function nn.LazyLinear:has_uninitialized_params() return true end
  --- initialize_parameters(input): makes weight [out, in] (and bias) from the input's last dim
  function nn.LazyLinear:initialize_parameters(x)
    local inf = type(x) == 'number' and x or x:size(-1)
    local o = rawget(self, '_lazy_opts')
    self.in_features = inf
    self.weight = nn.Parameter(T.empty(self.out_features, inf, o))
    if rawget(self, '_lazy_bias') then self.bias = nn.Parameter(T.empty(self.out_features, o)) end
    rawset(self, '_lazy_opts', nil)
    rawset(self, '_lazy_bias', nil)
    setmetatable(self, nn.Linear)
    self:reset_parameters()
  end
  function nn.LazyLinear:forward(x)
    need_input(self, x)
    if x:dim() == 0 then error(fmt('%s: input must have at least 1 dim, got a 0-d tensor', self:_label()), 2) end
    self:initialize_parameters(x)
    return self:forward(x)
  end
  -- load_state_dict of this module or of one holding it (under prefix): the parameters from the
  -- shape of sd[prefix .. 'weight'] (PyTorch's lazy load hook)
  function nn.LazyLinear:_lazy_load(sd, prefix)
    local w = sd[prefix .. 'weight']
    if is_tensor(w) and w:dim() == 2 then self:initialize_parameters(w:size(2)) end
  end
  function nn.LazyLinear:to(...)
    local a = ...
    local o = rawget(self, '_lazy_opts')
    if type(a) == 'string' and (a:match('^float') or a:match('^bfloat') or a == 'half' or a == 'double') then
      o.dtype = a
    elseif a ~= nil then
      o.device = a
    end
    return self
  end
  function nn.LazyLinear:extra_repr() return fmt('in_features=0, out_features=%d, bias=%s', self.out_features,
    tostring(rawget(self, '_lazy_bias'))) end

  ---------------------------------------------------------------- EmbeddingBag
  nn.EmbeddingBag = Module:extend('EmbeddingBag')
  local EB_KEYS = keys(DT, 'max_norm', 'norm_type', 'scale_grad_by_freq', 'mode', 'sparse', '_weight',
    'include_last_offset', 'padding_idx')
  --- EmbeddingBag(num_embeddings, embedding_dim [, {mode='mean'|'sum'|'max', include_last_offset=false,
  --- padding_idx=, _weight=, dtype=, device=}]): weight [V, D] ~ N(0, 1), the padding row zero
  function nn.EmbeddingBag:__init(V, D, opts)
    Module.__init(self)
    local F = require 'dpl.nn.functional'
    F._embedding_unsupported(opts, 'EmbeddingBag')
    check_opts(opts, EB_KEYS, 'EmbeddingBag')
    opts = opts or {}
    pint(V, 'EmbeddingBag', 'num_embeddings', 1)
    pint(D, 'EmbeddingBag', 'embedding_dim', 1)
    local mode = opts.mode or 'mean'
    if mode ~= 'sum' and mode ~= 'mean' and mode ~= 'max' then
      error(fmt("EmbeddingBag: mode has to be one of sum, mean or max, got '%s'", tostring(mode)), 2)
    end
    need_bool(opts.include_last_offset, 'EmbeddingBag', 'include_last_offset')
    self.num_embeddings, self.embedding_dim, self.mode = V, D, mode
    self.include_last_offset = opts.include_last_offset or false
    if opts.padding_idx ~= nil then self.padding_idx = F._padding_row(opts.padding_idx, V, 'EmbeddingBag') end
    if opts._weight ~= nil then
      if not is_tensor(opts._weight) or opts._weight:dim() ~= 2 or opts._weight:size(1) ~= V or opts._weight:size(2) ~= D then
        error(fmt('EmbeddingBag: Shape of weight does not match num_embeddings and embedding_dim ([%d, %d])', V, D), 2)
      end
      self.weight = nn.Parameter(opts._weight)
    else
      self.weight = nn.Parameter(T.empty(V, D, opts_dtype(opts)))
      self:reset_parameters()
    end
  end
  function nn.EmbeddingBag:reset_parameters()
    init.normal_(self.weight)
    if self.padding_idx then require('dpl.autograd').no_grad(function() self.weight:select(1, self.padding_idx):zero_() end) end
  end
  --- forward(input, offsets=nil, per_sample_weights=nil) -> [B, embedding_dim]
  function nn.EmbeddingBag:forward(x, offsets, psw)
    need_input(self, x)
    return relabel(self, pcall(FX.embedding_bag, x, self.weight, offsets, { mode = self.mode,
      per_sample_weights = psw, include_last_offset = self.include_last_offset, padding_idx = self.padding_idx }))
  end
  function nn.EmbeddingBag:extra_repr()
    local s = fmt("%d, %d, mode='%s'", self.num_embeddings, self.embedding_dim, self.mode)
    if self.padding_idx then s = s .. ', padding_idx=' .. self.padding_idx end
    return s
  end
  --- EmbeddingBag.from_pretrained(embeddings [, freeze=true] [, {freeze=, mode=, include_last_offset=,
  --- padding_idx=}]): a layer on embeddings' storage, frozen unless freeze = false
  function nn.EmbeddingBag.from_pretrained(E, freeze, opts, extra)
    if E == nn.EmbeddingBag then return nn.EmbeddingBag.from_pretrained(freeze, opts, extra) end
    if type(freeze) == 'table' and opts == nil then freeze, opts = nil, freeze end
    local o = {}
    for k, v in pairs(opts or {}) do if k ~= 'freeze' then o[k] = v end end
    if opts and opts.freeze ~= nil then freeze = opts.freeze end
    if not is_tensor(E) or E:dim() ~= 2 then
      error('EmbeddingBag.from_pretrained: Embeddings parameter is expected to be 2-dimensional', 2)
    end
    o._weight = E
    local m = nn.EmbeddingBag(E:size(1), E:size(2), o)
    m.weight.requires_grad = freeze == false
    return m
  end

  ---------------------------------------------------------------- Conv3d / ConvTranspose3d
  local PADDING_MODES = { zeros = true, reflect = true, replicate = true, circular = true }
  local function conv_init(self, name, cin, cout, k, opts, transposed)
    check_opts(opts, transposed and keys(DT, 'stride', 'padding', 'output_padding', 'groups', 'bias', 'dilation',
      'padding_mode') or keys(DT, 'stride', 'padding', 'dilation', 'groups', 'bias', 'padding_mode'), name)
    opts = opts or {}
    pint(cin, name, 'in_channels', 1)
    pint(cout, name, 'out_channels', 1)
    local g = opts.groups or 1
    pint(g, name, 'groups', 1)
    if cin % g ~= 0 then error(fmt('%s: in_channels must be divisible by groups', name), 3) end
    if cout % g ~= 0 then error(fmt('%s: out_channels must be divisible by groups', name), 3) end
    local pm = opts.padding_mode or 'zeros'
    if not PADDING_MODES[pm] then
      error(fmt("%s: padding_mode must be one of 'zeros', 'reflect', 'replicate', 'circular', but got %s", name,
        got(pm)), 3)
    end
    if transposed and pm ~= 'zeros' then
      error(fmt("%s: Only 'zeros' padding mode is supported for %s", name, name), 3)
    end
    need_bool(opts.bias, name, 'bias')
    self.in_channels, self.out_channels, self.groups, self.padding_mode = cin, cout, g, pm
    self.kernel_size = ntuple(k, 3, name, 'kernel_size', 1)
    self.stride = ntuple(opts.stride or 1, 3, name, 'stride', 1)
    self.dilation = ntuple(opts.dilation or 1, 3, name, 'dilation', 1)
    local p = opts.padding or 0
    if type(p) == 'string' and not transposed then
      if p ~= 'same' and p ~= 'valid' then
        error(fmt("%s: Invalid padding string '%s', should be one of {'valid', 'same'}", name, p), 3)
      end
      if p == 'same' and (self.stride[1] ~= 1 or self.stride[2] ~= 1 or self.stride[3] ~= 1) then
        error(fmt("%s: padding='same' is not supported for strided convolutions", name), 3)
      end
      self.padding = p
    else
      self.padding = ntuple(p, 3, name, 'padding', 0)
    end
    if transposed then self.output_padding = ntuple(opts.output_padding or 0, 3, name, 'output_padding', 0) end
    local o = opts_dtype(opts)
    local k3 = self.kernel_size
    if transposed then
      self.weight = nn.Parameter(T.empty(cin, cout / g, k3[1], k3[2], k3[3], o))
    else
      self.weight = nn.Parameter(T.empty(cout, cin / g, k3[1], k3[2], k3[3], o))
    end
    if opts.bias ~= false then self.bias = nn.Parameter(T.empty(cout, o)) end
    self:reset_parameters()
  end
  -- PyTorch's _ConvNd.reset_parameters, as dpl.nn.conv installed it (installed before this file)
  local conv_reset = nn.Conv1d.reset_parameters
  local function conv_repr(self)
    local s = fmt('%d, %d, kernel_size=%s, stride=%s', self.in_channels, self.out_channels, tuple(self.kernel_size),
      tuple(self.stride))
    if type(self.padding) == 'string' then s = s .. ", padding='" .. self.padding .. "'"
    elseif self.padding[1] + self.padding[2] + self.padding[3] > 0 then s = s .. ', padding=' .. tuple(self.padding) end
    if self.dilation[1] * self.dilation[2] * self.dilation[3] ~= 1 then s = s .. ', dilation=' .. tuple(self.dilation) end
    if self.output_padding and self.output_padding[1] + self.output_padding[2] + self.output_padding[3] > 0 then
      s = s .. ', output_padding=' .. tuple(self.output_padding)
    end
    if self.groups ~= 1 then s = s .. ', groups=' .. self.groups end
    if not self.bias then s = s .. ', bias=false' end
    if self.padding_mode ~= 'zeros' then s = s .. ", padding_mode='" .. self.padding_mode .. "'" end
    return s
  end
  local function conv_input(self, x)
    need_input(self, x)
    local nd = x:dim()
    if (nd ~= 4 and nd ~= 5) or x:size(nd - 3) ~= self.in_channels then
      error(fmt('%s(%d, %d, kernel_size=%s): input has shape %s, expected [N, %d, D, H, W] or [%d, D, H, W] (weight %s)',
        self:_label(), self.in_channels, self.out_channels, tuple(self.kernel_size), shape_str(x), self.in_channels,
        self.in_channels, shape_str(self.weight)), 3)
    end
    if not x:is_floating_point() or x.dtype ~= self.weight.dtype then
      error(fmt("%s: input has dtype %s, expected %s (the weight's)", self:_label(), x.dtype, self.weight.dtype), 3)
    end
  end

  nn.Conv3d = Module:extend('Conv3d')
  --- Conv3d(in_channels, out_channels, kernel_size [, {stride=1, padding=0 | 'same' | 'valid', dilation=1,
  --- groups=1, bias=true, padding_mode='zeros', dtype=, device=}]): weight [out, in/groups, kD, kH, kW]
  function nn.Conv3d:__init(cin, cout, k, opts)
    Module.__init(self)
    conv_init(self, 'Conv3d', cin, cout, k, opts, false)
  end
  nn.Conv3d.reset_parameters = conv_reset
  nn.Conv3d.extra_repr = conv_repr
  function nn.Conv3d:forward(x)
    conv_input(self, x)
    if self.padding_mode ~= 'zeros' then
      return relabel(self, pcall(function()
        local unb = x:dim() == 4
        local pads = {}
        for j = 3, 1, -1 do
          local l, r
          if self.padding == 'same' then
            local total = self.dilation[j] * (self.kernel_size[j] - 1)
            l, r = floor(total / 2), total - floor(total / 2)
          elseif self.padding == 'valid' then l, r = 0, 0
          else l, r = self.padding[j], self.padding[j] end
          pads[#pads + 1], pads[#pads + 2] = l, r
        end
        local y = F3.conv3d(require('dpl.nn.functional').pad(unb and x:unsqueeze(1) or x, pads, self.padding_mode),
          self.weight, self.bias, { stride = self.stride, padding = 0, dilation = self.dilation, groups = self.groups })
        return unb and y:squeeze(1) or y
      end))
    end
    return relabel(self, pcall(F3.conv3d, x, self.weight, self.bias, { stride = self.stride, padding = self.padding,
      dilation = self.dilation, groups = self.groups }))
  end

  nn.ConvTranspose3d = Module:extend('ConvTranspose3d')
  --- ConvTranspose3d(in_channels, out_channels, kernel_size [, {stride=1, padding=0, output_padding=0,
  --- groups=1, bias=true, dilation=1, padding_mode='zeros', dtype=, device=}]): weight [in, out/groups, k...]
  function nn.ConvTranspose3d:__init(cin, cout, k, opts)
    Module.__init(self)
    conv_init(self, 'ConvTranspose3d', cin, cout, k, opts, true)
  end
  nn.ConvTranspose3d.reset_parameters = conv_reset
  nn.ConvTranspose3d.extra_repr = conv_repr
  --- forward(x [, output_size]): output_size (the spatial sizes, or with N and C) picks the output_padding
  function nn.ConvTranspose3d:forward(x, output_size)
    conv_input(self, x)
    local op = self.output_padding
    if output_size ~= nil then
      if type(output_size) ~= 'table' then error(fmt('%s: output_size must be a list', self:_label()), 2) end
      local n = #output_size
      if n ~= 3 and n ~= x:dim() then
        error(fmt('%s: output_size must have 3 or %d elements (got %d)', self:_label(), x:dim(), n), 2)
      end
      op = {}
      for j = 1, 3 do
        local want = output_size[n - 3 + j]
        local size = (x:size(x:dim() - 3 + j) - 1) * self.stride[j] - 2 * self.padding[j]
          + self.dilation[j] * (self.kernel_size[j] - 1) + 1
        local e = want - size
        if e < 0 or e >= math.max(self.stride[j], self.dilation[j]) then
          error(fmt('%s: requested an output size of %s, but valid sizes range from %d to %d (for an input of %s)',
            self:_label(), tuple(output_size), size, size + math.max(self.stride[j], self.dilation[j]) - 1,
            shape_str(x)), 2)
        end
        op[j] = e
      end
    end
    return relabel(self, pcall(F3.conv_transpose3d, x, self.weight, self.bias, { stride = self.stride,
      padding = self.padding, output_padding = op, groups = self.groups, dilation = self.dilation }))
  end

  ---------------------------------------------------------------- 3-d pools
  nn.MaxPool3d = Module:extend('MaxPool3d')
  --- MaxPool3d(kernel_size [, {stride=kernel_size, padding=0, dilation=1, return_indices=false,
  --- ceil_mode=false}]); with return_indices, forward returns values and 1-based indices
  function nn.MaxPool3d:__init(k, opts)
    Module.__init(self)
    check_opts(opts, keys('stride', 'padding', 'dilation', 'return_indices', 'ceil_mode'), 'MaxPool3d')
    opts = opts or {}
    self.kernel_size = ntuple(k, 3, 'MaxPool3d', 'kernel_size', 1)
    self.stride = opts.stride ~= nil and ntuple(opts.stride, 3, 'MaxPool3d', 'stride', 1) or self.kernel_size
    self.padding = ntuple(opts.padding or 0, 3, 'MaxPool3d', 'padding', 0)
    self.dilation = ntuple(opts.dilation or 1, 3, 'MaxPool3d', 'dilation', 1)
    need_bool(opts.return_indices, 'MaxPool3d', 'return_indices')
    need_bool(opts.ceil_mode, 'MaxPool3d', 'ceil_mode')
    self.return_indices, self.ceil_mode = opts.return_indices or false, opts.ceil_mode or false
  end
  function nn.MaxPool3d:forward(x)
    need_input(self, x)
    return relabel(self, pcall(F3.max_pool3d, x, self.kernel_size, { stride = self.stride, padding = self.padding,
      dilation = self.dilation, ceil_mode = self.ceil_mode, return_indices = self.return_indices }))
  end
  function nn.MaxPool3d:extra_repr()
    return fmt('kernel_size=%s, stride=%s, padding=%s, dilation=%s, ceil_mode=%s', tuple(self.kernel_size),
      tuple(self.stride), tuple(self.padding), tuple(self.dilation), tostring(self.ceil_mode))
  end

  nn.AvgPool3d = Module:extend('AvgPool3d')
  --- AvgPool3d(kernel_size [, {stride=kernel_size, padding=0, ceil_mode=false, count_include_pad=true,
  --- divisor_override=}])
  function nn.AvgPool3d:__init(k, opts)
    Module.__init(self)
    check_opts(opts, keys('stride', 'padding', 'ceil_mode', 'count_include_pad', 'divisor_override'), 'AvgPool3d')
    opts = opts or {}
    self.kernel_size = ntuple(k, 3, 'AvgPool3d', 'kernel_size', 1)
    self.stride = opts.stride ~= nil and ntuple(opts.stride, 3, 'AvgPool3d', 'stride', 1) or self.kernel_size
    self.padding = ntuple(opts.padding or 0, 3, 'AvgPool3d', 'padding', 0)
    need_bool(opts.ceil_mode, 'AvgPool3d', 'ceil_mode')
    need_bool(opts.count_include_pad, 'AvgPool3d', 'count_include_pad')
    self.ceil_mode, self.count_include_pad = opts.ceil_mode or false, opts.count_include_pad ~= false
    self.divisor_override = opts.divisor_override
  end
  function nn.AvgPool3d:forward(x)
    need_input(self, x)
    return relabel(self, pcall(F3.avg_pool3d, x, self.kernel_size, { stride = self.stride, padding = self.padding,
      ceil_mode = self.ceil_mode, count_include_pad = self.count_include_pad, divisor_override = self.divisor_override }))
  end
  function nn.AvgPool3d:extra_repr()
    return fmt('kernel_size=%s, stride=%s, padding=%s', tuple(self.kernel_size), tuple(self.stride), tuple(self.padding))
  end

  local function adaptive3(name, fname, has_ri)
    local cls = Module:extend(name)
    function cls:__init(size, ri)
      Module.__init(self)
      if has_ri and type(ri) == 'table' then check_opts(ri, keys('return_indices'), name) ri = ri.return_indices end
      if has_ri then need_bool(ri, name, 'return_indices') self.return_indices = ri or false
      elseif ri ~= nil then error(fmt('%s: takes one argument, output_size', name), 2) end
      if size == nil then error(fmt('%s: output_size is required', name), 2) end
      self.output_size = size
    end
    function cls:forward(x)
      need_input(self, x)
      if has_ri then return relabel(self, pcall(F3[fname], x, self.output_size, self.return_indices)) end
      return relabel(self, pcall(F3[fname], x, self.output_size))
    end
    function cls:extra_repr()
      local s = self.output_size
      return 'output_size=' .. (type(s) == 'table' and tuple({ tostring(s[1]), tostring(s[2]), tostring(s[3]) })
        or tostring(s))
    end
    return cls
  end
  nn.AdaptiveAvgPool3d = adaptive3('AdaptiveAvgPool3d', 'adaptive_avg_pool3d', false)
  nn.AdaptiveMaxPool3d = adaptive3('AdaptiveMaxPool3d', 'adaptive_max_pool3d', true)

  ---------------------------------------------------------------- MaxUnpool
  local function unpool(name, nsp)
    local cls = Module:extend(name)
    --- (kernel_size [, {stride=kernel_size, padding=0}])
    function cls:__init(k, opts)
      Module.__init(self)
      if type(opts) == 'number' then opts = { stride = opts } end
      check_opts(opts, keys('stride', 'padding'), name)
      opts = opts or {}
      self.kernel_size = ntuple(k, nsp, name, 'kernel_size', 1)
      self.stride = opts.stride ~= nil and ntuple(opts.stride, nsp, name, 'stride', 1) or self.kernel_size
      self.padding = ntuple(opts.padding or 0, nsp, name, 'padding', 0)
    end
    --- forward(x, indices [, output_size])
    function cls:forward(x, indices, output_size)
      need_input(self, x)
      return relabel(self, pcall(F3['max_unpool' .. nsp .. 'd'], x, indices, self.kernel_size, { stride = self.stride,
        padding = self.padding, output_size = output_size }))
    end
    function cls:extra_repr()
      return fmt('kernel_size=%s, stride=%s, padding=%s', tuple(self.kernel_size), tuple(self.stride), tuple(self.padding))
    end
    return cls
  end
  nn.MaxUnpool1d = unpool('MaxUnpool1d', 1)
  nn.MaxUnpool2d = unpool('MaxUnpool2d', 2)
  nn.MaxUnpool3d = unpool('MaxUnpool3d', 3)

  ---------------------------------------------------------------- LPPool
  local function lppool(name, nsp)
    local cls = Module:extend(name)
    --- (norm_type, kernel_size [, stride=kernel_size [, ceil_mode=false]]) or (norm_type, kernel_size,
    --- {stride=, ceil_mode=})
    function cls:__init(norm_type, k, stride, ceil_mode)
      Module.__init(self)
      if type(stride) == 'table' and #stride == 0 then
        check_opts(stride, keys('stride', 'ceil_mode'), name)
        stride, ceil_mode = stride.stride, stride.ceil_mode
      end
      if type(norm_type) ~= 'number' or norm_type == 0 then
        error(fmt('%s: norm_type must be a non-zero number, got %s', name, got(norm_type)), 2)
      end
      need_bool(ceil_mode, name, 'ceil_mode')
      self.norm_type, self.kernel_size = norm_type, ntuple(k, nsp, name, 'kernel_size', 1)
      self.stride = stride ~= nil and ntuple(stride, nsp, name, 'stride', 1) or nil
      self.ceil_mode = ceil_mode or false
    end
    function cls:forward(x)
      need_input(self, x)
      return relabel(self, pcall(F3['lp_pool' .. nsp .. 'd'], x, self.norm_type, self.kernel_size,
        { stride = self.stride, ceil_mode = self.ceil_mode }))
    end
    function cls:extra_repr()
      return fmt('norm_type=%g, kernel_size=%s, stride=%s, ceil_mode=%s', self.norm_type, tuple(self.kernel_size),
        self.stride and tuple(self.stride) or 'None', tostring(self.ceil_mode))
    end
    return cls
  end
  nn.LPPool1d = lppool('LPPool1d', 1)
  nn.LPPool2d = lppool('LPPool2d', 2)

  ---------------------------------------------------------------- FractionalMaxPool2d
  nn.FractionalMaxPool2d = Module:extend('FractionalMaxPool2d')
  --- FractionalMaxPool2d(kernel_size [, {output_size=, output_ratio=, return_indices=false,
  --- _random_samples=}]): windows at pseudo-random positions (PyTorch's sequence), the samples
  --- drawn from dpl's generator at each call unless _random_samples [N, C, 2] is given
  function nn.FractionalMaxPool2d:__init(k, opts)
    Module.__init(self)
    local name = 'FractionalMaxPool2d'
    check_opts(opts, keys('output_size', 'output_ratio', 'return_indices', '_random_samples'), name)
    opts = opts or {}
    self.kernel_size = ntuple(k, 2, name, 'kernel_size', 1)
    need_bool(opts.return_indices, name, 'return_indices')
    self.return_indices = opts.return_indices or false
    if opts.output_size == nil and opts.output_ratio == nil then
      error(fmt('%s: FractionalMaxPool2d requires specifying either an output size, or a pooling ratio', name), 2)
    end
    if opts.output_size ~= nil and opts.output_ratio ~= nil then
      error(fmt('%s: only one of output_size and output_ratio may be specified', name), 2)
    end
    if opts.output_ratio ~= nil then
      local r = opts.output_ratio
      r = type(r) == 'table' and r or { r, r }
      for j = 1, 2 do
        if type(r[j]) ~= 'number' or not (r[j] > 0 and r[j] < 1) then
          error(fmt('%s: output_ratio must be between 0 and 1 (got %s)', name, got(r[j])), 2)
        end
      end
      self.output_ratio = r
    else
      self.output_size = ntuple(opts.output_size, 2, name, 'output_size', 1)
    end
    if opts._random_samples ~= nil then self:register_buffer('_random_samples', opts._random_samples) end
  end
  function nn.FractionalMaxPool2d:forward(x)
    need_input(self, x)
    return relabel(self, pcall(F3.fractional_max_pool2d, x, self.kernel_size, { output_size = self.output_size,
      output_ratio = self.output_ratio, return_indices = self.return_indices,
      _random_samples = rawget(self, '_random_samples') }))
  end

  ---------------------------------------------------------------- TripletMarginWithDistanceLoss
  nn.TripletMarginWithDistanceLoss = Module:extend('TripletMarginWithDistanceLoss')
  --- TripletMarginWithDistanceLoss([{distance_function=pairwise_distance, margin=1, swap=false,
  --- reduction='mean'}]); forward(anchor, positive, negative)
  function nn.TripletMarginWithDistanceLoss:__init(opts)
    Module.__init(self)
    local name = 'TripletMarginWithDistanceLoss'
    check_opts(opts, keys('distance_function', 'margin', 'swap', 'reduction'), name)
    opts = opts or {}
    local m = opts.margin or 1.0
    if type(m) ~= 'number' or not (m > 0) then
      error(fmt('%s: TripletMarginWithDistanceLoss: expected margin to be greater than 0, got %s instead', name,
        got(m)), 2)
    end
    local red = opts.reduction or 'mean'
    if red ~= 'mean' and red ~= 'sum' and red ~= 'none' then
      error(fmt('%s: %s is not a valid value for reduction', name, tostring(red)), 2)
    end
    need_bool(opts.swap, name, 'swap')
    self.distance_function, self.margin, self.swap, self.reduction = opts.distance_function, m, opts.swap or false, red
  end
  function nn.TripletMarginWithDistanceLoss:forward(a, p, n)
    return relabel(self, pcall(FX.triplet_margin_with_distance_loss, a, p, n, { distance_function =
      self.distance_function, margin = self.margin, swap = self.swap, reduction = self.reduction }))
  end
  function nn.TripletMarginWithDistanceLoss:extra_repr()
    return fmt("margin=%g, swap=%s, reduction='%s'", self.margin, tostring(self.swap), self.reduction)
  end
end
