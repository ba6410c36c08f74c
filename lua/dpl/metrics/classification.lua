-- dpl.metrics.classification: torchmetrics 0.11's classification metrics on dplhost tensors:
-- the stat-score family (Accuracy, Precision, Recall, F1Score, FBetaScore, Specificity,
-- StatScores) for binary, multiclass and multilabel tasks with average micro / macro /
-- weighted / none, top_k, threshold and ignore_index; ConfusionMatrix; AUROC and
-- AveragePrecision (exact, over every distinct score). Classes are 1-based, as every
-- index in dplhost: multiclass targets and label predictions are 1..num_classes, and the
-- class dim of score predictions is dim 2 ([N, C, ...]). Only multidim_average='global'.
-- dpl.metrics installs these (require(...)(M, Metric)) with the task wrappers
-- (Accuracy({task=...}) ...) and the functional forms (M.functional.accuracy(preds, target, opts)).
local T = require 'dpl.tensor'
local errors = require 'dpl.errors'

local type, tostring, pairs, ipairs = type, tostring, pairs, ipairs
local fmt = string.format
local lua_error = error

local function value_error(msg) lua_error(errors.ValueError(msg), 0) end
local function runtime_error(msg) lua_error(errors.RuntimeError(msg), 0) end
local is_tensor = T.is_tensor

