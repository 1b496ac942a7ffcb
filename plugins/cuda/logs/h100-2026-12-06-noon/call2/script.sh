#!/usr/bin/env bash
# temporary device script (not committed)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=$(date +%s)
OUT=/tmp/setup STEPS=none CONFORMANCE=0 bash .ci/h200.sh > /dev/null 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/cuda > /dev/null 2>&1
T=$OUT/times.txt
nvidia-smi --query-gpu=name,driver_version --format=csv > $T
echo "setup $(( $(date +%s)-S )) s" >> $T
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1 OCL_ICD_VENDORS=/tmp/ember-ocl-vendors EMBER_CACHE_DIR=/tmp/ember-cache
step() { local name=$1 lim=$2; shift 2; local t=$(date +%s); echo "### $*" >> $OUT/$name.txt; timeout $lim "$@" >> $OUT/$name.txt 2>&1; echo "$name rc=$? $(( $(date +%s)-t )) s" >> $T; }
SPY=/tmp/site/bin/py-spy
step spy 90 $SPY record -r 2000 -f raw -o $OUT/spy-w3.txt -- python3 -m benchmarks.spin W3 --device cuda:0 --steps 400
step spy 30 python3 -m benchmarks.spin --stacks $OUT/spy-w3.txt --under "timed (spin" --top 70
step spy 90 $SPY record -r 2000 -f raw -o /tmp/spy-w3-ocl.txt -- python3 -m benchmarks.spin W3 --device opencl:0 --steps 300
step spy 30 python3 -m benchmarks.spin --stacks /tmp/spy-w3-ocl.txt --under "timed (spin" --top 50
step host 40 python3 -m benchmarks.host_calls W3 --device cuda:0 --sizes gpu --top 70 --sort tottime
step ocl-kernels 90 python3 plugins/opencl/scripts/kernel_time.py W3 --device opencl:0 --sizes gpu --steps 10
step ocl-kernels 90 python3 plugins/opencl/scripts/kernel_time.py W3 --device opencl:0 --sizes gpu --steps 10 --jit
step ocl-kernels 120 python3 plugins/opencl/scripts/kernel_time.py W4 --device opencl:0 --sizes gpu --steps 5
python3 -c "import ember as em; print(em.Device('wgpu:0'), em.Device('wgpu:0').backend)" >> $OUT/wgpu.txt 2>&1
step wgpu 150 python3 -m pytest -q --pyargs ember_conformance --ember-device=wgpu:0 -k "in_place" -p no:cacheprovider
step wgpu 60 python3 -m pytest -q plugins/wgpu/tests/test_in_place_update.py --ember-device=wgpu:0 -p no:cacheprovider
step wgpu 150 python3 -m benchmarks W2 W3 W4 W5 --device wgpu:0 --peers torch
echo "total $(( $(date +%s)-S )) s" >> $T
