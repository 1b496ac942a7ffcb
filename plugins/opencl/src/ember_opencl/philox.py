"""``random_bits``: Philox 4x32-10 on the device, word for word ``ember.random.philox_words``.

Word ``i`` of a request is word ``i % 4`` of ``philox(counter + i // 4, key)`` with the
64-bit block number split into the first two counter words (low, high); each work item
computes one block and writes its four words.
"""

from __future__ import annotations

import numpy as np

from ember.dtypes import uint32

from .array import CLArray
from .runtime import Runtime

__all__ = ["random_bits", "SOURCE"]

SOURCE = """
__kernel void ember_philox(__global uint* restrict out, const ulong size, const uint k0_, const uint k1_,
                           const ulong counter) {
    const ulong block = get_global_id(0);
    const ulong first = block * 4;
    if (first >= size) return;
    const ulong c = counter + block;
    uint c0 = (uint)c, c1 = (uint)(c >> 32), c2 = 0, c3 = 0;
    uint k0 = k0_, k1 = k1_;
    for (int r = 0; r < 10; r++) {
        if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
        const uint hi0 = mul_hi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        const uint hi1 = mul_hi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        const uint n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
    }
    if (first + 4 <= size) {
        vstore4((uint4)(c0, c1, c2, c3), block, out);
    } else {
        out[first] = c0;
        if (first + 1 < size) out[first + 1] = c1;
        if (first + 2 < size) out[first + 2] = c2;
    }
}
"""


def random_bits(rt: Runtime, key: tuple[int, int], counter: int, size: int) -> CLArray:
    out = rt.empty((size,), uint32)
    if size == 0:
        return out
    knl, wg = rt.kernel(
        ("philox",), lambda: (SOURCE, "ember_philox", [None, np.uint64, np.uint32, np.uint32, np.uint64])
    )
    blocks = -(-size // 4)
    local = min(wg, 64 if rt.is_cpu else 256)
    groups = -(-blocks // local)
    rt.launch(
        knl,
        (groups * local,),
        (local,),
        [out.buf, size, key[0] & 0xFFFFFFFF, key[1] & 0xFFFFFFFF, counter & 0xFFFFFFFFFFFFFFFF],
    )
    return out
