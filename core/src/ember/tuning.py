"""The host side of a backend's GEMM tuner: shape classes, the timing loop, the on-disk choices, the CLI.

A backend subclasses :class:`GemmTuner` with what is specific to its API (its tile config type and
family, the limits filter, how a product is run, synchronised and read back, the device's identity)
and keeps one instance per process. Choices live in a :class:`ember.kernel_cache.KernelCache` per
(device, driver); one is kept per (dtype, shape class), the class bucketing each of M, N and K as
small (< 128), medium (< 2048) or large. A torn or corrupt entry reads as "not tuned". A large GEMM
(M N K >= 2**30) on a GPU with no cached choice is tuned on first use within
``EMBER_AUTOTUNE_BUDGET`` seconds (default 20) unless ``EMBER_AUTOTUNE=0``. Every candidate is
checked against numpy on an odd shape before it is timed, so a miscompiled one is never chosen.

A product whose operands come transposed (``x.T @ g``, ``g @ W.T``: a training step's gradients)
runs other loads than the row-major product its class was tuned on: where the backend can make a
transposed view (:meth:`GemmTuner.transposed`), such a layout gets its own choice, found by timing
the class's choice and the family's first :data:`REFINE` candidates under that layout (a few
seconds, once). On an H100's OpenCL the best tiling for W2's ``x @ W.T`` took 3.09 ms where the
row-major class's choice took 3.19 (``plugins/opencl/scripts/gemm_layout_time.py``).
"""

from __future__ import annotations

import json
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np

from .config import autotune_budget as _budget_setting
from .config import autotune_enabled as _enabled_setting
from .dtypes import as_dtype
from .kernel_cache import KernelCache

if TYPE_CHECKING:  # the tuner's CLI only (main, parse_shape): argparse stays off a device's opening
    import argparse

__all__ = [
    "GemmTuner", "TuningNotice", "TileConfig", "shape_class", "parse_shape", "autotune_enabled", "AUTOTUNE_FLOPS",
    "covering", "layout_of", "LAYOUTS", "REFINE", "LEADERS",
]  # fmt: skip

AUTOTUNE_FLOPS = 2**30
#: the family's leading candidates timed, beside the class's own choice, for an operand layout
REFINE = 6
#: the fastest candidates of a tuning pass timed again, alternating, for :data:`RETIME_ROUNDS`
#: rounds: the choice is the fastest of these second timings. Why: on an H100's Vulkan, wgpu's
#: first-use tuning of the row-major large class (at W2's 4096^3) chose a 64 x 64 tiling that runs
#: 4096^3 in 5.06 ms where the 128 x 128 ones take ~3.07 (W5: 28.8 TFLOP/s, 38.2 with the choice
#: another machine made), 2026-12-07: a candidate is timed over a few ms right after its kernels
#: compile, the GPU idle meanwhile, so its clocks and one lucky timing can decide
LEADERS, RETIME_ROUNDS = 4, 2
#: seconds of the first candidate's product run before the pass's first timing (the clocks' ramp),
#: and of each candidate's before its own timing (the GPU idled while it compiled)
WARM_S, WARM_EACH_S = 0.25, 0.03
#: operand layouts with a choice of their own: A, B or both column-major (a transposed view)
LAYOUTS = ("", "tA", "tB", "tAtB")
_DEFAULT_SHAPES = [(4096, 4096, 4096), (1024, 1024, 1024), (256, 256, 256)]


class TuningNotice(UserWarning):
    """A GEMM is being tuned on first use (seconds, once per device and driver): said once, so a slow
    step has a reason on screen. ``warnings.simplefilter("ignore", TuningNotice)`` silences it."""


class TileConfig(Protocol):
    """What the tuner needs of a backend's tile config: a validity check and a JSON-able dict."""

    def valid(self) -> bool: ...

    def as_dict(self) -> dict[str, Any]: ...


R = TypeVar("R")
C = TypeVar("C", bound=TileConfig)


def _bucket(x: int) -> str:
    return "s" if x < 128 else "m" if x < 2048 else "l"


def covering(configs: list[C], options: tuple[str, ...] | None = None) -> list[C]:
    """A few of ``configs`` that together take every value of each of ``options`` (default: every
    option) at least once, picked in order: what a device too slow to compile them all checks."""
    seen: set[tuple[str, Any]] = set()
    chosen: list[C] = []
    for config in configs:
        values = {(k, v) for k, v in config.as_dict().items() if options is None or k in options}
        if not values <= seen:
            chosen.append(config)
            seen |= values
    return chosen


