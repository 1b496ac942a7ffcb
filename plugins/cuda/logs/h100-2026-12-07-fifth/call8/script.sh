#!/usr/bin/env bash
# device script: opencl views with spares (reused by range) on NVIDIA: host cost, memory, runner, tests
source .ci/device-steps.sh
step ocltests 40 python3 -m pytest -q -p no:cacheprovider plugins/opencl/tests/test_sub_buffers.py plugins/opencl/tests/test_release_thread.py
step viewstats 40 python3 plugins/cuda/logs/h100-2026-12-07-fifth/call8/viewstats.py
for r in 1 2; do
  step spin 40 env EMBER_MEMORY=static python3 -m benchmarks.spin W3 --device opencl:0 --steps 300
  step spin 40 env EMBER_MEMORY=adaptive python3 -m benchmarks.spin W3 --device opencl:0 --steps 300
  step spin 40 env EMBER_MEMORY=adaptive EMBER_OPENCL_SUB_BUFFERS=0 python3 -m benchmarks.spin W3 --device opencl:0 --steps 300
done
step mem 120 python3 -X faulthandler -m benchmarks.memory W3 W4 --gpu-sizes --steps 20 --rounds 2 --strategies adaptive,static --device opencl:0
step runner 120 python3 -X faulthandler -m benchmarks W3 W4 --device opencl:0 --peers torch
step leak 60 python3 -m pytest -q -x -p no:cacheprovider --pyargs ember_conformance --ember-device=opencl:0 -k "leak or memory"
step pyspy 40 env EMBER_MEMORY=adaptive /tmp/site/bin/py-spy record -r 200 -f raw --idle -o $OUT/adaptive.txt -- python3 -m benchmarks.spin W3 --device opencl:0 --steps 600
python3 -m benchmarks.spin --stacks $OUT/adaptive.txt --under timed --top 30 > $OUT/adaptive-sum.txt 2>&1
finish
