"""Real architectures for the ONNX import tests: built in PyTorch with random weights, exported to
ONNX, run by onnxruntime, saved with their inputs and onnxruntime's outputs.

The vision models are torchvision's own definitions (``torchvision.models``); the BERT encoder and
the GPT-2 decoder are ``transformers`` models made from small configs; the LSTM and the U-Net are
written here. Sizes are kept small (64x64 images, a 2-layer ViT, 2-layer text models) so the whole
set builds in seconds. The files are large (ResNet-18 alone is 45 MB), so they are not in git:
``test_onnx_models.py`` builds them into a cache folder keyed by this file's contents and the
package versions, and rebuilds only when those change.

Each model is exported twice, by torch's TorchScript exporter (``dynamo=False``, opset 17) and by
its ``torch.export``-based one (``dynamo=True``, torch's default, opset 18, needs onnxscript): the
two write different graphs of the same model. Run by hand: ``python core/tests/onnx_models.py
OUT_DIR [CASE ...]`` writes ``NAME-EXPORTER.onnx`` and ``.npz`` (``in_*`` arrays are the inputs
in graph order, ``out_*`` onnxruntime's outputs) for every case.

torchvision from PyPI is built against the CUDA torch; beside the CPU torch 2.13 its compiled ops
(``torchvision::nms`` and friends) do not load, and its import fails while registering their
fake kernels. The models use none of those ops, so :func:`import_torchvision` imports the
package with those two registration modules stubbed out; the model definitions are unchanged.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import sys
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np

#: the TorchScript exporter's opset, and the dynamo (torch.export) exporter's, whose lowest is 18
OPSET = 17
DYNAMO_OPSET = 18
#: both of torch's exporters: ``torch.onnx.export(dynamo=False)`` and ``dynamo=True`` (torch's default)
EXPORTERS = ("torchscript", "dynamo")
#: models exported with their BatchNormalization nodes kept (the rest have them folded into convs)
KEEP_BATCH_NORM = ("unet_small",)
#: every model this file builds, in order
NAMES = [
    "resnet18",
    "mobilenet_v3_small",
    "efficientnet_b0",
    "vit_tiny",
    "bert_encoder",
    "gpt2_decoder",
    "lstm_tagger",
    "unet_small",
]
_PACKAGES = ("torch", "torchvision", "transformers", "onnx", "onnxruntime", "onnxscript", "numpy")


def import_torchvision():
    """``torchvision`` with its compiled-op registrations skipped (see the module docstring)."""
    if "torchvision" not in sys.modules:
        try:
            import torchvision  # noqa: F401  (a torchvision built for this torch imports as is)
        except RuntimeError:
            for key in list(sys.modules):
                if key.startswith("torchvision"):
                    del sys.modules[key]
            for name in ("torchvision._meta_registrations", "torchvision._autograd_registrations"):
                sys.modules[name] = types.ModuleType(name)
    import torchvision

    return torchvision


def cache_key() -> str:
    """A digest of this file and the versions of the packages that build the models."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    for pkg in _PACKAGES:
        try:
            h.update(f"{pkg}={importlib.metadata.version(pkg)};".encode())
        except importlib.metadata.PackageNotFoundError:
            h.update(f"{pkg}=none;".encode())
    return h.hexdigest()[:16]


def _randomize_norm_stats(model, gen) -> None:
    """Batch-norm running statistics away from (0, 1), so the import's use of them is checked."""
    import torch

    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) * 0.5 + 0.75)
            if m.affine:
                m.weight.data.copy_(torch.rand(m.weight.shape, generator=gen) * 0.5 + 0.75)
                m.bias.data.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)


def _reset_linears(model):
    """torch's default init for every Linear: torchvision starts ViT's head at zero and
    MobileNetV3's classifier at std 0.01, which would leave outputs too small to compare."""
    import torch

    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            m.reset_parameters()
    return model


def _image(gen, size=64):
    import torch

    return (torch.randn((2, 3, size, size), generator=gen),)


