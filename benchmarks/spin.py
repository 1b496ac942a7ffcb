"""Run one workload's ember step many times, for a sampling profiler watching from outside
(py-spy: ``py-spy record -r 1000 -f raw -o w3.txt -- python -m benchmarks.spin W3 --device cuda:0``),
then summarise its collapsed stacks with ``python -m benchmarks.spin --stacks w3.txt --under timed``: the share
of samples in each function (self) and under it (total). A sampler costs the process nothing
between samples, so the shares are those of the real step, unlike cProfile's (which inflates
every Python call)."""

from __future__ import annotations

import argparse
import time
from collections import Counter

from .runner import WORKLOADS


def spin(workload: str, device: str, sizes: str, steps: int, jit: bool) -> None:
    import ember as em

    module = WORKLOADS[workload]
    build = module.ember_jit if jit else module.ember
    case = build(em.Device(device), dict(module.SIZES[sizes]))
    for _ in range(5):
        case.step()
    case.sync()
    t0 = time.perf_counter()
    timed(case, steps)
    print(f"{workload} {device} {'em.jit' if jit else 'eager'}: {(time.perf_counter() - t0) / steps * 1e3:.3f} ms/step")


def timed(case: object, steps: int) -> None:
    """The timed steps, a frame of their own: ``--stacks F --under timed`` leaves the warm-up out."""
    for _ in range(steps):
        case.step()  # type: ignore[attr-defined]
    case.sync()  # type: ignore[attr-defined]


def stacks(path: str, top: int, only: str | None) -> str:
    """Self and total shares per function from py-spy's raw (collapsed) output: one line per
    distinct stack, ``frame;frame;... count``; frames are ``function (file:line)``."""
    own: Counter[str] = Counter()
    under: Counter[str] = Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            count = int(n)
            frames = [_name(fr) for fr in stack.split(";")]
            if only is not None:
                if not any(only in fr for fr in frames):
                    continue
                frames = frames[next(i for i, fr in enumerate(frames) if only in fr) :]
            total += count
            own[frames[-1]] += count
            for fr in set(frames):
                under[fr] += count
    out = [f"{total} samples" + (f" under {only}" if only else "")]
    out.append(f"{'self %':>7} {'total %':>7}  function")
    for name, n in own.most_common(top):
        out.append(f"{100 * n / total:7.1f} {100 * under[name] / total:7.1f}  {name}")
    out.append("")
    out.append(f"{'total %':>7}  function (by total)")
    for name, n in under.most_common(top):
        out.append(f"{100 * n / total:7.1f}  {name}")
    return "\n".join(out)


def _name(frame: str) -> str:
    """``fn (path/to/file.py:12)`` -> ``fn (file.py:12)``: short, and lines kept apart."""
    fn, _, where = frame.partition(" (")
    where = where.rstrip(")")
    return f"{fn} ({where.rsplit('/', 1)[-1]})" if where else fn


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.spin", description=__doc__.split("\n\n")[0])
    p.add_argument("workload", nargs="?", choices=sorted(WORKLOADS))
    p.add_argument("--device", default="cpu")
    p.add_argument("--sizes", default="gpu")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--jit", action="store_true")
    p.add_argument("--stacks", help="summarise py-spy's raw output at this path instead of running")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--under", help="with --stacks: only samples with a frame containing this text, from it down")
    args = p.parse_args(argv)
    if args.stacks:
        print(stacks(args.stacks, args.top, args.under))
        return 0
    if args.workload is None:
        p.error("a workload (W1..W6) or --stacks PATH")
    spin(args.workload, args.device, args.sizes, args.steps, args.jit)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
