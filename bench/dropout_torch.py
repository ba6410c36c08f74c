# dropout_torch.py: PyTorch's side of bench/dropout.sh (F.dropout p=0.1 forward + backward on N
# float32, input requiring grad, a gradient of ones; median of 7 loops of 20 after a warm-up).
import os, time, torch
torch.set_num_threads(int(os.environ.get('THREADS', '1')))
N, p = int(os.environ.get('N', '1000000')), 0.1
x = torch.randn(N, requires_grad=True)
g = torch.ones(N)
def step():
    x.grad = None
    torch.nn.functional.dropout(x, p, True).backward(g)
t0 = time.perf_counter()
while time.perf_counter() - t0 < 0.3: step()
r = []
for _ in range(7):
    t1 = time.perf_counter()
    for _ in range(20): step()
    r.append((time.perf_counter() - t1) / 20 * 1e3)
r.sort()
print('dropout_torch_ms %.4f' % r[3])
