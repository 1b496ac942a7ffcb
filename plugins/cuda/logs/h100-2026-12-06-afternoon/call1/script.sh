#!/usr/bin/env bash
# temporary device script (not committed): what the last session merged unmeasured, by priority
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=$(date +%s)
OUT=/tmp/setup STEPS=none CONFORMANCE=0 bash .ci/h200.sh > /dev/null 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/cuda > /dev/null 2>&1
T=$OUT/times.txt
nvidia-smi --query-gpu=name,driver_version --format=csv > $T
git log -1 --format=%H >> $T 2>&1
echo "setup $(( $(date +%s)-S )) s" >> $T
export PYTHONUNBUFFERED=1 OCL_ICD_VENDORS=/tmp/ember-ocl-vendors EMBER_CACHE_DIR=/tmp/ember-cache
export PYTHONPATH=/tmp/site:. VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
step() { local name=$1 lim=$2; shift 2; local left=$(( 575 - ($(date +%s)-S) )); [ $left -lt 20 ] && { echo "$name skipped (time)" >> $T; return; }; [ $lim -gt $left ] && lim=$left; local t=$(date +%s); echo "### $*" >> $OUT/$name.txt; timeout $lim "$@" >> $OUT/$name.txt 2>&1; echo "$name rc=$? $(( $(date +%s)-t )) s" >> $T; }
python3 -m ember.cli devices >> $T 2>&1
step wgpu 170 python3 -m benchmarks W5 W3 W2 W4 --device wgpu:0 --peers torch
step wgpu 80 env EMBER_WGPU_CHECKS=1 python3 -m benchmarks W5 W3 --device wgpu:0
step ocl 90 env EMBER_OPENCL_DEVICE=0 python3 -m pytest -q -p no:cacheprovider plugins/opencl/tests/test_conv_kernels.py
step ocl 130 python3 -m benchmarks W2 W3 W4 --device opencl:0 --peers torch
step cuda 100 python3 -m benchmarks W2 W3 W4 --device cuda:0 --peers torch
step ocl 50 python3 plugins/opencl/scripts/kernel_time.py W3 --device opencl:0 --sizes gpu --steps 10
step wgpu 90 python3 plugins/wgpu/scripts/step_counts.py W3 W2 --device wgpu:0 --sizes gpu --time 0,32 --rounds 2 --steps 4
step ocl 60 python3 plugins/opencl/scripts/conv_time.py --device opencl:0 --batch 512 --reps 10
echo "total $(( $(date +%s)-S )) s" >> $T
