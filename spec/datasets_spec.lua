-- datasets_spec.lua: datasets.FashionMNIST on Debian's files (shapes, ranges, labels,
-- get/get_batch, the DataLoader fast path), clear errors for missing/wrong/truncated
-- files, lazy image loading with per-batch conversion, the decompressed-file cache
-- (written, reused, invalidated, skipped when not writable), data.Subset, and a few
-- hundred CNN/MLP steps on a subset that beat chance.
local ffi = require 'ffi'
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local datasets = dpl.datasets
local C = dpl.C

local root = '/usr/share/datasets/fashion-mnist'

-- this spec's own cache directory (never the user's ~/.cache)
local old_cache_env = os.getenv('DPL_DATA_CACHE')
local cache_root = h.tmpname('-dplcache')
local function setenv(v) C.dpl_proc_setenv('DPL_DATA_CACHE', v or '') end
setenv(cache_root)

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

  it('loads the images on first use; batches equal the whole-set float conversion bitwise', function()
    local ds = datasets.FashionMNIST { train = false }
    assert.is_nil(rawget(ds, '_raw'))
    assert.are.equal(10000, dpl.data.len(ds))
    local idx = { 1, 10000, 17, 5000, 17 }
    local b = ds:get_batch(idx)
    assert.is_not_nil(rawget(ds, '_raw'))
    assert.are.same({ 5, 1, 28, 28 }, b[1]:size())
    assert.are.equal('float32', b[1].dtype)
    local whole = test.images:index_select(1, dpl.tensor(idx, { dtype = 'int64' }))
    assert.is_true(b[1]:eq(whole):all():item())
    assert.are.same(test.labels:index_select(1, dpl.tensor(idx, { dtype = 'int64' })):totable(), b[2]:totable())
    -- the tensor-index path, get(i) and the uint8 images
    local b2 = ds:get_batch(dpl.tensor(idx, { dtype = 'int64' }))
    assert.is_true(b2[1]:eq(whole):all():item())
    assert.is_true(ds:get(17)[1]:eq(test.images[17]):all():item())
    assert.are.same({ 10000, 28, 28 }, ds.raw_images:size())
    assert.are.equal('uint8', ds.raw_images.dtype)
    assert.has_error(function() ds:get_batch({ 10001 }) end)
    assert.has_error(function() ds:get_batch({ 0 }) end)
    -- a subclass keeps the lazy fields
    local Sub = datasets.FashionMNIST:extend('SubFM')
    function Sub:hello() return 'hi' end
    local sd = Sub { train = false }
    assert.are.equal('hi', sd:hello())
    assert.are.same({ 10000, 28, 28 }, sd.raw_images:size())
    assert.are.same({ 10000, 1, 28, 28 }, sd.images:size())
    -- lazy=false loads at once
    assert.is_not_nil(rawget(datasets.FashionMNIST { train = false, lazy = false }, '_raw'))
  end)

  it('caches the decompressed files: written once, mmap\'d after, rewritten when stale or broken', function()
    local dir = h.tmpname('-fm-src')
    local cdir = h.tmpname('-fm-cache')
    os.execute(('mkdir -p %s && cp %s/t10k-* %s/'):format(h.q(dir), root, h.q(dir)))
    setenv(cdir)
    assert.are.equal(cdir, datasets.cache_dir())
    local src = dir .. '/t10k-images-idx3-ubyte.gz'
    local cpath = datasets.cache_path(cdir, src)
    assert.truthy(cpath:find('^' .. cdir:gsub('%p', '%%%0') .. '/idx/t10k%-images%-idx3%-ubyte%-%x+%.safetensors$'))
    local a = datasets.load_idx_u8(src, 3)
    assert.is_nil(datasets.cache_status)
    assert.is_truthy(io.open(cpath, 'rb'))
    -- a second load maps the cache file: same bytes
    local b = datasets.load_idx_u8(src, 3)
    assert.is_nil(datasets.cache_status)
    assert.is_true(a:eq(b):all():item())
    local ds = datasets.FashionMNIST { root = dir, train = false }
    assert.is_true(ds:get_batch({ 1, 2, 3 })[1]:eq(test.images:narrow(1, 1, 3)):all():item())
    -- a new mtime of the source makes the entry stale: rewritten
    os.execute('touch -d "2001-01-01" ' .. h.q(src))
    local c = datasets.load_idx_u8(src, 3)
    assert.truthy(datasets.cache_status:find('stale or invalid'))
    assert.is_true(a:eq(c):all():item())
    datasets.load_idx_u8(src, 3)
    assert.is_nil(datasets.cache_status)
    -- a truncated cache file is not used
    local f = io.open(cpath, 'rb'); local head = f:read(4096); f:close()
    h.write_file(cpath, head)
    local d = datasets.load_idx_u8(src, 3)
    assert.truthy(datasets.cache_status:find('stale or invalid'))
    assert.is_true(a:eq(d):all():item())
    -- a cache directory that cannot be made: decompressed every time, same data
    h.write_file(cdir .. '/file', 'x')
    setenv(cdir .. '/file/sub')
    local e = datasets.load_idx_u8(src, 3)
    assert.truthy(datasets.cache_status:find('cache not written'))
    assert.is_true(a:eq(e):all():item())
    -- DPL_DATA_CACHE=0: off
    setenv('0')
    assert.is_nil(datasets.cache_dir())
    datasets.load_idx_u8(src, 3)
    assert.is_nil(datasets.cache_status)
    assert.is_false(datasets.FashionMNIST({ root = dir, train = false, cache = false }):get(1) == nil)
    setenv(cache_root)
    os.execute('rm -rf ' .. h.q(dir) .. ' ' .. h.q(cdir))
  end)

  it('a truncated .gz image file fails at construction (gzip trailer, then decompression)', function()
    local dir = h.tmpname('-fm-gz')
    os.execute(('mkdir -p %s && cp %s/t10k-labels-idx1-ubyte.gz %s/ && head -c 2000000 %s/t10k-images-idx3-ubyte.gz > %s/t10k-images-idx3-ubyte.gz')
      :format(h.q(dir), root, h.q(dir), root, h.q(dir)))
    local ok, e = pcall(datasets.FashionMNIST, { root = dir, train = false })
    assert.is_false(ok)
    assert.truthy(tostring(e):find('FashionMNIST: '))
    assert.truthy(tostring(e):lower():find('truncated'))
    -- a plain file with trailing bytes
    os.execute(('zcat %s/t10k-images-idx3-ubyte.gz > %s/t10k-images-idx3-ubyte && echo x >> %s/t10k-images-idx3-ubyte && rm %s/t10k-images-idx3-ubyte.gz')
      :format(root, h.q(dir), h.q(dir), h.q(dir)))
    ok, e = pcall(datasets.FashionMNIST, { root = dir, train = false })
    assert.is_false(ok)
    assert.truthy(tostring(e):find('trailing bytes'))
    os.execute('rm -rf ' .. h.q(dir))
  end)

  -- a .gz file whose deflate data or CRC is damaged: zlib's data error, named (it read as
  -- "truncated: 0 of the 4 magic bytes", and a bad CRC in the gzip trailer was accepted)
  it('a corrupted .gz file is a data error, not "truncated"; a bad CRC is caught', function()
    local dir = h.tmpname('-fm-gzbad')
    os.execute(('mkdir -p %s && cp %s/t10k-images-idx3-ubyte.gz %s/'):format(h.q(dir), root, h.q(dir)))
    local src = h.read_all(root .. '/t10k-labels-idx1-ubyte.gz')
    local function try(bytes)
      h.write_file(dir .. '/t10k-labels-idx1-ubyte.gz', bytes)
      local ok, e = pcall(datasets.FashionMNIST, { root = dir, train = false, cache = false })
      assert.is_false(ok)
      return tostring(e)
    end
    -- the deflate stream garbled after its first bytes
    local e = try(src:sub(1, 20) .. string.rep('\255', 200) .. src:sub(221))
    assert.truthy(e:find('FashionMNIST: IDX file ' .. dir .. '/t10k-labels-idx1-ubyte.gz is corrupt: ', 1, true), e)
    assert.truthy(e:find('(gzip data error)', 1, true), e)
    assert.falsy(e:find('truncated'), e)
    -- the CRC-32 in the trailer (bytes -8..-5) changed: the data inflates whole but does not match
    local n = #src
    local crc = src:sub(n - 7, n - 7)
    e = try(src:sub(1, n - 8) .. string.char((crc:byte() + 1) % 256) .. src:sub(n - 6))
    assert.truthy(e:find('is corrupt: incorrect data check (gzip data error)', 1, true), e)
    os.execute('rm -rf ' .. h.q(dir))
  end)

  it('data.Subset maps positions and keeps the get_batch fast path', function()
    local sub = dpl.data.Subset(test, dpl.data.range(9001, 10000))
    assert.are.equal(1000, dpl.data.len(sub))
    local b = sub:get_batch({ 1, 1000 })
    assert.is_true(b[1]:eq(test.images:index_select(1, dpl.tensor({ 9001, 10000 }, { dtype = 'int64' }))):all():item())
    assert.are.same({ test.labels[9001]:item(), test.labels[10000]:item() }, b[2]:totable())
    assert.are.equal(test.labels[9005]:item(), sub:get(5)[2])
    local loader = dpl.data.DataLoader(sub, { batch_size = 300 })
    assert.are.equal(4, #loader)
    -- a dataset without get_batch: items collated
    local td = dpl.data.TensorDataset(dpl.arange(1, 11):float())
    local plain = setmetatable({ __len = function() return 10 end, get = function(_, i) return td:get(i) end }, {})
    assert.are.same({ 3, 7 }, dpl.data.Subset(plain, { 3, 5, 7 }):get_batch({ 1, 3 })[1]:totable())
    assert.has_error(function() dpl.data.Subset(test, { 0 }) end, 'MisconfigurationException: Subset: index 0 (at position 1) is out of range 1..10000')
    assert.has_error(function() sub:get(1001) end)
  end)

  it('checks its options: an unknown key, a wrong type, a bad dtype are errors', function()
    local errors = require 'dpl.errors'
    local ok, e = pcall(datasets.FashionMNIST, { trian = false })
    assert.is_false(ok)
    assert.is_true(errors.is(e, errors.ValueError))
    assert.truthy(tostring(e):find("FashionMNIST: unknown option 'trian' %(did you mean 'train'%?%)"), tostring(e))
    assert.has_error(function() datasets.FashionMNIST { train = 'no' } end,
      errors.MisconfigurationException("FashionMNIST: train must be a boolean, got string 'no'"))
    assert.has_error(function() datasets.FashionMNIST { train = false, transform = 5 } end,
      errors.MisconfigurationException('FashionMNIST: transform must be a function, got number'))
    assert.has_error(function() datasets.FashionMNIST { train = false, dtype = 'int64' } end)
    -- download is accepted (the files are local); when they are missing the error says it fetched nothing
    assert.are.equal(10000, dpl.data.len(datasets.FashionMNIST { train = false, download = true }))
    local ok2, e2 = pcall(datasets.FashionMNIST, { root = '/nonexistent', train = false, download = true })
    assert.is_false(ok2)
    assert.truthy(tostring(e2):find('download=true cannot fetch them'), tostring(e2))
  end)

  it('transform and target_transform apply per item, in get and in the DataLoader\'s batches', function()
    local ds = datasets.FashionMNIST { train = false, transform = function(x) return x:mul(2) end,
      target_transform = function(y) return y - 1 end }
    local it = ds:get(1)
    assert.is_true(it[1]:eq(test.images[1]:mul(2)):all():item())
    assert.are.equal(9, it[2]) -- label 10 (1-based) - 1
    local b = dpl.data.DataLoader(ds, { batch_size = 3 }):iter()()
    assert.are.same({ 3, 1, 28, 28 }, b[1]:size())
    assert.is_true(b[1]:eq(test.images:narrow(1, 1, 3):mul(2)):all():item())
    assert.are.same({ 9, 2, 1 }, b[2]:totable())
    -- through a Subset as well
    local sb = dpl.data.Subset(ds, { 3, 1 }):get_batch({ 1, 2 })
    assert.are.same({ 1, 9 }, sb[2]:totable())
    -- without transforms the raw images come back
    assert.is_true(datasets.FashionMNIST({ train = false }):get_batch({ 1 })[1]:eq(test.images:narrow(1, 1, 1)):all():item())
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

describe('datasets cache clean-up', function()
  it('removes this spec\'s cache directory', function()
    os.execute('rm -rf ' .. h.q(cache_root))
    setenv(old_cache_env)
    assert.is_true(true)
  end)
end)
