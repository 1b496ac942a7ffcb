#!/usr/bin/env bash
# Not run by CI: ember-fused's check-and-measure on the H200 device machine in one call. The
# fused-op conformance cases (numpy float64 references, native kernels counted, gradients) on
# cuda:0, on the H200 through NVIDIA's OpenCL driver and through Vulkan (wgpu), then
# benchmarks/fused.py on the three (fused vs unfused vs torch, EMBER_FUSION on and off).
#
# From the repository root, with the carried .whl (pyopencl + pytools, platformdirs, siphash24;
# wgpu 0.32.0 + cffi, pycparser, rendercanvas) and .gl (the Vulkan loader debs), see GPU-NOTES.md:
#     bash fused/scripts/h200.sh
# K (default "fused") selects the extension conformance cases with -k; K="" runs every registered
# extension's (ember-fused, ember-linalg, ember-signal: all three are installed). EXT_BENCH="fft linalg"
# adds benchmarks.fft (2^20 points) and benchmarks.linalg (solve, svd of 1024x1024) on each device;
# BENCH=0 leaves benchmarks.fused out.
# Writes at most 8 files to $OUT (what the device tool brings back): summary.txt, env.txt,
# conformance-{cuda,opencl,wgpu}.log, bench.txt, bench-unfused.txt (UNFUSED=0: not run), ext-bench.txt (EXT_BENCH);
# the JSON forms stay in /tmp. Each step has a time limit (at most 9 minutes in all; about 5 expected).
set -u
OUT=${OUT:-/tmp/ember-fused-h200}
PY=${PY:-python3}
CONFORMANCE_S=${CONFORMANCE_S:-110}
BENCH_S=${BENCH_S:-110}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} EMBER_CACHE_DIR=${EMBER_CACHE_DIR:-/tmp/ember-cache}
: >"$OUT/summary.txt"
note() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt"; }

# -- 1. carried drivers and wheels; NVIDIA's OpenCL ICD beside the image's PoCL ------------------
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
  echo "== versions"; $PY -c "import sys, numpy, cupy; print(sys.version); print('numpy', numpy.__version__, 'cupy', cupy.__version__)" 2>&1
  $PY -c "import torch; print('torch', torch.__version__, torch.version.cuda)" 2>&1
  echo "== ember devices"; $PY -m ember.cli devices 2>&1
  echo "== ember plugins"; $PY -m ember.cli plugins 2>&1
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

# -- 4. conformance: every fused-op case and the automatic extension checks, -k "$K" ---------------
for dev in ${DEVICES//,/ }; do
  kind=${dev%%:*}
  if [ "$kind" = wgpu ]; then export EMBER_WGPU_ADAPTER=${dev#*:}; fi
  timeout "$CONFORMANCE_S" $PY -m pytest --pyargs ember_conformance.test_extensions ember_fused.conformance \
    --ember-device="$dev" -k "${K-fused}" -q -rs -p no:cacheprovider >"$OUT/conformance-$kind.log" 2>&1
  note "conformance $dev: rc=$? $(tail -1 "$OUT/conformance-$kind.log")"
done

# -- 5. fused vs unfused vs torch, with ember.lazy's fusion on (default) and off ---------------------
if [ "${BENCH:-1}" = 1 ]; then  # BENCH=0 leaves benchmarks.fused out
  timeout "$BENCH_S" $PY -m benchmarks.fused --devices "$DEVICES" --sizes gpu --iters 20 --json /tmp/bench.json \
    >"$OUT/bench.txt" 2>&1
  note "bench (EMBER_FUSION=1): rc=$?"
fi
if [ "${BENCH:-1}" = 1 ] && [ "${UNFUSED:-1}" = 1 ]; then  # UNFUSED=0 leaves the EMBER_FUSION=0 run out
  EMBER_FUSION=0 timeout "$BENCH_S" $PY -m benchmarks.fused --devices "$DEVICES" --sizes gpu --iters 20 \
    --json /tmp/bench-unfused.json >"$OUT/bench-unfused.txt" 2>&1
  note "bench (EMBER_FUSION=0): rc=$?"
fi
[ -f "$OUT/bench.txt" ] && cat "$OUT/bench.txt" >>"$OUT/summary.txt"
# EXT_BENCH="fft linalg" (either or both): benchmarks.fft (2^20 points) and benchmarks.linalg
# (solve, svd of 1024x1024) on each device, EXT_S seconds each at most
for bench in ${EXT_BENCH:-}; do
  for dev in ${DEVICES//,/ }; do
    kind=${dev%%:*}
    if [ "$kind" = wgpu ]; then export EMBER_WGPU_ADAPTER=${dev#*:}; fi
    { echo "== $bench $dev"; timeout "${EXT_S:-60}" $PY -m "benchmarks.$bench" --device "$dev" --iters 5; } >>"$OUT/ext-bench.txt" 2>&1
    rc=$?
    note "$bench bench $dev: rc=$rc"
    if [ "$bench" = linalg ] && [ "$rc" = 124 ]; then  # the Tensor-op references at 1024 ran out of time: 256
      { echo "== $bench $dev --n 256"; timeout "${EXT_S:-60}" $PY -m benchmarks.linalg --device "$dev" --n 256 --iters 3; } >>"$OUT/ext-bench.txt" 2>&1
      note "$bench bench $dev --n 256: rc=$?"
    fi
  done
done
