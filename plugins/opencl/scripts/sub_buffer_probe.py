"""Which ways of letting go of sub-buffers (views) a driver survives, each in its own process:

    python plugins/opencl/scripts/sub_buffer_probe.py [--device opencl:0] [--only NAME,...] [--views N --view-mib M]

NVIDIA's OpenCL (driver 580.159, an H100) crashed in clReleaseMemObject on the views of the adaptive
pool's dropped step plan (plugins/cuda/logs/h100-2026-12-06-pm/opencl-crash), so ember-opencl carves
no sub-buffers there and pays for whole buffers (W3's adaptive step 1.28x static's). Each scenario
below makes a parent buffer and views of it, runs kernels on the views and releases them in one
order, on one thread, with or without the queue finished first; a crash shows as the child's signal.
A protocol that survives every time is one the pool could follow (e.g. views released only after a
finish). On 2026-12-07 the H200 ran the first eight without a crash, while ember's runs still crashed
in the release thread with the main thread inside enqueue_copy or clFinish: ``thread_while_main_enqueues``
puts exactly that to the test. On 2026-12-07 (H100) ember crashed with no release thread at all, and every
scenario here passed at ember's view sizes (``--views 2 --view-mib 49``): ``other_commands`` puts the other
commands ember sends to views (fills, copies, uploads, reads at an offset) to the test; the ``arena_*``
scenarios make the views ember's W3 plan made of its arena (they overlap; one range is viewed twice), write
each, and release them in several orders. A probe for the device machine, not a test.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import threading
import time

import numpy as np

SRC = """
__kernel void touch(__global float* a, const int n, const int reps) {
  const int i = get_global_id(0);
  if (i >= n) return;
  float v = a[i];
  for (int r = 0; r < reps; ++r) v = v * 1.0001f + 1.0f;
  a[i] = v;
}
"""
MIB = 1 << 20
#: views of a parent and each view's size (``--views``, ``--view-mib``: ember's crash of 2026-12-07 was in
#: the release of a 49 MiB view next to its 49 MiB sibling, where these scenarios' 4 MiB ones never crashed)
VIEWS = int(os.environ.get("SUB_BUFFER_PROBE_VIEWS", "8"))
VIEW_BYTES = int(float(os.environ.get("SUB_BUFFER_PROBE_VIEW_MIB", "4")) * MIB)


def _setup(index: int):  # noqa: ANN202
    import pyopencl as cl

    from ember_opencl.runtime import device_list

    _platform, device = device_list()[index]
    ctx = cl.Context([device])
    q = cl.CommandQueue(ctx)
    knl = cl.Program(ctx, SRC).build().touch
    align = max(int(device.mem_base_addr_align) // 8, 16)
    return cl, ctx, q, knl, align


def _views(cl, ctx, align):  # noqa: ANN001, ANN202
    step = -(-VIEW_BYTES // align) * align
    parent = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, step * VIEWS)
    return parent, [parent.get_sub_region(i * step, VIEW_BYTES) for i in range(VIEWS)]


def _launch(cl, q, knl, bufs, reps=2000):  # noqa: ANN001
    n = VIEW_BYTES // 4
    for b in bufs:
        knl.set_args(b, cl.cltypes.int(n), cl.cltypes.int(reps))
        cl.enqueue_nd_range_kernel(q, knl, (n,), None)


def _lib():  # noqa: ANN202
    lib = ctypes.CDLL("libOpenCL.so.1")
    for fn in (lib.clRetainMemObject, lib.clReleaseMemObject):
        fn.argtypes, fn.restype = [ctypes.c_void_p], ctypes.c_int
    return lib


def _threaded_release(bufs) -> threading.Thread:  # noqa: ANN001
    """ember's Releaser: retain, drop pyopencl's reference, the last release on another thread."""
    lib = _lib()
    handles = []
    for b in bufs:
        h = b.int_ptr
        lib.clRetainMemObject(ctypes.c_void_p(h))
        b.release()
        handles.append(h)
    t = threading.Thread(target=lambda: [lib.clReleaseMemObject(ctypes.c_void_p(h)) for h in handles])
    t.start()
    return t


#: the views ember's W3 plan made of its arena on the H100 (2026-12-07, view_log.py: offset, size in bytes, in
#: the order made); they overlap (a range serves several blocks of the step at different times) and one
#: range is viewed twice
ARENA = (
    (51380224, 51380224), (0, 51380224), (127664128, 12845056), (51380224, 25690112), (77070336, 73728),
    (89128960, 25690112), (114819072, 6422528), (51380224, 4194304), (142114816, 262144), (51400704, 20480),
    (51380224, 20480), (51402752, 2048), (142718464, 16), (51400704, 2048), (142717952, 16), (51421184, 16),
    (51400704, 20480), (142719488, 48), (142376960, 262144), (51380224, 20480), (142712832, 5120),
    (77070336, 6422528), (140509184, 1605632), (51380224, 25690112), (114819072, 12845056), (51380224, 73728),
    (142639104, 73728), (51380224, 37748736), (142718976, 256), (51380224, 65536), (51380224, 51380224),
    (51970048, 1536), (51380224, 589824), (51412992, 128), (51380224, 32768), (16384, 512), (0, 16384),
)  # fmt: skip


#: three views, released in the order made: the crash's two 49 MiB views with a third that repeats the first's
#: range, or lies inside it, or lies beside both
_X, _Y = ARENA[0], ARENA[1]
SMALL = {
    "three_duplicate": (_X, _Y, _X),
    "three_inside": (_X, _Y, (_X[0], _X[1] // 2)),
    "three_apart": (_X, _Y, (ARENA[2])),
}


def _disjoint(ranges):  # noqa: ANN001, ANN202
    """The ranges, in order, that overlap none kept before them."""
    kept: list[tuple[int, int]] = []
    for o, n in ranges:
        if all(o + n <= a or a + b <= o for a, b in kept):
            kept.append((o, n))
    return tuple(kept)


def _arena(cl, ctx, q, knl, laps: int = 1, ranges=ARENA):  # noqa: ANN001, ANN202
    """ember's arena: the parent, its overlapping views, each written by a kernel in the order made, once
    per lap (the views kept between laps, as the plan keeps them; ``laps=0``: never used)."""
    parent = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, max(o + n for o, n in ARENA))
    views = [parent.get_sub_region(o, n) for o, n in ranges]
    for _ in range(laps):
        _use(cl, q, knl, views, ranges)
    return parent, views


def _use(cl, q, knl, views, ranges) -> None:  # noqa: ANN001
    for v, (_, n) in zip(views, ranges):
        knl.set_args(v, cl.cltypes.int(n // 4), cl.cltypes.int(20))
        cl.enqueue_nd_range_kernel(q, knl, (max(1, n // 4),), None)


def _release(views, order) -> None:  # noqa: ANN001
    for i in order:
        print(f"releasing view {i} of {len(views)}", flush=True)  # the last line before a crash names it
        views[i].release()


def scenario(name: str, index: int) -> None:
    cl, ctx, q, knl, align = _setup(index)
    if name == "views_then_parent_in_flight":
        parent, views = _views(cl, ctx, align)
        _launch(cl, q, knl, views)
        for v in views:
            v.release()
        parent.release()
        q.finish()
    elif name == "parent_then_views_in_flight":
        parent, views = _views(cl, ctx, align)
        _launch(cl, q, knl, views)
        parent.release()
        for v in views:
            v.release()
        q.finish()
    elif name == "after_finish":
        parent, views = _views(cl, ctx, align)
        _launch(cl, q, knl, views)
        q.finish()
        for v in views:
            v.release()
        parent.release()
    elif name == "thread_in_flight":
        parent, views = _views(cl, ctx, align)
        _launch(cl, q, knl, views)
        _threaded_release([*views, parent]).join()
        q.finish()
    elif name == "kernel_keeps_view_as_arg":
        parent, views = _views(cl, ctx, align)
        _launch(cl, q, knl, views)  # the kernel object's first argument is the last view now
        for v in views:
            v.release()
        parent.release()
        other = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, VIEW_BYTES)
        _launch(cl, q, knl, [other])
        q.finish()
    elif name == "churn_thread":  # the pool's life: arenas made, used, dropped, made again, no finish
        for _ in range(300):
            parent, views = _views(cl, ctx, align)
            _launch(cl, q, knl, views, reps=50)
            _threaded_release([*views, parent])
        time.sleep(1.0)
        q.finish()
    elif name == "churn_main":
        for _ in range(300):
            parent, views = _views(cl, ctx, align)
            _launch(cl, q, knl, views, reps=50)
            for v in views:
                v.release()
            parent.release()
        q.finish()
    elif name == "views_remade":  # a view of the same range made again while the first still lives
        parent, views = _views(cl, ctx, align)
        again = [parent.get_sub_region(0, VIEW_BYTES) for _ in range(4)]
        _launch(cl, q, knl, views + again)
        _threaded_release([*again, *views, parent]).join()
        q.finish()
    elif name == "thread_while_main_enqueues":  # ember's crash: a release on the thread during the main's calls
        other = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, VIEW_BYTES)
        host = np.zeros(VIEW_BYTES // 4, np.float32)
        for _ in range(200):
            parent, views = _views(cl, ctx, align)
            _launch(cl, q, knl, views, reps=50)
            t = _threaded_release([*views, parent])
            for _ in range(4):  # the main thread in the driver while the thread releases
                cl.enqueue_copy(q, other, host, is_blocking=False).wait()
                _launch(cl, q, knl, [other], reps=10)
            q.finish()
            t.join()
    elif name in ("other_commands", "other_commands_in_flight"):
        # what ember does to views besides kernels: fills (constants), view-to-view copies, uploads from
        # pageable and pinned host memory, reads at an offset; then the views go, in order, then the parent
        parent, views = _views(cl, ctx, align)
        n = VIEW_BYTES // 4
        host = np.arange(n, dtype=np.float32)
        pinned = cl.Buffer(ctx, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, 4096)
        for i, v in enumerate(views):
            cl.enqueue_fill_buffer(q, v, np.float32(i), 0, VIEW_BYTES)
            cl.enqueue_fill_buffer(q, v, np.float32(0), 0, 4)
            cl.enqueue_copy(q, v, host, is_blocking=False)
            cl.enqueue_copy(q, v, pinned, byte_count=4096)
            if i:
                cl.enqueue_copy(q, v, views[i - 1], byte_count=VIEW_BYTES // 2, dst_offset=VIEW_BYTES // 2)
        _launch(cl, q, knl, views, reps=50)
        back = np.empty(1024, np.float32)
        cl.enqueue_copy(q, back, views[-1], src_offset=VIEW_BYTES - 4096, is_blocking=name == "other_commands")
        for v in views:
            v.release()
        parent.release()
        q.finish()
    elif name in SMALL or name in ("arena_oldest_then_use", "arena_disjoint_in_order", "arena_no_duplicate_in_order",
                  "arena_unused_in_order", "arena_lifo_half_then_use", "arena_two_oldest_only"):  # fmt: skip
        ranges = ARENA
        if name in SMALL:
            ranges = SMALL[name]
        elif name == "arena_disjoint_in_order":
            ranges = _disjoint(ARENA)
        elif name == "arena_no_duplicate_in_order":
            ranges = tuple(r for i, r in enumerate(ARENA) if r not in ARENA[:i])
        parent, views = _arena(cl, ctx, q, knl, laps=0 if name == "arena_unused_in_order" else 20, ranges=ranges)
        q.finish()
        n = len(views)
        if name == "arena_oldest_then_use":  # one release out of order, the younger views used after it
            _release(views, [0])
            _use(cl, q, knl, views[1:], ranges[1:])
            q.finish()
            _release(views, range(n - 1, 0, -1))
        elif name == "arena_lifo_half_then_use":  # the younger half released last-made first, the rest used
            _release(views, range(n - 1, n // 2 - 1, -1))
            _use(cl, q, knl, views[: n // 2], ranges[: n // 2])
            q.finish()
            _release(views, range(n // 2 - 1, -1, -1))
        elif name == "arena_two_oldest_only":  # ember's crash: the first two views made, in that order
            _release(views, [0, 1])
            q.finish()
            print("two released", flush=True)
            _release(views, range(n - 1, 1, -1))
        else:
            _release(views, range(n))
        print("releasing the parent", flush=True)
        parent.release()
        q.finish()
    elif name.startswith("arena_"):  # ember's overlapping arena views, released in several orders
        parent, views = _arena(cl, ctx, q, knl, laps=20)
        order = list(range(len(views)))
        if name.endswith("_reverse"):
            order.reverse()
        elif name.endswith("_largest_first"):
            order.sort(key=lambda i: -ARENA[i][1])
        if "_finished" in name:
            q.finish()
        if "_thread" in name:
            _threaded_release([*(views[i] for i in order), parent]).join()
        else:
            _release(views, order)
            parent.release()
        if "_remade" in name:  # the next plan's arena, made and used after the old one went
            _arena(cl, ctx, q, knl, laps=2)
        q.finish()
    else:
        raise SystemExit(f"no scenario {name!r}")
    print("ok")


NAMES = (
    "after_finish",
    "views_then_parent_in_flight",
    "parent_then_views_in_flight",
    "thread_in_flight",
    "kernel_keeps_view_as_arg",
    "views_remade",
    "churn_main",
    "thread_while_main_enqueues",
    "churn_thread",
    "other_commands",
    "other_commands_in_flight",
    "arena_in_order",
    "arena_reverse",
    "arena_largest_first",
    "arena_finished_in_order",
    "arena_thread",
    "arena_remade",
    "arena_oldest_then_use",
    "arena_disjoint_in_order",
    "arena_no_duplicate_in_order",
    "arena_unused_in_order",
    "arena_lifo_half_then_use",
    "arena_two_oldest_only",
    *SMALL,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="opencl:0")
    ap.add_argument("--only", default="")
    ap.add_argument("--scenario", help=argparse.SUPPRESS)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--views", type=int, help="views of a parent (default 8)")
    ap.add_argument("--view-mib", type=float, help="each view's size in MiB (default 4)")
    args = ap.parse_args()
    if args.views is not None:
        os.environ["SUB_BUFFER_PROBE_VIEWS"] = str(args.views)
    if args.view_mib is not None:
        os.environ["SUB_BUFFER_PROBE_VIEW_MIB"] = str(args.view_mib)
    index = int(args.device.split(":")[1])
    if args.scenario:
        scenario(args.scenario, index)
        return
    names = args.only.split(",") if args.only else NAMES
    for name in names:
        codes = []
        for _ in range(args.repeat):
            proc = subprocess.run(
                [sys.executable, __file__, "--device", args.device, "--scenario", name],
                capture_output=True,
                text=True,
                timeout=120,
                env=os.environ,
            )
            codes.append(proc.returncode)
        said = [ln for ln in proc.stdout.strip().splitlines() if ln.startswith(("releasing", "two"))]
        tail = ((said or proc.stderr.strip().splitlines() or [""])[-1])[:120]
        print(f"{name:>30}: exit codes {codes}" + (f"  ({tail})" if any(codes) else ""))


if __name__ == "__main__":
    main()
