"""Quantized weights: int8 and NF4 codes with their scales, and the dequantizing matmul op.

A quantized weight of logical shape ``(out_features, in_features)`` is two tensors:

- ``int8``: ``qweight`` int8 ``(out, in)`` and ``scales`` float32 ``(out,)``, per output
  channel, symmetric: ``W[o, i] = qweight[o, i] * scales[o]`` (``scales = absmax / 127``).
- ``nf4``: ``qweight`` uint8 ``(n_blocks * block_size / 2,)``, two 4-bit codes per byte (the
  first element of a pair in the high nibble, as bitsandbytes packs them) over the row-major
  weight padded with zeros to whole blocks, and ``scales`` float32 ``(n_blocks,)``, one absmax
  per block: ``W.flat[j] = NF4_LEVELS[code(j)] * scales[j // block_size]``.

``dequant_matmul(x, qweight, scales, *, format, shape, block_size)`` is ``x @ W.T`` with ``W``
dequantized. Its composite (:func:`dequantize`, then ``linear``) serves every backend; a
backend declares a native kernel with the op's signature to skip materializing ``W``.
``dequantize`` is an op of its own (the vjp rule uses it too), with a composite in ember ops. The vjp
gives the gradient for ``x`` only: codes and scales are frozen data.
"""

from __future__ import annotations

from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from ..creation import tensor as new_tensor
from ..dispatch import apply, define
from ..dtypes import as_dtype, float32, int8, int64, uint8
from ..errors import ArgumentTypeError, DTypeError, InvalidArgumentError, ShapeError
from .elementwise import _tensor_arg
from .indexing import take
from .linalg import linear, matmul
from .movement import reshape, slice_tensor

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ..tensor import Tensor

__all__ = [
    "FORMATS", "NF4_LEVELS", "nf4_levels", "nf4_nbytes", "dequantize", "dequant_matmul", "DEQUANTIZE", "DEQUANT_MATMUL",
]  # fmt: skip

FORMATS = ("int8", "nf4")

#: bitsandbytes' ``create_normal_map`` default offset: the quantile of the largest level,
#: midway between 1 - 1/(2*15) and 1 - 1/(2*16)
NF4_OFFSET = 0.9677083


def nf4_levels(offset: float = NF4_OFFSET) -> tuple[float, ...]:
    """The 16 NormalFloat-4 levels, from their definition (Dettmers et al., 2023; bitsandbytes
    ``create_normal_map(offset, use_extra_value=True)``): 8 positive quantiles of N(0, 1) at
    ``linspace(offset, 0.5, 9)[:-1]``, 7 negative ones at ``linspace(offset, 0.5, 8)[:-1]``,
    and an exact zero, sorted and divided by the largest."""
    ppf = NormalDist().inv_cdf
    positive = [ppf(offset + (0.5 - offset) * i / 8) for i in range(8)]
    negative = [-ppf(offset + (0.5 - offset) * i / 7) for i in range(7)]
    values = sorted(positive + [0.0] + negative)
    top = max(values)
    return tuple(v / top for v in values)


#: the levels as bitsandbytes stores them (float32, in its kernels and ``get_4bit_type("nf4")``);
#: :func:`nf4_levels` recomputes them from the definition to within 1e-7 (tested), and using
#: bitsandbytes' own float32 values keeps ember's codes and dequantized weights identical to its
NF4_LEVELS: tuple[float, ...] = (
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
)  # fmt: skip


#: byte value -> [level of its high nibble, level of its low nibble]
_PAIRS = [[NF4_LEVELS[b >> 4], NF4_LEVELS[b & 15]] for b in range(256)]


