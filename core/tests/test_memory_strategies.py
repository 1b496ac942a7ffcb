"""ember.memory's strategies (exclusive, static, adaptive) against a fake allocator: reuse, release of
empty pages, reserved vs in use on traces recorded from W3 and W4, the out-of-memory retry and its message,
and how a device chooses its strategy."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest

import ember as em
from ember import memory
from ember.errors import InvalidArgumentError, OutOfMemoryError
from ember.memory import HEADROOM, SMALL_LIMIT, BufferPool, fine_size, size_class

TRACES = Path(__file__).parent / "memory_traces"


class FakeDevice:
    """Numbered buffers with a byte cap; records every allocate and release call."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        self.live: dict[int, int] = {}
        self.next_id = 0
        self.allocs = 0
        self.releases = 0

    def allocate(self, nbytes: int) -> int:
        if self.capacity is not None and sum(self.live.values()) + nbytes > self.capacity:
            raise MemoryError(f"fake device: {nbytes} bytes do not fit")
        self.allocs += 1
        self.next_id += 1
        self.live[self.next_id] = nbytes
        return self.next_id

    def release(self, raw: int) -> None:
        self.releases += 1
        del self.live[raw]  # a double release fails here


def make(strategy: str, capacity: int | None = None, **kw) -> tuple[BufferPool, FakeDevice]:
    dev = FakeDevice(capacity)
    return BufferPool(dev.allocate, dev.release, strategy=strategy, cache_limit=None, **kw), dev


def check_books(pool: BufferPool, dev: FakeDevice) -> None:
    """The pool's byte counts agree with what the fake device holds and with its own breakdown."""
    assert pool.reserved == sum(dev.live.values())
    stats = pool.stats()
    assert sum(s * c["in_use"] for s, c in stats["size_classes"].items()) == pool.in_use
    assert sum(s * c["cached"] for s, c in stats["size_classes"].items()) == pool.cached
    assert pool.reserved >= pool.in_use + pool.cached


# -- exclusive ------------------------------------------------------------------------------
def test_exclusive_allocates_and_releases_every_buffer():
    pool, dev = make("exclusive")
    a = pool.acquire(1000)
    assert a.nbytes == fine_size(1000) == 1024 and dev.allocs == 1
    del a
    assert dev.releases == 1 and pool.reserved == 0 and pool.cached == 0
    b = pool.acquire(1000)
    assert dev.allocs == 2 and pool.hits == 0  # nothing was kept to reuse
    check_books(pool, dev)
    del b


# -- static ---------------------------------------------------------------------------------
def test_static_rounds_to_the_ladder_and_keeps_what_is_freed():
    pool, dev = make("static")
    a = pool.acquire(70_000)
    assert a.nbytes == size_class(70_000) == 81920
    raw = a.raw
    del a
    b = pool.acquire(75_000)  # the same class: the same buffer, no driver call
    assert b.raw == raw and dev.allocs == 1 and pool.hits == 1
    del b
    for _ in range(20_000):  # however long it stays free, static keeps it
        pool.acquire(64)
    assert pool.cached >= 81920 and dev.releases == 0
    check_books(pool, dev)


# -- adaptive -------------------------------------------------------------------------------
def test_adaptive_reuses_a_freed_buffer_of_the_same_size():
    pool, dev = make("adaptive")
    a = pool.acquire(3_000_000)
    raw = a.raw
    assert a.nbytes == fine_size(3_000_000) < size_class(3_000_000)  # finer than the ladder
    del a
    assert pool.acquire(3_000_000).raw == raw and dev.allocs == 1


def test_adaptive_hands_a_slightly_larger_free_buffer_to_the_next_request_early():
    pool, dev = make("adaptive")
    keep = pool.acquire(8 << 20)
    big = pool.acquire(4 << 20)
    big_raw = big.raw
    del big  # reserved 12 MiB, in use 8 MiB: a new 4 MiB - 2 KiB buffer would exceed the headroom
    c = pool.acquire((4 << 20) - 2048)
    assert c.raw == big_raw and dev.allocs == 2
    assert pool.in_use == (8 << 20) + fine_size((4 << 20) - 2048)  # in use counts what was asked
    check_books(pool, dev)
    del c, keep
    check_books(pool, dev)


