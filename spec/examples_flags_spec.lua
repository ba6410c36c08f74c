-- The examples' command lines: --help prints the usage (the Trainer flags too) on stdout and
-- exits 0; a bad flag is one line on stderr naming it, exit status 2, no stack trace.
local h = require 'spec.support.helpers'

local ex = h.q(h.root .. '/examples/fashion_mnist.lua')
local loop = h.q(h.root .. '/examples/fashion_mnist_loop.lua')

-- stderr without the Trainer's INFO lines
local function err_lines(e)
  local out = {}
  for l in e:gmatch('[^\n]+') do if not l:find('^INFO:') then out[#out + 1] = l end end
  return out
end

describe('examples/fashion_mnist.lua flags', function()
  it('--help: usage with the Trainer flags on stdout, exit 0', function()
    local o, e, rc = h.dplhost(ex .. ' --help', { timeout = 60 })
    assert.equal(0, rc)
    assert.matches('^usage: dplhost examples/fashion_mnist.lua', o)
    assert.matches('%-%-max_epochs', o)
    assert.matches('%-%-limit_train_batches', o)
    assert.matches('%-%-strategy', o)
    assert.equal(0, #err_lines(e))
  end)

  for _, case in ipairs({
    { '--max_epochs abc', "fashion_mnist.lua: MisconfigurationException: %-%-max_epochs expects a number, got 'abc'" },
    { '--logger xyz', "fashion_mnist.lua: %-%-logger must be csv, tensorboard or false, got 'xyz'" },
    { '--strategy nonsense', "fashion_mnist.lua: MisconfigurationException: You selected an invalid strategy name: `strategy='nonsense'`" },
    { '--bogus 1', "fashion_mnist.lua: unknown flag '%-%-bogus'" },
    { '--batch x', "fashion_mnist.lua: %-%-batch must be a positive integer, got 'x'" },
    { '--model rnn', "fashion_mnist.lua: %-%-model must be one of cnn, lstm, mlp, got 'rnn'" },
  }) do
    it(case[1] .. ': one line, exit 2', function()
      local _, e, rc = h.dplhost(ex .. ' ' .. case[1], { timeout = 60 })
      assert.equal(2, rc)
      local lines = err_lines(e)
      assert.equal(1, #lines, e)
      assert.matches(case[2], lines[1])
      assert.is_nil(e:find('stack traceback', 1, true))
    end)
  end
end)

describe('examples/fashion_mnist.lua --model', function()
  for _, m in ipairs({ 'cnn', 'lstm' }) do
    it(m .. ': a fast_dev_run trains, validates and tests one batch', function()
      local dir = h.tmpname('-ex')
      local o, e, rc = h.dplhost(ex .. ' --model ' .. m .. ' --fast_dev_run 1 --default_root_dir ' .. h.q(dir)
        .. ' --enable_progress_bar false --hidden 32 --batch 16', { timeout = 120 })
      assert.equal(0, rc, o .. e)
      assert.matches('test accuracy: %d+%.%d+%%', o)
      os.execute('rm -rf ' .. h.q(dir))
    end)
  end
end)

describe('examples/fashion_mnist.lua --ckpt_path last', function()
  it('a fit stopped after its first epoch and run again ends where an unbroken run does', function()
    local d1, d2 = h.tmpname('-ex'), h.tmpname('-ex')
    local base = ' --max_epochs 2 --limit_train_batches 20 --limit_val_batches 2 --limit_test_batches 1'
      .. ' --enable_progress_bar false --enable_model_summary false --logger false --hidden 64'
    local o, e, rc = h.dplhost(ex .. base .. ' --default_root_dir ' .. h.q(d1), { timeout = 120 })
    assert.equal(0, rc, o .. e)
    local want = o:match('%(val_loss ([%d.]+)%)')
    assert.truthy(want, o)
    -- the first run stops after epoch 0 (as a failed rank would, later), finding no last.ckpt
    o, e, rc = h.dplhost(ex .. base .. ' --max_steps 20 --ckpt_path last --default_root_dir ' .. h.q(d2), { timeout = 120 })
    assert.equal(0, rc, o .. e)
    assert.matches('no fault tolerant or last checkpoint available', o .. e)
    o, e, rc = h.dplhost(ex .. base .. ' --ckpt_path last --default_root_dir ' .. h.q(d2), { timeout = 120 })
    os.execute('rm -rf ' .. h.q(d1) .. ' ' .. h.q(d2))
    assert.equal(0, rc, o .. e)
    assert.matches('Restoring states from the checkpoint path at [^\n]*/checkpoints/last%.ckpt', o .. e)
    assert.equal(want, o:match('%(val_loss ([%d.]+)%)'))
    local _, _, rc2 = h.dplhost(ex .. ' --ckpt_path ""', { timeout = 60 })
    assert.equal(2, rc2)
  end)
end)

describe('examples/fashion_mnist_loop.lua flags', function()
  it('--help: usage on stdout, exit 0', function()
    local o, _, rc = h.dplhost(loop .. ' --help', { timeout = 60 })
    assert.equal(0, rc)
    assert.matches('^usage: dplhost examples/fashion_mnist_loop.lua', o)
  end)

  for _, case in ipairs({
    { '--opt xyz --limit 100', "%-%-opt must be one of adam, sgd, got 'xyz'" },
    { '--model xyz --limit 100', "%-%-model must be one of both, cnn, mlp, got 'xyz'" },
    { '--epochs abc --limit 100', "%-%-epochs must be a positive integer, got 'abc'" },
    { '--bogus 1 --limit 100', "unknown flag '%-%-bogus'" },
    { '--epochs', '%-%-epochs needs a value' },
  }) do
    it(case[1] .. ': one line, exit 2', function()
      local o, e, rc = h.dplhost(loop .. ' ' .. case[1], { timeout = 60 })
      assert.equal(2, rc)
      assert.equal('', o)
      local lines = err_lines(e)
      assert.equal(1, #lines, e)
      assert.matches('^fashion_mnist_loop.lua: ' .. case[2], lines[1])
    end)
  end
end)
