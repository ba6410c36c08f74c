-- DDP equivalence with real tensors: 2 ranks with batch b each give the same
-- weights after k steps as 1 rank with batch 2b (float32 tolerance), for ddp
-- (dplhost --nproc 2), ddp_spawn (forked workers), horovod (mpirun -np 2), dp (2
-- simulated GPUs, batch 2b) and ddp2 (2 processes x 2 simulated GPUs vs batch 4b).
local h = require 'spec.support.helpers'

local weights = h.weights_of

-- the weights of a one-process reference run of the script (args after its name), run once
local ref_runs = {}
local function reference(args, check)
  if not ref_runs[args] then
    local out, err, rc = h.dplhost('spec/support/trainer_equiv_script.lua ' .. args, { timeout = 60 })
    assert.equal(0, rc, err)
    if check then check(out) end
    ref_runs[args] = weights(out)
  end
  return ref_runs[args]
end

local close = h.assert_weights_close

describe('DDP equivalence (real tensors)', function()
  local have = pcall(function() local dpl = require 'dpl'; return dpl.nn.Linear and dpl.optim.SGD end)
  local script = 'spec/support/trainer_equiv_script.lua'
  local function get_single() return reference('single 4 5') end

  it('ddp under dplhost --nproc 2', function()
    if not have then pending('dpl.nn / dpl.optim not available') return end
    local out, err, rc = h.dplhost('--nproc 2 ' .. script .. ' ddp 4 5', { timeout = 60 })
    assert.equal(0, rc, err)
    close(get_single(), weights(out))
  end)

  it("ddp with small gradient buckets, .grad as bucket views and an unused parameter", function()
    if not have then pending('dpl.nn / dpl.optim not available') return end
    local ref_out, ref_err, ref_rc = h.dplhost(script .. ' single 4 5 deep', { timeout = 60 })
    assert.equal(0, ref_rc, ref_err)
    local out, err, rc = h.dplhost('--nproc 2 ' .. script .. ' ddp 4 5 deep', { timeout = 60 })
    assert.equal(0, rc, err)
    close(weights(ref_out), weights(out))
    -- 4 parameters that get gradients + 2 unused ones, ~20-byte buckets: several buckets
    assert.is_true(tonumber(out:match('rank 0 buckets (%d+)')) >= 3, out)
  end)

  it('ddp_spawn with 2 forked workers', function()
    if not have then pending('dpl.nn / dpl.optim not available') return end
    local out, err, rc = h.dplhost(script .. ' ddp_spawn 4 5', { timeout = 60 })
    assert.equal(0, rc, err)
    close(get_single(), weights(out))
  end)

  it('dp over 2 simulated GPUs (one process, batch 2b scattered)', function()
    if not have then pending('dpl.nn / dpl.optim not available') return end
    local out, err, rc = h.sh(('DPL_VIRTUAL_GPUS=2 CUDA_VISIBLE_DEVICES= %s %s dp 4 5'):format(h.q(h.bin), script), { timeout = 60 })
    assert.equal(0, rc, err)
    close(get_single(), weights(out))
  end)

  it('ddp2: 2 processes as 2 nodes, each dp over 2 simulated GPUs', function()
    if not have then pending('dpl.nn / dpl.optim not available') return end
    local out, err, rc = h.sh(('DPL_VIRTUAL_GPUS=2 CUDA_VISIBLE_DEVICES= %s --nproc 2 %s ddp2 4 5'):format(h.q(h.bin), script),
      { timeout = 60 })
    assert.equal(0, rc, err)
    local ref_out, ref_err, ref_rc = h.dplhost(script .. ' single 8 5', { timeout = 60 })
    assert.equal(0, ref_rc, ref_err)
    close(weights(ref_out), weights(out))
  end)

  it('horovod under mpirun -np 2', function()
    if not have then pending('dpl.nn / dpl.optim not available') return end
    if not h.has_command('mpirun') then pending('mpirun is not installed') return end
    local out, err, rc = h.sh(('ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -np 2 %s %s horovod 4 5')
      :format(h.q(h.bin), script), { timeout = 60 })
    assert.equal(0, rc, err)
    close(get_single(), weights(out))
  end)
end)

