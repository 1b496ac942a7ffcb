#!/bin/bash
# ab.sh SCRIPT ARGS: run SCRIPT with the baseline sources, then with the worktree's, alternating twice
source /work/wt/ENV.sh w2over >/dev/null
NEW=$PYTHONPATH
BASE=$(echo $PYTHONPATH | sed "s#/work/wt/w2over/core/src#/tmp/w2over/base/core/src#")
for i in 1 2; do
  echo "== base"; PYTHONPATH=$BASE python "$@"
  echo "== new";  PYTHONPATH=$NEW python "$@"
done
