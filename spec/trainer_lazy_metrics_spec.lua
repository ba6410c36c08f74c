-- trainer_lazy_metrics_spec.lua: values logged as GPU tensors reach the Trainer's
-- metric dicts only when something can see them (docs/trainer.md, "Logging on a GPU"):
-- the dicts, the CSV log and what a user callback reads at each batch end are the same
-- as on the CPU, and without such a callback the values stay queued between steps (no
-- wait for the GPU per step). GPUs: DPL_VIRTUAL_GPUS (host-backed, same kernels as the
-- CPU, so the numbers match exactly).
local h = require 'spec.support.helpers'
local script = h.root .. '/spec/support/trainer_lazy_metrics_script.lua'

local function run(env, accel, watch)
  local dir = h.tmpname('')
  local out, err, rc = h.sh(('%s %s %s %s %s %s'):format(env, h.q(h.bin), h.q(script), accel, watch, h.q(dir)),
    { timeout = 60 })
  os.execute('rm -rf ' .. h.q(dir))
  assert.are.equal(0, rc, err)
  local lines, extra = {}, {}
  for l in out:gmatch('[^\n]+') do
    if l:match('^max_queued') or l:match('^watch') then extra[#extra + 1] = l
    elseif not l:match('^INFO') then lines[#lines + 1] = l end
  end
  return lines, extra
end

describe('Trainer logging of GPU tensors', function()
  it('gives the CPU run\'s metric dicts and CSV rows, without waiting for the GPU each step', function()
    local cpu, cpu_x = run('', 'cpu', 'watch')
    local gpu, gpu_x = run('DPL_VIRTUAL_GPUS=1', 'gpu', '-')
    assert.is_true(#cpu > 20, table.concat(cpu, '\n'))
    assert.are.same(cpu, gpu)
    assert.are.equal('watch 12 of 12 batch ends saw the step loss', cpu_x[2])
    -- on the GPU the step values of the previous step were still queued at training_step
    assert.are.equal('max_queued 3', gpu_x[1])
  end)

  it('brings the values in before a user callback reads callback_metrics', function()
    local gpu, x = run('DPL_VIRTUAL_GPUS=1', 'gpu', 'watch')
    local cpu = run('', 'cpu', '-')
    assert.are.same(cpu, gpu)
    assert.are.equal('max_queued 0', x[1])
    assert.are.equal('watch 12 of 12 batch ends saw the step loss', x[2])
  end)
end)
