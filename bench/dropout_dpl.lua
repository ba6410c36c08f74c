-- dropout_dpl.lua: dplhost's side of bench/dropout.sh. F.dropout forward + backward (p = 0.1,
-- input requiring grad, a gradient of ones) on N float32: "fused" (F.dropout: the fused kernel)
-- and "composed" (the form it replaced: x * empty_like(x):bernoulli_(1 - p):div_(1 - p)).
-- Prints "name ms" lines (median of 7 timed loops of 20 after a warm-up).
local dpl = require 'dpl'
local T = require 'dpl.tensor'
local F = dpl.nn.functional
local clock = dpl.C.dpl_clock
local N, p = tonumber(os.getenv('N') or 1000000), 0.1

local function median(t) table.sort(t) return t[math.ceil(#t / 2)] end
local function time_ms(step)
  local t0 = clock()
  repeat step() until clock() - t0 > 0.3
  local r = {}
  for k = 1, 7 do
    local t1 = clock()
    for _ = 1, 20 do step() end
    r[k] = (clock() - t1) / 20 * 1e3
  end
  return median(r)
end
local function composed(x)
  local m = dpl.no_grad(function() return T.empty_like(x):bernoulli_(1 - p):div_(1 - p) end)
  return x * m
end
local x = dpl.randn({ N }):requires_grad_()
local g = dpl.ones({ N })
for _, k in ipairs({ 'fused', 'composed' }) do
  local f = k == 'fused' and function(t) return F.dropout(t, p) end or composed
  print(('dropout_%s_ms %.4f'):format(k, time_ms(function()
    x.grad = nil
    f(x):backward(g)
  end)))
end
