-- dpl.optim: optimizers with PyTorch's update formulas, param groups and state dicts.
--   optim.SGD(params, {lr=, momentum=0, dampening=0, nesterov=false, weight_decay=0, maximize=false})
--   optim.Adam(params, {lr=1e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=0, amsgrad=false})
--   optim.AdamW(params, {... weight_decay=1e-2})
--   optim.RMSprop(params, {lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=false})
--   optim.Adagrad(params, {lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10})
--   optim.Adamax(params, {lr=2e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=0})
--   optim.NAdam(params, {lr=2e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=0, momentum_decay=4e-3})
--   optim.RAdam(params, {lr=1e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=0})
--   optim.Rprop, optim.ASGD, optim.LBFGS: lua/dpl/optim/extra.lua
-- params: a list of tensors, a module (its parameters()), or a list of groups
-- {{params={...}, lr=...}, ...}. Steps run without recording gradients.
-- SGD, Adam and AdamW also take foreach = nil | true | false (kept on the optimizer, not in the
-- groups or the state dict): nil and true update a group in one multi-tensor step
-- (dpl_sgd_step_multi / dpl_adam_step_multi, the same rounding as the per-tensor ops: on a real
-- GPU a few kernel launches, on the CPU one vectorized pass over each tensor instead of two to
-- five: the MLP's SGD-momentum step 42 -> 30 us, Adam 257 -> 80 us); false always updates one
-- tensor at a time. Groups that do not qualify (mixed dtypes or devices, float16/bfloat16,
-- non-contiguous tensors or states) take the per-tensor path. RMSprop, Adagrad, Adamax, NAdam and
-- RAdam always update one tensor at a time (tensor ops; they accept foreach, as PyTorch 1.13).
-- A group's options are checked when it is added and at every step (a value set by hand in
-- param_groups included): a bad one is a MisconfigurationException naming the group and option.
local ffi = require 'ffi'
local bit = require 'bit'
local class = require 'dpl.class'
local T = require 'dpl.tensor'
local capi = require 'dpl.capi'
local autograd = require 'dpl.autograd'
local errors = require 'dpl.errors'
local options = require 'dpl.options'

local fmt = string.format

-- Errors are objects whose tostring reads "ClassName: message" (DESIGN.md).
local lua_error = error
local error = require('dpl.errors').raise -- string messages become ValueError objects
local is_tensor = T.is_tensor
local C = capi.C

local optim = {}

local Optimizer = class.Object:extend('Optimizer')
optim.Optimizer = Optimizer

-- the constructors' options (an unknown key is an error; param groups, as PyTorch's, may
-- carry extra keys)
local check_opts, keys = options.check, options.keys
local SGD_KEYS = keys('lr', 'momentum', 'dampening', 'weight_decay', 'nesterov', 'maximize', 'foreach')
local ADAM_KEYS = keys('lr', 'betas', 'eps', 'weight_decay', 'amsgrad', 'maximize', 'foreach')
local RMSPROP_KEYS = keys('lr', 'alpha', 'eps', 'weight_decay', 'momentum', 'centered', 'maximize', 'foreach')
local ADAGRAD_KEYS = keys('lr', 'lr_decay', 'weight_decay', 'initial_accumulator_value', 'eps', 'maximize', 'foreach')
local ADAMAX_KEYS = keys('lr', 'betas', 'eps', 'weight_decay', 'maximize', 'foreach')
local NADAM_KEYS = keys('lr', 'betas', 'eps', 'weight_decay', 'momentum_decay', 'foreach')
local RADAM_KEYS = keys('lr', 'betas', 'eps', 'weight_decay', 'foreach')
local ZERO_GRAD_KEYS = keys('set_to_none')
-- PyTorch's parameter order after params: the positional forms (SGD(params, 0.1, 0.9))
local POS = {
  SGD = { 'lr', 'momentum', 'dampening', 'weight_decay', 'nesterov' },
  Adam = { 'lr', 'betas', 'eps', 'weight_decay', 'amsgrad' },
  AdamW = { 'lr', 'betas', 'eps', 'weight_decay', 'amsgrad' },
  RMSprop = { 'lr', 'alpha', 'eps', 'weight_decay', 'momentum', 'centered' },
  Adagrad = { 'lr', 'lr_decay', 'weight_decay', 'initial_accumulator_value', 'eps' },
  Adamax = { 'lr', 'betas', 'eps', 'weight_decay' },
  NAdam = { 'lr', 'betas', 'eps', 'weight_decay', 'momentum_decay' },
  RAdam = { 'lr', 'betas', 'eps', 'weight_decay' },
}

local function misconf(msg, ...) errors.MisconfigurationException:raise(fmt(msg, ...), 4) end

