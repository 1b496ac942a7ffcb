"""Every sub-buffer (view) the adaptive pool makes and every release at the queue's idle points, written
to a log before each is made, while ``benchmarks.memory`` runs:

    EMBER_OPENCL_SUB_BUFFERS=1 python plugins/opencl/scripts/view_log.py --log views.log -- \\
        W3 --gpu-sizes --steps 20 --rounds 1 --strategies adaptive --device opencl:0

For NVIDIA's crash in clReleaseMemObject with sub-buffers (2026-12-06/07): the log's last lines name the
handle being released, its parent, offset and size, and where that view was made (the innermost ember
frames of the allocation: which op asked for the block). The commands sent to a view between its making
and its release are not logged. Where releases go to the release thread (NVIDIA's default), the views'
releases, and buffers freed after them, wait for idle points and are logged; other whole buffers' go on
the thread. A probe for the device machine, not a test.
"""

from __future__ import annotations

import argparse
import runpy
import sys
import traceback
from typing import Any, TextIO

import pyopencl as cl

from ember_opencl import runtime as rt_module


def _where() -> str:
    """The innermost frames of ember's code above the pool (the op that asked for the block)."""
    frames = [f for f in traceback.extract_stack()[:-3] if "/ember" in f.filename and "/memory/" not in f.filename]
    return " < ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} {f.name}" for f in reversed(frames[-4:]))


def install(log: TextIO) -> None:
    """Wrap the runtime's view making and idle-point releases so both are logged before they happen."""
    made: dict[int, str] = {}
    runtime_init = rt_module.Runtime.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        runtime_init(self, *args, **kwargs)
        carve = self.pool._sub
        if carve is None:
            log.write("no sub-buffers in this runtime (EMBER_OPENCL_SUB_BUFFERS=1 to make them)\n")
            return

        def logged(page: Any, offset: int, nbytes: int) -> Any:
            view = carve(page, offset, nbytes)
            made[view.int_ptr] = f"parent {page.int_ptr:x} off {offset} size {nbytes}: {_where()}"
            log.write(f"make {view.int_ptr:x} {made[view.int_ptr]}\n")
            return view

        self.pool._sub = logged

    def release_idle(self: Any, finish: bool = False) -> None:
        # Runtime._release_idle's steps, with a line before each release (pyopencl's release cannot be
        # wrapped per buffer): keep the two alike when the runtime's changes
        if finish and self._deferred:
            return
        if finish:
            self._queue.finish()
        waiting, self._idle_releases, self._idle_bytes = self._idle_releases, [], 0
        log.write(f"idle point: {len(waiting)} releases (finish={finish})\n")
        for buf in waiting:
            handle = buf.int_ptr
            try:
                parent = buf.get_info(cl.mem_info.ASSOCIATED_MEMOBJECT)
                kind = f"view of {parent.int_ptr:x}" if parent is not None else "whole buffer"
            except cl.Error as exc:
                kind = f"(info failed: {exc})"
            log.write(f"  release {handle:x} {kind}; made: {made.pop(handle, '?')}\n")
            buf.release()
            log.write("  ok\n")

    rt_module.Runtime.__init__ = init  # type: ignore[method-assign]
    rt_module.Runtime._release_idle = release_idle  # type: ignore[method-assign]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log", required=True, help="the log file (line-buffered: complete up to a crash)")
    ap.add_argument("memory_args", nargs=argparse.REMAINDER, help="-- then benchmarks.memory's arguments")
    args = ap.parse_args()
    rest = args.memory_args[1:] if args.memory_args[:1] == ["--"] else args.memory_args
    with open(args.log, "w", buffering=1) as log:
        install(log)
        sys.argv = ["benchmarks.memory", *rest]
        runpy.run_module("benchmarks.memory", run_name="__main__")


if __name__ == "__main__":
    main()
