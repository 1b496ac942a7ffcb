"""The method groups :class:`ember.Tensor` is built from, one module each; ``ember.tensor`` holds
the class's state, construction, metadata and autodiff entry points, and inherits these.

Each group is a mixin with empty ``__slots__`` (a tensor stays a slotted object) whose methods
forward to the op functions of :mod:`ember.ops`; none imports ``ember.tensor`` at run time.
"""

from .conversion import ConversionMethods
from .elementwise import ElementwiseMethods
from .indexing import IndexingMethods
from .operators import Operators
from .printing import Printing
from .reductions import ReductionMethods
from .shape import ShapeMethods

__all__ = [
    "ConversionMethods",
    "ElementwiseMethods",
    "IndexingMethods",
    "Operators",
    "Printing",
    "ReductionMethods",
    "ShapeMethods",
]
