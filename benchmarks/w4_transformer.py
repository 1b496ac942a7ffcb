"""W4 transformer encoder layer, pre-norm, batch-first, no dropout, exact (erf) GELU:
x1 = x + MHA(LN1(x)); out = x1 + Linear2(GELU(Linear1(LN2(x1)))). Forward, then backward of
out.sum() with gradients for every parameter.

PyTorch runs ``nn.TransformerEncoderLayer(norm_first=True, batch_first=True,
activation="gelu", dropout=0.0)`` loaded with the same weights. The cross-check compares the
output and every gradient. There is no numpy version.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .harness import Case, randn, rng

ID = "W4"
TITLE = "transformer encoder layer fwd+bwd"
SIZES = {
    "cpu": {"batch": 8, "seq": 128, "d": 256, "heads": 4, "d_ff": 1024},
    "gpu": {"batch": 32, "seq": 512, "d": 1024, "heads": 16, "d_ff": 4096},
    "quick": {"batch": 2, "seq": 8, "d": 32, "heads": 4, "d_ff": 64},
    "check": {"batch": 2, "seq": 16, "d": 32, "heads": 4, "d_ff": 64},
}
ITERS = {"cpu": 20, "gpu": 50, "quick": 2}
TOLERANCE = 1e-4
#: ember name -> torch parameter name; matrices are stored (in, out) here, (out, in) in torch
TORCH_NAMES = {
    "ln1_w": "norm1.weight",
    "ln1_b": "norm1.bias",
    "w_in": "self_attn.in_proj_weight",
    "b_in": "self_attn.in_proj_bias",
    "w_out": "self_attn.out_proj.weight",
    "b_out": "self_attn.out_proj.bias",
    "ln2_w": "norm2.weight",
    "ln2_b": "norm2.bias",
    "w_ff1": "linear1.weight",
    "b_ff1": "linear1.bias",
    "w_ff2": "linear2.weight",
    "b_ff2": "linear2.bias",
}
MATRICES = {"w_in", "w_out", "w_ff1", "w_ff2"}


def describe(size: dict[str, int]) -> str:
    return f"B{size['batch']} S{size['seq']} d{size['d']} h{size['heads']} ff{size['d_ff']}"


def derived(size: dict[str, int], seconds: float) -> None:
    return None


def inputs(size: dict[str, int]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    gen = rng()
    b, s, d, ff = size["batch"], size["seq"], size["d"], size["d_ff"]
    x = randn(gen, (b, s, d))
    p = {
        "ln1_w": 1.0 + randn(gen, (d,), 0.1),
        "ln1_b": randn(gen, (d,), 0.1),
        "w_in": randn(gen, (d, 3 * d), d**-0.5),
        "b_in": randn(gen, (3 * d,), 0.1),
        "w_out": randn(gen, (d, d), d**-0.5),
        "b_out": randn(gen, (d,), 0.1),
        "ln2_w": 1.0 + randn(gen, (d,), 0.1),
        "ln2_b": randn(gen, (d,), 0.1),
        "w_ff1": randn(gen, (d, ff), d**-0.5),
        "b_ff1": randn(gen, (ff,), 0.1),
        "w_ff2": randn(gen, (ff, d), ff**-0.5),
        "b_ff2": randn(gen, (d,), 0.1),
    }
    return x, {k: v.astype(np.float32) for k, v in p.items()}


def ember(device: Any, size: dict[str, int]) -> Case:
    import ember as em

    dev = device.autodiff()
    b, s, d, nh = size["batch"], size["seq"], size["d"], size["heads"]
    x_np, p_np = inputs(size)
    x = em.tensor(x_np, device=dev)
    params = {k: em.tensor(v, device=dev).requires_grad_() for k, v in p_np.items()}
    last: dict[str, Any] = {}

    def heads(t: Any) -> Any:
        return em.permute_dims(t.reshape((b, s, nh, d // nh)), (0, 2, 1, 3))

    def step() -> Any:
        p = params
        for t in p.values():
            t.grad = None
        h = em.layer_norm(x, d, p["ln1_w"], p["ln1_b"])
        q, k, v = em.split(h @ p["w_in"] + p["b_in"], 3, axis=-1)
        a = em.scaled_dot_product_attention(heads(q), heads(k), heads(v))
        a = em.permute_dims(a, (0, 2, 1, 3)).reshape((b, s, d))
        x1 = x + (a @ p["w_out"] + p["b_out"])
        h = em.layer_norm(x1, d, p["ln2_w"], p["ln2_b"])
        out = x1 + (em.gelu(h @ p["w_ff1"] + p["b_ff1"]) @ p["w_ff2"] + p["b_ff2"])
        out.sum().backward()
        last["out"] = out
        return out

    def result() -> dict[str, np.ndarray]:
        res = {"out": last["out"].detach().numpy()}
        res.update({f"grad_{k}": t.grad.numpy() for k, t in params.items()})
        return res

    return Case(step, device.synchronize, result)


def torch(device: Any, size: dict[str, int]) -> Case:
    import torch as th

    from .peers import torch_sync

    x_np, p_np = inputs(size)
    layer = th.nn.TransformerEncoderLayer(
        size["d"],
        size["heads"],
        size["d_ff"],
        dropout=0.0,
        activation="gelu",
        batch_first=True,
        norm_first=True,
    ).to(device)
    named = dict(layer.named_parameters())
    if set(named) != set(TORCH_NAMES.values()):
        raise RuntimeError(f"unexpected TransformerEncoderLayer parameters: {sorted(named)}")
    with th.no_grad():
        for k, v in p_np.items():
            named[TORCH_NAMES[k]].copy_(th.from_numpy(np.ascontiguousarray(v.T if k in MATRICES else v)))
    x = th.from_numpy(x_np).to(device)
    last: dict[str, Any] = {}

    def step() -> Any:
        layer.zero_grad(set_to_none=True)
        out = layer(x)
        out.sum().backward()
        last["out"] = out
        return out

    def result() -> dict[str, np.ndarray]:
        res = {"out": last["out"].detach().cpu().numpy()}
        for k in p_np:
            g = named[TORCH_NAMES[k]].grad.cpu().numpy()
            res[f"grad_{k}"] = g.T if k in MATRICES else g
        return res

    return Case(step, torch_sync(device), result)
