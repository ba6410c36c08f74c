-- dpl.nn.functional_seq: the functions of the sequence group (recurrent nets and attention),
-- installed into dpl.nn.functional by require('dpl.nn.functional_seq')(F):
--   F.scaled_dot_product_attention(q, k, v [, {attn_mask=, dropout_p=0, is_causal=false, scale=}])
--     (torch 2.x's; a boolean attn_mask there means True = may attend, as in torch)
--   F.multi_head_attention_forward(query, key, value, embed_dim, num_heads, in_proj_weight,
--     in_proj_bias, bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias
--     [, {training=, key_padding_mask=, need_weights=, attn_mask=, use_separate_proj_weight=,
--     q_proj_weight=, k_proj_weight=, v_proj_weight=, static_k=, static_v=, average_attn_weights=}])
--   and, for nn.RNN/LSTM/GRU and their cells, the time loop of one layer and direction:
--   F._lstm_layer(xp, h0, c0, w_hh, reverse) -> y, h_n, c_n; F._gru_layer(xp, h0, w_hh, b_hh,
--   reverse) -> y, h_n; F._rnn_layer(xp, h0, w_hh, relu, reverse) -> y, h_n, where xp [T, B, G*H]
--   is the input projection of every step (one GEMM made by the caller).
-- A time loop on tensors in host memory (float32/float64) runs per step one GEMM (the hidden
-- projection, the input's part added by it) and one C kernel for the gates
-- (src/tensor/dpl_tensor_rnn.c); it is one autograd node (rules lstm_seq, gru_seq, rnn_seq)
-- whose backward runs the loop back through time with one kernel and one GEMM per step, and the
-- weight gradient as one GEMM over all steps. Elsewhere (tensors in GPU memory, float16) the
-- step is composed of differentiable tensor ops.
local T = require 'dpl.tensor'
local autograd = require 'dpl.autograd'
local options = require 'dpl.options'
local C = require('dpl.capi').C
local bit = require 'bit'

local fmt = string.format
local error = require('dpl.errors').raise -- string messages become ValueError objects
local errors = require 'dpl.errors'
local is_tensor = T.is_tensor
local check_opts, keys = options.check, options.keys

-- packed forward: the state entering step p, b rows: the first s continue from the previous
-- step's rows (from, starting at row prev + 1), the others start from init (h0 or c0)
local function packed_state(dst, from, prev, s, init, b)
  if s > 0 then dst:narrow(1, 1, s):copy_(from:narrow(1, prev + 1, s)) end
  if s < b then dst:narrow(1, s + 1, b - s):copy_(init:narrow(1, s + 1, b - s)) end
  return dst
end

-- packed backward: the gradient reaching the hidden state of processing step p - 1, whose
-- nprev rows start at row r0 + 1 of the packed gY: gY's rows plus dp @ w for the s of them
-- that went on into step p (rows s + 1 .. nprev ended at step p - 1: their gradient is gY's)
local function packed_prev_dh(gY, r0, nprev, dp, s, w)
  local gyp = gY:narrow(1, r0 + 1, nprev)
  if s == nprev then return T.addmm(gyp, dp:narrow(1, 1, s), w) end
  local dh = gyp:clone()
  dh:narrow(1, 1, s):copy_(T.addmm(gyp:narrow(1, 1, s), dp:narrow(1, 1, s), w))
  return dh
end

local function shape_str(t) return '[' .. table.concat(t:size(), ', ') .. ']' end
local function like(t) return { dtype = t.dtype, device = t.device } end
local function ok(st) if st ~= 0 then T._fail(2, st) end end

return function(F)
  local FS = {}
  -- false: always compose the step of tensor ops (the path of GPU tensors; the specs compare both)
  FS.fused = true
  -- false: run a packed batch by length, one loop per distinct length (the specs compare both)
  FS.packed = true

  -- the C kernels take float32/float64 tensors in host memory (fixed arguments, no vararg loops:
  -- Debian's LuaJIT can mis-record those, docs/tensors.md)
  local function host_f(t) return t == nil or (bit.band(t._flags, 2) == 0 and t._dtype <= 1) end
  local function fusable(a, b, c, d, e)
    return FS.fused and host_f(a) and host_f(b) and host_f(c) and host_f(d) and host_f(e)
  end
  local function rg(t) return t ~= nil and t.requires_grad end
  local function any_grad(a, b, c, d, e)
    return autograd.is_grad_enabled() and (rg(a) or rg(b) or rg(c) or rg(d) or rg(e))
  end

  -- W^T for the time loop's GEMMs: a contiguous copy pays off over many steps (about 10% faster
  -- per GEMM), but costs as much as several of them (4H x H floats: 0.27 ms for H = 256), so short
  -- loops (a cell, a generation step: T = 1) use the transposed view (B = 1: copy from T = 40;
  -- B = 64: from T = 16)
  local function wt_for(w, Tn, B)
    if Tn * (B + 40) >= 1600 then return w:t():contiguous() end
    return w:t()
  end

  ---------------------------------------------------------------- LSTM
  -- The node's output is flat: y [T, B, P] then c_n [B, H] (P = H, or proj_size with w_hr [P, H]:
  -- h = (o * tanh(c)) w_hr^T). Buffers (processing order): Hall [T + 1, B, P] the states h fed to
  -- each step, Call [T + 1, B, H] the cells, A [T, B, 4H] the gates, R [T, B, H] o * tanh(c) (proj).
  local function lstm_backward(ctx, g, need_xp, need_h0, need_c0, need_w, need_whr)
    local Tn, B, H, P, rev, w, whr = ctx.T, ctx.B, ctx.H, ctx.P, ctx.reverse, ctx.w, ctx.w_hr
    local Hall, Call, A, R = ctx.Hall, ctx.Call, ctx.A, ctx.R
    g = g:contiguous()
    local gY = g:narrow(1, 1, Tn * B * P):view(Tn, B, P)
    local function gy(k) return gY:select(1, rev and Tn + 1 - k or k) end
    local o = like(A)
    local dpre = T.empty({ Tn, B, 4 * H }, o)
    local dH = whr and T.empty({ Tn, B, P }, o) or nil
    local dh = gy(Tn)
    local dc = g:narrow(1, Tn * B * P + 1, B * H):view(B, H):clone()
    for k = Tn, 1, -1 do
      local dp = dpre:select(1, k)
      local dr = dh
      if whr then
        dH:select(1, k):copy_(dh)
        dr = dh:mm(whr)
      end
      ok(C.dpl_lstm_cell_backward(dr, dc, A:select(1, k), Call:select(1, k + 1), Call:select(1, k), dp))
      if k > 1 then dh = T.addmm(gy(k - 1), dp, w)
      elseif need_h0 then dh = dp:mm(w) end
    end
    local gxp = need_xp and (rev and dpre:flip(1) or dpre) or nil
    local gw = need_w and dpre:view(Tn * B, 4 * H):t():mm(Hall:narrow(1, 1, Tn):view(Tn * B, P)) or nil
    local gwr = whr and need_whr and dH:view(Tn * B, P):t():mm(R:view(Tn * B, H)) or nil
    return gxp, need_h0 and dh or nil, need_c0 and dc or nil, gw, gwr
  end

  local function lstm_fused(xp, h0, c0, w, rev, whr)
    local Tn, B, H = xp:size(1), xp:size(2), c0:size(2)
    local P = whr and whr:size(1) or H
    local rec = any_grad(xp, h0, c0, w, whr)
    local ctx = { T = Tn, B = B, H = H, P = P, reverse = rev, w = w, w_hr = whr, backward = lstm_backward }
    local out = autograd.no_grad(function()
      local o = like(xp)
      local Hall, Call = T.empty({ Tn + 1, B, P }, o), T.empty({ Tn + 1, B, H }, o)
      Hall:select(1, 1):copy_(h0)
      Call:select(1, 1):copy_(c0)
      local A = rec and T.empty({ Tn, B, 4 * H }, o) or nil
      local R = whr and T.empty({ Tn, B, H }, o) or nil
      local wt = wt_for(w, Tn, B)
      local wrt = whr and wt_for(whr, Tn, B)
      for k = 1, Tn do
        local pre = T.addmm(xp:select(1, rev and Tn + 1 - k or k), Hall:select(1, k), wt)
        local hk = R and R:select(1, k) or Hall:select(1, k + 1)
        ok(C.dpl_lstm_cell_forward(pre, Call:select(1, k), hk, Call:select(1, k + 1), A and A:select(1, k) or nil))
        if R then Hall:select(1, k + 1):copy_(hk:mm(wrt)) end
      end
      ctx.Hall, ctx.Call, ctx.A, ctx.R = Hall, Call, A, R
      local hs = Hall:narrow(1, 2, Tn)
      if rev then hs = hs:flip(1) end
      return T.cat({ hs:reshape(-1), Call:select(1, Tn + 1):reshape(-1) }, 1) -- [y; c_n], a new tensor
    end)
    if rec then autograd.record(autograd.rules.lstm_seq, out, xp, h0, c0, w, whr, ctx) end
    local y = out:narrow(1, 1, Tn * B * P):view(Tn, B, P)
    return y, y:select(1, rev and 1 or Tn), out:narrow(1, Tn * B * P + 1, B * H):view(B, H)
  end

  local function lstm_composed(xp, h0, c0, w, rev, whr)
    local Tn = xp:size(1)
    local wt, h, c, hs = w:t(), h0, c0, {}
    for k = 1, Tn do
      local t = rev and Tn + 1 - k or k
      local gates = T.addmm(xp:select(1, t), h, wt):chunk(4, 2)
      c = gates[2]:sigmoid() * c + gates[1]:sigmoid() * gates[3]:tanh()
      h = gates[4]:sigmoid() * c:tanh()
      if whr then h = h:mm(whr:t()) end
      hs[t] = h
    end
    return T.stack(hs, 1), h, c
  end

  --- F._lstm_layer(xp [T, B, 4H], h0 [B, P], c0 [B, H], w_hh [4H, P], reverse [, w_hr [P, H]])
  --- -> y [T, B, P], h_n [B, P], c_n [B, H] (P = H without w_hr, LSTM's proj_size with it)
  function FS._lstm_layer(xp, h0, c0, w, rev, whr)
    if fusable(xp, h0, c0, w, whr) then return lstm_fused(xp, h0, c0, w, rev, whr) end
    return lstm_composed(xp, h0, c0, w, rev, whr)
  end

  ---------------------------------------------------------------- packed LSTM
  -- A packed batch (nn.utils.rnn) in one time loop, as cuDNN and PyTorch run it: the sequences
  -- sorted by decreasing length, step t's rows of the packed data are the first bs[t] sequences
  -- (rows off[t] + 1 .. off[t] + bs[t]), so step t runs those rows only. Processing step p (time
  -- t = p, or Tn + 1 - p in reverse) takes the state of its first s = min(n_{p-1}, n_p) rows from
  -- the previous processing step and of the others from h0 / c0 (n_p the rows of step p, n_0 = 0:
  -- forward, only step 1 starts; reverse, each sequence starts at its last step). Every buffer is
  -- packed [N, *]: Y the outputs (h), Cs the cells, Hp / Cp the state fed to each row, A the gates.
  -- A sequence's h_n is its output row at its last processing step (rows `last`, or the first
  -- bs[1] rows in reverse); c_n is part of the node's output [Y; c_n]. With proj_size (w_hr [P, H])
  -- Y and Hp are [N, P] and R [N, H] holds o * tanh(c) (h = R w_hr^T).
  local function lstm_packed_backward(ctx, g, need_xp, need_h0, need_c0, need_w, need_whr)
    local bs, off, Tn, N, B, H, P, rev, w = ctx.bs, ctx.off, #ctx.bs, ctx.N, ctx.B, ctx.H, ctx.P, ctx.reverse, ctx.w
    local A, Cs, Hp, Cp, R, whr = ctx.A, ctx.Cs, ctx.Hp, ctx.Cp, ctx.R, ctx.w_hr
    g = g:contiguous()
    local gY = g:narrow(1, 1, N * P):view(N, P)
    local gCn = g:narrow(1, N * P + 1, B * H):view(B, H)
    local o = like(A)
    local dP = T.empty({ N, 4 * H }, o)
    local dH = whr and T.empty({ N, P }, o) or nil
    local dc = T.empty({ B, H }, o)
    local dh0 = need_h0 and T.empty({ B, P }, o) or nil
    local dc0 = need_c0 and T.empty({ B, H }, o) or nil
    local tl = rev and 1 or Tn -- the time of the last processing step
    local dh = gY:narrow(1, off[tl] + 1, bs[tl])
    for p = Tn, 1, -1 do
      local t = rev and Tn + 1 - p or p
      local b, r0 = bs[t], off[t]
      local e = p < Tn and math.min(b, bs[rev and t - 1 or t + 1]) or 0 -- rows going on to step p + 1
      if e < b then dc:narrow(1, e + 1, b - e):copy_(gCn:narrow(1, e + 1, b - e)) end -- rows ending at p
      local dp, dcb = dP:narrow(1, r0 + 1, b), dc:narrow(1, 1, b)
      if whr then
        dH:narrow(1, r0 + 1, b):copy_(dh)
        dh = dh:mm(whr)
      end
      ok(C.dpl_lstm_cell_backward(dh, dcb, A:narrow(1, r0 + 1, b), Cs:narrow(1, r0 + 1, b), Cp:narrow(1, r0 + 1, b), dp))
      local tp = rev and t + 1 or t - 1 -- the time of processing step p - 1
      local nprev = p > 1 and bs[tp] or 0
      local s = math.min(nprev, b) -- rows whose state came from step p - 1; the others from h0, c0
      if s < b then
        if dc0 then dc0:narrow(1, s + 1, b - s):copy_(dc:narrow(1, s + 1, b - s)) end
        if dh0 then dh0:narrow(1, s + 1, b - s):copy_(dp:narrow(1, s + 1, b - s):mm(w)) end
      end
      if p > 1 then dh = packed_prev_dh(gY, off[tp], nprev, dp, s, w) end
    end
    local gw = need_w and dP:t():mm(Hp) or nil
    local gwr = whr and need_whr and dH:t():mm(R) or nil
    return need_xp and dP or nil, dh0, dc0, gw, gwr
  end

  local function lstm_packed(xp, bs, off, last, h0, c0, w, rev, whr)
    local N, Tn, B, H = xp:size(1), #bs, h0:size(1), c0:size(2)
    local P = whr and whr:size(1) or H
    local rec = any_grad(xp, h0, c0, w, whr)
    local ctx = { bs = bs, off = off, N = N, B = B, H = H, P = P, reverse = rev, w = w, w_hr = whr,
      backward = lstm_packed_backward }
    local out = autograd.no_grad(function()
      local o = like(xp)
      local out = T.empty({ N * P + B * H }, o)
      local Y, Cn = out:narrow(1, 1, N * P):view(N, P), out:narrow(1, N * P + 1, B * H):view(B, H)
      local Cs, Hp, Cp = T.empty({ N, H }, o), T.empty({ N, P }, o), T.empty({ N, H }, o)
      local A = rec and T.empty({ N, 4 * H }, o) or nil
      local R = whr and T.empty({ N, H }, o) or nil
      local wt = wt_for(w, Tn, B)
      local wrt = whr and wt_for(whr, Tn, B)
      local prev, nprev = 0, 0
      for p = 1, Tn do
        local t = rev and Tn + 1 - p or p
        local b, r0 = bs[t], off[t]
        local s = math.min(nprev, b)
        local hp = packed_state(Hp:narrow(1, r0 + 1, b), Y, prev, s, h0, b)
        local cp = packed_state(Cp:narrow(1, r0 + 1, b), Cs, prev, s, c0, b)
        local pre = T.addmm(xp:narrow(1, r0 + 1, b), hp, wt)
        local hk = (R or Y):narrow(1, r0 + 1, b)
        ok(C.dpl_lstm_cell_forward(pre, cp, hk, Cs:narrow(1, r0 + 1, b), A and A:narrow(1, r0 + 1, b) or nil))
        if R then Y:narrow(1, r0 + 1, b):copy_(hk:mm(wrt)) end
        prev, nprev = r0, b
      end
      Cn:copy_(rev and Cs:narrow(1, 1, B) or Cs:index_select(1, last))
      ctx.A, ctx.Cs, ctx.Hp, ctx.Cp, ctx.R = A, Cs, Hp, Cp, R
      return out
    end)
    if rec then autograd.record(autograd.rules.lstm_seq, out, xp, h0, c0, w, whr, ctx) end
    local y = out:narrow(1, 1, N * P):view(N, P)
    return y, rev and y:narrow(1, 1, B) or y:index_select(1, last), out:narrow(1, N * P + 1, B * H):view(B, H)
  end

  --- F._lstm_packed(xp [N, 4H], bs, off, last, h0 [B, P], c0 [B, H], w_hh [4H, P], reverse [, w_hr [P, H]])
  --- -> y [N, P], h_n [B, P], c_n [B, H] (sorted order; P = H without w_hr), or nil where the fused
  --- loop does not apply (the caller then runs the sequences by length). bs: the batch sizes (a Lua
  --- list), off: each step's first row - 1, last: an int64 tensor of each sequence's last row
  --- (1-based, sorted order).
  function FS._lstm_packed(xp, bs, off, last, h0, c0, w, rev, whr)
    if not (FS.packed and fusable(xp, h0, c0, w, whr)) then return nil end
    return lstm_packed(xp, bs, off, last, h0, c0, w, rev, whr)
  end

  ---------------------------------------------------------------- GRU
  local function gru_backward(ctx, g, need_xp, need_h0, need_w, need_b)
    local Tn, B, H, rev, w = ctx.T, ctx.B, ctx.H, ctx.reverse, ctx.w
    local Hall, A = ctx.Hall, ctx.A
    g = g:contiguous()
    local function gy(k) return g:select(1, rev and Tn + 1 - k or k) end
    local o = like(A)
    local dxp, dhh, dprev = T.empty({ Tn, B, 3 * H }, o), T.empty({ Tn, B, 3 * H }, o), T.empty({ B, H }, o)
    local dh = gy(Tn)
    for k = Tn, 1, -1 do
      local dk = dhh:select(1, k)
      ok(C.dpl_gru_cell_backward(dh, A:select(1, k), Hall:select(1, k), k > 1 and gy(k - 1) or nil, dxp:select(1, k),
        dk, dprev))
      if k > 1 or need_h0 then dh = T.addmm(dprev, dk, w) end
    end
    local gxp = need_xp and (rev and dxp:flip(1) or dxp) or nil
    local d2 = dhh:view(Tn * B, 3 * H)
    local gw = need_w and d2:t():mm(Hall:narrow(1, 1, Tn):view(Tn * B, H)) or nil
    return gxp, need_h0 and dh or nil, gw, need_b and d2:sum(1) or nil
  end

  local function gru_fused(xp, h0, w, b, rev)
    local Tn, B, H = xp:size(1), xp:size(2), w:size(2)
    local rec = any_grad(xp, h0, w, b)
    local ctx = { T = Tn, B = B, H = H, reverse = rev, w = w, b = b, backward = gru_backward }
    local out = autograd.no_grad(function()
      local o = like(xp)
      local Hall = T.empty({ Tn + 1, B, H }, o)
      Hall:select(1, 1):copy_(h0)
      local A = rec and T.empty({ Tn, B, 4 * H }, o) or nil
      local wt = wt_for(w, Tn, B)
      for k = 1, Tn do
        local hp = Hall:select(1, k)
        local hh = b and T.addmm(b, hp, wt) or hp:mm(wt)
        local x = xp:select(1, rev and Tn + 1 - k or k)
        if not x:is_contiguous() then x = x:contiguous() end
        ok(C.dpl_gru_cell_forward(x, hh, hp, Hall:select(1, k + 1), A and A:select(1, k) or nil))
      end
      ctx.Hall, ctx.A = Hall, A
      local hs = Hall:narrow(1, 2, Tn)
      return rev and hs:flip(1) or hs:clone()
    end)
    if rec then autograd.record(autograd.rules.gru_seq, out, xp, h0, w, b, ctx) end
    return out, out:select(1, rev and 1 or Tn)
  end

  local function gru_composed(xp, h0, w, b, rev)
    local Tn = xp:size(1)
    local wt, h, hs = w:t(), h0, {}
    for k = 1, Tn do
      local t = rev and Tn + 1 - k or k
      local x = xp:select(1, t):chunk(3, 2)
      local hh = (b and T.addmm(b, h, wt) or h:mm(wt)):chunk(3, 2)
      local r = (x[1] + hh[1]):sigmoid()
      local z = (x[2] + hh[2]):sigmoid()
      local n = (x[3] + r * hh[3]):tanh()
      h = (h - n) * z + n
      hs[t] = h
    end
    return T.stack(hs, 1), h
  end

  --- F._gru_layer(xp [T, B, 3H] (x W_ih^T + b_ih), h0 [B, H], w_hh [3H, H], b_hh [3H] or nil, reverse) -> y, h_n
  function FS._gru_layer(xp, h0, w, b, rev)
    if fusable(xp, h0, w, b) then return gru_fused(xp, h0, w, b, rev) end
    return gru_composed(xp, h0, w, b, rev)
  end

  ---------------------------------------------------------------- packed GRU
  -- As the packed LSTM (the rows of processing step p: the first bs[t] sequences, the state of
  -- the first s = min(n_{p-1}, n_p) from step p - 1, the others' from h0); buffers packed [N, *]:
  -- Y the outputs (h, the node's output), Hp the state fed to each row, A the gates (r, z, n, hh_n).
  local function gru_packed_backward(ctx, g, need_xp, need_h0, need_w, need_b)
    local bs, off, Tn, N, B, H, rev, w = ctx.bs, ctx.off, #ctx.bs, ctx.N, ctx.B, ctx.H, ctx.reverse, ctx.w
    local A, Hp = ctx.A, ctx.Hp
    local gY = g:contiguous()
    local o = like(A)
    local dXp, dHH, dprev = T.empty({ N, 3 * H }, o), T.empty({ N, 3 * H }, o), T.empty({ B, H }, o)
    local dh0 = need_h0 and T.empty({ B, H }, o) or nil
    local tl = rev and 1 or Tn -- the time of the last processing step
    local dh = gY:narrow(1, off[tl] + 1, bs[tl])
    for p = Tn, 1, -1 do
      local t = rev and Tn + 1 - p or p
      local b, r0 = bs[t], off[t]
      local tp = rev and t + 1 or t - 1 -- the time of processing step p - 1
      local nprev = p > 1 and bs[tp] or 0
      local s = math.min(nprev, b) -- rows whose state came from step p - 1; the others from h0
      local gyp = p > 1 and gY:narrow(1, off[tp] + 1, nprev) or nil
      local dk = dHH:narrow(1, r0 + 1, b)
      -- dprev = dh * z (+ gY of step p - 1 where every row of the step continues from it)
      local gin = (s == b and gyp) and gyp:narrow(1, 1, b) or nil
      local dpv = dprev:narrow(1, 1, b)
      ok(C.dpl_gru_cell_backward(dh, A:narrow(1, r0 + 1, b), Hp:narrow(1, r0 + 1, b), gin, dXp:narrow(1, r0 + 1, b),
        dk, dpv))
      if s < b then
        if dh0 then dh0:narrow(1, s + 1, b - s):copy_(T.addmm(dpv:narrow(1, s + 1, b - s), dk:narrow(1, s + 1, b - s), w)) end
      end
      if p > 1 then
        if s == b then -- gY is in dprev
          local full = T.addmm(dpv, dk, w)
          if nprev == b then dh = full
          else -- rows b + 1 .. nprev end at step p - 1: their gradient is gY's
            dh = gyp:clone()
            dh:narrow(1, 1, b):copy_(full)
          end
        else -- s = nprev < b
          dh = T.addmm(gyp, dk:narrow(1, 1, s), w):add_(dpv:narrow(1, 1, s))
        end
      end
    end
    local gw = need_w and dHH:t():mm(Hp) or nil
    return need_xp and dXp or nil, dh0, gw, need_b and dHH:sum(1) or nil
  end

  local function gru_packed(xp, bs, off, last, h0, w, bhh, rev)
    local N, Tn, B, H = xp:size(1), #bs, h0:size(1), w:size(2)
    local rec = any_grad(xp, h0, w, bhh)
    local ctx = { bs = bs, off = off, N = N, B = B, H = H, reverse = rev, w = w, backward = gru_packed_backward }
    local Y = autograd.no_grad(function()
      local o = like(xp)
      local Y, Hp = T.empty({ N, H }, o), T.empty({ N, H }, o)
      local A = rec and T.empty({ N, 4 * H }, o) or nil
      local x = xp:is_contiguous() and xp or xp:contiguous()
      local wt = wt_for(w, Tn, B)
      local prev, nprev = 0, 0
      for p = 1, Tn do
        local t = rev and Tn + 1 - p or p
        local b, r0 = bs[t], off[t]
        local s = math.min(nprev, b)
        local hp = packed_state(Hp:narrow(1, r0 + 1, b), Y, prev, s, h0, b)
        local hh = bhh and T.addmm(bhh, hp, wt) or hp:mm(wt)
        ok(C.dpl_gru_cell_forward(x:narrow(1, r0 + 1, b), hh, hp, Y:narrow(1, r0 + 1, b), A and A:narrow(1, r0 + 1, b) or nil))
        prev, nprev = r0, b
      end
      ctx.A, ctx.Hp = A, Hp
      return Y
    end)
    if rec then autograd.record(autograd.rules.gru_seq, Y, xp, h0, w, bhh, ctx) end
    return Y, rev and Y:narrow(1, 1, B) or Y:index_select(1, last)
  end

  --- F._gru_packed(xp [N, 3H] (x W_ih^T + b_ih), bs, off, last, h0 [B, H], w_hh [3H, H], b_hh [3H] or nil,
  --- reverse) -> y [N, H], h_n [B, H] (sorted order), or nil where the fused loop does not apply (as
  --- F._lstm_packed)
  function FS._gru_packed(xp, bs, off, last, h0, w, bhh, rev)
    if not (FS.packed and fusable(xp, h0, w, bhh)) then return nil end
    return gru_packed(xp, bs, off, last, h0, w, bhh, rev)
  end

  ---------------------------------------------------------------- Elman RNN
  local function rnn_backward(ctx, g, need_xp, need_h0, need_w)
    local Tn, B, H, rev, w, relu = ctx.T, ctx.B, ctx.H, ctx.reverse, ctx.w, ctx.relu
    local Hall = ctx.Hall
    g = g:contiguous()
    local function gy(k) return g:select(1, rev and Tn + 1 - k or k) end
    local dpre = T.empty({ Tn, B, H }, like(Hall))
    local dh = gy(Tn)
    for k = Tn, 1, -1 do
      local dp = dpre:select(1, k)
      ok(C.dpl_rnn_cell_backward(relu, dh, Hall:select(1, k + 1), dp))
      if k > 1 then dh = T.addmm(gy(k - 1), dp, w)
      elseif need_h0 then dh = dp:mm(w) end
    end
    local gxp = need_xp and (rev and dpre:flip(1) or dpre) or nil
    local gw = need_w and dpre:view(Tn * B, H):t():mm(Hall:narrow(1, 1, Tn):view(Tn * B, H)) or nil
    return gxp, need_h0 and dh or nil, gw
  end

  local function rnn_fused(xp, h0, w, relu, rev)
    local Tn, B, H = xp:size(1), xp:size(2), w:size(2)
    local r = relu and 1 or 0
    local ctx = { T = Tn, B = B, H = H, reverse = rev, w = w, relu = r, backward = rnn_backward }
    local out = autograd.no_grad(function()
      local Hall = T.empty({ Tn + 1, B, H }, like(xp))
      Hall:select(1, 1):copy_(h0)
      local wt = wt_for(w, Tn, B)
      for k = 1, Tn do
        local pre = T.addmm(xp:select(1, rev and Tn + 1 - k or k), Hall:select(1, k), wt)
        ok(C.dpl_rnn_cell_forward(r, pre, Hall:select(1, k + 1)))
      end
      ctx.Hall = Hall
      local hs = Hall:narrow(1, 2, Tn)
      return rev and hs:flip(1) or hs:clone()
    end)
    if any_grad(xp, h0, w) then autograd.record(autograd.rules.rnn_seq, out, xp, h0, w, ctx) end
    return out, out:select(1, rev and 1 or Tn)
  end

  local function rnn_composed(xp, h0, w, relu, rev)
    local Tn = xp:size(1)
    local wt, h, hs = w:t(), h0, {}
    for k = 1, Tn do
      local t = rev and Tn + 1 - k or k
      local pre = T.addmm(xp:select(1, t), h, wt)
      h = relu and pre:relu() or pre:tanh()
      hs[t] = h
    end
    return T.stack(hs, 1), h
  end

  --- F._rnn_layer(xp [T, B, H], h0 [B, H], w_hh [H, H], relu (boolean), reverse) -> y, h_n
  function FS._rnn_layer(xp, h0, w, relu, rev)
    if fusable(xp, h0, w) then return rnn_fused(xp, h0, w, relu, rev) end
    return rnn_composed(xp, h0, w, relu, rev)
  end

  ---------------------------------------------------------------- packed Elman RNN
  -- As the packed LSTM: Y [N, H] the outputs (the node's output), Hp [N, H] the state fed to each row.
  local function rnn_packed_backward(ctx, g, need_xp, need_h0, need_w)
    local bs, off, Tn, N, B, H, rev, w = ctx.bs, ctx.off, #ctx.bs, ctx.N, ctx.B, ctx.H, ctx.reverse, ctx.w
    local Y, Hp, relu = ctx.Y, ctx.Hp, ctx.relu
    local gY = g:contiguous()
    local o = like(Y)
    local dP = T.empty({ N, H }, o)
    local dh0 = need_h0 and T.empty({ B, H }, o) or nil
    local tl = rev and 1 or Tn -- the time of the last processing step
    local dh = gY:narrow(1, off[tl] + 1, bs[tl])
    for p = Tn, 1, -1 do
      local t = rev and Tn + 1 - p or p
      local b, r0 = bs[t], off[t]
      local dp = dP:narrow(1, r0 + 1, b)
      ok(C.dpl_rnn_cell_backward(relu, dh, Y:narrow(1, r0 + 1, b), dp))
      local tp = rev and t + 1 or t - 1 -- the time of processing step p - 1
      local nprev = p > 1 and bs[tp] or 0
      local s = math.min(nprev, b) -- rows whose state came from step p - 1; the others from h0
      if s < b and dh0 then dh0:narrow(1, s + 1, b - s):copy_(dp:narrow(1, s + 1, b - s):mm(w)) end
      if p > 1 then dh = packed_prev_dh(gY, off[tp], nprev, dp, s, w) end
    end
    local gw = need_w and dP:t():mm(Hp) or nil
    return need_xp and dP or nil, dh0, gw
  end

  local function rnn_packed(xp, bs, off, last, h0, w, relu, rev)
    local N, Tn, B, H = xp:size(1), #bs, h0:size(1), w:size(2)
    local r = relu and 1 or 0
    local ctx = { bs = bs, off = off, N = N, B = B, H = H, reverse = rev, w = w, relu = r, backward = rnn_packed_backward }
    local Y = autograd.no_grad(function()
      local o = like(xp)
      local Y, Hp = T.empty({ N, H }, o), T.empty({ N, H }, o)
      local wt = wt_for(w, Tn, B)
      local prev, nprev = 0, 0
      for p = 1, Tn do
        local t = rev and Tn + 1 - p or p
        local b, r0 = bs[t], off[t]
        local s = math.min(nprev, b)
        local hp = packed_state(Hp:narrow(1, r0 + 1, b), Y, prev, s, h0, b)
        ok(C.dpl_rnn_cell_forward(r, T.addmm(xp:narrow(1, r0 + 1, b), hp, wt), Y:narrow(1, r0 + 1, b)))
        prev, nprev = r0, b
      end
      ctx.Y, ctx.Hp = Y, Hp
      return Y
    end)
    if any_grad(xp, h0, w) then autograd.record(autograd.rules.rnn_seq, Y, xp, h0, w, ctx) end
    return Y, rev and Y:narrow(1, 1, B) or Y:index_select(1, last)
  end

  --- F._rnn_packed(xp [N, H], bs, off, last, h0 [B, H], w_hh [H, H], relu, reverse) -> y [N, H], h_n [B, H]
  --- (sorted order), or nil where the fused loop does not apply (as F._lstm_packed)
  function FS._rnn_packed(xp, bs, off, last, h0, w, relu, rev)
    if not (FS.packed and fusable(xp, h0, w)) then return nil end
    return rnn_packed(xp, bs, off, last, h0, w, relu, rev)
  end

  ---------------------------------------------------------------- attention
  local function float_dtype(t) return t._dtype <= 3 end
  local SDPA_KEYS = keys('attn_mask', 'dropout_p', 'is_causal', 'scale')

  local function need_tensor(fn, what, t, ndims)
    if not is_tensor(t) then error(fmt('%s: %s must be a tensor, got %s', fn, what, type(t)), 3) end
    if not float_dtype(t) then error(fmt('%s: %s must be a floating-point tensor, got %s', fn, what, t.dtype), 3) end
    if ndims and t:dim() < ndims then
      error(fmt('%s: %s must have at least %d dims, got shape %s', fn, what, ndims, shape_str(t)), 3)
    end
  end
  local function need_prob(fn, what, p)
    if type(p) ~= 'number' or not (p >= 0 and p <= 1) then
      error(fmt('%s: %s must be a probability in [0, 1], got %s', fn, what, tostring(p)), 3)
    end
  end
  local function need_bool(fn, what, v)
    if v ~= nil and type(v) ~= 'boolean' then
      error(fmt('%s: %s must be a boolean, got %s', fn, what, type(v)), 3)
    end
  end

  --- F.scaled_dot_product_attention(query [..., L, E], key [..., S, E], value [..., S, Ev]
  --- [, {attn_mask=, dropout_p=0, is_causal=false, scale=1/sqrt(E)}]) -> [..., L, Ev]: torch 2.x's
  --- softmax(q k^T * scale + mask) v (batch dims broadcast). attn_mask: bool (true = may attend, as
  --- torch's SDPA, the opposite of nn.MultiheadAttention's masks) or float (added), broadcast to
  --- [..., L, S]; is_causal: the lower triangle may attend (no attn_mask then); dropout_p applies
  --- whenever it is > 0 (as torch: pass 0 in eval).
  function FS.scaled_dot_product_attention(q, k, v, opts)
    local fn = 'scaled_dot_product_attention'
    need_tensor(fn, 'query', q, 2)
    need_tensor(fn, 'key', k, 2)
    need_tensor(fn, 'value', v, 2)
    check_opts(opts, SDPA_KEYS, fn)
    opts = opts or {}
    if q:size(-1) ~= k:size(-1) or k:size(-2) ~= v:size(-2) or q.dtype ~= k.dtype or k.dtype ~= v.dtype then
      error(fmt('%s: expected query [..., L, E], key [..., S, E] and value [..., S, Ev] of one dtype, got %s, %s '
        .. 'and %s (%s, %s, %s)', fn, shape_str(q), shape_str(k), shape_str(v), q.dtype, k.dtype, v.dtype), 2)
    end
    local p = opts.dropout_p or 0
    need_prob(fn, 'dropout_p', p)
    need_bool(fn, 'is_causal', opts.is_causal)
    local mask = opts.attn_mask
    if mask ~= nil and not is_tensor(mask) then error(fmt('%s: attn_mask must be a tensor, got %s', fn, type(mask)), 2) end
    for _, e in ipairs({ { 'key', k }, { 'value', v }, { 'attn_mask', mask } }) do
      if e[2] ~= nil and tostring(e[2].device) ~= tostring(q.device) then
        error(fmt('%s: %s is on %s, query on %s', fn, e[1], tostring(e[2].device), tostring(q.device)), 2)
      end
    end
    if opts.is_causal and mask ~= nil then
      error(fmt('%s: attn_mask and is_causal cannot both be given (is_causal makes the mask)', fn), 2)
    end
    local scale = opts.scale
    if scale ~= nil and (type(scale) ~= 'number' or scale ~= scale) then
      error(fmt('%s: scale must be a number, got %s', fn, tostring(scale)), 2)
    end
    local L, S = q:size(-2), k:size(-2)
    scale = scale or 1 / math.sqrt(q:size(-1))
    local scores = q:matmul(k:transpose(-2, -1)) * scale
    if opts.is_causal then
      mask = T.ones({ L, S }, { dtype = 'bool' }):tril():to(q.device) -- (tril has no GPU kernel)
    end
    if mask ~= nil then
      if mask.dtype == 'bool' then
        local pok, r = pcall(function() return scores:masked_fill(mask:logical_not(), -math.huge) end)
        if not pok or table.concat(r:size(), ',') ~= table.concat(scores:size(), ',') then
          error(fmt('%s: attn_mask of shape %s does not broadcast to the scores [..., L, S] %s', fn, shape_str(mask),
            shape_str(scores)), 2)
        end
        scores = r
      elseif float_dtype(mask) then
        local pok, r = pcall(function() return scores + mask:to(scores.dtype) end)
        if not pok or table.concat(r:size(), ',') ~= table.concat(scores:size(), ',') then
          error(fmt('%s: attn_mask of shape %s does not broadcast to the scores [..., L, S] %s', fn, shape_str(mask),
            shape_str(scores)), 2)
        end
        scores = r
      else
        error(fmt('%s: attn_mask must be a bool or floating-point tensor, got %s', fn, mask.dtype), 2)
      end
    end
    local w = scores:softmax(-1)
    if p > 0 then w = F.dropout(w, p, true) end
    return w:matmul(v)
  end

  -- an attention mask as an additive float mask of dtype dt (bool: -inf where true)
  local function additive(mask, dt)
    if mask.dtype == 'bool' then
      return T.zeros(mask:size(), { dtype = dt, device = mask.device }):masked_fill_(mask, -math.huge)
    end
    return mask.dtype == dt and mask or mask:to(dt)
  end
  local function pad_last(mask) -- one more key position, not masked (PyTorch's pad(mask, (0, 1)))
    local s = mask:size()
    s[#s] = 1
    return T.cat({ mask, T.zeros(s, { dtype = mask.dtype, device = mask.device }) }, -1)
  end

  local MHA_KEYS = keys('training', 'key_padding_mask', 'need_weights', 'attn_mask', 'use_separate_proj_weight',
    'q_proj_weight', 'k_proj_weight', 'v_proj_weight', 'static_k', 'static_v', 'average_attn_weights')
  FS._mha_keys = MHA_KEYS

  local function same_size(t, s)
    local sz = t:size()
    if #sz ~= #s then return false end
    for i = 1, #s do if sz[i] ~= s[i] then return false end end
    return true
  end

  --- F.multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads, in_proj_weight,
  --- in_proj_bias, bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias [, opts])
  --- -> attn_output, attn_weights (nil unless need_weights): PyTorch 1.13's function (nn.MultiheadAttention's
  --- forward), query [L, N, E] (or unbatched [L, E]), key/value [S, N, Ek/Ev]. opts: training=true,
  --- key_padding_mask= [N, S] (bool: true = ignore that key; float: added), need_weights=true,
  --- attn_mask= [L, S] or [N * num_heads, L, S] (bool: true = not allowed; uint8 read as bool; float:
  --- added), use_separate_proj_weight=false with q/k/v_proj_weight=, static_k=, static_v=
  --- [N * num_heads, S, E / num_heads], average_attn_weights=true. name: the caller's label for errors.
  function FS.multi_head_attention_forward(query, key, value, E0, nh, in_w, in_b, bias_k, bias_v, add_zero_attn, p,
                                           out_w, out_b, opts, name)
    local fn = name or 'multi_head_attention_forward'
    check_opts(opts, MHA_KEYS, fn)
    opts = opts or {}
    need_tensor(fn, 'query', query)
    need_tensor(fn, 'key', key)
    need_tensor(fn, 'value', value)
    local kpm, amask = opts.key_padding_mask, opts.attn_mask
    for _, e in ipairs({ { 'key_padding_mask', kpm }, { 'attn_mask', amask }, { 'in_proj_weight', in_w },
      { 'in_proj_bias', in_b }, { 'bias_k', bias_k }, { 'bias_v', bias_v }, { 'out_proj_bias', out_b },
      { 'static_k', opts.static_k }, { 'static_v', opts.static_v } }) do
      if e[2] ~= nil and not is_tensor(e[2]) then error(fmt('%s: %s must be a tensor or nil, got %s', fn, e[1], type(e[2])), 2) end
    end
    if not is_tensor(out_w) then error(fmt('%s: out_proj_weight must be a tensor, got %s', fn, type(out_w)), 2) end
    need_prob(fn, 'dropout', p)
    for _, k in ipairs({ 'training', 'need_weights', 'use_separate_proj_weight', 'average_attn_weights' }) do
      need_bool(fn, k, opts[k])
    end
    need_bool(fn, 'add_zero_attn', add_zero_attn)
    local need_weights = opts.need_weights ~= false
    local average = opts.average_attn_weights ~= false
    local training = opts.training ~= false
    -- shapes (PyTorch's _mha_shape_check)
    local qd = query:dim()
    if qd ~= 2 and qd ~= 3 then
      error(fmt('%s: query should be unbatched 2-d [L, E] or batched 3-d [L, N, E], got shape %s', fn, shape_str(query)), 2)
    end
    local batched = qd == 3
    local qdev = tostring(query.device)
    for _, e in ipairs({ { 'key', key }, { 'value', value }, { 'key_padding_mask', kpm }, { 'attn_mask', amask } }) do
      if e[2] ~= nil and tostring(e[2].device) ~= qdev then
        error(fmt('%s: %s is on %s, query on %s', fn, e[1], tostring(e[2].device), qdev), 2)
      end
    end
    if key:dim() ~= qd or value:dim() ~= qd then
      error(fmt('%s: for %s (%d-d) query %s, expected key and value to be %d-d, got %s and %s', fn,
        batched and 'batched' or 'unbatched', qd, shape_str(query), qd, shape_str(key), shape_str(value)), 2)
    end
    if kpm ~= nil and kpm:dim() ~= qd - 1 then
      error(fmt('%s: for %s query, expected key_padding_mask to be nil or %d-d, got shape %s', fn,
        batched and 'batched' or 'unbatched', qd - 1, shape_str(kpm)), 2)
    end
    if amask ~= nil and amask:dim() ~= 2 and amask:dim() ~= 3 then
      error(fmt('%s: expected attn_mask to be nil, 2-d or 3-d, got shape %s', fn, shape_str(amask)), 2)
    end
    if not batched then
      if amask ~= nil and amask:dim() == 3 and amask:size(1) ~= nh then
        error(fmt('%s: for unbatched query, a 3-d attn_mask must be [num_heads=%d, L, S], got shape %s', fn, nh,
          shape_str(amask)), 2)
      end
      query, key, value = query:unsqueeze(2), key:unsqueeze(2), value:unsqueeze(2)
      if kpm ~= nil then kpm = kpm:unsqueeze(1) end
    end
    local L, N, E = query:size(1), query:size(2), query:size(3)
    local S = key:size(1)
    if kpm ~= nil and kpm.dtype ~= 'bool' and not float_dtype(kpm) then
      error(fmt('%s: only bool and floating types of key_padding_mask are supported, got %s', fn, kpm.dtype), 2)
    end
    if E ~= E0 then error(fmt('%s: expected the embedding dim of query to be %d, got %d (query %s)', fn, E0, E, shape_str(query)), 2) end
    if E % nh ~= 0 then error(fmt('%s: embed_dim %d is not divisible by num_heads %d', fn, E, nh), 2) end
    local hd = E / nh
    local sep = opts.use_separate_proj_weight
    if key:size(1) ~= value:size(1) or key:size(2) ~= value:size(2) or (not sep and key:size(3) ~= value:size(3)) then
      error(fmt('%s: key %s and value %s must agree in their sequence and batch dims%s', fn, shape_str(key),
        shape_str(value), sep and '' or ' and their embedding dim'), 2)
    end
    if key:size(2) ~= N then
      error(fmt('%s: query %s and key %s must have the same batch size', fn, shape_str(query), shape_str(key)), 2)
    end
    -- in-projection (PyTorch's _in_projection_packed / _in_projection)
    local q, k, v
    if not sep then
      if not is_tensor(in_w) or not same_size(in_w, { 3 * E, E }) then
        error(fmt('%s: in_proj_weight must be [3 * embed_dim, embed_dim] = [%d, %d], got %s', fn, 3 * E, E,
          is_tensor(in_w) and shape_str(in_w) or type(in_w)), 2)
      end
      if key:size(3) ~= E then
        error(fmt('%s: key %s must have the embedding dim %d (kdim = vdim = embed_dim without separate projection weights)',
          fn, shape_str(key), E), 2)
      end
      if in_b ~= nil and not same_size(in_b, { 3 * E }) then
        error(fmt('%s: in_proj_bias must be [%d], got %s', fn, 3 * E, shape_str(in_b)), 2)
      end
      if key == value and query == key then
        local qkv = F.linear(query, in_w, in_b):chunk(3, -1)
        q, k, v = qkv[1], qkv[2], qkv[3]
      elseif key == value then
        q = F.linear(query, in_w:narrow(1, 1, E), in_b and in_b:narrow(1, 1, E))
        local kv = F.linear(key, in_w:narrow(1, E + 1, 2 * E), in_b and in_b:narrow(1, E + 1, 2 * E)):chunk(2, -1)
        k, v = kv[1], kv[2]
      else
        local w3 = in_w:chunk(3)
        local b3 = in_b and in_b:chunk(3) or {}
        q, k, v = F.linear(query, w3[1], b3[1]), F.linear(key, w3[2], b3[2]), F.linear(value, w3[3], b3[3])
      end
    else
      local wq, wk, wv = opts.q_proj_weight, opts.k_proj_weight, opts.v_proj_weight
      local Ek, Ev = key:size(3), value:size(3)
      for _, e in ipairs({ { 'q_proj_weight', wq, E }, { 'k_proj_weight', wk, Ek }, { 'v_proj_weight', wv, Ev } }) do
        if not is_tensor(e[2]) or not same_size(e[2], { E, e[3] }) then
          error(fmt('%s: %s must be [%d, %d], got %s', fn, e[1], E, e[3], is_tensor(e[2]) and shape_str(e[2]) or type(e[2])), 2)
        end
      end
      if in_b ~= nil and not same_size(in_b, { 3 * E }) then
        error(fmt('%s: in_proj_bias must be [%d], got %s', fn, 3 * E, shape_str(in_b)), 2)
      end
      local b3 = in_b and in_b:chunk(3) or {}
      q, k, v = F.linear(query, wq, b3[1]), F.linear(key, wk, b3[2]), F.linear(value, wv, b3[3])
    end
    local dt = q.dtype
    -- the attention mask: [1, L, S] or [N * nh, L, S]
    if amask ~= nil then
      if amask.dtype == 'uint8' then
        amask = amask:to('bool')
      elseif amask.dtype ~= 'bool' and not float_dtype(amask) then
        error(fmt('%s: only float, byte and bool attn_mask are supported, got %s', fn, amask.dtype), 2)
      end
      if amask:dim() == 2 then
        if not same_size(amask, { L, S }) then
          error(fmt('%s: the 2-d attn_mask has shape %s, but should be [%d, %d] (L, S)', fn, shape_str(amask), L, S), 2)
        end
        amask = amask:unsqueeze(1)
      else
        if not same_size(amask, { N * nh, L, S }) then
          error(fmt('%s: the 3-d attn_mask has shape %s, but should be [%d, %d, %d] (N * num_heads, L, S)', fn,
            shape_str(amask), N * nh, L, S), 2)
        end
      end
    end
    if kpm ~= nil and not same_size(kpm, { N, S }) then
      error(fmt('%s: expected key_padding_mask of shape [%d, %d] (N, S), got %s', fn, N, S, shape_str(kpm)), 2)
    end
    -- bias_k / bias_v: one more key position
    if bias_k ~= nil and bias_v ~= nil then
      if opts.static_k or opts.static_v then error(fmt('%s: bias_k/bias_v cannot be added to static_k/static_v', fn), 2) end
      k = T.cat({ k, bias_k:reshape(1, 1, E):expand(1, N, E) }, 1)
      v = T.cat({ v, bias_v:reshape(1, 1, E):expand(1, N, E) }, 1)
      if amask ~= nil then amask = pad_last(amask) end
      if kpm ~= nil then kpm = pad_last(kpm) end
    elseif bias_k ~= nil or bias_v ~= nil then
      error(fmt('%s: bias_k and bias_v must be given together', fn), 2)
    end
    -- heads: [N * nh, len, hd]
    q = q:contiguous():view(L, N * nh, hd):transpose(1, 2)
    local function heads(t, static, what)
      if static == nil then return t:contiguous():view(t:size(1), N * nh, hd):transpose(1, 2) end
      if static:dim() ~= 3 or static:size(1) ~= N * nh or static:size(3) ~= hd then
        error(fmt('%s: expected %s of shape [%d, S, %d] (N * num_heads, S, head_dim), got %s', fn, what, N * nh, hd,
          shape_str(static)), 3)
      end
      return static
    end
    k = heads(k, opts.static_k, 'static_k')
    v = heads(v, opts.static_v, 'static_v')
    if add_zero_attn then
      local z = T.zeros({ N * nh, 1, hd }, { dtype = k.dtype, device = k.device })
      k, v = T.cat({ k, z }, 2), T.cat({ v, z }, 2)
      if amask ~= nil then amask = pad_last(amask) end
      if kpm ~= nil then kpm = pad_last(kpm) end
    end
    S = k:size(2)
    -- merge the masks into one additive mask, as PyTorch 1.13: a boolean attn_mask is or-ed with
    -- the key padding mask (a float one read as nonzero = padding), a float one gets -inf where a
    -- boolean key padding mask is true; two float masks are added (1.13 fails there; torch 2.x adds)
    local mask = amask
    if kpm ~= nil then
      if kpm:size(2) ~= S then
        error(fmt('%s: expected key_padding_mask of shape [%d, %d], got %s', fn, N, S, shape_str(kpm)), 2)
      end
      local km = kpm:view(N, 1, 1, S):expand(N, nh, 1, S):reshape(N * nh, 1, S)
      if mask == nil then mask = km
      elseif mask.dtype == 'bool' then mask = mask:logical_or(km)
      elseif km.dtype == 'bool' then mask = mask:to(dt):expand(N * nh, L, S):masked_fill(km, -math.huge)
      else mask = mask:to(dt) + km:to(dt) end
    end
    if mask ~= nil then mask = additive(mask, dt) end
    if not training then p = 0 end
    local qs = q / math.sqrt(hd)
    local kt = k:transpose(2, 3)
    local w = mask and T.baddbmm(mask, qs, kt) or qs:bmm(kt)
    w = w:softmax(-1)
    if p > 0 then w = F.dropout(w, p, true) end
    local out = w:bmm(v):transpose(1, 2):contiguous():view(L * N, E)
    out = F.linear(out, out_w, out_b):view(L, N, out_w:size(1))
    if not batched then out = out:squeeze(2) end
    if not need_weights then return out, nil end
    w = w:view(N, nh, L, S)
    if average then w = w:sum(2) / nh end
    if not batched then w = w:squeeze(1) end
    return out, w
  end

  for k, f in pairs(FS) do
    if type(f) == 'function' then F[k] = f end
  end
  F._seq = FS
  return FS
end
