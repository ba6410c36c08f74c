-- LightningCLI's add_arguments_to_parser(parser): parser:link_arguments (apply_on parse and
-- instantiate, compute_fn) and parser:set_defaults; any other parser method is refused by name.
-- Reference: PyTorch Lightning 1.9.5's LightningCLI with jsonargparse 4.19 on the same model
-- (recorded): `--data.batch_size 16` with link data.batch_size -> model.hidden gives hidden 16;
-- `--model.hidden 5` is 'fit: error: Linked "model.hidden" must be given via
-- "data.batch_size".' (exit 2); a config's model.hidden is replaced by the link; --print_config
-- leaves model.hidden out; apply_on="instantiate" from data.num_classes gives the
-- datamodule's attribute. Before, the hook was never called: the link was silently ignored.
local h = require 'spec.support.helpers'

local SCRIPT = [[
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local M = dpl.LightningModule:extend('LinkModel')
function M:__init(hidden, lr)
  dpl.LightningModule.__init(self)
  self.hidden, self.lr = hidden or 4, lr or 0.1
  self.net = nn.Linear(3, self.hidden)
end
function M:training_step(b) return F.mse_loss(self.net(b[1]):sum(2), b[2]) end
function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = self.lr }) end
local D = dpl.LightningDataModule:extend('LinkData')
function D:__init(batch_size, n)
  dpl.LightningDataModule.__init(self)
  self.batch_size, self.n, self.num_classes = batch_size or 8, n or 16, 3
end
function D:train_dataloader()
  return dpl.data.DataLoader(dpl.data.TensorDataset(dpl.ones(self.n, 3), dpl.zeros(self.n)), { batch_size = self.batch_size })
end
local C = dpl.cli.LightningCLI:extend('LinkCLI')
function C:add_arguments_to_parser(parser)
  local mode = os.getenv('LINK')
  if mode == 'parse' then parser:link_arguments('data.batch_size', 'model.hidden')
  elseif mode == 'fn' then
    parser:link_arguments({ 'data.batch_size', 'data.n' }, 'model.hidden', function(a, b) return a + (b or 100) end)
  elseif mode == 'inst' then parser:link_arguments('data.num_classes', 'model.hidden', { apply_on = 'instantiate' })
  elseif mode == 'trainer' then parser:link_arguments('data.n', 'trainer.max_steps')
  elseif mode == 'badkey' then parser:set_defaults({ ['model.lrr'] = 0.5 })
  elseif mode == 'defaults' then parser:set_defaults({ ['model.lr'] = 0.5, ['trainer.max_epochs'] = 2 })
  elseif mode == 'badsrc' then parser:link_arguments('data.batchsize', 'model.hidden')
  elseif mode == 'badattr' then parser:link_arguments('data.classes', 'model.hidden', nil, 'instantiate')
  elseif mode == 'other' then parser:add_optimizer_args({})
  end
end
local cli = C(M, D, { run = os.getenv('RUN') ~= '0', save_config_callback = false,
  trainer_defaults = { max_epochs = 1, logger = false, enable_checkpointing = false,
    enable_progress_bar = false, enable_model_summary = false } })
print(('RESULT hidden=%s lr=%s max_epochs=%s max_steps=%s'):format(cli.model.hidden, cli.model.lr,
  cli.trainer.max_epochs, cli.trainer.max_steps))
]]

local dir = h.tmpname('-clilink')
os.execute('mkdir -p ' .. h.q(dir))
local script = dir .. '/link.lua'
h.write_file(script, SCRIPT)
h.write_file(dir .. '/hid.yaml', 'model:\n  hidden: 3\n')

local function cli(env, words)
  return h.sh(env .. ' ' .. h.q(h.bin) .. ' ' .. h.q(script) .. ' ' .. words, { timeout = 120 })
end
local function result(o) return (o:match('RESULT ([^\n]*)')) end

