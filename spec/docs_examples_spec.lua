-- The docs' runnable ```lua blocks, taken from the docs themselves and run in a fresh dplhost
-- (in a temporary directory), so that an example that stops working, or a doc edit that breaks
-- one, fails here. A block is found by a line it contains; what a block leaves undefined (a
-- model, a tensor, a Trainer kept short) comes from a prelude, and a postlude checks what the
-- doc says happens. Blocks that are sketches (`...` placeholders, optional-argument notation)
-- are not listed.
local h = require 'spec.support.helpers'

local function read(path)
  local f = assert(io.open(path, 'rb'))
  local s = f:read('*a')
  f:close()
  return s
end

-- the ```lua block of docs/<doc> that contains `marker` (plain text)
local function block(doc, marker)
  local text = read(h.root .. '/docs/' .. doc)
  for code in text:gmatch('```lua\n(.-)\n```') do
    if code:find(marker, 1, true) then return code end
  end
  error(('docs/%s: no ```lua block contains %q any more'):format(doc, marker))
end

-- runs prelude .. block .. postlude in a temporary directory; returns stdout, stderr, status
local function run(code, env)
  local dir = h.tmpname('.docs')
  assert(os.execute('mkdir -p ' .. h.q(dir)) == 0)
  h.write_file(dir .. '/example.lua', code)
  local o, e, rc = h.sh(('cd %s && env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE -u MASTER_ADDR'
    .. ' -u MASTER_PORT -u DPL_JOB_ID DPL_DATA_CACHE=0 %s %s example.lua'):format(h.q(dir), env or '', h.q(h.bin)),
    { timeout = 60 })
  os.execute('rm -rf ' .. h.q(dir))
  return o, e, rc
end

local function fashion_mnist()
  local f = io.open('/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz', 'rb')
  if f then f:close() end
  return f ~= nil
end

