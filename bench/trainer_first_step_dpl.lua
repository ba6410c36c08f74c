-- trainer_first_step_dpl.lua: the set-up of examples/fashion_mnist.lua (data, MLP,
-- CSV logger, ModelCheckpoint, EarlyStopping, progress bar) timed up to the end of the
-- first optimizer step; prints the data-loading and the Trainer shares. Times are
-- from the script's start (the host's own start-up is ~1 ms, bench/startup.sh).
local C = require('dpl.capi').C
local t0 = C.dpl_clock()
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local train_all = dpl.datasets.FashionMNIST { train = true }
local n_train = dpl.data.len(train_all) - 5000
local train = dpl.data.TensorDataset(train_all.images:narrow(1, 1, n_train), train_all.labels:narrow(1, 1, n_train))
local loader = dpl.data.DataLoader(train, { batch_size = 64, shuffle = true })
local t_data = C.dpl_clock()

local MLP = dpl.LightningModule:extend('MLP')
function MLP:__init()
  dpl.LightningModule.__init(self)
  self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
end
function MLP:parameters() return self.net:parameters() end
function MLP:forward(x) return self.net(x) end
function MLP:training_step(batch)
  local loss = F.cross_entropy(self(batch[1]), batch[2])
  self:log('train_loss', loss, { prog_bar = true })
  return loss
end
function MLP:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.01, momentum = 0.9 }) end
local t_step
function MLP:on_train_batch_end() if not t_step then t_step = C.dpl_clock(); self.trainer.should_stop = true end end

local dir = os.tmpname(); os.remove(dir)
local trainer = dpl.Trainer{ max_epochs = 1, default_root_dir = dir, logger = dpl.loggers.CSVLogger(dir),
  enable_model_summary = false, callbacks = { dpl.callbacks.ModelCheckpoint{ monitor = 'train_loss' },
  dpl.callbacks.ProgressBar{ stream = io.open('/dev/null', 'w'), tty = false } } }
trainer:fit(MLP(), loader)
os.execute('rm -rf ' .. dir)
print(('%.1f %.1f'):format((t_data - t0) * 1e3, (t_step - t_data) * 1e3))
