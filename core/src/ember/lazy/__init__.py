"""``ember.lazy``: deferred elementwise work, fused into one kernel per region.

See :mod:`ember.lazy.graph` for when values are realized and :mod:`ember.lazy.program` for
the one fused-program form every backend's kernel generator reads.
"""

from .graph import MAX_REGION, Lazy, LazyBuffer, fusion, fusion_enabled, materialize, realize_all, stats
from .program import Const, FusedProgram, Reduce

__all__ = [
    "Const",
    "FusedProgram",
    "Lazy",
    "LazyBuffer",
    "MAX_REGION",
    "Reduce",
    "fusion",
    "fusion_enabled",
    "materialize",
    "realize_all",
    "stats",
]
