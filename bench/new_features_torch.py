#!/usr/bin/python3
"""new_features_torch.py: PyTorch's side of bench/new_features.sh: torch.special,
torch.distributions, torchmetrics (when importable; otherwise the same statistics by hand in
torch), Conv3d / MaxPool3d, EmbeddingBag, scatter_reduce and histogram on the shapes of
bench/new_features_dpl.lua. Prints "name value" lines (us per call: median of REPS timed loops
after a warm-up). Threads: torch.set_num_threads(THREADS)."""
import os, sys, time
import torch
import torch.distributions as D

torch.set_num_threads(int(os.environ.get('THREADS', '1')))
try:
    import torchmetrics
    TM = torchmetrics.classification
except ImportError:
    TM = None


def time_us(step, reps):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.2:
        step()
    r = []
    for _ in range(reps):
        n, t1 = 0, time.perf_counter()
        while True:
            step()
            n += 1
            if time.perf_counter() - t1 > 0.05:
                break
        r.append((time.perf_counter() - t1) / n * 1e6)
    r.sort()
    return r[(len(r) + 1) // 2 - 1]


torch.manual_seed(0)
N1M, N100K = 1000000, 100000
xpos = torch.rand(N1M) * 10 + 0.1
xn = torch.randn(N1M) * 2
T = torch.tensor
normal, gamma = D.Normal(T(0.5), T(2.0)), D.Gamma(T(2.0), T(1.5))
beta, poisson = D.Beta(T(2.0), T(3.0)), D.Poisson(T(4.0))
cat = D.Categorical(probs=torch.rand(10) + 0.1)
vn, vg = torch.randn(N100K), torch.rand(N100K) * 5 + 0.01
preds, target = torch.randn(256, 10), torch.randint(0, 10, (256,))
scores, labels = torch.rand(N100K), torch.randint(0, 2, (N100K,))
if TM is not None:
    acc = TM.MulticlassAccuracy(num_classes=10)
    f1 = TM.MulticlassF1Score(num_classes=10)
    auroc = TM.BinaryAUROC()

    def acc_f1_step():
        acc.update(preds, target)
        f1.update(preds, target)
        return acc.compute(), f1.compute()

    def auroc_step():
        auroc.reset()
        auroc.update(scores, labels)
        return auroc.compute()
else:  # the same statistics in plain torch: per-class tp/fp/fn states, macro averages; Mann-Whitney AUROC
    st = {'tp': torch.zeros(10), 'fp': torch.zeros(10), 'fn': torch.zeros(10)}

    def acc_f1_step():
        p = preds.argmax(1)
        tp = torch.bincount(target[p == target], minlength=10).float()
        st['tp'] += tp
        st['fp'] += torch.bincount(p, minlength=10).float() - tp
        st['fn'] += torch.bincount(target, minlength=10).float() - tp
        a = (st['tp'] / (st['tp'] + st['fn'])).nanmean()
        f = (2 * st['tp'] / (2 * st['tp'] + st['fp'] + st['fn'])).nanmean()
        return a, f

    def auroc_step():
        s, o = scores.double().sort()
        r = torch.empty_like(s)
        r[o] = torch.arange(1, len(s) + 1, dtype=torch.float64)
        pos = labels.bool()
        P = pos.sum().item()
        return (r[pos].sum() - P * (P + 1) / 2) / (P * (len(s) - P))
conv = torch.nn.Conv3d(8, 16, 3, padding=1)
x3 = torch.randn(4, 8, 16, 16, 16)
x3g = x3.clone().requires_grad_()
pool = torch.nn.MaxPool3d(2)
eb = torch.nn.EmbeddingBag.from_pretrained(torch.randn(10000, 64), freeze=True, mode='mean')
ids = torch.randint(0, 10000, (4096 * 8,))
offs = torch.arange(0, 4096) * 8
src, sidx = torch.randn(N1M), torch.randint(0, 1000, (N1M,))
starget = torch.zeros(1000)
hx = torch.randn(N1M)


def conv3d_step():
    conv.zero_grad()
    x3g.grad = None
    conv(x3g).sum().backward()


def nograd(f):
    def g():
        with torch.no_grad():
            return f()
    return g


cases = {
    'lgamma_1m': lambda: torch.special.gammaln(xpos),
    'digamma_1m': lambda: torch.special.digamma(xpos),
    'erfc_1m': lambda: torch.special.erfc(xn),
    'i0_1m': lambda: torch.special.i0(xpos),
    'normal_sample_100k': lambda: normal.sample((N100K,)),
    'gamma_sample_100k': lambda: gamma.sample((N100K,)),
    'beta_sample_100k': lambda: beta.sample((N100K,)),
    'poisson_sample_100k': lambda: poisson.sample((N100K,)),
    'categorical_sample_100k': lambda: cat.sample((N100K,)),
    'normal_log_prob_100k': lambda: normal.log_prob(vn),
    'gamma_log_prob_100k': lambda: gamma.log_prob(vg),
    'acc_f1_step': acc_f1_step,
    'auroc_100k': auroc_step,
    'conv3d_fwd_bwd': conv3d_step,
    'maxpool3d': nograd(lambda: pool(x3)),
    'embedding_bag_mean': nograd(lambda: eb(ids, offs)),
    'scatter_reduce_amax_1m': lambda: starget.scatter_reduce(0, sidx, src, 'amax'),
    'histogram_1m': lambda: torch.histogram(hx, 100),
}
order = ['lgamma_1m', 'digamma_1m', 'erfc_1m', 'i0_1m', 'normal_sample_100k', 'gamma_sample_100k',
         'beta_sample_100k', 'poisson_sample_100k', 'categorical_sample_100k', 'normal_log_prob_100k',
         'gamma_log_prob_100k', 'acc_f1_step', 'auroc_100k', 'conv3d_fwd_bwd', 'maxpool3d', 'embedding_bag_mean',
         'scatter_reduce_amax_1m', 'histogram_1m']
want = set(sys.argv[1:])
for k in order:
    if not want or k in want:
        print('%s_us %.3f' % (k, time_us(cases[k], int(os.environ.get('REPS', '5')))), flush=True)
print('torchmetrics %s' % ('yes' if TM is not None else 'no'))
