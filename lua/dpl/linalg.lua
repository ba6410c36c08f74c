-- dpl.linalg: PyTorch's torch.linalg (and Torch7's/PyTorch's older names for the same
-- things: inverse, det, svd, qr, cholesky, ...) on float32/float64 tensors with any batch
-- dims [..., m, n], on the CPU or a GPU. The factorizations run LAPACK through C
-- (src/tensor/dpl_tensor_linalg.c: lu, solve, inv, cholesky, qr, eigh, svd, triangular and
-- LU solves; cuSOLVER for GPU tensors, dpl_tensor_linalg_dev.c); the rest composes
-- dpl.tensor's recorded ops. Gradients: inv, det, slogdet/logdet, solve, cholesky,
-- solve_triangular, eigh/eigvalsh, svd/svdvals and qr have backward rules here (the
-- multi-output ones record one packed node that their outputs are views of); the composed
-- functions (matrix_power, matrix_exp, pinv, norms, cholesky_solve, ...) differentiate
-- through their parts; lu_factor, lu, lu_solve and matrix_rank have none.
-- Errors: a singular or non positive-definite matrix raises LinAlgError (a RuntimeError),
-- naming the batch element (1-based) as PyTorch does (0-based there); the *_ex forms
-- return LAPACK's info instead. eig/eigvals (complex results) raise NotImplementedError.
-- `require 'dpl.linalg'` is the namespace (dpl.linalg); dpl.tensor calls it as a function
-- the first time a legacy name (t:inverse(), dpl.det, ...) is read, which installs those.
local ffi = require 'ffi'
local C = require('dpl.capi').C
local errors = require 'dpl.errors'
local options = require 'dpl.options'
local T = require 'dpl.tensor'

local type, tostring, tonumber, select, ipairs = type, tostring, tonumber, select, ipairs
local floor, huge, max, min, log, ceil = math.floor, math.huge, math.max, math.min, math.log, math.ceil
local fmt = string.format
local lua_error = error
local ENOMEM = -2
local keys = options.keys

local L = {}
local is_tensor = T.is_tensor
local outs = { ffi.new('dpl_tensor*[1]'), ffi.new('dpl_tensor*[1]'), ffi.new('dpl_tensor*[1]'), ffi.new('dpl_tensor*[1]') }
local EPS = { [0] = 1.1920928955078125e-07, [1] = 2.220446049250313e-16 }

local function AG() return package.loaded['dpl.autograd'] end
local function value_error(msg) lua_error(errors.ValueError(msg), 0) end
local function runtime_error(msg) lua_error(errors.RuntimeError(msg), 0) end
local function linalg_error(msg) lua_error(errors.LinAlgError(msg), 0) end
local function not_impl(msg) lua_error(errors.NotImplementedError(msg), 0) end

local function got(v)
  if type(v) == 'cdata' then return is_tensor(v) and 'a tensor' or 'cdata (not a tensor)' end
  if type(v) == 'string' then return fmt("'%s'", v) end
  return type(v) == 'number' and tostring(v) or type(v)
end
local function need_tensor(name, what, v)
  if not is_tensor(v) then value_error(fmt('%s: %s must be a tensor, got %s', name, what, got(v))) end
end
local function need_bool(name, what, v)
  if v ~= nil and type(v) ~= 'boolean' then value_error(fmt('%s: %s must be true or false, got %s', name, what, got(v))) end
end
local function need_int(name, what, v)
  if type(v) ~= 'number' or v ~= floor(v) or v >= 2 ^ 63 or v < -2 ^ 63 then -- (1e308: printed as -2^63 by %d)
    value_error(fmt('%s: %s must be an integer, got %s', name, what, got(v)))
  end
end
local function need_num(name, what, v)
  if v ~= nil and (type(v) ~= 'number' or v ~= v) then value_error(fmt('%s: %s must be a number, got %s', name, what, got(v))) end
end
-- the options table of a call (nil allowed), checked against its keys
local function opts_of(name, o, ks)
  if o == nil then return {} end
  if type(o) ~= 'table' then value_error(fmt('%s: options must be a table, got %s', name, got(o))) end
  options.check(o, ks, name)
  return o
end
local function dtname(t) return T.dtype_names[t._dtype] end
-- a float32/float64 matrix batch (square when asked): PyTorch's checks and messages
local function need_mat(name, A, square, what)
  what = what or 'A'
  need_tensor(name, what, A)
  if A._ndim < 2 then runtime_error(fmt('%s: The input tensor %s must have at least 2 dimensions.', name, what)) end
  local dt = A._dtype
  if dt == 2 or dt == 3 then runtime_error(fmt('%s: Low precision dtypes not supported. Got %s', name, dtname(A))) end
  if dt > 3 then runtime_error(fmt('%s: Expected a floating point tensor as input. Got %s', name, dtname(A))) end
  if square then
    local m, n = tonumber(A._shape[A._ndim - 2]), tonumber(A._shape[A._ndim - 1])
    if m ~= n then
      runtime_error(fmt('%s: %s must be batches of square matrices, but they are %d by %d matrices', name, what, m, n))
    end
  end
end
local function rows(A) return tonumber(A._shape[A._ndim - 2]) end
local function cols(A) return tonumber(A._shape[A._ndim - 1]) end
local function batch_shape(A)
  local s = {}
  for i = 0, A._ndim - 3 do s[i + 1] = tonumber(A._shape[i]) end
  return s
