-- dpl.nn.conv: the conv group of nn modules (PyTorch 1.13's names, arguments, parameters,
-- initialisation and state dict keys): Conv1d, ConvTranspose1d, ConvTranspose2d, MaxPool1d,
-- AvgPool1d, AdaptiveAvgPool1d/2d, AdaptiveMaxPool1d/2d, Dropout1d, Dropout2d, the padding
-- layers (ZeroPad2d, ConstantPad1d/2d/3d, ReflectionPad1d/2d/3d, ReplicationPad1d/2d/3d),
-- Upsample (and UpsamplingNearest2d, UpsamplingBilinear2d), PixelShuffle, PixelUnshuffle,
-- Unfold, Fold. init.lua installs them (require('dpl.nn.conv')(nn)); the functions they run
-- are dpl.nn.functional_conv's. Options come as one table, as nn.Conv2d's
-- (nn.Conv1d(3, 8, 5, {stride = 2, padding = 'same'})), checked by dpl.options.
local T = require 'dpl.tensor'
local Module = require 'dpl.nn.module'
local init = require 'dpl.nn.init_fns'
local options = require 'dpl.options'
local errors = require 'dpl.errors'
local amp = require 'dpl.amp'
local CF = require 'dpl.nn.functional_conv'

local fmt = string.format
local type, tostring, floor, unpack = type, tostring, math.floor, unpack
local lua_error = error
local error = errors.raise -- string messages become ValueError objects
local is_tensor = T.is_tensor
local check_opts, keys = options.check, options.keys
local shape_str, int1, int2, need_bool = CF.shape_str, CF.int1, CF.int2, CF.need_bool

local DT = keys('dtype', 'device')
local CONV1D_KEYS = keys(DT, 'stride', 'padding', 'dilation', 'groups', 'bias', 'padding_mode')
local CONVT_KEYS = keys(DT, 'stride', 'padding', 'output_padding', 'groups', 'bias', 'dilation', 'padding_mode')
local MAXPOOL1D_KEYS = keys('stride', 'padding', 'dilation', 'return_indices', 'ceil_mode')
local AVGPOOL1D_KEYS = keys('stride', 'padding', 'ceil_mode', 'count_include_pad')
local UPSAMPLE_KEYS = keys('size', 'scale_factor', 'mode', 'align_corners', 'recompute_scale_factor')
local UP2_KEYS = keys('size', 'scale_factor')
local FOLD_KEYS = keys('dilation', 'padding', 'stride')
local PADDING_MODES = { zeros = true, reflect = true, replicate = true, circular = true }