def test_adaptive_releases_instead_of_growing_past_its_peak():
    pool, dev = make("adaptive")
    a = pool.acquire(4 << 20)
    del a  # peak in use 4 MiB, 4 MiB cached
    b = pool.acquire(3 << 20)  # 1 MiB smaller: too much slack to hand it the 4 MiB buffer
    assert dev.releases == 1 and pool.reserved == 3 << 20 == pool.in_use
    del b


def test_adaptive_counts_buffers_waiting_for_a_deferred_release_as_gone():
    pool, dev = make("adaptive", defer_release=True)  # wgpu: released only at the next submit (trim)
    held = [pool.acquire(4 << 20) for _ in range(2)]
    del held  # 8 MiB free, peak in use 8 MiB
    keep = [pool.acquire(SMALL_LIMIT + 512) for _ in range(2)]
    # the first request makes room (one 4 MiB buffer waits for release); the second fits beside it
    assert len(pool.deferred) == 1 and dev.releases == 0
    pool.trim()
    assert dev.releases == 1 and pool.cached == 4 << 20
    check_books(pool, dev)
    del keep


def test_adaptive_releases_idle_buffers_at_once_and_keeps_busy_ones_reusable():
    busy: set[int] = set()
    pool, dev = make("adaptive", defer_release=busy.__contains__)  # wgpu: busy = in the open batch
    a, b = pool.acquire(4 << 20), pool.acquire(4 << 20)
    busy.add(a.raw)
    busy_raw = a.raw
    del a, b  # 8 MiB free: one busy, one not
    keep = pool.acquire(2 << 20)  # making room releases the idle buffer now, never the busy one
    assert dev.releases == 1 and busy_raw in dev.live and not pool.deferred
    assert pool.acquire(4 << 20).raw == busy_raw  # still reusable (commands run in order)
    check_books(pool, dev)
    del keep


def test_adaptive_that_can_submit_makes_room_in_its_order_busy_buffers_included():
    """With ``on_pressure`` (wgpu: submit the open batch), making room inside an acquire keeps adaptive's
    order, the most recently freed first (a loop needs it again last), busy or not: the batch is
    submitted once and that buffer goes; the older idle one, which the loop needs sooner, stays."""
    busy: set[int] = set()
    submits: list[int] = []

    def submit() -> None:
        busy.clear()
        submits.append(1)

    pool, dev = make("adaptive", defer_release=busy.__contains__, on_pressure=submit)
    x, y = pool.acquire(4 << 20), pool.acquire((4 << 20) + (1 << 19))
    x_raw, y_raw = x.raw, y.raw
    busy.add(y_raw)
    del x
    tick = pool.acquire(1000)  # the pool's clock counts acquires: y is freed after x
    del y, tick  # y: freed last, and in the open batch
    keep = pool.acquire(2 << 20)
    assert submits == [1] and y_raw not in dev.live and x_raw in dev.live and not pool.deferred
    check_books(pool, dev)
    del keep


def test_adaptive_submits_when_only_busy_buffers_could_make_room():
    busy: set[int] = set()
    pool, dev = make("adaptive", defer_release=busy.__contains__, on_pressure=busy.clear)  # clear: a submit
    a = pool.acquire(4 << 20)
    busy.add(a.raw)
    del a  # 4 MiB free, in the open batch
    keep = pool.acquire(2 << 20)  # room only by submitting first: then the buffer goes at once
    assert not busy and dev.releases == 1 and pool.reserved == 2 << 20
    del keep


def test_adaptive_keeps_small_and_large_buffers_apart():
    pool, dev = make("adaptive")
    keep = pool.acquire(SMALL_LIMIT + 512)
    big = pool.acquire(SMALL_LIMIT + 4096)
    del big
    small = pool.acquire(SMALL_LIMIT - 4096)  # a large free buffer is never handed to a small request
    assert dev.allocs == 3 and small.nbytes == SMALL_LIMIT - 4096
    del small, keep


