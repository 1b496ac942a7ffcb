"""Temporary: why W3 on cuda runs ~2 ms slower after W2 in the same process."""

import gc
import statistics
import sys

import ember as em
from benchmarks import w2_mlp, w3_cnn
from benchmarks.harness import time_case

dev = em.Device(sys.argv[1] if len(sys.argv) > 1 else "cuda:0")


def pool_line():
    s = dev.memory_stats()
    pools = s.get("pools") or {}
    cached = sum(p.get("cached_bytes", 0) for p in pools.values()) >> 20
    reserved, in_use = s["reserved_bytes"] >> 20, s["in_use_bytes"] >> 20
    return f"reserved {reserved} MiB, in use {in_use} MiB, cached {cached} MiB, gc objects {len(gc.get_objects())}"


def w3(label, iters=30):
    case = w3_cnn.ember(dev, w3_cnn.SIZES["gpu"])
    t = statistics.median(time_case(case, 3, iters)) * 1e3
    del case
    gc.collect()
    print(f"{label:45s} W3 {t:7.3f} ms | {pool_line()}", flush=True)


def w2(label, iters=10):
    case = w2_mlp.ember(dev, w2_mlp.SIZES["gpu"])
    t = statistics.median(time_case(case, 3, iters)) * 1e3
    del case
    gc.collect()
    print(f"{label:45s} W2 {t:7.3f} ms | {pool_line()}", flush=True)


def torch_w2(label, iters=10):
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    case = w2_mlp.torch(torch.device("cuda"), w2_mlp.SIZES["gpu"])
    t = statistics.median(time_case(case, 3, iters)) * 1e3
    del case
    gc.collect()
    print(f"{label:45s} torch W2 {t:7.3f} ms | {pool_line()}", flush=True)


def torch_w3(label, iters=30):
    import torch

    case = w3_cnn.torch(torch.device("cuda"), w3_cnn.SIZES["gpu"])
    t = statistics.median(time_case(case, 3, iters)) * 1e3
    del case
    gc.collect()
    print(f"{label:45s} torch W3 {t:7.3f} ms | {pool_line()}", flush=True)


w3("first")
w2("W2")
w3("after ember W2")
import torch  # noqa: E402

w3("after import torch")
torch_w3("torch W3")
w3("after torch W3")
w3("again")
torch_w2("torch W2")
w3("after torch W2")
w3("again")
torch.cuda.empty_cache()
w3("after torch.cuda.empty_cache()")
