import numpy as np, time, torch, timeit
torch.set_num_threads(1)
p = np.random.rand(1024,1024).astype(np.float32); g = np.random.rand(1024,1024).astype(np.float32)
out = np.empty_like(p)
def best(f, n=50):
    return min(timeit.repeat(f, number=1, repeat=n))*1e3
print("np p - 0.01*g", best(lambda: p - np.float32(0.01)*g))
print("np multiply+subtract out", best(lambda: (np.multiply(g, np.float32(0.01), out=out), np.subtract(p, out, out=out))))
tp, tg = torch.from_numpy(p.copy()), torch.from_numpy(g)
print("torch add_", best(lambda: tp.add_(tg, alpha=-0.01)))
print("torch p - 0.01*g", best(lambda: tp - 0.01*tg))
import importlib.util, glob
spec = importlib.util.spec_from_file_location("k", "/root/.cache/ember/cpu-numba/ember_cpu_fused_6d22472b16e74c93ef2bba9e.py")
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
n = p.size
m.ember_fused(n, g.reshape(-1), np.float32(0.01), p.reshape(-1), out.reshape(-1))
print("numba fused", best(lambda: m.ember_fused(n, g.reshape(-1), np.float32(0.01), p.reshape(-1), out.reshape(-1))))
print("numba fused inplace", best(lambda: m.ember_fused(n, g.reshape(-1), np.float32(0.01), p.reshape(-1), p.reshape(-1))))
y = np.random.randn(128,1024).astype(np.float32); gg = np.random.randn(128,1024).astype(np.float32)
print("np where(y>0,g,0)", best(lambda: np.where(y > 0, gg, np.float32(0))))
print("np g*(y>0)", best(lambda: gg * (y > 0)))
ty, tgg = torch.from_numpy(y), torch.from_numpy(gg)
print("torch threshold_backward", best(lambda: torch.ops.aten.threshold_backward(tgg, ty, 0)))
