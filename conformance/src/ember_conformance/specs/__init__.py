"""The op-spec tables, one module per family. :data:`ALL_SPECS` is every row;
:data:`INTERNAL_OPS` lists the registered ops no row names, each with the reason.

Adding an op to ember: add a row to the family's table (the coverage test fails until some
row names the op in ``ops``). nn modules are checked by ``test_nn_modules.py``.
"""

from __future__ import annotations

from .base import OpSpec
from .conv import CONV
from .elementwise import BINARY, TERNARY, UNARY
from .indexing import INDEXING
from .linalg import LINALG, SORTING
from .movement import MOVEMENT
from .nn import NN
from .reduction import REDUCTIONS, SCANS
from .searching import SEARCHING

__all__ = ["ALL_SPECS", "INTERNAL_OPS", "OTHER_COVERAGE", "covered_ops", "OpSpec"]

ALL_SPECS: tuple[OpSpec, ...] = (
    UNARY + BINARY + TERNARY + REDUCTIONS + SCANS + MOVEMENT + INDEXING + LINALG + SORTING + NN + CONV + SEARCHING
)

#: registered ops that no spec row names, and why
INTERNAL_OPS: dict[str, str] = {
    "to_device": "the graph node of a cross-device move; test_transfer moves tensors to an in-process second "
    "device and back and checks values and gradients",
    "conformance_axpy": "the suite's own @backend_extension probe (test_extensions)",
    # the creation and transfer primitives: every test builds its inputs and reads results with them
    "from_numpy": "a primitive every test uses to build inputs; test_creation checks it directly",
    "to_numpy": "a primitive every test uses to read results; test_transfer checks round trips",
    "full": "test_creation (full, zeros, ones and the *_like forms against numpy)",
    "arange": "test_creation (arange and linspace against numpy)",
    "random_bits": "test_random: Philox known-answer vectors and bit-identity with the reference",
}

#: registered ops checked by hand-written tests rather than a spec row
OTHER_COVERAGE: dict[str, str] = {
    "cast": "test_astype (every dtype pair) and the gradient row astype_roundtrip",
    "slice": "test_getitem / test_setitem (basic slicing) and the movement rows",
    "dequant_matmul": "test_quant: int8 / NF4 codes against numpy float64, native against composite, gradients",
    "dequantize": "test_quant::test_dequantize_matches_numpy (int8, NF4, NF4 double-quantized)",
}


def covered_ops() -> set[str]:
    """Every dispatch op some row names."""
    return {name for spec in ALL_SPECS for name in spec.ops}
