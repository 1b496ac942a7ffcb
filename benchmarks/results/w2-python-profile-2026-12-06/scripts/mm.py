import timeit

import numpy as np
import torch

torch.set_num_threads(1)
r = np.random.default_rng(0)


def f(*s):
    return r.standard_normal(s).astype(np.float32)


x, w1, w2, w3 = f(128, 784), f(784, 1024), f(1024, 1024), f(1024, 10)
h1, h2, g3, g2, g1 = f(128, 1024), f(128, 1024), f(128, 10), f(128, 1024), f(128, 1024)


def np_mms():
    x @ w1
    h1 @ w2
    h2 @ w3
    h2.T @ g3
    g3 @ w3.T
    h1.T @ g2
    g2 @ w2.T
    x.T @ g1


T = {k: torch.from_numpy(v) for k, v in dict(x=x, w1=w1, w2=w2, w3=w3, h1=h1, h2=h2, g3=g3, g2=g2, g1=g1).items()}


def th_mms(t=T):
    t["x"] @ t["w1"]
    t["h1"] @ t["w2"]
    t["h2"] @ t["w3"]
    t["h2"].T @ t["g3"]
    t["g3"] @ t["w3"].T
    t["h1"].T @ t["g2"]
    t["g2"] @ t["w2"].T
    t["x"].T @ t["g1"]


for name, fn in (("numpy", np_mms), ("torch", th_mms)) * 3:
    print(name, min(timeit.repeat(fn, number=1, repeat=20)) * 1e3)
