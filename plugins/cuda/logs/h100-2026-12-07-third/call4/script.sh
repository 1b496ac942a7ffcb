#!/usr/bin/env bash
# temporary device script: where the host time of cuda W3's eager step goes at a 32 MiB column cap (host calls,
# fused and unfused, by own time; py-spy), and where opencl W4's host waits (py-spy of the timed steps)
source .ci/device-steps.sh
CAP="env EMBER_CUDA_COLUMNS_BYTES=33554432"
HC="python3 -m benchmarks.host_calls W3 --device cuda:0 --sizes gpu --top 40 --sort tottime"
SPY="/tmp/site/bin/py-spy record -r 1000 -f raw --idle"
step hostcalls 30 $CAP $HC
step hostcalls 30 $CAP $HC --fusion 0
step spy 40 $CAP $SPY -o $OUT/w3-cuda-32m.txt -- python3 -m benchmarks.spin W3 --device cuda:0 --sizes gpu --steps 300
step spy 60 $SPY -o $OUT/w4-opencl.txt -- python3 -m benchmarks.spin W4 --device opencl:0 --sizes gpu --steps 40
finish
