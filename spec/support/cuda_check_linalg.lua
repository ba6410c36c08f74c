-- cuda_check_linalg.lua: the dpl.linalg cases of the CUDA op-consistency harness
-- (spec/support/cuda_check.lua adds them to its list; scripts/gpu_check.lua ops and the emulator
-- run them): every factorization and solve on cuda:0 against the CPU's LAPACK results, float32
-- and float64, batches, non-contiguous inputs, empty matrices, singular and non positive-definite
-- matrices (their LinAlgError messages as bytes, the *_ex infos), and the gradients of inv, det,
-- solve, cholesky, eigh, svd and qr. Eigenvectors and singular vectors are compared with each
-- one's sign fixed (its largest entry positive) and full SVD's extra columns as projectors:
-- cuSOLVER's algorithms may choose other signs and bases than LAPACK's on a GPU.
local dpl = require 'dpl'

return function(add, M)
  local la = dpl.linalg
  local err_bytes = M.err_bytes
  local tols = { float32 = { float32 = 1e-4 }, float64 = { float64 = 1e-9 } } -- GPU vs LAPACK rounding; integers exact
  local function mT(x) return x:transpose(-2, -1) end

  -- random well-conditioned inputs (drawn on the CPU; the harness copies them over)
  local function gen(dt, ...) return dpl.randn(...):to(dt) end
  local function square(dt, b, n) return (dpl.randn(b, n, n) + dpl.eye(n) * n):to(dt) end
  local function spd(dt, b, n)
    local x = dpl.randn(b, n, n)
    return (x:matmul(mT(x)) + dpl.eye(n) * n):to(dt)
  end
  -- U's first k columns with each one's sign fixed; the signs, for the matching rows of Vh
  local function fixsign(U, k)
    local Uk = U:narrow(-1, 1, k)
    local s = Uk:gather(-2, Uk:abs():argmax(-2, true)):sign()
    return Uk * s, s
  end
  local function proj(U, from) -- the projector onto U's columns from..end
    local c = U:size(U:dim()) - from + 1
    if c <= 0 then return U:narrow(-1, 1, 0):clone() end
    local X = U:narrow(-1, from, c)
    return X:matmul(mT(X))
  end
  -- gradients of f at the inputs (fresh leaves on their device)
  local function grads(f, ...)
    local xs = {}
    for i, x in ipairs({ ... }) do xs[i] = x:detach():clone():requires_grad_(true) end
    f(unpack(xs)):backward()
    local g = {}
    for i, x in ipairs(xs) do g[i] = x.grad end
    return g
  end

  for _, dt in ipairs({ 'float32', 'float64' }) do
    local tol = tols[dt]
    add('linalg inv/inv_ex ' .. dt .. ' (batch, transposed, singular, empty)', function()
      return { square(dt, 3, 5), square(dt, 2, 4) }
    end, function(dev, a, b)
      local s = b:clone()
      s:select(1, 2):fill_(1) -- singular: the second matrix is all ones
      local X2, info = la.inv_ex(s)
      local z = b:clone()
      z:select(1, 1):select(2, 1):fill_(0) -- a zero column: A's LU stops at 1, A^T's at 4
      local _, zinfo = la.inv_ex(z)
      return { la.inv(a), la.inv(mT(a)), a:inverse(), X2:select(1, 1), info:to(dev), zinfo:to(dev),
        err_bytes(dev, la.inv, s), err_bytes(dev, la.inv, z), la.inv(dpl.zeros(2, 0, 0, { device = dev, dtype = dt })),
        la.inv(dpl.zeros(0, 3, 3, { device = dev, dtype = dt })) }
    end, tol)
    add('linalg det/slogdet/logdet ' .. dt .. ' (batch, singular, negative, empty)', function()
      return { square(dt, 4, 6), gen(dt, 3, 3) }
    end, function(dev, a, c)
      local s = a:clone()
      s:select(1, 3):select(1, 2):fill_(0) -- a zero row: det 0, sign 0, logabsdet -inf
      local sg, lad = la.slogdet(s)
      return { la.det(a), la.det(mT(a)), la.det(s), sg, lad, la.det(c), dpl.logdet(a),
        la.det(dpl.zeros(2, 0, 0, { device = dev, dtype = dt })), la.det(dpl.zeros(0, 2, 2, { device = dev, dtype = dt })) }
    end, tol)
    add('linalg solve/solve_ex ' .. dt .. ' (broadcast, vector, left=false, singular)', function()
      return { square(dt, 3, 5), gen(dt, 3, 5, 2), gen(dt, 5), gen(dt, 1, 2, 5) }
    end, function(dev, a, b, v, r)
      local s = a:clone()
      s:select(1, 2):fill_(1)
      local X2, info = la.solve_ex(s, b)
      return { la.solve(a, b), la.solve(mT(a), b), la.solve(a, v), la.solve(a:select(1, 1), b), la.solve(a, r, { left = false }),
        X2, info:to(dev), err_bytes(dev, la.solve, s, b), la.solve(a, b:narrow(-1, 1, 0)),
        la.solve(dpl.zeros(0, 4, 4, { device = dev, dtype = dt }), dpl.zeros(0, 4, 1, { device = dev, dtype = dt })) }
    end, tol)
    add('linalg lu_factor/lu/lu_solve ' .. dt .. ' (square, tall, wide, adjoint, left=false, singular)', function()
      return { square(dt, 2, 5), gen(dt, 2, 6, 4), gen(dt, 3, 4, 7), gen(dt, 2, 5, 3) }
    end, function(dev, a, t, w, b)
      local LU, piv = la.lu_factor(a)
      local LU2, piv2, info = la.lu_factor_ex(dpl.ones(2, 3, 3, { device = dev, dtype = dt }))
      local P, L, U = la.lu(t)
      local LUw, pw = la.lu_factor(w)
      return { LU, piv, la.lu_factor(mT(a)), LU2, piv2, info:to(dev), P, L, U, LUw, pw,
        la.lu_solve(LU, piv, b), la.lu_solve(LU, piv, b, { adjoint = true }),
        la.lu_solve(LU, piv, mT(b), { left = false }), b:lu_solve(LU, piv),
        err_bytes(dev, la.lu_factor_ex, dpl.ones(2, 3, 3, { device = dev, dtype = dt }), { check_errors = true }),
        la.lu_factor(dpl.zeros(2, 0, 3, { device = dev, dtype = dt })) }
    end, tol)
    add('linalg cholesky/cholesky_ex ' .. dt .. ' (lower, upper, transposed, not positive-definite)', function()
      return { spd(dt, 3, 6) }
    end, function(dev, a)
      local bad = a:clone()
      bad:select(1, 2):select(1, 3):select(1, 3):fill_(-100) -- minor of order 3 not positive-definite
      local L2, info = la.cholesky_ex(bad)
      local Lu2, infou = la.cholesky_ex(bad, { upper = true })
      return { la.cholesky(a), la.cholesky(a, { upper = true }), la.cholesky(mT(a)), a:cholesky(true),
        L2:select(1, 1), info:to(dev), infou:to(dev), Lu2:select(1, 3), err_bytes(dev, la.cholesky, bad),
        dpl.cholesky_solve(a:narrow(-1, 1, 2), la.cholesky(a)), dpl.cholesky_inverse(la.cholesky(a)),
        la.cholesky(dpl.zeros(3, 0, 0, { device = dev, dtype = dt })) }
    end, tol)
    add('linalg qr ' .. dt .. ' (reduced, complete, r; square, tall, wide, empty)', function()
      return { gen(dt, 2, 5, 5), gen(dt, 2, 7, 4), gen(dt, 3, 3, 6) }
    end, function(dev, a, t, w)
      local r = {}
      for _, x in ipairs({ a, t, w, mT(t) }) do
        for _, mode in ipairs({ 'reduced', 'complete', 'r' }) do
          local Q, R = la.qr(x, mode)
          r[#r + 1] = Q
          r[#r + 1] = R
        end
      end
      local Qe, Re = la.qr(dpl.zeros(2, 3, 0, { device = dev, dtype = dt }), 'complete')
      r[#r + 1], r[#r + 2] = Qe, Re
      return r
    end, tol)
    add('linalg eigh/eigvalsh ' .. dt .. ' (L, U, transposed, empty)', function()
      local x = gen(dt, 3, 6, 6)
      return { x + mT(x), gen(dt, 3, 6, 6) }
    end, function(dev, a, g)
      local w, V = la.eigh(a)
      local wu, Vu = la.eigh(g, 'U') -- reads the upper triangle of a non-symmetric matrix
      local wl = la.eigvalsh(g)
      return { w, (fixsign(V, 6)), wu, (fixsign(Vu, 6)), wl, la.eigvalsh(mT(g), 'U'),
        la.eigh(dpl.zeros(2, 0, 0, { device = dev, dtype = dt })) }
    end, tol)
    add('linalg svd/svdvals ' .. dt .. ' (full, reduced; tall, wide, transposed; non-finite, empty)', function()
      return { gen(dt, 2, 6, 4), gen(dt, 2, 3, 5), gen(dt, 4, 4) }
    end, function(dev, t, w, q)
      local r = {}
      for _, x in ipairs({ t, w, mT(t), q }) do
        local m, n = x:size(x:dim() - 1), x:size(x:dim())
        local k = math.min(m, n)
        for _, full in ipairs({ true, false }) do
          local U, S, Vh = la.svd(x, { full_matrices = full })
          local U1, s = fixsign(U, k)
          r[#r + 1] = S
          r[#r + 1] = U1
          r[#r + 1] = Vh:narrow(-2, 1, k) * mT(s)
          r[#r + 1] = proj(U, k + 1)
          r[#r + 1] = proj(mT(Vh), k + 1)
        end
        r[#r + 1] = la.svdvals(x)
      end
      local nf = t:clone()
      nf:select(1, 2):select(1, 2):select(1, 3):fill_(0 / 0)
      r[#r + 1] = err_bytes(dev, la.svd, nf)
      local U, S, Vh = la.svd(dpl.zeros(2, 3, 0, { device = dev, dtype = dt }))
      r[#r + 1], r[#r + 2], r[#r + 3] = U, S, Vh
      r[#r + 1] = la.pinv(w)
      r[#r + 1] = la.matrix_rank(t:matmul(mT(t))) -- rank 4 of 6
      r[#r + 1] = la.matrix_norm(t, 'nuc')
      r[#r + 1] = la.cond(q)
      return r
    end, tol)
    add('linalg solve_triangular ' .. dt .. ' (upper, lower, left=false, unitriangular, transposed, empty)', function()
      return { square(dt, 3, 5), gen(dt, 3, 5, 4), gen(dt, 3, 2, 5) }
    end, function(dev, a, b, c)
      local r = {}
      for _, up in ipairs({ true, false }) do
        for _, unit in ipairs({ false, true }) do
          r[#r + 1] = la.solve_triangular(a, b, { upper = up, unitriangular = unit })
          r[#r + 1] = la.solve_triangular(a, c, { upper = up, left = false, unitriangular = unit })
        end
      end
      r[#r + 1] = la.solve_triangular(mT(a), b, { upper = true })
      r[#r + 1] = (dpl.triangular_solve(b, a, false, true))
      r[#r + 1] = la.solve_triangular(a, b:narrow(-1, 1, 0), { upper = true })
      return r
    end, tol)
    add('linalg gradients ' .. dt .. ' (inv, det, slogdet, solve, cholesky, eigh, svd, qr, solve_triangular)', function()
      local x = gen(dt, 2, 4, 4)
      return { square(dt, 2, 4), gen(dt, 2, 4, 3), spd(dt, 2, 4), x + mT(x), gen(dt, 2, 5, 3), gen(dt, 2, 4, 4) }
    end, function(_, a, b, p, s, t, wt)
      local r = {}
      local function put(g) for _, x in ipairs(g) do r[#r + 1] = x end end
      put(grads(function(x) return (la.inv(x) * wt):sum() end, a))
      put(grads(function(x) return la.det(x):sum() end, a))
      put(grads(function(x) local _, l = la.slogdet(x) return l:sum() end, a))
      put(grads(function(x, y) return (la.solve(x, y) ^ 2):sum() end, a, b))
      put(grads(function(x) return (la.cholesky(x) * wt):sum() end, p))
      put(grads(function(x) local w, V = la.eigh(x) return (w * w):sum() + (V:abs() * wt):sum() end, s))
      put(grads(function(x) return la.eigvalsh(x):pow(3):sum() end, s))
      put(grads(function(x)
        local U, S, Vh = la.svd(x, { full_matrices = false })
        return S:sum() + (U:abs() * wt:narrow(-2, 1, 5 - 1):narrow(-1, 1, 3)):sum() + Vh:abs():sum()
      end, t:narrow(-2, 1, 4)))
      put(grads(function(x) return la.svdvals(x):sum() end, t))
      put(grads(function(x) local Q, R = la.qr(x) return (Q * wt:narrow(-1, 1, 3):narrow(-2, 1, 4)):sum() + R:sum() end,
        t:narrow(-2, 1, 4)))
      put(grads(function(x, y) return la.solve_triangular(x, y, { upper = true }):sum() end, a, b))
      return r
    end, tol)
  end
  add('linalg dtype and device errors on cuda', function() return {} end, function(dev)
    local o = { device = dev }
    return { err_bytes(dev, la.inv, dpl.ones(2, 2, { device = dev, dtype = 'int64' })),
      err_bytes(dev, la.det, dpl.ones(2, 2, { device = dev, dtype = 'float16' })),
      err_bytes(dev, la.inv, dpl.ones(2, 3, o)), err_bytes(dev, la.cholesky, dpl.ones(3, o)),
      err_bytes(dev, la.solve, dpl.eye(3, o), dpl.ones(4, o)) }
  end)
end
