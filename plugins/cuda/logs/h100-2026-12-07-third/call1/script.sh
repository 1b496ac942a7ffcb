#!/usr/bin/env bash
# temporary device script: cuda W3's memory under column caps after the chunk fix (abb0d21) and its step;
# opencl sub-buffers on NVIDIA with views released at idle points (961add8); the sub-buffer concurrency
# scenario; opencl W4 with pinned uploads, and its idle gaps with pinned uploads on/off
source .ci/device-steps.sh
KT=plugins/opencl/scripts/kernel_time.py
MEM="python3 -m benchmarks.memory W3 --gpu-sizes --steps 30 --rounds 1 --strategies adaptive,static --device cuda:0"
step cudamem 40 env EMBER_CUDA_COLUMNS_BYTES=33554432 $MEM
step cudamem 40 env EMBER_CUDA_COLUMNS_BYTES=67108864 $MEM
step cudaw3 30 env EMBER_CUDA_COLUMNS_BYTES=67108864 python3 -m benchmarks W3 --device cuda:0 --peers torch
step cudaw3 30 python3 -m benchmarks W3 --device cuda:0 --peers torch
step subbuf 50 env EMBER_OPENCL_SUB_BUFFERS=1 python3 -X faulthandler -m benchmarks.memory W3 W4 --gpu-sizes --steps 20 --rounds 1 --strategies adaptive,static --device opencl:0
step runner 80 python3 -m benchmarks W4 --device opencl:0 --peers torch
step gaps 40 env EMBER_OPENCL_PINNED=1 python3 $KT W4 --device opencl:0 --sizes gpu --steps 5 --gaps 10
step gaps 40 env EMBER_OPENCL_PINNED=0 python3 $KT W4 --device opencl:0 --sizes gpu --steps 5 --gaps 10
step prof 40 bash -c "EMBER_CUDA_COLUMNS_BYTES=33554432 python3 -m cProfile -s tottime -m benchmarks W3 --device cuda:0 2>&1 | head -80"
finish
