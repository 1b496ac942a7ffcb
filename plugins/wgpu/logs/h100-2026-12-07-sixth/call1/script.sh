#!/usr/bin/env bash
# device script: wgpu's implicit-GEMM conv (images as columns, tap-major rows) on NVIDIA; wgpu W2-W5 where the time goes; opencl exit hook
source .ci/device-steps.sh
step tests 60 python3 -m pytest -q -p no:cacheprovider plugins/wgpu/tests/test_conv_igemm.py plugins/wgpu/tests/test_conv_wgrad.py
step runner 70 python3 -m benchmarks W3 --device wgpu:0 --peers torch
step wk 50 python3 plugins/wgpu/scripts/kernel_time.py W3 --device wgpu:0 --sizes gpu --steps 3 --by-grid
step runner 200 python3 -m benchmarks W2 W4 W5 --device wgpu:0 --peers torch
for r in 1 2 3; do step spin 30 python3 -X faulthandler -m benchmarks.spin W3 --device opencl:0 --steps 300; done
step wk 60 python3 plugins/wgpu/scripts/kernel_time.py W2 --device wgpu:0 --sizes gpu --steps 3 --by-grid
finish
