-- fashion_mnist_loop.lua: a plain training loop (no Trainer) on Fashion-MNIST.
--
--   dplhost examples/fashion_mnist_loop.lua [--model mlp|cnn|both] [--epochs 3] [--batch 64]
--       [--opt sgd|adam] [--lr 0.01] [--seed 0] [--limit N] [--threads 1] [--root DIR]
--
-- The recipe of the issue: SGD(lr 0.01, momentum 0.9), batch 64, 3 epochs; prints the
-- test accuracy after each epoch. --limit trains on the first N images (a quick run).
local dpl = require 'dpl'
local nn, optim, F = dpl.nn, dpl.optim, dpl.nn.functional

local args = { model = 'both', epochs = 3, batch = 64, opt = 'sgd', seed = 0, threads = 1 }
local USAGE = 'usage: dplhost examples/fashion_mnist_loop.lua [--model mlp|cnn|both] [--epochs N] [--batch N]'
  .. ' [--opt sgd|adam] [--lr X] [--seed N] [--limit N] [--threads N] [--root DIR]'
do
  -- a bad flag: one line on stderr, exit status 2 (as argparse)
  local function fail(fmt, ...)
    io.stderr:write('fashion_mnist_loop.lua: ', fmt:format(...), ' (--help lists the flags)\n')
    os.exit(2)
  end
  -- flag -> kind of value: a choice list, 'int' (> 0), 'int0' (>= 0), 'num' (> 0), 'dir'
  local kinds = { model = { mlp = true, cnn = true, both = true }, opt = { sgd = true, adam = true },
    epochs = 'int', batch = 'int', lr = 'num', seed = 'int0', limit = 'int', threads = 'int', root = 'dir' }
  local a = { ... }
  local i = 1
  while i <= #a do
    if a[i] == '--help' or a[i] == '-h' then io.stdout:write(USAGE, '\n'); os.exit(0) end
    local word = a[i]
    local k, v = word:match('^%-%-([%w_]+)=(.*)$')
    if not k then
      k = a[i]:match('^%-%-([%w_]+)$')
      v = a[i + 1]
      i = i + 1
    end
    if not k or kinds[k] == nil then fail("unknown flag '%s'", word) end
    if v == nil then fail('--%s needs a value', k) end
    local kind = kinds[k]
    if type(kind) == 'table' then
      if not kind[v] then
        local names = {}
        for n in pairs(kind) do names[#names + 1] = n end
        table.sort(names)
        fail("--%s must be one of %s, got '%s'", k, table.concat(names, ', '), v)
      end
    elseif kind ~= 'dir' then
      local x = tonumber(v)
      local int = kind == 'int' or kind == 'int0'
      if x == nil or (int and x ~= math.floor(x)) or (kind == 'int0' and x < 0) or (kind ~= 'int0' and x <= 0) then
        fail("--%s must be %s, got '%s'", k, kind == 'int0' and 'an integer >= 0' or (int and 'a positive integer'
          or 'a positive number'), v)
      end
      v = x
    end
    args[k] = v
    i = i + 1
  end
end
dpl.set_num_threads(args.threads)

local function mlp()
  return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
    nn.Linear(128, 10))
end
local function cnn()
  return nn.Sequential(
    nn.Conv2d(1, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 5), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(512, 10))
end

local t0 = os.clock()
local train = dpl.datasets.FashionMNIST { root = args.root, train = true }
local test = dpl.datasets.FashionMNIST { root = args.root, train = false }
if args.limit then
  train = dpl.data.TensorDataset(train.images:narrow(1, 1, args.limit), train.labels:narrow(1, 1, args.limit))
end
print(('data: %d train, %d test images (%.2f s)'):format(dpl.data.len(train), test.n, os.clock() - t0))

local function accuracy(model)
  model:eval()
  local correct = 0
  dpl.no_grad(function()
    for s = 1, test.n, 1000 do
      local len = math.min(1000, test.n - s + 1)
      local x = test.images:narrow(1, s, len)
      local y = test.labels:narrow(1, s, len)
      correct = correct + model(x):argmax(2):eq(y):sum():item()
    end
  end)
  model:train()
  return correct / test.n
end

local function run(name, make)
  dpl.manual_seed(args.seed)
  local model = make()
  local opt
  if args.opt == 'adam' then
    opt = optim.Adam(model:parameters(), { lr = args.lr or 1e-3 })
  else
    opt = optim.SGD(model:parameters(), { lr = args.lr or 0.01, momentum = 0.9 })
  end
  local loader = dpl.data.DataLoader(train, { batch_size = args.batch, shuffle = true, seed = args.seed })
  print(('%s: %d parameters, %s, batch %d'):format(name, model:num_parameters(), args.opt, args.batch))
  local acc
  for epoch = 0, args.epochs - 1 do
    loader:set_epoch(epoch)
    local t = os.time()
    local c0 = os.clock()
    local total, n = 0, 0
    for batch in loader:iter() do
      local x, y = batch[1], batch[2]
      local loss = F.cross_entropy(model(x), y)
      opt:zero_grad()
      loss:backward()
      opt:step()
      total, n = total + loss:item(), n + 1
    end
    local secs = os.clock() - c0
    acc = accuracy(model)
    print(('%s epoch %d: loss %.4f, test accuracy %.2f%%, %.0f samples/s'):format(name, epoch, total / n,
      acc * 100, dpl.data.len(train) / secs))
  end
  return acc
end

local results = {}
if args.model == 'mlp' or args.model == 'both' then results.mlp = run('mlp', mlp) end
if args.model == 'cnn' or args.model == 'both' then results.cnn = run('cnn', cnn) end
for k, v in pairs(results) do print(('final %s test accuracy: %.2f%%'):format(k, v * 100)) end
