-- The options table of fit/validate/test/predict in place of the loaders, as Lightning's
-- keywords (`trainer.fit(model, ckpt_path=p)`, `trainer.predict(model, return_predictions=False)`):
-- before, only a table with `datamodule` was taken for options there; `{ckpt_path = p}` was
-- read as a table of training loaders ("CombinedLoader: expected DataLoaders ..., got string at
-- .ckpt_path") and `{verbose = false}` / `{return_predictions = false}` as a bad loader list.
local dpl = require 'dpl'
local nn = dpl.nn

local M = dpl.LightningModule:extend('EntryOptsModel')
function M:__init() dpl.LightningModule.__init(self); self.l = nn.Linear(2, 1) end
function M:training_step(b) return self.l(b[1]):sum() end
function M:validation_step(b) self:log('v', self.l(b[1]):sum()) end
function M:test_step(b) self:log('t', self.l(b[1]):sum()) end
function M:predict_step(b) return self.l(b[1]) end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
function M:train_dataloader() return dpl.data.DataLoader(dpl.data.TensorDataset(dpl.ones(4, 2)), { batch_size = 2 }) end
M.val_dataloader, M.test_dataloader, M.predict_dataloader = M.train_dataloader, M.train_dataloader, M.train_dataloader

local function T(dir, o)
  local a = { logger = false, enable_progress_bar = false, enable_model_summary = false, default_root_dir = dir,
    num_sanity_val_steps = 0 }
  for k, v in pairs(o or {}) do a[k] = v end
  return dpl.Trainer(a)
end

describe('entry points: options in place of the loaders', function()
  local dir = require('spec.support.helpers').tmpname('-entryopts')
  teardown(function() os.execute("rm -rf '" .. dir .. "'") end)

  it('fit(model, {ckpt_path = p}) resumes; validate/test {verbose = false}; predict {return_predictions = false}', function()
    local t = T(dir, { max_epochs = 1 })
    t:fit(M())
    assert.equal(2, t.global_step)
    local ckpt = t.checkpoint_callback.best_model_path
    local t2 = T(dir .. '/2', { max_epochs = 2 })
    t2:fit(M(), { ckpt_path = ckpt })
    assert.equal(4, t2.global_step)
    local r = t2:validate(nil, { verbose = false })
    assert.equal(1, #r)
    assert.is_number(r[1].v)
    -- (the resumed-from checkpoint is gone: Lightning 1.9.5's ModelCheckpoint removes the
    -- reloaded best_model_path when it saves the new one)
    r = t2:test(M(), { verbose = false, ckpt_path = t2.checkpoint_callback.best_model_path })
    assert.is_number(r[1].t)
    assert.is_nil(t2:predict(M(), { return_predictions = false }))
    assert.equal(2, #t2:predict(M(), { return_predictions = true }))
  end)

  it('a table of loaders or an unknown key is still not taken for options', function()
    local t = T(dir .. '/3', { max_epochs = 1, enable_checkpointing = false })
    local ok, e = pcall(t.predict, t, M(), { return_prediction = false })
    assert.is_false(ok)
    assert.truthy(tostring(e):find('got a table with the key return_prediction', 1, true), tostring(e))
    local l = M():train_dataloader()
    local preds = t:predict(M(), { l, l })
    assert.equal(2, #preds)
  end)
end)

-- Lightning 1.9's positional parameters: fit(model, train, val, datamodule, ckpt_path),
-- validate/test(model, dataloaders, ckpt_path, verbose, datamodule), predict(model,
-- dataloaders, datamodule, return_predictions, ckpt_path). Before, whatever came after the
-- options' place was dropped without a word (predict(m, dl, nil, false) returned predictions).
describe('entry points: Lightning positional arguments', function()
  local dir = require('spec.support.helpers').tmpname('-entrypos')
  teardown(function() os.execute("rm -rf '" .. dir .. "'") end)
  local DM = dpl.LightningDataModule:extend('EntryPosDM')
  function DM:train_dataloader() return M():train_dataloader() end
  DM.val_dataloader, DM.test_dataloader, DM.predict_dataloader = DM.train_dataloader, DM.train_dataloader, DM.train_dataloader

  it('are read as Lightning reads them', function()
    local t = T(dir, { max_epochs = 1 })
    local m = M()
    t:fit(m, nil, nil, DM())
    assert.equal(2, t.global_step)
    local best = t.checkpoint_callback.best_model_path
    local t2 = T(dir .. '/2', { max_epochs = 2 })
    t2:fit(M(), nil, nil, DM(), best)
    assert.equal(4, t2.global_step)
    local l = m:train_dataloader()
    assert.is_nil(t2:predict(m, l, nil, false))
    assert.equal(2, #t2:predict(m, l, nil, true))
    assert.equal(2, #t2:predict(m, nil, DM(), true))
    local r = t2:test(m, l, nil, false)
    assert.is_number(r[1].t)
    r = t2:validate(m, nil, nil, false, DM())
    assert.is_number(r[1].v)
    r = t2:test(nil, l, 'last', false)
    assert.is_number(r[1].t)
  end)

  it('refuse values of the wrong type, too many, or an options table followed by more', function()
    local t = T(dir .. '/3', { max_epochs = 1, enable_checkpointing = false })
    local m = M()
    local l = m:train_dataloader()
    local function err(f, ...) local ok, e = pcall(f, t, ...) assert.is_false(ok) return tostring(e) end
    assert.truthy(err(t.predict, m, l, nil, 'yes'):find('return_predictions must be a boolean, got string', 1, true))
    assert.truthy(err(t.test, m, l, 'best', 1):find('verbose must be a boolean, got number', 1, true))
    assert.truthy(err(t.test, m, l, 3):find('ckpt_path must be a string', 1, true))
    assert.truthy(err(t.predict, m, l, {}, true):find('takes no positional arguments after it', 1, true))
    assert.truthy(err(t.fit, m, l, nil, nil, nil, 'x'):find('at most 2 arguments after the dataloaders', 1, true))
    assert.truthy(err(t.validate, m, nil, DM(), nil, DM()):find('datamodule given twice', 1, true))
  end)
end)
