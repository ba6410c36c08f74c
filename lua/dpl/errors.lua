-- dpl.errors: error classes shared by every dpl module. An error is a table
-- whose tostring reads "ClassName: message"; classes form a hierarchy checked
-- with errors.is(e, Class). Raise with Class:raise(msg, level) or error(Class(msg)).
local M = {}

local Base = {}
Base.__index = Base
Base.__name = 'DplError'
Base.__tostring = function(e) return e.__name .. ': ' .. tostring(e.message) end

local function new_class(name, parent)
  parent = parent or Base
  local cls = setmetatable({}, { __index = parent, __call = function(c, msg)
    return setmetatable({ message = msg }, c)
  end })
  cls.__index = cls
  cls.__name = name
  cls.__tostring = Base.__tostring
  cls.super = parent
  return cls
end
setmetatable(Base, { __call = function(c, msg) return setmetatable({ message = msg }, c) end })

function Base:raise(msg, level)
  error(self(msg), (level or 1) + 1)
end

M.DplError = Base
M.new_class = new_class

--- True when e is an instance of cls or of a subclass.
--- An error() for module code: raise(msg, cls) turns a string message into an
--- object of cls (default: default_cls); a number in place of cls (a stack
--- level) is ignored, since objects carry no position.
function M.raiser(default_cls)
  return function(msg, cls)
    if type(cls) ~= 'table' then cls = default_cls end
    if type(msg) == 'string' then msg = cls(msg) end
    error(msg, 0)
  end
end

function M.is(e, cls)
  if type(e) ~= 'table' then return false end
  local mt = getmetatable(e)
  while mt do
    if mt == cls then return true end
    mt = mt.super
  end
  return false
end

M.MisconfigurationException = new_class('MisconfigurationException')
M.NotImplementedError = new_class('NotImplementedError')
M.ValueError = new_class('ValueError')
M.TypeError = new_class('TypeError')
-- Python's RuntimeError: a failure at run time that is not the caller's
-- configuration mistake (e.g. "No GPUs available." from pick_single_gpu).
M.RuntimeError = new_class('RuntimeError')
-- torch.linalg.LinAlgError: a matrix a factorization cannot handle (singular, not
-- positive-definite, no convergence); a RuntimeError
M.LinAlgError = new_class('LinAlgError', M.RuntimeError)
-- Python's AttributeError: reading an attribute an object does not have (dpl.Trainer's
-- unknown public names, as Lightning's Trainer).
M.AttributeError = new_class('AttributeError')
-- Python's KeyError: a key a table must have is missing (Lightning's "Trying to restore
-- optimizer state but checkpoint contains only the model", jsonargparse's set_defaults of an
-- unknown key).
M.KeyError = new_class('KeyError')

M.raise = M.raiser(M.ValueError)

--- Records where an error object was raised, for whoever reports it after it was caught
--- and raised again (the Trainer does, to tear down): e.traceback, "stack traceback:\n...",
--- from `level` (as debug.traceback's) up. The host prints it under the message instead
--- of the stack of the re-raise (which ends in the catcher). Strings (their traceback
--- goes into the message) and objects that have one already are left alone.
function M.attach_traceback(e, level)
  if type(e) ~= 'table' or rawget(e, 'traceback') ~= nil or not M.is(e, Base) then return e end
  local tb = debug.traceback('', (level or 1) + 1)
  rawset(e, 'traceback', (tb:gsub('^\n', '')))
  return e
end

return M
