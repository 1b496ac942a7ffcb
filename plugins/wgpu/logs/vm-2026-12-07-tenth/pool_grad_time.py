"""W3's first max pool (64x32x28x28, 2x2) forward + backward through dispatch on DEVICE, best and
median of N; with ``kernel`` as DEVICE, cpu's numba backward kernel alone on one thread (best of N).

    python pool_grad_time.py cpu|opencl:0|wgpu:0|kernel N

Run once per code version (a worktree of the older commit on PYTHONPATH) and alternate the runs:
this VM's noise moves single runs by 30%.
"""

import sys
import time

import numpy as np

import ember as em

rng = np.random.default_rng(0)
xv = rng.standard_normal((64, 32, 28, 28)).astype(np.float32)
gv = rng.standard_normal((64, 32, 14, 14)).astype(np.float32)
device, n = sys.argv[1], int(sys.argv[2])

if device == "kernel":
    from ember_cpu import numba_kernels

    def once() -> None:
        numba_kernels.max_pool2d_backward(gv, xv, (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1))
else:
    dev = em.Device(device).autodiff()
    x = em.tensor(xv, device=dev, requires_grad=True)
    g = em.tensor(gv, device=dev)

    def once() -> None:
        (em.max_pool(x, 2) * g).sum().backward()
        x.grad.numpy()
        x.grad = None


for _ in range(3):
    once()
times = []
for _ in range(n):
    t = time.perf_counter()
    once()
    times.append(time.perf_counter() - t)
print(device, f"best {min(times) * 1e3:.2f} ms, median {np.median(times) * 1e3:.2f} ms")
