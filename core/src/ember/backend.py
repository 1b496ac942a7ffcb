"""The Backend protocol: what a device plugin implements, and its Capabilities.

A backend is a class. ``BackendSpec.loader`` returns it; ember makes one instance per device
index the first time a tensor is placed there. Native ops are methods marked ``@native``
(named after the op: ``add``, ``sum``, ``matmul``...) or entries of ``native_kernels()``.
They take backend handles (the backend's own buffers) positionally and parameters by
keyword, and return a new handle; they never mutate inputs. ``ember.dispatch.OPS[name]``
holds each op's kind and the exact native signature (``ember ops`` prints the table).
The shape and dtype of every result are worked out by ember's core before the call, so a
backend only computes.

A backend that implements :data:`REQUIRED_PRIMITIVES` is complete: every other op has a
composite definition in ember's core. Implementing a composite op natively (``softmax``,
``conv``...) makes it fast; the core's gradient rule still applies to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from .dtypes import ALL_DTYPES, COMPLEX_DTYPES, DType
from .errors import NotImplementedOpError
from .memory import MemoryStats, unmeasured_stats

if TYPE_CHECKING:  # annotations only: ember.device and ember.lazy are layers above
    from .device import Device
    from .lazy.program import FusedProgram

__all__ = [
    "Backend",
    "Capabilities",
    "native",
    "EXTENSION_KERNELS",
    "REQUIRED_PRIMITIVES",
    "PRIMITIVE_SIGNATURES",
]

#: every primitive with the signature a backend method must have (``a``/``b``: handles).
PRIMITIVE_SIGNATURES: dict[str, str] = {
    # transfer and creation
    "from_numpy": "from_numpy(array) -> handle  # array: C-contiguous numpy array of a supported dtype",
    "to_numpy": "to_numpy(a) -> numpy.ndarray",
    "full": "full(*, shape, value, dtype) -> handle",
    "arange": "arange(*, start, step, size, dtype) -> handle  # start + step * i for i < size",
    "random_bits": "random_bits(*, key, counter, size) -> uint32 handle  # Philox 4x32-10 words",
    # elementwise unary (same dtype out, except isnan/isinf -> bool)
    **{
        name: f"{name}(a) -> handle"
        for name in (
            "neg abs sign exp log sqrt rsqrt sin cos tanh erf floor ceil round trunc "
            "reciprocal isnan isinf logical_not bitwise_not"
        ).split()
    },
    # elementwise binary: a and b share a dtype and broadcast; b may be a Python scalar
    **{
        name: f"{name}(a, b) -> handle"
        for name in (
            "add sub mul div floordiv remainder pow maximum minimum atan2 eq ne lt le gt ge "
            "logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor"
        ).split()
    },
    "where": "where(cond, a, b) -> handle  # cond bool; a, b share a dtype; all broadcast",
    "cast": "cast(a, *, dtype) -> handle",
    # reductions
    **{name: f"{name}(a, *, axes, keepdims) -> handle" for name in ("sum", "prod", "max", "min", "any", "all")},
    "argmax": "argmax(a, *, axis, keepdims) -> int64 handle",
    "argmin": "argmin(a, *, axis, keepdims) -> int64 handle",
    "cumsum": "cumsum(a, *, axis) -> handle",
    # movement
    "reshape": "reshape(a, *, shape) -> handle",
    "permute": "permute(a, *, axes) -> handle",
    "expand": "expand(a, *, shape) -> handle  # numpy broadcast_to",
    "slice": "slice(a, *, starts, stops, steps) -> handle  # steps >= 1",
    "pad": "pad(a, *, pads, value) -> handle  # pads: ((lo, hi), ...) per axis, >= 0",
    "flip": "flip(a, *, axes) -> handle",
    "concat": "concat(*arrays, axis) -> handle",
    # indexing
    "gather": "gather(a, index, *, axis) -> handle  # numpy take_along_axis",
    "scatter_add": "scatter_add(a, index, values, *, axis) -> handle  # inverse of gather, summed",
    "index_put": "index_put(a, values, *indices, accumulate) -> handle  # out[indices] = values",
    # linear algebra and sorting
    "matmul": "matmul(a, b) -> handle  # batched, broadcasting",
    "sort": "sort(a, *, axis, descending) -> handle  # stable",
    "argsort": "argsort(a, *, axis, descending) -> int64 handle  # stable",
}

REQUIRED_PRIMITIVES: frozenset[str] = frozenset(PRIMITIVE_SIGNATURES)


#: (op name, device kind) -> native kernel ``fn(backend, *handles, **params)`` that an extension
#: added (``@op.kernel("cpu")``); it takes precedence over the backend's own table.
EXTENSION_KERNELS: dict[tuple[str, str], Callable[..., Any]] = {}

_NATIVE_MARK = "__ember_native_op__"


def native(fn: Callable[..., Any] | None = None, *, op: str | None = None) -> Any:
    """Declare a backend method as the native implementation of an op.

    ``@native`` names the op after the attribute (``exp = native(staticmethod(np.exp))`` is
    ``exp``); ``@native(op="slice")`` names it explicitly.
    Only declared methods count: a helper method that happens to share an op's name is not
    called by dispatch.
    """

    def mark(f: Any) -> Any:
        setattr(f, _NATIVE_MARK, op or True)  # True: the op is named like the attribute
        return f

    return mark(fn) if fn is not None else mark


@dataclass(frozen=True)
class Capabilities:
    """What one device can do; the conformance suite skips what is not here, with the reason."""

    dtypes: frozenset[DType]
    native_ops: frozenset[str]
    unsupported_dtypes: dict[str, str] = field(default_factory=dict)
    fusion: bool = False
    #: elementwise ops with fewer result elements run eagerly unless an operand is deferred
    fusion_min_elements: int = 0
    #: reductions (sum prod max min mean) that ``run_fused`` computes at the end of a fused program
    fusion_reductions: frozenset[str] = frozenset()
    graph_replay: bool = False
    notes: dict[str, str] = field(default_factory=dict)

    def supports(self, dtype: DType) -> bool:
        return dtype in self.dtypes

    def why_not(self, dtype: DType) -> str:
        """The backend's reason for not supporting ``dtype``."""
        return self.unsupported_dtypes.get(dtype.name, f"the backend does not support {dtype}")


