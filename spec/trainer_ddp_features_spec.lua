-- The newer pieces under real DDP runs (dplhost --nproc 2, ddp_spawn, mpirun): dpl.metrics
-- logged in every stage (against Lightning 1.9.5 + torchmetrics 0.11.4), EarlyStopping and
-- ModelCheckpoint monitoring metrics, the nn parametrizations, pruning, activation
-- checkpointing, EmbeddingBag and Conv3d (ranks identical, equal to one process with the
-- global batch), LazyLinear, predict's sampler, and resuming a run with parametrized modules.
local h = require 'spec.support.helpers'
local th = require 'spec.support.trainer_helpers'

-- each rank's lines "R<rank> ..." (under --nproc they carry a "[rank k] " prefix)
local function lines_of(out)
  local r = {}
  for line in out:gmatch('[^\n]+') do
    local k, rest = line:match('^%[rank %d%] R(%d) (.*)$')
    if not k then k, rest = line:match('^R(%d) (.*)$') end
    if k then
      k = tonumber(k)
      r[k] = r[k] or {}
      r[k][#r[k] + 1] = rest
    end
  end
  return r
end
local function nproc(script, args)
  local out, err, rc = h.dplhost('--nproc 2 spec/support/' .. script .. ' ' .. args, { timeout = 60 })
  return lines_of(out), out .. err, rc
end
local function one(script, args)
  local out, err, rc = h.dplhost('spec/support/' .. script .. ' ' .. args, { timeout = 60 })
  return lines_of(out), out .. err, rc
end
-- "k=v1,v2 k2=..." digests equal within tol
local function same_digest(a, b, tol)
  local ta, tb = {}, {}
  for k, v in a:gmatch('(%S+)=(%S+)') do ta[#ta + 1] = { k, v } end
  for k, v in b:gmatch('(%S+)=(%S+)') do tb[#tb + 1] = { k, v } end
  if #ta ~= #tb or #ta == 0 then return false, ('%d keys against %d'):format(#ta, #tb) end
  for i = 1, #ta do
    if ta[i][1] ~= tb[i][1] then return false, ta[i][1] .. ' against ' .. tb[i][1] end
    local xa, xb = {}, {}
    for x in ta[i][2]:gmatch('[^,]+') do xa[#xa + 1] = tonumber(x) end
    for x in tb[i][2]:gmatch('[^,]+') do xb[#xb + 1] = tonumber(x) end
    if #xa ~= #xb then return false, ta[i][1] .. ': sizes differ' end
    for j = 1, #xa do
      if math.abs(xa[j] - xb[j]) > tol * (1 + math.abs(xa[j])) then
        return false, ('%s[%d]: %s against %s'):format(ta[i][1], j, xa[j], xb[j])
      end
    end
  end
  return true
end

describe('dpl.metrics under DDP', function()
  -- Lightning 1.9.5 + torchmetrics 0.11.4 (same data, weights, unshuffled DistributedSampler):
  -- one process and 2 ranks; epoch values cover every rank's items (rank 1's padding item
  -- included, as Lightning's sampler repeats it), the step value is the rank's own last batch
  local single_fit = 'train_acc=0.636364 train_acc_epoch=0.636364 train_acc_step=1.000000 val_acc=0.727273'
    .. ' val_auroc=0.800000 val_sp=0.927273'
  local single_test = 'test_MulticlassAccuracy=0.727273 test_MulticlassF1Score=0.717949'
  local ddp_fit = 'train_acc=0.583333 train_acc_epoch=0.583333 train_acc_step=0.666667 val_acc=0.583333'
    .. ' val_auroc=0.777778 val_sp=0.922807'
  local ddp_test = 'test_MulticlassAccuracy=0.583333 test_MulticlassF1Score=0.580420'

  it("logged in training, validation and test: Lightning's values on one process, ddp and ddp_spawn", function()
    local l, all, rc = one('metrics_ddp_script.lua', 'values')
    assert.equal(0, rc, all)
    assert.same({ 'fit ' .. single_fit, 'test ' .. single_test }, l[0], all)
    l, all, rc = nproc('metrics_ddp_script.lua', 'values ddp')
    assert.equal(0, rc, all)
    for r = 0, 1 do assert.same({ 'fit ' .. ddp_fit, 'test ' .. ddp_test }, l[r], all) end
    l, all, rc = one('metrics_ddp_script.lua', 'values ddp_spawn')
    assert.equal(0, rc, all)
    assert.same({ 'fit ' .. ddp_fit, 'test ' .. ddp_test }, l[0], all)
  end)

  it('the same values on the mpi backend (mpirun -np 2)', function()
    if not h.has_command('mpirun') then return pending('mpirun is not installed') end
    local out, err, rc = h.sh(('ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -np 2 %s %s'):format(
      h.q(h.bin), 'spec/support/metrics_ddp_script.lua values ddp'), { timeout = 60 })
    assert.equal(0, rc, out .. err)
    local l = lines_of(out)
    for r = 0, 1 do assert.same({ 'fit ' .. ddp_fit, 'test ' .. ddp_test }, l[r], out .. err) end
  end)

  it('EarlyStopping and ModelCheckpoint monitoring metric values stop and save at the same epoch on every rank',
    function()
    local dir = th.tmpdir()
    local l, all, rc = nproc('metrics_ddp_script.lua', 'stop ddp ' .. h.q(dir))
    assert.equal(0, rc, all)
    local want = 'epoch=3 step=15 stopped=2 best=epoch=1-step=10.ckpt best2=step-epoch=1-step=10.ckpt vacc=0.425000'
      .. ' tmean_epoch=6.4653'
    assert.same({ want }, l[0], all)
    assert.same({ want }, l[1], all)
    local p = io.popen('ls ' .. h.q(dir))
    local files = p:read('*a'); p:close()
    assert.equal('epoch=1-step=10.ckpt\nepoch=2-step=15.ckpt\nstep-epoch=1-step=10.ckpt\n', files)
  end)
end)

describe('nn pieces under DDP', function()
  it('parametrizations, pruning, checkpointing, EmbeddingBag, Conv3d: ranks identical and equal to one process',
    function()
    local s, all1, rc1 = one('ddp_features_script.lua', 'nn single')
    assert.equal(0, rc1, all1)
    local d, all, rc = nproc('ddp_features_script.lua', 'nn ddp')
    assert.equal(0, rc, all)
    assert.equal(d[0][1], d[1][1]) -- bitwise: every parameter and buffer, masks and _u/_v included
    local ok, why = same_digest(s[0][1], d[0][1], 1e-4)
    assert(ok, why)
    local sp, alls, rcs = one('ddp_features_script.lua', 'nn ddp_spawn')
    assert.equal(0, rcs, alls)
    ok, why = same_digest(s[0][1], sp[0][1], 1e-4)
    assert(ok, why)
  end)

  it("LazyLinear: refused before its first forward (PyTorch's DDP error), trained alike on every rank after one",
    function()
    local _, all, rc = nproc('ddp_features_script.lua', 'lazy')
    assert.not_equal(0, rc, all)
    assert.matches("Modules with uninitialized parameters can't be used with `DistributedDataParallel`", all, 1, true)
    assert.matches('net.1 (LazyLinear)', all, 1, true)
    local d
    d, all, rc = nproc('ddp_features_script.lua', 'lazy dummy')
    assert.equal(0, rc, all)
    assert.equal(d[0][1], d[1][1])
    -- Fabric's setup too
    local f = h.write_file(h.tmpname('.lua'), [[
      local dpl = require 'dpl'
      dpl.Fabric{ accelerator = 'cpu', strategy = 'ddp', devices = 2 }:launch(function(f)
        local net = dpl.nn.Sequential(dpl.nn.LazyLinear(2), dpl.nn.Linear(2, 2))
        local ok, e = pcall(f.setup, f, net, dpl.optim.SGD(net:parameters(), { lr = 0.1 }))
        print(('R%d %s %s'):format(f.global_rank, tostring(ok), tostring(e)))
      end)]])
    local out, err
    out, err, rc = h.dplhost('--nproc 2 ' .. h.q(f), { timeout = 60 })
    assert.equal(0, rc, out .. err)
    local l = lines_of(out)
    for r = 0, 1 do
      assert.matches("^false RuntimeError: Fabric.setup: Modules with uninitialized parameters can't be used", l[r][1])
    end
  end)
end)

describe('predict under DDP', function()
  it('UnrepeatedDistributedSampler(Wrapper): every item to one rank once, no padding', function()
    local data = require('dpl').data
    local function l(smp) return table.concat(smp:indices(), ',') .. '#' .. smp:__len() end
    assert.equal('1,3,5#3', l(data.UnrepeatedDistributedSampler{ size = 5, num_replicas = 2, rank = 0, shuffle = false }))
    assert.equal('2,4#2', l(data.UnrepeatedDistributedSampler{ size = 5, num_replicas = 2, rank = 1, shuffle = false }))
    assert.equal('#0', l(data.UnrepeatedDistributedSampler{ size = 1, num_replicas = 2, rank = 1 }))
    assert.equal('3#1', l(data.UnrepeatedDistributedSamplerWrapper{ sampler = data.SequentialSampler(5), num_replicas = 3,
      rank = 2 }))
    local all = {}
    for r = 0, 1 do
      for _, i in ipairs(data.UnrepeatedDistributedSampler{ size = 7, num_replicas = 2, rank = r, seed = 3 }:indices()) do
        all[#all + 1] = i
      end
    end
    table.sort(all)
    assert.equal('1,2,3,4,5,6,7', table.concat(all, ','))
  end)

  it("gives each item to one rank only (Lightning's UnrepeatedDistributedSampler: no padding)", function()
    local l, all, rc = nproc('ddp_features_script.lua', 'predict')
    assert.equal(0, rc, all)
    assert.same({ 'predicted 1,3,5,7,9,11 batches 3' }, l[0], all)
    assert.same({ 'predicted 2,4,6,8,10 batches 3' }, l[1], all)
  end)
end)

describe('checkpoints under DDP', function()
  it('1 epoch + resume equals 2 epochs straight, with parametrized and pruned modules and a logged metric', function()
    local dir = th.tmpdir()
    local a, all, rc = nproc('ddp_features_script.lua', 'resume straight ' .. h.q(dir))
    assert.equal(0, rc, all)
    _, all, rc = nproc('ddp_features_script.lua', 'resume first ' .. h.q(dir))
    assert.equal(0, rc, all)
    local b
    b, all, rc = nproc('ddp_features_script.lua', 'resume resume ' .. h.q(dir))
    assert.equal(0, rc, all)
    assert.equal(a[0][1], b[0][1])
    assert.equal(b[0][1], b[1][1])
    for _, k in ipairs({ 'a.parametrizations.weight.original=', 'a.parametrizations.weight.1._u=', 'b.weight_g=',
      'c.parametrizations.weight.original=', 'd.weight_orig=', 'd.weight_mask=' }) do
      assert.matches(k, b[0][1], 1, true)
    end
  end)
end)
