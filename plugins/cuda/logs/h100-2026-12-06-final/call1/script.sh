#!/usr/bin/env bash
# temporary device script (not committed; copied into the logs): the runner W1-W6 on opencl, cuda and wgpu
# beside torch on the H200, the new column reductions tested on NVIDIA, opencl kernel times of W2
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=$(date +%s); BUDGET=${BUDGET:-570}
OUT=/tmp/setup STEPS=none CONFORMANCE=0 bash .ci/h200.sh > /dev/null 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/cuda > /dev/null 2>&1
T=$OUT/times.txt
nvidia-smi --query-gpu=name,driver_version --format=csv > $T
echo "setup $(( $(date +%s)-S )) s" >> $T
export PYTHONUNBUFFERED=1 OCL_ICD_VENDORS=/tmp/ember-ocl-vendors EMBER_CACHE_DIR=/tmp/ember-cache
export PYTHONPATH=/tmp/site:. VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
left() { echo $(( BUDGET - ($(date +%s)-S) )); }
step() {  # NAME LIMIT cmd...: the limit is cut to the time left
  local name=$1 lim=$2; shift 2; local l=$(left); [ $l -lt $lim ] && lim=$l
  if [ $lim -lt 10 ]; then echo "$name skipped (time)" >> $T; return; fi
  local t=$(date +%s); echo "### $*" >> $OUT/$name.txt; timeout $lim "$@" >> $OUT/$name.txt 2>&1
  echo "$name rc=$? $(( $(date +%s)-t )) s (limit $lim)" >> $T; }
step tests 60 python3 -m pytest -q -p no:cacheprovider plugins/opencl/tests/test_gpu_paths.py plugins/opencl/tests/test_fused_reduce.py
step runner 170 python3 -m benchmarks W1 W2 W3 W4 W5 W6 --device opencl:0 --peers torch
step runner 130 python3 -m benchmarks W1 W2 W3 W4 W5 W6 --device cuda:0 --peers torch
step ktime 40 python3 plugins/opencl/scripts/kernel_time.py W2 --device opencl:0 --sizes gpu --steps 5 --ops matmul
step host 40 python3 -m benchmarks.host_calls W3 --device cuda:0 --sizes gpu --top 80 --sort tottime
step runner 170 python3 -m benchmarks W1 W2 W3 W4 W5 W6 --device wgpu:0 --peers torch
echo "total $(( $(date +%s)-S )) s" >> $T
