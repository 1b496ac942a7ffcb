"""Library code raises ember.errors types, never bare built-ins or ``assert`` (``python -O`` drops it):
a source scan of the packages whose errors were brought into ember.errors, so none slips back."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import pytest

import ember
from ember import errors

PACKAGES = ("nn", "optim", "data", "train", "memory", "autodiff")
#: built-in exceptions that library code raises only through an ember.errors subclass
BUILTIN = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, Exception) and name not in ("StopIteration", "GeneratorExit")
)


def _raised_name(node: ast.Raise) -> str | None:
    """The class name a ``raise`` statement names (``raise X`` or ``raise X(...)``), if any."""
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return exc.id if isinstance(exc, ast.Name) else None


@pytest.mark.parametrize("package", PACKAGES)
def test_library_code_raises_ember_errors_and_does_not_assert(package):
    root = Path(ember.__file__).parent / package
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            where = f"{path.relative_to(root.parent)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Assert):
                found.append(f"{where}: assert")
            elif isinstance(node, ast.Raise) and node.exc is not None and _raised_name(node) in BUILTIN:
                found.append(f"{where}: raise {_raised_name(node)}")
    assert not found, "raise an ember.errors type instead (it subclasses the built-in):\n" + "\n".join(found)


def test_the_scan_sees_a_bare_builtin_and_an_assert():
    """The checker itself: both kinds of statement are found in a sample."""
    tree = ast.parse("def f(x):\n    assert x\n    raise ValueError(x)\n")
    raises = [n for n in ast.walk(tree) if isinstance(n, ast.Raise)]
    assert [_raised_name(n) for n in raises] == ["ValueError"] and "ValueError" in BUILTIN
    assert any(isinstance(n, ast.Assert) for n in ast.walk(tree))
    assert issubclass(errors.InvalidArgumentError, ValueError) and "InvalidArgumentError" not in BUILTIN
