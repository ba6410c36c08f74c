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

--- Raises the C side's last error when status is not DPL_OK (0).
function M.check(status, level)
  if status ~= 0 then
    local msg = ffi.string(C.dpl_last_error())
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
