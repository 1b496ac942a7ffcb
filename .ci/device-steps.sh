#!/usr/bin/env bash
# Sourced by a device call's script (not run by CI): the setup and the `step` helper every call of the
# device tool repeats. A call's script is then just its steps, e.g.
#   source .ci/device-steps.sh            # BUDGET=seconds (default 500), OUT=folder that comes back
#   step runner 130 python3 -m benchmarks W2 W4 --device opencl:0 --peers torch
#   finish
# run from the repository root with `.whl` and `.gl` carried (see .ci/h200.sh's header). Setup installs the
# carried wheels into /tmp/site (once per machine) and ember-cuda in place; each step writes its output to
# $OUT/NAME.txt and a line "NAME rc=RC SECONDS s (limit L)" to $OUT/times.txt; its limit is cut to the
# budget left (SIGINT first, so pytest still prints its failures), and a step with under 10 s left is skipped.
# SKIP=N skips the script's first N steps (a second call on the same script goes on where the first stopped).
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
DEVICE_START=$(date +%s)
BUDGET=${BUDGET:-500}
if [ ! -d /tmp/site ]; then OUT=/tmp/setup STEPS=none CONFORMANCE=0 bash .ci/h200.sh >/dev/null 2>&1; fi
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/cuda >/dev/null 2>&1
T=$OUT/times.txt
nvidia-smi --query-gpu=name,driver_version --format=csv >"$T"
echo "setup $(($(date +%s) - DEVICE_START)) s" >>"$T"
export PYTHONUNBUFFERED=1 OCL_ICD_VENDORS=/tmp/ember-ocl-vendors EMBER_CACHE_DIR=/tmp/ember-cache
export PYTHONPATH=/tmp/site:. VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json

SKIP=${SKIP:-0}
STEP_NO=0

left() { echo $((BUDGET - ($(date +%s) - DEVICE_START))); }

step() { # NAME LIMIT command...
  local name=$1 lim=$2 l t
  shift 2
  STEP_NO=$((STEP_NO + 1))
  if [ "$STEP_NO" -le "$SKIP" ]; then
    echo "$name $STEP_NO skipped (SKIP)" >>"$T"
    return
  fi
  l=$(left)
  [ "$l" -lt "$lim" ] && lim=$l
  if [ "$lim" -lt 10 ]; then
    echo "$name skipped (time)" >>"$T"
    return
  fi
  t=$(date +%s)
  echo "### $*" >>"$OUT/$name.txt"
  timeout -s INT -k 15 "$lim" "$@" >>"$OUT/$name.txt" 2>&1
  echo "$name $STEP_NO rc=$? $(($(date +%s) - t)) s (limit $lim)" >>"$T"
}

finish() { echo "total $(($(date +%s) - DEVICE_START)) s" >>"$T"; }
