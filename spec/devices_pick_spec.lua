-- devices_pick_spec.lua: retry_jittered_backoff (with its sleeps observed
-- through injected sleep/random functions, and measured once for real), the C
-- probe dpl_device_probe_alloc, pick_single_gpu and pick_multiple_gpus with
-- 0, 1, 2 and 16 simulated GPUs, busy ones, and transient failures.
local D = require 'dpl.devices'
local errors = require 'dpl.errors'
local run = require 'spec.support.devices_run'

local function failing(n, value)
  local calls = 0
  local errs = {}
  local f = function()
    calls = calls + 1
    if calls <= n then
      local e = errors.RuntimeError('failure ' .. calls)
      errs[#errs + 1] = e
      error(e, 0)
    end
    return value, 'second', nil
  end
  return f, function() return calls end, errs
end

local function recorder(rand)
  local sleeps = {}
  return sleeps, { sleep = function(s) sleeps[#sleeps + 1] = s end, random = rand or function() return 1 end }
end

describe('dpl.devices.retry_jittered_backoff', function()
  it('returns what func returns on the first success, without sleeping', function()
    local f, calls = failing(0, 42)
    local sleeps, opts = recorder()
    local a, b, c = D.retry_jittered_backoff(f, 5, 1.0, 0.01, opts)
    assert.are.equal(42, a)
    assert.are.equal('second', b)
    assert.is_nil(c)
    assert.are.equal(1, calls())
    assert.are.same({}, sleeps)
    assert.are.equal(3, select('#', D.retry_jittered_backoff(f, 5, 1.0, 0.01, opts)))
  end)

  it('retries after failures, sleeping min(cap, base * 2^i) * U[0,1) before retry i', function()
    local f, calls = failing(3, 'ok')
    local sleeps, opts = recorder(function() return 0.5 end)
    assert.are.equal('ok', D.retry_jittered_backoff(f, 5, 1.0, 0.01, opts))
    assert.are.equal(4, calls())
    assert.are.equal(3, #sleeps)
    for i, s in ipairs(sleeps) do assert.is_near(0.5 * 0.01 * 2 ^ i, s, 1e-12) end
  end)

  it('(fix) sleeps with a growing bound that never exceeds cap_delay, then re-raises the last error', function()
    local f, calls, errs = failing(math.huge)
    local sleeps, opts = recorder() -- random() = 1: each sleep is its bound
    local ok, e = pcall(D.retry_jittered_backoff, f, 8, 0.25, 0.02, opts)
    assert.is_false(ok)
    assert.are.equal(8, calls())
    assert.are.equal(errs[8], e) -- the very last error object
    assert.are.equal('RuntimeError: failure 8', tostring(e))
    -- 7 sleeps, before retries 1..7: 0.04, 0.08, 0.16, then capped at 0.25
    assert.are.equal(7, #sleeps)
    local want = { 0.04, 0.08, 0.16, 0.25, 0.25, 0.25, 0.25 }
    for i = 1, 7 do
      assert.is_near(want[i], sleeps[i], 1e-12)
      assert.is_true(sleeps[i] <= 0.25)
      if i > 1 then assert.is_true(sleeps[i] >= sleeps[i - 1]) end
    end
  end)

  it('uses the defaults 5 retries, cap 1.0, base 0.01', function()
    local f, calls = failing(math.huge)
    local sleeps, opts = recorder()
    assert.has_error(function() D.retry_jittered_backoff(f, nil, nil, nil, opts) end)
    assert.are.equal(5, calls())
    assert.are.equal(4, #sleeps)
    for i = 1, 4 do assert.is_near(0.01 * 2 ^ i, sleeps[i], 1e-12) end
    -- and a large base hits the default cap of 1.0
    local f2 = failing(math.huge)
    local sleeps2, opts2 = recorder()
    pcall(D.retry_jittered_backoff, f2, 4, nil, 0.4, opts2)
    assert.are.same({ 0.8, 1.0, 1.0 }, sleeps2)
  end)

  it('draws every sleep uniformly within [0, bound] with the default random generator', function()
    local f = failing(math.huge)
    local sleeps = {}
    math.randomseed(1234)
    pcall(D.retry_jittered_backoff, f, 200, 0.05, 0.01, { sleep = function(s) sleeps[#sleeps + 1] = s end })
    assert.are.equal(199, #sleeps)
    local distinct, above_half = {}, 0
    for i, s in ipairs(sleeps) do
      local bound = math.min(0.05, 0.01 * 2 ^ i)
      assert.is_true(s >= 0 and s <= bound, ('sleep %d = %g above %g'):format(i, s, bound))
      distinct[s] = true
      if i > 3 and s > bound / 2 then above_half = above_half + 1 end
    end
    assert.is_true(next(distinct, next(distinct)) ~= nil, 'sleeps are not random')
    assert.is_true(above_half > 40 and above_half < 156, 'not uniform: ' .. above_half .. ' of 196 above half')
  end)

  it('really sleeps by default (measured)', function()
    local C = require('dpl.capi').C
    local f = failing(math.huge)
    local saved = D._random
    D._random = function() return 1 end
    local t0 = C.dpl_clock()
    local ok = pcall(D.retry_jittered_backoff, f, 4, 0.05, 0.01)
    local dt = C.dpl_clock() - t0
    D._random = saved
    assert.is_false(ok)
    -- 0.02 + 0.04 + 0.05 (capped)
    assert.is_true(dt >= 0.11, 'slept only ' .. dt)
    assert.is_true(dt < 1.0, 'slept ' .. dt)
  end)

  it('with num_retries = 0 never calls func and returns nil', function()
    local f, calls = failing(0, 1)
    assert.is_nil(D.retry_jittered_backoff(f, 0))
    assert.are.equal(0, calls())
  end)

  it('re-raises string errors and any error value unchanged', function()
    local sleeps, opts = recorder()
    local ok, e = pcall(D.retry_jittered_backoff, function() error('plain', 0) end, 2, 1, 0.01, opts)
    assert.is_false(ok)
    assert.are.equal('plain', e)
    local obj = {}
    ok, e = pcall(D.retry_jittered_backoff, function() error(obj) end, 2, 1, 0.01, opts)
    assert.are.equal(obj, e)
  end)

  it('accepts callable tables', function()
    local c = setmetatable({}, { __call = function() return 'called' end })
    assert.are.equal('called', D.retry_jittered_backoff(c))
  end)

  it('checks its arguments', function()
    local function bad(text, ...)
      local ok, e = pcall(D.retry_jittered_backoff, ...)
      assert.is_false(ok)
      assert.truthy(tostring(e):find(text, 1, true), tostring(e))
    end
    bad('TypeError: retry_jittered_backoff: func must be callable, got the number 1', 1)
    bad('num_retries must be an integer >= 0, got the number -1', print, -1)
    bad('num_retries must be an integer >= 0, got the number 1.5', print, 1.5)
    bad('cap_delay must be a number >= 0', print, 1, -1)
    bad('base_delay must be a number >= 0', print, 1, 1, 'x')
  end)
end)

describe('dpl_device_probe_alloc (C)', function()
  it('succeeds on the CPU and rejects unknown types and indices', function()
    local C = require('dpl.capi').C
    assert.are.equal(0, C.dpl_device_probe_alloc(0, 0))
    assert.are.equal(-1, C.dpl_device_probe_alloc(7, 0))
    assert.are.equal(-5, C.dpl_device_probe_alloc(0, 1))
  end)

  it('refuses busy simulated GPUs with DPL_EDEVICE and accepts the others', function()
    run.check(4, {
      { 'dpl.C.dpl_device_probe_alloc(1, 0)', 'ok 0' },
      { 'dpl.C.dpl_device_probe_alloc(1, 1)', 'ok -5' },
      { "require('ffi').string(dpl.C.dpl_last_error())",
        'ok "cuda:1 is busy: allocation refused (simulated exclusive-mode GPU, listed in DPL_VIRTUAL_GPUS_BUSY)"' },
      { 'dpl.C.dpl_device_probe_alloc(1, 2)', 'ok 0' },
      { 'dpl.C.dpl_device_probe_alloc(1, 3)', 'ok -5' },
      { 'dpl.C.dpl_device_probe_alloc(1, 4)', 'ok -5' },
      { 'dpl.C.dpl_device_probe_alloc(1, -1)', 'ok -5' },
    }, { busy = '1,3' })
  end)
end)

describe('dpl.devices.pick_single_gpu', function()
  it('with no GPU raises "RuntimeError: No GPUs available."', function()
    run.check(nil, {
      { 'D.pick_single_gpu()', 'err RuntimeError: No GPUs available. this process sees no GPU' },
      { 'D.pick_single_gpu({})', 'err RuntimeError: No GPUs available.' },
    })
  end)

  it('with 1 GPU', function()
    run.check(1, {
      { 'D.pick_single_gpu()', 'ok 0' }, { 'D.pick_single_gpu({})', 'ok 0' },
      { 'D.pick_single_gpu({0})', 'err RuntimeError: No GPUs available. 1 GPU; excluded: {0}' },
      { 'D.pick_single_gpu({5})', 'ok 0' },
    })
    run.check(1, { { 'D.pick_single_gpu()', 'err RuntimeError: No GPUs available. 1 GPU; excluded: {}; refused: cuda:0 is busy' } },
              { busy = '0' })
  end)

  it('with 2 GPUs: walks the ids in order, skipping excluded and busy ones', function()
    run.check(2, {
      { 'D.pick_single_gpu()', 'ok 0' }, { 'D.pick_single_gpu({0})', 'ok 1' },
      { 'D.pick_single_gpu({1})', 'ok 0' },
      { 'D.pick_single_gpu({0, 1})', 'err No GPUs available.' },
    })
    run.check(2, {
      { 'D.pick_single_gpu()', 'ok 1' },
      { 'D.pick_single_gpu({1})', 'err No GPUs available. 2 GPUs; excluded: {1}; refused: cuda:0 is busy' },
    }, { busy = '0' })
  end)

  it('with 16 GPUs and busy ones', function()
    run.check(16, {
      { 'D.pick_single_gpu()', 'ok 0' }, { 'D.pick_single_gpu({0})', 'ok 2' },
      { 'D.pick_single_gpu({0, 2})', 'ok 4' },
      { 'D.pick_single_gpu({0, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14})', 'ok 15' },
      { 'D.pick_single_gpu({0, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})',
        'err No GPUs available. 16 GPUs; excluded: {0, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}; refused: cuda:1 is busy' },
    }, { busy = '1,3' })
  end)

  it('retries transient allocation failures with backoff, then skips the GPU', function()
    local setup = [[
      local errors = require 'dpl.errors'
      sleeps, tries = {}, {}
      D._sleep = function(s) sleeps[#sleeps + 1] = s end
      D._random = function() return 1 end
      local real = D._probe_gpu
      D._probe_gpu = function(i)
        tries[i] = (tries[i] or 0) + 1
        if i == 0 and tries[i] <= FAILS then error(errors.RuntimeError('transient failure on cuda:0'), 0) end
        return real(i)
      end
    ]]
    run.check(2, {
      { 'D.pick_single_gpu()', 'ok 0' }, { 'tries[0]', 'ok 3' }, { 'sleeps', 'ok {0.02, 0.04}' },
    }, { setup = 'FAILS = 2\n' .. setup })
    run.check(2, {
      { 'D.pick_single_gpu()', 'ok 1' }, { 'tries[0]', 'ok 5' }, { 'tries[1]', 'ok 1' },
      { 'sleeps', 'ok {0.02, 0.04, 0.08, 0.16}' },
      { 'D.pick_single_gpu({1})', 'err No GPUs available. 2 GPUs; excluded: {1}; refused: RuntimeError: transient failure on cuda:0' },
    }, { setup = 'FAILS = math.huge\n' .. setup })
    -- busy GPUs are refused at once, without retries or sleeps
    run.check(2, {
      { 'D.pick_single_gpu()', 'ok 1' }, { 'tries[0]', 'ok 1' }, { 'sleeps', 'ok {}' },
    }, { busy = '0', setup = 'FAILS = 0\n' .. setup })
  end)

  it('checks its argument', function()
    run.check(2, {
      { 'D.pick_single_gpu(1)', 'err TypeError: pick_single_gpu: exclude_gpus must be a sequence of GPU ids, got the number 1' },
      { 'D.pick_single_gpu({a = 1})', 'err TypeError' },
    })
  end)
end)

describe('dpl.devices.pick_multiple_gpus', function()
  local ZERO = 'err MisconfigurationException: auto_select_gpus=true, gpus=0 is not a valid configuration.'

  it('with no GPU', function()
    run.check(nil, {
      { 'D.pick_multiple_gpus(0)', ZERO },
      { 'D.pick_multiple_gpus(1)', 'err MisconfigurationException: You requested 1 GPUs but your machine only has 0 GPUs.' },
      { 'D.pick_multiple_gpus(-1)', 'ok {}' },
    })
  end)

  it('with 1 GPU', function()
    run.check(1, {
      { 'D.pick_multiple_gpus(1)', 'ok {0}' }, { 'D.pick_multiple_gpus(-1)', 'ok {0}' },
      { 'D.pick_multiple_gpus(0)', ZERO },
      { 'D.pick_multiple_gpus(2)', 'err MisconfigurationException: You requested 2 GPUs but your machine only has 1 GPUs.' },
    })
  end)

  it('with 2 GPUs, one busy', function()
    run.check(2, {
      { 'D.pick_multiple_gpus(1)', 'ok {0}' }, { 'D.pick_multiple_gpus(2)', 'ok {0, 1}' },
      { 'D.pick_multiple_gpus(-1)', 'ok {0, 1}' },
    })
    run.check(2, {
      { 'D.pick_multiple_gpus(1)', 'ok {1}' },
      { 'D.pick_multiple_gpus(2)', 'err RuntimeError: No GPUs available.' },
      { 'D.pick_multiple_gpus(-1)', 'err RuntimeError: No GPUs available.' },
      { 'D.pick_multiple_gpus(3)', 'err You requested 3 GPUs but your machine only has 2 GPUs.' },
    }, { busy = '0' })
  end)

  it('with 16 GPUs, two busy', function()
    run.check(16, {
      { 'D.pick_multiple_gpus(3)', 'ok {0, 2, 4}' },
      { 'D.pick_multiple_gpus(14)', 'ok {0, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}' },
      { 'D.pick_multiple_gpus(15)', 'err RuntimeError: No GPUs available.' },
      { 'D.pick_multiple_gpus(-1)', 'err RuntimeError: No GPUs available.' },
      { 'D.pick_multiple_gpus(17)', 'err You requested 17 GPUs but your machine only has 16 GPUs.' },
      { 'D.pick_multiple_gpus(0)', ZERO },
    }, { busy = '1,3' })
    run.check(16, { { '#D.pick_multiple_gpus(-1)', 'ok 16' }, { 'D.pick_multiple_gpus(16)[16]', 'ok 15' } })
  end)

  it('rejects non-integers and negatives other than -1', function()
    run.check(2, {
      { 'D.pick_multiple_gpus(1.5)', 'err MisconfigurationException: pick_multiple_gpus: the number of GPUs must be an integer, got the number 1.5' },
      { "D.pick_multiple_gpus('2')", 'err MisconfigurationException' },
      { 'D.pick_multiple_gpus(-2)', 'err MisconfigurationException: pick_multiple_gpus: gpus must be -1 (all GPUs) or a positive number, got -2' },
    })
  end)

  it('feeds parse_gpu_ids the way the Trainer does with auto_select_gpus', function()
    run.check(4, { { 'D.parse_gpu_ids(D.pick_multiple_gpus(2))', 'ok {0, 2}' } }, { busy = '1' })
  end)
end)
