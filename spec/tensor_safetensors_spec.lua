-- tensor_safetensors_spec.lua: safetensors files: round trips of every dtype
-- with string metadata, the header layout, atomic replacement, clear errors on
-- damaged files, and (when a Python with the safetensors package is found:
-- $DPL_PYTHON, /usr/bin/python3, python3) files that Python reads and writes.
local dpl = require 'dpl'
local h = require 'spec.support.helpers'
local st = require 'dpl.safetensors'

local function err_of(f) local ok, e = pcall(f) assert.is_false(ok) return tostring(e) end

local python
local function find_python()
  if python ~= nil then return python end
  python = false
  for _, py in ipairs({ os.getenv('DPL_PYTHON'), '/usr/bin/python3', 'python3' }) do
    if py and py ~= '' then
      local _, _, rc = h.sh(h.q(py) .. ' -c "import safetensors, numpy"')
      if rc == 0 then python = py break end
    end
  end
  return python
end

describe('safetensors', function()
  it('round-trips every dtype, shapes, 0-d and empty tensors, and string metadata', function()
    local path = h.tmpname('.safetensors')
    local src = {
      w = dpl.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = 'float32' }),
      d = dpl.tensor({ 0.1, -2.5 }, { dtype = 'float64' }),
      h = dpl.tensor({ 1.5, -2 }, { dtype = 'float16' }),
      bf = dpl.tensor({ 3, 0.5 }, { dtype = 'bfloat16' }),
      i = dpl.tensor({ 7, -8 }, { dtype = 'int32' }),
      step = dpl.tensor(12345678901, { dtype = 'int64' }),
      u = dpl.tensor({ 0, 255 }, { dtype = 'uint8' }),
      b = dpl.tensor({ true, false, true }),
      empty = dpl.zeros(0, 3),
      t = dpl.arange(6):view(2, 3):t(), -- non-contiguous: written in logical order
    }
    st.save(path, src, { format = 'pt', epoch = '3', note = 'quote " and \\ and\nnewline' })
    local got, meta = st.load(path)
    assert.are.same({ format = 'pt', epoch = '3', note = 'quote " and \\ and\nnewline' }, meta)
    for k, v in pairs(src) do
      assert.is_not_nil(got[k], k)
      assert.are.equal(v.dtype, got[k].dtype, k)
      assert.are.same(v.shape, got[k].shape, k)
      assert.are.same(v:totable(), got[k]:totable(), k)
    end
    -- writes to a loaded tensor never reach the file (copy-on-write mapping)
    got.w:fill_(0)
    local again = st.load(path)
    assert.are.same({ { 1, 2, 3 }, { 4, 5, 6 } }, again.w:totable())
    -- header: little-endian length, 8-byte aligned, JSON starting with '{'
    local bytes = h.read_all(path)
    local n = 0
    for i = 8, 1, -1 do n = n * 256 + bytes:byte(i) end
    assert.are.equal(0, n % 8)
    assert.are.equal('{"__metadata__":{', bytes:sub(9, 25))
    os.remove(path)
  end)

  it('replaces files atomically and leaves no temp file behind', function()
    local path = h.tmpname('.safetensors')
    st.save(path, { a = dpl.ones(3) })
    st.save(path, { a = dpl.zeros(2) })
    assert.are.same({ 0, 0 }, st.load(path).a:totable())
    local dir = path:match('^(.*)/')
    local p = io.popen('ls ' .. h.q(dir))
    local listing = p:read('*a')
    p:close()
    assert.is_nil(listing:find('.tmp.', 1, true), listing)
    os.remove(path)
    assert.matches("cannot create '/nonexistent/dir/x.safetensors.tmp", err_of(function() st.save('/nonexistent/dir/x.safetensors', { a = dpl.ones(1) }) end))
  end)

  it('rejects bad input and damaged files with clear messages', function()
    assert.matches("'x' is not a tensor", err_of(function() st.save(h.tmpname(), { x = 1 }) end))
    assert.matches('metadata must map strings to strings', err_of(function() st.save(h.tmpname(), {}, { epoch = 3 }) end))
    assert.matches("cannot open '/nonexistent.safetensors'", err_of(function() st.load('/nonexistent.safetensors') end))
    local bad = h.write_file(h.tmpname('.safetensors'), 'abc')
    assert.matches('too short', err_of(function() st.load(bad) end))
    h.write_file(bad, '\255\255\255\255\0\0\0\0{}')
    assert.matches('invalid header length', err_of(function() st.load(bad) end))
    local function file(json, data)
      local n = #json
      local len = string.char(n % 256, math.floor(n / 256) % 256, 0, 0, 0, 0, 0, 0)
      return h.write_file(bad, len .. json .. (data or ''))
    end
    file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', '1234')
    assert.matches("tensor 'a' has data_offsets %[0, 4%] but needs 8 bytes", err_of(function() st.load(bad) end))
    file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', '12345678xx')
    assert.matches('cover 8 bytes but the data section has 10', err_of(function() st.load(bad) end))
    file('{"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}', '12345678')
    assert.matches('dtype C64, which dplhost does not support', err_of(function() st.load(bad) end))
    file('{"__metadata__":{"epoch":3}}')
    assert.matches('__metadata__ values must be strings', err_of(function() st.load(bad) end))
    file('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', '12345678')
    assert.matches('duplicate tensor name', err_of(function() st.load(bad) end))
    file('[1]')
    assert.matches('must be a JSON object', err_of(function() st.load(bad) end))
    -- dims that each pass but whose product wraps in 64 bits (2^64 elements read as 0, so empty
    -- data_offsets passed and indexing the tensor crashed)
    file('{"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}')
    assert.matches("tensor 'x' has shape %[4294967296, 4294967296%], too many elements", err_of(function() st.load(bad) end))
    file('{"x":{"dtype":"F32","shape":[2147483648,2147483648,4],"data_offsets":[0,16]}}', ('\0'):rep(16))
    assert.matches('too many elements', err_of(function() st.load(bad) end))
    assert.matches('too many elements', err_of(function() dpl.load(bad) end))
    os.remove(bad)
  end)

  it('writes files Python safetensors reads, and reads files it writes', function()
    local py = find_python()
    if not py then
      pending('no Python with the safetensors package (pip install safetensors, or set DPL_PYTHON)')
      return
    end
    local path = h.tmpname('.safetensors')
    st.save(path, { w = dpl.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = 'float32' }), n = dpl.tensor({ -5, 6 }) },
      { epoch = '2' })
    local script = h.write_file(h.tmpname('.py'), ([[
import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file
d = load_file(%q)
with safe_open(%q, 'np') as f: meta = f.metadata()
print(d['w'].dtype, d['w'].tolist(), d['n'].dtype, d['n'].tolist(), meta)
save_file({'x': np.arange(6, dtype=np.float64).reshape(2, 3), 'y': np.array([1, 0, 1], dtype=np.uint8)},
          %q, metadata={'from': 'python'})
]]):format(path, path, path .. '.py'))
    local out, err, rc = h.sh(h.q(py) .. ' ' .. h.q(script))
    assert.are.equal(0, rc, err)
    assert.are.equal("float32 [[1.0, 2.0], [3.0, 4.0]] int64 [-5, 6] {'epoch': '2'}\n", out)
    local t, meta = st.load(path .. '.py')
    assert.are.same({ { 0, 1, 2 }, { 3, 4, 5 } }, t.x:totable())
    assert.are.equal('float64', t.x.dtype)
    assert.are.same({ 1, 0, 1 }, t.y:totable())
    assert.are.same({ from = 'python' }, meta)
    os.remove(path); os.remove(path .. '.py'); os.remove(script)
  end)
end)
