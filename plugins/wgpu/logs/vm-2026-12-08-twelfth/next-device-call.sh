#!/usr/bin/env bash
# prepared in the eleventh session, kept by the twelfth (neither was lent a GPU). Steps in order of need; those past
# the budget are skipped. Its limits add up to ~1,700 s: three calls of BUDGET=560 on one warm machine, the second
# and third with SKIP=N (N: the number of the last step times.txt shows run in full). The tenth's max_pool
# gradient kernels on a GPU (correctness, leaks, memory), wgpu's W3 profiled with GPU timestamps (timed recorder),
# submits to an idle device (EMBER_WGPU_SUBMIT_IDLE_US) against the chunks, opencl W3's adaptive-vs-static step per
# kernel, wgpu's GEMM family with the banded tilings, runner rows
source .ci/device-steps.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu --format=csv,noheader -lms 200 > $OUT/clk.txt 2>&1 &
CLK=$!
step check 10 python3 -m ember.cli settings --set
step check 80 python3 -m pytest -q -p no:cacheprovider plugins/cuda/tests/test_cuda_conv.py
step check 45 python3 -m pytest -q -p no:cacheprovider plugins/opencl/tests/test_conv_kernels.py -k max_pool
step check 45 python3 -m pytest -q -p no:cacheprovider plugins/wgpu/tests/test_max_pool_grad.py plugins/wgpu/tests/test_timed_recorder.py plugins/wgpu/tests/test_sync.py
for d in cuda:0 opencl:0 wgpu:0; do
  step check 70 python3 -m pytest -q -p no:cacheprovider --pyargs ember_conformance --ember-device=$d -k "pool or memory or leak"
done
for d in cuda:0 opencl:0 wgpu:0; do
  step mem 45 python3 -m benchmarks.memory W3 --device $d --gpu-sizes --strategies adaptive,static,exclusive --rounds 2
done
step prof 40 python3 plugins/wgpu/scripts/kernel_time.py W3 --device wgpu:0 --sizes gpu --steps 5
step prof 50 python3 plugins/wgpu/scripts/step_counts.py W3 --sizes gpu --time 32,8,32:1024:50,32:1024:20,0:1024:50,8:0
step prof 45 env EMBER_WGPU_SUBMIT_IDLE_US=50 python3 -m benchmarks W3 --device wgpu:0 --peers torch
step mem 30 env EMBER_MEMORY=adaptive python3 plugins/opencl/scripts/kernel_time.py W3 --device opencl:0 --sizes gpu --warm 10 --steps 20 --gaps 8
step mem 30 env EMBER_MEMORY=static python3 plugins/opencl/scripts/kernel_time.py W3 --device opencl:0 --sizes gpu --warm 10 --steps 20 --gaps 8
step gemm 100 python3 -m benchmarks.gemm_sweep --backend wgpu --device 0 --sizes 4096 8192 --budget 35
step gemm 90 python3 -m benchmarks W5 W2 --device wgpu:0 --peers torch
for d in cuda:0 opencl:0 wgpu:0; do
  step run 45 python3 -m benchmarks W3 --device $d --peers torch
done
step prof 30 python3 plugins/wgpu/scripts/kernel_time.py W3 --device wgpu:0 --sizes gpu --steps 5 --jit
step prof 40 python3 plugins/wgpu/scripts/kernel_time.py W4 --device wgpu:0 --sizes gpu --steps 3
for d in wgpu:0 cuda:0 opencl:0; do
  step run 40 python3 -m benchmarks W6 --device $d --peers torch
done
step cold 40 env CUDA_CACHE_DISABLE=1 python3 -m benchmarks.cold_start --device opencl:0 --probe
mkdir -p /tmp/cold-ember /tmp/cold-nv
step cold 420 env EMBER_CACHE_DIR=/tmp/cold-ember CUDA_CACHE_PATH=/tmp/cold-nv python3 -m pytest -q -p no:cacheprovider \
  --pyargs ember_conformance --ember-device=opencl:0
kill $CLK
finish
