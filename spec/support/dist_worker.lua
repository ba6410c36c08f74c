-- dist_worker.lua: one rank of the collectives matrix (spec/dist_collectives_spec.lua).
-- Runs every collective x dtype x op on raw ffi buffers, plus object collectives
-- and subgroups, and checks each result against values computed here for all
-- ranks in one process. Prints "DIST-OK rank <r> checks <n>" when all passed.
-- Usage: dplhost dist_worker.lua [backend]   (rank/size from the environment)
local ffi = require 'ffi'
local dist = require('dpl').dist

local backend = arg and arg[1] or 'shm'
dist.init_process_group{ backend = backend }
local R, P = dist.get_rank(), dist.get_world_size()
local checks = 0

local dtypes = { 'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'bool' }
local ctype = { float32 = 'float', float64 = 'double', float16 = 'uint16_t', bfloat16 = 'uint16_t',
  int32 = 'int32_t', int64 = 'int64_t', uint8 = 'uint8_t', bool = 'uint8_t' }
local floating = { float32 = true, float64 = true, float16 = true, bfloat16 = true }

-- half encodings of small numbers
local u32 = ffi.new('union { float f; uint32_t u; }')
local function f16_enc(x)
  if x == 0 then return 0 end
  local s = x < 0 and 0x8000 or 0
  x = math.abs(x)
  local e = math.floor(math.log(x) / math.log(2))
  if 2 ^ (e + 1) <= x then e = e + 1 end
  if 2 ^ e > x then e = e - 1 end
  local m = x / 2 ^ e - 1
  local mi = math.floor(m * 1024 + 0.5)
  if mi == 1024 then mi, e = 0, e + 1 end
  return s + (e + 15) * 1024 + mi
end
local function f16_dec(h)
  local s = bit.band(h, 0x8000) ~= 0 and -1 or 1
  local e, m = bit.band(bit.rshift(h, 10), 0x1f), bit.band(h, 0x3ff)
  if e == 0 then return s * m * 2 ^ -24 end
  return s * (1 + m / 1024) * 2 ^ (e - 15)
end
local function bf16_enc(x) u32.f = x return bit.rshift(u32.u, 16) end
local function bf16_dec(h) u32.u = bit.lshift(h, 16) return u32.f end

local function put(buf, i, dt, x)
  if dt == 'float16' then buf[i] = f16_enc(x)
  elseif dt == 'bfloat16' then buf[i] = bf16_enc(x)
  else buf[i] = x end
end
local function get(buf, i, dt)
  if dt == 'float16' then return f16_dec(buf[i]) end
  if dt == 'bfloat16' then return bf16_dec(buf[i]) end
  return tonumber(buf[i])
end

-- values of rank r at element i for an op
local function val(r, i, dt, op)
  if dt == 'bool' then return ((r + i) % 3 == 0) and 1 or 0 end
  if op == 'prod' then
    if dt == 'uint8' then return ({ 1, 2, 3 })[(r + 2 * i) % 3 + 1] end
    return ({ 1, -1, 2 })[(r + 2 * i) % 3 + 1]
  end
  if dt == 'uint8' then return (r * 7 + i * 3) % 11 end
  return (r * 7 + i * 3) % 11 - 5
end

local function combine(dt, op, xs)
  local acc = xs[1]
  for k = 2, #xs do
    local x = xs[k]
    if dt == 'bool' then
      if op == 'sum' or op == 'max' then acc = (acc ~= 0 or x ~= 0) and 1 or 0
      else acc = (acc ~= 0 and x ~= 0) and 1 or 0 end
    elseif op == 'sum' or op == 'mean' then acc = acc + x
    elseif op == 'prod' then acc = acc * x
    elseif op == 'max' then acc = math.max(acc, x)
    else acc = math.min(acc, x) end
  end
  if op == 'mean' then acc = acc / #xs end
  if dt == 'uint8' then acc = acc % 256 end
  return acc
end

local function expect_eq(got, want, dt, op, what, i)
  local ok
  if op == 'mean' then ok = math.abs(got - want) <= math.abs(want) * (dt:match('16') and 1e-2 or 1e-6) + 1e-12
  else ok = got == want end
  if not ok then
    error(('rank %d: %s %s %s element %d: got %s want %s'):format(R, what, dt, tostring(op), i, tostring(got), tostring(want)), 2)
  end
  checks = checks + 1
end

local sizes = { 0, 3, 20011 }
local ops_for = function(dt)
  if floating[dt] then return { 'sum', 'mean', 'max', 'min', 'prod' } end
  return { 'sum', 'max', 'min', 'prod' }
end

local xs = {}
for _, dt in ipairs(dtypes) do
  local ct = ctype[dt]
  for _, n in ipairs(sizes) do
    local alloc = math.max(1, n)
    -- all_reduce, reduce, reduce_scatter
    for _, op in ipairs(ops_for(dt)) do
      local b = ffi.new(ct .. '[?]', alloc)
      for i = 0, n - 1 do put(b, i, dt, val(R, i, dt, op)) end
      dist.all_reduce(b, op, { count = n, dtype = dt })
      for i = 0, n - 1 do
        for r = 0, P - 1 do xs[r + 1] = val(r, i, dt, op) end
        expect_eq(get(b, i, dt), combine(dt, op, xs), dt, op, 'all_reduce n=' .. n, i)
      end
      local dst = P - 1
      for i = 0, n - 1 do put(b, i, dt, val(R, i, dt, op)) end
      dist.reduce(b, dst, op, { count = n, dtype = dt })
      for i = 0, n - 1 do
        if R == dst then
          for r = 0, P - 1 do xs[r + 1] = val(r, i, dt, op) end
          expect_eq(get(b, i, dt), combine(dt, op, xs), dt, op, 'reduce n=' .. n, i)
        else
          expect_eq(get(b, i, dt), val(R, i, dt, op), dt, nil, 'reduce (untouched) n=' .. n, i)
        end
      end
      if n < 10000 or op == 'sum' then
        local m = n
        local s = ffi.new(ct .. '[?]', math.max(1, m * P))
        for i = 0, m * P - 1 do put(s, i, dt, val(R, i, dt, op)) end
        local o = ffi.new(ct .. '[?]', alloc)
        dist.reduce_scatter(o, s, op, { count = m, dtype = dt })
        for i = 0, m - 1 do
          for r = 0, P - 1 do xs[r + 1] = val(r, R * m + i, dt, op) end
          expect_eq(get(o, i, dt), combine(dt, op, xs), dt, op, 'reduce_scatter n=' .. m, i)
        end
      end
    end
    -- broadcast
    local src = 1 % P
    local b = ffi.new(ct .. '[?]', alloc)
    for i = 0, n - 1 do put(b, i, dt, val(R, i, dt, 'sum')) end
    dist.broadcast(b, src, { count = n, dtype = dt })
    for i = 0, n - 1 do expect_eq(get(b, i, dt), val(src, i, dt, 'sum'), dt, nil, 'broadcast n=' .. n, i) end
    -- all_gather, gather
    for i = 0, n - 1 do put(b, i, dt, val(R, i, dt, 'sum')) end
    local recv = ffi.new(ct .. '[?]', math.max(1, n * P))
    dist.all_gather(recv, b, { count = n, dtype = dt })
    for r = 0, P - 1 do
      for i = 0, n - 1 do expect_eq(get(recv, r * n + i, dt), val(r, i, dt, 'sum'), dt, nil, 'all_gather n=' .. n, i) end
    end
    local groot = 0
    local grecv = ffi.new(ct .. '[?]', math.max(1, n * P))
    dist.gather(b, R == groot and grecv or nil, groot, { count = n, dtype = dt })
    if R == groot then
      for r = 0, P - 1 do
        for i = 0, n - 1 do expect_eq(get(grecv, r * n + i, dt), val(r, i, dt, 'sum'), dt, nil, 'gather n=' .. n, i) end
      end
    end
    -- scatter from the last rank
    local sroot = P - 1
    local sbuf = ffi.new(ct .. '[?]', math.max(1, n * P))
    for i = 0, n * P - 1 do put(sbuf, i, dt, val(R, i, dt, 'sum')) end
    local sout = ffi.new(ct .. '[?]', alloc)
    dist.scatter(sout, R == sroot and sbuf or nil, sroot, { count = n, dtype = dt })
    for i = 0, n - 1 do expect_eq(get(sout, i, dt), val(sroot, R * n + i, dt, 'sum'), dt, nil, 'scatter n=' .. n, i) end
  end
end
dist.barrier()

-- objects
local obj = { rank = R, nested = { list = { 1, 2, { deep = 'x' .. R } }, flag = R % 2 == 0 }, s = ('y'):rep(R * 1000) }
local all = dist.all_gather_object(obj)
assert(#all == P, 'all_gather_object: ' .. #all .. ' entries')
for r = 0, P - 1 do
  local o = all[r + 1]
  assert(o.rank == r and o.nested.list[3].deep == 'x' .. r and o.nested.flag == (r % 2 == 0) and #o.s == r * 1000,
    'all_gather_object entry ' .. r)
  checks = checks + 1
end
local b = dist.broadcast_object(R == P - 1 and { from = R, t = { a = { b = { c = 42 } } } } or 'ignored', P - 1)
assert(b.from == P - 1 and b.t.a.b.c == 42, 'broadcast_object')
local g = dist.gather_object({ R, R * R }, 0)
if R == 0 then
  for r = 0, P - 1 do assert(g[r + 1][2] == r * r, 'gather_object') end
else assert(g == nil) end
checks = checks + 3

-- subgroups: even ranks, and the last rank alone
local evens = {}
for r = 0, P - 1, 2 do evens[#evens + 1] = r end
local ge = dist.new_group(evens)
local glast = dist.new_group({ P - 1 })
if R % 2 == 0 then
  local v = ffi.new('int64_t[1]', R + 1)
  dist.all_reduce(v, 'sum', { count = 1, dtype = 'int64', group = ge })
  local want = 0
  for _, r in ipairs(evens) do want = want + r + 1 end
  assert(tonumber(v[0]) == want, 'subgroup all_reduce')
  assert(dist.get_rank(ge) == R / 2 and dist.get_world_size(ge) == #evens)
  local bo = dist.broadcast_object(R == evens[#evens] and 'last-even' or nil, evens[#evens], { group = ge })
  assert(bo == 'last-even', 'subgroup broadcast_object: ' .. tostring(bo))
  checks = checks + 1
else
  assert(dist.get_rank(ge) == -1)
  local ok, e = pcall(dist.all_reduce, ffi.new('int64_t[1]'), 'sum', { count = 1, dtype = 'int64', group = ge })
  assert(not ok and tostring(e):match('not a member'), tostring(e))
end
if R == P - 1 then
  local v = ffi.new('float[2]', 3, 4)
  dist.all_reduce(v, 'mean', { count = 2, dtype = 'float32', group = glast })
  assert(v[0] == 3 and v[1] == 4)
end
-- dpl tensors (when the tensor module is there)
local okT, T = pcall(require, 'dpl.tensor')
if okT and type(T) == 'table' and T.tensor then
  for _, dt in ipairs({ 'float32', 'bfloat16', 'int64' }) do
    local t = T.tensor({ { R, 1 }, { 2, R * R } }, { dtype = dt })
    dist.all_reduce(t, 'sum')
    local s1, s2 = 0, 0
    for r = 0, P - 1 do s1, s2 = s1 + r, s2 + r * r end
    local v = t:totable()
    assert(v[1][1] == s1 and v[1][2] == P and v[2][1] == 2 * P and v[2][2] == s2, 'tensor all_reduce ' .. dt)
    local list = dist.all_gather(T.tensor({ R, -R }, { dtype = dt }))
    assert(#list == P)
    for r = 0, P - 1 do assert(list[r + 1]:totable()[2] == -r, 'tensor all_gather') end
    local out = T.tensor({ 0, 0 }, { dtype = dt })
    local inputs = {}
    for j = 0, P - 1 do inputs[j + 1] = T.tensor({ j, R }, { dtype = dt }) end
    dist.reduce_scatter(out, inputs, 'sum')
    assert(out:totable()[1] == R * P and out:totable()[2] == s1, 'tensor reduce_scatter')
    local sc = T.tensor({ 0, 0 }, { dtype = dt })
    dist.scatter(sc, R == 0 and inputs or nil, 0)
    assert(sc:totable()[1] == R and sc:totable()[2] == 0, 'tensor scatter')
    local gl = dist.gather(T.tensor({ R, 7 }, { dtype = dt }), nil, P - 1)
    if R == P - 1 then for r = 0, P - 1 do assert(gl[r + 1]:totable()[1] == r) end else assert(gl == nil) end
    checks = checks + 5
  end
end

-- all_reduce_multi (DDP buckets in place): several buffers reduced as their concatenation;
-- segment boundaries fall inside chunks and parts (the small-slot run splits them finely)
do
  local C = require('dpl').C
  local comm = dist._comm()
  local dt_ids = { float32 = 0, float64 = 1, float16 = 2, bfloat16 = 3, int32 = 4, int64 = 5, uint8 = 6, bool = 7 }
  local op_ids = { sum = 0, mean = 1, max = 2, min = 3, prod = 4 }
  for _, layout in ipairs({ { 3, 0, 5, 2 }, { 3, 0, 20011, 7, 5000, 1 } }) do
    for _, dt in ipairs({ 'float32', 'float64', 'bfloat16', 'int32' }) do
      for _, op in ipairs(floating[dt] and { 'sum', 'mean', 'max' } or { 'sum', 'min' }) do
        local nb = #layout
        local bufs, counts, keep = ffi.new('void *[?]', nb), ffi.new('int64_t[?]', nb), {}
        local g = 0
        for k, n in ipairs(layout) do
          local b = ffi.new(ctype[dt] .. '[?]', math.max(1, n))
          for i = 0, n - 1 do put(b, i, dt, val(R, g + i, dt, op)) end
          keep[k], bufs[k - 1], counts[k - 1] = b, b, n
          g = g + n
        end
        assert(C.dpl_comm_all_reduce_multi(comm, bufs, counts, nb, dt_ids[dt], op_ids[op]) == 0,
          ffi.string(C.dpl_last_error()))
        g = 0
        for k, n in ipairs(layout) do
          for i = 0, n - 1 do
            for r = 0, P - 1 do xs[r + 1] = val(r, g + i, dt, op) end
            expect_eq(get(keep[k], i, dt), combine(dt, op, xs), dt, op, 'all_reduce_multi segment ' .. k, i)
          end
          g = g + n
        end
      end
    end
  end
  local counts = ffi.new('int64_t[1]', -1)
  local bufs = ffi.new('void *[1]')
  assert(C.dpl_comm_all_reduce_multi(comm, bufs, counts, 1, 0, 0) ~= 0)
  assert(ffi.string(C.dpl_last_error()):match('all_reduce_multi: count 1 must be >= 0, got %-1'))
  assert(C.dpl_comm_all_reduce_multi(comm, nil, nil, -1, 0, 0) ~= 0)
  assert(ffi.string(C.dpl_last_error()):match('nbufs must be >= 0'))
  checks = checks + 2
end

dist.barrier()
dist.destroy_process_group()
assert(not dist.is_initialized())
print(('DIST-OK rank %d checks %d'):format(R, checks))
