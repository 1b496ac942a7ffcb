#!/usr/bin/env bash
# Not run by CI: the conformance suite (and, with BENCH=1, the benchmark runner) on the H200
# device machine's OpenCL and Vulkan devices, from the working tree. No network there, so the
# caller carries the wheels and the Vulkan loader (see shared/GPU-NOTES.md and the device README):
#   .whl: pyopencl, pytools, platformdirs, siphash24, wgpu 0.32.0, cffi, pycparser, rendercanvas
#   .gl:  libvulkan1 and the GL/EGL loaders (apt-get download)
# Usage, from the repository root:  STEPS="wgpu opencl" bash .ci/h200.sh
# STEPS=memory: benchmarks/memory.py --h200 (memory strategies on cuda, opencl and wgpu, within 8 minutes;
# MEMORY_ROUNDS, MEMORY_DEVICE_S (seconds per device) and MEMORY_ARGS, e.g. "--devices cuda:0", narrow it).
# STEPS=w6: benchmarks/w6_sweep.py, W6 under each backend's grid-stride cap (W6_CUDA, W6_OPENCL, W6_WGPU
# give the values) on cuda, opencl and wgpu, into w6-sweep.txt (about 3 minutes); W6_PROFILE=1 adds a
# cProfile of synchronized W6 steps on each (w6-profile.txt).
# STEPS=steps: the training steps on cuda, opencl and wgpu, into steps.txt (about 9 minutes): opencl's conv/pool
# kernel tests, GPU time per kernel of W3 (plugins/opencl/scripts/kernel_time.py, with and without the native
# weight gradient) and its conv tilings (conv_time.py); wgpu's submits per step and their timing
# (plugins/wgpu/scripts/step_counts.py); the tests of cuda's small sums and wgpu's pool, weight and cross-entropy
# gradients and trusted modules on NVIDIA, wgpu's device time per kernel of W3 (scripts/kernel_time.py) and its
# weight gradient's tilings (scripts/wgrad_bench.py); then the runner's W2-W4 on each backend beside torch (W5 on
# wgpu; W3 once more with EMBER_WGPU_NATIVE_WGRAD=0).
# STEPS=jit: em.jit's native replays on the NVIDIA devices of JIT_BACKENDS (default "opencl wgpu"; add cuda):
# the plugins' jit tests, the conformance suite's jit cases, then W1 and W3 (JIT_WORKLOADS) with the native
# replay (EMBER_JIT_NATIVE=1) and with the step list (=0), peers JIT_PEERS (default none), into jit.txt.
# STEPS=probe: plugins/wgpu/scripts/w6_probe.py, the fused W6 WGSL kernel beside variants of its
# source (which piece costs bandwidth), into w6-probe.txt.
# STEPS=w6step: plugins/wgpu/scripts/w6_step.py on the NVIDIA Vulkan adapter (W6 per synchronized step
# for each recorder/sync mode, the host's us per small step, the kernel alone per workgroup count, the
# wgpu-native calls per step), then the runner's W6 protocol under W6_STEP_GROUPS (MAX_GROUPS values,
# default 4096,16384,65535) via benchmarks/w6_sweep.py; into w6-step.txt (about 2 minutes).
# The suite runs once per EMBER_FUSION value in FUSIONS (default "1 0": fused, then unfused), in
# SHARDS parallel processes when SHARDS > 1 (--ember-shard); PYTEST_ARGS (unsharded runs) selects
# cases, e.g. PYTEST_ARGS="-k nextafter"; PYTEST_K is one -k expression that may hold spaces ("take or gather").
# ONNX=1 runs ember.onnx's tests on each backend's NVIDIA device (node tests, import, export, LoRA;
# with ONNX_MODELS=FOLDER of files built by core/tests/onnx_models.py also the real architectures;
# ONNX_TESTS="" leaves the four out, ONNX_TESTS="FILES" runs those instead);
# CONFORMANCE=0 leaves the suite out.
# Writes at most 8 files to $OUT: summary.txt, env.txt, <backend>-conformance-f<0|1>.log, onnx-<backend>.log,
# <backend>-report.md (REPORT=1), bench-<backend>.txt (BENCH=1), start-opencl.txt (START=1: cold and
# warm time to the first W2 result). Each step has its own time limit (CONFORMANCE_S, default 420 s).
set -u
OUT=${OUT:-/tmp/ember-h200}
STEPS=${STEPS:-wgpu opencl}
CONFORMANCE_S=${CONFORMANCE_S:-420}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} EMBER_CACHE_DIR=${EMBER_CACHE_DIR:-/tmp/ember-cache}
PY=${PY:-python3}
note() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt"; }

