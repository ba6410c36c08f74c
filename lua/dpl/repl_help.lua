-- dpl.repl_help: help() at the REPL (also dpl.help(obj) anywhere). help() prints an
-- overview; help(obj) / help('dpl.nn.Linear') prints what obj is, its signature and a
-- line or two about it, and where docs/ says more (file:line and its heading).
--
-- Sources, cheapest to keep true first:
--  * the name: found by looking obj up in dpl's modules that are already loaded (and
--    the tensor methods); nothing is loaded for it;
--  * the signature: the Lua function's parameter names (debug.getlocal);
--  * the text: ENTRIES below (one line per main entry point), else the `---` comment
--    right above the function's definition when that line names it, else a module's
--    top comment;
--  * the docs: the first line of the namespace's docs/*.md that names it, read at call
--    time (docs/ beside lua/, in the source tree or share/dplhost/docs).
local complete = require 'dpl.repl_complete'

local M = {}

local fmt = string.format

-- one line each for the main entry points: signature, what it does
local ENTRIES = {
  ['dpl.tensor'] = { 'dpl.tensor(data [, {dtype=, device=, requires_grad=}])', 'a tensor from a number or nested tables (torch.tensor)', 'tensors.md#Constructors' },
  ['dpl.zeros'] = { 'dpl.zeros(sizes... [, {dtype=, device=}])', 'a tensor of zeros; also ones, full, empty, rand, randn, arange, linspace', 'tensors.md#Constructors' },
  ['dpl.save'] = { 'dpl.save(obj, path)', 'torch.save for tensors and tables of them' },
  ['dpl.load'] = { 'dpl.load(path)', 'torch.load: reads what dpl.save wrote' },
  ['dpl.device'] = { 'dpl.device("cpu" | "cuda:1" | "cuda", 1)', 'a device object' },
  ['dpl.seed_everything'] = { 'dpl.seed_everything([seed [, workers]])', "Lightning's seed_everything: seeds dpl and math.random" },
  ['dpl.nn'] = { 'dpl.nn', 'layers, containers, losses; nn.functional, nn.init, nn.utils' },
  ['dpl.nn.Module'] = { 'nn.Module:extend("Name")', 'base class of layers: define __init (calling the parent) and forward', 'nn.md#Modules' },
  ['dpl.nn.Linear'] = { 'nn.Linear(in_features, out_features [, {bias=true, dtype=, device=}])', 'y = x W^T + b' },
  ['dpl.nn.Conv2d'] = { 'nn.Conv2d(in_channels, out_channels, kernel_size [, {stride=, padding=, dilation=, groups=, bias=}])', '2-D convolution over (N, C, H, W)' },
  ['dpl.nn.Sequential'] = { 'nn.Sequential(m1, m2, ...)', 'runs its modules one after the other', 'nn.md#Modules' },
  ['dpl.nn.CrossEntropyLoss'] = { 'nn.CrossEntropyLoss([{weight=, ignore_index=, reduction="mean", label_smoothing=0}])', 'cross entropy of logits against class indices (1-based) or probabilities' },
  ['dpl.nn.MSELoss'] = { 'nn.MSELoss([{reduction="mean"}])', 'mean squared error' },
  ['dpl.nn.functional'] = { 'dpl.nn.functional', "PyTorch's torch.nn.functional: relu, softmax, cross_entropy, conv2d, ..." },
  ['dpl.optim'] = { 'dpl.optim', 'optimizers (SGD, Adam, AdamW, ...) and optim.lr_scheduler', 'nn.md#optim' },
  ['dpl.optim.SGD'] = { 'optim.SGD(params, {lr=, momentum=0, dampening=0, nesterov=false, weight_decay=0})', 'stochastic gradient descent', 'nn.md#optim' },
  ['dpl.optim.Adam'] = { 'optim.Adam(params, {lr=1e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=0, amsgrad=false})', 'Adam', 'nn.md#optim' },
  ['dpl.optim.AdamW'] = { 'optim.AdamW(params, {lr=1e-3, betas={0.9, 0.999}, eps=1e-8, weight_decay=1e-2})', 'Adam with decoupled weight decay', 'nn.md#optim' },
  ['dpl.Trainer'] = { 'dpl.Trainer{max_epochs=, accelerator=, devices=, callbacks=, logger=, ...}', "Lightning 1.9's Trainer: trainer:fit / validate / test / predict" },
  ['dpl.Trainer:fit'] = { 'trainer:fit(model [, train_dataloaders [, val_dataloaders]] [, {datamodule=, ckpt_path=}])', 'trains; ckpt_path="last"/"best"/a file resumes' },
  ['dpl.Trainer:validate'] = { 'trainer:validate(model [, dataloaders] [, {ckpt_path=, datamodule=, verbose=true}])', 'one validation pass; returns a list of metric tables' },
  ['dpl.Trainer:test'] = { 'trainer:test(model [, dataloaders] [, {ckpt_path=, datamodule=, verbose=true}])', 'one test pass; returns a list of metric tables' },
  ['dpl.Trainer:predict'] = { 'trainer:predict(model [, dataloaders] [, {ckpt_path=, datamodule=, return_predictions=true}])', "predict_step's outputs, per batch" },
  ['dpl.LightningModule'] = { 'dpl.LightningModule:extend("Name")', 'define training_step, configure_optimizers, ...; self:log(name, value)', 'trainer.md#LightningModule' },
  ['dpl.LightningDataModule'] = { 'dpl.LightningDataModule:extend("Name")', 'prepare_data, setup(stage), train_dataloader, val_dataloader, ...', 'trainer.md#LightningDataModule' },
  ['dpl.Fabric'] = { 'dpl.Fabric{accelerator=, devices=, strategy=, precision=}', "Lightning Fabric: your own loop with fabric:setup / backward", 'trainer.md#Fabric' },
  ['dpl.callbacks'] = { 'dpl.callbacks', 'ModelCheckpoint, EarlyStopping, LearningRateMonitor, ... (Tab lists them)', 'trainer.md#Callbacks' },
  ['dpl.callbacks.ModelCheckpoint'] = { 'callbacks.ModelCheckpoint{dirpath=, filename=, monitor=, mode="min", save_top_k=1, save_last=}', 'saves checkpoints during fit', 'trainer.md#Callbacks' },
  ['dpl.callbacks.EarlyStopping'] = { 'callbacks.EarlyStopping{monitor=, mode="min", patience=3, min_delta=0}', 'stops fit when the monitored metric stops improving', 'trainer.md#Callbacks' },
  ['dpl.loggers'] = { 'dpl.loggers', 'CSVLogger, TensorBoardLogger', 'trainer.md#Loggers' },
  ['dpl.loggers.CSVLogger'] = { 'loggers.CSVLogger{save_dir=, name="lightning_logs", version=}', '<save_dir>/<name>/version_N/metrics.csv; .log_dir, .version, .name', 'trainer.md#Loggers' },
  ['dpl.loggers.TensorBoardLogger'] = { 'loggers.TensorBoardLogger{save_dir=, name="lightning_logs", version=}', 'TensorBoard event files in .log_dir', 'trainer.md#Loggers' },
  ['dpl.data'] = { 'dpl.data', 'Dataset, TensorDataset, DataLoader, samplers, random_split' },
  ['dpl.data.DataLoader'] = { 'data.DataLoader(dataset [, {batch_size=1, shuffle=false, drop_last=false, collate_fn=}])', 'batches of a dataset', 'nn.md#DataLoader' },
  ['dpl.datasets'] = { 'dpl.datasets', 'FashionMNIST, MNIST-format files' },
  ['dpl.autograd'] = { 'dpl.autograd', 'gradients: t:backward(), dpl.no_grad(fn), autograd.grad, Function', 'autograd.md' },
  ['dpl.metrics'] = { 'dpl.metrics', 'torchmetrics: Accuracy, F1Score, MeanSquaredError, ... and metrics.functional' },
  ['Tensor:backward'] = { 't:backward([gradient])', 'gradients of t with respect to the leaves that require them, into their .grad', 'autograd.md' },
  ['Tensor:to'] = { 't:to(device | dtype | {device=, dtype=})', 'a copy on another device or in another dtype (t itself when nothing changes)' },
}

