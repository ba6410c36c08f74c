-- dpl.amp: autocast for bfloat16 mixed precision on the CPU (torch.autocast's role, what
-- Lightning's precision="bf16-mixed" turns on around every *_step).
--   amp.autocast('bfloat16', fn, ...) runs fn(...) with autocast on (nested calls restore
--   the outer state, also after an error) and returns what fn returns.
-- While it is on: nn.Linear, nn.Conv2d, F.linear and F.conv2d cast their floating inputs,
-- weights and biases to bfloat16 (float64 ones are left alone, as in torch); the matmul
-- and conv kernels accumulate in float32 and round the result to bfloat16; the losses
-- (cross_entropy, nll_loss, mse/l1/smooth_l1, binary_cross_entropy[_with_logits]) cast
-- bfloat16/float16 inputs to float32 (torch's CPU fp32 list). The casts are autograd
-- operations: gradients come back to the float32 parameters as float32, and the
-- optimizer keeps float32 master weights.
local M = {}

M.dtype = nil -- the active autocast dtype ('bfloat16'), or nil when off

local SUPPORTED = { bfloat16 = true }

local function restore(prev, ok, ...)
  M.dtype = prev
  if not ok then error((...), 0) end
  return ...
end

function M.autocast(dtype, fn, ...)
  if dtype ~= nil and not SUPPORTED[dtype] then
    error(require('dpl.errors').ValueError(("autocast: dtype %s is not supported on the CPU (only 'bfloat16')")
      :format(tostring(dtype))), 2)
  end
  local prev = M.dtype
  M.dtype = dtype
  return restore(prev, pcall(fn, ...))
end

function M.is_autocast_enabled() return M.dtype ~= nil end

local low = { float32 = true, float16 = true, bfloat16 = true }

--- x cast to the autocast dtype when it is a float32/float16 tensor (nil and others pass).
function M.cast(x)
  local d = M.dtype
  if d == nil or x == nil or type(x) ~= 'cdata' then return x end
  local xd = x.dtype
  if xd == d or not low[xd] then return x end
  return x:to(d)
end

--- x as float32 when it is a bfloat16/float16 tensor (for the fp32 ops).
function M.fp32(x)
  if M.dtype == nil or x == nil or type(x) ~= 'cdata' then return x end
  local xd = x.dtype
  if xd == 'bfloat16' or xd == 'float16' then return x:to('float32') end
  return x
end

return M
