"""What leaner op wrappers would give W2 (batch 16): monkeypatched prototypes, not committed."""

import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
import ember as em
from benchmarks import w2_mlp
from ember.dispatch import apply
from ember.ops import linalg, movement

PERMUTE = movement.PERMUTE


def fast_t(x):
    if len(x._shape) == 2:
        return apply(PERMUTE, (x,), {"axes": (1, 0)}, (x._shape[1], x._shape[0]), x._dtype)
    return orig_t(x)


orig_t = linalg.matrix_transpose


def run(n=300):
    size = {"batch": 16, "hidden": 64}
    case = w2_mlp.ember(em.Device("cpu"), size)
    for _ in range(10):
        case.step()
    ts = []
    for _ in range(n):
        s = time.process_time()
        case.step()
        case.sync()
        ts.append(time.process_time() - s)
    return statistics.median(ts) * 1e6


for _r in range(3):
    linalg.matrix_transpose = orig_t
    a = run()
    linalg.matrix_transpose = fast_t
    b = run()
    print(f"W2 batch16 cpu-us/step: as is {a:.1f}, 2-D transpose straight to dispatch {b:.1f}")
