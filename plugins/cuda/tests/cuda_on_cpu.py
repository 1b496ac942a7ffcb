"""Run ember-cuda's attention kernels on the CPU: the CUDA source itself, compiled by g++ with
stand-ins for the built-ins, one std::thread per CUDA thread (128 a block, blocks one after
another), ``__syncthreads`` a barrier of the block and ``__shfl_xor_sync`` an exchange through
a per-warp buffer between two warp barriers (a lane missing from a shuffle or a barrier hangs,
and the run times out). Shared memory is a heap buffer of exactly the launch's size, filled with
NaN before every block (a read of a slot no thread wrote shows up in the result), and the
program is built with AddressSanitizer where g++ has it, so an index past a tile or past an
operand fails the run; or with ThreadSanitizer, which sees the barriers as synchronisation, so
two threads touching a shared-memory slot with no ``__syncthreads`` between them fail it (a
barrier taken out of the dK/dV kernel: 2 races reported). Slow (a thread switch per barrier):
small shapes only."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile

import numpy as np

_PRELUDE = r"""
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <limits>
struct alignas(16) float4 { float x, y, z, w; };
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
struct dim3_ { unsigned x; };
static thread_local dim3_ threadIdx, blockIdx;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __restrict__ __restrict
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static std::barrier<>* g_block;
static std::barrier<>* g_warp[4];
static float g_lanes[4][32];
static float4* g_smem;
static inline void __syncthreads() { g_block->arrive_and_wait(); }
static inline float __shfl_xor_sync(unsigned, float v, int o) {
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    g_lanes[w][lane] = v;
    g_warp[w]->arrive_and_wait();
    const float r = g_lanes[w][lane ^ o];
    g_warp[w]->arrive_and_wait();
    return r;
}
"""

_MAIN = r"""
static std::vector<float> read(const char* path, size_t n) {
    std::vector<float> v(n);
    FILE* f = fopen(path, "rb");
    if (!f || fread(v.data(), 4, n, f) != n) { fprintf(stderr, "cannot read %s\n", path); exit(2); }
    fclose(f);
    return v;
}
static void write(const char* path, const std::vector<float>& v) {
    FILE* f = fopen(path, "wb");
    fwrite(v.data(), 4, v.size(), f);
    fclose(f);
}
template <class F> static void launch(int grid, size_t smem_bytes, F body) {
    std::barrier<> block(128);
    std::barrier<> w0(32), w1(32), w2(32), w3(32);
    g_block = &block; g_warp[0] = &w0; g_warp[1] = &w1; g_warp[2] = &w2; g_warp[3] = &w3;
    std::vector<float4> smem(smem_bytes / 16);
    g_smem = smem.data();
    for (int b = 0; b < grid; ++b) {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        for (auto& x : smem) x = float4{nan, nan, nan, nan};
        std::vector<std::thread> threads;
        for (int t = 0; t < 128; ++t)
            threads.emplace_back([=] { threadIdx.x = t; blockIdx.x = b; body(); });
        for (auto& th : threads) th.join();
    }
}
int main(int argc, char** argv) {
    // argv: dir batch L S causal scale qscale smem_stats smem_dkdv smem_dq bn bm_q
    const char* dir = argv[1];
    const int batch = atoi(argv[2]), L = atoi(argv[3]), S = atoi(argv[4]), causal = atoi(argv[5]);
    const float scale = atof(argv[6]), qscale = atof(argv[7]);
    const size_t sm_stats = atol(argv[8]), sm_kv = atol(argv[9]), sm_q = atol(argv[10]);
    const int bn = atoi(argv[11]), bm_q = atoi(argv[12]);
    char p[4096];
    auto path = [&](const char* name) { snprintf(p, sizeof p, "%s/%s", dir, name); return p; };
    const size_t nq = (size_t)batch * L * HEAD, nk = (size_t)batch * S * HEAD;
    const std::vector<float> q = read(path("q"), nq), k = read(path("k"), nk), v = read(path("v"), nk),
                             g = read(path("g"), nq);
    std::vector<float> lse(batch * L), delta(batch * L), dq((size_t)batch * L * HEAD), dk((size_t)batch * S * HEAD),
        dv((size_t)batch * S * HEAD), o((size_t)batch * L * HEAD);
    const int t_stats = (L + 63) / 64, t_kv = (S + bn - 1) / bn, t_q = (L + bm_q - 1) / bm_q;
    launch(batch * t_stats, sm_stats, [&] {
        STATS_KERNEL(q.data(), k.data(), v.data(), g.data(), lse.data(), delta.data(), L, S, t_stats, qscale, causal,
                     S - L);
    });
    launch(batch * t_stats, sm_stats, [&] {
        FORWARD_KERNEL(q.data(), k.data(), v.data(), o.data(), L, S, t_stats, qscale, causal, S - L);
    });
    launch(batch * t_kv, sm_kv, [&] {
        DKDV_KERNEL(q.data(), k.data(), v.data(), g.data(), lse.data(), delta.data(), dk.data(), dv.data(), L, S,
                    t_kv, qscale, 1.f / 1.4426950408889634f, causal, S - L);
    });
    launch(batch * t_q, sm_q, [&] {
        DQ_KERNEL(q.data(), k.data(), v.data(), g.data(), lse.data(), delta.data(), dq.data(), L, S, t_q, qscale, scale,
                  causal, S - L);
    });
    write(path("lse"), lse); write(path("delta"), delta); write(path("o"), o);
    write(path("dq"), dq); write(path("dk"), dk); write(path("dv"), dv);
    return 0;
}
"""


def available() -> bool:
    return shutil.which("g++") is not None


def _namespace(src: str, tag: str) -> str:
    """One kernel source as a namespace of the program (each defines its own macros)."""
    src = src.replace("extern __shared__ float4 smem4[];", "float4* smem4 = g_smem;")
    src = src.replace('extern "C" ', "")
    return f"namespace {tag} {{\n{src}\n}}\n" + "".join(
        f"#undef {m}\n" for m in ("D", "BM", "BN", "QS", "KS", "DJ", "NEG_INF", "STATS", "RS", "POS_INF", "PS", "TS")
    )


@functools.cache
def _program(head: int, sanitizer: str | None) -> str:
    """The compiled program for ``head``: the stats and forward kernels and the backward's two."""
    from ember_cuda import attention, attention_backward

    text = _PRELUDE + f"#define HEAD {head}\n"
    text += _namespace(attention.source(head, stats=True), "st")
    text += _namespace(attention.source(head), "fw")
    text += _namespace(attention_backward.source(head), "bw")
    text += (
        f"#define HEAD {head}\n#define STATS_KERNEL st::ember_flash_attention_stats_d{head}\n"
        f"#define FORWARD_KERNEL fw::ember_flash_attention_d{head}\n"
        f"#define DKDV_KERNEL bw::ember_flash_attention_dkdv_d{head}\n"
        f"#define DQ_KERNEL bw::ember_flash_attention_dq_d{head}\n" + _MAIN
    )
    folder = tempfile.mkdtemp(prefix="ember-cuda-on-cpu-")
    cpp, exe = os.path.join(folder, "k.cpp"), os.path.join(folder, "k")
    with open(cpp, "w") as f:
        f.write(text)
    flags = ["-std=c++20", "-O1", "-pthread", "-Wno-unknown-pragmas", "-ffp-contract=off"]
    if sanitizer:
        flags += [f"-fsanitize={sanitizer}", "-fno-omit-frame-pointer"]
    done = subprocess.run(["g++", *flags, "-o", exe, cpp], capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"g++ failed:\n{done.stderr[-4000:]}")
    return exe


