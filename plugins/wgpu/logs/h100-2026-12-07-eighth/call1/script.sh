#!/usr/bin/env bash
# device script: wgpu W3 eager's lost time (read-write twins of a step plan's arena? the sync's spin?), opencl
# memory after the ride-through, the memory conformance tests on every GPU backend
source .ci/device-steps.sh
SC=plugins/wgpu/scripts/step_counts.py
step twins 60 env EMBER_MEMORY=static python3 $SC W3 --sizes gpu --twins --rounds 5 --steps 10
step twins 60 python3 $SC W3 --sizes gpu --twins --rounds 5 --steps 10
step runner 45 python3 -m benchmarks W3 --device wgpu:0
step runner 45 env EMBER_MEMORY=static python3 -m benchmarks W3 --device wgpu:0
step sync 40 python3 plugins/wgpu/scripts/sync_latency.py --device wgpu:0
step trace 30 python3 $SC W3 --sizes gpu --warmup 8 --trace 16 --sync
step trace 30 env EMBER_WGPU_SPIN_US=20000 python3 $SC W3 --sizes gpu --warmup 8 --trace 12 --sync
step wmem 90 python3 -m benchmarks.memory W3 --device wgpu:0 --gpu-sizes
step memory 90 python3 -m benchmarks.memory W3 --device opencl:0 --gpu-sizes --strategies adaptive,static
for d in cuda:0 opencl:0 wgpu:0; do
  step conf 50 python3 -m pytest --pyargs ember_conformance --ember-device=$d -q -rs -p no:cacheprovider -k "memory or leak"
done
step wk 60 python3 plugins/wgpu/scripts/kernel_time.py W4 --device wgpu:0 --sizes gpu --steps 2 --by-grid
finish
