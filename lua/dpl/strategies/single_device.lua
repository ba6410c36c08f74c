-- dpl.strategies.single_device: one device (the CPU or one GPU), one process.
local S = require 'dpl.strategies.strategy'

local SingleDeviceStrategy = S.Strategy:extend('SingleDeviceStrategy')
SingleDeviceStrategy.strategy_name = 'single_device'

--- SingleDeviceStrategy{device = dpl.device('cpu')}
function SingleDeviceStrategy:__init(opts)
  opts = opts or {}
  local dev = opts.device or opts.root_device or require('dpl.devices').device('cpu')
  if type(dev) == 'string' then dev = require('dpl.devices').device(dev) end
  S.Strategy.__init(self, { root_device = dev, parallel_devices = { dev }, num_nodes = 1, kwargs = opts.kwargs })
  self.num_processes = 1
end

return SingleDeviceStrategy
