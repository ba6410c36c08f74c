-- host_launch_spec.lua: `dplhost --nproc N script`: the rank environment, output
-- prefixed per rank, INFO from rank 0 only, the first failing rank (exit code,
-- error, signal) stopping the others and being reported, the launcher's death
-- taking its ranks along, SIGINT/SIGTERM/SIGUSR1 forwarded to the ranks (whose
-- output and status the launcher still collects), and clear errors for bad
-- launcher options.
local h = require 'spec.support.helpers'

local function script(body)
  return h.write_file(h.tmpname('.lua'), body)
end

local function alive(pid)
  return os.execute('kill -0 ' .. pid .. ' 2>/dev/null') == 0
end

-- alive and not a zombie (an orphan's zombie stays until init reaps it)
local function running(pid)
  local f = io.open('/proc/' .. pid .. '/stat')
  local st = f and f:read('*l')
  if f then f:close() end
  return st ~= nil and st:match('^%d+ %b() (%a)') ~= 'Z'
end

describe('the launcher', function()
  it('starts N ranks with the rank environment and prefixes their output', function()
    local s = script([[
      local keys = {'RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'NODE_RANK',
                    'MASTER_ADDR', 'MASTER_PORT', 'DPL_JOB_ID'}
      local vals = {}
      for i, k in ipairs(keys) do vals[i] = k .. '=' .. tostring(os.getenv(k)) end
      print(table.concat(vals, ' '), 'args=' .. table.concat({...}, ','))
      io.stderr:write('to stderr\n')
    ]])
    local out, err, rc = h.dplhost('--nproc 3 ' .. h.q(s) .. ' a b')
    os.remove(s)
    assert.are.equal(0, rc, err)
    local port, job
    for r = 0, 2 do
      local line = out:match('%[rank ' .. r .. '%] ([^\n]*)')
      assert.truthy(line, out)
      assert.matches(('RANK=%d LOCAL_RANK=%d WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 NODE_RANK=0 MASTER_ADDR=127.0.0.1 '):format(r, r), line)
      assert.matches('args=a,b$', line)
      local p, j = line:match('MASTER_PORT=(%d+) DPL_JOB_ID=([%w_%-]+)')
      assert.truthy(p and j, line)
      port, job = port or p, job or j
      assert.are.equal(port, p)
      assert.are.equal(job, j)
      assert.matches('%[rank ' .. r .. '%] to stderr\n', err)
    end
  end)

  it('shares the cores between the ranks unless the thread count is set', function()
    local s = script([[print('threads ' .. require('dpl').get_num_threads() .. ' ' .. tostring(os.getenv('DPL_NUM_THREADS')))]])
    local cores = tonumber(io.popen('getconf _NPROCESSORS_ONLN'):read('*l'))
    local want = math.max(1, math.floor(cores / 2))
    local out, err, rc = h.sh(('env -u DPL_NUM_THREADS -u OMP_NUM_THREADS %s --nproc 2 %s'):format(h.q(h.bin), h.q(s)))
    assert.are.equal(0, rc, err)
    for r = 0, 1 do assert.matches('%[rank ' .. r .. '%] threads ' .. want .. ' ' .. want, out) end
    out, err, rc = h.sh(('env -u OMP_NUM_THREADS DPL_NUM_THREADS=3 %s --nproc 2 %s'):format(h.q(h.bin), h.q(s)))
    assert.are.equal(0, rc, err)
    for r = 0, 1 do assert.matches('%[rank ' .. r .. '%] threads 3 3', out) end
    out, err, rc = h.sh(('env -u DPL_NUM_THREADS OMP_NUM_THREADS=2 %s --nproc 2 %s'):format(h.q(h.bin), h.q(s)))
    assert.are.equal(0, rc, err)
    for r = 0, 1 do assert.matches('%[rank ' .. r .. '%] threads 2 nil', out) end
    os.remove(s)
  end)

  it('gives two jobs different ports and job ids', function()
    local s = script('print(os.getenv("MASTER_PORT") .. "/" .. os.getenv("DPL_JOB_ID"))')
    local a = h.dplhost('--nproc 1 ' .. h.q(s))
    local b = h.dplhost('--nproc 1 ' .. h.q(s))
    os.remove(s)
    assert.are_not.equal(a, b)
  end)

  it('numbers ranks across nodes', function()
    local s = script('print(os.getenv("RANK"), os.getenv("LOCAL_RANK"), os.getenv("WORLD_SIZE"), os.getenv("NODE_RANK"), os.getenv("MASTER_ADDR"), os.getenv("MASTER_PORT"))')
    local out, err, rc = h.dplhost('--nproc 2 --nnodes 3 --node-rank 2 --master-addr 10.1.2.3 --master-port 29999 ' .. h.q(s))
    os.remove(s)
    assert.are.equal(0, rc, err)
    assert.matches('%[rank 4%] 4\t0\t6\t2\t10.1.2.3\t29999\n', out)
    assert.matches('%[rank 5%] 5\t1\t6\t2\t10.1.2.3\t29999\n', out)
  end)

  it("takes torchrun's spellings of the options (--nproc_per_node, --node_rank, --master_addr, ...)", function()
    local s = script('print(os.getenv("RANK"), os.getenv("WORLD_SIZE"), os.getenv("MASTER_ADDR"), os.getenv("MASTER_PORT"))')
    local out, err, rc = h.dplhost('--nproc_per_node=2 --nnodes 2 --node_rank 1 --master_addr 10.1.2.3 --master_port=29998 '
      .. h.q(s))
    assert.are.equal(0, rc, err)
    assert.matches('%[rank 3%] 3\t4\t10.1.2.3\t29998\n', out)
    out, err, rc = h.dplhost('--nproc-per-node 2 ' .. h.q(s))
    assert.are.equal(0, rc, err)
    assert.matches('%[rank 1%] 1\t2\t', out)
    out, err, rc = h.dplhost('--nproc_per_node x ' .. h.q(s))
    os.remove(s)
    assert.are.equal(2, rc)
    assert.matches("--nproc_per_node expects an integer from 1 to 4096, got 'x'", err, 1, true)
  end)

  it('passes host options such as -e on to every rank', function()
    local s = script('print(x)')
    local out, err, rc = h.dplhost('--nproc 2 -e "x = 5" ' .. h.q(s))
    os.remove(s)
    assert.are.equal(0, rc, err)
    assert.matches('%[rank 0%] 5\n', out)
    assert.matches('%[rank 1%] 5\n', out)
  end)

  it('forwards a line of any length as one line with one prefix, stdout and stderr', function()
    local s = script([[
      print(string.rep('x', 5000))
      io.stderr:write(string.rep('y', 3000000), '\n')
      io.write(string.rep('z', 70000)) -- no newline at the end
    ]])
    local out, err, rc = h.dplhost('--nproc 1 ' .. h.q(s))
    os.remove(s)
    assert.are.equal(0, rc, err)
    assert.are.equal('[rank 0] ' .. string.rep('x', 5000) .. '\n' .. '[rank 0] ' .. string.rep('z', 70000) .. '\n', out)
    assert.are.equal('[rank 0] ' .. string.rep('y', 3000000) .. '\n', err)
  end)

  it('forwards bytes, NULs included', function()
    local s = script([[io.write('a\0b\n') io.stderr:write('c\0\0d\n')]])
    local out, err, rc = h.dplhost('--nproc 1 ' .. h.q(s))
    os.remove(s)
    assert.are.equal(0, rc, err)
    assert.are.equal('[rank 0] a\0b\n', out)
    assert.are.equal('[rank 0] c\0\0d\n', err)
  end)

  it('stops the ranks and exits 141 when its stdout is closed (| head)', function()
    local s = script([[for i = 1, 200000 do print(os.getenv('RANK'), i) end]])
    local out, err = h.sh(('{ %s --nproc 2 %s; echo "rc=$?" >&2; } | head -2'):format(h.q(h.bin), h.q(s)),
      { timeout = 60 })
    os.remove(s)
    assert.are.equal(2, select(2, out:gsub('\n', '')), out)
    assert.matches('rc=141', err)
    assert.matches("dplhost: the launcher's stdout was closed %(broken pipe%); stopping the ranks", err)
  end)

  it('prints its version once with -v and runs the script', function()
    local s = script('print("ran")')
    local out, err, rc = h.dplhost('--nproc 2 -v ' .. h.q(s))
    os.remove(s)
    assert.are.equal(0, rc, err)
    assert.matches('^dplhost %d+%.%d+%.%d+ [^\n]*\n', out)
    assert.are.equal(1, select(2, out:gsub('dplhost %d', '')), out)
    assert.matches('%[rank 0%] ran\n', out)
    assert.matches('%[rank 1%] ran\n', out)
  end)

  it('prints INFO from rank 0 only unless asked', function()
    local s = script('require("dpl.log").info("hello from %s", os.getenv("RANK"))')
    local out, err, rc = h.dplhost('--nproc 2 ' .. h.q(s))
    assert.are.equal(0, rc, err)
    assert.matches('%[rank 0%] INFO: hello from 0', out)
    assert.falsy(out:find('[rank 1]', 1, true))
    out, err, rc = h.dplhost('--nproc 2 --log-all-ranks ' .. h.q(s))
    os.remove(s)
    assert.are.equal(0, rc, err)
    assert.matches('%[rank 1%] INFO: hello from 1', out)
  end)

  -- the lines of stderr that come from rank r (its own prefix, or a collapsed one naming it)
  local function lines_of_rank(err, r)
    local l = {}
    for line in err:gmatch('[^\n]+') do
      local who, rest = line:match('^%[ranks? ([%d,%-]+)%] (.*)$')
      if who then
        for part in who:gmatch('[^,]+') do
          local a, b = part:match('^(%d+)%-(%d+)$')
          a, b = tonumber(a or part), tonumber(b or part)
          if r >= a and r <= b then l[#l + 1] = rest end
        end
      end
    end
    return l
  end

  it('prints a warning that several ranks send once, naming them; a rank\'s own lines keep their order', function()
    local s = script([[
      local log, r = require('dpl.log'), tonumber(os.getenv('RANK'))
      log.warn('same on all ranks')
      if r ~= 2 then log.warn('not on rank 2') end
      if r == 1 then log.warn('only rank 1') end
      log.warn('rank %d differs', r)
      io.stderr:write('plain line from ', r, '\n')
      log.warn('after plain')
      io.stderr:write('last line from ', r, '\n')
    ]])
    -- (a long hold: the ranks start at different times on a loaded machine)
    local out, err, rc = h.sh('DPL_LAUNCH_WARN_HOLD=20 ' .. h.q(h.bin) .. ' --nproc 4 ' .. h.q(s), { timeout = 60 })
    assert.are.equal(0, rc, err)
    local function count(p) local _, k = err:gsub(p, '') return k end
    assert.are.equal(1, count('WARNING: same on all ranks'), err)
    assert.matches('%[ranks 0%-3%] WARNING: same on all ranks\n', err)
    assert.matches('%[ranks 0%-1,3%] WARNING: not on rank 2\n', err)
    assert.matches('%[rank 1%] WARNING: only rank 1\n', err)
    assert.matches('%[ranks 0%-3%] WARNING: after plain\n', err)
    for r = 0, 3 do
      local want = { 'WARNING: same on all ranks' }
      if r ~= 2 then want[#want + 1] = 'WARNING: not on rank 2' end
      if r == 1 then want[#want + 1] = 'WARNING: only rank 1' end
      want[#want + 1] = ('WARNING: rank %d differs'):format(r)
      want[#want + 1] = 'plain line from ' .. r
      want[#want + 1] = 'WARNING: after plain'
      want[#want + 1] = 'last line from ' .. r
      assert.are.same(want, lines_of_rank(err, r))
    end
    -- DPL_LAUNCH_WARN_HOLD=0: every rank's line as it comes
    out, err, rc = h.sh('DPL_LAUNCH_WARN_HOLD=0 ' .. h.q(h.bin) .. ' --nproc 2 ' .. h.q(s), { timeout = 60 })
    os.remove(s)
    assert.are.equal(0, rc, err)
    assert.matches('%[rank 0%] WARNING: same on all ranks\n', err)
    assert.matches('%[rank 1%] WARNING: same on all ranks\n', err)
  end)

  it('a held warning goes out after its hold, before a failure report that shows it', function()
    local s = script([[
      require('dpl.log').warn('rank %s warns', os.getenv('RANK'))
      if os.getenv('RANK') == '1' then require('dpl').C.dpl_sleep(0.3) error('then it broke') end
      require('dpl').C.dpl_sleep(30)
    ]])
    local t0 = require('dpl').C.dpl_clock()
    local _, err, rc = h.sh('DPL_LAUNCH_WARN_HOLD=0.1 ' .. h.q(h.bin) .. ' --nproc 2 ' .. h.q(s), { timeout = 60 })
    os.remove(s)
    assert.are.equal(1, rc, err)
    assert.is_true(require('dpl').C.dpl_clock() - t0 < 20)
    assert.matches('%[rank 1%] WARNING: rank 1 warns\n', err)
    assert.matches("last lines of rank 1's stderr:\n  | WARNING: rank 1 warns\n  | dplhost: [^\n]*then it broke", err)
  end)

  local function failing_job(failure)
    local pids = h.tmpname('.pids')
    local s = script(([[
      local f = io.open(%q, 'a') f:write(io.open('/proc/self/stat'):read('*l'):match('^%%d+'), '\n') f:close()
      if os.getenv('RANK') == '1' then
        require('dpl').C.dpl_sleep(0.3)
        io.stderr:write('rank 1 is about to fail\n')
        %s
      end
      while true do collectgarbage('count') end
    ]]):format(pids, failure))
    local t0 = require('dpl').C.dpl_clock()
    local out, err, rc = h.dplhost('--nproc 3 ' .. h.q(s), { timeout = 40 })
    local took = require('dpl').C.dpl_clock() - t0
    local left = {}
    for pid in h.read_all(pids):gmatch('%d+') do
      if alive(pid) then left[#left + 1] = pid end
    end
    os.remove(s); os.remove(pids)
    return out, err, rc, took, left
  end

  it('stops every rank when one exits non-zero, and reports it', function()
    local _, err, rc, took, left = failing_job('os.exit(3)')
    assert.are.equal(3, rc, err)
    assert.matches('dplhost: rank 1 %(pid %d+%) failed with exit code 3; stopped the other ranks', err)
    assert.matches("last lines of rank 1's stderr:\n  | rank 1 is about to fail", err)
    assert.is_true(took < 10, 'took ' .. took)
    assert.are.same({}, left)
  end)

  it('reports a rank that raised, with its error', function()
    local _, err, rc, _, left = failing_job('error("rank one broke")')
    assert.are.equal(1, rc)
    assert.matches('rank 1 %(pid %d+%) failed with exit code 1', err)
    assert.matches('  | dplhost: .*rank one broke', err)
    assert.are.same({}, left)
  end)

  it('names the error of a rank whose traceback is longer than the tail it shows', function()
    local _, err, rc, _, left = failing_job([[
      local function deep(n) if n == 0 then error("deep down it broke") end return (deep(n - 1)) end
      deep(20)]])
    assert.are.equal(1, rc)
    assert.matches("dplhost: rank 1 %(pid %d+%) failed with exit code 1; stopped the other ranks\n"
      .. "dplhost: rank 1's error: [^\n]*deep down it broke\ndplhost: last lines of rank 1's stderr:", err)
    assert.are.same({}, left)
  end)

  it('the ranks it stops after a failure say so in one line each, no traceback; the failure stands out', function()
    -- (each survivor printed `dplhost: interrupted (SIGTERM)` and a traceback, which hid the error)
    local _, err, rc, _, left = failing_job('error("rank one broke")')
    assert.are.equal(1, rc)
    for _, r in ipairs({ 0, 2 }) do
      local lines = {}
      for l in err:gmatch('%[rank ' .. r .. '%] ([^\n]*)') do lines[#lines + 1] = l end
      assert.are.same({ 'dplhost: stopped: rank 1 failed' }, lines)
    end
    assert.is_nil(err:find('interrupted', 1, true), err)
    assert.matches('%[rank 1%] dplhost: [^\n]*rank one broke', err)
    assert.matches('dplhost: rank 1 %(pid %d+%) failed with exit code 1; stopped the other ranks\n', err)
    assert.matches('  | dplhost: [^\n]*rank one broke', err)
    assert.are.same({}, left)
  end)

  it('reports a rank killed by a signal', function()
    local _, err, rc, took, left = failing_job('os.execute("kill -9 " .. io.open("/proc/self/stat"):read("*l"):match("^%d+"))')
    assert.are.equal(137, rc, err)
    assert.matches('rank 1 %(pid %d+%) failed with signal 9 %(SIGKILL%)', err)
    assert.is_true(took < 10, 'took ' .. took)
    assert.are.same({}, left)
  end)

  it('takes its ranks along when the launcher is killed', function()
    local pids = h.tmpname('.pids')
    local s = script(([[
      local f = io.open(%q, 'a') f:write(io.open('/proc/self/stat'):read('*l'):match('^%%d+'), '\n') f:close()
      while true do collectgarbage('count') end
    ]]):format(pids))
    h.sh(([[%s --nproc 2 %s & lp=$!
      i=0; while [ "$(wc -l < %s 2>/dev/null || echo 0)" -lt 2 ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
      kill -9 $lp; sleep 1]]):format(h.q(h.bin), h.q(s), h.q(pids)))
    local ids = {}
    for pid in h.read_all(pids):gmatch('%d+') do ids[#ids + 1] = pid end
    assert.are.equal(2, #ids)
    local deadline = require('dpl').C.dpl_clock() + 8
    local left
    repeat
      left = {}
      for _, pid in ipairs(ids) do if alive(pid) then left[#left + 1] = pid end end
      if #left > 0 then require('dpl').C.dpl_sleep(0.1) end
    until #left == 0 or require('dpl').C.dpl_clock() > deadline
    os.remove(s); os.remove(pids)
    assert.are.same({}, left)
  end)

  it('forwards SIGTERM to its ranks, which run their cleanups', function()
    local marks = h.tmpname('.marks')
    local s = script(([[
      require('dpl').atexit(function() local f = io.open(%q, 'a') f:write('clean ', os.getenv('RANK'), '\n') f:close() end)
      print('ready') io.stdout:flush()
      while true do collectgarbage('count') end
    ]]):format(marks))
    local out, err = h.sh(([[%s --nproc 2 %s > %s.out 2>&1 & lp=$!
      i=0; while [ "$(grep -c ready %s.out 2>/dev/null)" != 2 ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
      kill -TERM $lp; wait $lp; echo "rc=$?"]]):format(h.q(h.bin), h.q(s), h.q(marks), h.q(marks)))
    local m = h.read_all(marks)
    os.remove(s); os.remove(marks); os.remove(marks .. '.out')
    assert.matches('rc=143', out, err)
    assert.matches('clean 0', m)
    assert.matches('clean 1', m)
  end)

  -- runs `dplhost --nproc 2 script args`, waits for `ready` lines (or files), sends
  -- the signals to the launcher; returns its rc, stdout, stderr
  local function signal_launcher(s, args, signals, wait_for)
    local outf = h.tmpname('.out')
    local kills = {}
    for _, sig in ipairs(signals) do kills[#kills + 1] = 'kill -' .. sig .. ' $lp; sleep 0.3' end
    local out, err = h.sh(([[%s --nproc 2 %s %s > %s.1 2> %s.2 & lp=$!
      i=0; while ! { %s; } && [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done
      %s; wait $lp; echo "rc=$?"; cat %s.1; cat %s.2 >&2]]):format(h.q(h.bin), h.q(s), args or '', outf, outf,
      wait_for or ('[ "$(grep -c ready ' .. outf .. '.1 2>/dev/null)" = 2 ]'), table.concat(kills, '; '), outf, outf),
      { timeout = 60 })
    os.remove(outf .. '.1'); os.remove(outf .. '.2')
    return tonumber(out:match('^rc=(%d+)')), out, err
  end

  it('forwards SIGUSR1 to its ranks, keeps their output and exits 138 after them', function()
    local marks = h.tmpname('.marks')
    local s = script(([[
      require('dpl').atexit(function() local f = io.open(%q, 'a') f:write('clean ', os.getenv('RANK'), '\n') f:close() end)
      print('ready') io.stdout:flush()
      while true do collectgarbage('count') end
    ]]):format(marks))
    local rc, out, err = signal_launcher(s, nil, { 'USR1' })
    local m = h.read_all(marks)
    os.remove(s); os.remove(marks)
    assert.are.equal(138, rc, out .. err)
    assert.matches('%[rank 0%] dplhost: interrupted %(SIGUSR1%)', err)
    assert.matches('%[rank 1%] dplhost: interrupted %(SIGUSR1%)', err)
    assert.is_nil(err:find('failed with', 1, true), err)
    assert.matches('clean 0', m)
    assert.matches('clean 1', m)
  end)

  it('forwards each of SIGUSR1 and SIGTERM once; its status is the first one\'s', function()
    local s = script([[
      local host, C = require 'dpl.host', require('dpl').C
      host.hold_signals(true)
      print('ready') io.stdout:flush()
      local t0 = C.dpl_clock()
      while select(2, host.pending_signal()) < 2 and C.dpl_clock() - t0 < 20 do C.dpl_sleep(0.02) end
      local first, count, last = host.pending_signal()
      print(('got first=%s count=%s last=%s'):format(first, count, last))
      host.clear_interrupt()
    ]])
    local rc, out, err = signal_launcher(s, nil, { 'USR1', 'TERM' })
    os.remove(s)
    assert.are.equal(138, rc, out .. err)
    assert.matches('%[rank 0%] got first=10 count=2 last=15', out)
    assert.matches('%[rank 1%] got first=10 count=2 last=15', out)
  end)

  it('SIGINT reaches ranks looping over os.execute: they stop with their cleanups, at once', function()
    local marks = h.tmpname('.marks')
    local s = script(([[
      require('dpl').atexit(function() local f = io.open(%q, 'a') f:write('clean ', os.getenv('RANK'), '\n') f:close() end)
      print('ready') io.stdout:flush()
      while true do os.execute('sleep 0.05') end
    ]]):format(marks))
    local rc, out, err = signal_launcher(s, nil, { 'INT' })
    local m = h.read_all(marks)
    os.remove(s); os.remove(marks)
    assert.are.equal(130, rc, out .. err)
    assert.matches('clean 0', m)
    assert.matches('clean 1', m)
    assert.matches('%[rank 0%] dplhost: interrupted\n', err)
    assert.is_nil(err:find('SIGKILL', 1, true), err) -- not stopped by the grace period's SIGKILL
  end)

  it('signals what the ranks started too (their process groups)', function()
    local pids = h.tmpname('.pids')
    local s = script(([[
      os.execute('sh -c "echo \\$\\$ >> %s; exec sleep 60" & wait')
    ]]):format(pids))
    local rc, out, err = signal_launcher(s, nil, { 'TERM' },
      ('[ "$(wc -l < %s 2>/dev/null || echo 0)" -ge 2 ]'):format(h.q(pids)))
    local left = {}
    for pid in h.read_all(pids):gmatch('%d+') do if running(pid) then left[#left + 1] = pid end end
    os.remove(s); os.remove(pids)
    assert.are.equal(143, rc, out .. err)
    assert.are.same({}, left)
  end)

  it('says which ranks it killed after the grace period', function()
    local s = script([[
      require('dpl.host').hold_signals(true) -- SIGTERM is only recorded: the rank goes on
      print('ready') io.stdout:flush()
      while true do require('dpl').C.dpl_sleep(0.05) end
    ]])
    local rc, out, err = signal_launcher(s, nil, { 'TERM' })
    os.remove(s)
    assert.are.equal(143, rc, out .. err)
    assert.matches('dplhost: rank 0 %(pid %d+%) did not stop within 5 s; killing it %(SIGKILL%)', err)
    assert.matches('dplhost: rank 1 %(pid %d+%) did not stop within 5 s; killing it %(SIGKILL%)', err)
  end)

  it('a Trainer stopped after another rank failed: one line, no checkpoint; SIGTERM from outside still checkpoints', function()
    local dir = require('spec.support.trainer_helpers').tmpdir()
    local s = script(([[
      local dpl = require 'dpl'
      local th = require 'spec.support.trainer_helpers'
      local Model = dpl.LightningModule:extend('FailOnOne')
      function Model:training_step(batch, i)
        if self.global_rank == 1 and i == 3 then error('rank 1 broke in training_step') end
        dpl.C.dpl_sleep(0.01)
        return th.loss(1)
      end
      function Model:configure_optimizers() return th.Optimizer() end
      local t = dpl.Trainer{ strategy = 'ddp', max_epochs = 1, enable_progress_bar = false, enable_model_summary = false,
        logger = false, default_root_dir = %q }
      t:fit(Model(), th.loader(200))
    ]]):format(dir))
    local _, err, rc = h.dplhost('--nproc 2 ' .. h.q(s), { timeout = 60 })
    os.remove(s)
    assert.are.equal(1, rc, err)
    local lines = {}
    for l in err:gmatch('%[rank 0%] ([^\n]*)') do lines[#lines + 1] = l end
    assert.are.same({ 'dplhost: stopped: rank 1 failed' }, lines)
    assert.matches("dplhost: rank 1 %(pid %d+%) failed with exit code 1; stopped the other ranks\n"
      .. "dplhost: rank 1's error: [^\n]*rank 1 broke in training_step\n", err)
    assert.is_nil(io.open(dir .. '/hpc_ckpt_1.ckpt'))
    -- SIGTERM sent to the launcher (the user, SLURM) is forwarded and stops the Trainer with
    -- its checkpoint, as before
    local ready = h.tmpname('.ready')
    local rc2, out2, err2 = signal_launcher('spec/support/host_signal_trainer.lua', h.q(dir) .. ' ' .. h.q(ready),
      { 'TERM' }, ('[ -e %s0 ] && [ -e %s1 ]'):format(h.q(ready), h.q(ready)))
    os.remove(ready .. '0'); os.remove(ready .. '1')
    assert.are.equal(143, rc2, out2 .. err2)
    assert.matches('%[rank 0%] rank 0 ok=false err=SignalReceived: received signal 15 %(SIGTERM%) on a rank: every rank'
      .. ' stopped after global_step %d+; checkpoint saved to DIR/hpc_ckpt_1.ckpt', out2)
    assert.is_nil(err2:find('stopped: rank', 1, true), err2)
    os.execute('rm -rf ' .. h.q(dir))
  end)

  it('SIGUSR1 stops a Trainer on every rank at the same batch boundary, with a checkpoint', function()
    local dir = require('spec.support.trainer_helpers').tmpdir()
    local ready = h.tmpname('.ready')
    local rc, out, err = signal_launcher('spec/support/host_signal_trainer.lua', h.q(dir) .. ' ' .. h.q(ready), { 'USR1' },
      ('[ -e %s0 ] && [ -e %s1 ]'):format(h.q(ready), h.q(ready)))
    os.remove(ready .. '0'); os.remove(ready .. '1')
    assert.are.equal(138, rc, out .. err)
    local steps = {}
    for r = 0, 1 do
      steps[r] = out:match('%[rank ' .. r .. '%] rank ' .. r .. ' ok=false err=SignalReceived: received signal 10 %(SIGUSR1%) ' ..
        'on a rank: every rank stopped after global_step (%d+); checkpoint saved to DIR/hpc_ckpt_1.ckpt')
      assert.truthy(steps[r], out .. err)
    end
    assert.are.equal(steps[0], steps[1])
    assert.is_true(h.read_all(dir .. '/hpc_ckpt_1.ckpt') ~= '')
    os.execute('rm -rf ' .. h.q(dir))
  end)
end)

describe('launcher bad input', function()
  it('names the bad value', function()
    local _, err, rc = h.dplhost('--nproc abc x.lua')
    assert.are.equal(2, rc)
    assert.matches("^dplhost: %-%-nproc expects an integer from 1 to 4096, got 'abc'", err)
    _, err, rc = h.dplhost('--nproc 2 --master-port 70000 x.lua')
    assert.are.equal(2, rc)
    assert.matches("%-%-master%-port expects an integer from 1 to 65535, got '70000'", err)
    _, err, rc = h.dplhost('--nproc 2')
    assert.are.equal(2, rc)
    assert.matches('%-%-nproc needs a script to run', err)
    _, err, rc = h.dplhost('--nproc 2 --nnodes 2 --node-rank 2 x.lua')
    assert.are.equal(2, rc)
    assert.matches('%-%-node%-rank must be below %-%-nnodes', err)
  end)

  it('says what is missing or wrong about a launcher option', function()
    local cases = {
      { '--nproc', "dplhost: option '--nproc' needs an argument" },
      { '--nproc 2 --master-addr', "dplhost: option '--master-addr' needs an argument" },
      { '--nproc 2 --master-addr= x.lua', "dplhost: --master-addr expects a host name or address, got ''" },
      { '--log-all-ranks x.lua', 'dplhost: --log-all-ranks needs --nproc N (the launcher)' },
      { '--master-port=5 x.lua', 'dplhost: --master-port needs --nproc N (the launcher)' },
      { '--nproc 2 --devices', 'dplhost: --devices takes no other arguments' },
      { '--devices extra', 'dplhost: --devices takes no other arguments' },
    }
    for _, c in ipairs(cases) do
      local _, err, rc = h.dplhost(c[1])
      assert.are.equal(2, rc, c[1])
      assert.are.equal(c[2] .. "\n(try 'dplhost --help')\n", err, c[1])
    end
  end)

  it('refuses a script from stdin: the ranks read /dev/null', function()
    local out, err, rc = h.dplhost('--nproc 2 -', { stdin = 'print("from stdin")' })
    assert.are.equal(2, rc)
    assert.are.equal('', out)
    assert.matches("^dplhost: %-%-nproc cannot run a script from stdin %('%-'%)", err)
  end)

  it('reports a missing script once per rank and fails', function()
    local _, err, rc = h.dplhost('--nproc 2 /nonexistent.lua')
    assert.are.equal(1, rc)
    assert.matches('cannot open /nonexistent.lua', err)
    assert.matches('dplhost: rank %d %(pid %d+%) failed with exit code 1', err)
  end)
end)
