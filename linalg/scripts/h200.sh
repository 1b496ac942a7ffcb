#!/usr/bin/env bash
# Not run by CI: ember-linalg's native opencl/wgpu kernels (svd, lu, solve, slogdet) checked and
# measured on the H200 device machine in one call: the linalg conformance cases on cuda:0, the H200
# through NVIDIA's OpenCL driver and through Vulkan (wgpu), then benchmarks.linalg at n=1024 on the
# three (native kernels; cuda beside cuSOLVER) and, on opencl/wgpu, the Tensor-op reference at
# n=256 (the "before", one timed call).
#
# From the repository root, with the carried .whl (pyopencl + pytools, platformdirs, siphash24;
# wgpu 0.32.0 + cffi, pycparser, rendercanvas) and .gl (the Vulkan loader debs), see GPU-NOTES.md:
#     bash linalg/scripts/h200.sh
# K selects the conformance cases (-k); REF=0 leaves the reference timings out; N (1024) the size.
# Writes to $OUT: summary.txt, env.txt, conformance-{cuda,opencl,wgpu}.log, bench.txt.
# Every step has a time limit, and none starts after BUDGET_S (500) seconds; about 4 minutes expected.
set -u
OUT=${OUT:-/tmp/ember-linalg-h200}
PY=${PY:-python3}
K=${K:-(test_em_linalg or test_registered_extension) and (svd or solve or lu or det or inv)}
N=${N:-1024}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} EMBER_CACHE_DIR=${EMBER_CACHE_DIR:-/tmp/ember-cache}
: >"$OUT/summary.txt"
note() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt"; }
# a step starts only while less than BUDGET_S seconds have passed (the device call's limit is 600 s)
left() { if [ "$SECONDS" -lt "${BUDGET_S:-500}" ]; then return 0; fi; note "skipped ($SECONDS s used): $*"; return 1; }

# -- 1. carried drivers and wheels; NVIDIA's OpenCL ICD beside the image's PoCL (as fused/scripts/h200.sh)
if [ -d .gl ] && ls .gl/*.deb >/dev/null 2>&1; then
  for f in .gl/*.deb; do dpkg -x "$f" / >>"$OUT/env.txt" 2>&1; done
  ldconfig >>"$OUT/env.txt" 2>&1
fi
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >>"$OUT/env.txt" 2>&1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
VENDORS=/tmp/ember-ocl-vendors
mkdir -p "$VENDORS"
cp /etc/OpenCL/vendors/*.icd "$VENDORS"/ 2>/dev/null || true
echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >"$VENDORS/nvidia.icd"
export OCL_ICD_VENDORS="$VENDORS"
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi

# -- 2. ember from the working tree ------------------------------------------------------------
$PY -m pip install -q --no-deps --no-build-isolation -e core -e plugins/cpu -e plugins/cuda -e plugins/opencl \
  -e plugins/wgpu -e conformance -e fused -e linalg -e signal >>"$OUT/env.txt" 2>&1 || note "pip install -e failed: see env.txt"
{
  echo "== git"; git log -1 --format='%H %cd' 2>/dev/null || echo "(no git)"
  echo "== nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  echo "== ember devices"; $PY -m ember.cli devices 2>&1
} >>"$OUT/env.txt"

# -- 3. the H200 under each API: opencl:<NVIDIA platform>, wgpu:<NVIDIA Vulkan adapter> -----------
OCL=$($PY - <<'PYEOF' 2>>"$OUT/env.txt"
from ember_opencl.runtime import device_list
print(next((f"opencl:{i}" for i, (p, d) in enumerate(device_list()) if "NVIDIA" in p.name + d.vendor), ""))
PYEOF
)
WGPU=$($PY - <<'PYEOF' 2>>"$OUT/env.txt"
from ember_wgpu import adapters
found = [i for i, a in enumerate(adapters.adapters())
         if a.info.get("backend_type") == "Vulkan" and "nvidia" in (a.info.get("device", "") + a.info.get("vendor", "")).lower()]
print(f"wgpu:{found[0]}" if found else "")
PYEOF
)
DEVICES="cuda:0"
[ -n "$OCL" ] && DEVICES="$DEVICES,$OCL" || note "no NVIDIA OpenCL device (env.txt has the device list)"
[ -n "$WGPU" ] && DEVICES="$DEVICES,$WGPU" || note "no NVIDIA Vulkan adapter (was .gl carried and unpacked?)"
note "devices: $DEVICES"

# -- 4. conformance: the linalg cases and the kernel-vs-reference extension checks, -k "$K" ---------
for dev in ${DEVICES//,/ }; do
  kind=${dev%%:*}
  if [ "$kind" = wgpu ]; then export EMBER_WGPU_ADAPTER=${dev#*:}; fi
  left "conformance $dev" || continue
  timeout "${CONFORMANCE_S:-120}" $PY -m pytest --pyargs ember_conformance --ember-device="$dev" -k "$K" -q -rs \
    -p no:cacheprovider >"$OUT/conformance-$kind.log" 2>&1
  note "conformance $dev: rc=$? $(tail -1 "$OUT/conformance-$kind.log")"
done

# -- 5. benchmarks.linalg: native at N on each device; the reference at 256 on opencl and wgpu -------
for dev in ${DEVICES//,/ }; do
  kind=${dev%%:*}
  if [ "$kind" = wgpu ]; then export EMBER_WGPU_ADAPTER=${dev#*:}; fi
  left "bench $dev" || continue
  { echo "== native $dev --n $N"; timeout "${BENCH_S:-90}" $PY -m benchmarks.linalg --device "$dev" --n "$N" --iters 5; } \
    >>"$OUT/bench.txt" 2>&1
  note "bench $dev --n $N: rc=$?"
  if [ "$kind" != cuda ] && [ "${REF:-1}" = 1 ]; then
    for op in solve svd; do
      left "reference $op $dev" || continue
      { echo "== reference $dev --n 256 $op"
        timeout "${REF_S:-60}" $PY -m benchmarks.linalg --device "$dev" --n 256 --iters 1 --reference --ops "$op"; } \
        >>"$OUT/bench.txt" 2>&1
      note "reference $op $dev --n 256: rc=$?"
    done
  fi
done
grep '^|' "$OUT/bench.txt" | grep -v -- '---' | sort -u >>"$OUT/summary.txt"
