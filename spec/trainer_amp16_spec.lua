-- trainer_amp16_spec.lua: precision '16-mixed' (float16 autocast with dynamic loss
-- scaling, Lightning's MixedPrecisionPlugin) on a simulated GPU, and dpl.amp.GradScaler
-- itself (torch.cuda.amp.GradScaler's formulas).
local h = require 'spec.support.helpers'
local script = 'spec/support/amp16_script.lua'

local function run(args)
  return h.sh(('DPL_VIRTUAL_GPUS=1 CUDA_VISIBLE_DEVICES= %s %s %s'):format(h.q(h.bin), script, args), { timeout = 60 })
end

describe("precision='16-mixed' on a (simulated) GPU", function()
  it('runs the steps in float16 with a scaled loss, skips the step of inf gradients and halves the scale', function()
    local out, err, rc = run('train')
    assert.are.equal(0, rc, err)
    assert.matches('scale0 65536', out)
    for i = 1, 4 do assert.matches(('seen %d float16 float32 true'):format(i), out) end
    -- steps 1, 2 and 4 update the weights; step 3's gradients are inf: skipped, scale halved
    assert.matches('step 1 changed true scale 65536', out)
    assert.matches('step 2 changed true scale 65536', out)
    assert.matches('step 3 changed false scale 32768', out)
    assert.matches('step 4 changed true scale 32768', out)
    -- the hooks before backward see the scaled loss; the optimizer, unscaled gradients
    local scaled = tonumber(out:match('scaled_loss ([%d%.e+-]+)'))
    assert.is_true(scaled > 1000, out)
    local g16, g32 = tonumber(out:match('grad_max1 ([%d%.e+-]+)')), tonumber(out:match('grad_max1_fp32 ([%d%.e+-]+)'))
    assert.is_true(math.abs(g16 - g32) < 1e-2 * g32, ('%s vs %s'):format(g16, g32))
    assert.matches('autocast_after false', out)
  end)

  it('saves the scaler in the checkpoint and restores it on resume', function()
    local dir = h.tmpname('')
    local out, err, rc = run('ckpt ' .. h.q(dir))
    os.execute('rm -rf ' .. h.q(dir))
    assert.are.equal(0, rc, err)
    assert.matches('ckpt_scale 32768', out)
    assert.matches('resumed_scale 32768', out) -- a fresh scaler would start at 65536
  end)
end)

describe('dpl.amp.GradScaler', function()
  local dpl = require 'dpl'
  local amp = require 'dpl.amp'

  local function setup(g)
    local p = dpl.tensor({ 1, 2 }, { dtype = 'float32' }):requires_grad_()
    local opt = dpl.optim.SGD({ p }, { lr = 1 })
    p.grad = dpl.tensor(g, { dtype = 'float32' })
    return p, opt
  end

  it('unscales once, steps, and grows the scale after growth_interval good steps', function()
    local s = amp.GradScaler({ init_scale = 8, growth_interval = 2 })
    assert.are.equal(8, s:get_scale())
    assert.are.equal(16, s:scale(dpl.tensor(2)):item())
    local p, opt = setup({ 8, 16 })
    s:unscale_(opt)
    assert.are.same({ 1, 2 }, p.grad:totable())
    assert.matches('unscale_%(%) has already been called', tostring(select(2, pcall(s.unscale_, s, opt))))
    s:step(opt)
    assert.are.same({ 0, 0 }, p:detach():totable())
    s:update()
    assert.are.equal(8, s:get_scale())
    p.grad = dpl.tensor({ 8, 8 }, { dtype = 'float32' })
    s:step(opt) -- unscales by itself
    s:update()
    assert.are.equal(16, s:get_scale()) -- two good steps: x growth_factor
    assert.are.same({ scale = 16, growth_factor = 2, backoff_factor = 0.5, growth_interval = 2, _growth_tracker = 0 },
      s:state_dict())
  end)

  it('skips the step and backs off on inf or NaN gradients', function()
    for _, bad in ipairs({ math.huge, 0 / 0 }) do
      local s = amp.GradScaler({ init_scale = 4 })
      local p, opt = setup({ 1, bad })
      assert.is_nil(s:step(opt))
      assert.is_true(s:found_inf(opt))
      assert.are.same({ 1, 2 }, p:detach():totable()) -- untouched
      s:update()
      assert.are.equal(2, s:get_scale())
    end
  end)

  it('finds an inf or NaN in any of several GPU gradients (one read-back for all of them)', function()
    local out, err, rc = h.run_chunk([[
      local dpl = require 'dpl'
      local amp = require 'dpl.amp'
      for _, bad in ipairs({ 'none', 'inf', 'nan' }) do
        local ps = {}
        for i = 1, 3 do ps[i] = dpl.ones(4):to(i == 3 and 'cuda:1' or 'cuda:0'):requires_grad_() end
        for i = 1, 3 do ps[i].grad = dpl.ones(4):to(ps[i].device) end
        if bad ~= 'none' then ps[2].grad[3] = bad == 'inf' and math.huge or 0 / 0 end
        local opt = dpl.optim.SGD(ps, { lr = 1 })
        local s = amp.GradScaler({ init_scale = 4 })
        local r = s:step(opt)
        print(bad, tostring(s:found_inf(opt)), ps[1]:detach()[1]:item())
      end
    ]], 'DPL_VIRTUAL_GPUS=2 CUDA_VISIBLE_DEVICES=')
    assert.are.equal(0, rc, err)
    assert.are.equal('none\tfalse\t0.75\ninf\ttrue\t1\nnan\ttrue\t1\n', out)
  end)

  it('restores its state and refuses bad settings', function()
    local s = amp.GradScaler()
    s:load_state_dict({ scale = 128, growth_factor = 4, backoff_factor = 0.25, growth_interval = 10, _growth_tracker = 3 })
    assert.are.equal(128, s:get_scale())
    assert.are.equal(3, s:state_dict()._growth_tracker)
    assert.are.equal(5, amp.GradScaler({ enabled = false }):scale(dpl.tensor(5)):item())
    assert.matches('growth_factor must be > 1, got 1', tostring(select(2, pcall(amp.GradScaler, { growth_factor = 1 }))))
    assert.matches('backoff_factor must be in %(0, 1%), got 2', tostring(select(2, pcall(amp.GradScaler, { backoff_factor = 2 }))))
    assert.matches('growth_interval must be a positive integer, got 0.5',
      tostring(select(2, pcall(amp.GradScaler, { growth_interval = 0.5 }))))
    assert.matches("autocast: dtype int8 is not supported", tostring(select(2, pcall(amp.autocast, 'int8', function() end))))
  end)
end)
