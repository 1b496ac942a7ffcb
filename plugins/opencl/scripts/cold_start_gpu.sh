#!/usr/bin/env bash
# Issue 10 on a GPU's OpenCL: the first W2 result of a new process, cold and twice warm, with the
# defaults (generic untuned GEMM until the first read-back, no head start), W2's inputs made by numpy on
# the host and uploaded (the benchmark's road, rows new-*) and made on the device by ember.nn.init and
# em.randn / em.randint (the user's road, rows ember-inputs-*: --inputs ember), and with the driver's
# start-up beside the backend's import turned off (rows early-driver-off-*: EMBER_OPENCL_EARLY_DRIVER=0),
# alternated; with 4 build processes; with bytecode (an installed package's import: rows bytecode-*),
# with NVIDIA's ICD alone, with one build thread; then the generic GEMM's
# speed against the specialised kernels (benchmarks.gemm_generic) and W2's step.
# HEAD_START_RUN=1 adds the head start's cold runs, PROCESSES_RUN=0 drops the build-process rows,
# ICD_ONLY_RUN=0 the rows with NVIDIA's ICD alone (no PoCL loaded beside it), THREADS_RUN=0 those with
# one build thread.
# From the repository root on the device machine, one call, ~4-5 minutes:
#   bash plugins/opencl/scripts/cold_start_gpu.sh
#   BASE_SRC=base-src/plugins/opencl/src bash plugins/opencl/scripts/cold_start_gpu.sh  # also the base
# BASE_SRC: a folder holding another ember_opencl (e.g. made before the call with
#   mkdir -p base-src && git archive a650a2b plugins/opencl/src | tar -x -C base-src), run first on
#   PYTHONPATH for the "base" rows, alternated with the tree's own.
# EMBER_AUTOTUNE=0 throughout: the first result never waits for tuning (it starts after the first
# read-back), and the second step would otherwise spend ~27 s tuning in every cold run.
# Writes to $OUT (default /tmp/ember-cold-gpu): summary.txt and one file per measurement.
set -u
OUT=${OUT:-/tmp/ember-cold-gpu}
PY=${PY:-python3}
mkdir -p "$OUT"
note() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt"; }

