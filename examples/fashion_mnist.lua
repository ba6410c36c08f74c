-- fashion_mnist.lua: an MLP LightningModule on Fashion-MNIST (or a small CNN, or an LSTM
-- reading the image row by row: --model cnn|lstm), trained by dpl.Trainer with validation,
-- ModelCheckpoint, EarlyStopping, a CSV logger and the progress bar, then tested on the test
-- set with the best checkpoint. The data comes from a LightningDataModule (the splits and
-- their loaders).
--
--   dplhost examples/fashion_mnist.lua [Trainer flags: --max_epochs 10 --limit_train_batches 0.1
--       --strategy ddp --accelerator cpu --devices 2 ...] [--batch 64] [--lr 0.03] [--seed 0]
--       [--root DIR] [--hidden 256] [--model mlp|cnn|lstm] [--logger csv|tensorboard]
--       [--ckpt_path last|PATH]
--   dplhost --nproc 2 examples/fashion_mnist.lua --strategy ddp
--   dplhost --nproc 2 --max-restarts 3 examples/fashion_mnist.lua --strategy ddp --ckpt_path last
--   dplhost examples/fashion_mnist.lua --strategy ddp_spawn --accelerator cpu --devices 2
--
-- Data: the IDX files of Debian's dataset-fashion-mnist package
-- (/usr/share/datasets/fashion-mnist/). 55,000 training images, 5,000 for validation.
local dpl = require 'dpl'
local nn, optim, F = dpl.nn, dpl.optim, dpl.nn.functional

-- Trainer flags from the command line; the rest are this script's own
local defaults = { max_epochs = 10, default_root_dir = 'fashion_mnist_runs' }
local USAGE = 'usage: dplhost examples/fashion_mnist.lua [Trainer flags] [--batch N] [--lr X] [--seed N]'
  .. ' [--hidden N] [--model mlp|cnn|lstm] [--logger csv|tensorboard|false] [--root DIR] [--ckpt_path last|PATH]'

-- a bad flag: one line on stderr, exit status 2 (as argparse)
local function fail(msg)
  msg = tostring(msg):gsub('\nstack traceback:.*$', '')
  msg = msg:gsub('\n.*$', '')
  io.stderr:write('fashion_mnist.lua: ', msg, ' (--help lists the flags)\n')
  os.exit(2)
end

