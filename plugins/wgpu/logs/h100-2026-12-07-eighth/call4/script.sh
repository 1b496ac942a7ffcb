#!/usr/bin/env bash
source .ci/device-steps.sh
SC=plugins/wgpu/scripts/step_counts.py
for sa in 32 256 4096; do
  step trace 30 env SA=$sa python3 .ci/align_probe.py $SC W3 --sizes gpu --warmup 3 --trace 12 --sync --check-first
done
step runner 45 env SA=256 python3 .ci/align_probe.py benchmarks W3 --device wgpu:0
step spin 30 env SA=256 python3 .ci/align_probe.py benchmarks.spin W3 --device wgpu:0 --steps 300
step spin 30 python3 -m benchmarks.spin W3 --device wgpu:0 --steps 300
export PYTHONPATH=$PYTHONPATH:conformance/src
step mlp 40 python3 .ci/probe_mlp.py
step conf 50 python3 -m pytest --pyargs ember_conformance --ember-device=wgpu:0 -q -rs -p no:cacheprovider -k "memory or leak"
finish
