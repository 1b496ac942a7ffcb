# ruff: noqa: E402  (a measurement script kept with its figures)
"""W2 cpu size, one thread: minor page faults and process CPU ms per step, ember and torch (are
the fused kernels' fresh output buffers faulted in each step? 40 faults a step: no)."""

import os
import resource
import sys
import time

sys.path.insert(0, os.getcwd())
import torch

import ember as em
from benchmarks import w2_mlp

torch.set_num_threads(1)
size = {"batch": 128, "hidden": 1024}
E = w2_mlp.ember(em.Device("cpu"), size)
T = w2_mlp.torch(torch.device("cpu"), size)
for c in (E, T):
    for _ in range(3):
        c.step()
        c.sync()
for name, c in (("ember", E), ("torch", T)):
    r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = time.process_time()
    for _ in range(20):
        c.step()
        c.sync()
    r1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    print(name, "minor faults/step", (r1 - r0) / 20, "cpu ms/step", (time.process_time() - t) / 20 * 1e3)
