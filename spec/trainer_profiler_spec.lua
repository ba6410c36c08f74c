-- trainer_profiler_spec.lua: Trainer{profiler=} (dpl.profilers: SimpleProfiler's report in
-- Lightning 1.9's format, printed or written per stage, custom profilers, the arguments that
-- are refused) and Trainer{detect_anomaly=} with autograd's anomaly mode
-- (dpl.autograd.detect_anomaly / set_detect_anomaly).
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local A = dpl.autograd
local errors = require 'dpl.errors'
local profilers = require 'dpl.profilers'

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute('mkdir -p ' .. d) == 0)
  return d
end
local function read(path)
  local f = assert(io.open(path))
  local s = f:read('*a')
  f:close()
  return s
end
local function err_of(fn, ...)
  local ok, e = pcall(fn, ...)
  assert.is_false(ok, 'expected an error')
  return e
end

local Tiny = dpl.LightningModule:extend('Tiny')
function Tiny:__init() dpl.LightningModule.__init(self) dpl.manual_seed(0) self.net = nn.Linear(8, 4) end
function Tiny:training_step(b) local l = F.cross_entropy(self.net(b[1]), b[2]) self:log('loss', l) return l end
function Tiny:validation_step(b) self:log('val_loss', F.cross_entropy(self.net(b[1]), b[2])) end
function Tiny:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
local function loader()
  local ds = dpl.datasets.SyntheticClassification { n = 96, features = 8, classes = 4, seed = 2 }
  return dpl.data.DataLoader(ds, { batch_size = 32 })
end
local function trainer(opts)
  local o = { max_epochs = 2, logger = false, enable_checkpointing = false, enable_progress_bar = false,
    enable_model_summary = false, num_sanity_val_steps = 0 }
  for k, v in pairs(opts) do o[k] = v end
  return dpl.Trainer(o)
