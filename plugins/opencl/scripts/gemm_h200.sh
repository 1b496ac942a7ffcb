#!/usr/bin/env bash
# Issue 11 (GEMM and conv kernels) on the H200 device machine, one command, about 4-5 minutes:
#   OUT=$OUT bash plugins/opencl/scripts/gemm_h200.sh        (from the repository root)
#   1. the GEMM/conv kernel tests of ember-opencl and ember-wgpu on the NVIDIA devices (correctness there),
#   2. `python -m benchmarks.gemm_sweep` per backend: every candidate of ember_<backend>.tune.LARGE (16 opencl
#      tilings, 14 wgpu configs, each checked against numpy first) at 4096^3, 8192^3, 2048^3 next to cuBLAS
#      (cupy.matmul, CUPY_TF32=0) and torch.matmul (TF32 off); the winner (geomean over 4096 and 8192) is
#      recorded in the tuners' cache (EMBER_CACHE_DIR) for the large class; one table in sweep.txt,
#   3. `python -m ember_<backend>.tune --shape 1024` (the medium class, 10 s each),
#   4. `python -m benchmarks W5 W3 --peers torch` on opencl and wgpu (reading the recorded choices).
# Carried as .ci/h200.sh expects (.whl wheels, .gl Vulkan loader).
# Writes 8 files to $OUT (the device tool brings back at most 8): summary.txt, env.txt, tests.log, sweep.txt,
# sweep.json, tune.txt, bench-<backend>.txt (the other JSON stays in /tmp).
set -u
OUT=${OUT:-/tmp/ember-gemm}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} EMBER_CACHE_DIR=${EMBER_CACHE_DIR:-/tmp/ember-cache}
PY=${PY:-python3}
note() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt"; }

if [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >"$OUT/env.txt" 2>&1 && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
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
{
  echo "== git"; git log -1 --format='%H %cd' 2>/dev/null || echo "(no git)"
  echo "== nvidia-smi"; nvidia-smi --query-gpu=name,driver_version --format=csv 2>&1
  echo "== ember devices"; $PY -m ember.cli devices 2>&1
} >>"$OUT/env.txt"

pick() {  # the index of the NVIDIA device of one backend (Vulkan for wgpu)
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

SWEEPS=()
for backend in opencl wgpu; do
  idx=$(pick "$backend")
  if [ "$idx" -lt 0 ]; then note "$backend: no NVIDIA device (see env.txt)"; continue; fi
  dev="$backend:$idx"
  if [ "$backend" = opencl ]; then
    tests=(plugins/opencl/tests/test_gemm_tuning.py plugins/opencl/tests/test_ops.py -k "tiled or cached or implicit or matmul or candidate")
  else
    tests=(plugins/wgpu/tests/test_gemm_tuning.py plugins/wgpu/tests/test_kernels.py -k "matmul or cached or implicit or conv or candidate")
  fi
  echo "== $backend" >>"$OUT/tests.log"
  EMBER_OPENCL_DEVICE=$idx EMBER_WGPU_DEVICE=$idx timeout 60 $PY -m pytest -q -p no:cacheprovider --tb=short "${tests[@]}" \
    >>"$OUT/tests.log" 2>&1
  note "$backend: kernel tests on $dev exit $? ($(tail -1 "$OUT/tests.log"))"
  peers=()
  [ "$backend" = wgpu ] && [ ${#SWEEPS[@]} -gt 0 ] && peers=(--no-peers)  # cuBLAS timed once, with opencl
  echo "== $backend" >>/tmp/sweep-log.txt
  timeout 110 $PY -m benchmarks.gemm_sweep --backend "$backend" --device "$idx" --budget 25 "${peers[@]}" \
    --json "/tmp/sweep-$backend.json" >>/tmp/sweep-log.txt 2>&1
  note "$backend: gemm sweep exit $? ($(grep -c TFLOP /tmp/sweep-log.txt) timings so far; $(grep winner: /tmp/sweep-log.txt | tail -1))"
  SWEEPS+=("/tmp/sweep-$backend.json")
  echo "== $backend" >>"$OUT/tune.txt"
  timeout 40 $PY -m "ember_$backend.tune" --device "$idx" --shape 1024 --budget 10 \
    --json "/tmp/tune-$backend.json" >>"$OUT/tune.txt" 2>&1
  note "$backend: tuner (1024) exit $?"
  timeout 90 $PY -m benchmarks W5 W3 --device "$dev" --peers torch --json "/tmp/bench-$backend.json" \
    >"$OUT/bench-$backend.txt" 2>&1
  note "$backend: benchmarks W5 W3 exit $?"
done
if [ ${#SWEEPS[@]} -gt 0 ]; then
  { $PY -m benchmarks.gemm_sweep --report "${SWEEPS[@]}"; echo; echo "== log"; cat /tmp/sweep-log.txt; } >"$OUT/sweep.txt" 2>&1
  $PY -c 'import json, os, sys; json.dump([json.load(open(p)) for p in sys.argv[2:] if os.path.exists(p)], open(sys.argv[1], "w"), indent=1)' \
    "$OUT/sweep.json" "${SWEEPS[@]}" 2>>"$OUT/sweep.txt"
fi
note "done"