if [ -d .whl ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >"$OUT/env.txt" 2>&1
fi
SRC=$PWD/core/src:$PWD/plugins/cpu/src:$PWD/plugins/opencl/src:$PWD/conformance/src:$PWD
export PYTHONPATH=/tmp/site:$SRC
export PYTHONUNBUFFERED=1 EMBER_AUTOTUNE=0
if [ -z "${OCL_ICD_VENDORS:-}" ]; then  # NVIDIA's ICD beside the image's PoCL (shared/GPU-NOTES.md)
  mkdir -p /tmp/ember-ocl-vendors
  cp /etc/OpenCL/vendors/*.icd /tmp/ember-ocl-vendors/ 2>/dev/null || true
  echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 >/tmp/ember-ocl-vendors/nvidia.icd
  export OCL_ICD_VENDORS=/tmp/ember-ocl-vendors
fi
idx=$($PY -c "from ember_opencl.runtime import device_list
print(next((i for i, (p, d) in enumerate(device_list()) if 'NVIDIA' in p.name.upper()), -1))")
dev=${DEV:-opencl:$idx}  # (DEV=opencl:0 SIZE= GEMM_SIZE=128 W2_ARGS=--quick BYTECODE_RUN=0: a dry run on PoCL)
if [ "$dev" = opencl:-1 ]; then note "no NVIDIA OpenCL device (OCL_ICD_VENDORS=$OCL_ICD_VENDORS)"; exit 1; fi
note "device $dev; host $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); git $(git rev-parse --short HEAD 2>/dev/null)"

w2() {  # NAME [PYTHONPATH prefix] -- cold_start arguments...
  local name=$1 prefix=$2
  shift 2
  PYTHONPATH=$prefix$PYTHONPATH timeout 240 $PY -m benchmarks.cold_start --device "${DEV_ONLY:-$dev}" ${SIZE---gpu} "$@" \
    >"$OUT/$name.txt" 2>&1
  note "$name ($*): exit $?"
  grep '"run"' "$OUT/$name.txt" | $PY -c "
import json, sys
keys = ['inputs', 'first_result_s', 'spawn_to_first_result_s', 'import_s', 'open_s', 'plugins_s', 'backend_import_s',
        'platforms_s', 'context_s', 'inputs_s', 'numpy_inputs_s', 'first_step_s', 'second_step_s', 'builds',
        'disk_loads', 'build_s', 'load_s', 'warm_up_s', 'process_builds', 'no_bytecode', 'loss']
for line in sys.stdin:
    d = json.loads(line)
    print('  ', d['run'], ' '.join(f'{k}={d[k]}' for k in keys if k in d))" | tee -a "$OUT/summary.txt"
}

for round in 1 2; do  # numpy's road (W2's inputs made on the host, uploaded) and ember's (made on the device)
  w2 "new-$round" "" --runs cold,warm,warm
  EMBER_OPENCL_EARLY_DRIVER=0 w2 "early-driver-off-$round" "" --runs cold,warm,warm  # (driver_start off)
  [ -n "${BASE_SRC:-}" ] && w2 "base-$round" "$PWD/$BASE_SRC:" --runs cold,warm,warm
  w2 "ember-inputs-$round" "" --runs cold,warm,warm --inputs ember
  [ "${HEAD_START_RUN:-0}" = 1 ] && w2 "head-start-$round" "" --runs cold --head-start
done
# what the image's PoCL costs a GPU process: its ICD is beside NVIDIA's above (device numbering), so every
# open loads PoCL (and its LLVM) too; a machine with NVIDIA's ICD alone does not (rows nvidia-icd-only-*)
NV_LIB=${NV_LIB:-/usr/local/nvidia/lib64/libnvidia-opencl.so.1}
if [ "${ICD_ONLY_RUN:-1}" = 1 ] && [ -e "$NV_LIB" ]; then
  mkdir -p /tmp/ember-ocl-nvidia-only && echo "$NV_LIB" >/tmp/ember-ocl-nvidia-only/nvidia.icd
  for round in 1 2; do
    OCL_ICD_VENDORS=/tmp/ember-ocl-nvidia-only DEV_ONLY=opencl:0 w2 "nvidia-icd-only-$round" "" --runs cold,warm,warm
    w2 "both-icds-$round" "" --runs cold,warm,warm
  done
fi
# one build thread: programs load (warm) or build (cold) on it while the host queues the rest of the
# step, their launches waiting in order until the first read-back (EMBER_OPENCL_BUILD_THREADS=1)
if [ "${THREADS_RUN:-1}" = 1 ]; then
  for round in 1 2; do
    w2 "threads-1-$round" "" --runs cold,warm,warm --build-threads 1
    w2 "threads-1-ember-inputs-$round" "" --runs cold,warm,warm --build-threads 1 --inputs ember
  done
fi
[ "${PROCESSES_RUN:-1}" = 1 ] && w2 processes-4 "" --runs cold,warm --build-processes 4
[ "${PROCESSES_RUN:-1}" = 1 ] && w2 processes-4-ember-inputs "" --runs cold,warm --build-processes 4 --inputs ember
if [ "${BYTECODE_RUN:-1}" = 1 ]; then  # (last: their bytecode stays for every later run)
  for round in 1 2; do
    w2 "bytecode-$round" "" --runs cold,warm,warm --bytecode
    w2 "bytecode-ember-inputs-$round" "" --runs cold,warm,warm --bytecode --inputs ember
  done
fi

timeout 240 $PY -m benchmarks.gemm_generic --device "$dev" --size "${GEMM_SIZE:-4096}" >"$OUT/gemm-generic.txt" 2>&1
note "gemm_generic (specialised vs generic kernel, W2's GEMMs at ${GEMM_SIZE:-4096}): exit $?"
cat "$OUT/gemm-generic.txt" >>"$OUT/summary.txt"
timeout 240 $PY -m benchmarks W2 --device "$dev" --peers torch ${W2_ARGS:-} >"$OUT/w2-step.txt" 2>&1
note "W2 step, untuned (generic GEMMs), torch beside: exit $?"
tail -15 "$OUT/w2-step.txt" >>"$OUT/summary.txt"
