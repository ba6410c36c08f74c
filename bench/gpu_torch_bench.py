"""gpu_torch_bench.py: the PyTorch side of scripts/gpu-check.sh's benchmark, the
same measurements as `dplhost scripts/gpu_check.lua bench` and `train` (GEMM
TFLOP/s, copy and elementwise bandwidth, transfers, an MLP's training
samples/s), timed the same way (median of 5 rounds, synchronized), printed as
markdown table rows.  python3 bench/gpu_torch_bench.py [OUT.md]"""
import sys
import time

import torch

out = open(sys.argv[1], "a") if len(sys.argv) > 1 else None


def emit(s):
    print(s, flush=True)
    if out:
        out.write(s + "\n")
        out.flush()


def timed(f, iters, rounds=5):
    for _ in range(2):
        f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(iters):
            f()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) / iters)
    ts.sort()
    return ts[(rounds - 1) // 2]


def main():
    if not torch.cuda.is_available():
        emit("**PyTorch sees no GPU**")
        return 1
    dev = "cuda:0"
    torch.backends.cuda.matmul.allow_tf32 = False  # as dplhost's cublasSgemm
    emit("| benchmark (PyTorch %s, %s) | size | result |" % (torch.__version__, torch.cuda.get_device_name(0)))
    emit("|---|---|---|")
    for dt, n in ((torch.float32, 4096), (torch.float32, 8192), (torch.bfloat16, 8192), (torch.float16, 8192)):
        a = torch.randn(n, n, device=dev).to(dt)
        b = torch.randn(n, n, device=dev).to(dt)
        s = timed(lambda: a @ b, 3 if dt == torch.float32 else 10)
        emit("| %s GEMM (matmul) | %dx%dx%d | %.1f TFLOP/s |" % (str(dt).replace("torch.", ""), n, n, n, 2 * n**3 / s / 1e12))
        del a, b
    N = 2**28
    x = torch.rand(N, device=dev)
    y = torch.rand(N, device=dev)
    z = torch.empty(N, device=dev)
    nbytes = 4 * N
    s = timed(lambda: z.copy_(x), 10)
    copy_bw = 2 * nbytes / s / 1e9
    emit("| device-to-device copy (copy_) | 1 GiB | %.0f GB/s (read + write) |" % copy_bw)
    s = timed(lambda: x + y, 10)
    add_bw = 3 * nbytes / s / 1e9
    emit("| elementwise add (x + y) | 1 GiB each | %.0f GB/s, %.0f%% of copy |" % (add_bw, 100 * add_bw / copy_bw))
    s = timed(lambda: torch.relu(x), 10)
    emit("| unary relu | 1 GiB | %.0f GB/s |" % (2 * nbytes / s / 1e9))
    s = timed(lambda: x.add_(y, alpha=0.5), 10)
    emit("| axpy (add_ with alpha) | 1 GiB each | %.0f GB/s |" % (3 * nbytes / s / 1e9))
    s = timed(lambda: x.sum(), 10)
    emit("| sum (all) | 1 GiB | %.0f GB/s |" % (nbytes / s / 1e9))
    m = torch.randn(65536, 1024, device=dev)
    s = timed(lambda: torch.softmax(m, 1), 10)
    emit("| softmax over rows | 65536x1024 | %.0f GB/s (in + out) |" % (2 * 4 * 65536 * 1024 / s / 1e9))
    h = torch.rand(2**26)
    s = timed(lambda: h.to(dev), 5, 3)
    emit("| host -> device (.to) | 256 MiB | %.1f GB/s |" % (4 * 2**26 / s / 1e9))
    d = h.to(dev)
    s = timed(lambda: d.to("cpu"), 5, 3)
    emit("| device -> host (.to) | 256 MiB | %.1f GB/s |" % (4 * 2**26 / s / 1e9))
    del x, y, z, m

    # the MLP of gpu_check.lua's train mode: batch 64, SGD momentum 0.9, batches copied from the host
    torch.manual_seed(0)
    X = torch.rand(60000, 1, 28, 28)
    Y = torch.randint(0, 10, (60000,))
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    steps, batch = 1000, 64
    t0 = None
    for s in range(1, steps + 1):
        if s == 6:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        at = ((s - 1) * batch) % (60000 - batch)
        xb, yb = X[at:at + batch].to(dev), Y[at:at + batch].to(dev)
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    emit("| MLP 784-256-128-10, SGD, batch 64 (PyTorch) | cuda:0 | %.0f samples/s |" %
         ((steps - 5) * batch / (time.perf_counter() - t0)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