local function help()
  local names = {}
  for _, k in ipairs(require('dpl.trainer.args').order) do
    if k ~= 'callbacks' and k ~= 'logger' then names[#names + 1] = '--' .. k end
  end
  local lines, line = {}, ' '
  for _, n in ipairs(names) do
    if #line + #n + 1 > 96 then lines[#lines + 1] = line; line = ' ' end
    line = line .. ' ' .. n
  end
  lines[#lines + 1] = line
  io.stdout:write(USAGE, '\n\nTrains an MLP (or a CNN, an LSTM) on Fashion-MNIST with dpl.Trainer, then tests the best checkpoint.\n\n',
    'Script flags:\n',
    '  --batch N        batch size (64)\n  --lr X           SGD learning rate (0.03, 0.2 for lstm; cosine-annealed to 0 over max_epochs)\n',
    '  --seed N         seed (0)\n  --hidden N       hidden units (256)\n',
    '  --model KIND     mlp (default); cnn: two 3x3 conv blocks (BatchNorm, max pooling), then the\n',
    '                   hidden layer; lstm: an LSTM of --hidden units reading the 28 rows in turn\n',
    '  --logger KIND    csv (default), tensorboard, or false (no logger)\n',
    '  --root DIR       the Fashion-MNIST IDX files (default: the system data set)\n',
    '  --ckpt_path P    resume the fit from checkpoint P; last: from <default_root_dir>/checkpoints/last.ckpt\n',
    '                   when there is one (else a fresh start), where the checkpoints then go: a run\n',
    '                   restarted by dplhost --max-restarts, or run again, goes on where it stopped\n\n',
    'Trainer flags (--name value or --name=value, Lightning 1.9\'s arguments; defaults: --max_epochs 10',
    ' --default_root_dir fashion_mnist_runs):\n', table.concat(lines, '\n'), '\n')
  os.exit(0)
end

local argv, logger_kind = {}, 'csv'
do -- --logger csv|tensorboard|false is this script's (the Trainer's own --logger takes true/false)
  local a, i = { ... }, 1
  local kinds = { csv = 'csv', tensorboard = 'tensorboard', ['false'] = false, none = false, ['true'] = 'csv' }
  while i <= #a do
    if a[i] == '--help' or a[i] == '-h' then help() end
    local v = a[i]:match('^%-%-logger=(.*)$')
    if v == nil and a[i] == '--logger' then v = a[i + 1] or ''; i = i + 1 end
    if v ~= nil then
      if kinds[v] == nil then fail(("--logger must be csv, tensorboard or false, got '%s'"):format(v)) end
      logger_kind = kinds[v]
    else argv[#argv + 1] = a[i] end
    i = i + 1
  end
end
local ok_args, targs, rest = pcall(dpl.Trainer.parse_argv, argv)
if not ok_args then fail(targs) end
local opts = { batch = 64, lr = 0.03, seed = 0, hidden = 256, model = 'mlp', logger = logger_kind, root = nil,
  ckpt_path = nil }
local numeric = { batch = 'an integer', lr = 'a number', seed = 'an integer', hidden = 'an integer' }
local lr_given = false
for i = 1, #rest, 2 do
  local k = rest[i]:match('^%-%-([%w_]+)$')
  if not k or (opts[k] == nil and k ~= 'root' and k ~= 'ckpt_path') then fail(("unknown flag '%s'"):format(rest[i])) end
  if rest[i + 1] == nil then fail(('--%s needs a value'):format(k)) end
  local v = rest[i + 1]
  if numeric[k] then
    local x = tonumber(v)
    if x == nil or (numeric[k] == 'an integer' and x ~= math.floor(x)) or x <= 0 and k ~= 'seed' then
      fail(("--%s must be %s, got '%s'"):format(k, k == 'seed' and numeric[k] or ('a positive ' .. numeric[k]:gsub('^an? ', '')), v))
    end
    v = x
  end
  if k == 'ckpt_path' and v == '' then fail('--ckpt_path needs a path, or last') end
  if k == 'model' and v ~= 'mlp' and v ~= 'cnn' and v ~= 'lstm' then
    fail(("--model must be one of cnn, lstm, mlp, got '%s'"):format(v))
  end
  opts[k] = v
  if k == 'lr' then lr_given = true end
end
-- an LSTM learns faster with a larger step (0.2 reaches 68-70% in 200 batches, 0.03 ~49%)
if not lr_given and opts.model == 'lstm' then opts.lr = 0.2 end
for k, v in pairs(defaults) do if targs[k] == nil then targs[k] = v end end

---------------------------------------------------------------- the model

local MLP = dpl.LightningModule:extend('FashionMLP')

function MLP:__init(hidden, lr, kind)
  dpl.LightningModule.__init(self)
  self:save_hyperparameters({ hidden = hidden, lr = lr, batch_size = opts.batch, model = kind })
  self.kind = kind
  if kind == 'cnn' then
    self.net = nn.Sequential(nn.Unflatten(2, { 1, 28 }),
      nn.Conv2d(1, 32, 3, { padding = 'same' }), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
      nn.Conv2d(32, 64, 3, { padding = 'same' }), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
      nn.Flatten(), nn.Dropout(0.25), nn.Linear(64 * 7 * 7, hidden), nn.ReLU(), nn.Linear(hidden, 10))
  elseif kind == 'lstm' then
    self.rnn = nn.LSTM(28, hidden, { batch_first = true })
    self.head = nn.Linear(hidden, 10)
  else
    self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 128), nn.ReLU(),
      nn.Linear(128, 10))
  end
end

function MLP:forward(x)
  if self.kind == 'lstm' then -- [N, 28, 28]: 28 steps of one row each; the last hidden state decides
    local _, state = self.rnn(x:reshape(-1, 28, 28))
    return self.head(state[1][1])
  end
  return self.net(x:reshape(-1, 28, 28))
end

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
  local T = math.max(1, self.trainer.max_epochs)
  return { optimizer = opt, lr_scheduler = { scheduler = optim.lr_scheduler.CosineAnnealingLR(opt, { T_max = T }), interval = 'epoch' } }
