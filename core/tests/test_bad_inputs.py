"""The bad-input walk: a table of calls across the public API with bad arguments.

Each row checks that the error is an ``ember.errors.EmberError``, that it is also the matching
built-in (so ``except ValueError`` keeps working), and that the message names the function and
the argument (the regex was written from the real message, then trimmed to the part that says
what was wrong). Add a row for every argument check you add.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import ember as em
from ember import nn, optim
from ember.data import (
    CsvDataset,
    DataLoader,
    InMemoryDataset,
    ParquetDataset,
    Subset,
    WindowDataset,
    random_split,
)
from ember.nn import functional as F
from ember.optim import lr_scheduler as S

AD = em.Device("cpu").autodiff()


def x23():
    return em.ones((2, 3))


def xi():
    return em.asarray([1, 2, 3])


def w():
    return em.tensor([1.0, 2.0], device=AD, requires_grad=True)


def opt():
    return optim.SGD([w()], lr=0.1)


def lin():
    return nn.Linear(3, 2, device=AD)


ROWS = [
    ("zeros('abc')", lambda: em.zeros("abc"), TypeError, r"zeros: shape must be an int or a sequence of ints,"),
    ("zeros((2.5,))", lambda: em.zeros((2.5,)), TypeError, r"zeros: shape must be an int or a sequence of ints,"),
    ("zeros((-1, 2))", lambda: em.zeros((-1, 2)), ValueError, r"zeros: shape=\(-1, 2\) has a negative dimension"),
    ("ones(None)", lambda: em.ones(None), TypeError, r"ones: shape must be an int or a sequence of ints,"),
    (
        "full((2,), 'a')",
        lambda: em.full((2,), "a"),
        TypeError,
        r"full: fill_value must be a bool, int or float \(or a 0-d tensor\),",
    ),
    (
        "full((2,), 1.5, dtype=int32)",
        lambda: em.full((2,), 1.5, dtype=em.int32),
        TypeError,
        r"full: fill_value 1\.5 is not an integer but dtype is int32",
    ),
    (
        "zeros(2, dtype='float128')",
        lambda: em.zeros(2, dtype="float128"),
        TypeError,
        r"dtype='float128' is not an ember dtype",
    ),
    (
        "zeros(2, device='cpu:7')",
        lambda: em.zeros(2, device="cpu:7"),
        RuntimeError,
        r"cpu:7 does not exist: the cpu backend found 1 device\(s\) \(indices 0\.\.0\)\.",
    ),
    (
        "zeros(2, device='nosuch')",
        lambda: em.zeros(2, device="nosuch"),
        RuntimeError,
        r"no installed plugin provides 'nosuch' devices\.",
    ),
    ("arange('a')", lambda: em.arange("a"), TypeError, r"arange: stop must be an int or float,"),
    ("arange(0, 5, 0)", lambda: em.arange(0, 5, 0), ValueError, r"arange: step must not be zero"),
    ("linspace(0, 1, -2)", lambda: em.linspace(0, 1, -2), ValueError, r"linspace: num must be a non-negative int,"),
    ("eye(-1)", lambda: em.eye(-1), ValueError, r"eye: sizes must be >= 0,"),
    ("eye(2.5)", lambda: em.eye(2.5), TypeError, r"eye: n_rows must be an int,"),
    (
        "asarray('abc')",
        lambda: em.asarray("abc"),
        TypeError,
        r"tensor: data of type str gives a numpy array of dtype <U3",
    ),
    (
        "asarray([[1, 2], [3]])",
        lambda: em.asarray([[1, 2], [3]]),
        ValueError,
        r"tensor: nested lists of different lengths \(ragged data\) do not form a te",
    ),
    (
        "asarray([object()])",
        lambda: em.asarray([object()]),
        TypeError,
        r"tensor: data of type list gives a numpy array of dtype object",
    ),
    ("from_numpy([1])", lambda: em.from_numpy([1]), TypeError, r"from_numpy: expected a numpy\.ndarray,"),
    ("from_dlpack(3)", lambda: em.from_dlpack(3), TypeError, r"from_dlpack: int has no __dlpack__ method"),
    ("zeros_like([1])", lambda: em.zeros_like([1]), TypeError, r"zeros_like: x must be an ember Tensor,"),
    ("rand((2.5,))", lambda: em.rand((2.5,)), TypeError, r"rand: shape must be an int or a sequence of ints,"),
    (
        "randint(5, 1, (2,))",
        lambda: em.randint(5, 1, (2,)),
        ValueError,
        r"randint: high \(1\) must be greater than low \(5\)",
    ),
    (
        "normal(shape=(2,), std=-1)",
        lambda: em.normal(shape=(2,), std=-1.0),
        ValueError,
        r"normal: std must be >= 0 \(a standard deviation\),",
    ),
    (
        "permutation(-3)",
        lambda: em.permutation(-3),
        ValueError,
        r"permutation: n must be an int >= 0 \(the number of items\),",
    ),
    (
        "bernoulli(2.0)",
        lambda: em.bernoulli(2.0, shape=(2,)),
        ValueError,
        r"bernoulli: p must be a probability in \[0, 1\] \(or a tensor of them\),",
    ),
    ("tril(ones(3), k=1.5)", lambda: em.tril(em.ones((3, 3)), k=1.5), TypeError, r"tril: k must be an int,"),
    (
        "add(x, 'a')",
        lambda: em.add(x23(), "a"),
        TypeError,
        r"add: an operand 'a' \(str\) is not a tensor, a number or numeric data",
    ),
    (
        "add shapes",
        lambda: em.add(em.ones((2, 3)), em.ones((4,))),
        ValueError,
        r"add: shapes \(2, 3\) and \(4,\) do not broadcast \(axis -1: 3 vs 4\)\. Each axi",
    ),
    (
        "bitwise_and floats",
        lambda: em.bitwise_and(em.ones(2), em.ones(2)),
        TypeError,
        r"bitwise_and: expected a integer or boolean tensor,",
    ),
    ("sin(int)", lambda: em.sin(xi()), TypeError, r"sin: expected a floating-point tensor,"),
    (
        "logical_not('x')",
        lambda: em.logical_not("x"),
        TypeError,
        r"logical_not: an operand 'x' \(str\) is not a tensor, a number or numeric d",
    ),
    (
        "where(cond float)",
        lambda: em.where(em.ones(2), em.ones(2), em.zeros(2)),
        TypeError,
        r"where: condition must be a bool tensor,",
    ),
    (
        "clip(x, 'a', 1.0)",
        lambda: em.clip(em.ones(2), "a", 1.0),
        TypeError,
        r"maximum: an operand 'a' \(str\) is not a tensor, a number or numeric data",
    ),
    (
        "pow(x, 'b')",
        lambda: em.pow(x23(), "b"),
        TypeError,
        r"pow: an operand 'b' \(str\) is not a tensor, a number or numeric data",
    ),
    ("astype('bogus')", lambda: x23().astype("bogus"), TypeError, r"dtype='bogus' is not an ember dtype"),
    ("can_cast('x', float32)", lambda: em.can_cast("x", em.float32), TypeError, r"from_='x' is not an ember dtype"),
    ("result_type()", lambda: em.result_type(), TypeError, r"result_type: at least one dtype or tensor is required"),
    ("finfo(int32)", lambda: em.finfo(em.int32), TypeError, r"finfo: expected a floating-point dtype,"),
    ("iinfo(float32)", lambda: em.iinfo(em.float32), TypeError, r"iinfo: expected an integer dtype,"),
    (
        "sum(axis=1.5)",
        lambda: em.sum(x23(), axis=1.5),
        TypeError,
        r"sum: axis must be an int, a tuple of ints or None,",
    ),
    (
        "sum(axis=5)",
        lambda: em.sum(x23(), axis=5),
        ValueError,
        r"sum: axis=5 is out of range for a tensor with 2 dimension\(s\)",
    ),
    (
        "sum(axis='0')",
        lambda: em.sum(x23(), axis="0"),
        TypeError,
        r"sum: axis must be an int, a tuple of ints or None,",
    ),
    ("mean(axis=(0, 0))", lambda: em.mean(x23(), axis=(0, 0)), ValueError, r"mean: axis=\(0, 0\) names an axis twice"),
    ("mean(int)", lambda: em.mean(xi()), TypeError, r"mean: expected a floating-point tensor,"),
    (
        "var(correction=-1)",
        lambda: em.var(x23(), correction=-1),
        ValueError,
        r"var: correction must be a number >= 0 \(0: population, 1: sample variance",
    ),
    (
        "argmax(axis=2)",
        lambda: em.argmax(x23(), axis=2),
        ValueError,
        r"argmax: axis=2 is out of range for a tensor with 2 dimension\(s\)",
    ),
    (
        "cumsum(axis=3)",
        lambda: em.cumsum(x23(), axis=3),
        ValueError,
        r"cumulative_sum: axis=3 is out of range for a tensor with 2 dimension\(s\)",
    ),
    ("topk(k=9)", lambda: em.topk(x23(), 9), ValueError, r"topk: k=9 must be between 0 and the axis length 3"),
    (
        "sort(axis=4)",
        lambda: em.sort(x23(), axis=4),
        ValueError,
        r"sort: axis=4 is out of range for a tensor with 2 dimension\(s\)",
    ),
    (
        "logsumexp(axis=9)",
        lambda: em.logsumexp(x23(), axis=9),
        ValueError,
        r"logsumexp: axis=9 is out of range for a tensor with 2 dimension\(s\)",
    ),
    (
        "vector_norm(ord='fro')",
        lambda: em.vector_norm(x23(), ord="fro"),
        TypeError,
        r"vector_norm: ord must be a number \(1, 2, p > 0, 0 or \+-inf\),",
    ),
    (
        "reshape((4,))",
        lambda: em.reshape(x23(), (4,)),
        ValueError,
        r"reshape: cannot reshape a tensor of shape \(2, 3\) \(6 elements\) into \(4,\)",
    ),
    (
        "reshape((2.5,))",
        lambda: em.reshape(x23(), (2.5,)),
        TypeError,
        r"reshape: shape must be an int or a sequence of ints,",
    ),
    ("reshape((-1,-1))", lambda: em.reshape(x23(), (-1, -1)), ValueError, r"reshape: at most one dimension may be -1,"),
    (
        "permute_dims((0,))",
        lambda: em.permute_dims(x23(), (0,)),
        ValueError,
        r"permute_dims: axes=\(0,\) must be a permutation of 0\.\.1",
    ),
    (
        "permute_dims((0, 0))",
        lambda: em.permute_dims(x23(), (0, 0)),
        ValueError,
        r"permute_dims: axes=\(0, 0\) must be a permutation of 0\.\.1",
    ),
    (
        "broadcast_to((4,))",
        lambda: em.broadcast_to(x23(), (4,)),
        ValueError,
        r"broadcast_to: shapes \(2, 3\) and \(4,\) do not broadcast \(axis -1: 3 vs 4\)\.",
    ),
    (
        "concat shapes",
        lambda: em.concat([em.ones((2, 3)), em.ones((2, 4))], axis=0),
        ValueError,
        r"concat: tensor 1 has shape \(2, 4\), which differs from \(2, 3\) outside axi",
    ),
    ("concat([])", lambda: em.concat([]), ValueError, r"concat: needs at least one tensor"),
    (
        "stack shapes",
        lambda: em.stack([em.ones(2), em.ones(3)]),
        ValueError,
        r"stack: tensor 1 has shape \(3,\), expected \(2,\)",
    ),
    (
        "squeeze(axis=1)",
        lambda: em.squeeze(x23(), axis=1),
        ValueError,
        r"squeeze: axis 1 has length 3, not 1 \(shape \(2, 3\)\)",
    ),
    (
        "expand_dims(axis=5)",
        lambda: em.expand_dims(x23(), axis=5),
        ValueError,
        r"expand_dims: axis=5 is out of range for a tensor with 3 dimension\(s\)",
    ),
    (
        "split(x, 4)",
        lambda: em.split(em.ones(6), 4),
        ValueError,
        r"split: axis 0 of length 6 does not divide into 4 equal sections",
    ),
    ("chunk(x, 0)", lambda: em.chunk(em.ones(6), 0), ValueError, r"chunk: chunks must be positive,"),
    ("tile(x, 'a')", lambda: em.tile(x23(), "a"), TypeError, r"tile: reps must be an int or a sequence of ints,"),
    ("repeat(x, -1)", lambda: em.repeat(x23(), -1), ValueError, r"repeat: repeats must be >= 0,"),
    ("roll(x, 1.5)", lambda: em.roll(x23(), 1.5), TypeError, r"roll: shift must be an int or a sequence of ints,"),
    (
        "flip(axis=3)",
        lambda: em.flip(x23(), axis=3),
        ValueError,
        r"flip: axis=3 is out of range for a tensor with 2 dimension\(s\)",
    ),
    (
        "moveaxis(0, 4)",
        lambda: em.moveaxis(x23(), 0, 4),
        ValueError,
        r"moveaxis: destination=4 is out of range for a tensor with 2 dimension\(s\)",
    ),
    (
        "swapaxes(0, 9)",
        lambda: em.swapaxes(x23(), 0, 9),
        ValueError,
        r"swapaxes: axis1=9 is out of range for a tensor with 2 dimension\(s\)",
    ),
    ("diagonal(1-d)", lambda: em.diagonal(em.ones(3)), ValueError, r"diagonal: needs at least 2 dimensions,"),
    (
        "pad(x, ((1, 2, 3),))",
        lambda: em.pad(x23(), ((1, 2, 3),)),
        ValueError,
        r"pad: pad_width=\(\(1, 2, 3\),\) must be an int or \(before, after\) pairs, one",
    ),
    (
        "matmul (3,)@(4,)",
        lambda: em.matmul(em.ones(3), em.ones(4)),
        ValueError,
        r"matmul: 1-D operands of shapes \(3,\) and \(4,\) differ in length \(3 != 4\)",
    ),
    (
        "matmul 2x3 @ 2x3",
        lambda: em.matmul(x23(), x23()),
        ValueError,
        r"matmul: inner dimensions differ: \(2, 3\) @ \(2, 3\) \(3 != 2\)\. The last axis",
    ),
    (
        "matmul scalar",
        lambda: em.matmul(em.ones(()), x23()),
        ValueError,
        r"matmul: operands must have at least 1 dimension",
    ),
    (
        "tensordot axes",
        lambda: em.tensordot(x23(), x23(), axes=5),
        ValueError,
        r"tensordot: axes=5 must be in 0\.\.2 for operands of shapes \(2, 3\) and \(2,",
    ),
    (
        "vecdot shapes",
        lambda: em.vecdot(em.ones(3), em.ones(4)),
        ValueError,
        r"vecdot: axis -1 has length 3 in x1 \(3,\) but 4 in x2 \(4,\)",
    ),
    (
        "einsum bad",
        lambda: em.einsum("ij,jk->ik", x23(), x23()),
        ValueError,
        r"einsum: axis 'j' has size 3 in one operand and 2 in another",
    ),
    ("einsum spec", lambda: em.einsum("ij->k", x23()), ValueError, r"einsum: output 'k' names axes not in the inputs"),
    ("outer 2d", lambda: em.outer(x23(), em.ones(2)), ValueError, r"outer: expects 1-D tensors,"),
    ("trace(1-d)", lambda: em.trace(em.ones(3)), ValueError, r"diagonal: needs at least 2 dimensions,"),
    ("x[5]", lambda: x23()[5], IndexError, r"index 5 is out of bounds for axis 0 with size 2"),
    ("x[0, 0, 0]", lambda: x23()[0, 0, 0], IndexError, r"index: too many indices for a tensor with 2 dims \(3 given\)"),
    ("x['a']", lambda: x23()["a"], IndexError, r"index: 'a' \(str\) is not a valid index"),
    ("x[1.5]", lambda: x23()[1.5], IndexError, r"index: 1\.5 \(float\) is not a valid index"),
    (
        "take(x, [9])",
        lambda: em.take(em.ones(3), em.asarray([9])),
        IndexError,
        r"index 9 is out of bounds for an axis of size 3",
    ),
    ("take float idx", lambda: em.take(em.ones(3), em.ones(1)), TypeError, r"take: index must be an integer tensor,"),
    (
        "take_along_axis ndim",
        lambda: em.take_along_axis(x23(), em.asarray([0]), 1),
        ValueError,
        r"take_along_axis: indices have 1 dims but x has 2",
    ),
    (
        "one_hot([7], 3)",
        lambda: em.one_hot(em.asarray([7]), 3),
        IndexError,
        r"one_hot: indices holds class 7, outside 0\.\.2 for 3 classes",
    ),
    (
        "one_hot([-1], 3)",
        lambda: em.one_hot(em.asarray([-1]), 3),
        IndexError,
        r"one_hot: indices holds class -1, outside 0\.\.2 for 3 classes",
    ),
    (
        "one_hot([1], 0)",
        lambda: em.one_hot(em.asarray([1]), 0),
        ValueError,
        r"one_hot: num_classes must be a positive int,",
    ),
    (
        "scatter_add shapes",
        lambda: em.scatter_add(x23(), em.asarray([[0]]), em.ones((1, 1)), 0),
        ValueError,
        r"scatter_add: indices shape \(1, 1\) must match x shape \(2, 3\) outside axis",
    ),
    (
        "index_put too many",
        lambda: em.index_put(em.ones(3), (xi(), xi()), 1.0),
        IndexError,
        r"index_put: 2 index tensors for a tensor with 1 dims",
    ),
    ("x.item() size 6", lambda: x23().item(), ValueError, r"item: the tensor has 6 elements \(shape \(2, 3\)\)"),
    ("len(0-d)", lambda: len(em.ones(())), TypeError, r"len\(\): a 0-d tensor has no length"),
    ("iter(0-d)", lambda: iter(em.ones(())), TypeError, r"iter\(\): a 0-d tensor cannot be iterated"),
    ("x.grad = 3", lambda: setattr(w(), "grad", 3), TypeError, r"Tensor\.grad: grad must be a Tensor or None,"),
    (
        "requires_grad_ plain",
        lambda: em.ones(2).requires_grad_(),
        RuntimeError,
        r"requires_grad_: the tensor lives on cpu:0, which has autodiff off, so no",
    ),
    (
        "backward plain",
        lambda: em.ones(2).sum().backward(),
        RuntimeError,
        r"backward: the tensor lives on cpu:0, which has autodiff off, so no graph",
    ),
    ("backward non-scalar", lambda: (w() * 2).backward(), RuntimeError, r"backward: the output has shape \(2,\)"),
    ("x.to(3)", lambda: x23().to(3), TypeError, r"dtype=3 is not an ember dtype"),
    (
        "x.to(float32, dtype=float32)",
        lambda: x23().to(em.float32, dtype=em.float32),
        TypeError,
        r"to: a dtype was given twice",
    ),
    ("x.reshape(2.5)", lambda: x23().reshape(2.5), TypeError, r"reshape: shape must be an int or a sequence of ints,"),
    (
        "x.sum(axis=[1.5])",
        lambda: x23().sum(axis=[1.5]),
        TypeError,
        r"sum: axis must be an int \(or a tuple of ints, or None\),",
    ),
    (
        "x.__index__ float",
        lambda: [1, 2][em.asarray(1.0)],
        TypeError,
        r"only integer tensors can be used as an index, not float32",
    ),
    ("bool(x) multi", lambda: bool(x23()), ValueError, r"the truth value of a tensor with 6 elements is ambiguous"),
    ("int(x) multi", lambda: int(x23()), ValueError, r"item: the tensor has 6 elements \(shape \(2, 3\)\)"),
    (
        "int tensor requires_grad_",
        lambda: x23().astype(em.int32).requires_grad_(),
        RuntimeError,
        r"requires_grad_: only floating-point tensors have gradients",
    ),
    (
        "grad(f)(list)",
        lambda: em.grad(lambda a: a.sum())([1.0]),
        TypeError,
        r"grad: argument 0 must be a Tensor to differentiate,",
    ),
    (
        "grad argnums",
        lambda: em.grad(lambda a: a.sum(), argnums=3)(w()),
        TypeError,
        r"grad: argnums=3 but only 1 positional argument\(s\) were given",
    ),
    (
        "grad returns non-tensor",
        lambda: em.grad(lambda a: 3.0)(w()),
        TypeError,
        r"grad: the function must return a Tensor,",
    ),
    (
        "cross_entropy class 7 of 3",
        lambda: F.cross_entropy(em.ones((2, 3)), em.asarray([7, 0])),
        IndexError,
        r"cross_entropy: target holds class 7, outside 0\.\.2 for 3 classes",
    ),
    (
        "cross_entropy class -2",
        lambda: F.cross_entropy(em.ones((2, 3)), em.asarray([-2, 0])),
        IndexError,
        r"cross_entropy: target holds class -2, outside 0\.\.2 for 3 classes",
    ),
    (
        "cross_entropy reduction",
        lambda: F.cross_entropy(em.ones((2, 3)), em.asarray([1, 0]), reduction="avg"),
        ValueError,
        r"cross_entropy: reduction must be 'mean', 'sum' or 'none',",
    ),
    (
        "cross_entropy target shape",
        lambda: F.cross_entropy(em.ones((2, 3)), em.asarray([1, 0, 1])),
        ValueError,
        r"cross_entropy: logits \(2, 3\) need target of shape \(2,\),",
    ),
    (
        "cross_entropy bool target",
        lambda: F.cross_entropy(em.ones((2, 3)), em.asarray([True, False])),
        TypeError,
        r"cross_entropy: target must hold class indices \(integers\) or probabilitie",
    ),
    (
        "nll_loss class 5",
        lambda: F.nll_loss(em.ones((2, 3)), em.asarray([5, 0])),
        IndexError,
        r"nll_loss: target holds class 5, outside 0\.\.2 for 3 classes",
    ),
    (
        "mse_loss shapes",
        lambda: F.mse_loss(em.ones(3), em.ones(4)),
        ValueError,
        r"mse_loss: input has shape \(3,\) but target has shape \(4,\)",
    ),
    (
        "mse_loss reduction",
        lambda: F.mse_loss(em.ones(3), em.ones(3), reduction="x"),
        ValueError,
        r"mse_loss: reduction must be 'mean', 'sum' or 'none',",
    ),
    (
        "bce shapes",
        lambda: F.binary_cross_entropy(em.ones(2), em.ones(3)),
        ValueError,
        r"binary_cross_entropy: input has shape \(2,\) but target has shape \(3,\)",
    ),
    (
        "softmax axis=4",
        lambda: F.softmax(x23(), dim=4),
        ValueError,
        r"softmax: axis=4 is out of range for a tensor with 2 dimension\(s\)",
    ),
    ("softmax int", lambda: F.softmax(xi(), dim=0), TypeError, r"softmax: expected a floating-point tensor,"),
    (
        "linear shapes",
        lambda: F.linear(x23(), em.ones((2, 4))),
        ValueError,
        r"linear: expected input of shape \(\.\.\., 4\) \(last axis = in_features\),",
    ),
    (
        "conv2d ndim",
        lambda: F.conv2d(em.ones((3, 3)), em.ones((1, 1, 2, 2))),
        ValueError,
        r"conv2d: expected a 3-D \(C, H, W\) or 4-D \(N, C, H, W\) input,",
    ),
    (
        "conv2d stride 0",
        lambda: F.conv2d(em.ones((1, 1, 4, 4)), em.ones((1, 1, 2, 2)), stride=0),
        ValueError,
        r"conv: every entry of stride must be >= 1,",
    ),
    (
        "conv2d stride 'a'",
        lambda: F.conv2d(em.ones((1, 1, 4, 4)), em.ones((1, 1, 2, 2)), stride="a"),
        TypeError,
        r"conv: stride must be an int or a tuple of 2 ints,",
    ),
    (
        "max_pool2d kernel 9",
        lambda: F.max_pool2d(em.ones((1, 1, 4, 4)), 9),
        ValueError,
        r"max_pool: kernel \(9, 9\) \(dilated extent 9 on spatial axis 0\) is larger t",
    ),
    ("dropout p=2", lambda: F.dropout(x23(), p=2.0), ValueError, r"dropout: p must be in \[0, 1\],"),
    (
        "layer_norm shape",
        lambda: F.layer_norm(x23(), (4,)),
        ValueError,
        r"layer_norm: normalized_shape \(4,\) does not match the trailing axes of \(2",
    ),
    (
        "embedding float idx",
        lambda: F.embedding(em.ones(2), em.ones((4, 3))),
        TypeError,
        r"embedding: indices must be integers,",
    ),
    (
        "embedding idx 9",
        lambda: F.embedding(em.asarray([9]), em.ones((4, 3))),
        IndexError,
        r"index 9 is out of bounds for an axis of size 4",
    ),
    (
        "pad mode",
        lambda: F.pad(x23(), (1, 1), mode="reflect"),
        NotImplementedError,
        r"pad: only mode='constant' is implemented,",
    ),
    (
        "interpolate mode",
        lambda: F.interpolate(em.ones((1, 1, 4, 4)), scale_factor=2, mode="cubic"),
        ValueError,
        r"interpolate: mode must be one of \['bilinear', 'linear', 'nearest', 'tril",
    ),
    (
        "group_norm groups",
        lambda: F.group_norm(em.ones((1, 4, 2)), 3),
        ValueError,
        r"group_norm: 4 channels do not split into num_groups=3 groups",
    ),
    (
        "sdpa shapes",
        lambda: F.scaled_dot_product_attention(em.ones((2, 3)), em.ones((2, 4)), em.ones((2, 4))),
        ValueError,
        r"scaled_dot_product_attention: q \(2, 3\), k \(2, 4\), v \(2, 4\) do not fit: q",
    ),
    (
        "normalize p",
        lambda: F.normalize(x23(), p="x"),
        ValueError,
        r"normalize: p must be a number > 0 \(the norm's order, e\.g\. 2\),",
    ),
    (
        "one_hot F",
        lambda: F.one_hot(em.asarray([3]), 3),
        IndexError,
        r"one_hot: indices holds class 3, outside 0\.\.2 for 3 classes",
    ),
    ("Linear(-1, 2)", lambda: nn.Linear(-1, 2), ValueError, r"Linear: in_features must be >= 0,"),
    ("Linear(2.5, 2)", lambda: nn.Linear(2.5, 2), TypeError, r"Linear: in_features must be an int,"),
    (
        "Linear forward shape",
        lambda: nn.Linear(3, 2)(em.ones((2, 4))),
        ValueError,
        r"Linear: expected input of shape \(\.\.\., 3\) \(last axis = in_features\),",
    ),
    (
        "Linear forward 1-d wrong",
        lambda: nn.Linear(3, 2)(em.ones(4)),
        ValueError,
        r"Linear: expected input of shape \(\.\.\., 3\) \(last axis = in_features\),",
    ),
    ("Conv2d kernel 0", lambda: nn.Conv2d(1, 1, 0), ValueError, r"Conv2d: every kernel_size must be >= 1,"),
    (
        "Conv2d padding_mode",
        lambda: nn.Conv2d(1, 1, 3, padding_mode="reflect"),
        NotImplementedError,
        r"Conv2d: only padding_mode='zeros' is implemented,",
    ),
    (
        "Conv2d padding bad",
        lambda: nn.Conv2d(1, 1, 3, padding="full"),
        ValueError,
        r"Conv2d: padding must be an int or a tuple \(or 'same'/'valid' for Conv\),",
    ),
    ("Conv2d kernel (1,2,3)", lambda: nn.Conv2d(1, 1, (1, 2, 3)), ValueError, r"Conv2d: kernel_size needs 2 values,"),
    ("Dropout(1.5)", lambda: nn.Dropout(1.5), ValueError, r"Dropout: p must be in \[0, 1\],"),
    (
        "Embedding padding_idx",
        lambda: nn.Embedding(4, 2, padding_idx=9),
        ValueError,
        r"Embedding: padding_idx=9 is outside \[0, 4\)",
    ),
    (
        "MultiHeadAttention heads",
        lambda: nn.MultiHeadAttention(10, 3),
        ValueError,
        r"MultiHeadAttention: embed_dim=10 must be divisible by num_heads=3",
    ),
    (
        "GroupNorm groups",
        lambda: nn.GroupNorm(3, 4),
        ValueError,
        r"GroupNorm: num_channels=4 must be divisible by num_groups=3",
    ),
    (
        "GELU approximate",
        lambda: nn.GELU(approximate="fast"),
        ValueError,
        r"GELU: approximate must be 'none' or 'tanh',",
    ),
    (
        "RNN nonlinearity",
        lambda: nn.RNN(2, 3, nonlinearity="sigmoid"),
        ValueError,
        r"RNN: nonlinearity must be 'tanh' or 'relu',",
    ),
    ("LSTM hidden 0", lambda: nn.LSTM(2, 0), ValueError, r"LSTM: num_layers and hidden_size must be >= 1,"),
    ("GRU dropout", lambda: nn.GRU(2, 3, dropout=2.0), ValueError, r"GRU: dropout must be in \[0, 1\],"),
    (
        "RotaryEmbedding odd",
        lambda: nn.RotaryEmbedding(3),
        ValueError,
        r"RotaryEmbedding: dim must be a positive even number,",
    ),
    (
        "MSELoss reduction",
        lambda: nn.MSELoss(reduction="avg"),
        ValueError,
        r"MSELoss: reduction must be 'mean', 'sum' or 'none',",
    ),
    (
        "TransformerEncoderLayer act",
        lambda: nn.TransformerEncoderLayer(4, 2, activation="tanh"),
        ValueError,
        r"TransformerEncoderLayer: activation must be 'relu' or 'gelu',",
    ),
    ("Sequential(3)", lambda: nn.Sequential(3), TypeError, r"Sequential: expected an nn\.Module,"),
    ("ModuleList([3])", lambda: nn.ModuleList([3]), TypeError, r"ModuleList\.append: expected an nn\.Module,"),
    ("Parameter([1])", lambda: nn.Parameter([1.0]), TypeError, r"nn\.Parameter: expected an ember Tensor,"),
    (
        "register_parameter bad name",
        lambda: nn.Module().register_parameter("a.b", None),
        KeyError,
        r"Module\.register_parameter: name must be a non-empty string without '\.',",
    ),
    (
        "register_buffer non-tensor",
        lambda: nn.Module().register_buffer("b", 3),
        TypeError,
        r"Module\.register_buffer: cannot register int as buffer 'b'",
    ),
    ("module.missing", lambda: nn.Linear(2, 2).missing, AttributeError, r"'Linear' object has no attribute 'missing'"),
    (
        "get_submodule",
        lambda: nn.Sequential(nn.Linear(2, 2)).get_submodule("5"),
        AttributeError,
        r"Sequential has no child module '5' \(looking up '5'\)",
    ),
    (
        "load_state_dict missing",
        lambda: nn.Linear(2, 2).load_state_dict({}),
        ValueError,
        r"load_state_dict: the state dict does not fit Linear:",
    ),
    ("Module().forward", lambda: nn.Module()(1), NotImplementedError, r"Module does not define forward\(\)"),
    (
        "config_from_dict unknown",
        lambda: nn.config_from_dict("NoSuchConfig", {}),
        KeyError,
        r"config_from_dict: no layer config named 'NoSuchConfig' is defined",
    ),
    (
        "init fan 1-d",
        lambda: nn.init.kaiming_uniform_(em.ones(3)),
        ValueError,
        r"nn\.init: fan in and fan out need a tensor with at least 2 dimensions \(ou",
    ),
    (
        "init mode",
        lambda: nn.init.kaiming_uniform_(em.ones((3, 3)), mode="fan"),
        ValueError,
        r"nn\.init: mode must be 'fan_in' or 'fan_out',",
    ),
    ("BatchNorm forward list", lambda: nn.BatchNorm1d(3)([1.0]), TypeError, r"BatchNorm1d: expected a Tensor,"),
    ("SGD([])", lambda: optim.SGD([]), ValueError, r"SGD: params is an empty parameter list"),
    ("SGD lr=-1", lambda: optim.SGD([w()], lr=-1), ValueError, r"SGD: lr must be a number >= 0,"),
    ("SGD lr='a'", lambda: optim.SGD([w()], lr="a"), ValueError, r"SGD: lr must be a number >= 0,"),
    (
        "SGD momentum -1",
        lambda: optim.SGD([w()], lr=0.1, momentum=-1.0),
        ValueError,
        r"SGD: momentum must be a number >= 0,",
    ),
    (
        "SGD nesterov",
        lambda: optim.SGD([w()], lr=0.1, nesterov=True),
        ValueError,
        r"SGD: nesterov momentum needs momentum > 0 and dampening = 0",
    ),
    (
        "SGD set",
        lambda: optim.SGD({w()}, lr=0.1),
        TypeError,
        r"SGD: parameters must be an ordered collection \(a list\), not a set",
    ),
    (
        "SGD int tensor",
        lambda: optim.SGD([em.asarray([1])], lr=0.1),
        TypeError,
        r"SGD group 0: only floating-point tensors can be optimized,",
    ),
    ("SGD non-tensor", lambda: optim.SGD([3.0], lr=0.1), TypeError, r"SGD group 0: parameters must be ember Tensors,"),
    (
        "SGD duplicate",
        lambda: (lambda p: optim.SGD([p, p], lr=0.1))(w()),
        ValueError,
        r"SGD: a parameter of shape \(2,\) appears twice \(in one group or in two gro",
    ),
    (
        "SGD group no params",
        lambda: optim.SGD([{"lr": 0.1}]),
        ValueError,
        r"SGD: a parameter group needs a 'params' entry",
    ),
    (
        "SGD non-leaf",
        lambda: optim.SGD([w() * 2], lr=0.1),
        ValueError,
        r"SGD group 0: a tensor computed by 'mul' is not a leaf and cannot be opti",
    ),
    (
        "Adam betas",
        lambda: optim.Adam([w()], betas=(0.9,)),
        ValueError,
        r"Adam: betas must be a pair \(beta1, beta2\),",
    ),
    (
        "Adam beta 1.5",
        lambda: optim.Adam([w()], betas=(1.5, 0.9)),
        ValueError,
        r"Adam: beta1 \(betas\[0\]\) must be a number in \[0, 1\),",
    ),
    ("Adam eps -1", lambda: optim.Adam([w()], eps=-1.0), ValueError, r"Adam: eps must be a number >= 0,"),
    (
        "AdamW weight_decay",
        lambda: optim.AdamW([w()], weight_decay=-0.1),
        ValueError,
        r"AdamW: weight_decay must be a number >= 0,",
    ),
    ("RMSprop alpha", lambda: optim.RMSprop([w()], alpha=-1.0), ValueError, r"RMSprop: alpha must be a number >= 0,"),
    (
        "Adagrad lr_decay",
        lambda: optim.Adagrad([w()], lr_decay=-1.0),
        ValueError,
        r"Adagrad: lr_decay must be a number >= 0,",
    ),
    (
        "load_state_dict bad",
        lambda: opt().load_state_dict({"x": 1}),
        ValueError,
        r"SGD\.load_state_dict: expected a dict with 'state' and 'param_groups' \(th",
    ),
    (
        "clip_grad_norm_ max_norm",
        lambda: optim.clip_grad_norm_([w()], max_norm=-1.0),
        ValueError,
        r"clip_grad_norm_: max_norm must be >= 0,",
    ),
    (
        "clip_grad_value_ 'a'",
        lambda: optim.clip_grad_value_([w()], "a"),
        TypeError,
        r"clip_grad_value_: clip_value must be a number,",
    ),
    (
        "StepLR(step_size=0)",
        lambda: S.StepLR(opt(), step_size=0),
        ValueError,
        r"StepLR: step_size must be a positive integer,",
    ),
    ("StepLR(object)", lambda: S.StepLR(object(), step_size=1), TypeError, r"StepLR: expected an ember Optimizer,"),
    (
        "CosineAnnealingLR T_max=0",
        lambda: S.CosineAnnealingLR(opt(), T_max=0),
        ValueError,
        r"CosineAnnealingLR: T_max must be positive,",
    ),
    (
        "LinearLR start 0",
        lambda: S.LinearLR(opt(), start_factor=0.0),
        ValueError,
        r"LinearLR: start_factor must be in \(0, 1\],",
    ),
    (
        "LinearLR end 2",
        lambda: S.LinearLR(opt(), end_factor=2.0),
        ValueError,
        r"LinearLR: end_factor must be in \[0, 1\],",
    ),
    (
        "OneCycleLR no steps",
        lambda: S.OneCycleLR(opt(), max_lr=0.1),
        ValueError,
        r"OneCycleLR: give total_steps, or epochs and steps_per_epoch",
    ),
    (
        "OneCycleLR pct_start",
        lambda: S.OneCycleLR(opt(), max_lr=0.1, total_steps=10, pct_start=2.0),
        ValueError,
        r"OneCycleLR: pct_start must be a float in \[0, 1\],",
    ),
    (
        "OneCycleLR anneal",
        lambda: S.OneCycleLR(opt(), max_lr=0.1, total_steps=10, anneal_strategy="exp"),
        ValueError,
        r"OneCycleLR: anneal_strategy must be 'cos' or 'linear',",
    ),
    (
        "OneCycleLR max_lr list",
        lambda: S.OneCycleLR(opt(), max_lr=[0.1, 0.2], total_steps=10),
        ValueError,
        r"OneCycleLR: max_lr needs 1 value\(s\) \(one per parameter group\),",
    ),
    (
        "MultiStepLR gamma",
        lambda: S.MultiStepLR(opt(), milestones=[1], gamma="x"),
        ValueError,
        r"MultiStepLR: gamma must be a number > 0 \(e\.g\. 0\.1 or 0\.95\),",
    ),
    (
        "ExponentialLR gamma",
        lambda: S.ExponentialLR(opt(), gamma=-1.0),
        ValueError,
        r"ExponentialLR: gamma must be a number > 0 \(e\.g\. 0\.1 or 0\.95\),",
    ),
    (
        "SequentialLR empty",
        lambda: S.SequentialLR(opt(), [], milestones=[]),
        ValueError,
        r"SequentialLR: expects at least one scheduler",
    ),
    (
        "SequentialLR milestones",
        lambda: (lambda o: S.SequentialLR(o, [S.StepLR(o, 1), S.StepLR(o, 1)], milestones=[]))(opt()),
        ValueError,
        r"SequentialLR: expects one milestone fewer than schedulers,",
    ),
    (
        "ChainedScheduler empty",
        lambda: S.ChainedScheduler([]),
        ValueError,
        r"ChainedScheduler: expects at least one scheduler",
    ),
    (
        "LambdaLR non-callable",
        lambda: S.LambdaLR(opt(), lr_lambda=3),
        TypeError,
        r"LambdaLR: lr_lambda must be a function of the epoch \(or one per paramete",
    ),
    ("DataLoader(3)", lambda: DataLoader(3), TypeError, r"DataLoader: dataset must have __len__ and __getitem__,"),
    (
        "DataLoader batch_size 0",
        lambda: DataLoader(InMemoryDataset(np.zeros(4)), batch_size=0),
        ValueError,
        r"DataLoader: batch_size must be >= 1,",
    ),
    (
        "DataLoader batch_size 2.5",
        lambda: DataLoader(InMemoryDataset(np.zeros(4)), batch_size=2.5),
        TypeError,
        r"DataLoader: batch_size must be an int,",
    ),
    (
        "DataLoader num_workers -1",
        lambda: DataLoader(InMemoryDataset(np.zeros(4)), num_workers=-1),
        ValueError,
        r"DataLoader: num_workers must be >= 0,",
    ),
    (
        "DataLoader timeout 0",
        lambda: DataLoader(InMemoryDataset(np.zeros(4)), timeout=0),
        ValueError,
        r"DataLoader: timeout must be > 0 seconds \(or None to wait\),",
    ),
    (
        "DataLoader collate",
        lambda: DataLoader(InMemoryDataset(np.zeros(4)), collate_fn=3),
        TypeError,
        r"DataLoader: collate_fn must be callable or None,",
    ),
    ("InMemoryDataset()", lambda: InMemoryDataset(), ValueError, r"InMemoryDataset: needs at least one array"),
    (
        "InMemoryDataset lengths",
        lambda: InMemoryDataset(np.zeros(3), np.zeros(4)),
        ValueError,
        r"InMemoryDataset: arrays have different lengths \[3, 4\]",
    ),
    (
        "InMemoryDataset both",
        lambda: InMemoryDataset(np.zeros(3), x=np.zeros(3)),
        TypeError,
        r"InMemoryDataset: give arrays either positionally or by name, not both",
    ),
    (
        "dataset[9]",
        lambda: InMemoryDataset(np.zeros(3))[9],
        IndexError,
        r"InMemoryDataset: index 9 out of range for 3 items",
    ),
    ("dataset['a']", lambda: InMemoryDataset(np.zeros(3))["a"], TypeError, r"InMemoryDataset: index must be an int,"),
    (
        "Subset range",
        lambda: Subset(InMemoryDataset(np.zeros(3)), [5]),
        IndexError,
        r"Subset: indices out of range for a dataset of 3 items",
    ),
    (
        "WindowDataset size 0",
        lambda: WindowDataset(np.zeros(5), size=0),
        ValueError,
        r"window: size and stride must be >= 1,",
    ),
    (
        "random_split counts",
        lambda: random_split(InMemoryDataset(np.zeros(4)), [1, 1]),
        ValueError,
        r"split: counts \[1, 1\] sum to 2, but the dataset has 4 items",
    ),
    (
        "random_split fractions",
        lambda: random_split(InMemoryDataset(np.zeros(4)), [0.5, 0.7]),
        ValueError,
        r"split: fractions \[0\.5, 0\.7\] must be non-negative and sum to 1",
    ),
    (
        "random_split empty",
        lambda: random_split(InMemoryDataset(np.zeros(4)), []),
        ValueError,
        r"split: give at least one part",
    ),
    (
        "CsvDataset missing",
        lambda: CsvDataset("/nonexistent/x.csv"),
        FileNotFoundError,
        r"CsvDataset: no file at '/nonexistent/x\.csv'",
    ),
    ("CsvDataset path int", lambda: CsvDataset(3), TypeError, r"CsvDataset: path must be a str or os\.PathLike,"),
    (
        "ParquetDataset missing",
        lambda: ParquetDataset("/nonexistent/x.parquet"),
        FileNotFoundError,
        r"ParquetDataset: no file at '/nonexistent/x\.parquet'",
    ),
    (
        "Device(5)",
        lambda: em.Device(5),
        TypeError,
        r"Device\(spec=5\): spec must be a string such as 'cpu' or 'opencl:0', or a",
    ),
    (
        "Device('')",
        lambda: em.Device(""),
        ValueError,
        r"Device\(''\): expected a device spec such as 'cpu', 'cuda:0' or 'opencl:1'",
    ),
    (
        "Device('cpu:x')",
        lambda: em.Device("cpu:x"),
        ValueError,
        r"Device\('cpu:x'\): the part after ':' must be a device index, e\.g\. 'cpu:0'",
    ),
    ("Device('cpu:-1')", lambda: em.Device("cpu:-1"), ValueError, r"Device\('cpu:-1'\): the device index must be >= 0"),
    (
        "Device('cpu:0', index=1)",
        lambda: em.Device("cpu:0", index=1),
        ValueError,
        r"Device\('cpu:0', index=1\): two different indices given",
    ),
    (
        "Device('c p u')",
        lambda: em.Device("c p u"),
        ValueError,
        r"Device\('c p u'\): the kind must be a name such as 'cpu' or 'opencl'",
    ),
    (
        "Device('nosuch').backend",
        lambda: em.Device("nosuch").backend,
        RuntimeError,
        r"no installed plugin provides 'nosuch' devices\.",
    ),
    (
        "Device('cpu:3').backend",
        lambda: em.Device("cpu:3").backend,
        RuntimeError,
        r"cpu:3 does not exist: the cpu backend found 1 device\(s\) \(indices 0\.\.0\)\.",
    ),
    (
        "autocast dtype",
        lambda: em.autocast(dtype=em.int32).__enter__(),
        TypeError,
        r"autocast: dtype must be float16 or bfloat16,",
    ),
    (
        "autocast dtype bogus",
        lambda: em.autocast(dtype="bogus").__enter__(),
        TypeError,
        r"dtype='bogus' is not an ember dtype",
    ),
    (
        "autocast device",
        lambda: em.autocast(device=5).__enter__(),
        TypeError,
        r"Device\(spec=5\): spec must be a string such as 'cpu' or 'opencl:0', or a",
    ),
    (
        "GradScaler init_scale",
        lambda: em.GradScaler(init_scale=-1.0),
        ValueError,
        r"GradScaler: init_scale must be > 0,",
    ),
    (
        "GradScaler.scale(3)",
        lambda: em.GradScaler().scale(3),
        TypeError,
        r"GradScaler\.scale: expected a Tensor or a list/tuple of Tensors,",
    ),
    (
        "GradScaler growth",
        lambda: em.GradScaler(growth_factor=0.5),
        ValueError,
        r"GradScaler: growth_factor must be > 1,",
    ),
]


@pytest.mark.parametrize(("call", "builtin", "match"), [pytest.param(c, b, m, id=label) for label, c, b, m in ROWS])
def test_bad_input_raises_an_ember_error_naming_the_argument(call, builtin, match):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(em.errors.EmberError) as info:
            call()
    err = info.value
    assert isinstance(err, builtin), f"{type(err).__name__} is not a {builtin.__name__}"
    assert type(err).__module__.startswith("ember"), type(err)
    assert re.search(match, str(err)), f"{match!r} not in {str(err)!r}"


def test_the_walk_covers_the_api():
    assert len(ROWS) >= 100
    labels = [label for label, *_ in ROWS]
    assert len(set(labels)) == len(labels), "row labels must be unique (they are the test ids)"


def test_every_ember_error_class_also_subclasses_a_builtin():
    for name in em.errors.__all__:
        cls = getattr(em.errors, name)
        assert issubclass(cls, em.errors.EmberError)
        if cls is not em.errors.EmberError:
            assert any(b.__module__ == "builtins" and b is not Exception for b in cls.__mro__[1:]), name