end
-- the rows of a report: action -> {mean, calls, total, percent} (extended) or {mean, total}
local function rows(report)
  local r = {}
  for line in report:gmatch('[^\n]+') do
    local cells = {}
    for c in line:gmatch('|%s+([^\t|]-)%s*\t') do cells[#cells + 1] = c end
    if #cells >= 3 and cells[1] ~= 'Action' then
      local v = {}
      for i = 2, #cells do v[#v + 1] = cells[i] end
      r[cells[1]] = v
    end
  end
  return r
end

describe('Trainer{profiler=}', function()
  it('"simple" times the hooks, steps, epochs, batches and batch fetches: FIT report with counts', function()
    local dir = tmpdir()
    local p = profilers.SimpleProfiler { dirpath = dir, filename = 'perf' }
    local t = trainer({ profiler = p })
    t:fit(Tiny(), loader(), loader())
    assert.are.equal(p, t.profiler)
    local rep = read(dir .. '/fit-perf.txt')
    assert.truthy(rep:find('^FIT Profiler Report\n'), rep)
    assert.truthy(rep:find('|  Action%s+\t|  Mean duration %(s%)\t|  Num calls%s+\t|  Total time %(s%) \t|  Percentage %%%s+\t|'), rep)
    local r = rows(rep)
    -- 2 epochs x 3 batches
    assert.are.equal('2', r['run_training_epoch'][2])
    assert.are.equal('6', r['run_training_batch'][2])
    assert.are.equal('6', r['[Strategy]SingleDeviceStrategy.training_step'][2])
    assert.are.equal('6', r['[LightningModule]Tiny.optimizer_step'][2])
    assert.are.equal('6', r['[LightningModule]Tiny.backward'][2])
    assert.are.equal('6', r['[Strategy]SingleDeviceStrategy.validation_step'][2])
    assert.are.equal('1', r['[LightningModule]Tiny.on_fit_start'][2])
    -- the epochs' batches: 3 each plus the look-ahead's end of each epoch
    assert.is_true(tonumber(r['[_TrainingEpochLoop].train_dataloader_next'][2]) >= 6)
    -- the Total row counts every call; percentages sorted down
    local total = 0
    for k, v in pairs(r) do if k ~= 'Total' then total = total + tonumber(v[2]) end end
    assert.are.equal(tostring(total), r.Total[2])
    local last = math.huge
    for line in rep:gmatch('[^\n]+') do
      local cells = {}
      for c in line:gmatch('|%s+([^\t|]-)%s*\t') do cells[#cells + 1] = c end
      if #cells == 5 and cells[1] ~= 'Action' and cells[1] ~= 'Total' then
        local pct = tonumber(cells[5])
        assert.is_true(pct <= last, line)
        last = pct
      end
    end
    -- mean x calls = total
    local e = r['run_training_batch']
    assert.is_true(math.abs(tonumber(e[1]) * 6 - tonumber(e[3])) <= 1e-4 * tonumber(e[3]) + 1e-9)
    -- a later validate appends its own report to validate-perf.txt
    t:validate(Tiny(), loader())
    local v = read(dir .. '/validate-perf.txt')
    assert.truthy(v:find('^VALIDATE Profiler Report'), v)
    os.execute('rm -rf ' .. dir)
  end)

  it('callbacks are timed under their state_key; extended=false gives the 3-column report', function()
    local dir = tmpdir()
    local Count = dpl.callbacks.Callback:extend('Count')
    function Count:on_train_batch_end() end
    local p = profilers.SimpleProfiler { dirpath = dir, filename = 'p', extended = false }
    trainer({ profiler = p, callbacks = { Count() }, max_epochs = 1 }):fit(Tiny(), loader())
    local rep = read(dir .. '/fit-p.txt')
    assert.truthy(rep:find('|  Action%s+\t|  Mean duration %(s%)\t|  Total time %(s%) \t|\n'), rep)
    assert.is_nil(rep:find('Num calls', 1, true))
    local r = rows(rep)
    assert.is_not_nil(r['[Callback]Count.on_train_batch_end'], rep)
    os.execute('rm -rf ' .. dir)
  end)

  it('"simple" without a filename prints the report (rank 0)', function()
    local out = os.tmpname()
    local script = os.tmpname()
    local f = assert(io.open(script, 'w'))
    f:write([[
local dpl = require 'dpl'
local M = dpl.LightningModule:extend('P')
function M:__init() dpl.LightningModule.__init(self) self.net = dpl.nn.Linear(2, 2) end
function M:training_step(b) return self.net(b[1]):sum() end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end
local ds = dpl.data.TensorDataset(dpl.randn(8, 2))
dpl.Trainer{ max_epochs = 1, profiler = 'simple', logger = false, enable_checkpointing = false,
  enable_progress_bar = false, enable_model_summary = false }:fit(M(), dpl.data.DataLoader(ds, { batch_size = 4 }))
]])
    f:close()
    assert.is_true(os.execute(('%s %s > %s 2>&1'):format(arg and arg[-1] or './dplhost', script, out)) == 0, read(out))
    local s = read(out)
    assert.truthy(s:find('FIT Profiler Report', 1, true), s)
    assert.truthy(s:find('[LightningModule]P.optimizer_step', 1, true), s)
    os.remove(out) os.remove(script)
  end)

  it('a custom Profiler:extend() gets start/stop pairs for every action, and its summary is written', function()
    local dir = tmpdir()
    local Rec = profilers.Profiler:extend('Rec')
    function Rec:__init(o) profilers.Profiler.__init(self, o) self.open, self.seen, self.bad = {}, {}, 0 end
    function Rec:start(a) if self.open[a] then self.bad = self.bad + 1 end self.open[a] = true end
    function Rec:stop(a) if not self.open[a] then self.bad = self.bad + 1 end self.open[a] = nil self.seen[a] = (self.seen[a] or 0) + 1 end
    function Rec:summary() return 'custom summary\n' end
    local p = Rec { dirpath = dir, filename = 'rec' }
    trainer({ profiler = p, max_epochs = 1 }):fit(Tiny(), loader())
    assert.are.equal(0, p.bad)
    assert.is_nil(next(p.open))
    assert.are.equal(3, p.seen['run_training_batch'])
    assert.are.equal('custom summary\n', read(dir .. '/fit-rec.txt'))
    os.execute('rm -rf ' .. dir)
  end)

  it('an error in a hook still ends its action and writes the report, then propagates', function()
    local dir = tmpdir()
    local Bad = Tiny:extend('Bad')
    function Bad:on_train_epoch_end() error('boom in hook') end
    local p = profilers.SimpleProfiler { dirpath = dir, filename = 'x' }
    local e = err_of(function() trainer({ profiler = p, max_epochs = 1 }):fit(Bad(), loader()) end)
    assert.truthy(tostring(e):find('boom in hook', 1, true))
    assert.is_nil(next(p.current_actions))
    assert.truthy(read(dir .. '/fit-x.txt'):find('[LightningModule]Bad.on_train_epoch_end', 1, true))
    os.execute('rm -rf ' .. dir)
  end)

  it('an error inside a training batch stops run_training_batch: the profiler runs again', function()
    local Bad = Tiny:extend('BadStep')
    function Bad:training_step(b, i)
      if self.boom and i == 2 then error('boom in step') end
      return Tiny.training_step(self, b, i)
    end
    local p = profilers.SimpleProfiler()
    local m = Bad()
    m.boom = true
    local e = err_of(function() trainer({ profiler = p, max_epochs = 1 }):fit(m, loader()) end)
    assert.is_nil(next(p.current_actions))
    -- one traceback, from where the error was raised (not from the profiler's wrappers)
    local _, n = e:gsub('stack traceback:', '')
    assert.are.equal(1, n, e)
    local first = e:match('stack traceback:\n([^\n]*\n[^\n]*)')
    assert.truthy(first:find('trainer_profiler_spec.lua', 1, true), e)
    local rows_before = p.recorded_durations['run_training_batch'].n
    m.boom = false
    trainer({ profiler = p, max_epochs = 1 }):fit(m, loader()) -- the same profiler again
    assert.are.equal(rows_before + 3, p.recorded_durations['run_training_batch'].n)
  end)

  it('the default is a PassThroughProfiler; refused values name what is accepted', function()
    local t = trainer({})
    assert.is_true(require('dpl.class').is_instance(t.profiler, profilers.PassThroughProfiler))
    local e = err_of(trainer, { profiler = 'advanced' })
    assert.is_true(errors.is(e, errors.NotImplementedError), tostring(e))
    assert.truthy(tostring(e):find("profiler='advanced'", 1, true))
    for _, k in ipairs({ 'pytorch', 'xla' }) do
      assert.is_true(errors.is(err_of(trainer, { profiler = k }), errors.NotImplementedError), k)
    end
    e = err_of(trainer, { profiler = 'fast' })
    assert.is_true(errors.is(e, errors.MisconfigurationException), tostring(e))
    assert.truthy(tostring(e):find("it can only be one of ['simple', 'advanced', 'pytorch', 'xla']; got \"fast\"", 1, true),
      tostring(e))
    e = err_of(trainer, { profiler = 3 })
    assert.truthy(tostring(e):find('subclasses of `Profiler`', 1, true), tostring(e))
    e = err_of(profilers.SimpleProfiler, { extended = 'yes' })
    assert.truthy(tostring(e):find('extended must be a boolean', 1, true), tostring(e))
    -- a misspelt key (the report would be printed instead of written), and a class for an instance
    e = err_of(profilers.SimpleProfiler, { file_name = 'perf' })
    assert.truthy(tostring(e):find("SimpleProfiler: unknown option 'file_name' (did you mean 'filename'?)", 1, true), tostring(e))
    e = err_of(trainer, { profiler = profilers.SimpleProfiler })
    assert.is_true(errors.is(e, errors.MisconfigurationException), tostring(e))
    assert.truthy(tostring(e):find('got the class SimpleProfiler, not a profiler; pass an instance: SimpleProfiler()', 1, true),
      tostring(e))
  end)

  it('SimpleProfiler: starting a running action or stopping an idle one is a ValueError', function()
    local p = profilers.SimpleProfiler()
    p:start('a')
    assert.truthy(tostring(err_of(p.start, p, 'a')):find('Attempted to start a which has already started.', 1, true))
    p:stop('a')
    assert.truthy(tostring(err_of(p.stop, p, 'a')):find('(a) which was never started', 1, true))
    assert.are.same({ 1, 2 }, { p:profile('b', function(x) return x, 2 end, 1) })
    assert.are.equal(1, p.recorded_durations.a.n)
    assert.are.equal(1, p.recorded_durations.b.n)
    assert.truthy(p:summary():find('^Profiler Report\n'))
  end)
end)

describe('anomaly detection', function()
  it('dpl.autograd.detect_anomaly: a NaN gradient stops backward, naming the op and the forward line', function()
    local x = dpl.tensor({ -1.0, 1.5 }):requires_grad_()
    local e = err_of(A.detect_anomaly, function()
      local y = x:sqrt() -- the line the message must name
      y:sum():backward()
    end)
    local info = debug.getinfo(1, 'S')
    local src = info.short_src
    assert.truthy(tostring(e):find("function 'sqrt' returned nan values in its output 1", 1, true), tostring(e))
    assert.truthy(tostring(e):find(src, 1, true), tostring(e))
    assert.is_nil(tostring(e):find('dpl/autograd.lua', 1, true), tostring(e))
    assert.is_false(A.is_anomaly_enabled())
    -- off: the same backward runs through and leaves a NaN gradient
    x.grad = nil
    x:sqrt():sum():backward()
    assert.is_true(x.grad[1]:item() ~= x.grad[1]:item())
    -- a graph made before anomaly mode was on: the op is named without a traceback
    local y = x:sqrt():sum()
    e = err_of(A.detect_anomaly, function() y:backward() end)
    assert.truthy(tostring(e):find('no forward traceback', 1, true), tostring(e))
    -- finite gradients pass, set_detect_anomaly returns the previous setting
    assert.is_false(A.set_detect_anomaly(true))
    local z = dpl.tensor({ 1, 4 }, { dtype = "float32" }):requires_grad_()
    z:sqrt():sum():backward()
    assert.is_true(A.set_detect_anomaly(false))
    assert.are.same({ 0.5, 0.25 }, z.grad:totable())
  end)

  it('Trainer{detect_anomaly=true} makes fit raise at the first NaN gradient; false trains on', function()
    local N = Tiny:extend('NaNy')
    function N:training_step(b)
      local h = self.net(b[1])
      return (h - 1e9):sqrt():sum() -- sqrt of negatives: NaN forward and backward
    end
    local e = err_of(function() trainer({ detect_anomaly = true, max_epochs = 1 }):fit(N(), loader()) end)
    assert.truthy(tostring(e):find('returned nan values', 1, true), tostring(e))
    assert.truthy(tostring(e):find('trainer_profiler_spec.lua', 1, true), tostring(e))
    assert.is_false(A.is_anomaly_enabled())
    local t = trainer({ detect_anomaly = false, max_epochs = 1 })
    t:fit(N(), loader())
    assert.are.equal(3, t.global_step)
    assert.is_false(A.is_anomaly_enabled())
  end)
end)