local function opts_dtype(opts) return { dtype = opts and opts.dtype or 'float32', device = opts and opts.device } end
local function got(v) return type(v) == 'cdata' and (is_tensor(v) and 'a tensor' or 'cdata') or tostring(v) end
local function tuple(t) return '(' .. table.concat(t, ', ') .. (#t == 1 and ',)' or ')') end

-- the error of a call inside forward, its op name replaced by the layer's label
local function relabel(self, ok, ...)
  if ok then return ... end
  local e = ...
  if type(e) == 'table' and type(e.message) == 'string' then
    local msg = e.message:gsub('^[%w_]+: ', '')
    lua_error(setmetatable({ message = self:_label() .. ': ' .. msg }, getmetatable(e)), 0)
  end
  lua_error(e, 0)
end

local function need_input(self, x, dims, what)
  if not is_tensor(x) then
    error(fmt('%s: expected a tensor as input, got %s', self:_label(), type(x)), 3)
  end
  if dims and not dims[x:dim()] then
    error(fmt('%s: input has shape %s, expected %s', self:_label(), shape_str(x), what), 3)
  end
end
local function need_float(self, x)
  if not x:is_floating_point() then
    error(fmt('%s: expected a floating-point input, got %s (shape %s)', self:_label(), x.dtype, shape_str(x)), 3)
  end
end

return function(nn)
  ---------------------------------------------------------------- Conv1d
  local function conv_common(self, name, cin, cout, k, opts, transposed)
    check_opts(opts, transposed and CONVT_KEYS or CONV1D_KEYS, name)
    opts = opts or {}
    local function pint(v, what, lo)
      if type(v) ~= 'number' or v ~= floor(v) or v < lo or v >= 2 ^ 53 then -- (inf: %d gave -2^63)
        error(fmt('%s: %s must be an integer >= %d, got %s', name, what, lo, got(v)), 4)
      end
    end
    pint(cin, 'in_channels', 1)
    pint(cout, 'out_channels', 1)
    local groups = opts.groups or 1
    if type(groups) ~= 'number' or groups ~= floor(groups) or groups < 1 or groups >= 2 ^ 53 then
      error(fmt('%s: groups must be a positive integer, got %s', name, got(groups)), 4)
    end
    if cin % groups ~= 0 then error(fmt('%s: in_channels (%d) must be divisible by groups (%d)', name, cin, groups), 4) end
    if cout % groups ~= 0 then error(fmt('%s: out_channels (%d) must be divisible by groups (%d)', name, cout, groups), 4) end
    local pm = opts.padding_mode or 'zeros'
    if not PADDING_MODES[pm] then
      error(fmt("%s: padding_mode must be one of 'zeros', 'reflect', 'replicate', 'circular', but got %s", name,
        got(pm)), 4)
    end
    if transposed and pm ~= 'zeros' then
      error(fmt("%s: only 'zeros' padding mode is supported for %s, got '%s'", name, name, pm), 4)
    end
    if opts.bias ~= nil and type(opts.bias) ~= 'boolean' then
      error(fmt('%s: bias must be true or false, got %s', name, got(opts.bias)), 4)
    end
    self.in_channels, self.out_channels, self.groups, self.padding_mode = cin, cout, groups, pm
    return opts
  end

  nn.Conv1d = Module:extend('Conv1d')
  --- Conv1d(in_channels, out_channels, kernel_size [, {stride=1, padding=0 | 'same' | 'valid',
  --- dilation=1, groups=1, bias=true, padding_mode='zeros', dtype=, device=}])
  function nn.Conv1d:__init(cin, cout, k, opts)
    Module.__init(self)
    opts = conv_common(self, 'Conv1d', cin, cout, k, opts, false)
    self.kernel_size = { int1(k, 'Conv1d', 'kernel_size', 1) }
    self.stride = { int1(opts.stride or 1, 'Conv1d', 'stride', 1) }
    self.dilation = { int1(opts.dilation or 1, 'Conv1d', 'dilation', 1) }
    local p = opts.padding or 0
    if type(p) == 'string' then
      if p ~= 'same' and p ~= 'valid' then
        error(fmt("Conv1d: invalid padding string '%s', should be one of 'valid', 'same'", p), 2)
      end
      if p == 'same' and self.stride[1] ~= 1 then
        error("Conv1d: padding='same' is not supported for strided convolutions", 2)
      end
      self.padding = p
    else
      self.padding = { int1(p, 'Conv1d', 'padding', 0) }
    end
    -- F.pad's list for the padding modes other than 'zeros'
    if self.padding == 'same' then
      local l, r = CF.same_pad(self.kernel_size[1], self.dilation[1])
      self._reversed_padding_repeated_twice = { l, r }
    elseif self.padding == 'valid' then
      self._reversed_padding_repeated_twice = { 0, 0 }
    else
      self._reversed_padding_repeated_twice = { self.padding[1], self.padding[1] }
    end
    local o = opts_dtype(opts)
    self.weight = nn.Parameter(T.empty(cout, cin / self.groups, self.kernel_size[1], o))
    if opts.bias ~= false then self.bias = nn.Parameter(T.empty(cout, o)) end
    self:reset_parameters()
  end
  -- PyTorch's _ConvNd.reset_parameters: kaiming_uniform_(a = sqrt(5)), bias U(+-1/sqrt(fan_in))
  local function conv_reset(self)
    init.kaiming_uniform_(self.weight, math.sqrt(5))
    if self.bias then
      local fan_in = init.calculate_fan_in_and_fan_out(self.weight)
      if fan_in ~= 0 then
        local bound = 1 / math.sqrt(fan_in)
        init.uniform_(self.bias, -bound, bound)
      end
    end
  end
  nn.Conv1d.reset_parameters = conv_reset
  local function conv_check(self, x, nd)
    local ok = is_tensor(x) and (x:dim() == nd + 1 or x:dim() == nd + 2)
    local cdim = ok and x:dim() - nd or 0
    if not ok or x:size(cdim) ~= self.in_channels then
      need_input(self, x)
      local k = table.concat(self.kernel_size, 'x')
      local sp = nd == 1 and 'L' or 'H, W'
      error(fmt('%s(%d, %d, kernel_size=%s): input has shape %s, expected [N, %d, %s] or [%d, %s] (weight %s)',
        self:_label(), self.in_channels, self.out_channels, k, shape_str(x), self.in_channels, sp, self.in_channels,
        sp, shape_str(self.weight)), 3)
    end
    need_float(self, x)
    if not amp.dtype and x.dtype ~= self.weight.dtype then
      error(fmt('%s: input has dtype %s, expected %s (the weight\'s; convert with :to(\'%s\') or the module with '
        .. ':to(\'%s\'))', self:_label(), x.dtype, self.weight.dtype, self.weight.dtype, x.dtype), 3)
    end
  end
  function nn.Conv1d:forward(x)
    conv_check(self, x, 1)
    if self.padding_mode ~= 'zeros' then -- F.pad first (an unbatched input too: circular needs a batch dim)
      return relabel(self, pcall(function()
        local unb = x:dim() == 2
        local y = CF.conv1d(CF.pad(unb and x:unsqueeze(1) or x, self._reversed_padding_repeated_twice,
          self.padding_mode), self.weight, self.bias,
          { stride = self.stride[1], padding = 0, dilation = self.dilation[1], groups = self.groups })
        return unb and y:squeeze(1) or y
      end))
    end
    return relabel(self, pcall(CF.conv1d, x, self.weight, self.bias, { stride = self.stride[1],
      padding = type(self.padding) == 'string' and self.padding or self.padding[1], dilation = self.dilation[1],
      groups = self.groups }))
  end
  local function conv_repr(self, transposed)
    local s = fmt('%d, %d, kernel_size=%s, stride=%s', self.in_channels, self.out_channels, tuple(self.kernel_size),
      tuple(self.stride))
    local function nz(t) for _, v in ipairs(t) do if v ~= 0 then return true end end return false end
    local function n1(t) for _, v in ipairs(t) do if v ~= 1 then return true end end return false end
    if type(self.padding) == 'string' then s = s .. ", padding='" .. self.padding .. "'"
    elseif nz(self.padding) then s = s .. ', padding=' .. tuple(self.padding) end
    if n1(self.dilation) then s = s .. ', dilation=' .. tuple(self.dilation) end
    if transposed and nz(self.output_padding) then s = s .. ', output_padding=' .. tuple(self.output_padding) end
    if self.groups ~= 1 then s = s .. ', groups=' .. self.groups end
    if not self.bias then s = s .. ', bias=false' end
    if self.padding_mode ~= 'zeros' then s = s .. ", padding_mode='" .. self.padding_mode .. "'" end
    return s
  end
  function nn.Conv1d:extra_repr() return conv_repr(self, false) end

  ---------------------------------------------------------------- ConvTranspose1d/2d
  local function conv_transpose(name, nd)
    local cls = Module:extend(name)
    local fname = nd == 1 and 'conv_transpose1d' or 'conv_transpose2d'
    --- (in_channels, out_channels, kernel_size [, {stride=1, padding=0, output_padding=0, groups=1,
    --- bias=true, dilation=1, padding_mode='zeros', dtype=, device=}])
    function cls:__init(cin, cout, k, opts)
      Module.__init(self)
      opts = conv_common(self, name, cin, cout, k, opts, true)
      local function v(x, what, lo)
        if type(x) == 'string' then error(fmt('%s: %s must be an integer or a list of integers, got \'%s\'', name, what,
          x), 4) end
        if nd == 1 then return { int1(x, name, what, lo) } end
        return { int2(x, name, what, lo) }
      end
      self.kernel_size = v(k, 'kernel_size', 1)
      self.stride = v(opts.stride or 1, 'stride', 1)
      self.padding = v(opts.padding or 0, 'padding', 0)
      self.output_padding = v(opts.output_padding or 0, 'output_padding', 0)
      self.dilation = v(opts.dilation or 1, 'dilation', 1)
      for i = 1, nd do
        if self.output_padding[i] >= self.stride[i] and self.output_padding[i] >= self.dilation[i] then
          error(fmt('%s: output padding must be smaller than either stride or dilation, got output_padding %s, '
            .. 'stride %s, dilation %s', name, tuple(self.output_padding), tuple(self.stride), tuple(self.dilation)), 2)
        end
      end
      local o = opts_dtype(opts)
      local wshape = { cin, cout / self.groups }
      for i = 1, nd do wshape[#wshape + 1] = self.kernel_size[i] end
      self.weight = nn.Parameter(T.empty(wshape, o))
      if opts.bias ~= false then self.bias = nn.Parameter(T.empty(cout, o)) end
      self:reset_parameters()
    end
    cls.reset_parameters = conv_reset
    --- forward(x [, output_size]): output_size (a list of nd or nd + 2 sizes, or a tensor's
    --- size) picks the output_padding that gives it, as PyTorch's
    function cls:forward(x, output_size)
      conv_check(self, x, nd)
      local unb = x:dim() == nd + 1
      local op = self.output_padding
      if output_size ~= nil then
        local g = CF.ct_geom({ stride = nd == 1 and self.stride[1] or self.stride,
          padding = nd == 1 and self.padding[1] or self.padding, dilation = nd == 1 and self.dilation[1] or self.dilation,
          groups = self.groups }, name, nd)
        local sizes = {}
        for i = 1, nd do sizes[i] = x:size(x:dim() - nd + i) end
        if is_tensor(output_size) then output_size = output_size:size() end
        if type(output_size) == 'table' and unb and #output_size == nd + 1 then
          output_size = { unpack(output_size, 2) }
        end
        op = relabel(self, pcall(CF.output_padding_for, name, output_size, sizes, self.kernel_size, g, nd))
      end
      local o = { stride = self.stride, padding = self.padding, output_padding = op, dilation = self.dilation,
        groups = self.groups }
      if nd == 1 then
        o.stride, o.padding, o.output_padding, o.dilation = self.stride[1], self.padding[1], op[1], self.dilation[1]
      end
      return relabel(self, pcall(CF[fname], x, self.weight, self.bias, o))
    end
    function cls:extra_repr() return conv_repr(self, true) end
    return cls
  end
  nn.ConvTranspose1d = conv_transpose('ConvTranspose1d', 1)
  nn.ConvTranspose2d = conv_transpose('ConvTranspose2d', 2)

  ---------------------------------------------------------------- 1-d pooling
  nn.MaxPool1d = Module:extend('MaxPool1d')
  --- MaxPool1d(kernel_size [, {stride=kernel_size, padding=0, dilation=1, return_indices=false,
  --- ceil_mode=false}]); with return_indices, forward returns values and 1-based indices
  function nn.MaxPool1d:__init(k, opts)
    Module.__init(self)
    check_opts(opts, MAXPOOL1D_KEYS, 'MaxPool1d')
    opts = opts or {}
    self.kernel_size = int1(k, 'MaxPool1d', 'kernel_size', 1)
    self.stride = opts.stride ~= nil and int1(opts.stride, 'MaxPool1d', 'stride', 1) or self.kernel_size
    self.padding = int1(opts.padding or 0, 'MaxPool1d', 'padding', 0)
    self.dilation = int1(opts.dilation or 1, 'MaxPool1d', 'dilation', 1)
    need_bool(opts.return_indices, 'MaxPool1d', 'return_indices')
    need_bool(opts.ceil_mode, 'MaxPool1d', 'ceil_mode')
    if 2 * self.padding > self.kernel_size then
      error(fmt('MaxPool1d: padding should be at most half of kernel size, but got padding=%d and kernel_size=%d',
        self.padding, self.kernel_size), 2)
    end
    self.return_indices, self.ceil_mode = opts.return_indices or false, opts.ceil_mode or false
  end
  function nn.MaxPool1d:forward(x)
    need_input(self, x, { [2] = true, [3] = true }, '[N, C, L] or [C, L]')
    need_float(self, x)
    return relabel(self, pcall(CF.max_pool1d, x, self.kernel_size, { stride = self.stride, padding = self.padding,
      dilation = self.dilation, ceil_mode = self.ceil_mode, return_indices = self.return_indices }))
  end
  function nn.MaxPool1d:extra_repr()
    return fmt('kernel_size=%d, stride=%d, padding=%d, dilation=%d, ceil_mode=%s', self.kernel_size, self.stride,
      self.padding, self.dilation, tostring(self.ceil_mode))
  end

  nn.AvgPool1d = Module:extend('AvgPool1d')
  --- AvgPool1d(kernel_size [, {stride=kernel_size, padding=0, ceil_mode=false, count_include_pad=true}])
  function nn.AvgPool1d:__init(k, opts)
    Module.__init(self)
    check_opts(opts, AVGPOOL1D_KEYS, 'AvgPool1d')
    opts = opts or {}
    self.kernel_size = { int1(k, 'AvgPool1d', 'kernel_size', 1) }
    self.stride = { opts.stride ~= nil and int1(opts.stride, 'AvgPool1d', 'stride', 1) or self.kernel_size[1] }
    self.padding = { int1(opts.padding or 0, 'AvgPool1d', 'padding', 0) }
    need_bool(opts.ceil_mode, 'AvgPool1d', 'ceil_mode')
    need_bool(opts.count_include_pad, 'AvgPool1d', 'count_include_pad')
    if 2 * self.padding[1] > self.kernel_size[1] then
      error(fmt('AvgPool1d: padding should be at most half of kernel size, but got padding=%d and kernel_size=%d',
        self.padding[1], self.kernel_size[1]), 2)
    end
    self.ceil_mode = opts.ceil_mode or false
    self.count_include_pad = opts.count_include_pad ~= false
  end
  function nn.AvgPool1d:forward(x)
    need_input(self, x, { [2] = true, [3] = true }, '[N, C, L] or [C, L]')
    need_float(self, x)
    return relabel(self, pcall(CF.avg_pool1d, x, self.kernel_size[1], { stride = self.stride[1],
      padding = self.padding[1], ceil_mode = self.ceil_mode, count_include_pad = self.count_include_pad }))
  end
  function nn.AvgPool1d:extra_repr()
    return fmt('kernel_size=%s, stride=%s, padding=%s', tuple(self.kernel_size), tuple(self.stride),
      tuple(self.padding))
  end

  ---------------------------------------------------------------- adaptive pooling
  local function check_out_size(name, v, n)
    local function bad()
      error(fmt('%s: output_size must be an integer >= 0 or a list of %d (nil or false keeps the input size), got %s',
        name, n, type(v) == 'table' and ('{' .. table.concat((function()
          local r = {}
          for i = 1, n do r[i] = tostring(v[i]) end
          return r
        end)(), ', ') .. '}') or got(v)), 4)
    end
    if type(v) == 'number' then
      if v ~= floor(v) or v < 0 then bad() end
      return v
    end
    if type(v) ~= 'table' or is_tensor(v) then bad() end
    for k in pairs(v) do if type(k) ~= 'number' or k < 1 or k > n or k ~= floor(k) then bad() end end
    local r = {}
    for i = 1, n do
      local e = v[i]
      if e ~= nil and e ~= false and (type(e) ~= 'number' or e ~= floor(e) or e < 0) then bad() end
      r[i] = e or false
    end
    return r
  end
  local function adaptive(name, fname, nsp, is_max)
    local cls = Module:extend(name)
    --- (output_size [, return_indices | {return_indices=false}] (max only))
    function cls:__init(size, ri)
      Module.__init(self)
      self.output_size = check_out_size(name, size, nsp)
      if is_max then
        if type(ri) == 'table' then
          check_opts(ri, keys('return_indices'), name)
          ri = ri.return_indices
        end
        need_bool(ri, name, 'return_indices')
        self.return_indices = ri or false
      elseif ri ~= nil then
        error(fmt('%s: takes only output_size, got a second argument (%s)', name, got(ri)), 2)
      end
    end
    local dims = nsp == 1 and { [2] = true, [3] = true } or { [3] = true, [4] = true }
    local what = nsp == 1 and '[N, C, L] or [C, L]' or '[N, C, H, W] or [C, H, W]'
    function cls:forward(x)
      need_input(self, x, dims, what)
      need_float(self, x)
      if is_max then return relabel(self, pcall(CF[fname], x, self.output_size, self.return_indices)) end
      return relabel(self, pcall(CF[fname], x, self.output_size))
    end
    function cls:extra_repr()
      local s = self.output_size
      if type(s) == 'table' then
        local r = {}
        for i = 1, nsp do r[i] = s[i] == false and 'None' or tostring(s[i]) end
        s = '(' .. table.concat(r, ', ') .. ')'
      end
      return 'output_size=' .. tostring(s)
    end
    return cls
  end
  nn.AdaptiveAvgPool1d = adaptive('AdaptiveAvgPool1d', 'adaptive_avg_pool1d', 1, false)
  nn.AdaptiveAvgPool2d = adaptive('AdaptiveAvgPool2d', 'adaptive_avg_pool2d', 2, false)
  nn.AdaptiveMaxPool1d = adaptive('AdaptiveMaxPool1d', 'adaptive_max_pool1d', 1, true)
  nn.AdaptiveMaxPool2d = adaptive('AdaptiveMaxPool2d', 'adaptive_max_pool2d', 2, true)

  ---------------------------------------------------------------- channel dropout
  local function channel_dropout(name, fname, dims, what)
    local cls = Module:extend(name)
    --- (p=0.5, inplace=false) or ({p=, inplace=})
    function cls:__init(p, inplace)
      Module.__init(self)
      if type(p) == 'table' then
        if inplace ~= nil then error(fmt('%s: the options table must be the only argument', name), 2) end
        check_opts(p, keys('p', 'inplace'), name)
        p, inplace = p.p, p.inplace
      end
      if p == nil then p = 0.5 end
      if type(p) ~= 'number' or not (p >= 0 and p <= 1) then
        error(fmt('%s: dropout probability has to be between 0 and 1, but got %s', name, got(p)), 2)
      end
      need_bool(inplace, name, 'inplace')
      self.p, self.inplace = p, inplace or false
    end
    function cls:forward(x)
      need_input(self, x, dims, what)
      return relabel(self, pcall(CF[fname], x, self.p, self.training, self.inplace))
    end
    function cls:extra_repr() return fmt('p=%g, inplace=%s', self.p, tostring(self.inplace)) end
    return cls
  end
  nn.Dropout1d = channel_dropout('Dropout1d', 'dropout1d', { [2] = true, [3] = true }, '[N, C, L] or [C, L]')
  nn.Dropout2d = channel_dropout('Dropout2d', 'dropout2d', { [3] = true, [4] = true },
    '[N, C, H, W] (or [N, C, L], read as PyTorch 1.13 does)')

  ---------------------------------------------------------------- padding layers
  -- padding: an integer (every side) or a list of 2n integers {left, right, top, bottom, ...}
  local function pad_class(name, n, mode, has_value, fixed_value)
    local cls = Module:extend(name)
    function cls:__init(padding, value)
      Module.__init(self)
      local p
      if type(padding) == 'number' and padding == floor(padding) then
        p = {}
        for i = 1, 2 * n do p[i] = padding end
      elseif type(padding) == 'table' and not is_tensor(padding) and #padding == 2 * n then
        p = {}
        for i = 1, 2 * n do
          if type(padding[i]) ~= 'number' or padding[i] ~= floor(padding[i]) then p = nil break end
          p[i] = padding[i]
        end
      end
      if not p then
        error(fmt('%s: padding must be an integer or a list of %d integers, got %s', name, 2 * n,
          type(padding) == 'table' and ('a list of ' .. #padding) or got(padding)), 2)
      end
      self.padding = p
      if has_value then
        if type(value) ~= 'number' then
          error(fmt('%s: value must be a number, got %s', name, got(value)), 2)
        end
        self.value = value
      elseif value ~= nil then
        error(fmt('%s: takes only padding, got a second argument (%s)', name, got(value)), 2)
      end
      if fixed_value then self.value = fixed_value end
    end
    local lo, hi = n + 1, n + 2
    if mode == 'constant' then lo = n end
    function cls:forward(x)
      if not is_tensor(x) or x:dim() < lo or x:dim() > hi then
        need_input(self, x)
        error(fmt('%s: input has shape %s, expected %s', self:_label(), shape_str(x),
          lo == hi and fmt('%d dims', lo) or fmt('%d to %d dims', lo, hi)), 2)
      end
      return relabel(self, pcall(CF.pad, x, self.padding, mode, mode == 'constant' and self.value or nil))
    end
    function cls:extra_repr()
      local s = tuple(self.padding)
      if has_value then s = s .. fmt(', value=%g', self.value) end
      return s
    end
    return cls
  end
  nn.ZeroPad2d = pad_class('ZeroPad2d', 2, 'constant', false, 0)
  nn.ConstantPad1d = pad_class('ConstantPad1d', 1, 'constant', true)
  nn.ConstantPad2d = pad_class('ConstantPad2d', 2, 'constant', true)
  nn.ConstantPad3d = pad_class('ConstantPad3d', 3, 'constant', true)
  nn.ReflectionPad1d = pad_class('ReflectionPad1d', 1, 'reflect')
  nn.ReflectionPad2d = pad_class('ReflectionPad2d', 2, 'reflect')
  nn.ReflectionPad3d = pad_class('ReflectionPad3d', 3, 'reflect')
  nn.ReplicationPad1d = pad_class('ReplicationPad1d', 1, 'replicate')
  nn.ReplicationPad2d = pad_class('ReplicationPad2d', 2, 'replicate')
  nn.ReplicationPad3d = pad_class('ReplicationPad3d', 3, 'replicate')
  nn.ZeroPad2d.extra_repr = function(self) return tuple(self.padding) end

  ---------------------------------------------------------------- Upsample
  local MODES = { nearest = true, ['nearest-exact'] = true, linear = true, bilinear = true, area = true }
  nn.Upsample = Module:extend('Upsample')
  --- Upsample({size=, scale_factor=, mode='nearest', align_corners=, recompute_scale_factor=})
  function nn.Upsample:__init(opts)
    Module.__init(self)
    if opts ~= nil and type(opts) ~= 'table' then
      error(fmt('Upsample: expected an options table {size=, scale_factor=, mode=, align_corners=}, got %s',
        got(opts)), 2)
    end
    check_opts(opts, UPSAMPLE_KEYS, 'Upsample')
    opts = opts or {}
    local mode = opts.mode or 'nearest'
    if mode == 'bicubic' or mode == 'trilinear' then
      CF.not_impl(fmt("Upsample: mode '%s' is not implemented in dplhost (nearest, nearest-exact, linear, bilinear, "
        .. "area are)", mode))
    end
    if not MODES[mode] then
      error(fmt("Upsample: mode must be one of 'nearest', 'nearest-exact', 'linear', 'bilinear', 'area', got %s",
        got(mode)), 2)
    end
    if opts.size ~= nil and opts.scale_factor ~= nil then
      error('Upsample: only one of size or scale_factor should be defined', 2)
    end
    if opts.size == nil and opts.scale_factor == nil then
      error('Upsample: either size or scale_factor should be defined', 2)
    end
    need_bool(opts.align_corners, 'Upsample', 'align_corners')
    need_bool(opts.recompute_scale_factor, 'Upsample', 'recompute_scale_factor')
    if opts.align_corners ~= nil and (mode == 'nearest' or mode == 'nearest-exact' or mode == 'area') then
      error('Upsample: align_corners option can only be set with the interpolating modes: linear | bilinear', 2)
    end
    self.size, self.scale_factor, self.mode = opts.size, opts.scale_factor, mode
    self.align_corners, self.recompute_scale_factor = opts.align_corners, opts.recompute_scale_factor
  end
  function nn.Upsample:forward(x)
    need_input(self, x)
    return relabel(self, pcall(CF.interpolate, x, { size = self.size, scale_factor = self.scale_factor,
      mode = self.mode, align_corners = self.align_corners, recompute_scale_factor = self.recompute_scale_factor }))
  end
  function nn.Upsample:extra_repr()
    local function v(x)
      if type(x) == 'table' then return tuple(x) end
      return tostring(x)
    end
    if self.scale_factor ~= nil then return fmt("scale_factor=%s, mode='%s'", v(self.scale_factor), self.mode) end
    return fmt("size=%s, mode='%s'", v(self.size), self.mode)
  end
  local function upsampling(name, mode, align)
    local cls = nn.Upsample:extend(name)
    --- ({size=, scale_factor=}): 4-d inputs
    function cls:__init(opts)
      check_opts(opts, UP2_KEYS, name)
      opts = opts or {}
      nn.Upsample.__init(self, { size = opts.size, scale_factor = opts.scale_factor, mode = mode, align_corners = align })
    end
    return cls
  end
  nn.UpsamplingNearest2d = upsampling('UpsamplingNearest2d', 'nearest', nil)
  nn.UpsamplingBilinear2d = upsampling('UpsamplingBilinear2d', 'bilinear', true)

  ---------------------------------------------------------------- PixelShuffle, PixelUnshuffle
  local function shuffle(name, fname, what)
    local cls = Module:extend(name)
    function cls:__init(r)
      Module.__init(self)
      if type(r) ~= 'number' or r ~= floor(r) or r < 1 then
        error(fmt('%s: %s must be an integer >= 1, got %s', name, what, got(r)), 2)
      end
      self[what] = r
    end
    function cls:forward(x)
      need_input(self, x)
      return relabel(self, pcall(CF[fname], x, self[what]))
    end
    function cls:extra_repr() return fmt('%s=%d', what, self[what]) end
    return cls
  end
  nn.PixelShuffle = shuffle('PixelShuffle', 'pixel_shuffle', 'upscale_factor')
  nn.PixelUnshuffle = shuffle('PixelUnshuffle', 'pixel_unshuffle', 'downscale_factor')

  ---------------------------------------------------------------- Unfold, Fold
  local function fold_opts(name, opts)
    check_opts(opts, FOLD_KEYS, name)
    opts = opts or {}
    local d, p, s = opts.dilation or 1, opts.padding or 0, opts.stride or 1
    int2(d, name, 'dilation', 1)
    int2(p, name, 'padding', 0)
    int2(s, name, 'stride', 1)
    return d, p, s
  end
  local function pair_str(v) return type(v) == 'table' and tuple(v) or tostring(v) end
  nn.Unfold = Module:extend('Unfold')
  --- Unfold(kernel_size [, {dilation=1, padding=0, stride=1}])
  function nn.Unfold:__init(k, opts)
    Module.__init(self)
    int2(k, 'Unfold', 'kernel_size', 1)
    self.kernel_size = k
    self.dilation, self.padding, self.stride = fold_opts('Unfold', opts)
  end
  function nn.Unfold:forward(x)
    need_input(self, x, { [3] = true, [4] = true }, '[N, C, H, W] or [C, H, W]')
    need_float(self, x)
    return relabel(self, pcall(CF.unfold, x, self.kernel_size, { dilation = self.dilation, padding = self.padding,
      stride = self.stride }))
  end
  function nn.Unfold:extra_repr()
    return fmt('kernel_size=%s, dilation=%s, padding=%s, stride=%s', pair_str(self.kernel_size), pair_str(self.dilation),
      pair_str(self.padding), pair_str(self.stride))
  end
  nn.Fold = Module:extend('Fold')
  --- Fold(output_size, kernel_size [, {dilation=1, padding=0, stride=1}])
  function nn.Fold:__init(size, k, opts)
    Module.__init(self)
    int2(size, 'Fold', 'output_size', 1)
    int2(k, 'Fold', 'kernel_size', 1)
    self.output_size, self.kernel_size = size, k
    self.dilation, self.padding, self.stride = fold_opts('Fold', opts)
  end
  function nn.Fold:forward(x)
    need_input(self, x, { [2] = true, [3] = true }, '[N, C * kh * kw, L] or [C * kh * kw, L]')
    need_float(self, x)
    return relabel(self, pcall(CF.fold, x, self.output_size, self.kernel_size, { dilation = self.dilation,
      padding = self.padding, stride = self.stride }))
  end
  function nn.Fold:extra_repr()
    return fmt('output_size=%s, kernel_size=%s, dilation=%s, padding=%s, stride=%s', pair_str(self.output_size),
      pair_str(self.kernel_size), pair_str(self.dilation), pair_str(self.padding), pair_str(self.stride))
  end

  return nn
end
