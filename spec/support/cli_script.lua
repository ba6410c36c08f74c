-- cli_script.lua: a tiny model and data module driven by dpl.cli.LightningCLI, for
-- spec/cli_spec.lua. Run as `dplhost spec/support/cli_script.lua <subcommand> [flags]`.
-- Prints one "RESULT ..." line per fact the spec checks (rank 0 only). Environment:
-- CLI_RUN=0 (run=false: build and report the objects), CLI_NODATA=1 (no datamodule class),
-- CLI_OVERWRITE=1 (save_config_kwargs.overwrite), CLI_NOSAVE=1 (save_config_callback=false).
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional

local Tiny = dpl.LightningModule:extend('TinyModel')
function Tiny:__init(hidden, lr, name, opts)
  dpl.LightningModule.__init(self)
  hidden, lr, name = hidden or 4, lr or 0.1, name or 'tiny'
  self:save_hyperparameters({ hidden = hidden, lr = lr, name = name })
  self.opts = opts
  self.net = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 4))
end
function Tiny:forward(x) return self.net(x) end
function Tiny:training_step(b)
  local loss = F.cross_entropy(self(b[1]), b[2])
  self:log('train_loss', loss)
  return loss
end
function Tiny:validation_step(b) self:log('val_loss', F.cross_entropy(self(b[1]), b[2])) end
function Tiny:test_step(b) self:log('test_loss', F.cross_entropy(self(b[1]), b[2])) end
function Tiny:predict_step(b) return self(b[1]):argmax(2) end
function Tiny:configure_optimizers() return dpl.optim.SGD(self:parameters(), self.hparams.lr) end

local Data = dpl.LightningDataModule:extend('TinyData')
function Data:__init(batch_size, n)
  dpl.LightningDataModule.__init(self)
  self.batch_size, self.n = batch_size or 8, n or 64
  self:save_hyperparameters({ batch_size = self.batch_size })
end
function Data:setup()
  self.ds = self.ds or dpl.datasets.SyntheticClassification { n = self.n, features = 8, classes = 4, seed = 3 }
end
function Data:loader(shuffle) return dpl.data.DataLoader(self.ds, { batch_size = self.batch_size, shuffle = shuffle }) end
function Data:train_dataloader() return self:loader(true) end
function Data:val_dataloader() return self:loader(false) end
function Data:test_dataloader() return self:loader(false) end
function Data:predict_dataloader() return self:loader(false) end

local function env(k) return os.getenv(k) end
local cli = dpl.cli.LightningCLI(Tiny, env('CLI_NODATA') ~= '1' and Data or nil, {
  run = env('CLI_RUN') ~= '0',
  trainer_defaults = { enable_progress_bar = false, enable_model_summary = false },
  save_config_callback = env('CLI_NOSAVE') ~= '1',
  save_config_kwargs = env('CLI_OVERWRITE') == '1' and { overwrite = true } or nil,
})

if cli.trainer.is_global_zero then
  local m, t = cli.model, cli.trainer
  print(('RESULT model hidden=%s lr=%s name=%s opts=%s'):format(m.hparams.hidden, m.hparams.lr,
    tostring(m.hparams.name), m.opts and dpl.yaml.encode_inline(m.opts) or 'nil'))
  if cli.datamodule then print(('RESULT data batch_size=%d n=%d'):format(cli.datamodule.batch_size, cli.datamodule.n)) end
  print(('RESULT trainer max_epochs=%d global_step=%d world_size=%d log_dir=%s'):format(t.max_epochs, t.global_step,
    t.world_size, tostring(t.log_dir)))
  print(('RESULT subcommand=%s seed=%s'):format(tostring(cli.subcommand), tostring(cli.config.seed_everything)))
  local r = cli.result
  if cli.subcommand == 'validate' then print(('RESULT val_loss=%.4f'):format(r[1].val_loss)) end
  if cli.subcommand == 'test' then print(('RESULT test_loss=%.4f'):format(r[1].test_loss)) end
  if cli.subcommand == 'predict' then print(('RESULT predictions=%d'):format(#r)) end
  if cli.subcommand == 'tune' then print(('RESULT tuned lr_find=%s'):format(r.lr_find and 'yes' or 'no')) end
end
-- every rank: its seed and weights (the same on all ranks under ddp)
local sum = 0
for _, p in ipairs(cli.model:parameters()) do sum = sum + p:sum():item() end
print(('RESULT rank %d seed %s weights %.6f'):format(cli.trainer.global_rank, tostring(cli.config.seed_everything), sum))
