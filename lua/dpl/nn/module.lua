-- dpl.nn.Module: the base class of layers and models.
--
-- Parameters and submodules are registered by assignment: `self.weight = nn.Parameter(t)`
-- (nn.Parameter marks the tensor, also with requires_grad=false; any leaf tensor that
-- requires grad counts as one too) or `self.fc = nn.Linear(4, 2)`. Registration keeps
-- the assignment order; the value is read back from the field each time, so
-- re-assigning a registered field replaces it. A field that first held a plain tensor
-- and later a Parameter becomes a parameter (Lua calls __newindex only for a new field,
-- so plain tensor fields are remembered and looked at again when parameters are listed).
-- Buffers (running statistics) are registered with `self:register_buffer(name, t
-- [, persistent=true])` and go into the state dict unless persistent is false.
local class = require 'dpl.class'
local T = require 'dpl.tensor'
local autograd = require 'dpl.autograd'
local options = require 'dpl.options'

local fmt = string.format

-- Errors are objects whose tostring reads "ClassName: message" (DESIGN.md).
local error = require('dpl.errors').raise -- string messages become ValueError objects
local is_tensor = T.is_tensor
local rawget, rawset, type, ipairs = rawget, rawset, type, ipairs

local Module = class.Object:extend('Module')

-- options tables (an unknown key is an error)
local ZERO_GRAD_KEYS, LOAD_KEYS = options.keys('set_to_none'), options.keys('strict', 'index_base')

local function is_module(v) return type(v) == 'table' and rawget(v, '_is_module') == true end
Module.is_module = is_module

