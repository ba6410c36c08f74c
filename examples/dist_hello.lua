-- dist_hello.lua: the process-group API in a few lines.
--   dplhost --nproc 4 examples/dist_hello.lua          (shm backend)
--   mpirun --allow-run-as-root --oversubscribe -np 4 dplhost examples/dist_hello.lua   (mpi)
local ffi = require 'ffi'
local dist = require('dpl').dist

dist.init_process_group{}                      -- rank, world size, backend from the environment
local rank, size = dist.get_rank(), dist.get_world_size()

-- a gradient-like buffer: every rank contributes rank+1, all_reduce('mean') averages in place
local n = 1000
local grad = ffi.new('float[?]', n)
for i = 0, n - 1 do grad[i] = rank + 1 end
dist.all_reduce(grad, 'mean', { count = n, dtype = 'float32' })

-- Lua values travel too: every rank learns every rank's metrics
local metrics = dist.all_gather_object({ rank = rank, loss = 1 / (rank + 1) })

if rank == 0 then
  print(('%d ranks on %s; mean of 1..%d = %g'):format(size, dist.get_backend(), size, grad[0]))
  for _, m in ipairs(metrics) do print(('  rank %d loss %.3f'):format(m.rank, m.loss)) end
end
dist.destroy_process_group()
