"""Devices: where a tensor lives and which backend plugin computes it.

A :class:`Device` is a (kind, index) pair plus an autodiff flag. Devices are interned, so
``Device("cpu") is Device.cpu()``. The autodiff flag is part of the device, as in Burn:
tensors made on ``dev.autodiff()`` can record a graph, and both variants share one backend.
``Device(spec, memory="static")`` chooses the pool strategy of the hardware (ember.memory;
both variants share it, like the backend) and returns the same interned device.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from . import config
from . import memory as _memory
from .backend import EXTENSION_KERNELS
from .errors import ArgumentTypeError, DeviceMismatchError, DeviceUnavailableError, DTypeError, InvalidArgumentError
from .plugins import get_registry

if TYPE_CHECKING:  # annotations only: nothing here needs Backend, Capabilities or DType at run time
    from .backend import Backend, Capabilities
    from .dtypes import DType

__all__ = [
    "Device",
    "common_device",
    "device_arg",
    "check_dtype",
    "invalidate",
    "on_backend_load",
    "RUN_FUSED",
    "set_defer",
    "set_recorder",
    "set_tracer",
]

#: called with the plain Device when its backend instance is made (the lazy layer installs here)
_ON_LOAD: list[Any] = []


def on_backend_load(fn: Any) -> None:
    """Call ``fn(device)`` whenever a device's backend is loaded (and now for those already loaded)."""
    _ON_LOAD.append(fn)
    for (kind, index), state in list(_STATES.items()):
        if state._backend is not None:
            fn(Device(kind, index))


#: the table entry through which the lazy layer runs fused programs (``Backend.run_fused``),
#: so that everything a kernel runs through is one table a recorder (``em.jit``) can wrap
RUN_FUSED = "run_fused"


class _ImplTable(dict):
    """op name -> native implementation (or None), filled on first use of each op; and
    :data:`RUN_FUSED` -> the backend's ``run_fused``.

    An extension kernel registered for this device kind wins over the backend's own table.
    """

    __slots__ = ("state",)

    def __init__(self, state: _DeviceState) -> None:
        super().__init__()
        self.state = state

    def __missing__(self, name: str) -> Any:
        backend = self.state.backend
        if name == RUN_FUSED:
            self[name] = backend.run_fused
            return backend.run_fused
        kernel = EXTENSION_KERNELS.get((name, self.state.kind))
        impl = functools.partial(kernel, backend) if kernel is not None else backend.implementation(name)
        self[name] = impl
        return impl


class _DeviceState:
    """What the plain and the autodiff variant of one device share: the backend instance."""

    __slots__ = ("kind", "index", "_backend", "impls", "defer")

    def __init__(self, kind: str, index: int) -> None:
        self.kind = kind
        self.index = index
        self._backend: Backend | None = None
        self.impls = _ImplTable(self)
        #: the lazy layer's hook, ``defer(op, handles, params, shape, dtype) -> handle``; None: eager
        self.defer: Any = None

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            try:
                backend_cls = get_registry().backend_class(self.kind)
                count = backend_cls.device_count()
                if not 0 <= self.index < count:
                    raise DeviceUnavailableError(
                        f"{self.kind}:{self.index} does not exist: the {self.kind} backend found "
                        f"{_listing(backend_cls, self.kind, count)}. Run `ember devices` for details."
                    )
            except DeviceUnavailableError as exc:
                spec = config.default_device()
                if spec != "cpu" and _spec_names(spec, self.kind, self.index):
                    raise DeviceUnavailableError(
                        f"{str(exc).rstrip('.')}. EMBER_DEVICE={spec!r} names this device. {_EMBER_DEVICE_FIX}"
                    ) from None
                raise
            device = Device(self.kind, self.index)
            self._backend = backend_cls(device)
            for fn in _ON_LOAD:
                fn(device)
        return self._backend


def _listing(backend_cls: type[Backend], kind: str, count: int) -> str:
    """``1 device: cuda:0 (NVIDIA H200)`` or, with none, the backend's reason."""
    if count == 0:
        why = backend_cls.why_unavailable()
        return "no device" + (f" ({why})" if why else "")
    names = []
    for i in range(count):
        try:
            names.append(f"{kind}:{i} ({backend_cls.describe(i).get('name', '?')})")
        except Exception:  # describing is a courtesy: the error must still be raised
            names.append(f"{kind}:{i}")
    return f"{count} device(s): {', '.join(names)}"


_EMBER_DEVICE_FIX = "Set EMBER_DEVICE to a device `ember devices` lists (e.g. 'cpu'), or unset it."


