-- dpl.tensor_extra: PyTorch functions that compose dplhost's recorded ops (so autograd
-- differentiates them without rules of their own): einsum, tensordot, randperm,
-- multinomial, broadcast_to, broadcast_tensors, hstack/vstack/dstack/column_stack,
-- atleast_1d/2d/3d, unflatten, the mT/mH properties, logaddexp, logit, xlogy, hypot,
-- erfinv (a rule of its own), clamp_min/clamp_max (and `_` forms), diff, take_along_dim,
-- argwhere, meshgrid, searchsorted, bucketize, tril_indices, triu_indices, cdist,
-- quantile, nanquantile, block_diag, logcumsumexp, and the in-place view ops unsqueeze_,
-- squeeze_, t_, transpose_. dpl.tensor installs them (require('dpl.tensor_extra')(M, H))
-- before dpl.autograd wraps the methods; they look the methods up when called, so they
-- run the recording wrappers. Dims and indices are 1-based (negative dims count from
-- the end), as everywhere in dpl.tensor.
local ffi = require 'ffi'
local C = require('dpl.capi').C
local errors = require 'dpl.errors'
local options = require 'dpl.options'

local type, tostring, tonumber, select = type, tostring, tonumber, select
local floor, huge, sqrt, pi = math.floor, math.huge, math.sqrt, math.pi
local fmt = string.format
local lua_error = error
local ENOMEM = -2

local K_RANDPERM = options.keys('dtype', 'device', 'generator', 'requires_grad')
local K_MULTI = options.keys('replacement', 'generator')
local K_SEARCH = options.keys('right', 'side', 'out_int32', 'sorter')
local K_BUCKET = options.keys('right', 'out_int32')
local K_MESH = options.keys('indexing')
local K_IDX = options.keys('dtype', 'device')
local K_QUANT = options.keys('dim', 'keepdim', 'interpolation')
local K_DIFF = options.keys('n', 'dim', 'prepend', 'append')
local K_CDIST = options.keys('p', 'compute_mode')
local K_LOGIT = options.keys('eps')
local K_TDOT = options.keys('dims')

