"""The probe of call6: cuda W3's eager step with conv columns whole and in 32 MiB chunks, alternated in one process."""

import statistics
import time

from ember_cuda import conv

import ember as em
from benchmarks import w3_cnn

case = w3_cnn.ember(em.Device("cuda:0"), dict(w3_cnn.SIZES["gpu"]))
caps = {"whole": 2**30, "32MiB": 2**25, "64MiB": 2**26}
times = {k: [] for k in caps}
for _round in range(4):
    for name, cap in caps.items():
        conv.OPTIONS["columns_bytes"] = cap
        for _ in range(20):
            case.step()
        case.sync()
        for _rep in range(5):
            t0 = time.perf_counter()
            for _ in range(40):
                case.step()
            case.sync()
            times[name].append((time.perf_counter() - t0) / 40 * 1e3)
for name, v in times.items():
    spread = f"min {min(v):.3f}, max {max(v):.3f}"
    print(f"{name}: median {statistics.median(v):.3f} ms/step, {spread} (20 runs of 40 steps)")
