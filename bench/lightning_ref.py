#!/usr/bin/python3
"""PyTorch Lightning 1.9 reference figures for the Trainer benches, run with the Python of
the venv `scripts/install-deps.sh --bench` makes (build/plref: Debian's python3-torch 1.13
plus pytorch-lightning 1.9.5 from PyPI).

  overhead [N]  : Lightning's per-step overhead over a hand-written torch loop doing the
                  same work: nn.Linear(4, 2), batch 8, cross-entropy, SGD(lr 0.01),
                  self.log(prog_bar=True), the progress bar (stderr) and a CSVLogger on.
                  Median of 3 runs of N steps (default 2000) each. Mirrors the second part of
                  bench/trainer_overhead_dpl.lua.
  first_step    : time from this process's start to the end of the first optimizer step of
                  the Fashion-MNIST MLP run of examples/fashion_mnist.lua (IDX .gz read, 55k/5k
                  split, MLP 784-256-128-10, SGD momentum, ModelCheckpoint, EarlyStopping,
                  CSVLogger, progress bar, sanity check), then exits. Mirrors
                  bench/trainer_first_step_dpl.lua. Prints "first_step_ms X".
  mlp D         : one epoch of the Fashion-MNIST MLP, batch 64 per process, on D processes
                  (D = 2: strategy "ddp" over gloo); prints "samples_per_s X" (all processes).
                  For bench/trainer_ddp.sh.
"""
import time
T0 = time.perf_counter()
import os  # noqa: E402
import sys  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import warnings  # noqa: E402

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import pytorch_lightning as pl  # noqa: E402
from pytorch_lightning.loggers import CSVLogger  # noqa: E402

torch.set_num_threads(1)
# Lightning 1.9.5 registers ShardedTensor state-dict hooks through a weakref proxy that
# Debian's torch 1.13 refuses (TypeError in Module._register_load_state_dict_pre_hook);
# they only matter for sharded tensors, which these runs never have
pl.LightningModule._register_sharded_tensor_state_dict_hooks_if_available = lambda self: None
import logging  # noqa: E402
logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
logging.getLogger("lightning_fabric").setLevel(logging.ERROR)


def overhead(n):
    torch.manual_seed(0)
    x, y = torch.randn(n * 8, 4), torch.randint(0, 2, (n * 8,))
    ds = torch.utils.data.TensorDataset(x, y)

    def loader():
        return torch.utils.data.DataLoader(ds, batch_size=8)

    def hand():
        torch.manual_seed(0)
        net = nn.Linear(4, 2)
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        t0 = time.perf_counter()
        for xb, yb in loader():
            loss = F.cross_entropy(net(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()
        return (time.perf_counter() - t0) / n

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Linear(4, 2)

        def training_step(self, b, i):
            loss = F.cross_entropy(self.net(b[0]), b[1])
            self.log("loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    def trainer():
        d = tempfile.mkdtemp()
        t = pl.Trainer(max_epochs=1, default_root_dir=d, logger=CSVLogger(d), enable_checkpointing=False,
                       enable_model_summary=False, accelerator="cpu", devices=1)
        t0 = time.perf_counter()
        t.fit(Tiny(), loader())
        return (time.perf_counter() - t0) / n

    hs, ts = [], []
    for _ in range(3):
        hs.append(hand())
        ts.append(trainer())
    h, t = statistics.median(hs), statistics.median(ts)
    print(f"hand_us {h * 1e6:.2f}")
    print(f"lightning_us {t * 1e6:.2f}")
    print(f"overhead_us {(t - h) * 1e6:.2f}")


def first_step():
    sys.path.insert(0, os.environ.get("TORCH_BENCH", "/work/shared/bench/torch"))
    import fmnist_common as C
    xtr, ytr, _, _ = C.load_fmnist()
    n_val = 5000
    n_train = xtr.shape[0] - n_val
    train = torch.utils.data.TensorDataset(xtr[:n_train], ytr[:n_train])
    val = torch.utils.data.TensorDataset(xtr[n_train:], ytr[n_train:])
    train_loader = torch.utils.data.DataLoader(train, batch_size=64, shuffle=True)
    val_loader = torch.utils.data.DataLoader(val, batch_size=1000)

    class MLP(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.save_hyperparameters({"hidden": 256, "lr": 0.01, "batch_size": 64})
            self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                                     nn.Linear(128, 10))

        def forward(self, x):
            return self.net(x)

        def training_step(self, b, i):
            loss = F.cross_entropy(self(b[0]), b[1])
            self.log("train_loss", loss, prog_bar=True)
            return loss

        def validation_step(self, b, i):
            logits = self(b[0])
            self.log("val_loss", F.cross_entropy(logits, b[1]), prog_bar=True)
            self.log("val_acc", (logits.argmax(1) == b[1]).float().mean(), prog_bar=True)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

        def on_train_batch_end(self, *a):
            print(f"first_step_ms {(time.perf_counter() - T0) * 1e3:.1f}", flush=True)
            os._exit(0)

    d = tempfile.mkdtemp()
    cbs = [pl.callbacks.ModelCheckpoint(monitor="val_loss", mode="min", save_top_k=1, save_last=True),
           pl.callbacks.EarlyStopping(monitor="val_loss", patience=3)]
    t = pl.Trainer(max_epochs=10, default_root_dir=d, logger=CSVLogger(d), callbacks=cbs, accelerator="cpu",
                   devices=1)
    t.fit(MLP(), train_loader, val_loader)


def mlp_epoch(devices):
    """One epoch of the Fashion-MNIST MLP, batch 64 per process, SGD momentum, 1 thread per
    process; devices=2: strategy ddp (Lightning's subprocess launcher, gloo). Rank 0 prints
    "samples_per_s X" over all processes (epoch wall time, barriers around it)."""
    sys.path.insert(0, os.environ.get("TORCH_BENCH", "/work/shared/bench/torch"))
    import fmnist_common as C
    xtr, ytr, _, _ = C.load_fmnist()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xtr, ytr), batch_size=64, shuffle=True)
    times = {}

    class MLP(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                                     nn.Linear(128, 10))

        def training_step(self, b, i):
            return F.cross_entropy(self.net(b[0]), b[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

        def on_train_epoch_start(self):
            self.trainer.strategy.barrier()
            times["t0"] = time.perf_counter()

        def on_train_epoch_end(self):
            self.trainer.strategy.barrier()
            times["t1"] = time.perf_counter()

    d = tempfile.mkdtemp()
    t = pl.Trainer(max_epochs=1, default_root_dir=d, logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=devices,
                   strategy="ddp" if devices > 1 else None)
    t.fit(MLP(), loader)
    if t.is_global_zero:
        print(f"samples_per_s {xtr.shape[0] / (times['t1'] - times['t0']):.0f}", flush=True)


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "overhead"
    if what == "overhead":
        overhead(int(sys.argv[2]) if len(sys.argv) > 2 else 2000)
    elif what == "mlp":
        mlp_epoch(int(sys.argv[2]) if len(sys.argv) > 2 else 1)
    else:
        first_step()
