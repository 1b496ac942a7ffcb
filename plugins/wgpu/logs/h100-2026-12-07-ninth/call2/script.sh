#!/usr/bin/env bash
source .ci/device-steps.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu --format=csv,noheader -lms 100 > $OUT/clk.txt 2>&1 &
CLK=$!
step subbuf 25 python3 plugins/opencl/scripts/sub_buffer_cost.py --device opencl:0 --rounds 2
step memory 60 python3 -m benchmarks.memory W3 --device opencl:0 --gpu-sizes --strategies adaptive,static
step memory 50 env EMBER_OPENCL_SUB_BUFFERS=0 python3 -m benchmarks.memory W3 --device opencl:0 --gpu-sizes --strategies adaptive,static
step runner 60 python3 -m benchmarks W3 --device wgpu:0 --peers torch --json $OUT/wgpu.json
step memory 80 env EMBER_OPENCL_SUB_BUFFERS=0 python3 -m benchmarks.memory W4 --device opencl:0 --gpu-sizes --strategies adaptive,static --rounds 1
kill $CLK
finish
