"""A progress bar with live metrics: tqdm when installed, else a line every few seconds."""

from __future__ import annotations

import sys
import time
from typing import Any

__all__ = ["Progress"]


class Progress:
    """``with Progress(total, desc) as bar: bar.update(1, loss=0.3)``."""

    def __init__(self, total: int, desc: str, enabled: bool = True, initial: int = 0) -> None:
        self.total = total
        self.desc = desc
        self.enabled = enabled
        self.n = initial
        self._bar: Any = None
        self._last = 0.0
        self._start = time.perf_counter()
        if not enabled:
            return
        try:
            from tqdm import tqdm  # optional: only a visible progress bar needs it
        except ImportError:
            tqdm = None
        if tqdm is not None:
            self._bar = tqdm(total=total, desc=desc, initial=initial, leave=True, dynamic_ncols=True, unit="batch")

    def update(self, n: int = 1, **metrics: float) -> None:
        self.n += n
        if not self.enabled:
            return
        text = {k: f"{v:.4g}" for k, v in metrics.items()}
        if self._bar is not None:
            self._bar.update(n)
            if text:
                self._bar.set_postfix(text, refresh=False)
            return
        now = time.perf_counter()
        if now - self._last > 2.0 or self.n >= self.total:
            self._last = now
            shown = " ".join(f"{k}={v}" for k, v in text.items())
            print(f"{self.desc}: {self.n}/{self.total} {shown}", file=sys.stderr, flush=True)

    def close(self, **metrics: float) -> None:
        if self._bar is not None:
            if metrics:
                self._bar.set_postfix({k: f"{v:.4g}" for k, v in metrics.items()})
            self._bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
