-- Hook order of fit / validate / test / predict / resumed fit against Lightning
-- 1.9's reference (lightning-hooks.md §2-§4), with stand-in loss/optimizer.
local dpl = require 'dpl'
local th = require 'spec.support.trainer_helpers'

local function eval_block(noun, i)
  return {
    'on_before_batch_transfer(table, 0)', 'transfer_batch_to_device(table, cpu, 0)', 'on_after_batch_transfer(table, 0)',
    ('C.on_%s_batch_start(table, %d, 0)'):format(noun, i), ('on_%s_batch_start(table, %d, 0)'):format(noun, i),
    'forward(table)', ('%s_step(table, %d)'):format(noun == 'validation' and 'validation' or noun, i),
    ('%s_step_end(%s)'):format(noun, noun == 'test' and '{y}' or '{x}'),
    ('C.on_%s_batch_end(%s, table, %d, 0)'):format(noun, noun == 'test' and '{y}' or '{x}', i),
    ('on_%s_batch_end(%s, table, %d, 0)'):format(noun, noun == 'test' and '{y}' or '{x}', i),
  }
end

local function eval_loop(noun, n)
  local out = { 'train(false)', 'on_' .. noun .. '_model_eval()', 'zero_grad()',
    'C.on_' .. noun .. '_start()', 'on_' .. noun .. '_start()',
    'C.on_' .. noun .. '_epoch_start()', 'on_' .. noun .. '_epoch_start()' }
  for i = 0, n - 1 do for _, c in ipairs(eval_block(noun, i)) do out[#out + 1] = c end end
  for _, c in ipairs({ noun .. '_epoch_end(table)', 'C.on_' .. noun .. '_epoch_end()', 'on_' .. noun .. '_epoch_end()',
    'C.on_' .. noun .. '_end()', 'on_' .. noun .. '_end()', 'train(true)', 'on_' .. noun .. '_model_train()' }) do
    out[#out + 1] = c
  end
  return out
end

local function train_block(i, last)
  local out = {
    'on_before_batch_transfer(table, 0)', 'transfer_batch_to_device(table, cpu, 0)', 'on_after_batch_transfer(table, 0)',
    ('C.on_train_batch_start(table, %d)'):format(i), ('on_train_batch_start(table, %d)'):format(i),
    'forward(table)', ('training_step(table, %d)'):format(i), 'training_step_end({loss})',
    'C.on_before_zero_grad(SGD)', 'on_before_zero_grad(SGD)', ('optimizer_zero_grad(0, %d, SGD, 0)'):format(i),
    'C.on_before_backward(loss)', 'on_before_backward(loss)', 'backward(loss, SGD, 0)',
    'C.on_after_backward()', 'on_after_backward()',
    'C.on_before_optimizer_step(SGD, 0)', 'on_before_optimizer_step(SGD, 0)',
    'clip_gradients(SGD, nil, nil)', 'configure_gradient_clipping(SGD, 0, nil, nil)',
    ('optimizer_step(0, %d, LightningOptimizer, 0, function, false, false)'):format(i),
  }
  if last then out[#out + 1] = 'lr_scheduler_step(StepLR, 0, nil)' end
  out[#out + 1] = ('C.on_train_batch_end({loss}, table, %d)'):format(i)
  out[#out + 1] = ('on_train_batch_end({loss}, table, %d)'):format(i)
  return out
end

local function cat(...)
  local out = {}
  for _, l in ipairs({ ... }) do for _, c in ipairs(l) do out[#out + 1] = c end end
  return out
end

local function normalise(calls)
  for i, c in ipairs(calls) do
    calls[i] = c:gsub('function: 0x%x+', 'function'):gsub('LightningOptimizer%b()', 'LightningOptimizer')
  end
  return calls
end

local function trainer(extra)
  local o = { max_epochs = 1, limit_train_batches = 2, limit_val_batches = 2, enable_progress_bar = false,
    enable_model_summary = false, default_root_dir = th.tmpdir() }
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end

describe('Trainer hook order (Lightning 1.9)', function()
  it('fit: setup, sanity check, train, in-epoch validation, checkpoint, teardown', function()
    local calls = {}
    local Model, CB = th.recording_model(calls), th.recording_callback(calls)
    local o = trainer(); o.callbacks = { CB() }
    local t = dpl.Trainer(o)
    t:fit(Model())
    local expected = cat(
      { 'configure_callbacks()', 'prepare_data()', "C.setup('fit')", "setup('fit')", 'configure_sharded_model()',
        'configure_optimizers()', 'C.on_fit_start()', 'on_fit_start()', 'C.on_sanity_check_start()', 'val_dataloader()' },
      eval_loop('validation', 2),
      { 'C.on_sanity_check_end()', 'train(true)', 'train_dataloader()', 'C.on_train_start()', 'on_train_start()',
        'C.on_train_epoch_start()', 'on_train_epoch_start()' },
      train_block(0, false), train_block(1, true),
      eval_loop('validation', 2),
      { 'training_epoch_end(table)', 'C.on_train_epoch_end()', 'C.state_dict()', 'C.on_save_checkpoint(table)',
        'on_save_checkpoint(table)', 'on_train_epoch_end()', 'C.on_train_end()', 'on_train_end()',
        'C.on_fit_end()', 'on_fit_end()', "C.teardown('fit')", "teardown('fit')" })
    assert.same(expected, normalise(calls))
    assert.equal(1, t.current_epoch)
    assert.equal(2, t.global_step)
    assert.truthy(t.checkpoint_callback.best_model_path:match('epoch=0%-step=2%.ckpt$'))
  end)

  for _, case in ipairs({ { 'validate', 'validation', 'val' }, { 'test', 'test', 'test' } }) do
    local verb, noun, dl = case[1], case[2], case[3]
    for _, batches in ipairs({ 0, 2 }) do
      it(verb .. ' with ' .. batches .. ' batches', function()
        local calls = {}
        local Model, CB = th.recording_model(calls), th.recording_callback(calls)
        local o = trainer(); o.callbacks = { CB() }
        o['limit_' .. dl .. '_batches'] = batches
        local t = dpl.Trainer(o)
        local res = t[verb](t, Model(), nil, { verbose = false })
        local expected = { 'configure_callbacks()', 'prepare_data()', ("C.setup('%s')"):format(verb),
          ("setup('%s')"):format(verb), 'configure_sharded_model()' }
        if batches > 0 then
          expected[#expected + 1] = dl .. '_dataloader()'
          for _, c in ipairs(eval_loop(noun, batches)) do expected[#expected + 1] = c end
        end
        expected[#expected + 1] = ("C.teardown('%s')"):format(verb)
        expected[#expected + 1] = ("teardown('%s')"):format(verb)
        assert.same(expected, normalise(calls))
        assert.same('table', type(res))
      end)
    end
  end

  it('predict', function()
    local calls = {}
    local Model, CB = th.recording_model(calls), th.recording_callback(calls)
    local o = trainer({ limit_predict_batches = 2 }); o.callbacks = { CB() }
    local t = dpl.Trainer(o)
    local preds = t:predict(Model())
    local expected = { 'configure_callbacks()', 'prepare_data()', "C.setup('predict')", "setup('predict')",
      'configure_sharded_model()', 'predict_dataloader()', 'train(false)', 'on_predict_model_eval()', 'zero_grad()',
      'C.on_predict_start()', 'on_predict_start()', 'C.on_predict_epoch_start()', 'on_predict_epoch_start()' }
    for i = 0, 1 do
      for _, c in ipairs({ 'on_before_batch_transfer(table, 0)', 'transfer_batch_to_device(table, cpu, 0)',
        'on_after_batch_transfer(table, 0)', ('C.on_predict_batch_start(table, %d, 0)'):format(i),
        ('on_predict_batch_start(table, %d, 0)'):format(i), 'forward(table)', ('predict_step(table, %d)'):format(i),
        ('C.on_predict_batch_end(%d, table, %d, 0)'):format(i + 1, i), ('on_predict_batch_end(%d, table, %d, 0)'):format(i + 1, i) }) do
        expected[#expected + 1] = c
      end
    end
    for _, c in ipairs({ 'C.on_predict_epoch_end(table)', 'on_predict_epoch_end(table)', 'C.on_predict_end()',
      'on_predict_end()', "C.teardown('predict')", "teardown('predict')" }) do expected[#expected + 1] = c end
    assert.same(expected, normalise(calls))
    assert.same({ 1, 2 }, preds)
  end)

  it('resumed fit without validation: load hooks, no sanity check, next epoch', function()
    local calls = {}
    local Model, CB = th.recording_model(calls), th.recording_callback(calls)
    local dir = th.tmpdir()
    local o = trainer({ limit_val_batches = 0, default_root_dir = dir }); o.callbacks = { CB() }
    local t1 = dpl.Trainer(o)
    local m1 = Model()
    m1.w = 7
    t1:fit(m1)
    local path = t1.checkpoint_callback.best_model_path
    for k in pairs(calls) do calls[k] = nil end
    local o2 = trainer({ limit_val_batches = 0, max_epochs = 2, default_root_dir = dir }); o2.callbacks = { CB() }
    local t2 = dpl.Trainer(o2)
    local m2 = Model()
    t2:fit(m2, nil, nil, { ckpt_path = path })
    normalise(calls)
    assert.same({ 'configure_callbacks()', 'prepare_data()', "C.setup('fit')", "setup('fit')",
      'on_load_checkpoint(table)', 'C.on_load_checkpoint(table)', 'C.load_state_dict(true)',
      'configure_sharded_model()', 'configure_optimizers()', 'C.on_fit_start()', 'on_fit_start()',
      'train(true)', 'train_dataloader()', 'C.on_train_start()', 'on_train_start()', 'C.on_train_epoch_start()' },
      { unpack(calls, 1, 16) })
    assert.equal(7, m2.w)
    assert.equal(2, t2.current_epoch)
    assert.equal(4, t2.global_step)
    -- the optimizer state came back: 2 steps before + 2 now
    assert.equal(4, t2.optimizers[1].steps)
  end)

  it('on_train_batch_start returning -1 skips the rest of the epoch', function()
    local calls = {}
    local Model = th.recording_model(calls, { on_train_batch_start = function(_, _, i) if i == 1 then return -1 end end })
    local t = dpl.Trainer(trainer({ limit_val_batches = 0, limit_train_batches = 5, enable_checkpointing = false, logger = false }))
    t:fit(Model())
    local n = 0
    for _, c in ipairs(calls) do if c:match('^training_step%(') then n = n + 1 end end
    assert.equal(1, n)
    assert.equal(1, t.global_step)
  end)
end)
