#!/usr/bin/env bash
# temporary device script: is cuda W3's chunk cost the cuBLAS calls blocking (a workspace per call)? the runner
# at the 32 MiB cap with CUBLAS_WORKSPACE_CONFIG set and not; py-spy at a gentler rate, capped and whole
source .ci/device-steps.sh
CAP="env EMBER_CUDA_COLUMNS_BYTES=33554432"
SPY="/tmp/site/bin/py-spy record -r 200 -f raw --idle"
step cudaw3 25 $CAP CUBLAS_WORKSPACE_CONFIG=:4096:8 python3 -m benchmarks W3 --device cuda:0
step cudaw3 25 $CAP python3 -m benchmarks W3 --device cuda:0
step spy 25 $CAP $SPY -o $OUT/w3-32m.txt -- python3 -m benchmarks.spin W3 --device cuda:0 --sizes gpu --steps 1500
step spy 25 $SPY -o $OUT/w3-whole.txt -- python3 -m benchmarks.spin W3 --device cuda:0 --sizes gpu --steps 1500
finish
