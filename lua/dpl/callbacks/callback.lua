-- dpl.callbacks.callback: the Callback base class. Subclass with
-- `local MyCb = dpl.callbacks.Callback:extend('MyCb')` and define any hook;
-- hooks receive (trainer, pl_module, ...) as in Lightning 1.9.
local class = require 'dpl.class'

local Callback = class.Object:extend('Callback')

Callback.hook_names = {
  'setup', 'teardown', 'on_fit_start', 'on_fit_end', 'on_sanity_check_start', 'on_sanity_check_end',
  'on_train_batch_start', 'on_train_batch_end', 'on_train_epoch_start', 'on_train_epoch_end',
  'on_validation_epoch_start', 'on_validation_epoch_end', 'on_test_epoch_start', 'on_test_epoch_end',
  'on_predict_epoch_start', 'on_predict_epoch_end', 'on_validation_batch_start', 'on_validation_batch_end',
  'on_test_batch_start', 'on_test_batch_end', 'on_predict_batch_start', 'on_predict_batch_end',
  'on_train_start', 'on_train_end', 'on_validation_start', 'on_validation_end', 'on_test_start',
  'on_test_end', 'on_predict_start', 'on_predict_end', 'on_exception', 'on_save_checkpoint',
  'on_load_checkpoint', 'on_before_backward', 'on_after_backward', 'on_before_optimizer_step',
  'on_before_zero_grad',
}
for _, name in ipairs(Callback.hook_names) do
  Callback[name] = function() end
end

--- The key under which this callback's state is checkpointed (its class name;
--- callbacks that can appear several times add their arguments).
function Callback:state_key()
  return getmetatable(self).__name or 'Callback'
end

function Callback:state_dict() return {} end
function Callback:load_state_dict() end

Callback.__tostring = function(self) return (getmetatable(self).__name or 'Callback') .. '()' end

-- The hook functions of dpl's own callbacks: they read the trainer's metric dicts only
-- through points that bring logged GPU values in first (Results:flush), so the Trainer
-- need not wait for the GPU before calling them. A hook a user defines (a subclass
-- included) is not in here: the Trainer brings the values in before calling it.
local lazy_ok = setmetatable({}, { __mode = 'k' })
Callback._lazy_metrics_ok = lazy_ok
function Callback._mark_lazy_metrics_ok(cls)
  for _, v in pairs(cls) do if type(v) == 'function' then lazy_ok[v] = true end end
end
for _, name in ipairs(Callback.hook_names) do lazy_ok[Callback[name]] = true end

return Callback
