-- scripts/difftest/runner.lua: the dplhost side of the randomized differential test
-- (scripts/difftest/difftest.py writes a batch file of cases that loads this and calls
-- RUN(cases)). Each case builds its inputs from literal data (a base tensor, then a chain of
-- view ops, the same ones the Python side applies in torch), calls the op under pcall, and
-- writes one JSON line: the outputs (dtype, shape, values), or the error; for gradient cases
-- the gradients of the leaves; for in-place cases whether the op returned self, and the base
-- after the op (writes through views). Positions are 1-based here; the Python side
-- translates.
local dpl = require 'dpl'
local ffi = require 'ffi'

local fmt, concat = string.format, table.concat
local is_tensor = dpl.tensor.is_tensor

local function num(v)
  if v ~= v then return 'NaN' end
  if v == math.huge then return 'Infinity' end
  if v == -math.huge then return '-Infinity' end
  if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return fmt('%d', v) end
  return fmt('%.17g', v)
end

local function jstr(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    if c == '"' then return '\\"' elseif c == '\\' then return '\\\\' end
    return fmt('\\u%04x', c:byte())
  end) .. '"'
end

-- a tensor as {"dtype":..,"shape":[..],"v":[flat values]} (int64 exactly, through its memory)
local function enc_tensor(t)
  local shape = {}
  for i, s in ipairs(t.shape) do shape[i] = fmt('%d', s) end
  local vals = {}
  local n = t:numel()
  if n > 0 then
    local c = t:contiguous()
    if t.dtype == 'int64' then
      local p = ffi.cast('int64_t*', c:data_ptr())
      for i = 0, n - 1 do
        local x = p[i]
        if x > -2 ^ 53 and x < 2 ^ 53 then vals[#vals + 1] = fmt('%d', tonumber(x))
        else vals[#vals + 1] = (tostring(x):gsub('LL$', '')) end
      end
    else
      local flat = c:reshape(-1):totable()
      for i = 1, n do
        local x = flat[i]
        if type(x) == 'boolean' then vals[i] = x and 'true' or 'false' else vals[i] = num(x) end
      end
    end
  end
  return fmt('{"dtype":"%s","shape":[%s],"v":[%s]}', t.dtype, concat(shape, ','), concat(vals, ','))
end

local enc
enc = function(v)
  if is_tensor(v) then return enc_tensor(v) end
  local tv = type(v)
  if tv == 'number' then return num(v) end
  if tv == 'boolean' then return v and 'true' or 'false' end
  if tv == 'nil' then return 'null' end
  if tv == 'string' then return jstr(v) end
  if tv == 'table' then
    local p = {}
    for i = 1, #v do p[i] = enc(v[i]) end
    return '{"list":[' .. concat(p, ',') .. ']}'
  end
  return jstr('<' .. tv .. '>')
end

-- the error as {"cls":..,"msg":..}
local function enc_err(e)
  local s = tostring(e)
  local cls = s:match('^(%u%a+Error):') or 'Error'
  return fmt('{"cls":%s,"msg":%s}', jstr(cls), jstr(s))
end

---------------------------------------------------------------- inputs
-- T(dtype, shape, flat): a base tensor; flat holds float64-exact values (NaN as 0/0)
function T(dtype, shape, flat)
  local t
  if #shape == 0 then
    t = dpl.tensor(flat[1], { dtype = 'float64' })
  else
    local n = 1
    for i = 1, #shape do n = n * shape[i] end
    if n == 0 then t = dpl.zeros(shape, { dtype = 'float64' })
    else t = dpl.tensor(flat, { dtype = 'float64' }):view(shape) end
  end
  return t:to(dtype)
end
-- an int64 base from strings (exact beyond 2^53)
function TI(shape, strs)
  local t = dpl.zeros(shape, { dtype = 'int64' })
  local p = ffi.cast('int64_t*', t:data_ptr())
  for i = 1, #strs do p[i - 1] = loadstring('return ' .. strs[i] .. 'LL')() end
  return t
end

-- the view chain: {op, args...} with 1-based dims
function V(t, chain)
  for _, c in ipairs(chain) do
    local op = c[1]
    if op == 'transpose' then t = t:transpose(c[2], c[3])
    elseif op == 'narrow' then t = t:narrow(c[2], c[3], c[4])
    elseif op == 'expand' then t = t:expand(c[2])
    elseif op == 'unfold' then t = t:unfold(c[2], c[3], c[4])
    elseif op == 'select' then t = t:select(c[2], c[3])
    elseif op == 'diagonal' then t = t:diagonal(c[2], c[3], c[4])
    elseif op == 'permute' then t = t:permute(c[2])
    elseif op == 'clone' then t = t:clone()
    elseif op == 'view' then t = t:view(c[2])
    else error('runner: unknown view op ' .. tostring(op)) end
  end
  return t
end

local out = io.stdout
---------------------------------------------------------------- the cases
-- a case: {mk = function() return {bases} end, vw = function(bases) return inputs... end,
-- fn = function(inputs...) return outputs... end, inplace = true (check that the op returned
-- its first input, and report bases[1] after it), grad = {leaves = {k...}, W = weight,
-- out = which output, item = which element of a list output, clone = true (the leaves are
-- cloned before the views: in-place ops)}}
local function pk(...) return { n = select('#', ...), ... } end

local function run_case(c)
  local parts = { fmt('"id":%d', c.id) }
  local okb, bases = pcall(c.mk)
  local ins
  if okb then
    local b2 = bases
    if c.grad then
      b2 = {}
      for i = 1, #bases do b2[i] = bases[i] end
      for _, k in ipairs(c.grad.leaves) do
        bases[k]:requires_grad_()
        if c.grad.clone then b2[k] = bases[k]:clone() end
      end
    end
    local r = pk(pcall(c.vw, b2))
    okb = r[1]
    if okb then
      ins = { n = r.n - 1 }
      for i = 2, r.n do ins[i - 1] = r[i] end
      bases.shown = b2[1]
    else
      bases = r[2]
    end
  end
  if not okb then
    parts[#parts + 1] = '"setup_err":' .. enc_err(bases)
    out:write('{', concat(parts, ','), '}\n')
    out:flush()
    return
  end
  local res = pk(pcall(c.fn, unpack(ins, 1, ins.n)))
  if not res[1] then
    parts[#parts + 1] = '"err":' .. enc_err(res[2])
  else
    local outs = {}
    for i = 2, res.n do outs[#outs + 1] = enc(res[i]) end
    parts[#parts + 1] = '"out":[' .. concat(outs, ',') .. ']'
    if c.inplace then
      parts[#parts + 1] = '"same":' .. (rawequal(res[2], ins[1]) and 'true' or 'false')
      parts[#parts + 1] = '"base":' .. enc(bases.shown)
    end
    if c.grad then
      local o = res[1 + (c.grad.out or 1)]
      if type(o) == 'table' and not is_tensor(o) then o = o[c.grad.item or 1] end
      local okg, eg = pcall(function()
        local loss = (o * c.grad.W()):sum()
        loss:backward()
      end)
      if not okg then parts[#parts + 1] = '"grad_err":' .. enc_err(eg)
      else
        local gs = {}
        for i = 1, #c.grad.leaves do
          local g = bases[c.grad.leaves[i]].grad
          gs[i] = g and enc(g) or 'null'
        end
        parts[#parts + 1] = '"grads":[' .. concat(gs, ',') .. ']'
      end
    end
  end
  out:write('{', concat(parts, ','), '}\n')
  out:flush()
end

function RUN(cases)
  local start = tonumber(os.getenv('DIFF_START') or '1')
  for i = start, #cases do
    local c = cases[i]
    c.id = c.id or i
    local ok, e = pcall(run_case, c)
    if not ok then
      out:write(fmt('{"id":%d,"runner_err":%s}\n', c.id, enc_err(e)))
      out:flush()
    end
    if i % 50 == 0 then collectgarbage() end
  end
end

-- new_empty's dtype and shape (its values are garbage on both sides)
function DT(t) return t.dtype, t.shape end
