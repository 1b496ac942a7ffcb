#!/usr/bin/env bash
# device script: pool traces (opencl W3/W4 whole buffers, cuda W3 implicit), opencl memory, sub-buffer probes
source .ci/device-steps.sh
step trace 60 python3 -m benchmarks.pool_trace record W3 --device opencl:0 --gpu-sizes --steps 12 --out $OUT/w3_opencl.json
step trace 90 python3 -m benchmarks.pool_trace record W4 --device opencl:0 --gpu-sizes --steps 8 --out $OUT/w4_opencl.json
step trace 40 python3 -m benchmarks.pool_trace record W3 --device cuda:0 --gpu-sizes --steps 12 --out $OUT/w3_cuda.json
step oclmem 150 python3 -m benchmarks.memory W3 W4 --gpu-sizes --steps 20 --rounds 1 --strategies adaptive,static --device opencl:0
step subprobe 50 python3 -X faulthandler plugins/opencl/scripts/sub_buffer_probe.py --only other_commands,other_commands_in_flight --views 2 --view-mib 49
step viewlog 60 env EMBER_OPENCL_SUB_BUFFERS=1 python3 -X faulthandler plugins/opencl/scripts/view_log.py --log /tmp/view.log -- W3 --gpu-sizes --steps 20 --rounds 1 --strategies adaptive --device opencl:0
tail -c 30000 /tmp/view.log > $OUT/view-tail.txt 2>/dev/null; wc -l /tmp/view.log >> $OUT/view-tail.txt 2>/dev/null
finish
