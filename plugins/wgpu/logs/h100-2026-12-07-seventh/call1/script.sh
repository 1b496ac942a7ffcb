#!/usr/bin/env bash
# device script: the GEMM tuner's warm-ups and second timings from an empty cache (wgpu and opencl W5/W2);
# wgpu W3 eager's slow mode under py-spy beside em.jit; the new conv kernels' GPU times
source .ci/device-steps.sh
SPY="/tmp/site/bin/py-spy record -r 200 -f raw --idle"
step runner 150 python3 -m benchmarks W5 W2 --device wgpu:0 --peers torch
step wk 40 python3 plugins/wgpu/scripts/kernel_time.py W2 --device wgpu:0 --sizes gpu --steps 3 --by-grid
step runner 120 python3 -m benchmarks W5 W2 --device opencl:0 --peers torch
step spy 40 $SPY -o $OUT/eager.txt -- python3 -m benchmarks.spin W3 --device wgpu:0 --steps 300
step spy 40 $SPY --native -o $OUT/eager-native.txt -- python3 -m benchmarks.spin W3 --device wgpu:0 --steps 300
step spy 40 $SPY -o $OUT/jit.txt -- python3 -m benchmarks.spin W3 --device wgpu:0 --steps 300 --jit
step wk 40 python3 plugins/wgpu/scripts/kernel_time.py W3 --device wgpu:0 --sizes gpu --steps 3 --by-grid
step runner 150 python3 -m benchmarks W3 W4 --device wgpu:0 --peers torch
finish