end

---------------------------------------------------------------- the trainer
-- (built before the data sets: a bad Trainer flag is reported first)

dpl.manual_seed(opts.seed)
local root = targs.default_root_dir
if opts.logger == false then targs.logger = false
else
  targs.logger = opts.logger == 'tensorboard' and dpl.loggers.TensorBoardLogger{ save_dir = root }
    or dpl.loggers.CSVLogger{ save_dir = root }
end
targs.callbacks = {
  -- (with --ckpt_path, in one directory: a fresh Trainer looks for last.ckpt there; without a
  -- dirpath it would look in the logger's next version, which the previous run did not use)
  dpl.callbacks.ModelCheckpoint{ monitor = 'val_loss', mode = 'min', save_top_k = 1, save_last = true,
    filename = '{epoch}-{val_loss:.3f}-{val_acc:.3f}', dirpath = opts.ckpt_path and (root .. '/checkpoints') or nil },
  dpl.callbacks.EarlyStopping{ monitor = 'val_loss', patience = 3 },
}
local ok_trainer, trainer = pcall(dpl.Trainer, targs) -- a bad Trainer flag: one line, exit 2
if not ok_trainer then fail(trainer) end

---------------------------------------------------------------- data

-- Lightning's LightningDataModule: the splits and loaders in one place. setup runs in every
-- process (each rank of ddp), once per stage; the images are read on first use, uint8, and
-- made floats per batch; the test set is not touched before trainer:test.
local FashionData = dpl.LightningDataModule:extend('FashionMNISTData')

function FashionData:__init(root, batch_size, seed)
  dpl.LightningDataModule.__init(self)
  self.root, self.batch_size, self.seed = root, batch_size, seed
end

function FashionData:setup(stage)
  if stage == 'fit' and not self.train then
    local all = dpl.datasets.FashionMNIST { root = self.root, train = true }
    local n_val = 5000
    local n_train = dpl.data.len(all) - n_val
    self.train = dpl.data.Subset(all, dpl.data.range(1, n_train))
    self.val = dpl.data.Subset(all, dpl.data.range(n_train + 1, n_train + n_val))
  elseif stage == 'test' and not self.test then
    self.test = dpl.datasets.FashionMNIST { root = self.root, train = false }
  end
end

function FashionData:train_dataloader()
  return dpl.data.DataLoader(self.train, { batch_size = self.batch_size, shuffle = true, seed = self.seed })
end
function FashionData:val_dataloader() return dpl.data.DataLoader(self.val, { batch_size = 1000 }) end
function FashionData:test_dataloader() return dpl.data.DataLoader(self.test, { batch_size = 1000 }) end

---------------------------------------------------------------- the run

local model = MLP(opts.hidden, opts.lr, opts.model)
local datamodule = FashionData(opts.root, opts.batch, opts.seed)
-- --auto_lr_find / --auto_scale_batch_size: Lightning applies them only in trainer.tune(),
-- which a script calls itself (the lr found goes into hparams.lr, the batch size into the
-- datamodule's batch_size)
if trainer.auto_lr_find or trainer.auto_scale_batch_size then
  trainer:tune(model, datamodule)
  if trainer.is_global_zero then
    print(('tuned: lr %s, batch size %s'):format(tostring(model.hparams.lr), tostring(datamodule.batch_size)))
  end
end
trainer:fit(model, datamodule, nil, { ckpt_path = opts.ckpt_path })
if trainer.is_global_zero and not trainer.fast_dev_run then
  print(('best checkpoint: %s (val_loss %s)'):format(trainer.checkpoint_callback.best_model_path,
    tostring(trainer.checkpoint_callback.best_model_score)))
end
-- (a fast_dev_run writes no checkpoint: it tests the weights as they are, as Lightning asks)
local ckpt = 'best'
if trainer.fast_dev_run then ckpt = nil end
local results = trainer:test(model, datamodule, { ckpt_path = ckpt })
if trainer.is_global_zero and results[1] then
  print(('test accuracy: %.2f%%'):format(100 * results[1].test_acc))
end