-- which docs file holds a namespace (longest matching prefix wins)
local DOCS = {
  { 'Tensor:', 'tensors.md' }, { 'dpl.linalg', 'linalg.md' }, { 'dpl.nn', 'nn.md' }, { 'dpl.optim', 'nn.md' },
  { 'dpl.data', 'nn.md' }, { 'dpl.datasets', 'nn.md' }, { 'dpl.Trainer', 'trainer.md' },
  { 'dpl.LightningModule', 'trainer.md' }, { 'dpl.LightningDataModule', 'trainer.md' }, { 'dpl.Fabric', 'trainer.md' },
  { 'dpl.callbacks', 'trainer.md' }, { 'dpl.loggers', 'trainer.md' }, { 'dpl.strategies', 'trainer.md' },
  { 'dpl.profilers', 'trainer.md' }, { 'dpl.tuner', 'trainer.md' }, { 'dpl.cli', 'trainer.md' },
  { 'dpl.autograd', 'autograd.md' }, { 'dpl.distributions', 'distributions.md' }, { 'dpl.metrics', 'metrics.md' },
  { 'dpl.dist', 'distributed.md' }, { 'dpl.devices', 'devices.md' }, { 'dpl.device', 'devices.md' },
  { 'dpl.cuda', 'cuda.md' }, { 'dpl.repl', 'host.md' }, { 'dpl.help', 'host.md' }, { 'dpl.', 'tensors.md' },
}

