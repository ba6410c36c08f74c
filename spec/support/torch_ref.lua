-- torch_ref.lua: the tensors of the PyTorch fixture files written as {v=values, s=shape,
-- d=dtype} (spec/fixtures/gen_compat_ref.py, gen_tensor_api_ref.py, gen_torch_api_ref.py):
-- T(e) builds one, same(got, e, what [, tol]) compares a result with it (dtype, shape, then
-- each element: booleans, infinities and NaN exactly, numbers within tol relative to
-- max(1, |expected|); TOL by dtype by default).
local dpl = require 'dpl'
local assert = require 'luassert'

local M = {}
M.TOL = { float64 = 1e-10, float32 = 3e-6 }

function M.T(e)
  local t = dpl.tensor(e.v, { dtype = e.d })
  if t:dim() ~= #e.s then t = t:reshape(e.s) end
  return t
end

function M.flat(t)
  if t:dim() == 0 then return { t:item() } end
  return t:reshape(-1):totable()
end

function M.same(got, e, what, tol)
  assert(dpl.is_tensor(got), what .. ': expected a tensor, got ' .. type(got))
  assert.are.equal(e.d, got.dtype, what .. ': dtype')
  assert.are.same(e.s, got:size(), what .. ': shape')
  tol = tol or M.TOL[e.d] or 0
  local a, b = M.flat(got), M.flat(M.T(e))
  for i = 1, #b do
    local x, y = a[i], b[i]
    if type(y) == 'boolean' or y == math.huge or y == -math.huge then
      assert(x == y, ('%s: element %d: %s, expected %s'):format(what, i, tostring(x), tostring(y)))
    elseif y ~= y then
      assert(x ~= x, ('%s: element %d: %s, expected nan'):format(what, i, tostring(x)))
    else
      x, y = tonumber(x), tonumber(y) -- (int64 values come as cdata)
      assert(math.abs(x - y) <= tol * math.max(1, math.abs(y)), ('%s: element %d: %.17g, expected %.17g'):format(what, i, x, y))
    end
  end
end

return M
