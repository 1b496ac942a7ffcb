"""FFT of 2^20 complex points on one device: ember (``ember.fft.fft`` where the device holds
complex64, else the (real, imag) pairs form ``ember_signal.pairs.fft``, the Tensor-op Stockham
reference off cpu) against numpy.fft on the host.

    python -m benchmarks.fft [--device cpu] [--log2n 20] [--iters 20]

complex64 input from a fixed seed; median of ``--iters`` timed calls after 3 warm-ups, each
ending with the result on the host (so a device's synchronize is inside the time).
"""

from __future__ import annotations

import argparse

import numpy as np

import ember as em

from .harness import median_seconds


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
    print(f"FFT of 2^{args.log2n} complex points, device {dev}, median of {args.iters} (ms)")
    print("| device | ember form | ember ms | numpy.fft ms | ember / numpy | max rel. error |")
    print("|---|---|---|---|---|---|")
    print(f"| {dev} | {form} | {ours * 1e3:.2f} | {ref * 1e3:.2f} | {ours / ref:.2f} | {err:.1e} |")


if __name__ == "__main__":
    main()
