#!/usr/bin/env bash
# temporary device script: which release crashes NVIDIA's OpenCL with sub-buffers (every idle-point release
# logged); cuda W3 at a 32 MiB column cap with the jittered arena packing (memory and step)
source .ci/device-steps.sh
step relprobe 60 env EMBER_OPENCL_SUB_BUFFERS=1 RELLOG=/tmp/rel.log python3 -X faulthandler plugins/cuda/logs/h100-2026-12-07-third/call3/relprobe.py W3 W4 --gpu-sizes --steps 20 --rounds 1 --strategies adaptive,static --device opencl:0
tail -c 20000 /tmp/rel.log > $OUT/rel-tail.txt; grep -c "^  rel" /tmp/rel.log >> $OUT/rel-tail.txt
step cudamem 40 env EMBER_CUDA_COLUMNS_BYTES=33554432 python3 -m benchmarks.memory W3 --gpu-sizes --steps 30 --rounds 1 --strategies adaptive,static --device cuda:0
step cudaw3 30 env EMBER_CUDA_COLUMNS_BYTES=33554432 python3 -m benchmarks W3 --device cuda:0 --peers torch
step cudaw3 30 python3 -m benchmarks W3 --device cuda:0 --peers torch
finish
