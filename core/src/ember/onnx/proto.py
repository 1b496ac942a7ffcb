"""Reading ONNX files that may be hostile: size limits, protobuf through ``onnx`` only, tensors
decoded with their byte counts checked, external data kept inside the model's folder.

Nothing here executes code from a file: a model is parsed as a protobuf message and its tensors
are read as raw bytes into numpy arrays of a fixed set of dtypes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import MissingDependencyError, OnnxModelError

try:
    import onnx
    from onnx import TensorProto
except ImportError:  # pragma: no cover - the ember[onnx] extra installs it
    raise MissingDependencyError('ember.onnx needs the onnx package: pip install "ember[onnx]"') from None

__all__ = [
    "MAX_MODEL_BYTES",
    "MAX_TENSOR_ELEMENTS",
    "ONNX_TO_NUMPY",
    "read_model",
    "parse_model",
    "to_numpy",
    "external_path",
]

#: the largest model file read (protobuf's own limit is 2 GiB)
MAX_MODEL_BYTES = 2**31 - 1
#: the most elements one tensor (initializer, constant, input) may declare
MAX_TENSOR_ELEMENTS = 2**31

#: ONNX element type -> numpy dtype, for the types ember holds
ONNX_TO_NUMPY: dict[int, np.dtype] = {
    TensorProto.FLOAT: np.dtype(np.float32),
    TensorProto.DOUBLE: np.dtype(np.float64),
    TensorProto.FLOAT16: np.dtype(np.float16),
    TensorProto.INT8: np.dtype(np.int8),
    TensorProto.INT16: np.dtype(np.int16),
    TensorProto.INT32: np.dtype(np.int32),
    TensorProto.INT64: np.dtype(np.int64),
    TensorProto.UINT8: np.dtype(np.uint8),
    TensorProto.UINT16: np.dtype(np.uint16),
    TensorProto.UINT32: np.dtype(np.uint32),
    TensorProto.UINT64: np.dtype(np.uint64),
    TensorProto.BOOL: np.dtype(np.bool_),
}


def type_name(code: int) -> str:
    """The ONNX name of an element type code (``FLOAT``), or the code itself if unknown."""
    try:
        return str(TensorProto.DataType.Name(code))
    except ValueError:
        return str(code)


def read_model(path: str | os.PathLike[str], max_bytes: int = MAX_MODEL_BYTES) -> onnx.ModelProto:
    """Parse the ONNX file at ``path`` (size-checked before it is read)."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise OnnxModelError(
            f"onnx.load: cannot read {str(p)!r} ({exc.strerror}); pass the path of an .onnx file"
        ) from None
    if not p.is_file():
        raise OnnxModelError(f"onnx.load: {str(p)!r} is not a regular file; pass the path of an .onnx file")
    if st.st_size > max_bytes:
        raise OnnxModelError(
            f"onnx.load: {str(p)!r} is {st.st_size} bytes, over the limit of {max_bytes} (max_bytes=); "
            f"store large weights as external data"
        )
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise OnnxModelError(f"onnx.load: cannot read {str(p)!r} ({exc.strerror})") from None
    return parse_model(data, str(p))


