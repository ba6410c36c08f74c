-- fashion_mnist_autoencoder.lua: Lightning's LitAutoEncoder on Fashion-MNIST, ported as a
-- Lightning 1.9 user writes it. An encoder (784 -> 128 -> latent) and a decoder (latent -> 128
-- -> 784, sigmoid) passed to the LightningModule's constructor; training_step / validation_step /
-- test_step with self:log; Adam; ModelCheckpoint on val_loss; then the best checkpoint loaded
-- with LitAutoEncoder:load_from_checkpoint (the encoder and decoder passed again, as Lightning
-- asks for modules left out of save_hyperparameters), a few test images encoded with it in
-- eval mode under no_grad, and trainer:predict running predict_step (the latent codes) over a
-- few test batches.
--
--   dplhost examples/fashion_mnist_autoencoder.lua [--max-epochs 10] [--limit-train-batches N]
--       [--limit-val-batches N] [--limit-test-batches N] [--limit-predict-batches 2]
--       [--batch 128] [--lr 0.001] [--latent 16] [--seed 42] [--root DIR]
--       [--default-root-dir autoencoder_runs] [--precision 32|bf16-mixed] [--enable-progress-bar false]
--
-- Any Trainer flag is accepted (Lightning 1.9's names, dashes or underscores).
-- Expected (the full run, 10 epochs of 55,000 images: ~5 s on 2 cores): val_loss (per-pixel
-- MSE) 0.169 after one batch, 0.022 after the first epoch, 0.0133 after the tenth (the best
-- checkpoint); test_loss of the reloaded best checkpoint 0.0134. A quick run:
-- --max-epochs 1 --limit-train-batches 20 --limit-val-batches 2 --limit-test-batches 2.
-- Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist), 55,000/5,000/10,000.
local dpl = require 'dpl'
local nn, optim, F = dpl.nn, dpl.optim, dpl.nn.functional

local USAGE = 'usage: dplhost examples/fashion_mnist_autoencoder.lua [Trainer flags] [--batch N] [--lr X]'
  .. ' [--latent N] [--seed N] [--root DIR]'

local function fail(msg)
  msg = tostring(msg):gsub('\nstack traceback:.*$', ''):gsub('\n.*$', '')
  io.stderr:write('fashion_mnist_autoencoder.lua: ', msg, ' (--help lists the flags)\n')
  os.exit(2)
end

for _, a in ipairs({ ... }) do
  if a == '--help' or a == '-h' then
    io.stdout:write(USAGE, '\n\nTrains an autoencoder on Fashion-MNIST, reloads the best checkpoint and encodes images.\n\n',
      '  --batch N     batch size (128)\n  --lr X        Adam learning rate (0.001)\n',
      '  --latent N    size of the code (16)\n  --seed N      seed_everything (42)\n',
      '  --root DIR    the Fashion-MNIST IDX files (default: the system data set)\n',
      '  Trainer flags: --max-epochs 10 --limit-train-batches ... (Lightning 1.9\'s arguments)\n')
    os.exit(0)
  end
end

local ok_args, targs, rest = pcall(dpl.Trainer.parse_argv, { ... })
if not ok_args then fail(targs) end
local opts = { batch = 128, lr = 1e-3, latent = 16, seed = 42, root = false }
for i = 1, #rest, 2 do
  local k = rest[i]:match('^%-%-([%w_]+)$')
  if not k or opts[k] == nil then fail(("unknown flag '%s'"):format(rest[i])) end
  local v = rest[i + 1]
  if v == nil then fail(('--%s needs a value'):format(k)) end
  if k ~= 'root' then
    v = tonumber(v)
    if v == nil or (k ~= 'lr' and v ~= math.floor(v)) or (k ~= 'seed' and v <= 0) then
      fail(("--%s: bad value '%s'"):format(k, rest[i + 1]))
    end
  end
  opts[k] = v
end
if targs.max_epochs == nil then targs.max_epochs = 10 end
if targs.default_root_dir == nil then targs.default_root_dir = 'autoencoder_runs' end
if targs.limit_predict_batches == nil then targs.limit_predict_batches = 2 end

dpl.seed_everything(opts.seed)

