"""ember.views: every view op checked against numpy, reading a buffer through the view's strides.

Random chains of permute / expand / slice / flip / reshape (seeded, a few hundred) are applied
to a View and to a numpy array side by side; the View's elements, read with
``np.lib.stride_tricks.as_strided`` from its offset and strides, must equal numpy's.
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest

from ember.views import View, collapse, contiguous_strides

as_strided = np.lib.stride_tricks.as_strided


def read(buf: np.ndarray, v: View) -> np.ndarray:
    """The elements ``v`` shows of the flat ``buf`` (numpy does the address arithmetic)."""
    if v.size == 0:
        return np.empty(v.shape, buf.dtype)
    lo, hi = v.span()
    assert 0 <= lo and hi <= buf.size, f"{v} reaches outside its buffer of {buf.size}"
    return as_strided(buf[v.offset :], shape=v.shape, strides=v.byte_strides(buf.itemsize), writeable=False)


def addresses(v: View) -> np.ndarray:
    """The element index of every element of ``v``, computed the long way."""
    idx = np.indices(v.shape).reshape(len(v.shape), -1) if v.shape else np.zeros((0, 1), int)
    return v.offset + (np.asarray(v.strides, dtype=np.int64)[:, None] * idx).sum(axis=0)


def check(buf: np.ndarray, v: View, ref: np.ndarray) -> None:
    assert v.shape == ref.shape
    np.testing.assert_array_equal(read(buf, v), ref)
    assert v.size == ref.size == v.numel and v.ndim == ref.ndim
    assert v.is_contiguous() == ref.flags["C_CONTIGUOUS"], (v, ref.strides)
    addr = addresses(v)
    assert v.is_broadcast() == (len(np.unique(addr)) < addr.size)
    if v.size:
        assert v.span() == (addr.min(), addr.max() + 1)


def random_step(rng: np.random.Generator, v: View, ref: np.ndarray) -> tuple[View, np.ndarray] | None:
    """One random view op on both; None when it does not apply."""
    kind = rng.choice(["permute", "expand", "slice", "flip", "reshape"])
    nd = ref.ndim
    if kind == "permute" and nd:
        axes = tuple(int(a) for a in rng.permutation(nd))
        return v.permute(axes), np.transpose(ref, axes)
    if kind == "expand":
        lead = tuple(int(d) for d in rng.integers(1, 3, size=rng.integers(0, 2)))
        shape = lead + tuple(int(rng.integers(2, 4)) if d == 1 and rng.random() < 0.7 else d for d in ref.shape)
        if np.prod(shape) > 4096:
            return None
        return v.expand(shape), np.broadcast_to(ref, shape)
    if kind == "slice" and nd:
        starts, stops, steps = [], [], []
        for d in ref.shape:
            a, b = sorted(int(x) for x in rng.integers(0, d + 1, size=2))
            if rng.random() < 0.4:
                a, b = 0, d
            starts.append(a)
            stops.append(b)
            steps.append(int(rng.integers(1, 4)))
        key = tuple(slice(a, b, k) for a, b, k in zip(starts, stops, steps))
        return v.slice(starts, stops, steps), ref[key]
    if kind == "flip" and nd:
        axes = tuple(int(a) for a in np.flatnonzero(rng.random(nd) < 0.5))
        return v.flip(axes), np.flip(ref, axes)
    if kind == "reshape" and ref.size:
        shape = _random_factorisation(rng, ref.size)
        got = v.reshape(shape)
        try:
            want = ref.reshape(shape, copy=False)
        except ValueError:  # numpy would have to copy: so must we
            assert got is None, f"{v} reshaped to {shape} as a view where numpy copies"
            return v, ref
        assert got is not None, f"{v} -> {shape}: numpy reshapes it as a view, ember.views said copy"
        return got, want
    return None


def _random_factorisation(rng: np.random.Generator, n: int) -> tuple[int, ...]:
    dims = []
    while n > 1 and len(dims) < 4:
        divisors = [d for d in range(2, n + 1) if n % d == 0]
        d = int(rng.choice(divisors[:4] + [n]))
        dims.append(d)
        n //= d
    if n > 1:
        dims.append(n)
    ones = int(rng.integers(0, 2))
    for _ in range(ones):
        dims.insert(int(rng.integers(0, len(dims) + 1)), 1)
    return tuple(dims)


@pytest.mark.parametrize("seed", range(300))
def test_random_view_chains_match_numpy(seed):
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in rng.integers(1, 6, size=rng.integers(0, 4)))
    pad = int(rng.integers(0, 5))
    buf = np.arange(pad + int(np.prod(shape)) + 3, dtype=np.float32)  # offset and slack around the data
    v = View(shape, None, pad)
    ref = buf[pad : pad + int(np.prod(shape))].reshape(shape)
    check(buf, v, ref)
    for _ in range(6):
        step = random_step(rng, v, ref)
        if step is not None:
            v, ref = step
            check(buf, v, ref)


@pytest.mark.parametrize(
    "shape,axes,new,copies",
    [
        ((2, 3, 4), (1, 0, 2), (3, 2, 2, 2), False),  # splitting the contiguous inner axis is a view
        ((2, 3, 4), (1, 0, 2), (3, 8), True),  # merging a swapped axis with the inner one copies
        ((2, 3, 4), (1, 0, 2), (6, 4), True),  # merging the swapped axes copies
        ((4, 6), (1, 0), (6, 2, 2), False),  # splitting a strided axis is a view
        ((4, 6), (1, 0), (24,), True),
        ((3, 1, 5), (2, 1, 0), (5, 3), False),  # size-1 axes do not matter
    ],
)
def test_reshape_of_transposes(shape, axes, new, copies):
    buf = np.arange(int(np.prod(shape)), dtype=np.int64)
    v = View(shape).permute(axes)
    ref = buf.reshape(shape).transpose(axes)
    got = v.reshape(new)
    assert (got is None) == copies
    with pytest.raises(ValueError) if copies else nullcontext():
        ref.reshape(new, copy=False)  # numpy agrees
    if not copies:
        np.testing.assert_array_equal(read(buf, got), ref.reshape(new))


def test_empty_views():
    v = View((3, 0, 2), None, 5)
    assert v.size == 0 and v.is_contiguous() and v.span() == (5, 5)
    assert v.reshape((0, 7)).shape == (0, 7)
    s = View((4, 5)).slice((2, 0), (2, 5), (1, 1))
    assert s.shape == (0, 5) and s.size == 0


def test_expand_reads_one_element_many_times():
    buf = np.arange(10, dtype=np.float64)
    v = View((1,), None, 7).expand((3, 4))
    assert v.strides == (0, 0) and v.is_broadcast() and not v.is_contiguous()
    np.testing.assert_array_equal(read(buf, v), np.full((3, 4), 7.0))


def test_contiguous_strides_match_numpy():
    for shape in [(), (5,), (2, 3), (4, 1, 3), (2, 0, 3)]:
        itemsize = 4
        want = np.empty(shape, np.float32).strides
        assert tuple(s * itemsize for s in contiguous_strides(shape)) == want or 0 in shape


def test_collapse_merges_axes_every_operand_walks_contiguously():
    shape = (2, 3, 4)
    c = contiguous_strides(shape)
    t = View(shape).permute((0, 2, 1)).strides  # (12, 1, 4) over (2, 4, 3)
    out_shape, (sc,) = collapse(shape, [c])
    assert out_shape == (24,) and sc == (1,)
    cshape, (s1, s2) = collapse((2, 4, 3), [contiguous_strides((2, 4, 3)), t])
    assert cshape == (2, 4, 3)  # the transposed operand keeps the inner axes apart
    buf = np.arange(24)
    np.testing.assert_array_equal(
        as_strided(buf, cshape, tuple(8 * s for s in s2)), buf.reshape(shape).transpose(0, 2, 1)
    )
    assert collapse((1, 1), [(5, 7)]) == ((1,), [(0,)])


class Handle(View):
    """What a backend does: a View subclass carrying its buffer."""

    __slots__ = ("buffer",)

    def __init__(self, buffer: object, shape, strides=None, offset=0) -> None:
        super().__init__(shape, strides, offset)
        self.buffer = buffer

    def with_layout(self, shape, strides, offset):
        return Handle(self.buffer, shape, strides, offset)


def test_subclass_views_keep_their_type_and_buffer():
    h = Handle("buf", (2, 3))
    for v in (h.permute((1, 0)), h.expand((4, 2, 3)), h.slice((0, 1), (2, 3), (1, 1)), h.flip((0,)), h.reshape((6,))):
        assert type(v) is Handle and v.buffer == "buf"


def test_view_movement_mixin_declares_the_movement_primitives():
    import ember as em
    from ember.backend import Backend
    from ember.views import ViewMovement

    copies = []

    class FooBackend(ViewMovement, Backend):
        name = "foo"

        def make_contiguous(self, a):
            copies.append(a.shape)
            return Handle("copy", a.shape)

    backend = FooBackend(em.Device.cpu())
    assert {"reshape", "permute", "expand", "slice", "flip"} <= set(backend.native_kernels())
    h = Handle("buf", (2, 3, 4))
    t = backend.implementation("permute")(h, axes=(2, 1, 0))
    assert t.strides == (1, 4, 12) and t.buffer == "buf"
    assert backend.implementation("reshape")(h, shape=(6, 4)).buffer == "buf" and not copies  # a view
    r = backend.implementation("reshape")(t, shape=(24,))  # numpy copies here: so does the mixin
    assert r.buffer == "copy" and r.shape == (24,) and copies == [(4, 3, 2)]
    s = backend.implementation("slice")(h, starts=(0, 1, 0), stops=(2, 3, 4), steps=(1, 1, 2))
    assert (s.shape, s.offset) == ((2, 2, 2), 4)
    f = backend.implementation("flip")(h, axes=(0,))
    e = backend.implementation("expand")(Handle("buf", (1, 4)), shape=(3, 4))
    assert f.offset == 12 and f.strides[0] == -12 and e.strides == (0, 1)


@pytest.mark.parametrize(
    "view, folds",
    [
        (View((3, 4, 5, 6)), True),  # C order: (60, 6)
        (View((4, 5, 6)).slice((0, 0, 1), (4, 5, 5), (1, 1, 1)), True),  # rows of a column slice still step evenly
        (View((2, 1, 5, 6), (30, 7, 6, 1), 2), True),  # a size-1 batch axis with any stride, an offset
        (View((4, 6, 5)).permute((0, 2, 1)), False),  # each matrix transposed
        (View((5, 4, 6)).permute((1, 0, 2)), False),  # batches interleaved with the rows
        (View((4, 1, 6)), False),  # one row a matrix: nothing to gain
        (View((6,), None, 3).expand((4, 5, 6)), False),  # broadcast rows
    ],
)
def test_rows_folded_reads_the_same_elements(view, folds):
    """A (..., M, K) view folded to (batch * M, K) reads exactly the elements of its matrices, in order."""
    buf = np.arange(400, dtype=np.float64)
    flat = view.rows_folded()
    assert (flat is not None) == folds
    if folds:
        want = read(buf, view).reshape(-1, view.shape[-1])
        np.testing.assert_array_equal(read(buf, flat), want)
