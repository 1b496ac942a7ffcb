"""DataLoader: batches, seeded shuffling, collation to device tensors, background prefetch."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

import numpy as np

from ..creation import tensor
from ..errors import ArgumentTypeError, EmberKeyError, InvalidArgumentError, LoaderTimeoutError
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
_POLL_S = 0.05  # how often a waiting thread looks at its stop flag (and the main thread at Ctrl-C)


class _Stopped(Exception):
    """The consumer went away: the producer thread ends quietly."""


class _Inflight:
    """The dataset indices being loaded right now, with when each started (for timeout messages)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: dict[int, float] = {}

    def call(self, get: Callable[[int], Any], index: int) -> Any:
        with self._lock:
            self._started[index] = time.monotonic()
        try:
            return get(index)
        finally:
            with self._lock:
                self._started.pop(index, None)

    def describe(self) -> str:
        now = time.monotonic()
        with self._lock:
            items = sorted(self._started.items(), key=lambda kv: kv[1])
        if not items:
            return "no dataset item is loading (collate_fn or the producer is slow)"
        shown = ", ".join(f"{i} (for {now - t:.1f} s)" for i, t in items[:8])
        more = f" and {len(items) - 8} more" if len(items) > 8 else ""
        return f"dataset index {shown}{more} still loading"


class _DaemonPool:
    """``num_workers`` daemon threads running ``fn(index)``: unlike ThreadPoolExecutor's threads,
    a worker stuck in a dataset item does not hold up interpreter exit after Ctrl-C or a timeout."""

    def __init__(self, n: int, stop: threading.Event) -> None:
        self._tasks: queue.Queue = queue.Queue()
        self._stop = stop
        self._threads = [
            threading.Thread(target=self._work, name=f"ember-dataloader-worker-{k}", daemon=True) for k in range(n)
        ]
        for t in self._threads:
            t.start()

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                task = self._tasks.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if task is None:
                return
            fut, fn, arg = task
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(arg))
            except BaseException as exc:
                fut.set_exception(exc)

    def map(self, fn: Callable[[int], Any], args: list[int]) -> list[Any]:
        futures: list[Future] = []
        for a in args:
            fut: Future = Future()
            self._tasks.put((fut, fn, a))
            futures.append(fut)
        out = []
        for fut in futures:
            while True:
                if self._stop.is_set():
                    for f in futures:
                        f.cancel()
                    raise _Stopped
                try:
                    out.append(fut.result(timeout=_POLL_S))
                    break
                except TimeoutError:
                    continue
        return out

    def shutdown(self) -> None:
        for _ in self._threads:
            self._tasks.put(None)