def parse_model(data: bytes, where: str = "<bytes>") -> onnx.ModelProto:
    """A ModelProto from serialized bytes; any decoding failure is an OnnxModelError."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise OnnxModelError(f"onnx: expected the bytes of a model, got {type(data).__name__}")
    if len(data) > MAX_MODEL_BYTES:
        raise OnnxModelError(f"onnx: {where} is {len(data)} bytes, over protobuf's limit of {MAX_MODEL_BYTES}")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(bytes(data))
    except Exception as exc:  # protobuf raises DecodeError, and RuntimeError or ValueError on some corruptions
        raise OnnxModelError(f"onnx: {where} is not a valid ONNX protobuf ({type(exc).__name__}: {exc})") from None
    if not model.HasField("graph"):
        raise OnnxModelError(f"onnx: {where} holds no graph; it is not an ONNX model")
    return model


def external_path(base_dir: str | None, location: str, tensor: str) -> Path:
    """The file an external-data ``location`` names, checked to stay inside ``base_dir``.

    Refused: absolute paths, drive letters, ``..`` components, and any path whose resolved form
    (symlinks followed) leaves the model's folder: the ONNX CVE-2024-27318/27319 class.
    """
    if base_dir is None:
        raise OnnxModelError(
            f"onnx: tensor {tensor!r} keeps its data in an external file {location!r}, but the model was not "
            f"loaded from a file; load it with ember.onnx.load(path)"
        )
    if not location or "\x00" in location:
        raise OnnxModelError(f"onnx: tensor {tensor!r} has an empty or malformed external-data location")
    parts = location.replace("\\", "/").split("/")
    if location.startswith(("/", "\\")) or os.path.isabs(location) or (len(location) > 1 and location[1] == ":"):
        raise OnnxModelError(
            f"onnx: tensor {tensor!r}: external-data location {location!r} is an absolute path; "
            f"external data must lie inside the model's folder"
        )
    if ".." in parts:
        raise OnnxModelError(
            f"onnx: tensor {tensor!r}: external-data location {location!r} contains '..'; "
            f"external data must lie inside the model's folder"
        )
    root = Path(base_dir).resolve()
    target = (root / Path(*[q for q in parts if q])).resolve()
    if target != root and root not in target.parents:
        raise OnnxModelError(
            f"onnx: tensor {tensor!r}: external-data location {location!r} resolves outside the model's folder "
            f"(through a symbolic link); external data must lie inside it"
        )
    if not target.is_file():
        raise OnnxModelError(f"onnx: tensor {tensor!r}: external-data file {location!r} does not exist")
    return target


def _count(dims: Any, tensor: str) -> tuple[tuple[int, ...], int]:
    shape = tuple(int(d) for d in dims)
    n = 1
    for d in shape:
        if d < 0:
            raise OnnxModelError(f"onnx: tensor {tensor!r} has a negative dimension in its shape {shape}")
        n *= d
        if n > MAX_TENSOR_ELEMENTS:
            raise OnnxModelError(
                f"onnx: tensor {tensor!r} declares shape {shape}, over ember's limit of {MAX_TENSOR_ELEMENTS} elements"
            )
    return shape, n


def _external_bytes(t: TensorProto, base_dir: str | None, nbytes: int) -> bytes:
    info = {e.key: e.value for e in t.external_data}
    location = info.get("location", "")
    path = external_path(base_dir, location, t.name)
    try:
        offset = int(info.get("offset", "0") or 0)
        length = int(info["length"]) if info.get("length") else nbytes
    except ValueError:
        raise OnnxModelError(f"onnx: tensor {t.name!r}: external-data offset/length are not integers") from None
    if offset < 0 or length < 0:
        raise OnnxModelError(f"onnx: tensor {t.name!r}: external-data offset and length must be >= 0")
    if length != nbytes:
        raise OnnxModelError(
            f"onnx: tensor {t.name!r}: external data length {length} does not match its shape ({nbytes} bytes)"
        )
    size = path.stat().st_size
    if offset + length > size:
        raise OnnxModelError(
            f"onnx: tensor {t.name!r}: external data [{offset}, {offset + length}) runs past the end of "
            f"{location!r} ({size} bytes)"
        )
    with path.open("rb") as f:
        f.seek(offset)
        return f.read(length)


def to_numpy(t: TensorProto, base_dir: str | None = None) -> np.ndarray:
    """A TensorProto's values as a numpy array, every byte count checked first."""
    name = t.name or "<unnamed>"
    dtype = ONNX_TO_NUMPY.get(t.data_type)
    if dtype is None:
        raise OnnxModelError(
            f"onnx: tensor {name!r} has element type {type_name(t.data_type)}, which ember cannot hold; "
            f"ember holds {', '.join(type_name(k) for k in ONNX_TO_NUMPY)}"
        )
    if t.segment.begin or t.segment.end:
        raise OnnxModelError(f"onnx: tensor {name!r} is segmented; ember reads only whole tensors")
    shape, n = _count(t.dims, name)
    nbytes = n * dtype.itemsize
    little = dtype.newbyteorder("<")
    if t.data_location == TensorProto.EXTERNAL:
        raw = _external_bytes(t, base_dir, nbytes)
        return np.frombuffer(raw, dtype=little).astype(dtype).reshape(shape)
    if t.HasField("raw_data"):
        if len(t.raw_data) != nbytes:
            raise OnnxModelError(
                f"onnx: tensor {name!r} has {len(t.raw_data)} bytes of raw data but its shape {shape} and type "
                f"{type_name(t.data_type)} need {nbytes}"
            )
        return np.frombuffer(t.raw_data, dtype=little).astype(dtype).reshape(shape)
    code = t.data_type
    if code == TensorProto.FLOAT:
        values: Any = t.float_data
    elif code == TensorProto.DOUBLE:
        values = t.double_data
    elif code in (TensorProto.INT64,):
        values = t.int64_data
    elif code in (TensorProto.UINT32, TensorProto.UINT64):
        values = t.uint64_data
    else:  # int8/16/32, uint8/16, bool, float16 (as bit patterns) live in int32_data
        values = t.int32_data
    if len(values) != n:
        raise OnnxModelError(f"onnx: tensor {name!r} holds {len(values)} values but its shape {shape} needs {n}")
    if code == TensorProto.FLOAT16:
        return np.array(values, dtype=np.uint16).view(np.float16).reshape(shape)
    wide = np.uint64 if code == TensorProto.UINT64 else (np.float64 if dtype.kind == "f" else np.int64)
    return np.array(values, dtype=wide).astype(dtype).reshape(shape)
