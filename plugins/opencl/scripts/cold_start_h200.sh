#!/usr/bin/env bash
# Cold start on the H200's OpenCL (NVIDIA's driver): the build-cost probe (does NVIDIA's compiler
# build programs side by side: serial_s against threads_8_s), the time to the first W2 step cold,
# warm and warm-ember with programs built on the calling thread (BUILD_THREADS=0, as before
# background builds, the default) and in the background with 4 and 8 threads, then the
# conformance suite from an empty kernel cache. From the repository root on the device machine,
# with the wheels carried in .whl as for .ci/h200.sh; one call, under 10 minutes:
#   bash plugins/opencl/scripts/cold_start_h200.sh              # WHAT=all: ~1 min, then conformance to 9.5 min
#   WHAT=w2 bash plugins/opencl/scripts/cold_start_h200.sh      # probe and W2 only
#   WHAT=conformance BUILD_THREADS=0 bash ...                   # conformance only (threads as given)
# FAMILY_AFTER (default 1) sets ember_opencl.runtime.FAMILY_AFTER (-1: no families) throughout.
# Writes to $OUT (default /tmp/ember-h200): summary.txt and one file per measurement.
set -u
OUT=${OUT:-/tmp/ember-h200}
WHAT=${WHAT:-all}
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

fa=${FAMILY_AFTER:-1}
if [ "$WHAT" = w2 ] || [ "$WHAT" = all ]; then
  timeout 60 $PY -m benchmarks.cold_start --device "$dev" --probe >"$OUT/probe.txt" 2>&1
  note "probe: exit $?"
  cat "$OUT/probe.txt" >>"$OUT/summary.txt"
  for th in 0 4 8; do  # each: a cold, a warm and a warm-ember process (benchmarks/cold_start.py)
    threads="--build-threads=$th"
    timeout 90 $PY -m benchmarks.cold_start --device "$dev" --gpu --family-after=$fa $threads \
      >"$OUT/w2-threads$th.txt" 2>&1
    note "W2 first step, build threads $th, FAMILY_AFTER=$fa: exit $?"
    cat "$OUT/w2-threads$th.txt" >>"$OUT/summary.txt"
  done
fi
if [ "$WHAT" = conformance ] || [ "$WHAT" = all ]; then
  cache=$(mktemp -d)
  start=$SECONDS
  limit=${CONFORMANCE_S:-$((570 - SECONDS))}  # the whole call stays under 10 minutes
  [ -n "${BUILD_THREADS:-}" ] && export EMBER_OPENCL_BUILD_THREADS=$BUILD_THREADS
  EMBER_CACHE_DIR=$cache/ember CUDA_CACHE_PATH=$cache/nv timeout "$limit" $PY -m pytest \
    -p benchmarks.cold_start --family-after=$fa --cold-start-json "$OUT/conformance.json" \
    --pyargs ember_conformance --ember-device="$dev" -q -p no:cacheprovider --tb=short >"$OUT/conformance.log" 2>&1
  note "conformance from an empty cache, FAMILY_AFTER=$fa, build threads ${BUILD_THREADS:-default}:" \
    "exit $? after $((SECONDS - start)) s (124: stopped at the limit); $(tail -n 1 "$OUT/conformance.log")"
  cat "$OUT/conformance.json" >>"$OUT/summary.txt" 2>/dev/null
fi
