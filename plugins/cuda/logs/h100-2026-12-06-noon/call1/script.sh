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
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1 OCL_ICD_VENDORS=/tmp/ember-ocl-vendors EMBER_CACHE_DIR=/tmp/ember-cache
step() { local name=$1 lim=$2; shift 2; local t=$(date +%s); timeout $lim "$@" >> $OUT/$name.txt 2>&1; echo "$name rc=$? $(( $(date +%s)-t )) s" >> $T; }
step cuda-tests 90 python3 -m pytest -q -x plugins/cuda/tests -p no:cacheprovider
step cuda-conf 120 python3 -m pytest -q --pyargs ember_conformance --ember-device=cuda:0 -k "in_place or test_grad" -p no:cacheprovider
step conv-bench 60 python3 plugins/cuda/scripts/conv_bench.py
step ocl-runner 90 python3 -m benchmarks W2 W3 W4 --device opencl:0 --peers torch
python3 -c "import ember as em; print([str(d) for d in em.devices()])" > $OUT/devices.txt 2>&1
step wgpu 150 python3 -m pytest -q --pyargs ember_conformance --ember-device=wgpu:0 -k "in_place" -p no:cacheprovider
step wgpu 60 python3 -m pytest -q plugins/wgpu/tests/test_in_place_update.py --ember-device=wgpu:0 -p no:cacheprovider
step wgpu-runner 150 python3 -m benchmarks W2 W3 W4 W5 --device wgpu:0 --peers torch
for d in cuda:0 opencl:0 wgpu:0; do step host-w3 40 python3 -m benchmarks.host_calls W3 --device $d --sizes gpu --top 50; done
echo "total $(( $(date +%s)-S )) s" >> $T
