"""Dispatch: the one road from an op to a backend.

Every op is an :class:`Op` in :data:`OPS`: its kind, the native signature a backend may
implement, its composite definition, vjp rule and autocast policy. Ops reach a backend only
through the functions of this module, and only this module records autodiff nodes and
applies autocast:

- :func:`apply` runs an op on tensors: one device for all inputs (else a clear error), the
  autocast policy, then the backend's native implementation if it declares one, otherwise the
  op's composite (written in ember ops); a graph node when an input requires grad.
- :func:`binary` is the same road for elementwise binary ops, written out for speed (W1):
  dtype promotion, broadcasting and Python scalars kept as scalars.
- :func:`create` runs ops without tensor inputs (``full``, ``arange``, ``from_numpy``,
  ``random_bits``); :func:`to_host` reads values back; :func:`transfer` moves across devices.

The lazy layer attaches here too: a device whose backend fuses has ``Device._defer`` set to
an :class:`ember.lazy.Lazy` hook, and :func:`apply`, :func:`binary` and :func:`create` hand
the op to it instead of the backend's kernel; autodiff and autocast stay here, above it. A
handle may then be a :class:`~ember.lazy.LazyBuffer`; the roads that hand handles to a
backend outside the hook (:func:`to_host`, :func:`transfer`, :func:`to_dlpack`) realize it.

The Tensor class lives above this layer (``ember.tensor``) and registers itself with
:func:`set_tensor_class`; :func:`make_tensor` and :func:`is_tensor` are how the layers below
it build and recognise tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod as _prod
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from . import amp
from .amp import _STATE as _AMP
from .autodiff.mode import _STATE as _GRAD
from .autodiff.node import OUTPUT_UNREAD, Node, for_backward
from .backend import PRIMITIVE_SIGNATURES
from .device import check_dtype, common_device
from .dtypes import DType, as_dtype, bool_, category_error, iinfo, promote_types, scalar_dtype
from .errors import DTypeError, InvalidArgumentError, NotImplementedOpError, ShapeError
from .lazy import Lazy, LazyBuffer, materialize
from .shapes import broadcast_shapes

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above; Device is not needed at run time
    from .device import Device
    from .tensor import Tensor

__all__ = [
    "Op",
    "operand_message",
    "OPS",
    "NativeParameters",
    "parse_signature",
    "KINDS",
    "define",
    "lookup",
    "apply",
    "binary",
    "create",
    "to_host",
    "transfer",
    "to_dlpack",
    "from_dlpack",
    "make_tensor",
    "is_tensor",
    "set_tensor_class",
    "set_converter",
    "scalar_value",
    "effective_dtype",
    "swaps",
    "realize",
    "for_backward",
    "OUTPUT_UNREAD",
]

#: the kinds an op can have; fusion reads them (elementwise chains, a trailing reduction)
KINDS = frozenset(
    (
        "elementwise_unary",
        "elementwise_binary",
        "elementwise_ternary",
        "reduction",
        "scan",
        "movement",
        "indexing",
        "contraction",
        "creation",
        "random",
        "transfer",
        "other",
    )
)


class Op:
    """An operation: name, kind, native signature, composite, vjp rule, autocast policy.

    Elementwise ops also carry their dtype rule: ``accepts`` (the dtypes allowed) and
    ``bool_out`` (the result is boolean).
    """

    __slots__ = (
        "name",
        "kind",
        "signature",
        "primitive",
        "composite",
        "vjp",
        "differentiable",
        "autocast",
        "accepts",
        "bool_out",
        "extension",
        "elementwise",
    )

    def __init__(
        self,
        name: str,
        kind: str,
        signature: str,
        *,
        primitive: bool,
        composite: Callable[..., Tensor] | None,
        vjp: Callable[..., tuple[Any, ...]] | None,
        differentiable: bool,
        autocast: str | None,
        accepts: frozenset[DType] | None,
        bool_out: bool,
        extension: bool = False,
    ) -> None:
        self.name = name
        self.kind = kind
        self.signature = signature
        self.primitive = primitive
        self.composite = composite
        self.vjp = vjp
        self.differentiable = differentiable
        self.autocast = autocast
        self.accepts = accepts
        self.bool_out = bool_out
        self.extension = extension
        self.elementwise = kind.startswith("elementwise")  # the lazy layer may defer it (dispatch's fast path)

    def __repr__(self) -> str:
        role = "primitive" if self.primitive else "composite"
        return f"<Op {self.name} ({self.kind}, {role})>"

    def native_parameters(self) -> NativeParameters:
        """The parameters of :attr:`signature`, parsed (what a native implementation receives)."""
        return parse_signature(self.signature)


class NativeParameters(NamedTuple):
    """A native signature's parameters: ``name(a, b[, c], *rest, k1, k2)``."""

    positional: tuple[str, ...]  # handles, in order
    optional: tuple[str, ...]  # trailing handles that may be absent (``[, mask]``)
    variadic: str | None  # ``*arrays``: any number of handles
    keywords: tuple[str, ...]  # keyword-only parameters


