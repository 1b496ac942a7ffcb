#!/usr/bin/env bash
# device script: wgpu W3 eager's slow mode, step by step (main-thread CPU and what each step asked of runtime
# and pool), and cProfile's calls per step beside this VM's lavapipe (4,105 calls/step at cpu sizes)
source .ci/device-steps.sh
SC=plugins/wgpu/scripts/step_counts.py
step trace 60 python3 $SC W3 --sizes gpu --warmup 5 --trace 40
step prof 60 python3 $SC W3 --sizes gpu --warmup 8 --cprofile 20
step prof 60 python3 $SC W3 --sizes cpu --warmup 8 --cprofile 20
step prof 60 env EMBER_FUSION=0 python3 $SC W3 --sizes gpu --warmup 8 --cprofile 20
step trace 40 env EMBER_FUSION=0 python3 $SC W3 --sizes gpu --warmup 5 --trace 20
finish
