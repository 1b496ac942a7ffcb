import timeit

import numpy as np
import torch

import ember as em

dev = em.Device("cpu").autodiff()
a = em.tensor(np.random.rand(16, 64).astype(np.float32), device=dev)
b = em.tensor(np.random.rand(64, 64).astype(np.float32), device=dev)
v = em.tensor(np.random.rand(64).astype(np.float32), device=dev)
ar = em.tensor(np.random.rand(16, 64).astype(np.float32), device=dev).requires_grad_()
ta, tb, tv = torch.rand(16, 64), torch.rand(64, 64), torch.rand(64)
tar = torch.rand(16, 64, requires_grad=True)
tests = {
    "a+b(v)": (lambda: a + v, lambda: ta + tv),
    "a*0.5": (lambda: a * 0.5, lambda: ta * 0.5),
    "0.5*a": (lambda: 0.5 * a, lambda: 0.5 * ta),
    "ar*0.5 (grad)": (lambda: ar * 0.5, lambda: tar * 0.5),
    "a@b": (lambda: a @ b, lambda: ta @ tb),
    "a.T": (lambda: a.T, lambda: ta.T),
    "relu": (lambda: em.relu(a), lambda: torch.relu(ta)),
    "sum(0)": (lambda: a.sum(axis=0), lambda: ta.sum(0)),
    "sum()": (lambda: a.sum(), lambda: ta.sum()),
    "reshape": (lambda: a.reshape((64, 16)), lambda: ta.reshape(64, 16)),
    "where": (lambda: em.where(a > 0.5, a, 0.0), lambda: torch.where(ta > 0.5, ta, 0.0)),
    "full": (lambda: em.full((16, 64), 1.0, device=dev), lambda: torch.full((16, 64), 1.0)),
}
for k, (e, t) in tests.items():
    te = min(timeit.repeat(e, number=2000, repeat=5)) / 2000 * 1e6
    tt = min(timeit.repeat(t, number=2000, repeat=5)) / 2000 * 1e6
    print(f"{k:16s} ember {te:6.2f} us  torch {tt:6.2f} us")
