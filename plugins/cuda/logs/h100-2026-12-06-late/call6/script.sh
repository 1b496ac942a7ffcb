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
t=$(date +%s); OUT=$OUT/cold timeout 300 bash plugins/opencl/scripts/cold_start_gpu.sh > /dev/null 2>&1; echo "cold_start_gpu rc=$? $(( $(date +%s)-t )) s" >> $T
cp $OUT/cold/summary.txt $OUT/cold-summary.txt; rm -rf $OUT/cold
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1 OCL_ICD_VENDORS=/tmp/ember-ocl-vendors EMBER_CACHE_DIR=/tmp/ember-cache
step() { local name=$1 lim=$2; shift 2; local t=$(date +%s); timeout $lim "$@" >> $OUT/$name.txt 2>&1; echo "$name rc=$? $(( $(date +%s)-t )) s" >> $T; }
step mem-opencl 150 python3 -m benchmarks.memory W3 W4 --device opencl:0 --gpu-sizes --steps 12 --markdown $OUT/mem-opencl.md
step sweep-order 60 python3 -m benchmarks.least_sweep --device cuda:0 --values 0 --rounds 2 --iters 30 W2 W3
echo "total $(( $(date +%s)-S )) s" >> $T