# -- carried pieces: wheels, the Vulkan loader, NVIDIA's OpenCL ICD beside the image's PoCL ---------
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

# -- ember from the working tree ------------------------------------------------------------------
$PY -m pip install -q --no-deps --no-build-isolation -e core -e plugins/cpu -e plugins/opencl -e plugins/wgpu \
  -e conformance >>"$OUT/env.txt" 2>&1 || note "pip install -e failed: see env.txt"
{
  echo "== git"; git log -1 --format='%H %cd' 2>/dev/null || echo "(no git)"
  echo "== nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  echo "== versions"; $PY -c "import sys, numpy, pyopencl, wgpu; print(sys.version); print('numpy', numpy.__version__, 'pyopencl', pyopencl.VERSION_TEXT, 'wgpu', wgpu.__version__)" 2>&1
  echo "== ember devices"; $PY -m ember.cli devices 2>&1
} >>"$OUT/env.txt"

pick() {  # the index of the NVIDIA device of one backend
  $PY - "$1" <<'EOF'
import sys
if sys.argv[1] == "opencl":
    from ember_opencl.runtime import device_list
    names = [f"{p.name} {d.name}" for p, d in device_list()]
else:
    from ember_wgpu.adapters import adapters
    names = [f"{a.info.get('device', '')} {a.info.get('backend_type', '')}" for a in adapters()]
for i, name in enumerate(names):
    if "NVIDIA" in name.upper() and ("Vulkan" in name or sys.argv[1] == "opencl"):
        print(i)
        break
else:
    print(-1)
EOF
}

