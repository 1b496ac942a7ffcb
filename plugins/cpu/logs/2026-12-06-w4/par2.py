import time, numpy as np
from ember_cpu import attention as at
rng = np.random.default_rng(0)
qkv = rng.standard_normal((8, 128, 768)).astype(np.float32)
q, k, v = (qkv[..., i*256:(i+1)*256].reshape(8, 128, 4, 64).transpose(0, 2, 1, 3) for i in range(3))
g = rng.standard_normal((8, 4, 128, 64)).astype(np.float32)
def fb():
    at.attention_forward(q, k, v, None, is_causal=False, scale=0.125); at.attention_backward(g, q, k, v, None, is_causal=False, scale=0.125)
real = at._WORKERS.threads
res = {"workers": [], "serial": []}
fb()
for r in range(200):
    for name in res:
        at._WORKERS.threads = real if name == "workers" else (lambda: 1)
        s = time.perf_counter(); fb(); res[name].append(time.perf_counter() - s)
for k_, v_ in res.items():
    v_ = np.array(v_) * 1e3; print(k_, "min %.2f p10 %.2f p25 %.2f median %.2f" % (v_.min(), np.percentile(v_, 10), np.percentile(v_, 25), np.median(v_)))