class Backend:
    """Base class of device backends. Subclass, set ``name``, declare native ops with ``@native``."""

    #: short name shown by ``ember plugins`` / ``ember devices``
    name: ClassVar[str] = "backend"
    #: dtypes this backend computes with; tensors of other dtypes are refused with the reason
    supported_dtypes: ClassVar[frozenset[DType]] = frozenset(ALL_DTYPES)
    #: reason per unsupported dtype name, e.g. ``{"float64": "WGSL has no 64-bit floats"}``
    unsupported_dtype_reasons: ClassVar[dict[str, str]] = {}
    fusion: ClassVar[bool] = False
    #: an elementwise op whose result has fewer elements runs eagerly, unless one of its operands
    #: is already deferred (a backend whose fused kernels only pay off on large regions sets it)
    fusion_min_elements: ClassVar[int] = 0
    #: reductions ``run_fused`` can end a program with (``FusedProgram.reduce``): the lazy layer
    #: then runs ``region.sum(axis)`` as one kernel; empty: the region is realized, then reduced
    fusion_reductions: ClassVar[frozenset[str]] = frozenset()
    #: ``run_fused`` takes ``outs=``: per output a handle offered to write it into, or None; it
    #: returns the offered handle for an output it wrote there, a fresh one otherwise. The lazy
    #: layer offers, for the target, a tensor operand nothing else holds any more (the old
    #: buffer of ``p.copy_(p - lr * g)``): the kernel may read and write it at one index
    fusion_outs: ClassVar[bool] = False
    graph_replay: ClassVar[bool] = False
    #: True when results are ready as ops return (reading a value back costs no stall). Backends
    #: that queue work set False: the core then skips host-side index range checks, and their
    #: gather/scatter kernels must clamp out-of-range indices instead of faulting.
    cheap_readback: ClassVar[bool] = True
    #: op name -> method name of every ``@native`` method, this class and its bases
    native_methods: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        table: dict[str, str] = {}
        for klass in reversed(cls.__mro__):
            for attr, value in vars(klass).items():
                op = getattr(value, _NATIVE_MARK, None)
                if op is None and isinstance(value, (staticmethod, classmethod)):
                    op = getattr(value.__func__, _NATIVE_MARK, None)
                if op is True:
                    table[attr] = attr
                elif isinstance(op, str):
                    table[op] = attr
        cls.native_methods = table

    def __init__(self, device: Device) -> None:
        self.device = device
        self._kernels: dict[str, Callable[..., Any]] | None = None

    # -- discovery -----------------------------------------------------------------------
    @classmethod
    def device_count(cls) -> int:
        """How many devices of this kind exist on this machine."""
        return 1

    @classmethod
    def describe(cls, index: int) -> dict[str, Any]:
        """Human-readable facts about device ``index`` (name, vendor, memory, features)."""
        return {"name": cls.name}

    @classmethod
    def why_unavailable(cls) -> str:
        """Why :meth:`device_count` is 0 and what to install (``ember doctor`` prints it), or ''."""
        return ""

    # -- native ops ----------------------------------------------------------------------
    def native_kernels(self) -> dict[str, Callable[..., Any]]:
        """op name -> callable for every op this backend computes natively.

        The default is the ``@native`` methods. A backend that generates kernels (one
        elementwise generator for many ops) extends it: ``{**super().native_kernels(), ...}``.
        """
        return {op: getattr(self, attr) for op, attr in self.native_methods.items()}

    def implementation(self, op: str) -> Callable[..., Any] | None:
        """The callable computing ``op`` natively, or None to use ember's composite."""
        kernels = self._kernels
        if kernels is None:
            kernels = self._kernels = self.native_kernels()
        return kernels.get(op)

    def capability_notes(self) -> dict[str, str]:
        """Free-text notes shown by ``ember doctor`` (how dtypes are stored, caveats)."""
        return {}

    @property
    def capabilities(self) -> Capabilities:
        """Computed on each access from the native table, so extension kernels added later count."""
        if self._kernels is None:
            self._kernels = self.native_kernels()
        kind = self.device.kind
        native_ops = {op for op in self._kernels if self.implementation(op) is not None}
        native_ops.update(op for (op, k) in EXTENSION_KERNELS if k == kind)
        # complex dtypes came after most backends were written: one that names neither holds
        # nor explains them gets this reason instead of none
        reasons = {
            dt.name: f"the {self.name} backend declares no complex dtypes (its supported_dtypes lists none)"
            for dt in COMPLEX_DTYPES
            if dt not in self.supported_dtypes
        }
        reasons.update(self.unsupported_dtype_reasons)
        return Capabilities(
            dtypes=frozenset(self.supported_dtypes),
            native_ops=frozenset(native_ops),
            unsupported_dtypes=reasons,
            fusion=self.fusion,
            fusion_min_elements=self.fusion_min_elements,
            fusion_reductions=frozenset(self.fusion_reductions) if self.fusion else frozenset(),
            graph_replay=self.graph_replay,
            notes=self.capability_notes(),
        )

    def missing_primitives(self) -> list[str]:
        """Required primitives this backend does not implement (empty when complete)."""
        return sorted(op for op in REQUIRED_PRIMITIVES if self.implementation(op) is None)

    # -- housekeeping --------------------------------------------------------------------
    def synchronize(self) -> None:
        """Block until queued work is done (no-op for synchronous backends)."""

    def memory_stats(self) -> MemoryStats:
        """Bytes reserved / in use, peaks, per pool (the ``ember.memory.MemoryStats`` schema).

        This default is the schema of a backend that cannot measure: None counters and the reason
        in ``note``. A pooled backend returns ``ember.memory.measured_stats(...)``.
        """
        return unmeasured_stats(f"the {self.name} backend does not report its memory use")

    # -- fusion (backends with ``fusion = True``; DESIGN.md section 7) ---------------------------
    def fusion_ops(self) -> frozenset[str]:
        """Elementwise op names (besides ``cast``) this backend's generator compiles into fused
        programs; the lazy layer defers exactly these."""
        return frozenset()

    def run_fused(self, program: FusedProgram, operands: list[Any], *, shape: tuple[int, ...]) -> list[Any]:
        """Run a :class:`~ember.lazy.program.FusedProgram` over ``shape``: ``operands`` are the
        handles of its tensor inputs (broadcasting to ``shape``) and the Python numbers of its
        scalar inputs, in input order; returns one new contiguous handle per output, then, if
        ``program.reduce`` is set (an op of :attr:`fusion_reductions`), the reduced value's. A
        backend that sets :attr:`fusion_outs` also takes ``outs=`` (see there)."""
        raise NotImplementedOpError(f"{self.name} backend sets fusion but does not implement run_fused")

    def compile_replay(self, program: Any) -> Callable[[list[Any]], None] | None:
        """A native replay of an ``em.jit`` capture (:class:`ember.lazy.jit.Program`, every step
        on this device): ``replay(vals)`` runs the steps, filling ``vals`` as
        :func:`ember.lazy.jit.run_steps` does (the slots in ``program.keep`` and the writes at
        least). None (the default): ember replays the step list in Python."""
        return None

    def handle_meta(self, a: Any) -> tuple[tuple[int, ...], str]:
        """(shape, dtype name) of a handle; needed by extension kernels' results and by fusion."""
        raise NotImplementedOpError(f"{self.name} backend does not implement handle_meta")

    def dlpack(self, a: Any) -> Any:
        """An object with ``__dlpack__`` sharing ``a``'s memory; default: a numpy copy."""

        # a copy: to_numpy may return a read-only view, which older DLPack consumers refuse
        return np.array(self.implementation("to_numpy")(a), copy=True)

    def from_dlpack(self, obj: Any) -> Any:
        """A handle from a DLPack-capable object; default: through numpy on the host."""

        # a private copy, as from_numpy expects: the producer may change its buffer later
        return self.implementation("from_numpy")(np.array(np.from_dlpack(obj), copy=True, order="C"))

    def receive(self, source: Backend, handle: Any) -> Any:
        """A handle of this device copied from ``source``'s ``handle`` without a trip through host
        memory (GPU to GPU), or None: then the move goes through the host."""
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.device}>"
