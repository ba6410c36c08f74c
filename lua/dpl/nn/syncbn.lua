-- dpl.nn.syncbn: nn.SyncBatchNorm, batch normalisation whose batch statistics cover every
-- rank of a dpl.dist group (PyTorch's torch.nn.SyncBatchNorm), and
-- nn.SyncBatchNorm.convert_sync_batchnorm. In training with more than one rank, the
-- per-channel sums, the element count and the centred sums of squares are all-reduced
-- (a differentiable all-reduce: its backward all-reduces the gradients, which gives
-- PyTorch's sums of dy and dy * (x - mean) over the ranks); otherwise (eval, one rank, no
-- process group) it is nn.BatchNorm's computation. Installed by require('dpl.nn.syncbn')(nn).
local T = require 'dpl.tensor'
local autograd = require 'dpl.autograd'
local options = require 'dpl.options'
local errors = require 'dpl.errors'
local class = require 'dpl.class'

local fmt = string.format
local error = errors.raise

-- all_reduce(x, 'sum') that autograd sees through: backward all-reduces the gradient
local all_reduce_rule = {
  nin = 1, name = 'all_reduce',
  save = function(n, out, x, group) n.group = group end,
  bw = function(n, g)
    local gg = g:contiguous():clone()
    require('dpl.dist').all_reduce(gg, 'sum', { group = n.group })
    return gg
  end,
}
local function all_reduce_sum(x, group)
  local out = autograd.no_grad(function() return x:contiguous():clone() end)
  require('dpl.dist').all_reduce(out, 'sum', { group = group })
  return autograd.record(all_reduce_rule, out, x, group)
end

return function(nn)
  local keys = options.keys
  local dims = { [2] = true, [3] = true, [4] = true, [5] = true, what = '[N, C, ...] (2-d to 5-d)' }
  local SyncBatchNorm = nn._batchnorm('SyncBatchNorm', dims, keys(nn._BN_KEYS, 'process_group'))
  local base_init, base_forward = SyncBatchNorm.__init, SyncBatchNorm.forward

  --- SyncBatchNorm(num_features [, {eps=, momentum=, affine=, track_running_stats=,
  --- process_group=}]): process_group nil is dpl.dist's default group (all ranks).
  function SyncBatchNorm:__init(C, opts, ...)
    base_init(self, C, opts, ...) -- (checks opts: a table, or BatchNorm's positional eps, momentum, ...)
    self.process_group = type(opts) == 'table' and opts.process_group or nil
  end

  -- the ranks of the group when statistics are to be synchronised, else nil
  local function sync_size(self)
    if not self.training then return nil end
    local dist = require 'dpl.dist'
    if not dist.is_initialized() then return nil end
    local n = dist.get_world_size(self.process_group)
    return n > 1 and n or nil
  end

  function SyncBatchNorm:forward(x)
    if not sync_size(self) then return base_forward(self, x) end
    if not T.is_tensor(x) or x:dim() < 2 or x:size(2) ~= self.num_features then
      error(fmt('%s(%d): input has shape %s, expected %s with %d channels in dim 2', self:_label(), self.num_features,
        T.is_tensor(x) and ('[' .. table.concat(x:size(), ', ') .. ']') or type(x), dims.what, self.num_features), 2)
    end
    local C = self.num_features
    local group = self.process_group
    -- [C, rest]: channels first
    local xt = x:transpose(1, 2):reshape(C, -1)
    local n_local = xt:size(2)
    -- the sums and the count in one all-reduce (the count as a last element, no gradient), in
    -- float64 whatever x's dtype (a bfloat16 count would round past 256)
    local cnt = T.full({ 1 }, n_local, { dtype = 'float64' })
    local s = all_reduce_sum(T.cat({ xt:sum(2):double(), cnt }), group)
    local n = s[C + 1]:item()
    if n <= 1 then
      error(fmt('%s(%d): expected more than 1 value per channel when training, got %d over all ranks', self:_label(),
        C, n), 2)
    end
    local mean = (s:narrow(1, 1, C) / n):to(xt.dtype)
    local xc = xt - mean:view(C, 1)
    local var = (all_reduce_sum((xc * xc):sum(2):double(), group) / n):to(xt.dtype)
    if self.track_running_stats then
      local factor = self.momentum
      autograd.no_grad(function()
        self.num_batches_tracked:add_(1)
        if factor == false then factor = 1 / self.num_batches_tracked:item() end
        self.running_mean:mul_(1 - factor):add_(mean:detach():to(self.running_mean.dtype) * factor)
        self.running_var:mul_(1 - factor):add_(var:detach():to(self.running_var.dtype) * (factor * n / (n - 1)))
      end)
    end
    local shape = { 1, C }
    for _ = 3, x:dim() do shape[#shape + 1] = 1 end
    local y = (x - mean:view(shape)) * (var:view(shape) + self.eps):rsqrt()
    if self.weight then y = y * self.weight:view(shape) end
    if self.bias then y = y + self.bias:view(shape) end
    return y
  end

  --- SyncBatchNorm.convert_sync_batchnorm(module [, process_group]): every BatchNorm1d/2d/3d
  --- in module replaced by a SyncBatchNorm holding the same parameters and buffers (PyTorch's);
  --- returns the module (a new one when module itself is a BatchNorm).
  function SyncBatchNorm.convert_sync_batchnorm(module, process_group)
    if not class.is_instance(module, nn.Module) then
      error(fmt('convert_sync_batchnorm: expected an nn.Module, got %s', type(module)), 2)
    end
    local out = module
    if class.is_instance(module, nn.BatchNorm1d) or class.is_instance(module, nn.BatchNorm2d)
       or class.is_instance(module, nn.BatchNorm3d) then
      out = SyncBatchNorm(module.num_features, { eps = module.eps, momentum = module.momentum, affine = module.affine,
        track_running_stats = module.track_running_stats, process_group = process_group })
      if module.affine then
        rawset(out, 'weight', module.weight)
        rawset(out, 'bias', module.bias)
      end
      if module.track_running_stats then
        for _, b in ipairs({ 'running_mean', 'running_var', 'num_batches_tracked' }) do rawset(out, b, module[b]) end
      end
      out.training = module.training
      rawset(out, '_name', rawget(module, '_name'))
      return out
    end
    local swaps = {}
    for name, child in module:named_children() do
      local c = SyncBatchNorm.convert_sync_batchnorm(child, process_group)
      if c ~= child then swaps[#swaps + 1] = { name, c } end
    end
    for _, sw in ipairs(swaps) do module:add_module(sw[1], sw[2]) end
    return out
  end

  nn.SyncBatchNorm = SyncBatchNorm
end