describe('LightningCLI add_arguments_to_parser', function()
  it('link_arguments on parse: the target takes the source value', function()
    local o, e, rc = cli('LINK=parse', 'fit --data.batch_size 16')
    assert.equal(0, rc, e)
    assert.equal('hidden=16 lr=0.1 max_epochs=1 max_steps=-1', result(o))
    -- a config's value of the target is replaced by the link (jsonargparse)
    o, e, rc = cli('LINK=parse', 'fit --data.batch_size 6 --config ' .. h.q(dir .. '/hid.yaml'))
    assert.equal(0, rc, e)
    assert.equal('hidden=6 lr=0.1 max_epochs=1 max_steps=-1', result(o))
    -- also without a subcommand
    o, e, rc = cli('LINK=parse RUN=0', '--data.batch_size 5')
    assert.equal(0, rc, e)
    assert.equal('hidden=5 lr=0.1 max_epochs=1 max_steps=-1', result(o))
  end)

  it('the target given on the command line is a usage error (exit 2), as jsonargparse', function()
    local o, e, rc = cli('LINK=parse', 'fit --model.hidden 5')
    assert.equal(2, rc)
    assert.equal('', o)
    assert.equal('link.lua fit: error: Linked "model.hidden" must be given via "data.batch_size".\n', e)
    o, e, rc = cli('LINK=inst', 'fit --model.hidden=5')
    assert.equal(2, rc)
    assert.equal('link.lua fit: error: Linked "model.hidden" must be given via "data.num_classes".\n', e)
  end)

  it('--print_config and --help leave the target out', function()
    local o, e, rc = cli('LINK=parse', 'fit --data.batch_size 16 --print_config')
    assert.equal(0, rc, e)
    assert.truthy(o:find('\nmodel:\n  lr: null\ndata:\n  batch_size: 16\n', 1, true), o)
    o = cli('LINK=parse', 'fit --help')
    assert.falsy(o:find('--model.hidden', 1, true), o)
    assert.truthy(o:find('--model.lr', 1, true), o)
  end)

  it('compute_fn gets the sources in order (nil for a source not given)', function()
    local o, e, rc = cli('LINK=fn', 'fit --data.batch_size 4 --data.n 8')
    assert.equal(0, rc, e)
    assert.equal('hidden=12 lr=0.1 max_epochs=1 max_steps=-1', result(o))
    o, e, rc = cli('LINK=fn', 'fit --data.batch_size 4')
    assert.equal(0, rc, e)
    assert.equal('hidden=104 lr=0.1 max_epochs=1 max_steps=-1', result(o))
  end)

  it('apply_on instantiate reads the built datamodule; a trainer target; set_defaults', function()
    local o, e, rc = cli('LINK=inst', 'fit')
    assert.equal(0, rc, e)
    assert.equal('hidden=3 lr=0.1 max_epochs=1 max_steps=-1', result(o))
    o, e, rc = cli('LINK=trainer', 'fit --data.n 24 --data.batch_size 8')
    assert.equal(0, rc, e)
    assert.equal('hidden=4 lr=0.1 max_epochs=1 max_steps=24', result(o))
    o, e, rc = cli('LINK=defaults', 'fit --trainer.max_epochs 3')
    assert.equal(0, rc, e)
    assert.equal('hidden=4 lr=0.5 max_epochs=3 max_steps=-1', result(o))
    o, e, rc = cli('LINK=defaults', 'fit --print_config')
    assert.equal(0, rc, e)
    assert.truthy(o:find('\n  max_epochs: 2\n', 1, true), o)
    assert.truthy(o:find('\n  lr: 0.5\n', 1, true), o)
  end)

  it('bad links and parser methods dplhost lacks are errors naming them', function()
    local _, e, rc = cli('LINK=badsrc', 'fit')
    assert.equal(1, rc)
    assert.truthy(e:find('ValueError: link_arguments: no action for the source key "data.batchsize"', 1, true), e)
    _, e, rc = cli('LINK=badattr', 'fit')
    assert.equal(1, rc)
    assert.truthy(e:find("AttributeError: link_arguments: the datamodule (LinkData) has no attribute 'classes'", 1, true), e)
    _, e, rc = cli('LINK=other', 'fit')
    assert.equal(1, rc)
    assert.truthy(e:find('NotImplementedError: LightningCLI: parser:add_optimizer_args', 1, true), e)
    -- (errors.KeyError did not exist: 'attempt to index field 'KeyError' (a nil value)')
    _, e, rc = cli('LINK=badkey', 'fit')
    assert.equal(1, rc)
    assert.truthy(e:find('KeyError: set_defaults: no action for the key "model.lrr"', 1, true), e)
  end)
end)

-- Under a launcher every rank parses the same line and fails with exit 2, but only rank 0
-- writes the error: a rank > 0 that exited at once made `dplhost --nproc 2` stop rank 0, now and
-- then before its line was written (the bad flag then left no message at all). A rank > 0 now
-- waits (up to 5 s) for rank 0 to exit first.
describe('LightningCLI usage errors under a launcher', function()
  it('a rank > 0 does not exit before rank 0 could write the error', function()
    local t0 = os.time()
    local o, e, rc = cli('RANK=1 LOCAL_RANK=1 WORLD_SIZE=2', 'fit --trainer.max_epoks 1')
    assert.equal(2, rc)
    assert.equal('', o .. e)
    assert.is_true(os.time() - t0 >= 4)
  end)

  it('dplhost --nproc 2: rank 0 reports the bad flag, every time', function()
    for _ = 1, 3 do
      local _, e, rc = h.dplhost('--nproc 2 ' .. h.q(script) .. ' fit --trainer.max_epoks 1', { timeout = 60 })
      assert.equal(2, rc, e)
      assert.truthy(e:find('[rank 0] link.lua fit: error: Unrecognized arguments: --trainer.max_epoks', 1, true), e)
    end
  end)
end)
