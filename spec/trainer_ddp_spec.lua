-- strategy='ddp' under `dplhost --nproc 2` (shm): parameters broadcast from
-- rank 0, gradients averaged before each optimizer step, DistributedSampler
-- inserted, sync_dist logging, rank-0-only files, and an early stop decided on
-- one rank stopping both.
local h = require 'spec.support.helpers'
local th = require 'spec.support.trainer_helpers'

local function run(mode)
  local dir = th.tmpdir()
  local out, err, rc = h.dplhost('--nproc 2 spec/support/trainer_ddp_script.lua ' .. mode .. ' ' .. h.q(dir),
                                 { timeout = 60 })
  local lines = {}
  for r, l in out:gmatch('%[rank (%d)%] (rank %d[^\n]*)') do lines[tonumber(r)] = l end
  return lines, dir, out .. err, rc
end

describe('Trainer with strategy="ddp" under dplhost --nproc 2', function()
  it('averages gradients, shards the data, syncs logged values', function()
    local lines, dir, all, rc = run('fit')
    assert.equal(0, rc, all)
    -- grad on rank r is (r + 1) * item; the mean over ranks of items (1,2), (3,4), (5,6)
    assert.equal('rank 0 world=2 p=5 grads=2.5,5.5,8.5 items=1,3,5 train_v=0.5 val_loss=2 epochs=1', lines[0])
    assert.equal('rank 1 world=2 p=5 grads=2.5,5.5,8.5 items=2,4,6 train_v=0.5 val_loss=2 epochs=1', lines[1])
    -- one logger directory, written by rank 0
    local p = io.popen('ls ' .. h.q(dir .. '/lightning_logs'))
    local v = p:read('*a'); p:close()
    assert.equal('version_0\n', v)
    assert.truthy(h.read_all(dir .. '/lightning_logs/version_0/metrics.csv'):match('train_v'))
  end)

  -- Lightning syncs a logged value once: the step value at self:log, the epoch value at
  -- the epoch's end (sum and batch size for a mean); both ranks then hold the same numbers
  local sync_expected = 'local_n=%d m=1.4 mn=5 n=10 ones=2 tcount=4 tmax=1 ts=1.5 ts_epoch=1.5 ts_step=1.5 tsum=6'
    .. ' tsum_epoch=6 tsum_step=3 logged ts_step=1.5 tsum_step=3'
  it('sync_dist reduces once: weighted means, sums and counts over uneven shards (CPU, and GPU values kept lazily)',
    function()
    for _, acc in ipairs({ 'cpu', 'gpu' }) do
      local out, err, rc = h.sh('DPL_VIRTUAL_GPUS=2 CUDA_VISIBLE_DEVICES= ' .. h.q(h.bin)
        .. ' --nproc 2 spec/support/trainer_sync_script.lua ' .. acc, { timeout = 60 })
      assert.are.equal(0, rc, out .. err)
      assert.matches('%[rank 0%] rank 0 ' .. sync_expected:format(8):gsub('%.', '%%.'), out)
      assert.matches('%[rank 1%] rank 1 ' .. sync_expected:format(2):gsub('%.', '%%.'), out)
    end
  end)

  it('sync_dist reduces once under horovod (mpirun -np 2)', function()
    if not h.has_command('mpirun') then return pending('mpirun is not installed') end
    local out, err, rc = h.sh(('ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -np 2 %s %s'):format(
      h.q(h.bin), 'spec/support/trainer_sync_script.lua cpu'), { timeout = 60 })
    assert.are.equal(0, rc, out .. err)
    assert.matches('rank 0 ' .. sync_expected:format(8):gsub('%.', '%%.'), out)
    assert.matches('rank 1 ' .. sync_expected:format(2):gsub('%.', '%%.'), out)
  end)

  it('wraps a custom sampler (each rank its share of what it yields); the user\'s loaders stay as they were',
    function()
    local out, err, rc = h.dplhost('--nproc 2 spec/support/trainer_sampler_script.lua', { timeout = 60 })
    assert.are.equal(0, rc, out .. err)
    assert.matches('%[rank 0%] rank 0 epoch0=2,6,10,14,18 epoch1=2,6,10,14,18\n', out)
    assert.matches('%[rank 1%] rank 1 epoch0=4,8,12,16,20 epoch1=4,8,12,16,20\n', out)
    for r = 0, 1 do
      assert.matches(('%%[rank %d%%] rank %d user loader: batches=2 sampler=Even same_sampler=true vals=2 same_vals=true'
        .. ' val_batches=6,4 trainer_batches=1\n'):format(r, r), out)
    end
    -- one process: the user's sampler as it is
    out, err, rc = h.dplhost('spec/support/trainer_sampler_script.lua', { timeout = 60 })
    assert.are.equal(0, rc, out .. err)
    assert.matches('rank 0 epoch0=2,4,6,8,10,12,14,16,18,20 epoch1=2,4,6,8,10,12,14,16,18,20\n', out)
  end)

  it("the DistributedSampler the Trainer puts in shuffles from seed_everything's seed (PL_GLOBAL_SEED), else 0", function()
    local s = h.write_file(h.tmpname('.lua'), [[
      local dpl = require 'dpl'
      local th = require 'spec.support.trainer_helpers'
      local M = dpl.LightningModule:extend('M')
      function M:training_step() return th.loss(1) end
      function M:configure_optimizers() return th.Optimizer() end
      local ds = th.loader(8).dataset
      local t = dpl.Trainer{ strategy = 'ddp', max_steps = 1, logger = false, enable_checkpointing = false,
        enable_progress_bar = false, enable_model_summary = false }
      t:fit(M(), dpl.data.DataLoader(ds, { batch_size = 2, shuffle = true }))
      print(('seed %s %s'):format(t.train_dataloader.sampler.__name, tostring(t.train_dataloader.sampler.seed)))
    ]])
    local out, err, rc = h.sh('PL_GLOBAL_SEED=7 ' .. h.q(h.bin) .. ' --nproc 2 ' .. h.q(s), { timeout = 60 })
    assert.are.equal(0, rc, out .. err)
    assert.matches('%[rank 1%] seed DistributedSampler 7\n', out)
    out, err, rc = h.sh('env -u PL_GLOBAL_SEED ' .. h.q(h.bin) .. ' --nproc 2 ' .. h.q(s), { timeout = 60 })
    assert.are.equal(0, rc, out .. err)
    assert.matches('%[rank 1%] seed DistributedSampler 0\n', out)
  end)

  it('refuses ddp2 with two processes on one node, and devices that do not match the processes started', function()
    local s = h.write_file(h.tmpname('.lua'), [[
      local dpl = require 'dpl'
      local ok, e = pcall(dpl.Trainer, { strategy = arg[1], accelerator = arg[2], devices = tonumber(arg[3]),
        logger = false, enable_checkpointing = false, enable_progress_bar = false, enable_model_summary = false })
      print(ok and ('built ' .. e.strategy.strategy_name .. ' rank ' .. e.global_rank) or tostring(e))
    ]])
    local function run(args)
      return h.sh('DPL_VIRTUAL_GPUS=2 CUDA_VISIBLE_DEVICES= ' .. h.q(h.bin) .. ' --nproc 2 ' .. h.q(s) .. ' ' .. args,
        { timeout = 60 })
    end
    local out, err, rc = run('ddp2 gpu 2')
    assert.are.equal(0, rc, out .. err)
    for r = 0, 1 do
      assert.matches('%[rank ' .. r .. "%] MisconfigurationException: strategy='ddp2' runs one process per node", out)
    end
    out = run('ddp cpu 3')
    assert.matches("%[rank 0%] MisconfigurationException: strategy='ddp': devices=3 and num_nodes=1 ask for 3", out)
    out = run('ddp cpu 2')
    assert.matches('%[rank 1%] built ddp rank 1', out)
    os.remove(s)
  end)

  it('trainer.should_stop set on one rank, or on_train_batch_start returning -1 on one rank, stops every rank after the same batch (or epoch)', function()
    local s = h.write_file(h.tmpname('.lua'), [[
      local dpl = require 'dpl'
      local th = require 'spec.support.trainer_helpers'
      local mode = arg[1]
      local M = dpl.LightningModule:extend('M')
      function M:training_step(b, i)
        if mode == 'step' and self.global_rank == 1 and self.global_step == 8 then self.trainer.should_stop = true end
        -- before min_epochs: the flag stays set on every rank until the minimum is met (Lightning 1.9.5)
        if mode == 'min' and self.global_rank == 1 and self.global_step == 2 then self.trainer.should_stop = true end
        return th.loss(1)
      end
      function M:validation_step(b, i)
        self:log('v', 1, { sync_dist = true })
        if mode == 'val' and self.global_rank == 0 and self.global_step == 4 then self.trainer.should_stop = true end
      end
      function M:on_train_epoch_end()
        if mode == 'epoch' and self.global_rank == 1 and self.current_epoch == 1 then self.trainer.should_stop = true end
      end
      -- -1 on one rank only: every rank ends that epoch after the same batch
      function M:on_train_batch_start(b, i)
        if mode == 'skip' and self.global_rank == 1 and self.current_epoch == 0 and i == 3 then return -1 end
      end
      function M:configure_optimizers() return th.Optimizer() end
      local t = dpl.Trainer { strategy = 'ddp', max_epochs = 4, min_epochs = mode == 'min' and 2 or nil, logger = false, num_sanity_val_steps = 0,
        val_check_interval = 2, enable_checkpointing = false, enable_progress_bar = false, enable_model_summary = false }
      t:fit(M(), th.loader(24), th.loader(4))
      print(('rank %d stopped epoch=%d step=%d'):format(t.global_rank, t.current_epoch, t.global_step))
    ]])
    -- 12 batches per rank and epoch; validation every 2 batches
    for mode, want in pairs({ step = 'epoch=1 step=9', val = 'epoch=1 step=4', epoch = 'epoch=2 step=24',
                              min = 'epoch=2 step=24', skip = 'epoch=4 step=39' }) do
      local out, err, rc = h.dplhost('--nproc 2 ' .. h.q(s) .. ' ' .. mode, { timeout = 60 })
      assert.are.equal(0, rc, mode .. ': ' .. out .. err)
      for r = 0, 1 do assert.matches('%[rank ' .. r .. '%] rank ' .. r .. ' stopped ' .. want .. '\n', out, mode) end
    end
    os.remove(s)
  end)

  it('with GPU gradient buckets, votes on garbage collection through the host (no read-back)', function()
    -- rank 1 alone asks for a collection every 3rd step: both ranks collect together;
    -- the vote does not live in the (simulated) GPU bucket, so no :item() on it
    local s = h.write_file(h.tmpname('.lua'), [[
      local dpl = require 'dpl'
      local T = require 'dpl.tensor'
      local nn, F = dpl.nn, dpl.nn.functional
      local rank = tonumber(os.getenv('RANK'))
      local calls, collects = 0, 0
      T.gc_due = function() calls = calls + 1; return rank == 1 and calls % 3 == 0 end
      local collect = T.collect
      T.collect = function() collects = collects + 1; return collect() end
      local ds = dpl.datasets.SyntheticClassification { n = 96, features = 4, classes = 2, seed = 1 }
      local M = dpl.LightningModule:extend('M')
      function M:__init() dpl.LightningModule.__init(self); self.l = nn.Linear(4, 2) end
      function M:training_step(b) return F.cross_entropy(self.l(b[1]), b[2]) end
      function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
      local t = dpl.Trainer { strategy = 'ddp', accelerator = 'gpu', devices = 2, max_epochs = 1, logger = false,
        enable_checkpointing = false, enable_progress_bar = false, enable_model_summary = false }
      t:fit(M(), dpl.data.DataLoader(ds, { batch_size = 8 }))
      local plan = t.strategy._buckets
      print(('rank %d steps %d collects %d host_vote %s bucket_vote %s'):format(rank, t.global_step, collects,
        tostring(plan.host_vote ~= nil), tostring(plan.list[#plan.list].vote ~= nil)))
    ]])
    local out, err, rc = h.sh('DPL_VIRTUAL_GPUS=2 CUDA_VISIBLE_DEVICES= ' .. h.q(h.bin) .. ' --nproc 2 ' .. h.q(s),
      { timeout = 60 })
    os.remove(s)
    assert.are.equal(0, rc, out .. err)
    for r = 0, 1 do
      assert.matches('%[rank ' .. r .. '%] rank ' .. r .. ' steps 6 collects 2 host_vote true bucket_vote false', out)
    end
  end)

  it('an EarlyStopping decision on one rank stops every rank at the same epoch', function()
    local lines, dir, all, rc = run('stop')
    assert.equal(0, rc, all)
    assert.matches('epochs=2$', lines[0])
    assert.matches('epochs=2$', lines[1])
  end)
end)

describe('Trainer with strategy="ddp_spawn" (forked workers)', function()
  local function spawn(mode, how)
    local dir = th.tmpdir()
    local out, err, rc = h.dplhost('spec/support/trainer_spawn_script.lua ' .. mode .. ' ' .. h.q(dir) .. ' ' .. (how or ''),
                                   { timeout = 60 })
    return out, err, rc
  end

  it('brings rank 0 weights, state, metrics and best checkpoint path back to the parent', function()
    local out, err, rc = spawn('fit')
    assert.equal(0, rc, err)
    -- rank 0 trained on items 1, 3, 5; w metric: mean over ranks of (9, 12)
    assert.matches('parent w=9 step=3 epoch=1 w_metric=10.5 best=version_0/checkpoints/epoch=0%-step=3.ckpt', out)
    -- trainer:save_checkpoint() in the parent after fit: the weights brought back
    assert.matches('saved w=9 step=3 epoch=1\n', out)
    -- validate also runs in workers: rank 0 sees items 1, 3 (mean 2)
    assert.matches('validate val=2\n', out)
  end)

  it('a failing worker stops the others; the parent raises naming the rank and the error', function()
    local out, err, rc = spawn('fail')
    assert.equal(0, rc, err)
    assert.matches('error ProcessRaisedException: [%w_.]+: rank 1 of 2 [^\n]*boom on rank 1', out)
  end)

  it('the same through the launcher\'s own libc fork (no host process primitives)', function()
    local out, err, rc = spawn('fit', 'libc')
    assert.equal(0, rc, err)
    assert.matches('parent w=9 step=3 epoch=1 w_metric=10.5 best=version_0/checkpoints/epoch=0%-step=3.ckpt', out)
    out, err, rc = spawn('fail', 'libc')
    assert.equal(0, rc, err)
    assert.matches('error ProcessRaisedException: [%w_.]+: rank 1 of 2 [^\n]*boom on rank 1', out)
  end)
end)

describe('Trainer under mpirun -np 2 (horovod, chosen automatically)', function()
  it('broadcasts parameters, scales lr by the world size, averages gradients, shards the data', function()
    if not h.has_command('mpirun') then
      pending('mpirun is not installed')
      return
    end
    local out, err, rc = h.sh(('ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -np 2 %s %s'):format(
      h.q(h.bin), 'spec/support/trainer_hvd_script.lua'), { timeout = 60 })
    assert.equal(0, rc, err)
    assert.matches('hvd rank 0/2 strategy=horovod p=3 lr=0.2 grads=2.5,5.5 items=1,3', out)
    assert.matches('hvd rank 1/2 strategy=horovod p=3 lr=0.2 grads=2.5,5.5 items=2,4', out)
  end)
end)

describe('signals during fit', function()
  it('alone: stop after the batch, hpc checkpoint by rank 0, an error (exit non-zero)', function()
    local dir = th.tmpdir()
    local out, err, rc = h.dplhost('spec/support/trainer_signal_script.lua 0 ' .. h.q(dir), { timeout = 60 })
    assert.equal(3, rc, err)
    assert.matches('rank 0 ok=false step=3 err=SignalReceived: received signal 15 %(SIGTERM%) on a rank: every rank stopped after global_step 3; checkpoint saved to DIR/hpc_ckpt_1.ckpt', out)
    local ck = require('dpl.trainer.checkpoint').load(dir .. '/hpc_ckpt_1.ckpt')
    assert.equal(3, ck.global_step)
  end)

  it('on one rank of two: both ranks stop at the same step', function()
    local dir = th.tmpdir()
    local out, err, rc = h.dplhost('--nproc 2 spec/support/trainer_signal_script.lua 1 ' .. h.q(dir), { timeout = 60 })
    assert.is_not.equal(0, rc)
    assert.matches('%[rank 0%] rank 0 ok=false step=3 ', out)
    assert.matches('%[rank 1%] rank 1 ok=false step=3 ', out)
    assert.equal(h.read_all(dir .. '/hpc_ckpt_1.ckpt') ~= '', true)
  end)
end)

describe('signals during a ddp_spawn fit (held in the workers, forwarded by the parent)', function()
  local function steps(dir)
    return h.read_all(dir .. '/step.0') .. ',' .. h.read_all(dir .. '/step.1')
  end

  it('a worker signalling itself: every rank stops at the same step, hpc checkpoint, SignalReceived in the parent',
    function()
    for _, sig in ipairs({ 15, 10 }) do
      local dir = th.tmpdir()
      local out, err, rc = h.dplhost('spec/support/trainer_spawn_signal_script.lua self ' .. h.q(dir) .. ' ' .. sig,
        { timeout = 60 })
      assert.are.equal(3, rc, out .. err)
      local name = sig == 15 and 'SIGTERM' or 'SIGUSR1'
      assert.matches('parent ok=false step=4 err=SignalReceived: received signal ' .. sig .. ' %(' .. name
        .. '%) on a rank: every rank stopped after global_step 4; checkpoint saved to DIR/hpc_ckpt_1.ckpt', out)
      assert.are.equal('4,4', steps(dir))
      assert.are.equal(4, require('dpl.trainer.checkpoint').load(dir .. '/hpc_ckpt_1.ckpt').global_step)
    end
  end)

  -- the script in the background; once both workers trained a few batches, `kill -SIG`
  -- to the parent or to a worker; then the parent's exit status and output
  local function from_outside(target, sig)
    local dir = th.tmpdir()
    local out, err = h.sh(([[%s spec/support/trainer_spawn_signal_script.lua wait %s > %s/out 2>&1 & p=$!
      for i in $(seq 300); do [ -f %s/ready ] && break; sleep 0.1; done
      if [ %s = parent ]; then kill -%s $p; else kill -%s $(cat %s/pid.%s); fi
      wait $p; echo "rc=$?"; ls -d ${TMPDIR:-/tmp}/dpl-spawn-s${p}_* 2>/dev/null]]):format(h.q(h.bin), h.q(dir), h.q(dir),
      h.q(dir), target, sig, sig, h.q(dir), target), { timeout = 90 })
    return out .. h.read_all(dir .. '/out'), dir, err
  end

  for _, case in ipairs({ { 'parent', 'TERM', 15 }, { 'parent', 'USR1', 10 }, { '1', 'USR1', 10 }, { '0', 'TERM', 15 } }) do
    it(('SIG%s sent to the %s'):format(case[2], case[1] == 'parent' and 'parent' or ('worker of rank ' .. case[1])),
      function()
      local out, dir, err = from_outside(case[1], case[2])
      assert.matches('^rc=3\n', out, err)
      assert.is_nil(out:find('dpl-spawn-', 1, true), out) -- the job's directory is gone
      local step = out:match('parent ok=false step=(%d+) err=SignalReceived: received signal ' .. case[3]
        .. ' %(SIG' .. case[2] .. '%) on a rank: every rank stopped after global_step %d+; checkpoint saved to'
        .. ' DIR/hpc_ckpt_1.ckpt')
      assert.truthy(step, out)
      assert.are.equal(step .. ',' .. step, steps(dir))
      assert.are.equal(tonumber(step), require('dpl.trainer.checkpoint').load(dir .. '/hpc_ckpt_1.ckpt').global_step)
    end)
  end

  it('SIGINT to the parent: the workers stop (SIGTERM) and the parent raises "interrupted"', function()
    local out, dir = from_outside('parent', 'INT')
    assert.matches('^rc=3\n', out)
    assert.matches('\nparent ok=false step=0 err=interrupted\n', out)
    assert.is_nil(out:find('dpl-spawn-', 1, true), out)
    local s0 = h.read_all(dir .. '/step.0')
    assert.are.equal(s0 .. ',' .. s0, steps(dir))
  end)
end)

describe('a real SIGTERM during fit (blocked, polled at batch boundaries)', function()
  it('alone: graceful stop after the batch, checkpoint, non-zero exit', function()
    local dir = th.tmpdir()
    local out, err, rc = h.dplhost('spec/support/trainer_sigterm_script.lua 0 ' .. h.q(dir), { timeout = 60 })
    assert.equal(3, rc, err)
    assert.matches('rank 0 ok=false step=3 err=SignalReceived: received signal 15 %(SIGTERM%)', out)
    assert.equal(3, require('dpl.trainer.checkpoint').load(dir .. '/hpc_ckpt_1.ckpt').global_step)
  end)

  it('sent to one rank of two: both stop after the same step', function()
    local dir = th.tmpdir()
    local out, err, rc = h.dplhost('--nproc 2 spec/support/trainer_sigterm_script.lua 1 ' .. h.q(dir), { timeout = 60 })
    assert.is_not.equal(0, rc)
    assert.matches('%[rank 0%] rank 0 ok=false step=3 ', out)
    assert.matches('%[rank 1%] rank 1 ok=false step=3 ', out)
  end)

  it('after fit the signal mask is as before (a later SIGTERM interrupts as usual)', function()
    local script = h.write_file(h.tmpname('.lua'), [[
local ffi = require 'ffi'
pcall(ffi.cdef, 'int kill(int pid, int sig); int getpid(void);')
local dpl = require 'dpl'
local th = require 'spec.support.trainer_helpers'
local M = dpl.LightningModule:extend('M')
function M:training_step() return th.loss(1) end
function M:configure_optimizers() return th.Optimizer() end
dpl.Trainer{ max_epochs = 1, logger = false, enable_checkpointing = false, enable_progress_bar = false,
  enable_model_summary = false }:fit(M(), th.loader(3))
ffi.C.kill(ffi.C.getpid(), 15)
for _ = 1, 1e8 do local _ = {} end
print('not reached')
]])
    local out, err, rc = h.dplhost(h.q(script), { timeout = 60 })
    os.remove(script)
    assert.equal(143, rc)
    assert.is_nil(out:find('not reached', 1, true))
  end)
end)

describe('strategy="ddp" from a plain dplhost run (subprocess launcher)', function()
  it('re-runs the script for the other local ranks; this process is rank 0', function()
    local dir = th.tmpdir()
    local out, err, rc = h.dplhost('spec/support/trainer_subprocess_script.lua ' .. h.q(dir), { timeout = 60 })
    assert.equal(0, rc, err)
    assert.matches('rank 0/2 items=1,3,5', out)
    assert.equal('rank 1/2 items=2,4,6', h.read_all(dir .. '/rank1.txt'))
  end)

  it('refuses code that does not come from a script file', function()
    local out, err, rc = h.dplhost([[-e "local dpl = require 'dpl'; local th = require 'spec.support.trainer_helpers'
local M = dpl.LightningModule:extend('M'); function M:training_step() return th.loss(1) end
function M:configure_optimizers() return th.Optimizer() end
dpl.Trainer{ strategy = 'ddp', accelerator = 'cpu', devices = 2, logger = false }:fit(M(), th.loader(2))"]])
    assert.is_not.equal(0, rc)
    assert.matches('does not come from a script file: run `dplhost %-%-nproc 2 script.lua`', err)
  end)
end)

describe('module buffers under ddp and horovod (BatchNorm running statistics)', function()
  -- PyTorch 1.13's DistributedDataParallel (checked with gloo, 2 processes): the constructor
  -- gives every rank rank 0's buffers; a forward after a training forward first broadcasts
  -- rank 0's buffers again (so each training step, and the first validation step of a fit's
  -- validation run, start from rank 0's statistics); broadcast_buffers=false keeps only the
  -- constructor's sync. Horovod broadcasts the state once, at setup.
  local function runs(cmd)
    local out, err, rc = h.sh(cmd, { timeout = 120 })
    assert.are.equal(0, rc, err)
    local r0 = out:match('rank 0 (t:[^\n]+)')
    local r1 = out:match('rank 1 (t:[^\n]+)')
    assert.is_truthy(r0 and r1, out)
    local a, b = {}, {}
    for w in r0:gmatch('%S+') do a[#a + 1] = w end
    for w in r1:gmatch('%S+') do b[#b + 1] = w end
    assert.are.equal(#a, #b)
    return a, b
  end
  it('ddp: every training step and the first validation step start from rank 0\'s buffers', function()
    local a, b = runs(h.q(h.bin) .. ' --nproc 2 spec/support/ddp_buffers_script.lua ddp 2>&1')
    assert.are.equal('t:10,10', a[1]) -- rank 1 built 20s: the setup sync replaced them
    assert.are.same(a, b)
  end)
  it('ddp with broadcast_buffers=false and horovod: rank 0\'s buffers at setup only', function()
    local a, b = runs(h.q(h.bin) .. ' --nproc 2 spec/support/ddp_buffers_script.lua ddp false 2>&1')
    assert.are.equal('t:10,10', b[1])
    assert.are_not.equal(a[2], b[2])
    if h.has_command('mpirun') then
      a, b = runs('ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -np 2 ' .. h.q(h.bin)
        .. ' spec/support/ddp_buffers_script.lua horovod 2>&1')
      assert.are.equal('t:10,10', b[1])
      assert.are_not.equal(a[2], b[2])
    end
  end)
end)
