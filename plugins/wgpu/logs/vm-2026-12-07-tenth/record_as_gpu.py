"""``benchmarks.pool_trace record`` with a CPU device taking a GPU's kernel paths, so a pool trace of a
GPU-size step can be recorded on this VM (a projection: a GPU's own trace is the measurement).

    python $THIS wgpu W3 --device wgpu:0 --gpu-sizes --steps 6 --out F
    python $THIS opencl W3 --device opencl:0 --gpu-sizes --steps 8 --out F

wgpu: lavapipe's kernels take a GPU adapter's paths (``matmul._on_gpu``: split-K and weight-gradient
slices as on a GPU); opencl: PoCL's runtime reports a GPU (``is_cpu`` False, 4 compute units), as
``plugins/opencl/scripts/program_census.py --as-gpu`` does. Run from the repository root with
EMBER_AUTOTUNE=0 (the GEMM tuner on a CPU device taking GPU paths is slow); $THIS is this file's path.
"""

import runpy
import sys

backend = sys.argv.pop(1)
if backend == "wgpu":
    from ember_wgpu.kernels import matmul

    matmul._on_gpu = lambda rt: True
else:
    from ember_opencl import runtime

    init = runtime.Runtime.__init__

    def as_gpu(rt, index):  # noqa: ANN001, ANN202
        init(rt, index)
        rt.is_cpu, rt.compute_units = False, 4

    runtime.Runtime.__init__ = as_gpu
sys.argv = ["pool_trace", "record", *sys.argv[1:]]
runpy.run_module("benchmarks.pool_trace", run_name="__main__")