def _spec_names(spec: str, kind: str, index: int) -> bool:
    """Whether the device spec ``spec`` (EMBER_DEVICE's value) names ``kind:index``."""
    try:
        k, i = _parse(spec)
    except InvalidArgumentError:
        return False
    return k == kind and (i if i is not None else _default_index(k)) == index


_INTERNED: dict[tuple[str, int, bool], Device] = {}
_STATES: dict[tuple[str, int], _DeviceState] = {}
_REMOTE_ADDRESSES: list[str] = []


def _parse(spec: str) -> tuple[str, int | None]:
    text = spec.strip().lower()
    if not text:
        raise InvalidArgumentError("Device(''): expected a device spec such as 'cpu', 'cuda:0' or 'opencl:1'")
    kind, sep, idx = text.partition(":")
    if not kind.replace("_", "").replace("-", "").isalnum():
        raise InvalidArgumentError(f"Device({spec!r}): the kind must be a name such as 'cpu' or 'opencl'")
    if not sep:
        return kind, None
    try:
        index = int(idx)
    except ValueError:
        raise InvalidArgumentError(
            f"Device({spec!r}): the part after ':' must be a device index, e.g. '{kind}:0'"
        ) from None
    if index < 0:
        raise InvalidArgumentError(f"Device({spec!r}): the device index must be >= 0")
    return kind, index


def _default_index(kind: str) -> int:
    if kind == "opencl":
        return config.opencl_device()
    if kind == "wgpu":
        return config.wgpu_adapter()
    return 0


