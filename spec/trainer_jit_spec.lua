-- trainer_jit_spec.lua: the Trainer's step path stays compilable. A function that makes a
-- closure (FNEW), or leaves a block whose locals a closure captured (UCLO), cannot be
-- compiled by LuaJIT 2.1: each call aborts the trace and runs in the interpreter. One such
-- function on the step path (a module hook dispatch, an optimizer lookup, a batch's index
-- list made into a tensor) cost the tiny-model Trainer step of bench/trainer_overhead.sh
-- about a third of its time. A fresh dplhost fits a tiny model for 3000 steps with the JIT's
-- trace events attached and lists every such abort in the Trainer, optimizer, data and
-- tensor-constructor code.
local h = require 'spec.support.helpers'

local SCRIPT = [[
local dpl = require 'dpl'
local vmdef = require 'jit.vmdef'
local util = require 'jit.util'
local nn, F = dpl.nn, dpl.nn.functional
local found, seen = {}, {}
local WATCH = { '/dpl/trainer/', '/dpl/optim/', '/dpl/tensor_ctor.lua', '/dpl/data.lua', '/dpl/lightning.lua',
  '/dpl/strategies/', '/dpl/callbacks/', '/dpl/loggers/', '/dpl/log.lua' }
jit.attach(function(what, tr, func, pc, otr, oex)
  if what ~= 'abort' then return end
  local msg = vmdef.traceerr[otr]
  if type(msg) ~= 'string' or not msg:find('NYI: bytecode') or type(oex) ~= 'number' then return end
  local op = vmdef.bcnames:sub(oex * 6 + 1, oex * 6 + 6):gsub(' ', '')
  if op ~= 'FNEW' and op ~= 'UCLO' then return end
  msg = 'NYI: ' .. op
  local fi = util.funcinfo(func, pc)
  local loc = fi.loc or '?'
  for _, w in ipairs(WATCH) do
    if (fi.source or ''):find(w, 1, true) then
      local k = msg .. ' at ' .. loc
      if not seen[k] then seen[k] = 0; found[#found + 1] = k end
      seen[k] = seen[k] + 1
    end
  end
end, 'trace')
local R = 3000
dpl.manual_seed(0)
local ds = dpl.data.TensorDataset(dpl.randn({ R * 8, 4 }), dpl.randint(1, 3, { R * 8 }))
local Tiny = dpl.LightningModule:extend('Tiny')
function Tiny:__init() dpl.LightningModule.__init(self); self.net = nn.Linear(4, 2) end
function Tiny:training_step(b)
  local l = F.cross_entropy(self.net(b[1]), b[2])
  self:log('loss', l, { prog_bar = true })
  return l
end
function Tiny:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.01 }) end
local dir = os.getenv('OUTDIR')
local t = dpl.Trainer{ max_epochs = 1, default_root_dir = dir, enable_model_summary = false,
  callbacks = { dpl.callbacks.ProgressBar{ stream = io.open('/dev/null', 'w'), tty = false } },
  logger = dpl.loggers.CSVLogger(dir), enable_checkpointing = false }
t:fit(Tiny(), dpl.data.DataLoader(ds, { batch_size = 8 }))
print('steps', t.global_step)
-- (a site the JIT met once or twice is setup code that ran in a traced loop; a per-step one
-- aborts again and again, until the JIT blacklists it)
for _, f in ipairs(found) do if seen[f] >= 4 then print('ABORT', f .. ' (' .. seen[f] .. ' times)') end end
for _, f in ipairs(found) do io.stderr:write('abort ', f, ' ', seen[f], '\n') end
]]

describe('the Trainer step path under the JIT', function()
  it('has no function that makes a closure per step (no FNEW/UCLO trace aborts in 3000 steps)', function()
    local dir = h.tmpname('.d')
    os.execute('mkdir -p ' .. h.q(dir))
    local f = h.write_file(dir .. '/jit_probe.lua', SCRIPT)
    local out, err, rc = h.sh('OUTDIR=' .. h.q(dir) .. ' ' .. h.q(h.bin) .. ' ' .. h.q(f), { timeout = 120 })
    os.execute('rm -rf ' .. h.q(dir))
    assert.are.equal(0, rc, err)
    assert.truthy(out:find('steps\t3000', 1, true), out)
    local aborts = {}
    for line in out:gmatch('ABORT\t([^\n]+)') do aborts[#aborts + 1] = line end
    assert.are.same({}, aborts)
  end)
end)
