"""The probe of call3: log every release the opencl runtime makes at the queue's idle points (the handle,
its size, its parent and offset, reference counts) before making it, then run ``benchmarks.memory`` with
the arguments given. Run from the repository root with RELLOG=FILE."""

import os
import runpy
import sys

import pyopencl as cl

from ember_opencl import runtime as rt_module

log = open(os.environ.get("RELLOG", "/tmp/rel.log"), "w", buffering=1)  # noqa: SIM115  (open for the run)
original = rt_module.Runtime._release_idle
batches = [0]


def release_idle(self, finish=False):  # noqa: ANN001, ANN201
    if finish and self._deferred:
        return original(self, finish)
    if finish:
        self._queue.finish()
    waiting, self._idle_releases, self._idle_bytes = self._idle_releases, [], 0
    log.write(f"batch {batches[0]} of {len(waiting)} finish={finish}\n")
    batches[0] += 1
    for b in waiting:
        try:
            parent = b.get_info(cl.mem_info.ASSOCIATED_MEMOBJECT)
            off = b.get_info(cl.mem_info.OFFSET)
            rc = b.get_info(cl.mem_info.REFERENCE_COUNT)
            prc = parent.get_info(cl.mem_info.REFERENCE_COUNT) if parent is not None else -1
            pp = hex(parent.int_ptr) if parent is not None else "0x0"
        except Exception as e:  # noqa: BLE001
            log.write(f"  info failed {type(e).__name__} {e}\n")
            pp = off = rc = prc = "?"
        log.write(f"  rel {b.int_ptr:x} size {b.size} parent {pp} off {off} rc {rc} prc {prc}\n")
        b.release()
        log.write("  ok\n")
    return None


rt_module.Runtime._release_idle = release_idle
sys.argv = ["benchmarks.memory", *sys.argv[1:]]
runpy.run_module("benchmarks.memory", run_name="__main__")
