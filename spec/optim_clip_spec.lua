-- optim_clip_spec.lua: nn.utils.clip_grad_norm_ against PyTorch 1.13 (spec/fixtures/optim_ref.lua's
-- clip cases: norm types 2, 1, 3, 0.5, 0, -1, -2, inf; a NaN, an inf or zero gradient) on the
-- CPU and on the on-device path (a simulated GPU; the CUDA emulator when built): the same total
-- and gradients on both; a NaN total makes every gradient NaN; norm_type 0 counts the
-- gradients whose norm is not 0.
local h = require 'spec.support.helpers'
local dpl = require 'dpl'
local nn = dpl.nn

local script = 'spec/support/optim_clip_script.lua'

describe('clip_grad_norm_ matches PyTorch', function()
  it('on the CPU', function()
    local out, err, rc = h.dplhost(script, { timeout = 60 })
    assert.are.equal(0, rc, err)
    assert.truthy(out:find('clip cases: 32 ok, 0 failed', 1, true), out)
  end)

  it('on a simulated GPU (the on-device path)', function()
    local out, err, rc = h.sh('DPL_VIRTUAL_GPUS=1 ' .. h.q(h.bin) .. ' ' .. script .. ' cuda', { timeout = 60 })
    assert.are.equal(0, rc, err)
    assert.truthy(out:find('clip cases: 32 ok, 0 failed', 1, true), out)
  end)

  it('under the CUDA emulator (when built: make cuda-emu)', function()
    local f = io.open(h.root .. '/build/cuda-emu/dpl_cuda_emu.so', 'rb')
    if not f then pending('the emulator is not built') return end
    f:close()
    local out, err, rc = h.sh(h.q(h.root .. '/scripts/cuda-emu/run-ops.sh') .. ' ' .. script .. ' cuda', { timeout = 120 })
    assert.are.equal(0, rc, err)
    assert.truthy(out:find('clip cases: 32 ok, 0 failed', 1, true), out)
  end)

  it('a NaN gradient on the CPU: every gradient NaN (they were left unscaled)', function()
    local a, b = dpl.zeros(3):requires_grad_(), dpl.zeros(2):requires_grad_()
    a.grad, b.grad = dpl.tensor({ 0 / 0, 1, 1 }, { dtype = 'float32' }), dpl.tensor({ 12, -1 }, { dtype = 'float32' })
    local total = nn.utils.clip_grad_norm_({ a, b }, 1.0)
    assert.is_true(total ~= total)
    assert.is_true(b.grad:isnan():all():item())
  end)

  it('norm_type 0 and "inf"; bad arguments are clear errors', function()
    local a = dpl.zeros(3):requires_grad_()
    a.grad = dpl.tensor({ 3.0, -4, 0 }, { dtype = 'float32' })
    assert.are.equal(1, nn.utils.clip_grad_norm_({ a }, 10, 0)) -- was inf
    assert.are.equal(4, nn.utils.clip_grad_norm_({ a }, 10, 'inf'))
    local ok, e = pcall(nn.utils.clip_grad_norm_, { a }, 1, 'two')
    assert.is_false(ok)
    assert.are.equal("ValueError: clip_grad_norm_: norm_type must be a number or 'inf', got two", tostring(e))
    ok, e = pcall(nn.utils.clip_grad_norm_, { a }, 'a')
    assert.are.equal('ValueError: clip_grad_norm_: max_norm must be a number', tostring(e))
  end)
end)
