-- dpl.nn.utils_rnn: PyTorch 1.13's torch.nn.utils.rnn, as dpl.nn.utils.rnn: PackedSequence,
-- pack_padded_sequence, pad_packed_sequence, pad_sequence, pack_sequence, unpad_sequence,
-- unpack_sequence, invert_permutation. Indices are 1-based (sorted_indices, unsorted_indices);
-- batch_sizes and lengths are int64 tensors on the CPU, as PyTorch's. Packing and unpacking are
-- one index_select each (differentiable). RNN, LSTM and GRU take a PackedSequence
-- (lua/dpl/nn/seq.lua).
local T = require 'dpl.tensor'
local errors = require 'dpl.errors'

local M = {}
local fmt = string.format
local error = errors.raise -- string messages become ValueError objects
local is_tensor = T.is_tensor

local function shape_str(t) return '[' .. table.concat(t:size(), ', ') .. ']' end
local function on_cpu(t) return tostring(t.device) == 'cpu' end
-- an int64 index tensor (a Lua list of 1-based positions) on t's device
local function index_for(list, t)
  local idx = T.tensor(list, { dtype = 'int64' })
  if not on_cpu(t) then idx = idx:to(t.device) end
  return idx
end
local function int_list(t) -- a 1-d integer tensor (or a Lua list) as a Lua list of numbers
  if type(t) == 'table' and not is_tensor(t) then return t end
  local l = t:cpu():totable()
  return l
end

---------------------------------------------------------------- PackedSequence
local PackedSequence = {}
PackedSequence.__index = PackedSequence
PackedSequence.__name = 'PackedSequence'
M._PackedSequence = PackedSequence

--- invert_permutation(perm): the inverse of a permutation of 1..n (an int64 tensor), or nil for nil.
function M.invert_permutation(perm)
  if perm == nil then return nil end
  local p = int_list(perm)
  local inv = {}
  for i = 1, #p do inv[p[i]] = i end
  return index_for(inv, is_tensor(perm) and perm or T.empty(0))
end

--- PackedSequence(data, batch_sizes [, sorted_indices [, unsorted_indices]]): the fields of
--- PyTorch's namedtuple. data [N, *] holds the steps of every sequence, time-major: at step t the
--- first batch_sizes[t] sequences (in sorted order); sorted_indices (1-based) maps the sorted order
--- to the original batch, unsorted_indices back (nil when the batch was given sorted).
function M.PackedSequence(data, batch_sizes, sorted_indices, unsorted_indices)
  if not is_tensor(data) then error(fmt('PackedSequence: data must be a tensor, got %s', type(data)), 2) end
  if not is_tensor(batch_sizes) then batch_sizes = T.tensor(batch_sizes, { dtype = 'int64' }) end
  if unsorted_indices == nil then unsorted_indices = M.invert_permutation(sorted_indices) end
  return setmetatable({ data = data, batch_sizes = batch_sizes, sorted_indices = sorted_indices,
    unsorted_indices = unsorted_indices }, PackedSequence)
end

--- is_packed(x): whether x is a PackedSequence.
function M.is_packed(x) return getmetatable(x) == PackedSequence end

function PackedSequence:__tostring()
  return fmt('PackedSequence(data=%s %s, batch_sizes=[%s], sorted_indices=%s)', shape_str(self.data), self.data.dtype,
    table.concat(int_list(self.batch_sizes), ', '),
    self.sorted_indices and '[' .. table.concat(int_list(self.sorted_indices), ', ') .. ']' or 'nil')
end
--- ps:to(device | dtype): data converted, the indices on data's device; batch_sizes stays on the CPU.
function PackedSequence:to(...)
  local data = self.data:to(...)
  if data == self.data then return self end
  local si, ui = self.sorted_indices, self.unsorted_indices
  if si and tostring(si.device) ~= tostring(data.device) then si, ui = si:to(data.device), ui:to(data.device) end
  return setmetatable({ data = data, batch_sizes = self.batch_sizes, sorted_indices = si, unsorted_indices = ui },
    PackedSequence)
end
function PackedSequence:cpu() return self:to('cpu') end
function PackedSequence:float() return self:to('float32') end
function PackedSequence:double() return self:to('float64') end
function PackedSequence:half() return self:to('float16') end
function PackedSequence:is_cuda() return self.data.is_cuda end

-- the batch sizes as a Lua list (cached on the object)
function M._batch_sizes(ps)
  local bs = rawget(ps, '_bs')
  if not bs then
    bs = int_list(ps.batch_sizes)
    rawset(ps, '_bs', bs)
  end
  return bs
end
-- the lengths of the sequences in sorted order from batch sizes
local function sorted_lengths(bs)
  local lens = {}
  for j = 1, bs[1] or 0 do lens[j] = 0 end
  for t = 1, #bs do for j = 1, bs[t] do lens[j] = t end end
  return lens
