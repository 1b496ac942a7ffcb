"""CUDA graph capture and replay through CuPy: the primitive ``em.jit`` replays on cuda.

``backend.capture(fn, *inputs)`` runs ``fn(*inputs)`` once to warm the memory pool (so that
capture allocates nothing new from the driver), then records the kernels a second call queues
into a CUDA graph. ``graph.replay(*inputs)`` copies new values into the captured input buffers
and launches the whole graph at once: one launch instead of one per op. As with PyTorch's CUDA
graphs the outputs live in the captured buffers and a replay overwrites them: copy what you keep.
CuPy 14 refuses cuBLAS calls during capture; ember-cuda's own float32/float64 matmul calls cuBLAS
directly (blas.py), so a step with matmuls is captured too. What cannot be captured (CuPy's
matmul of other dtypes, a host sync) makes ``compile_replay`` return None with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.errors import InvalidArgumentError, ShapeError
from ember.memory import BufferPool

from .memory import DevicePools
from .streams import use_stream

__all__ = ["CapturedGraph", "capture", "compile_replay"]


class CapturedGraph:
    """A recorded sequence of kernels with its input and output buffers."""

    def __init__(self, graph: Any, stream: Any, inputs: tuple[Any, ...], outputs: Any, pool: BufferPool[Any]) -> None:
        self.pool = pool  # the graph's buffers: kept while the graph lives
        self._graph = graph
        self._stream = stream
        self.inputs = inputs
        self.outputs = outputs

    def replay(self, *inputs: Any) -> Any:
        """Write ``inputs`` (CuPy arrays of the captured shapes and dtypes) into the captured
        buffers, run the graph, and return the captured outputs (overwritten by each replay)."""
        if inputs and len(inputs) != len(self.inputs):
            raise InvalidArgumentError(
                f"replay(*inputs): the graph was captured with {len(self.inputs)} inputs, got {len(inputs)}"
            )
        with use_stream(self._stream):
            for i, (dst, src) in enumerate(zip(self.inputs, inputs)):
                if src.shape != dst.shape or src.dtype != dst.dtype:
                    raise ShapeError(
                        f"replay input {i}: captured as {dst.dtype}{list(dst.shape)}, got "
                        f"{src.dtype}{list(src.shape)}; capture a new graph for new shapes"
                    )
                dst[...] = src
            self._graph.launch(self._stream)
        self._stream.synchronize()
        return self.outputs


def capture(cp: Any, pools: DevicePools, index: int, fn: Callable[..., Any], inputs: tuple[Any, ...]) -> CapturedGraph:
    """Record ``fn(*inputs)`` (CuPy arrays in, CuPy arrays out) as a CUDA graph; every buffer it
    touches comes from a pool of the graph's own, which the graph keeps."""
    stream = cp.cuda.Stream(non_blocking=True)
    cp.cuda.get_current_stream().synchronize()
    with pools.private(index) as pool, use_stream(stream):
        static = tuple(x.copy() for x in inputs)
        fn(*static)  # warm-up: kernels compiled, pool buffers of every size cached
        stream.synchronize()
        stream.begin_capture()
        try:
            outputs = fn(*static)
        finally:
            graph = stream.end_capture()
    return CapturedGraph(graph, stream, static, outputs, pool)


def compile_replay(cp: Any, pools: DevicePools, index: int, program: Any) -> Callable[[list[Any]], None] | None:
    """An ``em.jit`` capture (:class:`ember.lazy.jit.Program`) as one CUDA graph, or None when
    it cannot be captured (CuPy's cuBLAS wrappers under capture, a host sync): then ember replays the
    step list. The graph reads its inputs from static buffers, refilled before each launch; the
    results and updated state are copied out of the graph's buffers, which the next launch reuses."""
    from ember.lazy.jit import run_steps  # noqa: PLC0415 - only when a capture is compiled

    dynamic = program.dynamic()
    needed = program.needed()
    stream = cp.cuda.Stream(non_blocking=True)
    cp.cuda.get_current_stream().synchronize()
    try:
        with pools.private(index) as pool, use_stream(stream):
            static = {s: cp.array(program.sample[s], copy=True) for s in dynamic}
            base: list[Any] = [None] * program.n
            for s, h in program.consts:
                base[s] = h
            for s, buf in static.items():
                base[s] = buf
            run_steps(program.steps, list(base))  # warm-up: kernels compiled, pool buffers cached
            stream.synchronize()
            vals = list(base)
            stream.begin_capture()
            try:
                run_steps(program.steps, vals)
            finally:
                graph = stream.end_capture()
    except Exception as exc:  # not capturable: the step list replays instead, and describe() says why
        program.native_note = f"no CUDA graph: {type(exc).__name__}: {exc}"
        return None
    outputs = {s: vals[s] for s in needed}

    def replay(into: list[Any]) -> None:
        with use_stream(stream):
            for s, buf in static.items():
                buf[...] = into[s]
            graph.launch(stream)
            for s, out in outputs.items():
                into[s] = out.copy()
        stream.synchronize()

    replay.pool = pool  # type: ignore[attr-defined]  # the graph's buffers live as long as the replay
    return replay
