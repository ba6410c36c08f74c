-- fabric_amp16_script.lua: dpl.Fabric with precision 16-mixed on a simulated GPU (DPL_VIRTUAL_GPUS=1):
-- the model on cuda:0 with the optimizer following it, float32 outputs, clip_gradients on
-- unscaled gradients, the GradScaler's step.
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local f = dpl.Fabric{ accelerator = 'gpu', devices = 1, precision = '16-mixed' }
f:launch()
dpl.manual_seed(0)
local m = nn.Linear(4, 3)
local o = dpl.optim.SGD(m:parameters(), { lr = 0.1 })
local fm, fo = f:setup(m, o)
local x = f:to_device(dpl.randn({ 8, 4 }))
local out = fm(x)
print('device', m.weight.device, 'out', out.dtype, 'opt param is model param', o.param_groups[1].params[1] == m.weight)
local before = m.weight:clone()
fo:zero_grad(); f:backward(F.mse_loss(out, dpl.zeros({ 8, 3 }, { device = f.device }))); 
print('norm', f:clip_gradients(fm, fo, { max_norm = 100 }))
fo:step()
print('scale', f._scaler:get_scale(), 'moved', (m.weight - before):abs():max():item() > 0)
