# ruff: noqa: E501  (a measurement script kept with its figures)
"""`p - lr * g` over N float32 (2^20 by default) as a numba loop: serial or parallel=True, into a
fresh buffer or in place (into p), against torch's add_ and out-of-place sub; NT threads for
numba and torch (data hot in cache: an upper bound on what a kernel change gives)."""

import os
import statistics
import time

import numba
import numpy as np
import torch
from numba import njit, prange

nt = int(os.environ.get("NT", "2"))
torch.set_num_threads(nt)
numba.set_num_threads(nt)


@njit(parallel=False, nogil=True, error_model="numpy")
def ser(n, a, b, s, out):
    for i in prange(n):
        out[i] = a[i] - s * b[i]


@njit(parallel=True, nogil=True, error_model="numpy")
def par(n, a, b, s, out):
    for i in prange(n):
        out[i] = a[i] - s * b[i]


N = int(os.environ.get("N", str(1 << 20)))
p = np.random.rand(N).astype(np.float32)
g = np.random.rand(N).astype(np.float32)
s = np.float32(1e-3)
tp = torch.from_numpy(p.copy())
tg = torch.from_numpy(g.copy())


def fresh(fn):
    o = np.empty(N, np.float32)
    fn(N, p, g, s, o)
    return o


def inplace(fn):
    fn(N, p, g, s, p)


cases = {
    "ser fresh": lambda: fresh(ser),
    "ser inplace": lambda: inplace(ser),
    "par fresh": lambda: fresh(par),
    "par inplace": lambda: inplace(par),
    "torch add_": lambda: tp.add_(tg, alpha=-1e-3),
    "torch sub": lambda: tp - 1e-3 * tg,
}
for f in cases.values():
    f()
    f()
R = {k: [] for k in cases}
for _ in range(30):
    for k, f in cases.items():
        t = time.perf_counter()
        x = f()
        R[k].append(time.perf_counter() - t)
        del x
for k, v in R.items():
    print(
        f"N={N} nt={nt} {k:12s} p25 {statistics.quantiles(v, n=4)[0] * 1e3:.3f} med {statistics.median(v) * 1e3:.3f} ms"
    )
