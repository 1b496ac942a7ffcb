"""Every setting ember-cuda reads from the environment, in one place (core's are in ``ember.config``).

| variable                  | meaning                                                            | default |
|---------------------------|--------------------------------------------------------------------|---------|
| EMBER_CUDA_TF32           | 1: float32 products and convolutions may use TF32 tensor cores     | 0       |
| EMBER_CUDA_IN_PLACE       | 0: fused programs never write into a dying operand                 | 1       |
| EMBER_CUDA_FLASH_BACKWARD | 1, 0 (autodiff's composite rule) or chunked (cuBLAS over slices)   | 1       |
| EMBER_CUDA_IMPLICIT_CONV  | 0: convolutions by im2col + cuBLAS                                 | 1       |
| EMBER_CUDA_COLUMNS_BYTES  | most bytes of im2col columns one chunk of a convolution may hold   | 2**30   |

``Device.cuda(i).backend.set_tf32(on)`` also changes TF32 at run time; the convolution settings are read
at import (``conv.OPTIONS``).
"""

from __future__ import annotations

from ember.config import env_choice, env_flag, env_int, read_errors

__all__ = ["check", "tf32", "in_place", "flash_backward", "implicit_conv", "columns_bytes"]


def tf32() -> bool:
    """Whether TF32 starts on (``EMBER_CUDA_TF32=1``; off by default, as torch's matmuls)."""
    return env_flag("EMBER_CUDA_TF32", False)


def in_place() -> bool:
    """Whether fused programs may write into an operand that dies with them (``EMBER_CUDA_IN_PLACE=0``: never)."""
    return env_flag("EMBER_CUDA_IN_PLACE", True)


def flash_backward() -> str:
    """How attention's backward runs (``EMBER_CUDA_FLASH_BACKWARD``): ``1`` the flash kernels, ``0``
    autodiff's composite rule, ``chunked`` cuBLAS over batch slices (each to compare with the kernels)."""
    return env_choice("EMBER_CUDA_FLASH_BACKWARD", ("1", "0", "chunked"), "1")


def implicit_conv() -> bool:
    """Whether convolutions run as implicit GEMMs (``EMBER_CUDA_IMPLICIT_CONV=0``: im2col + cuBLAS)."""
    return env_flag("EMBER_CUDA_IMPLICIT_CONV", True)


def columns_bytes() -> int:
    """Most bytes of im2col columns one chunk may hold (``EMBER_CUDA_COLUMNS_BYTES``)."""
    return env_int("EMBER_CUDA_COLUMNS_BYTES", 2**30, what="bytes", example=str(32 << 20), minimum=1)


def check() -> list[str]:
    """What ``ember settings`` reports: the values set now that these readers refuse."""
    return read_errors(
        [tf32, in_place, flash_backward, implicit_conv, columns_bytes]
    )  # fmt: skip