def _resnet18(gen):
    tv = import_torchvision()
    return tv.models.resnet18(num_classes=10), _image(gen), ["image"], ["logits"]


def _mobilenet_v3_small(gen):
    tv = import_torchvision()
    return _reset_linears(tv.models.mobilenet_v3_small(num_classes=10)), _image(gen), ["image"], ["logits"]


def _efficientnet_b0(gen):
    tv = import_torchvision()
    return tv.models.efficientnet_b0(num_classes=10), _image(gen), ["image"], ["logits"]


def _vit_tiny(gen):
    tv = import_torchvision()
    model = tv.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=3, hidden_dim=96, mlp_dim=192, num_classes=10
    )
    return _reset_linears(model), _image(gen, 32), ["image"], ["logits"]


def _token_inputs(gen, vocab, batch=2, seq=12):
    import torch

    ids = torch.randint(0, vocab, (batch, seq), generator=gen)
    mask = torch.ones((batch, seq), dtype=torch.int64)
    mask[1, seq - 4 :] = 0  # the second sequence is padded: the attention mask is used
    return ids, mask


class _HiddenStates:
    """Wraps a transformers model so its traced outputs are plain tensors."""

    @staticmethod
    def wrap(model, key):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = model

            def forward(self, input_ids, attention_mask):
                return self.inner(input_ids=input_ids, attention_mask=attention_mask)[key]

        return Wrapped()


def _bert_encoder(gen):
    import transformers

    cfg = transformers.BertConfig(
        vocab_size=120,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        attn_implementation="eager",
    )
    model = _HiddenStates.wrap(transformers.BertModel(cfg, add_pooling_layer=False), "last_hidden_state")
    return model, _token_inputs(gen, cfg.vocab_size), ["input_ids", "attention_mask"], ["hidden"]


def _gpt2_decoder(gen):
    import transformers

    cfg = transformers.GPT2Config(
        vocab_size=120,
        n_embd=64,
        n_layer=2,
        n_head=4,
        n_positions=32,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        use_cache=False,
        attn_implementation="eager",
    )
    model = _HiddenStates.wrap(transformers.GPT2LMHeadModel(cfg), "logits")
    return model, _token_inputs(gen, cfg.vocab_size), ["input_ids", "attention_mask"], ["logits"]


def _lstm_tagger(gen):
    import torch

    class Tagger(torch.nn.Module):
        """Embedding, a 2-layer bidirectional LSTM and a linear tag head."""

        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(50, 16)
            self.lstm = torch.nn.LSTM(16, 24, num_layers=2, bidirectional=True, batch_first=True)
            self.head = torch.nn.Linear(48, 7)

        def forward(self, tokens):
            y, _ = self.lstm(self.embed(tokens))
            return self.head(y)

    tokens = torch.randint(0, 50, (3, 10), generator=gen)
    return Tagger(), (tokens,), ["tokens"], ["tags"]


def _unet_small(gen):
    import torch
    from torch import nn

    def block(cin, cout):
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
        )

    class UNet(nn.Module):
        """Two down steps (max pool), a bottleneck, two up steps (transposed conv) with skips."""

        def __init__(self, cin=3, classes=4, w=8):
            super().__init__()
            self.enc1, self.enc2, self.mid = block(cin, w), block(w, 2 * w), block(2 * w, 4 * w)
            self.pool = nn.MaxPool2d(2)
            self.up2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, stride=2)
            self.dec2 = block(4 * w, 2 * w)
            self.up1 = nn.ConvTranspose2d(2 * w, w, 2, stride=2)
            self.dec1 = block(2 * w, w)
            self.out = nn.Conv2d(w, classes, 1)

        def forward(self, x):
            e1 = self.enc1(x)
            e2 = self.enc2(self.pool(e1))
            m = self.mid(self.pool(e2))
            d2 = self.dec2(torch.cat([self.up2(m), e2], dim=1))
            d1 = self.dec1(torch.cat([self.up1(d2), e1], dim=1))
            return self.out(d1)

    return UNet(), _image(gen, 32), ["image"], ["mask_logits"]


