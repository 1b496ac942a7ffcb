#!/usr/bin/env bash
# temporary device script (BUDGET=400): cuda W3 with conv columns in 32 MiB chunks under the arena packing
# that reaches the peak (979d8dd): memory (adaptive vs static) and step time vs torch; opencl W4 again;
# opencl with sub-buffers on NVIDIA (does the 12-06 crash still happen?); cuda W4 with attention's output kept
source .ci/device-steps.sh
CAP="env EMBER_CUDA_COLUMNS_BYTES=33554432"
step cudamem 50 $CAP python3 -X faulthandler -m benchmarks.memory W3 --gpu-sizes --steps 30 --rounds 1 --strategies adaptive,static --device cuda:0
step cudaw3 35 $CAP python3 -m benchmarks W3 --device cuda:0 --peers torch
step cudaw3 35 python3 -m benchmarks W3 --device cuda:0 --peers torch
step runner 80 python3 -m benchmarks W4 --device opencl:0 --peers torch
step subbuf 60 env EMBER_OPENCL_SUB_BUFFERS=1 python3 -X faulthandler -m benchmarks.memory W3 W4 --gpu-sizes --steps 20 --rounds 1 --strategies adaptive,static --device opencl:0
step cudaw3 45 python3 -m benchmarks W4 --device cuda:0 --peers torch
step subbuf 60 env EMBER_OPENCL_SUB_BUFFERS=1 python3 -X faulthandler -m benchmarks W3 --device opencl:0 --peers torch
finish
