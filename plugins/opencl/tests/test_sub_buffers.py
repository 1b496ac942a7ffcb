"""Where the adaptive pool carves blocks out of larger buffers (every platform, NVIDIA's too since its
driver's crash has a release order that avoids it; EMBER_OPENCL_SUB_BUFFERS to choose), and that order:
no view released while a younger view over its range lives, a parent after its views
(``ember_opencl.views.ViewLedger``)."""

from __future__ import annotations

import pytest

from ember.errors import InvalidArgumentError
from ember_opencl import settings


@pytest.mark.parametrize(("env", "expected"), [(None, True), ("0", False), ("1", True), ("off", False)])
def test_the_setting_decides_on_every_platform(monkeypatch, env, expected) -> None:  # noqa: ANN001
    if env is None:
        monkeypatch.delenv("EMBER_OPENCL_SUB_BUFFERS", raising=False)
    else:
        monkeypatch.setenv("EMBER_OPENCL_SUB_BUFFERS", env)
    assert settings.sub_buffers() is expected


def test_a_bad_setting_names_the_variable(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("EMBER_OPENCL_SUB_BUFFERS", "sometimes")
    with pytest.raises(InvalidArgumentError, match="EMBER_OPENCL_SUB_BUFFERS='sometimes': expected 1 or 0"):
        settings.sub_buffers()


def test_the_device_pool_follows_the_runtime(dev) -> None:  # noqa: ANN001
    """The pool of the device under test carves only where the runtime says it may."""
    import ember as em

    rt = em.Device(dev).backend.rt
    assert (rt.pool._sub is not None) is rt.sub_buffers


class _Buffer:
    """A stand-in cl.Buffer: a handle, sub-regions, and a log of releases."""

    handles = iter(range(1, 1 << 30))

    def __init__(self, log: list, name: str) -> None:
        self.int_ptr = next(self.handles)
        self.name, self.log = name, log

    def get_sub_region(self, offset: int, nbytes: int) -> _Buffer:
        return _Buffer(self.log, f"{self.name}[{offset}:{offset + nbytes}]")


def _ledger_and_views(ranges: list) -> tuple:
    from ember_opencl.views import ViewLedger

    log: list[str] = []
    ledger = ViewLedger()
    parent = _Buffer(log, "p")
    views = [ledger.make(parent, o, n) for o, n in ranges]
    return ledger, parent, views, log


def _release(buf) -> None:  # noqa: ANN001
    buf.log.append(buf.name)


def test_an_older_view_waits_for_a_younger_view_inside_it() -> None:
    """NVIDIA's crash (probe ``three_inside``): X, then Y beside it, then Z inside X; the pool done with
    them in the order made. X may not go while Z lives; when all are dead they go youngest first."""
    ledger, _, (x, y, z), log = _ledger_and_views([(64, 64), (0, 64), (64, 32)])
    ledger.dead(x)
    ledger.dead(y)
    assert ledger.sweep(_release) == 1 and log == ["p[0:64]"]  # Y overlaps nothing younger; X waits for Z
    assert ledger.is_view(x) and ledger.pending == 1
    ledger.dead(z)
    assert ledger.sweep(_release) == 2 and log == ["p[0:64]", "p[64:96]", "p[64:128]"]
    assert not ledger.is_view(x) and ledger.pending == 0 and not ledger.due


def test_disjoint_views_go_at_once_in_any_order() -> None:
    """Only a younger view *over* an older one's range holds it; disjoint views never wait."""
    ledger, _, views, log = _ledger_and_views([(0, 16), (16, 16), (32, 16)])
    ledger.dead(views[0])
    ledger.dead(views[2])
    assert ledger.sweep(_release) == 2 and sorted(log) == ["p[0:16]", "p[32:48]"]


def test_a_parent_goes_after_its_last_view() -> None:
    """A parent given back while a view of it waits is held, and released by the sweep that releases its
    last view, after it."""
    ledger, parent, (a, b), log = _ledger_and_views([(0, 64), (0, 16)])
    ledger.dead(a)
    assert ledger.sweep(_release) == 0  # b (younger, inside a) still lives
    assert ledger.hold(parent)
    ledger.dead(b)
    ledger.sweep(_release)
    assert log == ["p[0:16]", "p[0:64]", "p"]
    assert not ledger.hold(parent)  # nothing left of it: the caller releases it itself


def test_the_runtime_releases_views_by_the_ledger(monkeypatch) -> None:  # noqa: ANN001
    """On a device whose releases are immediate (PoCL), a view the pool is done with goes at once unless a
    younger view over its range lives; then with that view, after it; the parent after both."""
    import pyopencl as cl

    monkeypatch.setenv("EMBER_OPENCL_SUB_BUFFERS", "1")
    monkeypatch.setenv("EMBER_OPENCL_RELEASE", "now")
    from ember_opencl.runtime import Runtime

    rt = Runtime(0)
    assert rt.releaser is None
    parent = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE, 1 << 16)
    outer, inner = rt.views.make(parent, 0, 8192), rt.views.make(parent, 4096, 1024)
    watches = [cl.Buffer.from_int_ptr(b.int_ptr, retain=True) for b in (parent, outer, inner)]
    rt._release_view(outer)
    rt.finish()
    assert [w.reference_count for w in watches[1:]] == [2, 2]  # the younger view inside it lives: outer waits
    rt._release_view(inner)
    rt._release(parent)
    rt.finish()
    assert [w.reference_count for w in watches[1:]] == [1, 1]  # both released (our watches left)
    for w in watches[1:]:
        w.release()  # (a live sub-buffer keeps a reference to its parent)
    assert watches[0].reference_count == 1  # and the parent


