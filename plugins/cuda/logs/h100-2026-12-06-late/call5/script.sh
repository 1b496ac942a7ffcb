#!/usr/bin/env bash
# temporary device script (not committed)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=$(date +%s)
OUT=/tmp/setup STEPS=none CONFORMANCE=0 bash .ci/h200.sh > /dev/null 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/cuda > /dev/null 2>&1
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1 OCL_ICD_VENDORS=/tmp/ember-ocl-vendors EMBER_CACHE_DIR=/tmp/ember-cache
T=$OUT/times.txt
nvidia-smi --query-gpu=name,driver_version --format=csv > $T
echo "setup $(( $(date +%s)-S )) s" >> $T
step() { local name=$1 lim=$2; shift 2; local t=$(date +%s); timeout $lim "$@" >> $OUT/$name.txt 2>&1; echo "$name rc=$? $(( $(date +%s)-t )) s" >> $T; }
step sweep 120 python3 -m benchmarks.least_sweep --device cuda:0 --rounds 4 --iters 30 W3
step sweep 100 python3 -m benchmarks.least_sweep --device cuda:0 --rounds 1 --iters 20 W2 W4
step sweep 120 python3 -m benchmarks.least_sweep --device opencl:0 --rounds 3 --iters 30 W3
echo "total $(( $(date +%s)-S )) s" >> $T
