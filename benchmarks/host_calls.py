"""Python function calls per workload step: a deterministic measure of host (interpreter) work,
where wall-clock on a loaded machine is noise.

``python -m benchmarks.host_calls W3 --device cpu [--batch 8] [--fusion 0|1] [--top 30]``

Builds the ember case of a workload (its ``quick`` size unless ``--batch``/``--size`` say
otherwise), warms it up, then counts over ``--steps`` steps (each followed by the device's
synchronize): every Python-level call (``sys.setprofile`` 'call' events) and every call into
C ('c_call'), per step; ``--top N`` adds a per-function breakdown (cProfile, calls per step).
``--fusion 0`` runs with the lazy layer off (as the runner's ember-unfused row), ``1`` on,
default: the device's own setting. Counts vary slightly with the memory pool's periodic work
(planning, idle scans), so steps are averaged.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import os
import pstats
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

from .runner import WORKLOADS


def _size(module: Any, args: argparse.Namespace) -> dict[str, int]:
    size = dict(module.SIZES[args.sizes])
    if args.batch is not None:
        size["batch"] = args.batch
    for item in args.size or ():
        key, _, value = item.partition("=")
        size[key] = int(value)
    return size


#: frames that Python 3.12 no longer makes (PEP 709 inlines list, dict and set comprehensions)
_INLINED = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>"})


def count_calls(step: Any, sync: Any, steps: int) -> dict[str, float]:
    """Per step, averaged over ``steps`` steps: Python calls (``python``), those less comprehension
    frames (``py312``: what Python 3.12 makes), those of ember's core package (``core``, also less
    comprehensions: what the core's host work is), and calls into C (``c``)."""
    import ember

    counts: Counter[str] = Counter()
    inlined = _INLINED
    core = os.path.dirname(ember.__file__) + os.sep

    def prof(frame: Any, event: str, arg: Any) -> None:
        counts[event] += 1
        if event == "call":
            code = frame.f_code
            if code.co_name in inlined:
                counts["comprehension"] += 1
            elif code.co_filename.startswith(core):
                counts["core"] += 1

    gc.collect()
    sys.setprofile(prof)
    try:
        for _ in range(steps):
            out = step()
            sync()
            del out
    finally:
        sys.setprofile(None)
    return {
        "python": counts["call"] / steps,
        "py312": (counts["call"] - counts["comprehension"]) / steps,
        "core": counts["core"] / steps,
        "c": counts["c_call"] / steps,
    }


def breakdown(step: Any, sync: Any, steps: int, top: int, sort: str) -> str:
    """cProfile's table of the ``top`` functions by ``sort`` (ncalls or tottime), calls per step."""
    prof = cProfile.Profile()
    gc.collect()
    prof.enable()
    for _ in range(steps):
        out = step()
        sync()
        del out
    prof.disable()
    st = pstats.Stats(prof)
    rows = []
    for (file, line, name), (_cc, nc, tt, ct, _) in st.stats.items():
        rows.append((nc / steps, tt / steps, ct / steps, f"{_short(file)}:{line}({name})"))
    key = 0 if sort == "ncalls" else 1
    rows.sort(key=lambda r: -r[key])
    out = [f"{'calls/step':>10} {'tottime us':>10} {'cumtime us':>10}  function"]
    for nc, tt, ct, where in rows[:top]:
        out.append(f"{nc:10.1f} {tt * 1e6:10.1f} {ct * 1e6:10.1f}  {where}")
    return "\n".join(out)


def _short(file: str) -> str:
    for marker in ("/ember/", "/ember_cpu/", "/ember_cuda/", "/benchmarks/"):
        if marker in file:
            return marker.strip("/") + "/" + file.split(marker, 1)[1]
    return file


def _set_least(device: Any, least: int) -> None:
    """Make ``device``'s lazy hook defer ops of any size from ``least`` elements (a GPU backend's 0)."""
    from ember.device import set_defer

    _ = device.backend  # loads the backend, which installs the hook
    hook = device._state.defer
    if hook is None:
        raise SystemExit(f"--least: {device} has no lazy layer (fusion off or a backend that does not fuse)")
    hook.least = least
    set_defer(device, hook)


def like_gpu(device: Any, least: int = 0) -> None:
    """Make cpu ``device`` take a GPU backend's core path: the lazy layer defers ops from ``least``
    elements, no cheap readback (no host reads of targets), no in-place offers (as cuda)."""
    device.backend.cheap_readback = False  # this process's backend object only
    _set_least(device, least)
    device._state.defer.donate = False  # (only the cpu backend takes outs=)


@contextlib.contextmanager
def prepared(args: argparse.Namespace) -> Iterator[tuple[Any, dict[str, int], Any]]:
    """(device, size, case) of ``args.workload``'s ember step, warmed up ``args.warmup`` steps, inside
    the lazy layer's setting ``args.fusion`` (None: the device's), on the GPU path with ``args.like_gpu``
    and the lazy layer's least size ``args.least`` where given (host_calls and host_time share it)."""
    import ember as em

    module = WORKLOADS[args.workload]
    device = em.Device(args.device)
    size = _size(module, args)
    fusion = em.lazy.fusion(args.fusion == "1", device) if args.fusion is not None else contextlib.nullcontext()
    least = getattr(args, "least", None)
    with fusion:
        if args.like_gpu:
            like_gpu(device, 0 if least is None else least)
        elif least is not None:
            _set_least(device, least)
        case = module.ember(device, size)
        for _ in range(args.warmup):
            out = case.step()
            case.sync()
            del out
        yield device, size, case


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.host_calls", description=__doc__.split("\n\n")[0])
    p.add_argument("workload", choices=sorted(WORKLOADS))
    p.add_argument("--device", default="cpu")
    p.add_argument("--sizes", default="quick", help="size set of the workload (quick, cpu, gpu, check)")
    p.add_argument("--batch", type=int, help="override the size's batch")
    p.add_argument("--size", action="append", help="override one size key: KEY=INT (repeatable)")
    p.add_argument("--fusion", choices=("0", "1"), help="lazy layer off/on (default: the device's setting)")
    p.add_argument(
        "--least",
        type=int,
        help="set the lazy layer's fusion_min_elements (0: every op through the hook, as on the GPU backends)",
    )
    p.add_argument(
        "--like-gpu",
        action="store_true",
        help=(
            "on cpu, take a GPU backend's core path: --least 0, no cheap readback (no host reads of "
            "targets), no in-place offers to fused kernels (as cuda)"
        ),
    )
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--top", type=int, default=0, help="per-function breakdown: the top N functions")
    p.add_argument("--sort", choices=("ncalls", "tottime"), default="ncalls")
    args = p.parse_args(argv)

    if args.like_gpu and args.least is None:
        args.least = 0
    with prepared(args) as (device, size, case):
        n = count_calls(case.step, case.sync, args.steps)
        label = f"fusion={args.fusion}" if args.fusion is not None else "fusion=device default"
        if args.least is not None:
            label += f", least={args.least}"
        if args.like_gpu:
            label += ", like-gpu"
        print(
            f"{args.workload} {device} {size} {label}: {n['python']:.0f} Python calls/step "
            f"({n['py312']:.0f} without comprehension frames, {n['core']:.0f} of them in ember's core), "
            f"{n['c']:.0f} C calls/step"
        )
        if args.top:
            print(breakdown(case.step, case.sync, args.steps, args.top, args.sort))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
