#!/usr/bin/env bash
# eleventh session (kept by the twelfth), last call (the budget's rest): the tenth's max_pool gradient kernels on a GPU, and the
# conformance suite's pool/memory/leak cases on each GPU backend
source .ci/device-steps.sh
step check 60 python3 -m pytest -q -p no:cacheprovider plugins/cuda/tests/test_cuda_conv.py -k "pool"
step check 40 python3 -m pytest -q -p no:cacheprovider plugins/opencl/tests/test_conv_kernels.py -k max_pool
step check 40 python3 -m pytest -q -p no:cacheprovider plugins/wgpu/tests/test_max_pool_grad.py plugins/wgpu/tests/test_timed_recorder.py
for d in cuda:0 opencl:0 wgpu:0; do
  step check 45 python3 -m pytest -q -p no:cacheprovider --pyargs ember_conformance --ember-device=$d -k "pool or leak"
done
step prof 40 python3 plugins/wgpu/scripts/kernel_time.py W3 --device wgpu:0 --sizes gpu --steps 5
finish
