"""Fine-tuning side by side: full fine-tuning, LoRA and QLoRA adapt a digits classifier to
rotated images.

A base MLP learns scikit-learn's bundled 8x8 digits (no download); the related task is the
same digits rotated by 90 degrees, on which the base model does poorly. Each
method starts from the same base weights and trains for the same epochs; the table gives the
accuracy on the rotated validation set, the share of parameters trained, the size of what
must be saved (the whole model, or the adapter alone), peak memory and the time per step.

    python examples/finetune.py --full                # the table in docs/fine-tuning.md
    python examples/finetune.py                       # a small model, a few seconds (CI)
    python examples/finetune.py --full --device opencl

Peak memory is ``Device.memory_stats()["peak_in_use_bytes"]`` where the device measures it;
the CPU backend does not (numpy owns host memory), so there it is the peak of host
allocations that tracemalloc sees during the run.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
from sklearn.datasets import load_digits

import ember as em
from ember import nn, optim
from ember.data import DataLoader, InMemoryDataset
from ember.nn import lora
from ember.quant import quantize


def build(width: int, dev: em.Device) -> nn.Module:
    em.seed(0)
    return nn.Sequential(
        nn.Linear(64, width, device=dev), nn.ReLU(), nn.Linear(width, width, device=dev), nn.ReLU(),
        nn.Linear(width, 10, device=dev),
    )  # fmt: skip


def accuracy(model: nn.Module, data: Any, dev: em.Device) -> float:
    model.eval()
    correct = 0
    with em.no_grad():
        for xb, yb in DataLoader(data, batch_size=512, device=dev):
            correct += int((model(xb).argmax(axis=1) == yb).sum().item())
    return correct / len(data)


def train(model: nn.Module, opt: optim.Optimizer, data: Any, epochs: int, dev: em.Device) -> float:
    """Train with a cosine learning-rate schedule; returns the mean seconds per step (the first
    epoch, which compiles kernels, left out)."""
    times: list[float] = []
    schedule = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)  # the same schedule for every method
    for epoch in range(epochs):
        model.train()
        for xb, yb in DataLoader(data, batch_size=64, shuffle=True, seed=epoch, device=dev):
            t0 = time.perf_counter()
            loss = em.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()  # waits for the device
            if epoch or epochs == 1:
                times.append(time.perf_counter() - t0)
        schedule.step()
    return float(np.mean(times))


def measured(dev: em.Device, fn: Callable[[], Any]) -> tuple[Any, int | None]:
    """``fn()`` and the peak memory it reached (device stats, else host allocations)."""
    stats = dev.memory_stats()
    if stats.get("peak_in_use_bytes") is not None:
        pools = dev.backend.rt.pool if hasattr(dev.backend, "rt") else None
        if pools is not None and hasattr(pools, "reset_peaks"):
            pools.reset_peaks()
        out = fn()
        return out, dev.memory_stats()["peak_in_use_bytes"]
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def directory_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--full", action="store_true", help="width 2048, 20 epochs: the documented table")
    parser.add_argument("--width", type=int, default=None, help="hidden width of the MLP (128; --full: 2048)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs of each fine-tuning run (2; --full: 20)")
    parser.add_argument("--base-epochs", type=int, default=8)
    parser.add_argument("--rank", type=int, default=8)
    args = parser.parse_args()
    args.width = args.width or (2048 if args.full else 128)
    args.epochs = args.epochs or (20 if args.full else 2)
    if not args.full:
        args.base_epochs = min(args.base_epochs, 2)
    dev = (em.Device(args.device) if args.device else em.Device.default()).autodiff()

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    base_train, base_valid = InMemoryDataset(x, y).split(0.8, 0.2, seed=0)
    rotated = np.ascontiguousarray(np.rot90(x.reshape(-1, 8, 8), axes=(1, 2)).reshape(-1, 64))
    new_train, new_valid = InMemoryDataset(rotated, y).split(0.8, 0.2, seed=0)

    base = build(args.width, dev)
    train(base, optim.AdamW(base.parameters(), lr=1e-3), base_train, args.base_epochs, dev)
    base_state = {k: v.numpy().copy() for k, v in base.state_dict().items()}
    print(f"base model: {base.num_parameters():,} parameters, width {args.width}, on {dev}")
    before = accuracy(base, new_valid, dev)
    print(f"  accuracy: digits {accuracy(base, base_valid, dev):.3f}, rotated digits {before:.3f}")

    def fresh() -> nn.Module:
        model = build(args.width, dev)
        model.load_state_dict(base_state)
        return model

    rows = []
    tmp = tempfile.mkdtemp(prefix="ember-finetune-")
    cfg = lora.LoraConfig(rank=args.rank, alpha=2.0 * args.rank, targets="all-linear")
    for method in ("full", "lora", "qlora"):
        model = fresh()
        if method == "qlora":
            quantize(model, "nf4", double_quant=True)
        if method != "full":
            lora.apply_lora(model, cfg)
        lr = 1e-3 if method == "full" else 1e-2  # adapters start at zero and move further: a larger rate
        opt = optim.AdamW([nn.ParamGroup("*", lr=lr).bind(model)], weight_decay=0.0)
        step, peak = measured(dev, lambda m=model, o=opt: train(m, o, new_train, args.epochs, dev))
        acc = accuracy(model, new_valid, dev)
        trainable = lora.trainable_parameters(model)[0]
        total = base.num_parameters()  # a quantized base holds its weights as buffers: count the float model
        if method == "full":  # what must be saved: the whole model's weights
            size = sum(v.size * v.dtype.itemsize for v in model.state_dict().values())
        else:  # the adapter alone (safetensors + JSON record)
            size = directory_bytes(str(lora.save_adapter(model, os.path.join(tmp, method))))
        rows.append((method, acc, trainable / total, size, peak, step))

    print(f"\nfine-tuning on rotated digits, {args.epochs} epochs, rank {args.rank} (alpha {cfg.alpha:g}):")
    print(f"{'method':<8} {'accuracy':>8} {'trained':>8} {'saved':>10} {'peak mem':>10} {'step':>9}")
    for method, acc, share, size, peak, step in rows:
        mem = f"{peak / 2**20:.1f} MiB" if peak is not None else "n/a"
        print(f"{method:<8} {acc:>8.3f} {share:>8.2%} {size / 2**20:>6.2f} MiB {mem:>10} {step * 1e3:>6.1f} ms")


if __name__ == "__main__":
    main()
