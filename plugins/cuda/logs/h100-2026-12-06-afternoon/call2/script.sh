#!/usr/bin/env bash
# temporary device script (not committed): cuda W3's host profile and the memory runs (issue 11/12)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
S=$(date +%s)
OUT=/tmp/setup STEPS=none CONFORMANCE=0 bash .ci/h200.sh > /dev/null 2>&1
python3 -m pip install -q --no-deps --no-build-isolation -e plugins/cuda > /dev/null 2>&1
T=$OUT/times.txt
nvidia-smi --query-gpu=name,driver_version --format=csv > $T
echo "setup $(( $(date +%s)-S )) s" >> $T
export PYTHONUNBUFFERED=1 OCL_ICD_VENDORS=/tmp/ember-ocl-vendors EMBER_CACHE_DIR=/tmp/ember-cache
export PYTHONPATH=/tmp/site:.
step() { local name=$1 lim=$2; shift 2; local t=$(date +%s); echo "### $*" >> $OUT/$name.txt; timeout $lim "$@" >> $OUT/$name.txt 2>&1; echo "$name rc=$? $(( $(date +%s)-t )) s" >> $T; }
step host 60 python3 -m benchmarks.host_calls W3 --device cuda:0 --sizes gpu --top 45 --sort tottime
step host 40 /tmp/site/bin/py-spy record -r 400 -f raw -o /tmp/spy-w3.txt -- python3 -m benchmarks.spin W3 --device cuda:0 --steps 300
step host 30 python3 -m benchmarks.spin --stacks /tmp/spy-w3.txt --under "timed (spin" --top 70
step memory 300 python3 -m benchmarks.memory W3 W4 --device cuda:0 --gpu-sizes --steps 12 --rounds 2 --strategies adaptive,static
echo "total $(( $(date +%s)-S )) s" >> $T
