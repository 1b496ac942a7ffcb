#!/usr/bin/env bash
# temporary device script (not committed; copied into the logs; run with BUDGET=500): unmeasured defaults
# (wgpu W2/W4 with flash forward + composite backward), opencl sub-buffers on NVIDIA with the release
# thread, memory on opencl and cuda, GEMM tilings under W2's and W4's layouts, opencl W4 kernel times
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=$(date +%s); BUDGET=${BUDGET:-500}
if [ ! -d /tmp/site ]; then OUT=/tmp/setup STEPS=none CONFORMANCE=0 bash .ci/h200.sh > /dev/null 2>&1; fi
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
  local t=$(date +%s); echo "### $*" >> $OUT/$name.txt; timeout -s INT -k 15 $lim "$@" >> $OUT/$name.txt 2>&1
  echo "$name rc=$? $(( $(date +%s)-t )) s (limit $lim)" >> $T; }
M="python3 -X faulthandler -m benchmarks.memory W3 W4 --gpu-sizes --steps 30 --rounds 1 --strategies adaptive,static"
step wgpu 130 python3 -m benchmarks W2 W4 --device wgpu:0 --peers torch
step memory 40 $M --device opencl:0
step memory 40 env EMBER_OPENCL_SUB_BUFFERS=1 $M --device opencl:0
step memory 40 $M --device cuda:0
step subrunner 100 env EMBER_OPENCL_SUB_BUFFERS=1 python3 -X faulthandler -m benchmarks W3 W4 --device opencl:0 --peers torch
step gemm 70 python3 plugins/opencl/scripts/gemm_layout_time.py --device opencl:0 --products w2 --iters 10
step gemm 90 python3 plugins/opencl/scripts/gemm_layout_time.py --device opencl:0 --products w4 --iters 5 --top 5
step build 30 python3 plugins/opencl/scripts/build_batch_time.py --device opencl:0 --counts 1,4,16,64,1
step ktime 50 python3 plugins/opencl/scripts/kernel_time.py W4 --device opencl:0 --sizes gpu --steps 5 --ops matmul
echo "total $(( $(date +%s)-S )) s" >> $T