local cases = {
  { doc = 'metrics.md', marker = 'local batch_acc = acc(preds, target)', stdout = '^0%.5\t0%.6666666865348' },
  { doc = 'distributions.md', marker = 'local z = q:rsample({ 8 })', stdout = '^8\ttrue\t3\n$' },
  { doc = 'linalg.md', marker = 'local x = la.solve(A, dpl.tensor({ 1, 2 }',
    postlude = "\nassert((A:matmul(x) - dpl.tensor({ 1, 2 }, { dtype = 'float64' })):abs():max():item() < 1e-12)"
      .. "\nassert((L:matmul(L:t()) - A):abs():max():item() < 1e-12 and w[1]:item() < w[2]:item())\nprint('ok')",
    stdout = '^11\t.*ok\n$' },
  { doc = 'tensors.md', marker = 'local y = (x:matmul(w:float():cpu()) + 1):relu()', env = 'DPL_VIRTUAL_GPUS=1',
    -- w is zeros: every row of y is 10 ones
    stdout = '^10\t' },
  { doc = 'tensors.md', marker = "st.save('model.safetensors'",
    prelude = "local dpl = require 'dpl'; local w = dpl.randn(3, 2)\n",
    postlude = "\nassert(tensors.weight:equal(w) and tensors.step:item() == 10 and metadata.epoch == '3')\nprint('ok')",
    stdout = '^ok\n$' },
  { doc = 'tensors.md', marker = "dpl.save({ model = model:state_dict()",
    prelude = "local dpl = require 'dpl'; local model = dpl.nn.Linear(3, 2)\n"
      .. "local opt = dpl.optim.SGD(model:parameters(), { lr = 0.1, momentum = 0.9 })\n",
    postlude = "\nassert(ck.epoch == 3)\nprint('ok')", stdout = '^ok\n$' },
  { doc = 'autograd.md', marker = 'loss:backward()                                  -- fills x.grad and w.grad',
    stdout = '^tensor%(.*shape=%[4, 2%].*\tsum\ttrue\n$' },
  { doc = 'autograd.md', marker = 'dpl.autograd.record(rule, out, x)',
    prelude = "local dpl = require 'dpl'; local x = dpl.tensor({1, 2}, { dtype = 'float64', requires_grad = true })\n",
    postlude = "\nout:sum():backward()\nassert(x.grad:equal(dpl.tensor({2, 4}, { dtype = 'float64' })))\n"
      .. "print(out.grad_fn.name)", stdout = '^square\n$' },
  { doc = 'autograd.md', marker = 'local y = dpl.utils.checkpoint(block, x)',
    prelude = "local dpl = require 'dpl'; local nn = dpl.nn\n"
      .. "local block = nn.Sequential(nn.Linear(4, 4), nn.Tanh())\n"
      .. "local fn = function(a, k, h) return a * k, a + h end\n"
      .. "local h = dpl.randn(2, 4); local x = dpl.randn(2, 4, { requires_grad = true })\n"
      .. "local seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.Tanh())\n",
    postlude = "\n;(y:sum() + a:sum() + b:sum() + out:sum()):backward()\n"
      .. "print(x.grad.shape[1], x.grad.shape[2], block[1].weight.grad ~= nil, seq[3].weight.grad ~= nil)",
    stdout = '^2\t4\ttrue\ttrue\n$' },
  { doc = 'torch7.md', marker = "local opt = dpl.optim.SGD(model:parameters(), { lr = 0.1 })   -- once",
    prelude = "local dpl = require 'dpl'; local nn = dpl.nn\n"
      .. "local model = nn.Linear(4, 3); local criterion = nn.CrossEntropyLoss()\n"
      .. "local x, y = dpl.randn(5, 4), dpl.tensor({ 1, 2, 3, 1, 2 })\n",
    postlude = "\nprint(loss:dim(), loss:item() == loss:item(), model.weight.grad ~= nil)", stdout = '^0\ttrue\ttrue\n$' },
  { doc = 'nn.md', marker = "local Net = nn.Module:extend('Net')",
    prelude = "local dpl = require 'dpl'; local nn, F = dpl.nn, dpl.nn.functional; local x = dpl.randn(2, 784)\n",
    postlude = "\nprint(y.shape[1], y.shape[2], #net:parameters(), #net:state_dict_keys())",
    stdout = '^2\t10\t6\t7\n$' },
  { doc = 'nn.md', marker = "st.load_model(model, 'mlp.safetensors')",
    prelude = "local dpl = require 'dpl'; local nn = dpl.nn\n"
      .. "dpl.safetensors.save('mlp.safetensors', { ['0.weight'] = dpl.randn(16, 6), ['0.bias'] = dpl.zeros(16),\n"
      .. "  ['2.weight'] = dpl.ones(3, 16), ['2.bias'] = dpl.tensor({ 1, 2, 3 }) }, { format = 'pt' })\n",
    postlude = "\nlocal back = dpl.safetensors.load('mlp_trained.safetensors')\n"
      .. "print(y.shape[1], y.shape[2], model[3].bias[3]:item(), back['2.bias'][2]:item(), back['1.weight'] == nil)",
    stdout = '^4\t3\t3\t2\ttrue\n$' },
  { doc = 'distributed.md', marker = 'dist.init_process_group{}',
    prelude = "local dpl = require 'dpl'; local grad, weights = dpl.ones(4), dpl.ones(3)\n",
    postlude = "\nprint(rank, size, grad[1]:item(), #metrics, metrics[1].n)", stdout = '^0\t1\t1\t1\t128\n$' },
  { doc = 'trainer.md', marker = "local Stream = dpl.data.IterableDataset:extend('Stream')",
    prelude = "local dpl = require 'dpl'\n", postlude = "\nprint(table.concat(sizes, ','))", stdout = '^2,2,2,1\n$' },
  { doc = 'trainer.md', marker = "local FashionData = dpl.LightningDataModule:extend('FashionData')", data = true,
    prelude = "local dpl = require 'dpl'\n"
      .. "local M = dpl.LightningModule:extend('M')\n"
      .. "function M:__init() dpl.LightningModule.__init(self); self.net = dpl.nn.Sequential(dpl.nn.Flatten(), dpl.nn.Linear(784, 10)) end\n"
      .. "function M:training_step(b) return dpl.nn.functional.cross_entropy(self.net(b[1]), b[2]) end\n"
      .. "function M:test_step(b) self:log('test_loss', dpl.nn.functional.cross_entropy(self.net(b[1]), b[2])) end\n"
      .. "function M:configure_optimizers() return dpl.optim.SGD(self:parameters(), { lr = 0.1 }) end\n"
      .. "local model = M()\n"
      .. "local trainer = dpl.Trainer{ max_epochs = 1, limit_train_batches = 3, limit_val_batches = 1, limit_test_batches = 1,\n"
      .. "  enable_progress_bar = false, enable_model_summary = false, logger = false, default_root_dir = '.' }\n",
    postlude = "\nprint(trainer.global_step, trainer.callback_metrics.test_loss ~= nil)", stdout = '\n3\ttrue\n$' },
}

describe('docs examples', function()
  for _, c in ipairs(cases) do
    it(('docs/%s: the block with %q runs as the doc says'):format(c.doc, c.marker:sub(1, 50)), function()
      local code = block(c.doc, c.marker)
      if c.data and not fashion_mnist() then
        pending('Fashion-MNIST is not installed (/usr/share/datasets/fashion-mnist)')
        return
      end
      local o, e, rc = run((c.prelude or '') .. code .. (c.postlude or ''), c.env)
      assert(rc == 0, ('exit status %s\nstdout:\n%s\nstderr:\n%s'):format(tostring(rc), o, e))
      assert(o:find(c.stdout), ('stdout does not match %q:\n%s\nstderr:\n%s'):format(c.stdout, o, e))
    end)
  end
end)
