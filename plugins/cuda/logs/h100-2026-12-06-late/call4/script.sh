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
step cuda-tests 90 python3 -m pytest -q -p no:cacheprovider plugins/cuda/tests/test_cuda_in_place.py plugins/cuda/tests/test_cuda_fusion.py plugins/cuda/tests/test_cuda_jit.py plugins/cuda/tests/test_cuda_blas.py
step cuda-conformance 120 python3 -m pytest -q -x -p no:cacheprovider --pyargs ember_conformance --ember-device=cuda:0 -k "test_grad or module or optim or train or fus or lazy or matmul"
echo "== in place (default)" >> $OUT/cuda-runner.txt
step cuda-runner 90 python3 -m benchmarks W2 W3 W4 --device cuda:0 --peers torch --no-check
echo "== EMBER_CUDA_IN_PLACE=0" >> $OUT/cuda-runner.txt
step cuda-runner 90 env EMBER_CUDA_IN_PLACE=0 python3 -m benchmarks W2 W3 W4 --device cuda:0 --peers torch --no-check
step mem 150 python3 -m benchmarks.memory W3 W4 --device cuda:0 --gpu-sizes --steps 12 --markdown $OUT/mem.md
echo "total $(( $(date +%s)-S )) s" >> $T
