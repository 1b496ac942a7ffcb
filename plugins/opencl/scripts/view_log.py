"""Every sub-buffer (view) the adaptive pool makes and every release of the view ledger
(``ember_opencl.views``), written to a log before each happens, while ``benchmarks.memory`` runs:

    python plugins/opencl/scripts/view_log.py --log views.log -- \\
        W3 --gpu-sizes --steps 20 --rounds 1 --strategies adaptive --device opencl:0

Made for NVIDIA's crash in clReleaseMemObject with sub-buffers (2026-12-06/07): the log's last lines name
the handle being released, its parent, offset and size, and where that view was made (the innermost ember
frames of the allocation: which op asked for the block); it showed the views an arena makes, which
``sub_buffer_probe.py``'s ``arena_*`` scenarios replay. The commands sent to a view between its making and
its release are not logged, nor whole buffers released outside the ledger. A probe for the device
machine, not a test.
"""

from __future__ import annotations

import argparse
import runpy
import sys
import traceback
from typing import Any, TextIO

import pyopencl as cl

from ember_opencl import views as views_module


def _where() -> str:
    """The innermost frames of ember's code above the pool (the op that asked for the block)."""
    frames = [f for f in traceback.extract_stack()[:-3] if "/ember" in f.filename and "/memory/" not in f.filename]
    return " < ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} {f.name}" for f in reversed(frames[-4:]))


def install(log: TextIO) -> None:
    """Wrap the view ledger's making and sweeps so every view made and every release is logged before it
    happens (the ledger releases views and their held parents; other whole buffers are not logged)."""
    made: dict[int, str] = {}
    make, sweep = views_module.ViewLedger.make, views_module.ViewLedger.sweep

    def logged_make(self: Any, parent: Any, offset: int, nbytes: int) -> Any:
        view = make(self, parent, offset, nbytes)
        made[view.int_ptr] = f"parent {parent.int_ptr:x} off {offset} size {nbytes}: {_where()}"
        log.write(f"make {view.int_ptr:x} {made[view.int_ptr]}\n")
        return view

    def logged_sweep(self: Any, release: Any) -> int:
        log.write(f"sweep: {self.pending} views waiting\n")

        def logged_release(buf: Any) -> None:
            handle = buf.int_ptr
            try:
                parent = buf.get_info(cl.mem_info.ASSOCIATED_MEMOBJECT)
                kind = f"view of {parent.int_ptr:x}" if parent is not None else "whole buffer"
            except cl.Error as exc:
                kind = f"(info failed: {exc})"
            log.write(f"  release {handle:x} {kind}; made: {made.pop(handle, '?')}\n")
            release(buf)
            log.write("  ok\n")

        return sweep(self, logged_release)

    views_module.ViewLedger.make = logged_make  # type: ignore[method-assign]
    views_module.ViewLedger.sweep = logged_sweep  # type: ignore[method-assign]


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
