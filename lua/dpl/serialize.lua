-- dpl.serialize: dpl.save(obj, path) / dpl.load(path), torch.save / torch.load for data: a
-- tensor, or a table tree of tensors, numbers, strings, booleans and 64-bit integers (a
-- state_dict, an optimizer's state, a list of batches, ...). One safetensors file: every
-- distinct tensor once (by identity: a tensor found twice comes back as one object, so tied
-- weights stay tied), named t1, t2, ...; the tree, with each tensor replaced by its number, in
-- the metadata key "dplhost.tree" as LuaJIT's string.buffer encoding in base64 (exact numbers,
-- any bytes in strings). Loading decodes data only and never runs code. A safetensors file
-- without that key (written by Python's safetensors, or dpl.safetensors) loads as a table of
-- name = tensor.
local ffi = require 'ffi'
local buffer = require 'string.buffer'
local errors = require 'dpl.errors'

local M = {}
local TAG = '__dpl_tensor__' -- the key of a tensor's placeholder in the encoded tree

local b64chars = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'
local b64dec = {}
for i = 1, 64 do b64dec[b64chars:byte(i)] = i - 1 end

local function b64encode(s)
  local out, n = {}, #s
  local p = ffi.cast('const uint8_t *', s)
  for i = 0, n - 1, 3 do
    local a, b, c = p[i], i + 1 < n and p[i + 1] or 0, i + 2 < n and p[i + 2] or 0
    local v = a * 65536 + b * 256 + c
    local c1, c2 = math.floor(v / 262144) % 64, math.floor(v / 4096) % 64
    local c3, c4 = math.floor(v / 64) % 64, v % 64
    out[#out + 1] = b64chars:sub(c1 + 1, c1 + 1) .. b64chars:sub(c2 + 1, c2 + 1)
      .. (i + 1 < n and b64chars:sub(c3 + 1, c3 + 1) or '=') .. (i + 2 < n and b64chars:sub(c4 + 1, c4 + 1) or '=')
  end
  return table.concat(out)
end

local function b64decode(s, path)
  local out, acc, bits = {}, 0, 0
  for i = 1, #s do
    local c = s:byte(i)
    if c ~= 61 then -- '='
      local v = b64dec[c]
      if v == nil then errors.ValueError:raise(('dpl.load: %s: the saved tree is damaged (not base64)'):format(path), 0) end
      acc, bits = acc * 64 + v, bits + 6
      if bits >= 8 then
        bits = bits - 8
        local byte = math.floor(acc / 2 ^ bits)
        out[#out + 1] = string.char(byte)
        acc = acc - byte * 2 ^ bits
      end
    end
  end
  return table.concat(out)
end

--- dpl.save(obj, path): writes obj (see the top of this file) to path, atomically. Torch7's
--- argument order, dpl.save(path, obj), is taken too when obj is not a string.
function M.save(obj, path)
  if type(obj) == 'string' and type(path) ~= 'string' then obj, path = path, obj end -- torch.save(path, obj)
  if type(path) ~= 'string' then
    errors.TypeError:raise(('dpl.save(obj, path): path must be a string, got %s'):format(type(path)), 2)
  end
  local T = require 'dpl.tensor'
  local tensors, index, n = {}, {}, 0
  local seen = {}
  local function walk(v, where, depth)
    if T.is_tensor(v) then
      local k = index[v]
      if k == nil then
        n = n + 1
        k = n
        index[v] = k
        -- a device tensor is saved from a host copy (dpl.load gives CPU tensors)
        local host = v
        if v.device ~= nil and v.device.type ~= 'cpu' then host = v:to('cpu') end
        if not host:is_contiguous() then host = host:contiguous() end
        tensors['t' .. k] = host
      end
      return { [TAG] = k }
    end
    local tv = type(v)
    if tv == 'table' then
      if getmetatable(v) ~= nil then
        errors.TypeError:raise(('dpl.save: %s is an object (a table with a metatable, e.g. a module or an optimizer),'
          .. ' which dpl.save does not store; save its state_dict() instead'):format(where), 3)
      end
      if seen[v] then errors.ValueError:raise(('dpl.save: %s refers back to a table that contains it (a cycle)'):format(where), 3) end
      if depth > 200 then errors.ValueError:raise(('dpl.save: %s is nested more than 200 tables deep'):format(where), 3) end
      seen[v] = true
      local out = {}
      for k, x in pairs(v) do
        local tk = type(k)
        if tk ~= 'string' and tk ~= 'number' and tk ~= 'boolean' then
          errors.TypeError:raise(('dpl.save: %s has a key of type %s; keys must be strings, numbers or booleans'):format(where, tk), 3)
        end
        out[k] = walk(x, where .. '[' .. (tk == 'string' and ('%q'):format(k) or tostring(k)) .. ']', depth + 1)
      end
      seen[v] = nil
      return out
    elseif tv == 'number' or tv == 'string' or tv == 'boolean' then
      return v
    elseif tv == 'cdata' and (ffi.istype('int64_t', v) or ffi.istype('uint64_t', v)) then
      return v
    end
    errors.TypeError:raise(('dpl.save: %s is a %s, which dpl.save does not store (tensors, numbers, strings, booleans,'
      .. ' 64-bit integers and tables of them)'):format(where, tv), 3)
  end
  local tree = walk(obj, 'obj', 0)
  local enc = b64encode(buffer.encode({ tree = tree }))
  require('dpl.safetensors').save(path, tensors, { format = 'dplhost.save', ['dplhost.tree'] = enc })
end

--- dpl.load(path): what dpl.save wrote (tensors on the CPU); a safetensors file from elsewhere
--- gives its table of name = tensor.
function M.load(path)
  if type(path) ~= 'string' then
    errors.TypeError:raise(('dpl.load(path): path must be a string, got %s'):format(type(path)), 2)
  end
  local tensors, meta = require('dpl.safetensors').load(path)
  local enc = meta['dplhost.tree']
  if enc == nil then return tensors end
  local ok, wrapped = pcall(buffer.decode, b64decode(enc, path))
  if not ok or type(wrapped) ~= 'table' then
    errors.ValueError:raise(('dpl.load: %s: the saved tree is damaged (%s)'):format(path, tostring(wrapped)), 2)
  end
  local function restore(v)
    if type(v) ~= 'table' then return v end
    local k = v[TAG]
    if k ~= nil and next(v, nil) ~= nil and next(v, next(v)) == nil then
      local t = tensors['t' .. tostring(k)]
      if t == nil then errors.ValueError:raise(('dpl.load: %s: tensor t%s is missing'):format(path, tostring(k)), 0) end
      return t
    end
    for key, x in pairs(v) do v[key] = restore(x) end
    return v
  end
  return restore(wrapped.tree)
end

return M
