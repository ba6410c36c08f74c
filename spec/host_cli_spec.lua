-- host_cli_spec.lua: the dplhost command line, run as a subprocess: scripts and
-- their arguments, -e/-l/-/-i, --version/--help/--devices, exit codes, and one
-- clear line for each kind of bad input.
local h = require 'spec.support.helpers'

describe('dplhost command line', function()
  it('runs a script with arg set as luajit sets it', function()
    local s = h.write_file(h.tmpname('.lua'),
      "print(arg[0], arg[1], arg[2], arg[-1] ~= nil, select('#', ...), ...)")
    local out, err, rc = h.dplhost(h.q(s) .. ' a "b c"')
    assert.are.equal(0, rc, err)
    assert.are.equal(s .. '\ta\tb c\ttrue\t2\ta\tb c\n', out)
    os.remove(s)
  end)

  it('sets arg as luajit does without a script: arg[0] nil, the command line below it', function()
    local out, err, rc = h.dplhost([[-e 'print(arg[0], arg[-1], arg[-2], arg[-3] == ]] .. h.q(h.bin):gsub("'", '"') ..
      [[, #arg)']])
    assert.are.equal(0, rc, err)
    assert.are.equal('nil\tprint(arg[0], arg[-1], arg[-2], arg[-3] == "' .. h.bin .. '", #arg)\t-e\ttrue\t0\n', out)
    -- a script read from stdin because none is named
    out, err, rc = h.dplhost('', { stdin = 'print(arg[0], arg[-1] == ' .. ('%q'):format(h.bin) .. ', arg[-2])' })
    assert.are.equal(0, rc, err)
    assert.are.equal('nil\ttrue\tnil\n', out)
  end)

  it('matches luajit\'s arg table where luajit is installed', function()
    if not h.has_command('luajit') then return pending('luajit is not installed') end
    local code = [[local t = {} for i = -4, #arg do t[#t + 1] = i .. '=' .. tostring(arg[i]) end print(table.concat(t, ' '))]]
    local s = h.write_file(h.tmpname('.lua'), code)
    for _, args in ipairs({ "-e " .. h.q(code), "-e 'x = 1' " .. h.q(s) .. ' a b', "-e 'x = 1' -- " .. h.q(s) .. ' a',
                            '- p q' }) do
      local want = h.sh('luajit ' .. args, { stdin = code })
      local got = h.dplhost(args, { stdin = code })
      assert.are.equal(want:gsub('luajit', 'BIN'), (got:gsub(h.bin:gsub('%p', '%%%0'), 'BIN')), args)
    end
    os.remove(s)
  end)

  it('runs -e chunks and -l libraries in order', function()
    local out, err, rc = h.dplhost([[-e 'x = 40' -e 'print(x + 2)']])
    assert.are.equal(0, rc, err)
    assert.are.equal('42\n', out)
    out, err, rc = h.dplhost([[-l dpl -e 'print(type(dpl), dpl.version)']])
    assert.are.equal(0, rc, err)
    assert.matches('^table\t%d+%.%d+%.%d+\n$', out)
  end)

  it('names a missing -l module without a traceback of C addresses', function()
    local _, err, rc = h.dplhost("-l nosuchmod_xyz -e 'print(1)'")
    assert.are.equal(1, rc)
    assert.matches("^dplhost: module 'nosuchmod_xyz' not found:", err)
    assert.is_nil(err:find('0x', 1, true), err)
    assert.is_nil(err:find('stack traceback', 1, true), err)
  end)

  it('takes -l global=module (Lua 5.4\'s form), so a dotted module gets a usable name', function()
    local out, err, rc = h.dplhost("-l sp=dpl.special -e 'print(type(sp), type(sp.erf))'")
    assert.are.equal(0, rc, err)
    assert.are.equal('table\tfunction\n', out)
    out, err, rc = h.dplhost("-lsp=dpl.special -e 'print(type(sp))'")
    assert.are.equal(0, rc, err)
    assert.are.equal('table\n', out)
  end)

  it('runs a script from stdin with -', function()
    local out, err, rc = h.dplhost('- x y', { stdin = 'print(arg[0], ...)' })
    assert.are.equal(0, rc, err)
    assert.are.equal('-\tx\ty\n', out)
  end)

  it('runs stdin when it is not a terminal and no script is given', function()
    local out, _, rc = h.dplhost('', { stdin = 'print(6 * 7)' })
    assert.are.equal(0, rc)
    assert.are.equal('42\n', out)
  end)

  it('enters the REPL after the script with -i', function()
    local s = h.write_file(h.tmpname('.lua'), 'answer = 41')
    local out, err, rc = h.dplhost('-i ' .. h.q(s), { stdin = 'answer + 1\n' })
    assert.are.equal(0, rc, err)
    assert.are.equal('42\n', out)
    os.remove(s)
  end)

  it('enters the REPL with -i after a script that failed (python -i), for a look at its globals; exit 1', function()
    local s = h.write_file(h.tmpname('.lua'), 'answer = 41\nerror("late failure")\n')
    local out, err, rc = h.dplhost('-i ' .. h.q(s), { stdin = 'answer + 1\n' })
    assert.are.equal(1, rc, err)
    assert.are.equal('42\n', out)
    assert.matches('^dplhost: [^\n]*:2: late failure\n', err)
    -- a script that cannot be loaded still ends at once (python -i nofile.py does too)
    out, err, rc = h.dplhost('-i /nonexistent/x.lua', { stdin = 'print("no repl")\n' })
    assert.are.equal(1, rc)
    assert.are.equal('', out)
    os.remove(s)
  end)

  it('prints its version and help', function()
    local out, _, rc = h.dplhost('--version')
    assert.are.equal(0, rc)
    assert.matches('^dplhost %d+%.%d+%.%d+', out)
    out, _, rc = h.dplhost('--help')
    assert.are.equal(0, rc)
    for _, word in ipairs({ '-e chunk', '-l name', '-i', '--devices', '--busted', '--nproc',
                            'DPL_PATH', 'DPL_VIRTUAL_GPUS', 'CUDA_VISIBLE_DEVICES' }) do
      assert.truthy(out:find(word, 1, true), 'help lacks ' .. word)
    end
  end)

  it('prints its version before running -e and the script, as luajit -v does', function()
    local out, err, rc = h.dplhost([[-v -e 'print("ran")']])
    assert.are.equal(0, rc, err)
    assert.matches('^dplhost %d+%.%d+%.%d+ [^\n]*\nran\n$', out)
    -- alone it only prints the version: no REPL, stdin is not run
    out, err, rc = h.dplhost('-v', { stdin = 'print("ran")' })
    assert.are.equal(0, rc, err)
    assert.matches('^dplhost %d+%.%d+%.%d+ [^\n]*\n$', out)
  end)

  it('lists in --help every DPL_ variable the code reads', function()
    local help = h.dplhost('--help')
    local f = io.popen('cd ' .. h.q(h.root) .. [[ && grep -rhoE "getenv\(['\"]DPL_[A-Z0-9_]+" src lua]])
    local names = {}
    for name in f:read('*a'):gmatch('DPL_[A-Z0-9_]+') do names[name] = true end
    f:close()
    assert.truthy(names.DPL_PATH and names.DPL_NUM_THREADS and names.DPL_COMM_TIMEOUT, 'the scan found nothing')
    for name in pairs(names) do
      assert.truthy(help:find(name .. '[^%w_]'), '--help lacks ' .. name)
    end
  end)

  it('lists devices: the CPU with its cores, and CUDA or why there is none', function()
    local out, _, rc = h.sh('DPL_VIRTUAL_GPUS= ' .. h.q(h.bin) .. ' --devices')
    assert.are.equal(0, rc)
    assert.matches('\ncpu%s+.-%d+ cores\n', out)
    assert.truthy(out:match('\ncuda:0 ') or out:match('\ncuda%s+no '), out)
  end)

  it('lists simulated GPUs, marked as such, with busy ones', function()
    local out, _, rc = h.sh('DPL_VIRTUAL_GPUS=4 DPL_VIRTUAL_GPUS_BUSY=1,3 ' .. h.q(h.bin) .. ' --devices')
    assert.are.equal(0, rc)
    for i = 0, 3 do assert.matches('\ncuda:' .. i .. ' .-simulated', out) end
    assert.matches('\ncuda:1 .-simulated, busy', out)
    assert.matches('\ncuda:2 .-simulated\n', out)
  end)

  it('rejects a bad DPL_VIRTUAL_GPUS with a clear line', function()
    local _, err, rc = h.sh('DPL_VIRTUAL_GPUS=abc ' .. h.q(h.bin) .. ' --devices')
    assert.are.equal(1, rc)
    assert.matches("DPL_VIRTUAL_GPUS must be an integer .-got 'abc'", err)
  end)
end)

describe('dplhost environment variables with bad values', function()
  it('warns about a DPL_NUM_THREADS that is no thread count, naming the value', function()
    for _, v in ipairs({ 'abc', '0', '-3' }) do
      local out, err, rc = h.sh('DPL_NUM_THREADS=' .. v .. ' ' .. h.q(h.bin) .. [[ -e 'print(require("dpl").get_num_threads() > 0)']])
      assert.are.equal(0, rc, err)
      assert.are.equal('true\n', out)
      assert.are.equal("dplhost: warning: DPL_NUM_THREADS='" .. v .. "' is not a thread count (an integer from 1 to 256); ignored\n", err)
    end
    local out, err = h.sh('DPL_NUM_THREADS=100000 ' .. h.q(h.bin) .. [[ -e 'print(require("dpl").get_num_threads())']])
    assert.are.equal('256\n', out)
    assert.are.equal('dplhost: warning: DPL_NUM_THREADS=100000 is more than 256 threads; using 256\n', err)
  end)

  it('rejects a DPL_COMM_TIMEOUT that is not seconds > 0', function()
    for _, v in ipairs({ 'abc', '-5', '0', 'inf' }) do
      local out, err, rc = h.sh('DPL_COMM_TIMEOUT=' .. v .. ' ' .. h.q(h.bin) ..
        [[ -e 'local d = require("dpl.dist") print(select(2, pcall(d.init_process_group))) print(select(2, pcall(d.TCPStore, {port = 0, is_master = true})))']])
      assert.are.equal(0, rc, err)
      assert.are.equal(("MisconfigurationException: init_process_group: DPL_COMM_TIMEOUT must be a finite number of seconds > 0, got '%s'\n" ..
        "MisconfigurationException: TCPStore: DPL_COMM_TIMEOUT must be a finite number of seconds > 0, got '%s'\n"):format(v, v), out)
    end
    local out, err, rc = h.sh('DPL_COMM_TIMEOUT=7.5 ' .. h.q(h.bin) .. [[ -e 'print(require("dpl.dist").init_process_group())']])
    assert.are.equal(0, rc, err)
    assert.matches('ProcessGroup', out)
  end)

  it('rejects DPL_VIRTUAL_GPUS_BUSY naming a GPU that is not simulated', function()
    local _, err, rc = h.sh('DPL_VIRTUAL_GPUS=2 DPL_VIRTUAL_GPUS_BUSY=1,5 ' .. h.q(h.bin) .. ' --devices')
    assert.are.equal(1, rc)
    assert.matches("DPL_VIRTUAL_GPUS_BUSY names GPU 5, but DPL_VIRTUAL_GPUS=2 simulates cuda:0 to cuda:1 %(got '1,5'%)", err)
  end)
end)

describe('dplhost exit codes', function()
  it('exits 0 after a script that ends normally', function()
    local _, _, rc = h.dplhost([[-e 'local x = 1']])
    assert.are.equal(0, rc)
  end)

  it('exits with the code given to os.exit', function()
    local _, _, rc = h.dplhost([[-e 'os.exit(7)']])
    assert.are.equal(7, rc)
    _, _, rc = h.dplhost([[-e 'os.exit(false)']])
    assert.are.equal(1, rc)
  end)

  it('prints "dplhost: <message>" and a traceback for an uncaught error, exit 1', function()
    local _, err, rc = h.dplhost([[-e 'local function f() error("boom") end f()']])
    assert.are.equal(1, rc)
    assert.matches('^dplhost: %(command line%):1: boom\nstack traceback:\n', err)
    assert.matches("in function 'f'", err)
  end)

  it('prints error objects through their __tostring', function()
    local _, err, rc = h.dplhost(
      [[-e 'error(setmetatable({}, {__tostring = function() return "ValueError: bad" end}))']])
    assert.are.equal(1, rc)
    assert.matches('^dplhost: ValueError: bad\n', err)
  end)

  it('says so when the error object is nil (error() with no message), not a silent exit 1', function()
    for _, code in ipairs({ 'error()', 'error(nil)' }) do
      local out, err, rc = h.dplhost('-e ' .. h.q(code))
      assert.are.equal(1, rc)
      assert.are.equal('', out)
      assert.matches('^dplhost: %(error object is a nil value%)\nstack traceback:\n', err)
      assert.matches('%(command line%):1: in main chunk', err)
    end
  end)

  it('describes an error object whose __tostring fails or returns no string', function()
    local _, err, rc = h.dplhost([[-e 'error(setmetatable({}, {__tostring = function() error("broken tostring") end}))']])
    assert.are.equal(1, rc)
    assert.matches('^dplhost: %(error object is a table value; its __tostring failed: %(command line%):1: broken tostring%)\n' ..
      'stack traceback:\n', err)
    _, err, rc = h.dplhost([[-e 'error(setmetatable({}, {__tostring = function() return 42 end}))']])
    assert.are.equal(1, rc)
    assert.matches('^dplhost: 42\n', err)
    _, err, rc = h.dplhost([[-e 'error(setmetatable({}, {__tostring = function() return {} end}))']])
    assert.are.equal(1, rc)
    assert.matches('^dplhost: %(error object is a table value; its __tostring returned a table%)\n', err)
    _, err, rc = h.dplhost([[-e 'error({})']])
    assert.are.equal(1, rc)
    assert.matches('^dplhost: %(error object is a table value%)\n', err)
  end)

  it('runs cleanups registered by a running cleanup, newest first', function()
    local out, err, rc = h.dplhost([[-e 'local d = require "dpl"
      d.atexit(function() print("a") d.atexit(function() print("nested") end) end)
      d.atexit(function() print("b") end)']])
    assert.are.equal(0, rc, err)
    assert.are.equal('b\na\nnested\n', out)
    -- and under os.exit from a cleanup, the rest still runs, once
    out, err, rc = h.dplhost([[-e 'local d = require "dpl"
      d.atexit(function() print("first") end)
      d.atexit(function() print("exits") os.exit(5) end)
      d.atexit(function() print("last") d.atexit(function() print("nested") end) end)']])
    assert.are.equal(5, rc, err)
    assert.are.equal('last\nnested\nexits\nfirst\n', out)
  end)

  it('reports a cleanup that fails through its error object, and runs the others', function()
    local out, err, rc = h.dplhost([[-e 'local d = require "dpl"
      d.atexit(function() print("still") end)
      d.atexit(function() error(setmetatable({}, {__tostring = function() return "CleanupError" end})) end)']])
    assert.are.equal(0, rc, err)
    assert.are.equal('still\n', out)
    assert.are.equal('dplhost: error in atexit handler: CleanupError\n', err)
  end)

  it('runs atexit cleanups on normal exit, on os.exit and after an error, once, newest first', function()
    local reg = [[local dpl = require "dpl"; dpl.atexit(function() print("first") end); ]] ..
                [[dpl.atexit(function() print("second") end); ]]
    local out, _, rc = h.dplhost("-e " .. h.q(reg))
    assert.are.equal(0, rc)
    assert.are.equal('second\nfirst\n', out)
    out, _, rc = h.dplhost("-e " .. h.q(reg .. 'os.exit(4)'))
    assert.are.equal(4, rc)
    assert.are.equal('second\nfirst\n', out)
    out, _, rc = h.dplhost("-e " .. h.q(reg .. 'error("x")'))
    assert.are.equal(1, rc)
    assert.are.equal('second\nfirst\n', out)
  end)

  it('rejects a non-function given to atexit', function()
    local _, err, rc = h.dplhost([[-e 'require("dpl").atexit(42)']])
    assert.are.equal(1, rc)
    assert.matches('dpl.atexit: expected a function, got number', err)
  end)
end)

describe('dplhost bad input', function()
  local function one_line(err)
    local first = err:match('^[^\n]*')
    return first
  end

  it('names a missing script', function()
    local _, err, rc = h.dplhost('/nonexistent/train.lua')
    assert.are.equal(1, rc)
    assert.are.equal('dplhost: cannot open /nonexistent/train.lua: No such file or directory',
      one_line(err))
  end)

  it('names an unreadable script', function()
    local dir = h.tmpname('.d')
    os.execute('mkdir -p ' .. h.q(dir))
    local _, err, rc = h.dplhost(h.q(dir))
    assert.are.equal(1, rc)
    assert.matches('^dplhost: .*' .. dir:gsub('%p', '%%%0'), err)
    os.execute('rm -rf ' .. h.q(dir))
  end)

  it('reports a syntax error with file and line', function()
    local s = h.write_file(h.tmpname('.lua'), 'local x = 1\nx = = 2\n')
    local _, err, rc = h.dplhost(h.q(s))
    assert.are.equal(1, rc)
    assert.matches(":2: unexpected symbol near '='", err)
    assert.matches('^dplhost: ', err)
    os.remove(s)
  end)

  it('rejects an unknown option', function()
    local _, err, rc = h.dplhost('--frobnicate')
    assert.are.equal(2, rc)
    assert.are.equal("dplhost: unknown option '--frobnicate'", one_line(err))
  end)

  it('rejects an option missing its argument', function()
    local _, err, rc = h.dplhost('-e')
    assert.are.equal(2, rc)
    assert.are.equal("dplhost: option '-e' needs an argument", one_line(err))
  end)

  it('rejects --nproc abc', function()
    local _, err, rc = h.dplhost('--nproc abc x.lua')
    assert.are.equal(2, rc)
    assert.are.equal("dplhost: --nproc expects an integer from 1 to 4096, got 'abc'", one_line(err))
    _, err, rc = h.dplhost('--nproc=0 x.lua')
    assert.are.equal(2, rc)
    assert.matches("got '0'", err)
  end)
end)