return function(M, Metric)
  local F = M.functional

  ---------------------------------------------------------------- argument checks
  local function need_int(name, what, v, lo)
    if type(v) ~= 'number' or v ~= math.floor(v) or v < lo then
      value_error(fmt('%s: expected argument `%s` to be an integer larger than %d, but got %s', name, what, lo - 1, tostring(v)))
    end
  end
  local AVERAGES = { micro = true, macro = true, weighted = true, none = true }
  local function check_average(name, avg)
    if avg ~= nil and not AVERAGES[avg] then
      value_error(fmt("%s: expected argument `average` to be one of ('micro', 'macro', 'weighted', 'none', None), but got %s",
        name, tostring(avg)))
    end
  end
  local function check_mda(name, mda)
    if mda ~= nil and mda ~= 'global' then
      if mda == 'samplewise' then
        lua_error(errors.NotImplementedError(name .. ": multidim_average='samplewise' is not implemented in dplhost"), 0)
      end
      value_error(fmt("%s: expected argument `multidim_average` to be one of ('global', 'samplewise'), but got %s", name, tostring(mda)))
    end
  end
  local function check_tensors(name, preds, target)
    if not is_tensor(preds) then value_error(fmt('%s: preds must be a tensor, got %s', name, type(preds))) end
    if not is_tensor(target) then value_error(fmt('%s: target must be a tensor, got %s', name, type(target))) end
    if target._dtype <= 3 then
      runtime_error(fmt('%s: expected argument `target` to be an int or long tensor, but got tensor with dtype %s', name,
        T.dtype_names[target._dtype]))
    end
  end
  local function same_shape(name, preds, target)
    local a, b = preds:size(), target:size()
    local same = #a == #b
    for i = 1, #a do if a[i] ~= b[i] then same = false end end
    if not same then
      runtime_error(fmt('%s: expected `preds` and `target` to have the same shape, but got %s and %s', name,
        tostring(preds.shape), tostring(target.shape)))
    end
  end
  local function values_in(name, what, t, allowed_lo, allowed_hi, ignore)
    local ok = t:ge(allowed_lo):logical_and(t:le(allowed_hi))
    if ignore ~= nil then ok = ok:logical_or(t:eq(ignore)) end
    if not ok:all():item() then
      local bad = t:reshape(-1)[ok:reshape(-1):logical_not()]:unique()
      runtime_error(fmt('%s: detected the following values in `%s`: %s but expected only values in %d..%d%s', name, what,
        tostring(bad:totable() and table.concat(bad:totable(), ', ')), allowed_lo, allowed_hi,
        ignore ~= nil and (' or the ignore_index ' .. tostring(ignore)) or ''))
    end
  end
  local function to_probs_sigmoid(p)
    if p:lt(0):logical_or(p:gt(1)):any():item() then return p:sigmoid() end
    return p
  end

  ---------------------------------------------------------------- per-task statistics
  -- binary: tp, fp, tn, fn (0-d int64)
  local function binary_stats(name, preds, target, threshold, ignore)
    check_tensors(name, preds, target)
    same_shape(name, preds, target)
    values_in(name, 'target', target, 0, 1, ignore)
    local p
    if preds._dtype <= 3 then p = to_probs_sigmoid(preds):gt(threshold)
    else values_in(name, 'preds', preds, 0, 1); p = preds:eq(1) end
    p, target = p:reshape(-1), target:reshape(-1)
    if ignore ~= nil then
      local keep = target:ne(ignore)
      p, target = p[keep], target[keep]
    end
    local t1, p1 = target:eq(1), p
    local t0, p0 = t1:logical_not(), p1:logical_not()
    local function count(a, b) return a:logical_and(b):sum() end
    return count(p1, t1), count(p1, t0), count(p0, t0), count(p0, t1)
  end
  -- multiclass: per-class tp, fp, tn, fn ([C] int64); preds scores [N, C, ...] or labels [N, ...]
  local function multiclass_stats(name, preds, target, C, top_k, ignore)
    check_tensors(name, preds, target)
    local scores = preds._ndim == target._ndim + 1
    if scores then
      if preds._dtype > 3 then runtime_error(name .. ': preds with a class dim must be floating point') end
      if tonumber(preds._shape[1]) ~= C then
        runtime_error(fmt('%s: expected `preds.shape[2]` to be equal to the number of classes %d, but got %d', name, C,
          tonumber(preds._shape[1])))
      end
    else
      same_shape(name, preds, target)
      if preds._dtype <= 3 then runtime_error(name .. ': preds of the shape of target must be integer class labels (1-based)') end
      if top_k > 1 then runtime_error(name .. ': top_k > 1 needs preds with a class dim ([N, C, ...] scores)') end
      values_in(name, 'preds', preds, 1, C)
    end
    values_in(name, 'target', target, 1, C, ignore)
    -- samples as rows: scores [M, C], labels and targets [M]
    local tg = target:reshape(-1)
    local sc
    if scores then sc = preds:movedim(2, -1):reshape(-1, C) end
    local lab = not scores and preds:reshape(-1) or nil
    if ignore ~= nil then
      local keep = tg:ne(ignore)
      tg = tg[keep]
      if sc then sc = sc[keep] else lab = lab[keep] end
    end
    local n = tonumber(tg._shape[0])
    if top_k == 1 then
      if sc then lab = sc:argmax(2) end
      local idx = (tg:to('int64') - 1) * C + (lab:to('int64') - 1)
      local cm = T.bincount(idx, { minlength = C * C }):reshape(C, C)
      local tp = cm:diagonal()
      local fp = cm:sum(1) - tp
      local fn = cm:sum(2) - tp
      local tn = -(tp + fp + fn) + n
      return tp, fp, tn, fn
    end
    if top_k > C then value_error(fmt('%s: top_k (%d) is larger than the number of classes (%d)', name, top_k, C)) end
    local _, ti = sc:topk(top_k, 2)
    local pred_oh = T.zeros({ n, C }, { dtype = 'int64' }):scatter_(2, ti, 1):eq(1)
    local tgt_oh = T.zeros({ n, C }, { dtype = 'int64' }):scatter_(2, tg:to('int64'):unsqueeze(2), 1):eq(1)
    local function count(a, b) return a:logical_and(b):sum(1) end
    local np, nt = pred_oh:logical_not(), tgt_oh:logical_not()
    return count(pred_oh, tgt_oh), count(pred_oh, nt), count(np, nt), count(np, tgt_oh)
  end
  -- multilabel: per-label tp, fp, tn, fn ([L] int64); preds and target [N, L, ...]
  local function multilabel_stats(name, preds, target, L, threshold, ignore)
    check_tensors(name, preds, target)
    same_shape(name, preds, target)
    if preds._ndim < 2 or tonumber(preds._shape[1]) ~= L then
      runtime_error(fmt('%s: expected both `target.shape[2]` and `preds.shape[2]` to be equal to the number of labels %d',
        name, L))
    end
    values_in(name, 'target', target, 0, 1, ignore)
    local p
    if preds._dtype <= 3 then p = to_probs_sigmoid(preds):gt(threshold)
    else values_in(name, 'preds', preds, 0, 1); p = preds:eq(1) end
    p = p:movedim(2, -1):reshape(-1, L)
    local tg = target:movedim(2, -1):reshape(-1, L)
    local valid = ignore ~= nil and tg:ne(ignore) or nil
    local t1 = tg:eq(1)
    local function count(a, b)
      local x = a:logical_and(b)
      if valid then x = x:logical_and(valid) end
      return x:sum(1)
    end
    local np, t0 = p:logical_not(), t1:logical_not()
    if valid then t0 = t0:logical_and(valid) end
    return count(p, t1), count(p, t0), count(np, t0), count(np, t1)
  end

  ---------------------------------------------------------------- reductions (torchmetrics' formulas)
  local function safe_div(num, den)
    num, den = num:double(), den:double()
    return num / T.where(den:eq(0), T.ones_like(den), den)
  end
  local function reduce(score_of, tp, fp, tn, fn, average, multilabel_acc)
    if average == 'binary' then return score_of(tp, fp, tn, fn):float() end
    if average == 'micro' then
      return score_of(tp:sum(), fp:sum(), tn:sum(), fn:sum()):float()
    end
    local score = score_of(tp, fp, tn, fn)
    if average == 'none' or average == nil then return score:float() end
    local w = average == 'weighted' and (tp + fn):double() or T.ones_like(score)
    return safe_div(w * score, w:sum(-1, true)):sum(-1):float()
  end
  local scores = {
    accuracy = function(tp, fp, tn, fn) return safe_div(tp, tp + fn) end,
    accuracy_all = function(tp, fp, tn, fn) return safe_div(tp + tn, tp + tn + fp + fn) end,
    precision = function(tp, fp) return safe_div(tp, tp + fp) end,
    recall = function(tp, fp, tn, fn) return safe_div(tp, tp + fn) end,
    specificity = function(tp, fp, tn) return safe_div(tn, tn + fp) end,
  }
  local function fbeta_score(beta)
    local b2 = beta * beta
    return function(tp, fp, tn, fn) return safe_div(tp * (1 + b2), tp * (1 + b2) + fn * b2 + fp) end
  end

  ---------------------------------------------------------------- the stat-score classes
  local BIN_KEYS = { threshold = true, multidim_average = true, ignore_index = true, validate_args = true }
  local MC_KEYS = { num_classes = true, top_k = true, average = true, multidim_average = true, ignore_index = true,
    validate_args = true }
  local ML_KEYS = { num_labels = true, threshold = true, average = true, multidim_average = true, ignore_index = true,
    validate_args = true }
  local function with(keys, extra)
    local r = {}
    for k in pairs(keys) do r[k] = true end
    for k in pairs(extra or {}) do r[k] = true end
    return r
  end

  -- defines Binary<Name>, Multiclass<Name>, Multilabel<Name> for a score
  local function family(base, score_name, opts)
    opts = opts or {}
    local extra = opts.extra_keys
    local Bin = Metric:extend('Binary' .. base)
    function Bin:__init(o)
      o = self:_check_opts('Binary' .. base, o, with(BIN_KEYS, extra))
      Metric.__init(self, o)
      check_mda(self.__name, o.multidim_average)
      self.threshold = o.threshold or 0.5
      self.ignore_index = o.ignore_index
      if opts.init then opts.init(self, o) end
      for _, s in ipairs({ 'tp', 'fp', 'tn', 'fn' }) do self:add_state(s, T.tensor(0, { dtype = 'int64' }), 'sum') end
    end
    function Bin:update(preds, target)
      local tp, fp, tn, fn = binary_stats(self.__name, preds, target, self.threshold, self.ignore_index)
      self.tp, self.fp, self.tn, self.fn = self.tp + tp, self.fp + fp, self.tn + tn, self.fn + fn
    end
    function Bin:compute()
      local f = opts.score and opts.score(self) or scores[score_name == 'accuracy' and 'accuracy_all' or score_name]
      return reduce(f, self.tp, self.fp, self.tn, self.fn, 'binary')
    end
    local Mc = Metric:extend('Multiclass' .. base)
    function Mc:__init(o)
      o = self:_check_opts('Multiclass' .. base, o, with(MC_KEYS, extra))
      Metric.__init(self, o)
      need_int(self.__name, 'num_classes', o.num_classes, 2)
      check_average(self.__name, o.average)
      check_mda(self.__name, o.multidim_average)
      self.num_classes = o.num_classes
      self.top_k = o.top_k or 1
      need_int(self.__name, 'top_k', self.top_k, 1)
      self.average = o.average == nil and 'macro' or o.average
      self.ignore_index = o.ignore_index
      if opts.init then opts.init(self, o) end
      local C = self.num_classes
      for _, s in ipairs({ 'tp', 'fp', 'tn', 'fn' }) do self:add_state(s, T.zeros(C, { dtype = 'int64' }), 'sum') end
    end
    function Mc:update(preds, target)
      local tp, fp, tn, fn = multiclass_stats(self.__name, preds, target, self.num_classes, self.top_k, self.ignore_index)
      self.tp, self.fp, self.tn, self.fn = self.tp + tp, self.fp + fp, self.tn + tn, self.fn + fn
    end
    function Mc:compute()
      local f = opts.score and opts.score(self) or scores[score_name]
      return reduce(f, self.tp, self.fp, self.tn, self.fn, self.average)
    end
    local Ml = Metric:extend('Multilabel' .. base)
    function Ml:__init(o)
      o = self:_check_opts('Multilabel' .. base, o, with(ML_KEYS, extra))
      Metric.__init(self, o)
      need_int(self.__name, 'num_labels', o.num_labels, 2)
      check_average(self.__name, o.average)
      check_mda(self.__name, o.multidim_average)
      self.num_labels = o.num_labels
      self.threshold = o.threshold or 0.5
      self.average = o.average == nil and 'macro' or o.average
      self.ignore_index = o.ignore_index
      if opts.init then opts.init(self, o) end
      local L = self.num_labels
      for _, s in ipairs({ 'tp', 'fp', 'tn', 'fn' }) do self:add_state(s, T.zeros(L, { dtype = 'int64' }), 'sum') end
    end
    function Ml:update(preds, target)
      local tp, fp, tn, fn = multilabel_stats(self.__name, preds, target, self.num_labels, self.threshold, self.ignore_index)
      self.tp, self.fp, self.tn, self.fn = self.tp + tp, self.fp + fp, self.tn + tn, self.fn + fn
    end
    function Ml:compute()
      local f = opts.score and opts.score(self) or scores[score_name == 'accuracy' and 'accuracy_all' or score_name]
      return reduce(f, self.tp, self.fp, self.tn, self.fn, self.average)
    end
    M['Binary' .. base], M['Multiclass' .. base], M['Multilabel' .. base] = Bin, Mc, Ml
    -- the task wrapper: <Name>({task=, ...}) with average 'micro' by default (torchmetrics' __new__)
    M[base] = function(o)
      if type(o) ~= 'table' then value_error(fmt("%s: expected an options table with task = 'binary', 'multiclass' or 'multilabel'", base)) end
      local task = o.task
      local rest = {}
      for k, v in pairs(o) do if k ~= 'task' then rest[k] = v end end
      if task == 'binary' then
        rest.num_classes, rest.num_labels, rest.average, rest.top_k = nil, nil, nil, nil
        return Bin(rest)
      elseif task == 'multiclass' then
        if rest.average == nil then rest.average = 'micro' end
        rest.num_labels, rest.threshold = nil, nil
        return Mc(rest)
      elseif task == 'multilabel' then
        if rest.average == nil then rest.average = 'micro' end
        rest.num_classes, rest.top_k = nil, nil
        return Ml(rest)
      end
      value_error(fmt("%s: expected argument `task` to either be 'binary', 'multiclass' or 'multilabel' but got %s", base, tostring(task)))
    end
    -- the functional form: <score>(preds, target, {task=, ...})
    F[opts.functional or score_name] = function(preds, target, o)
      local m = M[base](o)
      m:update(preds, target)
      return m:compute()
    end
  end
  family('Accuracy', 'accuracy')
  family('Precision', 'precision')
  family('Recall', 'recall')
  family('Specificity', 'specificity')
  family('F1Score', 'f1', { score = function() return fbeta_score(1) end, functional = 'f1_score' })
  family('FBetaScore', 'fbeta', {
    extra_keys = { beta = true },
    init = function(self, o)
      local b = o.beta == nil and 1 or o.beta
      if type(b) ~= 'number' or b <= 0 then value_error(fmt('%s: expected argument `beta` to be a float larger than 0, but got %s', self.__name, tostring(b))) end
      self.beta = b
    end,
    score = function(self) return fbeta_score(self.beta) end, functional = 'fbeta_score' })
  -- StatScores: [tp, fp, tn, fn, support] (per class / label with average none or macro... as torchmetrics)
  family('StatScores', 'stat_scores', {
    score = function() return nil end, functional = 'stat_scores' })
  local function stat_compute(self)
    local tp, fp, tn, fn = self.tp, self.fp, self.tn, self.fn
    local r = T.stack({ tp, fp, tn, fn, tp + fn }, -1)
    local avg = self.average
    if avg == 'micro' then return r:sum(1) end
    if avg == 'macro' then return r:float():mean(1) end
    if avg == 'weighted' then
      local w = (tp + fn):double()
      return (r:double() * (w / w:sum()):unsqueeze(2)):sum(1):float()
    end
    return r
  end
  M.BinaryStatScores._compute_impl = function(self) return T.stack({ self.tp, self.fp, self.tn, self.fn, self.tp + self.fn }) end
  M.MulticlassStatScores._compute_impl = stat_compute
  M.MultilabelStatScores._compute_impl = stat_compute

  ---------------------------------------------------------------- ConfusionMatrix
  local function normalize_cm(cm, normalize)
    if normalize == nil or normalize == 'none' then return cm end
    cm = cm:double()
    if normalize == 'true' then cm = cm / cm:sum(-1, true)
    elseif normalize == 'pred' then cm = cm / cm:sum(-2, true)
    elseif normalize == 'all' then cm = cm / cm:sum({ -2, -1 }, true)
    else value_error(fmt("ConfusionMatrix: expected argument `normalize` to be one of ('true', 'pred', 'all', 'none', None), but got %s", tostring(normalize))) end
    return T.where(cm:ne(cm), T.zeros_like(cm), cm):float()
  end
  local BinaryConfusionMatrix = Metric:extend('BinaryConfusionMatrix')
  function BinaryConfusionMatrix:__init(o)
    o = self:_check_opts(self.__name, o, { threshold = true, ignore_index = true, normalize = true, validate_args = true })
    Metric.__init(self, o)
    self.threshold, self.ignore_index, self.normalize = o.threshold or 0.5, o.ignore_index, o.normalize
    self:add_state('confmat', T.zeros(2, 2, { dtype = 'int64' }), 'sum')
  end
  function BinaryConfusionMatrix:update(preds, target)
    local tp, fp, tn, fn = binary_stats(self.__name, preds, target, self.threshold, self.ignore_index)
    self.confmat = self.confmat + T.stack({ T.stack({ tn, fp }), T.stack({ fn, tp }) })
  end
  function BinaryConfusionMatrix:compute() return normalize_cm(self.confmat, self.normalize) end
  local MulticlassConfusionMatrix = Metric:extend('MulticlassConfusionMatrix')
  function MulticlassConfusionMatrix:__init(o)
    o = self:_check_opts(self.__name, o, { num_classes = true, ignore_index = true, normalize = true, validate_args = true })
    Metric.__init(self, o)
    need_int(self.__name, 'num_classes', o.num_classes, 2)
    self.num_classes, self.ignore_index, self.normalize = o.num_classes, o.ignore_index, o.normalize
    self:add_state('confmat', T.zeros(o.num_classes, o.num_classes, { dtype = 'int64' }), 'sum')
  end
  function MulticlassConfusionMatrix:update(preds, target)
    local C = self.num_classes
    check_tensors(self.__name, preds, target)
    if preds._ndim == target._ndim + 1 then preds = preds:argmax(2) end
    same_shape(self.__name, preds, target)
    values_in(self.__name, 'preds', preds, 1, C)
    values_in(self.__name, 'target', target, 1, C, self.ignore_index)
    local p, t = preds:reshape(-1):to('int64'), target:reshape(-1):to('int64')
    if self.ignore_index ~= nil then
      local keep = t:ne(self.ignore_index)
      p, t = p[keep], t[keep]
    end
    self.confmat = self.confmat + T.bincount((t - 1) * C + (p - 1), { minlength = C * C }):reshape(C, C)
  end
  function MulticlassConfusionMatrix:compute() return normalize_cm(self.confmat, self.normalize) end
  local MultilabelConfusionMatrix = Metric:extend('MultilabelConfusionMatrix')
  function MultilabelConfusionMatrix:__init(o)
    o = self:_check_opts(self.__name, o, { num_labels = true, threshold = true, ignore_index = true, normalize = true,
      validate_args = true })
    Metric.__init(self, o)
    need_int(self.__name, 'num_labels', o.num_labels, 2)
    self.num_labels, self.threshold, self.ignore_index, self.normalize = o.num_labels, o.threshold or 0.5, o.ignore_index, o.normalize
    self:add_state('confmat', T.zeros(o.num_labels, 2, 2, { dtype = 'int64' }), 'sum')
  end
  function MultilabelConfusionMatrix:update(preds, target)
    local tp, fp, tn, fn = multilabel_stats(self.__name, preds, target, self.num_labels, self.threshold, self.ignore_index)
    self.confmat = self.confmat + T.stack({ T.stack({ tn, fp }, -1), T.stack({ fn, tp }, -1) }, -2)
  end
  function MultilabelConfusionMatrix:compute() return normalize_cm(self.confmat, self.normalize) end
  M.BinaryConfusionMatrix, M.MulticlassConfusionMatrix, M.MultilabelConfusionMatrix =
    BinaryConfusionMatrix, MulticlassConfusionMatrix, MultilabelConfusionMatrix
  function M.ConfusionMatrix(o)
    if type(o) ~= 'table' then value_error('ConfusionMatrix: expected an options table with task = ...') end
    local rest = {}
    for k, v in pairs(o) do if k ~= 'task' then rest[k] = v end end
    if o.task == 'binary' then rest.num_classes, rest.num_labels = nil, nil; return BinaryConfusionMatrix(rest) end
    if o.task == 'multiclass' then rest.num_labels, rest.threshold = nil, nil; return MulticlassConfusionMatrix(rest) end
    if o.task == 'multilabel' then rest.num_classes = nil; return MultilabelConfusionMatrix(rest) end
    value_error(fmt("ConfusionMatrix: expected argument `task` to either be 'binary', 'multiclass' or 'multilabel' but got %s", tostring(o.task)))
  end
  function F.confusion_matrix(preds, target, o)
    local m = M.ConfusionMatrix(o)
    m:update(preds, target)
    return m:compute()
  end

  ---------------------------------------------------------------- AUROC, AveragePrecision
  -- the area under the ROC curve of scores s for positives pos (bool), ties as diagonal steps:
  -- the Mann-Whitney statistic with mid-ranks; 0 without positives or negatives (torchmetrics')
  local function binary_auroc(s, pos)
    local n = tonumber(s._shape[0])
    local P = pos:sum():item()
    local N = n - P
    if P == 0 or N == 0 then return 0 end
    s = s:double()
    local sorted, order = s:sort()
    -- mid-ranks of ties: each run of equal scores gets the mean of its ranks
    local _, inverse, counts = T.unique(sorted, { return_inverse = true, return_counts = true })
    local ends = counts:double():cumsum(1)
    local mid = ends - (counts:double() - 1) / 2
    local ranks = mid:index_select(1, inverse:reshape(-1))
    local pos_sorted = pos:index_select(1, order)
    local R = ranks[pos_sorted]:sum():item()
    return (R - P * (P + 1) / 2) / (P * N)
  end
  -- average precision: sum over distinct thresholds (descending) of (R_k - R_{k-1}) P_k; nan without positives
  local function binary_ap(s, pos)
    local n = tonumber(s._shape[0])
    local P = pos:sum():item()
    if P == 0 then return 0 / 0 end
    local sorted, order = s:double():sort(1, true)
    local p = pos:index_select(1, order):double()
    local tps = p:cumsum(1)
    local fps = (1 - p):cumsum(1)
    -- the last index of each run of equal scores
    local last = T.cat({ sorted:narrow(1, 1, n - 1):ne(sorted:narrow(1, 2, n - 1)), T.tensor({ true }) })
    tps, fps = tps[last], fps[last]
    local prec = tps / (tps + fps)
    local rec = tps / P
    local prev = T.cat({ T.zeros(1, { dtype = 'float64' }), rec:narrow(1, 1, rec:numel() - 1) })
    return ((rec - prev) * prec):sum():item()
  end
  local function curve_metric(base, fn_bin, fname)
    local Bin = Metric:extend('Binary' .. base)
    function Bin:__init(o)
      o = self:_check_opts(self.__name, o, { thresholds = true, ignore_index = true, max_fpr = true, validate_args = true })
      Metric.__init(self, o)
      if o.thresholds ~= nil then lua_error(errors.NotImplementedError(self.__name .. ': binned thresholds are not implemented (thresholds=nil: exact)'), 0) end
      if o.max_fpr ~= nil then lua_error(errors.NotImplementedError(self.__name .. ': max_fpr is not implemented'), 0) end
      self.ignore_index = o.ignore_index
      self:add_state('preds', {}, 'cat')
      self:add_state('target', {}, 'cat')
    end
    function Bin:update(preds, target)
      check_tensors(self.__name, preds, target)
      same_shape(self.__name, preds, target)
      if preds._dtype > 3 then runtime_error(self.__name .. ': preds must be floating point scores') end
      values_in(self.__name, 'target', target, 0, 1, self.ignore_index)
      local p, t = to_probs_sigmoid(preds):reshape(-1), target:reshape(-1)
      if self.ignore_index ~= nil then
        local keep = t:ne(self.ignore_index)
        p, t = p[keep], t[keep]
      end
      self.preds[#self.preds + 1] = p
      self.target[#self.target + 1] = t
    end
    function Bin:compute()
      if self.preds == nil then return T.tensor(0.0) end
      return T.tensor(fn_bin(self.preds, self.target:eq(1)), { dtype = 'float32' })
    end
    local Mc = Metric:extend('Multiclass' .. base)
    function Mc:__init(o)
      o = self:_check_opts(self.__name, o, { num_classes = true, average = true, thresholds = true, ignore_index = true,
        validate_args = true })
      Metric.__init(self, o)
      need_int(self.__name, 'num_classes', o.num_classes, 2)
      if o.thresholds ~= nil then lua_error(errors.NotImplementedError(self.__name .. ': binned thresholds are not implemented'), 0) end
      local avg = o.average == nil and 'macro' or o.average
      if avg ~= 'macro' and avg ~= 'weighted' and avg ~= 'none' then
        value_error(fmt("%s: expected argument `average` to be one of ('macro', 'weighted', 'none', None), but got %s", self.__name, tostring(avg)))
      end
      self.num_classes, self.average, self.ignore_index = o.num_classes, avg, o.ignore_index
      self:add_state('preds', {}, 'cat')
      self:add_state('target', {}, 'cat')
    end
    function Mc:update(preds, target)
      local C = self.num_classes
      check_tensors(self.__name, preds, target)
      if preds._ndim ~= target._ndim + 1 or tonumber(preds._shape[1]) ~= C then
        runtime_error(fmt('%s: expected preds of shape [N, %d, ...] (scores) for target of shape [N, ...]', self.__name, C))
      end
      values_in(self.__name, 'target', target, 1, C, self.ignore_index)
      local p = preds:movedim(2, -1):reshape(-1, C)
      if p:lt(0):logical_or(p:gt(1)):any():item() then p = p:softmax(2) end
      local t = target:reshape(-1)
      if self.ignore_index ~= nil then
        local keep = t:ne(self.ignore_index)
        p, t = p[keep], t[keep]
      end
      self.preds[#self.preds + 1] = p
      self.target[#self.target + 1] = t
    end
    function Mc:compute()
      local C = self.num_classes
      local res, support = {}, {}
      for c = 1, C do
        local pos = self.target:eq(c)
        res[c] = fn_bin(self.preds:select(2, c):contiguous(), pos)
        support[c] = pos:sum():item()
      end
      local r = T.tensor(res, { dtype = 'float64' })
      if self.average == 'none' then return r:float() end
      local keep = r:eq(r)
      if self.average == 'macro' then return r[keep]:mean():float() end
      local w = T.tensor(support, { dtype = 'float64' })[keep]
      return (r[keep] * w / w:sum()):sum():float()
    end
    M['Binary' .. base], M['Multiclass' .. base] = Bin, Mc
    M[base] = function(o)
      if type(o) ~= 'table' then value_error(base .. ': expected an options table with task = ...') end
      local rest = {}
      for k, v in pairs(o) do if k ~= 'task' then rest[k] = v end end
      if o.task == 'binary' then rest.num_classes, rest.average = nil, nil; return Bin(rest) end
      if o.task == 'multiclass' then rest.max_fpr = nil; return Mc(rest) end
      if o.task == 'multilabel' then lua_error(errors.NotImplementedError(base .. ": task='multilabel' is not implemented in dplhost"), 0) end
      value_error(fmt("%s: expected argument `task` to either be 'binary', 'multiclass' or 'multilabel' but got %s", base, tostring(o.task)))
    end
    F[fname] = function(preds, target, o)
      local m = M[base](o)
      m:update(preds, target)
      return m:compute()
    end
  end
  curve_metric('AUROC', binary_auroc, 'auroc')
  curve_metric('AveragePrecision', binary_ap, 'average_precision')
end
