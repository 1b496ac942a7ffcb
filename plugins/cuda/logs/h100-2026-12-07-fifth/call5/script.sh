#!/usr/bin/env bash
# device script: opencl with sub-buffers on NVIDIA, released by the ledger's rule (the runs that crashed)
# (the ledger's first form: views released at the first idle point the rule allowed, as committed)
source .ci/device-steps.sh
step ocltests 60 python3 -m pytest -q -p no:cacheprovider plugins/opencl/tests/test_sub_buffers.py plugins/opencl/tests/test_release_thread.py
step oclmem 150 python3 -X faulthandler -m benchmarks.memory W3 W4 --gpu-sizes --steps 20 --rounds 1 --strategies adaptive,static --device opencl:0
step runner 150 python3 -X faulthandler -m benchmarks W3 W4 --device opencl:0 --peers torch
step oclmem2 60 python3 -X faulthandler -m benchmarks.memory W3 --gpu-sizes --steps 30 --rounds 1 --strategies adaptive,static,exclusive --device opencl:0
step leak 120 python3 -m pytest -q -x -p no:cacheprovider --pyargs ember_conformance --ember-device=opencl:0 -k "leak or memory"
finish
