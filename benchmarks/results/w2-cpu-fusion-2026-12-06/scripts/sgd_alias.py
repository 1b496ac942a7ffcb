# ruff: noqa: E501  (a measurement script kept with its figures)
"""One numba thread: `p - lr * g` into a fresh buffer or in place, serial (an int or uint64 index)
or parallel=True. A serial loop whose output is one of its inputs is not vectorised (LLVM's
runtime alias check fails and it takes the scalar loop); parfors' loop body is."""

import statistics
import time

import numba
import numpy as np
from numba import njit, prange, uint64


@njit(parallel=False, nogil=True, error_model="numpy")
def ser(n, a, b, s, out):
    for i in prange(n):
        out[i] = a[i] - s * b[i]


@njit(parallel=False, nogil=True, error_model="numpy")
def seru(n, a, b, s, out):
    for j in range(uint64(n)):
        i = uint64(j)
        out[i] = a[i] - s * b[i]


@njit(parallel=True, nogil=True, error_model="numpy")
def par(n, a, b, s, out):
    for i in prange(n):
        out[i] = a[i] - s * b[i]


numba.set_num_threads(1)
N = 1 << 20
p = np.random.rand(N).astype(np.float32)
g = np.random.rand(N).astype(np.float32)
s = np.float32(1e-3)


def fresh(fn):
    o = np.empty(N, np.float32)
    fn(N, p, g, s, o)
    return o


def inplace(fn):
    fn(N, p, g, s, p)


cases = {}
for name, fn in (("ser", ser), ("seru", seru), ("par1", par)):
    cases[name + " fresh"] = lambda fn=fn: fresh(fn)
    cases[name + " inplace"] = lambda fn=fn: inplace(fn)
for f in cases.values():
    f()
    f()
R = {k: [] for k in cases}
for _ in range(40):
    for k, f in cases.items():
        t = time.perf_counter()
        x = f()
        R[k].append(time.perf_counter() - t)
        del x
for k, v in R.items():
    print(f"{k:14s} p25 {statistics.quantiles(v, n=4)[0] * 1e3:.3f} med {statistics.median(v) * 1e3:.3f} ms")
