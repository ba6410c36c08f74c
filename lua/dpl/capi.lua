-- dpl.capi: the C API as seen from Lua. ffi.cdef gets the very text of
-- include/dpl.h (embedded in the binary); check() turns C status codes into Lua
-- errors carrying the message C left in dpl_last_error().
local ffi = require 'ffi'
local host = require 'dpl.host'

ffi.cdef(host.header)
local C = ffi.C

local M = { C = C, version = host.version, header = host.header }

local status_names = {
  [-1] = 'EINVAL', [-2] = 'ENOMEM', [-3] = 'EIO', [-4] = 'ENOTIMPL',
  [-5] = 'EDEVICE', [-6] = 'ETIMEOUT', [-7] = 'ECOMM', [-8] = 'EINTR',
}
M.status_names = status_names

--- The C side's last error in Lua's terms: C speaks 0-based, so its index and
--- class-target range messages (which may also come from a later call, for a
--- GPU op's index check reported when the host next waits) are said 1-based.
function M.last_error()
  local msg = ffi.string(C.dpl_last_error())
  msg = msg:gsub('target (%-?%d+) of sample (%d+) is out of range: expected a class index in %[0, (%d+)%) %(0%-based%)',
    function(v, s, c)
      return ('target %d of sample %d is out of range: expected a class index in 1..%d'):format(v + 1, s + 1, c)
    end)
  msg = msg:gsub('index (%-?%d+) is out of range for dim (%d+) of size (%d+) %(expected 0%.%.(%-?%d+), 0%-based%)',
    function(v, d, n)
      return ('index %d is out of range for dim %d of size %s (expected 1..%s)'):format(v + 1, d + 1, n, n)
    end)
  -- index_add_ / scatter_add_'s shape checks name a dim
  msg = msg:gsub('(does not match self %b[] with dim )(%d+)( of size)', function(p, d, q) return p .. (d + 1) .. q end)
  msg = msg:gsub('(is larger than %a+ %b[] at dim )(%d+)', function(p, d) return p .. (d + 1) end)
  -- the tensors of a list (cat, stack) and their dims, numbered from 1
  msg = msg:gsub('tensor (%d+) has (%d+) dims, tensor (%d+) has (%d+)', function(i, a, j, b)
    return ('tensor %d has %s dims, tensor %d has %s'):format(i + 1, a, j + 1, b)
  end)
  msg = msg:gsub('sizes must match except in dim (%d+): tensor (%d+) is (%b[]), tensor (%d+) is', function(d, j, s, i)
    return ('sizes must match except in dim %d: tensor %d is %s, tensor %d is'):format(d + 1, j + 1, s, i + 1)
  end)
  msg = msg:gsub('(zero%-dimensional tensors cannot be concatenated %(tensor )(%d+)%)', function(p, i)
    return p .. (i + 1) .. ')'
  end)
  msg = msg:gsub('expected tensors of equal shape, tensor 0 is (%b[]), tensor (%d+) is', function(s, i)
    return ('expected tensors of equal shape, tensor 1 is %s, tensor %d is'):format(s, i + 1)
  end)
  -- dims named by broadcasting, expand and permute (C counts them from 0)
  msg = msg:gsub('(cannot be broadcast %(dim )(%d+)(: )', function(p, d, q) return p .. (d + 1) .. q end)
  msg = msg:gsub('^(expand: cannot expand shape %b[] to %b[] %(dim )(%d+)(: )', function(p, d, q) return p .. (d + 1) .. q end)
  msg = msg:gsub('^(expand: %-1 is not allowed for a new leading dim %(dim )(%d+)%)', function(p, d) return p .. (d + 1) .. ')' end)
  msg = msg:gsub('^(permute: dim )(%d+)( appears twice)', function(p, d, q) return p .. (d + 1) .. q end)
  return msg
end

--- Raises the C side's last error when status is not DPL_OK (0).
function M.check(status, level)
  if status ~= 0 then
    local msg = M.last_error()
    if msg == '' then msg = 'dpl: C call failed with status ' .. tostring(status_names[status] or status) end
    error(msg, (level or 1) + 1)
  end
  return status
end

--- Names of the functions declared in the header (for the header/symbol check).
function M.declared_functions()
  local names = {}
  for name in host.header:gmatch('(dpl_[%w_]+)%s*%(') do
    names[#names + 1] = name
  end
  return names
end

return M
