-- torch7_require.lua: what `require 'torch'` (and Torch7's other packages: nn, optim, image,
-- cutorch, ...) says in dplhost. The host appends a searcher to package.loaders (after every
-- other, so a torch.lua of one's own on package.path still wins) that, for those names, loads
-- this module and returns M.loader(name): a loader that raises NotImplementedError naming the
-- dplhost way, instead of Lua's "module 'torch' not found" and its list of paths (docs/torch7.md).
local errors = require 'dpl.errors'
local fmt = string.format

local M = {}

local WHAT = {
  torch = "write local dpl = require 'dpl' (dpl.Tensor(2, 3), dpl.mm, dpl.save(obj, path), dpl.load, dpl.manualSeed; "
    .. 'PyTorch semantics with 1-based positions); dplhost sets no globals, so name it yourself: '
    .. "local torch = require 'dpl' reads like Torch7 where the names agree",
  nn = "write local nn = require('dpl').nn (Torch7's class names there raise an error naming dplhost's: "
    .. 'nn.SpatialConvolution -> nn.Conv2d, nn.ClassNLLCriterion -> nn.NLLLoss, ...)',
  optim = "write local optim = require('dpl').optim: an optimizer object made once, "
    .. 'optim.SGD(model:parameters(), {lr = 0.1}), then opt:zero_grad(); loss:backward(); opt:step() '
    .. '(optim.sgd(feval, params, config) raises an error saying so)',
  cutorch = 'CUDA is built in: x:cuda(), model:cuda(), x:to(\'cuda:0\'); dpl.devices lists the GPUs (docs/cuda.md)',
  cunn = 'CUDA is built in: model:cuda() moves a dpl.nn module (docs/cuda.md)',
  cudnn = 'CUDA is built in: model:cuda() moves a dpl.nn module (docs/cuda.md)',
  nngraph = 'write a dpl.nn.Module subclass whose forward wires the layers (docs/nn.md)',
  paths = "use io.open / os.rename, and the host's helpers (docs/host.md)",
  xlua = "use the Trainer's progress bar (docs/trainer.md), or a print per step",
  image = 'dpl.datasets loads the datasets as tensors (docs/nn.md); resizing: dpl.nn.functional.interpolate',
}
M.WHAT = WHAT

--- loader(name): a package loader raising NotImplementedError for Torch7's package `name`
function M.loader(name)
  return function()
    local what = WHAT[name] or 'nothing of that name ships with dplhost'
    error(errors.NotImplementedError(fmt("require '%s': Torch7's %s package is not in dplhost: %s "
      .. '(docs/torch7.md)', name, name, what)), 2)
  end
end

return M
