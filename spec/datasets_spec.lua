-- datasets_spec.lua: datasets.FashionMNIST on Debian's files (shapes, ranges, labels,
-- get/get_batch, the DataLoader fast path), clear errors for missing/wrong/truncated
-- files, and a few hundred CNN/MLP steps on a subset that beat chance.
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local datasets = dpl.datasets

local root = '/usr/share/datasets/fashion-mnist'

describe('datasets.FashionMNIST', function()
  local test
  setup(function() test = datasets.FashionMNIST { train = false } end)

  it('reads the test split: float images in [0, 1] shaped [N, 1, 28, 28], 1-based int64 labels', function()
    assert.are.equal(10000, dpl.data.len(test))
    assert.are.same({ 10000, 1, 28, 28 }, test.images:size())
    assert.are.equal('float32', test.images.dtype)
    assert.are.equal(0, test.images:min():item())
    assert.are.equal(1, test.images:max():item())
    assert.are.equal('int64', test.labels.dtype)
    assert.are.same({ 10, 3, 2 }, test.labels:narrow(1, 1, 3):totable()) -- raw 9 2 1
    for c = 1, 10 do assert.are.equal(1000, test.labels:eq(c):sum():item()) end
  end)

  it('get(i) and get_batch(indices); the DataLoader uses the fast path', function()
    local item = test:get(2)
    assert.are.same({ 1, 28, 28 }, item[1]:size())
    assert.are.equal(3, item[2])
    local b = test:get_batch({ 1, 2, 3 })
    assert.are.same({ 3, 1, 28, 28 }, b[1]:size())
    assert.are.same({ 10, 3, 2 }, b[2]:totable())
    local loader = dpl.data.DataLoader(test, { batch_size = 256 })
    assert.are.equal(40, #loader)
    local batch = loader:iter()()
    assert.are.same({ 256, 1, 28, 28 }, batch[1]:size())
    assert.has_error(function() test:get(10001) end)
  end)

  it('the train split has 60000 images', function()
    local hd = require('ffi').new('dpl_idx_header')
    dpl.check(dpl.C.dpl_idx_read_header(root .. '/train-images-idx3-ubyte.gz', hd))
    assert.are.equal(60000, tonumber(hd.dims[0]))
  end)

  it('missing, wrong and truncated files are clear errors', function()
    local dir = h.tmpname('-fmnist')
    os.execute('mkdir -p ' .. h.q(dir))
    local ok, e = pcall(datasets.FashionMNIST, { root = dir, train = false })
    assert.is_false(ok)
    assert.truthy(tostring(e):find('t10k%-images%-idx3%-ubyte%(.gz%).-not found under'))
    -- labels file given as the images file: wrong number of dims
    os.execute(('cp %s/t10k-labels-idx1-ubyte.gz %s/t10k-images-idx3-ubyte.gz'):format(root, h.q(dir)))
    os.execute(('cp %s/t10k-labels-idx1-ubyte.gz %s/'):format(root, h.q(dir)))
    ok, e = pcall(datasets.FashionMNIST, { root = dir, train = false })
    assert.is_false(ok)
    assert.truthy(tostring(e):find('expected 3 dims, the file has 1'))
    -- truncated labels (plain file, cut short)
    os.execute(('rm -f %s/*; zcat %s/t10k-images-idx3-ubyte.gz | head -c 100000 > %s/t10k-images-idx3-ubyte')
      :format(h.q(dir), root, h.q(dir)))
    os.execute(('cp %s/t10k-labels-idx1-ubyte.gz %s/'):format(root, h.q(dir)))
    ok, e = pcall(datasets.FashionMNIST, { root = dir, train = false })
    assert.is_false(ok)
    assert.truthy(tostring(e):find('FashionMNIST: '))
    assert.truthy(tostring(e):lower():find('truncated'))
    os.execute('rm -rf ' .. h.q(dir))
  end)

  it('a small CNN trained for 150 steps on a subset beats chance by far', function()
    dpl.manual_seed(0)
    local nn, F = dpl.nn, dpl.nn.functional
    local model = nn.Sequential(nn.Conv2d(1, 8, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 12 * 12, 10))
    local opt = dpl.optim.SGD(model:parameters(), { lr = 0.05, momentum = 0.9 })
    local train = dpl.data.TensorDataset(test.images:narrow(1, 1, 4800), test.labels:narrow(1, 1, 4800))
    local loader = dpl.data.DataLoader(train, { batch_size = 32, shuffle = true, seed = 0 })
    for batch in loader:iter() do
      local loss = F.cross_entropy(model(batch[1]), batch[2])
      opt:zero_grad()
      loss:backward()
      opt:step()
    end
    model:eval()
    local x, y = test.images:narrow(1, 9001, 1000), test.labels:narrow(1, 9001, 1000)
    local acc = dpl.no_grad(function() return model(x):argmax(2):eq(y):double():mean():item() end)
    assert.is_true(acc > 0.6, 'held-out accuracy ' .. acc)
  end)
end)
