-- fashion_mnist_gan.lua: a small GAN on Fashion-MNIST with manual optimization, ported from
-- Lightning 1.9's GAN examples as a user writes it. self.automatic_optimization = false; two
-- Adam optimizers returned by configure_optimizers (Lightning's `return opt_g, opt_d`);
-- training_step takes them from self:optimizers() and, for each network in turn,
-- toggle_optimizer, manual_backward, clip_gradients, step, zero_grad, untoggle_optimizer;
-- g_loss and d_loss logged (progress bar, CSV and TensorBoard loggers); at the end of every
-- training epoch (on_train_epoch_end) the generator turns a fixed noise batch into images,
-- written as a PNG grid into TensorBoard (logger.experiment:add_images) and as a tensor file
-- (samples/epoch=N.t7, read back with dpl.load).
--
--   dplhost examples/fashion_mnist_gan.lua [--max-epochs 10] [--limit-train-batches N]
--       [--batch 64] [--lr 0.0002] [--latent 64] [--clip 1.0] [--seed 7] [--root DIR]
--       [--default-root-dir gan_runs] [--enable-progress-bar false] [other Trainer flags]
--
-- Expected (the full run, 10 epochs of 60,000 images: ~1 minute on 2 cores): the losses stay
-- bounded, neither network wins: per epoch d_loss 0.31 rising to ~0.45 and g_loss 1.55-1.70
-- falling to ~1.45; the samples show shirts, trousers, sneakers and bags after a few epochs.
-- A quick run: --max-epochs 2 --limit-train-batches 10.
-- Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist).
local dpl = require 'dpl'
local nn, optim, F = dpl.nn, dpl.optim, dpl.nn.functional

local USAGE = 'usage: dplhost examples/fashion_mnist_gan.lua [Trainer flags] [--batch N] [--lr X]'
  .. ' [--latent N] [--clip X] [--seed N] [--root DIR]'

local function fail(msg)
  msg = tostring(msg):gsub('\nstack traceback:.*$', ''):gsub('\n.*$', '')
  io.stderr:write('fashion_mnist_gan.lua: ', msg, ' (--help lists the flags)\n')
  os.exit(2)
end

for _, a in ipairs({ ... }) do
  if a == '--help' or a == '-h' then
    io.stdout:write(USAGE, '\n\nTrains a GAN on Fashion-MNIST with manual optimization; samples a fixed noise batch',
      ' after each epoch.\n\n',
      '  --batch N     batch size (64)\n  --lr X        Adam learning rate of both networks (0.0002)\n',
      '  --latent N    size of the noise (64)\n  --clip X      gradient norm clipping of the discriminator (1.0)\n',
      '  --seed N      seed_everything (7)\n',
      '  --root DIR    the Fashion-MNIST IDX files (default: the system data set)\n',
      '  Trainer flags: --max-epochs 10 --limit-train-batches ... (Lightning 1.9\'s arguments)\n')
    os.exit(0)
  end
end

local ok_args, targs, rest = pcall(dpl.Trainer.parse_argv, { ... })
if not ok_args then fail(targs) end
local opts = { batch = 64, lr = 2e-4, latent = 64, clip = 1.0, seed = 7, root = false }
for i = 1, #rest, 2 do
  local k = rest[i]:match('^%-%-([%w_]+)$')
  if not k or opts[k] == nil then fail(("unknown flag '%s'"):format(rest[i])) end
  local v = rest[i + 1]
  if v == nil then fail(('--%s needs a value'):format(k)) end
  if k ~= 'root' then
    v = tonumber(v)
    if v == nil or ((k == 'batch' or k == 'latent' or k == 'seed') and v ~= math.floor(v)) or (k ~= 'seed' and v <= 0) then
      fail(("--%s: bad value '%s'"):format(k, rest[i + 1]))
    end
  end
  opts[k] = v
end
if targs.max_epochs == nil then targs.max_epochs = 10 end
if targs.default_root_dir == nil then targs.default_root_dir = 'gan_runs' end

dpl.seed_everything(opts.seed)

---------------------------------------------------------------- the networks

