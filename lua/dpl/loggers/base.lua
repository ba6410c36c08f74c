-- dpl.loggers.base: the Logger base class and what loggers share: Lightning's
-- directory layout (<save_dir>/<name>/version_N, N the next free integer,
-- decided on first use), hparams.yaml (PyYAML's block style, sorted keys),
-- number formatting. Loggers write on global rank 0 only (the Trainer calls
-- them there).
local class = require 'dpl.class'
local errors = require 'dpl.errors'

local M = {}

local Logger = class.Object:extend('Logger')
M.Logger = Logger

-- Lightning's properties (logger.experiment, logger.log_dir, logger.version, ...): a class's
-- _properties table maps a name to a getter, called when the name is read on an instance and
-- is neither an instance field nor a method; the classes up the chain are looked at too.
-- Every class made by Logger:extend (a user's subclass too) looks them up.
local function property_index(cls)
  return function(self, k)
    local v = cls[k]
    if v ~= nil then return v end
    local c = cls
    while c ~= nil do
      local props = rawget(c, '_properties')
      local p = props and props[k]
      if p ~= nil then return p(self) end
      c = rawget(c, 'super')
    end
    return nil
  end
end

--- A logger's attribute k (log_dir, name, version, save_dir, root_dir): the value, or what
--- the method of that name returns (a user's logger class may define them as methods,
--- dplhost's loggers have them as properties, as Lightning's).
function M.attr(logger, k)
  local v = logger[k]
  if type(v) == 'function' then return v(logger) end
  return v
end

function Logger:extend(name)
  local cls = class.Object.extend(self, name)
  cls.__index = property_index(cls)
  return cls
end

--- Lightning's _DummyExperiment (logger.experiment on ranks other than 0): every field is a
--- method that does nothing; indexing with a number gives the dummy again.
local function nop() end
M.DummyExperiment = setmetatable({}, {
  __index = function(self, k) if type(k) == 'number' then return self end return nop end,
  __newindex = function() end,
  __tostring = function() return 'DummyExperiment' end,
})

--- Lightning's rank_zero_experiment: the logger's experiment (make(logger) on the first call,
--- kept in logger._experiment) on global rank 0 (the launcher's RANK, as Lightning's
--- rank_zero_only.rank), the dummy elsewhere.
function M.rank_zero_experiment(logger, make)
  if require('dpl.log').rank() ~= 0 then return M.DummyExperiment end
  local e = rawget(logger, '_experiment')
  if e == nil then
    e = make(logger)
    logger._experiment = e
  end
  return e
end

--- Lightning's @rank_zero_only on a logger class's methods: on a global rank other than 0
--- they do nothing (so a module or a Fabric loop calling them on every rank writes once).
function M.rank_zero_only(cls, names)
  for _, n in ipairs(names) do
    local f = cls[n]
    cls[n] = function(self, ...)
      if require('dpl.log').rank() ~= 0 then return nil end
      return f(self, ...)
    end
  end
end

local function sh_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
M.sh_quote = sh_quote

-- file-system calls through libc (no shell per call): Linux/glibc layout of dirent
local ffi = require 'ffi'
local have_fs = pcall(ffi.cdef, [[
typedef struct dpl_DIR_ dpl_DIR_;
struct dpl_dirent_ { uint64_t d_ino; int64_t d_off; unsigned short d_reclen; unsigned char d_type; char d_name[256]; };
dpl_DIR_ *opendir(const char *name);
struct dpl_dirent_ *readdir(dpl_DIR_ *dirp);
int closedir(dpl_DIR_ *dirp);
int mkdir(const char *pathname, unsigned int mode);
]]) and ffi.os == 'Linux' and ffi.arch == 'x64'

pcall(ffi.cdef, 'char *strerror(int errnum);')

--- mkdir -p (through libc: a few system calls, no shell). Returns true, or nil and why the
--- first directory that could not be made was not (`cannot create directory <d>: <reason>`;
--- callers may ignore it: the write that follows fails and write_file reports this reason).
function M.mkdir_p(dir)
  if have_fs then
    local path, why = '', nil
    for part in dir:gmatch('[^/]+') do
      path = path .. ((path == '' and dir:sub(1, 1) ~= '/') and '' or '/') .. part
      if ffi.C.mkdir(path, 493) ~= 0 and why == nil then -- 0755; EEXIST is fine
        local e = ffi.errno()
        if e ~= 17 then why = ('cannot create directory %s: %s'):format(path, ffi.string(ffi.C.strerror(e))) end
      end
    end
    if why then return nil, why end
    return true
  else
    os.execute('mkdir -p ' .. sh_quote(dir))
  end
end

local function is_dir(path)
  if have_fs then
    local d = ffi.C.opendir(path)
    if d == nil then return false end
    ffi.C.closedir(d)
    return true
  end
  return os.execute('test -d ' .. sh_quote(path)) == 0
end
M.is_dir = is_dir

--- Names in a directory ({} when it does not exist), without . and ..; with dirs_only, only
--- the directories (symbolic links to directories included, as Python's os.path.isdir).
function M.listdir(dir, dirs_only)
  local out = {}
  if have_fs then
    local d = ffi.C.opendir(dir)
    if d == nil then return out end
    while true do
      local e = ffi.C.readdir(d)
      if e == nil then break end
      local name = ffi.string(e.d_name)
      if name ~= '.' and name ~= '..' then
        -- d_type: 4 directory, 0 unknown and 10 a link (looked at)
        local ty = e.d_type
        if not dirs_only or ty == 4 or ((ty == 0 or ty == 10) and is_dir(dir .. '/' .. name)) then
          out[#out + 1] = name
        end
      end
    end
    ffi.C.closedir(d)
    table.sort(out)
    return out
  end
  if dirs_only then
    for _, name in ipairs(M.listdir(dir)) do
      if is_dir(dir .. '/' .. name) then out[#out + 1] = name end
    end
    return out
  end
  local p = io.popen('ls -1A ' .. sh_quote(dir) .. ' 2>/dev/null')
  if not p then return out end
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  return out
end

--- The next version number under root: 1 + the largest version_<digits> directory (files
--- do not count, as Lightning's _get_next_version), else 0.
function M.next_version(root)
  local best = -1
  for _, name in ipairs(M.listdir(root, true)) do
    local n = name:match('^version_(%d+)$')
    if n and tonumber(n) > best then best = tonumber(n) end
  end
  return best + 1
end

--- A number as Python's str() would print it (shortest round trip).
function M.num(v)
  if type(v) ~= 'number' then return tostring(v) end
  if v ~= v then return 'nan' end
  if v == math.huge then return 'inf' end
  if v == -math.huge then return '-inf' end
  if v == math.floor(v) and math.abs(v) < 1e16 then return ('%d'):format(v) end
  for p = 1, 17 do
    local s = ('%.' .. p .. 'g'):format(v)
    if tonumber(s) == v then return s end
  end
  return ('%.17g'):format(v)
end

--- A number as Python's repr() of a float prints it (what csv.writer writes for one):
--- the shortest round-trip digits, fixed notation for exponents -4..15 with at least one
--- decimal (`1.0`, `0.0001`, `1234567.5`), else `1e-05`, `1.5e+16`; `nan`, `inf`, `-0.0`.
function M.pyfloat(v)
  if type(v) ~= 'number' then return tostring(v) end
  if v ~= v then return 'nan' end
  if v == math.huge then return 'inf' end
  if v == -math.huge then return '-inf' end
  local s
  for p = 0, 16 do
    s = ('%.' .. p .. 'e'):format(v)
    if tonumber(s) == v then break end
  end
  local sign, d1, frac, ex = s:match('^(-?)(%d)%.?(%d*)e([-+]%d+)$')
  local digits = (d1 .. frac):gsub('0+$', '')
  if digits == '' then digits = '0' end
  local e = tonumber(ex)
  if e >= -4 and e < 16 then
    local ip, fp
    if e < 0 then
      ip, fp = '0', ('0'):rep(-e - 1) .. digits
    else
      if #digits <= e + 1 then ip, fp = digits .. ('0'):rep(e + 1 - #digits), ''
      else ip, fp = digits:sub(1, e + 1), digits:sub(e + 2) end
    end
    if fp == '' then fp = '0' end
    return sign .. ip .. '.' .. fp
  end
  local m = #digits > 1 and (digits:sub(1, 1) .. '.' .. digits:sub(2)) or digits
  return ('%s%se%s%02d'):format(sign, m, e < 0 and '-' or '+', math.abs(e))
end

local function yaml_scalar(v)
  local tv = type(v)
  if v == nil then return 'null' end
  if tv == 'boolean' then return v and 'true' or 'false' end
  if tv == 'number' then
    if v == math.floor(v) and math.abs(v) < 1e16 then return ('%d'):format(v) end
    local s = M.num(v)
    if not s:find('[%.eEn]') then s = s .. '.0' end
    if s:find('e') and not s:find('%.') then s = s:gsub('e', '.0e') end
    return s
  end
  local s = tostring(v)
  if s == '' or s:match('^[%s]') or s:match('[%s]$') or s:match('^[%-%?:,%[%]{}#&*!|>\'"%%@`]')
     or s:find(': ') or s:find(' #') or tonumber(s) or s == 'true' or s == 'false' or s == 'null'
     or s:find('\n') then
    return "'" .. s:gsub("'", "''") .. "'"
  end
  return s
end

local function is_seq(t)
  local n = 0
  for k in pairs(t) do
    if type(k) ~= 'number' then return false end
    n = n + 1
  end
  return n == #t
end

local function yaml_dump(v, indent, out)
  if type(v) ~= 'table' then out[#out + 1] = yaml_scalar(v) .. '\n' return end
  local pad = string.rep(' ', indent)
  if next(v) == nil then out[#out + 1] = '{}\n' return end
  if is_seq(v) then
    for _, x in ipairs(v) do
      if type(x) == 'table' and next(x) ~= nil then
        out[#out + 1] = pad .. '-\n'
        yaml_dump(x, indent + 2, out)
      else
        out[#out + 1] = pad .. '- ' .. (type(x) == 'table' and '{}' or yaml_scalar(x)) .. '\n'
      end
    end
    return
  end
  local keys = {}
  for k, x in pairs(v) do
    local tx = type(x)
    if tx == 'number' or tx == 'string' or tx == 'boolean' or tx == 'table' then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do
    local x = v[k]
    if type(x) == 'table' and next(x) ~= nil then
      out[#out + 1] = pad .. yaml_scalar(tostring(k)) .. ':\n'
      yaml_dump(x, is_seq(x) and indent or indent + 2, out)
    else
      out[#out + 1] = pad .. yaml_scalar(tostring(k)) .. ': ' .. (type(x) == 'table' and '{}' or yaml_scalar(x)) .. '\n'
    end
  end
end

--- PyYAML-like block YAML of a table (sorted keys; functions and cdata dropped).
function M.yaml(v)
  local out = {}
  yaml_dump(v, 0, out)
  return table.concat(out)
end

pcall(ffi.cdef, 'int getpid(void);')

-- an io library error message without the leading "<file>: " (Lua's io functions prefix it)
local function io_reason(err, file)
  err = tostring(err or 'unknown error')
  if err:sub(1, #file + 2) == file .. ': ' then err = err:sub(#file + 3) end
  return err
end

--- Raises RuntimeError `cannot write <path>: <why>` unless ok (what io.open / file:write /
--- file:close returned: a full disk, a read-only file system, a file where a directory is).
function M.check_io(ok, err, path, level)
  if ok then return ok end
  errors.RuntimeError:raise(('cannot write %s: %s'):format(path, io_reason(err, path)), (level or 1) + 1)
end

--- Writes text to path atomically: a temp file next to it (`<path>.tmp.<pid>`), every write
--- checked, then renamed over path. A full disk or an unwritable place raises (naming path and
--- the reason) and leaves the previous file as it was (metrics.csv is rewritten whole when a
--- new metric appears: a write cut short in place lost the rows written before).
function M.write_file(path, text)
  local tmp = ('%s.tmp.%d'):format(path, ffi.C.getpid())
  local f, err = io.open(tmp, 'wb')
  if not f then
    err = io_reason(err, tmp)
    local dir = path:match('^(.*)/[^/]*$')
    if dir and dir ~= '' and not M.is_dir(dir) then -- why the directory is not there
      local _, why = M.mkdir_p(dir)
      if why then err = why end
    end
    M.check_io(nil, err, path, 2)
  end
  local ok, werr = f:write(text)
  local cok, cerr = f:close()
  if not ok or not cok then
    os.remove(tmp)
    M.check_io(nil, io_reason(werr or cerr, tmp), path, 2)
  end
  local rok, rerr = os.rename(tmp, path)
  if not rok then
    os.remove(tmp)
    M.check_io(nil, io_reason(io_reason(rerr, tmp), path), path, 2)
  end
end

function M.options(o, rest)
  if type(o) ~= 'string' then return o end
  local out = { save_dir = o }
  if rest ~= nil then
    if type(rest) ~= 'table' then
      errors.MisconfigurationException:raise(('a logger\'s second argument is a table of options, got %s'):format(type(rest)), 3)
    end
    for k, v in pairs(rest) do
      if k == 'save_dir' then
        errors.MisconfigurationException:raise('save_dir given twice (as the first argument and in the options)', 3)
      end
      out[k] = v
    end
  end
  return out
end

--- Raises, naming the key, when the options table o has a key outside `known` (a set).
function M.check_options(o, known, cls_name, level)
  if o == nil then return end
  if type(o) ~= 'table' then
    errors.MisconfigurationException:raise(('%s expects a table of options, got %s'):format(cls_name, type(o)), (level or 2) + 1)
  end
  local unknown = {}
  for k in pairs(o) do
    if not known[k] then unknown[#unknown + 1] = tostring(k) end
  end
  if #unknown == 0 then return end
  table.sort(unknown)
  local names = {}
  for k in pairs(known) do names[#names + 1] = k end
  table.sort(names)
  errors.MisconfigurationException:raise(('%s got %s: %s (it takes %s)'):format(cls_name,
    #unknown > 1 and 'unknown arguments' or 'an unknown argument', table.concat(unknown, ', '), table.concat(names, ', ')), (level or 2) + 1)
end

---------------------------------------------------------------- Logger base

--- Logger{save_dir=, name="lightning_logs", version=nil (next free), prefix=""}
function Logger:__init(o)
  o = o or {}
  if o.save_dir == nil or type(o.save_dir) ~= 'string' then
    errors.MisconfigurationException:raise(('%s needs save_dir (a directory path)'):format(getmetatable(self).__name), 3)
  end
  self.save_dir = o.save_dir
  self._name = o.name == nil and 'lightning_logs' or o.name
  self._version = o.version
  self.prefix = o.prefix or ''
  self.hparams = {}
end

-- Lightning's properties, read as fields: logger.name, logger.version (an integer, for
-- version_N, or a string; decided on first read: the next free N under root_dir),
-- logger.root_dir (<save_dir>/<name>), logger.log_dir (<root_dir>/version_N); save_dir is a
-- plain field. (They were methods before: logger:log_dir() now raises "attempt to call
-- method 'log_dir' (a string value)", with a hint to write logger.log_dir.)
Logger._properties = {}
function Logger._properties.name(self) return self._name end
function Logger._properties.version(self)
  if self._version == nil then
    self._version = M.next_version(self.root_dir)
  end
  return self._version
end
function Logger._properties.root_dir(self)
  if self._name == nil or self._name == '' then return self.save_dir end
  return self.save_dir .. '/' .. self._name
end
function Logger._properties.log_dir(self)
  local v = self.version
  if type(v) == 'number' then v = 'version_' .. v end
  return self.root_dir .. '/' .. v
end

function Logger:log_hyperparams(params)
  for k, v in pairs(params or {}) do self.hparams[k] = v end
  M.mkdir_p(self.log_dir)
  M.write_file(self.log_dir .. '/hparams.yaml', M.yaml(self.hparams))
end

function Logger:log_metrics() end
--- Lightning's hooks for a logger of one's own: `log_graph(model, input_array)` at the start of every
--- entry point (after log_hyperparams), `after_save_checkpoint(checkpoint_callback)` after each save of
--- a ModelCheckpoint (rank 0). Both do nothing here.
function Logger:log_graph() end
function Logger:after_save_checkpoint() end
function Logger:save() end
function Logger:finalize() self:save() end

return M
