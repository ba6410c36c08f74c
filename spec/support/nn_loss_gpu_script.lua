-- nn_loss_gpu_script.lua: the loss group on cuda:0 (spec/nn_loss_spec.lua runs it on the CUDA
-- emulator, scripts/cuda-emu/run-ops.sh): each case's loss and input gradient on the GPU
-- against the CPU. Prints one line per case: "name ok", "name NotImplementedError: ..." or
-- "name MISMATCH ...".
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional

local function cases(dev)
  local o = { device = dev }
  local function T(v) return dpl.tensor(v, o) end
  return {
    huber = function(x, y) return F.huber_loss(x, y, { delta = 0.5 }) end,
    smooth_l1 = function(x, y) return F.smooth_l1_loss(x, y) end,
    soft_margin = function(x, y) return F.soft_margin_loss(x, y:sign()) end,
    kl_div = function(x, y) return F.kl_div(x:log_softmax(2), y:softmax(2), { reduction = 'batchmean' }) end,
    bce = function(x, y) return F.binary_cross_entropy(x:sigmoid(), y:sigmoid(), { weight = dpl.ones(5, o) * 0.5 }) end,
    bce_logits = function(x, y)
      return F.binary_cross_entropy_with_logits(x, y:sigmoid(), { pos_weight = dpl.ones(5, o) * 2 })
    end,
    poisson = function(x, y) return F.poisson_nll_loss(x, y:abs() * 3, { full = true }) end,
    gaussian = function(x, y) return F.gaussian_nll_loss(x, y, dpl.ones(4, o) * 0.7) end,
    cross_entropy = function(x) return F.cross_entropy(x, T({ 1, 3, 5, 2 }), { label_smoothing = 0.1,
      weight = dpl.ones(5, o) * 0.5 + dpl.arange(5, o):float() * 0.1 }) end,
    cross_entropy_probs = function(x, y) return F.cross_entropy(x, y:softmax(2)) end,
    nll_loss = function(x) return F.nll_loss(x:log_softmax(2), T({ 1, 3, 5, 2 }), { weight = dpl.ones(5, o) * 2 }) end,
    multilabel_soft_margin = function(x, y) return F.multilabel_soft_margin_loss(x, y:gt(0)) end,
    multilabel_margin = function(x)
      return F.multilabel_margin_loss(x, T({ { 1, 2, 0, 0, 0 }, { 5, 0, 0, 0, 0 }, { 3, 4, 5, 1, 2 }, { 0, 1, 1, 1, 1 } }))
    end,
    multi_margin = function(x) return F.multi_margin_loss(x, T({ 1, 3, 5, 2 }), { p = 2, weight = dpl.ones(5, o) }) end,
    margin_ranking = function(x, y) return F.margin_ranking_loss(x, y, y:sign(), { margin = 0.1 }) end,
    hinge_embedding = function(x, y) return F.hinge_embedding_loss(x, y:sign()) end,
    cosine_embedding = function(x, y) return F.cosine_embedding_loss(x, y, T({ 1, -1, 1, -1 })) end,
    triplet = function(x, y) return F.triplet_margin_loss(x, y, y * 2, { swap = true, p = 3 }) end,
    cosine_similarity = function(x, y) return F.cosine_similarity(x, y):sum() end,
    pairwise_distance = function(x, y) return F.pairwise_distance(x, y, 3):sum() end,
    normalize = function(x) return F.normalize(x):pow(2):sum() end,
    logsigmoid = function(x) return F.logsigmoid(x):sum() end,
    softmin = function(x) return F.softmin(x, 2):pow(2):sum() end,
    softsign = function(x) return F.softsign(x):sum() end,
    tanhshrink = function(x) return F.tanhshrink(x):sum() end,
    glu = function(x) return F.glu(x:narrow(2, 1, 4)):sum() end,
    threshold = function(x) return F.threshold(x, 0.1, 2):sum() end,
    prelu = function(x) return nn.PReLU(5, 0.3):to(dev)(x):sum() end,
    softmax2d = function(x) return nn.Softmax2d()(x:view(1, 4, 5, 1)):pow(2):sum() end,
    local_response_norm = function(x) return F.local_response_norm(x:view(2, 2, 5), 2):sum() end,
    instance_norm = function(x)
      return nn.InstanceNorm1d(2, { affine = true, track_running_stats = true }):to(dev)(x:view(2, 2, 5)):pow(3):sum()
    end,
    batch_norm3d = function(x) return nn.BatchNorm3d(2):to(dev)(x:view(1, 2, 2, 5, 1)):pow(3):sum() end,
    relu6 = function(x) return F.relu6(x):sum() end,
    hardsigmoid = function(x) return F.hardsigmoid(x):sum() end,
    selu = function(x) return F.selu(x):sum() end,
    celu = function(x) return F.celu(x, 0.5):sum() end,
    ctc = function(x) return F.ctc_loss(x:view(4, 1, 5):log_softmax(3), dpl.tensor({ { 2, 3 } }), { 4 }, { 2 }) end,
  }
end

local function run(dev, name)
  dpl.manual_seed(1)
  local x = dpl.randn(4, 5):to(dev):requires_grad_()
  local y = dpl.randn(4, 5):to(dev)
  local l = cases(dev)[name](x, y)
  l:backward()
  return l:item(), x.grad:cpu()
end

local names = {}
for k in pairs(cases('cpu')) do names[#names + 1] = k end
table.sort(names)
for _, name in ipairs(names) do
  local lc, gc = run('cpu', name)
  local ok, lg, gg = pcall(run, 'cuda:0', name)
  if not ok then
    print(name .. ' ' .. tostring(lg):gsub('\n.*', ''))
  else
    local d = math.abs(lg - lc) / math.max(1, math.abs(lc))
    local dg = (gg - gc):abs():max():item()
    if d < 1e-5 and dg < 1e-5 then print(name .. ' ok')
    else print(('%s MISMATCH loss %.9g vs cpu %.9g, gradient max diff %.3g'):format(name, lg, lc, dg)) end
  end
end
