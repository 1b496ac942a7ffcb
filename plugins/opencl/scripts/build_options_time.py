"""What the driver's optimisation level costs a cold build of ember's own programs:

    python plugins/opencl/scripts/build_options_time.py [--device opencl:0] [--sample 80]
        [--variants ",-cl-nv-opt-level=0,-cl-opt-disable"] -- PYTEST ARGS
    e.g. ... -- --pyargs ember_conformance --ember-device=opencl:0 -k "float32 and elementwise" -q -x

Runs pytest in this process with a plugin that keeps the text and options of every program the
OpenCL program cache is asked for (empty ``EMBER_CACHE_DIR`` first: a cold run), then builds an even
sample of them again under each variant of build options (ember's own options plus the variant),
each text with a fresh ``#define`` in front so no driver cache answers, the variants in turn per
text. Prints per variant the summed and median build time and its ratio to ember's own options,
and how many programs failed: if a low optimisation level builds much faster, a cold program could
run from a quick build while the full one builds beside it (issue 10's cold conformance run is
~2,000 builds of ~0.16 s on NVIDIA). Set ``CUDA_CACHE_DISABLE=1`` too on NVIDIA. A probe, not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import pytest
from program_census import _caller  # (this folder: the module that asked for a program)

os.environ.setdefault("EMBER_OPENCL_BUILD_PROCESSES", "0")


class Sources:
    """pytest plugin: keeps every (source, options) the program cache is asked to build or load, and
    the seconds each new one took by the ember_opencl module that asked (built here: no workers)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], None] = {}
        self.by_module: dict[str, list[float]] = {}

    def pytest_configure(self, config: Any) -> None:
        from ember_opencl.cache import ProgramCache

        request = ProgramCache.request
        seen, by_module = self.seen, self.by_module

        def kept(cache: Any, source: str, options: str = "", pool: Any = None) -> Any:
            if cache.holds(source, options):
                return request(cache, source, options, pool)
            seen.setdefault((source, options), None)
            start = time.perf_counter()
            out = request(cache, source, options, pool)
            by_module.setdefault(_caller(), []).append(time.perf_counter() - start)
            return out

        ProgramCache.request = kept  # type: ignore[method-assign]


def _build(ctx: Any, device: Any, source: str, options: str, salt: int) -> float | None:
    import pyopencl as cl

    text = f"#define EMBER_PROBE_SALT_{salt} 1\n{source}"
    start = time.perf_counter()
    try:
        cl.Program(ctx, text).build(options=options, devices=[device], cache_dir=False)
    except Exception:
        return None
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="opencl:0")
    ap.add_argument("--sample", type=int, default=80, help="programs to build again (evenly spread)")
    ap.add_argument("--variants", default=",-cl-nv-opt-level=0,-cl-opt-disable", help="comma-separated extra options")
    args, rest = ap.parse_known_args()
    pytest_args = rest[1:] if rest[:1] == ["--"] else rest
    plugin = Sources()
    start = time.perf_counter()
    rc = pytest.main(pytest_args, plugins=[plugin])
    print(f"pytest: exit {rc}, {time.perf_counter() - start:.1f} s, {len(plugin.seen)} programs asked for")
    total = sum(sum(t) for t in plugin.by_module.values())
    print(f"time in new programs' requests (builds or disk loads): {total:.1f} s; by module:")
    for mod, t in sorted(plugin.by_module.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {mod:>16}: {len(t):5d} programs, {sum(t):7.2f} s, median {statistics.median(t) * 1e3:6.1f} ms")
    if not plugin.seen:
        return 1

    import pyopencl as cl

    from ember_opencl.runtime import device_list

    _platform, device = device_list()[int(args.device.split(":")[1])]
    ctx = cl.Context([device])
    print(f"{device.name.strip()} ({device.platform.name.strip()}, driver {device.driver_version})")
    programs = list(plugin.seen)
    step = max(1, len(programs) // args.sample)
    sample = programs[::step][: args.sample]
    variants = args.variants.split(",")
    times: dict[str, list[float]] = {v: [] for v in variants}
    failed = dict.fromkeys(variants, 0)
    salt = os.getpid() * 100_000
    for i, (source, options) in enumerate(sample):
        for k in range(len(variants)):
            variant = variants[(i + k) % len(variants)]  # each text's variants in turn: drift spreads evenly
            salt += 1
            took = _build(ctx, device, source, f"{options} {variant}".strip(), salt)
            if took is None:
                failed[variant] += 1
            else:
                times[variant].append(took)
    base = sum(times[variants[0]]) or float("nan")
    print(f"{len(sample)} programs built again under each variant (ember's options + the variant):")
    print(f"{'variant':>28} {'built':>6} {'failed':>6} {'sum s':>8} {'median ms':>10} {'max ms':>8} {'vs first':>9}")
    for v in variants:
        t = times[v]
        if not t:
            print(f"{v or '(ember options)':>28} {0:6d} {failed[v]:6d}")
            continue
        print(
            f"{v or '(ember options)':>28} {len(t):6d} {failed[v]:6d} {sum(t):8.2f} {statistics.median(t) * 1e3:10.1f}"
            f" {max(t) * 1e3:8.1f} {sum(t) / base:9.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
