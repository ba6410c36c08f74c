"""tensor_torch.py: PyTorch's side of bench/tensor.sh (Debian's python3-torch,
run with /usr/bin/python3). Same shapes and output format as tensor_dpl.lua."""
import os, time, torch
torch.set_num_threads(int(os.environ.get('DPL_NUM_THREADS', '1')))

def time_us(f, n, reps=5):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.05:
        f()
    r = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        r.append((time.perf_counter() - t0) / n * 1e6)
    r.sort()
    return r[(len(r) - 1) // 2]

print('threads', torch.get_num_threads())
for m, k, n in [(1024, 1024, 1024), (64, 784, 256), (64, 256, 128), (64, 128, 10), (784, 64, 256)]:
    a, b = torch.rand(m, k), torch.rand(k, n)
    if m == 784:
        a = torch.rand(k, m).t()
    reps = max(3, int(2e8 / (2 * m * n * k)))
    a.matmul(b)
    us = time_us(lambda: a.matmul(b), reps)
    print('sgemm_%dx%dx%d_us %.3f' % (m, k, n, us))
    print('sgemm_%dx%dx%d_gflops %.2f' % (m, k, n, 2 * m * n * k / us / 1e3))
x, y = torch.rand(1000000), torch.rand(1000000)
print('add_1M_us %.2f' % time_us(lambda: x + y, 200))
print('mul_1M_us %.2f' % time_us(lambda: x * y, 200))
print('relu_1M_us %.2f' % time_us(lambda: torch.relu(x), 200))
print('add_inplace_1M_us %.2f' % time_us(lambda: x.add_(y), 200))
a, b = torch.ones(4, 4), torch.ones(4, 4)
print('add_4x4_us %.4f' % time_us(lambda: a + b, 200000))
l, w = torch.randn(64, 10), torch.randn(10, 10)
print('matmul_64x10_us %.4f' % time_us(lambda: l.matmul(w), 100000))
import torch.nn.functional as F
cx, cw, cb = torch.randn(64, 32, 14, 14, requires_grad=True), torch.randn(64, 32, 3, 3, requires_grad=True), torch.randn(64, requires_grad=True)
gy = torch.randn(64, 64, 14, 14)
with torch.no_grad():
    print('conv2d_fwd_us %.1f' % time_us(lambda: F.conv2d(cx, cw, cb, padding=1), 5, 3))
print('conv2d_bwd_us %.1f' % time_us(lambda: torch.autograd.grad(F.conv2d(cx, cw, cb, padding=1), (cx, cw, cb), gy), 3, 3))
print('max_pool2d_us %.1f' % time_us(lambda: F.max_pool2d(gy, 2), 20, 3))
c1x, c1w, c1b = torch.randn(64, 1, 28, 28, requires_grad=True), torch.randn(32, 1, 3, 3, requires_grad=True), torch.randn(32, requires_grad=True)
c1gy = torch.randn(64, 32, 28, 28)
with torch.no_grad():
    print('conv2d_c1_fwd_us %.1f' % time_us(lambda: F.conv2d(c1x, c1w, c1b, padding=1), 10, 3))
print('conv2d_c1_bwd_us %.1f' % time_us(lambda: torch.autograd.grad(F.conv2d(c1x, c1w, c1b, padding=1), (c1x, c1w, c1b), c1gy), 5, 3))
s1 = torch.randn(1000000)
m2 = torch.randn(1000, 1000)
idx = torch.randint(0, 1000, (1000, 1000))
print('sort_1M_us %.1f' % time_us(lambda: s1.sort(), 3, 3))
print('topk10_1M_us %.1f' % time_us(lambda: s1.topk(10), 10, 3))
print('cumsum_1000x1000_us %.1f' % time_us(lambda: m2.cumsum(1), 20, 3))
print('scatter_add_1000x1000_us %.1f' % time_us(lambda: m2.clone().scatter_add_(1, idx, m2), 10, 3))
print('softplus_1M_us %.1f' % time_us(lambda: torch.nn.functional.softplus(s1), 50, 3))
isx = torch.randint(0, 1000, (1000,))
print('index_select_1000x1000_us %.1f' % time_us(lambda: m2.index_select(0, isx), 20, 3))
ew, eids = torch.randn(30000, 256), torch.randint(0, 30000, (64, 128))
print('embedding_64x128_30000x256_us %.1f' % time_us(lambda: F.embedding(eids, ew), 20, 3))
for name, f in [('exp', torch.exp), ('tanh', torch.tanh), ('gelu', F.gelu), ('elu', F.elu), ('mish', F.mish)]:
    print('%s_1M_us %.1f' % (name, time_us(lambda: f(s1), 50, 3)))
print('log1p_1M_us %.1f' % time_us(lambda: torch.log1p(x), 50, 3))
# cross_entropy forward + backward over 1000 classes (256 rows of float32 logits)
ce_x, ce_t = torch.randn(256, 1000, requires_grad=True), torch.randint(0, 1000, (256,))
with torch.no_grad():
    print('cross_entropy_256x1000_fwd_us %.1f' % time_us(lambda: F.cross_entropy(ce_x, ce_t), 50, 3))
ce_l = F.cross_entropy(ce_x, ce_t)
print('cross_entropy_256x1000_bwd_us %.1f' % time_us(lambda: torch.autograd.grad(ce_l, ce_x, retain_graph=True), 50, 3))
