"""Compile CUDA C the way CuPy's RawKernel does (NVRTC), without a GPU: the ``nvidia-cuda-nvrtc``
wheel's library through ctypes. Catches what plain nvcc accepts and NVRTC does not (no C
headers, so no ``INFINITY``)."""

from __future__ import annotations

import ctypes
import glob
import os


def library() -> ctypes.CDLL | None:
    """libnvrtc from the nvidia-cuda-nvrtc wheel, or None when it is not installed."""
    try:
        import nvidia
    except ImportError:
        return None
    for root in nvidia.__path__:
        for path in sorted(glob.glob(os.path.join(root, "**", "libnvrtc.so*"), recursive=True)):
            if "builtins" not in path:
                return ctypes.CDLL(path)
    return None


def compile_log(lib: ctypes.CDLL, source: str, arch: str = "sm_90", options: tuple[str, ...] = ()) -> tuple[bool, str]:
    """(compiled, NVRTC's log) for ``source``, with ``options`` besides the architecture."""
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"kernel.cu", 0, None, None)
    if rc:
        return False, f"nvrtcCreateProgram failed ({rc})"
    flags = [f"--gpu-architecture={arch}", *options]
    opts = (ctypes.c_char_p * len(flags))(*(f.encode() for f in flags))
    rc = lib.nvrtcCompileProgram(prog, len(flags), opts)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return rc == 0, log.value.decode(errors="replace")
