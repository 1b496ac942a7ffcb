#!/usr/bin/env bash
source .ci/device-steps.sh
step rl 45 python3 .ci/runner_like.py gpu 40
step memory 100 python3 -m benchmarks.memory W3 --device wgpu:0 --gpu-sizes --steps 20
finish
