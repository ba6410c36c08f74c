-- Checkpoints that cannot resume a fit: a weights-only checkpoint (Lightning 1.9.5's KeyError
-- "... contains only the model"), one without state_dict (KeyError 'state_dict'), parts of the
-- wrong type, a corrupted header nested too deeply (it overflowed the Lua stack: 'stack
-- overflow', naming no file), bad JSON naming the file. Before, the first two resumed silently
-- with fresh optimizers and schedulers, or fresh weights.
local dpl = require 'dpl'
local th = require 'spec.support.trainer_helpers'
local ck = require 'dpl.trainer.checkpoint'

local M = dpl.LightningModule:extend('HostileCkptModel')
function M:__init() dpl.LightningModule.__init(self); self.l = dpl.nn.Linear(4, 2) end
function M:training_step(b) return dpl.nn.functional.cross_entropy(self.l(b[1]), b[2]) end
function M:validation_step(b) self:log('v', dpl.nn.functional.cross_entropy(self.l(b[1]), b[2])) end
function M:configure_optimizers()
  local o = dpl.optim.SGD(self:parameters(), { lr = 0.1, momentum = 0.9 })
  return { optimizer = o, lr_scheduler = dpl.optim.lr_scheduler.StepLR(o, { step_size = 1, gamma = 0.5 }) }
end

local function loader()
  dpl.manual_seed(0)
  local x = dpl.randn(16, 4)
  return dpl.data.DataLoader(dpl.data.TensorDataset(x, x:narrow(2, 1, 2):argmax(2)), { batch_size = 8 })
end
local function trainer(dir, extra)
  local o = { max_epochs = 1, enable_progress_bar = false, logger = false, enable_model_summary = false,
    enable_checkpointing = false, default_root_dir = dir }
  for k, v in pairs(extra or {}) do o[k] = v end
  return dpl.Trainer(o)
end
local function err_of(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, 'expected an error')
  return tostring(e)
end

describe('hostile checkpoints', function()
  local dir, full, wonly
  setup(function()
    dir = th.tmpdir()
    local t = trainer(dir)
    t:fit(M(), loader())
    full, wonly = dir .. '/full.ckpt', dir .. '/weights.ckpt'
    t:save_checkpoint(full)
    t:save_checkpoint(wonly, true)
  end)

  it('fit from a weights-only checkpoint raises Lightning KeyError; validate loads it', function()
    local e = err_of(function() trainer(dir, { max_epochs = 2 }):fit(M(), loader(), nil, { ckpt_path = wonly }) end)
    assert.equal('KeyError: Trying to restore optimizer state but checkpoint contains only the model.'
      .. ' This is probably due to `ModelCheckpoint.save_weights_only` being set to `True`.', e)
    local res = trainer(dir):validate(M(), loader(), { ckpt_path = wonly, verbose = false })
    assert.is_number(res[1].v)
    trainer(dir, { max_epochs = 2 }):fit(M(), loader(), nil, { ckpt_path = full })
  end)

  it('a checkpoint without state_dict or with parts of the wrong type is refused', function()
    local c = ck.load(full)
    c.state_dict = nil
    ck.save(c, dir .. '/nosd.ckpt')
    assert.equal("KeyError: 'state_dict'",
      err_of(function() trainer(dir, { max_epochs = 2 }):fit(M(), loader(), nil, { ckpt_path = dir .. '/nosd.ckpt' }) end))
    c = ck.load(full)
    c.lr_schedulers = nil
    ck.save(c, dir .. '/nosched.ckpt')
    assert.matches('^KeyError: Trying to restore learning rate scheduler state',
      err_of(function() trainer(dir, { max_epochs = 2 }):fit(M(), loader(), nil, { ckpt_path = dir .. '/nosched.ckpt' }) end))
    c = ck.load(full)
    c.optimizer_states = 'x'
    ck.save(c, dir .. '/badopt.ckpt')
    assert.equal("ValueError: checkpoint " .. dir .. "/badopt.ckpt: 'optimizer_states' is a string, expected a table",
      err_of(function() trainer(dir, { max_epochs = 2 }):fit(M(), loader(), nil, { ckpt_path = dir .. '/badopt.ckpt' }) end))
  end)

  it('a corrupted header names the file; deep nesting is an error, not a stack overflow', function()
    local function with_meta(meta, name)
      local hdr = '{"__metadata__":{"format":"dplhost","dplhost.checkpoint":' .. ck.json_encode(meta) .. '}}'
      local n = #hdr
      local b = {}
      for _ = 1, 8 do b[#b + 1] = string.char(n % 256); n = math.floor(n / 256) end
      local p = dir .. '/' .. name
      local f = assert(io.open(p, 'wb')); f:write(table.concat(b), hdr); f:close()
      return p
    end
    local p = with_meta(string.rep('[', 100000) .. string.rep(']', 100000), 'deep.ckpt')
    assert.equal('ValueError: checkpoint ' .. p .. ': bad JSON at byte 1001: nested deeper than 1000 levels',
      err_of(ck.load, p))
    p = with_meta('{"epoch": 1,}', 'comma.ckpt')
    assert.matches('^ValueError: checkpoint ' .. p:gsub('%p', '%%%0') .. ': bad JSON at byte %d+: expected a key', err_of(ck.load, p))
    -- the state names a tensor the file does not hold: the error names the file
    p = with_meta('{"epoch": 1, "state_dict": {"w": {"__tensor__": "t0"}}}', 'notensor.ckpt')
    assert.equal('ValueError: checkpoint ' .. p .. ': missing tensor t0', err_of(ck.load, p))
  end)
end)
