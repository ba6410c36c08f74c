-- dist_semantics_spec.lua: argument and protocol rules of dpl.dist across real
-- ranks: flat tensors of the wrong dtype, new_group with different lists (shm and
-- mpi), a rank arriving after its peer timed out, bad RANK/WORLD_SIZE/timeouts,
-- NaN through max/min on mpi, and the torch functions added on top of the
-- collectives (object lists, monitored_barrier, async_op handles, flat scatter).
local h = require 'spec.support.helpers'
local d = require 'spec.support.dist_helpers'

-- one script for every case: `dplhost script <case>`, prints lines the specs match
local script = h.write_file(h.tmpname('.lua'), [==[
local dpl = require 'dpl'
local dist = dpl.dist
local case = arg[1]
local function say(...) print(('[%d] '):format(dist.get_rank()) .. string.format(...)) end
local function try(name, f, ...)
  local ok, e = pcall(f, ...)
  say('%s: %s %s', name, ok and 'OK' or 'ERR', tostring(e))
end
if case == 'dtype' then
  dist.init_process_group{}
  local R, N = dist.get_rank(), dist.get_world_size()
  try('all_gather', dist.all_gather, dpl.zeros(4 * N, { dtype = 'float64' }), dpl.ones(4))
  try('reduce_scatter', dist.reduce_scatter, dpl.zeros(4), dpl.ones(4 * N, { dtype = 'float64' }))
  try('dtype opt', dist.all_reduce, dpl.ones(4), 'sum', { dtype = 'int64' })
  -- src/dst-only mistakes: raised before the call is numbered, so the root's next
  -- (good) call is the one its peers wait in
  if R == 0 then try('scatter', dist.scatter, dpl.zeros(4), dpl.ones(4 * N, { dtype = 'int32' }), 0) end
  dist.scatter(dpl.zeros(4), R == 0 and dpl.ones(4 * N) or nil, 0)
  if R == 0 then try('gather', dist.gather, dpl.ones(4), dpl.zeros(4 * N, { dtype = 'int32' }), 0) end
  dist.gather(dpl.ones(4), R == 0 and dpl.zeros(4 * N) or nil, 0)
  say('still in step')
elseif case == 'lists' then
  dist.init_process_group{ timeout = 20 }
  local R = dist.get_rank()
  try('own pair', dist.new_group, R <= 1 and { 0, 1 } or { 2, 3 })
  local a, b = dist.new_group({ 0, 1 }), dist.new_group({ 2, 3 })
  local t = dpl.full({ 1 }, R + 1, { dtype = 'float32' })
  dist.all_reduce(t, 'sum', { group = R <= 1 and a or b })
  say('pair sum %s', t[1]:item())
elseif case == 'late' then
  dist.init_process_group{ timeout = 1 }
  local R = dist.get_rank()
  if R == 1 then dpl.C.dpl_sleep(2.5) end
  local what = arg[2]
  local ok, e
  if what == 'barrier' then ok, e = pcall(dist.barrier)
  elseif what == 'broadcast' then ok, e = pcall(dist.broadcast, dpl.ones(4), 0)
  else ok, e = pcall(dist.all_reduce, dpl.ones(4)) end
  say('late %s: %s %s', what, tostring(ok), tostring(e))
elseif case == 'init' then
  local opts = {}
  if arg[2] == 'nan' then opts.timeout = 0 / 0 elseif arg[2] == 'inf' then opts.timeout = math.huge end
  try('init', dist.init_process_group, opts)
  if arg[2] == 'group' then try('new_group', dist.new_group, { 0 }, { timeout = math.huge }) end
elseif case == 'nan' then
  dist.init_process_group{}
  local R, N = dist.get_rank(), dist.get_world_size()
  for _, dt in ipairs({ 'float32', 'float64', 'float16', 'bfloat16' }) do
    for _, op in ipairs({ 'max', 'min' }) do
      local t = dpl.tensor({ R == 0 and 0 / 0 or 1, R == N - 1 and 0 / 0 or 1, R + 1 }, { dtype = dt })
      dist.all_reduce(t, op)
      local il = {}
      for k = 1, N do il[k] = dpl.tensor({ R == 1 and 0 / 0 or k }, { dtype = dt }) end
      local rs = dpl.zeros(1, { dtype = dt })
      dist.reduce_scatter(rs, il, op)
      say('%s %s %s %s %s rs %s', dt, op, tostring(t[1]:item()), tostring(t[2]:item()), tostring(t[3]:item()),
        tostring(rs[1]:item()))
    end
  end
elseif case == 'api' then
  dist.init_process_group{ backend = arg[2] }
  local R, N = dist.get_rank(), dist.get_world_size()
  say('backend %s', dist.get_backend())
  local l = R == 1 and { 'a', { b = 2 }, 3 } or { 'x', 'y', 'z', 'w' }
  dist.broadcast_object_list(l, 1)
  say('broadcast_object_list %d %s %s %s', #l, l[1], l[2].b, l[3])
  local out = dist.scatter_object_list({}, R == 0 and { 'r0', { k = 'r1' } } or nil, 0)
  say('scatter_object_list %s', type(out[1]) == 'table' and out[1].k or out[1])
  local w = dist.all_reduce(dpl.ones(2), 'sum', { async_op = true })
  say('async %s %s %s', tostring(w:wait()), tostring(w:is_completed()), w:result()[1]:item())
  local t = dpl.zeros(2)
  dist.scatter(t, R == 0 and dpl.arange(0, 2 * N, 1, { dtype = 'float32' }) or nil, 0)
  say('flat scatter %s %s', t[1]:item(), t[2]:item())
  try('send', dist.send, t, 1 - R)
  try('src string', dist.broadcast, t, '0')
  dist.monitored_barrier({ timeout = 10 })
  say('monitored_barrier ok')
elseif case == 'monitored' then
  dist.init_process_group{}
  if dist.get_rank() >= 1 then dpl.C.dpl_sleep(2) end
  try('monitored_barrier', dist.monitored_barrier, nil, 0.5)
elseif case == 'objtimeout' then
  dist.init_process_group{ timeout = 1 }
  if dist.get_rank() == 1 then dpl.C.dpl_sleep(2) end
  try('broadcast_object', dist.broadcast_object, 'x', 0)
end
]==])

local function lines(res)
  local all = {}
  for _, x in ipairs(res) do all[#all + 1] = x.out .. x.err end
  return table.concat(all, '\n')
end

describe('dist semantics (shm)', function()
  it('flat tensors of another dtype are refused, as the list forms', function()
    local res = d.run_ranks(2, script, 'dtype', { timeout = 30 })
    local out = lines(res)
    assert.matches('all_gather: ERR ValueError: dist: all_gather: the output tensor is float64 x 8, expected float32 x 8', out, 1, true)
    assert.matches('reduce_scatter: ERR ValueError: dist: reduce_scatter: the input tensor is float64 x 8, expected float32 x 8', out, 1, true)
    assert.matches('[0] scatter: ERR ValueError: dist: scatter: the input tensor is int32 x 8, expected float32 x 8', out, 1, true)
    assert.matches('dtype opt: ERR ValueError: dist: all_reduce: dtype=int64 but the tensor is float32', out, 1, true)
    assert.matches('[0] gather: ERR ValueError: dist: gather: the output tensor is int32 x 8, expected float32 x 8', out, 1, true)
    for r = 1, 2 do assert.are.equal(0, res[r].rc, res[r].out .. res[r].err) end
    assert.matches('[1] still in step', out, 1, true)
  end)

  it('new_group with different lists on different ranks fails on every rank, naming the lists', function()
    local res = d.run_ranks(4, script, 'lists', { timeout = 40 })
    for r = 0, 3 do
      local x = res[r + 1]
      assert.are.equal(0, x.rc, x.out .. x.err)
      assert.matches('own pair: ERR ValueError: dist: new_group: the ranks passed different lists: rank 0 passed [0,1] but rank 2 passed [2,3]', x.out, 1, true)
      assert.matches('pair sum ' .. (r <= 1 and 3 or 7), x.out, 1, true)
    end
  end)

  for _, what in ipairs({ 'all_reduce', 'barrier', 'broadcast' }) do
    it(('a rank arriving after its peer timed out fails too (%s)'):format(what), function()
      local res = d.run_ranks(2, script, 'late ' .. what, { timeout = 30 })
      assert.matches('late ' .. what .. ': false DistError: dist: rank 0 timed out after 1 s in ' .. what .. ' #1', res[1].out, 1, true)
      assert.matches('late ' .. what .. ': false DistError: dist: rank 0 timed out after 1 s in ' .. what .. ' #1', res[2].out, 1, true)
      assert.matches('(reported by rank 0)', res[2].out, 1, true)
    end)
  end

  it('a non-numeric RANK or WORLD_SIZE, or a bad DPL_COMM_TIMEOUT, is a configuration error', function()
    local cases = {
      { 'RANK=0 WORLD_SIZE=two', "WORLD_SIZE='two' is not an integer" },
      { 'RANK=abc WORLD_SIZE=2', "RANK='abc' is not an integer" },
      { 'RANK=0 WORLD_SIZE=2 LOCAL_RANK=x DPL_DIST_BACKEND=shm', nil },
    }
    for _, c in ipairs(cases) do
      if c[2] then
        local out = h.sh(('%s DPL_JOB_ID=semenv%s timeout 20 %s %s init'):format(c[1], h.pid(), h.q(h.bin), h.q(script)))
        assert.matches('init: ERR MisconfigurationException: init_process_group: ' .. c[2], out, 1, true)
      end
    end
    for _, v in ipairs({ 'abc', '0', '-5', 'inf' }) do
      local out = h.sh(('DPL_COMM_TIMEOUT=%s RANK=1 WORLD_SIZE=2 DPL_JOB_ID=semto%s timeout 20 %s %s init'):format(
        v, h.pid(), h.q(h.bin), h.q(script)))
      assert.matches(("DPL_COMM_TIMEOUT must be a finite number of seconds > 0, got '%s'"):format(v), out, 1, true)
    end
    local out = h.sh(('timeout 20 %s %s init nan'):format(h.q(h.bin), h.q(script)))
    assert.matches('init: ERR MisconfigurationException: init_process_group: timeout must be a number of seconds > 0, got nan', out, 1, true)
    out = h.sh(('timeout 20 %s %s init inf'):format(h.q(h.bin), h.q(script)))
    assert.matches('timeout must be a number of seconds > 0, got inf (it must be finite)', out, 1, true)
    out = h.sh(('timeout 20 %s %s init group'):format(h.q(h.bin), h.q(script)))
    assert.matches('new_group: ERR MisconfigurationException: dist.new_group: timeout must be a number of seconds > 0, got inf', out, 1, true)
  end)

  it('object lists, async handles, flat scatter, monitored_barrier; send names the alternative', function()
    local res = d.run_ranks(2, script, 'api SHM', { timeout = 30 })
    for r = 0, 1 do
      local x = res[r + 1]
      assert.are.equal(0, x.rc, x.out .. x.err)
      assert.matches('backend shm', x.out, 1, true)
      assert.matches('broadcast_object_list 3 a 2 3', x.out, 1, true)
      assert.matches('scatter_object_list r' .. r, x.out, 1, true)
      assert.matches('async true true 2', x.out, 1, true)
      assert.matches(('flat scatter %d %d'):format(2 * r, 2 * r + 1), x.out, 1, true)
      assert.matches('send: ERR NotImplementedError: dist.send: point-to-point send/recv is not supported', x.out, 1, true)
      assert.matches("src string: ERR ValueError: dist: src must be an integer rank, got '0' (a string)", x.out, 1, true)
      assert.matches('monitored_barrier ok', x.out, 1, true)
    end
  end)

  it('monitored_barrier times out naming every rank that did not arrive', function()
    local res = d.run_ranks(3, script, 'monitored', { timeout = 30 })
    assert.matches('monitored_barrier: ERR DistError: dist: monitored_barrier: rank 0 timed out after 0.5 s in barrier #1 '
      .. 'waiting for rank 1, whose last call is none yet; ranks not arrived: 1,2 (timeout: monitored_barrier{timeout=})',
      res[1].out, 1, true)
    assert.matches('monitored_barrier: ERR DistError: dist: monitored_barrier:', res[3].out, 1, true)
  end)

  it('errors of the object collectives name the call', function()
    local res = d.run_ranks(2, script, 'objtimeout', { timeout = 30 })
    assert.matches('broadcast_object: ERR DistError: dist: broadcast_object: rank 0 timed out after 1 s in broadcast #1', res[1].out, 1, true)
    assert.matches('broadcast_object: ERR DistError: dist: broadcast_object: rank 0 timed out', res[2].out, 1, true)
  end)
end)

describe('dist semantics (mpi)', function()
  if not d.has_mpi then
    pending('mpirun is not installed')
    return
  end
  it('max and min propagate NaN, as on shm and in torch', function()
    local out, err, rc = d.mpirun(3, script, 'nan')
    assert.are.equal(0, rc, out .. err)
    for _, dt in ipairs({ 'float32', 'float64', 'float16', 'bfloat16' }) do
      assert.matches(('[0] %s max nan nan 3 rs nan'):format(dt), out, 1, true)
      assert.matches(('[0] %s min nan nan 1 rs nan'):format(dt), out, 1, true)
    end
  end)
  it('new_group with different lists on different ranks fails on every rank', function()
    local out, err, rc = d.mpirun(4, script, 'lists')
    assert.are.equal(0, rc, out .. err)
    local _, n = out:gsub('own pair: ERR ValueError: dist: new_group: the ranks passed different lists: rank 0 passed %[0,1%] but rank 2 passed %[2,3%]', '')
    assert.are.equal(4, n, out)
    assert.matches('[0] pair sum 3', out, 1, true)
    assert.matches('[3] pair sum 7', out, 1, true)
  end)
  it('object lists, async handles, flat scatter; backend names ignore case', function()
    local out, err, rc = d.mpirun(2, script, 'api MPI')
    assert.are.equal(0, rc, out .. err)
    assert.matches('[1] backend mpi', out, 1, true)
    assert.matches('[0] broadcast_object_list 3 a 2 3', out, 1, true)
    assert.matches('[1] scatter_object_list r1', out, 1, true)
    assert.matches('[1] flat scatter 2 3', out, 1, true)
    assert.matches('[0] monitored_barrier ok', out, 1, true)
  end)
end)
