"""DataLoader: batches, seeded shuffling, collation to device tensors, background prefetch."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..creation import tensor
from ..errors import ArgumentTypeError, InvalidArgumentError
from ..ops.movement import stack
from ..tensor import Tensor

__all__ = ["DataLoader", "default_collate"]


def default_collate(items: list[Any], as_tensors: bool = True, device: Any = None) -> Any:
    """Stack a list of items (arrays, numbers, tuples or dicts of them) into batch arrays/tensors."""
    first = items[0]
    if isinstance(first, tuple):
        return tuple(default_collate([it[k] for it in items], as_tensors, device) for k in range(len(first)))
    if isinstance(first, list):
        return [default_collate([it[k] for it in items], as_tensors, device) for k in range(len(first))]
    if isinstance(first, dict):
        return {k: default_collate([it[k] for it in items], as_tensors, device) for k in first}
    if isinstance(first, Tensor):
        return stack(items)
    if isinstance(first, float) and not isinstance(first, np.floating):
        arr = np.asarray(items, dtype=np.float32)
    else:
        arr = np.stack([np.asarray(it) for it in items])
    if not as_tensors:
        return arr
    return tensor(arr, device=device)


def _to_device(batch: Any, device: Any) -> Any:
    if isinstance(batch, np.ndarray):
        return tensor(batch, device=device)
    if isinstance(batch, tuple):
        return tuple(_to_device(b, device) for b in batch)
    if isinstance(batch, list):
        return [_to_device(b, device) for b in batch]
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch


_DONE = object()


class DataLoader:
    """Iterate over ``dataset`` in batches.

    ``shuffle`` draws a new order each epoch from ``seed`` and the epoch number, so a run is
    reproducible and can be resumed mid-epoch (``state_dict`` / ``load_state_dict``). Items are
    loaded and collated on ``num_workers`` background threads, ``prefetch`` batches ahead;
    tensors are created on ``device`` in the consuming thread.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        device: Any = None,
        num_workers: int = 1,
        prefetch: int = 2,
    ) -> None:
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise ArgumentTypeError("DataLoader: dataset must have __len__ and __getitem__")
        if batch_size < 1:
            raise InvalidArgumentError(f"DataLoader: batch_size must be >= 1, got {batch_size}")
        if num_workers < 0 or prefetch < 0:
            raise InvalidArgumentError("DataLoader: num_workers and prefetch must be >= 0")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.collate_fn = collate_fn
        self.device = device
        self.num_workers = num_workers
        self.prefetch = prefetch
        self.epoch = 0
        self._skip = 0  # batches of the current epoch already consumed (for resume)

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order the next iteration uses."""
        self.epoch = int(epoch)
        self._skip = 0

    def order(self, epoch: int | None = None) -> np.ndarray:
        """The item order of an epoch."""
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n)
        e = self.epoch if epoch is None else epoch
        return np.random.default_rng([self.seed, e]).permutation(n)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batches_done": self._skip, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue at the batch after the last one consumed when ``state`` was taken."""
        self.epoch = int(state["epoch"])
        self._skip = int(state["batches_done"])
        self.seed = int(state.get("seed", self.seed))

    def _batches(self) -> list[np.ndarray]:
        order = self.order()
        bs = self.batch_size
        batches = [order[i : i + bs] for i in range(0, len(order), bs)]
        if self.drop_last and batches and len(batches[-1]) < bs:
            batches.pop()
        return batches[self._skip :]

    def _load(self, idx: np.ndarray, pool: ThreadPoolExecutor | None) -> Any:
        get = self.dataset.__getitem__
        items = list(pool.map(get, (int(i) for i in idx))) if pool else [get(int(i)) for i in idx]
        if self.collate_fn is not None:
            return self.collate_fn(items)
        return default_collate(items, as_tensors=False)

    def __iter__(self) -> Iterator[Any]:
        batches = self._batches()
        if self.num_workers == 0 or self.prefetch == 0:
            for idx in batches:
                batch = self._load(idx, None)
                self._skip += 1
                yield _to_device(batch, self.device)
        else:
            yield from self._iter_threaded(batches)
        self.epoch += 1
        self._skip = 0

    def _iter_threaded(self, batches: list[np.ndarray]) -> Iterator[Any]:
        q: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()

        def produce() -> None:
            pool = ThreadPoolExecutor(self.num_workers) if self.num_workers > 1 else None
            try:
                for idx in batches:
                    if stop.is_set():
                        return
                    q.put(self._load(idx, pool))
                q.put(_DONE)
            except BaseException as exc:  # hand the error to the consumer
                q.put(exc)
            finally:
                if pool:
                    pool.shutdown(wait=False)

        thread = threading.Thread(target=produce, name="ember-dataloader", daemon=True)
        thread.start()
        try:
            while True:
                item = q.get()
                if item is _DONE:
                    break
                if isinstance(item, BaseException):
                    raise item
                self._skip += 1
                yield _to_device(item, self.device)
        finally:
            stop.set()
            while thread.is_alive():
                try:
                    q.get_nowait()
                except queue.Empty:
                    thread.join(timeout=0.05)
