"""Device probe (call4, call7; run as .ci/align_probe.py): a module or script run with the wgpu pool's
sub-allocation alignment set to SA bytes (the adapter's otherwise)."""

import os
import runpy
import sys

from ember_wgpu import runtime as R

orig = R.Runtime._make_pool


def mp(self, device, release=None):
    if device is not None and os.environ.get("SA"):
        self.sub_align = int(os.environ["SA"])
    return orig(self, device, release)


R.Runtime._make_pool = mp
target, sys.argv = sys.argv[1], sys.argv[1:]
if target.endswith(".py"):
    runpy.run_path(target, run_name="__main__")
else:
    runpy.run_module(target, run_name="__main__", alter_sys=True)
