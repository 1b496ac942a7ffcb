"""A training loop written out by hand: what the Learner does for you, step by step.

Runs on any device: `python examples/custom_loop.py --device opencl` (default: EMBER_DEVICE or cpu).
Needs scikit-learn for its bundled digits data (no download).
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.datasets import load_digits

import ember as em
from ember import nn, optim
from ember.data import DataLoader, InMemoryDataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()

    dev = (em.Device(args.device) if args.device else em.Device.default()).autodiff()
    em.seed(0)  # the same initial weights on every device

    digits = load_digits()
    x = digits.data.astype(np.float32) / 16.0  # (1797, 64)
    y = digits.target.astype(np.int64)
    train, valid = InMemoryDataset(x, y).split(0.8, 0.2, seed=0)

    model = nn.Sequential(nn.Linear(64, 128, device=dev), nn.ReLU(), nn.Linear(128, 10, device=dev))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)

    for epoch in range(args.epochs):
        model.train()
        for xb, yb in DataLoader(train, batch_size=32, shuffle=True, seed=epoch, device=dev):
            loss = em.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()

        model.eval()
        correct = 0
        with em.no_grad():
            for xb, yb in DataLoader(valid, batch_size=256, device=dev):
                correct += int((model(xb).argmax(axis=1) == yb).sum().item())
        print(f"epoch {epoch + 1}: loss {loss.item():.4f}, valid accuracy {correct / len(valid):.3f}")


if __name__ == "__main__":
    main()
