-- host_mpi_finalize.lua: under mpirun -np 2, rank 1 ends cleanly and waits in
-- MPI_Finalize (after the host closed its Lua state) while rank 0 fails; mpirun
-- then sends rank 1 SIGTERM, which must not reach a handler using the closed state.
local dist = require('dpl').dist
dist.init_process_group{}
dist.barrier()
if dist.get_rank() == 0 then
  require('dpl').C.dpl_sleep(0.5)
  error('rank 0 fails after rank 1 finished')
end
print('rank 1 done')
