-- trainer_testerb_spec.lua: what exploratory testing of the Trainer from the shell found
-- (distribution and failure cases); the runs are in spec/support/testerb_script.lua.
local h = require 'spec.support.helpers'

local function run(args, opts)
  return h.dplhost('spec/support/testerb_script.lua ' .. args, opts or { timeout = 60 })
end

describe('checkpoint lookups', function()
  it('ckpt_path="last" and "hpc" skip the temp file of a write killed mid-way', function()
    local dir = h.tmpname('-dir')
    os.execute('mkdir -p ' .. h.q(dir))
    local out, err, rc = run('stale_tmp ' .. h.q(dir))
    os.execute('rm -rf ' .. h.q(dir))
    assert.equal(0, rc, err)
    assert.matches('last ok=true step=8 ', out)
    assert.matches('hpc ok=true step=8 ', out)
  end)
end)

describe('callbacks under ddp (dplhost --nproc 2)', function()
  it('BackboneFinetuning: the unfrozen backbone\'s gradients are averaged too (equal weights on the ranks)', function()
    local out, err, rc = h.dplhost('--nproc 2 spec/support/testerb_script.lua bb_ddp', { timeout = 60 })
    assert.equal(0, rc, err)
    local r0 = out:match('%[rank 0%] rank 0 (backbone=[^\n]*)')
    local r1 = out:match('%[rank 1%] rank 1 (backbone=[^\n]*)')
    assert.is_not_nil(r0, out)
    assert.equal(r0, r1)
  end)
end)

describe('exit status of a fit stopped by a signal', function()
  it('SIGTERM to a plain dplhost: the hpc checkpoint, SignalReceived on stderr, status 143', function()
    local dir = h.tmpname('-dir')
    os.execute('mkdir -p ' .. h.q(dir))
    local out, err, rc = run('sigterm_self ' .. h.q(dir))
    local saved = h.read_all(dir .. '/hpc_ckpt_1.ckpt') ~= ''
    os.execute('rm -rf ' .. h.q(dir))
    assert.equal(143, rc, err)
    assert.matches('SignalReceived: received signal 15 %(SIGTERM%)', err)
    assert.is_true(saved)
  end)
end)

describe('examples/fashion_mnist.lua', function()
  it('--auto_lr_find (listed by --help) tunes the lr before fit, as a Lightning script calling trainer.tune()', function()
    local f = io.open('/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz', 'rb')
    if not f then pending('no Fashion-MNIST data set') return end
    f:close()
    local dir = h.tmpname('-dir')
    -- (lr_find's 100 steps fit in max_epochs x limit_train_batches: Lightning 1.9.5 stops it at
    -- max_epochs, and with 1 x 5 batches it has too few points to suggest an lr)
    local out, err, rc = h.dplhost(h.q(h.root .. '/examples/fashion_mnist.lua') .. ' --auto_lr_find --max_epochs 2'
      .. ' --limit_train_batches 50 --limit_val_batches 1 --limit_test_batches 1 --logger false'
      .. ' --enable_progress_bar false --default_root_dir ' .. h.q(dir), { timeout = 120 })
    os.execute('rm -rf ' .. h.q(dir))
    assert.equal(0, rc, err)
    assert.matches('Learning rate set to ', out .. err)
    assert.matches('tuned: lr [%d.e-]+, batch size 64', out)
  end)
end)