-- namespaces to name values by (display prefix, module); only modules already loaded are read
local NAMESPACES = {
  { 'dpl', 'dpl' }, { 'dpl', 'dpl.tensor' }, { 'dpl.nn', 'dpl.nn' }, { 'dpl.nn.functional', 'dpl.nn.functional' },
  { 'dpl.nn.init', 'dpl.nn.init_fns' }, { 'dpl.nn.utils', 'dpl.nn.utils' }, { 'dpl.optim', 'dpl.optim' },
  { 'dpl.optim.lr_scheduler', 'dpl.optim.lr_scheduler' }, { 'dpl.callbacks', 'dpl.callbacks' },
  { 'dpl.loggers', 'dpl.loggers' }, { 'dpl.metrics', 'dpl.metrics' }, { 'dpl.data', 'dpl.data' },
  { 'dpl.datasets', 'dpl.datasets' }, { 'dpl.linalg', 'dpl.linalg' }, { 'dpl.autograd', 'dpl.autograd' },
  { 'dpl.distributions', 'dpl.distributions' }, { 'dpl.utils', 'dpl.utils' }, { 'dpl.devices', 'dpl.devices' },
  { 'dpl.cuda', 'dpl.cuda' }, { 'dpl.amp', 'dpl.amp' }, { 'dpl.special', 'dpl.special' }, { 'dpl.dist', 'dpl.dist' },
  { 'dpl.strategies', 'dpl.strategies' }, { 'dpl.profilers', 'dpl.profilers' }, { 'dpl.tuner', 'dpl.tuner' },
}
-- modules that are a class: shown under dpl's name for them
local CLASSES = {
  ['dpl.trainer'] = 'dpl.Trainer', ['dpl.lightning'] = 'dpl.LightningModule',
  ['dpl.datamodule'] = 'dpl.LightningDataModule', ['dpl.fabric'] = 'dpl.Fabric',
}

local function is_class(v)
  return type(v) == 'table' and rawget(v, '__index') ~= nil and type(rawget(v, '__name')) == 'string'
end

