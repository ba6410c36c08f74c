-- dpl.nn.utils_param: PyTorch 1.13's reparametrisations of module tensors, installed into
-- dpl.nn.utils: weight_norm / remove_weight_norm and spectral_norm / remove_spectral_norm
-- (forward pre-hooks that recompute the tensor from new parameters, PyTorch's names
-- weight_g / weight_v, weight_orig / weight_u / weight_v), nn.utils.parametrize
-- (register_parametrization, remove_parametrizations, is_parametrized, cached),
-- nn.utils.parametrizations.spectral_norm, and nn.utils.prune (l1_unstructured,
-- random_unstructured, ln_structured, global_unstructured, identity, custom_from_mask,
-- remove, is_pruned; weight_orig / weight_mask). Dims are 1-based (PyTorch's dim=0 is 1).
local T = require 'dpl.tensor'
local autograd = require 'dpl.autograd'
local Module = require 'dpl.nn.module'
local class = require 'dpl.class'
local options = require 'dpl.options'
local errors = require 'dpl.errors'

local fmt = string.format
local type, tostring, floor = type, tostring, math.floor
local lua_error = error
local error = errors.raise
local is_tensor = T.is_tensor
local no_grad = autograd.no_grad
local rawget, rawset = rawget, rawset

local M = {}

---------------------------------------------------------------- module internals
local function need_module(m, fn)
  if not Module.is_module(m) then error(fmt('%s: expected a module, got %s', fn, type(m)), 3) end
end
local function remove_name(m, list, k)
  local l = rawget(m, list)
  if l then for i = 1, #l do if l[i] == k then table.remove(l, i) return true end end end
  return false
end
local function has_name(m, list, k)
  local l = rawget(m, list)
  if l then for i = 1, #l do if l[i] == k then return true end end end
  return false
end
-- deletes a parameter, buffer or submodule (PyTorch's delattr)
local function delattr(m, k)
  remove_name(m, '_param_names', k)
  remove_name(m, '_buffer_names', k)
  remove_name(m, '_module_names', k)
  remove_name(m, '_attr_names', k)
  rawset(m, k, nil)
end
local function get_param(m, name, fn)
  if type(name) ~= 'string' then error(fmt('%s: name must be a string, got %s', fn, type(name)), 3) end
  local t = rawget(m, name)
  if not (is_tensor(t) and has_name(m, '_param_names', name)) then
    error(fmt("%s: module '%s' has no parameter or buffer with name '%s'", fn, m.__name, name), 3)
  end
  return t
end
local function hooks_of(m, key)
  local h = rawget(m, key)
  if not h then h = {} rawset(m, key, h) end
  return h
end
local function dims_but(nd, dim)
  local r = {}
  for i = 1, nd do if i ~= dim then r[#r + 1] = i end end
  return r
end
local function norm_dim(d, nd, fn)
  if type(d) ~= 'number' or d ~= floor(d) or d == 0 or d < -math.max(nd, 1) or d > math.max(nd, 1) then
    error(fmt('%s: dim must be an integer in 1..%d or -%d..-1 (1-based), got %s', fn, nd, nd, tostring(d)), 3)
  end
  return d < 0 and nd + 1 + d or d
end

---------------------------------------------------------------- weight_norm
-- the 2-norm of v over every dim but `dim` (false: over all), keeping dims
local function norm_except_dim(v, dim)
  if not dim then return v:norm() end
  local nd = v:dim()
  local vm = dim == 1 and v or v:transpose(1, dim)
  local n = vm:contiguous():view(vm:size(1), -1):norm(2, 2)
  local shape = {}
  for i = 1, nd do shape[i] = 1 end
  shape[dim] = v:size(dim)
  return n:view(shape)
end
M._norm_except_dim = norm_except_dim

local function wn_compute(m, name, dim)
  local g, v = rawget(m, name .. '_g'), rawget(m, name .. '_v')
  return v * (g / norm_except_dim(v, dim))
end

--- weight_norm(module [, name='weight' [, dim=1]]) (or {name=, dim=}): replaces the parameter
--- by name_g (its norm over every dim but `dim`, 1-based; dim=false: one norm) and name_v (its
--- direction, the old tensor), and recomputes name = v * g / ||v|| before each forward.
--- Returns the module.
function M.weight_norm(m, name, dim)
  local fn = 'weight_norm'
  need_module(m, fn)
  if type(name) == 'table' then
    options.check(name, options.keys('name', 'dim'), fn)
    name, dim = name.name, name.dim
  end
  name = name or 'weight'
  local hooks = hooks_of(m, '_weight_norm')
  if hooks[name] then
    error(fmt("weight_norm: Cannot register two weight_norm hooks on the same parameter %s", name), 2)
  end
  local w = get_param(m, name, fn)
  if dim == nil then dim = 1 end
  if dim ~= false then dim = norm_dim(dim, w:dim(), fn) end
  local g = no_grad(function() return norm_except_dim(w, dim) end)
  delattr(m, name)
  m:register_parameter(name .. '_g', Module.Parameter(g))
  m:register_parameter(name .. '_v', Module.Parameter(w))
  rawset(m, name, wn_compute(m, name, dim))
  local h = m:register_forward_pre_hook(function(mod) rawset(mod, name, wn_compute(mod, name, dim)) end)
  hooks[name] = { handle = h, dim = dim }
  return m
end

--- remove_weight_norm(module [, name='weight']): the parameter name again, with the current value
function M.remove_weight_norm(m, name)
  need_module(m, 'remove_weight_norm')
  name = name or 'weight'
  local hooks = rawget(m, '_weight_norm')
  local e = hooks and hooks[name]
  if not e then error(fmt("remove_weight_norm: weight_norm of '%s' not found in %s", name, m.__name), 2) end
  local w = no_grad(function() return wn_compute(m, name, e.dim) end)
  e.handle:remove()
  hooks[name] = nil
  delattr(m, name)
  delattr(m, name .. '_g')
  delattr(m, name .. '_v')
  m:register_parameter(name, Module.Parameter(w:detach()))
  return m
end

---------------------------------------------------------------- spectral_norm
local function normalize(x, eps) return x / x:norm():clamp_min(eps) end
local function weight_mat(w, dim)
  if dim ~= 1 then
    local perm = { dim }
    for _, i in ipairs(dims_but(w:dim(), dim)) do perm[#perm + 1] = i end
    w = w:permute(perm)
  end
  return w:reshape(w:size(1), -1)
end
-- n power iterations on u [h], v [w] (in place, no grad)
local function power_iteration(W, u, v, n, eps)
  no_grad(function()
    for _ = 1, n do
      v:copy_(normalize(W:t():matmul(u), eps))
      u:copy_(normalize(W:matmul(v), eps))
    end
  end)
end
local function sn_compute(m, name, e, do_power)
  local w, u, v = rawget(m, name .. '_orig'), rawget(m, name .. '_u'), rawget(m, name .. '_v')
  local W = weight_mat(w, e.dim)
  if do_power and e.n > 0 then
    power_iteration(W, u, v, e.n, e.eps)
    u, v = u:clone(), v:clone()
  end
  local sigma = u:dot(W:matmul(v))
  return w / sigma
end
local function default_sn_dim(m)
  local n = m.__name or ''
  return n:match('^ConvTranspose%dd$') and 2 or 1
end
local SN_KEYS = options.keys('name', 'n_power_iterations', 'eps', 'dim')
local function sn_args(fn, m, name, n, eps, dim)
  if type(name) == 'table' then
    options.check(name, SN_KEYS, fn)
    name, n, eps, dim = name.name, name.n_power_iterations, name.eps, name.dim
  end
  name, n, eps = name or 'weight', n or 1, eps or 1e-12
  if type(n) ~= 'number' or n < 0 or n ~= floor(n) then
    error(fmt('%s: Expected n_power_iterations to be a non-negative integer, got n_power_iterations=%s', fn,
      tostring(n)), 3)
  end
  if type(eps) ~= 'number' or eps < 0 then error(fmt('%s: eps must be a non-negative number, got %s', fn, tostring(eps)), 3) end
  return name, n, eps, dim or default_sn_dim(m)
end

--- spectral_norm(module [, name='weight' [, n_power_iterations=1 [, eps=1e-12 [, dim]]]]) (or
--- an options table): name_orig (the parameter), buffers name_u, name_v (random unit
--- vectors); before each forward name = name_orig / sigma, sigma estimated by power
--- iteration (n_power_iterations steps in training; none in eval). dim (1-based) defaults to
--- 2 for ConvTranspose1d/2d/3d, else 1. Returns the module.
function M.spectral_norm(m, name, n, eps, dim)
  local fn = 'spectral_norm'
  need_module(m, fn)
  name, n, eps, dim = sn_args(fn, m, name, n, eps, dim)
  local hooks = hooks_of(m, '_spectral_norm')
  if hooks[name] then
    error(fmt('spectral_norm: Cannot register two spectral_norm hooks on the same parameter %s', name), 2)
  end
  local w = get_param(m, name, fn)
  dim = norm_dim(dim, w:dim(), fn)
  local W = weight_mat(w, dim)
  local o = { dtype = w.dtype, device = w.device }
  local u, v = no_grad(function()
    return normalize(T.empty(W:size(1), o):normal_(0, 1), eps), normalize(T.empty(W:size(2), o):normal_(0, 1), eps)
  end)
  delattr(m, name)
  m:register_parameter(name .. '_orig', w)
  rawset(m, name, w:detach())
  m:register_buffer(name .. '_u', u)
  m:register_buffer(name .. '_v', v)
  local e = { n = n, eps = eps, dim = dim }
  e.handle = m:register_forward_pre_hook(function(mod) rawset(mod, name, sn_compute(mod, name, e, mod.training)) end)
  hooks[name] = e
  return m
end

--- remove_spectral_norm(module [, name='weight']): the parameter name again (name_orig / sigma
--- with the current u and v)
function M.remove_spectral_norm(m, name)
  need_module(m, 'remove_spectral_norm')
  name = name or 'weight'
  local hooks = rawget(m, '_spectral_norm')
  local e = hooks and hooks[name]
  if not e then error(fmt("remove_spectral_norm: spectral_norm of '%s' not found in %s", name, m.__name), 2) end
  local w = no_grad(function() return sn_compute(m, name, e, false) end)
  e.handle:remove()
  hooks[name] = nil
  for _, k in ipairs({ name, name .. '_u', name .. '_v', name .. '_orig' }) do delattr(m, k) end
  m:register_parameter(name, Module.Parameter(w:detach()))
  return m
end

---------------------------------------------------------------- parametrize
local P = {}
M.parametrize = P
local cache -- table while parametrize.cached runs

local function plist_value(pl)
  local x = rawget(pl, 'original')
  for i = 1, pl:len() do x = pl[i](x) end
  return x
end
local function param_value(m, name)
  local pl = rawget(m, 'parametrizations'):get(name)
  if cache then
    local c = cache[pl]
    if c == nil then c = plist_value(pl) cache[pl] = c end
    return c
  end
  return plist_value(pl)
end

-- the class of a parametrized module: a subclass whose field reads of the parametrized
-- names compute them, and whose assignments to them go through right_inverse
local function parametrized_class(m)
  local base = getmetatable(m)
  if rawget(base, '_parametrized_base') then return base end
  local cls = base:extend('Parametrized' .. (base.__name or 'Module'))
  cls._parametrized_base = base
  cls.__index = function(t, k)
    local names = rawget(t, '_parametrized')
    if names and names[k] then return param_value(t, k) end
    return cls[k]
  end
  local base_newindex = base.__newindex
  cls.__newindex = function(t, k, v)
    local names = rawget(t, '_parametrized')
    if names and names[k] then
      local pl = rawget(t, 'parametrizations'):get(k)
      no_grad(function()
        for i = pl:len(), 1, -1 do
          local pm = pl[i]
          if type(pm.right_inverse) ~= 'function' then
            error(fmt("parametrization: the parametrization %s of '%s' has no right_inverse; it cannot be assigned",
              pm.__name, k), 3)
          end
          v = pm:right_inverse(v)
        end
        rawget(pl, 'original'):copy_(v)
      end)
      return
    end
    if base_newindex then return base_newindex(t, k, v) end
    rawset(t, k, v)
  end
  return cls
end

--- register_parametrization(module, tensor_name, parametrization [, {unsafe=false}]): the
--- tensor becomes module.parametrizations[tensor_name].original (right_inverse applied when the
--- parametrization has one); reading module[tensor_name] returns parametrization(original)
--- (several compose in registration order). Returns the module.
function P.register_parametrization(m, name, pm, opts)
  local fn = 'register_parametrization'
  need_module(m, fn)
  need_module(pm, fn)
  if type(opts) == 'boolean' then opts = { unsafe = opts } end
  options.check(opts, options.keys('unsafe'), fn)
  local unsafe = opts and opts.unsafe
  local nn = require 'dpl.nn'
  local names = rawget(m, '_parametrized')
  if names and names[name] then
    local pl = rawget(m, 'parametrizations'):get(name)
    if not unsafe then
      local before = no_grad(function() return plist_value(pl) end)
      local after = no_grad(function() return pm(before) end)
      if not is_tensor(after) or after.dtype ~= before.dtype or #after:size() ~= #before:size() then
        error(fmt('%s: the parametrization must return a tensor of the dtype and shape of its input (%s)', fn,
          pm.__name), 2)
      end
      for i = 1, before:dim() do
        if after:size(i) ~= before:size(i) then
          error(fmt('%s: Registering a parametrization may not change the shape of the tensor, unless `unsafe` '
            .. 'flag is enabled.', fn), 2)
        end
      end
    end
    pl:append(pm)
    return m
  end
  if type(name) ~= 'string' then error(fmt('%s: tensor_name must be a string, got %s', fn, type(name)), 2) end
  local t = rawget(m, name)
  local is_param = is_tensor(t) and has_name(m, '_param_names', name)
  local is_buffer = is_tensor(t) and has_name(m, '_buffer_names', name)
  if not (is_param or is_buffer) then
    error(fmt("%s: Module '%s' does not have a parameter, a buffer, or a parametrized element with name '%s'", fn,
      m.__name, name), 2)
  end
  local original = t
  if type(pm.right_inverse) == 'function' then
    -- a right_inverse raising NotImplementedError counts as the identity (PyTorch's rule)
    local ok, new = pcall(no_grad, function() return pm:right_inverse(t) end)
    if not ok then
      if errors.is(new, errors.NotImplementedError) then new = t else lua_error(new, 0) end
    end
    if not is_tensor(new) then
      lua_error(errors.NotImplementedError(fmt('%s: right_inverse returning several tensors is not supported in '
        .. 'dplhost', fn)), 0)
    end
    no_grad(function() t:copy_(new) end)
  end
  if not unsafe then
    local y = no_grad(function() return pm(t) end)
    if not is_tensor(y) then error(fmt('%s: a parametrization must return a tensor, got %s', fn, type(y)), 2) end
    for i = 1, math.max(y:dim(), t:dim()) do
      if y:dim() ~= t:dim() or y:size(i) ~= t:size(i) or y.dtype ~= t.dtype then
        error(fmt('%s: Registering a parametrization may not change the shape of the tensor, unless `unsafe` flag is '
          .. 'enabled. unparametrized shape %s, parametrized shape %s', fn, '[' .. table.concat(t:size(), ', ') .. ']',
          '[' .. table.concat(y:size(), ', ') .. ']'), 2)
      end
    end
  end
  local pl = nn.ModuleList({ pm })
  rawset(pl, '_is_parametrization_list', true)
  if is_param then pl.original = original else pl:register_buffer('original', original) end
  delattr(m, name)
  local dict = rawget(m, 'parametrizations')
  if not dict then
    m.parametrizations = nn.ModuleDict()
    dict = rawget(m, 'parametrizations')
  end
  dict[name] = pl
  if not names then names = {} rawset(m, '_parametrized', names) end
  names[name] = true
  setmetatable(m, parametrized_class(m))
  return m
end

--- is_parametrized(module [, tensor_name])
function P.is_parametrized(m, name)
  local names = type(m) == 'table' and rawget(m, '_parametrized')
  if not names then return false end
  if name == nil then return next(names) ~= nil end
  return names[name] == true
end

--- remove_parametrizations(module, tensor_name [, leave_parametrized=true]): the tensor back as a
--- plain parameter (or buffer), holding the parametrized value (or the original)
function P.remove_parametrizations(m, name, leave)
  local fn = 'remove_parametrizations'
  need_module(m, fn)
  if type(leave) == 'table' then leave = leave.leave_parametrized end
  if not P.is_parametrized(m, name) then
    error(fmt('%s: Module %s does not have a parametrization on %s', fn, m.__name, tostring(name)), 2)
  end
  local dict = rawget(m, 'parametrizations')
  local pl = dict:get(name)
  local original = rawget(pl, 'original')
  local is_param = has_name(pl, '_param_names', 'original')
  local value = original
  if leave ~= false then
    local t = no_grad(function() return plist_value(pl) end)
    local same = t.dtype == original.dtype and t:dim() == original:dim()
    if same then for i = 1, t:dim() do if t:size(i) ~= original:size(i) then same = false end end end
    if same then
      no_grad(function() original:copy_(t) end)
    elseif is_param then
      value = Module.Parameter(t:detach(), original.requires_grad)
    else
      value = t:detach()
    end
  end
  rawget(m, '_parametrized')[name] = nil
  dict[name] = nil
  if next(rawget(m, '_parametrized')) == nil then
    rawset(m, '_parametrized', nil)
    delattr(m, 'parametrizations')
    setmetatable(m, rawget(getmetatable(m), '_parametrized_base') or getmetatable(m))
  end
  if is_param then m:register_parameter(name, value) else m:register_buffer(name, value) end
  return m
end

--- cached(fn, ...): runs fn with the parametrized tensors computed once (per tensor) and
--- reused until fn returns (PyTorch's `with parametrize.cached():`); returns fn's results
function P.cached(fn, ...)
  if type(fn) ~= 'function' then error(fmt('cached: expected a function, got %s', type(fn)), 2) end
  if cache then return fn(...) end
  cache = {}
  local r = { n = select('#', ...), pcall(fn, ...) }
  cache = nil
  if not r[1] then lua_error(r[2], 0) end
  return unpack(r, 2, table.maxn(r))
end

function P.type_before_parametrizations(m)
  local c = getmetatable(m)
  return rawget(c, '_parametrized_base') or c
end

---------------------------------------------------------------- parametrizations
local Z = {}
M.parametrizations = Z
local SpectralNormP = Module:extend('_SpectralNorm')
function SpectralNormP:__init(w, n, dim, eps)
  Module.__init(self)
  local nd = w:dim()
  self.dim, self.eps, self.n_power_iterations = dim, eps, n
  if nd > 1 then
    local W = weight_mat(w, dim)
    local o = { dtype = w.dtype, device = w.device }
    local u, v = no_grad(function()
      return normalize(T.empty(W:size(1), o):normal_(0, 1), eps), normalize(T.empty(W:size(2), o):normal_(0, 1), eps)
    end)
    self:register_buffer('_u', u)
    self:register_buffer('_v', v)
    power_iteration(W:detach(), u, v, 15, eps)
  end
end
function SpectralNormP:forward(w)
  if w:dim() == 1 then return normalize(w, self.eps) end
  local W = weight_mat(w, self.dim)
  if self.training then power_iteration(W:detach(), self._u, self._v, self.n_power_iterations, self.eps) end
  local u, v = self._u:clone(), self._v:clone()
  return w / u:dot(W:matmul(v))
end
function SpectralNormP:right_inverse(v) return v end
--- parametrizations.spectral_norm(module [, name='weight' [, n_power_iterations=1 [, eps=1e-12
--- [, dim]]]]): register_parametrization with PyTorch's _SpectralNorm (buffers _u, _v; 15
--- power iterations at registration, n_power_iterations per forward in training)
function Z.spectral_norm(m, name, n, eps, dim)
  local fn = 'parametrizations.spectral_norm'
  need_module(m, fn)
  name, n, eps, dim = sn_args(fn, m, name, n, eps, dim)
  local w = rawget(m, name)
  if not is_tensor(w) then
    error(fmt("%s: Module '%s' has no parameter or buffer with name '%s'", fn, m.__name, tostring(name)), 2)
  end
  dim = norm_dim(dim, w:dim(), fn)
  return P.register_parametrization(m, name, SpectralNormP(w, n, dim, eps))
end
Z._SpectralNorm = SpectralNormP
-- PyTorch's _Orthogonal: a parametrization whose forward maps any matrix to one with
-- orthonormal columns (rows when wide) through matrix_exp or the Cayley map of a skew-symmetric
-- matrix, or a product of Householder reflections; with use_trivialization, Q = base @ map(X)
-- with base an orthogonal buffer set by right_inverse (which returns -Id for X)
local OrthogonalP = Module:extend('_Orthogonal')
local ORTH_MAPS = { matrix_exp = true, cayley = true, householder = true }
function OrthogonalP:__init(w, map, trivial)
  Module.__init(self)
  self.shape, self.orthogonal_map = w:size(), map
  if trivial then self:register_buffer('base', nil) end
  self._trivial = trivial
end
local function mT(x) return x:transpose(-2, -1) end
-- Q with R's diagonal positive: the orthogonal factor of A made unique
local function make_orthogonal(A)
  local LA = require 'dpl.linalg'
  local Q, R = LA.qr(A)
  return Q * R:diagonal(0, -2, -1):sign():unsqueeze(-2)
end
function OrthogonalP:forward(X)
  local LA = require 'dpl.linalg'
  local n, k = X:size(X:dim() - 1), X:size(X:dim())
  local transposed = n < k
  if transposed then X = mT(X); n, k = k, n end
  local Q
  if self.orthogonal_map == 'matrix_exp' or self.orthogonal_map == 'cayley' then
    X = X:tril()
    if n ~= k then
      local sz = X:size()
      sz[#sz] = n - k
      X = T.cat({ X, T.zeros(sz, { dtype = X.dtype, device = X.device }) }, -1)
    end
    local A = X - mT(X)
    if self.orthogonal_map == 'matrix_exp' then Q = LA.matrix_exp(A)
    else
      local I = T.eye(n, { dtype = A.dtype, device = A.device })
      Q = LA.solve(I - A * 0.5, I + A * 0.5)
    end
    if n ~= k then Q = Q:narrow(-1, 1, k) end
  else
    local A = X:tril(-1)
    local tau = (A * A):sum(-2):add(1):reciprocal() * 2
    Q = LA.householder_product(A, tau)
    Q = Q * X:diagonal(0, -2, -1):detach():trunc():unsqueeze(-2)
  end
  local base = rawget(self, '_buffers') and self._buffers.base or self.base
  if base ~= nil then Q = base:matmul(Q) end
  if transposed then Q = mT(Q) end
  return Q
end
local function is_orthogonal(Q)
  local n, k = Q:size(Q:dim() - 1), Q:size(Q:dim())
  local eps = 10 * n * (Q.dtype == 'float64' and 2.220446049250313e-16 or 1.1920928955078125e-07)
  return (mT(Q):matmul(Q) - T.eye(k, { dtype = Q.dtype, device = Q.device })):abs():max():item() <= eps
end
function OrthogonalP:right_inverse(Q)
  local LA = require 'dpl.linalg'
  return no_grad(function()
    local Q_init = Q
    local sz = Q:size()
    for i = 1, #sz do
      if sz[i] ~= self.shape[i] or #sz ~= #self.shape then
        error(fmt('orthogonal: expected a matrix or batch of matrices of shape [%s], got [%s]',
          table.concat(self.shape, ', '), table.concat(sz, ', ')), 0)
      end
    end
    local n, k = sz[#sz - 1], sz[#sz]
    local transpose = n < k
    if transpose then Q = mT(Q); n, k = k, n end
    if not self._trivial then
      if self.orthogonal_map ~= 'householder' then
        lua_error(errors.NotImplementedError("It is not possible to assign to the matrix exponential or the Cayley "
          .. "parametrizations when use_trivialization=false."), 0)
      end
      local A, tau = LA.geqrf(Q)
      -- R's diagonal made +-1: sign of the reflection, flipped where LAPACK used none (tau = 0)
      local d = A:diagonal(0, -2, -1)
      local sgn = d:sign()
      sgn = T.where(tau:eq(0), -sgn, sgn)
      d:copy_(sgn)
      return transpose and mT(A):contiguous() or A
    end
    if n == k then
      if not is_orthogonal(Q) then Q = make_orthogonal(Q) else Q = Q:clone() end
    else
      local bs = {}
      for i = 1, #sz - 2 do bs[i] = sz[i] end
      bs[#bs + 1], bs[#bs + 2] = n, n - k
      local N = T.randn(bs, { dtype = Q.dtype, device = Q.device })
      Q = make_orthogonal(T.cat({ Q, N }, -1))
    end
    self.base = Q
    local neg = T.zeros_like(Q_init)
    neg:diagonal(0, -2, -1):fill_(-1)
    return neg
  end)
end
--- parametrizations.orthogonal(module [, name='weight' [, orthogonal_map [, {use_trivialization=true}]]]):
--- the tensor parametrized to have orthonormal columns (rows when wide); orthogonal_map
--- 'matrix_exp' (square), 'cayley' or 'householder' (the default for non-square)
function Z.orthogonal(m, name, map, opts)
  local fn = 'parametrizations.orthogonal'
  need_module(m, fn)
  if type(name) == 'table' then name, opts = nil, name elseif type(map) == 'table' then map, opts = nil, map end
  opts = opts or {}
  name = name or 'weight'
  if type(name) ~= 'string' then error(fmt('%s: name must be a string, got %s', fn, type(name)), 2) end
  local w = m[name] -- (an already parametrized tensor too: the parametrizations stack)
  if not is_tensor(w) then
    error(fmt("%s: Module '%s' has no parameter or buffer with name '%s'", fn, m.__name, tostring(name)), 2)
  end
  if w:dim() < 2 then
    error(fmt('%s: Expected a matrix or batch of matrices. Got a tensor of %d dimensions.', fn, w:dim()), 2)
  end
  local n, k = w:size(w:dim() - 1), w:size(w:dim())
  if map == nil then map = (n == k) and 'matrix_exp' or 'householder' end
  if not ORTH_MAPS[map] then
    error(fmt("%s: orthogonal_map has to be one of 'matrix_exp', 'cayley', 'householder'. Got: %s", fn, tostring(map)), 2)
  end
  local trivial = opts.use_trivialization ~= false
  return P.register_parametrization(m, name, OrthogonalP(w, map, trivial), { unsafe = true })
end
Z._Orthogonal = OrthogonalP
function Z.weight_norm()
  lua_error(errors.NotImplementedError('parametrizations.weight_norm (PyTorch 2.1) is not implemented in dplhost; '
    .. 'use nn.utils.weight_norm'), 2)
end

M.prune = require('dpl.nn.utils_prune')(M, { delattr = delattr, get_param = get_param, need_module = need_module,
  has_name = has_name, norm_dim = norm_dim, dims_but = dims_but })
M._class = class
return M
