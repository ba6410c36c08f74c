#!/usr/bin/python3
"""linalg_torch.py: PyTorch's side of bench/linalg.sh: torch.linalg on the shapes of
bench/linalg_dpl.lua. Prints "name value" lines (us per call: median of REPS timed loops after a
warm-up). Threads: torch.set_num_threads(THREADS)."""
import os, sys, time
import torch

torch.set_num_threads(int(os.environ.get('THREADS', '1')))
LA = torch.linalg


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


def spd(n, b=None, dtype=torch.float32):
    x = torch.randn(b, n, n, dtype=dtype) if b else torch.randn(n, n, dtype=dtype)
    return x @ x.transpose(-2, -1) + torch.eye(n, dtype=dtype) * n


torch.manual_seed(0)
A256, B256 = spd(256), torch.randn(256, 16)
A64 = spd(64, dtype=torch.float64)
S512 = spd(512)
R128 = torch.randn(128, 128)
T200 = torch.randn(200, 50)
batch = spd(4, 1000)
cases = {
    'inv_256': lambda: LA.inv(A256),
    'solve_256x16': lambda: LA.solve(A256, B256),
    'det_256': lambda: LA.det(A256),
    'cholesky_512': lambda: LA.cholesky(S512),
    'eigh_128': lambda: LA.eigh(R128 + R128.t()),
    'svd_128': lambda: LA.svd(R128),
    'qr_200x50': lambda: LA.qr(T200),
    'inv_batch_1000x4x4': lambda: LA.inv(batch),
    'inv_64_f64': lambda: LA.inv(A64),
}
order = ['inv_256', 'solve_256x16', 'det_256', 'cholesky_512', 'eigh_128', 'svd_128', 'qr_200x50',
         'inv_batch_1000x4x4', 'inv_64_f64']
want = set(sys.argv[1:])
with torch.no_grad():
    for k in order:
        if not want or k in want:
            print('%s_us %.3f' % (k, time_us(cases[k], int(os.environ.get('REPS', '5')))))