def shape_class(M: int, N: int, K: int, layout: str = "") -> str:
    """``"lll"`` for 4096^3, ``"sll"`` for a 64-row GEMM...: small / medium / large per M, N, K;
    ``"lll/tB"`` for 4096^3 with B transposed (``layout``, one of :data:`LAYOUTS`)."""
    base = _bucket(M) + _bucket(N) + _bucket(K)
    return f"{base}/{layout}" if layout else base


def layout_of(a_transposed: bool, b_transposed: bool) -> str:
    """The :data:`LAYOUTS` name of a product whose A and/or B are column-major."""
    return ("tA" if a_transposed else "") + ("tB" if b_transposed else "")


def autotune_enabled() -> bool:
    """Whether a large untuned GEMM may be tuned on first use (``EMBER_AUTOTUNE``, default on)."""
    return _enabled_setting()


def _autotune_budget() -> float:
    """Seconds a first-use tuning may take (``EMBER_AUTOTUNE_BUDGET``)."""
    return _budget_setting()


def parse_shape(text: str) -> tuple[int, int, int]:
    """``"N"`` or ``"MxNxK"`` as (M, N, K), for the ``--shape`` option of a tuner's CLI."""
    import argparse  # noqa: PLC0415  (the CLI's option parser only)

    parts = [int(p) for p in text.lower().replace("x", " ").split()]
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"shape must be N or MxNxK, got {text!r}")
    return parts[0], parts[1], parts[2]


def _error_text(exc: Exception) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text.splitlines()[0][:200] if text else ''}"