-- the tensors made by nn.Parameter (weak keys; kept in the registry so that a reload of
-- this module, as a test runner's, keeps the marks)
local REG = debug.getregistry()
local param_set = REG['dpl.nn.param_set'] or setmetatable({}, { __mode = 'k' })
REG['dpl.nn.param_set'] = param_set

--- True for a tensor made by nn.Parameter and for a leaf tensor that requires grad.
local function is_param(t)
  return is_tensor(t) and (param_set[t] == true or (t.requires_grad and t.is_leaf))
end
Module.is_parameter = is_param

-- a child stored by a container in its own table (ModuleDict: `_store`), else a field
local function get_child(m, k)
  local s = rawget(m, '_store')
  if s ~= nil then
    local c = rawget(s, k)
    if is_module(c) then return c end
    return nil
  end
  return rawget(m, k)
end
Module._get_child = get_child

function Module:__init()
  rawset(self, '_is_module', true)
  rawset(self, '_param_names', rawget(self, '_param_names') or {})
  rawset(self, '_module_names', rawget(self, '_module_names') or {})
  rawset(self, '_buffer_names', rawget(self, '_buffer_names') or {})
  rawset(self, 'training', true)
end

local function has_name(self, list, k)
  local l = rawget(self, list)
  if l then for i = 1, #l do if l[i] == k then return true end end end
  return false
end
local function add_name(self, list, k)
  local l = rawget(self, list)
  if not l then l = {}; rawset(self, list, l) end
  for i = 1, #l do if l[i] == k then return end end
  l[#l + 1] = k
end
local function remove_name(self, list, k)
  local l = rawget(self, list)
  if l then for i = 1, #l do if l[i] == k then table.remove(l, i) return end end end
end

function Module:__newindex(k, v)
  if is_tensor(v) then
    if is_param(v) then
      remove_name(self, '_attr_names', k)
      add_name(self, '_param_names', k)
    elseif not has_name(self, '_param_names', k) and not has_name(self, '_buffer_names', k) then
      add_name(self, '_attr_names', k) -- a plain tensor field: it may get a Parameter later
    end
  elseif is_module(v) then
    add_name(self, '_module_names', k)
    if rawget(v, '_name') == nil then rawset(v, '_name', tostring(k)) end
  end
  rawset(self, k, v)
end

-- plain tensor fields that hold a Parameter now (assigned over a plain tensor, which Lua
-- does without __newindex) become parameters
local function promote(m)
  local a = rawget(m, '_attr_names')
  if a == nil or a[1] == nil then return end
  local i = 1
  while a[i] ~= nil do
    local k = a[i]
    local v = rawget(m, k)
    if is_param(v) and not has_name(m, '_buffer_names', k) then
      table.remove(a, i)
      add_name(m, '_param_names', k)
    else
      i = i + 1
    end
  end
end

---------------------------------------------------------------- calls, hooks
local unpack, select = unpack, select
local pack = function(...) return { n = select('#', ...), ... } end

-- __call with forward hooks: pre-hooks may replace the arguments, forward hooks the output
local function call_hooked(self, ...)
  local args = pack(...)
  local pre = rawget(self, '_forward_pre_hooks')
  if pre then
    for _, h in ipairs({ unpack(pre) }) do -- (a copy: a hook may remove itself)
      local r = h.fn(self, args)
      if r ~= nil then
        if type(r) == 'table' and getmetatable(r) == nil then
          args = { n = r.n or #r }
          for i = 1, args.n do args[i] = r[i] end
        else
          args = { n = 1, r }
        end
      end
    end
  end
  local out = pack(self:forward(unpack(args, 1, args.n)))
  local post = rawget(self, '_forward_hooks')
  if post then
    for _, h in ipairs({ unpack(post) }) do
      local r = h.fn(self, args, out[1])
      if r ~= nil then out[1] = r; if out.n < 1 then out.n = 1 end end
    end
  end
  return unpack(out, 1, out.n)
end

-- the hot path: one field read when the module has no hooks
function Module:__call(...)
  if rawget(self, '_has_hooks') == nil then return self:forward(...) end
  return call_hooked(self, ...)
end

local Handle = {}
Handle.__index = Handle
--- handle:remove(): unregisters the hook (again: nothing).
function Handle:remove()
  local m, list = self.module, rawget(self.module, self.list)
  if list then
    for i = 1, #list do if list[i] == self.entry then table.remove(list, i) break end end
    if #list == 0 then rawset(m, self.list, nil) end
  end
  if rawget(m, '_forward_pre_hooks') == nil and rawget(m, '_forward_hooks') == nil then rawset(m, '_has_hooks', nil) end
end

local function add_hook(self, list, fn, what)
  if type(fn) ~= 'function' and not (type(fn) == 'table' and getmetatable(fn) and getmetatable(fn).__call) then
    error(fmt('%s: expected a function, got %s', what, type(fn)), 3)
  end
  local l = rawget(self, list)
  if not l then l = {}; rawset(self, list, l) end
  local entry = { fn = fn }
  l[#l + 1] = entry
  rawset(self, '_has_hooks', true)
  return setmetatable({ module = self, list = list, entry = entry }, Handle)
end

--- register_forward_pre_hook(fn): fn(module, args) runs before forward; args is the list
--- of arguments ({n=, ...}); returning nil keeps them, a plain table replaces the list, any
--- other value becomes the only argument. Returns a handle with :remove().
function Module:register_forward_pre_hook(fn)
  return add_hook(self, '_forward_pre_hooks', fn, 'register_forward_pre_hook')
end
--- register_forward_hook(fn): fn(module, args, output) runs after forward; a non-nil result
--- replaces the output. Returns a handle with :remove().
function Module:register_forward_hook(fn)
  return add_hook(self, '_forward_hooks', fn, 'register_forward_hook')
end

function Module:forward()
  error(fmt('%s: forward is not implemented', self.__name), 2)
end

--- nn.Parameter(t [, requires_grad=true]): t as a leaf (detached when it is not one),
--- marked as a parameter: a module field holding it is registered, also when it does not
--- require grad (a frozen parameter is in parameters() and the state dict, as PyTorch's).
local function Parameter(t, requires_grad)
  if not is_tensor(t) then error(fmt('Parameter: expected a tensor, got %s', type(t)), 2) end
  if not t.is_leaf then t = t:detach() end
  t.requires_grad = requires_grad ~= false
  param_set[t] = true
  return t
end
Module.Parameter = Parameter

--- Registers a tensor that is state but not a parameter. persistent=false (default true):
--- kept out of the state dict (and not expected by load_state_dict), as PyTorch's.
-- name checks of register_buffer / register_parameter / add_module (PyTorch's): a non-empty
-- string (or, for add_module, a number: the containers' indices) without '.', not already
-- taken by another kind of attribute (a parameter, a buffer, a submodule, a method or any
-- other non-tensor field; a plain tensor field may become a buffer or a parameter)
local function check_name(self, fn, name, list)
  if type(name) == 'number' and list == '_module_names' then return end
  if type(name) ~= 'string' then error(fmt('%s: the name must be a string, got %s', fn, type(name)), 3) end
  if name == '' then error(fmt("%s: the name can't be empty", fn), 3) end
  if name:find('.', 1, true) then error(fmt("%s: the name can't contain '.', got '%s'", fn, name), 3) end
  if has_name(self, list, name) then return end
  local v = self[name]
  if v ~= nil and not (is_tensor(v) and has_name(self, '_attr_names', name)) then
    error(fmt("%s: attribute '%s' already exists (a %s)", fn, name,
      has_name(self, '_param_names', name) and 'parameter' or has_name(self, '_buffer_names', name) and 'buffer'
      or is_module(v) and 'submodule' or type(v)), 3)
  end
end

function Module:register_buffer(name, t, persistent)
  check_name(self, 'register_buffer', name, '_buffer_names')
  if t ~= nil and not is_tensor(t) then error(fmt('register_buffer: %s must be a tensor or nil', name), 2) end
  if persistent ~= nil and type(persistent) ~= 'boolean' then
    error(fmt('register_buffer: persistent must be true or false, got %s', tostring(persistent)), 2)
  end
  remove_name(self, '_attr_names', name)
  add_name(self, '_buffer_names', name)
  local np = rawget(self, '_nonpersistent')
  if persistent == false then
    if not np then np = {}; rawset(self, '_nonpersistent', np) end
    np[name] = true
  elseif np then
    np[name] = nil
  end
  rawset(self, name, t)
end

--- Registers a parameter under a name computed at run time.
function Module:register_parameter(name, t)
  check_name(self, 'register_parameter', name, '_param_names')
  if t ~= nil and not is_tensor(t) then error(fmt('register_parameter: %s must be a tensor or nil, got %s', name, type(t)), 2) end
  if t ~= nil and not param_set[t] then t = Parameter(t) end
  remove_name(self, '_attr_names', name)
  add_name(self, '_param_names', name)
  rawset(self, name, t)
end

--- Registers a submodule under a name computed at run time (nil allowed).
function Module:add_module(name, m)
  check_name(self, 'add_module', name, '_module_names')
  if m ~= nil and not is_module(m) then error(fmt('add_module: %s is not a Module', tostring(name)), 2) end
  add_name(self, '_module_names', name)
  if m and rawget(m, '_name') == nil then rawset(m, '_name', tostring(name)) end
  rawset(self, name, m)
end

local EMPTY = {}
local function names(self, list)
  if list == '_param_names' then promote(self) end
  return rawget(self, list) or EMPTY
end

---------------------------------------------------------------- traversal
--- Iterator over (name, child) of the direct submodules (a module held under two names:
--- the first).
function Module:named_children()
  local l, i, seen = names(self, '_module_names'), 0, {}
  return function()
    while true do
      i = i + 1
      local k = l[i]
      if k == nil then return nil end
      local m = get_child(self, k)
      if is_module(m) and not seen[m] then
        seen[m] = true
        return k, m
      end
    end
  end
end
--- List of the direct submodules.
function Module:children()
  local r = {}
  for _, m in self:named_children() do r[#r + 1] = m end
  return r
end

local function collect_modules(self, prefix, out, seen)
  if seen[self] then return end
  seen[self] = true
  out[#out + 1] = { prefix, self }
  for k, m in self:named_children() do
    collect_modules(m, prefix == '' and tostring(k) or (prefix .. '.' .. tostring(k)), out, seen)
  end
end
-- (prefix, recurse) of named_parameters / named_buffers: PyTorch's positional
-- (prefix='', recurse=true), one options table {prefix=, recurse=}, or (as before) a
-- boolean recurse alone
local NAMED_KEYS, MODULES_KEYS = options.keys('prefix', 'recurse'), options.keys('prefix', 'remove_duplicate')
local STATE_KEYS = options.keys('prefix', 'keep_vars', 'index_base')
local INDEX_KEYS = options.keys('index_base')
local function prefix_recurse(fn, a, b)
  local prefix, recurse = '', b
  if type(a) == 'table' then
    options.check(a, NAMED_KEYS, fn)
    prefix, recurse = a.prefix or '', a.recurse
  elseif type(a) == 'boolean' then
    recurse = a
  elseif a ~= nil then
    prefix = a
  end
  if type(prefix) ~= 'string' then error(fmt('%s: prefix must be a string, got %s', fn, type(prefix)), 3) end
  if recurse ~= nil and type(recurse) ~= 'boolean' then
    error(fmt('%s: recurse must be true or false, got %s', fn, tostring(recurse)), 3)
  end
  return prefix, recurse
end
local function with_prefix(prefix, name)
  if prefix == '' then return name end
  return name == '' and prefix or prefix .. '.' .. name
end

--- Iterator over (name, module) of self and all descendants ('' for self).
--- named_modules({prefix='', remove_duplicate=true}): names start with prefix; with
--- remove_duplicate=false a module held under two names is listed under each.
function Module:named_modules(opts)
  if opts ~= nil and type(opts) ~= 'table' then
    error(fmt('named_modules: expected nil or an options table {prefix=, remove_duplicate=}, got %s', type(opts)), 2)
  end
  options.check(opts, MODULES_KEYS, 'named_modules')
  local prefix = opts and opts.prefix or ''
  if type(prefix) ~= 'string' then error(fmt('named_modules: prefix must be a string, got %s', type(prefix)), 2) end
  local out = {}
  if opts and opts.remove_duplicate == false then
    local function all(m, name, stack)
      if stack[m] then return end
      stack[m] = true
      out[#out + 1] = { name, m }
      for _, k in ipairs(names(m, '_module_names')) do
        local c = get_child(m, k)
        if is_module(c) then all(c, with_prefix(name, tostring(k)), stack) end
      end
      stack[m] = nil
    end
    all(self, prefix, {})
  else
    collect_modules(self, prefix, out, {})
  end
  local i = 0
  return function()
    i = i + 1
    local e = out[i]
    if e then return e[1], e[2] end
  end
end
function Module:modules()
  local r = {}
  for _, m in self:named_modules() do r[#r + 1] = m end
  return r
end

local function named_tensors(self, list, recurse, top)
  local out, seen = {}, {}
  local mods = {}
  top = top or ''
  if recurse == false then mods[1] = { top, self } else
    for name, m in self:named_modules({ prefix = top }) do mods[#mods + 1] = { name, m } end
  end
  for _, e in ipairs(mods) do
    local prefix, m = e[1], e[2]
    for _, k in ipairs(names(m, list)) do
      local t = rawget(m, k)
      if is_tensor(t) and not seen[t] then
        seen[t] = true
        out[#out + 1] = { prefix == '' and tostring(k) or (prefix .. '.' .. tostring(k)), t }
      end
    end
  end
  return out
end
local function iter(list)
  local i = 0
  return function()
    i = i + 1
    local e = list[i]
    if e then return e[1], e[2] end
  end
end

--- Iterator over (qualified name, parameter), e.g. ('fc1.weight', t); named_parameters(prefix,
--- recurse) or named_parameters{prefix=, recurse=} as PyTorch's (or named_parameters(false)).
function Module:named_parameters(a, b)
  local prefix, recurse = prefix_recurse('named_parameters', a, b)
  return iter(named_tensors(self, '_param_names', recurse, prefix))
end
--- List of the parameters (each once), in registration order.
function Module:parameters(recurse)
  local r = {}
  for _, e in ipairs(named_tensors(self, '_param_names', recurse)) do r[#r + 1] = e[2] end
  return r
end
function Module:named_buffers(a, b)
  local prefix, recurse = prefix_recurse('named_buffers', a, b)
  return iter(named_tensors(self, '_buffer_names', recurse, prefix))
end
function Module:buffers(recurse)
  local r = {}
  for _, e in ipairs(named_tensors(self, '_buffer_names', recurse)) do r[#r + 1] = e[2] end
  return r
end

--- Number of parameter elements (trainable only with only_trainable).
function Module:num_parameters(only_trainable)
  local n = 0
  for _, p in ipairs(self:parameters()) do
    if not only_trainable or p.requires_grad then n = n + p:numel() end
  end
  return n
end

---------------------------------------------------------------- modes, grads
--- Sets `training` on self and calls each child's train(mode), so that a subclass's train
--- override runs also when a parent switches the mode (PyTorch's recursion).
function Module:train(mode)
  if mode == nil then mode = true end
  if type(mode) ~= 'boolean' then
    error(fmt('train: training mode is expected to be a boolean, got %s', type(mode)), 2)
  end
  rawset(self, 'training', mode)
  for _, m in self:named_children() do m:train(mode) end
  return self
end
function Module:eval() return self:train(false) end

--- Clears the gradients: set to nil (default), or zeroed with {set_to_none=false}.
function Module:zero_grad(opts)
  if type(opts) ~= 'boolean' then options.check(opts, ZERO_GRAD_KEYS, 'zero_grad') end
  local to_none = not (opts and opts.set_to_none == false)
  if type(opts) == 'boolean' then to_none = opts end
  for _, p in ipairs(self:parameters()) do
    if to_none then autograd.drop_grad(p)
    elseif p.grad then p.grad:zero_() end
  end
end

--- Sets requires_grad on every parameter (freezing with false).
function Module:requires_grad_(v)
  if v == nil then v = true end
  for _, p in ipairs(self:parameters()) do p.requires_grad = v end
  return self
end

--- Applies fn to every module (children first), like torch's Module.apply.
function Module:apply(fn)
  for _, m in ipairs(self:children()) do m:apply(fn) end
  fn(self)
  return self
end

---------------------------------------------------------------- devices, dtypes
-- replaces each parameter/buffer by f(t) (a new leaf when it changed)
-- Each tensor is converted once: a tensor held under two names (tied embedding and decoder
-- weights, a shared buffer) is one new tensor under both afterwards, as PyTorch's _apply keeps them.
local function map_tensors(self, f)
  local done = {}
  for _, m in ipairs(self:modules()) do
    for _, k in ipairs(names(m, '_param_names')) do
      local p = rawget(m, k)
      if is_tensor(p) then
        local q = done[p]
        if q == nil then
          q = f(p)
          if q ~= p then
            q = autograd.no_grad(function() return q:detach() end)
            q.requires_grad = p.requires_grad
            if param_set[p] then param_set[q] = true end
            if p.grad then q.grad = f(p.grad) end
          end
          done[p] = q
        end
        if q ~= p then rawset(m, k, q) end
      end
    end
    for _, k in ipairs(names(m, '_buffer_names')) do
      local b = rawget(m, k)
      if is_tensor(b) then
        local q = done[b]
        if q == nil then q = f(b); done[b] = q end
        rawset(m, k, q)
      end
    end
  end
  return self
end

--- module:to(device | dtype | {device=, dtype=}): moves/casts parameters and buffers
--- (dtype casts apply to floating point tensors only). Returns self. Create the
--- optimizer after moving the model: moved parameters are new tensors.
function Module:to(a, b)
  return map_tensors(self, function(t)
    local r = t
    for _, x in ipairs({ a, b }) do
      if x ~= nil then
        local is_dtype = type(x) == 'string' and T.dtype_ids[x] ~= nil
        if is_dtype or (type(x) == 'table' and x.dtype and not x.device) then
          if t:is_floating_point() then r = r:to(x) end
        elseif type(x) == 'table' and x.dtype and x.device then
          r = r:to({ device = x.device })
          if t:is_floating_point() then r = r:to(x.dtype) end
        else
          r = r:to(x)
        end
      end
    end
    return r
  end)
end
function Module:float() return self:to('float32') end
function Module:double() return self:to('float64') end
function Module:half() return self:to('float16') end
function Module:cpu() return self:to('cpu') end
function Module:cuda(k) return self:to('cuda:' .. (k or 0)) end

---------------------------------------------------------------- state dicts
-- f(key, tensor, module, local_name) for each state dict entry, module by module as
-- PyTorch's: a module's parameters, then its persistent buffers, then each child's
-- entries under 'child.'; a tensor held under two names (tied weights) and a submodule
-- held under two names appear under each name. A child under a number (a position in a
-- Sequential, ModuleList, ParametrizationList: 1, 2, ...) is named k - 1 + base: base 1 gives
-- dplhost's keys ('1.weight'), base 0 PyTorch's ('0.weight'); names of parameters and
-- buffers (weight_ih_l0) and string children never change.
local function each_entry(m, prefix, f, stack, base)
  if stack[m] then return end -- a cycle
  stack[m] = true
  for _, k in ipairs(names(m, '_param_names')) do
    local t = rawget(m, k)
    if is_tensor(t) then f(prefix .. tostring(k), t, m, k) end
  end
  local np = rawget(m, '_nonpersistent')
  for _, k in ipairs(names(m, '_buffer_names')) do
    local t = rawget(m, k)
    if is_tensor(t) and not (np and np[k]) then f(prefix .. tostring(k), t, m, k) end
  end
  for _, k in ipairs(names(m, '_module_names')) do
    local c = get_child(m, k)
    if is_module(c) then
      local kn = (type(k) == 'number' and base ~= 1) and string.format('%d', k - 1 + base) or tostring(k)
      each_entry(c, prefix .. kn .. '.', f, stack, base)
    end
  end
  stack[m] = nil
end

-- the index_base option of state_dict / load_state_dict / state_dict_keys: 1 (dplhost's
-- keys, the default) or 0 (PyTorch's)
local function index_base(fn, opts)
  local b = opts and opts.index_base
  if b == nil then return 1 end
  if b ~= 0 and b ~= 1 then
    error(fmt("%s: index_base must be 1 (dplhost's keys, '1.weight') or 0 (PyTorch's, '0.weight'), got %s", fn,
      tostring(b)), 3)
  end
  return b
end
Module._index_base = index_base

--- A table 'qualified.name' -> tensor (parameters and persistent buffers, detached, sharing
--- storage). Tied weights are there under each name, as in PyTorch.
--- state_dict{prefix='', keep_vars=false, index_base=1}: keys start with prefix; keep_vars keeps
--- the tensors themselves (not detached), as PyTorch's keywords; index_base=0 numbers the
--- positions in Sequential / ModuleList / parametrization lists from 0, PyTorch's keys.
function Module:state_dict(opts, ...)
  if (opts ~= nil and type(opts) ~= 'table') or select('#', ...) > 0 then
    error(fmt("state_dict: expected nil or an options table {prefix=, keep_vars=, index_base=}, got %s (PyTorch's positional destination, prefix, keep_vars are not supported)", select('#', ...) > 0 and 'more arguments' or type(opts)), 2)
  end
  options.check(opts, STATE_KEYS, 'state_dict')
  local prefix = opts and opts.prefix or ''
  if type(prefix) ~= 'string' then error(fmt('state_dict: prefix must be a string, got %s', type(prefix)), 2) end
  local keep = opts and opts.keep_vars
  local base = index_base('state_dict', opts)
  local sd = {}
  each_entry(self, prefix, function(k, t) sd[k] = keep and t or t:detach() end, {}, base)
  return sd
end

-- the module at a dotted path ('' is self), or an error naming the missing part
local function submodule(self, fn, target)
  if type(target) ~= 'string' then error(fmt('%s: the target must be a string, got %s', fn, type(target)), 3) end
  local m, path = self, {}
  if target == '' then return m end
  for part in (target .. '.'):gmatch('([^.]*)%.') do
    local c = get_child(m, part)
    if c == nil and tonumber(part) then c = get_child(m, tonumber(part)) end
    if not is_module(c) then
      error(fmt("%s: %s has no submodule '%s' (in '%s')", fn, #path == 0 and m.__name or table.concat(path, '.'),
        part, target), 3)
    end
    path[#path + 1] = part
    m = c
  end
  return m
end
--- get_submodule('a.b'), get_parameter('a.b.weight'), get_buffer('bn.running_mean'): PyTorch's
--- (an error naming the missing part).
function Module:get_submodule(target) return submodule(self, 'get_submodule', target) end
local function get_tensor(self, fn, target, list, what)
  if type(target) ~= 'string' then error(fmt('%s: the target must be a string, got %s', fn, type(target)), 3) end
  local mod_path, name = target:match('^(.*)%.([^.]*)$')
  if not mod_path then mod_path, name = '', target end
  local m = submodule(self, fn, mod_path)
  if list == '_param_names' then promote(m) end
  if not has_name(m, list, name) or not is_tensor(rawget(m, name)) then
    error(fmt("%s: %s has no %s '%s'", fn, mod_path == '' and m.__name or mod_path, what, name), 3)
  end
  return rawget(m, name)
end
function Module:get_parameter(target) return get_tensor(self, 'get_parameter', target, '_param_names', 'parameter') end
function Module:get_buffer(target) return get_tensor(self, 'get_buffer', target, '_buffer_names', 'buffer') end

--- Names of the state dict entries, in PyTorch's order (module by module);
--- state_dict_keys{index_base=0} gives PyTorch's names.
function Module:state_dict_keys(opts)
  if opts ~= nil and type(opts) ~= 'table' then
    error(fmt('state_dict_keys: expected nil or an options table {index_base=}, got %s', type(opts)), 2)
  end
  options.check(opts, INDEX_KEYS, 'state_dict_keys')
  local base = index_base('state_dict_keys', opts)
  local r = {}
  each_entry(self, '', function(k) r[#r + 1] = k end, {}, base)
  return r
end

local function shape_str(t) return '[' .. table.concat(t:size(), ', ') .. ']' end

-- what loading sd would do with the model's keys numbered from base: the value for each key
-- (in order), and the missing keys, unexpected keys and mismatches
local function load_plan(self, sd, base)
  local targets, order, owners = {}, {}, {}
  each_entry(self, '', function(k, t, m, name)
    targets[k] = t
    order[#order + 1] = k
    owners[k] = { m, name }
  end, {}, base)
  -- a tensor's value in sd under any of its names
  local by_tensor = {}
  for _, k in ipairs(order) do
    local v = sd[k]
    if v ~= nil and by_tensor[targets[k]] == nil then by_tensor[targets[k]] = v end
  end
  local values, missing, unexpected, mismatch = {}, {}, {}, {}
  for _, k in ipairs(order) do
    local v, t = sd[k], targets[k]
    if v == nil then v = by_tensor[t] end
    if v == nil then
      local m, name = owners[k][1], owners[k][2]
      if m._load_default then v = m:_load_default(name) end
    end
    if v == nil then missing[#missing + 1] = k
    elseif not is_tensor(v) then mismatch[#mismatch + 1] = fmt('%s: expected a tensor, got %s', k, type(v))
    elseif table.concat(v:size(), 'x') ~= table.concat(t:size(), 'x') then
      mismatch[#mismatch + 1] = fmt('%s: checkpoint shape %s, model shape %s', k, shape_str(v), shape_str(t))
    else
      values[k] = v
    end
  end
  local ukeys = {}
  for k in pairs(sd) do if targets[k] == nil then ukeys[#ukeys + 1] = tostring(k) end end
  table.sort(ukeys)
  for _, k in ipairs(ukeys) do unexpected[#unexpected + 1] = k end
  return { targets = targets, order = order, values = values, missing = missing, unexpected = unexpected,
    mismatch = mismatch }
end

-- a module with uninitialized (lazy) parameters makes them from the shapes in sd under its
-- prefix, before the keys are compared (PyTorch's LazyModuleMixin load hook): m:_lazy_load(sd,
-- prefix), then its children's
local function lazy_load(m, sd, prefix, base, stack)
  if stack[m] then return end
  stack[m] = true
  if m._lazy_load then m:_lazy_load(sd, prefix) end
  for _, k in ipairs(names(m, '_module_names')) do
    local c = get_child(m, k)
    if is_module(c) then
      local kn = (type(k) == 'number' and base ~= 1) and string.format('%d', k - 1 + base) or tostring(k)
      lazy_load(c, sd, prefix .. kn .. '.', base, stack)
    end
  end
  stack[m] = nil
end

--- Copies a state dict into the parameters and buffers (opts: a table, or PyTorch's positional
--- strict flag, load_state_dict(sd, false)). {strict=true} (default) raises an
--- error listing the missing keys, the unexpected keys and the shape mismatches; with
--- strict=false, missing/unexpected keys are returned ({missing_keys=, unexpected_keys=}).
--- Shape mismatches are an error in both modes. A tensor held under several names (tied
--- weights) is loaded from any of them: a state dict that has one of the names (as
--- dplhost's before 0.1 wrote) is complete. A module may supply a value for a key the state
--- dict lacks with _load_default(local_name) (BatchNorm: num_batches_tracked = 0).
--- {index_base=0} reads PyTorch's keys (positions in Sequential / ModuleList numbered from 0);
--- an error whose keys would all match with the other numbering says so.
function Module:load_state_dict(sd, opts)
  if type(sd) ~= 'table' then error(fmt('load_state_dict: expected a table, got %s', type(sd)), 2) end
  if type(opts) == 'boolean' then opts = { strict = opts } end -- PyTorch's positional load_state_dict(sd, False)
  if opts ~= nil and type(opts) ~= 'table' then
    error(fmt('load_state_dict: expected nil or an options table {strict=, index_base=}, got %s', type(opts)), 2)
  end
  options.check(opts, LOAD_KEYS, 'load_state_dict')
  local strict = not (opts and opts.strict == false)
  local base = index_base('load_state_dict', opts)
  lazy_load(self, sd, '', base, {})
  local plan = load_plan(self, sd, base)
  local missing, unexpected, mismatch = plan.missing, plan.unexpected, plan.mismatch
  if #mismatch > 0 or (strict and (#missing > 0 or #unexpected > 0)) then
    local parts = { fmt('Error(s) in loading state_dict for %s:', self.__name) }
    if strict and #missing > 0 then parts[#parts + 1] = '  Missing key(s): ' .. table.concat(missing, ', ') end
    if strict and #unexpected > 0 then parts[#parts + 1] = '  Unexpected key(s): ' .. table.concat(unexpected, ', ') end
    if #mismatch > 0 then parts[#parts + 1] = '  Size mismatch: ' .. table.concat(mismatch, '; ') end
    local other = 1 - base
    local alt = load_plan(self, sd, other)
    if #alt.missing == 0 and #alt.unexpected == 0 and #alt.mismatch == 0 then
      parts[#parts + 1] = other == 0
        and ("  The keys are PyTorch's, with positions in Sequential / ModuleList / parametrizations numbered"
          .. " from 0 ('0.weight' for dplhost's '1.weight'): load them with load_state_dict(sd, {index_base = 0})")
        or ("  The keys are dplhost's, with positions in Sequential / ModuleList / parametrizations numbered"
          .. " from 1: load them with load_state_dict(sd) (index_base = 1)")
    end
    error(table.concat(parts, '\n'), require('dpl.errors').RuntimeError)
  end
  local targets, values = plan.targets, plan.values
  autograd.no_grad(function()
    for _, k in ipairs(plan.order) do
      local v = values[k]
      if v ~= nil then targets[k]:copy_(v) end
    end
  end)
  return { missing_keys = missing, unexpected_keys = unexpected }
end

---------------------------------------------------------------- printing
--- One line describing the layer's settings (subclasses override).
function Module:extra_repr() return '' end

local function count_str(n)
  local s = tostring(n)
  local r = s:reverse():gsub('(%d%d%d)', '%1,'):reverse()
  return (r:gsub('^,', ''))
end
Module._count_str = count_str

local function repr(m, indent)
  local kids = {}
  for k, c in m:named_children() do kids[#kids + 1] = { k, c } end
  -- dpl.metrics objects held as attributes print as children, as torchmetrics' modules do
  local metrics = {}
  for k, v in pairs(m) do
    -- (the class's own flags: indexing other objects, a Trainer say, may raise)
    local mt = type(k) == 'string' and type(v) == 'table' and getmetatable(v)
    if type(mt) == 'table' and (rawget(mt, '__is_metric') or rawget(mt, '__is_metric_collection')) then
      metrics[#metrics + 1] = k
    end
  end
  table.sort(metrics)
  for _, k in ipairs(metrics) do kids[#kids + 1] = { k, m[k], true } end
  local head = m.__name .. '(' .. m:extra_repr()
  local own = 0
  for _, p in ipairs(m:parameters(false)) do own = own + p:numel() end
  if #kids == 0 then
    local s = head .. ')'
    if own > 0 then s = s .. '  -- ' .. count_str(own) .. ' params' end
    return s
  end
  local lines = { head }
  for _, e in ipairs(kids) do
    local body = e[3] and tostring(e[2]):gsub('\n', '\n' .. indent .. '  ') or repr(e[2], indent .. '  ')
    lines[#lines + 1] = indent .. '  (' .. tostring(e[1]) .. '): ' .. body
  end
  lines[#lines + 1] = indent .. ')  -- ' .. count_str(m:num_parameters()) .. ' params'
  return table.concat(lines, '\n')
end
function Module:__tostring() return repr(self, '') end

-- the layer's name in error messages: "Linear 'fc1'" or "Linear"
function Module:_label()
  local n = rawget(self, '_name')
  if n then return fmt("%s '%s'", self.__name, n) end
  return self.__name
end

return Module
