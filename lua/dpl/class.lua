-- dpl.class: the one class system of dpl (nn.Module, LightningModule, Callback,
-- Dataset all use it). `local C = Base:extend()`, constructor `function C:__init(...)`
-- which calls `Base.__init(self, ...)` as super().__init__(); `C.super` is the
-- parent; instances by calling the class: `C(...)`. Metamethods (__tostring,
-- __call, __len on proxies, ...) defined on a class are inherited by subclasses
-- created after them.
local M = {}

local function construct(cls, ...)
  local obj = setmetatable({}, cls)
  obj:__init(...)
  return obj
end

local Object = {}
Object.__index = Object
Object.__name = 'Object'
setmetatable(Object, { __call = construct })

function Object:__init() end

--- Creates a subclass. `name` (optional) is used by tostring and error messages.
function Object:extend(name)
  local cls = {}
  for k, v in pairs(self) do
    if type(k) == 'string' and k:sub(1, 2) == '__' and k ~= '__index' then cls[k] = v end
  end
  cls.__index = cls
  cls.__name = name or (self.__name .. '+')
  cls.super = self
  return setmetatable(cls, { __index = self, __call = construct })
end

--- True when obj is an instance of cls or of one of its subclasses.
function M.is_instance(obj, cls)
  if type(obj) ~= 'table' then return false end
  local c = getmetatable(obj)
  while c do
    if c == cls then return true end
    c = rawget(c, 'super')
  end
  return false
end

M.Object = Object
return M
