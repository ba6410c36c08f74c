-- fashion_mnist.lua: an MLP LightningModule on Fashion-MNIST, trained by dpl.Trainer
-- with validation, ModelCheckpoint, EarlyStopping, a CSV logger and the progress bar,
-- then tested on the test set with the best checkpoint.
--
--   dplhost examples/fashion_mnist.lua [Trainer flags: --max_epochs 10 --limit_train_batches 0.1
--       --strategy ddp --accelerator cpu --devices 2 ...] [--batch 64] [--lr 0.01] [--seed 0]
--       [--root DIR] [--hidden 256] [--logger csv|tensorboard]
--   dplhost --nproc 2 examples/fashion_mnist.lua --strategy ddp
--   dplhost examples/fashion_mnist.lua --strategy ddp_spawn --accelerator cpu --devices 2
--
-- Data: the IDX files of Debian's dataset-fashion-mnist package
-- (/usr/share/datasets/fashion-mnist/). 55,000 training images, 5,000 for validation.
local dpl = require 'dpl'
local nn, optim, F = dpl.nn, dpl.optim, dpl.nn.functional

-- Trainer flags from the command line; the rest are this script's own
local defaults = { max_epochs = 10, default_root_dir = 'fashion_mnist_runs' }
local argv, logger_kind = {}, 'csv'
do -- --logger csv|tensorboard is this script's (the Trainer's own --logger takes true/false)
  local a, i = { ... }, 1
  while i <= #a do
    local v = a[i]:match('^%-%-logger=(.*)$')
    if v then logger_kind = v
    elseif a[i] == '--logger' and (a[i + 1] == 'csv' or a[i + 1] == 'tensorboard') then logger_kind = a[i + 1]; i = i + 1
    else argv[#argv + 1] = a[i] end
    i = i + 1
  end
end
local targs, rest = dpl.Trainer.parse_argv(argv)
local opts = { batch = 64, lr = 0.01, seed = 0, hidden = 256, logger = logger_kind, root = nil }
for i = 1, #rest, 2 do
  local k = rest[i]:match('^%-%-([%w_]+)$')
  if not k or rest[i + 1] == nil or opts[k] == nil and k ~= 'root' then
    io.stderr:write('usage: fashion_mnist.lua [Trainer flags] [--batch N] [--lr X] [--seed N] [--hidden N]'
      .. ' [--logger csv|tensorboard] [--root DIR]\n')
    os.exit(2)
  end
  opts[k] = tonumber(rest[i + 1]) or rest[i + 1]
end
for k, v in pairs(defaults) do if targs[k] == nil then targs[k] = v end end

---------------------------------------------------------------- the model

local MLP = dpl.LightningModule:extend('FashionMLP')

function MLP:__init(hidden, lr)
  dpl.LightningModule.__init(self)
  self:save_hyperparameters({ hidden = hidden, lr = lr, batch_size = opts.batch })
  self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 128), nn.ReLU(),
    nn.Linear(128, 10))
end

function MLP:forward(x) return self.net(x) end

function MLP:training_step(batch)
  local loss = F.cross_entropy(self(batch[1]), batch[2])
  self:log('train_loss', loss, { prog_bar = true })
  return loss
end

local function evaluate(self, batch, stage)
  local logits = self(batch[1])
  local loss = F.cross_entropy(logits, batch[2])
  local acc = logits:argmax(2):eq(batch[2]):sum():item() / batch[2]:size(1)
  self:log(stage .. '_loss', loss, { prog_bar = true, sync_dist = true })
  self:log(stage .. '_acc', acc, { prog_bar = true, sync_dist = true })
end

-- (the Trainer runs evaluation without gradient recording)
function MLP:validation_step(batch) evaluate(self, batch, 'val') end
function MLP:test_step(batch) evaluate(self, batch, 'test') end

function MLP:configure_optimizers()
  local opt = optim.SGD(self:parameters(), { lr = self.hparams.lr, momentum = 0.9 })
  return opt
end

---------------------------------------------------------------- data

-- (the images are read on first use, uint8, and made floats per batch; the test set is not
-- touched before trainer:test)
local train_all = dpl.datasets.FashionMNIST { root = opts.root, train = true }
local test = dpl.datasets.FashionMNIST { root = opts.root, train = false }
local n_val = 5000
local n_train = dpl.data.len(train_all) - n_val
local train = dpl.data.Subset(train_all, dpl.data.range(1, n_train))
local val = dpl.data.Subset(train_all, dpl.data.range(n_train + 1, n_train + n_val))
local train_loader = dpl.data.DataLoader(train, { batch_size = opts.batch, shuffle = true, seed = opts.seed })
local val_loader = dpl.data.DataLoader(val, { batch_size = 1000 })
local test_loader = dpl.data.DataLoader(test, { batch_size = 1000 })

---------------------------------------------------------------- the run

dpl.manual_seed(opts.seed)
local root = targs.default_root_dir
targs.logger = opts.logger == 'tensorboard' and dpl.loggers.TensorBoardLogger{ save_dir = root }
  or dpl.loggers.CSVLogger{ save_dir = root }
targs.callbacks = {
  dpl.callbacks.ModelCheckpoint{ monitor = 'val_loss', mode = 'min', save_top_k = 1, save_last = true,
    filename = '{epoch}-{val_loss:.3f}-{val_acc:.3f}' },
  dpl.callbacks.EarlyStopping{ monitor = 'val_loss', patience = 3 },
}
local trainer = dpl.Trainer(targs)
local model = MLP(opts.hidden, opts.lr)
trainer:fit(model, train_loader, val_loader)
if trainer.is_global_zero then
  print(('best checkpoint: %s (val_loss %s)'):format(trainer.checkpoint_callback.best_model_path,
    tostring(trainer.checkpoint_callback.best_model_score)))
end
local results = trainer:test(model, test_loader, { ckpt_path = 'best' })
if trainer.is_global_zero and results[1] then
  print(('test accuracy: %.2f%%'):format(100 * results[1].test_acc))
end
