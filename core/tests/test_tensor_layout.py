"""Guards for how ember.Tensor is assembled from the method groups of ember.tensor_methods."""

from __future__ import annotations

import types

import ember as em
from ember import tensor_methods

#: names Python puts in every class body, which each group has of its own
_CLASS_BOOKKEEPING = {"__module__", "__qualname__", "__doc__", "__slots__", "__annotations__", "__firstlineno__"}


def _groups() -> list[type]:
    return [cls for cls in em.Tensor.__mro__ if cls not in (em.Tensor, object)]


def test_tensor_inherits_every_group_and_nothing_else():
    assert set(_groups()) == {getattr(tensor_methods, name) for name in tensor_methods.__all__}


def test_no_name_is_defined_in_two_places():
    owners: dict[str, list[str]] = {}
    for cls in em.Tensor.__mro__[:-1]:
        for name in vars(cls):
            if name not in _CLASS_BOOKKEEPING:
                owners.setdefault(name, []).append(cls.__name__)
    twice = {name: where for name, where in owners.items() if len(where) > 1}
    assert not twice, f"defined in more than one of Tensor's classes: {twice}"


def test_groups_add_no_instance_dict():
    for cls in _groups():
        assert vars(cls).get("__slots__") == (), f"{cls.__name__} must declare __slots__ = ()"
    assert not hasattr(em.tensor([1.0]), "__dict__")


def test_operators_are_plain_functions_without_attribute_hooks():
    for cls in em.Tensor.__mro__[:-1]:
        assert "__getattr__" not in vars(cls) and "__getattribute__" not in vars(cls), cls.__name__
    for name in ("__add__", "__radd__", "__sub__", "__mul__", "__rmul__", "__truediv__", "__matmul__", "__getitem__"):
        assert isinstance(vars(tensor_methods.Operators)[name], types.FunctionType), name


def test_tensor_is_the_public_class():
    from ember.tensor import Tensor

    assert em.Tensor is Tensor and Tensor.__module__ == "ember.tensor"