def test_adaptive_releases_pages_that_stay_empty():
    pool, dev = make("adaptive")
    hold = [pool.acquire(2 << 20) for _ in range(4)]
    del hold  # 8 MiB free: a phase of the program has ended
    assert pool.cached == 8 << 20
    for _ in range(10_000):  # the program goes on with small buffers only
        pool.acquire(256)
    assert pool.cached <= 256 and pool.reserved <= 512
    assert dev.releases >= 4
    check_books(pool, dev)


def test_adaptive_keeps_what_a_loop_reuses_every_step():
    pool, dev = make("adaptive")
    for _ in range(30):  # a step far longer than the idle horizon's floor, reusing the same buffers
        grads = [pool.acquire(1 << 20) for _ in range(3)]
        del grads
        for _ in range(3000):
            pool.acquire(512)
    assert dev.allocs <= 4 + 1  # three gradients and one small buffer, allocated once (one retried at most)


def replay(trace: dict, strategy: str) -> tuple[BufferPool, FakeDevice]:
    """Run a recorded trace of ``[id, nbytes]`` acquires and ``[id]`` frees through a fresh pool."""
    pool, dev = make(strategy)
    live = {}
    for event in trace["events"]:
        if len(event) == 2:
            live[event[0]] = pool.acquire(event[1])
        else:
            live.pop(event[0], None)
    live.clear()
    return pool, dev


@pytest.mark.parametrize("name", ["w3_batch16.json", "w4_batch4.json", "w3_batch64_steps.json", "w4_cpu_steps.json"])
def test_adaptive_reserves_at_most_5_percent_over_its_peak_in_use_on_a_recorded_trace(name):
    """Traces of W3 / W4 training steps recorded on opencl:0 (request sizes and frees, in order): four steps
    at small sizes, and eight steps at W3 batch 64 and W4's CPU sizes (their step_starts mark the steps)."""
    trace = json.loads((TRACES / name).read_text())
    adaptive, dev = replay(trace, "adaptive")
    static, _ = replay(trace, "static")
    exclusive, _ = replay(trace, "exclusive")
    assert adaptive.peak_reserved <= 1.05 * adaptive.peak_in_use, (adaptive.peak_reserved, adaptive.peak_in_use)
    # in use is what was asked, finely rounded: the same as exclusive's, which holds nothing more
    assert adaptive.peak_in_use == exclusive.peak_in_use == exclusive.peak_reserved
    assert adaptive.peak_reserved < static.peak_reserved
    assert adaptive.in_use == 0 and adaptive.reserved == sum(dev.live.values())
    steps = trace["steps"]
    assert adaptive.misses < static.misses * steps  # it reuses: far fewer driver calls than one per request
    assert adaptive.misses < exclusive.misses


def test_dry_run_fixes_the_plan_to_the_step_it_saw():
    pool, dev = make("adaptive")
    warm = [pool.acquire(1 << 20) for _ in range(8)]
    del warm  # 8 MiB cached from a bigger warm-up
    with pool.dry_run():
        step = [pool.acquire(1 << 20) for _ in range(2)]
        del step
    assert pool.reserved <= 1.04 * (2 << 20) and pool.reserved >= 2 << 20


# -- out of memory --------------------------------------------------------------------------
def test_out_of_memory_releases_the_cache_retries_then_says_what_was_asked():
    calls = []
    pool, dev = make("static", capacity=4 << 20, on_pressure=lambda: calls.append("pressure"))
    a = pool.acquire(3 << 20)
    del a  # 3 MiB cached
    b = pool.acquire(2 << 20)  # does not fit beside the cache: pressure, release, retry, success
    assert calls == ["pressure"] and dev.releases == 1 and pool.reserved == 2 << 20
    c = pool.acquire(1 << 20)
    del c  # 1 MiB cached: released and retried once more, then the device still says no
    with pytest.raises(OutOfMemoryError) as info:
        pool.acquire(3 << 20)
    msg = str(info.value)
    assert isinstance(info.value, MemoryError) and calls == ["pressure", "pressure"]
    assert "3.0 MiB" in msg and "2.0 MiB reserved" in msg and "2.0 MiB of it in use" in msg
    assert "released 1.0 MiB of cached buffers and retried" in msg and "fake device" in msg
    assert "smaller batch" in msg and "memory='exclusive'" in msg
    assert pool.in_use == 2 << 20
    check_books(pool, dev)
    del b


