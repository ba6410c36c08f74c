-- ddp_features_script.lua: the newer pieces under DDP, for spec/trainer_ddp_features_spec.lua.
-- arg[1]:
--   nn <single|ddp|ddp_spawn>: one model holding weight_norm, spectral_norm (both forms),
--     orthogonal, a pruned Linear, activation checkpointing, EmbeddingBag and Conv3d, built from
--     a different seed on each rank; 3 SGD steps (one process: batch 8; two ranks: batch 4 each);
--     prints "R<rank> <state_dict digest>"
--   lazy <dummy>: a LazyLinear under ddp (arg[2] = 'dummy': a forward first, in __init)
--   predict: trainer:predict over 11 items, batch 2; prints each rank's items
--   resume <straight|first|resume> <dir>: parametrized modules + a logged metric, 2 epochs
--     straight or 1 + resume from a checkpoint; prints the state_dict digest
local dpl = require 'dpl'
local nn, F, tm = dpl.nn, dpl.nn.functional, dpl.metrics
local what = arg[1]

local function digest(m)
  local sd = m:state_dict()
  local keys, parts = {}, {}
  for k in pairs(sd) do keys[#keys + 1] = k end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local s = {}
    for _, e in ipairs(sd[k]:reshape(-1):tolist()) do s[#s + 1] = ('%.5g'):format(e) end
    parts[#parts + 1] = k .. '=' .. table.concat(s, ',')
  end
  return table.concat(parts, ' ')
end
local function trainer(opts)
  local o = { enable_progress_bar = false, enable_model_summary = false, logger = false, enable_checkpointing = false }
  for k, v in pairs(opts) do o[k] = v end
  return dpl.Trainer(o)
end

if what == 'nn' then
  local mode = arg[2]
  local U = nn.utils
  local M = dpl.LightningModule:extend('Pieces')
  function M:__init(seed)
    dpl.LightningModule.__init(self)
    dpl.manual_seed(seed)
    self.wn = U.weight_norm(nn.Linear(6, 6))
    self.sn = U.spectral_norm(nn.Linear(6, 6))
    self.psn = U.parametrizations.spectral_norm(nn.Linear(6, 6))
    self.orth = U.parametrizations.orthogonal(nn.Linear(6, 6))
    self.pruned = nn.Linear(6, 6)
    U.prune.random_unstructured(self.pruned, 'weight', 0.5) -- a different mask on each rank
    self.inner = nn.Linear(6, 6)
    self.bag = nn.EmbeddingBag(10, 6, { mode = 'mean' })
    self.conv = nn.Conv3d(1, 2, 2)
    self.fc = nn.Linear(16, 6)
    self.head = nn.Linear(6, 3)
  end
  function M:forward(x)
    local n = x:size(1)
    local h = F.tanh(self.orth(F.tanh(self.psn(F.tanh(self.sn(F.tanh(self.wn(x))))))))
    h = F.tanh(self.pruned(h))
    h = dpl.utils.checkpoint(function(z) return F.tanh(self.inner(z)) end, h)
    local idx = (x:abs() * 10):long():remainder(10) + 1
    local v = x:narrow(2, 1, 1):expand(n, 27):reshape(n, 1, 3, 3, 3) * dpl.arange(1, 28):reshape(1, 1, 3, 3, 3) / 27
    return self.head(h + self.bag(idx) + self.fc(self.conv(v):reshape(n, -1)))
  end
  function M:training_step(b) return F.cross_entropy(self(b[1]), b[2]) end
  function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1, momentum = 0.9 }) end
  dpl.manual_seed(1)
  local ds = dpl.data.TensorDataset(dpl.randn({ 32, 6 }), dpl.randint(1, 4, { 32 }))
  local single = mode == 'single'
  local t = trainer{ strategy = not single and mode or nil, max_steps = 3,
    accelerator = mode == 'ddp_spawn' and 'cpu' or nil, devices = mode == 'ddp_spawn' and 2 or nil }
  local rank = tonumber(os.getenv('RANK') or '0')
  local m = M(100 + rank) -- DDP must start every rank from rank 0's parameters and buffers
  t:fit(m, dpl.data.DataLoader(ds, { batch_size = single and 8 or 4 }))
  print(('R%d %s'):format(t.global_rank, digest(m)))
elseif what == 'lazy' then
  local M = dpl.LightningModule:extend('Lazy')
  function M:__init()
    dpl.LightningModule.__init(self)
    dpl.manual_seed(10 + tonumber(os.getenv('RANK') or '0'))
    self.net = nn.Sequential(nn.LazyLinear(3), nn.Tanh(), nn.Linear(3, 2))
    if arg[2] == 'dummy' then self.net(dpl.zeros({ 1, 4 })) end
  end
  function M:training_step(b) return F.cross_entropy(self.net(b[1]), b[2]) end
  function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
  dpl.manual_seed(1)
  local ds = dpl.data.TensorDataset(dpl.randn({ 16, 4 }), dpl.randint(1, 3, { 16 }))
  local m = M()
  local t = trainer{ strategy = 'ddp', max_steps = 2 }
  t:fit(m, dpl.data.DataLoader(ds, { batch_size = 4 }))
  print(('R%d %s'):format(t.global_rank, digest(m)))
elseif what == 'predict' then
  local M = dpl.LightningModule:extend('Pred')
  function M:__init() dpl.LightningModule.__init(self); self.l = nn.Linear(1, 1) end
  function M:predict_step(b) return b[1]:reshape(-1):tolist() end
  local ds = dpl.data.TensorDataset(dpl.arange(1, 12):reshape(11, 1))
  local t = trainer{ strategy = 'ddp' }
  local preds = t:predict(M(), dpl.data.DataLoader(ds, { batch_size = 2 }), { return_predictions = true })
  local s = {}
  for _, p in ipairs(preds or {}) do for _, v in ipairs(p) do s[#s + 1] = v end end
  print(('R%d predicted %s batches %s'):format(t.global_rank, table.concat(s, ','), tostring(t.num_predict_batches[1])))
elseif what == 'resume' then
  local mode, dir = arg[2], arg[3]
  local U = nn.utils
  local M = dpl.LightningModule:extend('Resume')
  function M:__init()
    dpl.LightningModule.__init(self)
    dpl.manual_seed(7)
    self.a = U.parametrizations.spectral_norm(nn.Linear(4, 6))
    self.b = U.weight_norm(nn.Linear(6, 6))
    self.c = U.parametrizations.orthogonal(nn.Linear(6, 6))
    self.d = nn.Linear(6, 3)
    U.prune.l1_unstructured(self.d, 'weight', 4)
    self.acc = tm.Accuracy({ task = 'multiclass', num_classes = 3 })
  end
  function M:forward(x) return self.d(F.tanh(self.c(F.tanh(self.b(F.tanh(self.a(x))))))) end
  function M:training_step(b)
    local out = self(b[1])
    self.acc(out, b[2])
    self:log('acc', self.acc, { on_epoch = true })
    return F.cross_entropy(out, b[2])
  end
  function M:configure_optimizers() return dpl.optim.Adam(self:parameters(), { lr = 0.01 }) end
  dpl.manual_seed(3)
  local ds = dpl.data.TensorDataset(dpl.randn({ 24, 4 }), dpl.randint(1, 4, { 24 }))
  dpl.seed_everything(5)
  local t = trainer{ strategy = 'ddp', max_epochs = mode == 'first' and 1 or 2 }
  local m = M()
  t:fit(m, dpl.data.DataLoader(ds, { batch_size = 3, shuffle = true }), nil,
    { ckpt_path = mode == 'resume' and (dir .. '/e1.ckpt') or nil })
  if mode == 'first' then t:save_checkpoint(dir .. '/e1.ckpt') end
  print(('R%d acc=%.6f %s'):format(t.global_rank, t.callback_metrics.acc, digest(m)))
end