def parse_signature(signature: str) -> NativeParameters:
    """Parse ``"softmax(a, *, axis) -> handle  # note"`` into its parameters."""
    head, _, _ = signature.partition("#")
    start, end = head.find("("), head.find(")")
    if start < 0 or end < start:
        return NativeParameters((), (), None, ())
    inner = head[start + 1 : end]
    optional: list[str] = []
    while "[" in inner:
        lo, hi = inner.index("["), inner.index("]")
        optional += [p.strip() for p in inner[lo + 1 : hi].split(",") if p.strip()]
        inner = inner[:lo] + inner[hi + 1 :]
    positional: list[str] = []
    keywords: list[str] = []
    variadic = None
    after_star = False
    for part in (p.strip() for p in inner.split(",")):
        if not part:
            continue
        if part == "*":
            after_star = True
        elif part.startswith("**"):
            after_star = True
        elif part.startswith("*"):
            variadic, after_star = part[1:], True
        elif after_star:
            keywords.append(part)
        else:
            positional.append(part)
    return NativeParameters(tuple(positional), tuple(optional), variadic, tuple(keywords))


OPS: dict[str, Op] = {}


def define(
    name: str,
    *,
    kind: str,
    native: str | None = None,
    primitive: bool = False,
    composite: Callable[..., Tensor] | None = None,
    vjp: Callable[..., tuple[Any, ...]] | None = None,
    differentiable: bool = True,
    autocast: str | None = None,
    accepts: frozenset[DType] | None = None,
    bool_out: bool = False,
    extension: bool = False,
) -> Op:
    """Register an op.

    ``native`` is the exact signature a backend implements to compute the op natively, e.g.
    ``"softmax(a, *, axis) -> handle"``; a primitive's comes from
    :data:`ember.backend.PRIMITIVE_SIGNATURES`. A non-primitive op needs a composite so that
    every backend can run it. ``extension`` marks ops added by ``@backend_extension``.
    """
    if name in OPS:
        raise InvalidArgumentError(f"op {name!r} is defined twice")
    if kind not in KINDS:
        raise InvalidArgumentError(f"op {name!r}: kind must be one of {sorted(KINDS)}, got {kind!r}")
    if autocast is not None and autocast not in amp.POLICIES:
        raise InvalidArgumentError(f"op {name!r}: autocast must be one of {sorted(amp.POLICIES)} or None")
    if primitive:
        signature = PRIMITIVE_SIGNATURES.get(name)
        if signature is None:
            raise InvalidArgumentError(f"op {name!r} is marked primitive but ember.backend lists no signature for it")
    else:
        if composite is None:
            raise InvalidArgumentError(f"op {name!r}: a non-primitive op needs a composite definition")
        if native is None:
            raise InvalidArgumentError(f"op {name!r}: give the native signature a backend would implement (native=)")
        signature = native
    op = Op(
        name,
        kind,
        signature,
        primitive=primitive,
        composite=composite,
        vjp=vjp,
        differentiable=differentiable,
        autocast=autocast,
        accepts=accepts,
        bool_out=bool_out,
        extension=extension,
    )
    OPS[name] = op
    return op


def lookup(name: str) -> Op:
    """The op named ``name`` (a clear error if no such op is registered)."""
    try:
        return OPS[name]
    except KeyError:
        raise NotImplementedOpError(f"no op named {name!r} is registered with ember") from None


