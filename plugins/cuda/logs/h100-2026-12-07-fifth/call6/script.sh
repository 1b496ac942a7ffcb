#!/usr/bin/env bash
# device script: opencl on NVIDIA with sub-buffers (the ledger's release order) vs whole buffers, one call
source .ci/device-steps.sh
step ocltests 40 python3 -m pytest -q -p no:cacheprovider plugins/opencl/tests/test_sub_buffers.py plugins/opencl/tests/test_release_thread.py
step memsub 130 env EMBER_OPENCL_SUB_BUFFERS=1 python3 -X faulthandler -m benchmarks.memory W3 W4 --gpu-sizes --steps 20 --rounds 2 --strategies adaptive,static --device opencl:0
step memwhole 130 env EMBER_OPENCL_SUB_BUFFERS=0 python3 -X faulthandler -m benchmarks.memory W3 W4 --gpu-sizes --steps 20 --rounds 2 --strategies adaptive,static --device opencl:0
step w3sub 40 env EMBER_OPENCL_SUB_BUFFERS=1 python3 -m benchmarks W3 --device opencl:0 --peers torch
step w3whole 40 env EMBER_OPENCL_SUB_BUFFERS=0 python3 -m benchmarks W3 --device opencl:0 --peers torch
step ktsub 50 env EMBER_OPENCL_SUB_BUFFERS=1 python3 plugins/opencl/scripts/kernel_time.py W3 --device opencl:0 --sizes gpu --steps 5 --gaps 8
step ktwhole 50 env EMBER_OPENCL_SUB_BUFFERS=0 python3 plugins/opencl/scripts/kernel_time.py W3 --device opencl:0 --sizes gpu --steps 5 --gaps 8
finish
