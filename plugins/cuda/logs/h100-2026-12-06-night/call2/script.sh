#!/usr/bin/env bash
# temporary device script (not committed): W6 on the H200, GEMM-bound kernels of W2/W4 (opencl, wgpu), opencl memory vs static
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=$(date +%s)
OUT=/tmp/setup STEPS=none CONFORMANCE=0 bash .ci/h200.sh > /dev/null 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/cuda > /dev/null 2>&1
T=$OUT/times.txt
nvidia-smi --query-gpu=name,driver_version --format=csv > $T
echo "setup $(( $(date +%s)-S )) s" >> $T
export PYTHONUNBUFFERED=1 OCL_ICD_VENDORS=/tmp/ember-ocl-vendors EMBER_CACHE_DIR=/tmp/ember-cache
export PYTHONPATH=/tmp/site:. VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
step() { local name=$1 lim=$2; shift 2; local t=$(date +%s); echo "### $*" >> $OUT/$name.txt; timeout $lim "$@" >> $OUT/$name.txt 2>&1; echo "$name rc=$? $(( $(date +%s)-t )) s" >> $T; }
left() { echo $(( 540 - ($(date +%s)-S) )); }
step ktime 60 python3 plugins/opencl/scripts/kernel_time.py W2 --device opencl:0 --sizes gpu --steps 5 --by-grid
step ktime 70 python3 plugins/opencl/scripts/kernel_time.py W4 --device opencl:0 --sizes gpu --steps 3 --by-grid
step ktime 60 python3 plugins/wgpu/scripts/kernel_time.py W4 --device wgpu:0 --sizes gpu --steps 2 --by-grid
step ktime 60 python3 plugins/wgpu/scripts/kernel_time.py W2 --device wgpu:0 --sizes gpu --steps 2 --by-grid
L=$(left); [ $L -gt 40 ] && step memory $L python3 -m benchmarks.memory W3 W4 --device opencl:0 --gpu-sizes --steps 12 --rounds 2 --strategies adaptive,static
echo "total $(( $(date +%s)-S )) s" >> $T
