-- dpl.callbacks.lambda_function: LambdaCallback, a callback made on the fly from
-- functions given by hook name (Lightning 1.9's LambdaCallback). Owns only the
-- name checks and the wrapping: each function is called as f(trainer, pl_module, ...),
-- without the callback itself, as Lightning calls its lambdas.
local errors = require 'dpl.errors'
local Callback = require 'dpl.callbacks.callback'

local LambdaCallback = Callback:extend('LambdaCallback')

local known = {}
for _, name in ipairs(Callback.hook_names) do known[name] = true end

local function is_callable(f)
  if type(f) == 'function' then return true end
  local mt = getmetatable(f)
  return type(mt) == 'table' and mt.__call ~= nil
end

--- LambdaCallback{on_train_start = function(trainer, pl_module) ... end, ...}
function LambdaCallback:__init(hooks)
  Callback.__init(self)
  if hooks ~= nil and type(hooks) ~= 'table' then
    errors.TypeError:raise(('LambdaCallback expects a table of hook functions {hook_name = function(trainer, pl_module, ...) end},'
      .. ' got %s'):format(type(hooks)), 2)
  end
  local names = {}
  for k in pairs(hooks or {}) do names[#names + 1] = tostring(k) end
  table.sort(names)
  for _, k in ipairs(names) do
    local f = hooks[k]
    if not known[k] then
      errors.TypeError:raise(("LambdaCallback got an unknown hook '%s'. The hooks of a Callback are: %s")
        :format(k, table.concat(Callback.hook_names, ', ')), 2)
    end
    if not is_callable(f) then
      errors.TypeError:raise(("LambdaCallback: hook '%s' must be a function, got %s"):format(k, type(f)), 2)
    end
    self[k] = function(_, ...) return f(...) end
  end
end

return LambdaCallback
