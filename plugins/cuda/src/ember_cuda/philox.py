"""``random_bits``: Philox 4x32-10 on the GPU, word for word ``ember.random.philox_words``.

Word ``i`` of a request is word ``i % 4`` of ``philox(counter + i // 4, key)`` with the 64-bit
block number split into the first two counter words (low, high); each thread computes one block
and writes its four words, so every backend draws the same numbers from the same seed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["random_bits", "SOURCE"]

SOURCE = r"""
extern "C" __global__ void ember_philox(unsigned int* __restrict__ out, const unsigned long long size,
                                        const unsigned int k0_, const unsigned int k1_,
                                        const unsigned long long counter) {
    const unsigned long long block = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long first = block * 4;
    if (first >= size) return;
    const unsigned long long c = counter + block;
    unsigned int c0 = (unsigned int)c, c1 = (unsigned int)(c >> 32), c2 = 0, c3 = 0;
    unsigned int k0 = k0_, k1 = k1_;
    for (int r = 0; r < 10; r++) {
        if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
        const unsigned int hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        const unsigned int hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        const unsigned int n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
    }
    out[first] = c0;
    if (first + 1 < size) out[first + 1] = c1;
    if (first + 2 < size) out[first + 2] = c2;
    if (first + 3 < size) out[first + 3] = c3;
}
"""

_KERNEL: list[Any] = []


def random_bits(cp: Any, key: tuple[int, int], counter: int, size: int) -> Any:
    """``size`` uint32 words of the stream ``(key, counter)`` as a CuPy array."""
    out = cp.empty((size,), dtype=cp.uint32)
    if size == 0:
        return out
    if not _KERNEL:
        _KERNEL.append(cp.RawKernel(SOURCE, "ember_philox"))
    blocks = -(-size // 4)
    threads = 256
    _KERNEL[0](
        (-(-blocks // threads),),
        (threads,),
        (
            out,
            cp.uint64(size),
            cp.uint32(key[0] & 0xFFFFFFFF),
            cp.uint32(key[1] & 0xFFFFFFFF),
            cp.uint64(counter & 0xFFFFFFFFFFFFFFFF),
        ),
    )
    return out
