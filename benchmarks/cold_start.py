"""Time to the first W2 training step of a new process, cold and warm, with the program cache's counters.

    python -m benchmarks.cold_start --device opencl:0            # CPU sizes (batch 128, hidden 1024)
    python -m benchmarks.cold_start --device opencl:0 --gpu      # GPU sizes (batch and hidden 4096)
    python -m pytest -p benchmarks.cold_start --pyargs ember_conformance --ember-device=opencl:0 -k ...
    python -m benchmarks.cold_start --device opencl:0 --probe    # build cost by program size, threads

The first form runs three child processes over one temporary cache folder: ``cold`` (ember's
kernel cache and the driver's own caches empty), ``warm`` (both kept from the cold run) and
``warm-ember`` (ember's cache kept, the driver's emptied: PoCL's kernel cache, NVIDIA's
compute cache), and on request ``cold-ember`` (ember's cache emptied, the driver's kept: with
``--model-build-s``, builds cost about the modelled time). Each child prints one JSON line:
seconds for ``import ember``, opening the device (``open_s``, and its parts: see
``_open_parts``), making W2's inputs (``inputs_s``: numpy's random arrays and their upload; with
``--inputs ember``, ember's own on the device), the first step (to the loss on the host), the
second step, and the program cache's counters after the first step (``builds``, ``disk_loads``,
``build_s``, ``binary_s``, ``load_s``; seconds summed over the build threads). ``numpy_inputs_s``
is numpy making the inputs alone (timed again after the steps, whichever road ran), so with numpy's
road ``first_result_s - numpy_inputs_s`` is what ember itself took. The first-step
clock starts when this module starts, after ``benchmarks/__init__`` imported numpy and the
workloads; two figures count from the process's birth: ``spawn_to_first_result_s`` (wall, from just before the parent
started the child: interpreter start-up and numpy included) and ``first_result_cpu_s`` (the CPU
time of every thread of the process at the first result: less swayed than the wall clock by
other work on a shared machine).
``modules`` counts the modules imported by the first result, ``no_bytecode`` those of ember,
its plugins and pyopencl/pytools that had no cached bytecode (``PYTHONDONTWRITEBYTECODE`` with no
``__pycache__``, or a first run: each costs its compile, ~0.1-0.2 s in all for ember and the backend).
``--build-threads N`` sets ``EMBER_OPENCL_BUILD_THREADS`` in the children (0: every program
builds on the calling thread before its first launch, the default). ``--as-gpu`` tells a CPU
device's runtime it is a GPU (grid-stride launches, the tiled matmul, no mid-step read-backs): the
GPU's set of programs (19 for W2) on PoCL.
``--no-warm-up`` sets ``ember_opencl.runtime.WARM_UP = False`` (no compiler warm-up at device open);
``--head-start`` / ``--no-head-start`` set ``runtime.HEAD_START`` (the warm-up builds the generic
float32 GEMMs, or a one-line program: the default, as the head start was slower on an H100).
``--inputs ember`` makes W2's inputs the user's way instead, on the device (``ember.nn.init`` for the
parameters, ``em.randn`` / ``em.randint`` for the batch: :func:`ember_inputs`), so ``inputs_s`` is
that road's time (its random programs built or loaded included); ``numpy_inputs_s`` is still timed
after the steps, and every JSON line says which road it took (``"inputs"``).
``--build-processes N`` sets ``EMBER_OPENCL_BUILD_PROCESSES`` (worker processes compiling programs).
``--bytecode`` compiles ember's, the plugins' and pyopencl's modules to bytecode first, as ``pip
install`` does, and runs the children without ``PYTHONDONTWRITEBYTECODE`` (the bytecode stays:
later runs without the flag use it too, so run those first).
``--model-build-s S`` adds S seconds of sleep to every program build (a model of a compiler that
takes S a program and runs builds side by side; e.g. 0.18 for NVIDIA's, measured serially): on
PoCL, whose compiler takes a lock, it shows what background builds save where a driver does not.
As a pytest plugin (``-p benchmarks.cold_start``) it prints the same counters for
the device under test when the session ends, and writes them to ``--cold-start-json FILE``.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()  # before importing ember: the first-step clock starts here

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from typing import Any  # noqa: E402

SIZES = {"cpu": {"batch": 128, "hidden": 1024}, "gpu": {"batch": 4096, "hidden": 4096}}
RUNS = ("cold", "warm", "warm-ember", "cold-ember")


def _program_stats(device: Any) -> dict[str, Any]:
    """The OpenCL program cache's counters (``{}`` on a backend without them), seconds rounded."""
    stats = device.memory_stats().get("extra", {}).get("kernel_cache", {})
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in stats.items() if k != "disk"}


