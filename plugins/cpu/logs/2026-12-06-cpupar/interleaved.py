"""W2/W3/W4/W6 on cpu, ember with fused kernels serial (EMBER_CPU_FUSED_THREADS=1's policy),
split (the default policy), split whatever the other processes' load (``forced``), and torch,
interleaved in rounds in one process so that each round's figures see the same machine load.
Run from the repository root:
PYTHONPATH=$PYTHONPATH:. python plugins/cpu/logs/2026-12-06-cpupar/interleaved.py [ROUNDS] [W..]"""

import sys
import time

import numpy as np
import torch

import ember as em
from benchmarks import w2_mlp, w3_cnn, w4_transformer, w6_elementwise
from ember_cpu.backend import FUSED

MODS = {"W2": w2_mlp, "W3": w3_cnn, "W4": w4_transformer, "W6": w6_elementwise}
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
names = sys.argv[2:] or list(MODS)
dev = em.Device("cpu")
splitter = FUSED.splitter
threads = splitter.threads
load = splitter.load


def timed(case, k):
    out = []
    for _ in range(k):
        t = time.perf_counter()
        keep = case.step()
        case.sync()
        out.append(time.perf_counter() - t)
        del keep
    return out


for name in names:
    m = MODS[name]
    size = m.SIZES["cpu"]
    ember_case = m.ember(dev, size)
    torch_case = m.torch(torch.device("cpu"), size)
    k = max(3, m.ITERS["cpu"] // 4)
    for c in (ember_case, torch_case):
        timed(c, 3)
    res = {"serial": [], "split": [], "forced": [], "torch": []}
    c0 = dict(splitter.counts)
    t0 = time.monotonic()
    for _ in range(rounds):
        for cfg in ("serial", "split", "forced", "torch"):
            if cfg == "torch":
                res[cfg] += timed(torch_case, k)
                continue
            splitter.threads = 1 if cfg == "serial" else threads
            splitter.load = None if cfg == "forced" else load
            res[cfg] += timed(ember_case, k)
    splitter.threads, splitter.load = threads, load
    med = {c: np.median(v) * 1e3 for c, v in res.items()}
    counts = {key: splitter.counts[key] - c0[key] for key in c0}
    print(
        f"{name}: serial {med['serial']:.2f} ms ({med['serial'] / med['torch']:.2f}x)  "
        f"split {med['split']:.2f} ms ({med['split'] / med['torch']:.2f}x)  "
        f"forced {med['forced']:.2f} ms ({med['forced'] / med['torch']:.2f}x)  "
        f"torch {med['torch']:.2f} ms  "
        f"[{rounds}x{k} steps each, {time.monotonic() - t0:.0f} s, splitter {counts}, "
        f"others' load {load.others:.2f}]",
        flush=True,
    )