# -- the bridge to the Tensor class above ----------------------------------------------------
_new = object.__new__
_TENSOR: type = type(None)  # replaced by ember.tensor on import
_CONVERT: Callable[[Any, Any], Any] | None = None


def set_tensor_class(cls: type) -> None:
    """Called once by :mod:`ember.tensor`: the class :func:`make_tensor` builds."""
    global _TENSOR
    _TENSOR = cls


def set_converter(fn: Callable[[Any, Any], Any]) -> None:
    """Called once by :mod:`ember.creation`: ``fn(obj, like)`` turns data into a tensor."""
    global _CONVERT
    _CONVERT = fn


def make_tensor(data: Any, shape: tuple[int, ...], dtype: DType, device: Device) -> Tensor:
    """Wrap a backend handle whose shape and dtype the core has already worked out."""
    t = _new(_TENSOR)
    t._data = data
    t._shape = shape
    t._dtype = dtype
    t._device = device
    t._node = None
    t._rg = False
    t._grad = None
    return t


def is_tensor(x: Any) -> bool:
    """Whether ``x`` is an ember Tensor."""
    return type(x) is _TENSOR


def _missing(dev: Device, name: str) -> NotImplementedOpError:
    backend = dev.backend
    hint = "a complete backend implements every name in ember.backend.REQUIRED_PRIMITIVES"
    if callable(getattr(backend, name, None)):
        hint = (
            f"{type(backend).__name__} has a method {name!r} but does not declare it: mark it "
            f"@native (from ember.backend import native) or list it in native_kernels()"
        )
    return NotImplementedOpError(
        f"{backend.name} backend ({dev.kind}:{dev.index}) does not implement the required primitive {name!r}; {hint}"
    )


# -- autocast --------------------------------------------------------------------------------
def _autocast(op: Op, inputs: tuple[Tensor, ...], dtype: DType | None) -> tuple[tuple[Tensor, ...], DType | None]:
    """``inputs`` cast by ``op``'s policy, and the result dtype that follows."""
    low = _AMP.dtype
    targets = amp.cast_targets(op.autocast, [t._dtype for t in inputs], low)
    if not any(targets):
        return inputs, dtype
    cast = OPS["cast"]
    out = []
    for t, target in zip(inputs, targets):
        if target is not None:
            if target is low:
                amp.check_supported(t._device, target, op.name)
            t = apply(cast, (t,), {"dtype": target}, t._shape, target)
        out.append(t)
    if dtype is not None and dtype.kind == "f":
        changed = {t._dtype for t, target in zip(out, targets) if target is not None}
        if len(changed) == 1:
            dtype = changed.pop()
    return tuple(out), dtype


def effective_dtype(op: Op | None, dtype: DType) -> DType:
    """The dtype an input of ``dtype`` will have when ``op`` runs, after its autocast policy.

    For an op's own argument checks (a conv's weight must match its input *after* autocast).
    """
    if _AMP.dtype is None or op is None or op.autocast is None:
        return dtype
    return amp.cast_targets(op.autocast, [dtype], _AMP.dtype)[0] or dtype