@functools.cache
def sanitizer_available(name: str = "address") -> bool:
    """Whether g++ links sanitizer ``name`` (address, thread) here."""
    folder = tempfile.mkdtemp(prefix="ember-asan-")
    src = os.path.join(folder, "a.cpp")
    with open(src, "w") as f:
        f.write("int main() { return 0; }\n")
    done = subprocess.run(
        ["g++", f"-fsanitize={name}", "-o", os.path.join(folder, "a"), src], capture_output=True, check=False
    )
    return done.returncode == 0


def run(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    g: np.ndarray,
    *,
    causal: bool,
    scale: float,
    sanitizer: str | None = "address",
) -> dict[str, np.ndarray]:
    """The kernels over (batch, L, D) / (batch, S, D) float32 arrays: lse, delta, o (the
    forward kernel's output), dq, dk, dv, each as the kernel wrote it. ``sanitizer``: address
    or thread (when g++ has it here), or None."""
    from ember_cuda import attention_backward as ab
    from ember_cuda.attention import _LOG2E

    batch, L, head = q.shape
    S = k.shape[1]
    exe = _program(head, sanitizer if sanitizer and sanitizer_available(sanitizer) else None)
    sizes = ab.shared_bytes(head)
    t = ab.tiles(head)
    with tempfile.TemporaryDirectory(prefix="ember-attn-") as folder:
        for name, a in (("q", q), ("k", k), ("v", v), ("g", g)):
            np.ascontiguousarray(a, dtype=np.float32).tofile(os.path.join(folder, name))
        args = [exe, folder, str(batch), str(L), str(S), str(int(causal)), repr(float(scale))]
        args += [repr(float(np.float32(scale * _LOG2E))), str(sizes["stats"]), str(sizes["dkdv"]), str(sizes["dq"])]
        args += [str(t["dkdv"][0]), str(t["dq"][0])]
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0", TSAN_OPTIONS="halt_on_error=1")
        done = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False, env=env)
        if done.returncode:
            raise RuntimeError(f"the kernels failed on the CPU ({done.returncode}):\n{done.stderr[-4000:]}")
        rows, keys = (batch, L), (batch, S, head)
        shapes = {"lse": rows, "delta": rows, "o": (batch, L, head), "dq": (batch, L, head), "dk": keys, "dv": keys}
        return {n: np.fromfile(os.path.join(folder, n), dtype=np.float32).reshape(s) for n, s in shapes.items()}
