-- dpl.nn.seq: the sequence group of dpl.nn, PyTorch 1.13's recurrent and attention modules:
-- RNN, LSTM, GRU, RNNCell, LSTMCell, GRUCell, MultiheadAttention, TransformerEncoderLayer,
-- TransformerEncoder, TransformerDecoderLayer, TransformerDecoder, Transformer. Installed into
-- dpl.nn by require('dpl.nn.seq')(nn). PyTorch's constructor arguments (the required ones
-- positional, the others in one options table checked by dpl.options), parameter names and
-- shapes, initialisation and state dict keys; dims 1-based where a dim is an argument. The
-- recurrent time loops and the attention are in dpl.nn.functional_seq.
local T = require 'dpl.tensor'
local autograd = require 'dpl.autograd'
local options = require 'dpl.options'
local amp = require 'dpl.amp'
local errors = require 'dpl.errors'
local rnn_utils = require 'dpl.nn.utils_rnn'

local fmt = string.format
local error = errors.raise -- string messages become ValueError objects
local is_tensor = T.is_tensor
local check_opts, keys = options.check, options.keys

local function shape_str(t) return '[' .. table.concat(t:size(), ', ') .. ']' end
local function list_str(l) return '[' .. table.concat(l, ', ') .. ']' end
local function same_size(t, s)
  local sz = t:size()
  if #sz ~= #s then return false end
  for i = 1, #s do if sz[i] ~= s[i] then return false end end
  return true
end

