#!/usr/bin/env bash
# four short calls on call2's warm H100 (04:17-04:20 UTC), each sourcing .ci/device-steps.sh
source .ci/device-steps.sh
step runner 175 python3 -m benchmarks W4 --device opencl:0 --peers torch                      # runner-adaptive-1.txt
step ktime 60 python3 plugins/opencl/scripts/kernel_time.py W4 --device opencl:0 --sizes gpu --steps 5 --ops matmul --gaps 10  # ktime.txt
step runner 70 python3 -m benchmarks W4 --device opencl:0 --peers torch                       # runner-adaptive-2.txt
step trace 60 python3 -m benchmarks.pool_trace record W4 --device opencl:0 --gpu-sizes --steps 8 --out $OUT/trace-opencl-w4.json
step runner 70 env EMBER_MEMORY=static python3 -m benchmarks W4 --device opencl:0 --peers torch  # runner-static.txt
finish