def test_out_of_memory_with_nothing_cached_does_not_retry():
    pool, dev = make("exclusive", capacity=1 << 20, device="fake:0")
    with pytest.raises(OutOfMemoryError, match=r"fake:0: out of memory .*no cached buffers") as info:
        pool.acquire(2 << 20)
    assert "memory='exclusive'" not in str(info.value) and "smaller batch" in str(info.value)
    assert dev.allocs == 0


# -- choosing a strategy --------------------------------------------------------------------
@pytest.fixture
def fresh_choices(monkeypatch):
    monkeypatch.setattr(memory.registry, "_DEVICE_STRATEGY", {})
    monkeypatch.setattr(memory.registry, "_DEVICE_POOLS", {})


def test_the_default_comes_from_ember_memory(monkeypatch, fresh_choices):
    monkeypatch.delenv("EMBER_MEMORY", raising=False)
    assert BufferPool(int, lambda raw: None).strategy == "adaptive"
    monkeypatch.setenv("EMBER_MEMORY", "Static")
    assert BufferPool(int, lambda raw: None).strategy == "static"
    monkeypatch.setenv("EMBER_MEMORY", "greedy")
    with pytest.raises(InvalidArgumentError, match="EMBER_MEMORY='greedy'.*adaptive, static, exclusive"):
        BufferPool(int, lambda raw: None)


def test_device_memory_argument_switches_the_pools_of_that_device(fresh_choices):
    pool, dev = make("adaptive", device="cpu:0")
    a = pool.acquire(1000)
    del a
    assert pool.cached == fine_size(1000)
    device = em.Device("cpu", memory="static")
    assert device is em.Device.cpu()  # still the interned device
    assert device.memory.strategy == "static"
    assert pool.strategy == "static" and pool.cached == 0 and dev.releases == 1  # the cache went first
    assert BufferPool(int, lambda raw: None, device="cpu:0").strategy == "static"  # and new pools follow
    assert em.Device.cpu().autodiff().memory.strategy == "static"  # one choice per hardware
    em.Device.cpu().autodiff().memory.strategy = "exclusive"  # set through either variant
    assert pool.strategy == "exclusive" and em.Device.cpu().memory.strategy == "exclusive"


def test_a_bad_strategy_names_the_argument(fresh_choices):
    with pytest.raises(InvalidArgumentError, match=r"memory='fast': expected one of 'adaptive', 'static'"):
        em.Device("cpu", memory="fast")


def test_live_blocks_come_back_under_the_new_strategy():
    pool, dev = make("static")
    a = pool.acquire(5000)
    pool.set_strategy("exclusive")
    del a
    assert dev.releases == 1 and pool.reserved == 0 and pool.in_use == 0


def test_stats_name_the_strategy():
    pool, _ = make("adaptive")
    stats = memory.measured_stats({"device": pool})
    assert stats["strategy"] == "adaptive" and stats["pools"]["device"]["strategy"] == "adaptive"
    assert em.Device.cpu().memory_stats()["strategy"] is None  # numpy owns the CPU backend's memory
    gc.collect()


# -- sub-allocation: small blocks carved out of pages ----------------------------------------
def make_paged(strategy: str = "adaptive", alignment: int = 256) -> tuple[BufferPool, FakeDevice]:
    """A pool over the fake device whose blocks are (page, offset, nbytes) views, as opencl and cuda give."""
    dev = FakeDevice()
    pool = BufferPool(
        dev.allocate,
        dev.release,
        strategy=strategy,
        cache_limit=None,
        sub_allocate=lambda page, offset, nbytes: (page, offset, nbytes),
        alignment=alignment,
    )
    warm(pool, dev)
    return pool, dev


