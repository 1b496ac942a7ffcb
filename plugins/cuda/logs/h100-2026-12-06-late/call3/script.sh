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
step host-gemm 60 python3 plugins/cuda/scripts/host_gemm.py
echo "== in place (default)" >> $OUT/ocl-runner.txt
step ocl-runner 120 python3 -m benchmarks W2 W3 W4 --device opencl:0 --peers torch --no-check
echo "== EMBER_OPENCL_IN_PLACE=0" >> $OUT/ocl-runner.txt
step ocl-runner 120 env EMBER_OPENCL_IN_PLACE=0 python3 -m benchmarks W2 W3 W4 --device opencl:0 --peers torch --no-check
step cuda-w2-pool 60 env MICRO=0 WORKLOADS=W2 python3 plugins/opencl/scripts/release_cost.py cuda:0 gpu
step ocl-conformance 150 python3 -m pytest -q -x --pyargs ember_conformance --ember-device=opencl:0 -p no:cacheprovider -k "test_grad or module or optim or train"
echo "total $(( $(date +%s)-S )) s" >> $T
