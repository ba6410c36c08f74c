-- tensor_fuzz_spec.lua: random shapes, dims, dtypes and arguments thrown at the
-- public entry points (Lua methods and raw C calls with NULLs and junk): every
-- call either succeeds with a consistent tensor or raises an error message;
-- nothing crashes (run under `make SAN=1` too), and no byte leaks.
local dpl = require 'dpl'
local ffi = require 'ffi'
local C = dpl.C

local dtypes = { 'float32', 'float64', 'float16', 'bfloat16', 'int32', 'int64', 'uint8', 'bool' }

local function rnd_shape(r)
  local n = r(0, 4)
  local s = {}
  for i = 1, n do s[i] = r(0, 4) end
  return s
end

local function rnd_tensor(r)
  local dt = dtypes[r(1, #dtypes)]
  local t = dpl.randn(rnd_shape(r), { dtype = 'float64' }):mul(3):to(dt)
  if r(1, 4) == 1 and t:dim() >= 2 then t = t:transpose(1, 2) end
  if r(1, 5) == 1 and t:dim() >= 1 and t:size(1) > 1 then t = t:narrow(1, 2, t:size(1) - 1) end
  return t
end

local function rnd_dim(r, t) return r(-(t:dim() + 1), t:dim() + 1) end

local function consistent(x)
  if not dpl.tensor.is_tensor(x) then return end
  local n = 1
  for _, s in ipairs(x.shape) do n = n * s end
  assert.are.equal(n, x:numel())
  if n <= 64 then x:totable() tostring(x) end
end

local ops = {
  function(r, a, b) return a + b end,
  function(r, a, b) return a * b end,
  function(r, a, b) return a / b end,
  function(r, a, b) return a - 2 end,
  function(r, a, b) return a ^ b end,
  function(r, a, b) return a % b end,
  function(r, a, b) return a:add_(b) end,
  function(r, a, b) return a:mul_(r(-3, 3)) end,
  function(r, a, b) return a:eq(b) end,
  function(r, a, b) return a:lt(b):logical_not() end,
  function(r, a) return a:exp() end,
  function(r, a) return a:sqrt_() end,
  function(r, a) return a:relu() end,
  function(r, a) return a:sigmoid() end,
  function(r, a) return -a end,
  function(r, a) return a:sum(rnd_dim(r, a)) end,
  function(r, a) return a:mean(rnd_dim(r, a), true) end,
  function(r, a) return a:max(rnd_dim(r, a)) end,
  function(r, a) return a:argmin(rnd_dim(r, a)) end,
  function(r, a) return a:std() end,
  function(r, a) return a:norm(r(1, 3), rnd_dim(r, a)) end,
  function(r, a) return a:logsumexp(rnd_dim(r, a)) end,
  function(r, a) return a:softmax(rnd_dim(r, a)) end,
  function(r, a) return a:view(-1) end,
  function(r, a) return a:reshape(rnd_shape(r)) end,
  function(r, a) return a:transpose(rnd_dim(r, a), rnd_dim(r, a)) end,
  function(r, a) return a:permute(r(1, 3), r(1, 3), r(1, 3)) end,
  function(r, a) return a:narrow(rnd_dim(r, a), r(-2, 3), r(-1, 3)) end,
  function(r, a) return a:select(rnd_dim(r, a), r(-3, 3)) end,
  function(r, a) return a[r(-3, 4)] end,
  function(r, a) return a:expand(rnd_shape(r)) end,
  function(r, a) return a:squeeze(rnd_dim(r, a)) end,
  function(r, a) return a:unsqueeze(rnd_dim(r, a)) end,
  function(r, a, b) return a:matmul(b) end,
  function(r, a, b) return dpl.addmm(a, b, b) end,
  function(r, a, b) return a:copy_(b) end,
  function(r, a, b) return dpl.cat({ a, b }, rnd_dim(r, a)) end,
  function(r, a, b) return dpl.stack({ a, b }, rnd_dim(r, a)) end,
  function(r, a, b) return dpl.where(a:gt(0), a, b) end,
  function(r, a, b) return a:masked_fill(b:bool(), 1) end,
  function(r, a, b) return a:index_select(rnd_dim(r, a), b:long()) end,
  function(r, a, b) return a:gather(rnd_dim(r, a), b:long()) end,
  function(r, a, b) return a:clone():scatter_add_(rnd_dim(r, a), b:long(), a) end,
  function(r, a, b) return dpl.cross_entropy(a, b:long()) end,
  function(r, a, b) return dpl.mse_loss(a, b) end,
  function(r, a, b) return dpl.embedding(a, b:long()) end,
  function(r, a) return a:clamp(r(-2, 0), r(0, 2)) end,
  function(r, a) return a:to(dtypes[r(1, #dtypes)]) end,
  function(r, a, b) return dpl.conv2d(a, b) end,
  function(r, a) return dpl.max_pool2d(a, r(0, 3)) end,
  function(r, a) return dpl.avg_pool2d(a, { r(1, 3), r(1, 3) }, { padding = r(0, 1) }) end,
  function(r, a) return a:uniform_(-1, 1) end,
  function(r, a) return a:as_strided({ r(0, 3), r(0, 3) }, { r(0, 3), r(0, 3) }, r(0, 5)) end,
  -- sorting and selection
  function(r, a) return a:sort(rnd_dim(r, a), r(0, 1) == 1) end,
  function(r, a) return a:topk(r(-1, 4), rnd_dim(r, a), r(0, 1) == 1) end,
  function(r, a) return a:kthvalue(r(0, 4), rnd_dim(r, a)) end,
  function(r, a) return a:median(rnd_dim(r, a)) end,
  function(r, a) return a:median() end,
  function(r, a) return a:mode(rnd_dim(r, a)) end,
  function(r, a) return a:unique(true, true, true) end,
  function(r, a) return a:bincount() end,
  function(r, a) return a:histc(r(0, 5)) end,
  function(r, a) return a:count_nonzero(rnd_dim(r, a)) end,
  -- scans, reordering, triangles, views
  function(r, a) return a:cumsum(rnd_dim(r, a)) end,
  function(r, a) return a:cumprod(rnd_dim(r, a)) end,
  function(r, a) return a:cummax(rnd_dim(r, a)) end,
  function(r, a) return a:flip(rnd_dim(r, a)) end,
  function(r, a) return a:roll(r(-5, 5), rnd_dim(r, a)) end,
  function(r, a) return a:rot90(r(-2, 2), { rnd_dim(r, a), rnd_dim(r, a) }) end,
  function(r, a) return a:tile(r(0, 2), r(0, 2)) end,
  function(r, a, b) return a:repeat_interleave(b:long(), rnd_dim(r, a)) end,
  function(r, a) return a:chunk(r(-1, 3), rnd_dim(r, a)) end,
  function(r, a) return a:split(r(-1, 3), rnd_dim(r, a)) end,
  function(r, a) return a:unbind(rnd_dim(r, a)) end,
  function(r, a) return a:tril(r(-2, 2)) end,
  function(r, a) return a:triu_(r(-2, 2)) end,
  function(r, a) return a:diag(r(-2, 2)) end,
  function(r, a) return a:diagonal(r(-2, 2), rnd_dim(r, a), rnd_dim(r, a)) end,
  function(r, a) return a:trace() end,
  function(r, a) return a:movedim(rnd_dim(r, a), rnd_dim(r, a)) end,
  function(r, a) return a:unfold(rnd_dim(r, a), r(-1, 3), r(-1, 2)) end,
  function(r, a, b) return a:take(b:long()) end,
  -- index/scatter writes
  function(r, a, b) return a:scatter(rnd_dim(r, a), b:long(), a) end,
  function(r, a, b) return a:clone():scatter_(rnd_dim(r, a), b:long(), r(-2, 2), { reduce = 'add' }) end,
  function(r, a, b) return a:index_fill(rnd_dim(r, a), b:long(), r(-2, 2)) end,
  function(r, a, b) return a:index_copy(rnd_dim(r, a), b:long(), a) end,
  function(r, a, b) return a:index_put({ b:long() }, a, r(0, 1) == 1) end,
  function(r, a, b) return a:masked_scatter(b:bool(), a) end,
  function(r, a, b) return a:put(b:long(), a, r(0, 1) == 1) end,
  function(r, a) return a:clone():fill_diagonal_(r(-2, 2), r(0, 1) == 1) end,
  -- elementwise math and reductions
  function(r, a) return a:atanh() end,
  function(r, a) return a:softplus(r(-1, 2), r(0, 20)) end,
  function(r, a) return a:elu_(r(-1, 2)) end,
  function(r, a) return a:nan_to_num(r(-1, 1)) end,
  function(r, a, b) return a:isclose(b) end,
  function(r, a, b) return a:allclose(b) end,
  function(r, a, b) return a:bitwise_xor(b) end,
  function(r, a, b) return a:lerp(b, r(0, 2) / 2) end,
  function(r, a, b) return a:addcdiv(b, a, r(-1, 1)) end,
  function(r, a, b) return a:cross(b, rnd_dim(r, a)) end,
  function(r, a, b) return a:kron(b) end,
  function(r, a, b) return a:outer(b) end,
  function(r, a) return a:amax(rnd_dim(r, a), r(0, 1) == 1) end,
  function(r, a) return a:aminmax() end,
  function(r, a) return a:nanmean(rnd_dim(r, a)) end,
  function(r, a) return a:var_mean(rnd_dim(r, a)) end,
}

describe('tensor fuzzing', function()
  it('survives random ops on random tensors with errors, never crashes, and leaks nothing', function()
    collectgarbage(); collectgarbage()
    local before = dpl.memory_allocated()
    math.randomseed(1234)
    dpl.manual_seed(1234) -- (the values decide which calls fail: the same run every time)
    local r = math.random
    local ok_count, err_count = 0, 0
    for iter = 1, 20000 do
      local a, b = rnd_tensor(r), rnd_tensor(r)
      if r(1, 3) == 1 then b = a:clone() end
      local op = ops[r(1, #ops)]
      local ok, res = pcall(op, r, a, b)
      if ok then
        ok_count = ok_count + 1
        consistent(res)
      else
        err_count = err_count + 1
        assert.matches('^%a+Error: %S', tostring(res)) -- an error object with a message
      end
    end
    assert.is_true(ok_count > 2000, 'too few successes: ' .. ok_count)
    assert.is_true(err_count > 2000, 'too few errors: ' .. err_count)
    collectgarbage(); collectgarbage()
    local after = dpl.memory_allocated()
    assert(after <= before, ('%d bytes leaked'):format(after - before)) -- earlier garbage may go too
  end)

  it('frees printed tensors once dropped (no compiled trace keeps one as a constant)', function()
    -- the printer's recursive walkers were closures over the tensor; once the JIT compiled
    -- one (it reads a known closure's immutable upvalues as constants) the trace kept that
    -- tensor alive. Traces compile at different moments from run to run (hot counters are
    -- hashed by address), so: low thresholds, four fresh processes
    local h = require 'spec.support.helpers'
    local code = [[
      jit.opt.start('hotloop=1', 'hotexit=1')
      local dpl = require 'dpl'
      collectgarbage() collectgarbage()
      local before = dpl.memory_allocated()
      local function run()
        for i = 1, 2000 do local s = tostring(dpl.randn(2, 3, 1 + i % 4)) end
      end
      run()
      collectgarbage() collectgarbage()
      print('leaked ' .. (dpl.memory_allocated() - before))
    ]]
    for _ = 1, 4 do
      local out, err, rc = h.run_chunk(code)
      assert.are.equal(0, rc, out .. err)
      assert.matches('leaked 0\n', out)
    end
  end)

  it('validates raw C calls with NULL and junk arguments', function()
    local out = ffi.new('dpl_tensor*[1]')
    local t = dpl.ones(2, 2)
    local shape = ffi.new('int64_t[8]', { 2, -1, 3 })
    local calls = {
      function() return C.dpl_binary(0, nil, nil, out) end,
      function() return C.dpl_binary(99, t, t, out) end,
      function() return C.dpl_binary(0, t, t, nil) end,
      function() return C.dpl_unary(77, t, out) end,
      function() return C.dpl_reduce(42, t, 0, 0, 0, out) end,
      function() return C.dpl_reduce(0, t, 5, 0, 0, out) end,
      function() return C.dpl_tensor_empty(9, 1, shape, 0, 0, out) end,
      function() return C.dpl_tensor_empty(0, 9, shape, 0, 0, out) end,
      function() return C.dpl_tensor_empty(0, 2, shape, 0, 0, out) end,
      function() return C.dpl_tensor_empty(0, 2, nil, 0, 0, out) end,
      function() return C.dpl_tensor_empty(0, 1, shape, 7, 0, out) end,
      function() return C.dpl_tensor_view(t, 3, shape, out) end,
      function() return C.dpl_tensor_permute(t, 2, nil, out) end,
      function() return C.dpl_tensor_select(t, 0, 5, out) end,
      function() return C.dpl_tensor_narrow(t, 1, 1, 5, out) end,
      function() return C.dpl_tensor_as_strided(t, 1, ffi.new('int64_t[1]', 5), ffi.new('int64_t[1]', 1), 0, out) end,
      function() return C.dpl_cat(0, nil, 0, out) end,
      function() return C.dpl_matmul(t, nil, out) end,
      function() return C.dpl_conv2d(t, t, nil, nil, 1, out) end,
      function() return C.dpl_max_pool2d(t, nil, out, out) end,
      function() return C.dpl_softmax(t, 3, 0, out) end,
      function() return C.dpl_cross_entropy(t, t, 7, -100, out) end,
      function() return C.dpl_st_open(nil, nil) end,
      function() return C.dpl_st_write(nil, 0, nil, nil, 0, nil, nil) end,
      function() return C.dpl_tensor_get(t, 99, ffi.new('double[1]')) end,
      function() return C.dpl_set_num_threads(0) end,
      function() return C.dpl_tensor_uniform_(dpl.zeros(2, { dtype = 'int64' }), 0, 1) end,
      function() return C.dpl_tensor_randint_(t, 5, 5) end,
    }
    for i, f in ipairs(calls) do
      local st = f()
      assert.is_true(st < 0, 'call ' .. i .. ' should fail')
      assert.is_true(#ffi.string(C.dpl_last_error()) > 0, 'call ' .. i .. ' leaves a message')
    end
    C.dpl_tensor_release(nil)
    C.dpl_tensor_free_data(nil)
  end)
end)