describe('sync_batchnorm=true: SyncBatchNorm over the ranks', function()
  local script = 'spec/support/trainer_equiv_script.lua'
  local function get_ref()
    return reference('single 4 5 bn', function(out) assert.truthy(out:find('rank 0 norm BatchNorm1d', 1, true), out) end)
  end
  it('ddp (2 ranks x batch b) gives the weights and running statistics of 1 rank x 2b with BatchNorm', function()
    local out, err, rc = h.dplhost('--nproc 2 ' .. script .. ' ddp 4 5 bn', { timeout = 60 })
    assert.equal(0, rc, err)
    assert.truthy(out:find('[rank 1] rank 1 norm SyncBatchNorm', 1, true), out)
    close(get_ref(), weights(out))
  end)
  it('ddp_spawn (2 forked workers)', function()
    local out, err, rc = h.dplhost(script .. ' ddp_spawn 4 5 bn', { timeout = 60 })
    assert.equal(0, rc, err)
    close(get_ref(), weights(out))
  end)
  it('horovod under mpirun -np 2', function()
    if not h.has_command('mpirun') then pending('mpirun is not installed') return end
    local out, err, rc = h.sh(('ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -np 2 %s %s horovod 4 5 bn')
      :format(h.q(h.bin), script), { timeout = 60 })
    assert.equal(0, rc, err)
    close(get_ref(), weights(out))
  end)
  it('dp and ddp2 refuse it (one process has no group to sync its replicas through)', function()
    for _, s in ipairs({ 'dp', 'ddp2' }) do
      local code = ("local dpl = require 'dpl'; local ok, e = pcall(dpl.Trainer, { strategy = '%s', accelerator = 'gpu', "
        .. "devices = 2, sync_batchnorm = true, logger = false }); print(ok, require('dpl.errors').is(e, "
        .. "require('dpl.errors').NotImplementedError), tostring(e))"):format(s)
      local out, err, rc = h.sh(('DPL_VIRTUAL_GPUS=2 CUDA_VISIBLE_DEVICES= %s -e %s'):format(h.q(h.bin), h.q(code)), { timeout = 60 })
      assert.equal(0, rc, err)
      assert.truthy(out:find('false\ttrue\t', 1, true), out)
      assert.truthy(out:find(('sync_batchnorm=true with strategy="%s"'):format(s), 1, true), out)
    end
  end)
end)

describe('resume (real tensors)', function()
  it('1 epoch + resume for 1 epoch gives the same weights as 2 epochs straight, bitwise', function()
    local ok = pcall(function() local dpl = require 'dpl'; return dpl.nn.Linear and dpl.optim.SGD end)
    if not ok then pending('dpl.nn / dpl.optim not available') return end
    local th = require 'spec.support.trainer_helpers'
    local out, err, rc = h.dplhost('spec/support/trainer_resume_script.lua ' .. h.q(th.tmpdir()), { timeout = 60 })
    assert.equal(0, rc, err)
    local a, b = out:match('straight ([^\n]+)'), out:match('resumed  ([^\n]+)')
    assert.truthy(a, out)
    assert.equal(a, b)
  end)
end)

describe('ddp with parameters unused on a rank', function()
  it('keeps the ranks in step (zero gradients for the unused ones)', function()
    local ok = pcall(function() local dpl = require 'dpl'; return dpl.nn.Linear and dpl.optim.SGD end)
    if not ok then pending('dpl.nn / dpl.optim not available') return end
    local out, err, rc = h.dplhost('--nproc 2 spec/support/trainer_unused_script.lua', { timeout = 60 })
    assert.equal(0, rc, err)
    local a = out:match('%[rank 0%] rank\t0\tok\t([^\n]+)')
    local b = out:match('%[rank 1%] rank\t1\tok\t([^\n]+)')
    assert.truthy(a, out)
    assert.equal(a, b)
  end)
end)

describe('DDPStrategy arguments', function()
  it('reject a bucket_cap_mb that is not a positive number', function()
    local dpl = require 'dpl'
    for _, bad in ipairs({ 0, -1, 'big' }) do
      local ok, err = pcall(dpl.strategies.DDPStrategy, { bucket_cap_mb = bad })
      assert.is_false(ok)
      assert.matches('bucket_cap_mb must be a number > 0, got ' .. tostring(bad), tostring(err), 1, true)
    end
  end)
end)
