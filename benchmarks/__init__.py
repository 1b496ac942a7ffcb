"""Ember's benchmark runner: the standard workloads W1-W6 (shared/WORKLOADS.md) for ember on
one device and for its peers (numpy by hand, PyTorch, CuPy) side by side in one process.

Run ``python -m benchmarks --help``; see README.md. Each workload is a module
(``w1_dispatch`` ... ``w6_elementwise``) with the builders ``ember(device, size)``,
``numpy(size)``, ``torch(device, size)`` and ``cupy(size)``, each returning a
:class:`~benchmarks.harness.Case`.
"""

from .harness import Case, Unavailable, compare, time_case
from .runner import WORKLOADS, Settings, run

__all__ = ["WORKLOADS", "Case", "Settings", "Unavailable", "compare", "run", "time_case"]
