"""Tensor's ``repr``: the values as numpy prints them, then dtype, device and autodiff state."""

from __future__ import annotations

import numpy as np

__all__ = ["Printing"]


class Printing:
    """``repr(x)``: never raises, even when the values cannot be read."""

    __slots__ = ()

    def __repr__(self) -> str:
        try:
            arr = self.numpy()
            body = np.array2string(
                np.asarray(arr, dtype=np.float32) if self._dtype.name == "bfloat16" else arr,
                separator=", ",
                prefix="tensor(",
                threshold=200,
                edgeitems=3,
            )
        except Exception as exc:  # printing must not raise
            body = f"<unreadable: {exc}>"
        extra = f", dtype={self._dtype}, device={self._device.kind}:{self._device.index}"
        if self._node is not None:
            extra += f", grad_fn={self._node.op.name}"
        elif self._rg:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"
