#!/usr/bin/env bash
# ember-opencl on the H200 device machine (no network; Python 3.12).
#
# Before calling: install the carried pyopencl wheel and its deps (pytools, platformdirs,
# siphash24) into /tmp/site and put it on PYTHONPATH. Run from the repository root:
#
#     PYTHONPATH=/tmp/site bash plugins/opencl/scripts/h200.sh
#
# Registers NVIDIA's OpenCL driver next to whatever the image already has (PoCL), prints the
# device list, runs the conformance suite on the NVIDIA device, then W2 / W5 (8192^3) / W6
# (2^26) and the cold / warm time to the first W2 result. Logs go to $OUT (default ./h200-out).
# Budget: about 8 minutes (the conformance run is capped at CONFORMANCE_S seconds).
set -u
OUT="${OUT:-$PWD/h200-out}"
CONFORMANCE_S="${CONFORMANCE_S:-300}"
BENCH_ARGS="${BENCH_ARGS:---gpu --start --tilings gpu_large,gpu_k8,gpu_small}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
log() { echo "[h200.sh $(date +%T)] $*" | tee -a "$OUT/summary.log"; }

# -- 1. the NVIDIA ICD, plus the image's own vendors (PoCL) -----------------------------------
VENDORS=/tmp/ember-ocl-vendors
mkdir -p "$VENDORS"
cp /etc/OpenCL/vendors/*.icd "$VENDORS"/ 2>/dev/null || true
echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 > "$VENDORS/nvidia.icd"
export OCL_ICD_VENDORS="$VENDORS"
export EMBER_CACHE_DIR=/tmp/ember-cache
export PYOPENCL_NO_CACHE=1
log "OCL_ICD_VENDORS=$VENDORS: $(ls "$VENDORS" | tr '\n' ' ')"

# -- 2. ember from the working tree -------------------------------------------------------------
if ! "$PY" -m pip install --no-deps --no-build-isolation -q \
        -e core -e plugins/cpu -e plugins/opencl -e conformance >"$OUT/pip.log" 2>&1; then
    # no usable setuptools: put the src folders on PYTHONPATH and describe the entry points
    # with minimal .dist-info folders, which is all importlib.metadata needs to find plugins
    log "pip install -e failed (see pip.log); using src folders + generated .dist-info entry points"
    EP=/tmp/ember-entry-points
    mkdir -p "$EP"
    mk() {  # name version group entry
        local d="$EP/$1-$2.dist-info"
        mkdir -p "$d"
        printf 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' "$1" "$2" > "$d/METADATA"
        printf '[%s]\n%s\n' "$3" "$4" > "$d/entry_points.txt"
    }
    mk ember 0.1.0 ember.none ""
    mk ember_cpu 0.1.0 ember.backends "cpu = ember_cpu.plugin"
    mk ember_opencl 0.1.0 ember.backends "opencl = ember_opencl.plugin"
    mk ember_conformance 0.1.0 pytest11 "ember_conformance = ember_conformance.plugin"
    export PYTHONPATH="$PWD/core/src:$PWD/plugins/cpu/src:$PWD/plugins/opencl/src:$PWD/conformance/src:$EP:${PYTHONPATH:-}"
fi
"$PY" - <<'EOF' 2>&1 | tee -a "$OUT/summary.log"
import importlib
for m in ("numpy", "pyopencl", "pluggy", "ml_dtypes", "scipy", "pytest"):
    try:
        mod = importlib.import_module(m)
        print(f"{m} {getattr(mod, '__version__', '?')}")
    except Exception as exc:
        print(f"{m}: MISSING ({exc})")
EOF

# -- 3. devices -------------------------------------------------------------------------------
"$PY" -m ember.cli devices 2>&1 | tee "$OUT/devices.log"
IDX=$("$PY" - <<'EOF'
import ember as em
from ember_opencl.runtime import device_list
for i, (p, d) in enumerate(device_list()):
    if "NVIDIA" in p.name or "NVIDIA" in d.vendor:
        print(i)
        break
else:
    print(0)
EOF
)
DEV="opencl:$IDX"
log "NVIDIA device: $DEV"

# -- 4. W2 / W5 / W6 and cold/warm start (first: they are the figures the lead needs most) ----------
# shellcheck disable=SC2086
timeout 240 "$PY" plugins/opencl/scripts/bench.py --device "$DEV" $BENCH_ARGS 2>&1 | tee "$OUT/bench.jsonl"
log "bench exit: ${PIPESTATUS[0]}"

# -- 5. the conformance suite on the NVIDIA device ----------------------------------------------
timeout "$CONFORMANCE_S" "$PY" -m pytest --pyargs ember_conformance --ember-device="$DEV" -q -rs \
    -p no:cacheprovider --tb=short --ember-report="$OUT/conformance-report.md" >"$OUT/conformance.log" 2>&1
log "conformance exit: $? (124 = stopped at ${CONFORMANCE_S}s; the tail shows how far it got)"
tail -n 5 "$OUT/conformance.log" | tee -a "$OUT/summary.log"
grep -E "^(FAILED|ERROR)" "$OUT/conformance.log" | head -n 60 > "$OUT/conformance-failures.txt" || true
log "done: logs in $OUT"
