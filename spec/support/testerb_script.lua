-- testerb_script.lua: small runs for spec/trainer_testerb_spec.lua; arg[1] names the case (each
-- described above its block).
local dpl = require 'dpl'
local nn = dpl.nn
local case = arg[1]

local M = dpl.LightningModule:extend('TesterB')
function M:__init() dpl.LightningModule.__init(self) dpl.manual_seed(0) self.net = nn.Linear(2, 3) end
function M:forward(x) return self.net(x) end
function M:training_step(b) return self(b[1]):sum() end
function M:predict_step(b) return self(b[1]) end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), 0.1) end
local quiet = { logger = false, enable_progress_bar = false, enable_checkpointing = false, enable_model_summary = false }
local function opts(t) local o = {} for k, v in pairs(quiet) do o[k] = v end for k, v in pairs(t) do o[k] = v end return o end
local function loader(n, bs)
  local x = dpl.arange(2 * n):float():reshape(n, 2)
  return dpl.data.DataLoader(dpl.data.TensorDataset(x), { batch_size = bs or 2 })
end

-- stale_tmp DIR: a write killed mid-way (kill -9) leaves `<name>.tmp.<pid>` next to the
-- checkpoints; ckpt_path="last" and "hpc" must not pick it (it holds "last" / "hpc_ckpt_").
if case == 'stale_tmp' then
  local dir = arg[2]
  local function trainer(epochs)
    return dpl.Trainer(opts { max_epochs = epochs, default_root_dir = dir, enable_checkpointing = true,
      callbacks = { dpl.callbacks.ModelCheckpoint { dirpath = dir .. '/ck', save_last = true } } })
  end
  local t = trainer(1)
  t:fit(M(), loader(8))
  t:save_checkpoint(dir .. '/hpc_ckpt_1.ckpt')
  for _, name in ipairs({ '/ck/last.ckpt.tmp.12345', '/ck/last.ckpt.tmp1700000000123', '/hpc_ckpt_2.ckpt.tmp.4242' }) do
    local f = assert(io.open(dir .. name, 'wb')); f:write('partial'); f:close()
  end
  for _, which in ipairs({ 'last', 'hpc' }) do
    t = trainer(2)
    local ok, e = pcall(t.fit, t, M(), loader(8), nil, { ckpt_path = which })
    print(('%s ok=%s step=%d %s'):format(which, tostring(ok), t.global_step, ok and '' or tostring(e):match('^[^\n]*')))
  end
end

-- bb_ddp (under dplhost --nproc 2): BackboneFinetuning unfreezes the backbone at epoch 1;
-- its gradients must then be averaged like the others', so the ranks keep equal weights.
if case == 'bb_ddp' then
  local BB = M:extend('TesterBBackbone')
  function BB:__init() M.__init(self) self.backbone = nn.Linear(2, 2) end
  function BB:forward(x) return self.net(self.backbone(x)) end
  function BB:training_step(b) return (self(b[1]) ^ 2):mean() end
  function BB:configure_optimizers() return dpl.optim.SGD(self.net:parameters(), 0.01) end
  local t = dpl.Trainer(opts { strategy = 'ddp', max_epochs = 3,
    callbacks = { dpl.callbacks.BackboneFinetuning { unfreeze_backbone_at_epoch = 1 } } })
  local m = BB()
  t:fit(m, loader(16))
  local s = 0
  for _, p in ipairs(m:parameters()) do s = s + p:double():sum():item() end
  print(('rank %d backbone=%.12g all=%.12g'):format(t.global_rank, m.backbone.weight:double():sum():item(), s))
end

-- sigterm_self DIR: the process sends itself SIGTERM during batch 2 of a fit that is not
-- caught: the Trainer stops with the hpc checkpoint and SignalReceived, and the host's exit
-- status is 143 (128+SIGTERM), as docs/host.md promises for a script stopped by SIGTERM.
if case == 'sigterm_self' then
  local pid = require('spec.support.helpers').pid()
  local Sig = M:extend('TesterBSig')
  function Sig:training_step(b, i)
    if i == 2 then os.execute('kill -TERM ' .. pid) end
    return M.training_step(self, b, i)
  end
  local t = dpl.Trainer(opts { max_epochs = 1, default_root_dir = arg[2] })
  t:fit(Sig(), loader(16))
end
