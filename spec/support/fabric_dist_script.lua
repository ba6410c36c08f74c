-- fabric_dist_script.lua: dpl.Fabric's collectives and checkpoints on 2 ranks (dplhost --nproc 2,
-- or arg[1] = "spawn": ddp_spawn's forked workers; "nolaunch": setup without fabric:launch()).
-- Prints "check <name> ok" lines (rank 0 and rank 1) that the spec looks for.
local dpl = require 'dpl'
local nn = dpl.nn
local mode, dir = arg[1], arg[2]

local function check(fabric, name, ok, detail)
  print(('rank %d check %s %s%s'):format(fabric.global_rank, name, ok and 'ok' or 'FAILED',
    ok and '' or (' ' .. tostring(detail))))
end

local function run(fabric)
  local r = fabric.global_rank
  check(fabric, 'ranks', fabric.world_size == 2 and fabric.local_rank == r and fabric.node_rank == 0
    and fabric.is_global_zero == (r == 0), r)
  -- all_gather: [world, ...]
  local g = fabric:all_gather(dpl.tensor({ 1, 2 }, { dtype = 'float32' }) + r)
  check(fabric, 'all_gather', table.concat(g:size(), 'x') == '2x2' and g[2][1]:item() == 2, tostring(g))
  local gn = fabric:all_gather({ a = r, b = dpl.tensor({ r }) })
  check(fabric, 'all_gather_table', gn.a:tolist()[2] == 1 and gn.b:size()[1] == 2, tostring(gn.a))
  -- all_reduce
  local m = fabric:all_reduce(dpl.tensor({ 1, 3 }, { dtype = 'float32' }) * (r + 1))
  local s = fabric:all_reduce(r + 1, { reduce_op = 'sum' })
  local mx = fabric:all_reduce(dpl.tensor({ r }, { dtype = 'float32' }), { reduce_op = 'max' })
  check(fabric, 'all_reduce', m:tolist()[1] == 1.5 and m:tolist()[2] == 4.5 and s:item() == 3 and mx:item() == 1,
    tostring(m) .. tostring(s))
  -- broadcast: a table, and a tensor whose shape differs on the other rank
  local b = fabric:broadcast({ rank = r, list = { 1, 2 } }, 1)
  local t = fabric:broadcast(r == 0 and dpl.tensor({ 5, 6, 7 }) or dpl.zeros({ 1 }), 0)
  check(fabric, 'broadcast', b.rank == 1 and #b.list == 2 and t:numel() == 3 and t[3]:item() == 7, tostring(t))
  fabric:barrier()
  -- setup: rank 0's parameters everywhere
  dpl.manual_seed(10 + r)
  local model = nn.Linear(3, 2)
  local opt = dpl.optim.SGD(model:parameters(), { lr = 0.1 })
  local fm, fo = fabric:setup(model, opt)
  local w = fabric:all_gather(fm.weight:detach():reshape(-1))
  check(fabric, 'setup_broadcast', (w[1] - w[2]):abs():max():item() == 0, tostring(w))
  -- loaders: a DistributedSampler per rank, interleaved, set_epoch at each pass
  local ds = dpl.data.TensorDataset(dpl.arange(1, 11):reshape(10, 1))
  local loader = fabric:setup_dataloaders(dpl.data.DataLoader(ds, { batch_size = 2 }))
  local first = loader:iter()()
  check(fabric, 'sampler', #loader == 3 and loader.sampler.__name == 'DistributedSampler'
    and first[1]:reshape(-1):tolist()[1] == 1 + r and first[1]:reshape(-1):tolist()[2] == 3 + r,
    tostring(first[1]))
  local shuffled = fabric:setup_dataloaders(dpl.data.DataLoader(ds, { batch_size = 5, shuffle = true }))
  local e0 = shuffled:iter()()[1]:reshape(-1):tolist()
  local e1 = shuffled:iter()()[1]:reshape(-1):tolist()
  check(fabric, 'set_epoch', shuffled.sampler.epoch == 1 and table.concat(e0, ',') ~= table.concat(e1, ','),
    table.concat(e0, ',') .. ' / ' .. table.concat(e1, ','))
  local own = fabric:setup_dataloaders(dpl.data.DataLoader(ds, { batch_size = 2 }), { use_distributed_sampler = false })
  check(fabric, 'no_sampler', #own == 5, #own)
  -- save (rank 0 writes) / load (every rank reads)
  fo:zero_grad()
  fabric:backward(fm(dpl.ones({ 4, 3 })):sum())
  fo:step()
  local path = dir .. '/fabric_dist.ckpt'
  fabric:save(path, { model = fm, opt = fo, step = 3 + r })
  local fresh = nn.Linear(3, 2)
  local st = { model = fresh, step = 0 }
  local rest = fabric:load(path, st)
  check(fabric, 'save_load', st.step == 3 and rest.opt ~= nil and (fresh.weight - fm.weight):abs():max():item() == 0,
    st.step)
  -- log: rank 0 only
  local logged = {}
  fabric.loggers[1] = { log_metrics = function(_, metrics, step) logged[#logged + 1] = metrics.loss end }
  fabric:log('loss', dpl.tensor(0.5), 1)
  check(fabric, 'log_rank0', #logged == (r == 0 and 1 or 0), #logged)
  return 'done'
end

if mode == 'nolaunch' then
  local fabric = dpl.Fabric{ strategy = 'ddp' }
  local ok, e = pcall(fabric.setup, fabric, nn.Linear(2, 2))
  print(('rank %d nolaunch %s %s'):format(fabric.global_rank, tostring(ok), tostring(e)))
elseif mode == 'spawn' then
  local fabric = dpl.Fabric{ strategy = 'ddp_spawn', accelerator = 'cpu', devices = 2 }
  print('parent got ' .. tostring(fabric:launch(run)))
else
  local fabric = dpl.Fabric{ strategy = 'ddp' }
  fabric:launch(run)
end
