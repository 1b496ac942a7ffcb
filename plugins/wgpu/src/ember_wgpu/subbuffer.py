"""A block carved out of a driver buffer: what the pool hands out for a small block under
``adaptive`` (a page's range) or a step plan's block (a range of its arena).

WebGPU has no buffer views: a binding, a copy and ``queue.write_buffer`` each take the driver
buffer and a byte offset. So a carved block's raw is a :class:`SubBuffer` (the driver buffer,
the offset, the size) and the few places that hand a raw buffer to wgpu place it with
:func:`binding` (bind-group entries) or the offset (copies and uploads). Kernels see element 0
of their binding at the offset: they need no change.
"""

from __future__ import annotations

import itertools
from typing import Any

__all__ = ["SubBuffer", "binding"]

#: negative uids: never one of wgpu-py's (a driver buffer's ``uid`` counts up from 1)
_uids = itertools.count(-1, -1)


class SubBuffer:
    """``size`` bytes at ``offset`` of the driver buffer ``buffer``; ``uid`` names it in bind-group
    keys and the open batch's references as a driver buffer's ``uid`` does."""

    __slots__ = ("buffer", "offset", "size", "uid")

    def __init__(self, buffer: Any, offset: int, size: int) -> None:
        self.buffer = buffer
        self.offset = offset
        self.size = size
        self.uid = next(_uids)

    def __repr__(self) -> str:
        return f"SubBuffer({self.size} bytes at {self.offset} of buffer {self.buffer.uid})"


def binding(raw: Any) -> dict[str, Any]:
    """The bind-group resource of a pooled raw buffer: a driver buffer whole, or a carved range."""
    if type(raw) is SubBuffer:
        return {"buffer": raw.buffer, "offset": raw.offset, "size": raw.size}
    return {"buffer": raw, "offset": 0, "size": raw.size}
