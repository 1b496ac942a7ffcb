#!/usr/bin/env bash
# temporary device script (not committed; copied into the logs): the complex rotations on NVIDIA's OpenCL
# and Vulkan, opencl's cold start with the default build workers, and the conformance files on opencl:0
# that the 12-06 run did not reach (from an empty cache, one process; interrupted with SIGINT so pytest
# still prints its failures)
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
step complex 70 $P --pyargs ember_conformance --ember-device=opencl:0 -k complex_unary
step complex 70 $P --pyargs ember_conformance --ember-device=wgpu:0 -k complex_unary
export EMBER_CACHE_DIR=/tmp/ember-cache-cold
step cold 50 env EMBER_AUTOTUNE=0 python3 -m benchmarks.cold_start --device opencl:0 --gpu --runs cold,warm,warm --inputs ember --bytecode
export EMBER_CACHE_DIR=/tmp/ember-cache-conf
M=""; for f in errors extensions fusion gradients in_place indexing jit linalg memory movement nn_functional nn_modules promotion quant random reduction second_order transfer; do M="$M ember_conformance.test_$f"; done
step conformance 400 $P --pyargs $M --ember-device=opencl:0
echo "total $(( $(date +%s)-S )) s" >> $T
