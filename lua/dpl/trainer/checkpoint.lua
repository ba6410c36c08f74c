-- dpl.trainer.checkpoint: Lightning's checkpoint dict (epoch, global_step,
-- state_dict, loops, callbacks, optimizer_states, lr_schedulers,
-- hyper_parameters) in one safetensors file, written atomically (temp file,
-- fsync, rename). state_dict's number leaves are F64 tensors named by their dotted path
-- ("state_dict.w") for the model's state; everything else (counters, callback
-- and optimizer state, hyper-parameters) is JSON in __metadata__["dplhost.checkpoint"].
-- Loading parses data only, never runs code. Tensor leaves (model weights,
-- optimizer buffers) go through dpl.safetensors (the C writer) when present;
-- a checkpoint of plain numbers is written by the Lua writer here.
local ffi = require 'ffi'
local errors = require 'dpl.errors'

local M = {}
local ValueError = errors.ValueError
local floor = math.floor

---------------------------------------------------------------- JSON

local escapes = { ['"'] = '\\"', ['\\'] = '\\\\', ['\b'] = '\\b', ['\f'] = '\\f', ['\n'] = '\\n',
  ['\r'] = '\\r', ['\t'] = '\\t' }

local function is_array(t)
  local n = 0
  for k in pairs(t) do
    if type(k) ~= 'number' or k < 1 or k ~= math.floor(k) then return false end
    n = n + 1
  end
  return n == #t
end