class Device:
    """A compute device, e.g. ``Device("cpu")``, ``Device("opencl:1")``, ``Device.cuda(0)``.

    >>> import ember as em
    >>> em.Device("cpu:0") is em.Device.cpu()
    True
    >>> em.Device.cpu().autodiff()
    Device('cpu:0', autodiff=True)
    """

    __slots__ = ("kind", "index", "autodiff_enabled", "_state", "_impls", "_defer", "_least", "__weakref__")

    kind: str
    index: int
    autodiff_enabled: bool

    def __new__(
        cls, spec: str | Device = "cpu", index: int | None = None, *, autodiff: bool = False, memory: str | None = None
    ) -> Device:
        if memory is not None:
            # a property of the hardware, like its backend: set it, then intern as ever
            dev = Device(spec, index, autodiff=autodiff)
            _memory.set_device_strategy(f"{dev.kind}:{dev.index}", memory)
            return dev
        if isinstance(spec, Device):
            if index is None and not autodiff:
                return spec
            kind, parsed = spec.kind, spec.index
            autodiff = autodiff or spec.autodiff_enabled
        elif isinstance(spec, str):
            kind, parsed = _parse(spec)
        else:
            raise ArgumentTypeError(
                f"Device(spec={spec!r}): spec must be a string such as 'cpu' or 'opencl:0', or a Device, "
                f"got {type(spec).__name__}; for an index write Device('cpu', {spec!r})"
            )
        if index is not None and parsed is not None and index != parsed:
            raise InvalidArgumentError(f"Device({spec!r}, index={index}): two different indices given")
        idx = index if index is not None else parsed
        if idx is None:
            idx = _default_index(kind)
        key = (kind, int(idx), bool(autodiff))
        found = _INTERNED.get(key)
        if found is not None:
            return found
        self = object.__new__(cls)
        self.kind, self.index, self.autodiff_enabled = key
        state = _STATES.get(key[:2])
        if state is None:
            state = _STATES[key[:2]] = _DeviceState(kind, key[1])
        self._state = state
        self._impls = state.impls
        self._defer = state.defer
        self._least = _least(state.defer)
        _INTERNED[key] = self
        return self

    # -- constructors --------------------------------------------------------------------
    @staticmethod
    def cpu() -> Device:
        """The host CPU (the ``ember-cpu`` numpy backend)."""
        return Device("cpu", 0)

    @staticmethod
    def cuda(index: int = 0, *, memory: str | None = None) -> Device:
        """CUDA GPU ``index`` (the ``ember-cuda`` plugin); ``memory`` as in ``Device(...)``."""
        return Device("cuda", index, memory=memory)

    @staticmethod
    def opencl(index: int | None = None, *, memory: str | None = None) -> Device:
        """OpenCL device ``index`` (default ``EMBER_OPENCL_DEVICE`` or 0)."""
        return Device("opencl", index, memory=memory)

    @staticmethod
    def wgpu(index: int | None = None, *, memory: str | None = None) -> Device:
        """WebGPU adapter ``index`` (default ``EMBER_WGPU_ADAPTER`` or 0)."""
        return Device("wgpu", index, memory=memory)

    @staticmethod
    def remote(address: str) -> Device:
        """A device served by an ember remote server at ``address`` (the ``ember-remote`` plugin)."""
        if address not in _REMOTE_ADDRESSES:
            _REMOTE_ADDRESSES.append(address)
        return Device("remote", _REMOTE_ADDRESSES.index(address))

    @staticmethod
    def default() -> Device:
        """The device named by ``EMBER_DEVICE``, else ``cpu``."""
        spec = config.default_device()
        try:
            return Device(spec)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(
                f"EMBER_DEVICE={spec!r} is not a device spec: {str(exc).rstrip('.')}. {_EMBER_DEVICE_FIX}"
            ) from None

    @staticmethod
    def available() -> list[Device]:
        """Every device of every backend that loads on this machine."""
        return [Device(kind, i) for kind, count in get_registry().device_counts().items() for i in range(count)]

    # -- variants ------------------------------------------------------------------------
    def autodiff(self) -> Device:
        """The same device with autodiff on: tensors made here can record gradients."""
        return Device(self.kind, self.index, autodiff=True)

    def without_autodiff(self) -> Device:
        """The same device with autodiff off (for inference)."""
        return Device(self.kind, self.index, autodiff=False)

    # -- backend access ------------------------------------------------------------------
    @property
    def backend(self) -> Backend:
        """The backend instance that computes on this device (loaded on first use)."""
        return self._state.backend

    @property
    def capabilities(self) -> Capabilities:
        """What the backend supports: dtypes, native ops, fusion, graph replay."""
        return self.backend.capabilities

    def synchronize(self) -> None:
        """Wait until all work queued on this device has finished (deferred values held by
        tensors are computed first)."""
        flush = getattr(self._state.defer, "realize_pending", None)
        if flush is not None:
            flush()
        self.backend.synchronize()

    def memory_stats(self) -> dict[str, Any]:
        """Memory reserved and in use, with peaks, per pool, and the pools' strategy (ember.memory.MemoryStats)."""
        stats = self.backend.memory_stats()
        if "strategy" not in stats:  # a backend written before the key: name what its pools would use
            stats["strategy"] = self.memory.strategy if stats.get("pools") else None
        return stats

    @property
    def memory(self) -> _memory.DeviceMemory:
        """This hardware's pool strategy (read and set), ``dry_run()`` and ``empty_cache()``."""
        return _memory.DeviceMemory(f"{self.kind}:{self.index}", lambda: self.backend)

    def describe(self) -> dict[str, Any]:
        """Name, vendor, memory and feature flags of this device."""
        return type(self.backend).describe(self.index)

    @property
    def address(self) -> str | None:
        """For a remote device, the server address; otherwise None."""
        if self.kind == "remote" and self.index < len(_REMOTE_ADDRESSES):
            return _REMOTE_ADDRESSES[self.index]
        return None

    # -- identity ------------------------------------------------------------------------
    def same_hardware(self, other: Device) -> bool:
        """True if both name the same physical device (the autodiff flag aside)."""
        return self._state is other._state

    def __repr__(self) -> str:
        extra = ", autodiff=True" if self.autodiff_enabled else ""
        return f"Device('{self.kind}:{self.index}'{extra})"

    def __str__(self) -> str:
        return f"{self.kind}:{self.index}" + ("+autodiff" if self.autodiff_enabled else "")

    def __reduce__(self) -> tuple[Any, ...]:
        # every field: kind, index, the autodiff flag and, for a remote device, its address
        return (_unpickle, (self.kind, self.index, self.autodiff_enabled, self.address))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                other = Device(other)
            except (ValueError, TypeError):
                return False
        return self is other

    def __hash__(self) -> int:
        return hash((self.kind, self.index, self.autodiff_enabled))


def _unpickle(kind: str, index: int, autodiff: bool, address: str | None) -> Device:
    """The interned Device a pickled one stands for (a remote one re-registers its address)."""
    if address is not None:
        return Device(Device.remote(address), autodiff=autodiff)
    return Device(kind, index, autodiff=autodiff)


def invalidate(kind: str, op: str) -> None:
    """Forget the resolved implementation of ``op`` on every device of ``kind`` (a kernel was added)."""
    for (k, _), state in _STATES.items():
        if k == kind:
            state.impls.pop(op, None)


def set_defer(device: Device, defer: Any) -> None:
    """Install (or with None remove) the lazy layer's hook for ``device``'s hardware, both variants."""
    state = device._state
    state.defer = defer
    least = _least(defer)
    for dev in _INTERNED.values():
        if dev._state is state:
            dev._defer = defer
            dev._least = least


def _least(defer: Any) -> int:
    """Result sizes below which dispatch runs an op with no deferred operand itself, skipping the
    hook (the lazy layer's ``least``: it would run such an op at once anyway); 0: always the hook."""
    return getattr(defer, "least", 0) or 0


