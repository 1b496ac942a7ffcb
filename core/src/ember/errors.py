"""Ember's one error hierarchy.

Every error ember raises derives from :class:`EmberError` and from the built-in it
resembles, so ``except ValueError`` keeps working for callers who do not know ember.
Messages name the op, the argument, the dtype or device, and what to do.
"""

from __future__ import annotations

__all__ = [
    "EmberError",
    "DeviceMismatchError",
    "DeviceUnavailableError",
    "DTypeError",
    "ShapeError",
    "PluginError",
    "NotImplementedOpError",
    "AutodiffError",
    "CheckpointError",
    "InvalidArgumentError",
    "EmberIndexError",
    "AxisError",
    "ArgumentTypeError",
    "EmberKeyError",
    "EmberAttributeError",
    "MissingMethodError",
    "DataError",
    "LoaderTimeoutError",
    "DataFileNotFoundError",
    "MissingDependencyError",
    "OnnxModelError",
    "UnsupportedOnnxOpError",
    "OutOfMemoryError",
]


class EmberError(Exception):
    """Base class of every error raised by ember."""


class DeviceMismatchError(EmberError, ValueError):
    """Tensors on different devices met in one op."""


class DeviceUnavailableError(EmberError, RuntimeError):
    """A device was requested that no installed, working plugin provides."""


class DTypeError(EmberError, TypeError):
    """A dtype is not accepted by an op, or two dtypes have no defined promotion."""


class ShapeError(EmberError, ValueError):
    """Shapes do not fit the op (broadcasting, matmul, reshape, axes)."""


class PluginError(EmberError, RuntimeError):
    """A plugin failed to import or registered something malformed."""


class NotImplementedOpError(EmberError, NotImplementedError):
    """A backend lacks an op that has no composite definition."""


class AutodiffError(EmberError, RuntimeError):
    """A gradient was asked for where none can be computed."""


class CheckpointError(EmberError, ValueError):
    """A checkpoint or model file is malformed, truncated or of an unknown version."""


class InvalidArgumentError(EmberError, ValueError):
    """An argument has a value the function does not accept (the message says which)."""


class EmberIndexError(EmberError, IndexError):
    """An index is out of range or malformed."""


class AxisError(ShapeError, IndexError):
    """An axis is out of range: a ShapeError (ValueError) and, as the Array API asks and as
    numpy's ``AxisError`` is, an IndexError."""


class ArgumentTypeError(EmberError, TypeError):
    """An argument has the wrong Python type (a list where a Tensor is needed, a float axis)."""


class EmberKeyError(EmberError, KeyError):
    """A name (parameter, buffer, config, column, state-dict key) is not known or not allowed."""

    def __str__(self) -> str:
        # KeyError quotes its argument; an ember message is a sentence, shown as written
        return str(self.args[0]) if self.args else ""


class EmberAttributeError(EmberError, AttributeError):
    """An attribute ember looks up on its own objects does not exist."""


class MissingMethodError(EmberError, NotImplementedError):
    """A subclass did not implement a method its base class requires (``forward``, ``__len__``...)."""


class DataError(EmberError, ValueError):
    """A data file or dataset item is malformed; the message names the file, row and column."""


class LoaderTimeoutError(EmberError, TimeoutError):
    """A DataLoader batch took longer than its ``timeout``; the message names the dataset index."""


class DataFileNotFoundError(EmberError, FileNotFoundError):
    """A dataset file does not exist."""


class MissingDependencyError(EmberError, ImportError):
    """An optional package a feature needs is not installed; the message says what to install."""


class OnnxModelError(EmberError, ValueError):
    """An ONNX file is malformed, hostile or past ember's limits; the message names the part."""


class UnsupportedOnnxOpError(EmberError, NotImplementedError):
    """ONNX ops ember cannot import or export; the message lists every one, with where it is."""


class OutOfMemoryError(EmberError, MemoryError):
    """A device pool could not allocate, even after releasing its cached buffers and retrying."""
