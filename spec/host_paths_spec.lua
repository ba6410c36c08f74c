-- host_paths_spec.lua: the dpl library is found relative to the binary, from any
-- working directory, after `make install PREFIX=...`, and through DPL_PATH.
local h = require 'spec.support.helpers'

describe('module paths', function()
  it('finds dpl from another working directory', function()
    local out, err, rc = h.sh('cd / && ' .. h.q(h.bin) .. [[ -e 'print(require("dpl").version)']])
    assert.are.equal(0, rc, err)
    assert.matches('^%d+%.%d+%.%d+\n$', out)
  end)

  it('finds dpl through a symlink to the binary', function()
    local link = h.tmpname('-dplhost')
    os.execute(('ln -sf %s %s'):format(h.q(h.bin), h.q(link)))
    local out, err, rc = h.sh('cd / && ' .. h.q(link) .. [[ -e 'print(require("dpl").version)']])
    os.remove(link)
    assert.are.equal(0, rc, err)
    assert.matches('^%d+%.%d+%.%d+\n$', out)
  end)

  it('works after make install PREFIX=...', function()
    local prefix = h.tmpname('-prefix')
    local _, err, rc = h.sh(('make -s -C %s install PREFIX=%s >/dev/null'):format(h.q(h.root), h.q(prefix)),
      { timeout = 300 })
    assert.are.equal(0, rc, err)
    local out
    out, err, rc = h.sh('cd / && ' .. h.q(prefix .. '/bin/dplhost') ..
      [[ -e 'print(require("dpl").version, package.searchpath("dpl", package.path))']])
    assert.are.equal(0, rc, err)
    assert.truthy(out:find(prefix .. '/bin/../share/dplhost/lua/dpl/init.lua', 1, true), out)
    os.execute('rm -rf ' .. h.q(prefix))
  end)

  it('lets DPL_PATH override the library location', function()
    local dir = h.tmpname('-lib')
    os.execute(('mkdir -p %s/dpl && cp -R %s/lua/dpl/. %s/dpl/'):format(h.q(dir), h.q(h.root), h.q(dir)))
    h.write_file(dir .. '/dpl/marker.lua', 'return "from DPL_PATH"')
    local out, err, rc = h.sh('cd / && DPL_PATH=' .. h.q(dir) .. ' ' .. h.q(h.bin) ..
      [[ -e 'print(require("dpl.marker"))']])
    os.execute('rm -rf ' .. h.q(dir))
    assert.are.equal(0, rc, err)
    assert.are.equal('from DPL_PATH\n', out)
  end)

  it('says clearly when the library cannot be found', function()
    local out, err, rc = h.sh('cd / && DPL_PATH=/nonexistent ' .. h.q(h.bin) .. [[ -e 'require("dpl")']])
    assert.are.equal(1, rc)
    assert.matches("^dplhost: .*module 'dpl' not found", err)
    assert.truthy(err:find('/nonexistent/dpl/init.lua', 1, true))
    assert.are.equal('', out)
  end)
end)
