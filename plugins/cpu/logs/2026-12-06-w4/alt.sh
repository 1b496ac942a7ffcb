#!/bin/bash
# alternate base and new trees: $1 rounds, env passed through
W=/work/wt/cpuw4
B=/tmp/cpuw4/base
source /work/venv/bin/activate
for r in $(seq 1 $1); do
  for t in base new; do
    if [ $t = base ]; then R=$B; else R=$W; fi
    echo -n "$t: "
    (cd $R && PYTHONPATH=$R:$R/core/src:$R/plugins/cpu/src:$W/fused/src python /tmp/cpuw4/ab.py 1 ${2:-8} | sed 's/round 0: //')
  done
done