def warm(pool: BufferPool, dev: FakeDevice) -> None:
    """A 2 MiB peak in use, then nothing held: pages (32 KiB at that peak) are worth carving."""
    block = pool.acquire(2 << 20)
    del block
    pool.empty()
    dev.allocs = dev.releases = 0


def test_adaptive_carves_many_small_blocks_out_of_one_driver_buffer():
    pool, dev = make_paged()
    blocks = [pool.acquire(n) for n in (100, 3000, 40, 2000, 700)]  # each at most a quarter of a page
    assert dev.allocs == 1 and pool.stats()["pages"] == 1 and pool.carved == 5
    spans = sorted((b.raw[1], b.raw[1] + b.raw[2]) for b in blocks)
    assert all(b.raw[0] == blocks[0].raw[0] for b in blocks)  # one page
    assert all(start % 256 == 0 for start, _ in spans)  # aligned as asked
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))  # no two blocks overlap
    assert [b.nbytes for b in blocks] == [fine_size(n) for n in (100, 3000, 40, 2000, 700)]
    check_books(pool, dev)
    del blocks


def test_carved_blocks_are_reused_and_their_ranges_merge_back_into_the_page():
    pool, dev = make_paged()
    a, b, c = pool.acquire(4096), pool.acquire(4096), pool.acquire(4096)
    where = a.raw
    del a
    again = pool.acquire(4096)  # the cached block of that size: no carving, no driver call
    assert again.raw == where and pool.carved == 3
    del again, b, c
    pool.empty()  # every range back in its page, the page empty: released
    assert dev.live == {} and pool.reserved == 0 and pool.stats()["pages"] == 0
    check_books(pool, dev)


def test_an_alignment_larger_than_a_page_gets_a_page_that_holds_the_block():
    """A backend whose alignment (64 KiB) passes the page the pool would carve from (32 KiB at a 2 MiB peak
    in use) gets a page as large as the aligned block, so a small request still succeeds."""
    pool, dev = make_paged(alignment=1 << 16)
    block = pool.acquire(1000)
    assert isinstance(block.raw, tuple) and block.raw[1] == 0 and pool.carved == 1
    assert dev.allocs == 1 and max(dev.live.values()) >= 1 << 16
    del block
    check_books(pool, dev)


def test_large_requests_keep_a_driver_buffer_each():
    """Past SMALL_LIMIT, or past a quarter of the page the pool would carve from (32 KiB at a 2 MiB
    peak in use), a block is a driver buffer of its own: pages stay unfragmented."""
    pool, dev = make_paged()
    big = pool.acquire(SMALL_LIMIT + 512)
    mid = pool.acquire(9000)
    assert not isinstance(big.raw, tuple) and not isinstance(mid.raw, tuple)
    assert dev.allocs == 2 and pool.carved == 0
    del big, mid


def test_static_and_exclusive_do_not_carve():
    for strategy in ("static", "exclusive"):
        pool, dev = make_paged(strategy)
        blocks = [pool.acquire(1000) for _ in range(3)]
        assert dev.allocs == 3 and pool.carved == 0
        del blocks


def test_a_page_empty_under_another_strategy_goes_back_to_the_driver():
    pool, dev = make_paged()
    block = pool.acquire(1000)
    pool.set_strategy("exclusive")
    del block  # returns to its page, which is now empty; only adaptive keeps empty pages
    assert dev.live == {} and pool.reserved == 0


def test_the_backend_releases_each_view_it_made():
    dev = FakeDevice()
    released = []
    pool = BufferPool(
        dev.allocate,
        dev.release,
        strategy="adaptive",
        cache_limit=None,
        sub_allocate=lambda page, offset, nbytes: (page, offset, nbytes),
        sub_release=released.append,
    )
    warm(pool, dev)
    block = pool.acquire(2000)
    raw = block.raw
    del block
    pool.empty()
    assert released == [raw] and dev.live == {}


