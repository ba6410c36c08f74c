-- summary_handler.lua: busted output handler = plainTerminal (or utfTerminal on a
-- terminal) plus the closing line "N passed, N failed, N skipped" that CI reads.
return function(options)
  local busted = require 'busted'
  local base = os.getenv('DPL_TEST_OUTPUT') or 'plainTerminal'
  local handler = require('busted.outputHandlers.' .. base)(options)
  busted.subscribe({ 'suite', 'end' }, function()
    io.stdout:write(('%d passed, %d failed, %d skipped\n'):format(
      #handler.successes, #handler.failures + #handler.errors, #handler.pendings))
    io.stdout:flush()
    return nil, true
  end)
  return handler
end
