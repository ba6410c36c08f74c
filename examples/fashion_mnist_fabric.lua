-- fashion_mnist_fabric.lua: an MLP on Fashion-MNIST in a hand-written loop with dpl.Fabric
-- (devices, distribution and precision from Fabric; the loop is yours).
--
--   dplhost examples/fashion_mnist_fabric.lua [--epochs 1] [--max_steps N] [--batch 64] [--lr 0.03]
--       [--precision 32|bf16-mixed] [--strategy ddp|ddp_spawn] [--devices N] [--seed 0]
--       [--logdir DIR] [--ckpt PATH]
--   dplhost --nproc 2 examples/fashion_mnist_fabric.lua --strategy ddp     # two ranks
--   dplhost examples/fashion_mnist_fabric.lua --strategy ddp_spawn --devices 2
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional

local args = { epochs = 1, batch = 64, lr = 0.03, precision = '32', seed = 0 }
local NUM = { epochs = true, max_steps = true, batch = true, lr = true, devices = true, seed = true }
local KNOWN = { precision = true, strategy = true, logdir = true, ckpt = true }
do
  local a, i = { ... }, 1
  while i <= #a do
    local k, v = a[i]:match('^%-%-([%w_]+)$'), a[i + 1]
    if a[i] == '--help' then print('see the top of examples/fashion_mnist_fabric.lua') os.exit(0) end
    if not k or not (NUM[k] or KNOWN[k]) or v == nil then
      io.stderr:write(("fashion_mnist_fabric.lua: bad flag '%s'\n"):format(a[i])) os.exit(2)
    end
    if NUM[k] then
      v = tonumber(v)
      if not v or v <= 0 and k ~= 'seed' then io.stderr:write(('fashion_mnist_fabric.lua: --%s needs a number > 0\n'):format(k)) os.exit(2) end
    end
    args[k], i = v, i + 2
  end
end

local function main(fabric)
  fabric:seed_everything(args.seed)
  local model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
    nn.Linear(128, 10))
  local opt = dpl.optim.SGD(model:parameters(), { lr = args.lr, momentum = 0.9 })
  model, opt = fabric:setup(model, opt)
  local train = dpl.datasets.FashionMNIST{ train = true }
  local test = dpl.datasets.FashionMNIST{ train = false }
  -- each rank gets its share of the batches (a DistributedSampler is put in)
  local train_loader, test_loader = fabric:setup_dataloaders(
    dpl.data.DataLoader(train, { batch_size = args.batch, shuffle = true }),
    dpl.data.DataLoader(test, { batch_size = 1000 }))

  local step, t0 = 0, os.clock()
  for epoch = 1, args.epochs do
    model:train()
    for batch in train_loader:iter() do
      local loss = F.cross_entropy(model(batch[1]), batch[2])
      opt:zero_grad()
      fabric:backward(loss)
      opt:step()
      step = step + 1
      if step % 50 == 0 then
        fabric:log('train_loss', loss, step)
        fabric:print(('epoch %d step %d loss %.4f'):format(epoch, step, loss:item()))
      end
      if args.max_steps and step >= args.max_steps then break end
    end
    -- accuracy over the whole test set: each rank counts its share, the counts are summed
    model:eval()
    local correct, seen = 0, 0
    dpl.no_grad(function()
      for batch in test_loader:iter() do
        correct = correct + model(batch[1]):argmax(2):eq(batch[2]):sum():item()
        seen = seen + batch[2]:numel()
      end
    end)
    local tot = fabric:all_reduce(dpl.tensor({ correct, seen }, { dtype = 'float64' }), { reduce_op = 'sum' }):tolist()
    local acc = tot[1] / tot[2]
    fabric:log('test_acc', acc, step)
    fabric:print(('epoch %d: test accuracy %.2f%% (%d steps per rank, %d ranks, %.1f s)'):format(epoch, 100 * acc,
      step, fabric.world_size, os.clock() - t0))
    if args.max_steps and step >= args.max_steps then break end
  end
  if args.ckpt then fabric:save(args.ckpt, { model = model, optimizer = opt, step = step }) end
  if fabric.logger and fabric.is_global_zero then fabric.logger:finalize('success') end
  return step
end

local fabric = dpl.Fabric{ strategy = args.strategy, devices = args.devices, accelerator = 'cpu',
  precision = args.precision, loggers = args.logdir and dpl.loggers.CSVLogger(args.logdir) or nil }
fabric:launch(main)
