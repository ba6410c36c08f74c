-- trainer_session_spec.lua: mistakes made while fitting from the REPL (tester D): a misspelt
-- Trainer argument, a Dataset passed where a DataLoader belongs.
local dpl = require 'dpl'

local function err_of(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, 'expected an error')
  return tostring(e)
end

local M = dpl.LightningModule:extend('SessionModel')
function M:__init() dpl.LightningModule.__init(self) self.net = dpl.nn.Linear(4, 2) end
function M:forward(x) return self.net(x) end
function M:training_step(b) return dpl.nn.functional.cross_entropy(self(b[1]), b[2]) end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end

local function trainer()
  return dpl.Trainer{ max_epochs = 1, enable_progress_bar = false, logger = false, enable_checkpointing = false,
    enable_model_summary = false, default_root_dir = os.tmpname() .. '.d' }
end

describe('the Trainer from the prompt', function()
  it('names the argument meant by a misspelt one', function()
    local e = err_of(dpl.Trainer, { max_epoch = 3 })
    assert.matches("Trainer got unknown argument: max_epoch %(did you mean 'max_epochs'%?%)", e)
    e = err_of(dpl.Trainer, { max_epoch = 3, acelerator = 'cpu', zzzzzzzz = 1 })
    assert.matches("unknown arguments: acelerator, max_epoch, zzzzzzzz %(did you mean 'accelerator', 'max_epochs'%?%)", e)
  end)

  it('refuses a Dataset given as a loader, saying to wrap it in a DataLoader', function()
    local ds = dpl.data.TensorDataset(dpl.randn(8, 4), dpl.randint(1, 3, { 8 }))
    local e = err_of(function() trainer():fit(M(), ds) end)
    assert.matches('TypeError: An invalid dataloader was passed to `Trainer.fit%(train_dataloaders=...%)`. Found TensorDataset, a Dataset: wrap it', e)
    -- and the same trainer class fits with the loader
    trainer():fit(M(), dpl.data.DataLoader(ds, { batch_size = 4 }))
  end)
end)
