#!/usr/bin/env bash
# temporary device script: opencl sub-buffers on NVIDIA with every release at the queue's idle points and
# no release thread (crash of call1: a view released at an idle point while the thread released a whole
# buffer); cuda W3's pool trace at a 32 MiB column cap (plan refused in call1) and its host calls
source .ci/device-steps.sh
SB="env EMBER_OPENCL_SUB_BUFFERS=1"
step subbuf 60 $SB python3 -X faulthandler -m benchmarks.memory W3 W4 --gpu-sizes --steps 20 --rounds 1 --strategies adaptive,static --device opencl:0
step trace 30 env EMBER_CUDA_COLUMNS_BYTES=33554432 python3 -m benchmarks.pool_trace record W3 --device cuda:0 --gpu-sizes --steps 10 --out $OUT/trace-cuda-w3-32m.json
step hostcalls 30 env EMBER_CUDA_COLUMNS_BYTES=33554432 python3 -m benchmarks.host_calls W3 --device cuda:0 --sizes gpu --top 25
step hostcalls 30 python3 -m benchmarks.host_calls W3 --device cuda:0 --sizes gpu --top 25
step subrun 130 $SB python3 -X faulthandler -m benchmarks W3 W4 --device opencl:0 --peers torch
finish
