-- fabric_equiv_script.lua: DDP equivalence of a plain dpl.Fabric loop (nn.Linear layers, SGD
-- with momentum, cross-entropy). arg[1] = "single" (one process, batch 2b), "ddp" (under
-- dplhost --nproc 2), "ddp_spawn" (2 forked workers) or "horovod" (mpirun -np 2), batch b per
-- rank; arg[2] = b, arg[3] = steps; arg[4] = "accum": each step accumulates 2 half-batches,
-- the first inside fabric:no_backward_sync (the all-reduce runs once, on the sum), or "bn": a
-- BatchNorm1d (buffers from rank 0 before each training forward). Rank 0 prints the weights.
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local mode, b, k, variant = arg[1], tonumber(arg[2]), tonumber(arg[3]), arg[4]

local model_extra
local function run(fabric)
  dpl.manual_seed(0)
  local model
  if variant == 'bn' then
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 3))
  else
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
  end
  -- rank 1 starts from other weights: setup must broadcast rank 0's
  if fabric.global_rank == 1 then dpl.manual_seed(7); model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3)) end
  if variant == 'bn' and fabric.global_rank == 1 then
    dpl.manual_seed(0); model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 3))
  end
  -- several ranks: SyncBatchNorm, so that the batch statistics cover the 2b items (the user's
  -- conversion, as with Lightning's Fabric)
  if variant == 'bn' and fabric.world_size > 1 then nn.SyncBatchNorm.convert_sync_batchnorm(model) end
  local opt = dpl.optim.SGD(model:parameters(), { lr = 0.1, momentum = 0.9 })
  model, opt = fabric:setup(model, opt)
  -- count the gradient all-reduces (one per backward outside no_backward_sync)
  local syncs, orig = 0, fabric.strategy._sync_gradients
  fabric.strategy._sync_gradients = function(...) syncs = syncs + 1 return orig(...) end
  dpl.manual_seed(1)
  local x = dpl.randn({ 64, 4 })
  local y = dpl.randint(1, 4, { 64 })
  local bs = mode == 'single' and 2 * b or b
  local loader = fabric:setup_dataloaders(dpl.data.DataLoader(dpl.data.TensorDataset(x, y), { batch_size = bs }))
  local step = 0
  for batch in loader:iter() do
    if step == k then break end
    opt:zero_grad()
    if variant == 'accum' then
      -- two halves; mean of the half losses = the loss of the whole batch
      local h = bs / 2
      fabric:no_backward_sync(model, function()
        local loss = F.cross_entropy(model(batch[1]:narrow(1, 1, h)), batch[2]:narrow(1, 1, h)) * 0.5
        fabric:backward(loss)
      end)
      local loss = F.cross_entropy(model(batch[1]:narrow(1, h + 1, h)), batch[2]:narrow(1, h + 1, h)) * 0.5
      fabric:backward(loss)
    else
      fabric:backward(F.cross_entropy(model(batch[1]), batch[2]))
    end
    opt:step()
    step = step + 1
  end
  if variant == 'bn' then
    local norm = model.module[2]
    for _, t in ipairs({ norm.running_mean, norm.running_var }) do model_extra = (model_extra or '') .. ' ' .. ('%.7g'):format(t:sum():item()) end
  end
  local parts = {}
  for _, p in ipairs(model:parameters()) do
    for _, v in ipairs(p:view(-1):tolist()) do parts[#parts + 1] = ('%.7g'):format(v) end
  end
  local w = 'weights ' .. table.concat(parts, ' ')
  if fabric.is_global_zero then print(w) end
  if model_extra then parts[#parts + 1] = model_extra end
  print(('rank %d of %d steps %d syncs %d'):format(fabric.global_rank, fabric.world_size, step, syncs))
  return w
end

local fabric = dpl.Fabric{ strategy = mode ~= 'single' and mode or nil, accelerator = 'cpu',
  devices = mode == 'ddp_spawn' and 2 or nil }
if mode == 'ddp_spawn' then
  local w = fabric:launch(run)
  print('parent got ' .. w)
else
  fabric:launch()
  run(fabric)
end