def _family_after(value: int | None) -> None:
    """Set ``ember_opencl.runtime.FAMILY_AFTER`` (when sibling kernels are built as one program;
    negative: never, ``FAMILIES = False``)."""
    if value is not None:
        from ember_opencl import runtime

        runtime.FAMILIES = value >= 0
        runtime.FAMILY_AFTER = max(value, 0)


def _model_builds(seconds: float) -> None:
    """Every program build sleeps ``seconds`` more (the GIL released, as a driver's compiler does)."""
    from ember_opencl.cache import ProgramCache

    build = ProgramCache._build

    def slower(self: Any, source: str, options: str) -> Any:
        time.sleep(seconds)
        return build(self, source, options)

    ProgramCache._build = slower  # type: ignore[method-assign]


def _open_parts(spec: str) -> dict[str, float]:
    """What opening a device costs before its context, part by part (the same work
    ``Device(spec)`` does next, done first to time it): ``plugins_s`` finding the installed ember
    plugins and importing the backend plugins' registration modules, ``backend_import_s`` the
    backend's modules and its library (pyopencl, ...), on OpenCL ``platforms_s`` listing the
    platforms and their devices (what is left of the driver's start-up, which runs on a thread while
    the backend's modules import: ``ember_opencl.driver_start``; ``EMBER_OPENCL_EARLY_DRIVER=0``: all
    of it); ``context_s`` is the rest of the opening."""
    from ember.plugins import get_registry

    kind = spec.split(":")[0]
    parts = {}
    start = time.perf_counter()
    registry = get_registry()
    registry.discover_backends()  # what opening a device discovers (the extensions wait)
    parts["plugins_s"] = time.perf_counter() - start
    start = time.perf_counter()
    registry.backend_class(kind)
    parts["backend_import_s"] = time.perf_counter() - start
    if kind == "opencl":
        start = time.perf_counter()
        from ember_opencl.runtime import device_list

        device_list()
        parts["platforms_s"] = time.perf_counter() - start
    return parts


def _as_gpu(dev: Any) -> None:
    """Make an OpenCL CPU device's runtime take a GPU's paths (as plugins/opencl/tests/test_gpu_paths.py
    does): grid-stride launches, the tiled matmul, no mid-step read-backs; and the warm-up a GPU's
    runtime starts when it opens cold (``runtime.WARM_UP``: the head-start programs)."""
    rt = dev.backend.rt
    rt.is_cpu, rt.compute_units = False, 4
    dev.backend.cheap_readback = False
    rt._warm_up()


def ember_inputs(device: Any, size: dict[str, int]) -> tuple[Any, Any, dict[str, Any]]:
    """W2's batch, labels and parameters made the user's way, on ``device``: the parameters by
    ``ember.nn.init`` as ``nn.Linear`` makes its own (uniform on +-1/sqrt(fan_in), weights and biases),
    the batch by ``em.randn`` and the labels by ``em.randint`` (nothing made on the host, nothing
    uploaded; ``import ember.nn`` is part of it). Other values than the numpy road's, so another loss."""
    import ember as em
    from benchmarks import w2_mlp
    from benchmarks.harness import SEED
    from ember.nn import init

    dev = device.autodiff()
    stream = em.random.key(SEED)  # one stream of its own: the same inputs in every run
    n, h = size["batch"], size["hidden"]
    x = em.randn((n, w2_mlp.IN_FEATURES), device=dev, key=stream)
    y = em.randint(0, w2_mlp.CLASSES, (n,), device=dev, key=stream)
    params = {}
    for i, (fan_in, fan_out) in enumerate(((w2_mlp.IN_FEATURES, h), (h, h), (h, w2_mlp.CLASSES)), start=1):
        bound = fan_in**-0.5
        for name, shape in ((f"w{i}", (fan_in, fan_out)), (f"b{i}", (fan_out,))):
            params[name] = init.uniform_(em.empty(shape, device=dev), -bound, bound, key=stream).requires_grad_()
    return x, y, params


