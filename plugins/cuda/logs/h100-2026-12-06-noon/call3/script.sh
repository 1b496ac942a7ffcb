#!/usr/bin/env bash
# temporary device script (not committed)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=$(date +%s)
OUT=/tmp/setup STEPS=none CONFORMANCE=0 bash .ci/h200.sh > /dev/null 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/cuda > /dev/null 2>&1
T=$OUT/times.txt
nvidia-smi --query-gpu=name,driver_version --format=csv > $T
echo "setup $(( $(date +%s)-S )) s" >> $T
export PYTHONUNBUFFERED=1 OCL_ICD_VENDORS=/tmp/ember-ocl-vendors EMBER_CACHE_DIR=/tmp/ember-cache
export PYTHONPATH=/tmp/site:.
step() { local name=$1 lim=$2; shift 2; local t=$(date +%s); echo "### $*" >> $OUT/$name.txt; timeout $lim "$@" >> $OUT/$name.txt 2>&1; echo "$name rc=$? $(( $(date +%s)-t )) s" >> $T; }
step tests 100 python3 -m pytest -q plugins/cuda/tests/test_cuda_kernels.py plugins/cuda/tests/test_cuda_fusion.py plugins/cuda/tests/test_cuda_fused_reduce.py plugins/cuda/tests/test_cuda_conv.py -p no:cacheprovider
step tests 100 python3 -m pytest -q --pyargs ember_conformance --ember-device=cuda:0 -k "cross_entropy or conv or pool or sum or train" -p no:cacheprovider
B=$PWD/.b/base
for r in 1 2; do
  step w3 30 env PYTHONPATH=/tmp/site:$B/core/src:$B/plugins/cuda/src:$B/plugins/cpu/src:$B python3 -m benchmarks.spin W3 --device cuda:0 --steps 300
  step w3 30 python3 -m benchmarks.spin W3 --device cuda:0 --steps 300
done
step runner 60 python3 -m benchmarks W3 --device cuda:0 --peers torch
echo "total $(( $(date +%s)-S )) s" >> $T
