#!/usr/bin/env bash
source .ci/device-steps.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu --format=csv,noheader -lms 50 > $OUT/clk.txt 2>&1 &
CLK=$!
step memory 60 python3 -m benchmarks.memory W3 --device opencl:0 --gpu-sizes --strategies adaptive,static --rounds 4
step probe 20 python3 .ci/step_probe.py W3 opencl:0 adaptive gpu 40 10
step probe 20 python3 .ci/step_probe.py W3 opencl:0 static gpu 40 10
step probe 20 python3 .ci/step_probe.py W3 opencl:0 adaptive gpu 40 10
step rl 40 python3 .ci/step_probe.py W3 wgpu:0 adaptive gpu 200 3
kill $CLK
finish
