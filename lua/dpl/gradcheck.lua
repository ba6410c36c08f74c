-- dpl.gradcheck: autograd's check of backward rules against central finite
-- differences (dpl.autograd.gradcheck loads it on first use): one backward per output
-- element for the analytical Jacobian, two forward passes per input element for the
-- numerical one, compared with atol + rtol * |numerical|.
local ffi = require 'ffi'
local errors = require 'dpl.errors'
local error = errors.raiser(errors.RuntimeError) -- as in dpl.autograd: RuntimeError objects
local fmt = string.format

local M = {}

--- gradcheck(fn, inputs [, {eps=1e-6, atol=1e-5, rtol=1e-3}]): compares the gradients
--- of fn(unpack(inputs)) from backward with central finite differences. Inputs that
--- require grad must be contiguous float64 tensors. Returns true, or raises an error
--- naming the input, the element and both values.
function M.gradcheck(fn, inputs, opts)
  local A, T = require 'dpl.autograd', require 'dpl.tensor'
  local rg, gfn, is_tensor = A._rg, A._gfn, T.is_tensor
  opts = opts or {}
  local eps, atol, rtol = opts.eps or 1e-6, opts.atol or 1e-5, opts.rtol or 1e-3
  if type(fn) ~= 'function' or type(inputs) ~= 'table' then
    error('gradcheck: expected (fn, {inputs...})', errors.ValueError)
  end
  local function out_of()
    local y = fn(unpack(inputs, 1, table.maxn(inputs)))
    if not is_tensor(y) then error('gradcheck: fn must return a tensor', 3) end
    return y
  end
  local y = out_of()
  local ny = tonumber(y._numel)
  for i, x in ipairs(inputs) do
    if is_tensor(x) and rg[x] then
      if x._dtype ~= 1 or not x:is_contiguous() or gfn[x] then
        error(fmt('gradcheck: input %d must be a contiguous float64 leaf tensor (got %s%s)', i, x.dtype,
          gfn[x] and ', not a leaf' or ''), 2)
      end
    end
  end
  -- analytical jacobian rows, one autograd.grad per output element (no .grad is touched:
  -- neither the inputs' nor that of tensors fn uses)
  local diff, pos = {}, {}
  for i, x in ipairs(inputs) do
    if is_tensor(x) and rg[x] then diff[#diff + 1] = x; pos[#diff] = i end
  end
  local ana = {}
  for j = 0, ny - 1 do
    ana[j] = {}
    if #diff > 0 then
      local go = T.zeros_like(y)
      local flat = go:view(-1)
      flat[j + 1] = 1
      local yy = out_of()
      local gs = rg[yy] and A.grad(yy, diff, go, { allow_unused = true }) or {}
      for k, x in ipairs(diff) do
        ana[j][pos[k]] = gs[k] and gs[k]:contiguous():double() or T.zeros_like(x)
      end
    end
  end
  -- numerical
  for i, x in ipairs(inputs) do
    if is_tensor(x) and rg[x] then
      local p = ffi.cast('double*', x._data)
      for k = 0, tonumber(x._numel) - 1 do
        local orig = p[k]
        p[k] = orig + eps
        local yp = A.no_grad(out_of):double():clone()
        p[k] = orig - eps
        local ym = A.no_grad(out_of):double():clone()
        p[k] = orig
        local pp, pm = ffi.cast('double*', yp._data), ffi.cast('double*', ym._data)
        for j = 0, ny - 1 do
          local num = (pp[j] - pm[j]) / (2 * eps)
          local a = ffi.cast('double*', ana[j][i]._data)[k]
          if math.abs(a - num) > atol + rtol * math.abs(num) then
            error(fmt('gradcheck: Jacobian mismatch for output %d with respect to input %d, element %d: '
              .. 'analytical %.8g, numerical %.8g', j + 1, i, k + 1, a, num), 2)
          end
        end
      end
    end
  end
  return true
end

return M
