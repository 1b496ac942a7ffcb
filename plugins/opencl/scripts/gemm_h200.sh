#!/usr/bin/env bash
# Issue 11 (GEMM speed) on the H200 device machine, one command, about 4-5 minutes (at most ~9.5 by its time limits):
#   OUT=$OUT bash plugins/opencl/scripts/gemm_h200.sh        (from the repository root; carry .whl and .gl)
# Per backend (opencl, then wgpu), on its NVIDIA device:
#   1. the candidate tests (every tiling of the tuner's family against numpy float64, the tuner's filter),
#   2. `python -m benchmarks.gemm_sweep`: every candidate of ember_<backend>.tune.LARGE (each checked against
#      numpy first) at 8192^3, 4096^3, 2048^3 next to cuBLAS (cupy.matmul, CUPY_TF32=0) and torch.matmul
#      (TF32 off); the winner (geomean over 4096 and 8192) is recorded in the tuning cache for the large
#      class "lll", the class of W5's 8192^3,
#   3. a fresh process reads the cache back as W5's matmul will (tune.lookup at 8192^3, autotune off),
#   4. `python -m benchmarks W5 --device <backend>:<i> --peers torch` (8192^3, torch cuda in the same process).
# Writes 8 files to $OUT: summary.txt, env.txt, tests.log, sweep.txt (one table: TFLOP/s and x cuBLAS per
# candidate and size, the winners, then the sweep logs), sweep.json, bench-opencl.txt, bench-wgpu.txt,
# bench.json (both W5 reports).
# DRY=1: a check of this script on a machine without the GPU (PoCL / lavapipe as device 0): no installs,
# no tests, a throwaway EMBER_CACHE_DIR, 2 candidates at 96 and 64, W5 --quick beside torch on the CPU; a few
# minutes on a loaded CPU (PoCL compiles each kernel variant cold).
set -u
OUT=${OUT:-/tmp/ember-gemm}
DRY=${DRY:-0}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} EMBER_CACHE_DIR=${EMBER_CACHE_DIR:-/tmp/ember-cache}
PY=${PY:-python3}
TMP=$(mktemp -d /tmp/ember-gemm-XXXX)
note() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt"; }
: >"$OUT/env.txt"

