#!/usr/bin/env bash
# Not run by CI: ember-cuda's whole check-and-measure on a GPU machine in one call, from the
# working tree. The H200 device machine has CuPy 14 (CUDA 13), PyTorch and pytest installed and
# no network, so ember is installed from source without dependencies; scikit-learn (for the
# digits data) comes as carried wheels in .whl (see the device README).
# Usage, from the repository root:  bash plugins/cuda/scripts/h200.sh
#   STEPS="tests conformance train profile attention bench w6 onnx" (default: tests conformance train bench w6),
#   CONFORMANCE_S (default 420, per fusion mode), SHARDS (default 6), FUSION_MODES (default "1 0": the
#   conformance suite once with EMBER_FUSION=1, the lazy layer's fused kernels, and once eager),
#   BENCH_WORKLOADS (default "W1 W2 W3 W4 W5 W6"), WARM=1 to keep CuPy's kernel cache between calls,
#   CONFORMANCE_ARGS (more pytest arguments, e.g. --ember-dtypes=complex64,complex128).
# Writes to $OUT: summary.txt, env.txt, tests.log, conformance.log (every shard of every fusion
# mode), train.log, profile.txt, attention.txt, bench.txt, bench.json, w6.txt (W6 fused and unfused), onnx.log.
set -u
OUT=${OUT:-/tmp/ember-cuda-h200}
STEPS=${STEPS:-tests conformance train bench w6}
CONFORMANCE_S=${CONFORMANCE_S:-420}
PY=${PY:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 EMBER_CACHE_DIR=${EMBER_CACHE_DIR:-/tmp/ember-cache}
if [ -z "${WARM:-}" ]; then
  rm -rf "$EMBER_CACHE_DIR/cuda" ~/.cupy/kernel_cache  # a cold kernel cache: every kernel compiles in this run
fi
note() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt"; }

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then  # carried wheels (scikit-learn for `ember train digits`)
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >"$OUT/env.txt" 2>&1 \
    && export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
$PY -m pip install -q --no-deps --no-build-isolation -e core -e plugins/cpu -e plugins/cuda -e conformance -e linalg -e signal \
  >>"$OUT/env.txt" 2>&1 || note "pip install -e failed: see env.txt"
{
  echo "== git"; git log -1 --format='%H %cd' 2>/dev/null || echo "(no git)"
  echo "== nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
  echo "== versions"; $PY -c "import sys, numpy, cupy; print(sys.version); print('numpy', numpy.__version__, 'cupy', cupy.__version__, 'cuda runtime', cupy.cuda.runtime.runtimeGetVersion())" 2>&1
  $PY -c "import torch; print('torch', torch.__version__, torch.version.cuda)" 2>&1
  echo "== ember doctor"; $PY -m ember.cli doctor 2>&1
  echo "== ember devices"; $PY -m ember.cli devices 2>&1
} >>"$OUT/env.txt"

for step in $STEPS; do
  start=$SECONDS
  case $step in
  tests)
    timeout 300 $PY -m pytest plugins/cuda/tests -q -rs -p no:cacheprovider --tb=short >"$OUT/tests.log" 2>&1
    note "tests: exit $? after $((SECONDS - start)) s; $(tail -n 1 "$OUT/tests.log")" ;;
  conformance)
    # SHARDS processes share the GPU and CuPy's kernel cache, each compiling its slice's kernels;
    # the whole suite runs once per fusion mode (EMBER_FUSION=1: elementwise regions fused)
    shards=${SHARDS:-6}
    for fusion in ${FUSION_MODES:-1 0}; do
      for ((i = 0; i < shards; i++)); do
        EMBER_FUSION=$fusion timeout "$CONFORMANCE_S" $PY -m pytest --pyargs ember_conformance --ember-device=cuda:0 -q \
          -rs -p no:cacheprovider --tb=short --ember-shard="$i/$shards" ${CONFORMANCE_ARGS:-} >"$OUT/conformance-$i.log" 2>&1 &
      done
      wait
      for ((i = 0; i < shards; i++)); do
        note "conformance EMBER_FUSION=$fusion shard $i/$shards: $(tail -n 1 "$OUT/conformance-$i.log")"
        { echo "===== EMBER_FUSION=$fusion shard $i/$shards"; cat "$OUT/conformance-$i.log"; } >>"$OUT/conformance.log"
        rm "$OUT/conformance-$i.log"  # the device tool brings back at most 8 files
      done
    done
    note "conformance: all shards of EMBER_FUSION=${FUSION_MODES:-1 0} done after $((SECONDS - start)) s" ;;
  train)
    timeout 300 $PY -m ember.cli train digits --device cuda >"$OUT/train.log" 2>&1
    note "train digits --device cuda: exit $? after $((SECONDS - start)) s; $(grep -i accuracy "$OUT/train.log" | tail -n 1)" ;;
  profile)
    timeout 300 $PY plugins/cuda/scripts/profile_cuda.py ${PROFILE_WORKLOADS:-} >"$OUT/profile.txt" 2>&1
    note "profile: exit $? after $((SECONDS - start)) s" ;;
  attention)
    { timeout 120 $PY plugins/cuda/scripts/attention_bench.py; timeout 120 $PY plugins/cuda/scripts/attention_bench.py --causal; } \
      >"$OUT/attention.txt" 2>&1
    note "attention fwd+bwd at W4's shape: exit $? after $((SECONDS - start)) s; $(grep -c ' ms ' "$OUT/attention.txt") timings" ;;
  bench)
    timeout 420 $PY -m benchmarks ${BENCH_WORKLOADS:-W1 W2 W3 W4 W5 W6} --device cuda:0 --peers torch,cupy \
      --json "$OUT/bench.json" >"$OUT/bench.txt" 2>&1
    note "benchmarks: exit $? after $((SECONDS - start)) s" ;;
  w6)
    # the elementwise chain fused (one generated kernel, float4) and eager (one kernel per op)
    for fusion in 1 0; do
      { echo "===== W6 EMBER_FUSION=$fusion"
        EMBER_FUSION=$fusion timeout 180 $PY -m benchmarks W6 --device cuda:0 --peers torch,cupy; } >>"$OUT/w6.txt" 2>&1
      note "w6 EMBER_FUSION=$fusion: exit $?; $(grep 'ember cuda:0' "$OUT/w6.txt" | tail -n 1 | tr -s ' ')"
    done
    note "w6: done after $((SECONDS - start)) s" ;;
  onnx)
    # the official node tests, import/export round trips and LoRA on imported models, on cuda:0
    # (onnx and protobuf come as carried wheels; onnxruntime is on the machine)
    # ONNX_MODELS=FOLDER (files built by core/tests/onnx_models.py) adds the real architectures;
    # ONNX_TESTS="" runs only those (ONNX_TESTS names other test files in place of the four)
    models=()
    if [ -n "${ONNX_MODELS:-}" ]; then models=(core/tests/test_onnx_models.py); fi
    EMBER_ONNX_DEVICES=cuda:0 EMBER_ONNX_MODELS_PREBUILT=${ONNX_MODELS:-} timeout "${ONNX_S:-240}" $PY -m pytest \
      ${ONNX_TESTS-core/tests/test_onnx_node.py core/tests/test_onnx_import.py core/tests/test_onnx_export.py \
      core/tests/test_onnx_lora.py} "${models[@]}" -q -rs -p no:cacheprovider --tb=short >"$OUT/onnx.log" 2>&1
    note "onnx on cuda:0: exit $? after $((SECONDS - start)) s; $(tail -n 1 "$OUT/onnx.log")" ;;
  *) note "unknown step $step" ;;
  esac
done
note "done"
