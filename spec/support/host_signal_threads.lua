-- host_signal_threads.lua: the Lua thread blocks SIGUSR1/SIGTERM (as the Trainer
-- does while fitting) while tensor worker threads run; a signal sent to the
-- process then lands on a worker, and must end up pending for the Lua thread.
-- arg[1]: a file created once the mask is set. Prints the signal it consumed.
local ffi = require 'ffi'
local dpl = require 'dpl'
pcall(ffi.cdef, [[
typedef struct { unsigned long val[16]; } dpl_spec_sigset_t;
struct dpl_spec_timespec { long tv_sec; long tv_nsec; };
int sigemptyset(dpl_spec_sigset_t *set);
int sigaddset(dpl_spec_sigset_t *set, int signum);
int sigismember(const dpl_spec_sigset_t *set, int signum);
int pthread_sigmask(int how, const dpl_spec_sigset_t *set, dpl_spec_sigset_t *oldset);
int sigpending(dpl_spec_sigset_t *set);
int sigtimedwait(const dpl_spec_sigset_t *set, void *info, const struct dpl_spec_timespec *timeout);
]])
dpl.set_num_threads(4)
local x = dpl.randn(1024, 1024)
for _ = 1, 4 do x = x + 1 end -- starts the worker threads
local threads = 0
for l in io.lines('/proc/self/status') do threads = tonumber(l:match('^Threads:%s+(%d+)')) or threads end
print('threads ' .. threads)
local set, pend = ffi.new('dpl_spec_sigset_t'), ffi.new('dpl_spec_sigset_t')
ffi.C.sigemptyset(set)
ffi.C.sigaddset(set, 10)
ffi.C.sigaddset(set, 15)
assert(ffi.C.pthread_sigmask(0, set, nil) == 0) -- SIG_BLOCK, this thread only
io.open(arg[1], 'w'):close()
local t0 = dpl.C.dpl_clock()
while dpl.C.dpl_clock() - t0 < 15 do
  ffi.C.sigpending(pend)
  for _, sig in ipairs({ 10, 15 }) do
    if ffi.C.sigismember(pend, sig) == 1 then
      local one = ffi.new('dpl_spec_sigset_t')
      ffi.C.sigemptyset(one)
      ffi.C.sigaddset(one, sig)
      -- (seen pending process-wide, it may still be on its way: delivered to a worker whose
      -- handler passes it on to this thread; wait for it up to 2 s rather than not at all)
      local got = ffi.C.sigtimedwait(one, nil, ffi.new('struct dpl_spec_timespec', { 2, 0 }))
      print('pending on the Lua thread: ' .. got)
      os.exit(0, true) -- close the state: its tensors are freed (clean under LeakSanitizer)
    end
  end
  x = x + 1 -- keep the workers busy
end
print('no signal seen')
os.exit(1, true)
