"""What autodiff keeps alive between forward and backward, op by op: ember beside PyTorch.

For W3 and W4 (``--size`` overrides a size's fields) the workload's own step runs once to warm up,
then once measured: at the call to ``backward()`` (the end of forward) the graph's saved tensors are
listed, grouped by the op that saved them, and summed (each buffer once; leaves, i.e. parameters and
inputs, apart); then backward runs with each vjp rule watched, so the table says how much was in use
before each rule and at its peak. Ember runs on a pooled device (``opencl:0``: the pool's bytes in
use are the truth, the saved list explains them); torch runs on the CPU, its saved tensors read from
the ``_saved_*`` fields of the ``grad_fn`` graph (each storage once), and its step's peak above the
step's start from the profiler's allocator events (ember's beside it: the pool's peak in use less what
was in use when the step began).

    python -m benchmarks.saved W4 --device opencl:0
    python -m benchmarks.saved W4 --size batch=2,seq=512,d=1024,heads=16,d_ff=4096   # the GPU size's shape
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from types import ModuleType
from typing import Any

from . import w3_cnn, w4_transformer

WORKLOADS: dict[str, ModuleType] = {"W3": w3_cnn, "W4": w4_transformer}
MIB = 2**20


def _nbytes(t: Any) -> int:
    return math.prod(t._shape) * t._dtype.itemsize


def _in_use(dev: Any) -> int:
    return sum(p.in_use for p in dev.memory.pools())


def _peak(dev: Any) -> int:
    return sum(p.peak_in_use for p in dev.memory.pools())


def _reset(dev: Any) -> None:
    for p in dev.memory.pools():
        p.reset_peaks()


def ember_saved(module: ModuleType, spec: str, size: dict[str, int]) -> dict[str, Any]:
    """One measured step of ``module`` on ``spec``: saved tensors at backward(), memory before and during it."""
    import ember as em
    from ember import dispatch
    from ember.autodiff.graph import saved_tensors
    from ember.tensor import Tensor

    dev = em.Device(spec, memory="exclusive")  # exclusive: a block is back the moment it dies
    gc.collect()
    dev.synchronize()
    case = module.ember(dev, size)
    case.step()  # warm: kernels compiled, lazy programs interned
    case.sync()
    gc.collect()
    report: dict[str, Any] = {}
    original = Tensor.backward
    watched: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # op -> [calls, before, peak] (highest peak)

    def watch(op: Any) -> Any:
        rule = op.vjp

        def run(*args: Any, **kwargs: Any) -> Any:
            dev.synchronize()  # the gradient reaching this rule is computed before it, not inside it
            report["backward_peak_in_use"] = max(report["backward_peak_in_use"], _peak(dev))
            _reset(dev)
            before = _in_use(dev)
            grads = rule(*args, **kwargs)
            dev.synchronize()  # lazy gradients computed here, inside this rule's step
            row, peak = watched[op.name], _peak(dev)
            row[0] += 1
            if peak >= row[2]:  # the call with the highest peak, and what was in use when it began
                row[1], row[2] = before, peak
            report["backward_peak_in_use"] = max(report["backward_peak_in_use"], peak)
            return grads

        return run

    def backward(self: Any, *args: Any, **kwargs: Any) -> None:
        dev.synchronize()
        report["forward_peak_in_use"] = _peak(dev)
        report["in_use_at_backward"] = _in_use(dev)
        groups: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        seen: set[int] = set()
        for op, _, t in saved_tensors(self):
            if id(t._data) in seen:
                continue
            seen.add(id(t._data))
            key = "leaf" if t._node is None else f"{t._node.op.name} -> {op}"
            groups[key][0] += 1
            groups[key][1] += _nbytes(t)
        report["saved"] = dict(sorted(groups.items(), key=lambda kv: -kv[1][1]))
        rules = {name: o.vjp for name, o in dispatch.OPS.items() if o.vjp is not None}
        for name in rules:
            dispatch.OPS[name].vjp = watch(dispatch.OPS[name])
        report["backward_peak_in_use"] = 0
        try:
            _reset(dev)
            original(self, *args, **kwargs)
            dev.synchronize()
        finally:
            for name, rule in rules.items():
                dispatch.OPS[name].vjp = rule
        report["backward_peak_in_use"] = max(report["backward_peak_in_use"], _peak(dev))

    gc.collect()
    base = _in_use(dev)
    _reset(dev)
    Tensor.backward = backward  # type: ignore[method-assign]
    try:
        out = case.step()
        case.sync()
    finally:
        Tensor.backward = original  # type: ignore[method-assign]
    report["base_in_use"] = base
    report["step_peak_in_use"] = max(report["forward_peak_in_use"], report["backward_peak_in_use"])
    report["vjp"] = {k: v for k, v in sorted(watched.items(), key=lambda kv: -kv[1][2])}
    del out, case
    gc.collect()
    return report


def torch_saved(module: ModuleType, size: dict[str, int]) -> dict[str, Any] | None:
    """The same step in torch on the CPU: the grad_fn graph's saved tensors at backward()."""
    try:
        import torch as th
    except ImportError:
        return None
    case = module.torch(th.device("cpu"), size)
    case.step()
    report: dict[str, Any] = {}
    original = th.Tensor.backward

    def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        groups: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        leaves: set[int] = set()
        found: list[tuple[str, Any]] = []
        stack, seen = [self.grad_fn], set()
        while stack:
            fn = stack.pop()
            if fn is None or id(fn) in seen:
                continue
            seen.add(id(fn))
            if hasattr(fn, "variable"):
                ptr = fn.variable.untyped_storage().data_ptr()
                if ptr not in leaves:
                    report["parameter_bytes"] = (
                        report.get("parameter_bytes", 0) + fn.variable.untyped_storage().nbytes()
                    )
                leaves.add(ptr)
            for attr in dir(fn):
                if not attr.startswith("_saved_"):
                    continue
                try:
                    value = getattr(fn, attr)
                except RuntimeError:
                    continue
                for v in value if isinstance(value, (tuple, list)) else (value,):
                    if isinstance(v, th.Tensor):
                        found.append((f"{type(fn).__name__}.{attr[7:]}", v))
            stack.extend(f for f, _ in fn.next_functions)
        storages: set[int] = set()
        for name, v in found:
            ptr = v.untyped_storage().data_ptr()
            if ptr in storages:
                continue
            storages.add(ptr)
            # a parameter's storage, or an input (no grad_fn, not an op's saved result such as max_pool's indices)
            made = name.split(".", 1)[1].startswith("result")
            key = "leaf" if ptr in leaves or (v.grad_fn is None and not v.requires_grad and not made) else name
            groups[key][0] += 1
            groups[key][1] += v.untyped_storage().nbytes()
        report["saved"] = dict(sorted(groups.items(), key=lambda kv: -kv[1][1]))
        return original(self, *args, **kwargs)

    from torch.profiler import ProfilerActivity, profile

    th.Tensor.backward = backward  # type: ignore[method-assign]
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            case.step()
    finally:
        th.Tensor.backward = original  # type: ignore[method-assign]
    # the CPU allocator's events in time order (frees negative): the step's peak above its start. The
    # previous step's gradients, freed by zero_grad at the start, were allocated before the profiler
    # started and their frees carry no size, so they are taken off here (ember's pool counts that free)
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    level = peak = 0
    for _, nbytes in events:
        level += nbytes
        peak = level if level > peak else peak
    report["step_peak_above_start"] = peak - report.get("parameter_bytes", 0)
    report["version"] = th.__version__
    return report


