"""Quantizing a float weight on the host: int8 per-channel absmax and blockwise NF4, with
optional double quantization of the NF4 absmax values; and the inverse, in numpy float64.

These run once per weight (numpy, float64 arithmetic on the host); inference reads the
codes through the ``dequant_matmul`` op of :mod:`ember.ops.quant`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InvalidArgumentError, ShapeError
from ..ops.quant import NF4_LEVELS, nf4_nbytes

__all__ = ["QuantizedWeight", "quantize_int8", "quantize_nf4", "dequantize_numpy", "DQ_BLOCK"]

#: the block of absmax values that share one scale under double quantization (as bitsandbytes)
DQ_BLOCK = 256
_LEVELS = np.array(NF4_LEVELS, dtype=np.float32)


@dataclass
class QuantizedWeight:
    """Codes and scales of one ``(out, in)`` weight.

    ``scales`` are float32 (int8: one per row; nf4: one absmax per block). With double
    quantization ``scales`` is None and the absmax values are ``scale_codes`` (int8, one per
    block) times ``scale_scales`` (float32, one per 256 blocks) plus ``scale_offset``.
    """

    format: str
    shape: tuple[int, int]
    qweight: np.ndarray
    scales: np.ndarray | None
    block_size: int = 0
    scale_codes: np.ndarray | None = None
    scale_scales: np.ndarray | None = None
    scale_offset: float = 0.0

    @property
    def nbytes(self) -> int:
        """Bytes of everything stored for the weight."""
        parts = [self.qweight, self.scales, self.scale_codes, self.scale_scales]
        return sum(p.nbytes for p in parts if p is not None) + (4 if self.scale_codes is not None else 0)

    def absmax(self) -> np.ndarray:
        """The float32 scales the matmul uses (double-quantized ones decoded)."""
        if self.scales is not None:
            return self.scales
        return double_dequantize(self.scale_codes, self.scale_scales, self.scale_offset)


def _check_weight(w: np.ndarray, where: str) -> np.ndarray:
    w = np.asarray(w)
    if w.ndim != 2:
        raise ShapeError(f"{where}: expects a 2-D (out_features, in_features) weight, got shape {w.shape}")
    if w.dtype.kind != "f":
        raise InvalidArgumentError(f"{where}: expects a floating-point weight, got {w.dtype}")
    if not np.all(np.isfinite(w)):
        raise InvalidArgumentError(f"{where}: the weight holds NaN or inf; quantize a finite weight")
    return w.astype(np.float64)


def quantize_int8(w: np.ndarray) -> QuantizedWeight:
    """Per-output-channel symmetric absmax: ``scale = max|row| / 127``, ``q = round(w / scale)``."""
    w = _check_weight(w, "quantize_int8")
    scales = (np.abs(w).max(axis=1, initial=0.0) / 127.0).astype(np.float32)
    safe = np.where(scales == 0, 1.0, scales.astype(np.float64))
    q = np.clip(np.rint(w / safe[:, None]), -127, 127).astype(np.int8)
    return QuantizedWeight("int8", tuple(w.shape), q, scales)  # type: ignore[arg-type]


def _nearest_level(normalized: np.ndarray) -> np.ndarray:
    """Index of the nearest NF4 level (midpoints between sorted levels decide)."""
    mids = (_LEVELS[1:].astype(np.float64) + _LEVELS[:-1]) / 2
    return np.searchsorted(mids, normalized, side="left").astype(np.uint8)


def double_quantize(absmax: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """absmax -> (int8 codes, float32 scale per 256 values, float32 offset): the values minus
    their mean, symmetric 8-bit absmax per block of 256."""
    offset = float(np.float32(absmax.astype(np.float64).mean())) if absmax.size else 0.0
    centered = absmax.astype(np.float64) - offset
    groups = -(-centered.size // DQ_BLOCK)
    padded = np.zeros(groups * DQ_BLOCK)
    padded[: centered.size] = centered
    padded = padded.reshape(groups, DQ_BLOCK)
    s2 = (np.abs(padded).max(axis=1, initial=0.0) / 127.0).astype(np.float32)
    safe = np.where(s2 == 0, 1.0, s2.astype(np.float64))
    codes = np.clip(np.rint(padded / safe[:, None]), -127, 127).astype(np.int8).reshape(-1)[: centered.size]
    return codes, s2, offset


def double_dequantize(codes: np.ndarray, s2: np.ndarray, offset: float) -> np.ndarray:
    """The float32 absmax values back from :func:`double_quantize`."""
    group = np.repeat(s2.astype(np.float32), DQ_BLOCK)[: codes.size]
    return (codes.astype(np.float32) * group + np.float32(offset)).astype(np.float32)


def quantize_nf4(w: np.ndarray, block_size: int = 64, double_quant: bool = False) -> QuantizedWeight:
    """Blockwise NF4: the row-major weight in blocks of ``block_size``, each scaled by its absmax
    and rounded to the nearest of the 16 NormalFloat levels; two codes per byte, first in the
    high nibble. ``double_quant`` stores the absmax values in 8 bits (blocks of 256)."""
    w = _check_weight(w, "quantize_nf4")
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 2 or block_size % 2:
        raise InvalidArgumentError(f"quantize_nf4: block_size must be an even int >= 2, got {block_size!r}")
    shape = tuple(w.shape)
    _, blocks = nf4_nbytes(shape, block_size)  # type: ignore[arg-type]
    flat = np.zeros(blocks * block_size)
    flat[: w.size] = w.reshape(-1)
    flat = flat.reshape(blocks, block_size)
    absmax = np.abs(flat).max(axis=1).astype(np.float32)
    scale_codes = scale_scales = None
    offset = 0.0
    used = absmax
    if double_quant:
        scale_codes, scale_scales, offset = double_quantize(absmax)
        used = double_dequantize(scale_codes, scale_scales, offset)  # normalize by what decoding will use
    safe = np.where(used == 0, 1.0, used.astype(np.float64))
    codes = _nearest_level(np.clip(flat / safe[:, None], -1.0, 1.0)).reshape(-1)
    packed = ((codes[0::2] << 4) | codes[1::2]).astype(np.uint8)
    return QuantizedWeight(
        "nf4",
        shape,
        packed,
        None if double_quant else absmax,
        block_size,
        scale_codes,
        scale_scales,
        offset,  # type: ignore[arg-type]
    )


def dequantize_numpy(qw: QuantizedWeight) -> np.ndarray:
    """The weight back in float64 (the reference the tests compare ember's op with)."""
    if qw.format == "int8":
        return qw.qweight.astype(np.float64) * qw.scales.astype(np.float64)[:, None]
    codes = np.empty(qw.qweight.size * 2, dtype=np.uint8)
    codes[0::2] = qw.qweight >> 4
    codes[1::2] = qw.qweight & 15
    values = _LEVELS.astype(np.float64)[codes].reshape(-1, qw.block_size) * qw.absmax().astype(np.float64)[:, None]
    out, inp = qw.shape
    return values.reshape(-1)[: out * inp].reshape(out, inp)
