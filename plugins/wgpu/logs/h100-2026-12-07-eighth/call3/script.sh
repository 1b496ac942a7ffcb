#!/usr/bin/env bash
source .ci/device-steps.sh
SC=plugins/wgpu/scripts/step_counts.py
step trace 40 python3 $SC W3 --sizes gpu --warmup 3 --trace 25 --sync --check-first
step runner 45 python3 -m benchmarks W3 --device wgpu:0
step trace 40 env EMBER_MEMORY=static python3 $SC W3 --sizes gpu --warmup 3 --trace 15 --sync --check-first
step twins 60 python3 $SC W3 --sizes gpu --twins --rounds 4 --steps 10
step trace 40 python3 $SC W3 --sizes gpu --warmup 3 --trace 25 --check-first
finish
