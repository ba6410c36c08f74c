-- dpl.loggers: CSVLogger and TensorBoardLogger (Lightning's layout:
-- <save_dir>/lightning_logs/version_N/...). The Trainer's default logger
-- (logger=true) is a TensorBoardLogger in default_root_dir, as in Lightning.
local class = require 'dpl.class'

local M = {}

setmetatable(M, { __dir = function() return { 'Logger', 'CSVLogger', 'TensorBoardLogger' } end, __index = function(t, k)
  local v
  if k == 'Logger' then v = require('dpl.loggers.base').Logger
  elseif k == 'CSVLogger' then v = require 'dpl.loggers.csv'
  elseif k == 'TensorBoardLogger' then v = require('dpl.loggers.tensorboard').TensorBoardLogger
  end
  if v ~= nil then rawset(t, k, v) end
  return v
end })

function M.is_logger(x)
  return class.is_instance(x, require('dpl.loggers.base').Logger)
end

function M.default_logger(root)
  return M.TensorBoardLogger{ save_dir = root }
end

return M
