-- dpl.safetensors: reading and writing checkpoint files in the safetensors
-- format (the C side maps files on read and writes them atomically).
--   safetensors.save(path, {name = tensor, ...} [, {key = "string", ...}])
--   local tensors, metadata = safetensors.load(path)
--   safetensors.save_file(tensors, path [, metadata]) / safetensors.load_file(path [, device]):
--   safetensors.torch's names and argument order
-- Loaded tensors view the file mapping (copy-on-write: writing to them never
-- changes the file). Metadata values are strings, as the format requires.
--   safetensors.save_model(model, path [, metadata [, {index_base=0}]])
--   safetensors.load_model(model, path [, {strict=true, index_base=0}])
-- a module's state dict under PyTorch's names (safetensors.torch.save_model / load_model):
-- positions in Sequential / ModuleList / parametrizations numbered from 0 (docs/nn.md,
-- "PyTorch weights").
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
  if type(path) == 'table' and type(tensors) == 'string' then
    error(fmt("safetensors.save(path, tensors): path must be a string, got a table; safetensors.torch's order "
      .. 'save_file(tensors, path) is dpl.safetensors.save_file(tensors, %q)', tensors), 2)
  end
  if type(path) ~= 'string' then error(fmt('safetensors.save: path must be a string, got %s', type(path)), 2) end
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

--- save_file(tensors, path [, metadata]) / load_file(path [, device]): safetensors.torch's names
--- and argument order (save(path, tensors) and load(path) are dplhost's); load_file returns the
--- tensors only, on device when one is given.
function M.save_file(tensors, path, metadata)
  if type(tensors) == 'string' and type(path) == 'table' then
    error(fmt("safetensors.save_file(tensors, path): got a path then a table; the tensors come first, as in "
      .. 'safetensors.torch: save_file(tensors, %q) (dpl.safetensors.save takes the path first)', tensors), 2)
  end
  if type(tensors) ~= 'table' then error(fmt('safetensors.save_file: expected a table of name = tensor, got %s', type(tensors)), 2) end
  if type(path) ~= 'string' then error(fmt('safetensors.save_file: path must be a string, got %s', type(path)), 2) end
  return M.save(path, tensors, metadata)
end

function M.load_file(path, device)
  if type(path) ~= 'string' then error(fmt('safetensors.load_file: path must be a string, got %s', type(path)), 2) end
  local tensors = M.load(path)
  if device ~= nil and device ~= 'cpu' then
    for k, t in pairs(tensors) do tensors[k] = t:to(device) end
  end
  return tensors
end

local function model_arg(fn, model)
  if type(model) ~= 'table' or rawget(model, '_is_module') ~= true then
    error(fmt('safetensors.%s: expected an nn.Module as the first argument, got %s', fn, type(model)), 3)
  end
end
local function base_opts(fn, opts, allowed)
  if opts == nil then return {} end
  if type(opts) ~= 'table' then error(fmt('safetensors.%s: expected nil or an options table, got %s', fn, type(opts)), 3) end
  require('dpl.options').check(opts, allowed, 'safetensors.' .. fn)
  return opts
end
local SAVE_KEYS = require('dpl.options').keys('index_base')
local LOAD_KEYS = require('dpl.options').keys('index_base', 'strict')

--- save_model(model, path [, metadata [, {index_base=0}]]): model:state_dict{index_base=0} (PyTorch's
--- keys; index_base=1 for dplhost's) to path, with metadata {format = 'pt'} plus the given
--- strings. Every name of a tied tensor is written (a strict load_state_dict in PyTorch wants
--- them all); device tensors are written from host copies.
function M.save_model(model, path, metadata, opts)
  model_arg('save_model', model)
  if type(path) ~= 'string' then error(fmt('safetensors.save_model: path must be a string, got %s', type(path)), 2) end
  if metadata ~= nil and type(metadata) ~= 'table' then
    error(fmt('safetensors.save_model: metadata must be a table of strings, got %s', type(metadata)), 2)
  end
  opts = base_opts('save_model', opts, SAVE_KEYS)
  local base = opts.index_base
  if base == nil then base = 0 end
  local sd = model:state_dict({ index_base = base })
  for k, t in pairs(sd) do
    if t.device ~= nil and t.device.type ~= 'cpu' then t = t:to('cpu') end
    if not t:is_contiguous() then t = t:contiguous() end
    sd[k] = t
  end
  local meta = { format = 'pt' }
  for k, v in pairs(metadata or {}) do meta[k] = v end
  M.save(path, sd, meta)
end

--- load_model(model, path [, {strict=true, index_base=0}]): model:load_state_dict of the file's
--- tensors read with PyTorch's keys (index_base=1 for a file of dplhost's keys); returns
--- {missing_keys=, unexpected_keys=} (strict=false) and the file's metadata.
function M.load_model(model, path, opts)
  model_arg('load_model', model)
  if type(path) ~= 'string' then error(fmt('safetensors.load_model: path must be a string, got %s', type(path)), 2) end
  opts = base_opts('load_model', opts, LOAD_KEYS)
  local base = opts.index_base
  if base == nil then base = 0 end
  local tensors, meta = M.load(path)
  local r = model:load_state_dict(tensors, { strict = opts.strict, index_base = base })
  return r, meta
end

return M
