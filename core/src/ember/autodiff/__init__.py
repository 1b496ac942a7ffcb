"""Reverse-mode autodiff, in the layers it spans.

- :mod:`~ember.autodiff.mode`: grad mode (``no_grad``...), a leaf every layer may read;
- :mod:`~ember.autodiff.node`: the graph node type, which only :mod:`ember.dispatch` builds;
- :mod:`~ember.autodiff.graph`: the backward walk, above dispatch;
- :mod:`~ember.autodiff.api`: ``backward``, ``grad``, ``value_and_grad``, beside the Tensor.

This package imports none of them, so importing the leaf costs nothing above it; the public
names are re-exported by :mod:`ember`.
"""