def nf4_nbytes(shape: tuple[int, int], block_size: int) -> tuple[int, int]:
    """``(bytes of packed codes, number of blocks)`` of an NF4 weight of ``shape``."""
    n = shape[0] * shape[1]
    blocks = -(-n // block_size)
    return blocks * block_size // 2, blocks


def _check(x: Tensor, qweight: Tensor, scales: Tensor, format: str, shape: Any, block_size: int, op: str) -> None:
    if format not in FORMATS:
        raise InvalidArgumentError(f"{op}: format must be one of {FORMATS}, got {format!r}")
    if (
        not isinstance(shape, tuple)
        or len(shape) != 2
        or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
    ):
        raise ArgumentTypeError(f"{op}: shape must be (out_features, in_features), two ints >= 0, got {shape!r}")
    if scales._dtype is not float32:
        raise DTypeError(f"{op}: scales must be float32, got {scales._dtype}; quantize with ember.quant")
    if format == "int8":
        if qweight._dtype is not int8 or qweight._shape != shape:
            raise DTypeError(
                f"{op}: an int8 weight of shape {shape} needs int8 codes of that shape, got {qweight._dtype} "
                f"{qweight._shape}"
            )
        if scales._shape != (shape[0],):
            raise ShapeError(f"{op}: int8 scales must have shape ({shape[0]},) (one per row), got {scales._shape}")
    else:
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 2 or block_size % 2:
            raise InvalidArgumentError(f"{op}: block_size must be an even int >= 2, got {block_size!r} (NF4 uses 64)")
        nbytes, blocks = nf4_nbytes(shape, block_size)
        if qweight._dtype is not uint8 or qweight._shape != (nbytes,):
            raise DTypeError(
                f"{op}: an NF4 weight of shape {shape} in blocks of {block_size} needs uint8 codes of shape "
                f"({nbytes},), got {qweight._dtype} {qweight._shape}"
            )
        if scales._shape != (blocks,):
            raise ShapeError(
                f"{op}: NF4 scales must have shape ({blocks},) (one absmax per block), got {scales._shape}"
            )
    if x is not None:
        if x._dtype.kind != "f":
            raise DTypeError(f"{op}: x must be floating-point, got {x._dtype}")
        if x.ndim < 1 or x._shape[-1] != shape[1]:
            raise ShapeError(f"{op}: x must have shape (..., {shape[1]}) (in_features last), got {x._shape}")


def _dequantize_composite(
    qweight: Tensor, scales: Tensor, *, format: str, shape: Any, block_size: int, dtype: Any
) -> Tensor:
    out, inp = shape
    if format == "int8":
        return qweight.astype(dtype) * reshape(scales.astype(dtype), (out, 1))
    # one lookup per byte in a 256 x 2 table of (high nibble, low nibble) levels: no nibble
    # arithmetic, and an index half the size of one per code
    pairs = new_tensor(_PAIRS, dtype=dtype, device=qweight._device.without_autodiff())
    decoded = take(pairs, qweight.astype(int64), axis=0)  # (bytes, 2): first element high nibble
    values = reshape(decoded, (-1, block_size)) * reshape(scales.astype(dtype), (-1, 1))
    flat = reshape(values, (-1,))
    if flat._shape[0] != out * inp:
        flat = slice_tensor(flat, (0,), (out * inp,), (1,))
    return reshape(flat, (out, inp))


DEQUANTIZE = define(
    "dequantize",
    kind="other",
    native="dequantize(qweight, scales, *, format, shape, block_size, dtype) -> handle  # the (out, in) weight",
    composite=_dequantize_composite,
    differentiable=False,
)


def dequantize(
    qweight: Any, scales: Any, *, format: str, shape: tuple[int, int], block_size: int = 64, dtype: Any = float32
) -> Tensor:
    """The weight ``(out, in)`` in ``dtype`` from its codes and scales (a backend's kernel, else
    ember ops: any backend)."""
    qweight = _tensor_arg(qweight, "dequantize")
    scales = _tensor_arg(scales, "dequantize", qweight)
    shape = tuple(shape)
    _check(None, qweight, scales, format, shape, block_size, "dequantize")  # type: ignore[arg-type]
    dt = as_dtype(dtype, "dtype")
    if dt.kind != "f":
        raise DTypeError(f"dequantize: dtype must be floating-point, got {dt}")
    params = {"format": format, "shape": shape, "block_size": int(block_size) if format == "nf4" else 0, "dtype": dt}
    return apply(DEQUANTIZE, (qweight, scales), params, shape, dt)


def _composite(x: Tensor, qweight: Tensor, scales: Tensor, *, format: str, shape: Any, block_size: int) -> Tensor:
    w = dequantize(qweight, scales, format=format, shape=shape, block_size=block_size, dtype=x._dtype)
    return linear(x, w)


def _vjp(
    g: Tensor, out: Tensor, x: Tensor, qweight: Tensor, scales: Tensor, *, format: str, shape: Any, block_size: int
) -> tuple[Any, ...]:
    w = dequantize(qweight, scales, format=format, shape=shape, block_size=block_size, dtype=g._dtype)
    return matmul(g, w), None, None


DEQUANT_MATMUL = define(
    "dequant_matmul",
    kind="contraction",
    native="dequant_matmul(x, qweight, scales, *, format, shape, block_size) -> handle  # x @ dequantize(...).T",
    composite=_composite,
    vjp=_vjp,
)


def dequant_matmul(
    x: Any, qweight: Any, scales: Any, *, format: str, shape: tuple[int, int], block_size: int = 64
) -> Tensor:
    """``x @ W.T`` for the quantized weight ``W`` (``format`` "int8" or "nf4", logical ``shape``
    ``(out_features, in_features)``); the result has ``x``'s dtype and shape ``(..., out)``."""
    x = _tensor_arg(x, "dequant_matmul")
    qweight = _tensor_arg(qweight, "dequant_matmul", x)
    scales = _tensor_arg(scales, "dequant_matmul", x)
    shape = tuple(shape)
    _check(x, qweight, scales, format, shape, block_size, "dequant_matmul")
    params = {"format": format, "shape": shape, "block_size": int(block_size) if format == "nf4" else 0}
    return apply(DEQUANT_MATMUL, (x, qweight, scales), params, x._shape[:-1] + (shape[0],), x._dtype)