def test_a_larger_buffer_is_handed_out_early_only_within_the_headroom_pages_leave():
    """The slack of a larger free buffer handed to a smaller request shares adaptive's headroom with the
    free ranges of pages: with a page mostly free, a 4 MiB request is not handed the cached 4.25 MiB
    buffer (256 KiB slack beside ~127 KiB of free page, past 4% of an 8 MiB peak); it gets a buffer of
    its size, the larger one released (PoCL W4 reached 1.054x reserved / in use so, before its plan)."""
    dev = FakeDevice()
    pool = BufferPool(
        dev.allocate, dev.release, strategy="adaptive", cache_limit=None, sub_allocate=lambda p, o, n: (p, o, n)
    )
    peak = pool.acquire(8 << 20)
    del peak
    pool.empty()
    x = pool.acquire((4 << 20) + (256 << 10))
    x_raw = x.raw
    y = pool.acquire(7 << 19)
    small = pool.acquire(1000)  # carved: a 128 KiB page, nearly all of it free
    (page,) = pool._pages
    spare = page.size - page.used
    assert spare > 120 << 10
    del x
    b = pool.acquire(4 << 20)
    assert b.raw != x_raw and pool._slack == 0 and x_raw not in dev.live
    assert pool.reserved - pool.in_use <= HEADROOM * pool._high
    check_books(pool, dev)
    del b, y, small


def test_sub_allocation_refuses_an_odd_alignment():
    dev = FakeDevice()
    with pytest.raises(InvalidArgumentError, match="alignment"):
        BufferPool(dev.allocate, dev.release, sub_allocate=lambda p, o, n: p, alignment=48)


def make_deferring(busy: set[int], asked: list, submits: list | None = None) -> tuple[BufferPool, FakeDevice]:
    """A sub-allocating pool whose ``defer_release`` says the driver buffers in ``busy`` are in use (wgpu: the
    open batch references them, or a range of them); ``asked`` records what it was asked about, and
    ``on_pressure`` (a submit) empties ``busy`` and counts itself in ``submits``."""
    dev = FakeDevice()

    def is_busy(raw) -> bool:
        asked.append(raw)
        return raw in busy

    def submit() -> None:
        busy.clear()
        if submits is not None:
            submits.append(1)

    pool = BufferPool(
        dev.allocate,
        dev.release,
        strategy="adaptive",
        cache_limit=None,
        sub_allocate=lambda page, offset, nbytes: (page, offset, nbytes),
        defer_release=is_busy,
        on_pressure=submit,
    )
    warm(pool, dev)
    return pool, dev


def test_a_busy_page_waits_for_trim_and_carved_ranges_are_never_asked_about():
    """Sub-allocation with ``defer_release``: a page emptied while a range of it is busy (released outside
    an acquire, here by empty()) stays reserved until trim(); its ranges went back to it without a question."""
    busy: set[int] = set()
    asked: list = []
    pool, dev = make_deferring(busy, asked)
    blocks = [pool.acquire(4000) for _ in range(6)]
    (page,) = {b.raw[0] for b in blocks}  # all carved from one page
    busy.add(page)
    del blocks  # the carved blocks are cached; empty() returns them to the page and releases it
    pool.empty()
    assert pool.deferred == [page] and page in dev.live and dev.releases == 0
    assert pool.reserved == sum(dev.live.values())  # counted until it goes
    assert all(type(raw) is int for raw in asked)  # driver buffers only, never a carved view
    busy.clear()
    assert pool.trim() == 1 and dev.live == {} and pool.reserved == 0 and not pool.deferred


