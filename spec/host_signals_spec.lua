-- host_signals_spec.lua: SIGINT/SIGTERM stop a running script with a non-zero
-- status (128+N) after the atexit cleanups ran; a script stuck where the
-- interrupt cannot reach it still ends after the grace period; a second signal
-- ends it at once; a signal that comes after the Lua state was closed (C exit
-- handlers such as MPI_Finalize) acts as without dplhost instead of reaching a
-- handler that uses the freed state.
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
  return tonumber(rc), took, cleaned, err
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
