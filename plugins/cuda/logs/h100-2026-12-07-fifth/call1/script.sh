#!/usr/bin/env bash
# device script: cuda implicit-GEMM convolution (correctness, pieces, W3 eager/jit, memory)
source .ci/device-steps.sh
step convtests 120 python3 -m pytest -q -x -p no:cacheprovider plugins/cuda/tests/test_cuda_conv.py
step convbench 90 python3 plugins/cuda/scripts/conv_bench.py
step impl 60 python3 plugins/cuda/logs/h100-2026-12-07-fifth/call1/impl.py
step runner 60 python3 -m benchmarks W3 --device cuda:0 --peers torch
step runnercols 60 env EMBER_CUDA_IMPLICIT_CONV=0 python3 -m benchmarks W3 --device cuda:0 --peers torch
step cudamem 60 python3 -m benchmarks.memory W3 --gpu-sizes --steps 30 --rounds 1 --strategies adaptive,static --device cuda:0
step conformance 120 python3 -m pytest -q -x -p no:cacheprovider --pyargs ember_conformance --ember-device=cuda:0 -k "conv or pool or fold"
finish
