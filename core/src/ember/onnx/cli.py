"""``ember onnx``: ``info MODEL`` (what a file holds and whether ember imports it), ``ops``."""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from ..errors import EmberError
from . import proto
from .graph import decode_graph
from .registry import supported_ops

__all__ = ["main"]


def _shape(v: object) -> str:
    t = v.type.tensor_type  # type: ignore[attr-defined]
    if not v.type.HasField("tensor_type"):  # type: ignore[attr-defined]
        return v.type.WhichOneof("value") or "?"  # type: ignore[attr-defined]
    dims = [d.dim_param or str(d.dim_value) if (d.dim_param or d.HasField("dim_value")) else "?" for d in t.shape.dim]
    return f"{proto.type_name(t.elem_type)}[{', '.join(dims)}]"


def cmd_info(path: str) -> int:
    try:
        model = proto.read_model(path)
    except EmberError as exc:
        print(f"error: {exc}")
        return 1
    g = model.graph
    opsets = ", ".join(f"{imp.domain or 'ai.onnx'} {imp.version}" for imp in model.opset_import)
    print(f"{path}: IR version {model.ir_version}, producer {model.producer_name or '-'} {model.producer_version}")
    print(f"opsets: {opsets or '-'}")
    inits = {t.name for t in g.initializer}
    for v in g.input:
        if v.name not in inits:
            print(f"input   {v.name}: {_shape(v)}")
    for v in g.output:
        print(f"output  {v.name}: {_shape(v)}")
    count = 0
    for t in g.initializer:
        n = 1
        for d in t.dims:
            n *= d
        count += n
    print(f"{len(g.initializer)} initializers, {count:,} values")
    ops = Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}" for n in g.node)
    print(f"{len(g.node)} nodes: " + ", ".join(f"{op} x{k}" for op, k in ops.most_common()))
    try:
        decode_graph(model, str(Path(path).resolve().parent))
    except EmberError as exc:
        print(f"ember cannot import it: {exc}")
        return 1
    print("ember imports it: em.onnx.load(path, device=...)")
    return 0


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="ember onnx", description="ONNX import and export.")
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("info", help="inputs, outputs, opsets and ops of a model, and whether ember imports it")
    p.add_argument("model", help="path of an .onnx file")
    sub.add_parser("ops", help="the ONNX ops ember imports")
    args = parser.parse_args(list(argv))
    if args.command == "info":
        return cmd_info(args.model)
    if args.command == "ops":
        names = supported_ops()
        print(f"{len(names)} ONNX op types ember imports:")
        print("\n".join(names))
        return 0
    parser.print_help()
    return 0
