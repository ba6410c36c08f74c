-- optim_clip_script.lua: nn.utils.clip_grad_norm_ on the fixture's cases (spec/fixtures/optim_ref.lua,
-- from PyTorch 1.13) with the gradients on the device arg[1] (default cpu): prints one line per
-- case that differs and "clip cases: N ok, M failed". Run by spec/optim_clip_spec.lua on the CPU,
-- on a simulated GPU (the on-device path) and under the CUDA emulator when it is built.
local dpl = require 'dpl'
local ref = dofile((os.getenv('DPL_ROOT') or '.') .. '/spec/fixtures/optim_ref.lua')
local dev = arg[1] or 'cpu'

local function same(e, g)
  if e ~= e then return g ~= g end
  if e == math.huge or e == -math.huge then return e == g end
  return math.abs(e - g) <= 1e-12 * (1 + math.abs(e))
end

local ok, failed = 0, 0
for i, c in ipairs(ref.clip) do
  local ps = {}
  for j, g in ipairs(c.grads) do
    ps[j] = dpl.zeros(#g, { dtype = 'float64' }):to(dev):requires_grad_()
    ps[j].grad = dpl.tensor(g, { dtype = 'float64' }):to(dev)
  end
  local nt = c.norm_type
  local total = dpl.nn.utils.clip_grad_norm_(ps, 1.0, nt)
  local bad = {}
  if not same(c.total, total) then bad[#bad + 1] = ('total %.17g, torch %.17g'):format(total, c.total) end
  for j, p in ipairs(ps) do
    local got = p.grad:cpu():totable()
    for k, e in ipairs(c.after[j]) do
      if not same(e, got[k]) then bad[#bad + 1] = ('grad %d[%d] %.17g, torch %.17g'):format(j, k, got[k], e) end
    end
  end
  if #bad > 0 then
    failed = failed + 1
    print(('case %d (norm_type %s, %s): %s'):format(i, tostring(nt), c.case, table.concat(bad, '; ')))
  else
    ok = ok + 1
  end
end
print(('clip cases: %d ok, %d failed'):format(ok, failed))
