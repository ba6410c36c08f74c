-- fashion_mnist_cli.lua: an MLP on Fashion-MNIST driven by dpl.cli.LightningCLI — the
-- model, a data module, and nothing else: the command line (or a YAML config) sets the
-- Trainer, the model's and the data's constructor parameters, and picks the subcommand.
--
--   dplhost examples/fashion_mnist_cli.lua fit --trainer.max_epochs 3 --model.lr 0.05
--   dplhost examples/fashion_mnist_cli.lua fit --config cfg.yaml --data.batch_size 128
--   dplhost examples/fashion_mnist_cli.lua test --ckpt_path runs/.../checkpoints/x.ckpt
--   dplhost examples/fashion_mnist_cli.lua fit --print_config > cfg.yaml
--   dplhost examples/fashion_mnist_cli.lua --help ; ... fit --help
--   dplhost --nproc 2 examples/fashion_mnist_cli.lua fit --trainer.strategy ddp
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional

local MLP = dpl.LightningModule:extend('FashionMLP')

function MLP:__init(hidden, lr)
  dpl.LightningModule.__init(self)
  self:save_hyperparameters({ hidden = hidden or 256, lr = lr or 0.03 })
  self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, self.hparams.hidden), nn.ReLU(),
    nn.Linear(self.hparams.hidden, 10))
end

function MLP:forward(x) return self.net(x) end

function MLP:training_step(batch)
  local loss = F.cross_entropy(self(batch[1]), batch[2])
  self:log('train_loss', loss, { prog_bar = true })
  return loss
end

local function evaluate(self, batch, stage)
  local logits = self(batch[1])
  self:log(stage .. '_loss', F.cross_entropy(logits, batch[2]), { prog_bar = true, sync_dist = true })
  self:log(stage .. '_acc', logits:argmax(2):eq(batch[2]):sum():item() / batch[2]:size(1), { prog_bar = true, sync_dist = true })
end
function MLP:validation_step(batch) evaluate(self, batch, 'val') end
function MLP:test_step(batch) evaluate(self, batch, 'test') end
function MLP:predict_step(batch) return self(batch[1]):argmax(2) end

function MLP:configure_optimizers()
  return dpl.optim.SGD(self:parameters(), { lr = self.hparams.lr, momentum = 0.9 })
end

-- 55,000 training images, the last 5,000 for validation; the test set for test and predict
local FashionData = dpl.LightningDataModule:extend('FashionData')

function FashionData:__init(batch_size, root)
  dpl.LightningDataModule.__init(self)
  self.batch_size, self.root = batch_size or 64, root
  self:save_hyperparameters({ batch_size = self.batch_size })
end

function FashionData:setup(stage)
  if stage == 'fit' or stage == 'validate' then
    local all = dpl.datasets.FashionMNIST { root = self.root, train = true }
    self.train = dpl.data.Subset(all, dpl.data.range(1, 55000))
    self.val = dpl.data.Subset(all, dpl.data.range(55001, 60000))
  else
    self.test = dpl.datasets.FashionMNIST { root = self.root, train = false }
  end
end

function FashionData:train_dataloader()
  return dpl.data.DataLoader(self.train, { batch_size = self.batch_size, shuffle = true })
end
function FashionData:val_dataloader() return dpl.data.DataLoader(self.val, { batch_size = 1000 }) end
function FashionData:test_dataloader() return dpl.data.DataLoader(self.test, { batch_size = 1000 }) end
function FashionData:predict_dataloader() return dpl.data.DataLoader(self.test, { batch_size = 1000 }) end

dpl.cli.LightningCLI(MLP, FashionData, {
  trainer_defaults = { max_epochs = 5, default_root_dir = 'fashion_mnist_runs' },
  seed_everything_default = 0,
})
