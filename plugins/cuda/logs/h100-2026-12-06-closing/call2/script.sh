#!/usr/bin/env bash
# temporary device script (not committed; copied into the logs; run with BUDGET=400): this session's kernels on
# NVIDIA (flash attention on opencl and wgpu, skinny GEMMs), their tests and timings, the runner W2 W4 on opencl and wgpu
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=$(date +%s); BUDGET=${BUDGET:-560}
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
P="python3 -m pytest -q -rf --tb=short -p no:cacheprovider"
step tests 70 $P plugins/opencl/tests/test_opencl_flash_attention.py plugins/opencl/tests/test_skinny_gemm.py
step tests 50 $P plugins/wgpu/tests/test_wgpu_flash_attention.py plugins/wgpu/tests/test_wgpu_skinny_gemm.py
step attn 50 python3 plugins/opencl/scripts/attention_time.py --device opencl:0 --reps 10 --rounds 2
step attn 50 python3 plugins/wgpu/scripts/attention_time.py --device wgpu:0 --shape 32,16,512,64 --layout bshd --reps 10 --rounds 2
step skinny 30 python3 plugins/opencl/scripts/skinny_time.py --device opencl:0 --iters 50
step skinny 20 python3 plugins/wgpu/scripts/skinny_time.py --device wgpu:0
step runner 150 python3 -m benchmarks W2 W4 --device opencl:0 --peers torch
step runner 120 python3 -m benchmarks W2 W4 --device wgpu:0 --peers torch
echo "total $(( $(date +%s)-S )) s" >> $T
