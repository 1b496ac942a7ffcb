"""``einsum`` lowered to permute, reshape, sum and batched matmul, two operands at a time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..dtypes import result_type
from ..errors import ShapeError
from .elementwise import _tensor_arg
from .linalg import diagonal
from .movement import permute_dims, reshape

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ..tensor import Tensor


def _parse(subscripts: str, n: int) -> tuple[list[str], str]:
    spec = subscripts.replace(" ", "")
    if "..." in spec:
        raise ShapeError("einsum: ellipsis (...) is not supported; name the axes")
    if "->" in spec:
        lhs, out = spec.split("->")
    else:
        lhs = spec
        counts: dict[str, int] = {}
        for c in lhs.replace(",", ""):
            counts[c] = counts.get(c, 0) + 1
        out = "".join(sorted(c for c, k in counts.items() if k == 1))
    terms = lhs.split(",")
    if len(terms) != n:
        raise ShapeError(f"einsum: {len(terms)} operand specs in {subscripts!r} but {n} operands given")
    for t in terms + [out]:
        if not all(c.isalpha() for c in t):
            raise ShapeError(f"einsum: subscripts must be letters, got {t!r}")
    return terms, out


def _diag_reduce(x: Tensor, spec: str) -> tuple[Tensor, str]:
    """Take diagonals for letters repeated within one operand (``'ii->i'``)."""
    while len(set(spec)) != len(spec):
        for c in spec:
            i = spec.index(c)
            j = spec.index(c, i + 1) if spec.count(c) > 1 else -1
            if j >= 0:
                break
        order = [k for k in range(x.ndim) if k not in (i, j)] + [i, j]
        x = diagonal(permute_dims(x, order))
        spec = "".join(spec[k] for k in order[:-2]) + c
    return x, spec


def _contract(a: Tensor, sa: str, b: Tensor, sb: str, keep: set[str]) -> tuple[Tensor, str]:
    batch = [c for c in sa if c in sb and c in keep]
    contract = [c for c in sa if c in sb and c not in keep]
    fa = [c for c in sa if c not in sb]
    fb = [c for c in sb if c not in sa]
    # letters only in one operand and not kept are summed right away
    sum_a = [c for c in fa if c not in keep]
    sum_b = [c for c in fb if c not in keep]
    if sum_a:
        a = a.sum(axis=tuple(sa.index(c) for c in sum_a))
        sa = "".join(c for c in sa if c not in sum_a)
        fa = [c for c in fa if c not in sum_a]
    if sum_b:
        b = b.sum(axis=tuple(sb.index(c) for c in sum_b))
        sb = "".join(c for c in sb if c not in sum_b)
        fb = [c for c in fb if c not in sum_b]
    size = {c: a._shape[sa.index(c)] for c in sa}
    for c in sb:
        d = b._shape[sb.index(c)]
        if c in size and size[c] != d:
            raise ShapeError(f"einsum: axis {c!r} has size {size[c]} in one operand and {d} in another")
        size[c] = d

    def prod(cs: list[str]) -> int:
        n = 1
        for c in cs:
            n *= size[c]
        return n

    am = reshape(permute_dims(a, [sa.index(c) for c in batch + fa + contract]), (prod(batch), prod(fa), prod(contract)))
    bm = reshape(permute_dims(b, [sb.index(c) for c in batch + contract + fb]), (prod(batch), prod(contract), prod(fb)))
    out = reshape(am @ bm, tuple(size[c] for c in batch + fa + fb))
    return out, "".join(batch + fa + fb)


def einsum(subscripts: str, *operands: Any) -> Tensor:
    """Einstein summation, e.g. ``einsum('bij,bjk->bik', a, b)``."""
    tensors = [_tensor_arg(o, "einsum") for o in operands]
    if not tensors:
        raise ShapeError("einsum: needs at least one operand")
    terms, out = _parse(subscripts, len(tensors))
    for t, s in zip(tensors, terms):
        if t.ndim != len(s):
            raise ShapeError(f"einsum: operand spec {s!r} has {len(s)} letters but the tensor has {t.ndim} dims")
    pairs = [_diag_reduce(t, s) for t, s in zip(tensors, terms)]
    acc, sacc = pairs[0]
    for k, (t, s) in enumerate(pairs[1:], start=1):
        later = set("".join(sp for _, sp in pairs[k + 1 :]))
        acc, sacc = _contract(acc, sacc, t, s, set(out) | later)
    extra = [c for c in sacc if c not in out]
    if extra:
        acc = acc.sum(axis=tuple(sacc.index(c) for c in extra))
        sacc = "".join(c for c in sacc if c not in extra)
    if sorted(sacc) != sorted(out):
        raise ShapeError(f"einsum: output {out!r} names axes not in the inputs")
    # sums accumulate integers in (u)int64; the result keeps the operands' dtype, as matmul does
    dtype = result_type(*tensors)
    if acc._dtype is not dtype:
        acc = acc.astype(dtype)
    return permute_dims(acc, [sacc.index(c) for c in out]) if sacc != out else acc