# -- the road ----------------------------------------------------------------------------------
def apply(op: Op, inputs: tuple[Tensor, ...], params: dict[str, Any], shape: Any, dtype: Any) -> Tensor:
    """Run ``op`` on tensor ``inputs``; ``shape``/``dtype`` describe the result.

    ``shape=None`` means the result's metadata comes from the kernel (extension ops).
    """
    first = inputs[0]
    dev = first._device
    wants = first._rg
    if len(inputs) > 1:
        for t in inputs:
            if t._device is not dev:
                dev = common_device(op.name, [x._device for x in inputs])
                break
        if not wants:
            for t in inputs:
                if t._rg:
                    wants = True
                    break
    if op.autocast is not None and _AMP.dtype is not None:  # the op's policy first: _AMP is thread-local (slower)
        inputs, dtype = _autocast(op, inputs, dtype)
        first = inputs[0]
    record = wants and op.differentiable and _GRAD.enabled and (dtype is None or dtype.kind in "fc")
    impl = dev._impls[op.name]
    if impl is None or (record and op.vjp is None):
        return _composite(op, inputs, params, record, dev)
    else:
        n = len(inputs)
        datas = (
            [first._data]
            if n == 1
            else [first._data, inputs[1]._data]
            if n == 2
            else [first._data, inputs[1]._data, inputs[2]._data]
            if n == 3
            else [t._data for t in inputs]
        )
        defer = dev._defer
        if defer is None:
            handle = impl(*datas, **params)
        elif not op.elementwise and type(defer) is Lazy:
            # the lazy layer defers no such op but a reduction of a deferred region: it would compute the
            # deferred operands and run the kernel at once, which is done here (a frame less per op)
            for d in datas:
                if type(d) is LazyBuffer:
                    if op.name in defer.reductions:
                        handle = defer(op, datas, params, shape, dtype)
                        break
                    for i in range(n):  # Lazy.__call__'s own road for such an op, inline
                        d = datas[i]
                        if type(d) is LazyBuffer:
                            if d.real is None:
                                d.owner.realize(d)
                            datas[i] = d.real
                    handle = impl(*datas, **params)
                    break
            else:
                handle = impl(*datas, **params)
        elif dev._least and _runs_now(op, datas, shape, dtype, dev._least):
            handle = impl(*datas, **params)
        else:
            handle = defer(op, datas, params, shape, dtype)
        if handle is NotImplemented:  # the kernel declined these operands: the composite computes them
            return _composite(op, inputs, params, record, dev)
        if shape is None:  # an extension kernel: its result says what it is
            shape, name = dev.backend.handle_meta(handle)
            dtype = as_dtype(name)
            record = record and dtype.kind in "fc"
            shape = tuple(shape)
        out = _new(_TENSOR)  # make_tensor, inline: every op with a kernel comes this way
        out._data = handle
        out._shape = shape
        out._dtype = dtype
        out._device = dev
        out._node = None
        out._rg = False
        out._grad = None
    if record:
        out._node = Node(op, inputs, params)
        out._rg = True
    return out


def _composite(op: Op, inputs: tuple[Tensor, ...], params: dict[str, Any], record: bool, dev: Device) -> Tensor:
    """``op`` by its composite: where the device has no kernel for it, the kernel declined the
    operands (returned ``NotImplemented``), or the op has no vjp rule of its own while recording
    (the composite's ops are then recorded instead). With a vjp rule, the composite runs unrecorded
    and the result gets the op's node, as a kernel's would."""
    composite = op.composite
    if composite is None:
        raise _missing(dev, op.name)
    if not (record and op.vjp is not None):
        return composite(*inputs, **params)
    _GRAD.enabled = False
    try:
        out = composite(*inputs, **params)
    finally:
        _GRAD.enabled = True
    out = make_tensor(out._data, out._shape, out._dtype, dev)
    out._node = Node(op, inputs, params)
    out._rg = True
    return out


def _runs_now(op: Op, datas: list[Any], shape: Any, dtype: Any, least: int) -> bool:
    """Whether the lazy layer (a hook with ``least``) would run this op at once by its kernel, so
    dispatch calls the kernel itself: no operand is deferred, and the op is no elementwise op it
    could defer (not elementwise, complex, of unknown shape, or under ``least`` elements)."""
    for d in datas:
        if type(d) is LazyBuffer:
            return False
    return not op.elementwise or shape is None or dtype is None or dtype.kind == "c" or _prod(shape) < least


def scalar_value(value: Any, dtype: DType, op: str) -> Any:
    """Check a Python scalar fits ``dtype`` and convert it to the Python type backends expect."""
    kind = dtype.kind
    if kind == "c":
        return complex(value)
    if kind == "f":
        return float(value)
    if kind == "b":
        return bool(value)
    v = int(value)
    bounds = _INT_BOUNDS.get(dtype)
    if bounds is None:
        info = iinfo(dtype)
        bounds = _INT_BOUNDS[dtype] = (info.min, info.max)
    lo, hi = bounds
    if not lo <= v <= hi:
        raise DTypeError(
            f"{op}: the Python int {v} does not fit in {dtype} (range {lo}..{hi}); "
            f"cast the tensor to a wider dtype first"
        )
    return v


