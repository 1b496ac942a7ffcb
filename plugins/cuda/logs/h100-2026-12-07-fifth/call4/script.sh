#!/usr/bin/env bash
# device script: what in ember's arena views makes NVIDIA's release crash
source .ci/device-steps.sh
step subprobe 200 python3 -X faulthandler plugins/opencl/scripts/sub_buffer_probe.py --repeat 2 --only arena_in_order,arena_reverse,arena_oldest_then_use,arena_disjoint_in_order,arena_no_duplicate_in_order,arena_unused_in_order,arena_lifo_half_then_use,arena_two_oldest_only,three_duplicate,three_inside,three_apart
finish
