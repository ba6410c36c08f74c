-- nn_conv_spec.lua: the conv group of nn (dpl.nn.conv, dpl.nn.functional_conv): Conv1d,
-- ConvTranspose1d/2d, MaxPool1d, AvgPool1d, the adaptive pools, Dropout1d/2d, the padding
-- layers and F.pad, Upsample / F.interpolate, PixelShuffle/Unshuffle, Unfold/Fold. Values
-- and gradients (input and every parameter) against PyTorch 1.13 in float64 and float32,
-- contiguous and not (spec/fixtures/nn_conv_ref.lua from gen_nn_conv_ref.py), state dict
-- keys, the initialisation, dropout in train and eval, every error path, memory, and a small
-- CNN that learns a slice of Fashion-MNIST.
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local nn, F = dpl.nn, dpl.nn.functional
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/nn_conv_ref.lua')

local function flat(v, out)
  out = out or {}
  if type(v) == 'table' then for _, x in ipairs(v) do flat(x, out) end else out[#out + 1] = v end
  return out
end
-- |got - expected| <= tol * (1 + |expected|) elementwise, same shape
local function near(expected, got, what, tol)
  if type(got) == 'cdata' then got = got:double():totable() end
  local e, g = flat(expected), flat(got)
  assert(#e == #g, ('%s: expected %d elements, got %d'):format(what, #e, #g))
  for i = 1, #e do
    if not (math.abs(e[i] - g[i]) <= (tol or 1e-10) * (1 + math.abs(e[i]))) then
      error(('%s: element %d: expected %.12g, got %.12g'):format(what, i, e[i], g[i]), 2)
    end
  end
end
local function same_shape(t, shape, what)
  assert.are.same(shape, t:size(), what)
end
local function err_of(f)
  local ok, e = pcall(f)
  assert(not ok, 'expected an error')
  return tostring(e)
end

-- the dplhost side of a fixture case: a module (state loaded) or a function, and the module
local function build(c, dtype)
  local chunk = assert(load(c.lua, '=case', 't', setmetatable({ nn = nn, F = F, dpl = dpl }, { __index = _G })))
  local obj, mod = chunk()
  if nn.Module.is_module(obj) then mod = obj end
  if mod then
    mod:to(dtype)
    if c.state then
      local sd = {}
      for k, v in pairs(c.state) do sd[k] = dpl.tensor(v, { dtype = dtype }) end
      mod:load_state_dict(sd)
    end
  end
  return obj, mod
end

-- x in dtype, contiguous or a non-contiguous view with the same values
local function input(c, dtype, noncontig)
  local x = dpl.tensor(c.x, { dtype = dtype })
  if noncontig and x:dim() >= 2 then
    x = x:transpose(-1, -2):contiguous():transpose(-1, -2)
    assert(not x:is_contiguous() or x:size(-1) == 1 or x:size(-2) == 1)
  end
  return x
end

local function run_case(name, dtype, noncontig)
  local c = ref[name]
  local obj, mod = build(c, dtype)
  local x = input(c, dtype, noncontig)
  if c.gx then x:requires_grad_() end
  local y, idx = obj(x)
  same_shape(y, c.yshape, name .. ' output shape')
  assert.are.equal(dtype, y.dtype, name .. ' output dtype')
  local f32 = dtype == 'float32'
  local tol = f32 and 2e-5 or 1e-10
  near(f32 and c.y32 or c.y, y, name .. ' output (' .. dtype .. ')', f32 and not c.y32 and 1e-4 or tol)
  if c.idx then
    assert.are.equal('int64', idx.dtype)
    assert.are.same(flat(c.idx), flat(idx:totable()), name .. ' indices')
  end
  if c.gx then
    y:backward(dpl.tensor(c.g, { dtype = dtype }))
    near(f32 and c.gx32 or c.gx, x.grad, name .. ' input gradient (' .. dtype .. ')', f32 and not c.gx32 and 1e-4 or tol)
    for k, gp in pairs(c.gp or {}) do
      local p
      for pk, pv in mod:named_parameters() do if pk == k then p = pv end end
      assert(p, name .. ': no parameter ' .. k)
      near(gp, p.grad, name .. ' gradient of ' .. k .. ' (' .. dtype .. ')', f32 and 2e-4 or tol)
    end
  end
  return mod
end

local names = {}
for k, v in pairs(ref) do if type(v) == 'table' and v.lua then names[#names + 1] = k end end
table.sort(names)

describe('the conv group against PyTorch 1.13', function()
  for _, name in ipairs(names) do
    it(name .. ': values and gradients, float64 and float32, contiguous and not', function()
      local mod = run_case(name, 'float64', false)
      run_case(name, 'float32', false)
      run_case(name, 'float64', true)
      local c = ref[name]
      if c.keys then -- PyTorch's state dict keys, in its order, and shapes
        assert.are.same(c.keys, mod:state_dict_keys())
        for k, t in pairs(mod:state_dict()) do assert.are.same(c.shapes[k], t:size(), name .. ' ' .. k) end
      end
    end)
  end
end)
