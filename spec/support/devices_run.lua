-- devices_run.lua: runs dpl.devices checks in a dplhost subprocess with a given
-- number of simulated GPUs (the device registry reads DPL_VIRTUAL_GPUS once per
-- process, so each GPU count needs its own process). Each case is a Lua
-- expression (D is dpl.devices, dpl is dpl); the result comes back as one line:
-- "ok <repr of the value>" or "err <tostring of the error>".
local h = require 'spec.support.helpers'
local assert = require 'luassert'

local M = {}

local prelude = [=[
local dpl = require 'dpl'
local D = dpl.devices
local function repr(v)
  local tv = type(v)
  if tv == 'string' then return ('%q'):format(v) end
  if tv == 'table' then
    if D.is_device(v) then return 'device(' .. tostring(v) .. ')' end
    local keys, n = {}, #v
    for k in pairs(v) do
      if not (type(k) == 'number' and k >= 1 and k <= n and k == math.floor(k)) then keys[#keys + 1] = k end
    end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    local parts = {}
    for i = 1, n do parts[#parts + 1] = repr(v[i]) end
    for _, k in ipairs(keys) do parts[#parts + 1] = tostring(k) .. '=' .. repr(v[k]) end
    return '{' .. table.concat(parts, ', ') .. '}'
  end
  return tostring(v)
end
local function run(f)
  local ok, v = pcall(f)
  local line = ok and ('ok ' .. repr(v)) or ('err ' .. tostring(v))
  io.write((line:gsub('\n', '\\n')), '\n')
end
]=]

--- Runs the cases (a list of expressions) under DPL_VIRTUAL_GPUS=ngpus (nil: no
--- simulated GPUs and no real ones either: CUDA_VISIBLE_DEVICES is emptied),
--- opts.busy: DPL_VIRTUAL_GPUS_BUSY, opts.setup: a chunk run first. Returns the
--- result lines in the order of the cases.
function M.run(ngpus, cases, opts)
  opts = opts or {}
  local src = { prelude, opts.setup or '' }
  for _, expr in ipairs(cases) do
    src[#src + 1] = 'run(function() return ' .. expr .. ' end)'
  end
  local script = h.write_file(h.tmpname('.lua'), table.concat(src, '\n'))
  local env
  if ngpus then
    env = ('DPL_VIRTUAL_GPUS=%s DPL_VIRTUAL_GPUS_BUSY=%s'):format(h.q(ngpus), h.q(opts.busy or ''))
  else
    -- no GPU of any kind: CUDA_VISIBLE_DEVICES='' hides real ones too
    env = "DPL_VIRTUAL_GPUS= DPL_VIRTUAL_GPUS_BUSY= CUDA_VISIBLE_DEVICES=''"
  end
  local out, err, rc = h.sh(env .. ' ' .. h.q(h.bin) .. ' ' .. h.q(script))
  os.remove(script)
  assert(rc == 0, ('dplhost failed (%s): %s%s'):format(tostring(rc), out, err))
  local lines = {}
  for line in out:gmatch('([^\n]*)\n') do lines[#lines + 1] = line end
  assert(#lines == #cases, ('expected %d result lines, got %d:\n%s%s'):format(#cases, #lines, out, err))
  return lines
end

--- Runs {expr, expected} pairs; expected is the exact "ok ..." line, or a
--- plain substring that the "err ..." line must contain when it starts with "err ".
function M.check(ngpus, pairs_, opts)
  local cases = {}
  for i, p in ipairs(pairs_) do cases[i] = p[1] end
  local lines = M.run(ngpus, cases, opts)
  for i, p in ipairs(pairs_) do
    local want, got = p[2], lines[i]
    local label = ('[%s GPUs] %s'):format(tostring(ngpus or 0), p[1])
    if want:sub(1, 4) == 'err ' then
      assert.are.equal('err ', got:sub(1, 4), label .. ' should fail, got: ' .. got)
      assert.truthy(got:find(want:sub(5), 1, true), label .. ': expected error containing\n  ' ..
                    want:sub(5) .. '\ngot\n  ' .. got)
    else
      assert.are.equal(want, got, label)
    end
  end
  return lines
end

return M