class _Traced:
    """Stands for every op's kernel while a tracer is installed: dispatch then calls the hook."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - the hook runs instead
        raise DeviceUnavailableError("an op reached a traced device without its tracer")


class _TracingTable(dict):
    """A device's implementation table while tracing: every op but ``to_numpy`` looks native."""

    __slots__ = ("real", "previous_defer")

    def __init__(self, real: _ImplTable, previous_defer: Any) -> None:
        super().__init__()
        self.real = real
        self.previous_defer = previous_defer

    def __missing__(self, name: str) -> Any:
        impl = self.real[name] if name == "to_numpy" else _TRACED
        self[name] = impl
        return impl


_TRACED = _Traced()


def _set_impls(state: _DeviceState, impls: Any) -> None:
    state.impls = impls
    for dev in _INTERNED.values():
        if dev._state is state:
            dev._impls = impls


def set_tracer(device: Device, hook: Any) -> Any:
    """Install ``hook`` (the lazy seam's signature) for every op of ``device``'s hardware, with
    each op reported native, so dispatch hands ops to it as the op table defines them (before
    any composite); export traces this way. Returns ``real(name)``, the backend kernel of an op
    (or None: run its composite). ``hook=None`` restores the table and the previous lazy hook."""
    state = device._state
    current = state.impls
    if hook is None:
        if isinstance(current, _TracingTable):
            _set_impls(state, current.real)
            set_defer(device, current.previous_defer)
        return state.impls.__getitem__
    if isinstance(current, _TracingTable):
        raise InvalidArgumentError(f"{device.kind}:{device.index} is already being traced; traces do not nest")
    _set_impls(state, _TracingTable(current, state.defer))
    set_defer(device, hook)
    return current.__getitem__


class _RecordingTable(dict):
    """A device's implementation table while ``em.jit`` captures: each entry is the real one
    wrapped by the recorder's ``wrap(name, impl)`` (None, a composite, stays None)."""

    __slots__ = ("real", "wrap")

    def __init__(self, real: Any, wrap: Any) -> None:
        super().__init__()
        self.real = real
        self.wrap = wrap

    def __missing__(self, name: str) -> Any:
        impl = self.real[name]
        wrapped = None if impl is None else self.wrap(name, impl)
        self[name] = wrapped
        return wrapped


def set_recorder(wrap: Any) -> list[Any]:
    """Wrap the implementation table of every loaded device with ``wrap(device, name, impl) ->
    callable`` (``em.jit`` records each backend call this way); ``wrap=None`` restores the
    real tables. Returns the devices wrapped (plain variants)."""
    wrapped = []
    for (kind, index), state in list(_STATES.items()):
        current = state.impls
        if wrap is None:
            if isinstance(current, _RecordingTable):
                _set_impls(state, current.real)
            continue
        if state._backend is None:
            continue
        if isinstance(current, (_RecordingTable, _TracingTable)):
            what = "captured by em.jit" if isinstance(current, _RecordingTable) else "traced for export"
            raise InvalidArgumentError(
                f"{kind}:{index} is already being {what}; em.jit captures do not nest and cannot run inside a trace"
            )
        device = Device(kind, index)
        _set_impls(state, _RecordingTable(current, functools.partial(wrap, device)))
        wrapped.append(device)
    return wrapped


def common_device(op: str, devices: list[Device]) -> Device:
    """The one physical device all inputs live on (autodiff if any is); else a clear error."""
    first = devices[0]
    result = first
    for dev in devices[1:]:
        if dev is result:
            continue
        if dev._state is not first._state:
            raise DeviceMismatchError(
                f"{op}: tensors on different devices ({first.kind}:{first.index} and "
                f"{dev.kind}:{dev.index}) cannot be combined. Move one with "
                f"`.to({str(Device(dev.kind, dev.index))!r})` or "
                f"`.to({str(Device(first.kind, first.index))!r})`."
            )
        if dev.autodiff_enabled:
            result = dev
    return result


def device_arg(device: Any) -> Device:
    """``None`` -> the default device; a string or Device -> that Device."""
    if device is None:
        return Device.default()
    if type(device) is Device:
        return device
    return Device(device)


def check_dtype(device: Device, dtype: DType, op: str) -> None:
    """Raise a DTypeError naming the device and its reason if it cannot hold ``dtype``."""
    backend = device.backend
    if dtype not in backend.supported_dtypes:
        reason = backend.unsupported_dtype_reasons.get(dtype.name, f"the {backend.name} backend does not support it")
        raise DTypeError(
            f"{op}: {device.kind}:{device.index} cannot hold {dtype} tensors ({reason}). "
            f"Use a supported dtype, e.g. float32."
        )
