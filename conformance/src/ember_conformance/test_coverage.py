"""The tables cover ember: every registered op is named by a spec row (array-api-strict's
test_missing_functions idea), every differentiable op has a gradient check, every public
tensor function is exercised, and the device implements every required primitive."""

from __future__ import annotations

import inspect

import pytest

import ember as em
from ember.backend import REQUIRED_PRIMITIVES
from ember.dispatch import OPS
from ember.extension import EXTENSIONS

from .specs import ALL_SPECS, INTERNAL_OPS, OTHER_COVERAGE, covered_ops

#: registered ops whose gradient is checked outside the spec rows
OTHER_GRAD_COVERAGE = {
    "cast": "test_autodiff::test_grad_through_cast",
    "slice": "test_indexing::test_getitem_grad and every row that slices (split, chunk, diagonal)",
    "to_device": "test_transfer::test_grad_across_devices",
    "dequant_matmul": "test_quant::test_dequant_matmul_gradient and test_lora_layer_gradients[nf4]",
}

#: public functions checked by hand-written tests instead of a spec row, with where
HAND_TESTED = {
    **{
        n: "test_creation"
        for n in (
            "arange",
            "asarray",
            "empty",
            "empty_like",
            "eye",
            "from_dlpack",
            "from_numpy",
            "full",
            "full_like",
            "linspace",
            "ones",
            "ones_like",
            "tensor",
            "zeros",
            "zeros_like",
        )
    },
    **{n: "test_random" for n in ("bernoulli", "normal", "permutation", "rand", "randint", "randn", "seed", "uniform")},
    "dropout": "test_random::test_dropout",
    "astype": "test_elementwise::test_astype",
    "to": "test_transfer / test_creation::test_to_dtype_and_device",
    "index_put": "the index_put rows",
    "result_type": "test_promotion",
    "can_cast": "test_promotion",
    "backward": "test_autodiff",
    "grad": "test_autodiff / test_second_order",
    "value_and_grad": "test_autodiff",
    "no_grad": "test_autodiff",
    "enable_grad": "test_autodiff",
    "set_grad_enabled": "test_autodiff",
    "is_grad_enabled": "test_autodiff",
    "finfo": "test_creation::test_roundtrip_extremes",
    "iinfo": "test_creation::test_roundtrip_extremes",
    "backend_extension": "test_extensions",
    "jit": "test_jit",
    "concatenate": "alias of concat",
    "cumsum": "alias of cumulative_sum",
    "permute": "alias of permute_dims",
    "transpose": "alias of swapaxes",
    "hookimpl": "not a tensor function",
    **{n: "test_array_api" for n in ("isdtype", "broadcast_shapes")},
}


def test_every_op_has_a_spec():
    """Every op in ember.dispatch.OPS is named by some row (or listed with a reason)."""
    known = covered_ops() | set(OTHER_COVERAGE) | set(INTERNAL_OPS) | set(EXTENSIONS)
    missing = sorted(set(OPS) - known)
    assert not missing, (
        f"ops registered with ember.dispatch that no conformance row names: {missing}. Add a row to "
        f"ember_conformance/specs/ (its `ops` names the op), or list the op in INTERNAL_OPS with the reason."
    )


def test_spec_ops_exist():
    """Every op a row claims to cover is registered (catches typos and renamed ops)."""
    names = {name for spec in ALL_SPECS if spec.available is None or not spec.available() for name in spec.ops}
    unknown = sorted(names - set(OPS))
    assert not unknown, f"spec rows name ops that ember.dispatch does not register: {unknown}"


def test_every_differentiable_op_has_a_gradient_check():
    from ember.ops.elementwise import RULES  # dtype rules of the elementwise ops

    def takes_floats(name: str) -> bool:
        accepts = RULES.get(name, (None, False))[0]
        return accepts is None or any(dt.kind == "f" for dt in accepts)

    graded = {name for spec in ALL_SPECS if spec.grad for name in spec.ops}
    want = {name for name, op in OPS.items() if op.differentiable and name not in EXTENSIONS and takes_floats(name)}
    missing = sorted(want - graded - set(OTHER_GRAD_COVERAGE))
    assert not missing, f"differentiable ops without a finite-difference gradient check: {missing}"


def test_public_functions_covered():
    """Every public function of the ember namespace is a spec row or listed in HAND_TESTED."""
    public = {
        name
        for name in em.__all__
        if inspect.isfunction(getattr(em, name, None))
        and getattr(getattr(em, name), "__module__", "").startswith("ember.")
    }
    rows = {spec.name for spec in ALL_SPECS}
    missing = sorted(public - rows - set(HAND_TESTED))
    assert not missing, f"public ember functions that no conformance test exercises: {missing}"


def test_required_primitives(device):
    """A complete backend implements every name in ember.backend.REQUIRED_PRIMITIVES."""
    missing = device.backend.missing_primitives()
    assert not missing, f"{device.backend.name} backend lacks required primitives: {missing}"
    assert REQUIRED_PRIMITIVES <= set(OPS) | {"from_numpy", "to_numpy", "full", "arange", "random_bits"}


def test_capabilities(device):
    """Capabilities list known dtypes and ops, and give a reason for every dtype left out."""
    caps = device.capabilities
    assert caps.dtypes <= set(em.dtypes.EVERY_DTYPE)
    unknown = sorted(caps.native_ops - set(OPS))
    assert not unknown, f"capabilities.native_ops names ops ember does not register: {unknown}"
    for dt in em.dtypes.EVERY_DTYPE:  # complex64 and complex128 too: a backend without them says why
        if dt not in caps.dtypes:
            assert caps.unsupported_dtypes.get(dt.name), f"{dt} is unsupported without a reason in unsupported_dtypes"
    assert isinstance(caps.fusion, bool) and isinstance(caps.graph_replay, bool)


@pytest.mark.parametrize("kind", ["autodiff", "plain"])
def test_device_identity(kind, device):
    """Devices are interned; the autodiff variant shares the backend."""
    other = device.autodiff() if kind == "autodiff" else em.Device(f"{device.kind}:{device.index}")
    assert other.same_hardware(device)
    assert other.backend is device.backend
    assert (other is device) == (kind == "plain")


def test_native_ops_take_their_signatures(device):
    """Every op the backend declares native accepts the op table's native signature: its handles
    positionally and each parameter by keyword (``ember.dispatch.OPS[op].signature``)."""
    import inspect

    backend = device.backend
    bad = []
    for name in sorted(device.capabilities.native_ops):
        op = OPS[name]
        impl = device._impls[name]
        params = op.native_parameters()
        if impl is None or params.variadic == "handles":  # extension kernels take what they define
            continue
        try:
            sig = inspect.signature(impl)
        except (TypeError, ValueError):
            continue  # a builtin without introspection: nothing to check
        handles = ["h"] * len(params.positional)
        if params.variadic:
            handles += ["h", "h"]
        try:
            sig.bind(*handles, **{k: None for k in params.keywords})
            for extra in range(1, len(params.optional) + 1):
                sig.bind(*handles, *["h"] * extra, **{k: None for k in params.keywords})
        except TypeError as exc:
            bad.append(f"{name}: {op.signature!r} does not bind to {type(backend).__name__}.{name}{sig}: {exc}")
    assert not bad, "native implementations that do not take their op's signature:\n" + "\n".join(bad)
