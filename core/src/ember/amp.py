"""Mixed precision: ``autocast`` (which ops run in float16/bfloat16) and ``GradScaler``.

Inside ``with em.autocast(dtype=em.float16):`` the ops that gain most from low precision
(matmul and what is built on it, convolutions, attention) cast their floating inputs to the
autocast dtype, and the ops that need range or accuracy (softmax,
log_softmax, layer_norm, cross_entropy, sum, mean) cast low-precision inputs up to float32,
following PyTorch's autocast op lists. Every other op runs in its inputs' dtype. float64
inputs are never cast. The casts are ordinary recorded ops, so gradients reach float32
parameters in float32. The backward pass runs outside autocast: each op's gradient is
computed in the dtype its forward used.

The state is thread-local. Each op carries its policy (``LOW``, ``FLOAT32``, ``PROMOTE`` or
none) in the op table, and :mod:`ember.dispatch` applies it, after one attribute check
(``_STATE.dtype is not None``), so no op decides autocast for itself.

>>> import ember as em
>>> a = em.ones((2, 3))
>>> with em.autocast(dtype=em.float16):
...     y = a @ a.mT
...     s = y.softmax()
>>> y.dtype, s.dtype
(ember.float16, ember.float32)
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .autodiff.mode import no_grad
from .device import device_arg
from .dtypes import DType, as_dtype, bfloat16, float16, float32, float64
from .errors import ArgumentTypeError, DTypeError, EmberError, InvalidArgumentError
from .lazy.jit import set_grad

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above; nothing here needs Device at run time
    from .device import Device
    from .tensor import Tensor

__all__ = [
    "autocast",
    "is_autocast_enabled",
    "get_autocast_dtype",
    "cast_targets",
    "LOW",
    "FLOAT32",
    "PROMOTE",
    "GradScaler",
    "GradScalerError",
]

F = TypeVar("F", bound=Callable[..., Any])

_LOW = (float16, bfloat16)


class _State(threading.local):
    #: the autocast dtype in this thread, or None outside autocast
    dtype: DType | None = None


_STATE = _State()

#: (device state, dtype) pairs already checked to be supported
_SUPPORTED: set[tuple[Any, DType]] = set()


def is_autocast_enabled() -> bool:
    """Whether this thread is inside an enabled ``autocast`` region."""
    return _STATE.dtype is not None


def get_autocast_dtype() -> DType | None:
    """The low-precision dtype of the current autocast region (None outside one)."""
    return _STATE.dtype


def check_supported(device: Device, dtype: DType, op: str) -> None:
    key = (device._state, dtype)
    if key in _SUPPORTED:
        return
    caps = device.capabilities
    if not caps.supports(dtype):
        raise DTypeError(
            f"autocast: {op} on {device.kind}:{device.index} cannot compute in {dtype} ({caps.why_not(dtype)}). "
            f"Use em.autocast(dtype=...) with a dtype this device supports, or em.autocast(enabled=False) "
            f"around the work on this device."
        )
    _SUPPORTED.add(key)


class autocast:
    """Context manager (and decorator) running matmul-like ops in ``dtype``.

    ``dtype`` is ``em.float16`` (default) or ``em.bfloat16``; ``enabled=False`` turns
    autocast off inside an enclosing region. With ``device=`` the dtype is checked against
    that device on entry; otherwise on the first op that casts on each device.
    """

    def __init__(self, dtype: Any = float16, enabled: bool = True, device: Any = None) -> None:
        dt = as_dtype(dtype)
        if dt not in _LOW:
            raise DTypeError(f"autocast: dtype must be float16 or bfloat16, got {dt}")
        self.dtype = dt
        self.enabled = bool(enabled)
        self._prev: list[DType | None] = []
        if device is not None and self.enabled:
            check_supported(device_arg(device), dt, "autocast")

    def __enter__(self) -> autocast:
        self._prev.append(_STATE.dtype)
        _STATE.dtype = self.dtype if self.enabled else None
        return self

    def __exit__(self, *exc: object) -> None:
        _STATE.dtype = self._prev.pop()

    def __call__(self, fn: F) -> F:
        dtype, enabled = self.dtype, self.enabled

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with autocast(dtype, enabled):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"autocast(dtype={self.dtype!r}, enabled={self.enabled})"


#: autocast policies, set per op in ``ember.dispatch.define(..., autocast=...)`` and applied by
#: dispatch: ``LOW`` casts floating inputs (not float64) to the autocast dtype, ``FLOAT32``
#: casts float16/bfloat16 inputs up to float32, ``PROMOTE`` casts floating inputs to the widest
#: floating dtype among them. An op without a policy runs in its inputs' dtypes.
LOW = "low"
FLOAT32 = "float32"
PROMOTE = "promote"
POLICIES = frozenset((LOW, FLOAT32, PROMOTE))


def cast_targets(policy: str, dtypes: list[DType | None], autocast_dtype: DType) -> list[DType | None]:
    """The dtype each input should have under ``policy`` (None: leave it as it is).

    ``dtypes`` lists the inputs' dtypes (None for a non-tensor). An op with a float64 input is
    left alone: autocast never narrows float64.
    """
    floats = [d for d in dtypes if d is not None and d.kind == "f"]
    if not floats or float64 in floats:
        return [None] * len(dtypes)
    if policy == LOW:
        target = autocast_dtype
    elif policy == FLOAT32:
        target = float32
        return [target if d is float16 or d is bfloat16 else None for d in dtypes]
    else:
        target = max(floats, key=lambda d: d.itemsize)
    return [target if d is not None and d.kind == "f" and d is not target else None for d in dtypes]


# -- loss scaling --------------------------------------------------------------------------
class GradScalerError(EmberError, RuntimeError):
    """GradScaler methods were called out of order (e.g. ``unscale_`` twice before ``update``)."""


_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"


class GradScaler:
    """Dynamic loss scaling for float16 training.

    ``scale(loss)`` multiplies the loss by the scale so small float16 gradients do not flush
    to zero; ``step(optimizer)`` divides the gradients by it (``unscale_``) and steps only if
    every gradient is finite (one host synchronisation per device); ``update()`` halves the
    scale after a skipped step and doubles it after ``growth_interval`` good steps in a row.
    The scale lives on the host as a Python float, so scaling creates no tensors.

    >>> import ember as em
    >>> w = em.tensor([1.0], device=em.Device.cpu().autodiff(), requires_grad=True)
    >>> opt = em.optim.SGD([w], lr=0.1)
    >>> scaler = em.GradScaler(init_scale=1024.0)
    >>> scaler.scale((w * w).sum()).backward()
    >>> w.grad.item()
    2048.0
    >>> scaler.step(opt)
    >>> scaler.update()
    >>> round(w.item(), 6), scaler.get_scale()
    (0.8, 1024.0)
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        if not init_scale > 0:
            raise InvalidArgumentError(f"GradScaler: init_scale must be > 0, got {init_scale!r}")
        if not growth_factor > 1.0:
            raise InvalidArgumentError(f"GradScaler: growth_factor must be > 1, got {growth_factor!r}")
        if not 0.0 < backoff_factor < 1.0:
            raise InvalidArgumentError(f"GradScaler: backoff_factor must be in (0, 1), got {backoff_factor!r}")
        if not isinstance(growth_interval, int) or growth_interval <= 0:
            raise InvalidArgumentError(
                f"GradScaler: growth_interval must be a positive integer, got {growth_interval!r}"
            )
        self._enabled = bool(enabled)
        self._scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = growth_interval
        self._growth_tracker = 0
        self._per_optimizer: dict[int, dict[str, Any]] = {}

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def scale(self, outputs: Any) -> Any:
        """``outputs * scale`` (a tensor, or a list/tuple of them); float16/bfloat16 become float32."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        d = getattr(outputs, "_dtype", None)
        if d is None:
            raise ArgumentTypeError(
                f"GradScaler.scale: expected a Tensor or a list/tuple of Tensors, got {type(outputs)}"
            )
        if d is float16 or d is bfloat16:
            outputs = outputs.astype(float32)
        return outputs * self._scale

    def _state(self, optimizer: Any) -> dict[str, Any]:
        if not hasattr(optimizer, "param_groups"):
            raise ArgumentTypeError(f"GradScaler: optimizer must be an ember Optimizer, got {type(optimizer).__name__}")
        st = self._per_optimizer.get(id(optimizer))
        if st is None:
            st = self._per_optimizer[id(optimizer)] = {"stage": _READY, "found_inf": None}
        return st

    def unscale_(self, optimizer: Any) -> None:
        """Divide the optimizer's gradients by the scale and note whether any is inf/NaN.

        Call it before clipping gradients; ``step`` then does not unscale again.
        """
        if not self._enabled:
            return
        st = self._state(optimizer)
        if st["stage"] == _UNSCALED:
            raise GradScalerError("GradScaler.unscale_: already called for this optimizer since the last update()")
        if st["stage"] == _STEPPED:
            raise GradScalerError("GradScaler.unscale_: called after step(); call update() first")

        inv = 1.0 / self._scale
        flags: dict[Any, Tensor] = {}  # device -> 0-d tensor, NaN when a gradient was not finite
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    g = p._grad
                    if g is None:
                        continue
                    g = g.detach()
                    flag = (g * 0.0).sum()  # inf * 0 and NaN * 0 are NaN, so one NaN marks the lot
                    key = g._device._state
                    prev = flags.get(key)
                    flags[key] = flag if prev is None else prev + flag
                    set_grad(p, g * inv)
        st["found_inf"] = flags
        st["stage"] = _UNSCALED

    @staticmethod
    def _found_inf(st: dict[str, Any]) -> bool:
        found = st["found_inf"]
        if isinstance(found, dict):  # read the device flags once: the host synchronisation
            found = any(not math.isfinite(float(flag.item())) for flag in found.values())
            st["found_inf"] = found
        return bool(found)

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        """Unscale (unless done) and call ``optimizer.step()`` if every gradient is finite."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise GradScalerError("GradScaler.step: a closure is not supported; call backward before step")
        st = self._state(optimizer)
        if st["stage"] == _STEPPED:
            raise GradScalerError("GradScaler.step: already called for this optimizer since the last update()")
        if st["stage"] == _READY:
            self.unscale_(optimizer)
        result = None if self._found_inf(st) else optimizer.step(*args, **kwargs)
        st["stage"] = _STEPPED
        return result

    def update(self, new_scale: float | None = None) -> None:
        """Adjust the scale after this iteration's ``step`` calls (or set ``new_scale``)."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale)
        else:
            states = [st for st in self._per_optimizer.values() if st["found_inf"] is not None]
            if not states:
                raise GradScalerError(
                    "GradScaler.update: no gradients were checked since the last update(); call "
                    "scaler.step(optimizer) (or scaler.unscale_(optimizer)) first"
                )
            if any(self._found_inf(st) for st in states):
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    self._scale *= self._growth_factor
                    self._growth_tracker = 0
        self._per_optimizer.clear()

    def state_dict(self) -> dict[str, Any]:
        """Scale, factors, interval and growth tracker (empty when disabled), as in PyTorch."""
        if not self._enabled:
            return {}
        return {
            "scale": self._scale,
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not self._enabled:
            return
        if not state_dict:
            raise GradScalerError(
                "GradScaler.load_state_dict: the state is empty, probably saved from a disabled GradScaler"
            )
        self._scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])