return function(nn)
  local Module, F, init = nn.Module, nn.functional, nn.init

  local function check_int(cls, name, v, lo)
    if type(v) ~= 'number' or v ~= math.floor(v) or v < lo then
      error(fmt('%s: %s must be an integer >= %d, got %s', cls, name, lo, tostring(v)))
    end
  end
  local function check_bool(cls, name, v)
    if v ~= nil and type(v) ~= 'boolean' then error(fmt('%s: %s must be true or false, got %s', cls, name, tostring(v))) end
  end
  local function check_prob(cls, name, v)
    if type(v) ~= 'number' or not (v >= 0 and v <= 1) then
      error(fmt('%s: %s should be a number in range [0, 1] representing the probability of an element being zeroed, '
        .. 'got %s', cls, name, tostring(v)))
    end
  end
  local function tensor_arg(self, what, v)
    if not is_tensor(v) then error(fmt('%s: expected a tensor as %s, got %s', self:_label(), what, type(v))) end
  end
  local function opts_dtype(opts) return { dtype = opts and opts.dtype or 'float32', device = opts and opts.device } end

  ---------------------------------------------------------------- RNN, LSTM, GRU
  local RNN_KEYS = keys('num_layers', 'bias', 'batch_first', 'dropout', 'bidirectional', 'dtype', 'device')
  local RNN_ACCEPTED = { RNN = keys(RNN_KEYS, 'nonlinearity'), LSTM = keys(RNN_KEYS, 'proj_size'), GRU = RNN_KEYS }
  local GATES = { LSTM = 4, GRU = 3, RNN_TANH = 1, RNN_RELU = 1 }

  local RNNBase = Module:extend('RNNBase')
  nn.RNNBase = RNNBase
  -- (mode, class name, input_size, hidden_size [, num_layers] [, opts])
  function RNNBase:__init(mode, cls, input_size, hidden_size, num_layers, opts)
    Module.__init(self)
    -- (the base of RNN/LSTM/GRU: mode and class name first, as those constructors pass them)
    if GATES[mode] == nil or RNN_ACCEPTED[cls] == nil then
      error(fmt("RNNBase(mode, class, input_size, hidden_size, ...): mode must be one of 'LSTM', 'GRU', 'RNN_TANH', "
        .. "'RNN_RELU' and class one of 'RNN', 'LSTM', 'GRU', got %s and %s (use nn.RNN, nn.LSTM or nn.GRU)",
        type(mode) == 'string' and ("'" .. mode .. "'") or type(mode), type(cls) == 'string' and ("'" .. cls .. "'") or type(cls)), 2)
    end
    if type(num_layers) == 'table' and opts == nil then num_layers, opts = nil, num_layers end
    check_opts(opts, RNN_ACCEPTED[cls], cls)
    opts = opts or {}
    if num_layers ~= nil and opts.num_layers ~= nil then
      error(fmt('%s: num_layers given twice (positionally and in the options)', cls))
    end
    num_layers = num_layers or opts.num_layers or 1
    check_int(cls, 'input_size', input_size, 0)
    check_int(cls, 'hidden_size', hidden_size, 1)
    check_int(cls, 'num_layers', num_layers, 1)
    if num_layers > 65536 then error(fmt('%s: num_layers must be at most 65536, got %s', cls, tostring(num_layers))) end
    for _, k in ipairs({ 'bias', 'batch_first', 'bidirectional' }) do check_bool(cls, k, opts[k]) end
    local dropout = opts.dropout or 0
    check_prob(cls, 'dropout', dropout)
    if dropout > 0 and num_layers == 1 then
      require('dpl.log').warn('%s: dropout option adds dropout after all but last recurrent layer, so non-zero dropout '
        .. 'expects num_layers greater than 1, but got dropout=%g and num_layers=1', cls, dropout)
    end
    if cls == 'RNN' then
      local nl = opts.nonlinearity or 'tanh'
      if nl ~= 'tanh' and nl ~= 'relu' then error(fmt("RNN: unknown nonlinearity '%s' (expected 'tanh' or 'relu')", tostring(nl))) end
      self.nonlinearity = nl
      mode = nl == 'relu' and 'RNN_RELU' or 'RNN_TANH'
    end
    local proj = opts.proj_size or 0
    if cls == 'LSTM' then
      if type(proj) ~= 'number' or proj ~= math.floor(proj) or proj < 0 then
        error(fmt('LSTM: proj_size should be a positive integer or zero to disable projections, got %s', tostring(proj)))
      end
      if proj >= hidden_size then error(fmt('LSTM: proj_size has to be smaller than hidden_size, got %d >= %d', proj, hidden_size)) end
    end
    self.mode, self.input_size, self.hidden_size, self.num_layers = mode, input_size, hidden_size, num_layers
    self.bias = opts.bias ~= false
    self.batch_first = opts.batch_first == true
    self.dropout = dropout
    self.bidirectional = opts.bidirectional == true
    self.proj_size = proj
    local D = self.bidirectional and 2 or 1
    local G = GATES[mode] * hidden_size
    local P = proj > 0 and proj or hidden_size -- (the size of h: proj_size with projections)
    local o = opts_dtype(opts)
    local names = {}
    for layer = 0, num_layers - 1 do
      for dir = 0, D - 1 do
        local sfx = fmt('_l%d%s', layer, dir == 1 and '_reverse' or '')
        local in_l = layer == 0 and input_size or P * D
        -- (the names in PyTorch's order, and by role: ih, hh, bih, bhh, hr)
        local nm = { ih = 'weight_ih' .. sfx, hh = 'weight_hh' .. sfx }
        nm[1], nm[2] = nm.ih, nm.hh
        self:register_parameter(nm.ih, nn.Parameter(T.empty(G, in_l, o)))
        self:register_parameter(nm.hh, nn.Parameter(T.empty(G, P, o)))
        if self.bias then
          nm.bih, nm.bhh = 'bias_ih' .. sfx, 'bias_hh' .. sfx
          nm[3], nm[4] = nm.bih, nm.bhh
          self:register_parameter(nm.bih, nn.Parameter(T.empty(G, o)))
          self:register_parameter(nm.bhh, nn.Parameter(T.empty(G, o)))
        end
        if proj > 0 then
          nm.hr = 'weight_hr' .. sfx
          nm[#nm + 1] = nm.hr
          self:register_parameter(nm.hr, nn.Parameter(T.empty(P, hidden_size, o)))
        end
        names[#names + 1] = nm
      end
    end
    self._all_weights = names
    self:reset_parameters()
  end
  --- U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)) for every parameter, as PyTorch.
  function RNNBase:reset_parameters()
    local stdv = 1 / math.sqrt(self.hidden_size)
    for _, p in ipairs(self:parameters()) do init.uniform_(p, -stdv, stdv) end
  end
  --- The parameters per layer and direction: {{weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0[, weight_hr_l0]}, ...}.
  function RNNBase:all_weights()
    local r = {}
    for i, nm in ipairs(self._all_weights) do
      r[i] = {}
      for j, k in ipairs(nm) do r[i][j] = self[k] end
    end
    return r
  end
  function RNNBase:flatten_parameters() end -- (PyTorch's cuDNN weight packing: nothing to do here)
  function RNNBase:extra_repr()
    local s = fmt('%d, %d', self.input_size, self.hidden_size)
    if self.proj_size ~= 0 then s = s .. ', proj_size=' .. self.proj_size end
    if self.num_layers ~= 1 then s = s .. ', num_layers=' .. self.num_layers end
    if self.nonlinearity and self.nonlinearity ~= 'tanh' then s = s .. ", nonlinearity='" .. self.nonlinearity .. "'" end
    if not self.bias then s = s .. ', bias=false' end
    if self.batch_first then s = s .. ', batch_first=true' end
    if self.dropout ~= 0 then s = s .. fmt(', dropout=%g', self.dropout) end
    if self.bidirectional then s = s .. ', bidirectional=true' end
    return s
  end

  -- the initial state tensor hx (or nil) checked: [L * D, B, size] (unbatched: [L * D, size])
  local function check_state(self, hx, what, batched, B, x, nd, size)
    local LD = self.num_layers * (self.bidirectional and 2 or 1)
    if hx == nil then return T.zeros({ LD, B, size }, { dtype = x.dtype, device = x.device }) end
    tensor_arg(self, what, hx)
    local want = batched and { LD, B, size } or { LD, size }
    if hx:dim() ~= #want then
      error(fmt('%s: for %s %d-d input, %s should be %d-d %s, got shape %s', self:_label(), batched and 'batched' or
        'unbatched', nd, what, #want, list_str(want), shape_str(hx)))
    end
    if not same_size(hx, want) then
      error(fmt('%s: expected %s of shape %s, got %s', self:_label(), what, list_str(want), shape_str(hx)))
    end
    if hx.dtype ~= x.dtype then
      error(fmt('%s: %s must have dtype %s (the input\'s), got %s', self:_label(), what, x.dtype, hx.dtype))
    end
    if tostring(hx.device) ~= tostring(x.device) then
      error(fmt('%s: %s is on %s, the input on %s', self:_label(), what, tostring(hx.device), tostring(x.device)))
    end
    return batched and hx or hx:unsqueeze(2)
  end

  -- the layers over a time-major batch x [T, B, in] from h0 (and c0) [L * D, B, size]: output [T, B,
  -- D * size], h_n, c_n (nil but for the LSTM)
  function RNNBase:_layers(x, h0, c0)
    local lstm = self.mode == 'LSTM'
    local D = self.bidirectional and 2 or 1
    local hs, cs = {}, {}
    local layer_in = x
    for layer = 0, self.num_layers - 1 do
      local outs = {}
      for dir = 0, D - 1 do
        local idx = layer * D + dir + 1
        local nm = self._all_weights[idx]
        local wih, whh, bih, bhh = self[nm.ih], self[nm.hh], nm.bih and self[nm.bih], nm.bhh and self[nm.bhh]
        local rev = dir == 1
        local y, hn, cn
        if self.mode == 'GRU' then
          local xp = F.linear(layer_in, wih, bih)
          y, hn = F._gru_layer(xp, h0:select(1, idx), whh, bhh, rev)
        else
          local xp = F.linear(layer_in, wih, bih and bih + bhh)
          if lstm then
            y, hn, cn = F._lstm_layer(xp, h0:select(1, idx), c0:select(1, idx), whh, rev, nm.hr and self[nm.hr])
            cs[idx] = cn
          else
            y, hn = F._rnn_layer(xp, h0:select(1, idx), whh, self.mode == 'RNN_RELU', rev)
          end
        end
        outs[dir + 1], hs[idx] = y, hn
      end
      layer_in = D == 2 and T.cat(outs, 3) or outs[1]
      if self.dropout > 0 and self.training and layer < self.num_layers - 1 then
        layer_in = F.dropout(layer_in, self.dropout, true)
      end
    end
    local h_n = T.stack(hs, 1)
    return layer_in, h_n, lstm and T.stack(cs, 1) or nil
  end

  --- forward(input [, hx]): input [T, B, input_size] ([B, T, input_size] with batch_first; unbatched
  --- [T, input_size]); hx [num_layers * num_directions, B, hidden_size] (LSTM: a list {h_0, c_0}; h_0's
  --- last dim is proj_size when it is > 0), zeros when nil. Returns output [T, B, num_directions *
  --- hidden_size (or proj_size)] and h_n (LSTM: {h_n, c_n}).
  function RNNBase:forward(input, hx)
    local lbl = self:_label()
    if rnn_utils.is_packed(input) then return self:_forward_packed(input, hx) end
    tensor_arg(self, 'input', input)
    local w0 = self[self._all_weights[1].ih]
    if amp.dtype then input = amp.fp32(input) end
    if input.dtype ~= w0.dtype then
      error(fmt('%s: input must have dtype %s (the parameters\'), got %s', lbl, w0.dtype, input.dtype))
    end
    local nd = input:dim()
    if nd ~= 2 and nd ~= 3 then
      error(fmt('%s: expected input of 3 dims %s or 2 dims (unbatched) [T, %d], got shape %s', lbl,
        self.batch_first and fmt('[B, T, %d]', self.input_size) or fmt('[T, B, %d]', self.input_size), self.input_size,
        shape_str(input)))
    end
    if input:size(-1) ~= self.input_size then
      error(fmt('%s: input.size(-1) must be equal to input_size. Expected %d, got %d (input %s)', lbl, self.input_size,
        input:size(-1), shape_str(input)))
    end
    if tostring(input.device) ~= tostring(w0.device) then
      error(fmt('%s: input is on %s, the parameters on %s', lbl, tostring(input.device), tostring(w0.device)))
    end
    local batched = nd == 3
    local x = input
    if not batched then x = x:unsqueeze(2)
    elseif self.batch_first then x = x:transpose(1, 2) end
    local Tn, B = x:size(1), x:size(2)
    if Tn == 0 then error(fmt('%s: expected a sequence of length > 0, got input %s', lbl, shape_str(input))) end
    local lstm = self.mode == 'LSTM'
    local h0, c0
    if lstm then
      if hx ~= nil and (type(hx) ~= 'table' or #hx ~= 2 or not is_tensor(hx[1]) or not is_tensor(hx[2])) then
        error(fmt('%s: hx must be a list {h_0, c_0} of two tensors, got %s', lbl, is_tensor(hx) and 'a tensor' or type(hx)))
      end
      local P = self.proj_size > 0 and self.proj_size or self.hidden_size
      h0 = check_state(self, hx and hx[1], 'hx[1] (h_0)', batched, B, x, nd, P)
      c0 = check_state(self, hx and hx[2], 'hx[2] (c_0)', batched, B, x, nd, self.hidden_size)
    else
      h0 = check_state(self, hx, 'hx', batched, B, x, nd, self.hidden_size)
    end
    local output, h_n, c_n = self:_layers(x, h0, c0)
    if not batched then
      output, h_n = output:squeeze(2), h_n:squeeze(2)
      if c_n then c_n = c_n:squeeze(2) end
    elseif self.batch_first then
      output = output:transpose(1, 2)
    end
    if lstm then return output, { h_n, c_n } end
    return output, h_n
  end

  -- the layers over packed data [N, in] (batch sizes bs, step offsets off, sorted lengths lens)
  -- from h0 (and c0) [L * D, B, size] in sorted order, one time loop per layer and direction whose
  -- steps run their live rows only (F._lstm_packed, F._gru_packed, F._rnn_packed): output [N, D * H],
  -- h_n, c_n (nil but for the LSTM); nil where that loop does not apply (tensors in GPU memory)
  function RNNBase:_layers_packed(data, bs, off, lens, h0, c0)
    local mode = self.mode
    local D = self.bidirectional and 2 or 1
    local last = {}
    for j = 1, #lens do last[j] = off[lens[j]] + j end
    last = T.tensor(last, { dtype = 'int64' })
    local hs, cs = {}, {}
    local layer_in = data
    for layer = 0, self.num_layers - 1 do
      local outs = {}
      for dir = 0, D - 1 do
        local idx = layer * D + dir + 1
        local nm = self._all_weights[idx]
        local bih, bhh = nm.bih and self[nm.bih], nm.bhh and self[nm.bhh]
        local y, hn, cn
        if mode == 'GRU' then
          local xp = F.linear(layer_in, self[nm.ih], bih)
          y, hn = F._gru_packed(xp, bs, off, last, h0:select(1, idx), self[nm.hh], bhh, dir == 1)
        else
          local xp = F.linear(layer_in, self[nm.ih], bih and bih + bhh)
          if mode == 'LSTM' then
            y, hn, cn = F._lstm_packed(xp, bs, off, last, h0:select(1, idx), c0:select(1, idx), self[nm.hh], dir == 1,
              nm.hr and self[nm.hr])
          else
            y, hn = F._rnn_packed(xp, bs, off, last, h0:select(1, idx), self[nm.hh], mode == 'RNN_RELU', dir == 1)
          end
        end
        if not y then return nil end
        outs[dir + 1], hs[idx], cs[idx] = y, hn, cn
      end
      layer_in = D == 2 and T.cat(outs, 2) or outs[1]
      if self.dropout > 0 and self.training and layer < self.num_layers - 1 then
        layer_in = F.dropout(layer_in, self.dropout, true)
      end
    end
    return layer_in, T.stack(hs, 1), mode == 'LSTM' and T.stack(cs, 1) or nil
  end

  -- forward on a PackedSequence (nn.utils.rnn): each sequence runs over its own length (the reverse
  -- direction starts at its last step; h_n is the state after it): one time loop over the packed rows
  -- (_layers_packed) where it applies, else the sequences of one length together through _layers
  -- (one call per distinct length). Returns a PackedSequence with the input's
  -- batch_sizes and indices, and h_n (LSTM {h_n, c_n}) in the original batch order, as PyTorch's.
  function RNNBase:_forward_packed(ps, hx)
    local lbl = self:_label()
    local data = ps.data
    local w0 = self[self._all_weights[1].ih]
    if amp.dtype then data = amp.fp32(data) end
    if data.dtype ~= w0.dtype then
      error(fmt('%s: input must have dtype %s (the parameters\'), got %s', lbl, w0.dtype, data.dtype))
    end
    if data:dim() ~= 2 or data:size(2) ~= self.input_size then
      error(fmt('%s: a PackedSequence\'s data must be [N, %d] (input_size), got shape %s', lbl, self.input_size,
        shape_str(data)))
    end
    if tostring(data.device) ~= tostring(w0.device) then
      error(fmt('%s: input is on %s, the parameters on %s', lbl, tostring(data.device), tostring(w0.device)))
    end
    local bs = rnn_utils._batch_sizes(ps)
    local Tn, B = #bs, bs[1]
    local off, N = rnn_utils._offsets(bs)
    if N ~= data:size(1) then
      error(fmt('%s: a PackedSequence with batch_sizes summing to %d has data of %d rows', lbl, N, data:size(1)))
    end
    local lens = rnn_utils._sorted_lengths(bs)
    local lstm = self.mode == 'LSTM'
    local sorted = ps.sorted_indices
    local function permuted(h) return (h ~= nil and sorted) and h:index_select(2, sorted) or h end
    local h0, c0
    if lstm then
      if hx ~= nil and (type(hx) ~= 'table' or #hx ~= 2 or not is_tensor(hx[1]) or not is_tensor(hx[2])) then
        error(fmt('%s: hx must be a list {h_0, c_0} of two tensors, got %s', lbl, is_tensor(hx) and 'a tensor' or type(hx)))
      end
      local P = self.proj_size > 0 and self.proj_size or self.hidden_size
      h0 = permuted(check_state(self, hx and hx[1], 'hx[1] (h_0)', true, B, data, 3, P))
      c0 = permuted(check_state(self, hx and hx[2], 'hx[2] (c_0)', true, B, data, 3, self.hidden_size))
    else
      h0 = permuted(check_state(self, hx, 'hx', true, B, data, 3, self.hidden_size))
    end
    local unsorted = ps.unsorted_indices
    local function result(out, h_n, c_n)
      if sorted and unsorted then
        h_n = h_n:index_select(2, unsorted)
        if c_n then c_n = c_n:index_select(2, unsorted) end
      end
      local res = rnn_utils.PackedSequence(out, ps.batch_sizes, ps.sorted_indices, ps.unsorted_indices)
      rawset(res, '_bs', bs)
      if lstm then return res, { h_n, c_n } end
      return res, h_n
    end
    -- one time loop over the packed rows (each step on its live rows), where the kernels apply
    local out, h_n, c_n = self:_layers_packed(data, bs, off, lens, h0, c0)
    if out then return result(out, h_n, c_n) end
    -- else the padded batch [T, B, in] in sorted order (zeros after each sequence's end), run by length
    local idx = {}
    for t = 1, Tn do for j = 1, B do idx[#idx + 1] = j <= bs[t] and off[t] + j or N + 1 end end
    local pad = T.zeros({ 1, self.input_size }, { dtype = data.dtype, device = data.device })
    local idx_t = T.tensor(idx, { dtype = 'int64' })
    if tostring(data.device) ~= 'cpu' then idx_t = idx_t:to(data.device) end
    local x = T.cat({ data, pad }, 1):index_select(1, idx_t):reshape(Tn, B, self.input_size)
    -- runs of equal length (the lengths do not increase in sorted order)
    local flat, hs, cs, start_row, first, width = {}, {}, {}, {}, {}, nil
    local rows, g, j = 0, 0, 1
    local group_of = {}
    while j <= B do
      local L, k = lens[j], j
      while k < B and lens[k + 1] == L do k = k + 1 end
      local n = k - j + 1
      local y, hn, cn = self:_layers(x:narrow(1, 1, L):narrow(2, j, n), h0:narrow(2, j, n), c0 and c0:narrow(2, j, n))
      g = g + 1
      width = y:size(3)
      flat[g], hs[g], cs[g] = y:reshape(L * n, width), hn, cn
      start_row[g], first[g] = rows, j
      for q = j, k do group_of[q] = g end
      rows = rows + L * n
      j = k + 1
    end
    -- packed rows: step t, sorted position q -> row (t - 1) * n_g + (q - first_g) of its group's output
    local pidx = {}
    for t = 1, Tn do
      for q = 1, bs[t] do
        local gg = group_of[q]
        local n = (gg < g and first[gg + 1] or B + 1) - first[gg]
        pidx[#pidx + 1] = start_row[gg] + (t - 1) * n + (q - first[gg]) + 1
      end
    end
    local pidx_t = T.tensor(pidx, { dtype = 'int64' })
    if tostring(data.device) ~= 'cpu' then pidx_t = pidx_t:to(data.device) end
    local out = (g == 1 and flat[1] or T.cat(flat, 1)):index_select(1, pidx_t)
    return result(out, g == 1 and hs[1] or T.cat(hs, 2), lstm and (g == 1 and cs[1] or T.cat(cs, 2)) or nil)
  end

  local function rnn_class(cls, mode)
    local c = RNNBase:extend(cls)
    c.__init = function(self, input_size, hidden_size, num_layers, opts)
      RNNBase.__init(self, mode, cls, input_size, hidden_size, num_layers, opts)
    end
    return c
  end
  --- RNN(input_size, hidden_size [, num_layers=1] [, {nonlinearity='tanh', bias=true, batch_first=false,
  --- dropout=0, bidirectional=false, dtype=, device=}])
  nn.RNN = rnn_class('RNN', 'RNN_TANH')
  --- LSTM(input_size, hidden_size [, num_layers=1] [, {bias=, batch_first=, dropout=, bidirectional=, proj_size=0}])
  nn.LSTM = rnn_class('LSTM', 'LSTM')
  --- GRU(input_size, hidden_size [, num_layers=1] [, {bias=, batch_first=, dropout=, bidirectional=}])
  nn.GRU = rnn_class('GRU', 'GRU')

  ---------------------------------------------------------------- cells
  local CELL_KEYS = keys('bias', 'dtype', 'device')
  local RNNCELL_KEYS = keys(CELL_KEYS, 'nonlinearity')
  local RNNCellBase = Module:extend('RNNCellBase')
  nn.RNNCellBase = RNNCellBase
  function RNNCellBase:__init(cls, gates, input_size, hidden_size, opts, accepted)
    Module.__init(self)
    -- (the base of RNNCell/LSTMCell/GRUCell, which pass their name and gate count first)
    if type(cls) ~= 'string' or (gates ~= 1 and gates ~= 3 and gates ~= 4) then
      error(fmt('RNNCellBase(class, gates, input_size, hidden_size, ...): expected a class name and a gate count of '
        .. '1, 3 or 4, got %s and %s (use nn.RNNCell, nn.LSTMCell or nn.GRUCell)', type(cls),
        type(gates) == 'number' and tostring(gates) or type(gates)), 2)
    end
    check_opts(opts, accepted or CELL_KEYS, cls)
    opts = opts or {}
    check_int(cls, 'input_size', input_size, 0)
    check_int(cls, 'hidden_size', hidden_size, 1)
    check_bool(cls, 'bias', opts.bias)
    self.input_size, self.hidden_size, self.bias = input_size, hidden_size, opts.bias ~= false
    local o = opts_dtype(opts)
    self.weight_ih = nn.Parameter(T.empty(gates * hidden_size, input_size, o))
    self.weight_hh = nn.Parameter(T.empty(gates * hidden_size, hidden_size, o))
    if self.bias then
      self.bias_ih = nn.Parameter(T.empty(gates * hidden_size, o))
      self.bias_hh = nn.Parameter(T.empty(gates * hidden_size, o))
    end
    self:reset_parameters()
  end
  RNNCellBase.reset_parameters = RNNBase.reset_parameters
  function RNNCellBase:extra_repr()
    local s = fmt('%d, %d', self.input_size, self.hidden_size)
    if not self.bias then s = s .. ', bias=false' end
    if self.nonlinearity and self.nonlinearity ~= 'tanh' then s = s .. ", nonlinearity='" .. self.nonlinearity .. "'" end
    return s
  end
  -- input [B, input_size] or [input_size] -> x [B, input_size], batched
  function RNNCellBase:_input(input)
    local lbl = self:_label()
    tensor_arg(self, 'input', input)
    if amp.dtype then input = amp.fp32(input) end
    local nd = input:dim()
    if nd ~= 1 and nd ~= 2 then
      error(fmt('%s: expected input to be 1-d or 2-d ([B, %d] or [%d]), got shape %s', lbl, self.input_size,
        self.input_size, shape_str(input)))
    end
    if input:size(-1) ~= self.input_size then
      error(fmt('%s: input has inconsistent input_size: got %d, expected %d (input %s)', lbl, input:size(-1),
        self.input_size, shape_str(input)))
    end
    if input.dtype ~= self.weight_ih.dtype then
      error(fmt('%s: input must have dtype %s (the parameters\'), got %s', lbl, self.weight_ih.dtype, input.dtype))
    end
    if tostring(input.device) ~= tostring(self.weight_ih.device) then
      error(fmt('%s: input is on %s, the parameters on %s', lbl, tostring(input.device), tostring(self.weight_ih.device)))
    end
    return nd == 2 and input or input:unsqueeze(1), nd == 2
  end
  function RNNCellBase:_state(h, what, x, batched)
    if h == nil then return T.zeros({ x:size(1), self.hidden_size }, { dtype = x.dtype, device = x.device }) end
    tensor_arg(self, what, h)
    local want = batched and { x:size(1), self.hidden_size } or { self.hidden_size }
    if not same_size(h, want) then
      error(fmt('%s: expected %s of shape %s, got %s', self:_label(), what, list_str(want), shape_str(h)))
    end
    if h.dtype ~= x.dtype then
      error(fmt('%s: %s must have dtype %s (the input\'s), got %s', self:_label(), what, x.dtype, h.dtype))
    end
    return batched and h or h:unsqueeze(1)
  end
  -- the input projection of the one step: [1, B, G]
  function RNNCellBase:_xp(x, fold_bias)
    local b = self.bias_ih
    if b and fold_bias then b = b + self.bias_hh end
    return F.linear(x, self.weight_ih, b):unsqueeze(1)
  end

  nn.RNNCell = RNNCellBase:extend('RNNCell')
  --- RNNCell(input_size, hidden_size [, {bias=true, nonlinearity='tanh'}]); forward(input [, hx]) -> h'
  function nn.RNNCell:__init(input_size, hidden_size, opts)
    local nl = type(opts) == 'table' and opts.nonlinearity or 'tanh'
    if nl ~= 'tanh' and nl ~= 'relu' then error(fmt("RNNCell: unknown nonlinearity '%s' (expected 'tanh' or 'relu')", tostring(nl))) end
    self.nonlinearity = nl
    RNNCellBase.__init(self, 'RNNCell', 1, input_size, hidden_size, opts, RNNCELL_KEYS)
  end
  function nn.RNNCell:forward(input, hx)
    local x, batched = self:_input(input)
    local h = self:_state(hx, 'hx', x, batched)
    local _, hn = F._rnn_layer(self:_xp(x, true), h, self.weight_hh, self.nonlinearity == 'relu', false)
    return batched and hn or hn:squeeze(1)
  end

  nn.LSTMCell = RNNCellBase:extend('LSTMCell')
  --- LSTMCell(input_size, hidden_size [, {bias=true}]); forward(input [, {h_0, c_0}]) -> h', c' (two values)
  function nn.LSTMCell:__init(input_size, hidden_size, opts)
    RNNCellBase.__init(self, 'LSTMCell', 4, input_size, hidden_size, opts)
  end
  function nn.LSTMCell:forward(input, hx)
    local x, batched = self:_input(input)
    if hx ~= nil and (type(hx) ~= 'table' or #hx ~= 2 or not is_tensor(hx[1]) or not is_tensor(hx[2])) then
      error(fmt('%s: hx must be a list {h_0, c_0} of two tensors, got %s', self:_label(),
        is_tensor(hx) and 'a tensor' or type(hx)))
    end
    local h = self:_state(hx and hx[1], 'hx[1] (h_0)', x, batched)
    local c = self:_state(hx and hx[2], 'hx[2] (c_0)', x, batched)
    local _, hn, cn = F._lstm_layer(self:_xp(x, true), h, c, self.weight_hh, false)
    if batched then return hn, cn end
    return hn:squeeze(1), cn:squeeze(1)
  end

  nn.GRUCell = RNNCellBase:extend('GRUCell')
  --- GRUCell(input_size, hidden_size [, {bias=true}]); forward(input [, hx]) -> h'
  function nn.GRUCell:__init(input_size, hidden_size, opts)
    RNNCellBase.__init(self, 'GRUCell', 3, input_size, hidden_size, opts)
  end
  function nn.GRUCell:forward(input, hx)
    local x, batched = self:_input(input)
    local h = self:_state(hx, 'hx', x, batched)
    local _, hn = F._gru_layer(self:_xp(x, false), h, self.weight_hh, self.bias_hh, false)
    return batched and hn or hn:squeeze(1)
  end

  ---------------------------------------------------------------- MultiheadAttention
  local MHA_KEYS = keys('dropout', 'bias', 'add_bias_kv', 'add_zero_attn', 'kdim', 'vdim', 'batch_first', 'dtype', 'device')
  local MHA_FWD_KEYS = keys('key_padding_mask', 'need_weights', 'attn_mask', 'average_attn_weights')

  nn.MultiheadAttention = Module:extend('MultiheadAttention')
  local MHA = nn.MultiheadAttention
  --- MultiheadAttention(embed_dim, num_heads [, {dropout=0, bias=true, add_bias_kv=false, add_zero_attn=false,
  --- kdim=embed_dim, vdim=embed_dim, batch_first=false, dtype=, device=}])
  function MHA:__init(embed_dim, num_heads, opts)
    Module.__init(self)
    check_opts(opts, MHA_KEYS, 'MultiheadAttention')
    opts = opts or {}
    check_int('MultiheadAttention', 'embed_dim', embed_dim, 1)
    check_int('MultiheadAttention', 'num_heads', num_heads, 1)
    if embed_dim % num_heads ~= 0 then
      error(fmt('MultiheadAttention: embed_dim must be divisible by num_heads, got %d and %d', embed_dim, num_heads))
    end
    for _, k in ipairs({ 'bias', 'add_bias_kv', 'add_zero_attn', 'batch_first' }) do check_bool('MultiheadAttention', k, opts[k]) end
    local p = opts.dropout or 0
    check_prob('MultiheadAttention', 'dropout', p)
    if opts.kdim ~= nil then check_int('MultiheadAttention', 'kdim', opts.kdim, 1) end
    if opts.vdim ~= nil then check_int('MultiheadAttention', 'vdim', opts.vdim, 1) end
    local E = embed_dim
    self.embed_dim, self.num_heads, self.dropout, self.batch_first = E, num_heads, p, opts.batch_first == true
    self.kdim, self.vdim = opts.kdim or E, opts.vdim or E
    self.head_dim = E / num_heads
    self._qkv_same_embed_dim = self.kdim == E and self.vdim == E
    self.add_zero_attn = opts.add_zero_attn == true
    local o = opts_dtype(opts)
    if self._qkv_same_embed_dim then
      self.in_proj_weight = nn.Parameter(T.empty(3 * E, E, o))
    else
      self.q_proj_weight = nn.Parameter(T.empty(E, E, o))
      self.k_proj_weight = nn.Parameter(T.empty(E, self.kdim, o))
      self.v_proj_weight = nn.Parameter(T.empty(E, self.vdim, o))
    end
    local bias = opts.bias ~= false
    if bias then self.in_proj_bias = nn.Parameter(T.empty(3 * E, o)) end
    if opts.add_bias_kv then
      self.bias_k = nn.Parameter(T.empty(1, 1, E, o))
      self.bias_v = nn.Parameter(T.empty(1, 1, E, o))
    end
    self.out_proj = nn.Linear(E, E, { bias = bias, dtype = o.dtype, device = o.device })
    self:_reset_parameters()
  end
  --- xavier_uniform_ for the in-projection weights, zeros for the biases, xavier_normal_ for
  --- bias_k/bias_v; out_proj.weight keeps nn.Linear's initialisation, as PyTorch.
  function MHA:_reset_parameters()
    if self._qkv_same_embed_dim then init.xavier_uniform_(self.in_proj_weight)
    else
      init.xavier_uniform_(self.q_proj_weight)
      init.xavier_uniform_(self.k_proj_weight)
      init.xavier_uniform_(self.v_proj_weight)
    end
    if self.in_proj_bias then
      init.constant_(self.in_proj_bias, 0)
      init.constant_(self.out_proj.bias, 0)
    end
    if self.bias_k then init.xavier_normal_(self.bias_k) end
    if self.bias_v then init.xavier_normal_(self.bias_v) end
  end
  MHA.reset_parameters = MHA._reset_parameters
  function MHA:extra_repr()
    local s = fmt('embed_dim=%d, num_heads=%d', self.embed_dim, self.num_heads)
    if self.dropout ~= 0 then s = s .. fmt(', dropout=%g', self.dropout) end
    if not self._qkv_same_embed_dim then s = s .. fmt(', kdim=%d, vdim=%d', self.kdim, self.vdim) end
    if self.batch_first then s = s .. ', batch_first=true' end
    return s
  end
  --- forward(query, key, value [, {key_padding_mask=, need_weights=true, attn_mask=, average_attn_weights=true}])
  --- (or PyTorch's positional order: key_padding_mask, need_weights, attn_mask, average_attn_weights)
  --- -> attn_output, attn_weights (nil when need_weights is false)
  function MHA:forward(query, key, value, a4, a5, a6, a7)
    local o
    if type(a4) == 'table' and not is_tensor(a4) then
      if a5 ~= nil then error(fmt('%s: the options table must be the last argument', self:_label())) end
      check_opts(a4, MHA_FWD_KEYS, self.__name .. '.forward')
      o = a4
    else
      o = { key_padding_mask = a4, need_weights = a5, attn_mask = a6, average_attn_weights = a7 }
    end
    local lbl = self:_label()
    tensor_arg(self, 'query', query)
    tensor_arg(self, 'key', key)
    tensor_arg(self, 'value', value)
    local batched = query:dim() == 3
    local q, k, v = query, key, value
    if self.batch_first and batched then
      -- (transposed once when shared, so that self-attention stays one projection)
      q = query:transpose(1, 2)
      k = key == query and q or key:transpose(1, 2)
      v = value == key and k or value:transpose(1, 2)
    end
    local E = self.embed_dim
    local pdt = self.out_proj.weight.dtype
    if not amp.dtype and (query.dtype ~= pdt or key.dtype ~= pdt or value.dtype ~= pdt) then
      error(fmt("%s: query, key and value must have dtype %s (the parameters'), got %s, %s and %s", lbl, pdt,
        query.dtype, key.dtype, value.dtype))
    end
    if q:dim() >= 1 and q:size(-1) ~= E then
      error(fmt('%s(embed_dim=%d): query has shape %s, expected the last dim to be %d', lbl, E, shape_str(query), E))
    end
    if k:dim() >= 1 and k:size(-1) ~= self.kdim then
      error(fmt('%s: key has shape %s, expected the last dim to be kdim=%d', lbl, shape_str(key), self.kdim))
    end
    if v:dim() >= 1 and v:size(-1) ~= self.vdim then
      error(fmt('%s: value has shape %s, expected the last dim to be vdim=%d', lbl, shape_str(value), self.vdim))
    end
    local fopts = { training = self.training, key_padding_mask = o.key_padding_mask, need_weights = o.need_weights,
      attn_mask = o.attn_mask, average_attn_weights = o.average_attn_weights }
    if not self._qkv_same_embed_dim then
      fopts.use_separate_proj_weight = true
      fopts.q_proj_weight, fopts.k_proj_weight, fopts.v_proj_weight = self.q_proj_weight, self.k_proj_weight,
        self.v_proj_weight
    end
    local out, w = F._seq.multi_head_attention_forward(q, k, v, E, self.num_heads, self.in_proj_weight,
      self.in_proj_bias, self.bias_k, self.bias_v, self.add_zero_attn, self.dropout, self.out_proj.weight,
      self.out_proj.bias, fopts, lbl)
    if self.batch_first and batched then out = out:transpose(1, 2) end
    return out, w
  end

  ---------------------------------------------------------------- Transformer
  -- a copy of a module tree with new parameters and buffers (copy.deepcopy's role)
  local function deepcopy(obj, memo)
    if is_tensor(obj) then
      local c = memo[obj]
      if c then return c end
      c = autograd.no_grad(function() return obj:detach():clone() end)
      if Module.is_parameter(obj) then c = nn.Parameter(c, obj.requires_grad) end
      memo[obj] = c
      return c
    end
    if type(obj) ~= 'table' or rawget(obj, '__index') == obj then return obj end -- (classes are shared)
    local c = memo[obj]
    if c then return c end
    c = {}
    memo[obj] = c
    for k, v in next, obj do c[deepcopy(k, memo)] = deepcopy(v, memo) end
    return setmetatable(c, getmetatable(obj))
  end

  local function clones(layer, n)
    local list = {}
    for i = 1, n do
      local c = deepcopy(layer, {})
      rawset(c, '_name', nil)
      list[i] = c
    end
    return nn.ModuleList(list)
  end

  -- activation: 'relu', 'gelu', a function or a module; and its name when it is relu or gelu
  local is_instance = require('dpl.class').is_instance
  local function activation_fn(cls, a)
    if a == nil or a == 'relu' or a == F.relu then return F.relu, 'relu' end
    if a == 'gelu' or a == F.gelu then return F.gelu, 'gelu' end
    if type(a) == 'string' then error(fmt("%s: activation should be relu/gelu, not '%s'", cls, a)) end
    if type(a) == 'function' then return a, nil end
    if Module.is_module(a) then
      return a, is_instance(a, nn.ReLU) and 'relu' or (is_instance(a, nn.GELU) and a.approximate == 'none') and 'gelu' or nil
    end
    error(fmt("%s: activation must be 'relu', 'gelu', a function or a module, got %s", cls, type(a)))
  end

  -- forward options given as a table or positionally (PyTorch's order)
  local function fwd_opts(self, accepted, names, a, ...)
    if type(a) == 'table' and not is_tensor(a) then
      if select('#', ...) > 0 and (...) ~= nil then error(fmt('%s: the options table must be the last argument', self:_label())) end
      check_opts(a, accepted, self.__name .. '.forward')
      return a
    end
    local vals, o = { a, ... }, {}
    for i, k in ipairs(names) do o[k] = vals[i] end
    return o
  end

  -- a Transformer layer's input: [S, N, d] ([N, S, d] with batch_first) or unbatched [S, d], the
  -- parameters' dtype
  local function check_seq(self, what, x)
    tensor_arg(self, what, x)
    local d, nd = self.self_attn.embed_dim, x:dim()
    if (nd ~= 2 and nd ~= 3) or x:size(-1) ~= d then
      error(fmt('%s(d_model=%d): %s has shape %s, expected %s or unbatched [S, %d]', self:_label(), d, what, shape_str(x),
        self.batch_first and fmt('[N, S, %d]', d) or fmt('[S, N, %d]', d), d))
    end
    local pdt = self.linear1.weight.dtype
    if not amp.dtype and x.dtype ~= pdt then
      error(fmt("%s: %s must have dtype %s (the parameters'), got %s", self:_label(), what, pdt, x.dtype))
    end
  end

  local LAYER_KEYS = keys('dim_feedforward', 'dropout', 'activation', 'layer_norm_eps', 'batch_first', 'norm_first',
    'dtype', 'device')
  local function layer_init(self, cls, d_model, nhead, opts)
    check_opts(opts, LAYER_KEYS, cls)
    opts = opts or {}
    check_int(cls, 'd_model', d_model, 1)
    check_int(cls, 'nhead', nhead, 1)
    local ff = opts.dim_feedforward or 2048
    check_int(cls, 'dim_feedforward', ff, 1)
    local p = opts.dropout
    if p == nil then p = 0.1 end
    check_prob(cls, 'dropout', p)
    check_bool(cls, 'batch_first', opts.batch_first)
    check_bool(cls, 'norm_first', opts.norm_first)
    local eps = opts.layer_norm_eps or 1e-5
    if type(eps) ~= 'number' then error(fmt('%s: layer_norm_eps must be a number, got %s', cls, tostring(eps))) end
    local dt = { dtype = opts.dtype, device = opts.device }
    local act, act_name = activation_fn(cls, opts.activation)
    self.self_attn = nn.MultiheadAttention(d_model, nhead, { dropout = p, batch_first = opts.batch_first,
      dtype = dt.dtype, device = dt.device })
    return ff, p, eps, dt, act, act_name
  end
  local function ln(d, eps, dt) return nn.LayerNorm(d, { eps = eps, dtype = dt.dtype, device = dt.device }) end
  local function lin(a, b, dt) return nn.Linear(a, b, { dtype = dt.dtype, device = dt.device }) end

  nn.TransformerEncoderLayer = Module:extend('TransformerEncoderLayer')
  local TEL = nn.TransformerEncoderLayer
  --- TransformerEncoderLayer(d_model, nhead [, {dim_feedforward=2048, dropout=0.1, activation='relu'|'gelu'|fn,
  --- layer_norm_eps=1e-5, batch_first=false, norm_first=false, dtype=, device=}])
  function TEL:__init(d_model, nhead, opts)
    Module.__init(self)
    local ff, p, eps, dt, act, act_name = layer_init(self, 'TransformerEncoderLayer', d_model, nhead, opts)
    self.linear1 = lin(d_model, ff, dt)
    self.dropout = nn.Dropout(p)
    self.linear2 = lin(ff, d_model, dt)
    self.norm_first = (opts and opts.norm_first) == true
    -- (one assignment per child: they register in assignment order, the state dict's order)
    self.norm1 = ln(d_model, eps, dt)
    self.norm2 = ln(d_model, eps, dt)
    self.dropout1 = nn.Dropout(p)
    self.dropout2 = nn.Dropout(p)
    self.activation, self.activation_name = act, act_name
    self.batch_first = (opts and opts.batch_first) == true
  end
  local TEL_FWD = keys('src_mask', 'src_key_padding_mask')
  --- forward(src [, {src_mask=, src_key_padding_mask=}]) (or positionally: src_mask, src_key_padding_mask)
  function TEL:forward(src, ...)
    local o = fwd_opts(self, TEL_FWD, { 'src_mask', 'src_key_padding_mask' }, ...)
    check_seq(self, 'src', src)
    local x = src
    if self.norm_first then
      x = x + self:_sa_block(self.norm1(x), o.src_mask, o.src_key_padding_mask)
      x = x + self:_ff_block(self.norm2(x))
    else
      x = self.norm1(x + self:_sa_block(x, o.src_mask, o.src_key_padding_mask))
      x = self.norm2(x + self:_ff_block(x))
    end
    return x
  end
  function TEL:_sa_block(x, mask, kpm)
    local y = self.self_attn(x, x, x, { attn_mask = mask, key_padding_mask = kpm, need_weights = false })
    return self.dropout1(y)
  end
  function TEL:_ff_block(x)
    return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))
  end

  nn.TransformerDecoderLayer = Module:extend('TransformerDecoderLayer')
  local TDL = nn.TransformerDecoderLayer
  --- TransformerDecoderLayer(d_model, nhead [, the options of TransformerEncoderLayer])
  function TDL:__init(d_model, nhead, opts)
    Module.__init(self)
    local ff, p, eps, dt, act, act_name = layer_init(self, 'TransformerDecoderLayer', d_model, nhead, opts)
    self.multihead_attn = nn.MultiheadAttention(d_model, nhead, { dropout = p, batch_first = opts and opts.batch_first,
      dtype = dt.dtype, device = dt.device })
    self.linear1 = lin(d_model, ff, dt)
    self.dropout = nn.Dropout(p)
    self.linear2 = lin(ff, d_model, dt)
    self.norm_first = (opts and opts.norm_first) == true
    self.norm1 = ln(d_model, eps, dt)
    self.norm2 = ln(d_model, eps, dt)
    self.norm3 = ln(d_model, eps, dt)
    self.dropout1 = nn.Dropout(p)
    self.dropout2 = nn.Dropout(p)
    self.dropout3 = nn.Dropout(p)
    self.activation, self.activation_name = act, act_name
    self.batch_first = (opts and opts.batch_first) == true
  end
  local TDL_NAMES = { 'tgt_mask', 'memory_mask', 'tgt_key_padding_mask', 'memory_key_padding_mask' }
  local TDL_FWD = keys(unpack(TDL_NAMES))
  --- forward(tgt, memory [, {tgt_mask=, memory_mask=, tgt_key_padding_mask=, memory_key_padding_mask=}])
  function TDL:forward(tgt, memory, ...)
    local o = fwd_opts(self, TDL_FWD, TDL_NAMES, ...)
    check_seq(self, 'tgt', tgt)
    check_seq(self, 'memory', memory)
    local x = tgt
    if self.norm_first then
      x = x + self:_sa_block(self.norm1(x), o.tgt_mask, o.tgt_key_padding_mask)
      x = x + self:_mha_block(self.norm2(x), memory, o.memory_mask, o.memory_key_padding_mask)
      x = x + self:_ff_block(self.norm3(x))
    else
      x = self.norm1(x + self:_sa_block(x, o.tgt_mask, o.tgt_key_padding_mask))
      x = self.norm2(x + self:_mha_block(x, memory, o.memory_mask, o.memory_key_padding_mask))
      x = self.norm3(x + self:_ff_block(x))
    end
    return x
  end
  TDL._sa_block = TEL._sa_block
  function TDL:_mha_block(x, mem, mask, kpm)
    local y = self.multihead_attn(x, mem, mem, { attn_mask = mask, key_padding_mask = kpm, need_weights = false })
    return self.dropout2(y)
  end
  function TDL:_ff_block(x)
    return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))
  end

  local STACK_KEYS = keys('norm', 'enable_nested_tensor', 'mask_check')
  local function stack_init(self, cls, layer, n, opts, layer_cls)
    Module.__init(self)
    check_opts(opts, cls == 'TransformerEncoder' and STACK_KEYS or keys('norm'), cls)
    opts = opts or {}
    if not Module.is_module(layer) then error(fmt('%s: expected a %s as the layer, got %s', cls, layer_cls, type(layer))) end
    check_int(cls, 'num_layers', n, 1)
    if opts.norm ~= nil and not Module.is_module(opts.norm) then
      error(fmt('%s: norm must be a module (e.g. nn.LayerNorm) or nil, got %s', cls, type(opts.norm)))
    end
    self.layers = clones(layer, n)
    self.num_layers = n
    if opts.norm then self.norm = opts.norm end
  end

  nn.TransformerEncoder = Module:extend('TransformerEncoder')
  local TE = nn.TransformerEncoder
  --- TransformerEncoder(encoder_layer, num_layers [, {norm=, enable_nested_tensor=true, mask_check=true}]):
  --- num_layers deep copies of encoder_layer in self.layers (a ModuleList: layers[1] is the first).
  function TE:__init(layer, n, opts)
    stack_init(self, 'TransformerEncoder', layer, n, opts, 'TransformerEncoderLayer')
    check_bool('TransformerEncoder', 'enable_nested_tensor', opts and opts.enable_nested_tensor)
    check_bool('TransformerEncoder', 'mask_check', opts and opts.mask_check)
    self.enable_nested_tensor = not (opts and opts.enable_nested_tensor == false)
    self.mask_check = not (opts and opts.mask_check == false)
  end
  -- PyTorch 1.13 runs an eval-mode encoder with a padding mask on nested tensors (its "sparsity
  -- fast path"), which returns zeros at the padded positions: true when those conditions hold
  local function nested_path(self, src, mask, kpm)
    local l = self.layers[1]
    if not (self.enable_nested_tensor and kpm ~= nil and mask == nil and kpm.dtype == 'bool' and src:dim() == 3) then
      return false
    end
    if not is_instance(l, TEL) or l.norm_first or l.training or not l.self_attn.batch_first
      or not l.self_attn._qkv_same_embed_dim or not l.activation_name or l.norm1.eps ~= l.norm2.eps
      or l.self_attn.num_heads % 2 == 1 or amp.dtype then
      return false
    end
    if autograd.is_grad_enabled() then
      if src.requires_grad then return false end
      for _, p in ipairs(l:parameters()) do if p.requires_grad then return false end end
    end
    if self.mask_check and kpm:size(2) > 1 then -- left-aligned: no padding before a real position
      local m = kpm:to('uint8')
      local S = m:size(2)
      if m:narrow(2, 2, S - 1):lt(m:narrow(2, 1, S - 1)):any():item() then return false end
    end
    return true
  end
  local TE_FWD = keys('mask', 'src_key_padding_mask')
  --- forward(src [, {mask=, src_key_padding_mask=}]) (or positionally: mask, src_key_padding_mask)
  function TE:forward(src, ...)
    local o = fwd_opts(self, TE_FWD, { 'mask', 'src_key_padding_mask' }, ...)
    tensor_arg(self, 'src', src)
    local kpm = o.src_key_padding_mask
    if kpm ~= nil and (not is_tensor(kpm) or (kpm.dtype ~= 'bool' and not kpm:is_floating_point())) then
      error(fmt('%s: only bool and floating types of key_padding_mask are supported, got %s', self:_label(),
        is_tensor(kpm) and kpm.dtype or type(kpm)))
    end
    local nested = nested_path(self, src, o.mask, kpm)
    local x = src
    for _, m in self.layers:ipairs() do
      x = m(x, { src_mask = o.mask, src_key_padding_mask = kpm })
    end
    if nested then x = x:masked_fill(kpm:unsqueeze(-1), 0) end
    if self.norm then x = self.norm(x) end
    return x
  end

  nn.TransformerDecoder = Module:extend('TransformerDecoder')
  local TD = nn.TransformerDecoder
  --- TransformerDecoder(decoder_layer, num_layers [, {norm=}])
  function TD:__init(layer, n, opts)
    stack_init(self, 'TransformerDecoder', layer, n, opts, 'TransformerDecoderLayer')
  end
  --- forward(tgt, memory [, {tgt_mask=, memory_mask=, tgt_key_padding_mask=, memory_key_padding_mask=}])
  function TD:forward(tgt, memory, ...)
    local o = fwd_opts(self, TDL_FWD, TDL_NAMES, ...)
    tensor_arg(self, 'tgt', tgt)
    local x = tgt
    for _, m in self.layers:ipairs() do x = m(x, memory, o) end
    if self.norm then x = self.norm(x) end
    return x
  end

  nn.Transformer = Module:extend('Transformer')
  local TR = nn.Transformer
  local TR_KEYS = keys('d_model', 'nhead', 'num_encoder_layers', 'num_decoder_layers', 'dim_feedforward', 'dropout',
    'activation', 'custom_encoder', 'custom_decoder', 'layer_norm_eps', 'batch_first', 'norm_first', 'dtype', 'device')
  --- Transformer([{d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6, dim_feedforward=2048,
  --- dropout=0.1, activation='relu', custom_encoder=, custom_decoder=, layer_norm_eps=1e-5, batch_first=false,
  --- norm_first=false, dtype=, device=}]): every parameter with more than one dim xavier_uniform_, as PyTorch.
  function TR:__init(opts)
    Module.__init(self)
    check_opts(opts, TR_KEYS, 'Transformer')
    opts = opts or {}
    local d, nhead = opts.d_model or 512, opts.nhead or 8
    check_int('Transformer', 'num_encoder_layers', opts.num_encoder_layers or 6, 1)
    check_int('Transformer', 'num_decoder_layers', opts.num_decoder_layers or 6, 1)
    local lo = { dim_feedforward = opts.dim_feedforward, dropout = opts.dropout, activation = opts.activation,
      layer_norm_eps = opts.layer_norm_eps, batch_first = opts.batch_first, norm_first = opts.norm_first,
      dtype = opts.dtype, device = opts.device }
    local eps = opts.layer_norm_eps or 1e-5
    local dt = { dtype = opts.dtype, device = opts.device }
    for _, k in ipairs({ 'custom_encoder', 'custom_decoder' }) do
      if opts[k] ~= nil and not Module.is_module(opts[k]) then
        error(fmt('Transformer: %s must be a module, got %s', k, type(opts[k])))
      end
    end
    if opts.custom_encoder then self.encoder = opts.custom_encoder
    else
      self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, nhead, lo), opts.num_encoder_layers or 6,
        { norm = ln(d, eps, dt) })
    end
    if opts.custom_decoder then self.decoder = opts.custom_decoder
    else
      self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(d, nhead, lo), opts.num_decoder_layers or 6,
        { norm = ln(d, eps, dt) })
    end
    self.d_model, self.nhead, self.batch_first = d, nhead, opts.batch_first == true
    for _, p in ipairs(self:parameters()) do
      if p:dim() > 1 then init.xavier_uniform_(p) end
    end
  end
  local TR_NAMES = { 'src_mask', 'tgt_mask', 'memory_mask', 'src_key_padding_mask', 'tgt_key_padding_mask',
    'memory_key_padding_mask' }
  local TR_FWD = keys(unpack(TR_NAMES))
  --- forward(src, tgt [, {src_mask=, tgt_mask=, memory_mask=, src_key_padding_mask=, tgt_key_padding_mask=,
  --- memory_key_padding_mask=}]) -> [T, N, d_model] ([N, T, d_model] with batch_first)
  function TR:forward(src, tgt, ...)
    local o = fwd_opts(self, TR_FWD, TR_NAMES, ...)
    tensor_arg(self, 'src', src)
    tensor_arg(self, 'tgt', tgt)
    local batched = src:dim() == 3
    if batched and src:size(self.batch_first and 1 or 2) ~= tgt:size(self.batch_first and 1 or 2) then
      error(fmt('%s: the batch number of src and tgt must be equal (src %s, tgt %s)', self:_label(), shape_str(src),
        shape_str(tgt)))
    end
    if src:size(-1) ~= self.d_model or tgt:size(-1) ~= self.d_model then
      error(fmt('%s: the feature number of src and tgt must be equal to d_model=%d (src %s, tgt %s)', self:_label(),
        self.d_model, shape_str(src), shape_str(tgt)))
    end
    local memory = self.encoder(src, { mask = o.src_mask, src_key_padding_mask = o.src_key_padding_mask })
    return self.decoder(tgt, memory, { tgt_mask = o.tgt_mask, memory_mask = o.memory_mask,
      tgt_key_padding_mask = o.tgt_key_padding_mask, memory_key_padding_mask = o.memory_key_padding_mask })
  end
  --- Transformer.generate_square_subsequent_mask(sz [, device='cpu' | {device=, dtype=}]): float [sz, sz],
  --- -inf above the diagonal, 0 elsewhere (a causal attn_mask).
  function TR.generate_square_subsequent_mask(sz, device)
    check_int('generate_square_subsequent_mask', 'sz', sz, 0)
    local o = (type(device) == 'table' and getmetatable(device) == nil) and device or { device = device }
    local m = T.full({ sz, sz }, -math.huge, { dtype = o.dtype or 'float32' }):triu(1) -- (triu has no GPU kernel)
    return o.device and m:to(o.device) or m
  end
end