#: integer dtype -> (min, max): scalar_value's range check without an iinfo per scalar (a handful of dtypes)
_INT_BOUNDS: dict[DType, tuple[int, int]] = {}


#: op name -> the op that computes it with operands swapped (``2 + x`` is ``x + 2``)
_SWAPPED: dict[str, str] = {}


def binary(op: Op, a: Any, b: Any) -> Tensor:
    """The elementwise binary road: promote, broadcast, dispatch, record; ``b`` may stay a
    Python scalar, which backends take as is."""
    T = _TENSOR
    if type(a) is T:
        if type(b) is T:
            dt = a._dtype
            if b._dtype is not dt:
                dt = promote_types(dt, b._dtype, op.name)
                check_dtype(a._device, dt, op.name)  # the promoted dtype may be one the device lacks
                cast = OPS["cast"]
                if a._dtype is not dt:
                    a = apply(cast, (a,), {"dtype": dt}, a._shape, dt)
                if b._dtype is not dt:
                    b = apply(cast, (b,), {"dtype": dt}, b._shape, dt)
            sa = a._shape
            shape = sa if sa == b._shape else broadcast_shapes(sa, b._shape, op=op.name)
            dev = a._device
            if b._device is not dev:
                dev = common_device(op.name, [dev, b._device])
            bdata = b._data
            inputs: tuple[Tensor, ...] = (a, b)
            params: dict[str, Any] = {}
            wants = a._rg or b._rg
        elif isinstance(b, (int, float, complex)):
            tb = type(b)
            if (tb is float or tb is int) and a._dtype.kind == "f":  # the common case (x * 0.5), inline
                dt = a._dtype
                bdata = float(b)
            else:
                dt = scalar_dtype(a._dtype, b, op.name)
                if dt is not a._dtype:  # a Python complex with a real tensor: the tensor becomes complex
                    check_dtype(a._device, dt, op.name)
                    a = apply(OPS["cast"], (a,), {"dtype": dt}, a._shape, dt)
                bdata = scalar_value(b, dt, op.name)
            shape = a._shape
            dev = a._device
            inputs = (a,)
            params = {"b": bdata}
            wants = a._rg
        else:
            return binary(op, a, _convert(b, a, op.name))
    elif type(b) is T:
        if isinstance(a, (int, float, complex)):
            swapped = _SWAPPED.get(op.name)
            if swapped is not None:
                return binary(OPS[swapped], b, a)
            dt = scalar_dtype(b._dtype, a, op.name)
            value = scalar_value(a, dt, op.name)
            a = create(OPS["full"], b._device, (), {"shape": (), "value": value, "dtype": dt}, (), dt)
        else:
            a = _convert(a, b, op.name)
        return binary(op, a, b)
    else:
        return binary(op, _convert(a, None, op.name), b)
    if dt not in op.accepts:
        raise category_error(op.name, op.accepts, dt)
    out_dt = bool_ if op.bool_out else dt
    impl = dev._impls[op.name]
    record = wants and op.differentiable and _GRAD.enabled and not op.bool_out
    if impl is None or (record and op.vjp is None):
        if params:  # the composite and the vjp rule see two tensors
            b = create(OPS["full"], dev, (), {"shape": (), "value": bdata, "dtype": dt}, (), dt)
            inputs = (a, b)
            params = {}
        return apply(op, inputs, params, shape, out_dt)
    defer = dev._defer
    adata = a._data
    if defer is None:
        handle = impl(adata, bdata)
    elif (  # a small op on computed operands: the lazy layer would run it at once (Lazy.least)
        dev._least
        and type(adata) is not LazyBuffer
        and type(bdata) is not LazyBuffer
        and out_dt.kind != "c"
        and _prod(shape) < dev._least
    ):
        handle = impl(adata, bdata)
    else:
        handle = defer(op, [adata, bdata], {}, shape, out_dt)
    out = _new(T)  # make_tensor, inline: W1's adds are this road and little else
    out._data = handle
    out._shape = shape
    out._dtype = out_dt
    out._device = dev
    out._node = None
    out._rg = False
    out._grad = None
    if record:
        out._node = Node(op, inputs, params)
        out._rg = True
    return out


