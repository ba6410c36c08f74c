-- dpl.optim's Rprop, ASGD and LBFGS (PyTorch 1.13's single-tensor formulas), installed into
-- dpl.optim by its init.lua (install(optim, helpers)); not a module users require.
--   optim.Rprop(params, {lr=1e-2, etas={0.5, 1.2}, step_sizes={1e-6, 50}, maximize=false})
--   optim.ASGD(params, {lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0, maximize=false})
--   optim.LBFGS(params, {lr=1, max_iter=20, max_eval=max_iter*5/4, tolerance_grad=1e-7,
--     tolerance_change=1e-9, history_size=100, line_search_fn=nil}): step(closure) only, one
--     param group; line_search_fn='strong_wolfe' is not implemented (NotImplementedError).
local T = require 'dpl.tensor'
local autograd = require 'dpl.autograd'
local errors = require 'dpl.errors'
local options = require 'dpl.options'

local fmt = string.format
local lua_error = error
local error = errors.raise
local is_tensor = T.is_tensor

local M = {}

function M.install(optim, h)
  local Optimizer, misconf, check_range, show = h.Optimizer, h.misconf, h.check_range, h.show
  local check_foreach = h.check_foreach

  ---------------------------------------------------------------- Rprop
  local RPROP_KEYS = options.keys('lr', 'etas', 'step_sizes', 'maximize', 'foreach')
  optim.Rprop = Optimizer:extend('Rprop')
  function optim.Rprop:__init(params, ...)
    local opts = options.positional('Rprop', { 'lr', 'etas', 'step_sizes' }, ...)
    options.check(opts, RPROP_KEYS, 'Rprop')
    opts = opts or {}
    local d = { lr = opts.lr or 1e-2, etas = opts.etas or { 0.5, 1.2 }, step_sizes = opts.step_sizes or { 1e-6, 50 },
      maximize = opts.maximize or false }
    check_range('Rprop', 'lr', d.lr, 0)
    local e = d.etas
    if type(e) ~= 'table' or type(e[1]) ~= 'number' or type(e[2]) ~= 'number' or not (0 < e[1] and e[1] < 1 and 1 < e[2]) then
      misconf('Rprop: invalid eta values: %s (expected {etaminus, etaplus} with 0 < etaminus < 1 < etaplus)', show(e))
    end
    local s = d.step_sizes
    if type(s) ~= 'table' or type(s[1]) ~= 'number' or type(s[2]) ~= 'number' then
      misconf('Rprop: step_sizes must be a pair {min, max} of numbers, got %s', show(s))
    end
    self.foreach = check_foreach('Rprop', opts.foreach)
    Optimizer.__init(self, params, d)
  end
  optim.Rprop._group_checks = { { 'lr', 'nonneg' }, { 'maximize', 'bool' } }
  function optim.Rprop:update_param(p, g, o, st)
    if not st.step then
      st.step, st.prev = 0, T.zeros_like(p)
      st.step_size = T.full_like(g, o.lr)
    end
    st.step = st.step + 1
    if o.maximize then g = -g end
    local etaminus, etaplus = o.etas[1], o.etas[2]
    local sign = (g * st.prev):sign()
    local pos, neg = sign:gt(0), sign:lt(0)
    -- sign -> etaplus where > 0, etaminus where < 0, 1 where 0
    local factor = T.ones_like(sign):masked_fill(pos, etaplus):masked_fill(neg, etaminus)
    st.step_size:mul_(factor):clamp_(o.step_sizes[1], o.step_sizes[2])
    g = g:clone():masked_fill(neg, 0) -- a sign change: no step, and no "previous" gradient
    p:add_(g:sign() * st.step_size, -1)
    st.prev:copy_(g)
  end

  ---------------------------------------------------------------- ASGD
  local ASGD_KEYS = options.keys('lr', 'lambd', 'alpha', 't0', 'weight_decay', 'maximize', 'foreach')
  optim.ASGD = Optimizer:extend('ASGD')
  function optim.ASGD:__init(params, ...)
    local opts = options.positional('ASGD', { 'lr', 'lambd', 'alpha', 't0', 'weight_decay' }, ...)
    options.check(opts, ASGD_KEYS, 'ASGD')
    opts = opts or {}
    local d = { lr = opts.lr or 1e-2, lambd = opts.lambd or 1e-4, alpha = opts.alpha or 0.75, t0 = opts.t0 or 1e6,
      weight_decay = opts.weight_decay or 0, maximize = opts.maximize or false }
    check_range('ASGD', 'lr', d.lr, 0)
    check_range('ASGD', 'weight_decay', d.weight_decay, 0)
    for _, k in ipairs({ 'lambd', 'alpha', 't0' }) do
      if type(d[k]) ~= 'number' then misconf('ASGD: %s must be a number, got %s', k, show(d[k])) end
    end
    self.foreach = check_foreach('ASGD', opts.foreach)
    Optimizer.__init(self, params, d)
  end
  optim.ASGD._group_checks = { { 'lr', 'nonneg' }, { 'lambd', 'num' }, { 'alpha', 'num' }, { 't0', 'num' },
    { 'weight_decay', 'nonneg' }, { 'maximize', 'bool' } }
  -- (eta and mu are numbers in the state; PyTorch keeps them as 0-d tensors of the default dtype)
  function optim.ASGD:update_param(p, g, o, st)
    if not st.step then st.step, st.eta, st.mu, st.ax = 0, o.lr, 1, T.zeros_like(p) end
    if o.maximize then g = -g end
    st.step = st.step + 1
    if o.weight_decay ~= 0 then g = g:add(p, o.weight_decay) end
    p:mul_(1 - o.lambd * st.eta)
    p:add_(g, -st.eta)
    if st.mu ~= 1 then st.ax:add_((p - st.ax):mul(st.mu)) else st.ax:copy_(p) end
    st.eta = o.lr / (1 + o.lambd * o.lr * st.step) ^ o.alpha
    st.mu = 1 / math.max(1, st.step - o.t0)
  end

  ---------------------------------------------------------------- LBFGS
  local LBFGS_KEYS = options.keys('lr', 'max_iter', 'max_eval', 'tolerance_grad', 'tolerance_change', 'history_size',
    'line_search_fn')
  optim.LBFGS = Optimizer:extend('LBFGS')
  function optim.LBFGS:__init(params, ...)
    local opts = options.positional('LBFGS', { 'lr', 'max_iter', 'max_eval', 'tolerance_grad', 'tolerance_change',
      'history_size', 'line_search_fn' }, ...)
    options.check(opts, LBFGS_KEYS, 'LBFGS')
    opts = opts or {}
    local max_iter = opts.max_iter or 20
    local d = { lr = opts.lr or 1, max_iter = max_iter, max_eval = opts.max_eval
      or (type(max_iter) == 'number' and math.floor(max_iter * 5 / 4)) or nil, -- (a bad max_iter: named below)
      tolerance_grad = opts.tolerance_grad or 1e-7, tolerance_change = opts.tolerance_change or 1e-9,
      history_size = opts.history_size or 100 }
    check_range('LBFGS', 'lr', d.lr, 0)
    for _, k in ipairs({ 'max_iter', 'max_eval', 'history_size' }) do
      local v = d[k]
      if type(v) ~= 'number' or v < 1 or v ~= math.floor(v) then misconf('LBFGS: %s must be a positive integer, got %s', k, show(v)) end
    end
    for _, k in ipairs({ 'tolerance_grad', 'tolerance_change' }) do check_range('LBFGS', k, d[k], 0) end
    if opts.line_search_fn ~= nil then
      if opts.line_search_fn == 'strong_wolfe' then
        errors.NotImplementedError:raise("LBFGS: line_search_fn = 'strong_wolfe' is not implemented in dplhost (only nil: fixed steps of lr)", 2)
      end
      misconf("LBFGS: only 'strong_wolfe' is a line search (not implemented in dplhost), got %s", show(opts.line_search_fn))
    end
    Optimizer.__init(self, params, d)
    if #self.param_groups ~= 1 then misconf("LBFGS: doesn't support per-parameter options (parameter groups)") end
    -- (PyTorch fails later, indexing its first parameter or comparing a bool gradient)
    local ps = self.param_groups[1].params
    if #ps == 0 then misconf('LBFGS: needs at least one parameter, got an empty list') end
    for i, p in ipairs(ps) do
      if not p:is_floating_point() then
        misconf('LBFGS: parameters must be floating-point tensors, got %s (parameter %d)', T.dtype_names[p._dtype], i)
      end
    end
  end
  function optim.LBFGS:add_param_group(g)
    if self.param_groups and #self.param_groups > 0 then
      misconf("LBFGS: doesn't support per-parameter options (parameter groups)")
    end
    Optimizer.add_param_group(self, g)
  end
  local function flat_grad(ps)
    local views = {}
    for i, p in ipairs(ps) do
      views[i] = p.grad and p.grad:reshape(-1) or T.zeros(p:numel(), { dtype = p.dtype, device = p.device })
    end
    return T.cat(views, 1)
  end
  local function add_grad(ps, step, update)
    local off = 0
    for _, p in ipairs(ps) do
      local n = p:numel()
      p:add_(update:narrow(1, off + 1, n):view_as(p), step)
      off = off + n
    end
  end
  local function num(v) return is_tensor(v) and v:item() or v end
  --- step(closure): up to max_iter L-BFGS iterations; closure re-evaluates the loss (and its
  --- gradients) and is required. Returns the closure's first loss.
  function optim.LBFGS:step(closure)
    if type(closure) ~= 'function' and not (type(closure) == 'table' and getmetatable(closure) and getmetatable(closure).__call) then
      error(fmt('LBFGS: step needs a closure that re-evaluates the model and returns the loss, got %s', type(closure)), 2)
    end
    local g = self.param_groups[1]
    self:_check_group(g, 1)
    local ps = g.params
    local lr, max_iter, max_eval = g.lr, g.max_iter, g.max_eval
    local tol_grad, tol_change, history = g.tolerance_grad, g.tolerance_change, g.history_size
    local state = self.state[ps[1]]
    if not state then state = {}; self.state[ps[1]] = state end
    state.func_evals = state.func_evals or 0
    state.n_iter = state.n_iter or 0
    local function evaluate()
      local l = autograd.enable_grad(closure)
      if l == nil then error('LBFGS: the closure must return the loss, got nil', 3) end
      return l
    end
    local orig_loss = evaluate()
    local prev_mode = autograd.set_grad_enabled(false)
    local ok, err = pcall(function()
      local loss = num(orig_loss)
      local current_evals = 1
      state.func_evals = state.func_evals + 1
      local fg = flat_grad(ps)
      if fg:abs():max():item() <= tol_grad then return end
      local d, t = state.d, state.t
      local old_dirs, old_stps, ro = state.old_dirs, state.old_stps, state.ro
      local H_diag, prev_fg, prev_loss = state.H_diag, state.prev_flat_grad, state.prev_loss
      local n_iter = 0
      while n_iter < max_iter do
        n_iter = n_iter + 1
        state.n_iter = state.n_iter + 1
        if state.n_iter == 1 then
          d = -fg
          old_dirs, old_stps, ro, H_diag = {}, {}, {}, 1
        else
          local y = fg - prev_fg
          local s = d * t
          local ys = y:dot(s):item()
          if ys > 1e-10 then
            if #old_dirs == history then
              table.remove(old_dirs, 1); table.remove(old_stps, 1); table.remove(ro, 1)
            end
            old_dirs[#old_dirs + 1], old_stps[#old_stps + 1], ro[#ro + 1] = y, s, 1 / ys
            H_diag = ys / y:dot(y):item()
          end
          local al = {}
          local q = -fg
          for i = #old_dirs, 1, -1 do
            al[i] = old_stps[i]:dot(q):item() * ro[i]
            q:add_(old_dirs[i], -al[i])
          end
          d = q * H_diag
          for i = 1, #old_dirs do
            local be = old_dirs[i]:dot(d):item() * ro[i]
            d:add_(old_stps[i], al[i] - be)
          end
        end
        if prev_fg == nil then prev_fg = fg:clone() else prev_fg:copy_(fg) end
        prev_loss = loss
        if state.n_iter == 1 then t = math.min(1, 1 / fg:abs():sum():item()) * lr else t = lr end
        local gtd = fg:dot(d):item()
        if gtd > -tol_change then break end
        local ls_evals = 0
        add_grad(ps, t, d)
        local opt_cond = false
        if n_iter ~= max_iter then
          loss = num(evaluate())
          fg = flat_grad(ps)
          opt_cond = fg:abs():max():item() <= tol_grad
          ls_evals = 1
        end
        current_evals = current_evals + ls_evals
        state.func_evals = state.func_evals + ls_evals
        if n_iter == max_iter or current_evals >= max_eval or opt_cond then break end
        if (d * t):abs():max():item() <= tol_change then break end
        if math.abs(loss - prev_loss) < tol_change then break end
      end
      state.d, state.t, state.old_dirs, state.old_stps, state.ro = d, t, old_dirs, old_stps, ro
      state.H_diag, state.prev_flat_grad, state.prev_loss = H_diag, prev_fg, prev_loss
    end)
    autograd.set_grad_enabled(prev_mode)
    if not ok then lua_error(err, 0) end
    return orig_loss
  end
end

return M
