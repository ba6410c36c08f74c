-- dpl.safetensors: reading and writing checkpoint files in the safetensors
-- format (the C side maps files on read and writes them atomically).
--   safetensors.save(path, {name = tensor, ...} [, {key = "string", ...}])
--   local tensors, metadata = safetensors.load(path)
-- Loaded tensors view the file mapping (copy-on-write: writing to them never
-- changes the file). Metadata values are strings, as the format requires.
local ffi = require 'ffi'
local C = require('dpl.capi').C
local T = require 'dpl.tensor'

local errors = require 'dpl.errors'

local M = {}
local fmt = string.format

-- errors are objects: ValueError for bad arguments, RuntimeError for what C reports
local lua_error = error
local function error(msg) lua_error(errors.ValueError(msg), 0) end
local function fail() lua_error(errors.RuntimeError(ffi.string(C.dpl_last_error())), 0) end

function M.save(path, tensors, metadata)
  if type(path) ~= 'string' then error('safetensors.save: path must be a string', 2) end
  if type(tensors) ~= 'table' then error('safetensors.save: expected a table of name = tensor', 2) end
  local names = {}
  for k, v in pairs(tensors) do
    if type(k) ~= 'string' then error(fmt('safetensors.save: tensor names must be strings, got %s', type(k)), 2) end
    if not T.is_tensor(v) then error(fmt("safetensors.save: '%s' is not a tensor (%s)", k, type(v)), 2) end
    names[#names + 1] = k
  end
  table.sort(names)
  local n = #names
  local cnames = ffi.new('const char*[?]', n + 1)
  local ctens = ffi.new('dpl_tensor*[?]', n + 1)
  for i, k in ipairs(names) do cnames[i - 1] = k; ctens[i - 1] = tensors[k] end
  local keys, vals = {}, {}
  for k, v in pairs(metadata or {}) do
    if type(k) ~= 'string' or type(v) ~= 'string' then
      error(fmt('safetensors.save: metadata must map strings to strings, got %s = %s (%s)', tostring(k), tostring(v), type(v)), 2)
    end
    keys[#keys + 1] = k
  end
  table.sort(keys)
  local ck = ffi.new('const char*[?]', #keys + 1)
  local cv = ffi.new('const char*[?]', #keys + 1)
  for i, k in ipairs(keys) do ck[i - 1] = k; cv[i - 1] = metadata[k] end
  if C.dpl_st_write(path, n, cnames, ctens, #keys, ck, cv) ~= 0 then fail(2) end
end

function M.load(path)
  if type(path) ~= 'string' then error('safetensors.load: path must be a string', 2) end
  local fp = ffi.new('dpl_st_file*[1]')
  if C.dpl_st_open(path, fp) ~= 0 then fail(2) end
  local f = fp[0]
  local tensors, meta = {}, {}
  local out = ffi.new('dpl_tensor*[1]')
  for i = 0, C.dpl_st_count(f) - 1 do
    if C.dpl_st_get(f, i, out) ~= 0 then C.dpl_st_close(f) fail(2) end
    tensors[ffi.string(C.dpl_st_name(f, i))] = T._wrap(out)
  end
  for i = 0, C.dpl_st_metadata_count(f) - 1 do
    meta[ffi.string(C.dpl_st_metadata_key(f, i))] = ffi.string(C.dpl_st_metadata_value(f, i))
  end
  C.dpl_st_close(f)
  return tensors, meta
end

return M
