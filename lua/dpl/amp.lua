-- dpl.amp: autocast for bfloat16 and float16 mixed precision (torch.autocast's role, what
-- Lightning's precision="bf16-mixed" / "16-mixed" turns on around every *_step), and
-- GradScaler, torch.cuda.amp.GradScaler's dynamic loss scaling for float16.
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

-- float16 autocast is for GPUs (the Trainer refuses precision 16 on the CPU, as
-- Lightning does); its kernels here are the same float32-accumulating ones as bfloat16's
local SUPPORTED = { bfloat16 = true, float16 = true }

local function restore(prev, ok, ...)
  M.dtype = prev
  if not ok then error((...), 0) end
  return ...
end

function M.autocast(dtype, fn, ...)
  if dtype ~= nil and not SUPPORTED[dtype] then
    error(require('dpl.errors').ValueError(("autocast: dtype %s is not supported (only 'bfloat16' and 'float16')")
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

---------------------------------------------------------------- GradScaler

-- GradScaler{init_scale=2^16, growth_factor=2, backoff_factor=0.5, growth_interval=2000,
-- enabled=true}: the loss is multiplied by `scale` before backward so that float16
-- gradients do not underflow; unscale_(optimizer) divides the gradients back (once per
-- step) and notes whether any is inf/NaN; step(optimizer) then skips the update when one
-- was, and update() halves the scale after such a step or doubles it after
-- growth_interval steps without one (torch's formulas).
local GradScaler = {}
GradScaler.__index = GradScaler
M.GradScaler = GradScaler

local function check_num(name, v, ok)
  if type(v) ~= 'number' or not ok(v) then
    error(require('dpl.errors').ValueError(('GradScaler: %s must be %s, got %s')
      :format(name, name == 'growth_interval' and 'a positive integer' or name == 'backoff_factor'
        and 'in (0, 1)' or name == 'growth_factor' and '> 1' or 'a positive number', tostring(v))), 3)
  end
end

setmetatable(GradScaler, { __call = function(cls, opts)
  opts = opts or {}
  local self = setmetatable({}, cls)
  self.enabled = opts.enabled ~= false
  self._scale = opts.init_scale or 65536.0
  self._growth_factor = opts.growth_factor or 2.0
  self._backoff_factor = opts.backoff_factor or 0.5
  self._growth_interval = opts.growth_interval or 2000
  check_num('init_scale', self._scale, function(v) return v > 0 end)
  check_num('growth_factor', self._growth_factor, function(v) return v > 1 end)
  check_num('backoff_factor', self._backoff_factor, function(v) return v > 0 and v < 1 end)
  check_num('growth_interval', self._growth_interval, function(v) return v >= 1 and v % 1 == 0 end)
  self._growth_tracker = 0
  self._per_opt = setmetatable({}, { __mode = 'k' }) -- optimizer -> {unscaled=, found_inf=}
  return self
end })

function GradScaler:get_scale() return self.enabled and self._scale or 1.0 end
function GradScaler:is_enabled() return self.enabled end

--- loss * scale (a tensor, recorded by autograd).
function GradScaler:scale(loss)
  if not self.enabled then return loss end
  return loss * self._scale
end

local function groups_of(optimizer)
  local o = optimizer
  if o.param_groups == nil and type(o.optimizer) == 'table' then o = o.optimizer end
  return o.param_groups or {}, o
end

--- Divides the optimizer's gradients by the scale, once per step; notes inf/NaN.
function GradScaler:unscale_(optimizer)
  if not self.enabled then return end
  local groups, o = groups_of(optimizer)
  local st = self._per_opt[o]
  if st and st.unscaled then
    error(require('dpl.errors').RuntimeError('unscale_() has already been called on this optimizer since the last update()'), 2)
  end
  st = st or {}
  self._per_opt[o] = st
  local inv, found = 1.0 / self._scale, false
  local dev -- the largest |g| of each GPU gradient, read back once for all of them
  for _, g in ipairs(groups) do
    for _, p in ipairs(g.params) do
      local gr = require('dpl.autograd').grad_of(p)
      if gr ~= nil then
        gr:mul_(inv)
        if gr._devtype ~= 0 then
          local m = gr:abs():max():float()
          if dev and (m._devtype ~= dev[1]._devtype or m._devindex ~= dev[1]._devindex) then m = m:to(dev[1].device) end
          dev = dev or {}
          dev[#dev + 1] = m
        elseif not found then
          local m = gr:abs():max():item()
          found = m ~= m or m == math.huge
        end
      end
    end
  end
  if dev and not found then
    local m = require('dpl.tensor').stack(dev):max():item() -- (a NaN anywhere makes max NaN)
    found = m ~= m or m == math.huge
  end
  st.unscaled, st.found_inf = true, found
end

--- The optimizer's step unless unscale_ found inf/NaN (then nil: the step is skipped).
function GradScaler:step(optimizer, ...)
  if not self.enabled then return optimizer:step(...) end
  local _, o = groups_of(optimizer)
  local st = self._per_opt[o]
  if not (st and st.unscaled) then self:unscale_(optimizer); st = self._per_opt[o] end
  st.stepped = true
  if st.found_inf then return nil end
  return optimizer:step(...)
end

--- Adjusts the scale after the step(s) of this iteration and forgets their state.
function GradScaler:update(new_scale)
  if not self.enabled then return end
  if new_scale ~= nil then
    check_num('init_scale', new_scale, function(v) return v > 0 end)
    self._scale = new_scale
  else
    local found = false
    for _, st in pairs(self._per_opt) do if st.found_inf then found = true end end
    if found then
      self._scale = self._scale * self._backoff_factor
      self._growth_tracker = 0
    else
      self._growth_tracker = self._growth_tracker + 1
      if self._growth_tracker == self._growth_interval then
        self._scale = self._scale * self._growth_factor
        self._growth_tracker = 0
      end
    end
  end
  self._per_opt = setmetatable({}, { __mode = 'k' })
end

-- Forgets an optimizer's unscale_ without a step (Lightning skips the step when the
-- training step returned nil): the scale is left as it is.
function GradScaler:_forget(optimizer)
  local _, o = groups_of(optimizer)
  self._per_opt[o] = nil
end

--- True when the last unscale_ of this optimizer found inf/NaN gradients.
function GradScaler:found_inf(optimizer)
  local _, o = groups_of(optimizer)
  local st = self._per_opt[o]
  return st ~= nil and st.found_inf == true
end

function GradScaler:state_dict()
  if not self.enabled then return {} end
  return { scale = self._scale, growth_factor = self._growth_factor, backoff_factor = self._backoff_factor,
           growth_interval = self._growth_interval, _growth_tracker = self._growth_tracker }
end

function GradScaler:load_state_dict(s)
  if type(s) ~= 'table' then error(require('dpl.errors').TypeError('GradScaler.load_state_dict: expected a table'), 2) end
  if next(s) == nil then return end
  self._scale = s.scale or self._scale
  self._growth_factor = s.growth_factor or self._growth_factor
  self._backoff_factor = s.backoff_factor or self._backoff_factor
  self._growth_interval = s.growth_interval or self._growth_interval
  self._growth_tracker = s._growth_tracker or 0
end

return M
