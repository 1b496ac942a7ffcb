#!/usr/bin/env bash
# Cold start on the H200's OpenCL (NVIDIA's driver): time to the first W2 step cold and warm, the
# build-cost probe, and the conformance suite from an empty kernel cache, with program families at
# FAMILY_AFTER = -1 (off: one program per kernel, as before), 1 (the default) and 0. From the
# repository root on the device machine, with the wheels carried in .whl as for .ci/h200.sh:
#   WHAT=w2 bash plugins/opencl/scripts/cold_start_h200.sh             # ~4 min: w2-*.txt, probe.txt
#   WHAT=conformance FAMILY_AFTER=1 bash plugins/opencl/scripts/cold_start_h200.sh   # <= CONFORMANCE_S
# Writes to $OUT (default /tmp/ember-h200): summary.txt and one file per measurement.
set -u
OUT=${OUT:-/tmp/ember-h200}
WHAT=${WHAT:-w2}
PY=${PY:-python3}
mkdir -p "$OUT"
note() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt"; }

if [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >"$OUT/env.txt" 2>&1
fi
export PYTHONPATH=/tmp/site:$PWD/core/src:$PWD/plugins/cpu/src:$PWD/plugins/opencl/src:$PWD/conformance/src:$PWD
export PYTHONUNBUFFERED=1 EMBER_AUTOTUNE=0
if [ -z "${OCL_ICD_VENDORS:-}" ]; then  # NVIDIA's ICD beside the image's PoCL (shared/GPU-NOTES.md)
  mkdir -p /tmp/ember-ocl-vendors
  cp /etc/OpenCL/vendors/*.icd /tmp/ember-ocl-vendors/ 2>/dev/null || true
  echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >/tmp/ember-ocl-vendors/nvidia.icd
  export OCL_ICD_VENDORS=/tmp/ember-ocl-vendors
fi
idx=$($PY -c "from ember_opencl.runtime import device_list
print(next((i for i, (p, d) in enumerate(device_list()) if 'NVIDIA' in p.name.upper()), -1))")
if [ "$idx" -lt 0 ]; then note "no NVIDIA OpenCL device (OCL_ICD_VENDORS=$OCL_ICD_VENDORS)"; exit 1; fi
dev=opencl:$idx
note "device $dev; host $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"

if [ "$WHAT" = w2 ]; then
  for fa in -1 1 0; do  # each: a cold, a warm and a warm-ember process (benchmarks/cold_start.py)
    timeout 150 $PY -m benchmarks.cold_start --device "$dev" --gpu --family-after=$fa >"$OUT/w2-fa$fa.txt" 2>&1
    note "W2 first step, FAMILY_AFTER=$fa: exit $?"
    cat "$OUT/w2-fa$fa.txt" >>"$OUT/summary.txt"
  done
  timeout 120 $PY -m benchmarks.cold_start --device "$dev" --probe >"$OUT/probe.txt" 2>&1
  note "probe: exit $?"
  cat "$OUT/probe.txt" >>"$OUT/summary.txt"
else
  fa=${FAMILY_AFTER:-1}
  cache=$(mktemp -d)
  start=$SECONDS
  EMBER_CACHE_DIR=$cache/ember CUDA_CACHE_PATH=$cache/nv timeout "${CONFORMANCE_S:-540}" $PY -m pytest \
    -p benchmarks.cold_start --family-after=$fa --cold-start-json "$OUT/conformance-fa$fa.json" \
    --pyargs ember_conformance --ember-device="$dev" -q -p no:cacheprovider --tb=short >"$OUT/conformance-fa$fa.log" 2>&1
  note "conformance from an empty cache, FAMILY_AFTER=$fa: exit $? after $((SECONDS - start)) s (124: stopped at the limit);" \
    "$(tail -n 1 "$OUT/conformance-fa$fa.log")"
  cat "$OUT/conformance-fa$fa.json" >>"$OUT/summary.txt" 2>/dev/null
fi
