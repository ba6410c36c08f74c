-- trainer_dist_user_spec.lua: what a user of distributed training sees, found by
-- running small jobs as one would (dplhost --nproc 2, ddp_spawn, a launcher that does
-- not match the Trainer's arguments). Every job here really launches its ranks, under a
-- timeout, so nothing can hang the suite.
local h = require 'spec.support.helpers'

-- A small run on synthetic data: a LightningModule of one Linear layer whose steps fail
-- on demand (MODE), ModelCheckpoint + EarlyStopping, the Trainer's arguments from the
-- environment (STRAT, DEV, NN); prints what the run left in the process.
local SCRIPT = [=[
local dpl = require 'dpl'
local F = dpl.nn.functional
local mode = os.getenv('MODE') or ''
local M = dpl.LightningModule:extend('UserModel')
function M:__init()
  dpl.LightningModule.__init(self)
  self.net = dpl.nn.Linear(4, 3)
end
function M:forward(x) return self.net(x) end
function M:training_step(b, i)
  if mode == 'raise' and self.global_rank == 1 and i == 1 then
    error('user error in training_step')                                       -- USER_RAISE
  end
  if mode == 'mismatch' and i == 1 then
    dpl.dist.all_reduce(dpl.ones(self.global_rank + 2))                         -- USER_COLLECTIVE
  end
  if mode == 'object' and i == 1 then
    error(dpl.errors.ValueError('user object error'))                          -- USER_OBJECT
  end
  return F.cross_entropy(self(b[1]), b[2])
end
function M:validation_step(b)
  -- rank-dependent and epoch-dependent: gets worse after epoch 1, so EarlyStopping stops
  local e = self.current_epoch
  self:log('val_loss', (e <= 1 and 10 - e or 10 + e) + self.global_rank * 0.0, { sync_dist = true })
  if mode == 'unsynced' then
    self:log('val_acc', 0.5 + self.global_rank)                -- each rank's own: warned
    self:log('val_rz', 1.0, { rank_zero_only = true })         -- asked for: not warned
  end
end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
dpl.seed_everything(0)
local X, Y = dpl.randn(16, 4), dpl.randint(1, 4, { 16 })
local ds = dpl.data.TensorDataset(X, Y)
local strat = os.getenv('STRAT')
local tr = dpl.Trainer{ strategy = strat, accelerator = 'cpu', devices = tonumber(os.getenv('DEV') or ''),
  num_nodes = tonumber(os.getenv('NN') or '1'), max_epochs = 6, default_root_dir = os.getenv('ROOT'),
  logger = os.getenv('LOGGER') == 'csv' and dpl.loggers.CSVLogger{ save_dir = os.getenv('ROOT') } or false,
  enable_progress_bar = false, enable_model_summary = false,
  callbacks = { dpl.callbacks.ModelCheckpoint{ monitor = 'val_loss', save_top_k = 2 },
                dpl.callbacks.EarlyStopping{ monitor = 'val_loss', patience = 2 } } }
tr:fit(M(), dpl.data.DataLoader(ds, { batch_size = 4 }), dpl.data.DataLoader(ds, { batch_size = 4 }))
local mc, es = tr.checkpoint_callback, tr.early_stopping_callback
local ks = {}
for k, v in pairs(mc.best_k_models) do ks[#ks + 1] = k:match('[^/]*$') .. '=' .. tostring(v) end
table.sort(ks)
print(('rank %d epoch=%d best=%s score=%s k=%s stopped=%s wait=%s es_best=%s'):format(tr.global_rank,
  tr.current_epoch, tostring(mc.best_model_path):match('[^/]*$'), tostring(mc.best_model_score),
  table.concat(ks, ','), tostring(es.stopped_epoch), tostring(es.wait_count), tostring(es.best_score)))
if tr.logger then
  local f = io.open(tr.logger.log_dir .. '/metrics.csv')
  print(('logger version=%s metrics.csv=%s'):format(tostring(tr.logger.version), tostring(f ~= nil)))
  if f then f:close() end
  tr:validate(nil, dpl.data.DataLoader(ds, { batch_size = 4 }), { verbose = false, ckpt_path = 'last' })
  print(('after validate version=%s'):format(tostring(tr.logger.version)))
end
]=]

local function run(env, nproc)
  local s = h.write_file(h.tmpname('.lua'), SCRIPT)
  local root = h.tmpname('.d')
  local out, err, rc = h.sh(('ROOT=%s %s %s %s %s'):format(h.q(root), env or '', h.q(h.bin),
    nproc and ('--nproc ' .. nproc) or '', h.q(s)), { timeout = 60 })
  os.remove(s)
  os.execute('rm -rf ' .. h.q(root))
  -- (the Trainer's INFO lines go to stdout, as Lightning's; under --nproc with a prefix)
  out = out:gsub('[^\n]*INFO: [^\n]*\n', '')
  return out, err, rc
end

local function count(s, pat)
  local _, n = s:gsub(pat, '')
  return n
end

describe('a distributed user', function()
  it('ddp_spawn: the parent gets rank 0\'s callback states (best_model_score, best_k_models, EarlyStopping),'
    .. ' as an in-process fit leaves them', function()
    local out, err, rc = run('STRAT=ddp_spawn DEV=2')
    assert.are.equal(0, rc, out .. err)
    -- epochs 0, 1 improve (10, 9), 2 and 3 do not (12, 13): stopped at epoch 3
    assert.are.equal('rank 0 epoch=4 best=epoch=1-step=4.ckpt score=9 k=epoch=0-step=2.ckpt=10,epoch=1-step=4.ckpt=9'
      .. ' stopped=3 wait=2 es_best=9\n', out)
    -- the same as ddp under the launcher (every rank)
    out, err, rc = run('STRAT=ddp DEV=2', 2)
    assert.are.equal(0, rc, out .. err)
    for r = 0, 1 do
      assert.truthy(out:find(('[rank %d] rank %d epoch=4 best=epoch=1-step=4.ckpt score=9 k=epoch=0-step=2.ckpt=10,'
        .. 'epoch=1-step=4.ckpt=9 stopped=3 wait=2 es_best=9\n'):format(r, r), 1, true), out)
    end
  end)

  it('ddp_spawn: the parent\'s logger names the version the workers wrote (version_0, not the next free one)',
    function()
    local out, err, rc = run('STRAT=ddp_spawn DEV=2 LOGGER=csv')
    assert.are.equal(0, rc, out .. err)
    assert.matches('\nlogger version=0 metrics.csv=true\n', out)
    -- a later launch (validate) writes a version of its own, as Lightning's workers do
    assert.matches('\nafter validate version=1\n', out)
  end)

  it('an error on one rank is shown with one traceback, from where it was raised (--nproc and ddp_spawn)', function()
    local out, err, rc = run('MODE=raise STRAT=ddp DEV=2', 2)
    assert.are.equal(1, rc, out .. err)
    local all = out .. err
    assert.matches('%[rank 1%] dplhost: [^\n]*: user error in training_step\n%[rank 1%] stack traceback:\n', all)
    assert.are.equal(1, count(all, '%[rank 1%] stack traceback:'), all)
    assert.matches("%[rank 1%] \t[^\n]*%.lua:%d+: in function <[^\n]*>\n", all) -- the user's training_step
    assert.matches('dplhost: rank 1 %(pid %d+%) failed with exit code 1', all)

    out, err, rc = run('MODE=raise STRAT=ddp_spawn DEV=2')
    assert.are.equal(1, rc, out .. err)
    assert.matches('^dplhost: ProcessRaisedException: dist.spawn: rank 1 of 2 raised: [^\n]*: user error in training_step\n'
      .. 'stack traceback:\n', err)
    assert.are.equal(1, count(err, 'stack traceback:'), err)
    assert.is_nil(err:find('strategies/spawn.lua', 1, true), err) -- not the machinery's re-raise
  end)

  it('an error object (DistError of a collective, a user ValueError) keeps where it was raised', function()
    -- ranks disagree on an all_reduce in their training_step: the traceback leads to it
    local out, err, rc = run('MODE=mismatch STRAT=ddp DEV=2', 2)
    assert.are.equal(1, rc, out .. err)
    local all = out .. err
    assert.matches('%[rank %d%] dplhost: DistError: dist: collective mismatch: rank 0 called all_reduce #%d+ %(float32 x 2,'
      .. ' sum%) but rank 1 called all_reduce #%d+ %(float32 x 3, sum%)', all)
    assert.matches("%[rank %d%] \t[^\n]*/dist%.lua:%d+: in function 'all_reduce'\n%[rank %d%] \t[^\n]*%.lua:%d+: in"
      .. ' function <', all)
    assert.is_nil(all:find("[C]: in function 'error'\n[^\n]*trainer/init.lua", 1, false), all)

    out, err, rc = run('MODE=object')
    assert.are.equal(1, rc, out .. err)
    assert.matches('^dplhost: ValueError: user object error\nstack traceback:\n[^\n]*\n?[^\n]*%.lua:%d+: in function <',
      err)
    assert.are.equal(1, count(err, 'stack traceback:'), err)
  end)

  it('an epoch-level value logged without sync_dist under several ranks gets Lightning\'s warning, once, on rank 0',
    function()
    local out, err, rc = run('MODE=unsynced STRAT=ddp DEV=2', 2)
    assert.are.equal(0, rc, out .. err)
    local all = out .. err
    local warning = "WARNING: It is recommended to use `self:log('val_acc', ..., { sync_dist = true })` when logging on"
      .. ' epoch level in distributed setting to accumulate the metric across devices.'
    assert.are.equal(1, count(all, '%[rank 0%] ' .. warning:gsub('%p', '%%%0')), all)
    assert.are.equal(1, count(all, 'It is recommended'), all)
    -- one process: nothing to sync, no warning
    out, err, rc = run('MODE=unsynced')
    assert.are.equal(0, rc, out .. err)
    assert.is_nil((out .. err):find('It is recommended', 1, true), out .. err)
  end)

  it('a launch that does not match num_nodes is refused with a remedy that would work', function()
    -- devices not given: the launcher decides the processes per node, but 2 nodes were asked for
    local out, err, rc = run('STRAT=ddp NN=2', 2)
    assert.are.equal(1, rc, out .. err)
    out = out .. err
    assert.matches("%[rank %d%] dplhost: MisconfigurationException: strategy='ddp': num_nodes=2, but the launcher"
      .. ' started 2 process%(es%), 2 on this node %(1 node%(s%)%): set num_nodes=1, or start 2 process%(es%) on each'
      .. ' of 2 nodes %(dplhost %-%-nproc 2 %-%-nnodes 2 %-%-node%-rank <k> on node k, or mpirun / srun%)', out)
    -- devices=1, num_nodes=2 under one process: not "set devices=1, or dplhost --nproc 1" (what it is)
    out, err, rc = run('STRAT=ddp DEV=1 NN=2', 1)
    assert.are.equal(1, rc, out .. err)
    out = out .. err
    assert.matches("ask for 2 process%(es%), 1 on each node, but the launcher started 1 %(1 on this node%): set"
      .. ' devices=1 and num_nodes=1, or start 1 process%(es%) on each of 2 nodes %(dplhost %-%-nproc 1 %-%-nnodes 2', out)
    -- still fine: devices not given and one node; devices given that match
    out, err, rc = run('STRAT=ddp', 2)
    assert.are.equal(0, rc, out .. err)
  end)
end)

describe('a distributed user under mpirun', function()
  local d = require 'spec.support.dist_helpers'
  if not d.has_mpi then
    pending('mpirun is not installed')
    return
  end
  local vader_before
  before_each(function() vader_before = d.vader_files() end)
  after_each(function() d.vader_cleanup(vader_before) end)

  it('an error on rank 1 ends the job; the abort line names the rank', function()
    local s = h.write_file(h.tmpname('.lua'), SCRIPT)
    local root = h.tmpname('.d')
    local out, err, rc, took = d.mpirun(2, s, '', { env = { MODE = 'raise', STRAT = 'ddp', DEV = 2, ROOT = root } })
    os.remove(s)
    os.execute('rm -rf ' .. h.q(root))
    assert.is_true(rc ~= 0, out .. err)
    assert.is_true(took < 30, 'took ' .. took)
    assert.matches('dplhost: [^\n]*: user error in training_step\nstack traceback:\n', err)
    assert.matches('dplhost: dist %(mpi%): rank 1 exits with status 1; aborting the MPI job', err)
  end)
end)
