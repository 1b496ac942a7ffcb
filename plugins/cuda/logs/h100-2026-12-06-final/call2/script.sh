#!/usr/bin/env bash
# temporary device script (not committed; copied into the logs): opencl's cold start with build processes,
# the memory strategies on opencl (30 steps), the conformance suite on opencl:0 from an empty cache (one process)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=$(date +%s); BUDGET=${BUDGET:-570}
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
  local t=$(date +%s); echo "### $*" >> $OUT/$name.txt; timeout $lim "$@" >> $OUT/$name.txt 2>&1
  echo "$name rc=$? $(( $(date +%s)-t )) s (limit $lim)" >> $T; }
for n in 0 4 8; do step cold 60 env EMBER_AUTOTUNE=0 python3 -m benchmarks.cold_start --device opencl:0 --gpu --runs cold,warm,warm --inputs ember --bytecode --build-processes $n; echo "^ build-processes $n" >> $OUT/cold.txt; done
step memory 90 python3 -m benchmarks.memory W3 W4 --device opencl:0 --gpu-sizes --steps 30 --rounds 1 --strategies adaptive,static
export EMBER_CACHE_DIR=/tmp/ember-cache-conf
step conformance 280 python3 -m pytest -q -p no:cacheprovider --pyargs ember_conformance --ember-device=opencl:0
echo "total $(( $(date +%s)-S )) s" >> $T
