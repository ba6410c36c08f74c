-- dpl.cli.LightningCLI and dpl.yaml: the YAML subset reader/writer (in process), and the CLI
-- end to end through spec/support/cli_script.lua (a tiny model and data module) in fresh
-- dplhost processes: each subcommand, run=false, config precedence, --print_config round
-- trips, bad flags, --help, config.yaml and its overwrite refusal, ddp under --nproc 2, and
-- examples/fashion_mnist_cli.lua. Reference behaviour recorded from PyTorch Lightning 1.9.5's
-- LightningCLI (jsonargparse 4.19) on an equivalent model is quoted in comments/literals.
local h = require 'spec.support.helpers'
local yaml = require 'dpl.yaml'
local errors = require 'dpl.errors'

local script = h.q(h.root .. '/spec/support/cli_script.lua')

-- dplhost <script> <words>, with environment words (e.g. 'CLI_RUN=0')
local function cli(words, env, opts)
  return h.sh((env or '') .. ' ' .. h.q(h.bin) .. ' ' .. script .. ' ' .. words, opts or { timeout = 120 })
end

local function results(out)
  local r = {}
  for l in out:gmatch('[^\n]+') do
    local v = l:match('RESULT (.*)$')
    if v then r[#r + 1] = v end
  end
  return table.concat(r, '\n')
end

-- stderr without the INFO/WARNING lines
local function err_lines(e)
  local out = {}
  for l in e:gmatch('[^\n]+') do
    if not l:find('INFO:') and not l:find('WARNING:') then out[#out + 1] = l end
  end
  return out
end

local function exists(p)
  local f = io.open(p)
  if f then f:close() end
  return f ~= nil
end

local function tmpdir()
  local d = h.tmpname('-cli')
  os.execute('mkdir -p ' .. h.q(d))
  return d
end

describe('dpl.yaml', function()
  it('reads what Lightning configs use: nested mappings, block and flow lists, comments, quoting', function()
    local v = yaml.decode([[
# pytorch_lightning==1.9.5
---
seed_everything: 42   # comment
trainer:
  max_epochs: 3
  limit_val_batches: 0.25
  callbacks:
  - class_path: pytorch_lightning.callbacks.EarlyStopping
    init_args:
      monitor: val_loss
      patience: 3
  - {class_path: x.Y, init_args: {a: 1, b: [true, null]}}
  devices: [0, 1]
  logger: false
  default_root_dir: 'runs # not a comment'
  name: "tab\there \u00e9"
model:
  dims: [1, 2,
     3]
  empty:
  nul: ~
  yes_word: yes
  hex: 0x1F
  neg_inf: -.inf
  lr: 1e-3
  date: 2021-01-01
  quote: it's
  list_at_key_indent:
  - a
  - - 1
    - 2
]], 'cfg.yaml')
    assert.equal(42, v.seed_everything)
    assert.equal(3, v.trainer.max_epochs)
    assert.equal(0.25, v.trainer.limit_val_batches)
    assert.same({ class_path = 'pytorch_lightning.callbacks.EarlyStopping', init_args = { monitor = 'val_loss', patience = 3 } },
      v.trainer.callbacks[1])
    assert.same({ class_path = 'x.Y', init_args = { a = 1, b = { true, yaml.null } } }, v.trainer.callbacks[2])
    assert.same({ 0, 1 }, v.trainer.devices)
    assert.is_false(v.trainer.logger)
    assert.equal('runs # not a comment', v.trainer.default_root_dir)
    assert.equal('tab\there \195\169', v.trainer.name)
    assert.same({ 1, 2, 3 }, v.model.dims)
    assert.equal(yaml.null, v.model.empty)
    assert.equal(yaml.null, v.model.nul)
    assert.is_true(v.model.yes_word) -- YAML 1.1 (PyYAML)
    assert.equal(31, v.model.hex)
    assert.equal(-math.huge, v.model.neg_inf)
    assert.equal(0.001, v.model.lr) -- a number here (PyYAML: the string '1e-3')
    assert.equal('2021-01-01', v.model.date)
    assert.equal("it's", v.model.quote)
    assert.same({ 'a', { 1, 2 } }, v.model.list_at_key_indent)
  end)

  it('resolves plain scalars as documented', function()
    for text, want in pairs({ ['~'] = yaml.null, null = yaml.null, NULL = yaml.null, ['true'] = true, False = false,
      no = false, ON = true, ['12'] = 12, ['-3'] = -3, ['1_000'] = 1000, ['0.5'] = 0.5, ['.5'] = 0.5, ['2.'] = 2,
      ['1e3'] = 1000, ['0o17'] = 15, ['.inf'] = math.huge, abc = 'abc', ['1.2.3'] = '1.2.3', ['0x'] = '0x',
      ['none'] = 'none' }) do
      assert.equal(want, yaml.resolve(text), text)
    end
    assert.is_true(yaml.resolve('.nan') ~= yaml.resolve('.nan'))
  end)

  it('tells the floats written as 1.0 (Lua has one number type)', function()
    local v, floats = yaml.decode('a: 1.0\nb: 1\nc:\n  d: 2e0\n')
    assert.equal(1, v.a)
    assert.equal('1.0', floats[v].a)
    assert.is_nil(floats[v].b)
    assert.equal('2e0', floats[v.c].d)
  end)

  it('tells the integral floats of flow mappings too ({a: 1.0})', function()
    local v, floats = yaml.decode('t: {a: 1.0, b: 1, c: [1.0], d: {e: 2.0}}\n')
    assert.equal(1, v.t.a)
    assert.equal('1.0', floats[v.t].a)
    assert.is_nil(floats[v.t].b)
    assert.equal('2.0', floats[v.t.d].e)
  end)

  it('control characters: encoded double-quoted with escapes PyYAML reads, and read back', function()
    local s = 'a\1b\127c\27d'
    local text = yaml.encode({ name = s })
    assert.is_nil(text:find('[\1\127\27]'), text) -- PyYAML refuses raw control characters
    assert.equal(s, yaml.decode(text).name)
    -- YAML's \x, \u and \U escapes
    assert.equal('A\195\169\240\159\152\128', yaml.decode('x: "\\x41\\u00e9\\U0001F600"\n').x)
  end)

  it('bad YAML: a ValueError naming the file and the line', function()
    for _, c in ipairs({
      { 'a: 1\n b: 2\n', 'bad.yaml:2: bad indentation' },
      { 'a:\n  - 1\n  x: 2\n', 'bad.yaml:3: bad indentation' },
      { 'a: [1, 2\n', "bad.yaml:1: expected ',' or ']' in a flow list" },
      { "x: 1\na: 'open\n", 'bad.yaml:2: unterminated single%-quoted string' },
      { 'a: 1\na: 2\n', "bad.yaml:2: duplicate key 'a'" },
      { 'a: &anchor 1\n', 'bad.yaml:1: anchors and aliases' },
      { 'a: |\n  text\n', 'bad.yaml:1: block scalars' },
      { 'x: 1\n\ta: 1\n', 'bad.yaml:2: a tab in the indentation' },
      { 'a: 1\n---\nb: 2\n', 'bad.yaml:2: several documents' },
      { 'a: b: c\n', 'bad.yaml:1: mapping values are not allowed here' },
      { '- a\nb: 1\n', 'bad.yaml:2:' },
      { 'a: {b: 1} x\n', 'bad.yaml:1: unexpected text after a flow collection' },
      { 'a: "\\q"\n', 'bad.yaml:1: unknown escape' },
    }) do
      local ok, e = pcall(yaml.decode, c[1], 'bad.yaml')
      assert.is_false(ok, c[1])
      assert.is_true(errors.is(e, errors.ValueError), c[1])
      assert.matches('^' .. c[2], e.message, 1)
    end
  end)

  it('encode: decode(encode(v)) is v; strings that would read as something else are quoted', function()
    local v = { a = { 1, { b = 2, c = { 3 } }, 'x: y', 'yes', '1.5', '', 'multi\nline' }, z = yaml.null,
      n = { m = { k = -0.25 } }, e = {} }
    local text = yaml.encode(v)
    assert.same(v, (yaml.decode(text)))
    assert.matches("%- 'yes'", text)
    assert.matches("%- '1.5'", text)
    assert.matches("z: null", text)
  end)
end)

describe('LightningCLI', function()
  it('fit: the groups reach the Trainer, the model and the datamodule; config.yaml is saved', function()
    local d = tmpdir()
    local o, e, rc = cli('fit --trainer.max_epochs 2 --trainer.default_root_dir ' .. h.q(d)
      .. ' --model.lr 0.05 --model.hidden 6 --data.batch_size 16 --seed_everything 3')
    assert.equal(0, rc, o .. e)
    local r = results(o)
    assert.matches('model hidden=6 lr=0.05 name=tiny', r)
    assert.matches('data batch_size=16 n=64', r)
    assert.matches('trainer max_epochs=2 global_step=8 world_size=1', r) -- 64 / 16 = 4 steps an epoch
    assert.matches('subcommand=fit seed=3', r)
    local cfg_path = d .. '/lightning_logs/version_0/config.yaml'
    assert.is_true(exists(cfg_path))
    local cfg = yaml.read_file(cfg_path)
    assert.equal(3, cfg.seed_everything)
    assert.equal(2, cfg.trainer.max_epochs)
    assert.same({ hidden = 6, lr = 0.05, name = yaml.null, opts = yaml.null }, cfg.model)
    assert.same({ batch_size = 16, n = yaml.null }, cfg.data)
    assert.equal(yaml.null, cfg.ckpt_path)

    -- validate / test / predict from the checkpoint fit wrote
    local ckpt = d .. '/lightning_logs/version_0/checkpoints/epoch=1-step=8.ckpt'
    assert.is_true(exists(ckpt))
    o, e, rc = cli('validate --trainer.default_root_dir ' .. h.q(d) .. ' --model.hidden 6 --ckpt_path ' .. h.q(ckpt))
    assert.equal(0, rc, o .. e)
    local val = tonumber(results(o):match('val_loss=([%d.]+)'))
    assert.is_number(val)
    assert.matches('Validate metric', o) -- verbose (default true)
    o, e, rc = cli('test --trainer.default_root_dir ' .. h.q(d) .. ' --model.hidden 6 --verbose false --ckpt_path '
      .. h.q(ckpt))
    assert.equal(0, rc, o .. e)
    assert.equal(val, tonumber(results(o):match('test_loss=([%d.]+)'))) -- the same data and weights
    assert.is_nil(o:find('Test metric', 1, true))
    o, e, rc = cli('predict --trainer.logger false --trainer.default_root_dir ' .. h.q(d) .. ' --data.batch_size 32')
    assert.equal(0, rc, o .. e)
    assert.matches('predictions=2', results(o))
    os.execute('rm -rf ' .. h.q(d))
  end)

  it('tune: auto_lr_find with --lr_find_kwargs', function()
    local d = tmpdir()
    local o, e, rc = cli('tune --trainer.auto_lr_find --lr_find_kwargs "{num_training: 40}" --trainer.logger false'
      .. ' --trainer.default_root_dir ' .. h.q(d) .. ' --seed_everything 0')
    assert.equal(0, rc, o .. e)
    assert.matches('subcommand=tune seed=0', results(o))
    assert.matches('tuned lr_find=yes', results(o))
    os.execute('rm -rf ' .. h.q(d))
  end)

  it('null for a Trainer argument that defaults to true is off, as Lightning\'s Trainer(logger=None)', function()
    -- Lightning 1.9.5: `trainer: {logger: null}` passes logger=None: no logger (if not logger)
    local d = tmpdir()
    h.write_file(d .. '/n.yaml', '# no logger, no checkpoints\ntrainer:\n  logger: null\n  enable_checkpointing: ~\n')
    local o, e, rc = cli('fit --trainer.max_epochs 1 --trainer.default_root_dir ' .. h.q(d) .. ' -c ' .. h.q(d .. '/n.yaml'))
    assert.equal(0, rc, o .. e)
    assert.is_false(exists(d .. '/lightning_logs'))
    assert.is_false(exists(d .. '/checkpoints'))
    assert.is_true(exists(d .. '/config.yaml')) -- default_root_dir without a logger
    os.execute('rm -rf ' .. h.q(d))
  end)

  it('1.0 stays a fraction in --trainer YAML text and in flow mappings of a config', function()
    local d = tmpdir()
    h.write_file(d .. '/f.yaml', 'trainer: {limit_val_batches: 1.0, max_epochs: 1}\n')
    local o, e, rc = cli('fit --trainer "limit_train_batches: 1.0" -c ' .. h.q(d .. '/f.yaml')
      .. ' --trainer.default_root_dir ' .. h.q(d) .. ' --trainer.logger false')
    assert.equal(0, rc, o .. e)
    assert.matches('global_step=8', results(o)) -- all 8 batches of 8, not 1
    o, e, rc = cli('fit --trainer "{limit_train_batches: 1.0}" -c ' .. h.q(d .. '/f.yaml') .. ' --print_config')
    assert.equal(0, rc, e)
    assert.matches('limit_train_batches: 1.0\n', o)
    assert.matches('limit_val_batches: 1.0\n', o)
    os.execute('rm -rf ' .. h.q(d))
  end)

  it('--trainer.NAME takes a YAML list or mapping where the Trainer takes one (as jsonargparse)', function()
    local o, e, rc = cli('fit --trainer.max_time "{minutes: 1}" --trainer.accumulate_grad_batches "{0: 2, 4: 1}"'
      .. ' --trainer.devices "[0, 1]" --print_config')
    assert.equal(0, rc, e)
    local cfg = yaml.decode(o)
    assert.same({ minutes = 1 }, cfg.trainer.max_time)
    assert.same({ [0] = 2, [4] = 1 }, cfg.trainer.accumulate_grad_batches)
    assert.same({ 0, 1 }, cfg.trainer.devices)
    local d = tmpdir()
    o, e, rc = cli('fit --trainer.max_epochs 1 --trainer.max_time "{minutes: 1}" --trainer.logger false'
      .. ' --trainer.accumulate_grad_batches "{0: 2}" --trainer.default_root_dir ' .. h.q(d), 'CLI_NOSAVE=1')
    assert.equal(0, rc, o .. e)
    assert.matches('global_step=4', results(o)) -- 8 batches, 2 accumulated
    os.execute('rm -rf ' .. h.q(d))
  end)

  it('run=false: no subcommand; the objects are built for the script', function()
    local o, e, rc = cli('--model.hidden 7 --trainer.max_epochs 2 --seed_everything false', 'CLI_RUN=0')
    assert.equal(0, rc, o .. e)
    local r = results(o)
    assert.matches('model hidden=7', r)
    assert.matches('trainer max_epochs=2 global_step=0', r)
    assert.matches('subcommand=nil seed=false', r)
    -- without a datamodule class there is no --data group
    local _, e2, rc2 = cli('--data.batch_size 3', 'CLI_RUN=0 CLI_NODATA=1')
    assert.equal(2, rc2)
    assert.same({ 'cli_script.lua: error: Unrecognized arguments: --data.batch_size' }, err_lines(e2))
  end)

  it('precedence: defaults < config files in order < flags (wherever the flags stand)', function()
    local d = tmpdir()
    local a, b, l = d .. '/a.yaml', d .. '/b.yaml', d .. '/c.lua'
    h.write_file(a, 'trainer:\n  max_epochs: 5\n  limit_train_batches: 3\nmodel:\n  lr: 0.5\n  hidden: 8\n')
    h.write_file(b, 'model:\n  lr: 0.25\ndata:\n  batch_size: 4\n')
    h.write_file(l, 'return { model = { name = "from_lua", opts = { depth = 2 } }, seed_everything = 5 }')
    -- the flag --model.hidden 16 stands before the configs and still wins; b's lr over a's
    local o, e, rc = cli('fit --model.hidden 16 --config ' .. h.q(a) .. ' -c ' .. h.q(b) .. ' --config=' .. h.q(l)
      .. ' --model.opts.width 3 --print_config')
    assert.equal(0, rc, e)
    local cfg = yaml.decode(o)
    assert.equal(5, cfg.trainer.max_epochs)
    assert.equal(3, cfg.trainer.limit_train_batches)
    assert.equal(50, cfg.trainer.log_every_n_steps) -- a default
    assert.same({ hidden = 16, lr = 0.25, name = 'from_lua', opts = { depth = 2, width = 3 } }, cfg.model)
    assert.same({ batch_size = 4, n = yaml.null }, cfg.data)
    assert.equal(5, cfg.seed_everything)
    -- Lightning 1.9.5 (jsonargparse) with the same a.yaml and b.yaml, recorded:
    --   fit --config a.yaml --config b.yaml --model.hidden 16 --print_config -> max_epochs: 5,
    --   limit_train_batches: 3, hidden: 16, lr: 0.25, batch_size: 4 (as here); but
    --   fit --model.hidden 3 --config a.yaml -> hidden: 8 (there the order on the line decides)
    os.execute('rm -rf ' .. h.q(d))
  end)

  it('--print_config: the resolved config as YAML in Lightning\'s layout, exit 0; it reads back the same', function()
    local d = tmpdir()
    local o, e, rc = cli('fit --print_config --model.lr 0.3 --model.opts "{dims: [1, 2], act: relu}"'
      .. ' --trainer.limit_val_batches 1.0 --trainer.max_time 00:00:01:00 --data.n 32')
    assert.equal(0, rc, e)
    assert.matches('^# dplhost==', o)
    -- Lightning 1.9.5's `fit --print_config` (recorded): seed_everything, trainer (its parameters
    -- in this order), model, data, then the subcommand's ckpt_path
    local keys = {}
    for k in o:gmatch('\n  ([%w_]+):') do keys[#keys + 1] = k if #keys == 8 then break end end
    assert.same({ 'logger', 'enable_checkpointing', 'callbacks', 'default_root_dir', 'gradient_clip_val',
      'gradient_clip_algorithm', 'num_nodes', 'num_processes' }, keys)
    local top = {}
    for k in o:gmatch('\n([%w_]+):') do top[#top + 1] = k end
    assert.same({ 'seed_everything', 'trainer', 'model', 'data', 'ckpt_path' }, top)
    assert.matches('\n  limit_val_batches: 1.0\n', o) -- a fraction: all batches, not one
    local f = d .. '/p.yaml'
    h.write_file(f, o)
    local o2, e2, rc2 = cli('fit --config ' .. h.q(f) .. ' --print_config')
    assert.equal(0, rc2, e2)
    assert.equal(o, o2)
    -- the subcommands' own options, as Lightning 1.9.5 prints them (recorded; its tune also has
    -- `dataloaders: null`, not here)
    for sub, tail in pairs({ validate = 'ckpt_path: null\nverbose: true\n', test = 'ckpt_path: null\nverbose: true\n',
      predict = 'return_predictions: null\nckpt_path: null\n',
      tune = 'scale_batch_size_kwargs: null\nlr_find_kwargs: null\nmethod: fit\n' }) do
      local o3 = cli(sub .. ' --print_config')
      assert.equal(tail, o3:sub(-#tail), sub)
    end
    os.execute('rm -rf ' .. h.q(d))
  end)

  -- Lightning 1.9.5 prints the usage and then e.g. "ref.py [options] fit: error: Unrecognized
  -- arguments: --trainer.max_epoks 3", exit 2 (recorded); here the error line alone
  for _, c in ipairs({
    { 'fit --trainer.max_epoks 3', 'cli_script.lua fit: error: Unrecognized arguments: --trainer.max_epoks (did you mean --trainer.max_epochs?)' },
    { 'fit --model.lrr 3', 'cli_script.lua fit: error: Unrecognized arguments: --model.lrr (did you mean --model.lr?)' },
    { 'fit --data.batchsize=3', 'cli_script.lua fit: error: Unrecognized arguments: --data.batchsize (did you mean --data.batch_size?)' },
    { 'fit --verbose true', 'cli_script.lua fit: error: Unrecognized arguments: --verbose' },
    { 'fit stray', 'cli_script.lua fit: error: Unrecognized arguments: stray' },
    { 'fitt', "cli_script.lua: error: argument subcommand: invalid choice: 'fitt' (choose from 'fit', 'validate', 'test', 'predict', 'tune') (did you mean fit?)" },
    { '', 'cli_script.lua: error: "subcommand" is required but not given; one of {fit,validate,test,predict,tune}' },
    { 'fit --trainer.max_epochs abc', "cli_script.lua fit: error: argument --trainer.max_epochs: expects a number, got 'abc'" },
    { 'fit --trainer.max_epochs', 'cli_script.lua fit: error: argument --trainer.max_epochs: expected one argument' },
    { 'test --verbose maybe', 'cli_script.lua test: error: argument --verbose: verbose expects true or false, got maybe' },
    { 'fit --seed_everything x', "cli_script.lua fit: error: argument --seed_everything: seed_everything expects true, false or an integer, got x" },
    { 'fit --model.lr "[1,"', "cli_script.lua fit: error: argument --model.lr:1: a value is missing in a flow collection" },
    { 'fit --config /nonexistent.yaml', 'cli_script.lua fit: error: argument --config: cannot read /nonexistent.yaml' },
    -- argparse: an option word is not a value (it took --print_config as the lr and ran)
    { 'fit --model.lr --print_config', 'cli_script.lua fit: error: argument --model.lr: expected one argument' },
    { 'fit --model --trainer.max_epochs 2', 'cli_script.lua fit: error: argument --model: expected one argument' },
    { 'fit --config /tmp', 'cli_script.lua fit: error: argument --config: cannot read /tmp: Is a directory' },
    { 'fit --trainer.callbacks "[{class_path: x}]"', 'cli_script.lua fit: error: argument --trainer.callbacks: trainer.callbacks from a config or the command line' },
  }) do
    it('bad command line: ' .. c[1] .. ': one line on stderr, exit 2', function()
      local o, e, rc = cli(c[1])
      assert.equal(2, rc, o .. e)
      local lines = err_lines(e)
      assert.equal(1, #lines, e)
      assert.equal(c[2], lines[1]:sub(1, #c[2]))
      assert.equal('', o)
    end)
  end

  it('a bad config file: the file and line, or the unknown key (with a did-you-mean), exit 2', function()
    local d = tmpdir()
    h.write_file(d .. '/bad.yaml', 'model:\n  lr: 0.1\n   hidden: 3\n')
    h.write_file(d .. '/key.yaml', 'model:\n  lrx: 0.5\n')
    h.write_file(d .. '/top.yaml', 'trainr:\n  max_epochs: 1\n')
    local _, e, rc = cli('fit --config ' .. h.q(d .. '/bad.yaml'))
    assert.equal(2, rc)
    assert.same({ ('cli_script.lua fit: error: %s/bad.yaml:3: bad indentation: expected a key at column 3'):format(d) },
      err_lines(e))
    -- Lightning 1.9.5 (recorded): error: 'Configuration check failed :: No action for destination key
    -- "model.lrx" to check its value.'
    _, e, rc = cli('fit --config ' .. h.q(d .. '/key.yaml'))
    assert.equal(2, rc)
    assert.same({ ('cli_script.lua fit: error: %s/key.yaml: No action for destination key "model.lrx" to check its'
      .. ' value. (did you mean model.lr?)'):format(d) }, err_lines(e))
    _, e, rc = cli('fit --config ' .. h.q(d .. '/top.yaml'))
    assert.equal(2, rc)
    assert.matches('No action for destination key "trainr" to check its value. %(did you mean trainer%?%)', e)
    os.execute('rm -rf ' .. h.q(d))
  end)

  it('--help: the subcommands; <subcommand> --help: the groups and their options; exit 0', function()
    local o, e, rc = cli('--help')
    assert.equal(0, rc, e)
    assert.matches('^usage: cli_script.lua %[%-h%] {fit,validate,test,predict,tune} %.%.%.', o)
    -- Lightning 1.9.5's descriptions (recorded)
    assert.matches('fit +Runs the full optimization routine%.', o)
    assert.matches('validate +Perform one evaluation epoch over the validation set%.', o)
    assert.matches('tune +Runs routines to tune hyperparameters before training%.', o)
    o, e, rc = cli('test --help --trainer.bogus 1')
    assert.equal(0, rc, e)
    assert.matches('^usage: cli_script.lua test ', o)
    for _, s in ipairs({ '%-c CONFIG, %-%-config CONFIG', '%-%-print_config', '%-%-seed_everything SEED_EVERYTHING',
      '%-%-ckpt_path CKPT_PATH', '%-%-verbose VERBOSE', 'Trainer arguments', '%-%-trainer%.max_epochs MAX_EPOCHS',
      '%-%-trainer%.enable_progress_bar ENABLE_PROGRESS_BAR\n +%(default: false%)', -- trainer_defaults
      'TinyModel constructor parameters', '%-%-model%.hidden HIDDEN', 'TinyData constructor parameters',
      '%-%-data%.batch_size BATCH_SIZE' }) do
      assert.matches(s, o)
    end
    o, e, rc = cli('-h', 'CLI_RUN=0')
    assert.equal(0, rc, e)
    assert.matches('^usage: cli_script.lua %[%-h%] %[%-c CONFIG%]', o)
  end)

  it('config.yaml: refused when it exists (RuntimeError, exit 1) unless overwrite; not with fast_dev_run', function()
    local d = tmpdir()
    local base = 'fit --trainer.max_epochs 1 --trainer.logger false --trainer.default_root_dir ' .. h.q(d)
    local o, e, rc = cli(base)
    assert.equal(0, rc, o .. e)
    assert.is_true(exists(d .. '/config.yaml')) -- without a logger: in default_root_dir, as Lightning
    o, e, rc = cli(base)
    assert.equal(1, rc)
    -- Lightning 1.9.5 (recorded): "RuntimeError: SaveConfigCallback expected /tmp/plcli/config.yaml to NOT
    -- exist. Aborting to avoid overwriting results of a previous run. You can delete the previous config
    -- file, set `LightningCLI(save_config_callback=None)` to disable config saving, or set
    -- `LightningCLI(save_config_kwargs={"overwrite": True})` to overwrite the config file."
    assert.matches(('RuntimeError: SaveConfigCallback expected %s/config.yaml to NOT exist. Aborting to avoid'
      .. ' overwriting results of a previous run.'):format(d):gsub('%-', '%%-'), e)
    assert.equal('', results(o))
    o, e, rc = cli(base .. ' --model.hidden 5', 'CLI_OVERWRITE=1')
    assert.equal(0, rc, o .. e)
    assert.equal(5, yaml.read_file(d .. '/config.yaml').model.hidden)
    local d2 = tmpdir()
    o, e, rc = cli('fit --trainer.fast_dev_run true --trainer.logger false --trainer.default_root_dir ' .. h.q(d2))
    assert.equal(0, rc, o .. e)
    assert.is_false(exists(d2 .. '/config.yaml'))
    o, e, rc = cli('fit --trainer.max_epochs 1 --trainer.logger false --trainer.default_root_dir ' .. h.q(d2), 'CLI_NOSAVE=1')
    assert.equal(0, rc, o .. e)
    assert.is_false(exists(d2 .. '/config.yaml'))
    os.execute('rm -rf ' .. h.q(d) .. ' ' .. h.q(d2))
  end)

  it('under dplhost --nproc 2 with ddp: one config.yaml (rank 0), the same seed and weights on both ranks', function()
    local d = tmpdir()
    local o, e, rc = h.dplhost('--nproc 2 ' .. script .. ' fit --trainer.strategy ddp --trainer.max_epochs 2'
      .. ' --trainer.default_root_dir ' .. h.q(d), { timeout = 180 })
    assert.equal(0, rc, o .. e)
    local r0 = o:match('%[rank 0%] RESULT rank 0 seed (%d+ weights %S+)')
    local r1 = o:match('%[rank 1%] RESULT rank 1 seed (%d+ weights %S+)')
    assert.is_string(r0, o)
    assert.equal(r0, r1)
    assert.matches('world_size=2', o)
    local cfg = yaml.read_file(d .. '/lightning_logs/version_0/config.yaml')
    assert.equal('ddp', cfg.trainer.strategy)
    assert.equal(tonumber(r0:match('^%d+')), cfg.seed_everything)
    assert.equal('1', (select(1, h.sh('find ' .. h.q(d) .. ' -name config.yaml | wc -l')):match('%d+')))
    -- a bad flag under the launcher: still one line (rank 0 reports)
    _, e, rc = h.dplhost('--nproc 2 ' .. script .. ' fit --trainer.max_epoks 1', { timeout = 60 })
    assert.are_not.equal(0, rc)
    local lines = {}
    for _, l in ipairs(err_lines(e)) do if l:find('^%[rank %d%] .*error:') then lines[#lines + 1] = l end end
    assert.same({ '[rank 0] cli_script.lua fit: error: Unrecognized arguments: --trainer.max_epoks (did you mean'
      .. ' --trainer.max_epochs?)' }, lines)
    os.execute('rm -rf ' .. h.q(d))
  end)

  it('options: subclass mode is NotImplementedError; unknown options and bad args are refused', function()
    local dpl = require 'dpl'
    local M = dpl.LightningModule:extend('M')
    function M:__init(a) dpl.LightningModule.__init(self) end
    local C = dpl.cli.LightningCLI
    local ok, e = pcall(C, M, nil, { subclass_mode_model = true, args = {} })
    assert.is_true(errors.is(e, errors.NotImplementedError))
    assert.matches('subclass_mode_model', e.message)
    ok, e = pcall(C, M, M, { subclass_mode_data = true, args = {} })
    assert.matches('subclass_mode_data', e.message)
    ok, e = pcall(C, nil, nil, { args = {} })
    assert.matches('subclass_mode_model', e.message)
    ok, e = pcall(C, M, nil, { bogus = 1 })
    assert.is_false(ok)
    assert.matches('Unexpected keyword parameters: bogus', e.message)
    ok, e = pcall(C, M, nil, { trainer_defaults = { max_epoch = 1 } })
    assert.matches('unknown Trainer argument max_epoch', e.message)
    ok, e = pcall(C, M, nil, { args = 'fit' })
    assert.matches('args must be a list', e.message)
  end)
end)

describe('examples/fashion_mnist_cli.lua', function()
  it('fit for a few batches: trains, validates, saves config.yaml', function()
    if not exists('/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz')
        and not exists('/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte') then
      pending('no Fashion-MNIST data set')
      return
    end
    local d = tmpdir()
    local o, e, rc = h.dplhost(h.q(h.root .. '/examples/fashion_mnist_cli.lua') .. ' fit --trainer.max_epochs 1'
      .. ' --trainer.limit_train_batches 5 --trainer.limit_val_batches 2 --trainer.enable_progress_bar false'
      .. ' --model.hidden 32 --data.batch_size 32 --trainer.default_root_dir ' .. h.q(d), { timeout = 180 })
    assert.equal(0, rc, o .. e)
    assert.matches('`Trainer.fit` stopped: `max_epochs=1` reached.', o .. e, 1, true)
    local cfg = yaml.read_file(d .. '/lightning_logs/version_0/config.yaml')
    assert.same({ hidden = 32, lr = yaml.null }, cfg.model)
    assert.equal(0, cfg.seed_everything) -- seed_everything_default
    os.execute('rm -rf ' .. h.q(d))
  end)
end)
