"""Which modules' programs a cold conformance run builds, and which of them differ only by numbers:

    python plugins/opencl/scripts/program_census.py [--as-gpu] [--jsonl F | --report F] [--top N] -- PYTEST ARGS
    e.g. ... -- --pyargs ember_conformance --ember-device=opencl:0 -k elementwise -q -x

Runs pytest in this process with a plugin that records every program the OpenCL program cache
builds or loads (not one found in memory): the ember_opencl module that asked for it (the first
frame outside runtime/cache), its kernels' names, its length and hash. At the end it prints the
builds by module, the kernel-name stems that built most, and the largest groups of texts that are
the same once every number is replaced by ``#`` (constants baked into the text: candidates for
kernel arguments or one shared program), and the elementwise programs by layout (rank, input and
output modes, index type, 4-wide or not: the keys that multiply them). ``--as-gpu`` makes a CPU
device's runtime take a GPU's paths (grid-stride and 4-wide kernels: NVIDIA's set of programs).
Empty ``EMBER_CACHE_DIR`` first for a cold count. A probe, not a test.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import re
import sys
import time
from typing import Any

import pytest

_NUMBER = re.compile(r"(?<![A-Za-z_])\d+(\.\d*)?([eE][-+]?\d+)?[fFuUlL]*")
_KERNEL = re.compile(r"__kernel\s+(?:__attribute__\(\(.*?\)\)\s*)?void\s+(\w+)")
_STEM = re.compile(r"_?\d+$|_(?:f16|f32|f64|i8|i16|i32|i64|u8|u16|u32|u64|b8|c64|c128)\b")


def _caller() -> str:
    """The ember_opencl module (not runtime/cache) whose code asked for the program."""
    frame = sys._getframe(2)
    while frame is not None:
        mod = frame.f_globals.get("__name__", "")
        if mod.startswith("ember_opencl.") and mod.split(".")[1] not in ("runtime", "cache", "build_worker"):
            return mod.split(".")[1]
        frame = frame.f_back
    return "?"


class Census:
    """pytest plugin: wraps :meth:`ProgramCache.request` and tallies the programs asked of the driver."""

    def __init__(self, as_gpu: bool, jsonl: str | None = None) -> None:
        self.as_gpu = as_gpu
        #: every record also appended here as it comes (a run cut short still tells)
        self.jsonl = open(jsonl, "w") if jsonl else None
        self.records: list[dict[str, Any]] = []
        self.test = ""
        #: what the module making the program said of it (elementwise: its layout)
        self.tag = ""

    def pytest_configure(self, config: Any) -> None:
        from ember_opencl.cache import ProgramCache

        request = ProgramCache.request
        census = self

        def recorded(cache: Any, source: str, options: str = "", pool: Any = None) -> Any:
            new = not cache.holds(source, options)
            start = time.perf_counter()
            out = request(cache, source, options, pool)
            if new:
                names = _KERNEL.findall(source)
                census.add(
                    {
                        "module": _caller(),
                        "kernels": names,
                        "chars": len(source),
                        "hash": hashlib.sha1(source.encode()).hexdigest()[:12],
                        "shape": hashlib.sha1(_NUMBER.sub("#", source).encode()).hexdigest()[:12],
                        "test": census.test,
                        "s": round(time.perf_counter() - start, 4),
                    }
                )
            return out

        ProgramCache.request = recorded  # type: ignore[method-assign]
        self._tag_elementwise()
        if self.as_gpu:
            from ember_opencl import runtime

            init = runtime.Runtime.__init__

            def as_gpu(rt: Any, index: int) -> None:
                init(rt, index)
                rt.is_cpu, rt.compute_units = False, 4

            runtime.Runtime.__init__ = as_gpu  # type: ignore[method-assign]

    def _tag_elementwise(self) -> None:
        """Elementwise programs are tagged with their :class:`Layout` (rank, modes, index, vec),
        fused reductions with their program's hash and launch spec (modes, ranks, index, group...)."""
        from ember_opencl import elementwise

        census = self
        for name in ("_make", "_family_source"):
            inner = getattr(elementwise, name)

            def tagged(*args: Any, _inner: Any = inner, **kw: Any) -> Any:
                lay = args[1]
                census.tag = (
                    f"r{lay.rank} in={''.join(lay.in_modes)} out={''.join(lay.out_modes)} {lay.index} v{lay.vec}"
                )
                return _inner(*args, **kw)

            setattr(elementwise, name, tagged)
        from ember_opencl import fused_reduce

        make = fused_reduce._make

        def tagged_reduce(prog: Any, *spec: Any) -> Any:
            census.tag = f"prog {hash(prog) & 0xFFFFFF:06x} spec {spec}"
            return make(prog, *spec)

        fused_reduce._make = tagged_reduce

    def add(self, record: dict[str, Any]) -> None:
        record["tag"], self.tag = self.tag, ""
        self.records.append(record)
        if self.jsonl is not None:
            self.jsonl.write(json.dumps(record) + "\n")
            self.jsonl.flush()

    def pytest_runtest_setup(self, item: Any) -> None:
        self.test = item.nodeid


def report(records: list[dict[str, Any]], top: int) -> None:
    seconds = sum(r["s"] for r in records)
    print(f"\n== {len(records)} programs built or loaded; seconds on the calling thread {seconds:.1f}")
    by_module = collections.Counter(r["module"] for r in records)
    secs = collections.defaultdict(float)
    for r in records:
        secs[r["module"]] += r["s"]
    print("-- by module: programs, seconds, mean chars, kernels")
    for mod, n in by_module.most_common():
        rs = [r for r in records if r["module"] == mod]
        print(
            f"  {mod:14s} {n:5d} {secs[mod]:7.1f}s {sum(r['chars'] for r in rs) / n:7.0f}"
            f" {sum(len(r['kernels']) for r in rs):6d}"
        )
    stems = collections.Counter()
    for r in records:
        stems[(r["module"], _STEM.sub("", r["kernels"][0]) if r["kernels"] else "?")] += 1
    print(f"-- top {top} kernel-name stems (first kernel of the program)")
    for (mod, stem), n in stems.most_common(top):
        print(f"  {n:5d}  {mod}:{stem}")
    layouts = collections.Counter(r.get("tag", "") for r in records if r["module"] == "elementwise")
    print(f"-- elementwise programs by layout (top {top})")
    for tag, n in layouts.most_common(top):
        print(f"  {n:5d}  {tag}")
    groups = collections.defaultdict(list)
    for r in records:
        groups[r["shape"]].append(r)
    dup = sorted((g for g in groups.values() if len(g) > 1), key=len, reverse=True)
    print(
        f"-- texts the same but for numbers: {sum(len(g) - 1 for g in dup)} avoidable in {len(dup)} groups; top {top}"
    )
    for g in dup[:top]:
        print(f"  {len(g):5d}  {g[0]['module']}:{','.join(g[0]['kernels'][:3])}  ({g[0]['chars']} chars)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--as-gpu", action="store_true", help="CPU devices take a GPU's paths")
    parser.add_argument("--jsonl", help="append every record here as it comes (one JSON line each)")
    parser.add_argument("--report", help="only print the report of a --jsonl file written before")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.report:
        with open(args.report) as f:
            report([json.loads(line) for line in f if line.strip()], args.top)
        return 0
    census = Census(args.as_gpu, args.jsonl)
    pytest_args = [a for a in args.pytest_args if a != "--"]
    rc = pytest.main(pytest_args, plugins=[census])
    report(census.records, args.top)
    return int(rc)


if __name__ == "__main__":
    sys.exit(main())
