"""``solve`` and ``svd`` of an n x n float32 matrix on one device: ember-linalg (its native kernel
where the device has one, else its Tensor-op reference) against numpy.linalg on the host and,
on cuda, cupy.linalg (cuSOLVER) called directly on the same matrices.

    python -m benchmarks.linalg [--device cpu] [--n 1024] [--iters 5] [--reference]

``--reference`` drops the device kind's native linalg kernels for the run, so the Tensor-op
reference is timed (the "before" of a native kernel; slow: use a small --n and --iters 1).

Well-conditioned input from a fixed seed (a random matrix plus n on the diagonal); median of
``--iters`` timed calls after one warm-up, each ending with the result on the host (so a
device's synchronize is inside the time). Prints a Markdown row per op.
"""

from __future__ import annotations

import argparse

import numpy as np

import ember as em

from .harness import median_seconds
from .peers import cupy_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--ops", default="solve,svd")
    parser.add_argument("--reference", action="store_true", help="time the Tensor-op reference, not the native kernel")
    args = parser.parse_args()
    import ember_linalg  # noqa: F401  (em.linalg)

    dev = em.Device(args.device)
    if args.reference:
        _drop_native(dev.kind)
    n = args.n
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((n, n)) + n * np.eye(n)).astype(np.float32)
    b = rng.standard_normal((n, 8)).astype(np.float32)
    ta, tb = em.tensor(a, device=dev), em.tensor(b, device=dev)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    cases = {
        "solve": (
            lambda: em.linalg.solve(ta, tb).numpy(),
            lambda: np.linalg.solve(a, b),
            lambda got: np.max(np.abs(got - np.linalg.solve(a64, b64))) / np.max(np.abs(np.linalg.solve(a64, b64))),
        ),
        "svd": (  # the full factorization (reduced U and V^T), as numpy computes it
            lambda: em.linalg.svd(ta, full_matrices=False).S.numpy(),
            lambda: np.linalg.svd(a, full_matrices=False),
            lambda got: np.max(np.abs(got - np.linalg.svd(a64, compute_uv=False))) / np.linalg.norm(a64, 2),
        ),
    }
    paths = {op: _path(op, dev) for op in cases}
    print(f"{n}x{n} float32 on {dev}, median of {args.iters} (ms)")
    peers = {  # cupy.linalg on the GPU, the result brought to the host like ember's
        "solve": lambda cp, ab: cp.linalg.solve(*ab).get(),
        "svd": lambda cp, ab: cp.linalg.svd(ab[0], full_matrices=False, compute_uv=True)[1].get(),
    }
    head = "| op | device | path | ember ms | numpy ms | ember / numpy | cupy ms | ember / cupy"
    print(f"{head} | rel. error vs float64 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for op in args.ops.split(","):
        ours, theirs, error = cases[op]
        err = float(error(ours()))
        t_ours, t_np = median_seconds(ours, 1, args.iters), median_seconds(theirs, 1, args.iters)
        t_cp = cupy_seconds(dev, lambda cp: (cp.asarray(a), cp.asarray(b)), peers[op], args.iters, warmup=1)
        cp_ms = "-" if t_cp is None else f"{t_cp * 1e3:.1f}"
        cp_ratio = "-" if t_cp is None else f"{t_ours / t_cp:.2f}"
        row = f"| {op} | {dev} | {paths[op]} | {t_ours * 1e3:.1f} | {t_np * 1e3:.1f} | {t_ours / t_np:.2f}"
        row += f" | {cp_ms} | {cp_ratio}"
        print(f"{row} | {err:.1e} |")


def _drop_native(kind: str) -> None:
    """Unregister every linalg kernel for ``kind`` (this process only): the references run."""
    from ember.backend import EXTENSION_KERNELS
    from ember.device import invalidate

    for name, k in [key for key in EXTENSION_KERNELS if key[0].startswith("linalg_") and key[1] == kind]:
        del EXTENSION_KERNELS[(name, k)]
        invalidate(k, name)


def _path(op: str, dev: em.Device) -> str:
    """'native' when the op's extension has a kernel for the device's kind, else 'reference'."""
    ext = em.extension.EXTENSIONS.get(f"linalg_{op}")
    if ext is None:
        return "composite"
    return "native" if dev.kind in ext.kernels else "reference"


if __name__ == "__main__":
    main()