end
M._sorted_lengths = sorted_lengths

-- the row offsets of each step in data: step t's rows are off[t] + 1 .. off[t] + bs[t]
local function offsets(bs)
  local off, n = {}, 0
  for t = 1, #bs do off[t] = n; n = n + bs[t] end
  return off, n
end
M._offsets = offsets

local function opts_or(fn, a, names, defaults, accepted)
  -- positional arguments (PyTorch's order) or one options table in the first optional place
  local vals = {}
  if type(a[1]) == 'table' and not is_tensor(a[1]) and a.n <= 1 then
    local o = a[1]
    for k in pairs(o) do
      if not accepted[k] then
        error(fmt("%s: unknown option '%s'; accepted options: %s", fn, tostring(k), table.concat(names, ', ')), 3)
      end
    end
    for i, nm in ipairs(names) do local v = o[nm]; if v == nil then v = defaults[i] end; vals[i] = v end
  else
    for i = 1, #names do local v = a[i]; if v == nil then v = defaults[i] end; vals[i] = v end
  end
  return vals
end
local function accepted_set(names) local s = {} for _, n in ipairs(names) do s[n] = true end return s end
local function check_bool(fn, name, v)
  if type(v) ~= 'boolean' then error(fmt('%s: %s must be true or false, got %s', fn, name, tostring(v)), 3) end
end

---------------------------------------------------------------- pack / pad
local PACK_NAMES = { 'batch_first', 'enforce_sorted' }
local PACK_ACC = accepted_set(PACK_NAMES)
--- pack_padded_sequence(input, lengths [, batch_first=false [, enforce_sorted=true]]) (or {batch_first=,
--- enforce_sorted=}): input [T, B, *] ([B, T, *] with batch_first), lengths a Lua list or a 1-d
--- integer tensor on the CPU, each in 1..T. With enforce_sorted the lengths must not increase;
--- otherwise the batch is sorted by decreasing length (stable) and sorted_indices records it.
function M.pack_padded_sequence(input, lengths, ...)
  local fn = 'pack_padded_sequence'
  local o = opts_or(fn, { n = select('#', ...), ... }, PACK_NAMES, { false, true }, PACK_ACC)
  local batch_first, enforce_sorted = o[1], o[2]
  check_bool(fn, 'batch_first', batch_first); check_bool(fn, 'enforce_sorted', enforce_sorted)
  if not is_tensor(input) then error(fmt('%s: input must be a tensor, got %s', fn, type(input)), 2) end
  if is_tensor(lengths) then
    if not on_cpu(lengths) then
      error(fmt("%s: 'lengths' argument should be a 1D CPU int64 tensor, but got 1D %s %s tensor", fn,
        tostring(lengths.device), lengths.dtype), 2)
    end
    if lengths:dim() ~= 1 or lengths:is_floating_point() then
      error(fmt("%s: 'lengths' argument should be a 1D CPU int64 tensor, but got %d-d %s", fn, lengths:dim(),
        lengths.dtype), 2)
    end
  elseif type(lengths) ~= 'table' then
    error(fmt("%s: lengths must be a list of numbers or a 1-d int64 tensor, got %s", fn, type(lengths)), 2)
  end
  local lens = int_list(lengths)
  if input:dim() < 2 then error(fmt('%s: input must have at least 2 dims [T, B, *], got shape %s', fn, shape_str(input)), 2) end
  local x = batch_first and input:transpose(1, 2) or input
  local Tn, B = x:size(1), x:size(2)
  if #lens ~= B then
    error(fmt('%s: expected %d lengths (the batch size of input %s%s), got %d', fn, B, shape_str(input),
      batch_first and ', batch_first' or '', #lens), 2)
  end
  for j = 1, B do
    local l = lens[j]
    if type(l) ~= 'number' or l ~= math.floor(l) then
      error(fmt('%s: lengths must be integers, got %s at position %d', fn, tostring(l), j), 2)
    end
    if l <= 0 then
      error(fmt("%s: Length of all samples has to be greater than 0, but found an element in 'lengths' that is <= 0 "
        .. '(%d at position %d)', fn, l, j), 2)
    end
    if l > Tn then
      error(fmt('%s: length %d at position %d exceeds the sequence length %d of input %s', fn, l, j, Tn,
        shape_str(input)), 2)
    end
  end
  local order -- sorted position -> batch position
  if enforce_sorted then
    for j = 2, B do
      if lens[j] > lens[j - 1] then
        error(fmt('%s: `lengths` array must be sorted in decreasing order when `enforce_sorted` is True (got %s). You '
          .. 'can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to sidestep this '
          .. 'requirement if you do not need ONNX exportability.', fn, table.concat(lens, ', ')), 2)
      end
    end
  else
    order = {}
    for j = 1, B do order[j] = j end
    table.sort(order, function(a, b)
      if lens[a] ~= lens[b] then return lens[a] > lens[b] end
      return a < b
    end)
  end
  local maxlen = 0
  local slens = {}
  for j = 1, B do
    slens[j] = lens[order and order[j] or j]
    if slens[j] > maxlen then maxlen = slens[j] end
  end
  local bs, idx = {}, {}
  for t = 1, maxlen do
    local n = 0
    for j = 1, B do if slens[j] >= t then n = j end end
    bs[t] = n
    for j = 1, n do idx[#idx + 1] = (t - 1) * B + (order and order[j] or j) end
  end
  local rest = x:size(); table.remove(rest, 1); rest[1] = Tn * B
  local data = x:reshape(rest):index_select(1, index_for(idx, x))
  local sorted = order and T.tensor(order, { dtype = 'int64' }) or nil
  if sorted and not on_cpu(x) then sorted = sorted:to(x.device) end
  local ps = M.PackedSequence(data, T.tensor(bs, { dtype = 'int64' }), sorted)
  rawset(ps, '_bs', bs)
  return ps
end

local UNPACK_NAMES = { 'batch_first', 'padding_value', 'total_length' }
local UNPACK_ACC = accepted_set(UNPACK_NAMES)
--- pad_packed_sequence(sequence [, batch_first=false [, padding_value=0 [, total_length]]]) (or {batch_first=,
--- padding_value=, total_length=}): the padded batch [T, B, *] ([B, T, *] with batch_first) in the
--- original batch order, and the lengths (int64, CPU). T is the longest length, or total_length.
function M.pad_packed_sequence(sequence, ...)
  local fn = 'pad_packed_sequence'
  if not M.is_packed(sequence) then
    error(fmt('%s: expected a PackedSequence (from pack_padded_sequence or pack_sequence), got %s', fn,
      is_tensor(sequence) and 'a tensor' or type(sequence)), 2)
  end
  local o = opts_or(fn, { n = select('#', ...), ... }, UNPACK_NAMES, { false, 0 }, UNPACK_ACC)
  local batch_first, padding_value, total_length = o[1], o[2], o[3]
  check_bool(fn, 'batch_first', batch_first)
  if type(padding_value) ~= 'number' then error(fmt('%s: padding_value must be a number, got %s', fn, type(padding_value)), 2) end
  local bs = M._batch_sizes(sequence)
  local maxlen, B = #bs, bs[1]
  local Tn = maxlen
  if total_length ~= nil then
    if type(total_length) ~= 'number' or total_length ~= math.floor(total_length) then
      error(fmt('%s: total_length must be an integer, got %s', fn, tostring(total_length)), 2)
    end
    if total_length < maxlen then
      error(fmt('%s: Expected total_length to be at least the length of the longest sequence in input, but got '
        .. 'total_length=%d and max sequence length being %d', fn, total_length, maxlen), 2)
    end
    Tn = total_length
  end
  local data = sequence.data
  local off, N = offsets(bs)
  local slens = sorted_lengths(bs)
  local unsorted = sequence.unsorted_indices and int_list(sequence.unsorted_indices)
  local idx, lengths = {}, {}
  local pad_row = N + 1
  -- row of (t, b): batch position b is sorted position unsorted[b]
  if batch_first then
    for b = 1, B do
      local j = unsorted and unsorted[b] or b
      for t = 1, Tn do idx[#idx + 1] = (t <= maxlen and j <= bs[t]) and off[t] + j or pad_row end
    end
  else
    for t = 1, Tn do
      for b = 1, B do
        local j = unsorted and unsorted[b] or b
        idx[#idx + 1] = (t <= maxlen and j <= bs[t]) and off[t] + j or pad_row
      end
    end
  end
  for b = 1, B do lengths[b] = slens[unsorted and unsorted[b] or b] end
  local rest = data:size()
  rest[1] = 1
  local pad = T.full(rest, padding_value, { dtype = data.dtype, device = data.device })
  local out = T.cat({ data, pad }, 1):index_select(1, index_for(idx, data))
  local shape = data:size()
  table.remove(shape, 1)
  if batch_first then table.insert(shape, 1, Tn); table.insert(shape, 1, B)
  else table.insert(shape, 1, B); table.insert(shape, 1, Tn) end
  return out:reshape(shape), T.tensor(lengths, { dtype = 'int64' })
end

local PADSEQ_NAMES = { 'batch_first', 'padding_value' }
local PADSEQ_ACC = accepted_set(PADSEQ_NAMES)
--- pad_sequence(sequences [, batch_first=false [, padding_value=0]]) (or {batch_first=, padding_value=}):
--- a list of tensors [L_i, *] (the same trailing dims) as one [T, B, *] ([B, T, *]) batch, T = max L_i.
function M.pad_sequence(sequences, ...)
  local fn = 'pad_sequence'
  local o = opts_or(fn, { n = select('#', ...), ... }, PADSEQ_NAMES, { false, 0 }, PADSEQ_ACC)
  local batch_first, padding_value = o[1], o[2]
  check_bool(fn, 'batch_first', batch_first)
  if type(padding_value) ~= 'number' then error(fmt('%s: padding_value must be a number, got %s', fn, type(padding_value)), 2) end
  if is_tensor(sequences) then -- PyTorch takes a tensor as the list of its slices along dim 1
    local l = {}
    for i = 1, sequences:size(1) do l[i] = sequences:select(1, i) end
    sequences = l
  end
  if type(sequences) ~= 'table' then error(fmt('%s: expected a list of tensors, got %s', fn, type(sequences)), 2) end
  local B = #sequences
  if B == 0 then error(fmt('%s: received an empty list of sequences', fn), 2) end
  local first = sequences[1]
  local lens, starts, maxlen, n = {}, {}, 0, 0
  for b = 1, B do
    local s = sequences[b]
    if not is_tensor(s) then error(fmt('%s: sequence %d is not a tensor (%s)', fn, b, type(s)), 2) end
    if s:dim() < 1 or s:dim() ~= first:dim() then
      error(fmt('%s: every sequence must be [L, *] with the trailing dims of the first %s; sequence %d has shape %s',
        fn, shape_str(first), b, shape_str(s)), 2)
    end
    for d = 2, s:dim() do
      if s:size(d) ~= first:size(d) then
        error(fmt('%s: sequence %d has shape %s, the first %s: the trailing dims must match', fn, b, shape_str(s),
          shape_str(first)), 2)
      end
    end
    lens[b], starts[b] = s:size(1), n
    n = n + lens[b]
    if lens[b] > maxlen then maxlen = lens[b] end
  end
  local rest = first:size()
  rest[1] = 1
  local pad = T.full(rest, padding_value, { dtype = first.dtype, device = first.device })
  local parts = {}
  for b = 1, B do parts[b] = sequences[b] end
  parts[B + 1] = pad
  local pad_row = n + 1
  local idx = {}
  if batch_first then
    for b = 1, B do for t = 1, maxlen do idx[#idx + 1] = t <= lens[b] and starts[b] + t or pad_row end end
  else
    for t = 1, maxlen do for b = 1, B do idx[#idx + 1] = t <= lens[b] and starts[b] + t or pad_row end end
  end
  local out = T.cat(parts, 1):index_select(1, index_for(idx, first))
  local shape = first:size()
  table.remove(shape, 1)
  if batch_first then table.insert(shape, 1, maxlen); table.insert(shape, 1, B)
  else table.insert(shape, 1, B); table.insert(shape, 1, maxlen) end
  return out:reshape(shape)
end

--- pack_sequence(sequences [, enforce_sorted=true]) (or {enforce_sorted=}): pad_sequence then
--- pack_padded_sequence with the sequences' lengths.
function M.pack_sequence(sequences, enforce_sorted)
  if type(enforce_sorted) == 'table' then
    for k in pairs(enforce_sorted) do
      if k ~= 'enforce_sorted' then
        error(fmt("pack_sequence: unknown option '%s'; accepted options: enforce_sorted", tostring(k)), 2)
      end
    end
    enforce_sorted = enforce_sorted.enforce_sorted
  end
  if enforce_sorted == nil then enforce_sorted = true end
  local padded = M.pad_sequence(sequences)
  local lens = {}
  for b = 1, #sequences do lens[b] = sequences[b]:size(1) end
  local ok, ps = pcall(M.pack_padded_sequence, padded, lens, false, enforce_sorted)
  if not ok then
    if type(ps) == 'table' and type(ps.message) == 'string' then
      ps.message = ps.message:gsub('^pack_padded_sequence', 'pack_sequence')
    end
    error(ps, 2)
  end
  return ps
end

--- unpad_sequence(padded, lengths [, batch_first=false]): the list of sequences [L_b, *] (views).
function M.unpad_sequence(padded, lengths, batch_first)
  if type(batch_first) == 'table' then batch_first = batch_first.batch_first end
  local lens = int_list(lengths)
  local out = {}
  for b = 1, #lens do
    local s = batch_first and padded:select(1, b) or padded:select(2, b)
    out[b] = s:narrow(1, 1, lens[b])
  end
  return out
end

--- unpack_sequence(packed): the list of sequences [L_b, *] in the original order.
function M.unpack_sequence(packed)
  local padded, lengths = M.pad_packed_sequence(packed, true)
  return M.unpad_sequence(padded, lengths, true)
end

return M
