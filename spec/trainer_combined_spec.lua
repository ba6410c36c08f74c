-- trainer_combined_spec.lua: several training loaders at once (Lightning 1.9's CombinedLoader):
-- dpl.data.CombinedLoader's two modes, and fit given a table of loaders by name or a list of
-- several — batches in the collection's shape, the epoch length of each mode, limits, the
-- Trainer's multiple_trainloader_mode, the samplers under ddp (dplhost --nproc 2), the errors.
-- The expected batches are those Lightning 1.9.5 gives for the same loaders (DataLoader(range(6),
-- batch_size=4) and DataLoader(range(15), batch_size=5), recorded with its Trainer).
local dpl = require 'dpl'
local data = dpl.data
local h = require 'spec.support.helpers'

local function rl(n, bs) return data.DataLoader(data.TensorDataset(dpl.arange(n)), { batch_size = bs }) end
local function vals(b) return b[1]:totable() end

local Rec = dpl.LightningModule:extend('CombRec')
function Rec:__init() dpl.LightningModule.__init(self) self.l = dpl.nn.Linear(1, 1) self.seen = {} end
function Rec:training_step(b)
  local r = {}
  for k, v in pairs(b) do r[k] = vals(v) end
  self.seen[#self.seen + 1] = r
  return self.l(dpl.ones(1, 1)):sum()
end
function Rec:configure_optimizers() return dpl.optim.SGD(self:parameters(), 0.1) end

local function trainer(o)
  local a = { max_epochs = 1, logger = false, enable_progress_bar = false, enable_checkpointing = false,
    enable_model_summary = false }
  for k, v in pairs(o or {}) do a[k] = v end
  return dpl.Trainer(a)
end

local A, B = { 0, 1, 2, 3 }, { 4, 5 }
local B1, B2, B3 = { 0, 1, 2, 3, 4 }, { 5, 6, 7, 8, 9 }, { 10, 11, 12, 13, 14 }

describe('CombinedLoader', function()
  it('max_size_cycle runs as long as the longest loader, restarting the shorter', function()
    local c = data.CombinedLoader({ a = rl(6, 4), b = rl(15, 5) }, 'max_size_cycle')
    assert.are.equal(3, c:num_batches())
    local got = {}
    for b in c:iter() do got[#got + 1] = { a = vals(b.a), b = vals(b.b) } end
    assert.are.same({ { a = A, b = B1 }, { a = B, b = B2 }, { a = A, b = B3 } }, got)
  end)

  it('min_size (its default) stops with the shortest; lists give lists; nested collections keep their shape', function()
    local c = data.CombinedLoader({ rl(6, 4), rl(15, 5) })
    assert.are.equal('min_size', c.mode)
    assert.are.equal(2, c:num_batches())
    local got = {}
    for b in c:iter() do got[#got + 1] = { vals(b[1]), vals(b[2]) } end
    assert.are.same({ { A, B1 }, { B, B2 } }, got)
    local n = data.CombinedLoader({ x = { rl(6, 4), rl(15, 5) }, y = rl(4, 2) }, 'max_size_cycle')
    assert.are.equal(3, n:num_batches())
    local first = n:iter()()
    assert.are.same(A, vals(first.x[1]))
    assert.are.same(B1, vals(first.x[2]))
    assert.are.same({ 0, 1 }, vals(first.y))
  end)

  it('refuses a bad mode, something that is not a loader, an empty collection', function()
    assert.matches("invalid mode xx %(the modes are 'min_size' and 'max_size_cycle'%)",
      select(2, pcall(data.CombinedLoader, { rl(2, 1) }, 'xx')))
    assert.matches('expected DataLoaders %(or lists / tables of them%), got number at .a',
      select(2, pcall(data.CombinedLoader, { a = 3 })))
    assert.matches('no DataLoader given', select(2, pcall(data.CombinedLoader, {})))
  end)
end)

describe('fit with several training loaders', function()
  it('a table by name: batches by name, max_size_cycle by default (Lightning 1.9.5\'s batches)', function()
    local t, m = trainer(), Rec()
    t:fit(m, { a = rl(6, 4), b = rl(15, 5) })
    assert.are.equal(3, t.global_step)
    assert.are.equal(3, t.num_training_batches)
    assert.are.same({ { a = A, b = B1 }, { a = B, b = B2 }, { a = A, b = B3 } }, m.seen)
    assert.are.equal('CombinedLoader', getmetatable(t.train_dataloader).__name)
  end)

  it('a list of several: batches as a list; min_size stops with the shortest', function()
    local t, m = trainer({ multiple_trainloader_mode = 'min_size' }), Rec()
    t:fit(m, { rl(6, 4), rl(15, 5) })
    assert.are.equal(2, t.global_step)
    assert.are.same({ { A, B1 }, { B, B2 } }, m.seen)
    -- a list of one loader stays one loader (its batches as they are)
    local One = Rec:extend('CombOne')
    function One:training_step(b)
      self.seen[#self.seen + 1] = dpl.is_tensor(b[1]) and vals(b) or 'not one loader\'s batch'
      return self.l(dpl.ones(1, 1)):sum()
    end
    local t2, m2 = trainer(), One()
    t2:fit(m2, { rl(4, 2) })
    assert.are.same({ { 0, 1 }, { 2, 3 } }, m2.seen)
  end)

  it('limit_train_batches cuts the combined epoch; each epoch starts every loader again', function()
    local t, m = trainer({ max_epochs = 2, limit_train_batches = 2 }), Rec()
    t:fit(m, { a = rl(6, 4), b = rl(15, 5) })
    assert.are.equal(4, t.global_step)
    assert.are.same({ { a = A, b = B1 }, { a = B, b = B2 }, { a = A, b = B1 }, { a = B, b = B2 } }, m.seen)
  end)

  it('a CombinedLoader given as it is keeps its mode; a module\'s train_dataloader may return a table', function()
    local t, m = trainer(), Rec()
    t:fit(m, data.CombinedLoader({ a = rl(6, 4), b = rl(15, 5) }, 'min_size'))
    assert.are.equal(2, t.global_step)
    local Own = Rec:extend('CombOwn')
    function Own:train_dataloader() return { a = rl(6, 4), b = rl(15, 5) } end
    local t2, m2 = trainer(), Own()
    t2:fit(m2)
    assert.are.equal(3, t2.global_step)
  end)

  it('checks multiple_trainloader_mode; evaluation loaders by name are refused', function()
    local ok, e = pcall(dpl.Trainer, { multiple_trainloader_mode = 'longest' })
    assert.is_false(ok)
    assert.matches("`multiple_trainloader_mode` must be 'max_size_cycle' or 'min_size', got 'longest'", tostring(e))
    local args = dpl.Trainer.parse_argv({ '--multiple_trainloader_mode', 'min_size' })
    assert.are.equal('min_size', args.multiple_trainloader_mode)
    local V = Rec:extend('CombVal')
    function V:validation_step() end
    local t = trainer()
    ok, e = pcall(t.fit, t, V(), rl(4, 2), { a = rl(4, 2) })
    assert.is_false(ok)
    assert.matches('got a table with the key a %(a table of loaders by name is for training only', tostring(e))
    ok, e = pcall(t.fit, t, Rec(), { a = 1 })
    assert.is_false(ok)
    assert.matches('got number at .a', tostring(e))
  end)

  it('under dplhost --nproc 2 (ddp): each loader is sharded by its own DistributedSampler', function()
    local out, err, rc = h.dplhost('--nproc 2 spec/support/combined_ddp_script.lua', { timeout = 120 })
    assert.are.equal(0, rc, err)
    -- 8 and 12 samples, batch 2: 2 and 3 batches per rank; the shorter one cycles
    assert.is_truthy(out:find('rank 0 steps 3 a 0,2,4,6,0,2 b 0,2,4,6,8,10', 1, true), out)
    assert.is_truthy(out:find('rank 1 steps 3 a 1,3,5,7,1,3 b 1,3,5,7,9,11', 1, true), out)
    out, err, rc = h.dplhost('--nproc 2 spec/support/combined_ddp_script.lua min_size', { timeout = 120 })
    assert.are.equal(0, rc, err)
    assert.is_truthy(out:find('rank 0 steps 2 a 0,2,4,6 b 0,2,4,6', 1, true), out)
    assert.is_truthy(out:find('rank 1 steps 2 a 1,3,5,7 b 1,3,5,7', 1, true), out)
  end)
end)
