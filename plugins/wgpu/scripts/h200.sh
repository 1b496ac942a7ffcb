#!/usr/bin/env bash
# ember-wgpu on the H200 device machine: pick the NVIDIA H200 Vulkan adapter, run the conformance
# suite on it, then W2 (batch 4096, hidden 4096), W5 (8192^3) and W6 (2^26) at GPU sizes.
# Everything it writes goes to $OUT (at most 8 files): env.txt, conformance.log,
# conformance-report.md, bench-runner.txt, bench-runner.json, bench-wgpu.txt, summary.txt.
#
# Before it runs (the caller's part, see shared/GPU-NOTES.md and the device README):
#   for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig      # the Vulkan loader
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
#     (.whl: wgpu 0.32.0, cffi, pycparser, rendercanvas)
# Then, from the repository root:  bash plugins/wgpu/scripts/h200.sh
# It keeps to about 8 minutes: each step has its own time limit.
# For a dry run elsewhere: ADAPTER_MATCH=llvmpipe BENCH_SIZES=quick SKIP_INSTALL=1 PY=python bash h200.sh
set -u
ADAPTER_MATCH=${ADAPTER_MATCH:-nvidia|h200}
BENCH_SIZES=${BENCH_SIZES:-gpu}
RUNNER_SIZES=$([ "$BENCH_SIZES" = quick ] && echo --quick || echo --gpu-sizes)
OUT=${OUT:-/tmp/ember-h200}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$ROOT"
export PYTHONUNBUFFERED=1 XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
# the NVIDIA Vulkan driver's manifest, when the loader does not find it on its own
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
PY=${PY:-python3}
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

# -- 1. ember from the working tree ---------------------------------------------------------
# editable installs give the entry points (ember.backends, pytest11) that plugin discovery reads;
# where pip cannot build them, minimal .dist-info folders on PYTHONPATH declare the same
if [ -n "${SKIP_INSTALL:-}" ]; then
  echo "SKIP_INSTALL set: using the installed ember" >"$OUT/env.txt"
elif ! $PY -m pip install -q --no-deps --no-build-isolation -e core -e plugins/cpu -e plugins/wgpu -e conformance \
    >"$OUT/env.txt" 2>&1; then
  note "pip install -e failed (see env.txt); using src folders and generated entry-point metadata"
  META=/tmp/ember-meta
  mkdir -p "$META"
  $PY - "$META" core plugins/cpu plugins/wgpu conformance <<'EOF' >>"$OUT/env.txt" 2>&1
import sys, tomllib, pathlib
meta = pathlib.Path(sys.argv[1])
for folder in sys.argv[2:]:
    project = tomllib.loads(pathlib.Path(folder, "pyproject.toml").read_text())["project"]
    name = project["name"].replace("-", "_")
    info = meta / f"{name}-{project['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    groups = dict(project.get("entry-points", {}))
    if project.get("scripts"):
        groups["console_scripts"] = project["scripts"]
    lines = []
    for group, entries in groups.items():
        lines.append(f"[{group}]")
        lines += [f"{k} = {v}" for k, v in entries.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    print("metadata for", project["name"], "->", info)
EOF
  export PYTHONPATH="$ROOT/core/src:$ROOT/plugins/cpu/src:$ROOT/plugins/wgpu/src:$ROOT/conformance/src:$META:${PYTHONPATH:-}"
fi

# -- 2. the adapter ------------------------------------------------------------------------------
{
  echo "== nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv 2>&1
  echo "== versions"; $PY -c "import sys, wgpu, numpy; print(sys.version); print('wgpu', wgpu.__version__, 'numpy', numpy.__version__)" 2>&1
  echo "== adapters"; $PY -m ember_wgpu.adapters 2>&1
} >>"$OUT/env.txt"
IDX=$($PY - "$ADAPTER_MATCH" <<'EOF' 2>>"$OUT/env.txt"
import re, sys
from ember_wgpu import adapters
pick = -1
for i, a in enumerate(adapters.adapters()):
    info = a.info
    text = info.get("device", "") + " " + info.get("vendor", "")
    if info.get("backend_type") == "Vulkan" and re.search(sys.argv[1], text, re.IGNORECASE):
        pick = i
        break
print(pick)
EOF
)
if [ -z "$IDX" ] || [ "$IDX" = "-1" ]; then
  note "no NVIDIA Vulkan adapter found; adapters:"; $PY -m ember_wgpu.adapters 2>&1 | tee -a "$SUMMARY"
  note "(check that .gl was unpacked and ldconfig ran; env.txt has details)"
  exit 2
fi
export EMBER_WGPU_ADAPTER=$IDX
DEV="wgpu:$IDX"
$PY -c "import ember as em, json; print(json.dumps(em.Device('$DEV').describe(), indent=1))" >>"$OUT/env.txt" 2>&1
note "device $DEV: $($PY -c "import ember as em; print(em.Device('$DEV').describe()['name'])" 2>&1 | tail -1)"

# -- 3. conformance suite on the H200 -------------------------------------------------------------
SECONDS=0
timeout 270 $PY -m pytest --pyargs ember_conformance --ember-device="$DEV" -q -p no:cacheprovider -rfs \
  --ember-report="$OUT/conformance-report.md" >"$OUT/conformance.log" 2>&1
status=$?
note "conformance (exit $status, ${SECONDS}s): $(grep -E '(passed|failed|error)' "$OUT/conformance.log" | tail -1)"
grep -E '^(FAILED|ERROR)' "$OUT/conformance.log" | cut -c1-200 | head -40 >>"$SUMMARY"

# -- 4. workloads at GPU sizes ---------------------------------------------------------------------
SECONDS=0
if [ -f benchmarks/__main__.py ]; then
  # the project's runner, with PyTorch (TF32 off) side by side
  timeout 150 $PY -m benchmarks W2 W5 W6 --device "$DEV" "$RUNNER_SIZES" --peers torch --iters 10 \
    --json "$OUT/bench-runner.json" >"$OUT/bench-runner.txt" 2>&1
  note "benchmark runner (exit $?, ${SECONDS}s):"
  grep -E '^W[0-9]|ember|torch' "$OUT/bench-runner.txt" | grep -E 'ms|GFLOP|GB/s' | head -12 >>"$SUMMARY"
fi
SECONDS=0
timeout 120 $PY plugins/wgpu/scripts/bench.py --device "$DEV" --sizes "$BENCH_SIZES" --iters 10 W1 W2 W5 W6 \
  >"$OUT/bench-wgpu.txt" 2>&1
note "bench.py (exit $?, ${SECONDS}s):"
grep -E '^\{' "$OUT/bench-wgpu.txt" >>"$SUMMARY"
cat "$SUMMARY"
