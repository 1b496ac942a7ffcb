#!/usr/bin/env bash
# temporary device script: do NVIDIA's sub-buffer releases crash with ember's view sizes (two 49 MiB views)?
source .ci/device-steps.sh
step probe 100 python3 plugins/opencl/scripts/sub_buffer_probe.py --views 2 --view-mib 49 --repeat 2
step probe 60 python3 plugins/opencl/scripts/sub_buffer_probe.py --views 16 --view-mib 12.25 --repeat 1
finish
