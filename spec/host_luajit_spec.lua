-- host_luajit_spec.lua: the LuaJIT linked into dplhost. Bookworm's libluajit-5.1
-- (2.1.0~beta3+git20220320) ends a pairs() loop early once the JIT blacklists a nested
-- pairs() loop and turns its ITERN into ITERC (LuaJIT issue #827, fixed upstream in April
-- 2022): every `for k, v in pairs(t)` in the Trainer, the optimizers or state_dict code could
-- silently skip entries. The build links Debian's luajit2 (OpenResty's branch, 2.1-20230119),
-- which has the fix; this case fails on a build against the old library.
describe('the linked LuaJIT', function()
  it('finishes an outer pairs() loop after its nested pairs() loop is blacklisted (LuaJIT #827)', function()
    -- (a chunk of its own, as in the issue: inside this function's closure the JIT records
    -- other traces and the old library passes)
    local chunk = assert(loadstring([[
      local t = { 1, 2, 3, 4, 5 }
      local tab = { a = t, b = t, c = t, d = t, e = t }
      local function f(...) for _ = 1, 100 do end end -- (vararg: a return to the interpreter)
      for i = 1, 100000 do
        f()
        local c = 0
        for _, v in pairs(tab) do
          for _ in pairs(v) do end
          c = c + 1
        end
        if c ~= 5 then return ('iteration %d visited %d of 5 keys'):format(i, c) end
      end
    ]], '=luajit_827'))
    assert.is_nil(chunk())
  end)

  it('has GC64 and string.buffer', function()
    assert.is_true(require('ffi').abi('gc64'))
    local buf = require('string.buffer').new()
    buf:put('ab', 1)
    assert.are.equal('ab1', buf:tostring())
  end)
end)
