"""ember-cpu: the numpy CPU backend for ember."""

__version__ = "0.1.0"
