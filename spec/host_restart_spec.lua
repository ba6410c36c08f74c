-- host_restart_spec.lua: `dplhost --nproc N --max-restarts K` (torchrun's elastic restart on
-- one node): a rank that fails (exit code, signal) stops the others and all N ranks start
-- again, up to K times, with DPL_RESTART_COUNT / TORCHELASTIC_RESTART_COUNT telling the
-- attempt; a DDP fit resuming from ckpt_path='last' then ends with the weights of a run that
-- never failed, bit for bit. A signal to the launcher (the user, SLURM) restarts nothing.
local h = require 'spec.support.helpers'
local th = require 'spec.support.trainer_helpers'

local function script(body)
  return h.write_file(h.tmpname('.lua'), body)
end

-- fails (rank 1) while DPL_RESTART_COUNT < arg[1]; arg[2] = 'kill': by SIGKILL, else exit 3
local FLAKY = [[
  local r, c = tonumber(os.getenv('RANK')), tonumber(os.getenv('DPL_RESTART_COUNT'))
  print(('rank=%d count=%d te=%s max=%s'):format(r, c, os.getenv('TORCHELASTIC_RESTART_COUNT'),
    os.getenv('TORCHELASTIC_MAX_RESTARTS')))
  io.stdout:flush()
  if r == 1 and c < tonumber(arg[1]) then
    if arg[2] == 'kill' then os.execute('kill -9 $PPID; sleep 5') end -- $PPID: this rank
    os.exit(3)
  end
]]

