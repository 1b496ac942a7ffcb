# ruff: noqa: E402, E501  (a measurement script kept with its figures)
import statistics
import time

import numpy as np
import torch

import ember as em

torch.set_num_threads(1)
x = em.tensor(np.random.rand(64).astype(np.float32), device=em.Device("cpu"))
tx = torch.from_numpy(np.random.rand(64).astype(np.float32))


def chain(x):
    y = x
    for _ in range(1000):
        y = y + x
    return y.numpy()


def cpu(f, n=60):
    ts = []
    for _ in range(n):
        s = time.process_time()
        f()
        ts.append(time.process_time() - s)
    return ts


for _ in range(3):
    chain(x)
    chain(tx)
E, T = [], []
for _r in range(5):
    E += cpu(lambda: chain(x))
    T += cpu(lambda: chain(tx))
q = lambda v: statistics.quantiles(v, n=4)[0] * 1e3
print(
    f"W1 cpu-us/op ember p25 {q(E):.3f} med {statistics.median(E) * 1e3:.3f} | torch p25 {q(T):.3f} med {statistics.median(T) * 1e3:.3f} | ratio p25 {q(E) / q(T):.3f}"
)