def w2_case(device: Any, x: Any, y: Any, params: dict[str, Any]) -> Any:
    """W2's training step (:func:`benchmarks.w2_mlp.ember_step`) over tensors already on ``device``
    (benchmarks/tests/test_cold_start.py checks its loss against numpy's step)."""
    from benchmarks import w2_mlp
    from benchmarks.harness import Case

    step = w2_mlp.ember_step(x, y, params)
    return Case(step, device.synchronize, lambda: {})


def _bytecode_misses() -> int:
    """How many imported modules of ember, its plugins, pyopencl and pytools have no cached bytecode."""
    import importlib.util

    prefixes = ("ember", "pyopencl", "pytools")
    missing = 0
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not name.startswith(prefixes) or not path or not path.endswith(".py"):
            continue
        missing += not os.path.exists(importlib.util.cache_from_source(path))
    return missing


def child(
    spec: str,
    size: str,
    family_after: int | None,
    model_build_s: float = 0.0,
    as_gpu: bool = False,
    warm_up: bool = True,
    head_start: bool | None = None,
    inputs: str = "numpy",
) -> None:
    """One new process: import, open the device, W2's inputs (``inputs``: "numpy", made on the host
    and uploaded, or "ember", made on the device: :func:`ember_inputs`), two W2 steps; prints one JSON line."""
    import ember as em

    _family_after(family_after)
    if not warm_up or head_start is not None:
        from ember_opencl import runtime

        runtime.WARM_UP = warm_up
        if head_start is not None:
            runtime.HEAD_START = head_start
    if model_build_s:
        _model_builds(model_build_s)
    t_import = time.perf_counter()
    opening = _open_parts(spec)
    dev = em.Device(spec)
    dev.synchronize()  # creates the backend (context, queue) now, not inside the first step
    t_open = time.perf_counter()
    if as_gpu:
        _as_gpu(dev)
    opening["context_s"] = t_open - t_import - sum(opening.values())
    from benchmarks import w2_mlp

    if inputs == "ember":
        case = w2_case(dev, *ember_inputs(dev, SIZES[size]))
    else:
        case = w2_mlp.ember(dev, SIZES[size])
    dev.synchronize()
    t_inputs = time.perf_counter()
    loss = case.step()
    value = float(loss.item())
    t_first = time.perf_counter()
    cpu_first = time.process_time()
    spawned = os.environ.get("EMBER_COLD_START_SPAWNED")
    since_spawn = time.time() - float(spawned) if spawned else float("nan")
    modules = len(sys.modules)
    first_stats = _program_stats(dev)
    case.step().item()
    t_second = time.perf_counter()
    start = time.perf_counter()
    w2_mlp.inputs(SIZES[size])
    numpy_inputs = time.perf_counter() - start
    out = {
        "import_s": t_import - T0,
        "open_s": t_open - t_import,
        "inputs_s": t_inputs - t_open,
        "first_step_s": t_first - t_inputs,
        "second_step_s": t_second - t_first,
        "first_result_s": t_first - T0,
        "numpy_inputs_s": numpy_inputs,
        "first_result_cpu_s": cpu_first,
        "spawn_to_first_result_s": since_spawn,
    }
    out = {k: round(v, 3) for k, v in {**out, **opening}.items()}
    counts = {"modules": modules, "no_bytecode": _bytecode_misses()}
    print(json.dumps({"inputs": inputs, **out, "loss": value, **counts, **first_stats}), flush=True)


