#!/usr/bin/env bash
source .ci/device-steps.sh
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,pstate,utilization.gpu --format=csv,noheader -lms 50 > $OUT/clk.txt 2>&1 &
CLK=$!
step probe 110 python3 .ci/step_probe.py W3 opencl:0 adaptive gpu 30
step probe 50 python3 .ci/step_probe.py W3 opencl:0 static gpu 30
step probe 50 python3 .ci/step_probe.py W3 opencl:0 adaptive gpu 30 10
step memory 90 python3 -m benchmarks.memory W3 --device opencl:0 --gpu-sizes --strategies static,adaptive
step rec 50 python3 -m benchmarks.pool_trace record W3 --device opencl:0 --gpu-sizes --steps 20 --out $OUT/w3-opencl.json
step rl 90 python3 .ci/step_probe.py W3 wgpu:0 adaptive gpu 60
step runner 100 python3 -m benchmarks W3 --device wgpu:0 --peers torch --json $OUT/w3-wgpu.json
kill $CLK
finish
