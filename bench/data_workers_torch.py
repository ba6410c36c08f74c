# bench/data_workers_torch.py: torch 1.13's DataLoader num_workers 0 vs N on the dataset of
# bench/data_workers_dpl.lua (the same ops per item, calibrated to about 200 us), and the
# transport cost of a batch per MB. usage: python3 bench/data_workers_torch.py [items] [batch]
import sys, time
import torch
from torch.utils.data import Dataset, DataLoader

items = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
bs = int(sys.argv[2]) if len(sys.argv) > 2 else 32
torch.set_num_threads(1)  # as the workers (and dplhost's bench)


class Work(Dataset):
    def __init__(self, n, reps):
        self.n, self.reps = n, reps

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = torch.rand(40, 40)
        for _ in range(self.reps):
            x = (x @ x).tanh().mul(0.5).add(0.1)
        return x.view(-1)[:256].clone(), i % 10


def epoch_time(loader):
    t0 = time.perf_counter()
    n = 0
    for _ in loader:
        n += 1
    return time.perf_counter() - t0


def best(f, k=3):
    return min(f() for _ in range(k))


reps = 1
ds1 = Work(200, 1)
while True:
    ds1.reps = reps
    def cal():
        t0 = time.perf_counter()
        for i in range(200):
            ds1[i]
        return (time.perf_counter() - t0) / 200
    per = best(cal)
    if per >= 180e-6 or reps >= 64:
        break
    reps += 1
print('item cost %.0f us (reps %d), %d items, batch %d' % (per * 1e6, reps, items, bs))
ds = Work(items, reps)
t0 = best(lambda: epoch_time(DataLoader(ds, batch_size=bs)))
print('workers 0: %.3f s / epoch' % t0)
for nw in (1, 2):
    l = DataLoader(ds, batch_size=bs, num_workers=nw, persistent_workers=True)
    epoch_time(l)
    t = best(lambda: epoch_time(l))
    del l
    tn = best(lambda: epoch_time(DataLoader(ds, batch_size=bs, num_workers=nw)))
    print('workers %d: %.3f s / epoch (persistent), %.3f s with the workers started each epoch; speedup %.2fx'
          % (nw, t, tn, t0 / t))


class Big(Dataset):
    def __init__(self, mb):
        self.t = torch.rand(mb * 262144)

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return self.t


for mb in (1, 16):
    ds2 = Big(mb)
    a = best(lambda: epoch_time(DataLoader(ds2, batch_size=None)))
    l = DataLoader(ds2, batch_size=None, num_workers=1, persistent_workers=True)
    epoch_time(l)
    b = best(lambda: epoch_time(l))
    del l
    print('transport %d MB batches: %.3f ms / MB (%.2f GB/s)' % (mb, (b - a) / 64 / mb * 1e3, 64 * mb / 1024 / (b - a)))
