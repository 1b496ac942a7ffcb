#!/usr/bin/env bash
# temporary device script (not committed; copied into the logs): dense copies of repeating GEMM operands
# (opencl W4), wgpu's new weight-gradient tiles, wgpu W2 fused vs unfused by kernel, cuda W3 again
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=$(date +%s); BUDGET=${BUDGET:-300}
OUT=/tmp/setup STEPS=none CONFORMANCE=0 bash .ci/h200.sh > /dev/null 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/cuda > /dev/null 2>&1
T=$OUT/times.txt
nvidia-smi --query-gpu=name,driver_version --format=csv > $T
echo "setup $(( $(date +%s)-S )) s" >> $T
export PYTHONUNBUFFERED=1 OCL_ICD_VENDORS=/tmp/ember-ocl-vendors EMBER_CACHE_DIR=/tmp/ember-cache
export PYTHONPATH=/tmp/site:. VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
left() { echo $(( BUDGET - ($(date +%s)-S) )); }
step() {
  local name=$1 lim=$2; shift 2; local l=$(left); [ $l -lt $lim ] && lim=$l
  if [ $lim -lt 8 ]; then echo "$name skipped (time)" >> $T; return; fi
  local t=$(date +%s); echo "### $*" >> $OUT/$name.txt; timeout $lim "$@" >> $OUT/$name.txt 2>&1
  echo "$name rc=$? $(( $(date +%s)-t )) s (limit $lim)" >> $T; }
step tests 40 python3 -m pytest -q -p no:cacheprovider plugins/opencl/tests/test_launch_plans.py plugins/wgpu/tests/test_launch_plans.py
step tests 40 python3 -m pytest -q -p no:cacheprovider plugins/wgpu/tests/test_conv_wgrad.py
step wgrad 20 python3 plugins/wgpu/scripts/wgrad_bench.py --device wgpu:0
step runner 40 python3 -m benchmarks W4 --device opencl:0 --peers torch
step ktime 20 python3 plugins/opencl/scripts/kernel_time.py W4 --device opencl:0 --sizes gpu --steps 3 --ops matmul
step runner 30 python3 -m benchmarks W3 --device cuda:0 --peers torch
step wktime 60 python3 plugins/wgpu/scripts/kernel_time.py W2 --device wgpu:0 --sizes gpu --steps 3 --by-grid
step wktime 40 env EMBER_FUSION=0 python3 plugins/wgpu/scripts/kernel_time.py W2 --device wgpu:0 --sizes gpu --steps 3 --by-grid
step runner 90 python3 -m benchmarks W3 W4 W2 --device wgpu:0 --peers torch
step runner 30 python3 -m benchmarks W3 --device cuda:0 --peers torch
echo "total $(( $(date +%s)-S )) s" >> $T