-- value -> qualified name, for everything reachable from the loaded namespaces
local function build_names()
  local names = {}
  local function put(v, name)
    if (type(v) == 'function' or type(v) == 'table') and names[v] == nil then names[v] = name end
  end
  local function put_class(cls, name)
    put(cls, name)
    for k, f in next, cls do
      if type(k) == 'string' and type(f) == 'function' and k:sub(1, 1) ~= '_' then put(f, name .. ':' .. k) end
    end
  end
  for mod, name in pairs(CLASSES) do
    local v = package.loaded[mod]
    if type(v) == 'table' then put_class(v, name) end
  end
  for _, ns in ipairs(NAMESPACES) do
    local mod = package.loaded[ns[2]]
    if type(mod) == 'table' then
      put(mod, ns[1])
      local keys = {}
      for k in next, mod do if type(k) == 'string' and k:sub(1, 1) ~= '_' then keys[#keys + 1] = k end end
      table.sort(keys)
      for _, k in ipairs(keys) do
        local v = rawget(mod, k)
        if is_class(v) then put_class(v, ns[1] .. '.' .. k) else put(v, ns[1] .. '.' .. k) end
      end
    end
  end
  local T = package.loaded['dpl.tensor']
  if type(T) == 'table' and type(T.methods) == 'table' then
    for k, f in pairs(T.methods) do if type(k) == 'string' then put(f, 'Tensor:' .. k) end end
  end
  return names
end

-- the directory of docs/, or nil
local docs_dir_cache
local function docs_dir()
  if docs_dir_cache ~= nil then return docs_dir_cache or nil end
  docs_dir_cache = false
  local init = package.searchpath and package.searchpath('dpl', package.path)
  local root = init and init:match('^(.*)/dpl/init%.lua$')
  if root then
    for _, d in ipairs({ root .. '/../docs', root .. '/../../docs' }) do
      local f = io.open(d .. '/host.md', 'r')
      if f then f:close(); docs_dir_cache = d break end
    end
  end
  return docs_dir_cache or nil
end

local function docs_file(name)
  local best, best_len = nil, 0
  for _, e in ipairs(DOCS) do
    if name:sub(1, #e[1]) == e[1] and #e[1] > best_len then best, best_len = e[2], #e[1] end
  end
  return best
end

local function plain(s) return (s:gsub('[%^%$%(%)%%%.%[%]%*%+%-%?]', '%%%0')) end

--- Where docs/ says more about name: 'docs/nn.md:165 (## Layers)', or the file alone.
function M.docs_ref(name)
  local where = ENTRIES[name] and ENTRIES[name][3] -- 'file.md' or 'file.md#heading'
  local file = where and where:match('^[^#]+') or docs_file(name)
  if not file then return nil end
  local dir = docs_dir()
  local f = dir and io.open(dir .. '/' .. file, 'r')
  if not f then return 'docs/' .. file end
  local section = where and where:match('#(.+)$')
  if section then
    local i = 0
    for l in f:lines() do
      i = i + 1
      local h = l:match('^#+ (.*)$')
      if h and h:sub(1, #section) == section then f:close() return fmt('docs/%s:%d (%s)', file, i, l) end
    end
    f:close()
    return 'docs/' .. file
  end
  if where then f:close() return 'docs/' .. file end
  -- what the docs write: nn.Linear, trainer:fit, t:sum, `sum`
  local short = name:gsub('^dpl%.', '')
  local last = name:match('[%.:]([%w_]+)$') or name
  local pats = { plain(short) .. '%f[^%w_]', plain(short:lower()) .. '%f[^%w_]' }
  if short:find(':', 1, true) then pats[#pats + 1] = ':' .. plain(last) .. '%f[^%w_]' end
  pats[#pats + 1] = '`' .. plain(last) .. '%f[^%w_]'
  pats[#pats + 1] = '%f[%w_]' .. plain(last) .. '%f[^%w_]'
  local lines, heading_of, in_code = {}, {}, false
  local heading
  for l in f:lines() do
    lines[#lines + 1] = l
    if l:match('^```') then in_code = not in_code end
    if not in_code and l:match('^#+ ') then heading = l end
    heading_of[#lines] = not in_code and heading or false -- (false: inside a code block)
  end
  f:close()
  -- best first: a heading naming it, a list item or table row naming it in backquotes, any
  -- prose line naming it in backquotes, then any line (examples included)
  -- how a definition reads: `Linear(...)`, `ModelCheckpoint{...}`, `trainer:fit(...)`, `sum`
  local defs = { '`' .. plain(short) .. '[%(%{`]', '`' .. plain(short:lower()) .. '[%(%{`]',
    '`' .. plain(last) .. '[%(%{`]', '`[%w_]+[:%.]' .. plain(last) .. '[%(%{`]' }
  local function at(i) return fmt('docs/%s:%d%s', file, i, heading_of[i] and (' (' .. heading_of[i] .. ')') or '') end
  local function find(accept)
    for _, p in ipairs(pats) do
      for i, l in ipairs(lines) do
        if i > 1 and l:find(p) and accept(l, i) then return at(i) end
      end
    end
  end
  local function first_def()
    for i, l in ipairs(lines) do
      if heading_of[i] then
        for _, p in ipairs(defs) do if l:find(p) then return at(i) end end
      end
    end
  end
  return find(function(l) return l:match('^#+ ') end)
    or first_def()
    or find(function(l, i) return heading_of[i] and l:match('^%s*[-*|]') and l:find('`', 1, true) end)
    or find(function(l, i) return heading_of[i] and l:find('`', 1, true) end)
    or find(function() return true end)
    or 'docs/' .. file
end

-- the `---`/`--` comment block right above line n of a source file, when line n names `short`
local function comment_above(path, n, short)
  local f = io.open(path, 'r')
  if not f then return nil end
  local lines, i = {}, 0
  for l in f:lines() do
    i = i + 1
    lines[i] = l
    if i >= n then break end
  end
  f:close()
  if not lines[n] or not lines[n]:find(short, 1, true) then return nil end
  local out = {}
  for j = n - 1, math.max(1, n - 12), -1 do
    local c = lines[j]:match('^%s*%-%-%-?%s?(.*)$')
    if not c or c:match('^%-%-%-%-') then break end
    table.insert(out, 1, c)
  end
  return #out > 0 and table.concat(out, '\n  ') or nil
end

-- a file's first comment block (a module's description)
local function top_comment(path)
  local f = path and io.open(path, 'r')
  if not f then return nil end
  local out = {}
  for l in f:lines() do
    local c = l:match('^%-%-%s?(.*)$')
    if not c or #out >= 6 then break end
    out[#out + 1] = c
  end
  f:close()
  return #out > 0 and table.concat(out, '\n  ') or nil
end

local function params(fn)
  local ps = {}
  for i = 1, 50 do
    local n = debug.getlocal(fn, i)
    if not n then break end
    ps[#ps + 1] = n
  end
  local info = debug.getinfo(fn, 'u')
  if info and info.isvararg then ps[#ps + 1] = '...' end
  return ps
end

local function signature(fn, name)
  local info = debug.getinfo(fn, 'S')
  if info.what == 'C' then return name .. '(...)', nil end
  local ps = params(fn)
  if name:find(':', 1, true) and (ps[1] == 'self' or ps[1] == 't') then table.remove(ps, 1) end
  return name .. '(' .. table.concat(ps, ', ') .. ')', info
end

local function source_file(info)
  local src = info and info.source
  return src and src:sub(1, 1) == '@' and src:sub(2) or nil
end

local function overview(out)
  out([[
help(obj) or help("dpl.nn.Linear"): what obj is, its signature, and where docs/ says more.
  dpl.tensor(data) / dpl.zeros(2, 3) / dpl.randn(4, 5)   tensors           docs/tensors.md
  dpl.nn (nn.Linear, nn.Sequential, nn.functional)         layers, losses    docs/nn.md
  dpl.optim (optim.SGD, optim.Adam, optim.lr_scheduler)    optimizers        docs/nn.md
  dpl.data (DataLoader, TensorDataset), dpl.datasets       data              docs/nn.md
  dpl.Trainer, dpl.LightningModule, dpl.callbacks,         training          docs/trainer.md
  dpl.loggers, dpl.Fabric
  dpl.autograd, dpl.metrics, dpl.linalg, dpl.distributions                   docs/*.md
At the prompt: Tab completes names (dpl.ten<Tab>, t:re<Tab>), =expr or a bare expression
prints it, _ is the last result, Ctrl-C interrupts, Ctrl-D leaves, history in
~/.dplhost_history (DPL_HISTORY). The REPL: docs/host.md.]])
end

--- help([obj [, out]]) -> nothing; prints, through out(line) when given (default: io.stdout).
function M.help(...)
  local _, o = ...
  local out = type(o) == 'function' and o or function(s) io.stdout:write(s, '\n') end
  if select('#', ...) == 0 then return overview(out) end
  local obj = ...
  local asked
  if type(obj) == 'string' and obj:match('^[%a_][%w_%.:]*$') then
    asked = obj
    local path = obj:gsub(':', '.')
    local v = complete.resolve(path)
    if v == nil and obj:match('^Tensor[%.:]') then
      local T = package.loaded['dpl.tensor'] or require('dpl.tensor')
      v = T.methods[obj:match('[%.:]([%w_]+)$')]
    end
    if v == nil then
      local e = ENTRIES[obj] or ENTRIES['dpl.' .. obj]
      if e then
        out(e[1]); out('  ' .. e[2])
        local ref = M.docs_ref(ENTRIES[obj] and obj or 'dpl.' .. obj)
        if ref then out('  more: ' .. ref) end
        return
      end
      return out(fmt('help: no %s found (not a global, a field path from one, or a Tensor method)', obj))
    end
    obj = v
  end
  if obj == nil then
    return out('help: the value is nil (a misspelt name? Tab completes names; help() lists the main ones)')
  end
  local ty = type(obj)
  local T = package.loaded['dpl.tensor']
  if ty == 'cdata' and T and T.is_tensor(obj) then
    local dims = {}
    for i = 1, obj:dim() do dims[i] = tostring(obj:size(i)) end
    out(fmt('a Tensor: shape [%s], dtype %s, device %s', table.concat(dims, ', '), tostring(obj.dtype), tostring(obj.device)))
    out('  methods: t:<Tab> lists them; help(t.sum) for one')
    out('  more: ' .. (M.docs_ref('Tensor:') or 'docs/tensors.md'))
    return
  end
  local names = build_names()
  local name = names[obj]
  local instance_of
  if not name and ty == 'table' then
    local mt = getmetatable(obj)
    if type(mt) == 'table' and names[mt] then instance_of = names[mt]; name = names[mt] end
  end
  if not name and ty ~= 'function' and ty ~= 'table' then
    return out(fmt('help: %s is a %s value; there is no documentation for it', asked or tostring(obj), ty))
  end
  name = name or asked
  local entry = name and ENTRIES[name]
  if instance_of then
    out(fmt('an instance of %s: %s', instance_of, tostring(obj):match('^[^\n]*')))
  end
  if entry then
    out(entry[1]); out('  ' .. entry[2])
  elseif ty == 'function' then
    local sig, info = signature(obj, name or 'function')
    out(sig)
    local file = source_file(info)
    local short = name and (name:match('[%.:]([%w_]+)$') or name)
    local doc = file and short and comment_above(file, info.linedefined, short)
    if doc then out('  ' .. doc) end
    if info then out(fmt('  defined at %s:%d', info.short_src, info.linedefined)) end
    if not name then return out("  (not one of dpl's names: no docs for it)") end
  elseif not name then
    return out("a table, not one of dpl's names: Tab after its name lists its fields")
  else
    -- a module or a class
    out(name .. (is_class(obj) and '  (class: call it to make one; Tab after the name lists its methods)' or ''))
    local init = is_class(obj) and rawget(obj, '__init')
    local mod = not is_class(obj) and name and name:gsub('^dpl%.', 'dpl.')
    local doc
    if init then
      local info = debug.getinfo(init, 'S')
      doc = source_file(info) and comment_above(source_file(info), info.linedefined, '__init')
      local ps = params(init)
      table.remove(ps, 1)
      out(fmt('  %s(%s)', name:gsub('^dpl%.', ''), table.concat(ps, ', ')))
    elseif mod then
      local path = package.searchpath and package.searchpath(mod, package.path)
      doc = top_comment(path)
    end
    if doc then out('  ' .. doc) end
  end
  local ref = name and M.docs_ref(name)
  if ref then out('  more: ' .. ref) end
end

return M