local function encode(v, out)
  local tv = type(v)
  if v == nil then out[#out + 1] = 'null'
  elseif tv == 'boolean' then out[#out + 1] = tostring(v)
  elseif tv == 'number' then
    if v ~= v then out[#out + 1] = '"NaN"'
    elseif v == math.huge then out[#out + 1] = '"Infinity"'
    elseif v == -math.huge then out[#out + 1] = '"-Infinity"'
    elseif v == math.floor(v) and math.abs(v) < 2^53 then out[#out + 1] = ('%d'):format(v)
    else out[#out + 1] = ('%.17g'):format(v) end
  elseif tv == 'string' then
    out[#out + 1] = '"' .. v:gsub('[%c"\\]', function(c)
      return escapes[c] or ('\\u%04x'):format(c:byte())
    end) .. '"'
  elseif tv == 'table' then
    if next(v) ~= nil and is_array(v) then
      out[#out + 1] = '['
      for i = 1, #v do
        if i > 1 then out[#out + 1] = ',' end
        encode(v[i], out)
      end
      out[#out + 1] = ']'
    else
      local keys = {}
      for k in pairs(v) do keys[#keys + 1] = k end
      table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
      out[#out + 1] = '{'
      for i, k in ipairs(keys) do
        if i > 1 then out[#out + 1] = ',' end
        encode(type(k) == 'number' and ('#' .. k) or tostring(k), out)
        out[#out + 1] = ':'
        encode(v[k], out)
      end
      out[#out + 1] = '}'
    end
  else
    error(ValueError(('checkpoint: cannot store a %s in a checkpoint'):format(tv)), 0)
  end
end

function M.json_encode(v)
  local out = {}
  encode(v, out)
  return table.concat(out)
end

local function decode_error(s, pos, what)
  error(ValueError(('checkpoint: bad JSON at byte %d: %s'):format(pos, what)), 0)
end

local function skip(s, pos)
  return s:find('[^ \t\r\n]', pos) or #s + 1
end

local decode_value
local function decode_string(s, pos)
  local out, i = {}, pos + 1
  while true do
    local c = s:sub(i, i)
    if c == '' then decode_error(s, i, 'unterminated string') end
    if c == '"' then return table.concat(out), i + 1 end
    if c == '\\' then
      local e = s:sub(i + 1, i + 1)
      local map = { b = '\b', f = '\f', n = '\n', r = '\r', t = '\t', ['"'] = '"', ['\\'] = '\\', ['/'] = '/' }
      if map[e] then out[#out + 1] = map[e]; i = i + 2
      elseif e == 'u' then
        local code = tonumber(s:sub(i + 2, i + 5), 16)
        if not code then decode_error(s, i, 'bad \\u escape') end
        if code < 128 then out[#out + 1] = string.char(code)
        elseif code < 2048 then out[#out + 1] = string.char(192 + floor(code / 64), 128 + code % 64)
        else out[#out + 1] = string.char(224 + floor(code / 4096), 128 + floor(code / 64) % 64, 128 + code % 64) end
        i = i + 6
      else decode_error(s, i, 'bad escape') end
    else
      out[#out + 1] = c
      i = i + 1
    end
  end
end
-- nesting deeper than this is refused (a corrupted header of '[[[[...' overflowed the Lua stack:
-- 'stack overflow', naming no file); a checkpoint's own tree is a few levels deep
local MAX_DEPTH = 1000
decode_value = function(s, pos, depth)
  pos = skip(s, pos)
  depth = (depth or 0) + 1
  if depth > MAX_DEPTH then decode_error(s, pos, ('nested deeper than %d levels'):format(MAX_DEPTH)) end
  local c = s:sub(pos, pos)
  if c == '{' then
    local t = {}
    pos = skip(s, pos + 1)
    if s:sub(pos, pos) == '}' then return t, pos + 1 end
    while true do
      if s:sub(pos, pos) ~= '"' then decode_error(s, pos, 'expected a key') end
      local k
      k, pos = decode_string(s, pos)
      pos = skip(s, pos)
      if s:sub(pos, pos) ~= ':' then decode_error(s, pos, "expected ':'") end
      local v
      v, pos = decode_value(s, pos + 1, depth)
      local nk = k:match('^#(%d+)$')
      t[nk and tonumber(nk) or k] = v
      pos = skip(s, pos)
      local d = s:sub(pos, pos)
      if d == '}' then return t, pos + 1 end
      if d ~= ',' then decode_error(s, pos, "expected ',' or '}'") end
      pos = skip(s, pos + 1)
    end
  elseif c == '[' then
    local t = {}
    pos = skip(s, pos + 1)
    if s:sub(pos, pos) == ']' then return t, pos + 1 end
    while true do
      local v
      v, pos = decode_value(s, pos, depth)
      t[#t + 1] = v
      pos = skip(s, pos)
      local d = s:sub(pos, pos)
      if d == ']' then return t, pos + 1 end
      if d ~= ',' then decode_error(s, pos, "expected ',' or ']'") end
      pos = pos + 1
    end
  elseif c == '"' then
    local str, p = decode_string(s, pos)
    if str == 'NaN' then return 0 / 0, p end
    if str == 'Infinity' then return math.huge, p end
    if str == '-Infinity' then return -math.huge, p end
    return str, p
  elseif s:sub(pos, pos + 3) == 'true' then return true, pos + 4
  elseif s:sub(pos, pos + 4) == 'false' then return false, pos + 5
  elseif s:sub(pos, pos + 3) == 'null' then return nil, pos + 4
  else
    local num = s:match('^-?%d+%.?%d*[eE]?[-+]?%d*', pos)
    if not num or num == '' then decode_error(s, pos, 'unexpected character') end
    return tonumber(num), pos + #num
  end
end

function M.json_decode(s)
  local v, pos = decode_value(s, 1)
  pos = skip(s, pos)
  if pos <= #s then decode_error(s, pos, 'trailing characters') end
  return v
end

---------------------------------------------------------------- dump / restore

--- The checkpoint key of a datamodule's state: its class name (Lightning: the class's
--- __qualname__; a class made by extend() without a name is "LightningDataModule+").
function M.datamodule_key(dm)
  local mt = getmetatable(dm)
  return mt and mt.__name or 'LightningDataModule'
end

---------------------------------------------------------------- random number generators

-- "seed:offset" of the CPU generator (dpl.get_rng_state), decimal, exact
local function rng_string(st)
  return (tostring(st.seed):gsub('U?LL$', '')) .. ':' .. (tostring(st.offset):gsub('U?LL$', ''))
end

local function parse_u64(str)
  if type(str) ~= 'string' or not str:match('^%d+$') or #str > 20 then return nil end
  if #str == 20 and str > '18446744073709551615' then return nil end -- (past 2^64 - 1)
  local v = ffi.new('uint64_t', 0)
  for k = 1, #str do v = v * 10 + (str:byte(k) - 48) end
  return v
end

--- Every rank's CPU generator state, in rank order (one collective under a process group: a
--- checkpoint is saved by every rank, as Lightning requires).
function M.gather_rng_states()
  local mine = rng_string(require('dpl').get_rng_state())
  local d = require('dpl.strategies.strategy')._dist()
  if d == nil or d.get_world_size() < 2 then return { mine } end
  return d.all_gather_object(mine)
end

--- This rank's state from a checkpoint's list ({seed=, offset=}), or nil (none saved, or
--- saved by another number of ranks: nil and a reason).
function M.rng_state_for_rank(list)
  if type(list) ~= 'table' or #list == 0 then return nil end
  local d = require('dpl.strategies.strategy')._dist()
  local n, r = 1, 0
  if d ~= nil then n, r = d.get_world_size(), d.get_rank() end
  if #list ~= n then
    return nil, ('the checkpoint holds the random number generator states of %d rank(s), this run has %d:'
      .. ' they are not restored (dropout and other draws differ from an uninterrupted run)'):format(#list, n)
  end
  local seed, offset = tostring(list[r + 1]):match('^(%d+):(%d+)$')
  seed, offset = parse_u64(seed), parse_u64(offset)
  if not seed or not offset then
    return nil, ("the checkpoint's random number generator state %q is not 'seed:offset': not restored"):format(
      tostring(list[r + 1]))
  end
  return { seed = seed, offset = offset }
end

--- The checkpoint table, with Lightning's keys and the hooks Lightning calls
--- (C.state_dict, C.on_save_checkpoint, on_save_checkpoint).
function M.dump(t, weights_only)
  local model = t.lightning_module
  local fl = t.fit_loop
  -- written after a training batch but before the loop's counters moved past it (the
  -- batch-end hooks, the validation after the batch): the counters as after that batch,
  -- so that a resume starts at the next batch instead of training this one again
  local batch_idx, bts, tbi = fl.batch_idx, fl.batches_that_stepped, t._total_batch_idx or 0
  if fl._pending and t._cur_batch_idx then
    batch_idx, tbi = t._cur_batch_idx + 1, tbi + 1
    if fl._pending == 2 then bts = bts + 1 end
  end
  local loop_state = { epoch = t.current_epoch, batch_idx = batch_idx, epoch_done = fl.epoch_done,
    batches_that_stepped = bts, global_step = t.global_step, total_batch_idx = tbi }
  if not weights_only then loop_state.rng_states = M.gather_rng_states() end
  local ckpt = {
    epoch = t.current_epoch,
    global_step = t.global_step,
    ['pytorch-lightning_version'] = '1.9.5',
    dplhost_version = require('dpl.capi').version,
    state_dict = t.strategy:lightning_module_state_dict(),
    loops = { fit_loop = loop_state },
  }
  if not weights_only then
    local cbs = {}
    for _, cb in ipairs(t.callbacks) do
      local s = cb:state_dict()
      if s ~= nil and next(s) ~= nil then cbs[cb:state_key()] = s end
    end
    ckpt.callbacks = cbs
    local opt_states = {}
    for i, opt in ipairs(t.optimizers or {}) do
      opt_states[i] = type(opt.state_dict) == 'function' and opt:state_dict() or {}
    end
    ckpt.optimizer_states = opt_states
    local sch = {}
    for i, cfg in ipairs(t.lr_scheduler_configs or {}) do
      sch[i] = type(cfg.scheduler.state_dict) == 'function' and cfg.scheduler:state_dict() or {}
    end
    ckpt.lr_schedulers = sch
    if t.scaler ~= nil then ckpt.native_amp_scaling_state = t.scaler:state_dict() end
  end
  if model.hparams and next(model.hparams) ~= nil then
    ckpt.hyper_parameters = model.hparams
    ckpt.hparams_name = model._hparams_name or 'kwargs'
  end
  -- the datamodule's hyper-parameters and its state (under its class name, when not empty)
  local dm = t.datamodule
  if dm ~= nil then
    if type(dm.hparams) == 'table' and next(dm.hparams) ~= nil then
      ckpt.datamodule_hyper_parameters = dm.hparams
      ckpt.datamodule_hparams_name = dm._hparams_name or 'kwargs'
    end
    local state = t:_call_datamodule_hook('state_dict')
    if type(state) == 'table' and next(state) ~= nil then ckpt[M.datamodule_key(dm)] = state end
  end
  if not weights_only then
    t:_call_callback_hooks('on_save_checkpoint', ckpt)
    t:_call_module_hook('on_save_checkpoint', ckpt)
  end
  return ckpt
end

--- Before configure_sharded_model: the module's hook (first), the callbacks'
--- on_load_checkpoint and load_state_dict, then the module's state.
function M.restore_modules_and_callbacks(t, ckpt)
  local model = t.lightning_module
  t:_call_module_hook('on_load_checkpoint', ckpt)
  local dm = t.datamodule
  if dm ~= nil and ckpt[M.datamodule_key(dm)] ~= nil then
    t:_call_datamodule_hook('load_state_dict', ckpt[M.datamodule_key(dm)])
  end
  if t.state.fn == 'fit' then -- callbacks are restored only when fitting (1.9)
    t:_call_callback_hooks('on_load_checkpoint', ckpt)
    local states = ckpt.callbacks or {}
    for _, cb in ipairs(t.callbacks) do
      local s = states[cb:state_key()]
      if s ~= nil then cb:load_state_dict(s) end
    end
  end
  if type(model.load_state_dict) == 'function' then
    -- Lightning's strategy.load_model_state_dict reads checkpoint["state_dict"]: a checkpoint
    -- without it is Python's KeyError, not a run that silently keeps its fresh weights
    if type(ckpt.state_dict) ~= 'table' then
      errors.KeyError:raise(ckpt.state_dict == nil and "'state_dict'"
        or ("checkpoint: 'state_dict' is a %s, expected a table"):format(type(ckpt.state_dict)), 0)
    end
    model:load_state_dict(ckpt.state_dict)
  end
  if ckpt.hyper_parameters and (model.hparams == nil or next(model.hparams) == nil) then
    model.hparams = ckpt.hyper_parameters
  end
end

--- After the strategy's setup: optimizers, schedulers, loop progress.
function M.restore_training_state(t, ckpt)
  -- Lightning 1.9.5's restore_optimizers_and_schedulers: a weights-only checkpoint cannot resume
  -- a fit (it restarted the optimizers and schedulers from scratch without a word)
  if ckpt.optimizer_states == nil then
    errors.KeyError:raise('Trying to restore optimizer state but checkpoint contains only the model.'
      .. ' This is probably due to `ModelCheckpoint.save_weights_only` being set to `True`.', 0)
  end
  if ckpt.lr_schedulers == nil then
    errors.KeyError:raise('Trying to restore learning rate scheduler state but checkpoint contains only the model.'
      .. ' This is probably due to `ModelCheckpoint.save_weights_only` being set to `True`.', 0)
  end
  for k, v in pairs({ optimizer_states = ckpt.optimizer_states, lr_schedulers = ckpt.lr_schedulers,
                      loops = ckpt.loops }) do
    if type(v) ~= 'table' then
      local path = rawget(t, 'ckpt_path')
      errors.ValueError:raise(("checkpoint%s: '%s' is a %s, expected a table"):format(
        type(path) == 'string' and ' ' .. path or '', k, type(v)), 0)
    end
  end
  for i, opt in ipairs(t.optimizers or {}) do
    local s = ckpt.optimizer_states and ckpt.optimizer_states[i]
    if s and type(opt.load_state_dict) == 'function' then opt:load_state_dict(s) end
  end
  for i, cfg in ipairs(t.lr_scheduler_configs or {}) do
    local s = ckpt.lr_schedulers and ckpt.lr_schedulers[i]
    if s and type(cfg.scheduler.load_state_dict) == 'function' then cfg.scheduler:load_state_dict(s) end
  end
  if t.scaler ~= nil and type(ckpt.native_amp_scaling_state) == 'table' then
    t.scaler:load_state_dict(ckpt.native_amp_scaling_state)
  end
  local fl = ckpt.loops and ckpt.loops.fit_loop or {}
  t.global_step = fl.global_step or ckpt.global_step or 0
  t.fit_loop.batches_that_stepped = fl.batches_that_stepped or t.global_step
  t._total_batch_idx = fl.total_batch_idx or 0
  local epoch = fl.epoch or ckpt.epoch or 0
  local done = fl.epoch_done
  if done == nil then done = true end
  if done then
    t.current_epoch, t.fit_loop.batch_idx = epoch + 1, 0
  else
    t.current_epoch, t.fit_loop.batch_idx = epoch, fl.batch_idx or 0
  end
  t.lightning_module.current_epoch = t.current_epoch
  t.lightning_module.global_step = t.global_step
  t.fit_loop.restarting = true
  -- set where the saving run was: at the resumed epoch's start, or after the batches skipped
  -- (fit_loop.lua), so that the draws go on as in an uninterrupted run
  local rng, why = M.rng_state_for_rank(fl.rng_states)
  t.fit_loop._rng_restore = rng
  if why and t.is_global_zero then require('dpl.log').warn('%s', why) end
end

---------------------------------------------------------------- safetensors

local function is_num_array(v)
  if type(v) ~= 'table' or getmetatable(v) ~= nil or #v == 0 then return false end
  local n = 0
  for k, x in pairs(v) do
    if type(k) ~= 'number' or type(x) ~= 'number' then return false end
    n = n + 1
  end
  return n == #v
end

-- the tensor module, when it loads (it may be mid-build)
local function tensor_module()
  local ok, T = pcall(require, 'dpl.tensor')
  if ok and type(T) == 'table' and type(T.is_tensor) == 'function' then return T end
  return nil
end

local function is_tensor_leaf(v)
  local tv = type(v)
  if tv ~= 'cdata' and tv ~= 'table' then return false end
  if tv == 'table' and getmetatable(v) == nil then return false end
  local T = tensor_module()
  if T then return T.is_tensor(v) end
  return tv == 'cdata' and ffi.istype('dpl_tensor *', v)
end

-- moves tensor leaves (anywhere) and state_dict's number leaves out of the tree
-- into tensors[i] = {name=, tensor=} or {name=, shape=, values=}
local function split(v, path, tensors)
  local tv = type(v)
  local in_state = not tensors.tensors_only and path:sub(1, 10) == 'state_dict'
  if tv == 'number' and in_state then
    tensors[#tensors + 1] = { name = path, shape = {}, values = { v } }
    return { __tensor__ = path, __number__ = true }
  elseif is_tensor_leaf(v) then
    tensors[#tensors + 1] = { name = path, tensor = v }
    tensors.has_tensor = true
    return { __tensor__ = path }
  elseif tv == 'table' then
    if in_state and is_num_array(v) then
      tensors[#tensors + 1] = { name = path, shape = { #v }, values = v }
      return { __tensor__ = path, __numbers__ = true }
    end
    local out = {}
    for k, x in pairs(v) do
      local key = type(k) == 'number' and ('#' .. k) or tostring(k)
      out[k] = split(x, path == '' and key or (path .. '.' .. key), tensors)
    end
    return out
  elseif tv == 'cdata' or tv == 'userdata' or tv == 'function' then
    errors.ValueError:raise(('checkpoint: %s is a %s, which a checkpoint cannot hold (data only)'):format(path, tv), 0)
  end
  return v
end

local function join(v, tensors)
  if type(v) ~= 'table' then return v end
  local name = v.__tensor__
  if name ~= nil then
    local tt = tensors[name]
    if tt == nil then error(ValueError('checkpoint: missing tensor ' .. name), 0) end
    if tt.values then
      if #tt.shape == 0 then return tt.values[1] end
      return tt.values
    end
    return tt.tensor
  end
  for k, x in pairs(v) do v[k] = join(x, tensors) end
  return v
end

pcall(ffi.cdef, [[
int open(const char *pathname, int flags, ...);
int close(int fd);
int fsync(int fd);
]])

local function fsync_path(path)
  local ok, fd = pcall(function() return ffi.C.open(path, 0) end)
  if ok and fd >= 0 then
    ffi.C.fsync(fd)
    ffi.C.close(fd)
  end
end

local function u64le(n)
  local b = {}
  for i = 1, 8 do b[i] = string.char(n % 256); n = floor(n / 256) end
  return table.concat(b)
end

--- Whether a file name is the temporary file of a checkpoint write (`<name>.tmp.<pid>` from the
--- C writer, `<name>.tmp<digits>` from save below): what a write killed mid-way leaves behind.
--- The "last" and "hpc" lookups skip these (they hold "last" / "hpc_ckpt_" too).
function M.is_temp_name(name)
  return name:find('%.tmp%.?%d+$') ~= nil
end

--- The modification time of a file in nanoseconds, nil when it does not exist.
function M.mtime(path)
  local C = require('dpl.capi').C
  local size, mt = ffi.new('int64_t[1]'), ffi.new('int64_t[1]')
  if C.dpl_idx_stat(path, size, mt) ~= 0 then return nil end
  return tonumber(mt[0])
end

-- makes the checkpoint's directory; one that cannot be made raises with the reason (the write
-- that followed said only 'No such file or directory' for a read-only file system)
local function make_dir(dir, path)
  if not dir or dir == '' then return end
  local ok, why = require('dpl.loggers.base').mkdir_p(dir)
  if not ok then error(errors.RuntimeError('checkpoint: cannot write ' .. path .. ': ' .. why), 0) end
end

--- Writes the checkpoint table to path (safetensors), atomically.
function M.save(ckpt, path)
  local tensors = {}
  local meta_tree = split(ckpt, '', tensors)
  table.sort(tensors, function(a, b) return a.name < b.name end)
  if tensors.has_tensor then
    -- real tensors: dpl.safetensors (the C writer: atomic, any dtype); numbers stay in the JSON
    tensors = { tensors_only = true }
    meta_tree = split(ckpt, '', tensors)
    local map = {}
    for _, tt in ipairs(tensors) do map[tt.name] = tt.tensor end
    local dir = path:match('^(.*)/[^/]*$')
    make_dir(dir, path)
    require('dpl.safetensors').save(path, map, { format = 'dplhost', ['dplhost.checkpoint'] = M.json_encode(meta_tree) })
    return
  end
  local header = { __metadata__ = { format = 'dplhost', ['dplhost.checkpoint'] = M.json_encode(meta_tree) } }
  local offset = 0
  local data = {}
  for _, tt in ipairs(tensors) do
    local n = #tt.values
    local buf = ffi.new('double[?]', n, tt.values)
    data[#data + 1] = ffi.string(buf, 8 * n)
    header[tt.name] = { dtype = 'F64', shape = tt.shape, data_offsets = { offset, offset + 8 * n } }
    offset = offset + 8 * n
  end
  -- JSON with shape [] must stay an array: encode by hand
  local parts = { '{"__metadata__":' .. M.json_encode(header.__metadata__) }
  for _, tt in ipairs(tensors) do
    local h = header[tt.name]
    local shape = '[' .. table.concat(h.shape, ',') .. ']'
    parts[#parts + 1] = ('%s:{"dtype":"F64","shape":%s,"data_offsets":[%d,%d]}'):format(
      M.json_encode(tt.name), shape, h.data_offsets[1], h.data_offsets[2])
  end
  local hjson = table.concat(parts, ',') .. '}'
  local pad = (8 - #hjson % 8) % 8
  hjson = hjson .. string.rep(' ', pad)
  make_dir(path:match('^(.*)/[^/]*$'), path)
  local tmp = path .. '.tmp' .. tostring(os.time()) .. tostring(math.random(1e9))
  local f, oerr = io.open(tmp, 'wb')
  if not f then error(errors.RuntimeError('checkpoint: cannot write ' .. path .. ': ' .. tostring(oerr)), 0) end
  -- checked: a full disk must not leave a short file to be renamed over the previous checkpoint
  local ok, werr = f:write(u64le(#hjson), hjson, table.concat(data))
  local cok, cerr = f:close()
  if not ok or not cok then
    os.remove(tmp)
    error(errors.RuntimeError('checkpoint: cannot write ' .. path .. ': ' .. tostring(werr or cerr)), 0)
  end
  fsync_path(tmp)
  local ok, err = os.rename(tmp, path)
  if not ok then os.remove(tmp); error(errors.RuntimeError('checkpoint: cannot write ' .. path .. ': ' .. tostring(err)), 0) end
end

--- Reads a checkpoint written by save (data only).
function M.load(path)
  local f = io.open(path, 'rb')
  if not f then errors.RuntimeError:raise(('Checkpoint at %s not found. Aborting training.'):format(path), 0) end
  local s = f:read('*a')
  f:close()
  if #s < 8 then errors.ValueError:raise(('checkpoint %s: not a safetensors file'):format(path), 0) end
  local n = 0
  for i = 8, 1, -1 do n = n * 256 + s:byte(i) end
  if n > 100000000 or 8 + n > #s then errors.ValueError:raise(('checkpoint %s: bad header size'):format(path), 0) end
  -- a bad header names the file (it said only 'checkpoint: bad JSON at byte N')
  local function decode(text)
    local ok, v = pcall(M.json_decode, text)
    if ok then return v end
    if errors.is(v, ValueError) then
      v.message = tostring(v.message):gsub('^checkpoint: ', ('checkpoint %s: '):format(path))
    end
    error(v, 0)
  end
  local header = decode(s:sub(9, 8 + n))
  local function join_named(tree_v, tensors) -- (a missing tensor names the file too)
    local ok, v = pcall(join, tree_v, tensors)
    if ok then return v end
    if errors.is(v, ValueError) then
      v.message = tostring(v.message):gsub('^checkpoint: ', ('checkpoint %s: '):format(path))
    end
    error(v, 0)
  end
  local meta = header.__metadata__ or {}
  local tree = meta['dplhost.checkpoint']
  if not tree then errors.ValueError:raise(('checkpoint %s: not a dplhost checkpoint (no metadata)'):format(path), 0) end
  local tensors = {}
  local tree_v = decode(tree)
  -- a tensor leaf of the state (not a number, or list of numbers, stored as F64): the file was
  -- written by dpl.safetensors and its entries are tensors of their own dtype, F64 included
  local function has_tensor_leaf(v)
    if type(v) ~= 'table' then return false end
    if v.__tensor__ ~= nil then return not (v.__number__ or v.__numbers__) end
    for _, x in pairs(v) do
      if has_tensor_leaf(x) then return true end
    end
    return false
  end
  local real = has_tensor_leaf(tree_v)
  for name, h in pairs(header) do
    if real or (name ~= '__metadata__' and h.dtype ~= 'F64') then
      -- tensors of other dtypes: through dpl.safetensors (mmap, any dtype)
      local ts = require('dpl.safetensors').load(path)
      for k, t in pairs(ts) do tensors[k] = { tensor = t } end
      return join_named(tree_v, tensors)
    end
  end
  for name, h in pairs(header) do
    if name ~= '__metadata__' then
      local b, e = h.data_offsets[1], h.data_offsets[2]
      local cnt = (e - b) / 8
      local buf = ffi.new('double[?]', cnt)
      ffi.copy(buf, s:sub(9 + n + b, 8 + n + e), e - b)
      local vals = {}
      for i = 1, cnt do vals[i] = buf[i - 1] end
      tensors[name] = { shape = h.shape or {}, values = vals }
    end
  end
  return join_named(tree_v, tensors)
end

return M
