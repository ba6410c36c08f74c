-- dpl.autograd: a define-by-run tape on the tensors of dpl.tensor.
--
-- Autograd state lives in weak-keyed side tables keyed by the tensor handles
-- (cdata), never in the C struct: a collected tensor leaves nothing behind.
--   rg[t]       true when t requires grad (leaf or not)
--   gfn[t]      the node that produced t (nil for leaves)
--   grads[t]    the accumulated gradient of a leaf (or of a non-leaf after retain_grad)
-- A node is a table {bw = backward function, n = #inputs, [i] = edge, dt = output
-- dtype, ...saved values}. An edge is a node (a non-leaf input), a tensor (a leaf
-- that requires grad) or false (no gradient needed).
--
-- Differentiable tensor methods are wrapped here: the wrapper checks the grad mode
-- and whether an input requires grad, and otherwise tail-calls the original method.
-- S.live turns true when a tensor first gets requires_grad (or M.record starts a
-- graph) and stays so: until then the wrappers test that one field and nothing else
-- (no rg lookups, no version bumps: no tensor can need them). Each backward rule
-- lives in `rules`, keyed by op name.
--
-- Saved tensors are checked against a version counter per storage: an in-place op
-- bumps the counter of its storage, and backward refuses to use a saved tensor whose
-- storage changed since it was saved (as PyTorch's version counter does).
local M = {}
-- dpl.tensor requires this module at its end: when we are loaded first, it gets M
package.loaded['dpl.autograd'] = M

local ffi = require 'ffi'
local bit = require 'bit'
local C = require('dpl.capi').C
-- the dpl.tensor module autograd is installed into (M.install; set again when dpl.tensor is
-- reloaded, so that the wrappers always sit on the methods the tensor metatable uses)
local T, methods, props, setters, is_tensor
local raw_clone, raw_addmm, raw_mm

local type, select, tostring, pcall = type, select, tostring, pcall
local fmt = string.format

-- Errors are objects whose tostring reads "ClassName: message" (DESIGN.md): misuse of
-- autograd is a RuntimeError (as PyTorch), a bad argument a ValueError.
local errors = require 'dpl.errors'
local options = require 'dpl.options'
local lua_error = error
local error = errors.raiser(errors.RuntimeError)


-- The state is kept in the Lua registry, so that a reloaded module (busted reloads
-- modules per spec file, while the tensor metatype stays the first one) shares it.
local REG = debug.getregistry()
local S = REG['dpl.autograd.state']
if not S then
  local function weak_k() return setmetatable({}, { __mode = 'k' }) end
  S = {
    grad_on = true,
    rg = weak_k(), gfn = weak_k(), grads = weak_k(),
    viewbase = weak_k(), -- view -> its base (when recorded)
    versions = setmetatable({}, { __mode = 'v' }), -- storage address -> {count}
  }
  REG['dpl.autograd.state'] = S
end
S.lhooks = S.lhooks or setmetatable({}, { __mode = 'k' }) -- leaf -> list of gradient hooks
-- gradients that reached code outside the engine and the optimizers (read through t.grad,
-- assigned by t.grad = g, or passed to a hook): drop_grad never frees those
S.exposed = S.exposed or setmetatable({}, { __mode = 'k' })
local rg, gfn, grads, viewbase, versions = S.rg, S.gfn, S.grads, S.viewbase, S.versions
local lhooks, exposed = S.lhooks, S.exposed
-- the count of in-place ops while autograd is live: a view's node records it (n.bep), so
-- that a view used before any in-place op happened anywhere costs one number compare
S.ip = S.ip or 0
M._rg, M._gfn, M._grads = rg, gfn, grads

---------------------------------------------------------------- helpers
local uptr = ffi.typeof('uintptr_t')
local function skey(t) return tonumber(ffi.cast(uptr, t._storage)) end

-- a version table is {count, op = name of the last in-place op}
local function bump(t, name)
  S.ip = S.ip + 1
  local v = versions[skey(t)]
  if v then v[1] = v[1] + 1; v.op = name end
end

local function vtable(t)
  local k = skey(t)
  local v = versions[k]
  if not v then v = { 0 }; versions[k] = v end
  return v
end

-- errors raised inside a recording wrapper: drop the position (it would name this
-- file) and raise again at the caller of the wrapper
local function rethrow(e)
  if type(e) == 'string' then
    e = e:gsub('^[^\n:]*:%d+: ', '', 1)
    lua_error(e, 3)
  end
  lua_error(e, 0)
end

local raw_alias
do
  local out = ffi.new('dpl_tensor*[1]')
  raw_alias = function(t)
    if C.dpl_tensor_alias(t, out) ~= 0 then error(ffi.string(C.dpl_last_error()), 2) end
    return T._wrap(out)
  end
end
M.alias = raw_alias

local function size_of(t)
  local r = {}
  for i = 1, t._ndim do r[i] = tonumber(t._shape[i - 1]) end
  return r
end

local function same_shape(a, b)
  local n = a._ndim
  if n ~= b._ndim then return false end
  for i = 0, n - 1 do
    if a._shape[i] ~= b._shape[i] then return false end
  end
  return true
end

local function shape_str(s)
  if type(s) ~= 'table' then s = size_of(s) end
  return '[' .. table.concat(s, ', ') .. ']'
end

-- true when g's shape is a broadcast of `shape` (a size table): g sums down to it
local function expandable(shape, g)
  local nd, gd = #shape, g._ndim
  if nd > gd then return false end
  for i = 1, nd do
    local s = shape[nd + 1 - i]
    if s ~= 1 and s ~= g._shape[gd - i] then return false end
  end
  return true
end

local function bad_grad(n, i, g, shape)
  error(fmt('backward: function %s returned an invalid gradient for input %d - got %s but expected shape '
    .. 'compatible with %s', n.name or '?', i, shape_str(g), shape_str(shape)), 0)
end

-- g summed down to `shape` (a size table) after broadcasting
local function sum_to(g, shape)
  if shape == nil then return g end
  local nd, tnd = g._ndim, #shape
  for _ = 1, nd - tnd do g = g:sum(1) end
  for i = 1, tnd do
    if shape[i] == 1 and g._shape[i - 1] ~= 1 then g = g:sum(i, true) end
  end
  if tnd == 0 then return g:reshape({}) end
  return g
end
M.sum_to = sum_to

-- the broadcast shape to remember for an input, or nil when it equals out's
local function bshape(x, out)
  if not is_tensor(x) or same_shape(x, out) then return nil end
  return size_of(x)
end

local function stride_of(t)
  local r = {}
  for i = 1, t._ndim do r[i] = tonumber(t._stride[i - 1]) end
  return r
end

---------------------------------------------------------------- views
-- A view v of a base b (viewbase[v] = b, the first tensor of the chain of views)
-- shares b's version counter (one per storage). v's grad_fn node was built when the
-- count of in-place ops read n.bep; when any in-place op happened since, v's history
-- is rebuilt as an as_strided view of b's current history (PyTorch's
-- AsStridedBackward), so gradients through v see the modification. An in-place op
-- on v gives b a copy_slices node (PyTorch's CopySlices): the gradient of the
-- modified region goes through the op, the rest of b's gradient to b's old history.
-- Geometry is kept in storage elements relative to b's first element.
local function geom(n, v, b)
  n.bshape, n.bstride = size_of(b), stride_of(b)
  n.vshape, n.vstride, n.voff = size_of(v), stride_of(v), tonumber(v._offset - b._offset)
  n.like = { dtype = T.dtype_names[b._dtype], device = b._devtype == 0 and 'cpu' or ('cuda:' .. b._devindex) }
end

local function overlapping(shape, stride)
  local over = false
  for i = 1, #shape do
    if shape[i] == 0 then return false end -- (an empty tensor's other dims may have stride 0)
    if stride[i] == 0 and shape[i] > 1 then over = true end
  end
  return over
end

-- a zero buffer over b's elements; returns it and b's view of it
local function base_buffer(n)
  local shape, stride = n.bshape, n.bstride
  local span = 1
  for i = 1, #shape do
    if shape[i] == 0 then span = 0 break end
    span = span + (shape[i] - 1) * stride[i]
  end
  local z = T.zeros({ span }, n.like)
  return z, z:as_strided(shape, stride, 0)
end

-- gradient of b from the gradient g of its view v (rules.as_strided_view)
local function view_to_base(n, g)
  if overlapping(n.bshape, n.bstride) then
    error('backward: a view of a base with overlapping memory (made by expand) was used after an '
      .. 'in-place operation on its storage; this is not supported: clone() the base first', 0)
  end
  local vshape, vstride = n.vshape, n.vstride
  local shape2
  for i = 1, #vshape do -- an expanded dim: the gradients of its copies add up
    if vstride[i] == 0 and vshape[i] > 1 then
      g = g:sum(i, true)
      if not shape2 then shape2 = { unpack(vshape) } end
      shape2[i] = 1
    end
  end
  local z, bv = base_buffer(n)
  z:as_strided(shape2 or vshape, vstride, n.voff):copy_(g)
  return bv
end

local edge
-- rebuilds v's grad_fn on top of its base's current history
local function regen(v, b)
  local n = gfn[v]
  local eb = edge(b)
  if not eb then -- the base has no history (any more): v keeps its own
    if n ~= nil and n.bep then n.bep = S.ip end
    return n or v
  end
  local old = n
  n = { bw = view_to_base, n = 1, dt = v._dtype, name = 'as_strided', eb, bep = S.ip }
  if old ~= nil then n.hooks, n.retain = old.hooks, old.retain end -- they belong to v
  geom(n, v, b)
  gfn[v] = n
  return n
end

-- the edge to x for a node that takes x as input: its grad_fn, x itself (a leaf that
-- requires grad) or false. A view whose node may be stale (an in-place op happened
-- since it was built: rebuilding is always right, and rare), or missing (a view that
-- started requiring grad with its base), gets one built from its base.
function edge(x)
  if rg[x] then
    local n = gfn[x]
    if n == nil then
      local b = viewbase[x]
      if b ~= nil then return regen(x, b) end
      return x
    end
    local e = n.bep
    if e ~= nil and e ~= S.ip then
      local b = viewbase[x]
      if b ~= nil then return regen(x, b) end
    end
    return n
  end
  return false
end

-- the current grad_fn of t (rebuilt for a view whose base changed), or nil
local function cur_gfn(t)
  local e = edge(t)
  if type(e) == 'table' then return e end
  return nil
end

-- views of b made while b had no history start requiring grad when b gets one (their
-- node is built by edge() on first use)
local function mark_views(b)
  for v, vb in pairs(viewbase) do
    if vb == b then rg[v] = true end
  end
end

-- the view hook of dpl.tensor: every view made while autograd is live knows its base
-- (not the views backward makes of gradients: S.in_bw)
local function view_hook(out, a)
  if S.live and not S.in_bw and out._storage == a._storage then
    viewbase[out] = viewbase[a] or a
  end
end

-- records a saved tensor's version on node n (triples: version table, version, tensor)
local function save(n, t)
  local vs = n.vers
  if not vs then vs = {}; n.vers = vs end
  local v = vtable(t)
  local k = #vs
  vs[k + 1] = v
  vs[k + 2] = v[1]
  vs[k + 3] = t
  return t
end

--- save_for_backward(node, t): t kept by a recorded node, with its version (modifying t in
--- place before backward is then an error, as in PyTorch); returns t
M.save_for_backward = save

local function needs(n, i) return n[i] ~= false end
-- {dtype=, device=} of t, for tensors made in backward
local function like(t)
  return { dtype = T.dtype_names[t._dtype], device = t._devtype == 0 and 'cpu' or ('cuda:' .. t._devindex) }
end
-- saves x when it is a tensor (numbers pass through)
local function sv(n, x)
  if is_tensor(x) then return save(n, x) end
  return x
end

---------------------------------------------------------------- rules
-- the backward rules (dpl.autograd_rules); cat and stack are added below
local R = require 'dpl.autograd_rules'
local rules = R.rules
M.rules = rules
local function bind_rules()
  R.bind({ T = T, is_tensor = is_tensor, bshape = bshape, sum_to = sum_to, needs = needs,
    save = save, sv = sv, size_of = size_of, like = like, alias = raw_alias })
end

---------------------------------------------------------------- recording
for k, r in pairs(rules) do r.name = k end
-- a node of rule whose output has dtype dt: e1 is its first input's edge, b, c, d the
-- other tensor arguments (as many as rule.nin says)
-- anomaly mode (M.set_detect_anomaly): each node keeps the traceback of the forward call
-- that made it, and backward checks every gradient for NaN
local function forward_trace(n)
  local lines = {}
  for l in debug.traceback('', 3):gmatch('[^\n]+') do
    if l:find('^%s') and not l:find('dpl/autograd%.lua:') and not l:find('dpl/autograd_wrap%.lua:') then lines[#lines + 1] = l end
  end
  n.trace = table.concat(lines, '\n')
end
local function new_node(rule, dt, e1, b, c, d)
  local n = { bw = rule.bw, n = rule.nin, dt = dt, name = rule.name }
  if S.anomaly then forward_trace(n) end
  n[1] = e1
  local k = rule.nin
  if k >= 2 then
    n[2] = edge(b)
    if k >= 3 then n[3] = edge(c) end
    if k >= 4 then n[4] = edge(d) end
  end
  return n
end
local function record(rule, out, a, ...)
  local n = new_node(rule, out._dtype, edge(a), ...)
  rule.save(n, out, a, ...)
  -- a view (viewbase set by the view hook) remembers the in-place count (see edge())
  if rule.view then n.bep = S.ip end
  S.live = true -- (M.record may start a graph without an input that requires grad)
  rg[out] = true
  gfn[out] = n
  return out
end

local function is_float(t) return t._dtype <= 3 end

-- out-of-place op: methods[name] (and T[name] where it is the same function)
local function wrap_method(name, rule, tbl)
  tbl = tbl or methods
  local raw = tbl[name]
  assert(raw, name)
  local rule_ = rule or rules[name]
  local function rec(a, ...)
    local ok, out = pcall(raw, a, ...)
    if not ok then rethrow(out) end
    if (is_tensor(a) and out == a) or not is_float(out) then return out end
    return record(rule_, out, a, ...)
  end
  local w
  local nin = rule_.nin
  if nin == 1 then
    w = function(a, ...)
      if S.live and S.grad_on and rg[a] then return rec(a, ...) end
      return raw(a, ...)
    end
  elseif nin == 2 then
    w = function(a, b, ...)
      if S.live and S.grad_on and (rg[a] or rg[b]) then return rec(a, b, ...) end
      return raw(a, b, ...)
    end
  else
    w = function(a, b, c, d, ...)
      if S.live and S.grad_on and (rg[a] or rg[b] or rg[c] or rg[d]) then return rec(a, b, c, d, ...) end
      return raw(a, b, c, d, ...)
    end
  end
  tbl[name] = w
  if tbl == methods and T[name] == raw then T[name] = w end
  return w, raw
end

-- in-place op: bumps the version of t's storage; with grad, rebases t's history (and,
-- when t is a view, its base's: copy_slices)
local function leaf_error(name, view)
  error(fmt('%s: a %sleaf tensor that requires grad is being used in an in-place operation '
    .. '(use dpl.no_grad, or work on a clone)', name, view and 'view of a ' or ''))
end

-- gradient of a base modified in place through its view (rules.copy_slices): the op's
-- gradient for the view's region, the incoming gradient elsewhere
local function copy_slices_bw(n, g)
  local z, bv = base_buffer(n)
  bv:copy_(g)
  local region = z:as_strided(n.vshape, n.vstride, n.voff)
  local fn = n.fn
  local g1, g2, g3, g4 = fn.bw(fn, raw_clone(region))
  if g1 ~= nil then region:copy_(g1) else region:zero_() end
  return bv, g2, g3, g4
end

-- true when t's history is a chain of view nodes from a leaf that requires grad and is a
-- view of base
local function leaf_view_source(t, base)
  local n = cur_gfn(t)
  while type(n) == 'table' and n.bep ~= nil do
    local e = n[1]
    if is_tensor(e) then return viewbase[e] == base end
    n = e
  end
  return false
end

local function wrap_inplace(name, rule)
  local raw = methods[name]
  assert(raw, name)
  local function rec(t, ...)
    local base = viewbase[t]
    local old
    if base ~= nil then
      local bg = cur_gfn(base)
      if rg[base] and bg == nil then leaf_error(name, true) end
      if rg[t] and not rg[base] and cur_gfn(t) == nil then leaf_error(name, false) end
      -- a view of a leaf that is itself a view of a base without history (x =
      -- flat:view(3, 4):requires_grad_(); x:t():mul_(2)): PyTorch refuses it too (the view's
      -- base is a leaf, and the view requires grad)
      if bg == nil and not rg[base] and leaf_view_source(t, base) then leaf_error(name, true) end
      if overlapping(size_of(t), stride_of(t)) then
        error(fmt('%s: unsupported operation: more than one element of the written-to tensor refers to a '
          .. 'single memory location (an expanded view); clone() it before the in-place operation', name))
      end
      old = edge(base) -- the old values of the region come from the base's history
    else
      if rg[t] and gfn[t] == nil then leaf_error(name, false) end
      old = gfn[t] or false
    end
    local a_in = rule.inplace_input and raw_clone(t) or t
    -- an input on t's own storage (y:mul_(y), a view of y): PyTorch saves inputs before the
    -- op runs, so a saved one is stale once the op has written t: remember the version
    local pre
    if rule.nin >= 2 then
      local b, c, d = ...
      local k = skey(t)
      if (is_tensor(b) and skey(b) == k) or (is_tensor(c) and skey(c) == k) or (is_tensor(d) and skey(d) == k) then
        pre = vtable(t)[1]
      end
    end
    local ok, err = pcall(raw, t, ...)
    if not ok then rethrow(err) end
    bump(t, name)
    if not is_float(t) then return t end
    local n = new_node(rule, t._dtype, old, ...)
    rule.save(n, t, a_in, ...)
    if pre then
      local vs, vt = n.vers, versions[skey(t)]
      if vs then
        local b, c, d = ...
        for i = 1, #vs, 3 do
          local x = vs[i + 2]
          if vs[i] == vt and (rawequal(x, b) or rawequal(x, c) or rawequal(x, d)) then vs[i + 1] = pre end
        end
      end
    end
    if base == nil then
      if not rg[t] then mark_views(t) end
      rg[t] = true
      gfn[t] = n
      return t
    end
    local k = rule.nin
    local cs = { bw = copy_slices_bw, n = k, dt = base._dtype, name = 'copy_slices', op = rule.name,
      fn = n, vers = n.vers, old }
    for i = 2, k do cs[i] = n[i] end
    geom(cs, t, base)
    if not rg[base] then mark_views(base) end
    rg[base] = true
    gfn[base] = cs
    -- t reads its base's new history from now on (its node is rebuilt on its next use)
    rg[t] = true
    local tn = gfn[t]
    if tn ~= nil then tn.bep = -1 end
    return t
  end
  local nin = rule.nin
  local w
  if nin >= 2 then
    w = function(t, b, c, d, ...)
      if S.live then
        if S.grad_on then
          if rg[t] or rg[b] or rg[c] or rg[d] then return rec(t, b, c, d, ...) end
          local vb = viewbase[t]
          if vb ~= nil and rg[vb] then return rec(t, b, c, d, ...) end
        end
        S.ip = S.ip + 1
        local v = versions[skey(t)]
        if v then v[1] = v[1] + 1; v.op = name end
      end
      return raw(t, b, c, d, ...)
    end
  else
    w = function(t, ...)
      if S.live then
        if S.grad_on then
          if rg[t] then return rec(t, ...) end
          local vb = viewbase[t]
          if vb ~= nil and rg[vb] then return rec(t, ...) end
        end
        S.ip = S.ip + 1
        local v = versions[skey(t)]
        if v then v[1] = v[1] + 1; v.op = name end
      end
      return raw(t, ...)
    end
  end
  methods[name] = w
  return w
end

-- the wrappers of the differentiable ops (dpl.autograd_wrap)
local function install_wrappers()
  require('dpl.autograd_wrap')({ T = T, methods = methods, rules = rules, R = R, S = S,
    wrap_method = wrap_method, wrap_inplace = wrap_inplace, record = record, rethrow = rethrow,
    edge = edge, forward_trace = forward_trace, is_tensor = is_tensor, is_float = is_float, error = error })
end


---------------------------------------------------------------- custom functions
-- the backward of a node made by M.record: the rule's gradients, each checked against
-- its input's shape (summed down when it is a broadcast of it, an error otherwise)
local function record_bw(n, g)
  local r = { n.rule_bw(n, g) }
  local shapes = n.in_shapes
  for i = 1, n.n do
    local gi = r[i]
    if gi ~= nil and n[i] then
      if not is_tensor(gi) then
        error(fmt('backward: function %s returned a %s for input %d; expected a tensor or nil', n.name, type(gi), i),
          errors.TypeError)
      end
      local s = shapes[i]
      local same = gi._ndim == #s
      if same then
        for d = 1, #s do if gi._shape[d - 1] ~= s[d] then same = false break end end
      end
      if not same then
        if not expandable(s, gi) then bad_grad(n, i, gi, s) end
        r[i] = sum_to(gi, s)
      end
    end
  end
  return unpack(r, 1, n.n)
end

--- Records a function with a hand-written backward: `autograd.record(rule, out, ...)`
--- where rule = {nin=, save=function(n, out, ...), bw=function(n, g) -> grads, name=}: the
--- first nin arguments after out are its tensor inputs. Under no_grad, or when no input
--- requires grad, out is returned as it is (no history).
function M.record(rule, out, ...)
  if type(rule) ~= 'table' or type(rule.bw) ~= 'function' then
    error(fmt('record: rule must be a table with a bw function, got %s', type(rule)), errors.ValueError)
  end
  local nin = rule.nin or 1
  if type(nin) ~= 'number' or nin < 1 or nin % 1 ~= 0 then
    error(fmt('record: rule.nin must be a positive integer, got %s', tostring(nin)), errors.ValueError)
  end
  if rule.save ~= nil and type(rule.save) ~= 'function' then
    error(fmt('record: rule.save must be a function, got %s', type(rule.save)), errors.ValueError)
  end
  if not is_tensor(out) then error(fmt('record: out must be a tensor, got %s', type(out)), errors.ValueError) end
  if not S.grad_on or not is_float(out) then return out end
  local any = false
  for i = 1, nin do
    if rg[select(i, ...)] then any = true break end
  end
  if not any then return out end
  local n = { bw = record_bw, rule_bw = rule.bw, n = nin, dt = out._dtype, name = rule.name or 'record' }
  if S.anomaly then forward_trace(n) end
  local shapes = {}
  for i = 1, nin do
    local x = select(i, ...)
    local e = false
    if is_tensor(x) then
      e = edge(x)
      if e then shapes[i] = size_of(x) end
    end
    n[i] = e
  end
  n.in_shapes = shapes
  if rule.save then rule.save(n, out, ...) end
  rg[out] = true
  gfn[out] = n
  return out
end

local function raw_linear(x, w, b)
  -- hide the recording wrappers: compute with grad mode off
  if x._ndim == 2 then
    if b then return raw_addmm(b, x, w:t()) end
    return raw_mm(x, w:t())
  end
  local sz = size_of(x)
  local x2 = x:reshape(-1, sz[#sz])
  local y = b and raw_addmm(b, x2, w:t()) or raw_mm(x2, w:t())
  sz[#sz] = tonumber(w._shape[0])
  return y:view(sz)
end
--- linear(x, w, b): x @ w^T + b with the fused backward (nn.Linear's op).
function M.linear(x, w, b)
  if not (is_tensor(x) and is_tensor(w) and (b == nil or is_tensor(b))) then
    lua_error(errors.ValueError(fmt('linear: expected tensors x, weight (and bias or nil), got %s, %s, %s',
      type(x), type(w), type(b))), 2)
  end
  if S.live and S.grad_on and (rg[x] or rg[w] or rg[b]) then
    local prev = S.grad_on
    S.grad_on = false
    local ok, out = pcall(raw_linear, x, w, b)
    S.grad_on = prev
    if not ok then rethrow(out) end
    return record(rules.linear, out, x, w, b)
  end
  return raw_linear(x, w, b)
end

-- max_pool2d with kernel == stride, no padding, sizes divisible by the kernel: the max of
-- the kh*kw strided views of x (elementwise ops) instead of dpl.max_pool2d's C loop (a
-- float64 reference loop: 2.8 ms against 0.5 ms here for [64,16,24,24]). With grad, the
-- argmax positions (the C kernel's 0-based plane indices, first max wins) feed the C
-- backward through rules.max_pool2d; that bookkeeping (gt/where on strided views) is
-- slower than the C forward today, so nn.functional uses this path without grad only.
local pool_pos = setmetatable({}, { __mode = 'v' })
local function plane_positions(x, H, W, kh, kw, i, j)
  local dev = like(x).device
  local key = H .. ':' .. W .. ':' .. kh .. ':' .. kw .. ':' .. i .. ':' .. j .. ':' .. dev
  local p = pool_pos[key]
  if not p then
    local OH, OW = H / kh, W / kw
    local rows = T.arange(OH, { dtype = 'int64', device = dev }) * (kh * W)
    local cols = T.arange(OW, { dtype = 'int64', device = dev }) * kw
    p = rows:view(OH, 1) + cols:view(1, OW) + ((i - 1) * W + (j - 1))
    pool_pos[key] = p
  end
  return p
end

--- True when max_pool2d(x, k, opts) can take the strided-views path.
function M.pool_fast_ok(x, k, opts)
  if not is_tensor(x) or x._ndim ~= 4 or not is_float(x) or not methods.is_contiguous(x) then return false end
  local kh, kw
  if type(k) == 'number' then kh, kw = k, k elseif type(k) == 'table' then kh, kw = k[1], k[2] else return false end
  if opts then
    local st, pd = opts.stride, opts.padding
    if pd ~= nil and pd ~= 0 and not (type(pd) == 'table' and pd[1] == 0 and pd[2] == 0) then return false end
    if st ~= nil and st ~= k and not (type(st) == 'table' and st[1] == kh and st[2] == kw)
      and not (type(st) == 'number' and st == kh and st == kw) then return false end
  end
  local H, W = tonumber(x._shape[2]), tonumber(x._shape[3])
  return type(kh) == 'number' and type(kw) == 'number' and kh >= 1 and kw >= 1 and kh * kw <= 16
    and kh % 1 == 0 and kw % 1 == 0 and H % kh == 0 and W % kw == 0 and H > 0 and W > 0, kh, kw
end

--- max_pool2d values (and, with grad, the recorded op) by the strided-views path.
function M.max_pool2d_views(x, kh, kw)
  local N, Cn, H, W = tonumber(x._shape[0]), tonumber(x._shape[1]), tonumber(x._shape[2]), tonumber(x._shape[3])
  local OH, OW = H / kh, W / kw
  local prev = S.grad_on
  local track = prev and rg[x]
  S.grad_on = false
  local ok, best, idx = pcall(function()
    local v = x:view(N, Cn, OH, kh, OW, kw)
    local b = v:select(6, 1):select(4, 1)
    local ix
    for i = 1, kh do
      for j = 1, kw do
        if i > 1 or j > 1 then
          local s = v:select(6, j):select(4, i)
          if track then
            local m = s:gt(b)
            ix = T.where(m, plane_positions(x, H, W, kh, kw, i, j), ix or plane_positions(x, H, W, kh, kw, 1, 1))
            b = T.where(m, s, b)
          else
            b = b:maximum(s)
          end
        end
      end
    end
    if kh * kw == 1 then
      b = raw_clone(b)
      if track then ix = plane_positions(x, H, W, kh, kw, 1, 1):expand(N, Cn, OH, OW):contiguous() end
    end
    return b, ix
  end)
  S.grad_on = prev
  if not ok then rethrow(best) end
  if track then record(rules.max_pool2d, best, x, { kh, kw }, nil, idx) end
  return best
end

---------------------------------------------------------------- grad mode
function M.is_grad_enabled() return S.grad_on end

--- Sets the grad mode; returns the previous one.
function M.set_grad_enabled(on)
  local prev = S.grad_on
  S.grad_on = on and true or false
  return prev
end

--- Anomaly detection on (true) or off: nodes recorded while it is on keep the traceback
--- of their forward call, and backward raises on the first gradient holding a NaN, naming
--- the function and that traceback (torch.autograd.set_detect_anomaly). Slow: debugging only.
--- Returns the previous setting.
function M.set_detect_anomaly(on)
  local prev = S.anomaly or false
  S.anomaly = on and true or nil
  return prev
end
function M.is_anomaly_enabled() return S.anomaly or false end
-- runs fn(...) with S[key] = value, the previous value restored afterwards (after an error
-- too); name is the caller's, for the error when fn is not a function
local function with_state(key, value, name, fn, ...)
  if type(fn) ~= 'function' then
    error(fmt('%s: expected a function, got %s', name, type(fn)), errors.ValueError)
  end
  local prev = S[key]
  S[key] = value
  local r = { pcall(fn, ...) }
  S[key] = prev
  if not r[1] then lua_error(r[2], 0) end
  return unpack(r, 2, table.maxn(r))
end
--- dpl.autograd.detect_anomaly(fn, ...): runs fn with anomaly detection on; returns its results.
function M.detect_anomaly(fn, ...) return with_state('anomaly', true, 'detect_anomaly', fn, ...) end

local function with_mode(mode, fn, ...)
  return with_state('grad_on', mode, mode and 'enable_grad' or 'no_grad', fn, ...)
end
--- dpl.no_grad(fn, ...): runs fn with gradient recording off; returns its results.
function M.no_grad(fn, ...) return with_mode(false, fn, ...) end
--- inference_mode(fn, ...): torch.inference_mode as no_grad (nothing recorded; tensors made
--- inside can still be used with autograd later, which torch's inference tensors cannot)
function M.inference_mode(fn, ...) return with_mode(false, fn, ...) end
--- dpl.enable_grad(fn, ...): runs fn with gradient recording on (inside no_grad too).
function M.enable_grad(fn, ...) return with_mode(true, fn, ...) end

---------------------------------------------------------------- tensor properties
-- t.grad_fn prints as PyTorch's does (<MulBackward>, not the node's fields); the metatable is
-- set when a user reads grad_fn, so the recording path pays nothing for it
local NodeMT = { __tostring = function(n)
  local name = tostring(n.op or n.name or 'Function')
  return '<' .. name:gsub('^%l', string.upper):gsub('_(%l)', string.upper) .. 'Backward>'
end }
local function user_gfn(t)
  local n = cur_gfn(t)
  if n ~= nil and getmetatable(n) == nil then setmetatable(n, NodeMT) end
  return n
end

local function install_props()
props.requires_grad = function(t) return rg[t] == true end
props.grad_fn = user_gfn
props.is_leaf = function(t) return cur_gfn(t) == nil end
-- t.retains_grad: retain_grad() was called on t, a non-leaf (PyTorch's property)
props.retains_grad = function(t)
  local n = cur_gfn(t)
  return n ~= nil and n.retain ~= nil and n.retain[1] == t
end
props.grad = function(t)
  local g = grads[t]
  if g ~= nil then exposed[g] = true end
  return g
end

--- grad_of(t): t's gradient, for the library's own readers (optimizers, DDP, clipping) that
--- neither keep it past the step nor hand it to user code: unlike t.grad, it leaves the
--- gradient free to be released by drop_grad.
function M.grad_of(t)
  local g = grads[t]
  if g == nil and type(t) == 'table' then return t.grad end -- (a parameter-like table: its field)
  return g
end

--- drop_grad(t): t.grad = nil (zero_grad's set_to_none), releasing the gradient's memory at
--- once when nothing else can reach it: no user code got it (t.grad, a hook, an assignment)
--- and no other tensor shares its storage. Its block then serves the next step's gradient
--- while still in cache, as PyTorch's refcounting does, instead of waiting for a collection.
function M.drop_grad(t)
  local g = grads[t]
  if g == nil then
    if type(t) == 'table' then t.grad = nil end -- (a parameter-like table: its field)
    return
  end
  grads[t] = nil
  if not exposed[g] and C.dpl_storage_unique(g) == 1 then C.dpl_tensor_free_data(g) end
end

setters.requires_grad = function(t, v)
  if type(v) ~= 'boolean' then error(fmt('requires_grad: expected a boolean, got %s', type(v)), errors.ValueError) end
  if cur_gfn(t) then
    if v then return end
    error('requires_grad: you can only change requires_grad of leaf tensors '
      .. '(use detach() to get a tensor without history)', 3)
  end
  if v and not is_float(t) then
    error(fmt('requires_grad: only floating point tensors can require gradients, got %s', t.dtype), errors.ValueError)
  end
  if v then S.live = true end
  rg[t] = v or nil
end
setters.grad = function(t, g)
  if g ~= nil then
    if not is_tensor(g) then error(fmt('grad: expected a tensor or nil, got %s', type(g)), errors.ValueError) end
    if not same_shape(g, t) then
      -- ([a, b]: a 0-d shape printed as nothing in 'axb' form)
      error(fmt('grad: assigned grad has shape [%s], the tensor has shape [%s]',
        table.concat(size_of(g), ', '), table.concat(size_of(t), ', ')), 3)
    end
    exposed[g] = true
    if g._dtype ~= t._dtype then
      error(fmt('grad: assigned grad has data of a different type (%s; the tensor is %s)', g.dtype, t.dtype))
    end
    if g._devtype ~= t._devtype or g._devindex ~= t._devindex then
      error(fmt('grad: assigned grad has data located on a different device (%s; the tensor is on %s)',
        like(g).device, like(t).device))
    end
  end
  grads[t] = g
end

function methods.requires_grad_(t, v)
  if v == nil then v = true end
  setters.requires_grad(t, v)
  return t
end

--- A new tensor on the same storage, without history (never requires grad).
function methods.detach(t) return raw_alias(t) end
function methods.detach_(t)
  -- (a view keeps its base's history: writes through it must reach the base's graph)
  if viewbase[t] ~= nil then error("detach_: can't detach views in-place; use detach() instead") end
  rg[t], gfn[t] = nil, nil
  return t
end

--- t:register_hook(fn): fn(grad) runs when t's gradient is computed, before it is
--- accumulated (leaves) or passed on (non-leaves); a non-nil result replaces the gradient.
--- Returns a handle with :remove().
function methods.register_hook(t, fn)
  if type(fn) ~= 'function' then error(fmt('register_hook: expected a function, got %s', type(fn)), errors.ValueError) end
  if not rg[t] then error("register_hook: cannot register a hook on a tensor that doesn't require gradient") end
  local list
  if cur_gfn(t) then
    local n = cur_gfn(t)
    list = n.hooks or {}
    n.hooks = list
  else
    list = lhooks[t] or {}
    lhooks[t] = list
  end
  list[#list + 1] = fn
  return { remove = function()
    for i = #list, 1, -1 do if list[i] == fn then table.remove(list, i) break end end
  end }
end

--- Keeps the gradient of a non-leaf tensor in t.grad after backward.
function methods.retain_grad(t)
  if not rg[t] then error("retain_grad: can't retain_grad on a tensor that has requires_grad=false", 2) end
  if cur_gfn(t) then
    local n = cur_gfn(t)
    n.retain = setmetatable({ t }, { __mode = 'v' })
  end
  return t
end
end

---------------------------------------------------------------- backward
local function freed_bw()
  error('backward: trying to backward through the graph a second time (or to use saved values after '
    .. 'they were freed); pass {retain_graph = true} to the first backward', 0)
end

-- where a hook was defined, for error messages
local function hook_name(fn)
  local d = debug.getinfo(fn, 'S')
  return d and fmt('function at %s:%d', d.short_src, d.linedefined) or tostring(fn)
end

-- runs a tensor's hooks on its gradient g; a non-nil result replaces g and must have
-- g's shape and dtype (as PyTorch checks)
local function run_hooks(hooks, g)
  for i = 1, #hooks do
    local h = hooks[i]
    local r = h and h(g)
    if r ~= nil then
      if not is_tensor(r) then
        error(fmt('backward: hook (%s) returned a %s; expected a tensor or nil', hook_name(h), type(r)), errors.TypeError)
      end
      if not same_shape(r, g) then
        error(fmt('backward: hook (%s) has changed the size of value (was %s, got %s)', hook_name(h), shape_str(g),
          shape_str(r)), 0)
      end
      if r._dtype ~= g._dtype then
        error(fmt('backward: hook (%s) has changed the type of value (was %s, got %s)', hook_name(h), g.dtype, r.dtype), 0)
      end
      g = r
    end
  end
  return g
end

-- the gradient g that node n computed for its input i, leaf t: in t's dtype, summed down
-- to t's shape when it is a broadcast of it, an error when it is not
local function fit_leaf(t, g, n, i)
  if g._dtype ~= t._dtype then g = g:to(t.dtype) end
  if not same_shape(g, t) then
    local shape = size_of(t)
    if not expandable(shape, g) then bad_grad(n, i, g, shape) end
    g = sum_to(g, shape)
  end
  return g
end

-- the whole gradient g of leaf t in this backward: t's hooks run on it, then it is added
-- to t.grad (PyTorch's AccumulateGrad)
local function accumulate_leaf(t, g, taken)
  local hooks = lhooks[t]
  if hooks and #hooks > 0 then
    g = run_hooks(hooks, g)
    exposed[g] = true
  end
  -- a leaf that stopped requiring grad after the forward pass (x:requires_grad_(false),
  -- x:detach_()) gets no .grad, as PyTorch's AccumulateGrad
  if not rg[t] then return end
  local old = grads[t]
  if old then
    -- in place when nothing else can see the old gradient (as PyTorch's AccumulateGrad; a
    -- tensor user code got from t.grad keeps its value: that one gets a new sum)
    if not exposed[old] and old._dtype == g._dtype and old._devtype == g._devtype and old._devindex == g._devindex
      and bit.band(old._flags, 1) == 1 and C.dpl_storage_unique(old) == 1 then
      old:add_(g)
    else
      grads[t] = old + g
    end
  else
    local k = skey(g)
    if taken[k] or not methods.is_contiguous(g) then g = methods.clone(g); k = skey(g) end
    taken[k] = true
    grads[t] = g
  end
end

-- autograd.grad: cap = {leaf = {[leaf] = k}, node = {[node] = k}, res = {}}, the inputs
-- (a non-leaf input by its node) and their gradients. plan() fills cap.exec with the nodes
-- to run: those with an edge to an input or to a node that leads to one (PyTorch's
-- exec_info); returns whether the root leads to an input at all.
local function plan(root, cap)
  local exec, capn, capl = {}, cap.node, cap.leaf
  local reach = { [root] = false } -- node -> leads to an input (false while on the stack)
  local stack, idx, sp = { root }, { 1 }, 1
  while sp > 0 do
    local n, i = stack[sp], idx[sp]
    if i <= n.n then
      idx[sp] = i + 1
      local e = n[i]
      if type(e) == 'table' then
        local r = reach[e]
        if r == nil then
          reach[e] = false
          sp = sp + 1
          stack[sp], idx[sp] = e, 1
        elseif r then
          exec[n] = true
        end
      elseif e and capl[e] then
        exec[n] = true
      end
    else
      stack[sp], idx[sp] = nil, nil
      sp = sp - 1
      local r = exec[n] or capn[n] ~= nil
      reach[n] = r
      if r and sp > 0 then exec[stack[sp]] = true end
    end
  end
  cap.exec = exec
  return reach[root]
end

-- Runs the graph below root_t with gradient grad. deps counts the edges into each node and
-- each leaf reachable from the root; a node runs when all its gradients arrived (count 0),
-- and a leaf used by several nodes gets the sum of its gradients (pend) before its hooks
-- and .grad see it once. With cap (autograd.grad), only the nodes of cap.exec run and the
-- gradients of the inputs go to cap.res, not to .grad.
-- anomaly mode: a NaN in a gradient a node's backward returned stops backward, naming the
-- node and the forward call that made it (PyTorch's "Function 'XBackward0' returned nan
-- values in its 0th output", with the traceback it prints as a warning)
local function check_anomaly(n, gs)
  for i = 1, n.n do
    local gi = gs[i]
    if gi ~= nil and n[i] and is_float(gi) and T.isnan(gi):any():item() then
      error(fmt("backward: function '%s' returned nan values in its output %d (the gradient of its input %d)%s",
        n.op or n.name or 'backward', i, i, n.trace and ('\nTraceback of the forward call that made it:\n' .. n.trace)
          or ' (made before anomaly detection was on: no forward traceback)'), 0)
    end
  end
end

-- Gradients the engine made and alone holds are released as soon as they are used (as
-- PyTorch's refcounting frees them), so that the next ones land in cached memory rather
-- than in blocks only a collection would return. own[h] for a gradient handle h: true
-- while exactly one node waits on it, h was made during this backward (its storage's serial
-- is at least the one read at the start: not a saved or user tensor, nor a cached constant)
-- by a backward function of the library (user code never saw it), and no hook or
-- retain_grad exposed it; false once a second holder, a leaf, a capture or user code got
-- it. A node's incoming gradient that is own[g] is freed after its backward ran, unless the
-- node passed that very handle on; a node's pending gradient that is own[h] is freed once
-- summed with the next one. Freeing drops only the handle's reference: views of it that
-- the backward returned keep the storage.
local LIB = debug.getinfo(1, 'S').source:match('^(@.*/)[^/]*$') or false
local trusted_cache = setmetatable({}, { __mode = 'k' })
local function trusted_bw(n)
  local f = n.rule_bw or n.bw
  local v = trusted_cache[f]
  if v == nil then
    local src = debug.getinfo(f, 'S').source
    v = LIB ~= false and src:sub(1, #LIB) == LIB
    trusted_cache[f] = v
  end
  return v
end
local storage_newer, storage_unique, free_data = C.dpl_storage_newer, C.dpl_storage_unique, C.dpl_tensor_free_data
M._release_stats = { freed = 0 }
local release_stats = M._release_stats

local function run_backward(root_t, grad, retain, cap, deps)
  local root = cur_gfn(root_t)
  local taken = {}
  if grad then taken[skey(grad)] = true end
  if not root then
    if cap then
      local k = cap.leaf[root_t]
      if k then cap.res[k] = grad end
    else
      accumulate_leaf(root_t, grad, taken)
    end
    return
  end
  local exec, capl
  if cap then
    if not plan(root, cap) then return end
    exec, capl = cap.exec, cap.leaf
  end
  -- count the edges into each node and leaf reachable from root (with cap: from the nodes
  -- that run)
  deps[root] = 0
  local stack, sp = { root }, 1
  while sp > 0 do
    local n = stack[sp]
    stack[sp] = nil
    sp = sp - 1
    if exec == nil or exec[n] then
      for i = 1, n.n do
        local e = n[i]
        if e then
          local c = deps[e]
          if c == nil then
            deps[e] = 1
            if type(e) == 'table' then
              sp = sp + 1
              stack[sp] = e
            end
          else
            deps[e] = c + 1
          end
        end
      end
    end
  end
  root.g = grad
  local serial0 = C.dpl_storage_serials()
  local own = {}
  local pend -- leaf -> the sum of its gradients so far, when it has more to come
  local ready, rp = { root }, 1
  while rp > 0 do
    local n = ready[rp]
    ready[rp] = nil
    rp = rp - 1
    local g = n.g
    n.g = nil
    local run = true
    if cap then
      local k = cap.node[n]
      if k then
        cap.res[k] = g -- (before n's hooks, as PyTorch 1.13)
        if g ~= nil then own[g] = false end
      end
      run = exec[n] == true
    end
    if run then
      if n.bw == freed_bw then freed_bw() end
      local vs = n.vers
      if vs then
        for i = 1, #vs, 3 do
          local vt = vs[i]
          if vt[1] ~= vs[i + 1] then
            local t = vs[i + 2]
            error(fmt('backward: one of the variables needed for gradient computation has been modified by an '
              .. 'inplace operation: the %s tensor of shape [%s] saved by %s is at version %d; expected version %d '
              .. 'instead (last modified by %s). Use an out-of-place op, or clone() the tensor before modifying it',
              t.dtype, table.concat(size_of(t), ', '), n.op or n.name, vt[1], vs[i + 1], vt.op or 'an in-place op'), 0)
          end
        end
      end
      if n.hooks and g ~= nil then
        g = run_hooks(n.hooks, g)
        exposed[g] = true -- (a hook may keep g, which may pass on to a leaf's .grad)
      end
      if n.retain and n.retain[1] then
        local t = n.retain[1]
        exposed[g] = true -- (g may also become a leaf's .grad)
        grads[t] = grads[t] and grads[t] + g or g
      end
      local gs
      local trusted = trusted_bw(n)
      local mine = false -- n alone held g, and user code does not see it (see own)
      if g ~= nil then
        mine = trusted and own[g] == true and not exposed[g]
        if mine then own[g] = nil end -- (false stays: another holder may still have g)
        gs = { n.bw(n, g) }
      else
        gs = {}
      end
      if S.anomaly then check_anomaly(n, gs) end
      for i = 1, n.n do
        local e = n[i]
        if e then
          local gi = gs[i]
          if type(e) == 'table' then
            if gi ~= nil then
              if gi._dtype ~= e.dt then gi = gi:to(T.dtype_names[e.dt]) end
              local cur = e.g
              if cur == nil then
                e.g = gi
                local o = own[gi]
                if o == nil then
                  own[gi] = trusted and storage_newer(gi, serial0) == 1
                elseif o then
                  own[gi] = false
                end
              else
                local sum = cur + gi
                e.g = sum
                own[sum] = true
                if own[cur] == true and not exposed[cur] and not rawequal(cur, g) then
                  own[cur] = nil
                  free_data(cur)
                  release_stats.freed = release_stats.freed + 1
                end
                if own[gi] == nil then own[gi] = false end -- (consumed; it may come again in gs)
              end
            end
            local c = deps[e] - 1
            deps[e] = c
            if c == 0 then
              rp = rp + 1
              ready[rp] = e
            end
          elseif capl == nil or capl[e] then
            if gi ~= nil then
              own[gi] = false
              gi = fit_leaf(e, gi, n, i)
            end
            local c = deps[e] - 1
            deps[e] = c
            local p = pend and pend[e]
            if c == 0 then -- the leaf's last gradient: the common case of a leaf used once
              if p ~= nil then
                pend[e] = nil
                gi = gi == nil and p or p + gi
              end
              if gi ~= nil then
                if cap then cap.res[capl[e]] = gi else accumulate_leaf(e, gi, taken) end
              end
            elseif gi ~= nil then
              if p ~= nil then
                pend[e] = p + gi
              else
                if not pend then pend = {} end
                pend[e] = gi
              end
            end
          end
        end
      end
      -- n's incoming gradient, when n alone held it and did not pass it on
      if mine and own[g] == nil then
        free_data(g)
        release_stats.freed = release_stats.freed + 1
      end
      if not retain then
        for k in pairs(n) do
          if type(k) ~= 'number' and k ~= 'n' and k ~= 'dt' and k ~= 'name' and k ~= 'bep' then
            n[k] = nil
          end
        end
        n.bw = freed_bw
      end
    end
  end
end

-- runs run_backward with recording off (and the view hook quiet)
local function backward_mode(t, grad, retain, cap)
  local prev, prev_bw = S.grad_on, S.in_bw
  S.grad_on, S.in_bw = false, true
  local deps = {}
  local ok, err = pcall(run_backward, t, grad, retain, cap, deps)
  S.grad_on, S.in_bw = prev, prev_bw
  if not ok then
    -- a failed pass (a hook's error, a bad gradient) leaves no partial sums on the nodes it
    -- did not reach: a retained graph can run again
    for n in pairs(deps) do
      if type(n) == 'table' then n.g = nil end
    end
    lua_error(err, 0)
  end
end

local bw_keys = options.keys('retain_graph', 'create_graph')
local grad_keys = options.keys(bw_keys, 'allow_unused')

local function check_opts(opts, keys, fn)
  options.check(opts, keys, fn)
  if opts and opts.create_graph then
    lua_error(errors.NotImplementedError(fn .. ': create_graph=true (a differentiable gradient, for higher-order '
      .. 'derivatives) is not implemented'), 0)
  end
end

-- the gradient of output t to start from: grad (a tensor of t's shape, converted to its
-- dtype) or ones for a one-element t
local function root_grad(t, grad, fn)
  if not is_tensor(t) then
    error(fmt('%s: expected a tensor output, got %s', fn, type(t)), errors.ValueError)
  end
  if not rg[t] then
    error(fmt('%s: the tensor does not require grad and has no grad_fn '
      .. '(did you compute it under no_grad, or from tensors without requires_grad?)', fn))
  end
  if grad == nil then
    if t._numel ~= 1 then
      error(fmt('%s: grad can be implicitly created only for scalar outputs; this tensor has shape [%s] '
        .. '(pass a gradient of the same shape)', fn, table.concat(size_of(t), ', ')))
    end
    return T.ones_like(t)
  end
  if not is_tensor(grad) then error(fmt('%s: gradient must be a tensor, got %s', fn, type(grad)), errors.ValueError) end
  if not same_shape(grad, t) then
    error(fmt('%s: gradient has shape [%s], the tensor has shape [%s]', fn, table.concat(size_of(grad), ', '),
      table.concat(size_of(t), ', ')))
  end
  if grad._devtype ~= t._devtype or grad._devindex ~= t._devindex then
    error(fmt('%s: invalid gradient - expected device %s but got %s', fn, tostring(t.device), tostring(grad.device)))
  end
  if grad._dtype ~= t._dtype then grad = grad:to(t.dtype) end
  return grad
end

local function install_backward()
--- t:backward([gradient] [, {retain_graph=}]): accumulates d(t)/d(leaf) into leaf.grad.
function methods.backward(t, grad, opts)
  if type(grad) == 'table' and not is_tensor(grad) then grad, opts = nil, grad end
  check_opts(opts, bw_keys, 'backward')
  grad = root_grad(t, grad, 'backward')
  backward_mode(t, grad, opts and opts.retain_graph)
end
end

--- dpl.autograd.grad(output, inputs [, grad_output] [, {retain_graph=, allow_unused=}]): the
--- gradients of output with respect to inputs (a tensor or a list of tensors, leaves or not),
--- returned as a list; no .grad is touched, and only the part of the graph between output
--- and inputs runs.
function M.grad(output, inputs, grad_output, opts)
  if type(output) == 'table' and not is_tensor(output) then
    -- several outputs (torch.autograd.grad(outputs=[...], grad_outputs=[...])): the gradients of
    -- sum_k <outputs[k], grad_outputs[k]>, the sum of each output's vector-Jacobian product
    local gos = grad_output
    if type(gos) == 'table' and not is_tensor(gos) and gos[1] == nil and next(gos) ~= nil then gos, opts = nil, gos end
    if gos ~= nil and (type(gos) ~= 'table' or is_tensor(gos)) then
      error('grad: with a list of outputs, grad_outputs must be a list of tensors (nil entries for scalar outputs)',
        errors.ValueError)
    end
    if #output == 0 then error('grad: outputs must be a non-empty list of tensors', errors.ValueError) end
    local s
    for k = 1, #output do
      local o = output[k]
      if not is_tensor(o) then error(fmt('grad: outputs[%d] must be a tensor, got %s', k, type(o)), errors.ValueError) end
      local g = root_grad(o, gos and gos[k], 'grad')
      local term = methods.sum(methods.mul(o, methods.detach(g)))
      s = s and methods.add(s, term) or term
    end
    return M.grad(s, inputs, nil, opts)
  end
  if type(grad_output) == 'table' and not is_tensor(grad_output) then
    if opts ~= nil then
      error(fmt('grad: grad_output must be a tensor, got %s', type(grad_output)), errors.ValueError)
    end
    grad_output, opts = nil, grad_output
  end
  check_opts(opts, grad_keys, 'grad')
  if is_tensor(inputs) then inputs = { inputs } end
  if type(inputs) ~= 'table' then
    error(fmt('grad: inputs must be a tensor or a list of tensors, got %s', type(inputs)), errors.ValueError)
  end
  local ni = #inputs
  if ni == 0 then error('grad: inputs must be a non-empty list of tensors', errors.ValueError) end
  local cap = { leaf = {}, node = {}, res = {} }
  local first = {} -- tensor -> index of its first place in inputs (a tensor listed twice)
  for i = 1, ni do
    local x = inputs[i]
    if not is_tensor(x) then
      error(fmt('grad: inputs[%d] must be a tensor, got %s', i, type(x)), errors.ValueError)
    end
    if not rg[x] then error(fmt('grad: inputs[%d] does not require grad', i)) end
    if not first[x] then
      local n = gfn[x]
      if n == nil then
        cap.leaf[x] = i
      elseif cap.node[n] == nil then
        cap.node[n] = i
      end
      first[x] = n and cap.node[n] or i -- (two handles of one non-leaf share its node)
    end
  end
  grad_output = root_grad(output, grad_output, 'grad')
  backward_mode(output, grad_output, opts and opts.retain_graph, cap)
  local r = cap.res
  for i = 1, ni do
    local k = first[inputs[i]]
    if k ~= i then r[i] = r[k] end
    if r[i] == nil and not (opts and opts.allow_unused) then
      error(fmt('grad: inputs[%d] appears not to have been used in the graph (or got no gradient); pass '
        .. '{allow_unused = true} to get nil for it', i))
    end
  end
  return r
end

---------------------------------------------------------------- gradcheck
--- gradcheck(fn, inputs [, opts]): backward's gradients against finite differences
--- (dpl.gradcheck, loaded on first use).
--- checkpoint(fn, ...): activation checkpointing (lua/dpl/checkpoint.lua; also dpl.utils.checkpoint)
function M.checkpoint(...) return require('dpl.checkpoint').checkpoint(...) end
function M.gradcheck(fn, inputs, opts) return require('dpl.gradcheck').gradcheck(fn, inputs, opts) end

---------------------------------------------------------------- install
--- Installs autograd into a dpl.tensor module (its methods, properties and functions);
--- dpl.tensor calls it when it loads (again), so a reloaded tensor module gets the wrappers.
function M.install(T_)
  if rawget(T_, '_autograd_installed') then return end
  T = T_
  methods, props, setters, is_tensor = T.methods, T.props, T.setters, T.is_tensor
  raw_clone = methods.clone
  bind_rules()
  install_wrappers()
  require('dpl.tensor_forms').install(T) -- argument forms in front of the recorded ops
  require('dpl.tensor_torch7').install(T) -- Torch7's names (aliases, hints), docs/torch7.md
  T._set_view_hook(view_hook)
  raw_addmm, raw_mm = T.addmm, methods.mm
  install_props()
  install_backward()
  T.no_grad, T.enable_grad, T.inference_mode = M.no_grad, M.enable_grad, M.inference_mode
  T.set_grad_enabled, T.is_grad_enabled = M.set_grad_enabled, M.is_grad_enabled
  T.linear = M.linear
  rawset(T, '_autograd_installed', true)
end

M.install(require 'dpl.tensor')

return M
