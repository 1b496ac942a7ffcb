#!/usr/bin/env bash
# tenth session, call 1: max_pool's backward without the forward's output, and the placement's new orders
source .ci/device-steps.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu --format=csv,noheader -lms 100 > $OUT/clk.txt 2>&1 &
CLK=$!
step kernels 100 python3 -m pytest -q -p no:cacheprovider plugins/cuda/tests/test_cuda_conv.py
step kernels 60 python3 -m pytest -q -p no:cacheprovider plugins/opencl/tests/test_conv_kernels.py -k max_pool
step kernels 40 python3 -m pytest -q -p no:cacheprovider plugins/wgpu/tests/test_max_pool_grad.py
for d in cuda:0 opencl:0 wgpu:0; do
  step conf 90 python3 -m pytest -q -p no:cacheprovider --pyargs ember_conformance --ember-device=$d -k "pool or memory or leak"
done
for d in cuda:0 opencl:0 wgpu:0; do
  step memory 60 python3 -m benchmarks.memory W3 --device $d --gpu-sizes --strategies adaptive,static,exclusive --rounds 2
done
step ktime 30 env EMBER_MEMORY=adaptive python3 plugins/opencl/scripts/kernel_time.py W3 --device opencl:0 --sizes gpu --warm 10 --steps 20 --gaps 8
step ktime 30 env EMBER_MEMORY=static python3 plugins/opencl/scripts/kernel_time.py W3 --device opencl:0 --sizes gpu --warm 10 --steps 20 --gaps 8
step ktime 30 env EMBER_MEMORY=adaptive python3 plugins/opencl/scripts/kernel_time.py W3 --device opencl:0 --sizes gpu --warm 10 --steps 20 --gaps 8
for d in cuda:0 opencl:0 wgpu:0; do
  step runner 60 python3 -m benchmarks W3 --device $d --peers torch
done
step trace 30 python3 -m benchmarks.pool_trace record W3 --device wgpu:0 --gpu-sizes --steps 12 --out $OUT/w3-wgpu.json
kill $CLK
finish
