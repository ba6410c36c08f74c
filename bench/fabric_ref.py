"""fabric_ref.py: lightning_fabric 1.9.5's per-step cost over the same hand-written torch loop
(bench/fabric_overhead.sh's reference): nn.Linear(4, 3), batch 8, MSE, SGD, 1 thread, one
process; runs alternate, medians of 7 runs of N steps (argv[1], default 5000), us per step."""
import sys, time, torch
import torch.nn.functional as F
from lightning_fabric import Fabric
torch.set_num_threads(1)
N = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
torch.manual_seed(0)
x, y = torch.randn(8, 4), torch.randn(8, 3)

def plain():
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    t0 = time.perf_counter()
    for _ in range(N):
        loss = F.mse_loss(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return (time.perf_counter() - t0) / N * 1e6

fabric = Fabric(accelerator='cpu', devices=1)
fabric.launch()
def with_fabric():
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3)
    model, opt = fabric.setup(m, torch.optim.SGD(m.parameters(), lr=0.01))
    t0 = time.perf_counter()
    for _ in range(N):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        fabric.backward(loss)
        opt.step()
    return (time.perf_counter() - t0) / N * 1e6

def median(v): v = sorted(v); return v[(len(v) - 1) // 2]
plain(); with_fabric()
a, b, d = [], [], []
for _ in range(7):
    p, f = plain(), with_fabric()
    a.append(p); b.append(f); d.append(f - p)
print('hand_us %.2f fabric_us %.2f overhead_us %.2f' % (median(a), median(b), median(d)))