def _total(saved: dict[str, list[int]], leaves: bool = False) -> int:
    return sum(b for k, (_, b) in saved.items() if (k == "leaf") == leaves)


def text(wid: str, size: dict[str, int], ours: dict[str, Any], theirs: dict[str, Any] | None) -> str:
    """The report of one workload as Markdown."""
    lines = [f"### {wid} {size}", ""]
    lines.append(
        f"ember: saved (not leaves) {_total(ours['saved']) / MIB:.2f} MiB, "
        f"leaves {_total(ours['saved'], True) / MIB:.2f}; "
        f"pool in use (all the device holds): before the step {ours['base_in_use'] / MIB:.2f}, "
        f"at backward() {ours['in_use_at_backward'] / MIB:.2f}, forward peak {ours['forward_peak_in_use'] / MIB:.2f}, "
        f"backward peak {ours['backward_peak_in_use'] / MIB:.2f} MiB"
    )
    if theirs is not None:
        lines.append(
            f"torch {theirs['version']} (cpu): saved (not leaves) {_total(theirs['saved']) / MIB:.2f} MiB, "
            f"leaves {_total(theirs['saved'], True) / MIB:.2f}; the step's peak above its start (profiler's "
            f"allocator events) {theirs['step_peak_above_start'] / MIB:.2f} MiB; ember's: "
            f"{(ours['step_peak_in_use'] - ours['base_in_use']) / MIB:.2f} MiB"
        )
    lines += ["", "| ember: producer -> consumer | n | MiB |", "|---|---:|---:|"]
    lines += [f"| {k} | {n} | {b / MIB:.2f} |" for k, (n, b) in ours["saved"].items()]
    if theirs is not None:
        lines += ["", "| torch: grad_fn.saved | n | MiB |", "|---|---:|---:|"]
        lines += [f"| {k} | {n} | {b / MIB:.2f} |" for k, (n, b) in theirs["saved"].items()]
    lines += [
        "",
        "| ember vjp rule | calls | in use before, MiB | peak inside, MiB (its highest call) |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {k} | {c} | {b / MIB:.2f} | {p / MIB:.2f} |" for k, (c, b, p) in ours["vjp"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.saved", description=__doc__.split("\n\n")[0])
    parser.add_argument("workloads", nargs="*", default=list(WORKLOADS), help="W3 and/or W4 (default both)")
    parser.add_argument("--device", default="opencl:0", help="a pooled ember device (default opencl:0)")
    parser.add_argument("--sizes", default="cpu", help="the workload's size table entry (default cpu)")
    parser.add_argument("--size", default="", help="overrides, e.g. batch=2,seq=512")
    parser.add_argument("--no-torch", action="store_true", help="ember only")
    parser.add_argument("--json", type=Path, help="write the numbers here")
    args = parser.parse_args(argv)
    out: dict[str, Any] = {}
    for wid in args.workloads:
        module = WORKLOADS[wid.upper()]
        size = dict(module.SIZES[args.sizes])
        for item in filter(None, args.size.split(",")):
            key, _, value = item.partition("=")
            size[key.strip()] = int(value)
        ours = ember_saved(module, args.device, size)
        theirs = None if args.no_torch else torch_saved(module, size)
        out[wid.upper()] = {"size": size, "ember": ours, "torch": theirs}
        print(text(wid.upper(), size, ours, theirs), flush=True)
        print(file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
