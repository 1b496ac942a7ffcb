"""Structured fuzzing of the ONNX importer with Hypothesis: hostile field values (huge and
negative dims, wrong element types, unknown names, cycles, bad attributes and opsets) in an
otherwise valid model must give a clean ember error or a result, never a crash."""

from __future__ import annotations

import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
hypothesis = pytest.importorskip("hypothesis")

from onnx import helper  # noqa: E402
from test_onnx_import import _mlp  # noqa: E402

import ember as em  # noqa: E402
from ember.errors import EmberError  # noqa: E402

st = hypothesis.strategies

_OPS = ["Relu", "Add", "MatMul", "Gemm", "Reshape", "Conv", "Softmax", "Gather", "Slice", "Concat", "Transpose", "Pad"]
_DIMS = st.one_of(st.integers(-3, 6), st.sampled_from([2**31, 2**40, -(2**40)]))


@st.composite
def _hostile_models(draw):
    model = _mlp()
    g = model.graph
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["dims", "dtype", "op", "inputs", "attr", "cycle", "output", "opset"]))
        if kind == "dims":
            t = g.initializer[draw(st.integers(0, len(g.initializer) - 1))]
            t.ClearField("dims")
            t.dims.extend(draw(st.lists(_DIMS, max_size=4)))
        elif kind == "dtype":
            g.initializer[draw(st.integers(0, len(g.initializer) - 1))].data_type = draw(st.integers(0, 30))
        elif kind == "op":
            g.node[draw(st.integers(0, len(g.node) - 1))].op_type = draw(st.sampled_from(_OPS))
        elif kind == "inputs":
            node = g.node[draw(st.integers(0, len(g.node) - 1))]
            names = ["x", "h", "r", "y", "fc1.weight", "w2t", "", "nowhere"]
            node.ClearField("input")
            node.input.extend(draw(st.lists(st.sampled_from(names), max_size=4)))
        elif kind == "attr":
            node = g.node[draw(st.integers(0, len(g.node) - 1))]
            name = draw(st.sampled_from(["axis", "perm", "transB", "alpha", "shape", "pads", "kernel_shape"]))
            value = draw(
                st.one_of(
                    st.integers(-(2**40), 2**40), st.floats(allow_nan=True), st.lists(st.integers(-9, 9), min_size=1)
                )
            )
            node.attribute.append(helper.make_attribute(name, value))
        elif kind == "cycle":
            g.node[0].input.append(g.node[-1].output[0])  # the first node reads the last one's output
        elif kind == "output":
            g.output[0].name = draw(st.sampled_from(["h", "nowhere", "x", ""]))
        else:
            model.opset_import[0].version = draw(st.integers(-5, 2**40))
    return model


@hypothesis.settings(max_examples=int(os.environ.get("EMBER_FUZZ_EXAMPLES", "150")), deadline=None, derandomize=True)
@hypothesis.given(_hostile_models(), st.integers(1, 3), st.booleans())
def test_hostile_models_raise_only_ember_errors(model, batch, layers):
    """Huge and negative dims, wrong types, unknown names, cycles, bad attributes: a clean error
    or a result, never a crash, with and without ``layers=True`` (run with more examples locally:
    docs/onnx.md)."""
    try:
        net = em.onnx.from_model(onnx.ModelProto.FromString(model.SerializeToString()), layers=layers)
        net(np.ones((batch, 4), np.float32))
    except EmberError:
        pass
