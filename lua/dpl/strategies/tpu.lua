-- dpl.strategies.tpu: single_tpu and tpu_spawn. They parse, and their
-- construction raises where no TPU exists (dplhost has no TPU backend).
local errors = require 'dpl.errors'
local S = require 'dpl.strategies.strategy'

local M = {}

local function no_tpu()
  errors.MisconfigurationException:raise('No TPU devices were found.', 3)
end

M.SingleTPUStrategy = S.Strategy:extend('SingleTPUStrategy')
M.SingleTPUStrategy.strategy_name = 'single_tpu'
function M.SingleTPUStrategy:__init() no_tpu() end

M.TPUSpawnStrategy = S.ParallelStrategy:extend('TPUSpawnStrategy')
M.TPUSpawnStrategy.strategy_name = 'tpu_spawn'
function M.TPUSpawnStrategy:__init() no_tpu() end

return M