class GemmTuner(Generic[R, C]):
    """One backend's tuner; the methods that raise ``NotImplementedError`` are its API-specific part."""

    #: the backend's name: the store is ``<backend>-tuning``, the CLI ``python -m ember_<backend>.tune``
    backend: str = ""
    #: what the CLI tunes ("OpenCL device"), and its ``--device`` help
    device_kind: str = "device"
    device_help: str = "device index"
    #: the backend's tile config type (built from a family tuple or from its stored ``as_dict()``)
    config_type: Callable[..., C]
    #: the searched family: argument tuples of ``config_type``
    family: Sequence[tuple[Any, ...]] = ()
    #: the key a stored choice and a timing row hold the config under
    entry: str = "config"
    #: part of every stored choice's key: a backend raises it when its timings change meaning, so that
    #: choices made under the old rule are tuned again
    version: int = 1

    def __init__(self) -> None:
        self._stores: weakref.WeakKeyDictionary[Any, KernelCache] = weakref.WeakKeyDictionary()
        self._memo: weakref.WeakKeyDictionary[Any, dict[str, C | None]] = weakref.WeakKeyDictionary()
        self._busy: set[int] = set()
        self._no_layouts: set[str] = set()  # layouts this backend cannot build operands for

    # -- the backend's part -------------------------------------------------------------
    def fits(self, rt: R, c: C, dt: str) -> bool:
        """Whether ``rt`` can run ``c`` for ``dt``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement fits")

    def identity(self, rt: R) -> tuple[str, str]:
        """(device name, driver version) naming ``rt``'s store."""
        raise NotImplementedError(f"{type(self).__name__} does not implement identity")

    def is_cpu(self, rt: R) -> bool:
        """Whether ``rt`` is a CPU device (never tuned on first use)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement is_cpu")

    def matmul(self, rt: R, a: Any, b: Any, c: C) -> Any:
        """``a @ b`` on the device with config ``c``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement matmul")

    def sync(self, rt: R) -> None:
        """Wait until the device has finished what was queued."""
        raise NotImplementedError(f"{type(self).__name__} does not implement sync")

    def download(self, rt: R, arr: Any) -> np.ndarray:
        """A device result as a numpy array."""
        raise NotImplementedError(f"{type(self).__name__} does not implement download")

    def transposed(self, rt: R, arr: Any) -> Any:
        """A transposed view of a 2-D device array (no copy); backends without one keep a single
        choice per shape class (the base raises ``NotImplementedError``)."""
        raise NotImplementedError

    def check_shape(self, c: C) -> tuple[int, int, int]:
        """(M, K, N) of the odd, edge-heavy product each candidate must get right."""
        raise NotImplementedError(f"{type(self).__name__} does not implement check_shape")

    def check_shapes(self, c: C) -> list[tuple[int, int, int]]:
        """Every (M, K, N) a candidate must get right (default: :meth:`check_shape`); a backend whose
        kernels vary with the operands' alignment lists one shape per variant."""
        return [self.check_shape(c)]

    def host_dtype(self, dt: str) -> np.dtype:
        """The numpy dtype test operands are drawn in for ``dt``."""
        return np.dtype(dt)

    def label(self, rt: R, args: argparse.Namespace) -> str:
        """How the CLI names the device."""
        return f"device {args.device}"

    def runtime(self, args: argparse.Namespace) -> R:
        """The runtime the CLI tunes."""
        raise NotImplementedError(f"{type(self).__name__} does not implement runtime")

    def add_arguments(self, ap: argparse.ArgumentParser) -> None:
        """Backend-specific CLI options (none by default)."""

    def skip(self, rt: R, args: argparse.Namespace) -> str | None:
        """A reason the CLI does not tune ``rt``, or None."""
        return None

    # -- shared -------------------------------------------------------------------------
    def candidates(self, rt: R, dt: str) -> list[C]:
        """The family's configs that ``rt`` can run for ``dt``."""
        return [c for c in (self.config_type(*spec) for spec in self.family) if self.fits(rt, c, dt)]

    def store_for(self, rt: R) -> KernelCache:
        """The tuning store of ``rt``'s device (one per runtime)."""
        found = self._stores.get(rt)
        if found is None:
            found = self._stores[rt] = KernelCache(f"{self.backend}-tuning", *self.identity(rt))
        return found

    def key(self, store: KernelCache, dt: str, cls: str) -> Any:
        """The store key of the choice for (``dt``, ``cls``)."""
        return store.key(f"ember-{self.backend} gemm tuning v{self.version}\n{dt}\n{cls}")

    def forget(self, rt: R) -> None:
        """Drop what this process remembers of the disk store (the next lookup reads it again)."""
        self._memo.pop(rt, None)

    def read(self, rt: R, dt: str, cls: str) -> C | None:
        """The stored choice for (``dt``, ``cls``), None when there is none or it is unreadable."""
        memo = self._memo.setdefault(rt, {})
        name = f"{dt}:{cls}"
        if name in memo:
            return memo[name]
        store = self.store_for(rt)
        payload = store.load(self.key(store, dt, cls))
        found = None
        if payload is not None:
            try:
                found = self.config_type(**json.loads(payload)[self.entry])
            except (ValueError, TypeError, KeyError):
                found = None
            if found is not None and not found.valid():
                found = None
        memo[name] = found
        return found

    def lookup(self, rt: R, dt: str, M: int, N: int, K: int, layout: str = "") -> C | None:
        """The cached config for this shape's class (and operand ``layout``), tuning a large GPU GEMM
        on first use (bounded): the row-major class first, then the layout among a few candidates."""
        own = self.read(rt, dt, shape_class(M, N, K, layout)) if layout else None
        if own is not None:
            return own
        found = self.read(rt, dt, shape_class(M, N, K))
        if found is None and id(rt) not in self._busy and not self.is_cpu(rt):
            if M * N * K >= AUTOTUNE_FLOPS and autotune_enabled():
                found = self._first_use(rt, dt, M, N, K, "")
        if not layout or found is None or layout in self._no_layouts or id(rt) in self._busy or self.is_cpu(rt):
            return found
        if M * N * K < AUTOTUNE_FLOPS or not autotune_enabled():
            return found
        return self._first_use(rt, dt, M, N, K, layout, [found]) or found

    def _first_use(self, rt: R, dt: str, M: int, N: int, K: int, layout: str, first: Sequence[C] = ()) -> C | None:
        """Tune a class on first use, said once by a :class:`TuningNotice`: the whole family within the
        budget for row-major operands, ``first`` and the family's :data:`REFINE` leaders for a layout."""
        budget = _autotune_budget()
        name, _ = self.identity(rt)
        what = shape_class(M, N, K, layout)
        warnings.warn(
            f"ember-{self.backend}: tuning {dt} GEMM ({what} M/N/K) on {name} for up to {budget:g} s, once per "
            f"device and driver: the choice is cached (EMBER_AUTOTUNE=0 skips this; `python -m "
            f"ember_{self.backend}.tune` tunes ahead of time)",
            TuningNotice,
            stacklevel=3,
        )
        choices = None
        if layout:
            choices = list(first)
            for c in self.candidates(rt, dt)[:REFINE]:
                if c not in choices:
                    choices.append(c)
        try:
            found, _ = self.tune(rt, dt, M, N, K, choices=choices, budget_s=budget, layout=layout)
        except NotImplementedError:  # no transposed views on this backend: one choice per class
            self._no_layouts.add(layout)
            return None
        return found

    def record(self, rt: R, dt: str, cls: str, c: C, gflops: float | None = None) -> bool:
        """Store ``c`` as the choice for (``dt``, ``cls``) on this device; False when the store is off."""
        store = self.store_for(rt)
        payload = {self.entry: c.as_dict(), "gflops": gflops, "dtype": dt, "class": cls, "when": time.time()}
        self._memo.setdefault(rt, {})[f"{dt}:{cls}"] = c
        return store.store(self.key(store, dt, cls), json.dumps(payload).encode())

    def operand(self, rt: R, host: np.ndarray, dt: str, transposed: bool) -> Any:
        """``host`` on the device, as a transposed view of its transpose where ``transposed``."""
        if not transposed:
            return rt.upload(host, as_dtype(dt))  # type: ignore[attr-defined]
        return self.transposed(rt, rt.upload(np.ascontiguousarray(host.T), as_dtype(dt)))  # type: ignore[attr-defined]

    def check(self, rt: R, dt: str, c: C, layout: str = "") -> bool:
        """Whether ``c`` computes odd-shaped, edge-heavy products right (against numpy float64), with
        the operands in ``layout``."""
        rng = np.random.default_rng(0)
        npdt = self.host_dtype(dt)
        tol = 1e-2 if npdt.itemsize <= 2 else 1e-4
        for m, k, n in self.check_shapes(c):
            a = rng.standard_normal((m, k)).astype(npdt)
            b = rng.standard_normal((k, n)).astype(npdt)
            da = self.operand(rt, a, dt, "tA" in layout)
            db = self.operand(rt, b, dt, "tB" in layout)
            got = self.download(rt, self.matmul(rt, da, db, c))
            want = a.astype(np.float64) @ b.astype(np.float64)
            if not np.allclose(got.astype(np.float64), want, rtol=tol, atol=tol * 10):
                return False
        return True

    def time(self, rt: R, c: C, a: Any, b: Any, reps: int) -> float:
        """The best of ``reps`` timed runs of ``a @ b`` with ``c``, after one to compile and warm."""
        self.matmul(rt, a, b, c)
        self.sync(rt)
        best = float("inf")
        for _ in range(reps):
            start = time.perf_counter()
            self.matmul(rt, a, b, c)
            self.sync(rt)
            best = min(best, time.perf_counter() - start)
        return best

    def _warm(self, rt: R, choices: Sequence[C], a: Any, b: Any, seconds: float) -> None:
        """Run the product with the first of ``choices`` that runs, for ``seconds`` (the GPU's clocks up)."""
        end = time.perf_counter() + seconds
        for c in choices:
            try:
                while time.perf_counter() < end:
                    self.matmul(rt, a, b, c)
                    self.sync(rt)
                return
            except Exception:  # the timing pass reports it
                continue

    def _retime(
        self, rt: R, leaders: list[tuple[C, dict[str, Any]]], a: Any, b: Any, reps: int
    ) -> tuple[float, C] | None:
        """The fastest of ``leaders`` (config, row) timed again in turn, :data:`RETIME_ROUNDS` rounds."""
        if len(leaders) < 2:
            return (leaders[0][1]["seconds"], leaders[0][0]) if leaders else None
        again: dict[int, float] = {}
        for _ in range(RETIME_ROUNDS):
            for i, (c, _row) in enumerate(leaders):
                again[i] = min(again.get(i, float("inf")), self.time(rt, c, a, b, reps))
        for i, (_c, row) in enumerate(leaders):
            row["retimed"] = again[i]
        i = min(again, key=again.__getitem__)
        return again[i], leaders[i][0]

    def tune(
        self,
        rt: R,
        dt: str,
        M: int,
        N: int,
        K: int,
        *,
        choices: list[C] | None = None,
        budget_s: float = 60.0,
        reps: int = 3,
        save: bool = True,
        layout: str = "",
    ) -> tuple[C | None, list[dict[str, Any]]]:
        """Time ``choices`` (default :meth:`candidates`) on an M x N x K GEMM with operands in ``layout``
        (one of :data:`LAYOUTS`); store and return the fastest.

        Stops starting candidates once ``budget_s`` has passed. The first candidate's product runs for
        :data:`WARM_S` before any timing and each candidate's for :data:`WARM_EACH_S` before its own;
        then the :data:`LEADERS` fastest are timed again in turn and the fastest of those timings wins.
        Returns the winner (None if no candidate ran) and one row per candidate: config, seconds,
        GFLOP/s or error (a leader's also ``retimed``: its second best)."""
        choices = self.candidates(rt, dt) if choices is None else [c for c in choices if self.fits(rt, c, dt)]
        rows: list[dict[str, Any]] = []
        start = time.perf_counter()
        self._busy.add(id(rt))
        try:
            rng = np.random.default_rng(1)
            npdt = self.host_dtype(dt)
            a = self.operand(rt, rng.standard_normal((M, K)).astype(npdt), dt, "tA" in layout)
            b = self.operand(rt, rng.standard_normal((K, N)).astype(npdt), dt, "tB" in layout)
            self._warm(rt, choices, a, b, WARM_S)
            timed: list[tuple[float, int]] = []  # (seconds, row index)
            for c in choices:
                if rows and time.perf_counter() - start > budget_s:
                    break
                row: dict[str, Any] = {self.entry: c.as_dict()}
                try:
                    if not self.check(rt, dt, c, layout):
                        row["error"] = "wrong result"
                    else:
                        self._warm(rt, [c], a, b, WARM_EACH_S)
                        sec = self.time(rt, c, a, b, reps)
                        row["seconds"] = sec
                        row["gflops"] = 2.0 * M * N * K / sec / 1e9
                        timed.append((sec, len(rows)))
                except Exception as exc:  # a candidate the driver cannot build or run is skipped
                    row["error"] = _error_text(exc)
                rows.append(row)
            best = self._retime(rt, [(choices[i], rows[i]) for _, i in sorted(timed)[:LEADERS]], a, b, reps)
        finally:
            self._busy.discard(id(rt))
        if best is None:
            return None, rows
        if save:
            self.record(rt, dt, shape_class(M, N, K, layout), best[1], 2.0 * M * N * K / best[0] / 1e9)
        return best[1], rows

    def main(self, argv: list[str] | None = None) -> int:
        """The tuner's CLI: tune GEMM on one device for the given shapes and cache the choices."""
        import argparse  # noqa: PLC0415  (the CLI only)

        prog = f"python -m ember_{self.backend}.tune"
        ap = argparse.ArgumentParser(
            prog=prog, description=f"``{prog}``: tune GEMM on one {self.device_kind} and cache the choices."
        )
        ap.add_argument("--device", type=int, default=0, help=self.device_help)
        ap.add_argument("--dtype", default="float32")
        shapes_help = "N or MxNxK (repeatable); default 4096, 1024, 256"
        ap.add_argument("--shape", type=parse_shape, action="append", help=shapes_help)
        ap.add_argument("--budget", type=float, default=60.0, help="seconds per shape")
        ap.add_argument("--reps", type=int, default=3)
        ap.add_argument("--layout", choices=LAYOUTS, default="", help="operands transposed: tA, tB or tAtB")
        self.add_arguments(ap)
        ap.add_argument("--json", help="write every timing here")
        args = ap.parse_args(argv)
        rt = self.runtime(args)
        reason = self.skip(rt, args)
        if reason is not None:
            print(reason)
            return 0
        device, driver = self.identity(rt)
        report: dict[str, Any] = {"device": device, "driver": driver, "runs": []}
        label = self.label(rt, args)
        for M, N, K in args.shape or _DEFAULT_SHAPES:
            best, rows = self.tune(rt, args.dtype, M, N, K, budget_s=args.budget, reps=args.reps, layout=args.layout)
            cls = shape_class(M, N, K, args.layout)
            print(f"{label} {args.dtype} {M}x{N}x{K} (class {cls}):")
            for row in sorted(rows, key=lambda r: -r.get("gflops", 0)):
                what = f"{row['gflops']:9.1f} GFLOP/s" if "gflops" in row else row["error"]
                print(f"  {what}  {row[self.entry]}")
            chosen = best.as_dict() if best else None
            print(f"  -> {chosen or 'nothing ran'}")
            report["runs"].append({"shape": [M, N, K], "class": cls, "rows": rows, "best": chosen})
        print(f"cached in {self.store_for(rt).directory}")
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(report, f, indent=1)
        return 0
