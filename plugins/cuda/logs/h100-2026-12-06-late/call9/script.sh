#!/usr/bin/env bash
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
OUT=/tmp/setup STEPS=none CONFORMANCE=0 bash .ci/h200.sh > /dev/null 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/cuda > /dev/null 2>&1
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1 EMBER_CACHE_DIR=/tmp/ember-cache
timeout 100 python3 -m benchmarks W2 W3 W4 --device cuda:0 --peers torch --json $OUT/cuda-runner.json > $OUT/cuda-runner.txt 2>&1; echo "rc=$?" >> $OUT/cuda-runner.txt
