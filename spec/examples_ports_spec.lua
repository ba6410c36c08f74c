-- examples_ports_spec.lua: the three Lightning projects ported to dplhost
-- (examples/fashion_mnist_autoencoder.lua, fashion_mnist_gan.lua, fashion_mnist_cnn_metrics.lua),
-- each run as a real subprocess on Fashion-MNIST with small limits; their output and artifacts
-- (checkpoints, CSV columns, TensorBoard event files, sample tensors) checked.
local h = require 'spec.support.helpers'
local dpl = require 'dpl'

local function ex(name) return h.q(h.root .. '/examples/' .. name) end
local have_data = io.open('/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz', 'rb')
if have_data then have_data:close() end
local it_data = have_data and it or pending

local function ls(dir, pattern)
  local out = {}
  local p = io.popen('ls ' .. h.q(dir) .. ' 2>/dev/null')
  for l in p:lines() do if not pattern or l:find(pattern) then out[#out + 1] = l end end
  p:close()
  return out
end

local function csv(path)
  local text = h.read_all(path)
  local lines = {}
  for l in text:gmatch('[^\n]+') do lines[#lines + 1] = l end
  local header = {}
  for c in (lines[1] or ''):gmatch('[^,]+') do header[#header + 1] = c end
  local rows = {}
  for i = 2, #lines do
    local row, k = {}, 0
    for c in (lines[i] .. ','):gmatch('([^,]*),') do
      k = k + 1
      if c ~= '' then row[header[k]] = tonumber(c) end
    end
    rows[#rows + 1] = row
  end
  return header, rows, text
end
local function has_all(list, names)
  local set = {}
  for _, v in ipairs(list) do set[v] = true end
  for _, n in ipairs(names) do if not set[n] then return false, n end end
  return true
end

local quick = ' --enable-progress-bar false --limit-val-batches 2 --limit-test-batches 2'

describe('examples/fashion_mnist_autoencoder.lua', function()
  it('--help exits 0; a bad flag is one line, exit 2', function()
    local o, _, rc = h.dplhost(ex('fashion_mnist_autoencoder.lua') .. ' --help')
    assert.equal(0, rc)
    assert.matches('^usage: dplhost examples/fashion_mnist_autoencoder.lua', o)
    local _, e, rc2 = h.dplhost(ex('fashion_mnist_autoencoder.lua') .. ' --latnet 3')
    assert.equal(2, rc2)
    assert.matches("unknown flag '%-%-latnet'", e)
    assert.is_nil(e:find('traceback', 1, true))
  end)

  it_data('trains, keeps the best checkpoint, reloads it with load_from_checkpoint, encodes, tests, predicts', function()
    local dir = h.tmpname('-ae')
    local o, e, rc = h.dplhost(ex('fashion_mnist_autoencoder.lua') .. ' --max-epochs 2 --limit-train-batches 15'
      .. quick .. ' --default-root-dir ' .. h.q(dir), { timeout = 60 })
    assert.equal(0, rc, o .. e)
    local ckpt, score = o:match('best checkpoint: (%S+) %(val_loss (%S+)%)')
    assert.truthy(ckpt, o)
    assert.matches('/lightning_logs/version_0/checkpoints/autoencoder%-epoch=01%-val_loss=', ckpt)
    assert.truthy(io.open(ckpt, 'rb'), ckpt)
    assert.is_true(tonumber(score) < 0.08, score) -- down from ~0.17 at the start
    assert.matches('loaded: lr 0.001, latent 16', o)
    assert.matches('encoded 4 images: codes 4x16, requires_grad false, reconstruction mse 0%.0%d+', o)
    local test_loss = tonumber(o:match('test_loss of the best checkpoint: (%S+)'))
    assert.is_true(test_loss > 0 and test_loss < 0.08, o)
    assert.matches('predict: 2 batches, 1000 codes of size 16', o)
    -- the modules are not hyper-parameters (save_hyperparameters' ignore)
    local hp = h.read_all(dir .. '/lightning_logs/version_0/hparams.yaml')
    assert.matches('lr: 0.001', hp)
    assert.is_nil(hp:find('encoder', 1, true))
    assert.is_true(#ls(dir .. '/lightning_logs/version_0', '^events%.out%.tfevents') >= 1)
    os.execute('rm -rf ' .. h.q(dir))
  end)
end)

describe('examples/fashion_mnist_gan.lua', function()
  it('--help exits 0; a bad value is one line, exit 2', function()
    local o, _, rc = h.dplhost(ex('fashion_mnist_gan.lua') .. ' --help')
    assert.equal(0, rc)
    assert.matches('^usage: dplhost examples/fashion_mnist_gan.lua', o)
    local _, e, rc2 = h.dplhost(ex('fashion_mnist_gan.lua') .. ' --lr -1')
    assert.equal(2, rc2)
    assert.matches("%-%-lr: bad value '%-1'", e)
  end)

  it_data('manual optimization of two networks; losses logged; fixed-noise samples each epoch (tensor and PNG grid)', function()
    local dir = h.tmpname('-gan')
    local o, e, rc = h.dplhost(ex('fashion_mnist_gan.lua') .. ' --max-epochs 2 --limit-train-batches 6'
      .. ' --log-every-n-steps 2 --enable-progress-bar false --default-root-dir ' .. h.q(dir), { timeout = 60 })
    assert.equal(0, rc, o .. e)
    local g, d = o:match('epoch 1: g_loss (%S+), d_loss (%S+)')
    assert.truthy(g, o)
    assert.is_true(tonumber(g) > 0 and tonumber(g) < 10 and tonumber(d) > 0 and tonumber(d) < 5, o)
    -- two optimizer steps per batch: global_step 2 x 6 x 2
    assert.same({ 'epoch=1-step=24.ckpt' }, ls(dir .. '/tb/version_0/checkpoints'))
    -- the CSV logger's columns: both losses, per step and per epoch, all finite
    local header, rows = csv(dir .. '/csv/version_0/metrics.csv')
    assert.is_true(has_all(header, { 'g_loss_step', 'd_loss_step', 'g_loss_epoch', 'd_loss_epoch', 'epoch', 'step' }))
    local n = 0
    for _, r in ipairs(rows) do
      for k, v in pairs(r) do assert.is_true(v == v and v ~= math.huge, k) end
      if r.g_loss_step then n = n + 1 end
    end
    assert.equal(6, n) -- every 2 batches of 12
    -- the samples: one tensor file per epoch, [16, 1, 28, 28] in [0, 1]
    assert.same({ 'epoch=0.t7', 'epoch=1.t7' }, ls(dir .. '/tb/version_0/samples'))
    local s = dpl.load(dir .. '/tb/version_0/samples/epoch=1.t7')
    assert.same({ 16, 1, 28, 28 }, s:size())
    assert.is_true(s:min():item() >= 0 and s:max():item() <= 1)
    -- and a PNG grid per epoch in the TensorBoard event file
    local ev = ls(dir .. '/tb/version_0', '^events%.out%.tfevents')
    assert.equal(1, #ev)
    local bytes = h.read_all(dir .. '/tb/version_0/' .. ev[1])
    local pngs, tags = 0, 0
    for _ in bytes:gmatch('\137PNG') do pngs = pngs + 1 end
    for _ in bytes:gmatch('generated_images') do tags = tags + 1 end
    assert.equal(2, pngs)
    assert.equal(2, tags)
    os.execute('rm -rf ' .. h.q(dir))
  end)
end)

describe('examples/fashion_mnist_cnn_metrics.lua', function()
  it('--help exits 0; a bad Trainer flag is one line, exit 2', function()
    local o, _, rc = h.dplhost(ex('fashion_mnist_cnn_metrics.lua') .. ' --help')
    assert.equal(0, rc)
    assert.matches('^usage: dplhost examples/fashion_mnist_cnn_metrics.lua', o)
    local _, e, rc2 = h.dplhost(ex('fashion_mnist_cnn_metrics.lua') .. ' --precision 16-mixed')
    assert.equal(2, rc2)
    assert.matches('AMP with fp16 is not supported on CPU', e)
  end)

  local args = ' --max-epochs 2 --limit-train-batches 8 --log-every-n-steps 1 --channels 8' .. quick
  local function run(dir, extra)
    return h.dplhost(ex('fashion_mnist_cnn_metrics.lua') .. args .. (extra or '') .. ' --default-root-dir ' .. h.q(dir),
      { timeout = 60 })
  end

  it_data('metrics objects, OneCycleLR per step, two loggers, test and predict; the same seed gives the same metrics', function()
    local dir1, dir2 = h.tmpname('-cnn'), h.tmpname('-cnn')
    local o, e, rc = run(dir1)
    assert.equal(0, rc, o .. e)
    local o2, e2, rc2 = run(dir2)
    assert.equal(0, rc2, o2 .. e2)
    assert.matches('best checkpoint: %S+/csv/version_0/checkpoints/cnn%-epoch=0%d%-val_acc=%d%.%d+%.ckpt', o)
    assert.matches('test: accuracy %d+%.%d+%%, macro F1 0%.%d+, precision 0%.%d+, recall 0%.%d+', o)
    assert.matches('predict: %d of 8 right', o)
    -- the CSV: Lightning's columns for what was logged (metric objects, the lr monitor, the test collection)
    local header, rows, text = csv(dir1 .. '/csv/version_0/metrics.csv')
    local ok, missing = has_all(header, { 'lr-AdamW', 'train_loss', 'train_acc_step', 'train_acc_epoch', 'train_f1',
      'val_loss', 'val_acc', 'val_f1', 'test_acc', 'test_f1', 'test_precision', 'test_recall', 'epoch', 'step' })
    assert.is_true(ok, missing)
    -- OneCycleLR stepped per optimizer step (accumulate_grad_batches 2: 4 steps an epoch): the lr rises, then falls
    local lrs = {}
    for _, r in ipairs(rows) do
      if r['lr-AdamW'] and r.step ~= (lrs[#lrs] or {}).step then lrs[#lrs + 1] = { step = r.step, lr = r['lr-AdamW'] } end
    end
    assert.is_true(#lrs >= 3, text)
    assert.is_true(lrs[2].lr > lrs[1].lr, text)
    assert.is_true(lrs[#lrs].lr < lrs[2].lr, text)
    -- the TensorBoard logger beside it
    assert.is_true(#ls(dir1 .. '/tb/version_0', '^events%.out%.tfevents') >= 1)
    -- seed_everything + deterministic: the same metrics, byte for byte
    assert.equal(text, h.read_all(dir2 .. '/csv/version_0/metrics.csv'))
    os.execute('rm -rf ' .. h.q(dir1) .. ' ' .. h.q(dir2))
  end)

  it_data('--precision bf16-mixed runs on the CPU; another --seed gives other metrics', function()
    local dir, dir2 = h.tmpname('-cnn'), h.tmpname('-cnn')
    local o, e, rc = run(dir, ' --precision bf16-mixed --max-epochs 1')
    assert.equal(0, rc, o .. e)
    assert.matches('test: accuracy %d+%.%d+%%', o)
    local o2, e2, rc2 = run(dir2, ' --max-epochs 1 --seed 5')
    assert.equal(0, rc2, o2 .. e2)
    assert.are_not.equal(h.read_all(dir .. '/csv/version_0/metrics.csv'), h.read_all(dir2 .. '/csv/version_0/metrics.csv'))
    os.execute('rm -rf ' .. h.q(dir) .. ' ' .. h.q(dir2))
  end)
end)
