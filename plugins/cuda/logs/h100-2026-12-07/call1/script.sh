#!/usr/bin/env bash
# temporary device script (run with BUDGET=500): the midnight session's unmeasured changes (layout tuning,
# deep split-K, banded tiles, whole-buffer plans) on opencl, cuda's conv columns in batch chunks (memory
# and step time, against the cap lifted), wgpu's W2/W4 with layout tuning; steps in priority order
source .ci/device-steps.sh
M="python3 -X faulthandler -m benchmarks.memory W3 --gpu-sizes --steps 30 --rounds 1 --strategies adaptive,static"
NOCAP="env EMBER_CUDA_COLUMNS_BYTES=4611686018427387904"
step cudatests 60 python3 -m pytest -q -x -p no:cacheprovider plugins/cuda/tests/test_cuda_conv.py plugins/cuda/tests/test_cuda_blas.py
step cudamem 30 $M --device cuda:0
step cudamem 30 $NOCAP $M --device cuda:0
step runner 130 python3 -m benchmarks W2 W4 --device opencl:0 --peers torch
step ktime 40 python3 plugins/opencl/scripts/kernel_time.py W4 --device opencl:0 --sizes gpu --steps 5 --ops matmul --gaps 12
step cudaw3 30 python3 -m benchmarks W3 --device cuda:0 --peers torch
step cudaw3 30 $NOCAP python3 -m benchmarks W3 --device cuda:0 --peers torch
step memory 30 $M --device opencl:0
step wgpu 70 python3 -m benchmarks W2 W4 --device wgpu:0 --peers torch
step tests 50 python3 -m pytest -q -x -p no:cacheprovider plugins/opencl/tests/test_opencl_gemm_layouts.py plugins/opencl/tests/test_gemm_tuning.py
step wktime 30 python3 plugins/wgpu/scripts/kernel_time.py W2 --device wgpu:0 --sizes gpu --steps 3 --by-grid
finish
