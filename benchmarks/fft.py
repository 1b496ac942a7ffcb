"""FFT of 2^20 complex points on one device: ember (``ember.fft.fft`` where the device holds
complex64, else the (real, imag) pairs form ``ember_signal.pairs.fft``, the Tensor-op Stockham
reference off cpu) against numpy.fft on the host and, on cuda, cuFFT called directly through CuPy.

    python -m benchmarks.fft [--device cpu] [--log2n 20] [--iters 20]

complex64 input from a fixed seed; median of ``--iters`` timed calls after 3 warm-ups, each
ending with the result on the host (so a device's synchronize is inside the time). The CuPy
column times ``cupy.fft.fft`` on the same points already on the GPU, ending with ``.get()`` too,
so it is ember's cost over the library it calls; "-" where CuPy or a CUDA device is absent.
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
    parser.add_argument("--log2n", type=int, default=20)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    import ember_signal

    dev = em.Device(args.device)
    n = 1 << args.log2n
    rng = np.random.default_rng(0)
    z = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
    want = np.fft.fft(z)
    if dev.capabilities.supports(em.complex64):
        x = em.tensor(z, device=dev)
        form = "ember.fft.fft (complex64)"

        def run() -> np.ndarray:
            return np.asarray(em.fft.fft(x).numpy())

    else:
        x = em.tensor(np.stack([z.real, z.imag], axis=-1), device=dev)
        form = "ember_signal.pairs.fft (float32 pairs)"

        def run() -> np.ndarray:
            p = np.asarray(ember_signal.pairs.fft(x).numpy())
            return p[..., 0] + 1j * p[..., 1]

    err = float(np.max(np.abs(run() - want)) / np.max(np.abs(want)))
    ours = median_seconds(run, 3, args.iters)
    ref = median_seconds(lambda: np.fft.fft(z), 3, args.iters)
    peer = cupy_seconds(dev, lambda cp: cp.asarray(z), lambda cp, zd: cp.fft.fft(zd).get(), args.iters)
    shown = "-" if peer is None else f"{peer * 1e3:.2f}"
    ratio = "-" if peer is None else f"{ours / peer:.2f}"
    print(f"FFT of 2^{args.log2n} complex points, device {dev}, median of {args.iters} (ms)")
    head = "| device | ember form | ember ms | numpy.fft ms | ember / numpy | cupy.fft ms | ember / cupy"
    print(f"{head} | max rel. error |")
    print("|---|---|---|---|---|---|---|---|")
    row = f"| {dev} | {form} | {ours * 1e3:.2f} | {ref * 1e3:.2f} | {ours / ref:.2f} | {shown} | {ratio}"
    print(f"{row} | {err:.1e} |")


if __name__ == "__main__":
    main()