def test_at_exit_every_view_goes_youngest_first_then_the_ledger_is_closed() -> None:
    """At the process's exit the views go in the ledger's order, alive or dead (left to the garbage
    collector they would go in whatever order their last references die); afterwards the pool's late
    calls (a block's death, a page's release) touch nothing."""
    ledger, parent, (a, b, c), log = _ledger_and_views([(0, 64), (16, 16), (64, 16)])
    ledger.dead(b)
    ledger.hold(parent)
    ledger.release_all(_release)
    assert log == ["p[64:80]", "p[16:32]", "p[0:64]", "p"]
    ledger.dead(a)  # a late call after the exit release: ignored
    assert not ledger.hold(parent) and not ledger.due and ledger.closed


def test_a_process_releases_its_views_in_order_at_exit(tmp_path) -> None:  # noqa: ANN001
    """The runtime's exit hook releases the views still alive (an outer view and one inside it, made
    after it) youngest first, and the process exits cleanly."""
    import os
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "exit_views.py"
    script.write_text(
        textwrap.dedent(
            """
            import pyopencl as cl
            from ember_opencl import runtime

            rt = runtime.Runtime(0)
            parent = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE, 1 << 16)
            outer = rt.views.make(parent, 0, 8192)
            inner = rt.views.make(parent, 4096, 1024)
            names = {outer.int_ptr: "outer", inner.int_ptr: "inner"}

            def logged(buf):
                print("release", names.get(buf.int_ptr, "?"), flush=True)
                buf.release()

            runtime._release_buffer = logged
            """
        )
    )
    env = {**os.environ, "EMBER_OPENCL_SUB_BUFFERS": "1"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["release", "inner", "release", "outer"], done.stdout


@pytest.mark.parametrize("seed", range(40))
def test_no_random_history_releases_a_view_before_a_younger_one_over_it(seed) -> None:  # noqa: ANN001
    """Random histories of a parent's views (overlapping ranges made, the pool done with them in any
    order, sweeps in between, the parent given back last): no view is released while a younger
    unreleased view overlaps it, none twice, and every view and then the parent go by the end."""
    import random

    from ember_opencl.views import ViewLedger

    rng = random.Random(seed)
    ledger = ViewLedger()
    order: list[str] = []
    parent = _Buffer(order, "p")
    made: list[tuple[int, int, int, _Buffer]] = []  # (age, start, end, view)
    alive: list[_Buffer] = []
    released: set[int] = set()

    def release(buf) -> None:  # noqa: ANN001
        assert buf.int_ptr not in released, "released twice"
        if buf is not parent:
            age, start, end = next((a, s, e) for a, s, e, v in made if v is buf)
            for a, s, e, v in made:
                overlaps = s < end and start < e
                assert not (a > age and overlaps and v.int_ptr not in released), "a younger view over it lives"
        else:
            assert all(v.int_ptr in released for *_, v in made), "the parent before its views"
        released.add(buf.int_ptr)

    for _ in range(60):
        act = rng.random()
        if act < 0.45 or not alive:
            start, nbytes = rng.randrange(0, 64) * 16, rng.randrange(1, 16) * 16
            view = ledger.make(parent, start, nbytes)
            made.append((len(made), start, start + nbytes, view))
            alive.append(view)
        elif act < 0.85:
            ledger.dead(alive.pop(rng.randrange(len(alive))))
        else:
            ledger.sweep(release)
    for view in alive:
        ledger.dead(view)
    if ledger.hold(parent):  # views left: the sweep takes them, then the parent
        ledger.sweep(release)
        assert parent.int_ptr in released
    assert {v.int_ptr for *_, v in made} <= released and ledger.pending == 0
