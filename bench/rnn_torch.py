# rnn_torch.py: PyTorch's side of bench/rnn.sh (same cases and shapes as bench/rnn_dpl.lua).
# Prints "name value" lines, us per step or per token. 1 thread unless THREADS.
import os, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import rnn

torch.set_num_threads(int(os.environ.get('THREADS', '1')))

LENS = [50 - (i - 1) * 47 // 27 for i in range(1, 29)]
LENS += [LENS[2], LENS[8], LENS[16], LENS[24]]
PERM = [LENS[(i * 13) % 32] for i in range(1, 33)]


def time_us(step, n, reps):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.3:
        step()
    r = []
    for _ in range(reps):
        t1 = time.perf_counter()
        for _ in range(n):
            step()
        r.append((time.perf_counter() - t1) / n * 1e6)
    return sorted(r)[(len(r) - 1) // 2]


def packed_lstm():
    m = nn.LSTM(64, 128, 2, bidirectional=True)
    x = torch.randn(50, 32, 64)
    lens = torch.tensor(PERM)

    def step():
        m.zero_grad()
        ps = rnn.pack_padded_sequence(x, lens, enforce_sorted=False)
        out, st = m(ps)
        (out.data.sum() + st[0].sum()).backward()
    return step, 10


def packed(kind):
    def make():
        m = getattr(nn, kind)(64, 128, 2, bidirectional=True)
        x = torch.randn(50, 32, 64)
        lens = torch.tensor(PERM)

        def step():
            m.zero_grad()
            ps = rnn.pack_padded_sequence(x, lens, enforce_sorted=False)
            out, hn = m(ps)
            (out.data.sum() + hn.sum()).backward()
        return step, 10
    return make


def padded_lstm():
    m = nn.LSTM(64, 128, 2, bidirectional=True)
    x = torch.randn(50, 32, 64)

    def step():
        m.zero_grad()
        out, st = m(x)
        (out.sum() + st[0].sum()).backward()
    return step, 10


def lm(kind):
    def make():
        V, B, T = 2000, 32, 35
        emb, r, fc = nn.Embedding(V, 128), getattr(nn, kind)(128, 256, 2, batch_first=True), nn.Linear(256, V)
        opt = torch.optim.SGD(list(emb.parameters()) + list(r.parameters()) + list(fc.parameters()), lr=0.1)
        x, y = torch.randint(0, V, (B, T)), torch.randint(0, V, (B * T,))

        def step():
            opt.zero_grad()
            h, _ = r(emb(x))
            F.cross_entropy(fc(h).reshape(B * T, V), y).backward()
            opt.step()
        return step, 5
    return make


def gen_lstm():
    emb, r, fc = nn.Embedding(1000, 128), nn.LSTM(128, 256, 2), nn.Linear(256, 1000)
    s = {'tok': torch.tensor([[0]]), 'st': None}

    def step():
        with torch.no_grad():
            out, s['st'] = r(emb(s['tok']), s['st'])
            s['tok'] = fc(out).argmax(-1)
    return step, 200


def gen_transformer():
    E, V, N = 128, 1000, 32
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(E, 4, dim_feedforward=256, dropout=0.0), 2)
    dec.eval()
    emb, fc = nn.Embedding(V, E), nn.Linear(E, V)
    mem = torch.randn(16, 1, E)
    masks = [None] + [nn.Transformer.generate_square_subsequent_mask(L) for L in range(1, N + 1)]

    def gen():
        with torch.no_grad():
            toks = [0]
            for L in range(1, N + 1):
                ids = torch.tensor(toks).view(L, 1)
                out = dec(emb(ids), mem, tgt_mask=masks[L])
                toks.append(int(fc(out[L - 1]).argmax(-1)))
    return gen, 2, N


cases = {'packed_lstm': packed_lstm, 'packed_gru': packed('GRU'), 'packed_rnn': packed('RNN'), 'padded_lstm': padded_lstm, 'lm_lstm': lm('LSTM'), 'lm_gru': lm('GRU'),
         'gen_lstm': gen_lstm, 'gen_transformer': gen_transformer}
which = sys.argv[1:] or ['packed_lstm', 'padded_lstm', 'lm_lstm', 'lm_gru', 'gen_lstm', 'gen_transformer']
reps = int(os.environ.get('REPS', '5'))
for name in which:
    torch.manual_seed(0)
    r = cases[name]()
    step, n, per = r[0], r[1], (r[2] if len(r) > 2 else 1)
    print('%s_us %.1f' % (name, time_us(step, n, reps) / per))