if [ "$DRY" = 0 ]; then
  if [ -d .whl ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      >>"$OUT/env.txt" 2>&1 && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
  fi
  if [ -d .gl ]; then for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; fi
  if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  fi
  VENDORS=/tmp/ember-ocl-vendors
  mkdir -p "$VENDORS"
  cp /etc/OpenCL/vendors/*.icd "$VENDORS"/ 2>/dev/null || true
  echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >"$VENDORS/nvidia.icd"
  export OCL_ICD_VENDORS="$VENDORS"
  $PY -m pip install -q --no-deps --no-build-isolation -e core -e plugins/cpu -e plugins/opencl -e plugins/wgpu \
    -e conformance >>"$OUT/env.txt" 2>&1 || note "pip install -e failed: see env.txt"
  SIZES=(8192 4096 2048) SWEEP=(--budget 20 --reps 5) BENCH=(--peers torch) LOOKUP=8192
else
  export EMBER_CACHE_DIR="$TMP/cache"  # the winners recorded here must not reach this machine's other runs
  note "DRY=1: device 0 of each backend, small sizes, no installs, no tests, tuning cache $EMBER_CACHE_DIR"
  SIZES=(96 64) SWEEP=(--budget 5 --reps 1 --limit 2) BENCH=(--quick --peers torch --torch-device cpu) LOOKUP=96
fi
{
  echo "== git"; git log -1 --format='%H %cd' 2>/dev/null || echo "(no git)"
  echo "== nvidia-smi"; nvidia-smi --query-gpu=name,driver_version --format=csv 2>&1
  echo "== ember devices"; $PY -m ember.cli devices 2>&1
} >>"$OUT/env.txt"

pick() {  # the index of the NVIDIA device of one backend (Vulkan for wgpu); device 0 when DRY=1
  [ "$DRY" != 0 ] && { echo 0; return; }
  $PY - "$1" <<'PYEOF'
import sys
if sys.argv[1] == "opencl":
    from ember_opencl.runtime import device_list
    names = [f"{p.name} {d.name}" for p, d in device_list()]
else:
    from ember_wgpu.adapters import adapters
    names = [f"{a.info.get('device', '')} {a.info.get('backend_type', '')}" for a in adapters()]
print(next((i for i, n in enumerate(names) if "NVIDIA" in n.upper() and (sys.argv[1] == "opencl" or "Vulkan" in n)), -1))
PYEOF
}

SWEEPS=() BENCHES=()
for backend in opencl wgpu; do
  idx=$(pick "$backend")
  if [ "${idx:--1}" -lt 0 ]; then note "$backend: no NVIDIA device (see env.txt)"; continue; fi
  dev="$backend:$idx"
  if [ "$DRY" = 0 ]; then
    echo "== $backend" >>"$OUT/tests.log"
    EMBER_OPENCL_DEVICE=$idx EMBER_WGPU_DEVICE=$idx timeout 60 $PY -m pytest -q -p no:cacheprovider --tb=short \
      "plugins/$backend/tests/test_gemm_tuning.py" -k "every_candidate or drops or cached" >>"$OUT/tests.log" 2>&1
    note "$backend: candidate tests on $dev exit $? ($(tail -1 "$OUT/tests.log"))"
  fi
  peers=()
  [ "$backend" = wgpu ] && [ ${#SWEEPS[@]} -gt 0 ] && peers=(--no-peers)  # cuBLAS timed once, with opencl
  echo "== $backend" >>"$TMP/sweep-log.txt"
  timeout 100 $PY -m benchmarks.gemm_sweep --backend "$backend" --device "$idx" --sizes "${SIZES[@]}" "${SWEEP[@]}" \
    "${peers[@]}" --json "$TMP/sweep-$backend.json" >>"$TMP/sweep-log.txt" 2>&1
  note "$backend: gemm sweep exit $? ($(grep -c TFLOP "$TMP/sweep-log.txt") timings so far; $(grep winner: "$TMP/sweep-log.txt" | tail -1))"
  SWEEPS+=("$TMP/sweep-$backend.json")
  choice=$(EMBER_AUTOTUNE=0 timeout 30 $PY -c "
import argparse
from ember_$backend import tune
rt = tune._TUNER.runtime(argparse.Namespace(device=$idx))
n = $LOOKUP
c = tune.lookup(rt, 'float32', n, n, n)
print(f'class {tune.shape_class(n, n, n)}: {c.as_dict() if c else None}')
" 2>&1 | tail -1)
  note "$backend: the tuning cache at ${LOOKUP}^3 (what W5's matmul reads): $choice"
  timeout 70 $PY -m benchmarks W5 --device "$dev" "${BENCH[@]}" --json "$TMP/bench-$backend.json" \
    >"$OUT/bench-$backend.txt" 2>&1
  note "$backend: benchmarks W5 exit $? ($(grep -E '^W5 .* ms$' "$OUT/bench-$backend.txt" | tr '\n' ';'))"
  BENCHES+=("$TMP/bench-$backend.json")
done
merge='import json, os, sys; json.dump([json.load(open(p)) for p in sys.argv[2:] if os.path.exists(p)], open(sys.argv[1], "w"), indent=1)'
if [ ${#SWEEPS[@]} -gt 0 ]; then
  { $PY -m benchmarks.gemm_sweep --report "${SWEEPS[@]}"; echo; echo "== log"; cat "$TMP/sweep-log.txt"; } >"$OUT/sweep.txt" 2>&1
  $PY -c "$merge" "$OUT/sweep.json" "${SWEEPS[@]}" 2>>"$OUT/sweep.txt"
fi
[ ${#BENCHES[@]} -gt 0 ] && $PY -c "$merge" "$OUT/bench.json" "${BENCHES[@]}" 2>>"$OUT/summary.txt"
note "done"
