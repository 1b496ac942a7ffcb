"""Where W6's fused WGSL kernel loses bandwidth: the generated kernel beside variants of its text.

    python plugins/wgpu/scripts/w6_probe.py --device wgpu:0 [--n 67108864] [--reps 40]

Builds W6 (gelu(x*a+b)*sigmoid(x), 2^26 float32 by default) through ember once, takes the fused
kernel the backend generated, then times that kernel and variants of its source on the same
buffers and parameter block: ``reps`` dispatches recorded, one synchronize, the time divided by
``reps`` (the kernel's own throughput, no per-step host work). Variants replace one piece at a
time (ember's exp by WGSL's built-in, ember's erf by a cheaper form, the whole body by a plain
sum of the three inputs), so the row that recovers bandwidth names the piece that costs it.
Prints one row per variant: ms per dispatch and effective TB/s (16 bytes per element).
"""

from __future__ import annotations

import argparse
import re
import time

import numpy as np

import ember as em


def _variants(source: str) -> dict[str, str]:
    """Source variants, each changing one piece of the generated kernel."""
    out = {"generated": source}
    out["builtin exp"] = re.sub(r"(?<!fn )\bm_exp\(", "exp(", source)
    out["no erf (tanh gelu)"] = re.sub(r"(?<!fn )\bm_erf\(", "tanh(", source)
    out["builtin exp, no erf"] = re.sub(r"(?<!fn )\bm_erf\(", "tanh(", out["builtin exp"])
    # the body of every lane: the plain sum of the three inputs (the bandwidth ceiling of 3 in, 1 out)
    lanes = re.sub(r"let v(\d)_(\d) = .*;", lambda m: f"let v{m.group(1)}_{m.group(2)} = x0_{m.group(2)};", source)

    def total(m: re.Match[str]) -> str:
        k = m.group(1)
        return f"let v7_{k} = x0_{k} + x1_{k} + x2_{k};"

    out["sum only"] = re.sub(r"let v7_(\d) = .*;", total, lanes)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="wgpu:0")
    parser.add_argument("--n", type=int, default=2**26)
    parser.add_argument("--reps", type=int, default=40)
    args = parser.parse_args()
    dev = em.Device(args.device)
    rng = np.random.default_rng(0)
    x, a, b = (em.tensor(rng.standard_normal(args.n).astype(np.float32), device=dev) for _ in range(3))
    y = em.gelu(x * a + b) * em.sigmoid(x)
    y.realize()
    dev.synchronize()
    rt = dev.backend.rt
    from ember_wgpu.kernels import elementwise as ew

    found = [(k, v) for k, v in rt.kernels.items() if k[0] == "ew" and len(k[1].instructions) == 5]
    if not found:
        raise SystemExit("the fused W6 kernel was not found in the backend's kernel table")
    (kkey, (kernel, pipe, name)) = found[-1]
    plan = next(p for key, p in rt.plans.items() if key[0] is kkey[1])
    print(f"device {args.device} ({rt.name}); n = {args.n}; workgroups {plan.groups} x 256; vec {kernel.vec}")
    print(kernel.source if args.n < 0 else f"generated kernel: {len(kernel.source)} characters")
    out = rt.empty((args.n,), em.float32)
    handles = [t._data.real if hasattr(t._data, "real") and t._data.real is not None else t._data for t in (x, a, b)]
    buffers = [h.buffer for h in handles] + [out.buffer]
    params = plan.head + bytes(plan.tail)
    bindings = ("r",) * kernel.n_tensors + ("w",) * kernel.n_outputs
    reference = None

    def timed(pipe_: object, groups: int, label: str) -> float:
        for _ in range(args.reps):  # warm: the GPU's clocks ramp up while it is busy
            rt.dispatch(pipe_, params, buffers, (groups, 1, 1), label)
        rt.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.reps):
            rt.dispatch(pipe_, params, buffers, (groups, 1, 1), label)
        rt.synchronize()
        return (time.perf_counter() - t0) / args.reps

    variants = list(_variants(kernel.source).items())
    for label, source in variants + variants[:1]:  # the generated kernel again last: drift shows
        variant = rt.pipeline(f"probe-{label}", source, bindings)
        per = timed(variant, plan.groups, label)
        result = rt.read([out])[0]
        if reference is None:
            reference = result
        err = float(np.max(np.abs(result - reference)))
        tbs = 16 * args.n / per / 1e12
        print(f"{label:24s} {per * 1e3:8.3f} ms  {tbs:6.2f} TB/s  max|diff vs generated| {err:.2e}")
    for groups in (1024, 4096, 16384, 65535):
        per = timed(pipe, groups, "generated")
        print(f"generated, {groups:5d} groups {per * 1e3:8.3f} ms  {16 * args.n / per / 1e12:6.2f} TB/s")
    del ew


if __name__ == "__main__":
    main()
