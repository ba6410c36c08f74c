-- dist_store_spec.lua: the rendezvous store (dist.TCPStore): set/get/add/delete,
-- get waiting for a key set later by another process, timeouts, a server that
-- goes away, and bad arguments.
local h = require 'spec.support.helpers'
local dist = require('dpl').dist

describe('dist.TCPStore', function()
  it('sets, gets, adds and deletes through a client in the same process', function()
    local s = dist.TCPStore{ port = 0, is_master = true, timeout = 5 }
    local c = dist.TCPStore{ port = s:port(), is_master = false }
    s:set('k', 'v\0binary')
    assert.are.equal('v\0binary', c:get('k'))
    assert.are.equal(2, c:add('n', 2))
    assert.are.equal(3, s:add('n'))
    assert.are.equal('3', c:get('n'))
    assert.is_true(c:delete_key('k'))
    assert.is_false(c:delete_key('k'))
    local ok, e = pcall(c.get, c, 'never', 0.2)
    assert.is_false(ok)
    assert.matches("DistError: dist: store: key 'never' did not appear within 0.2 s", tostring(e))
    c:close()
    s:close()
    s:close()
    ok, e = pcall(s.get, s, 'k')
    assert.matches('the store was closed', tostring(e))
  end)

  it('other processes count in and wait for a key (a barrier through the store)', function()
    local s = dist.TCPStore{ port = 0, is_master = true, timeout = 20 }
    local cmd = {}
    for i = 1, 3 do
      cmd[#cmd + 1] = ([[%s -e "local c = require('dpl').dist.TCPStore{port = %d, is_master = false, timeout = 20}
        c:add('count') c:wait({'go'}) c:set('r%d', c:get('go') .. %d)" &]]):format(h.q(h.bin), s:port(), i, i)
    end
    local f = io.popen(table.concat(cmd, ' ') .. ' wait; echo done')
    local t0 = require('dpl').C.dpl_clock()
    while (tonumber(s:get('count', 20)) or 0) < 3 and require('dpl').C.dpl_clock() - t0 < 20 do
      require('dpl').C.dpl_sleep(0.01)
    end
    s:set('go', 'x')
    for i = 1, 3 do assert.are.equal('x' .. i, s:get('r' .. i, 20)) end
    assert.are.equal('done\n', f:read('*a'))
    f:close()
    s:close()
  end)

  it('a client whose server exits fails instead of hanging', function()
    local f = io.popen(([[%s -e "local s = require('dpl').dist.TCPStore{port = 0, is_master = true}
      print(s:port()) io.stdout:flush() require('dpl').C.dpl_sleep(0.5)"]]):format(h.q(h.bin)))
    local port = tonumber(f:read('*l'))
    local c = dist.TCPStore{ port = port, is_master = false, timeout = 5 }
    local C = require('dpl').C
    local t0 = C.dpl_clock()
    local ok, e = pcall(c.get, c, 'never', 20)
    f:close()
    assert.is_false(ok)
    assert.matches('lost the connection to the server', tostring(e))
    assert.is_true(C.dpl_clock() - t0 < 5)
    c:close()
  end)

  it('explains configuration mistakes and unreachable servers', function()
    local ok, e = pcall(dist.TCPStore, { port = 70000, is_master = true })
    assert.matches('port must be in 0..65535, got 70000', tostring(e))
    ok, e = pcall(dist.TCPStore, { port = 0, is_master = false })
    assert.matches("a client needs the server's port", tostring(e))
    ok, e = pcall(dist.TCPStore, { port = 1, is_master = false, timeout = 0.3 })
    assert.is_false(ok)
    assert.matches('no server at 127.0.0.1:1 after 0.3 s', tostring(e))
  end)
end)
