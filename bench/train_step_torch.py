# train_step_torch.py: PyTorch's side of bench/train_step.sh (same models, shapes and step as
# bench/train_step_dpl.lua). Prints "name value" lines, ms per step. 1 thread unless THREADS.
import os, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(int(os.environ.get('THREADS', '1')))


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(128, 4, dim_feedforward=256, dropout=0.1, batch_first=True), 2)
        self.fc = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc(self.encoder(x).mean(1))


def transformer():
    return Head(), torch.randn(32, 64, 128), torch.randint(0, 10, (32,))


def cnn():
    m = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 10))
    return m, torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))


def time_ms(step, n, reps):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.3:
        step()
    r = []
    for _ in range(reps):
        t1 = time.perf_counter()
        for _ in range(n):
            step()
        r.append((time.perf_counter() - t1) / n * 1e3)
    r.sort()
    return r[(len(r) - 1) // 2]


which = sys.argv[1:] or ['transformer', 'cnn']
reps = int(os.environ.get('REPS', '5'))
for name in which:
    torch.manual_seed(0)
    model, x, y = {'transformer': transformer, 'cnn': cnn}[name]()
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    print('%s_step_ms %.3f' % (name, time_ms(step, 20 if name == 'cnn' else 10, reps)))
