-- explore_t7_findings_spec.lua: what exploratory testing as a Torch7 user porting a script, a
-- PyTorch user at the REPL and a CI script found, each pinned here:
--   * require 'torch' / 'nn' / 'optim' (Torch7's packages) said "module 'torch' not found" and a
--     list of paths; torch.setdefaulttensortype, torch.Timer, ... (as dpl.X) "attempt to call a
--     nil value"; x:sub(2, 3) (Torch7's rows 2..3) silently computed x - 6, and
--     torch.Tensor(x:size()) made the 1-d tensor {2, 3};
--   * m:training() (Torch7's "train mode") got the hint "write obj.training";
--   * load_state_dict(sd, false) (PyTorch's positional strict) and dtype names 'torch.float64'
--     were refused; safetensors.torch's save_file/load_file were missing;
--   * a checkpoint written past `ulimit -f` killed the process (SIGXFSZ, status 153) leaving
--     its .tmp file; Trainer.from_argv started training on --help, said nothing about
--     --max_epoch (a typo), and read --weights_save_path as a number.
local dpl = require 'dpl'
local h = require 'spec.support.helpers'

local errs = h.errs

describe("Torch7 user: require 'torch' and torch.X", function()
  it("require 'torch', 'nn', 'optim', 'cutorch' raise NotImplementedError naming the dplhost way", function()
    errs(function() return require('torch') end, "NotImplementedError: require 'torch'", "require 'dpl'",
      'docs/torch7.md')
    errs(function() return require('nn') end, "require('dpl').nn", 'nn.Conv2d')
    errs(function() return require('optim') end, "require('dpl').optim", 'optim.SGD(model:parameters()')
    errs(function() return require('cutorch') end, 'CUDA is built in')
    -- other names: Lua's own message, unchanged
    local ok, e = pcall(require, 'no_such_module_xyz')
    assert.is_false(ok)
    assert.truthy(tostring(e):find("module 'no_such_module_xyz' not found", 1, true))
  end)

  it('a torch.lua of ones own on package.path still wins, and an uncaught require exits 1 with the message', function()
    local dir = h.tmpname('.d')
    os.execute('mkdir -p ' .. h.q(dir))
    h.write_file(dir .. '/torch.lua', 'return { mine = true }\n')
    local out, err, rc = h.sh(('cd %s && %s -e "print(require(\'torch\').mine)"'):format(h.q(dir), h.q(h.bin)))
    assert.equal(0, rc, err)
    assert.equal('true\n', out)
    os.remove(dir .. '/torch.lua')
    os.remove(dir)
    out, err, rc = h.dplhost([[-e "require 'nn'"]])
    assert.equal(1, rc)
    assert.truthy(err:find("NotImplementedError: require 'nn': Torch7's nn package is not in dplhost", 1, true), err)
  end)

  it('torch.X names dplhost lacks raise NotImplementedError naming torch.X and what to write', function()
    errs(function() dpl.setdefaulttensortype('torch.FloatTensor') end, 'torch.setdefaulttensortype',
      'no global default dtype')
    errs(function() dpl.set_default_dtype('float64') end, 'no global default dtype')
    errs(function() return dpl.Timer() end, 'torch.Timer', 'os.clock()')
    errs(function() return dpl.class('Foo') end, ':extend(')
    errs(function() return dpl.CmdLine() end, 'Trainer.from_argv')
    errs(function() return dpl.typename(dpl.ones(1)) end, 'torch.typename')
    errs(function() return dpl.random() end, 'math.random')
    assert.is_nil(dpl.no_such_name_at_all)
  end)

  it('torch.mv, torch.ger, torch.getnumthreads/setnumthreads, getRNGState are the same as dplhost ops', function()
    local A = dpl.tensor({ { 1., 2 }, { 3, 4 } })
    local v = dpl.tensor({ 1., 1 })
    assert.are.same({ 3, 7 }, dpl.mv(A, v):totable())
    errs(function() return dpl.mv(A, A) end, 'mv: expected a 2-d matrix and a 1-d vector, got 2-d and 2-d')
    assert.are.same({ { 1, 1 }, { 2, 2 } }, dpl.ger(dpl.tensor({ 1., 2 }), v):totable())
    assert.equal(dpl.get_num_threads(), dpl.getnumthreads())
    assert.equal(dpl.set_num_threads, dpl.setnumthreads)
    assert.equal(dpl.get_rng_state, dpl.getRNGState)
  end)

  it('dpl.Tensor(x:size()) makes a tensor of that shape (it made the 1-d data {2, 3})', function()
    local x = dpl.randn(2, 3)
    assert.are.same({ 2, 3 }, dpl.Tensor(x:size()):size())
    assert.equal('int64', dpl.LongTensor(x.shape).dtype)
    assert.are.same({ 2, 3 }, dpl.LongTensor(x.shape):size())
    assert.are.same({ 2 }, dpl.Tensor({ 2, 3 }):size())
    errs(function() return dpl.Tensor(x:size(), 4) end, 'takes a dpl.Size alone')
  end)

  it("x:sub(i1, i2) (Torch7's rows i1..i2) is an error, not x - i1 * i2", function()
    local x = dpl.ones(4, 2)
    errs(function() return x:sub(2, 3) end, 'sub: got two numbers (2, 3)', 'x:narrow(1, i1, i2 - i1 + 1)')
    errs(function() return dpl.sub(x, 2, 3) end, 'sub: got two numbers')
    assert.are.same({ 0, 0 }, x:sub(1)[1]:totable())
    assert.are.same({ -1, -1 }, x:sub(x, 2)[1]:totable())
  end)

  it("m:training() (Torch7's train mode) hints m:train(), in a script and at the prompt", function()
    local _, err, rc = h.dplhost([[-e "require('dpl').nn.Linear(2, 2):training()"]])
    assert.equal(1, rc)
    assert.truthy(err:find("attempt to call method 'training' (a boolean value)", 1, true), err)
    assert.truthy(err:find("Torch7's m:training() is m:train() here", 1, true), err)
    assert.falsy(err:find('write obj.training', 1, true), err)
    local out = h.dplhost('-i', { stdin = "m = require('dpl').nn.Linear(2, 2)\nm:training()\n" })
    assert.truthy(out:find("Torch7's m:training() is m:train() here", 1, true), out)
    -- other properties keep their hint
    _, err = h.dplhost([[-e "local t = {x = 1}; t:x()"]])
    assert.truthy(err:find("'x' is a property (a value), not a method", 1, true), err)
  end)
end)

describe('PyTorch user idioms', function()
  it("load_state_dict(sd, false) is PyTorch's positional strict=False", function()
    local m = dpl.nn.Sequential(dpl.nn.Linear(2, 3), dpl.nn.Linear(3, 1))
    local sd = m:state_dict()
    sd['1.weight'] = nil
    sd.extra = dpl.ones(1)
    local r = m:load_state_dict(sd, false)
    assert.are.same({ '1.weight' }, r.missing_keys)
    assert.are.same({ 'extra' }, r.unexpected_keys)
    errs(function() m:load_state_dict(sd, true) end, 'Missing key(s): 1.weight')
    errs(function() m:load_state_dict(sd, 'no') end, 'expected nil or an options table')
  end)

  it("dtype names with PyTorch's 'torch.' prefix", function()
    assert.equal('int64', dpl.zeros(2, { dtype = 'torch.long' }).dtype)
    assert.equal('float64', dpl.ones(2):to('torch.float64').dtype)
    assert.equal('float16', dpl.ones(2):to('torch.half').dtype)
    assert.equal('float64', dpl.nn.Linear(2, 2):to('torch.float64').weight.dtype)
    errs(function() return dpl.zeros(2, { dtype = 'torch.flaot32' }) end, "unknown dtype 'torch.flaot32'")
  end)

  it("safetensors.torch's save_file(tensors, path) / load_file(path) round trip; swapped orders are named", function()
    local st = dpl.safetensors
    local m = dpl.nn.Linear(3, 2)
    local path = h.tmpname('.safetensors')
    st.save_file(m:state_dict(), path, { note = 'x' })
    local sd = st.load_file(path)
    local m2 = dpl.nn.Linear(3, 2)
    m2:load_state_dict(sd)
    assert.is_true(m2.weight:equal(m.weight))
    local _, meta = st.load(path)
    assert.equal('x', meta.note)
    errs(function() st.save({ a = dpl.ones(1) }, path) end, 'save_file(tensors,')
    errs(function() st.save_file(path, { a = dpl.ones(1) }) end, 'the tensors come first')
    errs(function() st.load_file(3) end, 'load_file: path must be a string, got number')
    os.remove(path)
  end)
end)

describe('CI script user', function()
  it('a checkpoint written past `ulimit -f` is a clear error (status 1), no temp file left', function()
    local dir = h.tmpname('.ck')
    local script = h.write_file(h.tmpname('.lua'), ([[
      local dpl = require 'dpl'
      local t = dpl.randn(4096)
      dpl.save({ w = t }, %q)
      print('saved')]]):format(dir .. '/model.ckpt'))
    os.execute('mkdir -p ' .. h.q(dir))
    -- no `trap '' XFSZ` here: the host itself must not die of SIGXFSZ
    local out, err, rc = h.sh(('ulimit -f 4; exec %s %s'):format(h.q(h.bin), h.q(script)))
    os.remove(script)
    assert.equal(1, rc, err)
    assert.falsy(out:find('saved', 1, true))
    assert.truthy(err:find('File too large', 1, true), err)
    local p = io.popen('ls -A ' .. h.q(dir))
    local listing = p:read('*a')
    p:close()
    assert.equal('', listing)
    os.remove(dir)
    -- a command run by os.execute gets SIGXFSZ's default back
    out = h.sh(('ulimit -f 1; exec %s -e "print(os.execute(\'head -c 5000 /dev/zero > %s\'))"'):format(
      h.q(h.bin), dir .. '.big'))
    os.remove(dir .. '.big')
    assert.equal(tostring((128 + 25) * 256), out:match('^(%d+)'), out)
  end)

  it('Trainer.from_argv: --help prints the flags and exits 0 before any training', function()
    local script = h.write_file(h.tmpname('.lua'), [[
      local dpl = require 'dpl'
      local trainer, rest = dpl.Trainer.from_argv(arg, { max_epochs = 3 })
      print('built', #rest)]])
    local out, err, rc = h.sh(h.q(h.bin) .. ' ' .. h.q(script) .. ' --help')
    assert.equal(0, rc, err)
    assert.falsy(out:find('built', 1, true), out)
    assert.truthy(out:find('Trainer flags', 1, true), out)
    assert.truthy(out:find('--max_epochs N +%(default: 3%)'), out)
    assert.truthy(out:find('--default_root_dir TEXT', 1, true), out)
    out, err, rc = h.sh(h.q(h.bin) .. ' ' .. h.q(script) .. ' -h')
    assert.equal(0, rc, err)
    assert.truthy(out:find('Trainer flags', 1, true), out)
    os.remove(script)
  end)

  it('Trainer.from_argv: {help = false} leaves --help to the script; a misspelt flag is warned about', function()
    local t, rest = dpl.Trainer.from_argv({ '--help', '--max_epochs', '2', '--logger', 'false',
      '--enable_progress_bar', 'false' }, nil, { help = false })
    assert.equal(2, t.max_epochs)
    assert.are.same({ '--help' }, rest)
    local code = [[
      local dpl = require 'dpl'
      local _, rest = dpl.Trainer.from_argv(arg, { logger = false, enable_progress_bar = false })
      print(table.concat(rest, ' '))]]
    local script = h.write_file(h.tmpname('.lua'), code)
    local out, err, rc = h.sh(h.q(h.bin) .. ' ' .. h.q(script) .. ' --max_epoch 2 --my-flag')
    os.remove(script)
    assert.equal(0, rc, err)
    assert.truthy(out:find('--max_epoch 2 --my-flag', 1, true), out)
    assert.truthy(err:find("'--max_epoch' is not a Trainer argument (did you mean '--max_epochs'?)", 1, true), err)
    assert.falsy(err:find("'--my-flag'", 1, true), err)
    assert.has_error(function() dpl.Trainer.from_argv({}, nil, { halp = true }) end)
  end)

  it('Trainer.parse_argv reads --weights_save_path as a path (it wanted a number)', function()
    local a = dpl.Trainer.parse_argv({ '--weights_save_path', '/tmp/w' })
    assert.equal('/tmp/w', a.weights_save_path)
  end)
end)
