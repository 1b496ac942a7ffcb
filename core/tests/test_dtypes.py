"""dtypes: the Array API promotion table, weak scalars, and the errors for undefined mixes."""

from __future__ import annotations

import itertools

import pytest

import ember as em
from ember.dtypes import promote_types

# The Array API standard's promotion lattice, written out from the specification's tables.
SIGNED = {"i1": em.int8, "i2": em.int16, "i4": em.int32, "i8": em.int64}
U = {"u1": em.uint8, "u2": em.uint16, "u4": em.uint32, "u8": em.uint64}
F = {"f2": em.float16, "f4": em.float32, "f8": em.float64}
SPEC_MIXED = {  # (unsigned, signed) -> result
    ("u1", "i1"): "i2", ("u1", "i2"): "i2", ("u1", "i4"): "i4", ("u1", "i8"): "i8",
    ("u2", "i1"): "i4", ("u2", "i2"): "i4", ("u2", "i4"): "i4", ("u2", "i8"): "i8",
    ("u4", "i1"): "i8", ("u4", "i2"): "i8", ("u4", "i4"): "i8", ("u4", "i8"): "i8",
}  # fmt: skip
ALL = {**SIGNED, **U, **F}


def _bits(code: str) -> int:
    return int(code[1]) * 8


@pytest.mark.parametrize("a,b", list(itertools.product(list(SIGNED) + list(U) + list(F), repeat=2)))
def test_promotion_matches_the_standard(a, b):
    da, db = ALL[a], ALL[b]
    if a[0] == b[0]:
        expected = ALL[a if _bits(a) >= _bits(b) else b]
    elif {a[0], b[0]} == {"u", "i"}:
        key = (a, b) if a[0] == "u" else (b, a)
        if key[0] == "u8":
            with pytest.raises(em.DTypeError, match="uint64"):
                promote_types(da, db)
            return
        expected = ALL[SPEC_MIXED[key]]
    else:
        with pytest.raises(em.DTypeError, match="Cast one explicitly"):
            promote_types(da, db)
        return
    assert promote_types(da, db) is expected
    x = em.ones(2, dtype=da) + em.ones(2, dtype=db)
    assert x.dtype is expected


def test_bool_only_with_bool():
    assert (em.ones(2, dtype=em.bool_) & em.ones(2, dtype=em.bool_)).dtype is em.bool_
    with pytest.raises(em.DTypeError, match="booleans"):
        em.ones(2, dtype=em.bool_) + em.ones(2, dtype=em.int32)


def test_bfloat16_promotes_like_pytorch():
    assert promote_types(em.bfloat16, em.float16) is em.float32
    assert promote_types(em.bfloat16, em.float32) is em.float32


def test_python_scalars_are_weak():
    assert (em.ones(2, dtype=em.float16) * 3.5).dtype is em.float16
    assert (em.ones(2, dtype=em.int8) + 3).dtype is em.int8
    assert (em.ones(2, dtype=em.float32) + 1).dtype is em.float32
    with pytest.raises(em.DTypeError, match="fit in int8"):
        em.ones(2, dtype=em.int8) + 300
    with pytest.raises(em.DTypeError, match="Python float"):
        em.ones(2, dtype=em.int32) * 0.5


def test_op_dtype_categories_are_enforced():
    with pytest.raises(em.DTypeError, match="floating-point"):
        em.exp(em.arange(3))
    with pytest.raises(em.DTypeError, match="floating-point"):
        em.arange(3) / em.arange(3)
    assert (em.arange(7) // 2).tolist() == [0, 0, 1, 1, 2, 2, 3]


def test_as_dtype_accepts_names_and_numpy():
    import numpy as np

    assert em.dtypes.as_dtype("float32") is em.float32
    assert em.dtypes.as_dtype(np.int16) is em.int16
    assert em.dtypes.as_dtype(bool) is em.bool_
    with pytest.raises(em.DTypeError, match="not an ember dtype"):
        em.dtypes.as_dtype("complex256")


def test_finfo_iinfo():
    assert em.finfo(em.float32).eps == pytest.approx(2**-23)
    assert em.iinfo(em.int8).min == -128
