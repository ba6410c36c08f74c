-- dpl.serialize: dpl.save(obj, path) / dpl.load(path), torch.save / torch.load for data: a
-- tensor, or a table tree of tensors, numbers, strings, booleans and 64-bit integers (a
-- state_dict, an optimizer's state, a list of batches, ...). One safetensors file: every
-- distinct tensor once (by identity: a tensor found twice comes back as one object, so tied
-- weights stay tied), named t1, t2, ...; the tree, with each tensor replaced by its number, in
-- the metadata key "dplhost.tree" as LuaJIT's string.buffer encoding in base64 (exact numbers,
-- any bytes in strings; a table found in several places stored once and loaded shared).
-- Loading decodes data only and never runs code. A safetensors file
-- without that key (written by Python's safetensors, or dpl.safetensors) loads as a table of
-- name = tensor.
local ffi = require 'ffi'
local buffer = require 'string.buffer'
local errors = require 'dpl.errors'

local M = {}
local TAG = '__dpl_tensor__' -- the key of a tensor's placeholder in the encoded tree
-- a table found in several places is encoded once: its first copy holds DEF = id, the other
-- places are {REF = id} (so shared tables stay shared, and a DAG does not grow exponentially)
local REF, DEF = '__dpl_ref__', '__dpl_def__'
local RESERVED = { [TAG] = true, [REF] = true, [DEF] = true }

local bit = require 'bit'
local band, bor, shl, shr = bit.band, bit.bor, bit.lshift, bit.rshift

local b64chars = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'
local b64enc_t = ffi.new('uint8_t[64]')
local b64dec_t = ffi.new('int16_t[256]')
for i = 0, 255 do b64dec_t[i] = -1 end
for i = 1, 64 do b64enc_t[i - 1] = b64chars:byte(i); b64dec_t[b64chars:byte(i)] = i - 1 end

-- base64 in byte loops over FFI buffers (the tree of a big save is megabytes)
local function b64encode(s)
  local n = #s
  local p = ffi.cast('const uint8_t *', s)
  local out = ffi.new('uint8_t[?]', math.floor((n + 2) / 3) * 4 + 1)
  local o = 0
  for i = 0, n - 3, 3 do
    local v = bor(shl(p[i], 16), shl(p[i + 1], 8), p[i + 2])
    out[o], out[o + 1] = b64enc_t[shr(v, 18)], b64enc_t[band(shr(v, 12), 63)]
    out[o + 2], out[o + 3] = b64enc_t[band(shr(v, 6), 63)], b64enc_t[band(v, 63)]
    o = o + 4
  end
  local r = n % 3
  if r > 0 then
    local i = n - r
    local v = shl(p[i], 16)
    if r == 2 then v = bor(v, shl(p[i + 1], 8)) end
    out[o], out[o + 1] = b64enc_t[shr(v, 18)], b64enc_t[band(shr(v, 12), 63)]
    out[o + 2] = r == 2 and b64enc_t[band(shr(v, 6), 63)] or 61
    out[o + 3] = 61 -- '='
    o = o + 4
  end
  return ffi.string(out, o)
end

local function b64decode(s, path)
  local n = #s
  local p = ffi.cast('const uint8_t *', s)
  local out = ffi.new('uint8_t[?]', math.floor(n / 4) * 3 + 3)
  local o, acc, bits = 0, 0, 0
  for i = 0, n - 1 do
    local c = p[i]
    if c ~= 61 then -- '='
      local v = b64dec_t[c]
      if v < 0 then errors.ValueError:raise(('dpl.load: %s: the saved tree is damaged (not base64)'):format(path), 0) end
      acc, bits = bor(shl(band(acc, 0xFFFF), 6), v), bits + 6
      if bits >= 8 then
        bits = bits - 8
        out[o] = band(shr(acc, bits), 255)
        o = o + 1
      end
    end
  end
  return ffi.string(out, o)
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
  local memo, ids, nref = {}, {}, 0 -- table -> its encoded copy; table -> id once seen twice
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
      local done = memo[v]
      if done ~= nil then -- shared: stored once, referred to here
        local id = ids[v]
        if id == nil then
          nref = nref + 1
          id = nref
          ids[v] = id
          done[DEF] = id
        end
        return { [REF] = id }
      end
      if depth > 200 then errors.ValueError:raise(('dpl.save: %s is nested more than 200 tables deep'):format(where), 3) end
      seen[v] = true
      local out = {}
      memo[v] = out
      for k, x in pairs(v) do
        local tk = type(k)
        if RESERVED[k] then
          errors.ValueError:raise(('dpl.save: %s has the key %q, which dpl.save reserves for its own use'):format(where, k), 3)
        end
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
  local function placeholder(v, key) -- a table holding only `key`
    local k = v[key]
    if k ~= nil and next(v, next(v)) == nil then return k end
    return nil
  end
  -- the tables stored once and referred to elsewhere (before any reference is resolved)
  local defs = {}
  local function collect(v, depth)
    if depth > 1000 then errors.ValueError:raise(('dpl.load: %s: the saved tree is damaged (too deep)'):format(path), 0) end
    if placeholder(v, TAG) or placeholder(v, REF) then return end
    local id = v[DEF]
    if id ~= nil then defs[id] = v; v[DEF] = nil end
    for _, x in pairs(v) do if type(x) == 'table' then collect(x, depth + 1) end end
  end
  local done = {}
  local function restore(v)
    if type(v) ~= 'table' then return v end
    local k = placeholder(v, TAG)
    if k ~= nil then
      local t = tensors['t' .. tostring(k)]
      if t == nil then errors.ValueError:raise(('dpl.load: %s: tensor t%s is missing'):format(path, tostring(k)), 0) end
      return t
    end
    local r = placeholder(v, REF)
    if r ~= nil then
      v = defs[r]
      if v == nil then errors.ValueError:raise(('dpl.load: %s: shared table %s is missing'):format(path, tostring(r)), 0) end
    end
    if done[v] then return v end
    done[v] = true
    for key, x in pairs(v) do
      if type(x) == 'table' then v[key] = restore(x) end
    end
    return v
  end
  if type(wrapped.tree) == 'table' then collect(wrapped.tree, 0) end
  return restore(wrapped.tree)
end

return M