class DataLoader:
    """Iterate over ``dataset`` in batches.

    ``shuffle`` draws a new order each epoch from ``seed`` and the epoch number, so a run is
    reproducible and can be resumed mid-epoch (``state_dict`` / ``load_state_dict``). Items are
    loaded and collated on ``num_workers`` background threads, ``prefetch`` batches ahead;
    tensors are created on ``device`` in the consuming thread.

    ``timeout`` (seconds, with worker threads) bounds how long the loop waits for the next batch:
    past it, :class:`~ember.errors.LoaderTimeoutError` names the dataset indices still loading.
    ``None`` waits forever. Ctrl-C while waiting stops the loader's threads and raises
    ``KeyboardInterrupt`` at once; a thread stuck inside a dataset's ``__getitem__`` cannot be
    killed from Python, so it is left behind as a daemon and loads nothing more.
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
        timeout: float | None = None,
    ) -> None:
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise ArgumentTypeError(
                f"DataLoader: dataset must have __len__ and __getitem__, got {type(dataset).__name__}; "
                f"wrap arrays in ember.data.InMemoryDataset"
            )
        for name, value, low in (
            ("batch_size", batch_size, 1),
            ("num_workers", num_workers, 0),
            ("prefetch", prefetch, 0),
        ):
            if not isinstance(value, int) or isinstance(value, bool):
                raise ArgumentTypeError(f"DataLoader: {name} must be an int, got {value!r} ({type(value).__name__})")
            if value < low:
                raise InvalidArgumentError(f"DataLoader: {name} must be >= {low}, got {value}")
        if timeout is not None:
            if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
                raise ArgumentTypeError(f"DataLoader: timeout must be a number of seconds or None, got {timeout!r}")
            if not timeout > 0:
                raise InvalidArgumentError(
                    f"DataLoader: timeout must be > 0 seconds (or None to wait), got {timeout!r}"
                )
            if num_workers == 0 or prefetch == 0:
                raise InvalidArgumentError(
                    f"DataLoader: timeout={timeout!r} needs worker threads to watch (num_workers >= 1 and "
                    f"prefetch >= 1), got num_workers={num_workers}, prefetch={prefetch}"
                )
        if collate_fn is not None and not callable(collate_fn):
            raise ArgumentTypeError(f"DataLoader: collate_fn must be callable or None, got {collate_fn!r}")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.collate_fn = collate_fn
        self.device = device
        self.num_workers = num_workers
        self.prefetch = prefetch
        self.timeout = timeout
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
        missing = [k for k in ("epoch", "batches_done") if k not in state]
        if missing:
            raise EmberKeyError(
                f"DataLoader.load_state_dict: the state lacks {missing}; pass what DataLoader.state_dict() returned"
            )
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

    def _load(
        self,
        idx: np.ndarray,
        pool: _DaemonPool | None = None,
        inflight: _Inflight | None = None,
        stop: threading.Event | None = None,
    ) -> Any:
        get = self.dataset.__getitem__
        indices = [int(i) for i in idx]
        if pool is not None and inflight is not None:
            items = pool.map(lambda i: inflight.call(get, i), indices)
        else:
            items = []
            for i in indices:
                if stop is not None and stop.is_set():
                    raise _Stopped
                items.append(inflight.call(get, i) if inflight is not None else get(i))
        if self.collate_fn is not None:
            return self.collate_fn(items)
        return default_collate(items, as_tensors=False)

    def __iter__(self) -> Iterator[Any]:
        batches = self._batches()
        if self.num_workers == 0 or self.prefetch == 0:
            for idx in batches:
                batch = self._load(idx)
                self._skip += 1
                yield _to_device(batch, self.device)
        else:
            yield from self._iter_threaded(batches)
        self.epoch += 1
        self._skip = 0

    def _iter_threaded(self, batches: list[np.ndarray]) -> Iterator[Any]:
        q: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()
        inflight = _Inflight()

        def put(item: Any) -> None:
            while not stop.is_set():
                try:
                    q.put(item, timeout=_POLL_S)
                    return
                except queue.Full:
                    continue
            raise _Stopped

        def produce() -> None:
            pool = _DaemonPool(self.num_workers, stop) if self.num_workers > 1 else None
            try:
                for idx in batches:
                    if stop.is_set():
                        return
                    put(self._load(idx, pool, inflight, stop))
                put(_DONE)
            except _Stopped:
                return
            except BaseException as exc:  # hand the error to the consumer
                try:
                    put(exc)
                except _Stopped:
                    return
            finally:
                if pool:
                    pool.shutdown()

        thread = threading.Thread(target=produce, name="ember-dataloader", daemon=True)
        thread.start()
        try:
            for k in range(len(batches)):
                item = self._next(q, inflight, k)
                if item is _DONE:
                    break
                if isinstance(item, BaseException):
                    raise item
                self._skip += 1
                yield _to_device(item, self.device)
        finally:
            # a consumer that stops early, a timeout, an error or Ctrl-C: tell the threads to stop
            # and give them a moment; one stuck in the dataset stays behind as a daemon
            stop.set()
            thread.join(timeout=2 * _POLL_S)

    def _next(self, q: queue.Queue, inflight: _Inflight, k: int) -> Any:
        """The next batch from the producer, waiting in short slices so that Ctrl-C is seen at once."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            wait = _POLL_S if deadline is None else min(_POLL_S, max(deadline - time.monotonic(), 0.0))
            try:
                return q.get(timeout=wait)
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise LoaderTimeoutError(
                        f"DataLoader(timeout={self.timeout!r}): batch {self._skip} of epoch {self.epoch} "
                        f"did not arrive within {self.timeout} s; {inflight.describe()} in "
                        f"{type(self.dataset).__name__}. Find why __getitem__ blocks there, or raise "
                        f"timeout (None waits forever)."
                    ) from None
