#!/usr/bin/env bash
# device script: where opencl W3's host time goes under adaptive (views) against static, NVIDIA
source .ci/device-steps.sh
for r in 1 2; do
  step spin 40 env EMBER_MEMORY=static python3 -m benchmarks.spin W3 --device opencl:0 --steps 300
  step spin 40 env EMBER_MEMORY=adaptive python3 -m benchmarks.spin W3 --device opencl:0 --steps 300
  step spin 40 env EMBER_MEMORY=adaptive EMBER_OPENCL_SUB_BUFFERS=0 python3 -m benchmarks.spin W3 --device opencl:0 --steps 300
done
step pyspy 60 env EMBER_MEMORY=adaptive /tmp/site/bin/py-spy record -r 200 -f raw --idle -o $OUT/adaptive.txt -- python3 -m benchmarks.spin W3 --device opencl:0 --steps 600
step pyspy 60 env EMBER_MEMORY=static /tmp/site/bin/py-spy record -r 200 -f raw --idle -o $OUT/static.txt -- python3 -m benchmarks.spin W3 --device opencl:0 --steps 600
python3 -m benchmarks.spin --stacks $OUT/adaptive.txt --under timed --top 50 > $OUT/adaptive-sum.txt 2>&1
python3 -m benchmarks.spin --stacks $OUT/static.txt --under timed --top 50 > $OUT/static-sum.txt 2>&1
finish
