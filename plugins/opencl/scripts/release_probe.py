"""Which buffer release crashes the driver: W3 or W4 through the opencl pool with every release tracked.

    W=w3 B=512 N=8 EMBER_FUSION=0 python -X faulthandler plugins/opencl/scripts/release_probe.py opencl:0
    W=w4 SIZE='{"batch": 32, "seq": 512, "d": 1024, "heads": 16, "d_ff": 4096}' N=4 ... release_probe.py opencl:0

Runs the workload's peers in turn (W3: eager, em.jit, eager; W4: eager twice), N steps each, so that the
pool's step plan is dropped between them. Every ``Runtime._release`` is checked against the buffers
released before (a second release of a live handle, a view released after its parent) and, with
``NOSUB=1``, views (sub-buffers) are not released explicitly but left to pyopencl. ``ALIGN`` overrides
the pool's alignment (NVIDIA's is 512 bytes). Written for the NVIDIA crash of 2026-12-06
(plugins/cuda/logs/h100-2026-12-06-pm/opencl-crash): no double release was seen; the explicit release of
a plan's views crashed; with NOSUB=1 the same runs passed once, and a later benchmark run crashed in the
views' destructor, so ember-opencl now makes no sub-buffers on NVIDIA's platform (EMBER_OPENCL_SUB_BUFFERS).
"""

import json
import os
import sys
import traceback

import pyopencl as cl

from ember_opencl import runtime as rt

released: dict[int, str] = {}  # int_ptr -> where it was released
parent_of: dict[int, int] = {}
_sub = cl.Buffer.get_sub_region


def sub(self, origin, size, flags=0):  # noqa: ANN001, ANN201
    b = _sub(self, origin, size, flags)
    parent_of[b.int_ptr] = self.int_ptr
    released.pop(b.int_ptr, None)
    return b


_release = rt.Runtime._release


def release(self, buf):  # noqa: ANN001, ANN201
    p = buf.int_ptr
    if p in released:
        now = "".join(traceback.format_stack(limit=12))
        print("DOUBLE RELEASE", hex(p), "first at:\n", released[p], "now at:\n", now)
        raise SystemExit(3)
    par = parent_of.get(p)
    if par is not None and par in released:
        print("VIEW RELEASED AFTER ITS PARENT", hex(p), "".join(traceback.format_stack(limit=12)))
        raise SystemExit(4)
    released[p] = "".join(traceback.format_stack(limit=12))
    if os.environ.get("NOSUB") and par is not None:
        return None  # the view's Python object releases it when it dies
    return _release(self, buf)


_allocate = rt.Runtime._allocate


def allocate(self, *a, **k):  # noqa: ANN002, ANN003, ANN001, ANN201
    b = _allocate(self, *a, **k)
    released.pop(b.int_ptr, None)  # a handle the driver reuses
    parent_of.pop(b.int_ptr, None)
    return b


cl.Buffer.get_sub_region = sub
rt.Runtime._release = release
rt.Runtime._allocate = allocate

import ember as em  # noqa: E402
from benchmarks import w3_cnn, w4_transformer  # noqa: E402
from ember.memory import pool as _pool  # noqa: E402

_init = _pool.BufferPool.__init__


def init(self, *a, **k):  # noqa: ANN002, ANN003, ANN001, ANN201
    if k.get("alignment"):
        k["alignment"] = int(os.environ.get("ALIGN", k["alignment"]))
    _init(self, *a, **k)


_pool.BufferPool.__init__ = init

size = json.loads(os.environ["SIZE"]) if "SIZE" in os.environ else {"batch": int(os.environ.get("B", "64"))}
dev = em.Device(sys.argv[1])
W = os.environ.get("W", "w3")
peers = (w3_cnn.ember, w3_cnn.ember_jit, w3_cnn.ember) if W == "w3" else (w4_transformer.ember, w4_transformer.ember)
for build in peers:
    case = build(dev, size)
    for _ in range(int(os.environ.get("N", "6"))):
        case.step()
        case.sync()
    print(build.__name__, "ok", flush=True)
    del case
print("no double release seen", len(released))
