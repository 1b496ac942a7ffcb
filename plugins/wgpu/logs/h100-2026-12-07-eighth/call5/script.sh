#!/usr/bin/env bash
source .ci/device-steps.sh
SC=plugins/wgpu/scripts/step_counts.py
step trace 40 python3 $SC W3 --sizes gpu --warmup 3 --trace 40 --sync --check-first
step runner 50 python3 -m benchmarks W3 --device wgpu:0 --json $OUT/w3.json
step runner 150 python3 -m benchmarks W2 W4 --device wgpu:0 --peers torch
step memory 120 python3 -m benchmarks.memory W3 --device wgpu:0 --gpu-sizes --steps 20
finish
