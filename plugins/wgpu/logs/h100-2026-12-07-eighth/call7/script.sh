#!/usr/bin/env bash
source .ci/device-steps.sh
SC=plugins/wgpu/scripts/step_counts.py
for sa in 32 256 32 256; do
  step trace 25 env SA=$sa python3 .ci/align_probe.py $SC W3 --sizes gpu --warmup 3 --trace 30 --sync --check-first
done
finish