for backend in $STEPS; do
  if [ "$backend" = memory ]; then  # benchmarks/memory.py: W3, W4 x pool strategies on cuda, opencl, wgpu, beside torch
    $PY -m pip install -q --no-deps --no-build-isolation -e plugins/cuda >>"$OUT/env.txt" 2>&1
    timeout "${MEMORY_S:-480}" $PY -m benchmarks.memory --h200 --out "$OUT" --steps 10 --rounds ${MEMORY_ROUNDS:-2} --device-limit ${MEMORY_DEVICE_S:-140} ${MEMORY_ARGS:-} \
      >>"$OUT/memory-log.txt" 2>&1
    note "memory: exit $? (memory.md, memory-<backend>.json, memory-log.txt)"
    continue
  fi
  if [ "$backend" = w6 ]; then  # benchmarks/w6_sweep.py: W6 under each backend's grid-stride cap
    $PY -m pip install -q --no-deps --no-build-isolation -e plugins/cuda >>"$OUT/env.txt" 2>&1
    ocl=$(pick opencl); vk=$(pick wgpu)
    { timeout 150 $PY -m benchmarks.w6_sweep --device cuda:0 --attr ember_cuda.fusion:WAVES --values ${W6_CUDA:-1,2,4,8,16,64}
      [ "$ocl" -ge 0 ] && timeout 150 $PY -m benchmarks.w6_sweep --device "opencl:$ocl" \
        --attr ember_opencl.runtime:GROUPS_PER_CU --values ${W6_OPENCL:-8,16,32,64,128,512}
      [ "$vk" -ge 0 ] && EMBER_WGPU_ADAPTER=$vk timeout 150 $PY -m benchmarks.w6_sweep --device "wgpu:$vk" \
        --attr ember_wgpu.kernels.elementwise:MAX_GROUPS --values ${W6_WGPU:-1024,4096,8192,16384,32768,65535}
    } >"$OUT/w6-sweep.txt" 2>&1
    note "w6 sweep: exit $? (w6-sweep.txt)"
    if [ -n "${W6_PROFILE:-}" ]; then  # where the host's time per synchronized step goes
      { timeout 100 $PY -m benchmarks.w6_sweep --device cuda:0 --profile --iters 200
        [ "$ocl" -ge 0 ] && timeout 100 $PY -m benchmarks.w6_sweep --device "opencl:$ocl" --profile --iters 200
        [ "$vk" -ge 0 ] && EMBER_WGPU_ADAPTER=$vk timeout 100 $PY -m benchmarks.w6_sweep --device "wgpu:$vk" --profile --iters 200
      } >"$OUT/w6-profile.txt" 2>&1
      note "w6 profile: exit $? (w6-profile.txt)"
    fi
    continue
  fi
  if [ "$backend" = w6step ]; then  # plugins/wgpu/scripts/w6_step.py: W6 step, host calls, kernel alone on wgpu
    vk=$(pick wgpu)
    if [ "$vk" -lt 0 ]; then note "w6step: no NVIDIA Vulkan adapter (see env.txt)"; continue; fi
    { EMBER_WGPU_ADAPTER=$vk timeout 200 $PY plugins/wgpu/scripts/w6_step.py --device "wgpu:$vk" ${W6_STEP_ARGS:-}
      EMBER_WGPU_ADAPTER=$vk timeout 150 $PY -m benchmarks.w6_sweep --device "wgpu:$vk" \
        --attr ember_wgpu.kernels.elementwise:MAX_GROUPS --values ${W6_STEP_GROUPS:-4096,16384,65535}
    } >"$OUT/w6-step.txt" 2>&1
    note "w6step: exit $? (w6-step.txt)"
    continue
  fi
  if [ "$backend" = steps ]; then  # the training steps' kernels and host work on the three GPU backends
    $PY -m pip install -q --no-deps --no-build-isolation -e plugins/cuda >>"$OUT/env.txt" 2>&1
    ocl=$(pick opencl); vk=$(pick wgpu)
    {
      echo "== opencl:$ocl conv/pool kernels (tests, per-kernel GPU time, conv tilings)"
      [ "$ocl" -ge 0 ] && EMBER_OPENCL_DEVICE=$ocl timeout 120 $PY -m pytest -q -p no:cacheprovider plugins/opencl/tests/test_conv_kernels.py
      [ "$ocl" -ge 0 ] && timeout 60 $PY plugins/opencl/scripts/kernel_time.py W3 --device "opencl:$ocl" --sizes gpu --steps 10
      [ "$ocl" -ge 0 ] && EMBER_OPENCL_NATIVE_WGRAD=0 timeout 60 $PY plugins/opencl/scripts/kernel_time.py W3 --device "opencl:$ocl" --sizes gpu --steps 10
      [ "$ocl" -ge 0 ] && timeout 120 $PY plugins/opencl/scripts/conv_time.py --device "opencl:$ocl" --batch 512 --reps 10
      echo "== new kernels' tests on the NVIDIA devices (cuda small sums; wgpu pool gradient, weight gradient, CE gradient, trusted modules)"
      timeout 90 $PY -m pytest -q -p no:cacheprovider plugins/cuda/tests/test_cuda_fused_reduce.py plugins/cuda/tests/test_cuda_conv.py
      [ "$vk" -ge 0 ] && EMBER_WGPU_DEVICE=$vk timeout 120 $PY -m pytest -q -p no:cacheprovider plugins/wgpu/tests/test_max_pool_grad.py \
        plugins/wgpu/tests/test_conv_wgrad.py plugins/wgpu/tests/test_cross_entropy_backward.py plugins/wgpu/tests/test_runtime.py
      echo "== wgpu:$vk device time per kernel (W3), the native weight gradient's tilings"
      [ "$vk" -ge 0 ] && EMBER_WGPU_ADAPTER=$vk timeout 60 $PY plugins/wgpu/scripts/kernel_time.py W3 --device "wgpu:$vk" --sizes gpu --steps 2
      [ "$vk" -ge 0 ] && timeout 90 $PY plugins/wgpu/scripts/wgrad_bench.py --device "wgpu:$vk"
      echo "== wgpu:$vk submits within a step"
      [ "$vk" -ge 0 ] && EMBER_WGPU_ADAPTER=$vk timeout 120 $PY plugins/wgpu/scripts/step_counts.py W2 W3 W4 --device "wgpu:$vk" --sizes gpu --warmup 4 --steps 3
      [ "$vk" -ge 0 ] && EMBER_WGPU_ADAPTER=$vk timeout 150 $PY plugins/wgpu/scripts/step_counts.py W3 W2 --device "wgpu:$vk" --sizes gpu --time 0,16,32,64,32:0 --rounds 3 --steps 4
      echo "== the runner on each backend"
      timeout 120 $PY -m benchmarks W2 W3 W4 --device cuda:0 --peers torch
      [ "$ocl" -ge 0 ] && timeout 150 $PY -m benchmarks W2 W3 W4 --device "opencl:$ocl" --peers torch
      [ "$vk" -ge 0 ] && EMBER_WGPU_ADAPTER=$vk timeout 180 $PY -m benchmarks W2 W3 W4 W5 --device "wgpu:$vk" --peers torch
      [ "$vk" -ge 0 ] && EMBER_WGPU_ADAPTER=$vk EMBER_WGPU_NATIVE_WGRAD=0 timeout 60 $PY -m benchmarks W3 --device "wgpu:$vk"
    } >"$OUT/steps.txt" 2>&1
    note "steps: exit $? (steps.txt)"
    continue
  fi
  if [ "$backend" = jit ]; then  # em.jit: the native replays (OpenCL enqueue list, WebGPU command buffer) vs step lists
    $PY -m pip install -q --no-deps --no-build-isolation -e plugins/cuda >>"$OUT/env.txt" 2>&1
    {
      for kind in ${JIT_BACKENDS:-opencl wgpu}; do
        if [ "$kind" = cuda ]; then idx=0; else idx=$(pick "$kind"); fi
        if [ "$idx" -lt 0 ]; then echo "== $kind: no NVIDIA device"; continue; fi
        echo "== $kind:$idx: jit tests"
        case $kind in
          opencl) EMBER_OPENCL_DEVICE=$idx timeout 200 $PY -m pytest plugins/opencl/tests/test_jit_opencl.py -q -p no:cacheprovider ;;
          wgpu) EMBER_WGPU_DEVICE=$idx timeout 200 $PY -m pytest plugins/wgpu/tests/test_jit_wgpu.py -q -p no:cacheprovider ;;
        esac
        timeout 300 $PY -m pytest --pyargs ember_conformance --ember-device="$kind:$idx" -q -p no:cacheprovider -k jit
        for native in 1 0; do
          echo "== $kind:$idx: EMBER_JIT_NATIVE=$native"
          EMBER_JIT_NATIVE=$native timeout "${JIT_BENCH_S:-240}" $PY -m benchmarks ${JIT_WORKLOADS:-W1 W3} \
            --device "$kind:$idx" --peers "${JIT_PEERS:-none}"
        done
      done
    } >"$OUT/jit.txt" 2>&1
    note "jit: exit $? (jit.txt)"
    continue
  fi
  if [ "$backend" = probe ]; then  # plugins/wgpu/scripts/w6_probe.py: the fused W6 WGSL kernel beside variants of its text
    vk=$(pick wgpu)
    EMBER_WGPU_ADAPTER=$vk timeout 150 $PY plugins/wgpu/scripts/w6_probe.py --device "wgpu:$vk" >"$OUT/w6-probe.txt" 2>&1
    note "w6 probe: exit $? (w6-probe.txt)"
    continue
  fi
  idx=$(pick "$backend")
  if [ "$idx" -lt 0 ]; then note "$backend: no NVIDIA device found (see env.txt)"; continue; fi
  dev="$backend:$idx"
  fusions=${FUSIONS:-1 0}
  if [ "${CONFORMANCE:-1}" = 0 ]; then fusions=""; fi
  for fusion in $fusions; do  # the suite with the lazy layer on (fused regions) and off
    note "$backend: conformance on $dev, EMBER_FUSION=$fusion (limit ${CONFORMANCE_S}s)"
    start=$SECONDS
    report=()
    if [ -n "${REPORT:-}" ]; then report=(--ember-report="$OUT/$backend-report.md"); fi
    log="$OUT/$backend-conformance-f$fusion.log"
    shards=${SHARDS:-1}
    if [ "$shards" -gt 1 ]; then  # N processes, N kernel compilers: each runs its slice of the cases
      for ((i = 0; i < shards; i++)); do
        EMBER_FUSION=$fusion timeout "$CONFORMANCE_S" $PY -m pytest --pyargs ember_conformance --ember-device="$dev" -q -rs \
          -p no:cacheprovider --tb=short --ember-shard="$i/$shards" >"$OUT/shard-$i.log" 2>&1 &
      done
      wait
      : >"$log"
      for ((i = 0; i < shards; i++)); do
        note "$backend: EMBER_FUSION=$fusion shard $i/$shards: $(tail -n 1 "$OUT/shard-$i.log")"
        { echo "===== shard $i/$shards"; cat "$OUT/shard-$i.log"; } >>"$log"
        rm "$OUT/shard-$i.log"  # the device tool brings back at most 8 files
      done
      note "$backend: EMBER_FUSION=$fusion, $shards shards done after $((SECONDS - start)) s"
    else
      EMBER_FUSION=$fusion timeout "$CONFORMANCE_S" $PY -m pytest --pyargs ember_conformance --ember-device="$dev" -q -rs \
        -p no:cacheprovider --tb=short "${report[@]}" ${PYTEST_ARGS:-} ${PYTEST_K:+-k "$PYTEST_K"} >"$log" 2>&1
      note "$backend: exit $? after $((SECONDS - start)) s (124: stopped at the limit); $(tail -n 1 "$log")"
    fi
  done
  if [ -n "${START:-}" ] && [ "$backend" = opencl ]; then  # cold and warm time to the first W2 result
    timeout 120 $PY plugins/opencl/scripts/bench.py --device "$dev" --gpu --only none --start >"$OUT/start-$backend.txt" 2>&1
    note "$backend: first W2 result: exit $?; $(grep -i 'first' "$OUT/start-$backend.txt" | tr '\n' ' ')"
  fi
  if [ -n "${ONNX:-}" ]; then  # onnx and protobuf come as carried wheels; onnxruntime is on the machine
    start=$SECONDS
    models=()
    if [ -n "${ONNX_MODELS:-}" ]; then models=(core/tests/test_onnx_models.py); fi
    EMBER_ONNX_DEVICES=$dev EMBER_ONNX_MODELS_PREBUILT=${ONNX_MODELS:-} timeout "${ONNX_S:-300}" $PY -m pytest \
      ${ONNX_TESTS-core/tests/test_onnx_node.py core/tests/test_onnx_import.py core/tests/test_onnx_export.py \
      core/tests/test_onnx_lora.py} "${models[@]}" -q -rs -p no:cacheprovider --tb=short >"$OUT/onnx-$backend.log" 2>&1
    note "$backend: onnx on $dev: exit $? after $((SECONDS - start)) s; $(tail -n 1 "$OUT/onnx-$backend.log")"
  fi
  if [ -n "${BENCH:-}" ]; then
    timeout "${BENCH_S:-240}" $PY -m benchmarks ${BENCH_WORKLOADS:-W1 W2 W6} --device "$dev" --peers torch >"$OUT/bench-$backend.txt" 2>&1
    note "$backend: benchmarks exit $?"
  fi
done
note "done"