local function show(v)
  if type(v) == 'string' then return fmt("'%s'", v) end
  if type(v) == 'table' then
    local parts = {}
    for i = 1, math.max(#v, 1) do parts[i] = show(v[i]) end
    return '{' .. table.concat(parts, ', ') .. '}'
  end
  return tostring(v)
end

local function is_num(v) return type(v) == 'number' and v == v end

-- A group's option checks (the class's _group_checks: a list of {key, kind}); kinds:
-- 'num' a number, 'nonneg' a number >= 0, 'bool' a boolean, 'betas' a pair of numbers in [0, 1).
local WHAT = { num = 'a number', nonneg = 'a non-negative number', bool = 'true or false',
  betas = 'a pair {beta1, beta2} of numbers in [0, 1)' }
local function value_ok(kind, v)
  if kind == 'bool' then return type(v) == 'boolean' end
  if kind == 'betas' then
    return type(v) == 'table' and is_num(v[1]) and is_num(v[2]) and v[1] >= 0 and v[1] < 1 and v[2] >= 0 and v[2] < 1
  end
  if kind == 'num' then return is_num(v) end
  return is_num(v) and v >= 0
end

local function copy_table(t)
  local r = {}
  for k, v in pairs(t) do r[k] = type(v) == 'table' and copy_table(v) or v end
  return r
end

--- Optimizer.__init(self, params, defaults): defaults fill the options missing in each group.
function Optimizer:__init(params, defaults)
  if type(params) == 'table' and type(params.parameters) == 'function' then params = params:parameters() end
  if is_tensor(params) then params = { params } end
  if type(params) ~= 'table' or #params == 0 then
    misconf('%s: params must be a non-empty list of tensors or of param groups, got %s', self.__name,
      type(params) == 'table' and 'an empty list' or type(params))
  end
  if defaults ~= nil and type(defaults) ~= 'table' then
    misconf('%s: defaults must be a table of hyper-parameters, got %s', self.__name, type(defaults))
  end
  self.defaults = defaults or {}
  self.param_groups = {}
  self.state = setmetatable({}, { __mode = 'k' }) -- param -> state table
  if is_tensor(params[1]) then
    self:add_param_group({ params = params })
  else
    for _, g in ipairs(params) do self:add_param_group(g) end
  end
end