---------------------------------------------------------------- the model (Lightning's LitAutoEncoder)

local function Encoder(latent) return nn.Sequential(nn.Linear(28 * 28, 128), nn.ReLU(), nn.Linear(128, latent)) end
local function Decoder(latent)
  return nn.Sequential(nn.Linear(latent, 128), nn.ReLU(), nn.Linear(128, 28 * 28), nn.Sigmoid())
end

local LitAutoEncoder = dpl.LightningModule:extend('LitAutoEncoder')

function LitAutoEncoder:__init(encoder, decoder, lr)
  dpl.LightningModule.__init(self)
  -- the modules are not hyper-parameters: load_from_checkpoint is given them again
  self:save_hyperparameters(nil, { ignore = { 'encoder', 'decoder' } })
  self.encoder = encoder
  self.decoder = decoder
end

function LitAutoEncoder:forward(x) -- the code of a batch of images
  return self.encoder(x:view(x:size(1), -1))
end

function LitAutoEncoder:_shared_step(batch)
  local x = batch[1]
  x = x:view(x:size(1), -1)
  local x_hat = self.decoder(self.encoder(x))
  return F.mse_loss(x_hat, x)
end

function LitAutoEncoder:training_step(batch, batch_idx)
  local loss = self:_shared_step(batch)
  self:log('train_loss', loss, { prog_bar = true })
  return loss
end

function LitAutoEncoder:validation_step(batch, batch_idx)
  self:log('val_loss', self:_shared_step(batch), { prog_bar = true })
end

function LitAutoEncoder:test_step(batch, batch_idx)
  self:log('test_loss', self:_shared_step(batch))
end

function LitAutoEncoder:predict_step(batch, batch_idx, dataloader_idx)
  return self(batch[1])
end

function LitAutoEncoder:configure_optimizers()
  return optim.Adam(self:parameters(), { lr = self.hparams.lr })
end

---------------------------------------------------------------- trainer and data

local checkpoint = dpl.callbacks.ModelCheckpoint{ monitor = 'val_loss', mode = 'min', save_top_k = 1,
  filename = 'autoencoder-{epoch:02d}-{val_loss:.4f}' }
targs.callbacks = { checkpoint }
local ok_trainer, trainer = pcall(dpl.Trainer, targs)
if not ok_trainer then fail(trainer) end

local root = opts.root or nil
local train_set = dpl.datasets.FashionMNIST{ root = root, train = true }
local train, val = unpack(dpl.data.random_split(train_set, { 55000, 5000 },
  dpl.data.Generator():manual_seed(42)))
local test = dpl.datasets.FashionMNIST{ root = root, train = false }
local train_loader = dpl.data.DataLoader(train, { batch_size = opts.batch, shuffle = true })
local val_loader = dpl.data.DataLoader(val, { batch_size = 500 })
local test_loader = dpl.data.DataLoader(test, { batch_size = 500 })

---------------------------------------------------------------- fit, reload the best, use it

local autoencoder = LitAutoEncoder(Encoder(opts.latent), Decoder(opts.latent), opts.lr)
trainer:fit(autoencoder, train_loader, val_loader)

local best = checkpoint.best_model_path
if trainer.fast_dev_run then best = '' end
if best ~= '' then
  print(('best checkpoint: %s (val_loss %.4f)'):format(best, checkpoint.best_model_score))
  local model = LitAutoEncoder:load_from_checkpoint(best,
    { encoder = Encoder(opts.latent), decoder = Decoder(opts.latent) })
  print(('loaded: lr %s, latent %d'):format(tostring(model.hparams.lr), model.encoder[3].out_features))
  -- encode a few test images with the loaded model, as a user would after training
  model:eval()
  local x = test_loader.dataset:get_batch({ 1, 2, 3, 4 })[1]
  local codes, err = dpl.no_grad(function()
    local z = model(x)
    local x_hat = model.decoder(z)
    return z, F.mse_loss(x_hat, x:view(4, -1)):item()
  end)
  print(('encoded %d images: codes %s, requires_grad %s, reconstruction mse %.4f'):format(codes:size(1),
    table.concat(codes:size(), 'x'), tostring(codes.requires_grad), err))
  local results = trainer:test(model, test_loader, { verbose = false })
  print(('test_loss of the best checkpoint: %.4f'):format(results[1].test_loss))
  local predictions = trainer:predict(model, test_loader)
  local n = 0
  for _, p in ipairs(predictions) do n = n + p:size(1) end
  print(('predict: %d batches, %d codes of size %d'):format(#predictions, n, predictions[1]:size(2)))
end
