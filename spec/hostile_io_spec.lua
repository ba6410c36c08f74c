-- Writes that fail (a full disk, a file size limit, a read-only or missing directory): the
-- loggers and checkpoints raise, naming the file and the reason, and leave the previous file
-- as it was. A full disk is simulated with `ulimit -f` and SIGXFSZ ignored (writes past the
-- limit then fail with EFBIG), in a subprocess.
local h = require 'spec.support.helpers'
local th = require 'spec.support.trainer_helpers'

-- runs a Lua chunk in dplhost with its file size limited to kb KiB
local function run_limited(kb, code)
  local script = h.write_file(h.tmpname('.lua'), code)
  local out, err, rc = h.sh(("trap '' XFSZ; ulimit -f %d; %s %s"):format(kb * 2, h.q(h.bin), h.q(script)))
  os.remove(script)
  return out, err, rc
end

describe('hostile io', function()
  it('CSVLogger on a full disk raises naming metrics.csv (the rows were dropped silently)', function()
    local dir = th.tmpdir()
    local out, err, rc = run_limited(8, ([[
      local dpl = require 'dpl'
      local lg = dpl.loggers.CSVLogger(%q)
      for i = 1, 3000 do lg:log_metrics({ loss = i * 1.2345678 }, i) end
      lg:save()
      print('saved')]]):format(dir))
    assert.equal(1, rc, err)
    assert.not_matches('saved', out)
    assert.matches('RuntimeError: cannot write [^\n]*metrics%.csv: File too large', err)
  end)

  it('write_file failing keeps the previous file whole and leaves no temp file', function()
    local dir = th.tmpdir()
    local path = dir .. '/metrics.csv'
    h.write_file(path, 'old contents\n')
    local _, err, rc = run_limited(8, ([[
      local B = require 'dpl.loggers.base'
      B.write_file(%q, string.rep('x', 64 * 1024))]]):format(path))
    assert.equal(1, rc, err)
    assert.matches('cannot write ' .. path:gsub('%p', '%%%0') .. ': File too large', err)
    assert.equal('old contents\n', h.read_all(path))
    local names = require('dpl.loggers.base').listdir(dir)
    assert.same({ 'metrics.csv' }, names)
  end)

  it('TensorBoardLogger on a full disk raises naming the event file', function()
    local dir = th.tmpdir()
    local out, err, rc = run_limited(8, ([[
      local dpl = require 'dpl'
      local lg = dpl.loggers.TensorBoardLogger(%q)
      for i = 1, 3000 do lg:log_metrics({ loss = i * 1.2345678 }, i) end
      lg:finalize('success')
      print('saved')]]):format(dir))
    assert.equal(1, rc, err)
    assert.not_matches('saved', out)
    assert.matches('RuntimeError: cannot write [^\n]*events%.out%.tfevents[^\n]*: File too large', err)
  end)

  it('a directory that cannot be made is named with the reason', function()
    local dir = th.tmpdir()
    h.write_file(dir .. '/afile', 'x')
    local B = require 'dpl.loggers.base'
    local ok, why = B.mkdir_p(dir .. '/afile/sub/deeper')
    assert.is_nil(ok)
    assert.equal('cannot create directory ' .. dir .. '/afile/sub: Not a directory', why)
    assert.is_true(B.mkdir_p(dir .. '/fine/sub'))
    assert.is_true(B.mkdir_p(dir .. '/fine/sub'))
    local e = select(2, pcall(B.write_file, dir .. '/afile/sub/hparams.yaml', 'a: 1\n'))
    assert.matches('cannot write ' .. (dir .. '/afile/sub/hparams.yaml'):gsub('%p', '%%%0')
      .. ': cannot create directory [^\n]*/afile/sub: Not a directory', tostring(e))
  end)

  it('a checkpoint on a full disk raises and keeps the previous checkpoint', function()
    local dir = th.tmpdir()
    local path = dir .. '/last.ckpt'
    local code = ([[
      local ck = require 'dpl.trainer.checkpoint'
      local n = tonumber(arg[1])
      local sd = {}
      for i = 1, n do sd['w' .. i] = i end
      ck.save({ epoch = 0, global_step = n, state_dict = sd }, %q)
      print('saved')]]):format(path)
    local script = h.write_file(h.tmpname('.lua'), code)
    local _, err, rc = h.sh(('%s %s 3'):format(h.q(h.bin), h.q(script)))
    assert.equal(0, rc, err)
    _, err, rc = h.sh(("trap '' XFSZ; ulimit -f 16; %s %s 20000"):format(h.q(h.bin), h.q(script)))
    os.remove(script)
    assert.equal(1, rc, err)
    assert.matches('checkpoint: cannot write ' .. path:gsub('%p', '%%%0') .. ': File too large', err)
    local ck = require('dpl.trainer.checkpoint').load(path)
    assert.equal(3, ck.global_step)
    assert.same({ 'last.ckpt' }, require('dpl.loggers.base').listdir(dir))
  end)
end)