end
local function with(s, ...)
  local r = {}
  for i = 1, #s do r[i] = s[i] end
  for i = 1, select('#', ...) do r[#r + 1] = select(i, ...) end
  return r
end
-- new tensors of A's dtype on A's device (a GPU tensor's rules build their constants there)
local function opts_like(A) return { dtype = dtname(A), device = A.device } end
local function mT(x) return x:transpose(-2, -1) end
-- v [..., n] -> [..., n, n] with v on the diagonal
local function diag_embed(v)
  local n = tonumber(v._shape[v._ndim - 1])
  return v:unsqueeze(-1) * T.eye(n, opts_like(v))
end

-- calls a C routine with nout result pointers; returns the wrapped results (nil for NULL)
local function ccall(nout, fn, ...)
  local n = select('#', ...)
  local a1, a2, a3, a4, a5 = ...
  local st
  local function run()
    if n == 1 then
      return nout == 1 and fn(a1, outs[1]) or nout == 2 and fn(a1, outs[1], outs[2]) or nout == 3 and
          fn(a1, outs[1], outs[2], outs[3]) or fn(a1, outs[1], outs[2], outs[3], outs[4])
    elseif n == 2 then
      return nout == 1 and fn(a1, a2, outs[1]) or nout == 2 and fn(a1, a2, outs[1], outs[2]) or
          nout == 3 and fn(a1, a2, outs[1], outs[2], outs[3]) or fn(a1, a2, outs[1], outs[2], outs[3], outs[4])
    elseif n == 3 then
      return nout == 1 and fn(a1, a2, a3, outs[1]) or nout == 2 and fn(a1, a2, a3, outs[1], outs[2]) or
          nout == 3 and fn(a1, a2, a3, outs[1], outs[2], outs[3]) or fn(a1, a2, a3, outs[1], outs[2], outs[3], outs[4])
    elseif n == 4 then
      return nout == 1 and fn(a1, a2, a3, a4, outs[1]) or fn(a1, a2, a3, a4, outs[1], outs[2])
    end
    return fn(a1, a2, a3, a4, a5, outs[1])
  end
  st = run()
  if st == ENOMEM then collectgarbage(); st = run() end
  if st ~= 0 then T._fail(2, st) end
  local r = {}
  for i = 1, nout do
    if outs[i][0] ~= nil then r[i] = T._wrap(outs[i]) else r[i] = false end
  end
  return r[1], r[2], r[3], r[4]
end

-- raw results (no recording) of A's decompositions: the rules below record them
local function no_grad(f, ...) return AG().no_grad(f, ...) end
local function wants_grad(...)
  local A = AG()
  if not (A and A.is_grad_enabled()) then return false end
  for i = 1, select('#', ...) do
    local x = select(i, ...)
    if is_tensor(x) and x.requires_grad then return true end
  end
  return false
end
local function save(n, t)
  local A = AG()
  return A.save_for_backward and A.save_for_backward(n, t) or t
end

-- LAPACK's info per matrix -> the first failing one (1-based batch element) or nil (the C
-- routines return info in host memory for GPU inputs too: read back once there)
local function first_bad(info)
  if info:numel() == 0 then return nil end
  local flat = info:reshape(-1)
  local bad = flat:ne(0)
  if not bad:any():item() then return nil end
  local k = tonumber(bad:to('int64'):argmax():item())
  return k, tonumber(flat[k]:item()), info:dim() > 0
end
local function batch_prefix(name, k, batched)
  return batched and fmt('%s: (Batch element %d): ', name, k) or name .. ': '
end

---------------------------------------------------------------- LU, det, slogdet
--- linalg.lu_factor_ex(A [, {pivot=true, check_errors=false}]) -> LU, pivots, info
function L.lu_factor_ex(A, o)
  local name = 'linalg.lu_factor_ex'
  o = opts_of(name, o, keys('pivot', 'check_errors'))
  need_mat(name, A)
  need_bool(name, 'pivot', o.pivot)
  if o.pivot == false then not_impl(name .. ': LU without pivoting is not implemented on the CPU') end
  local LU, piv, info = ccall(3, C.dpl_linalg_lu, A)
  if o.check_errors then
    local k, v, b = first_bad(info)
    if k then linalg_error(fmt('%sThe factorization could not be completed because the matrix is singular (U[%d, %d] is zero).',
      batch_prefix(name, k, b), v, v)) end
  end
  return LU, piv, info
end
--- linalg.lu_factor(A [, {pivot=true}]) -> LU, pivots (1-based int32, as LAPACK and PyTorch)
function L.lu_factor(A, o)
  o = opts_of('linalg.lu_factor', o, keys('pivot'))
  local LU, piv = L.lu_factor_ex(A, { pivot = o.pivot })
  return LU, piv
end

--- linalg.lu_unpack / torch.lu_unpack(LU, pivots [, unpack_data=true [, unpack_pivots=true]])
--- -> P, L, U with A = P L U
function L.lu_unpack(LU, piv, unpack_data, unpack_pivots)
  local name = 'lu_unpack'
  need_mat(name, LU, false, 'LU')
  need_tensor(name, 'pivots', piv)
  if piv._dtype ~= 4 then runtime_error(fmt('%s: pivots must be int32 (lu_factor\'s), got %s', name, dtname(piv))) end
  need_bool(name, 'unpack_data', unpack_data)
  need_bool(name, 'unpack_pivots', unpack_pivots)
  local m, n = rows(LU), cols(LU)
  local k = min(m, n)
  local P, Lo, U = T.empty(0, opts_like(LU)), T.empty(0, opts_like(LU)), T.empty(0, opts_like(LU))
  if unpack_data ~= false then
    Lo = LU:narrow(-1, 1, k):tril(-1) + T.eye(m, k, opts_like(LU))
    U = LU:narrow(-2, 1, k):triu()
  end
  if unpack_pivots ~= false then
    local bs = batch_shape(LU)
    local pv = piv:reshape(-1, k):to('int64')
    local count = pv:size()[1]
    if tonumber(piv:numel()) ~= count * k then runtime_error(fmt('%s: pivots do not fit LU (expected %d per matrix)', name, k)) end
    local perm = T.empty({ count, m }, { dtype = 'int64' })
    local pt = pv:totable()
    local rowsl = {}
    for b = 1, count do
      local p = {}
      for i = 1, m do p[i] = i end
      for i = 1, k do
        local j = pt[b][i]
        if j < 1 or j > m then runtime_error(fmt('%s: pivot %d is %d, expected 1..%d', name, i, j, m)) end
        p[i], p[j] = p[j], p[i]
      end
      rowsl[b] = p
    end
    if count > 0 then perm:copy_(T.tensor(rowsl, { dtype = 'int64' })) end
    -- (P_lapack A)[i] = A[perm[i]]: P = P_lapack^T has P[perm[i], i] = 1
    local Pf = T.zeros({ count, m, m }, { dtype = dtname(LU) }) -- built on the host
    if count > 0 and m > 0 then
      Pf:scatter_(3, perm:unsqueeze(3), T.ones({ count, m, 1 }, { dtype = dtname(LU) }))
    end
    P = mT(Pf):reshape(with(bs, m, m))
    if LU._devtype ~= 0 then P = P:to(LU.device) end
  end
  return P, Lo, U
end

--- linalg.lu(A [, {pivot=true}]) -> P, L, U with A = P L U
function L.lu(A, o)
  o = opts_of('linalg.lu', o, keys('pivot'))
  local LU, piv = L.lu_factor_ex(A, { pivot = o.pivot })
  return L.lu_unpack(LU, piv)
end

local DET_RULE = {
  nin = 1, name = 'linalg.det',
  save = function(n, out, A) n.A, n.d = save(n, A), save(n, out) end,
  bw = function(n, g)
    local A, d = n.A, n.d
    if d:eq(0):any():item() then
      -- singular matrices: the cofactor matrix through the SVD, A = U S Vh:
      -- d det / dA = det(U) det(Vh) U diag(prod_{j ~= i} s_j) Vh
      local U, S, Vh = L.svd(A, { full_matrices = false })
      local k = tonumber(S._shape[S._ndim - 1])
      local ones = T.ones(with(batch_shape(A), 1), opts_like(A))
      local left = T.cat({ ones, S:narrow(-1, 1, k - 1) }, -1):cumprod(-1)
      local right = T.cat({ S:narrow(-1, 2, k - 1), ones }, -1):flip(-1):cumprod(-1):flip(-1)
      local cof = U:matmul(diag_embed(left * right)):matmul(Vh) * (L.det(U) * L.det(Vh)):unsqueeze(-1):unsqueeze(-1)
      return cof * g:unsqueeze(-1):unsqueeze(-1)
    end
    local inv = ccall(2, C.dpl_linalg_inv, A)
    return mT(inv) * (g * d):unsqueeze(-1):unsqueeze(-1)
  end,
}
--- linalg.det(A) / torch.det / t:det(): the determinant of each square matrix
function L.det(A)
  local name = 'linalg.det'
  need_mat(name, A, true)
  local d = (ccall(3, C.dpl_linalg_det, A))
  if wants_grad(A) then return AG().record(DET_RULE, d, A) end
  return d
end

local LOGABSDET_RULE = {
  nin = 1, name = 'linalg.slogdet',
  save = function(n, out, A) n.A = save(n, A) end,
  bw = function(n, g)
    local inv = ccall(2, C.dpl_linalg_inv, n.A)
    return mT(inv) * g:unsqueeze(-1):unsqueeze(-1)
  end,
}
--- linalg.slogdet(A) / torch.slogdet -> sign, logabsdet (sign 0 and logabsdet -inf when singular)
function L.slogdet(A)
  local name = 'linalg.slogdet'
  need_mat(name, A, true)
  local _, sign, la = ccall(3, C.dpl_linalg_det, A)
  if wants_grad(A) then la = AG().record(LOGABSDET_RULE, la, A) end
  return sign, la
end
--- torch.logdet(A) / t:logdet(): log det A (nan when det < 0, -inf when det = 0)
function L.logdet(A)
  local sign, la = L.slogdet(A)
  return T.where(sign:lt(0), T.full({}, 0 / 0, opts_like(la)), la)
end

---------------------------------------------------------------- inv, solve
local INV_RULE = {
  nin = 1, name = 'linalg.inv',
  save = function(n, out) n.X = save(n, out) end,
  bw = function(n, g)
    local Xt = mT(n.X)
    return -Xt:matmul(g):matmul(Xt)
  end,
}
--- linalg.inv_ex(A [, {check_errors=false}]) -> inverse, info
function L.inv_ex(A, o)
  local name = 'linalg.inv_ex'
  o = opts_of(name, o, keys('check_errors'))
  need_mat(name, A, true)
  local X, info = ccall(2, C.dpl_linalg_inv, A)
  if o.check_errors then
    local k, v, b = first_bad(info)
    if k then linalg_error(fmt('%sThe diagonal element %d is zero, the inversion could not be completed because the input '
      .. 'matrix is singular.', batch_prefix('linalg.inv', k, b), v)) end
  end
  if wants_grad(A) then X = AG().record(INV_RULE, X, A) end
  return X, info
end
--- linalg.inv(A) / torch.inverse / t:inverse(): LinAlgError when a matrix is singular
function L.inv(A)
  need_mat('linalg.inv', A, true)
  return (L.inv_ex(A, { check_errors = true }))
end

-- broadcast batch dims of A [..., n, n] and B [..., n, k]: expanded contiguous copies
local function broadcast_batch(A, B)
  local ba, bb = batch_shape(A), batch_shape(B)
  local nd = max(#ba, #bb)
  local bs = {}
  for i = 1, nd do
    local x, y = ba[#ba - nd + i] or 1, bb[#bb - nd + i] or 1
    if x ~= y and x ~= 1 and y ~= 1 then return nil end
    bs[i] = x == 1 and y or x
  end
  local Ae = A:expand(with(bs, rows(A), cols(A)))
  local Be = B:expand(with(bs, rows(B), cols(B)))
  return Ae, Be, bs
end

local SOLVE_RULE = {
  nin = 2, name = 'linalg.solve',
  save = function(n, out, A, B) n.A, n.X = save(n, A), save(n, out) end,
  bw = function(n, g)
    local gB = ccall(2, C.dpl_linalg_solve, mT(n.A):contiguous(), g:contiguous())
    local gA = nil
    if n[1] then gA = -gB:matmul(mT(n.X)) end
    return gA, gB
  end,
}
--- linalg.solve_ex(A, B [, {left=true, check_errors=false}]) -> X, info
function L.solve_ex(A, B, o)
  local name = 'linalg.solve'
  o = opts_of('linalg.solve_ex', o, keys('left', 'check_errors'))
  need_bool(name, 'left', o.left)
  need_mat(name, A, true)
  need_tensor(name, 'B', B)
  if B._dtype ~= A._dtype then
    runtime_error(fmt('%s: Expected A and B to have the same dtype, but found A of type %s and B of type %s instead', name,
      dtname(A), dtname(B)))
  end
  if o.left == false then -- X A = B  <=>  A^T X^T = B^T
    if B._ndim < 2 then runtime_error(name .. ': with left=false, B must have at least 2 dimensions') end
    local X, info = L.solve_ex(mT(A), mT(B), { check_errors = o.check_errors })
    return mT(X), info
  end
  local n = rows(A)
  -- B is a (batch of) vector(s) when it is 1-d, or has A's batch shape plus n
  local vec = B._ndim == 1
  if not vec and B._ndim == A._ndim - 1 then
    vec = true
    for i = 0, B._ndim - 1 do if B._shape[i] ~= A._shape[i] then vec = false break end end
  end
  local Bm = vec and B:unsqueeze(-1) or B
  if Bm._ndim < 2 or rows(Bm) ~= n then
    runtime_error(fmt('%s: Incompatible shapes of A and B for the equation AX = B (%dx%d and %dx%d)', name, n, n,
      Bm._ndim >= 1 and tonumber(Bm._shape[math.max(Bm._ndim - 2, 0)]) or 0, Bm._ndim >= 2 and cols(Bm) or 1))
  end
  local Ae, Be = broadcast_batch(A, Bm)
  if not Ae then
    runtime_error(fmt('%s: the batch dims of A %s and B %s cannot be broadcast', name, tostring(A:size()), tostring(B:size())))
  end
  local X, info = ccall(2, C.dpl_linalg_solve, Ae:contiguous(), Be:contiguous())
  if o.check_errors then
    local k, _, b = first_bad(info)
    if k then linalg_error(fmt('%sThe solver failed because the input matrix is singular.', batch_prefix(name, k, b))) end
  end
  if wants_grad(A, B) then X = AG().record(SOLVE_RULE, X, Ae, Be) end
  if vec then X = X:squeeze(-1) end
  return X, info
end
--- linalg.solve(A, B [, {left=true}]): X with A X = B (X A = B when left=false); B a matrix
--- [..., n, k] or a vector [..., n]; batch dims broadcast
function L.solve(A, B, o)
  o = opts_of('linalg.solve', o, keys('left'))
  return (L.solve_ex(A, B, { left = o.left, check_errors = true }))
end

---------------------------------------------------------------- triangular solves, Cholesky
local function tri_mask(x, upper, unit)
  if upper then return x:triu(unit and 1 or 0) end
  return x:tril(unit and -1 or 0)
end
local function raw_trisolve(A, B, upper, left, unit)
  return ccall(1, C.dpl_linalg_solve_triangular, A:contiguous(), B:contiguous(), upper and 1 or 0, left and 1 or 0,
    unit and 1 or 0)
end
local TRI_RULE = {
  nin = 2, name = 'linalg.solve_triangular',
  save = function(n, out, A, B, upper, left, unit)
    n.A, n.X, n.upper, n.left, n.unit = save(n, A), save(n, out), upper, left, unit
  end,
  bw = function(n, g)
    local At = mT(n.A)
    local gB = raw_trisolve(At, g, not n.upper, n.left, n.unit)
    local gA
    if n[1] then
      gA = n.left and -gB:matmul(mT(n.X)) or -mT(n.X):matmul(gB)
      gA = tri_mask(gA, n.upper, n.unit)
    end
    return gA, gB
  end,
}
--- linalg.solve_triangular(A, B, {upper=, left=true, unitriangular=false}): X with A X = B
--- (X A = B when left=false), A triangular (its other triangle is not read)
function L.solve_triangular(A, B, o)
  local name = 'linalg.solve_triangular'
  o = opts_of(name, o, keys('upper', 'left', 'unitriangular'))
  if o.upper == nil then value_error(name .. ": the option 'upper' is required (true or false)") end
  need_bool(name, 'upper', o.upper)
  need_bool(name, 'left', o.left)
  need_bool(name, 'unitriangular', o.unitriangular)
  need_mat(name, A, true)
  need_tensor(name, 'B', B)
  if B._ndim < 2 then runtime_error(name .. ': The input tensor B must have at least 2 dimensions.') end
  local left = o.left ~= false
  local Ae, Be = broadcast_batch(A, B)
  if not Ae then runtime_error(fmt('%s: the batch dims of A and B cannot be broadcast', name)) end
  local X = raw_trisolve(Ae, Be, o.upper, left, o.unitriangular)
  if wants_grad(A, B) then X = AG().record(TRI_RULE, X, Ae, Be, o.upper, left, o.unitriangular == true) end
  return X
end
--- torch.triangular_solve(b, A [, upper=true [, transpose=false [, unitriangular=false]]])
--- -> solution, cloned_coefficient (the older form: note b first and upper by default)
function L.triangular_solve(b, A, upper, transpose, unitriangular)
  local name = 'triangular_solve'
  need_bool(name, 'upper', upper)
  need_bool(name, 'transpose', transpose)
  need_bool(name, 'unitriangular', unitriangular)
  need_mat(name, A, true)
  need_mat(name, b, false, 'b')
  if upper == nil then upper = true end
  local M = A
  if transpose then M, upper = mT(A), not upper end
  return L.solve_triangular(M, b, { upper = upper, unitriangular = unitriangular }), A:clone()
end

local CHOL_RULE = {
  nin = 1, name = 'linalg.cholesky',
  save = function(n, out, A, upper) n.L, n.upper = save(n, out), upper end,
  bw = function(n, g)
    local Lo, gL = n.L, g
    if n.upper then Lo, gL = mT(Lo), mT(gL) end
    local P = mT(Lo):matmul(gL):tril()
    P = (P + mT(P:tril(-1))) * 0.5
    local gA = raw_trisolve(mT(Lo), P, true, true, false)
    return raw_trisolve(Lo, gA, false, false, false)
  end,
}
--- linalg.cholesky_ex(A [, {upper=false, check_errors=false}]) -> L, info
function L.cholesky_ex(A, o, _name)
  local name = _name or 'linalg.cholesky_ex'
  o = opts_of(name, o, keys('upper', 'check_errors'))
  need_bool(name, 'upper', o.upper)
  need_mat(name, A, true)
  local Lo, info = ccall(2, C.dpl_linalg_cholesky, A, o.upper and 1 or 0)
  if o.check_errors then
    local k, v, b = first_bad(info)
    if k then linalg_error(fmt('%sThe factorization could not be completed because the input is not positive-definite (the '
      .. 'leading minor of order %d is not positive-definite).', batch_prefix(_name or 'linalg.cholesky', k, b), v)) end
  end
  if wants_grad(A) then Lo = AG().record(CHOL_RULE, Lo, A, o.upper == true) end
  return Lo, info
end
--- linalg.cholesky(A [, {upper=false}]): L with A = L L^T (upper: U with A = U^T U)
function L.cholesky(A, o)
  o = opts_of('linalg.cholesky', o, keys('upper'))
  need_mat('linalg.cholesky', A, true)
  return (L.cholesky_ex(A, { upper = o.upper, check_errors = true }, 'linalg.cholesky'))
end
--- torch.cholesky(A [, upper=false]) / t:cholesky(upper): the older form
local function cholesky_legacy(A, upper)
  need_bool('cholesky', 'upper', upper)
  need_mat('cholesky', A, true)
  return (L.cholesky_ex(A, { upper = upper, check_errors = true }, 'cholesky'))
end
--- torch.cholesky_solve(B, L [, upper=false]): X with (L L^T) X = B
function L.cholesky_solve(B, Lo, upper)
  local name = 'cholesky_solve'
  need_bool(name, 'upper', upper)
  need_mat(name, B, false, 'B')
  need_mat(name, Lo, true, 'L')
  if upper then
    local Y = L.solve_triangular(mT(Lo), B, { upper = false })
    return L.solve_triangular(Lo, Y, { upper = true })
  end
  local Y = L.solve_triangular(Lo, B, { upper = false })
  return L.solve_triangular(mT(Lo), Y, { upper = true })
end
--- torch.cholesky_inverse(L [, upper=false]): (L L^T)^-1
function L.cholesky_inverse(Lo, upper)
  need_mat('cholesky_inverse', Lo, true, 'L')
  local n = rows(Lo)
  local I = T.eye(n, opts_like(Lo)):expand(with(batch_shape(Lo), n, n))
  return L.cholesky_solve(I, Lo, upper)
end

--- linalg.lu_solve(LU, pivots, B [, {left=true, adjoint=false}]): X with A X = B from lu_factor's
--- factors (no gradient)
function L.lu_solve(LU, piv, B, o)
  local name = 'linalg.lu_solve'
  o = opts_of(name, o, keys('left', 'adjoint'))
  need_bool(name, 'left', o.left)
  need_bool(name, 'adjoint', o.adjoint)
  need_mat(name, LU, true, 'LU')
  need_mat(name, B, false, 'B')
  need_tensor(name, 'pivots', piv)
  if o.left == false then -- X A = B <=> A^T X^T = B^T
    return mT(ccall(1, C.dpl_linalg_lu_solve, LU, piv, mT(B):contiguous(), o.adjoint and 0 or 1))
  end
  return (ccall(1, C.dpl_linalg_lu_solve, LU, piv, B, o.adjoint and 1 or 0))
end

---------------------------------------------------------------- multi-output rules: eigh, svd, qr
-- The outputs of a differentiable decomposition are views of one packed tensor [..., P] (each
-- output flattened after the batch dims, side by side) recorded with the rule; backward
-- splits the packed gradient back (a part that is all zeros: that output was not used).
local function pack(parts, bs)
  local flat = {}
  for i, p in ipairs(parts) do flat[i] = p:reshape(with(bs, -1)) end
  return T.cat(flat, -1)
end
local function unpack_parts(x, parts, bs)
  local nb = 1
  for i = 1, #bs do nb = nb * bs[i] end
  local r, off = {}, 1
  for i, p in ipairs(parts) do
    local len = nb > 0 and tonumber(p:numel()) / nb or 0
    local sz = p:size()
    local shp = {}
    for d = 1, #sz do shp[d] = sz[d] end
    r[i] = x:narrow(-1, off, len):reshape(shp)
    off = off + len
  end
  return r
end
local function used(g) return g:numel() > 0 and g:ne(0):any():item() end
local function record_packed(rule, parts, A, ...)
  local bs = batch_shape(A)
  local packed = no_grad(pack, parts, bs)
  local rec = AG().record(rule, packed, A, parts, bs, ...)
  return unpack_parts(rec, parts, bs)
end

local EIGH_RULE = {
  nin = 1, name = 'linalg.eigh',
  save = function(n, out, A, parts, bs) n.parts, n.bs = parts, bs end,
  bw = function(n, g)
    local W, V = n.parts[1], n.parts[2]
    local gs = unpack_parts(g, n.parts, n.bs)
    local gW, gV = gs[1], gs[2]
    if not used(gV) then return V:matmul(diag_embed(gW)):matmul(mT(V)) end
    local VgV = mT(V):matmul(gV)
    VgV = (VgV - mT(VgV)) * 0.5
    local E = W:unsqueeze(-2) - W:unsqueeze(-1) -- E[i, j] = w_j - w_i
    local nn = tonumber(W._shape[W._ndim - 1])
    local I = T.eye(nn, opts_like(W))
    local R = VgV / (E + I) * (1 - I) + diag_embed(gW)
    return V:matmul(R):matmul(mT(V))
  end,
}
local EIGVALS_RULE = {
  nin = 1, name = 'linalg.eigvalsh',
  save = function(n, out, A, V) n.V = V end,
  bw = function(n, g) return n.V:matmul(diag_embed(g)):matmul(mT(n.V)) end,
}
local function uplo_of(name, u)
  if u == nil then return false end
  if u ~= 'L' and u ~= 'U' then runtime_error(fmt("%s: Expected UPLO argument to be 'L' or 'U', but got %s", name, tostring(u))) end
  return u == 'U'
end
--- linalg.eigh(A [, {UPLO='L'}]) -> eigenvalues (ascending), eigenvectors (columns) of the
--- symmetric matrices whose lower (UPLO='U': upper) triangle A holds
function L.eigh(A, o)
  local name = 'linalg.eigh'
  if type(o) == 'string' then o = { UPLO = o } end
  o = opts_of(name, o, keys('UPLO'))
  local up = uplo_of(name, o.UPLO)
  need_mat(name, A, true)
  local W, V, info = ccall(3, C.dpl_linalg_eigh, A, up and 1 or 0, 1)
  local k, v, b = first_bad(info)
  if k then linalg_error(fmt('%sThe algorithm failed to converge because the input matrix is ill-conditioned or has too many '
    .. 'repeated eigenvalues (error code: %d).', batch_prefix(name, k, b), v)) end
  if wants_grad(A) then
    local r = record_packed(EIGH_RULE, { W, V }, A)
    return r[1], r[2]
  end
  return W, V
end
--- linalg.eigvalsh(A [, {UPLO='L'}]): the eigenvalues alone
function L.eigvalsh(A, o)
  local name = 'linalg.eigvalsh'
  if type(o) == 'string' then o = { UPLO = o } end
  o = opts_of(name, o, keys('UPLO'))
  local up = uplo_of(name, o.UPLO)
  need_mat(name, A, true)
  local g = wants_grad(A)
  local W, V, info = ccall(3, C.dpl_linalg_eigh, A, up and 1 or 0, g and 1 or 0)
  local k, v, b = first_bad(info)
  if k then linalg_error(fmt('%sThe algorithm failed to converge (error code: %d).', batch_prefix(name, k, b), v)) end
  if g then W = AG().record(EIGVALS_RULE, W, A, V) end
  return W
end
--- linalg.eig / linalg.eigvals: complex results, which dplhost has no dtype for
function L.eig() not_impl('linalg.eig: not implemented: its results are complex and dplhost has no complex dtype '
  .. '(for symmetric matrices use linalg.eigh)') end
function L.eigvals() not_impl('linalg.eigvals: not implemented: its results are complex and dplhost has no complex dtype '
  .. '(for symmetric matrices use linalg.eigvalsh)') end

local SVD_RULE = {
  nin = 1, name = 'linalg.svd',
  save = function(n, out, A, parts, bs, full) n.parts, n.bs, n.full = parts, bs, full end,
  bw = function(n, g)
    local U, S, Vh = n.parts[1], n.parts[2], n.parts[3]
    local gs = unpack_parts(g, n.parts, n.bs)
    local gU, gS, gVh = gs[1], gs[2], gs[3]
    local m, nc, k = rows(U), cols(Vh), tonumber(S._shape[S._ndim - 1])
    if n.full then -- only the first k columns of U and rows of Vh take part in A
      U, gU, Vh, gVh = U:narrow(-1, 1, k), gU:narrow(-1, 1, k), Vh:narrow(-2, 1, k), gVh:narrow(-2, 1, k)
    end
    local hasU, hasV = used(gU), used(gVh)
    if not hasU and not hasV then return U:matmul(diag_embed(gS)):matmul(Vh) end
    local V, gV = mT(Vh), mT(gVh)
    local S2 = S * S
    local I = T.eye(k, opts_like(S))
    local E = S2:unsqueeze(-2) - S2:unsqueeze(-1) + I -- E[i, j] = s_j^2 - s_i^2 (1 on the diagonal)
    local R = diag_embed(gS)
    if hasU then
      local J = mT(U):matmul(gU)
      R = R + (J - mT(J)) / E * S:unsqueeze(-2) * (1 - I)
    end
    if hasV then
      local K = mT(V):matmul(gV)
      R = R + S:unsqueeze(-1) * ((K - mT(K)) / E) * (1 - I)
    end
    local gA = U:matmul(R):matmul(Vh)
    if hasU and m > k then -- (I - U U^T) gU S^-1 Vh
      local gUS = gU / S:unsqueeze(-2)
      gA = gA + (gUS - U:matmul(mT(U):matmul(gUS))):matmul(Vh)
    end
    if hasV and nc > k then -- U S^-1 gV^T (I - V V^T)
      local SgVh = gVh / S:unsqueeze(-1)
      gA = gA + U:matmul(SgVh - SgVh:matmul(V):matmul(Vh))
    end
    return gA
  end,
}
local SVDVALS_RULE = {
  nin = 1, name = 'linalg.svdvals',
  save = function(n, out, A, U, Vh) n.U, n.Vh = U, Vh end,
  bw = function(n, g) return n.U:matmul(diag_embed(g)):matmul(n.Vh) end,
}
local function svd_raw(name, A, full, uv)
  local U, S, Vh, info = ccall(4, C.dpl_linalg_svd, A, full and 1 or 0, uv and 1 or 0)
  local k, v, b = first_bad(info)
  if k then
    if v < 0 then
      linalg_error(fmt('%sThe algorithm failed to converge because the input matrix contained non-finite values.',
        batch_prefix(name, k, b)))
    end
    linalg_error(fmt('%sThe algorithm failed to converge because the input matrix is ill-conditioned or has too many '
      .. 'repeated singular values (error code: %d).', batch_prefix(name, k, b), v))
  end
  return U, S, Vh
end
--- linalg.svd(A [, {full_matrices=true}]) -> U, S (descending), Vh with A = U diag(S) Vh
function L.svd(A, o)
  local name = 'linalg.svd'
  o = opts_of(name, o, keys('full_matrices', 'driver'))
  need_bool(name, 'full_matrices', o.full_matrices)
  if o.driver ~= nil then value_error(name .. ': driver is only for CUDA inputs (as in PyTorch)') end
  need_mat(name, A)
  local full = o.full_matrices ~= false
  local U, S, Vh = svd_raw(name, A, full, true)
  if wants_grad(A) then
    local r = record_packed(SVD_RULE, { U, S, Vh }, A, full)
    return r[1], r[2], r[3]
  end
  return U, S, Vh
end
--- linalg.svdvals(A): the singular values alone (descending)
function L.svdvals(A)
  local name = 'linalg.svdvals'
  need_mat(name, A)
  local g = wants_grad(A)
  local U, S, Vh = svd_raw(name, A, false, g)
  if g then S = AG().record(SVDVALS_RULE, S, A, U, Vh) end
  return S
end
--- torch.svd(A [, some=true [, compute_uv=true]]) / t:svd(): U, S, V (V, not Vh; with
--- compute_uv=false U and V are zeros, as PyTorch)
local function svd_legacy(A, some, compute_uv)
  local name = 'svd'
  need_bool(name, 'some', some)
  need_bool(name, 'compute_uv', compute_uv)
  need_mat(name, A)
  if compute_uv == false then
    local S = L.svdvals(A)
    local m, n = rows(A), cols(A)
    local bs = batch_shape(A)
    local ucols, vcols = some == false and m or min(m, n), some == false and n or min(m, n)
    return T.zeros(with(bs, m, ucols), opts_like(A)), S, T.zeros(with(bs, n, vcols), opts_like(A))
  end
  local U, S, Vh = L.svd(A, { full_matrices = some == false })
  return U, S, mT(Vh)
end

local QR_RULE = {
  nin = 1, name = 'linalg.qr',
  save = function(n, out, A, parts, bs, mode, A0) n.parts, n.bs, n.mode, n.A = parts, bs, mode, A0 end,
  bw = function(n, g)
    if n.mode == 'r' then
      runtime_error("The derivative of linalg.qr depends on Q, which is not computed when mode='r'. Please use "
        .. "linalg.qr(A, mode='reduced') if you are going to differentiate through linalg.qr.")
    end
    local Q, R = n.parts[1], n.parts[2]
    local m, nc = rows(Q), cols(R)
    if n.mode == 'complete' and m > nc then
      runtime_error("The QR decomposition is not differentiable when mode='complete' and nrows > ncols.")
    end
    local gs = unpack_parts(g, n.parts, n.bs)
    local gQ, gR = gs[1], gs[2]
    -- square or tall: gA = (gQ - Q sym) R^-T + Q (gR + tril(skew(Q^T gQ) + skew(R gR^T)) R^-T)
    local function square_or_deep(Qx, Rx, gQx, gRx)
      local qdq = mT(Qx):matmul(gQx)
      local rdr = Rx:matmul(mT(gRx))
      local tl = ((qdq - mT(qdq)) + (rdr - mT(rdr))):tril()
      local a = Qx:matmul(gRx + mT(raw_trisolve(Rx, mT(tl), true, true, false)))
      local b = mT(raw_trisolve(Rx, mT(gQx - Qx:matmul(qdq)), true, true, false))
      return a + b
    end
    if m >= nc then return square_or_deep(Q, R, gQ, gR) end
    -- wide: A = [X | Y], R = [U | V]: gY = Q gV, gX from the square case with gQ + Y gV^T
    local Y = n.A:narrow(-1, m + 1, nc - m)
    local U, gU, gV = R:narrow(-1, 1, m), gR:narrow(-1, 1, m), gR:narrow(-1, m + 1, nc - m)
    local gX = square_or_deep(Q, U, gQ + Y:matmul(mT(gV)), gU)
    return T.cat({ gX, Q:matmul(gV) }, -1)
  end,
}
--- linalg.qr(A [, {mode='reduced'}]) -> Q, R ('complete': Q m x m; 'r': R only, Q empty)
function L.qr(A, o)
  local name = 'linalg.qr'
  if type(o) == 'string' then o = { mode = o } end
  o = opts_of(name, o, keys('mode'))
  local mode = o.mode or 'reduced'
  local id = ({ reduced = 0, complete = 1, r = 2 })[mode]
  if not id then
    runtime_error(fmt("qr received unrecognized mode '%s' but expected one of 'reduced' (default), 'r', or 'complete'",
      tostring(mode)))
  end
  need_mat(name, A)
  local Q, R = ccall(2, C.dpl_linalg_qr, A, id)
  if not Q then Q = T.empty(0, opts_like(A)) end
  if wants_grad(A) then
    local parts = id == 2 and { R } or { Q, R }
    local r = record_packed(QR_RULE, parts, A, mode, A)
    if id == 2 then return Q, r[1] end
    return r[1], r[2]
  end
  return Q, R
end
--- torch.qr(A [, some=true]) / t:qr(): the older form
local function qr_legacy(A, some)
  need_bool('qr', 'some', some)
  return L.qr(A, { mode = some == false and 'complete' or 'reduced' })
end

---------------------------------------------------------------- composed functions
--- linalg.matrix_power(A, n): A^n by repeated squaring (n < 0: inv(A)^|n|, n = 0: identity)
function L.matrix_power(A, n)
  local name = 'linalg.matrix_power'
  need_tensor(name, 'A', A)
  need_int(name, 'n', n)
  if A._ndim < 2 then runtime_error(name .. ': The input tensor A must have at least 2 dimensions.') end
  if rows(A) ~= cols(A) then
    runtime_error(fmt('%s: A must be batches of square matrices, but they are %d by %d matrices', name, rows(A), cols(A)))
  end
  if n == 0 then
    local k = rows(A)
    return T.eye(k, opts_like(A)):expand(with(batch_shape(A), k, k)):clone()
  end
  local base = n < 0 and L.inv(A) or A
  n = n < 0 and -n or n
  local result
  while n > 0 do
    if n % 2 == 1 then result = result and result:matmul(base) or base end
    n = floor(n / 2)
    if n > 0 then base = base:matmul(base) end
  end
  return result == A and A:clone() or result
end

--- linalg.matrix_exp(A) / t:matrix_exp(): exp of square matrices (scaling and squaring of a
--- degree-18 Taylor polynomial, differentiable through its products)
function L.matrix_exp(A)
  local name = 'linalg.matrix_exp'
  need_mat(name, A, true)
  local n = rows(A)
  if n == 0 or A:numel() == 0 then return A:clone() end
  local norm1 = no_grad(function() return A:abs():sum(-2):amax(-1):max():item() end)
  if norm1 ~= norm1 or norm1 == huge then return A * (0 / 0) end
  local s = norm1 > 0.5 and ceil(log(norm1 / 0.5) / log(2)) or 0
  local X = s > 0 and A / (2 ^ s) or A
  local I = T.eye(n, opts_like(A))
  -- Horner: I + X (I + X/2 (I + X/3 (... (I + X/18))))
  local P = I + X / 18
  for k = 17, 1, -1 do P = I + X:matmul(P) / k end
  for _ = 1, s do P = P:matmul(P) end
  return P
end

-- PyTorch's default tolerance for rank decisions: max(m, n) * eps of the dtype
local function tolerances(name, A, o)
  need_num(name, 'atol', o.atol)
  need_num(name, 'rtol', o.rtol)
  local atol, rtol = o.atol or 0, o.rtol
  if rtol == nil then rtol = (o.atol == nil or o.atol == 0) and max(rows(A), cols(A)) * EPS[A._dtype] or 0 end
  return atol, rtol
end
--- linalg.pinv(A [, {atol=, rtol=, hermitian=false}]): the pseudo-inverse (singular values
--- below max(atol, rtol * largest) count as zero)
function L.pinv(A, o)
  local name = 'linalg.pinv'
  o = opts_of(name, o, keys('atol', 'rtol', 'hermitian', 'rcond'))
  need_bool(name, 'hermitian', o.hermitian)
  need_mat(name, A)
  if o.rcond ~= nil then o = { rtol = o.rcond, atol = o.atol } end
  local atol, rtol = tolerances(name, A, o)
  local U, S, Vh = L.svd(A, { full_matrices = false })
  if S:numel() == 0 then return T.zeros(with(batch_shape(A), cols(A), rows(A)), opts_like(A)) end
  local smax = S:narrow(-1, 1, 1)
  local keep = S:gt((smax * rtol):clamp(atol))
  local Sinv = T.where(keep, T.where(keep, S, T.ones_like(S)):reciprocal(), T.zeros_like(S))
  return mT(Vh):matmul(Sinv:unsqueeze(-1) * mT(U))
end
--- torch.pinverse(A [, rcond=1e-15])
local function pinverse(A, rcond)
  need_num('pinverse', 'rcond', rcond)
  return L.pinv(A, { rtol = rcond or 1e-15 })
end

--- linalg.matrix_rank(A [, {atol=, rtol=, hermitian=false, tol=}]) -> int64 ranks
function L.matrix_rank(A, o)
  local name = 'linalg.matrix_rank'
  o = opts_of(name, o, keys('atol', 'rtol', 'hermitian', 'tol'))
  need_bool(name, 'hermitian', o.hermitian)
  need_mat(name, A)
  if o.tol ~= nil then o = { atol = o.tol, rtol = 0 } end
  local atol, rtol = tolerances(name, A, o)
  local S = no_grad(function() return L.svdvals(A) end)
  if S:numel() == 0 then return T.zeros(batch_shape(A), { dtype = 'int64', device = A.device }) end
  return S:gt((S:narrow(-1, 1, 1) * rtol):clamp(atol)):sum(-1):to('int64')
end

--- linalg.vector_norm(x [, ord=2 [, dim=nil [, keepdim=false]]] [, {ord=, dim=, keepdim=, dtype=}])
function L.vector_norm(x, ord, dim, keepdim, o)
  local name = 'linalg.vector_norm'
  if type(ord) == 'table' then ord, o = nil, ord elseif type(dim) == 'table' and not is_tensor(dim) and o == nil and
      (dim.ord ~= nil or dim.dim ~= nil or dim.keepdim ~= nil or dim.dtype ~= nil) then dim, o = nil, dim end
  o = opts_of(name, o, keys('ord', 'dim', 'keepdim', 'dtype'))
  if o.ord ~= nil then ord = o.ord end
  if o.dim ~= nil then dim = o.dim end
  if o.keepdim ~= nil then keepdim = o.keepdim end
  need_tensor(name, 'x', x)
  need_bool(name, 'keepdim', keepdim)
  if ord == nil then ord = 2 end
  if type(ord) ~= 'number' then value_error(fmt('%s: ord must be a number (inf and -inf included), got %s', name, got(ord))) end
  if x._dtype > 3 then runtime_error(fmt('%s: Expected a floating point tensor as input. Got %s', name, dtname(x))) end
  if o.dtype ~= nil then x = x:to(o.dtype) end
  local a = x:abs()
  local kd = keepdim == true
  local function red(f, t)
    if dim == nil then return t[f](t) end
    return t[f](t, dim, kd)
  end
  if dim == nil and kd then -- keep every dim, as size 1
    local shp = {}
    for i = 1, x._ndim do shp[i] = 1 end
    local function keep(r) return r:reshape(shp) end
    if ord == huge then return keep(a:amax()) elseif ord == -huge then return keep(a:amin()) end
    if ord == 0 then return keep(a:ne(0):sum():to(dtname(x))) end
    if ord == 1 then return keep(a:sum()) end
    if ord == 2 then return keep((a * a):sum():sqrt()) end
    return keep(a:pow(ord):sum():pow(1 / ord))
  end
  if ord == huge then return red('amax', a) elseif ord == -huge then return red('amin', a) end
  if ord == 0 then
    local nz = a:ne(0)
    return (dim == nil and nz:sum() or nz:sum(dim, kd)):to(dtname(x))
  end
  if ord == 1 then return red('sum', a) end
  if ord == 2 then return red('sum', a * a):sqrt() end
  return red('sum', a:pow(ord)):pow(1 / ord)
end

local MATRIX_ORDS = { fro = true, nuc = true, [1] = true, [-1] = true, [2] = true, [-2] = true, [huge] = true, [-huge] = true }
--- linalg.matrix_norm(A [, ord='fro' [, dim={-2, -1} [, keepdim=false]]] [, {ord=, dim=, keepdim=}])
function L.matrix_norm(A, ord, dim, keepdim, o)
  local name = 'linalg.matrix_norm'
  if type(ord) == 'table' then ord, o = nil, ord end
  o = opts_of(name, o, keys('ord', 'dim', 'keepdim', 'dtype'))
  if o.ord ~= nil then ord = o.ord end
  if o.dim ~= nil then dim = o.dim end
  if o.keepdim ~= nil then keepdim = o.keepdim end
  need_bool(name, 'keepdim', keepdim)
  need_mat(name, A)
  if o.dtype ~= nil then A = A:to(o.dtype) end
  if ord == nil then ord = 'fro' end
  if not MATRIX_ORDS[ord] then runtime_error(fmt('%s: Order %s not supported.', name, tostring(ord))) end
  local d1, d2 = -2, -1
  if dim ~= nil then
    if type(dim) ~= 'table' or #dim ~= 2 then value_error(fmt('%s: dim must be a list of 2 dims, got %s', name, got(dim))) end
    d1, d2 = dim[1], dim[2]
    A = A:movedim({ d1, d2 }, { -2, -1 })
  end
  local r
  if ord == 'fro' then r = (A * A):sum({ -2, -1 }):sqrt()
  elseif ord == 'nuc' then r = L.svdvals(A):sum(-1)
  elseif ord == 2 then r = L.svdvals(A):narrow(-1, 1, 1):squeeze(-1)
  elseif ord == -2 then local S = L.svdvals(A); r = S:narrow(-1, cols(S:unsqueeze(-2)), 1):squeeze(-1)
  elseif ord == 1 then r = A:abs():sum(-2):amax(-1)
  elseif ord == -1 then r = A:abs():sum(-2):amin(-1)
  elseif ord == huge then r = A:abs():sum(-1):amax(-1)
  else r = A:abs():sum(-1):amin(-1) end
  if keepdim then
    r = r:unsqueeze(-1):unsqueeze(-1)
    if dim ~= nil then r = r:movedim({ -2, -1 }, { d1, d2 }) end
  end
  return r
end

--- linalg.norm(A [, ord [, dim [, keepdim]]] [, {ord=, dim=, keepdim=}]): a matrix norm when
--- ord is a string or dim names 2 dims (or A is 2-d with ord given), else a vector norm
function L.norm(A, ord, dim, keepdim, o)
  local name = 'linalg.norm'
  if type(ord) == 'table' then ord, o = nil, ord end
  o = opts_of(name, o, keys('ord', 'dim', 'keepdim', 'dtype'))
  if o.ord ~= nil then ord = o.ord end
  if o.dim ~= nil then dim = o.dim end
  if o.keepdim ~= nil then keepdim = o.keepdim end
  need_tensor(name, 'A', A)
  local matrix = type(ord) == 'string' or (type(dim) == 'table' and #dim == 2) or (dim == nil and ord ~= nil and A._ndim == 2)
  if matrix then return L.matrix_norm(A, ord, dim, keepdim, { dtype = o.dtype }) end
  if ord ~= nil and dim == nil and A._ndim > 2 then
    runtime_error(name .. ': If dim is not specified but ord is, the input must be 1D or 2D')
  end
  if type(dim) == 'table' then dim = dim[1] end
  return L.vector_norm(A, ord, dim, keepdim, { dtype = o.dtype })
end

--- linalg.cond(A [, p=nil]): the condition number (nil / 2: s_max / s_min; -2: s_min / s_max;
--- 'fro', 'nuc', 1, -1, inf, -inf: norm(A) * norm(inv(A)))
function L.cond(A, p)
  local name = 'linalg.cond'
  need_mat(name, A)
  if p == nil or p == 2 or p == -2 then
    local S = L.svdvals(A)
    local first, last = S:narrow(-1, 1, 1):squeeze(-1), S:narrow(-1, tonumber(S._shape[S._ndim - 1]), 1):squeeze(-1)
    return p == -2 and last / first or first / last
  end
  if not MATRIX_ORDS[p] then runtime_error(fmt('%s: Order %s not supported.', name, tostring(p))) end
  need_mat(name, A, true)
  local Ai = L.inv_ex(A)
  return L.matrix_norm(A, p) * L.matrix_norm(Ai, p)
end

--- linalg.multi_dot(list): the product of the matrices in the cheapest order (the first may be
--- 1-d: a row; the last: a column)
function L.multi_dot(list)
  local name = 'linalg.multi_dot'
  if type(list) ~= 'table' or is_tensor(list) then value_error(fmt('%s: expected a list of tensors, got %s', name, got(list))) end
  local n = #list
  if n < 2 then runtime_error(fmt('%s: expected at least 2 tensors but got %d', name, n)) end
  local ms = {}
  for i = 1, n do
    local t = list[i]
    need_tensor(name, fmt('tensor %d', i), t)
    local nd = t._ndim
    if (i == 1 or i == n) and nd == 1 then ms[i] = i == 1 and t:unsqueeze(1) or t:unsqueeze(2)
    elseif nd == 2 then ms[i] = t
    else runtime_error(fmt('%s: tensor %d must be 2D%s but got %dD', name, i, (i == 1 or i == n) and ' or 1D' or '', nd)) end
  end
  for i = 2, n do
    if cols(ms[i - 1]) ~= rows(ms[i]) then
      runtime_error(fmt('%s: tensors %d and %d cannot be multiplied (%dx%d and %dx%d)', name, i - 1, i, rows(ms[i - 1]),
        cols(ms[i - 1]), rows(ms[i]), cols(ms[i])))
    end
  end
  -- the classic matrix-chain order
  local d = { rows(ms[1]) }
  for i = 1, n do d[i + 1] = cols(ms[i]) end
  local cost, split = {}, {}
  for i = 1, n do cost[i] = { [i] = 0 }; split[i] = {} end
  for len = 2, n do
    for i = 1, n - len + 1 do
      local j = i + len - 1
      cost[i][j] = huge
      for k = i, j - 1 do
        local c = cost[i][k] + cost[k + 1][j] + d[i] * d[k + 1] * d[j + 1]
        if c < cost[i][j] then cost[i][j], split[i][j] = c, k end
      end
    end
  end
  local function prod(i, j)
    if i == j then return ms[i] end
    local k = split[i][j]
    return prod(i, k):matmul(prod(k + 1, j))
  end
  local r = prod(1, n)
  local first1, last1 = list[1]._ndim == 1, list[n]._ndim == 1
  if first1 and last1 then return r:reshape({}) end
  if first1 then return r:squeeze(1) end
  if last1 then return r:squeeze(2) end
  return r
end
--- torch.chain_matmul(...): multi_dot of its arguments
local function chain_matmul(...)
  local list = { ... }
  for i = 1, select('#', ...) do need_tensor('chain_matmul', fmt('matrix %d', i), list[i]) end
  if #list == 1 then return list[1]:clone() end
  return L.multi_dot(list)
end

--- linalg.lstsq(A, B [, {rcond=, driver=}]) -> solution, residuals, rank, singular_values: the
--- minimum-norm least-squares solution (through the pseudo-inverse); residuals (squared, per
--- column) for tall full-rank A with driver gelsd/gelss/gels; singular values with gelsd/gelss
function L.lstsq(A, B, o)
  local name = 'linalg.lstsq'
  o = opts_of(name, o, keys('rcond', 'driver'))
  need_num(name, 'rcond', o.rcond)
  local driver = o.driver or 'gelsy'
  if driver ~= 'gelsy' and driver ~= 'gelsd' and driver ~= 'gelss' and driver ~= 'gels' then
    runtime_error(fmt("%s: parameter `driver` should be one of (gels, gelsy, gelsd, gelss), got '%s'", name, tostring(driver)))
  end
  need_mat(name, A)
  need_tensor(name, 'B', B)
  if B._dtype ~= A._dtype then
    runtime_error(fmt('%s: Expected A and B to have the same dtype, but found A of type %s and B of type %s instead', name,
      dtname(A), dtname(B)))
  end
  local vec = B._ndim == A._ndim - 1
  local Bm = vec and B:unsqueeze(-1) or B
  if Bm._ndim < 2 or rows(Bm) ~= rows(A) then
    runtime_error(fmt('%s: input.size(-2) should match other.size(-2), got %d and %d', name, rows(A),
      Bm._ndim >= 2 and rows(Bm) or -1))
  end
  local rt = o.rcond
  if rt == nil or rt < 0 then rt = EPS[A._dtype] * max(rows(A), cols(A)) end
  local X = L.pinv(A, { rtol = rt }):matmul(Bm)
  local rank = driver == 'gels' and T.empty(0, { dtype = 'int64', device = A.device }) or L.matrix_rank(A, { rtol = rt })
  local sv = (driver == 'gelsd' or driver == 'gelss') and no_grad(L.svdvals, A) or T.empty(0, opts_like(A))
  local res = T.empty(0, opts_like(A))
  if driver ~= 'gelsy' and rows(A) > cols(A) and L.matrix_rank(A, { rtol = rt }):eq(cols(A)):all():item() then
    local r = A:matmul(X) - Bm
    res = (r * r):sum(-2)
    if vec then res = res:squeeze(-1) end
  end
  if vec then X = X:squeeze(-1) end
  return X, res, rank, sv
end

--- linalg.vander(x [, {N=}]): [..., n, N] with columns x^0 .. x^(N-1)
function L.vander(x, o)
  local name = 'linalg.vander'
  if type(o) == 'number' then o = { N = o } end
  o = opts_of(name, o, keys('N'))
  need_tensor(name, 'x', x)
  if x._ndim < 1 then runtime_error(name .. ': x must have at least one dimension') end
  local n = tonumber(x._shape[x._ndim - 1])
  local N = o.N or n
  need_int(name, 'N', N)
  if N <= 1 then
    if N < 1 then runtime_error(name .. ': N must be greater than 1.') end
    return T.ones_like(x):unsqueeze(-1)
  end
  local numel = tonumber(x._numel)
  if numel * N > 2 ^ 50 or N > 2 ^ 20 then -- (N columns, built one at a time: 2^40 ran for minutes)
    runtime_error(fmt('%s: N = %d columns for %d values is too large', name, N, numel))
  end
  local cols_ = { T.ones_like(x) }
  for k = 2, N do cols_[k] = cols_[k - 1] * x end
  return T.stack(cols_, -1)
end

--- linalg.vecdot(x, y [, {dim=-1}]): sum(x * y, dim)
function L.vecdot(x, y, o)
  local name = 'linalg.vecdot'
  o = opts_of(name, o, keys('dim'))
  need_tensor(name, 'x', x)
  need_tensor(name, 'y', y)
  return (x * y):sum(o.dim or -1)
end
--- linalg.diagonal(A [, {offset=0, dim1=-2, dim2=-1}])
function L.diagonal(A, o)
  local name = 'linalg.diagonal'
  o = opts_of(name, o, keys('offset', 'dim1', 'dim2'))
  need_tensor(name, 'A', A)
  return A:diagonal(o.offset or 0, o.dim1 or -2, o.dim2 or -1)
end
--- linalg.tensorinv(A [, {ind=2}]): the inverse for tensordot over the first ind dims
function L.tensorinv(A, o)
  local name = 'linalg.tensorinv'
  if type(o) == 'number' then o = { ind = o } end
  o = opts_of(name, o, keys('ind'))
  need_tensor(name, 'A', A)
  local ind = o.ind or 2
  need_int(name, 'ind', ind)
  local sz = A:size()
  if ind < 1 or ind > #sz then runtime_error(fmt('%s: Expected a strictly positive integer for \'ind\', got %d', name, ind)) end
  local p1, p2, out = 1, 1, {}
  for i = 1, ind do p1 = p1 * sz[i] end
  for i = ind + 1, #sz do p2 = p2 * sz[i]; out[#out + 1] = sz[i] end
  for i = 1, ind do out[#out + 1] = sz[i] end
  if p1 ~= p2 then
    runtime_error(fmt('%s: Expected self to satisfy the requirement prod(self.shape[ind:]) == prod(self.shape[:ind]), but got '
      .. '%d != %d', name, p2, p1))
  end
  return L.inv(A:reshape(p1, p2)):reshape(out)
end
--- linalg.tensorsolve(A, B [, {dims=}]): X with tensordot(A, X, X.ndim) = B
function L.tensorsolve(A, B, o)
  local name = 'linalg.tensorsolve'
  o = opts_of(name, o, keys('dims'))
  need_tensor(name, 'A', A)
  need_tensor(name, 'B', B)
  if o.dims ~= nil then not_impl(name .. ': dims is not implemented (move those dims of A last first)') end
  local sa = A:size()
  local nb = B:dim()
  if nb > #sa then
    runtime_error(fmt('%s: B has %d dims but A only %d (A must have B\'s shape as its leading dims)', name, nb, #sa))
  end
  local pb, px, xs = 1, 1, {}
  for i = 1, nb do pb = pb * sa[i] end
  for i = nb + 1, #sa do px = px * sa[i]; xs[#xs + 1] = sa[i] end
  if pb ~= px then runtime_error(fmt('%s: Expected self to satisfy the requirement prod(self.shape[other.ndim:]) == '
    .. 'prod(self.shape[:other.ndim]), but got %d != %d', name, px, pb)) end
  return L.solve(A:reshape(pb, px), B:reshape(pb)):reshape(xs)
end
--- linalg.cross(a, b [, {dim=-1}])
function L.cross(a, b, o)
  o = opts_of('linalg.cross', o, keys('dim'))
  return T.cross(a, b, o.dim or -1)
end
L.matmul = function(a, b) return T.matmul(a, b) end
--- geqrf(A) / t:geqrf() -> a, tau: LAPACK's QR (R on and above the diagonal of a, the
--- Householder vectors below it, their scales in tau); no gradient, as PyTorch
function L.geqrf(A)
  need_mat('geqrf', A)
  if wants_grad(A) then
    A = A:detach() -- (PyTorch: "the derivative for 'geqrf' is not implemented": the results do not record)
  end
  return ccall(2, C.dpl_linalg_geqrf, A)
end
-- the Householder vectors of a geqrf result as columns [..., m, k]: unit diagonal, zeros above
local function reflectors(A, k)
  local m = rows(A)
  return A:narrow(-1, 1, k):tril(-1) + T.eye(m, k, opts_like(A))
end
-- applies H_i = I - tau_i v_i v_i^T (i in order) to C from the left (side 'L') or the right ('R')
local function apply_reflectors(V, tau, Cm, order, side)
  for _, i in ipairs(order) do
    local v = V:narrow(-1, i, 1)                       -- [..., m, 1]
    local t = tau:narrow(-1, i, 1):unsqueeze(-1)        -- [..., 1, 1]
    if side == 'L' then Cm = Cm - v:matmul(mT(v):matmul(Cm)) * t
    else Cm = Cm - Cm:matmul(v):matmul(mT(v)) * t end
  end
  return Cm
end
local function range(a, b, step)
  local r = {}
  for i = a, b, step do r[#r + 1] = i end
  return r
end
--- linalg.householder_product(A, tau) / t:orgqr(tau): the first n columns of H_1 ... H_k, from
--- geqrf's reflectors (differentiable: composed)
function L.householder_product(A, tau)
  local name = 'linalg.householder_product'
  need_mat(name, A)
  need_tensor(name, 'tau', tau)
  local m, n = rows(A), cols(A)
  local k = tau._ndim > 0 and tonumber(tau._shape[tau._ndim - 1]) or 1
  if m < n then runtime_error(name .. ': input.shape[-2] must be greater than or equal to input.shape[-1]') end
  if k > n then runtime_error(name .. ': input.shape[-1] must be greater than or equal to tau.shape[-1]') end
  if tau._dtype ~= A._dtype then
    runtime_error(fmt('%s: tau dtype %s does not match input dtype %s', name, dtname(tau), dtname(A)))
  end
  if tau._ndim ~= A._ndim - 1 then
    runtime_error(fmt('%s: input.dim() - tau.dim() must be equal to 1 but got %d', name, A._ndim - tau._ndim))
  end
  local E = T.eye(m, n, opts_like(A)):expand(with(batch_shape(A), m, n))
  if k == 0 then return E:clone() end
  return apply_reflectors(reflectors(A, k), tau, E, range(k, 1, -1), 'L')
end
--- ormqr(A, tau, C [, left=true [, transpose=false]]): C multiplied by Q (of geqrf's A, tau)
--- from the left or the right, Q or Q^T
function L.ormqr(A, tau, Cm, left, transpose)
  local name = 'ormqr'
  need_mat(name, A)
  need_tensor(name, 'tau', tau)
  need_mat(name, Cm, false, 'other')
  need_bool(name, 'left', left)
  need_bool(name, 'transpose', transpose)
  local k = tonumber(tau._shape[tau._ndim - 1])
  local m = rows(A)
  local need = left ~= false and rows(Cm) or cols(Cm)
  if need ~= m then
    runtime_error(fmt('%s: other.shape[%s] must be equal to input.shape[-2] (%d), got %d', name,
      left ~= false and '-2' or '-1', m, need))
  end
  local V = reflectors(A, k)
  local fwd, back = range(1, k, 1), range(k, 1, -1)
  if left ~= false then
    return apply_reflectors(V, tau, Cm, transpose and fwd or back, 'L') -- Q C: H_k first; Q^T C: H_1 first
  end
  return apply_reflectors(V, tau, Cm, transpose and back or fwd, 'R')   -- C Q: H_1 first; C Q^T: H_k first
end
function L.ldl_factor() not_impl('linalg.ldl_factor: not implemented in dplhost') end
function L.ldl_factor_ex() not_impl('linalg.ldl_factor_ex: not implemented in dplhost') end
function L.ldl_solve() not_impl('linalg.ldl_solve: not implemented in dplhost') end

---------------------------------------------------------------- the older names, on dpl.tensor
--- torch.inner(a, b): sums over the last dims (a 0-d operand multiplies)
local function inner(a, b)
  need_tensor('inner', 'self', a)
  need_tensor('inner', 'other', b)
  if a._ndim == 0 or b._ndim == 0 then return a * b end
  local ka, kb = cols(a:unsqueeze(1)), cols(b:unsqueeze(1))
  if ka ~= kb then
    runtime_error(fmt('inner: inner() the last dimension must match on both input tensors but got shapes %s and %s',
      tostring(a:size()), tostring(b:size())))
  end
  local sa, sb = a:size(), b:size()
  local shp = {}
  for i = 1, #sa - 1 do shp[#shp + 1] = sa[i] end
  for i = 1, #sb - 1 do shp[#shp + 1] = sb[i] end
  return a:reshape(-1, ka):matmul(mT(b:reshape(-1, kb))):reshape(shp)
end
--- torch.vdot(a, b): the dot product of 1-d tensors
local function vdot(a, b)
  need_tensor('vdot', 'self', a)
  need_tensor('vdot', 'other', b)
  if a._ndim ~= 1 or b._ndim ~= 1 then
    runtime_error(fmt('vdot: 1D tensors expected, but got %dD and %dD tensors', a._ndim, b._ndim))
  end
  return a:dot(b)
end
--- torch.lu(A [, pivot=true [, get_infos=false]]) -> LU, pivots [, infos]
local function lu_legacy(A, pivot, get_infos)
  need_bool('lu', 'pivot', pivot)
  need_bool('lu', 'get_infos', get_infos)
  local LU, piv, info = L.lu_factor_ex(A, { pivot = pivot })
  if get_infos then return LU, piv, info end
  return LU, piv
end
--- torch.lu_solve(b, LU_data, LU_pivots)
local function lu_solve_legacy(b, LU, piv) return L.lu_solve(LU, piv, b) end

local legacy = {
  inverse = function(A) need_mat('inverse', A, true); return L.inv(A) end,
  det = L.det, logdet = L.logdet, slogdet = L.slogdet,
  cholesky = cholesky_legacy, cholesky_solve = L.cholesky_solve, cholesky_inverse = L.cholesky_inverse,
  qr = qr_legacy, svd = svd_legacy, pinverse = pinverse,
  matrix_power = L.matrix_power, matrix_exp = L.matrix_exp,
  lu = lu_legacy, lu_solve = lu_solve_legacy, lu_unpack = L.lu_unpack,
  triangular_solve = L.triangular_solve, inner = inner, vdot = vdot,
  geqrf = L.geqrf, orgqr = L.householder_product, ormqr = L.ormqr,
}
local FUNCTION_ONLY = { lu_unpack = true }

-- dpl.tensor's lazy loader calls the module: install the older names as dpl.X functions and
-- tensor methods (chain_matmul only as a function)
return setmetatable(L, { __call = function(_, M)
  for k, f in pairs(legacy) do
    M[k] = f
    if not FUNCTION_ONLY[k] then M.methods[k] = f end
  end
  M.chain_matmul = chain_matmul
end })