BUILDERS: dict[str, Callable] = {
    "resnet18": _resnet18,
    "mobilenet_v3_small": _mobilenet_v3_small,
    "efficientnet_b0": _efficientnet_b0,
    "vit_tiny": _vit_tiny,
    "bert_encoder": _bert_encoder,
    "gpt2_decoder": _gpt2_decoder,
    "lstm_tagger": _lstm_tagger,
    "unet_small": _unet_small,
}


def case_names() -> list[str]:
    """Every file this builder writes: ``NAME-EXPORTER`` for each model and exporter."""
    return [f"{name}-{exporter}" for name in NAMES for exporter in EXPORTERS]


def build_one(case: str, out_dir: Path) -> None:
    """Export ``NAME-EXPORTER`` to ``out_dir/CASE.onnx``; its inputs and onnxruntime's outputs to ``CASE.npz``."""
    import onnx
    import onnxruntime as ort
    import torch

    name, exporter = case.rsplit("-", 1)
    if name not in BUILDERS or exporter not in EXPORTERS:
        raise ValueError(f"onnx_models: unknown case {case!r}; the cases are {case_names()}")
    gen = torch.Generator().manual_seed(sum(map(ord, name)))
    torch.manual_seed(sum(map(ord, name)))
    model, inputs, in_names, out_names = BUILDERS[name](gen)
    model.eval()
    path = out_dir / f"{case}.onnx"
    with torch.no_grad():
        _randomize_norm_stats(model, gen)
        if exporter == "torchscript":
            # PRESERVE keeps BatchNormalization nodes (eval mode) where EVAL would fold them into convs
            keep_bn = name in KEEP_BATCH_NORM
            mode = torch.onnx.TrainingMode.PRESERVE if keep_bn else torch.onnx.TrainingMode.EVAL
            torch.onnx.export(
                model, inputs, str(path), opset_version=OPSET, input_names=in_names, output_names=out_names,
                dynamo=False, training=mode, do_constant_folding=not keep_bn,
            )  # fmt: skip
        else:
            torch.onnx.export(
                model, inputs, str(path), opset_version=DYNAMO_OPSET, input_names=in_names, output_names=out_names,
                dynamo=True, verbose=False,
            )  # fmt: skip
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    graph_inputs = [i.name for i in sess.get_inputs()]
    feeds = {n: x.numpy() for n, x in zip(in_names, inputs) if n in graph_inputs}
    outs = sess.run(None, feeds)
    arrays = {f"in_{i}_{n}": feeds[n] for i, n in enumerate(graph_inputs)}
    arrays.update({f"out_{i}": o for i, o in enumerate(outs)})
    np.savez(out_dir / f"{case}.npz", **arrays)


def build(out_dir: str | Path, cases: list[str] | None = None) -> Path:
    """Build every case (or ``cases``) into ``out_dir/<cache_key>/``, unless already there."""
    folder = Path(out_dir) / cache_key()
    folder.mkdir(parents=True, exist_ok=True)
    done_file = folder / "built.json"
    done = json.loads(done_file.read_text()) if done_file.exists() else []
    for case in cases or case_names():
        if case in done and (folder / f"{case}.onnx").exists() and (folder / f"{case}.npz").exists():
            continue
        build_one(case, folder)
        done.append(case)
        done_file.write_text(json.dumps(sorted(set(done))))
    return folder


def load_case(folder: Path, case: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The inputs (graph order) and onnxruntime's outputs saved for ``case``."""
    with np.load(folder / f"{case}.npz") as z:
        ins = sorted((k for k in z.files if k.startswith("in_")), key=lambda k: int(k.split("_")[1]))
        outs = sorted((k for k in z.files if k.startswith("out_")), key=lambda k: int(k.split("_")[1]))
        return [z[k] for k in ins], [z[k] for k in outs]


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python core/tests/onnx_models.py OUT_DIR [NAME-EXPORTER ...]")
    where = build(sys.argv[1], sys.argv[2:] or None)
    print(f"built {', '.join(sys.argv[2:] or case_names())} in {where}")
