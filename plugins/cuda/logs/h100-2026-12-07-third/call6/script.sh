#!/usr/bin/env bash
# temporary device script: cuda W3 eager whole vs 32/64 MiB column caps, alternated in one process
source .ci/device-steps.sh
step capab 60 python3 plugins/cuda/logs/h100-2026-12-07-third/call6/capab.py
step capab 60 python3 plugins/cuda/logs/h100-2026-12-07-third/call6/capab.py
finish