function Optimizer:add_param_group(g)
  if type(g) ~= 'table' or type(g.params) ~= 'table' then misconf('%s: a param group needs params = {...}', self.__name) end
  local group = {}
  for k, v in pairs(g) do group[k] = v end
  local ps = {}
  for i, p in ipairs(is_tensor(g.params) and { g.params } or g.params) do
    if not is_tensor(p) then misconf('%s: param %d of a group is not a tensor (%s)', self.__name, i, type(p)) end
    if not p.is_leaf then misconf("%s: can't optimize a non-leaf tensor (param %d)", self.__name, i) end
    for _, other in ipairs(self.param_groups) do
      for _, q in ipairs(other.params) do
        if q == p then misconf('%s: some parameters appear in more than one parameter group', self.__name) end
      end
    end
    ps[i] = p
  end
  group.params = ps
  for k, v in pairs(self.defaults) do
    if group[k] == nil then group[k] = type(v) == 'table' and copy_table(v) or v end
  end
  if type(group.lr) ~= 'number' or group.lr < 0 then
    misconf('%s: lr must be a non-negative number, got %s', self.__name, show(group.lr))
  end
  self:_check_group(group, #self.param_groups + 1)
  self.param_groups[#self.param_groups + 1] = group
end

--- _check_group(g, i): the group's options are of the kinds the class lists in _group_checks.
function Optimizer:_check_group(g, gi)
  local checks = self._group_checks
  if not checks then return end
  for _, c in ipairs(checks) do
    local k, kind = c[1], c[2]
    if not value_ok(kind, g[k]) then
      misconf('%s: param_groups[%d].%s must be %s, got %s', self.__name, gi, k, WHAT[kind], show(g[k]))
    end
  end
end

local drop_grad, grad_of = autograd.drop_grad, autograd.grad_of

local function zero_grads(self, to_none)
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do
      if to_none then drop_grad(p)
      elseif p.grad then
        -- as torch: detach_ a gradient with history, else only drop requires_grad (a
        -- gradient may be a view: DDP's gradient_as_bucket_view)
        local g = p.grad
        if g.grad_fn then g:detach_() elseif g.requires_grad then g:requires_grad_(false) end
        g:zero_()
      end
    end
  end
end

--- zero_grad({set_to_none=true}) (or zero_grad(false), as Module:zero_grad): clears the
--- gradients of every parameter; set_to_none=false zeroes them in place (detached), as PyTorch.
function Optimizer:zero_grad(opts)
  local to_none
  if type(opts) == 'boolean' then
    to_none = opts
  else
    check_opts(opts, ZERO_GRAD_KEYS, 'zero_grad')
    to_none = not (opts and opts.set_to_none == false)
  end
  autograd.no_grad(zero_grads, self, to_none) -- (no closure per call: compiled)
end

--- step([closure]): one update; closure (re-evaluating the loss) is called first with grad on.
-- (each optimizer defines its update; the base class is abstract, as torch.optim.Optimizer)
function Optimizer:update_param()
  errors.NotImplementedError:raise(('%s.step: the base Optimizer has no update rule (subclass it and define '
    .. 'update_param, or use optim.SGD, optim.Adam, ...)'):format(self.__name or 'Optimizer'), 2)
end

function Optimizer:step(closure)
  local loss
  if closure then loss = autograd.enable_grad(closure) end
  local prev = autograd.set_grad_enabled(false)
  local ok, err = pcall(self._update, self)
  autograd.set_grad_enabled(prev)
  if not ok then lua_error(err, 0) end
  return loss
end

function Optimizer:_update()
  for gi, g in ipairs(self.param_groups) do
    self:_check_group(g, gi)
    self:_update_group(g)
  end
end

--- The per-tensor update of one group.
-- (the built-in optimizers' update_param read the gradient through grad_of: they keep no
-- reference to it, so zero_grad may release it; a subclass's own update_param gets p.grad)
local builtin_update = setmetatable({}, { __mode = 'k' })
function Optimizer:_update_group(g)
  local get = builtin_update[self.update_param] and grad_of or nil
  for _, p in ipairs(g.params) do
    local grad
    if get then grad = get(p) else grad = p.grad end
    if grad then
      local st = self.state[p]
      if not st then st = {}; self.state[p] = st end
      self:update_param(p, grad, g, st)
    end
  end
end

-- a state value copied for a state dict: tensors through f, lists (LBFGS's history) element
-- by element, other values as they are
local function clone_state(v, f)
  if is_tensor(v) then return f(v) end
  if type(v) == 'table' and getmetatable(v) == nil then
    local r = {}
    for k, x in pairs(v) do r[k] = clone_state(x, f) end
    return r
  end
  return v
end

--- {state = {[i] = {...}}, param_groups = {{lr=, ..., params = {i...}}}}: i numbers the
--- parameters across groups in order (1-based). Tensors in state are clones.
function Optimizer:state_dict()
  local groups, state = {}, {}
  local i = 0
  for _, g in ipairs(self.param_groups) do
    local pg = {}
    for k, v in pairs(g) do if k ~= 'params' then pg[k] = type(v) == 'table' and copy_table(v) or v end end
    pg.params = {}
    for _, p in ipairs(g.params) do
      i = i + 1
      pg.params[#pg.params + 1] = i
      local st = self.state[p]
      if st then
        local s = {}
        for k, v in pairs(st) do s[k] = clone_state(v, function(t) return t:clone() end) end
        state[i] = s
      end
    end
    groups[#groups + 1] = pg
  end
  return { state = state, param_groups = groups }
end

function Optimizer:load_state_dict(sd)
  if type(sd) ~= 'table' or type(sd.param_groups) ~= 'table' then
    error('load_state_dict: expected {state=, param_groups=}', 2)
  end
  if sd.state ~= nil and type(sd.state) ~= 'table' then
    error(fmt('load_state_dict: state must be a table (parameter number -> its state), got %s', type(sd.state)), 2)
  end
  if #sd.param_groups ~= #self.param_groups then
    error(fmt('load_state_dict: the state dict has %d param groups, the optimizer %d', #sd.param_groups,
      #self.param_groups), 2)
  end
  -- everything checked before anything is changed
  local groups = {}
  for gi, g in ipairs(self.param_groups) do
    local sg = sd.param_groups[gi]
    if type(sg) ~= 'table' or type(sg.params) ~= 'table' then
      error(fmt('load_state_dict: param_groups[%d] must be a table with params = {...}, got %s', gi,
        type(sg) == 'table' and 'no params list' or type(sg)), 2)
    end
    if #sg.params ~= #g.params then
      error(fmt('load_state_dict: param group %d has %d params in the state dict, %d in the optimizer', gi,
        #sg.params, #g.params), 2)
    end
    for j = 1, #g.params do
      local s = sd.state and sd.state[sg.params[j]]
      if s ~= nil and type(s) ~= 'table' then
        error(fmt('load_state_dict: the state of parameter %s (param_groups[%d].params[%d]) must be a table, got %s',
          tostring(sg.params[j]), gi, j, type(s)), 2)
      end
    end
    local ng = { params = g.params }
    for k, v in pairs(g) do if k ~= 'params' then ng[k] = v end end
    for k, v in pairs(sg) do if k ~= 'params' then ng[k] = type(v) == 'table' and copy_table(v) or v end end
    self:_check_group(ng, gi)
    groups[gi] = ng
  end
  local i = 0
  for gi, g in ipairs(self.param_groups) do
    local sg = sd.param_groups[gi]
    for k, v in pairs(groups[gi]) do if k ~= 'params' then g[k] = v end end
    for j, p in ipairs(g.params) do
      i = i + 1
      local s = sd.state and sd.state[sg.params[j]]
      if s then
        local st = {}
        -- on the parameter's device and in its dtype (a CPU checkpoint resumed on a GPU)
        for k, v in pairs(s) do st[k] = clone_state(v, function(t) return t:to(p.device):to(p.dtype):clone() end) end
        self.state[p] = st
      else
        self.state[p] = nil
      end
    end
  end
end

function Optimizer:__tostring()
  local lines = { self.__name .. ' (' }
  for i, g in ipairs(self.param_groups) do
    local keys = {}
    for k in pairs(g) do if k ~= 'params' then keys[#keys + 1] = k end end
    table.sort(keys)
    lines[#lines + 1] = fmt('Parameter Group %d (%d tensors)', i, #g.params)
    for _, k in ipairs(keys) do
      local v = g[k]
      if type(v) == 'table' then v = '{' .. table.concat(v, ', ') .. '}' end
      lines[#lines + 1] = fmt('    %s: %s', k, tostring(v))
    end
  end
  lines[#lines + 1] = ')'
  return table.concat(lines, '\n')
end

local function check_range(name, opt, v, lo, hi)
  if type(v) ~= 'number' or v < lo or (hi and v >= hi) then
    misconf('%s: invalid %s value: %s', name, opt, show(v))
  end
end
local function check_betas(name, b)
  if type(b) ~= 'table' then misconf('%s: betas must be a pair {beta1, beta2}, got %s', name, show(b)) end
  check_range(name, 'beta parameter at index 1', b[1], 0, 1)
  check_range(name, 'beta parameter at index 2', b[2], 0, 1)
end
local ADAM_CHECKS = { { 'lr', 'nonneg' }, { 'betas', 'betas' }, { 'eps', 'nonneg' }, { 'weight_decay', 'nonneg' } }

---------------------------------------------------------------- multi-tensor steps
local DEVMEM = 2 -- DPL_DEVMEM (src/tensor/dpl_tensor_internal.h): storage in GPU memory

local function check_foreach(name, v)
  if v ~= nil and type(v) ~= 'boolean' then misconf('%s: foreach must be nil, true or false, got %s', name, tostring(v)) end
  return v
end

local function same_layout(t, p)
  if t._dtype ~= p._dtype or t._devtype ~= p._devtype or t._devindex ~= p._devindex or t._ndim ~= p._ndim
    or bit.band(t._flags, DEVMEM) ~= bit.band(p._flags, DEVMEM) or not t:is_contiguous() then
    return false
  end
  for d = 0, p._ndim - 1 do if t._shape[d] ~= p._shape[d] then return false end end
  return true
end

-- A state tensor the multi-tensor step can update in place (or none yet).
local function state_ok(t, p) return t == nil or (is_tensor(t) and same_layout(t, p)) end

-- The group's parameters that have gradients, with those gradients, when they can take one
-- multi-tensor step: float32 or float64, one dtype, one device, contiguous, gradients shaped
-- as their parameters. nil otherwise.
local function multi_list(self, g)
  if self.foreach == false then return nil end
  local ps, gs, p0 = {}, {}, nil
  for _, p in ipairs(g.params) do
    local grad = grad_of(p)
    if grad then
      if p._dtype > 1 or not p:is_contiguous() or not same_layout(grad, p) then return nil end
      if not p0 then
        p0 = p
      elseif p._dtype ~= p0._dtype or p._devtype ~= p0._devtype or p._devindex ~= p0._devindex
        or bit.band(p._flags, DEVMEM) ~= bit.band(p0._flags, DEVMEM) then
        return nil
      end
      ps[#ps + 1], gs[#gs + 1] = p, grad
    end
  end
  if #ps == 0 then return nil end
  return ps, gs
end

local function tensor_array(list)
  local a = ffi.new('dpl_tensor*[?]', #list)
  for i = 1, #list do a[i - 1] = list[i] end
  return a
end

local function call(st) if st ~= 0 then T._fail(2, st) end end

optim._multi_steps = 0 -- group updates taken by the multi-tensor entry points (for tests)

---------------------------------------------------------------- SGD
optim.SGD = Optimizer:extend('SGD')
function optim.SGD:__init(params, ...)
  local opts = options.positional('SGD', POS.SGD, ...)
  check_opts(opts, SGD_KEYS, 'SGD')
  opts = opts or {}
  if opts.lr == nil then misconf('SGD: lr is required') end
  local d = { lr = opts.lr, momentum = opts.momentum or 0, dampening = opts.dampening or 0,
    weight_decay = opts.weight_decay or 0, nesterov = opts.nesterov or false, maximize = opts.maximize or false }
  check_range('SGD', 'momentum', d.momentum, 0)
  check_range('SGD', 'weight_decay', d.weight_decay, 0)
  if d.nesterov and (d.momentum <= 0 or d.dampening ~= 0) then
    misconf('SGD: nesterov momentum requires a momentum and zero dampening')
  end
  self.foreach = check_foreach('SGD', opts.foreach)
  Optimizer.__init(self, params, d)
end
optim.SGD._group_checks = { { 'lr', 'nonneg' }, { 'momentum', 'nonneg' }, { 'dampening', 'num' },
  { 'weight_decay', 'nonneg' }, { 'nesterov', 'bool' }, { 'maximize', 'bool' } }
-- One multi-tensor step for the group; false (nothing changed) when its tensors do not qualify.
local function sgd_multi(self, o, ps, gs)
  local n, m = #ps, o.momentum
  for _, p in ipairs(ps) do
    local st = self.state[p]
    if m ~= 0 and st and not state_ok(st.momentum_buffer, p) then return false end
  end
  local bufs, init
  if m ~= 0 then bufs, init = ffi.new('dpl_tensor*[?]', n), ffi.new('uint8_t[?]', n) end
  for i, p in ipairs(ps) do
    local st = self.state[p]
    if not st then st = {}; self.state[p] = st end
    if m ~= 0 then
      local buf = st.momentum_buffer
      if not buf then
        buf = T.empty_like(p)
        st.momentum_buffer = buf
        init[i - 1] = 1
      end
      bufs[i - 1] = buf
    end
  end
  local opts = ffi.new('dpl_sgd_opts', { lr = o.lr, momentum = m, dampening = o.dampening,
    weight_decay = o.weight_decay, nesterov = o.nesterov and 1 or 0, maximize = o.maximize and 1 or 0 })
  call(C.dpl_sgd_step_multi(n, tensor_array(ps), tensor_array(gs), bufs, init, opts))
  optim._multi_steps = optim._multi_steps + 1
  return true
end
function optim.SGD:_update_group(g)
  local ps, gs = multi_list(self, g)
  if not (ps and sgd_multi(self, g, ps, gs)) then Optimizer._update_group(self, g) end
end
function optim.SGD:update_param(p, g, o, st)
  if o.maximize then g = -g end
  if o.weight_decay ~= 0 then g = g:add(p, o.weight_decay) end
  local m = o.momentum
  if m ~= 0 then
    local buf = st.momentum_buffer
    if not buf then
      buf = g:clone()
      st.momentum_buffer = buf
    else
      buf:mul_(m):add_(g, 1 - o.dampening)
    end
    if o.nesterov then g = g:add(buf, m) else g = buf end
  end
  p:add_(g, -o.lr)
end

---------------------------------------------------------------- Adam, AdamW
local function adam_init(self, name, params, opts, wd_default, decoupled)
  check_opts(opts, ADAM_KEYS, name)
  opts = opts or {}
  local d = { lr = opts.lr or 1e-3, betas = opts.betas or { 0.9, 0.999 }, eps = opts.eps or 1e-8,
    weight_decay = opts.weight_decay or wd_default, amsgrad = opts.amsgrad or false, maximize = opts.maximize or false }
  check_range(name, 'lr', d.lr, 0)
  check_range(name, 'eps', d.eps, 0)
  check_betas(name, d.betas)
  check_range(name, 'weight_decay', d.weight_decay, 0)
  self.decoupled = decoupled
  self.foreach = check_foreach(name, opts.foreach)
  Optimizer.__init(self, params, d)
end
-- a parameter's Adam state at its first step (both paths)
local function adam_state_new(st, p, amsgrad)
  st.step = 0
  st.exp_avg = T.zeros_like(p)
  st.exp_avg_sq = T.zeros_like(p)
  if amsgrad then st.max_exp_avg_sq = T.zeros_like(p) end
end
local function adam_update(self, p, g, o, st)
  if o.maximize then g = -g end
  local b1, b2 = o.betas[1], o.betas[2]
  if not st.step then adam_state_new(st, p, o.amsgrad) end
  st.step = st.step + 1
  local t = st.step
  if o.weight_decay ~= 0 then
    if self.decoupled then p:mul_(1 - o.lr * o.weight_decay)
    else g = g:add(p, o.weight_decay) end
  end
  local m, v = st.exp_avg, st.exp_avg_sq
  m:mul_(b1):add_(g, 1 - b1)
  v:mul_(b2):add_(g * g, 1 - b2)
  local bc1 = 1 - b1 ^ t
  local bc2 = 1 - b2 ^ t
  local vv = v
  if o.amsgrad then
    -- (amsgrad turned on in the group after steps without it: the maximum starts at zero;
    -- PyTorch 1.13 raises a KeyError)
    st.max_exp_avg_sq = (st.max_exp_avg_sq or T.zeros_like(p)):maximum(v)
    vv = st.max_exp_avg_sq
  end
  local denom = vv:sqrt():div_(math.sqrt(bc2)):add_(o.eps)
  p:add_(m / denom, -o.lr / bc1)
end
local function adam_multi(self, o, ps, gs)
  local n = #ps
  for _, p in ipairs(ps) do
    local st = self.state[p]
    if st and st.step then
      if type(st.step) ~= 'number' or not is_tensor(st.exp_avg) or not is_tensor(st.exp_avg_sq)
        or not state_ok(st.exp_avg, p) or not state_ok(st.exp_avg_sq, p)
        or (o.amsgrad and not (is_tensor(st.max_exp_avg_sq) and state_ok(st.max_exp_avg_sq, p))) then
        return false
      end
    end
  end
  local m, v = ffi.new('dpl_tensor*[?]', n), ffi.new('dpl_tensor*[?]', n)
  local mx = o.amsgrad and ffi.new('dpl_tensor*[?]', n) or nil
  local steps = ffi.new('double[?]', n)
  for i, p in ipairs(ps) do
    local st = self.state[p]
    if not st then st = {}; self.state[p] = st end
    if not st.step then adam_state_new(st, p, o.amsgrad) end
    st.step = st.step + 1
    steps[i - 1] = st.step
    m[i - 1], v[i - 1] = st.exp_avg, st.exp_avg_sq
    if mx then mx[i - 1] = st.max_exp_avg_sq end
  end
  local opts = ffi.new('dpl_adam_opts', { lr = o.lr, beta1 = o.betas[1], beta2 = o.betas[2], eps = o.eps,
    weight_decay = o.weight_decay, decoupled = self.decoupled and 1 or 0, amsgrad = o.amsgrad and 1 or 0,
    maximize = o.maximize and 1 or 0 })
  call(C.dpl_adam_step_multi(n, tensor_array(ps), tensor_array(gs), m, v, mx, steps, opts))
  optim._multi_steps = optim._multi_steps + 1
  return true
end
local function adam_update_group(self, g)
  local ps, gs = multi_list(self, g)
  if not (ps and adam_multi(self, g, ps, gs)) then Optimizer._update_group(self, g) end
end
optim.Adam = Optimizer:extend('Adam')
function optim.Adam:__init(params, ...)
  adam_init(self, 'Adam', params, options.positional('Adam', POS.Adam, ...), 0, false)
end
optim.Adam.update_param = adam_update
optim.Adam._update_group = adam_update_group
optim.Adam._group_checks = { ADAM_CHECKS[1], ADAM_CHECKS[2], ADAM_CHECKS[3], ADAM_CHECKS[4], { 'amsgrad', 'bool' },
  { 'maximize', 'bool' } }
optim.AdamW = Optimizer:extend('AdamW')
function optim.AdamW:__init(params, ...)
  adam_init(self, 'AdamW', params, options.positional('AdamW', POS.AdamW, ...), 1e-2, true)
end
optim.AdamW.update_param = adam_update
optim.AdamW._update_group = adam_update_group
optim.AdamW._group_checks = optim.Adam._group_checks

---------------------------------------------------------------- RMSprop
optim.RMSprop = Optimizer:extend('RMSprop')
function optim.RMSprop:__init(params, ...)
  local opts = options.positional('RMSprop', POS.RMSprop, ...)
  check_opts(opts, RMSPROP_KEYS, 'RMSprop')
  opts = opts or {}
  local d = { lr = opts.lr or 1e-2, alpha = opts.alpha or 0.99, eps = opts.eps or 1e-8,
    weight_decay = opts.weight_decay or 0, momentum = opts.momentum or 0, centered = opts.centered or false,
    maximize = opts.maximize or false }
  check_range('RMSprop', 'lr', d.lr, 0)
  check_range('RMSprop', 'eps', d.eps, 0)
  check_range('RMSprop', 'momentum', d.momentum, 0)
  check_range('RMSprop', 'weight_decay', d.weight_decay, 0)
  check_range('RMSprop', 'alpha', d.alpha, 0)
  self.foreach = check_foreach('RMSprop', opts.foreach)
  Optimizer.__init(self, params, d)
end
optim.RMSprop._group_checks = { { 'lr', 'nonneg' }, { 'alpha', 'nonneg' }, { 'eps', 'nonneg' },
  { 'weight_decay', 'nonneg' }, { 'momentum', 'nonneg' }, { 'centered', 'bool' }, { 'maximize', 'bool' } }
function optim.RMSprop:update_param(p, g, o, st)
  if o.maximize then g = -g end
  if not st.step then
    st.step = 0
    st.square_avg = T.zeros_like(p)
    if o.momentum > 0 then st.momentum_buffer = T.zeros_like(p) end
    if o.centered then st.grad_avg = T.zeros_like(p) end
  end
  st.step = st.step + 1
  -- momentum or centered turned on in the group after steps without: their state starts at
  -- zero (PyTorch 1.13 raises a KeyError)
  if o.momentum > 0 and not st.momentum_buffer then st.momentum_buffer = T.zeros_like(p) end
  if o.centered and not st.grad_avg then st.grad_avg = T.zeros_like(p) end
  if o.weight_decay ~= 0 then g = g:add(p, o.weight_decay) end
  local a = o.alpha
  st.square_avg:mul_(a):add_(g * g, 1 - a)
  local avg
  if o.centered then
    st.grad_avg:mul_(a):add_(g, 1 - a)
    avg = (st.square_avg - st.grad_avg * st.grad_avg):sqrt():add_(o.eps)
  else
    avg = st.square_avg:sqrt():add_(o.eps)
  end
  if o.momentum > 0 then
    st.momentum_buffer:mul_(o.momentum):add_(g / avg)
    p:add_(st.momentum_buffer, -o.lr)
  else
    p:add_(g / avg, -o.lr)
  end
end

---------------------------------------------------------------- Adagrad
-- Adagrad, Adamax, NAdam and RAdam: PyTorch 1.13's single-tensor formulas (the step count is a
-- number in the state, as Adam's); no multi-tensor path (foreach is accepted and checked, as
-- PyTorch's keyword, and changes nothing).
optim.Adagrad = Optimizer:extend('Adagrad')
function optim.Adagrad:__init(params, ...)
  local opts = options.positional('Adagrad', POS.Adagrad, ...)
  check_opts(opts, ADAGRAD_KEYS, 'Adagrad')
  opts = opts or {}
  local d = { lr = opts.lr or 1e-2, lr_decay = opts.lr_decay or 0, weight_decay = opts.weight_decay or 0,
    initial_accumulator_value = opts.initial_accumulator_value or 0, eps = opts.eps or 1e-10,
    maximize = opts.maximize or false }
  check_range('Adagrad', 'lr', d.lr, 0)
  check_range('Adagrad', 'lr_decay', d.lr_decay, 0)
  check_range('Adagrad', 'weight_decay', d.weight_decay, 0)
  check_range('Adagrad', 'initial_accumulator_value', d.initial_accumulator_value, 0)
  check_range('Adagrad', 'eps', d.eps, 0)
  self.foreach = check_foreach('Adagrad', opts.foreach)
  Optimizer.__init(self, params, d)
  -- PyTorch makes the state of every parameter in the constructor (step 0, sum filled)
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do
      self.state[p] = { step = 0, sum = T.full_like(p, g.initial_accumulator_value) }
    end
  end
end
optim.Adagrad._group_checks = { { 'lr', 'nonneg' }, { 'lr_decay', 'nonneg' }, { 'weight_decay', 'nonneg' },
  { 'initial_accumulator_value', 'nonneg' }, { 'eps', 'nonneg' }, { 'maximize', 'bool' } }
function optim.Adagrad:update_param(p, g, o, st)
  if not st.step then -- a parameter of a group added later
    st.step, st.sum = 0, T.full_like(p, o.initial_accumulator_value)
  end
  st.step = st.step + 1
  if o.maximize then g = -g end
  if o.weight_decay ~= 0 then g = g:add(p, o.weight_decay) end
  local clr = o.lr / (1 + (st.step - 1) * o.lr_decay)
  st.sum:add_(g * g)
  local std = st.sum:sqrt():add_(o.eps)
  p:add_(g / std, -clr)
end

-- the options of Adamax, NAdam and RAdam: Adam's (betas, eps, weight_decay) and extras
local function adam_like(self, name, params, opts, allowed, lr, extra)
  check_opts(opts, allowed, name)
  opts = opts or {}
  local d = { lr = opts.lr or lr, betas = opts.betas or { 0.9, 0.999 }, eps = opts.eps or 1e-8,
    weight_decay = opts.weight_decay or 0 }
  check_range(name, 'lr', d.lr, 0)
  check_range(name, 'eps', d.eps, 0)
  check_betas(name, d.betas)
  check_range(name, 'weight_decay', d.weight_decay, 0)
  for k, v in pairs(extra or {}) do
    d[k] = opts[k]
    if d[k] == nil then d[k] = v end
  end
  self.foreach = check_foreach(name, opts.foreach)
  return d
end

---------------------------------------------------------------- Adamax
optim.Adamax = Optimizer:extend('Adamax')
function optim.Adamax:__init(params, ...)
  local opts = options.positional('Adamax', POS.Adamax, ...)
  local d = adam_like(self, 'Adamax', params, opts, ADAMAX_KEYS, 2e-3, { maximize = false })
  Optimizer.__init(self, params, d)
end
optim.Adamax._group_checks = { ADAM_CHECKS[1], ADAM_CHECKS[2], ADAM_CHECKS[3], ADAM_CHECKS[4], { 'maximize', 'bool' } }
function optim.Adamax:update_param(p, g, o, st)
  if not st.step then st.step, st.exp_avg, st.exp_inf = 0, T.zeros_like(p), T.zeros_like(p) end
  if o.maximize then g = -g end
  st.step = st.step + 1
  local b1, b2 = o.betas[1], o.betas[2]
  if o.weight_decay ~= 0 then g = g:add(p, o.weight_decay) end
  st.exp_avg:mul_(b1):add_(g, 1 - b1)
  -- the exponentially weighted infinity norm: max(b2 * exp_inf, |g| + eps)
  st.exp_inf:copy_(st.exp_inf:mul_(b2):maximum(g:abs():add_(o.eps)))
  local clr = o.lr / (1 - b1 ^ st.step)
  p:add_(st.exp_avg / st.exp_inf, -clr)
end

---------------------------------------------------------------- NAdam
optim.NAdam = Optimizer:extend('NAdam')
function optim.NAdam:__init(params, ...)
  local opts = options.positional('NAdam', POS.NAdam, ...)
  local d = adam_like(self, 'NAdam', params, opts, NADAM_KEYS, 2e-3, { momentum_decay = 4e-3 })
  check_range('NAdam', 'momentum_decay', d.momentum_decay, 0)
  Optimizer.__init(self, params, d)
end
optim.NAdam._group_checks = { ADAM_CHECKS[1], ADAM_CHECKS[2], ADAM_CHECKS[3], ADAM_CHECKS[4],
  { 'momentum_decay', 'nonneg' } }
function optim.NAdam:update_param(p, g, o, st)
  if not st.step then st.step, st.mu_product, st.exp_avg, st.exp_avg_sq = 0, 1, T.zeros_like(p), T.zeros_like(p) end
  st.step = st.step + 1
  local t, b1, b2 = st.step, o.betas[1], o.betas[2]
  local bc2 = 1 - b2 ^ t
  if o.weight_decay ~= 0 then g = g:add(p, o.weight_decay) end
  -- the momentum cache mu_t and mu_{t+1}
  local mu = b1 * (1 - 0.5 * 0.96 ^ (t * o.momentum_decay))
  local mu_next = b1 * (1 - 0.5 * 0.96 ^ ((t + 1) * o.momentum_decay))
  st.mu_product = st.mu_product * mu
  -- PyTorch 1.13's product for the next step (mu counted twice; later versions drop it)
  local mu_product_next = st.mu_product * mu * mu_next
  st.exp_avg:mul_(b1):add_(g, 1 - b1)
  st.exp_avg_sq:mul_(b2):add_(g * g, 1 - b2)
  local denom = st.exp_avg_sq:div(bc2):sqrt():add_(o.eps)
  p:add_(g / denom, -o.lr * (1 - mu) / (1 - st.mu_product))
  p:add_(st.exp_avg / denom, -o.lr * mu_next / (1 - mu_product_next))
end

---------------------------------------------------------------- RAdam
optim.RAdam = Optimizer:extend('RAdam')
function optim.RAdam:__init(params, ...)
  local opts = options.positional('RAdam', POS.RAdam, ...)
  local d = adam_like(self, 'RAdam', params, opts, RADAM_KEYS, 1e-3)
  Optimizer.__init(self, params, d)
end
optim.RAdam._group_checks = ADAM_CHECKS
function optim.RAdam:update_param(p, g, o, st)
  if not st.step then st.step, st.exp_avg, st.exp_avg_sq = 0, T.zeros_like(p), T.zeros_like(p) end
  st.step = st.step + 1
  local t, b1, b2 = st.step, o.betas[1], o.betas[2]
  local bc1, bc2 = 1 - b1 ^ t, 1 - b2 ^ t
  if o.weight_decay ~= 0 then g = g:add(p, o.weight_decay) end
  st.exp_avg:mul_(b1):add_(g, 1 - b1)
  st.exp_avg_sq:mul_(b2):add_(g * g, 1 - b2)
  local corrected = st.exp_avg / bc1
  -- the length of the approximated simple moving average, its maximum, the rectification
  local rho_inf = 2 / (1 - b2) - 1
  local rho_t = rho_inf - 2 * t * (b2 ^ t) / bc2
  if rho_t > 5 then
    local rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
    local adaptive = st.exp_avg_sq:sqrt():add_(o.eps):reciprocal():mul_(math.sqrt(bc2))
    p:add_(corrected * o.lr * adaptive * rect, -1)
  else
    p:add_(corrected * o.lr, -1)
  end
end

---------------------------------------------------------------- schedulers
setmetatable(optim, { __dir = function() return { 'lr_scheduler', 'swa_utils' } end, __index = function(t, k)
  if k == 'lr_scheduler' then
    local m = require 'dpl.optim.lr_scheduler'
    rawset(t, k, m)
    return m
  end
  if k == 'swa_utils' then
    local m = require 'dpl.optim.swa_utils'
    rawset(t, k, m)
    return m
  end
end })
-- Rprop, ASGD and LBFGS (lua/dpl/optim/extra.lua)
require('dpl.optim.extra').install(optim, { Optimizer = Optimizer, misconf = misconf, check_range = check_range,
  show = show, check_foreach = check_foreach })
for _, name in ipairs { 'SGD', 'Adam', 'AdamW', 'RMSprop', 'Adagrad', 'Adamax', 'NAdam', 'RAdam', 'Rprop', 'ASGD' } do
  builtin_update[optim[name].update_param] = true
end
-- optim.sgd(feval, x, config) and Torch7's other closures: an error naming the class (docs/torch7.md)
require('dpl.nn.torch7').install_optim(optim)

return optim