def probe(spec: str) -> None:
    """What one build costs on this driver: programs of 1, 4, 8 and 16 kernels (the unary float32
        ops), built from source, read back as a binary and loaded from it; then 8 one-kernel programs
        built one after another and in 2, 4 and 8 threads, and one after another with the optimizer off
    (``-cl-opt-disable``, NVIDIA's ``-cl-nv-opt-level=0``). One JSON line per measurement."""
    from concurrent.futures import ThreadPoolExecutor

    import pyopencl as cl

    import ember as em
    from ember_opencl.codegen import Layout, elementwise_sources
    from ember_opencl.elementwise import UNARY_GROUPS, unary_program

    rt = em.Device(spec).backend.rt
    ops = [op for group in UNARY_GROUPS[2:6] for op in group][:16]
    layout = Layout(1, ("c",), ("c",), grid_stride=not rt.is_cpu)
    tag = [int(time.time())]

    def build(names: list[str], extra: str = "") -> tuple[Any, float]:
        source, _, _ = elementwise_sources([unary_program(op, "float32", "float32") for op in names], layout, names)
        tag[0] += 1  # a build option of its own: the driver's own cache cannot answer
        options = f"{rt.options} {extra} -D EMBER_PROBE={tag[0]}"
        start = time.perf_counter()
        prg = cl.Program(rt.context, source).build(options=options, devices=[rt.device])
        return prg, time.perf_counter() - start

    build(ops[:1])  # the compiler's first use in the process
    for n in (1, 4, 8, 16):
        prg, built = build(ops[:n])
        start = time.perf_counter()
        (binary,) = prg.get_info(cl.program_info.BINARIES)
        read = time.perf_counter() - start
        start = time.perf_counter()
        cl.Program(rt.context, [rt.device], [binary]).build(devices=[rt.device])
        loaded = time.perf_counter() - start
        row = {"kernels": n, "build_s": built, "binary_s": read, "load_s": loaded, "binary_bytes": len(binary)}
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    singles = [[op] for op in ops[:8]]
    start = time.perf_counter()
    for names in singles:
        build(names)
    serial = time.perf_counter() - start
    timing: dict[str, Any] = {"builds": 8, "serial_s": round(serial, 3)}
    for threads in (2, 4, 8):
        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(build, singles))
        timing[f"threads_{threads}_s"] = round(time.perf_counter() - start, 3)
    print(json.dumps(timing), flush=True)
    # what the optimizer's share of a build is: 8 one-kernel programs with optimisation off (a fast
    # first build, the optimised one later, would save that share of a cold start)
    for extra in ("", "-cl-opt-disable", "-cl-nv-opt-level=0"):
        start = time.perf_counter()
        try:
            for names in singles:
                build(names, extra)
        except cl.Error as exc:
            print(json.dumps({"options": extra, "error": str(exc)[:200]}), flush=True)
            continue
        serial = round(time.perf_counter() - start, 3)
        print(json.dumps({"options": extra or "(default)", "builds": 8, "serial_s": serial}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="opencl:0")
    ap.add_argument("--gpu", action="store_true", help="GPU sizes (batch and hidden 4096)")
    ap.add_argument("--runs", default=",".join(RUNS[:3]), help=f"which of {', '.join(RUNS)} to run, in order")
    ap.add_argument(
        "--family-after", type=int, default=None, help="set ember_opencl.runtime.FAMILY_AFTER (-1: no families)"
    )
    ap.add_argument("--build-threads", type=int, default=None, help="EMBER_OPENCL_BUILD_THREADS in the children")
    ap.add_argument("--build-processes", type=int, default=None, help="EMBER_OPENCL_BUILD_PROCESSES in the children")
    ap.add_argument("--bytecode", action="store_true", help="children with bytecode, compiled first (see above)")
    ap.add_argument("--model-build-s", type=float, default=0.0, help="sleep this long more in every program build")
    ap.add_argument("--no-warm-up", action="store_true", help="ember_opencl.runtime.WARM_UP = False (see above)")
    ap.add_argument("--head-start", action="store_true", help="ember_opencl.runtime.HEAD_START = True (see above)")
    ap.add_argument("--no-head-start", action="store_true", help="ember_opencl.runtime.HEAD_START = False (see above)")
    ap.add_argument("--as-gpu", action="store_true", help="a CPU device takes a GPU's paths (see above)")
    ap.add_argument(
        "--inputs", choices=("numpy", "ember"), default="numpy", help="how W2's inputs are made (see above)"
    )
    ap.add_argument("--probe", action="store_true", help="time builds by program size and in threads instead")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    size = "gpu" if args.gpu else "cpu"
    if args.probe:
        probe(args.device)
        return
    if args.child:
        child(
            args.device, size, args.family_after, args.model_build_s, args.as_gpu, not args.no_warm_up,
            True if args.head_start else (False if args.no_head_start else None), args.inputs,
        )  # fmt: skip
        return
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if args.bytecode:
        _compile_bytecode(root)
    with tempfile.TemporaryDirectory() as tmp:
        for run in args.runs.split(","):
            if run not in RUNS:
                sys.exit(f"--runs: unknown run {run!r}; choose from {', '.join(RUNS)}")
            env = dict(os.environ, EMBER_CACHE_DIR=os.path.join(tmp, "ember"), PYTHONPATH=_pythonpath(root))
            driver = os.path.join(tmp, "driver-" + ("fresh" if run == "warm-ember" else "kept"))
            if run in ("cold", "warm-ember"):
                subprocess.run(["rm", "-rf", driver], check=True)
            if run in ("cold", "cold-ember"):
                subprocess.run(["rm", "-rf", env["EMBER_CACHE_DIR"]], check=True)
            if args.build_threads is not None:
                env["EMBER_OPENCL_BUILD_THREADS"] = str(args.build_threads)
            if args.build_processes is not None:
                env["EMBER_OPENCL_BUILD_PROCESSES"] = str(args.build_processes)
            if args.bytecode:
                env.pop("PYTHONDONTWRITEBYTECODE", None)
            env.update(POCL_CACHE_DIR=os.path.join(driver, "pocl"), CUDA_CACHE_PATH=os.path.join(driver, "nv"))
            cmd = [sys.executable, "-m", "benchmarks.cold_start", "--device", args.device, "--child"]
            cmd += ["--gpu"] if args.gpu else []
            cmd += [] if args.family_after is None else ["--family-after", str(args.family_after)]
            cmd += ["--model-build-s", str(args.model_build_s)] if args.model_build_s else []
            cmd += ["--as-gpu"] if args.as_gpu else []
            cmd += ["--no-warm-up"] if args.no_warm_up else []
            cmd += ["--head-start"] if args.head_start else []
            cmd += ["--no-head-start"] if args.no_head_start else []
            cmd += ["--inputs", args.inputs]
            env["EMBER_COLD_START_SPAWNED"] = repr(time.time())
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=root)
            if done.returncode:
                sys.exit(f"{run} run failed:\n{done.stderr[-4000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            print(json.dumps({"run": run, "device": args.device, "size": size, **result}), flush=True)


def _compile_bytecode(root: str) -> None:
    """Compile ember's, its plugins', pyopencl's and pytools' modules to bytecode, as ``pip install``
    does (a venv or ``pip install --target --no-compile`` under ``PYTHONDONTWRITEBYTECODE=1`` has none:
    every process then compiles them, ~0.1-0.3 s)."""
    import compileall
    import importlib.util

    names = ("ember", "ember_opencl", "ember_cpu", "pyopencl", "pytools", "platformdirs", "siphash24")
    folders = [os.path.join(root, "benchmarks")]
    for name in names:
        spec = importlib.util.find_spec(name)
        folders += list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        compileall.compile_dir(folder, quiet=1, workers=0)


def _pythonpath(root: str) -> str:
    """The child's PYTHONPATH: the caller's, with the repository root first (for ``benchmarks``)."""
    parts = [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(parts)


# -- as a pytest plugin: the program cache's counters for the device under test ------------------
def pytest_addoption(parser: Any) -> None:
    parser.addoption("--cold-start-json", default=None, help="write the program cache's counters to this file")
    parser.addoption(
        "--family-after", type=int, default=None, help="set ember_opencl.runtime.FAMILY_AFTER (-1: no families)"
    )


def pytest_configure(config: Any) -> None:
    _family_after(config.getoption("--family-after"))


def pytest_sessionfinish(session: Any) -> None:
    spec = session.config.getoption("--ember-device", default=None)
    if not spec:
        return
    import ember as em
    from ember_opencl import runtime

    stats = {
        "device": spec,
        "family_after": runtime.FAMILY_AFTER if runtime.FAMILIES else -1,
        "wall_s": round(time.perf_counter() - T0, 1),
        **_program_stats(em.Device(spec)),
    }
    line = json.dumps(stats)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"program cache: {line}")
    where = session.config.getoption("--cold-start-json")
    if where:
        with open(where, "w", encoding="utf-8") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