def test_a_busy_arena_released_inside_an_acquire_goes_after_on_pressure():
    """A step plan's arena, dropped inside an acquire (the program asked for another size) while the open
    batch uses it: the pool calls on_pressure() (a submit) and releases it then, not at the next trim();
    dropped outside an acquire (empty()), it waits for trim()."""
    for inside in (True, False):
        busy: set[int] = set()
        asked: list = []
        submits: list = []
        pool, dev = make_deferring(busy, asked, submits)
        for _ in range(4):
            chain_step(pool, STEP)
        arena = pool._arena
        assert pool.planned and arena is not None and not arena.count
        busy.add(arena.raw)
        if inside:
            held = pool.acquire(3 << 20)  # not the planned size: the plan is dropped, its arena released
            assert pool.plan_drops == 1 and submits == [1] and arena.raw not in dev.live
            assert not pool.deferred
            del held
        else:
            pool.empty()
            assert pool.deferred == [arena.raw] and arena.raw in dev.live and not submits
            busy.clear()
            pool.trim()
            assert arena.raw not in dev.live
        check_books(pool, dev)


#: a step of a forward chain: each block dies when the one after the next is asked for (sizes in 64 KiB)
STEP = [k << 16 for k in (4, 6, 8, 6, 4, 2, 3, 5, 7, 5, 3, 1)]


def chain_step(pool: BufferPool, sizes: list[int], avoid=None) -> None:
    """One step: ``sizes`` asked in order, each block alive until the one after the next is asked for."""
    held = []
    for i, size in enumerate(sizes):
        held.append(pool.acquire(size, avoid(i) if avoid is not None else None))
        if len(held) > 2:
            held.pop(0)
    held.clear()


@pytest.mark.parametrize("name", ["w3_batch16.json", "w4_batch4.json"])
def test_pages_cut_driver_calls_on_a_recorded_trace(name):
    """The same traces with pages: far fewer driver allocations than one buffer per block, reserved still
    within 5% of the peak in use; the books balance and everything returns to the pages at the end."""
    trace = json.loads((TRACES / name).read_text())
    plain, _ = replay(trace, "adaptive")
    static, _ = replay(trace, "static")
    dev = FakeDevice()
    pool = BufferPool(
        dev.allocate, dev.release, strategy="adaptive", cache_limit=None, sub_allocate=lambda p, o, n: (p, o, n)
    )
    live = {}
    for event in trace["events"]:
        if len(event) == 2:
            live[event[0]] = pool.acquire(event[1])
        else:
            live.pop(event[0], None)
    live.clear()
    assert pool.peak_in_use == plain.peak_in_use
    assert pool.in_use == 0 and pool.reserved == sum(dev.live.values())
    if name.startswith("w3"):
        assert pool.misses < plain.misses / 2, (pool.misses, plain.misses)
        assert pool.peak_reserved <= 1.05 * pool.peak_in_use and pool.peak_reserved < static.peak_reserved
    else:  # W4's trace peaks at 0.2 MiB: below 800 KiB no page fits in the headroom, nothing is carved
        # (its repeating step is planned into one arena from the third step on: ember.memory.plan)
        assert pool.carved == 0 and pool.peak_reserved <= 1.05 * pool.peak_in_use
    pool.empty()
    assert dev.live == {}


def test_out_of_memory_gives_back_pages_whose_blocks_all_came_back():
    """Out of memory, cached carved blocks return to their pages and the empty pages to the device
    before the retry; with nothing to give back the error says so."""
    dev = FakeDevice(capacity=2 << 20)
    pool = BufferPool(
        dev.allocate,
        dev.release,
        strategy="adaptive",
        cache_limit=None,
        sub_allocate=lambda page, offset, nbytes: (page, offset, nbytes),
    )
    warm(pool, dev)
    small = [pool.acquire(1024) for _ in range(10)]
    assert dev.allocs == 1 and pool.stats()["pages"] == 1
    del small  # cached, their page still held
    big = pool.acquire((2 << 20) - 4096)  # fits only once the page is gone
    assert pool.stats()["pages"] == 0 and list(dev.live.values()) == [(2 << 20) - 4096]
    assert pool.reserved == sum(dev.live.values())
    with pytest.raises(OutOfMemoryError, match="no cached buffers"):
        pool.acquire(8192)
    del big
