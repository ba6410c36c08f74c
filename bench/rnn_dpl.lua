-- rnn_dpl.lua: dplhost's side of bench/rnn.sh: sequence-model paths (recurrent training steps,
-- packed sequences, token-by-token generation), the shapes of bench/rnn_torch.py. Prints
-- "name value" lines (us per step or per token: median of REPS timed loops after a warm-up).
-- Threads: DPL_NUM_THREADS.   dplhost bench/rnn_dpl.lua [case ...]
local dpl = require 'dpl'
local nn, F = dpl.nn, dpl.nn.functional
local rnn = nn.utils.rnn
local clock = dpl.C.dpl_clock

local function median(t) table.sort(t) return t[math.ceil(#t / 2)] end
local function time_us(step, n, reps)
  local t0 = clock()
  repeat step() until clock() - t0 > 0.3 -- warm-up (JIT, allocator, GC pacing)
  local r = {}
  for k = 1, reps do
    local t1 = clock()
    for _ = 1, n do step() end
    r[k] = (clock() - t1) / n * 1e6
  end
  return median(r)
end

-- 32 lengths, 28 distinct, 50 down to 3 (the same list as rnn_torch.py), shuffled
local LENS = {}
for i = 1, 28 do LENS[i] = 50 - math.floor((i - 1) * 47 / 27) end
LENS[29], LENS[30], LENS[31], LENS[32] = LENS[3], LENS[9], LENS[17], LENS[25]
local PERM = {}
for i = 1, 32 do PERM[i] = LENS[(i * 13) % 32 + 1] end -- a fixed shuffle

local cases = {}
-- packed: 2-layer bidirectional LSTM 64 -> 128, batch 32 of 28 distinct lengths, fwd + bwd
cases.packed_lstm = function()
  local m = nn.LSTM(64, 128, 2, { bidirectional = true })
  local x = dpl.randn(50, 32, 64)
  local lens = dpl.tensor(PERM, { dtype = 'int64' })
  return function()
    m:zero_grad()
    local ps = rnn.pack_padded_sequence(x, lens, { enforce_sorted = false })
    local out, st = m(ps)
    local loss = out.data:sum() + st[1]:sum()
    loss:backward()
  end, 10
end
-- the same packed batch into a 2-layer bidirectional GRU / tanh RNN 64 -> 128
local function packed(kind)
  return function()
    local m = nn[kind](64, 128, 2, { bidirectional = true })
    local x = dpl.randn(50, 32, 64)
    local lens = dpl.tensor(PERM, { dtype = 'int64' })
    return function()
      m:zero_grad()
      local ps = rnn.pack_padded_sequence(x, lens, { enforce_sorted = false })
      local out, hn = m(ps)
      local loss = out.data:sum() + hn:sum()
      loss:backward()
    end, 10
  end
end
cases.packed_gru = packed('GRU')
cases.packed_rnn = packed('RNN')
-- the same batch padded to 50 steps without packing
cases.padded_lstm = function()
  local m = nn.LSTM(64, 128, 2, { bidirectional = true })
  local x = dpl.randn(50, 32, 64)
  return function()
    m:zero_grad()
    local out, st = m(x)
    local loss = out:sum() + st[1]:sum()
    loss:backward()
  end, 10
end
-- language-model training step: Embedding(2000, 128) -> LSTM/GRU(128, 256, 2, batch_first) ->
-- Linear(256, 2000) -> cross_entropy over [B*T, V], B = 32, T = 35, Adam-free SGD step
local function lm(kind)
  return function()
    local V, B, Tn = 2000, 32, 35
    local emb, r, fc = nn.Embedding(V, 128), nn[kind](128, 256, 2, { batch_first = true }), nn.Linear(256, V)
    local params = {}
    for _, mod in ipairs({ emb, r, fc }) do for _, p in ipairs(mod:parameters()) do params[#params + 1] = p end end
    local opt = dpl.optim.SGD(params, { lr = 0.1 })
    local x, y = dpl.randint(1, V + 1, { B, Tn }), dpl.randint(1, V + 1, { B * Tn })
    return function()
      opt:zero_grad()
      local h = r(emb(x))
      local loss = F.cross_entropy(fc(h):reshape(B * Tn, V), y)
      loss:backward()
      opt:step()
    end, 5
  end
end
cases.lm_lstm = lm('LSTM')
cases.lm_gru = lm('GRU')
-- generation: Embedding(1000, 128) -> LSTM(128, 256, 2) -> Linear(256, 1000) -> argmax, B = 1,
-- one token per step under no_grad (us per token)
cases.gen_lstm = function()
  local emb, r, fc = nn.Embedding(1000, 128), nn.LSTM(128, 256, 2), nn.Linear(256, 1000)
  local tok, st = dpl.tensor({ { 1 } }, { dtype = 'int64' }), nil
  local function step()
    local out
    out, st = r(emb(tok), st)
    tok = fc(out):argmax(-1)
    return tok
  end
  return function() dpl.no_grad(step) end, 200
end
-- generation: TransformerDecoder (2 layers, d_model 128, 4 heads, ff 256, dropout 0), memory of
-- 16 positions, greedy over 32 tokens without a cache (each step decodes the whole prefix; us per token)
cases.gen_transformer = function()
  local E, V, N = 128, 1000, 32
  local dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(E, 4, { dim_feedforward = 256, dropout = 0 }), 2)
  dec:eval()
  local emb, fc = nn.Embedding(V, E), nn.Linear(E, V)
  local mem = dpl.randn(16, 1, E)
  local masks = {}
  for L = 1, N do masks[L] = nn.Transformer.generate_square_subsequent_mask(L) end
  local function gen()
    local toks = { 1 }
    for L = 1, N do
      local ids = dpl.tensor(toks, { dtype = 'int64' }):view(L, 1)
      local out = dec(emb(ids), mem, { tgt_mask = masks[L] })
      toks[L + 1] = fc(out:select(1, L)):argmax(-1):item()
    end
  end
  return function() dpl.no_grad(gen) end, 2, N
end

-- DPL_RNN_PACKED=0: packed batches run by length (the path before the one-loop packed kernels)
if os.getenv('DPL_RNN_PACKED') == '0' then F._seq.packed = false end
local which = { ... }
if #which == 0 then which = { 'packed_lstm', 'padded_lstm', 'lm_lstm', 'lm_gru', 'gen_lstm', 'gen_transformer' } end
local reps = tonumber(os.getenv('REPS') or '') or 5
for _, name in ipairs(which) do
  dpl.manual_seed(0)
  local step, n, per = cases[name]()
  print(('%s_us %.1f'):format(name, time_us(step, n, reps) / (per or 1)))
end