describe('dplhost --max-restarts', function()
  -- spec/support/trainer_restart_script.lua under `--nproc n`: an unbroken run ('straight'),
  -- then a run with `--max-restarts k` and the failures of `mode`; returns the unbroken run's
  -- weights and the restarted run's stdout and stderr (its exit status checked)
  local function straight_then_restarted(n, k, mode, extra)
    local d1, d2 = th.tmpdir(), th.tmpdir()
    local script = ' spec/support/trainer_restart_script.lua '
    local out, err, rc = h.dplhost(('--nproc %d%sstraight %s %s'):format(n, script, h.q(d1), extra), { timeout = 120 })
    assert.are.equal(0, rc, err)
    local want = out:match('R0 attempt=0 epochs=3 ([^\n]+)')
    assert.truthy(want, out)
    out, err, rc = h.dplhost(('--nproc %d --max-restarts %d%s%s %s %s'):format(n, k, script, mode, h.q(d2), extra),
      { timeout = 120 })
    os.execute('rm -rf ' .. h.q(d1) .. ' ' .. h.q(d2))
    assert.are.equal(0, rc, err)
    return want, out, err
  end

  it('a DDP fit that loses a rank mid-epoch resumes from last.ckpt to the weights of an unbroken run', function()
    local want, out, err = straight_then_restarted(2, 2, 'fail', '')
    assert.matches('dplhost: rank 1 %(pid %d+%) failed with exit code 3; stopped the other ranks\n'
      .. 'dplhost: restarting all 2 ranks %(restart 1 of 2%)', err)
    assert.matches('Restoring states from the checkpoint path at [^\n]*last%.ckpt', out .. err)
    -- the second attempt ran epochs 2 and 3 only, and ended where the unbroken run did
    assert.are.equal(want, out:match('R0 attempt=1 epochs=2 ([^\n]+)'))
    assert.falsy(out:match('attempt=2'))
  end)

  it('... and from a checkpoint written after every step, mid-epoch, too', function()
    local want, out, err = straight_then_restarted(2, 1, 'fail', 'steps')
    assert.matches('restarting all 2 ranks %(restart 1 of 1%)', err)
    assert.are.equal(want, out:match('R0 attempt=1 epochs=2 ([^\n]+)'))
  end)

  it('4 ranks losing a different rank 5 times (exit, SIGKILL) end where an unbroken run does', function()
    local want, out, err = straight_then_restarted(4, 5, 'chaos', 'steps 5')
    for a, r in ipairs({ 1, 0, 3, 2, 1 }) do
      local how = a % 2 == 0 and 'signal 9 %(SIGKILL%)' or 'exit code 3'
      assert.matches(('rank %d %%(pid %%d+%%) failed with %s; stopped the other ranks\n.-'):format(r, how)
        .. ('restarting all 4 ranks %%(restart %d of 5%%)'):format(a), err)
    end
    assert.are.equal(want, out:match('R0 attempt=5 epochs=1 ([^\n]+)'))
  end)

  it('restarts at most K times, then fails with the last failure', function()
    local s = script(FLAKY)
    local out, err, rc = h.dplhost('--nproc 2 --max-restarts 2 ' .. h.q(s) .. ' 5', { timeout = 60 })
    os.remove(s)
    assert.are.equal(3, rc, err)
    for c = 0, 2 do -- (rank 0 may be stopped before it prints)
      assert.matches(('%%[rank 1%%] rank=1 count=%d te=%d max=2'):format(c, c), out)
    end
    assert.falsy(out:match('count=3'))
    local _, fails = err:gsub('rank 1 %(pid %d+%) failed with exit code 3', '')
    assert.are.equal(3, fails, err)
    assert.matches('restart 1 of 2%).*restart 2 of 2%).*dplhost: no restarts left %(%-%-max%-restarts 2%); giving up', err)
  end)

  it('restarts after a rank killed by a signal too', function()
    local s = script(FLAKY)
    local out, err, rc = h.dplhost('--nproc 2 --max_restarts=1 ' .. h.q(s) .. ' 1 kill', { timeout = 60 })
    os.remove(s)
    assert.are.equal(0, rc, err)
    assert.matches('rank 1 %(pid %d+%) failed with signal 9 %(SIGKILL%)', err)
    assert.matches('%[rank 1%] rank=1 count=1 te=1 max=1', out)
  end)

  it('restarts nothing by default, and says the attempt is 0', function()
    local s = script(FLAKY)
    local out, err, rc = h.dplhost('--nproc 2 ' .. h.q(s) .. ' 1', { timeout = 60 })
    os.remove(s)
    assert.are.equal(3, rc, err)
    assert.matches('%[rank 1%] rank=1 count=0 te=0 max=0', out) -- (rank 0 may be stopped before it prints)
    assert.falsy(err:match('restart'), err)
  end)

  it('a signal to the launcher stops the ranks and restarts nothing', function()
    local s = script([[print('ready') io.stdout:flush() while true do collectgarbage('count') end]])
    local outf = h.tmpname('.out')
    local out = h.sh(([[%s --nproc 2 --max-restarts 3 %s > %s 2>&1 & lp=$!
      i=0; while [ "$(grep -c ready %s 2>/dev/null)" != 2 ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
      kill -TERM $lp; wait $lp; echo "rc=$?"]]):format(h.q(h.bin), h.q(s), outf, outf), { timeout = 60 })
    local all = h.read_all(outf)
    os.remove(s); os.remove(outf)
    assert.matches('rc=143', out, all)
    assert.falsy(all:match('restart'), all)
    local _, ready = all:gsub('ready', '')
    assert.are.equal(2, ready, all)
  end)

  it('names a bad value, and refuses several nodes', function()
    for _, a in ipairs({ '--max-restarts -1', '--max-restarts x', '--max_restarts=', '--max-restarts 1e3' }) do
      local _, err, rc = h.dplhost('--nproc 2 ' .. a .. ' x.lua')
      assert.are.equal(2, rc, a)
      assert.matches('%-%-max[%-_]restarts expects an integer from 0 to 1000000', err)
    end
    local _, err, rc = h.dplhost('--nproc 2 --nnodes 2 --node-rank 0 --max-restarts 1 x.lua')
    assert.are.equal(2, rc)
    assert.matches('%-%-max%-restarts with %-%-nnodes > 1 is not implemented', err)
    _, err, rc = h.dplhost('--max-restarts 1 x.lua')
    assert.are.equal(2, rc)
    assert.matches('%-%-max%-restarts needs %-%-nproc N', err)
  end)
end)
