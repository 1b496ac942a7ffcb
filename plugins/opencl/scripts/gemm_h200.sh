#!/usr/bin/env bash
# Issue 11 (GEMM and conv kernels) on the H200 device machine, one command, under 8 minutes:
#   1. the GEMM/conv kernel tests of ember-opencl and ember-wgpu on the NVIDIA devices (correctness there),
#   2. `python -m ember_opencl.tune` and `python -m ember_wgpu.tune` (4096^3, 1024^3; cached in EMBER_CACHE_DIR),
#   3. `python -m benchmarks W5 W3 --peers torch` on opencl and wgpu (reading the tuned choices).
# Carried as .ci/h200.sh expects (.whl wheels, .gl Vulkan loader). Usage, from the repository root:
#   OUT=/some/dir bash plugins/opencl/scripts/gemm_h200.sh
# Writes 8 files to $OUT (the device tool brings back at most 8): summary.txt, env.txt, tests-<backend>.log,
# tune-<backend>.txt, bench-<backend>.txt (the JSON forms stay in /tmp).
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

for backend in opencl wgpu; do
  idx=$(pick "$backend")
  if [ "$idx" -lt 0 ]; then note "$backend: no NVIDIA device (see env.txt)"; continue; fi
  dev="$backend:$idx"
  if [ "$backend" = opencl ]; then
    tests=(plugins/opencl/tests/test_gemm_tuning.py plugins/opencl/tests/test_ops.py -k "tiled or cached or implicit or matmul")
  else
    tests=(plugins/wgpu/tests/test_gemm_tuning.py plugins/wgpu/tests/test_kernels.py -k "matmul or cached or implicit or conv")
  fi
  EMBER_OPENCL_DEVICE=$idx EMBER_WGPU_DEVICE=$idx timeout 45 $PY -m pytest -q -p no:cacheprovider --tb=short "${tests[@]}" \
    >"$OUT/tests-$backend.log" 2>&1
  note "$backend: kernel tests on $dev exit $? ($(tail -1 "$OUT/tests-$backend.log"))"
  timeout 90 $PY -m "ember_$backend.tune" --device "$idx" --shape 4096 --shape 1024 --budget 30 \
    --json "/tmp/tune-$backend.json" >"$OUT/tune-$backend.txt" 2>&1
  note "$backend: tuner exit $? ($(grep -c GFLOP "$OUT/tune-$backend.txt") timings)"
  timeout 90 $PY -m benchmarks W5 W3 --device "$dev" --peers torch --json "/tmp/bench-$backend.json" \
    >"$OUT/bench-$backend.txt" 2>&1
  note "$backend: benchmarks W5 W3 exit $?"
done
note "done"
