"""ember-conformance: the suite every ember backend is held to, as a pytest plugin.

    pytest --pyargs ember_conformance --ember-device=cpu --ember-report=report.md

The tables in :mod:`ember_conformance.specs` drive the tests; :mod:`ember_conformance.checks`
holds the comparison helpers extension and module tests reuse; :mod:`ember_conformance.jit_checks`
the ``em.jit`` checks a backend's own tests run to prove its native replay. Nothing here imports ember:
the plugin loads in every pytest run of an environment that has the package.
"""

from __future__ import annotations

__version__ = "0.1.0"


__all__ = ["__version__"]
