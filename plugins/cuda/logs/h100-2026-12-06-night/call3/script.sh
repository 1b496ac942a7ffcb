#!/usr/bin/env bash
# temporary device script (not committed; copied into the logs): split-K and batch folding on the
# NVIDIA devices (tests, the runner, the GEMM probe, opencl's kernel times), opencl's cold start, wgpu's weight-gradient tilings
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=$(date +%s); BUDGET=${BUDGET:-565}
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
step tests 60 python3 -m pytest -q -p no:cacheprovider plugins/opencl/tests/test_launch_plans.py
step tests 40 python3 -m pytest -q -p no:cacheprovider plugins/cuda/tests/test_cuda_blas.py
step tests 40 python3 -m pytest -q -p no:cacheprovider plugins/wgpu/tests/test_launch_plans.py
step runner 90 python3 -m benchmarks W2 W3 W4 --device opencl:0 --peers torch
step runner 60 python3 -m benchmarks W2 W3 W4 --device cuda:0 --peers torch
step probe 90 python3 .ci/dev3_flat.py opencl:0 cuda:0 wgpu:0
step ktime 30 python3 plugins/opencl/scripts/kernel_time.py W3 --device opencl:0 --sizes gpu --steps 10 --ops matmul --by-grid
step ktime 40 python3 plugins/opencl/scripts/kernel_time.py W4 --device opencl:0 --sizes gpu --steps 3 --ops matmul
cold() { local name=$1; shift; step cold 60 env EMBER_AUTOTUNE=0 python3 -m benchmarks.cold_start --device opencl:0 --gpu --runs cold,warm,warm "$@"; echo "^ $name" >> $OUT/cold.txt; }
cold numpy-road-1; cold ember-road-1 --inputs ember; cold numpy-road-2; cold ember-road-2 --inputs ember
cold bytecode-ember-road --bytecode --inputs ember; cold bytecode-numpy-road --bytecode
step runner 150 python3 -m benchmarks W2 W3 W4 --device wgpu:0 --peers torch
step wgrad 60 python3 plugins/wgpu/scripts/wgrad_bench.py --device wgpu:0 --slices 32 64 128 256 --tiles 32x16x16x2x1 32x32x16x4x4s 64x32x16x4x4s 64x64x16x4x4s
echo "total $(( $(date +%s)-S )) s" >> $T
