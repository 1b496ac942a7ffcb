#!/usr/bin/env bash
source .ci/device-steps.sh
export PYTHONPATH=$PYTHONPATH:conformance/src
step mlp 60 python3 .ci/probe_mlp.py
step mlp0 60 env EMBER_AUTOTUNE=0 python3 .ci/probe_mlp.py
step rec 60 python3 -m benchmarks.pool_trace record W3 --device wgpu:0 --gpu-sizes --steps 12 --out $OUT/w3-wgpu.json
step rep 30 python3 -m benchmarks.pool_trace replay $OUT/w3-wgpu.json
finish
