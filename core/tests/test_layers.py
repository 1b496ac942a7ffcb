"""The core's structure: one road to a backend, one builder of graph nodes, the lazy seam,
the op table and its docs. These read the source (AST) or run ops through a recording hook."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import numpy as np
import pytest

import ember as em
from ember import dispatch
from ember.device import set_defer
from ember.dispatch import OPS, parse_signature
from ember.ops import table

SRC = Path(em.__file__).parent
ROOT = SRC.parents[2]
#: the modules allowed to touch a device's implementation table or a backend's kernels
ROAD = {"dispatch.py", "device.py", "backend.py"}


def _modules() -> list[tuple[str, ast.Module]]:
    return [(str(p.relative_to(SRC)), ast.parse(p.read_text(encoding="utf-8"))) for p in sorted(SRC.rglob("*.py"))]


def test_only_dispatch_builds_graph_nodes():
    builders = []
    for name, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Node":
                builders.append(name)
    assert builders and set(builders) == {"dispatch.py"}, f"graph nodes are built in {sorted(set(builders))}"


def test_only_dispatch_reaches_backend_kernels():
    """No module outside dispatch/device/backend reads a device's impl table or asks a backend
    for an implementation: every op takes the one road."""
    offenders = []
    for name, tree in _modules():
        if name in ROAD:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("_impls", "implementation", "native_kernels"):
                offenders.append(f"{name}:{node.lineno} .{node.attr}")
    assert not offenders, f"ops that bypass ember.dispatch: {offenders}"


def test_every_op_has_a_kind_and_a_parsable_signature():
    for name, op in OPS.items():
        assert op.kind in dispatch.KINDS, name
        params = op.native_parameters()
        if name not in ("to_device",):
            assert op.signature.startswith(f"{name}("), f"{name}: signature {op.signature!r}"
            assert params.positional or params.variadic or params.keywords, f"{name}: {op.signature!r}"


def test_parse_signature_reads_every_part():
    p = parse_signature("conv(x, w[, bias], *, stride, groups) -> handle  # note (with, commas)")
    assert p == dispatch.NativeParameters(("x", "w"), ("bias",), None, ("stride", "groups"))
    p = parse_signature("index_put(a, values, *indices, accumulate) -> handle")
    assert p == dispatch.NativeParameters(("a", "values"), (), "indices", ("accumulate",))


def test_docs_op_table_is_current():
    """docs/ops.md is the generated table; regenerate with `python -m ember.ops.table > docs/ops.md`."""
    doc = (ROOT / "docs" / "ops.md").read_text(encoding="utf-8")
    assert doc == table.markdown(), "docs/ops.md is stale: run `python -m ember.ops.table > docs/ops.md`"


class _Recorder:
    """A stand-in lazy layer: records each op and computes it eagerly on the host."""

    def __init__(self, device: em.Device) -> None:
        self.device = device
        self.seen: list[str] = []

    def __call__(self, op, handles, params, shape, dtype):
        self.seen.append(op.name)
        return self.device._impls[op.name](*handles, **params)


def test_lazy_seam_sees_every_kind_of_op_and_autodiff_stays_above_it():
    dev = em.Device("cpu")
    rec = _Recorder(dev)
    _ = dev.backend  # loaded first: loading installs the lazy layer's hook where cpu fuses (numba)
    previous = dev._defer
    set_defer(dev, rec)
    try:
        ad = dev.autodiff()
        x = em.tensor([[1.0, -2.0], [3.0, 4.0]], device=ad, requires_grad=True)
        noise = em.rand((2, 2), device=dev, key=em.random.key(0))
        y = ((x * 2.0 + 1.0).relu() @ x.mT).sum() + noise.sum().item()
        y.backward()
    finally:
        set_defer(dev, previous)
    for name in ("from_numpy", "random_bits", "mul", "add", "relu", "matmul", "sum"):
        assert name in rec.seen, f"{name} did not reach the lazy seam; seen: {sorted(set(rec.seen))}"
    # the gradient matches numpy: d/dx sum(relu(2x+1) @ x.T)
    xv = np.array([[1.0, -2.0], [3.0, 4.0]])
    r = np.maximum(2 * xv + 1, 0)
    g = np.ones((2, 2))
    expected = (g @ xv) * (2 * xv + 1 > 0) * 2 + g.T @ r
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-6)
    assert dev._defer is previous and ad._defer is previous


@pytest.mark.parametrize("device", [em.Device.cpu(), em.Device.cpu().autodiff(), em.Device("cpu", 0)])
def test_device_pickles_with_every_field(device):
    back = pickle.loads(pickle.dumps(device))
    assert back is device
    assert (back.kind, back.index, back.autodiff_enabled) == (device.kind, device.index, device.autodiff_enabled)


def test_remote_device_pickles_its_address():
    dev = em.Device.remote("tcp://127.0.0.1:7000").autodiff()
    back = pickle.loads(pickle.dumps(dev))
    assert back is dev and back.address == "tcp://127.0.0.1:7000" and back.autodiff_enabled


def test_undeclared_method_is_named_in_the_error():
    from ember.backend import Backend, native

    class Half(Backend):
        name = "half"

        @native
        def to_numpy(self, a):
            return a

        def full(self, *, shape, value, dtype):  # not declared: dispatch must not call it
            raise AssertionError("called an undeclared method")

    backend = Half(em.Device.cpu())
    assert "full" in backend.missing_primitives() and "to_numpy" not in backend.missing_primitives()
    assert "full" not in backend.capabilities.native_ops


def test_autocast_policy_lives_in_the_op_table():
    assert OPS["matmul"].autocast == "low" and OPS["softmax"].autocast == "float32"
    assert OPS["add"].autocast is None
    a = em.ones((2, 3))
    with em.autocast(dtype=em.float16):
        assert (a @ a.mT).dtype is em.float16
        assert em.softmax(a.astype(em.float16)).dtype is em.float32
        assert (a + a).dtype is em.float32


def test_capabilities_are_current_when_an_extension_kernel_arrives():
    dev = em.Device.cpu()
    before = dev.capabilities.native_ops

    @em.backend_extension("layers_probe_scale")
    def probe(x):
        return x * 3.0

    assert "layers_probe_scale" not in dev.capabilities.native_ops
    calls = []

    @probe.kernel("cpu")
    def _(backend, a):
        calls.append(a.shape)
        return a * 3.0

    assert dev.capabilities.native_ops == before | {"layers_probe_scale"}
    np.testing.assert_allclose(probe(em.tensor([1.0, 2.0])).numpy(), [3.0, 6.0])
    assert calls == [(2,)], "the extension kernel did not run"
