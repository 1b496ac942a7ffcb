"""cuda W3's eager step and em.jit step with conv as implicit GEMM and as im2col + cuBLAS (columns),
alternated in one process (the runner's spread between processes is larger than the difference)."""

import statistics
import time

from ember_cuda import conv

import ember as em
from benchmarks import w3_cnn

dev = em.Device("cuda:0")
case = w3_cnn.ember(dev, dict(w3_cnn.SIZES["gpu"]))
modes = {"implicit": True, "columns": False}
times: dict[str, list[float]] = {k: [] for k in modes}
for _round in range(4):
    for name, on in modes.items():
        conv.OPTIONS["implicit"] = on
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
    print(f"eager {name}: median {statistics.median(v):.3f} ms/step, {spread} (20 runs of 40)")
print("conv launches:", dict(conv.CALLS))
