"""What a kernel launch costs with sub-buffer (view) arguments against whole buffers, on one device:

    python plugins/opencl/scripts/sub_buffer_cost.py [--device opencl:0] [--launches 2000] [--rounds 3]

The adaptive pool's step plan hands out views of one arena buffer where the static pool hands out
whole buffers; on NVIDIA's OpenCL (H100) W3's planned step ran 1.3x static's with no driver call
of the pool's in it. Each round enqueues the same kernel ``--launches`` times over 64 operands
(views of one parent, or 64 whole buffers, alternated), tiny (launch-bound) and 1 Mi floats
(bandwidth-bound), and prints host microseconds per launch (the enqueue loop) and wall per launch
after a finish. A probe for the device machine, not a test.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyopencl as cl

SRC = """
__kernel void axpy(__global const float* x, __global float* y, const int n) {
  for (int i = get_global_id(0); i < n; i += get_global_size(0)) y[i] = 1.0001f * x[i] + y[i];
}
"""


def _device(spec: str) -> cl.Device:
    index = int(spec.split(":")[1]) if ":" in spec else 0
    devices = [d for p in cl.get_platforms() for d in p.get_devices()]
    return devices[index]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="opencl:0")
    ap.add_argument("--launches", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    dev = _device(args.device)
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx)
    kernel = cl.Program(ctx, SRC).build().axpy
    align = max(int(dev.mem_base_addr_align) // 8, 256)
    count, floats = 64, 1 << 20
    nbytes = floats * 4
    slot = -(-nbytes // align) * align
    mf = cl.mem_flags
    parent = cl.Buffer(ctx, mf.READ_WRITE, slot * count)
    views = [parent.get_sub_region(i * slot, nbytes) for i in range(count)]
    wholes = [cl.Buffer(ctx, mf.READ_WRITE, nbytes) for _ in range(count)]
    zeros = np.zeros(floats, np.float32)
    for b in views + wholes:
        cl.enqueue_copy(queue, b, zeros)
    queue.finish()
    print(f"{dev.name} ({dev.platform.name}, driver {dev.driver_version}); {args.launches} launches a round")
    for n, local, groups in ((256, 256, 1), (floats, 256, 1024)):
        results: dict[str, list[tuple[float, float]]] = {"views": [], "whole": []}
        for _ in range(args.rounds):
            for name, bufs in (("views", views), ("whole", wholes)):
                queue.finish()
                t = time.perf_counter()
                for i in range(args.launches):
                    kernel(queue, (local * groups,), (local,), bufs[i % count], bufs[(i + 1) % count], np.int32(n))
                host = time.perf_counter() - t
                queue.finish()
                wall = time.perf_counter() - t
                results[name].append((host, wall))
        for name, rows in results.items():
            host = min(r[0] for r in rows) / args.launches * 1e6
            wall = min(r[1] for r in rows) / args.launches * 1e6
            print(f"n={n:>8} {name:>5}: host {host:7.2f} us a launch, wall {wall:7.2f} us (best of {args.rounds})")


if __name__ == "__main__":
    main()
