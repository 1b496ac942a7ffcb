"""Attention forward + backward at W4's shape (B32, 16 heads, L = S = 512, head 64, float32) on
cuda:0: the flash forward + flash backward, the flash forward + autodiff's composite backward
(``ember.ops.attention``'s rule over batch slices, what EMBER_CUDA_FLASH_BACKWARD=0 runs), the
flash forward + the chunked fallback (cuBLAS + row kernels, what a mask takes), and torch's
``scaled_dot_product_attention`` forward + backward; GPU time by CUDA events, and each
gradient's largest difference from torch's. Runs in well under 30 s:

    python plugins/cuda/scripts/attention_bench.py [--causal]
"""

from __future__ import annotations

import sys

import ember as em
from ember.ops.attention import _attention_backward

B, H, L, HEAD = 32, 16, 512, 64


def main() -> None:
    causal = "--causal" in sys.argv[1:]
    from ember_cuda import attention
    from ember_cuda.attention_backward import chunked_backward

    dev = em.Device.cuda(0)
    backend = dev.backend
    cp = backend.cp
    forward = backend.implementation("scaled_dot_product_attention")
    flash = backend.implementation("scaled_dot_product_attention_backward")
    chunked = chunked_backward(cp, backend.implementation("softmax"), backend.implementation("softmax_backward"))
    rng = cp.random.default_rng(0)
    q, k, v, g = (rng.standard_normal((B, H, L, HEAD), dtype=cp.float32) for _ in range(4))
    scale = HEAD**-0.5
    tensors = [em.tensor(a.get(), device=dev) for a in (g, q, k, v)]  # copies, made once

    def composite() -> None:
        forward(q, k, v, is_causal=causal, scale=scale)
        _attention_backward(*tensors, is_causal=causal, scale=scale).realize()

    def gpu_ms(fn, n: int = 5) -> float:  # noqa: ANN001
        fn()
        backend.synchronize()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record(backend.stream)
        for _ in range(n):
            fn()
        stop.record(backend.stream)
        stop.synchronize()
        return cp.cuda.get_elapsed_time(start, stop) / n

    # forward + backward: 2 products forward, 5 in the backward's minimum (FlashAttention-2's count)
    flops = 2 * 7 * B * H * L * L * HEAD / (2 if causal else 1)
    before = attention.CALLS["scaled_dot_product_attention_backward"]
    rows = [
        ("flash forward + flash backward", lambda: (forward(q, k, v, is_causal=causal, scale=scale),
                                                    flash(g, q, k, v, is_causal=causal, scale=scale))),
        ("flash forward + chunked backward", lambda: (forward(q, k, v, is_causal=causal, scale=scale),
                                                      chunked(g, q, k, v, is_causal=causal, scale=scale))),
        ("flash forward + composite backward", composite),
    ]  # fmt: skip
    for name, fn in rows:
        ms = gpu_ms(fn)
        print(f"attention fwd+bwd {name:36s} {ms:7.3f} ms  {flops / ms / 1e9:6.1f} TFLOP/s")
    assert attention.CALLS["scaled_dot_product_attention_backward"] > before, "the flash backward did not run"
    kernel_breakdown(cp, gpu_ms, q, k, v, g, causal, scale)
    n = B * H * L * HEAD
    ours = {
        "flash": flash(g, q, k, v, is_causal=causal, scale=scale),
        "chunked": chunked(g, q, k, v, is_causal=causal, scale=scale),
    }
    try:
        import torch
    except ImportError:
        print("torch is not installed: no comparison with it")
        return
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 stays float32, as ember's (benchmarks/peers.py)
    tq, tk, tv = (torch.from_dlpack(a).requires_grad_(True) for a in (q, k, v))
    tg = torch.from_dlpack(g)
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def torch_step() -> None:
        out = sdpa(tq, tk, tv, is_causal=causal)
        torch.autograd.grad(out, (tq, tk, tv), tg)

    torch_step()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        torch_step()
    stop.record()
    stop.synchronize()
    ms = start.elapsed_time(stop) / 5
    print(f"attention fwd+bwd {'torch sdpa forward + backward':36s} {ms:7.3f} ms  {flops / ms / 1e9:6.1f} TFLOP/s")
    want = torch.autograd.grad(sdpa(tq, tk, tv, is_causal=causal), (tq, tk, tv), tg)
    for label, packed in ours.items():
        diffs = [
            float(cp.abs(packed[i * n : (i + 1) * n].reshape(q.shape) - cp.from_dlpack(w.detach())).max())
            for i, w in enumerate(want)
        ]
        print(f"attention {label} backward vs torch: max abs difference dq {diffs[0]:.2e} dk {diffs[1]:.2e} "
              f"dv {diffs[2]:.2e}")  # fmt: skip


def kernel_breakdown(cp, gpu_ms, q, k, v, g, causal: bool, scale: float) -> None:  # noqa: ANN001
    """Each of the flash backward's three kernels alone (launched as attention_backward.py does)."""
    import numpy as np
    from ember_cuda import attention_backward as ab
    from ember_cuda.attention import _LOG2E, kernel_name
    from ember_cuda.attention import source as stats_source

    batch = B * H
    sizes, bn, bm = ab.shared_bytes(HEAD), ab.tiles(HEAD)["dkdv"][0], ab.tiles(HEAD)["dq"][0]
    lse, delta = cp.empty(batch * L, cp.float32), cp.empty(batch * L, cp.float32)
    gq, gk, gv = (cp.empty_like(q) for _ in range(3))
    common = (np.int32(L), np.int32(L))
    qscale, flags = np.float32(scale * _LOG2E), (np.int32(causal), np.int32(0))
    kernels = {}
    for which, src, name in (
        ("stats", stats_source(HEAD, stats=True), kernel_name(HEAD, stats=True)),
        ("dkdv", ab.source(HEAD), f"ember_flash_attention_dkdv_d{HEAD}"),
        ("dq", ab.source(HEAD), f"ember_flash_attention_dq_d{HEAD}"),
    ):
        kernels[which] = cp.RawKernel(src, name)
        kernels[which].max_dynamic_shared_size_bytes = sizes[which]
    t64, tkv, tq = -(-L // 64), -(-L // bn), -(-L // bm)
    launches = {
        "stats": lambda: kernels["stats"](
            (batch * t64,), (128,), (q, k, v, g, lse, delta, *common, np.int32(t64), qscale, *flags),
            shared_mem=sizes["stats"],
        ),
        "dkdv": lambda: kernels["dkdv"](
            (batch * tkv,), (128,),
            (q, k, v, g, lse, delta, gk, gv, *common, np.int32(tkv), qscale, np.float32(1 / _LOG2E), *flags),
            shared_mem=sizes["dkdv"],
        ),
        "dq": lambda: kernels["dq"](
            (batch * tq,), (128,),
            (q, k, v, g, lse, delta, gq, *common, np.int32(tq), qscale, np.float32(scale), *flags),
            shared_mem=sizes["dq"],
        ),
    }  # fmt: skip
    products = {"stats": 2, "dkdv": 4, "dq": 3}  # (L x S x D) products each kernel computes
    for which, fn in launches.items():
        ms = gpu_ms(fn)
        flops = 2 * products[which] * batch * L * L * HEAD / (2 if causal else 1)
        print(f"attention backward kernel {which:5s} {ms:7.3f} ms  {flops / ms / 1e9:6.1f} TFLOP/s")


if __name__ == "__main__":
    main()
