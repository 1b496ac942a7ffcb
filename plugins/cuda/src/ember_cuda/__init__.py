"""ember-cuda: the CUDA backend of ember, over CuPy (``Device.cuda(i)``)."""

from .streams import current_stream, use_stream

__all__ = ["current_stream", "use_stream"]