def swaps(name: str, swapped: str) -> None:
    """Declare that ``scalar <name> x`` equals ``x <swapped> scalar`` (``2 + x`` is ``x + 2``)."""
    _SWAPPED[name] = swapped


def _convert(x: Any, like: Tensor | None, op: str | None = None) -> Tensor:
    if _CONVERT is None:  # pragma: no cover - ember.creation registers it on import
        raise InvalidArgumentError(f"cannot convert {type(x).__name__} to a tensor before ember.creation is imported")
    try:
        return _CONVERT(x, like)
    except (DTypeError, ShapeError, InvalidArgumentError) as exc:
        if op is None:
            raise
        raise type(exc)(operand_message(op, x, exc)) from None


def operand_message(op: str, x: Any, exc: BaseException) -> str:
    """The error for an operand of ``op`` that does not convert to a tensor."""
    shown = repr(x) if len(repr(x)) <= 40 else repr(x)[:37] + "..."
    return (
        f"{op}: an operand {shown} ({type(x).__name__}) is not a tensor, a number or numeric data; "
        f"pass a Tensor or a Python number ({exc})"
    )


def create(
    op: Op, device: Device, args: tuple[Any, ...], params: dict[str, Any], shape: tuple[int, ...], dtype: DType
) -> Tensor:
    """Run a creation or random primitive (no tensor inputs) on ``device``: ``args`` are
    positional host values (``from_numpy``'s array), ``shape``/``dtype`` describe the result."""
    impl = device._impls[op.name]
    if impl is None:
        raise _missing(device, op.name)
    defer = device._defer
    if defer is not None:
        handle = defer(op, list(args), params, shape, dtype)
    else:
        handle = impl(*args, **params)
    t = _new(_TENSOR)  # make_tensor, inline: every constant of a step (a where's scalar, a seed) comes this way
    t._data = handle
    t._shape = shape
    t._dtype = dtype
    t._device = device
    t._node = None
    t._rg = False
    t._grad = None
    return t


def to_host(x: Tensor) -> np.ndarray:
    """``x``'s values as a numpy array (the ``to_numpy`` primitive; may be a read-only view)."""
    dev = x._device
    impl = dev._impls["to_numpy"]
    if impl is None:
        raise _missing(dev, "to_numpy")
    return impl(materialize(x._data))


def realize(x: Tensor) -> Tensor:
    """Compute ``x`` now if its value was deferred (the lazy layer); returns ``x``."""
    materialize(x._data)
    return x


def to_dlpack(x: Tensor, dl_device: Any = None) -> Any:
    """An object with ``__dlpack__`` sharing (or copying) ``x``'s memory, from its backend; a
    host copy when the consumer asks for the CPU (``dl_device=(1, 0)``) and the memory is elsewhere."""
    obj = x._device.backend.dlpack(materialize(x._data))
    if dl_device is not None and int(dl_device[0]) == 1 and int(obj.__dlpack_device__()[0]) != 1:
        return np.array(to_host(x), copy=True)
    return obj


def from_dlpack(device: Device, obj: Any) -> Tensor:
    """A tensor on ``device`` from a DLPack-capable object (its shape and dtype when it has them)."""
    handle = device.backend.from_dlpack(obj)
    try:
        shape, dtype = device.backend.handle_meta(handle)
    except NotImplementedOpError:  # the backend cannot say: read the handle back
        arr = device._impls["to_numpy"](handle)
        shape, dtype = arr.shape, arr.dtype
    return make_tensor(handle, tuple(int(s) for s in shape), as_dtype(dtype, "dtype"), device)


def transfer(op: Op, x: Tensor, device: Device) -> Tensor:
    """``x`` copied to another physical device, directly when the target backend can receive
    from the source (GPU to GPU), else through the host; ``op`` records the move."""
    direct = device.backend.receive(x._device.backend, materialize(x._data))
    if direct is not None:
        out = make_tensor(direct, x._shape, x._dtype, device)
    else:
        host = np.array(to_host(x), copy=True, order="C")
        out = create(OPS["from_numpy"], device, (host,), {}, x._shape, x._dtype)
    if x._rg and _GRAD.enabled:
        out._node = Node(op, (x,), {"source": x._device})
        out._rg = True
    return out
