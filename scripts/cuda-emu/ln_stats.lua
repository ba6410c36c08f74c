-- ln_stats.lua: one nn.LayerNorm forward + backward on cuda:0, for counting kernel
-- launches under the emulator:
--   DPL_CUDA_EMU_STATS=1 scripts/cuda-emu/run-ops.sh scripts/cuda-emu/ln_stats.lua [setup]
-- (with `setup`: the module and input only, to subtract)
local dpl = require 'dpl'
local nn = dpl.nn
local m = nn.LayerNorm(64):to('cuda:0')
local x = dpl.randn(32, 64):to('cuda:0'):requires_grad_()
dpl.cuda.synchronize()
if (...) == 'setup' then print('setup only') return end -- the launches of the setup alone
local y = m(x)
y:backward(dpl.ones(32, 64):to('cuda:0'))
dpl.cuda.synchronize()
print('layer_norm forward+backward done', x.grad:sum():item())
