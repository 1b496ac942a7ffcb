#!/usr/bin/env bash
# temporary device script: opencl's unmeasured changes (uploads that do not drain the queue, fill constants,
# K-sliced tuning, the attention backward given the forward's output), cuda W3's pool trace with chunked
# columns, sub-buffer release protocols, build options' cost, wgpu's runner; steps in priority order
source .ci/device-steps.sh
KT=plugins/opencl/scripts/kernel_time.py
step runner 120 python3 -m benchmarks W2 W4 --device opencl:0 --peers torch
step ktime 40 python3 $KT W4 --device opencl:0 --sizes gpu --steps 5 --ops matmul --gaps 10
step cudamem 30 env EMBER_CUDA_COLUMNS_BYTES=33554432 python3 -m benchmarks.pool_trace record W3 --device cuda:0 --gpu-sizes --steps 10 --out $OUT/trace-cuda-w3-32m.json
step cudamem 45 env EMBER_CUDA_COLUMNS_BYTES=67108864 python3 -X faulthandler -m benchmarks.memory W3 --gpu-sizes --steps 30 --rounds 1 --strategies adaptive,static --device cuda:0
step misc 40 python3 plugins/opencl/scripts/sub_buffer_probe.py --repeat 2
step buildopt 100 env CUDA_CACHE_DISABLE=1 EMBER_CACHE_DIR=/tmp/cold-bo python3 plugins/opencl/scripts/build_options_time.py --sample 40 --variants ",-cl-nv-opt-level=0,-cl-nv-opt-level 0,-cl-opt-disable" -- --pyargs ember_conformance --ember-device=opencl:0 -k "reduction or movement" -q -p no:cacheprovider
step wgpu 70 python3 -m benchmarks W2 W4 --device wgpu:0 --peers torch
step ktime 40 env EMBER_OPENCL_FILL=0 python3 $KT W4 --device opencl:0 --sizes gpu --steps 5 --gaps 10
step wgpu 35 python3 plugins/wgpu/scripts/kernel_time.py W2 --device wgpu:0 --sizes gpu --steps 3
step misc 30 python3 $KT W2 --device opencl:0 --sizes gpu --steps 5
step misc 30 env EMBER_OPENCL_EARLY_DRIVER=0 python3 -c "import sys, runpy; import ember_opencl.elementwise as e; e.SHARED_STRIDED = False; print('SHARED_STRIDED', e.SHARED_STRIDED); sys.argv = ['$KT', 'W2', '--device', 'opencl:0', '--sizes', 'gpu', '--steps', '5']; sys.path.insert(0, 'plugins/opencl/scripts'); runpy.run_path('$KT', run_name='__main__')"
finish