return function(M, H)
  local methods, props = M.methods, M.props
  local need_tensor, cdim, fail, out1 = H.need_tensor, H.cdim, H.fail, H.out1
  local is_tensor, dtype_names, wrap = M.is_tensor, M.dtype_names, M._wrap

  local function value_error(msg) lua_error(errors.ValueError(msg), 0) end
  local function runtime_error(msg) lua_error(errors.RuntimeError(msg), 0) end
  local function not_implemented(msg) lua_error(errors.NotImplementedError(msg), 0) end
  local function got(v) return type(v) == 'cdata' and (is_tensor(v) and 'a tensor' or 'cdata (not a tensor)') or type(v) end
  local function is_int(v) return type(v) == 'number' and v == floor(v) and v > -2 ^ 53 and v < 2 ^ 53 end
  local function need_int(name, what, v, lo)
    if not is_int(v) or (lo and v < lo) then
      value_error(fmt('%s: %s must be %s, got %s', name, what, lo == 0 and 'a non-negative integer'
        or lo == 1 and 'a positive integer' or 'an integer', type(v) == 'number' and tostring(v) or got(v)))
    end
    return v
  end
  local function need_bool(name, what, v)
    if v ~= nil and type(v) ~= 'boolean' then value_error(fmt('%s: %s must be a boolean, got %s', name, what, got(v))) end
    return v
  end
  -- an options table (a plain table that is not a tensor)
  local function is_opts(v) return type(v) == 'table' and getmetatable(v) == nil end
  local function size_of(t)
    local r = {}
    for i = 1, t._ndim do r[i] = tonumber(t._shape[i - 1]) end
    return r
  end
  local function shape_str(s)
    if is_tensor(s) then s = size_of(s) end
    local p = {}
    for i = 1, #s do p[i] = tostring(s[i]) end
    return '[' .. table.concat(p, ', ') .. ']'
  end
  local function dev_of(t) return t._devtype == 0 and 'cpu' or ('cuda:' .. t._devindex) end
  local function is_float(t) return t._dtype <= 3 end
  -- a 1-based dim of t (negative from the end) -> 1-based positive; a 0-d tensor takes 1 or -1
  local function pdim(t, d, name)
    if t._ndim == 0 and (d == 1 or d == -1) then return 1 end
    return cdim(t, d, name) + 1
  end
  -- the dtype PyTorch promotes two dtypes to (through the binary op's own rule)
  local function promote(a, b)
    if a == b then return a end
    return methods.add(M.empty(0, { dtype = a }), M.empty(0, { dtype = b })).dtype
  end
  -- a tensor list given as a list or as several arguments
  local function tensor_args(name, a, ...)
    local list
    if is_opts(a) then
      if select('#', ...) > 0 then value_error(name .. ': expected a list of tensors or tensors as arguments, not both') end
      list = a
    else
      list = { a, ... }
    end
    for i = 1, #list do
      if not is_tensor(list[i]) then value_error(fmt('%s: tensors[%d] must be a tensor, got %s', name, i, got(list[i]))) end
    end
    return list
  end
  -- a number (or boolean) operand beside a tensor: a 0-d tensor of the tensor's kind
  local function as_operand(name, what, v, like)
    if is_tensor(v) then return v end
    if type(v) == 'number' then
      local dt = like and is_float(like) and dtype_names[like._dtype] or (v == floor(v) and 'int64' or 'float32')
      return M.tensor(v, { dtype = dt, device = like and dev_of(like) or 'cpu' })
    end
    value_error(fmt('%s: %s must be a tensor or a number, got %s', name, what, got(v)))
  end
  -- floating version of t (integers and bool: float32, as PyTorch's float-valued ops)
  local function floating(t) return is_float(t) and t or methods.to(t, 'float32') end

  ---------------------------------------------------------------- einsum
  local ELL = '...'
  local function parse_term(eq, s, what)
    local labels, i, n = {}, 1, #s
    while i <= n do
      local c = s:sub(i, i)
      if c == '.' then
        if s:sub(i, i + 2) ~= '...' then
          value_error(fmt("einsum: invalid equation '%s': a '.' in %s that is not part of an ellipsis '...'", eq, what))
        end
        for j = 1, #labels do
          if labels[j] == ELL then value_error(fmt("einsum: invalid equation '%s': more than one ellipsis in %s", eq, what)) end
        end
        labels[#labels + 1] = ELL
        i = i + 3
      elseif c:match('^[a-zA-Z]$') then
        labels[#labels + 1] = c
        i = i + 1
      else
        value_error(fmt("einsum: invalid subscript '%s' in %s of equation '%s' (subscripts are letters a-z, A-Z, and '...')",
          c, what, eq))
      end
    end
    return labels
  end
  -- the labels of each dim of op (ellipsis dims named '#k', aligned from the right over E dims)
  local function expand_labels(labels, nd, E)
    local r = {}
    for _, l in ipairs(labels) do
      if l == ELL then
        local ne = nd - (#labels - 1)
        for j = 1, ne do r[#r + 1] = '#' .. (E - ne + j) end
      else
        r[#r + 1] = l
      end
    end
    return r
  end
  local function index_of(list, x)
    for i = 1, #list do if list[i] == x then return i end end
  end
  local function set_of(list)
    local s = {}
    for i = 1, #list do s[list[i]] = true end
    return s
  end
  -- sums t over the dims whose labels are not in keep; returns t, labels
  local function reduce_private(t, labels, keep)
    local dims, rest = {}, {}
    for i, l in ipairs(labels) do
      if keep[l] then rest[#rest + 1] = l else dims[#dims + 1] = i end
    end
    if #dims == 0 then return t, labels end
    return methods.sum(t, dims), rest
  end
  local function prod_of(sizes, list)
    local p = 1
    for i = 1, #list do p = p * sizes[list[i]] end
    return p
  end
  local function sizes_of(sizes, list)
    local r = {}
    for i = 1, #list do r[i] = sizes[list[i]] end
    return r
  end
  -- t (labels la) permuted into the order of `order`
  local function permute_to(t, la, order)
    local perm, ident = {}, true
    for i, l in ipairs(order) do
      perm[i] = index_of(la, l)
      if perm[i] ~= i then ident = false end
    end
    if ident then return t end
    return methods.permute(t, perm)
  end
  -- a (labels la) times b (labels lb), summing the shared labels not in keep
  local function contract(a, la, b, lb, keep, sizes)
    local sa, sb = set_of(la), set_of(lb)
    local batch, con, ao, bo = {}, {}, {}, {}
    for _, l in ipairs(la) do
      if sb[l] then
        if keep[l] then batch[#batch + 1] = l else con[#con + 1] = l end
      else
        ao[#ao + 1] = l
      end
    end
    for _, l in ipairs(lb) do if not sa[l] then bo[#bo + 1] = l end end
    local outl = {}
    for _, g in ipairs({ batch, ao, bo }) do for _, l in ipairs(g) do outl[#outl + 1] = l end end
    local osz = sizes_of(sizes, outl)
    local B, P, R, K = prod_of(sizes, batch), prod_of(sizes, ao), prod_of(sizes, bo), prod_of(sizes, con)
    local order_a, order_b = {}, {}
    for _, g in ipairs({ batch, ao, con }) do for _, l in ipairs(g) do order_a[#order_a + 1] = l end end
    for _, g in ipairs({ batch, con, bo }) do for _, l in ipairs(g) do order_b[#order_b + 1] = l end end
    local a3 = methods.reshape(permute_to(a, la, order_a), { B, P, K })
    local b3 = methods.reshape(permute_to(b, lb, order_b), { B, K, R })
    local r
    if K == 1 and not is_float(a) then
      r = methods.mul(a3, b3) -- [B, P, 1] * [B, 1, R]
    else
      r = methods.bmm(a3, b3)
    end
    return methods.reshape(r, osz), outl
  end

  --- dpl.einsum(equation, a, b, ...) or dpl.einsum(equation, {a, b, ...}): Einstein summation
  --- as torch.einsum (explicit '->' output or implicit; '...' for broadcast dims; a repeated
  --- subscript on one operand takes its diagonal; size-1 dims broadcast).
  function M.einsum(eq, ...)
    if is_tensor(eq) then
      not_implemented('einsum: the sublist format einsum(op1, sublist1, op2, sublist2, ...) is not implemented; '
        .. "use an equation string such as einsum('ij,jk->ik', a, b)")
    end
    if type(eq) ~= 'string' then value_error(fmt('einsum: equation must be a string, got %s', got(eq))) end
    local ops
    if select('#', ...) == 1 and is_opts((...)) then ops = ... else ops = { ... } end
    local nops = select('#', ...) == 1 and is_opts((...)) and #ops or select('#', ...)
    if nops == 0 then value_error('einsum: must provide at least one operand') end
    for i = 1, nops do
      if not is_tensor(ops[i]) then value_error(fmt('einsum: operand %d must be a tensor, got %s', i, got(ops[i]))) end
    end
    local q = eq:gsub('%s', '')
    local lhs, rhs = q:match('^(.-)%->(.*)$')
    if not lhs then lhs = q end
    if rhs and rhs:find('->', 1, true) then value_error(fmt("einsum: invalid equation '%s': more than one '->'", eq)) end
    local terms = {}
    for term in (lhs .. ','):gmatch('([^,]*),') do terms[#terms + 1] = term end
    if #terms ~= nops then
      value_error(fmt("einsum: equation '%s' has %d operand term%s but %d operand%s were given", eq, #terms,
        #terms == 1 and '' or 's', nops, nops == 1 and '' or 's'))
    end
    -- labels per operand, the ellipsis' width
    local raw, E, count = {}, 0, {}
    for k = 1, nops do
      local labels = parse_term(eq, terms[k], 'operand ' .. k)
      local t, nlet, has_ell = ops[k], 0, false
      for _, l in ipairs(labels) do
        if l == ELL then has_ell = true else nlet = nlet + 1 count[l] = (count[l] or 0) + 1 end
      end
      if (has_ell and t._ndim < nlet) or (not has_ell and t._ndim ~= nlet) then
        runtime_error(fmt("einsum: the number of subscripts in the equation (%d) does not match the number of dims (%d) "
          .. 'of operand %d%s', nlet, t._ndim, k, has_ell and ' (with its ellipsis)' or ' and no ellipsis was given'))
      end
      if has_ell and t._ndim - nlet > E then E = t._ndim - nlet end
      raw[k] = labels
    end
    local dt = ops[1]._dtype
    for k = 2, nops do
      if ops[k]._dtype ~= dt then
        runtime_error(fmt('einsum: expected all operands to have one dtype, got %s (operand 1) and %s (operand %d)',
          dtype_names[dt], dtype_names[ops[k]._dtype], k))
      end
    end
    -- output labels
    local out
    if rhs then
      local ol = parse_term(eq, rhs, 'the output')
      out = expand_labels(ol, E + #ol - 1, E)
      local seen = {}
      for _, l in ipairs(ol) do
        if l ~= ELL then
          if seen[l] then value_error(fmt("einsum: output subscript '%s' appears more than once in the output", l)) end
          if not count[l] then
            value_error(fmt("einsum: output subscript '%s' does not appear in the equation for any input operand", l))
          end
          seen[l] = true
        end
      end
    else
      out = {}
      for j = 1, E do out[j] = '#' .. j end
      local once = {}
      for l, c in pairs(count) do if c == 1 then once[#once + 1] = l end end
      table.sort(once) -- torch's order: A-Z before a-z
      for _, l in ipairs(once) do out[#out + 1] = l end
    end
    -- each operand's labels, diagonals of repeated ones, label sizes (size-1 dims broadcast)
    local labs, ts, sizes = {}, {}, {}
    for k = 1, nops do
      local t = ops[k]
      local L = expand_labels(raw[k], t._ndim, E)
      local again = true
      while again do
        again = false
        for i = 1, #L do
          local j = nil
          for jj = i + 1, #L do if L[jj] == L[i] then j = jj break end end
          if j then
            local si, sj = tonumber(t._shape[i - 1]), tonumber(t._shape[j - 1])
            if si ~= sj then
              runtime_error(fmt("einsum: subscript '%s' is repeated for operand %d but the sizes don't match, %d != %d",
                L[i], k, si, sj))
            end
            t = methods.diagonal(t, 0, i, j)
            local l = L[i]
            table.remove(L, j)
            table.remove(L, i)
            L[#L + 1] = l
            again = true
            break
          end
        end
      end
      for i, l in ipairs(L) do
        local s = tonumber(t._shape[i - 1])
        local prev = sizes[l]
        if prev == nil or prev == 1 then
          sizes[l] = s
        elseif s ~= 1 and s ~= prev then
          local what = l:sub(1, 1) == '#' and 'an ellipsis dim' or ("subscript '" .. l .. "'")
          runtime_error(fmt('einsum: operands do not broadcast: %s has size %d for operand %d, %d before', what, s, k, prev))
        end
      end
      labs[k], ts[k] = L, t
    end
    -- size-1 dims expanded to the label's size (broadcasting)
    for k = 1, nops do
      local t, L, need = ts[k], labs[k], false
      local es = {}
      for i, l in ipairs(L) do
        es[i] = sizes[l]
        if tonumber(t._shape[i - 1]) ~= sizes[l] then need = true end
      end
      if need then ts[k] = methods.expand(t, es) end
    end
    local outset = set_of(out)
    -- left to right: sum each operand's private labels, contract with the running result
    local function keep_after(k)
      local keep = {}
      for l in pairs(outset) do keep[l] = true end
      for j = k + 1, nops do for _, l in ipairs(labs[j]) do keep[l] = true end end
      return keep
    end
    local cur, cl = reduce_private(ts[1], labs[1], (function()
      local keep = keep_after(1)
      return keep
    end)())
    for k = 2, nops do
      local keep = keep_after(k)
      local keep_b = {}
      for l in pairs(keep) do keep_b[l] = true end
      for _, l in ipairs(cl) do keep_b[l] = true end
      local b, bl = reduce_private(ts[k], labs[k], keep_b)
      cur, cl = contract(cur, cl, b, bl, keep, sizes)
    end
    cur, cl = reduce_private(cur, cl, outset)
    return permute_to(cur, cl, out)
  end

  --- dpl.tensordot(a, b, dims): the sum over a's last `dims` dims and b's first (an integer),
  --- or over the dims listed in dims = {{a dims}, {b dims}} (1-based), as torch.tensordot.
  function M.tensordot(a, b, dims)
    need_tensor('tensordot', 'a', a)
    need_tensor('tensordot', 'b', b)
    if is_opts(dims) and dims.dims ~= nil then
      options.check(dims, K_TDOT, 'tensordot')
      dims = dims.dims
    end
    if dims == nil then dims = 2 end
    local da, db = {}, {}
    if type(dims) == 'number' then
      need_int('tensordot', 'dims', dims, 0)
      if dims > a._ndim or dims > b._ndim then
        runtime_error(fmt('tensordot: dims (%d) must not exceed the dims of a (%d) and b (%d)', dims, a._ndim, b._ndim))
      end
      for i = 1, dims do da[i] = a._ndim - dims + i db[i] = i end
    elseif type(dims) == 'table' and #dims == 2 then
      local la, lb = dims[1], dims[2]
      if type(la) == 'number' then la = { la } end
      if type(lb) == 'number' then lb = { lb } end
      if type(la) ~= 'table' or type(lb) ~= 'table' then
        value_error('tensordot: dims must be an integer or a pair of lists of dims {{a dims}, {b dims}}')
      end
      if #la ~= #lb then
        runtime_error(fmt('tensordot: both dim lists should have the same length, got %d and %d', #la, #lb))
      end
      for i = 1, #la do da[i] = cdim(a, la[i], 'tensordot') + 1 db[i] = cdim(b, lb[i], 'tensordot') + 1 end
    else
      value_error(fmt('tensordot: dims must be an integer or a pair of lists of dims {{a dims}, {b dims}}, got %s', got(dims)))
    end
    local used_a, used_b, K = {}, {}, 1
    for i = 1, #da do
      local sa, sb = tonumber(a._shape[da[i] - 1]), tonumber(b._shape[db[i] - 1])
      if sa ~= sb then
        runtime_error(fmt('tensordot: contracted dimensions need to match, but dim %d of a has size %d and dim %d of b has size %d',
          da[i], sa, db[i], sb))
      end
      if used_a[da[i]] or used_b[db[i]] then value_error('tensordot: a dim appears more than once in dims') end
      used_a[da[i]], used_b[db[i]] = true, true
      K = K * sa
    end
    local pa, pb, osz, P, R = {}, {}, {}, 1, 1
    for i = 1, a._ndim do
      if not used_a[i] then pa[#pa + 1] = i osz[#osz + 1] = tonumber(a._shape[i - 1]) P = P * osz[#osz] end
    end
    for i = 1, #da do pa[#pa + 1] = da[i] end
    for i = 1, #db do pb[#pb + 1] = db[i] end
    for i = 1, b._ndim do
      if not used_b[i] then pb[#pb + 1] = i osz[#osz + 1] = tonumber(b._shape[i - 1]) R = R * osz[#osz] end
    end
    local a2 = methods.reshape(a._ndim > 0 and methods.permute(a, pa) or a, { P, K })
    local b2 = methods.reshape(b._ndim > 0 and methods.permute(b, pb) or b, { K, R })
    return methods.reshape(methods.mm(a2, b2), osz)
  end

  ---------------------------------------------------------------- random
  local function no_generator(name, g)
    if g ~= nil then
      not_implemented(name .. ': generator= is not supported (dplhost has one global generator: '
        .. 'dpl.manual_seed / dpl.seed_everything make draws reproducible, dpl.get_rng_state saves it)')
    end
  end
  --- dpl.randperm(n [, {dtype='int64', device=}]): a random permutation of 1..n from dpl's
  --- global generator (dpl.manual_seed / seed_everything make it reproducible).
  function M.randperm(n, opts)
    need_int('randperm', 'n', n, 0)
    options.check(opts, K_RANDPERM, 'randperm')
    opts = opts or {}
    no_generator('randperm', opts.generator)
    local dt = opts.dtype or 'int64'
    M.empty(0, { dtype = dt, device = opts.device }) -- (checks the dtype and the device)
    local p
    if n == 0 then
      p = M.empty(0, { dtype = 'int64' })
    else
      p = methods.argsort(M.rand(n, { dtype = 'float64' }))
    end
    p = methods.to(p, { dtype = dt, device = opts.device })
    if opts.requires_grad then methods.requires_grad_(p, true) end
    return p
  end

  -- C-side binary search over contiguous float64 rows: out[r, j] = #{i: s[r, i] < v[r, j]}
  -- (or <= with right); s [R, M], v [R, N] contiguous float64, out int64 [R, N]
  local function search_rows(s, v, right, R, Mn, N, out)
    local sp = ffi.cast('const double*', s._data)
    local vp = ffi.cast('const double*', v._data)
    local op = ffi.cast('int64_t*', out._data)
    local sstep = R > 1 and Mn or 0
    local vstep = N
    for r = 0, R - 1 do
      local base = r * sstep
      for j = 0, N - 1 do
        local x = vp[r * vstep + j]
        local lo, hi = 0, Mn
        if right then
          while lo < hi do
            local mid = floor((lo + hi) / 2)
            if not (sp[base + mid] > x) then lo = mid + 1 else hi = mid end -- (NaN in s: sorted last)
          end
        else
          while lo < hi do
            local mid = floor((lo + hi) / 2)
            if sp[base + mid] < x then lo = mid + 1 else hi = mid end
          end
        end
        op[r * vstep + j] = lo
      end
    end
  end

  --- dpl.multinomial(probs, num_samples [, replacement=false] [, {replacement=, generator=}]) and
  --- probs:multinomial(...): category indices (1-based int64) drawn from the rows of probs (1-d or 2-d,
  --- non-negative weights, not necessarily normalised), with or without replacement.
  function methods.multinomial(p, n, repl, opts)
    need_tensor('multinomial', 'input', p)
    if is_opts(repl) then opts, repl = repl, nil end
    options.check(opts, K_MULTI, 'multinomial')
    if opts then
      if opts.replacement ~= nil then
        if repl ~= nil then value_error('multinomial: replacement given both positionally and in the options') end
        repl = opts.replacement
      end
      no_generator('multinomial', opts.generator)
    end
    need_bool('multinomial', 'replacement', repl)
    need_int('multinomial', 'num_samples', n)
    if n <= 0 then runtime_error(fmt('multinomial: cannot sample n_sample <= 0 samples (got %d)', n)) end
    if not is_float(p) then
      runtime_error(fmt('multinomial: expected a floating point probability tensor, got %s', dtype_names[p._dtype]))
    end
    if p._ndim ~= 1 and p._ndim ~= 2 then
      runtime_error(fmt('multinomial: prob_dist must be 1 or 2 dim, got %d dims', p._ndim))
    end
    local ncat = tonumber(p._shape[p._ndim - 1])
    if ncat == 0 then runtime_error('multinomial: the number of categories cannot be zero') end
    if not repl and n > ncat then
      runtime_error(fmt('multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement '
        .. '(%d > %d)', n, ncat))
    end
    local p2 = methods.contiguous(methods.to(methods.detach(p), { dtype = 'float64', device = 'cpu' }))
    if p._ndim == 1 then p2 = methods.reshape(p2, { 1, ncat }) end
    local rows = tonumber(p2._shape[0])
    if methods.any(methods.logical_or(methods.logical_not(methods.isfinite(p2)), methods.lt(p2, 0))):item() then
      runtime_error('multinomial: probability tensor contains either inf, nan or element < 0')
    end
    if rows > 0 and methods.any(methods.le(methods.sum(p2, 2), 0)):item() then
      runtime_error('multinomial: invalid multinomial distribution (sum of probabilities <= 0)')
    end
    local r
    if rows == 0 then
      r = M.empty({ 0, n }, { dtype = 'int64' })
    elseif repl then
      local cdf = methods.contiguous(methods.cumsum(p2, 2))
      local total = methods.narrow(cdf, 2, ncat, 1)
      local u = methods.contiguous(methods.mul(M.rand(rows, n, { dtype = 'float64' }), total))
      r = M.empty({ rows, n }, { dtype = 'int64' })
      search_rows(cdf, u, true, rows, ncat, n, r)
      r = methods.clamp(methods.add(r, 1), 1, ncat)
    else
      -- the exponential race (PyTorch's method): the n largest p / E, E ~ Exp(1)
      local e = methods.neg(methods.log1p(methods.neg(M.rand(rows, ncat, { dtype = 'float64' }))))
      local _, idx = methods.topk(methods.div(p2, e), n, 2)
      r = idx
    end
    if p._ndim == 1 then r = methods.reshape(r, { n }) end
    return methods.to(r, dev_of(p))
  end
  M.multinomial = methods.multinomial

  ---------------------------------------------------------------- shapes
  --- t:broadcast_to(shape) / dpl.broadcast_to(t, shape): expand(shape) (a view).
  function methods.broadcast_to(t, shape, ...)
    need_tensor('broadcast_to', 'input', t)
    if type(shape) ~= 'table' then shape = { shape, ... } end
    return methods.expand(t, shape)
  end
  --- dpl.broadcast_tensors(a, b, ...) or ({a, b, ...}) -> a list of views of one broadcast shape.
  function M.broadcast_tensors(...)
    local list = tensor_args('broadcast_tensors', ...)
    local shape = {}
    for k, t in ipairs(list) do
      local nd = t._ndim
      local off = #shape - nd
      if off < 0 then
        local s2 = {}
        for i = 1, -off do s2[i] = 1 end
        for i = 1, #shape do s2[#s2 + 1] = shape[i] end
        shape, off = s2, 0
      end
      for i = 1, nd do
        local s, prev = tonumber(t._shape[i - 1]), shape[off + i]
        if prev == 1 then shape[off + i] = s
        elseif s ~= 1 and s ~= prev then
          runtime_error(fmt('broadcast_tensors: shape %s of tensor %d does not broadcast with %s', shape_str(t), k,
            shape_str(shape)))
        end
      end
    end
    local r = {}
    for i, t in ipairs(list) do r[i] = methods.expand(t, shape) end
    return r
  end

  local function atleast(name, nd)
    return function(a, ...)
      local function one(t)
        if t._ndim >= nd then return t end
        if t._ndim == 0 then
          local s = {}
          for i = 1, nd do s[i] = 1 end
          return methods.reshape(t, s)
        end
        if t._ndim == 1 then
          local n = tonumber(t._shape[0])
          return methods.reshape(t, nd == 2 and { 1, n } or { 1, n, 1 })
        end
        return methods.unsqueeze(t, 3) -- 2-d -> [m, n, 1]
      end
      if is_tensor(a) and select('#', ...) == 0 then return one(a) end
      local list = tensor_args(name, a, ...)
      local r = {}
      for i, t in ipairs(list) do r[i] = one(t) end
      return r
    end
  end
  --- dpl.atleast_1d(t) (or a list / several tensors -> a list): views with at least 1 dim
  --- (atleast_2d: 1-d [n] -> [1, n]; atleast_3d: [n] -> [1, n, 1], [m, n] -> [m, n, 1]).
  M.atleast_1d, M.atleast_2d, M.atleast_3d = atleast('atleast_1d', 1), atleast('atleast_2d', 2), atleast('atleast_3d', 3)

  local function stack_fn(name, prep, dim_of)
    return function(a, ...)
      local list = tensor_args(name, a, ...)
      if #list == 0 then value_error(name .. ': expected a non-empty list of tensors') end
      local l2 = {}
      for i, t in ipairs(list) do l2[i] = prep(t) end
      return M.cat(l2, dim_of(l2))
    end
  end
  --- dpl.hstack(list): cat along dim 2 (dim 1 for 1-d tensors); vstack: atleast_2d then dim 1;
  --- dstack: atleast_3d then dim 3; column_stack: 0-d and 1-d tensors as columns, then dim 2.
  M.hstack = stack_fn('hstack', M.atleast_1d, function(l) return l[1]._ndim == 1 and 1 or 2 end)
  M.vstack = stack_fn('vstack', M.atleast_2d, function() return 1 end)
  M.row_stack = M.vstack
  M.dstack = stack_fn('dstack', M.atleast_3d, function() return 3 end)
  M.column_stack = stack_fn('column_stack', function(t)
    if t._ndim <= 1 then return methods.reshape(t, { t._ndim == 0 and 1 or tonumber(t._shape[0]), 1 }) end
    return t
  end, function() return 2 end)

  --- t:unflatten(dim, sizes): dim split into sizes (one of them may be -1), a view when possible.
  function methods.unflatten(t, d, sizes)
    need_tensor('unflatten', 'input', t)
    local cd = cdim(t, d, 'unflatten')
    if is_tensor(sizes) then sizes = methods.totable(sizes) end
    if type(sizes) ~= 'table' or #sizes == 0 then
      value_error(fmt('unflatten: sizes must be a non-empty list of integers, got %s', got(sizes)))
    end
    local s = size_of(t)
    local n, p, infer = s[cd + 1], 1, nil
    for i = 1, #sizes do
      local v = sizes[i]
      need_int('unflatten', 'sizes[' .. i .. ']', v)
      if v == -1 then
        if infer then runtime_error('unflatten: only one dim in sizes can be -1') end
        infer = i
      elseif v < 0 then value_error(fmt('unflatten: sizes[%d] must be >= 0 or -1, got %d', i, v))
      else p = p * v end
    end
    local sz = {}
    for i = 1, #sizes do sz[i] = sizes[i] end
    if infer then
      if p == 0 or n % p ~= 0 then
        runtime_error(fmt('unflatten: the size %d of dim %d cannot be split into %s', n, cd + 1, shape_str(sizes)))
      end
      sz[infer] = n / p
    elseif p ~= n then
      runtime_error(fmt('unflatten: sizes %s do not multiply to the size %d of dim %d', shape_str(sizes), n, cd + 1))
    end
    local ns = {}
    for i = 1, cd do ns[#ns + 1] = s[i] end
    for i = 1, #sz do ns[#ns + 1] = sz[i] end
    for i = cd + 2, #s do ns[#ns + 1] = s[i] end
    return methods.reshape(t, ns)
  end

  --- t.mT: the last two dims swapped (a view; needs at least 2 dims); t.mH: the same (real tensors).
  local function mT(name)
    return function(t)
      if t._ndim < 2 then
        runtime_error(fmt('tensor.%s is only supported on matrices or batches of matrices. Got %d-d tensor.', name, t._ndim))
      end
      return methods.transpose(t, -2, -1)
    end
  end
  props.mT, props.mH = mT('mT'), mT('mH')
  methods.adjoint = function(t) need_tensor('adjoint', 'input', t) return mT('adjoint')(t) end

  ---------------------------------------------------------------- elementwise
  --- logaddexp(a, b): log(exp(a) + exp(b)), computed without overflow.
  function methods.logaddexp(a, b)
    need_tensor('logaddexp', 'input', a)
    b = as_operand('logaddexp', 'other', b, a)
    a, b = floating(a), floating(b)
    local m = methods.maximum(methods.detach(a), methods.detach(b))
    m = M.where(methods.isfinite(m), m, 0)
    return methods.add(methods.log(methods.add(methods.exp(methods.sub(a, m)), methods.exp(methods.sub(b, m)))), m)
  end
  --- logit(t [, eps]): log(t / (1 - t)); with eps, t clamped to [eps, 1 - eps] first.
  local function logit_eps(eps)
    if is_opts(eps) then
      options.check(eps, K_LOGIT, 'logit')
      eps = eps.eps
    end
    if eps ~= nil and type(eps) ~= 'number' then value_error(fmt('logit: eps must be a number or nil, got %s', got(eps))) end
    return eps
  end
  function methods.logit(t, eps)
    need_tensor('logit', 'input', t)
    eps = logit_eps(eps)
    local x = floating(t)
    if eps and eps >= 0 then x = methods.clamp(x, eps, 1 - eps) end
    return methods.log(methods.div(x, methods.add(methods.neg(x), 1)))
  end
  --- xlogy(x, y): x * log(y), 0 where x == 0 (unless y is NaN); either may be a number.
  function methods.xlogy(x, y)
    if not is_tensor(x) and not is_tensor(y) then
      value_error(fmt('xlogy: expected a tensor, got %s and %s', got(x), got(y)))
    end
    x = as_operand('xlogy', 'input', x, is_tensor(y) and y or nil)
    y = as_operand('xlogy', 'other', y, x)
    x, y = floating(x), floating(y)
    -- a one-element x that is not 0 (NaN included): x * log(y) everywhere, no mask to build
    if x._numel == 1 and methods.item(x) ~= 0 then return methods.mul(x, methods.log(y)) end
    local mask = methods.logical_and(methods.eq(x, 0), methods.logical_not(methods.isnan(y)))
    local ys = M.where(mask, 1, y)
    local r = M.where(mask, 0, methods.mul(x, methods.log(ys)))
    -- PyTorch's gradient in x is log(y) also where x is 0 (0 where y is 0 too): a zero-valued
    -- term that carries it (only when x records a gradient)
    local A = package.loaded['dpl.autograd']
    if A and A.is_grad_enabled() and x.requires_grad and methods.any(mask):item() then
      local g = M.no_grad(function()
        local pos = methods.logical_and(mask, methods.ne(y, 0))
        return M.where(pos, methods.log(M.where(pos, y, 1)), 0)
      end)
      r = methods.add(r, methods.mul(methods.sub(x, methods.detach(x)), g))
    end
    return r
  end
  --- hypot(a, b): sqrt(a^2 + b^2), scaled so that large values do not overflow.
  function methods.hypot(a, b)
    need_tensor('hypot', 'input', a)
    b = as_operand('hypot', 'other', b, a)
    a, b = floating(a), floating(b)
    local m = methods.maximum(methods.abs(methods.detach(a)), methods.abs(methods.detach(b)))
    m = M.where(methods.logical_or(methods.eq(m, 0), methods.logical_not(methods.isfinite(m))), 1, m)
    local x, y = methods.div(a, m), methods.div(b, m)
    return methods.mul(methods.sqrt(methods.add(methods.mul(x, x), methods.mul(y, y))), m)
  end
  -- erfinv: computed in float64 (dpl.nn.init_fns' approximation, within 1e-14 relative),
  -- ±1 -> ±inf, |x| > 1 and NaN -> NaN; gradient sqrt(pi)/2 exp(erfinv(x)^2)
  local erfinv_rule = {
    name = 'ErfinvBackward', nin = 1,
    save = function(n, out) n.y = methods.detach(out) end,
    bw = function(n, g) return methods.mul(g, methods.mul(methods.exp(methods.mul(n.y, n.y)), sqrt(pi) / 2)) end,
  }
  local function erfinv_raw(t)
    local x = methods.to(t, 'float64')
    local ax = methods.abs(x)
    local inner = methods.clamp(x, -1 + 1e-300, 1 - 1e-16)
    local y = require('dpl.nn.init_fns')._erfinv(M.where(methods.lt(ax, 1), inner, 0))
    y = M.where(methods.eq(ax, 1), methods.mul(methods.sign(x), huge), y)
    y = M.where(methods.logical_or(methods.gt(ax, 1), methods.isnan(x)), 0 / 0, y)
    return methods.to(y, is_float(t) and dtype_names[t._dtype] or 'float32')
  end
  --- erfinv(t): the inverse error function (integers give float32).
  function methods.erfinv(t)
    need_tensor('erfinv', 'input', t)
    local A = require 'dpl.autograd'
    local y = A.no_grad(erfinv_raw, methods.detach(t))
    return A.record(erfinv_rule, y, t)
  end
  function methods.erfinv_(t)
    need_tensor('erfinv_', 'input', t)
    if not is_float(t) then runtime_error(fmt('erfinv_: result type float32 cannot be cast to %s', dtype_names[t._dtype])) end
    return methods.copy_(t, methods.erfinv(t))
  end
  -- in-place forms of the composed ops: computed out of place, then copied in (recorded by copy_)
  local function inplace_of(name)
    methods[name .. '_'] = function(t, ...)
      need_tensor(name .. '_', 'input', t)
      if not is_float(t) then
        runtime_error(fmt('%s_: result type float32 cannot be cast to the desired output type %s', name,
          dtype_names[t._dtype]))
      end
      local r = methods[name](t, ...)
      if r._ndim ~= t._ndim or methods.numel(r) ~= methods.numel(t) then
        runtime_error(fmt('%s_: the result of shape %s does not fit self of shape %s', name, shape_str(r), shape_str(t)))
      end
      return methods.copy_(t, r)
    end
  end
  inplace_of('logit')
  inplace_of('xlogy')
  inplace_of('hypot')
  --- clamp_min(min) / clamp_max(max) (and `_` forms): clamp with one bound.
  methods.clamp_min = methods.clamp_min or function(t, lo) return methods.clamp(t, lo, nil) end
  methods.clamp_max = methods.clamp_max or function(t, hi) return methods.clamp(t, nil, hi) end
  function methods.clamp_min_(t, lo)
    need_tensor('clamp_min_', 'input', t)
    if lo == nil then value_error('clamp_min_: min is required') end
    return methods.clamp_(t, lo, nil)
  end
  function methods.clamp_max_(t, hi)
    need_tensor('clamp_max_', 'input', t)
    if hi == nil then value_error('clamp_max_: max is required') end
    return methods.clamp_(t, nil, hi)
  end

  ---------------------------------------------------------------- diff, take_along_dim, argwhere
  --- t:diff([n=1 [, dim=-1 [, prepend [, append]]]]) or t:diff{n=, dim=, prepend=, append=}: the
  --- n-th forward difference along dim (bool: logical_xor), prepend/append (tensors, or numbers
  --- taken as one slice) concatenated first.
  function methods.diff(t, n, d, prepend, append)
    need_tensor('diff', 'input', t)
    if is_opts(n) then
      options.check(n, K_DIFF, 'diff')
      n, d, prepend, append = n.n, n.dim, n.prepend, n.append
    end
    n = n == nil and 1 or need_int('diff', 'n', n, 0)
    if t._ndim == 0 then runtime_error('diff: expects input to be at least one-dimensional') end
    d = pdim(t, d or -1, 'diff')
    local function slice(v, what)
      if v == nil then return nil end
      if type(v) == 'number' or type(v) == 'boolean' then
        local s = size_of(t)
        s[d] = 1
        return M.full(s, type(v) == 'boolean' and (v and 1 or 0) or v, { dtype = dtype_names[t._dtype], device = dev_of(t) })
      end
      if not is_tensor(v) then value_error(fmt('diff: %s must be a tensor or a number, got %s', what, got(v))) end
      if v._ndim ~= t._ndim then
        runtime_error(fmt('diff: expected %s to have the same number of dims as input (%d), got %d', what, t._ndim, v._ndim))
      end
      return v
    end
    local p, a = slice(prepend, 'prepend'), slice(append, 'append')
    local x = t
    if p or a then
      local l = {}
      if p then l[#l + 1] = p end
      l[#l + 1] = t
      if a then l[#l + 1] = a end
      x = M.cat(l, d)
    end
    for _ = 1, n do
      local len = tonumber(x._shape[d - 1])
      if len == 0 then break end
      local hi, lo = methods.narrow(x, d, 2, len - 1), methods.narrow(x, d, 1, len - 1)
      x = x._dtype == 7 and methods.logical_xor(hi, lo) or methods.sub(hi, lo)
    end
    return x
  end

  --- t:take_along_dim(indices [, dim]): gather along dim after broadcasting t and indices
  --- (1-based indices, as argsort/argmax give them); without dim, over the flattened tensors.
  function methods.take_along_dim(t, idx, d)
    need_tensor('take_along_dim', 'input', t)
    need_tensor('take_along_dim', 'indices', idx)
    if idx._dtype ~= 5 and idx._dtype ~= 4 then
      runtime_error(fmt('take_along_dim: dtype of indices should be int64 (or int32), got %s', dtype_names[idx._dtype]))
    end
    if d == nil then return methods.gather(methods.reshape(t, -1), 1, methods.reshape(idx, -1)) end
    if t._ndim ~= idx._ndim then
      runtime_error(fmt('take_along_dim: input and indices should have the same number of dimensions, got %d and %d',
        t._ndim, idx._ndim))
    end
    if t._ndim == 0 then return methods.gather(methods.reshape(t, 1), 1, methods.reshape(idx, 1)):reshape({}) end
    local pd = pdim(t, d, 'take_along_dim')
    local st, si = size_of(t), size_of(idx)
    for i = 1, #st do
      if i ~= pd and st[i] ~= si[i] then
        if st[i] == 1 then st[i] = si[i]
        elseif si[i] == 1 then si[i] = st[i]
        else
          runtime_error(fmt('take_along_dim: shapes %s and %s do not broadcast at dim %d', shape_str(t), shape_str(idx), i))
        end
      end
    end
    return methods.gather(methods.expand(t, st), pd, methods.expand(idx, si))
  end

  --- t:argwhere(): the 1-based coordinates of the nonzero elements, [count, ndim] (nonzero()).
  function methods.argwhere(t)
    need_tensor('argwhere', 'input', t)
    return methods.nonzero(t)
  end

  ---------------------------------------------------------------- meshgrid, searchsorted, indices
  --- dpl.meshgrid(a, b, ... [, {indexing='ij'|'xy'}]) or ({a, b, ...} [, opts]) -> a list of
  --- expanded views; 'ij' (the default) gives shape [#a, #b, ...], 'xy' swaps the first two.
  function M.meshgrid(...)
    local args = { ... }
    local nargs = select('#', ...)
    local opts
    if nargs > 0 and is_opts(args[nargs]) and not is_tensor(args[nargs]) and (nargs > 1 or args[nargs].indexing ~= nil) then
      opts = args[nargs]
      args[nargs] = nil
      nargs = nargs - 1
    end
    options.check(opts, K_MESH, 'meshgrid')
    local indexing = opts and opts.indexing or 'ij'
    if indexing ~= 'ij' and indexing ~= 'xy' then
      value_error(fmt("meshgrid: indexing must be 'ij' or 'xy', got %s", tostring(indexing)))
    end
    local list = nargs == 1 and is_opts(args[1]) and tensor_args('meshgrid', args[1]) or tensor_args('meshgrid', unpack(args, 1, nargs))
    if #list == 0 then value_error('meshgrid: expects a non-empty list of tensors') end
    local shape = {}
    for i, t in ipairs(list) do
      if t._ndim > 1 then
        runtime_error(fmt('meshgrid: expected 0-d or 1-d tensors in the list, got a %d-d tensor at position %d', t._ndim, i))
      end
      if t._dtype ~= list[1]._dtype or dev_of(t) ~= dev_of(list[1]) then
        runtime_error('meshgrid: expects all tensors to have the same dtype and device')
      end
      shape[i] = t._ndim == 0 and 1 or tonumber(t._shape[0])
    end
    local swap = indexing == 'xy' and #list >= 2
    if swap then shape[1], shape[2] = shape[2], shape[1] end
    local r = {}
    for i, t in ipairs(list) do
      local pos = i
      if swap and i <= 2 then pos = 3 - i end
      local vs = {}
      for j = 1, #list do vs[j] = 1 end
      vs[pos] = shape[pos]
      r[i] = methods.expand(methods.reshape(t, vs), shape)
    end
    return r
  end

  local function side_of(name, opts, K)
    options.check(opts, K, name)
    opts = opts or {}
    need_bool(name, 'right', opts.right)
    need_bool(name, 'out_int32', opts.out_int32)
    local right = opts.right or false
    if opts.side ~= nil then
      if opts.side ~= 'left' and opts.side ~= 'right' then
        value_error(fmt("%s: side can only be 'left' or 'right', got %s", name, tostring(opts.side)))
      end
      if opts.right and opts.side == 'left' then
        runtime_error(fmt("%s: side and right can't be set to opposites, got side of left while right was true", name))
      end
      right = opts.side == 'right'
    end
    return right, opts.out_int32 and 'int32' or 'int64', opts
  end
  local function search(name, s, v, right, odt)
    local scalar = not is_tensor(v)
    if scalar then
      if type(v) ~= 'number' then value_error(fmt('%s: values must be a tensor or a number, got %s', name, got(v))) end
      if s._ndim ~= 1 then runtime_error(fmt('%s: a scalar value needs a 1-d sorted sequence, got %d dims', name, s._ndim)) end
      v = M.tensor(v, { dtype = 'float64' })
    end
    if s._ndim == 0 then runtime_error(name .. ': sorted_sequence must have at least one dim, got a 0-d tensor') end
    if s._ndim > 1 then
      local ok = v._ndim == s._ndim
      for i = 1, s._ndim - 1 do if ok and s._shape[i - 1] ~= v._shape[i - 1] then ok = false end end
      if not ok then
        runtime_error(fmt('%s: boundaries tensor should be 1 dimension or the first N-1 dimensions of boundaries tensor '
          .. 'and input value tensor must match, but we got boundaries tensor %s and input value tensor %s', name,
          shape_str(s), shape_str(v)))
      end
    end
    if s._dtype == 7 or v._dtype == 7 then runtime_error(name .. ': bool tensors are not supported') end
    local Mn = tonumber(s._shape[s._ndim - 1])
    local vshape = size_of(v)
    local R = s._ndim > 1 and methods.numel(s) / math.max(Mn, 1) or 1
    if s._ndim > 1 and Mn == 0 then R = 1 for i = 1, s._ndim - 1 do R = R * tonumber(s._shape[i - 1]) end end
    local N = R > 0 and methods.numel(v) / R or 0
    -- on a GPU (the sequence's; a number or a CPU value goes there): the same search in a kernel
    local dev = s._devtype ~= 0 and (v._devtype == 0 or v._devindex == s._devindex) and dev_of(s) or 'cpu'
    local s64 = methods.contiguous(methods.to(methods.detach(s), { dtype = 'float64', device = dev }))
    local v64 = methods.contiguous(methods.to(methods.detach(v), { dtype = 'float64', device = dev }))
    local out = M.empty(vshape, { dtype = 'int64', device = dev })
    if dev ~= 'cpu' then
      local st = C.dpl_search_rows(s64, v64, right and 1 or 0, R > 0 and R or 1, out)
      if st ~= 0 then fail(3, st) end
    elseif methods.numel(v) > 0 then search_rows(s64, v64, right, R, Mn, N, out) end
    out = methods.add_(out, 1)
    return methods.to(out, { dtype = odt, device = dev_of(s) })
  end
  --- dpl.searchsorted(sorted_sequence, values [, {right=, side=, out_int32=, sorter=}]): for each
  --- value, the 1-based position where inserting it keeps the innermost rows of sorted_sequence
  --- sorted (torch's index + 1: 1..M+1); left: the first such position, right: the last.
  function M.searchsorted(s, v, opts)
    need_tensor('searchsorted', 'sorted_sequence', s)
    local right, odt
    right, odt, opts = side_of('searchsorted', opts, K_SEARCH)
    if opts.sorter ~= nil then
      need_tensor('searchsorted', 'sorter', opts.sorter)
      if not is_tensor(opts.sorter) or (opts.sorter._dtype ~= 5 and opts.sorter._dtype ~= 4) then
        runtime_error('searchsorted: sorter must be an int64 tensor of 1-based indices')
      end
      s = methods.gather(s, s._ndim, opts.sorter)
    end
    return search('searchsorted', s, v, right, odt)
  end
  --- dpl.bucketize(input, boundaries [, {right=, out_int32=}]) and t:bucketize(boundaries):
  --- the 1-based bucket of each element among the 1-d boundaries (torch's index + 1).
  function methods.bucketize(t, b, opts)
    if not is_tensor(t) and type(t) ~= 'number' then
      value_error(fmt('bucketize: input must be a tensor or a number, got %s', got(t)))
    end
    need_tensor('bucketize', 'boundaries', b)
    if b._ndim ~= 1 then runtime_error(fmt('bucketize: boundaries tensor must be 1 dimension, but got dim(%d)', b._ndim)) end
    local right, odt = side_of('bucketize', opts, K_BUCKET)
    return search('bucketize', b, t, right, odt)
  end
  M.bucketize = methods.bucketize

  local function tri_indices(name, upper)
    return function(row, col, offset, opts)
      if is_opts(offset) then offset, opts = nil, offset end
      need_int(name, 'row', row, 0)
      need_int(name, 'col', col, 0)
      offset = offset == nil and 0 or need_int(name, 'offset', offset)
      options.check(opts, K_IDX, name)
      opts = opts or {}
      local dt = opts.dtype or 'int64'
      if dt ~= 'int64' and dt ~= 'int32' and dt ~= 'long' and dt ~= 'int' then
        runtime_error(fmt('%s: dtype must be int64 or int32, got %s', name, tostring(dt)))
      end
      local r
      if row == 0 or col == 0 then
        r = M.empty({ 2, 0 }, { dtype = 'int64' })
      else
        local m = M.ones(row, col, { dtype = 'float32' })
        m = upper and methods.triu(m, offset) or methods.tril(m, offset)
        r = methods.contiguous(methods.t(methods.nonzero(m)))
        if r._ndim ~= 2 then r = M.empty({ 2, 0 }, { dtype = 'int64' }) end
      end
      return methods.to(r, { dtype = dt, device = opts.device })
    end
  end
  --- dpl.tril_indices(row, col [, offset=0] [, {dtype=, device=}]): the 1-based coordinates of
  --- the lower triangle of a row x col matrix, row-major, as a [2, N] tensor; triu_indices: the upper.
  M.tril_indices, M.triu_indices = tri_indices('tril_indices', false), tri_indices('triu_indices', true)

  ---------------------------------------------------------------- distances, quantiles, blocks, scans
  --- dpl.cdist(x1 [..., P, M], x2 [..., R, M] [, p=2] [, {p=, compute_mode=}]) -> [..., P, R]: the
  --- p-norm distances between the rows (p >= 0; math.huge for the largest difference).
  function M.cdist(x1, x2, p, opts)
    need_tensor('cdist', 'x1', x1)
    need_tensor('cdist', 'x2', x2)
    if is_opts(p) then opts, p = p, nil end
    options.check(opts, K_CDIST, 'cdist')
    if opts and opts.p ~= nil then p = opts.p end
    if p == nil then p = 2 end
    if type(p) ~= 'number' or p ~= p then value_error(fmt('cdist: p must be a number, got %s', got(p))) end
    if p < 0 then runtime_error(fmt('cdist: only supports non-negative p values, got %g', p)) end
    if x1._ndim < 2 or x2._ndim < 2 then
      runtime_error(fmt('cdist: only supports at least 2-d tensors, got %d-d and %d-d', x1._ndim, x2._ndim))
    end
    if x1._shape[x1._ndim - 1] ~= x2._shape[x2._ndim - 1] then
      runtime_error(fmt('cdist: x1 and x2 must have the same number of columns, got %d and %d',
        tonumber(x1._shape[x1._ndim - 1]), tonumber(x2._shape[x2._ndim - 1])))
    end
    if not is_float(x1) or not is_float(x2) then
      runtime_error(fmt('cdist: only supports floating-point dtypes, got %s and %s', dtype_names[x1._dtype],
        dtype_names[x2._dtype]))
    end
    local d = methods.sub(methods.unsqueeze(x1, -2), methods.unsqueeze(x2, -3)) -- [..., P, R, M]
    if p == 0 then return methods.to(methods.sum(methods.ne(d, 0), -1), d.dtype) end
    if p == huge then return methods.amax(methods.abs(d), -1) end
    if p == 2 then -- sqrt(sum d^2) with a zero gradient at a zero distance, as PyTorch's
      local s = methods.sum(methods.mul(d, d), -1)
      local z = methods.eq(methods.detach(s), 0)
      return M.where(z, 0, methods.sqrt(M.where(z, 1, s)))
    end
    if p == 1 then return methods.sum(methods.abs(d), -1) end
    local s = methods.sum(methods.pow(methods.abs(d), p), -1)
    local z = methods.eq(methods.detach(s), 0)
    return M.where(z, 0, methods.pow(M.where(z, 1, s), 1 / p))
  end

  local INTERP = { linear = true, lower = true, higher = true, midpoint = true, nearest = true }
  local function quantile(name, ignore_nan)
    return function(t, q, d, keepdim, interp)
      need_tensor(name, 'input', t)
      if is_opts(d) then
        options.check(d, K_QUANT, name)
        d, keepdim, interp = d.dim, d.keepdim, d.interpolation
      elseif is_opts(keepdim) then
        options.check(keepdim, K_QUANT, name)
        if keepdim.dim ~= nil then value_error(name .. ': dim given both positionally and in the options') end
        keepdim, interp = keepdim.keepdim, keepdim.interpolation
      elseif is_opts(interp) then
        options.check(interp, K_QUANT, name)
        interp = interp.interpolation
      end
      need_bool(name, 'keepdim', keepdim)
      interp = interp or 'linear'
      if not INTERP[interp] then
        value_error(fmt("%s: interpolation must be one of linear, lower, higher, midpoint and nearest, got %s", name,
          tostring(interp)))
      end
      if t._dtype ~= 0 and t._dtype ~= 1 then
        runtime_error(fmt('%s: input tensor must be either float or double dtype, got %s', name, dtype_names[t._dtype]))
      end
      local dt = dtype_names[t._dtype]
      local scalar_q = type(q) == 'number'
      local qt
      if scalar_q then qt = M.tensor({ q }, { dtype = dt, device = dev_of(t) })
      elseif type(q) == 'table' and not is_tensor(q) then qt = M.tensor(q, { dtype = dt, device = dev_of(t) })
      elseif is_tensor(q) then
        if q._ndim > 1 then runtime_error(fmt('%s: q must be a scalar or 1D tensor, got %d dims', name, q._ndim)) end
        if q._dtype ~= t._dtype then
          runtime_error(fmt('%s: q tensor must be same dtype as the input tensor (%s), got %s', name, dt, dtype_names[q._dtype]))
        end
        scalar_q = q._ndim == 0
        qt = methods.reshape(methods.detach(q), -1)
      else
        value_error(fmt('%s: q must be a number, a list of numbers or a tensor, got %s', name, got(q)))
      end
      if qt._ndim ~= 1 then runtime_error(name .. ': q must be a scalar or 1D tensor') end
      if methods.numel(qt) > 0 and (methods.min(qt):item() < 0 or methods.max(qt):item() > 1
        or methods.any(methods.isnan(qt)):item()) then
        runtime_error(name .. ': q values must be in the range [0, 1]')
      end
      if methods.numel(t) == 0 then runtime_error(name .. ': input tensor must be non-empty') end
      local x, pd = t, nil
      if d == nil then x = methods.reshape(t, -1) pd = 1 else pd = pdim(t, d, name) end
      if x._ndim == 0 then x = methods.reshape(x, 1) end
      local sorted = methods.sort(x, pd)
      sorted = methods.movedim(sorted, pd, -1) -- [..., n]
      local n = tonumber(sorted._shape[sorted._ndim - 1])
      local lead = size_of(sorted)
      lead[#lead] = 1
      local nan = methods.isnan(methods.detach(sorted))
      local cnt
      if ignore_nan then
        cnt = methods.to(methods.sum(methods.logical_not(nan), -1, true), dt) -- [..., 1]
      else
        cnt = M.full(lead, n, { dtype = dt, device = dev_of(t) })
      end
      local ranks = methods.mul(methods.sub(cnt, 1), qt) -- [..., nq]
      if ignore_nan then
        ranks = M.where(methods.eq(cnt, 0), n - 1, ranks)
      else
        ranks = M.where(methods.narrow(nan, -1, n, 1), n - 1, ranks)
      end
      if interp == 'lower' then ranks = methods.floor(ranks)
      elseif interp == 'higher' then ranks = methods.ceil(ranks)
      elseif interp == 'nearest' then ranks = methods.round(ranks) end
      local lo = methods.clamp(methods.to(methods.floor(ranks), 'int64'), 0, n - 1)
      local hi = methods.clamp(methods.to(methods.ceil(ranks), 'int64'), 0, n - 1)
      local vlo = methods.gather(sorted, -1, methods.add(lo, 1))
      local r
      if interp == 'linear' or interp == 'midpoint' then
        local vhi = methods.gather(sorted, -1, methods.add(hi, 1))
        local w = interp == 'midpoint' and M.full_like(ranks, 0.5) or methods.sub(ranks, methods.floor(ranks))
        r = methods.lerp(vlo, vhi, w)
      else
        r = vlo
      end
      -- [..., nq] -> [nq, ...] (keepdim: the reduced dim kept as 1)
      r = methods.movedim(r, -1, 1)
      if keepdim then
        if d == nil then
          local s = { methods.numel(qt) }
          for _ = 1, t._ndim do s[#s + 1] = 1 end
          r = methods.reshape(r, s)
        elseif t._ndim > 0 then
          r = methods.unsqueeze(r, pd + 1)
        end
      elseif d ~= nil and t._ndim == 0 then
        r = methods.reshape(r, { methods.numel(qt) })
      end
      if scalar_q then r = methods.select(r, 1, 1) end
      return r
    end
  end
  --- t:quantile(q [, dim [, keepdim=false [, interpolation='linear']]]) (or {dim=, keepdim=,
  --- interpolation=}): the q-th quantiles (q a number, a list or a 1-d tensor in [0, 1]; a list
  --- puts them in a new first dim); nanquantile ignores NaNs (an all-NaN slice gives NaN).
  methods.quantile = quantile('quantile', false)
  methods.nanquantile = quantile('nanquantile', true)

  --- dpl.block_diag(a, b, ...) or ({a, b, ...}): the tensors (0-d, 1-d as a row, 2-d) on the
  --- diagonal of a zero matrix, of their promoted dtype.
  function M.block_diag(...)
    local list = select('#', ...) == 0 and {} or tensor_args('block_diag', ...)
    local dt, dev = 'float32', 'cpu'
    if #list > 0 then dt, dev = dtype_names[list[1]._dtype], dev_of(list[1]) end
    local blocks, R, Cc = {}, 0, 0
    for i, t in ipairs(list) do
      if t._ndim > 2 then
        runtime_error(fmt('block_diag: Input tensors must have 2 or fewer dimensions. Input %d has %d dimensions', i, t._ndim))
      end
      dt = promote(dt, dtype_names[t._dtype])
      local b = t._ndim == 2 and t or methods.reshape(t, { 1, t._ndim == 0 and 1 or tonumber(t._shape[0]) })
      blocks[i] = b
      R, Cc = R + tonumber(b._shape[0]), Cc + tonumber(b._shape[1])
    end
    if #list == 0 then return M.empty({ 1, 0 }) end
    local rows, c0 = {}, 0
    for i, b in ipairs(blocks) do
      local r, c = tonumber(b._shape[0]), tonumber(b._shape[1])
      local parts = {}
      if c0 > 0 then parts[#parts + 1] = M.zeros({ r, c0 }, { dtype = dt, device = dev }) end
      parts[#parts + 1] = methods.to(b, dt)
      if Cc - c0 - c > 0 then parts[#parts + 1] = M.zeros({ r, Cc - c0 - c }, { dtype = dt, device = dev }) end
      rows[i] = #parts == 1 and parts[1] or M.cat(parts, 2)
      c0 = c0 + c
    end
    return #rows == 1 and methods.contiguous(rows[1]) or M.cat(rows, 1)
  end

  -- logcumsumexp over the rows of contiguous float64 [R, n] tensors: out_i = logaddexp(out_{i-1}, x_i),
  -- exact for any spread of values; the gradient by the stable reverse recurrence
  -- B_j = g_j + B_{j+1} exp(out_j - out_{j+1}) (out is non-decreasing), grad_j = B_j exp(x_j - out_j)
  local log, exp = math.log, math.exp
  local function lcse_rows(x, out, R, n)
    local xp, op = ffi.cast('const double*', x._data), ffi.cast('double*', out._data)
    for r = 0, R - 1 do
      local b = r * n
      local acc = -huge
      for i = 0, n - 1 do
        local v = xp[b + i]
        if v ~= v or acc ~= acc then acc = 0 / 0
        elseif acc == -huge then acc = v
        elseif v ~= -huge then
          local hi, lo = acc, v
          if lo > hi then hi, lo = lo, hi end
          if hi == huge then acc = huge else acc = hi + log(1 + exp(lo - hi)) end
        end
        op[b + i] = acc
      end
    end
  end
  local function lcse_grad_rows(g, x, out, gx, R, n)
    local gp, xp, op, rp = ffi.cast('const double*', g._data), ffi.cast('const double*', x._data),
      ffi.cast('const double*', out._data), ffi.cast('double*', gx._data)
    for r = 0, R - 1 do
      local b = r * n
      local B = 0
      for j = n - 1, 0, -1 do
        if j < n - 1 then
          local o1, o0 = op[b + j + 1], op[b + j]
          B = B * ((o1 == -huge or o0 == -huge) and 0 or exp(o0 - o1))
        end
        B = B + gp[b + j]
        local o, v = op[b + j], xp[b + j]
        rp[b + j] = (v == -huge) and 0 or B * exp(v - o)
      end
    end
  end
  -- t with dim pd moved last, as a contiguous float64 tensor (on t's GPU: the kernels of
  -- dpl_logcumsumexp_rows / _grad_rows run the loops above there; else on the CPU)
  local function rows64(t, pd)
    return methods.contiguous(methods.to(methods.movedim(t, pd, -1), { dtype = 'float64', device = dev_of(t) }))
  end
  local function cnew(st)
    if st ~= 0 then fail(3, st) end
    return wrap(out1)
  end
  local function back_from_rows(r, pd, like)
    return methods.to(methods.movedim(r, -1, pd), { dtype = dtype_names[like._dtype], device = dev_of(like) })
  end
  local lcse_rule = {
    name = 'LogcumsumexpBackward', nin = 1,
    save = function(n, out, _, pd, x64, o64) n.pd, n.x64, n.o64 = pd, x64, o64 end,
    bw = function(n, g)
      local g64 = rows64(g, n.pd)
      if g64._devtype ~= n.x64._devtype then g64 = methods.to(g64, dev_of(n.x64)) end
      local nn = tonumber(g64._shape[g64._ndim - 1])
      local gx
      if g64._devtype ~= 0 then
        gx = cnew(C.dpl_logcumsumexp_grad_rows(g64, n.x64, n.o64, out1))
      else
        gx = M.empty(size_of(g64), { dtype = 'float64' })
        if nn > 0 then lcse_grad_rows(g64, n.x64, n.o64, gx, methods.numel(g64) / nn, nn) end
      end
      return back_from_rows(gx, n.pd, g)
    end,
  }
  --- t:logcumsumexp(dim): log(cumsum(exp(t), dim)) as a running log-add-exp in float64 (exact
  --- for any spread of values; float32 input: rounded back to float32); differentiable.
  function methods.logcumsumexp(t, d)
    need_tensor('logcumsumexp', 'input', t)
    if d == nil then value_error('logcumsumexp: dim is required') end
    if not is_float(t) then
      runtime_error(fmt('logcumsumexp: expected a floating point input, got %s', dtype_names[t._dtype]))
    end
    local pd = pdim(t, d, 'logcumsumexp')
    if t._ndim == 0 then return methods.mul(t, 1) end
    local x64 = rows64(methods.detach(t), pd)
    local n = tonumber(x64._shape[x64._ndim - 1])
    local o64
    if x64._devtype ~= 0 then
      o64 = cnew(C.dpl_logcumsumexp_rows(x64, out1))
    else
      o64 = M.empty(size_of(x64), { dtype = 'float64' })
      if n > 0 then lcse_rows(x64, o64, methods.numel(x64) / n, n) end
    end
    local y = back_from_rows(o64, pd, t)
    return require('dpl.autograd').record(lcse_rule, y, t, pd, x64, o64)
  end

  ---------------------------------------------------------------- in-place view ops
  -- t's geometry replaced by that of v (a view of t: same storage and numel)
  local function set_geometry(t, v)
    t._ndim = v._ndim
    for i = 0, 7 do t._shape[i] = v._shape[i] t._stride[i] = v._stride[i] end
    t._offset = v._offset
    t._data = v._data
    t._flags = v._flags
    return t
  end
  local function c1(fn, ...)
    local st = fn(...)
    if st == ENOMEM then collectgarbage() st = fn(...) end
    if st ~= 0 then fail(3, st) end
    return wrap(out1)
  end
  local function no_grad_view(name, t)
    need_tensor(name, 'input', t)
    if t.requires_grad then
      runtime_error(fmt('%s: an in-place view op on a tensor that requires grad is not supported in dplhost '
        .. '(use %s, which returns a view)', name, name:sub(1, -2) .. '()'))
    end
  end
  --- t:unsqueeze_(dim), t:squeeze_([dim]), t:t_(), t:transpose_(d0, d1): the view ops applied to
  --- t's own shape and strides (t returned). Refused for a tensor that requires grad.
  function methods.unsqueeze_(t, d)
    no_grad_view('unsqueeze_', t)
    return set_geometry(t, c1(C.dpl_tensor_unsqueeze, t, cdim(t, d, 'unsqueeze_', 1), out1))
  end
  function methods.squeeze_(t, d)
    no_grad_view('squeeze_', t)
    local cd = -1
    if d ~= nil then
      if t._ndim == 0 and (d == 1 or d == -1) then return t end
      cd = cdim(t, d, 'squeeze_')
    end
    return set_geometry(t, c1(C.dpl_tensor_squeeze, t, cd, out1))
  end
  function methods.transpose_(t, d0, d1)
    no_grad_view('transpose_', t)
    if t._ndim == 0 and (d0 == 1 or d0 == -1) and (d1 == 1 or d1 == -1) then return t end
    return set_geometry(t, c1(C.dpl_tensor_transpose, t, cdim(t, d0, 'transpose_'), cdim(t, d1, 'transpose_'), out1))
  end
  function methods.t_(t)
    no_grad_view('t_', t)
    if t._ndim > 2 then runtime_error(fmt('t_: expects a tensor with <= 2 dims, got %d (use transpose_)', t._ndim)) end
    if t._ndim < 2 then return t end
    return set_geometry(t, c1(C.dpl_tensor_transpose, t, 0, 1, out1))
  end

  -- the function forms (dpl.X(t, ...)) of the methods PyTorch also has as functions
  for _, k in ipairs({ 'broadcast_to', 'unflatten', 'logaddexp', 'logit', 'logit_', 'xlogy', 'xlogy_', 'erfinv',
    'clamp_min', 'clamp_max', 'clamp_min_', 'clamp_max_', 'diff', 'take_along_dim', 'argwhere', 'quantile',
    'nanquantile', 'logcumsumexp', 'hypot', 'adjoint' }) do
    M[k] = function(...) return methods[k](...) end
  end
end
