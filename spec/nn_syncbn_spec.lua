-- nn_syncbn_spec.lua: nn.SyncBatchNorm — across 2 real ranks (dplhost --nproc 2, uneven
-- halves of a batch) it matches nn.BatchNorm2d on the whole batch: output, input and
-- parameter gradients, running statistics; on one rank / in eval it is BatchNorm;
-- convert_sync_batchnorm swaps the layers keeping their parameters and buffers.
local dpl = require 'dpl'
local nn = dpl.nn
local h = require 'spec.support.helpers'

describe('nn.SyncBatchNorm', function()
  it('over 2 ranks equals BatchNorm2d over the whole batch (forward, backward, running stats)', function()
    local out, err, rc = h.dplhost('--nproc 2 spec/support/syncbn_script.lua', { timeout = 60 })
    assert.equal(0, rc, err)
    for r = 0, 1 do
      local line = out:match('%[rank ' .. r .. '%] (rank ' .. r .. ' out [^\n]+)')
      assert.truthy(line, out)
      local n = 0
      for v in line:gmatch(' (%-?[%d.e+-]+)') do
        n = n + 1
        if n > 1 then assert.is_true(tonumber(v) < 1e-5, line) end
      end
      assert.are.equal(7, n, line)
      assert.truthy(out:find(('[rank %d] rank %d eval 0\n'):format(r, r), 1, true), out)
    end
  end)

  it('without a process group, or in eval, computes what BatchNorm computes', function()
    dpl.manual_seed(1)
    local x = dpl.randn(5, 4, 3)
    local a, b = nn.BatchNorm1d(4), nn.SyncBatchNorm(4, { momentum = 0.3, eps = 1e-3 })
    a.momentum, a.eps = 0.3, 1e-3
    assert.are.same(a(x):totable(), b(x):totable())
    assert.are.same(a.running_var:totable(), b.running_var:totable())
    a:eval() b:eval()
    assert.are.same(a(x):totable(), b(x):totable())
    local ok, e = pcall(b, dpl.randn(5, 3))
    assert.is_false(ok)
    assert.truthy(tostring(e):find('SyncBatchNorm(4): input has shape [5, 3]', 1, true), tostring(e))
    ok, e = pcall(nn.SyncBatchNorm, 4, { groups = 2 })
    assert.is_false(ok)
    assert.truthy(tostring(e):find('groups', 1, true), tostring(e))
  end)

  it('convert_sync_batchnorm swaps every BatchNorm, sharing parameters and buffers', function()
    local inner = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2, { momentum = false }))
    local m = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3, { affine = false }), inner)
    m:eval()
    local w, rm = inner[2].weight, inner[2].running_mean
    local r = nn.SyncBatchNorm.convert_sync_batchnorm(m)
    assert.are.equal(m, r)
    local s1, s2 = m[2], m[3][2]
    assert.are.equal('SyncBatchNorm', getmetatable(s1).__name)
    assert.are.equal('SyncBatchNorm', getmetatable(s2).__name)
    assert.is_false(s1.affine)
    assert.is_nil(s1.weight)
    assert.are.equal(w, s2.weight)
    assert.are.equal(rm, s2.running_mean)
    assert.are.equal(false, s2.momentum)
    assert.is_false(s2.training)
    -- the state dict keys stay those of the BatchNorm layers
    local keys = {}
    for k in pairs(m:state_dict()) do keys[#keys + 1] = k end
    table.sort(keys)
    assert.truthy(table.concat(keys, ' '):find('3.2.running_mean', 1, true), table.concat(keys, ' '))
    -- a BatchNorm given itself comes back as a new SyncBatchNorm
    local b = nn.BatchNorm1d(2)
    local sb = nn.SyncBatchNorm.convert_sync_batchnorm(b)
    assert.are_not.equal(b, sb)
    assert.are.equal(b.weight, sb.weight)
    assert.is_false(pcall(nn.SyncBatchNorm.convert_sync_batchnorm, 3))
  end)
end)
