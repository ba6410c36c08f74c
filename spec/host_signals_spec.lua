-- host_signals_spec.lua: SIGINT/SIGTERM/SIGUSR1 stop a running script with a
-- non-zero status (128+N) after the atexit cleanups ran; a script stuck where the
-- interrupt cannot reach it still ends after the grace period; a second signal
-- ends it at once; a signal that lands on a helper thread acts on the Lua thread
-- (pending there while it blocks it, as the Trainer does); held signals
-- (dpl.host.hold_signals) are only recorded until released; a signal that comes
-- after the Lua state was closed (C exit handlers such as MPI_Finalize) acts as
-- without dplhost instead of reaching a handler that uses the freed state.
local h = require 'spec.support.helpers'

local function run_and_signal(body, signals, opts)
  local ready, done = h.tmpname('.ready'), h.tmpname('.done')
  local script = h.write_file(h.tmpname('.lua'), ([[
    local dpl = require 'dpl'
    dpl.atexit(function() local f = io.open(%q, 'w') f:write('cleaned') f:close() end)
    local f = io.open(%q, 'w') f:close()
  ]]):format(done, ready) .. body)
  local kills = {}
  for _, s in ipairs(signals) do kills[#kills + 1] = 'kill -' .. s .. ' $pid; sleep 0.2' end
  local cmd = ([[%s %s & pid=$!
    i=0; while [ ! -e %s ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
    sleep 0.2; %s
    start=$(date +%%s%%N); wait $pid; rc=$?; end=$(date +%%s%%N)
    echo "rc=$rc took_ms=$(( (end - start) / 1000000 ))"]]):format(
    h.q(h.bin), h.q(script), h.q(ready), table.concat(kills, '; '))
  local out, err = h.sh(cmd, opts)
  local rc, took_ms = out:match('rc=(%d+) took_ms=(%d+)')
  local took = tonumber(took_ms) and tonumber(took_ms) / 1000
  local cleaned = h.read_all(done) == 'cleaned'
  os.remove(script); os.remove(ready); os.remove(done)
  return tonumber(rc), took, cleaned, err, out
end

describe('signals', function()
  local interpreted_loop = 'while true do collectgarbage("count") end'

  it('SIGTERM ends a running script with 143 after the cleanups', function()
    local rc, _, cleaned, err = run_and_signal(interpreted_loop, { 'TERM' })
    assert.are.equal(143, rc, err)
    assert.is_true(cleaned)
    assert.matches('dplhost: interrupted %(SIGTERM%)', err)
  end)

  it('SIGINT ends a running script with 130 after the cleanups', function()
    local rc, _, cleaned, err = run_and_signal(interpreted_loop, { 'INT' })
    assert.are.equal(130, rc, err)
    assert.is_true(cleaned)
  end)

  it('a SIGINT that comes while os.execute runs a command is not lost (system() ignored it)', function()
    local out, err, rc = h.dplhost([[-e "os.execute('kill -INT \$PPID; sleep 0.1') print('survived')"]])
    assert.are.equal(130, rc, out .. err)
    assert.is_nil(out:find('survived', 1, true), out)
    assert.matches('dplhost: interrupted', err)
    -- results as LuaJIT's own os.execute
    out, err, rc = h.dplhost([[-e "print(os.execute('exit 3'), os.execute('true'), os.execute())"]])
    assert.are.equal(0, rc, err)
    assert.matches('^768\t0\t1\n', out)
  end)

  it('SIGTERM ends a script sleeping in C', function()
    local rc, took, cleaned, err = run_and_signal('require("dpl").C.dpl_sleep(30)', { 'TERM' })
    assert.are.equal(143, rc, err)
    assert.is_true(cleaned)
    assert.is_true(took < 3, 'took ' .. tostring(took))
  end)

  it('a compiled loop that cannot see the interrupt still ends after the grace period', function()
    local rc, took, _, err = run_and_signal('local x = 0 while true do x = x + 1 end', { 'TERM' },
      { timeout = 30 })
    assert.are.equal(143, rc, err)
    assert.matches('did not stop within 5 s', err)
    assert.is_true(took >= 4 and took < 15, 'took ' .. tostring(took))
  end)

  it('a second signal ends it at once', function()
    local rc, took, _, err = run_and_signal('local x = 0 while true do x = x + 1 end', { 'TERM', 'TERM' })
    assert.are.equal(143, rc, err)
    assert.is_true(took < 3, 'took ' .. tostring(took))
  end)

  it('SIGUSR1 ends a running script with 138 after the cleanups, as SIGTERM', function()
    local rc, _, cleaned, err = run_and_signal(interpreted_loop, { 'USR1' })
    assert.are.equal(138, rc, err)
    assert.is_true(cleaned)
    assert.matches('dplhost: interrupted %(SIGUSR1%)', err)
  end)

  it('SIGUSR1 ends a script sleeping in C', function()
    local rc, took, cleaned, err = run_and_signal('require("dpl").C.dpl_sleep(30)', { 'USR1' })
    assert.are.equal(138, rc, err)
    assert.is_true(cleaned)
    assert.is_true(took < 3, 'took ' .. tostring(took))
  end)
end)

describe('os.execute and SIGINT', function()
  -- libc's system() ignores SIGINT in the caller while the command runs: the
  -- command decides, and one that died of it now stops the script (as in a shell)
  it('a command killed by SIGINT interrupts the script, with the cleanups', function()
    local rc, _, cleaned, err, out = run_and_signal([[
      local st = os.execute('kill -INT $$')
      print('not reached', st)
    ]], {})
    assert.are.equal(130, rc, err)
    assert.is_true(cleaned)
    assert.matches('dplhost: interrupted\n', err)
    assert.is_nil(out:find('not reached', 1, true))
  end)

  -- The first os.execute used to ask the original (system(NULL)) which form it returns,
  -- and os.execute() asked it whether there is a shell: system() sets SIGINT to SIG_IGN,
  -- which discards a pending SIGINT, so a Ctrl-C (or the launcher's) that came at that
  -- moment was lost (the script went on until a SIGKILL, without its cleanups). Here the
  -- SIGINT is made pending (blocked) before that first call, then unblocked after it.
  it('a SIGINT pending at the first os.execute, or at os.execute(), is not discarded', function()
    for _, call in ipairs({ "os.execute('true')", 'os.execute()' }) do
      local rc, _, cleaned, err, out = run_and_signal(([[
        local ffi = require 'ffi'
        pcall(ffi.cdef, [=[
          typedef struct { unsigned long bits[16]; } dpl_spec_sigset;
          int sigemptyset(dpl_spec_sigset *set); int sigaddset(dpl_spec_sigset *set, int sig);
          int sigprocmask(int how, const dpl_spec_sigset *set, dpl_spec_sigset *old); int raise(int sig);
        ]=])
        local set = ffi.new('dpl_spec_sigset')
        ffi.C.sigemptyset(set) ffi.C.sigaddset(set, 2)
        ffi.C.sigprocmask(0, set, nil) -- SIG_BLOCK
        ffi.C.raise(2)
        %s
        ffi.C.sigprocmask(1, set, nil) -- SIG_UNBLOCK: the SIGINT is delivered here
        print('survived')
      ]]):format(call), {})
      assert.are.equal(130, rc, call .. ': ' .. err)
      assert.is_true(cleaned, call)
      assert.is_nil(out:find('survived', 1, true), call)
    end
  end)

  it('a command that fails otherwise returns its status as before', function()
    local out, err, rc = h.dplhost([[-e 'print(os.execute("exit 3"), os.execute("kill -TERM $$"), os.execute())']])
    assert.are.equal(0, rc, err)
    assert.are.equal('768\t15\t1\n', out)
  end)

  it('Ctrl-C to the process group stops a script looping over os.execute', function()
    if not h.has_command('setsid') then return pending('setsid is not installed') end
    local ready, done = h.tmpname('.ready'), h.tmpname('.done')
    local script = h.write_file(h.tmpname('.lua'), ([[
      require('dpl').atexit(function() io.open(%q, 'w'):close() end)
      io.open(%q, 'w'):close()
      while true do os.execute('sleep 0.05') end
    ]]):format(done, ready))
    -- setsid: the host leads its own process group, as a terminal's foreground job
    local out, err = h.sh(([[setsid %s %s & pid=$!
      i=0; while [ ! -e %s ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
      sleep 0.3; kill -INT -$pid
      i=0; while kill -0 $pid 2>/dev/null && [ $i -lt 80 ]; do sleep 0.05; i=$((i+1)); done
      kill -0 $pid 2>/dev/null && { echo "still running"; kill -KILL -$pid; }
      wait $pid; echo "rc=$?"]]):format(h.q(h.bin), h.q(script), h.q(ready)))
    local cleaned = io.open(done) ~= nil
    os.remove(script); os.remove(ready); os.remove(done)
    assert.matches('rc=130', out, err)
    assert.is_nil(out:find('still running', 1, true))
    assert.is_true(cleaned)
  end)
end)

describe('a signal that lands on a helper thread', function()
  for _, sig in ipairs({ 'USR1', 'TERM' }) do
    it(('(SIG%s) stays pending for the Lua thread while it blocks it'):format(sig), function()
      local ready = h.tmpname('.ready')
      local out, err = h.sh(([[%s spec/support/host_signal_threads.lua %s & pid=$!
        i=0; while [ ! -e %s ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done
        sleep 0.2; kill -%s $pid; wait $pid; echo "rc=$?"]]):format(h.q(h.bin), h.q(ready), h.q(ready), sig))
      os.remove(ready)
      local threads = tonumber(out:match('threads (%d+)'))
      assert.is_true(threads and threads > 1, out .. err)
      assert.matches('pending on the Lua thread: ' .. (sig == 'USR1' and 10 or 15), out, err)
      assert.matches('rc=0', out)
    end)
  end

  it('stops a Trainer (SIGUSR1) at a batch boundary with a checkpoint', function()
    local dir = require('spec.support.trainer_helpers').tmpdir()
    local ready = h.tmpname('.ready')
    local out, err = h.sh(([[%s spec/support/host_signal_trainer.lua %s %s & pid=$!
      i=0; while [ ! -e %s0 ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done
      kill -USR1 $pid; wait $pid; echo "rc=$?"]]):format(h.q(h.bin), h.q(dir), h.q(ready), h.q(ready)), { timeout = 60 })
    os.remove(ready .. '0')
    assert.matches('rc=3', out, err)
    assert.matches('rank 0 ok=false err=SignalReceived: received signal 10 %(SIGUSR1%) on a rank: every rank stopped ' ..
      'after global_step %d+; checkpoint saved to DIR/hpc_ckpt_1.ckpt', out)
    assert.is_true(h.read_all(dir .. '/hpc_ckpt_1.ckpt') ~= '')
    os.execute('rm -rf ' .. h.q(dir))
  end)
end)

describe('held signals (dpl.host.hold_signals)', function()
  it('are recorded for pending_signal() without interrupting or cutting a sleep short', function()
    local rc, _, cleaned, err, out = run_and_signal([[
      local host, C = require 'dpl.host', require('dpl').C
      assert(host.hold_signals(true) == false)
      assert(host.pending_signal() == nil)
      local t0 = C.dpl_clock()
      local st = C.dpl_sleep(1.0)
      local slept = C.dpl_clock() - t0
      while select(2, host.pending_signal()) < 2 and C.dpl_clock() - t0 < 10 do C.dpl_sleep(0.02) end
      local first, count, last = host.pending_signal()
      print(('held: first=%s count=%s last=%s received=%d pending=%d sleep=%d slept=%.1f'):format(
        first, count, last, C.dpl_signal_received(), C.dpl_signal_pending(), st, slept))
      host.clear_interrupt()
      print('after clear: ' .. tostring(host.pending_signal()) .. ' ' .. tostring(host.hold_signals(false)))
    ]], { 'USR1', 'TERM' })
    assert.are.equal(0, rc, err)
    assert.is_true(cleaned)
    assert.matches('held: first=10 count=2 last=15 received=0 pending=138 sleep=0 slept=1.0', out)
    assert.matches('after clear: nil true', out)
  end)

  it('a script that ends with one held exits 128+N', function()
    local rc, _, cleaned, err = run_and_signal([[
      local host, C = require 'dpl.host', require('dpl').C
      host.hold_signals(true)
      local t0 = C.dpl_clock()
      while not host.pending_signal() and C.dpl_clock() - t0 < 10 do C.dpl_sleep(0.02) end
    ]], { 'USR1' })
    assert.are.equal(138, rc, err)
    assert.is_true(cleaned)
  end)

  it('releasing with one pending interrupts the script as if it arrived then', function()
    local rc, _, cleaned, err, out = run_and_signal([[
      local host, C = require 'dpl.host', require('dpl').C
      host.hold_signals(true)
      local t0 = C.dpl_clock()
      while not host.pending_signal() and C.dpl_clock() - t0 < 10 do C.dpl_sleep(0.02) end
      print('seen ' .. tostring(host.pending_signal()))
      io.stdout:flush()
      host.hold_signals(false)
      for _ = 1, 1e9 do local _ = {} end
      print('not reached')
    ]], { 'TERM' })
    assert.are.equal(143, rc, err)
    assert.is_true(cleaned)
    assert.matches('seen 15', out)
    assert.is_nil(out:find('not reached', 1, true))
    assert.matches('dplhost: interrupted %(SIGTERM%)', err)
  end)

  it('leave SIGINT as it is: it interrupts', function()
    local rc, _, cleaned, err = run_and_signal([[
      require('dpl.host').hold_signals(true)
      while true do collectgarbage('count') end
    ]], { 'INT' })
    assert.are.equal(130, rc, err)
    assert.is_true(cleaned)
  end)

  it('a forked child starts with none held and none pending', function()
    local rc, _, _, err = run_and_signal([[
      local ffi, host, C = require 'ffi', require 'dpl.host', require('dpl').C
      host.hold_signals(true)
      local t0 = C.dpl_clock()
      while not host.pending_signal() and C.dpl_clock() - t0 < 10 do C.dpl_sleep(0.02) end
      local out = ffi.new('int32_t[1]')
      assert(C.dpl_proc_fork(out) == 0)
      if out[0] == 0 then
        io.stderr:write(('child: held=%s pending=%s\n'):format(tostring(host.hold_signals(false)), tostring(host.pending_signal())))
        C.dpl_proc_exit(0)
      end
      local pid, code = ffi.new('int32_t[1]'), ffi.new('int32_t[1]')
      assert(C.dpl_proc_wait(out[0], 10, pid, code) == 0)
      host.clear_interrupt()
    ]], { 'TERM' })
    assert.are.equal(0, rc, err)
    assert.matches('child: held=false pending=nil', err)
  end)
end)

describe('a signal after the Lua state was closed', function()
  -- libc's exit handlers (glibc's on_exit; atexit is not exported) run after
  -- main() closed the state: one that blocks in pause() stands for MPI_Finalize
  -- waiting for the other ranks
  local function signal_at_exit(sig)
    local ready = h.tmpname('.ready')
    local script = h.write_file(h.tmpname('.lua'), ([[
      local ffi = require 'ffi'
      pcall(ffi.cdef, 'int on_exit(void (*fn)(int, void *), void *arg); int pause(void);')
      assert(ffi.C.on_exit(ffi.cast('void (*)(int, void *)', ffi.C.pause), nil) == 0)
      io.open(%q, 'w'):close()
    ]]):format(ready))
    local out, err = h.sh(([[%s %s & pid=$!
      i=0; while [ ! -e %s ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
      i=0; while ! grep -q '^34 ' /proc/$pid/syscall 2>/dev/null && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
      sleep 0.1; kill -%s $pid; wait $pid; echo "rc=$?"]]):format(h.q(h.bin), h.q(script), h.q(ready), sig))
    os.remove(script); os.remove(ready)
    return tonumber(out:match('rc=(%d+)')), err
  end

  it('SIGTERM: the default action (143), not the freed state', function()
    local rc, err = signal_at_exit('TERM')
    assert.are.equal(143, rc, err)
    assert.is_nil(err:find('Segmentation', 1, true))
  end)

  it('SIGUSR1: the default action (138)', function()
    local rc, err = signal_at_exit('USR1')
    assert.are.equal(138, rc, err)
  end)

  it('under mpirun: a rank in MPI_Finalize that mpirun stops does not crash', function()
    if not h.has_command('mpirun') then return pending('mpirun is not installed') end
    local out, err = h.sh(('ASAN_OPTIONS=detect_leaks=0 mpirun --allow-run-as-root --oversubscribe -np 2 %s %s'):format(
      h.q(h.bin), 'spec/support/host_mpi_finalize.lua'), { timeout = 60 })
    assert.matches('rank 1 done', out, err)
    assert.matches('rank 0 fails after rank 1 finished', err)
    assert.is_nil(err:find('Segmentation', 1, true), err)
    assert.is_nil((out .. err):find('lua_sethook', 1, true), err)
  end)
end)
