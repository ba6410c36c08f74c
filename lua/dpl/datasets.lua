-- dpl.datasets: ready-made datasets.
--   datasets.FashionMNIST{root=, train=true, dtype='float32', lazy=true, cache=true, transform=,
--     target_transform=, download=}: the IDX .gz files of Debian's dataset-fashion-mnist (an
--     unknown option is an error; download= is accepted and fetches nothing). get(i) -> {image
--     [1, 28, 28], label (a number)}; get_batch(indices) -> {images [B, 1, 28, 28], labels [B]}
--     (the DataLoader's fast path): images float32 in [0, 1], labels 1-based int64 (1..10);
--     transform(image) / target_transform(label) are applied per item in get(i), and then
--     get_batch collates get(i)'s items (the gather is skipped). Construction reads
--     the headers and the labels and checks the image file's size; the images are loaded on
--     first use (lazy=false: at once) as uint8 and converted per batch. `ds.images` (all
--     images as floats, [N, 1, 28, 28]) and `ds.raw_images` (uint8 [N, 28, 28]) are
--     materialised when read.
--   The decompressed-file cache: a .gz file is decompressed once into
--     <cache dir>/idx/<name>-<hash of the path>.safetensors (written atomically, keyed and
--     validated by the source's path, size, mtime and header) and mmap'd on later runs.
--     Cache dir: $DPL_DATA_CACHE when it is a path, else $XDG_CACHE_HOME/dplhost, else
--     ~/.cache/dplhost; DPL_DATA_CACHE=0 (or cache=false) turns it off. When the directory
--     is not writable the file is decompressed every run (datasets.cache_status says why).
--   datasets.SyntheticClassification{n=, features=, classes=, seed=}: separable blobs for tests.
local ffi = require 'ffi'
local T = require 'dpl.tensor'
local data = require 'dpl.data'
local errors = require 'dpl.errors'
local C = require('dpl.capi').C

local fmt = string.format

-- Errors are objects whose tostring reads "ClassName: message" (DESIGN.md).
local error = require('dpl.errors').raiser(require('dpl.errors').RuntimeError)
local M = {}

M.FASHION_MNIST_ROOT = '/usr/share/datasets/fashion-mnist'
M.FASHION_MNIST_CLASSES = { 'T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat', 'Sandal', 'Shirt', 'Sneaker',
  'Bag', 'Ankle boot' }

local function file_exists(p)
  local f = io.open(p, 'rb')
  if f then f:close() return true end
  return false
end

local function c_error() error(ffi.string(C.dpl_last_error()), 0) end

-- the header of an unsigned-byte IDX file with want_ndim dims
local function read_header_u8(path, want_ndim)
  local hd = ffi.new('dpl_idx_header')
  if C.dpl_idx_read_header(path, hd) ~= 0 then c_error() end
  if hd.type_code ~= 8 then
    error(fmt('%s: expected an unsigned-byte IDX file (type code 0x08), got type code 0x%02x', path, hd.type_code), 0)
  end
  if hd.ndim ~= want_ndim then
    error(fmt('%s: expected %d dims, the file has %d', path, want_ndim, hd.ndim), 0)
  end
  return hd
end

local function dims_of(hd)
  local dims = {}
  for i = 1, hd.ndim do dims[i] = tonumber(hd.dims[i - 1]) end
  return dims
end

-- reads an unsigned-byte IDX file into a uint8 tensor of its dims (decompressing it)
local function read_idx_u8(path, want_ndim, hd)
  hd = hd or read_header_u8(path, want_ndim)
  local t = T.empty(dims_of(hd), { dtype = 'uint8' })
  if C.dpl_idx_read(path, hd, t._data, hd.count) ~= 0 then c_error() end
  return t
end
M.read_idx_u8 = read_idx_u8

-- ------------------------------------------------------------------ the decompressed-file cache
M.cache_status = nil -- why the last load did not use the cache (nil when it did, or was not asked to)

--- The cache directory, or nil when caching is off (DPL_DATA_CACHE=0).
function M.cache_dir()
  local env = os.getenv('DPL_DATA_CACHE')
  if env == '0' or env == 'off' or env == 'false' or env == 'no' then return nil end
  if env and env ~= '' and env ~= '1' then return env end
  local xdg = os.getenv('XDG_CACHE_HOME')
  if xdg and xdg:sub(1, 1) == '/' then return xdg .. '/dplhost' end
  local home = os.getenv('HOME')
  if home and home ~= '' then return home .. '/.cache/dplhost' end
  return nil
end

local function abspath(p)
  if p:sub(1, 1) == '/' then return p end
  return (os.getenv('PWD') or '.') .. '/' .. p
end

local function fnv1a(s) -- 32-bit FNV-1a, as 8 hex digits
  local h = 0x811c9dc5
  for i = 1, #s do
    h = bit.bxor(h, s:byte(i))
    h = bit.tobit(bit.lshift(h, 24) + h * 403) -- h * 16777619 mod 2^32, exact in doubles
  end
  return bit.tohex(h)
end

--- Path of the cache file for an IDX source (a .gz), in dir.
function M.cache_path(dir, src)
  src = abspath(src)
  local base = src:match('([^/]+)$'):gsub('%.gz$', '')
  return fmt('%s/idx/%s-%s.safetensors', dir, base, fnv1a(src))
end

local function header_string(hd)
  return table.concat(dims_of(hd), ' ') .. ' type ' .. tonumber(hd.type_code)
end

local function source_key(path)
  local size, mtime = ffi.new('int64_t[1]'), ffi.new('int64_t[1]')
  if C.dpl_idx_stat(path, size, mtime) ~= 0 then return nil end
  return tostring(tonumber(size[0])), tostring(mtime[0]):gsub('LL$', '')
end

--- load_idx_u8(path, want_ndim, {cache=true, header=}) -> uint8 tensor: a .gz file through the
--- cache (mmap'd when valid, else decompressed and written there), a plain file read as is.
function M.load_idx_u8(path, want_ndim, opts)
  opts = opts or {}
  local hd = opts.header or read_header_u8(path, want_ndim)
  M.cache_status = nil
  local dir = opts.cache ~= false and path:match('%.gz$') and M.cache_dir()
  if not dir then return read_idx_u8(path, want_ndim, hd) end
  local size, mtime = source_key(path)
  local cpath = M.cache_path(dir, path)
  local meta_want = { ['dplhost.idx_source'] = abspath(path), ['dplhost.idx_size'] = size,
    ['dplhost.idx_mtime_ns'] = mtime, ['dplhost.idx_header'] = header_string(hd) }
  local st = require 'dpl.safetensors'
  if size and file_exists(cpath) then
    local ok, tensors, meta = pcall(st.load, cpath)
    local t = ok and tensors.data
    local valid = t and t.dtype == 'uint8' and t:numel() == tonumber(hd.count)
    if valid then
      for k, v in pairs(meta_want) do if meta[k] ~= v then valid = false break end end
    end
    if valid then
      local dims = dims_of(hd)
      if t:dim() ~= #dims then valid = false end
      for i = 1, #dims do if valid and t:size(i) ~= dims[i] then valid = false end end
    end
    if valid then return t end
    M.cache_status = fmt('%s: stale or invalid, rewritten', cpath)
  end
  local t = read_idx_u8(path, want_ndim, hd)
  if not size then
    M.cache_status = fmt('cannot stat %s: not cached', path)
    return t
  end
  require('dpl.loggers.base').mkdir_p(dir .. '/idx')
  local ok, e = pcall(st.save, cpath, { data = t }, meta_want)
  if not ok then
    M.cache_status = fmt('cache not written (%s)', type(e) == 'table' and tostring(e.message) or tostring(e))
  end
  return t
end

local function find(root, base)
  for _, name in ipairs({ base .. '.gz', base }) do
    local p = root .. '/' .. name
    if file_exists(p) then return p end
  end
  return nil
end

-- ------------------------------------------------------------------ FashionMNIST
local FashionMNIST = data.Dataset:extend('FashionMNIST')
M.FashionMNIST = FashionMNIST

local function msg_of(e) return type(e) == 'table' and tostring(e.message) or tostring(e) end

local FMNIST_KEYS = require('dpl.options').keys('root', 'train', 'dtype', 'lazy', 'cache', 'transform',
  'target_transform', 'download')
local FMNIST_TYPES = { root = 'string', train = 'boolean', dtype = 'string', lazy = 'boolean', cache = 'boolean',
  transform = 'function', target_transform = 'function', download = 'boolean' }

--- FashionMNIST{root='/usr/share/datasets/fashion-mnist', train=true, dtype='float32', lazy=true, cache=true,
--- transform=, target_transform=, download=false}
function FashionMNIST:__init(opts)
  opts = opts or {}
  if type(opts) ~= 'table' then
    errors.MisconfigurationException:raise(fmt('FashionMNIST: expected an options table, got %s', type(opts)), 2)
  end
  require('dpl.options').check(opts, FMNIST_KEYS, 'FashionMNIST')
  for k, want in pairs(FMNIST_TYPES) do
    local v = opts[k]
    if v ~= nil and type(v) ~= want then
      errors.MisconfigurationException:raise(fmt('FashionMNIST: %s must be a %s, got %s', k, want,
        type(v) == 'string' and fmt("string '%s'", v) or type(v)), 2)
    end
  end
  if opts.dtype ~= nil then
    local ok, probe = pcall(T.empty, { 0 }, { dtype = opts.dtype })
    if not ok or not probe:is_floating_point() then
      errors.MisconfigurationException:raise(fmt("FashionMNIST: dtype must be a floating-point dtype "
        .. "('float32', 'float64', ...), got '%s'", opts.dtype), 2)
    end
  end
  local root = opts.root or M.FASHION_MNIST_ROOT
  local train = opts.train ~= false
  local split = train and 'train' or 't10k'
  local ip = find(root, split .. '-images-idx3-ubyte')
  local lp = find(root, split .. '-labels-idx1-ubyte')
  if not ip or not lp then
    error(fmt("FashionMNIST: %s-images-idx3-ubyte(.gz) and %s-labels-idx1-ubyte(.gz) not found under '%s' "
      .. "(install Debian's dataset-fashion-mnist, or pass root=)%s", split, split, root,
      opts.download and '; download=true cannot fetch them: dplhost reads local files only' or ''), 2)
  end
  self.transform, self.target_transform = opts.transform, opts.target_transform
  local ok, hd = pcall(read_header_u8, ip, 3)
  if not ok then error('FashionMNIST: ' .. msg_of(hd), 2) end
  local ok2, labels = pcall(M.load_idx_u8, lp, 1, { cache = opts.cache })
  if not ok2 then error('FashionMNIST: ' .. msg_of(labels), 2) end
  local n = tonumber(hd.dims[0])
  if labels:size(1) ~= n then
    error(fmt('FashionMNIST: %s has %d images but %s has %d labels', ip, n, lp, labels:size(1)), 2)
  end
  self._image_path, self._header, self._cache = ip, hd, opts.cache
  self.dtype = opts.dtype or 'float32'
  self.h, self.w = tonumber(hd.dims[1]), tonumber(hd.dims[2])
  self.labels = labels:to('int64'):add_(1)
  if labels:numel() > 0 and self.labels:max():item() > 10 then
    error(fmt('FashionMNIST: %s holds a label above 9 (max %d)', lp, self.labels:max():item() - 1), 2)
  end
  self.n, self.train, self.root = n, train, root
  self.classes = M.FASHION_MNIST_CLASSES
  -- the image file must hold what its header says: checked now, loaded on first use
  local st = C.dpl_idx_check_size(ip, hd)
  if st < 0 then error('FashionMNIST: ' .. ffi.string(C.dpl_last_error()), 2) end
  if st > 0 or opts.lazy == false then
    local ok3, e = pcall(self._load_images, self)
    if not ok3 then error('FashionMNIST: ' .. msg_of(e), 2) end
  end
end

-- the uint8 images [N, H, W] and the uint8 -> dtype table, loaded once
function FashionMNIST:_load_images()
  local raw = rawget(self, '_raw')
  if raw then return raw end
  raw = M.load_idx_u8(self._image_path, 3, { cache = self._cache, header = self._header })
  rawset(self, '_raw', raw)
  if self.dtype == 'float32' then
    local lut = T.arange(0, 256):to('float32'):div_(255)
    rawset(self, '_lut', lut)
    rawset(self, '_idx', ffi.new('int64_t[?]', 1024))
    rawset(self, '_idx_n', 1024)
  end
  return raw
end

-- ds.images / ds.raw_images are materialised on first read (the class's __index; subclasses
-- made with :extend get the same)
local function lazy_index(cls)
  return function(self, k)
    if type(k) == 'number' then return self:get(k) end -- ds[i] (data.Dataset's)
    if k == 'raw_images' then
      local ok, raw = pcall(self._load_images, self)
      if not ok then error('FashionMNIST: ' .. msg_of(raw), 2) end
      return raw
    elseif k == 'images' then
      local raw = self.raw_images
      local imgs = raw:to(self.dtype):div_(255):view(self.n, 1, self.h, self.w)
      rawset(self, 'images', imgs)
      return imgs
    end
    return cls[k]
  end
end
FashionMNIST.__index = lazy_index(FashionMNIST)
function FashionMNIST:extend(name)
  local cls = data.Dataset.extend(self, name)
  cls.__index = lazy_index(cls)
  return cls
end

function FashionMNIST:__len() return self.n end
function FashionMNIST:get(i)
  if type(i) ~= 'number' or i < 1 or i > self.n or i ~= math.floor(i) then
    error(fmt('FashionMNIST: index %s out of range 1..%d', tostring(i), self.n), 2)
  end
  local b = self:_batch({ i })
  local x, y = b[1][1], self.labels[i]:item()
  if self.transform then x = self.transform(x) end
  if self.target_transform then y = self.target_transform(y) end
  return { x, y }
end
-- with transform= or target_transform=, a batch is its items (get(i): the functions are
-- per sample) collated by data.default_collate; without, the images are gathered at once
function FashionMNIST:get_batch(indices)
  if self.transform or self.target_transform then
    if T.is_tensor(indices) then indices = indices:totable() end
    local items = {}
    for k = 1, #indices do items[k] = self:get(indices[k]) end
    return data.default_collate(items)
  end
  return self:_batch(indices)
end
function FashionMNIST:_batch(indices)
  local raw = rawget(self, '_raw') or self.raw_images
  local lut = rawget(self, '_lut')
  if lut and not T.is_tensor(indices) then
    local nb = #indices
    if nb > self._idx_n then
      rawset(self, '_idx', ffi.new('int64_t[?]', nb))
      rawset(self, '_idx_n', nb)
    end
    local idx = self._idx
    for k = 1, nb do idx[k - 1] = indices[k] end
    local x = T.empty({ nb, 1, self.h, self.w }, { dtype = 'float32' })
    if C.dpl_idx_gather_u8(raw._data, self.n, self.h * self.w, idx, nb, lut._data, x._data) ~= 0 then
      error('FashionMNIST: ' .. ffi.string(C.dpl_last_error()), 2)
    end
    local y = T.tensor(indices, { dtype = 'int64' })
    return { x, self.labels:index_select(1, y) }
  end
  local idx = T.is_tensor(indices) and indices or T.tensor(indices, { dtype = 'int64' })
  local x = raw:index_select(1, idx):to(self.dtype):div_(255)
  return { x:view(x:size(1), 1, self.h, self.w), self.labels:index_select(1, idx) }
end
function FashionMNIST:__tostring()
  return fmt('FashionMNIST(%s, %d images, root=%s)', self.train and 'train' or 'test', self.n, self.root)
end

--- SyntheticClassification{n=256, features=8, classes=3, seed=0, spread=0.5}: Gaussian blobs
--- around random class centres; items {x [features], label (1-based)}.
M.SyntheticClassification = data.Dataset:extend('SyntheticClassification')
function M.SyntheticClassification:__init(opts)
  opts = opts or {}
  local n, f, k = opts.n or 256, opts.features or 8, opts.classes or 3
  local state = T.get_rng_state()
  T.manual_seed(opts.seed or 0)
  local centres = T.randn(k, f) * 2
  local labels = T.randint(1, k + 1, { n })
  self.x = centres:index_select(1, labels) + T.randn(n, f) * (opts.spread or 0.5)
  self.y = labels
  T.set_rng_state(state)
  self.n = n
end
function M.SyntheticClassification:__len() return self.n end
function M.SyntheticClassification:get(i) return { self.x[i], self.y[i]:item() } end
function M.SyntheticClassification:get_batch(indices)
  local idx = T.is_tensor(indices) and indices or T.tensor(indices, { dtype = 'int64' })
  return { self.x:index_select(1, idx), self.y:index_select(1, idx) }
end

return M
