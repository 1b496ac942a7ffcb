"""ember-opencl's background releases (release.py): where clReleaseMemObject waits for the queue
(NVIDIA), the last release of a buffer happens on a daemon thread; here forced on for PoCL."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pytest

from ember.errors import InvalidArgumentError
from ember_opencl.release import Releaser, release_mode


class _Platform:
    def __init__(self, name: str) -> None:
        self.name = name


def test_the_mode_follows_the_platform_and_the_setting(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.delenv("EMBER_OPENCL_RELEASE", raising=False)
    assert release_mode(_Platform("NVIDIA CUDA")) == "thread"
    assert release_mode(_Platform("Portable Computing Language")) == "now"
    monkeypatch.setenv("EMBER_OPENCL_RELEASE", "now")
    assert release_mode(_Platform("NVIDIA CUDA")) == "now"
    monkeypatch.setenv("EMBER_OPENCL_RELEASE", "later")
    with pytest.raises(InvalidArgumentError, match="EMBER_OPENCL_RELEASE='later': expected one of thread, now"):
        release_mode(_Platform("NVIDIA CUDA"))


def _refcount(buf: cl.Buffer) -> int:
    return int(buf.get_info(cl.mem_info.REFERENCE_COUNT))


def test_a_buffer_goes_back_on_the_thread() -> None:
    ctx = cl.create_some_context(interactive=False)
    keep = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 1 << 20)
    # a second pyopencl handle of the same buffer shows its driver reference count from outside
    watch = cl.Buffer.from_int_ptr(keep.int_ptr, retain=True)
    assert _refcount(watch) == 2
    releaser = Releaser()
    releaser.release(keep)
    releaser.wait()
    assert releaser.threaded == 1 and releaser.direct == 0
    assert _refcount(watch) == 1  # the thread dropped exactly the reference the pool held


def test_the_pools_releases_go_through_the_thread(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("EMBER_OPENCL_RELEASE", "thread")
    monkeypatch.setenv("EMBER_OPENCL_SUB_BUFFERS", "0")  # whole buffers: every free is a driver release
    from ember_opencl.runtime import Runtime

    rt = Runtime(0)
    assert rt.releaser is not None
    pool = rt.pool
    pool.set_strategy("exclusive")  # every freed block goes back to the driver
    blocks = [pool.acquire(4 * n) for n in (1000, 30000, 5000)]
    watches = [cl.Buffer.from_int_ptr(b.raw.int_ptr, retain=True) for b in blocks]
    data = np.arange(1000, dtype=np.float32)
    cl.enqueue_copy(rt.queue, blocks[0].raw, data)  # queued work on one of them before its release
    frees = pool.frees
    del blocks
    rt.releaser.wait()
    assert pool.frees - frees == 3
    assert rt.releaser.threaded == 3 and rt.releaser.direct == 0
    assert [_refcount(w) for w in watches] == [1, 1, 1]  # only the watches' own references are left
    back = np.empty_like(data)
    cl.enqueue_copy(rt.queue, back, watches[0], is_blocking=True)
    np.testing.assert_array_equal(back, data)  # the copy queued before the release ran


class _SlowLibrary:
    """The OpenCL library with releases that wait for ``go`` (a driver behind on its queue)."""

    def __init__(self, lib, go) -> None:  # noqa: ANN001
        self._lib, self._go = lib, go
        self.clRetainMemObject = lib.clRetainMemObject

    def clReleaseMemObject(self, handle):  # noqa: ANN001, ANN201, N802 - the C name
        self._go.wait()
        return self._lib.clReleaseMemObject(handle)


def test_a_release_waits_while_the_backlog_holds_more_than_the_limit() -> None:
    """Buffers waiting on the thread still hold device memory: past ``limit`` bytes waiting, a
    release waits for the thread (W4 on an H100 ran the card out of memory without the bound)."""
    import threading

    ctx = cl.create_some_context(interactive=False)
    releaser = Releaser(limit=1 << 20)
    go = threading.Event()
    releaser._lib = _SlowLibrary(releaser._lib, go)
    bufs = [cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 1 << 20) for _ in range(3)]
    watches = [cl.Buffer.from_int_ptr(b.int_ptr, retain=True) for b in bufs]
    releaser.release(bufs[0])  # 1 MiB waiting: at the limit, not past it
    releaser.release(bufs[1])  # 2 MiB waiting
    third = threading.Thread(target=releaser.release, args=(bufs[2],))
    third.start()
    third.join(0.5)
    assert third.is_alive() and releaser.waited == 1  # held until the thread catches up
    go.set()
    third.join(10)
    assert not third.is_alive()
    releaser.wait()
    assert releaser.threaded == 3 and [_refcount(w) for w in watches] == [1, 1, 1]


def test_views_wait_for_an_idle_queue_and_never_go_to_the_thread(monkeypatch) -> None:  # noqa: ANN001
    """With sub-buffers where releases go to the thread, a view's release and its parent's wait for the
    queue's next idle point, a read-back or finish, where the view and then the parent go on this thread:
    none of it on the release thread, where NVIDIA's driver crashed releasing views while this thread
    queued work."""
    monkeypatch.setenv("EMBER_OPENCL_RELEASE", "thread")
    monkeypatch.setenv("EMBER_OPENCL_SUB_BUFFERS", "1")
    from ember_opencl.runtime import Runtime

    rt = Runtime(0)
    pool = rt.pool
    assert rt.releaser is not None and pool._sub is not None
    parent = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE, 1 << 16)
    view = rt.views.make(parent, 0, 4096)  # as the pool carves a block
    watches = [cl.Buffer.from_int_ptr(b.int_ptr, retain=True) for b in (view, parent)]
    data = np.arange(1024, dtype=np.float32)
    cl.enqueue_copy(rt.queue, view, data)  # queued work on the view before its release
    pool._sub_release(view)  # as the pool gives back a carved block
    rt._release(parent)  # the page goes: held for its view
    # neither released yet (the parent's count: ours and the watch's, and on PoCL the live view's)
    assert _refcount(watches[0]) == 2 and _refcount(watches[1]) >= 2
    assert rt.releaser.threaded == 0
    back = np.empty_like(data)
    cl.enqueue_copy(rt.queue, back, watches[0], is_blocking=True)
    rt.finish()
    assert _refcount(watches[0]) == 1  # the view released here, at the idle point
    watches[0].release()
    assert _refcount(watches[1]) == 1  # and the parent after it
    assert rt.releaser.threaded == 0 and not rt.views.due
    np.testing.assert_array_equal(back, data)


def test_a_loop_that_never_reads_back_still_lets_its_views_go(monkeypatch) -> None:  # noqa: ANN001
    """Past ``IDLE_RELEASES_MAX`` waiting views the runtime finishes the queue itself and releases them."""
    monkeypatch.setenv("EMBER_OPENCL_RELEASE", "thread")
    monkeypatch.setenv("EMBER_OPENCL_SUB_BUFFERS", "1")
    from ember_opencl import runtime

    monkeypatch.setattr(runtime, "IDLE_RELEASES_MAX", 8)
    rt = runtime.Runtime(0)
    parent = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE, 1 << 16)
    made = [rt.views.make(parent, i * 4096, 4096) for i in range(9)]
    watches = [cl.Buffer.from_int_ptr(v.int_ptr, retain=True) for v in made]
    for v in made[:8]:
        rt._release_view(v)
    assert rt.views.pending == 8 and _refcount(watches[0]) == 2  # at the limit: still waiting
    rt._release_view(made[8])  # one past it: the queue is finished and all nine go
    assert rt.views.pending == 0 and [_refcount(w) for w in watches] == [1] * 9
