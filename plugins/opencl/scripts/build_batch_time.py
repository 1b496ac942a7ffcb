"""How NVIDIA's (or any) OpenCL compiler's build time grows with the kernels in one program:

    python plugins/opencl/scripts/build_batch_time.py --device opencl:0 [--counts 1,4,16,64]

Builds programs of N small elementwise kernels (each a different expression, so no two are the
same text; a fresh salt per build so no driver cache answers) and prints the wall time of each
build and per kernel: a fixed cost per build favours building an op's sibling kernels as one
program (cold start: the conformance suite builds ~2,000 single-kernel programs). A probe for
the device machine, not a test.
"""

from __future__ import annotations

import argparse
import os
import time

import pyopencl as cl

OPS = [
    "a + b",
    "a * b",
    "a - b",
    "fmax(a, b)",
    "fmin(a, b)",
    "exp(a)",
    "log(fabs(a) + 1.0f)",
    "sqrt(fabs(a))",
    "tanh(a)",
    "a / (b + 2.0f)",
    "erf(a)",
    "sin(a) * cos(b)",
    "pow(fabs(a), b)",
    "floor(a) + ceil(b)",
]


def _source(count: int, salt: int) -> str:
    parts = []
    for i in range(count):
        expr = OPS[i % len(OPS)]
        parts.append(
            f"__kernel void k{salt}_{i}(__global const float* x, __global const float* y, __global float* out,"
            f" const int n, const int sx, const int sy) {{\n"
            f"  for (int i = get_global_id(0); i < n; i += get_global_size(0)) {{\n"
            f"    float a = x[i * sx] + {i}.0f, b = y[i * sy];\n    out[i] = {expr};\n  }}\n}}\n"
        )
    return "".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="opencl:0")
    ap.add_argument("--counts", default="1,4,16,64")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    index = int(args.device.split(":")[1])
    devices = [d for p in cl.get_platforms() for d in p.get_devices()]
    device = devices[index]
    ctx = cl.Context([device])
    print(f"{device.name.strip()} ({device.platform.name.strip()}, driver {device.driver_version})")
    salt = os.getpid() * 1000
    for _ in range(args.rounds):
        for count in (int(c) for c in args.counts.split(",")):
            salt += 1
            src = _source(count, salt)
            start = time.perf_counter()
            prg = cl.Program(ctx, src).build()
            names = [k.function_name for k in prg.all_kernels()]
            took = time.perf_counter() - start
            each = took / count * 1e3
            print(f"{count:4d} kernels: build {took * 1e3:8.1f} ms, {each:7.2f} ms a kernel ({len(names)} found)")


if __name__ == "__main__":
    main()
