-- dpl.datasets: ready-made datasets.
--   datasets.FashionMNIST{root=, train=true}: the IDX .gz files of Debian's
--     dataset-fashion-mnist; images float32 in [0, 1] shaped [N, 1, 28, 28], labels
--     1-based int64 (1..10). get(i) -> {image [1, 28, 28], label (a number)};
--     get_batch(indices) -> {images [B, 1, 28, 28], labels [B]} (the DataLoader's fast path).
--   datasets.SyntheticClassification{n=, features=, classes=, seed=}: separable blobs for tests.
local ffi = require 'ffi'
local T = require 'dpl.tensor'
local data = require 'dpl.data'
local errors = require 'dpl.errors'
local C = require('dpl.capi').C

local fmt = string.format

-- Errors are objects whose tostring reads "ClassName: message" (DESIGN.md).
local lua_error = error
local function error(msg, cls) -- (a number as cls is a stack level: ignored, objects carry none)
  if type(cls) ~= 'table' then cls = require('dpl.errors').RuntimeError end
  if type(msg) == 'string' then msg = cls(msg) end
  lua_error(msg, 0)
end
local M = {}

M.FASHION_MNIST_ROOT = '/usr/share/datasets/fashion-mnist'
M.FASHION_MNIST_CLASSES = { 'T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat', 'Sandal', 'Shirt', 'Sneaker',
  'Bag', 'Ankle boot' }

local function file_exists(p)
  local f = io.open(p, 'rb')
  if f then f:close() return true end
  return false
end

-- reads an unsigned-byte IDX file into a uint8 tensor of its dims
local function read_idx_u8(path, want_ndim)
  local hd = ffi.new('dpl_idx_header')
  if C.dpl_idx_read_header(path, hd) ~= 0 then
    error(fmt('%s', ffi.string(C.dpl_last_error())), 0)
  end
  if hd.type_code ~= 8 then
    error(fmt('%s: expected an unsigned-byte IDX file (type code 0x08), got type code 0x%02x', path, hd.type_code), 0)
  end
  if hd.ndim ~= want_ndim then
    error(fmt('%s: expected %d dims, the file has %d', path, want_ndim, hd.ndim), 0)
  end
  local dims = {}
  for i = 1, hd.ndim do dims[i] = tonumber(hd.dims[i - 1]) end
  local t = T.empty(dims, { dtype = 'uint8' })
  if C.dpl_idx_read(path, hd, t._data, hd.count) ~= 0 then
    error(ffi.string(C.dpl_last_error()), 0)
  end
  return t
end
M.read_idx_u8 = read_idx_u8

local function find(root, base)
  for _, name in ipairs({ base .. '.gz', base }) do
    local p = root .. '/' .. name
    if file_exists(p) then return p end
  end
  return nil
end

M.FashionMNIST = data.Dataset:extend('FashionMNIST')
--- FashionMNIST{root='/usr/share/datasets/fashion-mnist', train=true, dtype='float32'}
function M.FashionMNIST:__init(opts)
  opts = opts or {}
  if type(opts) ~= 'table' then
    errors.MisconfigurationException:raise(fmt('FashionMNIST: expected an options table, got %s', type(opts)), 2)
  end
  local root = opts.root or M.FASHION_MNIST_ROOT
  local train = opts.train ~= false
  local split = train and 'train' or 't10k'
  local ip = find(root, split .. '-images-idx3-ubyte')
  local lp = find(root, split .. '-labels-idx1-ubyte')
  if not ip or not lp then
    error(fmt("FashionMNIST: %s-images-idx3-ubyte(.gz) and %s-labels-idx1-ubyte(.gz) not found under '%s' "
      .. "(install Debian's dataset-fashion-mnist, or pass root=)", split, split, root), 2)
  end
  local function msg_of(e) return type(e) == 'table' and tostring(e.message) or tostring(e) end
  local ok, imgs = pcall(read_idx_u8, ip, 3)
  if not ok then error('FashionMNIST: ' .. msg_of(imgs), 2) end
  local ok2, labels = pcall(read_idx_u8, lp, 1)
  if not ok2 then error('FashionMNIST: ' .. msg_of(labels), 2) end
  local n = imgs:size(1)
  if labels:size(1) ~= n then
    error(fmt('FashionMNIST: %s has %d images but %s has %d labels', ip, n, lp, labels:size(1)), 2)
  end
  local h, w = imgs:size(2), imgs:size(3)
  self.images = imgs:to(opts.dtype or 'float32'):div_(255):view(n, 1, h, w)
  self.labels = labels:to('int64'):add_(1)
  if labels:numel() > 0 and self.labels:max():item() > 10 then
    error(fmt('FashionMNIST: %s holds a label above 9 (max %d)', lp, self.labels:max():item() - 1), 2)
  end
  self.n, self.train, self.root = n, train, root
  self.classes = M.FASHION_MNIST_CLASSES
end
function M.FashionMNIST:__len() return self.n end
function M.FashionMNIST:get(i)
  if type(i) ~= 'number' or i < 1 or i > self.n or i ~= math.floor(i) then
    error(fmt('FashionMNIST: index %s out of range 1..%d', tostring(i), self.n), 2)
  end
  return { self.images[i], self.labels[i]:item() }
end
function M.FashionMNIST:get_batch(indices)
  local idx = T.is_tensor(indices) and indices or T.tensor(indices, { dtype = 'int64' })
  return { self.images:index_select(1, idx), self.labels:index_select(1, idx) }
end
function M.FashionMNIST:__tostring()
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