local Generator = nn.Module:extend('Generator')
function Generator:__init(latent)
  nn.Module.__init(self)
  local function block(n_in, n_out, normalize)
    local layers = { nn.Linear(n_in, n_out) }
    if normalize then layers[#layers + 1] = nn.BatchNorm1d(n_out, { eps = 0.8 }) end
    layers[#layers + 1] = nn.LeakyReLU(0.2)
    return unpack(layers)
  end
  local layers = {}
  for _, group in ipairs({ { block(latent, 128, false) }, { block(128, 256, true) }, { block(256, 512, true) } }) do
    for _, l in ipairs(group) do layers[#layers + 1] = l end
  end
  layers[#layers + 1] = nn.Linear(512, 28 * 28)
  layers[#layers + 1] = nn.Tanh()
  self.model = nn.Sequential(unpack(layers))
end
function Generator:forward(z)
  return self.model(z):view(z:size(1), 1, 28, 28)
end

local Discriminator = nn.Module:extend('Discriminator')
function Discriminator:__init()
  nn.Module.__init(self)
  self.model = nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 512), nn.LeakyReLU(0.2),
    nn.Linear(512, 256), nn.LeakyReLU(0.2), nn.Linear(256, 1), nn.Sigmoid())
end
function Discriminator:forward(img) return self.model(img) end

---------------------------------------------------------------- the LightningModule

local GAN = dpl.LightningModule:extend('GAN')

function GAN:__init(latent_dim, lr, b1, b2, clip)
  dpl.LightningModule.__init(self)
  self:save_hyperparameters()
  self.automatic_optimization = false
  self.generator = Generator(latent_dim)
  self.discriminator = Discriminator()
  -- the fixed noise whose samples are written after each epoch
  self.validation_z = dpl.randn(16, latent_dim)
end

function GAN:forward(z) return self.generator(z) end

local function adversarial_loss(y_hat, y) return F.binary_cross_entropy(y_hat, y) end

function GAN:training_step(batch, batch_idx)
  local imgs = batch[1] * 2 - 1 -- [0, 1] -> [-1, 1], the generator's tanh range
  local n = imgs:size(1)
  local optimizers = self:optimizers()
  local opt_g, opt_d = optimizers[1], optimizers[2]
  local z = dpl.randn(n, self.hparams.latent_dim):type_as(imgs)
  local valid = dpl.ones(n, 1):type_as(imgs)
  local fake = dpl.zeros(n, 1):type_as(imgs)

  -- the generator: make the discriminator call its images real
  self:toggle_optimizer(opt_g, 0)
  local generated = self(z)
  local g_loss = adversarial_loss(self.discriminator(generated), valid)
  self:manual_backward(g_loss)
  opt_g:step()
  opt_g:zero_grad()
  self:untoggle_optimizer(0)

  -- the discriminator: real images against the generated ones (detached)
  self:toggle_optimizer(opt_d, 1)
  local real_loss = adversarial_loss(self.discriminator(imgs), valid)
  local fake_loss = adversarial_loss(self.discriminator(generated:detach()), fake)
  local d_loss = (real_loss + fake_loss) / 2
  self:manual_backward(d_loss)
  self:clip_gradients(opt_d, { gradient_clip_val = self.hparams.clip, gradient_clip_algorithm = 'norm' })
  opt_d:step()
  opt_d:zero_grad()
  self:untoggle_optimizer(1)

  self:log_dict({ g_loss = g_loss, d_loss = d_loss }, { prog_bar = true, on_step = true, on_epoch = true })
end

function GAN:configure_optimizers()
  local lr, b1, b2 = self.hparams.lr, self.hparams.b1, self.hparams.b2
  local opt_g = optim.Adam(self.generator:parameters(), { lr = lr, betas = { b1, b2 } })
  local opt_d = optim.Adam(self.discriminator:parameters(), { lr = lr, betas = { b1, b2 } })
  return opt_g, opt_d
end

function GAN:on_train_epoch_end()
  local z = self.validation_z:type_as(self.generator.model[1].weight)
  self.generator:eval()
  local samples = dpl.no_grad(function() return self(z) end)
  self.generator:train()
  samples = (samples + 1) / 2 -- back to [0, 1]
  -- a grid of the 16 samples (8 per row) in TensorBoard's IMAGES tab
  self.logger.experiment:add_images('generated_images', samples, self.current_epoch)
  -- and the tensor itself, next to the logs
  if self.trainer.is_global_zero then
    local dir = self.logger.log_dir .. '/samples' -- (Lightning's property)
    os.execute("mkdir -p '" .. dir .. "'")
    dpl.save(samples, ('%s/epoch=%d.t7'):format(dir, self.current_epoch))
  end
end

---------------------------------------------------------------- trainer, data, fit

local loggers = {
  dpl.loggers.TensorBoardLogger{ save_dir = targs.default_root_dir, name = 'tb' },
  dpl.loggers.CSVLogger{ save_dir = targs.default_root_dir, name = 'csv' },
}
targs.logger = loggers
local ok_trainer, trainer = pcall(dpl.Trainer, targs)
if not ok_trainer then fail(trainer) end

local train = dpl.datasets.FashionMNIST{ root = opts.root or nil, train = true }
local loader = dpl.data.DataLoader(train, { batch_size = opts.batch, shuffle = true, drop_last = true })

local model = GAN(opts.latent, opts.lr, 0.5, 0.999, opts.clip)
trainer:fit(model, loader)

local m = trainer.logged_metrics
if m.g_loss_epoch then
  print(('epoch %d: g_loss %.3f, d_loss %.3f'):format(trainer.current_epoch - 1, m.g_loss_epoch, m.d_loss_epoch))
end
print(('samples: %s/samples/epoch=%d.t7; TensorBoard: %s'):format(loggers[1].log_dir, trainer.current_epoch - 1,
  loggers[1].log_dir))
