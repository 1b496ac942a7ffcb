#!/usr/bin/env bash
# device script: NVIDIA's sub-buffer crash (arena-view probes; the crashing memory run logged); cuda jit/memory tests
# (view_log.py then wrapped Runtime._release_idle, before the view ledger; sub_buffer_probe.py's first six arena_* scenarios)
source .ci/device-steps.sh
step subprobe 150 python3 -X faulthandler plugins/opencl/scripts/sub_buffer_probe.py --only arena_in_order,arena_reverse,arena_largest_first,arena_finished_in_order,arena_thread,arena_remade
step viewlog 150 env EMBER_OPENCL_SUB_BUFFERS=1 python3 -X faulthandler plugins/opencl/scripts/view_log.py --log /tmp/view.log -- W3 W4 --gpu-sizes --steps 20 --rounds 1 --strategies adaptive,static --device opencl:0
tail -c 40000 /tmp/view.log > $OUT/view-tail.txt 2>/dev/null; wc -l /tmp/view.log >> $OUT/view-tail.txt 2>/dev/null
step cudatests 120 python3 -m pytest -q -p no:cacheprovider plugins/cuda/tests/test_cuda_jit.py plugins/cuda/tests/test_cuda_memory.py
finish
